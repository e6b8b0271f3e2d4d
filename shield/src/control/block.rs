//! `ctl block add PREFIX [--ttl SECONDS] [--reason TEXT]`, `block del PREFIX`, `block list`,
//! `block import FILE`: the operator's hand on the block map, the same in both daemons.

use std::fmt::Write as _;
use std::time::Duration;

use crate::block::{BlockEntry, BlockMap, Evidence, InsertOutcome, Origin, RemoveCause};
use crate::never_block::Refusal;

use super::{Peer, Reply};

/// The `block` lines of a daemon's `ctl help` (a literal, for `concat!`), the same in both.
#[macro_export]
macro_rules! block_help {
    () => {
        "  block add PREFIX [--ttl SECONDS] [--reason TEXT] [--force]
                                      block an address or prefix (default 3600 s); --force
                                      for a never-block or too short prefix
  block del PREFIX                    lift a block
  block list                          the blocks and suspects in force: who decided, on
                                      what evidence, what they stop, when they end
  block import FILE [--ttl SECONDS] [--reason TEXT] [--force]
                                      block every address or prefix of FILE (one per line)
"
    };
}

/// TTL of an operator block when none is given.
pub const DEFAULT_TTL_SECS: u64 = 3600;

/// `block list`, `block del PREFIX` and the rest as [`command`], with the sources `rules`
/// hold for one tenant alone (`escalate`'s default in both daemons): in no block map, yet an
/// operator must see them, and lift them — root and the daemon's user; a control-group
/// member lifts only the blocks it added.
pub fn command_with_holds(
    blocks: &BlockMap,
    rules: Option<&crate::rules::RuleSet>,
    args: &[&str],
    peer: &Peer,
) -> Reply {
    let r = run_with_holds(blocks, rules, args, peer);
    // What changes the block map is in the log, by whom: `block list` showed `by uid N`
    // only while the entry stood, and a lift left nothing at all.
    if matches!(args.first(), Some(&("add" | "del" | "import"))) {
        let first = r.text.lines().next().unwrap_or("");
        tracing::info!(
            uid = peer.uid,
            command = %args.join(" ").escape_debug(),
            ok = r.ok,
            "ctl block: {}",
            first.escape_debug()
        );
    }
    r
}

fn run_with_holds(
    blocks: &BlockMap,
    rules: Option<&crate::rules::RuleSet>,
    args: &[&str],
    peer: &Peer,
) -> Reply {
    match (args, rules) {
        (["list"], Some(rules)) => {
            let mut r = command(blocks, args, peer);
            r.text.push_str(&holds_text(rules));
            r
        }
        (["del", net], Some(rules)) if peer.reads_as_the_daemon() => {
            let lifted = match crate::prefix::parse_net(net) {
                Some(n) => rules.lift_tenant_holds(n),
                None => Vec::new(),
            };
            let r = command(blocks, args, peer);
            if lifted.is_empty() {
                return r;
            }
            let tenants: Vec<String> = lifted.iter().map(|h| h.tenant.to_string()).collect();
            tracing::info!(net, tenants = %tenants.join(","), "held for tenants: lifted by the operator");
            let line = format!(
                "{} lifted for tenant {} (held for it alone)\n",
                lifted[0].net,
                tenants.join(", ")
            );
            if r.ok {
                Reply::ok(r.text + &line)
            } else {
                Reply::ok(line)
            }
        }
        _ => command(blocks, args, peer),
    }
}

/// After `block ARGS` answered `reply`: an `add` that succeeded is looked for in the node's
/// XDP block map for up to a second (`in_xdp`: whether it is there, `None` where the daemon
/// writes no XDP maps), and an `import` is given a second to be written (`full`: the blocks
/// the maps had no room for so far, `full_before` before the command); the reply warns when
/// they did not get in — the map full, the daemon then dropping those sources itself, every
/// packet of them still reaching it.
pub async fn warn_unless_in_xdp(
    args: &[&str],
    reply: &mut Reply,
    who: &str,
    in_xdp: impl Fn(ipnet::IpNet) -> Option<bool>,
    full_before: Option<u64>,
    full: impl Fn() -> Option<u64>,
) {
    let raise = "raise block_v4_entries/block_v6_entries/prefix_*_entries at `xdp-guard attach`";
    match (reply.ok, args) {
        (true, ["add", net, ..]) => {
            let Some(net) = crate::prefix::parse_net(net) else {
                return;
            };
            for _ in 0..40 {
                match in_xdp(net) {
                    Some(false) => tokio::time::sleep(Duration::from_millis(25)).await,
                    _ => return,
                }
            }
            reply.text.push_str(&format!(
                "warning: {net} is not in the XDP block map after 1 s (full? `xdp-guard stats`, \
                 `full` in {who}'s xdp.mirror counters; {raise}): {who} drops it itself\n"
            ));
        }
        (true, ["import", ..]) => {
            let Some(before) = full_before else {
                return;
            };
            tokio::time::sleep(Duration::from_secs(1)).await;
            let over = full().unwrap_or(before).saturating_sub(before);
            if over > 0 {
                reply.text.push_str(&format!(
                    "warning: {over} blocks did not fit the XDP block map ({raise}): {who} drops \
                     them itself\n"
                ));
            }
        }
        _ => {}
    }
}

/// The sources `rules` hold for one tenant alone now, as `block list` shows them.
fn holds_text(rules: &crate::rules::RuleSet) -> String {
    let now = (crate::clock::unix_ms() / 1000) as u32;
    let holds = rules.tenant_holds(now);
    if holds.is_empty() {
        return String::new();
    }
    let mut out = format!(
        "held for one tenant (escalate, dns/http = \"tenant\"; block del PREFIX lifts): {}\n",
        holds.len()
    );
    for h in holds {
        let _ = writeln!(
            out,
            "  {}\ttenant {}\t{} s left\t{}",
            h.net,
            h.tenant,
            h.until_s.saturating_sub(now),
            super::printable(&h.reason)
        );
    }
    out
}

/// Runs one `block` subcommand for `peer`.
pub fn command(blocks: &BlockMap, args: &[&str], peer: &Peer) -> Reply {
    let mut r = run(blocks, args, peer);
    // A change the state file cannot keep is made, but said so (it would not survive a
    // restart; a block just lifted would come back).
    if r.ok
        && matches!(args.first(), Some(&"add" | &"del" | &"import"))
        && let Some(why) = crate::block_state::failing()
    {
        r.text.push_str(&format!(
            "warning: the block state file cannot be written ({why}): this change will not survive a restart\n"
        ));
    }
    r
}

fn run(blocks: &BlockMap, args: &[&str], peer: &Peer) -> Reply {
    if args.contains(&"--force") && !peer.reads_as_the_daemon() {
        // Past the never-block set and the shortest prefixes: the Redis server, the node's
        // own addresses, 0.0.0.0/0. Root's and the daemon's user's alone.
        return Reply::err(
            "--force is for root and the daemon's own user, not members of the control group\n",
        );
    }
    match args {
        ["add", net, opts @ ..] => add(blocks, net, opts, peer),
        ["del", net] => match crate::prefix::parse_net(net) {
            Some(n) => del(blocks, n, peer),
            None => Reply::err(format!("{net:?} is not an address or prefix\n")),
        },
        ["list"] => Reply::ok(list(blocks)),
        ["import", file, opts @ ..] => import(blocks, file, opts, peer),
        _ => Reply::err(
            "usage: block add PREFIX [--ttl SECONDS] [--reason TEXT] [--force] | block del PREFIX | \
             block list | block import FILE [--ttl SECONDS] [--reason TEXT] [--force]\n",
        ),
    }
}

/// `block del`: root and the daemon's user lift any block (fleet-wide, an operator's
/// removal); a control-group member only one it added alone, which retracts this node's
/// decision and no other node's block of the prefix.
fn del(blocks: &BlockMap, n: ipnet::IpNet, peer: &Peer) -> Reply {
    // Another node's root operator block: that node keeps it (a peer's lift never lifts a
    // root's own block) and publishes it again.
    let mut owner = None;
    let r = if peer.reads_as_the_daemon() {
        blocks.remove_if(n, RemoveCause::Operator, |e| {
            if e.origin == Origin::Peer && e.evidence == Evidence::Operator {
                owner = e.node.clone();
            }
            true
        })
    } else {
        // Checked and lifted in one step: a root's block added meanwhile is not lifted.
        blocks.remove_if(n, RemoveCause::Retracted, |e| e.by == Some(peer.uid))
    };
    match r {
        Some(true) => match owner {
            // The lift went out fleet-wide and held on every node but the owner, which
            // published its block again at its next full republish (ten minutes, or at once
            // when Redis lost its data) — undone everywhere, with no word of it.
            Some(node) => Reply::ok(format!(
                "{n} unblocked\nwarning: {n} is an operator's block of node {node}: if root made it \
                 there, {node} keeps it and publishes it again (within ten minutes, or when Redis \
                 loses its data), and the other nodes take it back; lift it on {node} to lift it \
                 for good\n"
            )),
            None => Reply::ok(format!("{n} unblocked\n")),
        },
        Some(false) => Reply::err(format!(
            "{n} was not blocked by you alone: only root or the daemon's user may lift it\n"
        )),
        None => Reply::err(format!("{n} is not blocked\n")),
    }
}

/// The longest `--ttl` taken: a year.
pub const MAX_TTL_SECS: u64 = 366 * 86_400;

/// `--ttl SECONDS`, `--reason TEXT` and `--force`, with their defaults.
struct Options {
    ttl: u64,
    reason: String,
    force: bool,
}

fn options(opts: &[&str]) -> Result<Options, Reply> {
    let mut ttl = DEFAULT_TTL_SECS;
    let mut reason = "operator".to_string();
    let mut force = false;
    let mut i = 0;
    while i < opts.len() {
        if opts[i] == "--force" {
            force = true;
            i += 1;
            continue;
        }
        match (opts[i], opts.get(i + 1)) {
            ("--ttl", Some(v)) => match v.parse::<u64>() {
                Ok(t) if t > 0 && t <= MAX_TTL_SECS => ttl = t,
                // A typo's extra digits made a block for ever, renewed fleet-wide each day.
                Ok(t) if t > MAX_TTL_SECS => {
                    return Err(Reply::err(format!(
                        "--ttl {v}: at most {MAX_TTL_SECS} s (a year)\n"
                    )));
                }
                _ => return Err(Reply::err(format!("--ttl {v}: expected seconds above 0\n"))),
            },
            ("--reason", Some(v)) => reason = v.to_string(),
            (o, _) => return Err(Reply::err(format!("unknown or incomplete option {o}\n"))),
        }
        i += 2;
    }
    Ok(Options { ttl, reason, force })
}

/// Why `net` needs `--force`, in words, when it does.
fn needs_force(blocks: &BlockMap, net: &ipnet::IpNet) -> Option<String> {
    let policy = blocks.policy();
    match policy.check(net) {
        Ok(()) => None,
        Err((Refusal::ShortPrefix, _)) => Some(format!(
            "{net} is shorter than /{} ([block] min_prefix_v4/min_prefix_v6)",
            policy.min_len(net)
        )),
        Err((Refusal::NeverBlock, p)) => Some(match p {
            Some(p) => format!("{net} overlaps never-block {} ({})", p.net, p.source),
            None => format!("{net} overlaps a never-block prefix"),
        }),
    }
}

/// Most entries `block import` takes from one file (several block maps' worth).
pub const MAX_IMPORT: usize = 1_000_000;

/// Largest file `block import` reads: 64 MiB, three million addresses. (512 MiB read on a
/// runtime thread, several at once, held the TCP listeners for a second and a gigabyte.)
pub const IMPORT_MAX_BYTES: u64 = 64 << 20;

/// Set while an import runs: one at a time.
static IMPORTING: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Blocks every address or prefix listed in `file` (one per line, `#` comments), in one
/// batch; a bad line refuses the whole file with its line number (never its contents). The
/// file is read only if `peer` could read it.
fn import(blocks: &BlockMap, file: &str, opts: &[&str], peer: &Peer) -> Reply {
    let Options { ttl, reason, force } = match options(opts) {
        Ok(x) => x,
        Err(r) => return r,
    };
    use std::sync::atomic::Ordering;
    if IMPORTING.swap(true, Ordering::AcqRel) {
        return Reply::err("busy: another block import is running; try again when it ends\n");
    }
    struct Done;
    impl Drop for Done {
        fn drop(&mut self) {
            IMPORTING.store(false, Ordering::Release);
        }
    }
    let _done = Done;
    let f = match peer.open(std::path::Path::new(file)) {
        Ok(f) => f,
        Err(e) => return Reply::err(format!("{e}\n")),
    };
    let mut text = String::new();
    let max = IMPORT_MAX_BYTES;
    if let Err(e) = std::io::Read::read_to_string(&mut std::io::Read::take(f, max + 1), &mut text) {
        return Reply::err(format!("{file}: {e}\n"));
    }
    if text.len() as u64 > max {
        return Reply::err(format!("{file}: larger than {max} bytes\n"));
    }
    let now = crate::clock::unix_ms();
    let mut entries = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let l = line.split('#').next().unwrap_or("").trim();
        if l.is_empty() {
            continue;
        }
        if entries.len() >= MAX_IMPORT {
            return Reply::err(format!("{file}: more than {MAX_IMPORT} entries\n"));
        }
        match crate::prefix::parse_net(l) {
            Some(n) => {
                if !force && let Some(why) = needs_force(blocks, &n) {
                    return Reply::err(format!(
                        "{file}:{}: {why}: nothing imported (--force to block it anyway)\n",
                        i + 1
                    ));
                }
                entries.push(member(
                    BlockEntry::operator(n, Duration::from_secs(ttl), now, &reason),
                    peer,
                ))
            }
            None => {
                return Reply::err(format!(
                    "{file}:{}: not an address or prefix; nothing imported\n",
                    i + 1
                ));
            }
        }
    }
    let n = entries.len();
    let out = if force {
        tracing::warn!(
            file,
            entries = n,
            "block import --force: the policy is not applied"
        );
        blocks.insert_batch_forced(entries)
    } else {
        blocks.insert_batch(entries)
    };
    Reply::ok(format!("{n} entries imported for {ttl} s ({out:?})\n"))
}

fn add(blocks: &BlockMap, net: &str, opts: &[&str], peer: &Peer) -> Reply {
    let Some(n) = crate::prefix::parse_net(net) else {
        return Reply::err(format!("{net:?} is not an address or prefix\n"));
    };
    let Options { ttl, reason, force } = match options(opts) {
        Ok(x) => x,
        Err(r) => return r,
    };
    let now = crate::clock::unix_ms();
    let e = member(
        BlockEntry::operator(n, Duration::from_secs(ttl), now, &reason),
        peer,
    );
    let forced = match needs_force(blocks, &n) {
        Some(why) if !force => {
            return Reply::err(format!("{why}: not blocked (--force to block it anyway)\n"));
        }
        Some(why) => {
            tracing::warn!(net = %n, why, "block add --force: past the never-block and prefix policy");
            true
        }
        None => false,
    };
    let outcome = if forced {
        blocks.insert_forced(e)
    } else {
        blocks.insert(e)
    };
    let what = match outcome {
        InsertOutcome::New => "blocked".to_string(),
        InsertOutcome::Refreshed => "block refreshed".to_string(),
        InsertOutcome::Unchanged => "already blocked".to_string(),
        InsertOutcome::Evicted(other) => format!("blocked (the map was full: {other} evicted)"),
        InsertOutcome::SuspectsFull => {
            "not taken: suspects fill their share of the map".to_string()
        }
        InsertOutcome::NoRoom => "not taken: operators' entries fill the map".to_string(),
        InsertOutcome::Refused(why) => {
            return Reply::err(format!("{n}: refused ({why})\n"));
        }
    };
    Reply::ok(format!("{n} {what} for {ttl} s\n"))
}

/// `e` as added by `peer`: a control-group member's own (it may lift it), root's and the
/// daemon's user's anyone's.
fn member(e: BlockEntry, peer: &Peer) -> BlockEntry {
    if peer.reads_as_the_daemon() {
        e
    } else {
        e.by_member(peer.uid)
    }
}

fn list(blocks: &BlockMap) -> String {
    let now = crate::clock::unix_ms();
    let mut e = blocks.entries();
    e.sort_by_key(|x| x.net);
    let mut s = String::new();
    for x in e.iter().filter(|x| !x.is_expired(now)) {
        let origin = match x.origin {
            Origin::Local => "local",
            Origin::Operator => "operator",
            Origin::Peer => "peer",
        };
        // A suspect (unproven evidence) is named so: it never blocks.
        let kind = if x.is_proven() { "block" } else { "suspect" };
        let _ = writeln!(
            s,
            "{}\texpires in {} s\t{origin}{}\t{kind} evidence={} scope={}{}\t{}",
            x.net,
            x.ttl_ms(now).div_ceil(1000),
            x.node
                .as_deref()
                .map(|n| format!(" ({})", super::printable(n)))
                .into_iter()
                .chain(x.by.map(|uid| format!(" by uid {uid}")))
                .collect::<String>(),
            x.evidence,
            x.scope,
            if x.tenants.is_empty() {
                String::new()
            } else {
                let ids: Vec<String> = x.tenants.ids().iter().map(u32::to_string).collect();
                format!(
                    " tenant={}{}",
                    ids.join(","),
                    if x.tenants.is_only() {
                        ""
                    } else {
                        " and every zone"
                    }
                )
            },
            super::printable(x.reason.as_str())
        );
    }
    if s.is_empty() {
        s.push_str("(no blocks)\n");
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Root lifting another node's root operator block is told that node keeps it and
    /// publishes it again (the lift was undone fleet-wide with no word of it); lifting a
    /// peer's automatic block, or one of this node's, says nothing more.
    #[test]
    fn lifting_another_nodes_operator_block_says_it_returns() {
        let blocks = BlockMap::new(crate::block::BlockConfig::default());
        let net = |s: &str| s.parse::<ipnet::IpNet>().unwrap();
        let peer = |n: &str, evidence| {
            BlockEntry::new(net(n), u64::MAX / 2, "x", Origin::Peer, evidence).with_node("n1")
        };
        blocks.insert(peer("10.11.0.0/24", Evidence::Operator));
        blocks.insert(peer("10.12.0.0/24", Evidence::Tcp));
        let root = Peer::this_process();
        let r = run(&blocks, &["del", "10.11.0.0/24"], &root);
        assert!(r.ok, "{}", r.text);
        assert!(
            r.text.contains("operator's block of node n1") && r.text.contains("lift it on n1"),
            "{}",
            r.text
        );
        let r = run(&blocks, &["del", "10.12.0.0/24"], &root);
        assert_eq!((r.ok, r.text.as_str()), (true, "10.12.0.0/24 unblocked\n"));
    }
}
