//! A classic-BPF socket filter on the IPv4 listeners that drops SYNs from blocked IPv4 sources in the kernel, so that they never become connections.
//!
//! The accept-time check costs a blocked source an `accept4`, a socket, a reset and a
//! `close` — kernel work that dwarfs the lookup itself. With this filter a blocked source's
//! SYN is dropped before the kernel makes a request socket: no SYN-ACK, no accept, no
//! descriptor. The filter is what the XDP guard does, one layer up and without privileges
//! (`SO_ATTACH_FILTER` needs none): it covers the first `server.syn_filter_max` IPv4 entries
//! of the block map; IPv6 sources and entries beyond the cap keep the accept-time check.
//!
//! The program (rebuilt and swapped atomically on block-map changes, at most every 100 ms):
//! packets with ACK set or without SYN pass after three instructions (accepted connections
//! inherit the filter, so established traffic pays only that), non-IPv4 packets pass, then
//! the source is compared with every host entry (`jeq`) and every prefix (`and`, `jeq`);
//! a match drops the SYN. The kernel JITs classic BPF, so a thousand entries cost about a
//! microsecond per SYN, and nothing for established traffic.

use std::collections::BTreeMap;
use std::os::fd::OwnedFd;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use ipnet::{IpNet, Ipv4Net};
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

/// Most entries a program can hold (host addresses; prefixes cost four times as much).
pub const MAX_ENTRIES: usize = 3_500;

fn ins(code: u16, jt: u8, jf: u8, k: u32) -> SockFilter {
    SockFilter::new(code, jt, jf, k)
}

/// The filter program dropping SYNs from `nets` (hosts first, then prefixes), and how many
/// of `nets` it holds (what does not fit in 4096 instructions is left out).
pub fn program(nets: &[Ipv4Net]) -> (Vec<SockFilter>, usize) {
    let mut p = vec![
        ins(LD_B_ABS, 0, 0, 13),           // TCP flags
        ins(JSET_K, 0, 1, 0x10),           // ACK set: not a new connection
        ins(RET_K, 0, 0, ACCEPT),          //
        ins(JSET_K, 1, 0, 0x02),           // SYN?
        ins(RET_K, 0, 0, ACCEPT),          //
        ins(LD_B_ABS, 0, 0, NET_OFF),      // IP version
        ins(AND_K, 0, 0, 0xf0),            //
        ins(JEQ_K, 1, 0, 0x40),            // IPv4?
        ins(RET_K, 0, 0, ACCEPT),          //
        ins(LD_W_ABS, 0, 0, NET_OFF + 12), // source address
        ins(TAX, 0, 0, 0),
    ];
    let (mut hosts, mut prefixes): (Vec<&Ipv4Net>, Vec<&Ipv4Net>) =
        nets.iter().partition(|n| n.prefix_len() == 32);
    // Budget: the head above, the final accept, 1 + 2/CHUNK per host, 4 per prefix.
    let budget = MAX_INSNS - p.len() - 1;
    let cost = |h: usize, pf: usize| h + 2 * h.div_ceil(CHUNK) + 4 * pf;
    while cost(hosts.len(), prefixes.len()) > budget {
        if prefixes.len() * 4 > hosts.len() {
            prefixes.pop();
        } else {
            hosts.pop();
        }
    }
    let held = hosts.len() + prefixes.len();
    for chunk in hosts.chunks(CHUNK) {
        let n = chunk.len();
        for (i, h) in chunk.iter().enumerate() {
            // On a match jump over the remaining compares and the `ja`, onto the drop.
            p.push(ins(JEQ_K, (n - i) as u8, 0, u32::from(h.addr())));
        }
        p.push(ins(JA, 0, 0, 1));
        p.push(ins(RET_K, 0, 0, DROP));
    }
    for net in prefixes {
        p.push(ins(TXA, 0, 0, 0));
        p.push(ins(AND_K, 0, 0, u32::from(net.netmask())));
        p.push(ins(JEQ_K, 0, 1, u32::from(net.network())));
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
    /// IPv4 block entries that did not fit (they keep the accept-time check).
    pub overflow: AtomicU64,
    /// Programs installed.
    pub installs: AtomicU64,
    /// Installs the kernel refused.
    pub failures: AtomicU64,
}

/// Keeps the listeners' filter equal to (the first `max` IPv4 entries of) the block map.
pub async fn run(
    blocks: Arc<shield::block::BlockMap>,
    listeners: Vec<OwnedFd>,
    max: usize,
    stats: Arc<FilterStats>,
) {
    let max = max.min(MAX_ENTRIES);
    let socks: Vec<Socket> = listeners.into_iter().map(Socket::from).collect();
    let mut sub = blocks.subscribe("http-front-syn-filter");
    let mut set: BTreeMap<Ipv4Net, u64> = BTreeMap::new();
    let mut overflow = false;
    let mut refill = tokio::time::interval(Duration::from_secs(5));
    refill.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let v4 = |net: IpNet| match net {
        IpNet::V4(n) => Some(n),
        IpNet::V6(_) => None,
    };
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
                                        if let Some(n) = v4(e.net) {
                                            set.remove(&n);
                                        }
                                    }
                                    Change::Upsert(e) => {
                                        if let Some(n) = v4(e.net) {
                                            if set.len() < max || set.contains_key(&n) {
                                                set.insert(n, e.expires_ms);
                                            } else {
                                                overflow = true;
                                            }
                                        }
                                    }
                                    Change::Remove { net, .. } => {
                                        if let Some(n) = v4(net) {
                                            set.remove(&n);
                                        }
                                    }
                                }
                            }
                        }
                        Delivery::Resync(entries) => {
                            set.clear();
                            overflow = false;
                            for e in entries.into_iter().filter(|e| e.stops(Traffic::Stream)) {
                                if let Some(n) = v4(e.net) {
                                    if set.len() < max {
                                        set.insert(n, e.expires_ms);
                                    } else {
                                        overflow = true;
                                    }
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
                        if let Some(n) = v4(e.net)
                            && !e.is_expired(now)
                            && e.stops(Traffic::Stream)
                            && !set.contains_key(&n)
                        {
                            if set.len() < max {
                                set.insert(n, e.expires_ms);
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
        let nets: Vec<Ipv4Net> = set
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
    use std::net::Ipv4Addr;

    fn would_drop(nets: &[Ipv4Net], src: Ipv4Addr) -> bool {
        nets.iter().any(|n| n.contains(&src))
    }

    /// A tiny classic-BPF interpreter for the instructions `program` emits.
    fn run_prog(p: &[SockFilter], flags: u8, ip_version: u8, src: Ipv4Addr) -> u32 {
        // SockFilter is repr(transparent) over libc::sock_filter.
        let p: &[libc::sock_filter] =
            unsafe { std::slice::from_raw_parts(p.as_ptr().cast(), p.len()) };
        let (mut a, mut x, mut pc) = (0u32, 0u32, 0usize);
        loop {
            let i = &p[pc];
            pc += 1;
            match i.code {
                LD_B_ABS if i.k == 13 => a = u32::from(flags),
                LD_B_ABS if i.k == NET_OFF => a = u32::from(ip_version << 4),
                LD_W_ABS => a = u32::from(src),
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
        let mut nets: Vec<Ipv4Net> = (0..600u32)
            .map(|i| Ipv4Net::new(Ipv4Addr::from(0x0a00_0000 + i * 7), 32).unwrap())
            .collect();
        nets.push("192.0.2.0/24".parse().unwrap());
        nets.push("198.51.100.128/25".parse().unwrap());
        let (p, held) = program(&nets);
        assert_eq!(held, nets.len());
        assert!(p.len() < MAX_INSNS);
        let syn = 0x02;
        for probe in [
            0x0a00_0000u32,
            0x0a00_0000 + 7 * 250,
            0x0a00_0000 + 7 * 599,
            0x0a00_0001,
            0xc000_0263,
            0xc633_64ff,
            0xc633_6401,
        ] {
            let ip = Ipv4Addr::from(probe);
            let want = if would_drop(&nets, ip) { DROP } else { ACCEPT };
            assert_eq!(run_prog(&p, syn, 4, ip), want, "{ip}");
        }
        let listed = Ipv4Addr::from(0x0a00_0000 + 7 * 300);
        assert_eq!(run_prog(&p, syn, 4, listed), DROP);
        assert_eq!(run_prog(&p, 0x12, 4, listed), ACCEPT, "SYN-ACK/ACK pass");
        assert_eq!(
            run_prog(&p, 0x10, 4, listed),
            ACCEPT,
            "established traffic passes"
        );
        assert_eq!(
            run_prog(&p, syn, 6, listed),
            ACCEPT,
            "IPv6 is left to the accept check"
        );
        assert_eq!(run_prog(&program(&[]).0, syn, 4, listed), ACCEPT);
        let full: Vec<Ipv4Net> = (0..5000u32)
            .map(|i| Ipv4Net::new(Ipv4Addr::from(i << 8), 24 + (i % 2) as u8 * 8).unwrap())
            .collect();
        let (p, held) = program(&full);
        assert!(
            p.len() <= MAX_INSNS && held > 1000 && held < 5000,
            "{} {held}",
            p.len()
        );
    }

    #[test]
    fn the_kernel_takes_the_program() {
        let s = Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).unwrap();
        let nets: Vec<Ipv4Net> = (0..MAX_ENTRIES as u32)
            .map(|i| Ipv4Net::new(Ipv4Addr::from(i), 32).unwrap())
            .collect();
        s.attach_filter(&program(&nets).0).unwrap();
        s.attach_filter(&program(&["127.0.0.0/8".parse().unwrap()]).0)
            .unwrap();
    }
}
