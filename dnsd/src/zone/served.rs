//! The set of zones served, and which one answers a name (the most specific wins).
//!
//! Each zone keeps its slot for as long as it is configured: state tied to a zone (its
//! tenant, its flood state) never shifts when other zones come or go. A new set is made
//! from the last one by editing the slots that changed: the slots live in chunks shared
//! between versions, so publishing one changed zone copies one chunk, not every zone.

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

/// Slots per chunk: what one changed zone copies when a new set is published.
const CHUNK: usize = 256;

/// One zone's place in the set.
#[derive(Clone, Default)]
struct Slot {
    zone: Option<Arc<Zone>>,
    opts: ServeOptions,
    expired: bool,
    /// Unique for the process's life (a slot is reused, its id is not).
    id: u32,
    /// Answered with compact denial (RFC 9824): the online signer.
    compact: Option<Arc<crate::signing::online::CompactSigner>>,
    /// Its variants by client network.
    geo: Option<Arc<crate::zone::geo::GeoZone>>,
    /// `zone` is a stand-in for a configured zone without data (answered SERVFAIL).
    stand_in: bool,
}

/// Served apexes → slot, shared between versions until a zone comes or goes.
#[derive(Clone)]
struct Index {
    table: HashTable<u32>,
    max_labels: usize,
}

/// Zones served at one moment; replaced on reload (readers keep their snapshot).
#[derive(Clone)]
pub struct ZoneSet {
    chunks: Vec<Arc<Vec<Slot>>>,
    index: Arc<Index>,
    generation: u64,
}

const HASHER: foldhash::fast::FixedState = foldhash::fast::FixedState::with_seed(7);

impl ZoneSet {
    /// A set of zones with their settings in slots 0, 1, …; `generation` counts reloads.
    pub fn new(zones: Vec<(Arc<Zone>, ServeOptions)>, generation: u64) -> ZoneSet {
        let mut set = ZoneSet::empty(generation);
        for (i, (z, o)) in zones.into_iter().enumerate() {
            set.put(i as u32, Some(z), o, false, i as u32, None, None);
        }
        set
    }

    /// A set without zones.
    pub fn empty(generation: u64) -> ZoneSet {
        ZoneSet {
            chunks: Vec::new(),
            index: Arc::new(Index {
                table: HashTable::new(),
                max_labels: 0,
            }),
            generation,
        }
    }

    /// A copy to edit into the next version (shares every chunk until it is written).
    pub fn next(&self, generation: u64) -> ZoneSet {
        ZoneSet {
            chunks: self.chunks.clone(),
            index: self.index.clone(),
            generation,
        }
    }

    #[inline]
    fn slot(&self, i: u32) -> Option<&Slot> {
        let i = i as usize;
        self.chunks.get(i / CHUNK).and_then(|c| c.get(i % CHUNK))
    }

    fn slot_mut(&mut self, i: u32) -> &mut Slot {
        let i = i as usize;
        while self.chunks.len() <= i / CHUNK {
            self.chunks.push(Arc::new(vec![Slot::default(); CHUNK]));
        }
        &mut Arc::make_mut(&mut self.chunks[i / CHUNK])[i % CHUNK]
    }

    fn apex_of(chunks: &[Arc<Vec<Slot>>], j: u32) -> &[u8] {
        let j = j as usize;
        chunks[j / CHUNK][j % CHUNK]
            .zone
            .as_ref()
            .map_or(&[][..], |z| z.apex().as_wire())
    }

    /// Puts `zone` (or nothing) with its settings in slot `i`; `id` names the zone for state
    /// kept beside the set. Only this slot's chunk (and the index, when the apex served
    /// there comes or goes) is copied.
    #[allow(clippy::too_many_arguments)]
    pub fn put(
        &mut self,
        i: u32,
        zone: Option<Arc<Zone>>,
        opts: ServeOptions,
        expired: bool,
        id: u32,
        compact: Option<Arc<crate::signing::online::CompactSigner>>,
        geo: Option<Arc<crate::zone::geo::GeoZone>>,
    ) {
        // Arcs, not copies of the apexes: no allocation per zone published.
        let old = self.slot(i).and_then(|s| s.zone.clone());
        let new = zone.clone();
        let s = self.slot_mut(i);
        s.zone = zone;
        s.opts = opts;
        s.expired = expired;
        s.id = id;
        s.compact = compact;
        s.geo = geo.filter(|g| !g.is_empty());
        s.stand_in = false;
        fn apex(z: &Option<Arc<Zone>>) -> Option<&[u8]> {
            z.as_ref().map(|z| z.apex().as_wire())
        }
        if apex(&old) == apex(&new) {
            return;
        }
        let chunks = &self.chunks;
        let index = Arc::make_mut(&mut self.index);
        if let Some(a) = apex(&old)
            && let Ok(e) = index.table.find_entry(HASHER.hash_one(a), |&j| j == i)
        {
            e.remove();
        }
        if let Some(a) = new.as_ref().map(|z| z.apex()) {
            index.max_labels = index.max_labels.max(a.label_count());
            index
                .table
                .insert_unique(HASHER.hash_one(a.as_wire()), i, |&j| {
                    HASHER.hash_one(Self::apex_of(chunks, j))
                });
        }
    }

    /// Zone `i`'s online signer (a zone dnsd signs that is answered with compact denial, or
    /// holds an ALIAS).
    #[inline]
    pub fn compact(&self, i: u32) -> Option<&Arc<crate::signing::online::CompactSigner>> {
        self.slot(i).and_then(|s| s.compact.as_ref())
    }

    /// Zone `i`'s variants by client network, when its geo file gives some.
    #[inline]
    pub fn geo(&self, i: u32) -> Option<&Arc<crate::zone::geo::GeoZone>> {
        self.slot(i).and_then(|s| s.geo.as_ref())
    }

    /// Whether zone `i` is answered in XDP too.
    pub fn xdp_answers(&self, i: u32) -> bool {
        self.slot(i).is_some_and(|s| s.opts.xdp_answers)
    }

    /// Whether zone `i`'s hottest names may be answered in XDP.
    #[inline]
    pub fn xdp_hot(&self, i: u32) -> bool {
        self.slot(i).is_some_and(|s| s.opts.xdp_hot)
    }

    /// Puts `stand_in`, the apex of a configured zone without data (its file failed to load,
    /// its first transfer has not come), in slot `i`: names at and below it are answered
    /// SERVFAIL, as Knot and NSD answer them — neither REFUSED nor answered by a parent zone
    /// (an authoritative NXDOMAIN resolvers would cache); [`ZoneSet::zones`] leaves it out.
    pub fn put_stand_in(&mut self, i: u32, stand_in: Arc<Zone>, opts: ServeOptions, id: u32) {
        self.put(i, Some(stand_in), opts, true, id, None, None);
        self.slot_mut(i).stand_in = true;
    }

    /// Marks zone `i` expired (a secondary whose primaries stopped answering): SERVFAIL.
    pub fn set_expired(&mut self, i: usize) {
        self.slot_mut(i as u32).expired = true;
    }

    /// True when zone `i` has expired.
    #[inline]
    pub fn is_expired(&self, i: u32) -> bool {
        self.slot(i).is_some_and(|s| s.expired)
    }

    /// The cookie policy of zone `i`.
    #[inline]
    pub fn cookie_policy(&self, i: u32) -> CookiePolicy {
        self.slot(i).map_or(CookiePolicy::On, |s| s.opts.cookies)
    }

    /// The tenant of zone `i`.
    #[inline]
    pub fn tenant(&self, i: u32) -> u32 {
        self.slot(i).map_or(0, |s| s.opts.tenant)
    }

    /// The id of the zone in slot `i`: unique for the process's life.
    #[inline]
    pub fn id(&self, i: u32) -> u32 {
        self.slot(i).map_or(u32::MAX, |s| s.id)
    }

    /// Every zone served, with its slot.
    pub fn zones(&self) -> impl Iterator<Item = (u32, &Arc<Zone>)> + '_ {
        self.chunks.iter().enumerate().flat_map(|(c, chunk)| {
            chunk
                .iter()
                .enumerate()
                .filter(|(_, s)| !s.stand_in)
                .filter_map(move |(k, s)| s.zone.as_ref().map(|z| ((c * CHUNK + k) as u32, z)))
        })
    }

    /// How many zones are served.
    pub fn len(&self) -> usize {
        self.index.table.len()
    }

    /// True when no zone is served.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The reload generation this set belongs to.
    pub fn generation(&self) -> u64 {
        self.generation
    }

    /// The zone with exactly this apex (lower-case wire), if served.
    #[inline]
    pub fn get(&self, apex_lower: &[u8]) -> Option<(u32, &Arc<Zone>)> {
        let h = HASHER.hash_one(apex_lower);
        let &j = self
            .index
            .table
            .find(h, |&j| Self::apex_of(&self.chunks, j) == apex_lower)?;
        self.slot(j).and_then(|s| s.zone.as_ref()).map(|z| (j, z))
    }

    /// The most specific zone holding `name` (lower-case wire with its label offsets).
    #[inline]
    pub fn find(&self, name: &[u8], label_offs: &[u8]) -> Option<(u32, &Arc<Zone>)> {
        let n = label_offs.len();
        // Suffixes with more labels than any apex cannot match: skip them.
        let first = n.saturating_sub(self.index.max_labels);
        for &off in &label_offs[first..] {
            if let Some(hit) = self.get(&name[off as usize..]) {
                return Some(hit);
            }
        }
        self.get(b"\0")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn zone(origin: &str, serial: u32) -> Arc<Zone> {
        let text = format!("@ 3600 IN SOA ns hostmaster {serial} 1 1 1 1\n@ 3600 IN NS ns\n");
        crate::query::testkit::load_zone(origin, &text)
    }

    fn lookup(set: &ZoneSet, name: &str) -> Option<(u32, u32)> {
        let n: zones::Name = name.parse().unwrap();
        let n = n.to_lowercase();
        let mut offs = [0u8; 128];
        let k = zones::name::label_offsets(n.as_wire(), &mut offs);
        set.find(n.as_wire(), &offs[..k])
            .map(|(i, z)| (i, z.serial()))
    }

    #[test]
    fn editing_one_slot_shares_the_other_chunks_and_keeps_every_slot() {
        let mut set = ZoneSet::empty(0);
        for i in 0..1000u32 {
            set.put(
                i,
                Some(zone(&format!("z{i}.test."), 1)),
                ServeOptions::default(),
                false,
                i,
                None,
                None,
            );
        }
        let mut next = set.next(1);
        next.put(
            700,
            Some(zone("z700.test.", 2)),
            ServeOptions::default(),
            false,
            700,
            None,
            None,
        );
        assert!(
            Arc::ptr_eq(&set.index, &next.index),
            "same apex: index shared"
        );
        assert!(Arc::ptr_eq(&set.chunks[0], &next.chunks[0]));
        assert!(!Arc::ptr_eq(&set.chunks[2], &next.chunks[2]));
        assert_eq!(lookup(&set, "a.z700.test."), Some((700, 1)));
        assert_eq!(lookup(&next, "a.z700.test."), Some((700, 2)));
        // A zone goes: its slot is empty, no other zone moves; a parent answers below it.
        next.put(5, None, ServeOptions::default(), false, 5, None, None);
        next.put(
            1000,
            Some(zone("test.", 1)),
            ServeOptions::default(),
            false,
            1000,
            None,
            None,
        );
        assert_eq!(lookup(&next, "x.z5.test."), Some((1000, 1)));
        assert_eq!(lookup(&next, "x.z6.test."), Some((6, 1)));
        assert_eq!(lookup(&set, "x.z5.test."), Some((5, 1)));
        assert_eq!(next.len(), 1000);
        assert_eq!(next.zones().count(), 1000);
        // A new zone in the freed slot has its own id.
        next.put(
            5,
            Some(zone("new.test.", 1)),
            ServeOptions::default(),
            false,
            2000,
            None,
            None,
        );
        assert_eq!(lookup(&next, "new.test."), Some((5, 1)));
        assert_eq!(next.id(5), 2000);
    }
}
