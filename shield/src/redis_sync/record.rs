//! One decision as it travels through Redis: a version 2 record, signed with the fleet key,
//! and everything a node checks before it obeys one.
//!
//! Redis is a transport, not an authority: anyone who can write to it can write records.
//! A record is obeyed only when
//!
//! 1. its bytes are at most [`MAX_RECORD_BYTES`] (checked before decoding; a stream field of
//!    packed records at most [`MAX_FIELD_BYTES`]), it decodes, and its version is `VERSION`;
//! 2. its tag is HMAC-SHA256 over its canonical bytes ([`Record::canonical`]) under the key
//!    derived from the fleet key file (`[redis] key_file`), unless the sync runs with
//!    `insecure_unsigned = true` (and then a tagged record must still verify when a key is
//!    set: there is none);
//! 3. read from the stream, its `(start, seq)` is newer than the last one seen from its node
//!    (`Replay`): `start` is the writing process's start time, `seq` counts its records, so
//!    a restart is no replay and a copy of an old entry is refused;
//! 4. an add: its evidence is proven (suspects never travel), its origin is `local` or
//!    `operator`, its expiry is at most `max_block_secs` ahead, and its prefix passes the
//!    block map's policy (never-block prefixes, `[block] min_prefix_v4`/`min_prefix_v6`);
//! 5. a removal: it lifts only what [`crate::block::BlockMap::remove_from_peer`] lets it —
//!    a peer's own entries, or with `origin = operator` (an operator's command) any peer or
//!    automatic entry, never an operator's entry of this node.
//!
//! Refusals are counted by [`Refused`] cause and logged (at most ten lines a second) with the
//! stream id.

use crate::block::{BlockEntry, Evidence, Origin, Scope};
use crate::fleet_key::DerivedKey;
use hmac::{Hmac, Mac};
use ipnet::IpNet;
use serde::{Deserialize, Serialize};
use sha2::Sha256;
use std::sync::atomic::{AtomicU64, Ordering};

/// The record version written and accepted.
pub(crate) const VERSION: u8 = 2;
/// Longest record accepted, in bytes (a record is about 300).
pub const MAX_RECORD_BYTES: usize = 1024;
/// Most records packed into one stream entry.
pub const PACK: usize = 128;
/// Longest stream field accepted: [`PACK`] records of at most [`MAX_RECORD_BYTES`], in an array.
pub const MAX_FIELD_BYTES: usize = PACK * (MAX_RECORD_BYTES + 1) + 2;
/// The purpose the records' key is derived for ([`crate::fleet_key::FleetKey::derive`]).
pub const KEY_PURPOSE: &str = "palisade redis block records v2";

/// What one record does.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum RecordOp {
    /// Block (or refresh) `net` until `exp`.
    Add,
    /// Lift the block on `net`.
    Del,
}

impl RecordOp {
    fn name(self) -> &'static str {
        match self {
            RecordOp::Add => "add",
            RecordOp::Del => "del",
        }
    }
}

/// One decision as stored in a block key and in a stream entry.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Record {
    /// The record version ([`VERSION`]).
    pub(crate) v: u8,
    pub(crate) op: RecordOp,
    pub(crate) net: IpNet,
    /// Node that decided it.
    pub(crate) node: String,
    /// Start time of the writing process, unix ms: leads the replay order.
    pub(crate) start: u64,
    /// The writing process's record counter.
    pub(crate) seq: u64,
    /// Expiry in Redis server time, unix ms (adds only).
    #[serde(default)]
    pub(crate) exp: i64,
    /// Who decided an add, or who lifts with a removal: `local` or `operator`.
    pub(crate) origin: Origin,
    /// What proved the source owns its address (adds only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) evidence: Option<Evidence>,
    /// What the block stops (adds only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) scope: Option<Scope>,
    /// Reason (adds only).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub(crate) reason: String,
    /// HMAC-SHA256 of [`Record::canonical`], hex; empty when unsigned.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub(crate) tag: String,
}

/// Why a record was refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Refused {
    /// Larger than the bound, before decoding.
    Oversized,
    /// Not a record.
    Malformed,
    /// A version this node does not know.
    Version,
    /// No tag where one is required.
    Unsigned,
    /// A tag that does not verify.
    BadTag,
    /// Not newer than the last record of its node.
    Replay,
    /// An add of unproven evidence, or an origin that may not travel.
    Unproven,
    /// An expiry further ahead than `max_block_secs`.
    Expiry,
    /// A prefix shorter than the minimum.
    ShortPrefix,
    /// A prefix that overlaps a never-block entry.
    NeverBlock,
    /// Read where no fresh mark of its node vouches for it (a node started later must not
    /// take an old record planted back for one still live).
    Unvouched,
    /// Lifted since, by its node's mark.
    Lifted,
}

impl Refused {
    /// Every cause, in counter order.
    pub const ALL: [Refused; 12] = [
        Refused::Oversized,
        Refused::Malformed,
        Refused::Version,
        Refused::Unsigned,
        Refused::BadTag,
        Refused::Replay,
        Refused::Unproven,
        Refused::Expiry,
        Refused::ShortPrefix,
        Refused::NeverBlock,
        Refused::Unvouched,
        Refused::Lifted,
    ];

    /// The cause's name in counters and logs.
    pub fn name(self) -> &'static str {
        match self {
            Refused::Oversized => "oversized",
            Refused::Malformed => "malformed",
            Refused::Version => "version",
            Refused::Unsigned => "unsigned",
            Refused::BadTag => "bad_tag",
            Refused::Replay => "replay",
            Refused::Unproven => "unproven",
            Refused::Expiry => "expiry",
            Refused::ShortPrefix => "short_prefix",
            Refused::NeverBlock => "never_block",
            Refused::Unvouched => "unvouched",
            Refused::Lifted => "lifted",
        }
    }

    pub(crate) fn index(self) -> usize {
        Refused::ALL.iter().position(|r| *r == self).unwrap_or(0)
    }
}

fn origin_name(o: Origin) -> &'static str {
    match o {
        Origin::Local => "local",
        Origin::Operator => "operator",
        Origin::Peer => "peer",
    }
}

impl Record {
    /// The bytes the tag covers: a domain label, then every field but the tag, each
    /// length-prefixed (strings) or fixed width (numbers), so that no two records share them.
    pub fn canonical(&self) -> Vec<u8> {
        let mut b = Vec::with_capacity(160);
        let mut s = |x: &[u8]| {
            b.extend_from_slice(&(x.len() as u32).to_be_bytes());
            b.extend_from_slice(x);
        };
        s(b"palisade-block-record");
        s(&[self.v]);
        s(self.op.name().as_bytes());
        s(self.net.to_string().as_bytes());
        s(self.node.as_bytes());
        s(&self.start.to_be_bytes());
        s(&self.seq.to_be_bytes());
        s(&self.exp.to_be_bytes());
        s(origin_name(self.origin).as_bytes());
        s(self.evidence.map_or("", |e| e.name()).as_bytes());
        s(self.scope.map_or("", |e| e.name()).as_bytes());
        s(self.reason.as_bytes());
        b
    }

    /// The entry this add makes on a node whose clock is `offset_ms` behind Redis, as `origin`.
    pub fn to_entry(&self, offset_ms: i64, origin: Origin) -> BlockEntry {
        let local = self.exp.saturating_sub(offset_ms).max(0) as u64;
        let evidence = self.evidence.unwrap_or(Evidence::Udp);
        let mut e = BlockEntry::new(self.net, local, &self.reason, origin, evidence)
            .with_node(&self.node)
            .from_record(self.start, self.seq);
        if let Some(s) = self.scope {
            e.scope = s;
        }
        e
    }
}

/// The tag of `canonical` bytes (a record's or a mark's) under `key`: HMAC-SHA256, hex.
fn tag(key: &DerivedKey, canonical: &[u8]) -> String {
    let mut m = <Hmac<Sha256> as Mac>::new_from_slice(&key.0).expect("any key length");
    m.update(canonical);
    hex(&m.finalize().into_bytes())
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

fn unhex(s: &str) -> Option<Vec<u8>> {
    if !s.len().is_multiple_of(2) {
        return None;
    }
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(s.get(i..i + 2)?, 16).ok())
        .collect()
}

/// The writing side: numbers and signs a process's records (the sync's writer; tools and
/// tests that publish records of their own).
#[derive(Debug)]
pub struct Sealer {
    key: Option<DerivedKey>,
    node: String,
    start: AtomicU64,
    seq: AtomicU64,
}

impl Sealer {
    /// Records of `node`, started at `start` (unix ms), signed with `key` (unsigned without).
    pub fn new(key: Option<DerivedKey>, node: &str, start: u64) -> Sealer {
        Sealer {
            key,
            node: node.to_string(),
            start: AtomicU64::new(start),
            seq: AtomicU64::new(0),
        }
    }

    /// The start its records carry.
    pub fn start(&self) -> u64 {
        self.start.load(Ordering::Relaxed)
    }

    /// Numbers this process's records past `last` (the latest record Redis holds of this
    /// node, its mark) when the start taken from the clock is not: a clock that was ahead
    /// and was set right made every peer refuse the node's records as replays. True when it
    /// moved.
    pub fn start_after(&self, last: u64) -> bool {
        // Equal is this process's own mark (read again at a reconnect): no move.
        if last <= self.start() {
            return false;
        }
        self.start
            .fetch_max(last.saturating_add(1), Ordering::Relaxed)
            <= last
    }

    fn seal(&self, mut r: Record) -> String {
        r.seq = self.seq.fetch_add(1, Ordering::Relaxed) + 1;
        if let Some(k) = &self.key {
            r.tag = tag(k, &r.canonical());
        }
        serde_json::to_string(&r).unwrap_or_default()
    }

    /// The JSON of an add: `entry` as decided here, expiring at `exp_redis` (Redis time, ms).
    pub fn add(&self, entry: &BlockEntry, exp_redis: i64) -> String {
        self.seal(Record {
            v: VERSION,
            op: RecordOp::Add,
            net: entry.net,
            node: self.node.clone(),
            start: self.start.load(Ordering::Relaxed),
            seq: 0,
            exp: exp_redis,
            origin: entry.origin,
            evidence: Some(entry.evidence),
            scope: Some(entry.scope),
            reason: entry.reason.as_str().to_string(),
            tag: String::new(),
        })
    }

    /// The last record number this process gave (0: none yet).
    pub fn seq(&self) -> u64 {
        self.seq.load(Ordering::Relaxed)
    }

    /// The JSON of this process's mark at `at` (Redis time, ms), vouching for its records
    /// but those `lifts` names (tools and tests: `lifts` empty).
    pub fn mark(&self, at: i64, lifts: &Lifts) -> String {
        let mut m = Mark {
            v: VERSION,
            node: self.node.clone(),
            start: self.start(),
            seq: self.seq(),
            at,
            cut: lifts.cut,
            lifts: lifts.list.iter().cloned().collect(),
            tag: String::new(),
        };
        if let Some(k) = &self.key {
            m.tag = tag(k, &m.canonical());
        }
        serde_json::to_string(&m).unwrap_or_default()
    }

    /// The JSON of a removal of `net`, lifted by `by` (an operator's command, or this node).
    pub fn del(&self, net: &IpNet, by: Origin) -> String {
        self.seal(Record {
            v: VERSION,
            op: RecordOp::Del,
            net: *net,
            node: self.node.clone(),
            start: self.start.load(Ordering::Relaxed),
            seq: 0,
            exp: 0,
            origin: by,
            evidence: None,
            scope: None,
            reason: String::new(),
            tag: String::new(),
        })
    }
}

/// The reading side: decodes and verifies records (the sync's reader; the fuzzer).
#[derive(Debug)]
pub struct Opener {
    key: Option<DerivedKey>,
    /// The key being replaced (`previous_key_file`): its records are still taken.
    previous: Option<DerivedKey>,
    insecure_unsigned: bool,
    /// Records verified with the previous key.
    pub(crate) by_previous: AtomicU64,
}

impl Opener {
    /// Verifies with `key`; without one, only when `insecure_unsigned` (records unchecked).
    pub fn new(key: Option<DerivedKey>, insecure_unsigned: bool) -> Opener {
        Opener {
            key,
            previous: None,
            insecure_unsigned,
            by_previous: AtomicU64::new(0),
        }
    }

    /// The same, also taking records signed with `previous` (a key being rotated out).
    pub fn with_previous(mut self, previous: Option<DerivedKey>) -> Opener {
        self.previous = previous;
        self
    }

    /// One record: bounded, decoded, of our version, and verified.
    pub fn open(&self, bytes: &[u8]) -> Result<Record, Refused> {
        if bytes.len() > MAX_RECORD_BYTES {
            return Err(Refused::Oversized);
        }
        let r: Record = serde_json::from_slice(bytes).map_err(|_| {
            // A record of another version may not decode as ours: say which.
            match serde_json::from_slice::<serde_json::Value>(bytes) {
                Ok(v) if v.get("v").and_then(|x| x.as_u64()) != Some(u64::from(VERSION)) => {
                    Refused::Version
                }
                _ => Refused::Malformed,
            }
        })?;
        self.verify(r)
    }

    fn verify(&self, r: Record) -> Result<Record, Refused> {
        if r.v != VERSION {
            return Err(Refused::Version);
        }
        self.check_tag(&r.tag, &r.canonical())?;
        Ok(r)
    }

    /// Checks `tag` (hex) over `canonical` with the key, or the one being rotated out.
    fn check_tag(&self, tag: &str, canonical: &[u8]) -> Result<(), Refused> {
        match &self.key {
            Some(k) => {
                if tag.is_empty() {
                    return Err(Refused::Unsigned);
                }
                let tag = unhex(tag).ok_or(Refused::BadTag)?;
                let ok = |k: &DerivedKey| {
                    let mut m =
                        <Hmac<Sha256> as Mac>::new_from_slice(&k.0).expect("any key length");
                    m.update(canonical);
                    m.verify_slice(&tag).is_ok()
                };
                if !ok(k) {
                    if !self.previous.as_ref().is_some_and(ok) {
                        return Err(Refused::BadTag);
                    }
                    self.by_previous.fetch_add(1, Ordering::Relaxed);
                }
            }
            None if self.insecure_unsigned => {}
            None => return Err(Refused::Unsigned),
        }
        Ok(())
    }

    /// A node's mark: bounded, decoded and verified. A mark of the earlier kind (a copy of
    /// its node's latest record) reads as one that vouches for nothing.
    pub(crate) fn open_mark(&self, bytes: &[u8]) -> Result<Mark, Refused> {
        if bytes.len() > MAX_MARK_BYTES {
            return Err(Refused::Oversized);
        }
        let m: Mark = match serde_json::from_slice(bytes) {
            Ok(m) => m,
            Err(_) => {
                let r = self.open(bytes)?;
                return Ok(Mark {
                    v: r.v,
                    node: r.node,
                    start: r.start,
                    seq: r.seq,
                    at: i64::MIN,
                    cut: (0, 0),
                    lifts: Vec::new(),
                    tag: String::new(),
                });
            }
        };
        if m.v != VERSION {
            return Err(Refused::Version);
        }
        if m.lifts.len() > MARK_LIFTS {
            return Err(Refused::Oversized);
        }
        self.check_tag(&m.tag, &m.canonical())?;
        Ok(m)
    }

    /// A stream field: one record, or a JSON array of up to [`PACK`] (a packed batch). Each
    /// record is judged alone; a field past [`MAX_FIELD_BYTES`] is refused whole.
    pub fn open_many(&self, bytes: &[u8]) -> Vec<Result<Record, Refused>> {
        if bytes.len() > MAX_FIELD_BYTES {
            return vec![Err(Refused::Oversized)];
        }
        if bytes.first() != Some(&b'[') {
            return vec![self.open(bytes)];
        }
        let Ok(items) = serde_json::from_slice::<Vec<&serde_json::value::RawValue>>(bytes) else {
            return vec![Err(Refused::Malformed)];
        };
        if items.len() > PACK {
            return vec![Err(Refused::Oversized)];
        }
        items
            .into_iter()
            .map(|raw| self.open(raw.get().as_bytes()))
            .collect()
    }
}

/// Longest mark accepted, in bytes ([`MARK_LIFTS`] lifts of about 100 bytes, and a margin).
pub const MAX_MARK_BYTES: usize = 32 * 1024;
/// Most lifts a mark carries: past it the oldest go, and the mark's cut rises past them.
pub const MARK_LIFTS: usize = 256;
/// A mark older than this (Redis time) vouches for nothing: its node stopped writing it (it
/// is down), or someone put back an older one, from before a lift.
pub const MARK_FRESH_MS: i64 = 30_000;
/// How often a node writes its mark again when it writes nothing else.
pub const MARK_REFRESH_MS: u64 = 10_000;

/// One lift a mark carries: its node's records of `net` up to `(start, seq)` are void.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Lift {
    pub(crate) net: IpNet,
    pub(crate) start: u64,
    pub(crate) seq: u64,
    /// When it was lifted (Redis time, ms): forgotten once no record it voids can be live.
    pub(crate) at: i64,
}

/// A node's mark, kept in the marks hash under its id and written with each of its batches
/// and every [`MARK_REFRESH_MS`]: how far it has written (`start`, `seq`: a record of it at
/// or before, replayed into the stream, is refused by a reader that never saw it write),
/// when (`at`), and which of its records it lifted since. A record planted back in Redis is
/// genuine and signed: a node started later takes a snapshot record only where a fresh mark
/// of its node vouches for it — of that process (`start`), not lifted, above `cut`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Mark {
    pub(crate) v: u8,
    pub(crate) node: String,
    pub(crate) start: u64,
    pub(crate) seq: u64,
    /// When it was written, Redis time, ms.
    pub(crate) at: i64,
    /// Its records at or before this `(start, seq)` are not vouched for (lifts forgotten).
    pub(crate) cut: (u64, u64),
    pub(crate) lifts: Vec<Lift>,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub(crate) tag: String,
}

impl Mark {
    /// The bytes the tag covers, as [`Record::canonical`] under another domain label.
    pub fn canonical(&self) -> Vec<u8> {
        let mut b = Vec::with_capacity(96 + 48 * self.lifts.len());
        let mut s = |x: &[u8]| {
            b.extend_from_slice(&(x.len() as u32).to_be_bytes());
            b.extend_from_slice(x);
        };
        s(b"palisade-block-mark");
        s(&[self.v]);
        s(self.node.as_bytes());
        s(&self.start.to_be_bytes());
        s(&self.seq.to_be_bytes());
        s(&self.at.to_be_bytes());
        s(&self.cut.0.to_be_bytes());
        s(&self.cut.1.to_be_bytes());
        s(&(self.lifts.len() as u64).to_be_bytes());
        for l in &self.lifts {
            s(l.net.to_string().as_bytes());
            s(&l.start.to_be_bytes());
            s(&l.seq.to_be_bytes());
            s(&l.at.to_be_bytes());
        }
        b
    }

    /// Whether it was written recently enough at `redis_now` to speak for its node.
    pub(crate) fn fresh(&self, redis_now: i64) -> bool {
        self.at >= redis_now.saturating_sub(MARK_FRESH_MS)
    }

    /// Whether this mark vouches for `r`, a record of its node, at `redis_now`.
    pub(crate) fn vouches(&self, r: &Record, redis_now: i64) -> Result<(), Refused> {
        if !self.fresh(redis_now) || r.start != self.start || (r.start, r.seq) <= self.cut {
            return Err(Refused::Unvouched);
        }
        // A lift voids its node's adds of the prefix up to it (the removal that lifted it,
        // numbered at the lift, is no add).
        if r.op == RecordOp::Add
            && self
                .lifts
                .iter()
                .any(|l| l.net == r.net && (r.start, r.seq) <= (l.start, l.seq))
        {
            return Err(Refused::Lifted);
        }
        Ok(())
    }
}

/// The lifts this process's mark carries (bounded by [`MARK_LIFTS`]).
#[derive(Debug, Default)]
pub struct Lifts {
    list: std::collections::VecDeque<Lift>,
    cut: (u64, u64),
    /// Lifts forgotten past the bound (the cut rose past them).
    pub(crate) forgotten: u64,
    /// Changed since the mark was last written.
    pub(crate) dirty: bool,
}

impl Lifts {
    /// Voids this process's records of `net` up to `(start, seq)`, lifted at `at` (Redis
    /// time); lifts older than `max_age_ms` go (no record they void is live any more).
    pub(crate) fn push(&mut self, net: IpNet, start: u64, seq: u64, at: i64, max_age_ms: i64) {
        let old = at.saturating_sub(max_age_ms);
        self.list.retain(|l| l.at >= old && l.net != net);
        if self.list.len() >= MARK_LIFTS
            && let Some(l) = self.list.pop_front()
        {
            self.cut = self.cut.max((l.start, l.seq));
            self.forgotten += 1;
        }
        self.list.push_back(Lift {
            net,
            start,
            seq,
            at,
        });
        self.dirty = true;
    }

    /// Lifts held now.
    pub fn len(&self) -> usize {
        self.list.len()
    }

    /// True when none is held.
    pub fn is_empty(&self) -> bool {
        self.list.is_empty()
    }
}

/// Most nodes whose last record is remembered (beyond, the least recently heard is forgotten:
/// counted).
pub(crate) const REPLAY_NODES: usize = 65_536;

/// The last `(start, seq)` seen from each node, for refusing replays.
#[derive(Debug, Default)]
pub(crate) struct Replay {
    last: hashbrown::HashMap<String, (u64, u64, u64)>,
    tick: u64,
    /// Nodes forgotten to stay within [`REPLAY_NODES`].
    pub(crate) forgotten: u64,
}

impl Replay {
    /// Remembers `(start, seq)` as seen from `node` unless a newer record of it is known (a
    /// snapshot's records: never refused, only raising the bar).
    pub(crate) fn raise(&mut self, node: String, start: u64, seq: u64) {
        self.tick += 1;
        let tick = self.tick;
        let full = self.last.len() >= REPLAY_NODES;
        match self.last.get_mut(node.as_str()) {
            Some(last) if (start, seq) > (last.0, last.1) => *last = (start, seq, tick),
            Some(_) => {}
            None if !full => {
                self.last.insert(node, (start, seq, tick));
            }
            None => {}
        }
    }

    /// True when a record of `r`'s node as new as `r` or newer was seen already.
    pub(crate) fn seen(&self, r: &Record) -> bool {
        self.last
            .get(r.node.as_str())
            .is_some_and(|last| (r.start, r.seq) <= (last.0, last.1))
    }

    /// True (and remembered) when `r` is newer than the last record of its node.
    pub(crate) fn fresh(&mut self, r: &Record) -> bool {
        self.tick += 1;
        let tick = self.tick;
        if let Some(last) = self.last.get_mut(r.node.as_str()) {
            if (r.start, r.seq) <= (last.0, last.1) {
                return false;
            }
            *last = (r.start, r.seq, tick);
            return true;
        }
        if self.last.len() >= REPLAY_NODES {
            // The node heard from longest ago goes: a scan, but only when the table is full.
            if let Some(old) = self
                .last
                .iter()
                .min_by_key(|(_, v)| v.2)
                .map(|(k, _)| k.clone())
            {
                self.last.remove(&old);
                self.forgotten += 1;
            }
        }
        self.last.insert(r.node.clone(), (r.start, r.seq, tick));
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::block::Evidence;
    use crate::fleet_key::FleetKey;

    fn key() -> DerivedKey {
        FleetKey::from_bytes(&[7u8; 32]).derive(KEY_PURPOSE)
    }

    fn entry() -> BlockEntry {
        BlockEntry::new(
            "192.0.2.7/32".parse().unwrap(),
            5_000,
            "flood",
            Origin::Operator,
            Evidence::Operator,
        )
    }

    #[test]
    fn signed_records_round_trip_and_every_field_is_covered() {
        let sealer = Sealer::new(Some(key()), "a", 1_000);
        let opener = Opener::new(Some(key()), false);
        let json = sealer.add(&entry(), 9_000);
        let r = opener.open(json.as_bytes()).unwrap();
        assert_eq!(
            (r.op, r.exp, r.node.as_str(), r.reason.as_str(), r.seq),
            (RecordOp::Add, 9_000, "a", "flood", 1)
        );
        assert_eq!(r.evidence, Some(Evidence::Operator));
        let got = r.to_entry(4_000, Origin::Peer);
        assert_eq!((got.expires_ms, got.origin), (5_000, Origin::Peer));
        assert_eq!((got.evidence, got.scope), (Evidence::Operator, Scope::All));
        // Any field changed breaks the tag.
        let v: serde_json::Value = serde_json::from_str(&json).unwrap();
        for (field, value) in [
            ("net", serde_json::json!("0.0.0.0/0")),
            ("exp", serde_json::json!(i64::MAX)),
            ("node", serde_json::json!("b")),
            ("seq", serde_json::json!(99)),
            ("start", serde_json::json!(2)),
            ("origin", serde_json::json!("local")),
            ("evidence", serde_json::json!("tcp")),
            ("scope", serde_json::json!("dns")),
            ("reason", serde_json::json!("x")),
            ("op", serde_json::json!("del")),
        ] {
            let mut forged = v.clone();
            forged[field] = value;
            let b = serde_json::to_vec(&forged).unwrap();
            assert_eq!(opener.open(&b), Err(Refused::BadTag), "{field}");
        }
        let mut unsigned = v.clone();
        unsigned.as_object_mut().unwrap().remove("tag");
        let b = serde_json::to_vec(&unsigned).unwrap();
        assert_eq!(opener.open(&b), Err(Refused::Unsigned));
        // Another fleet's key.
        let other = Opener::new(
            Some(FleetKey::from_bytes(&[8u8; 32]).derive(KEY_PURPOSE)),
            false,
        );
        assert_eq!(other.open(json.as_bytes()), Err(Refused::BadTag));
        // Unsigned records only where the operator said so.
        let plain = Sealer::new(None, "a", 1).del(&entry().net, Origin::Operator);
        assert_eq!(
            Opener::new(None, false).open(plain.as_bytes()),
            Err(Refused::Unsigned)
        );
        assert!(Opener::new(None, true).open(plain.as_bytes()).is_ok());
    }

    #[test]
    fn bounds_versions_and_packed_batches() {
        let opener = Opener::new(Some(key()), false);
        let big = format!("{{\"v\":2,\"reason\":\"{}\"}}", "x".repeat(2000));
        assert_eq!(opener.open(big.as_bytes()), Err(Refused::Oversized));
        assert_eq!(
            opener.open(br#"{"v":1,"op":"add","net":"10.0.0.0/8","node":"x"}"#),
            Err(Refused::Version)
        );
        assert_eq!(
            opener.open(br#"{"op":"add","net":"10.0.0.0/8","node":"x"}"#),
            Err(Refused::Version)
        );
        assert_eq!(opener.open(b"not json"), Err(Refused::Malformed));
        let sealer = Sealer::new(Some(key()), "a", 1);
        let packed = format!(
            "[{},{},{{}}]",
            sealer.add(&entry(), 1),
            sealer.del(&entry().net, Origin::Operator)
        );
        let got = opener.open_many(packed.as_bytes());
        assert_eq!(got.len(), 3);
        assert!(got[0].is_ok() && got[1].is_ok());
        assert!(got[2].is_err());
        assert_eq!(got[1].as_ref().unwrap().seq, 2);
        let huge = vec![b'['; MAX_FIELD_BYTES + 1];
        assert_eq!(opener.open_many(&huge), vec![Err(Refused::Oversized)]);
    }

    #[test]
    fn replays_are_refused_and_a_restart_is_not_one() {
        let opener = Opener::new(Some(key()), false);
        let first = Sealer::new(Some(key()), "a", 1_000);
        let r1 = opener.open(first.add(&entry(), 1).as_bytes()).unwrap();
        let r2 = opener.open(first.add(&entry(), 1).as_bytes()).unwrap();
        let mut replay = Replay::default();
        assert!(replay.fresh(&r1));
        assert!(replay.fresh(&r2));
        assert!(!replay.fresh(&r1), "an old record again");
        assert!(!replay.fresh(&r2), "the same record again");
        // A restart starts later: its first record is fresh.
        let again = Sealer::new(Some(key()), "a", 2_000);
        let r3 = opener.open(again.add(&entry(), 1).as_bytes()).unwrap();
        assert!(replay.fresh(&r3));
        assert!(!replay.fresh(&r2));
        // Other nodes are their own sequences.
        let b = Sealer::new(Some(key()), "b", 5);
        assert!(replay.fresh(&opener.open(b.add(&entry(), 1).as_bytes()).unwrap()));
    }

    #[test]
    fn a_mark_vouches_only_while_fresh_for_its_process_and_not_for_what_it_lifted() {
        let opener = Opener::new(Some(key()), false);
        let sealer = Sealer::new(Some(key()), "a", 1_000);
        let other: IpNet = "192.0.2.8/32".parse().unwrap();
        let lifted = opener.open(sealer.add(&entry(), 9_000).as_bytes()).unwrap();
        let mut kept_entry = entry();
        kept_entry.net = other;
        let kept = opener
            .open(sealer.add(&kept_entry, 9_000).as_bytes())
            .unwrap();
        let mut lifts = Lifts::default();
        let (now, day) = (1_000_000i64, 86_400_000i64);
        lifts.push(entry().net, 1_000, sealer.seq(), now, day);
        assert!(lifts.dirty);
        let mark = opener
            .open_mark(sealer.mark(now, &lifts).as_bytes())
            .unwrap();
        assert_eq!((mark.start, mark.seq, mark.lifts.len()), (1_000, 2, 1));
        assert_eq!(mark.vouches(&kept, now), Ok(()));
        assert_eq!(mark.vouches(&lifted, now), Err(Refused::Lifted));
        // Blocked again after the lift: vouched for.
        let again = opener.open(sealer.add(&entry(), 9_000).as_bytes()).unwrap();
        assert_eq!(mark.vouches(&again, now), Ok(()));
        // Stale: its node stopped writing it, or an older one was put back.
        assert_eq!(
            mark.vouches(&kept, now + MARK_FRESH_MS + 1),
            Err(Refused::Unvouched)
        );
        // Another process of the node: not this mark's to vouch for.
        let later = Sealer::new(Some(key()), "a", 2_000);
        let r = opener
            .open(later.add(&kept_entry, 9_000).as_bytes())
            .unwrap();
        assert_eq!(mark.vouches(&r, now), Err(Refused::Unvouched));
        // Every field is covered by the tag.
        let json = sealer.mark(now, &lifts);
        let v: serde_json::Value = serde_json::from_str(&json).unwrap();
        for (field, value) in [
            ("at", serde_json::json!(now + 1)),
            ("start", serde_json::json!(2_000)),
            ("seq", serde_json::json!(99)),
            ("node", serde_json::json!("b")),
            ("cut", serde_json::json!([0, 9])),
            ("lifts", serde_json::json!([])),
        ] {
            let mut forged = v.clone();
            forged[field] = value;
            let b = serde_json::to_vec(&forged).unwrap();
            assert_eq!(opener.open_mark(&b), Err(Refused::BadTag), "{field}");
        }
        let mut forged = v.clone();
        forged["lifts"][0]["net"] = serde_json::json!("192.0.2.9/32");
        assert_eq!(
            opener.open_mark(&serde_json::to_vec(&forged).unwrap()),
            Err(Refused::BadTag)
        );
        // A mark of the earlier kind (a copy of a record, which anyone who kept one can put
        // back) vouches for nothing, but still raises the replay table.
        let legacy = opener
            .open_mark(sealer.add(&entry(), 9_000).as_bytes())
            .unwrap();
        assert_eq!(legacy.vouches(&kept, now), Err(Refused::Unvouched));
        assert_eq!(legacy.seq, 4);
        assert_eq!(
            opener.open_mark(&vec![b' '; MAX_MARK_BYTES + 1]),
            Err(Refused::Oversized)
        );
    }

    #[test]
    fn lifts_are_bounded_and_the_cut_rises_past_the_forgotten() {
        let mut lifts = Lifts::default();
        let day = 86_400_000i64;
        for i in 0..(MARK_LIFTS as u64 + 10) {
            let net: IpNet = format!("10.{}.{}.0/24", i / 256, i % 256).parse().unwrap();
            lifts.push(net, 7, i + 1, 1_000, day);
        }
        assert_eq!(lifts.len(), MARK_LIFTS);
        assert_eq!((lifts.forgotten, lifts.cut), (10, (7, 10)));
        // A record at or below the cut is vouched for no more, whatever its prefix.
        let sealer = Sealer::new(Some(key()), "a", 7);
        let opener = Opener::new(Some(key()), false);
        let r = opener.open(sealer.add(&entry(), 9_000).as_bytes()).unwrap();
        let m = opener
            .open_mark(sealer.mark(1_000, &lifts).as_bytes())
            .unwrap();
        assert_eq!(m.vouches(&r, 1_000), Err(Refused::Unvouched));
        assert!(sealer.mark(1_000, &lifts).len() <= MAX_MARK_BYTES);
        // The same prefix lifted again is one lift; lifts older than any record's life go.
        let net: IpNet = "10.0.0.0/24".parse().unwrap();
        lifts.push(net, 7, 999, 1_000, day);
        lifts.push(net, 7, 1_000, 1_000, day);
        assert_eq!(lifts.list.iter().filter(|l| l.net == net).count(), 1);
        lifts.push(net, 7, 1_001, 1_000 + day + 1, day);
        assert_eq!(lifts.len(), 1);
    }
}
