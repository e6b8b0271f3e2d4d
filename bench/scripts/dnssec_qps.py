#!/usr/bin/env python3
"""CPU per query with DO set on a signed zone of 100,000 names (NSEC3, no salt, no extra
iterations as RFC 9276 advises): dnsd, NSD and Knot DNS, each pinned to CPU 0 with
dnsperf (-D: DNSSEC OK) on CPU 1. Answers carry RRSIGs; negative answers carry NSEC3
proofs (three records for NXDOMAIN).

Query mix: 70% existing names, 20% NXDOMAIN, 10% NODATA.
Usage: dnssec_qps.py [SECONDS] [--quick]
"""
import os
import random
import subprocess
import sys
import tempfile

import common as c
import dns_qps

NAMES = 100_000


def make_signed_zone(tmp):
    path = os.path.join(tmp, "signed.test.zone")
    with open(path, "w") as f:
        f.write("$ORIGIN signed.test.\n$TTL 3600\n@ SOA ns1 hostmaster 1 7200 3600 1209600 300\n")
        f.write("@ NS ns1\nns1 A 192.0.2.1\n")
        for i in range(NAMES):
            f.write(f"h{i} A 10.{i >> 16 & 255}.{i >> 8 & 255}.{i & 255}\n")
    c.log(f"signing {NAMES} names with NSEC3 (dnssec-signzone)...")
    run = lambda cmd: subprocess.run(cmd, shell=True, cwd=tmp, check=True, capture_output=True)
    run("dnssec-keygen -q -a ECDSAP256SHA256 -K . signed.test")
    run("dnssec-keygen -q -f KSK -a ECDSAP256SHA256 -K . signed.test")
    run("dnssec-signzone -q -3 - -H 0 -o signed.test -K . -S -f signed.zone signed.test.zone")
    return os.path.join(tmp, "signed.zone")


def make_queries(path, n=100000):
    rnd = random.Random(5)
    with open(path, "w") as f:
        for _ in range(n):
            r = rnd.random()
            if r < 0.7:
                f.write(f"h{rnd.randrange(NAMES)}.signed.test A\n")
            elif r < 0.9:
                f.write(f"nx{rnd.randrange(10**7)}.signed.test A\n")
            else:
                f.write(f"h{rnd.randrange(NAMES)}.signed.test MX\n")


def main():
    seconds = 10
    args = [a for a in sys.argv[1:] if not a.startswith("--")]
    if args:
        seconds = int(args[0])
    elif "--quick" in sys.argv or c.quick():
        seconds = 3
    c.need("dnsperf", "knotd", "nsd", "dnssec-signzone", "taskset")
    tmp = tempfile.mkdtemp(prefix="palisade-dnssec-")
    zone = make_signed_zone(tmp)
    qfile = os.path.join(tmp, "queries.txt")
    make_queries(qfile)
    zones = [("signed.test.", zone)]
    bin_dir = os.path.join(c.ROOT, "target", "release")
    plans = [
        ("dnsd", lambda p: c.Server("dnsd", [f"{bin_dir}/dnsd", "serve", "-c",
                                             c.dnsd_conf(tmp, [dns_qps.ADDR], p, zones, extra=c.RRL_OFF)], 0,
                                    env=dict(os.environ, RUST_LOG="warn"))),
        ("nsd", lambda p: c.Server("nsd", ["nsd", "-d", "-c", c.nsd_conf(tmp, dns_qps.ADDR, p, zones)], 0)),
        ("knot", lambda p: c.Server("knot", ["knotd", "-c", c.knot_conf(tmp, dns_qps.ADDR, p, zones)], 0)),
    ]
    results = []
    port = 5420
    for name, start in plans:
        port += 1
        s = start(port)
        try:
            r = dns_qps.measure(name, s, port, qfile, extra=("-D",), seconds=seconds)
            if r:
                results.append(r)
        finally:
            s.stop()
    by = {r["name"]: r for r in results}
    print(f"\nCPU per answered query with DO, signed {NAMES}-name NSEC3 zone, {c.machine()}, {seconds} s")
    print(f"command: bench/scripts/dnssec_qps.py {seconds}")
    print(f"{'server':>8} {'q/s':>10} {'us/query':>9} {'vs dnsd':>8}")
    for r in results:
        ratio = r["us_per_query"] / by["dnsd"]["us_per_query"] if "dnsd" in by else 0
        print(f"{r['name']:>8} {r['qps']:10.0f} {r['us_per_query']:9.2f} {ratio:8.2f}x")
    c.save("dnssec_qps", {"machine": c.machine(), "seconds": seconds, "names": NAMES, "results": results})


if __name__ == "__main__":
    main()
