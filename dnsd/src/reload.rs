//! Reloads: the config's zone list, cookie secrets and rules file re-read, changed zones (or
//! one zone) loaded off the runtime's threads, a zone that fails keeping its last good
//! version and rules that do not compile keeping the running ones.

use std::fmt::Write as _;
use std::path::PathBuf;
use std::sync::Arc;

use crate::config::Config;
use crate::defence;
use crate::state::State;
use crate::zone_registry::{self, Registry};
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
                reload_cookie_secrets(shared, &c);
                rules_note = reload_rules(shared, &c).await;
                let n = sync_zone_list(&mut reg, &c);
                if n > 0 {
                    tracing::info!("zone list changed in {}", path.display());
                }
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
    let reports = reg.apply(results);
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

/// The zones of a config: origin, file and what the query path reads of their settings.
pub fn zone_list(cfg: &Config) -> Vec<(zones::Name, PathBuf, crate::served_zones::ServeOptions)> {
    cfg.zones
        .iter()
        .filter_map(|z| {
            zones::Name::parse(&z.origin, Some(&zones::Name::root()))
                .ok()
                .map(|n| {
                    (
                        n,
                        z.file.clone(),
                        crate::served_zones::ServeOptions {
                            cookies: z.cookies.unwrap_or(cfg.defence.cookies.policy),
                            tenant: z.tenant,
                            xdp_answers: z.xdp_answers == crate::config::XdpAnswers::All,
                            xdp_hot: z.xdp_answers == crate::config::XdpAnswers::Hot,
                        },
                    )
                })
        })
        .collect()
}
