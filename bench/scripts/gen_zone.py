#!/usr/bin/env python3
"""Generates a large zone: A, AAAA, CNAME, delegations with glue (for load benchmarks).

Usage: gen_zone.py ORIGIN RECORDS OUT
"""
import random
import sys

origin, total, out = sys.argv[1], int(sys.argv[2]), sys.argv[3]
rnd = random.Random(1)
with open(out, "w") as f:
    f.write(f"$ORIGIN {origin}\n$TTL 3600\n")
    f.write("@ IN SOA ns1 hostmaster 2026113001 7200 3600 1209600 300\n")
    f.write("@ NS ns1\n@ NS ns2\nns1 A 192.0.2.1\nns2 A 192.0.2.2\n")
    n = 6
    i = 0
    while n < total:
        kind = i % 10
        name = f"h{i}"
        if kind < 5:
            f.write(f"{name} A 10.{(i >> 16) & 255}.{(i >> 8) & 255}.{i & 255}\n")
            n += 1
        elif kind < 7:
            f.write(f"{name} AAAA 2001:db8::{i >> 16:x}:{i & 0xffff:x}\n")
            n += 1
        elif kind < 8:
            f.write(f"{name} CNAME h{rnd.randrange(max(i, 1))}\n")
            n += 1
        else:
            # A delegation with two NS, one in-bailiwick with glue.
            f.write(f"d{i} NS ns.d{i}\nd{i} NS ns.provider.net.\nns.d{i} A 10.200.{(i >> 8) & 255}.{i & 255}\n")
            n += 3
        i += 1
