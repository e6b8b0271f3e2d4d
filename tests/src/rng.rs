//! A small seeded pseudo-random generator (xorshift64*): reproducible fuzz inputs and
//! query IDs without a dependency.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

/// xorshift64* (Vigna): fast, seedable, not cryptographic.
#[derive(Debug, Clone)]
pub struct Rng(u64);

impl Rng {
    /// A generator from `seed` (0 is replaced by a fixed constant).
    pub fn new(seed: u64) -> Rng {
        Rng(if seed == 0 {
            0x9E37_79B9_7F4A_7C15
        } else {
            seed
        })
    }

    /// A generator seeded from the clock, the pid and a process-wide counter.
    pub fn from_entropy() -> Rng {
        static N: AtomicU64 = AtomicU64::new(1);
        let t = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as u64);
        let n = N.fetch_add(1, Ordering::Relaxed);
        let mut r = Rng::new(t ^ ((std::process::id() as u64) << 32) ^ n.wrapping_mul(0x2545_F491));
        r.next_u64();
        r
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        x.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    /// A number in `0..n` (`n` > 0).
    pub fn below(&mut self, n: u64) -> u64 {
        self.next_u64() % n
    }

    /// True with probability 1/2.
    pub fn coin(&mut self) -> bool {
        self.next_u64() & 1 == 1
    }

    /// `len` random bytes.
    pub fn bytes(&mut self, len: usize) -> Vec<u8> {
        (0..len).map(|_| self.next_u64() as u8).collect()
    }

    /// `name` with the case of each ASCII letter chosen at random (0x20 mixing).
    pub fn mix_case(&mut self, name: &str) -> String {
        name.chars()
            .map(|c| {
                if c.is_ascii_alphabetic() && self.coin() {
                    if c.is_ascii_uppercase() {
                        c.to_ascii_lowercase()
                    } else {
                        c.to_ascii_uppercase()
                    }
                } else {
                    c
                }
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seeded_is_reproducible_and_case_mixing_keeps_letters() {
        let (mut a, mut b) = (Rng::new(7), Rng::new(7));
        assert_eq!(a.bytes(32), b.bytes(32));
        let m = a.mix_case("www.example.com.");
        assert!(m.eq_ignore_ascii_case("www.example.com."));
        assert!((0..100).all(|_| a.below(10) < 10));
    }
}
