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

/// What the registry keeps of a zone's configuration.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ZoneDef {
    /// Apex.
    pub origin: Name,
    /// Master file (empty for a catalog dnsd produces).
    pub file: PathBuf,
    /// What the query path reads of its settings (cookie policy, tenant).
    pub serve: ServeOptions,
    /// A catalog dnsd produces: made, not loaded.
    pub produced: bool,
    /// Listed in this catalog dnsd produces, with this group.
    pub listed_in: Option<(Name, Option<String>)>,
    /// Added by this consumed catalog.
    pub from_catalog: Option<Name>,
}

/// One configured zone and what happened to it.
pub struct ZoneEntry {
    /// What is configured.
    pub def: ZoneDef,
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
    /// Slots of the catalogs dnsd produces (found without a walk over every zone).
    producers: std::collections::BTreeSet<usize>,
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
    /// A registry for `zones`; nothing is loaded yet.
    pub fn new(zones: Vec<ZoneDef>) -> Registry {
        let mut r = Registry {
            index: Default::default(),
            slots: Vec::with_capacity(zones.len()),
            free: Vec::new(),
            next_id: 0,
            dirty: Vec::new(),
            producers: Default::default(),
            published: Arc::new(ArcSwap::from_pointee(ZoneSet::empty(0))),
            generation: 0,
            stats: Arc::new(ReloadStats::default()),
            on_change: None,
            before_publish: None,
        };
        for d in zones {
            r.add(d);
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
    pub fn add(&mut self, d: ZoneDef) -> usize {
        if let Some(i) = self.find(&d.origin) {
            self.change(i, d);
            return i;
        }
        let id = self.next_id;
        self.next_id = self.next_id.wrapping_add(1);
        let origin = d.origin.clone();
        let produced = d.produced;
        let e = ZoneEntry {
            def: d,
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
        if produced {
            self.producers.insert(i);
        }
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
        self.producers.remove(&i);
        true
    }

    /// A new file or settings for the zone in slot `i`: a new file is loaded by the next
    /// reload (the served version stays until then).
    fn change(&mut self, i: usize, d: ZoneDef) -> bool {
        let e = self.entry_mut(i);
        if e.def == d {
            return false;
        }
        if e.def.file != d.file {
            e.mtime = None;
        }
        let serve_changed = e.def.serve != d.serve;
        if d.produced {
            self.producers.insert(i);
        } else {
            self.producers.remove(&i);
        }
        let e = self.entry_mut(i);
        e.def = d;
        if serve_changed {
            self.dirty.push(i);
        }
        true
    }

    /// Makes the configured zones `want`: adds the new ones, removes those gone, updates
    /// files and settings; zones that stay keep their slot and loaded version. Members of a
    /// consumed catalog stay while their catalog does.
    pub fn sync(&mut self, want: Vec<ZoneDef>) -> SyncReport {
        let mut r = SyncReport::default();
        let mut keep = std::collections::HashSet::with_capacity(want.len());
        for d in want {
            let origin = d.origin.clone();
            match self.find(&origin) {
                Some(i) => {
                    if self.change(i, d) {
                        r.changed += 1;
                    }
                }
                None => {
                    self.add(d);
                    r.added += 1;
                }
            }
            keep.insert(origin);
        }
        let gone: Vec<Name> = self
            .entries()
            .filter(|e| {
                !keep.contains(&e.def.origin)
                    && e.def
                        .from_catalog
                        .as_ref()
                        .is_none_or(|c| !keep.contains(c))
            })
            .map(|e| e.def.origin.clone())
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
            // A catalog dnsd produces has no file to read.
            return self
                .entry(i)
                .filter(|e| !e.def.produced)
                .map(|e| vec![(i, e.def.origin.clone(), e.def.file.clone())])
                .unwrap_or_default();
        }
        self.slots
            .iter()
            .enumerate()
            .filter_map(|(i, e)| e.as_ref().map(|e| (i, e)))
            .filter(|(_, e)| !e.def.produced)
            .filter(|(_, e)| force || e.current.is_none() || file_mtime(&e.def.file) != e.mtime)
            .map(|(i, e)| (i, e.def.origin.clone(), e.def.file.clone()))
            .collect()
    }

    /// Records load results, then publishes a new zone set if anything changed. A result
    /// for a zone removed meanwhile is dropped.
    pub fn apply(
        &mut self,
        results: Vec<(usize, Result<zones::Loaded, String>)>,
    ) -> Vec<LoadReport> {
        let mut reports = Vec::new();
        // Thousands of zones: one summary line, each zone at debug level (failures always).
        let many = results.len() > 100;
        let total = results.len();
        for (i, r) in results {
            let Some(e) = self.slots.get_mut(i).and_then(|e| e.as_mut()) else {
                continue;
            };
            match r {
                Ok(l) => {
                    for w in l.warnings.iter().take(20) {
                        tracing::warn!(zone = %e.def.origin, "{w}");
                    }
                    reports.push(LoadReport {
                        origin: e.def.origin.to_string(),
                        result: Ok((l.zone.serial(), l.zone.record_count())),
                    });
                    if many {
                        tracing::debug!(
                            zone = %e.def.origin,
                            serial = l.zone.serial(),
                            records = l.zone.record_count(),
                            "zone loaded"
                        );
                    } else {
                        tracing::info!(
                            zone = %e.def.origin,
                            serial = l.zone.serial(),
                            records = l.zone.record_count(),
                            ms = l.elapsed.as_millis() as u64,
                            "zone loaded"
                        );
                    }
                    e.load_time = l.elapsed;
                    let new = Arc::new(l.zone);
                    if let Some(f) = &self.on_change {
                        f(&e.def.origin, e.current.clone(), new.clone());
                    }
                    e.current = Some(new);
                    e.loaded_at = Some(SystemTime::now());
                    // The time of the file as it was opened (one fstat, no path lookup).
                    e.mtime = l.mtime;
                    e.last_error = None;
                    self.stats.ok.fetch_add(1, Ordering::Relaxed);
                    self.dirty.push(i);
                }
                Err(msg) => {
                    tracing::error!(
                        zone = %e.def.origin,
                        serving = e.current.as_ref().map(|z| z.serial()),
                        "zone not loaded, keeping the last good version: {msg}"
                    );
                    reports.push(LoadReport {
                        origin: e.def.origin.to_string(),
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
                Some(e) => set.put(i as u32, e.current.clone(), e.def.serve, e.expired, e.id),
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
            f(&e.def.origin, e.current.clone(), zone.clone());
        }
        e.current = Some(zone);
        e.loaded_at = Some(SystemTime::now());
        e.load_time = took;
        e.mtime = file_mtime(&e.def.file);
        e.last_error = None;
        e.expired = false;
        self.stats.ok.fetch_add(1, Ordering::Relaxed);
        self.dirty.push(i);
        self.publish();
    }

    /// Writes again each catalog dnsd produces whose member list changed (a new serial;
    /// secondaries hear of it by NOTIFY and take it by IXFR like any change).
    pub fn produce_catalogs(&mut self) {
        if self.producers.is_empty() {
            return;
        }
        let producers: Vec<(usize, Name)> = self
            .producers
            .iter()
            .filter_map(|&i| self.entry(i).map(|e| (i, e.def.origin.clone())))
            .collect();
        for (i, origin) in producers {
            let mut members: Vec<(Name, Option<String>)> = self
                .entries()
                .filter_map(|e| {
                    e.def
                        .listed_in
                        .as_ref()
                        .filter(|(c, _)| *c == origin)
                        .map(|(_, g)| (e.def.origin.to_lowercase(), g.clone()))
                })
                .collect();
            members.sort();
            let cur = self.entry(i).and_then(|e| e.current.clone());
            let listed: Option<Vec<(Name, Option<String>)>> = cur.as_ref().and_then(|z| {
                crate::catalog::read(z).ok().map(|m| {
                    m.into_values()
                        .map(|m| (m.zone, m.groups.into_iter().next()))
                        .collect()
                })
            });
            if listed.as_ref() == Some(&members) {
                continue;
            }
            let now = SystemTime::now()
                .duration_since(SystemTime::UNIX_EPOCH)
                .map_or(0, |d| d.as_secs() as u32);
            // The clock when it is ahead of the next serial (RFC 1982), else the next.
            let serial = cur.map_or(now, |z| {
                let next = z.serial().wrapping_add(1);
                if zones::serial_gt(now, next) {
                    now
                } else {
                    next
                }
            });
            let t = std::time::Instant::now();
            match crate::catalog::produce(&origin, serial, &members) {
                Ok(z) => {
                    tracing::info!(catalog = %origin, serial, members = members.len(), "catalog written");
                    self.install(i, Arc::new(z), t.elapsed());
                }
                Err(e) => tracing::error!(catalog = %origin, "catalog not written: {e}"),
            }
        }
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
pub fn load_all(plan: Vec<(usize, Name, PathBuf)>) -> Vec<(usize, Result<zones::Loaded, String>)> {
    use std::sync::atomic::{AtomicUsize, Ordering};
    let threads = std::thread::available_parallelism()
        .map_or(1, |n| n.get())
        .min(plan.len());
    if threads <= 1 {
        return plan
            .into_iter()
            .map(|(i, origin, file)| (i, load_one(&origin, &file)))
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
                        done.push((k, *i, load_one(origin, file)));
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
    out.into_iter().map(|(_, i, r)| (i, r)).collect()
}

/// Loads one zone (blocking: call from a blocking thread).
pub fn load_one(origin: &Name, file: &std::path::Path) -> Result<zones::Loaded, String> {
    zones::load_file(file, origin, &ReadOptions::new(origin)).map_err(|e| e.to_string())
}

/// Gives the heap freed by a big load back to the system (the loaders' scratch, the parsed
/// config's zone list): with 100,000 zones that is tens of MiB the process would keep.
pub fn release_freed_memory() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: malloc_trim only walks glibc's own heap; it takes no pointer from us.
    unsafe {
        libc::malloc_trim(0);
    }
}
