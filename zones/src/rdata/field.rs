//! The field kinds most RDATA is built from, and the engine that reads, checks, prints and
//! walks a type described as a list of them.
//!
//! One description per type drives all four directions, so they cannot drift apart.

use std::fmt::Write;

use super::codec::{self, Base64Decoder, HexDecoder, bad, missing, need, word};
use super::{Field, Fields, NameRef, RdataError, bitmap, mnemonic};
use crate::name::NameBuf;

/// How a domain name inside RDATA is treated.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct NameFlags {
    /// Compressible on the wire (RFC 3597 §4: the RFC 1035 types only).
    pub compress: bool,
    /// Its addresses go in the additional section.
    pub additional: bool,
    /// Lower-cased in the canonical form (RFC 4034 §6.2, RFC 6840 §5.1).
    pub lower: bool,
}

/// One field of RDATA.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    /// 8-bit decimal.
    U8,
    /// 16-bit decimal.
    U16,
    /// 32-bit decimal.
    U32,
    /// DNSSEC algorithm: 8-bit decimal or mnemonic (RFC 4034 Appendix A.1).
    Alg,
    /// CERT type: 16-bit decimal or mnemonic (RFC 4398 §2.1).
    CertType,
    /// An RR type mnemonic or `TYPEnnn`.
    RrType,
    /// DSYNC scheme: 8-bit decimal or `NOTIFY`.
    DsyncScheme,
    /// 32-bit seconds with optional units (SOA timers, RRSIG original TTL).
    Period,
    /// RRSIG/SIG time: `YYYYMMDDHHmmSS` or seconds.
    Time,
    /// A domain name.
    Name(NameFlags),
    /// One character-string.
    Str,
    /// One or more character-strings up to the end.
    Strs,
    /// An optional last character-string (ISDN subaddress).
    StrOpt,
    /// The rest of the RDATA as one string token without a length octet (CAA value, URI).
    Text,
    /// CAA tag: a length octet and 1-255 ASCII letters and digits.
    CaaTag,
    /// A character-string holding a decimal number (GPOS).
    FloatStr,
    /// IPv4 address.
    Ipv4,
    /// IPv6 address.
    Ipv6,
    /// EUI-48 as six dash-separated hex pairs.
    Eui48,
    /// EUI-64 as eight dash-separated hex pairs.
    Eui64,
    /// ILNP 64-bit locator or node ID as four colon-separated hex groups (RFC 6742).
    Ilnp64,
    /// NSAP address as `0x` and hex digits, dots allowed (RFC 1706).
    Nsap,
    /// IPN node number: 64-bit decimal or `allocator.node`.
    Ipn,
    /// Hex digits up to the end, at least one octet, blanks allowed.
    Hex,
    /// Like `Hex`, but a lone `0` stands for no octets (CDS delete, RFC 8078 §4).
    HexZ,
    /// Base64 up to the end, at least one octet, blanks allowed.
    Base64,
    /// Like `Base64`, but a lone `0` stands for no octets (CDNSKEY delete, RFC 8078 §4).
    Base64Z,
    /// Base64 up to the end, possibly none.
    Base64Opt,
    /// Base64 up to the end, or `-` for none (DOA).
    Base64Dash,
    /// Length octet and hex, `-` for empty (NSEC3 salt).
    Salt,
    /// Length octet and one base32hex word (NSEC3 next hashed owner).
    Hash32,
    /// NSEC type bitmap up to the end (RFC 4034 §4.1.2), possibly empty.
    Bitmap,
    /// NXT type bitmap up to the end (RFC 2535 §5.2).
    NxtBitmap,
}

/// Name flags of the RFC 1035 types: compressed and lower-cased.
pub(crate) const N_1035: NameFlags = NameFlags {
    compress: true,
    additional: false,
    lower: true,
};
/// As [`N_1035`], with additional-section processing.
pub(crate) const N_1035_ADD: NameFlags = NameFlags {
    compress: true,
    additional: true,
    lower: true,
};
/// Lower-cased, not compressed.
pub(crate) const N_LOWER: NameFlags = NameFlags {
    compress: false,
    additional: false,
    lower: true,
};
/// Lower-cased, not compressed, with additional-section processing.
pub(crate) const N_LOWER_ADD: NameFlags = NameFlags {
    compress: false,
    additional: true,
    lower: true,
};
/// Kept as written, not compressed.
pub(crate) const N_PLAIN: NameFlags = NameFlags {
    compress: false,
    additional: false,
    lower: false,
};
/// Kept as written, not compressed, with additional-section processing.
pub(crate) const N_PLAIN_ADD: NameFlags = NameFlags {
    compress: false,
    additional: true,
    lower: false,
};

/// Reads an unsigned decimal field of at most `max`.
pub(crate) fn number(fields: &mut Fields<'_>, what: &str, max: u64) -> Result<u64, RdataError> {
    let f = word(fields, what)?;
    codec::uint(f.text, max).ok_or_else(|| bad(&f, format!("expected {what} (0-{max})")))
}

/// Reads a domain name field into `out`.
pub(crate) fn name(
    fields: &mut Fields<'_>,
    origin: &[u8],
    out: &mut Vec<u8>,
) -> Result<(), RdataError> {
    let f = word(fields, "a domain name")?;
    name_token(&f, origin, out)
}

/// Reads one token as a domain name into `out`.
pub(crate) fn name_token(
    f: &Field<'_>,
    origin: &[u8],
    out: &mut Vec<u8>,
) -> Result<(), RdataError> {
    let mut nb = NameBuf::new();
    nb.parse(f.text, Some(origin))
        .map_err(|e| bad(f, format!("bad domain name: {e}")))?;
    out.extend_from_slice(nb.as_wire());
    Ok(())
}

/// Length of the wire name at `pos`, if one is there.
pub(crate) fn wire_name(rdata: &[u8], pos: usize) -> Result<usize, &'static str> {
    rdata
        .get(pos..)
        .and_then(crate::name::wire_name_len)
        .ok_or("malformed domain name")
}

/// Writes the wire name at `pos` (known to be valid); returns its length.
pub(crate) fn write_name(rdata: &[u8], pos: usize, out: &mut String) -> usize {
    let len = wire_name(rdata, pos).unwrap_or(0);
    if len > 0 {
        let _ = crate::name::write_presentation(&rdata[pos..pos + len], out);
    }
    len
}

fn is_float(s: &[u8]) -> bool {
    let s = s
        .strip_prefix(b"-")
        .or_else(|| s.strip_prefix(b"+"))
        .unwrap_or(s);
    let (int, frac) = match s.iter().position(|&c| c == b'.') {
        Some(p) => (&s[..p], &s[p + 1..]),
        None => (s, &[][..]),
    };
    (!int.is_empty() || !frac.is_empty())
        && int.iter().all(u8::is_ascii_digit)
        && frac.iter().all(u8::is_ascii_digit)
}

fn hex_groups(
    f: &Field<'_>,
    out: &mut Vec<u8>,
    n: usize,
    sep: u8,
    max_digits: usize,
    exact: bool,
) -> Result<(), RdataError> {
    let what = if n == 4 {
        "four colon-separated groups of hex digits"
    } else {
        "dash-separated hex pairs"
    };
    let mut count = 0;
    for g in f.text.split(|&c| c == sep) {
        count += 1;
        if count > n
            || g.is_empty()
            || g.len() > max_digits
            || (exact && g.len() != max_digits)
            || !g.iter().all(u8::is_ascii_hexdigit)
        {
            return Err(bad(f, format!("expected {n} {what}")));
        }
        let v = u16::from_str_radix(std::str::from_utf8(g).unwrap_or("x"), 16)
            .map_err(|_| bad(f, format!("expected {n} {what}")))?;
        if max_digits == 2 {
            out.push(v as u8);
        } else {
            out.extend_from_slice(&v.to_be_bytes());
        }
    }
    if count != n {
        return Err(bad(f, format!("expected {n} {what}")));
    }
    Ok(())
}

/// Reads one field of kind `k`.
fn parse_one(
    k: Kind,
    fields: &mut Fields<'_>,
    origin: &[u8],
    out: &mut Vec<u8>,
) -> Result<(), RdataError> {
    match k {
        Kind::U8 => out.push(number(fields, "an 8-bit number", 255)? as u8),
        Kind::U16 => {
            out.extend_from_slice(&(number(fields, "a 16-bit number", 65535)? as u16).to_be_bytes())
        }
        Kind::U32 => out.extend_from_slice(
            &(number(fields, "a 32-bit number", u32::MAX as u64)? as u32).to_be_bytes(),
        ),
        Kind::Alg => {
            let f = word(fields, "an algorithm")?;
            let v = mnemonic::alg_from_text(f.text)
                .ok_or_else(|| bad(&f, "expected an algorithm number (0-255) or mnemonic"))?;
            out.push(v);
        }
        Kind::CertType => {
            let f = word(fields, "a certificate type")?;
            let v = mnemonic::cert_type_from_text(f.text)
                .ok_or_else(|| bad(&f, "expected a certificate type (0-65535) or mnemonic"))?;
            out.extend_from_slice(&v.to_be_bytes());
        }
        Kind::RrType => {
            let f = word(fields, "an RR type")?;
            let v = crate::rrtype::from_text(f.text)
                .ok_or_else(|| bad(&f, "expected an RR type mnemonic or TYPEnnn"))?;
            if crate::rrtype::is_pseudo(v) {
                return Err(bad(&f, "a pseudo-type, never in zone data"));
            }
            out.extend_from_slice(&v.to_be_bytes());
        }
        Kind::DsyncScheme => {
            let f = word(fields, "a DSYNC scheme")?;
            let v = if f.text.eq_ignore_ascii_case(b"NOTIFY") {
                1
            } else {
                codec::uint(f.text, 255)
                    .ok_or_else(|| bad(&f, "expected a scheme (0-255) or NOTIFY"))?
                    as u8
            };
            out.push(v);
        }
        Kind::Period => {
            let f = word(fields, "a number of seconds")?;
            let v = codec::period(f.text).map_err(|m| bad(&f, m))?;
            out.extend_from_slice(&v.to_be_bytes());
        }
        Kind::Time => {
            let f = word(fields, "a time")?;
            let v = codec::time(f.text).map_err(|m| bad(&f, m))?;
            out.extend_from_slice(&v.to_be_bytes());
        }
        Kind::Name(_) => name(fields, origin, out)?,
        Kind::Str => {
            let f = need(fields, "a character-string")?;
            codec::char_string_into(f.text, out).map_err(|m| bad(&f, m))?;
        }
        Kind::Strs => {
            let f = need(fields, "a character-string")?;
            codec::char_string_into(f.text, out).map_err(|m| bad(&f, m))?;
            while let Some(f) = fields.next() {
                codec::char_string_into(f.text, out).map_err(|m| bad(&f, m))?;
            }
        }
        Kind::StrOpt => {
            if let Some(f) = fields.next() {
                codec::char_string_into(f.text, out).map_err(|m| bad(&f, m))?;
            }
        }
        Kind::Text => {
            let f = need(fields, "a string")?;
            codec::unescape_into(f.text, out).map_err(|m| bad(&f, m))?;
        }
        Kind::CaaTag => {
            let f = need(fields, "a CAA tag")?;
            let at = out.len();
            codec::char_string_into(f.text, out).map_err(|m| bad(&f, m))?;
            let tag = &out[at + 1..];
            if tag.is_empty() || !tag.iter().all(u8::is_ascii_alphanumeric) {
                return Err(bad(
                    &f,
                    "expected a CAA tag of ASCII letters and digits (RFC 8659 §4.1)",
                ));
            }
        }
        Kind::FloatStr => {
            let f = need(fields, "a decimal number")?;
            let at = out.len();
            codec::char_string_into(f.text, out).map_err(|m| bad(&f, m))?;
            if !is_float(&out[at + 1..]) {
                return Err(bad(&f, "expected a decimal number such as -32.6882"));
            }
        }
        Kind::Ipv4 => {
            let f = word(fields, "an IPv4 address")?;
            let a = codec::ipv4(f.text).ok_or_else(|| bad(&f, "expected an IPv4 address"))?;
            out.extend_from_slice(&a);
        }
        Kind::Ipv6 => {
            let f = word(fields, "an IPv6 address")?;
            let a = codec::ipv6(f.text).ok_or_else(|| bad(&f, "expected an IPv6 address"))?;
            out.extend_from_slice(&a);
        }
        Kind::Eui48 | Kind::Eui64 => {
            let n = if k == Kind::Eui48 { 6 } else { 8 };
            let f = word(fields, "an EUI address")?;
            hex_groups(&f, out, n, b'-', 2, true)?;
        }
        Kind::Ilnp64 => {
            let f = word(fields, "a 64-bit locator")?;
            hex_groups(&f, out, 4, b':', 4, false)?;
        }
        Kind::Nsap => {
            let f = word(fields, "an NSAP address")?;
            let body = f
                .text
                .strip_prefix(b"0x")
                .or_else(|| f.text.strip_prefix(b"0X"))
                .ok_or_else(|| bad(&f, "expected an NSAP address starting with 0x"))?;
            let mut d = HexDecoder::default();
            let at = out.len();
            for part in body.split(|&c| c == b'.') {
                d.feed(part, out).map_err(|m| bad(&f, m))?;
            }
            d.finish().map_err(|m| bad(&f, m))?;
            if out.len() == at {
                return Err(bad(&f, "empty NSAP address"));
            }
        }
        Kind::Ipn => {
            let f = word(fields, "an IPN node number")?;
            let v = match f.text.iter().position(|&c| c == b'.') {
                Some(p) => {
                    let a = codec::uint(&f.text[..p], u32::MAX as u64);
                    let n = codec::uint(&f.text[p + 1..], u32::MAX as u64);
                    a.zip(n).map(|(a, n)| a << 32 | n)
                }
                None => codec::uint(f.text, u64::MAX),
            }
            .ok_or_else(|| bad(&f, "expected a node number or allocator.node"))?;
            out.extend_from_slice(&v.to_be_bytes());
        }
        Kind::Hex | Kind::HexZ => {
            let at = out.len();
            let first = word(fields, "hex data")?;
            if k == Kind::HexZ && first.text == b"0" && fields.is_empty() {
                return Ok(());
            }
            let mut d = HexDecoder::default();
            d.feed(first.text, out).map_err(|m| bad(&first, m))?;
            while let Some(f) = fields.next() {
                if f.quoted {
                    return Err(bad(&f, "expected hex data, not a quoted string"));
                }
                d.feed(f.text, out).map_err(|m| bad(&f, m))?;
            }
            d.finish().map_err(|m| bad(&first, m))?;
            if out.len() == at {
                return Err(bad(&first, "expected hex data"));
            }
        }
        Kind::Base64 | Kind::Base64Z | Kind::Base64Opt | Kind::Base64Dash => {
            let at = out.len();
            if fields.peek().is_none() {
                if k == Kind::Base64Opt {
                    return Ok(());
                }
                return Err(missing(fields, "base64 data"));
            }
            let first = word(fields, "base64 data")?;
            if (k == Kind::Base64Z && first.text == b"0"
                || k == Kind::Base64Dash && first.text == b"-")
                && fields.is_empty()
            {
                return Ok(());
            }
            let mut d = Base64Decoder::default();
            d.feed(first.text, out).map_err(|m| bad(&first, m))?;
            while let Some(f) = fields.next() {
                if f.quoted {
                    return Err(bad(&f, "expected base64 data, not a quoted string"));
                }
                d.feed(f.text, out).map_err(|m| bad(&f, m))?;
            }
            d.finish().map_err(|m| bad(&first, m))?;
            if out.len() == at {
                return Err(bad(&first, "expected base64 data"));
            }
        }
        Kind::Salt => {
            let f = word(fields, "a salt (hex or -)")?;
            let at = out.len();
            out.push(0);
            if f.text != b"-" {
                codec::hex_token_into(f.text, out).map_err(|m| bad(&f, m))?;
                let n = out.len() - at - 1;
                if n == 0 || n > 255 {
                    return Err(bad(&f, "salt must be 1-255 octets, or - for none"));
                }
                out[at] = n as u8;
            }
        }
        Kind::Hash32 => {
            let f = word(fields, "a base32hex hash")?;
            let at = out.len();
            out.push(0);
            codec::base32hex_token_into(f.text, out).map_err(|m| bad(&f, m))?;
            let n = out.len() - at - 1;
            if n > 255 {
                return Err(bad(&f, "hash longer than 255 octets"));
            }
            out[at] = n as u8;
        }
        Kind::Bitmap => bitmap::parse_nsec(fields, out)?,
        Kind::NxtBitmap => bitmap::parse_nxt(fields, out)?,
    }
    Ok(())
}

/// Reads the fields `kinds` from the tokens.
pub(crate) fn parse(
    kinds: &[Kind],
    fields: &mut Fields<'_>,
    origin: &[u8],
    out: &mut Vec<u8>,
) -> Result<(), RdataError> {
    for &k in kinds {
        parse_one(k, fields, origin, out)?;
    }
    Ok(())
}

fn fixed(rdata: &[u8], pos: usize, n: usize) -> Result<usize, &'static str> {
    if rdata.len() - pos.min(rdata.len()) < n {
        return Err("RDATA too short");
    }
    Ok(pos + n)
}

fn char_string_end(rdata: &[u8], pos: usize) -> Result<usize, &'static str> {
    let n = *rdata.get(pos).ok_or("missing character-string")? as usize;
    fixed(rdata, pos + 1, n)
}

/// Where the field of kind `k` starting at `pos` ends, if it is well formed.
fn end_of(k: Kind, rdata: &[u8], pos: usize) -> Result<usize, &'static str> {
    end_of_field(k, rdata, pos, true)
}

/// As [`end_of`]; `semantic` adds the checks of meaning (a type covered that is no
/// pseudo-type, a CAA tag of letters and digits) to those of structure.
fn end_of_field(k: Kind, rdata: &[u8], pos: usize, semantic: bool) -> Result<usize, &'static str> {
    let rest = rdata.len().saturating_sub(pos);
    match k {
        Kind::U8 | Kind::Alg | Kind::DsyncScheme => fixed(rdata, pos, 1),
        Kind::U16 | Kind::CertType => fixed(rdata, pos, 2),
        Kind::RrType => {
            let end = fixed(rdata, pos, 2)?;
            if semantic
                && crate::rrtype::is_pseudo(u16::from_be_bytes([rdata[pos], rdata[pos + 1]]))
            {
                return Err("a pseudo-type, never in zone data");
            }
            Ok(end)
        }
        Kind::U32 | Kind::Period | Kind::Time | Kind::Ipv4 => fixed(rdata, pos, 4),
        Kind::Ipv6 => fixed(rdata, pos, 16),
        Kind::Eui48 => fixed(rdata, pos, 6),
        Kind::Eui64 | Kind::Ilnp64 | Kind::Ipn => fixed(rdata, pos, 8),
        Kind::Name(_) => Ok(pos + wire_name(rdata, pos)?),
        Kind::Str | Kind::FloatStr => char_string_end(rdata, pos),
        Kind::Strs => {
            let mut p = char_string_end(rdata, pos)?;
            while p < rdata.len() {
                p = char_string_end(rdata, p)?;
            }
            Ok(p)
        }
        Kind::StrOpt => {
            if rest == 0 {
                Ok(pos)
            } else {
                char_string_end(rdata, pos)
            }
        }
        Kind::Text | Kind::Base64Opt => Ok(rdata.len()),
        Kind::CaaTag => {
            let end = char_string_end(rdata, pos)?;
            let tag = &rdata[pos + 1..end];
            if semantic && (tag.is_empty() || !tag.iter().all(u8::is_ascii_alphanumeric)) {
                return Err("CAA tag must be 1-255 ASCII letters and digits");
            }
            Ok(end)
        }
        Kind::Nsap | Kind::Hex | Kind::Base64 => {
            if rest == 0 {
                Err("missing data")
            } else {
                Ok(rdata.len())
            }
        }
        Kind::HexZ | Kind::Base64Z | Kind::Base64Dash => Ok(rdata.len()),
        Kind::Salt => char_string_end(rdata, pos),
        Kind::Hash32 => {
            let end = char_string_end(rdata, pos)?;
            if end == pos + 1 {
                return Err("empty NSEC3 next hashed owner");
            }
            Ok(end)
        }
        Kind::Bitmap => {
            bitmap::check_nsec(&rdata[pos.min(rdata.len())..])?;
            Ok(rdata.len())
        }
        Kind::NxtBitmap => {
            bitmap::check_nxt(&rdata[pos.min(rdata.len())..])?;
            Ok(rdata.len())
        }
    }
}

/// Checks wire RDATA against the fields `kinds` (`semantic`: their meaning too).
pub(crate) fn check(kinds: &[Kind], rdata: &[u8], semantic: bool) -> Result<(), String> {
    let mut pos = 0;
    for &k in kinds {
        pos = end_of_field(k, rdata, pos, semantic).map_err(String::from)?;
    }
    if pos != rdata.len() {
        return Err(format!("{} octets of trailing data", rdata.len() - pos));
    }
    Ok(())
}

fn be(b: &[u8]) -> u64 {
    b.iter().fold(0u64, |v, &c| v << 8 | c as u64)
}

/// Writes one field (already checked); false when it has no text form.
fn present_one(k: Kind, v: &[u8], rdata: &[u8], pos: usize, out: &mut String) -> bool {
    match k {
        Kind::U8 | Kind::U16 | Kind::U32 | Kind::Alg | Kind::Period => {
            let _ = write!(out, "{}", be(v));
        }
        Kind::CertType => mnemonic::write_cert_type(be(v) as u16, out),
        Kind::RrType => out.push_str(&crate::rrtype::to_text(be(v) as u16)),
        Kind::DsyncScheme => {
            if v[0] == 1 {
                out.push_str("NOTIFY");
            } else {
                let _ = write!(out, "{}", v[0]);
            }
        }
        Kind::Time => codec::write_time(be(v) as u32, out),
        Kind::Name(_) => {
            write_name(rdata, pos, out);
        }
        Kind::Str | Kind::StrOpt => codec::write_quoted(&v[1..], out),
        Kind::Strs => {
            let mut p = 0;
            while p < v.len() {
                let n = v[p] as usize;
                if p > 0 {
                    out.push(' ');
                }
                codec::write_quoted(&v[p + 1..p + 1 + n], out);
                p += 1 + n;
            }
        }
        Kind::Text => codec::write_quoted(v, out),
        Kind::CaaTag => out.extend(v[1..].iter().map(|&c| c as char)),
        Kind::FloatStr => {
            if !is_float(&v[1..]) {
                return false;
            }
            out.extend(v[1..].iter().map(|&c| c as char));
        }
        Kind::Ipv4 => codec::write_ipv4(v, out),
        Kind::Ipv6 => codec::write_ipv6(v, out),
        Kind::Eui48 | Kind::Eui64 => {
            for (i, b) in v.iter().enumerate() {
                if i > 0 {
                    out.push('-');
                }
                let _ = write!(out, "{b:02x}");
            }
        }
        Kind::Ilnp64 => {
            for (i, g) in v.chunks(2).enumerate() {
                if i > 0 {
                    out.push(':');
                }
                let _ = write!(out, "{:04x}", be(g));
            }
        }
        Kind::Nsap => {
            out.push_str("0x");
            codec::write_hex(v, false, out);
        }
        Kind::Ipn => {
            let _ = write!(out, "{}", be(v));
        }
        Kind::Hex => codec::write_hex(v, true, out),
        Kind::HexZ | Kind::Base64Z => {
            if v.is_empty() {
                out.push('0');
            } else if k == Kind::HexZ {
                codec::write_hex(v, true, out);
            } else {
                codec::write_base64(v, out);
            }
        }
        Kind::Base64 | Kind::Base64Opt => codec::write_base64(v, out),
        Kind::Base64Dash => {
            if v.is_empty() {
                out.push('-');
            } else {
                codec::write_base64(v, out);
            }
        }
        Kind::Salt => {
            if v.len() == 1 {
                out.push('-');
            } else {
                codec::write_hex(&v[1..], true, out);
            }
        }
        Kind::Hash32 => codec::write_base32hex(&v[1..], out),
        Kind::Bitmap => bitmap::write_nsec(v, out),
        Kind::NxtBitmap => bitmap::write_nxt(v, out),
    }
    true
}

/// Writes checked RDATA described by `kinds`; false when some field has no text form.
pub(crate) fn present(kinds: &[Kind], rdata: &[u8], out: &mut String) -> bool {
    let mut pos = 0;
    let mut first = true;
    for &k in kinds {
        let Ok(end) = end_of(k, rdata, pos) else {
            return false;
        };
        let v = &rdata[pos..end];
        let empty_ok = matches!(
            k,
            Kind::StrOpt | Kind::Bitmap | Kind::NxtBitmap | Kind::Base64Opt
        );
        if !(empty_ok && v.is_empty()) {
            if !first {
                out.push(' ');
            }
            first = false;
            if !present_one(k, v, rdata, pos, out) {
                return false;
            }
        }
        pos = end;
    }
    true
}

/// Copies RDATA described by `kinds` that starts at `start` of message `msg` and ends at
/// `end` into `out`, with its names decompressed (pointers may go anywhere before `end`).
/// `None` when it does not parse.
pub(crate) fn decompress(
    kinds: &[Kind],
    msg: &[u8],
    start: usize,
    end: usize,
    out: &mut Vec<u8>,
) -> Option<()> {
    let rdata = msg.get(start..end)?;
    let mut pos = 0;
    for &k in kinds {
        if let Kind::Name(_) = k {
            let next = crate::name::read_compressed(&msg[..end], start + pos, out)?;
            pos = next - start;
        } else {
            let e = end_of(k, rdata, pos).ok()?;
            out.extend_from_slice(&rdata[pos..e]);
            pos = e;
        }
        if pos > rdata.len() {
            return None;
        }
    }
    (pos == rdata.len()).then_some(())
}

/// True when `kinds` holds a name senders may compress.
pub(crate) fn has_compressed_name(kinds: &[Kind]) -> bool {
    kinds
        .iter()
        .any(|k| matches!(k, Kind::Name(fl) if fl.compress))
}

/// Reports the names in checked RDATA described by `kinds`.
pub(crate) fn names(kinds: &[Kind], rdata: &[u8], f: &mut dyn FnMut(NameRef)) {
    let mut pos = 0;
    for &k in kinds {
        let Ok(end) = end_of(k, rdata, pos) else {
            return;
        };
        if let Kind::Name(fl) = k {
            f(NameRef {
                offset: pos,
                len: end - pos,
                compress: fl.compress,
                additional: fl.additional,
                canonical_lower: fl.lower,
            });
        }
        pos = end;
    }
}
