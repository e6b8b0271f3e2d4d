//! RDATA: presentation text to wire format and back, per type.
//!
//! RDATA is always kept in uncompressed wire format. This module reads it from the tokens
//! of a master-file entry (the type-specific text form or the RFC 3597 generic form
//! `\# LEN HEX`), checks wire RDATA of known types, prints it back, and tells where the
//! domain names inside RDATA are (for compression, additional-section processing and the
//! canonical form of RFC 4034 §6.2).

use crate::scan::{Scanner, Tok};

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
        Fields { scanner, toks, i: 0 }
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
        let t = self
            .toks
            .get(self.i)
            .or_else(|| self.toks.last())
            .copied();
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

// ---- Interim implementation: the generic form and a handful of types. --------------------
// (Replaced by the complete per-type tables.)

use crate::name::NameBuf;
use crate::rrtype::t;

fn err(f: &Fields<'_>, msg: impl Into<String>) -> RdataError {
    let (line, col) = f.pos();
    RdataError {
        line,
        col,
        msg: msg.into(),
    }
}

/// Reads the RDATA of type `rtype` from `fields` (text or `\#` generic form) into `out`.
pub fn parse(
    rtype: u16,
    fields: &mut Fields<'_>,
    origin: &[u8],
    out: &mut Vec<u8>,
) -> Result<(), RdataError> {
    if let Some(f) = fields.peek()
        && f.text == b"\\#"
        && !f.quoted
    {
        fields.next();
        let len = fields
            .next()
            .and_then(|f| std::str::from_utf8(f.text).ok()?.parse::<usize>().ok())
            .ok_or_else(|| err(fields, "expected RDATA length after \\#"))?;
        let start = out.len();
        while let Some(f) = fields.next() {
            if f.text.len() % 2 != 0 {
                return Err(err(fields, "odd number of hex digits"));
            }
            for p in f.text.chunks(2) {
                let s = std::str::from_utf8(p).map_err(|_| err(fields, "bad hex"))?;
                out.push(u8::from_str_radix(s, 16).map_err(|_| err(fields, "bad hex"))?);
            }
        }
        if out.len() - start != len {
            return Err(err(fields, "RDATA length does not match \\# length"));
        }
        return check_wire(rtype, &out[start..]).map_err(|m| err(fields, m));
    }
    let mut nb = NameBuf::new();
    let mut name = |fields: &mut Fields<'_>, out: &mut Vec<u8>| -> Result<(), RdataError> {
        let f = fields.next().ok_or_else(|| err(fields, "expected a domain name"))?;
        nb.parse(f.text, Some(origin))
            .map_err(|e| err(fields, e.to_string()))?;
        out.extend_from_slice(nb.as_wire());
        Ok(())
    };
    let num = |fields: &mut Fields<'_>| -> Result<u64, RdataError> {
        let f = fields.next().ok_or_else(|| err(fields, "expected a number"))?;
        crate::text::parse_u64(f.text).ok_or_else(|| err(fields, "expected a number"))
    };
    match rtype {
        t::A => {
            let f = fields.next().ok_or_else(|| err(fields, "expected an IPv4 address"))?;
            let a: std::net::Ipv4Addr = std::str::from_utf8(f.text)
                .ok()
                .and_then(|s| s.parse().ok())
                .ok_or_else(|| err(fields, "expected an IPv4 address"))?;
            out.extend_from_slice(&a.octets());
        }
        t::AAAA => {
            let f = fields.next().ok_or_else(|| err(fields, "expected an IPv6 address"))?;
            let a: std::net::Ipv6Addr = std::str::from_utf8(f.text)
                .ok()
                .and_then(|s| s.parse().ok())
                .ok_or_else(|| err(fields, "expected an IPv6 address"))?;
            out.extend_from_slice(&a.octets());
        }
        t::NS | t::CNAME | t::DNAME | t::PTR => name(fields, out)?,
        t::MX => {
            let p = num(fields)?;
            out.extend_from_slice(&(p as u16).to_be_bytes());
            name(fields, out)?;
        }
        t::SOA => {
            name(fields, out)?;
            name(fields, out)?;
            for _ in 0..5 {
                let f = fields.next().ok_or_else(|| err(fields, "expected a number"))?;
                let v = crate::text::parse_ttl(f.text).map_err(|m| err(fields, m))?;
                out.extend_from_slice(&v.to_be_bytes());
            }
        }
        t::TXT => {
            while let Some(f) = fields.next() {
                out.push(f.text.len() as u8);
                out.extend_from_slice(f.text);
            }
        }
        _ => return Err(err(fields, "type not supported in text form yet")),
    }
    if !fields.is_empty() {
        return Err(err(fields, "unexpected data after RDATA"));
    }
    Ok(())
}

/// Checks wire RDATA of a known type; unknown types are opaque and always pass.
pub fn check_wire(rtype: u16, rdata: &[u8]) -> Result<(), String> {
    match rtype {
        t::A if rdata.len() != 4 => Err("A RDATA must be 4 octets".into()),
        t::AAAA if rdata.len() != 16 => Err("AAAA RDATA must be 16 octets".into()),
        _ => Ok(()),
    }
}

/// Writes RDATA in presentation format (the generic form when it cannot be read).
pub fn present(rtype: u16, rdata: &[u8], out: &mut String) {
    use std::fmt::Write;
    let _ = rtype;
    let _ = write!(out, "\\# {}", rdata.len());
    if !rdata.is_empty() {
        out.push(' ');
        for b in rdata {
            let _ = write!(out, "{b:02x}");
        }
    }
}

/// Calls `f` for each domain name inside RDATA of type `rtype`.
pub fn names(rtype: u16, rdata: &[u8], f: &mut dyn FnMut(NameRef)) {
    let at = |off: usize, compress, additional| {
        crate::name::wire_name_len(&rdata[off..]).map(|len| NameRef {
            offset: off,
            len,
            compress,
            additional,
            canonical_lower: true,
        })
    };
    match rtype {
        t::NS => at(0, true, true).into_iter().for_each(&mut *f),
        t::CNAME | t::PTR => at(0, true, false).into_iter().for_each(&mut *f),
        t::DNAME => at(0, false, false).into_iter().for_each(&mut *f),
        t::MX if rdata.len() > 2 => at(2, true, true).into_iter().for_each(&mut *f),
        t::SOA => {
            if let Some(a) = at(0, true, false) {
                let o = a.len;
                f(a);
                if let Some(b) = at(o, true, false) {
                    f(b);
                }
            }
        }
        _ => {}
    }
}

/// Lower-cases the names that RFC 4034 §6.2 (as updated by RFC 6840) puts in canonical form.
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
