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

/// All configured zones; owns the published zone set.
pub struct Registry {
    /// Each configured origin's position in `entries` (found in O(1), not by a walk).
    index: std::collections::HashMap<Name, usize>,
    entries: Vec<ZoneEntry>,
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

impl Registry {
    /// A registry for `zones` (origin, file, settings); nothing is loaded yet.
    pub fn new(zones: Vec<(Name, PathBuf, ServeOptions)>) -> Registry {
        let entries = zones
            .into_iter()
            .map(|(origin, file, serve)| ZoneEntry {
                origin,
                file,
                serve,
                current: None,
                loaded_at: None,
                load_time: Duration::ZERO,
                mtime: None,
                last_error: None,
                expired: false,
            })
            .collect::<Vec<ZoneEntry>>();
        let index = entries
            .iter()
            .enumerate()
            .map(|(i, e)| (e.origin.clone(), i))
            .collect();
        Registry {
            index,
            entries,
            published: Arc::new(ArcSwap::from_pointee(ZoneSet::new(Vec::new(), 0))),
            generation: 0,
            stats: Arc::new(ReloadStats::default()),
            on_change: None,
            before_publish: None,
        }
    }

    /// The published zone set, for the query path.
    pub fn published(&self) -> Arc<ArcSwap<ZoneSet>> {
        self.published.clone()
    }

    /// The configured zones.
    pub fn entries(&self) -> &[ZoneEntry] {
        &self.entries
    }

    /// Index of the zone named `origin`, if configured.
    pub fn find(&self, origin: &Name) -> Option<usize> {
        self.index.get(origin).copied()
    }

    /// Which zones a reload would touch: `only` names one; otherwise those whose file
    /// changed (all when `force`).
    pub fn plan(&self, only: Option<usize>, force: bool) -> Vec<(usize, Name, PathBuf)> {
        self.entries
            .iter()
            .enumerate()
            .filter(|(i, e)| match only {
                Some(o) => *i == o,
                None => force || e.current.is_none() || file_mtime(&e.file) != e.mtime,
            })
            .map(|(i, e)| (i, e.origin.clone(), e.file.clone()))
            .collect()
    }

    /// Records load results, then publishes a new zone set if anything changed.
    pub fn apply(
        &mut self,
        results: Vec<(usize, Result<zones::Loaded, String>, Option<SystemTime>)>,
    ) -> Vec<LoadReport> {
        let mut reports = Vec::new();
        let mut changed = false;
        // Thousands of zones: one summary line, each zone at debug level (failures always).
        let many = results.len() > 100;
        let total = results.len();
        for (i, r, mtime) in results {
            let e = &mut self.entries[i];
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
                    changed = true;
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
        if changed {
            self.publish();
        }
        reports
    }

    /// Publishes the current versions of all zones as a new zone set.
    pub fn publish(&mut self) {
        self.generation += 1;
        let zones: Vec<(Arc<Zone>, ServeOptions, bool)> = self
            .entries
            .iter()
            .filter_map(|e| e.current.clone().map(|z| (z, e.serve, e.expired)))
            .collect();
        let expired: Vec<bool> = zones.iter().map(|z| z.2).collect();
        let mut set = ZoneSet::new(
            zones.into_iter().map(|(z, c, _)| (z, c)).collect(),
            self.generation,
        );
        for (i, _) in expired.iter().enumerate().filter(|e| *e.1) {
            set.set_expired(i);
        }
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
        let e = &mut self.entries[i];
        if let Some(f) = &self.on_change {
            f(&e.origin, e.current.clone(), zone.clone());
        }
        e.current = Some(zone);
        e.loaded_at = Some(SystemTime::now());
        e.load_time = took;
        e.mtime = file_mtime(&e.file);
        e.last_error = None;
        e.expired = false;
        self.stats.ok.fetch_add(1, Ordering::Relaxed);
        self.publish();
    }

    /// Marks zone `i` expired (SERVFAIL) or not, and publishes.
    pub fn set_expired(&mut self, i: usize, expired: bool) {
        if self.entries[i].expired != expired {
            self.entries[i].expired = expired;
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
    let mtime = file_mtime(file);
    let opts = ReadOptions::new(origin);
    let r = zones::load_file(file, origin, &opts).map_err(|e| e.to_string());
    (r, mtime)
}

impl Registry {
    /// Takes over from `old`: its published set (which the query path holds), generation,
    /// counters, and the loaded state of the zones in `kept` (pairs of new index, old index).
    pub fn adopt(&mut self, old: &Registry, kept: &[(usize, usize)]) {
        self.published = old.published.clone();
        self.generation = old.generation;
        self.stats = old.stats.clone();
        self.on_change = old.on_change.clone();
        for &(i, j) in kept {
            let o = &old.entries[j];
            let e = &mut self.entries[i];
            e.current = o.current.clone();
            e.loaded_at = o.loaded_at;
            e.load_time = o.load_time;
            e.mtime = o.mtime;
            e.last_error = o.last_error.clone();
            e.expired = o.expired;
        }
    }
}
