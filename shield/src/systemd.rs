//! The service manager's protocol (`sd_notify`, the `sd-notify` crate): READY=1 once a daemon
//! serves, RELOADING=1 with MONOTONIC_USEC (for `Type=notify-reload` as well) and READY=1 again
//! around a reload, STOPPING=1 when it stops, STATUS= lines, and WATCHDOG=1 keep-alives when
//! the unit sets `WatchdogSec=`. Without `NOTIFY_SOCKET` (not started by systemd) each call
//! does nothing.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use sd_notify::NotifyState;

fn send(states: &[NotifyState<'_>]) {
    if std::env::var_os("NOTIFY_SOCKET").is_none() {
        return;
    }
    if let Err(e) = sd_notify::notify(false, states) {
        tracing::warn!("sd_notify: {e}");
    }
}

/// The daemon serves: READY=1 with `status`.
pub fn ready(status: &str) {
    send(&[NotifyState::Ready, NotifyState::Status(status)]);
}

/// A reload begins: RELOADING=1 with the monotonic time.
pub fn reloading() {
    send(&[
        NotifyState::Reloading,
        NotifyState::monotonic_usec_now().unwrap_or(NotifyState::MonotonicUsec(0)),
        NotifyState::Status("reloading"),
    ]);
}

/// The daemon stops: STOPPING=1.
pub fn stopping() {
    send(&[NotifyState::Stopping, NotifyState::Status("stopping")]);
}

/// How long a stop may take in all: the packaged units give 15 s (`TimeoutStopSec`) before
/// SIGKILL, which would cut the stop's last log lines and counts.
pub const STOP_BUDGET: Duration = Duration::from_secs(12);

/// Makes sure this process leaves within [`STOP_BUDGET`] and `grace` (the time it gives its
/// clients to finish) of now, whatever its last writes wait for (a Redis or ClickHouse that
/// takes connections and never answers): past it, runs `last` (what must never outlive the
/// process), says so and exits with status 1.
pub fn leave_within_budget(grace: Duration, last: impl FnOnce() + Send + 'static) {
    let budget = STOP_BUDGET + grace;
    let _ = std::thread::Builder::new()
        .name("stop-budget".into())
        .spawn(move || {
            std::thread::sleep(budget);
            last();
            tracing::error!(
                budget_secs = budget.as_secs(),
                "stopping took longer than its budget (a store that does not answer?): \
                 leaving now; writes still in flight are lost"
            );
            std::process::exit(1);
        });
}

/// The watchdog period the unit asks for (`WATCHDOG_USEC`, for this process), if any.
pub fn watchdog_period() -> Option<Duration> {
    let mut usec = 0u64;
    sd_notify::watchdog_enabled(false, &mut usec).then(|| Duration::from_micros(usec))
}

/// Monotonic ms of the last keep-alive sent.
static LAST_PING_MS: AtomicU64 = AtomicU64::new(0);

/// WATCHDOG=1 when half the watchdog period has passed since the last one; called from the
/// daemon's periodic work, so that a wedged runtime stops the keep-alives.
pub fn watchdog_tick(period: Duration) {
    let now = crate::clock::mono_us() / 1000;
    let last = LAST_PING_MS.load(Ordering::Relaxed);
    if last != 0 && now.saturating_sub(last) < (period.as_millis() as u64) / 2 {
        return;
    }
    LAST_PING_MS.store(now.max(1), Ordering::Relaxed);
    send(&[NotifyState::Watchdog]);
}
