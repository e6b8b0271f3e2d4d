#!/usr/bin/env python3
"""The node-wide block map (issue 19): a block decided by http-front on node A enforced by dnsd
on node B, and 100,000 blocks imported at http-front reaching B's XDP maps.

Setup (all on loopback, one redis-server on a free port): node A = http-front on 127.0.2.1
(CPU 0), whose site denies 127.9.0.0/16 and escalates a source's first deny into a 600 s block;
node B = dnsd on 127.0.2.2 (CPU 1), with `[xdp] pin_path` when XDP is available here: then
xdp-guard is attached to the loopback of a network namespace made for the run (only so that the
node's maps exist and are pinned) and dnsd mirrors its block map into them.

Part 1, latency: for each decision a fresh source S = 127.9.x.y queries dnsd B every
millisecond until B answers it; then S sends one HTTP request to http-front A (denied, and
escalated: the decision) while the probes go on, until B has not answered S for 60 ms in a
row; the latency is the send time of the first probe of that run minus the moment the request
was sent (redis_sync.py's method: an upper bound, 1 ms resolution). Phases `idle` and
`loaded` (dnsperf floods B from CPU 0 and wrk drives http-front A from CPU 1, both cores
busy). Reported: p50, p99, max, decisions not propagated, loaded/idle ratios; and the same
decision made by dnsd on A (`ctl block add`, the Redis path alone) with no load, the reference
in the same run for what deciding at http-front adds.

Part 2, volume: `http-front ctl block import` of 100,000 addresses on A; the time until B's
XDP maps hold all of them live (read with `xdp-guard status`), and how many never arrive
within 120 s (loss). Reference in the same run: the same file imported on B's own dnsd (no
Redis on the way). Needs root for XDP; without it part 2 measures B's block map instead and
says so.

Usage: node_blocks.py [--quick] [--decisions N]
"""
import argparse
import os
import re
import socket
import subprocess
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common as c  # noqa: E402
import redis_sync as rs  # noqa: E402

A_ADDR, B_ADDR = "127.0.2.1", "127.0.2.2"
IMPORT_N = 100_000
IMPORT_WAIT = 120.0


def http_decision(port):
    """The decision: one request from the source to http-front A (denied and escalated)."""
    def decide(src):
        s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        s.settimeout(5)
        try:
            s.bind((src, 0))
            s.connect((A_ADDR, port))
            s.sendall(b"GET /x HTTP/1.1\r\nHost: bench.test\r\nConnection: close\r\n\r\n")
            head = s.recv(64)
            if b" 403 " not in head:
                raise RuntimeError(f"expected 403, got {head[:32]!r}")
        finally:
            s.close()
    return decide


def start_front(tmp, port, metrics, redis_port, prefix, sock):
    with open(os.path.join(tmp, "rules.toml"), "w") as f:
        f.write('[[tenant]]\nid = 1\ndeny = ["127.9.0.0/16"]\n'
                'escalate = { after = 1, window_secs = 60, block_secs = 600, on = ["deny"] }\n')
    conf = os.path.join(tmp, "front.toml")
    with open(conf, "w") as f:
        f.write(f'[server]\nlisten = ["{A_ADDR}:{port}"]\nworkers = 1\n'
                f'max_connections_per_source = 100000\n\n'
                f'[metrics]\nlisten = "{A_ADDR}:{metrics}"\n\n'
                f'[control]\nsocket = "{sock}"\n\n'
                f'[rules]\nfile = "rules.toml"\n\n'
                f'[block]\ncapacity = 2000000\n\n'
                f'[redis]\nurl = "redis://127.0.0.1:{redis_port}"\nprefix = "{prefix}"\n'
                f'key_file = "{c.fleet_key(tempfile.gettempdir())}"\n'
                f'instance = "bench-a"\n\n'
                f'[[upstream]]\nname = "app"\nservers = ["127.0.0.1:9"]\n\n'
                f'[[site]]\nhosts = ["bench.test"]\nupstream = "app"\ntenant = 1\n')
    srv = c.Server("http-front-A", [c.bin_path("http-front"), "-c", conf], 0,
                   env=dict(os.environ, RUST_LOG="warn"))
    t0 = time.monotonic()
    while time.monotonic() - t0 < 20:
        try:
            if c.ctl_stats(sock).get("redis.connected") == 1:
                return srv
        except (OSError, RuntimeError, ValueError):
            pass
        time.sleep(0.05)
    raise RuntimeError(f"http-front A did not start:\n{srv.tail()}")


def start_dnsd(name, tmpbase, addr, zone, redis_port, prefix, cpu, pins):
    tmp = tempfile.mkdtemp(prefix=f"dnsd-{name}-", dir=tmpbase)
    extra = (c.RRL_OFF + f'\n[block]\ncapacity = 2000000\n'
             f'\n[redis]\nurl = "redis://127.0.0.1:{redis_port}"\nprefix = "{prefix}"\n'
             f'key_file = "{c.fleet_key(tempfile.gettempdir())}"\n'
             f'instance = "bench-{name.lower()}"\n')
    if pins:
        extra += f'\n[xdp]\npin_path = "{pins}"\n'
    port = c.free_udp_port()
    conf = c.dnsd_conf(tmp, [addr], port, [("bench.test.", zone)], extra=extra)
    srv = c.Server(f"dnsd-{name}", [c.dnsd_bin(), "serve", "-c", conf], cpu,
                   env=dict(os.environ, RUST_LOG="warn"))
    if c.wait_answer(addr, port, rs.QNAME, qtype=1, timeout=20, proc=srv.proc) is None:
        raise RuntimeError(f"dnsd {name} did not start:\n{srv.tail()}")
    sock = os.path.join(tmp, "dnsd.sock")
    t0 = time.monotonic()
    while time.monotonic() - t0 < 10 and c.ctl_stats(sock).get("redis.connected") != 1:
        time.sleep(0.05)
    return srv, sock, port


def xdp_setup(tmpbase):
    """A namespace whose loopback carries the node's guard; returns (pins, cleanup) or
    (None, why)."""
    if os.geteuid() != 0:
        return None, "not root"
    ns = f"palbench{os.getpid()}"
    pins = f"/sys/fs/bpf/palisade-bench-{os.getpid()}"
    guard = os.path.join(tmpbase, "guard.toml")
    with open(guard, "w") as f:
        f.write(f'interface = "lo"\nmode = "generic"\nrate = 0\nblock_v4_entries = 262144\n'
                f'pin_path = "{pins}"\n')
    try:
        subprocess.run(["ip", "netns", "add", ns], check=True, capture_output=True)
        subprocess.run(["ip", "-n", ns, "link", "set", "lo", "up"], check=True,
                       capture_output=True)
        # nsenter --net: the namespace's network only (ip netns exec would hide /sys/fs/bpf).
        r = subprocess.run(["nsenter", f"--net=/run/netns/{ns}", c.bin_path("xdp-guard"),
                            "attach", "-c", guard], capture_output=True, text=True)
        if r.returncode != 0:
            raise RuntimeError(r.stdout + r.stderr)
    except (OSError, subprocess.CalledProcessError, RuntimeError) as e:
        subprocess.run(["ip", "netns", "del", ns], capture_output=True)
        return None, f"xdp-guard attach failed: {e}"

    def cleanup():
        subprocess.run([c.bin_path("xdp-guard"), "detach", "--purge", "--pin-path", pins],
                       capture_output=True)
        subprocess.run(["ip", "netns", "del", ns], capture_output=True)
        try:
            os.rmdir(pins)
        except OSError:
            pass
    return pins, cleanup


def xdp_live(pins):
    r = subprocess.run([c.bin_path("xdp-guard"), "status", "--pin-path", pins],
                       capture_output=True, text=True)
    m = re.search(r"guard_block_v4\s+(\d+) / \d+\s+live (\d+)", r.stdout)
    return int(m.group(2)) if m else 0


def import_run(what, sock, listfile, count_fn, n):
    """`block import` on `sock`; time until count_fn() reaches n (or the wait ends)."""
    base = count_fn()
    t0 = time.monotonic()
    c.ctl(sock, "block", "import", listfile, "--ttl", "3600", timeout=120)
    t_ctl = time.monotonic() - t0
    got = base
    while time.monotonic() - t0 < IMPORT_WAIT:
        got = count_fn()
        c.progress(f"  {what}: {got - base:,}/{n:,} after {time.monotonic() - t0:.1f} s")
        if got - base >= n:
            break
        time.sleep(0.05)
    c.done_progress()
    took = time.monotonic() - t0
    arrived = got - base
    c.log(f"  {what}: {arrived:,}/{n:,} in {took:.2f} s (import call {t_ctl:.2f} s)")
    return {"seconds": took, "arrived": arrived, "lost": n - arrived, "ctl_seconds": t_ctl}


def run_phase(name, n, first, decide, b_port, qfile, front_port, pgids):
    loaded = name.startswith("loaded")
    procs = []
    load_s = 4 + n * 0.35
    if loaded:
        procs.append(rs.dnsperf_start(B_ADDR, b_port, qfile, load_s, 0, "127.0.3.2"))
        procs.append(subprocess.Popen(
            c.niced(["wrk", "-t1", "-c64", f"-d{int(load_s)}s", "-H", "Host: bench.test",
                     f"http://{A_ADDR}:{front_port}/ok"], "load", 1),
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
            start_new_session=True))
        time.sleep(2.0)
    stat0 = c.proc_stat_cpus()
    w0 = time.time()
    rows = []
    c.measuring_thread_fifo(True)
    try:
        for k in range(n):
            rows.append(rs.one_decision(first + k, decide, b_port))
            c.progress(f"  {name}: decision {k + 1}/{n}, last "
                       f"{rows[-1].get('latency_ms', float('nan')):.1f} ms")
            time.sleep(0.005)
        c.done_progress()
    finally:
        c.measuring_thread_fifo(False)
        wall = time.time() - w0
        stat1 = c.proc_stat_cpus()
        hz = os.sysconf("SC_CLK_TCK")
        busy = {k: (stat1[k][0] - stat0[k][0]) / hz / wall for k in stat1}
        for p in procs:
            if p.poll() is None:
                os.killpg(p.pid, 2)
        for p in procs:
            try:
                p.communicate(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(p.pid, 9)
    out = rs.summarize(rows)
    out.update({"name": name, "wall_s": wall,
                "cpu_busy": {str(k): round(v, 3) for k, v in busy.items()}})
    c.log(f"  {name:>14}: p50 {rs.fmt(out['p50_ms'])}, p99 {rs.fmt(out['p99_ms'])}, max "
          f"{rs.fmt(out['max_ms'])} over {out['propagated']}/{n}; CPUs busy "
          + "/".join(f"{v * 100:.0f}%" for v in busy.values()))
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", default=c.quick())
    ap.add_argument("--decisions", type=int, default=None)
    args = ap.parse_args()
    n = args.decisions or (40 if args.quick else 150)
    cmd = "bench/scripts/node_blocks.py " + " ".join(sys.argv[1:])
    c.need("redis-server", "dnsperf", "wrk", "taskset")
    c.log(f"Node-wide block map: {c.machine()}; {n} decisions per phase; command: {cmd}")
    tmpbase = tempfile.mkdtemp(prefix="palisade-node-")
    zone = os.path.join(tmpbase, "bench.test.zone")
    qfile = os.path.join(tmpbase, "queries.txt")
    rs.make_zone(zone)
    rs.make_queries(qfile)
    prefix = f"palisade-node-bench-{os.getpid()}:"
    servers, phases, imports = [], [], {}
    pins, cleanup = xdp_setup(tmpbase)
    if pins is None:
        c.log(f"  XDP part: {cleanup}; part 2 counts B's block map instead of its XDP maps")
        cleanup = None
    try:
        redis, rport = rs.start_redis(tmpbase)
        servers.append(redis)
        front_port, metrics = c.free_udp_port(), c.free_udp_port()
        front_sock = os.path.join(tmpbase, "front.sock")
        front = start_front(tmpbase, front_port, metrics, rport, prefix, front_sock)
        servers.append(front)
        b_srv, b_sock, b_port = start_dnsd("B", tmpbase, B_ADDR, zone, rport, prefix, 1, pins)
        servers.append(b_srv)
        # The reference decider: dnsd on node A (same Redis path, decided by `ctl block add`).
        a_srv, a_sock, _ = start_dnsd("A", tmpbase, A_ADDR, zone, rport, prefix, 0, None)
        servers.append(a_srv)
        pgids = {"front_A": front.pid, "dnsd_B": b_srv.pid, "redis": redis.pid}
        by_front = http_decision(front_port)
        by_dnsd = rs.ctl_decision(a_sock)
        rs.one_decision(65000, by_front, b_port)  # warm-up, not measured
        phases.append(run_phase("idle", n, 0, by_front, b_port, qfile, front_port, pgids))
        phases.append(run_phase("loaded", n, n, by_front, b_port, qfile, front_port, pgids))
        # The reference decider idle: under load it would share CPU 0 with http-front, both
        # SCHED_FIFO, and measure the scheduler rather than the path.
        phases.append(run_phase("idle, dnsd A", n, 2 * n, by_dnsd, b_port, qfile, front_port,
                                pgids))

        # Part 2: 100,000 imported at http-front A, counted in B's XDP maps (or block map).
        listfile = os.path.join(tmpbase, "import.txt")
        with open(listfile, "w") as f:
            for i in range(IMPORT_N):
                f.write(f"10.{(i >> 16) & 255}.{(i >> 8) & 255}.{i & 255}\n")
        if pins:
            count = lambda: xdp_live(pins)  # noqa: E731
            where = "B's XDP maps"
        else:
            count = lambda: c.ctl_stats(b_sock).get("blockmap.entries", 0)  # noqa: E731
            where = "B's block map"
        imports["via_front"] = import_run(f"import at http-front A -> {where}", front_sock,
                                          listfile, count, IMPORT_N)
        # Reference: a second file of as many addresses imported on B itself.
        listfile2 = os.path.join(tmpbase, "import2.txt")
        with open(listfile2, "w") as f:
            for i in range(IMPORT_N):
                f.write(f"11.{(i >> 16) & 255}.{(i >> 8) & 255}.{i & 255}\n")
        imports["local_b"] = import_run(f"import at dnsd B -> {where}", b_sock, listfile2,
                                        count, IMPORT_N)
        imports["counted_in"] = where
    finally:
        for s in reversed(servers):
            s.stop()
        if cleanup:
            cleanup()
    by = {p["name"]: p for p in phases}
    ratios = {}
    if by.get("idle", {}).get("p50_ms") and by.get("loaded", {}).get("p50_ms") is not None:
        for k in ("p50_ms", "p99_ms"):
            ratios[f"{k[:-3]} loaded / idle"] = by["loaded"][k] / by["idle"][k]
            if by.get("idle, dnsd A", {}).get(k):
                ratios[f"{k[:-3]} http-front decision / dnsd decision (idle)"] = (
                    by["idle"][k] / by["idle, dnsd A"][k])
    if imports.get("local_b", {}).get("seconds"):
        ratios["import time via http-front+Redis / local import"] = (
            imports["via_front"]["seconds"] / imports["local_b"]["seconds"])
    print(f"\nBlock at http-front on A, enforced by dnsd on B ({c.machine()}), "
          f"{n} decisions per phase")
    print(f"{'phase':>15} {'p50':>9} {'p99':>9} {'max':>9} {'not propagated':>15} {'CPU busy':>10}")
    for p in phases:
        print(f"{p['name']:>15} {rs.fmt(p['p50_ms']):>9} {rs.fmt(p['p99_ms']):>9} "
              f"{rs.fmt(p['max_ms']):>9} {p['not_propagated']:>15} "
              + "/".join(f"{float(v) * 100:.0f}%" for v in p["cpu_busy"].values()))
    for k in ("via_front", "local_b"):
        if k in imports:
            i = imports[k]
            print(f"100,000 imported ({k}): {i['arrived']:,} in {imports.get('counted_in')} "
                  f"after {i['seconds']:.2f} s, lost {i['lost']:,}")
    for k, v in ratios.items():
        print(f"{k}: {v:.2f}x")
    c.save("node_blocks", {"machine": c.machine(), "cores": os.cpu_count(), "command": cmd,
                           "quick": args.quick, "decisions": n, "sched": c.sched_note(),
                           "when": time.strftime("%Y-%m-%d %H:%M:%S"), "phases": phases,
                           "imports": imports, "ratios": ratios})
    if any(p["propagated"] == 0 for p in phases) or imports.get("via_front", {}).get("lost"):
        sys.exit(1)


if __name__ == "__main__":
    main()
