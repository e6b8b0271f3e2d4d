#!/usr/bin/env python3
"""Block propagation through Redis (issue 8): latency from a decision on node A to
enforcement on node B, with both cores busy answering queries, and the same with no load.

The script starts its own redis-server (127.0.0.1, a free port, no persistence, a key prefix of
its own) and two dnsd processes on loopback that share it through `[redis]`: A on 127.0.2.1
(pinned to CPU 0) and B on 127.0.2.2 (pinned to CPU 1), one UDP worker each, RRL off.

For each decision i: a fresh source S = 127.9.x.y queries B every millisecond (a plain A query
for an existing name) until B has answered it; then A is told `block add S/32` on its control
socket (from another thread, so that the probes keep their 1 ms pace); the probes go on until
B has not answered S for 60 ms in a row. The propagation latency is the send time of the first
probe of that unanswered run minus the moment the decision was sent to A (an upper bound with
1 ms resolution; the last probe B answered, sent after the decision or at it, gives the lower
bound, reported too). A decision that B has not enforced
after 3 s counts as not propagated. The control reply from A (the block is in A's map) is
timed too.

Two phases with the same number of decisions: `idle` (nothing else running: the reference)
and `loaded`: dnsperf floods A from CPU 1 and B from CPU 0 (as fast as each goes, from
127.0.3.1 and 127.0.3.2) so that both cores are busy answering queries while the decisions
run. Reported per phase: p50, p99 and max latency, decisions not propagated, the control
reply's p50/p99, queries/s each server answered, how busy each CPU was, and the loaded/idle
ratios. Servers and redis-server run as sched_prefix("server") says, the probe loop (and the
thread that sends the decision) in SCHED_FIFO too (by default); dnsperf as load (nice -10).

Then a failover phase (skipped with --no-failover or without redis-sentinel): one master, one
replica, three sentinels (down-after 1 s) and two dnsd that find the master through them
(`[redis] sentinels`, `master_name`). Node A blocks 10,000 addresses in ten `block import`
steps 100 ms apart; the master is killed (SIGKILL) right after the fifth. Reported per run:
kill -> the sentinels' promotion of the replica (Sentinel's own detection and election),
promotion -> node B holding all 10,000 (what the sync adds), and kill -> B complete.

Usage: redis_sync.py [--quick] [--decisions N] [--no-failover] [--failover-runs N]
"""
import argparse
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common as c  # noqa: E402

A_ADDR, B_ADDR = "127.0.2.1", "127.0.2.2"
LOAD_SRC = {"A": "127.0.3.1", "B": "127.0.3.2"}
PROBE_NET = "127.9"
PROBE_EVERY = 0.001
QUIET = 0.060
GIVE_UP = 3.0
QNAME = "h1.bench.test"


def make_zone(path):
    with open(path, "w") as f:
        f.write("$ORIGIN bench.test.\n$TTL 3600\n@ SOA ns1 hostmaster 1 7200 3600 1209600 300\n")
        f.write("@ NS ns1\nns1 A 192.0.2.1\n")
        for i in range(1000):
            f.write(f"h{i} A 10.0.{i >> 8}.{i & 255}\n")


def make_queries(path):
    with open(path, "w") as f:
        for i in range(10000):
            f.write(f"h{(i * 7919) % 1000}.bench.test A\n")


def start_redis(tmp):
    port = c.free_udp_port()
    argv = ["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--save", "",
            "--appendonly", "no", "--dir", tmp, "--daemonize", "no", "--protected-mode", "yes",
            "--maxmemory-policy", "noeviction"]
    srv = c.Server("redis", argv, None)
    t0 = time.monotonic()
    while time.monotonic() - t0 < 10:
        try:
            s = socket.create_connection(("127.0.0.1", port), timeout=0.5)
            s.sendall(b"PING\r\n")
            if s.recv(64).startswith(b"+PONG"):
                s.close()
                return srv, port
            s.close()
        except OSError:
            time.sleep(0.05)
    raise RuntimeError(f"redis-server did not start:\n{srv.tail()}")


def start_dnsd(name, tmpbase, addr, port, zone, redis_port, prefix, cpu):
    tmp = tempfile.mkdtemp(prefix=f"dnsd-{name}-", dir=tmpbase)
    rrl = c.RRL_OFF if c.dnsd_accepts(c.RRL_OFF)[0] else ""
    extra = (rrl + f'\n[redis]\nurl = "redis://127.0.0.1:{redis_port}"\nprefix = "{prefix}"\n'
             f'key_file = "{c.fleet_key(tempfile.gettempdir())}"\n'
             f'node_id = "bench-{name.lower()}"\n')
    conf = c.dnsd_conf(tmp, [addr], port, [("bench.test.", zone)], extra=extra)
    srv = c.Server(f"dnsd-{name}", [c.dnsd_bin(), "serve", "-c", conf], cpu,
                   env=dict(os.environ, RUST_LOG="warn"))
    if c.wait_answer(addr, port, QNAME, qtype=1, timeout=20, proc=srv.proc) is None:
        raise RuntimeError(f"dnsd {name} did not start:\n{srv.tail()}")
    sock = os.path.join(tmp, "dnsd.sock")
    t0 = time.monotonic()
    while time.monotonic() - t0 < 10:
        st = c.ctl_stats(sock)
        if st.get("redis.connected", st.get("redis.writer_connected", 1)):
            break
        time.sleep(0.05)
    return srv, sock, conf


def query(qid):
    return c.dns_query(QNAME, 1, qid)


def ctl_decision(a_sock):
    """The decision of this benchmark: `block add` on A's control socket."""
    return lambda src: c.ctl(a_sock, "block", "add", f"{src}/32", "--ttl", "600",
                             "--reason", "bench")


def one_decision(i, decide, b_port, b_addr=None):
    """Runs `decide(source)` for a fresh source (on node A) and times until B stops
    answering it (node_blocks.py decides through http-front instead)."""
    b_addr = b_addr or B_ADDR
    src = f"{PROBE_NET}.{(i >> 8) & 255}.{i & 255}"
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.bind((src, 0))
    s.setblocking(False)
    sent = {}  # qid -> send time
    answered = []  # send times of answered probes
    qid = 0
    res = {"source": src}

    def send_probe():
        nonlocal qid
        qid = (qid + 1) & 0xFFFF
        try:
            s.sendto(query(qid), (b_addr, b_port))
            sent[qid] = time.monotonic()
        except OSError:
            pass

    def drain():
        while True:
            try:
                data, _ = s.recvfrom(2048)
            except (BlockingIOError, InterruptedError):
                return
            except OSError:
                return
            q = int.from_bytes(data[:2], "big")
            if q in sent:
                answered.append(sent.pop(q))

    try:
        # Before: B answers this source (at most 1 s of probing).
        t_start = time.monotonic()
        nxt = t_start
        while not answered and time.monotonic() - t_start < 1.0:
            now = time.monotonic()
            if now >= nxt:
                send_probe()
                nxt += PROBE_EVERY
            drain()
            time.sleep(0.0002)
        if not answered:
            res["error"] = "B did not answer the fresh source before the decision"
            return res
        # The decision, from another thread; probing goes on.
        box = {}

        def run_decision():
            box["t0"] = time.monotonic()
            try:
                decide(src)
                box["t1"] = time.monotonic()
            except Exception as e:  # noqa: BLE001
                box["error"] = str(e)

        th = threading.Thread(target=run_decision, daemon=True)
        th.start()
        while "t0" not in box:
            time.sleep(0.00005)
        t0 = box["t0"]
        nxt = time.monotonic()
        probes_after = []
        while True:
            now = time.monotonic()
            if now >= nxt:
                send_probe()
                probes_after.append(sent.get(qid))
                nxt += PROBE_EVERY
                if nxt < now:
                    nxt = now + PROBE_EVERY
            drain()
            last_ok = max(answered)
            if now - t0 > QUIET and now - last_ok > QUIET and now - t0 > 0.005:
                break
            if now - t0 > GIVE_UP:
                res["error"] = f"B still answered after {GIVE_UP:.0f} s"
                break
            time.sleep(0.0002)
        th.join(10)
        if "error" in box:
            res["error"] = box["error"]
        if "t1" in box:
            res["ctl_ms"] = (box["t1"] - t0) * 1e3
        if "error" not in res:
            last_ok = max(answered)
            tail = sorted(t for t in sent.values() if t > last_ok)
            first_unanswered = tail[0] if tail else last_ok
            res["latency_ms"] = max(0.0, (first_unanswered - t0) * 1e3)
            res["last_answered_ms"] = (last_ok - t0) * 1e3
            res["probes"] = len(probes_after)
        return res
    finally:
        s.close()


def dnsperf_start(addr, port, qfile, seconds, cpu, local):
    argv = c.niced(["dnsperf", "-s", addr, "-p", str(port), "-a", local, "-d", qfile,
                    "-l", str(int(seconds)), "-c", "4", "-q", "100", "-t", "2"], "load", cpu)
    return subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            start_new_session=True)


def dnsperf_finish(p):
    try:
        out = p.communicate(timeout=30)[0]
    except subprocess.TimeoutExpired:
        os.killpg(p.pid, 9)
        out = p.communicate()[0]
    m = re.search(r"Queries per second:\s+([\d.]+)", out)
    done = re.search(r"Queries completed:\s+(\d+)", out)
    lost = re.search(r"Queries lost:\s+(\d+)", out)
    return {"qps": float(m.group(1)) if m else None,
            "completed": int(done.group(1)) if done else None,
            "lost": int(lost.group(1)) if lost else None}


def summarize(rows):
    lat = sorted(r["latency_ms"] for r in rows if "latency_ms" in r)
    ctlms = sorted(r["ctl_ms"] for r in rows if "ctl_ms" in r)
    # The last probe B still answered bounds the latency from below.
    low = sorted(max(0.0, r["last_answered_ms"]) for r in rows if "latency_ms" in r)
    return {
        "decisions": len(rows),
        "propagated": len(lat),
        "not_propagated": len(rows) - len(lat),
        "p50_ms": c.percentile(lat, 0.5),
        "p99_ms": c.percentile(lat, 0.99),
        "max_ms": lat[-1] if lat else None,
        "mean_ms": sum(lat) / len(lat) if lat else None,
        "lower_p50_ms": c.percentile(low, 0.5),
        "lower_p99_ms": c.percentile(low, 0.99),
        "ctl_p50_ms": c.percentile(ctlms, 0.5),
        "ctl_p99_ms": c.percentile(ctlms, 0.99),
        "errors": sorted({r["error"] for r in rows if "error" in r})[:5],
    }


def run_phase(name, n, first, a, b, qfile, cpu_pgids):
    """n decisions (sources numbered from `first`); with dnsperf on both servers if loaded."""
    loaded = name == "loaded"
    perfs = []
    # A generous bound for the load: the decisions take well under 0.3 s each.
    load_s = 4 + n * 0.35
    if loaded:
        perfs = [dnsperf_start(A_ADDR, a["port"], qfile, load_s, 1, LOAD_SRC["A"]),
                 dnsperf_start(B_ADDR, b["port"], qfile, load_s, 0, LOAD_SRC["B"])]
        time.sleep(2.0)
    cpu_pgids = dict(cpu_pgids)
    if perfs:
        cpu_pgids.update({"dnsperf_A": perfs[0].pid, "dnsperf_B": perfs[1].pid})
    stat0 = c.proc_stat_cpus()
    cpu0 = {k: c.cpu_ns(p) for k, p in cpu_pgids.items()}
    b0 = c.ctl_stats(b["sock"])
    w0 = time.time()
    rows = []
    c.measuring_thread_fifo(True)
    try:
        for k in range(n):
            rows.append(one_decision(first + k, a["decide"], b["port"]))
            lat = [r["latency_ms"] for r in rows if "latency_ms" in r]
            c.progress(f"  {name}: decision {k + 1}/{n}, last "
                     f"{rows[-1].get('latency_ms', float('nan')):.1f} ms, max "
                     f"{max(lat) if lat else float('nan'):.1f} ms")
            time.sleep(0.005)
        c.done_progress()
    finally:
        c.measuring_thread_fifo(False)
        wall = time.time() - w0
        stat1 = c.proc_stat_cpus()
        cpu1 = {k: c.cpu_ns(p) for k, p in cpu_pgids.items()}
        hz = os.sysconf("SC_CLK_TCK")
        busy = {k: (stat1[k][0] - stat0[k][0]) / hz / wall for k in stat1}
        loads = {}
        if perfs:
            for p in perfs:
                if p.poll() is None:
                    os.killpg(p.pid, 2)  # SIGINT: dnsperf prints its statistics
            loads = {"A": dnsperf_finish(perfs[0]), "B": dnsperf_finish(perfs[1])}
    b1 = c.ctl_stats(b["sock"])
    out = summarize(rows)
    out.update({
        "name": name,
        "wall_s": wall,
        "cpu_busy": {str(k): round(v, 3) for k, v in busy.items()},
        "process_cpu": {k: round((cpu1[k] - cpu0[k]) / 1e9 / wall, 3) for k in cpu1},
        # Both CPUs' busy time not spent by this benchmark's processes (in CPUs): other work
        # on the shared machine (builds, fuzzers), plus kernel work on our packets.
        "other_work_cpus": round(max(0.0, sum(busy.values())
                                     - sum((cpu1[k] - cpu0[k]) / 1e9 / wall for k in cpu1)), 3),
        "dnsperf": loads,
        "b_redis_counters": {k: b1.get(k, 0) - b0.get(k, 0) for k in b1
                             if k.startswith("redis.") and b1.get(k, 0) - b0.get(k, 0)},
        "samples": [{k: (round(v, 3) if isinstance(v, float) else v) for k, v in r.items()}
                    for r in rows],
    })
    qps = ", ".join(f"{k} {v['qps']:,.0f} q/s" for k, v in loads.items() if v.get("qps"))
    c.log(f"  {name:>6}: p50 {fmt(out['p50_ms'])}, p99 {fmt(out['p99_ms'])}, max "
          f"{fmt(out['max_ms'])} over {out['propagated']}/{n} decisions; A's control reply "
          f"p50 {fmt(out['ctl_p50_ms'])}; CPUs busy "
          + "/".join(f"{v * 100:.0f}%" for v in busy.values())
          + f" (other work {out['other_work_cpus']:.2f} CPUs)"
          + (f"; dnsperf answered {qps}" if qps else ""))
    return out


def redis_cmd(port, *args, timeout=0.5):
    """One RESP command to 127.0.0.1:port; the raw reply (b"" on failure)."""
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=timeout) as so:
            req = f"*{len(args)}\r\n" + "".join(f"${len(str(a))}\r\n{a}\r\n" for a in args)
            so.sendall(req.encode())
            return so.recv(65536)
    except OSError:
        return b""


def wait_redis(port, proc, what, timeout=10):
    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout:
        if redis_cmd(port, "PING").startswith(b"+PONG"):
            return
        time.sleep(0.05)
    raise RuntimeError(f"{what} did not start:\n{proc.tail()}")


def failover_run(k, tmpbase, zone, total=10_000, steps=10):
    """One failover run (see the module doc); a dict of its times in ms, or raises."""
    tmp = tempfile.mkdtemp(prefix=f"failover{k}-", dir=tmpbase)
    servers = []
    try:
        mport, rport = c.free_udp_port(), c.free_udp_port()
        base = ["--bind", "127.0.0.1", "--save", "", "--appendonly", "no", "--daemonize", "no",
                "--dir", tmp]
        master = c.Server("redis-master", ["redis-server", "--port", str(mport)] + base, None)
        servers.append(master)
        wait_redis(mport, master, "redis master")
        replica = c.Server("redis-replica", ["redis-server", "--port", str(rport)] + base
                           + ["--replicaof", "127.0.0.1", str(mport)], None)
        servers.append(replica)
        wait_redis(rport, replica, "redis replica")
        sports = []
        for i in range(3):
            sp = c.free_udp_port()
            sdir = os.path.join(tmp, f"s{i}")
            os.makedirs(sdir)
            conf = os.path.join(sdir, "sentinel.conf")
            with open(conf, "w") as f:
                f.write(f"port {sp}\nbind 127.0.0.1\ndaemonize no\ndir {sdir}\n"
                        f"sentinel monitor pal 127.0.0.1 {mport} 2\n"
                        "sentinel down-after-milliseconds pal 1000\n"
                        "sentinel failover-timeout pal 3000\n")
            srv = c.Server(f"sentinel{i}", ["redis-sentinel", conf], None)
            servers.append(srv)
            sports.append(sp)
        t0 = time.monotonic()
        while not all(redis_cmd(p, "SENTINEL", "ckquorum", "pal").startswith(b"+OK")
                      and str(rport).encode() in redis_cmd(p, "SENTINEL", "replicas", "pal")
                      for p in sports):
            if time.monotonic() - t0 > 30:
                raise RuntimeError("the sentinels did not find the replica and each other")
            time.sleep(0.1)
        sentinels = ", ".join(f'"127.0.0.1:{p}"' for p in sports)
        socks = {}
        for name, addr, cpu in (("A", "127.0.2.3", 0), ("B", "127.0.2.4", 1)):
            d = tempfile.mkdtemp(prefix=f"dnsd-{name}-", dir=tmp)
            rrl = c.RRL_OFF if c.dnsd_accepts(c.RRL_OFF)[0] else ""
            extra = (rrl + f'\n[redis]\nurl = "redis://sentinel-named"\nsentinels = [{sentinels}]\n'
                     f'master_name = "pal"\nkey_file = "{c.fleet_key(tempfile.gettempdir())}"\n'
                     f'node_id = "failover-{name.lower()}"\nreconnect_min_ms = 50\n'
                     'reconnect_max_ms = 300\nio_timeout_ms = 1000\n')
            conf = c.dnsd_conf(d, [addr], c.free_udp_port(), [("bench.test.", zone)], extra=extra)
            srv = c.Server(f"dnsd-{name}", [c.dnsd_bin(), "serve", "-c", conf], cpu,
                           env=dict(os.environ, RUST_LOG="warn"))
            servers.append(srv)
            socks[name] = os.path.join(d, "dnsd.sock")
        t0 = time.monotonic()
        while not all(os.path.exists(s) and c.ctl_stats(s).get("redis.connected") == 1
                      for s in socks.values()):
            if time.monotonic() - t0 > 30:
                raise RuntimeError("dnsd did not sync through the sentinels")
            time.sleep(0.05)
        per = total // steps
        killed = None
        for step in range(steps):
            f = os.path.join(tmp, f"step{step}.txt")
            with open(f, "w") as fh:
                for i in range(per):
                    n = step * per + i
                    fh.write(f"10.77.{n >> 8}.{n & 255}\n")
            c.ctl(socks["A"], "block", "import", f, "--ttl", "600")
            if step == steps // 2 - 1:
                os.killpg(master.pid, signal.SIGKILL)
                killed = time.monotonic()
            time.sleep(0.1)
        promoted = complete = None
        while complete is None and time.monotonic() - killed < 60:
            now = time.monotonic()
            if promoted is None and redis_cmd(rport, "ROLE").startswith(b"*3\r\n$6\r\nmaster"):
                promoted = now
            if c.ctl_stats(socks["B"]).get("blockmap.entries", 0) >= total:
                complete = now
            time.sleep(0.01)
        if complete is None:
            raise RuntimeError("B did not get all blocks within 60 s of the kill")
        promoted = promoted or complete
        a = c.ctl_stats(socks["A"])
        return {"kill_to_promoted_ms": (promoted - killed) * 1e3,
                "promoted_to_complete_ms": max(0.0, complete - promoted) * 1e3,
                "kill_to_complete_ms": (complete - killed) * 1e3,
                "master_changes_a": a.get("redis.master_changes", 0),
                "republished_a": a.get("redis.republished", 0)}
    finally:
        for srv in reversed(servers):
            srv.stop()


def fmt(v):
    return "n/a" if v is None else f"{v:.2f} ms"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", default=c.quick())
    ap.add_argument("--decisions", type=int, default=None)
    ap.add_argument("--no-failover", action="store_true")
    ap.add_argument("--failover-runs", type=int, default=None)
    args = ap.parse_args()
    n = args.decisions or (50 if args.quick else 200)
    cmd = "bench/scripts/redis_sync.py " + " ".join(sys.argv[1:])
    c.need("redis-server", "dnsperf", "taskset")
    c.log(f"Redis block propagation: {c.machine()}; {n} decisions per phase; command: {cmd}")
    tmpbase = tempfile.mkdtemp(prefix="palisade-redis-")
    zone = os.path.join(tmpbase, "bench.test.zone")
    qfile = os.path.join(tmpbase, "queries.txt")
    make_zone(zone)
    make_queries(qfile)
    prefix = f"palisade-bench-{os.getpid()}:"
    servers = []
    phases = []
    try:
        redis, rport = start_redis(tmpbase)
        servers.append(redis)
        a_srv, a_sock, a_conf = start_dnsd("A", tmpbase, A_ADDR, c.free_udp_port(), zone, rport,
                                           prefix, 0)
        servers.append(a_srv)
        a = {"sock": a_sock, "decide": ctl_decision(a_sock),
             "port": int(re.search(r"port = (\d+)", open(a_conf).read()).group(1))}
        b_srv, b_sock, b_conf = start_dnsd("B", tmpbase, B_ADDR, c.free_udp_port(), zone, rport,
                                           prefix, 1)
        servers.append(b_srv)
        b = {"sock": b_sock, "port": int(re.search(r"port = (\d+)", open(b_conf).read()).group(1))}
        pgids = {"dnsd_A": a_srv.pid, "dnsd_B": b_srv.pid, "redis": redis.pid}
        # A first decision, not measured: connections warm.
        one_decision(65000, a["decide"], b["port"])
        phases.append(run_phase("idle", n, 0, a, b, qfile, pgids))
        phases.append(run_phase("loaded", n, n, a, b, qfile, pgids))
        config = open(b_conf).read()
    finally:
        for s in reversed(servers):
            s.stop()
    failovers = []
    if not args.no_failover and shutil.which("redis-sentinel"):
        runs = args.failover_runs or (1 if args.quick else 3)
        for k in range(runs):
            c.progress(f"failover run {k + 1}/{runs}")
            failovers.append(failover_run(k, tmpbase, zone))
        c.done_progress()
    elif not args.no_failover:
        c.log("redis-sentinel is not installed: the failover phase did not run")
    by = {p["name"]: p for p in phases}
    ratios = {}
    if "idle" in by and "loaded" in by:
        for k in ("p50_ms", "p99_ms", "max_ms"):
            if by["idle"][k] and by["loaded"][k] is not None:
                ratios[f"{k[:-3]} loaded / idle"] = by["loaded"][k] / by["idle"][k]
    print(f"\nBlock propagation A -> Redis -> B, {c.machine()}, {n} decisions per phase")
    print(f"command: {cmd}")
    print(f"{'phase':>7} {'p50':>9} {'p99':>9} {'max':>9} {'not propagated':>15} "
          f"{'ctl p50':>9} {'CPU busy':>10}")
    for p in phases:
        print(f"{p['name']:>7} {fmt(p['p50_ms']):>9} {fmt(p['p99_ms']):>9} {fmt(p['max_ms']):>9} "
              f"{p['not_propagated']:>15} {fmt(p['ctl_p50_ms']):>9} "
              + "/".join(f"{float(v) * 100:.0f}%" for v in p["cpu_busy"].values()))
    for k, v in ratios.items():
        print(f"{k}: {v:.2f}x")
    if failovers:
        print("\nFailover mid-burst (10,000 blocks on A, master killed after 5,000; 3 sentinels, "
              "down-after 1 s):")
        print(f"{'run':>4} {'kill->promoted':>15} {'promoted->B complete':>21} "
              f"{'kill->B complete':>17}")
        for i, f in enumerate(failovers):
            print(f"{i + 1:>4} {fmt(f['kill_to_promoted_ms']):>15} "
                  f"{fmt(f['promoted_to_complete_ms']):>21} {fmt(f['kill_to_complete_ms']):>17}")
    c.save("redis_sync", {"machine": c.machine(), "cores": os.cpu_count(), "command": cmd,
                          "quick": args.quick, "decisions": n, "sched": c.sched_note(),
                          "when": time.strftime("%Y-%m-%d %H:%M:%S"),
                          "probe_every_ms": PROBE_EVERY * 1e3, "quiet_ms": QUIET * 1e3,
                          "give_up_s": GIVE_UP, "redis": subprocess.run(
                              ["redis-server", "--version"], capture_output=True,
                              text=True).stdout.strip(),
                          "config_b": config, "phases": phases, "ratios": ratios,
                          "failovers": failovers})
    if len(phases) < 2 or any(p["propagated"] == 0 for p in phases):
        sys.exit(1)


if __name__ == "__main__":
    main()
