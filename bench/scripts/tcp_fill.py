#!/usr/bin/env python3
"""TCP connection-table filling: dnsd vs Knot DNS vs NSD, in one run.

Each server gets the same bound on TCP connections (256). An attacker owning 64 addresses
opens 8 connections from each (512: twice the table), sends nothing on them, and opens a new
one the moment one is closed or refused, as fast as it can. Beside it a resolver-like client
opens a connection from a fresh address every 50 ms, asks one question and reads the answer
(2 s to connect and be answered). The figure is the share of those clients answered and
their latency: a server whose table the attacker can keep full turns its real clients away.

Server on CPU 0, both clients on CPU 1.

Usage: tcp_fill.py [--quick] [--seconds N] [--servers dnsd,knot,nsd]
"""

import argparse
import asyncio
import os
import struct
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common as c  # noqa: E402

TABLE = 256
ATTACK_SOURCES = 64
PER_SOURCE = 8
LEGIT_EVERY = 0.05
LEGIT_WAIT = 2.0
PORT = 5400


def zone(tmp):
    path = os.path.join(tmp, "bench.test.zone")
    with open(path, "w") as f:
        f.write("$TTL 300\n@ SOA ns.bench.test. h.bench.test. 1 3600 600 86400 300\n"
                "@ NS ns\nns A 192.0.2.1\nwww A 192.0.2.80\n")
    return [("bench.test.", path)]


def start(name, tmp, addr):
    zones = zone(tmp)
    if name == "dnsd":
        conf = c.dnsd_conf(tmp, [addr], PORT, zones,
                           extra=f"tcp_max_connections = {TABLE}\ntcp_max_per_source = 16\n"
                                 + c.RRL_OFF)
        argv = [c.dnsd_bin(), "serve", "-c", conf]
    elif name == "knot":
        conf = c.knot_conf(tmp, addr, PORT, zones)
        with open(conf) as f:
            text = f.read()
        text = text.replace("    tcp-workers: 1\n",
                            f"    tcp-workers: 1\n    tcp-max-clients: {TABLE}\n")
        with open(conf, "w") as f:
            f.write(text)
        argv = ["knotd", "-c", conf]
    else:
        conf = c.nsd_conf(tmp, addr, PORT, zones, extra=f"    tcp-count: {TABLE}")
        argv = ["nsd", "-d", "-c", conf]
    srv = c.Server(name, argv, cpu=0)
    if c.wait_answer(addr, PORT, "www.bench.test.", 1, timeout=30, proc=srv.proc) is None:
        srv.stop()
        raise RuntimeError(f"{name} did not start: {srv.tail()}")
    return srv


async def attacker(addr, src, stop, stats):
    """One attacking connection slot: connect, hold silent until closed, reconnect at once."""
    while not stop.is_set():
        try:
            r, w = await asyncio.wait_for(
                asyncio.open_connection(addr, PORT, local_addr=(src, 0)), 1.0)
        except (OSError, asyncio.TimeoutError):
            stats["failed"] += 1
            await asyncio.sleep(0.01)
            continue
        stats["opened"] += 1
        try:
            done = asyncio.ensure_future(r.read(1))
            stopped = asyncio.ensure_future(stop.wait())
            await asyncio.wait({done, stopped}, return_when=asyncio.FIRST_COMPLETED)
            for t in (done, stopped):
                t.cancel()
        except OSError:
            pass
        finally:
            w.close()


async def legit(addr, src, qid, results):
    """One client: connect, ask www.bench.test/A, read the answer; (ok, seconds)."""
    q = c.dns_query("www.bench.test.", 1, qid)
    t0 = time.monotonic()
    try:
        async def ask():
            r, w = await asyncio.open_connection(addr, PORT, local_addr=(src, 0))
            try:
                w.write(struct.pack(">H", len(q)) + q)
                await w.drain()
                n = struct.unpack(">H", await r.readexactly(2))[0]
                m = await r.readexactly(n)
                return m[:2] == q[:2]
            finally:
                w.close()
        ok = await asyncio.wait_for(ask(), LEGIT_WAIT)
    except (OSError, asyncio.TimeoutError, asyncio.IncompleteReadError):
        ok = False
    results.append((ok, time.monotonic() - t0))


async def run_load(addr, seconds, net):
    stop = asyncio.Event()
    stats = {"opened": 0, "failed": 0}
    attack = [asyncio.ensure_future(attacker(addr, f"127.{net}.1.{1 + s}", stop, stats))
              for s in range(ATTACK_SOURCES) for _ in range(PER_SOURCE)]
    # The table fills first.
    await asyncio.sleep(1.0)
    results, clients = [], []
    t_end = time.monotonic() + seconds
    i = 0
    while time.monotonic() < t_end:
        src = f"127.{net}.{2 + i // 250 % 200}.{1 + i % 250}"
        clients.append(asyncio.ensure_future(legit(addr, src, i & 0xFFFF, results)))
        i += 1
        await asyncio.sleep(LEGIT_EVERY)
    await asyncio.gather(*clients)
    stop.set()
    await asyncio.gather(*attack, return_exceptions=True)
    return results, stats


def measure(name, seconds, net):
    tmp = tempfile.mkdtemp(prefix=f"tcpfill-{name}-")
    addr = f"127.{net}.0.1"
    srv = start(name, tmp, addr)
    try:
        os.sched_setaffinity(0, {1})
        results, stats = asyncio.run(run_load(addr, seconds, net))
    finally:
        os.sched_setaffinity(0, set(range(os.cpu_count())))
        srv.stop()
    lat = sorted(t for ok, t in results if ok)
    answered = sum(1 for ok, _ in results if ok)
    out = {"server": name, "clients": len(results), "answered": answered,
           "answered_pct": 100.0 * answered / max(len(results), 1),
           "p50_ms": c.percentile(lat, 0.5) * 1e3 if lat else None,
           "p99_ms": c.percentile(lat, 0.99) * 1e3 if lat else None,
           "attack_connections": stats["opened"], "attack_refused": stats["failed"]}
    c.log(f"{name}: {answered}/{len(results)} clients answered, attack opened "
          f"{stats['opened']} connections ({stats['failed']} failed)")
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--seconds", type=int, default=None)
    ap.add_argument("--servers", default="dnsd,knot,nsd")
    a = ap.parse_args()
    quick = a.quick or c.quick()
    seconds = a.seconds or (8 if quick else 20)
    c.need("knotd", "nsd")
    servers = a.servers.split(",")
    rows = []
    for k, name in enumerate(servers):
        c.progress(f"tcp fill: {name}")
        rows.append(measure(name, seconds, 150 + k))
    c.done_progress()
    print(f"\nTCP table filling, {c.machine()}: table of {TABLE} connections, attacker "
          f"{ATTACK_SOURCES} addresses x {PER_SOURCE} silent connections reopened at once, "
          f"a new client every {LEGIT_EVERY * 1e3:.0f} ms for {seconds} s "
          f"(connect + one query within {LEGIT_WAIT:.0f} s)")
    print(f"{'server':<8} {'clients answered':>17} {'p50':>9} {'p99':>9} "
          f"{'attack connections':>19}")
    for r in rows:
        p50 = f"{r['p50_ms']:.1f} ms" if r["p50_ms"] is not None else "-"
        p99 = f"{r['p99_ms']:.1f} ms" if r["p99_ms"] is not None else "-"
        print(f"{r['server']:<8} {r['answered_pct']:>16.1f}% {p50:>9} {p99:>9} "
              f"{r['attack_connections']:>19}")
    c.save("tcp_fill", {"machine": c.machine(), "seconds": seconds, "table": TABLE,
                        "when": time.strftime("%Y-%m-%d %H:%M:%S"), "results": rows})


if __name__ == "__main__":
    main()
