//! Type bitmaps: the windowed NSEC form (RFC 4034 §4.1.2, also NSEC3 and CSYNC) and the
//! flat NXT form (RFC 2535 §5.2).

use super::codec::{bad, word};
use super::{Fields, RdataError};

/// Reads type mnemonics up to the end of the RDATA into a windowed bitmap.
pub(crate) fn parse_nsec(fields: &mut Fields<'_>, out: &mut Vec<u8>) -> Result<(), RdataError> {
    let mut types = Vec::with_capacity(fields.remaining());
    while !fields.is_empty() {
        let f = word(fields, "an RR type")?;
        let t = crate::rrtype::from_text(f.text)
            .ok_or_else(|| bad(&f, "expected an RR type mnemonic or TYPEnnn"))?;
        if crate::rrtype::is_pseudo(t) {
            return Err(bad(
                &f,
                "a pseudo-type never in zone data (RFC 4034 §4.1.2)",
            ));
        }
        types.push(t);
    }
    encode(&mut types, out);
    Ok(())
}

/// Writes `types` (sorted and deduplicated here) as a windowed bitmap.
pub(crate) fn encode(types: &mut Vec<u16>, out: &mut Vec<u8>) {
    types.sort_unstable();
    types.dedup();
    let start = out.len();
    // At most 34 octets per window present.
    out.resize(start + 34 * types.len().min(256), 0);
    let n = encode_into(types, &mut out[start..]).expect("room for every window");
    out.truncate(start + n);
}

/// Writes sorted, deduplicated `types` as a windowed bitmap into `out`, without
/// allocating; its length, or None when it does not fit.
pub(crate) fn encode_into(types: &[u16], out: &mut [u8]) -> Option<usize> {
    // One window per high octet present, as long as its highest type needs.
    let (mut i, mut n) = (0, 0);
    while i < types.len() {
        let window = types[i] >> 8;
        let end = types[i..].partition_point(|&t| t >> 8 == window) + i;
        let last = (types[end - 1] & 0xff) as usize / 8;
        let w = out.get_mut(n..n + 3 + last)?;
        w.fill(0);
        w[0] = window as u8;
        w[1] = last as u8 + 1;
        for &t in &types[i..end] {
            w[2 + (t & 0xff) as usize / 8] |= 0x80 >> (t % 8);
        }
        n += 3 + last;
        i = end;
    }
    Some(n)
}

/// Checks a windowed bitmap: windows ascending, 1-32 octets each, no trailing zero octet, no
/// pseudo-type (RFC 4034 §4.1.2: OPT, TKEY to ANY) set.
pub(crate) fn check_nsec(b: &[u8]) -> Result<(), &'static str> {
    let mut i = 0;
    let mut last: Option<u8> = None;
    while i < b.len() {
        let (Some(&w), Some(&n)) = (b.get(i), b.get(i + 1)) else {
            return Err("truncated type bitmap window");
        };
        if last.is_some_and(|l| w <= l) {
            return Err("type bitmap windows out of order");
        }
        if n == 0 || n > 32 {
            return Err("type bitmap window length must be 1-32");
        }
        let end = i + 2 + n as usize;
        if end > b.len() {
            return Err("truncated type bitmap window");
        }
        if b[end - 1] == 0 {
            return Err("type bitmap window ends in a zero octet");
        }
        // Window 0: OPT (41) is octet 5's 0x40, TKEY-ANY (249-255) octet 31's 0x7f.
        if w == 0
            && (b
                .get(i + 2 + 5)
                .is_some_and(|&o| i + 2 + 5 < end && o & 0x40 != 0)
                || b.get(i + 2 + 31)
                    .is_some_and(|&o| i + 2 + 31 < end && o & 0x7f != 0))
        {
            return Err("type bitmap lists a pseudo-type (RFC 4034 §4.1.2)");
        }
        last = Some(w);
        i = end;
    }
    Ok(())
}

/// Writes the types of a checked windowed bitmap, separated by spaces.
pub(crate) fn write_nsec(b: &[u8], out: &mut String) {
    let mut i = 0;
    let mut first = true;
    while i + 1 < b.len() {
        let w = b[i] as u16;
        let n = b[i + 1] as usize;
        let Some(block) = b.get(i + 2..i + 2 + n) else {
            return;
        };
        for (j, &byte) in block.iter().enumerate() {
            for k in 0..8 {
                if byte & (0x80 >> k) != 0 {
                    if !first {
                        out.push(' ');
                    }
                    first = false;
                    out.push_str(&crate::rrtype::to_text(w * 256 + (j * 8 + k) as u16));
                }
            }
        }
        i += 2 + n;
    }
}

/// Reads type mnemonics (types 1-127) up to the end into an NXT bitmap.
pub(crate) fn parse_nxt(fields: &mut Fields<'_>, out: &mut Vec<u8>) -> Result<(), RdataError> {
    let mut bits = [0u8; 16];
    while !fields.is_empty() {
        let f = word(fields, "an RR type")?;
        let t = crate::rrtype::from_text(f.text)
            .filter(|t| (1..128).contains(t))
            .ok_or_else(|| bad(&f, "expected an RR type from 1 to 127 (NXT bitmap)"))?;
        bits[t as usize / 8] |= 0x80 >> (t % 8);
    }
    if let Some(last) = bits.iter().rposition(|&b| b != 0) {
        out.extend_from_slice(&bits[..=last]);
    }
    Ok(())
}

/// Checks an NXT bitmap: at most 16 octets, bit 0 clear, no trailing zero octet.
pub(crate) fn check_nxt(b: &[u8]) -> Result<(), &'static str> {
    if b.len() > 16 {
        return Err("NXT bitmap longer than 16 octets");
    }
    if b.first().is_some_and(|&x| x & 0x80 != 0) {
        return Err("NXT bitmap with bit 0 set (other formats are not defined)");
    }
    if b.last() == Some(&0) {
        return Err("NXT bitmap ends in a zero octet");
    }
    Ok(())
}

/// Writes the types of a checked NXT bitmap.
pub(crate) fn write_nxt(b: &[u8], out: &mut String) {
    let mut first = true;
    for (j, &byte) in b.iter().enumerate() {
        for k in 0..8 {
            if byte & (0x80 >> k) != 0 {
                if !first {
                    out.push(' ');
                }
                first = false;
                out.push_str(&crate::rrtype::to_text((j * 8 + k) as u16));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::testutil::{case, refused, show};
    use crate::rrtype::t;

    /// The query path's encoder (into a fixed buffer) writes what the zone reader's does,
    /// and says so when the buffer is too small.
    #[test]
    fn bitmaps_into_a_buffer_match() {
        for types in [
            vec![t::A, t::RRSIG, t::NSEC],
            vec![t::RRSIG, t::NSEC, 128],
            vec![t::NS, t::SOA, t::MX, t::RRSIG, t::NSEC, t::DNSKEY, 257],
        ] {
            let mut want = Vec::new();
            super::encode(&mut types.clone(), &mut want);
            let mut out = [0u8; 68];
            let n = super::encode_into(&types, &mut out).unwrap();
            assert_eq!(&out[..n], &want[..], "{types:?}");
            assert_eq!(super::encode_into(&types, &mut out[..n - 1]), None);
        }
    }

    #[test]
    fn nsec_bitmaps() {
        case(
            t::NSEC,
            "host.example. A MX RRSIG NSEC TYPE1234",
            "04686f7374076578616d706c65000006400100000003041b000000000000000000000000000000000000000000000000000020",
            "host.example. A MX RRSIG NSEC TYPE1234",
        );
        case(
            t::NSEC,
            ". TYPE0 TYPE65535",
            &format!("00000180ff20{}01", "00".repeat(31)),
            ". TYPE0 TYPE65535",
        );
        case(t::NSEC, ".", "00", ".");
        refused(t::NSEC, ". BOGUS", "RR type");
        refused(t::NSEC, ". TYPE65536", "RR type");
        refused(t::NSEC, "ns.example. A OPT", "pseudo-type");
        refused(t::NSEC, "ns.example. A TSIG", "pseudo-type");
        refused(t::NSEC, "ns.example. ANY", "pseudo-type");
        // Out of order, empty and zero-ended windows are malformed.
        refused(t::NSEC, "\\# 7 00010101000101", "out of order");
        for bad in ["0001010001 40", "000100", "00020100", "0021"] {
            let rd: Vec<u8> = (0..bad.replace(' ', "").len() / 2)
                .map(|i| u8::from_str_radix(&bad.replace(' ', "")[2 * i..2 * i + 2], 16).unwrap())
                .collect();
            let mut full = vec![0u8];
            full.extend(rd);
            assert!(show(t::NSEC, &full).starts_with("\\#"), "{bad}");
        }
    }

    #[test]
    fn nxt_bitmaps() {
        case(
            t::NXT,
            "medium.foo.tld. A MX SIG NXT",
            "066d656469756d03666f6f03746c640040010082",
            "medium.foo.tld. A MX SIG NXT",
        );
        case(t::NXT, "a.", "016100", "a.");
        refused(t::NXT, "a. TYPE128", "1 to 127");
        refused(t::NXT, "a. TYPE0", "1 to 127");
        assert!(show(t::NXT, &[0, 0x40, 0]).starts_with("\\#"));
        assert!(show(t::NXT, &[0, 0x80]).starts_with("\\#"));
    }
}
