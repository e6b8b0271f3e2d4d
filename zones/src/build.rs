//! Building a compiled [`Zone`] from records: ordering, empty non-terminals, RRsets, flags.
//!
//! Owners are kept as canonical sort keys from the start (labels from the root, lower
//! case), so ordering them is a byte-wise sort and creating the tree is one walk in that
//! order with a stack of ancestors: no hashing until the final index, which is built once
//! at its exact size. Records are bucketed by node with a counting sort.

use std::cmp::Ordering;
use std::path::PathBuf;
use std::sync::Arc;

use hashbrown::HashTable;

use crate::error::{Diagnostic, Location, SetSrc, Src, ZoneError};
use crate::name::display;
use crate::name::{self, Name};
use crate::rdata;
use crate::reader::Record;
use crate::rrtype::{self, t};
use crate::zone::{self, Node, NodeId, RRset, Zone, flags, hash_name};

/// Zones with fewer names are built on one thread (a thread costs more than it saves).
const PARALLEL_MIN_NAMES: usize = 4096;

/// One record waiting to be compiled (24 bytes).
#[derive(Clone, Copy)]
struct Pending {
    /// Owner run, then (after ordering) node id.
    owner: u32,
    ttl: u32,
    rdata_off: u32,
    line: u32,
    rtype: u16,
    covered: u16,
    rdata_len: u16,
    file: u16,
}

/// Collects records of one zone, then compiles them.
pub struct ZoneBuilder {
    apex: Name,
    apex_labels: usize,
    /// Canonical keys of owner runs relative to the apex (consecutive records with one
    /// owner share a run; the apex itself has the empty key).
    keys: Vec<u8>,
    runs: Vec<(u32, u32)>,
    last_owner: [u8; name::MAX_NAME_LEN],
    last_owner_len: usize,
    recs: Vec<Pending>,
    rdata: Vec<u8>,
    errors: Vec<(Src, String)>,
    max_errors: usize,
    more_errors: usize,
    too_big: bool,
}

/// A zone and what was noticed while building it.
#[derive(Debug)]
pub struct Built {
    /// The compiled zone.
    pub zone: Zone,
    /// Warnings (the zone loads regardless).
    pub warnings: Vec<Diagnostic>,
}

/// The builder's arenas address RDATA with 32-bit offsets.
const MAX_RDATA_BYTES: usize = u32::MAX as usize;

impl ZoneBuilder {
    /// A builder for the zone whose apex is `apex`.
    pub fn new(apex: &Name) -> ZoneBuilder {
        let apex = apex.to_lowercase();
        ZoneBuilder {
            apex_labels: apex.label_count(),
            apex,
            keys: Vec::new(),
            runs: Vec::new(),
            last_owner: [0; name::MAX_NAME_LEN],
            last_owner_len: 0,
            recs: Vec::new(),
            rdata: Vec::new(),
            errors: Vec::new(),
            max_errors: 100,
            more_errors: 0,
            too_big: false,
        }
    }

    /// Reserves room for a master file of `bytes` bytes (avoids regrowing big arenas).
    pub fn reserve_for_text(&mut self, bytes: u64) {
        let recs = (bytes / 24).min(1 << 26) as usize;
        self.recs.reserve(recs);
        self.rdata.reserve(recs * 8);
        self.runs.reserve(recs);
        self.keys.reserve(recs * 8);
    }

    /// Adds one record. Records outside the zone are errors reported by [`ZoneBuilder::finish`].
    pub fn add(&mut self, r: Record<'_>) {
        let n = r.owner.len();
        let same = n == self.last_owner_len
            && !self.runs.is_empty()
            && self.last_owner[..n].eq_ignore_ascii_case(r.owner);
        if !same {
            self.last_owner[..n].copy_from_slice(r.owner);
            self.last_owner[..n].make_ascii_lowercase();
            self.last_owner_len = n;
            if !name::is_subdomain(&self.last_owner[..n], self.apex.as_wire()) {
                if self.errors.len() >= self.max_errors {
                    self.more_errors += 1;
                } else {
                    let mut s = String::new();
                    let _ = name::write_presentation(r.owner, &mut s);
                    self.errors.push((
                        Src {
                            file: r.file,
                            line: r.line,
                        },
                        format!("record {s} is outside the zone {}", self.apex),
                    ));
                }
                // Force a new run for the next record.
                self.last_owner_len = 0;
                return;
            }
            let start = self.keys.len();
            name::canonical_key_below(&self.last_owner[..n], self.apex_labels, &mut self.keys);
            self.runs
                .push((start as u32, (self.keys.len() - start) as u32));
        }
        if self.rdata.len() + r.rdata.len() > MAX_RDATA_BYTES {
            self.too_big = true;
            return;
        }
        let covered = if r.rtype == t::RRSIG && r.rdata.len() >= 2 {
            u16::from_be_bytes([r.rdata[0], r.rdata[1]])
        } else {
            0
        };
        self.recs.push(Pending {
            owner: (self.runs.len() - 1) as u32,
            ttl: r.ttl,
            rdata_off: self.rdata.len() as u32,
            line: r.line,
            rtype: r.rtype,
            covered,
            rdata_len: r.rdata.len() as u16,
            file: r.file,
        });
        self.rdata.extend_from_slice(r.rdata);
        // Names in RDATA are kept as their canonical form has them (lower case for the RFC
        // 4034 §6.2 types), as Knot and NSD serve them; signatures cover that form anyway.
        if canonical_lowers(r.rtype) {
            let at = self.rdata.len() - r.rdata.len();
            rdata::to_canonical(r.rtype, &mut self.rdata[at..]);
        }
    }

    /// Records added so far.
    pub fn len(&self) -> usize {
        self.recs.len()
    }

    /// True when no record was added.
    pub fn is_empty(&self) -> bool {
        self.recs.is_empty()
    }

    /// Compiles the zone and checks it. `files` names the files that record file indexes
    /// refer to (from the reader's summary).
    pub fn finish(mut self, files: &[Arc<PathBuf>]) -> Result<Built, ZoneError> {
        let loc = |s: Src| Location {
            file: files
                .get(s.file as usize)
                .cloned()
                .unwrap_or_else(|| Arc::new(PathBuf::from("-"))),
            line: s.line,
            col: 0,
        };
        if self.too_big {
            self.errors.push((
                Src::default(),
                format!("zone holds more than {MAX_RDATA_BYTES} bytes of RDATA"),
            ));
        }
        if !self.errors.is_empty() {
            return Err(ZoneError {
                more: self.more_errors,
                errors: self
                    .errors
                    .iter()
                    .map(|(s, m)| Diagnostic {
                        at: loc(*s),
                        msg: m.clone(),
                    })
                    .collect(),
            });
        }
        let mut warnings = Vec::new();
        let (zone, srcs, dups) =
            self.compile(&mut |s, m| warnings.push(Diagnostic { at: loc(s), msg: m }));
        if dups > 0 {
            warnings.push(Diagnostic {
                at: loc(Src::default()),
                msg: format!("{dups} duplicate records ignored"),
            });
        }
        let mut errors = Vec::new();
        crate::validate::check(&zone, &srcs, &mut |sev, s, m| {
            let d = Diagnostic { at: loc(s), msg: m };
            match sev {
                crate::error::Severity::Error => errors.push(d),
                crate::error::Severity::Warning => warnings.push(d),
            }
        });
        if !errors.is_empty() {
            return Err(ZoneError { errors, more: 0 });
        }
        Ok(Built { zone, warnings })
    }

    fn key(&self, run: u32) -> &[u8] {
        let (o, l) = self.runs[run as usize];
        &self.keys[o as usize..(o + l) as usize]
    }

    fn compile(mut self, warn: &mut dyn FnMut(Src, String)) -> (Zone, Vec<SetSrc>, usize) {
        // 1. Owner runs in canonical order (keys are relative to the apex), with each key's
        //    first eight bytes as a number for speed.
        let skip = 0usize;
        let mut order: Vec<(u64, u32)> = (0..self.runs.len() as u32)
            .map(|r| {
                let k = self.key(r);
                let mut p = [0u8; 8];
                let n = k.len().min(8);
                p[..n].copy_from_slice(&k[..n]);
                (u64::from_be_bytes(p), r)
            })
            .collect();
        let cmp = |a: &(u64, u32), b: &(u64, u32)| {
            a.0.cmp(&b.0).then_with(|| self.key(a.1).cmp(self.key(b.1)))
        };
        if order.len() < PARALLEL_MIN_NAMES {
            order.sort_unstable_by(cmp);
        } else {
            // A big zone: each half sorted on its own core, then one merge.
            let mid = order.len() / 2;
            let (lo, hi) = order.split_at_mut(mid);
            std::thread::scope(|sc| {
                let h = sc.spawn(|| hi.sort_unstable_by(cmp));
                lo.sort_unstable_by(cmp);
                h.join().expect("sort thread");
            });
            let mut merged = Vec::with_capacity(order.len());
            let (mut i, mut j) = (0, mid);
            while i < mid && j < order.len() {
                if cmp(&order[j], &order[i]) == Ordering::Less {
                    merged.push(order[j]);
                    j += 1;
                } else {
                    merged.push(order[i]);
                    i += 1;
                }
            }
            merged.extend_from_slice(&order[i..mid]);
            merged.extend_from_slice(&order[j..]);
            order = merged;
        }

        // 2. Nodes in canonical order with empty non-terminals, by a walk with a stack of
        //    ancestors: (node id, key offset, key length). Owners holding only NSEC3 (and
        //    its RRSIG) directly below the apex go to the NSEC3 chain instead of the tree.
        let mut kinds = vec![0u8; self.runs.len()];
        for r in &self.recs {
            let n3 = r.rtype == t::NSEC3 || (r.rtype == t::RRSIG && r.covered == t::NSEC3);
            kinds[r.owner as usize] |= if n3 { 1 } else { 2 };
        }
        let apex_wire = self.apex.as_wire().to_vec();
        let mut z = Zone {
            apex: self.apex.clone(),
            names: Vec::with_capacity(self.keys.len() + (apex_wire.len() + 1) * (order.len() + 1)),
            nodes: Vec::with_capacity(order.len() + 1),
            rrsets: Vec::new(),
            data: Vec::new(),
            index: HashTable::new(),
            hasher: zone::Hasher::default(),
            serial: 0,
            neg_ttl: 0,
            records: 0,
            nsec3: None,
            nsec_prev: Vec::new(),
            max_labels: 0,
        };
        let mut n3: Vec<Node> = Vec::new();
        let mut run_node = vec![zone::NONE; self.runs.len()];
        push_node(&mut z, &apex_wire, zone::NONE);
        let mut stack: Vec<(NodeId, u32, u32)> = vec![(0, 0, skip as u32)];
        let mut wire = [0u8; name::MAX_NAME_LEN];
        let mut g = 0;
        while g < order.len() {
            // A group of runs with the same owner.
            let run = order[g].1;
            let mut h = g + 1;
            let mut kind = kinds[run as usize];
            while h < order.len() && self.key(order[h].1) == self.key(run) {
                kind |= kinds[order[h].1 as usize];
                h += 1;
            }
            let (koff, klen) = self.runs[run as usize];
            let key = self.key(run);
            let one_label_below_apex =
                key.len() > skip && key[skip..key.len() - 1].iter().all(|&c| c != 0);
            let id = if klen as usize == skip {
                0
            } else if kind == 1 && one_label_below_apex {
                let wl = key_to_wire(key, &apex_wire, &mut wire);
                let off = z.names.len() as u32;
                z.names.extend_from_slice(&wire[..wl]);
                n3.push(Node {
                    name_off: off,
                    parent: 0,
                    rrset_start: 0,
                    rrset_count: 0,
                    flags: 0,
                    name_len: wl as u8,
                    labels: name::label_count(&wire[..wl]) as u8,
                });
                NSEC3_ID | (n3.len() - 1) as NodeId
            } else {
                // Pop to the deepest ancestor on the stack.
                while let Some(&(_, o, l)) = stack.last() {
                    let l = l as usize;
                    if l <= key.len()
                        && (l == skip || self.keys[o as usize..o as usize + l] == key[..l])
                    {
                        break;
                    }
                    stack.pop();
                }
                let &(mut parent, _, base) = stack.last().expect("apex stays on the stack");
                // Labels between the ancestor and this name are empty non-terminals.
                let mut pos = base as usize;
                while pos < key.len() {
                    let end = pos + key[pos..].iter().position(|&c| c == 0).expect("separator") + 1;
                    let wl = key_to_wire(&key[..end], &apex_wire, &mut wire);
                    let id = push_node(&mut z, &wire[..wl], parent);
                    stack.push((id, koff, end as u32));
                    parent = id;
                    pos = end;
                }
                parent
            };
            for &(_, r) in &order[g..h] {
                run_node[r as usize] = id;
            }
            g = h;
        }
        drop(kinds);
        drop(order);
        drop(stack);
        self.keys = Vec::new();
        self.runs = Vec::new();

        // Records now point at buckets: tree nodes first, then NSEC3 owners.
        let tree = z.nodes.len() as NodeId;
        for r in self.recs.iter_mut() {
            let id = run_node[r.owner as usize];
            r.owner = if id & NSEC3_ID != 0 {
                tree + (id & !NSEC3_ID)
            } else {
                id
            };
        }
        drop(run_node);

        // The hash index needs only the names: build it on another thread while this one
        // sorts and encodes the records (steps 3 and 4).
        let names = std::mem::take(&mut z.names);
        let name_offs: Vec<u32> = z.nodes.iter().map(|n| n.name_off).collect();
        let hasher = z.hasher.clone();
        let (srcs, dups, index) = if name_offs.len() < PARALLEL_MIN_NAMES {
            // A small zone: a thread costs more than the index.
            let index = build_index(&names, &name_offs, &hasher);
            let (srcs, dups) = self.encode(&mut z, &mut n3, &names, warn);
            (srcs, dups, index)
        } else {
            std::thread::scope(|sc| {
                let indexer = sc.spawn(|| build_index(&names, &name_offs, &hasher));
                let (srcs, dups) = self.encode(&mut z, &mut n3, &names, warn);
                (srcs, dups, indexer.join().expect("index thread"))
            })
        };
        drop(name_offs);
        z.names = names;
        z.index = index;
        if !n3.is_empty() {
            z.nsec3 = Some(crate::nsec3::Nsec3Chain {
                nodes: n3,
                ..Default::default()
            });
        }
        dnssec_indexes(&mut z);

        // 5. SOA serial and negative TTL.
        if let Some(soa) = z.rrset(0, t::SOA).copied()
            && let Some((_, rdata)) = z.rrs(&soa).next()
            && rdata.len() >= 20
        {
            let n = rdata.len();
            let serial = u32::from_be_bytes(rdata[n - 20..n - 16].try_into().expect("4 bytes"));
            let minimum = u32::from_be_bytes(rdata[n - 4..].try_into().expect("4 bytes"));
            z.serial = serial;
            z.neg_ttl = soa.ttl.min(minimum);
        }
        z.names.shrink_to_fit();
        z.rrsets.shrink_to_fit();
        (z, srcs, dups)
    }

    /// Steps 3 and 4: records bucketed by node, RRsets encoded, flags set.
    fn encode(
        &mut self,
        z: &mut Zone,
        n3: &mut [Node],
        names: &[u8],
        warn: &mut dyn FnMut(Src, String),
    ) -> (Vec<SetSrc>, usize) {
        let name_of =
            |n: &Node| &names[n.name_off as usize..n.name_off as usize + n.name_len as usize];
        // 3. Records bucketed by node (counting sort), then by type and RDATA (in canonical form
        // since `add`: canonical order, RFC 4034 §6.3).
        let tree = z.nodes.len() as NodeId;
        let nodes = z.nodes.len() + n3.len();
        let mut start = vec![0u32; nodes + 1];
        for r in &self.recs {
            start[r.owner as usize + 1] += 1;
        }
        for i in 0..nodes {
            start[i + 1] += start[i];
        }
        let mut perm = vec![0u32; self.recs.len()];
        {
            let mut fill = start.clone();
            for (i, r) in self.recs.iter().enumerate() {
                let s = &mut fill[r.owner as usize];
                perm[*s as usize] = i as u32;
                *s += 1;
            }
        }
        let recs = &self.recs;
        let rdata_all = &self.rdata;
        let rd = |p: &Pending| {
            &rdata_all[p.rdata_off as usize..p.rdata_off as usize + p.rdata_len as usize]
        };
        for node in 0..nodes {
            let bucket = &mut perm[start[node] as usize..start[node + 1] as usize];
            if bucket.len() > 1 {
                bucket.sort_unstable_by(|&a, &b| {
                    let (x, y) = (&recs[a as usize], &recs[b as usize]);
                    (x.rtype, x.covered)
                        .cmp(&(y.rtype, y.covered))
                        .then_with(|| rd(x).cmp(rd(y)))
                        .then(a.cmp(&b))
                });
            }
        }
        drop(start);
        let mut srcs: Vec<SetSrc> = Vec::new();
        let mut dups = 0usize;
        z.rrsets.reserve(recs.len());
        z.data
            .reserve_exact(rdata_all.len() + recs.len() * zone::RR_HEAD);
        let mut i = 0;
        while i < perm.len() {
            let first = recs[perm[i] as usize];
            let mut j = i + 1;
            while j < perm.len() {
                let r = &recs[perm[j] as usize];
                if r.owner != first.owner || r.rtype != first.rtype || r.covered != first.covered {
                    break;
                }
                j += 1;
            }
            let group = &perm[i..j];
            // Records of one RRset with different TTLs all take the lowest (RFC 2181 §5.2,
            // what a resolver makes of them; Knot takes it for a lower one written later):
            // the first one written made a record served ten times longer than its file
            // said. RRSIGs keep their own.
            let lead_k = *group.iter().min().expect("non-empty");
            let lead = recs[lead_k as usize];
            let ttl = if first.rtype == t::RRSIG {
                lead.ttl
            } else {
                group
                    .iter()
                    .map(|&k| recs[k as usize].ttl)
                    .min()
                    .unwrap_or(lead.ttl)
            };
            if first.rtype != t::RRSIG && group.iter().any(|&k| recs[k as usize].ttl != ttl) {
                warn(
                    Src {
                        file: lead.file,
                        line: lead.line,
                    },
                    format!(
                        "TTLs differ inside the {} RRset of {}: all set to the lowest, {ttl} (RFC 2181 §5.2)",
                        rrtype::to_text(first.rtype),
                        display(if first.owner < tree {
                            name_of(&z.nodes[first.owner as usize])
                        } else {
                            name_of(&n3[(first.owner - tree) as usize])
                        })
                    ),
                );
            }
            let bucket = first.owner as usize;
            let node = if bucket < tree as usize {
                &mut z.nodes[bucket]
            } else {
                &mut n3[bucket - tree as usize]
            };
            if node.rrset_count == 0 {
                node.rrset_start = z.rrsets.len() as u32;
            }
            let data_off = z.data.len() as u32;
            let mut count = 0u16;
            let mut prev: Option<&[u8]> = None;
            for &k in group {
                let p = &recs[k as usize];
                let data = rd(p);
                if let Some(pv) = prev
                    && pv == data
                {
                    dups += 1;
                    continue;
                }
                prev = Some(data);
                z.data.extend_from_slice(&zone::QNAME_PTR);
                z.data.extend_from_slice(&p.rtype.to_be_bytes());
                z.data.extend_from_slice(&1u16.to_be_bytes());
                z.data.extend_from_slice(&ttl.to_be_bytes());
                z.data.extend_from_slice(&p.rdata_len.to_be_bytes());
                z.data.extend_from_slice(data);
                count = count.saturating_add(1);
            }
            let mut has_names = 0u16;
            rdata::names(first.rtype, rd(&first), &mut |_| has_names = 1);
            z.rrsets.push(RRset {
                rtype: first.rtype,
                covered: first.covered,
                count,
                names: has_names,
                ttl,
                data_off,
                data_len: z.data.len() as u32 - data_off,
            });
            let lead_src = Src {
                file: lead.file,
                line: lead.line,
            };
            let second = if count > 1 {
                group
                    .iter()
                    .filter(|&&k| rd(&recs[k as usize]) != rd(&lead))
                    .min()
                    .map_or(lead_src, |&k| Src {
                        file: recs[k as usize].file,
                        line: recs[k as usize].line,
                    })
            } else {
                lead_src
            };
            srcs.push(SetSrc {
                first: lead_src,
                second,
                order: lead_k,
            });
            z.records += count as usize;
            if bucket < tree as usize {
                z.nodes[bucket].rrset_count += 1;
            } else {
                n3[bucket - tree as usize].rrset_count += 1;
            }
            i = j;
        }
        drop(perm);
        self.recs = Vec::new();
        self.rdata = Vec::new();

        // 4. Flags, wildcard links and occlusion (parents come before children).
        for id in 0..z.nodes.len() {
            let mut f = z.nodes[id].flags;
            let (start, cnt) = (
                z.nodes[id].rrset_start as usize,
                z.nodes[id].rrset_count as usize,
            );
            if cnt == 0 {
                f |= flags::EMPTY;
            }
            for s in &z.rrsets[start..start + cnt] {
                match (s.rtype, s.covered) {
                    (t::NS, 0) if id != 0 => f |= flags::DELEG,
                    (t::DNAME, 0) => f |= flags::DNAME,
                    (t::CNAME, 0) => f |= flags::CNAME,
                    (t::DS, 0) => f |= flags::HAS_DS,
                    _ => {}
                }
            }
            let parent = z.nodes[id].parent;
            if parent != zone::NONE {
                let pf = z.nodes[parent as usize].flags;
                if pf & (flags::DELEG | flags::OCCLUDED | flags::DNAME) != 0 {
                    f |= flags::OCCLUDED;
                }
                let nm = name_of(&z.nodes[id]);
                if nm[0] == 1 && nm[1] == b'*' {
                    f |= flags::WILDCARD;
                    z.nodes[parent as usize].flags |= flags::HAS_WILDCARD;
                }
            }
            z.nodes[id].flags = f;
        }

        (srcs, dups)
    }
}

/// Marks an id as an index into the NSEC3 chain while building.
const NSEC3_ID: NodeId = 1 << 31;

/// Work done at load for DNSSEC answers: the NSEC3 chain's hashes and, per node, the
/// entries matching it and covering its wildcard; for NSEC zones, each node's nearest NSEC.
fn dnssec_indexes(z: &mut Zone) {
    if z.rrset(0, t::NSEC).is_some() {
        let mut last = zone::NONE;
        z.nsec_prev = (0..z.nodes.len() as NodeId)
            .map(|id| {
                if z.rrset(id, t::NSEC).is_some() {
                    last = id;
                }
                last
            })
            .collect();
    }
    let Some(mut chain) = z.nsec3.take() else {
        return;
    };
    let params = z
        .rrset(0, t::NSEC3PARAM)
        .and_then(|s| z.rrs(s).next())
        .and_then(|(_, rd)| crate::nsec3::Nsec3Params::from_rdata(rd))
        .or_else(|| {
            (0..chain.nodes.len()).find_map(|i| {
                let n = &chain.nodes[i];
                let sets = &z.rrsets
                    [n.rrset_start as usize..(n.rrset_start + n.rrset_count as u32) as usize];
                let s = sets.iter().find(|s| s.rtype == t::NSEC3)?;
                let (_, rd) = z.rrs(s).next()?;
                crate::nsec3::Nsec3Params::from_rdata(rd)
            })
        });
    // Owner hashes, decoded from the first label (chain order is hash order).
    chain.hashes = chain
        .nodes
        .iter()
        .map(|n| {
            let w = &z.names[n.name_off as usize..n.name_off as usize + n.name_len as usize];
            let mut h = [0u8; crate::nsec3::HASH_LEN];
            let mut buf = [0u8; 64];
            if let Some(crate::nsec3::HASH_LEN) =
                crate::nsec3::base32hex_decode(&w[1..1 + w[0] as usize], &mut buf)
            {
                h.copy_from_slice(&buf[..crate::nsec3::HASH_LEN]);
            }
            h
        })
        .collect();
    // The chain the parameters name answers; a zone may hold another being built or
    // retired (RFC 5155 §10.4), whose entries are served as data but never as proofs.
    if let Some(p) = &params {
        let ours = |i: usize| {
            let n = &chain.nodes[i];
            let sets =
                &z.rrsets[n.rrset_start as usize..(n.rrset_start + n.rrset_count as u32) as usize];
            sets.iter().filter(|s| s.rtype == t::NSEC3).any(|s| {
                z.rrs(s).any(|(_, rd)| {
                    crate::nsec3::Nsec3Params::from_rdata(rd).is_some_and(|q| {
                        (q.alg, q.iterations, &q.salt) == (p.alg, p.iterations, &p.salt)
                    })
                })
            })
        };
        let active: Vec<u32> = (0..chain.nodes.len())
            .filter(|&i| ours(i))
            .map(|i| i as u32)
            .collect();
        if active.len() != chain.nodes.len() {
            chain.active = Some(active);
        }
    }
    // A zone moving from NSEC to NSEC3 holds both chains: its NSEC3PARAM says NSEC3
    // answers (as Knot and NSD answer it).
    if z.rrset(0, t::NSEC3PARAM).is_some()
        && params.as_ref().is_some_and(|p| p.alg == 1)
        && chain.active.as_ref().is_none_or(|a| !a.is_empty())
    {
        z.nsec_prev = Vec::new();
    }
    if let Some(p) = params.as_ref().filter(|p| p.alg == 1) {
        // Hash every name (and its wildcard) once, on both cores.
        let n = z.nodes.len();
        let half = n / 2;
        let names = |r: std::ops::Range<usize>| -> (Vec<u32>, Vec<u32>) {
            let mut m = Vec::with_capacity(r.len());
            let mut w = Vec::with_capacity(r.len());
            let mut star = [0u8; name::MAX_NAME_LEN + 2];
            for id in r {
                let nm = z.node_name(id as NodeId);
                let h = p.hash(nm);
                m.push(chain.find_match(&h).map_or(zone::NONE, |i| i as u32));
                if nm.len() + 2 <= name::MAX_NAME_LEN {
                    star[0] = 1;
                    star[1] = b'*';
                    star[2..2 + nm.len()].copy_from_slice(nm);
                    let hw = p.hash(&star[..2 + nm.len()]);
                    w.push(chain.find_cover(&hw).map_or(zone::NONE, |i| i as u32));
                } else {
                    w.push(zone::NONE);
                }
            }
            (m, w)
        };
        let ((mut m1, mut w1), (m2, w2)) = if n < PARALLEL_MIN_NAMES {
            (names(0..half), names(half..n))
        } else {
            std::thread::scope(|sc| {
                let second = sc.spawn(|| names(half..n));
                let first = names(0..half);
                (first, second.join().expect("NSEC3 hashing thread"))
            })
        };
        m1.extend(m2);
        w1.extend(w2);
        chain.node_match = m1;
        chain.wildcard_cover = w1;
    }
    chain.params = params;
    z.nsec3 = Some(chain);
}

/// Builds the hash index over tree nodes: `name_offs[i]` is where node `i`'s name starts.
fn build_index(names: &[u8], name_offs: &[u32], hasher: &zone::Hasher) -> HashTable<NodeId> {
    let name = |i: NodeId| {
        let o = name_offs[i as usize] as usize;
        let l = name::wire_name_len(&names[o..]).unwrap_or(1);
        &names[o..o + l]
    };
    let mut index = HashTable::with_capacity(name_offs.len());
    for id in 0..name_offs.len() as NodeId {
        let h = hash_name(hasher, name(id));
        index.insert_unique(h, id, |&i| hash_name(hasher, name(i)));
    }
    index
}

/// Writes the wire name of a key relative to `apex` (the inverse of
/// [`name::canonical_key_below`]): the key's labels, then the apex.
fn key_to_wire(key: &[u8], apex: &[u8], out: &mut [u8; name::MAX_NAME_LEN]) -> usize {
    // Labels in the key run from the apex down; the wire name runs the other way.
    let mut label_bytes = 0usize;
    let mut i = 0;
    while i < key.len() {
        if key[i] == 1 {
            i += 1;
        }
        label_bytes += 1; // a label byte, or a separator that becomes a length byte
        i += 1;
    }
    let total = label_bytes + apex.len();
    out[label_bytes..total].copy_from_slice(apex);
    // Fill labels backwards from the apex, each label taken from the key in order.
    let mut end = label_bytes;
    let mut i = 0;
    while i < key.len() {
        let mut label = [0u8; name::MAX_LABEL_LEN];
        let mut l = 0;
        while key[i] != 0 {
            let c = if key[i] == 1 {
                i += 1;
                key[i] - 1
            } else {
                key[i]
            };
            label[l] = c;
            l += 1;
            i += 1;
        }
        i += 1;
        let s = end - l - 1;
        out[s] = l as u8;
        out[s + 1..s + 1 + l].copy_from_slice(&label[..l]);
        end = s;
    }
    debug_assert_eq!(end, 0);
    total
}

fn push_node(z: &mut Zone, wire: &[u8], parent: NodeId) -> NodeId {
    let id = z.nodes.len() as NodeId;
    let off = z.names.len() as u32;
    z.names.extend_from_slice(wire);
    let labels = name::label_count(wire) as u8;
    z.max_labels = z.max_labels.max(labels);
    z.nodes.push(Node {
        name_off: off,
        parent,
        rrset_start: 0,
        rrset_count: 0,
        flags: if parent == zone::NONE { flags::APEX } else { 0 },
        name_len: wire.len() as u8,
        labels,
    });
    id
}

/// Types whose canonical form lower-cases embedded names (RFC 4034 §6.2, RFC 6840 §5.1).
fn canonical_lowers(rtype: u16) -> bool {
    matches!(
        rtype,
        t::NS
            | t::MD
            | t::MF
            | t::CNAME
            | t::SOA
            | t::MB
            | t::MG
            | t::MR
            | t::PTR
            | t::MINFO
            | t::MX
            | t::RP
            | t::AFSDB
            | t::RT
            | t::SIG
            | t::PX
            | t::NXT
            | t::NAPTR
            | t::KX
            | t::SRV
            | t::DNAME
            | t::A6
            | t::RRSIG
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Owners in canonical order whatever their order in the file, with the big-zone sort
    /// (halves on two cores, then a merge) as with the small one.
    #[test]
    fn nodes_come_in_canonical_order_for_big_and_small_zones() {
        for n in [100usize, 3 * PARALLEL_MIN_NAMES] {
            let mut text = String::from(
                "$ORIGIN t.\n$TTL 60\n@ SOA ns h 1 1 1 1 1\n@ NS ns\nns A 192.0.2.1\n",
            );
            // A scrambled order, nested names and repeated owners far apart.
            for i in 0..n {
                let k = (i * 7919) % n;
                text.push_str(&format!(
                    "h{k}.d{} A 10.0.0.1\nd{} TXT \"x\"\n",
                    k % 13,
                    k % 13
                ));
            }
            let o: Name = "t.".parse().unwrap();
            let z = crate::load_bytes("t", text, &o, &crate::ReadOptions::new(&o))
                .unwrap()
                .zone;
            let names: Vec<Vec<u8>> = z.node_ids().map(|id| z.node_name(id).to_vec()).collect();
            let mut sorted = names.clone();
            sorted.sort_by(|a, b| {
                let (mut ka, mut kb) = (Vec::new(), Vec::new());
                name::canonical_key_below(a, 0, &mut ka);
                name::canonical_key_below(b, 0, &mut kb);
                ka.cmp(&kb)
            });
            assert_eq!(names, sorted, "{n} owners");
            assert_eq!(
                names.len(),
                n + 2 + 13,
                "{n} owners, 13 parents, apex and ns"
            );
        }
    }

    /// An RRset larger than any message loads with a warning naming its line (Knot and NSD
    /// serve such a zone, TC=1 to a query for it; BIND alone refuses it); one that fits
    /// loads without.
    #[test]
    fn an_rrset_too_large_for_any_message_is_warned_of() {
        let o: Name = "t.".parse().unwrap();
        let zone = |n: usize| {
            let mut text = String::from(
                "$ORIGIN t.\n$TTL 60\n@ SOA ns h 1 1 1 1 1\n@ NS ns\nns A 192.0.2.1\n",
            );
            for i in 0..n {
                text.push_str(&format!(
                    "x A 10.{}.{}.{}\n",
                    i >> 16,
                    (i >> 8) & 255,
                    i & 255
                ));
            }
            crate::load_bytes("big.zone", text, &o, &crate::ReadOptions::new(&o)).unwrap()
        };
        // 16 octets an A record with its owner compressed: 4,000 fit, 4,200 do not.
        let fits =
            |w: &[crate::Diagnostic]| !w.iter().any(|d| d.to_string().contains("does not fit"));
        assert!(fits(&zone(4_000).warnings));
        let big = zone(4_200);
        let w: Vec<String> = big.warnings.iter().map(|d| d.to_string()).collect();
        assert!(
            w.iter().any(|e| e.contains("big.zone:6:")
                && e.contains("A RRset at x.t.")
                && e.contains("does not fit")),
            "{w:?}"
        );
    }

    #[test]
    fn key_round_trip() {
        for (s, skip) in [
            ("example.com.", 0),
            ("a.b.example.com.", 2),
            ("\\000\\001x.y.", 1),
            (".", 0),
            ("*.z.", 1),
            ("a.b.c.", 0),
        ] {
            let n: Name = s.parse().unwrap();
            let n = n.to_lowercase();
            let mut k = Vec::new();
            name::canonical_key_below(n.as_wire(), skip, &mut k);
            let mut apex = n.as_wire();
            for _ in 0..n.label_count() - skip {
                apex = &apex[1 + apex[0] as usize..];
            }
            let mut w = [0u8; name::MAX_NAME_LEN];
            let l = key_to_wire(&k, apex, &mut w);
            assert_eq!(&w[..l], n.as_wire(), "{s}");
        }
    }
}
