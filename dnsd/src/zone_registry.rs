//! The zones configured and their load state; reload publishes a new [`ZoneSet`].
//!
//! A zone that fails to load keeps serving its last good version; the error is kept for
//! `ctl zones` and returned to whoever asked for the reload.

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, SystemTime};

use arc_swap::ArcSwap;
use zones::{Name, ReadOptions, Zone};

use crate::served_zones::{ServeOptions, ZoneSet};

/// One configured zone and what happened to it.
pub struct ZoneEntry {
    /// Apex.
    pub origin: Name,
    /// Master file.
    pub file: PathBuf,
    /// What the query path reads of its settings (cookie policy, tenant).
    pub serve: ServeOptions,
    /// Unique for the process's life: names the zone's state beside the zone set.
    pub id: u32,
    /// The version being served.
    pub current: Option<Arc<Zone>>,
    /// When the served version was loaded (wall clock).
    pub loaded_at: Option<SystemTime>,
    /// How long the last successful load took.
    pub load_time: Duration,
    /// The file's modification time at the last successful load.
    pub mtime: Option<SystemTime>,
    /// The last load error (cleared by a successful load).
    pub last_error: Option<String>,
    /// A secondary zone whose primaries stopped answering: served as SERVFAIL.
    pub expired: bool,
}

/// Called when a zone's served version changes (reload or transfer): origin, old, new.
pub type OnChange = Arc<dyn Fn(&Name, Option<Arc<Zone>>, Arc<Zone>) + Send + Sync>;

/// Reload counters.
#[derive(Debug, Default)]
pub struct ReloadStats {
    /// Successful zone loads.
    pub ok: AtomicU64,
    /// Failed zone loads.
    pub failed: AtomicU64,
}

/// All configured zones, each in a slot it keeps while configured; owns the published set.
pub struct Registry {
    /// Each configured origin's slot (found in O(1), not by a walk).
    index: std::collections::HashMap<Name, usize, foldhash::fast::RandomState>,
    slots: Vec<Option<ZoneEntry>>,
    /// Slots freed by removed zones, reused by the next zones added.
    free: Vec<usize>,
    next_id: u32,
    /// Slots changed since the last publish.
    dirty: Vec<usize>,
    published: Arc<ArcSwap<ZoneSet>>,
    generation: u64,
    /// Reload counters.
    pub stats: Arc<ReloadStats>,
    on_change: Option<OnChange>,
    before_publish: Option<Arc<dyn Fn(u64) + Send + Sync>>,
}

/// The result of loading one zone.
#[derive(Debug, Clone)]
pub struct LoadReport {
    /// Zone apex.
    pub origin: String,
    /// Ok with (serial, records), or the error text.
    pub result: Result<(u32, usize), String>,
}

/// What [`Registry::sync`] changed.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct SyncReport {
    /// Zones added.
    pub added: usize,
    /// Zones removed.
    pub removed: usize,
    /// Zones whose file or settings changed.
    pub changed: usize,
}

impl Registry {
    /// A registry for `zones` (origin, file, settings); nothing is loaded yet.
    pub fn new(zones: Vec<(Name, PathBuf, ServeOptions)>) -> Registry {
        let mut r = Registry {
            index: Default::default(),
            slots: Vec::with_capacity(zones.len()),
            free: Vec::new(),
            next_id: 0,
            dirty: Vec::new(),
            published: Arc::new(ArcSwap::from_pointee(ZoneSet::empty(0))),
            generation: 0,
            stats: Arc::new(ReloadStats::default()),
            on_change: None,
            before_publish: None,
        };
        for (origin, file, serve) in zones {
            r.add(origin, file, serve);
        }
        r
    }

    /// The published zone set, for the query path.
    pub fn published(&self) -> Arc<ArcSwap<ZoneSet>> {
        self.published.clone()
    }

    /// The configured zones, in slot order.
    pub fn entries(&self) -> impl Iterator<Item = &ZoneEntry> + '_ {
        self.slots.iter().flatten()
    }

    /// The zone in slot `i`.
    pub fn entry(&self, i: usize) -> Option<&ZoneEntry> {
        self.slots.get(i).and_then(|e| e.as_ref())
    }

    fn entry_mut(&mut self, i: usize) -> &mut ZoneEntry {
        self.slots[i].as_mut().expect("a configured slot")
    }

    /// How many zones are configured.
    pub fn len(&self) -> usize {
        self.index.len()
    }

    /// True when no zone is configured.
    pub fn is_empty(&self) -> bool {
        self.index.is_empty()
    }

    /// Slot of the zone named `origin`, if configured.
    pub fn find(&self, origin: &Name) -> Option<usize> {
        self.index.get(origin).copied()
    }

    /// Configures a zone (not loaded yet) in a free slot; no other zone's slot changes. An
    /// origin already configured keeps its slot and takes the new file and settings.
    pub fn add(&mut self, origin: Name, file: PathBuf, serve: ServeOptions) -> usize {
        if let Some(i) = self.find(&origin) {
            self.change(i, file, serve);
            return i;
        }
        let id = self.next_id;
        self.next_id = self.next_id.wrapping_add(1);
        let e = ZoneEntry {
            origin: origin.clone(),
            file,
            serve,
            id,
            current: None,
            loaded_at: None,
            load_time: Duration::ZERO,
            mtime: None,
            last_error: None,
            expired: false,
        };
        let i = match self.free.pop() {
            Some(i) => {
                self.slots[i] = Some(e);
                i
            }
            None => {
                self.slots.push(Some(e));
                self.slots.len() - 1
            }
        };
        self.index.insert(origin, i);
        self.dirty.push(i);
        i
    }

    /// Stops serving the zone named `origin` (at the next publish); false if not configured.
    pub fn remove(&mut self, origin: &Name) -> bool {
        let Some(i) = self.index.remove(origin) else {
            return false;
        };
        self.slots[i] = None;
        self.free.push(i);
        self.dirty.push(i);
        true
    }

    /// A new file or settings for the zone in slot `i`: a new file is loaded by the next
    /// reload (the served version stays until then).
    fn change(&mut self, i: usize, file: PathBuf, serve: ServeOptions) -> bool {
        let e = self.entry_mut(i);
        let mut changed = false;
        if e.file != file {
            e.file = file;
            e.mtime = None;
            changed = true;
        }
        if e.serve != serve {
            e.serve = serve;
            self.dirty.push(i);
            changed = true;
        }
        changed
    }

    /// Makes the configured zones `want`: adds the new ones, removes those gone, updates
    /// files and settings; zones that stay keep their slot and loaded version.
    pub fn sync(&mut self, want: Vec<(Name, PathBuf, ServeOptions)>) -> SyncReport {
        let mut r = SyncReport::default();
        let mut keep = std::collections::HashSet::with_capacity(want.len());
        for (origin, file, serve) in want {
            match self.find(&origin) {
                Some(i) => {
                    if self.change(i, file, serve) {
                        r.changed += 1;
                    }
                }
                None => {
                    self.add(origin.clone(), file, serve);
                    r.added += 1;
                }
            }
            keep.insert(origin);
        }
        let gone: Vec<Name> = self
            .index
            .keys()
            .filter(|o| !keep.contains(*o))
            .cloned()
            .collect();
        for o in gone {
            self.remove(&o);
            r.removed += 1;
        }
        r
    }

    /// Which zones a reload would touch: `only` names one; otherwise those whose file
    /// changed (all when `force`).
    pub fn plan(&self, only: Option<usize>, force: bool) -> Vec<(usize, Name, PathBuf)> {
        if let Some(i) = only {
            return self
                .entry(i)
                .map(|e| vec![(i, e.origin.clone(), e.file.clone())])
                .unwrap_or_default();
        }
        self.slots
            .iter()
            .enumerate()
            .filter_map(|(i, e)| e.as_ref().map(|e| (i, e)))
            .filter(|(_, e)| force || e.current.is_none() || file_mtime(&e.file) != e.mtime)
            .map(|(i, e)| (i, e.origin.clone(), e.file.clone()))
            .collect()
    }

    /// Records load results, then publishes a new zone set if anything changed. A result
    /// for a zone removed meanwhile is dropped.
    pub fn apply(
        &mut self,
        results: Vec<(usize, Result<zones::Loaded, String>, Option<SystemTime>)>,
    ) -> Vec<LoadReport> {
        let mut reports = Vec::new();
        // Thousands of zones: one summary line, each zone at debug level (failures always).
        let many = results.len() > 100;
        let total = results.len();
        for (i, r, mtime) in results {
            let Some(e) = self.slots.get_mut(i).and_then(|e| e.as_mut()) else {
                continue;
            };
            match r {
                Ok(l) => {
                    for w in l.warnings.iter().take(20) {
                        tracing::warn!(zone = %e.origin, "{w}");
                    }
                    reports.push(LoadReport {
                        origin: e.origin.to_string(),
                        result: Ok((l.zone.serial(), l.zone.record_count())),
                    });
                    if many {
                        tracing::debug!(
                            zone = %e.origin,
                            serial = l.zone.serial(),
                            records = l.zone.record_count(),
                            "zone loaded"
                        );
                    } else {
                        tracing::info!(
                            zone = %e.origin,
                            serial = l.zone.serial(),
                            records = l.zone.record_count(),
                            ms = l.elapsed.as_millis() as u64,
                            "zone loaded"
                        );
                    }
                    e.load_time = l.elapsed;
                    let new = Arc::new(l.zone);
                    if let Some(f) = &self.on_change {
                        f(&e.origin, e.current.clone(), new.clone());
                    }
                    e.current = Some(new);
                    e.loaded_at = Some(SystemTime::now());
                    e.mtime = mtime;
                    e.last_error = None;
                    self.stats.ok.fetch_add(1, Ordering::Relaxed);
                    self.dirty.push(i);
                }
                Err(msg) => {
                    tracing::error!(
                        zone = %e.origin,
                        serving = e.current.as_ref().map(|z| z.serial()),
                        "zone not loaded, keeping the last good version: {msg}"
                    );
                    reports.push(LoadReport {
                        origin: e.origin.to_string(),
                        result: Err(msg.clone()),
                    });
                    e.last_error = Some(msg);
                    self.stats.failed.fetch_add(1, Ordering::Relaxed);
                }
            }
        }
        if many {
            let failed = reports.iter().filter(|r| r.result.is_err()).count();
            tracing::info!(zones = total - failed, failed, "zones loaded");
        }
        self.publish();
        reports
    }

    /// Publishes the zones changed since the last publish (nothing when none did): the new
    /// set shares every untouched chunk with the one it replaces.
    pub fn publish(&mut self) {
        if self.dirty.is_empty() {
            return;
        }
        self.generation += 1;
        let mut set = self.published.load().next(self.generation);
        self.dirty.sort_unstable();
        self.dirty.dedup();
        for &i in &self.dirty {
            match &self.slots[i] {
                Some(e) => set.put(i as u32, e.current.clone(), e.serve, e.expired, e.id),
                None => set.put(i as u32, None, ServeOptions::default(), false, u32::MAX),
            }
        }
        self.dirty.clear();
        if let Some(f) = &self.before_publish {
            f(self.generation);
        }
        self.published.store(Arc::new(set));
    }

    /// Sets the hook called just before a new zone set (of the generation given) is published.
    pub fn set_before_publish(&mut self, f: Arc<dyn Fn(u64) + Send + Sync>) {
        self.before_publish = Some(f);
    }

    /// Sets the hook told of every change of a zone's served version.
    pub fn set_on_change(&mut self, f: OnChange) {
        self.on_change = Some(f);
    }

    /// Serves `zone` (received by transfer, already validated) for zone `i`, written to its
    /// file: swaps it in and publishes.
    pub fn install(&mut self, i: usize, zone: Arc<Zone>, took: Duration) {
        let on_change = self.on_change.clone();
        let e = self.entry_mut(i);
        if let Some(f) = &on_change {
            f(&e.origin, e.current.clone(), zone.clone());
        }
        e.current = Some(zone);
        e.loaded_at = Some(SystemTime::now());
        e.load_time = took;
        e.mtime = file_mtime(&e.file);
        e.last_error = None;
        e.expired = false;
        self.stats.ok.fetch_add(1, Ordering::Relaxed);
        self.dirty.push(i);
        self.publish();
    }

    /// Marks zone `i` expired (SERVFAIL) or not, and publishes.
    pub fn set_expired(&mut self, i: usize, expired: bool) {
        let e = self.entry_mut(i);
        if e.expired != expired {
            e.expired = expired;
            self.dirty.push(i);
            self.publish();
        }
    }
}

/// A file's modification time, if it can be read.
pub fn file_mtime(p: &std::path::Path) -> Option<SystemTime> {
    std::fs::metadata(p).and_then(|m| m.modified()).ok()
}

/// Loads the zones of `plan` on all cores (blocking: call from a blocking thread); the results
/// in plan order.
pub fn load_all(
    plan: Vec<(usize, Name, PathBuf)>,
) -> Vec<(usize, Result<zones::Loaded, String>, Option<SystemTime>)> {
    use std::sync::atomic::{AtomicUsize, Ordering};
    let threads = std::thread::available_parallelism()
        .map_or(1, |n| n.get())
        .min(plan.len());
    if threads <= 1 {
        return plan
            .into_iter()
            .map(|(i, origin, file)| {
                let (r, m) = load_one(&origin, &file);
                (i, r, m)
            })
            .collect();
    }
    // Each thread takes the next zone in turn: a big zone does not hold up the small ones.
    let next = AtomicUsize::new(0);
    let mut out: Vec<_> = std::thread::scope(|s| {
        let workers: Vec<_> = (0..threads)
            .map(|_| {
                s.spawn(|| {
                    let mut done = Vec::new();
                    loop {
                        let k = next.fetch_add(1, Ordering::Relaxed);
                        let Some((i, origin, file)) = plan.get(k) else {
                            break;
                        };
                        let (r, m) = load_one(origin, file);
                        done.push((k, *i, r, m));
                    }
                    done
                })
            })
            .collect();
        workers
            .into_iter()
            .flat_map(|w| w.join().expect("a zone loader panicked"))
            .collect()
    });
    out.sort_unstable_by_key(|(k, ..)| *k);
    out.into_iter().map(|(_, i, r, m)| (i, r, m)).collect()
}

/// Loads one zone (blocking: call from a blocking thread).
pub fn load_one(
    origin: &Name,
    file: &std::path::Path,
) -> (Result<zones::Loaded, String>, Option<SystemTime>) {
    let opts = ReadOptions::new(origin);
    let r = zones::load_file(file, origin, &opts).map_err(|e| e.to_string());
    // The time of the file as it was opened (one fstat, no second path lookup).
    let mtime = r.as_ref().ok().and_then(|l| l.mtime);
    (r, mtime)
}
