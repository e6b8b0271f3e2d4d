//! Catalog zones (RFC 9432): the member zones a catalog lists, read from a consumed catalog
//! (a secondary zone with `catalog = "consumer"`), and the catalog dnsd produces of the zones
//! that name it (`catalog = "producer"`; members set `catalog_zone`).
//!
//! A consumed catalog adds each member as a secondary zone of the catalog's primaries (a
//! member's `group` picks the template of that name when there is one, else the catalog's
//! `catalog_template`), removes the members it no longer lists, starts a member afresh when
//! its unique id changes, and hands a member over to another catalog only as the member's
//! `coo` property says.
//!
//! A catalog is another party's data, and it reaches only its own tenant's: a member whose
//! file would be another zone's, a member at or below a zone the catalog does not own, and
//! members past `catalog_max_members` are refused ([`Refusal`], counted); a member's group
//! may pick a template, never a tenant other than the catalog zone's own.
//!
//! Consuming runs as a daemon task ([`crate::daemon::catalogs`]); producing is
//! [`produce_all`], after each change of the zone list.

use std::collections::{BTreeMap, HashMap};
use std::fmt::Write as _;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::SystemTime;

use zones::rrtype::t;
use zones::{Name, Zone};

use crate::config::ZoneConfig;
use crate::zone::registry::Registry;

/// What the consumed catalog zones hold: each catalog's last member list, and each member's
/// settings (its policy survives config reloads, which know nothing of it).
#[derive(Default)]
pub struct Consumed {
    /// Each consumed catalog's members (those it holds).
    pub lists: HashMap<Name, BTreeMap<Name, Member>>,
    /// Each member's settings.
    pub members: HashMap<Name, ZoneConfig>,
    /// The config each catalog's members were last given their settings under: a reload
    /// that changed their templates gives every member its settings again.
    pub settled_with: HashMap<Name, Arc<crate::config::Config>>,
}

/// Consumed catalogs whose zone changed and wait to be read (at most one entry each).
#[derive(Default)]
pub struct CatalogQueue {
    pending: std::sync::Mutex<std::collections::BTreeSet<Name>>,
    wake: tokio::sync::Notify,
}

impl CatalogQueue {
    /// Says that the consumed catalog `origin` changed: its member list is read again soon.
    pub fn push(&self, origin: &Name) {
        self.pending
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(origin.to_lowercase());
        self.wake.notify_one();
    }

    /// Waits until a catalog is queued.
    pub async fn notified(&self) {
        self.wake.notified().await
    }

    /// The catalogs queued, emptying the queue.
    pub fn take(&self) -> std::collections::BTreeSet<Name> {
        std::mem::take(&mut *self.pending.lock().unwrap_or_else(|e| e.into_inner()))
    }
}

impl Consumed {
    /// The settings of every member of a consumed catalog.
    pub fn member_configs(&self) -> Vec<ZoneConfig> {
        self.members.values().cloned().collect()
    }

    /// Forgets the catalogs `keep` says no to, with their members' settings.
    pub fn retain_catalogs(&mut self, keep: impl Fn(&Name) -> bool) {
        let gone: Vec<Name> = self.lists.keys().filter(|c| !keep(c)).cloned().collect();
        for c in gone {
            self.settled_with.remove(&c);
            if let Some(members) = self.lists.remove(&c) {
                for z in members.keys() {
                    self.members.remove(z);
                }
            }
        }
    }
}

/// Why a consumed catalog's member was not taken.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    /// Its file is another zone's.
    FileTaken = 0,
    /// It is at or below a zone the catalog does not own.
    BelowOtherZone = 1,
    /// The catalog lists more than `catalog_max_members`.
    OverMax = 2,
    /// Its group's template named another tenant (taken, with the catalog's tenant).
    Tenant = 3,
    /// It is the root, or above a zone the catalog does not own.
    AboveOtherZone = 4,
    /// The config, a run-time zone or another catalog holds it, and no coo hands it over.
    HeldElsewhere = 5,
}

impl Refusal {
    /// Every cause, in counter order.
    pub const ALL: [Refusal; 6] = [
        Refusal::FileTaken,
        Refusal::BelowOtherZone,
        Refusal::OverMax,
        Refusal::Tenant,
        Refusal::AboveOtherZone,
        Refusal::HeldElsewhere,
    ];

    /// The cause's name in counters.
    pub fn name(self) -> &'static str {
        match self {
            Refusal::FileTaken => "file_taken",
            Refusal::BelowOtherZone => "below_other_zone",
            Refusal::OverMax => "over_max_members",
            Refusal::Tenant => "tenant_overridden",
            Refusal::AboveOtherZone => "above_other_zone",
            Refusal::HeldElsewhere => "held_elsewhere",
        }
    }

    /// The cause as the log says it.
    pub fn text(self) -> &'static str {
        match self {
            Refusal::FileTaken => "its file is another zone's",
            Refusal::BelowOtherZone => "at or below a zone the catalog does not own",
            Refusal::OverMax => "past catalog_max_members",
            Refusal::Tenant => "its template names another tenant",
            Refusal::AboveOtherZone => "the root, or above a zone the catalog does not own",
            Refusal::HeldElsewhere => "the config or another catalog holds it",
        }
    }
}

/// Members refused (or corrected) by cause, over every consumed catalog.
pub static REFUSED: [AtomicU64; 6] = [
    AtomicU64::new(0),
    AtomicU64::new(0),
    AtomicU64::new(0),
    AtomicU64::new(0),
    AtomicU64::new(0),
    AtomicU64::new(0),
];

/// Counts `n` members of `why`.
pub fn refused(why: Refusal, n: u64) {
    REFUSED[why as usize].fetch_add(n, Ordering::Relaxed);
}

/// The counters, for `ctl stats` and /metrics.
pub fn collect(out: &mut shield::metrics::Samples) {
    for why in Refusal::ALL {
        out.counter(
            format!("catalog.refused.{}", why.name()),
            "dnsd_catalog_members_refused_total",
            format!("cause=\"{}\"", why.name()),
            "Consumed catalogs' members refused: a file another zone's, at or below or above a zone the catalog does not own, the root, past catalog_max_members; held_elsewhere: the config or another catalog holds it; tenant_overridden: taken with the catalog's tenant instead of its template's.",
            REFUSED[why as usize].load(Ordering::Relaxed),
        );
    }
}

/// The schema version this implementation reads and writes.
const VERSION: &str = "2";

/// One member of a catalog.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Member {
    /// The member zone.
    pub zone: Name,
    /// Its unique id (the label under `zones`).
    pub id: Vec<u8>,
    /// Its `group` properties.
    pub groups: Vec<String>,
    /// Its `coo` property: the catalog that may take it over.
    pub coo: Option<Name>,
}

/// Why a catalog zone is not used (the last good member list stays).
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum CatalogError {
    /// No `version` TXT, or a version this implementation does not read.
    #[error("catalog {0}: version.{0} TXT \"2\" is missing or names another schema version")]
    Version(String),
    /// A member node (or its `coo` property) with more than one PTR: RFC 9432 §4.1 allows
    /// one, and which is meant cannot be told (Knot refuses such a catalog too).
    #[error("catalog {catalog}: {owner} has more than one PTR record")]
    TwoPtr {
        /// The catalog.
        catalog: String,
        /// The node, relative to the catalog.
        owner: String,
    },
    /// Two unique ids name the same member zone.
    #[error("catalog {catalog}: member {zone} is listed twice")]
    Duplicate {
        /// The catalog.
        catalog: String,
        /// The member.
        zone: String,
    },
}

/// The members a catalog zone lists, by member zone.
pub fn read(cat: &Zone) -> Result<BTreeMap<Name, Member>, CatalogError> {
    let apex = cat.apex().to_lowercase();
    let apex_w = apex.as_wire();
    let catalog = apex.to_string();
    let mut version_ok = false;
    // Unique id -> member; then properties keyed by unique id.
    let mut by_id: BTreeMap<Vec<u8>, Member> = BTreeMap::new();
    let mut groups: BTreeMap<Vec<u8>, Vec<String>> = BTreeMap::new();
    let mut coos: BTreeMap<Vec<u8>, Name> = BTreeMap::new();
    for (owner, rtype, _, rdata) in cat.records() {
        let Some(rel) = relative_labels(owner, apex_w) else {
            continue;
        };
        let rel: Vec<Vec<u8>> = rel.iter().map(|l| l.to_ascii_lowercase()).collect();
        match (rel.as_slice(), rtype) {
            ([v], t::TXT) if v == b"version" => {
                version_ok |= txt_strings(rdata).first().is_some_and(|s| s == VERSION);
            }
            ([id, z], t::PTR) if z == b"zones" => {
                if by_id.contains_key(id) {
                    return Err(CatalogError::TwoPtr {
                        catalog,
                        owner: format!("{}.zones", String::from_utf8_lossy(id)),
                    });
                }
                if let Ok(n) = Name::from_wire(rdata) {
                    by_id.insert(
                        id.clone(),
                        Member {
                            zone: n.to_lowercase(),
                            id: id.clone(),
                            groups: Vec::new(),
                            coo: None,
                        },
                    );
                }
            }
            ([p, id, z], t::TXT) if z == b"zones" && p == b"group" => {
                groups
                    .entry(id.clone())
                    .or_default()
                    .extend(txt_strings(rdata));
            }
            ([p, id, z], t::PTR) if z == b"zones" && p == b"coo" => {
                if coos.contains_key(id) {
                    return Err(CatalogError::TwoPtr {
                        catalog,
                        owner: format!("coo.{}.zones", String::from_utf8_lossy(id)),
                    });
                }
                if let Ok(n) = Name::from_wire(rdata) {
                    coos.insert(id.clone(), n.to_lowercase());
                }
            }
            _ => {}
        }
    }
    if !version_ok {
        return Err(CatalogError::Version(catalog));
    }
    let mut out = BTreeMap::new();
    for (id, mut m) in by_id {
        m.groups = groups.remove(&id).unwrap_or_default();
        m.coo = coos.remove(&id);
        if out.insert(m.zone.clone(), m.clone()).is_some() {
            return Err(CatalogError::Duplicate {
                catalog,
                zone: m.zone.to_string(),
            });
        }
    }
    Ok(out)
}

/// The labels of `owner` below `apex` (both wire, `apex` lower-case), outermost last; None
/// when `owner` is not below `apex`.
fn relative_labels<'a>(owner: &'a [u8], apex: &[u8]) -> Option<Vec<&'a [u8]>> {
    if owner.len() < apex.len() || !owner[owner.len() - apex.len()..].eq_ignore_ascii_case(apex) {
        return None;
    }
    let mut out = Vec::new();
    let mut i = 0;
    let end = owner.len() - apex.len();
    while i < end {
        let l = owner[i] as usize;
        out.push(owner.get(i + 1..i + 1 + l)?);
        i += 1 + l;
    }
    (i == end).then_some(out)
}

/// The character-strings of a TXT RDATA.
fn txt_strings(rdata: &[u8]) -> Vec<String> {
    let mut out = Vec::new();
    let mut i = 0;
    while i < rdata.len() {
        let l = rdata[i] as usize;
        let Some(s) = rdata.get(i + 1..i + 1 + l) else {
            break;
        };
        out.push(String::from_utf8_lossy(s).into_owned());
        i += 1 + l;
    }
    out
}

/// A member's unique id in a catalog dnsd produces: stable for the member's name (a hash,
/// as Knot does), so that secondaries see no reset when other members come and go.
pub fn unique_id(zone: &Name) -> String {
    use std::hash::Hasher;
    let mut h = siphasher::sip::SipHasher13::new_with_keys(0x70616c6973616465, 0x6361747a);
    h.write(zone.to_lowercase().as_wire());
    format!("{:016x}", h.finish())
}

/// The text of the catalog `origin` dnsd produces: SOA with `serial`, NS `invalid.`, the
/// version, and each member (name, group) with its unique id and group property.
pub fn produce_text(origin: &Name, serial: u32, members: &[(Name, Option<String>)]) -> String {
    let o = origin.to_string();
    let mut s = format!(
        "$ORIGIN {o}\n$TTL 0\n@ SOA invalid. invalid. {serial} 3600 600 2147483646 0\n@ NS invalid.\nversion TXT \"{VERSION}\"\n"
    );
    for (m, group) in members {
        let id = unique_id(m);
        let _ = writeln!(s, "{id}.zones PTR {m}");
        if let Some(g) = group {
            let g = g.replace('\\', "\\\\").replace('"', "\\\"");
            let _ = writeln!(s, "group.{id}.zones TXT \"{g}\"");
        }
    }
    s
}

/// The zone `produce_text` describes.
pub fn produce(
    origin: &Name,
    serial: u32,
    members: &[(Name, Option<String>)],
) -> Result<Zone, String> {
    let text = produce_text(origin, serial, members);
    zones::load_bytes(
        &format!("catalog {origin}"),
        text,
        origin,
        &zones::ReadOptions::new(origin),
    )
    .map(|l| l.zone)
    .map_err(|e| e.to_string())
}

/// What a consumer does when a catalog's member list changes.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Changes {
    /// Members to add (new, or taken over from another catalog by its `coo`).
    pub add: Vec<Member>,
    /// Members to remove.
    pub remove: Vec<Name>,
    /// Members whose unique id changed: their data is dropped and transferred afresh.
    pub reset: Vec<Member>,
    /// Members whose groups changed (their template changes).
    pub regroup: Vec<Member>,
    /// Members another catalog (or the config) holds and did not hand over: ignored.
    pub refused: Vec<Name>,
}

/// The changes to make when `catalog` now lists `new` where it listed `old`; `owner` says who
/// holds a zone now (None: nobody; Some(None): the config; Some(Some(c)): catalog c), and
/// `coo_of` what `coo` the holding catalog gives the zone.
pub fn changes(
    catalog: &Name,
    old: &BTreeMap<Name, Member>,
    new: &BTreeMap<Name, Member>,
    owner: &dyn Fn(&Name) -> Option<Option<Name>>,
    coo_of: &dyn Fn(&Name, &Name) -> Option<Name>,
) -> Changes {
    let mut c = Changes::default();
    for (z, m) in new {
        match old.get(z) {
            Some(o) if o.id != m.id => c.reset.push(m.clone()),
            Some(o) if o.groups != m.groups => c.regroup.push(m.clone()),
            Some(_) => {}
            None => match owner(z) {
                None => c.add.push(m.clone()),
                Some(Some(other)) if &other == catalog => c.add.push(m.clone()),
                // RFC 9432 §5.6: another catalog hands the member over with its coo.
                Some(Some(other)) if coo_of(&other, z).as_ref() == Some(catalog) => {
                    c.add.push(m.clone())
                }
                Some(_) => c.refused.push(z.clone()),
            },
        }
    }
    for z in old.keys() {
        if !new.contains_key(z) {
            c.remove.push(z.clone());
        }
    }
    c
}

/// Writes again each catalog of `reg` that dnsd produces and whose member list changed (a
/// new serial; secondaries hear of it by NOTIFY and take it by IXFR like any change).
pub fn produce_all(reg: &mut Registry) {
    let producers: Vec<(usize, Name)> = reg
        .producers()
        .filter_map(|i| reg.entry(i).map(|e| (i, e.def.origin.clone())))
        .collect();
    for (i, origin) in producers {
        let mut members: Vec<(Name, Option<String>)> = reg
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
        let file = reg
            .entry(i)
            .map(|e| e.def.file.clone())
            .filter(|f| !f.as_os_str().is_empty());
        let mut cur = reg.entry(i).and_then(|e| e.current.clone());
        // Not served yet (a start): the version kept in its file, if it has one, is where
        // its serial goes on from — it is served as it is when it lists the same members.
        if cur.is_none()
            && let Some(f) = &file
        {
            cur = kept(&origin, f).map(Arc::new);
        }
        let listed: Option<Vec<(Name, Option<String>)>> = cur.as_ref().and_then(|z| {
            read(z).ok().map(|m| {
                m.into_values()
                    .map(|m| (m.zone, m.groups.into_iter().next()))
                    .collect()
            })
        });
        if listed.as_ref() == Some(&members) {
            if let Some(z) = cur
                && reg.entry(i).is_some_and(|e| e.current.is_none())
            {
                reg.install(i, z, std::time::Duration::ZERO);
            }
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
        match produce(&origin, serial, &members) {
            Ok(z) => {
                tracing::info!(catalog = %origin, serial, members = members.len(), "catalog written");
                reg.install(i, Arc::new(z), t.elapsed());
                if let Some(f) = &file {
                    let text = produce_text(&origin, serial, &members);
                    if let Err(e) = shield::files::write_atomic(f, text.as_bytes(), 0o644) {
                        // Served all the same; a restart before the next write starts its
                        // serial from the clock.
                        tracing::error!(catalog = %origin, file = %f.display(), "catalog not kept on disk: {e}");
                    }
                }
            }
            Err(e) => tracing::error!(catalog = %origin, "catalog not written: {e}"),
        }
    }
}

/// The produced catalog `origin` as its file `f` keeps it (none when absent or unreadable).
fn kept(origin: &Name, f: &std::path::Path) -> Option<Zone> {
    if !f.exists() {
        return None;
    }
    match zones::load_file(f, origin, &zones::ReadOptions::new(origin)) {
        Ok(l) => Some(l.zone),
        Err(e) => {
            tracing::warn!(catalog = %origin, file = %f.display(), "the catalog's file is not read back (its serial starts from the clock): {e}");
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cat(text: &str) -> Zone {
        let o: Name = "cat.example.".parse().unwrap();
        zones::load_bytes("t", text.to_string(), &o, &zones::ReadOptions::new(&o))
            .unwrap()
            .zone
    }

    const HEAD: &str = "$ORIGIN cat.example.\n$TTL 0\n@ SOA invalid. invalid. 1 3600 600 2147483646 0\n@ NS invalid.\n";

    #[test]
    fn reads_members_groups_and_coo_and_refuses_other_versions() {
        let z = cat(&format!(
            "{HEAD}version TXT \"2\"\nabc.zones PTR a.example.\ngroup.abc.zones TXT \"gold\"\n\
             def.zones PTR B.example.\ncoo.def.zones PTR other.cat.\nignored TXT \"x\"\n"
        ));
        let m = read(&z).unwrap();
        let a: Name = "a.example.".parse().unwrap();
        let b: Name = "b.example.".parse().unwrap();
        assert_eq!(m[&a].groups, vec!["gold".to_string()]);
        assert_eq!(m[&a].id, b"abc".to_vec());
        assert_eq!(m[&b].coo, Some("other.cat.".parse().unwrap()));
        let v1 = cat(&format!(
            "{HEAD}version TXT \"1\"\nabc.zones PTR a.example.\n"
        ));
        assert!(matches!(read(&v1), Err(CatalogError::Version(_))));
        let dup = cat(&format!(
            "{HEAD}version TXT \"2\"\nabc.zones PTR a.example.\nxyz.zones PTR a.example.\n"
        ));
        assert!(matches!(read(&dup), Err(CatalogError::Duplicate { .. })));
        // Two PTRs at one member node (or its coo): which is meant cannot be told.
        for two in [
            "abc.zones PTR a.example.\nabc.zones PTR b.example.\n",
            "abc.zones PTR a.example.\ncoo.abc.zones PTR x.cat.\ncoo.abc.zones PTR y.cat.\n",
        ] {
            let z = cat(&format!("{HEAD}version TXT \"2\"\n{two}"));
            assert!(
                matches!(read(&z), Err(CatalogError::TwoPtr { .. })),
                "{two}"
            );
        }
    }

    #[test]
    fn produced_catalogs_read_back_with_stable_ids() {
        let o: Name = "cat.example.".parse().unwrap();
        let members = vec![
            ("a.example.".parse().unwrap(), Some("gold".to_string())),
            ("b.example.".parse().unwrap(), None),
        ];
        let z = produce(&o, 7, &members).unwrap();
        assert_eq!(z.serial(), 7);
        let m = read(&z).unwrap();
        assert_eq!(m.len(), 2);
        let a: Name = "a.example.".parse().unwrap();
        assert_eq!(m[&a].id, unique_id(&a).into_bytes());
        let again = read(&produce(&o, 8, &members[..1]).unwrap()).unwrap();
        assert_eq!(again[&a].id, m[&a].id, "ids do not move when members go");
    }

    #[test]
    fn changes_add_remove_reset_and_honour_coo() {
        let me: Name = "cat.example.".parse().unwrap();
        let other: Name = "other.cat.".parse().unwrap();
        let mk = |z: &str, id: &str| {
            let n: Name = z.parse().unwrap();
            (
                n.clone(),
                Member {
                    zone: n,
                    id: id.as_bytes().to_vec(),
                    groups: vec![],
                    coo: None,
                },
            )
        };
        let old: BTreeMap<_, _> = [mk("a.", "1"), mk("b.", "2"), mk("c.", "3")].into();
        let new: BTreeMap<_, _> = [
            mk("a.", "1"),
            mk("b.", "9"),
            mk("d.", "4"),
            mk("e.", "5"),
            mk("f.", "6"),
        ]
        .into();
        let owner = |z: &Name| match z.to_string().as_str() {
            "e." => Some(Some("other.cat.".parse().unwrap())),
            "f." => Some(None),
            "d." => Some(Some("other.cat.".parse().unwrap())),
            _ => None,
        };
        // other.cat. hands d. over to us with its coo, not e.
        let coo = |c: &Name, z: &Name| {
            (c == &other && z.to_string() == "d.").then(|| "cat.example.".parse().unwrap())
        };
        let c = changes(&me, &old, &new, &owner, &coo);
        let names = |v: &[Member]| v.iter().map(|m| m.zone.to_string()).collect::<Vec<_>>();
        assert_eq!(names(&c.add), ["d."]);
        assert_eq!(names(&c.reset), ["b."]);
        assert_eq!(c.remove, vec!["c.".parse::<Name>().unwrap()]);
        assert_eq!(
            c.refused.iter().map(|n| n.to_string()).collect::<Vec<_>>(),
            ["e.", "f."]
        );
    }
}
