//! DNSSEC facts computed from zone data: key tags, DS digests, and the load-time checks
//! on CDS and CDNSKEY (RFC 7344, RFC 8078).

use sha1::Digest as _;

use crate::build::{Src, display};
use crate::rrtype::t;
use crate::validate::Severity;
use crate::zone::Zone;

/// The key tag of DNSKEY RDATA (RFC 4034 Appendix B).
pub fn key_tag(dnskey: &[u8]) -> u16 {
    if dnskey.len() >= 4 && dnskey[3] == 1 {
        // Algorithm 1 (RSA/MD5): the 16 bits before the last octet of the modulus.
        let n = dnskey.len();
        return if n >= 3 {
            u16::from_be_bytes([dnskey[n - 3], dnskey[n - 2]])
        } else {
            0
        };
    }
    let mut ac: u32 = 0;
    for (i, &b) in dnskey.iter().enumerate() {
        ac += if i & 1 == 1 {
            b as u32
        } else {
            (b as u32) << 8
        };
    }
    ac += (ac >> 16) & 0xFFFF;
    (ac & 0xFFFF) as u16
}

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

/// True for the CDS "delete" form `0 0 0 00` (RFC 8078 §4).
fn cds_delete(rd: &[u8]) -> bool {
    rd.len() == 5 && rd[..4] == [0, 0, 0, 0] && rd[4] == 0
}

/// True for the CDNSKEY "delete" form `0 3 0 AA==` (RFC 8078 §4).
fn cdnskey_delete(rd: &[u8]) -> bool {
    rd == [0, 0, 3, 0, 0]
}

/// CDS and CDNSKEY at the apex must describe keys the zone holds (BIND refuses the zone
/// otherwise); a CDS without CDNSKEY or the reverse is worth a warning (Knot).
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
                Severity::Error,
                at,
                format!(
                    "CDS {tag} {alg} {dt} at {} matches no DNSKEY of the zone (CDS/CDNSKEY consistency)",
                    display(apex)
                ),
            );
        }
    }
    for rd in cdnskey.iter().filter(|rd| !cdnskey_delete(rd)) {
        if !keys.contains(rd) {
            report(
                Severity::Error,
                at,
                format!(
                    "CDNSKEY (key tag {}) at {} matches no DNSKEY of the zone (CDS/CDNSKEY consistency)",
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

#[cfg(test)]
mod tests {
    use super::*;

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
