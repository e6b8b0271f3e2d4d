//! The clocks shield's APIs take as integers: wall-clock unix milliseconds and monotonic microseconds.
//!
//! Hot paths take the time as an argument so that a caller reads the clock once per batch.

use std::sync::OnceLock;
use std::time::{Instant, SystemTime, UNIX_EPOCH};

/// Milliseconds since the unix epoch (wall clock); block expiries are expressed in it.
pub fn unix_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

/// Monotonic microseconds since the first call in this process; rate limiters use it.
pub fn mono_us() -> u64 {
    static START: OnceLock<Instant> = OnceLock::new();
    START.get_or_init(Instant::now).elapsed().as_micros() as u64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn clocks_move_forward() {
        let a = mono_us();
        let b = mono_us();
        assert!(b >= a);
        // 2020-01-01 as a sanity floor for the wall clock.
        assert!(unix_ms() > 1_577_836_800_000);
    }
}
