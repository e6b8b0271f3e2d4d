//! Mnemonics of numeric RDATA fields: DNSSEC algorithms and CERT types.

use std::fmt::Write;

/// DNSSEC algorithm mnemonics (IANA "DNS Security Algorithm Numbers").
const ALGS: &[(u8, &str)] = &[
    (1, "RSAMD5"),
    (2, "DH"),
    (3, "DSA"),
    (5, "RSASHA1"),
    (6, "DSA-NSEC3-SHA1"),
    (7, "RSASHA1-NSEC3-SHA1"),
    (8, "RSASHA256"),
    (10, "RSASHA512"),
    (12, "ECC-GOST"),
    (13, "ECDSAP256SHA256"),
    (14, "ECDSAP384SHA384"),
    (15, "ED25519"),
    (16, "ED448"),
    (17, "SM2SM3"),
    (23, "ECC-GOST12"),
    (252, "INDIRECT"),
    (253, "PRIVATEDNS"),
    (254, "PRIVATEOID"),
];

/// CERT type mnemonics (RFC 4398 §2.1).
const CERT_TYPES: &[(u16, &str)] = &[
    (1, "PKIX"),
    (2, "SPKI"),
    (3, "PGP"),
    (4, "IPKIX"),
    (5, "ISPKI"),
    (6, "IPGP"),
    (7, "ACPKIX"),
    (8, "IACPKIX"),
    (253, "URI"),
    (254, "OID"),
];

/// Reads a DNSSEC algorithm: decimal 0-255 or a mnemonic (any case).
pub(crate) fn alg_from_text(s: &[u8]) -> Option<u8> {
    if let Some(v) = super::codec::uint(s, 255) {
        return Some(v as u8);
    }
    ALGS.iter()
        .find(|(_, m)| m.as_bytes().eq_ignore_ascii_case(s))
        .map(|&(v, _)| v)
}

/// Reads a CERT type: decimal 0-65535 or a mnemonic (any case).
pub(crate) fn cert_type_from_text(s: &[u8]) -> Option<u16> {
    if let Some(v) = super::codec::uint(s, 65535) {
        return Some(v as u16);
    }
    CERT_TYPES
        .iter()
        .find(|(_, m)| m.as_bytes().eq_ignore_ascii_case(s))
        .map(|&(v, _)| v)
}

/// Writes a CERT type as its mnemonic, or decimal when it has none.
pub(crate) fn write_cert_type(v: u16, out: &mut String) {
    match CERT_TYPES.iter().find(|&&(c, _)| c == v) {
        Some((_, m)) => out.push_str(m),
        None => {
            let _ = write!(out, "{v}");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mnemonics() {
        assert_eq!(alg_from_text(b"rsasha256"), Some(8));
        assert_eq!(alg_from_text(b"255"), Some(255));
        assert_eq!(alg_from_text(b"256"), None);
        assert_eq!(cert_type_from_text(b"PKIX"), Some(1));
        assert_eq!(cert_type_from_text(b"X"), None);
        let mut s = String::new();
        write_cert_type(254, &mut s);
        write_cert_type(9, &mut s);
        assert_eq!(s, "OID9");
    }
}
