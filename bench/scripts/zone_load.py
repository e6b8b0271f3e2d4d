#!/usr/bin/env python3
"""Zone load time and memory, side by side, on a generated zone (A, AAAA, CNAME,
delegations with glue; 1.14M records, or 200k with --quick):

- the checkers (bench/zone-load): `dnsd check-zone`, `kzonecheck`, `named-checkzone -i none`:
  wall time and peak memory (max RSS), median of RUNS;
- the servers: dnsd, Knot DNS and NSD started on the zone, pinned to CPU 0: time from
  spawn until the zone's SOA is answered, and memory (PSS, shared pages of forked
  workers counted once) once it is; median of RUNS;
- the same free to load on every core (Knot with as many background workers and its
  semantic checks off).
Usage: zone_load.py [--quick] [--records N] [--runs N] [--no-servers]
"""
import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time

import common as c

PORT = 5811


def checkers(records, runs, work):
    # The checkers run pinned to CPU 0 like the servers, in the normal scheduling class
    # (they are CPU-bound for seconds), niced as sched_prefix("load") says.
    env = dict(os.environ, BENCH_WORK=work,
               BENCH_RUNNER=" ".join(c.niced([], "load", 0)))
    p = subprocess.run([os.path.join(c.ROOT, "bench", "zone-load"), str(records), str(runs)],
                       env=env, capture_output=True, text=True, timeout=3600)
    sys.stderr.write(p.stdout)
    if p.returncode != 0:
        sys.stderr.write(p.stderr[-2000:])
        return []
    out = []
    cmds = {"dnsd": "dnsd check-zone -q -o example.com. ZONE",
            "kzonecheck": "kzonecheck -o example.com. ZONE",
            "named-checkzone": "named-checkzone -i none example.com ZONE"}
    with open(os.path.join(work, "zone-load.txt")) as f:
        for line in f:
            name, secs, kb = line.split()
            out.append({"name": name, "seconds": float(secs), "max_rss_kib": int(kb),
                        "command": cmds.get(name, name)})
    return out


def server_argv(name, tmp, zone, all_cores=False):
    zones = [("example.com.", zone)]
    if name == "dnsd":
        ok, _ = c.dnsd_accepts(c.RRL_OFF)
        return [c.dnsd_bin(), "serve", "-c",
                c.dnsd_conf(tmp, ["127.0.0.1"], PORT, zones, extra=c.RRL_OFF if ok else "")]
    if name == "knot":
        conf = c.knot_conf(tmp, "127.0.0.1", PORT, zones)
        if all_cores:
            c.knot_all_cores(conf)
        return ["knotd", "-c", conf]
    return ["nsd", "-d", "-c", c.nsd_conf(tmp, "127.0.0.1", PORT, zones)]


def servers(zone, runs, work, all_cores=False):
    """Pinned to CPU 0, or (all_cores) free to load on every core."""
    out = []
    for name in ("dnsd", "knot", "nsd"):
        times, mems = [], []
        for _ in range(runs):
            tmp = tempfile.mkdtemp(prefix=f"zl-{name}-", dir=work)
            env = dict(os.environ, RUST_LOG="warn") if name == "dnsd" else None
            argv = server_argv(name, tmp, zone, all_cores)
            t0 = time.monotonic()
            srv = c.Server(name, argv, None if all_cores else 0, env=env)
            try:
                up = c.wait_answer("127.0.0.1", PORT, "example.com", qtype=6, timeout=600,
                                   proc=srv.proc, each=0.02)
                if up is None:
                    c.log(f"  {name} did not answer: {srv.tail()[-400:]}")
                    break
                times.append(time.monotonic() - t0)
                mems.append(c.pss_kb(srv.pid))
            finally:
                srv.stop()
        if times:
            r = {"name": name, "seconds": statistics.median(times),
                 "pss_kib": int(statistics.median(mems)), "runs": len(times)}
            c.log(f"  {name:>6} serve{' (all cores)' if all_cores else ''}: first answer after "
                  f"{r['seconds']:.2f} s, {r['pss_kib'] / 1024:.0f} MiB PSS")
            out.append(r)
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", default=c.quick())
    ap.add_argument("--records", type=int)
    ap.add_argument("--runs", type=int)
    ap.add_argument("--no-servers", action="store_true")
    a = ap.parse_args()
    records = a.records or (200_000 if a.quick else 1_140_000)
    runs = a.runs or (1 if a.quick else 3)
    work = os.environ.get("BENCH_WORK", "/tmp/palisade-bench")
    os.makedirs(work, exist_ok=True)
    c.log(f"zone load: {records} records, median of {runs} run(s)")
    tools = checkers(records, runs, work)
    zone = os.path.join(work, f"big-{records}.zone")
    srv = [] if a.no_servers or not os.path.exists(zone) else servers(zone, runs, work)
    srv_all = ([] if a.no_servers or not os.path.exists(zone)
               else servers(zone, runs, work, all_cores=True))
    c.save("zone_load", {
        "machine": c.machine(), "cores": os.cpu_count(), "records": records, "runs": runs,
        "sched": c.sched_note(),
        "zone_mb": round(os.path.getsize(zone) / 1e6, 1) if os.path.exists(zone) else None,
        "command": f"bench/scripts/zone_load.py --records {records} --runs {runs}",
        "checkers": tools, "servers": srv, "servers_all_cores": srv_all, "when": time.strftime("%Y-%m-%d %H:%M:%S")})


if __name__ == "__main__":
    main()
