//! Re-sign scheduling: each signed zone is signed again in the background when its
//! signatures near their refresh or its keys reach a new state — from the version served,
//! keeping every signature that still holds. A reload meanwhile wins; a failure is retried a
//! minute later. The zones come from whatever holds them ([`SignedZones`]: dnsd's zone
//! registry), so signing never reaches up into the daemon.

use std::sync::Arc;

use zones::Zone;

use super::{SignJob, SignedZone};

/// A step of the wall clock (against the monotonic clock) past which the scheduler takes a
/// new base; a step back this far makes every zone due. Signatures start an hour before
/// they are made (`inception_offset`): a smaller step leaves them valid, and re-signing
/// every zone (a serial, a NOTIFY, an IXFR each) for it would be churn.
const CLOCK_STEP_SECS: u64 = 3000;

/// What a holder of signed zones offers the scheduler.
pub trait SignedZones: Send + 'static {
    /// The zones due at `now` (seconds since the epoch): slot, version served, signing job.
    fn due(&self, now: u64) -> Vec<(usize, Arc<Zone>, SignJob)>;
    /// Puts off slot `i`'s next signing to `at` (after a failure).
    fn defer(&mut self, i: usize, at: u64);
    /// Serves `signed`, made from `from`, in slot `i` unless a reload replaced `from`
    /// meanwhile (then false); counts its signatures.
    fn install(&mut self, i: usize, from: &Arc<Zone>, signed: SignedZone) -> bool;
    /// Makes every signed zone due now (the wall clock stepped back: signatures made before
    /// would start in the future).
    fn all_due(&mut self);
    /// Once a minute, at `now`: a chance to look at the signatures served (expiry metrics).
    fn each_minute(&mut self, _now: u64) {}
    /// The slot and policy of the signed zone at `apex`.
    fn signed_zone(&self, _apex: &zones::Name) -> Option<(usize, Arc<super::Policy>)> {
        None
    }
}

/// Signs the due zones of `zones` again, forever (a task of the daemon's); KSK rollovers
/// that await the parent's DS ask its servers with `ask`.
pub async fn run<Z: SignedZones>(
    zones: Arc<tokio::sync::Mutex<Z>>,
    ask: super::submission::AskParent,
) {
    let mut tick = tokio::time::interval(std::time::Duration::from_secs(1));
    let mut n: u64 = 0;
    // The wall clock against the monotonic one: a step back (NTP, a VM restored) leaves the
    // signatures served with an inception in the future — bogus to validators until the
    // clock catches up — so every zone is signed again at once.
    let mut base = (std::time::Instant::now(), super::now());
    loop {
        tick.tick().await;
        let now = super::now();
        let expected = base.1 + base.0.elapsed().as_secs();
        if now.abs_diff(expected) > CLOCK_STEP_SECS {
            if now < expected {
                tracing::warn!(
                    back_secs = expected - now,
                    "the wall clock stepped back: signing every zone again"
                );
                zones.lock().await.all_due();
            }
            base = (std::time::Instant::now(), now);
        }
        if n.is_multiple_of(60) {
            let mut z = zones.lock().await;
            z.each_minute(now);
            // Zones removed or no longer signed await no DS.
            super::submission::retain(|name| {
                zones::Name::parse(name, Some(&zones::Name::root()))
                    .is_ok_and(|apex| z.signed_zone(&apex).is_some())
            });
        }
        n += 1;
        for z in super::submission::due(now) {
            tokio::spawn(check_submission(zones.clone(), ask.clone(), z, now));
        }
        let due = zones.lock().await.due(now);
        for (i, from, job) in due {
            if let Err(e) = resign(&zones, i, from.clone(), job).await {
                tracing::error!(zone = %from.apex(), "zone not signed again, retrying in 60 s: {e}");
                zones.lock().await.defer(i, now + 60);
            }
        }
    }
}

/// Signs slot `i` again from `from`, the version served, and serves the result (unless a
/// reload replaced `from` meanwhile). Says what it did.
pub async fn resign<Z: SignedZones>(
    zones: &tokio::sync::Mutex<Z>,
    i: usize,
    from: Arc<Zone>,
    job: SignJob,
) -> Result<String, String> {
    let now = super::now();
    let z = from.clone();
    let s = tokio::task::spawn_blocking(move || super::sign(&z, &job, now))
        .await
        .map_err(|e| e.to_string())?
        .map_err(|e| e.to_string())?;
    for w in s.warnings.iter().take(20) {
        tracing::warn!(zone = %from.apex(), "signed zone: {w}");
    }
    let (made, kept, serial) = (s.made, s.kept, s.zone.serial());
    if !zones.lock().await.install(i, &from, s) {
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

/// Asks the parent's servers whether they hold the DS of the key `zone`'s rollover awaits;
/// when every one does, marks the key submitted and signs the zone again (its predecessor
/// retires on its timeline from there).
async fn check_submission<Z: SignedZones>(
    zones: Arc<tokio::sync::Mutex<Z>>,
    ask: super::submission::AskParent,
    zone: String,
    now: u64,
) {
    use super::Submission;
    let Ok(apex) = zones::Name::parse(&zone, Some(&zones::Name::root())) else {
        super::submission::forget(&zone);
        return;
    };
    let found = zones.lock().await.signed_zone(&apex);
    let Some((i, p)) = found else {
        super::submission::forget(&zone);
        return;
    };
    let Submission::Parent {
        servers,
        check_interval,
    } = &p.ksk_submission
    else {
        super::submission::forget(&zone);
        return;
    };
    super::submission::next_check(&zone, now + check_interval);
    let (dir, z) = (p.key_dir.clone(), zone.clone());
    let Ok(Ok(keys)) = tokio::task::spawn_blocking(move || super::keys::zone_keys(&dir, &z)).await
    else {
        return;
    };
    let wanted = super::awaiting_ds(&keys, now);
    for tag in super::submission::check(&ask, servers, &apex, &wanted).await {
        let (dir, z) = (p.key_dir.clone(), zone.clone());
        let at = super::now();
        match tokio::task::spawn_blocking(move || super::mark_submitted(&dir, &z, tag, at)).await {
            Ok(Ok(true)) => {
                tracing::info!(
                    zone,
                    tag,
                    "KSK submission: every parent server holds the new key's DS"
                );
                zones.lock().await.defer(i, 0);
            }
            Ok(Ok(false)) => {}
            Ok(Err(e)) => tracing::error!(zone, tag, "KSK submission not recorded: {e}"),
            Err(e) => tracing::error!(zone, tag, "KSK submission not recorded: {e}"),
        }
    }
}
