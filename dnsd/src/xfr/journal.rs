//! The IXFR journal (RFC 1995): per zone, the differences recorded when a reload or a
//! transfer changes it, bounded in bytes (oldest dropped first), and the difference of two
//! compiled zones ([`diff`]). Both IXFR directions and the change queue use it; it uses
//! neither.

use std::collections::{HashSet, VecDeque};
use std::hash::Hasher;
use std::sync::Arc;

use siphasher::sip128::{Hasher128, SipHasher13};
use zones::Zone;
use zones::rrtype::t;

/// One record to send or compare: owner (lower-case wire), type, TTL, RDATA.
pub type Rec<'a> = (&'a [u8], u16, u32, &'a [u8]);

/// Records in a compact buffer: owner length, owner, type, TTL, RDATA length, RDATA.
#[derive(Debug, Default, Clone)]
pub struct RecBuf {
    bytes: Vec<u8>,
    n: usize,
}

impl RecBuf {
    /// Appends a record.
    pub fn push(&mut self, owner: &[u8], rtype: u16, ttl: u32, rdata: &[u8]) {
        self.bytes.push(owner.len() as u8);
        self.bytes.extend_from_slice(owner);
        self.bytes.extend_from_slice(&rtype.to_be_bytes());
        self.bytes.extend_from_slice(&ttl.to_be_bytes());
        self.bytes
            .extend_from_slice(&(rdata.len() as u16).to_be_bytes());
        self.bytes.extend_from_slice(rdata);
        self.n += 1;
    }

    /// The records, in order.
    pub fn iter(&self) -> impl Iterator<Item = Rec<'_>> + Send + '_ {
        let b = &self.bytes;
        let mut p = 0usize;
        std::iter::from_fn(move || {
            if p >= b.len() {
                return None;
            }
            let ol = b[p] as usize;
            let owner = &b[p + 1..p + 1 + ol];
            let q = p + 1 + ol;
            let rtype = u16::from_be_bytes([b[q], b[q + 1]]);
            let ttl = u32::from_be_bytes([b[q + 2], b[q + 3], b[q + 4], b[q + 5]]);
            let rl = u16::from_be_bytes([b[q + 6], b[q + 7]]) as usize;
            let rd = &b[q + 8..q + 8 + rl];
            p = q + 8 + rl;
            Some((owner, rtype, ttl, rd))
        })
    }

    /// Records held.
    pub fn len(&self) -> usize {
        self.n
    }

    /// True when empty.
    pub fn is_empty(&self) -> bool {
        self.n == 0
    }

    /// Bytes held.
    pub fn bytes(&self) -> usize {
        self.bytes.len()
    }
}

/// One step of a zone's history: from one serial to the next.
#[derive(Debug, Clone)]
pub struct Diff {
    /// Serial before.
    pub from: u32,
    /// Serial after.
    pub to: u32,
    old_soa: RecBuf,
    new_soa: RecBuf,
    /// Records deleted (SOA excluded).
    pub removed: RecBuf,
    /// Records added (SOA excluded).
    pub added: RecBuf,
}

impl Diff {
    /// The records of this step as IXFR sends them: old SOA, deletions, new SOA, additions.
    pub fn records(&self) -> impl Iterator<Item = Rec<'_>> + Send + '_ {
        self.old_soa
            .iter()
            .chain(self.removed.iter())
            .chain(self.new_soa.iter())
            .chain(self.added.iter())
    }

    /// Bytes held.
    pub fn bytes(&self) -> usize {
        self.old_soa.bytes() + self.new_soa.bytes() + self.removed.bytes() + self.added.bytes()
    }
}

/// A zone's recent differences, oldest first, within a byte budget.
#[derive(Debug)]
pub struct Journal {
    diffs: VecDeque<Arc<Diff>>,
    bytes: usize,
    max: usize,
}

impl Journal {
    /// An empty journal holding at most `max` bytes.
    pub fn new(max: usize) -> Journal {
        Journal {
            diffs: VecDeque::new(),
            bytes: 0,
            max,
        }
    }

    /// Appends a step (a step that does not follow the last one starts the journal afresh);
    /// returns how many old steps were dropped to stay within the budget.
    pub fn push(&mut self, d: Diff) -> usize {
        if self.diffs.back().is_some_and(|l| l.to != d.from) {
            self.clear();
        }
        if d.bytes() > self.max {
            self.clear();
            return 0;
        }
        self.bytes += d.bytes();
        self.diffs.push_back(Arc::new(d));
        let mut trimmed = 0;
        while self.bytes > self.max {
            let Some(old) = self.diffs.pop_front() else {
                break;
            };
            self.bytes -= old.bytes();
            trimmed += 1;
        }
        trimmed
    }

    /// Bytes held.
    pub fn bytes(&self) -> usize {
        self.bytes
    }

    /// The serial the oldest step starts from.
    pub fn oldest(&self) -> Option<u32> {
        self.diffs.front().map(|d| d.from)
    }

    /// Drops the oldest step; the bytes it held.
    pub fn pop_oldest(&mut self) -> usize {
        let b = self.diffs.pop_front().map_or(0, |d| d.bytes());
        self.bytes -= b;
        b
    }

    /// Forgets everything.
    pub fn clear(&mut self) {
        self.diffs.clear();
        self.bytes = 0;
    }

    /// The steps from serial `from` to serial `to`, when the journal holds all of them.
    pub fn chain(&self, from: u32, to: u32) -> Option<Vec<Arc<Diff>>> {
        let i = self.diffs.iter().position(|d| d.from == from)?;
        let mut out = Vec::new();
        let mut at = from;
        for d in self.diffs.iter().skip(i) {
            if d.from != at {
                return None;
            }
            out.push(d.clone());
            at = d.to;
            if at == to {
                return Some(out);
            }
        }
        None
    }

    /// Steps held.
    pub fn len(&self) -> usize {
        self.diffs.len()
    }

    /// True when empty.
    pub fn is_empty(&self) -> bool {
        self.diffs.is_empty()
    }
}

/// Every zone's journal within a budget for all of them: past it, the oldest steps of any
/// zone go first.
#[derive(Debug, Default)]
pub struct Journals {
    map: std::collections::HashMap<Vec<u8>, Journal>,
    /// Steps in the order they were pushed: (zone, serial the step starts from). Entries of
    /// steps already gone are skipped when met.
    order: VecDeque<(Vec<u8>, u32)>,
    bytes: usize,
}

impl Journals {
    /// Runs `f` on the journal of `apex` (created with budget `max` when missing), then
    /// trims the oldest steps of all zones until they hold at most `total` bytes; returns
    /// what `f` returned and how many steps the total budget dropped.
    pub fn with<R>(
        &mut self,
        apex: &[u8],
        max: usize,
        total: usize,
        f: impl FnOnce(&mut Journal) -> R,
    ) -> (R, usize) {
        let j = self
            .map
            .entry(apex.to_vec())
            .or_insert_with(|| Journal::new(max));
        let before = j.bytes();
        let newest = j.diffs.back().map(Arc::as_ptr);
        let r = f(j);
        let after = j.bytes();
        if let Some(d) = j.diffs.back()
            && Some(Arc::as_ptr(d)) != newest
        {
            self.order.push_back((apex.to_vec(), d.from));
        }
        self.bytes = self.bytes + after - before;
        let mut dropped = 0;
        while self.bytes > total {
            let Some((z, from)) = self.order.pop_front() else {
                break;
            };
            if let Some(j) = self.map.get_mut(&z)
                && j.oldest() == Some(from)
            {
                self.bytes -= j.pop_oldest();
                dropped += 1;
                if j.is_empty() {
                    self.map.remove(&z);
                }
            }
        }
        // Entries of steps that went another way (a zone's own budget, a restart of its
        // journal): dropped once they outnumber the live steps.
        if self.order.len() > 1024 && self.order.len() > 4 * self.steps() {
            let map = &self.map;
            self.order.retain(|(z, from)| {
                map.get(z)
                    .is_some_and(|j| j.diffs.iter().any(|d| d.from == *from))
            });
        }
        (r, dropped)
    }

    /// Forgets the journal of `apex` (the zone went, or its history broke).
    pub fn remove(&mut self, apex: &[u8]) {
        if let Some(j) = self.map.remove(apex) {
            self.bytes -= j.bytes();
        }
    }

    /// Bytes held by all journals.
    pub fn bytes(&self) -> usize {
        self.bytes
    }

    fn steps(&self) -> usize {
        self.map.values().map(Journal::len).sum()
    }
}

fn hasher() -> SipHasher13 {
    SipHasher13::new_with_keys(0x1f2e_3d4c_5b6a_7988, 0x0102_0304_0506_0708)
}

/// A record's identity: owner (lower case), type, RDATA in canonical form, and the TTL
/// when `ttl` is given.
pub(crate) fn key(
    owner: &[u8],
    rtype: u16,
    ttl: Option<u32>,
    rdata: &[u8],
    scratch: &mut Vec<u8>,
) -> u128 {
    let mut h = hasher();
    scratch.clear();
    scratch.extend_from_slice(owner);
    scratch.make_ascii_lowercase();
    h.write(scratch);
    h.write_u16(rtype);
    if let Some(t) = ttl {
        h.write_u32(t);
    }
    scratch.clear();
    scratch.extend_from_slice(rdata);
    zones::rdata::to_canonical(rtype, scratch);
    h.write_usize(scratch.len());
    h.write(scratch);
    h.finish128().as_u128()
}

/// The SOA record of a zone.
pub(crate) fn soa(z: &Zone) -> Option<Rec<'_>> {
    z.records().next().filter(|r| r.1 == t::SOA)
}

/// The difference from `old` to `new` (a TTL change is a deletion and an addition), or
/// `None` when it takes more than `max` bytes. Blocking; memory: one 16-byte key per record
/// of `old`.
pub fn diff(old: &Zone, new: &Zone, max: usize) -> Option<Diff> {
    let (os, ns) = (soa(old)?, soa(new)?);
    let mut d = Diff {
        from: old.serial(),
        to: new.serial(),
        old_soa: RecBuf::default(),
        new_soa: RecBuf::default(),
        removed: RecBuf::default(),
        added: RecBuf::default(),
    };
    d.old_soa.push(os.0, os.1, os.2, os.3);
    d.new_soa.push(ns.0, ns.1, ns.2, ns.3);
    let mut scratch = Vec::with_capacity(512);
    let mut left: HashSet<u128> = HashSet::with_capacity(old.record_count());
    for (o, rt, ttl, rd) in old.records().skip(1) {
        left.insert(key(o, rt, Some(ttl), rd, &mut scratch));
    }
    for (o, rt, ttl, rd) in new.records().skip(1) {
        if !left.remove(&key(o, rt, Some(ttl), rd, &mut scratch)) {
            d.added.push(o, rt, ttl, rd);
            if d.bytes() > max {
                return None;
            }
        }
    }
    if !left.is_empty() {
        for (o, rt, ttl, rd) in old.records().skip(1) {
            if left.contains(&key(o, rt, Some(ttl), rd, &mut scratch)) {
                d.removed.push(o, rt, ttl, rd);
                if d.bytes() > max {
                    return None;
                }
            }
        }
    }
    Some(d)
}
