#!/usr/bin/env python3
"""DNSSEC signing, side by side, on the generated zone of the zone part (1.14M records,
200k with --quick), ECDSA P-256, one combined key, NSEC:

- dnsd serving the zone under a dnssec_policy: time from spawn to the first signed
  answer (it signs on every core before serving), memory (PSS) then;
- Knot DNS with automatic signing (the same algorithm and key type, as many background
  workers as cores, semantic checks off): time to the first answer with a DNSKEY, PSS;
- dnssec-signzone (BIND, -n cores) and ldns-signzone (one thread) signing the file: wall
  time and peak memory (max RSS).

Then answers per second during a random-subdomain flood with DO, against a zone of
100,000 names: dnsd denying with compact denial (RFC 9824, signed online within its
budget, TC=1 past it) and dnsd serving the same names pre-signed with NSEC3 (three
NSEC3 per NXDOMAIN, no signing at query time). dnsd pinned to CPU 0, dnsperf on CPU 1:
a flood of random names and, beside it, a client asking for existing names (the
random-subdomain defence off: it would block the flood's one source, which is another
bench's subject).

Usage: signing.py [--quick] [--records N] [--runs N] [--seconds S]
"""
import argparse
import os
import random
import shutil
import statistics
import subprocess
import tempfile
import threading
import time

import common as c

PORT = 5831
ADDR = "127.0.0.1"


def dnsd_signing_conf(tmp, zone, origin, extra_policy="", extra="", dnssec=""):
    keys = os.path.join(tmp, "keys")
    policy = (f"[dnssec]\nkey_dir = \"{keys}\"\n{dnssec}\n[[dnssec_policy]]\nname = \"p\"\n"
              f"{extra_policy}\n{c.RRL_OFF}\n{extra}")
    conf = c.dnsd_conf(tmp, [ADDR], PORT, [(origin, zone)], extra=policy,
                       zone_extra='dnssec_policy = "p"')
    return conf


def knot_signing_conf(tmp, zone):
    conf = c.knot_conf(tmp, ADDR, PORT, [("example.com.", zone)])
    # No journal: the signed zone's difference would overflow its default size (and dnsd
    # writes none either).
    c.knot_all_cores(conf, "    dnssec-signing: on\n    dnssec-policy: bench\n"
                           "    journal-content: none\n    zonefile-sync: -1\n")
    with open(conf) as f:
        text = f.read()
    text = text.replace("template:\n", "policy:\n  - id: bench\n    algorithm: ecdsap256sha256\n"
                        "    single-type-signing: on\n    nsec3: off\n    rrsig-lifetime: 14d\n"
                        "    rrsig-refresh: 7d\n\ntemplate:\n", 1)
    with open(conf, "w") as f:
        f.write(text)
    return conf


def serve_signed(name, argv, env=None):
    """Spawn → first answer with a DNSKEY (the zone signed and served); (seconds, PSS KiB)."""
    t0 = time.monotonic()
    srv = c.Server(name, argv, None, env=env)
    try:
        up = None
        while time.monotonic() - t0 < 1800 and up is None:
            up = c.wait_answer(ADDR, PORT, "example.com", qtype=48, timeout=5, proc=srv.proc,
                               each=0.05)
            if up is None and ("failed" in srv.tail() or srv.proc.poll() is not None):
                break
        if up is None:
            c.log(f"  {name} did not answer: {srv.tail()[-600:]}")
            return None
        return time.monotonic() - t0, c.pss_kb(srv.pid)
    finally:
        srv.stop()


def timed(argv, cwd):
    """Wall time and max RSS of a command (GNU time)."""
    out = os.path.join(cwd, "time.txt")
    p = subprocess.run(["/usr/bin/time", "-f", "%e %M", "-o", out, *argv], cwd=cwd,
                       capture_output=True, text=True)
    if p.returncode != 0:
        c.log(f"  {argv[0]} failed: {p.stderr[-600:]}")
        return None
    secs, kb = open(out).read().split()
    return float(secs), int(kb)


def signers(zone, runs, work):
    out = []
    cores = os.cpu_count()
    plans = []

    def dnsd_run():
        tmp = tempfile.mkdtemp(prefix="sg-dnsd-", dir=work)
        conf = dnsd_signing_conf(tmp, zone, "example.com.")
        return serve_signed("dnsd", [c.dnsd_bin(), "serve", "-c", conf],
                            env=dict(os.environ, RUST_LOG="warn"))
    plans.append(("dnsd", "dnsd serve, dnssec_policy (ECDSA P-256 CSK, NSEC)", dnsd_run, "PSS"))

    def knot_run():
        tmp = tempfile.mkdtemp(prefix="sg-knot-", dir=work)
        return serve_signed("knot", ["knotd", "-c", knot_signing_conf(tmp, zone)])
    plans.append(("knot", f"knotd, dnssec-signing on ({cores} background workers)", knot_run,
                  "PSS"))

    def bind_run():
        tmp = tempfile.mkdtemp(prefix="sg-bind-", dir=work)
        subprocess.run(["dnssec-keygen", "-q", "-f", "KSK", "-a", "ECDSAP256SHA256", "-K", tmp,
                        "example.com"], check=True, capture_output=True)
        return timed(["dnssec-signzone", "-q", "-n", str(cores), "-z", "-S", "-K", tmp,
                      "-o", "example.com", "-f", os.path.join(tmp, "signed"), zone], tmp)
    if shutil.which("dnssec-signzone"):
        plans.append(("dnssec-signzone", f"dnssec-signzone -n {cores} -z -S", bind_run,
                      "max RSS"))

    def ldns_run():
        tmp = tempfile.mkdtemp(prefix="sg-ldns-", dir=work)
        k = subprocess.run(["ldns-keygen", "-a", "ECDSAP256SHA256", "-k", "example.com"],
                           cwd=tmp, check=True, capture_output=True, text=True).stdout.strip()
        return timed(["ldns-signzone", "-f", os.path.join(tmp, "signed"), zone,
                      os.path.join(tmp, k)], tmp)
    if shutil.which("ldns-signzone"):
        plans.append(("ldns-signzone", "ldns-signzone (one thread)", ldns_run, "max RSS"))

    for name, what, run, mem in plans:
        times, mems = [], []
        for _ in range(runs):
            c.progress(f"  signing with {name} ({len(times) + 1}/{runs})")
            r = run()
            if r is None:
                break
            times.append(r[0])
            mems.append(r[1])
        c.done_progress()
        if times:
            r = {"name": name, "command": what, "seconds": statistics.median(times),
                 "mem_kib": int(statistics.median(mems)), "mem_kind": mem, "runs": len(times)}
            c.log(f"  {name:>16}: {r['seconds']:.2f} s, {r['mem_kib'] / 1024:.0f} MiB {mem}")
            out.append(r)
    return out


NAMES = 100_000
# The flood comes from one address here: the random-subdomain defence would block it (and
# the client beside it) within a second. Off, the answer path alone is measured.
NO_WT = "[defence.random_subdomain]\nenabled = false"


def small_zone(path):
    with open(path, "w") as f:
        f.write("$ORIGIN signed.test.\n$TTL 3600\n@ SOA ns1 hostmaster 1 7200 3600 1209600 300\n")
        f.write("@ NS ns1\nns1 A 192.0.2.1\n")
        for i in range(NAMES):
            f.write(f"h{i} A 10.{i >> 16 & 255}.{i >> 8 & 255}.{i & 255}\n")


def flood(seconds, work):
    """Answers per second during a random-subdomain flood with DO: compact denial against
    pre-signed NSEC3."""
    tmp = tempfile.mkdtemp(prefix="sg-flood-", dir=work)
    zone = os.path.join(tmp, "signed.test.zone")
    small_zone(zone)
    run = lambda cmd: subprocess.run(cmd, shell=True, cwd=tmp, check=True, capture_output=True)
    run("dnssec-keygen -q -f KSK -a ECDSAP256SHA256 -K . signed.test")
    run("dnssec-signzone -q -3 - -H 0 -z -o signed.test -K . -S -f nsec3.zone signed.test.zone")
    rnd = random.Random(7)
    nx = os.path.join(tmp, "nx.txt")
    with open(nx, "w") as f:
        for _ in range(200_000):
            f.write(f"r{rnd.getrandbits(48):x}.signed.test A\n")
    legit = os.path.join(tmp, "legit.txt")
    with open(legit, "w") as f:
        for _ in range(50_000):
            f.write(f"h{rnd.randrange(NAMES)}.signed.test A\n")
    results = []
    for name, conf in [
        ("compact denial", lambda d: dnsd_signing_conf(d, zone, "signed.test.",
                                                       "compact_denial = true", extra=NO_WT)),
        # Every denial signed (no budget): what online signing itself costs.
        ("compact, no budget", lambda d: dnsd_signing_conf(
            d, zone, "signed.test.", "compact_denial = true",
            extra=NO_WT,
            dnssec="compact_denial_rate = 100000000\ncompact_denial_per_source = 100000000")),
        ("pre-signed NSEC3", lambda d: c.dnsd_conf(d, [ADDR], PORT,
                                                   [("signed.test.", os.path.join(tmp, "nsec3.zone"))],
                                                   extra=c.RRL_OFF + "\n" + NO_WT)),
    ]:
        d = tempfile.mkdtemp(prefix="sg-fl-", dir=work)
        srv = c.Server("dnsd", [c.dnsd_bin(), "serve", "-c", conf(d)], 0,
                       env=dict(os.environ, RUST_LOG="warn"))
        try:
            if c.wait_answer(ADDR, PORT, "signed.test", qtype=6, timeout=300, proc=srv.proc) is None:
                c.log(f"  dnsd ({name}) did not answer: {srv.tail()[-600:]}")
                continue
            got = {}

            def legit_run():
                got["legit"] = c.run_dnsperf(ADDR, PORT, legit, seconds, cpu=1, clients=1,
                                             outstanding=20, extra=("-D",))
            t = threading.Thread(target=legit_run)
            t.start()
            before = c.cpu_ns(srv.pid)
            fl = c.run_dnsperf(ADDR, PORT, nx, seconds, cpu=1, extra=("-D",))
            cpu = c.cpu_ns(srv.pid) - before
            t.join()
            stats = c.ctl_stats(os.path.join(d, "dnsd.sock")) if os.path.exists(
                os.path.join(d, "dnsd.sock")) else {}
            r = {"name": name, "flood_qps": fl[2], "flood_lost": fl[1],
                 "legit_qps": got["legit"][2], "legit_lost": got["legit"][1],
                 "cpu_util": cpu / 1e9 / seconds,
                 "signed": stats.get("compact_denial.signed", 0),
                 "over_budget": stats.get("compact_denial.over_budget", 0),
                 "over_source": stats.get("compact_denial.over_source", 0),
                 "truncated": stats.get("responses.truncated", 0)}
            c.log(f"  {name:>16}: flood {fl[2]:.0f} answers/s ({fl[1]} lost), beside it "
                  f"{r['legit_qps']:.0f} answers/s to existing names; signed {r['signed']}, "
                  f"TC over budget {r['over_budget'] + r['over_source']}")
            results.append(r)
        finally:
            srv.stop()
    return results


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", default=c.quick())
    ap.add_argument("--records", type=int)
    ap.add_argument("--runs", type=int)
    ap.add_argument("--seconds", type=int)
    a = ap.parse_args()
    records = a.records or (200_000 if a.quick else 1_140_000)
    runs = a.runs or (1 if a.quick else 3)
    seconds = a.seconds or (3 if a.quick else 10)
    c.need("knotd", "dnsperf", "dnssec-signzone")
    work = os.environ.get("BENCH_WORK", "/tmp/palisade-bench")
    os.makedirs(work, exist_ok=True)
    zone = os.path.join(work, f"big-{records}.zone")
    if not os.path.exists(zone):
        c.log(f"generating {zone} ...")
        subprocess.run(["python3", os.path.join(c.ROOT, "bench", "scripts", "gen_zone.py"),
                        "example.com.", str(records), zone], check=True)
    c.log(f"signing: {records} records, ECDSA P-256, NSEC, median of {runs} run(s)")
    sig = signers(zone, runs, work)
    c.log(f"random-subdomain flood with DO, {seconds} s each")
    fl = flood(seconds, work)
    by = {r["name"]: r for r in sig}
    if "dnsd" in by:
        for r in sig[1:]:
            c.log(f"  {r['name']:>16}: time x{r['seconds'] / by['dnsd']['seconds']:.2f} of dnsd, "
                  f"memory x{r['mem_kib'] / by['dnsd']['mem_kib']:.2f}")
    c.save("signing", {
        "machine": c.machine(), "cores": os.cpu_count(), "records": records, "runs": runs,
        "seconds": seconds, "command": f"bench/scripts/signing.py --records {records} --runs {runs}",
        "signers": sig, "flood": fl, "when": time.strftime("%Y-%m-%d %H:%M:%S")})


if __name__ == "__main__":
    main()
