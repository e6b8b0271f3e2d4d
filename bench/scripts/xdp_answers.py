#!/usr/bin/env python3
"""The XDP answer fast path (issue 20, 35): CPU per answer at one offered rate, for dnsd with
the fast path, dnsd without it, Knot DNS with and without its XDP mode, and NSD, every case
--runs times (5 by default), interleaved, with the median and range of each.

Two namespaces made here (deleted at the end, also on error or Ctrl-C) are joined by a veth
pair (the setup of xdp_veth.py: 192.0.2.1 sends, 192.0.2.2 answers; nothing leaves them).
The load is `kxdpgun` (Knot's XDP query generator, knot-dnsutils) in the sending namespace,
pinned to CPU 1, at a fixed rate; each server runs in the receiving namespace pinned to CPU 0.
On a veth the receiving side's softirq work runs on the sender's CPU, so the comparison is the
busy time of both cores per answer received, the generator's own work included in every case
(so the ratios understate the differences between servers). Busy time is wall time minus idle
time (common.busy_seconds): /proc/stat's busy fields are sampled at the 250 Hz tick on this
kernel, and a generator pacing its bursts aliases with the tick — the "two modes" earlier
runs saw. The reflector case (an XDP program that sends each query back as its reply, no DNS
work) is the generator and the veth with replies to read: a server's own cost is its busy
time minus the reflector's in the same run, per answer.

Then the flood (first run only): kxdpgun from 65,536 sources (198.18.0.0/16, `-l`; RRL per
source cannot stop it) at --attack-qps, a rate no kernel-path server here sustains: the share
answered per server, and beside it a legitimate client — one query at a time, every 5 ms,
500 ms timeout — over a second veth pair between the same namespaces (198.19.255.1 →
198.19.255.2; kxdpgun's XDP program takes every reply on the first): its answered share and
latency percentiles. The legitimate queries reach every server through the kernel (XDP is
attached to the first link only): the figure is how well the server's kernel path survives
the flood beside it.

With `--rigs gen,kxdpgun` every case also runs under a second generator in the same run:
XDP frames made by BPF_PROG_TEST_RUN's live-frames mode (xdp_veth.py's sender, writing the
query into each page) and sent with ndo_xdp_xmit into the server's receive ring, as a NIC
hands frames to XDP, the replies dropped and counted by the sending link's XDP program. Its
floor is ~0.5 µs per reply against kxdpgun's ~2.5 µs (AF_XDP in copy mode on a veth: a
socket buffer and two copies per query); its catch: each live-frames run ends in an RCU
grace period, so the load comes in bursts of about rate x 25 ms.

First, the program alone: the answers part of `cargo bench -p xdp-guard` (BPF_PROG_TEST_RUN).

Usage: xdp_answers.py [--quick] [--seconds N] [--qps N] [--attack-qps N] [--cases a,b,...]
                      [--runs N] [--no-attack]
"""
import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time

import common as c
import xdp_veth as xv

CASES = ["reflect", "dnsd-xdp", "dnsd", "knot-xdp", "knot", "nsd"]
PORT = 53
ZONE = """$ORIGIN bench.test.
$TTL 3600
@ SOA ns hostmaster 1 7200 3600 1209600 300
@ NS ns
ns A 192.0.2.2
www A 192.0.2.80
www AAAA 2001:db8::80
"""


LEGIT_S, LEGIT_R = "198.19.255.1", "198.19.255.2"

# The legitimate client: one query at a time for www.bench.test/A, every 5 ms, for argv[2]
# seconds, from argv[3] to argv[1]:53; prints {"sent": N, "rtts": [seconds...]}.
LEGIT = r"""
import json, socket, struct, sys, time
dst, secs, src = (sys.argv[1], 53), float(sys.argv[2]), sys.argv[3]
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.bind((src, 0))
s.settimeout(0.5)
name = b"\x03www\x05bench\x04test\x00\x00\x01\x00\x01"
rtts, sent, i = [], 0, 0
end = time.monotonic() + secs
while time.monotonic() < end:
    i = (i + 1) & 0xffff
    q = struct.pack(">HHHHHH", i, 0x0100, 1, 0, 0, 0) + name
    sent += 1
    t0 = time.monotonic()
    s.sendto(q, dst)
    while True:
        try:
            b, _ = s.recvfrom(2048)
        except socket.timeout:
            break
        if b[:2] == q[:2]:
            rtts.append(time.monotonic() - t0)
            break
    time.sleep(0.005)
print(json.dumps({"sent": sent, "rtts": rtts}))
"""


class Veth(xv.Veth):
    """xdp_veth's pair with one queue per side: XDP_TX frames land on the queue of the CPU
    that sent them, and kxdpgun's socket listens on queue 0 only; and a second pair for the
    legitimate client."""

    def _make(self):
        tag = f"{os.getpid() % 100000}"
        self.ns_s, self.ns_r = f"pxa{tag}s", f"pxa{tag}r"
        self.if_s, self.if_r = f"pxa{tag}s", f"pxa{tag}r"
        for ns in (self.ns_s, self.ns_r):
            xv.sh(["ip", "netns", "add", ns])
            self.made.append(ns)
            xv.sh(["ip", "-n", ns, "link", "set", "lo", "up"])
        xv.sh(["ip", "-n", self.ns_s, "link", "add", self.if_s, "address", xv.MAC_S, "type",
               "veth", "peer", "name", self.if_r, "address", xv.MAC_R, "netns", self.ns_r])
        for ns, ifn, mine in ((self.ns_s, self.if_s, xv.SEND_IP),
                              (self.ns_r, self.if_r, xv.RECV_IP)):
            xv.sh(["ip", "-n", ns, "addr", "add", f"{mine}/24", "dev", ifn])
        self.up()
        self.if_s2, self.if_r2 = f"{self.if_s}l", f"{self.if_r}l"
        xv.sh(["ip", "-n", self.ns_s, "link", "add", self.if_s2, "type", "veth", "peer", "name",
               self.if_r2, "netns", self.ns_r])
        for ns, ifn, mine in ((self.ns_s, self.if_s2, LEGIT_S), (self.ns_r, self.if_r2, LEGIT_R)):
            xv.sh(["ip", "-n", ns, "addr", "add", f"{mine}/30", "dev", ifn])
            xv.sh(["ip", "-n", ns, "link", "set", ifn, "up"])


def drop_program(tmp):
    """An XDP program that drops everything (the floor's receiver)."""
    src = os.path.join(tmp, "drop.c")
    with open(src, "w") as f:
        f.write("#include <linux/bpf.h>\n"
                "__attribute__((section(\"xdp\"), used)) int xdp_drop(struct xdp_md *c) "
                "{ return XDP_DROP; }\n"
                "char _license[] __attribute__((section(\"license\"), used)) = \"GPL\";\n")
    obj = os.path.join(tmp, "drop.o")
    xv.sh(["clang", "-target", "bpf", "-O2", "-I/usr/include/x86_64-linux-gnu", "-c", src,
           "-o", obj])
    return obj


def reflect_program(tmp):
    """An XDP program that sends every UDP/IPv4 query to port 53 straight back as its own
    reply (addresses and ports swapped, QR set, no DNS work): the generator and the veth with
    replies to read, the floor every server's cost stands on."""
    src = os.path.join(tmp, "reflect.c")
    with open(src, "w") as f:
        f.write(r"""#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <linux/in.h>
#include <linux/ip.h>
#include <linux/udp.h>
#define SEC(s) __attribute__((section(s), used))
SEC("xdp") int xdp_reflect(struct xdp_md *c)
{
	void *data = (void *)(long)c->data, *end = (void *)(long)c->data_end;
	struct ethhdr *e = data;
	if ((void *)(e + 1) > end || e->h_proto != __builtin_bswap16(ETH_P_IP))
		return XDP_PASS;
	struct iphdr *ip = (void *)(e + 1);
	if ((void *)(ip + 1) > end || ip->ihl != 5 || ip->protocol != IPPROTO_UDP)
		return XDP_PASS;
	struct udphdr *u = (void *)(ip + 1);
	unsigned char *dns = (void *)(u + 1);
	if ((void *)(dns + 12) > end || u->dest != __builtin_bswap16(53))
		return XDP_PASS;
	unsigned char mac[ETH_ALEN];
	__builtin_memcpy(mac, e->h_dest, ETH_ALEN);
	__builtin_memcpy(e->h_dest, e->h_source, ETH_ALEN);
	__builtin_memcpy(e->h_source, mac, ETH_ALEN);
	__be32 a = ip->saddr;
	ip->saddr = ip->daddr;
	ip->daddr = a;
	__be16 p = u->source;
	u->source = u->dest;
	u->dest = p;
	u->check = 0;
	dns[2] |= 0x80;
	return XDP_TX;
}
char _license[] SEC("license") = "GPL";
""")
    obj = os.path.join(tmp, "reflect.o")
    xv.sh(["clang", "-target", "bpf", "-O2", "-I/usr/include/x86_64-linux-gnu", "-c", src,
           "-o", obj])
    return obj


def query_frame():
    """The query the live-frames generator sends: www.bench.test/A with EDNS (1,232 bytes, no
    DO), from 192.0.2.1:40000 to 192.0.2.2:53."""
    import struct
    dns = (struct.pack(">HHHHHH", 0x4242, 0x0000, 1, 0, 0, 1)
           + b"\x03www\x05bench\x04test\x00" + struct.pack(">HH", 1, 1)
           + b"\x00" + struct.pack(">HHIH", 41, 1232, 0, 0))
    return xv.frame(xv.SEND_IP, xv.RECV_IP, 40000, 0x4242, dns)


def xdp_counters(veth, ns, ifn):
    """The veth end's XDP counters summed over its queues: {"xdp_drops", "xdp_xmit",
    "xdp_xmit_errors", ...} from `ethtool -S`."""
    text = subprocess.run(veth.exec(ns, ["ethtool", "-S", ifn]), capture_output=True,
                          text=True).stdout
    out = {}
    for line in text.splitlines():
        k, _, v = line.partition(":")
        m = re.match(r"\s*(?:rx|tx)_queue_\d+_(\w+)", k)
        if m and v.strip().isdigit():
            out[m.group(1)] = out.get(m.group(1), 0) + int(v)
    return out


def xdp_gen(veth, seconds, qps):
    """The live-frames generator (xdp_veth.py's XDP frame sender, writing the query into each
    page) from the sending namespace, its link's XDP program dropping and counting the
    replies; returns (sent, answered)."""
    frame = query_frame()
    before = xdp_counters(veth, veth.ns_s, veth.if_s)
    argv = veth.exec(veth.ns_s, ["taskset", "-c", "1", sys.executable,
                                 os.path.abspath(xv.__file__), "_send", "--gen", "xdp",
                                 "--ifname", veth.if_s, "--frame-hex", frame.hex(),
                                 "--rate", str(qps), "--seconds", str(seconds),
                                 "--threads", "32", "--chunk", "256"])
    out = subprocess.run(argv, capture_output=True, text=True, timeout=seconds + 30)
    if out.returncode != 0:
        raise RuntimeError(f"xdp frame sender: {(out.stdout + out.stderr).strip()[-600:]}")
    time.sleep(0.2)
    after = xdp_counters(veth, veth.ns_s, veth.if_s)
    d = {k: after.get(k, 0) - before.get(k, 0) for k in after}
    sent = json.loads(out.stdout.strip().splitlines()[-1])["sent"] - d.get("xdp_xmit_errors", 0)
    return sent, d.get("xdp_drops", 0)


def start_server(case, veth, tmp, zone):
    """Starts the case's server in the receiving namespace; returns (Server, cleanup)."""
    zones = [("bench.test.", zone)]
    d = os.path.join(tmp, case)
    os.makedirs(d, exist_ok=True)
    pin = ["taskset", "-c", "0"]
    if case == "reflect":
        xv.sh(["ip", "-n", veth.ns_r, "link", "set", "dev", veth.if_r, "xdpdrv", "obj",
               reflect_program(tmp), "sec", "xdp"])
        return None, lambda: xv.sh(["ip", "-n", veth.ns_r, "link", "set", "dev", veth.if_r,
                                    "xdpdrv", "off"], check=False)
    if case == "floor":
        xv.sh(["ip", "-n", veth.ns_r, "link", "set", "dev", veth.if_r, "xdpdrv", "obj",
               drop_program(tmp), "sec", "xdp"])
        return None, lambda: xv.sh(["ip", "-n", veth.ns_r, "link", "set", "dev", veth.if_r,
                                    "xdpdrv", "off"], check=False)
    if case.startswith("dnsd"):
        extra = c.RRL_OFF + "\n[defence.cookies]\nenabled = false\n"
        zone_extra = ""
        if case == "dnsd-xdp":
            extra += (f"\n[xdp]\ninterface = \"{veth.if_r}\"\nmode = \"native\"\n"
                      "dns_ports = [53]\nrate = 0\nburst = 1\npin = false\n")
            zone_extra = "xdp_answers = true"
        conf = c.dnsd_conf(d, [xv.RECV_IP, LEGIT_R], PORT, zones, extra=extra,
                           zone_extra=zone_extra)
        srv = c.Server(case, veth.exec(veth.ns_r, pin + [c.dnsd_bin(), "serve", "-c", conf]),
                       None, env=dict(os.environ, RUST_LOG="info"))
        sock = os.path.join(d, "dnsd.sock")
        t0 = time.monotonic()
        while time.monotonic() - t0 < 20:
            if srv.proc.poll() is not None:
                raise RuntimeError(f"dnsd exited:\n{srv.tail()}")
            if case != "dnsd-xdp" or "XDP answers published" in srv.tail():
                if os.path.exists(sock):
                    break
            time.sleep(0.05)
        return srv, lambda: None
    if case.startswith("knot"):
        conf = c.knot_conf(d, [xv.RECV_IP, LEGIT_R], PORT, zones)
        if case == "knot-xdp":
            with open(conf) as f:
                text = f.read()
            text = text.replace("server:\n", "server:\n", 1)
            text += f"xdp:\n    listen: [ {veth.if_r}@{PORT} ]\n    udp: on\n"
            with open(conf, "w") as f:
                f.write(text)
        srv = c.Server(case, veth.exec(veth.ns_r, pin + ["knotd", "-c", conf]), None)
        time.sleep(1.5)
        return srv, lambda: None
    if case == "nsd":
        conf = c.nsd_conf(d, [xv.RECV_IP, LEGIT_R], PORT, zones)
        srv = c.Server(case, veth.exec(veth.ns_r, pin + ["nsd", "-d", "-c", conf]), None)
        time.sleep(1.5)
        return srv, lambda: None
    raise ValueError(case)


def attack(veth, qfile, seconds, qps):
    """kxdpgun from 65,536 sources, and the legitimate client beside it on the second link;
    (sent, answered, legit) with legit = {"sent", "answered", "p50_ms", "p99_ms"}."""
    legit = subprocess.Popen(veth.exec(veth.ns_s, [sys.executable, "-c", LEGIT, LEGIT_R,
                                                   str(seconds), LEGIT_S]),
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    argv = veth.exec(veth.ns_s, ["kxdpgun", "-t", str(seconds), "-Q", str(qps), "-F", "1",
                                 "-I", veth.if_s, "-l", "198.18.0.0/16", "-i", qfile,
                                 xv.RECV_IP])
    out = subprocess.run(argv, capture_output=True, text=True, timeout=seconds + 30)
    text = out.stdout + out.stderr
    sent = re.search(r"total queries:\s+(\d+)", text)
    answered = re.search(r"total replies:\s+(\d+)", text)
    lout, lerr = legit.communicate(timeout=seconds + 30)
    try:
        lj = json.loads(lout)
    except ValueError:
        raise RuntimeError(f"legitimate client: {lerr.strip()[-600:]}")
    rtts = sorted(lj["rtts"])
    pct = (lambda p: rtts[min(len(rtts) - 1, int(p * len(rtts)))] * 1000 if rtts
           else float("nan"))
    lg = {"sent": lj["sent"], "answered": len(rtts), "p50_ms": pct(0.50), "p99_ms": pct(0.99)}
    return (int(sent.group(1)) if sent else 0, int(answered.group(1)) if answered else 0, lg)


def busy_jiffies():
    """Busy jiffies of every CPU (user+nice+system+irq+softirq+steal)."""
    out = {}
    with open("/proc/stat") as f:
        for line in f:
            if re.match(r"cpu\d", line):
                p = line.split()
                v = [int(x) for x in p[1:]]
                out[p[0]] = v[0] + v[1] + v[2] + v[5] + v[6] + v[7]
    return out


def sender_rx_packets(veth):
    """Frames that reached the sending link (the veth counts each, whatever its XDP program
    then does with it)."""
    j = json.loads(xv.sh(["ip", "-n", veth.ns_s, "-j", "-s", "link", "show", veth.if_s]))[0]
    return j.get("stats64", {}).get("rx", {}).get("packets", 0)


def kxdpgun(veth, qfile, seconds, qps, drop=False):
    """Runs the generator; returns (sent, answered) from its summary. With `drop` (kxdpgun
    -r) it reads no reply: its socket's ring stays full and the kernel drops each reply
    before any copy; the answers are then the frames that reached the sending link."""
    argv = veth.exec(veth.ns_s, ["kxdpgun", "-t", str(seconds), "-Q", str(qps), "-F", "1",
                                 "-I", veth.if_s, "-i", qfile, xv.RECV_IP]
                     + (["-r"] if drop else []))
    rx0 = sender_rx_packets(veth)
    out = subprocess.run(argv, capture_output=True, text=True, timeout=seconds + 30)
    text = out.stdout + out.stderr
    c.log(f"kxdpgun{' -r' if drop else ''}: {sender_rx_packets(veth) - rx0} frames reached "
          "the sending link")
    if drop:
        sent = re.search(r"total queries:\s+(\d+)", text)
        if not sent:
            raise RuntimeError(f"kxdpgun: {text.strip()[-600:]}")
        return int(sent.group(1)), sender_rx_packets(veth) - rx0, text
    sent = re.search(r"total queries:\s+(\d+)", text)
    answered = re.search(r"total replies:\s+(\d+)", text)
    if not sent:
        raise RuntimeError(f"kxdpgun: {text.strip()[-600:]}")
    return int(sent.group(1)), int(answered.group(1)) if answered else 0, text


def clear_xdp(veth):
    """No XDP program left on the receiving link by the case before (Knot's may outlive it
    briefly)."""
    for mode in ("xdpdrv", "xdpgeneric", "xdp"):
        xv.sh(["ip", "-n", veth.ns_r, "link", "set", "dev", veth.if_r, mode, "off"], check=False)


def measure(case, veth, tmp, zone, qfile, seconds, qps, rig="kxdpgun"):
    """One run of the generator (`rig`: kxdpgun, or gen: XDP frames) against `case`:
    its counts and both cores' busy time."""
    clear_xdp(veth)
    srv, cleanup = start_server(case, veth, tmp, zone)
    try:
        b0, i0 = busy_jiffies(), c.idle_snapshot()
        t0 = time.monotonic()
        if rig == "gen":
            sent, answered = xdp_gen(veth, seconds, qps)
        else:
            sent, answered, _text = kxdpgun(veth, qfile, seconds, qps,
                                            drop=rig == "kxdpgun-r")
        wall = time.monotonic() - t0
        b1, i1 = busy_jiffies(), c.idle_snapshot()
        xdp = {}
        if case == "dnsd-xdp":
            conf = os.path.join(tmp, case, "dnsd.toml")
            st = subprocess.run([c.dnsd_bin(), "ctl", "-c", conf, "stats"],
                                capture_output=True, text=True).stdout
            for line in st.splitlines():
                f = line.replace(":", " ").replace("=", " ").split()
                if len(f) == 2 and f[0].startswith("xdp") and f[1].isdigit():
                    xdp[f[0]] = int(f[1])
            if not xdp:
                c.log(st[:2000])
                c.log(srv.tail()[-1500:])
            if os.environ.get("XDP_ANSWERS_DEBUG"):
                c.log(json.dumps(veth.link_stats()))
    finally:
        if srv:
            srv.stop()
        cleanup()
    ticks = sum(b1[k] - b0[k] for k in b1) / os.sysconf("SC_CLK_TCK")
    busy = c.busy_seconds(i0, i1)
    c.log(f"{case:>9} ({rig}): sent {sent}, answered {answered} "
          f"({answered / max(sent, 1) * 100:.1f} %), both cores busy {busy:.2f} s "
          f"(tick-sampled: {ticks:.2f} s)")
    per = busy / answered * 1e9 if answered else float("nan")
    return {"case": case, "rig": rig, "sent": sent, "answered": answered, "busy_cpu_s": busy,
            "tick_sampled_busy_s": ticks, "wall_s": wall, "xdp": xdp, "ns_per_answer": per}


def measure_attack(case, veth, tmp, zone, qfile, seconds, qps):
    """The many-source flood against `case`, with the legitimate client beside it."""
    clear_xdp(veth)
    srv, cleanup = start_server(case, veth, tmp, zone)
    try:
        i0 = c.idle_snapshot()
        asent, aans, legit = attack(veth, qfile, seconds, qps)
        i1 = c.idle_snapshot()
    finally:
        if srv:
            srv.stop()
        cleanup()
    abusy = c.busy_seconds(i0, i1)
    c.log(f"{case:>9} under a many-source flood: answered {aans}/{asent}, "
          f"both cores busy {abusy:.2f} s; legitimate client "
          f"{legit['answered']}/{legit['sent']}, p50 {legit['p50_ms']:.2f} ms, "
          f"p99 {legit['p99_ms']:.2f} ms")
    return {"sent": asent, "answered": aans, "busy_cpu_s": abusy, "legit": legit}


def kernel_test_run():
    """The answers part of `cargo bench -p xdp-guard` (the program alone), or None."""
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    c.progress("xdp answers: the program alone (BPF_PROG_TEST_RUN)")
    out = subprocess.run(["cargo", "bench", "-q", "-p", "xdp-guard", "--bench", "guard", "--",
                          "answers"], cwd=root, capture_output=True, text=True)
    c.done_progress()
    if out.returncode != 0:
        c.log(f"cargo bench -p xdp-guard failed: {out.stderr.strip()[-800:]}")
        return None
    lines = out.stdout.splitlines()
    start = next((i for i, l in enumerate(lines) if "answer fast path per packet" in l), None)
    return "\n".join(lines[start:]).strip() if start is not None else out.stdout.strip()


def own_costs(rs):
    """Each server's own cost in one run, ns per answer: its busy time minus the reflector's,
    per answer it gave ({} without a reflector in the run)."""
    by = {r["case"]: r for r in rs}
    if "reflect" not in by:
        return {}
    floor = by["reflect"]["busy_cpu_s"]
    return {k: (r["busy_cpu_s"] - floor) / r["answered"] * 1e9 for k, r in by.items()
            if k not in ("floor", "reflect") and r["answered"]}


RIG_TEXT = {
    "kxdpgun": "kxdpgun (AF_XDP in copy mode: every query a socket buffer the veth turns into "
               "an XDP frame by a copy; replies read by kxdpgun)",
    "kxdpgun-r": "kxdpgun -r (as kxdpgun, but it reads no reply: the kernel drops each at its "
                 "full socket ring before any copy; answers counted as the frames reaching the "
                 "sending link)",
    "gen": "XDP frames (xdp_veth.py's live-frames sender: queries made in the kernel and sent "
           "with ndo_xdp_xmit, as a NIC hands frames to XDP, in bursts; replies dropped and "
           "counted by the sending link's XDP program)",
}


def report(runs, a, seconds, rig="kxdpgun"):
    """Per case the median and range of ns per answer over the runs, and per run the ratios
    the fast path is judged by."""
    n = len(runs)
    print(f"\nXDP answer fast path, {c.machine()}, generator {RIG_TEXT.get(rig, rig)}: "
          f"{a.qps} q/s for {seconds} s on CPU 1,"
          f" server on CPU 0; CPU per answer = both cores' busy time (generator included) / "
          f"answers; {n} run(s), cases interleaved in each")
    floors = [r["busy_cpu_s"] for rs in runs for r in rs if r["case"] == "floor"]
    if floors:
        print(f"floor (generator against an XDP_DROP receiver): median {median(floors):.2f} s busy")
    floor_cases = ("floor", "reflect")
    cases = [r["case"] for r in runs[0] if r["case"] not in floor_cases]
    per = {k: [r["ns_per_answer"] for rs in runs for r in rs if r["case"] == k] for k in cases}
    share = {k: [r["answered"] / max(r["sent"], 1) for rs in runs for r in rs if r["case"] == k]
             for k in cases}
    # The server's own cost: its run's busy time minus the reflector's in the same run (the
    # generator and the veth with replies to read), per answer.
    own = {k: [] for k in cases}
    for rs in runs:
        for k, o in own_costs(rs).items():
            own[k].append(o)
    refl = [r["ns_per_answer"] for rs in runs for r in rs if r["case"] == "reflect"]
    if refl:
        print(f"reflector (the generator and the veth with replies, no DNS work): median "
              f"{median(refl):.0f} ns per reply, range {min(refl):.0f}–{max(refl):.0f}")
    base = median(per["dnsd"]) if "dnsd" in per else None
    obase = median(own["dnsd"]) if own.get("dnsd") else None
    print(f"{'case':>9} {'share':>7} {'ns/answer median':>17} {'range':>15} {'vs dnsd':>8}"
          f" {'own ns/answer':>14} {'own vs dnsd':>12}")
    for k in cases:
        m = median(per[k])
        o = median(own[k]) if own[k] else float("nan")
        print(f"{k:>9} {median(share[k]) * 100:6.1f}% {m:17.0f} "
              f"{min(per[k]):7.0f}–{max(per[k]):<7.0f} "
              f"{(m / base if base else float('nan')):7.2f}x"
              f" {o:14.0f} {(o / obase if obase else float('nan')):11.2f}x")
    if "dnsd-xdp" in per:
        print("\nper run (same run, same hour):")
        for i, rs in enumerate(runs):
            by = {r["case"]: r["ns_per_answer"] for r in rs}
            if "dnsd-xdp" not in by:
                continue
            parts = [f"run {i + 1}: dnsd-xdp {by['dnsd-xdp']:.0f} ns"]
            if "knot-xdp" in by:
                parts.append(f"/ knot-xdp {by['dnsd-xdp'] / by['knot-xdp']:.2f}x (goal ≤ 0.5)")
            if "dnsd" in by:
                parts.append(f"/ dnsd kernel path {by['dnsd-xdp'] / by['dnsd']:.2f}x (goal ≤ 0.25)")
            o = own_costs(rs)
            if o:
                parts.append("; own cost: " + ", ".join(
                    f"{k} {o[k]:.0f} ns" for k in ("dnsd-xdp", "knot-xdp", "dnsd") if k in o))
            print("  " + "  ".join(parts))
    attacks = [r for r in runs[0] if "attack" in r]
    if attacks:
        print(f"\nA flood of valid queries from 65,536 sources (198.18.0.0/16) at {a.attack_qps} q/s"
              f" (first run):")
        print(f"{'case':>9} {'answered':>9} {'busy s':>7} {'legit answered':>15} "
              f"{'p50 ms':>7} {'p99 ms':>7}")
        for r in attacks:
            t = r["attack"]
            lg = t["legit"]
            print(f"{r['case']:>9} {t['answered'] / max(t['sent'], 1) * 100:8.1f}% "
                  f"{t['busy_cpu_s']:7.2f} "
                  f"{lg['answered'] / max(lg['sent'], 1) * 100:14.1f}% "
                  f"{lg['p50_ms']:7.2f} {lg['p99_ms']:7.2f}")


def median(v):
    v = sorted(x for x in v if x == x)
    if not v:
        return float("nan")
    mid = len(v) // 2
    return v[mid] if len(v) % 2 else (v[mid - 1] + v[mid]) / 2


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--seconds", type=int, default=None)
    ap.add_argument("--qps", type=int, default=300000)
    ap.add_argument("--attack-qps", type=int, default=600000)
    ap.add_argument("--no-attack", action="store_true")
    ap.add_argument("--cases", default=",".join(CASES))
    ap.add_argument("--rigs", default="kxdpgun",
                    help="generators: kxdpgun, kxdpgun-r (replies not read), gen (XDP frames from BPF_PROG_TEST_RUN's live "
                         "mode, replies dropped in XDP)")
    ap.add_argument("--no-test-run", action="store_true",
                    help="skip the program alone (cargo bench -p xdp-guard)")
    ap.add_argument("--runs", type=int, default=None,
                    help="runs of every case, interleaved (default 5; 2 with --quick)")
    a = ap.parse_args()
    a.runs = a.runs or (2 if a.quick or c.quick() else 5)
    seconds = a.seconds or (3 if a.quick or c.quick() else 8)
    c.need("kxdpgun", "knotd", "nsd", "clang", "ethtool", "taskset")
    tmp = tempfile.mkdtemp(prefix="palisade-xdp-answers-")
    zone = os.path.join(tmp, "bench.test.zone")
    with open(zone, "w") as f:
        f.write(ZONE)
    qfile = os.path.join(tmp, "queries.txt")
    with open(qfile, "w") as f:
        f.write("www.bench.test A\n")
    # The program alone first, on a quiet machine (no server or generator winding down).
    test_run = None if a.no_test_run else kernel_test_run()
    veth = Veth()
    # XDP_TX frames reach the sending side only through its NAPI: GRO on gives it one
    # (kxdpgun's own XDP program on a veth runs in generic mode).
    xv.sh(veth.exec(veth.ns_s, ["ethtool", "-K", veth.if_s, "gro", "on"]))
    cases = a.cases.split(",")
    rigs = a.rigs.split(",")
    runs = {rig: [] for rig in rigs}  # per rig, one list of results per run
    drop = drop_program(tmp)
    try:
        for run in range(a.runs):
            for rig in rigs:
                runs[rig].append([])
            for case in cases:
                for rig in rigs:
                    c.progress(f"xdp answers: run {run + 1}/{a.runs}, {case}, {rig}")
                    if rig == "gen":
                        # kxdpgun's program may be left on the sending link.
                        for mode in ("xdpdrv", "xdpgeneric", "xdp"):
                            xv.sh(veth.exec(veth.ns_s, ["ip", "link", "set", "dev", veth.if_s,
                                                        mode, "off"]), check=False)
                        # Replies dropped (and counted) by the sending link's XDP program;
                        # the receiving link's NAPI takes XDP frames for servers without XDP.
                        xv.sh(veth.exec(veth.ns_s, ["ip", "link", "set", "dev", veth.if_s,
                                                    "xdpdrv", "obj", drop, "sec", "xdp"]))
                        xv.sh(veth.exec(veth.ns_r, ["ethtool", "-K", veth.if_r, "gro", "on"]))
                    try:
                        runs[rig][-1].append(measure(case, veth, tmp, zone, qfile, seconds,
                                                     a.qps, rig))
                    finally:
                        if rig == "gen":
                            xv.sh(veth.exec(veth.ns_s, ["ip", "link", "set", "dev", veth.if_s,
                                                        "xdpdrv", "off"]), check=False)
                            xv.sh(veth.exec(veth.ns_r, ["ethtool", "-K", veth.if_r, "gro",
                                                        "off"]), check=False)
                if (case not in ("floor", "reflect") and not a.no_attack and run == 0
                        and "kxdpgun" in runs):
                    runs["kxdpgun"][-1][-1]["attack"] = measure_attack(
                        case, veth, tmp, zone, qfile, seconds, a.attack_qps)
    finally:
        c.done_progress()
        veth.close()
    for rig in rigs:
        report(runs[rig], a, seconds, rig)
    if test_run:
        print("\nThe program alone (cargo bench -p xdp-guard -- answers: BPF_PROG_TEST_RUN, no veth):")
        print(test_run)
    main_rig = "kxdpgun" if "kxdpgun" in runs else rigs[0]
    c.save("xdp_answers", {"machine": c.machine(), "seconds": seconds, "qps": a.qps,
                           "command": f"bench/scripts/xdp_answers.py --qps {a.qps} --runs {a.runs}",
                           "when": time.strftime("%Y-%m-%d %H:%M:%S"),
                           "results": runs[main_rig][0], "runs": runs[main_rig],
                           "runs_gen": runs.get("gen"), "test_run": test_run})


if __name__ == "__main__":
    sys.exit(main())
