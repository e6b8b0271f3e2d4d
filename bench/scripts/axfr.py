#!/usr/bin/env python3
"""Zone transfer benchmark, dnsd beside Knot DNS, on a generated zone (1M records; 200k
with --quick):

- AXFR out: the zone transferred out of dnsd and out of Knot (`kdig +tcp AXFR`, pinned to
  CPU 1; servers pinned to CPU 0): wall time of the transfer, server CPU time during it,
  the server's peak RSS during it (sampled every 10 ms) and its growth over the RSS before;
  median of RUNS.
- Transfer in: dnsd, and Knot for comparison, as a secondary receiving the zone from a Knot
  primary: time from spawn until the zone is served, and peak memory (VmHWM).

Ratios are dnsd / Knot (below 1: dnsd is faster or smaller). JSON goes to
bench/report/raw/axfr.json.
Usage: axfr.py [--quick] [--records N] [--runs N]
"""
import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time

import common as c

PORT_DNSD = 5821
PORT_KNOT = 5822
PORT_SEC = 5823
ORIGIN = "example.com."


def rss_kib(pid):
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


def hwm_kib(pid):
    return c.rss_kb(pid)


class Sampler:
    """Samples the RSS of a process group every 10 ms; keeps the peak."""

    def __init__(self, pgid):
        self.pgid = pgid
        self.peak = 0
        self.stop_flag = False
        self.t = threading.Thread(target=self.run, daemon=True)
        self.t.start()

    def run(self):
        while not self.stop_flag:
            self.peak = max(self.peak, sum(rss_kib(p) for p in c.group_pids(self.pgid)))
            time.sleep(0.01)

    def stop(self):
        self.stop_flag = True
        self.t.join()
        return self.peak


def knot_conf(tmp, port, zone_file=None, primary=None, acl=True):
    lines = [
        "server:", f"    listen: 127.0.0.1@{port}", f"    rundir: {tmp}",
        "    udp-workers: 1", "    tcp-workers: 1", "    background-workers: 1",
        "database:", f"    storage: {tmp}",
        "log:", "  - target: stderr", "    any: info",
    ]
    if primary:
        lines += ["remote:", "  - id: primary", f"    address: 127.0.0.1@{primary}"]
    if acl:
        lines += ["acl:", "  - id: xfr", "    address: 127.0.0.0/8", "    action: transfer"]
    lines += ["template:", "  - id: default", f"    storage: {tmp}", "    zonefile-sync: -1",
              "    journal-content: none", "    semantic-checks: off"]
    if acl:
        lines += ["    acl: xfr"]
    if primary:
        lines += ["    master: primary"]
    lines += ["zone:", f"  - domain: {ORIGIN}",
              f"    file: {zone_file or os.path.join(tmp, 'secondary.zone')}"]
    path = os.path.join(tmp, "knot.conf")
    with open(path, "w") as fh:
        fh.write("\n".join(lines) + "\n")
    return path


def dnsd_conf(tmp, port, zone_file, primary=None):
    ok, _ = c.dnsd_accepts(c.RRL_OFF)
    lines = ["[server]", 'listen = ["127.0.0.1"]', f"port = {port}", "workers = 1",
             "tcp_idle_timeout_ms = 60000"]
    if ok:
        lines += c.RRL_OFF.splitlines()
    lines += ["[[zone]]", f'origin = "{ORIGIN}"', f'file = "{zone_file}"',
              'allow_transfer = ["127.0.0.0/8"]']
    if primary:
        lines += [f'primaries = ["127.0.0.1:{primary}"]']
    lines += ["[transfer]", "in_timeout_secs = 3600", "[control]", f'socket = "{tmp}/dnsd.sock"']
    path = os.path.join(tmp, "dnsd.toml")
    with open(path, "w") as fh:
        fh.write("\n".join(lines) + "\n")
    return path


def start(name, argv, port, env=None, timeout=600):
    srv = c.Server(name, argv, 0, env=env)
    up = c.wait_answer("127.0.0.1", port, ORIGIN.rstrip("."), qtype=6, timeout=timeout,
                       proc=srv.proc, each=0.02)
    if up is None:
        tail = srv.tail()[-600:]
        srv.stop()
        raise SystemExit(f"{name} did not answer: {tail}")
    return srv


def axfr_out(name, srv, port, runs, records):
    cmd = ["kdig", "@127.0.0.1", "-p", str(port), "+tcp", "+noall", "+stat", ORIGIN, "AXFR"]
    times, cpus, peaks, grow = [], [], [], []
    for _ in range(runs):
        base = sum(rss_kib(p) for p in c.group_pids(srv.pid))
        s = Sampler(srv.pid)
        cpu0 = c.cpu_ns(srv.pid)
        t0 = time.monotonic()
        p = subprocess.run(c.niced(cmd, "legit", 1), capture_output=True, text=True,
                           timeout=1200)
        dt = time.monotonic() - t0
        cpu = (c.cpu_ns(srv.pid) - cpu0) / 1e9
        peak = s.stop()
        tail = p.stdout[-400:]
        got = [line for line in tail.splitlines() if line.startswith(";; Received")]
        if p.returncode != 0 or not got:
            raise SystemExit(f"{name}: AXFR failed: {p.stderr[-400:]} {tail}")
        n = int(got[0].split("messages, ")[1].split()[0])
        if n != records + 1:
            c.log(f"  {name}: {n} records received, expected {records + 1}")
        times.append(dt)
        cpus.append(cpu)
        peaks.append(peak)
        grow.append(max(0, peak - base))
    r = {"name": name, "seconds": statistics.median(times), "server_cpu_s": statistics.median(cpus),
         "peak_rss_kib": int(statistics.median(peaks)),
         "rss_growth_kib": int(statistics.median(grow)), "runs": runs,
         "command": " ".join(cmd)}
    c.log(f"  {name:>5} AXFR out: {r['seconds']:.2f} s, server CPU {r['server_cpu_s']:.2f} s, "
          f"peak RSS {r['peak_rss_kib'] / 1024:.0f} MiB (+{r['rss_growth_kib'] / 1024:.1f} MiB)")
    return r


def transfer_in(name, argv, port, env=None):
    t0 = time.monotonic()
    srv = c.Server(name, argv, 0, env=env)
    try:
        up = c.wait_answer("127.0.0.1", port, ORIGIN.rstrip("."), qtype=6, timeout=1200,
                           proc=srv.proc, each=0.02)
        if up is None:
            raise SystemExit(f"{name} secondary never served the zone: {srv.tail()[-600:]}")
        dt = time.monotonic() - t0
        mem = hwm_kib(srv.pid)
        pss = c.pss_kb(srv.pid)
    finally:
        srv.stop()
    r = {"name": name, "seconds": dt, "peak_rss_kib": mem, "pss_kib": pss}
    c.log(f"  {name:>5} as secondary: zone served {dt:.2f} s after start, "
          f"peak RSS {mem / 1024:.0f} MiB, PSS {pss / 1024:.0f} MiB")
    return r


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--records", type=int, default=0)
    ap.add_argument("--runs", type=int, default=3)
    a = ap.parse_args()
    c.need("kdig", "knotd")
    quick = a.quick or c.quick()
    records = a.records or (200_000 if quick else 1_000_000)
    work = tempfile.mkdtemp(prefix="bench-axfr-")
    zone = os.path.join(work, "zone.txt")
    subprocess.run([sys.executable, os.path.join(os.path.dirname(__file__), "gen_zone.py"),
                    ORIGIN, str(records), zone], check=True)
    with open(zone) as f:
        nrec = sum(1 for line in f if line.strip() and not line.startswith("$"))
    c.log(f"AXFR benchmark: {nrec} records, {c.machine()}, {c.sched_note()}")
    env = dict(os.environ, RUST_LOG="warn")
    out = {"records": nrec, "machine": c.machine(), "cores": os.cpu_count(),
           "scheduling": c.sched_note(), "axfr_out": [], "transfer_in": []}

    # AXFR out of each server.
    d = tempfile.mkdtemp(dir=work)
    srv = start("dnsd", [c.dnsd_bin(), "serve", "-c", dnsd_conf(d, PORT_DNSD, zone)], PORT_DNSD,
                env=env)
    try:
        out["axfr_out"].append(axfr_out("dnsd", srv, PORT_DNSD, a.runs, nrec))
    finally:
        srv.stop()
    k = tempfile.mkdtemp(dir=work)
    knot = start("knot", ["knotd", "-c", knot_conf(k, PORT_KNOT, zone_file=zone)], PORT_KNOT)
    try:
        out["axfr_out"].append(axfr_out("knot", knot, PORT_KNOT, a.runs, nrec))
        # Transfer in from the Knot primary: dnsd, then Knot.
        s = tempfile.mkdtemp(dir=work)
        out["transfer_in"].append(transfer_in(
            "dnsd", [c.dnsd_bin(), "serve", "-c",
                     dnsd_conf(s, PORT_SEC, os.path.join(s, "copy.zone"), primary=PORT_KNOT)],
            PORT_SEC, env=env))
        s = tempfile.mkdtemp(dir=work)
        out["transfer_in"].append(transfer_in(
            "knot", ["knotd", "-c", knot_conf(s, PORT_SEC, primary=PORT_KNOT, acl=False)],
            PORT_SEC))
    finally:
        knot.stop()

    do, ko = out["axfr_out"]
    di, ki = out["transfer_in"]
    out["ratios"] = {
        "axfr_out_time_dnsd_over_knot": do["seconds"] / ko["seconds"],
        "axfr_out_server_cpu_dnsd_over_knot": do["server_cpu_s"] / max(ko["server_cpu_s"], 1e-9),
        "axfr_out_peak_rss_dnsd_over_knot": do["peak_rss_kib"] / ko["peak_rss_kib"],
        "transfer_in_time_dnsd_over_knot": di["seconds"] / ki["seconds"],
        "transfer_in_peak_rss_dnsd_over_knot": di["peak_rss_kib"] / ki["peak_rss_kib"],
    }
    print(f"AXFR, {nrec} records, {os.cpu_count()} cores ({c.sched_note()}); "
          f"command: {do['command']}")
    for k_, v in out["ratios"].items():
        print(f"  {k_}: {v:.2f}")
    c.save("axfr", out)


if __name__ == "__main__":
    main()
