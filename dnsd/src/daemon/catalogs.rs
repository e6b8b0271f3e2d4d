//! Consumed catalog zones at run time: each change of a catalog dnsd consumes (RFC 9432)
//! adds, removes, resets and regroups its members as secondary zones. What a member may be
//! (its file, its place, its tenant) is [`crate::zone::catalog`]'s to say.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use crate::config::zone_list::{CatalogRole, Templates, ZoneSpec};
use crate::config::{Config, ZoneConfig, ZoneSource};
use crate::daemon::state::State;
use crate::zone::catalog;
use crate::zone::registry;

/// Reads the consumed catalogs as they change, adding, removing and resetting their members.
pub async fn run_catalogs(shared: Arc<State>) {
    loop {
        shared.catalog_queue.notified().await;
        for cat in shared.catalog_queue.take() {
            consume(&shared, &cat, true, None).await;
        }
    }
}

/// Reads every consumed catalog now, then writes the catalogs dnsd produces once (at start:
/// they list the members every consumed catalog's copy on disk holds, never fewer for a
/// moment — a consumer of ours purges what a version leaves out).
///
/// A member two catalogs list goes to the catalog that held it before the restart (each
/// catalog's members are kept beside its copy, [`held_path`]): each catalog first takes back
/// what it held, then the rest, catalogs in name order. Read in the order of a hash map, a
/// restart gave a member (or a name above or below one) to whichever catalog came first: a
/// tenant's catalog listing another's members took them over at one restart in three.
pub async fn consume_all(shared: &Arc<State>) {
    let mut cats: Vec<(zones::Name, std::path::PathBuf)> = shared
        .xfr
        .policies()
        .all()
        .filter(|p| p.catalog == Some(CatalogRole::Consumer))
        .map(|p| (p.origin.clone(), p.file.clone()))
        .collect();
    cats.sort();
    for (cat, file) in &cats {
        let held = read_held(file);
        if !held.is_empty() {
            consume(shared, cat, false, Some(&held)).await;
        }
    }
    for (cat, _) in &cats {
        consume(shared, cat, false, None).await;
    }
    crate::zone::catalog::produce_all(&mut *shared.zones.lock().await);
}

/// Where the members a consumed catalog holds are kept (beside its copy, `FILE.members`):
/// after a restart each catalog takes back its own first.
pub fn held_path(catalog_file: &std::path::Path) -> std::path::PathBuf {
    let mut p = catalog_file.as_os_str().to_owned();
    p.push(".members");
    p.into()
}

/// The members kept for the catalog whose copy is `file` (lower case; none when unreadable).
fn read_held(file: &std::path::Path) -> std::collections::HashSet<zones::Name> {
    let Ok(text) = std::fs::read_to_string(held_path(file)) else {
        return Default::default();
    };
    text.lines()
        .filter_map(|l| zones::Name::parse(l.trim(), Some(&zones::Name::root())).ok())
        .map(|n| n.to_lowercase())
        .collect()
}

/// Keeps the members `cat` holds beside its copy `file` (written only when they changed).
fn write_held<'a>(
    cat: &zones::Name,
    file: &std::path::Path,
    held: impl Iterator<Item = &'a zones::Name>,
) {
    let mut text = String::new();
    for z in held {
        text.push_str(&z.to_lowercase().to_string());
        text.push('\n');
    }
    let path = held_path(file);
    if std::fs::read_to_string(&path).is_ok_and(|old| old == text) {
        return;
    }
    let mut tmp = path.as_os_str().to_owned();
    tmp.push(".tmp");
    let tmp = std::path::PathBuf::from(tmp);
    let r = std::fs::write(&tmp, &text).and_then(|()| std::fs::rename(&tmp, &path));
    if let Err(e) = r {
        let _ = std::fs::remove_file(&tmp);
        shield::limited!(
            1,
            warn!(catalog = %cat, file = %path.display(), "the catalog's members could not be kept (after a restart another catalog listing them may take them): {e}")
        );
    }
}

/// Queues every consumed catalog to be read (after a config reload).
pub fn read_all_catalogs(shared: &State) {
    let pol = shared.xfr.policies();
    for p in pol
        .all()
        .filter(|p| p.catalog == Some(CatalogRole::Consumer))
    {
        shared.catalog_queue.push(&p.origin);
    }
}

/// The settings of member `m` of the consumed catalog `cp`: the template its first group
/// names among the catalog's `catalog_groups` (else the catalog's `catalog_template`: the
/// catalog's primary picks among what the operator offered it, never any template of the
/// config, whose primaries and keys may be another tenant's), the catalog's primaries and key
/// unless the template gives others, its file from the template's pattern or beside the
/// catalog's.
fn member_config(
    cfg: &Config,
    cp: &crate::xfr::ZonePolicy,
    m: &catalog::Member,
) -> Result<ZoneConfig, String> {
    let t = Templates::new(cfg).map_err(|(k, m)| format!("{k}: {m}"))?;
    let template = m
        .groups
        .iter()
        .find(|g| cp.catalog_groups.contains(g) && t.has(g))
        .or_else(|| {
            // A group naming a template the catalog is not offered: said (catalogs that
            // relied on any template being followed need catalog_groups now).
            if let Some(g) = m.groups.iter().find(|g| t.has(g)) {
                shield::limited!(
                    1,
                    warn!(catalog = %cp.origin, zone = %m.zone, group = %g, "a member's group names a template its catalog's catalog_groups does not offer: not followed")
                );
            }
            None
        })
        .cloned()
        .or_else(|| cp.catalog_template.clone());
    let origin = m.zone.to_string();
    let pattern = t
        .get(template.as_deref())
        .and_then(|t| t.file.as_ref())
        .is_some();
    let file = (!pattern).then(|| {
        let dir = cp.file.parent().unwrap_or(std::path::Path::new("."));
        // The member's name comes from the catalog's primary: one file-name component,
        // never a path of its choosing.
        let stem = zones::name::file_stem(&origin);
        dir.join(format!("{}.zone", zones::name::fit_stem(&stem, 5)))
    });
    let named = template.clone();
    let spec = ZoneSpec {
        template,
        file,
        ..Default::default()
    };
    let mut zc = t
        .resolve(
            &origin,
            &spec,
            ZoneSource::Catalog,
            format!("catalog {} member {origin}", cp.origin),
        )
        .map_err(|(k, m)| format!("{k}: {m}"))?;
    if zc.catalog.is_some() {
        // (The config refuses such templates; this holds whatever a reload made of them.)
        return Err(format!(
            "template {} sets catalog: a catalog's member cannot be a catalog",
            named.as_deref().unwrap_or("default")
        ));
    }
    zc.member_of = Some(cp.origin.to_string().to_ascii_lowercase());
    if zc.primaries.is_empty() {
        zc.primaries = cp.primaries.iter().map(|a| a.to_string()).collect();
        if zc.tsig.is_none() {
            zc.tsig = cp.tsig_name.clone();
        }
        if zc.transfer_tls.is_none() {
            zc.transfer_tls = cp.transfer_tls.clone();
        }
    }
    Ok(zc)
}

/// How many zones name each file, by name and by the file itself (another path to it).
struct FileUse {
    by_name: std::collections::HashMap<std::path::PathBuf, usize>,
    by_id: std::collections::HashMap<(u64, u64), usize>,
}

fn file_id(p: &std::path::Path) -> Option<(u64, u64)> {
    use std::os::unix::fs::MetadataExt as _;
    std::fs::metadata(p).ok().map(|m| (m.dev(), m.ino()))
}

impl FileUse {
    fn of(reg: &registry::Registry) -> FileUse {
        let mut u = FileUse {
            by_name: Default::default(),
            by_id: Default::default(),
        };
        for e in reg.entries() {
            *u.by_name.entry(e.def.file.clone()).or_default() += 1;
            if let Some(id) = file_id(&e.def.file) {
                *u.by_id.entry(id).or_default() += 1;
            }
        }
        u
    }

    /// True when another zone reads `file` too: a copy it reads is never deleted with a
    /// member.
    fn shared(&self, file: &std::path::Path) -> bool {
        self.by_name.get(file).is_some_and(|&n| n > 1)
            || file_id(file).is_some_and(|id| self.by_id.get(&id).is_some_and(|&n| n > 1))
    }
}

/// Reads the consumed catalog `cat` and makes its members what it lists (of `only` alone,
/// when given: what it held before a restart); then, when `produce`, writes the catalogs
/// dnsd produces again.
async fn consume(
    shared: &Arc<State>,
    cat: &zones::Name,
    produce: bool,
    only: Option<&std::collections::HashSet<zones::Name>>,
) {
    let cp = shared
        .xfr
        .policies()
        .zone(cat.as_wire())
        .filter(|p| p.catalog == Some(CatalogRole::Consumer))
        .cloned();
    let Some(cp) = cp else {
        // No longer a consumed catalog: the reload that made it so dropped its members.
        shared.catalogs().retain_catalogs(|c| c != cat);
        return;
    };
    let cfg = shared.config();
    let mut reg = shared.zones.lock().await;
    let Some(z) = reg.find(cat).and_then(|i| reg.entry(i)?.current.clone()) else {
        return;
    };
    let mut new = match catalog::read(&z) {
        Ok(m) => m,
        Err(e) => {
            tracing::error!("{e}: its members stay as they were");
            return;
        }
    };
    if let Some(only) = only {
        new.retain(|z, _| only.contains(&z.to_lowercase()));
    }
    // A bound on what one catalog may make us serve: the first members in canonical order.
    if new.len() > cp.catalog_max_members {
        let over = new.len() - cp.catalog_max_members;
        let keep: BTreeMap<zones::Name, catalog::Member> =
            new.into_iter().take(cp.catalog_max_members).collect();
        new = keep;
        catalog::refused(catalog::Refusal::OverMax, over as u64);
        tracing::error!(catalog = %cat, over, max = cp.catalog_max_members, "catalog lists more members than catalog_max_members: the rest refused");
    }
    let ch = {
        let st = shared.catalogs();
        let empty = BTreeMap::new();
        let old = st.lists.get(cat).unwrap_or(&empty);
        let owner = |z: &zones::Name| {
            reg.find(z)
                .and_then(|i| reg.entry(i))
                .map(|e| e.def.from_catalog.clone())
        };
        let coo_of = |c: &zones::Name, z: &zones::Name| {
            st.lists
                .get(c)
                .and_then(|l| l.get(z))
                .and_then(|m| m.coo.clone())
        };
        catalog::changes(cat, old, &new, &owner, &coo_of)
    };
    if !ch.refused.is_empty() {
        catalog::refused(catalog::Refusal::HeldElsewhere, ch.refused.len() as u64);
        let first: Vec<String> = ch.refused.iter().take(5).map(|z| z.to_string()).collect();
        tracing::warn!(
            catalog = %cat,
            members = ch.refused.len(),
            "members not taken: another catalog or the config holds them and no coo hands them over (first: {})",
            first.join(", ")
        );
    }
    let ours = |reg: &registry::Registry, z: &zones::Name| {
        reg.find(z)
            .and_then(|i| reg.entry(i))
            .is_some_and(|e| e.def.from_catalog.as_ref() == Some(cat))
    };
    let mut gone = Vec::new();
    let mut uses: Option<FileUse> = None;
    for z in &ch.remove {
        if ours(&reg, z) {
            // Its copy goes with it, as Knot purges a removed member: a catalog that lists
            // and drops names by the thousand must not fill the disk, and a name listed
            // again starts afresh rather than from a stale copy.
            if let Some(f) = reg
                .find(z)
                .and_then(|i| reg.entry(i))
                .map(|e| e.def.file.clone())
                && !uses.get_or_insert_with(|| FileUse::of(&reg)).shared(&f)
            {
                let _ = std::fs::remove_file(f);
            }
            forget_signing(&reg, z);
            reg.remove(z);
            gone.push(z.clone());
        }
    }
    // A reset member's data goes: it is transferred afresh under its new id.
    for m in &ch.reset {
        if ours(&reg, &m.zone) {
            if let Some(f) = reg
                .find(&m.zone)
                .and_then(|i| reg.entry(i))
                .map(|e| e.def.file.clone())
            {
                let _ = std::fs::remove_file(f);
            }
            forget_signing(&reg, &m.zone);
            reg.remove(&m.zone);
            shared.xfr.forget(m.zone.as_wire());
        }
    }
    let mut configs = Vec::new();
    let mut plan = Vec::new();
    // Files of every zone this catalog does not own: a member never writes over one.
    let others_files: std::collections::HashMap<std::path::PathBuf, zones::Name> = reg
        .entries()
        .filter(|e| e.def.from_catalog.as_ref() != Some(cat))
        .map(|e| (e.def.file.clone(), e.def.origin.clone()))
        .collect();
    let mut refused_here: Vec<zones::Name> = Vec::new();
    let above = above_others(&reg, cat);
    // Under a config other than the last one's, every member of ours takes its settings
    // again (a template's policy changed by a reload applied only after a restart).
    let resettle: Vec<catalog::Member> = {
        let st = shared.catalogs();
        if st
            .settled_with
            .get(cat)
            .is_some_and(|c| Arc::ptr_eq(c, &cfg))
        {
            Vec::new()
        } else {
            let changing: std::collections::HashSet<&zones::Name> = ch
                .add
                .iter()
                .chain(&ch.reset)
                .chain(&ch.regroup)
                .map(|m| &m.zone)
                .collect();
            new.values()
                .filter(|m| !changing.contains(&m.zone) && ours(&reg, &m.zone))
                .cloned()
                .collect()
        }
    };
    // Those past the changes are the members given their settings again.
    let changed = ch.add.len() + ch.reset.len() + ch.regroup.len();
    for (n, m) in ch
        .add
        .iter()
        .chain(&ch.reset)
        .chain(&ch.regroup)
        .chain(&resettle)
        .enumerate()
    {
        let resettling = n >= changed;
        let mut zc = match member_config(&cfg, &cp, m) {
            Ok(z) => z,
            Err(e) => {
                tracing::error!(catalog = %cat, zone = %m.zone, "member not served: {e}");
                if !resettling {
                    refused_here.push(m.zone.clone());
                }
                continue;
            }
        };
        // Where it would answer for zones the catalog does not own.
        if let Some((why, other)) = conflict(&reg, cat, &m.zone, &above) {
            if resettling {
                // Served already: kept as it is (a config zone that meets it evicts it).
                continue;
            }
            catalog::refused(why, 1);
            shield::limited!(
                10,
                error!(catalog = %cat, zone = %m.zone, other = %other, "member refused: {}", why.text())
            );
            refused_here.push(m.zone.clone());
            continue;
        }
        if let Some(owner) = others_files.get(&zc.file).filter(|o| **o != m.zone) {
            if resettling {
                continue;
            }
            catalog::refused(catalog::Refusal::FileTaken, 1);
            shield::limited!(
                10,
                error!(catalog = %cat, zone = %m.zone, other = %owner, file = %zc.file.display(), "member refused: its file is another zone's")
            );
            refused_here.push(m.zone.clone());
            continue;
        }
        // A group picks a template, never a tenant: the members are the catalog's tenant's.
        if zc.tenant != cp.tenant {
            catalog::refused(catalog::Refusal::Tenant, 1);
            shield::limited!(
                10,
                warn!(catalog = %cat, zone = %m.zone, template_tenant = zc.tenant, tenant = cp.tenant, "member's template names another tenant: the catalog's own is kept")
            );
            zc.tenant = cp.tenant;
        }
        // Taken over from another catalog (its coo names this one): the zone keeps its slot
        // and the data it serves; only its settings change.
        let mut def = registry::ZoneDef::from_config(&cfg, &zc, m.zone.clone());
        def.from_catalog = Some(cat.clone());
        let signing_was = reg
            .find(&m.zone)
            .and_then(|i| reg.entry(i))
            .map(|e| e.def.signing.clone());
        let i = reg.add(def);
        // New, or signed under another policy than it is (its group or template changed):
        // loaded and signed now, not at its next transfer.
        let load = reg.entry(i).is_some_and(|e| {
            e.current.is_none() || signing_was.as_ref().is_some_and(|s| *s != e.def.signing)
        });
        if load && zc.file.exists() {
            // A member is a secondary: its copy is read as a transfer is taken, and signed
            // when its template signs (served unsigned, it lost its keys until a transfer).
            plan.extend(
                reg.plan(Some(i), true)
                    .into_iter()
                    .map(|p| registry::Planned {
                        secondary: true,
                        ..p
                    }),
            );
        }
        configs.push(zc);
    }
    shared.xfr.set_zone_policies(&configs);
    for z in &gone {
        shared.xfr.remove_zone(z.as_wire());
    }
    if !plan.is_empty() {
        let results = tokio::task::spawn_blocking(move || crate::zone::load::load_all(plan))
            .await
            .unwrap_or_default();
        reg.apply(results);
    }
    // The catalogs dnsd produces list what the members now are.
    if produce {
        crate::zone::catalog::produce_all(&mut reg);
    }
    reg.publish();
    drop(reg);
    // Members refused now are looked at again on the next read (a coo may hand them over).
    for z in ch.refused.iter().chain(&refused_here) {
        new.remove(z);
    }
    let coos = |l: &BTreeMap<zones::Name, catalog::Member>| {
        l.values()
            .filter_map(|m| m.coo.clone().map(|c| (m.zone.clone(), c)))
            .collect::<Vec<_>>()
    };
    // Kept on disk before the catalogs' state is locked: no file write under that lock.
    write_held(cat, &cp.file, new.keys());
    let handed_over = {
        let mut st = shared.catalogs();
        let before = st.lists.get(cat).map(coos).unwrap_or_default();
        for z in &gone {
            st.members.remove(z);
        }
        for zc in configs {
            if let Ok(n) = zones::Name::parse(&zc.origin, Some(&zones::Name::root())) {
                st.members.insert(n.to_lowercase(), zc);
            }
        }
        let after = coos(&new);
        st.lists.insert(cat.clone(), new);
        st.settled_with.insert(cat.clone(), cfg.clone());
        after != before
    };
    // A member handed over (RFC 9432 §5.6): the catalog it goes to is read again.
    if handed_over {
        let pol = shared.xfr.policies();
        for p in pol.all() {
            if p.catalog == Some(CatalogRole::Consumer) && &p.origin != cat {
                shared.catalog_queue.push(&p.origin);
            }
        }
    }
    crate::xfr::secondary::spawn_all(&shared.zones, &shared.xfr);
    // Members new, reset or handed over ask their primaries now, not at their refresh timer.
    for m in ch.add.iter().chain(&ch.reset) {
        shared
            .xfr
            .trigger(m.zone.as_wire(), crate::xfr::Trigger { reply: None });
    }
    // Members refused here are no additions, resets or regroupings (they were counted as
    // such, at every read).
    let refused: std::collections::HashSet<&zones::Name> = refused_here.iter().collect();
    let taken = |l: &[catalog::Member]| l.iter().filter(|m| !refused.contains(&m.zone)).count();
    let (a, r, s, g) = (
        taken(&ch.add),
        gone.len(),
        taken(&ch.reset),
        taken(&ch.regroup),
    );
    if a + r + s + g > 0 {
        tracing::info!(catalog = %cat, added = a, removed = r, reset = s, regrouped = g, refused = refused_here.len() + ch.refused.len(), "catalog members changed");
    }
}

/// Deletes what dnsd kept to sign member `z` (its keys, serial and signed copy), as Knot
/// purges a member that leaves its catalog or is reset (RFC 9432 §5.4): a name listed again —
/// perhaps for another tenant — starts with keys of its own, and a catalog that lists and
/// drops names by the thousand does not fill the key directory.
fn forget_signing(reg: &registry::Registry, z: &zones::Name) {
    let Some(p) = reg
        .find(z)
        .and_then(|i| reg.entry(i))
        .and_then(|e| e.def.signing.clone())
    else {
        return;
    };
    let dir = crate::signing::keys::zone_dir(&p.key_dir, &z.to_string());
    match std::fs::remove_dir_all(&dir) {
        Ok(()) => {
            tracing::info!(zone = %z, dir = %dir.display(), "the member's keys deleted with it")
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => {
            tracing::warn!(zone = %z, dir = %dir.display(), "the member's keys could not be deleted: {e}")
        }
    }
}

/// Proper ancestors of the zones catalog `cat` does not own (configured, added at run time,
/// another catalog's — of its tenant or another), each with one such zone: a member there
/// would give their parent side (DS, delegation) and every name below them that no zone
/// holds, to whoever controls the catalog's primary.
fn above_others(reg: &registry::Registry, cat: &zones::Name) -> HashMap<zones::Name, zones::Name> {
    let mut out = HashMap::new();
    for e in reg.entries() {
        if e.def.from_catalog.as_ref() == Some(cat) {
            continue;
        }
        let zone = e.def.origin.to_lowercase();
        for a in std::iter::successors(zone.parent(), |n| n.parent()) {
            if out.contains_key(&a) {
                break;
            }
            out.insert(a, zone.clone());
        }
    }
    out
}

/// Why member `z` of catalog `cat` may not be served beside the registry's other zones, with
/// the zone it would answer for: at or below a zone the catalog does not own (the longest
/// match gives it that zone's names), the root, or above a zone it does not own (`above`,
/// from [`above_others`]).
fn conflict(
    reg: &registry::Registry,
    cat: &zones::Name,
    z: &zones::Name,
    above: &HashMap<zones::Name, zones::Name>,
) -> Option<(catalog::Refusal, zones::Name)> {
    let below = std::iter::successors(z.parent(), |n| n.parent()).find(|n| {
        reg.find(n)
            .and_then(|i| reg.entry(i))
            .is_some_and(|e| e.def.from_catalog.as_ref() != Some(cat))
    });
    if let Some(owner) = below {
        return Some((catalog::Refusal::BelowOtherZone, owner));
    }
    if z.is_root() {
        return Some((catalog::Refusal::AboveOtherZone, zones::Name::root()));
    }
    above
        .get(&z.to_lowercase())
        .map(|o| (catalog::Refusal::AboveOtherZone, o.clone()))
}

/// Drops the members of consumed catalogs that the zones configured now take from them: a
/// member the config names (its zone replaces it: the caller has the registry take the
/// config's), at or below a zone its catalog does not own, the root, or above a zone it
/// does not own — a name the operator configured after a catalog listed it, or a zone added
/// below a member, is never answered from a catalog's primary. They leave the registry and
/// the catalogs' lists, so the next read of each catalog refuses them as new members (with
/// the cause in the log and the counters). The members dropped.
pub fn evict_conflicting(
    shared: &State,
    reg: &mut registry::Registry,
    configured: &std::collections::HashSet<zones::Name>,
) -> Vec<zones::Name> {
    let mut st = shared.catalogs();
    let mut gone = Vec::new();
    let cats: Vec<zones::Name> = st.lists.keys().cloned().collect();
    for cat in cats {
        let above = above_others(reg, &cat);
        let members: Vec<zones::Name> = st
            .lists
            .get(&cat)
            .map(|l| l.keys().cloned().collect())
            .unwrap_or_default();
        for z in members {
            let named = configured.contains(&z);
            let why = if named {
                None
            } else {
                // Only a member it holds: one refused before is not in the registry as its.
                let held = reg
                    .find(&z)
                    .and_then(|i| reg.entry(i))
                    .is_some_and(|e| e.def.from_catalog.as_ref() == Some(&cat));
                if !held {
                    continue;
                }
                conflict(reg, &cat, &z, &above)
            };
            if !named && why.is_none() {
                continue;
            }
            match &why {
                Some((why, other)) => {
                    tracing::error!(catalog = %cat, zone = %z, other = %other, "member dropped: {}", why.text())
                }
                None => {
                    tracing::warn!(catalog = %cat, zone = %z, "member dropped: the config names this zone, and its zone replaces the member")
                }
            }
            if !named {
                reg.remove(&z);
                shared.xfr.remove_zone(z.as_wire());
            }
            shared.xfr.forget(z.as_wire());
            if let Some(l) = st.lists.get_mut(&cat) {
                l.remove(&z);
            }
            st.members.remove(&z);
            gone.push(z);
        }
    }
    gone
}
