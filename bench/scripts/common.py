"""Shared pieces of the benchmark scripts: starting servers, measuring CPU, dnsperf.

Every server runs in the foreground from a config written to a temporary directory, on a
loopback address, pinned to one CPU; the load generator is pinned to the other. CPU time
is read from /proc/PID/task/*/schedstat (nanoseconds on CPU, all threads).
"""
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
REPORT = os.path.join(ROOT, "bench", "report")
RAW = os.path.join(REPORT, "raw")


def log(msg):
    print(msg, file=sys.stderr, flush=True)


def group_pids(pgid):
    """Every process in process group `pgid` (servers such as NSD fork their workers)."""
    pids = []
    for p in os.listdir("/proc"):
        if not p.isdigit():
            continue
        try:
            with open(f"/proc/{p}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            if int(fields[2]) == pgid:
                pids.append(int(p))
        except (OSError, IndexError, ValueError):
            pass
    return pids


def cpu_ns(pgid):
    """CPU time of every thread of every process in group `pgid`, in nanoseconds."""
    total = 0
    for pid in group_pids(pgid):
        try:
            for t in os.listdir(f"/proc/{pid}/task"):
                try:
                    with open(f"/proc/{pid}/task/{t}/schedstat") as f:
                        total += int(f.read().split()[0])
                except OSError:
                    pass
        except OSError:
            pass
    return total


def rss_kb(pgid):
    """Peak resident memory (VmHWM) summed over process group `pgid`, in KiB."""
    total = 0
    for pid in group_pids(pgid):
        try:
            with open(f"/proc/{pid}/status") as f:
                for line in f:
                    if line.startswith("VmHWM:"):
                        total += int(line.split()[1])
        except OSError:
            pass
    return total


def wait_udp(addr, port, timeout=30.0):
    """Waits until a DNS server answers a SOA query for '.' (any answer counts)."""
    q = b"\xab\xcd\x00\x00\x00\x01\x00\x00\x00\x00\x00\x00\x00\x00\x06\x00\x01"
    end = time.time() + timeout
    while time.time() < end:
        s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        s.settimeout(0.2)
        try:
            s.sendto(q, (addr, port))
            s.recvfrom(512)
            return True
        except OSError:
            time.sleep(0.1)
        finally:
            s.close()
    return False


class Server:
    """A server process pinned to a CPU, stopped on exit."""

    def __init__(self, name, argv, cpu, env=None, cwd=None):
        self.name = name
        self.argv = ["taskset", "-c", str(cpu)] + argv
        self.log = tempfile.NamedTemporaryFile(prefix=f"bench-{name}-", suffix=".log", delete=False)
        self.proc = subprocess.Popen(self.argv, stdout=self.log, stderr=subprocess.STDOUT,
                                     env=env, cwd=cwd, start_new_session=True)

    @property
    def pid(self):
        return self.proc.pid

    def stop(self):
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(5)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()

    def tail(self):
        self.log.flush()
        with open(self.log.name, errors="replace") as f:
            return f.read()[-2000:]


def knot_conf(tmp, addr, port, zones, extra_module=""):
    """A knotd config (zones: list of (origin, file))."""
    lines = [
        "server:",
        f"    listen: {addr}@{port}",
        f"    rundir: {tmp}",
        "    udp-workers: 1",
        "    tcp-workers: 1",
        "    background-workers: 1",
        "database:",
        f"    storage: {tmp}",
        "log:",
        "  - target: stderr",
        "    any: warning",
    ]
    if extra_module:
        lines += extra_module.splitlines()
    lines += ["zone:"]
    for origin, f in zones:
        lines += [f"  - domain: {origin}", f"    file: {f}"]
        if extra_module:
            lines += ["    global-module: mod-rrl/default"] if "mod-rrl" in extra_module else []
    path = os.path.join(tmp, "knot.conf")
    with open(path, "w") as fh:
        fh.write("\n".join(lines) + "\n")
    return path


def nsd_conf(tmp, addr, port, zones, rrl=0, extra=""):
    """An nsd config; rrl = responses per second per /24 (0: off)."""
    lines = [
        "server:",
        f"    ip-address: {addr}@{port}",
        "    server-count: 1",
        '    username: ""',
        '    database: ""',
        f'    pidfile: "{tmp}/nsd.pid"',
        f'    xfrdfile: "{tmp}/xfrd.state"',
        f'    zonelistfile: "{tmp}/zone.list"',
        f"    rrl-ratelimit: {rrl}",
        "    verbosity: 0",
    ]
    if extra:
        lines += extra.splitlines()
    lines += ["remote-control:", "    control-enable: no"]
    for origin, f in zones:
        lines += ["zone:", f"    name: {origin}", f"    zonefile: {f}"]
    path = os.path.join(tmp, "nsd.conf")
    with open(path, "w") as fh:
        fh.write("\n".join(lines) + "\n")
    return path


def dnsd_conf(tmp, addrs, port, zones, extra=""):
    """A dnsd config; addrs: list of addresses or prefixes."""
    listen = ", ".join(f'"{a}"' for a in addrs)
    lines = ["[server]", f"listen = [{listen}]", f"port = {port}", "workers = 1"]
    if extra:
        lines += extra.splitlines()
    for origin, f in zones:
        lines += ["[[zone]]", f'origin = "{origin}"', f'file = "{f}"']
    lines += ["[control]", f'socket = "{tmp}/dnsd.sock"']
    path = os.path.join(tmp, "dnsd.toml")
    with open(path, "w") as fh:
        fh.write("\n".join(lines) + "\n")
    return path


def run_dnsperf(addr, port, qfile, seconds, cpu, clients=4, outstanding=200):
    """Runs dnsperf pinned to `cpu`; returns (completed, lost, qps)."""
    out = subprocess.run(
        ["taskset", "-c", str(cpu), "dnsperf", "-s", addr, "-p", str(port), "-d", qfile,
         "-l", str(seconds), "-c", str(clients), "-q", str(outstanding), "-t", "2"],
        capture_output=True, text=True, check=False)
    text = out.stdout + out.stderr
    completed = int(re.search(r"Queries completed:\s+(\d+)", text).group(1))
    lost = int(re.search(r"Queries lost:\s+(\d+)", text).group(1))
    qps = float(re.search(r"Queries per second:\s+([\d.]+)", text).group(1))
    return completed, lost, qps


def save(name, data):
    os.makedirs(RAW, exist_ok=True)
    with open(os.path.join(RAW, name + ".json"), "w") as f:
        json.dump(data, f, indent=1)


def machine():
    return f"{os.cpu_count()} cores, kernel {os.uname().release}"


def need(*tools):
    missing = [t for t in tools if shutil.which(t) is None]
    if missing:
        log(f"missing tools: {' '.join(missing)} (run scripts/install-deps)")
        sys.exit(2)
