//! Reloads: the config's zone list, cookie secrets and rules file re-read, changed zones (or
//! one zone) loaded off the runtime's threads, a zone that fails keeping its last good
//! version and rules that do not compile keeping the running ones.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::PathBuf;
use std::sync::Arc;

use crate::catalog;
use crate::config::zone_list::{CatalogRole, StateZone, Templates, ZoneSpec, ZoneState};
use crate::config::{Config, ZoneConfig, ZoneSource};
use crate::defence;
use crate::state::State;
use crate::zone_registry::{self, Registry, ZoneDef};
use shield::control::Reply;

/// Reloads one zone or every changed zone (all with `force`); re-reads the zone list from
/// the config file when there is one. The service manager hears RELOADING=1, then READY=1.
pub async fn reload(shared: &Arc<State>, zone: Option<&str>, force: bool) -> Reply {
    shield::service::reloading();
    let r = reload_now(shared, zone, force).await;
    shield::service::ready(if r.ok {
        "serving (reloaded)"
    } else {
        "serving (the last reload failed in part; see ctl zones)"
    });
    r
}

async fn reload_now(shared: &Arc<State>, zone: Option<&str>, force: bool) -> Reply {
    let mut reg = shared.zones.lock().await;
    let mut rules_note: Option<(bool, String)> = None;
    if zone.is_none()
        && let Some(path) = &shared.config_path
    {
        match Config::load(path) {
            Ok(c) => {
                shared.xfr.set_policies(&c);
                // Members of consumed catalogs are not in the file: their policies stay, while
                // their catalog is still consumed (the registry drops the others' members).
                let consumed: std::collections::HashSet<zones::Name> = c
                    .zones
                    .iter()
                    .filter(|z| z.catalog == Some(CatalogRole::Consumer))
                    .filter_map(|z| zones::Name::parse(&z.origin, Some(&zones::Name::root())).ok())
                    .map(|n| n.to_lowercase())
                    .collect();
                let members = {
                    let mut st = shared.catalogs();
                    st.retain_catalogs(|cat| consumed.contains(cat));
                    st.member_configs()
                };
                shared.xfr.set_zone_policies(&members);
                reload_cookie_secrets(shared, &c);
                rules_note = reload_rules(shared, &c).await;
                // The config's own warnings, in the log and in the answer (with zones that
                // name a tenant while no rules file is configured: reload_rules says the rest).
                let mut warnings = c.warnings.clone();
                if c.rules.is_none() {
                    warnings.extend(c.unknown_tenants(None));
                }
                if !warnings.is_empty() {
                    let mut t = String::new();
                    for w in &warnings {
                        tracing::warn!("{w}");
                        let _ = writeln!(t, "warning: {w}");
                    }
                    rules_note = Some(match rules_note {
                        Some((ok, r)) => (ok, format!("{t}{r}")),
                        None => (true, t),
                    });
                }
                let rules = shared.defence.rules.as_ref().map(|r| r.current());
                let never = defence::policy::never_block(&c, rules.as_ref().map(|g| &***g));
                defence::policy::install(&shared.defence.blocks, &c, never);
                let n = sync_zone_list(&mut reg, &c);
                if n > 0 {
                    tracing::info!("zone list changed in {}", path.display());
                    crate::xfr::secondary::spawn_all(&shared.zones, &shared.xfr);
                }
                shared.set_config(c);
                read_all_catalogs(shared);
            }
            Err(e) => {
                return Reply::err(format!("config not reloaded, keeping the running one: {e}"));
            }
        }
    }
    let only = match zone {
        Some(z) => {
            let Ok(n) = zones::Name::parse(z, Some(&zones::Name::root())) else {
                return Reply::err(format!("bad zone name {z}"));
            };
            match reg.find(&n) {
                Some(i) => Some(i),
                None => return Reply::err(format!("zone {n} is not configured")),
            }
        }
        None => None,
    };
    let plan = crate::xfr::secondary::skip_missing(
        &shared.xfr,
        reg.plan(only, force),
        only.is_some() || force,
    );
    if plan.is_empty() {
        return match rules_note {
            Some((false, t)) => Reply::err(format!("no zone changed\n{t}")),
            Some((true, t)) => Reply::ok(format!("no zone changed\n{t}")),
            None => Reply::ok("no zone changed\n"),
        };
    }
    let results = tokio::task::spawn_blocking(move || zone_registry::load_all(plan))
        .await
        .unwrap_or_default();
    let many = results.len() > 100;
    let reports = reg.apply(results);
    if many {
        std::thread::spawn(zone_registry::release_freed_memory);
    }
    let mut text = String::new();
    let mut ok = true;
    for r in &reports {
        match &r.result {
            Ok((serial, records)) => {
                let _ = writeln!(
                    text,
                    "{}: loaded, serial {serial}, {records} records",
                    r.origin
                );
            }
            Err(e) => {
                ok = false;
                let _ = writeln!(text, "{}: FAILED, last good version kept:\n{e}", r.origin);
            }
        }
    }
    if let Some((rules_ok, t)) = rules_note {
        ok &= rules_ok;
        text.push_str(&t);
    }
    Reply { ok, text }
}

/// Re-reads the rules file of `c` (off the runtime's threads: compiling may take a while);
/// `(false, why)` when it was refused and the running rules stay.
async fn reload_rules(shared: &Arc<State>, c: &Config) -> Option<(bool, String)> {
    let rc = c.rules.as_ref()?;
    let Some(set) = shared.defence.rules.clone() else {
        return Some((
            false,
            "rules: [rules] was added to the config; restart dnsd to evaluate them\n".into(),
        ));
    };
    let file = rc.file.clone();
    // A tenant may gain rules: its zones leave the XDP fast path before the rules apply.
    if let Some(a) = &shared.xdp_answers {
        a.suspend();
    }
    let r = tokio::task::spawn_blocking(move || set.reload(&file).map_err(|e| e.to_string()))
        .await
        .unwrap_or_else(|e| Err(e.to_string()));
    Some(match r {
        Ok(()) => {
            shared.sync_global_lists();
            if let Some(a) = &shared.xdp_answers {
                a.resync();
            }
            let mut out = format!("rules: {} reloaded\n", rc.file.display());
            let p = shared.defence.rules.as_ref().map(|r| r.current());
            let has = p.as_ref().map(|p| move |t| p.has_rules(t));
            for w in c.unknown_tenants(has.as_ref().map(|h| h as &dyn Fn(u32) -> bool)) {
                tracing::warn!("{w}");
                out.push_str(&format!("warning: {w}\n"));
            }
            (true, out)
        }
        Err(e) => (
            false,
            format!("rules refused, the running rules keep serving: {e}\n"),
        ),
    })
}

/// Installs `c`'s shared cookie secrets when they changed (a shared secret is rotated by
/// hand: the old one moves to `previous_secret`). Other `[defence]` settings need a restart.
fn reload_cookie_secrets(shared: &State, c: &Config) {
    let Some(cookies) = &shared.defence.cookies else {
        return;
    };
    if let (Some(secret), previous) = defence::configured_secrets(&c.defence.cookies)
        && cookies.set(secret, previous)
    {
        tracing::info!("cookie secrets changed by the config");
    }
}

/// Adds zones new in `c` and drops zones no longer in it; returns how many changed. Zones
/// that stay keep their slot and served version.
fn sync_zone_list(reg: &mut Registry, c: &Config) -> usize {
    reg.rrsig_warn_days = c.dnssec.rrsig_warn_days;
    let r = reg.sync(zone_list(c));
    let n = r.added + r.removed + r.changed;
    if n > 0 {
        tracing::info!(
            added = r.added,
            removed = r.removed,
            changed = r.changed,
            "zone list synced"
        );
        reg.publish();
    }
    n
}

/// The zones of a config as the registry keeps them.
pub fn zone_list(cfg: &Config) -> Vec<ZoneDef> {
    cfg.zones
        .iter()
        .filter_map(|z| {
            zones::Name::parse(&z.origin, Some(&zones::Name::root()))
                .ok()
                .map(|n| zone_def(cfg, z, n))
        })
        .collect()
}

/// What the registry keeps of zone `z` (named `origin`).
fn zone_def(cfg: &Config, z: &ZoneConfig, origin: zones::Name) -> ZoneDef {
    ZoneDef {
        origin,
        file: z.file.clone(),
        serve: serve_options(cfg, z),
        produced: z.catalog == Some(CatalogRole::Producer),
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
    }
}

/// What the query path reads of zone `z`'s settings.
fn serve_options(cfg: &Config, z: &ZoneConfig) -> crate::served_zones::ServeOptions {
    crate::served_zones::ServeOptions {
        cookies: z.cookies.unwrap_or(cfg.defence.cookies.policy),
        tenant: z.tenant,
        xdp_answers: z.xdp_answers == crate::config::XdpAnswers::All,
        xdp_hot: z.xdp_answers == crate::config::XdpAnswers::Hot,
    }
}

/// The config in force and its zone state file, for `ctl zone add` and `zone remove`.
fn state_config(shared: &State) -> Result<(Arc<Config>, PathBuf), String> {
    let c = shared.config();
    let Some(st) = c.server.zone_state.clone() else {
        return Err(match &shared.config_path {
            Some(p) => format!(
                "{}: [server] zone_state is not set: zones added at run time would not survive a restart",
                p.display()
            ),
            None => {
                "zones are added at run time only with a config file that sets [server] zone_state"
                    .into()
            }
        });
    };
    Ok((c, st))
}

/// `ctl zone add ORIGIN FILE [--template T]`: loads the zone, keeps it in the zone state
/// file and serves it; no other zone is touched. A zone that does not load is not added.
pub async fn zone_add(
    shared: &Arc<State>,
    origin: &str,
    file: &str,
    template: Option<&str>,
) -> Reply {
    let (c, state_path) = match state_config(shared) {
        Ok(x) => x,
        Err(e) => return Reply::err(format!("{e}\n")),
    };
    let Ok(n) = zones::Name::parse(origin, Some(&zones::Name::root())) else {
        return Reply::err(format!("bad zone name {origin}\n"));
    };
    let file = PathBuf::from(file);
    if file.is_relative() {
        return Reply::err(format!(
            "{}: give the zone file's absolute path\n",
            file.display()
        ));
    }
    let mut reg = shared.zones.lock().await;
    if reg.find(&n).is_some() {
        return Reply::err(format!("zone {n} is already served\n"));
    }
    let spec = ZoneSpec {
        file: Some(file.clone()),
        template: template.map(str::to_string),
        ..Default::default()
    };
    let zc = match Templates::new(&c)
        .and_then(|t| t.resolve(&n.to_string(), &spec, ZoneSource::State, "zone add".into()))
    {
        Ok(z) => z,
        Err((k, m)) => return Reply::err(format!("{k}: {m}\n")),
    };
    // A secondary's file comes from its primaries: it need not exist yet.
    let load = zc.primaries.is_empty() || file.exists();
    let sign = match zc.dnssec_policy.as_deref() {
        None => None,
        Some(p) => match c.policy(p) {
            Some(policy) => Some(crate::signing::SignJob {
                policy: policy.clone(),
                prev: None,
                keep_unsigned: !zc.primaries.is_empty(),
            }),
            None => return Reply::err(format!("{n}: not added: no [[dnssec_policy]] named {p}\n")),
        },
    };
    let loaded = if load {
        let planned = zone_registry::Planned {
            slot: 0,
            origin: n.clone(),
            file: file.clone(),
            sign,
        };
        let r = tokio::task::spawn_blocking(move || zone_registry::load_planned(&planned))
            .await
            .unwrap_or_else(|e| Err(e.to_string()));
        match r {
            Ok(l) => Some(l),
            Err(e) => {
                return Reply::err(format!("{n}: not added, the zone does not load:\n{e}\n"));
            }
        }
    } else {
        None
    };
    let mut st = match ZoneState::read(&state_path) {
        Ok(s) => s,
        Err(e) => return Reply::err(format!("{e}\n")),
    };
    st.zone.push(StateZone {
        origin: n.to_string(),
        file: file.clone(),
        template: template.map(str::to_string),
    });
    if let Err(e) = st.write(&state_path) {
        return Reply::err(format!(
            "{n}: not added, the zone state was not written: {e}\n"
        ));
    }
    shared.xfr.set_zone_policy(&zc);
    let i = reg.add(zone_def(&c, &zc, n.clone()));
    let text = match loaded {
        Some(l) => {
            let line = format!(
                "{n}: added, serial {}, {} records\n",
                l.loaded.zone.serial(),
                l.loaded.zone.record_count()
            );
            reg.apply(vec![(i, Ok(l))]);
            line
        }
        None => {
            reg.publish();
            format!("{n}: added, waiting for its first transfer\n")
        }
    };
    reg.produce_catalogs();
    drop(reg);
    if !zc.primaries.is_empty() {
        crate::xfr::secondary::spawn_all(&shared.zones, &shared.xfr);
    }
    tracing::info!(zone = %n, "zone added at run time");
    Reply::ok(text)
}

/// `ctl zone remove ORIGIN`: stops serving a zone added at run time and drops it from the
/// zone state file; a zone the config file defines is refused (edit the file, then reload).
pub async fn zone_remove(shared: &Arc<State>, origin: &str) -> Reply {
    let Ok(n) = zones::Name::parse(origin, Some(&zones::Name::root())) else {
        return Reply::err(format!("bad zone name {origin}\n"));
    };
    {
        let reg = shared.zones.lock().await;
        if let Some(c) = reg
            .find(&n)
            .and_then(|i| reg.entry(i))
            .and_then(|e| e.def.from_catalog.as_ref())
        {
            return Reply::err(format!(
                "zone {n} is a member of the catalog {c}: it goes when the catalog stops listing it\n"
            ));
        }
    }
    let (_, state_path) = match state_config(shared) {
        Ok(x) => x,
        Err(e) => return Reply::err(format!("{e}\n")),
    };
    let lower = n.to_lowercase();
    let mut reg = shared.zones.lock().await;
    let mut st = match ZoneState::read(&state_path) {
        Ok(s) => s,
        Err(e) => return Reply::err(format!("{e}\n")),
    };
    let before = st.zone.len();
    st.zone.retain(|z| {
        zones::Name::parse(&z.origin, Some(&zones::Name::root()))
            .map_or(true, |o| o.to_lowercase() != lower)
    });
    let Some(i) = reg.find(&n) else {
        return Reply::err(format!("zone {n} is not served\n"));
    };
    if st.zone.len() == before {
        return Reply::err(format!(
            "zone {n} is defined by the config, not added at run time: remove it there, then reload\n"
        ));
    }
    if let Err(e) = st.write(&state_path) {
        return Reply::err(format!(
            "{n}: not removed, the zone state was not written: {e}\n"
        ));
    }
    let origin = reg
        .entry(i)
        .map(|e| e.def.origin.clone())
        .unwrap_or(n.clone());
    reg.remove(&origin);
    reg.publish();
    reg.produce_catalogs();
    drop(reg);
    shared.xfr.remove_zone(lower.as_wire());
    crate::xfr::secondary::spawn_all(&shared.zones, &shared.xfr);
    tracing::info!(zone = %n, "zone removed at run time");
    Reply::ok(format!("{n}: removed\n"))
}

/// Reads the consumed catalogs as they change, adding, removing and resetting their members.
pub async fn run_catalogs(shared: Arc<State>) {
    loop {
        shared.catalog_queue.notified().await;
        for cat in shared.catalog_queue.take() {
            consume(&shared, &cat).await;
        }
    }
}

/// Queues every consumed catalog to be read (at start, after a config reload).
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
/// names (else the catalog's `catalog_template`), the catalog's primaries and key unless the
/// template gives others, its file from the template's pattern or beside the catalog's.
fn member_config(
    cfg: &Config,
    cp: &crate::xfr::ZonePolicy,
    m: &catalog::Member,
) -> Result<ZoneConfig, String> {
    let t = Templates::new(cfg).map_err(|(k, m)| format!("{k}: {m}"))?;
    let template = m
        .groups
        .iter()
        .find(|g| t.has(g))
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
        dir.join(format!("{}.zone", zones::name::file_stem(&origin)))
    });
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
    if zc.primaries.is_empty() {
        zc.primaries = cp.primaries.iter().map(|a| a.to_string()).collect();
        if zc.tsig.is_none() {
            zc.tsig = cp.tsig_name.clone();
        }
    }
    Ok(zc)
}

/// Reads the consumed catalog `cat` and makes its members what it lists.
async fn consume(shared: &Arc<State>, cat: &zones::Name) {
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
        let first: Vec<String> = ch.refused.iter().take(5).map(|z| z.to_string()).collect();
        tracing::warn!(
            catalog = %cat,
            members = ch.refused.len(),
            "members not taken: another catalog or the config holds them and no coo hands them over (first: {})",
            first.join(", ")
        );
    }
    let ours = |reg: &Registry, z: &zones::Name| {
        reg.find(z)
            .and_then(|i| reg.entry(i))
            .is_some_and(|e| e.def.from_catalog.as_ref() == Some(cat))
    };
    let mut gone = Vec::new();
    for z in &ch.remove {
        if ours(&reg, z) {
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
    for m in ch.add.iter().chain(&ch.reset).chain(&ch.regroup) {
        let mut zc = match member_config(&cfg, &cp, m) {
            Ok(z) => z,
            Err(e) => {
                tracing::error!(catalog = %cat, zone = %m.zone, "member not served: {e}");
                continue;
            }
        };
        // At or below a zone the catalog does not own: it would answer for that zone's
        // names (the longest match), from the catalog's primary's data.
        let above = std::iter::successors(m.zone.parent(), |n| n.parent()).find(|n| {
            reg.find(n)
                .and_then(|i| reg.entry(i))
                .is_some_and(|e| e.def.from_catalog.as_ref() != Some(cat))
        });
        if let Some(owner) = above {
            catalog::refused(catalog::Refusal::BelowOtherZone, 1);
            shield::limited!(
                10,
                error!(catalog = %cat, zone = %m.zone, other = %owner, "member refused: at or below a zone the catalog does not own")
            );
            refused_here.push(m.zone.clone());
            continue;
        }
        if let Some(owner) = others_files.get(&zc.file).filter(|o| **o != m.zone) {
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
        let mut def = zone_def(&cfg, &zc, m.zone.clone());
        def.from_catalog = Some(cat.clone());
        let i = reg.add(def);
        if reg.entry(i).is_some_and(|e| e.current.is_none()) && zc.file.exists() {
            plan.push(zone_registry::Planned::unsigned(
                i,
                m.zone.clone(),
                zc.file.clone(),
            ));
        }
        configs.push(zc);
    }
    shared.xfr.set_zone_policies(&configs);
    for z in &gone {
        shared.xfr.remove_zone(z.as_wire());
    }
    if !plan.is_empty() {
        let results = tokio::task::spawn_blocking(move || zone_registry::load_all(plan))
            .await
            .unwrap_or_default();
        reg.apply(results);
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
    let (a, r, s) = (ch.add.len(), gone.len(), ch.reset.len());
    if a + r + s + ch.regroup.len() > 0 {
        tracing::info!(catalog = %cat, added = a, removed = r, reset = s, regrouped = ch.regroup.len(), "catalog members changed");
    }
}

/// Signs again, in the background, each signed zone whose signatures near their refresh or
/// whose keys reach a new state: from the version served, keeping every signature that
/// still holds. A reload meanwhile wins; a failure is retried a minute later.
pub async fn resign_loop(shared: Arc<State>) {
    let mut tick = tokio::time::interval(std::time::Duration::from_secs(1));
    let mut n: u64 = 0;
    loop {
        tick.tick().await;
        let now = crate::signing::now();
        if n.is_multiple_of(60) {
            shared.zones.lock().await.check_expiry(now as u32);
        }
        n += 1;
        let due = shared.zones.lock().await.resign_due(now);
        for (i, from, job) in due {
            if let Err(e) = resign(&shared, i, from.clone(), job).await {
                tracing::error!(zone = %from.apex(), "zone not signed again, retrying in 60 s: {e}");
                shared.zones.lock().await.defer_resign(i, now + 60);
            }
        }
    }
}

/// Signs zone `i` again from `from`, the version served, and serves the result (unless a
/// reload replaced `from` meanwhile). Says what it did.
pub async fn resign(
    shared: &Arc<State>,
    i: usize,
    from: Arc<zones::Zone>,
    job: crate::signing::SignJob,
) -> Result<String, String> {
    let now = crate::signing::now();
    let z = from.clone();
    let s = tokio::task::spawn_blocking(move || crate::signing::sign(&z, &job, now))
        .await
        .map_err(|e| e.to_string())?
        .map_err(|e| e.to_string())?;
    for w in s.warnings.iter().take(20) {
        tracing::warn!(zone = %from.apex(), "signed zone: {w}");
    }
    let (made, kept, serial) = (s.made, s.kept, s.zone.serial());
    let mut reg = shared.zones.lock().await;
    reg.stats.count_signatures(made, kept);
    if !reg.install_resigned(i, &from, s) {
        return Ok(format!(
            "{}: reloaded meanwhile, not replaced\n",
            from.apex()
        ));
    }
    tracing::info!(zone = %from.apex(), serial, made, kept, "zone signed again");
    Ok(format!(
        "{}: signed, serial {serial}, {made} signatures made, {kept} kept\n",
        from.apex()
    ))
}
