//! What http-front's block map refuses from every automatic writer: prefixes shorter than
//! `[block] min_prefix_v4` / `min_prefix_v6`, and the never-block set — the rules file's
//! `[global] never_block`, plus what http-front adds by itself: its Redis server, sentinels
//! and the masters and replicas they name, its ClickHouse servers, its PROXY protocol proxies (`[server] proxy_allow`), its `X-Forwarded-For`
//! hops (`[server] real_ip_from`), its upstreams and the
//! node's own addresses. Made at start and on every reload; `ctl status`
//! lists the effective set and where each entry came from.

use shield::block::BlockMap;
use shield::never_block::{NeverBlock, own_addresses};

use crate::config::Config;

/// The never-block set of `cfg` with `rules`' `[global] never_block` first.
pub fn never_block(cfg: &Config, rules: &shield::rules::Prepared) -> NeverBlock {
    let mut nb = NeverBlock::new();
    for n in &rules.global_lists().never_block {
        nb.push(*n, "rules file [global] never_block");
    }
    if let Some(r) = &cfg.redis {
        r.add_never_block(&mut nb);
    }
    if let Some(c) = &cfg.events.clickhouse {
        c.add_never_block(&mut nb);
    }
    for n in cfg.proxy.nets() {
        nb.push(*n, "proxy_allow");
    }
    for n in cfg.real_ip.nets() {
        nb.push(*n, "real_ip_from");
    }
    for u in &cfg.upstreams {
        for s in &u.servers {
            nb.push(s.ip().into(), "upstream");
        }
    }
    for n in own_addresses() {
        nb.push(n, "own address");
    }
    nb
}

/// Installs the policy of `cfg` and `rules` into `blocks`.
pub fn install(blocks: &BlockMap, cfg: &Config, rules: &shield::rules::Prepared) {
    blocks.install_policy(&cfg.block, never_block(cfg, rules));
}
