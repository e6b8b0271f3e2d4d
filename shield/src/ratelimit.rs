//! Rate limiters with bounded, lock-free state: GCRA buckets and window counters in a set-associative table, plus a count-min estimator.
//!
//! [`RateLimiter`] is a token bucket in its [GCRA](https://en.wikipedia.org/wiki/Generic_cell_rate_algorithm)
//! form: per key it stores one "theoretical arrival time". [`WindowCounter`] counts events per key
//! in fixed windows (escalation thresholds). Both keep their state in a fixed table of 64-bit
//! slots grouped in 4-way buckets; a slot packs a 32-bit key fingerprint with 32 bits of state, so
//! every update is one compare-and-swap on one word: no lock, no allocation, shared by all
//! threads, and two cores only meet when they touch the same bucket.
//!
//! Edge behaviour, stated plainly:
//! - The table never grows. A key that finds no free slot in its bucket evicts the slot that
//!   carries the least state (the bucket closest to full, the window count lowest); such
//!   evictions are counted ([`TableStats::evictions`]). An evicted source starts afresh: under
//!   memory pressure the limiter errs towards letting traffic through, never towards blocking
//!   an innocent source.
//! - Two keys with the same bucket and the same 32-bit fingerprint share state (odds about
//!   4 in 2^32 per pair of keys in a bucket).
//! - GCRA time is kept in 4 µs ticks in 32 bits: it wraps every 4.7 hours and a burst
//!   tolerance is capped at 2^30 ticks (71 minutes). A slot untouched for exactly a multiple
//!   of the wrap period may be read as recent once; that costs at most one spurious limit.
//! - A window counter saturates at 65,535 per window.
//!
//! [`Estimator`] is a lock-free count-min sketch (as in `pingora-limits`): fixed memory for any
//! number of keys, counts that can only over-estimate. Use it for "roughly how often"; use the
//! keyed tables when a wrong over-count would punish an innocent source.

use crate::util::StripedCounter;
use ipnet::{IpNet, Ipv4Net, Ipv6Net};
use serde::{Deserialize, Serialize};
use std::hash::{BuildHasher, Hash};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

const WAYS: usize = 4;
/// Largest burst tolerance plus interval in ticks; also the horizon beyond which state is stale.
const HORIZON_TICKS: u32 = 1 << 30;

#[repr(align(32))]
#[derive(Default)]
struct Bucket([AtomicU64; WAYS]);

/// The most slots a keyed table may be given in a config (2 GiB of 8-byte slots): a typo of
/// a few digits is refused with its key, never an allocation that aborts the process.
pub const MAX_TABLE_SLOTS: usize = 1 << 28;

/// Size of a keyed table (`[rate_limit]`-style config sections embed it).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct TableConfig {
    /// Number of keys the table can hold (rounded up to a power of two, at least 4); 8 bytes
    /// each; at most [`MAX_TABLE_SLOTS`].
    #[serde(deserialize_with = "table_slots")]
    pub slots: usize,
}

/// A table size of a config, at most [`MAX_TABLE_SLOTS`].
pub fn table_slots<'de, D: serde::Deserializer<'de>>(d: D) -> Result<usize, D::Error> {
    let n = usize::deserialize(d)?;
    if n > MAX_TABLE_SLOTS {
        return Err(serde::de::Error::custom(format!(
            "{n} slots: at most {MAX_TABLE_SLOTS} (2 GiB)"
        )));
    }
    Ok(n)
}

impl Default for TableConfig {
    fn default() -> Self {
        TableConfig { slots: 1 << 16 }
    }
}

/// Counters of a keyed table.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct TableStats {
    /// Capacity in keys.
    pub slots: usize,
    /// Bytes held by the table.
    pub bytes: usize,
    /// Keys whose live state was evicted to make room for another key.
    pub evictions: u64,
}

/// The set-associative slot table shared by [`RateLimiter`] and [`WindowCounter`].
struct Table {
    buckets: Box<[Bucket]>,
    mask: usize,
    hasher: foldhash::fast::RandomState,
    evictions: StripedCounter,
}

#[inline]
fn split(v: u64) -> (u32, u32) {
    ((v >> 32) as u32, v as u32)
}

#[inline]
fn join(fp: u32, payload: u32) -> u64 {
    ((fp as u64) << 32) | payload as u64
}

impl Table {
    fn new(cfg: &TableConfig) -> Self {
        let buckets = (cfg.slots.max(WAYS) / WAYS).next_power_of_two();
        Table {
            buckets: (0..buckets).map(|_| Bucket::default()).collect(),
            mask: buckets - 1,
            hasher: foldhash::fast::RandomState::default(),
            evictions: StripedCounter::default(),
        }
    }

    fn stats(&self) -> TableStats {
        TableStats {
            slots: self.buckets.len() * WAYS,
            bytes: std::mem::size_of_val(&*self.buckets),
            evictions: self.evictions.sum(),
        }
    }

    /// Applies `f` to the payload stored for hash `h` (`None` when the key is new) and stores
    /// what it returns (nothing when it returns `None`), with one CAS.
    ///
    /// `live(p)` tells whether a payload still carries state; `rank(p)` orders live payloads
    /// for eviction, lowest first.
    #[inline]
    fn update<R>(
        &self,
        h: u64,
        live: impl Fn(u32) -> bool,
        rank: impl Fn(u32) -> u32,
        mut f: impl FnMut(Option<u32>) -> (Option<u32>, R),
    ) -> R {
        let bi = (h as usize) & self.mask;
        let bucket = &self.buckets[bi];
        let fp = ((h >> 32) as u32).max(1);
        'retry: loop {
            // (slot index, old word, old slot was live, rank)
            let mut victim: Option<(usize, u64, bool, u32)> = None;
            for (i, slot) in bucket.0.iter().enumerate() {
                let v = slot.load(Ordering::Acquire);
                let (vfp, payload) = split(v);
                if vfp == fp {
                    let (new, r) = f(Some(payload));
                    match new {
                        None => return r,
                        Some(p) => {
                            if slot
                                .compare_exchange(
                                    v,
                                    join(fp, p),
                                    Ordering::AcqRel,
                                    Ordering::Relaxed,
                                )
                                .is_ok()
                            {
                                return r;
                            }
                            continue 'retry;
                        }
                    }
                }
                let is_live = vfp != 0 && live(payload);
                let r = if is_live { rank(payload) } else { 0 };
                let better = match victim {
                    None => true,
                    Some((_, _, vl, vr)) => (vl && !is_live) || (vl == is_live && r < vr),
                };
                if better {
                    victim = Some((i, v, is_live, r));
                }
            }
            let (i, old, was_live, _) = victim.expect("a bucket has slots");
            let (new, r) = f(None);
            let Some(p) = new else { return r };
            if bucket.0[i]
                .compare_exchange(old, join(fp, p), Ordering::AcqRel, Ordering::Relaxed)
                .is_ok()
            {
                if was_live {
                    self.evictions.add(bi, 1);
                }
                return r;
            }
        }
    }
}

/// A rate: `per_second` sustained with bursts of `burst` (GCRA emission interval and tolerance).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limit {
    /// Ticks between two conforming events at the sustained rate.
    interval: u32,
    /// Ticks an arrival may run ahead of the sustained schedule.
    tolerance: u32,
    /// Ticks of debt limited events may run up beyond the tolerance (BIND's RRL window); 0:
    /// limited events are not counted (plain GCRA).
    penalty: u32,
}

/// Microseconds per GCRA tick.
const TICK_US: u64 = 4;

impl Limit {
    /// `per_second` events per second sustained, `burst` at once (clamped to what 4 µs ticks
    /// and a 71-minute horizon can express: at most 250,000/s, at least one per 71 minutes).
    pub fn per_second(per_second: f64, burst: u32) -> Self {
        let rate = if per_second.is_finite() && per_second > 0.0 {
            per_second
        } else {
            1e-9
        };
        let ticks_per_s = 1_000_000.0 / TICK_US as f64;
        let interval = (ticks_per_s / rate)
            .round()
            .clamp(1.0, (HORIZON_TICKS / 2) as f64) as u32;
        let tolerance = (interval as u64 * burst.saturating_sub(1) as u64)
            .min((HORIZON_TICKS - interval) as u64);
        Limit {
            interval,
            tolerance: tolerance as u32,
            penalty: 0,
        }
    }

    /// The same rate, where limited events count too, up to `window_secs` of debt: a source
    /// that keeps going over the rate stays limited until it slows below it, and its excess
    /// is remembered for at most that long (BIND's RRL `window`).
    pub fn with_window(self, window_secs: u32) -> Self {
        let ticks = u64::from(window_secs) * (1_000_000 / TICK_US);
        let room = u64::from(HORIZON_TICKS - self.interval - self.tolerance);
        Limit {
            penalty: ticks.min(room) as u32,
            ..self
        }
    }

    /// Largest burst this limit admits at once.
    pub fn burst(&self) -> u32 {
        self.tolerance / self.interval + 1
    }
}

/// A rate-limit decision.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Decision {
    /// The event conforms; it was counted.
    Allow,
    /// The event exceeds the limit; it was not counted. Conforming again after this many µs.
    Limit {
        /// Microseconds until the next event would conform.
        retry_after_us: u64,
    },
}

impl Decision {
    /// True for [`Decision::Allow`].
    pub fn is_allow(&self) -> bool {
        matches!(self, Decision::Allow)
    }
}

/// A source address or prefix as a hashable key: the address with host bits cleared, and the length.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct SourceKey {
    /// The masked address; IPv4 as its IPv4-mapped IPv6 form.
    pub addr: u128,
    /// Prefix length within its family.
    pub len: u8,
    /// True for IPv6.
    pub v6: bool,
}

impl SourceKey {
    /// The prefix this key stands for.
    pub fn to_net(&self) -> IpNet {
        if self.v6 {
            IpNet::V6(Ipv6Net::new(Ipv6Addr::from(self.addr), self.len).expect("len <= 128"))
        } else {
            IpNet::V4(Ipv4Net::new(Ipv4Addr::from(self.addr as u32), self.len).expect("len <= 32"))
        }
    }
}

/// Prefix length that marks a [`SourceKey`] made by [`value_key`] (no address prefix has it).
pub const VALUE_KEY_LEN: u8 = u8::MAX;

/// The key of a limit counted per value of an attribute and per source prefix together (a
/// name asked by one resolver: Knot's RRL account), apart from [`value_key`]'s and every
/// source's own.
pub fn source_value_key(src: SourceKey, value: &str) -> SourceKey {
    use std::hash::BuildHasher as _;
    hashed_key(VALUE_HASH.hash_one((src.addr, src.len, value)))
}

/// A rate-limit key for an attribute's value (a JA4 fingerprint) instead of a source: its
/// keyed hash (the process's own key, so that nobody can aim collisions at another value).
/// Never a prefix: [`SourceKey::to_net`] is not for it.
pub fn value_key(value: &str) -> SourceKey {
    use std::hash::BuildHasher as _;
    hashed_key(VALUE_HASH.hash_one(value))
}

/// The process's own key for the hashes of values' rate-limit keys.
static VALUE_HASH: std::sync::LazyLock<std::collections::hash_map::RandomState> =
    std::sync::LazyLock::new(std::collections::hash_map::RandomState::new);

/// A value's key from its hash: the top bit set and [`VALUE_KEY_LEN`], never an address's.
fn hashed_key(h: u64) -> SourceKey {
    SourceKey {
        addr: u128::from(h) | 1 << 127,
        len: VALUE_KEY_LEN,
        v6: true,
    }
}

/// The source a per-source bound (connections, slow-reader strikes) counts `ip` as: an IPv4 address
/// (IPv4-mapped ones as IPv4), an IPv6 address's /64 — one host holds a /64, and counted by
/// address it could open a connection from each of its 2^64 addresses — but a NAT64 address
/// whole (each is another IPv4 client).
#[inline]
pub fn host_source(ip: IpAddr) -> IpAddr {
    match ip.to_canonical() {
        IpAddr::V6(a) if is_nat64(a) => IpAddr::V6(a),
        IpAddr::V6(a) => IpAddr::V6((u128::from(a) & !u128::from(u64::MAX)).into()),
        v4 => v4,
    }
}

/// The NAT64 well-known prefix `64:ff9b::/96` (RFC 6052; SIIT-DC, RFC 7755, shows an
/// IPv6-only server every IPv4 client inside it).
const NAT64: u128 = 0x0064_ff9b_u128 << 96;

/// True for an address of `64:ff9b::/96`: an IPv4 client translated (its host is the whole
/// address, its prefixes the IPv4 ones: a /64 there is every IPv4 client at once).
#[inline]
pub fn is_nat64(a: std::net::Ipv6Addr) -> bool {
    u128::from(a) >> 32 == NAT64 >> 32
}

/// [`host_source`] as a prefix: an IPv4 address's /32, an IPv6 address's /64 — what a
/// defence that blocks a host blocks, so that the host cannot step to its next address.
pub fn host_net(ip: IpAddr) -> IpNet {
    source_key(ip, 32, 64).to_net()
}

/// The key of `ip`'s prefix of `v4_len` (IPv4) or `v6_len` (IPv6) bits.
///
/// IPv4-mapped IPv6 addresses are keyed as IPv4. Lengths longer than the family's are clamped.
#[inline]
pub fn source_key(ip: IpAddr, v4_len: u8, v6_len: u8) -> SourceKey {
    match ip.to_canonical() {
        IpAddr::V4(a) => {
            let len = v4_len.min(32);
            let a = u32::from(a);
            let m = if len == 0 {
                0
            } else {
                a & (u32::MAX << (32 - len))
            };
            SourceKey {
                addr: (0xffff_u128 << 32) | m as u128,
                len,
                v6: false,
            }
        }
        IpAddr::V6(a) => {
            // A translated IPv4 client: its IPv4 prefix, inside the NAT64 prefix.
            let len = if is_nat64(a) {
                96 + v4_len.min(32)
            } else {
                v6_len.min(128)
            };
            let a = u128::from(a);
            let m = if len == 0 {
                0
            } else {
                a & (u128::MAX << (128 - len))
            };
            SourceKey {
                addr: m,
                len,
                v6: true,
            }
        }
    }
}

/// A GCRA token-bucket limiter over a bounded lock-free table; see the module documentation.
pub struct RateLimiter {
    table: Table,
}

impl std::fmt::Debug for RateLimiter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RateLimiter")
            .field("stats", &self.stats())
            .finish()
    }
}

impl RateLimiter {
    /// A limiter holding up to `cfg.slots` keys.
    pub fn new(cfg: &TableConfig) -> Self {
        RateLimiter {
            table: Table::new(cfg),
        }
    }

    /// Checks and counts one event for `key` at monotonic time `now_us` against `limit`.
    ///
    /// Different limits may share one limiter as long as their keys differ (mix a tenant or
    /// rule id into the key). Allocates nothing, takes no lock.
    #[inline]
    pub fn check<K: Hash>(&self, key: &K, limit: &Limit, now_us: u64) -> Decision {
        self.check_hash(self.table.hasher.hash_one(key), limit, now_us)
    }

    /// As [`check`](Self::check), with the key already hashed to 64 bits.
    #[inline]
    pub fn check_hash(&self, h: u64, limit: &Limit, now_us: u64) -> Decision {
        let now = (now_us / TICK_US) as u32;
        let (t, tol) = (limit.interval, limit.tolerance);
        let cap = tol + limit.penalty;
        self.table.update(
            h,
            |tat| {
                let d = tat.wrapping_sub(now);
                d != 0 && d <= HORIZON_TICKS
            },
            |tat| tat.wrapping_sub(now),
            |cur| {
                let tat = match cur {
                    Some(tat) => {
                        let d = tat.wrapping_sub(now);
                        // Behind now (wrapped high) or beyond any legal horizon: stale.
                        if d > cap.saturating_add(t) { now } else { tat }
                    }
                    None => now,
                };
                let ahead = tat.wrapping_sub(now);
                if ahead <= tol {
                    (Some(tat.wrapping_add(t)), Decision::Allow)
                } else {
                    let retry_after_us = (ahead - tol) as u64 * TICK_US;
                    // With a window, the limited event is a debt too, up to the cap.
                    let debt = (limit.penalty > 0).then(|| now.wrapping_add(cap.min(ahead + t)));
                    (debt, Decision::Limit { retry_after_us })
                }
            },
        )
    }

    /// Capacity and eviction counters.
    pub fn stats(&self) -> TableStats {
        self.table.stats()
    }
}

/// Per-key event counts in fixed windows over a bounded lock-free table (escalation thresholds).
pub struct WindowCounter {
    table: Table,
}

impl std::fmt::Debug for WindowCounter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WindowCounter")
            .field("stats", &self.stats())
            .finish()
    }
}

impl WindowCounter {
    /// A counter table holding up to `cfg.slots` keys.
    pub fn new(cfg: &TableConfig) -> Self {
        WindowCounter {
            table: Table::new(cfg),
        }
    }

    /// Adds `n` events for `key` in the window of `window_ms` containing `now_ms`; returns the
    /// key's count in that window after adding (saturating at 65,535).
    #[inline]
    pub fn add<K: Hash>(&self, key: &K, n: u32, window_ms: u64, now_ms: u64) -> u32 {
        self.add_hash(self.table.hasher.hash_one(key), n, window_ms, now_ms)
    }

    /// As [`add`](Self::add), with the key already hashed to 64 bits.
    #[inline]
    pub fn add_hash(&self, h: u64, n: u32, window_ms: u64, now_ms: u64) -> u32 {
        let w = ((now_ms / window_ms.max(1)) & 0xffff) as u32;
        self.table.update(
            h,
            |p| p >> 16 == w,
            |p| p & 0xffff,
            |cur| {
                let c = match cur {
                    Some(p) if p >> 16 == w => p & 0xffff,
                    _ => 0,
                };
                let c = (c + n.min(0xffff)).min(0xffff);
                (Some((w << 16) | c), c)
            },
        )
    }

    /// Capacity and eviction counters.
    pub fn stats(&self) -> TableStats {
        self.table.stats()
    }
}

/// Keys marked until a time (unix seconds): lock-free, bounded, a full bucket giving up
/// the mark closest to its end (towards letting through, as every table here evicts).
pub struct UntilTable {
    table: Table,
    /// Some mark was ever set: an unused table costs readers one load.
    used: std::sync::atomic::AtomicBool,
}

impl std::fmt::Debug for UntilTable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("UntilTable")
            .field("stats", &self.table.stats())
            .finish()
    }
}

impl UntilTable {
    /// A table holding up to `cfg.slots` keys.
    pub fn new(cfg: &TableConfig) -> Self {
        UntilTable {
            table: Table::new(cfg),
            used: std::sync::atomic::AtomicBool::new(false),
        }
    }

    /// Marks `key` until `until_s` (a later mark kept), at `now_s`.
    pub fn set<K: Hash>(&self, key: &K, until_s: u32, now_s: u32) {
        self.used.store(true, Ordering::Relaxed);
        let h = self.table.hasher.hash_one(key);
        self.table.update(
            h,
            |p| p > now_s,
            |p| p,
            |cur| (Some(cur.filter(|&p| p > until_s).unwrap_or(until_s)), ()),
        );
    }

    /// True when `key` is marked past `now_s`.
    #[inline]
    pub fn live<K: Hash>(&self, key: &K, now_s: u32) -> bool {
        self.until(key, now_s).is_some()
    }

    /// The live mark of `key` at `now_s` (when it lapses), if any.
    #[inline]
    pub fn until<K: Hash>(&self, key: &K, now_s: u32) -> Option<u32> {
        if !self.used.load(Ordering::Relaxed) {
            return None;
        }
        let h = self.table.hasher.hash_one(key);
        self.table.update(
            h,
            |p| p > now_s,
            |p| p,
            |cur| (None, cur.filter(|&p| p > now_s)),
        )
    }

    /// Capacity and eviction counters.
    pub fn stats(&self) -> TableStats {
        self.table.stats()
    }

    /// Forgets the mark of `key`, if any.
    pub fn lift<K: Hash>(&self, key: &K) {
        let h = self.table.hasher.hash_one(key);
        self.table
            .update(h, |p| p > 0, |p| p, |cur| (cur.map(|_| 0), ()));
    }

    /// Forgets every mark.
    pub fn clear(&self) {
        for b in self.table.buckets.iter() {
            for slot in &b.0 {
                slot.store(0, Ordering::Relaxed);
            }
        }
    }
}

/// A lock-free count-min sketch: `depth` rows of `width` counters, over-estimates only.
pub struct Estimator {
    counters: Box<[AtomicU32]>,
    width: usize,
    depth: usize,
    hasher: foldhash::fast::RandomState,
}

impl std::fmt::Debug for Estimator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Estimator")
            .field("width", &self.width)
            .field("depth", &self.depth)
            .finish()
    }
}

impl Estimator {
    /// A sketch of `depth` rows (1..=8) by `width` counters (rounded up to a power of two).
    pub fn new(depth: usize, width: usize) -> Self {
        let depth = depth.clamp(1, 8);
        let width = width.max(1).next_power_of_two();
        Estimator {
            counters: (0..depth * width).map(|_| AtomicU32::new(0)).collect(),
            width,
            depth,
            hasher: foldhash::fast::RandomState::default(),
        }
    }

    #[inline]
    fn index(&self, h: u64, row: usize) -> usize {
        // Double hashing: row i uses h1 + i * h2.
        let h1 = h as u32 as usize;
        let h2 = ((h >> 32) as usize) | 1;
        row * self.width + (h1.wrapping_add(row.wrapping_mul(h2)) & (self.width - 1))
    }

    /// Adds `n` to `key` and returns its new estimate (saturating).
    #[inline]
    pub fn incr<K: Hash>(&self, key: &K, n: u32) -> u32 {
        let h = self.hasher.hash_one(key);
        let mut min = u32::MAX;
        for row in 0..self.depth {
            let c = &self.counters[self.index(h, row)];
            let old = c.fetch_add(n, Ordering::Relaxed);
            let new = old.checked_add(n).unwrap_or_else(|| {
                c.store(u32::MAX, Ordering::Relaxed);
                u32::MAX
            });
            min = min.min(new);
        }
        min
    }

    /// The estimate for `key` (never below the true count since the last reset).
    pub fn get<K: Hash>(&self, key: &K) -> u32 {
        let h = self.hasher.hash_one(key);
        (0..self.depth)
            .map(|row| self.counters[self.index(h, row)].load(Ordering::Relaxed))
            .min()
            .unwrap_or(0)
    }

    /// Zeroes every counter (O(width × depth); call from a timer, not per event).
    pub fn reset(&self) {
        for c in self.counters.iter() {
            c.store(0, Ordering::Relaxed);
        }
    }

    /// Bytes held by the sketch.
    pub fn bytes(&self) -> usize {
        std::mem::size_of_val(&*self.counters)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gcra_allows_burst_then_sustained_rate() {
        let rl = RateLimiter::new(&TableConfig { slots: 64 });
        let lim = Limit::per_second(10.0, 5);
        assert_eq!(lim.burst(), 5);
        let t0 = 1_000_000;
        let allowed = (0..20)
            .filter(|_| rl.check(&"k", &lim, t0).is_allow())
            .count();
        assert_eq!(allowed, 5, "the burst, then nothing at the same instant");
        match rl.check(&"k", &lim, t0) {
            Decision::Limit { retry_after_us } => {
                assert!(retry_after_us > 0 && retry_after_us <= 100_000)
            }
            Decision::Allow => panic!("should be limited"),
        }
        // 100 ms later exactly one more event conforms.
        assert!(rl.check(&"k", &lim, t0 + 100_000).is_allow());
        assert!(!rl.check(&"k", &lim, t0 + 100_000).is_allow());
        // Another key is independent.
        assert!(rl.check(&"other", &lim, t0).is_allow());
        // Over a long idle gap the bucket refills fully (but not beyond the burst).
        let later = t0 + 60_000_000;
        let allowed = (0..20)
            .filter(|_| rl.check(&"k", &lim, later).is_allow())
            .count();
        assert_eq!(allowed, 5);
    }

    #[test]
    fn a_window_keeps_a_source_over_the_rate_limited_until_it_slows_down() {
        let rl = RateLimiter::new(&TableConfig { slots: 64 });
        let plain = Limit::per_second(10.0, 10);
        let windowed = plain.with_window(5);
        // 20 events per second for 10 seconds: plain GCRA lets 10/s through; with a window
        // the excess accumulates until nothing conforms.
        let run = |lim: &Limit, key: &str, from: u64, per_s: u64, secs: u64| {
            (0..per_s * secs)
                .filter(|i| {
                    rl.check(&key, lim, from + i * (1_000_000 / per_s))
                        .is_allow()
                })
                .count()
        };
        let t0 = 1_000_000;
        let p = run(&plain, "plain", t0, 20, 10);
        assert!((100..=111).contains(&p), "plain {p}");
        let w = run(&windowed, "win", t0, 20, 10);
        assert!(w < 30, "windowed {w}: the debt must stop it");
        // Slowing to 5 per second (half the rate) pays the 5 s of debt off in about 10 s,
        // then every request conforms: about half of 20 s worth.
        let later = t0 + 10_000_000;
        let slow = run(&windowed, "win", later, 5, 20);
        assert!((45..=60).contains(&slow), "after slowing down {slow}");
        assert_eq!(
            run(&windowed, "win", later + 20_000_000, 5, 4),
            20,
            "debt paid"
        );
    }

    #[test]
    fn gcra_sustained_rate_is_respected() {
        let rl = RateLimiter::new(&TableConfig::default());
        let lim = Limit::per_second(100.0, 1);
        // One event every millisecond for 10 seconds: about 1000 conform.
        let allowed = (0..10_000u64)
            .filter(|i| rl.check(&1u32, &lim, 5_000_000 + i * 1000).is_allow())
            .count();
        assert!((999..=1001).contains(&allowed), "allowed {allowed}");
    }

    #[test]
    fn table_is_bounded_and_counts_evictions() {
        let cfg = TableConfig { slots: 16 };
        let rl = RateLimiter::new(&cfg);
        let lim = Limit::per_second(1.0, 10);
        for k in 0..10_000u32 {
            rl.check(&k, &lim, 1_000_000);
        }
        let s = rl.stats();
        assert_eq!(s.slots, 16);
        assert_eq!(s.bytes, 16 * 8);
        assert!(s.evictions >= 10_000 - 16, "evictions {}", s.evictions);
    }

    #[test]
    fn stale_slots_are_reused_without_eviction() {
        let rl = RateLimiter::new(&TableConfig { slots: 4 });
        let lim = Limit::per_second(1000.0, 1);
        for k in 0..100u32 {
            // Each key's state lapses 1 ms later; keys arrive 10 ms apart.
            rl.check(&k, &lim, 1_000_000 + k as u64 * 10_000);
        }
        assert_eq!(rl.stats().evictions, 0);
    }

    #[test]
    fn window_counter_counts_and_resets_per_window() {
        let wc = WindowCounter::new(&TableConfig { slots: 64 });
        assert_eq!(wc.add(&"a", 1, 1000, 5_000), 1);
        assert_eq!(wc.add(&"a", 2, 1000, 5_999), 3);
        assert_eq!(wc.add(&"b", 1, 1000, 5_500), 1);
        assert_eq!(wc.add(&"a", 1, 1000, 6_000), 1, "new window");
        assert_eq!(wc.add(&"a", 100_000, 1000, 6_001), 65_535, "saturates");
    }

    #[test]
    fn a_host_source_is_an_ipv4_address_or_an_ipv6_slash_64() {
        let h = |s: &str| host_source(s.parse().unwrap()).to_string();
        assert_eq!(h("192.0.2.7"), "192.0.2.7");
        assert_eq!(h("::ffff:192.0.2.7"), "192.0.2.7");
        assert_eq!(h("2001:db8:0:1:aaaa::1"), "2001:db8:0:1::");
        assert_eq!(h("2001:db8:0:1::ffff"), "2001:db8:0:1::");
        assert_ne!(h("2001:db8:0:2::1"), h("2001:db8:0:1::1"));
        let n = |s: &str| host_net(s.parse().unwrap()).to_string();
        assert_eq!(n("::ffff:192.0.2.7"), "192.0.2.7/32");
        assert_eq!(n("2001:db8:0:1:aaaa::1"), "2001:db8:0:1::/64");
    }

    #[test]
    fn source_key_masks_prefixes() {
        let a = source_key("192.0.2.77".parse().unwrap(), 24, 56);
        let b = source_key("192.0.2.1".parse().unwrap(), 24, 56);
        let c = source_key("::ffff:192.0.2.1".parse().unwrap(), 24, 56);
        assert_eq!(a, b);
        assert_eq!(b, c);
        let d = source_key("2001:db8:0:1::1".parse().unwrap(), 24, 56);
        let e = source_key("2001:db8:0:1:ffff::".parse().unwrap(), 24, 56);
        assert_eq!(d, e);
        assert_ne!(source_key("192.0.2.1".parse().unwrap(), 32, 128), a);
        assert_eq!(a.to_net(), "192.0.2.0/24".parse::<IpNet>().unwrap());
        assert_eq!(d.to_net(), "2001:db8:0::/56".parse::<IpNet>().unwrap());
        // A NAT64 client is keyed by its IPv4 prefix inside 64:ff9b::/96, never the /64
        // that holds every translated IPv4 client.
        let n = source_key("64:ff9b::c000:24d".parse().unwrap(), 24, 64);
        assert_eq!(
            n.to_net(),
            "64:ff9b::c000:200/120".parse::<IpNet>().unwrap()
        );
        assert_eq!(
            host_net("64:ff9b::c000:24d".parse().unwrap()),
            "64:ff9b::c000:24d/128".parse::<IpNet>().unwrap()
        );
        assert_eq!(
            host_source("64:ff9b::c000:24d".parse().unwrap()),
            "64:ff9b::c000:24d".parse::<IpAddr>().unwrap()
        );
        let full = source_key("2001:db8::1".parse().unwrap(), 32, 128);
        let none = source_key("192.0.2.1".parse().unwrap(), 0, 0);
        assert_ne!(full.len, none.len);
        assert_eq!(full.to_net(), "2001:db8::1/128".parse::<IpNet>().unwrap());
    }

    #[test]
    fn estimator_over_estimates_only() {
        let e = Estimator::new(4, 1024);
        for i in 0..5000u32 {
            e.incr(&i, 1);
        }
        for _ in 0..100 {
            e.incr(&"heavy", 1);
        }
        assert!(e.get(&"heavy") >= 100);
        assert!(e.get(&"heavy") < 120);
        assert!(e.get(&7u32) >= 1);
        assert_eq!(e.bytes(), 4 * 1024 * 4);
        e.reset();
        assert_eq!(e.get(&"heavy"), 0);
    }

    #[test]
    fn concurrent_checks_never_exceed_the_burst() {
        let rl = std::sync::Arc::new(RateLimiter::new(&TableConfig::default()));
        let lim = Limit::per_second(1.0, 50);
        let handles: Vec<_> = (0..4)
            .map(|_| {
                let rl = rl.clone();
                std::thread::spawn(move || {
                    (0..1000)
                        .filter(|_| rl.check(&"shared", &lim, 10_000_000).is_allow())
                        .count()
                })
            })
            .collect();
        let total: usize = handles.into_iter().map(|h| h.join().unwrap()).sum();
        assert_eq!(total, 50);
    }
}
