//! A classic-BPF socket filter on the listeners that drops SYNs from blocked sources in the
//! kernel, so that they never become connections.
//!
//! The accept-time check costs a blocked source an `accept4`, a socket, a reset and a
//! `close` — kernel work that dwarfs the lookup itself. With this filter a blocked source's
//! SYN is dropped before the kernel makes a request socket: no SYN-ACK, no accept, no
//! descriptor. The filter is what the XDP guard does, one layer up and without privileges
//! (`SO_ATTACH_FILTER` needs none): it covers the first `server.syn_filter_max` entries of
//! the block map, IPv4 and IPv6 (a dual-stack IPv6 listener sees its IPv4 clients' SYNs with
//! their IPv4 header); entries beyond the cap keep the accept-time check.
//!
//! The program (rebuilt and swapped atomically on block-map changes, at most every 100 ms):
//! packets with ACK set or without SYN pass after three instructions (accepted connections
//! inherit the filter, so established traffic pays only that); an IPv4 source is compared
//! with every IPv4 host entry (`jeq`) and prefix (`and`, `jeq`), an IPv6 source word by word
//! with every IPv6 entry; a match drops the SYN. The kernel JITs classic BPF, so a thousand
//! entries cost about a microsecond per SYN, and nothing for established traffic.

use std::collections::BTreeMap;
use std::os::fd::OwnedFd;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use ipnet::{IpNet, Ipv4Net, Ipv6Net};
use shield::block::{Change, Delivery, Traffic};
use socket2::{SockFilter, Socket};

const LD_B_ABS: u16 = 0x30;
const LD_W_ABS: u16 = 0x20;
const JSET_K: u16 = 0x45;
const JEQ_K: u16 = 0x15;
const JA: u16 = 0x05;
const RET_K: u16 = 0x06;
const AND_K: u16 = 0x54;
const TAX: u16 = 0x07;
const TXA: u16 = 0x87;
/// Loads at this offset address the network header (`SKF_NET_OFF`).
const NET_OFF: u32 = (-0x10_0000i32) as u32;
/// Longest classic BPF program the kernel takes.
const MAX_INSNS: usize = 4096;
/// Host compares per block before a drop instruction (jump offsets are 8 bits).
const CHUNK: usize = 250;
const ACCEPT: u32 = u32::MAX;
const DROP: u32 = 0;

/// Most entries a program can hold (IPv4 host addresses; prefixes and IPv6 entries cost more).
pub const MAX_ENTRIES: usize = 3_500;

fn ins(code: u16, jt: u8, jf: u8, k: u32) -> SockFilter {
    SockFilter::new(code, jt, jf, k)
}

/// Instructions of an IPv6 entry: a load, a compare and, for a partial word, a mask per
/// 32-bit word of its prefix, then the drop.
fn v6_cost(n: &Ipv6Net) -> usize {
    let p = usize::from(n.prefix_len());
    2 * p.div_ceil(32) + usize::from(p % 32 != 0) + 1
}

/// The filter program dropping SYNs from `nets`, and how many of `nets` it holds (what does
/// not fit in 4096 instructions is left out, the costliest kind first).
pub fn program(nets: &[IpNet]) -> (Vec<SockFilter>, usize) {
    let mut hosts: Vec<Ipv4Net> = Vec::new();
    let mut prefixes: Vec<Ipv4Net> = Vec::new();
    let mut v6: Vec<Ipv6Net> = Vec::new();
    for n in nets {
        match n {
            IpNet::V4(n) if n.prefix_len() == 32 => hosts.push(*n),
            IpNet::V4(n) => prefixes.push(*n),
            IpNet::V6(n) => v6.push(*n),
        }
    }
    // Budget: the head (10), the IPv4 part's load, move and accept (3), the IPv6 part's
    // check and accept (3); 1 + 2/CHUNK per host, 4 per prefix, `v6_cost` per IPv6 entry.
    let budget = MAX_INSNS - 16;
    let mut v6_total: usize = v6.iter().map(v6_cost).sum();
    let cost = |h: usize, pf: usize, v6: usize| h + 2 * h.div_ceil(CHUNK) + 4 * pf + v6;
    while cost(hosts.len(), prefixes.len(), v6_total) > budget {
        let (h, pf) = (hosts.len(), prefixes.len() * 4);
        if v6_total >= h && v6_total >= pf {
            v6_total -= v6.pop().as_ref().map_or(0, v6_cost);
        } else if pf > h {
            prefixes.pop();
        } else {
            hosts.pop();
        }
    }
    let held = hosts.len() + prefixes.len() + v6.len();

    let mut v4p = vec![
        ins(LD_W_ABS, 0, 0, NET_OFF + 12), // source address
        ins(TAX, 0, 0, 0),
    ];
    for chunk in hosts.chunks(CHUNK) {
        let n = chunk.len();
        for (i, h) in chunk.iter().enumerate() {
            // On a match jump over the remaining compares and the `ja`, onto the drop.
            v4p.push(ins(JEQ_K, (n - i) as u8, 0, u32::from(h.addr())));
        }
        v4p.push(ins(JA, 0, 0, 1));
        v4p.push(ins(RET_K, 0, 0, DROP));
    }
    for net in &prefixes {
        v4p.push(ins(TXA, 0, 0, 0));
        v4p.push(ins(AND_K, 0, 0, u32::from(net.netmask())));
        v4p.push(ins(JEQ_K, 0, 1, u32::from(net.network())));
        v4p.push(ins(RET_K, 0, 0, DROP));
    }
    v4p.push(ins(RET_K, 0, 0, ACCEPT));

    let mut p = vec![
        ins(LD_B_ABS, 0, 0, 13),      // TCP flags
        ins(JSET_K, 0, 1, 0x10),      // ACK set: not a new connection
        ins(RET_K, 0, 0, ACCEPT),     //
        ins(JSET_K, 1, 0, 0x02),      // SYN?
        ins(RET_K, 0, 0, ACCEPT),     //
        ins(LD_B_ABS, 0, 0, NET_OFF), // IP version
        ins(AND_K, 0, 0, 0xf0),       //
        ins(JEQ_K, 1, 0, 0x40),       // IPv4: the IPv4 part
        ins(JA, 0, 0, v4p.len() as u32),
    ];
    p.extend(v4p);
    p.push(ins(JEQ_K, 1, 0, 0x60)); // IPv6: its entries; anything else passes
    p.push(ins(RET_K, 0, 0, ACCEPT));
    for net in &v6 {
        let bits = u32::from(net.prefix_len());
        let octets = net.network().octets();
        // (code, k) of the entry's loads, masks and compares, then its drop.
        let mut e: Vec<(u16, u32)> = Vec::with_capacity(10);
        for w in 0..bits.div_ceil(32) as usize {
            e.push((LD_W_ABS, NET_OFF + 8 + 4 * w as u32));
            let left = bits - 32 * w as u32;
            if left < 32 {
                e.push((AND_K, !(u32::MAX >> left)));
            }
            let word = u32::from_be_bytes([
                octets[4 * w],
                octets[4 * w + 1],
                octets[4 * w + 2],
                octets[4 * w + 3],
            ]);
            e.push((JEQ_K, word));
        }
        let last = e.len(); // the drop's index
        for (j, (code, k)) in e.into_iter().enumerate() {
            // A mismatch jumps past the entry's drop, onto the next entry.
            let jf = if code == JEQ_K { (last - j) as u8 } else { 0 };
            p.push(ins(code, 0, jf, k));
        }
        p.push(ins(RET_K, 0, 0, DROP));
    }
    p.push(ins(RET_K, 0, 0, ACCEPT));
    (p, held)
}

/// Counters of the filter (shown by /metrics).
#[derive(Debug, Default)]
pub struct FilterStats {
    /// Entries in the installed program.
    pub entries: AtomicU64,
    /// Block entries that did not fit (they keep the accept-time check).
    pub overflow: AtomicU64,
    /// Programs installed.
    pub installs: AtomicU64,
    /// Installs the kernel refused.
    pub failures: AtomicU64,
}

/// Keeps the listeners' filter equal to (the first `max` entries of) the block map.
pub async fn run(
    blocks: Arc<shield::block::BlockMap>,
    listeners: Vec<OwnedFd>,
    max: usize,
    stats: Arc<FilterStats>,
) {
    let max = max.min(MAX_ENTRIES);
    let socks: Vec<Socket> = listeners.into_iter().map(Socket::from).collect();
    let mut sub = blocks.subscribe("http-front-syn-filter");
    let mut set: BTreeMap<IpNet, u64> = BTreeMap::new();
    let mut overflow = false;
    let mut refill = tokio::time::interval(Duration::from_secs(5));
    refill.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        let mut changed = false;
        tokio::select! {
            _ = sub.changed() => {
                while let Some(d) = sub.poll(65_536) {
                    changed = true;
                    match d {
                        Delivery::Changes(cs) => {
                            for c in cs {
                                match c {
                                    // Only blocks of every packet stop a SYN: never a
                                    // suspect nor a DNS-only block.
                                    Change::Upsert(e) if !e.stops(Traffic::Stream) => {
                                        set.remove(&e.net);
                                    }
                                    Change::Upsert(e) => {
                                        if set.len() < max || set.contains_key(&e.net) {
                                            set.insert(e.net, e.expires_ms);
                                        } else {
                                            overflow = true;
                                        }
                                    }
                                    Change::Remove { net, .. } => {
                                        set.remove(&net);
                                    }
                                }
                            }
                        }
                        Delivery::Resync(entries) => {
                            set.clear();
                            overflow = false;
                            for e in entries.into_iter().filter(|e| e.stops(Traffic::Stream)) {
                                if set.len() < max {
                                    set.insert(e.net, e.expires_ms);
                                } else {
                                    overflow = true;
                                }
                            }
                        }
                    }
                }
            }
            _ = refill.tick() => {
                let now = shield::clock::unix_ms();
                let before = set.len();
                set.retain(|_, exp| *exp > now);
                changed = set.len() != before;
                if overflow && set.len() < max {
                    overflow = false;
                    for e in blocks.entries() {
                        if !e.is_expired(now)
                            && e.stops(Traffic::Stream)
                            && !set.contains_key(&e.net)
                        {
                            if set.len() < max {
                                set.insert(e.net, e.expires_ms);
                                changed = true;
                            } else {
                                overflow = true;
                            }
                        }
                    }
                }
            }
        }
        if !changed {
            continue;
        }
        let now = shield::clock::unix_ms();
        let nets: Vec<IpNet> = set
            .iter()
            .filter(|(_, exp)| **exp > now)
            .map(|(n, _)| *n)
            .collect();
        let (prog, held) = program(&nets);
        for s in &socks {
            match s.attach_filter(&prog) {
                Ok(()) => {
                    stats.installs.fetch_add(1, Ordering::Relaxed);
                }
                Err(e) => {
                    stats.failures.fetch_add(1, Ordering::Relaxed);
                    tracing::warn!(error = %e, entries = nets.len(), "SYN filter refused by the kernel");
                }
            }
        }
        stats.entries.store(held as u64, Ordering::Relaxed);
        let missing = if overflow || held < nets.len() {
            (blocks.len() as u64).saturating_sub(held as u64)
        } else {
            0
        };
        stats.overflow.store(missing, Ordering::Relaxed);
        // Coalesce bursts of escalations into one install.
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::{IpAddr, Ipv4Addr};

    fn would_drop(nets: &[IpNet], src: IpAddr) -> bool {
        nets.iter().any(|n| n.contains(&src))
    }

    /// A tiny classic-BPF interpreter for the instructions `program` emits, run on a TCP
    /// segment with `flags` from `src`.
    fn run_prog(p: &[SockFilter], flags: u8, src: IpAddr) -> u32 {
        // SockFilter is repr(transparent) over libc::sock_filter.
        let p: &[libc::sock_filter] =
            unsafe { std::slice::from_raw_parts(p.as_ptr().cast(), p.len()) };
        // The network header: the version, and the source where IPv4 and IPv6 keep it.
        let mut net = [0u8; 40];
        match src {
            IpAddr::V4(a) => {
                net[0] = 0x45;
                net[12..16].copy_from_slice(&a.octets());
            }
            IpAddr::V6(a) => {
                net[0] = 0x60;
                net[8..24].copy_from_slice(&a.octets());
            }
        }
        let (mut a, mut x, mut pc) = (0u32, 0u32, 0usize);
        loop {
            let i = &p[pc];
            pc += 1;
            match i.code {
                LD_B_ABS if i.k == 13 => a = u32::from(flags),
                LD_B_ABS if i.k == NET_OFF => a = u32::from(net[0]),
                LD_W_ABS => {
                    let at = i.k.wrapping_sub(NET_OFF) as usize;
                    a = u32::from_be_bytes(net[at..at + 4].try_into().unwrap());
                }
                AND_K => a &= i.k,
                TAX => x = a,
                TXA => a = x,
                JA => pc += i.k as usize,
                JSET_K => pc += if a & i.k != 0 { i.jt } else { i.jf } as usize,
                JEQ_K => pc += if a == i.k { i.jt } else { i.jf } as usize,
                RET_K => return i.k,
                c => panic!("unexpected opcode {c:#x}"),
            }
        }
    }

    #[test]
    fn drops_syns_from_listed_sources_only() {
        let mut nets: Vec<IpNet> = (0..600u32)
            .map(|i| {
                Ipv4Net::new(Ipv4Addr::from(0x0a00_0000 + i * 7), 32)
                    .unwrap()
                    .into()
            })
            .collect();
        for n in [
            "192.0.2.0/24",
            "198.51.100.128/25",
            "2001:db8::7/128",
            "2001:db8:1:2::/64",
            "2001:db8:ff00::/40",
            "2001:db8:aaaa:bbbb:cccc::/80",
        ] {
            nets.push(n.parse().unwrap());
        }
        let (p, held) = program(&nets);
        assert_eq!(held, nets.len());
        assert!(p.len() < MAX_INSNS);
        let syn = 0x02;
        for probe in [
            "10.0.0.0",
            "10.0.6.214",
            "10.0.16.97",
            "10.0.0.1",
            "192.0.2.99",
            "198.51.100.255",
            "198.51.100.1",
            "2001:db8::7",
            "2001:db8::8",
            "2001:db8:1:2:ffff::1",
            "2001:db8:1:3::1",
            "2001:db8:ff7f::1",
            "2001:db8:ff00:1::",
            "2001:db8:feff::1",
            "2001:db8:aaaa:bbbb:cccc:0:1:2",
            "2001:db8:aaaa:bbbb:cccd::",
            "::ffff:10.0.0.0",
        ] {
            let ip: IpAddr = probe.parse().unwrap();
            let want = if would_drop(&nets, ip) { DROP } else { ACCEPT };
            assert_eq!(run_prog(&p, syn, ip), want, "{ip}");
        }
        let listed = IpAddr::from(Ipv4Addr::from(0x0a00_0000 + 7 * 300));
        assert_eq!(run_prog(&p, syn, listed), DROP);
        assert_eq!(run_prog(&p, 0x12, listed), ACCEPT, "SYN-ACK/ACK pass");
        assert_eq!(
            run_prog(&p, 0x10, listed),
            ACCEPT,
            "established traffic passes"
        );
        let listed6: IpAddr = "2001:db8:1:2::9".parse().unwrap();
        assert_eq!(run_prog(&p, syn, listed6), DROP);
        assert_eq!(run_prog(&p, 0x10, listed6), ACCEPT);
        assert_eq!(run_prog(&program(&[]).0, syn, listed), ACCEPT);
        assert_eq!(run_prog(&program(&[]).0, syn, listed6), ACCEPT);
        // Past the instruction budget the costliest kind gives way first.
        let full: Vec<IpNet> = (0..5000u32)
            .map(|i| {
                Ipv4Net::new(Ipv4Addr::from(i << 8), 24 + (i % 2) as u8 * 8)
                    .unwrap()
                    .into()
            })
            .chain((0..500u32).map(|i| {
                IpNet::V6(Ipv6Net::new(std::net::Ipv6Addr::from(u128::from(i) << 64), 64).unwrap())
            }))
            .collect();
        let (p, held) = program(&full);
        assert!(
            p.len() <= MAX_INSNS && held > 1000 && held < 5500,
            "{} {held}",
            p.len()
        );
        // Entries are left out from the end: the first of each kind stays.
        for a in ["0.0.0.9", "0.0.1.0", "::1"] {
            assert_eq!(run_prog(&p, syn, a.parse().unwrap()), DROP, "{a}");
        }
        assert_eq!(run_prog(&p, syn, "0.0.1.1".parse().unwrap()), ACCEPT);
    }

    #[test]
    fn the_kernel_takes_the_program() {
        let nets: Vec<IpNet> = (0..MAX_ENTRIES as u32)
            .map(|i| Ipv4Net::new(Ipv4Addr::from(i), 32).unwrap().into())
            .collect();
        let mixed: Vec<IpNet> = ["127.0.0.0/8", "2001:db8::/48", "2001:db8:1::1/128", "::/0"]
            .iter()
            .map(|n| n.parse().unwrap())
            .collect();
        for domain in [socket2::Domain::IPV4, socket2::Domain::IPV6] {
            let s = Socket::new(domain, socket2::Type::STREAM, None).unwrap();
            s.attach_filter(&program(&nets).0).unwrap();
            s.attach_filter(&program(&mixed).0).unwrap();
        }
    }
}
