//! The zones configured and their load state; reload publishes a new [`ZoneSet`].
//!
//! A zone that fails to load keeps serving its last good version; the error is kept for
//! `ctl zones` and returned to whoever asked for the reload.

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, SystemTime};

use arc_swap::ArcSwap;
use zones::{Name, Zone};

use crate::signing::SignJob;
use crate::signing::online::CompactSigner;
pub use crate::zone::load::Planned;
use crate::zone::served::{ServeOptions, ZoneSet};

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
    /// Signed by dnsd under this policy.
    pub signing: Option<Arc<crate::signing::Policy>>,
    /// A secondary: its data come from primaries.
    pub secondary: bool,
    /// Its geo file (variants by client network), read with it.
    pub geo: Option<Arc<crate::zone::load::GeoSpec>>,
    /// Added at run time by this user: its file is read only as that user could, without
    /// `$INCLUDE`.
    pub added_by: Option<crate::config::zone_list::AddedBy>,
}

impl ZoneDef {
    /// What the registry keeps of zone `z` (named `origin`).
    pub fn from_config(
        cfg: &crate::config::Config,
        z: &crate::config::ZoneConfig,
        origin: zones::Name,
    ) -> ZoneDef {
        ZoneDef {
            origin,
            file: z.file.clone(),
            serve: ZoneDef::serve_options(cfg, z),
            produced: z.catalog == Some(crate::config::zone_list::CatalogRole::Producer),
            listed_in: z.catalog_zone.as_deref().and_then(|c| {
                zones::Name::parse(c, Some(&zones::Name::root()))
                    .ok()
                    .map(|c| (c.to_lowercase(), z.catalog_group.clone()))
            }),
            from_catalog: None,
            signing: z
                .dnssec_policy
                .as_deref()
                .and_then(|p| cfg.policy(p))
                .cloned(),
            secondary: !z.primaries.is_empty(),
            geo: ZoneDef::geo_spec(cfg, z),
            added_by: z.added_by.clone(),
        }
    }

    /// What reading zone `z`'s geo file needs, when it has one.
    pub fn geo_spec(
        cfg: &crate::config::Config,
        z: &crate::config::ZoneConfig,
    ) -> Option<Arc<crate::zone::load::GeoSpec>> {
        let path = z.geo.clone()?;
        let views = cfg
            .views
            .iter()
            .map(|v| {
                let nets = v
                    .prefixes
                    .iter()
                    .filter_map(|p| crate::config::transfer::parse_prefix(p).ok())
                    .collect();
                (v.name.clone(), nets)
            })
            .collect();
        Some(Arc::new(crate::zone::load::GeoSpec {
            path,
            views,
            ttl: cfg.geoip.ttl,
            keys: if cfg.geoip.db.is_some() {
                cfg.geoip.keys.len()
            } else {
                0
            },
        }))
    }

    /// What the query path reads of zone `z`'s settings.
    fn serve_options(
        cfg: &crate::config::Config,
        z: &crate::config::ZoneConfig,
    ) -> crate::zone::served::ServeOptions {
        crate::zone::served::ServeOptions {
            cookies: z.cookies.unwrap_or(cfg.defence.cookies.policy),
            tenant: z.tenant,
            xdp_answers: z.xdp_answers == crate::config::XdpAnswers::All,
            xdp_hot: z.xdp_answers == crate::config::XdpAnswers::Hot,
        }
    }
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
    /// A zone dnsd signs: when to sign it again (seconds since the epoch).
    pub resign_at: Option<u64>,
    /// A signed zone (by dnsd or not): the earliest expiration of its signatures.
    pub rrsig_expiry: Option<u32>,
    /// Answered with compact denial: the online signer.
    pub compact: Option<Arc<CompactSigner>>,
    /// A secondary dnsd signs: the zone as its primaries serve it (the base of the next
    /// IXFR, and the serial compared with theirs).
    pub upstream: Option<Arc<Zone>>,
    /// Its variants by client network, as its geo file gave them.
    pub geo: Option<Arc<crate::zone::geo::GeoZone>>,
    /// The geo file's modification time at the last successful load.
    pub geo_mtime: Option<SystemTime>,
    /// What is published while it has no data (made once): see `ZoneSet::put_stand_in`.
    stand_in: Option<Arc<Zone>>,
}

/// The load plan of slot `i`.
fn planned(i: usize, e: &ZoneEntry) -> Planned {
    Planned {
        slot: i,
        origin: e.def.origin.clone(),
        file: e.def.file.clone(),
        sign: e.def.signing.clone().map(|policy| SignJob {
            policy,
            prev: e.current.clone(),
            keep_unsigned: e.def.secondary,
        }),
        geo: e.def.geo.clone(),
        added_by: e.def.added_by.clone(),
        secondary: e.def.secondary,
    }
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
    /// Config files refused by a reload (the running config stayed).
    pub config_refused: AtomicU64,
    /// Signatures made by dnsd's signer.
    pub signatures_made: AtomicU64,
    /// Signatures kept from the version signed before.
    pub signatures_kept: AtomicU64,
    /// Signatures past their expiration in the zones served (checked each minute).
    pub expired_signatures: AtomicU64,
    /// Zones whose signatures expire within `rrsig_warn_days` (checked each minute).
    pub expiring_zones: AtomicU64,
}

impl ReloadStats {
    /// Counts what a signing made and kept.
    pub fn count_signatures(&self, made: usize, kept: usize) {
        self.signatures_made
            .fetch_add(made as u64, Ordering::Relaxed);
        self.signatures_kept
            .fetch_add(kept as u64, Ordering::Relaxed);
    }
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
    /// Slots of the zones dnsd signs (their re-sign times looked at without a walk).
    signed: std::collections::BTreeSet<usize>,
    published: Arc<ArcSwap<ZoneSet>>,
    generation: u64,
    /// Reload counters.
    pub stats: Arc<ReloadStats>,
    /// Warn when a served signature expires within this many days (`[dnssec]`).
    pub rrsig_warn_days: u32,
    /// Writes copies of the zones dnsd signs (started with the first one).
    copies: Option<crate::signing::CopyWriter>,
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
    /// On an error: the serial of the last good version still served (none: SERVFAIL).
    pub kept: Option<u32>,
    /// Loaded: what secondaries will not follow (a serial gone back, a change under the same
    /// serial), as the log says it.
    pub warning: Option<String>,
}

/// What [`Registry::sync`] changed.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct SyncReport {
    /// Zones added.
    pub added: usize,
    /// Zones removed.
    pub removed: usize,
    /// Zones whose file or settings changed.
    pub changed: usize,
    /// The zones removed, by name.
    pub gone: Vec<Name>,
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
            signed: Default::default(),
            published: Arc::new(ArcSwap::from_pointee(ZoneSet::empty(0))),
            generation: 0,
            stats: Arc::new(ReloadStats::default()),
            rrsig_warn_days: 7,
            copies: None,
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
            resign_at: None,
            rrsig_expiry: None,
            compact: None,
            upstream: None,
            geo: None,
            geo_mtime: None,
            stand_in: None,
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
        self.signed.remove(&i);
        true
    }

    /// A new file or settings for the zone in slot `i`: a new file is loaded by the next
    /// reload (the served version stays until then).
    fn change(&mut self, i: usize, d: ZoneDef) -> bool {
        let e = self.entry_mut(i);
        if e.def == d {
            return false;
        }
        // A new file, or signing taken up, dropped or changed: the next reload loads it.
        if e.def.file != d.file || e.def.signing != d.signing {
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
                // A consumed catalog's member the config now names: the config's zone
                // replaces it, data and all (never the catalog's primary's data under the
                // config's name).
                Some(i) if self.entry(i).is_some_and(|e| e.def.from_catalog.is_some()) => {
                    self.remove(&origin);
                    self.add(d);
                    r.added += 1;
                }
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
            r.gone.push(o);
        }
        r
    }

    /// Which zones a reload would touch: `only` names one; otherwise those whose file
    /// changed (all when `force`).
    pub fn plan(&self, only: Option<usize>, force: bool) -> Vec<Planned> {
        if let Some(i) = only {
            // A catalog dnsd produces has no file to read.
            return self
                .entry(i)
                .filter(|e| !e.def.produced)
                .map(|e| vec![planned(i, e)])
                .unwrap_or_default();
        }
        self.slots
            .iter()
            .enumerate()
            .filter_map(|(i, e)| e.as_ref().map(|e| (i, e)))
            .filter(|(_, e)| !e.def.produced)
            .filter(|(_, e)| {
                let mtime = crate::zone::load::file_mtime(&e.def.file);
                force
                    || e.current.is_none()
                    || mtime != e.mtime
                    // A file gone (or a path changed to one that does not exist): said at
                    // each reload while the last good version serves (a secondary's waits
                    // for its transfer: `skip_missing`).
                    || mtime.is_none()
                    || e.def
                        .geo
                        .as_ref()
                        .is_some_and(|g| crate::zone::load::file_mtime(&g.path) != e.geo_mtime)
            })
            .map(|(i, e)| planned(i, e))
            .collect()
    }

    /// The signed zones whose signatures or keys are due at `now` (seconds since the epoch),
    /// to be signed again from the version served.
    pub fn resign_due(&self, now: u64) -> Vec<(usize, Arc<Zone>, SignJob)> {
        self.signed
            .iter()
            .filter_map(|&i| {
                let e = self.entry(i)?;
                let policy = e.def.signing.clone()?;
                let cur = e.current.clone()?;
                // A zone whose last reload failed is still re-signed: the version served
                // must not see its signatures expire.
                e.resign_at.is_some_and(|t| t <= now).then(|| {
                    (
                        i,
                        cur.clone(),
                        SignJob {
                            policy,
                            prev: Some(cur),
                            keep_unsigned: false,
                        },
                    )
                })
            })
            .collect()
    }

    /// Records load results, then publishes a new zone set if anything changed. A result
    /// for a zone removed meanwhile is dropped.
    pub fn apply(&mut self, results: Vec<crate::zone::load::LoadResult>) -> Vec<LoadReport> {
        let mut reports = Vec::new();
        // Thousands of zones: one summary line, each zone at debug level (failures always).
        let many = results.len() > 100;
        let total = results.len();
        for (i, r) in results {
            let Some(e) = self.slots.get_mut(i).and_then(|e| e.as_mut()) else {
                continue;
            };
            match r {
                Ok(crate::zone::load::LoadedZone {
                    loaded: mut l,
                    resign_at,
                    rrsig_expiry,
                    signatures: (made, kept),
                    compact,
                    upstream,
                    geo,
                }) => {
                    // A primary that dnsd signed, loaded unsigned now (its policy dropped):
                    // the file's serial is behind the ones signing gave out, which
                    // secondaries would never follow (they keep the signed copy). It goes on
                    // from the last served.
                    if self.signed.contains(&i)
                        && resign_at.is_none()
                        && !e.def.secondary
                        // (A pre-signed file's SOA keeps its serial: its signature covers it.)
                        && l.zone.rrset(l.zone.apex_node(), zones::rrtype::t::DNSKEY).is_none()
                        && let Some(old) = &e.current
                        && !zones::serial_gt(l.zone.serial(), old.serial())
                    {
                        let (file, next) = (l.zone.serial(), old.serial().wrapping_add(1));
                        if l.zone.set_serial(next) {
                            tracing::warn!(zone = %e.def.origin, file, serial = next, "no longer signed by dnsd: served with the serial after the last signed one, not its file's");
                        }
                    }
                    e.compact = compact;
                    e.upstream = upstream;
                    e.geo_mtime = e
                        .def
                        .geo
                        .as_ref()
                        .and_then(|g| crate::zone::load::file_mtime(&g.path));
                    e.geo = geo;
                    self.stats.count_signatures(made, kept);
                    e.rrsig_expiry = rrsig_expiry;
                    if let Some(exp) = rrsig_expiry {
                        crate::zone::expiry::warn_expiry(&e.def.origin, exp, self.rrsig_warn_days);
                    }
                    if resign_at.is_some() {
                        self.signed.insert(i);
                    } else {
                        self.signed.remove(&i);
                    }
                    e.resign_at = resign_at;
                    for w in l.warnings.iter().take(20) {
                        tracing::warn!(zone = %e.def.origin, "{w}");
                    }
                    // What secondaries will not follow, in the log and the reload's answer.
                    let warning = match &e.current {
                        Some(old) if !e.def.secondary => {
                            serial_warnings(&e.def.origin, old, &l.zone)
                        }
                        _ => None,
                    };
                    reports.push(LoadReport {
                        origin: e.def.origin.to_string(),
                        result: Ok((l.zone.serial(), l.zone.record_count())),
                        kept: None,
                        warning,
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
                    if e.resign_at.is_some()
                        && let Some(p) = &e.def.signing
                    {
                        self.copies
                            .get_or_insert_with(crate::signing::CopyWriter::start)
                            .keep(p, new.clone());
                    }
                    e.current = Some(new);
                    e.loaded_at = Some(SystemTime::now());
                    // The time of the file as it was opened (one fstat, no path lookup).
                    e.mtime = l.mtime;
                    e.last_error = None;
                    self.stats.ok.fetch_add(1, Ordering::Relaxed);
                    self.dirty.push(i);
                }
                Err(err) => {
                    let msg = err.to_string();
                    match e.current.as_ref().map(|z| z.serial()) {
                        Some(serial) => tracing::error!(
                            zone = %e.def.origin,
                            serving = serial,
                            "zone not loaded, keeping the last good version: {msg}"
                        ),
                        None => {
                            tracing::error!(
                                zone = %e.def.origin,
                                "zone not loaded, answered SERVFAIL (no earlier version): {msg}"
                            );
                            // Published once as a stand-in; a failure again changes nothing.
                            if e.stand_in.is_none() {
                                self.dirty.push(i);
                            }
                        }
                    }
                    // A zone a user added: its places only (the daemon read what it could not
                    // and the answer goes back to it); the log has the rest.
                    let msg = match e.def.added_by {
                        Some(_) => format!("{} (details in the daemon's log)", err.places()),
                        None => msg,
                    };
                    reports.push(LoadReport {
                        origin: e.def.origin.to_string(),
                        result: Err(msg.clone()),
                        kept: e.current.as_ref().map(|z| z.serial()),
                        warning: None,
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
            match &mut self.slots[i] {
                Some(e) => {
                    // A zone without data is answered SERVFAIL (see `put_stand_in`).
                    match &e.current {
                        Some(z) => set.put(
                            i as u32,
                            Some(z.clone()),
                            e.def.serve,
                            e.expired,
                            e.id,
                            e.compact.clone(),
                            e.geo.clone(),
                        ),
                        None => {
                            if e.stand_in.is_none() {
                                e.stand_in = placeholder(&e.def.origin);
                            }
                            match &e.stand_in {
                                Some(z) => set.put_stand_in(i as u32, z.clone(), e.def.serve, e.id),
                                None => {
                                    set.put(i as u32, None, e.def.serve, false, e.id, None, None)
                                }
                            }
                        }
                    }
                }
                None => set.put(
                    i as u32,
                    None,
                    ServeOptions::default(),
                    false,
                    u32::MAX,
                    None,
                    None,
                ),
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
        // A transferred zone is served as received: no online signing, no unsigned copy.
        let expiry = zones::dnssec::signature_expiry(&zone, crate::signing::now() as u32).0;
        self.swap_in(i, zone, took, None, expiry);
        let e = self.entry_mut(i);
        e.mtime = crate::zone::load::file_mtime(&e.def.file);
        e.upstream = None;
        e.resign_at = None;
        self.signed.remove(&i);
        self.publish();
    }

    /// Makes `zone` zone `i`'s served version, its signatures' earliest expiration
    /// `rrsig_expiry` (publishing is the caller's).
    fn swap_in(
        &mut self,
        i: usize,
        zone: Arc<Zone>,
        took: Duration,
        compact: Option<Arc<CompactSigner>>,
        rrsig_expiry: Option<u32>,
    ) {
        let on_change = self.on_change.clone();
        let e = self.entry_mut(i);
        if let Some(f) = &on_change {
            f(&e.def.origin, e.current.clone(), zone.clone());
        }
        e.rrsig_expiry = rrsig_expiry;
        e.current = Some(zone);
        e.compact = compact;
        e.loaded_at = Some(SystemTime::now());
        e.load_time = took;
        e.last_error = None;
        e.expired = false;
        self.stats.ok.fetch_add(1, Ordering::Relaxed);
        self.dirty.push(i);
    }

    /// Serves `zone`, signed again from `from` (the version served when signing started),
    /// unless a reload replaced `from` meanwhile. True when installed. The file's time is
    /// kept: the file did not change, the next reload need not read it.
    pub fn install_resigned(
        &mut self,
        i: usize,
        from: &Arc<Zone>,
        signed: crate::signing::SignedZone,
    ) -> bool {
        let Some(e) = self.slots.get_mut(i).and_then(|e| e.as_mut()) else {
            return false;
        };
        if !e.current.as_ref().is_some_and(|c| Arc::ptr_eq(c, from)) {
            return false;
        }
        e.resign_at = Some(signed.resign_at);
        let expiry = Some(signed.earliest_expiration);
        self.swap_in(
            i,
            Arc::new(signed.zone),
            Duration::ZERO,
            signed.compact,
            expiry,
        );
        self.keep_copy(i);
        self.publish();
        true
    }

    /// What a secondary compares with its primaries and builds IXFR on: the zone as they
    /// serve it (kept beside the signed version of a secondary dnsd signs, also after its
    /// policy is dropped, until the next transfer), else the version served.
    pub fn upstream(&self, i: usize) -> Option<Arc<Zone>> {
        let e = self.entry(i)?;
        match (&e.upstream, &e.def.signing) {
            (Some(u), _) => Some(u.clone()),
            // Signed, with no unsigned version yet (a policy just given): transfer it whole.
            (None, Some(_)) => None,
            (None, None) => e.current.clone(),
        }
    }

    /// Serves `signed`, made from `upstream` as a transfer brought it (a secondary dnsd
    /// signs), and publishes.
    pub fn install_signed(
        &mut self,
        i: usize,
        signed: crate::signing::SignedZone,
        upstream: Arc<Zone>,
        took: Duration,
    ) {
        self.stats.count_signatures(signed.made, signed.kept);
        let expiry = Some(signed.earliest_expiration);
        self.swap_in(i, Arc::new(signed.zone), took, signed.compact, expiry);
        let e = self.entry_mut(i);
        e.upstream = Some(upstream);
        e.resign_at = Some(signed.resign_at);
        e.mtime = crate::zone::load::file_mtime(&e.def.file);
        self.signed.insert(i);
        self.keep_copy(i);
        self.publish();
    }

    /// Queues a copy of zone `i`'s signed version (kept for the next start).
    fn keep_copy(&mut self, i: usize) {
        let Some(e) = self.slots.get(i).and_then(|e| e.as_ref()) else {
            return;
        };
        if let (Some(p), Some(z)) = (&e.def.signing, &e.current) {
            self.copies
                .get_or_insert_with(crate::signing::CopyWriter::start)
                .keep(p, z.clone());
        }
    }

    /// Puts off zone `i`'s next re-sign to `at` (after a failure).
    pub fn defer_resign(&mut self, i: usize, at: u64) {
        if let Some(e) = self.slots.get_mut(i).and_then(|e| e.as_mut()) {
            e.resign_at = Some(at);
        }
    }

    /// The slots of the catalogs dnsd produces.
    pub fn producers(&self) -> impl Iterator<Item = usize> + '_ {
        self.producers.iter().copied()
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

/// The registry offers its signed zones to the re-sign scheduler.
impl crate::signing::schedule::SignedZones for Registry {
    fn due(&self, now: u64) -> Vec<(usize, Arc<Zone>, SignJob)> {
        self.resign_due(now)
    }

    fn defer(&mut self, i: usize, at: u64) {
        self.defer_resign(i, at);
    }

    fn all_due(&mut self) {
        for i in self.signed.clone() {
            self.defer_resign(i, 0);
        }
    }

    fn install(&mut self, i: usize, from: &Arc<Zone>, signed: crate::signing::SignedZone) -> bool {
        self.stats.count_signatures(signed.made, signed.kept);
        self.install_resigned(i, from, signed)
    }

    fn signed_zone(&self, apex: &Name) -> Option<(usize, Arc<crate::signing::Policy>)> {
        let i = self.find(apex)?;
        Some((i, self.entry(i)?.def.signing.clone()?))
    }

    fn each_minute(&mut self, now: u64) {
        let (zones_n, expired) = crate::zone::expiry::count(
            self.entries()
                .filter_map(|e| Some((e.rrsig_expiry?, e.current.as_ref()?))),
            now as u32,
            self.rrsig_warn_days,
        );
        self.stats.expiring_zones.store(zones_n, Ordering::Relaxed);
        self.stats
            .expired_signatures
            .store(expired, Ordering::Relaxed);
    }
}

/// Zone loads by result, and each served zone's serial and record count.
pub struct Zones {
    /// Reload counters.
    pub reloads: Arc<ReloadStats>,
    /// The zone set the query path reads.
    pub published: Arc<ArcSwap<ZoneSet>>,
}

impl shield::metrics::Source for Zones {
    fn collect(&self, out: &mut shield::metrics::Samples) {
        for (what, a) in [("ok", &self.reloads.ok), ("failed", &self.reloads.failed)] {
            out.counter(
                format!("reloads.{what}"),
                "dnsd_reloads_total",
                format!("result=\"{what}\""),
                "Zone loads by result.",
                a.load(std::sync::atomic::Ordering::Relaxed),
            );
        }
        out.counter(
            "reloads.no_memory",
            "dnsd_zone_builds_refused_no_memory_total",
            "",
            "Zone loads and transfers refused for want of memory (the last good version kept serving).",
            crate::zone::room::REFUSED.load(std::sync::atomic::Ordering::Relaxed),
        );
        out.gauge(
            "reloads.memory_reserved",
            "dnsd_zone_builds_memory_reserved_bytes",
            "",
            "Memory reserved by zone builds under way (their estimated peaks).",
            crate::zone::room::reserved(),
        );
        let r = &self.reloads;
        out.counter(
            "reloads.config_refused",
            "dnsd_config_reloads_refused_total",
            "",
            "Config files a reload refused (file, line and key in the log and the answer); the running config stayed.",
            r.config_refused.load(std::sync::atomic::Ordering::Relaxed),
        );
        for (ctl, prom, help, v) in [
            (
                "dnssec.signatures_made",
                "dnsd_dnssec_signatures_made_total",
                "Signatures made by the signer.",
                &r.signatures_made,
            ),
            (
                "dnssec.signatures_kept",
                "dnsd_dnssec_signatures_kept_total",
                "Signatures kept from the version signed before.",
                &r.signatures_kept,
            ),
        ] {
            out.counter(
                ctl,
                prom,
                "",
                help,
                v.load(std::sync::atomic::Ordering::Relaxed),
            );
        }
        out.gauge(
            "dnssec.expired_signatures",
            "dnsd_dnssec_expired_signatures",
            "",
            "Signatures past their expiration in the zones served.",
            r.expired_signatures
                .load(std::sync::atomic::Ordering::Relaxed),
        );
        out.gauge(
            "dnssec.expiring_zones",
            "dnsd_dnssec_expiring_zones",
            "",
            "Zones whose signatures expire within [dnssec] rrsig_warn_days.",
            r.expiring_zones.load(std::sync::atomic::Ordering::Relaxed),
        );
        let set = self.published.load();
        for (_, z) in set.zones() {
            out.gauge(
                "",
                "dnsd_zone_serial",
                format!(
                    "zone=\"{}\"",
                    shield::metrics::label_value(&z.apex().to_string())
                ),
                "SOA serial of each zone served.",
                u64::from(z.serial()),
            );
        }
        for (_, z) in set.zones() {
            out.gauge(
                "",
                "dnsd_zone_records",
                format!(
                    "zone=\"{}\"",
                    shield::metrics::label_value(&z.apex().to_string())
                ),
                "Records in each zone served.",
                z.record_count() as u64,
            );
        }
    }
}

/// The stand-in published for a configured zone without data: its apex, an SOA and an NS
/// no answer ever shows (the zone is published expired: SERVFAIL).
fn placeholder(origin: &Name) -> Option<Arc<Zone>> {
    const TEXT: &str = "@ 0 IN SOA invalid. invalid. 0 0 0 0 0\n@ 0 IN NS invalid.\n";
    zones::load_bytes("(no data)", TEXT, origin, &zones::ReadOptions::new(origin))
        .ok()
        .map(|l| Arc::new(l.zone))
}
/// Warns of a primary's reload its secondaries will not follow: a serial that went back
/// (RFC 1982: they keep their copy, or refuse the transfer), or a changed zone under the same
/// serial (they never ask for it), as Knot reports `serial old -> new`; the warning, for the
/// reload's answer.
fn serial_warnings(origin: &Name, old: &zones::Zone, new: &zones::Zone) -> Option<String> {
    let (a, b) = (old.serial(), new.serial());
    if b != a && b.wrapping_sub(a) >= 1 << 31 {
        tracing::warn!(
            zone = %origin,
            old = a,
            new = b,
            "the serial went back: secondaries keep their copy (raise it past the old one)"
        );
        Some(format!(
            "serial {a} -> {b}: the serial went back: secondaries keep their copy (raise it past {a})"
        ))
    } else if b == a
        && (old.record_count() != new.record_count() || !old.records().eq(new.records()))
    {
        tracing::warn!(
            zone = %origin,
            serial = a,
            "the zone changed under the same serial: secondaries will not transfer the change"
        );
        Some(format!(
            "serial {a}: the zone changed under the same serial: secondaries will not transfer the change"
        ))
    } else {
        None
    }
}
