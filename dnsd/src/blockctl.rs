//! `dnsd ctl block add PREFIX [--ttl SECONDS] [--reason TEXT]`, `block del PREFIX`,
//! `block list`: the operator's hand on the block map.

use std::fmt::Write as _;
use std::time::Duration;

use shield::block::{BlockEntry, BlockMap, InsertOutcome, Origin, RemoveCause};

use crate::ctl::Reply;

/// TTL of an operator block when none is given.
pub const DEFAULT_TTL_SECS: u64 = 3600;

/// Runs one `block` subcommand.
pub fn command(blocks: &BlockMap, args: &[&str]) -> Reply {
    match args {
        ["add", net, opts @ ..] => add(blocks, net, opts),
        ["del", net] => match shield::prefix::parse_net(net) {
            Some(n) => {
                if blocks.remove(n, RemoveCause::Operator) {
                    Reply::ok(format!("{n} unblocked\n"))
                } else {
                    Reply::err(format!("{n} is not blocked\n"))
                }
            }
            None => Reply::err(format!("{net:?} is not an address or prefix\n")),
        },
        ["list"] => Reply::ok(list(blocks)),
        _ => Reply::err(
            "usage: block add PREFIX [--ttl SECONDS] [--reason TEXT] | block del PREFIX | block list\n",
        ),
    }
}

fn add(blocks: &BlockMap, net: &str, opts: &[&str]) -> Reply {
    let Some(n) = shield::prefix::parse_net(net) else {
        return Reply::err(format!("{net:?} is not an address or prefix\n"));
    };
    let mut ttl = DEFAULT_TTL_SECS;
    let mut reason = "operator".to_string();
    let mut i = 0;
    while i < opts.len() {
        match (opts[i], opts.get(i + 1)) {
            ("--ttl", Some(v)) => match v.parse::<u64>() {
                Ok(t) if t > 0 => ttl = t,
                _ => return Reply::err(format!("--ttl {v}: expected seconds above 0\n")),
            },
            ("--reason", Some(v)) => reason = v.to_string(),
            (o, _) => return Reply::err(format!("unknown or incomplete option {o}\n")),
        }
        i += 2;
    }
    let now = shield::clock::unix_ms();
    let e = BlockEntry::with_ttl(n, Duration::from_secs(ttl), now, &reason, Origin::Operator);
    let what = match blocks.insert(e) {
        InsertOutcome::New => "blocked".to_string(),
        InsertOutcome::Refreshed => "block refreshed".to_string(),
        InsertOutcome::Unchanged => "already blocked".to_string(),
        InsertOutcome::Evicted(other) => format!("blocked (the map was full: {other} evicted)"),
    };
    Reply::ok(format!("{n} {what} for {ttl} s\n"))
}

fn list(blocks: &BlockMap) -> String {
    let now = shield::clock::unix_ms();
    let mut e = blocks.entries();
    e.sort_by_key(|x| x.net);
    let mut s = String::new();
    for x in e.iter().filter(|x| !x.is_expired(now)) {
        let origin = match x.origin {
            Origin::Local => "local",
            Origin::Operator => "operator",
            Origin::Peer => "peer",
        };
        let _ = writeln!(
            s,
            "{}\texpires in {} s\t{origin}\t{}",
            x.net,
            x.ttl_ms(now).div_ceil(1000),
            x.reason.as_str()
        );
    }
    if s.is_empty() {
        s.push_str("(no blocks)\n");
    }
    s
}
