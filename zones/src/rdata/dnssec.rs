//! Semantic checks of the DNSSEC and digest types, applied to wire RDATA so that the text
//! and `\#` forms obey the same rules.

use crate::rrtype::t;

fn be16(b: &[u8]) -> u16 {
    u16::from_be_bytes([b[0], b[1]])
}

/// DS, CDS, TA, DLV: a digest of a known type has that type's length (RFC 4509, 6605).
pub(crate) fn ds(_rtype: u16, r: &[u8]) -> Result<(), String> {
    let (Some(&dt), Some(digest)) = (r.get(3), r.get(4..)) else {
        return Err("DS RDATA too short".into());
    };
    if digest.is_empty() {
        // Only the CDS "delete" form (RFC 8078 §4) has no digest; the layout allows it
        // for CDS alone.
        return Ok(());
    }
    let want = match dt {
        1 => 20,
        2 => 32,
        4 => 48,
        _ => return Ok(()),
    };
    if digest.len() != want {
        return Err(format!(
            "digest type {dt} needs a {want}-octet digest, not {}",
            digest.len()
        ));
    }
    Ok(())
}

/// SSHFP: SHA-1 fingerprints are 20 octets, SHA-256 ones 32 (RFC 4255, 6594).
pub(crate) fn sshfp(_rtype: u16, r: &[u8]) -> Result<(), String> {
    let (Some(&ft), Some(fp)) = (r.get(1), r.get(2..)) else {
        return Err("SSHFP RDATA too short".into());
    };
    let want = match ft {
        1 => 20,
        2 => 32,
        _ => return Ok(()),
    };
    if fp.len() != want {
        return Err(format!(
            "fingerprint type {ft} needs {want} octets, not {}",
            fp.len()
        ));
    }
    Ok(())
}

/// ZONEMD: SHA-384 digests are 48 octets, SHA-512 64, any digest at least 12
/// (RFC 8976 §2.2.4).
pub(crate) fn zonemd(_rtype: u16, r: &[u8]) -> Result<(), String> {
    let (Some(&alg), Some(digest)) = (r.get(5), r.get(6..)) else {
        return Err("ZONEMD RDATA too short".into());
    };
    match (alg, digest.len()) {
        (1, 48) | (2, 64) => Ok(()),
        (1, n) => Err(format!("SHA-384 digest must be 48 octets, not {n}")),
        (2, n) => Err(format!("SHA-512 digest must be 64 octets, not {n}")),
        (_, n) if n < 12 => Err(format!(
            "digest must be at least 12 octets, not {n} (RFC 8976 §2.2.4)"
        )),
        _ => Ok(()),
    }
}

/// NSEC3: a SHA-1 next hashed owner is 20 octets (RFC 5155 §3.1.7), and any must fit in
/// one label once encoded (at most 39 octets), as BIND checks.
pub(crate) fn nsec3(_rtype: u16, r: &[u8]) -> Result<(), String> {
    let salt = *r.get(4).ok_or("NSEC3 RDATA too short")? as usize;
    let hash = *r.get(5 + salt).ok_or("NSEC3 RDATA too short")? as usize;
    if r[0] == 1 && hash != 20 {
        return Err(format!(
            "SHA-1 next hashed owner must be 20 octets, not {hash}"
        ));
    }
    if hash > 39 {
        return Err(format!(
            "next hashed owner of {hash} octets does not fit in a label (at most 39)"
        ));
    }
    Ok(())
}

/// KEY, DNSKEY, CDNSKEY, RKEY: key material is present, except for KEY's NOKEY flags
/// (RFC 2535 §3.1.2) and the CDNSKEY delete form (RFC 8078 §4).
///
/// The key itself is not interpreted: a server publishes keys, it does not use them. So the
/// name or OID that private algorithms 253 and 254 put first (RFC 4034 Appendix A.1.1) is
/// not checked, as Knot and NSD do not (BIND does).
pub(crate) fn key(rtype: u16, r: &[u8]) -> Result<(), String> {
    let (Some(flags), Some(&alg), Some(key)) = (r.get(0..2), r.get(3), r.get(4..)) else {
        return Err("key RDATA too short".into());
    };
    let flags = be16(flags);
    if rtype == t::KEY && flags & 0xc000 == 0xc000 {
        if !key.is_empty() {
            return Err("KEY with the NOKEY flags has no key material".into());
        }
        return Ok(());
    }
    if key.is_empty() {
        if rtype == t::CDNSKEY && alg == 0 {
            return Ok(());
        }
        return Err("missing key material".into());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::super::testutil::{case, refused};
    use crate::rrtype::t;

    #[test]
    fn digests() {
        let sha1 = "4FDCE83016EDD29077621FE568F8DADDB5809B6A";
        case(
            t::DS,
            &format!("0 RSAMD5 1 {sha1}"),
            &format!("00000101{}", sha1.to_lowercase()),
            &format!("0 1 1 {sha1}"),
        );
        refused(t::DS, "0 0 1 00", "20-octet");
        refused(t::DS, "0 0 2 00", "32-octet");
        refused(t::DS, "0 0 0", "missing hex");
        refused(t::DS, "0 0 0 0", "odd number");
        case(t::DS, "0 0 3 00", "0000000300", "0 0 3 00");
        case(t::CDS, "0 0 0 0", "00000000", "0 0 0 0");
        case(t::CDS, "0 0 0 00", "0000000000", "0 0 0 00");
        case(
            t::SSHFP,
            "4 2 A87F1B687AC0E57D2A081A2F282672334D90ED316D2B818CA9580EA3 84D92401",
            "0402a87f1b687ac0e57d2a081a2f282672334d90ed316d2b818ca9580ea384d92401",
            "4 2 A87F1B687AC0E57D2A081A2F282672334D90ED316D2B818CA9580EA384D92401",
        );
        refused(t::SSHFP, "0 1 AA", "20 octets");
        case(
            t::ZONEMD,
            "1 1 255 DEADBEEFDEADBEEFDEADBEEF",
            "000000010 1ffdeadbeefdeadbeefdeadbeef"
                .replace(' ', "")
                .as_str(),
            "1 1 255 DEADBEEFDEADBEEFDEADBEEF",
        );
        refused(t::ZONEMD, "1 1 255 DEADBEEFDEADBEEFDEADBE", "at least 12");
        refused(t::ZONEMD, "1 1 1 DEADBEEFDEADBEEFDEADBEEF", "48 octets");
        refused(t::ZONEMD, "1 1 2 DEADBEEFDEADBEEFDEADBEEF", "64 octets");
    }

    #[test]
    fn keys() {
        case(
            t::DNSKEY,
            "256 3 ED25519 AA==",
            "0100030f00",
            "256 3 15 AA==",
        );
        refused(t::DNSKEY, "256 3 8", "missing base64");
        case(t::CDNSKEY, "0 3 0 0", "00000300", "0 3 0 0");
        refused(t::CDNSKEY, "0 3 8 0", "key material");
        case(t::KEY, "49152 3 1", "c0000301", "49152 3 1");
        refused(t::KEY, "49152 3 1 AA==", "NOKEY");
        // Private algorithms' key contents are not interpreted.
        case(t::KEY, "0 0 253 wAAA", "000000fdc00000", "0 0 253 wAAA");
        case(
            t::DNSKEY,
            "257 3 253 YmlsYm8=",
            "010103fd62696c626f",
            "257 3 253 YmlsYm8=",
        );
        refused(t::DNSKEY, "256 3 8 AA ==", "padding");
    }

    #[test]
    fn rrsig_and_nsec3() {
        case(
            t::RRSIG,
            "A 8 2 3600 20260426170000 1776099600 54393 . AQID",
            "00010802 00000e10 69ee4490 69dd2110 d479 00 010203"
                .replace(' ', "")
                .as_str(),
            "A 8 2 3600 20260426170000 20260413170000 54393 . AQID",
        );
        refused(t::RRSIG, "A 8 2 3600 2026042617000 0 1 . AQID", "");
        refused(t::RRSIG, "BOGUS 8 2 3600 0 0 1 . AQID", "RR type");
        refused(t::RRSIG, "ANY 8 2 3600 0 0 1 . AQID", "pseudo-type");
        case(
            t::NSEC3,
            "1 1 12 aabbccdd k8udemvp1j2f7eg6jebps17vp3n8i58h",
            "0101000c04aabbccdd14a23cd75bf90cc4f3ba069b979e04ffc8ee891511",
            "1 1 12 AABBCCDD k8udemvp1j2f7eg6jebps17vp3n8i58h",
        );
        case(
            t::NSEC3,
            "0 0 0 - 00====== A",
            "00000000000100 000140".replace(' ', "").as_str(),
            "0 0 0 - 00 A",
        );
        refused(t::NSEC3, "1 0 0 - CPNMU===", "20 octets");
        refused(
            t::NSEC3,
            "2 0 0 - 64P36D1L6ORJGE9G64P36D1L6ORJGE9G64P36D1L6ORJGE9G64P36D1L6ORJGE9G",
            "fit in a label",
        );
        refused(t::NSEC3, "0 0 0 00 FF 00======", "base32hex");
        refused(t::NSEC3, "0 0 0 - CPNMUOJ1 E8======", "RR type");
        case(t::NSEC3PARAM, "1 0 10 -", "0100000a00", "1 0 10 -");
        refused(t::NSEC3PARAM, "1 0 10 0", "odd number");
    }
}
