#!/usr/bin/env python3
"""Isolation of many service addresses under a flood (issue 4's benchmark), and the TCP
listener-hash pile-up test.

dnsd listens on 127.1.0.0/18 (16,384 UDP sockets, one wildcard TCP socket). NSD and Knot
open a UDP and a TCP socket per address and cannot start with 16,384 addresses under this
machine's 20,000-descriptor limit (Knot also refuses more than ~4,369 listen entries): the
script tries 16,384 once and records what happens, then runs them with 4,096 (127.1.0.0/20).

For each server: start-up time (spawn until the last address answers a real query) and
memory; then a flood to one address (127.1.0.1, 256 sources, bounded in time; as fast as
one core sends by default, --flood-pps sets a rate) while probes query every other address
at a low rate (200 q/s, random addresses, 1,024 sources) and a second probe stream queries
the flooded address (20 q/s).
Reported: probe success and p50/p99 before, during and after the flood, the flooded
socket's kernel drops (/proc/net/udp for every server; dnsd's /metrics top list too) and
the drops on all other sockets. RRL is off everywhere: this measures the socket fleet.

Then tcp-listen-hash: connect() latency with 16,384 TCP listeners bound to specific
addresses on one port versus one wildcard listener versus a single listener.
Usage: isolation.py [--quick] [--servers dnsd,nsd,knot] [--no-hash]
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

import attack
import common as c
import dns_qps

# The flood keeps the server's one worker busy all the time: as SCHED_FIFO it would run into
# the kernel's RT throttling (sched_rt_runtime_us: 50 ms off in every second), and every
# server's p99 would be that pause (25-40 ms for all three here). Normal class, nice -10.
os.environ.setdefault("BENCH_SCHED", "nice")

FLOODED = "127.1.0.1"
PORTS = {"dnsd": 5711, "nsd": 5712, "knot": 5713}
METRICS_PORT = 9711
PROBE_RATE = 200
FLOODED_PROBE_RATE = 20


def prefix_for(n):
    bits = {16384: 18, 4096: 20, 1024: 22}[n]
    return f"127.1.0.0/{bits}"


def last_addr(n):
    return f"127.1.{(n - 1) >> 8}.{(n - 1) & 255}"


def addr_list(n):
    return [f"127.1.{i >> 8}.{i & 255}" for i in range(n)]


def plan(name, tmp, zones, n):
    port = PORTS[name]
    if name == "dnsd":
        ok, _ = c.dnsd_accepts(c.RRL_OFF)
        conf = c.dnsd_conf(tmp, [prefix_for(n)], port, zones, extra=c.RRL_OFF if ok else "",
                           metrics=f"127.0.0.1:{METRICS_PORT}")
        return [c.dnsd_bin(), "serve", "-c", conf]
    if name == "nsd":
        return ["nsd", "-d", "-c", c.nsd_conf(tmp, addr_list(n), port, zones)]
    return ["knotd", "-c", c.knot_conf(tmp, addr_list(n), port, zones)]


def start(name, tmpbase, zones, n, timeout):
    """Starts `name` on n addresses; returns (server, startup seconds or None, info)."""
    tmp = tempfile.mkdtemp(prefix=f"{name}-{n}-", dir=tmpbase)
    env = dict(os.environ, RUST_LOG="info") if name == "dnsd" else None
    argv = plan(name, tmp, zones, n)
    t0 = time.monotonic()
    srv = c.Server(name, argv, 0, env=env)
    port = PORTS[name]
    last = c.wait_answer(last_addr(n), port, "h1.bench.test", qtype=1, timeout=timeout,
                         proc=srv.proc)
    if last is None:
        return srv, None, {"log": srv.tail()[-600:]}
    up = time.monotonic() - t0
    first = c.wait_answer("127.1.0.0", port, "h1.bench.test", qtype=1, timeout=5)
    info = {"startup_s": up, "first_ok": first is not None, "pss_kib": c.pss_kb(srv.pid),
            "fds": max((len(os.listdir(f"/proc/{p}/fd")) for p in c.group_pids(srv.pid)),
                       default=0)}
    return srv, info["startup_s"], info


def try_full(name, tmpbase, zones, timeout):
    """NSD and Knot with 16,384 addresses: does it start at all here?"""
    srv, up, info = start(name, tmpbase, zones, 16384, timeout)
    alive = srv.proc.poll() is None
    srv.stop()
    if up is not None:
        return {"started": True, "startup_s": up}
    lines = [ln for ln in info["log"].splitlines() if ln.strip()]
    why = " | ".join(lines[-3:]) if lines else ("still not answering" if alive else "exited")
    return {"started": False, "alive_after_timeout": alive, "error": why[-400:],
            "timeout_s": timeout}


def run(name, args, tmpbase, zones, n):
    pre, F, post = (1.0, 3.0, 1.0) if args.quick else (3.0, 15.0, 3.0)
    srv, up, info = start(name, tmpbase, zones, n, 180)
    res = {"name": name, "addresses": n, "prefix": prefix_for(n)}
    try:
        if up is None:
            c.log(f"  {name} with {n} addresses did not start: {info['log'][-300:]}")
            res["error"] = info["log"][-600:]
            return res
        res.update(info)
        c.log(f"  {name}: {n} addresses up in {up:.2f} s, {info['pss_kib'] / 1024:.0f} MiB, "
              f"{info['fds']} descriptors in its largest process")
        port = PORTS[name]
        d0 = c.udp_drops(port)
        m0 = c.scrape(f"http://127.0.0.1:{METRICS_PORT}/metrics") if name == "dnsd" else {}
        tmp = tempfile.mkdtemp(prefix="run-", dir=tmpbase)
        t0 = time.time() + 1.5
        total = pre + F + post
        dl = c.bin_path("dns-load")
        probe_out = os.path.join(tmp, "probe.json")
        fprobe_out = os.path.join(tmp, "fprobe.json")
        flood_out = os.path.join(tmp, "flood.json")
        common = ["--port", str(port), "--qname", "h{n}.bench.test", "--names", "10000",
                  "--start-at", f"{t0:.3f}"]
        procs = [
            subprocess.Popen(c.niced([dl, "legit", "--targets", prefix_for(n), "--exclude",
                                      FLOODED, "--sources", "127.3.0.0/16", "--max-sources",
                                      "1024", "--rate", str(PROBE_RATE), "--duration", str(total),
                                      "--no-tcp", "--out", probe_out] + common, "legit", 1),
                             stderr=subprocess.PIPE, text=True),
            subprocess.Popen(c.niced([dl, "legit", "--targets", FLOODED, "--sources",
                                      "127.10.0.0/16", "--max-sources", "64", "--rate",
                                      str(FLOODED_PROBE_RATE), "--duration", str(total),
                                      "--no-tcp", "--out", fprobe_out] + common, "legit", 1),
                             stderr=subprocess.PIPE, text=True),
            subprocess.Popen(c.niced([dl, "flood", "--kind", "direct", "--targets", FLOODED,
                                      "--sources", "127.5.0.0/16", "--max-sources", "256",
                                      "--rate", str(args.flood_pps), "--duration", str(F), "--max-packets",
                                      str(int(400_000 * F)), "--out", flood_out, "--port",
                                      str(port), "--qname", "h{n}.bench.test", "--start-at",
                                      f"{t0 + pre:.3f}"], "load", 1),
                             stderr=subprocess.PIPE, text=True),
        ]
        sampler = c.CpuSampler(srv.pid, 0.5).start()
        try:
            while procs[0].poll() is None and time.time() < t0 + total + 40:
                el = time.time() - t0
                phase = "before" if el < pre else "flood" if el < pre + F else "after"
                attack.progress(f"  {name}: {max(0.0, el):5.1f}/{total:.0f} s  {phase}")
                time.sleep(0.5)
            attack.progress("")
            for p in procs:
                p.wait(timeout=max(1, t0 + total + 40 - time.time()))
        finally:
            for p in procs:
                if p.poll() is None:
                    p.kill()
                    p.wait()
            sampler.stop()
        d1 = c.udp_drops(port)
        m1 = c.scrape(f"http://127.0.0.1:{METRICS_PORT}/metrics") if name == "dnsd" else {}
        res["alive_after"] = srv.proc.poll() is None
    finally:
        srv.stop()
    outs = {}
    for key, path, p in (("probe", probe_out, procs[0]), ("flooded_probe", fprobe_out, procs[1]),
                         ("flood", flood_out, procs[2])):
        if not os.path.exists(path):
            res["error"] = f"{key} failed: {p.stderr.read()[-400:]}"
            return res
        with open(path) as f:
            outs[key] = json.load(f)
    fl = outs["flood"]
    windows = []
    for wname, a, b in (("before", 0, pre), ("flood", pre, pre + F), ("after", pre + F + 0.5, total)):
        w = {"name": wname, "start": a, "end": b}
        for key in ("probe", "flooded_probe"):
            L = outs[key]
            ss = [s for s in L["samples"] if a * 1000 <= s[0] < b * 1000]
            w[key] = attack.summarize(ss, -1)["all"]
        cpu, other = sampler.between(outs["probe"]["t0"] + a, outs["probe"]["t0"] + b)
        w["server_cpu"], w["cpu0_other"] = cpu, other
        windows.append(w)
    drops = {ip: d1.get(ip, 0) - d0.get(ip, 0) for ip in d1}
    res.update({
        "windows": windows,
        "flood": {k: fl[k] for k in ("sent", "replies", "wall", "sources", "send_errors")},
        "flooded_socket_drops": drops.get(FLOODED, 0),
        "other_sockets_drops": sum(v for ip, v in drops.items() if ip != FLOODED),
        "other_sockets_with_drops": sum(1 for ip, v in drops.items() if ip != FLOODED and v > 0),
        "dnsd_kernel_drops_top": {k: m1[k] - m0.get(k, 0) for k in m1
                                  if k.startswith("dnsd_udp_kernel_drops_top")},
        "probe_targets": outs["probe"]["n_targets"],
    })
    w = windows[1]
    fmt_ms = attack.fmt_ms
    c.log(f"  {name}: during the flood ({fl['sent'] / max(fl['wall'], 1e-9):.0f} pkt/s to {FLOODED}): "
          f"probes to the other {n - 1} addresses {attack.fmt_pct(w['probe']['success'])} answered, "
          f"p50 {fmt_ms(w['probe']['p50_ms'])} p99 {fmt_ms(w['probe']['p99_ms'])}; probes to the flooded "
          f"address {attack.fmt_pct(w['flooded_probe']['success'])}; flooded socket dropped "
          f"{res['flooded_socket_drops']}, other sockets {res['other_sockets_drops']}")
    return res


def listen_hash(args):
    n = 2000 if args.quick else 20000
    out = subprocess.run(c.niced([c.bin_path("tcp-listen-hash"), "--count", "16384",
                                  "--connects", str(n)], "server", 1),
                         capture_output=True, text=True, timeout=300)
    sys.stderr.write(out.stderr)
    if out.returncode != 0:
        return {"error": out.stderr[-500:]}
    d = json.loads(out.stdout)
    d["command"] = f"target/release/tcp-listen-hash --count 16384 --connects {n}"
    return d


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", default=c.quick())
    ap.add_argument("--servers", default="dnsd,nsd,knot")
    ap.add_argument("--no-hash", action="store_true", help="skip the listener-hash test")
    ap.add_argument("--flood-pps", type=float, default=0,
                    help="flood packets per second (default 0: as fast as one core allows, "
                         "to overflow the flooded socket)")
    args = ap.parse_args()
    c.need("knotd", "nsd", "taskset")
    tmpbase = tempfile.mkdtemp(prefix="palisade-isolation-")
    zone = os.path.join(tmpbase, "bench.test.zone")
    dns_qps.make_zone(zone)
    zones = [("bench.test.", zone)]
    results, full_attempts = [], {}
    names = [s for s in args.servers.split(",") if s]
    for k, name in enumerate(names):
        n = 16384 if name == "dnsd" else 4096
        if name != "dnsd":
            c.log(f"isolation [{k + 1}/{len(names)}] {name}: trying 16,384 addresses first")
            full_attempts[name] = try_full(name, tmpbase, zones, 10 if args.quick else 30)
            fa = full_attempts[name]
            c.log(f"  {name} with 16,384 addresses: "
                  + (f"started in {fa['startup_s']:.2f} s" if fa["started"]
                     else f"did not start ({fa['error'][:200]})"))
        c.log(f"isolation [{k + 1}/{len(names)}] {name}: {n} addresses")
        results.append(run(name, args, tmpbase, zones, n))
    c.save("isolation", {"machine": c.machine(), "cores": os.cpu_count(),
                         "command": "bench/scripts/isolation.py " + " ".join(sys.argv[1:]),
                         "quick": args.quick, "flooded": FLOODED, "sched": c.sched_note(),
                         "flood_pps": args.flood_pps, "probe_rate": PROBE_RATE,
                         "flooded_probe_rate": FLOODED_PROBE_RATE, "servers": results,
                         "sixteen_k_attempts": full_attempts,
                         "nofile": list(__import__("resource").getrlimit(
                             __import__("resource").RLIMIT_NOFILE)),
                         "when": time.strftime("%Y-%m-%d %H:%M:%S")})
    if not args.no_hash:
        c.log("listener hash: 16,384 specific TCP listeners vs one wildcard")
        c.save("listen_hash", listen_hash(args))


if __name__ == "__main__":
    main()
