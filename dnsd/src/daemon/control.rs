//! The control socket (`dnsd ctl`): one JSON request per connection, a reply, and the
//! commands it runs ([`HELP`] lists them).

use std::fmt::Write as _;
use std::sync::Arc;
use std::time::Duration;

use crate::daemon::reload::reload;
use crate::daemon::state::State;
use shield::control::Reply;

/// Serves the control socket `l` until the task is dropped.
pub async fn serve(l: shield::control::Listener, shared: Arc<State>) {
    shield::control::serve(l, move |args, peer| {
        let shared = shared.clone();
        async move { command(&shared, &args, &peer).await }
    })
    .await
}

async fn command(shared: &Arc<State>, args: &[String], peer: &shield::control::Peer) -> Reply {
    let a: Vec<&str> = args.iter().map(String::as_str).collect();
    match a.as_slice() {
        ["reload"] => reload(shared, None, false).await,
        // Every zone re-read whether changed or not, and ClickHouse's tables changed: root's
        // and the daemon user's, not a control-group member's to do at will.
        ["reload", "--force"] | ["events-init", ..] if !peer.reads_as_the_daemon() => Reply::err(
            format!("{}: for root and dnsd's own user only\n", a.join(" ")),
        ),
        ["reload", "--force"] => reload(shared, None, true).await,
        ["reload", z] => match owned(shared, peer, z).await {
            Ok(()) => reload(shared, Some(z), true).await,
            Err(r) => r,
        },
        ["stats"] => Reply::ok(shared.metrics.render_ctl()),
        ["block", rest @ ..] => {
            let xdp = || shared.xdp.lock().unwrap_or_else(|e| e.into_inner());
            let full = || xdp().as_ref()?.refused_full();
            let before = full();
            let mut r = shield::control::block::command_with_holds(
                &shared.defence.blocks,
                shared.defence.rules.as_deref(),
                rest,
                peer,
            );
            let holds = |net| xdp().as_ref()?.holds_block(net);
            shield::control::block::warn_unless_in_xdp(rest, &mut r, "dnsd", holds, before, full)
                .await;
            r
        }
        ["zones"] => Reply::ok(zones_text(shared).await),
        ["events-init"] => {
            crate::observe::event_sinks::events_init(shared.clickhouse.as_ref(), None).await
        }
        ["events-init", "--cluster", c] => {
            crate::observe::event_sinks::events_init(shared.clickhouse.as_ref(), Some(c)).await
        }
        ["zone", "add", o, f] => match peer.open(std::path::Path::new(f)) {
            Ok(_) => {
                crate::daemon::reload::zone_add(
                    shared,
                    o,
                    f,
                    None,
                    (!peer.reads_as_the_daemon()).then_some(peer),
                )
                .await
            }
            Err(e) => Reply::err(format!("{e}\n")),
        },
        ["zone", "add", o, f, "--template", t] => match peer.open(std::path::Path::new(f)) {
            Ok(_) => {
                crate::daemon::reload::zone_add(
                    shared,
                    o,
                    f,
                    Some(t),
                    (!peer.reads_as_the_daemon()).then_some(peer),
                )
                .await
            }
            Err(e) => Reply::err(format!("{e}\n")),
        },
        ["zone", "remove", o] => match owned(shared, peer, o).await {
            Ok(()) => crate::daemon::reload::zone_remove(shared, o).await,
            Err(r) => r,
        },
        ["zone-refresh", z] => match owned(shared, peer, z).await {
            Ok(()) => zone_refresh(shared, z).await,
            Err(r) => r,
        },
        ["zone-notify", z] => match owned(shared, peer, z).await {
            Ok(()) => zone_notify(shared, z).await,
            Err(r) => r,
        },
        ["zone-keys", z] => zone_keys(shared, z).await,
        ["zone-sign", z] => match owned(shared, peer, z).await {
            Ok(()) => zone_sign(shared, z).await,
            Err(r) => r,
        },
        ["zone-ksk-submitted", z, ..] if let Err(r) = owned(shared, peer, z).await => r,
        ["zone-ksk-submitted", z] => zone_ksk_submitted(shared, z, None).await,
        ["zone-ksk-submitted", z, tag] => match tag.parse::<u16>() {
            Ok(t) => zone_ksk_submitted(shared, z, Some(t)).await,
            Err(_) => Reply::err(format!(
                "bad key tag {}: a number 0-65535\n",
                shield::control::shown(&[tag.to_string()])
            )),
        },
        ["status"] => Reply::ok(format!(
            "running for {} s, {} addresses (bound in {} ms), {} TCP connections\n{}{}",
            shared.started.elapsed().as_secs(),
            shared.addrs.len(),
            shared.bind_time.as_millis(),
            shared.tcp.open_connections(),
            shared
                .redis
                .get()
                .map(|m| m.status_line())
                .unwrap_or_default()
                + &shared
                    .clickhouse
                    .as_ref()
                    .map(|m| m.status_line("events.clickhouse"))
                    .unwrap_or_default(),
            shared.defence.blocks.render_policy()
        )),
        ["help"] => Reply::ok(HELP.to_string()),
        _ => Reply::err(format!(
            "unknown command {}\n{HELP}",
            shield::control::shown(args)
        )),
    }
}

/// Whether `peer` may change the zone `z` (remove it, sign it now, retire its KSK, reload,
/// refresh or notify it — each a re-read or a transfer a member could repeat at will): root and
/// the daemon's user any zone, a control-group member only the zones it added — one member
/// removing another's zone (or root's) could add its own in its place.
async fn owned(shared: &Arc<State>, peer: &shield::control::Peer, z: &str) -> Result<(), Reply> {
    if peer.reads_as_the_daemon() {
        return Ok(());
    }
    let Ok(n) = zones::Name::parse(z, Some(&zones::Name::root())) else {
        return Err(Reply::err(format!(
            "bad zone name {}\n",
            shield::control::shown(&[z.to_string()])
        )));
    };
    let reg = shared.zones.lock().await;
    let by = reg
        .find(&n)
        .and_then(|i| reg.entry(i))
        .filter(|e| e.def.origin.to_lowercase() == n.to_lowercase())
        .and_then(|e| e.def.added_by.as_ref().map(|a| a.uid));
    match by {
        Some(uid) if uid == peer.uid => Ok(()),
        _ => Err(Reply::err(format!(
            "{n}: not a zone you added: a member of the control group may change only the zones it added with zone add\n"
        ))),
    }
}

/// Every control command with its arguments, as `dnsd ctl help` (also without a running
/// server), `dnsd ctl --help` and an unknown command's error list them.
pub const HELP: &str = concat!(
    "Commands (dnsd ctl [-c CONFIG | -s SOCKET] [--timeout SECONDS] COMMAND [ARGUMENTS]):
  status                              uptime, addresses bound, open TCP connections, the
                                      Redis sync's and ClickHouse sink's state, the block
                                      policy and its never-block set with sources
  reload                              re-read the config, the rules and every changed zone file
  reload --force                      the same, every zone file re-read
  reload ZONE                         re-read one zone's file
  zones                               each zone: serial, records, memory, load time, file, transfers
  zone add ORIGIN FILE [--template T] serve a zone now, kept in [server] zone_state across restarts
  zone remove ORIGIN                  stop serving a zone added with zone add
  zone-refresh ZONE                   a secondary zone: ask its primaries for changes now
  zone-notify ZONE                    send NOTIFY to the zone's secondaries now
  zone-keys ZONE                      a zone dnsd signs: its keys, their roles, states and timeline
  zone-sign ZONE                      a zone dnsd signs: sign it again now (keys' next steps too)
  zone-ksk-submitted ZONE [TAG]       the parent holds the DS of the new KSK (or CSK) a rollover
                                      awaits: its predecessor retires on its timeline from now
  stats                               every counter (the /metrics samples, one per line)
",
    shield::block_help!(),
    "  events-init                         create the ClickHouse events table (needs only -c CONFIG)
  events-init --cluster NAME          ... as local tables on every endpoint of urls, Distributed over them
  help                                this list
"
);

/// `ctl zone-refresh ZONE`: refreshes a secondary zone now and says how it went.
async fn zone_refresh(shared: &Arc<State>, z: &str) -> Reply {
    let Ok(n) = zones::Name::parse(z, Some(&zones::Name::root())) else {
        return Reply::err(format!("bad zone name {z}"));
    };
    let (tx, rx) = tokio::sync::oneshot::channel();
    let t = crate::xfr::Trigger { reply: Some(tx) };
    if !shared.xfr.trigger(n.to_lowercase().as_wire(), t) {
        return Reply::err(format!("{n} is not a secondary zone\n"));
    }
    match tokio::time::timeout(Duration::from_secs(50), rx).await {
        Ok(Ok(text)) => Reply {
            ok: !text.contains("FAILED"),
            text,
        },
        // Merged into a refresh already pending: it reports in `ctl zones`.
        Ok(Err(_)) => Reply::ok(format!("{n}: refresh already pending\n")),
        Err(_) => Reply::ok(format!("{n}: refresh still running (see ctl zones)\n")),
    }
}

/// `ctl zone-notify ZONE`: sends NOTIFY to the zone's targets now and reports each.
async fn zone_notify(shared: &Arc<State>, z: &str) -> Reply {
    let Ok(n) = zones::Name::parse(z, Some(&zones::Name::root())) else {
        return Reply::err(format!("bad zone name {z}"));
    };
    let cur = {
        let reg = shared.zones.lock().await;
        reg.find(&n).and_then(|i| reg.entry(i)?.current.clone())
    };
    let Some(zone) = cur else {
        return Reply::err(format!("zone {n} is not served\n"));
    };
    let (tx, rx) = tokio::sync::oneshot::channel();
    crate::xfr::notify::spawn_notify(&shared.xfr, &n, &zone, Some(tx));
    match tokio::time::timeout(Duration::from_secs(55), rx).await {
        Ok(Ok(text)) => Reply {
            ok: !text.contains("FAILED"),
            text,
        },
        _ => Reply::ok(format!("{n}: NOTIFY still being retried (see ctl zones)\n")),
    }
}

/// `ctl zones`: name, serial, records, load time, last error.
pub async fn zones_text(shared: &Arc<State>) -> String {
    let reg = shared.zones.lock().await;
    let mut s = String::new();
    for e in reg.entries() {
        match &e.current {
            Some(z) => {
                let _ = write!(
                    s,
                    "{}\tserial {}\trecords {}\tmemory {} KiB\tloaded in {} ms\t{}",
                    e.def.origin,
                    z.serial(),
                    z.record_count(),
                    z.memory_bytes().div_ceil(1024),
                    e.load_time.as_millis(),
                    e.def.file.display()
                );
            }
            None => {
                let _ = write!(s, "{}\tNOT LOADED\t{}", e.def.origin, e.def.file.display());
            }
        }
        if let Some(c) = &e.def.from_catalog {
            let _ = write!(s, "\tmember of catalog {c}");
        }
        if e.def.produced {
            s.push_str("\tcatalog written by dnsd");
        }
        if let Some(p) = &e.def.signing {
            let _ = write!(s, "\tsigned by dnsd (policy {})", p.name);
            if let Some(t) = e.resign_at {
                let _ = write!(
                    s,
                    ", signing again at {}",
                    shield::clock::rfc3339_ms(t * 1000)
                );
            }
        }
        if let Some(exp) = e.rrsig_expiry {
            let left = zones::sign::secs_between(crate::signing::now() as u32, exp);
            let at = shield::clock::rfc3339_ms(u64::from(exp) * 1000);
            if left < 0 {
                let _ = write!(s, "\tSIGNATURES EXPIRED since {at}");
            } else if left < i64::from(reg.rrsig_warn_days) * 86400 {
                let _ = write!(
                    s,
                    "\tWARNING: signatures expire at {at} (in {} h)",
                    left / 3600
                );
            } else {
                let _ = write!(s, "\tsignatures valid until {at}");
            }
        }
        if let Some(err) = &e.last_error {
            let first = err.lines().next().unwrap_or("");
            let _ = write!(s, "\tlast reload failed: {first}");
        }
        s.push_str(&shared.xfr.zone_line(&e.def.origin));
        s.push('\n');
    }
    s
}

/// The registry slot and policy of a zone dnsd signs.
async fn signed_zone(
    shared: &Arc<State>,
    z: &str,
) -> Result<(usize, zones::Name, Arc<crate::signing::Policy>), Reply> {
    let Ok(n) = zones::Name::parse(z, Some(&zones::Name::root())) else {
        return Err(Reply::err(format!("bad zone name {z}\n")));
    };
    let reg = shared.zones.lock().await;
    let Some(i) = reg.find(&n) else {
        return Err(Reply::err(format!("zone {n} is not configured\n")));
    };
    match reg.entry(i).and_then(|e| e.def.signing.clone()) {
        Some(p) => Ok((i, n, p)),
        None => Err(Reply::err(format!(
            "{n} is not signed by dnsd (no dnssec_policy)\n"
        ))),
    }
}

/// `ctl zone-keys ZONE`: the keys of a zone dnsd signs.
async fn zone_keys(shared: &Arc<State>, z: &str) -> Reply {
    let (_, n, p) = match signed_zone(shared, z).await {
        Ok(x) => x,
        Err(r) => return r,
    };
    let zone = n.to_lowercase().to_string();
    match crate::signing::keys_text(&p.key_dir, &zone, crate::signing::now()) {
        Ok(t) => Reply::ok(t),
        Err(e) => Reply::err(format!("{e}\n")),
    }
}

/// `ctl zone-ksk-submitted ZONE [TAG]`: records that the parent holds the DS of the new
/// key (of tag `tag`, else every one) the zone's KSK or CSK rollover awaits, and signs the
/// zone again.
async fn zone_ksk_submitted(shared: &Arc<State>, z: &str, tag: Option<u16>) -> Reply {
    let (_, n, p) = match signed_zone(shared, z).await {
        Ok(x) => x,
        Err(r) => return r,
    };
    let zone = n.to_lowercase().to_string();
    let now = crate::signing::now();
    let (dir, zz) = (p.key_dir.clone(), zone.clone());
    let marked = tokio::task::spawn_blocking(move || -> Result<Vec<u16>, String> {
        let keys = crate::signing::keys::zone_keys(&dir, &zz).map_err(|e| e.to_string())?;
        let mut marked = Vec::new();
        for (t, ..) in crate::signing::awaiting_ds(&keys, now) {
            if tag.is_none_or(|w| w == t)
                && crate::signing::mark_submitted(&dir, &zz, t, now).map_err(|e| e.to_string())?
            {
                marked.push(t);
            }
        }
        Ok(marked)
    })
    .await;
    let marked = match marked {
        Ok(Ok(m)) => m,
        Ok(Err(e)) => return Reply::err(format!("{n}: {e}\n")),
        Err(e) => return Reply::err(format!("{n}: {e}\n")),
    };
    if marked.is_empty() {
        return Reply::err(format!(
            "{n}: no KSK rollover awaits {}\n",
            tag.map_or("a DS".to_string(), |t| format!("the DS of key {t}"))
        ));
    }
    tracing::info!(zone, ?marked, "KSK submission confirmed by the operator");
    let signed = zone_sign(shared, z).await;
    let tags: Vec<String> = marked.iter().map(|t| t.to_string()).collect();
    Reply {
        ok: signed.ok,
        text: format!(
            "{n}: the parent holds the DS of key {}\n{}",
            tags.join(", "),
            signed.text
        ),
    }
}

/// `ctl zone-sign ZONE`: signs a zone again now.
async fn zone_sign(shared: &Arc<State>, z: &str) -> Reply {
    let (i, n, _) = match signed_zone(shared, z).await {
        Ok(x) => x,
        Err(r) => return r,
    };
    let mut reg = shared.zones.lock().await;
    reg.defer_resign(i, 0);
    let due = reg.resign_due(crate::signing::now());
    drop(reg);
    match due.into_iter().find(|(j, ..)| *j == i) {
        Some((i, from, job)) => {
            match crate::signing::schedule::resign(&shared.zones, i, from, job).await {
                Ok(t) => Reply::ok(t),
                Err(e) => Reply::err(format!("{n}: {e}\n")),
            }
        }
        None => Reply::err(format!("{n} is not loaded\n")),
    }
}
