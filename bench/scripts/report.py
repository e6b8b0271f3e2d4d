#!/usr/bin/python3
"""Writes bench/report/REPORT.md and its PNG plots from the JSON results in
bench/report/raw/ (attack, dns_qps, dnssec_qps, signing, zone_load, axfr, isolation, listen_hash, http_front,
xdp_veth, redis_sync).
A missing result is skipped with a note; nothing is measured here.
Usage: report.py
"""
import json
import os
import sys
import time

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

sys.path.insert(0, os.path.dirname(__file__))
import common as c  # noqa: E402

OUT = c.REPORT
LABEL = {"dnsd": "dnsd", "dnsd+rules": "dnsd, 1,000 shield rules", "nsd": "NSD 4.6", "knot": "Knot DNS 3.2", "echo": "bare echo (floor)"}
COLOR = {"dnsd": "#1b7837", "dnsd+rules": "#5aae61", "nsd": "#2166ac", "knot": "#b2182b", "echo": "#999999"}


def load(name):
    p = os.path.join(c.RAW, name + ".json")
    if not os.path.exists(p):
        return None
    with open(p) as f:
        return json.load(f)


def pct(v, digits=2):
    return "n/a" if v is None else f"{100 * v:.{digits}f} %"


def ms(v, n=None):
    """A latency percentile in ms; None means the percentile fell on a lost query."""
    if v is None:
        return "n/a" if not n else "lost (>1 s)"
    return f"{v:.2f} ms" if v < 100 else f"{v:.0f} ms"


def ratio(v, base):
    if v is None or base in (None, 0):
        return ""
    return f" ({v / base:.2f}x)"


def table(header, rows):
    out = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    out += ["| " + " | ".join(str(x) for x in r) + " |" for r in rows]
    return "\n".join(out)


def savefig(fig, name):
    path = os.path.join(OUT, name)
    fig.savefig(path, dpi=110, bbox_inches="tight")
    plt.close(fig)
    return name


# ---------------------------------------------------------------------------------------
# Attack


def attack_window(s, name):
    return next((w for w in s.get("windows", []) if w["name"] == name), None)


def plot_attack(A):
    servers = [s for s in A["servers"] if "series" in s]
    if not servers:
        return None
    fig, axes = plt.subplots(len(servers), 1, figsize=(11, 2.5 * len(servers) + 0.6),
                             sharex=True, squeeze=False)
    handles = []
    for ax, s in zip(axes[:, 0], servers):
        col = COLOR.get(s["name"])
        t = [r["t"] + 0.5 for r in s["series"]]
        for w in s["windows"][1:-1]:
            ax.axvspan(w["start"], w["end"], color="#fdb863", alpha=0.3, lw=0)
            ax.text((w["start"] + w["end"]) / 2, 0.025, w["name"], ha="center", va="bottom",
                    fontsize=7, color="#7f3b08")
        ax2 = ax.twinx()
        lost_o = [r["n"] - r["ok"] for r in s["series"]]
        lost_f = [r.get("flooded_n", 0) - r.get("flooded_ok", 0) for r in s["series"]]
        b1 = ax2.bar(t, lost_o, width=0.8, color="#b2182b", alpha=0.55,
                     label="failed/s, addresses not flooded directly")
        b2 = ax2.bar(t, lost_f, width=0.8, bottom=lost_o, color="#f4a582", alpha=0.55,
                     label="failed/s, the flooded address")
        ax2.set_ylim(0, max(10, max(a + b for a, b in zip(lost_o, lost_f)) * 3))
        ax2.set_ylabel("failed queries/s")
        lines = []
        for key, style, lab in (("p50_ms", "-", "p50"), ("p99_ms", "--", "p99"),
                                ("p999_ms", ":", "p99.9")):
            lines += ax.plot(t, [r[key] if r[key] is not None else float("nan")
                                 for r in s["series"]], style, color=col, lw=1.8,
                             label=f"{lab} latency (addresses not flooded directly)")
        ax.set_zorder(ax2.get_zorder() + 1)
        ax.patch.set_visible(False)
        ax.set_yscale("log")
        ax.set_ylim(0.02, 2000)
        ax.axhline(1000, color="#555", lw=0.6, ls="-.")
        ax.set_ylabel("ms")
        a = s["attack"]["others"]
        ax.set_title(f"{LABEL.get(s['name'], s['name'])} — under attack {pct(a['success'])} answered, "
                     f"p99 {ms(a['p99_ms'], a['n'])} — {s['note'][:80]}", fontsize=9, loc="left")
        if not handles:
            handles = lines + [b1, b2]
    fig.legend(handles, [h.get_label() for h in handles], loc="upper center", ncol=3, fontsize=7,
               bbox_to_anchor=(0.5, 1.0), frameon=False)
    axes[-1, 0].set_xlabel(f"seconds, by send time (legitimate clients: {A['legit']['rate']} q/s over "
                           "8 addresses; shaded: attack phases; a lost or wrong answer counts as "
                           "the 1 s timeout)")
    fig.tight_layout(rect=(0, 0, 1, 0.96))
    return savefig(fig, "attack_latency.png")


def plot_attack_answered(A):
    servers = [s for s in A["servers"] if "floods" in s]
    if not servers:
        return None
    phases = A["phases"]
    fig, ax = plt.subplots(figsize=(10, 3.2))
    width = 0.8 / len(servers)
    for k, s in enumerate(servers):
        full, tc = [], []
        for ph in phases:
            fl = [f for f in s["floods"] if f.get("phase") == ph and "sent" in f]
            sent = sum(f["sent"] for f in fl) or 1
            rep = sum(f["replies"] for f in fl)
            slip = sum(f["replies_tc"] for f in fl)
            full.append(100 * (rep - slip) / sent)
            tc.append(100 * slip / sent)
        x = [i + (k - (len(servers) - 1) / 2) * width for i in range(len(phases))]
        ax.bar(x, full, width, color=COLOR.get(s["name"]), label=f"{LABEL.get(s['name'])}: answered")
        ax.bar(x, tc, width, bottom=full, color=COLOR.get(s["name"]), alpha=0.4,
               label=f"{LABEL.get(s['name'])}: TC slip")
    ax.set_xticks(range(len(phases)))
    ax.set_xticklabels(phases)
    ax.set_ylabel("% of attack packets\nthat got a reply")
    ax.set_ylim(0, 105)
    ax.legend(fontsize=7, ncol=3, loc="upper center", bbox_to_anchor=(0.5, -0.12), frameon=False)
    return savefig(fig, "attack_answered.png")


def attack_section(A, md):
    md.append("## 1. Under attack: legitimate clients during floods (the headline)\n")
    tl = A["timeline"]
    lg = A["legit"]
    md.append(
        f"Each server listens on 8 service addresses ({A['service'][0]}–{A['service'][-1]}), "
        "pinned to CPU 0 with one worker; load runs on CPU 1. Legitimate clients send "
        f"{lg['rate']} queries/s in total from {lg['sources']} source addresses in {lg['prefix']} "
        "(existing names, EDNS, DNS cookies — each client learns every server's cookie before "
        "the run, as a resolver that knows the server has it, and retries once on BADCOOKIE — "
        "TCP retry on TC as a resolver does; a query "
        f"unanswered after {lg['timeout_ms']} ms is lost). Latency is the kernel receive time of the "
        "reply minus the send time. After a {pre:.0f} s baseline come four attack phases of "
        "{ph:.0f} s each, {pps}:\n".format(
            pre=tl["pre"], ph=tl["phase"],
            pps=("as fast as one core sends" if not A.get("flood_pps")
                 else f"{A['flood_pps']:,.0f} attack packets/s per phase, the same for every server")))
    md.append("1. **random-subdomain**: `<random>.victim.test` from 4,096 sources at addresses .1–.4;\n"
              "2. **direct**: existing names from 256 sources at one address, "
              f"{A['flooded']}, alone;\n"
              "3. **repeat**: 16 sources repeating `amp.bench.test TXT` (≈700-byte answer) at .5–.7;\n"
              "4. **all three** at once (45/45/10 % of the rate), from fresh source ranges.\n")
    md.append("Legitimate queries go to all 8 addresses; success is reported separately for the 7 "
              "addresses not under the direct flood (\"others\", the target: 100 %) and for the "
              "flooded address. Percentiles count a lost or wrong answer as the 1 s timeout.\n")
    rows = []
    for s in A["servers"]:
        if "attack" not in s:
            rows.append([LABEL.get(s["name"], s["name"]), s.get("error", "failed"), "", "", "", ""])
            continue
        rows.append([LABEL.get(s["name"], s["name"]), s["note"]])
    md.append(table(["server", "configuration (as an operator would)"], rows) + "\n")
    for s in A["servers"]:
        if "windows" not in s:
            continue
        md.append(f"**{LABEL.get(s['name'], s['name'])}**"
                  + ("" if s.get("alive_after", True) else " — **the server exited during the run**")
                  + "\n")
        rows = []
        for w in s["windows"]:
            o, f = w["legit"]["others"], w["legit"]["flooded"]
            fl = [d for d in s["floods"] if d.get("phase") == w["name"] and "sent" in d]
            sent = sum(d["sent"] for d in fl)
            rep = sum(d["replies"] for d in fl)
            slip = sum(d["replies_tc"] for d in fl)
            dur = max((d["wall"] for d in fl), default=0) or 1
            rows.append([
                w["name"], pct(o["success"]), ms(o["p50_ms"], o["n"]), ms(o["p99_ms"], o["n"]),
                ms(o["p999_ms"], o["n"]), pct(f["success"], 1),
                f"{sent / dur:,.0f}/s" if fl else "",
                f"{pct(rep / sent, 1)} ({pct(slip / sent, 1)} TC)" if sent else "",
                pct(w["server_cpu"], 0), pct(w["cpu0_other"], 0)])
        md.append(table(["window", "legit answered (others)", "p50", "p99", "p99.9",
                         f"legit answered ({A['flooded']})", "attack sent", "attackers got a reply",
                         "server CPU", "CPU 0 other work"], rows) + "\n")
        kd = s.get("kernel_drops", {})
        if kd:
            md.append("Kernel receive-queue drops per address (whole run): "
                      + ", ".join(f"{ip.split('.')[-1]}: {v:,}" for ip, v in kd.items()) + ".")
        if s.get("dnsd_metrics"):
            md.append(" dnsd counters (whole run): " + ", ".join(
                f"`{k}` {v:,.0f}" for k, v in sorted(s["dnsd_metrics"].items())) + ".")
        md.append("\n")
    img = plot_attack_answered(A)
    if img:
        md.append(f"![attack packets answered]({img})\n")
    R = A.get("resolver")
    if R and R.get("servers"):
        md.append("### The resolver-relayed flood\n")
        md.append(
            f"One resolver address ({R['address']}) carries a random-subdomain flood "
            f"({R['flood_pps']:,.0f} q/s of `<random>.victim.test`) and its own users' ordinary "
            f"queries ({R['ordinary_rate']} q/s of existing names, no cookies, re-asked over TCP on "
            "TC=1 as resolvers do), then the ordinary queries alone. Every server fresh. A defence "
            "that blocks the resolver cuts its users off: the goal is 100 % answered, during and "
            "after, with no more reply bytes than attack bytes.\n")
        rows = []
        for s in R["servers"]:
            lab = LABEL.get(s["name"], s["name"])
            if "during" not in s:
                rows.append([lab, s.get("error", "failed"), "", "", "", ""])
                continue
            d, a = s["during"], s["after"]
            rows.append([lab, pct(d["ok"] / d["n"] if d["n"] else None, 2),
                         pct(a["ok"] / a["n"] if a["n"] else None, 2),
                         f"{s['attack_replies']:,} / {s['attack_sent']:,}",
                         f"{s.get('reply_bytes') or 0:,} / {s.get('attack_bytes') or 0:,}",
                         f"{(s.get('reply_bytes') or 0) / max(s.get('attack_bytes') or 1, 1):.3f}"])
        md.append(table(["server", "ordinary answered during", "after",
                         "attack packets that got a reply", "reply bytes / attack bytes",
                         "ratio"], rows) + "\n")
    md.append("<details><summary>Configurations used</summary>\n")
    for s in A["servers"]:
        if s.get("config"):
            md.append(f"{LABEL.get(s['name'], s['name'])}:\n\n```\n{s['config'].strip()}\n```\n")
    md.append("</details>\n")
    md.append(f"Command: `{A['command']}` ({A['machine']}; {A['when']}).\n")


# ---------------------------------------------------------------------------------------
# CPU per query


def qps_section(Q, md):
    md.append("## 2. CPU per query and queries per second\n")
    res = {r["name"]: r for r in Q["results"]}
    base = res.get("dnsd", {}).get("us_per_query")
    rows = []
    for r in Q["results"]:
        rows.append([LABEL.get(r["name"], r["name"]), f"{r['us_per_query']:.2f} µs{ratio(r['us_per_query'], base)}",
                     f"{r['qps']:,.0f}", f"{r['lost']:,}", pct(r["cpu_util"], 0),
                     pct(r.get("cpu0_other"), 0)])
    md.append(f"Server pinned to CPU 0, dnsperf on CPU 1 for {Q['seconds']} s after a 2 s warm-up "
              f"(query mix: {Q.get('query_mix', '10,000-name zone')}). One dnsperf process "
              "saturates near 100–150k q/s before the servers do, so the comparison is CPU time "
              "per answered query (from /proc schedstat of the server's process group); ratios "
              "are against dnsd. dnsd: " + Q.get("dnsd_note", "") + ".\n")
    md.append(table(["server", "CPU per answered query", "queries/s", "lost", "server CPU",
                     "CPU 0 other work"], rows) + "\n")
    fig, ax = plt.subplots(figsize=(7, 2.6))
    names = [r["name"] for r in Q["results"]]
    ax.barh([LABEL.get(n, n) for n in names], [res[n]["us_per_query"] for n in names],
            color=[COLOR.get(n, "#777") for n in names])
    ax.set_xlabel("CPU µs per answered query (lower is better)")
    ax.invert_yaxis()
    md.append(f"![CPU per query]({savefig(fig, 'qps.png')})\n")
    md.append(f"Command: `{Q.get('command', 'bench/scripts/dns_qps.py')}` ({Q['machine']}).\n")


def dnssec_section(D, md):
    md.append("## 2b. CPU per query with DO set, signed zone\n")
    res = {r["name"]: r for r in D["results"]}
    base = res.get("dnsd", {}).get("us_per_query")
    rows = [[LABEL.get(r["name"], r["name"]), f"{r['us_per_query']:.2f} µs{ratio(r['us_per_query'], base)}",
             f"{r['qps']:,.0f}", f"{r['lost']:,}"] for r in D["results"]]
    md.append(f"A zone of {D.get('names', 100000):,} names signed with NSEC3 (dnssec-signzone, "
              "ECDSA P-256, no salt, no extra iterations); dnsperf with DO (-D): 70% existing "
              "names (answer and RRSIG), 20% NXDOMAIN (SOA, RRSIG and three NSEC3 with their "
              f"RRSIGs), 10% NODATA; {D['seconds']} s after a 2 s warm-up, same pinning as above.\n")
    md.append(table(["server", "CPU per answered query", "queries/s", "lost"], rows) + "\n")
    md.append(f"Command: `bench/scripts/dnssec_qps.py {D['seconds']}` ({D['machine']}).\n")


def axfr_section(X, md):
    md.append("## 3b. Zone transfers, dnsd beside Knot DNS\n")
    r = X["ratios"]
    out = {x["name"]: x for x in X["axfr_out"]}
    inn = {x["name"]: x for x in X["transfer_in"]}
    d, k = out.get("dnsd"), out.get("knot")
    rows = []
    if d and k:
        rows.append(["AXFR out: wall time", f"{d['seconds']:.2f} s", f"{k['seconds']:.2f} s",
                     f"{r['axfr_out_time_dnsd_over_knot']:.2f}×"])
        rows.append(["AXFR out: server CPU", f"{d['server_cpu_s']:.3f} s", f"{k['server_cpu_s']:.3f} s",
                     f"{r['axfr_out_server_cpu_dnsd_over_knot']:.2f}×"])
        rows.append(["AXFR out: server peak RSS", f"{d['peak_rss_kib'] / 1024:.0f} MiB",
                     f"{k['peak_rss_kib'] / 1024:.0f} MiB", f"{r['axfr_out_peak_rss_dnsd_over_knot']:.2f}×"])
    d, k = inn.get("dnsd"), inn.get("knot")
    if d and k:
        rows.append(["as a secondary: spawn to zone served", f"{d['seconds']:.2f} s", f"{k['seconds']:.2f} s",
                     f"{r['transfer_in_time_dnsd_over_knot']:.2f}×"])
        rows.append(["as a secondary: peak RSS", f"{d['peak_rss_kib'] / 1024:.0f} MiB",
                     f"{k['peak_rss_kib'] / 1024:.0f} MiB", f"{r['transfer_in_peak_rss_dnsd_over_knot']:.2f}×"])
    md.append(f"A generated zone of {X['records']:,} records; AXFR out to `kdig` (median of "
              f"{X['axfr_out'][0].get('runs', 1)} runs), and in from a Knot primary. Ratios are "
              "dnsd / Knot: below 1, dnsd is faster or smaller.\n")
    md.append(table(["", "dnsd", "Knot DNS", "dnsd / Knot"], rows) + "\n")
    md.append(f"Command: `bench/scripts/axfr.py` ({X['machine']}).\n")


# ---------------------------------------------------------------------------------------
# Zone load


def zone_section(Z, md):
    md.append("## 3. Zone load: time and memory\n")
    md.append(f"A generated zone of {Z['records']:,} records ({Z.get('zone_mb')} MB of text: A, "
              f"AAAA, CNAME, delegations with glue); median of {Z['runs']} run(s); ratios against dnsd.\n")
    ck = Z.get("checkers", [])
    if ck:
        b = next((x for x in ck if x["name"] == "dnsd"), ck[0])
        rows = [[x["command"], f"{x['seconds']:.2f} s{ratio(x['seconds'], b['seconds'])}",
                 f"{x['max_rss_kib'] / 1024:.0f} MiB{ratio(x['max_rss_kib'], b['max_rss_kib'])}"]
                for x in ck]
        md.append("Checking the zone (parse and validate, `bench/zone-load`):\n")
        md.append(table(["checker", "wall time", "peak memory (max RSS)"], rows) + "\n")
    sv = Z.get("servers", [])
    for servers, title in ((sv, "Serving it (spawn until the zone's SOA is answered; memory "
                                "once it is):"),
                           (Z.get("servers_all_cores", []),
                            "The same, free to load on every core (Knot with as many "
                            "background workers and its semantic checks off):")):
        if not servers:
            continue
        b = next((x for x in servers if x["name"] == "dnsd"), servers[0])
        rows = [[LABEL.get(x["name"], x["name"]),
                 f"{x['seconds']:.2f} s{ratio(x['seconds'], b['seconds'])}",
                 f"{x['pss_kib'] / 1024:.0f} MiB{ratio(x['pss_kib'], b['pss_kib'])}"]
                for x in servers]
        md.append(title + "\n")
        md.append(table(["server", "start to first answer", "memory (PSS)"], rows) + "\n")
    if ck or sv:
        fig, axes = plt.subplots(1, 2, figsize=(10, 2.8))
        lab = [f"{x['name']} (check)" for x in ck] + [f"{LABEL.get(x['name'], x['name'])} (serve)" for x in sv]
        col = [COLOR.get(x["name"], "#888") for x in ck] + [COLOR.get(x["name"], "#888") for x in sv]
        axes[0].barh(lab, [x["seconds"] for x in ck] + [x["seconds"] for x in sv], color=col)
        axes[0].set_xlabel("seconds")
        axes[1].barh(lab, [x["max_rss_kib"] / 1024 for x in ck] + [x["pss_kib"] / 1024 for x in sv],
                     color=col)
        axes[1].set_xlabel("MiB (checkers: max RSS; servers: PSS)")
        for a in axes:
            a.invert_yaxis()
        axes[1].set_yticklabels([])
        md.append(f"![zone load]({savefig(fig, 'zone_load.png')})\n")
    md.append(f"Command: `{Z['command']}` ({Z['machine']}).\n")


def many_zones_section(M, md):
    md.append("## 10. Many zones\n")
    md.append(f"{M['zones']:,} small zones (11 records each); one query worker per server, loading "
              f"free to use every core (Knot with as many background workers); median of "
              f"{M['runs']} run(s); ratios against dnsd with one `[[zone]]` per zone.\n")
    sv = M.get("servers", [])
    b = next((x for x in sv if x["name"] == "dnsd"), sv[0] if sv else None)
    label = dict(LABEL, **{"dnsd": "dnsd (one [[zone]] each)", "dnsd-set": "dnsd ([[zone_set]] dir)"})

    def t(v, base):
        if v is None:
            return "n/a"
        return (f"{v * 1000:.1f} ms" if v < 1 else f"{v:.2f} s") + ratio(v, base)

    rows = [[label.get(x["name"], x["name"]), t(x["start_s"], b["start_s"]),
             f"{x['pss_kib'] / 1024:.0f} MiB{ratio(x['pss_kib'], b['pss_kib'])}",
             t(x.get("changed_s"), b.get("changed_s")), t(x.get("added_s"), b.get("added_s"))]
            for x in sv]
    md.append(table(["server", "start to the last zone's answer", "memory (PSS)",
                     "one changed zone, to its new serial", "one added zone, to its answer"], rows)
              + "\n")
    md.append("Telling the server: dnsd `ctl reload ZONE` / `ctl zone add`; Knot `knotc zone-reload` / "
              "`conf-begin`, `conf-set`, `conf-commit` (its configuration database); NSD "
              "`nsd-control reload ZONE` / `addzone` with a pattern.\n")
    if sv:
        fig, axes = plt.subplots(1, 2, figsize=(10, 2.4))
        lab = [label.get(x["name"], x["name"]) for x in sv]
        col = [COLOR.get(x["name"].split("-")[0], "#888") for x in sv]
        axes[0].barh(lab, [x["start_s"] for x in sv], color=col)
        axes[0].set_xlabel("seconds to the last zone's answer")
        axes[1].barh(lab, [x["pss_kib"] / 1024 for x in sv], color=col)
        axes[1].set_xlabel("MiB (PSS)")
        for a in axes:
            a.invert_yaxis()
        axes[1].set_yticklabels([])
        md.append(f"![many zones]({savefig(fig, 'many_zones.png')})\n")
    md.append(f"Command: `{M['command']}` ({M['machine']}).\n")


def signing_section(S, md):
    md.append("## 11. DNSSEC signing\n")
    sg = S.get("signers", [])
    b = next((x for x in sg if x["name"] == "dnsd"), None)
    md.append(f"The generated zone of section 4 ({S['records']:,} records), ECDSA P-256, one "
              f"combined key, NSEC, {S['cores']} cores free to use; median of {S['runs']} run(s). "
              "Servers: from spawn to the first answer with a DNSKEY (signed and served), memory "
              "(PSS) then; signers of files: wall time and peak RSS.\n")
    rows = [[x["command"], f"{x['seconds']:.2f} s" + (ratio(x["seconds"], b["seconds"]) if b else ""),
             f"{x['mem_kib'] / 1024:.0f} MiB {x['mem_kind']}"
             + (ratio(x["mem_kib"], b["mem_kib"]) if b else "")] for x in sg]
    md.append(table(["signer", "time", "memory"], rows) + "\n")
    fl = S.get("flood", [])
    if fl:
        md.append(f"A random-subdomain flood with DO from one address (dnsperf, {S['seconds']} s) "
                  "and beside it a client asking for existing names, against 100,000 names; "
                  "dnsd pinned to CPU 0, the random-subdomain defence off (it would block the "
                  "one flooding address). Compact denial signs within `[dnssec] "
                  "compact_denial_rate` per worker and `compact_denial_per_source` per /24, "
                  "past them TC=1.\n")
        base = next((x for x in fl if x["name"] == "pre-signed NSEC3"), None)
        rows = [[x["name"], f"{x['flood_qps']:,.0f}" + (ratio(x["flood_qps"], base["flood_qps"]) if base else ""),
                 f"{x['legit_qps']:,.0f}" + (ratio(x["legit_qps"], base["legit_qps"]) if base else ""),
                 f"{x['signed']:,}", f"{x['over_budget'] + x['over_source']:,}"] for x in fl]
        md.append(table(["dnsd denying with", "flood answers/s", "existing names answered/s",
                         "denials signed", "TC=1 past the budget"], rows) + "\n")
    md.append(f"Command: `{S['command']}` ({S['machine']}).\n")


# ---------------------------------------------------------------------------------------
# Isolation


def isolation_section(I, H, md):
    md.append("## 4. Isolation of 16,384 addresses under a flood\n")
    md.append(f"dnsd listens on 127.1.0.0/18: 16,384 UDP sockets (one per address) and one wildcard "
              f"TCP socket. A flood ("
              + (f"{I['flood_pps']:,.0f} packets/s" if I.get("flood_pps") else "as fast as one core sends")
              + f") hits {I['flooded']} alone while probes query random other addresses at "
              f"{I['probe_rate']} q/s and the flooded address at {I['flooded_probe_rate']} q/s (RRL off "
              f"everywhere: this measures the socket fleet). Open-file limit here: {I['nofile'][1]:,}.\n")
    rows = []
    for name, a in I.get("sixteen_k_attempts", {}).items():
        rows.append([LABEL.get(name, name), "started" if a["started"] else
                     "**cannot start**: " + a["error"].replace("|", "/")[:220]])
    if rows:
        md.append("NSD and Knot DNS with 16,384 addresses (each opens a UDP and a TCP socket per "
                  "address; Knot also caps its listen list):\n")
        md.append(table(["server", "16,384 addresses"], rows) + "\n")
        md.append("They are therefore measured with 4,096 addresses (127.1.0.0/20), the largest "
                  "round count both manage here.\n")
    rows = []
    for s in I["servers"]:
        if "windows" not in s:
            rows.append([LABEL.get(s["name"], s["name"]), f"{s['addresses']:,}", "failed: "
                         + s.get("error", "")[:100].replace("|", "/")] + [""] * 7)
            continue
        w = {x["name"]: x for x in s["windows"]}
        f = w["flood"]
        rows.append([LABEL.get(s["name"], s["name"]), f"{s['addresses']:,}",
                     f"{s['startup_s']:.2f} s", f"{s['pss_kib'] / 1024:.0f} MiB / {s['fds']:,}",
                     f"{s['flood']['sent'] / max(s['flood']['wall'], 1e-9):,.0f}/s",
                     pct(f["probe"]["success"]),
                     f"{ms(f['probe']['p50_ms'], f['probe']['n'])} / {ms(f['probe']['p99_ms'], f['probe']['n'])}",
                     f"{ms(w['before']['probe']['p50_ms'], 1)} / {ms(w['before']['probe']['p99_ms'], 1)}",
                     pct(f["flooded_probe"]["success"], 1),
                     f"{s['flooded_socket_drops']:,} / {s['other_sockets_drops']:,}"])
    md.append(table(["server", "addresses", "start-up (until the last answers)",
                     "memory (PSS) / descriptors", "flood received",
                     "probes to other addresses answered during the flood", "their p50 / p99",
                     "p50 / p99 before the flood", "probes to the flooded address answered",
                     "kernel drops: flooded socket / all others"], rows) + "\n")
    for s in I["servers"]:
        top = s.get("dnsd_kernel_drops_top")
        if top:
            md.append("dnsd's own view (`dnsd_udp_kernel_drops_top` in /metrics, during the run): "
                      + ", ".join(f"{k.split('=')[1].rstrip('}').strip(chr(34))}: {v:,.0f}"
                                  for k, v in top.items() if v) + ".\n")
    servers = [s for s in I["servers"] if "windows" in s]
    if servers:
        fig, ax = plt.subplots(figsize=(9, 2.8))
        wn = ["before", "flood", "after"]
        width = 0.8 / len(servers)
        for k, s in enumerate(servers):
            w = {x["name"]: x for x in s["windows"]}
            x = [i + (k - (len(servers) - 1) / 2) * width for i in range(3)]
            p99 = [w[n]["probe"]["p99_ms"] or 1000 for n in wn]
            p50 = [w[n]["probe"]["p50_ms"] or 1000 for n in wn]
            ax.bar(x, p99, width, color=COLOR.get(s["name"]), alpha=0.45,
                   label=f"{LABEL.get(s['name'])} ({s['addresses']:,} addr.) p99")
            ax.bar(x, p50, width, color=COLOR.get(s["name"]), label=f"{LABEL.get(s['name'])} p50")
        ax.set_xticks(range(3))
        ax.set_xticklabels(["before the flood", "during the flood", "after"])
        ax.set_yscale("log")
        ax.set_ylabel("probe latency (ms)\nother addresses")
        ax.legend(fontsize=7, ncol=3, loc="upper center", bbox_to_anchor=(0.5, -0.12),
                  frameon=False)
        md.append(f"![isolation]({savefig(fig, 'isolation.png')})\n")
    md.append(f"Command: `{I['command']}` ({I['machine']}).\n")
    md.append("### TCP listener hash: 16,384 specific listeners versus one wildcard\n")
    if not H or "cases" not in H:
        md.append("Not measured" + (f": {H.get('error')}" if H else "") + ".\n")
        return
    cases = {x["name"]: x for x in H["cases"]}
    base = cases.get("single", {}).get("p50_us")
    rows = [[{"specific": "16,384 listeners on specific addresses, one port",
              "wildcard": "one wildcard listener (0.0.0.0)",
              "single": "one listener on one address (floor)"}[x["name"]],
             f"{x['p50_us']:.1f} µs{ratio(x['p50_us'], base)}", f"{x['p99_us']:.1f} µs",
             f"{x['mean_us']:.1f} µs", f"{x['bind_ms']:.0f} ms", f"{x['connects']:,}"]
            for x in H["cases"]]
    md.append(f"connect() on loopback (SYN → SYN-ACK → ACK complete inside the call), kernel "
              f"{H['kernel']}:\n")
    md.append(table(["listeners", "connect p50", "p99", "mean", "time to bind all", "connects"], rows) + "\n")
    sp, wc = cases.get("specific"), cases.get("wildcard")
    if sp and wc:
        verdict = ("no pile-up: this kernel finds the listener by address and port (the lhash2 "
                   "table), so 16,384 specific listeners on one port cost no more per SYN than "
                   "one wildcard" if sp["p50_us"] < 1.5 * wc["p50_us"] else
                   "a pile-up: SYNs to a port with 16,384 specific listeners are slower than to "
                   "one wildcard listener")
        md.append(f"Verdict: {verdict} (p50 {sp['p50_us'] / wc['p50_us']:.2f}x of the wildcard). "
                  "dnsd keeps one wildcard TCP socket anyway: it also saves 16,383 descriptors, and "
                  "older kernels hashed listeners by port alone.\n")
    md.append(f"Command: `{H['command']}`.\n")


# ---------------------------------------------------------------------------------------
# HTTP front


def scalar(v):
    if isinstance(v, float):
        return f"{v:,.3f}" if abs(v) < 100 else f"{v:,.0f}"
    if isinstance(v, (int, str, bool)) or v is None:
        return str(v)
    return None


def http_section(W, md):
    md.append("## 5. HTTP front versus nginx\n")
    if W is None:
        md.append("Not measured in this run: bench/report/raw/http_front.json does not exist "
                  "(bench/scripts/http_front.py writes it; `bench/run http` runs it when present).\n")
        return
    if W.get("layout"):
        md.append(f"Layout: {W['layout']}"
                  + (f"; {W['seconds']} s per case" if W.get("seconds") else "")
                  + (f", {W['connections']} connections" if W.get("connections") else "") + ".\n")
    if W.get("summary_md"):
        md.append(W["summary_md"].strip() + "\n")
    results = W.get("results")
    if isinstance(results, dict):
        results = [dict({"name": k}, **v) for k, v in results.items() if isinstance(v, dict)]
    if isinstance(results, list) and results and isinstance(results[0], dict):
        keys = []
        for r in results:
            for k, v in r.items():
                if k not in keys and scalar(v) is not None:
                    keys.append(k)
        keys = ["name"] + [k for k in keys if k != "name"]
        md.append(table(keys, [[scalar(r.get(k)) or "" for k in keys] for r in results]) + "\n")
        W_r = {r["name"]: r for r in results}
        if "nginx" in W_r and any(n.startswith("front") for n in W_r):
            fig, ax = plt.subplots(figsize=(8, 2.6))
            names = [n for n in W_r if W_r[n].get("us_per_event") is not None]
            ax.barh(names, [W_r[n]["us_per_event"] for n in names],
                    color=["#1b7837" if n.startswith("front") else "#999999" for n in names])
            ax.set_xlabel("proxy CPU µs per request (front-blocked: per blocked connection)")
            ax.invert_yaxis()
            md.append(f"![http front]({savefig(fig, 'http_front.png')})\n")
    elif not W.get("summary_md"):
        flat = [[k, scalar(v)] for k, v in W.items() if scalar(v) is not None]
        md.append(table(["key", "value"], flat) + "\n")
    if isinstance(W.get("ratios"), dict):
        md.append(table(["ratio", "value"], [[k, f"{v:.3f}"] for k, v in W["ratios"].items()
                                             if isinstance(v, (int, float))]) + "\n")
    for img in W.get("plots", []):
        if os.path.exists(os.path.join(OUT, img)):
            md.append(f"![{img}]({img})\n")
    cmd = W.get("command") or W.get("wrk")
    if cmd:
        md.append(f"Command: `{cmd}`" + (f" ({W['machine']})" if W.get("machine") else "") + ".\n")


# ---------------------------------------------------------------------------------------
# XDP on a veth


def fns(v):
    return "n/a" if v is None else f"{v:,.0f} ns"


def xr(v):
    return "" if v is None else f" ({v:.2f}x)"


def plot_xdp(V):
    res = [r for r in V.get("results", []) if r["name"] != "floor"]
    if not res:
        return None
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(11, 0.45 * len(res) + 1.2))
    labels = [r["id"] for r in res]
    col = ["#1b7837" if r["name"].startswith("xdp") else "#2166ac" for r in res]
    ax1.barh(labels, [r["max"]["dropped_pps"] / 1e6 for r in res], color=col)
    ax1.set_xlabel("packets dropped/s at full speed (millions; higher is better)")
    ax1.invert_yaxis()
    vals = [r["fixed"].get("rx_ns_per_packet") for r in res]
    key = "receiving CPU ns per packet"
    if any(v is None for v in vals):
        vals = [r["fixed"]["cpu_ns_per_packet"] for r in res]
        key = "CPU ns per packet, sending + receiving"
    ax2.barh(labels, [v or 0 for v in vals], color=col)
    ax2.set_xlabel(f"{key} at {V['fixed_pps']:,.0f}/s (lower is better)")
    ax2.invert_yaxis()
    ax2.set_yticklabels([])
    fig.tight_layout()
    return savefig(fig, "xdp_veth.png")


def xdp_section(V, md):
    md.append("## 6. XDP guard on a veth versus the kernel dropping the same traffic\n")
    md.append(
        "Two network namespaces made by the script, joined by a veth pair (one queue per CPU). "
        "dnsd runs in the receiving one (UDP 192.0.2.2:53, one worker) with the sending source "
        "192.0.2.10 in its block map; every packet of the flood comes from that source, so every "
        "packet should be dropped. The cases: dnsd's `[xdp]` guard in native (driver) or generic "
        "mode, or no XDP and an nftables rule `ip saddr @blocked drop` at the netdev ingress "
        "hook, at prerouting with raw priority (the reference: the earliest IP-level hook, "
        "before conntrack) or at input. Two traffic sources, one sender per CPU: **skb**, "
        "AF_PACKET sendmmsg with the qdisc bypassed (as the host's own stack or a container "
        "puts packets on a veth; native XDP on the peer must first copy each skb into an XDP "
        "buffer), and **xdp**, XDP frames redirected into the veth by a BPF_PROG_TEST_RUN "
        "live-frames generator (as a NIC driver hands frames to native XDP: no skb; without "
        "XDP the veth has GRO on and builds skbs in its NAPI poll, as a NIC driver does). On a "
        "veth the receiving work runs as softirq on the CPU that sent the packet, so both cores "
        "send and receive.\n")
    md.append(
        f"Per case, {V['seconds']:g} s at full speed (packets offered and dropped per second at "
        f"the drop point: XDP's `drop_blocked_addr` counter, or the nft rule's counter; "
        f"\"lost\" is offered minus dropped there, over the whole window) and {V['seconds']:g} s "
        f"at {V['fixed_pps']:,.0f} packets/s for every case (CPU per packet at equal load). "
        "CPU per packet is the senders' own CPU time (CLOCK_PROCESS_CPUTIME_ID, which includes "
        "the receiving softirq work that runs in their context) plus ksoftirqd's, per packet "
        "sent; for the xdp source the generator's floor (the same generator with nothing "
        "receiving: the veth refuses each frame) is subtracted to give the **receiving** cost. "
        "The softirq column is the brief's cruder measure: softirq ticks of both CPUs from "
        "/proc/stat (250 Hz sampling) minus the rate just before, per dropped packet. It is "
        "coarse and misses work (native XDP on XDP frames gets next to no softirq ticks although "
        "the CPU method shows its ~100+ ns per packet), and other engineers' softirq load adds "
        "noise; read it as a cross-check only. Ratios are "
        f"against {V['reference']} of the same source, measured in the same run.\n")
    rows = []
    for r in V.get("results", []):
        m, f = r["max"], r["fixed"]
        rows.append([
            r["id"], r["note"], f"{m['offered_pps']:,.0f}",
            f"{m['dropped_pps']:,.0f}{xr(m.get('dropped_pps_vs_ref'))}", f"{m['lost_elsewhere']:,}",
            f"{fns(f['cpu_ns_per_packet'])}{xr(f.get('cpu_per_packet_vs_ref'))}",
            f"{fns(f.get('rx_ns_per_packet'))}{xr(f.get('rx_ns_vs_ref'))}",
            f"{fns(m.get('rx_ns_per_packet'))}{xr(m.get('rx_ns_vs_ref'))}",
            "—" if r["name"] == "floor" else fns(f["softirq_ns_per_drop"]),
            f"{f.get('other_work_cpus', 0):.2f}"])
    md.append(table(["source/case", "drop point", "offered/s (full speed)",
                     "dropped/s (full speed)", "lost elsewhere",
                     f"CPU/packet at {V['fixed_pps']:,.0f}/s", "receiving CPU/packet",
                     "receiving CPU/packet (full speed)", "softirq ticks/drop",
                     "other work (CPUs)"], rows) + "\n")
    if V.get("ratios"):
        md.append(table(["XDP / kernel (same run)", "ratio"],
                        [[k, "n/a" if v is None else f"{v:.2f}x"] for k, v in V["ratios"].items()])
                  + "\n")
    for k, e in (V.get("errors") or {}).items():
        md.append(f"- {k} failed: `{e[-200:]}`\n")
    img = plot_xdp(V)
    if img:
        md.append(f"![XDP on a veth]({img})\n")
    B = V.get("burst")
    if B and "error" not in B:
        md.append(
            f"**Burst into the kernel maps while both cores are busy.** During an XDP-frame flood "
            f"at full speed ({B['flood_offered_pps']:,.0f} packets/s offered, "
            f"{B['flood_dropped_pps_during']:,.0f}/s dropped by XDP meanwhile), `dnsd ctl block "
            f"import` of {B['entries']:,} unique addresses (198.18.0.0/15): the control reply "
            f"came after {B['ctl_import_ms']:.0f} ms (all in dnsd's block map); the XDP mirror "
            f"had written the first entries after "
            f"{'n/a' if B.get('first_in_kernel_ms') is None else format(B['first_in_kernel_ms'], '.0f')} ms "
            f"and **all {B['entries']:,} after "
            f"{'n/a (not within 30 s)' if B['all_in_kernel_ms'] is None else format(B['all_in_kernel_ms'], '.0f') + ' ms'}** "
            f"(`xdp.mirror.upserted` polled every ~2 ms over the control socket; mirror during the "
            f"burst: {', '.join(f'{k.split(chr(46))[-1]} {v:,}' for k, v in B['mirror_delta'].items())}). "
            f"Then, flood stopped, one packet from each address: **{B['verify_dropped_blocked']:,} "
            f"of {B['verify_sent']:,} dropped by XDP as blocked addresses, {B['lost']:,} lost** "
            f"(XDP passed {B['verify_passed']} other packet(s) meanwhile; with all 100,000 "
            "counted as dropped, none of them came from the burst's addresses).\n")
        if B["mirror_delta"].get("xdp.mirror.resyncs"):
            md.append("The import is larger than the block map's change feed (`[block] "
                      "feed_capacity`, 65,536 by default): the mirror fell behind and rebuilt "
                      "the kernel maps from a snapshot (a resync, counted), which is how it "
                      "still lost nothing.\n")
    elif B:
        md.append(f"Burst into the kernel maps: failed (`{B['error'][-200:]}`).\n")
    md.append(f"Machine: {V['machine']}; other work on it before the run: "
              f"{V.get('other_work_before_cpus', 0):.2f} CPUs of {V['cores']}. Command: "
              f"`{V['command']}`" + (" (quick)" if V.get("quick") else "") + ".\n")


# ---------------------------------------------------------------------------------------
# Redis propagation


def plot_redis(R):
    phases = [p for p in R.get("phases", []) if p.get("samples")]
    if not phases:
        return None
    fig, ax = plt.subplots(figsize=(8, 2.8))
    for p, col in zip(phases, ("#999999", "#1b7837")):
        lat = sorted(x["latency_ms"] for x in p["samples"] if "latency_ms" in x)
        if lat:
            ax.plot(lat, [(i + 1) / len(lat) for i in range(len(lat))], color=col, lw=1.8,
                    label=f"{p['name']} (p50 {ms(p['p50_ms'])}, p99 {ms(p['p99_ms'])})")
    ax.set_xscale("log")
    ax.set_xlabel("ms from the decision sent to A until B stops answering the source")
    ax.set_ylabel("share of decisions")
    ax.set_ylim(0, 1.02)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8, loc="lower right")
    return savefig(fig, "redis_sync.png")


def redis_section(R, md):
    md.append("## 7. Block propagation through Redis\n")
    md.append(
        "Two dnsd processes on loopback share one redis-server started by the script "
        f"({R.get('redis', 'redis-server').split(' sha=')[0]}, no persistence) through `[redis]`: "
        "A on 127.0.2.1 pinned to CPU 0, B on 127.0.2.2 pinned to CPU 1, one worker each, RRL "
        "off. For each decision a fresh source 127.9.x.y queries B every "
        f"{R['probe_every_ms']:g} ms until B answers it; then `block add` for that source is "
        "sent to A's control socket (from another thread: the probes keep their pace) and the "
        f"probes go on until B has not answered the source for {R['quiet_ms']:g} ms. The "
        "latency is the send time of the first probe B no longer answered minus the moment the "
        f"decision was sent to A ({R['probe_every_ms']:g} ms resolution: an upper bound; the "
        "send time of the last probe B answered is the lower bound, also given); a "
        f"decision not enforced on B within {R['give_up_s']:g} s counts as not propagated. "
        "**idle**: nothing else of ours running (the reference); **loaded**: dnsperf floods A "
        "from CPU 1 and B from CPU 0 as fast as each goes, so both cores are busy answering "
        "queries. \"Other work\" is both CPUs' busy time not spent by this benchmark's "
        "processes (other engineers' builds and fuzzers share these cores).\n")
    rows = []
    for p in R.get("phases", []):
        dp = p.get("dnsperf") or {}
        rows.append([
            p["name"], f"{p['propagated']}/{p['decisions']}", ms(p["p50_ms"]), ms(p["p99_ms"]),
            ms(p["max_ms"]),
            f"{ms(p.get('lower_p50_ms'))} / {ms(p.get('lower_p99_ms'))}",
            ms(p["ctl_p50_ms"]),
            ", ".join(f"{k} {v['qps']:,.0f}" for k, v in dp.items() if v.get("qps")) or "none",
            " / ".join(f"{float(v) * 100:.0f} %" for v in p["cpu_busy"].values()),
            f"{p['process_cpu'].get('dnsd_A', 0) * 100:.0f} % / "
            f"{p['process_cpu'].get('dnsd_B', 0) * 100:.0f} %",
            f"{p.get('other_work_cpus', 0):.2f}"])
    md.append(table(["phase", "propagated", "p50", "p99", "max",
                     "lower bound p50 / p99 (last probe answered)", "A's control reply p50",
                     "queries/s answered (dnsperf)", "CPU 0 / CPU 1 busy", "dnsd A / B CPU",
                     "other work (CPUs)"], rows) + "\n")
    if R.get("ratios"):
        md.append("Loaded / idle (same run): " + ", ".join(
            f"{k.split()[0]} {v:.2f}x" for k, v in R["ratios"].items()) + ".\n")
    img = plot_redis(R)
    if img:
        md.append(f"![Redis propagation]({img})\n")
    md.append(f"Machine: {R['machine']}. Command: `{R['command']}`"
              + (" (quick)" if R.get("quick") else "") + ".\n")


# ---------------------------------------------------------------------------------------
# The node-wide block map


def xdp_answers_section(XA, md):
    md.append("## 9. The XDP answer fast path\n")
    label = {"dnsd-xdp": "dnsd, XDP answers", "dnsd": "dnsd", "knot-xdp": "Knot DNS 3.2, XDP mode",
             "knot": "Knot DNS 3.2", "nsd": "NSD 4.6"}
    floors = ("floor", "reflect")
    runs = XA.get("runs") or [XA["results"]]
    first = {r["case"]: r for r in XA["results"]}
    cases = [r["case"] for r in runs[0] if r["case"] not in floors]

    def med(v):
        v = sorted(x for x in v if x == x)
        return v[len(v) // 2] if len(v) % 2 else (v[len(v) // 2 - 1] + v[len(v) // 2]) / 2 if v \
            else float("nan")

    per = {k: [r["ns_per_answer"] for rs in runs for r in rs if r["case"] == k] for k in cases}
    from xdp_answers import own_costs
    own = {k: [] for k in cases}
    for rs in runs:
        for k, o in own_costs(rs).items():
            own[k].append(o)
    base = med(per["dnsd"]) if "dnsd" in per else None
    rows = []
    for k in cases:
        r = first.get(k, {})
        t = r.get("attack") or {}
        lg = t.get("legit")
        m = med(per[k])
        rows.append([label.get(k, k),
                     pct(r["answered"] / max(r["sent"], 1), 1) if r else "n/a",
                     f"{m:,.0f} ns ({min(per[k]):,.0f}–{max(per[k]):,.0f}){ratio(m, base)}",
                     f"{med(own[k]):,.0f} ns" if own[k] else "n/a",
                     pct(t["answered"] / max(t["sent"], 1), 1) if t else "n/a",
                     pct(lg["answered"] / max(lg["sent"], 1), 1) if lg else "n/a",
                     f"{lg['p50_ms']:.2f} / {lg['p99_ms']:.2f} ms" if lg else "n/a"])
    md.append(f"kxdpgun at {XA['qps']:,} q/s for {XA['seconds']} s from one source on CPU 1 of a "
              "veth between two namespaces, the server pinned to CPU 0, every case "
              f"{len(runs)} times interleaved (median and range); CPU per answer is both cores' "
              "busy time (wall minus idle) per answer, the generator's own work included in "
              "every case; own cost is that minus the same run's reflector (an XDP program "
              "sending each query straight back). Then a flood of valid queries from 65,536 "
              "sources, and beside it a legitimate client on a second veth (one query every "
              "5 ms, 500 ms timeout; its queries take every server's kernel path). Command: "
              f"`{XA.get('command', 'bench/scripts/xdp_answers.py')}` ({XA['machine']}).\n")
    md.append(table(["server", "answered", "CPU per answer", "own cost", "flood: answered",
                     "flood: legitimate answered", "legitimate p50 / p99"], rows) + "\n")
    if XA.get("test_run"):
        md.append("The program alone (BPF_PROG_TEST_RUN, no veth):\n\n```\n"
                  + XA["test_run"] + "\n```\n")
    fig, ax = plt.subplots(figsize=(7, 2.6))
    ax.barh([label.get(k, k) for k in cases], [med(per[k]) for k in cases],
            xerr=[[med(per[k]) - min(per[k]) for k in cases],
                  [max(per[k]) - med(per[k]) for k in cases]],
            color=["#1b7837" if k.startswith("dnsd") else "#999999" for k in cases])
    ax.set_xlabel("ns of CPU per answer, both cores (median, range; lower is better)")
    ax.invert_yaxis()
    md.append(f"![CPU per answer]({savefig(fig, 'xdp_answers.png')})\n")


def node_section(N, md):
    md.append("## 8. One block map for the node and the fleet\n")
    md.append(
        "http-front on node A (127.0.2.1, CPU 0) and dnsd on node B (127.0.2.2, CPU 1) share "
        "one redis-server through `[redis]`; A's site denies 127.9.0.0/16 and escalates a "
        "source's first deny into a block. For each decision a fresh source queries B every "
        "millisecond until answered, then sends one HTTP request to A (denied and escalated: the "
        "decision) while the probes go on; the latency runs from that request to the first "
        "probe B no longer answers (as in section 7). **loaded**: dnsperf floods B and wrk "
        "drives A at once; **idle, dnsd A**: no load, the decision made by a dnsd on A "
        "(`ctl block add`, the Redis path alone), the reference for what deciding at "
        "http-front adds. Then 100,000 addresses imported at http-front A "
        "(`http-front ctl block import`) are counted live in "
        f"{N.get('imports', {}).get('counted_in', 'B')} until all are there (xdp-guard attached "
        "for the run; dnsd B mirrors into its slot), against the same import made on B itself.\n")
    rows = []
    for p in N.get("phases", []):
        rows.append([p["name"], f"{p['propagated']}/{p['decisions']}", ms(p["p50_ms"]),
                     ms(p["p99_ms"]), ms(p["max_ms"]),
                     " / ".join(f"{float(v) * 100:.0f} %" for v in p["cpu_busy"].values())])
    md.append(table(["phase", "propagated", "p50", "p99", "max", "CPU 0 / CPU 1 busy"], rows)
              + "\n")
    rows = []
    for k, label in (("via_front", "at http-front A, through Redis"),
                     ("local_b", "at dnsd B itself (reference)")):
        i = N.get("imports", {}).get(k)
        if i:
            rows.append([label, f"{i['arrived']:,}", f"{i['lost']:,}", f"{i['seconds']:.2f} s",
                         f"{i['ctl_seconds']:.2f} s"])
    if rows:
        md.append(table(["100,000 imported", "arrived", "lost", "all live after",
                         "import call"], rows) + "\n")
    if N.get("ratios"):
        md.append("Ratios (same run): " + "; ".join(
            f"{k} {v:.2f}x" for k, v in N["ratios"].items()) + ".\n")
    md.append(f"Machine: {N['machine']}. Command: `{N['command']}`"
              + (" (quick)" if N.get("quick") else "") + ".\n")


# ---------------------------------------------------------------------------------------
# Summary


def summary(A, Q, Z, I, md):
    names = ["dnsd", "nsd", "knot"]
    head = ["", *[LABEL[n] for n in names]]
    rows = []
    if A:
        S = {s["name"]: s for s in A["servers"]}
        p99s = {n: S[n]["attack"]["others"]["p99_ms"] for n in names if n in S and "attack" in S[n]}
        best = min((v for v in p99s.values() if v is not None), default=None)
        r1, r2, r3, r4 = (["under attack: legitimate queries answered (7 addresses not flooded directly)"],
                          ["under attack: legitimate p50 / p99 / p99.9 (lost = 1 s)"],
                          ["under attack: legitimate answered on the flooded address"],
                          ["attack packets that got a reply (TC slips)"])
        for n in names:
            s = S.get(n)
            if not s or "attack" not in s:
                for r in (r1, r2, r3, r4):
                    r.append("failed" if s else "not run")
                continue
            o = s["attack"]["others"]
            r1.append(("**" if o["success"] == 1 else "") + pct(o["success"]) + ("**" if o["success"] == 1 else ""))
            r2.append(f"{ms(o['p50_ms'], o['n'])} / {ms(o['p99_ms'], o['n'])}{ratio(o['p99_ms'], best)} / "
                      f"{ms(o['p999_ms'], o['n'])}")
            r3.append(pct(s["attack"]["flooded"]["success"], 1))
            fl = [f for f in s["floods"] if "sent" in f]
            sent = sum(f["sent"] for f in fl) or 1
            r4.append(f"{pct(sum(f['replies'] for f in fl) / sent, 1)} "
                      f"({pct(sum(f['replies_tc'] for f in fl) / sent, 1)})")
        rows += [r1, r2, r3, r4]
    if Q:
        R = {r["name"]: r for r in Q["results"]}
        b = R.get("dnsd", {}).get("us_per_query")
        rows.append(["CPU per answered query, RRL off (ratio to dnsd)"] +
                    [f"{R[n]['us_per_query']:.2f} µs{ratio(R[n]['us_per_query'], b)}" if n in R else "n/a"
                     for n in names])
    if Z and Z.get("servers"):
        R = {r["name"]: r for r in Z["servers"]}
        b = R.get("dnsd", {})
        rows.append([f"zone of {Z['records']:,} records: start to first answer"] +
                    [f"{R[n]['seconds']:.2f} s{ratio(R[n]['seconds'], b.get('seconds'))}" if n in R else "n/a"
                     for n in names])
        rows.append(["… and memory (PSS)"] +
                    [f"{R[n]['pss_kib'] / 1024:.0f} MiB{ratio(R[n]['pss_kib'], b.get('pss_kib'))}" if n in R else "n/a"
                     for n in names])
    if I:
        R = {r["name"]: r for r in I["servers"]}
        att = I.get("sixteen_k_attempts", {})
        row = ["start-up with 16,384 addresses"]
        row2 = ["flood on one address: probes to the others answered, p99"]
        for n in names:
            s = R.get(n)
            if n in att and not att[n]["started"]:
                why = "config refused" if "config" in att[n].get("error", "") else "fd limit"
                row.append(f"cannot start here ({why}); {s['addresses']:,} addr.: "
                           f"{s['startup_s']:.2f} s" if s and "startup_s" in s
                           else f"cannot start here ({why})")
            elif s and "startup_s" in s:
                row.append(f"{s['startup_s']:.2f} s")
            else:
                row.append("n/a")
            if s and "windows" in s:
                f = next(w for w in s["windows"] if w["name"] == "flood")
                row2.append(f"{pct(f['probe']['success'])}, {ms(f['probe']['p99_ms'], f['probe']['n'])} "
                            f"({s['addresses']:,} addr.)")
            else:
                row2.append("n/a")
        rows += [row, row2]
    if rows:
        md.append(table(head, rows) + "\n")


def noise(A, I, limit=0.25):
    """A phrase saying how other work on the shared cores may have disturbed the run: in
    the normal scheduling class, windows where it took more than `limit` of CPU 0; in any
    mode, floods that fell short of their set rate (CPU 1 was busy)."""
    bad, short = [], []
    for D in (A, I):
        D = D or {}
        fifo = "SCHED_FIFO" in D.get("sched", "")
        for s in D.get("servers", []):
            for w in s.get("windows", []):
                o = w.get("cpu0_other")
                if not fifo and o is not None and o > limit:
                    bad.append((o, f"{LABEL.get(s['name'], s['name'])} / {w['name']}"))
            fl = s.get("floods") or ([dict(s["flood"], rate=D.get("flood_pps", 0))]
                                     if s.get("flood") else [])
            for f in fl:
                if f.get("rate") and f.get("wall") and f["sent"] / f["wall"] < 0.95 * f["rate"]:
                    short.append(f"{LABEL.get(s['name'], s['name'])} / {f.get('phase', 'flood')} "
                                 f"{f['sent'] / f['wall']:,.0f} of {f['rate']:,.0f} packets/s")
    out = []
    if bad:
        bad.sort(reverse=True)
        out.append(f"other work took more than {limit:.0%} of CPU 0 in {len(bad)} measurement "
                   "windows (worst: " + ", ".join(f"{n} {o:.0%}" for o, n in bad[:3]) + ")")
    if short:
        out.append(f"{len(short)} floods fell short of their rate (" + "; ".join(short[:3]) + ")")
    return "; ".join(out)


def main():
    os.makedirs(OUT, exist_ok=True)
    A, Q, Z, I, H, W = (load(n) for n in ("attack", "dns_qps", "zone_load", "isolation",
                                          "listen_hash", "http_front"))
    D = load("dnssec_qps")
    X = load("axfr")
    V = load("xdp_veth")
    R = load("redis_sync")
    N = load("node_blocks")
    XA = load("xdp_answers")
    MZ = load("many_zones")
    SG = load("signing")
    md = ["# Palisade benchmark report\n"]
    machine = next((x["machine"] for x in (A, Q, Z, I) if x and x.get("machine")), c.machine())
    quick = any(x.get("quick") for x in (A, I) if x)
    md.append(f"Generated {time.strftime('%Y-%m-%d %H:%M')} from bench/report/raw/*.json by "
              f"`bench/run` on {machine}. Servers run pinned to CPU 0 with one worker each, load "
              "generators on CPU 1 (loopback only). Speed is given as ratios between servers "
              "measured in the same run; the cores are shared with other work, whose share of "
              "CPU 0 each table reports. Scheduling: "
              + next((x["sched"] for x in (A, Q, Z, I) if x and x.get("sched")), "default") + "."
              + (" **Quick mode: short durations, figures are indicative.**" if quick else "") + "\n")
    noisy = noise(A, I)
    if noisy:
        md.append("**Disturbed run:** " + noisy + " — rerun when the machine is quieter "
                  "before quoting these figures.\n")
    md.append("## Summary\n")
    summary(A, Q, Z, I, md)
    extra = []
    if V and V.get("ratios"):
        x = {r["id"]: r for r in V.get("results", [])}
        for g in ("xdp", "skb"):
            xn, ref = x.get(f"{g}/xdp-native"), x.get(f"{g}/{V['reference']}")
            if xn and ref:
                rx = xn["fixed"].get("rx_ns_vs_ref")
                extra.append(
                    f"- XDP on a veth ({g} source): dnsd's XDP guard dropped "
                    f"{xn['max']['dropped_pps']:,.0f} packets/s against {ref['max']['dropped_pps']:,.0f}/s "
                    f"for nftables at raw prerouting ({xn['max']['dropped_pps_vs_ref']:.2f}x)"
                    + (f"; receiving CPU per packet {rx:.2f}x the kernel's" if rx is not None else
                       f"; CPU per packet, sending + receiving, "
                       f"{xn['fixed']['cpu_per_packet_vs_ref']:.2f}x the kernel's")
                    + " (section 6).")
        B = V.get("burst") or {}
        if B.get("all_in_kernel_ms") is not None:
            extra.append(f"- 100,000 addresses imported during a flood: all in the XDP maps after "
                         f"{B['all_in_kernel_ms']:.0f} ms, {B['lost']:,} lost (section 6).")
    if R and R.get("phases"):
        P = {p["name"]: p for p in R["phases"]}
        if "loaded" in P and "idle" in P:
            extra.append(f"- Block propagation A → Redis → B with both cores busy: p50 "
                         f"{ms(P['loaded']['p50_ms'])}, p99 {ms(P['loaded']['p99_ms'])}, max "
                         f"{ms(P['loaded']['max_ms'])} (idle: p50 {ms(P['idle']['p50_ms'])}, p99 "
                         f"{ms(P['idle']['p99_ms'])}); section 7.")
    if N and N.get("phases"):
        P = {p["name"]: p for p in N["phases"]}
        if "loaded" in P:
            i = N.get("imports", {}).get("via_front", {})
            extra.append(f"- A block decided by http-front on A enforced by dnsd on B with both "
                         f"cores busy: p50 {ms(P['loaded']['p50_ms'])}, p99 "
                         f"{ms(P['loaded']['p99_ms'])}"
                         + (f"; 100,000 imported at http-front all live in "
                            f"{N['imports'].get('counted_in')} after {i['seconds']:.2f} s, "
                            f"{i['lost']:,} lost" if i else "") + " (section 8).")
    if extra:
        md.append("\n".join(extra) + "\n")
    if A:
        img = plot_attack(A)
        if img:
            md.append(f"![legitimate latency under attack]({img})\n")
    else:
        md.append("(The attack benchmark has not been run: `bench/run attack`.)\n")
    sections = [(A, lambda: attack_section(A, md), "attack"),
                (Q, lambda: qps_section(Q, md), "qps"),
                (D, lambda: dnssec_section(D, md), "dnssec"),
                (Z, lambda: zone_section(Z, md), "zone"),
                (X, lambda: axfr_section(X, md), "axfr"),
                (I, lambda: isolation_section(I, H, md), "isolation")]
    for data, fn, part in sections:
        if data:
            fn()
        else:
            md.append(f"## ({part}: not run — `bench/run {part}`)\n")
    http_section(W, md)
    for data, fn, part in ((V, lambda: xdp_section(V, md), "xdp"),
                           (R, lambda: redis_section(R, md), "redis"),
                           (N, lambda: node_section(N, md), "node"),
                           (XA, lambda: xdp_answers_section(XA, md), "xdp-answers"),
                           (MZ, lambda: many_zones_section(MZ, md), "many-zones"),
                           (SG, lambda: signing_section(SG, md), "signing")):
        if data:
            fn()
        else:
            md.append(f"## ({part}: not run — `bench/run {part}`)\n")
    md.append("## Reproduce\n")
    md.append("`bench/run` (everything, ~10 min) or `bench/run --quick`; a subset: "
              "`bench/run qps attack`; the report alone: `bench/run report`. See bench/README.md.\n")
    with open(os.path.join(OUT, "REPORT.md"), "w") as f:
        f.write("\n".join(md))
    c.log(f"wrote {os.path.join(OUT, 'REPORT.md')}")


if __name__ == "__main__":
    main()
