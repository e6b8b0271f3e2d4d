//! Text codecs shared by the RDATA types: numbers, character-strings, hex, base64,
//! base32hex, DNSSEC times and TTL-style periods.
//!
//! Decoders are strict (a bad digit is an error, never skipped) and linear in their input.

use std::fmt::Write;

use super::{Field, Fields, RdataError};

/// Reads an unsigned decimal of digits only, at most `max`.
pub(crate) fn uint(text: &[u8], max: u64) -> Option<u64> {
    let v = crate::text::parse_u64(text)?;
    (v <= max).then_some(v)
}

/// Decodes the backslash escapes of a token (`\DDD` and `\X`) into `out`.
pub(crate) fn unescape_into(text: &[u8], out: &mut Vec<u8>) -> Result<(), &'static str> {
    let mut i = 0;
    while i < text.len() {
        if text[i] == b'\\' {
            let (b, used) = crate::name::unescape(&text[i..])
                .ok_or("bad escape: expected \\DDD (000-255) or \\ and a character")?;
            out.push(b);
            i += used;
        } else {
            out.push(text[i]);
            i += 1;
        }
    }
    Ok(())
}

/// Appends one RFC 1035 character-string (length octet and at most 255 octets) from a token.
pub(crate) fn char_string_into(text: &[u8], out: &mut Vec<u8>) -> Result<(), &'static str> {
    let at = out.len();
    out.push(0);
    unescape_into(text, out)?;
    let n = out.len() - at - 1;
    if n > 255 {
        out.truncate(at);
        return Err("character-string longer than 255 octets");
    }
    out[at] = n as u8;
    Ok(())
}

/// Writes octets as the inside of a quoted string: `"` and `\` escaped, and every octet that
/// is not printable ASCII as `\DDD`.
pub(crate) fn write_escaped(bytes: &[u8], out: &mut String) {
    for &c in bytes {
        match c {
            b'"' | b'\\' => {
                out.push('\\');
                out.push(c as char);
            }
            0x20..=0x7e => out.push(c as char),
            _ => {
                let _ = write!(out, "\\{c:03}");
            }
        }
    }
}

/// Writes octets as a `"quoted string"`.
pub(crate) fn write_quoted(bytes: &[u8], out: &mut String) {
    out.push('"');
    write_escaped(bytes, out);
    out.push('"');
}

fn hex_val(c: u8) -> Option<u8> {
    match c {
        b'0'..=b'9' => Some(c - b'0'),
        b'a'..=b'f' => Some(c - b'a' + 10),
        b'A'..=b'F' => Some(c - b'A' + 10),
        _ => None,
    }
}

/// Hex digits fed token by token (RFC 3597 and most hex fields may be split by blanks).
#[derive(Default)]
pub(crate) struct HexDecoder {
    pending: Option<u8>,
}

impl HexDecoder {
    /// Decodes one token's digits into `out`.
    pub(crate) fn feed(&mut self, text: &[u8], out: &mut Vec<u8>) -> Result<(), &'static str> {
        for &c in text {
            let v = hex_val(c).ok_or("bad hex digit")?;
            match self.pending.take() {
                Some(hi) => out.push(hi << 4 | v),
                None => self.pending = Some(v),
            }
        }
        Ok(())
    }

    /// Ends the input: an odd number of digits is an error.
    pub(crate) fn finish(self) -> Result<(), &'static str> {
        match self.pending {
            Some(_) => Err("odd number of hex digits"),
            None => Ok(()),
        }
    }
}

/// Decodes one token of hex digits (even count) into `out`.
pub(crate) fn hex_token_into(text: &[u8], out: &mut Vec<u8>) -> Result<(), &'static str> {
    let mut d = HexDecoder::default();
    d.feed(text, out)?;
    d.finish()
}

/// Writes octets as hex digits.
pub(crate) fn write_hex(bytes: &[u8], upper: bool, out: &mut String) {
    const LO: &[u8; 16] = b"0123456789abcdef";
    const UP: &[u8; 16] = b"0123456789ABCDEF";
    let t = if upper { UP } else { LO };
    for &b in bytes {
        out.push(t[(b >> 4) as usize] as char);
        out.push(t[(b & 15) as usize] as char);
    }
}

fn b64_val(c: u8) -> Option<u8> {
    match c {
        b'A'..=b'Z' => Some(c - b'A'),
        b'a'..=b'z' => Some(c - b'a' + 26),
        b'0'..=b'9' => Some(c - b'0' + 52),
        b'+' => Some(62),
        b'/' => Some(63),
        _ => None,
    }
}

/// Base64 (RFC 4648 §4, padded) fed token by token.
///
/// Groups may be split across tokens (`Zm 9v`), but a token may not start with padding
/// (`AA ==` is refused, as Knot does) and nothing may follow the padding.
#[derive(Default)]
pub(crate) struct Base64Decoder {
    quad: [u8; 4],
    n: usize,
    pad: usize,
    done: bool,
}

impl Base64Decoder {
    /// Decodes one token into `out`.
    pub(crate) fn feed(&mut self, text: &[u8], out: &mut Vec<u8>) -> Result<(), &'static str> {
        if text.first() == Some(&b'=') {
            return Err("base64 padding must follow data in the same token");
        }
        for &c in text {
            if self.done {
                return Err("base64 data after padding");
            }
            if c == b'=' {
                // Padding is allowed in the third and fourth position of a group only.
                if self.n + self.pad < 2 {
                    return Err("bad base64 padding");
                }
                self.pad += 1;
                if self.n + self.pad == 4 {
                    self.flush(out);
                    self.done = true;
                }
                continue;
            }
            if self.pad > 0 {
                return Err("base64 data after padding");
            }
            self.quad[self.n] = b64_val(c).ok_or("bad base64 character")?;
            self.n += 1;
            if self.n == 4 {
                self.flush(out);
            }
        }
        Ok(())
    }

    fn flush(&mut self, out: &mut Vec<u8>) {
        let q = self.quad;
        let v = (q[0] as u32) << 18 | (q[1] as u32) << 12 | (q[2] as u32) << 6 | q[3] as u32;
        let bytes = [(v >> 16) as u8, (v >> 8) as u8, v as u8];
        let keep = match self.n {
            4 => 3,
            3 => 2,
            _ => 1,
        };
        out.extend_from_slice(&bytes[..keep]);
        self.quad = [0; 4];
        self.n = 0;
    }

    /// Ends the input: an unfinished group is an error.
    pub(crate) fn finish(self) -> Result<(), &'static str> {
        if self.n != 0 || (self.pad != 0 && !self.done) {
            return Err("base64 length is not a multiple of 4");
        }
        Ok(())
    }
}

/// Decodes one token of base64 into `out`.
pub(crate) fn base64_token_into(text: &[u8], out: &mut Vec<u8>) -> Result<(), &'static str> {
    let mut d = Base64Decoder::default();
    d.feed(text, out)?;
    d.finish()
}

/// Writes octets as padded base64.
pub(crate) fn write_base64(bytes: &[u8], out: &mut String) {
    const T: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    for chunk in bytes.chunks(3) {
        let b = [
            chunk[0],
            chunk.get(1).copied().unwrap_or(0),
            chunk.get(2).copied().unwrap_or(0),
        ];
        let v = (b[0] as u32) << 16 | (b[1] as u32) << 8 | b[2] as u32;
        for k in 0..4 {
            if k <= chunk.len() {
                out.push(T[(v >> (18 - 6 * k) & 63) as usize] as char);
            } else {
                out.push('=');
            }
        }
    }
}

/// Decodes one token of base32hex (RFC 4648 §7, any case, padding optional) into `out`.
/// Unused trailing bits must be zero.
pub(crate) fn base32hex_token_into(text: &[u8], out: &mut Vec<u8>) -> Result<(), &'static str> {
    let data_len = text.iter().position(|&c| c == b'=').unwrap_or(text.len());
    let (data, pad) = text.split_at(data_len);
    if !pad.iter().all(|&c| c == b'=') {
        return Err("base32hex data after padding");
    }
    if !pad.is_empty() && !text.len().is_multiple_of(8) {
        return Err("padded base32hex length is not a multiple of 8");
    }
    if !matches!(data.len() % 8, 0 | 2 | 4 | 5 | 7) || data.is_empty() {
        return Err("bad base32hex length");
    }
    let mut acc: u64 = 0;
    let mut bits = 0u32;
    for &c in data {
        let v = match c {
            b'0'..=b'9' => c - b'0',
            b'a'..=b'v' => c - b'a' + 10,
            b'A'..=b'V' => c - b'A' + 10,
            _ => return Err("bad base32hex character"),
        };
        acc = acc << 5 | v as u64;
        bits += 5;
        if bits >= 8 {
            bits -= 8;
            out.push((acc >> bits) as u8);
            acc &= (1 << bits) - 1;
        }
    }
    if acc != 0 {
        return Err("base32hex has non-zero trailing bits");
    }
    Ok(())
}

/// Writes octets as unpadded lower-case base32hex.
pub(crate) fn write_base32hex(bytes: &[u8], out: &mut String) {
    const T: &[u8; 32] = b"0123456789abcdefghijklmnopqrstuv";
    let mut acc: u32 = 0;
    let mut bits = 0u32;
    for &b in bytes {
        acc = acc << 8 | b as u32;
        bits += 8;
        while bits >= 5 {
            bits -= 5;
            out.push(T[(acc >> bits & 31) as usize] as char);
        }
        acc &= (1 << bits) - 1;
    }
    if bits > 0 {
        out.push(T[(acc << (5 - bits) & 31) as usize] as char);
    }
}

/// Reads a period in seconds (SOA timers, RRSIG original TTL): decimal up to 2^32-1, or
/// BIND units (`1w2d3h4m5s`, any case) summing to at most 2^32-1.
pub(crate) fn period(s: &[u8]) -> Result<u32, &'static str> {
    if s.is_empty() {
        return Err("expected a number of seconds");
    }
    if s.iter().all(u8::is_ascii_digit) {
        return uint(s, u32::MAX as u64)
            .map(|v| v as u32)
            .ok_or("number of seconds out of range (above 4294967295)");
    }
    let mut total: u64 = 0;
    let mut num: Option<u64> = None;
    for &c in s {
        if c.is_ascii_digit() {
            let n = num.unwrap_or(0) * 10 + (c - b'0') as u64;
            if n > u32::MAX as u64 {
                return Err("period out of range");
            }
            num = Some(n);
        } else {
            let mult = match c.to_ascii_lowercase() {
                b'w' => 604_800,
                b'd' => 86_400,
                b'h' => 3_600,
                b'm' => 60,
                b's' => 1,
                _ => return Err("expected a number of seconds or units w, d, h, m, s"),
            };
            let n = num.take().ok_or("unit without a number")?;
            total += n * mult;
            if total > u32::MAX as u64 {
                return Err("period out of range (above 4294967295 seconds)");
            }
        }
    }
    if num.is_some() {
        return Err("number without a unit after units");
    }
    Ok(total as u32)
}

fn days_from_civil(y: i64, m: u32, d: u32) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (m as i64 + 9) % 12;
    let doy = (153 * mp + 2) / 5 + d as i64 - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

fn civil_from_days(z: i64) -> (i64, u32, u32) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let y = yoe + era * 400;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    (if m <= 2 { y + 1 } else { y }, m, d)
}

/// Reads an RRSIG/SIG time: `YYYYMMDDHHmmSS` (UTC, any year 0000-9999, taken modulo 2^32
/// as RFC 4034 §3.1.5 serial arithmetic allows, as BIND does) or seconds since the epoch as
/// a decimal.
pub(crate) fn time(s: &[u8]) -> Result<u32, &'static str> {
    if !s.iter().all(u8::is_ascii_digit) || s.is_empty() {
        return Err("expected a time as YYYYMMDDHHmmSS or seconds since 1970");
    }
    if s.len() != 14 {
        return uint(s, u32::MAX as u64)
            .map(|v| v as u32)
            .ok_or("time out of range: use YYYYMMDDHHmmSS or at most 4294967295 seconds");
    }
    let n = |a: usize, b: usize| -> u32 {
        s[a..b]
            .iter()
            .fold(0u32, |v, &c| v * 10 + (c - b'0') as u32)
    };
    let (y, mo, d, h, mi, se) = (n(0, 4), n(4, 6), n(6, 8), n(8, 10), n(10, 12), n(12, 14));
    let leap = (y % 4 == 0 && y % 100 != 0) || y % 400 == 0;
    let mdays = [
        31,
        if leap { 29 } else { 28 },
        31,
        30,
        31,
        30,
        31,
        31,
        30,
        31,
        30,
        31,
    ];
    if !(1..=12).contains(&mo) || d == 0 || d > mdays[(mo - 1) as usize] {
        return Err("bad date in time (YYYYMMDDHHmmSS)");
    }
    if h > 23 || mi > 59 || se > 60 {
        return Err("bad time of day in time (YYYYMMDDHHmmSS)");
    }
    let days = days_from_civil(y as i64, mo, d);
    let secs = days * 86_400 + (h * 3600 + mi * 60 + se) as i64;
    Ok(secs as u64 as u32)
}

/// Writes an RRSIG/SIG time as `YYYYMMDDHHmmSS`.
pub(crate) fn write_time(t: u32, out: &mut String) {
    let t = t as i64;
    let (y, m, d) = civil_from_days(t.div_euclid(86_400));
    let s = t.rem_euclid(86_400);
    let _ = write!(
        out,
        "{y:04}{m:02}{d:02}{:02}{:02}{:02}",
        s / 3600,
        s / 60 % 60,
        s % 60
    );
}

/// Reads a dotted-quad IPv4 address (each part 1-3 digits, at most 255, no leading zero: as
/// inet_pton reads it, and Knot and NSD with it).
pub(crate) fn ipv4(s: &[u8]) -> Option<[u8; 4]> {
    let mut out = [0u8; 4];
    let mut parts = s.split(|&c| c == b'.');
    for o in &mut out {
        let p = parts.next()?;
        if p.is_empty() || p.len() > 3 || (p.len() > 1 && p[0] == b'0') {
            return None;
        }
        *o = uint(p, 255)? as u8;
    }
    parts.next().is_none().then_some(out)
}

/// Reads an IPv6 address (RFC 4291 §2.2 text forms).
pub(crate) fn ipv6(s: &[u8]) -> Option<[u8; 16]> {
    let s = std::str::from_utf8(s).ok()?;
    if s.contains('%') {
        return None;
    }
    s.parse::<std::net::Ipv6Addr>().ok().map(|a| a.octets())
}

/// Writes an IPv4 address.
pub(crate) fn write_ipv4(b: &[u8], out: &mut String) {
    let _ = write!(out, "{}.{}.{}.{}", b[0], b[1], b[2], b[3]);
}

/// Writes an IPv6 address (RFC 5952 form).
pub(crate) fn write_ipv6(b: &[u8], out: &mut String) {
    let mut a = [0u8; 16];
    a.copy_from_slice(&b[..16]);
    let _ = write!(out, "{}", std::net::Ipv6Addr::from(a));
}

// Words of the RDATA text: each token taken with its position, and errors that name it.

/// An error at a token.
pub(crate) fn bad(f: &Field<'_>, msg: impl Into<String>) -> RdataError {
    RdataError {
        line: f.line,
        col: f.col,
        msg: msg.into(),
    }
}

/// An error at the next token (or the end of the entry).
pub(crate) fn missing(fields: &Fields<'_>, what: &str) -> RdataError {
    let (line, col) = fields.pos();
    RdataError {
        line,
        col,
        msg: format!("missing {what}"),
    }
}

/// An error at the next token (or the end of the entry) with a full message.
pub(crate) fn missing_or(fields: &Fields<'_>, msg: String) -> RdataError {
    let (line, col) = fields.pos();
    RdataError { line, col, msg }
}

/// The next token, which must be there.
pub(crate) fn need<'a>(fields: &mut Fields<'a>, what: &str) -> Result<Field<'a>, RdataError> {
    fields.next().ok_or_else(|| missing(fields, what))
}

/// The next token, which must be there and not be a quoted string.
pub(crate) fn word<'a>(fields: &mut Fields<'a>, what: &str) -> Result<Field<'a>, RdataError> {
    let f = need(fields, what)?;
    if f.quoted {
        return Err(bad(&f, format!("expected {what}, not a quoted string")));
    }
    Ok(f)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn b64(s: &str) -> Result<Vec<u8>, &'static str> {
        let mut d = Base64Decoder::default();
        let mut out = Vec::new();
        for t in s.split(' ') {
            d.feed(t.as_bytes(), &mut out)?;
        }
        d.finish().map(|_| out)
    }

    #[test]
    fn base64_rules() {
        assert_eq!(b64("Zm9v").unwrap(), b"foo");
        assert_eq!(b64("Zm 9v").unwrap(), b"foo");
        assert_eq!(b64("Zm9v YmE=").unwrap(), b"fooba");
        assert_eq!(b64("Zm8=").unwrap(), b"fo");
        assert_eq!(b64("AA==").unwrap(), [0]);
        for bad in [
            "A", "AB", "ABC", "AA ==", "A===", "=", "==", "====", "Zm8=Zm8=", "Zm9*",
        ] {
            assert!(b64(bad).is_err(), "{bad}");
        }
        let mut s = String::new();
        write_base64(b"fooba", &mut s);
        assert_eq!(s, "Zm9vYmE=");
    }

    #[test]
    fn base32hex_rules() {
        let dec = |s: &str| {
            let mut v = Vec::new();
            base32hex_token_into(s.as_bytes(), &mut v).map(|_| v)
        };
        assert_eq!(dec("00======").unwrap(), [0]);
        assert_eq!(dec("CPNMUOJ1").unwrap(), b"fooba");
        assert_eq!(dec("cpnmuoj1e8").unwrap(), b"foobar");
        for bad in [
            "1", "123", "123456", "========", "1=======", "123=====", "0X", "01",
        ] {
            assert!(dec(bad).is_err(), "{bad}");
        }
        let mut s = String::new();
        write_base32hex(b"foobar", &mut s);
        assert_eq!(s, "cpnmuoj1e8");
    }

    #[test]
    fn times() {
        assert_eq!(time(b"19700101000000"), Ok(0));
        assert_eq!(time(b"20260426170000"), Ok(1777222800));
        assert_eq!(time(b"22251231235959"), Ok(0xE185_3CFF));
        assert_eq!(time(b"4294967295"), Ok(u32::MAX));
        assert!(time(b"9294967296").is_err());
        assert!(time(b"2226010100000x").is_err());
        assert!(time(b"20260230000000").is_err());
        assert_eq!(time(b"19691231235959"), Ok(u32::MAX));
        assert_eq!(time(b"00100227180048").map(|_| ()), Ok(()));
        let mut s = String::new();
        write_time(1777222800, &mut s);
        assert_eq!(s, "20260426170000");
    }

    #[test]
    fn periods() {
        assert_eq!(period(b"4294967295"), Ok(u32::MAX));
        assert_eq!(period(b"1w2d3h4m5s"), Ok(788645));
        assert!(period(b"4294967296").is_err());
        assert!(period(b"1h30").is_err());
        assert!(period(b"x").is_err());
    }

    #[test]
    fn addresses_and_strings() {
        assert_eq!(ipv4(b"10.0.0.255"), Some([10, 0, 0, 255]));
        assert_eq!(ipv4(b"192.0.2.0"), Some([192, 0, 2, 0]));
        assert_eq!(
            ipv4(b"192.0.2.01"),
            None,
            "a leading zero, as inet_pton refuses it"
        );
        for bad in [
            "0.0.0.256",
            "0.0.0",
            "0.0.0.0.0",
            "1..2.3",
            "0.0.0.A",
            "127.1",
        ] {
            assert_eq!(ipv4(bad.as_bytes()), None, "{bad}");
        }
        assert!(ipv6(b"::ffff:1.2.3.4").is_some());
        assert!(ipv6(b"0::FFFFF").is_none());
        let mut v = Vec::new();
        assert!(char_string_into(b"a\\\"b\\255", &mut v).is_ok());
        assert_eq!(v, b"\x04a\"b\xff");
        assert!(char_string_into(b"\\01", &mut v).is_err());
        assert!(char_string_into(&[b'x'; 256], &mut v).is_err());
        let mut s = String::new();
        write_quoted(b"a\"\\\x00 ", &mut s);
        assert_eq!(s, "\"a\\\"\\\\\\000 \"");
    }
}
