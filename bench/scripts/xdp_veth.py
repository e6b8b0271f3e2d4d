#!/usr/bin/env python3
"""The XDP guard on a veth (issue 7): packets from a blocked source dropped by dnsd's XDP
program, against the kernel dropping the same traffic without XDP (nftables).

Two network namespaces made here (deleted at the end, also on error, SIGTERM or Ctrl-C) are
joined by a veth pair with one queue per CPU: the sender side has 192.0.2.1, the receiving
side 192.0.2.2, static neighbour entries, no ARP. dnsd runs in the receiving namespace (UDP
192.0.2.2:53, one worker, pinned to CPU 0) with the flood's source 192.0.2.10 in its block map
(`block add` on its control socket). Nothing leaves the namespaces.

Two traffic sources, one sender process per CPU (pinned), each sending that source's UDP/53
query (101-byte frames):
  skb  AF_PACKET sendmmsg of ready-made Ethernet frames, qdisc bypassed (a ctypes loop): what
       the host's stack or a container puts on a veth. Native XDP on the peer must first copy
       each skb into an XDP buffer. Receiving veth: GRO off (the default).
  xdp  a pktgen-style generator in the kernel: a 4-instruction XDP program that redirects to
       the veth, run by BPF_PROG_TEST_RUN with live frames (as xdp-trafficgen does). The peer
       gets XDP frames, as native XDP gets them from a NIC driver (no skb). Without XDP the
       peer needs GRO on to accept them: its NAPI poll builds skbs, as a NIC driver does.
On a veth the receiving side's work runs on the CPU that sent the packet (softirq at the end
of the send), so both cores are both sender and receiver.

Cases (dnsd restarted for each):
  floor        xdp source only: the receiving end without XDP or GRO refuses each frame at
               once; the generator's own cost, subtracted from the others
  xdp-native   dnsd `[xdp] interface = <veth>, mode = "native"` (pin = false: `ip netns exec`
               gives dnsd its own /sys, and the maps die with it)
  xdp-generic  the same program in generic (skb) mode (skb source)
  nft-ingress  no XDP; nftables netdev ingress hook on the veth: `ip saddr @blocked drop`
  nft-raw      no XDP; nftables prerouting at raw priority (before conntrack and routing): the
               reference
  nft-input    no XDP; nftables input hook, after routing (skb source)
Each case runs twice: as fast as the senders go (`max`: packets dropped per second), and at one
fixed offered rate for every case (`fixed`: CPU per packet at equal load).

Measured per run: packets offered (the senders' own count), packets dropped at the drop point
(XDP's drop_blocked_addr via `dnsd ctl stats`, or the nft rule's counter) per second over the
inner part of the window, packets lost elsewhere (offered minus dropped there, whole window),
CPU per packet (the senders' CLOCK_PROCESS_CPUTIME_ID, which includes the receiving softirq
work done in their context, plus the ksoftirqd threads', per packet sent) and, for the xdp
source, the receiving side's part of it (minus the floor). As a cross-check, softirq ticks of
both CPUs from /proc/stat (250 Hz) minus the background rate, per dropped packet: coarse. Ratios
are against nft-raw of the same source in the same run.

Then the burst: during an xdp-source flood at full speed on both cores, `dnsd ctl block import`
of 100,000 unique addresses (198.18.0.0/15, RFC 2544's benchmarking range, used only inside
the namespaces) into dnsd with native XDP: time from the command until the XDP mirror has
written all of them into the kernel maps (`xdp.mirror.upserted`, polled every ~2 ms over the
control socket); then, flood stopped, one packet from each of the 100,000 addresses: every one
must be counted as dropped by XDP as a blocked address (zero lost).

Needs root, iproute2, nft and ethtool (Debian's nftables and ethtool; bench/run installs them).
Usage: xdp_veth.py [--quick] [--seconds N] [--fixed-pps N] [--sources skb,xdp] [--cases a,b]
                   [--burst-gen skb|xdp] [--no-burst]
"""
import argparse
import ctypes
import ctypes.util
import json
import os
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common as c  # noqa: E402

SEND_IP = "192.0.2.1"
RECV_IP = "192.0.2.2"
BLOCKED = "192.0.2.10"
MAC_S = "02:00:c0:00:02:01"
MAC_R = "02:00:c0:00:02:02"
PORT = 53
BURST_NET = "198.18.0.0"
BURST_N = 100_000
CASES = ["xdp-native", "xdp-generic", "nft-ingress", "nft-raw", "nft-input"]
# Per traffic source: which cases run. `skb`: AF_PACKET frames (what the host's own stack or a
# container would put on a veth; XDP on the peer must first copy each skb into an XDP buffer).
# `xdp`: XDP frames redirected into the veth (what a NIC driver hands to native XDP: no skb).
# `floor` (xdp only): the generator's own cost, subtracted to give the receiving side's. For
# skb there is none: a veth that refuses an skb makes AF_PACKET's sendmmsg fail at that packet,
# so the bare sending cost cannot be had with the same batching.
SOURCES = {"skb": CASES, "xdp": ["floor", "xdp-native", "nft-ingress", "nft-raw"]}
FLOOR_NOTE = {
    "xdp": "the floor: the same generator, the receiving end without XDP or GRO, so the veth "
           "refuses each frame at once: no receiving work",
}
REFERENCE = "nft-raw"
NOTE = {
    "xdp-native": "dnsd's XDP guard, native (driver) mode on the veth",
    "xdp-generic": "dnsd's XDP guard, generic (skb) mode",
    "nft-ingress": "no XDP; nftables netdev ingress hook on the veth, ip saddr @blocked drop",
    "nft-raw": "no XDP; nftables prerouting, raw priority (-300): ip saddr @blocked drop",
    "nft-input": "no XDP; nftables input hook (after routing): ip saddr @blocked drop",
}
HZ = os.sysconf("SC_CLK_TCK")


# ---------------------------------------------------------------------------------------
# The sender (runs inside the sender namespace: `xdp_veth.py _send ...`)


def ip_checksum(hdr):
    s = sum(struct.unpack("!10H", hdr))
    while s >> 16:
        s = (s & 0xFFFF) + (s >> 16)
    return (~s) & 0xFFFF


def frame(src_ip, dst_ip, sport, qid, q=None):
    """An Ethernet frame with a UDP/53 DNS query (UDP checksum 0): `q` (a DNS message), else
    (101 bytes) SOA for "bench.test." with EDNS (4096) and a 16-byte padding option, as
    resolvers send them."""
    if q is None:
        q = struct.pack("!HHHHHH", qid & 0xFFFF, 0x0100, 1, 0, 0, 1)
        q += b"\x05bench\x04test\x00" + struct.pack("!HH", 6, 1)
        q += (b"\x00" + struct.pack("!HHIH", 41, 4096, 0, 20) + struct.pack("!HH", 12, 16)
              + bytes(16))
    udp = struct.pack("!HHHH", sport, PORT, 8 + len(q), 0) + q
    hdr = struct.pack("!BBHHHBBH4s4s", 0x45, 0, 20 + len(udp), qid & 0xFFFF, 0, 64, 17, 0,
                      socket.inet_aton(src_ip), socket.inet_aton(dst_ip))
    hdr = hdr[:10] + struct.pack("!H", ip_checksum(hdr)) + hdr[12:]
    eth = bytes.fromhex(MAC_R.replace(":", "")) + bytes.fromhex(MAC_S.replace(":", "")) + b"\x08\x00"
    return eth + hdr + udp


class _Iovec(ctypes.Structure):
    _fields_ = [("base", ctypes.c_void_p), ("len", ctypes.c_size_t)]


class _Msghdr(ctypes.Structure):
    _fields_ = [("name", ctypes.c_void_p), ("namelen", ctypes.c_uint32),
                ("iov", ctypes.POINTER(_Iovec)), ("iovlen", ctypes.c_size_t),
                ("control", ctypes.c_void_p), ("controllen", ctypes.c_size_t),
                ("flags", ctypes.c_int)]


class _Mmsghdr(ctypes.Structure):
    _fields_ = [("hdr", _Msghdr), ("len", ctypes.c_uint)]


class PacketSender:
    """sendmmsg of prepared frames on an AF_PACKET socket bound to `ifname`, qdisc bypassed."""

    def __init__(self, ifname, frames):
        self.sock = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, 0)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4 << 20)
        try:
            self.sock.setsockopt(263, 20, 1)  # SOL_PACKET, PACKET_QDISC_BYPASS
        except OSError:
            pass
        self.sock.bind((ifname, 0))
        self.libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)
        self.load(frames)

    def load(self, frames):
        n = len(frames)
        self.bufs = [ctypes.create_string_buffer(f, len(f)) for f in frames]
        self.iov = (_Iovec * n)()
        self.msgs = (_Mmsghdr * n)()
        for i, b in enumerate(self.bufs):
            self.iov[i].base = ctypes.cast(b, ctypes.c_void_p)
            self.iov[i].len = len(frames[i])
            self.msgs[i].hdr.iov = ctypes.pointer(self.iov[i])
            self.msgs[i].hdr.iovlen = 1
        self.n = n

    def send(self, start=0, count=None):
        """Sends frames[start:start+count]; returns how many went (0 on ENOBUFS)."""
        count = self.n - start if count is None else count
        ptr = ctypes.byref(self.msgs, start * ctypes.sizeof(_Mmsghdr))
        r = self.libc.sendmmsg(self.sock.fileno(), ptr, count, 0)
        if r < 0:
            e = ctypes.get_errno()
            if e in (105, 11, 4):  # ENOBUFS, EAGAIN, EINTR
                return 0
            raise OSError(e, os.strerror(e))
        return r


_SYS_BPF = 321  # x86_64
_BPF_PROG_LOAD, _BPF_PROG_TEST_RUN = 5, 10
_BPF_PROG_TYPE_XDP, _BPF_XDP = 6, 37
_BPF_F_TEST_XDP_LIVE_FRAMES = 2


class _ProgLoad(ctypes.Structure):
    _fields_ = [("prog_type", ctypes.c_uint32), ("insn_cnt", ctypes.c_uint32),
                ("insns", ctypes.c_uint64), ("license", ctypes.c_uint64),
                ("log_level", ctypes.c_uint32), ("log_size", ctypes.c_uint32),
                ("log_buf", ctypes.c_uint64), ("kern_version", ctypes.c_uint32),
                ("prog_flags", ctypes.c_uint32), ("prog_name", ctypes.c_char * 16),
                ("prog_ifindex", ctypes.c_uint32), ("expected_attach_type", ctypes.c_uint32),
                ("pad", ctypes.c_uint8 * 64)]


class _TestRun(ctypes.Structure):
    _fields_ = [("prog_fd", ctypes.c_uint32), ("retval", ctypes.c_uint32),
                ("data_size_in", ctypes.c_uint32), ("data_size_out", ctypes.c_uint32),
                ("data_in", ctypes.c_uint64), ("data_out", ctypes.c_uint64),
                ("repeat", ctypes.c_uint32), ("duration", ctypes.c_uint32),
                ("ctx_in", ctypes.c_uint64), ("ctx_out", ctypes.c_uint64),
                ("ctx_size_in", ctypes.c_uint32), ("ctx_size_out", ctypes.c_uint32),
                ("flags", ctypes.c_uint32), ("cpu", ctypes.c_uint32),
                ("batch_size", ctypes.c_uint32), ("pad", ctypes.c_uint32)]


class XdpFrameSender:
    """A pktgen-style generator in the kernel: a 4-instruction XDP program that redirects to
    `ifname` (`bpf_redirect(ifindex, 0)`), run by BPF_PROG_TEST_RUN with live frames
    (BPF_F_TEST_XDP_LIVE_FRAMES, as xdp-trafficgen does). Each run sends `repeat` copies of
    `frame` out of the veth as XDP frames, which the peer receives as a NIC driver would hand
    them to XDP (no skb); without an XDP program there, the peer needs GRO on to take them
    (it then builds skbs in its NAPI poll and the stack takes over)."""

    def __init__(self, ifname, frame_bytes, rewrite=False):
        """`rewrite`: the program first writes `frame_bytes` over the frame (the kernel
        recycles a run's pages without resetting their bytes, and a server answering with
        XDP_TX has turned the last query in a page into its answer)."""
        self.libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)
        self.libc.syscall.restype = ctypes.c_long
        ifindex = socket.if_nametoindex(ifname)

        def insn(code, dst=0, src=0, off=0, imm=0):
            return struct.pack("<BBhi", code, (src << 4) | dst, off, imm)

        def s32(v):
            return v - (1 << 32) if v >= 1 << 31 else v

        redirect = (insn(0xB7, 1, imm=ifindex)  # r1 = ifindex
                    + insn(0xB7, 2, imm=0)  # r2 = 0
                    + insn(0x85, imm=23)  # call bpf_redirect
                    + insn(0x95))  # exit
        prog = redirect
        if rewrite:
            n = len(frame_bytes)
            words = n - n % 8
            stores = b""
            for i in range(0, words, 8):
                v = int.from_bytes(frame_bytes[i:i + 8], "little")
                stores += (insn(0x18, 5, imm=s32(v & 0xFFFFFFFF))  # r5 = v (lddw, 2 slots)
                           + insn(0, imm=s32(v >> 32))
                           + insn(0x7B, 2, 5, off=i))  # *(u64 *)(r2 + i) = r5
            for i in range(words, n):
                stores += insn(0x72, 2, off=i, imm=frame_bytes[i])  # *(u8 *)(r2 + i) = b
            body = stores + redirect
            prog = (insn(0x61, 2, 1, off=0)  # r2 = ctx->data
                    + insn(0x61, 3, 1, off=4)  # r3 = ctx->data_end
                    + insn(0xBF, 4, 2)  # r4 = r2
                    + insn(0x07, 4, imm=n)  # r4 += n
                    + insn(0x2D, 4, 3, off=len(body) // 8)  # if r4 > r3 goto abort
                    + body
                    + insn(0xB7, 0, imm=0)  # abort: r0 = XDP_ABORTED
                    + insn(0x95))  # exit
        self._prog = ctypes.create_string_buffer(prog, len(prog))
        self._lic = ctypes.create_string_buffer(b"GPL")
        self._log = ctypes.create_string_buffer(16384)
        a = _ProgLoad(prog_type=_BPF_PROG_TYPE_XDP, insn_cnt=len(prog) // 8,
                      insns=ctypes.addressof(self._prog), license=ctypes.addressof(self._lic),
                      log_level=1, log_size=16384, log_buf=ctypes.addressof(self._log),
                      prog_name=b"pal_bench_gen", expected_attach_type=_BPF_XDP)
        self.fd = self._bpf(_BPF_PROG_LOAD, a)
        self._data = ctypes.create_string_buffer(frame_bytes, len(frame_bytes))
        self._len = len(frame_bytes)

    def _bpf(self, cmd, attr):
        r = self.libc.syscall(_SYS_BPF, cmd, ctypes.byref(attr), ctypes.sizeof(attr))
        if r < 0:
            e = ctypes.get_errno()
            raise OSError(e, f"bpf({cmd}): {os.strerror(e)} {self._log.value.decode()[-300:]}")
        return r

    def send(self, count):
        t = _TestRun(prog_fd=self.fd, data_size_in=self._len,
                     data_in=ctypes.addressof(self._data), repeat=count,
                     flags=_BPF_F_TEST_XDP_LIVE_FRAMES)
        self._bpf(_BPF_PROG_TEST_RUN, t)
        return count


def xdp_sender(a):
    """The XDP frame sender for `_send --gen xdp`: `--frame-hex` rewritten into every page,
    else this sender's SOA query."""
    if a.frame_hex:
        return XdpFrameSender(a.ifname, bytes.fromhex(a.frame_hex), rewrite=True)
    return XdpFrameSender(a.ifname, frame(a.src, RECV_IP, 10000 + a.seed, a.seed))


def threaded_xdp_sender(a):
    """XDP frames at `a.rate` from `a.threads` threads, each sending runs of `a.chunk` (at
    least one batch of 64) as they fall due; prints {"sent", "wall", "cpu"}. The threads
    waiting out one run's teardown wake together, so the load comes in bursts of about
    rate × 25 ms frames."""
    import threading
    s = xdp_sender(a)
    chunk = max(64, a.chunk or 256)
    lock = threading.Lock()
    state = {"claimed": 0}
    if a.start_at:
        time.sleep(max(0.0, a.start_at - time.time()))
    t0 = time.monotonic()
    cpu0 = time.process_time()
    end = t0 + a.seconds

    def run():
        while True:
            now = time.monotonic()
            if now >= end:
                return
            due = int((now - t0) * a.rate)
            with lock:
                n = min(chunk, due - state["claimed"])
                if n >= 64:
                    state["claimed"] += n
            if n < 64:
                time.sleep(0.0002)
                continue
            s.send(n)

    threads = [threading.Thread(target=run) for _ in range(a.threads)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    print(json.dumps({"sent": state["claimed"], "wall": time.monotonic() - t0,
                      "cpu": time.process_time() - cpu0}))


def sender_main(argv):
    ap = argparse.ArgumentParser(prog="xdp_veth.py _send")
    ap.add_argument("--ifname", required=True)
    ap.add_argument("--src", default=BLOCKED)
    ap.add_argument("--seconds", type=float, default=5)
    ap.add_argument("--rate", type=float, default=0, help="packets/s (0: as fast as possible)")
    ap.add_argument("--start-at", type=float, default=0)
    ap.add_argument("--batch", type=int, default=256)
    ap.add_argument("--gen", choices=["skb", "xdp"], default="skb")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--burst-sources", type=int, default=0,
                    help="send one packet from each of N addresses from 198.18.0.0 instead")
    ap.add_argument("--frame-hex", default="",
                    help="xdp: send this frame (hex, Ethernet header first), rewritten into "
                         "every page before it is sent")
    ap.add_argument("--threads", type=int, default=1,
                    help="xdp with --rate: threads sending runs of --chunk frames (each run "
                         "ends in an idle ~25 ms wait that the other threads send through)")
    ap.add_argument("--chunk", type=int, default=0, help="xdp: frames per run")
    a = ap.parse_args(argv)
    if a.burst_sources:
        base = struct.unpack("!I", socket.inet_aton(BURST_NET))[0]
        frames = [frame(socket.inet_ntoa(struct.pack("!I", base + i)), RECV_IP,
                        1024 + i % 60000, i) for i in range(a.burst_sources)]
        s = PacketSender(a.ifname, frames)
        sent, i = 0, 0
        t0 = time.monotonic()
        while i < s.n:
            k = min(64, s.n - i)
            r = s.send(i, k)
            i += r
            sent += r
            time.sleep(0.0002)  # paced: the veth ring (256) must never overflow here
            if time.monotonic() - t0 > 60:
                break
        print(json.dumps({"sent": sent, "wall": time.monotonic() - t0}))
        return
    if a.gen == "xdp" and a.threads > 1 and a.rate > 0:
        return threaded_xdp_sender(a)
    if a.gen == "xdp":
        send = xdp_sender(a).send
        chunk = 4096
    else:
        frames = [frame(a.src, RECV_IP, 10000 + (a.seed * 4096 + i) % 50000, a.seed * 4096 + i)
                  for i in range(a.batch)]
        s = PacketSender(a.ifname, frames)
        send = lambda k: s.send(0, k)  # noqa: E731
        chunk = s.n
    if a.start_at:
        time.sleep(max(0.0, a.start_at - time.time()))
    t0 = time.monotonic()
    cpu0 = time.process_time()
    end = t0 + a.seconds
    sent = 0
    if a.gen == "xdp":
        # Each BPF_PROG_TEST_RUN call ends with a wait of ~30 ms (the run's page pool and
        # memory model are torn down), so calls are sized to ~0.2 s of sending at full speed,
        # and to 0.1 s worth of the set rate (bursts at full speed, then a pause).
        chunk = 65536 if a.rate <= 0 else max(64, int(a.rate * 0.1))
        while True:
            now = time.monotonic()
            if now >= end:
                break
            if a.rate > 0:
                due = int((now - t0) * a.rate)
                if sent >= due:
                    time.sleep(min(0.01, (sent - due + 1) / a.rate))
                    continue
            c0 = time.monotonic()
            sent += send(chunk)
            if a.rate <= 0:
                chunk = int(min(4_000_000, max(4096, chunk * 0.2 / max(1e-4, time.monotonic() - c0))))
    elif a.rate <= 0:
        while time.monotonic() < end:
            sent += send(chunk)
    else:
        step = 32
        while True:
            now = time.monotonic()
            if now >= end:
                break
            due = int((now - t0) * a.rate)
            if sent >= due:
                time.sleep(min(0.001, (sent - due + step) / a.rate))
                continue
            sent += send(min(chunk, due - sent + step))
    # CPU of this process while sending, in ns (CLOCK_PROCESS_CPUTIME_ID): includes the
    # receiving side's softirq work that ran in its context, as it does on a veth.
    print(json.dumps({"sent": sent, "wall": time.monotonic() - t0,
                      "cpu": time.process_time() - cpu0}))


# ---------------------------------------------------------------------------------------
# Namespaces, dnsd, nftables


def sh(args, check=True):
    out = subprocess.run(args, capture_output=True, text=True)
    if check and out.returncode != 0:
        raise RuntimeError(f"{' '.join(args)}: {out.stderr.strip()}")
    return out.stdout


class Veth:
    """Two namespaces joined by a veth pair; deleted by close()."""

    def __init__(self):
        self.made = []
        try:
            self._make()
        except BaseException:
            self.close()
            raise

    def _make(self):
        tag = f"{os.getpid() % 100000}"
        self.ns_s, self.ns_r = f"pbx{tag}s", f"pbx{tag}r"
        self.if_s, self.if_r = f"pbx{tag}s", f"pbx{tag}r"
        for ns in (self.ns_s, self.ns_r):
            sh(["ip", "netns", "add", ns])
            self.made.append(ns)
            sh(["ip", "-n", ns, "link", "set", "lo", "up"])
        # One queue per CPU on both ends, as a multi-queue NIC: each CPU's packets go through
        # its own ring and NAPI instance instead of all CPUs filling one ring.
        q = str(os.cpu_count() or 1)
        sh(["ip", "-n", self.ns_s, "link", "add", self.if_s, "numtxqueues", q, "numrxqueues", q,
            "address", MAC_S, "type", "veth", "peer", "name", self.if_r, "numtxqueues", q,
            "numrxqueues", q, "address", MAC_R, "netns", self.ns_r])
        for ns, ifn, mine in ((self.ns_s, self.if_s, SEND_IP), (self.ns_r, self.if_r, RECV_IP)):
            sh(["ip", "-n", ns, "addr", "add", f"{mine}/24", "dev", ifn])
        self.up()

    def up(self):
        """Brings both ends up, with static neighbours (no ARP) and the route back to the
        burst range."""
        for ns, ifn, peer, peer_mac in ((self.ns_s, self.if_s, RECV_IP, MAC_R),
                                        (self.ns_r, self.if_r, SEND_IP, MAC_S),
                                        (self.ns_r, self.if_r, BLOCKED, MAC_S)):
            sh(["ip", "-n", ns, "link", "set", ifn, "up"])
            sh(["ip", "-n", ns, "neigh", "replace", peer, "lladdr", peer_mac, "dev", ifn,
                "nud", "permanent"])
        # Route the burst range back over the veth, so the kernel would accept it too.
        sh(["ip", "-n", self.ns_r, "route", "replace", "198.18.0.0/15", "via", SEND_IP])

    def exec(self, ns, argv):
        return ["ip", "netns", "exec", ns] + argv

    def link_stats(self):
        """Every packet counter of both veth ends: `ip -s link` rx/tx packets and dropped, and
        `ethtool -S` (per-queue XDP verdicts, ring and transmit errors), by name."""
        out = {}
        for ns, ifn in ((self.ns_s, self.if_s), (self.ns_r, self.if_r)):
            try:
                j = json.loads(sh(["ip", "-n", ns, "-j", "-s", "link", "show", ifn]))[0]
                st = j.get("stats64", {})
                for d in ("rx", "tx"):
                    for k in ("packets", "dropped"):
                        out[f"{ifn}.{d}_{k}"] = st.get(d, {}).get(k, 0)
            except (RuntimeError, ValueError, IndexError):
                pass
            text = subprocess.run(self.exec(ns, ["ethtool", "-S", ifn]), capture_output=True,
                                  text=True).stdout
            for line in text.splitlines():
                k, _, v = line.partition(":")
                k = k.strip()
                if v.strip().isdigit() and "bytes" not in k and k != "peer_ifindex":
                    out[f"{ifn}.{k}"] = int(v)
        return out

    def gro(self, on):
        sh(self.exec(self.ns_r, ["ethtool", "-K", self.if_r, "gro", "on" if on else "off"]))

    def close(self):
        for ns in reversed(self.made):
            subprocess.run(["ip", "netns", "del", ns], capture_output=True)
        self.made = []


def ksoftirqd_ns():
    """CPU time of the ksoftirqd threads (softirq work deferred out of the senders), in ns."""
    total = 0
    for p in os.listdir("/proc"):
        if p.isdigit():
            try:
                with open(f"/proc/{p}/comm") as f:
                    if not f.read().startswith("ksoftirqd/"):
                        continue
                with open(f"/proc/{p}/schedstat") as f:
                    total += int(f.read().split()[0])
            except OSError:
                pass
    return total


def softnet_dropped():
    """Packets dropped because a CPU's backlog was full (/proc/net/softnet_stat, column 2)."""
    total = 0
    try:
        with open("/proc/net/softnet_stat") as f:
            for line in f:
                total += int(line.split()[1], 16)
    except OSError:
        pass
    return total


def stat_cpus():
    """Per-CPU (softirq, busy, total) jiffies: busy and total from wall and idle time as
    common.proc_stat_cpus has them; softirq is /proc/stat's, sampled at the tick (no IRQ time
    accounting in this kernel): coarse."""
    out = {}
    cpus = c.proc_stat_cpus()
    with open("/proc/stat") as f:
        for line in f:
            if line.startswith("cpu") and line[3].isdigit():
                p = line.split()
                cpu = int(p[0][3:])
                busy, total = cpus.get(cpu, (0.0, 0.0))
                out[cpu] = (int(p[7]), busy, total)
    return out


def stat_delta(a, b):
    """(softirq seconds, busy seconds) summed over CPUs, and per CPU softirq shares."""
    si = sum(b[k][0] - a[k][0] for k in b) / HZ
    busy = sum(b[k][1] - a[k][1] for k in b) / HZ
    return si, busy


NFT_HOOK = {
    "nft-ingress": ("netdev", "type filter hook ingress device \"{dev}\" priority -500;"),
    "nft-raw": ("ip", "type filter hook prerouting priority raw;"),
    "nft-input": ("ip", "type filter hook input priority filter;"),
}


def nft_setup(veth, case):
    fam, hook = NFT_HOOK[case]
    rules = (f"table {fam} palisade_bench {{\n"
             f"  set blocked {{ type ipv4_addr; flags interval; elements = {{ {BLOCKED} }} }}\n"
             f"  chain c {{ {hook.format(dev=veth.if_r)}\n"
             f"    ip saddr @blocked counter drop\n  }}\n}}\n")
    p = subprocess.run(veth.exec(veth.ns_r, ["nft", "-f", "-"]), input=rules, text=True,
                       capture_output=True)
    if p.returncode != 0:
        raise RuntimeError(f"nft: {p.stderr.strip()}")
    return fam


def nft_teardown(veth, fam):
    subprocess.run(veth.exec(veth.ns_r, ["nft", "delete", "table", fam, "palisade_bench"]),
                   capture_output=True)


def nft_dropped(veth, fam):
    out = sh(veth.exec(veth.ns_r, ["nft", "-j", "list", "table", fam, "palisade_bench"]))
    for item in json.loads(out).get("nftables", []):
        rule = item.get("rule")
        if rule:
            for e in rule.get("expr", []):
                if "counter" in e:
                    return e["counter"]["packets"]
    return 0


def start_dnsd(veth, tmp, case):
    zone = os.path.join(tmp, "bench.test.zone")
    with open(zone, "w") as f:
        f.write("$ORIGIN bench.test.\n$TTL 60\n@ SOA ns hm 1 60 60 60 60\n@ NS ns\n"
                "ns A 192.0.2.2\n")
    extra = c.RRL_OFF if c.dnsd_accepts(c.RRL_OFF)[0] else ""
    if case.startswith("xdp"):
        mode = case.split("-")[1]
        # pin = false: `ip netns exec` gives dnsd its own /sys; the maps die with dnsd.
        extra += (f"\n[xdp]\ninterface = \"{veth.if_r}\"\nmode = \"{mode}\"\n"
                  "dns_ports = [53]\nrate = 0\nburst = 0\npin = false\n")
    conf = c.dnsd_conf(tmp, [RECV_IP], PORT, [("bench.test.", zone)], extra=extra)
    sock = os.path.join(tmp, "dnsd.sock")
    if os.path.exists(sock):
        os.unlink(sock)
    srv = c.Server("dnsd-" + case, veth.exec(veth.ns_r, [c.dnsd_bin(), "serve", "-c", conf]),
                   0, env=dict(os.environ, RUST_LOG="info"))
    t0 = time.monotonic()
    while time.monotonic() - t0 < 20:
        if srv.proc.poll() is not None:
            raise RuntimeError(f"dnsd exited:\n{srv.tail()}")
        if os.path.exists(sock):
            try:
                st = c.ctl_stats(sock)
                if not case.startswith("xdp") or "xdp.pass" in st:
                    return srv, sock, conf
                if "running without XDP" in srv.tail():
                    raise RuntimeError("dnsd runs without XDP: "
                                       + srv.tail().strip().splitlines()[-1][-300:])
            except (OSError, ValueError):
                pass
        time.sleep(0.05)
    raise RuntimeError(f"dnsd did not come up:\n{srv.tail()}")


def start_senders(veth, seconds, rate_total, start_at, gen):
    """One sender per CPU, pinned; returns the Popen list."""
    procs = []
    ncpu = os.cpu_count() or 1
    per = rate_total / ncpu if rate_total else 0
    # The XDP generator sleeps ~30 ms at the end of each run: two per CPU at full speed keep
    # the CPU sending while one of them waits.
    per_cpu = 2 if gen == "xdp" and not rate_total else 1
    for cpu in [k for k in range(ncpu) for _ in range(per_cpu)]:
        argv = veth.exec(veth.ns_s, [sys.executable, os.path.abspath(__file__), "_send",
                                     "--ifname", veth.if_s,
                                     "--seconds", str(seconds),
                                     "--rate", str(per), "--start-at", str(start_at),
                                     "--seed", str(cpu), "--gen", gen])
        procs.append(subprocess.Popen(c.niced(argv, "load", cpu), stdout=subprocess.PIPE,
                                      stderr=subprocess.PIPE, text=True))
    return procs


def collect(procs, timeout):
    res = []
    for p in procs:
        try:
            out, err = p.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            p.kill()
            out, err = p.communicate()
        if p.returncode != 0:
            raise RuntimeError(f"sender failed: {err.strip()[-400:]}")
        res.append(json.loads(out.strip().splitlines()[-1]))
    return res


def dropped_counter(case, sock, veth, fam):
    if case.startswith("xdp"):
        st = c.ctl_stats(sock)
        return st.get("xdp.drop_blocked_addr", 0) + st.get("xdp.drop_blocked_prefix", 0)
    return nft_dropped(veth, fam)


def run_load(case, veth, sock, fam, seconds, rate_total, base_si_rate, gen):
    """One sending window. Rates and /proc/stat over its inner part; the senders' own CPU and
    the drop counter over the whole of it."""
    lead = 0.8
    floor = case == "floor"
    links0 = veth.link_stats()
    dz0 = 0 if floor else dropped_counter(case, sock, veth, fam)
    k0 = ksoftirqd_ns()
    start_at = time.time() + lead
    procs = start_senders(veth, seconds, rate_total, start_at, gen)
    margin = min(1.0, seconds * 0.15)
    time.sleep(max(0.0, start_at + margin - time.time()))
    d0 = 0 if floor else dropped_counter(case, sock, veth, fam)
    s0, t0 = stat_cpus(), time.time()
    sn0 = softnet_dropped()
    while time.time() < start_at + seconds - margin:
        left = start_at + seconds - margin - time.time()
        c.progress(f"  {gen}/{case}: {'full speed' if not rate_total else f'{rate_total:,.0f}/s'} "
                 f"{left:4.1f} s left")
        time.sleep(min(0.5, max(0.0, left)))
    d1 = 0 if floor else dropped_counter(case, sock, veth, fam)
    s1, t1 = stat_cpus(), time.time()
    sn1 = softnet_dropped()
    c.done_progress()
    sent = collect(procs, seconds + 30)
    time.sleep(0.05)
    k1 = ksoftirqd_ns()
    dz1 = 0 if floor else dropped_counter(case, sock, veth, fam)
    links1 = veth.link_stats()
    wall = t1 - t0
    si, busy = stat_delta(s0, s1)
    si_net = max(0.0, si - base_si_rate * wall)
    offered = sum(x["sent"] for x in sent)
    dropped = d1 - d0
    if floor:
        dropped = sum(x["sent"] / x["wall"] for x in sent) * wall
    sender_cpu = sum(x["cpu"] for x in sent)
    ksi = (k1 - k0) / 1e9
    r = {
        "offered_pps": sum(x["sent"] / x["wall"] for x in sent),
        "offered": offered,
        "dropped_pps": dropped / wall,
        "dropped": offered if floor else dz1 - dz0,
        "lost_elsewhere": 0 if floor else max(0, offered - (dz1 - dz0)),
        "window_s": round(wall, 3),
        "sender_cpu_s": round(sender_cpu, 4),
        "ksoftirqd_cpu_s": round(ksi, 4),
        "cpu_ns_per_packet": (sender_cpu + ksi) * 1e9 / offered if offered else None,
        "softirq_cpu": si / wall,
        "softirq_cpu_per_cpu": {k: round((s1[k][0] - s0[k][0]) / HZ / wall, 4) for k in s1},
        "softirq_cpu_background": base_si_rate,
        "softirq_ticks": sum(s1[k][0] - s0[k][0] for k in s1),
        "softirq_ns_per_drop": si_net * 1e9 / dropped if dropped and si_net > 0 else None,
        "busy_cpu": busy / wall,
        # Busy CPUs not explained by the senders and ksoftirqd: other work on the shared
        # machine (builds, fuzzers), dnsd, and softirq that ran in other tasks' context.
        "other_work_cpus": max(0.0, busy / wall - (sender_cpu + ksi)
                               / max(1e-9, max(x["wall"] for x in sent))),
        "backlog_dropped": sn1 - sn0,
        "veth_counters": {k: links1[k] - links0.get(k, 0) for k in links1
                          if links1[k] - links0.get(k, 0)},
    }
    return r


def background_softirq(seconds):
    a = stat_cpus()
    time.sleep(seconds)
    b = stat_cpus()
    return stat_delta(a, b)[0] / seconds


def run_case(gen, case, veth, tmpbase, args):
    tmp = tempfile.mkdtemp(prefix=f"{case}-", dir=tmpbase)
    fam = None
    srv = None
    try:
        sock, conf = None, None
        if case == "floor":
            veth.gro(False)
        else:
            srv, sock, conf = start_dnsd(veth, tmp, case)
            c.ctl(sock, "block", "add", f"{BLOCKED}/32", "--ttl", "3600", "--reason", "bench")
            if not case.startswith("xdp"):
                fam = nft_setup(veth, case)
            veth.gro(gen == "xdp")
        # The XDP mirror writes the block into the kernel map within its idle wait.
        time.sleep(0.5)
        out = {"name": case, "source": gen, "id": f"{gen}/{case}",
               "note": FLOOR_NOTE[gen] if case == "floor" else NOTE[case],
               "gro": gen == "xdp" and case != "floor",
               "config": open(conf).read() if conf else ""}
        bg = background_softirq(1.0 if args.quick else 2.0)
        out["max"] = run_load(case, veth, sock, fam, args.seconds, 0, bg, gen)
        bg = background_softirq(1.0 if args.quick else 2.0)
        out["fixed"] = run_load(case, veth, sock, fam, args.seconds, args.fixed_pps, bg, gen)
        if case.startswith("xdp"):
            st = c.ctl_stats(sock)
            out["xdp_counters"] = {k: v for k, v in st.items() if k.startswith("xdp.")}
            out["attached_mode"] = case.split("-")[1]
        m, f = out["max"], out["fixed"]
        c.log(f"  {gen}/{case:<11}: full speed {m['offered_pps'] / 1e3:5.0f}k offered/s, "
              f"{m['dropped_pps'] / 1e3:5.0f}k dropped/s, {m['lost_elsewhere']:,} lost elsewhere, "
              f"{fmt_ns(m['cpu_ns_per_packet'])}/packet | at {f['offered_pps'] / 1e3:.0f}k/s: "
              f"{fmt_ns(f['cpu_ns_per_packet'])}/packet, softirq ticks "
              f"{fmt_ns(f['softirq_ns_per_drop'])}/drop")
        return out
    finally:
        if fam:
            nft_teardown(veth, fam)
        if srv:
            srv.stop()


def fmt_ms(v):
    return "n/a (not within 30 s)" if v is None else f"{v:.0f} ms"


def fmt_ns(v):
    return "n/a" if v is None else f"{v:.0f} ns"


def burst(veth, tmpbase, args):
    """100,000 addresses imported while both cores flood; then one packet from each."""
    tmp = tempfile.mkdtemp(prefix="burst-", dir=tmpbase)
    srv = None
    try:
        srv, sock, _ = start_dnsd(veth, tmp, "xdp-native")
        c.ctl(sock, "block", "add", f"{BLOCKED}/32", "--ttl", "3600", "--reason", "bench")
        base = struct.unpack("!I", socket.inet_aton(BURST_NET))[0]
        lst = os.path.join(tmp, "burst.txt")
        with open(lst, "w") as f:
            for i in range(BURST_N):
                f.write(socket.inet_ntoa(struct.pack("!I", base + i)) + "\n")
        time.sleep(0.5)
        st0 = c.ctl_stats(sock)
        flood_s = 8.0 if args.quick else 12.0
        veth.gro(args.burst_gen == "xdp")
        start_at = time.time() + 0.8
        procs = start_senders(veth, flood_s, 0, start_at, args.burst_gen)
        time.sleep(max(0.0, start_at + 1.5 - time.time()))
        d0 = c.ctl_stats(sock)
        w_d0 = time.time()
        # The import runs on a thread; this one polls the mirror's counter meanwhile (the
        # control socket serves both at once), every ~2 ms.
        import threading
        box = {}

        def do_import():
            # The operator's command itself (its process start is part of the time).
            p = subprocess.run([c.dnsd_bin(), "ctl", "--socket", sock, "block", "import", lst,
                                "--ttl", "3600", "--reason", "burst"], capture_output=True,
                               text=True, timeout=60)
            box["t"] = time.monotonic()
            if p.returncode != 0:
                box["error"] = f"dnsd ctl block import: {(p.stdout + p.stderr).strip()[-300:]}"
            box["reply"] = p.stdout

        c.measuring_thread_fifo(True)
        th = threading.Thread(target=do_import, daemon=True)
        t_req = time.monotonic()
        th.start()
        t_all = w_all = None
        polls = 0
        last = d0
        first_seen = None
        while time.monotonic() - t_req < 30:
            last = c.ctl_stats(sock)
            polls += 1
            n = last.get("xdp.mirror.upserted", 0) - d0.get("xdp.mirror.upserted", 0)
            if n and first_seen is None:
                first_seen = time.monotonic()
            if n >= BURST_N:
                t_all, w_all = time.monotonic(), time.time()
                break
            c.progress(f"  burst: {n:,} of {BURST_N:,} in the kernel map")
            time.sleep(0.002)
        c.measuring_thread_fifo(False)
        th.join(60)
        if "error" in box:
            raise RuntimeError(box["error"])
        reply, t_ack = box.get("reply", ""), box.get("t", time.monotonic())
        c.done_progress()
        d1 = c.ctl_stats(sock)
        w_d1 = time.time()
        sent = collect(procs, flood_s + 30)
        flood_running = w_all is not None and w_all < start_at + flood_s
        # Verification, flood over: one packet from each address.
        time.sleep(0.3)
        v0 = c.ctl_stats(sock)
        p = subprocess.run(veth.exec(veth.ns_s, [sys.executable, os.path.abspath(__file__),
                                                 "_send", "--ifname", veth.if_s,
                                                 "--burst-sources", str(BURST_N)]),
                           capture_output=True, text=True, timeout=120)
        if p.returncode != 0:
            raise RuntimeError(f"burst sender: {p.stderr.strip()[-400:]}")
        vsent = json.loads(p.stdout.strip().splitlines()[-1])["sent"]
        time.sleep(0.5)
        v1 = c.ctl_stats(sock)
        dv = {k: v1.get(k, 0) - v0.get(k, 0) for k in v1 if k.startswith("xdp.")}
        dm = {k: last.get(k, 0) - st0.get(k, 0) for k in last if k.startswith("xdp.mirror.")}
        res = {
            "entries": BURST_N,
            "import_reply": reply.strip(),
            "ctl_import_ms": (t_ack - t_req) * 1e3,
            "all_in_kernel_ms": None if t_all is None else (t_all - t_req) * 1e3,
            "first_in_kernel_ms": None if first_seen is None else (first_seen - t_req) * 1e3,
            "stats_polls": polls,
            "flood_offered_pps": sum(s["sent"] / s["wall"] for s in sent),
            "flood_dropped_pps_during": (d1.get("xdp.drop_blocked_addr", 0)
                                         - d0.get("xdp.drop_blocked_addr", 0)) / (w_d1 - w_d0),
            "flood_still_running_at_completion": flood_running,
            "mirror_delta": dm,
            "verify_sent": vsent,
            "verify_dropped_blocked": dv.get("xdp.drop_blocked_addr", 0),
            "verify_passed": dv.get("xdp.pass", 0),
            "verify_seen": sum(v for k, v in dv.items() if not k.startswith("xdp.mirror.")
                               and k not in ("xdp.block_expired", "xdp.rate_new_source")),
        }
        res["lost"] = BURST_N - res["verify_dropped_blocked"]
        c.log(f"  burst: {BURST_N:,} addresses imported in {res['ctl_import_ms']:.0f} ms (control "
              f"reply), all in the kernel map after "
              f"{fmt_ms(res['all_in_kernel_ms'])}; "
              f"flood {res['flood_offered_pps'] / 1e3:.0f}k/s meanwhile; verification: "
              f"{res['verify_dropped_blocked']:,} of {vsent:,} dropped as blocked, "
              f"{res['verify_passed']} passed; mirror {dm}")
        return res
    finally:
        if srv:
            srv.stop()


def main():
    if len(sys.argv) > 1 and sys.argv[1] == "_send":
        return sender_main(sys.argv[2:])
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", default=c.quick())
    ap.add_argument("--seconds", type=float, default=None, help="per sending window")
    ap.add_argument("--fixed-pps", type=float, default=200_000,
                    help="offered rate of the fixed runs, all CPUs together")
    ap.add_argument("--sources", default=",".join(SOURCES),
                    help="traffic sources: skb (AF_PACKET), xdp (XDP frames redirected)")
    ap.add_argument("--cases", default=",".join(CASES), help="cases run (within each source's)")
    ap.add_argument("--burst-gen", choices=["skb", "xdp"], default="xdp",
                    help="the flood running during the 100k import")
    ap.add_argument("--no-burst", action="store_true")
    args = ap.parse_args()
    if args.seconds is None:
        args.seconds = 3.0 if args.quick else 8.0
    cmd = "bench/scripts/xdp_veth.py " + " ".join(sys.argv[1:])
    if os.geteuid() != 0:
        c.log("xdp_veth.py needs root (network namespaces, XDP)")
        sys.exit(2)
    c.need("ip", "nft", "ethtool", "taskset")
    want = [x for x in args.cases.split(",") if x] + ["floor"]
    plan = [(g, k) for g in args.sources.split(",") if g in SOURCES for k in SOURCES[g]
            if k in want]
    c.log(f"XDP on a veth: {c.machine()}; {args.seconds:g} s per window; fixed rate "
          f"{args.fixed_pps:,.0f}/s; command: {cmd}")
    tmpbase = tempfile.mkdtemp(prefix="palisade-xdp-")
    # How busy the machine is with other work before anything of ours runs (shared cores).
    st_a = stat_cpus()
    time.sleep(1.0)
    st_b = stat_cpus()
    other_before = stat_delta(st_a, st_b)[1]
    c.log(f"  other work on the machine before the run: {other_before:.2f} CPUs of "
          f"{os.cpu_count()}")
    veth = Veth()

    def on_signal(signum, _frame):
        veth.close()
        sys.exit(128 + signum)

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    results, errors = [], {}
    burst_res = None
    try:
        for gen, case in plan:
            try:
                results.append(run_case(gen, case, veth, tmpbase, args))
            except Exception as e:  # noqa: BLE001 — a failed case is reported, others run
                c.log(f"  {gen}/{case}: FAILED: {e}")
                errors[f"{gen}/{case}"] = str(e)[-600:]
        if not args.no_burst:
            try:
                burst_res = burst(veth, tmpbase, args)
            except Exception as e:  # noqa: BLE001
                c.log(f"  burst: FAILED: {e}")
                burst_res = {"error": str(e)[-600:]}
    finally:
        veth.close()
    by = {r["id"]: r for r in results}
    ratios = {}
    for r in results:
        fl = by.get(f"{r['source']}/floor")
        for run in ("max", "fixed"):
            a = r[run]
            a["rx_ns_per_packet"] = (a["cpu_ns_per_packet"] - fl[run]["cpu_ns_per_packet"]
                                     if fl and r["name"] != "floor" and a["cpu_ns_per_packet"]
                                     and fl[run]["cpu_ns_per_packet"] else None)
    for r in results:
        ref = by.get(f"{r['source']}/{REFERENCE}")
        if not ref or r["name"] == "floor":
            continue
        for run in ("max", "fixed"):
            a, b = r[run], ref[run]
            q = lambda x, y: x / y if x is not None and y else None  # noqa: E731
            a["dropped_pps_vs_ref"] = q(a["dropped_pps"], b["dropped_pps"])
            a["rx_ns_vs_ref"] = q(a["rx_ns_per_packet"], b["rx_ns_per_packet"])
            a["cpu_per_packet_vs_ref"] = q(a["cpu_ns_per_packet"], b["cpu_ns_per_packet"])
            a["softirq_per_drop_vs_ref"] = q(a["softirq_ns_per_drop"], b["softirq_ns_per_drop"])
        if r["name"] == "xdp-native":
            g = r["source"]
            ratios[f"{g}: packets dropped/s at full speed, XDP native / nft raw"] = \
                r["max"]["dropped_pps_vs_ref"]
            if r["fixed"]["rx_ns_vs_ref"] is not None:
                ratios[f"{g}: receiving CPU per packet at {args.fixed_pps:,.0f}/s, XDP native / nft raw"] = \
                    r["fixed"]["rx_ns_vs_ref"]
                ratios[f"{g}: receiving CPU per packet at full speed, XDP native / nft raw"] = \
                    r["max"]["rx_ns_vs_ref"]
            ratios[f"{g}: sending + receiving CPU per packet at {args.fixed_pps:,.0f}/s, "
                   "XDP native / nft raw"] = r["fixed"]["cpu_per_packet_vs_ref"]
            ratios[f"{g}: softirq (ticks) per drop at {args.fixed_pps:,.0f}/s, XDP native / nft raw"] = \
                r["fixed"]["softirq_per_drop_vs_ref"]
    print(f"\nXDP on a veth, {c.machine()}, {os.cpu_count()} senders (one per CPU), "
          f"{args.seconds:g} s windows")
    print(f"command: {cmd}")
    print(f"reference: {REFERENCE} of the same source; CPU per packet = senders' CPU (with the "
          f"receiving softirq work that runs in their context) + ksoftirqd, per packet sent; "
          f"receiving = that minus the floor")
    print(f"{'source/case':>16} {'offered/s':>10} {'dropped/s':>10} {'vs ref':>7} | "
          f"{'at ' + format(args.fixed_pps, ',.0f') + '/s: CPU/pkt':>22} {'vs ref':>7} "
          f"{'receiving':>9} {'vs ref':>7} {'softirq/drop':>12}")
    vr = lambda v: "" if v is None else f"{v:.2f}x"  # noqa: E731
    for r in results:
        m, f = r["max"], r["fixed"]
        print(f"{r['id']:>16} {m['offered_pps']:10,.0f} {m['dropped_pps']:10,.0f} "
              f"{vr(m.get('dropped_pps_vs_ref')):>7} | {fmt_ns(f['cpu_ns_per_packet']):>22} "
              f"{vr(f.get('cpu_per_packet_vs_ref')):>7} {fmt_ns(f['rx_ns_per_packet']):>9} "
              f"{vr(f.get('rx_ns_vs_ref')):>7} {fmt_ns(f['softirq_ns_per_drop']):>12}")
    c.save("xdp_veth", {"machine": c.machine(), "cores": os.cpu_count(), "command": cmd,
                        "quick": args.quick, "seconds": args.seconds,
                        "fixed_pps": args.fixed_pps, "sched": c.sched_note(),
                        "reference": REFERENCE, "kernel": os.uname().release,
                        "sources": {"skb": "AF_PACKET sendmmsg (qdisc bypassed), veth GRO off",
                                    "xdp": "XDP frames redirected into the veth by a "
                                           "BPF_PROG_TEST_RUN live-frames generator, veth GRO on"},
                        "when": time.strftime("%Y-%m-%d %H:%M:%S"), "results": results,
                        "other_work_before_cpus": round(other_before, 3),
                        "errors": errors, "ratios": ratios, "burst": burst_res})
    if errors or (burst_res and "error" in burst_res) or not results:
        sys.exit(1)


if __name__ == "__main__":
    main()
