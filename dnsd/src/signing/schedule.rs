//! Re-sign scheduling: each signed zone is signed again in the background when its
//! signatures near their refresh or its keys reach a new state — from the version served,
//! keeping every signature that still holds. A reload meanwhile wins; a failure is retried a
//! minute later. The zones come from whatever holds them ([`SignedZones`]: dnsd's zone
//! registry), so signing never reaches up into the daemon.

use std::sync::Arc;

use zones::Zone;

use super::{SignJob, SignedZone};

/// What a holder of signed zones offers the scheduler.
pub trait SignedZones: Send + 'static {
    /// The zones due at `now` (seconds since the epoch): slot, version served, signing job.
    fn due(&self, now: u64) -> Vec<(usize, Arc<Zone>, SignJob)>;
    /// Puts off slot `i`'s next signing to `at` (after a failure).
    fn defer(&mut self, i: usize, at: u64);
    /// Serves `signed`, made from `from`, in slot `i` unless a reload replaced `from`
    /// meanwhile (then false); counts its signatures.
    fn install(&mut self, i: usize, from: &Arc<Zone>, signed: SignedZone) -> bool;
    /// Once a minute, at `now`: a chance to look at the signatures served (expiry metrics).
    fn each_minute(&mut self, _now: u64) {}
}

/// Signs the due zones of `zones` again, forever (a task of the daemon's).
pub async fn run<Z: SignedZones>(zones: Arc<tokio::sync::Mutex<Z>>) {
    let mut tick = tokio::time::interval(std::time::Duration::from_secs(1));
    let mut n: u64 = 0;
    loop {
        tick.tick().await;
        let now = super::now();
        if n.is_multiple_of(60) {
            zones.lock().await.each_minute(now);
        }
        n += 1;
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
