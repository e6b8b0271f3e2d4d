//! Resource record type codes and their mnemonics (IANA "Resource Record (RR) TYPEs").

/// Type codes used by name in the code. The full mnemonic table is [`TYPES`].
#[allow(missing_docs)]
pub mod t {
    pub const A: u16 = 1;
    pub const NS: u16 = 2;
    pub const MD: u16 = 3;
    pub const MF: u16 = 4;
    pub const CNAME: u16 = 5;
    pub const SOA: u16 = 6;
    pub const MB: u16 = 7;
    pub const MG: u16 = 8;
    pub const MR: u16 = 9;
    pub const NULL: u16 = 10;
    pub const WKS: u16 = 11;
    pub const PTR: u16 = 12;
    pub const HINFO: u16 = 13;
    pub const MINFO: u16 = 14;
    pub const MX: u16 = 15;
    pub const TXT: u16 = 16;
    pub const RP: u16 = 17;
    pub const AFSDB: u16 = 18;
    pub const X25: u16 = 19;
    pub const ISDN: u16 = 20;
    pub const RT: u16 = 21;
    pub const NSAP: u16 = 22;
    pub const NSAP_PTR: u16 = 23;
    pub const SIG: u16 = 24;
    pub const KEY: u16 = 25;
    pub const PX: u16 = 26;
    pub const GPOS: u16 = 27;
    pub const AAAA: u16 = 28;
    pub const LOC: u16 = 29;
    pub const NXT: u16 = 30;
    pub const EID: u16 = 31;
    pub const NIMLOC: u16 = 32;
    pub const SRV: u16 = 33;
    pub const ATMA: u16 = 34;
    pub const NAPTR: u16 = 35;
    pub const KX: u16 = 36;
    pub const CERT: u16 = 37;
    pub const A6: u16 = 38;
    pub const DNAME: u16 = 39;
    pub const SINK: u16 = 40;
    pub const OPT: u16 = 41;
    pub const APL: u16 = 42;
    pub const DS: u16 = 43;
    pub const SSHFP: u16 = 44;
    pub const IPSECKEY: u16 = 45;
    pub const RRSIG: u16 = 46;
    pub const NSEC: u16 = 47;
    pub const DNSKEY: u16 = 48;
    pub const DHCID: u16 = 49;
    pub const NSEC3: u16 = 50;
    pub const NSEC3PARAM: u16 = 51;
    pub const TLSA: u16 = 52;
    pub const SMIMEA: u16 = 53;
    pub const HIP: u16 = 55;
    pub const NINFO: u16 = 56;
    pub const RKEY: u16 = 57;
    pub const TALINK: u16 = 58;
    pub const CDS: u16 = 59;
    pub const CDNSKEY: u16 = 60;
    pub const OPENPGPKEY: u16 = 61;
    pub const CSYNC: u16 = 62;
    pub const ZONEMD: u16 = 63;
    pub const SVCB: u16 = 64;
    pub const HTTPS: u16 = 65;
    pub const DSYNC: u16 = 66;
    pub const HHIT: u16 = 67;
    pub const BRID: u16 = 68;
    pub const SPF: u16 = 99;
    pub const UINFO: u16 = 100;
    pub const UID: u16 = 101;
    pub const GID: u16 = 102;
    pub const UNSPEC: u16 = 103;
    pub const NID: u16 = 104;
    pub const L32: u16 = 105;
    pub const L64: u16 = 106;
    pub const LP: u16 = 107;
    pub const EUI48: u16 = 108;
    pub const EUI64: u16 = 109;
    pub const NXNAME: u16 = 128;
    pub const TKEY: u16 = 249;
    pub const TSIG: u16 = 250;
    pub const IXFR: u16 = 251;
    pub const AXFR: u16 = 252;
    pub const MAILB: u16 = 253;
    pub const MAILA: u16 = 254;
    pub const ANY: u16 = 255;
    pub const URI: u16 = 256;
    pub const CAA: u16 = 257;
    pub const AVC: u16 = 258;
    pub const DOA: u16 = 259;
    pub const AMTRELAY: u16 = 260;
    pub const RESINFO: u16 = 261;
    pub const WALLET: u16 = 262;
    pub const CLA: u16 = 263;
    pub const IPN: u16 = 264;
    pub const TA: u16 = 32768;
    pub const DLV: u16 = 32769;
    /// PowerDNS's ALIAS (a private-use code): A and AAAA of another name, answered as ours.
    pub const ALIAS: u16 = 65401;
}

/// Every type with a mnemonic, in code order.
pub const TYPES: &[(u16, &str)] = &[
    (t::A, "A"),
    (t::NS, "NS"),
    (t::MD, "MD"),
    (t::MF, "MF"),
    (t::CNAME, "CNAME"),
    (t::SOA, "SOA"),
    (t::MB, "MB"),
    (t::MG, "MG"),
    (t::MR, "MR"),
    (t::NULL, "NULL"),
    (t::WKS, "WKS"),
    (t::PTR, "PTR"),
    (t::HINFO, "HINFO"),
    (t::MINFO, "MINFO"),
    (t::MX, "MX"),
    (t::TXT, "TXT"),
    (t::RP, "RP"),
    (t::AFSDB, "AFSDB"),
    (t::X25, "X25"),
    (t::ISDN, "ISDN"),
    (t::RT, "RT"),
    (t::NSAP, "NSAP"),
    (t::NSAP_PTR, "NSAP-PTR"),
    (t::SIG, "SIG"),
    (t::KEY, "KEY"),
    (t::PX, "PX"),
    (t::GPOS, "GPOS"),
    (t::AAAA, "AAAA"),
    (t::LOC, "LOC"),
    (t::NXT, "NXT"),
    (t::EID, "EID"),
    (t::NIMLOC, "NIMLOC"),
    (t::SRV, "SRV"),
    (t::ATMA, "ATMA"),
    (t::NAPTR, "NAPTR"),
    (t::KX, "KX"),
    (t::CERT, "CERT"),
    (t::A6, "A6"),
    (t::DNAME, "DNAME"),
    (t::SINK, "SINK"),
    (t::OPT, "OPT"),
    (t::APL, "APL"),
    (t::DS, "DS"),
    (t::SSHFP, "SSHFP"),
    (t::IPSECKEY, "IPSECKEY"),
    (t::RRSIG, "RRSIG"),
    (t::NSEC, "NSEC"),
    (t::DNSKEY, "DNSKEY"),
    (t::DHCID, "DHCID"),
    (t::NSEC3, "NSEC3"),
    (t::NSEC3PARAM, "NSEC3PARAM"),
    (t::TLSA, "TLSA"),
    (t::SMIMEA, "SMIMEA"),
    (t::HIP, "HIP"),
    (t::NINFO, "NINFO"),
    (t::RKEY, "RKEY"),
    (t::TALINK, "TALINK"),
    (t::CDS, "CDS"),
    (t::CDNSKEY, "CDNSKEY"),
    (t::OPENPGPKEY, "OPENPGPKEY"),
    (t::CSYNC, "CSYNC"),
    (t::ZONEMD, "ZONEMD"),
    (t::SVCB, "SVCB"),
    (t::HTTPS, "HTTPS"),
    (t::DSYNC, "DSYNC"),
    (t::HHIT, "HHIT"),
    (t::BRID, "BRID"),
    (t::SPF, "SPF"),
    (t::UINFO, "UINFO"),
    (t::UID, "UID"),
    (t::GID, "GID"),
    (t::UNSPEC, "UNSPEC"),
    (t::NID, "NID"),
    (t::L32, "L32"),
    (t::L64, "L64"),
    (t::LP, "LP"),
    (t::EUI48, "EUI48"),
    (t::EUI64, "EUI64"),
    (t::NXNAME, "NXNAME"),
    (t::TKEY, "TKEY"),
    (t::TSIG, "TSIG"),
    (t::IXFR, "IXFR"),
    (t::AXFR, "AXFR"),
    (t::MAILB, "MAILB"),
    (t::MAILA, "MAILA"),
    (t::ANY, "ANY"),
    (t::URI, "URI"),
    (t::CAA, "CAA"),
    (t::AVC, "AVC"),
    (t::DOA, "DOA"),
    (t::AMTRELAY, "AMTRELAY"),
    (t::RESINFO, "RESINFO"),
    (t::WALLET, "WALLET"),
    (t::CLA, "CLA"),
    (t::IPN, "IPN"),
    (t::TA, "TA"),
    (t::DLV, "DLV"),
    (t::ALIAS, "ALIAS"),
];

/// The mnemonic of a type code, if it has one (codes below 256 by direct index).
#[inline]
pub fn mnemonic(code: u16) -> Option<&'static str> {
    static LOW: std::sync::LazyLock<[Option<&'static str>; 256]> = std::sync::LazyLock::new(|| {
        let mut t = [None; 256];
        for &(c, m) in TYPES {
            if c < 256 {
                t[c as usize] = Some(m);
            }
        }
        t
    });
    if code < 256 {
        return LOW[code as usize];
    }
    TYPES
        .binary_search_by_key(&code, |&(c, _)| c)
        .ok()
        .map(|i| TYPES[i].1)
}

/// True for the pseudo-types that never appear in zone data (OPT, TKEY, TSIG, IXFR, AXFR,
/// MAILB, MAILA, ANY): a type bitmap must not list them (RFC 4034 §4.1.2), nor an RRSIG
/// cover them.
pub fn is_pseudo(t: u16) -> bool {
    t == 41 || (249..=255).contains(&t)
}

/// Reads a type from text: a mnemonic (any case) or `TYPEnnn` (RFC 3597).
pub fn from_text(s: &[u8]) -> Option<u16> {
    if s.len() > 4 && s[..4].eq_ignore_ascii_case(b"TYPE") {
        let digits = &s[4..];
        if digits.iter().all(u8::is_ascii_digit) && digits.len() <= 5 {
            let v: u32 = std::str::from_utf8(digits).ok()?.parse().ok()?;
            return u16::try_from(v).ok();
        }
    }
    if s.len() > 10 {
        return None;
    }
    TYPES
        .iter()
        .find(|(_, m)| m.as_bytes().eq_ignore_ascii_case(s))
        .map(|&(c, _)| c)
}

/// Writes a type as its mnemonic or `TYPEnnn`.
pub fn to_text(code: u16) -> std::borrow::Cow<'static, str> {
    match mnemonic(code) {
        Some(m) => m.into(),
        None => format!("TYPE{code}").into(),
    }
}

/// The assigned meta types and QTYPEs, which may not appear in a zone (RFC 6895 §3.1).
///
/// Unassigned codes in 128-255 are let through as opaque data, as NSD does.
pub fn is_meta(code: u16) -> bool {
    matches!(
        code,
        t::OPT | t::TKEY | t::TSIG | t::IXFR | t::AXFR | t::MAILB | t::MAILA | t::ANY | t::NXNAME
    )
}

/// Types allowed beside a CNAME (RFC 4035 §2.5: its RRSIG and NSEC).
pub fn is_dnssec(code: u16) -> bool {
    matches!(code, t::RRSIG | t::NSEC)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table_is_sorted_and_round_trips() {
        for w in TYPES.windows(2) {
            assert!(w[0].0 < w[1].0);
        }
        for &(c, m) in TYPES {
            assert_eq!(from_text(m.as_bytes()), Some(c));
            assert_eq!(from_text(m.to_lowercase().as_bytes()), Some(c));
            assert_eq!(to_text(c), m);
        }
        assert_eq!(from_text(b"TYPE65000"), Some(65000));
        assert_eq!(from_text(b"type1"), Some(1));
        assert_eq!(from_text(b"TYPE65536"), None);
        assert_eq!(to_text(65000), "TYPE65000");
        assert_eq!(from_text(b"BOGUS"), None);
    }
}
