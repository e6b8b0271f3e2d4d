//! Compact denial of existence (RFC 9824): a name or type that does not exist is answered
//! NOERROR with one NSEC at the name, signed on the spot, whose next name is the name's
//! immediate successor (`\000.name`) and whose bitmap lists the types there (NXNAME for a
//! name that does not exist). One signature per denial, no zone walking, and the same
//! response size for every denial.
//!
//! Signing is work an attacker can ask for, so each worker signs within a budget per
//! second and each source (an IPv4 /24, an IPv6 /56) within a share of it; over either the
//! denial is answered TC=1 (a real resolver retries over TCP, a flood does not; over TCP the
//! zone's precomputed chain proves it) and counted.
//! Denials repeat (NODATA for AAAA at busy names): each worker keeps a small cache, so a
//! repeated denial costs no signature. Nothing here allocates or locks.

use std::hash::BuildHasher;
use std::net::IpAddr;
use std::sync::Arc;

use zones::rrtype::t;

use super::keys::Key;
use crate::observe::counters::Compact;

/// NXNAME, the pseudo-type of a name that does not exist (RFC 9824 §3.2).
pub const NXNAME: u16 = 128;

/// Types a compact NSEC lists at most (more and the chain's proof is used instead).
pub const MAX_TYPES: usize = 64;

/// Who asks for a signature: the source (its /24 or /56 shares a budget) and whether it is
/// proven (a valid server cookie, TCP). Proven and unproven sources draw on shares apart:
/// UDP forged from a resolver's /24 spent its share, and every denial to the real resolver
/// went TC=1.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Asker {
    /// The source address.
    pub ip: IpAddr,
    /// It proved it owns the address.
    pub proven: bool,
}

/// What a zone needs to sign online — compact denials, and the A and AAAA its ALIASes stand
/// for: its zone-signing key and the NSEC's TTL.
pub struct CompactSigner {
    key: Arc<Key>,
    /// The zone is answered with compact denial (else the signer is there for ALIASes).
    denies: bool,
    alg: u8,
    tag: u16,
    apex: Box<[u8]>,
    ttl: u32,
    validity: u32,
}

impl std::fmt::Debug for CompactSigner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "CompactSigner(tag {})", self.tag)
    }
}

impl CompactSigner {
    /// A signer for the zone at `apex` (lower-case wire), denying with NSEC TTL `ttl`,
    /// signatures valid for `validity` seconds.
    pub fn new(key: Arc<Key>, apex: &[u8], ttl: u32, validity: u32) -> CompactSigner {
        CompactSigner {
            denies: true,
            alg: key.dnskey[3],
            tag: key.tag,
            key,
            apex: apex.into(),
            ttl,
            validity,
        }
    }

    /// True when this signs for `zone` (by its apex).
    pub fn signs(&self, zone: &zones::Zone) -> bool {
        zone.apex().as_wire().eq_ignore_ascii_case(&self.apex)
    }

    /// TTL of the NSEC and its RRSIG.
    pub fn ttl(&self) -> u32 {
        self.ttl
    }

    /// The same signer for a zone not answered with compact denial (it signs ALIAS answers).
    pub fn without_denial(mut self) -> CompactSigner {
        self.denies = false;
        self
    }

    /// True when the zone is answered with compact denial.
    pub fn denies(&self) -> bool {
        self.denies
    }
    /// Writes into `out` the RRSIG RDATA over the RRset `rtype`/`ttl`/`rdatas` (in canonical
    /// order) at `owner` (lower-case wire), valid from an hour before the start of `hour` for
    /// the policy's validity, the signed data assembled in `scratch`; its length, or `None`
    /// when something does not fit or the key fails.
    #[allow(clippy::too_many_arguments)]
    fn rrsig_into(
        &self,
        owner: &[u8],
        rtype: u16,
        ttl: u32,
        rdatas: &[&[u8]],
        hour: u32,
        scratch: &mut [u8],
        out: &mut [u8],
    ) -> Option<usize> {
        fn put(buf: &mut [u8], n: &mut usize, b: &[u8]) -> Option<()> {
            buf.get_mut(*n..*n + b.len())?.copy_from_slice(b);
            *n += b.len();
            Some(())
        }
        // RRSIG RDATA without the signature: covered, algorithm, labels, original TTL,
        // expiration, inception, key tag, signer.
        let inception = (hour * 3600).wrapping_sub(3600);
        let expiration = (hour * 3600).wrapping_add(self.validity);
        let mut n = 0;
        put(out, &mut n, &rtype.to_be_bytes())?;
        put(out, &mut n, &[self.alg, zones::sign::rrsig_labels(owner)])?;
        put(out, &mut n, &ttl.to_be_bytes())?;
        put(out, &mut n, &expiration.to_be_bytes())?;
        put(out, &mut n, &inception.to_be_bytes())?;
        put(out, &mut n, &self.tag.to_be_bytes())?;
        put(out, &mut n, &self.apex)?;
        // What is signed: that RDATA, then each RR in canonical form.
        let mut m = 0;
        put(scratch, &mut m, &out[..n])?;
        for rd in rdatas {
            put(scratch, &mut m, owner)?;
            put(scratch, &mut m, &rtype.to_be_bytes())?;
            put(scratch, &mut m, &1u16.to_be_bytes())?;
            put(scratch, &mut m, &ttl.to_be_bytes())?;
            put(scratch, &mut m, &(rd.len() as u16).to_be_bytes())?;
            put(scratch, &mut m, rd)?;
        }
        let sig = self.key.sign_into(&scratch[..m], &mut out[n..]).ok()?;
        Some(n + sig)
    }
}

/// Bytes a cached denial may take (NSEC RDATA and RRSIG RDATA).
const ENTRY_BYTES: usize = 1024;
/// Cached denials per worker.
const CACHE: usize = 512;
/// Source shares per worker.
const SOURCES: usize = 4096;
/// Zone shares of the worker's budget (zones hashed into them).
const ZONE_SHARES: usize = 256;
/// Bytes of data one signature covers at most (an RRset in canonical form).
const SCRATCH: usize = 16 * 1024;

#[derive(Clone)]
struct Entry {
    key: u64,
    hour: u32,
    nsec_len: u16,
    sig_len: u16,
    buf: [u8; ENTRY_BYTES],
}

/// A denial: the NSEC RDATA, the RRSIG RDATA, and whether it was signed now or cached.
pub type Denial<'a> = (&'a [u8], &'a [u8], Compact);

/// One worker's budget, source shares and cache.
pub struct Denier {
    per_second: u32,
    per_source: u32,
    second: u64,
    used: u32,
    sources: Box<[(u32, u32)]>,
    /// Per zone (hashed), this second's signatures: one zone may spend three quarters of the
    /// budget, the rest is the other zones'.
    zones: Box<[(u32, u32)]>,
    cache: Box<[Entry]>,
    scratch: Box<[u8; SCRATCH]>,
    /// Seeded per process: cache slots and source shares cannot be aimed from outside.
    hasher: foldhash::fast::RandomState,
}

impl Denier {
    /// A worker's denier: `per_second` signatures a second, `per_source` of them for one
    /// source.
    pub fn new(per_second: u32, per_source: u32) -> Denier {
        Denier {
            per_second,
            per_source,
            second: 0,
            used: 0,
            sources: vec![(0, 0); SOURCES].into_boxed_slice(),
            zones: vec![(0, 0); ZONE_SHARES].into_boxed_slice(),
            cache: vec![
                Entry {
                    key: 0,
                    hour: 0,
                    nsec_len: 0,
                    sig_len: 0,
                    buf: [0; ENTRY_BYTES],
                };
                CACHE
            ]
            .into_boxed_slice(),
            scratch: Box::new([0; SCRATCH]),
            hasher: foldhash::fast::RandomState::default(),
        }
    }

    /// The NSEC RDATA and RRSIG RDATA denying `types`-only at `owner` (lower-case wire) in
    /// zone `zone_id`, from the cache or signed now; the outcome is counted. `Err` when over
    /// a budget (TC=1; over TCP the chain's proof) or not possible here (the chain's proof).
    pub fn deny(
        &mut self,
        s: &CompactSigner,
        zone_id: u32,
        owner: &[u8],
        types: &mut [u16],
        who: Asker,
        now: u64,
    ) -> Result<Denial<'_>, Option<Compact>> {
        types.sort_unstable();
        let key = self.hasher.hash_one((zone_id, s.tag, owner, &*types));
        let hour = (now / 3600) as u32;
        let slot = (key as usize) & (CACHE - 1);
        let e = &self.cache[slot];
        // The entry's next name is `\000.owner`: a hash collision never serves another
        // name's denial.
        if e.key == key
            && e.hour == hour
            && e.nsec_len as usize > 2 + owner.len()
            && e.buf[2..2 + owner.len()] == *owner
        {
            let e = &self.cache[slot];
            let n = e.nsec_len as usize;
            return Ok((
                &e.buf[..n],
                &e.buf[n..n + e.sig_len as usize],
                Compact::Cached,
            ));
        }
        // The next name is the name's immediate successor: `\000.owner` (RFC 9824 §3.1).
        if owner.len() + 2 > zones::name::MAX_NAME_LEN {
            return Err(None);
        }
        self.charge(who, zone_id, now)?;
        let e = &mut self.cache[slot];
        // Marked empty until the denial is whole.
        e.key = 0;
        let buf = &mut e.buf;
        let mut n = 0;
        let mut put = |b: &[u8], n: &mut usize| -> Result<(), Option<Compact>> {
            buf.get_mut(*n..*n + b.len())
                .ok_or(None)?
                .copy_from_slice(b);
            *n += b.len();
            Ok(())
        };
        put(&[1, 0], &mut n)?;
        put(owner, &mut n)?;
        // Windows 0 and 1 (types below 512): the rest is left to the chain's proof.
        if types.iter().any(|&ty| ty >= 512) {
            return Err(None);
        }
        let mut bitmap = [0u8; 3 * (2 + 32)];
        let bl = zones::rdata::type_bitmap_into(types, &mut bitmap).ok_or(None)?;
        put(&bitmap[..bl], &mut n)?;
        let nsec_len = n;
        let (nsec, rest) = buf.split_at_mut(nsec_len);
        let sig = s
            .rrsig_into(
                owner,
                t::NSEC,
                s.ttl,
                &[nsec],
                hour,
                &mut *self.scratch,
                rest,
            )
            .ok_or(None)?;
        let n = nsec_len + sig;
        e.key = key;
        e.hour = hour;
        e.nsec_len = nsec_len as u16;
        e.sig_len = (n - nsec_len) as u16;
        let e = &self.cache[slot];
        Ok((&e.buf[..nsec_len], &e.buf[nsec_len..n], Compact::Signed))
    }
}

impl Denier {
    /// Takes one signature from the budgets — the worker's per second, the source's share of
    /// it, the zone's three quarters of it — or says which one is spent. A flood on one tenant's zone from
    /// many prefixes, each under its share, spent the whole budget: every other zone's
    /// denials went TC=1. Unproven sources (UDP without our cookie: forgeable) take three
    /// quarters of the worker's budget at most, and only they meet the zone's share: a flood
    /// forged over many /24s left a cookie resolver's denials TC=1 (45 to 95 of 120).
    fn charge(&mut self, who: Asker, zone_id: u32, now: u64) -> Result<(), Option<Compact>> {
        if now != self.second {
            self.second = now;
            self.used = 0;
        }
        let cap = if who.proven {
            self.per_second
        } else {
            (self.per_second * 3 / 4).max(1)
        };
        if self.used >= cap {
            return Err(Some(Compact::OverBudget));
        }
        let sec = now as u32;
        let src_i = (self.hasher.hash_one((prefix(who.ip), who.proven)) as usize) & (SOURCES - 1);
        let share = &mut self.sources[src_i];
        if share.0 != sec {
            *share = (sec, 0);
        }
        if share.1 >= self.per_source {
            return Err(Some(Compact::OverSource));
        }
        if !who.proven {
            let zone_i = (self.hasher.hash_one((2u8, zone_id)) as usize) & (ZONE_SHARES - 1);
            let zone = &mut self.zones[zone_i];
            if zone.0 != sec {
                *zone = (sec, 0);
            }
            if zone.1 >= (self.per_second / 2).max(1) {
                return Err(Some(Compact::OverZone));
            }
            zone.1 += 1;
        }
        self.sources[src_i].1 += 1;
        self.used += 1;
        Ok(())
    }

    /// The RRSIG RDATA over the RRset `rtype`/`ttl`/`rdatas` at `owner` (lower-case wire) made
    /// when asked (an ALIAS's A or AAAA), from the cache or signed now; the outcome is counted.
    /// The budgets are those of compact denials (`budget` false: not applied, for proven
    /// sources); `Err` when over one, or when the RRset or its signature do not fit here.
    #[allow(clippy::too_many_arguments)]
    pub fn sign_rrset(
        &mut self,
        s: &CompactSigner,
        zone_id: u32,
        owner: &[u8],
        rtype: u16,
        ttl: u32,
        rdatas: &mut [&[u8]],
        who: Asker,
        now: u64,
        budget: bool,
    ) -> Result<(&[u8], Compact), Option<Compact>> {
        // Canonical order (RFC 4034 §6.3): by RDATA.
        rdatas.sort_unstable();
        let key = self
            .hasher
            .hash_one((1u8, zone_id, s.tag, owner, rtype, ttl, &*rdatas));
        let hour = (now / 3600) as u32;
        let slot = (key as usize) & (CACHE - 1);
        let e = &self.cache[slot];
        let o = owner.len();
        if e.key == key && e.hour == hour && e.nsec_len as usize == o && e.buf[..o] == *owner {
            let e = &self.cache[slot];
            return Ok((&e.buf[o..o + e.sig_len as usize], Compact::Cached));
        }
        if budget {
            self.charge(who, zone_id, now)?;
        } else {
            self.used += 1;
        }
        let e = &mut self.cache[slot];
        // Marked empty until the signature is whole.
        e.key = 0;
        let (head, rest) = e.buf.split_at_mut(o);
        head.copy_from_slice(owner);
        let sig = s
            .rrsig_into(owner, rtype, ttl, rdatas, hour, &mut *self.scratch, rest)
            .ok_or(None)?;
        let n = o + sig;
        e.key = key;
        e.hour = hour;
        e.nsec_len = o as u16;
        e.sig_len = (n - o) as u16;
        let e = &self.cache[slot];
        Ok((&e.buf[o..n], Compact::Signed))
    }
}

/// The part of a source address that shares one budget: an IPv4 /24, an IPv6 /56.
fn prefix(a: IpAddr) -> u64 {
    match a {
        IpAddr::V4(v) => u64::from(u32::from(v) >> 8),
        IpAddr::V6(v) => (u128::from(v) >> 72) as u64 | 1 << 63,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A signer for example.com. with a new ECDSA key in `dir`, and the apex.
    fn signer(dir: &std::path::Path) -> (CompactSigner, zones::Name) {
        let key = Key::generate(
            dir,
            "example.com.",
            crate::signing::keys::Algorithm::Ecdsap256sha256,
            2048,
            crate::signing::keys::Role::Csk,
            0,
            Some(0),
        )
        .unwrap();
        let apex = zones::Name::parse("example.com.", None).unwrap();
        (
            CompactSigner::new(Arc::new(key), apex.as_wire(), 300, 86400),
            apex,
        )
    }

    #[test]
    fn budgets_and_cache() {
        let dir = tempfile::tempdir().unwrap();
        let (s, apex) = signer(dir.path());
        // Shares are slots hashed with a seed drawn per denier: one whose zones and sources
        // used below share no slot (a collision would make one's count another's; one in a
        // few hundred runs failed so).
        let keys: [(&str, bool); 8] = [
            ("192.0.2.1", false),
            ("192.0.2.9", true),
            ("198.51.100.1", false),
            ("203.0.113.1", false),
            ("198.18.0.1", false),
            ("198.18.1.1", true),
            ("198.18.2.1", true),
            ("198.18.3.1", true),
        ];
        let apart = |d: &Denier| {
            let zones: std::collections::HashSet<usize> = [1u32, 2, 3]
                .iter()
                .map(|z| (d.hasher.hash_one((2u8, *z)) as usize) & (ZONE_SHARES - 1))
                .collect();
            let sources: std::collections::HashSet<usize> = keys
                .iter()
                .map(|(ip, proven)| {
                    let ip: IpAddr = ip.parse().unwrap();
                    (d.hasher.hash_one((prefix(ip), *proven)) as usize) & (SOURCES - 1)
                })
                .collect();
            zones.len() == 3 && sources.len() == keys.len()
        };
        let mut d = (0..1000)
            .map(|_| Denier::new(8, 2))
            .find(|d| apart(d))
            .expect("a denier whose slots are apart");
        let name = |i: usize| {
            zones::Name::parse(&format!("n{i}.example.com."), None)
                .unwrap()
                .as_wire()
                .to_vec()
        };
        let who = |ip: &str, proven: bool| Asker {
            ip: ip.parse().unwrap(),
            proven,
        };
        let udp = |ip: &str| who(ip, false);
        let (a, b, c) = (udp("192.0.2.1"), udp("198.51.100.1"), udp("203.0.113.1"));
        let mut ty = [t::RRSIG, t::NSEC, NXNAME];
        let (nsec, sig, how) = d.deny(&s, 1, &name(0), &mut ty, a, 1000).unwrap();
        assert_eq!(how, Compact::Signed);
        assert_eq!(&nsec[..2], &[1, 0]);
        assert_eq!(sig.len(), 18 + apex.as_wire().len() + 64);
        // The same denial again: from the cache, no budget spent.
        assert_eq!(
            d.deny(&s, 1, &name(0), &mut ty, a, 1000).unwrap().2,
            Compact::Cached
        );
        assert!(d.deny(&s, 1, &name(1), &mut ty, a, 1000).is_ok());
        // The source's share (2) is spent.
        assert_eq!(
            d.deny(&s, 1, &name(2), &mut ty, a, 1000).err(),
            Some(Some(Compact::OverSource))
        );
        // The same /24 proven (its cookie, TCP) has a share of its own: forged UDP from a
        // resolver's /24 spent the share of the real resolver's cookie queries too.
        assert!(
            d.deny(&s, 1, &name(2), &mut ty, who("192.0.2.9", true), 1000)
                .is_ok()
        );
        assert_eq!(
            d.deny(&s, 1, &name(3), &mut ty, udp("192.0.2.9"), 1000)
                .err(),
            Some(Some(Compact::OverSource))
        );
        // Unproven denials of one zone take half the budget (4): another source is refused
        // there, and served in another zone (a flood on one tenant's zone from many prefixes
        // spent it all, every other zone's denials TC=1).
        assert!(d.deny(&s, 1, &name(3), &mut ty, b, 1000).is_ok());
        assert!(d.deny(&s, 1, &name(4), &mut ty, b, 1000).is_ok());
        assert_eq!(
            d.deny(&s, 1, &name(5), &mut ty, c, 1000).err(),
            Some(Some(Compact::OverZone))
        );
        assert!(d.deny(&s, 2, &name(5), &mut ty, c, 1000).is_ok());
        // Unproven denials take three quarters of the worker's budget (6, the proven one
        // counted): the rest is the proven sources', whatever zone they ask.
        assert_eq!(
            d.deny(&s, 3, &name(6), &mut ty, udp("198.18.0.1"), 1000)
                .err(),
            Some(Some(Compact::OverBudget))
        );
        for (i, ip) in ["198.18.1.1", "198.18.2.1"].into_iter().enumerate() {
            assert!(
                d.deny(&s, 1, &name(7 + i), &mut ty, who(ip, true), 1000)
                    .is_ok()
            );
        }
        // The worker's budget (8) is spent.
        assert_eq!(
            d.deny(&s, 3, &name(9), &mut ty, who("198.18.3.1", true), 1000)
                .err(),
            Some(Some(Compact::OverBudget))
        );
        // A new second, a new budget.
        assert!(d.deny(&s, 1, &name(9), &mut ty, b, 1001).is_ok());
    }

    #[test]
    fn a_colliding_cache_entry_is_not_served_for_another_name() {
        let dir = tempfile::tempdir().unwrap();
        let (s, _) = signer(dir.path());
        let mut d = Denier::new(100, 100);
        let a = Asker {
            ip: "192.0.2.1".parse().unwrap(),
            proven: false,
        };
        let x = zones::Name::parse("x.example.com.", None).unwrap();
        let y = zones::Name::parse("y.example.com.", None).unwrap();
        let mut ty = [t::RRSIG, t::NSEC, NXNAME];
        d.deny(&s, 1, x.as_wire(), &mut ty, a, 1000).unwrap();
        // Forge a collision: x's entry stored under the key and slot y would use.
        let kx = d.hasher.hash_one((1u32, s.tag, x.as_wire(), &ty[..]));
        let ky = d.hasher.hash_one((1u32, s.tag, y.as_wire(), &ty[..]));
        let mut forged = d.cache[(kx as usize) & (CACHE - 1)].clone();
        forged.key = ky;
        d.cache[(ky as usize) & (CACHE - 1)] = forged;
        let (nsec, _, how) = d.deny(&s, 1, y.as_wire(), &mut ty, a, 1000).unwrap();
        assert_eq!(how, Compact::Signed);
        assert_eq!(&nsec[2..2 + y.as_wire().len()], y.as_wire());
    }
}
