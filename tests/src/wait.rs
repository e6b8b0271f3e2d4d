//! Bounded waits: [`wait_for`] polls a condition with a short sleep and fails the test,
//! saying what it waited for and for how long, when the condition does not hold in time.

use std::time::{Duration, Instant};

/// The first pause between two polls; it doubles up to [`MAX_POLL`].
const FIRST_POLL: Duration = Duration::from_millis(10);
/// The longest pause between two polls.
pub const MAX_POLL: Duration = Duration::from_millis(50);

/// Polls `f` until it returns true and returns how long that took; panics, naming `what` and
/// the time waited, when it still does not hold after `timeout` (`f` gets one last try then).
#[track_caller]
pub fn wait_for(what: &str, timeout: Duration, mut f: impl FnMut() -> bool) -> Duration {
    let t0 = Instant::now();
    let mut pause = FIRST_POLL;
    loop {
        if f() {
            return t0.elapsed();
        }
        let waited = t0.elapsed();
        if waited >= timeout {
            panic!("timed out waiting for {what}: not true after {waited:?} (limit {timeout:?})");
        }
        std::thread::sleep(pause.min(timeout - waited));
        pause = (pause * 2).min(MAX_POLL);
    }
}

/// Waits, when less than `margin` is left of the current window of `window` (windows aligned
/// on the Unix clock, as the defences' counters are), until the next one begins: a test that
/// counts toward a threshold within one window then runs inside it (a run that crossed a
/// boundary began its count again).
pub fn clear_of_window_edge(window: Duration, margin: Duration) {
    let (w, m) = (window.as_millis() as u64, margin.as_millis() as u64);
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64);
    let into = now % w.max(1);
    if into + m > w {
        std::thread::sleep(Duration::from_millis(w - into + 50));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_condition_that_comes_true_ends_the_wait() {
        let mut n = 0;
        let took = wait_for("the third poll", Duration::from_secs(5), || {
            n += 1;
            n == 3
        });
        assert_eq!(n, 3);
        assert!(took < Duration::from_secs(1), "{took:?}");
    }

    #[test]
    #[should_panic(expected = "timed out waiting for nothing")]
    fn a_condition_that_never_holds_fails_in_time() {
        wait_for("nothing", Duration::from_millis(100), || false);
    }
}
