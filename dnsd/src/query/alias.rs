//! ALIAS targets dnsd does not serve: the A and AAAA a configured resolver gave for them,
//! in a bounded cache the answer path reads without a lock (a map swapped whole by the
//! task that fills it, [`crate::daemon::alias`]). A name asked that is not there (or no
//! longer fresh) is queued for that task — the queue bounded, the miss answered SERVFAIL
//! meanwhile — and names in use are resolved again before their TTL runs out.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use arc_swap::ArcSwap;

/// A target name (lower-case wire form) followed by the type asked (A or AAAA), big-endian.
pub type Key = Box<[u8]>;

/// The key of `name`/`qtype` in a stack buffer: (buffer, length).
pub fn key(name: &[u8], qtype: u16) -> ([u8; 257], usize) {
    let mut k = [0u8; 257];
    let n = name.len().min(255);
    k[..n].copy_from_slice(&name[..n]);
    k[n..n + 2].copy_from_slice(&qtype.to_be_bytes());
    (k, n + 2)
}

/// The name and type of a key.
pub fn split(k: &[u8]) -> (&[u8], u16) {
    let n = k.len() - 2;
    (&k[..n], u16::from_be_bytes([k[n], k[n + 1]]))
}

/// What the resolver said of one target and type.
#[derive(Debug)]
pub struct Entry {
    /// The RDATAs (empty: the name has no such records, or does not exist).
    pub rdatas: Vec<Box<[u8]>>,
    /// The lowest TTL along the answer's chain.
    pub ttl: u32,
    /// The name (or the end of its CNAME chain) does not exist.
    pub nxdomain: bool,
    /// When it was fetched (seconds since the epoch).
    pub fetched: u64,
    /// When an answer last used it (seconds since the epoch).
    pub used: AtomicU64,
    /// The resolver did not answer usefully: SERVFAIL until it is asked again (a failure
    /// kept for a while, so that the resolver is not asked at the clients' rate).
    pub failed: bool,
    /// Kept past its TTL since this time, its resolver failing (RFC 8767's serve-stale).
    pub stale_since: Option<u64>,
}

impl Entry {
    /// Seconds of its TTL left at `now` (0: expired).
    pub fn left(&self, now: u64) -> u32 {
        (self.fetched + self.ttl as u64).saturating_sub(now) as u32
    }
}

/// ALIAS answers cut by a bound, whether or not a resolver is configured (shown in
/// `/metrics` as `dnsd_alias_bounds_total`).
pub static BOUNDS: AliasBounds = AliasBounds {
    chain: AtomicU64::new(0),
    records: AtomicU64::new(0),
};

/// Counters of the bounds an ALIAS answer can meet.
#[derive(Debug)]
pub struct AliasBounds {
    /// A chain of CNAMEs and ALIASes in our zones longer than the steps followed (or a
    /// loop): answered SERVFAIL.
    pub chain: AtomicU64,
    /// A target with more A or AAAA records than an ALIAS answer carries (the first ones
    /// answered, the rest left out), in our zones or from the resolver.
    pub records: AtomicU64,
}

/// The registry's handle on [`BOUNDS`].
#[derive(Debug)]
pub struct BoundsSource;

impl shield::metrics::Source for BoundsSource {
    fn collect(&self, out: &mut shield::metrics::Samples) {
        BOUNDS.collect(out);
    }
}

impl AliasBounds {
    /// The bounds' counts as metrics.
    pub fn collect(&self, out: &mut shield::metrics::Samples) {
        for (what, c) in [("chain", &self.chain), ("records", &self.records)] {
            out.counter(
                format!("alias.bound.{what}"),
                "dnsd_alias_bounds_total",
                format!("bound=\"{what}\""),
                "ALIAS answers cut by a bound: a chain too long or looping (SERVFAIL), a target with more records than an answer carries.",
                c.load(Ordering::Relaxed),
            );
        }
    }
}

/// Counters of the cache.
#[derive(Debug, Default)]
pub struct AliasStats {
    /// Answers from the cache.
    pub hits: AtomicU64,
    /// Targets not (or no longer) in the cache: answered SERVFAIL, queued.
    pub misses: AtomicU64,
    /// Names not queued because the queue, or the filling task's list of names waiting,
    /// was full.
    pub queue_full: AtomicU64,
    /// Resolutions that got an answer.
    pub resolved: AtomicU64,
    /// Resolutions that failed (no answer, an error rcode).
    pub failed: AtomicU64,
    /// Entries dropped to keep the cache within `cache_size`.
    pub evicted: AtomicU64,
}

/// The cache of resolved ALIAS targets.
pub struct AliasCache {
    entries: ArcSwap<HashMap<Key, Arc<Entry>>>,
    want: tokio::sync::mpsc::Sender<Key>,
    /// Its counters.
    pub stats: AliasStats,
}

impl std::fmt::Debug for AliasCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AliasCache")
            .field("entries", &self.entries.load().len())
            .finish()
    }
}

impl AliasCache {
    /// An empty cache whose misses go to `want` (the filling task's queue).
    pub fn new(want: tokio::sync::mpsc::Sender<Key>) -> AliasCache {
        AliasCache {
            entries: ArcSwap::from_pointee(HashMap::new()),
            want,
            stats: AliasStats::default(),
        }
    }

    /// The entry of `name`/`qtype` with TTL left at `now`; a miss queues the name (dropped and
    /// counted when the queue is full).
    pub fn get(&self, name: &[u8], qtype: u16, now: u64) -> Option<(Arc<Entry>, u32)> {
        let (k, n) = key(name, qtype);
        let hit = self.entries.load().get(&k[..n]).cloned();
        match hit {
            Some(e) if e.left(now) > 0 => {
                e.used.store(now, Ordering::Relaxed);
                self.stats.hits.fetch_add(1, Ordering::Relaxed);
                let left = e.left(now);
                Some((e, left))
            }
            _ => {
                self.stats.misses.fetch_add(1, Ordering::Relaxed);
                if self.want.try_send(k[..n].into()).is_err() {
                    self.stats.queue_full.fetch_add(1, Ordering::Relaxed);
                }
                None
            }
        }
    }

    /// Every entry now (for the filling task).
    pub fn snapshot(&self) -> Arc<HashMap<Key, Arc<Entry>>> {
        self.entries.load_full()
    }

    /// Publishes `map` as the cache.
    pub fn publish(&self, map: HashMap<Key, Arc<Entry>>) {
        self.entries.store(Arc::new(map));
    }
}

/// The cache's counters and size.
impl shield::metrics::Source for AliasCache {
    fn collect(&self, out: &mut shield::metrics::Samples) {
        let s = &self.stats;
        for (what, c) in [
            ("hits", &s.hits),
            ("misses", &s.misses),
            ("queue_full", &s.queue_full),
            ("resolved", &s.resolved),
            ("failed", &s.failed),
            ("evicted", &s.evicted),
        ] {
            out.counter(
                format!("alias.{what}"),
                "dnsd_alias_cache_total",
                format!("what=\"{what}\""),
                "ALIAS targets outside our zones: cache hits and misses, resolutions, evictions.",
                c.load(Ordering::Relaxed),
            );
        }
        out.gauge(
            "alias.entries",
            "dnsd_alias_cache_entries",
            "",
            "ALIAS targets outside our zones held in the cache.",
            self.entries.load().len() as u64,
        );
    }
}
