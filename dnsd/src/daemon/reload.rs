//! Reloads: the config's zone list, cookie secrets and rules file re-read, changed zones (or
//! one zone) loaded off the runtime's threads, a zone that fails keeping its last good
//! version and rules that do not compile keeping the running ones.

use std::fmt::Write as _;
use std::path::PathBuf;
use std::sync::Arc;

use crate::config::zone_list::{CatalogRole, StateZone, Templates, ZoneSpec, ZoneState};
use crate::config::{Config, ZoneSource};
use crate::daemon::state::State;
use crate::query::defence;
use crate::zone::registry::{self, Registry, ZoneDef};
use shield::control::Reply;

/// Reloads one zone or every changed zone (all with `force`); re-reads the zone list from
/// the config file when there is one. The service manager hears RELOADING=1, then READY=1.
pub async fn reload(shared: &Arc<State>, zone: Option<&str>, force: bool) -> Reply {
    shield::systemd::reloading();
    let r = reload_now(shared, zone, force).await;
    shield::systemd::ready(if r.ok {
        "serving (reloaded)"
    } else {
        "serving (the last reload failed in part; see ctl zones)"
    });
    r
}

async fn reload_now(shared: &Arc<State>, zone: Option<&str>, force: bool) -> Reply {
    // One reload at a time (its load runs with the registry free).
    let _reloading = RELOADING.lock().await;
    let mut reg = shared.zones.lock().await;
    let mut rules_note: Option<(bool, String)> = None;
    // What the zone list gained and lost (zones removed load nothing).
    let mut list_note = String::new();
    if zone.is_none()
        && let Some(path) = &shared.config_path
    {
        match Config::load(path)
            .map_err(|e| e.to_string())
            .and_then(|mut c| {
                shared.flags.apply(&mut c)?;
                Ok(c)
            }) {
            Ok(c) => {
                // The rules first: a reload whose rules are refused changes nothing (else a
                // new zone of a tenant whose rules were refused was served under none).
                let rules = match prepare_rules(shared, &c).await {
                    Ok(r) => r,
                    Err(e) => {
                        reg.stats
                            .config_refused
                            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                        let e = format!(
                            "reload refused, the running config, zones and rules keep serving: {e}"
                        );
                        tracing::error!("{e}");
                        return Reply::err(e);
                    }
                };
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
                rules_note = install_rules(shared, &c, rules);
                let mut tls_warning = None;
                if let Some(t) = &shared.tls
                    && let (Some(cert), Some(key)) = (&c.server.tls_cert, &c.server.tls_key)
                {
                    match t.reload(cert, key) {
                        Ok(()) => tls_warning = t.validity_warning(cert),
                        Err(e) => {
                            let e = format!(
                                "server.tls_cert/tls_key refused, the last good pair keeps serving: {e}"
                            );
                            tracing::error!("{e}");
                            rules_note = Some(match rules_note {
                                Some((_, r)) => (false, format!("{r}{e}\n")),
                                None => (false, format!("{e}\n")),
                            });
                        }
                    }
                }
                // The config's own warnings, in the log and in the answer (with zones that
                // name a tenant while no rules file is configured: reload_rules says the rest).
                let mut warnings = c.warnings.clone();
                warnings.extend(tls_warning);
                // [control] mode and group apply now (a group removed loses its access at
                // once); another socket path waits for a restart.
                if let Some((h, bound)) = shared.control.get() {
                    let (was, now) = (shared.config().control.access(), c.control.access());
                    match h.apply(&now) {
                        Err(e) => warnings.push(format!(
                            "[control] not applied, the running access stays: {e}"
                        )),
                        Ok(()) if was != now => {
                            let _ = writeln!(
                                list_note,
                                "[control] applied: mode {:o}, group {}",
                                now.mode,
                                now.group.as_deref().unwrap_or("(none)")
                            );
                        }
                        Ok(()) => {}
                    }
                    if c.control.socket.as_ref() != Some(bound) {
                        warnings.push(format!(
                            "[control] socket changed in {}: the running socket {} stays until dnsd restarts",
                            path.display(),
                            bound.display()
                        ));
                    }
                }
                let keep = c.server.start_only_changes(&shared.started_server);
                if !keep.is_empty() {
                    warnings.push(format!(
                        "[server] {} changed in {}: the running values stay until dnsd restarts",
                        keep.join(", "),
                        path.display()
                    ));
                }
                let (alias, geoip) = &shared.started_lookups;
                let mut lookups = Vec::new();
                if c.alias != *alias {
                    lookups.push("[alias]");
                }
                if (&c.geoip.db, &c.geoip.keys) != (&geoip.db, &geoip.keys) {
                    lookups.push("[geoip] db, keys");
                }
                for ((name, now), (_, then)) in c
                    .start_only_sections()
                    .iter()
                    .zip(shared.started_sections.iter())
                {
                    if now != then {
                        lookups.push(name);
                    }
                }
                if !lookups.is_empty() {
                    warnings.push(format!(
                        "{} changed in {}: read at start only, the running values stay until dnsd restarts",
                        lookups.join(" and "),
                        path.display()
                    ));
                }
                if c.rules.is_none() {
                    warnings.extend(c.tenant_warnings(None));
                }
                // A signed zone whose policy went: served unsigned from this reload on, bogus
                // to every validating resolver while its parent holds its DS (Knot keeps the
                // signed zone until its signatures expire): said in the answer, not the log
                // alone.
                for z in c.zones.iter().filter(|z| z.dnssec_policy.is_none()) {
                    let signed = zones::Name::parse(&z.origin, Some(&zones::Name::root()))
                        .ok()
                        .and_then(|n| reg.find(&n))
                        .and_then(|i| reg.entry(i))
                        .is_some_and(|e| e.def.signing.is_some());
                    if signed {
                        warnings.push(format!(
                            "zone {}: dnssec_policy removed in {}: served unsigned from now on, which validating resolvers answer SERVFAIL while its parent holds its DS — remove the DS first (or set cds = \"delete\" in the policy, RFC 8078, for a parent that follows CDS), wait out its TTL, then the policy",
                            z.origin,
                            path.display()
                        ));
                    }
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
                let own = defence::policy::own_set(&c);
                let never = defence::policy::merge(rules.as_ref().map(|g| &***g), &own);
                shared.defence.blocks.install_policy(&c.block, never);
                shared.set_rate_exempt_peers(&c, defence::policy::rate_exempt_peers(&own));
                let (n, note) = sync_zone_list(&mut reg, &c);
                list_note.push_str(&note);
                // The config's zones win over the catalogs' members they meet; the members
                // left keep their settings (the config knows nothing of them).
                let configured: std::collections::HashSet<zones::Name> = reg
                    .entries()
                    .filter(|e| e.def.from_catalog.is_none())
                    .map(|e| e.def.origin.to_lowercase())
                    .collect();
                let dropped =
                    crate::daemon::catalogs::evict_conflicting(shared, &mut reg, &configured);
                if !dropped.is_empty() {
                    // The config's policies again (a member of a configured zone's name had
                    // put its own in their place), with the members left.
                    shared.xfr.set_policies(&c);
                    shared
                        .xfr
                        .set_zone_policies(&shared.catalogs().member_configs());
                    reg.publish();
                }
                if n > 0 {
                    tracing::info!("zone list changed in {}", path.display());
                    crate::xfr::secondary::spawn_all(&shared.zones, &shared.xfr);
                }
                shared.set_config(c);
                // Zones that name a produced catalog may have come or gone with the list.
                crate::zone::catalog::produce_all(&mut reg);
                crate::daemon::catalogs::read_all_catalogs(shared);
            }
            Err(e) => {
                reg.stats
                    .config_refused
                    .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                tracing::error!("config not reloaded, keeping the running one: {e}");
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
        let head = if list_note.is_empty() {
            "no zone changed\n".to_string()
        } else {
            list_note
        };
        return match rules_note {
            Some((false, t)) => Reply::err(format!("{head}{t}")),
            Some((true, t)) => Reply::ok(format!("{head}{t}")),
            None => Reply::ok(head),
        };
    }
    // Loaded with the registry free (a big zone, signed, takes seconds: every control
    // command waited behind it — `ctl zones` 8 s behind a 200k-record signed zone), then
    // applied where the zone is still the one planned: one removed, replaced, transferred or
    // signed again meanwhile is loaded once more under the registry (rare).
    type Was = (u32, registry::ZoneDef, Option<Arc<zones::Zone>>);
    let planned: std::collections::HashMap<usize, Was> = plan
        .iter()
        .filter_map(|p| {
            reg.entry(p.slot)
                .map(|e| (p.slot, (e.id, e.def.clone(), e.current.clone())))
        })
        .collect();
    drop(reg);
    let results = tokio::task::spawn_blocking(move || crate::zone::load::load_all(plan))
        .await
        .unwrap_or_default();
    let mut reg = shared.zones.lock().await;
    // The same zone (id), as configured then (a catalog may regroup a member: another file
    // or policy), serving the same version.
    let unchanged = |reg: &Registry, slot: usize| {
        planned
            .get(&slot)
            .zip(reg.entry(slot))
            .is_some_and(|((id, def, was), e)| {
                e.id == *id
                    && e.def == *def
                    && match (was, &e.current) {
                        (Some(a), Some(b)) => Arc::ptr_eq(a, b),
                        (None, None) => true,
                        _ => false,
                    }
            })
    };
    let (fresh, stale): (Vec<_>, Vec<_>) = results
        .into_iter()
        .partition(|(slot, _)| unchanged(&reg, *slot));
    let again: Vec<_> = stale
        .iter()
        .filter(|(slot, _)| {
            let id = planned.get(slot).map(|p| p.0);
            reg.entry(*slot).is_some_and(|e| Some(e.id) == id)
        })
        .flat_map(|(slot, _)| reg.plan(Some(*slot), true))
        .collect();
    drop(stale);
    drop(planned);
    let many = fresh.len() > 100;
    let mut reports = reg.apply(fresh);
    if !again.is_empty() {
        let results = tokio::task::spawn_blocking(move || crate::zone::load::load_all(again))
            .await
            .unwrap_or_default();
        reports.extend(reg.apply(results));
    }
    if many {
        std::thread::spawn(crate::daemon::memory::release_freed_memory);
    }
    let mut text = list_note;
    let mut ok = true;
    for r in &reports {
        match &r.result {
            Ok((serial, records)) => {
                let _ = writeln!(
                    text,
                    "{}: loaded, serial {serial}, {records} records",
                    r.origin
                );
                if let Some(w) = &r.warning {
                    let _ = writeln!(text, "  warning: {w}");
                }
            }
            Err(e) => {
                ok = false;
                let _ = match r.kept {
                    Some(serial) => writeln!(
                        text,
                        "{}: FAILED, last good version kept (serial {serial}):\n{e}",
                        r.origin
                    ),
                    None => writeln!(
                        text,
                        "{}: FAILED, no earlier version: answered SERVFAIL:\n{e}",
                        r.origin
                    ),
                };
            }
        }
    }
    if let Some((rules_ok, t)) = rules_note {
        ok &= rules_ok;
        text.push_str(&t);
    }
    Reply { ok, text }
}

/// The rules a reload installs: none (`c` has no `[rules]`), none until a restart (the
/// running dnsd has none), or these, compiled.
enum Rules {
    Unchanged,
    NeedRestart,
    Ready(Box<shield::rules::Prepared>),
}

/// Reads and compiles the rules file of `c` (off the runtime's threads: compiling may take a
/// while), installing nothing; `Err(why)` when they are refused.
async fn prepare_rules(shared: &Arc<State>, c: &Config) -> Result<Rules, String> {
    let Some(rc) = c.rules.as_ref() else {
        return Ok(Rules::Unchanged);
    };
    let Some(set) = shared.defence.rules.clone() else {
        return Ok(Rules::NeedRestart);
    };
    let file = rc.file.clone();
    // Checked against the block policy this reload installs.
    let min = (c.block.min_prefix_v4, c.block.min_prefix_v6);
    tokio::task::spawn_blocking(move || set.prepare_under(&file, Some(min)))
        .await
        .map_err(|e| e.to_string())?
        .map(|p| Rules::Ready(Box::new(p)))
        .map_err(|e| format!("rules {}: {e}", rc.file.display()))
}

/// Installs what [`prepare_rules`] made of `c`'s rules; what the answer says of them.
fn install_rules(shared: &Arc<State>, c: &Config, rules: Rules) -> Option<(bool, String)> {
    let rc = c.rules.as_ref()?;
    let p = match rules {
        Rules::Unchanged => return None,
        Rules::NeedRestart => {
            return Some((
                false,
                "rules: [rules] was added to the config; restart dnsd to evaluate them\n".into(),
            ));
        }
        Rules::Ready(p) => p,
    };
    let set = shared.defence.rules.as_ref()?;
    // A tenant may gain rules: its zones leave the XDP fast path before the rules apply, and
    // nothing is compiled for XDP until they do (else the old rules' compilation answered
    // for one more compilation what the new ones deny).
    let paused = shared.xdp_answers.as_ref().map(|a| a.paused());
    set.install(&rc.file, *p);
    shared.sync_global_lists();
    drop(paused);
    let mut out = format!("rules: {} reloaded\n", rc.file.display());
    let current = set.current();
    for w in c.tenant_warnings(Some(&current)) {
        tracing::warn!("{w}");
        out.push_str(&format!("warning: {w}\n"));
    }
    Some((true, out))
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
/// Makes the registry's zones the config's: how many changed, and what the answer says of
/// the zones removed and added (a reload that drops zones is never "no zone changed").
fn sync_zone_list(reg: &mut Registry, c: &Config) -> (usize, String) {
    reg.rrsig_warn_days = c.dnssec.rrsig_warn_days;
    let r = reg.sync(zone_list(c));
    let n = r.added + r.removed + r.changed;
    let mut note = String::new();
    if n > 0 {
        tracing::info!(
            added = r.added,
            removed = r.removed,
            changed = r.changed,
            "zone list synced"
        );
        reg.publish();
    }
    if !r.gone.is_empty() {
        let names: Vec<String> = r.gone.iter().take(10).map(|z| z.to_string()).collect();
        let _ = writeln!(
            note,
            "{} zone(s) removed, no longer served: {}{}",
            r.gone.len(),
            names.join(" "),
            if r.gone.len() > 10 { " ..." } else { "" }
        );
    }
    if r.added > 0 {
        let _ = writeln!(note, "{} zone(s) added", r.added);
    }
    (n, note)
}

/// The zones of a config as the registry keeps them.
pub fn zone_list(cfg: &Config) -> Vec<ZoneDef> {
    cfg.zones
        .iter()
        .filter_map(|z| {
            zones::Name::parse(&z.origin, Some(&zones::Name::root()))
                .ok()
                .map(|n| ZoneDef::from_config(cfg, z, n))
        })
        .collect()
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
/// Asked by a user other than root or the daemon's own (`added_by`), the file is read only
/// if that user could read it (now and at every later load), may not `$INCLUDE`, may not be
/// a secondary's (its file would be written as the daemon), and an error names where the
/// file is wrong but quotes none of it: the daemon reads what the user could not.
pub async fn zone_add(
    shared: &Arc<State>,
    origin: &str,
    file: &str,
    template: Option<&str>,
    added_by: Option<&shield::control::Peer>,
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
    let reg = shared.zones.lock().await;
    if let Some(e) = reg.find(&n).and_then(|i| reg.entry(i)) {
        return Reply::err(match &e.def.from_catalog {
            Some(c) => format!(
                "zone {n} is a member of the catalog {c}: name it in the config file to take it over (then reload)\n"
            ),
            None => format!("zone {n} is already served\n"),
        });
    }
    let spec = ZoneSpec {
        file: Some(file.clone()),
        template: template.map(str::to_string),
        ..Default::default()
    };
    let zc = match Templates::new(&c)
        .and_then(|t| t.resolve(&n.to_string(), &spec, ZoneSource::State, "zone add".into()))
    {
        Ok(mut z) => {
            z.added_by = added_by.map(crate::config::zone_list::AddedBy::of);
            z
        }
        Err((k, m)) => return Reply::err(format!("{k}: {m}\n")),
    };
    // A member of the control group (not root, not dnsd's own user) adds zones only where
    // no zone it did not add has names: above one, it would answer that zone's DS and
    // delegation (and every name below no zone holds); below one, that zone's names.
    // Root (or dnsd's user) adding a zone above or below one a group member added is told
    // to remove that one first (it would be dropped at the next load).
    let by_uid = zc.added_by.as_ref().map(|a| a.uid);
    if let Err(e) = may_add(&reg, &n, by_uid) {
        return Reply::err(e);
    }
    if zc.added_by.is_some() && !zc.primaries.is_empty() {
        return Reply::err(format!(
            "{n}: not added: a secondary's file is written by dnsd, and only root or dnsd's own user may name it\n"
        ));
    }
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
    // Loaded with the registry free (a big zone takes seconds: every reload and control
    // command waited behind a member's load), then checked again; one `zone add` loads at a
    // time (64 control connections loading at once held 64 unchecked small builds).
    drop(reg);
    let _adding = ADDING.lock().await;
    // Another `zone add` of the same name may have loaded it while this one waited.
    if shared.zones.lock().await.find(&n).is_some() {
        return Reply::err(format!("zone {n} is already served\n"));
    }
    let loaded = if load {
        let planned = registry::Planned {
            slot: 0,
            origin: n.clone(),
            file: file.clone(),
            sign,
            geo: crate::zone::registry::ZoneDef::geo_spec(&c, &zc),
            added_by: zc.added_by.clone(),
            secondary: !zc.primaries.is_empty(),
        };
        let r = tokio::task::spawn_blocking(move || crate::zone::load::load_contained(&planned))
            .await
            .unwrap_or_else(|e| Err(crate::zone::load::LoadError::Task(e.to_string())));
        match r {
            Ok(l) => Some(l),
            Err(e) if added_by.is_none() => {
                return Reply::err(format!("{n}: not added, the zone does not load:\n{e}\n"));
            }
            Err(e) => {
                // The text of an error may quote the file (or what it names): its places only.
                tracing::warn!(zone = %n, "zone add refused: {e}");
                return Reply::err(format!(
                    "{n}: not added, the zone does not load: {} (details in the daemon's log)\n",
                    e.places()
                ));
            }
        }
    } else {
        None
    };
    let mut reg = shared.zones.lock().await;
    if reg.find(&n).is_some() {
        return Reply::err(format!("zone {n} was added meanwhile\n"));
    }
    if let Err(e) = may_add(&reg, &n, by_uid) {
        return Reply::err(e);
    }
    let mut st = match ZoneState::read(&state_path) {
        Ok(s) => s,
        Err(e) => return Reply::err(format!("{e}\n")),
    };
    st.zone.push(StateZone {
        origin: n.to_string(),
        file: file.clone(),
        template: template.map(str::to_string),
        added_by: zc.added_by.clone(),
    });
    if let Err(e) = st.write(&state_path) {
        return Reply::err(format!(
            "{n}: not added, the zone state was not written: {e}\n"
        ));
    }
    shared.xfr.set_zone_policy(&zc);
    let i = reg.add(ZoneDef::from_config(&c, &zc, n.clone()));
    // Catalog members below it or above it are dropped: it is
    // answered from its own data.
    crate::daemon::catalogs::evict_conflicting(shared, &mut reg, &Default::default());
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
    crate::zone::catalog::produce_all(&mut reg);
    drop(reg);
    if !zc.primaries.is_empty() {
        crate::xfr::secondary::spawn_all(&shared.zones, &shared.xfr);
    }
    tracing::info!(zone = %n, "zone added at run time");
    Reply::ok(text)
}

/// Held while a `zone add` loads its zone: one at a time.
static ADDING: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// Held by the reload running: one at a time.
static RELOADING: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// Whether `n` may be added by `by_uid` (a control-group member; `None`: root or dnsd's
/// user) beside the zones served: the error says which zone it would nest with.
fn may_add(reg: &registry::Registry, n: &zones::Name, by_uid: Option<u32>) -> Result<(), String> {
    let Some((other, place)) = reg.entries().find_map(|e| {
        if e.def.added_by.as_ref().map(|a| a.uid) == by_uid {
            return None;
        }
        crate::config::zone_list::nesting(n, &e.def.origin).map(|p| (&e.def.origin, p))
    }) else {
        return Ok(());
    };
    Err(if by_uid.is_none() {
        format!(
            "{n}: not added: it is {place} {other}, which a control-group member added: `ctl zone remove {other}` first\n"
        )
    } else {
        format!(
            "{n}: not added: it is {place} {other}, a zone you did not add; only root or dnsd's own user may add it\n"
        )
    })
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
    crate::zone::catalog::produce_all(&mut reg);
    drop(reg);
    shared.xfr.remove_zone(lower.as_wire());
    crate::xfr::secondary::spawn_all(&shared.zones, &shared.xfr);
    tracing::info!(zone = %n, "zone removed at run time");
    Reply::ok(format!("{n}: removed\n"))
}
