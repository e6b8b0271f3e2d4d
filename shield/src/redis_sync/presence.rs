//! The presence task: each process beats in `{prefix}node:{id}` (a sorted set of process
//! tokens scored by their last heartbeat, in Redis time) and reads who else beats there. A
//! token whose heartbeat moved since the previous look is another live process with this
//! node id: reported at error level (at most every ten seconds while it lasts) and counted.
//! A crashed predecessor's token does not move and ages out; a clean stop removes its own.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use tokio::sync::watch;

use super::{Shared, add, sleep_or_stop, target};

/// Heartbeats a token may miss before it is forgotten.
const AGE_OUT: u64 = 5;

/// What one heartbeat's pipeline returns: ZADD, ZREMRANGEBYSCORE, ZRANGE WITHSCORES, PEXPIRE.
type Beat = ((), (), Vec<(Vec<u8>, f64)>, ());

/// How often, at most, the heartbeat asks the sentinels which master they name (each ask is
/// a connection to a sentinel).
const ASK_SENTINELS_EVERY: Duration = Duration::from_secs(2);

/// How often a lasting conflict is logged again.
const REPORT_EVERY: Duration = Duration::from_secs(10);

/// A token unique to this process: host, pid, and random bits.
pub(super) fn token() -> String {
    format!("{}:{}:{:016x}", super::host_name(), std::process::id(), {
        use std::hash::{BuildHasher, Hasher};
        // RandomState is seeded from the OS per process: random bits without a dependency.
        let mut h = std::collections::hash_map::RandomState::new().build_hasher();
        h.write_u128(
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_nanos()),
        );
        h.finish()
    })
}

pub(super) async fn run(shared: Arc<Shared>, mut stop: watch::Receiver<bool>) {
    let every = Duration::from_millis(shared.cfg.presence_ms);
    let key = shared.keys.node(&shared.node);
    let mut conn = None;
    // `host:port` of the master Sentinel named when this task connected.
    let mut master: Option<String> = None;
    // The server connected to last (its identity, else its address): a reconnection that
    // lands on another one means the master moved while the other tasks' connections may
    // still reach the old one.
    let mut last_server: Option<String> = None;
    let mut asked_at: Option<Instant> = None;
    let mut attempt = 0u32;
    // Other tokens and the heartbeat score last seen for each.
    let mut seen: HashMap<String, f64> = HashMap::new();
    let mut last_report: Option<Instant> = None;
    loop {
        if *stop.borrow() {
            break;
        }
        if conn.is_none() {
            match shared.connect("presence", Duration::ZERO).await {
                Ok(c) => {
                    let now_server = c.server.clone().or_else(|| c.addr.clone());
                    if last_server.is_some() && now_server.is_some() && now_server != last_server {
                        deposed(&shared, &master);
                    }
                    last_server = now_server;
                    conn = Some(c.conn);
                    master = c.addr;
                }
                Err(_) => {
                    attempt += 1;
                    if sleep_or_stop(shared.backoff(attempt), &mut stop).await {
                        break;
                    }
                    continue;
                }
            }
        }
        let c = conn.as_mut().expect("connected");
        let now = shared.now() as i64 + shared.offset();
        let ttl_ms = shared.cfg.presence_ms.saturating_mul(AGE_OUT);
        let beat: redis::RedisResult<Beat> = redis::pipe()
            .cmd("ZADD")
            .arg(&key)
            .arg(now)
            .arg(&shared.token)
            .cmd("ZREMRANGEBYSCORE")
            .arg(&key)
            .arg("-inf")
            .arg(format!("({}", now - ttl_ms as i64))
            .cmd("ZRANGE")
            .arg(&key)
            .arg(0)
            .arg(-1)
            .arg("WITHSCORES")
            .cmd("PEXPIRE")
            .arg(&key)
            .arg(ttl_ms * 2)
            .query_async(c)
            .await;
        // A master deposed while the connections to it live (paused past the sentinels'
        // patience, then back): it may take writes for seconds before Sentinel demotes it, or
        // never if Sentinel cannot reach it. Each beat asks its role (an error, as for an ACL
        // user that may not ask, says nothing), and in Sentinel mode every few seconds whom
        // the sentinels name; another master ends every task's connection.
        let mut gone = false;
        if beat.is_ok() {
            let role: redis::RedisResult<redis::Value> = redis::cmd("ROLE").query_async(c).await;
            gone = role
                .ok()
                .as_ref()
                .and_then(target::role_of)
                .is_some_and(|r| r != "master");
            if !gone
                && let (Some(ours), target::Target::Sentinel(_)) = (&master, &shared.target)
                && asked_at.is_none_or(|t: Instant| t.elapsed() >= ASK_SENTINELS_EVERY)
            {
                asked_at = Some(Instant::now());
                let io = Duration::from_millis(shared.cfg.io_timeout_ms.min(1000));
                gone = shared
                    .target
                    .reach(&shared.cfg, io, &shared.c.sentinel_errors, &shared.limits)
                    .await
                    .is_ok_and(|r| r.addr.as_ref().is_some_and(|a| a != ours));
            }
        }
        if gone {
            deposed(&shared, &master);
            conn = None;
            // Its own reconnection to the new master is not another deposition.
            last_server = None;
            // Not at once again: sentinels that disagree mid-failover must not make a loop.
            if sleep_or_stop(every, &mut stop).await {
                break;
            }
            continue;
        }
        match beat {
            Ok((_, _, members, _)) => {
                attempt = 0;
                add(&shared.c.heartbeats, 1);
                let mut live = Vec::new();
                let mut next = HashMap::new();
                // Members that are no UTF-8 are nobody's token (anyone who can write to
                // Redis can add one): passed over, never a failed heartbeat.
                let members = members
                    .into_iter()
                    .filter_map(|(t, score)| Some((String::from_utf8(t).ok()?, score)));
                for (tok, score) in members {
                    if tok == shared.token {
                        continue;
                    }
                    if seen.get(&tok).is_some_and(|&prev| score > prev) {
                        live.push(tok.clone());
                    }
                    next.insert(tok, score);
                }
                seen = next;
                if live.is_empty() {
                    shared.conflict.store(false, Ordering::Relaxed);
                } else {
                    shared.conflict.store(true, Ordering::Relaxed);
                    add(&shared.c.node_id_conflicts, 1);
                    if last_report.is_none_or(|t| t.elapsed() >= REPORT_EVERY) {
                        last_report = Some(Instant::now());
                        tracing::error!(
                            node = %shared.node,
                            others = ?live,
                            "another live process uses this Redis node id: each drops the \
                             other's blocks as its own. Give each process its own [redis] \
                             instance (or node_id)"
                        );
                    }
                }
            }
            Err(e) => {
                // Backed off as a failed connection is: a reply that fails every time must
                // not make a reconnect loop.
                tracing::debug!(node = %shared.node, error = %e, "redis presence heartbeat failed");
                conn = None;
                attempt += 1;
                if sleep_or_stop(shared.backoff(attempt), &mut stop).await {
                    break;
                }
                continue;
            }
        }
        if sleep_or_stop(every, &mut stop).await {
            break;
        }
    }
    // A clean stop leaves no token behind (a restart would otherwise see it for a while).
    if let Some(c) = conn.as_mut() {
        let _: redis::RedisResult<()> = redis::cmd("ZREM")
            .arg(&key)
            .arg(&shared.token)
            .query_async(c)
            .await;
    }
}

/// Says that the master `master` was found deposed: every task's connection goes.
fn deposed(shared: &Shared, master: &Option<String>) {
    add(&shared.c.masters_deposed, 1);
    tracing::warn!(node = %shared.node, master = ?master, "redis master deposed: reconnecting every task");
    shared.master_moved.send_modify(|g| *g += 1);
}
