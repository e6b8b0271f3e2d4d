//! Shared by the integration tests: the root/BPF gate, crafted frames, CPU pinning.

#![allow(dead_code)]

use std::net::{Ipv4Addr, Ipv6Addr};
use std::sync::atomic::{AtomicU32, Ordering};

use xdp_guard::{XdpConfig, XdpGuard};

/// True when XDP tests can run. Otherwise prints a loud skip message, or panics under CI or
/// `PALISADE_STRICT`, where the suite runs as root and a skip would hide a broken setup.
pub fn xdp_ready(test: &str) -> bool {
    let why = xdp_guard::check_available()
        .err()
        .map(|e| e.to_string())
        .or_else(|| palisade_tests::netns::available().err());
    match why {
        None => true,
        Some(why) if palisade_tests::in_ci() => {
            panic!("{test}: XDP tests must run under CI, but: {why}")
        }
        Some(why) => {
            // Straight to fd 2: the test harness captures eprintln! of passing tests.
            use std::io::Write as _;
            let msg = format!("\n!!! SKIPPED {test}: needs root and BPF: {why} !!!\n");
            let _ = std::io::stderr().write_all(msg.as_bytes());
            false
        }
    }
}

/// A private (unpinned) guard with rate limiting on `ports` at `rate`/`burst`.
pub fn private_guard(ports: &[u16], rate: u64, burst: u64) -> XdpGuard {
    let mut cfg = XdpConfig::new("lo");
    cfg.pin = false;
    cfg.dns_ports = ports.to_vec();
    cfg.rate = rate;
    cfg.burst = burst;
    XdpGuard::load(&cfg).expect("load the XDP program")
}

/// A pin directory unique to this process and call, removed on drop.
pub struct PinDir(pub std::path::PathBuf);

static PIN: AtomicU32 = AtomicU32::new(0);

impl PinDir {
    /// A fresh path under /sys/fs/bpf (not created).
    pub fn new() -> Self {
        let n = PIN.fetch_add(1, Ordering::Relaxed);
        PinDir(format!("/sys/fs/bpf/palisade-test-{}-{n}", std::process::id()).into())
    }
}

impl Drop for PinDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Pins the calling thread to the CPU it runs on, so that per-CPU rate-limit buckets are
/// deterministic.
pub fn pin_to_current_cpu() {
    // SAFETY: sched_getcpu has no preconditions; a zeroed cpu_set_t is an empty set and
    // CPU_SET writes within it.
    unsafe {
        let cpu = usize::try_from(libc::sched_getcpu()).expect("sched_getcpu");
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_SET(cpu, &mut set);
        assert_eq!(
            libc::sched_setaffinity(0, size_of::<libc::cpu_set_t>(), &set),
            0,
            "sched_setaffinity"
        );
    }
}

pub const ETH_IP: u16 = 0x0800;
pub const ETH_IP6: u16 = 0x86dd;
pub const ETH_ARP: u16 = 0x0806;
pub const ETH_VLAN: u16 = 0x8100;
pub const ETH_QINQ: u16 = 0x88a8;

/// Ethernet header with `tags` VLAN tags (each with the given TPID) before `proto`.
pub fn eth(tags: &[u16], proto: u16) -> Vec<u8> {
    let mut f = vec![0x02, 0, 0, 0, 0, 2, 0x02, 0, 0, 0, 0, 1];
    for (i, tpid) in tags.iter().enumerate() {
        f.extend_from_slice(&tpid.to_be_bytes());
        f.extend_from_slice(&(100 + i as u16).to_be_bytes()); // TCI: VLAN id
    }
    f.extend_from_slice(&proto.to_be_bytes());
    f
}

/// UDP header (checksum 0) and payload.
pub fn udp(sport: u16, dport: u16, payload: &[u8]) -> Vec<u8> {
    let mut u = Vec::new();
    u.extend_from_slice(&sport.to_be_bytes());
    u.extend_from_slice(&dport.to_be_bytes());
    u.extend_from_slice(&((8 + payload.len()) as u16).to_be_bytes());
    u.extend_from_slice(&[0, 0]);
    u.extend_from_slice(payload);
    u
}

/// TCP header (SYN, no options).
pub fn tcp(sport: u16, dport: u16) -> Vec<u8> {
    let mut t = Vec::new();
    t.extend_from_slice(&sport.to_be_bytes());
    t.extend_from_slice(&dport.to_be_bytes());
    t.extend_from_slice(&[0, 0, 0, 1, 0, 0, 0, 0, 5 << 4, 0x02, 0xff, 0xff, 0, 0, 0, 0]);
    t
}

/// IPv4 header with `options` (padded to 4 bytes) and a fragment offset (8-byte units).
pub fn ipv4(
    src: Ipv4Addr,
    dst: Ipv4Addr,
    proto: u8,
    options: &[u8],
    frag: u16,
    l4: &[u8],
) -> Vec<u8> {
    let mut opts = options.to_vec();
    while !opts.len().is_multiple_of(4) {
        opts.push(0);
    }
    let ihl = 5 + opts.len() / 4;
    let total = ihl * 4 + l4.len();
    let mut h = vec![(4 << 4) | ihl as u8, 0];
    h.extend_from_slice(&(total as u16).to_be_bytes());
    h.extend_from_slice(&[0x12, 0x34]);
    h.extend_from_slice(&frag.to_be_bytes());
    h.extend_from_slice(&[64, proto, 0, 0]);
    h.extend_from_slice(&src.octets());
    h.extend_from_slice(&dst.octets());
    h.extend_from_slice(&opts);
    // The header checksum a real sender sets (the answer path updates it, never remakes it).
    let mut sum: u32 = h
        .chunks(2)
        .map(|w| u32::from(u16::from_be_bytes([w[0], w[1]])))
        .sum();
    while sum > 0xffff {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    h[10..12].copy_from_slice(&(!(sum as u16)).to_be_bytes());
    h.extend_from_slice(l4);
    h
}

/// One IPv6 extension header: (type, bytes after the 2-byte next/len prefix).
pub enum Ext {
    /// Hop-by-hop, routing or destination options with `len8` 8-byte units beyond the first.
    Opts(u8, u8),
    /// Fragment header with an offset in 8-byte units and the M flag.
    Frag(u16, bool),
}

pub const HOPOPTS: u8 = 0;
pub const ROUTING: u8 = 43;
pub const FRAGMENT: u8 = 44;
pub const DSTOPTS: u8 = 60;
pub const UDP: u8 = 17;
pub const TCP: u8 = 6;
pub const ICMP: u8 = 1;

/// IPv6 header, a chain of extension headers, then the L4 bytes of protocol `proto`.
pub fn ipv6(src: Ipv6Addr, dst: Ipv6Addr, exts: &[Ext], proto: u8, l4: &[u8]) -> Vec<u8> {
    let kinds: Vec<u8> = exts
        .iter()
        .map(|e| match e {
            Ext::Opts(t, _) => *t,
            Ext::Frag(..) => FRAGMENT,
        })
        .collect();
    let mut body = Vec::new();
    for (i, e) in exts.iter().enumerate() {
        let next = kinds.get(i + 1).copied().unwrap_or(proto);
        match e {
            Ext::Opts(_, len8) => {
                body.push(next);
                body.push(*len8);
                // PadN option filling the rest of the header.
                let rest = 6 + usize::from(*len8) * 8;
                body.push(1);
                body.push((rest - 2) as u8);
                body.extend(std::iter::repeat_n(0, rest - 2));
            }
            Ext::Frag(off, more) => {
                body.push(next);
                body.push(0);
                body.extend_from_slice(&((off << 3) | u16::from(*more)).to_be_bytes());
                body.extend_from_slice(&[0, 0, 0, 7]);
            }
        }
    }
    body.extend_from_slice(l4);
    let first = kinds.first().copied().unwrap_or(proto);
    let mut h = vec![0x60, 0, 0, 0];
    h.extend_from_slice(&(body.len() as u16).to_be_bytes());
    h.extend_from_slice(&[first, 64]);
    h.extend_from_slice(&src.octets());
    h.extend_from_slice(&dst.octets());
    h.extend_from_slice(&body);
    h
}

/// A full frame: Ethernet (+ tags) and an IP packet.
pub fn frame(tags: &[u16], proto: u16, ip: &[u8]) -> Vec<u8> {
    let mut f = eth(tags, proto);
    f.extend_from_slice(ip);
    f
}

/// An IPv4 UDP frame from `src` to port `dport`.
pub fn udp4(src: Ipv4Addr, dport: u16) -> Vec<u8> {
    frame(
        &[],
        ETH_IP,
        &ipv4(src, DST4, UDP, &[], 0, &udp(40000, dport, b"hello")),
    )
}

/// An IPv6 UDP frame from `src` to port `dport`.
pub fn udp6(src: Ipv6Addr, dport: u16) -> Vec<u8> {
    frame(
        &[],
        ETH_IP6,
        &ipv6(src, DST6, &[], UDP, &udp(40000, dport, b"hello")),
    )
}

pub const DST4: Ipv4Addr = Ipv4Addr::new(192, 0, 2, 2);
pub const DST6: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 0, 2);
