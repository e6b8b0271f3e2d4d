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


def wait_udp(addr, port, timeout=30.0, proc=None, step=0.1):
    """Waits until a DNS server answers a SOA query for '.' (any answer counts); gives up
    early when `proc` (a Popen) has exited."""
    q = b"\xab\xcd\x00\x00\x00\x01\x00\x00\x00\x00\x00\x00\x00\x00\x06\x00\x01"
    end = time.time() + timeout
    while time.time() < end:
        if proc is not None and proc.poll() is not None:
            return False
        s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        s.settimeout(0.2)
        try:
            s.sendto(q, (addr, port))
            s.recvfrom(512)
            return True
        except OSError:
            time.sleep(step)
        finally:
            s.close()
    return False


def sched_prefix(kind="server"):
    """How benchmark processes are scheduled on these shared cores, where other engineers'
    builds keep both CPUs busy. Servers and the low-rate legitimate clients and probes run
    SCHED_FIFO (chrt -f 10): woken by a packet, they run at once instead of waiting up to a
    scheduler slice (~3 ms) behind a compiler, which would otherwise dominate every p99.
    CPU-bound load generators (dnsperf, floods) stay in the normal class at nice -10, so they
    reach their set rates beside a build yet never starve anything. BENCH_SCHED=nice runs
    everything in the normal class (servers and clients at nice -10, load at nice -5);
    BENCH_SCHED=none changes nothing. Needs root, else nothing."""
    mode = os.environ.get("BENCH_SCHED", "fifo")
    if os.geteuid() != 0 or mode == "none":
        return []
    if kind in ("server", "legit"):
        if mode == "fifo" and shutil.which("chrt"):
            return ["chrt", "-f", "10"]
        return ["nice", "-n", "-10"]
    return ["nice", "-n", "-10" if mode == "fifo" else "-5"]


def progress(msg):
    """A one-line progress display, when a terminal watches (directly or via bench/run);
    an empty `msg` clears it."""
    if sys.stderr.isatty() or os.environ.get("BENCH_TTY") == "1":
        sys.stderr.write("\r\033[K" + msg)
        sys.stderr.flush()


def done_progress():
    """Clears the progress line."""
    progress("")


def measuring_thread_fifo(on):
    """Puts the calling thread (the probe or poll loop, not the processes it has already
    started) in SCHED_FIFO like the servers and legitimate clients (see sched_prefix),
    so that a compiler's time slice does not stretch what it times; back to normal with
    on=False. Only as root with BENCH_SCHED=fifo (the default)."""
    if os.geteuid() != 0 or os.environ.get("BENCH_SCHED", "fifo") != "fifo":
        return
    try:
        if on:
            os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(10))
        else:
            os.sched_setscheduler(0, os.SCHED_OTHER, os.sched_param(0))
    except OSError:
        pass


def sched_note():
    """One line for reports: how processes were scheduled."""
    mode = os.environ.get("BENCH_SCHED", "fifo")
    if os.geteuid() != 0 or mode == "none":
        return "default scheduling"
    if mode == "fifo":
        return ("servers and legitimate clients SCHED_FIFO (chrt -f 10), load generators "
                "nice -10")
    return "servers and legitimate clients nice -10, load generators nice -5"


def niced(argv, kind="server", cpu=None):
    """`argv` prefixed with its scheduling (see sched_prefix) and taskset.
    kind: server, legit (low-rate clients, probes) or load (dnsperf, floods)."""
    pre = sched_prefix(kind)
    if cpu is not None:
        pre += ["taskset", "-c", str(cpu)]
    return pre + argv


class Server:
    """A server process pinned to a CPU (scheduled as sched_prefix says), stopped on exit."""

    def __init__(self, name, argv, cpu, env=None, cwd=None):
        self.name = name
        self.argv = niced(argv, "server", cpu)
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


def knot_conf(tmp, addr, port, zones, rrl=None, cookies=False, workers=1):
    """A knotd config. addr: one address or a list; zones: list of (origin, file);
    rrl: dict(rate_limit=..., slip=...) for mod-rrl (None: off); cookies: mod-cookies."""
    addrs = [addr] if isinstance(addr, str) else list(addr)
    listen = ", ".join(f"{a}@{port}" for a in addrs)
    lines = [
        "server:",
        f"    listen: [ {listen} ]",
        f"    rundir: {tmp}",
        f"    udp-workers: {workers}",
        "    tcp-workers: 1",
        "    background-workers: 1",
        "database:",
        f"    storage: {tmp}",
        "log:",
        "  - target: stderr",
        "    any: warning",
    ]
    modules = []
    if rrl:
        lines += ["mod-rrl:", "  - id: default", f"    rate-limit: {rrl['rate_limit']}",
                  f"    slip: {rrl.get('slip', 2)}"]
        modules.append("mod-rrl/default")
    if cookies:
        lines += ["mod-cookies:", "  - id: default"]
        modules.append("mod-cookies/default")
    if modules:
        lines += ["template:", "  - id: default", f"    global-module: [ {', '.join(modules)} ]"]
    lines += ["zone:"]
    for origin, f in zones:
        lines += [f"  - domain: {origin}", f"    file: {f}"]
    path = os.path.join(tmp, "knot.conf")
    with open(path, "w") as fh:
        fh.write("\n".join(lines) + "\n")
    return path


def knot_all_cores(conf, extra_template=""):
    """Rewrites the knotd config `conf` (from knot_conf) to load on every core: as many
    background workers as cores and semantic checks off; `extra_template` adds lines
    (indented four spaces) to its default template."""
    with open(conf) as f:
        text = f.read()
    text = text.replace("background-workers: 1", f"background-workers: {os.cpu_count()}")
    text = text.replace("zone:\n", "template:\n  - id: default\n    semantic-checks: off\n"
                        + extra_template + "zone:\n", 1)
    with open(conf, "w") as f:
        f.write(text)


def nsd_conf(tmp, addr, port, zones, rrl=0, extra="", slip=2, cookies=False):
    """An nsd config. addr: one address or a list; rrl = responses per second per /24
    (0: off, and the whitelist limit off too); cookies: answer-cookie."""
    addrs = [addr] if isinstance(addr, str) else list(addr)
    lines = ["server:"]
    lines += [f"    ip-address: {a}@{port}" for a in addrs]
    lines += [
        "    server-count: 1",
        '    username: ""',
        '    database: ""',
        f'    pidfile: "{tmp}/nsd.pid"',
        f'    xfrdfile: "{tmp}/xfrd.state"',
        f'    zonelistfile: "{tmp}/zone.list"',
        f"    rrl-ratelimit: {rrl}",
        "    verbosity: 0",
    ]
    if rrl:
        lines += [f"    rrl-slip: {slip}", "    rrl-ipv4-prefix-length: 24",
                  "    rrl-ipv6-prefix-length: 64"]
    else:
        lines += ["    rrl-whitelist-ratelimit: 0"]
    if cookies:
        lines += ["    answer-cookie: yes"]
    if extra:
        lines += extra.splitlines()
    lines += ["remote-control:", "    control-enable: no"]
    for origin, f in zones:
        lines += ["zone:", f"    name: {origin}", f"    zonefile: {f}"]
    path = os.path.join(tmp, "nsd.conf")
    with open(path, "w") as fh:
        fh.write("\n".join(lines) + "\n")
    return path


def dnsd_conf(tmp, addrs, port, zones, extra="", metrics=None, zone_extra=""):
    """A dnsd config; addrs: list of addresses or prefixes; extra: TOML sections
    (e.g. [defence.rrl]); metrics: "IP:PORT" for /metrics; zone_extra: lines for every
    [[zone]] (e.g. tenant = 7)."""
    listen = ", ".join(f'"{a}"' for a in addrs)
    lines = ["[server]", f"listen = [{listen}]", f"port = {port}", "workers = 1"]
    if extra:
        lines += extra.splitlines()
    for origin, f in zones:
        lines += ["[[zone]]", f'origin = "{origin}"', f'file = "{f}"']
        if zone_extra:
            lines += zone_extra.splitlines()
    lines += ["[control]", f'socket = "{tmp}/dnsd.sock"']
    if metrics:
        lines += ["[metrics]", f'listen = "{metrics}"']
    path = os.path.join(tmp, "dnsd.toml")
    with open(path, "w") as fh:
        fh.write("\n".join(lines) + "\n")
    return path


RRL_OFF = "[defence.rrl]\nenabled = false"
DEFENCES = """[defence.rrl]
enabled = true
responses_per_second = 20
slip = 2
window = 1
ipv4_prefix = 24
ipv6_prefix = 56
exempt = []
[defence.cookies]
enabled = true
[defence.random_subdomain]
enabled = true"""

_accepts = {}


def dnsd_accepts(extra):
    """Whether this dnsd build accepts the config sections `extra` (tried once, cached):
    starts dnsd on a scratch port and sees whether it answers or exits with an error.
    Returns (True, "") or (False, the error dnsd printed)."""
    if extra in _accepts:
        return _accepts[extra]
    tmp = tempfile.mkdtemp(prefix="palisade-probe-")
    zone = os.path.join(tmp, "probe.test.zone")
    with open(zone, "w") as f:
        f.write("$ORIGIN probe.test.\n$TTL 60\n@ SOA ns hm 1 60 60 60 60\n@ NS ns\nns A 192.0.2.1\n")
    port = free_udp_port()
    conf = dnsd_conf(tmp, ["127.0.0.1"], port, [("probe.test.", zone)], extra=extra)
    proc = subprocess.Popen([dnsd_bin(), "serve", "-c", conf], stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, start_new_session=True)
    ok = wait_udp("127.0.0.1", port, timeout=5.0, proc=proc)
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGTERM)
    try:
        out = proc.communicate(timeout=5)[0].decode(errors="replace")
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out = proc.communicate()[0].decode(errors="replace")
    shutil.rmtree(tmp, ignore_errors=True)
    err = "" if ok else (out.strip().splitlines() or ["dnsd did not answer"])[-1][-300:]
    _accepts[extra] = (ok, err)
    return _accepts[extra]


def fleet_key(tmp):
    """A fleet key file in `tmp` (what `dnsd redis-key generate` writes: 32 random bytes as
    hex, mode 0600), for `[redis] key_file`; the same path on every call for one `tmp`."""
    path = os.path.join(tmp, "fleet.key")
    if not os.path.exists(path):
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write(os.urandom(32).hex() + "\n")
    return path


def free_udp_port():
    """A UDP port free on 127.0.0.1 now (and its TCP twin, usually)."""
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def bin_path(name):
    return os.path.join(ROOT, "target", "release", name)


def dnsd_bin():
    return bin_path("dnsd")


def run_dnsperf(addr, port, qfile, seconds, cpu, clients=4, outstanding=200, extra=()):
    """Runs dnsperf pinned to `cpu` (`extra`: more flags, e.g. -D for DO); returns
    (completed, lost, qps)."""
    out = subprocess.run(
        niced(["dnsperf", "-s", addr, "-p", str(port), "-d", qfile,
         "-l", str(seconds), "-c", str(clients), "-q", str(outstanding), "-t", "2", *extra],
              "load", cpu),
        capture_output=True, text=True, check=False)
    text = out.stdout + out.stderr
    completed = int(re.search(r"Queries completed:\s+(\d+)", text).group(1))
    lost = int(re.search(r"Queries lost:\s+(\d+)", text).group(1))
    qps = float(re.search(r"Queries per second:\s+([\d.]+)", text).group(1))
    return completed, lost, qps


def udp_flood(src, dst, port, msgs, n):
    """Sends `n` datagrams from `src` to `dst`:`port`, cycling through `msgs`, draining the
    answers as they come (pacing the sender by them) and for up to 2 s after; the number of
    answers."""
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.bind((src, 0))
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1 << 24)
    s.setblocking(False)
    got = 0
    k = len(msgs)
    for i in range(n):
        s.sendto(msgs[i % k], (dst, port))
        if i & 63 == 63:
            while True:
                try:
                    s.recv(4096)
                    got += 1
                except BlockingIOError:
                    break
            if i - got > 2000:
                time.sleep(0.0005)
    end = time.monotonic() + 2
    while got < n and time.monotonic() < end:
        try:
            s.recv(4096)
            got += 1
        except BlockingIOError:
            time.sleep(0.001)
    s.close()
    return got


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


def dns_query(qname, qtype=6, qid=0x4242):
    """A plain DNS query (no EDNS) as bytes."""
    q = qid.to_bytes(2, "big") + b"\x00\x00\x00\x01\x00\x00\x00\x00\x00\x00"
    for label in qname.strip(".").split("."):
        if label:
            q += bytes([len(label)]) + label.encode()
    return q + b"\x00" + qtype.to_bytes(2, "big") + b"\x00\x01"


def wait_answer(addr, port, qname, qtype=6, timeout=60.0, proc=None, each=0.02):
    """Waits until `addr` answers `qname`/`qtype` with NOERROR and a non-empty answer
    section (a zone actually loaded); polls every `each` seconds. Returns the seconds
    waited, or None on timeout or when `proc` exits."""
    q = dns_query(qname, qtype)
    t0 = time.monotonic()
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.settimeout(each)
    try:
        while time.monotonic() - t0 < timeout:
            if proc is not None and proc.poll() is not None:
                return None
            try:
                s.sendto(q, (addr, port))
                while True:
                    r, _ = s.recvfrom(4096)
                    if r[:2] == q[:2] and r[3] & 15 == 0 and (r[6] << 8 | r[7]) > 0:
                        return time.monotonic() - t0
            except OSError:
                pass
    finally:
        s.close()
    return None


def idle_snapshot():
    """(monotonic ns, {cpu: ns idle, waiting for I/O or stolen}) for busy_seconds."""
    t = time.monotonic_ns()
    tick = 1e9 / os.sysconf("SC_CLK_TCK")
    out = {}
    with open("/proc/stat") as f:
        for line in f:
            if line.startswith("cpu") and line[3].isdigit():
                p = line.split()
                out[int(p[0][3:])] = (int(p[4]) + int(p[5]) + int(p[8])) * tick
    return t, out


def busy_seconds(a, b):
    """CPU seconds busy on every CPU between two idle_snapshot()s: wall time minus idle time.
    With NO_HZ the kernel measures idle from idle entry and exit, so this is exact to /proc/
    stat's 10 ms, where its busy fields (user, system, softirq) are sampled at each tick
    (CONFIG_TICK_CPU_ACCOUNTING here, 250 Hz): a load paced in bursts, as a packet generator's,
    is counted busy or idle by the phase of its bursts against the tick — two modes, run to
    run. Stolen time (the host running something else) is not counted busy."""
    (t0, i0), (t1, i1) = a, b
    wall = (t1 - t0) / 1e9
    return sum(max(0.0, wall - (i1[c] - i0[c]) / 1e9) for c in i1 if c in i0)


def proc_stat_cpus():
    """Per-CPU (busy, total) in jiffies, for differences between two calls: total is wall
    time, busy is wall time minus idle, I/O wait and stolen time (see busy_seconds: /proc/stat's
    own busy fields are sampled at the tick here)."""
    hz = os.sysconf("SC_CLK_TCK")
    now = time.monotonic() * hz
    out = {}
    with open("/proc/stat") as f:
        for line in f:
            if line.startswith("cpu") and line[3].isdigit():
                p = line.split()
                idle = int(p[4]) + int(p[5]) + int(p[8])
                out[int(p[0][3:])] = (now - idle, now)
    return out


class CpuSampler:
    """Samples a process group's CPU time and every CPU's busy time each `period` s in a
    background thread, so a run can report server CPU per second and how busy CPU 0 was
    with other work (other engineers' builds share these cores)."""

    def __init__(self, pgid, period=1.0):
        import threading
        self.pgid = pgid
        self.period = period
        self.samples = []  # (wall, server_cpu_ns, {cpu: (busy, total)})
        self._stop = threading.Event()
        self._t = threading.Thread(target=self._run, daemon=True)

    def _sample(self):
        self.samples.append((time.time(), cpu_ns(self.pgid), proc_stat_cpus()))

    def _run(self):
        while not self._stop.is_set():
            self._sample()
            self._stop.wait(self.period)

    def start(self):
        self._t.start()
        return self

    def stop(self):
        self._stop.set()
        self._t.join()
        self._sample()

    def between(self, t_from, t_to, cpu=0):
        """(server CPU share, other work on `cpu` share) between two wall times."""
        pts = [s for s in self.samples if t_from - 0.01 <= s[0] <= t_to + self.period]
        if len(pts) < 2:
            return None, None
        a, b = pts[0], pts[-1]
        wall = b[0] - a[0]
        srv = (b[1] - a[1]) / 1e9 / wall if wall > 0 else 0.0
        hz = os.sysconf("SC_CLK_TCK")
        other = None
        if cpu in a[2] and cpu in b[2]:
            busy = (b[2][cpu][0] - a[2][cpu][0]) / hz / wall
            other = max(0.0, busy - srv)
        return srv, other

    def series(self, t0):
        """Per-sample (seconds since t0, server CPU share) list."""
        out = []
        for a, b in zip(self.samples, self.samples[1:]):
            wall = b[0] - a[0]
            if wall > 0:
                out.append((round(b[0] - t0, 2), round((b[1] - a[1]) / 1e9 / wall, 4)))
        return out


def udp_drops(port):
    """Kernel receive-queue drops of every UDP socket bound to `port`, by local address,
    from /proc/net/udp (works for any server, not just dnsd)."""
    out = {}
    try:
        with open("/proc/net/udp") as f:
            next(f)
            for line in f:
                parts = line.split()
                ip_hex, port_hex = parts[1].split(":")
                if int(port_hex, 16) != port:
                    continue
                ip = socket.inet_ntoa(int(ip_hex, 16).to_bytes(4, "little"))
                out[ip] = out.get(ip, 0) + int(parts[-1])
    except OSError:
        pass
    return out


def ctl(sock, *args, timeout=10.0):
    """One control-socket request (JSON line in, JSON line out), as `dnsd ctl` sends it."""
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(timeout)
    try:
        s.connect(sock)
        s.sendall((json.dumps({"args": list(args)}) + "\n").encode())
        buf = b""
        while not buf.endswith(b"\n"):
            d = s.recv(65536)
            if not d:
                break
            buf += d
    finally:
        s.close()
    r = json.loads(buf)
    if not r.get("ok"):
        raise RuntimeError(f"dnsd ctl {' '.join(args)}: {r.get('text', '').strip()}")
    return r["text"]


def ctl_stats(sock):
    """`dnsd ctl stats` as a dict of its integer counters."""
    out = {}
    for line in ctl(sock, "stats").splitlines():
        k, _, v = line.partition("\t")
        try:
            out[k.strip()] = int(v)
        except ValueError:
            pass
    return out


def scrape(url, timeout=5.0):
    """Prometheus text from `url` as {series: value}; {} when unreachable."""
    import urllib.request
    try:
        with urllib.request.urlopen(url, timeout=timeout) as r:
            text = r.read().decode()
    except OSError:
        return {}
    out = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            k, _, v = line.rpartition(" ")
            try:
                out[k] = float(v)
            except ValueError:
                pass
    return out


def pss_kb(pgid):
    """Proportional set size summed over process group `pgid`, in KiB (shared pages of
    forked workers counted once)."""
    total = 0
    for pid in group_pids(pgid):
        try:
            with open(f"/proc/{pid}/smaps_rollup") as f:
                for line in f:
                    if line.startswith("Pss:"):
                        total += int(line.split()[1])
        except OSError:
            pass
    return total


def quick():
    """True when the run asked for short durations (bench/run --quick)."""
    return os.environ.get("BENCH_QUICK") == "1"


def percentile(sorted_vals, p):
    """The p-quantile (0..1) of an already sorted list (nearest rank); None if empty."""
    if not sorted_vals:
        return None
    i = min(len(sorted_vals) - 1, max(0, int(round(p * (len(sorted_vals) - 1)))))
    return sorted_vals[i]
