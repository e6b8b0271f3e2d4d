//! The event aggregator: blocked, rate-limited and challenged traffic summed per (tenant, source prefix, action) in fixed memory, flushed as JSON lines or into ClickHouse ([`clickhouse`]).
//!
//! # Recording
//!
//! Each thread that records owns a [`Recorder`] (from [`Aggregator::recorder`]) and with it a
//! shard: a Space-Saving heavy-hitter summary of `top_k` counters keyed by (tenant, source
//! prefix, action) plus exact totals per (tenant, action). The shard's lock is only ever
//! wanted by its own thread and, once per interval for a pointer swap, by the flusher: no lock
//! is shared between recording threads. All memory is allocated when the shard is made; a
//! flood of distinct sources replaces the smallest counters (counted as `replaced`) and never
//! grows anything. Sources are aggregated by prefix (`v4_prefix` /24 and `v6_prefix` /56 by
//! default). Memory: at most `max_recorders` shards, each `2 × shard_bytes` (live + spare);
//! [`Aggregator::memory_bytes`] reports it. More recorders than `max_recorders` share shards.
//!
//! # Flushing
//!
//! [`Aggregator::flush`] swaps every shard for its cleared spare, merges the summaries
//! (bounded by shards × `top_k`, never by the number of sources) and returns one [`Event`] per
//! (tenant, action) seen. [`Aggregator::spawn_flusher`] does this every `interval_secs` on a
//! thread and hands each batch to [`SinkWriter`]s: a bounded queue per sink, so a sink that
//! cannot keep up loses whole batches, counted as dropped, and never slows recording.
//!
//! # Event shape (one JSON object per line; Vector's `file`/`socket` sources with `codec = "json"`)
//!
//! ```json
//! {"kind":"shield.aggregate","timestamp":"2025-01-01T00:00:10.000Z","ts_ms":1735689610000,
//!  "interval_ms":10000,"node":"edge-1","tenant":7,"action":"rate_limited","evidence":"udp","total":91234,
//!  "top":[{"prefix":"192.0.2.0/24","count":90000,"min_count":89950,"reason":5}],
//!  "other":1234,"tracked":87}
//! ```
//!
//! | field | meaning |
//! |---|---|
//! | `kind` | always `shield.aggregate` |
//! | `timestamp`, `ts_ms` | flush time (RFC 3339 UTC, unix ms) |
//! | `interval_ms` | time since the previous flush |
//! | `node` | node id from the config (omitted when unset) |
//! | `tenant`, `action`, `evidence` | the group; `action` is `blocked`, `rate_limited`, `challenged`, `denied`, `escalated` (a block) or `suspected` (unproven evidence made the source a suspect); `evidence` what proved the source owns its address (`udp`: nothing, `cookie`, `tcp`, `http`, `rules`, `operator`; for `blocked`, the block's) |
//! | `total` | exact number of events in the group this interval |
//! | `top[]` | heaviest source prefixes, at most `top_n`: `prefix`, `count` (estimate, an upper bound per shard), `min_count` (guaranteed lower bound), `reason` (last reason code seen) |
//! | `other` | `total` minus the `count`s listed: traffic folded into "other" |
//! | `tracked` | distinct prefixes the summaries held for the group |

pub mod clickhouse;
mod config;
mod sink;
mod topk;

pub use clickhouse::{
    ClickHouseConfig, ClickHouseError, ClickHouseMonitor, ClickHouseSink, ClickHouseSource,
    ClickHouseStats, ClickHouseWriter,
};
pub use config::{EventsConfig, Output, Outputs};
pub use sink::{
    JsonLines, Sink, SinkError, SinkStats, SinkStatsHandle, SinkWriter, SinksSource,
    UnixDatagramSink, UnixStreamSink,
};

use crate::block::Evidence;
use crate::ratelimit::{SourceKey, source_key};
use hashbrown::HashMap;
use ipnet::IpNet;
use serde::{Deserialize, Serialize};
use std::net::IpAddr;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::Duration;
use topk::SpaceSaving;

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// What happened to the traffic being recorded.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Action {
    /// Dropped because the source is in the block map.
    Blocked,
    /// Over a rate limit.
    RateLimited,
    /// Sent a challenge (HTTP challenge, DNS TC=1 or cookie).
    Challenged,
    /// Refused by a rule.
    Denied,
    /// The source was escalated into the block map (proven evidence: a block).
    Escalated,
    /// The source was made a suspect (unproven evidence: TC=1 over UDP, never a block).
    Suspected,
}

impl Action {
    /// The event action for a rule verdict's action (none for pass and allow).
    pub fn from_rules(a: crate::rules::Action) -> Option<Action> {
        use crate::rules::Action as R;
        match a {
            R::Pass | R::Allow => None,
            R::Deny => Some(Action::Denied),
            R::Challenge => Some(Action::Challenged),
            R::RateLimit => Some(Action::RateLimited),
        }
    }
}

/// Aggregator configuration (`[events]` in the daemons' configs).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct AggregatorConfig {
    /// Seconds between flushes.
    pub interval_secs: u64,
    /// Heavy-hitter counters per shard.
    pub top_k: usize,
    /// Source prefixes listed per event.
    pub top_n: usize,
    /// Most shards (one per recording thread; further recorders share).
    pub max_recorders: usize,
    /// Most distinct (tenant, action) totals per shard; beyond, counted in `totals_overflow`.
    pub max_totals: usize,
    /// IPv4 sources are aggregated to this prefix length.
    pub v4_prefix: u8,
    /// IPv6 sources are aggregated to this prefix length.
    pub v6_prefix: u8,
    /// Node id written into events.
    pub node: Option<String>,
    /// Flushes queued per sink before batches are dropped.
    pub queue_batches: usize,
}

impl Default for AggregatorConfig {
    fn default() -> Self {
        AggregatorConfig {
            interval_secs: 10,
            top_k: 1024,
            top_n: 20,
            max_recorders: 64,
            max_totals: 1024,
            v4_prefix: 24,
            v6_prefix: 56,
            node: None,
            queue_batches: 16,
        }
    }
}

/// One heavy source prefix in an event.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TopSource {
    /// The source prefix.
    pub prefix: IpNet,
    /// Estimated events (upper bound per shard, summed).
    pub count: u64,
    /// Guaranteed events (lower bound).
    pub min_count: u64,
    /// Last reason code recorded for it.
    pub reason: u16,
}

/// One flushed aggregate: a (tenant, action) group over one interval; see the module doc.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Event {
    /// Always `shield.aggregate`.
    pub kind: String,
    /// Flush time, RFC 3339 UTC with milliseconds.
    pub timestamp: String,
    /// Flush time, unix milliseconds.
    pub ts_ms: u64,
    /// Milliseconds since the previous flush.
    pub interval_ms: u64,
    /// Node id, when configured.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node: Option<String>,
    /// Tenant.
    pub tenant: u32,
    /// Action.
    pub action: Action,
    /// What proved the sources own their addresses (for `blocked`: the block's evidence).
    pub evidence: Evidence,
    /// Exact number of events in the group.
    pub total: u64,
    /// Heaviest source prefixes, heaviest first.
    pub top: Vec<TopSource>,
    /// `total` minus the listed counts.
    pub other: u64,
    /// Distinct prefixes held for the group.
    pub tracked: u64,
}

#[derive(Clone, Copy, PartialEq, Eq, Hash)]
struct AggKey {
    tenant: u32,
    action: Action,
    evidence: Evidence,
    src: SourceKey,
}

/// An event group: tenant, action, evidence.
type Group = (u32, Action, Evidence);

struct ShardData {
    top: SpaceSaving<AggKey>,
    totals: HashMap<Group, u64>,
    max_totals: usize,
    totals_overflow: u64,
    records: u64,
}

impl ShardData {
    fn new(cfg: &AggregatorConfig) -> Self {
        ShardData {
            top: SpaceSaving::new(cfg.top_k),
            totals: HashMap::with_capacity(cfg.max_totals.max(1)),
            max_totals: cfg.max_totals.max(1),
            totals_overflow: 0,
            records: 0,
        }
    }

    fn bytes(&self) -> usize {
        std::mem::size_of::<Self>() + self.top.bytes() + self.totals.allocation_size()
    }

    fn clear(&mut self) {
        self.top.clear();
        self.totals.clear();
        self.totals_overflow = 0;
        self.records = 0;
    }
}

struct Shard {
    data: Mutex<ShardData>,
    /// Only the flusher touches this: the cleared summary swapped in at the next flush.
    spare: Mutex<Option<ShardData>>,
    users: AtomicUsize,
}

#[derive(Default)]
struct Cumulative {
    records: u64,
    replaced: u64,
    totals_overflow: u64,
    last_flush_ms: u64,
}

/// Counters of the aggregator.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct AggregatorStats {
    /// Live recorders.
    pub recorders: usize,
    /// Shards allocated.
    pub shards: usize,
    /// Recorders that had to share a shard (more than `max_recorders`).
    pub shared_recorders: u64,
    /// Events recorded (flushed so far).
    pub records: u64,
    /// Keys that lost their counter to another (folded into "other").
    pub replaced: u64,
    /// Events whose (tenant, action) total did not fit `max_totals`.
    pub totals_overflow: u64,
    /// Flushes done.
    pub flushes: u64,
    /// Events produced by flushes.
    pub events: u64,
    /// Bytes held by all shards now.
    pub memory_bytes: usize,
    /// Bytes the shards may ever hold (`max_recorders` shards).
    pub budget_bytes: usize,
}

/// The aggregator; see the module documentation.
pub struct Aggregator {
    cfg: AggregatorConfig,
    shard_bytes: usize,
    shards: Mutex<Vec<Arc<Shard>>>,
    next_shared: AtomicUsize,
    shared_recorders: AtomicU64,
    flushed: Mutex<Cumulative>,
    flushes: AtomicU64,
    events: AtomicU64,
}

impl std::fmt::Debug for Aggregator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Aggregator")
            .field("cfg", &self.cfg)
            .finish_non_exhaustive()
    }
}

/// A recording handle owned by one thread; dropping it retires its shard after the next flush.
pub struct Recorder {
    shard: Arc<Shard>,
    v4: u8,
    v6: u8,
}

impl std::fmt::Debug for Recorder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Recorder").finish_non_exhaustive()
    }
}

impl Recorder {
    /// Records one event, on `evidence`. Allocates nothing; locks only this recorder's shard.
    #[inline]
    pub fn record(
        &self,
        tenant: u32,
        source: IpAddr,
        action: Action,
        evidence: Evidence,
        reason: u16,
    ) {
        self.record_n(tenant, source, action, evidence, reason, 1);
    }

    /// Records `n` events of the same kind at once (a batch already counted by the caller).
    #[inline]
    pub fn record_n(
        &self,
        tenant: u32,
        source: IpAddr,
        action: Action,
        evidence: Evidence,
        reason: u16,
        n: u64,
    ) {
        let key = AggKey {
            tenant,
            action,
            evidence,
            src: source_key(source, self.v4, self.v6),
        };
        let mut d = lock(&self.shard.data);
        d.records = d.records.wrapping_add(n);
        d.top.record(key, n, reason);
        let group = (tenant, action, evidence);
        if let Some(t) = d.totals.get_mut(&group) {
            *t = t.wrapping_add(n);
        } else if d.totals.len() < d.max_totals {
            d.totals.insert(group, n);
        } else {
            d.totals_overflow = d.totals_overflow.wrapping_add(n);
        }
    }
}

impl Drop for Recorder {
    fn drop(&mut self) {
        self.shard.users.fetch_sub(1, Ordering::AcqRel);
    }
}

impl Aggregator {
    /// An aggregator with no shards yet.
    pub fn new(cfg: AggregatorConfig) -> Arc<Self> {
        let shard_bytes = ShardData::new(&cfg).bytes();
        Arc::new(Aggregator {
            cfg,
            shard_bytes,
            shards: Mutex::new(Vec::new()),
            next_shared: AtomicUsize::new(0),
            shared_recorders: AtomicU64::new(0),
            flushed: Mutex::new(Cumulative::default()),
            flushes: AtomicU64::new(0),
            events: AtomicU64::new(0),
        })
    }

    /// The configuration.
    pub fn config(&self) -> &AggregatorConfig {
        &self.cfg
    }

    /// A recorder for the calling thread, with its own shard while fewer than `max_recorders` exist.
    pub fn recorder(&self) -> Recorder {
        let mut shards = lock(&self.shards);
        let shard = if shards.len() < self.cfg.max_recorders.max(1) {
            let s = Arc::new(Shard {
                data: Mutex::new(ShardData::new(&self.cfg)),
                spare: Mutex::new(Some(ShardData::new(&self.cfg))),
                users: AtomicUsize::new(0),
            });
            shards.push(Arc::clone(&s));
            s
        } else {
            self.shared_recorders.fetch_add(1, Ordering::Relaxed);
            let i = self.next_shared.fetch_add(1, Ordering::Relaxed) % shards.len();
            Arc::clone(&shards[i])
        };
        shard.users.fetch_add(1, Ordering::AcqRel);
        Recorder {
            shard,
            v4: self.cfg.v4_prefix.min(32),
            v6: self.cfg.v6_prefix.min(128),
        }
    }

    /// Bytes one shard holds (live summary and spare).
    pub fn shard_bytes(&self) -> usize {
        2 * self.shard_bytes
    }

    /// Bytes all shards hold now, measured from their allocations.
    pub fn memory_bytes(&self) -> usize {
        let shards: Vec<Arc<Shard>> = lock(&self.shards).clone();
        shards
            .iter()
            .map(|s| {
                let spare = lock(&s.spare).as_ref().map_or(0, ShardData::bytes);
                lock(&s.data).bytes() + spare
            })
            .sum()
    }

    /// Bytes the shards may ever hold.
    pub fn budget_bytes(&self) -> usize {
        self.cfg.max_recorders.max(1) * self.shard_bytes()
    }

    /// Swaps out every shard, merges them and returns one event per (tenant, action,
    /// evidence) seen since the previous flush. Cost is bounded by shards × `top_k`, not by sources.
    pub fn flush(&self, now_ms: u64) -> Vec<Event> {
        let shards: Vec<Arc<Shard>> = lock(&self.shards).clone();
        let mut merged: HashMap<AggKey, (u64, u64, u16)> = HashMap::new();
        let mut totals: HashMap<Group, u64> = HashMap::new();
        let (mut records, mut replaced, mut overflow) = (0u64, 0u64, 0u64);
        let mut retired = Vec::new();
        for shard in &shards {
            // Users are read before the swap: a recorder dropped after this still had its
            // events swapped out below, and its shard goes at the next flush.
            let idle = shard.users.load(Ordering::Acquire) == 0;
            let fresh = lock(&shard.spare)
                .take()
                .unwrap_or_else(|| ShardData::new(&self.cfg));
            let mut data = std::mem::replace(&mut *lock(&shard.data), fresh);
            for c in data.top.iter() {
                let e = merged.entry(c.key).or_insert((0, 0, c.reason));
                e.0 += c.count;
                e.1 += c.count - c.error;
                e.2 = c.reason;
            }
            for (k, v) in data.totals.iter() {
                *totals.entry(*k).or_insert(0) += v;
            }
            records += data.records;
            replaced += data.top.replaced;
            overflow += data.totals_overflow;
            data.clear();
            *lock(&shard.spare) = Some(data);
            if idle {
                retired.push(Arc::clone(shard));
            }
        }
        if !retired.is_empty() {
            lock(&self.shards).retain(|s| !retired.iter().any(|r| Arc::ptr_eq(r, s)));
        }
        let interval_ms = {
            let mut c = lock(&self.flushed);
            c.records += records;
            c.replaced += replaced;
            c.totals_overflow += overflow;
            let prev = std::mem::replace(&mut c.last_flush_ms, now_ms);
            if prev == 0 {
                self.cfg.interval_secs * 1000
            } else {
                now_ms.saturating_sub(prev)
            }
        };

        let mut groups: HashMap<Group, Vec<TopSource>> = HashMap::new();
        for (k, (count, min_count, reason)) in merged {
            groups
                .entry((k.tenant, k.action, k.evidence))
                .or_default()
                .push(TopSource {
                    prefix: k.src.to_net(),
                    count,
                    min_count,
                    reason,
                });
        }
        let timestamp = crate::clock::rfc3339_ms(now_ms);
        let mut out: Vec<Event> = totals
            .into_iter()
            .map(|((tenant, action, evidence), total)| {
                let mut top = groups
                    .remove(&(tenant, action, evidence))
                    .unwrap_or_default();
                let tracked = top.len() as u64;
                top.sort_unstable_by(|a, b| b.count.cmp(&a.count).then(a.prefix.cmp(&b.prefix)));
                top.truncate(self.cfg.top_n);
                let listed: u64 = top.iter().map(|t| t.count).sum();
                Event {
                    kind: "shield.aggregate".to_string(),
                    timestamp: timestamp.clone(),
                    ts_ms: now_ms,
                    interval_ms,
                    node: self.cfg.node.clone(),
                    tenant,
                    action,
                    evidence,
                    total,
                    top,
                    other: total.saturating_sub(listed),
                    tracked,
                }
            })
            .collect();
        out.sort_unstable_by_key(|e| (e.tenant, e.action, e.evidence));
        self.flushes.fetch_add(1, Ordering::Relaxed);
        self.events.fetch_add(out.len() as u64, Ordering::Relaxed);
        out
    }

    /// Current counters (`records`, `replaced` and `totals_overflow` as of the last flush).
    pub fn stats(&self) -> AggregatorStats {
        let (shards, recorders) = {
            let s = lock(&self.shards);
            (
                s.len(),
                s.iter().map(|s| s.users.load(Ordering::Relaxed)).sum(),
            )
        };
        let memory_bytes = self.memory_bytes();
        let c = lock(&self.flushed);
        AggregatorStats {
            recorders,
            shards,
            shared_recorders: self.shared_recorders.load(Ordering::Relaxed),
            records: c.records,
            replaced: c.replaced,
            totals_overflow: c.totals_overflow,
            flushes: self.flushes.load(Ordering::Relaxed),
            events: self.events.load(Ordering::Relaxed),
            memory_bytes,
            budget_bytes: self.budget_bytes(),
        }
    }

    /// Starts a thread that flushes every `interval_secs` into `writers` (and once more on stop).
    pub fn spawn_flusher(self: &Arc<Self>, writers: Vec<SinkWriter>) -> std::io::Result<Flusher> {
        let stop = Arc::new((Mutex::new(false), Condvar::new()));
        let writers = Arc::new(writers);
        let (agg, st, ws) = (Arc::clone(self), Arc::clone(&stop), Arc::clone(&writers));
        let interval = Duration::from_secs(self.cfg.interval_secs.max(1));
        let thread = std::thread::Builder::new()
            .name("shield-flush".to_string())
            .spawn(move || {
                loop {
                    let stopped = {
                        let g = lock(&st.0);
                        let (g, _) =
                            st.1.wait_timeout_while(g, interval, |s| !*s)
                                .unwrap_or_else(|e| e.into_inner());
                        *g
                    };
                    let events = agg.flush(crate::clock::unix_ms());
                    if !events.is_empty() {
                        let batch: Arc<[Event]> = events.into();
                        for w in ws.iter() {
                            w.send(Arc::clone(&batch));
                        }
                    }
                    if stopped {
                        break;
                    }
                }
            })?;
        Ok(Flusher {
            stop,
            writers,
            thread: Some(thread),
        })
    }
}

/// The running flush thread; [`Flusher::stop`] flushes once more and drains the sinks.
pub struct Flusher {
    stop: Arc<(Mutex<bool>, Condvar)>,
    writers: Arc<Vec<SinkWriter>>,
    thread: Option<JoinHandle<()>>,
}

impl std::fmt::Debug for Flusher {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Flusher")
            .field("sinks", &self.sink_stats())
            .finish()
    }
}

impl Flusher {
    /// The sinks' counters as a metrics source (it outlives the flusher).
    pub fn sinks_source(&self) -> SinksSource {
        SinksSource(self.writers.iter().map(SinkWriter::stats_handle).collect())
    }

    /// Counters of every sink.
    pub fn sink_stats(&self) -> Vec<SinkStats> {
        self.writers.iter().map(SinkWriter::stats).collect()
    }

    /// Stops the thread after a last flush, waits for the sinks to write what is queued.
    pub fn stop(mut self) -> Vec<SinkStats> {
        self.halt();
        match Arc::try_unwrap(std::mem::take(&mut self.writers)) {
            // Side by side: each sink drains within its own deadline, and a stop waits for
            // the longest, not their sum.
            Ok(ws) => std::thread::scope(|s| {
                let closing: Vec<_> = ws.into_iter().map(|w| s.spawn(move || w.close())).collect();
                closing.into_iter().filter_map(|h| h.join().ok()).collect()
            }),
            Err(ws) => ws.iter().map(SinkWriter::stats).collect(),
        }
    }

    fn halt(&mut self) {
        *lock(&self.stop.0) = true;
        self.stop.1.notify_all();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

impl Drop for Flusher {
    fn drop(&mut self) {
        self.halt();
    }
}

/// The aggregator's counters, named `palisade_events_*` in both daemons.
impl crate::metrics::Source for Aggregator {
    fn collect(&self, out: &mut crate::metrics::Samples) {
        let a = self.stats();
        for (ctl, m, help, v) in [
            (
                "events.records",
                "palisade_events_recorded_total",
                "Events recorded into the aggregator (as of the last flush).",
                a.records,
            ),
            (
                "events.replaced",
                "palisade_events_replaced_total",
                "Heavy-hitter counters replaced (sources folded into other).",
                a.replaced,
            ),
            (
                "events.totals_overflow",
                "palisade_events_totals_overflow_total",
                "Events whose (tenant, action) total did not fit.",
                a.totals_overflow,
            ),
            (
                "events.flushes",
                "palisade_events_flushes_total",
                "Aggregator flushes.",
                a.flushes,
            ),
            (
                "events.flushed",
                "palisade_events_flushed_total",
                "Aggregated events flushed.",
                a.events,
            ),
            (
                "events.shared_recorders",
                "palisade_events_shared_recorders_total",
                "Recorders that had to share a shard (more than max_recorders).",
                a.shared_recorders,
            ),
        ] {
            out.counter(ctl, m, "", help, v);
        }
        out.gauge(
            "events.memory_bytes",
            "palisade_events_memory_bytes",
            "of=\"used\"",
            "Memory of the event aggregator now, and its budget.",
            a.memory_bytes as u64,
        );
        out.gauge(
            "events.budget_bytes",
            "palisade_events_memory_bytes",
            "of=\"budget\"",
            "Memory of the event aggregator now, and its budget.",
            a.budget_bytes as u64,
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[test]
    fn timestamps() {
        assert_eq!(crate::clock::rfc3339_ms(0), "1970-01-01T00:00:00.000Z");
        assert_eq!(
            crate::clock::rfc3339_ms(951_782_400_123),
            "2000-02-29T00:00:00.123Z"
        );
        assert_eq!(
            crate::clock::rfc3339_ms(1_735_689_610_000),
            "2025-01-01T00:00:10.000Z"
        );
    }

    #[test]
    fn aggregates_by_prefix_and_action_with_exact_totals() {
        let agg = Aggregator::new(AggregatorConfig {
            node: Some("n1".into()),
            ..AggregatorConfig::default()
        });
        let r = agg.recorder();
        for i in 0..100u8 {
            r.record(
                7,
                ip(&format!("192.0.2.{i}")),
                Action::RateLimited,
                crate::block::Evidence::Udp,
                5,
            );
        }
        r.record_n(
            7,
            ip("2001:db8:0:1::1"),
            Action::RateLimited,
            crate::block::Evidence::Udp,
            5,
            10,
        );
        r.record_n(
            7,
            ip("2001:db8:0:2::1"),
            Action::RateLimited,
            crate::block::Evidence::Udp,
            5,
            10,
        );
        r.record(
            8,
            ip("198.51.100.1"),
            Action::Blocked,
            crate::block::Evidence::Udp,
            0,
        );
        let ev = agg.flush(1_000);
        assert_eq!(ev.len(), 2);
        let e = &ev[0];
        assert_eq!(
            (e.tenant, e.action, e.total, e.other, e.tracked),
            (7, Action::RateLimited, 120, 0, 2)
        );
        assert_eq!(e.top[0].prefix, "192.0.2.0/24".parse::<IpNet>().unwrap());
        assert_eq!(
            (e.top[0].count, e.top[0].min_count, e.top[0].reason),
            (100, 100, 5)
        );
        assert_eq!(e.top[1].prefix, "2001:db8::/56".parse::<IpNet>().unwrap());
        assert_eq!(e.top[1].count, 20);
        assert_eq!(e.node.as_deref(), Some("n1"));
        assert_eq!(ev[1].action, Action::Blocked);
        assert!(agg.flush(2_000).is_empty(), "flush resets");
        assert_eq!(agg.stats().records, 121);
    }

    #[test]
    fn multiple_recorders_merge_and_dropped_recorders_retire() {
        let agg = Aggregator::new(AggregatorConfig::default());
        let a = agg.recorder();
        let b = agg.recorder();
        a.record(
            1,
            ip("192.0.2.1"),
            Action::Denied,
            crate::block::Evidence::Udp,
            1,
        );
        b.record(
            1,
            ip("192.0.2.2"),
            Action::Denied,
            crate::block::Evidence::Udp,
            1,
        );
        drop(b);
        let ev = agg.flush(10);
        assert_eq!((ev[0].total, ev[0].top[0].count), (2, 2));
        assert_eq!(
            agg.stats().shards,
            1,
            "b's shard retired after its last flush"
        );
        drop(a);
        agg.flush(20);
        assert_eq!(agg.stats().shards, 0);
    }

    #[test]
    fn more_recorders_than_shards_share() {
        let agg = Aggregator::new(AggregatorConfig {
            max_recorders: 2,
            ..AggregatorConfig::default()
        });
        let rs: Vec<Recorder> = (0..5).map(|_| agg.recorder()).collect();
        for r in &rs {
            r.record(
                1,
                ip("192.0.2.1"),
                Action::Blocked,
                crate::block::Evidence::Udp,
                0,
            );
        }
        let st = agg.stats();
        assert_eq!((st.shards, st.recorders, st.shared_recorders), (2, 5, 3));
        assert_eq!(agg.flush(1)[0].total, 5);
        assert!(agg.memory_bytes() <= agg.budget_bytes());
    }

    #[test]
    fn top_n_and_other() {
        let agg = Aggregator::new(AggregatorConfig {
            top_n: 2,
            v4_prefix: 32,
            ..AggregatorConfig::default()
        });
        let r = agg.recorder();
        for (i, n) in [50u64, 40, 30, 20, 10].iter().enumerate() {
            r.record_n(
                1,
                ip(&format!("10.0.0.{i}")),
                Action::Challenged,
                crate::block::Evidence::Udp,
                9,
                *n,
            );
        }
        let e = &agg.flush(5)[0];
        assert_eq!(e.top.len(), 2);
        assert_eq!((e.top[0].count, e.top[1].count), (50, 40));
        assert_eq!((e.total, e.other, e.tracked), (150, 60, 5));
    }

    #[test]
    fn totals_table_is_bounded() {
        let agg = Aggregator::new(AggregatorConfig {
            max_totals: 2,
            ..AggregatorConfig::default()
        });
        let r = agg.recorder();
        for t in 0..5 {
            r.record(
                t,
                ip("192.0.2.1"),
                Action::Blocked,
                crate::block::Evidence::Udp,
                0,
            );
        }
        assert_eq!(agg.flush(1).len(), 2);
        assert_eq!(agg.stats().totals_overflow, 3);
    }
}
