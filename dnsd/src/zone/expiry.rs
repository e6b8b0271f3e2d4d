//! Signatures that near their expiry: counted for metrics (a walk of the signed zones only)
//! and logged as each zone loads.

use std::sync::Arc;

use zones::{Name, Zone};

/// Of the signed zones `zones` yields (earliest expiration, version served): how many
/// expire within `warn_days` days of `now`, and how many signatures have expired already
/// (a walk of those zones only).
pub fn count<'a>(
    zones: impl Iterator<Item = (u32, &'a Arc<Zone>)>,
    now: u32,
    warn_days: u32,
) -> (u64, u64) {
    let warn = i64::from(warn_days) * 86400;
    let (mut zones_n, mut expired) = (0u64, 0u64);
    for (exp, z) in zones {
        let left = zones::sign::secs_between(now, exp);
        if left < warn {
            zones_n += 1;
        }
        if left < 0 {
            expired += zones::dnssec::signature_expiry(z, now).1 as u64;
        }
    }
    (zones_n, expired)
}

/// Logs a zone whose signatures expire within `days` days (or have expired).
pub fn warn_expiry(origin: &Name, exp: u32, days: u32) {
    let left = zones::sign::secs_between(crate::signing::now() as u32, exp);
    if left < 0 {
        tracing::error!(zone = %origin, expired_s_ago = -left, "zone serves expired signatures");
    } else if left < i64::from(days) * 86400 {
        tracing::warn!(zone = %origin, days_left = left / 86400, "zone signatures expire within [dnssec] rrsig_warn_days");
    }
}
