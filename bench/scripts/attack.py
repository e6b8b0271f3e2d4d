#!/usr/bin/env python3
"""The attack scenario, side by side: dnsd with its defences, NSD with RRL, Knot DNS with
mod-rrl, each on 8 service addresses (127.2.0.1-8), pinned to CPU 0, one worker.

Legitimate clients (dns-load legit: 200 q/s in total from 1,024 source addresses spread
over 127.3.0.0/16, existing names, EDNS + cookies learnt before the start as resolvers that
know a server have them, TCP retry on TC like a resolver, 1 s timeout) run the whole time. After a quiet baseline come four attack phases, each bounded
in time, 150,000 attack packets/s per phase by default, the same for every server
(dns-load flood, sendmmsg, CPU 1; --flood-pps 0 sends as fast as one core allows):

  1. random-subdomain: {rand}.victim.test from 4,096 sources to addresses .1-.4
  2. direct: existing names from 256 sources at one address, .8, alone
  3. repeat: 16 sources repeating amp.bench.test TXT (EDNS) at .5-.7, far above any sane rate
  4. all three at once (45/45/10% of the rate), from fresh source ranges

Reported per server and phase: legitimate success rate and p50/p99/p999 latency (lost
queries count as the 1 s timeout), split into addresses not under direct flood and the
flooded one; attack packets sent and the replies the attackers received (full answers
and TC slips); server CPU and how busy CPU 0 was with other work; kernel drops per address.

Then, on a fresh server each, the resolver-relayed flood: one resolver address (127.10.0.53)
carries a random-subdomain flood ({rand}.victim.test, 20,000 q/s by default) and its own
users' ordinary queries (100 q/s of existing names, no cookies, re-asked over TCP on TC=1 as
resolvers do), then the ordinary queries alone. Reported: the share of the ordinary queries
answered during the flood and after it, the attack packets that got any reply and the bytes
of those replies against the bytes of the attack. Goal: dnsd 100 %, at least every peer, and
no more reply bytes than attack bytes.
Usage: attack.py [--quick] [--servers dnsd,nsd,knot] [--phase SECONDS] [--resolver-pps N]
"""
import argparse
import gzip
import json
import math
import os
import subprocess
import sys
import tempfile
import time

import common as c
import dns_qps

SERVICE = [f"127.2.0.{i}" for i in range(1, 9)]
FLOODED = "127.2.0.8"
LEGIT_SOURCES = "127.3.0.0/16"
LEGIT_RATE = 200
TIMEOUT_MS = 1000
PORTS = {"dnsd": 5611, "nsd": 5612, "knot": 5613}
METRICS_PORT = 9611
RRL_PEERS = {"rate_limit": 200, "slip": 2}


def floods_for(phase, srcs, pps):
    """Flood specs of one phase; srcs: the source prefixes for (a), (b), (c); pps: the
    phase's total packets per second (split 45/45/10% when all three run at once)."""
    a = dict(kind="random-subdomain", targets=SERVICE[0:4], sources=srcs[0], max_sources=4096,
             qname="{rand}.victim.test", qtype="A", edns=False, rate=pps)
    b = dict(kind="direct", targets=[FLOODED], sources=srcs[1], max_sources=256,
             qname="h{n}.bench.test", qtype="A", edns=False, rate=pps)
    r = dict(kind="repeat", targets=SERVICE[4:7], sources=srcs[2], max_sources=16,
             qname="amp.bench.test", qtype="TXT", edns=True, rate=pps)
    if phase == "all three":
        return [dict(a, rate=0.45 * pps), dict(b, rate=0.45 * pps), dict(r, rate=0.10 * pps)]
    return {"random-subdomain": [a], "direct": [b], "repeat": [r]}[phase]


PHASES = [
    ("random-subdomain", ("127.4.0.0/16", "127.5.0.0/16", "127.6.0.0/16")),
    ("direct", ("127.4.0.0/16", "127.5.0.0/16", "127.6.0.0/16")),
    ("repeat", ("127.4.0.0/16", "127.5.0.0/16", "127.6.0.0/16")),
    ("all three", ("127.7.0.0/16", "127.8.0.0/16", "127.9.0.0/16")),
]


def make_zones(tmp):
    bench = os.path.join(tmp, "bench.test.zone")
    dns_qps.make_zone(bench)
    with open(bench, "a") as f:
        # A large answer for the repeat (amplification) flood: ~700 bytes of TXT.
        strings = " ".join('"' + ("palisade-amplification-test-%02d-" % i).ljust(60, "x") + '"'
                           for i in range(11))
        f.write(f"amp TXT {strings}\n")
    victim = os.path.join(tmp, "victim.test.zone")
    with open(victim, "w") as f:
        f.write("$ORIGIN victim.test.\n$TTL 3600\n@ SOA ns1 hostmaster 1 7200 3600 1209600 300\n"
                "@ NS ns1\n@ NS ns2\nns1 A 192.0.2.1\nns2 A 192.0.2.2\nwww A 192.0.2.80\n"
                "@ A 192.0.2.80\n@ MX 10 mail\nmail A 192.0.2.25\n")
    return [("bench.test.", bench), ("victim.test.", victim)]


def server_plan(name, tmp, zones):
    """(argv, config path, note on defences) for one server."""
    port = PORTS[name]
    if name == "dnsd":
        ok, err = c.dnsd_accepts(c.DEFENCES)
        extra = c.DEFENCES if ok else ""
        note = ("RRL 20/s per /24, slip 2, window 15 s; cookies; random-subdomain defence" if ok
                else f"WITHOUT defences: this dnsd refuses the [defence] config ({err})")
        conf = c.dnsd_conf(tmp, SERVICE, port, zones, extra=extra,
                           metrics=f"127.0.0.1:{METRICS_PORT}")
        return [c.dnsd_bin(), "serve", "-c", conf], conf, note, ok
    if name == "nsd":
        conf = c.nsd_conf(tmp, SERVICE, port, zones, rrl=RRL_PEERS["rate_limit"],
                          slip=RRL_PEERS["slip"], cookies=True)
        return (["nsd", "-d", "-c", conf], conf,
                "RRL 200/s per /24 (NSD's default), slip 2, answer-cookie", True)
    conf = c.knot_conf(tmp, SERVICE, port, zones, rrl=RRL_PEERS, cookies=True)
    return (["knotd", "-c", conf], conf, "mod-rrl rate-limit 200, slip 2; mod-cookies", True)


def flood_argv(f, port, duration, start_at, seed, out):
    return c.niced([c.bin_path("dns-load"), "flood",
            "--kind", f["kind"], "--targets", ",".join(f["targets"]), "--port", str(port),
            "--sources", f["sources"], "--max-sources", str(f["max_sources"]),
            "--qname", f["qname"], "--qtype", f["qtype"], "--rate", str(f["rate"]),
            "--duration", str(duration), "--max-packets", str(int(400_000 * duration)),
            "--start-at", f"{start_at:.3f}", "--seed", str(seed), "--out", out] + (
        ["--edns"] if f["edns"] else []), "load", 1)


def ok_sample(s):
    _send, _t, lat, rcode, flags, _src = s
    return lat >= 0 and rcode == 0 and not flags & 8 and (not flags & 1 or flags & 2)


def summarize(samples, flooded_idx):
    """Success and latency percentiles (ms; lost or failed = inf) of a list of samples."""
    out = {}
    groups = {"all": samples,
              "others": [s for s in samples if s[1] != flooded_idx],
              "flooded": [s for s in samples if s[1] == flooded_idx]}
    for g, ss in groups.items():
        lats = sorted((s[2] / 1000.0 if ok_sample(s) else math.inf) for s in ss)
        n = len(ss)
        good = sum(1 for s in ss if ok_sample(s))
        fin = lambda v: None if v is None or v == math.inf else round(v, 3)  # noqa: E731
        out[g] = {"n": n, "ok": good, "success": good / n if n else None,
                  "p50_ms": fin(c.percentile(lats, 0.5)), "p99_ms": fin(c.percentile(lats, 0.99)),
                  "p999_ms": fin(c.percentile(lats, 0.999)),
                  "lost": sum(1 for s in ss if s[2] < 0),
                  "tcp": sum(1 for s in ss if s[4] & 2),
                  "tc": sum(1 for s in ss if s[4] & 1)}
    return out


def per_second(samples, seconds, flooded_idx):
    """Per second of send time: latency percentiles of the queries to the addresses not
    under direct flood (lost = the timeout), and failures there and on the flooded one."""
    rows = []
    cap = lambda v: None if v is None else min(v, float(TIMEOUT_MS))  # noqa: E731
    for sec in range(seconds):
        ss = [s for s in samples if sec * 1000 <= s[0] < (sec + 1) * 1000]
        oth = [s for s in ss if s[1] != flooded_idx]
        fl = [s for s in ss if s[1] == flooded_idx]
        lats = sorted((s[2] / 1000.0 if ok_sample(s) else math.inf) for s in oth)
        rows.append({"t": sec, "n": len(oth), "ok": sum(1 for s in oth if ok_sample(s)),
                     "p50_ms": cap(c.percentile(lats, 0.5)), "p99_ms": cap(c.percentile(lats, 0.99)),
                     "p999_ms": cap(c.percentile(lats, 0.999)),
                     "flooded_n": len(fl), "flooded_ok": sum(1 for s in fl if ok_sample(s))})
    return rows


def run_server(name, args, tmpbase, zones, timeline):
    tmp = tempfile.mkdtemp(prefix=f"{name}-", dir=tmpbase)
    argv, conf, note, defences = server_plan(name, tmp, zones)
    port = PORTS[name]
    env = dict(os.environ, RUST_LOG="warn") if name == "dnsd" else None
    srv = c.Server(name, argv, 0, env=env)
    children = []
    try:
        started = c.wait_answer(SERVICE[0], port, "h1.bench.test", qtype=1, timeout=30,
                                proc=srv.proc)
        if started is None:
            c.log(f"  {name} did not start:\n{srv.tail()}")
            return {"name": name, "error": "did not start", "log": srv.tail(), "note": note}
        c.log(f"  {name}: {note}")
        drops0 = c.udp_drops(port)
        m0 = c.scrape(f"http://127.0.0.1:{METRICS_PORT}/metrics") if name == "dnsd" else {}
        t0 = time.time() + 3.0  # sockets bound and cookies primed before the start
        total = timeline["total"]
        legit_out = os.path.join(tmp, "legit.json")
        legit = subprocess.Popen(
            c.niced([c.bin_path("dns-load"), "legit", "--targets", ",".join(SERVICE),
             "--port", str(port), "--sources", LEGIT_SOURCES, "--max-sources", "1024",
             "--qname", "h{n}.bench.test", "--names", "10000", "--rate", str(LEGIT_RATE),
             "--duration", str(total), "--start-at", f"{t0:.3f}", "--cookies", "--prime",
             "--timeout-ms", str(TIMEOUT_MS), "--out", legit_out], "legit", 1),
            stderr=subprocess.PIPE, text=True)
        children.append(legit)
        flood_runs = []
        for i, (ph, srcs) in enumerate(PHASES):
            start = t0 + timeline["phases"][i][0]
            for j, f in enumerate(floods_for(ph, srcs, args.flood_pps)):
                out = os.path.join(tmp, f"flood-{i}-{j}.json")
                p = subprocess.Popen(flood_argv(f, port, args.phase, start, 100 + 10 * i + j, out),
                                     stderr=subprocess.PIPE, text=True)
                children.append(p)
                flood_runs.append((i, ph, f, out, p))
        sampler = c.CpuSampler(srv.pid, 0.5).start()
        deadline = t0 + total + TIMEOUT_MS / 1000 + 30
        while legit.poll() is None and time.time() < deadline:
            el = time.time() - t0
            cur = "baseline"
            for i, (a, b) in enumerate(timeline["phases"]):
                if a <= el < b:
                    cur = f"phase {i + 1}/4 {PHASES[i][0]}"
            c.progress(f"  {name}: {max(0, el):5.1f}/{total} s  {cur}")
            time.sleep(0.5)
        c.progress("")
        for p in children:
            try:
                p.wait(timeout=max(1, deadline - time.time()))
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
        sampler.stop()
        drops1 = c.udp_drops(port)
        m1 = c.scrape(f"http://127.0.0.1:{METRICS_PORT}/metrics") if name == "dnsd" else {}
        alive = srv.proc.poll() is None
    finally:
        for p in children:
            if p.poll() is None:
                p.kill()
                p.wait()
        srv.stop()
    if legit.returncode != 0 or not os.path.exists(legit_out):
        return {"name": name, "error": "legit client failed: " + legit.stderr.read()[-500:],
                "note": note}
    with open(legit_out) as f:
        L = json.load(f)
    targets = L["targets"]
    flooded_idx = targets.index(FLOODED)
    samples = L["samples"]
    floods = []
    for i, ph, f, out, p in flood_runs:
        if not os.path.exists(out):
            floods.append({"phase": ph, "kind": f["kind"], "error": p.stderr.read()[-500:]})
            continue
        with open(out) as fh:
            d = json.load(fh)
        d.update(phase=ph, phase_index=i, targets=f["targets"], qname=f["qname"], qtype=f["qtype"])
        floods.append(d)
    # Windows, in seconds since the legit client started (actual flood times when known).
    windows = [("baseline", 0.0, timeline["phases"][0][0])]
    for i, (ph, _) in enumerate(PHASES):
        ds = [d for d in floods if d.get("phase_index") == i and "t0" in d]
        if ds:
            a = min(d["t0"] for d in ds) - L["t0"]
            b = max(d["t0"] + d["wall"] for d in ds) - L["t0"]
        else:
            a, b = timeline["phases"][i]
        windows.append((ph, a, b))
    windows.append(("after", timeline["phases"][-1][1] + 0.5, total))
    win_out = []
    for wname, a, b in windows:
        ss = [s for s in samples if a * 1000 <= s[0] < b * 1000]
        cpu, other = sampler.between(L["t0"] + a, L["t0"] + b)
        win_out.append({"name": wname, "start": round(a, 3), "end": round(b, 3),
                        "legit": summarize(ss, flooded_idx),
                        "server_cpu": cpu, "cpu0_other": other})
    attack_ss = [s for s in samples
                 if any(a * 1000 <= s[0] < b * 1000 for n_, a, b in windows[1:-1])]
    keep = ("dnsd_drops_total", "dnsd_responses_total", "dnsd_truncated_total",
            "dnsd_udp_kernel_drops_total", "dnsd_udp_received_total", "dnsd_udp_answered_total")
    metrics = {k: m1[k] - m0.get(k, 0) for k in m1 if k.startswith(keep) and m1[k] - m0.get(k, 0)}
    os.makedirs(os.path.join(c.RAW, "samples"), exist_ok=True)
    with gzip.open(os.path.join(c.RAW, "samples", f"attack-{name}.json.gz"), "wt") as fh:
        json.dump(L, fh)
    with open(conf) as fh:
        conf_text = fh.read()
    res = {
        "name": name, "note": note, "defences": defences, "config": conf_text,
        "startup_s": started, "alive_after": alive,
        "legit_t0": L["t0"], "legit_sent": L["sent"], "targets": targets, "flooded": FLOODED,
        "windows": win_out, "attack": summarize(attack_ss, flooded_idx),
        "series": per_second(samples, int(math.ceil(total)), flooded_idx),
        "cpu_series": sampler.series(L["t0"]),
        "floods": floods,
        "kernel_drops": {ip: drops1.get(ip, 0) - drops0.get(ip, 0) for ip in SERVICE},
        "dnsd_metrics": metrics,
    }
    a = res["attack"]
    sent = sum(d.get("sent", 0) for d in floods)
    rep = sum(d.get("replies", 0) for d in floods)
    c.log(f"  {name}: legit success under attack {fmt_pct(a['others']['success'])} on the "
          f"{len(SERVICE) - 1} addresses not flooded directly, {fmt_pct(a['flooded']['success'])} "
          f"on {FLOODED}; p50 {fmt_ms(a['others']['p50_ms'])} p99 {fmt_ms(a['others']['p99_ms'])} "
          f"p99.9 {fmt_ms(a['others']['p999_ms'])}; attackers got {rep:,} replies to {sent:,} packets"
          + ("" if alive else "; SERVER EXITED during the run"))
    return res


RESOLVER = "127.10.0.53"


def run_resolver(name, args, tmpbase, zones):
    """The resolver-relayed flood against a fresh `name`: see the module doc."""
    tmp = tempfile.mkdtemp(prefix=f"{name}-resolver-", dir=tmpbase)
    argv, conf, note, defences = server_plan(name, tmp, zones)
    port = PORTS[name]
    env = dict(os.environ, RUST_LOG="warn") if name == "dnsd" else None
    srv = c.Server(f"{name}-resolver", argv, 0, env=env)
    pre, flood_s, after_s = (1.0, args.phase, 3.0 if args.quick else 10.0)
    total = pre + flood_s + after_s
    children = []
    try:
        if c.wait_answer(SERVICE[0], port, "h1.bench.test", qtype=1, timeout=30,
                         proc=srv.proc) is None:
            return {"name": name, "error": "did not start", "log": srv.tail(), "note": note}
        t0 = time.time() + 2.0
        legit_out = os.path.join(tmp, "ordinary.json")
        legit = subprocess.Popen(
            c.niced([c.bin_path("dns-load"), "legit", "--targets", SERVICE[0],
                     "--port", str(port), "--sources", f"{RESOLVER}/32", "--max-sources", "1",
                     "--qname", "h{n}.bench.test", "--names", "10000", "--rate", "100",
                     "--duration", str(total), "--start-at", f"{t0:.3f}",
                     "--timeout-ms", str(TIMEOUT_MS), "--out", legit_out], "legit", 1),
            stderr=subprocess.PIPE, text=True)
        children.append(legit)
        flood_out = os.path.join(tmp, "flood.json")
        f = dict(kind="random-subdomain", targets=[SERVICE[0]], sources=f"{RESOLVER}/32",
                 max_sources=1, qname="{rand}.victim.test", qtype="A", edns=True,
                 rate=args.resolver_pps)
        fl = subprocess.Popen(flood_argv(f, port, flood_s, t0 + pre, 7, flood_out),
                              stderr=subprocess.PIPE, text=True)
        children.append(fl)
        deadline = t0 + total + TIMEOUT_MS / 1000 + 30
        while legit.poll() is None and time.time() < deadline:
            c.progress(f"  {name}: resolver-relayed flood {max(0, time.time() - t0):5.1f}/{total:.0f} s")
            time.sleep(0.5)
        c.progress("")
        for p in children:
            try:
                p.wait(timeout=max(1, deadline - time.time()))
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
    finally:
        for p in children:
            if p.poll() is None:
                p.kill()
                p.wait()
        srv.stop()
    if not os.path.exists(legit_out) or not os.path.exists(flood_out):
        return {"name": name, "error": "load failed: " + legit.stderr.read()[-300:]
                + fl.stderr.read()[-300:], "note": note}
    with open(legit_out) as fh:
        L = json.load(fh)
    with open(flood_out) as fh:
        F = json.load(fh)
    fa = F["t0"] - L["t0"]
    fb = fa + F["wall"]
    during = [x for x in L["samples"] if fa * 1000 <= x[0] < fb * 1000]
    after = [x for x in L["samples"] if x[0] >= (fb + 0.5) * 1000]
    sm = lambda ss: {"n": len(ss), "ok": sum(1 for x in ss if ok_sample(x)),  # noqa: E731
                     "tcp": sum(1 for x in ss if x[4] & 2)}
    res = {"name": name, "note": note, "defences": defences,
           "during": sm(during), "after": sm(after),
           "attack_sent": F["sent"], "attack_replies": F["replies"],
           "attack_tc": F["replies_tc"], "attack_bytes": F.get("sent_bytes"),
           "reply_bytes": F.get("reply_bytes"), "flood_pps": F["sent"] / max(F["wall"], 1e-9)}
    d, a = res["during"], res["after"]
    c.log(f"  {name}: resolver's ordinary queries answered during the flood "
          f"{fmt_pct(d['ok'] / d['n'] if d['n'] else None)}, after "
          f"{fmt_pct(a['ok'] / a['n'] if a['n'] else None)}; attack packets that got a reply "
          f"{F['replies']:,}/{F['sent']:,}, reply bytes {F.get('reply_bytes', 0):,} for "
          f"{F.get('sent_bytes', 0):,} attack bytes")
    return res


def fmt_pct(v):
    return "n/a" if v is None else f"{100 * v:.2f}%"


def fmt_ms(v):
    return "lost (>1 s)" if v is None else f"{v:.3f} ms"


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", default=c.quick())
    ap.add_argument("--servers", default="dnsd,nsd,knot")
    ap.add_argument("--phase", type=float, help="seconds per attack phase")
    ap.add_argument("--only", choices=["phases", "resolver"],
                    help="run only the four phases, or only the resolver-relayed flood")
    ap.add_argument("--resolver-pps", type=float, default=20_000,
                    help="queries per second of the resolver-relayed random-subdomain flood")
    ap.add_argument("--flood-pps", type=float, default=150_000,
                    help="attack packets per second in each phase, the same for every server "
                         "(0: as fast as one core allows)")
    args = ap.parse_args()
    if args.phase is None:
        args.phase = 2.0 if args.quick else 10.0
    c.need("knotd", "nsd", "taskset", "nice")
    for b in ("dnsd", "dns-load"):
        if not os.path.exists(c.bin_path(b)):
            c.log(f"missing {c.bin_path(b)}: cargo build --release -p palisade-bench -p dnsd")
            sys.exit(2)
    P = args.phase
    gap = 1.0 if args.quick else 3.0
    pre = 2.0 if args.quick else 5.0
    phases = []
    t = pre
    for i in range(len(PHASES)):
        phases.append((t, t + P))
        t += P + (gap if i < len(PHASES) - 1 else 0)
    timeline = {"pre": pre, "phase": P, "gap": gap, "phases": phases, "total": t + pre}
    tmpbase = tempfile.mkdtemp(prefix="palisade-attack-")
    zones = make_zones(tmpbase)
    results = []
    names = [n for n in args.servers.split(",") if n]
    for k, name in enumerate(names if args.only != "resolver" else []):
        c.log(f"attack [{k + 1}/{len(names)}] {name}: {timeline['total']:.0f} s "
              f"({len(PHASES)} phases of {P:.0f} s)")
        results.append(run_server(name, args, tmpbase, zones, timeline))
    resolver = []
    for k, name in enumerate(names if args.only != "phases" else []):
        c.log(f"attack, resolver-relayed flood [{k + 1}/{len(names)}] {name}")
        resolver.append(run_resolver(name, args, tmpbase, zones))
    cmd = "bench/scripts/attack.py " + " ".join(sys.argv[1:])
    c.save("attack", {"machine": c.machine(), "cores": os.cpu_count(), "command": cmd.strip(),
                      "quick": args.quick, "timeline": timeline, "sched": c.sched_note(),
                      "phases": [p for p, _ in PHASES], "service": SERVICE, "flooded": FLOODED,
                      "legit": {"rate": LEGIT_RATE, "sources": 1024, "prefix": LEGIT_SOURCES,
                                "timeout_ms": TIMEOUT_MS, "cookies": True, "tcp_retry": True},
                      "flood_pps": args.flood_pps, "servers": results,
                      "resolver": {"address": RESOLVER, "flood_pps": args.resolver_pps,
                                   "ordinary_rate": 100, "servers": resolver},
                      "when": time.strftime("%Y-%m-%d %H:%M:%S")})


if __name__ == "__main__":
    main()
