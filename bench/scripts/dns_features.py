#!/usr/bin/env python3
"""What DNS over TLS, answers by client network and ALIAS cost (issue 39), same run.

1. DoT: dnsperf -m dot (CPU 1) against dnsd's tls_listen and BIND 9.18's DoT listener (each
   server on CPU 0, one after the other, the same zone and query), and against dnsd's own TCP
   (dnsperf -m tcp): queries per second and the server's CPU time per query (schedstat of
   all its threads). Goal: DoT well ahead of BIND's rate and within 1.5x of dnsd's TCP cost.
2. Per answer: one dnsd (one UDP worker on CPU 0) gets, in alternating runs, N queries for a
   plain A, for a name with variants by client network (the sender's source picks one), and
   for an ALIAS to a name of the same zone; dnsd's CPU time per query, medians, and the
   difference to the plain answer. Goal: a geo answer within +100 ns of a plain one.

Usage: dns_features.py [--quick] [--seconds S] [--queries N] [--runs N]
"""
import argparse
import os
import shutil
import socket
import struct
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common as c  # noqa: E402

LO = "127.0.0.1"
SRC = "127.82.0.2"
ZONE = """$ORIGIN bench.test.
$TTL 3600
@ SOA ns1 hm 1 7200 3600 1209600 300
@ NS ns1
ns1 A 192.0.2.1
www A 192.0.2.80
geo A 192.0.2.81
"""
# ALIAS is dnsd's (and PowerDNS's): only the per-answer part's zone holds one.
ALIAS = "flat ALIAS www.bench.test.\n"
GEO = """geo.bench.test:
  - net: 10.0.0.0/8
    A: 198.51.100.10
  - net: 127.82.0.0/16
    A: 198.51.100.82
  - net: 2001:db8::/32
    A: 198.51.100.6
"""


def free_tcp_port(ip=LO):
    s = socket.socket()
    s.bind((ip, 0))
    p = s.getsockname()[1]
    s.close()
    return p


def query(qid, name):
    q = struct.pack(">HHHHHH", qid, 0x0100, 1, 0, 0, 1)
    for label in name.split("."):
        q += bytes([len(label)]) + label.encode()
    q += b"\x00\x00\x01\x00\x01" + b"\x00\x00\x29\x04\xd0\x00\x00\x00\x00\x00\x00"
    return q


def dnsperf(mode, port, qfile, seconds):
    out = subprocess.run(
        c.niced(["dnsperf", "-m", mode, "-s", LO, "-p", str(port), "-d", qfile, "-l",
                 str(seconds), "-c", "8", "-q", "100", "-t", "2"], "load", 1),
        capture_output=True, text=True, check=False)
    text = out.stdout + out.stderr
    import re
    m = re.search(r"Queries completed:\s+(\d+)", text)
    q = re.search(r"Queries per second:\s+([\d.]+)", text)
    if not m or not q:
        raise RuntimeError(f"dnsperf -m {mode}:\n{text[-1500:]}")
    return int(m.group(1)), float(q.group(1))


def measure(name, pgid, mode, port, qfile, seconds):
    cpu0 = c.cpu_ns(pgid)
    done, qps = dnsperf(mode, port, qfile, seconds)
    cpu = c.cpu_ns(pgid) - cpu0
    return {"server": name, "mode": mode, "completed": done, "qps": qps,
            "cpu_ns_per_query": cpu / max(done, 1)}


def dot_part(tmp, seconds):
    subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt",
                    "ec_paramgen_curve:P-256", "-nodes", "-keyout", f"{tmp}/k.pem", "-out",
                    f"{tmp}/c.pem", "-days", "2", "-subj", "/CN=bench.test"],
                   check=True, capture_output=True)
    zone = f"{tmp}/bench.test.zone"
    qfile = f"{tmp}/q.txt"
    with open(qfile, "w") as f:
        f.write("www.bench.test A\n")
    rows = []
    # dnsd: UDP/TCP port and a TLS port on loopback.
    port, tls = c.free_udp_port(), free_tcp_port()
    conf = c.dnsd_conf(tmp, [LO], port, [("bench.test.", zone)], extra=c.RRL_OFF)
    text = open(conf).read().replace(
        "workers = 1",
        f'workers = 1\ntls_listen = ["{LO}:{tls}"]\ntls_cert = "{tmp}/c.pem"\n'
        f'tls_key = "{tmp}/k.pem"\ntcp_max_per_source = 64\ntcp_max_queries = 1000000', 1)
    open(conf, "w").write(text)
    srv = c.Server("dnsd", [c.dnsd_bin(), "serve", "-c", conf], 0,
                   env=dict(os.environ, RUST_LOG="warn"))
    try:
        if c.wait_answer(LO, port, "www.bench.test", qtype=1, timeout=20, proc=srv.proc) is None:
            raise RuntimeError(f"dnsd did not start:\n{srv.tail()}")
        c.progress("dnsd DoT")
        rows.append(measure("dnsd", srv.pid, "dot", tls, qfile, seconds))
        c.progress("dnsd TCP")
        rows.append(measure("dnsd", srv.pid, "tcp", port, qfile, seconds))
    finally:
        srv.stop()
    # BIND 9.18 with a DoT listener (named listens on addresses its interfaces carry).
    bport, btls = free_tcp_port(), free_tcp_port()
    bdir = f"{tmp}/named"
    os.makedirs(bdir, exist_ok=True)
    with open(f"{bdir}/named.conf", "w") as f:
        f.write(f"""tls local {{ key-file "{tmp}/k.pem"; cert-file "{tmp}/c.pem"; }};
options {{
  directory "{bdir}"; pid-file "{bdir}/named.pid";
  listen-on port {bport} {{ {LO}; }};
  listen-on port {btls} tls local {{ {LO}; }};
  listen-on-v6 {{ none; }}; recursion no; dnssec-validation no; notify no;
  tcp-clients 1000; rate-limit {{ responses-per-second 0; }};
}};
controls {{ }};
zone "bench.test" {{ type primary; file "{zone}"; }};
""")
    named = c.Server("named", ["named", "-g", "-n", "1", "-U", "1", "-c", f"{bdir}/named.conf"], 0)
    try:
        if c.wait_answer(LO, bport, "www.bench.test", qtype=1, timeout=20,
                         proc=named.proc) is None:
            raise RuntimeError(f"named did not start:\n{named.tail()}")
        c.progress("BIND DoT")
        rows.append(measure("bind", named.pid, "dot", btls, qfile, seconds))
    finally:
        named.stop()
    c.done_progress()
    return rows


def answer_run(kind, n, port, pgid, sock):
    name = {"plain": "www.bench.test", "geo": "geo.bench.test", "alias": "flat.bench.test"}[kind]
    msgs = [query(i, name) for i in range(256)]
    cpu0 = c.cpu_ns(pgid)
    got = c.udp_flood(SRC, LO, port, msgs, n)
    cpu = c.cpu_ns(pgid) - cpu0
    return {"kind": kind, "answered": got, "cpu_ns_per_query": cpu / max(got, 1)}


def answer_part(tmp, n, runs):
    zone = f"{tmp}/features.test.zone"
    with open(zone, "w") as f:
        f.write(ZONE + ALIAS)
    with open(f"{tmp}/geo.yaml", "w") as f:
        f.write(GEO)
    port = c.free_udp_port()
    conf = c.dnsd_conf(tmp, [LO], port, [("bench.test.", zone)],
                       extra=c.RRL_OFF + "\n[defence.random_subdomain]\nenabled = false",
                       zone_extra=f'geo = "{tmp}/geo.yaml"')
    text = open(conf).read().replace("workers = 1", "workers = 1\nudp_rcvbuf = 8388608", 1)
    open(conf, "w").write(text)
    srv = c.Server("dnsd", [c.dnsd_bin(), "serve", "-c", conf], 0,
                   env=dict(os.environ, RUST_LOG="warn"))
    rows = []
    try:
        if c.wait_answer(LO, port, "www.bench.test", qtype=1, timeout=20, proc=srv.proc) is None:
            raise RuntimeError(f"dnsd did not start:\n{srv.tail()}")
        sock = f"{tmp}/dnsd.sock"
        answer_run("plain", 5000, port, srv.pid, sock)
        kinds = ["plain", "geo", "alias"]
        for r in range(runs):
            order = kinds[r % 3:] + kinds[:r % 3]
            for k in order:
                c.progress(f"run {r + 1}/{runs}: {k}")
                rows.append(answer_run(k, n, port, srv.pid, sock))
        c.done_progress()
    finally:
        srv.stop()
    return rows


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", default=c.quick())
    ap.add_argument("--seconds", type=int, default=None)
    ap.add_argument("--queries", type=int, default=None)
    ap.add_argument("--runs", type=int, default=None)
    args = ap.parse_args()
    c.need("dnsperf", "named", "openssl")
    seconds = args.seconds or (5 if args.quick else 15)
    n = args.queries or (50_000 if args.quick else 200_000)
    runs = args.runs or (3 if args.quick else 5)
    cmd = "bench/scripts/dns_features.py " + " ".join(sys.argv[1:])
    tmp = tempfile.mkdtemp(prefix="palisade-features-")
    with open(f"{tmp}/bench.test.zone", "w") as f:
        f.write(ZONE)
    os.sched_setaffinity(0, {1 % os.cpu_count()})
    try:
        dot = dot_part(tmp, seconds)
        ans = answer_part(tmp, n, runs)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print(f"\nDNS over TLS, {c.machine()}, dnsperf -c 8 -q 100 for {seconds} s each")
    print(f"command: {cmd}")
    print(f"{'server':>6} {'mode':>5} {'queries/s':>10} {'server CPU ns/query':>20}")
    for x in dot:
        print(f"{x['server']:>6} {x['mode']:>5} {x['qps']:>10.0f} {x['cpu_ns_per_query']:>20.0f}")
    by = {(x["server"], x["mode"]): x for x in dot}
    d, t, b = by[("dnsd", "dot")], by[("dnsd", "tcp")], by[("bind", "dot")]
    print(f"dnsd DoT / BIND DoT: {d['qps'] / b['qps']:.2f}x queries/s, "
          f"{d['cpu_ns_per_query'] / b['cpu_ns_per_query']:.2f}x CPU per query; "
          f"dnsd DoT / dnsd TCP: {d['cpu_ns_per_query'] / t['cpu_ns_per_query']:.2f}x CPU per query")
    med = {}
    for k in ("plain", "geo", "alias"):
        v = sorted(x["cpu_ns_per_query"] for x in ans if x["kind"] == k)
        med[k] = v[len(v) // 2]
    print(f"\nPer answer (dnsd UDP, {n} queries per run, {runs} runs, medians of CPU ns/query):")
    for k in ("plain", "geo", "alias"):
        print(f"  {k:>5}: {med[k]:.0f} ns ({med[k] - med['plain']:+.0f} ns, "
              f"{med[k] / med['plain']:.3f}x plain)")
    c.save("dns_features", {"machine": c.machine(), "command": cmd, "dot": dot, "answers": ans,
                            "median_ns": med, "when": time.strftime("%Y-%m-%d %H:%M:%S")})


if __name__ == "__main__":
    main()
