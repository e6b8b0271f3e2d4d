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

/// The cache and the queue its misses go to.
pub fn cache() -> (Arc<AliasCache>, tokio::sync::mpsc::Receiver<Key>) {
    let (tx, rx) = tokio::sync::mpsc::channel(QUEUE);
    (Arc::new(AliasCache::new(tx)), rx)
}

/// Resolves what `rx` asks and what is running out, into `cache`, through `resolver`.
pub async fn run(
    cache: Arc<AliasCache>,
    mut rx: tokio::sync::mpsc::Receiver<Key>,
    resolver: SocketAddr,
    max: usize,
) {
    let mut tick = tokio::time::interval(Duration::from_secs(1));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        let mut wanted: HashSet<Key> = HashSet::new();
        tokio::select! {
            k = rx.recv() => match k {
                Some(k) => {
                    wanted.insert(k);
                    while wanted.len() < QUEUE {
                        match rx.try_recv() {
                            Ok(k) => { wanted.insert(k); }
                            Err(_) => break,
                        }
                    }
                }
                None => return,
            },
            _ = tick.tick() => {}
        }
        let now = shield::clock::unix_ms() / 1000;
        let snap = cache.snapshot();
        // In use since it was fetched and close to its end: asked again now.
        for (k, e) in snap.iter() {
            let left = e.left(now);
            if e.used.load(Ordering::Relaxed) >= e.fetched && left <= (e.ttl / 4).max(2) {
                wanted.insert(k.clone());
            }
        }
        // A miss of what another miss already fetched is not asked twice.
        wanted.retain(|k| {
            snap.get(k)
                .is_none_or(|e| e.left(now) <= (e.ttl / 4).max(2))
        });
        let expired = snap.values().any(|e| e.left(now) == 0);
        if wanted.is_empty() && !expired && snap.len() <= max {
            continue;
        }
        let mut map: HashMap<Key, Arc<Entry>> = (*snap).clone();
        drop(snap);
        let mut jobs = tokio::task::JoinSet::new();
        let mut wanted = wanted.into_iter();
        loop {
            while jobs.len() < AT_ONCE {
                let Some(k) = wanted.next() else { break };
                jobs.spawn(async move {
                    let r = resolve(resolver, &k).await;
                    (k, r)
                });
            }
            let Some(done) = jobs.join_next().await else {
                break;
            };
            let Ok((k, r)) = done else { continue };
            match r {
                Some((rdatas, ttl, nxdomain)) => {
                    cache.stats.resolved.fetch_add(1, Ordering::Relaxed);
                    let used = map.get(&k).map_or(now, |e| e.used.load(Ordering::Relaxed));
                    map.insert(
                        k,
                        Arc::new(Entry {
                            rdatas,
                            ttl,
                            nxdomain,
                            fetched: now,
                            used: AtomicU64::new(used),
                        }),
                    );
                }
                None => {
                    cache.stats.failed.fetch_add(1, Ordering::Relaxed);
                }
            }
        }
        // Expired and not asked again (not in use): gone.
        map.retain(|_, e| e.left(now) > 0);
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
        cache.publish(map);
    }
}

/// Asks `resolver` for the key's name and type (recursion desired): the records of that type
/// in the answer (following its CNAMEs), the lowest TTL on the way, and whether the name does
/// not exist; empty with a short TTL for a name without them; `None` when the resolver did not
/// answer usefully.
async fn resolve(resolver: SocketAddr, k: &[u8]) -> Option<(Vec<Box<[u8]>>, u32, bool)> {
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
    let mut rdatas = Vec::new();
    let mut cut = false;
    let mut ttl = u32::MAX;
    let mut b = RrBuf::default();
    let r = wire::read_response(&resp, &mut b, &mut |rr| {
        if rr.class == 1 && (rr.rtype == qtype || rr.rtype == t::CNAME) {
            ttl = ttl.min(rr.ttl);
            if rr.rtype == qtype {
                if rdatas.len() < MAX_RRS {
                    rdatas.push(Box::from(rr.rdata));
                } else {
                    cut = true;
                }
            }
        }
        Ok(())
    })
    .ok()?;
    if r.id != id {
        return None;
    }
    if cut {
        crate::query::alias::BOUNDS
            .records
            .fetch_add(1, Ordering::Relaxed);
    }
    match r.rcode {
        rcode::NXDOMAIN => Some((Vec::new(), NEGATIVE_TTL, true)),
        rcode::NOERROR if rdatas.is_empty() => Some((Vec::new(), NEGATIVE_TTL, false)),
        rcode::NOERROR => Some((rdatas, ttl.max(1), false)),
        _ => None,
    }
}
