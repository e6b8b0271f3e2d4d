//! What http-front's block map refuses from every automatic writer: prefixes shorter than
//! `[block] min_prefix_v4` / `min_prefix_v6`, and the never-block set — the rules file's
//! `[global] never_block`, plus what http-front adds by itself: its Redis server, its
//! upstreams and the node's own addresses. Made at start and on every reload; `ctl status`
//! lists the effective set and where each entry came from.

use shield::block::BlockMap;
use shield::never_block::{BlockPolicy, NeverBlock, own_addresses, url_addresses};

use crate::config::Config;

/// The never-block set of `cfg` with `rules`' `[global] never_block` first.
pub fn never_block(cfg: &Config, rules: &shield::rules::Prepared) -> NeverBlock {
    let mut nb = NeverBlock::new();
    for n in &rules.global_lists().never_block {
        nb.push(*n, "rules file [global] never_block");
    }
    if let Some(r) = &cfg.redis {
        for ip in url_addresses(&r.url) {
            nb.push(ip.into(), "redis server");
        }
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

/// Installs the policy of `cfg` and `rules` into `blocks`; automatic entries it no longer
/// allows are lifted (logged).
pub fn install(blocks: &BlockMap, cfg: &Config, rules: &shield::rules::Prepared) {
    let nb = never_block(cfg, rules);
    let n = nb.len();
    let lifted = blocks.set_policy(BlockPolicy {
        min_prefix_v4: cfg.block.min_prefix_v4,
        min_prefix_v6: cfg.block.min_prefix_v6,
        never_block: std::sync::Arc::new(nb),
    });
    tracing::info!(
        never_block = n,
        min_prefix_v4 = cfg.block.min_prefix_v4,
        min_prefix_v6 = cfg.block.min_prefix_v6,
        "block policy in force"
    );
    if lifted > 0 {
        tracing::warn!(lifted, "blocks of never-block prefixes lifted");
    }
}

/// The policy in force, as `ctl status` shows it.
pub fn render(blocks: &BlockMap) -> String {
    let p = blocks.policy();
    format!(
        "block policy: min_prefix_v4 /{}, min_prefix_v6 /{}\nnever_block ({} entries):\n{}",
        p.min_prefix_v4,
        p.min_prefix_v6,
        p.never_block.len(),
        p.never_block.render()
    )
}
