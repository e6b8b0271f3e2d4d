//! IXFR (RFC 1995): the per-zone [`Journal`] of differences recorded when a reload or a
//! transfer changes a zone (bounded in bytes, oldest dropped first), the difference of two
//! compiled zones ([`diff`]), the client's serial in a request, and the client side
//! ([`IxfrIn`]) that follows an IXFR answer, incremental or AXFR-style, and applies it.

use std::collections::{HashMap, HashSet, VecDeque};
use std::hash::Hasher;
use std::sync::Arc;

use siphasher::sip128::{Hasher128, SipHasher13};
use zones::rrtype::t;
use zones::{Name, Zone};

use crate::axfr::{Collector, Rec};
use crate::transfer::{RrRef, serial_gt};
use crate::wire::Query;

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

fn hasher() -> SipHasher13 {
    SipHasher13::new_with_keys(0x1f2e_3d4c_5b6a_7988, 0x0102_0304_0506_0708)
}

/// A record's identity: owner (lower case), type, RDATA in canonical form, and the TTL
/// when `ttl` is given.
fn key(owner: &[u8], rtype: u16, ttl: Option<u32>, rdata: &[u8], scratch: &mut Vec<u8>) -> u128 {
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
fn soa(z: &Zone) -> Option<Rec<'_>> {
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

/// The serial of an SOA's RDATA (uncompressed).
pub fn soa_serial(rd: &[u8]) -> Option<u32> {
    let a = zones::name::wire_name_len(rd)?;
    let b = zones::name::wire_name_len(rd.get(a..)?)?;
    let s = rd.get(a + b..a + b + 4)?;
    Some(u32::from_be_bytes([s[0], s[1], s[2], s[3]]))
}

/// The client's serial: the SOA in the authority section of an IXFR request.
pub fn request_serial(req: &[u8], q: &Query) -> Option<u32> {
    if q.nscount != 1 || req.len() < 12 || req[6..8] != [0, 0] {
        return None;
    }
    let mut b = crate::transfer::RrBuf::default();
    let (r, _) = crate::transfer::read_rr(req, q.question_end, &mut b)?;
    if r.rtype != t::SOA {
        return None;
    }
    soa_serial(r.rdata)
}

/// What an IXFR answer said.
pub enum Received {
    /// The primary has nothing newer (its serial).
    Current(u32),
    /// The whole zone (AXFR-style answer, or an AXFR).
    Full(Box<Collector>),
    /// Differences to apply to the zone we hold.
    Incremental(Changes),
}

/// Differences received, merged over every step.
pub struct Changes {
    removed: HashSet<u128>,
    added: HashMap<u128, (Vec<u8>, u16, u32, Vec<u8>)>,
    order: Vec<u128>,
    new_soa: (Vec<u8>, u32, Vec<u8>),
    /// Steps received.
    pub steps: usize,
    /// Serial before and after.
    pub serials: (u32, u32),
}

impl Changes {
    /// Records deleted and added, over all steps.
    pub fn counts(&self) -> (usize, usize) {
        (self.removed.len(), self.added.len())
    }

    /// The zone `base` with the changes applied, collected for validation (blocking).
    pub fn apply(&self, base: &Zone, max: usize) -> Result<Collector, String> {
        if base.serial() != self.serials.0 {
            return Err(format!(
                "IXFR starts at serial {}, we hold {}",
                self.serials.0,
                base.serial()
            ));
        }
        let mut c = Collector::new(base.apex(), max);
        let (o, ttl, rd) = &self.new_soa;
        c.add_parts(o, t::SOA, 1, *ttl, rd)?;
        let mut scratch = Vec::with_capacity(512);
        for (o, rt, ttl, rd) in base.records().skip(1) {
            if !self.removed.contains(&key(o, rt, None, rd, &mut scratch)) {
                c.add_parts(o, rt, 1, ttl, rd)?;
            }
        }
        for k in &self.order {
            if let Some((o, rt, ttl, rd)) = self.added.get(k) {
                c.add_parts(o, *rt, 1, *ttl, rd)?;
            }
        }
        Ok(c)
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    First,
    Second,
    Body,
    Del,
    Add,
    Done,
}

/// Follows the records of an IXFR (or AXFR) answer, in order, across messages.
pub struct IxfrIn {
    apex: Name,
    ours: Option<u32>,
    max: usize,
    state: State,
    first_soa: Option<(Vec<u8>, u32, Vec<u8>)>,
    new_serial: u32,
    running: u32,
    count: usize,
    full: Option<Collector>,
    ch: Option<Changes>,
    scratch: Vec<u8>,
}

impl IxfrIn {
    /// A follower for zone `apex`; `ours` is the serial we hold (none for an AXFR).
    pub fn new(apex: &Name, ours: Option<u32>, max: usize) -> IxfrIn {
        IxfrIn {
            apex: apex.clone(),
            ours,
            max,
            state: State::First,
            first_soa: None,
            new_serial: 0,
            running: 0,
            count: 0,
            full: None,
            ch: None,
            scratch: Vec::new(),
        }
    }

    /// True when the answer is complete.
    pub fn done(&self) -> bool {
        self.state == State::Done
    }

    /// After a whole message: true when the answer was the SOA alone, not newer than ours.
    pub fn current_after_message(&self) -> bool {
        self.state == State::Second && self.ours.is_some_and(|o| !serial_gt(self.new_serial, o))
    }

    /// Takes one record.
    pub fn add(&mut self, r: RrRef<'_>) -> Result<(), String> {
        self.count += 1;
        if self.count > self.max.saturating_add(8) {
            return Err(format!("more than {} records (max_in_records)", self.max));
        }
        let is_soa = r.rtype == t::SOA;
        let serial = if is_soa {
            Some(soa_serial(r.rdata).ok_or("malformed SOA")?)
        } else {
            None
        };
        match self.state {
            State::First => {
                let s = serial.ok_or("the answer does not start with the SOA")?;
                if !zones::name::is_subdomain(r.owner, self.apex.as_wire())
                    || r.owner.len() != self.apex.wire_len()
                {
                    return Err("the first SOA is not the zone's".into());
                }
                self.new_serial = s;
                self.first_soa = Some((r.owner.to_vec(), r.ttl, r.rdata.to_vec()));
                self.state = State::Second;
            }
            State::Second => match serial {
                Some(s) if self.ours == Some(s) && s != self.new_serial => {
                    let (o, ttl, rd) = self.first_soa.clone().expect("first SOA");
                    self.ch = Some(Changes {
                        removed: HashSet::new(),
                        added: HashMap::new(),
                        order: Vec::new(),
                        new_soa: (o, ttl, rd),
                        steps: 1,
                        serials: (s, self.new_serial),
                    });
                    self.running = s;
                    self.state = State::Del;
                }
                Some(_) => {
                    // An AXFR of a zone holding only its SOA (not a valid zone), or an IXFR
                    // that starts elsewhere.
                    return Err("unexpected second SOA in the answer".into());
                }
                _ => {
                    let mut c = Collector::new(&self.apex, self.max);
                    let (o, ttl, rd) = self.first_soa.as_ref().expect("first SOA");
                    c.add_parts(o, t::SOA, 1, *ttl, rd)?;
                    c.add(r)?;
                    self.full = Some(c);
                    self.state = State::Body;
                }
            },
            State::Body => match serial {
                Some(s) => {
                    if s != self.new_serial {
                        return Err("the closing SOA differs from the first".into());
                    }
                    self.state = State::Done;
                }
                None => self.full.as_mut().expect("collector").add(r)?,
            },
            State::Del => {
                let ch = self.ch.as_mut().expect("changes");
                match serial {
                    Some(s) => {
                        if !serial_gt(s, self.running) {
                            return Err(format!("IXFR step goes from {} to {s}", self.running));
                        }
                        self.running = s;
                        self.state = State::Add;
                    }
                    None => {
                        let k = key(r.owner, r.rtype, None, r.rdata, &mut self.scratch);
                        if ch.added.remove(&k).is_some() {
                            ch.order.retain(|x| *x != k);
                        }
                        ch.removed.insert(k);
                    }
                }
            }
            State::Add => {
                let ch = self.ch.as_mut().expect("changes");
                match serial {
                    Some(s) if s == self.new_serial && self.running == self.new_serial => {
                        self.state = State::Done;
                    }
                    Some(s) if s == self.running => {
                        ch.steps += 1;
                        self.state = State::Del;
                    }
                    Some(s) => {
                        return Err(format!(
                            "IXFR step starts at {s}, expected {}",
                            self.running
                        ));
                    }
                    None => {
                        let k = key(r.owner, r.rtype, None, r.rdata, &mut self.scratch);
                        let v = (r.owner.to_vec(), r.rtype, r.ttl, r.rdata.to_vec());
                        if ch.added.insert(k, v).is_none() {
                            ch.order.push(k);
                        }
                    }
                }
            }
            State::Done => return Err("records after the closing SOA".into()),
        }
        Ok(())
    }

    /// The answer, once complete (or the SOA alone).
    pub fn finish(self) -> Result<Received, String> {
        if self.current_after_message() {
            return Ok(Received::Current(self.new_serial));
        }
        if self.state != State::Done {
            return Err("the answer ended early".into());
        }
        if let Some(c) = self.full {
            return Ok(Received::Full(Box::new(c)));
        }
        self.ch
            .map(Received::Incremental)
            .ok_or_else(|| "empty answer".into())
    }

    /// The serial the answer brings.
    pub fn new_serial(&self) -> u32 {
        self.new_serial
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn zone(serial: u32, extra: &str) -> Zone {
        let origin = Name::parse("example.", None).unwrap();
        let text = format!(
            "$ORIGIN example.\n$TTL 300\n@ SOA ns hm {serial} 60 60 600 60\n@ NS ns\nns A 192.0.2.1\n{extra}"
        );
        zones::load_bytes("t", text, &origin, &zones::ReadOptions::new(&origin))
            .unwrap()
            .zone
    }

    fn feed(f: &mut IxfrIn, recs: impl Iterator<Item = (Vec<u8>, u16, u32, Vec<u8>)>) {
        for (o, rt, ttl, rd) in recs {
            f.add(RrRef {
                owner: &o,
                rtype: rt,
                class: 1,
                ttl,
                rdata: &rd,
            })
            .unwrap();
        }
    }

    fn owned(r: Rec<'_>) -> (Vec<u8>, u16, u32, Vec<u8>) {
        (r.0.to_vec(), r.1, r.2, r.3.to_vec())
    }

    #[test]
    fn diff_journal_and_apply() {
        let z1 = zone(1, "a A 10.0.0.1\nb A 10.0.0.2\n");
        let z2 = zone(2, "a A 10.0.0.1\nb 600 A 10.0.0.2\nc A 10.0.0.3\n");
        let z3 = zone(3, "c A 10.0.0.3\n");
        let d12 = diff(&z1, &z2, 1 << 20).unwrap();
        assert_eq!((d12.removed.len(), d12.added.len()), (1, 2));
        let d23 = diff(&z2, &z3, 1 << 20).unwrap();
        assert_eq!((d23.removed.len(), d23.added.len()), (2, 0));
        assert!(diff(&z1, &z2, 10).is_none());
        let mut j = Journal::new(1 << 20);
        j.push(d12);
        j.push(d23);
        assert_eq!(j.chain(1, 3).unwrap().len(), 2);
        assert_eq!(j.chain(2, 3).unwrap().len(), 1);
        assert!(j.chain(0, 3).is_none());
        // The IXFR answer from 1 to 3, followed and applied to z1, gives z3.
        let soa3 = owned(soa(&z3).unwrap());
        let mut recs = vec![soa3.clone()];
        for d in j.chain(1, 3).unwrap() {
            recs.extend(d.records().map(owned));
        }
        recs.push(soa3);
        let mut f = IxfrIn::new(z1.apex(), Some(1), 1000);
        feed(&mut f, recs.into_iter());
        assert!(f.done());
        let Received::Incremental(ch) = f.finish().unwrap() else {
            panic!("not incremental")
        };
        assert_eq!(ch.steps, 2);
        let z = ch.apply(&z1, 1000).unwrap().finish("t").unwrap();
        assert_eq!(
            zones::present::zone_to_text(&z),
            zones::present::zone_to_text(&z3)
        );
        // A small journal keeps the newest step only.
        let mut j = Journal::new(d_bytes(&z1, &z2).max(d_bytes(&z2, &z3)) + 1);
        j.push(diff(&z1, &z2, 1 << 20).unwrap());
        assert_eq!(j.push(diff(&z2, &z3, 1 << 20).unwrap()), 1);
        assert!(j.chain(1, 3).is_none());
    }

    fn d_bytes(a: &Zone, b: &Zone) -> usize {
        diff(a, b, 1 << 20).unwrap().bytes()
    }

    #[test]
    fn axfr_style_and_current() {
        let z = zone(5, "a A 10.0.0.1\n");
        let mut f = IxfrIn::new(z.apex(), Some(4), 1000);
        let mut recs: Vec<_> = z.records().map(owned).collect();
        recs.push(owned(soa(&z).unwrap()));
        feed(&mut f, recs.into_iter());
        assert!(matches!(f.finish().unwrap(), Received::Full(_)));
        let mut f = IxfrIn::new(z.apex(), Some(5), 1000);
        feed(&mut f, std::iter::once(owned(soa(&z).unwrap())));
        assert!(f.current_after_message());
        assert!(matches!(f.finish().unwrap(), Received::Current(5)));
    }
}
