//! Building a compiled [`Zone`] from records: ordering, empty non-terminals, RRsets, flags.

use std::cell::RefCell;
use std::cmp::Ordering;
use std::path::PathBuf;
use std::sync::Arc;

use hashbrown::HashTable;

use crate::error::{Diagnostic, Location, ZoneError};
use crate::name::{self, Name};
use crate::rdata;
use crate::reader::Record;
use crate::rrtype::{self, t};
use crate::zone::{self, Node, NodeId, RRset, Zone, flags, hash_name};

/// Where a record came from: file index and line.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Src {
    pub file: u16,
    pub line: u32,
}

#[derive(Clone, Copy)]
struct Pending {
    owner: u32,
    rtype: u16,
    covered: u16,
    ttl: u32,
    rdata_len: u16,
    file: u16,
    rdata_off: u64,
    line: u32,
    seq: u32,
}

/// Collects records of one zone, then compiles them.
pub struct ZoneBuilder {
    apex: Name,
    hasher: foldhash::fast::FixedState,
    owner_names: Vec<u8>,
    owner_spans: Vec<(u32, u8)>,
    owner_index: HashTable<u32>,
    last_owner: Option<u32>,
    recs: Vec<Pending>,
    rdata: Vec<u8>,
    errors: Vec<(Src, String)>,
    max_errors: usize,
    lower: [u8; name::MAX_NAME_LEN],
}

/// A zone and what was noticed while building it.
#[derive(Debug)]
pub struct Built {
    /// The compiled zone.
    pub zone: Zone,
    /// Warnings (the zone loads regardless).
    pub warnings: Vec<Diagnostic>,
}

impl ZoneBuilder {
    /// A builder for the zone whose apex is `apex`.
    pub fn new(apex: &Name) -> ZoneBuilder {
        ZoneBuilder {
            apex: apex.to_lowercase(),
            hasher: foldhash::fast::FixedState::with_seed(0x5eed_0f_da7a),
            owner_names: Vec::new(),
            owner_spans: Vec::new(),
            owner_index: HashTable::new(),
            last_owner: None,
            recs: Vec::new(),
            rdata: Vec::new(),
            errors: Vec::new(),
            max_errors: 50,
            lower: [0; name::MAX_NAME_LEN],
        }
    }

    fn owner_name(&self, id: u32) -> &[u8] {
        let (off, len) = self.owner_spans[id as usize];
        &self.owner_names[off as usize..off as usize + len as usize]
    }

    /// Adds one record. Records outside the zone are errors reported by [`ZoneBuilder::finish`].
    pub fn add(&mut self, r: Record<'_>) {
        let n = r.owner.len();
        self.lower[..n].copy_from_slice(r.owner);
        self.lower[..n].make_ascii_lowercase();
        let owner = match self.last_owner {
            Some(id) if self.owner_name(id) == &self.lower[..n] => id,
            _ => {
                if !name::is_subdomain(&self.lower[..n], self.apex.as_wire()) {
                    if self.errors.len() < self.max_errors {
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
                    return;
                }
                let h = hash_name(&self.hasher, &self.lower[..n]);
                let found = {
                    let names = &self.owner_names;
                    let spans = &self.owner_spans;
                    let lower = &self.lower[..n];
                    self.owner_index
                        .find(h, |&id| {
                            let (o, l) = spans[id as usize];
                            &names[o as usize..o as usize + l as usize] == lower
                        })
                        .copied()
                };
                match found {
                    Some(id) => id,
                    None => {
                        let id = self.owner_spans.len() as u32;
                        self.owner_spans
                            .push((self.owner_names.len() as u32, n as u8));
                        self.owner_names.extend_from_slice(&self.lower[..n]);
                        let names = &self.owner_names;
                        let spans = &self.owner_spans;
                        let hasher = &self.hasher;
                        self.owner_index.insert_unique(h, id, |&id| {
                            let (o, l) = spans[id as usize];
                            hash_name(hasher, &names[o as usize..o as usize + l as usize])
                        });
                        id
                    }
                }
            }
        };
        self.last_owner = Some(owner);
        let covered = if r.rtype == t::RRSIG && r.rdata.len() >= 2 {
            u16::from_be_bytes([r.rdata[0], r.rdata[1]])
        } else {
            0
        };
        let seq = self.recs.len() as u32;
        self.recs.push(Pending {
            owner,
            rtype: r.rtype,
            covered,
            ttl: r.ttl,
            rdata_len: r.rdata.len() as u16,
            file: r.file,
            rdata_off: self.rdata.len() as u64,
            line: r.line,
            seq,
        });
        self.rdata.extend_from_slice(r.rdata);
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
    pub fn finish(self, files: &[Arc<PathBuf>]) -> Result<Built, ZoneError> {
        let loc = |s: Src| Location {
            file: files
                .get(s.file as usize)
                .cloned()
                .unwrap_or_else(|| Arc::new(PathBuf::from("-"))),
            line: s.line,
            col: 0,
        };
        if !self.errors.is_empty() {
            return Err(ZoneError {
                truncated: self.errors.len() >= self.max_errors,
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
        let (zone, srcs, dups) = self.compile(&mut |s, m| {
            warnings.push(Diagnostic {
                at: loc(s),
                msg: m,
            })
        });
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
                crate::validate::Severity::Error => errors.push(d),
                crate::validate::Severity::Warning => warnings.push(d),
            }
        });
        if !errors.is_empty() {
            return Err(ZoneError {
                errors,
                truncated: false,
            });
        }
        Ok(Built { zone, warnings })
    }

    fn compile(mut self, warn: &mut dyn FnMut(Src, String)) -> (Zone, Vec<Src>, usize) {
        // 1. Owners in canonical order, by sort key.
        let mut keys: Vec<u8> = Vec::with_capacity(self.owner_names.len() + self.owner_spans.len());
        let mut key_spans: Vec<(u32, u32)> = Vec::with_capacity(self.owner_spans.len());
        for id in 0..self.owner_spans.len() as u32 {
            let start = keys.len();
            name::canonical_key(self.owner_name(id), &mut keys);
            key_spans.push((start as u32, (keys.len() - start) as u32));
        }
        let mut order: Vec<u32> = (0..self.owner_spans.len() as u32).collect();
        order.sort_unstable_by(|&a, &b| {
            let (ao, al) = key_spans[a as usize];
            let (bo, bl) = key_spans[b as usize];
            keys[ao as usize..(ao + al) as usize].cmp(&keys[bo as usize..(bo + bl) as usize])
        });
        drop(keys);
        drop(key_spans);

        // 2. Nodes in canonical order, with empty non-terminals and the apex first.
        let apex_wire = self.apex.as_wire().to_vec();
        let mut z = Zone {
            apex: self.apex.clone(),
            names: Vec::with_capacity(self.owner_names.len() + apex_wire.len()),
            nodes: Vec::with_capacity(self.owner_spans.len() + 1),
            rrsets: Vec::new(),
            data: Vec::new(),
            index: HashTable::with_capacity(self.owner_spans.len() + 1),
            hasher: self.hasher,
            serial: 0,
            neg_ttl: 0,
            records: 0,
            nsec3: None,
        };
        let mut owner_node = vec![zone::NONE; self.owner_spans.len()];
        push_node(&mut z, &apex_wire, zone::NONE);
        let mut chain: Vec<&[u8]> = Vec::with_capacity(16);
        for &oid in &order {
            let (off, len) = self.owner_spans[oid as usize];
            let wire = &self.owner_names[off as usize..off as usize + len as usize];
            if wire == apex_wire.as_slice() {
                owner_node[oid as usize] = 0;
                continue;
            }
            // Find the nearest existing ancestor; create the missing ones top-down.
            chain.clear();
            let mut cur = &wire[1 + wire[0] as usize..];
            let parent = loop {
                if let Some(id) = z.find(cur) {
                    break id;
                }
                chain.push(cur);
                cur = &cur[1 + cur[0] as usize..];
            };
            let mut parent = parent;
            for anc in chain.iter().rev() {
                parent = push_node(&mut z, anc, parent);
            }
            owner_node[oid as usize] = push_node(&mut z, wire, parent);
        }
        drop(order);

        // 3. Records grouped by (node, type, covered), RRs in canonical RDATA order.
        for r in self.recs.iter_mut() {
            r.owner = owner_node[r.owner as usize];
        }
        drop(owner_node);
        let rdata_all = std::mem::take(&mut self.rdata);
        let rd = |p: &Pending| &rdata_all[p.rdata_off as usize..p.rdata_off as usize + p.rdata_len as usize];
        self.recs.sort_unstable_by(|a, b| {
            (a.owner, a.rtype, a.covered)
                .cmp(&(b.owner, b.rtype, b.covered))
                .then_with(|| rdata_cmp(a.rtype, rd(a), rd(b)))
        });
        let mut srcs: Vec<Src> = Vec::new();
        let mut dups = 0usize;
        let mut i = 0;
        let recs = &self.recs;
        z.rrsets.reserve(recs.len());
        z.data.reserve(rdata_all.len() + recs.len() * zone::RR_HEAD);
        while i < recs.len() {
            let first = recs[i];
            let mut j = i + 1;
            while j < recs.len()
                && recs[j].owner == first.owner
                && recs[j].rtype == first.rtype
                && recs[j].covered == first.covered
            {
                j += 1;
            }
            let group = &recs[i..j];
            // The TTL of the first record in file order wins (as Knot does).
            let lead = group.iter().min_by_key(|p| p.seq).copied().unwrap_or(first);
            let ttl = lead.ttl;
            if group.iter().any(|p| p.ttl != ttl) && first.rtype != t::RRSIG {
                warn(
                    Src {
                        file: lead.file,
                        line: lead.line,
                    },
                    format!(
                        "TTLs differ inside the {} RRset of {}: all set to {ttl}",
                        rrtype::to_text(first.rtype),
                        display(z.node_name(first.owner))
                    ),
                );
            }
            let node = first.owner as usize;
            if z.nodes[node].rrset_count == 0 {
                z.nodes[node].rrset_start = z.rrsets.len() as u32;
            }
            let data_off = z.data.len() as u32;
            let mut count = 0u16;
            let mut prev: Option<&[u8]> = None;
            for p in group {
                let data = rd(p);
                if let Some(pv) = prev
                    && rdata_cmp(p.rtype, pv, data) == Ordering::Equal
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
            srcs.push(Src {
                file: lead.file,
                line: lead.line,
            });
            z.records += count as usize;
            z.nodes[node].rrset_count += 1;
            i = j;
        }
        drop(rdata_all);
        self.recs = Vec::new();

        // 4. Flags, wildcard links and occlusion (parents come before children).
        for id in 0..z.nodes.len() {
            let mut f = z.nodes[id].flags;
            let (start, cnt) = (z.nodes[id].rrset_start as usize, z.nodes[id].rrset_count as usize);
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
                let nm = z.node_name(id as NodeId);
                if nm[0] == 1 && nm[1] == b'*' {
                    f |= flags::WILDCARD;
                    z.nodes[parent as usize].wildcard = id as NodeId;
                }
            }
            z.nodes[id].flags = f;
        }

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
        z.nodes.shrink_to_fit();
        z.rrsets.shrink_to_fit();
        z.data.shrink_to_fit();
        (z, srcs, dups)
    }
}

fn push_node(z: &mut Zone, wire: &[u8], parent: NodeId) -> NodeId {
    let id = z.nodes.len() as NodeId;
    let off = z.names.len() as u32;
    z.names.extend_from_slice(wire);
    z.nodes.push(Node {
        name_off: off,
        parent,
        rrset_start: 0,
        wildcard: zone::NONE,
        rrset_count: 0,
        flags: if parent == zone::NONE { flags::APEX } else { 0 },
        name_len: wire.len() as u8,
        labels: name::label_count(wire) as u8,
    });
    let h = hash_name(&z.hasher, wire);
    let names = &z.names;
    let nodes = &z.nodes;
    let hasher = &z.hasher;
    z.index.insert_unique(h, id, |&i| {
        let n = &nodes[i as usize];
        hash_name(
            hasher,
            &names[n.name_off as usize..n.name_off as usize + n.name_len as usize],
        )
    });
    id
}

thread_local! {
    static CANON: RefCell<(Vec<u8>, Vec<u8>)> = const { RefCell::new((Vec::new(), Vec::new())) };
}

/// Compares RDATA in canonical form (RFC 4034 §6.3): names of the §6.2 types lower-cased.
fn rdata_cmp(rtype: u16, a: &[u8], b: &[u8]) -> Ordering {
    if !canonical_lowers(rtype) {
        return a.cmp(b);
    }
    CANON.with(|c| {
        let (ca, cb) = &mut *c.borrow_mut();
        ca.clear();
        ca.extend_from_slice(a);
        cb.clear();
        cb.extend_from_slice(b);
        rdata::to_canonical(rtype, ca);
        rdata::to_canonical(rtype, cb);
        ca.as_slice().cmp(cb.as_slice())
    })
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

pub(crate) fn display(wire: &[u8]) -> String {
    let mut s = String::new();
    let _ = name::write_presentation(wire, &mut s);
    s
}
