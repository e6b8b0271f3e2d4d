//! Filtered Space-Saving heavy hitters in preallocated, fixed memory.
//!
//! Space-Saving (Metwally, Agrawal, El Abbadi 2005) keeps `capacity` counters; a key not yet
//! counted takes over the counter with the smallest count (the root of an indexed min-heap)
//! and inherits that count as its error bound. The filtered variant (Homem and Carvalho 2010)
//! puts an array of `4 × capacity` hashed counters in front: an unmonitored key only bumps its
//! hashed counter until that counter exceeds the smallest monitored count, so a flood of
//! one-off keys costs one probe and one increment per record instead of a heap walk. Counts
//! stay upper bounds and `count - error` lower bounds. Nothing allocates after construction:
//! the index is sized so that hashbrown always rehashes in place.

use hashbrown::HashTable;
use std::hash::{BuildHasher, Hash};

/// One counter: an estimate (upper bound) and how much of it may belong to evicted keys.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Counter<K> {
    pub(crate) key: K,
    /// Upper bound of the key's true count.
    pub(crate) count: u64,
    /// `count - error` is a lower bound of the key's true count.
    pub(crate) error: u64,
    /// Last reason recorded with the key.
    pub(crate) reason: u16,
    heap_pos: u32,
}

/// A Space-Saving summary of at most `capacity` keys.
pub(crate) struct SpaceSaving<K> {
    capacity: usize,
    hasher: foldhash::fast::RandomState,
    /// Slot numbers, found by the key's hash (4 bytes a bucket: the index stays in cache).
    index: HashTable<u32>,
    slots: Vec<Counter<K>>,
    /// The hash of each slot's key.
    hashes: Vec<u64>,
    heap: Vec<u32>,
    /// Hashed counters of unmonitored keys (length a power of two).
    alpha: Box<[u64]>,
    /// Keys that lost their counter to another key.
    pub(crate) replaced: u64,
}

impl<K: Copy + Eq + Hash> SpaceSaving<K> {
    /// A summary of `capacity` (at least 1) counters, all memory allocated now.
    pub(crate) fn new(capacity: usize) -> Self {
        let capacity = capacity.max(1);
        SpaceSaving {
            capacity,
            hasher: foldhash::fast::RandomState::default(),
            // Twice the live keys: in-place rehash (never a reallocation) clears tombstones.
            index: HashTable::with_capacity(capacity * 2 + 2),
            slots: Vec::with_capacity(capacity),
            hashes: Vec::with_capacity(capacity),
            heap: Vec::with_capacity(capacity),
            alpha: vec![0u64; (capacity * 4).next_power_of_two()].into_boxed_slice(),
            replaced: 0,
        }
    }

    /// Bytes allocated (fixed for the life of the summary).
    pub(crate) fn bytes(&self) -> usize {
        self.index.allocation_size()
            + self.slots.capacity() * std::mem::size_of::<Counter<K>>()
            + self.hashes.capacity() * std::mem::size_of::<u64>()
            + self.heap.capacity() * std::mem::size_of::<u32>()
            + std::mem::size_of_val(&*self.alpha)
    }

    /// Number of keys held.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.slots.len()
    }

    /// Smallest count held once full (the error bound of any key not held), else 0.
    #[cfg(test)]
    pub(crate) fn floor(&self) -> u64 {
        if self.slots.len() < self.capacity {
            0
        } else {
            self.heap
                .first()
                .map(|&i| self.slots[i as usize].count)
                .unwrap_or(0)
        }
    }

    /// Counts `n` more occurrences of `key`.
    #[inline]
    pub(crate) fn record(&mut self, key: K, n: u64, reason: u16) {
        let h = self.hasher.hash_one(key);
        let slots = &self.slots;
        if let Some(&i) = self.index.find(h, |&i| slots[i as usize].key == key) {
            let c = &mut self.slots[i as usize];
            c.count = c.count.saturating_add(n);
            c.reason = reason;
            let pos = c.heap_pos as usize;
            self.sift_down(pos);
            return;
        }
        if self.slots.len() < self.capacity {
            let i = self.slots.len() as u32;
            self.slots.push(Counter {
                key,
                count: n,
                error: 0,
                reason,
                heap_pos: self.heap.len() as u32,
            });
            self.hashes.push(h);
            self.heap.push(i);
            let hashes = &self.hashes;
            self.index.insert_unique(h, i, |&j| hashes[j as usize]);
            self.sift_up(self.heap.len() - 1);
            return;
        }
        let a = (h as usize) & (self.alpha.len() - 1);
        let estimate = self.alpha[a].saturating_add(n);
        let i = self.heap[0];
        if estimate <= self.slots[i as usize].count {
            // Not (yet) heavier than the lightest monitored key: count it in the filter.
            self.alpha[a] = estimate;
            return;
        }
        let old = self.slots[i as usize];
        let oh = self.hashes[i as usize];
        // The evicted key's count stays an upper bound for keys hashing with it.
        let oa = (oh as usize) & (self.alpha.len() - 1);
        self.alpha[oa] = self.alpha[oa].max(old.count);
        if let Ok(e) = self.index.find_entry(oh, |&j| j == i) {
            e.remove();
        }
        self.slots[i as usize] = Counter {
            key,
            count: estimate,
            error: estimate - n,
            reason,
            heap_pos: 0,
        };
        self.hashes[i as usize] = h;
        let hashes = &self.hashes;
        self.index.insert_unique(h, i, |&j| hashes[j as usize]);
        self.replaced += 1;
        self.sift_down(0);
    }

    /// Every counter, in no particular order.
    pub(crate) fn iter(&self) -> impl Iterator<Item = &Counter<K>> {
        self.slots.iter()
    }

    /// Forgets every key, keeping the memory.
    pub(crate) fn clear(&mut self) {
        self.index.clear();
        self.slots.clear();
        self.hashes.clear();
        self.heap.clear();
        self.alpha.fill(0);
        self.replaced = 0;
    }

    fn count_at(&self, pos: usize) -> u64 {
        self.slots[self.heap[pos] as usize].count
    }

    fn place(&mut self, pos: usize, i: u32) {
        self.heap[pos] = i;
        self.slots[i as usize].heap_pos = pos as u32;
    }

    fn sift_up(&mut self, mut pos: usize) {
        let i = self.heap[pos];
        let c = self.slots[i as usize].count;
        while pos > 0 {
            let parent = (pos - 1) / 2;
            if self.count_at(parent) <= c {
                break;
            }
            let p = self.heap[parent];
            self.place(pos, p);
            pos = parent;
        }
        self.place(pos, i);
    }

    fn sift_down(&mut self, mut pos: usize) {
        let i = self.heap[pos];
        let c = self.slots[i as usize].count;
        let n = self.heap.len();
        loop {
            let l = 2 * pos + 1;
            if l >= n {
                break;
            }
            let r = l + 1;
            let child = if r < n && self.count_at(r) < self.count_at(l) {
                r
            } else {
                l
            };
            if c <= self.count_at(child) {
                break;
            }
            let ci = self.heap[child];
            self.place(pos, ci);
            pos = child;
        }
        self.place(pos, i);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keeps_heavy_hitters_with_bounds() {
        let mut s = SpaceSaving::new(10);
        let bytes = s.bytes();
        for round in 0..1000u32 {
            s.record(1u32, 5, 1); // heavy
            s.record(2u32, 2, 2); // medium
            s.record(1000 + round, 1, 3); // a stream of one-off keys
        }
        assert_eq!(s.bytes(), bytes, "no growth");
        assert_eq!(s.len(), 10);
        let c1 = s.iter().find(|c| c.key == 1).unwrap();
        assert!(c1.count >= 5000 && c1.count - c1.error <= 5000);
        let c2 = s.iter().find(|c| c.key == 2).unwrap();
        assert!(c2.count >= 2000 && c2.count - c2.error <= 2000);
        assert!(s.iter().all(|c| c.count >= c.error));
        assert!(s.floor() > 0);
        s.clear();
        assert_eq!((s.len(), s.floor()), (0, 0));
        assert_eq!(s.bytes(), bytes);
    }

    #[test]
    fn filter_absorbs_one_off_keys() {
        let mut s = SpaceSaving::new(16);
        for k in 0..100_000u32 {
            s.record(k, 1, 0);
            if k % 10 == 0 {
                s.record(u32::MAX, 1, 0);
            }
        }
        let heavy = s
            .iter()
            .find(|c| c.key == u32::MAX)
            .expect("heavy key held");
        assert!(heavy.count >= 10_000 && heavy.count - heavy.error <= 10_000);
        assert!(
            s.replaced < 50_000,
            "most one-off keys never enter: {}",
            s.replaced
        );
    }

    #[test]
    fn heap_invariant_holds() {
        let mut s = SpaceSaving::new(37);
        let mut x = 12345u64;
        for _ in 0..20_000 {
            x = x
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            s.record(
                (x >> 58) as u32 + ((x >> 40) as u32 % 3) * 100,
                1 + (x >> 62),
                0,
            );
            for (pos, &i) in s.heap.iter().enumerate() {
                assert_eq!(s.slots[i as usize].heap_pos as usize, pos);
                if pos > 0 {
                    assert!(s.count_at((pos - 1) / 2) <= s.count_at(pos));
                }
            }
            assert_eq!(s.index.len(), s.slots.len());
            for (i, c) in s.slots.iter().enumerate() {
                let h = s.hasher.hash_one(c.key);
                assert_eq!(s.hashes[i], h);
                assert_eq!(s.index.find(h, |&j| j as usize == i), Some(&(i as u32)));
            }
        }
    }
}
