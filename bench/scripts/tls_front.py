#!/usr/bin/env python3
"""http-front as the TLS edge against nginx, both holding the same 10,000 certificates, in one run.

CPU 0: the proxy under test (one worker) and the origin (nginx returning a 2-byte body).
CPU 1: http-load (one thread; rustls, full handshakes: no resumption).
Each proxy's CPU time comes from /proc/PID/task/*/schedstat (all threads, user and kernel).

Measured:
  load             start-up with TLS_CERTS pairs: time until the TLS listener accepts, time
                   until every pair is read (http-front reads cert_dir after its listeners
                   open), and peak memory per certificate (against a start with one pair)
  nginx-handshake  a new connection per request, each with the next of the 10,000 server names
  front-handshake  the same against http-front ([tls] cert_dir)
  nginx-tls        keep-alive requests over TLS (one name)
  front-tls        the same against http-front
Both proxy to the origin with pooled keep-alive upstream connections.
JA4 + HTTP/2 fingerprinting per connection: `cargo bench -p http-front --bench fingerprint`.

Usage: tls_front.py [SECONDS] [CONNECTIONS]
Writes bench/report/raw/tls_front.json.
"""
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time

import common as c

SECONDS = int(sys.argv[1]) if len(sys.argv) > 1 else 10
CONNS = int(sys.argv[2]) if len(sys.argv) > 2 else 64
CERTS = int(os.environ.get("TLS_CERTS", "1000" if os.environ.get("BENCH_QUICK") == "1" else "10000"))
HTTP_LOAD = os.path.join(c.ROOT, "target", "release", "http-load")
TLS_CERTS = os.path.join(c.ROOT, "target", "release", "tls-certs")
FRONT = os.path.join(c.ROOT, "target", "release", "http-front")


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    p = s.getsockname()[1]
    s.close()
    return p


def accepts(port):
    try:
        socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
        return True
    except OSError:
        return False


def wait(pred, timeout=120.0, step=0.01):
    end = time.time() + timeout
    while time.time() < end:
        if pred():
            return True
        time.sleep(step)
    return False


def load(port, sni, count, per_conn, seconds):
    cmd = ["taskset", "-c", "1", HTTP_LOAD, "--target", f"127.0.0.1:{port}", "--host", "bench.test",
           "--conns", str(CONNS), "--seconds", str(seconds), "--per-conn", str(per_conn), "--tls",
           "--sni", sni, "--sni-count", str(count)]
    out = subprocess.run(cmd, capture_output=True, text=True, check=False)
    try:
        return json.loads(out.stdout)
    except ValueError:
        raise SystemExit(f"http-load failed: {out.stdout} {out.stderr}")


def measure(name, server, port, sni, count, per_conn):
    load(port, sni, count, per_conn, 2)
    cpu0 = c.cpu_ns(server.pid)
    t0 = time.time()
    r = load(port, sni, count, per_conn, SECONDS)
    cpu = c.cpu_ns(server.pid) - cpu0
    wall = time.time() - t0
    n = r["connects"] if per_conn == 1 else r["requests"]
    res = dict(name=name, rps=r["rps"], conns_per_s=r["connects"] / wall, p50_us=r["p50_us"],
               p99_us=r["p99_us"], errors=r["errors"], non_2xx=r["non_2xx"],
               us_per_event=cpu / 1000.0 / max(n, 1), cpu_util=cpu / 1e9 / wall)
    what = "handshake" if per_conn == 1 else "request"
    c.log(f"{name:>16}: {r['rps']:9.0f} req/s, {res['conns_per_s']:8.0f} conn/s, "
          f"{res['us_per_event']:7.1f} us CPU per {what}, proxy CPU {res['cpu_util'] * 100:.0f}%, "
          f"errors {r['errors']}, non-2xx {r['non_2xx']}")
    return res


def main():
    c.need("nginx", "taskset", "cargo")
    subprocess.run(["cargo", "build", "--release", "-p", "http-front", "-p", "palisade-bench",
                    "--bin", "http-front", "--bin", "http-load", "--bin", "tls-certs"],
                   cwd=c.ROOT, check=True)
    tmp = tempfile.mkdtemp(prefix="palisade-tls-")
    certs = os.path.join(tmp, "certs")
    c.progress(f"writing {CERTS:,} certificate pairs")
    subprocess.run([TLS_CERTS, "--dir", certs, "--count", str(CERTS)], check=True)
    c.done_progress()
    one = os.path.join(tmp, "one")
    os.makedirs(one)
    for ext in ("crt", "key"):
        shutil.copy(os.path.join(certs, f"n0.bench.test.{ext}"), one)
    for d in ("body", "proxy"):
        os.makedirs(os.path.join(tmp, d), exist_ok=True)
    origin_port, nginx_port, front_port, metrics_port = (free_port() for _ in range(4))
    common_http = (f"daemon off;\nmaster_process off;\nworker_processes 1;\npid {tmp}/PID.pid;\n"
                   f"error_log {tmp}/PID-error.log warn;\nevents {{ worker_connections 4096; }}\n")
    with open(os.path.join(tmp, "origin.conf"), "w") as f:
        f.write(common_http.replace("PID", "origin") +
                f"http {{\n access_log off;\n client_body_temp_path {tmp}/body;\n"
                f" proxy_temp_path {tmp}/proxy;\n keepalive_requests 1000000;\n"
                f" server {{ listen 127.0.0.1:{origin_port}; location / {{ return 200 'ok'; }} }}\n}}\n")

    def nginx_conf(n, path):
        blocks = "".join(
            f" server {{ listen 127.0.0.1:{nginx_port} ssl; server_name n{i}.bench.test;"
            f" ssl_certificate {certs}/n{i}.bench.test.crt;"
            f" ssl_certificate_key {certs}/n{i}.bench.test.key;"
            f" location / {{ proxy_pass http://origin; proxy_http_version 1.1;"
            f" proxy_set_header Connection \"\"; }} }}\n" for i in range(n))
        with open(path, "w") as f:
            f.write(common_http.replace("PID", "nginx") +
                    f"http {{\n access_log off;\n client_body_temp_path {tmp}/body;\n"
                    f" proxy_temp_path {tmp}/proxy;\n keepalive_requests 1000000;\n"
                    f" ssl_session_cache off;\n ssl_session_tickets off;\n"
                    f" server_names_hash_max_size 65536;\n server_names_hash_bucket_size 128;\n"
                    f" upstream origin {{ server 127.0.0.1:{origin_port}; keepalive 64; }}\n"
                    f"{blocks}}}\n")
        return path

    def front_conf(cert_dir, path):
        with open(path, "w") as f:
            f.write(f"[server]\nlisten = []\nworkers = 1\n[tls]\nlisten = [\"127.0.0.1:{front_port}\"]\n"
                    f"cert_dir = \"{cert_dir}\"\n[metrics]\nlisten = \"127.0.0.1:{metrics_port}\"\n"
                    f"[[upstream]]\nname = \"app\"\nservers = [\"127.0.0.1:{origin_port}\"]\n"
                    f"[[site]]\nhosts = [\"*\"]\nupstream = \"app\"\n")
        return path

    def read_pairs():
        try:
            with urllib_open(f"http://127.0.0.1:{metrics_port}/metrics") as r:
                text = r.read().decode()
        except OSError:
            return 0
        m = re.search(r'http_front_tls_cert_pairs_read_total\{result="ok"\} (\d+)', text)
        return int(m.group(1)) if m else 0

    servers = []
    results = {}
    try:
        origin = c.Server("origin", ["nginx", "-p", tmp, "-c", os.path.join(tmp, "origin.conf")], cpu=0)
        servers.append(origin)
        assert wait(lambda: accepts(origin_port)), origin.tail()

        # Start-up and memory: one pair, then all of them.
        startup = {}
        for name, n in (("nginx-1", 1), ("nginx-all", CERTS)):
            t0 = time.time()
            s = c.Server("nginx", ["nginx", "-p", tmp, "-c", nginx_conf(n, os.path.join(tmp, f"{name}.conf"))], cpu=0)
            assert wait(lambda: accepts(nginx_port)), s.tail()
            startup[name] = dict(listening_s=time.time() - t0, all_read_s=time.time() - t0,
                                 rss_kb=c.rss_kb(s.pid))
            if n == 1:
                s.stop()
            else:
                nginx = s
                servers.append(s)
        for name, d in (("front-1", one), ("front-all", certs)):
            t0 = time.time()
            s = c.Server("http-front", [FRONT, "-c", front_conf(d, os.path.join(tmp, f"{name}.toml"))],
                         cpu=0, env=dict(os.environ, RUST_LOG="warn"))
            assert wait(lambda: accepts(front_port)), s.tail()
            listening = time.time() - t0
            want = 1 if d == one else CERTS
            assert wait(lambda: read_pairs() >= want), s.tail()
            startup[name] = dict(listening_s=listening, all_read_s=time.time() - t0,
                                 rss_kb=c.rss_kb(s.pid))
            if d == one:
                s.stop()
                time.sleep(0.2)
            else:
                front = s
                servers.append(s)
        for k, v in startup.items():
            c.log(f"{k:>10}: listening after {v['listening_s'] * 1000:.0f} ms, every pair read after "
                  f"{v['all_read_s'] * 1000:.0f} ms, peak RSS {v['rss_kb'] / 1024:.1f} MiB")
        per_cert = {
            "nginx": (startup["nginx-all"]["rss_kb"] - startup["nginx-1"]["rss_kb"]) / max(CERTS - 1, 1),
            "front": (startup["front-all"]["rss_kb"] - startup["front-1"]["rss_kb"]) / max(CERTS - 1, 1),
        }

        sni = "n{}.bench.test"
        for name, server, port, per_conn, count in (
            ("nginx-handshake", nginx, nginx_port, 1, CERTS),
            ("front-handshake", front, front_port, 1, CERTS),
            ("nginx-tls", nginx, nginx_port, 0, 1),
            ("front-tls", front, front_port, 0, 1),
        ):
            results[name] = measure(name, server, port, sni, count, per_conn)
    finally:
        for s in servers:
            s.stop()

    nh, fh, nt, ft = (results[k] for k in ("nginx-handshake", "front-handshake", "nginx-tls", "front-tls"))
    ratios = {
        "handshakes_per_s_front_vs_nginx": fh["conns_per_s"] / nh["conns_per_s"],
        "cpu_per_handshake_front_vs_nginx": fh["us_per_event"] / nh["us_per_event"],
        "rps_tls_keepalive_front_vs_nginx": ft["rps"] / nt["rps"],
        "cpu_per_tls_request_front_vs_nginx": ft["us_per_event"] / nt["us_per_event"],
        "memory_per_cert_front_vs_nginx": per_cert["front"] / per_cert["nginx"] if per_cert["nginx"] > 0 else None,
        "listening_after_front_vs_nginx": startup["front-all"]["listening_s"] / startup["nginx-all"]["listening_s"],
    }
    print(f"\nhttp-front vs nginx as the TLS edge with {CERTS:,} certificates, {c.machine()}; "
          f"proxy and origin on CPU 0, http-load (rustls, full handshakes) on CPU 1")
    for k, v in startup.items():
        print(f"  {k:>10}: listening after {v['listening_s'] * 1000:7.0f} ms, every pair read after "
              f"{v['all_read_s'] * 1000:7.0f} ms, peak RSS {v['rss_kb'] / 1024:7.1f} MiB")
    print(f"  memory per certificate: http-front {per_cert['front']:.2f} KiB, nginx {per_cert['nginx']:.2f} KiB")
    for k, r in results.items():
        print(f"  {k:>16}: {r['rps']:9.0f} req/s {r['conns_per_s']:8.0f} conn/s "
              f"{r['us_per_event']:8.1f} us CPU each, errors {r['errors']}")
    print("ratios:")
    for k, v in ratios.items():
        print(f"  {k:<42} {v if v is None else round(v, 3)}")
    summary = (
        f"With {CERTS:,} certificates, http-front completes {ratios['handshakes_per_s_front_vs_nginx']:.2f}x "
        f"nginx's TLS handshakes per second at {ratios['cpu_per_handshake_front_vs_nginx']:.2f}x its CPU per "
        f"handshake, and serves {ratios['rps_tls_keepalive_front_vs_nginx']:.2f}x its keep-alive requests/s "
        f"over TLS at {ratios['cpu_per_tls_request_front_vs_nginx']:.2f}x its CPU per request. It listens "
        f"after {startup['front-all']['listening_s'] * 1000:.0f} ms (nginx: "
        f"{startup['nginx-all']['listening_s'] * 1000:.0f} ms, after reading every pair) and has read all "
        f"pairs after {startup['front-all']['all_read_s'] * 1000:.0f} ms; {per_cert['front']:.1f} KiB per "
        f"certificate (nginx {per_cert['nginx']:.1f} KiB).")
    c.save("tls_front", {"machine": c.machine(), "cores": os.cpu_count(), "seconds": SECONDS,
                         "connections": CONNS, "certificates": CERTS, "startup": startup,
                         "memory_per_cert_kib": per_cert, "results": results, "ratios": ratios,
                         "summary_md": summary})
    print(summary)
    shutil.rmtree(tmp, ignore_errors=True)


def urllib_open(url):
    import urllib.request
    return urllib.request.urlopen(url, timeout=2)


if __name__ == "__main__":
    main()
