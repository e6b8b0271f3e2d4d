#!/usr/bin/env python3
"""Many small zones (100,000 of 11 records; 10,000 with --quick), side by side: dnsd (one
[[zone]] per zone, and one [[zone_set]] directory), Knot DNS and NSD, each with one query
worker and free to load on every core (Knot with as many background workers):

- start: time from spawn until the last zone of the list answers its SOA, and memory (PSS)
  then;
- one changed zone: its file rewritten with a new serial, then the server told of that zone
  (dnsd `ctl reload ZONE`, `knotc zone-reload ZONE`, `nsd-control reload ZONE`): time until
  the new serial is answered;
- one added zone: dnsd `ctl zone add`, Knot `knotc conf-begin / conf-set / conf-commit` (its
  configuration database), NSD `nsd-control addzone` (a pattern): time until it answers.

Usage: many_zones.py [--quick] [--zones N] [--runs N] [--servers dnsd,dnsd-set,knot,nsd]
"""
import argparse
import os
import shutil
import socket
import statistics
import subprocess
import tempfile
import time

import common as c

PORT = 5812


def gen_zones(n, d):
    """n zones z0.tenants.test. … in d/ZONE.zone (kept between runs)."""
    mark = os.path.join(d, f".complete-{n}")
    if os.path.exists(mark):
        return
    shutil.rmtree(d, ignore_errors=True)
    os.makedirs(d)
    for i in range(n):
        o = f"z{i}.tenants.test."
        with open(os.path.join(d, f"{o[:-1]}.zone"), "w") as f:
            f.write(zone_text(o, 2026120100))
        if i % 5000 == 0:
            c.progress(f"  generating zones {i}/{n}")
    c.done_progress()
    open(mark, "w").close()


def zone_text(origin, serial):
    return (f"$ORIGIN {origin}\n$TTL 3600\n@ SOA ns1 hostmaster {serial} 7200 3600 1209600 300\n"
            "@ NS ns1\n@ NS ns2\nns1 A 192.0.2.1\nns2 A 192.0.2.2\n@ A 192.0.2.10\n"
            "@ AAAA 2001:db8::10\nwww A 192.0.2.11\nwww AAAA 2001:db8::11\n"
            "mail A 192.0.2.12\n@ MX 10 mail\n")


def has_serial(qname, serial):
    """True when 127.0.0.1 answers qname's SOA (NOERROR, an answer) with this serial."""
    q = c.dns_query(qname, 6, 0x5151)
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.settimeout(0.05)
    try:
        s.sendto(q, ("127.0.0.1", PORT))
        r, _ = s.recvfrom(4096)
    except OSError:
        return False
    finally:
        s.close()
    if r[:2] != q[:2] or r[3] & 15 != 0 or (r[6] << 8 | r[7]) == 0:
        return False
    # The serials used are unlike any other 4 bytes of these answers.
    return serial.to_bytes(4, "big") in r[12:]


def wait_serial(qname, serial, timeout, proc):
    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout:
        if proc.poll() is not None:
            return None
        if has_serial(qname, serial):
            return time.monotonic() - t0
        time.sleep(0.001)
    return None


def configs(name, tmp, zdir, names):
    zones = [(o, os.path.join(zdir, f"{o[:-1]}.zone")) for o in names]
    if name.startswith("dnsd"):
        # zone_state belongs to [server]: dnsd_conf puts `extra` right after its lines.
        extra = f'zone_state = "{tmp}/zone-state.toml"\n' + c.RRL_OFF
        if name == "dnsd-set":
            extra += f'\n[[zone_set]]\ndir = "{zdir}"'
            zones = []
        return [c.dnsd_bin(), "serve", "-c", c.dnsd_conf(tmp, ["127.0.0.1"], PORT, zones, extra)]
    if name == "knot":
        conf = c.knot_conf(tmp, "127.0.0.1", PORT, zones)
        # No journal or timers to write either.
        c.knot_all_cores(conf, "    journal-content: none\n    zonefile-sync: -1\n")
        db = os.path.join(tmp, "confdb")
        subprocess.run(["knotc", "-C", db, "conf-import", conf], check=True,
                       capture_output=True, timeout=600)
        return ["knotd", "-C", db]
    conf = c.nsd_conf(tmp, "127.0.0.1", PORT, zones)
    with open(conf) as f:
        text = f.read()
    text = text.replace("remote-control:\n    control-enable: no",
                        f"remote-control:\n    control-enable: yes\n"
                        f"    control-interface: {tmp}/nsd.ctl\n"
                        f"pattern:\n    name: p\n    zonefile: {zdir}/%s.zone")
    with open(conf, "w") as f:
        f.write(text)
    return ["nsd", "-d", "-c", conf]


def tell_changed(name, tmp, origin):
    if name.startswith("dnsd"):
        return c.ctl(f"{tmp}/dnsd.sock", "reload", origin)
    if name == "knot":
        return subprocess.run(["knotc", "-s", f"{tmp}/knot.sock", "zone-reload", origin],
                              capture_output=True, text=True, timeout=60).stdout
    return subprocess.run(["nsd-control", "-c", f"{tmp}/nsd.conf", "reload", origin[:-1]],
                          capture_output=True, text=True, timeout=60).stdout


def tell_added(name, tmp, origin, file):
    if name.startswith("dnsd"):
        return c.ctl(f"{tmp}/dnsd.sock", "zone", "add", origin, file)
    if name == "knot":
        s = ["knotc", "-s", f"{tmp}/knot.sock"]
        for args in (["conf-begin"], ["conf-set", f"zone[{origin}]"],
                     ["conf-set", f"zone[{origin}].file", file], ["conf-commit"]):
            p = subprocess.run(s + args, capture_output=True, text=True, timeout=60)
            if p.returncode != 0:
                raise RuntimeError(f"knotc {' '.join(args)}: {p.stdout}{p.stderr}")
        return ""
    p = subprocess.run(["nsd-control", "-c", f"{tmp}/nsd.conf", "addzone", origin[:-1], "p"],
                       capture_output=True, text=True, timeout=60)
    if p.returncode != 0:
        raise RuntimeError(f"nsd-control addzone: {p.stdout}{p.stderr}")
    return p.stdout


def run_one(name, n, zdir, work):
    names = [f"z{i}.tenants.test." for i in range(n)]
    tmp = tempfile.mkdtemp(prefix=f"mz-{name}-", dir=work)
    argv = configs(name, tmp, zdir, names)
    env = dict(os.environ, RUST_LOG="warn") if name.startswith("dnsd") else None
    t0 = time.monotonic()
    # Not pinned: start-up may use every core (Knot's background workers, dnsd's loaders).
    srv = c.Server(name, argv, None, env=env)
    r = {"name": name}
    try:
        # The last zone of the list (dnsd-set: of the directory's order, which it sorts).
        last = names[-1] if name != "dnsd-set" else sorted(names)[-1]
        up = c.wait_answer("127.0.0.1", PORT, last, qtype=6, timeout=900, proc=srv.proc,
                           each=0.01)
        if up is None:
            c.log(f"  {name} did not answer: {srv.tail()[-600:]}")
            return None
        r["start_s"] = time.monotonic() - t0
        time.sleep(0.5)
        r["pss_kib"] = c.pss_kb(srv.pid)
        # One changed zone.
        z = names[n // 2]
        f = os.path.join(zdir, f"{z[:-1]}.zone")
        with open(f, "w") as fh:
            fh.write(zone_text(z, 2026120101))
        t1 = time.monotonic()
        tell_changed(name, tmp, z)
        took = wait_serial(z, 2026120101, 60, srv.proc)
        r["changed_s"] = None if took is None else time.monotonic() - t1
        with open(f, "w") as fh:
            fh.write(zone_text(z, 2026120100))
        # One added zone.
        new = f"added-{name}.tenants.test."
        nf = os.path.join(zdir, f"{new[:-1]}.zone")
        with open(nf, "w") as fh:
            fh.write(zone_text(new, 2026120177))
        try:
            t2 = time.monotonic()
            tell_added(name, tmp, new, nf)
            took = wait_serial(new, 2026120177, 60, srv.proc)
            r["added_s"] = None if took is None else time.monotonic() - t2
        except (RuntimeError, OSError) as e:
            c.log(f"  {name}: adding a zone failed: {e}")
            r["added_s"] = None
        finally:
            os.unlink(nf)
    finally:
        srv.stop()
        shutil.rmtree(tmp, ignore_errors=True)
    return r


def fmt(v, unit="s"):
    return "—" if v is None else (f"{v * 1000:.1f} ms" if v < 1 else f"{v:.2f} s")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", default=c.quick())
    ap.add_argument("--zones", type=int)
    ap.add_argument("--runs", type=int)
    ap.add_argument("--servers", default="dnsd,dnsd-set,knot,nsd",
                    help="which of dnsd, dnsd-set, knot, nsd (comma-separated)")
    a = ap.parse_args()
    n = a.zones or (10_000 if a.quick else 100_000)
    runs = a.runs or (1 if a.quick else 3)
    work = os.environ.get("BENCH_WORK", "/tmp/palisade-bench")
    os.makedirs(work, exist_ok=True)
    zdir = os.path.join(work, f"many-zones-{n}")
    c.log(f"many zones: {n} zones of 11 records, median of {runs} run(s)")
    gen_zones(n, zdir)
    results = []
    for name in a.servers.split(","):
        rs = []
        for k in range(runs):
            c.progress(f"  {name}: run {k + 1}/{runs}")
            r = run_one(name, n, zdir, work)
            if r:
                rs.append(r)
        c.done_progress()
        if not rs:
            continue

        def med(key):
            vals = [r[key] for r in rs if r.get(key) is not None]
            return statistics.median(vals) if vals else None

        m = {"name": name, "runs": len(rs), "start_s": med("start_s"),
             "pss_kib": int(med("pss_kib")), "changed_s": med("changed_s"),
             "added_s": med("added_s")}
        c.log(f"  {name:>8}: last zone answers after {fmt(m['start_s'])}, "
              f"{m['pss_kib'] / 1024:.0f} MiB PSS; one changed zone {fmt(m['changed_s'])}; "
              f"one added zone {fmt(m['added_s'])}")
        results.append(m)
    by = {r["name"]: r for r in results}
    d = by.get("dnsd")
    for ref in ("knot", "nsd"):
        r = by.get(ref)
        if d and r and d["start_s"] and r["start_s"]:
            c.log(f"  dnsd vs {ref}: start {d['start_s'] / r['start_s']:.2f}x, "
                  f"memory {d['pss_kib'] / r['pss_kib']:.2f}x")
    c.save("many_zones", {
        "machine": c.machine(), "cores": os.cpu_count(), "zones": n, "runs": runs,
        "sched": c.sched_note(),
        "command": f"bench/scripts/many_zones.py --zones {n} --runs {runs}",
        "servers": results, "when": time.strftime("%Y-%m-%d %H:%M:%S")})


if __name__ == "__main__":
    main()
