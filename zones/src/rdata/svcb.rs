//! SVCB and HTTPS (RFC 9460): priority, target and SvcParams, with every registered key.
//!
//! Keys: mandatory, alpn, no-default-alpn, port, ipv4hint, ech, ipv6hint (RFC 9460),
//! dohpath (RFC 9461), ohttp (RFC 9540), tls-supported-groups, docpath, pvd, oots, and
//! `keyNNNNN` for the rest. Values are checked on the wire form, so `\#` input meets the
//! same rules as text: keys strictly ascending and unique, values well formed, every key
//! named by `mandatory` present, and `no-default-alpn` only beside `alpn` (RFC 9460 §7.1.1
//! self-consistency, as BIND and simdzone enforce).

use std::fmt::Write;

use super::codec;
use super::codec::bad;
use super::field::{N_PLAIN_ADD, name, number, wire_name, write_name};
use super::{Fields, NameRef, RdataError};

const MANDATORY: u16 = 0;
const ALPN: u16 = 1;
const NO_DEFAULT_ALPN: u16 = 2;
const PORT: u16 = 3;
const IPV4HINT: u16 = 4;
const ECH: u16 = 5;
const IPV6HINT: u16 = 6;
const DOHPATH: u16 = 7;
const OHTTP: u16 = 8;
const TLS_GROUPS: u16 = 9;
const DOCPATH: u16 = 10;
const PVD: u16 = 11;
const OOTS: u16 = 12;

const KEYS: &[(u16, &str)] = &[
    (MANDATORY, "mandatory"),
    (ALPN, "alpn"),
    (NO_DEFAULT_ALPN, "no-default-alpn"),
    (PORT, "port"),
    (IPV4HINT, "ipv4hint"),
    (ECH, "ech"),
    (IPV6HINT, "ipv6hint"),
    (DOHPATH, "dohpath"),
    (OHTTP, "ohttp"),
    (TLS_GROUPS, "tls-supported-groups"),
    (DOCPATH, "docpath"),
    (PVD, "pvd"),
    (OOTS, "oots"),
];

/// Reads a key name: a registered name (exact case), `echconfig` (the draft name of ech,
/// still found in zones), or `keyNNNNN` without leading zeros. Also says whether the
/// generic `keyNNNNN` form was used.
fn key_from_text(s: &[u8]) -> Option<(u16, bool)> {
    if let Some(&(k, _)) = KEYS.iter().find(|(_, n)| n.as_bytes() == s) {
        return Some((k, false));
    }
    if s == b"echconfig" {
        return Some((ECH, false));
    }
    let digits = s.strip_prefix(b"key")?;
    if digits.is_empty() || digits.len() > 5 || (digits.len() > 1 && digits[0] == b'0') {
        return None;
    }
    Some((codec::uint(digits, 65535)? as u16, true))
}

fn write_key(k: u16, out: &mut String) {
    match KEYS.iter().find(|&&(c, _)| c == k) {
        Some((_, n)) => out.push_str(n),
        None => {
            let _ = write!(out, "key{k}");
        }
    }
}

/// Splits a decoded value-list (RFC 9460 Appendix A.1): items are separated by commas, and
/// inside an item `\,` and `\\` stand for a comma and a backslash. Items must be non-empty.
fn value_list(v: &[u8]) -> Result<Vec<Vec<u8>>, String> {
    let mut items = Vec::new();
    let mut cur = Vec::new();
    let mut i = 0;
    while i < v.len() {
        match v[i] {
            b'\\' => match v.get(i + 1) {
                Some(&c @ (b',' | b'\\')) => {
                    cur.push(c);
                    i += 2;
                }
                _ => return Err("in a value list only \\, and \\\\ may be escaped".into()),
            },
            b',' => {
                if cur.is_empty() {
                    return Err("empty item in value list".into());
                }
                items.push(std::mem::take(&mut cur));
                i += 1;
            }
            c => {
                cur.push(c);
                i += 1;
            }
        }
    }
    if cur.is_empty() {
        return Err("empty item in value list".into());
    }
    items.push(cur);
    Ok(items)
}

/// Writes items as a quoted value-list.
fn write_value_list<'a>(items: impl Iterator<Item = &'a [u8]>, out: &mut String) {
    let mut raw = Vec::new();
    for (i, it) in items.enumerate() {
        if i > 0 {
            raw.push(b',');
        }
        for &c in it {
            if c == b',' || c == b'\\' {
                raw.push(b'\\');
            }
            raw.push(c);
        }
    }
    codec::write_quoted(&raw, out);
}

/// Length-prefixed items (alpn, docpath) of a wire value.
fn items(v: &[u8]) -> Result<Vec<&[u8]>, String> {
    let mut out = Vec::new();
    let mut i = 0;
    while i < v.len() {
        let n = v[i] as usize;
        if n == 0 {
            return Err("empty item".into());
        }
        out.push(v.get(i + 1..i + 1 + n).ok_or("truncated item")?);
        i += 1 + n;
    }
    Ok(out)
}

fn is_varchar_start(b: &[u8], i: usize) -> Option<usize> {
    match b.get(i)? {
        c if c.is_ascii_alphanumeric() || *c == b'_' => Some(1),
        b'%' if b.get(i + 1..i + 3)?.iter().all(u8::is_ascii_hexdigit) => Some(3),
        _ => None,
    }
}

/// Checks one varspec of a URI template expression; true when it is the `dns` variable.
fn varspec(v: &[u8]) -> Result<bool, &'static str> {
    let (name, modifier) = match v.iter().position(|&c| c == b':') {
        Some(p) => (&v[..p], Some(&v[p + 1..])),
        None => match v.strip_suffix(b"*") {
            Some(n) => (n, None),
            None => (v, None),
        },
    };
    if let Some(m) = modifier {
        let ok = !m.is_empty() && m.len() <= 4 && m[0] != b'0' && m.iter().all(u8::is_ascii_digit);
        if !ok {
            return Err("bad max-length in dohpath template (1-9999)");
        }
    }
    // varname = varchar *( ["."] varchar )
    let mut i = 0;
    let mut need_char = true;
    while i < name.len() {
        if !need_char && name[i] == b'.' {
            need_char = true;
            i += 1;
            continue;
        }
        let n = is_varchar_start(name, i).ok_or("bad variable name in dohpath template")?;
        i += n;
        need_char = false;
    }
    if need_char {
        return Err("bad variable name in dohpath template");
    }
    Ok(name == b"dns")
}

/// Checks a dohpath value (RFC 9461 §5): UTF-8, a relative URI template (RFC 6570) starting
/// with `/`, using the `dns` variable.
fn check_dohpath(v: &[u8]) -> Result<(), &'static str> {
    std::str::from_utf8(v).map_err(|_| "dohpath must be UTF-8")?;
    if v.first() != Some(&b'/') {
        return Err("dohpath must be a relative URI template starting with /");
    }
    let mut has_dns = false;
    let mut i = 0;
    while i < v.len() {
        match v[i] {
            b'{' => {
                let end = v[i..]
                    .iter()
                    .position(|&c| c == b'}')
                    .map(|p| i + p)
                    .ok_or("unterminated expression in dohpath template")?;
                let mut e = &v[i + 1..end];
                match e.first() {
                    Some(b'+' | b'#' | b'.' | b'/' | b';' | b'?' | b'&') => e = &e[1..],
                    Some(b'=' | b',' | b'!' | b'@' | b'|') => {
                        return Err("reserved operator in dohpath template");
                    }
                    _ => {}
                }
                for spec in e.split(|&c| c == b',') {
                    has_dns |= varspec(spec)?;
                }
                i = end + 1;
            }
            b'%' => {
                let ok = v
                    .get(i + 1..i + 3)
                    .is_some_and(|h| h.iter().all(u8::is_ascii_hexdigit));
                if !ok {
                    return Err("bad percent-encoding in dohpath");
                }
                i += 3;
            }
            0..=0x20 | 0x7f | b'"' | b'\'' | b'<' | b'>' | b'\\' | b'^' | b'`' | b'|' | b'}' => {
                return Err("character not allowed in a URI template");
            }
            _ => i += 1,
        }
    }
    if !has_dns {
        return Err("dohpath template must use the dns variable");
    }
    Ok(())
}

fn need(v: Option<&[u8]>) -> Result<&[u8], String> {
    v.ok_or_else(|| "this key needs a value".to_string())
}

/// Turns a key's text value into its wire value. `v` is `None` when no value was given.
fn value_to_wire(key: u16, v: Option<&[u8]>) -> Result<Vec<u8>, String> {
    let mut out = Vec::new();
    match key {
        MANDATORY => {
            let mut keys = Vec::new();
            for it in value_list(need(v)?)? {
                let (k, _) = key_from_text(&it).ok_or("unknown key in mandatory list")?;
                if k == MANDATORY {
                    return Err("mandatory may not list itself".into());
                }
                keys.push(k);
            }
            keys.sort_unstable();
            if keys.windows(2).any(|w| w[0] == w[1]) {
                return Err("key listed twice in mandatory".into());
            }
            keys.iter()
                .for_each(|k| out.extend_from_slice(&k.to_be_bytes()));
        }
        ALPN | DOCPATH => {
            let Some(v) = v else {
                if key == DOCPATH {
                    return Ok(out);
                }
                return Err("alpn needs a value".into());
            };
            for it in value_list(v)? {
                if it.len() > 255 {
                    return Err("item longer than 255 octets".into());
                }
                out.push(it.len() as u8);
                out.extend_from_slice(&it);
            }
        }
        NO_DEFAULT_ALPN | OHTTP | PVD => {
            if v.is_some() {
                return Err("this key takes no value".into());
            }
        }
        PORT => {
            let p = codec::uint(need(v)?, 65535).ok_or("port must be a number 0-65535")?;
            out.extend_from_slice(&(p as u16).to_be_bytes());
        }
        IPV4HINT => {
            for a in need(v)?.split(|&c| c == b',') {
                out.extend_from_slice(&codec::ipv4(a).ok_or("bad IPv4 address in ipv4hint")?);
            }
        }
        IPV6HINT => {
            for a in need(v)?.split(|&c| c == b',') {
                out.extend_from_slice(&codec::ipv6(a).ok_or("bad IPv6 address in ipv6hint")?);
            }
        }
        ECH => {
            if let Some(v) = v {
                codec::base64_token_into(v, &mut out).map_err(String::from)?;
            }
        }
        DOHPATH => {
            let v = need(v)?;
            check_dohpath(v)?;
            out.extend_from_slice(v);
        }
        TLS_GROUPS => {
            for g in need(v)?.split(|&c| c == b',') {
                let g = codec::uint(g, 65535)
                    .ok_or("tls-supported-groups items are numbers 0-65535")?;
                out.extend_from_slice(&(g as u16).to_be_bytes());
            }
        }
        OOTS => {
            for it in value_list(need(v)?)? {
                let p = it
                    .iter()
                    .rposition(|&c| c == b':')
                    .ok_or("oots items are transport:percentage")?;
                let (t, pct) = (&it[..p], &it[p + 1..]);
                let pct = codec::uint(pct, 100).ok_or("oots percentage must be 0-100")?;
                if t.is_empty() || t.len() > 255 {
                    return Err("oots transport must be 1-255 octets".into());
                }
                out.push(t.len() as u8);
                out.extend_from_slice(t);
                out.push(pct as u8);
            }
        }
        _ => {
            if let Some(v) = v {
                out.extend_from_slice(v);
            }
        }
    }
    if out.len() > 65535 {
        return Err("value longer than 65535 octets".into());
    }
    Ok(out)
}

/// Reads `priority target [key[=value]...]`.
pub(crate) fn parse(
    fields: &mut Fields<'_>,
    origin: &[u8],
    out: &mut Vec<u8>,
) -> Result<(), RdataError> {
    out.extend_from_slice(&(number(fields, "a priority", 65535)? as u16).to_be_bytes());
    name(fields, origin, out)?;
    let mut params: Vec<(u16, Vec<u8>, super::Field<'_>)> = Vec::new();
    let mut buf = Vec::new();
    while let Some(f) = fields.next() {
        if f.quoted {
            return Err(bad(&f, "expected a SvcParam key, not a quoted string"));
        }
        let (key_text, eq, mut raw) = match f.text.iter().position(|&c| c == b'=') {
            Some(p) => (&f.text[..p], true, &f.text[p + 1..]),
            None => (f.text, false, &[][..]),
        };
        let (key, generic) = key_from_text(key_text).ok_or_else(|| {
            bad(
                &f,
                "unknown SvcParam key (use keyNNNNN for unregistered keys)",
            )
        })?;
        if eq
            && raw.is_empty()
            && let Some(n) = fields.peek()
            && n.quoted
            && n.line == f.line
            && n.col as usize == f.col as usize + f.text.len()
        {
            raw = n.text;
            fields.next();
        }
        let value = if eq {
            buf.clear();
            codec::unescape_into(raw, &mut buf).map_err(|m| bad(&f, m))?;
            if buf.is_empty() {
                if !generic {
                    return Err(bad(&f, "missing value after ="));
                }
                None
            } else {
                Some(&buf[..])
            }
        } else {
            None
        };
        let wire = if generic {
            // RFC 9460 §2.1: a value written under `keyNNNNN` is a char-string whose bytes
            // are the wire value, for a registered key too (as Knot reads it); it must then be
            // a sound wire value of that key.
            let wire = value.map(<[u8]>::to_vec).unwrap_or_default();
            check_value(key, &wire)
                .map_err(|m| bad(&f, format!("bad key{key} (the wire value of its key): {m}")))?;
            wire
        } else {
            value_to_wire(key, value).map_err(|m| {
                let mut k = String::new();
                write_key(key, &mut k);
                bad(&f, format!("bad {k}: {m}"))
            })?
        };
        params.push((key, wire, f));
    }
    // Stable, so the second of two equal keys is the one reported.
    params.sort_by_key(|(k, _, _)| *k);
    if let Some(w) = params.windows(2).find(|w| w[0].0 == w[1].0) {
        return Err(bad(&w[1].2, "SvcParam key given twice"));
    }
    for (k, v, _) in &params {
        out.extend_from_slice(&k.to_be_bytes());
        out.extend_from_slice(&(v.len() as u16).to_be_bytes());
        out.extend_from_slice(v);
    }
    Ok(())
}

/// Walks the SvcParams after the target: (key, value) pairs, or an error.
fn params(r: &[u8]) -> Result<Vec<(u16, &[u8])>, String> {
    let mut p = 2 + wire_name(r, 2)?;
    let mut out: Vec<(u16, &[u8])> = Vec::new();
    while p < r.len() {
        let h = r.get(p..p + 4).ok_or("truncated SvcParam")?;
        let key = u16::from_be_bytes([h[0], h[1]]);
        let len = u16::from_be_bytes([h[2], h[3]]) as usize;
        let v = r
            .get(p + 4..p + 4 + len)
            .ok_or("truncated SvcParam value")?;
        if out.last().is_some_and(|&(k, _)| k >= key) {
            return Err("SvcParam keys not in strictly ascending order".into());
        }
        out.push((key, v));
        p += 4 + len;
    }
    Ok(out)
}

fn check_value(key: u16, v: &[u8]) -> Result<(), String> {
    match key {
        MANDATORY => {
            if v.is_empty() || !v.len().is_multiple_of(2) {
                return Err("mandatory must list keys".into());
            }
            let keys: Vec<u16> = v
                .chunks(2)
                .map(|c| u16::from_be_bytes([c[0], c[1]]))
                .collect();
            if keys[0] == MANDATORY || keys.windows(2).any(|w| w[0] >= w[1]) {
                return Err("mandatory keys must be ascending, unique, and not mandatory".into());
            }
        }
        ALPN if items(v)?.is_empty() => return Err("alpn needs at least one protocol".into()),
        DOCPATH => {
            items(v)?;
        }
        NO_DEFAULT_ALPN | OHTTP | PVD if !v.is_empty() => {
            return Err("key takes no value".into());
        }
        PORT if v.len() != 2 => return Err("port must be 2 octets".into()),
        IPV4HINT | IPV6HINT => {
            let n = if key == IPV4HINT { 4 } else { 16 };
            if v.is_empty() || !v.len().is_multiple_of(n) {
                return Err("address hints must be whole addresses".into());
            }
        }
        DOHPATH => check_dohpath(v)?,
        TLS_GROUPS => {
            if v.is_empty() || !v.len().is_multiple_of(2) {
                return Err("tls-supported-groups must list 16-bit groups".into());
            }
            let mut g: Vec<&[u8]> = v.chunks(2).collect();
            g.sort_unstable();
            if g.windows(2).any(|w| w[0] == w[1]) {
                return Err("tls-supported-groups lists a group twice".into());
            }
        }
        OOTS => {
            let mut seen: Vec<&[u8]> = Vec::new();
            let mut i = 0;
            while i < v.len() {
                let n = v[i] as usize;
                let t = v.get(i + 1..i + 1 + n).ok_or("truncated oots item")?;
                let pct = *v.get(i + 1 + n).ok_or("truncated oots item")?;
                if n == 0 || pct > 100 {
                    return Err("oots items need a transport and a percentage 0-100".into());
                }
                seen.push(t);
                i += 2 + n;
            }
            if seen.is_empty() {
                return Err("oots needs at least one transport".into());
            }
            seen.sort_unstable();
            if seen.windows(2).any(|w| w[0] == w[1]) {
                return Err("oots transports must be unique".into());
            }
        }
        _ => {}
    }
    Ok(())
}

/// Checks SVCB/HTTPS RDATA's structure: a target name, then SvcParams in ascending key order
/// whose lengths stay within the RDATA.
pub(crate) fn check_structure(r: &[u8]) -> Result<(), String> {
    if r.len() < 3 {
        return Err("RDATA too short".into());
    }
    params(r).map(|_| ())
}

/// Checks SVCB/HTTPS RDATA, SvcParam rules included.
pub(crate) fn check(r: &[u8]) -> Result<(), String> {
    if r.len() < 3 {
        return Err("RDATA too short".into());
    }
    let ps = params(r)?;
    for &(k, v) in &ps {
        check_value(k, v).map_err(|m| {
            let mut s = String::new();
            write_key(k, &mut s);
            format!("{s}: {m}")
        })?;
    }
    let has = |key: u16| ps.iter().any(|&(k, _)| k == key);
    if let Some(&(_, m)) = ps.iter().find(|&&(k, _)| k == MANDATORY) {
        for c in m.chunks(2) {
            let k = u16::from_be_bytes([c[0], c[1]]);
            if !has(k) {
                let mut s = String::new();
                write_key(k, &mut s);
                return Err(format!("mandatory lists {s}, which is not present"));
            }
        }
    }
    if has(NO_DEFAULT_ALPN) && !has(ALPN) {
        return Err("no-default-alpn without alpn (RFC 9460 §7.1.1)".into());
    }
    Ok(())
}

/// Writes checked SVCB/HTTPS RDATA.
pub(crate) fn present(r: &[u8], out: &mut String) -> bool {
    let Ok(ps) = params(r) else {
        return false;
    };
    let _ = write!(out, "{} ", u16::from_be_bytes([r[0], r[1]]));
    write_name(r, 2, out);
    for (k, v) in ps {
        out.push(' ');
        write_key(k, out);
        if v.is_empty() {
            continue;
        }
        out.push('=');
        match k {
            MANDATORY => {
                for (i, c) in v.chunks(2).enumerate() {
                    if i > 0 {
                        out.push(',');
                    }
                    write_key(u16::from_be_bytes([c[0], c[1]]), out);
                }
            }
            ALPN | DOCPATH => match items(v) {
                Ok(it) => write_value_list(it.into_iter(), out),
                Err(_) => return false,
            },
            PORT => {
                let _ = write!(out, "{}", u16::from_be_bytes([v[0], v[1]]));
            }
            IPV4HINT | IPV6HINT => {
                let n = if k == IPV4HINT { 4 } else { 16 };
                for (i, a) in v.chunks(n).enumerate() {
                    if i > 0 {
                        out.push(',');
                    }
                    if n == 4 {
                        codec::write_ipv4(a, out);
                    } else {
                        codec::write_ipv6(a, out);
                    }
                }
            }
            ECH => codec::write_base64(v, out),
            TLS_GROUPS => {
                for (i, g) in v.chunks(2).enumerate() {
                    if i > 0 {
                        out.push(',');
                    }
                    let _ = write!(out, "{}", u16::from_be_bytes([g[0], g[1]]));
                }
            }
            OOTS => {
                let mut it: Vec<Vec<u8>> = Vec::new();
                let mut i = 0;
                while i < v.len() {
                    let n = v[i] as usize;
                    let mut item = v[i + 1..i + 1 + n].to_vec();
                    item.extend_from_slice(format!(":{}", v[i + 1 + n]).as_bytes());
                    it.push(item);
                    i += 2 + n;
                }
                write_value_list(it.iter().map(|x| &x[..]), out);
            }
            _ => codec::write_quoted(v, out),
        }
    }
    true
}

/// The target name (its addresses go in the additional section).
pub(crate) fn names(r: &[u8], f: &mut dyn FnMut(NameRef)) {
    if let Ok(len) = wire_name(r, 2) {
        f(NameRef {
            offset: 2,
            len,
            compress: N_PLAIN_ADD.compress,
            additional: N_PLAIN_ADD.additional,
            canonical_lower: N_PLAIN_ADD.lower,
        });
    }
}

#[cfg(test)]
mod tests {
    use super::super::testutil::{case, parse_text, refused, show};
    use crate::rrtype::t;

    #[test]
    fn rfc9460_appendix_d() {
        case(
            t::SVCB,
            "0 foo.example.com.",
            "000003666f6f076578616d706c6503636f6d00",
            "0 foo.example.com.",
        );
        case(
            t::SVCB,
            "16 foo.example.com. port=53",
            "001003666f6f076578616d706c6503636f6d00000300020035",
            "16 foo.example.com. port=53",
        );
        case(
            t::SVCB,
            "1 foo.example.com. key667=\"hello\\210qoo\"",
            "000103666f6f076578616d706c6503636f6d00029b000968656c6c6fd2716f6f",
            "1 foo.example.com. key667=\"hello\\210qoo\"",
        );
        case(
            t::SVCB,
            "1 . ipv6hint=\"2001:db8::1,2001:db8::53:1\"",
            "00010000060020 20010db8000000000000000000000001 20010db8000000000000000000530001"
                .replace(' ', "")
                .as_str(),
            "1 . ipv6hint=2001:db8::1,2001:db8::53:1",
        );
        case(
            t::SVCB,
            "16 . alpn=h2,h3-19 mandatory=ipv4hint,alpn ipv4hint=192.0.2.1",
            "0010 00 0000 0004 00010004 0001 0009 0268320568332d3139 0004 0004 c0000201"
                .replace(' ', "")
                .as_str(),
            "16 . mandatory=alpn,ipv4hint alpn=\"h2,h3-19\" ipv4hint=192.0.2.1",
        );
        let a = parse_text(t::SVCB, "16 . alpn=\"f\\\\\\\\oo\\\\,bar,h2\"").unwrap();
        let b = parse_text(t::SVCB, "16 . alpn=f\\\\\\092oo\\092,bar,h2").unwrap();
        assert_eq!(a, b);
        assert_eq!(&a[3..], b"\x00\x01\x00\x0c\x08f\\oo,bar\x02h2");
        assert_eq!(show(t::SVCB, &a), "16 . alpn=\"f\\\\\\\\oo\\\\,bar,h2\"");
    }

    #[test]
    fn newer_keys() {
        case(
            t::HTTPS,
            "1 . alpn=h2 ohttp",
            "000100 0001000302683200080000".replace(' ', "").as_str(),
            "1 . alpn=\"h2\" ohttp",
        );
        case(
            t::SVCB,
            "1 . dohpath=/q{?dns}",
            "000100 0007 0008 2f717b3f646e737d"
                .replace(' ', "")
                .as_str(),
            "1 . dohpath=\"/q{?dns}\"",
        );
        case(
            t::SVCB,
            "3 . tls-supported-groups=29,23",
            "000300 0009 0004 001d0017".replace(' ', "").as_str(),
            "3 . tls-supported-groups=29,23",
        );
        case(
            t::SVCB,
            "1 . alpn=co docpath=n,s",
            "000100 0001000302636f 000a0004016e0173"
                .replace(' ', "")
                .as_str(),
            "1 . alpn=\"co\" docpath=\"n,s\"",
        );
        case(t::SVCB, "1 . docpath", "000100000a0000", "1 . docpath");
        case(
            t::HTTPS,
            "1 . alpn=h3 pvd",
            "000100 000100030268 33 000b0000".replace(' ', "").as_str(),
            "1 . alpn=\"h3\" pvd",
        );
        case(
            t::SVCB,
            "1 . oots=\"do53:100,dot:10\"",
            "000100000c000b04646f35336403646f740a",
            "1 . oots=\"do53:100,dot:10\"",
        );
        case(t::SVCB, "0 . ech", "00000000050000", "0 . ech");
        case(
            t::SVCB,
            "0 . echconfig=aGVsbG8=",
            "000000000500 0568656c6c6f".replace(' ', "").as_str(),
            "0 . ech=aGVsbG8=",
        );
        case(
            t::SVCB,
            "1 . key65535 key11=",
            "000100 000b0000 ffff0000".replace(' ', "").as_str(),
            "1 . pvd key65535",
        );
        // A registered key written as keyNNNNN: its value is the wire value (RFC 9460 §2.1).
        case(
            t::SVCB,
            "1 . key1=\\002h2 key3=\\001\\187",
            "000100 0001000302 6832 00030002 01bb"
                .replace(' ', "")
                .as_str(),
            "1 . alpn=\"h2\" port=443",
        );
    }

    #[test]
    fn refusals() {
        for (text, why) in [
            ("1 . key123=abc key123=def", "twice"),
            ("1 . mandatory", "needs a value"),
            ("1 . alpn", "needs a value"),
            ("1 . alpn=", "missing value"),
            ("1 . alpn=a,", "empty item"),
            ("1 . alpn=a\\\\b", "may be escaped"),
            ("1 . port", "needs a value"),
            ("1 . port=65536", "0-65535"),
            ("1 . port=1,2", "0-65535"),
            ("1 . ipv4hint=1.2.3.4,", "IPv4"),
            ("1 . ipv6hint=::1,,::2", "IPv6"),
            ("1 . no-default-alpn=abc", "no value"),
            ("1 . no-default-alpn", "no-default-alpn without alpn"),
            ("1 . mandatory=key123", "not present"),
            ("1 . mandatory=mandatory", "itself"),
            ("1 . mandatory=alpn,alpn alpn=h2", "twice"),
            ("1 . ech=123", "base64"),
            ("1 . ech=", "missing value"),
            ("1 . dohpath", "needs a value"),
            ("1 . ohttp=x", "no value"),
            ("1 . tls-supported-groups=29,23,29", "twice"),
            ("1 . pvd=\"x\"", "no value"),
            ("1 . oots=\"do53:100,dot\"", "percentage"),
            ("1 . oots=\"do53:100,dot:101\"", "0-100"),
            ("1 . oots=\"do53:1,do53:2\"", "unique"),
            ("1 . port=1 key3=\\000\\002", "twice"),
            // keyNNNNN carries the wire value, checked as its key's: a port of 1 octet.
            ("1 . key3=2", "bad key3"),
            ("1 . key1=h2", "bad key1"),
            ("1 . bogus", "unknown SvcParam key"),
            ("1 . PORT=1", "unknown SvcParam key"),
            ("1 . key07=1", "unknown SvcParam key"),
            ("1 . key65536", "unknown SvcParam key"),
            ("1 . \"alpn=h2\"", "quoted"),
            ("1", "missing a domain name"),
        ] {
            refused(t::SVCB, text, why);
        }
        for bad in [
            "not-relative",
            "/{?no_dns_variable}",
            "/novariable",
            "/{?dnsx}",
            "/{?dns:10000}",
            "/{?dns:0}",
            "/{?dns:01}",
            "/{??dns}",
            "/%a{?dns}",
            "/{?dns,%a}",
            "/{?dns",
            "/{=dns}",
            "/{dns} x",
        ] {
            assert!(super::check_dohpath(bad.as_bytes()).is_err(), "{bad}");
        }
        for good in [
            "/{dns}",
            "/{+dns}",
            "/{#dns}",
            "/{.dns}",
            "/{;dns}",
            "/{dns:9999}",
            "/{dns*}",
            "/p?k=v{&dns,x*}",
            "/é{?dns}",
            "/%C3%A9{?a.b,dns}",
        ] {
            assert_eq!(super::check_dohpath(good.as_bytes()), Ok(()), "{good}");
        }
    }

    #[test]
    fn wire_rules() {
        // Keys out of order, a truncated value, a mandatory key that is absent.
        for hex in [
            "000100 0003000201bb 0001000302683 2",
            "000100 0003000501bb",
            "000100 00000002 0003",
        ] {
            let hex = hex.replace(' ', "");
            refused(
                t::SVCB,
                &format!("\\# {} {hex}", hex.len() / 2),
                "bad SVCB RDATA",
            );
        }
        refused(t::SVCB, "\\# 13 000100 0003000201bb 00010000", "ascending");
    }
}
