//! Fills the ALIAS targets' cache ([`crate::query::alias`]) from `[alias] resolver`: the
//! names the answer path missed (queued by it), and the names in use whose TTL is running
//! out, asked each second at most, a bounded number at once; past `cache_size` the least
//! recently used go. Only targets our zones' ALIAS records name are ever asked: the queue
//! is filled by the answer path from zone data, never from a query's name.

use std::collections::{HashMap, HashSet};
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use zones::rrtype::t;

use crate::query::alias::{AliasCache, Entry, Key, split};
use crate::query::wire::{hf, opcode, rcode};
use crate::xfr::wire::{self, RrBuf};

/// Names the answer path may queue before misses are dropped (and counted).
pub const QUEUE: usize = 1024;

/// Resolutions under way at once.
const AT_ONCE: usize = 64;
/// Records of the type asked kept from one answer (what an ALIAS answer carries).
const MAX_RRS: usize = crate::zone::geo::MAX_VARIANT_RRS;

/// How long a name that exists without the type asked (or does not exist) is kept.
const NEGATIVE_TTL: u32 = 60;
/// The shortest and longest a target's records are kept whatever their TTL: a TTL of 0 or 1
/// left every query a miss answered SERVFAIL, and 2^31 kept them for ever.
const MIN_TTL: u32 = 10;
const MAX_TTL: u32 = 86_400;
/// How long a failed resolution is kept (SERVFAIL, RFC 9520's at least one second) before the
/// resolver is asked again: a failing resolver was asked once per client query.
const FAILED_TTL: u32 = 5;
/// How long records whose refresh fails are still served (RFC 8767), each time for
/// [`STALE_TTL`] seconds, and the TTL they are given then.
const MAX_STALE: u64 = 86_400;
const STALE_TTL: u32 = 30;
/// The cache is published at most every this long while results come (each publication
/// copies it whole).
const PUBLISH_AFTER: Duration = Duration::from_millis(200);

/// The cache and the queue its misses go to.
pub fn cache() -> (Arc<AliasCache>, tokio::sync::mpsc::Receiver<Key>) {
    let (tx, rx) = tokio::sync::mpsc::channel(QUEUE);
    (Arc::new(AliasCache::new(tx)), rx)
}

/// Resolves what `rx` asks and what is running out, into `cache`, through `resolver`: a
/// bounded number at a time, each result applied as it comes (a slow target holds no other
/// back, nor the misses asked meanwhile), the cache published at most every 200 ms.
pub async fn run(
    cache: Arc<AliasCache>,
    mut rx: tokio::sync::mpsc::Receiver<Key>,
    resolver: SocketAddr,
    max: usize,
) {
    let mut tick = tokio::time::interval(Duration::from_secs(1));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    // The cache as this task keeps it; what the answer path reads is a copy of it.
    let mut map: HashMap<Key, Arc<Entry>> = HashMap::new();
    // Names to ask (each once), and those being asked.
    let mut queue: std::collections::VecDeque<Key> = std::collections::VecDeque::new();
    let mut queued: HashSet<Key> = HashSet::new();
    let mut asking: HashSet<Key> = HashSet::new();
    let mut jobs: tokio::task::JoinSet<(Key, Option<Resolved>)> = tokio::task::JoinSet::new();
    let mut dirty = false;
    let mut published = tokio::time::Instant::now();
    let cap = QUEUE + max;
    // Past `cap` names waiting, a further one is left for a later miss or tick, and counted.
    let stats = &cache.stats;
    let want = |k: Key, queue: &mut std::collections::VecDeque<Key>, queued: &mut HashSet<Key>| {
        if queued.contains(&k) {
            return;
        }
        if queued.len() >= cap {
            stats.queue_full.fetch_add(1, Ordering::Relaxed);
            return;
        }
        queued.insert(k.clone());
        queue.push_back(k);
    };
    loop {
        tokio::select! {
            k = rx.recv() => match k {
                Some(k) => {
                    want(k, &mut queue, &mut queued);
                    for _ in 0..QUEUE {
                        match rx.try_recv() {
                            Ok(k) => want(k, &mut queue, &mut queued),
                            Err(_) => break,
                        }
                    }
                }
                None => return,
            },
            _ = tick.tick() => {
                let now = shield::clock::unix_ms() / 1000;
                // In use since it was fetched and close to its end: asked again now.
                let due: Vec<Key> = map
                    .iter()
                    .filter(|(_, e)| {
                        e.used.load(Ordering::Relaxed) >= e.fetched
                            && e.left(now) <= (e.ttl / 4).max(2)
                    })
                    .map(|(k, _)| k.clone())
                    .collect();
                for k in due {
                    want(k, &mut queue, &mut queued);
                }
                // Expired and not asked again (not in use): gone; past `max`, the least
                // recently used go.
                let before = map.len();
                map.retain(|k, e| e.left(now) > 0 || asking.contains(k) || queued.contains(k));
                if map.len() > max {
                    let mut by_use: Vec<(u64, Key)> = map
                        .iter()
                        .map(|(k, e)| (e.used.load(Ordering::Relaxed), k.clone()))
                        .collect();
                    by_use.sort_unstable();
                    for (_, k) in by_use.into_iter().take(map.len() - max) {
                        map.remove(&k);
                        cache.stats.evicted.fetch_add(1, Ordering::Relaxed);
                    }
                }
                dirty |= map.len() != before;
            }
            Some(done) = jobs.join_next(), if !jobs.is_empty() => {
                let Ok((k, r)) = done else { continue };
                asking.remove(&k);
                let now = shield::clock::unix_ms() / 1000;
                let prev = map.get(&k);
                let used = prev.map_or(now, |e| e.used.load(Ordering::Relaxed));
                let entry = match r {
                    Some((rdatas, ttl, nxdomain)) => {
                        cache.stats.resolved.fetch_add(1, Ordering::Relaxed);
                        Entry {
                            rdatas,
                            ttl: ttl.clamp(MIN_TTL, MAX_TTL),
                            nxdomain,
                            fetched: now,
                            used: AtomicU64::new(used),
                            failed: false,
                            stale_since: None,
                        }
                    }
                    None => {
                        cache.stats.failed.fetch_add(1, Ordering::Relaxed);
                        stale_or_failed(prev.map(|e| &**e), now, used)
                    }
                };
                map.insert(k, Arc::new(entry));
                dirty = true;
            }
            _ = tokio::time::sleep_until(published + PUBLISH_AFTER), if dirty => {}
        }
        // Ask what is queued, up to AT_ONCE at a time; a miss of what another already
        // fetched (fresh, not near its end) is not asked twice.
        let now = shield::clock::unix_ms() / 1000;
        while jobs.len() < AT_ONCE {
            let Some(k) = queue.pop_front() else { break };
            queued.remove(&k);
            let fresh = map
                .get(&k)
                .is_some_and(|e| e.left(now) > (e.ttl / 4).max(2));
            if fresh || !asking.insert(k.clone()) {
                continue;
            }
            jobs.spawn(async move {
                let r = resolve(resolver, &k).await;
                (k, r)
            });
        }
        if dirty && (jobs.is_empty() || published.elapsed() >= PUBLISH_AFTER) {
            cache.publish(map.clone());
            published = tokio::time::Instant::now();
            dirty = false;
        }
    }
}

/// What is kept of a target whose resolution failed at `now`: its last records while they may
/// still be served stale (for [`STALE_TTL`]), else a failure for [`FAILED_TTL`].
fn stale_or_failed(prev: Option<&Entry>, now: u64, used: u64) -> Entry {
    if let Some(p) = prev.filter(|p| !p.failed) {
        let since = p.stale_since.unwrap_or(p.fetched + p.ttl as u64);
        if now < since + MAX_STALE {
            return Entry {
                rdatas: p.rdatas.clone(),
                ttl: STALE_TTL,
                nxdomain: p.nxdomain,
                fetched: now,
                used: AtomicU64::new(used),
                failed: false,
                stale_since: Some(since.min(now)),
            };
        }
    }
    Entry {
        rdatas: Vec::new(),
        ttl: FAILED_TTL,
        nxdomain: false,
        fetched: now,
        used: AtomicU64::new(used),
        failed: true,
        stale_since: None,
    }
}

/// Asks `resolver` for the key's name and type (recursion desired): the records of that type
/// in the answer (following its CNAMEs), the lowest TTL on the way, and whether the name does
/// not exist; empty with a short TTL for a name without them; `None` when the resolver did not
/// answer usefully.
async fn resolve(resolver: SocketAddr, k: &[u8]) -> Option<Resolved> {
    let (name, qtype) = split(k);
    if qtype != t::A && qtype != t::AAAA {
        return None;
    }
    let id: u16 = rand::random();
    let mut q = wire::build_query(id, opcode::QUERY, name, qtype, None, false, None);
    q[2] |= (hf::RD >> 8) as u8;
    let limit = Duration::from_secs(2);
    let mut resp = crate::xfr::client::udp_exchange(resolver, None, &q, limit)
        .await
        .ok()?;
    if resp.len() >= 4 && u16::from_be_bytes([resp[2], resp[3]]) & hf::TC != 0 {
        let mut c = crate::xfr::client::TcpClient::connect(resolver, None, limit)
            .await
            .ok()?;
        c.send(&q).await.ok()?;
        c.recv(&mut resp).await.ok()?;
    }
    // The answer's records of the type and its CNAMEs (a bounded number), then the chain
    // followed from the name asked: records of other owners are no part of the answer.
    let mut rrs: Vec<AnswerRr> = Vec::new();
    let mut overflow = false;
    let mut b = RrBuf::default();
    let r = wire::read_response(&resp, &mut b, &mut |rr| {
        if rr.class == 1 && (rr.rtype == qtype || rr.rtype == t::CNAME) {
            if rrs.len() < 4 * MAX_RRS {
                rrs.push((rr.owner.into(), rr.rtype, rr.ttl, rr.rdata.into()));
            } else {
                overflow = true;
            }
        }
        Ok(())
    })
    .ok()?;
    if r.id != id || !r.echoes(name, qtype) {
        return None;
    }
    let (rdatas, ttl, cut) = follow(name, qtype, &rrs);
    if cut || overflow {
        crate::query::alias::BOUNDS
            .records
            .fetch_add(1, Ordering::Relaxed);
    }
    match r.rcode {
        // NXDOMAIN of the chain's end (the name asked may be a CNAME to it).
        rcode::NXDOMAIN => Some((Vec::new(), NEGATIVE_TTL, true)),
        rcode::NOERROR if rdatas.is_empty() => Some((Vec::new(), NEGATIVE_TTL, false)),
        rcode::NOERROR => Some((rdatas, ttl.max(1), false)),
        _ => None,
    }
}

/// What a resolver said of a name and type: its RDATAs, their lowest TTL, NXDOMAIN.
type Resolved = (Vec<Box<[u8]>>, u32, bool);

/// A record of a resolver's answer: owner, type, TTL, RDATA.
type AnswerRr = (Box<[u8]>, u16, u32, Box<[u8]>);

/// Longest CNAME chain followed in a resolver's answer.
const MAX_CHAIN: usize = 8;

/// Follows `name`'s CNAMEs through `rrs` (owner, type, TTL, RDATA of an answer section):
/// the RDATAs of `qtype` at the chain's end (at most `MAX_RRS`; true when more were cut), and
/// the lowest TTL on the way.
fn follow(name: &[u8], qtype: u16, rrs: &[AnswerRr]) -> (Vec<Box<[u8]>>, u32, bool) {
    let mut at: &[u8] = name;
    let mut ttl = u32::MAX;
    for _ in 0..MAX_CHAIN {
        let Some((_, _, t, target)) = rrs
            .iter()
            .find(|(o, ty, _, _)| *ty == t::CNAME && o.eq_ignore_ascii_case(at))
        else {
            break;
        };
        ttl = ttl.min(*t);
        at = target;
    }
    let mut out = Vec::new();
    let mut cut = false;
    for (_, _, t, rd) in rrs
        .iter()
        .filter(|(o, ty, _, _)| *ty == qtype && o.eq_ignore_ascii_case(at))
    {
        if out.len() < MAX_RRS {
            ttl = ttl.min(*t);
            out.push(rd.clone());
        } else {
            cut = true;
        }
    }
    (out, ttl, cut)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rr(owner: &[u8], ty: u16, ttl: u32, rd: &[u8]) -> AnswerRr {
        (owner.into(), ty, ttl, rd.into())
    }

    /// A refresh that fails serves the last records stale (RFC 8767), 30 s at a time, for a
    /// day past their end; then, or with nothing before, a failure kept five seconds.
    #[test]
    fn a_failed_refresh_serves_stale_records_then_a_short_failure() {
        let good = Entry {
            rdatas: vec![vec![192, 0, 2, 1].into()],
            ttl: 60,
            nxdomain: false,
            fetched: 1000,
            used: AtomicU64::new(1000),
            failed: false,
            stale_since: None,
        };
        let s = stale_or_failed(Some(&good), 1055, 1050);
        assert!(!s.failed && s.rdatas == good.rdatas && s.ttl == STALE_TTL);
        assert_eq!(
            s.stale_since,
            Some(1055),
            "refreshed before its end: stale from now"
        );
        let later = stale_or_failed(Some(&s), 1055 + 3600, 1055);
        assert_eq!(
            later.stale_since,
            Some(1055),
            "the stale clock keeps its start"
        );
        assert!(!later.failed);
        let gone = stale_or_failed(Some(&later), 1055 + MAX_STALE, 1055);
        assert!(gone.failed && gone.rdatas.is_empty() && gone.ttl == FAILED_TTL);
        let first = stale_or_failed(None, 5000, 5000);
        assert!(first.failed && first.ttl == FAILED_TTL);
        assert!(stale_or_failed(Some(&first), 5004, 5000).failed);
    }

    #[test]
    fn the_answer_is_the_chain_from_the_name_asked_and_nothing_beside_it() {
        let name = b"\x03www\x07example\x00";
        let rrs = [
            // A record of another owner, placed first: no part of the answer.
            rr(b"\x04evil\x07example\x00", t::A, 9, &[6, 6, 6, 6]),
            rr(
                b"\x03WWW\x07example\x00",
                t::CNAME,
                300,
                b"\x03cdn\x03net\x00",
            ),
            rr(b"\x03cdn\x03net\x00", t::A, 60, &[192, 0, 2, 1]),
            rr(b"\x03cdn\x03net\x00", t::A, 120, &[192, 0, 2, 2]),
        ];
        let (rd, ttl, cut) = follow(name, t::A, &rrs);
        assert_eq!(rd.len(), 2);
        assert_eq!(&rd[0][..], &[192, 0, 2, 1]);
        assert_eq!((ttl, cut), (60, false));
        // Records at the name asked when it has no CNAME.
        let (rd, _, _) = follow(b"\x04evil\x07example\x00", t::A, &rrs);
        assert_eq!(&rd[0][..], &[6, 6, 6, 6]);
        // A CNAME loop ends within the bound, with nothing.
        let looped = [
            rr(b"\x01a\x00", t::CNAME, 5, b"\x01b\x00"),
            rr(b"\x01b\x00", t::CNAME, 5, b"\x01a\x00"),
        ];
        assert!(follow(b"\x01a\x00", t::A, &looped).0.is_empty());
    }
}
