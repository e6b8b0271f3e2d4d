//! The presence task: each process beats in `{prefix}node:{id}` (a sorted set of process
//! tokens scored by their last heartbeat, in Redis time) and reads who else beats there. A
//! token whose heartbeat moved since the previous look is another live process with this
//! node id: reported at error level (at most every ten seconds while it lasts) and counted.
//! A crashed predecessor's token does not move and ages out; a clean stop removes its own.
//!
//! Each beat is a member of its own, `{token}|{ms}|{mac}`: the beat's Redis time (also its
//! score) and an HMAC-SHA256 (128 bits, hex) over node id, token and time under a key derived
//! from the fleet key. A member that does not verify, or whose score is not its time, is
//! nobody's beat (`presence_refused`): whoever can write to Redis can neither make up a
//! second live process on a node's id nor keep one alive by replaying its old members, which
//! would report a conflict and hold back the retraction of the node's stale records.

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use hmac::{Hmac, Mac};
use sha2::Sha256;
use tokio::sync::watch;

use super::{Shared, add, sleep_or_stop, target};
use crate::fleet_key::DerivedKey;

/// What the presence key is derived for (from the fleet key).
pub(super) const KEY_PURPOSE: &str = "palisade redis presence v1";

/// Bytes of a member's MAC (hex doubles them).
const MAC_BYTES: usize = 16;

fn mac(key: &DerivedKey, node: &str, token: &str, ms: i64) -> Hmac<Sha256> {
    let mut m = <Hmac<Sha256> as Mac>::new_from_slice(&key.0).expect("any key length");
    m.update(node.as_bytes());
    m.update(b"\0");
    m.update(token.as_bytes());
    m.update(b"\0");
    m.update(&ms.to_be_bytes());
    m
}

/// This process's member for a beat at Redis time `ms` (no MAC without a key).
fn member(key: Option<&DerivedKey>, node: &str, token: &str, ms: i64) -> String {
    let tag = key.map_or(String::new(), |k| {
        mac(k, node, token, ms).finalize().into_bytes()[..MAC_BYTES]
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect()
    });
    format!("{token}|{ms}|{tag}")
}

/// The token and time of a member that verifies for `node` and whose score is its time;
/// without a key (`insecure_unsigned`) any member of that shape.
fn open<'a>(
    key: Option<&DerivedKey>,
    node: &str,
    member: &'a [u8],
    score: f64,
) -> Option<(&'a str, i64)> {
    let text = std::str::from_utf8(member).ok()?;
    let (rest, tag) = text.rsplit_once('|')?;
    let (token, ms) = rest.rsplit_once('|')?;
    let ms: i64 = ms.parse().ok()?;
    if ms as f64 != score {
        return None;
    }
    if let Some(k) = key {
        if tag.len() != 2 * MAC_BYTES {
            return None;
        }
        let bytes: Vec<u8> = (0..MAC_BYTES)
            .map(|i| u8::from_str_radix(tag.get(2 * i..2 * i + 2)?, 16).ok())
            .collect::<Option<_>>()?;
        mac(k, node, token, ms).verify_truncated_left(&bytes).ok()?;
    }
    Some((token, ms))
}

/// Heartbeats a token may miss before it is forgotten.
const AGE_OUT: u64 = 5;

/// Members a heartbeat reads at most, newest first: a process writes one per beat and keeps
/// [`AGE_OUT`] of them, so this is room for dozens of processes on one id; more are planted
/// (anyone who can write to Redis can add millions), and counted `presence_truncated`.
const READ_MAX: usize = 256;

/// What one heartbeat's pipeline returns: ZADD, two ZREMRANGEBYSCOREs, ZREVRANGEBYSCORE
/// WITHSCORES LIMIT, PEXPIRE.
type Beat = ((), (), (), Vec<(Vec<u8>, f64)>, ());

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
    // The connection's I/O task (aborted when replaced or dropped).
    let mut _driver = None;
    // `host:port` of the master Sentinel named when this task connected.
    let mut master: Option<String> = None;
    // The server connected to last (its identity, else its address): a reconnection that
    // lands on another one means the master moved while the other tasks' connections may
    // still reach the old one.
    let mut last_server: Option<String> = None;
    let mut asked_at: Option<Instant> = None;
    let mut attempt = 0u32;
    // Other tokens and the latest beat last seen of each.
    let mut seen: HashMap<String, i64> = HashMap::new();
    // This process's members still within the age-out (a clean stop removes them).
    let mut written: VecDeque<(i64, String)> = VecDeque::new();
    let signer = shared.presence_key.as_ref();
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
                    _driver = Some(c.driver);
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
        let mine = member(signer, &shared.node, &shared.token, now);
        while written
            .front()
            .is_some_and(|(t, _)| *t < now - ttl_ms as i64)
        {
            written.pop_front();
        }
        written.push_back((now, mine.clone()));
        let beat: redis::RedisResult<Beat> = redis::pipe()
            .cmd("ZADD")
            .arg(&key)
            .arg(now)
            .arg(&mine)
            .cmd("ZREMRANGEBYSCORE")
            .arg(&key)
            .arg("-inf")
            .arg(format!("({}", now - ttl_ms as i64))
            // No process beats in Redis's future: such members were planted, and would stay
            // (the key's expiry moves with every beat) and fill every read.
            .cmd("ZREMRANGEBYSCORE")
            .arg(&key)
            .arg(format!("({}", now + ttl_ms as i64))
            .arg("+inf")
            .cmd("ZREVRANGEBYSCORE")
            .arg(&key)
            .arg("+inf")
            .arg("-inf")
            .arg("WITHSCORES")
            .arg("LIMIT")
            .arg(0)
            .arg(READ_MAX)
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
            Ok((_, _, _, members, _)) => {
                attempt = 0;
                add(&shared.c.heartbeats, 1);
                if members.len() >= READ_MAX {
                    add(&shared.c.presence_truncated, 1);
                }
                // Each other token's latest beat. Members that do not verify are nobody's
                // (anyone who can write to Redis can add one): counted and passed over,
                // never a failed heartbeat.
                let mut next: HashMap<String, i64> = HashMap::new();
                for (m, score) in &members {
                    match open(signer, &shared.node, m, *score) {
                        Some((tok, _)) if tok == shared.token => {}
                        Some((tok, ms)) => {
                            let t = next.entry(tok.to_string()).or_insert(ms);
                            *t = (*t).max(ms);
                        }
                        None => add(&shared.c.presence_refused, 1),
                    }
                }
                let live: Vec<String> = next
                    .iter()
                    .filter(|(tok, ms)| seen.get(*tok).is_some_and(|prev| *ms > prev))
                    .map(|(tok, _)| tok.clone())
                    .collect();
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
                // The presence key made another type by whoever can write to Redis: every
                // beat failed, and with them the node-id conflict and deposed-master checks,
                // silently. Only the sync writes it: replaced.
                // (A pipeline's failure lists each command's error: read as text.)
                if (e.code() == Some("WRONGTYPE") || e.to_string().contains("WRONGTYPE"))
                    && let Some(c) = conn.as_mut()
                    && shared.replace_wrong_type(c, &key, "the presence key").await
                {
                    continue;
                }
                // Backed off as a failed connection is: a reply that fails every time must
                // not make a reconnect loop.
                crate::limited!(
                    1,
                    warn!(node = %shared.node, error = %e, "redis presence heartbeat failed (node-id conflicts and a deposed master go unseen meanwhile)")
                );
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
    // A clean stop leaves no beat behind (a restart would otherwise see it for a while).
    if let Some(c) = conn.as_mut()
        && !written.is_empty()
    {
        let _: redis::RedisResult<()> = redis::cmd("ZREM")
            .arg(&key)
            .arg(written.iter().map(|(_, m)| m.as_str()).collect::<Vec<_>>())
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn members_verify_only_for_their_node_time_and_key() {
        let k = DerivedKey([7; 32]);
        let other = DerivedKey([8; 32]);
        let m = member(Some(&k), "a", "host:1:ab", 1_000);
        assert_eq!(
            open(Some(&k), "a", m.as_bytes(), 1_000.0),
            Some(("host:1:ab", 1_000))
        );
        // Another node's key, another key, another score, a changed time or token: nobody's.
        assert_eq!(open(Some(&k), "b", m.as_bytes(), 1_000.0), None);
        assert_eq!(open(Some(&other), "a", m.as_bytes(), 1_000.0), None);
        assert_eq!(open(Some(&k), "a", m.as_bytes(), 2_000.0), None);
        let moved = m.replace("|1000|", "|2000|");
        assert_eq!(open(Some(&k), "a", moved.as_bytes(), 2_000.0), None);
        let other_token = m.replace("host:1:ab", "host:2:ab");
        assert_eq!(open(Some(&k), "a", other_token.as_bytes(), 1_000.0), None);
        // Unsigned, bare tokens (the old form) and junk.
        for junk in [
            "host:9:ff|1000|",
            "host:9:ff",
            "|1000|00",
            "x|y|z",
            "\u{ff}",
        ] {
            assert_eq!(
                open(Some(&k), "a", junk.as_bytes(), 1_000.0),
                None,
                "{junk}"
            );
        }
        assert_eq!(open(Some(&k), "a", b"\xff\xfe", 1_000.0), None);
        // Without a key (insecure_unsigned) the shape is enough.
        let u = member(None, "a", "host:1:ab", 5);
        assert_eq!(u, "host:1:ab|5|");
        assert_eq!(open(None, "a", u.as_bytes(), 5.0), Some(("host:1:ab", 5)));
    }
}
