#!/usr/bin/env python3
"""http-front against nginx as a plain reverse proxy to the same origin, in one run.

CPU 0: the proxy under test (nginx with one worker, or http-front with one worker) and the
origin (nginx returning a 2-byte body), so that the proxy's own cost sets the throughput.
CPU 1: wrk (one thread).
Each proxy's CPU time comes from /proc/PID/task/*/schedstat (all threads, user and kernel).
The keep-alive and close cases run in HTTP_BENCH_ROUNDS interleaved rounds (default 3; 1 with
BENCH_QUICK); each case reports its median round (all rounds' req/s are kept).

Measured, each after a warm-up (keep-alive unless marked "close": one request per connection):
  nginx            plain reverse proxy (pooled keep-alive upstream, forwarding headers)
  nginx-close      the same, one request per connection
  nginx-deny       nginx answering 403 to everything (`deny all`): nginx's refused request
  front-plain      http-front, site without rules (early exit: straight to the proxy)
  front-rules      http-front, site whose rules (prefix lists, regexes, header/method
                   matchers, rate limit) are all evaluated on every request
  front-rules-close  the same, one request per connection
  nginx-botnet     the botnet case: http-load from 50,000 unique loopback addresses (ten
                   requests per connection, then the next address), every request refused 403
                   by a rule-heavy server (2,000 denied prefixes in a geo block, maps on path,
                   query, method and User-Agent, a per-source limit_req, access log on)
  front-botnet     the same against http-front's tenant 3 (the same prefixes and rules, a
                   per-source rate limit, events and access log on)
  front-blocked    http-front (SYN filter off) after http-load's source (127.66.0.1; wrk's
                   127.0.0.1 is the node's own address, which is never blocked) was escalated
                   into the block map: every connection is reset at accept, before a byte is
                   read; cost = CPU time / connections blocked (from /metrics)
  front-syn-filter http-front with its SYN filter: the blocked source's SYNs are dropped by
                   the listener's socket filter in the kernel and never become connections;
                   http-front's CPU per second of that load is reported (on loopback the
                   kernel's receive work is charged to the sending CPU, so this shows what
                   reaches the proxy, not the kernel's per-SYN cost)

Usage: http_front.py [SECONDS] [CONNECTIONS]
Writes bench/report/raw/http_front.json.
"""
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.request

import common as c

SECONDS = int(sys.argv[1]) if len(sys.argv) > 1 else 10
CONNS = int(sys.argv[2]) if len(sys.argv) > 2 else 64
ROUNDS = int(os.environ.get("HTTP_BENCH_ROUNDS", "1" if os.environ.get("BENCH_QUICK") == "1" else "3"))
CONF = os.path.join(c.ROOT, "bench", "configs", "http_front")


def free_ports(names):
    """Ports free on 127.0.0.1 right now, one per name (so parallel runs do not collide)."""
    import socket
    socks, ports = [], {}
    for n in names:
        s = socket.socket()
        s.bind(("127.0.0.1", 0))
        socks.append(s)
        ports[n] = s.getsockname()[1]
    for s in socks:
        s.close()
    return ports


PORTS = free_ports(["ORIGIN_PORT", "NGINX_PORT", "NGINX_DENY_PORT", "NGINX_BOT_PORT", "FRONT_PORT",
                    "METRICS_PORT"])
HTTP_LOAD = os.path.join(c.ROOT, "target", "release", "http-load")
BOT_SOURCES = 50000
BOT_UA = "sqlmap/1.7.2#stable (https://sqlmap.org)"
BLOCKED_SRC = "127.66.0.1"


def write_nets(tmp):
    """The botnet site's 2,000 denied prefixes, for http-front's list file and nginx's geo."""
    nets = [f"198.{18 + i // 256}.{i % 256}.0/24" for i in range(1000)]
    nets += [f"100.{64 + i // 256}.{i % 256}.0/24" for i in range(1000)]
    with open(os.path.join(tmp, "botnet-nets.txt"), "w") as f:
        f.write("\n".join(nets) + "\n")
    with open(os.path.join(tmp, "botnet-nets.geo"), "w") as f:
        f.write("".join(f"{n} 1;\n" for n in nets))


def http_from(src, port, host, path="/"):
    """The status of GET path from `src`, or None when the connection was refused or reset."""
    import socket
    try:
        s = socket.socket()
        s.bind((src, 0))
        s.settimeout(5)
        s.connect(("127.0.0.1", port))
        s.sendall(f"GET {path} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n".encode())
        data = s.recv(4096)
        s.close()
        return int(data.split()[1]) if data else None
    except OSError:
        return None


def render(name, tmp):
    with open(os.path.join(CONF, name)) as f:
        text = f.read()
    for k, v in dict(PORTS, TMP=tmp).items():
        text = text.replace("{" + k + "}", str(v))
    out = os.path.join(tmp, name)
    with open(out, "w") as f:
        f.write(text)
    return out


def wait_tcp(port, timeout=20.0):
    import socket
    end = time.time() + timeout
    while time.time() < end:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            return True
        except OSError:
            time.sleep(0.05)
    return False


def http(port, host, path="/"):
    req = urllib.request.Request(f"http://127.0.0.1:{port}{path}", headers={"Host": host})
    try:
        with urllib.request.urlopen(req, timeout=5) as r:
            return r.status
    except urllib.error.HTTPError as e:
        return e.code
    except OSError:
        return None


def metric(series):
    with urllib.request.urlopen(f"http://127.0.0.1:{PORTS['METRICS_PORT']}/metrics", timeout=5) as r:
        for line in r.read().decode().splitlines():
            if line.startswith(series + " "):
                return float(line.split()[-1])
    return 0.0


def wrk_cmd(port, host, seconds, close=False):
    extra = ["-H", "Connection: close"] if close else []
    return ["taskset", "-c", "1", "wrk", "-t1", f"-c{CONNS}", f"-d{seconds}s", "--latency",
            "-H", f"Host: {host}"] + extra + [f"http://127.0.0.1:{port}/"]


def unit_us(v, unit):
    return float(v) * {"us": 1, "ms": 1000, "s": 1e6}[unit]


def run_wrk(port, host, seconds, close=False):
    out = subprocess.run(wrk_cmd(port, host, seconds, close), capture_output=True, text=True,
                         check=False)
    text = out.stdout + out.stderr
    res = {"raw": text}
    m = re.search(r"(\d+) requests in", text)
    res["requests"] = int(m.group(1)) if m else 0
    m = re.search(r"Requests/sec:\s+([\d.]+)", text)
    res["rps"] = float(m.group(1)) if m else 0.0
    for pct in ("50", "90", "99"):
        m = re.search(rf"\s{pct}%\s+([\d.]+)(us|ms|s)", text)
        res[f"p{pct}_us"] = unit_us(*m.groups()) if m else None
    m = re.search(r"Non-2xx or 3xx responses:\s+(\d+)", text)
    res["non_2xx"] = int(m.group(1)) if m else 0
    m = re.search(r"Socket errors: connect (\d+), read (\d+), write (\d+), timeout (\d+)", text)
    res["socket_errors"] = sum(int(x) for x in m.groups()) if m else 0
    return res


def run_load(port, host, seconds, sources, per_conn, first=None, ua=BOT_UA):
    """http-load (on CPU 1): as run_wrk's result."""
    cmd = ["taskset", "-c", "1", HTTP_LOAD, "--target", f"127.0.0.1:{port}", "--host", host,
           "--ua", ua, "--conns", str(CONNS), "--seconds", str(seconds),
           "--sources", str(sources), "--per-conn", str(per_conn)]
    if first:
        cmd += ["--first-source", first]
    out = subprocess.run(cmd, capture_output=True, text=True, check=False)
    try:
        r = json.loads(out.stdout)
    except ValueError:
        raise SystemExit(f"http-load failed: {out.stdout} {out.stderr}")
    return {"raw": out.stdout, "requests": r["requests"], "rps": r["rps"], "p50_us": r["p50_us"],
            "p90_us": r["p90_us"], "p99_us": r["p99_us"], "non_2xx": r["non_2xx"],
            "socket_errors": r["errors"], "connects": r["connects"]}


def measure(name, server, port, host, count=None, close=False, load=None):
    """Warm up, then measure; `count()` gives the server-side event count (default: the load's
    requests). `load(seconds)` runs the load (default: wrk)."""
    run = load or (lambda s: run_wrk(port, host, s, close))
    run(2)
    before_cpu = c.cpu_ns(server.pid)
    before = count() if count else 0
    t0 = time.time()
    res = run(SECONDS)
    cpu = c.cpu_ns(server.pid) - before_cpu
    wall = time.time() - t0
    events = (count() - before) if count else res["requests"]
    res.pop("raw")
    res.update(name=name, events=events, cpu_util=cpu / 1e9 / wall,
               us_per_event=cpu / 1000.0 / max(events, 1), cpu_us_per_s=cpu / 1000.0 / wall)
    lat = f"p50 {res['p50_us']:.0f} us, p99 {res['p99_us']:.0f} us" if res["p50_us"] else "latency n/a"
    c.log(f"{name:>13}: {res['rps']:9.0f} req/s, {lat}, {res['us_per_event']:6.2f} us CPU per "
          f"{'request' if not count else 'event'}, proxy CPU {res['cpu_util'] * 100:.0f}%, "
          f"non-2xx {res['non_2xx']}, socket errors {res['socket_errors']}")
    return res


def median_run(runs):
    """The run with the median requests/s, plus every run's requests/s."""
    ordered = sorted(runs, key=lambda r: r["rps"])
    mid = dict(ordered[len(ordered) // 2])
    mid["rounds_rps"] = [round(r["rps"]) for r in runs]
    return mid


def main():
    c.need("wrk", "nginx", "taskset", "cargo")
    subprocess.run(["cargo", "build", "--release", "-p", "http-front", "-p", "palisade-bench",
                    "--bin", "http-front", "--bin", "http-load"], cwd=c.ROOT, check=True)
    front_bin = os.path.join(c.ROOT, "target", "release", "http-front")
    tmp = tempfile.mkdtemp(prefix="palisade-http-")
    for d in ("origin-body", "proxy-body", "proxy-temp"):
        os.makedirs(os.path.join(tmp, d), exist_ok=True)
    shutil.copy(os.path.join(CONF, "rules.toml"), os.path.join(tmp, "rules.toml"))
    write_nets(tmp)
    results = {}
    servers = []
    blocked = 'http_front_connections_total{event="blocked_at_accept"}'

    def start_front(syn_filter):
        conf = render("front.toml", tmp)
        if not syn_filter:
            with open(conf) as f:
                text = f.read().replace("[server]\n", "[server]\nsyn_filter_max = 0\n", 1)
            with open(conf, "w") as f:
                f.write(text)
        front = c.Server("http-front", [front_bin, "-c", conf], cpu=0,
                         env=dict(os.environ, RUST_LOG="warn"))
        servers.append(front)
        assert wait_tcp(PORTS["FRONT_PORT"]) and wait_tcp(PORTS["METRICS_PORT"]), front.tail()
        assert http(PORTS["FRONT_PORT"], "rules.test") == 200, front.tail()
        return front

    try:
        origin = c.Server("origin", ["nginx", "-p", tmp, "-c", render("nginx-origin.conf", tmp)],
                          cpu=0)
        servers.append(origin)
        assert wait_tcp(PORTS["ORIGIN_PORT"]), origin.tail()
        nginx = c.Server("nginx", ["nginx", "-p", tmp, "-c", render("nginx-proxy.conf", tmp)], cpu=0)
        servers.append(nginx)
        assert wait_tcp(PORTS["NGINX_PORT"]), nginx.tail()
        assert http(PORTS["NGINX_PORT"], "rules.test") == 200
        front = start_front(syn_filter=False)

        # Both pass a plain client and refuse one without a User-Agent, from any source.
        for port in (PORTS["NGINX_BOT_PORT"], PORTS["FRONT_PORT"]):
            assert http(port, "botnet.test") == 200, port
            assert http_from("127.64.0.1", port, "botnet.test") == 403, port

        def bots(port):
            return lambda s: run_load(port, "botnet.test", s, BOT_SOURCES, 10)

        # Interleaved rounds, so that a change in background load hits every case alike.
        cases = [
            ("nginx", nginx, PORTS["NGINX_PORT"], "rules.test", False, None),
            ("front-rules", front, PORTS["FRONT_PORT"], "rules.test", False, None),
            ("front-plain", front, PORTS["FRONT_PORT"], "plain.test", False, None),
            ("nginx-close", nginx, PORTS["NGINX_PORT"], "rules.test", True, None),
            ("front-rules-close", front, PORTS["FRONT_PORT"], "rules.test", True, None),
            ("nginx-deny", nginx, PORTS["NGINX_DENY_PORT"], "rules.test", False, None),
            ("nginx-botnet", nginx, PORTS["NGINX_BOT_PORT"], "botnet.test", False,
             bots(PORTS["NGINX_BOT_PORT"])),
            ("front-botnet", front, PORTS["FRONT_PORT"], "botnet.test", False,
             bots(PORTS["FRONT_PORT"])),
        ]
        runs = {name: [] for name, *_ in cases}
        for rnd in range(ROUNDS):
            c.log(f"round {rnd + 1} of {ROUNDS}")
            for name, server, port, host, close, load in cases:
                runs[name].append(measure(name, server, port, host, close=close, load=load))
        for name, *_ in cases:
            results[name] = median_run(runs[name])
        for k in ("nginx-botnet", "front-botnet"):
            assert results[k]["non_2xx"] >= 0.99 * results[k]["requests"], (k, results[k])

        # Escalate 127.66.0.1: its first denied request puts it in the block map.
        def from_blocked(s):
            return run_load(PORTS["FRONT_PORT"], "rules.test", s, 1, 1, first=BLOCKED_SRC)

        assert http_from(BLOCKED_SRC, PORTS["FRONT_PORT"], "deny.test") == 403, front.tail()
        time.sleep(0.5)
        assert http_from(BLOCKED_SRC, PORTS["FRONT_PORT"], "rules.test") is None, \
            "not blocked at accept"
        results["front-blocked"] = measure("front-blocked", front, PORTS["FRONT_PORT"],
                                           "rules.test", count=lambda: metric(blocked),
                                           load=from_blocked)
        front.stop()
        servers.remove(front)

        front = start_front(syn_filter=True)
        assert http_from(BLOCKED_SRC, PORTS["FRONT_PORT"], "deny.test") == 403, front.tail()
        time.sleep(0.5)
        assert metric("http_front_syn_filter_entries") == 1, front.tail()
        results["front-syn-filter"] = measure("front-syn-filter", front, PORTS["FRONT_PORT"],
                                              "rules.test", count=lambda: metric(blocked),
                                              load=from_blocked)
        results["front-syn-filter"]["us_per_event"] = None
    finally:
        for s in servers:
            s.stop()

    n, nc, fp, fr, frc, fb, fs, nb, fbot = (results[k] for k in (
        "nginx", "nginx-close", "front-plain", "front-rules", "front-rules-close",
        "front-blocked", "front-syn-filter", "nginx-botnet", "front-botnet"))
    ratios = {
        "rps_front_botnet_vs_nginx_botnet": fbot["rps"] / nb["rps"],
        "cpu_per_request_front_botnet_vs_nginx_botnet": fbot["us_per_event"] / nb["us_per_event"],
        "p99_front_botnet_vs_nginx_botnet": fbot["p99_us"] / nb["p99_us"],
        "rps_front_plain_vs_nginx": fp["rps"] / n["rps"],
        "rps_front_rules_vs_nginx": fr["rps"] / n["rps"],
        "rps_front_rules_close_vs_nginx_close": frc["rps"] / nc["rps"],
        "p50_front_rules_vs_nginx": fr["p50_us"] / n["p50_us"],
        "p99_front_rules_vs_nginx": fr["p99_us"] / n["p99_us"],
        "cpu_per_request_front_plain_vs_nginx": fp["us_per_event"] / n["us_per_event"],
        "cpu_per_request_front_rules_vs_nginx": fr["us_per_event"] / n["us_per_event"],
        "cpu_per_request_front_rules_close_vs_nginx_close":
            frc["us_per_event"] / nc["us_per_event"],
        "cpu_blocked_conn_vs_proxied_request_keepalive": fb["us_per_event"] / fr["us_per_event"],
        "cpu_blocked_conn_vs_proxied_request_close": fb["us_per_event"] / frc["us_per_event"],
        "front_cpu_syn_filtered_vs_proxied_per_second": fs["cpu_us_per_s"] / fr["cpu_us_per_s"],
    }
    cmd = " ".join(wrk_cmd("PORT", "HOST", SECONDS))
    print(f"\nhttp-front vs nginx reverse proxy, {c.machine()}; proxy and origin (nginx) pinned "
          f"to CPU 0, wrk to CPU 1; median of {ROUNDS} interleaved rounds")
    print(f"load: {cmd}   (\"close\" runs add -H 'Connection: close')")
    print(f"{'':>17} {'req/s':>9} {'p50 us':>8} {'p99 us':>8} {'CPU us/req':>12} {'proxy CPU':>9}")
    for k, r in results.items():
        p50 = f"{r['p50_us']:.0f}" if r["p50_us"] else "-"
        p99 = f"{r['p99_us']:.0f}" if r["p99_us"] else "-"
        per = f"{r['us_per_event']:8.2f}/conn" if k == "front-blocked" else (
            "       -    " if k == "front-syn-filter" else f"{r['us_per_event']:8.2f}    ")
        print(f"{k:>17} {r['rps']:9.0f} {p50:>8} {p99:>8} {per:>12} {r['cpu_util'] * 100:8.1f}%")
    print("ratios:")
    for k, v in ratios.items():
        print(f"  {k:<52} {v:6.3f}")
    print("  (front-blocked and front-syn-filter: wrk reconnects; its req/s are not served requests)")
    summary = (
        f"http-front serves {ratios['rps_front_rules_vs_nginx']:.2f}x nginx's requests/s with every "
        f"rule evaluated ({ratios['rps_front_plain_vs_nginx']:.2f}x for a site without rules), at "
        f"{ratios['cpu_per_request_front_rules_vs_nginx']:.2f}x nginx's CPU per request. Against a "
        f"botnet of {BOT_SOURCES:,} addresses refused by a rule-heavy site (logging on): "
        f"{ratios['rps_front_botnet_vs_nginx_botnet']:.2f}x nginx's requests/s at "
        f"{ratios['cpu_per_request_front_botnet_vs_nginx_botnet']:.2f}x its CPU per request, p99 "
        f"{ratios['p99_front_botnet_vs_nginx_botnet']:.2f}x. A source "
        f"in the block map costs {fb['us_per_event']:.1f} us per connection when it is reset at "
        f"accept ({ratios['cpu_blocked_conn_vs_proxied_request_keepalive']:.2f}x a keep-alive "
        f"proxied request, {ratios['cpu_blocked_conn_vs_proxied_request_close']:.2f}x a proxied "
        f"request on its own connection; nearly all of it is the kernel's accept and reset), and "
        f"nothing in http-front once the listeners' SYN filter holds it "
        f"({fs['cpu_us_per_s']:.0f} us of CPU per second under the same load). Proxy and origin "
        f"share CPU 0, wrk has CPU 1; median of {ROUNDS} interleaved rounds.")
    c.save("http_front", {"machine": c.machine(), "cores": os.cpu_count(), "seconds": SECONDS,
                          "connections": CONNS, "command": cmd, "wrk": cmd, "results": results,
                          "ratios": ratios, "summary_md": summary,
                          "rounds": ROUNDS,
                          "layout": "proxy and origin nginx on CPU 0; wrk (1 thread) on CPU 1"})
    print(summary)
    print(f"saved {os.path.join(c.RAW, 'http_front.json')}")


if __name__ == "__main__":
    main()
