//! Small shared helpers: cache padding and striped counters for contended statistics.

use std::ops::Deref;
use std::sync::atomic::{AtomicU64, Ordering};

/// Aligns a value to its own cache line (128 bytes covers adjacent-line prefetch on x86).
#[derive(Debug, Default)]
#[repr(align(128))]
pub(crate) struct CachePadded<T>(pub(crate) T);

impl<T> Deref for CachePadded<T> {
    type Target = T;
    fn deref(&self) -> &T {
        &self.0
    }
}

const STRIPES: usize = 16;

/// A counter split over cache lines so that cores bumping it rarely share a line.
#[derive(Debug, Default)]
pub(crate) struct StripedCounter {
    cells: [CachePadded<AtomicU64>; STRIPES],
}

impl StripedCounter {
    /// Adds `n` to the stripe chosen by `hint` (any value that differs between cores/keys).
    #[inline]
    pub(crate) fn add(&self, hint: usize, n: u64) {
        self.cells[hint % STRIPES].fetch_add(n, Ordering::Relaxed);
    }

    /// Sums all stripes.
    pub(crate) fn sum(&self) -> u64 {
        self.cells
            .iter()
            .map(|c| c.load(Ordering::Relaxed))
            .fold(0u64, u64::wrapping_add)
    }
}

/// Bumps a counter that only one thread writes: a plain load and store, no locked instruction.
#[inline]
pub(crate) fn bump_owned(c: &AtomicU64, n: u64) {
    c.store(c.load(Ordering::Relaxed).wrapping_add(n), Ordering::Relaxed);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn striped_counter_sums_all_stripes() {
        let c = StripedCounter::default();
        for i in 0..100 {
            c.add(i, 2);
        }
        assert_eq!(c.sum(), 200);
    }

    #[test]
    fn owned_bump_adds() {
        let c = AtomicU64::new(5);
        bump_owned(&c, 3);
        assert_eq!(c.load(Ordering::Relaxed), 8);
    }
}
