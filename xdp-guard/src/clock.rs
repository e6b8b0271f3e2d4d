//! Block expiry on the program's clock: unix milliseconds (the block map's unit) converted to
//! CLOCK_BOOTTIME nanoseconds (`bpf_ktime_get_boot_ns`, what the XDP program compares with).
//!
//! The conversion takes the offset between the two clocks once per batch: an expiry `E` (unix
//! ms) becomes `boot_now + (E - unix_now)`. CLOCK_BOOTTIME keeps counting across suspend and is
//! never stepped, so a block lasts its intended duration even if the wall clock is later
//! stepped by NTP; the mirror's periodic sweep removes what the block map has expired.

use std::time::{SystemTime, UNIX_EPOCH};

/// When a block ends, on the kernel's clock.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum KernelExpiry {
    /// The block never ends (stored as 0).
    Never,
    /// CLOCK_BOOTTIME nanoseconds at which the block ends.
    At(u64),
    /// The block has already ended: do not install it.
    Expired,
}

impl KernelExpiry {
    /// The value stored in the map (`expires_ns`), or `None` when already expired.
    pub fn map_value(self) -> Option<u64> {
        match self {
            Self::Never => Some(0),
            Self::At(ns) => Some(ns),
            Self::Expired => None,
        }
    }
}

/// A pairing of the wall clock with CLOCK_BOOTTIME, taken at one instant.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ExpiryClock {
    unix_now_ms: u64,
    boot_now_ns: u64,
}

impl ExpiryClock {
    /// Reads both clocks now.
    pub fn now() -> Self {
        let unix_now_ms = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_millis() as u64);
        Self {
            unix_now_ms,
            boot_now_ns: boot_ns(),
        }
    }

    /// A clock pairing with fixed readings (for tests).
    pub fn at(unix_now_ms: u64, boot_now_ns: u64) -> Self {
        Self {
            unix_now_ms,
            boot_now_ns,
        }
    }

    /// The kernel clock reading of this pairing, in ns.
    pub fn boot_now_ns(&self) -> u64 {
        self.boot_now_ns
    }

    /// Converts an expiry in unix ms; `u64::MAX` means never.
    pub fn to_kernel(&self, expires_unix_ms: u64) -> KernelExpiry {
        if expires_unix_ms == u64::MAX {
            return KernelExpiry::Never;
        }
        if expires_unix_ms <= self.unix_now_ms {
            return KernelExpiry::Expired;
        }
        let left_ns = (expires_unix_ms - self.unix_now_ms).saturating_mul(1_000_000);
        match self.boot_now_ns.saturating_add(left_ns) {
            u64::MAX => KernelExpiry::Never,
            ns => KernelExpiry::At(ns),
        }
    }

    /// Converts a stored `expires_ns` back to unix ms (`u64::MAX` for never).
    pub fn to_unix_ms(&self, expires_ns: u64) -> u64 {
        if expires_ns == 0 {
            return u64::MAX;
        }
        let delta_ms = (expires_ns as i128 - self.boot_now_ns as i128) / 1_000_000;
        (self.unix_now_ms as i128 + delta_ms).clamp(0, u64::MAX as i128 - 1) as u64
    }
}

/// CLOCK_MONOTONIC now, in ns (what `bpf_ktime_get_coarse_ns` returns, to its tick).
pub fn mono_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: ts is a valid timespec to write into; CLOCK_MONOTONIC always exists on Linux.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// CLOCK_BOOTTIME now, in ns (what `bpf_ktime_get_boot_ns` returns).
pub fn boot_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: ts is a valid timespec to write into; CLOCK_BOOTTIME always exists on Linux.
    unsafe { libc::clock_gettime(libc::CLOCK_BOOTTIME, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn converts_with_the_offset() {
        let c = ExpiryClock::at(1_700_000_000_000, 5_000_000_000);
        assert_eq!(
            c.to_kernel(1_700_000_001_500),
            KernelExpiry::At(6_500_000_000)
        );
        assert_eq!(c.to_kernel(1_700_000_000_000), KernelExpiry::Expired);
        assert_eq!(c.to_kernel(1), KernelExpiry::Expired);
        assert_eq!(c.to_kernel(u64::MAX), KernelExpiry::Never);
        assert_eq!(c.to_kernel(u64::MAX - 1), KernelExpiry::Never);
        assert_eq!(c.to_unix_ms(6_500_000_000), 1_700_000_001_500);
        assert_eq!(c.to_unix_ms(0), u64::MAX);
        assert_eq!(KernelExpiry::Never.map_value(), Some(0));
        assert_eq!(KernelExpiry::Expired.map_value(), None);
    }

    #[test]
    fn boot_clock_moves_forward() {
        let a = boot_ns();
        let b = boot_ns();
        assert!(a > 0 && b >= a);
    }
}
