//! Secondary zones: the SOA refresh, retry and expire timers (RFC 1034 §4.3.5, RFC 1996),
//! transfer in (IXFR with AXFR fallback), validation, the atomic swap into the zones
//! served, the copy written to the zone's file (so that a restart serves it before the
//! primary answers), and SERVFAIL once the zone expires.
//!
//! Each secondary zone has one task. It refreshes at start, then when its refresh timer
//! fires, when a primary sends NOTIFY, or on `ctl zone-refresh`; a failed refresh retries
//! after the SOA's retry interval; with no success for the SOA's expire interval the zone
//! is marked expired. The expire timer counts from the last successful refresh, which the
//! zone file's modification time records (a refresh that finds the zone current touches
//! it), so that restarts do not stretch the life of a copy whose primaries are gone.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use tokio::sync::mpsc;
use zones::rrtype::t;
use zones::{Name, Zone};

use super::axfr;
use super::client::TcpClient;
use super::ixfr::{IxfrIn, Received};
use super::policy::Primary;
use super::wire::{self, RrBuf};
use super::{Transfers, Trigger, XfrError, ZonePolicy, ZoneState, serial_gt};
use crate::query::tsig::{self, Signer, Verifier};
use crate::query::wire::{hf, opcode, rcode};

/// Shortest and longest refresh or retry interval honoured, whatever the SOA says.
const MIN_TIMER: u64 = 1;
const MAX_TIMER: u64 = 7 * 86400;

/// When to try again after `fails` refreshes failed in a row: the SOA's `retry`, but at
/// least 10 s doubling with each failure up to 2,560 s — a primary that keeps failing, or
/// trickles its transfers to be cut, takes a `max_in` slot ever less often, whatever retry
/// its SOA names.
fn retry_after(retry: Duration, fails: u32) -> Duration {
    retry.max(Duration::from_secs(10 << fails.saturating_sub(1).min(8)))
}

/// The least time between a refresh and one a NOTIFY asks for: [`NOTIFY_GAP`], and after
/// failures up to a minute of [`retry_after`]'s backoff (NOTIFY comes from the primary's
/// address, which whoever runs it, or forges it, controls).
fn notify_gap(fails: u32) -> Duration {
    match fails {
        0 => NOTIFY_GAP,
        f => NOTIFY_GAP.max(retry_after(Duration::ZERO, f).min(Duration::from_secs(60))),
    }
}

/// The SOA timers of a zone: (refresh, retry, expire), clamped.
fn timers(z: &Zone) -> (Duration, Duration, Duration) {
    let rd = z.records().next().map(|r| r.3).unwrap_or(&[]);
    let get = |i: usize| -> u64 {
        let a = zones::name::wire_name_len(rd).unwrap_or(0);
        let b = rd
            .get(a..)
            .and_then(zones::name::wire_name_len)
            .unwrap_or(0);
        let o = a + b + 4 * i;
        rd.get(o..o + 4).map_or(3600, |s| {
            u32::from_be_bytes([s[0], s[1], s[2], s[3]]) as u64
        })
    };
    let c = |v: u64| Duration::from_secs(v.clamp(MIN_TIMER, MAX_TIMER));
    (c(get(1)), c(get(2)), c(get(3).max(1)))
}

/// Drops from a load plan the secondary zones whose file does not exist yet (they wait
/// for their first transfer instead of failing to load), and, unless `explicit` (start,
/// `reload ZONE`, `reload --force`), every secondary zone: their files are written by
/// transfers (and touched by refreshes), not edited by the operator.
pub fn skip_missing(
    x: &Transfers,
    plan: Vec<crate::zone::registry::Planned>,
    explicit: bool,
) -> Vec<crate::zone::registry::Planned> {
    let pol = x.policies();
    plan.into_iter()
        .filter(|p| {
            let sec = pol
                .zone(p.origin.to_lowercase().as_wire())
                .is_some_and(|p| p.is_secondary());
            !sec || (explicit && p.file.exists())
        })
        .collect()
}

/// When the zone file was last written or touched: the time of the last successful
/// refresh, which the expire timer counts from across restarts.
fn last_refresh(file: &std::path::Path) -> Option<std::time::SystemTime> {
    std::fs::metadata(file).and_then(|m| m.modified()).ok()
}

/// Marks a successful refresh that brought nothing new on the zone file (blocking).
fn touch(file: &std::path::Path) -> std::io::Result<()> {
    std::fs::File::options()
        .write(true)
        .open(file)?
        .set_modified(std::time::SystemTime::now())
}

/// Starts the task of every secondary zone that has none, and ends the tasks of zones that
/// are no longer secondaries (at start, and after the zone list changed).
pub fn spawn_all(
    zones: &Arc<tokio::sync::Mutex<crate::zone::registry::Registry>>,
    xfr: &Arc<Transfers>,
) {
    let shared = Arc::new(Shared {
        registry: Arc::clone(zones),
        xfr: Arc::clone(xfr),
    });
    let pol = shared.xfr.policies();
    shared
        .xfr
        .retain_triggers(|apex| pol.zone(apex).is_some_and(|p| p.is_secondary()));
    for p in pol.all().filter(|p| p.is_secondary()) {
        if shared.xfr.has_trigger(p.origin.as_wire()) {
            continue;
        }
        let (tx, rx) = mpsc::channel(1);
        shared.xfr.set_trigger(p.origin.as_wire(), tx);
        tokio::spawn(run_zone(shared.clone(), p.origin.clone(), rx));
    }
}

/// What the refresh tasks work with: the zones (to publish what they transfer) and the
/// transfer state.
struct Shared {
    registry: Arc<tokio::sync::Mutex<crate::zone::registry::Registry>>,
    xfr: Arc<Transfers>,
}

fn unix(at: Instant) -> u64 {
    let now = Instant::now();
    let t = tsig::now();
    if at >= now {
        t + (at - now).as_secs()
    } else {
        t.saturating_sub((now - at).as_secs())
    }
}

/// The zone's slot and its data as the primaries serve them (unsigned, for a secondary
/// dnsd signs): what refreshes compare and IXFR builds on.
async fn current(shared: &Shared, origin: &Name) -> (Option<usize>, Option<Arc<Zone>>) {
    let reg = shared.registry.lock().await;
    let i = reg.find(origin);
    (i, i.and_then(|i| reg.upstream(i)))
}

/// The least time between the end of a refresh and one a NOTIFY asks for.
const NOTIFY_GAP: Duration = Duration::from_secs(1);

async fn run_zone(shared: Arc<Shared>, origin: Name, mut rx: mpsc::Receiver<Trigger>) {
    let x = shared.xfr.clone();
    let apex = origin.as_wire().to_vec();
    let file = x
        .policies()
        .zone(&apex)
        .map(|p| p.file.clone())
        .unwrap_or_default();
    // The expire timer runs from the last successful refresh, as the file's time says.
    let mut expire_at = current(&shared, &origin).await.1.map(|z| {
        let age = last_refresh(&file)
            .and_then(|t| t.elapsed().ok())
            .unwrap_or_default();
        (Instant::now() + timers(&z).2)
            .checked_sub(age)
            .unwrap_or_else(Instant::now)
    });
    let mut expired = false;
    let mut next = Instant::now();
    let mut last_done: Option<Instant> = None;
    // Refreshes failed in a row.
    let mut fails = 0u32;
    loop {
        let wake = match expire_at {
            Some(e) if !expired => next.min(e),
            _ => next,
        };
        let trig = tokio::select! {
            _ = tokio::time::sleep_until(wake.into()) => None,
            t = rx.recv() => match t {
                Some(t) => Some(t),
                None => return,
            },
        };
        let now = Instant::now();
        if trig.is_none() && now < next {
            // Woken for the expire timer.
            if let Some(e) = expire_at
                && now >= e
                && !expired
            {
                expire(&shared, &origin).await;
                expired = true;
            }
            continue;
        }
        let asked = trig.is_some();
        let mut reply = trig.and_then(|t| t.reply);
        if asked
            && reply.is_none()
            && let Some(done) = last_done
            && now < done + notify_gap(fails)
        {
            // NOTIFY (a source that can be forged) asks again right after a refresh: at most
            // one check of the primaries per gap, the NOTIFYs meanwhile merged into it. An
            // operator's refresh (`ctl zone-refresh`, which waits for its answer) cuts the
            // gap short: it waited behind it, up to a minute after failures, and its answer
            // timed out.
            let until = done + notify_gap(fails);
            loop {
                tokio::select! {
                    _ = tokio::time::sleep_until(until.into()) => break,
                    t = rx.recv() => match t {
                        Some(t) if t.reply.is_some() => {
                            reply = t.reply;
                            break;
                        }
                        Some(_) => {}
                        None => return,
                    },
                }
            }
        }
        x.with_status(&apex, |s| s.state = ZoneState::Refreshing);
        let r = refresh(&shared, &origin).await;
        last_done = Some(Instant::now());
        let (_, cur) = current(&shared, &origin).await;
        let (refresh_t, retry_t, expire_t) = cur.as_ref().map(|z| timers(z)).unwrap_or((
            Duration::from_secs(60),
            Duration::from_secs(10),
            Duration::MAX,
        ));
        let now = Instant::now();
        let text = match r {
            Ok(line) => {
                fails = 0;
                next = now + refresh_t;
                expire_at = now.checked_add(expire_t);
                if expired {
                    unexpire(&shared, &origin).await;
                    expired = false;
                }
                x.with_status(&apex, |s| {
                    s.state = ZoneState::Idle;
                    s.last = line.clone();
                    s.last_ok = tsig::now();
                });
                line
            }
            Err(e) => {
                x.stats.in_failed.fetch_add(1, Ordering::Relaxed);
                tracing::warn!(zone = %origin, "refresh failed: {e}");
                fails = fails.saturating_add(1);
                next = now + retry_after(retry_t, fails);
                if let Some(ea) = expire_at
                    && now >= ea
                    && !expired
                {
                    expire(&shared, &origin).await;
                    expired = true;
                }
                x.with_status(&apex, |s| {
                    s.failed += 1;
                    s.last = format!("FAILED: {e}");
                });
                format!("FAILED: {e}")
            }
        };
        x.with_status(&apex, |s| {
            if expired {
                s.state = ZoneState::Expired;
            } else if s.state == ZoneState::Refreshing {
                s.state = ZoneState::Idle;
            }
            s.next_refresh = unix(next);
            s.expires = expire_at.filter(|_| !expired).map_or(0, unix);
        });
        if let Some(r) = reply {
            let _ = r.send(format!("{origin}: {text}\n"));
        }
    }
}

async fn expire(shared: &Shared, origin: &Name) {
    tracing::error!(zone = %origin, "secondary zone expired: answering SERVFAIL until a primary answers");
    shared.xfr.stats.expired.fetch_add(1, Ordering::Relaxed);
    let mut reg = shared.registry.lock().await;
    if let Some(i) = reg.find(origin) {
        reg.set_expired(i, true);
    }
    shared
        .xfr
        .with_status(origin.as_wire(), |s| s.state = ZoneState::Expired);
}

async fn unexpire(shared: &Shared, origin: &Name) {
    tracing::info!(zone = %origin, "secondary zone no longer expired");
    let mut reg = shared.registry.lock().await;
    if let Some(i) = reg.find(origin) {
        reg.set_expired(i, false);
    }
}

/// One refresh: each primary in turn until one answers.
async fn refresh(shared: &Arc<Shared>, origin: &Name) -> Result<String, XfrError> {
    let pol = shared.xfr.policies();
    let Some(p) = pol.zone(origin.as_wire()).cloned() else {
        return Err(XfrError::Unconfigured);
    };
    drop(pol);
    let mut errs = Vec::new();
    for &primary in &p.primaries {
        match refresh_from(shared, &p, primary).await {
            Ok(line) => return Ok(line),
            // Ours, not the primary's (the zone file cannot be written): another primary's
            // copy would fail alike, a whole transfer each.
            Err(e @ XfrError::Write { .. }) => return Err(e),
            Err(e) => errs.push((primary, e)),
        }
    }
    Err(XfrError::AllPrimaries(errs))
}

/// A slot of `slots`, at once or in `share`'s turn after a wait that `waited` counts.
async fn slot(
    slots: &Arc<super::fair::FairSlots>,
    share: super::fair::Share,
    waited: &std::sync::atomic::AtomicU64,
) -> super::fair::Slot {
    if let Some(s) = slots.try_acquire() {
        return s;
    }
    waited.fetch_add(1, Ordering::Relaxed);
    slots.acquire(share).await
}

async fn refresh_from(
    shared: &Arc<Shared>,
    p: &ZonePolicy,
    primary: Primary,
) -> Result<String, XfrError> {
    let x = &shared.xfr;
    let start = Instant::now();
    // A catalog's members take turns with other catalogs and primaries, whatever it lists.
    let share = match &p.member_of {
        Some(c) => super::fair::Share::Catalog(c.clone()),
        None => super::fair::Share::Primary(primary.addr.ip()),
    };
    let serial = {
        let _check = slot(&x.check_slots, share.clone(), &x.stats.check_waiting).await;
        query_soa(x, p, primary).await?
    };
    x.with_status(p.origin.as_wire(), |s| s.primary_serial = Some(serial));
    let (_, cur) = current(shared, &p.origin).await;
    if let Some(z) = &cur
        && !serial_gt(serial, z.serial())
    {
        x.stats.in_current.fetch_add(1, Ordering::Relaxed);
        let f = p.file.clone();
        let _ = tokio::task::spawn_blocking(move || touch(&f)).await;
        return Ok(format!(
            "current at serial {} (primary {primary})",
            z.serial()
        ));
    }
    // A `max_in` slot for the transfer alone: a primary that does not answer its SOA query
    // holds none (it held one through each query's timeout, and a few such primaries of one
    // tenant held up every other zone's transfers).
    let _permit = slot(&x.in_slots, share, &x.stats.in_waiting).await;
    x.with_status(p.origin.as_wire(), |s| s.state = ZoneState::Transferring);
    let max = x.cfg.max_in_records;
    // One deadline for the refresh: an IXFR that fails falls back to an AXFR within what is
    // left of it, never a fresh `in_timeout_secs`.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(x.cfg.in_timeout_secs);
    let (what, mut zone) = match &cur {
        Some(base) => match pull(x, p, primary, Some(base.serial()), deadline).await {
            Ok(Received::Current(s)) => {
                x.stats.in_current.fetch_add(1, Ordering::Relaxed);
                let f = p.file.clone();
                let _ = tokio::task::spawn_blocking(move || touch(&f)).await;
                return Ok(format!("current at serial {s} (primary {primary})"));
            }
            Ok(Received::Incremental(ch)) => {
                let base = base.clone();
                let (del, add) = ch.counts();
                let steps = ch.steps;
                let r = tokio::task::spawn_blocking(move || {
                    ch.apply(&base, max)
                        .and_then(|c| c.finish(&format!("IXFR from {primary}")))
                })
                .await
                .map_err(|e| XfrError::Zone(e.to_string()))?;
                match r {
                    Ok(z) => {
                        x.stats.in_ixfr.fetch_add(1, Ordering::Relaxed);
                        (format!("IXFR ({steps} steps, -{del} +{add})"), z)
                    }
                    // Past max_in_records or max_in_bytes: the whole zone would be as well.
                    Err(
                        e @ (XfrError::TooManyRecords(_)
                        | XfrError::TooLarge(_)
                        | XfrError::NoMemory(_)),
                    ) => {
                        return Err(e);
                    }
                    Err(e) => {
                        tracing::warn!(zone = %p.origin, "IXFR not applied ({e}): trying AXFR");
                        axfr_in(x, p, primary, deadline).await?
                    }
                }
            }
            Ok(Received::Full(c)) => {
                let z = finish(c, primary).await?;
                x.stats.in_axfr.fetch_add(1, Ordering::Relaxed);
                ("IXFR (whole zone)".to_string(), z)
            }
            // Too slow or too large: an AXFR of the same primary would be as well.
            Err(
                e @ (XfrError::TooSlow
                | XfrError::TooLarge(_)
                | XfrError::TooManyRecords(_)
                | XfrError::NoMemory(_)),
            ) => {
                return Err(e);
            }
            Err(e) => {
                tracing::info!(zone = %p.origin, "IXFR from {primary} failed ({e}): trying AXFR");
                axfr_in(x, p, primary, deadline).await?
            }
        },
        None => axfr_in(x, p, primary, deadline).await?,
    };
    if zone.serial() != serial && !serial_gt(zone.serial(), serial) {
        // A primary behind a balancer answers the SOA from one backend and the transfer
        // from another: a copy newer than ours is taken (as Knot takes it), an older one
        // never (refused at each retry, the zone stayed at its old copy for good).
        if cur
            .as_ref()
            .is_some_and(|c| !serial_gt(zone.serial(), c.serial()))
        {
            return Err(XfrError::Protocol(
                "the transfer brought an older serial than the primary announced, and no newer than ours",
            ));
        }
        tracing::warn!(
            zone = %p.origin,
            "the transfer from {primary} brought serial {}, older than the {serial} its SOA announced: taken, newer than ours",
            zone.serial()
        );
    }
    // A catalog we consume that is no catalog (no or another schema version, a member
    // listed twice) is refused whole, as Knot refuses it: taken, its copy replaced the last
    // valid one, and the next start found no members in it (every tenant of the catalog
    // REFUSED) while the refresh found the bad serial current.
    if p.catalog == Some(crate::config::zone_list::CatalogRole::Consumer) {
        let z = zone;
        let (z, checked) = tokio::task::spawn_blocking(move || {
            let r = crate::zone::catalog::read(&z).map(drop);
            (z, r)
        })
        .await
        .map_err(|e| XfrError::Zone(e.to_string()))?;
        if let Err(e) = checked {
            tracing::error!(zone = %p.origin, "serial {} is not a valid catalog ({e}): refused, the last valid one stays", z.serial());
            return Err(XfrError::Zone(format!(
                "serial {} is not a valid catalog ({e}): the last valid one stays",
                z.serial()
            )));
        }
        zone = z;
    }
    let zone = Arc::new(zone);
    // The copy on disk first, so that a restart serves what we serve.
    let (z2, file) = (zone.clone(), p.file.clone());
    let written = tokio::task::spawn_blocking(move || axfr::write_zone_file(&z2, &file))
        .await
        .map_err(|e| XfrError::Zone(e.to_string()))?;
    // What cannot be kept is not served (as Knot refuses it): served, it would be lost at a
    // restart — the serial going back for the secondaries that took it, a catalog's new
    // members gone — while a refresh that finds it current would only touch the old file.
    // The refresh is retried; the version served stays the one on disk.
    if let Err(source) = written {
        tracing::error!(zone = %p.origin, file = %p.file.display(), "cannot write the zone file, serial {} not served: {source}", zone.serial());
        return Err(XfrError::Write {
            path: format!("{} (serial {} not served)", p.file.display(), zone.serial()),
            source,
        });
    }
    // A secondary dnsd signs: signed from what came, keeping every signature of the
    // version served whose RRset did not change (an IXFR re-signs what it touched).
    let job = {
        let reg = shared.registry.lock().await;
        reg.find(&p.origin)
            .and_then(|i| reg.entry(i))
            .and_then(|e| {
                Some(crate::signing::SignJob {
                    policy: e.def.signing.clone()?,
                    prev: e.current.clone(),
                    keep_unsigned: true,
                })
            })
    };
    let signed = match job {
        None => None,
        Some(job) => {
            let z = zone.clone();
            let r = tokio::task::spawn_blocking(move || {
                crate::signing::sign(&z, &job, crate::signing::now())
            })
            .await
            .map_err(|e| XfrError::Zone(e.to_string()))?;
            Some(r.map_err(|e| XfrError::Zone(format!("not signed: {e}")))?)
        }
    };
    {
        let mut reg = shared.registry.lock().await;
        let Some(i) = reg.find(&p.origin) else {
            return Err(XfrError::Unconfigured);
        };
        match signed {
            Some(s) => reg.install_signed(i, s, zone.clone(), start.elapsed()),
            None => reg.install(i, zone.clone(), start.elapsed()),
        }
    }
    x.with_status(p.origin.as_wire(), |s| s.ok += 1);
    let line = format!(
        "{what} from {primary}: serial {}, {} records, {} ms",
        zone.serial(),
        zone.record_count(),
        start.elapsed().as_millis(),
    );
    tracing::info!(zone = %p.origin, "{line}");
    Ok(line)
}

async fn finish(c: Box<axfr::Collector>, primary: Primary) -> Result<Zone, XfrError> {
    tokio::task::spawn_blocking(move || c.finish(&format!("transfer from {primary}")))
        .await
        .map_err(|e| XfrError::Zone(e.to_string()))?
}

async fn axfr_in(
    x: &Transfers,
    p: &ZonePolicy,
    primary: Primary,
    deadline: tokio::time::Instant,
) -> Result<(String, Zone), XfrError> {
    match pull(x, p, primary, None, deadline).await? {
        Received::Full(c) => {
            let z = finish(c, primary).await?;
            x.stats.in_axfr.fetch_add(1, Ordering::Relaxed);
            Ok(("AXFR".to_string(), z))
        }
        _ => Err(XfrError::Protocol("AXFR answer is not a zone")),
    }
}

fn signer(p: &ZonePolicy) -> Option<Signer> {
    p.key.clone().map(Signer::request)
}

/// Asks `primary` for the zone's SOA serial (UDP, then TCP when truncated or unanswered;
/// a TLS primary over TLS).
async fn query_soa(x: &Transfers, p: &ZonePolicy, primary: Primary) -> Result<u32, XfrError> {
    let timeout = Duration::from_secs(x.cfg.message_timeout_secs.min(5));
    let id: u16 = rand::random();
    let mut s = signer(p);
    let q = wire::build_query(
        id,
        opcode::QUERY,
        p.origin.as_wire(),
        t::SOA,
        None,
        false,
        s.as_mut(),
    );
    // Over TCP when UDP is truncated, lost or refused (Knot answers a catalog zone's SOA
    // only over TCP); a TLS primary only over TLS (RFC 9103 §5: what is asked of it is
    // private too).
    let udp = match primary.tls {
        true => None,
        false => Some(
            super::client::udp_exchange(primary.addr, x.cfg.source_for(primary.addr), &q, timeout)
                .await,
        ),
    };
    let resp = match udp {
        Some(Ok(r))
            if r.len() >= 4
                && u16::from_be_bytes([r[2], r[3]]) & hf::TC == 0
                && r[3] & 0x0f == rcode::NOERROR as u8 =>
        {
            r
        }
        _ => {
            let mut c =
                TcpClient::open(p, primary, x.cfg.source_for(primary.addr), timeout).await?;
            c.send(&q).await?;
            let mut buf = Vec::new();
            c.recv(&mut buf).await?;
            buf
        }
    };
    let mut serial = None;
    let mut b = RrBuf::default();
    let origin = p.origin.as_wire();
    let r = wire::read_response(&resp, &mut b, &mut |rr| {
        if rr.rtype == t::SOA && rr.owner.eq_ignore_ascii_case(origin) {
            serial = wire::soa_serial(rr.rdata);
        }
        Ok(())
    })?;
    if r.id != id || !r.echoes(origin, t::SOA) {
        return Err(XfrError::Protocol("answer to another question"));
    }
    if let Some(s) = &s {
        Verifier::new(s)
            .check(&resp, r.tsig.as_ref(), tsig::now())
            .map_err(|e| x.tsig_failed(e))?;
    }
    if r.rcode != rcode::NOERROR {
        return Err(XfrError::Rcode(rcode_name(r.rcode)));
    }
    if r.flags & hf::AA == 0 {
        return Err(XfrError::Protocol("SOA answer is not authoritative"));
    }
    serial.ok_or(XfrError::Protocol("SOA answer without the SOA"))
}

fn rcode_name(rc: u16) -> &'static str {
    crate::observe::counters::RCODES
        .get(rc as usize)
        .copied()
        .unwrap_or("?")
}

/// How long an incoming transfer runs before its average rate is held to
/// `in_min_rate_bytes_per_sec`.
const MIN_RATE_GRACE: Duration = Duration::from_secs(5);

/// Runs an IXFR (`ours` given) or AXFR with `primary` and follows the answer, before
/// `deadline`, at `in_min_rate_bytes_per_sec` on average once its first
/// [`MIN_RATE_GRACE`] are past, within `max_in_bytes`.
async fn pull(
    x: &Transfers,
    p: &ZonePolicy,
    primary: Primary,
    ours: Option<u32>,
    deadline: tokio::time::Instant,
) -> Result<Received, XfrError> {
    let timeout = Duration::from_secs(x.cfg.message_timeout_secs);
    let mut c = TcpClient::open(p, primary, x.cfg.source_for(primary.addr), timeout).await?;
    let id: u16 = rand::random();
    let mut s = signer(p);
    let soa_owned;
    let (qtype, soa) = match ours {
        Some(serial) => {
            // Our SOA with the serial we hold (the other fields do not matter to the primary).
            let mut rd = Vec::new();
            rd.extend_from_slice(b"\0\0");
            rd.extend_from_slice(&serial.to_be_bytes());
            rd.extend_from_slice(&[0; 16]);
            soa_owned = rd;
            (t::IXFR, Some((p.origin.as_wire(), 0u32, &soa_owned[..])))
        }
        None => (t::AXFR, None),
    };
    let q = wire::build_query(
        id,
        opcode::QUERY,
        p.origin.as_wire(),
        qtype,
        soa,
        false,
        s.as_mut(),
    );
    c.send(&q).await?;
    // The rate is the answer's: counted from the question sent (a slow connect or handshake
    // is `message_timeout_secs`'s).
    let start = tokio::time::Instant::now();
    let mut verifier = s.as_ref().map(Verifier::new);
    let mut f = IxfrIn::new(&p.origin, ours, x.cfg.max_in_records);
    let mut buf = Vec::new();
    let mut b = RrBuf::default();
    let mut first = true;
    let (rate, max_bytes) = (x.cfg.in_min_rate_bytes_per_sec, x.cfg.max_in_bytes);
    let mut bytes = 0u64;
    loop {
        // The next message (at most 64 KiB) must come by when the bytes so far and it keep
        // the minimum rate: a primary sending a byte a second, or an empty message every few
        // seconds, is cut after the grace time.
        let by = match rate {
            0 => deadline,
            r => deadline.min(
                start
                    + MIN_RATE_GRACE
                    + Duration::from_secs_f64((bytes + 65_537) as f64 / r as f64),
            ),
        };
        // Each message too, as a transfer we serve is held to its reader: its length within
        // the grace (the first within `message_timeout_secs`: a primary may take time to
        // start), its body within the grace plus its length at the rate — a byte a second is
        // cut after a few seconds, not when the average runs out.
        let first_len = if first || rate == 0 {
            timeout
        } else {
            MIN_RATE_GRACE
        };
        let whole = c.recv_at_rate(&mut buf, first_len, MIN_RATE_GRACE, rate);
        match tokio::time::timeout_at(by, whole).await {
            Ok(Ok(true)) => {}
            Ok(Ok(false)) | Err(_) => {
                x.stats.in_limit.fetch_add(1, Ordering::Relaxed);
                return Err(XfrError::TooSlow);
            }
            Ok(Err(e)) => return Err(e),
        }
        bytes += buf.len() as u64 + 2;
        let elapsed = start.elapsed();
        if rate > 0
            && elapsed > MIN_RATE_GRACE
            && (bytes as f64) < (elapsed - MIN_RATE_GRACE).as_secs_f64() * rate as f64
        {
            x.stats.in_limit.fetch_add(1, Ordering::Relaxed);
            return Err(XfrError::TooSlow);
        }
        if bytes > max_bytes {
            x.stats.in_limit.fetch_add(1, Ordering::Relaxed);
            return Err(XfrError::TooLarge(max_bytes));
        }
        // The zone being built must fit in what memory is left (checked every 16 MiB): the
        // process aborts on an allocation that fails, every zone with it.
        if bytes >> 24 != (bytes - buf.len() as u64 - 2) >> 24 {
            crate::zone::room::check(bytes.saturating_mul(crate::zone::room::PER_WIRE_BYTE))
                .map_err(XfrError::NoMemory)?;
        }
        let mut bad = None;
        let r = wire::read_response(&buf, &mut b, &mut |rr| {
            if bad.is_some() {
                return Ok(());
            }
            if let Err(e) = f.add(rr) {
                bad = Some(e);
            }
            Ok(())
        })?;
        // The first message repeats the question; later ones may leave it out (RFC 5936
        // §2.2.1), but never ask another.
        if r.id != id || !(r.echoes(p.origin.as_wire(), qtype) || (!first && r.qdcount == 0)) {
            return Err(XfrError::Protocol("message answering another question"));
        }
        if let Some(v) = verifier.as_mut() {
            v.check(&buf, r.tsig.as_ref(), tsig::now())
                .map_err(|e| x.tsig_failed(e))?;
        }
        if r.rcode != rcode::NOERROR {
            return Err(XfrError::Rcode(rcode_name(r.rcode)));
        }
        if let Some(e) = bad {
            if matches!(e, XfrError::TooManyRecords(_)) {
                x.stats.in_limit.fetch_add(1, Ordering::Relaxed);
            }
            return Err(e);
        }
        if first && r.ancount == 0 {
            return Err(XfrError::Protocol("empty answer"));
        }
        first = false;
        if f.done() || f.current_after_message() {
            break;
        }
    }
    if let Some(v) = &verifier
        && !v.ends_signed()
    {
        return Err(x.tsig_failed("the last message is not signed"));
    }
    f.finish()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn failed_refreshes_back_off_whatever_the_soa_retry() {
        let s = Duration::from_secs;
        assert_eq!(retry_after(s(1), 1), s(10));
        assert_eq!(retry_after(s(1), 2), s(20));
        assert_eq!(retry_after(s(1), 9), s(2560));
        assert_eq!(retry_after(s(1), 50), s(2560));
        assert_eq!(retry_after(s(7200), 1), s(7200));
        assert_eq!(notify_gap(0), NOTIFY_GAP);
        assert_eq!(notify_gap(1), s(10));
        assert_eq!(notify_gap(5), s(60));
    }
}
