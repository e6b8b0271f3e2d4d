//! What dnsd's block map refuses from every automatic writer: prefixes shorter than `[block]
//! min_prefix_v4` / `min_prefix_v6`, and the never-block set — the rules file's `[global]
//! never_block`, plus what dnsd adds by itself: its Redis server, sentinels and the masters
//! they name, its ClickHouse servers, its PROXY
//! protocol proxies (`[server] proxy_allow`), its transfer peers
//! (primaries, `notify` targets, and `allow_transfer` / `allow_notify` entries no wider than
//! the minimum prefixes), the servers it asks (the ALIAS resolver, DNSSEC policies' `parent`)
//! and the node's own addresses. Its XDP mirror writes the set into the guard's never-block
//! trie: no daemon's block on the node drops these in XDP. Made at start and again on every
//! reload; `ctl status` lists the effective set and where each entry came from.

use shield::never_block::{NeverBlock, host_addresses, own_addresses};

use crate::config::Config;

/// `base` with `rules`' `[global] never_block` entries first.
pub fn merge(rules: Option<&shield::rules::Prepared>, base: &NeverBlock) -> NeverBlock {
    let mut nb = NeverBlock::new();
    if let Some(p) = rules {
        for n in &p.global_lists().never_block {
            nb.push(*n, "rules file [global] never_block");
        }
    }
    for e in base.entries() {
        nb.push(e.net, &e.source);
    }
    nb
}

/// Where a transfer peer's never-block entry came from.
const TRANSFER_PEER: &str = "transfer peer";

/// Most transfer peers exempt from the XDP rate (the allow tries hold 16,384 with the
/// `[global] allow` list).
const RATE_EXEMPT_PEERS: usize = 1024;

/// The node's transfer peers (primaries, secondaries, NOTIFY targets) exempt from the XDP
/// per-source rate: hosts and prefixes no wider than a /24 or a /56 (an `allow_transfer` of
/// a /16 exempted 65,536 forgeable addresses), 1,024 at most.
/// Taken from `own`, the set [`own_set`] made.
pub fn rate_exempt_peers(own: &NeverBlock) -> Vec<ipnet::IpNet> {
    let mut out: Vec<ipnet::IpNet> = Vec::new();
    for p in own.entries() {
        let narrow = match p.net {
            ipnet::IpNet::V4(v) => v.prefix_len() >= 24,
            ipnet::IpNet::V6(v) => v.prefix_len() >= 56,
        };
        if &*p.source == TRANSFER_PEER && narrow && !out.contains(&p.net) {
            if out.len() == RATE_EXEMPT_PEERS {
                tracing::warn!(
                    "more than {RATE_EXEMPT_PEERS} transfer peers: the rest are held to the XDP rate"
                );
                break;
            }
            out.push(p.net);
        }
    }
    out
}

/// What dnsd adds by itself: its Redis server, its transfer peers (from `cfg`'s zone list),
/// the node's own addresses.
pub fn own_set(cfg: &Config) -> NeverBlock {
    let mut nb = NeverBlock::new();
    if let Some(r) = &cfg.redis {
        r.add_never_block(&mut nb);
    }
    if let Some(c) = &cfg.events.clickhouse {
        c.add_never_block(&mut nb);
    }
    for n in cfg.server.proxies().nets() {
        nb.push(*n, "proxy_allow");
    }
    let (min4, min6) = (cfg.block.min_prefix_v4, cfg.block.min_prefix_v6);
    for z in &cfg.zones {
        for a in z.primaries.iter().chain(&z.notify) {
            match crate::config::transfer::parse_primary(a).map(|p| p.0) {
                Ok(sa) => nb.push(sa.ip().into(), TRANSFER_PEER),
                Err(_) => {
                    for ip in host_addresses(a) {
                        nb.push(ip.into(), TRANSFER_PEER);
                    }
                }
            }
        }
        for p in z.allow_transfer.iter().chain(&z.allow_notify) {
            if let Ok((n, _)) = crate::config::transfer::parse_allow(p) {
                let narrow = match n {
                    ipnet::IpNet::V4(v) => v.prefix_len() >= min4,
                    ipnet::IpNet::V6(v) => v.prefix_len() >= min6,
                };
                if narrow {
                    nb.push(n, TRANSFER_PEER);
                }
            }
        }
    }
    // Whom dnsd asks itself: the ALIAS resolver, the parents asked for DS records.
    if let Some(r) = &cfg.alias.resolver
        && let Ok(sa) = crate::config::transfer::parse_addr(r)
    {
        nb.push(sa.ip().into(), "alias resolver");
    }
    for p in &cfg.dnssec_policies {
        for a in &p.parent {
            if let Ok(sa) = crate::config::transfer::parse_addr(a) {
                nb.push(sa.ip().into(), "dnssec parent");
            }
        }
    }
    for n in own_addresses() {
        nb.push(n, "own address");
    }
    nb
}
