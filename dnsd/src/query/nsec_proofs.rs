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

use crate::query::response::{Full, Owner, Section, Writer};

/// Which record a proof is made of: an NSEC of a tree node or an NSEC3 of the chain.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Proof {
    Nsec(NodeId),
    Nsec3(usize),
}

/// The proofs a response holds (the zone's address and the record), so that two denials
/// of one answer that rest on one NSEC or NSEC3 (a wildcard CNAME whose target does not
/// exist) carry it once (an RRset is a set, RFC 2181 §5), as Knot and NSD answer.
#[derive(Debug, Default)]
pub struct Written {
    proofs: [Option<(usize, Proof)>; 16],
}

/// Writes proofs for one response, each record once.
pub struct Prover<'z, 'r> {
    zone: &'z Zone,
    written: &'r mut Written,
}

impl<'z, 'r> Prover<'z, 'r> {
    /// A prover for `zone` (does nothing for an unsigned zone), writing each record not yet
    /// in `written`.
    pub fn new(zone: &'z Zone, written: &'r mut Written) -> Prover<'z, 'r> {
        Prover { zone, written }
    }

    fn signed(&self) -> bool {
        self.zone.has_nsec() || self.zone.nsec3().is_some_and(|c| c.params().is_some())
    }

    fn put(&mut self, w: &mut Writer<'_>, p: Proof) -> Result<(), Full> {
        let key = (std::ptr::from_ref(self.zone) as usize, p);
        if self.written.proofs.contains(&Some(key)) {
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
        if let Some(slot) = self.written.proofs.iter_mut().find(|s| s.is_none()) {
            *slot = Some(key);
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
    /// NSEC3): its NSEC3, the node, and the node one label below it on the way to `id`.
    fn closest_provable(&self, id: NodeId) -> Option<(usize, NodeId, NodeId)> {
        let c = self.zone.nsec3()?;
        let mut child = id;
        let mut cur = id;
        loop {
            if let Some(m) = c.node_match(cur) {
                return Some((m, cur, child));
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
        // The closest encloser has no NSEC3 when it is an empty non-terminal whose only
        // descendants are opt-out delegations: prove from the nearest ancestor that has one
        // (the closest provable encloser, as Knot does); the next closer name below it is then
        // covered by an opt-out NSEC3 and the answer validates as insecure.
        let (ce, m) = match c.node_match(ce) {
            Some(m) => (ce, Some(m)),
            None => match self.closest_provable(ce) {
                Some((m, node, _)) => (node, Some(m)),
                None => (ce, None),
            },
        };
        if let Some(m) = m {
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
        if let Some((m, _, next)) = self.closest_provable(node) {
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
            // The wildcard without the type: its own NSEC, or — a wildcard that is an empty
            // non-terminal (`sub.*.w` only) has none — the NSEC covering it, whose next
            // name lies below it (RFC 4035 §3.1.3.4), as for any other NODATA.
            return self.nodata(w, wildcard);
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
        // The wildcard's NSEC3 (an empty non-terminal has one too; under opt-out one with
        // none is proved as any other NODATA is).
        self.nodata(w, wildcard)
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

#[cfg(test)]
mod tests {
    //! Denials from small zones signed in-process: the NSEC or NSEC3 chain is built as a
    //! signer would (canonical order, hashes, bitmaps, opt-out) with placeholder signatures
    //! — dnsd never verifies them, it only has to send the right records with their RRSIGs.
    //! Every proof is checked against the names it has to prove: covering ranges in
    //! canonical or hash order, matching hashes, bitmaps.

    use std::fmt::Write as _;
    use std::sync::Arc;

    use zones::name::{canonical_cmp, label_count};
    use zones::nsec3::{Nsec3Params, base32hex_decode};
    use zones::zone::flags;

    use super::*;
    use crate::query::internet::Kind;
    use crate::query::testkit::{Q, Reply, Rr, load_zone, zone_set};
    use crate::query::wire::rcode;
    use crate::zone::served::{ServeOptions, ZoneSet};

    const ORIGIN: &str = "example.com.";
    const UNSIGNED: &str = "$TTL 300
@           SOA ns1 hostmaster 2026010101 7200 3600 1209600 60
@           NS ns1
ns1         A 192.0.2.1
www         A 192.0.2.10
www         AAAA 2001:db8::10
a.b.c       TXT \"deep\"
*.wild      A 192.0.2.20
x.wild      TXT \"exists\"
secure      NS ns.secure
secure      DS 12345 13 2 49FD46E6C4B45C55D4AC69CBD3CD34AC1AFE51DE9BA6E1D9D5F7DB6E4C3DB9C9
ns.secure   A 192.0.2.30
insecure    NS ns.insecure
ns.insecure A 192.0.2.31
";
    const SALT: [u8; 4] = [0xaa, 0xbb, 0xcc, 0xdd];

    #[derive(Clone, Copy, Debug)]
    enum Denial {
        Nsec,
        Nsec3 { opt_out: bool },
    }

    fn b64_zeros() -> String {
        format!("{}==", "A".repeat(86))
    }

    fn b32hex(b: &[u8]) -> String {
        const A: &[u8; 32] = b"0123456789abcdefghijklmnopqrstuv";
        let (mut acc, mut bits, mut s) = (0u32, 0, String::new());
        for &x in b {
            acc = (acc << 8) | x as u32;
            bits += 8;
            while bits >= 5 {
                bits -= 5;
                s.push(A[((acc >> bits) & 31) as usize] as char);
            }
        }
        assert_eq!(bits, 0, "SHA-1 hashes are 160 bits");
        s
    }

    fn types_text(types: &[u16]) -> String {
        let mut t = types.to_vec();
        t.sort_unstable();
        t.dedup();
        t.iter()
            .map(|&x| zones::rrtype::to_text(x).into_owned())
            .collect::<Vec<_>>()
            .join(" ")
    }

    fn wire(name: &str) -> Vec<u8> {
        zones::Name::parse(name, None).unwrap().as_wire().to_vec()
    }

    /// The test zone signed with `how`, loaded without a single warning.
    fn sign(how: Denial) -> Arc<ZoneSet> {
        sign_beside(how, None)
    }

    /// The salt of a second NSEC3 chain (one being built or retired), never named by the
    /// NSEC3PARAM.
    const OTHER_SALT: [u8; 4] = [0x01, 0x02, 0x03, 0x04];

    /// The zone signed with `how`, holding `beside`'s chain as well (an NSEC3 one under
    /// `OTHER_SALT`), as during a change of denial or of NSEC3 parameters.
    fn sign_beside(how: Denial, beside: Option<Denial>) -> Arc<ZoneSet> {
        sign_text(UNSIGNED, how, beside)
    }

    /// The zone `unsigned` signed as [`sign_beside`] signs the test zone.
    fn sign_text(unsigned: &str, how: Denial, beside: Option<Denial>) -> Arc<ZoneSet> {
        let mut text = String::from(unsigned);
        writeln!(text, "@ DNSKEY 257 3 13 {}", b64_zeros()).unwrap();
        if let Denial::Nsec3 { .. } = how {
            text.push_str("@ NSEC3PARAM 1 0 0 aabbccdd\n");
        }
        let z = load_zone(ORIGIN, &text);
        let key = z.rrs(z.rrset(0, t::DNSKEY).unwrap()).next().unwrap().1;
        let tag = zones::dnssec::key_tag(key);
        let name = |w: &[u8]| zones::Name::from_wire(w).unwrap().to_string();
        let sig = |out: &mut String, owner: &str, rtype: u16, ttl: u32, labels: usize| {
            writeln!(
                out,
                "{owner} {ttl} RRSIG {} 13 {labels} {ttl} 20300101000000 20200101000000 {tag} {ORIGIN} {}",
                zones::rrtype::to_text(rtype),
                b64_zeros()
            )
            .unwrap();
        };
        struct Owner {
            wire: Vec<u8>,
            name: String,
            types: Vec<u16>,
            signed: bool,
            insecure_cut: bool,
            empty: bool,
            labels: usize,
        }
        let mut owners = Vec::new();
        for id in z.node_ids() {
            let n = z.node(id);
            if n.has(flags::OCCLUDED) {
                continue;
            }
            let w = z.node_name(id).to_vec();
            let nm = name(&w);
            let labels = label_count(&w) - usize::from(n.has(flags::WILDCARD));
            let cut = n.has(flags::DELEG);
            let mut signed = false;
            for s in z.rrsets(id) {
                if !cut || s.rtype == t::DS {
                    sig(&mut text, &nm, s.rtype, s.ttl, labels);
                    signed = true;
                }
            }
            owners.push(Owner {
                types: z.rrsets(id).iter().map(|s| s.rtype).collect(),
                insecure_cut: cut && z.rrset(id, t::DS).is_none(),
                empty: n.has(flags::EMPTY),
                wire: w,
                name: nm,
                signed,
                labels,
            });
        }
        let with_nsec = matches!(how, Denial::Nsec) || matches!(beside, Some(Denial::Nsec));
        for (how, salt) in std::iter::once((how, SALT)).chain(beside.map(|b| (b, OTHER_SALT))) {
            write_chain(&mut text, how, &salt, &owners, with_nsec, &sig);
        }
        /// One chain's records; `with_nsec`: the names hold NSEC records too.
        fn write_chain(
            text: &mut String,
            how: Denial,
            salt: &[u8; 4],
            owners: &[Owner],
            with_nsec: bool,
            sig: &dyn Fn(&mut String, &str, u16, u32, usize),
        ) {
            match how {
                Denial::Nsec => {
                    let mut auth: Vec<&Owner> = owners.iter().filter(|o| !o.empty).collect();
                    auth.sort_by(|a, b| canonical_cmp(&a.wire, &b.wire));
                    for (i, o) in auth.iter().enumerate() {
                        let next = &auth[(i + 1) % auth.len()].name;
                        let mut types = o.types.clone();
                        types.extend([t::RRSIG, t::NSEC]);
                        writeln!(text, "{} 60 NSEC {next} {}", o.name, types_text(&types)).unwrap();
                        sig(text, &o.name, t::NSEC, 60, o.labels);
                    }
                }
                Denial::Nsec3 { opt_out } => {
                    let p = Nsec3Params {
                        salt: salt.to_vec(),
                        ..params()
                    };
                    let salt_hex: String = salt.iter().map(|b| format!("{b:02x}")).collect();
                    let mut chain: Vec<([u8; 20], Vec<u16>)> = owners
                        .iter()
                        .filter(|o| !(opt_out && o.insecure_cut))
                        .map(|o| {
                            let mut types = o.types.clone();
                            if o.signed || with_nsec && !o.empty {
                                types.push(t::RRSIG);
                            }
                            if with_nsec && !o.empty {
                                types.push(t::NSEC);
                            }
                            (p.hash(&o.wire), types)
                        })
                        .collect();
                    chain.sort();
                    for (i, (h, types)) in chain.iter().enumerate() {
                        let owner = format!("{}.{ORIGIN}", b32hex(h));
                        let next = b32hex(&chain[(i + 1) % chain.len()].0);
                        writeln!(
                            text,
                            "{owner} 60 NSEC3 1 {} 0 {salt_hex} {next} {}",
                            u8::from(opt_out),
                            types_text(types)
                        )
                        .unwrap();
                        sig(text, &owner, t::NSEC3, 60, 3);
                    }
                }
            }
        }
        let o: zones::Name = ORIGIN.parse().unwrap();
        let l = zones::load_bytes("signed", text.clone(), &o, &zones::ReadOptions::new(&o))
            .unwrap_or_else(|e| panic!("{e}\n{text}"));
        let warnings: Vec<&str> = l.warnings.iter().map(|d| d.msg.as_str()).collect();
        assert!(warnings.is_empty(), "{how:?}: {warnings:#?}\n{text}");
        assert!(l.zone.rrsig(0, t::SOA).is_some());
        match how {
            Denial::Nsec => assert!(l.zone.has_nsec()),
            Denial::Nsec3 { .. } => assert!(l.zone.nsec3().is_some_and(|c| c.params().is_some())),
        }
        zone_set(vec![(Arc::new(l.zone), ServeOptions::default())]).load_full()
    }

    fn params() -> Nsec3Params {
        Nsec3Params {
            alg: 1,
            flags: 0,
            iterations: 0,
            salt: SALT.to_vec(),
        }
    }

    /// Asks `q` of `zones` with the writer limited to `limit` bytes.
    fn ask_limited(zones: &ZoneSet, q: &Q, limit: usize) -> (Reply, Kind) {
        let (r, a) = crate::query::internet::tests::ask_limited(zones, q, limit);
        (r, a.kind)
    }

    fn ask(zones: &ZoneSet, name: &str, qtype: u16) -> (Reply, Kind) {
        let (r, k) = ask_limited(zones, &Q::new(name, qtype).dnssec(), 65535);
        assert!(!r.tc(), "{name} {qtype}: {r:?}");
        (r, k)
    }

    /// The types in an NSEC/NSEC3 type bitmap.
    fn bitmap(mut b: &[u8]) -> Vec<u16> {
        let mut out = Vec::new();
        while b.len() >= 2 {
            let (win, len) = (b[0] as u16, b[1] as usize);
            for (i, &byte) in b[2..2 + len].iter().enumerate() {
                for bit in 0..8 {
                    if byte & (0x80 >> bit) != 0 {
                        out.push(win * 256 + (i * 8 + bit) as u16);
                    }
                }
            }
            b = &b[2 + len..];
        }
        out
    }

    /// Every NSEC, NSEC3 and SOA in `sec` comes with its RRSIG under the same owner and
    /// every RRSIG with its record.
    fn assert_signed(what: &str, sec: &[Rr]) {
        for r in sec
            .iter()
            .filter(|r| r.rtype != t::RRSIG && r.rtype != t::NS)
        {
            assert!(
                sec.iter().any(|s| s.rtype == t::RRSIG
                    && s.owner == r.owner
                    && u16::from_be_bytes([s.rdata[0], s.rdata[1]]) == r.rtype),
                "{what}: {} {} without its RRSIG",
                r.owner,
                r.rtype
            );
        }
        for s in sec.iter().filter(|r| r.rtype == t::RRSIG) {
            let covered = u16::from_be_bytes([s.rdata[0], s.rdata[1]]);
            assert!(
                sec.iter().any(|r| r.rtype == covered && r.owner == s.owner),
                "{what}: RRSIG {covered} of {} alone",
                s.owner
            );
        }
    }

    /// The NSEC records of `sec`: (owner, next, types).
    fn nsecs(r: &Reply) -> Vec<(Vec<u8>, Vec<u8>, Vec<u16>)> {
        r.authority
            .iter()
            .filter(|x| x.rtype == t::NSEC)
            .map(|x| {
                let n = zones::name::wire_name_len(&x.rdata).unwrap();
                (
                    wire(&x.owner),
                    x.rdata[..n].to_ascii_lowercase(),
                    bitmap(&x.rdata[n..]),
                )
            })
            .collect()
    }

    /// True when the NSEC range (owner, next) covers `name` (strictly between, or after
    /// the last owner when `next` wraps to the apex).
    fn nsec_covers(owner: &[u8], next: &[u8], name: &[u8]) -> bool {
        use std::cmp::Ordering::*;
        canonical_cmp(owner, name) == Less
            && (canonical_cmp(name, next) == Less || next == wire(ORIGIN).as_slice())
    }

    /// An NSEC3 record: (owner hash, next hash, opt-out, types).
    type Nsec3Rec = ([u8; 20], [u8; 20], bool, Vec<u16>);

    /// The NSEC3 records of the authority section.
    fn nsec3s(r: &Reply) -> Vec<Nsec3Rec> {
        r.authority
            .iter()
            .filter(|x| x.rtype == t::NSEC3)
            .map(|x| {
                let label = x.owner.split('.').next().unwrap();
                let mut owner = [0u8; 20];
                assert_eq!(base32hex_decode(label.as_bytes(), &mut owner), Some(20));
                let rd = &x.rdata;
                assert_eq!((rd[0], &rd[2..4], &rd[5..9]), (1, &[0u8, 0][..], &SALT[..]));
                let salt_end = 5 + rd[4] as usize;
                assert_eq!(rd[salt_end], 20);
                let next: [u8; 20] = rd[salt_end + 1..salt_end + 21].try_into().unwrap();
                (owner, next, rd[1] & 1 == 1, bitmap(&rd[salt_end + 21..]))
            })
            .collect()
    }

    fn nsec3_covers(owner: &[u8; 20], next: &[u8; 20], h: &[u8; 20]) -> bool {
        if owner < next {
            owner < h && h < next
        } else {
            h > owner || h < next
        }
    }

    /// The authority section holds the SOA (with the negative TTL) and its signature.
    fn assert_soa(r: &Reply) {
        let soa: Vec<&Rr> = r
            .authority
            .iter()
            .filter(|x| {
                x.owner == ORIGIN
                    && (x.rtype == t::SOA
                        || x.rtype == t::RRSIG && x.rdata[..2] == t::SOA.to_be_bytes())
            })
            .collect();
        assert_eq!(soa.len(), 2, "SOA and RRSIG: {r:?}");
        assert!(
            soa.iter().all(|x| x.ttl == 60),
            "negative TTL on both: {soa:?}"
        );
    }

    /// A wildcard CNAME whose target does not exist: the wildcard answer's proof and the
    /// target's NXDOMAIN rest on one record, written once (it went in twice: 594 bytes where
    /// Knot and NSD send 456, and TC=1 at 512).
    #[test]
    fn two_denials_resting_on_one_record_carry_it_once() {
        let text = "$TTL 300\n@ SOA ns1 hostmaster 1 7200 3600 1209600 60\n@ NS ns1\n\
                    ns1 A 192.0.2.1\n* CNAME m.f.example.com.\nq.f A 192.0.2.2\n";
        for how in [Denial::Nsec, Denial::Nsec3 { opt_out: false }] {
            let z = sign_text(text, how, None);
            let (r, _) = ask(&z, "c.example.com.", t::A);
            assert_eq!(r.rcode(), rcode::NXDOMAIN, "{how:?}");
            let mut seen = std::collections::HashSet::new();
            for x in &r.authority {
                assert!(
                    seen.insert((x.owner.clone(), x.rtype, x.rdata.clone())),
                    "{how:?}: {} {} twice: {:?}",
                    x.owner,
                    x.rtype,
                    r.authority
                );
            }
        }
    }

    #[test]
    fn nsec_nxdomain_proves_the_name_and_the_wildcard_absent() {
        let z = sign(Denial::Nsec);
        let (r, k) = ask(&z, "nothere.example.com.", t::A);
        assert_eq!((k, r.rcode()), (Kind::NxDomain, rcode::NXDOMAIN));
        assert_soa(&r);
        assert_signed("nxdomain", &r.authority);
        let n = nsecs(&r);
        assert_eq!(n.len(), 2, "{n:?}");
        assert!(
            n.iter()
                .any(|(o, x, _)| nsec_covers(o, x, &wire("nothere.example.com.")))
        );
        assert!(
            n.iter()
                .any(|(o, x, _)| nsec_covers(o, x, &wire("*.example.com.")))
        );
        // One NSEC covers both (the apex's, before `a.b.c`): written once.
        let (r, _) = ask(&z, "0.example.com.", t::A);
        let n = nsecs(&r);
        assert_eq!(n.len(), 1, "{n:?}");
        assert_eq!(n[0].0, wire(ORIGIN));
        assert_eq!(r.authority.len(), 4, "SOA, NSEC and their RRSIGs");
        // Below an existing name: the closest encloser's wildcard.
        let (r, _) = ask(&z, "q.www.example.com.", t::A);
        let n = nsecs(&r);
        assert!(
            n.iter()
                .any(|(o, x, _)| nsec_covers(o, x, &wire("q.www.example.com.")))
        );
        assert!(
            n.iter()
                .any(|(o, x, _)| nsec_covers(o, x, &wire("*.www.example.com.")))
        );
        // Without DO: the SOA alone.
        let (r, _) = ask_limited(&z, &Q::new("nothere.example.com.", t::A).edns(4096), 65535);
        assert_eq!(r.authority.len(), 1);
        assert_eq!(r.authority[0].rtype, t::SOA);
    }

    #[test]
    fn nsec_nodata_wildcards_and_referrals() {
        let z = sign(Denial::Nsec);
        // NODATA: the name's own NSEC, whose bitmap lacks the type.
        let (r, k) = ask(&z, "www.example.com.", t::MX);
        assert_eq!(k, Kind::NoData);
        assert_soa(&r);
        assert_signed("nodata", &r.authority);
        let n = nsecs(&r);
        assert_eq!(n.len(), 1);
        assert_eq!(n[0].0, wire("www.example.com."));
        assert!(
            n[0].2.contains(&t::A) && !n[0].2.contains(&t::MX),
            "{:?}",
            n[0].2
        );
        // An empty non-terminal: the NSEC that covers it.
        let (r, k) = ask(&z, "b.c.example.com.", t::A);
        assert_eq!(k, Kind::NoData);
        let n = nsecs(&r);
        assert_eq!(n.len(), 1);
        assert!(nsec_covers(&n[0].0, &n[0].1, &wire("b.c.example.com.")));
        // A wildcard answer: signed, with proof that the name itself is not there.
        let (r, k) = ask(&z, "q.wild.example.com.", t::A);
        assert_eq!(k, Kind::Answer);
        assert_signed("wildcard answer", &r.answer);
        let sig = r.answer.iter().find(|x| x.rtype == t::RRSIG).unwrap();
        assert_eq!(sig.rdata[3], 3, "RRSIG labels: the wildcard's");
        let n = nsecs(&r);
        assert_eq!(n.len(), 1);
        assert!(nsec_covers(&n[0].0, &n[0].1, &wire("q.wild.example.com.")));
        // Wildcard NODATA: the name covered, the wildcard's NSEC without the type — here
        // one record (`*.wild` to `x.wild` covers `q.wild`), written once.
        let (r, k) = ask(&z, "q.wild.example.com.", t::AAAA);
        assert_eq!(k, Kind::NoData);
        let n = nsecs(&r);
        assert_eq!(n.len(), 1, "{n:?}");
        assert!(nsec_covers(&n[0].0, &n[0].1, &wire("q.wild.example.com.")));
        assert_eq!(n[0].0, wire("*.wild.example.com."));
        assert!(n[0].2.contains(&t::A) && !n[0].2.contains(&t::AAAA));
        // Two records when the name sorts elsewhere (`zz.wild` after `x.wild`).
        let (r, _) = ask(&z, "zz.wild.example.com.", t::AAAA);
        let n = nsecs(&r);
        assert_eq!(n.len(), 2, "{n:?}");
        assert!(
            n.iter()
                .any(|(o, x, _)| nsec_covers(o, x, &wire("zz.wild.example.com.")))
        );
        assert!(
            n.iter()
                .any(|(o, _, ty)| *o == wire("*.wild.example.com.") && !ty.contains(&t::AAAA))
        );
        // A referral to an unsigned child: its NSEC proves there is no DS.
        let (r, k) = ask(&z, "host.insecure.example.com.", t::A);
        assert_eq!(k, Kind::Referral);
        assert_signed("insecure referral", &r.authority);
        let n = nsecs(&r);
        assert_eq!(n.len(), 1);
        assert_eq!(n[0].0, wire("insecure.example.com."));
        assert!(n[0].2.contains(&t::NS) && !n[0].2.contains(&t::DS));
        // To a signed child: its DS, signed, and no NSEC.
        let (r, _) = ask(&z, "host.secure.example.com.", t::A);
        assert!(r.authority.iter().any(|x| x.rtype == t::DS));
        assert_signed("secure referral", &r.authority);
        assert!(nsecs(&r).is_empty());
    }

    /// A wildcard that is an empty non-terminal (`sub.*.w2` its only name): NODATA below it
    /// proves the name absent and the wildcard empty — with NSEC, the record covering the
    /// wildcard, whose next name is below it (resolvers held the answer bogus without it).
    #[test]
    fn a_wildcard_that_is_an_empty_non_terminal_is_proved_empty() {
        let text = format!("{UNSIGNED}sub.*.w2 A 192.0.2.22\n");
        for how in [
            Denial::Nsec,
            Denial::Nsec3 { opt_out: false },
            Denial::Nsec3 { opt_out: true },
        ] {
            let z = sign_text(&text, how, None);
            for q in ["x.w2.example.com.", "y.x.w2.example.com."] {
                let (r, k) = ask(&z, q, t::A);
                assert_eq!(k, Kind::NoData, "{how:?} {q}");
                assert_soa(&r);
                assert_signed("wildcard ent", &r.authority);
                if let Denial::Nsec = how {
                    let n = nsecs(&r);
                    assert!(
                        n.iter().any(|(o, x, _)| nsec_covers(o, x, &wire(q))),
                        "{q}: {n:?}"
                    );
                    let star = wire("*.w2.example.com.");
                    assert!(
                        n.iter().any(|(o, x, _)| nsec_covers(o, x, &star)
                            && *x == wire("sub.*.w2.example.com.")),
                        "{q}: the wildcard's cover missing: {n:?}"
                    );
                } else {
                    let star = params().hash(&wire("*.w2.example.com."));
                    let n = nsec3s(&r);
                    assert!(
                        n.iter().any(|x| x.0 == star),
                        "{how:?} {q}: the wildcard's own NSEC3 missing"
                    );
                }
            }
        }
    }

    #[test]
    fn nsec3_nxdomain_matches_the_closest_encloser_and_covers_next_closer_and_wildcard() {
        let z = sign(Denial::Nsec3 { opt_out: false });
        let p = params();
        let (r, k) = ask(&z, "a.nothere.example.com.", t::A);
        assert_eq!((k, r.rcode()), (Kind::NxDomain, rcode::NXDOMAIN));
        assert_soa(&r);
        assert_signed("nsec3 nxdomain", &r.authority);
        let n = nsec3s(&r);
        assert!((2..=3).contains(&n.len()), "{n:?}");
        let ce = p.hash(&wire(ORIGIN));
        let nc = p.hash(&wire("nothere.example.com."));
        let star = p.hash(&wire("*.example.com."));
        assert!(n.iter().any(|x| x.0 == ce), "closest encloser matched");
        assert!(
            n.iter().any(|x| nsec3_covers(&x.0, &x.1, &nc)),
            "next closer covered"
        );
        assert!(
            n.iter().any(|x| nsec3_covers(&x.0, &x.1, &star)),
            "wildcard covered"
        );
        // Deeper under an existing name: that name is the closest encloser.
        let (r, _) = ask(&z, "x.y.a.b.c.example.com.", t::A);
        let n = nsec3s(&r);
        let ce = p.hash(&wire("a.b.c.example.com."));
        let nc = p.hash(&wire("y.a.b.c.example.com."));
        let star = p.hash(&wire("*.a.b.c.example.com."));
        assert!(n.iter().any(|x| x.0 == ce));
        assert!(n.iter().any(|x| nsec3_covers(&x.0, &x.1, &nc)));
        assert!(n.iter().any(|x| nsec3_covers(&x.0, &x.1, &star)));
    }

    /// A zone holding a second NSEC3 chain (new parameters being rolled in) proves from the
    /// chain its NSEC3PARAM names alone (RFC 5155 §10.4; as Knot and NSD answer): records
    /// of the other chain would make the proofs fail validation.
    #[test]
    fn two_nsec3_chains_prove_from_the_one_nsec3param_names() {
        let z = sign_beside(
            Denial::Nsec3 { opt_out: false },
            Some(Denial::Nsec3 { opt_out: false }),
        );
        let p = params();
        // `nsec3s` refuses any NSEC3 whose salt is not SALT.
        let (r, k) = ask(&z, "a.nothere.example.com.", t::A);
        assert_eq!(k, Kind::NxDomain);
        let n = nsec3s(&r);
        let (ce, nc) = (p.hash(&wire(ORIGIN)), p.hash(&wire("nothere.example.com.")));
        let star = p.hash(&wire("*.example.com."));
        assert!(n.iter().any(|x| x.0 == ce), "closest encloser matched");
        assert!(n.iter().any(|x| nsec3_covers(&x.0, &x.1, &nc)), "{n:?}");
        assert!(n.iter().any(|x| nsec3_covers(&x.0, &x.1, &star)), "{n:?}");
        for (name, qtype) in [
            ("www.example.com.", t::MX),
            ("nothere.example.com.", t::A),
            ("zzzz.example.com.", t::TXT),
            ("example.com.", t::DS),
        ] {
            let (r, _) = ask(&z, name, qtype);
            assert!(!nsec3s(&r).is_empty(), "{name}: {r:?}");
        }
        for name in ["x.wild.example.com.", "a.b.wild.example.com."] {
            let (r, _) = ask(&z, name, t::MX);
            nsec3s(&r);
        }
    }

    /// A zone moving from NSEC to NSEC3 holds both chains: its NSEC3PARAM says NSEC3
    /// answers (as Knot and NSD answer it).
    #[test]
    fn a_zone_with_nsec_and_nsec3_chains_and_nsec3param_answers_with_nsec3() {
        let z = sign_beside(Denial::Nsec3 { opt_out: false }, Some(Denial::Nsec));
        for (name, qtype) in [("nothere.example.com.", t::A), ("www.example.com.", t::MX)] {
            let (r, _) = ask(&z, name, qtype);
            assert!(nsecs(&r).is_empty(), "{name}: {r:?}");
            assert!(!nsec3s(&r).is_empty(), "{name}: {r:?}");
        }
    }

    #[test]
    fn nsec3_nodata_and_wildcard_answers() {
        let z = sign(Denial::Nsec3 { opt_out: false });
        let p = params();
        let (r, k) = ask(&z, "www.example.com.", t::MX);
        assert_eq!(k, Kind::NoData);
        assert_soa(&r);
        assert_signed("nsec3 nodata", &r.authority);
        let n = nsec3s(&r);
        assert_eq!(n.len(), 1);
        assert_eq!(n[0].0, p.hash(&wire("www.example.com.")));
        assert!(n[0].3.contains(&t::AAAA) && !n[0].3.contains(&t::MX));
        // An empty non-terminal has its NSEC3, with an empty bitmap.
        let (r, _) = ask(&z, "c.example.com.", t::A);
        let n = nsec3s(&r);
        assert_eq!(n.len(), 1);
        assert_eq!(n[0].0, p.hash(&wire("c.example.com.")));
        assert!(n[0].3.is_empty());
        // A wildcard answer: the next closer name covered.
        let (r, k) = ask(&z, "q.r.wild.example.com.", t::A);
        assert_eq!(k, Kind::Answer);
        assert_signed("nsec3 wildcard", &r.answer);
        let n = nsec3s(&r);
        assert_eq!(n.len(), 1);
        let nc = p.hash(&wire("r.wild.example.com."));
        assert!(nsec3_covers(&n[0].0, &n[0].1, &nc));
        // Wildcard NODATA: closest encloser, next closer, and the wildcard's own NSEC3.
        let (r, k) = ask(&z, "q.wild.example.com.", t::TXT);
        assert_eq!(k, Kind::NoData);
        let n = nsec3s(&r);
        assert!(n.iter().any(|x| x.0 == p.hash(&wire("wild.example.com."))));
        assert!(
            n.iter()
                .any(|x| nsec3_covers(&x.0, &x.1, &p.hash(&wire("q.wild.example.com."))))
        );
        let w = n
            .iter()
            .find(|x| x.0 == p.hash(&wire("*.wild.example.com.")))
            .unwrap();
        assert!(w.3.contains(&t::A) && !w.3.contains(&t::TXT));
    }

    #[test]
    fn nsec3_opt_out_proves_an_unsigned_delegation_by_its_closest_provable_encloser() {
        let z = sign(Denial::Nsec3 { opt_out: true });
        let p = params();
        let cut = p.hash(&wire("insecure.example.com."));
        for (name, qtype, kind) in [
            ("insecure.example.com.", t::DS, Kind::NoData),
            ("host.insecure.example.com.", t::A, Kind::Referral),
        ] {
            let (r, k) = ask(&z, name, qtype);
            assert_eq!(k, kind, "{name}");
            assert_signed(name, &r.authority);
            let n = nsec3s(&r);
            assert_eq!(n.len(), 2, "{name}: {n:?}");
            // No NSEC3 matches the cut (opted out): the apex matches, an opt-out NSEC3
            // covers the cut.
            assert!(n.iter().all(|x| x.0 != cut));
            assert!(n.iter().any(|x| x.0 == p.hash(&wire(ORIGIN))));
            assert!(
                n.iter().any(|x| x.2 && nsec3_covers(&x.0, &x.1, &cut)),
                "{name}"
            );
        }
        // A signed child keeps its NSEC3 under opt-out: DS NODATA is not asked here, the
        // DS itself is answered.
        let (r, _) = ask(&z, "secure.example.com.", t::DS);
        assert!(r.answer.iter().any(|x| x.rtype == t::DS));
        assert_signed("secure DS", &r.answer);
    }

    #[test]
    fn a_proof_that_does_not_fit_truncates_and_is_never_sent_unsigned() {
        for how in [Denial::Nsec, Denial::Nsec3 { opt_out: false }] {
            let z = sign(how);
            for (name, qtype) in [
                ("nothere.example.com.", t::A),
                ("a.nothere.example.com.", t::A),
                ("www.example.com.", t::MX),
                ("q.wild.example.com.", t::A),
                ("q.wild.example.com.", t::AAAA),
                ("host.insecure.example.com.", t::A),
            ] {
                let q = Q::new(name, qtype).dnssec();
                let (full, _) = ask_limited(&z, &q, 65535);
                assert!(!full.tc());
                let mut truncated = 0;
                // From the header and question alone (the writer always takes those) up.
                let start = q.parsed().1.question_end;
                for limit in (start..full.bytes.len()).step_by(3) {
                    let (r, _) = ask_limited(&z, &q, limit);
                    let what = format!("{how:?} {name} {qtype} @{limit}");
                    assert!(r.bytes.len() <= limit, "{what}");
                    assert_signed(&format!("{what} answer"), &r.answer);
                    assert_signed(&format!("{what} authority"), &r.authority);
                    // Whatever is missing is said by TC (additional data aside).
                    if r.answer.len() < full.answer.len()
                        || r.authority.len() < full.authority.len()
                    {
                        assert!(r.tc(), "{what}: records left out without TC");
                        truncated += 1;
                    }
                }
                assert!(truncated > 0, "{how:?} {name}: never cut");
            }
        }
    }
}
