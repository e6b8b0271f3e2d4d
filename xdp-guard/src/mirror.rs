//! The mirror: drains the shield block map's change feed into the kernel maps, in batches.
//!
//! Each poll of the [`Subscription`] yields either a batch of changes, coalesced per prefix
//! (last change wins) and written with one `BPF_MAP_UPDATE_BATCH` / `BPF_MAP_DELETE_BATCH` per
//! map and chunk, or a resync snapshot, after which the kernel maps hold exactly the snapshot
//! (stale entries deleted). The first drain always leaves the kernel maps equal to the block
//! map, even when pinned maps still hold entries from a previous process. Entries already
//! expired are not installed; a periodic sweep deletes kernel entries whose expiry has passed.
//! A full kernel map is counted ([`MirrorStats::full`]) and logged, never fatal.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use shield::block::{Change, Delivery, Subscription};
use tracing::{debug, warn};

use crate::clock::{ExpiryClock, boot_ns};
use crate::guard_maps::{ApplyReport, GuardMaps, KernelBlock, coalesce};

/// How the mirror writes and how often it sweeps.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MirrorOptions {
    /// Batch syscalls (true) or one syscall per element (for comparison).
    pub batch: bool,
    /// Most changes taken per poll.
    pub max_changes: usize,
    /// Interval between sweeps of expired kernel entries.
    pub sweep_every: Duration,
    /// Longest the background thread sleeps between checks for work or shutdown.
    pub idle_wait: Duration,
}

impl Default for MirrorOptions {
    fn default() -> Self {
        Self {
            batch: true,
            max_changes: 65_536,
            sweep_every: Duration::from_secs(60),
            idle_wait: Duration::from_millis(200),
        }
    }
}

/// Counters of a mirror, shared with whoever reports them.
#[derive(Debug, Default)]
pub struct MirrorStats {
    deliveries: AtomicU64,
    changes: AtomicU64,
    resyncs: AtomicU64,
    upserted: AtomicU64,
    deleted: AtomicU64,
    absent: AtomicU64,
    full: AtomicU64,
    failed: AtomicU64,
    expired_skipped: AtomicU64,
    swept: AtomicU64,
    syscalls: AtomicU64,
}

/// A copy of [`MirrorStats`] at one instant.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct MirrorSnapshot {
    /// Polls that returned something.
    pub deliveries: u64,
    /// Changes received.
    pub changes: u64,
    /// Resyncs applied.
    pub resyncs: u64,
    /// Kernel entries written.
    pub upserted: u64,
    /// Kernel entries deleted.
    pub deleted: u64,
    /// Deletes of entries that were not in the kernel.
    pub absent: u64,
    /// Inserts refused because a kernel map was full (E2BIG / ENOSPC).
    pub full: u64,
    /// Other failed writes.
    pub failed: u64,
    /// Upserts not installed because they had already expired.
    pub expired_skipped: u64,
    /// Expired kernel entries deleted by sweeps.
    pub swept: u64,
    /// bpf(2) calls made.
    pub syscalls: u64,
}

impl MirrorStats {
    /// The counters now.
    pub fn snapshot(&self) -> MirrorSnapshot {
        let l = |a: &AtomicU64| a.load(Ordering::Relaxed);
        MirrorSnapshot {
            deliveries: l(&self.deliveries),
            changes: l(&self.changes),
            resyncs: l(&self.resyncs),
            upserted: l(&self.upserted),
            deleted: l(&self.deleted),
            absent: l(&self.absent),
            full: l(&self.full),
            failed: l(&self.failed),
            expired_skipped: l(&self.expired_skipped),
            swept: l(&self.swept),
            syscalls: l(&self.syscalls),
        }
    }

    fn add_report(&self, r: &ApplyReport) {
        let a = |c: &AtomicU64, v: u64| c.fetch_add(v, Ordering::Relaxed);
        a(&self.upserted, r.upserted);
        a(&self.deleted, r.deleted);
        a(&self.absent, r.absent);
        a(&self.full, r.full);
        a(&self.failed, r.failed);
        a(&self.syscalls, r.syscalls);
    }
}

/// Mirrors one block-map subscription into one set of kernel maps.
#[derive(Debug)]
pub struct Mirror {
    maps: GuardMaps,
    sub: Subscription,
    opts: MirrorOptions,
    stats: Arc<MirrorStats>,
    synced: bool,
    last_sweep: Instant,
}

impl Mirror {
    /// A mirror with default options. Subscribe with `block_map.subscribe("xdp")`.
    pub fn new(maps: GuardMaps, sub: Subscription) -> Self {
        Self::with_options(maps, sub, MirrorOptions::default())
    }

    /// A mirror with the given options.
    pub fn with_options(maps: GuardMaps, sub: Subscription, opts: MirrorOptions) -> Self {
        Self {
            maps,
            sub,
            opts,
            stats: Arc::new(MirrorStats::default()),
            synced: false,
            last_sweep: Instant::now(),
        }
    }

    /// The counters (clone the `Arc` for metrics).
    pub fn stats(&self) -> &Arc<MirrorStats> {
        &self.stats
    }

    /// Applies everything pending now and returns how many changes (or snapshot entries) it
    /// took. Never blocks on the feed.
    pub fn drain(&mut self) -> usize {
        let mut n = 0;
        if !self.synced {
            // The first poll of a non-empty block map is a resync; of an empty one, nothing:
            // then the kernel must start empty too (pinned maps may hold an old run's blocks).
            match self.sub.poll(self.opts.max_changes) {
                Some(d) => n += self.apply(d),
                None => n += self.apply(Delivery::Resync(Vec::new())),
            }
            self.synced = true;
        }
        while let Some(d) = self.sub.poll(self.opts.max_changes) {
            n += self.apply(d);
        }
        n
    }

    /// Applies one delivery; returns how many changes or entries it held.
    pub fn apply(&mut self, d: Delivery) -> usize {
        let clock = ExpiryClock::now();
        self.stats.deliveries.fetch_add(1, Ordering::Relaxed);
        let mut skipped = 0u64;
        let n = match d {
            Delivery::Changes(changes) => {
                let n = changes.len();
                let (ups, dels) = coalesce(changes.into_iter().map(|c| match c {
                    Change::Upsert(e) => match clock.to_kernel(e.expires_ms).map_value() {
                        Some(ns) => (e.net, Some(ns)),
                        None => {
                            skipped += 1;
                            (e.net, None)
                        }
                    },
                    Change::Remove { net, .. } => (net, None),
                }));
                let r = self.maps.apply(&ups, &dels, self.opts.batch);
                self.stats.add_report(&r);
                n
            }
            Delivery::Resync(entries) => {
                let n = entries.len();
                let desired: Vec<KernelBlock> = entries
                    .iter()
                    .filter_map(|e| match clock.to_kernel(e.expires_ms).map_value() {
                        Some(expires_ns) => Some(KernelBlock {
                            net: e.net,
                            expires_ns,
                        }),
                        None => {
                            skipped += 1;
                            None
                        }
                    })
                    .collect();
                self.stats.resyncs.fetch_add(1, Ordering::Relaxed);
                match self.maps.replace_all(&desired, self.opts.batch) {
                    Ok(r) => {
                        debug!(entries = n, ?r, "XDP maps resynced");
                        self.stats.add_report(&r);
                    }
                    Err(e) => {
                        warn!(error = %e, "XDP map resync failed");
                        self.stats.failed.fetch_add(1, Ordering::Relaxed);
                        self.synced = false;
                    }
                }
                n
            }
        };
        self.stats.changes.fetch_add(n as u64, Ordering::Relaxed);
        self.stats
            .expired_skipped
            .fetch_add(skipped, Ordering::Relaxed);
        n
    }

    /// Deletes kernel entries whose expiry has passed; returns how many.
    pub fn sweep(&mut self) -> u64 {
        self.last_sweep = Instant::now();
        match self.maps.sweep_expired(boot_ns(), self.opts.batch) {
            Ok(r) => {
                self.stats.add_report(&ApplyReport { deleted: 0, ..r });
                self.stats.swept.fetch_add(r.deleted, Ordering::Relaxed);
                r.deleted
            }
            Err(e) => {
                warn!(error = %e, "XDP map sweep failed");
                self.stats.failed.fetch_add(1, Ordering::Relaxed);
                0
            }
        }
    }

    /// One round of the background loop: wait up to `idle_wait` for changes, drain them, sweep
    /// when due.
    pub fn step(&mut self) {
        if self.synced {
            self.sub.wait_timeout(self.opts.idle_wait);
        }
        self.drain();
        if self.last_sweep.elapsed() >= self.opts.sweep_every {
            self.sweep();
        }
    }

    /// Runs the mirror on its own thread until the handle is stopped or dropped.
    pub fn spawn(self) -> std::io::Result<MirrorHandle> {
        let stop = Arc::new(AtomicBool::new(false));
        let stats = Arc::clone(&self.stats);
        let flag = Arc::clone(&stop);
        let thread = std::thread::Builder::new()
            .name("xdp-mirror".into())
            .spawn(move || {
                let mut m = self;
                while !flag.load(Ordering::Acquire) {
                    m.step();
                }
                m.drain();
                m
            })?;
        Ok(MirrorHandle {
            stop,
            stats,
            thread: Some(thread),
        })
    }
}

/// A mirror running on its own thread; dropping the handle stops it.
#[derive(Debug)]
pub struct MirrorHandle {
    stop: Arc<AtomicBool>,
    stats: Arc<MirrorStats>,
    thread: Option<JoinHandle<Mirror>>,
}

impl MirrorHandle {
    /// The mirror's counters.
    pub fn stats(&self) -> &Arc<MirrorStats> {
        &self.stats
    }

    /// Stops the thread after a last drain and returns the mirror (`None` if it panicked).
    pub fn stop(mut self) -> Option<Mirror> {
        self.stop_inner()
    }

    fn stop_inner(&mut self) -> Option<Mirror> {
        self.stop.store(true, Ordering::Release);
        self.thread.take().and_then(|t| t.join().ok())
    }
}

impl Drop for MirrorHandle {
    fn drop(&mut self) {
        self.stop_inner();
    }
}
