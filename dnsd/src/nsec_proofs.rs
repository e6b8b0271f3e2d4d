//! Proofs of non-existence for queries with DO set: the NSEC records of RFC 4035 §3.1.3
//! and the NSEC3 records of RFC 5155 §7.2, each with its RRSIG, in the authority section.
//!
//! Everything that can be is found at load (see `zones::nsec3`): a name's own NSEC3, the
//! NSEC3 covering its wildcard, the nearest NSEC before it. At query time only the next
//! closer name is hashed, into a stack buffer; nothing here allocates.

use zones::Zone;
use zones::name::MAX_NAME_LEN;
use zones::rrtype::t;
use zones::zone::{NodeId, RRset};

use crate::response::{Full, Owner, Section, Writer};

/// Which record a proof is made of: an NSEC of a tree node or an NSEC3 of the chain.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Proof {
    Nsec(NodeId),
    Nsec3(usize),
}

/// Writes proofs for one response, each record once.
pub struct Prover<'z> {
    zone: &'z Zone,
    written: [Option<Proof>; 4],
}

impl<'z> Prover<'z> {
    /// A prover for `zone` (does nothing for an unsigned zone).
    pub fn new(zone: &'z Zone) -> Prover<'z> {
        Prover {
            zone,
            written: [None; 4],
        }
    }

    fn signed(&self) -> bool {
        self.zone.has_nsec() || self.zone.nsec3().is_some_and(|c| c.params().is_some())
    }

    fn put(&mut self, w: &mut Writer<'_>, p: Proof) -> Result<(), Full> {
        if self.written.contains(&Some(p)) {
            return Ok(());
        }
        let z = self.zone;
        let (owner, sets): (&[u8], &[RRset]) = match p {
            Proof::Nsec(id) => (z.node_name(id), z.rrsets(id)),
            Proof::Nsec3(i) => (z.nsec3_name(i), z.nsec3_rrsets(i)),
        };
        let want = if matches!(p, Proof::Nsec(_)) {
            t::NSEC
        } else {
            t::NSEC3
        };
        let mut buf = [0u8; MAX_NAME_LEN];
        buf[..owner.len()].copy_from_slice(owner);
        let owner = &buf[..owner.len()];
        // Once TC is set nothing more goes in; a record and its RRSIG go in together or not
        // at all (never one without the other).
        if w.truncated() {
            return Err(Full);
        }
        let m = w.mark();
        for s in sets.iter().filter(|s| {
            (s.rtype == want && s.covered == 0) || (s.rtype == t::RRSIG && s.covered == want)
        }) {
            if let Err(e) = w.rrset(Section::Authority, z, s, Owner::Name(owner)) {
                w.rollback(m);
                return Err(e);
            }
        }
        if let Some(slot) = self.written.iter_mut().find(|s| s.is_none()) {
            *slot = Some(p);
        }
        Ok(())
    }

    /// NSEC3 entry covering (or matching) the hash of `name`.
    fn nsec3_cover(&self, name: &[u8]) -> Option<usize> {
        let c = self.zone.nsec3()?;
        let h = c.params()?.hash(name);
        c.find_cover(&h)
    }

    /// The closest provable encloser of node `id` (itself or its nearest ancestor with an
    /// NSEC3) and the name one label below it on the way to `name`, for opt-out proofs.
    fn closest_provable(&self, id: NodeId) -> Option<(usize, NodeId)> {
        let c = self.zone.nsec3()?;
        let mut child = id;
        let mut cur = id;
        loop {
            if let Some(m) = c.node_match(cur) {
                return Some((m, child));
            }
            let p = self.zone.node(cur).parent();
            if p == zones::zone::NONE {
                return None;
            }
            child = cur;
            cur = p;
        }
    }

    /// NXDOMAIN for `qname` (labels at `offs`) whose closest encloser is `ce`: NSEC covering
    /// the name and NSEC covering the wildcard; or NSEC3 matching the closest encloser,
    /// covering the next closer name, covering the wildcard.
    pub fn nxdomain(
        &mut self,
        w: &mut Writer<'_>,
        qname: &[u8],
        offs: &[u8],
        ce: NodeId,
    ) -> Result<(), Full> {
        if !self.signed() {
            return Ok(());
        }
        let z = self.zone;
        if z.has_nsec() {
            if let Some(n) = z.nsec_covering(qname) {
                self.put(w, Proof::Nsec(n))?;
            }
            let mut star = [0u8; MAX_NAME_LEN + 2];
            let ce_name = z.node_name(ce);
            if ce_name.len() + 2 <= MAX_NAME_LEN {
                star[0] = 1;
                star[1] = b'*';
                star[2..2 + ce_name.len()].copy_from_slice(ce_name);
                if let Some(n) = z.nsec_covering(&star[..2 + ce_name.len()]) {
                    self.put(w, Proof::Nsec(n))?;
                }
            }
            return Ok(());
        }
        let Some(c) = z.nsec3() else { return Ok(()) };
        if let Some(m) = c.node_match(ce) {
            self.put(w, Proof::Nsec3(m))?;
        }
        if let Some(nc) = next_closer(qname, offs, z.node(ce).labels())
            && let Some(i) = self.nsec3_cover(nc)
        {
            self.put(w, Proof::Nsec3(i))?;
        }
        if let Some(i) = c.wildcard_cover(ce) {
            self.put(w, Proof::Nsec3(i))?;
        }
        Ok(())
    }

    /// NODATA at an existing node: its NSEC (or, for an empty non-terminal, the NSEC that
    /// covers it); or its NSEC3, or under opt-out the closest provable encloser's NSEC3
    /// and the NSEC3 covering the next closer name (RFC 5155 §7.2.3, §7.2.4).
    pub fn nodata(&mut self, w: &mut Writer<'_>, node: NodeId) -> Result<(), Full> {
        if !self.signed() {
            return Ok(());
        }
        let z = self.zone;
        if z.has_nsec() {
            let n = if z.rrset(node, t::NSEC).is_some() {
                Some(node)
            } else {
                z.nsec_covering(z.node_name(node))
            };
            if let Some(n) = n {
                self.put(w, Proof::Nsec(n))?;
            }
            return Ok(());
        }
        let Some(c) = z.nsec3() else { return Ok(()) };
        if let Some(m) = c.node_match(node) {
            return self.put(w, Proof::Nsec3(m));
        }
        if let Some((m, next)) = self.closest_provable(node) {
            self.put(w, Proof::Nsec3(m))?;
            if let Some(i) = self.nsec3_cover(z.node_name(next)) {
                self.put(w, Proof::Nsec3(i))?;
            }
        }
        Ok(())
    }

    /// An answer synthesised from a wildcard: proof that `qname` itself does not exist (the
    /// NSEC covering it; or the NSEC3 covering the next closer name).
    pub fn wildcard_answer(
        &mut self,
        w: &mut Writer<'_>,
        qname: &[u8],
        offs: &[u8],
        ce: NodeId,
    ) -> Result<(), Full> {
        if !self.signed() {
            return Ok(());
        }
        let z = self.zone;
        if z.has_nsec() {
            if let Some(n) = z.nsec_covering(qname) {
                self.put(w, Proof::Nsec(n))?;
            }
            return Ok(());
        }
        if let Some(nc) = next_closer(qname, offs, z.node(ce).labels())
            && let Some(i) = self.nsec3_cover(nc)
        {
            self.put(w, Proof::Nsec3(i))?;
        }
        Ok(())
    }

    /// NODATA from a wildcard: the name does not exist, the wildcard does without the type.
    pub fn wildcard_nodata(
        &mut self,
        w: &mut Writer<'_>,
        qname: &[u8],
        offs: &[u8],
        ce: NodeId,
        wildcard: NodeId,
    ) -> Result<(), Full> {
        if !self.signed() {
            return Ok(());
        }
        let z = self.zone;
        if z.has_nsec() {
            if let Some(n) = z.nsec_covering(qname) {
                self.put(w, Proof::Nsec(n))?;
            }
            if z.rrset(wildcard, t::NSEC).is_some() {
                self.put(w, Proof::Nsec(wildcard))?;
            }
            return Ok(());
        }
        let Some(c) = z.nsec3() else { return Ok(()) };
        if let Some(m) = c.node_match(ce) {
            self.put(w, Proof::Nsec3(m))?;
        }
        if let Some(nc) = next_closer(qname, offs, z.node(ce).labels())
            && let Some(i) = self.nsec3_cover(nc)
        {
            self.put(w, Proof::Nsec3(i))?;
        }
        if let Some(m) = c.node_match(wildcard) {
            self.put(w, Proof::Nsec3(m))?;
        }
        Ok(())
    }

    /// A referral to a child without DS: proof that there is none (RFC 4035 §3.1.4,
    /// RFC 5155 §7.2.7), the same records as NODATA for DS at the cut.
    pub fn no_ds(&mut self, w: &mut Writer<'_>, cut: NodeId) -> Result<(), Full> {
        self.nodata(w, cut)
    }
}

/// The next closer name of `qname` for a closest encloser with `ce_labels` labels: the
/// suffix with one label more.
fn next_closer<'q>(qname: &'q [u8], offs: &[u8], ce_labels: usize) -> Option<&'q [u8]> {
    let q = offs.len();
    if q <= ce_labels {
        return None;
    }
    let off = offs[q - ce_labels - 1] as usize;
    Some(&qname[off..])
}
