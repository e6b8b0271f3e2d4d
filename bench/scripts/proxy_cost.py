#!/usr/bin/env python3
"""What a PROXY protocol v2 header costs dnsd per query (issue 36), end to end.

One dnsd (one UDP worker on CPU 0, RRL off, `[server] proxy_allow = ["127.80.0.1"]`) gets,
in alternating runs, N plain queries from 127.80.0.2 and N queries behind a v2 header from
the listed proxy 127.80.0.1, each header naming one of 4,096 client addresses in turn. The
sender (this script, on CPU 1) paces below what the worker can take. Reported per run and as
medians: dnsd's CPU time per query (schedstat of all its threads, so the receive, the
answer and the send are counted too), and the ratio headered / plain. The parse alone is in
`cargo bench -p shield --bench proxy`.

Usage: proxy_cost.py [--quick] [--queries N] [--runs N]
"""
import argparse
import os
import socket
import struct
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common as c  # noqa: E402

PROXY, PLAIN, ADDR = "127.80.0.1", "127.80.0.2", "127.80.0.10"
SIG = b"\r\n\r\n\x00\r\nQUIT\n"


def query(qid):
    q = struct.pack(">HHHHHH", qid, 0x0100, 1, 0, 0, 1)
    for label in (b"www", b"bench", b"test"):
        q += bytes([len(label)]) + label
    q += b"\x00\x00\x01\x00\x01"
    # EDNS OPT, 1232 bytes
    q += b"\x00\x00\x29\x04\xd0\x00\x00\x00\x00\x00\x00"
    return q


def header(client_ip, client_port, dst_port):
    addrs = socket.inet_aton(client_ip) + socket.inet_aton(ADDR)
    addrs += struct.pack(">HH", client_port, dst_port)
    return SIG + bytes([0x21, 0x12]) + struct.pack(">H", len(addrs)) + addrs


def run(kind, n, port, pgid):
    src = PROXY if kind == "header" else PLAIN
    msgs = []
    for i in range(4096):
        q = query(i)
        if kind == "header":
            q = header(f"10.{(i >> 8) & 255}.{i & 255}.1", 40000 + i, port) + q
        msgs.append(q)
    stats0 = c.ctl_stats(pgid[1])
    cpu0 = c.cpu_ns(pgid[0])
    t0 = time.monotonic()
    got = c.udp_flood(src, ADDR, port, msgs, n)
    secs = time.monotonic() - t0
    cpu = c.cpu_ns(pgid[0]) - cpu0
    st = c.ctl_stats(pgid[1])
    drops = sum(v - stats0.get(k, 0) for k, v in st.items() if k.startswith("drops."))
    return {"kind": kind, "sent": n, "answered": got, "drops": drops, "secs": secs,
            "cpu_ns_per_query": cpu / max(got, 1)}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", default=c.quick())
    ap.add_argument("--queries", type=int, default=None)
    ap.add_argument("--runs", type=int, default=None)
    args = ap.parse_args()
    n = args.queries or (50_000 if args.quick else 200_000)
    runs = args.runs or (3 if args.quick else 5)
    cmd = "bench/scripts/proxy_cost.py " + " ".join(sys.argv[1:])
    tmp = tempfile.mkdtemp(prefix="palisade-proxy-")
    zone = os.path.join(tmp, "bench.test.zone")
    with open(zone, "w") as f:
        f.write("$ORIGIN bench.test.\n$TTL 3600\n@ SOA ns1 hm 1 7200 3600 1209600 300\n"
                "@ NS ns1\nns1 A 192.0.2.1\nwww A 192.0.2.80\n")
    port = c.free_udp_port()
    extra = c.RRL_OFF + f'\n[defence.random_subdomain]\nenabled = false\n'
    conf = c.dnsd_conf(tmp, [ADDR], port, [("bench.test.", zone)], extra=extra)
    text = open(conf).read().replace("workers = 1", f'workers = 1\nproxy_allow = ["{PROXY}"]\n'
                                     "udp_rcvbuf = 8388608", 1)
    open(conf, "w").write(text)
    srv = c.Server("dnsd", [c.dnsd_bin(), "serve", "-c", conf], 0,
                   env=dict(os.environ, RUST_LOG="warn"))
    rows = []
    try:
        if c.wait_answer(ADDR, port, "www.bench.test", qtype=1, timeout=20, proc=srv.proc) is None:
            raise RuntimeError(f"dnsd did not start:\n{srv.tail()}")
        os.sched_setaffinity(0, {1 % os.cpu_count()})
        sock = os.path.join(tmp, "dnsd.sock")
        run("plain", 5000, port, (srv.pid, sock))  # warm up
        for r in range(runs):
            for kind in (("plain", "header") if r % 2 == 0 else ("header", "plain")):
                c.progress(f"run {r + 1}/{runs}: {kind}")
                rows.append(run(kind, n, port, (srv.pid, sock)))
        c.done_progress()
    finally:
        srv.stop()
    med = {}
    for kind in ("plain", "header"):
        v = sorted(x["cpu_ns_per_query"] for x in rows if x["kind"] == kind)
        med[kind] = v[len(v) // 2]
    print(f"\nPROXY v2 header cost in dnsd, {c.machine()}, {n} queries per run, {runs} runs")
    print(f"command: {cmd}")
    print(f"{'run':>4} {'kind':>7} {'answered':>9} {'drops':>6} {'dnsd CPU ns/query':>18}")
    for i, x in enumerate(rows):
        print(f"{i // 2 + 1:>4} {x['kind']:>7} {x['answered']:>9} {x['drops']:>6} "
              f"{x['cpu_ns_per_query']:>18.0f}")
    ratio = med["header"] / med["plain"]
    print(f"median: plain {med['plain']:.0f} ns, header {med['header']:.0f} ns per query; "
          f"header / plain = {ratio:.3f}x")
    c.save("proxy_cost", {"machine": c.machine(), "command": cmd, "queries": n, "runs": rows,
                          "median_ns": med, "ratio": ratio,
                          "when": time.strftime("%Y-%m-%d %H:%M:%S")})


if __name__ == "__main__":
    main()
