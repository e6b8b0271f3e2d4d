//! DNSSEC facts computed from zone data: key tags, DS digests, and the load-time checks
//! on CDS and CDNSKEY (RFC 7344, RFC 8078).

use sha1::Digest as _;

pub use crate::arith::key_tag;
use crate::error::{Severity, Src};
use crate::name::display;
use crate::rrtype::t;
use crate::zone::Zone;

/// The DS digest of a DNSKEY for `owner` (lower-case wire) with `digest_type`, if known.
pub fn ds_digest(owner_lower: &[u8], dnskey: &[u8], digest_type: u8) -> Option<Vec<u8>> {
    match digest_type {
        1 => {
            let mut h = sha1::Sha1::new();
            h.update(owner_lower);
            h.update(dnskey);
            Some(h.finalize().to_vec())
        }
        2 => {
            let mut h = sha2::Sha256::new();
            h.update(owner_lower);
            h.update(dnskey);
            Some(h.finalize().to_vec())
        }
        4 => {
            let mut h = sha2::Sha384::new();
            h.update(owner_lower);
            h.update(dnskey);
            Some(h.finalize().to_vec())
        }
        _ => None,
    }
}

/// True for the CDS "delete" form: `0 0 0 0` (RFC 8078 §4, no digest, as NSD and
/// simdzone read it) or `0 0 0 00` (its erratum 5049, one zero octet).
fn cds_delete(rd: &[u8]) -> bool {
    rd == [0, 0, 0, 0] || rd == [0, 0, 0, 0, 0]
}

/// True for the CDNSKEY "delete" form: `0 3 0 0` (RFC 8078 §4, no key) or `0 3 0 AA==` (its
/// erratum 5049, one zero octet). The zone's own form was refused as matching no DNSKEY.
fn cdnskey_delete(rd: &[u8]) -> bool {
    rd == [0, 0, 3, 0] || rd == [0, 0, 3, 0, 0]
}

/// CDS and CDNSKEY at the apex should describe keys the zone holds: a warning otherwise, as
/// Knot and NSD load such a zone (BIND refuses it; a parent checks CDS against the child's
/// DNSKEY before it acts, and a refused zone answered nothing at a first load); a CDS without
/// CDNSKEY or the reverse is worth a warning too (Knot).
pub(crate) fn check_cds(zone: &Zone, at: Src, report: &mut dyn FnMut(Severity, Src, String)) {
    let apex = zone.apex().as_wire();
    let keys: Vec<&[u8]> = zone
        .rrset(0, t::DNSKEY)
        .map(|s| zone.rrs(s).map(|(_, rd)| rd).collect())
        .unwrap_or_default();
    let cds: Vec<&[u8]> = zone
        .rrset(0, t::CDS)
        .map(|s| zone.rrs(s).map(|(_, rd)| rd).collect())
        .unwrap_or_default();
    let cdnskey: Vec<&[u8]> = zone
        .rrset(0, t::CDNSKEY)
        .map(|s| zone.rrs(s).map(|(_, rd)| rd).collect())
        .unwrap_or_default();
    for rd in cds.iter().filter(|rd| !cds_delete(rd)) {
        if rd.len() < 5 {
            continue;
        }
        let (tag, alg, dt, digest) = (u16::from_be_bytes([rd[0], rd[1]]), rd[2], rd[3], &rd[4..]);
        let known = matches!(dt, 1 | 2 | 4);
        let matched = keys.iter().any(|k| {
            k.len() >= 4
                && k[3] == alg
                && key_tag(k) == tag
                && (!known || ds_digest(apex, k, dt).as_deref() == Some(digest))
        });
        if !matched {
            report(
                Severity::Warning,
                at,
                format!(
                    "CDS {tag} {alg} {dt} at {} matches no DNSKEY of the zone (CDS/CDNSKEY consistency: a parent following it would find no key)",
                    display(apex)
                ),
            );
        }
    }
    for rd in cdnskey.iter().filter(|rd| !cdnskey_delete(rd)) {
        if !keys.contains(rd) {
            report(
                Severity::Warning,
                at,
                format!(
                    "CDNSKEY (key tag {}) at {} matches no DNSKEY of the zone (CDS/CDNSKEY consistency: a parent following it would find no key)",
                    key_tag(rd),
                    display(apex)
                ),
            );
        }
    }
    if cds.is_empty() != cdnskey.is_empty() {
        report(
            Severity::Warning,
            at,
            format!(
                "{} at {} without {} (RFC 7344 asks for both)",
                if cds.is_empty() { "CDNSKEY" } else { "CDS" },
                display(apex),
                if cds.is_empty() { "CDS" } else { "CDNSKEY" }
            ),
        );
    }
}

/// The types listed in an NSEC/NSEC3 type bitmap (RFC 4034 §4.1.2), in order.
pub fn bitmap_types(mut b: &[u8]) -> impl Iterator<Item = u16> + '_ {
    let mut out: Vec<u16> = Vec::new();
    while b.len() >= 2 {
        let (win, len) = (b[0] as u16, b[1] as usize);
        let Some(bits) = b.get(2..2 + len) else { break };
        for (i, &byte) in bits.iter().enumerate() {
            for k in 0..8 {
                if byte & (0x80 >> k) != 0 {
                    out.push(win * 256 + (i * 8 + k) as u16);
                }
            }
        }
        b = &b[2 + len..];
    }
    out.into_iter()
}

/// The types the NSEC (`nsec`) or NSEC3 bitmap of node `id` must list, sorted: its RRsets,
/// and RRSIG when any is signed; at a delegation only NS, DS and the DNSSEC types (what else
/// sits at the cut is the child's, RFC 4035 §2.3).
fn bitmap_should_list(zone: &Zone, id: crate::zone::NodeId, nsec: bool) -> Vec<u16> {
    let cut = id != 0 && zone.node(id).has(crate::zone::flags::DELEG);
    // At a cut only the DS and NSEC are ours to sign: a signature over anything else there
    // (glue) is no reason to list RRSIG.
    let signed = if cut {
        zone.rrsig(id, t::DS).is_some() || zone.rrsig(id, t::NSEC).is_some()
    } else {
        zone.rrsets(id).iter().any(|s| s.rtype == t::RRSIG)
    };
    let mut types: Vec<u16> = zone
        .rrsets(id)
        .iter()
        .filter(|s| s.covered == 0)
        .map(|s| s.rtype)
        .filter(|&ty| !cut || matches!(ty, t::NS | t::DS | t::NSEC))
        .chain(signed.then_some(t::RRSIG))
        .collect();
    alias_in_bitmap(&mut types, nsec && !cut);
    types.sort_unstable();
    types.dedup();
    types
}

/// An ALIAS among a bitmap's `types` (as the signer writes it and the check expects it):
/// never listed — it is never answered as itself (a query for its type is NODATA, as PowerDNS
/// answers and signs it) — and with `addresses` (an NSEC outside a cut) A and AAAA listed in
/// its place, which it answers (a resolver reusing NSEC denials, RFC 8198, would deny them).
/// An NSEC3 keeps to the name's own types (validators reuse NSEC denials only, and no NSEC3
/// is signed when asked). The types come back sorted when an ALIAS was among them.
pub(crate) fn alias_in_bitmap(types: &mut Vec<u16>, addresses: bool) {
    let Some(i) = types.iter().position(|&ty| ty == t::ALIAS) else {
        return;
    };
    types.swap_remove(i);
    if addresses {
        types.extend_from_slice(&[t::A, t::AAAA]);
    }
    types.sort_unstable();
    types.dedup();
}

/// Where the type bitmap starts in NSEC RDATA (after the next owner name).
fn nsec_bitmap(rd: &[u8]) -> Option<(&[u8], &[u8])> {
    let n = crate::name::wire_name_len(rd)?;
    Some((&rd[..n], &rd[n..]))
}

/// Where the next hashed owner and the bitmap are in NSEC3 RDATA.
fn nsec3_parts(rd: &[u8]) -> Option<(u8, &[u8], &[u8])> {
    let salt = *rd.get(4)? as usize;
    let hl = *rd.get(5 + salt)? as usize;
    let next = rd.get(6 + salt..6 + salt + hl)?;
    Some((rd[1], next, &rd[6 + salt + hl..]))
}

/// Load-time checks of a signed zone, as kzonecheck makes them; all warnings (the zone is
/// served as signed): RRsets without an RRSIG, NSEC and NSEC3 chains that do not close,
/// names without their NSEC/NSEC3, bitmaps that do not list a name's types, NSEC3PARAM
/// with flags set.
pub(crate) fn check_signed(
    zone: &Zone,
    at: &dyn Fn(u32) -> Src,
    report: &mut dyn FnMut(Severity, Src, String),
) {
    use crate::zone::flags as f;
    if zone.rrset(0, t::DNSKEY).is_none() || zone.rrsig(0, t::SOA).is_none() {
        return; // not a signed zone
    }
    let mut left = 50usize;
    let mut warn = |src: Src, msg: String, report: &mut dyn FnMut(Severity, Src, String)| {
        if left > 0 {
            report(Severity::Warning, src, msg);
            left -= 1;
        }
    };
    // Keys: protocol 3 (RFC 4034 §2.1.2), distinct key tags per algorithm.
    if let Some(keys) = zone.rrset(0, t::DNSKEY) {
        let mut tags = std::collections::HashMap::new();
        for (_, rd) in zone.rrs(keys) {
            if rd.len() < 4 || rd[2] != 3 {
                warn(at(0), "invalid DNSKEY: protocol must be 3".into(), report);
                continue;
            }
            *tags.entry((key_tag(rd), rd[3])).or_insert(0usize) += 1;
        }
        if tags.values().any(|&n| n > 1) {
            warn(
                at(0),
                "many DNSKEYs with equal keytag and algorithm".into(),
                report,
            );
        }
    }
    // CDS and CDNSKEY describe the same keys (RFC 7344 §4).
    if let (Some(cds), Some(cdnskey)) = (zone.rrset(0, t::CDS), zone.rrset(0, t::CDNSKEY)) {
        let apex = zone.apex().as_wire();
        for (_, c) in zone.rrs(cds) {
            if c.len() < 5 || cds_delete(c) {
                continue;
            }
            let matched = zone.rrs(cdnskey).any(|(_, k)| {
                k.len() >= 4
                    && k[3] == c[2]
                    && key_tag(k) == u16::from_be_bytes([c[0], c[1]])
                    && ds_digest(apex, k, c[3]).is_none_or(|d| d == c[4..])
            });
            if !matched {
                warn(at(0), "CDS not match CDNSKEY".into(), report);
            }
        }
        for (_, k) in zone.rrs(cdnskey) {
            if cdnskey_delete(k) {
                continue;
            }
            let matched = zone.rrs(cds).any(|(_, c)| {
                c.len() >= 5
                    && c[2] == k.get(3).copied().unwrap_or(0)
                    && u16::from_be_bytes([c[0], c[1]]) == key_tag(k)
            });
            if !matched {
                warn(at(0), "CDNSKEY without corresponding CDS".into(), report);
            }
        }
    }
    // Signatures that cannot verify whatever the key: a foreign signer, an original TTL
    // other than the RRset's, more labels than the owner has.
    for id in zone.node_ids() {
        for s in zone.rrsets(id).iter().filter(|s| s.rtype == t::RRSIG) {
            let covered_ttl = zone.rrset(id, s.covered).map(|c| c.ttl);
            for (_, rd) in zone.rrs(s) {
                if rd.len() < 18 {
                    continue;
                }
                let labels = rd[3] as usize;
                let orig_ttl = u32::from_be_bytes([rd[4], rd[5], rd[6], rd[7]]);
                let signer = &rd[18..];
                let name = crate::name::display(zone.node_name(id));
                let bad = if crate::name::wire_name_len(signer)
                    .is_none_or(|l| !signer[..l].eq_ignore_ascii_case(zone.apex().as_wire()))
                {
                    Some("signer is not the zone apex")
                } else if covered_ttl.is_some_and(|t| t != orig_ttl) {
                    Some("original TTL differs from the RRset's TTL")
                } else if labels > crate::name::label_count(zone.node_name(id)) {
                    Some("more labels than the owner name")
                } else if s.covered == t::RRSIG {
                    Some("an RRSIG over RRSIG")
                } else {
                    None
                };
                if let Some(why) = bad {
                    warn(
                        at(id),
                        format!(
                            "no valid signature for a record: RRSIG {} at {name}: {why}",
                            crate::rrtype::to_text(s.covered)
                        ),
                        report,
                    );
                }
            }
        }
    }
    // Authoritative data must be signed; at a cut only DS and NSEC are.
    for id in zone.node_ids() {
        let n = zone.node(id);
        if n.has(f::OCCLUDED) {
            continue;
        }
        let cut = n.has(f::DELEG);
        for s in zone.rrsets(id) {
            if s.rtype == t::RRSIG || (cut && !matches!(s.rtype, t::DS | t::NSEC)) {
                continue;
            }
            if zone.rrsig(id, s.rtype).is_none() {
                warn(
                    at(id),
                    format!(
                        "no valid signature for a record: {} {} has no RRSIG",
                        crate::name::display(zone.node_name(id)),
                        crate::rrtype::to_text(s.rtype)
                    ),
                    report,
                );
            }
        }
    }
    if zone.has_nsec() {
        // Every authoritative name with data (and every cut) owns an NSEC; each points at
        // the next such name, the last back at the apex; bitmaps list the types present.
        let owners: Vec<u32> = zone
            .node_ids()
            .filter(|&id| {
                let n = zone.node(id);
                !n.has(f::OCCLUDED) && !n.has(f::EMPTY)
            })
            .collect();
        for (k, &id) in owners.iter().enumerate() {
            let name = crate::name::display(zone.node_name(id));
            let Some(nsec) = zone.rrset(id, t::NSEC) else {
                warn(at(id), format!("missing NSEC(3) record for {name}"), report);
                continue;
            };
            let Some((_, rd)) = zone.rrs(nsec).next() else {
                continue;
            };
            let Some((next, bitmap)) = nsec_bitmap(rd) else {
                continue;
            };
            let want = zone.node_name(owners[(k + 1) % owners.len()]);
            if !next.eq_ignore_ascii_case(want) {
                warn(
                    at(id),
                    format!(
                        "inconsistent NSEC(3) chain: NSEC of {name} points at {}, the next name is {}",
                        crate::name::display(next),
                        crate::name::display(want)
                    ),
                    report,
                );
            }
            let listed: Vec<u16> = bitmap_types(bitmap).collect();
            if listed != bitmap_should_list(zone, id, true) {
                warn(at(id), format!("wrong NSEC(3) bitmap at {name}"), report);
            }
        }
    }
    if let Some(chain) = zone.nsec3() {
        if let Some(p) = chain.params()
            && p.flags != 0
        {
            warn(
                at(0),
                "invalid flags in NSEC3PARAM (must be 0)".into(),
                report,
            );
        }
        // Each chain closes on its own (a zone may hold two while it changes parameters):
        // an entry's next hash is the next entry of the same hash algorithm, iterations and
        // salt.
        let params_of = |i: usize| {
            let s = zone.nsec3_rrsets(i).iter().find(|s| s.rtype == t::NSEC3)?;
            let (_, rd) = zone.rrs(s).next()?;
            let p = crate::nsec3::Nsec3Params::from_rdata(rd)?;
            Some((p.alg, p.iterations, p.salt))
        };
        let mut chains: std::collections::HashMap<_, Vec<usize>> = Default::default();
        for i in 0..chain.len() {
            if let Some(k) = params_of(i) {
                chains.entry(k).or_default().push(i);
            }
        }
        let next_of: std::collections::HashMap<usize, usize> = chains
            .values()
            .flat_map(|c| (0..c.len()).map(move |k| (c[k], c[(k + 1) % c.len()])))
            .collect();
        for i in 0..chain.len() {
            let Some(s) = zone.nsec3_rrsets(i).iter().find(|s| s.rtype == t::NSEC3) else {
                continue;
            };
            let Some((_, rd)) = zone.rrs(s).next() else {
                continue;
            };
            let Some((_, next, _)) = nsec3_parts(rd) else {
                continue;
            };
            let Some(&j) = next_of.get(&i) else {
                continue;
            };
            if next != &chain.hashes[j][..] {
                warn(
                    at(0),
                    format!(
                        "inconsistent NSEC(3) chain at {}",
                        crate::name::display(zone.nsec3_name(i))
                    ),
                    report,
                );
            }
        }
        if chain.params().is_some() && !chain.node_match.is_empty() {
            for id in zone.node_ids() {
                let n = zone.node(id);
                if n.has(f::OCCLUDED) {
                    continue;
                }
                let name = crate::name::display(zone.node_name(id));
                match chain.node_match(id) {
                    Some(i) => {
                        let s = zone.nsec3_rrsets(i).iter().find(|s| s.rtype == t::NSEC3);
                        let Some((_, rd)) = s.and_then(|s| zone.rrs(s).next()) else {
                            continue;
                        };
                        let Some((_, _, bitmap)) = nsec3_parts(rd) else {
                            continue;
                        };
                        let listed: Vec<u16> = bitmap_types(bitmap).collect();
                        if listed != bitmap_should_list(zone, id, false) {
                            warn(at(id), format!("wrong NSEC(3) bitmap at {name}"), report);
                        }
                    }
                    None => {
                        // Only names covered by an opt-out NSEC3 may go without: insecure
                        // delegations and the empty non-terminals above them.
                        let opted_out = if n.has(f::EMPTY) {
                            only_insecure_below(zone, id) && covering_opt_out(zone, chain, id)
                        } else {
                            n.has(f::DELEG)
                                && zone.rrset(id, t::DS).is_none()
                                && covering_opt_out(zone, chain, id)
                        };
                        if !opted_out {
                            warn(at(id), format!("missing NSEC(3) record for {name}"), report);
                        }
                    }
                }
            }
        }
    }
}

/// True when everything below the empty non-terminal `id` is an insecure delegation (or
/// lies below one): only then may opt-out leave it without an NSEC3 (RFC 5155 §7.1).
fn only_insecure_below(zone: &Zone, id: u32) -> bool {
    use crate::zone::flags as f;
    let top = zone.node_name(id);
    ((id + 1)..zone.node_count() as u32)
        .take_while(|&d| crate::name::is_subdomain(zone.node_name(d), top))
        .all(|d| {
            let n = zone.node(d);
            n.has(f::OCCLUDED)
                || n.has(f::EMPTY)
                || (n.has(f::DELEG) && zone.rrset(d, t::DS).is_none())
        })
}

/// True when the NSEC3 covering node `id`'s hash has the opt-out flag.
fn covering_opt_out(zone: &Zone, chain: &crate::nsec3::Nsec3Chain, id: u32) -> bool {
    let Some(p) = chain.params() else {
        return false;
    };
    let h = p.hash(zone.node_name(id));
    let Some(i) = chain.find_cover(&h) else {
        return false;
    };
    zone.nsec3_rrsets(i)
        .iter()
        .find(|s| s.rtype == t::NSEC3)
        .and_then(|s| zone.rrs(s).next())
        .is_some_and(|(_, rd)| rd.get(1).is_some_and(|fl| fl & 1 == 1))
}

/// The signatures of a zone against the clock: the earliest expiration of any RRSIG
/// (None for an unsigned zone) and how many have expired at `now` (RFC 4034 §3.1.5 times).
pub fn signature_expiry(zone: &Zone, now: u32) -> (Option<u32>, usize) {
    let mut earliest: Option<u32> = None;
    let mut expired = 0;
    let n3 = zone.nsec3().map_or(0, |c| c.len());
    let tree = zone.node_ids().flat_map(|id| zone.rrsets(id).iter());
    let chain = (0..n3).flat_map(|i| zone.nsec3_rrsets(i).iter());
    for s in tree.chain(chain).filter(|s| s.rtype == t::RRSIG) {
        for (_, rd) in zone.rrs(s) {
            let Some(b) = rd.get(8..12) else { continue };
            let exp = u32::from_be_bytes([b[0], b[1], b[2], b[3]]);
            if crate::arith::secs_between(now, exp) < 0 {
                expired += 1;
            }
            if earliest.is_none_or(|e| crate::arith::secs_between(e, exp) < 0) {
                earliest = Some(exp);
            }
        }
    }
    (earliest, expired)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The delete forms of CDS and CDNSKEY, as RFC 8078 writes them (no digest, no key: NSD
    /// and simdzone) and as its erratum does (one zero octet), load at the apex: the zone's
    /// own `CDNSKEY 0 3 0 0` was refused as matching no DNSKEY.
    #[test]
    fn the_delete_forms_load_at_the_apex() {
        let apex = crate::Name::parse("d.test.", None).unwrap();
        for (cds, cdnskey) in [("0 0 0 0", "0 3 0 0"), ("0 0 0 00", "0 3 0 AA==")] {
            let text = format!(
                "$TTL 60\n@ SOA ns h 1 3600 900 604800 300\n@ NS ns\nns A 192.0.2.1\n\
                 @ CDS {cds}\n@ CDNSKEY {cdnskey}\n"
            );
            let r = crate::load_bytes(
                "d.zone",
                text.as_bytes(),
                &apex,
                &crate::ReadOptions::new(&apex),
            );
            assert!(r.is_ok(), "{cds} / {cdnskey}: {:?}", r.err());
        }
    }

    #[test]
    fn key_tag_and_digest_of_rfc4034_example() {
        // RFC 4034 §5.4: the DS of dskey.example.com. (key tag 60485, SHA-1).
        let key = data_encoding::BASE64
            .decode(
                b"AQOeiiR0GOMYkDshWoSKz9XzfwJr1AYtsmx3TGkJaNXVbfi/2pHm822aJ5iI9BMzNXxeYCmZDRD99WYwYqUSdjMmmAphXdvxegXd/M5+X7OrzKBaMbCVdFLUUh6DhweJBjEVv5f2wwjM9XzcnOf+EPbtG9DMBmADjFDc2w/rljwvFw==",
            )
            .unwrap();
        let mut rd = vec![1, 0, 3, 5];
        rd.extend_from_slice(&key);
        assert_eq!(key_tag(&rd), 60485);
        let owner = crate::Name::parse("dskey.example.com.", None).unwrap();
        let d = ds_digest(owner.as_wire(), &rd, 1).unwrap();
        let want = data_encoding::HEXUPPER
            .decode(b"2BB183AF5F22588179A53B0A98631FAD1A292118")
            .unwrap();
        assert_eq!(d, want);
    }
}
