//! The set of zones served, and which one answers a name (the most specific wins).

use std::hash::BuildHasher;
use std::sync::Arc;

use hashbrown::HashTable;
use zones::Zone;

use crate::config::defence::CookiePolicy;

/// What the query path reads of a zone's settings.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ServeOptions {
    /// Cookie policy.
    pub cookies: CookiePolicy,
    /// Tenant id (0: none).
    pub tenant: u32,
    /// Answered in XDP too (`xdp_answers = true`).
    pub xdp_answers: bool,
    /// Its hottest names may be answered in XDP (`xdp_answers = "hot"`).
    pub xdp_hot: bool,
}

/// Zones served at one moment; replaced whole on reload (readers keep their snapshot).
pub struct ZoneSet {
    zones: Vec<Arc<Zone>>,
    opts: Vec<ServeOptions>,
    index: HashTable<u32>,
    hasher: foldhash::fast::FixedState,
    max_labels: usize,
    generation: u64,
    expired: Vec<bool>,
}

impl ZoneSet {
    /// A set of zones with their settings; `generation` counts reloads.
    pub fn new(zones: Vec<(Arc<Zone>, ServeOptions)>, generation: u64) -> ZoneSet {
        let (zones, opts): (Vec<_>, Vec<_>) = zones.into_iter().unzip();
        let expired = vec![false; zones.len()];
        let hasher = foldhash::fast::FixedState::with_seed(7);
        let mut index = HashTable::with_capacity(zones.len());
        let mut max_labels = 0;
        for (i, z) in zones.iter().enumerate() {
            let h = hasher.hash_one(z.apex().as_wire());
            max_labels = max_labels.max(z.apex().label_count());
            index.insert_unique(h, i as u32, |&j| {
                hasher.hash_one(zones[j as usize].apex().as_wire())
            });
        }
        ZoneSet {
            zones,
            opts,
            index,
            hasher,
            max_labels,
            generation,
            expired,
        }
    }

    /// Whether zone `i` is answered in XDP too.
    pub fn xdp_answers(&self, i: u32) -> bool {
        self.opts.get(i as usize).is_some_and(|o| o.xdp_answers)
    }

    /// Whether zone `i`'s hottest names may be answered in XDP.
    #[inline]
    pub fn xdp_hot(&self, i: u32) -> bool {
        self.opts.get(i as usize).is_some_and(|o| o.xdp_hot)
    }

    /// Marks zone `i` expired (a secondary whose primaries stopped answering): SERVFAIL.
    pub fn set_expired(&mut self, i: usize) {
        self.expired[i] = true;
    }

    /// True when zone `i` has expired.
    #[inline]
    pub fn is_expired(&self, i: u32) -> bool {
        self.expired[i as usize]
    }

    /// The cookie policy of zone `i`.
    #[inline]
    pub fn cookie_policy(&self, i: u32) -> CookiePolicy {
        self.opts[i as usize].cookies
    }

    /// The tenant of zone `i`.
    #[inline]
    pub fn tenant(&self, i: u32) -> u32 {
        self.opts[i as usize].tenant
    }

    /// Every zone in the set.
    pub fn zones(&self) -> &[Arc<Zone>] {
        &self.zones
    }

    /// The reload generation this set belongs to.
    pub fn generation(&self) -> u64 {
        self.generation
    }

    /// The zone with exactly this apex (lower-case wire), if served.
    pub fn get(&self, apex_lower: &[u8]) -> Option<(u32, &Arc<Zone>)> {
        let h = self.hasher.hash_one(apex_lower);
        self.index
            .find(h, |&j| {
                self.zones[j as usize].apex().as_wire() == apex_lower
            })
            .map(|&j| (j, &self.zones[j as usize]))
    }

    /// The most specific zone holding `name` (lower-case wire with its label offsets).
    #[inline]
    pub fn find(&self, name: &[u8], label_offs: &[u8]) -> Option<(u32, &Arc<Zone>)> {
        let n = label_offs.len();
        // Suffixes with more labels than any apex cannot match: skip them.
        let first = n.saturating_sub(self.max_labels);
        for &off in &label_offs[first..] {
            if let Some(hit) = self.get(&name[off as usize..]) {
                return Some(hit);
            }
        }
        self.get(b"\0")
    }
}
