//! The mirror: drains the shield block map's change feed into the kernel maps, in batches.
//!
//! Each poll of the [`Subscription`] yields either a batch of changes, coalesced per prefix
//! (last change wins) and written with one `BPF_MAP_UPDATE_BATCH` / `BPF_MAP_DELETE_BATCH` per
//! map and chunk, or a resync snapshot, after which the kernel maps hold exactly the snapshot
//! (stale entries deleted). The first drain always leaves the kernel maps equal to the block
//! map, even when pinned maps still hold entries from a previous process. Entries already
//! expired are not installed; a periodic sweep deletes kernel entries whose expiry has passed.
//! A full kernel map is counted ([`MirrorStats::full`]) and logged, never fatal.
//!
//! Suspects (entries of unproven evidence) are never written: a forged source address must
//! not become an XDP drop. An entry of scope DNS is written DNS-only: it stops UDP to the DNS
//! service addresses (the ones given with [`MirrorHandle::set_services`]) and nothing else.
//!
//! A mirror writes one writer slot ([`GuardMaps::with_slot`]). Made with [`Mirror::pinned`],
//! it follows the maps `xdp-guard` pinned: it waits for them to appear (changes meanwhile
//! are taken and dropped, and the first write after they appear is a full resync), and
//! when the pins are replaced (`xdp-guard attach` of a new layout or size) it reopens them
//! and resyncs its slot.
//!
//! The daemon that owns the rules file's `[global]` lists hands them to its mirror
//! ([`MirrorHandle::set_global_lists`]): the mirror thread keeps the `rules` slot (deny,
//! never ending) and the allow tries equal to them, written again whenever the maps are
//! (re)opened.

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use shield::block::{Change, Delivery, Scope, Subscription};
use shield::rules::GlobalLists;
use tracing::{debug, warn};

use crate::clock::{ExpiryClock, boot_ns};
use crate::guard_maps::{ApplyReport, GuardMaps, KernelBlock, coalesce};
use crate::maps::ALL_MAPS;

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
    /// How often a mirror of pinned maps checks that they exist and were not replaced.
    pub recheck_every: Duration,
}

impl Default for MirrorOptions {
    fn default() -> Self {
        Self {
            batch: true,
            max_changes: 65_536,
            sweep_every: Duration::from_secs(60),
            idle_wait: Duration::from_millis(200),
            recheck_every: Duration::from_secs(2),
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
    reopens: AtomicU64,
    never_full: AtomicU64,
    dropped_unopened: AtomicU64,
    open: AtomicBool,
    global_writes: AtomicU64,
    global_failures: AtomicU64,
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
    /// Times the pinned maps were (re)opened after being absent or replaced.
    pub reopens: u64,
    /// Never-block prefixes the never trie had no room for (another daemon's blocks of
    /// them drop in XDP).
    pub never_full: u64,
    /// Changes taken while the pinned maps were absent (written by the resync that follows).
    pub dropped_unopened: u64,
    /// The mirror holds maps to write into.
    pub open: bool,
    /// Times the `[global]` lists were written into the maps.
    pub global_writes: u64,
    /// Writes of the `[global]` lists that failed (retried).
    pub global_failures: u64,
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
            reopens: l(&self.reopens),
            never_full: l(&self.never_full),
            dropped_unopened: l(&self.dropped_unopened),
            open: self.open.load(Ordering::Relaxed),
            global_writes: l(&self.global_writes),
            global_failures: l(&self.global_failures),
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

/// Pinned maps a mirror follows: where, which slot, and the id of the maps it holds.
#[derive(Debug)]
struct Pinned {
    dir: PathBuf,
    slot: usize,
    /// The ids of the pinned maps held (every one: `xdp-guard attach` replaces only those
    /// whose size changed, the answers' alone when `answer_entries` did).
    held_id: Option<Vec<u32>>,
    last_check: Option<Instant>,
    warned: bool,
}

/// The `[global]` lists handed to a mirror, and their version; and the DNS service's
/// addresses and port (dnsd's), with theirs.
#[derive(Debug, Default)]
struct Global {
    version: AtomicU64,
    lists: Mutex<Option<GlobalLists>>,
    services_version: AtomicU64,
    services: Mutex<Option<(Vec<ipnet::IpNet>, u16, u8)>>,
    /// The proxies whose datagrams carry a PROXY v2 header (written with the services).
    proxies: Mutex<Vec<ipnet::IpNet>>,
    /// `[defence.rrl] exempt` (written with the services, into the suspects' trie).
    rrl_exempt: Mutex<Vec<ipnet::IpNet>>,
    /// The daemon's own peers, exempt from the rate limit as `[global] allow` (written with
    /// the lists, into the allow tries).
    peers: Mutex<Vec<ipnet::IpNet>>,
}

/// A suspect whose answers dnsd changes (truncates), so the answer fast path must pass its
/// queries: not one of scope `nxdomain` alone (only its NXDOMAIN answers are truncated, and
/// XDP answers names that exist: a random-subdomain flood's resolvers keep the fast path) —
/// unless tenants' rules made it one in their zones too.
fn answered_suspect(e: &shield::block::BlockEntry) -> bool {
    !e.is_proven() && (e.scope != Scope::Nxdomain || !e.tenants.is_empty())
}

/// Mirrors one block-map subscription into one writer slot of one set of kernel maps.
#[derive(Debug)]
pub struct Mirror {
    /// The `[global]` lists to keep in the maps (set through the handle).
    global: Arc<Global>,
    /// The version of them written into the current maps (0: none).
    global_applied: u64,
    /// The version of the services written into the current maps (0: none).
    services_applied: u64,
    /// The block map's never-block set written into the current maps' never trie (None:
    /// none yet), and when the map's set was last looked at.
    never_applied: Option<Arc<shield::never_block::NeverBlock>>,
    never_checked: Option<Instant>,
    maps: Option<GuardMaps>,
    /// The maps written now, for whoever reads their counters.
    current: Arc<Mutex<Option<GuardMaps>>>,
    pinned: Option<Pinned>,
    sub: Subscription,
    opts: MirrorOptions,
    stats: Arc<MirrorStats>,
    synced: bool,
    last_sweep: Instant,
}

impl Mirror {
    /// A mirror with default options into `maps` (its slot: [`GuardMaps::with_slot`]).
    /// Subscribe with `block_map.subscribe("xdp")`.
    pub fn new(maps: GuardMaps, sub: Subscription) -> Self {
        Self::with_options(maps, sub, MirrorOptions::default())
    }

    /// A mirror with the given options.
    pub fn with_options(maps: GuardMaps, sub: Subscription, opts: MirrorOptions) -> Self {
        let stats = Arc::new(MirrorStats::default());
        stats.open.store(true, Ordering::Relaxed);
        Self {
            global: Arc::default(),
            global_applied: 0,
            services_applied: 0,
            never_applied: None,
            never_checked: None,
            current: Arc::new(Mutex::new(Some(maps.clone()))),
            maps: Some(maps),
            pinned: None,
            sub,
            opts,
            stats,
            synced: false,
            last_sweep: Instant::now(),
        }
    }

    /// A mirror into slot `slot` of the maps pinned under `dir` by `xdp-guard attach`,
    /// opened now or as soon as they appear, and reopened when they are replaced.
    pub fn pinned(dir: PathBuf, slot: usize, sub: Subscription, opts: MirrorOptions) -> Self {
        let mut m = Self {
            global: Arc::default(),
            global_applied: 0,
            services_applied: 0,
            never_applied: None,
            never_checked: None,
            maps: None,
            current: Arc::new(Mutex::new(None)),
            pinned: Some(Pinned {
                dir,
                slot,
                held_id: None,
                last_check: None,
                warned: false,
            }),
            sub,
            opts,
            stats: Arc::new(MirrorStats::default()),
            synced: false,
            last_sweep: Instant::now(),
        };
        m.recheck();
        m
    }

    /// The counters (clone the `Arc` for metrics).
    pub fn stats(&self) -> &Arc<MirrorStats> {
        &self.stats
    }

    /// The maps written now (`None` while pinned maps are awaited).
    pub fn maps(&self) -> Option<&GuardMaps> {
        self.maps.as_ref()
    }

    /// For pinned maps: opens them when absent, reopens them when replaced (then the next
    /// drain resyncs this writer's slot). Returns true when the maps changed.
    pub fn recheck(&mut self) -> bool {
        let Some(p) = &mut self.pinned else {
            return false;
        };
        p.last_check = Some(Instant::now());
        let ids: Vec<Option<u32>> = ALL_MAPS
            .iter()
            .map(|name| {
                crate::sys::obj_get(&p.dir.join(name)).ok().and_then(|fd| {
                    use std::os::fd::AsFd as _;
                    crate::sys::map_id(fd.as_fd()).ok()
                })
            })
            .collect();
        // Some pinned, not all: an older layout (said by the open below), or an attach
        // replacing them right now (opened at the next check).
        let pinned_id = ids[0].map(|_| ids.iter().map(|i| i.unwrap_or(0)).collect::<Vec<u32>>());
        if pinned_id.is_some() && pinned_id == p.held_id {
            return false;
        }
        let Some(id) = pinned_id else {
            if !p.warned {
                warn!(pin = %p.dir.display(), "XDP maps not pinned (yet): waiting for xdp-guard attach");
                p.warned = true;
            }
            return false;
        };
        match GuardMaps::open_pinned(&p.dir) {
            Ok(maps) => {
                let again = p.held_id.is_some();
                tracing::info!(pin = %p.dir.display(), slot = p.slot, again, "mirroring the block map into the pinned XDP maps");
                let maps = maps.with_slot(p.slot);
                *self.current.lock().unwrap_or_else(|e| e.into_inner()) = Some(maps.clone());
                self.maps = Some(maps);
                p.held_id = Some(id);
                p.warned = false;
                self.stats.open.store(true, Ordering::Relaxed);
                self.stats.reopens.fetch_add(1, Ordering::Relaxed);
                self.sub.request_resync();
                self.synced = true;
                self.global_applied = 0;
                self.services_applied = 0;
                self.never_applied = None;
                self.never_checked = None;
                true
            }
            Err(e) => {
                if !p.warned {
                    warn!(pin = %p.dir.display(), error = %e, "pinned XDP maps cannot be used (an older layout? run xdp-guard attach)");
                    p.warned = true;
                }
                false
            }
        }
    }

    /// Applies everything pending now and returns how many changes (or snapshot entries) it
    /// took. Never blocks on the feed.
    pub fn drain(&mut self) -> usize {
        if self.maps.is_none() {
            // No maps yet: the feed is taken and dropped; opening them resyncs.
            let mut n = 0;
            while let Some(d) = self.sub.poll(self.opts.max_changes) {
                n += match d {
                    Delivery::Changes(c) => c.len(),
                    Delivery::Resync(e) => e.len(),
                };
            }
            self.synced = true;
            self.stats
                .dropped_unopened
                .fetch_add(n as u64, Ordering::Relaxed);
            return n;
        }
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
        let Some(maps) = self.maps.clone() else {
            return 0;
        };
        let clock = ExpiryClock::now();
        self.stats.deliveries.fetch_add(1, Ordering::Relaxed);
        let mut skipped = 0u64;
        let n = match d {
            Delivery::Changes(changes) => {
                let n = changes.len();
                // dnsd's suspects go to their own trie (the answer path passes them to dnsd);
                // an entry that left the suspect state (blocked, removed) leaves it too.
                let suspects: Vec<(ipnet::IpNet, Option<u64>)> = if self.writes_suspects(&maps) {
                    let exempt = self.exempt_nets();
                    changes
                        .iter()
                        .map(|c| match c {
                            Change::Upsert(e) if answered_suspect(e) => {
                                (e.net, clock.to_kernel(e.expires_ms).map_value())
                            }
                            Change::Upsert(e) => (e.net, None),
                            Change::Remove { net, .. } => (*net, None),
                        })
                        // An exempt prefix's entry is the exemption's (written apart).
                        .filter(|(net, _)| !exempt.contains(net))
                        .collect()
                } else {
                    Vec::new()
                };
                self.write_suspects(&maps, &suspects, false);
                let (ups, dels) = coalesce(changes.into_iter().map(|c| match c {
                    // A suspect (unproven evidence) is never an XDP drop.
                    Change::Upsert(e) if !e.is_proven() => (e.net, None),
                    Change::Upsert(e) => match clock.to_kernel(e.expires_ms).map_value() {
                        Some(ns) => (e.net, Some((ns, e.scope != Scope::All))),
                        None => {
                            skipped += 1;
                            (e.net, None)
                        }
                    },
                    Change::Remove { net, .. } => (net, None),
                }));
                let r = maps.apply(&ups, &dels, self.opts.batch);
                self.stats.add_report(&r);
                n
            }
            Delivery::Resync(entries) => {
                let n = entries.len();
                let desired: Vec<KernelBlock> = entries
                    .iter()
                    .filter(|e| e.is_proven())
                    .filter_map(|e| match clock.to_kernel(e.expires_ms).map_value() {
                        Some(expires_ns) => Some(KernelBlock {
                            net: e.net,
                            expires_ns,
                            dns_only: e.scope != Scope::All,
                        }),
                        None => {
                            skipped += 1;
                            None
                        }
                    })
                    .collect();
                self.stats.resyncs.fetch_add(1, Ordering::Relaxed);
                if self.writes_suspects(&maps) {
                    // The exempt prefixes first: a suspect within one is more specific.
                    let exempt = self.exempt_nets();
                    let mut suspects = Self::exempt_edits(&exempt);
                    suspects.extend(
                        entries
                            .iter()
                            .filter(|e| answered_suspect(e) && !exempt.contains(&e.net))
                            .filter_map(|e| {
                                let ns = clock.to_kernel(e.expires_ms).map_value()?;
                                Some((e.net, Some(ns)))
                            }),
                    );
                    self.write_suspects(&maps, &suspects, true);
                }
                match maps.replace_all(&desired, self.opts.batch) {
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

    /// `[defence.rrl] exempt`.
    fn exempt_nets(&self) -> Vec<ipnet::IpNet> {
        self.global
            .rrl_exempt
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// `[defence.rrl] exempt` as edits of the suspects' trie.
    fn exempt_edits(exempt: &[ipnet::IpNet]) -> Vec<(ipnet::IpNet, Option<u64>)> {
        exempt
            .iter()
            .map(|n| (*n, Some(crate::maps::RRL_EXEMPT)))
            .collect()
    }

    /// True when this mirror writes the suspects' trie: dnsd's (its suspects are the DNS
    /// ones the answer path must pass on; another daemon's unproven entries mean nothing to
    /// DNS, and a resync of theirs would wipe dnsd's).
    fn writes_suspects(&self, maps: &GuardMaps) -> bool {
        maps.slot() == crate::maps::SLOT_DNSD
    }

    /// Writes `edits` into the suspects' trie (`whole`: it holds nothing else after);
    /// counts what found no room.
    fn write_suspects(&self, maps: &GuardMaps, edits: &[(ipnet::IpNet, Option<u64>)], whole: bool) {
        if edits.is_empty() && !whole {
            return;
        }
        match maps.set_suspects(edits, whole) {
            Ok(full) => {
                self.stats.full.fetch_add(full, Ordering::Relaxed);
            }
            Err(e) => {
                warn!(error = %e, "XDP suspects not written");
                self.stats.failed.fetch_add(1, Ordering::Relaxed);
            }
        }
    }

    /// Writes the `[global]` lists when they changed or the maps did.
    pub fn apply_global(&mut self) {
        let v = self.global.version.load(Ordering::Acquire);
        if v == self.global_applied {
            return;
        }
        let Some(maps) = &self.maps else {
            return;
        };
        let lists = self
            .global
            .lists
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
            .unwrap_or_default();
        let rules = maps.clone().with_slot(crate::maps::SLOT_RULES);
        let deny: Vec<KernelBlock> = lists.deny.iter().map(|n| KernelBlock::all(*n, 0)).collect();
        let mut allow = lists.allow;
        allow.extend(
            self.global
                .peers
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .iter(),
        );
        let r = rules
            .replace_all(&deny, self.opts.batch)
            .and_then(|r| maps.set_allow(&allow).map(|a| (r, a)));
        match r {
            Ok((r, (written, deleted))) => {
                debug!(
                    deny = deny.len(),
                    allow = allow.len(),
                    ?r,
                    written,
                    deleted,
                    "[global] lists written into the XDP maps"
                );
                self.stats.global_writes.fetch_add(1, Ordering::Relaxed);
                self.global_applied = v;
            }
            Err(e) => {
                warn!(error = %e, "writing the [global] lists into the XDP maps failed; retrying");
                self.stats.global_failures.fetch_add(1, Ordering::Relaxed);
            }
        }
    }

    /// Writes the DNS service's addresses when they changed or the maps did.
    pub fn apply_services(&mut self) {
        let v = self.global.services_version.load(Ordering::Acquire);
        if v == self.services_applied {
            return;
        }
        let Some(maps) = &self.maps else {
            return;
        };
        let Some((nets, port, slip)) = self
            .global
            .services
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
        else {
            return;
        };
        let proxies = self
            .global
            .proxies
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone();
        let exempt = Self::exempt_edits(&self.exempt_nets());
        match maps
            .set_services(&nets, port, slip)
            .and_then(|n| maps.set_proxies(&proxies).map(|_| n))
            .and_then(|n| maps.set_suspects(&exempt, false).map(|_| n))
        {
            Ok(n) => {
                debug!(
                    services = n,
                    port, "DNS service addresses written into the XDP maps"
                );
                self.services_applied = v;
            }
            Err(e) => {
                warn!(error = %e, "writing the DNS service addresses into the XDP maps failed; retrying");
                self.stats.global_failures.fetch_add(1, Ordering::Relaxed);
            }
        }
    }

    /// Writes the block map's never-block set into the never trie under this writer's bit
    /// (looked at once a second; written when it changed, and into maps reopened): the XDP
    /// block entries are the node's, and another daemon's block of an address this one never
    /// blocks — its transfer primary, its origin, its Redis — would cut it off.
    pub fn apply_never(&mut self) {
        if self
            .never_checked
            .is_some_and(|t| t.elapsed() < Duration::from_secs(1))
        {
            return;
        }
        self.never_checked = Some(Instant::now());
        let Some(maps) = &self.maps else {
            return;
        };
        let nb = self.sub.never_block();
        if self
            .never_applied
            .as_ref()
            .is_some_and(|a| Arc::ptr_eq(a, &nb))
        {
            return;
        }
        let nets: Vec<ipnet::IpNet> = nb.entries().iter().map(|p| p.net).collect();
        match maps.set_never(&nets) {
            Ok(full) => {
                if full > 0 {
                    self.stats.never_full.fetch_add(full, Ordering::Relaxed);
                    warn!(
                        full,
                        "the XDP never-block trie is full: those prefixes may be dropped by another daemon's blocks"
                    );
                }
                debug!(
                    entries = nets.len(),
                    "never-block prefixes written into the XDP maps"
                );
                self.never_applied = Some(nb);
            }
            Err(e) => {
                warn!(error = %e, "writing the never-block prefixes into the XDP maps failed; retrying");
                self.stats.global_failures.fetch_add(1, Ordering::Relaxed);
            }
        }
    }

    /// Takes this writer's bit off every never-block entry (its daemon stops: what it never
    /// blocked is no longer its to protect).
    pub fn withdraw_never(&mut self) {
        if self.never_applied.take().is_none() {
            return;
        }
        if let Some(maps) = &self.maps
            && let Err(e) = maps.set_never(&[])
        {
            warn!(error = %e, "withdrawing the never-block prefixes from the XDP maps failed");
        }
    }

    /// Deletes kernel entries whose expiry has passed; returns how many.
    pub fn sweep(&mut self) -> u64 {
        self.last_sweep = Instant::now();
        let Some(maps) = &self.maps else {
            return 0;
        };
        match maps.sweep_expired(boot_ns(), self.opts.batch) {
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
        if self.pinned.as_ref().is_some_and(|p| {
            p.last_check
                .is_none_or(|t| t.elapsed() >= self.opts.recheck_every)
        }) {
            self.recheck();
        }
        self.drain();
        self.apply_global();
        self.apply_services();
        self.apply_never();
        if self.last_sweep.elapsed() >= self.opts.sweep_every {
            self.sweep();
        }
    }

    /// Runs the mirror on its own thread until the handle is stopped or dropped.
    pub fn spawn(self) -> std::io::Result<MirrorHandle> {
        let stop = Arc::new(AtomicBool::new(false));
        let stats = Arc::clone(&self.stats);
        let current = Arc::clone(&self.current);
        let global = Arc::clone(&self.global);
        let flag = Arc::clone(&stop);
        let thread = std::thread::Builder::new()
            .name("xdp-mirror".into())
            .spawn(move || {
                let mut m = self;
                while !flag.load(Ordering::Acquire) {
                    m.step();
                }
                m.drain();
                m.withdraw_never();
                m
            })?;
        Ok(MirrorHandle {
            stop,
            stats,
            current,
            global,
            thread: Some(thread),
        })
    }
}

/// A mirror running on its own thread; dropping the handle stops it.
#[derive(Debug)]
pub struct MirrorHandle {
    stop: Arc<AtomicBool>,
    stats: Arc<MirrorStats>,
    current: Arc<Mutex<Option<GuardMaps>>>,
    global: Arc<Global>,
    thread: Option<JoinHandle<Mirror>>,
}

impl MirrorHandle {
    /// The mirror's counters.
    pub fn stats(&self) -> &Arc<MirrorStats> {
        &self.stats
    }

    /// Hands the rules file's `[global]` lists to the mirror: its thread keeps the `rules`
    /// slot and the allow tries equal to them (and writes them again into maps it reopens).
    pub fn set_global_lists(&self, lists: GlobalLists) {
        *self.global.lists.lock().unwrap_or_else(|e| e.into_inner()) = Some(lists);
        self.global.version.fetch_add(1, Ordering::Release);
    }

    /// Hands the daemon's own peers (dnsd's transfer peers) to the mirror: exempt from the
    /// XDP rate limit as `[global] allow` is (a flood forged in a secondary's name took its
    /// SOA checks and queries with it, the rate being per source whatever the name). For the
    /// daemon that writes the `[global]` lists.
    pub fn set_rate_exempt_peers(&self, nets: Vec<ipnet::IpNet>) {
        *self.global.peers.lock().unwrap_or_else(|e| e.into_inner()) = nets;
        self.global.version.fetch_add(1, Ordering::Release);
    }

    /// Hands the DNS service's addresses (prefixes), UDP port and RRL slip to the mirror
    /// (dnsd's): DNS-only blocks drop UDP to these and nothing else, and a query to them over
    /// its source's XDP rate is slipped TC=1 one time in `slip` (0: never). Written again into
    /// maps it reopens.
    pub fn set_services(&self, nets: Vec<ipnet::IpNet>, port: u16, slip: u8) {
        *self
            .global
            .services
            .lock()
            .unwrap_or_else(|e| e.into_inner()) = Some((nets, port, slip));
        self.global.services_version.fetch_add(1, Ordering::Release);
    }

    /// Hands `[defence.rrl] exempt` to the mirror (dnsd's): no RRL in XDP for those sources,
    /// as in dnsd. Written with the services (set those too).
    pub fn set_rrl_exempt(&self, nets: Vec<ipnet::IpNet>) {
        *self
            .global
            .rrl_exempt
            .lock()
            .unwrap_or_else(|e| e.into_inner()) = nets;
        self.global.services_version.fetch_add(1, Ordering::Release);
    }

    /// Hands the proxies of `[server] proxy_allow` to the mirror (dnsd's): XDP takes the
    /// client of their datagrams' PROXY v2 headers for blocks and the rate limit. Written with
    /// the services (set those too) and again into maps it reopens.
    pub fn set_proxies(&self, nets: Vec<ipnet::IpNet>) {
        *self
            .global
            .proxies
            .lock()
            .unwrap_or_else(|e| e.into_inner()) = nets;
        self.global.services_version.fetch_add(1, Ordering::Release);
    }

    /// The maps the mirror writes now (`None` while pinned maps are awaited).
    pub fn maps(&self) -> Option<GuardMaps> {
        self.current
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
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

#[cfg(test)]
mod tests {
    use super::answered_suspect;
    use shield::block::{BlockEntry, Evidence, Origin, Scope};

    #[test]
    fn which_suspects_the_answer_fast_path_passes_to_dnsd() {
        let net = "192.0.2.0/24".parse().unwrap();
        let udp = BlockEntry::new(net, 1000, "r", Origin::Local, Evidence::Udp);
        assert!(answered_suspect(&udp), "a suspect of every zone");
        let mut nx = udp.clone();
        nx.scope = Scope::Nxdomain;
        assert!(
            !answered_suspect(&nx),
            "of NXDOMAIN answers alone: XDP answers it"
        );
        // A tenant's rules made it one in their zones too: dnsd answers it.
        let mut both = udp.clone().for_tenant(7);
        both.scope = Scope::Nxdomain;
        assert!(answered_suspect(&both));
        let tcp = BlockEntry::new(net, 1000, "r", Origin::Local, Evidence::Tcp);
        assert!(!answered_suspect(&tcp), "a block: dropped, never answered");
    }
}
