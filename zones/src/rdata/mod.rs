//! RDATA: presentation text to wire format and back, per type.
//!
//! RDATA is always kept in uncompressed wire format. This module reads it from the tokens
//! of a master-file entry (the type-specific text form or the RFC 3597 generic form
//! `\# LEN HEX`), checks wire RDATA of known types, prints it back, and tells where the
//! domain names inside RDATA are (for compression, additional-section processing and the
//! canonical form of RFC 4034 §6.2).
//!
//! Layout: `types` is the table of what each type is made of, `field` the engine that
//! reads, checks, prints and walks a list of field kinds, `codec` the text codecs they
//! share (character-strings, hex, base64, base32hex, times), `bitmap` the type bitmaps,
//! `dnssec` the semantic checks of the DNSSEC and digest types, and `loc`, `svcb` and
//! `special` the types too irregular for a field list.
//!
//! Three rules hold for every type: [`check_wire`] accepts exactly the RDATA that the `\#`
//! form may carry; text input never yields RDATA that [`check_wire`] refuses; and
//! [`present`] prints text that [`parse`] reads back to the same octets, falling back to
//! the `\#` form where the type's text form cannot say it.

mod bitmap;
mod codec;
pub(crate) use codec::write_base32hex;
mod dnssec;
mod field;
mod loc;
mod mnemonic;
mod special;
mod svcb;
mod types;

use std::fmt::Write;

use crate::scan::{Scanner, Tok};
use types::{Custom, Def, Spec};

/// Tokens of one record's RDATA, read one after another.
pub struct Fields<'a> {
    scanner: &'a Scanner,
    toks: &'a [Tok],
    i: usize,
}

/// One token of RDATA text.
#[derive(Debug, Clone, Copy)]
pub struct Field<'a> {
    /// The token as written (escapes not decoded; quotes removed).
    pub text: &'a [u8],
    /// Written as a `"quoted string"`.
    pub quoted: bool,
    /// Holds at least one backslash escape.
    pub escaped: bool,
    /// 1-based line.
    pub line: u32,
    /// 1-based column.
    pub col: u32,
}

impl<'a> Fields<'a> {
    /// The RDATA tokens `toks` of an entry read by `scanner`.
    pub fn new(scanner: &'a Scanner, toks: &'a [Tok]) -> Fields<'a> {
        Fields {
            scanner,
            toks,
            i: 0,
        }
    }

    /// The next token, if any.
    #[allow(clippy::should_implement_trait)]
    pub fn next(&mut self) -> Option<Field<'a>> {
        let f = self.peek()?;
        self.i += 1;
        Some(f)
    }

    /// The next token without consuming it.
    pub fn peek(&self) -> Option<Field<'a>> {
        let t = self.toks.get(self.i)?;
        Some(Field {
            text: self.scanner.text(t),
            quoted: t.quoted,
            escaped: t.escaped,
            line: t.line,
            col: t.col,
        })
    }

    /// Tokens not yet read.
    pub fn remaining(&self) -> usize {
        self.toks.len() - self.i
    }

    /// True when every token has been read.
    pub fn is_empty(&self) -> bool {
        self.remaining() == 0
    }

    /// Position (line, col) of the next token, or of the last one when all are read;
    /// for error messages.
    pub fn pos(&self) -> (u32, u32) {
        let t = self.toks.get(self.i).or_else(|| self.toks.last()).copied();
        t.map(|t| (t.line, t.col)).unwrap_or((0, 0))
    }
}

/// An RDATA error: what was expected, and where.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{msg}")]
pub struct RdataError {
    /// 1-based line (0 when not from text).
    pub line: u32,
    /// 1-based column (0 when unknown).
    pub col: u32,
    /// What went wrong, saying what was expected.
    pub msg: String,
}

/// Where a domain name sits inside RDATA.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NameRef {
    /// Offset of the name's first byte in the RDATA.
    pub offset: usize,
    /// Length of the (uncompressed) name.
    pub len: usize,
    /// The name may be compressed on the wire (RFC 3597 §4: only the RFC 1035 types).
    pub compress: bool,
    /// Addresses of this name go in the additional section (NS, MX, SRV, ... targets).
    pub additional: bool,
    /// Lower-cased in the canonical form (RFC 4034 §6.2 as updated by RFC 6840 §5.1).
    pub canonical_lower: bool,
}

/// Longest RDATA (RFC 1035 §3.2.1: RDLENGTH is 16 bits).
pub const MAX_RDATA_LEN: usize = 65535;

/// Reads the RDATA of type `rtype` from `fields` (text or `\#` generic form) into `out`.
///
/// Relative names are made absolute with `origin` (wire form). On error `out` is left as it
/// was and the error names the offending token.
pub fn parse(
    rtype: u16,
    fields: &mut Fields<'_>,
    origin: &[u8],
    out: &mut Vec<u8>,
) -> Result<(), RdataError> {
    parse_with(rtype, fields, origin, out, true)
}

/// As [`parse`], with the semantic checks (`semantic`) or with the structure's alone
/// ([`check_structure`]: a secondary's copy of what its primary serves).
pub fn parse_with(
    rtype: u16,
    fields: &mut Fields<'_>,
    origin: &[u8],
    out: &mut Vec<u8>,
    semantic: bool,
) -> Result<(), RdataError> {
    let start = out.len();
    let first = fields.peek();
    let r = parse_inner(rtype, fields, origin, out, start);
    if r.is_err() {
        out.truncate(start);
        return r;
    }
    let at = |msg: String| {
        let (line, col) = first
            .map(|f| (f.line, f.col))
            .unwrap_or_else(|| fields.pos());
        RdataError { line, col, msg }
    };
    if out.len() - start > MAX_RDATA_LEN {
        out.truncate(start);
        return Err(at(format!("RDATA longer than {MAX_RDATA_LEN} octets")));
    }
    if let Err(m) = check(rtype, &out[start..], semantic) {
        out.truncate(start);
        return Err(at(m));
    }
    Ok(())
}

fn parse_inner(
    rtype: u16,
    fields: &mut Fields<'_>,
    origin: &[u8],
    out: &mut Vec<u8>,
    start: usize,
) -> Result<(), RdataError> {
    if let Some(f) = fields.peek()
        && f.text == b"\\#"
        && !f.quoted
    {
        fields.next();
        return parse_generic(fields, out, start);
    }
    let Some(spec) = types::spec(rtype) else {
        return Err(codec::missing_or(
            fields,
            format!(
                "type {} has no known text form: write its RDATA as \\# LENGTH HEX (RFC 3597)",
                crate::rrtype::to_text(rtype)
            ),
        ));
    };
    match spec.def {
        Def::Fields(kinds) => field::parse(kinds, fields, origin, out)?,
        Def::Custom(c) => match c {
            Custom::Loc => loc::parse(fields, out)?,
            Custom::Svcb => svcb::parse(fields, origin, out)?,
            Custom::Apl => special::parse_apl(fields, out)?,
            Custom::Wks => special::parse_wks(fields, out)?,
            Custom::Ipseckey => special::parse_ipseckey(fields, origin, out)?,
            Custom::Hip => special::parse_hip(fields, origin, out)?,
            Custom::Amtrelay => special::parse_amtrelay(fields, origin, out)?,
            Custom::A6 => special::parse_a6(fields, origin, out)?,
            Custom::Atma => special::parse_atma(fields, out)?,
        },
        Def::Opaque => {
            return Err(codec::missing_or(
                fields,
                format!(
                    "{} has no text form: write its RDATA as \\# LENGTH HEX (RFC 3597)",
                    crate::rrtype::to_text(rtype)
                ),
            ));
        }
    }
    if let Some(f) = fields.next() {
        return Err(codec::bad(&f, "unexpected data after the RDATA"));
    }
    Ok(())
}

/// The RFC 3597 form after `\#`: a decimal length, then that many octets in hex, which
/// may be split by blanks anywhere.
fn parse_generic(
    fields: &mut Fields<'_>,
    out: &mut Vec<u8>,
    start: usize,
) -> Result<(), RdataError> {
    let lf = codec::word(fields, "the RDATA length after \\#")?;
    let len = codec::uint(lf.text, MAX_RDATA_LEN as u64)
        .ok_or_else(|| codec::bad(&lf, "expected the RDATA length (0-65535) after \\#"))?
        as usize;
    let mut d = codec::HexDecoder::default();
    while let Some(f) = fields.next() {
        if f.quoted {
            return Err(codec::bad(&f, "expected hex RDATA, not a quoted string"));
        }
        d.feed(f.text, out).map_err(|m| codec::bad(&f, m))?;
        if out.len() - start > len {
            return Err(codec::bad(
                &f,
                format!("more RDATA than the {len} octets announced after \\#"),
            ));
        }
    }
    d.finish().map_err(|m| codec::bad(&lf, m))?;
    if out.len() - start != len {
        return Err(codec::bad(
            &lf,
            format!(
                "\\# announces {len} octets of RDATA but {} follow",
                out.len() - start
            ),
        ));
    }
    Ok(())
}

/// Checks wire RDATA of a known type; unknown types are opaque and always pass.
///
/// The error says what is wrong, for the `\#` form and for zone transfers alike.
pub fn check_wire(rtype: u16, rdata: &[u8]) -> Result<(), String> {
    check(rtype, rdata, true)
}

/// Checks wire RDATA of a known type for its structure only (fields that parse, names that
/// end, lengths that agree), without the semantic checks [`check_wire`] adds (a DS digest's
/// length for its type, SVCB's key rules): what a secondary takes from its primary, as Knot
/// and NSD take it.
pub fn check_structure(rtype: u16, rdata: &[u8]) -> Result<(), String> {
    check(rtype, rdata, false)
}

fn check(rtype: u16, rdata: &[u8], semantic: bool) -> Result<(), String> {
    if rdata.len() > MAX_RDATA_LEN {
        return Err(format!("RDATA longer than {MAX_RDATA_LEN} octets"));
    }
    let Some(spec) = types::spec(rtype) else {
        return Ok(());
    };
    let r = match spec.def {
        Def::Fields(kinds) => field::check(kinds, rdata, semantic),
        Def::Custom(c) => match c {
            Custom::Loc => loc::check(rdata),
            Custom::Svcb if semantic => svcb::check(rdata),
            Custom::Svcb => svcb::check_structure(rdata),
            Custom::Apl => special::check_apl(rdata),
            Custom::Wks => special::check_wks(rdata),
            Custom::Ipseckey => special::check_ipseckey(rdata),
            Custom::Hip => special::check_hip(rdata),
            Custom::Amtrelay => special::check_amtrelay(rdata),
            Custom::A6 => special::check_a6(rdata),
            Custom::Atma => special::check_atma(rdata),
        },
        Def::Opaque => Ok(()),
    };
    r.and_then(|()| match spec.hook {
        Some(h) if semantic => h(rtype, rdata),
        _ => Ok(()),
    })
    .map_err(|m| format!("bad {} RDATA: {m}", crate::rrtype::to_text(rtype)))
}

/// Writes RDATA in presentation format: names absolute with RFC 1035 escapes, strings
/// quoted. Falls back to the RFC 3597 form `\# LEN HEX` for unknown types, malformed RDATA
/// and values the type's text form cannot express.
pub fn present(rtype: u16, rdata: &[u8], out: &mut String) {
    let start = out.len();
    if let Some(spec) = types::spec(rtype)
        && check_wire(rtype, rdata).is_ok()
    {
        let ok = match spec.def {
            Def::Fields(kinds) => field::present(kinds, rdata, out),
            Def::Custom(c) => match c {
                Custom::Loc => loc::present(rdata, out),
                Custom::Svcb => svcb::present(rdata, out),
                Custom::Apl => special::present_apl(rdata, out),
                Custom::Wks => special::present_wks(rdata, out),
                Custom::Ipseckey => special::present_ipseckey(rdata, out),
                Custom::Hip => special::present_hip(rdata, out),
                Custom::Amtrelay => special::present_amtrelay(rdata, out),
                Custom::A6 => special::present_a6(rdata, out),
                Custom::Atma => special::present_atma(rdata, out),
            },
            Def::Opaque => false,
        };
        if ok {
            return;
        }
        out.truncate(start);
    }
    present_generic(rdata, out);
}

/// Writes RDATA in the RFC 3597 generic form `\# LEN HEX`.
pub fn present_generic(rdata: &[u8], out: &mut String) {
    let _ = write!(out, "\\# {}", rdata.len());
    if !rdata.is_empty() {
        out.push(' ');
        codec::write_hex(rdata, false, out);
    }
}

/// Calls `f` for each domain name inside RDATA of type `rtype`, in order.
///
/// Cheap and allocation-free (the answer path calls it): it walks the RDATA only as far as
/// its names and trusts what [`check_wire`] accepted at load. On malformed RDATA it stops
/// at the defect, so every reported name lies within `rdata` and is a well-formed name.
pub fn names(rtype: u16, rdata: &[u8], f: &mut dyn FnMut(NameRef)) {
    let Some(spec) = types::spec(rtype) else {
        return;
    };
    match spec.def {
        Def::Fields(kinds) => field::names(kinds, rdata, f),
        Def::Custom(c) => match c {
            Custom::Svcb => svcb::names(rdata, f),
            Custom::Ipseckey => special::names_ipseckey(rdata, f),
            Custom::Hip => special::names_hip(rdata, f),
            Custom::Amtrelay => special::names_amtrelay(rdata, f),
            Custom::A6 => special::names_a6(rdata, f),
            Custom::Loc | Custom::Apl | Custom::Wks | Custom::Atma => {}
        },
        Def::Opaque => {}
    }
}

/// True when a sender may compress names in RDATA of `rtype` (RFC 3597 §4: the RFC 1035
/// types only).
pub fn compresses_names(rtype: u16) -> bool {
    matches!(types::spec(rtype), Some(Spec { def: Def::Fields(k), .. }) if field::has_compressed_name(k))
}

/// True when a receiver decompresses names in RDATA of `rtype`: the types senders may
/// compress, those RFC 3597 §4 lists for receivers (RP, AFSDB, RT, SIG, PX, NXT, NAPTR,
/// SRV), and DNAME (RFC 6672 forbids compressing its target; peers that do are still read).
pub fn decompressed_on_receipt(rtype: u16) -> bool {
    use crate::rrtype::t;
    compresses_names(rtype)
        || matches!(
            rtype,
            t::RP | t::AFSDB | t::RT | t::SIG | t::PX | t::NXT | t::NAPTR | t::SRV | t::DNAME
        )
}

/// Appends to `out` the RDATA of type `rtype` that occupies `start..end` of the message
/// `msg`, its names decompressed when [`decompressed_on_receipt`] says so (copied as it is
/// otherwise). `None` when the RDATA does not parse.
pub fn decompress(
    rtype: u16,
    msg: &[u8],
    start: usize,
    end: usize,
    out: &mut Vec<u8>,
) -> Option<()> {
    if end > msg.len() || start > end {
        return None;
    }
    if decompressed_on_receipt(rtype)
        && let Some(Spec {
            def: Def::Fields(kinds),
            ..
        }) = types::spec(rtype)
    {
        return field::decompress(kinds, msg, start, end, out);
    }
    out.extend_from_slice(&msg[start..end]);
    Some(())
}

/// Writes `types` as an NSEC/NSEC3 type bitmap (RFC 4034 §4.1.2); sorts and dedups them.
pub fn type_bitmap(types: &mut Vec<u16>, out: &mut Vec<u8>) {
    bitmap::encode(types, out)
}

/// Writes sorted, deduplicated `types` as a type bitmap into `out` without allocating (the
/// query path's); its length, or None when it does not fit.
pub fn type_bitmap_into(types: &[u16], out: &mut [u8]) -> Option<usize> {
    bitmap::encode_into(types, out)
}

/// Lower-cases, in place, the names that RFC 4034 §6.2 (as updated by RFC 6840 §5.1) puts
/// in canonical form (those [`names`] reports with `canonical_lower`).
pub fn to_canonical(rtype: u16, rdata: &mut [u8]) {
    let mut refs = [(0usize, 0usize); 4];
    let mut n = 0;
    names(rtype, rdata, &mut |r| {
        if r.canonical_lower && n < refs.len() {
            refs[n] = (r.offset, r.len);
            n += 1;
        }
    });
    for &(o, l) in &refs[..n] {
        rdata[o..o + l].make_ascii_lowercase();
    }
}

/// Helpers for the unit tests of this module and its children.
#[cfg(test)]
pub(crate) mod testutil {
    use super::*;

    /// Parses RDATA text of `rtype` relative to `example.` (the root when `origin` is false).
    pub(crate) fn parse_text(rtype: u16, text: &str) -> Result<Vec<u8>, RdataError> {
        let mut s = Scanner::from_bytes(text.as_bytes().to_vec());
        let mut toks = Vec::new();
        s.next_entry(&mut toks).map_err(|e| RdataError {
            line: e.line,
            col: e.col,
            msg: e.msg,
        })?;
        let mut f = Fields::new(&s, &toks);
        let mut out = Vec::new();
        parse(rtype, &mut f, b"\x07example\x00", &mut out)?;
        Ok(out)
    }

    /// Presents RDATA.
    pub(crate) fn show(rtype: u16, rdata: &[u8]) -> String {
        let mut s = String::new();
        present(rtype, rdata, &mut s);
        s
    }

    /// Parses, checks the octets against `hex`, presents as `shown`, and reads that back.
    pub(crate) fn case(rtype: u16, text: &str, hex: &str, shown: &str) {
        let rd = parse_text(rtype, text).unwrap_or_else(|e| panic!("{text}: {}", e.msg));
        let mut h = String::new();
        codec::write_hex(&rd, false, &mut h);
        assert_eq!(h, hex, "{text}");
        let p = show(rtype, &rd);
        assert_eq!(p, shown, "{text}");
        assert_eq!(parse_text(rtype, &p).map_err(|e| e.msg), Ok(rd), "{p}");
    }

    /// Asserts that text is refused, with a message containing `why`.
    pub(crate) fn refused(rtype: u16, text: &str, why: &str) {
        match parse_text(rtype, text) {
            Ok(rd) => panic!("{text}: accepted as {rd:02x?}"),
            Err(e) => assert!(e.msg.contains(why), "{text}: {:?} lacks {why:?}", e.msg),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::testutil::{case, parse_text, refused, show};
    use super::*;
    use crate::rrtype::t;
    use proptest::prelude::*;

    #[test]
    fn a_secondarys_check_is_of_structure_only() {
        // A CAA tag that is no word, an SVCB no-default-alpn without alpn, a DS digest of the
        // wrong length: sound in structure, faulty in meaning.
        let mut caa = vec![0u8, 14];
        caa.extend_from_slice(b"issue-critical");
        caa.extend_from_slice(b"ca.example");
        let svcb = [0u8, 1, 0, 0, 2, 0, 0];
        let ds = [0u8, 1, 13, 2, 1, 35];
        for (rtype, rd) in [(t::CAA, &caa[..]), (t::HTTPS, &svcb[..]), (t::DS, &ds[..])] {
            assert!(check_wire(rtype, rd).is_err(), "{rtype}");
            assert_eq!(check_structure(rtype, rd), Ok(()), "{rtype}");
        }
        // Broken structure is refused either way.
        for (rtype, rd) in [
            (t::CAA, &caa[..3]),
            (t::HTTPS, &svcb[..5]),
            (t::DS, &ds[..3]),
        ] {
            assert!(check_structure(rtype, rd).is_err(), "{rtype}");
        }
    }

    #[test]
    fn generic_form() {
        case(t::A, "\\# 4 c0 000201", "c0000201", "192.0.2.1");
        case(65000, "\\# 3 01 0203", "010203", "\\# 3 010203");
        case(65000, "\\# 0", "", "\\# 0");
        case(t::APL, "\\# 0", "", "");
        refused(t::A, "\\# 0", "bad A RDATA");
        refused(t::A, "\\# 5 c0000201", "announces 5 octets");
        refused(t::A, "\\# 3 c00002", "RDATA too short");
        refused(65000, "\\# 1 0000", "more RDATA than");
        refused(65000, "\\# 2 00", "announces 2 octets");
        refused(65000, "\\# 1 0", "odd number");
        refused(65000, "\\# 1 zz", "bad hex");
        refused(65000, "\\#", "missing the RDATA length");
        refused(65000, "\\# 65536", "0-65535");
        refused(65000, "\\# 1 \"00\"", "quoted");
        refused(65000, "00", "no known text form");
        refused(t::NULL, "00", "no text form");
        case(t::NULL, "\\# 1 ff", "ff", "\\# 1 ff");
        // `\#` is only special as the first token.
        case(t::TXT, "a \\# \"\\#\"", "016101230123", "\"a\" \"#\" \"#\"");
        case(t::TXT, "\"\\#\"", "0123", "\"#\"");
    }

    #[test]
    fn errors_point_at_the_token_and_leave_out_alone() {
        let e = parse_text(t::MX, "10 a..b").unwrap_err();
        assert_eq!((e.line, e.col), (1, 4));
        let e = parse_text(t::MX, "10 a b").unwrap_err();
        assert_eq!(
            (e.line, e.col, e.msg.as_str()),
            (1, 6, "unexpected data after the RDATA")
        );
        let e = parse_text(t::MX, "10").unwrap_err();
        assert!(e.msg.contains("missing a domain name"), "{}", e.msg);
        let mut s = Scanner::from_bytes(b"1.2.3".to_vec());
        let mut toks = Vec::new();
        s.next_entry(&mut toks).unwrap();
        let mut out = vec![7u8];
        assert!(parse(t::A, &mut Fields::new(&s, &toks), &[0], &mut out).is_err());
        assert_eq!(out, [7]);
    }

    #[test]
    fn basic_types() {
        case(t::A, "192.0.2.1", "c0000201", "192.0.2.1");
        refused(t::A, "192.0.2", "IPv4");
        refused(t::A, "192.0.2.1 1", "unexpected data");
        case(
            t::AAAA,
            "::FFFF:1.2.3.4",
            "00000000000000000000ffff01020304",
            "::ffff:1.2.3.4",
        );
        case(t::NS, "ns", "026e73076578616d706c6500", "ns.example.");
        case(t::NS, "@", "076578616d706c6500", "example.");
        case(t::MX, "10 .", "000a00", "10 .");
        refused(t::MX, "65536 .", "0-65535");
        refused(t::MX, "-1 .", "0-65535");
        case(
            t::SOA,
            "a. b. 1 1h 2m 3s 1w",
            "0161000162000000000100000e10000000780000000300093a80",
            "a. b. 1 3600 120 3 604800",
        );
        case(
            t::SOA,
            "@ @ 4294967295 4294967295 0 0 0",
            "076578616d706c6500076578616d706c6500ffffffffffffffff000000000000000000000000",
            "example. example. 4294967295 4294967295 0 0 0",
        );
        refused(t::SOA, "@ @ 1h 0 0 0 0", "32-bit number");
        case(
            t::TXT,
            "\"a b\" c \\255",
            "03612062016301ff",
            "\"a b\" \"c\" \"\\255\"",
        );
        refused(t::TXT, "", "missing a character-string");
        refused(
            t::TXT,
            &format!("\"{}\"", "x".repeat(256)),
            "longer than 255",
        );
        case(t::HINFO, "\"\" x", "000178", "\"\" \"x\"");
        refused(t::HINFO, "a b c", "unexpected data");
        case(t::ISDN, "a", "0161", "\"a\"");
        case(t::ISDN, "a b", "01610162", "\"a\" \"b\"");
        case(
            t::SRV,
            "1 2 3 t",
            "000100020003017407 6578616d706c6500"
                .replace(' ', "")
                .as_str(),
            "1 2 3 t.example.",
        );
        case(
            t::NAPTR,
            "1 2 \"s\" \"\" \"!^.*$!x!\" .",
            "000100020173000821 5e2e2a2421782100"
                .replace(' ', "")
                .as_str(),
            "1 2 \"s\" \"\" \"!^.*$!x!\" .",
        );
        case(
            t::CAA,
            "0 issue \"ca.example; x\"",
            "0005697373756563612e6578616d706c653b2078",
            "0 issue \"ca.example; x\"",
        );
        refused(t::CAA, "0 \"\" x", "CAA tag");
        refused(t::CAA, "0 is-sue x", "CAA tag");
        case(
            t::URI,
            "1 2 \"https://x/\"",
            "00010002 68747470733a2f2f782f".replace(' ', "").as_str(),
            "1 2 \"https://x/\"",
        );
        case(
            t::EUI48,
            "00-00-5e-00-53-2A",
            "00005e00532a",
            "00-00-5e-00-53-2a",
        );
        refused(t::EUI48, "00:00-5e-00-53-2a", "dash-separated");
        refused(t::EUI48, "00-00-5e-00-53-2", "dash-separated");
        case(
            t::L64,
            "10 2001:db8:1140:1000",
            "000a20010db811401000",
            "10 2001:0db8:1140:1000",
        );
        refused(t::NID, "1 0:0:0:+1", "colon-separated");
        case(t::NSAP, "0x47.0005.80", "47000580", "0x47000580");
        refused(t::NSAP, "47.0005", "0x");
        case(t::IPN, "1.2", "0000000100000002", "4294967298");
        case(
            t::IPN,
            "18446744073709551615",
            "ffffffffffffffff",
            "18446744073709551615",
        );
        case(
            t::GPOS,
            "-32.6882 116.8652 10.0",
            "082d33322e36383832083131362e383635320431302e30",
            "-32.6882 116.8652 10.0",
        );
        refused(t::GPOS, "x 1 1", "decimal number");
        case(
            t::DOA,
            "0 1 2 \"\" -",
            "00000000000000010200",
            "0 1 2 \"\" -",
        );
        refused(t::DOA, "0 1 2 \"\" \"-\"", "quoted");
        case(
            t::CERT,
            "PKIX 1 RSASHA256 AA==",
            "0001000108 00".replace(' ', "").as_str(),
            "PKIX 1 8 AA==",
        );
        case(
            t::DSYNC,
            "CDS NOTIFY 53 x.",
            "003b010035017800",
            "CDS NOTIFY 53 x.",
        );
        case(
            t::CSYNC,
            "1 3 A NS AAAA",
            "0000000100030004600000 08".replace(' ', "").as_str(),
            "1 3 A NS AAAA",
        );
    }

    #[test]
    fn compression_knowledge_comes_from_the_descriptions() {
        use crate::rrtype::t;
        for rt in [t::NS, t::CNAME, t::SOA, t::MX, t::PTR, t::MINFO] {
            assert!(compresses_names(rt), "{rt}");
        }
        for rt in [t::SRV, t::NAPTR, t::DNAME, t::RP, t::A, t::TXT, t::RRSIG] {
            assert!(!compresses_names(rt), "{rt}");
        }
        assert!(decompressed_on_receipt(t::SRV) && decompressed_on_receipt(t::DNAME));
        assert!(!decompressed_on_receipt(t::TXT));
        // An MX whose exchange points back to the owner name at offset 0.
        let mut msg = b"\x04mail\x07example\x00".to_vec();
        let start = msg.len();
        msg.extend_from_slice(&[0, 10, 0xC0, 0]);
        let mut out = Vec::new();
        decompress(t::MX, &msg, start, msg.len(), &mut out).unwrap();
        assert_eq!(out, b"\x00\x0a\x04mail\x07example\x00");
        // A forward pointer, or RDATA longer than its fields, is refused.
        let mut bad = msg.clone();
        let n = bad.len();
        bad[n - 1] = 50;
        assert!(decompress(t::MX, &bad, start, n, &mut Vec::new()).is_none());
        let mut long = msg.clone();
        long.push(0);
        assert!(decompress(t::MX, &long, start, long.len(), &mut Vec::new()).is_none());
        // Types without compressed names are copied as they are.
        let mut out = Vec::new();
        decompress(t::TXT, b"\x02hi", 0, 3, &mut out).unwrap();
        assert_eq!(out, b"\x02hi");
    }

    #[test]
    fn names_and_canonical_form() {
        let rd = parse_text(t::MX, "1 MAIL.Example.").unwrap();
        let mut got = Vec::new();
        names(t::MX, &rd, &mut |r| got.push(r));
        assert_eq!(
            got,
            [NameRef {
                offset: 2,
                len: 14,
                compress: true,
                additional: true,
                canonical_lower: true
            }]
        );
        let mut c = rd.clone();
        to_canonical(t::MX, &mut c);
        assert_eq!(&c[2..], b"\x04mail\x07example\x00");
        // NSEC's next name keeps its case (RFC 6840 §5.1); RRSIG's signer is lowered.
        let rd = parse_text(t::NSEC, "A.example. A").unwrap();
        let mut c = rd.clone();
        to_canonical(t::NSEC, &mut c);
        assert_eq!(c, rd);
        let rd = parse_text(t::RRSIG, "A 8 1 1 1 1 1 EX. AA==").unwrap();
        let mut c = rd.clone();
        to_canonical(t::RRSIG, &mut c);
        assert_eq!(&c[18..22], b"\x02ex\x00");
        // SOA: two names, compressible, no additional processing.
        let rd = parse_text(t::SOA, "a. b. 1 2 3 4 5").unwrap();
        let mut got = Vec::new();
        names(t::SOA, &rd, &mut |r| {
            got.push((r.offset, r.len, r.compress, r.additional))
        });
        assert_eq!(got, [(0, 3, true, false), (3, 3, true, false)]);
        // SRV: additional, not compressible; SVCB target additional, kept as written.
        let rd = parse_text(t::SRV, "0 0 0 T.").unwrap();
        let mut got = Vec::new();
        names(t::SRV, &rd, &mut |r| {
            got.push((r.offset, r.compress, r.additional, r.canonical_lower))
        });
        assert_eq!(got, [(6, false, true, true)]);
        let rd = parse_text(t::HTTPS, "1 T. alpn=h2").unwrap();
        let mut got = Vec::new();
        names(t::HTTPS, &rd, &mut |r| {
            got.push((r.offset, r.len, r.additional, r.canonical_lower))
        });
        assert_eq!(got, [(2, 3, true, false)]);
        // Malformed RDATA has no names.
        let mut n = 0;
        names(t::MX, &[0, 1, 5], &mut |_| n += 1);
        assert_eq!(n, 0);
        to_canonical(t::MX, &mut [0, 1, 5]);
    }

    #[test]
    fn present_falls_back_to_generic() {
        assert_eq!(show(t::A, &[1, 2, 3]), "\\# 3 010203");
        assert_eq!(show(t::MX, &[0, 1, 0x41]), "\\# 3 000141");
        assert_eq!(show(65000, &[]), "\\# 0");
    }

    // ---- Property tests -------------------------------------------------------------------

    fn round_trip(rtype: u16, rd: &[u8]) -> Result<(), TestCaseError> {
        let text = show(rtype, rd);
        let back = parse_text(rtype, &text)
            .map_err(|e| TestCaseError::fail(format!("{text:?} does not read back: {}", e.msg)))?;
        prop_assert_eq!(&back, rd, "via {:?}", text);
        Ok(())
    }

    fn name() -> impl Strategy<Value = Vec<u8>> {
        prop::collection::vec(prop::collection::vec(any::<u8>(), 1..20), 0..4).prop_map(|labels| {
            let mut w = Vec::new();
            for l in labels {
                w.push(l.len() as u8);
                w.extend_from_slice(&l);
            }
            w.push(0);
            w
        })
    }

    fn bitmap(types: &[u16]) -> Vec<u8> {
        let mut bits = vec![0u8; 8192];
        for &t in types {
            bits[t as usize / 8] |= 0x80 >> (t % 8);
        }
        let mut out = Vec::new();
        for (w, block) in bits.chunks(32).enumerate() {
            if let Some(last) = block.iter().rposition(|&b| b != 0) {
                out.push(w as u8);
                out.push(last as u8 + 1);
                out.extend_from_slice(&block[..=last]);
            }
        }
        out
    }

    fn strings(n: std::ops::Range<usize>) -> impl Strategy<Value = Vec<Vec<u8>>> {
        prop::collection::vec(prop::collection::vec(any::<u8>(), 0..40), n)
    }

    fn cat(parts: &[&[u8]]) -> Vec<u8> {
        parts.concat()
    }

    /// One valid text per type with structure worth mutating.
    const SEEDS: &[(u16, &str)] = &[
        (t::SOA, "a. b. 1 2 3 4 5"),
        (t::MINFO, "a. b."),
        (t::MX, "1 a."),
        (t::TXT, "a \"\" b"),
        (t::ISDN, "a b"),
        (t::NAPTR, "1 2 \"s\" \"x\" \"\" a."),
        (t::SRV, "1 2 3 a."),
        (t::PX, "1 a. b."),
        (t::CAA, "0 issue \"x\""),
        (t::URI, "1 2 \"x\""),
        (t::GPOS, "1.5 -2 3"),
        (t::LOC, "42 21 54 N 71 06 18 W -24m 30m"),
        (t::APL, "1:1.2.3.0/24 !2:ff00::/8"),
        (t::WKS, "1.2.3.4 6 25 53"),
        (t::IPSECKEY, "10 3 2 gw. AQID"),
        (t::IPSECKEY, "10 2 2 ::1 AQID"),
        (t::HIP, "2 00112233 AQID rvs. b."),
        (t::AMTRELAY, "1 0 3 r."),
        (t::A6, "64 ::1 p."),
        (t::A6, "0 ::1"),
        (t::ATMA, "+123"),
        (t::NSAP, "0x47.00"),
        (
            t::SVCB,
            "1 t. mandatory=alpn,port alpn=h2,h3 port=1 ipv4hint=1.2.3.4 ech=AQID ipv6hint=::1 \
             dohpath=/{?dns} tls-supported-groups=1,2 docpath=a,b oots=\"a:1,b:2\" key99=x",
        ),
        (t::HTTPS, "1 . alpn=h2 no-default-alpn ohttp pvd"),
        (
            t::RRSIG,
            "A 8 2 3600 20260101000000 20250101000000 1 a. AQID",
        ),
        (t::NSEC, "a. A NS TYPE1000"),
        (t::NSEC3, "0 0 0 AB 00====== A TYPE300"),
        (t::NSEC3, "1 1 1 - AJHVGTICN6K0VDA53GCHFMT219SRRQLM A"),
        (t::NSEC3PARAM, "1 0 0 AB"),
        (
            t::DS,
            "1 8 2 0000000000000000000000000000000000000000000000000000000000000000",
        ),
        (t::CDS, "0 0 0 0"),
        (t::DNSKEY, "256 3 8 AQID"),
        (t::KEY, "0 0 254 CQYHKwYBBAGTPwA="),
        (t::KEY, "0 0 253 AWEA"),
        (t::ZONEMD, "1 1 240 000000000000000000000000"),
        (t::SSHFP, "1 1 0000000000000000000000000000000000000000"),
        (t::CSYNC, "1 2 A"),
        (t::NXT, "a. A MX"),
        (t::DOA, "0 1 2 \"t\" AQID"),
        (t::EUI48, "00-01-02-03-04-05"),
        (t::L64, "1 0:1:2:3"),
        (t::IPN, "1.2"),
        (t::DSYNC, "CDS 1 1 a."),
        (t::CERT, "1 2 3 AQID"),
        (t::TLSA, "3 1 1 00"),
    ];

    proptest! {
        // Failures are reported, not persisted: the crate keeps no regression files.
        #![proptest_config(ProptestConfig {
            cases: std::env::var("PROPTEST_CASES").ok().and_then(|v| v.parse().ok()).unwrap_or(1000),
            failure_persistence: None,
            ..ProptestConfig::default()
        })]

        #[test]
        fn mx_srv_soa_round_trip(p in any::<[u8; 6]>(), n1 in name(), n2 in name(), tm in any::<[u8; 20]>()) {
            round_trip(t::MX, &cat(&[&p[..2], &n1]))?;
            round_trip(t::SRV, &cat(&[&p, &n1]))?;
            round_trip(t::SOA, &cat(&[&n1, &n2, &tm]))?;
            round_trip(t::RP, &cat(&[&n1, &n2]))?;
        }

        #[test]
        fn strings_round_trip(ss in strings(1..6)) {
            let mut rd = Vec::new();
            for s in &ss {
                rd.push(s.len() as u8);
                rd.extend_from_slice(s);
            }
            round_trip(t::TXT, &rd)?;
            round_trip(t::CAA, &cat(&[&[128, 5], b"issue", &ss[0]]))?;
            round_trip(t::URI, &cat(&[&[0, 1, 0, 2], &ss[0]]))?;
        }

        #[test]
        fn dnssec_round_trip(
            n in name(),
            head in any::<[u8; 18]>(),
            sig in prop::collection::vec(any::<u8>(), 1..80),
            types in prop::collection::vec(any::<u16>(), 0..12),
            salt in prop::collection::vec(any::<u8>(), 0..40),
            hash in prop::collection::vec(any::<u8>(), 1..40),
            dt in prop::sample::select(vec![1u8, 2, 4, 7]),
        ) {
            // Pseudo-types are never covered nor listed (RFC 4034): such wire is refused.
            let mut rrsig_head = head;
            if crate::rrtype::is_pseudo(u16::from_be_bytes([head[0], head[1]])) {
                rrsig_head[0] ^= 0x80;
            }
            let types: Vec<u16> = types.into_iter().filter(|&t| !crate::rrtype::is_pseudo(t)).collect();
            round_trip(t::RRSIG, &cat(&[&rrsig_head, &n, &sig]))?;
            round_trip(t::NSEC, &cat(&[&n, &bitmap(&types)]))?;
            // SHA-1 (algorithm 1) hashes are 20 octets; other algorithms any length.
            let hash: Vec<u8> = if head[0] == 1 { hash.iter().cycle().take(20).copied().collect() } else { hash };
            let nsec3 = cat(&[&head[..4], &[salt.len() as u8], &salt, &[hash.len() as u8], &hash, &bitmap(&types)]);
            round_trip(t::NSEC3, &nsec3)?;
            round_trip(t::NSEC3PARAM, &cat(&[&head[..4], &[salt.len() as u8], &salt]))?;
            let len = match dt { 1 => 20, 2 => 32, 4 => 48, _ => sig.len() };
            let digest: Vec<u8> = sig.iter().cycle().take(len).copied().collect();
            round_trip(t::DS, &cat(&[&head[..3], &[dt], &digest]))?;
            round_trip(t::DNSKEY, &cat(&[&head[..3], &[8], &sig]))?;
            round_trip(t::TLSA, &cat(&[&head[..3], &sig]))?;
            round_trip(t::CSYNC, &cat(&[&head[..6], &bitmap(&types)]))?;
        }

        #[test]
        fn loc_round_trip(
            prec in prop::collection::vec((0u8..10, 0u8..10), 3),
            lat in -324_000_000i64..=324_000_000,
            lon in -648_000_000i64..=648_000_000,
            alt in any::<u32>(),
        ) {
            let mut rd = vec![0u8];
            rd.extend(prec.iter().map(|&(m, e)| if m == 0 { 0 } else { m << 4 | e }));
            rd.extend_from_slice(&(((1i64 << 31) + lat) as u32).to_be_bytes());
            rd.extend_from_slice(&(((1i64 << 31) + lon) as u32).to_be_bytes());
            rd.extend_from_slice(&alt.to_be_bytes());
            prop_assert!(!show(t::LOC, &rd).starts_with('\\'));
            round_trip(t::LOC, &rd)?;
        }

        #[test]
        fn svcb_round_trip(
            prio in any::<u16>(),
            target in name(),
            alpn in strings(1..4),
            port in proptest::option::of(any::<u16>()),
            v4 in prop::collection::vec(any::<[u8; 4]>(), 0..3),
            v6 in prop::collection::vec(any::<[u8; 16]>(), 0..3),
            ech in proptest::option::of(prop::collection::vec(any::<u8>(), 0..30)),
            unknown in prop::collection::btree_map(13u16.., prop::collection::vec(any::<u8>(), 0..20), 0..3),
            mandatory in any::<bool>(),
        ) {
            let mut params: Vec<(u16, Vec<u8>)> = Vec::new();
            let alpn: Vec<Vec<u8>> = alpn.into_iter().filter(|a| !a.is_empty()).collect();
            if !alpn.is_empty() {
                params.push((1, alpn.iter().flat_map(|a| cat(&[&[a.len() as u8], a])).collect()));
                params.push((2, vec![]));
            }
            if let Some(p) = port { params.push((3, p.to_be_bytes().to_vec())); }
            if !v4.is_empty() { params.push((4, v4.concat())); }
            if let Some(e) = ech { params.push((5, e)); }
            if !v6.is_empty() { params.push((6, v6.concat())); }
            params.extend(unknown);
            if mandatory && params.len() > 1 {
                let keys: Vec<u8> = params.iter().skip(1).flat_map(|(k, _)| k.to_be_bytes()).collect();
                params.insert(0, (0, keys));
            }
            let mut rd = cat(&[&prio.to_be_bytes(), &target]);
            for (k, v) in &params {
                rd.extend_from_slice(&k.to_be_bytes());
                rd.extend_from_slice(&(v.len() as u16).to_be_bytes());
                rd.extend_from_slice(v);
            }
            prop_assert_eq!(check_wire(t::SVCB, &rd), Ok(()));
            round_trip(t::SVCB, &rd)?;
            round_trip(t::HTTPS, &rd)?;
        }

        #[test]
        fn apl_hip_ipseckey_round_trip(
            items in prop::collection::vec((any::<bool>(), any::<bool>(), prop::collection::vec(1u8.., 0..16), any::<u8>()), 0..4),
            hit in prop::collection::vec(any::<u8>(), 1..20),
            pk in prop::collection::vec(any::<u8>(), 1..40),
            rvs in prop::collection::vec(name(), 0..3),
            gw in name(),
        ) {
            let mut apl = Vec::new();
            for (v6, neg, addr, prefix) in &items {
                let (fam, max) = if *v6 { (2u16, 16) } else { (1, 4) };
                let a = &addr[..addr.len().min(max)];
                apl.extend_from_slice(&fam.to_be_bytes());
                apl.push(prefix % if *v6 { 129 } else { 33 });
                apl.push((*neg as u8) << 7 | a.len() as u8);
                apl.extend_from_slice(a);
            }
            round_trip(t::APL, &apl)?;
            let mut hip = vec![hit.len() as u8, 2];
            hip.extend_from_slice(&(pk.len() as u16).to_be_bytes());
            hip.extend_from_slice(&hit);
            hip.extend_from_slice(&pk);
            hip.extend(rvs.concat());
            round_trip(t::HIP, &hip)?;
            round_trip(t::IPSECKEY, &cat(&[&[1, 3, 2], &gw, &pk]))?;
            round_trip(t::IPSECKEY, &cat(&[&[1, 0, 0]]))?;
            round_trip(t::AMTRELAY, &cat(&[&[1, 0x83], &gw]))?;
        }

        /// Arbitrary octets as RDATA of every known type: no panic anywhere, and whatever
        /// check_wire accepts prints as text that reads back the same.
        #[test]
        fn any_octets_any_type(rtype in prop::sample::select(crate::rrtype::TYPES.iter().map(|&(c, _)| c).collect::<Vec<_>>()), rd in prop::collection::vec(any::<u8>(), 0..48)) {
            let mut s = String::new();
            present(rtype, &rd, &mut s);
            names(rtype, &rd, &mut |r| assert!(r.offset + r.len <= rd.len()));
            let mut c = rd.clone();
            to_canonical(rtype, &mut c);
            if check_wire(rtype, &rd).is_ok() {
                round_trip(rtype, &rd)?;
            }
        }

        /// Valid RDATA of every irregular type, mutated: no panic, and whatever check_wire
        /// accepts round-trips.
        #[test]
        fn mutated_rdata(
            seed in 0..SEEDS.len(),
            sets in prop::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 0..4),
            cut in proptest::option::of(any::<prop::sample::Index>()),
            tail in prop::collection::vec(any::<u8>(), 0..6),
        ) {
            let (rtype, text) = SEEDS[seed];
            let mut rd = parse_text(rtype, text).map_err(|e| TestCaseError::fail(format!("{text}: {}", e.msg)))?;
            for (i, b) in sets {
                let i = i.index(rd.len().max(1));
                if let Some(x) = rd.get_mut(i) { *x = b; }
            }
            if let Some(c) = cut { rd.truncate(c.index(rd.len() + 1)); }
            rd.extend(tail);
            let mut s = String::new();
            present(rtype, &rd, &mut s);
            names(rtype, &rd, &mut |r| assert!(r.offset + r.len <= rd.len()));
            to_canonical(rtype, &mut rd.clone());
            if check_wire(rtype, &rd).is_ok() {
                round_trip(rtype, &rd)?;
            }
        }

        /// Arbitrary token soup as text of every known type: no panic, and what is accepted
        /// passes check_wire and round-trips.
        #[test]
        fn any_text_any_type(
            rtype in prop::sample::select(crate::rrtype::TYPES.iter().map(|&(c, _)| c).collect::<Vec<_>>()),
            toks in prop::collection::vec(prop::sample::select(vec![
                "0", "1", "255", "65535", "4294967296", "-", ".", "@", "a", "A", "NS", "TYPE65535",
                "\\#", "2", "00", "0x00", "AA==", "Zm9v", "=", "\\", "\\0", "\\255", "\\\\", "\"q \\\" q\"",
                "1.2.3.4", "::1", "N", "S", "E", "W", "10m", "0.5", "1:1.2.3.4/32", "!2:::/0",
                "alpn=h2", "mandatory=alpn", "port=53", "key65535", "ech", "dohpath=/{?dns}", "no-default-alpn",
                "ipv4hint=1.2.3.4", "00-00-00-00-00-00", "0:0:0:0", "20260101000000", "NOTIFY", "PKIX",
                "issue", "\"\"", "x.y.", "CPNMUOJ1", "+1.2", "tcp", "ntp", "RSASHA256",
            ]), 0..9),
        ) {
            let text = toks.join(" ");
            if let Ok(rd) = parse_text(rtype, &text) {
                prop_assert_eq!(check_wire(rtype, &rd), Ok(()));
                round_trip(rtype, &rd)?;
            }
        }
    }
}
