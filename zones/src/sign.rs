//! Signing a zone (RFC 4033–4035, RFC 5155, RFC 9276): the keys' DNSKEY RRset, an NSEC or
//! NSEC3 chain and an RRSIG per authoritative RRset are added to an unsigned zone.
//!
//! A signature of the previous signed version is kept when its RRset did not change and it
//! does not expire within the refresh period, so a change re-signs only the RRsets (and chain
//! links) it touched. Signing runs on as many threads as asked; the result is one new
//! [`Zone`], never a half-signed one. The crypto is the caller's: a [`Key`] signs bytes.

pub use crate::arith::secs_between;
use crate::build::ZoneBuilder;
use crate::error::{Diagnostic, ZoneError};
use crate::name;
use crate::nsec3::{HASH_LEN, Nsec3Params};
use crate::rdata;
use crate::reader::Record;
use crate::rrtype::t;
use crate::zone::{Node, RRset, Zone, flags};

/// A private key that signs: the caller holds the crypto.
pub trait Key: Sync {
    /// The key's DNSKEY RDATA (flags, protocol 3, algorithm, public key).
    fn dnskey(&self) -> &[u8];
    /// Signs `data` with the key's algorithm; the signature as RRSIG carries it.
    fn sign(&self, data: &[u8]) -> Result<Vec<u8>, String>;
}

/// A key and what it signs.
#[derive(Clone, Copy)]
pub struct SigningKey<'a> {
    /// The key.
    pub key: &'a dyn Key,
    /// Signs the apex DNSKEY, CDS and CDNSKEY RRsets (a KSK or a CSK).
    pub signs_keys: bool,
    /// Signs every other RRset (a ZSK or a CSK).
    pub signs_zone: bool,
}

/// How the zone denies existence.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Denial {
    /// An NSEC chain (RFC 4034).
    Nsec,
    /// An NSEC3 chain (RFC 5155) with these parameters.
    Nsec3 {
        /// Additional hash iterations (RFC 9276 asks for 0).
        iterations: u16,
        /// Salt (RFC 9276 asks for none).
        salt: Vec<u8>,
        /// Insecure delegations get no NSEC3 of their own (the opt-out flag is set).
        opt_out: bool,
    },
}

/// What to sign with and for how long.
#[derive(Debug, Clone)]
pub struct Params {
    /// The clock, seconds since the epoch (mod 2^32).
    pub now: u32,
    /// Signatures start this long before `now` (clock skew of validators).
    pub inception_offset: u32,
    /// Seconds from `now` to a signature's expiration.
    pub validity: u32,
    /// Expirations are spread over this many seconds before `now + validity`.
    pub jitter: u32,
    /// A kept signature must still be valid this long; others are made again.
    pub refresh: u32,
    /// Signatures that would fall due within this long after `refresh` are made again
    /// with those due (Knot's `rrsig-pre-refresh`): the spread expirations are refreshed in
    /// batches, not one pass (and one serial) per second.
    pub pre_refresh: u32,
    /// NSEC or NSEC3.
    pub denial: Denial,
    /// TTL of the DNSKEY, CDS and CDNSKEY RRsets (the SOA's TTL when None).
    pub dnskey_ttl: Option<u32>,
    /// TTL of NSEC/NSEC3 (the smaller of the SOA's TTL and MINIMUM when None, RFC 9077).
    pub negative_ttl: Option<u32>,
    /// The SOA serial the signed zone carries.
    pub serial: u32,
    /// DNSKEY RDATA published without signing (keys being introduced or withdrawn).
    pub published_only: Vec<Vec<u8>>,
    /// CDS and CDNSKEY RDATA to publish at the apex (RFC 7344), empty for none.
    pub cds: Vec<Vec<u8>>,
    /// CDNSKEY RDATA to publish at the apex.
    pub cdnskey: Vec<Vec<u8>>,
    /// Threads to sign on.
    pub threads: usize,
}

/// A signed zone and what signing it took.
#[derive(Debug)]
pub struct Signed {
    /// The signed zone.
    pub zone: Zone,
    /// What the signed zone's checks noticed (the unsigned zone's warnings again, and any
    /// about its DNSSEC records).
    pub warnings: Vec<Diagnostic>,
    /// Signatures made.
    pub made: usize,
    /// Signatures kept from the previous version.
    pub kept: usize,
    /// The earliest expiration of any signature in the zone (the re-sign deadline is this
    /// minus the refresh period).
    pub earliest_expiration: u32,
}

/// Why a zone could not be signed.
#[derive(Debug, thiserror::Error)]
pub enum SignError {
    /// No key signs the zone's RRsets or its DNSKEY RRset.
    #[error("no active key signs {0}")]
    NoKey(&'static str),
    /// The zone has no SOA.
    #[error("the zone has no SOA")]
    NoSoa,
    /// Two names hash alike under the NSEC3 parameters.
    #[error("NSEC3 hash collision at {0}")]
    Collision(String),
    /// A key failed to sign.
    #[error("signing failed: {0}")]
    Crypto(String),
    /// The signed zone did not build.
    #[error("{0}")]
    Build(#[from] ZoneError),
    /// An RRset and its signatures do not fit in one DNS message (65,535 octets): no answer
    /// could carry them with DO set, and validators would fail the name.
    #[error(
        "{owner} {rtype}: the RRset and its signatures take {bytes} octets in an answer, past the 65,535 a message holds (Knot refuses it too)"
    )]
    TooLargeSigned {
        /// The RRset's owner.
        owner: String,
        /// Its type.
        rtype: String,
        /// The answer's size.
        bytes: usize,
    },
    /// NSEC3 owner names (a 32-octet hash label and the zone's name) would pass 255 octets.
    #[error(
        "the zone's name ({0} octets) is too long for NSEC3: its hash label makes owner names past 255 octets (use NSEC)"
    )]
    Nsec3NameTooLong(usize),
}

/// Whether NSEC3 owner names under `apex` (its 32-octet hash label and the zone's name) stay
/// within 255 octets: a zone name of 223 octets or more leaves no room.
pub fn nsec3_fits(apex: &crate::Name) -> bool {
    1 + HASH_LEN * 8 / 5 + apex.as_wire().len() <= 255
}

/// Types a signer makes itself: taken out of the unsigned zone.
fn made_here(rtype: u16) -> bool {
    matches!(
        rtype,
        t::RRSIG | t::NSEC | t::NSEC3 | t::NSEC3PARAM | t::DNSKEY | t::CDS | t::CDNSKEY
    )
}

/// Which keys sign an RRset.
#[derive(Clone, Copy, PartialEq, Eq)]
enum By {
    Nobody,
    Zone,
    Keys,
}

/// One RRset to write: RRs as (u16 length, canonical RDATA) in canonical order.
struct Set {
    owner: (u32, u8),
    rtype: u16,
    ttl: u32,
    rrs: (u32, u32),
    by: By,
}

/// The RRsets of the signed zone, gathered before signing.
#[derive(Default)]
struct Sets {
    names: Vec<u8>,
    data: Vec<u8>,
    sets: Vec<Set>,
}

impl Sets {
    fn name(&mut self, wire: &[u8]) -> (u32, u8) {
        let off = self.names.len() as u32;
        self.names.extend_from_slice(wire);
        (off, wire.len() as u8)
    }

    fn owner(&self, s: &Set) -> &[u8] {
        &self.names[s.owner.0 as usize..s.owner.0 as usize + s.owner.1 as usize]
    }

    fn rrs(&self, s: &Set) -> &[u8] {
        &self.data[s.rrs.0 as usize..s.rrs.1 as usize]
    }

    /// Adds an RRset: RDATA put in canonical form, sorted, duplicates dropped.
    fn push(&mut self, owner: (u32, u8), rtype: u16, ttl: u32, rdatas: &mut [Vec<u8>], by: By) {
        for rd in rdatas.iter_mut() {
            rdata::to_canonical(rtype, rd);
        }
        rdatas.sort_unstable();
        let start = self.data.len() as u32;
        let mut last: Option<&[u8]> = None;
        for rd in rdatas.iter() {
            if last == Some(rd.as_slice()) {
                continue;
            }
            self.data
                .extend_from_slice(&(rd.len() as u16).to_be_bytes());
            self.data.extend_from_slice(rd);
            last = Some(rd);
        }
        self.sets.push(Set {
            owner,
            rtype,
            ttl,
            rrs: (start, self.data.len() as u32),
            by,
        });
    }
}

/// Iterates (length-prefixed) RDATA of a set.
fn each_rdata(mut b: &[u8]) -> impl Iterator<Item = &[u8]> {
    std::iter::from_fn(move || {
        if b.len() < 2 {
            return None;
        }
        let n = u16::from_be_bytes([b[0], b[1]]) as usize;
        let rd = &b[2..2 + n];
        b = &b[2 + n..];
        Some(rd)
    })
}

/// A name in the chain: its types and whether it holds signed data.
struct ChainName {
    owner: (u32, u8),
    types: Vec<u16>,
    signed: bool,
    insecure_cut: bool,
}

/// Signs `unsigned` with `keys`, keeping what it can of `prev` (the last signed version).
pub fn sign_zone(
    unsigned: &Zone,
    prev: Option<&Zone>,
    keys: &[SigningKey<'_>],
    p: &Params,
) -> Result<Signed, SignError> {
    if !keys.iter().any(|k| k.signs_zone) {
        return Err(SignError::NoKey("the zone's RRsets"));
    }
    if !keys.iter().any(|k| k.signs_keys) {
        return Err(SignError::NoKey("the DNSKEY RRset"));
    }
    let apex = unsigned.apex().to_lowercase();
    let soa = unsigned.rrset(0, t::SOA).ok_or(SignError::NoSoa)?;
    let soa_rd = unsigned.rrs(soa).next().ok_or(SignError::NoSoa)?.1;
    let soa_min = soa_minimum(soa_rd).ok_or(SignError::NoSoa)?;
    let neg_ttl = p.negative_ttl.unwrap_or(soa.ttl.min(soa_min));
    let dnskey_ttl = p.dnskey_ttl.unwrap_or(soa.ttl);
    let nsec3 = match &p.denial {
        Denial::Nsec => None,
        // A name the signer would build past the wire limit (Knot: "failed to create NSEC3
        // chain"): refused here, for this zone alone (it panicked, taking every zone down).
        Denial::Nsec3 { .. } if !nsec3_fits(&apex) => {
            return Err(SignError::Nsec3NameTooLong(apex.as_wire().len()));
        }
        Denial::Nsec3 {
            iterations,
            salt,
            opt_out,
        } => Some((
            Nsec3Params {
                alg: 1,
                flags: 0,
                iterations: *iterations,
                salt: salt.clone(),
            },
            *opt_out,
        )),
    };

    // 1. Every RRset of the signed zone (without NSEC/NSEC3 yet), in canonical order.
    let mut s = Sets::default();
    let mut chain: Vec<ChainName> = Vec::new();
    let mut ents: Vec<(u32, u8)> = Vec::new();
    let mut scratch: Vec<Vec<u8>> = Vec::new();
    let mut warnings: Vec<Diagnostic> = Vec::new();
    let mut zonemd: Option<usize> = None;
    for id in unsigned.node_ids() {
        let node: &Node = unsigned.node(id);
        let nm = unsigned.node_name(id);
        if node.has(flags::OCCLUDED) {
            // Glue and occluded data: served as is, neither signed nor in the chain.
            let owner = s.name(nm);
            for set in unsigned.rrsets(id).iter().filter(|x| !made_here(x.rtype)) {
                collect(unsigned, set, &mut scratch);
                s.push(owner, set.rtype, set.ttl, &mut scratch, By::Nobody);
            }
            continue;
        }
        let owner = s.name(nm);
        let sets: Vec<&RRset> = unsigned
            .rrsets(id)
            .iter()
            .filter(|x| !made_here(x.rtype))
            .collect();
        if sets.is_empty() && id != 0 {
            ents.push(owner);
            continue;
        }
        let cut = node.has(flags::DELEG);
        let mut types = Vec::with_capacity(sets.len() + 4);
        let mut signed = false;
        for set in &sets {
            collect(unsigned, set, &mut scratch);
            if id == 0 && set.rtype == t::ZONEMD {
                // Signing changes the zone: its digest is made again after the signatures
                // (RFC 8976 §3), for each scheme and algorithm dnsd can compute.
                let dropped = zonemd_placeholders(&mut scratch, p.serial);
                if dropped > 0 {
                    warnings.push(zone_warning(format!(
                        "{dropped} ZONEMD record(s) of an unknown scheme or hash algorithm \
                         dropped: signing changes the zone and their digest cannot be made again"
                    )));
                }
                if scratch.is_empty() {
                    continue;
                }
                zonemd = Some(s.sets.len());
            }
            // At a zone cut only the DS is the parent's to sign (RFC 4035 §2.2); the NS and
            // any address there are glue, and the bitmap names only NS and DS (§2.3).
            let by = if !cut || set.rtype == t::DS {
                By::Zone
            } else {
                By::Nobody
            };
            if !cut || matches!(set.rtype, t::NS | t::DS) {
                types.push(set.rtype);
            }
            signed |= by != By::Nobody;
            s.push(owner, set.rtype, set.ttl, &mut scratch, by);
        }
        if id == 0 {
            let mut published: Vec<Vec<u8>> =
                keys.iter().map(|k| k.key.dnskey().to_vec()).collect();
            published.extend(p.published_only.iter().cloned());
            s.push(owner, t::DNSKEY, dnskey_ttl, &mut published, By::Keys);
            types.push(t::DNSKEY);
            if !p.cds.is_empty() {
                let mut v = p.cds.clone();
                s.push(owner, t::CDS, dnskey_ttl, &mut v, By::Keys);
                types.push(t::CDS);
            }
            if !p.cdnskey.is_empty() {
                let mut v = p.cdnskey.clone();
                s.push(owner, t::CDNSKEY, dnskey_ttl, &mut v, By::Keys);
                types.push(t::CDNSKEY);
            }
            if let Some((n3, _)) = &nsec3 {
                let mut rd = vec![1, 0];
                rd.extend_from_slice(&n3.iterations.to_be_bytes());
                rd.push(n3.salt.len() as u8);
                rd.extend_from_slice(&n3.salt);
                s.push(owner, t::NSEC3PARAM, 0, &mut [rd], By::Zone);
                types.push(t::NSEC3PARAM);
            }
            signed = true;
        }
        crate::dnssec::alias_in_bitmap(&mut types, !cut && nsec3.is_none());
        let insecure_cut = cut && !node.has(flags::HAS_DS);
        chain.push(ChainName {
            owner,
            types,
            signed,
            insecure_cut,
        });
    }
    // The SOA carries the serial being served.
    if let Some(set) = s.sets.iter().find(|x| x.rtype == t::SOA && x.owner.0 == 0) {
        let start = set.rrs.0 as usize + 2;
        if let Some(off) = soa_serial_offset(&s.data[start..set.rrs.1 as usize]) {
            s.data[start + off..start + off + 4].copy_from_slice(&p.serial.to_be_bytes());
        }
    }

    // 2. The chain.
    match &nsec3 {
        None => {
            for i in 0..chain.len() {
                let next = chain[(i + 1) % chain.len()].owner;
                let mut rd = Vec::with_capacity(next.1 as usize + 12);
                rd.extend_from_slice(&s.names[next.0 as usize..next.0 as usize + next.1 as usize]);
                let mut types = std::mem::take(&mut chain[i].types);
                types.extend_from_slice(&[t::NSEC, t::RRSIG]);
                rdata::type_bitmap(&mut types, &mut rd);
                let owner = chain[i].owner;
                // Inserted after the name's own sets, in type order like the rest.
                s.push(owner, t::NSEC, neg_ttl, &mut [rd], By::Zone);
            }
        }
        Some((n3, opt_out)) => {
            let mut hashed: Vec<([u8; HASH_LEN], Vec<u16>)> =
                Vec::with_capacity(chain.len() + ents.len());
            for c in chain.iter_mut() {
                if *opt_out && c.insecure_cut {
                    continue;
                }
                let h =
                    n3.hash(&s.names[c.owner.0 as usize..c.owner.0 as usize + c.owner.1 as usize]);
                let mut types = std::mem::take(&mut c.types);
                if c.signed {
                    types.push(t::RRSIG);
                }
                hashed.push((h, types));
            }
            for e in &ents {
                let h = n3.hash(&s.names[e.0 as usize..e.0 as usize + e.1 as usize]);
                hashed.push((h, Vec::new()));
            }
            hashed.sort_unstable_by_key(|a| a.0);
            if let Some(w) = hashed.windows(2).find(|w| w[0].0 == w[1].0) {
                return Err(SignError::Collision(base32hex(&w[0].0)));
            }
            let flags = u8::from(*opt_out);
            for i in 0..hashed.len() {
                let next = hashed[(i + 1) % hashed.len()].0;
                let mut rd = vec![1, flags];
                rd.extend_from_slice(&n3.iterations.to_be_bytes());
                rd.push(n3.salt.len() as u8);
                rd.extend_from_slice(&n3.salt);
                rd.push(HASH_LEN as u8);
                rd.extend_from_slice(&next);
                let mut types = std::mem::take(&mut hashed[i].1);
                rdata::type_bitmap(&mut types, &mut rd);
                let label = base32hex(&hashed[i].0);
                let mut w = vec![label.len() as u8];
                w.extend_from_slice(label.as_bytes());
                w.extend_from_slice(apex.as_wire());
                let owner = s.name(&w);
                s.push(owner, t::NSEC3, neg_ttl, &mut [rd], By::Zone);
            }
        }
    }

    // 3. Signatures, on `threads` threads over contiguous ranges of sets.
    // The apex ZONEMD is signed last, once its digest covers every other signature.
    let to_sign: Vec<u32> = (0..s.sets.len() as u32)
        .filter(|&i| s.sets[i as usize].by != By::Nobody && Some(i as usize) != zonemd)
        .collect();
    let threads = p.threads.clamp(1, 64).min(to_sign.len() / 256 + 1);
    let per = to_sign.len().div_ceil(threads).max(1);
    let apex_w = apex.as_wire();
    // A small zone is signed on the calling thread (a loader of many zones already runs
    // one per core): a thread per zone would cost more than its signatures.
    let results: Vec<Result<Made, SignError>> = if threads == 1 {
        vec![sign_part(&s, &to_sign, prev, keys, p, apex_w)]
    } else {
        std::thread::scope(|sc| {
            let workers: Vec<_> = to_sign
                .chunks(per)
                .map(|part| {
                    let s = &s;
                    sc.spawn(move || sign_part(s, part, prev, keys, p, apex_w))
                })
                .collect();
            workers
                .into_iter()
                .map(|w| w.join().expect("a signing thread panicked"))
                .collect()
        })
    };
    let mut made = Made::default();
    for r in results {
        let r = r?;
        let base = made.buf.len() as u32;
        made.buf.extend_from_slice(&r.buf);
        made.sigs
            .extend(r.sigs.iter().map(|&(i, o, l)| (i, o + base, l)));
        made.made += r.made;
        made.kept += r.kept;
        made.earliest = made.earliest.min(r.earliest);
    }
    if let Some(zi) = zonemd {
        zonemd_digests(&mut s, &made, zi);
        let r = sign_part(&s, &[zi as u32], prev, keys, p, apex_w)?;
        let base = made.buf.len() as u32;
        made.buf.extend_from_slice(&r.buf);
        made.sigs
            .extend(r.sigs.iter().map(|&(i, o, l)| (i, o + base, l)));
        made.sigs.sort_by_key(|x| x.0);
        made.made += r.made;
        made.kept += r.kept;
        made.earliest = made.earliest.min(r.earliest);
    }

    // 4. The signed zone: each set's RRs, then its signatures.
    let mut b = ZoneBuilder::new(&apex);
    let mut sig = made.sigs.iter().peekable();
    for (i, set) in s.sets.iter().enumerate() {
        let owner = s.owner(set);
        // The answer with DO set as a validator rebuilds it (each owner whole, as Knot counts:
        // unbound failed a set that fit only compressed, "rrset too big"), with room for the
        // OPT and a server cookie (the answer to a BIND resolver came TC=1 over TCP).
        let mut bytes = 12 + owner.len() + 4 + 11 + 44;
        for rd in each_rdata(s.rrs(set)) {
            bytes += owner.len() + 10 + rd.len();
            b.add(rec(owner, set.rtype, set.ttl, rd));
        }
        let sigs = made.sigs[made.sigs.partition_point(|x| (x.0 as usize) < i)..]
            .iter()
            .take_while(|x| x.0 as usize == i);
        let (n, sig_bytes) = sigs.fold((0, 0), |(n, b), &(_, _, l)| {
            (n + 1, b + owner.len() + 10 + l as usize)
        });
        bytes += sig_bytes;
        if n > 0 && bytes > 65_535 {
            return Err(SignError::TooLargeSigned {
                owner: crate::name::display(owner),
                rtype: crate::rrtype::to_text(set.rtype).into_owned(),
                bytes,
            });
        }
        while let Some(&&(si, o, l)) = sig.peek() {
            if si as usize != i {
                break;
            }
            b.add(rec(
                owner,
                t::RRSIG,
                set.ttl,
                &made.buf[o as usize..(o + l) as usize],
            ));
            sig.next();
        }
    }
    let built = b.finish(&[])?;
    warnings.extend(built.warnings);
    Ok(Signed {
        zone: built.zone,
        warnings,
        made: made.made,
        kept: made.kept,
        earliest_expiration: made.earliest,
    })
}

/// A warning about the zone as a whole.
fn zone_warning(msg: String) -> Diagnostic {
    Diagnostic {
        at: crate::error::Location {
            file: std::sync::Arc::new(std::path::PathBuf::new()),
            line: 0,
            col: 0,
        },
        msg,
    }
}

/// Turns the apex ZONEMD RDATA into placeholders for the digests made after signing: serial
/// `serial`, the SIMPLE scheme with SHA-384 or SHA-512 (one each), a zeroed digest. Returns
/// how many records were dropped (another scheme or algorithm, or a repeat).
fn zonemd_placeholders(rds: &mut Vec<Vec<u8>>, serial: u32) -> usize {
    let before = rds.len();
    let mut seen = [false; 2];
    rds.retain(|rd| {
        let ok = rd.len() >= 6 && rd[4] == 1 && matches!(rd[5], 1 | 2);
        ok && !std::mem::replace(&mut seen[rd[5] as usize - 1], true)
    });
    for rd in rds.iter_mut() {
        let len = if rd[5] == 1 { 48 } else { 64 };
        let alg = rd[5];
        rd.clear();
        rd.extend_from_slice(&serial.to_be_bytes());
        rd.extend_from_slice(&[1, alg]);
        rd.resize(6 + len, 0);
    }
    before - rds.len()
}

/// Writes the digests of the apex ZONEMD set `zi` (RFC 8976 §3.3, SIMPLE scheme): every RR
/// of the zone in canonical order, signatures included, but that set and its RRSIG.
fn zonemd_digests(s: &mut Sets, made: &Made, zi: usize) {
    use sha2::Digest as _;
    let mut order: Vec<u32> = (0..s.sets.len() as u32)
        .filter(|&i| i as usize != zi)
        .collect();
    order.sort_by(|&a, &b| {
        let (x, y) = (&s.sets[a as usize], &s.sets[b as usize]);
        crate::name::canonical_cmp(s.owner(x), s.owner(y)).then(x.rtype.cmp(&y.rtype))
    });
    let sigs_of = |i: u32| {
        let lo = made.sigs.partition_point(|x| x.0 < i);
        let hi = made.sigs.partition_point(|x| x.0 <= i);
        made.sigs[lo..hi]
            .iter()
            .map(|&(_, o, l)| &made.buf[o as usize..(o + l) as usize])
    };
    let algs: Vec<u8> = each_rdata(s.rrs(&s.sets[zi])).map(|rd| rd[5]).collect();
    let mut h384 = sha2::Sha384::new();
    let mut h512 = sha2::Sha512::new();
    let mut rr = Vec::with_capacity(512);
    let mut put = |owner: &[u8], rtype: u16, ttl: u32, rd: &[u8]| {
        rr.clear();
        rr.extend_from_slice(owner);
        rr.extend_from_slice(&rtype.to_be_bytes());
        rr.extend_from_slice(&1u16.to_be_bytes());
        rr.extend_from_slice(&ttl.to_be_bytes());
        rr.extend_from_slice(&(rd.len() as u16).to_be_bytes());
        rr.extend_from_slice(rd);
        if algs.contains(&1) {
            h384.update(&rr);
        }
        if algs.contains(&2) {
            h512.update(&rr);
        }
    };
    // One owner at a time: its RRsets by type, the RRSIGs of all of them (one RRset, its
    // RDATA in canonical order) in type 46's place.
    let mut g = 0;
    let mut rrsigs: Vec<(&[u8], u32)> = Vec::new();
    while g < order.len() {
        let owner = s.owner(&s.sets[order[g] as usize]);
        let mut end = g;
        while end < order.len() && s.owner(&s.sets[order[end] as usize]) == owner {
            end += 1;
        }
        rrsigs.clear();
        for &i in &order[g..end] {
            let ttl = s.sets[i as usize].ttl;
            rrsigs.extend(sigs_of(i).map(|rd| (rd, ttl)));
        }
        rrsigs.sort_unstable();
        rrsigs.dedup_by(|a, b| a.0 == b.0);
        let mut sigs_done = rrsigs.is_empty();
        for &i in &order[g..end] {
            let set = &s.sets[i as usize];
            if !sigs_done && set.rtype > t::RRSIG {
                for &(rd, ttl) in &rrsigs {
                    put(owner, t::RRSIG, ttl, rd);
                }
                sigs_done = true;
            }
            for rd in each_rdata(s.rrs(set)) {
                put(owner, set.rtype, set.ttl, rd);
            }
        }
        if !sigs_done {
            for &(rd, ttl) in &rrsigs {
                put(owner, t::RRSIG, ttl, rd);
            }
        }
        g = end;
    }
    let d384 = h384.finalize();
    let d512 = h512.finalize();
    let (start, end) = s.sets[zi].rrs;
    let data = &mut s.data[start as usize..end as usize];
    let mut at = 0;
    while at + 2 <= data.len() {
        let n = u16::from_be_bytes([data[at], data[at + 1]]) as usize;
        let rd = &mut data[at + 2..at + 2 + n];
        match rd[5] {
            1 => rd[6..].copy_from_slice(&d384),
            _ => rd[6..].copy_from_slice(&d512),
        }
        at += 2 + n;
    }
}

fn rec<'a>(owner: &'a [u8], rtype: u16, ttl: u32, rdata: &'a [u8]) -> Record<'a> {
    Record {
        owner,
        ttl,
        ttl_explicit: true,
        rtype,
        rdata,
        file: 0,
        line: 0,
    }
}

/// Copies the RDATA of a stored RRset into `out`.
fn collect(z: &Zone, set: &RRset, out: &mut Vec<Vec<u8>>) {
    out.clear();
    out.extend(z.rrs(set).map(|(_, rd)| rd.to_vec()));
}

/// Signatures of one thread: (set index, offset, length) into `buf`, in set order.
struct Made {
    buf: Vec<u8>,
    sigs: Vec<(u32, u32, u32)>,
    made: usize,
    kept: usize,
    earliest: u32,
}

impl Default for Made {
    fn default() -> Made {
        Made {
            buf: Vec::new(),
            sigs: Vec::new(),
            made: 0,
            kept: 0,
            earliest: u32::MAX,
        }
    }
}

fn sign_part(
    s: &Sets,
    part: &[u32],
    prev: Option<&Zone>,
    keys: &[SigningKey<'_>],
    p: &Params,
    apex: &[u8],
) -> Result<Made, SignError> {
    let mut out = Made::default();
    let mut data = Vec::with_capacity(512);
    let mut old: Vec<Vec<u8>> = Vec::new();
    let tags: Vec<(u16, u8)> = keys
        .iter()
        .map(|k| {
            (
                crate::arith::key_tag(k.key.dnskey()),
                k.key.dnskey().get(3).copied().unwrap_or(0),
            )
        })
        .collect();
    // A signature is kept only for the key that made it: the previous version must have
    // published this very key (a key of the same tag and algorithm made since — a tag used
    // again — signs afresh).
    let known: Vec<bool> = keys
        .iter()
        .map(|k| prev.is_some_and(|z| publishes(z, k.key.dnskey())))
        .collect();
    for &i in part {
        let set = &s.sets[i as usize];
        let owner = s.owner(set);
        let prev_sigs = prev.and_then(|z| unchanged_sigs(z, owner, set, s.rrs(set), &mut old));
        for ((k, &(tag, alg)), &known) in keys.iter().zip(&tags).zip(&known) {
            let wanted = match set.by {
                By::Keys => k.signs_keys,
                By::Zone => k.signs_zone,
                By::Nobody => false,
            };
            if !wanted {
                continue;
            }
            let kept = prev_sigs.as_ref().filter(|_| known).and_then(|(z, sigs)| {
                z.rrs(sigs).map(|(_, rd)| rd).find(|rd| {
                    rd.len() > 18
                        && rd[2] == alg
                        && u16::from_be_bytes([rd[16], rd[17]]) == tag
                        && secs_between(p.now, be32(&rd[8..12]))
                            >= p.refresh as i64 + p.pre_refresh as i64
                        && secs_between(be32(&rd[12..16]), p.now) >= 0
                })
            });
            let off = out.buf.len() as u32;
            match kept {
                Some(rd) => {
                    out.buf.extend_from_slice(rd);
                    out.kept += 1;
                }
                None => {
                    let exp = p
                        .now
                        .wrapping_add(p.validity)
                        .wrapping_sub(spread(owner, set.rtype, p.jitter));
                    let start = out.buf.len();
                    out.buf.extend_from_slice(&set.rtype.to_be_bytes());
                    out.buf.push(alg);
                    out.buf.push(rrsig_labels(owner));
                    out.buf.extend_from_slice(&set.ttl.to_be_bytes());
                    out.buf.extend_from_slice(&exp.to_be_bytes());
                    out.buf
                        .extend_from_slice(&p.now.wrapping_sub(p.inception_offset).to_be_bytes());
                    out.buf.extend_from_slice(&tag.to_be_bytes());
                    out.buf.extend_from_slice(apex);
                    data.clear();
                    data.extend_from_slice(&out.buf[start..]);
                    for rd in each_rdata(s.rrs(set)) {
                        data.extend_from_slice(owner);
                        data.extend_from_slice(&set.rtype.to_be_bytes());
                        data.extend_from_slice(&1u16.to_be_bytes());
                        data.extend_from_slice(&set.ttl.to_be_bytes());
                        data.extend_from_slice(&(rd.len() as u16).to_be_bytes());
                        data.extend_from_slice(rd);
                    }
                    let sig = k.key.sign(&data).map_err(SignError::Crypto)?;
                    out.buf.extend_from_slice(&sig);
                    out.made += 1;
                }
            }
            let rd = &out.buf[off as usize..];
            let exp = be32(&rd[8..12]);
            if secs_between(p.now, exp) < secs_between(p.now, out.earliest)
                || out.earliest == u32::MAX
            {
                out.earliest = exp;
            }
            out.sigs.push((i, off, out.buf.len() as u32 - off));
        }
    }
    Ok(out)
}

/// True when `z`'s apex DNSKEY RRset holds exactly `dnskey`.
fn publishes(z: &Zone, dnskey: &[u8]) -> bool {
    z.rrset(0, t::DNSKEY)
        .is_some_and(|set| z.rrs(set).any(|(_, rd)| rd == dnskey))
}

/// The previous version's RRSIG set over this RRset, when the RRset is the same there.
fn unchanged_sigs<'z>(
    z: &'z Zone,
    owner: &[u8],
    set: &Set,
    rrs: &[u8],
    old: &mut Vec<Vec<u8>>,
) -> Option<(&'z Zone, &'z RRset)> {
    let sets: &[RRset] = if set.rtype == t::NSEC3 {
        let chain = z.nsec3()?;
        let mut h = [0u8; HASH_LEN];
        let label = &owner[1..1 + owner[0] as usize];
        if crate::nsec3::base32hex_decode(label, &mut h) != Some(HASH_LEN) {
            return None;
        }
        z.nsec3_rrsets(chain.find_match(&h)?)
    } else {
        z.rrsets(z.find(owner)?)
    };
    let cur = sets
        .iter()
        .find(|x| x.rtype == set.rtype && x.covered == 0)?;
    if cur.ttl != set.ttl {
        return None;
    }
    old.clear();
    old.extend(z.rrs(cur).map(|(_, rd)| {
        let mut v = rd.to_vec();
        rdata::to_canonical(set.rtype, &mut v);
        v
    }));
    old.sort_unstable();
    old.dedup();
    if !old.iter().map(|v| v.as_slice()).eq(each_rdata(rrs)) {
        return None;
    }
    let sigs = sets
        .iter()
        .find(|x| x.rtype == t::RRSIG && x.covered == set.rtype)?;
    Some((z, sigs))
}

fn be32(b: &[u8]) -> u32 {
    u32::from_be_bytes([b[0], b[1], b[2], b[3]])
}

/// The RRSIG labels field: the owner's labels, a leading `*` not counted.
pub fn rrsig_labels(owner: &[u8]) -> u8 {
    let n = name::label_count(owner);
    if owner.len() >= 2 && owner[0] == 1 && owner[1] == b'*' {
        (n - 1) as u8
    } else {
        n as u8
    }
}

/// A stable offset in `0..jitter` for an RRset, so expirations do not all fall at once.
fn spread(owner: &[u8], rtype: u16, jitter: u32) -> u32 {
    if jitter == 0 {
        return 0;
    }
    let mut h: u32 = 0x811c_9dc5;
    for &b in owner.iter().chain(&rtype.to_be_bytes()) {
        h = (h ^ b as u32).wrapping_mul(0x0100_0193);
    }
    h % jitter
}

/// Offset of the serial in SOA RDATA (after MNAME and RNAME).
fn soa_serial_offset(rd: &[u8]) -> Option<usize> {
    let mut i = 0;
    for _ in 0..2 {
        loop {
            let l = *rd.get(i)? as usize;
            i += 1 + l;
            if l == 0 {
                break;
            }
        }
    }
    (i + 20 <= rd.len()).then_some(i)
}

/// The SOA MINIMUM field.
fn soa_minimum(rd: &[u8]) -> Option<u32> {
    let o = soa_serial_offset(rd)?;
    Some(be32(&rd[o + 16..o + 20]))
}

/// Base32hex without padding, lower case (the NSEC3 owner label).
pub fn base32hex(b: &[u8]) -> String {
    let mut out = String::with_capacity(b.len().div_ceil(5) * 8);
    crate::rdata::write_base32hex(b, &mut out);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base32hex_matches_rfc4648() {
        assert_eq!(base32hex(b"f"), "co");
        assert_eq!(base32hex(b"foobar"), "cpnmuoj1e8");
        let mut out = [0u8; 8];
        assert_eq!(
            crate::nsec3::base32hex_decode(b"cpnmuoj1e8", &mut out),
            Some(6)
        );
        assert_eq!(&out[..6], b"foobar");
    }

    #[test]
    fn labels_skip_a_leading_wildcard() {
        let n = crate::Name::parse("*.a.example.", None).unwrap();
        assert_eq!(rrsig_labels(n.as_wire()), 2);
        let n = crate::Name::parse("a.example.", None).unwrap();
        assert_eq!(rrsig_labels(n.as_wire()), 2);
    }

    /// A stand-in key: its "signature" is a digest of what was signed (the structure is
    /// tested here; real keys and validators in dnsd's tests).
    struct Fake(Vec<u8>);

    impl Key for Fake {
        fn dnskey(&self) -> &[u8] {
            &self.0
        }
        fn sign(&self, data: &[u8]) -> Result<Vec<u8>, String> {
            use sha2::Digest as _;
            Ok(sha2::Sha256::digest(data).to_vec())
        }
    }

    fn params(serial: u32, now: u32, denial: Denial) -> Params {
        Params {
            now,
            inception_offset: 3600,
            validity: 14 * 86400,
            jitter: 86400,
            refresh: 7 * 86400,
            pre_refresh: 3600,
            denial,
            dnskey_ttl: None,
            negative_ttl: None,
            serial,
            published_only: Vec::new(),
            cds: Vec::new(),
            cdnskey: Vec::new(),
            threads: 2,
        }
    }

    /// Expirations spread over a day are refreshed in batches of an hour's due: a refresh
    /// cycle takes about a pass an hour, not one pass (and one serial) per signature due.
    #[test]
    fn spread_expirations_are_refreshed_in_batches() {
        let origin = crate::Name::parse("example.", None).unwrap();
        let mut text =
            String::from("$TTL 300\n@ SOA ns h 1 7200 3600 1209600 60\n@ NS ns\nns A 192.0.2.1\n");
        for i in 0..400 {
            text.push_str(&format!("h{i} A 192.0.2.{}\n", i % 250));
        }
        let z = crate::load_bytes("t", text, &origin, &crate::ReadOptions::new(&origin))
            .unwrap()
            .zone;
        let key = Fake(vec![1, 1, 3, 13, 9, 9, 9, 9]);
        let keys = [SigningKey {
            key: &key,
            signs_keys: true,
            signs_zone: true,
        }];
        let t0 = 1_000_000u32;
        let mut p = params(1, t0, Denial::Nsec);
        let mut s = sign_zone(&z, None, &keys, &p).unwrap();
        // Passes as dnsd schedules them (at the earliest expiration less the refresh), over
        // one whole refresh cycle.
        let mut passes = 0;
        while p.now < t0 + 8 * 86400 && passes < 1_000 {
            let due = secs_between(p.now, s.earliest_expiration) - p.refresh as i64;
            p.now += due.max(1) as u32;
            p.serial += 1;
            s = sign_zone(&z, Some(&s.zone), &keys, &p).unwrap();
            passes += 1;
        }
        // The day of spread in hour-long batches (and the passes before it).
        assert!(
            passes <= 30,
            "{passes} passes for a day of spread expirations"
        );
    }

    /// A zone whose name leaves no room for NSEC3's 32-octet hash label (223 octets and
    /// more on the wire) is refused NSEC3 with a reason, and signs with NSEC; one octet
    /// shorter signs with NSEC3 (signing panicked, and dnsd with it).
    #[test]
    fn a_name_too_long_for_nsec3_is_refused_not_a_panic() {
        let key = Fake(vec![1, 1, 3, 13, 9, 9, 9, 9]);
        let keys = [SigningKey {
            key: &key,
            signs_keys: true,
            signs_zone: true,
        }];
        let n3 = || Denial::Nsec3 {
            iterations: 0,
            salt: Vec::new(),
            opt_out: false,
        };
        // Wire length: 3 labels of 63 (192) + one of `last`, their length octets and the root.
        for (last, fits) in [(28usize, true), (29, false)] {
            let l63 = "a".repeat(63);
            let name = format!("{l63}.{l63}.{l63}.{}.", "b".repeat(last));
            let origin = crate::Name::parse(&name, None).unwrap();
            let wire = origin.as_wire().len();
            let text = "$TTL 300\n@ SOA ns h 1 7200 3600 1209600 60\n@ NS ns\nns A 192.0.2.1\n";
            let z = crate::load_bytes("t", text, &origin, &crate::ReadOptions::new(&origin))
                .unwrap()
                .zone;
            let r = sign_zone(&z, None, &keys, &params(5, 1_000_000, n3()));
            assert_eq!(
                r.is_ok(),
                fits,
                "{wire} octets: {:?}",
                r.as_ref().err().map(|e| e.to_string())
            );
            if !fits {
                let e = r.err().unwrap().to_string();
                assert!(
                    e.contains("too long for NSEC3") && e.contains("use NSEC"),
                    "{e}"
                );
                assert!(sign_zone(&z, None, &keys, &params(5, 1_000_000, Denial::Nsec)).is_ok());
            }
        }
    }

    /// An RRset that fits a message unsigned but not with its signature is refused, as Knot
    /// refuses it (served, its answer with DO set was TC=1 and empty even over TCP).
    #[test]
    fn an_rrset_that_does_not_fit_with_its_signature_is_refused() {
        let origin = crate::Name::parse("example.", None).unwrap();
        let key = Fake(vec![1, 1, 3, 13, 9, 9, 9, 9]);
        let keys = [SigningKey {
            key: &key,
            signs_keys: true,
            signs_zone: true,
        }];
        // 234 TXT records of 255 octets and one of `last`: with DO set, header, question,
        // OPT and a cookie's room take 84 octets, each record (its owner whole) 279, the
        // last 24 + `last`, the signature 82.
        for (last, fits) in [(50usize, true), (100, false)] {
            let mut text = String::from(
                "$TTL 300\n@ SOA ns h 1 7200 3600 1209600 60\n@ NS ns\nns A 192.0.2.1\n",
            );
            for i in 0..234 {
                text.push_str(&format!("big TXT \"{i:03}{}\"\n", "a".repeat(252)));
            }
            text.push_str(&format!("big TXT \"{}\"\n", "b".repeat(last)));
            let z = crate::load_bytes("t", text, &origin, &crate::ReadOptions::new(&origin))
                .unwrap()
                .zone;
            let r = sign_zone(&z, None, &keys, &params(5, 1_000_000, Denial::Nsec));
            assert_eq!(r.is_ok(), fits, "{last}");
            if !fits {
                let e = r.err().unwrap().to_string();
                assert!(
                    e.starts_with("big.example. TXT: ") && e.contains("65576"),
                    "{e}"
                );
            }
        }
    }

    /// Every authoritative RRset is signed, glue is not; the NSEC chain links the
    /// authoritative names in order and wraps; signing the result again keeps every
    /// signature but the SOA's; a changed RRset is signed again with its chain unchanged.
    #[test]
    fn signs_what_is_authoritative_and_keeps_what_did_not_change() {
        let origin = crate::Name::parse("example.", None).unwrap();
        let text = "$TTL 300\n@ SOA ns h 1 7200 3600 1209600 60\n@ NS ns\nns A 192.0.2.1\n\
                    www A 192.0.2.2\nsub NS ns.sub\nns.sub A 192.0.2.3\na.b TXT \"x\"\n";
        let z = crate::load_bytes("t", text, &origin, &crate::ReadOptions::new(&origin))
            .unwrap()
            .zone;
        let key = Fake(vec![1, 1, 3, 13, 9, 9, 9, 9]);
        let keys = [SigningKey {
            key: &key,
            signs_keys: true,
            signs_zone: true,
        }];
        let s = sign_zone(&z, None, &keys, &params(5, 1_000_000, Denial::Nsec)).unwrap();
        let zs = &s.zone;
        assert_eq!(zs.serial(), 5);
        let id = |n: &str| {
            zs.find(crate::Name::parse(n, None).unwrap().as_wire())
                .unwrap()
        };
        assert!(zs.rrsig(id("www.example."), t::A).is_some());
        assert!(
            zs.rrsig(id("sub.example."), t::NS).is_none(),
            "a delegation's NS is not signed"
        );
        assert!(
            zs.rrsig(id("ns.sub.example."), t::A).is_none(),
            "glue is not signed"
        );
        assert!(
            zs.rrset(id("ns.sub.example."), t::NSEC).is_none(),
            "glue is not in the chain"
        );
        assert!(
            zs.rrset(id("b.example."), t::NSEC).is_none(),
            "no NSEC at an empty non-terminal"
        );
        // The chain: example. → a.b → ns → sub → www → example.
        let next = |n: &str| {
            let s = zs.rrset(id(n), t::NSEC).unwrap();
            let rd = zs.rrs(s).next().unwrap().1;
            let mut l = 0;
            while rd[l] != 0 {
                l += 1 + rd[l] as usize;
            }
            crate::Name::from_wire(&rd[..=l]).unwrap().to_string()
        };
        assert_eq!(next("example."), "a.b.example.");
        assert_eq!(next("a.b.example."), "ns.example.");
        assert_eq!(next("ns.example."), "sub.example.");
        assert_eq!(next("sub.example."), "www.example.");
        assert_eq!(next("www.example."), "example.");
        let total = s.made;
        // Signed again an hour later from itself: only the SOA (new serial) is made.
        let again = sign_zone(zs, Some(zs), &keys, &params(6, 1_003_600, Denial::Nsec)).unwrap();
        assert_eq!((again.made, again.kept), (1, total - 1));
        // One RRset changed: it and the SOA are made again; the chain did not change.
        let z2 = crate::load_bytes(
            "t",
            text.replace("192.0.2.2", "192.0.2.9"),
            &origin,
            &crate::ReadOptions::new(&origin),
        )
        .unwrap()
        .zone;
        let changed = sign_zone(
            &z2,
            Some(&again.zone),
            &keys,
            &params(7, 1_007_200, Denial::Nsec),
        )
        .unwrap();
        assert_eq!(changed.made, 2);
        // Past the refresh point, everything is made again.
        let later = sign_zone(
            &z2,
            Some(&changed.zone),
            &keys,
            &params(8, 1_000_000 + 8 * 86400, Denial::Nsec),
        )
        .unwrap();
        assert_eq!(later.kept, 0);
        // NSEC3: one per authoritative name and empty non-terminal, none for glue.
        let n3 = Denial::Nsec3 {
            iterations: 0,
            salt: Vec::new(),
            opt_out: false,
        };
        let s3 = sign_zone(&z, None, &keys, &params(5, 1_000_000, n3)).unwrap();
        assert_eq!(s3.zone.nsec3().unwrap().len(), 6);
        let n3o = Denial::Nsec3 {
            iterations: 0,
            salt: Vec::new(),
            opt_out: true,
        };
        let so = sign_zone(&z, None, &keys, &params(5, 1_000_000, n3o)).unwrap();
        assert_eq!(
            so.zone.nsec3().unwrap().len(),
            5,
            "opt-out: no NSEC3 for the insecure cut"
        );
    }
}
