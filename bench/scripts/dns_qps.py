#!/usr/bin/env python3
"""Queries per second and CPU per answered query: dnsd, NSD, Knot DNS and a bare
recvmmsg/sendmmsg echo (the floor), each pinned to CPU 0 with dnsperf on CPU 1; and dnsd
again with 1,000 shield rules for the zone's tenant (none matching, so each query is looked
at by every rule that could apply).

The zone has 10,000 names; the query mix is 70% existing names (A), 10% NXDOMAIN, and
CNAME, wildcard, referral and AAAA queries. Response rate limiting is off everywhere.
Usage: dns_qps.py [SECONDS] [--quick]
"""
import os
import random
import sys
import tempfile
import time

import common as c

SECONDS = 10
ADDR = "127.0.0.1"


def make_zone(path):
    rnd = random.Random(7)
    with open(path, "w") as f:
        f.write("$ORIGIN bench.test.\n$TTL 3600\n@ SOA ns1 hostmaster 1 7200 3600 1209600 300\n")
        f.write("@ NS ns1\n@ NS ns2\nns1 A 192.0.2.1\nns2 A 192.0.2.2\n")
        for i in range(10000):
            f.write(f"h{i} A 10.{i >> 16 & 255}.{i >> 8 & 255}.{i & 255}\n")
            if i % 5 == 0:
                f.write(f"h{i} AAAA 2001:db8::{i:x}\n")
        for i in range(500):
            f.write(f"c{i} CNAME h{rnd.randrange(10000)}\n")
        f.write("*.wild A 192.0.2.99\n")
        for i in range(200):
            f.write(f"d{i} NS ns.d{i}\nns.d{i} A 10.200.{i >> 8}.{i & 255}\n")


def make_queries(path, n=100000):
    rnd = random.Random(11)
    with open(path, "w") as f:
        for _ in range(n):
            r = rnd.random()
            if r < 0.70:
                f.write(f"h{rnd.randrange(10000)}.bench.test A\n")
            elif r < 0.80:
                f.write(f"nx{rnd.randrange(10**6)}.bench.test A\n")
            elif r < 0.86:
                f.write(f"c{rnd.randrange(500)}.bench.test A\n")
            elif r < 0.92:
                f.write(f"w{rnd.randrange(10**5)}.wild.bench.test A\n")
            elif r < 0.96:
                f.write(f"www.d{rnd.randrange(200)}.bench.test A\n")
            else:
                f.write(f"h{rnd.randrange(0, 10000, 5)}.bench.test AAAA\n")


def make_rules(path, n=1000):
    """n deny rules for tenant 7, as the pipeline bench writes them: qname exact, suffix and
    prefix, qtype one_of, transport, udp_size, and 10 regexes; none matches the query mix."""
    words = ["api", "mail", "cdn", "img", "static", "auth", "login", "shop", "blog", "dev"]
    out = ["[[tenant]]", "id = 7"]
    regex = 0
    for i in range(n):
        w = words[i % len(words)]
        k = i % 8
        if k == 0:
            cond = f'{{ attr = "qname", suffix = "{w}{i}.example.net" }}'
        elif k == 1:
            cond = f'{{ attr = "qname", exact = "{w}.{i}.bench.test" }}'
        elif k == 2:
            cond = f'{{ attr = "qname", prefix = "{w}-{i}" }}'
        elif k == 3:
            cond = f'{{ attr = "qtype", one_of = ["TYPE{1000 + i}", "NULL"] }}'
        elif k == 4 and regex < 10 and i % 96 == 4:
            regex += 1
            cond = f'{{ attr = "qname", regex = "^{w}[0-9]+-bad{i}\\\\." }}'
        elif k == 5:
            cond = f'{{ attr = "qname", suffix = "{w}.test{i}" }}'
        elif k == 6:
            cond = (f'{{ attr = "qname", exact = "x{20000 + i}.bench.test" }}, '
                    f'{{ attr = "transport", exact = "tcp" }}')
        else:
            cond = (f'{{ attr = "qname", suffix = "{w}{i}.example.org" }}, '
                    f'{{ attr = "udp_size", lt = 512 }}')
        out += ["[[tenant.rule]]", f'name = "r{i}"', 'action = "deny"', f"when = [{cond}]"]
    with open(path, "w") as f:
        f.write("\n".join(out) + "\n")


def measure(name, server, port, qfile, extra=(), seconds=None, clients=4):
    seconds = seconds or SECONDS
    if not c.wait_udp(ADDR, port, timeout=120):
        c.log(f"{name} did not start:\n{server.tail()}")
        return None
    # Warm up, then measure.
    c.run_dnsperf(ADDR, port, qfile, 2, cpu=1, extra=extra, clients=clients)
    before = c.cpu_ns(server.pid)
    stat0 = c.proc_stat_cpus()
    t0 = time.time()
    done, lost, qps = c.run_dnsperf(ADDR, port, qfile, seconds, cpu=1, extra=extra,
                                    clients=clients)
    cpu = c.cpu_ns(server.pid) - before
    wall = time.time() - t0
    stat1 = c.proc_stat_cpus()
    busy0 = (stat1[0][0] - stat0[0][0]) / os.sysconf("SC_CLK_TCK") / wall
    us = cpu / 1000.0 / max(done, 1)
    c.log(f"{name:>8}: {qps:10.0f} q/s, {us:5.2f} us CPU per answered query, {lost} lost, "
          f"server CPU {cpu / 1e9 / wall * 100:.0f}%")
    return {"name": name, "qps": qps, "us_per_query": us, "completed": done, "lost": lost,
            "cpu_util": cpu / 1e9 / wall, "cpu0_other": max(0.0, busy0 - cpu / 1e9 / wall)}


def main():
    global SECONDS
    args = [a for a in sys.argv[1:] if not a.startswith("--")]
    if args:
        SECONDS = int(args[0])
    elif "--quick" in sys.argv or c.quick():
        SECONDS = 3
    c.need("dnsperf", "knotd", "nsd", "taskset")
    rrl_off, why = c.dnsd_accepts(c.RRL_OFF)
    dnsd_note = ("RRL off ([defence.rrl] enabled = false)" if rrl_off
                 else "this dnsd has no [defence] section yet: ran with its defaults (" + why + ")")
    tmp = tempfile.mkdtemp(prefix="palisade-qps-")
    zone = os.path.join(tmp, "bench.test.zone")
    qfile = os.path.join(tmp, "queries.txt")
    make_zone(zone)
    make_queries(qfile)
    zones = [("bench.test.", zone)]
    rules = os.path.join(tmp, "rules.toml")
    make_rules(rules)
    rules_tmp = os.path.join(tmp, "rules")
    os.makedirs(rules_tmp, exist_ok=True)
    bin_dir = os.path.join(c.ROOT, "target", "release")
    results = []
    plans = [
        ("echo", lambda p: c.Server("echo", [f"{bin_dir}/udp-echo", "--addr", ADDR, "--port", str(p)], 0)),
        ("dnsd", lambda p: c.Server("dnsd", [f"{bin_dir}/dnsd", "serve", "-c",
                                             c.dnsd_conf(tmp, [ADDR], p, zones,
                                                         extra=c.RRL_OFF if rrl_off else "")], 0,
                                    env=dict(os.environ, RUST_LOG="warn"))),
        ("dnsd+rules", lambda p: c.Server("dnsd+rules", [f"{bin_dir}/dnsd", "serve", "-c",
                                                         c.dnsd_conf(rules_tmp, [ADDR], p, zones,
                                                                     extra=(c.RRL_OFF if rrl_off else "")
                                                                     + f'\n[rules]\nfile = "{rules}"',
                                                                     zone_extra="tenant = 7")], 0,
                                          env=dict(os.environ, RUST_LOG="warn"))),
        ("nsd", lambda p: c.Server("nsd", ["nsd", "-d", "-c", c.nsd_conf(tmp, ADDR, p, zones)], 0)),
        ("knot", lambda p: c.Server("knot", ["knotd", "-c", c.knot_conf(tmp, ADDR, p, zones)], 0)),
    ]
    port = 5390
    for name, start in plans:
        port += 1
        s = start(port)
        try:
            r = measure(name, s, port, qfile)
            if r:
                results.append(r)
        finally:
            s.stop()
    # TCP: 16 connections, queries pipelined on each (dnsperf -m tcp), same servers.
    tcp_plans = [p for p in plans if p[0] in ("dnsd", "nsd", "knot")]
    for name, start in tcp_plans:
        port += 1
        s = start(port)
        try:
            r = measure(name + " tcp", s, port, qfile, extra=("-m", "tcp"), clients=16)
            if r:
                results.append(r)
        finally:
            s.stop()
    by = {r["name"]: r for r in results}
    print(f"\nCPU per answered query, {c.machine()}, server on CPU 0, dnsperf on CPU 1, {SECONDS} s")
    print(f"command: bench/scripts/dns_qps.py {SECONDS}")
    print(f"dnsd: {dnsd_note}")
    print(f"{'server':>10} {'q/s':>10} {'us/query':>9} {'vs dnsd':>8}")
    for r in results:
        ref = by.get("dnsd tcp" if r["name"].endswith(" tcp") else "dnsd")
        ratio = r["us_per_query"] / ref["us_per_query"] if ref else 0
        print(f"{r['name']:>10} {r['qps']:10.0f} {r['us_per_query']:9.2f} {ratio:8.2f}x")
    if "dnsd tcp" in by and "knot tcp" in by:
        print(f"TCP (16 pipelined connections): dnsd costs "
              f"{by['dnsd tcp']['us_per_query'] / by['knot tcp']['us_per_query']:.2f}x Knot per query"
              + (f", {by['dnsd tcp']['us_per_query'] / by['nsd tcp']['us_per_query']:.2f}x NSD"
                 if "nsd tcp" in by else ""))
    if "dnsd" in by and "echo" in by:
        print(f"dnsd above the bare echo: {by['dnsd']['us_per_query'] - by['echo']['us_per_query']:.2f} us")
    if "dnsd" in by and "dnsd+rules" in by:
        print(f"1,000 shield rules: +{(by['dnsd+rules']['us_per_query'] - by['dnsd']['us_per_query']) * 1000:.0f} ns "
              f"per query ({by['dnsd+rules']['us_per_query'] / by['dnsd']['us_per_query']:.2f}x dnsd without)")
    c.save("dns_qps", {"machine": c.machine(), "cores": os.cpu_count(), "seconds": SECONDS,
                       "command": f"bench/scripts/dns_qps.py {SECONDS}", "dnsd_note": dnsd_note,
                       "sched": c.sched_note(),
                       "query_mix": "70% A existing, 10% NXDOMAIN, 6% CNAME, 6% wildcard, "
                                    "4% referral, 4% AAAA; 10,000-name zone",
                       "when": time.strftime("%Y-%m-%d %H:%M:%S"), "results": results})


if __name__ == "__main__":
    main()
