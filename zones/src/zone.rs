//! The compiled zone: an immutable tree of names built once per load, read by the query path.
//!
//! Nodes are kept in canonical order (RFC 4034 §6.1) with empty non-terminals made explicit;
//! a hash index over lower-cased wire names finds a node in one probe. A lookup walks the
//! query name's suffixes from the longest down, so the exact node, the closest encloser, the
//! wildcard and the zone cut are found in O(labels) probes without allocating.
//!
//! Every RRset is stored already encoded for the answer section: each RR as
//! `C0 0C | TYPE | CLASS | TTL | RDLENGTH | RDATA`, the owner being a compression pointer to
//! the question name (offset 12). Answering an exact match is copying these bytes; other
//! owners patch the two pointer bytes.

use std::hash::BuildHasher;

use hashbrown::HashTable;

use crate::name::{self, Name};
use crate::rrtype::t;

pub use crate::node::{NONE, Node, NodeId, flags};

/// The compression pointer to the question name that starts every stored RR.
pub const QNAME_PTR: [u8; 2] = [0xC0, 0x0C];
/// Bytes before the RDATA of a stored RR: pointer, type, class, TTL, RDLENGTH.
pub const RR_HEAD: usize = 12;

/// One RRset, encoded for the answer section.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RRset {
    /// Type.
    pub rtype: u16,
    /// For RRSIG: the type covered; 0 otherwise.
    pub covered: u16,
    /// Number of RRs.
    pub count: u16,
    pub(crate) names: u16,
    /// TTL (the same for every RR).
    pub ttl: u32,
    pub(crate) data_off: u32,
    pub(crate) data_len: u32,
}

impl RRset {
    /// True when the RDATA holds domain names (compressible or used for additional data).
    pub fn has_names(&self) -> bool {
        self.names != 0
    }
}

/// What a lookup of a name found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Lookup {
    /// The name exists (possibly empty) and is authoritative.
    Exact(NodeId),
    /// The name is at or below a zone cut: `cut` holds the NS. `exact` when the name is the cut.
    Delegation {
        /// The topmost zone cut above or at the name.
        cut: NodeId,
        /// The name is the cut itself (DS is then answered from this zone).
        exact: bool,
    },
    /// The name is below a DNAME owned by `node` (RFC 6672 substitution applies).
    Dname(NodeId),
    /// The name does not exist, and `*.closest_encloser` does: synthesise from it.
    Wildcard {
        /// The closest encloser.
        closest_encloser: NodeId,
        /// The wildcard node.
        wildcard: NodeId,
    },
    /// The name does not exist.
    NxDomain {
        /// The closest encloser.
        closest_encloser: NodeId,
    },
}

/// Seeded per zone: an uploaded zone cannot be built to crowd one part of the index.
pub(crate) type Hasher = foldhash::fast::RandomState;

/// A compiled zone.
pub struct Zone {
    pub(crate) apex: Name,
    pub(crate) names: Vec<u8>,
    pub(crate) nodes: Vec<Node>,
    pub(crate) rrsets: Vec<RRset>,
    pub(crate) data: Vec<u8>,
    pub(crate) index: HashTable<NodeId>,
    pub(crate) hasher: Hasher,
    pub(crate) serial: u32,
    pub(crate) neg_ttl: u32,
    pub(crate) records: usize,
    pub(crate) nsec3: Option<crate::nsec3::Nsec3Chain>,
    /// For a zone signed with NSEC: per node, the node at or before it (canonical order)
    /// that owns an NSEC; empty otherwise.
    pub(crate) nsec_prev: Vec<NodeId>,
    /// Labels of the deepest node: a lookup starts at the suffix of that many labels (a
    /// name of 127 labels costs no more probes than the zone is deep).
    pub(crate) max_labels: u8,
}

impl std::fmt::Debug for Zone {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Zone")
            .field("apex", &self.apex)
            .field("serial", &self.serial)
            .field("nodes", &self.nodes.len())
            .field("records", &self.records)
            .finish()
    }
}

/// A node's name hash: the same function for building and for lookups.
#[inline]
pub(crate) fn hash_name(h: &Hasher, name: &[u8]) -> u64 {
    h.hash_one(name)
}

impl Zone {
    /// The apex name (lower case).
    pub fn apex(&self) -> &Name {
        &self.apex
    }

    /// The SOA serial.
    pub fn serial(&self) -> u32 {
        self.serial
    }

    /// Gives the SOA the serial `serial` (a zone not yet served: its answers are made from
    /// the records as stored). False when the zone has no SOA to change.
    pub fn set_serial(&mut self, serial: u32) -> bool {
        let Some(s) = self.rrset(self.apex_node(), crate::rrtype::t::SOA).copied() else {
            return false;
        };
        let at = s.data_off as usize + RR_HEAD;
        let end = (s.data_off + s.data_len) as usize;
        // After MNAME and RNAME (uncompressed as stored).
        let rd = &self.data[at..end];
        let mut i = 0;
        for _ in 0..2 {
            loop {
                let Some(&l) = rd.get(i) else { return false };
                i += 1 + l as usize;
                if l == 0 {
                    break;
                }
            }
        }
        if i + 4 > rd.len() {
            return false;
        }
        self.data[at + i..at + i + 4].copy_from_slice(&serial.to_be_bytes());
        self.serial = serial;
        true
    }

    /// Number of records (RRSIGs included, duplicates collapsed).
    pub fn record_count(&self) -> usize {
        self.records
    }

    /// Number of nodes, empty non-terminals included.
    pub fn node_count(&self) -> usize {
        self.nodes.len()
    }

    /// The TTL of negative answers: min(SOA TTL, SOA MINIMUM) (RFC 2308 §5).
    pub fn negative_ttl(&self) -> u32 {
        self.neg_ttl
    }

    /// The apex node.
    pub fn apex_node(&self) -> NodeId {
        0
    }

    /// The node with this id.
    #[inline]
    pub fn node(&self, id: NodeId) -> &Node {
        &self.nodes[id as usize]
    }

    /// The lower-case wire name of a node.
    #[inline]
    pub fn node_name(&self, id: NodeId) -> &[u8] {
        let n = &self.nodes[id as usize];
        &self.names[n.name_off as usize..n.name_off as usize + n.name_len as usize]
    }

    /// All node ids in canonical order.
    pub fn node_ids(&self) -> impl Iterator<Item = NodeId> + '_ {
        0..self.nodes.len() as NodeId
    }

    /// The RRsets of a node, sorted by type (RRSIG sets by type covered).
    #[inline]
    pub fn rrsets(&self, id: NodeId) -> &[RRset] {
        let n = &self.nodes[id as usize];
        &self.rrsets[n.rrset_start as usize..n.rrset_start as usize + n.rrset_count as usize]
    }

    /// The RRset of type `rtype` at a node.
    #[inline]
    pub fn rrset(&self, id: NodeId, rtype: u16) -> Option<&RRset> {
        self.rrsets(id)
            .iter()
            .find(|s| s.rtype == rtype && s.covered == 0)
    }

    /// The RRSIG RRset covering `covered` at a node.
    #[inline]
    pub fn rrsig(&self, id: NodeId, covered: u16) -> Option<&RRset> {
        self.rrsets(id)
            .iter()
            .find(|s| s.rtype == t::RRSIG && s.covered == covered)
    }

    /// The stored RRs of an RRset: see the module doc for the layout.
    #[inline]
    pub fn wire(&self, s: &RRset) -> &[u8] {
        &self.data[s.data_off as usize..(s.data_off + s.data_len) as usize]
    }

    /// Iterates the RRs of an RRset as (RR bytes as stored, RDATA).
    pub fn rrs<'a>(&'a self, s: &RRset) -> RrIter<'a> {
        RrIter { data: self.wire(s) }
    }

    /// The node of a name (lower-case wire format), if it exists.
    #[inline]
    pub fn find(&self, name_lower: &[u8]) -> Option<NodeId> {
        let h = hash_name(&self.hasher, name_lower);
        self.index
            .find(h, |&id| self.node_name(id) == name_lower)
            .copied()
    }

    /// Looks a name up. `qname_lower` is the lower-case wire name, `label_offs` the offset
    /// of each of its labels (leftmost first). The name must be at or below the apex.
    pub fn lookup(&self, qname_lower: &[u8], label_offs: &[u8]) -> Lookup {
        let apex_labels = self.nodes[0].labels as usize;
        let q_labels = label_offs.len();
        debug_assert!(q_labels >= apex_labels);
        let mut found = 0;
        let mut stripped = q_labels - apex_labels;
        // Suffixes deeper than any node cannot be one.
        let skip = q_labels.saturating_sub(self.max_labels as usize);
        for (i, &off) in label_offs[..q_labels - apex_labels]
            .iter()
            .enumerate()
            .skip(skip)
        {
            if let Some(id) = self.find(&qname_lower[off as usize..]) {
                found = id;
                stripped = i;
                break;
            }
        }
        // Falls through with found = apex when nothing below the apex matched.
        let node = self.node(found);
        if node.has(flags::OCCLUDED) {
            // Glue or occluded data: the answer comes from the cut (or DNAME) above.
            let mut id = found;
            while self.node(id).has(flags::OCCLUDED) {
                id = self.node(id).parent;
            }
            return if self.node(id).has(flags::DELEG) {
                Lookup::Delegation {
                    cut: id,
                    exact: false,
                }
            } else {
                Lookup::Dname(id)
            };
        }
        if node.has(flags::DELEG) {
            return Lookup::Delegation {
                cut: found,
                exact: stripped == 0,
            };
        }
        if stripped == 0 {
            return Lookup::Exact(found);
        }
        if node.has(flags::DNAME) {
            return Lookup::Dname(found);
        }
        match self.wildcard_of(found) {
            Some(w) => Lookup::Wildcard {
                closest_encloser: found,
                wildcard: w,
            },
            None => Lookup::NxDomain {
                closest_encloser: found,
            },
        }
    }

    /// The `*` child of a node, if it has one (one probe, only when the flag says so).
    #[inline]
    pub fn wildcard_of(&self, id: NodeId) -> Option<NodeId> {
        if !self.node(id).has(flags::HAS_WILDCARD) {
            return None;
        }
        let name = self.node_name(id);
        let mut buf = [0u8; name::MAX_NAME_LEN];
        buf[0] = 1;
        buf[1] = b'*';
        buf[2..2 + name.len()].copy_from_slice(name);
        self.find(&buf[..2 + name.len()])
    }

    /// Convenience lookup of a [`Name`] (allocates; not for the query path).
    pub fn lookup_name(&self, name: &Name) -> Lookup {
        let lower = name.to_lowercase();
        let mut offs = [0u8; 128];
        let n = name::label_offsets(lower.as_wire(), &mut offs);
        self.lookup(lower.as_wire(), &offs[..n])
    }

    /// The canonical predecessor-or-equal node of a name: the node whose name is the
    /// greatest not after `name_lower` (for NSEC proofs).
    pub fn canonical_floor(&self, name_lower: &[u8]) -> NodeId {
        let mut lo = 0usize;
        let mut hi = self.nodes.len();
        // nodes[0] (apex) is <= every name in the zone.
        while hi - lo > 1 {
            let mid = (lo + hi) / 2;
            if name::canonical_cmp(self.node_name(mid as NodeId), name_lower)
                != std::cmp::Ordering::Greater
            {
                lo = mid;
            } else {
                hi = mid;
            }
        }
        lo as NodeId
    }

    /// The NSEC3 chain, when the zone is signed with NSEC3.
    pub fn nsec3(&self) -> Option<&crate::nsec3::Nsec3Chain> {
        self.nsec3.as_ref()
    }

    /// True when the zone is signed with NSEC (an NSEC chain from the apex).
    pub fn has_nsec(&self) -> bool {
        !self.nsec_prev.is_empty()
    }

    /// For an NSEC-signed zone: the node whose NSEC covers or matches `name_lower` (the
    /// nearest NSEC owner at or before it in canonical order).
    pub fn nsec_covering(&self, name_lower: &[u8]) -> Option<NodeId> {
        let f = self.canonical_floor(name_lower);
        self.nsec_prev
            .get(f as usize)
            .copied()
            .filter(|&n| n != NONE)
    }

    /// The `i`-th NSEC3 owner's node (its RRsets, name).
    pub fn nsec3_node(&self, i: usize) -> &Node {
        &self.nsec3.as_ref().expect("NSEC3 chain").nodes[i]
    }

    /// Bytes held by the compiled structure (for the memory figures).
    pub fn memory_bytes(&self) -> usize {
        self.names.capacity()
            + self.nodes.capacity() * std::mem::size_of::<Node>()
            + self.rrsets.capacity() * std::mem::size_of::<RRset>()
            + self.data.capacity()
            + self.index.capacity() * (std::mem::size_of::<NodeId>() + 1)
            + self.nsec3.as_ref().map_or(0, |c| c.memory_bytes())
            + self.nsec_prev.capacity() * 4
    }

    /// The owner name of the `i`-th NSEC3 owner (hash order).
    pub fn nsec3_name(&self, i: usize) -> &[u8] {
        let n = &self.nsec3.as_ref().expect("NSEC3 chain").nodes[i];
        &self.names[n.name_off as usize..n.name_off as usize + n.name_len as usize]
    }

    /// The RRsets of the `i`-th NSEC3 owner (NSEC3 and its RRSIG).
    pub fn nsec3_rrsets(&self, i: usize) -> &[RRset] {
        let n = &self.nsec3.as_ref().expect("NSEC3 chain").nodes[i];
        &self.rrsets[n.rrset_start as usize..n.rrset_start as usize + n.rrset_count as usize]
    }

    /// Every record, SOA first, then the tree in canonical order, then the NSEC3 chain:
    /// (owner, type, TTL, RDATA).
    pub fn records(&self) -> impl Iterator<Item = (&[u8], u16, u32, &[u8])> + '_ {
        let soa = self
            .rrset(0, t::SOA)
            .map(|s| (self.node_name(0), s))
            .into_iter();
        let rest = self.node_ids().flat_map(move |id| {
            self.rrsets(id)
                .iter()
                .filter(move |s| !(id == 0 && s.rtype == t::SOA))
                .map(move |s| (self.node_name(id), s))
        });
        let n3 = (0..self.nsec3.as_ref().map_or(0, |c| c.len())).flat_map(move |i| {
            self.nsec3_rrsets(i)
                .iter()
                .map(move |s| (self.nsec3_name(i), s))
        });
        soa.chain(rest).chain(n3).flat_map(move |(owner, s)| {
            self.rrs(s)
                .map(move |(_, rdata)| (owner, s.rtype, s.ttl, rdata))
        })
    }
}

/// Iterator over the stored RRs of one RRset.
pub struct RrIter<'a> {
    data: &'a [u8],
}

impl<'a> Iterator for RrIter<'a> {
    /// (the whole stored RR, its RDATA)
    type Item = (&'a [u8], &'a [u8]);
    #[inline]
    fn next(&mut self) -> Option<Self::Item> {
        if self.data.len() < RR_HEAD {
            return None;
        }
        let rdlen = u16::from_be_bytes([self.data[10], self.data[11]]) as usize;
        let (rr, rest) = self.data.split_at(RR_HEAD + rdlen);
        self.data = rest;
        Some((rr, &rr[RR_HEAD..]))
    }
}

/// True when SOA serial `a` is newer than `b` in serial number arithmetic (RFC 1982).
pub fn serial_gt(a: u32, b: u32) -> bool {
    a != b && (a.wrapping_sub(b) as i32) > 0
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{ReadOptions, load_bytes};

    const ZONE: &str = "\
$TTL 3600
@       IN SOA ns1 hostmaster 2024010101 7200 3600 1209600 300
        NS ns1
        NS ns2.other.net.
ns1     A 192.0.2.1
www     A 192.0.2.10
        A 192.0.2.11
WWW     A 192.0.2.10
a.b.c   TXT \"deep\"
*.wild  A 192.0.2.20
x.wild  TXT \"exists\"
sub     NS ns.sub
ns.sub  A 192.0.2.30
deep.below.sub A 192.0.2.31
dn      DNAME target.example.
cn      CNAME www
";

    fn zone() -> Zone {
        let origin: Name = "example.com.".parse().unwrap();
        load_bytes("t.zone", ZONE, &origin, &ReadOptions::new(&origin))
            .map_err(|e| e.to_string())
            .unwrap()
            .zone
    }

    fn id(z: &Zone, s: &str) -> NodeId {
        let n: Name = s.parse().unwrap();
        z.find(n.to_lowercase().as_wire()).unwrap()
    }

    fn look(z: &Zone, s: &str) -> Lookup {
        z.lookup_name(&s.parse().unwrap())
    }

    #[test]
    fn structure() {
        let z = zone();
        assert_eq!(z.serial(), 2024010101);
        assert_eq!(z.negative_ttl(), 300);
        // 2 NS + SOA + ns1 + 2 www (duplicate collapsed) + TXT + wild A + TXT + sub NS + glue
        // + deep glue + DNAME + CNAME = 14
        assert_eq!(z.record_count(), 14);
        // Empty non-terminals exist.
        assert!(z.node(id(&z, "b.c.example.com.")).has(flags::EMPTY));
        assert!(z.node(id(&z, "c.example.com.")).has(flags::EMPTY));
        assert!(
            z.node(id(&z, "below.sub.example.com."))
                .has(flags::OCCLUDED)
        );
        let www = id(&z, "www.example.com.");
        let a = z.rrset(www, t::A).unwrap();
        assert_eq!(a.count, 2);
        let rrs: Vec<_> = z.rrs(a).collect();
        assert_eq!(rrs[0].0[..2], QNAME_PTR);
        assert_eq!(rrs[0].1, &[192, 0, 2, 10]);
        // Canonical order: each node name sorts after the previous.
        let names: Vec<Vec<u8>> = z.node_ids().map(|i| z.node_name(i).to_vec()).collect();
        for w in names.windows(2) {
            assert_eq!(name::canonical_cmp(&w[0], &w[1]), std::cmp::Ordering::Less);
        }
    }

    #[test]
    fn lookups() {
        let z = zone();
        assert_eq!(
            look(&z, "WWW.example.com."),
            Lookup::Exact(id(&z, "www.example.com."))
        );
        assert_eq!(look(&z, "example.com."), Lookup::Exact(0));
        assert_eq!(
            look(&z, "b.c.example.com."),
            Lookup::Exact(id(&z, "b.c.example.com."))
        );
        assert_eq!(
            look(&z, "nope.example.com."),
            Lookup::NxDomain {
                closest_encloser: 0
            }
        );
        assert_eq!(
            look(&z, "z.b.c.example.com."),
            Lookup::NxDomain {
                closest_encloser: id(&z, "b.c.example.com.")
            }
        );
        let wild = id(&z, "wild.example.com.");
        assert_eq!(
            look(&z, "q.r.wild.example.com."),
            Lookup::Wildcard {
                closest_encloser: wild,
                wildcard: id(&z, "*.wild.example.com.")
            }
        );
        // An existing name under the wildcard's parent is not synthesised.
        assert_eq!(
            look(&z, "x.wild.example.com."),
            Lookup::Exact(id(&z, "x.wild.example.com."))
        );
        // Below an existing name that is not the wildcard parent: no wildcard.
        assert_eq!(
            look(&z, "y.x.wild.example.com."),
            Lookup::NxDomain {
                closest_encloser: id(&z, "x.wild.example.com.")
            }
        );
        let sub = id(&z, "sub.example.com.");
        assert_eq!(
            look(&z, "sub.example.com."),
            Lookup::Delegation {
                cut: sub,
                exact: true
            }
        );
        assert_eq!(
            look(&z, "ns.sub.example.com."),
            Lookup::Delegation {
                cut: sub,
                exact: false
            }
        );
        assert_eq!(
            look(&z, "a.deep.below.sub.example.com."),
            Lookup::Delegation {
                cut: sub,
                exact: false
            }
        );
        assert_eq!(
            look(&z, "zz.sub.example.com."),
            Lookup::Delegation {
                cut: sub,
                exact: false
            }
        );
        let dn = id(&z, "dn.example.com.");
        assert_eq!(look(&z, "dn.example.com."), Lookup::Exact(dn));
        assert_eq!(look(&z, "a.dn.example.com."), Lookup::Dname(dn));
        // Names far deeper than the zone (whose suffixes past its deepest node are not
        // probed) find what lies under them as shallow names do.
        let deep = |below: &str| (0..100).map(|_| "q.").collect::<String>() + below;
        assert_eq!(
            look(&z, &deep("b.c.example.com.")),
            Lookup::NxDomain {
                closest_encloser: id(&z, "b.c.example.com.")
            }
        );
        assert_eq!(
            look(&z, &deep("wild.example.com.")),
            Lookup::Wildcard {
                closest_encloser: wild,
                wildcard: id(&z, "*.wild.example.com.")
            }
        );
        assert_eq!(
            look(&z, &deep("deep.below.sub.example.com.")),
            Lookup::Delegation {
                cut: sub,
                exact: false
            }
        );
        assert_eq!(look(&z, &deep("dn.example.com.")), Lookup::Dname(dn));
        assert_eq!(
            look(&z, &deep("example.com.")),
            Lookup::NxDomain {
                closest_encloser: 0
            }
        );
        assert_eq!(z.max_labels, 5, "deep.below.sub.example.com.");
    }

    #[test]
    fn records_iterate_soa_first() {
        let z = zone();
        let recs: Vec<_> = z.records().collect();
        assert_eq!(recs.len(), z.record_count());
        assert_eq!(recs[0].1, t::SOA);
        assert_eq!(recs.iter().filter(|r| r.1 == t::SOA).count(), 1);
    }

    #[test]
    fn validation_errors() {
        let origin: Name = "example.com.".parse().unwrap();
        let opts = ReadOptions::new(&origin);
        let bad = |extra: &str| {
            let text = format!("$TTL 1\n@ SOA ns h 1 2 3 4 5\n@ NS ns\nns A 192.0.2.1\n{extra}");
            load_bytes("t.zone", text, &origin, &opts)
                .err()
                .map(|e| e.to_string())
        };
        assert_eq!(bad(""), None);
        assert!(
            bad("c CNAME x\nc A 1.2.3.4\n")
                .unwrap()
                .contains("beside CNAME")
        );
        assert!(
            bad("c CNAME x\nc CNAME y\n")
                .unwrap()
                .contains("multiple CNAME")
        );
        assert!(
            bad("d DNAME x\nd DNAME y\n")
                .unwrap()
                .contains("multiple DNAME")
        );
        // ALIAS (PowerDNS's): alone at its name, A and AAAA are its; refused with file and line.
        assert_eq!(bad("a ALIAS x.example.net.\na MX 10 ns\n"), None);
        let e = bad("a ALIAS x.example.net.\na A 1.2.3.4\n").unwrap();
        assert!(e.contains("beside ALIAS") && e.contains("t.zone:"), "{e}");
        let e = bad("a ALIAS x.example.net.\na ALIAS y.example.net.\n").unwrap();
        assert!(e.contains("multiple ALIAS"), "{e}");
        assert!(bad("a ALIAS\n").is_some(), "an ALIAS without its target");
        // A conflict names the line of the record that breaks the rule (the one read
        // second), as NSD and BIND do: lines 5 and 6 hold the extra records.
        for (extra, line) in [
            ("c CNAME x\nc CNAME y\n", 6),
            ("c A 1.2.3.4\nc CNAME x\n", 6),
            ("c CNAME x\nc A 1.2.3.4\n", 6),
            ("c CNAME x\nc TXT t\nc A 1.2.3.4\n", 6),
            ("d DNAME x\nd DNAME y\n", 6),
            ("a A 1.2.3.4\na ALIAS x.example.net.\n", 6),
            ("@ SOA ns h 2 2 3 4 5\n", 5),
            ("@ CNAME x\n", 5),
        ] {
            let e = bad(extra).unwrap();
            assert!(e.contains(&format!("t.zone:{line}")), "{extra:?}: {e}");
        }
        // A cut beside a DNAME is a warning (BIND); data below a DNAME an error (Knot, NSD).
        assert_eq!(bad("d DNAME x\nd NS y\n"), None);
        let e = bad("d DNAME x\na.d A 1.2.3.4\n").unwrap();
        assert!(e.contains("under DNAME") && e.contains("t.zone:"), "{e}");
        // Beside a cut too, as Knot and NSD refuse it — but for the cut's own glue (an
        // address its NS RRset names), as BIND takes it.
        let e = bad("d DNAME x\nd NS y\na.d A 1.2.3.4\n").unwrap();
        assert!(e.contains("under DNAME"), "{e}");
        assert_eq!(bad("d DNAME x\nd NS ns.d\nns.d A 1.2.3.4\n"), None);
        assert!(
            bad("c CNAME x\nc KEY 256 3 8 AwEAAQ==\n")
                .unwrap()
                .contains("beside CNAME")
        );
        // DS at the apex or away from a cut loads (as Knot and NSD load it), with a warning.
        let warned = |extra: &str, what: &str| {
            let text = format!("$TTL 1\n@ SOA ns h 1 2 3 4 5\n@ NS ns\nns A 192.0.2.1\n{extra}");
            let l = load_bytes("t.zone", text, &origin, &opts).unwrap();
            assert!(
                l.warnings.iter().any(|d| d.to_string().contains(what)),
                "{what}: {:?}",
                l.warnings
            );
        };
        warned(
            "@ DS 1 8 2 49FD46E6C4B45C55D4AC69CBD3CD34AC1AFE51DE9BA6E1D9D5F7DB6E4C3DB9C9\n",
            "DS at the zone apex",
        );
        warned(
            "x DS 1 8 2 49FD46E6C4B45C55D4AC69CBD3CD34AC1AFE51DE9BA6E1D9D5F7DB6E4C3DB9C9\n",
            "not a delegation",
        );
        assert!(
            bad("other.org. A 1.2.3.4\n")
                .unwrap()
                .contains("outside the zone")
        );
        assert!(
            bad("@ SOA ns h 2 2 3 4 5\n")
                .unwrap()
                .contains("multiple SOA")
        );
        let e = bad("c CNAME x\nc A 1.2.3.4\n").unwrap();
        assert!(e.starts_with("t.zone:"), "{e}");
        let no_ns = load_bytes("t.zone", "@ 1 SOA ns h 1 2 3 4 5\n", &origin, &opts).unwrap();
        assert!(
            no_ns
                .warnings
                .iter()
                .any(|d| d.to_string().contains("missing NS"))
        );
        let no_soa = load_bytes("t.zone", "@ 1 NS ns\n", &origin, &opts);
        assert!(no_soa.unwrap_err().to_string().contains("no SOA"));
    }

    #[test]
    fn warnings() {
        let origin: Name = "example.com.".parse().unwrap();
        let opts = ReadOptions::new(&origin);
        let text = "$TTL 1\n@ SOA ns h 1 2 3 4 5\n@ NS ns\n@ NS nx\n@ NS cn\ncn CNAME ns\n@ MX 10 cn\n_x._tcp SRV 0 0 1 cn\nns A 192.0.2.1\nsub NS ns.sub\nns.sub A 192.0.2.2\nns.sub 5 A 192.0.2.3\nns.sub MX 1 x\nd DNAME x.\nd NS ns\n";
        let l = load_bytes("t.zone", text, &origin, &opts).unwrap();
        let w: Vec<String> = l.warnings.iter().map(|d| d.to_string()).collect();
        assert!(
            w.iter()
                .any(|m| m.contains("missing glue") && m.contains("nx.example.com.")),
            "{w:?}"
        );
        for what in ["NS target", "MX target", "SRV target"] {
            assert!(
                w.iter().any(|m| m.contains(what)
                    && m.contains("cn.example.com.")
                    && m.contains("is a CNAME")),
                "{what}: {w:?}"
            );
        }
        assert!(w.iter().any(|m| m.contains("TTLs differ")), "{w:?}");
        assert!(w.iter().any(|m| m.contains("below the zone cut")), "{w:?}");
        assert!(w.iter().any(|m| m.contains("beside DNAME")), "{w:?}");
        // The lowest, wherever it was written.
        let text = "@ 9 SOA ns h 1 2 3 4 5\n@ 9 NS ns\nns 9 A 192.0.2.1\n\
                    mix 600 TXT \"one\"\nmix 60 TXT \"two\"\n";
        let l = load_bytes("t.zone", text, &origin, &opts).unwrap();
        let w: Vec<String> = l.warnings.iter().map(|d| d.to_string()).collect();
        assert!(
            w.iter().any(|m| m.contains("all set to the lowest, 60")),
            "{w:?}"
        );
    }
}
