//! LOC (RFC 1876): geographical location, with the text defaults of §3 (size 1m,
//! horizontal precision 10000m, vertical precision 10m).

use std::fmt::Write;

use super::codec::{bad, word};
use super::{Field, Fields, RdataError};

const EQUATOR: i64 = 1 << 31;
const MS_PER_DEG: i64 = 3_600_000;
/// Altitude 0 is 100000m below the WGS 84 ellipsoid, in centimetres.
const ALT_BASE: i64 = 10_000_000;

/// Reads `digits[.digits]` with at most `frac_max` fraction digits, scaled to integer units
/// of 10^-frac_max. At least one digit overall.
fn decimal(s: &[u8], frac_max: u32) -> Option<u64> {
    let (int, frac) = match s.iter().position(|&c| c == b'.') {
        Some(p) => (&s[..p], &s[p + 1..]),
        None => (s, &[][..]),
    };
    if int.is_empty() && frac.is_empty() || frac.len() > frac_max as usize {
        return None;
    }
    if !int.iter().chain(frac).all(u8::is_ascii_digit) || int.len() > 12 {
        return None;
    }
    let i = if int.is_empty() {
        0
    } else {
        crate::text::parse_u64(int)?
    };
    let mut f = if frac.is_empty() {
        0
    } else {
        crate::text::parse_u64(frac)?
    };
    for _ in frac.len()..frac_max as usize {
        f *= 10;
    }
    i.checked_mul(10u64.pow(frac_max))?.checked_add(f)
}

fn hemisphere(f: &Field<'_>, pos: u8, neg: u8) -> Option<i64> {
    match f.text {
        [c] if c.eq_ignore_ascii_case(&pos) => Some(1),
        [c] if c.eq_ignore_ascii_case(&neg) => Some(-1),
        _ => None,
    }
}

/// Reads `deg [min [sec]] H` into signed milliseconds of arc.
fn coord(fields: &mut Fields<'_>, max_deg: u64, pos: u8, neg: u8) -> Result<i64, RdataError> {
    let what = if pos == b'N' { "latitude" } else { "longitude" };
    let hem = format!("{} or {}", pos as char, neg as char);
    let f = word(fields, &format!("the {what} degrees"))?;
    let deg = super::codec::uint(f.text, max_deg)
        .ok_or_else(|| bad(&f, format!("expected {what} degrees (0-{max_deg})")))?;
    let mut ms = deg as i64 * MS_PER_DEG;
    let mut step = 0;
    loop {
        let f = word(fields, &hem)?;
        if let Some(sign) = hemisphere(&f, pos, neg) {
            if ms > max_deg as i64 * MS_PER_DEG {
                return Err(bad(&f, format!("{what} beyond {max_deg} degrees")));
            }
            return Ok(sign * ms);
        }
        match step {
            0 => {
                let m = super::codec::uint(f.text, 59)
                    .ok_or_else(|| bad(&f, format!("expected {what} minutes (0-59) or {hem}")))?;
                ms += m as i64 * 60_000;
            }
            1 => {
                let s = decimal(f.text, 3).filter(|&s| s < 60_000).ok_or_else(|| {
                    bad(&f, format!("expected {what} seconds (0-59.999) or {hem}"))
                })?;
                ms += s as i64;
            }
            _ => return Err(bad(&f, format!("expected {hem}"))),
        }
        step += 1;
    }
}

/// Reads a length in metres, `[-]digits[.dd][m]`, into centimetres.
fn metres(f: &Field<'_>, signed: bool) -> Option<i64> {
    let s = f.text.strip_suffix(b"m").unwrap_or(f.text);
    let (neg, s) = match s.strip_prefix(b"-") {
        Some(rest) if signed => (true, rest),
        _ => (false, s),
    };
    let v = decimal(s, 2)? as i64;
    Some(if neg { -v } else { v })
}

fn precision(f: &Field<'_>, what: &str) -> Result<u8, RdataError> {
    let cm = metres(f, false)
        .filter(|&v| v <= 9_000_000_000)
        .ok_or_else(|| bad(f, format!("expected {what} in metres (0-90000000.00m)")))?
        as u64;
    let mut exp = 0;
    while exp < 9 && cm >= 10u64.pow(exp + 1) {
        exp += 1;
    }
    Ok(((cm / 10u64.pow(exp)) as u8) << 4 | exp as u8)
}

/// Reads LOC text into its 16-octet version 0 wire form.
pub(crate) fn parse(fields: &mut Fields<'_>, out: &mut Vec<u8>) -> Result<(), RdataError> {
    let lat = coord(fields, 90, b'N', b'S')?;
    let lon = coord(fields, 180, b'E', b'W')?;
    let f = word(fields, "an altitude")?;
    let alt = metres(&f, true)
        .filter(|&v| (-ALT_BASE..=u32::MAX as i64 - ALT_BASE).contains(&v))
        .ok_or_else(|| {
            bad(
                &f,
                "expected an altitude in metres (-100000.00m to 42849672.95m)",
            )
        })?;
    let mut prec = [0x12u8, 0x16, 0x13];
    for (i, what) in ["a size", "a horizontal precision", "a vertical precision"]
        .into_iter()
        .enumerate()
    {
        match fields.next() {
            Some(f) => prec[i] = precision(&f, what)?,
            None => break,
        }
    }
    out.push(0);
    out.extend_from_slice(&prec);
    out.extend_from_slice(&((EQUATOR + lat) as u32).to_be_bytes());
    out.extend_from_slice(&((EQUATOR + lon) as u32).to_be_bytes());
    out.extend_from_slice(&((alt + ALT_BASE) as u32).to_be_bytes());
    Ok(())
}

/// Checks LOC: version 0 is 16 octets; another version is kept as it came (RFC 1876: no
/// assumption about its format, as Knot, NSD and BIND keep it). Values out of range are
/// kept (and printed in the generic form).
pub(crate) fn check(r: &[u8]) -> Result<(), String> {
    match r.first() {
        None => Err("LOC RDATA is empty".into()),
        Some(0) if r.len() != 16 => Err("LOC version 0 RDATA must be 16 octets".into()),
        _ => Ok(()),
    }
}

fn write_coord(raw: u32, max_deg: i64, hem: [char; 2], out: &mut String) -> bool {
    let v = raw as i64 - EQUATOR;
    let ms = v.abs();
    if ms > max_deg * MS_PER_DEG {
        return false;
    }
    let _ = write!(
        out,
        "{} {} {}.{:03} {}",
        ms / MS_PER_DEG,
        ms / 60_000 % 60,
        ms / 1000 % 60,
        ms % 1000,
        if v >= 0 { hem[0] } else { hem[1] }
    );
    true
}

fn write_precision(b: u8, out: &mut String) -> bool {
    let (man, exp) = (b >> 4, b & 15);
    // Zero with a non-zero exponent is not what the text form would encode.
    if man > 9 || exp > 9 || (man == 0 && exp != 0) {
        return false;
    }
    let cm = man as u64 * 10u64.pow(exp as u32);
    if cm.is_multiple_of(100) {
        let _ = write!(out, " {}m", cm / 100);
    } else {
        let _ = write!(out, " {}.{:02}m", cm / 100, cm % 100);
    }
    true
}

/// Writes LOC; false when a value is outside what the text form can say.
pub(crate) fn present(r: &[u8], out: &mut String) -> bool {
    if r.len() != 16 || r[0] != 0 {
        return false;
    }
    let be = |i: usize| u32::from_be_bytes([r[i], r[i + 1], r[i + 2], r[i + 3]]);
    if !write_coord(be(4), 90, ['N', 'S'], out) {
        return false;
    }
    out.push(' ');
    if !write_coord(be(8), 180, ['E', 'W'], out) {
        return false;
    }
    let alt = be(12) as i64 - ALT_BASE;
    let sign = if alt < 0 { "-" } else { "" };
    let _ = write!(out, " {sign}{}.{:02}m", alt.abs() / 100, alt.abs() % 100);
    r[1..4].iter().all(|&b| write_precision(b, out))
}

#[cfg(test)]
mod tests {
    use super::super::testutil::{case, refused, show};
    use crate::rrtype::t;

    #[test]
    fn rfc1876_examples_and_defaults() {
        case(
            t::LOC,
            "42 21 54 N 71 06 18 W -24m 30m",
            "0033161389172dd070be15f000988d20",
            "42 21 54.000 N 71 6 18.000 W -24.00m 30m 10000m 10m",
        );
        case(
            t::LOC,
            "90 S 180 E 42849672.91m 90000000m 90000000m 89999999m",
            "009999896cb02700a69fb200fffffffb",
            "90 0 0.000 S 180 0 0.000 E 42849672.91m 90000000m 90000000m 80000000m",
        );
        case(
            t::LOC,
            "0 0 .0 N 0 0 0. E -0.95m 0.01",
            "00101613800000008000000000989621",
            "0 0 0.000 N 0 0 0.000 E -0.95m 0.01m 10000m 10m",
        );
    }

    #[test]
    fn refusals() {
        refused(t::LOC, "90 1 N 0 E 0", "beyond 90");
        refused(t::LOC, "0 N 180 0 1 E 0", "beyond 180");
        refused(t::LOC, "91 N 0 E 0", "0-90");
        refused(t::LOC, "0 60 N 0 E 0", "minutes");
        refused(t::LOC, "0 0 60 N 0 E 0", "seconds");
        refused(t::LOC, "0 0 . N 0 E 0", "seconds");
        refused(t::LOC, "0 North 0 East 0", "minutes");
        refused(t::LOC, "1 1 E 0", "seconds");
        refused(t::LOC, "0 N 0 E", "missing an altitude");
        refused(t::LOC, "0 N 0 E m", "altitude");
        refused(t::LOC, "0 N 0 E -100000.01", "altitude");
        refused(t::LOC, "0 N 0 E 42849672.96", "altitude");
        refused(t::LOC, "0 N 0 E 0 90000000.01", "a size");
        refused(t::LOC, "0 N 0 E 0 1 1 1 x", "unexpected data");
    }

    #[test]
    fn out_of_range_wire_prints_generically() {
        let zero = [0u8; 16];
        assert!(show(t::LOC, &zero).starts_with("\\# 16 "));
        let mut bad_prec = super::super::testutil::parse_text(t::LOC, "0 N 0 E 0").unwrap();
        bad_prec[1] = 0xa0;
        assert!(show(t::LOC, &bad_prec).starts_with("\\# 16 "));
        // Another version is kept as it came, printed generically.
        let v1 =
            super::super::testutil::parse_text(t::LOC, "\\# 16 01000000000000000000000000000000")
                .unwrap();
        assert_eq!(v1[0], 1);
        assert!(show(t::LOC, &v1).starts_with("\\# 16 01"));
        refused(t::LOC, "\\# 15 000000000000000000000000000000", "16 octets");
    }
}
