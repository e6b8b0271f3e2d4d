//! Types whose layout depends on their own values: APL, WKS, IPSECKEY, HIP, AMTRELAY, A6
//! and ATMA.

use std::fmt::Write;

use super::codec;
use super::codec::{bad, word};
use super::field::{name, name_token, number, wire_name, write_name};
use super::{Fields, NameRef, RdataError};

// ---- APL (RFC 3123) ----------------------------------------------------------------------

/// Reads APL items `[!]family:address/prefix` up to the end (possibly none).
pub(crate) fn parse_apl(fields: &mut Fields<'_>, out: &mut Vec<u8>) -> Result<(), RdataError> {
    while let Some(f) = fields.next() {
        let msg = "expected an APL item [!]1:IPv4/prefix or [!]2:IPv6/prefix";
        if f.quoted {
            return Err(bad(&f, msg));
        }
        let (neg, item) = match f.text.strip_prefix(b"!") {
            Some(rest) => (true, rest),
            None => (false, f.text),
        };
        let colon = item
            .iter()
            .position(|&c| c == b':')
            .ok_or_else(|| bad(&f, msg))?;
        let slash = item
            .iter()
            .rposition(|&c| c == b'/')
            .ok_or_else(|| bad(&f, msg))?;
        if slash < colon {
            return Err(bad(&f, msg));
        }
        let family = codec::uint(&item[..colon], 65535).ok_or_else(|| bad(&f, msg))? as u16;
        let addr = &item[colon + 1..slash];
        let mut buf = [0u8; 16];
        let (max_prefix, len) = match family {
            1 => {
                let a = codec::ipv4(addr).ok_or_else(|| bad(&f, "bad IPv4 address in APL item"))?;
                buf[..4].copy_from_slice(&a);
                (32, 4)
            }
            2 => {
                let a = codec::ipv6(addr).ok_or_else(|| bad(&f, "bad IPv6 address in APL item"))?;
                buf.copy_from_slice(&a);
                (128, 16)
            }
            _ => return Err(bad(&f, "APL address family must be 1 (IPv4) or 2 (IPv6)")),
        };
        let prefix = codec::uint(&item[slash + 1..], max_prefix)
            .ok_or_else(|| bad(&f, format!("APL prefix length must be 0-{max_prefix}")))?;
        let afd = buf[..len]
            .iter()
            .rposition(|&b| b != 0)
            .map_or(0, |p| p + 1);
        out.extend_from_slice(&family.to_be_bytes());
        out.push(prefix as u8);
        out.push((neg as u8) << 7 | afd as u8);
        out.extend_from_slice(&buf[..afd]);
    }
    Ok(())
}

/// Checks APL items: each complete, known families within their sizes. A trailing zero
/// octet in the address part (which RFC 3123 §4.1 says to omit) is tolerated on the wire,
/// and printed in the generic form since the text form cannot keep it.
pub(crate) fn check_apl(r: &[u8]) -> Result<(), String> {
    let mut i = 0;
    while i < r.len() {
        let h = r.get(i..i + 4).ok_or("truncated APL item")?;
        let family = u16::from_be_bytes([h[0], h[1]]);
        let afd = (h[3] & 0x7f) as usize;
        let (max_prefix, max_afd) = match family {
            1 => (32, 4),
            2 => (128, 16),
            _ => (255, 127),
        };
        if h[2] > max_prefix || afd > max_afd {
            return Err(format!("APL item of family {family} too long"));
        }
        r.get(i + 4..i + 4 + afd).ok_or("truncated APL item")?;
        i += 4 + afd;
    }
    Ok(())
}

/// Writes APL items; false for families without a text form and for address parts with
/// trailing zero octets.
pub(crate) fn present_apl(r: &[u8], out: &mut String) -> bool {
    let mut i = 0;
    while i + 4 <= r.len() {
        let family = u16::from_be_bytes([r[i], r[i + 1]]);
        let afd = (r[i + 3] & 0x7f) as usize;
        let mut buf = [0u8; 16];
        let max = match family {
            1 => 4,
            2 => 16,
            _ => return false,
        };
        let Some(a) = r
            .get(i + 4..i + 4 + afd)
            .filter(|a| a.len() <= max && a.last() != Some(&0))
        else {
            return false;
        };
        buf[..afd].copy_from_slice(a);
        if i > 0 {
            out.push(' ');
        }
        if r[i + 3] & 0x80 != 0 {
            out.push('!');
        }
        let _ = write!(out, "{family}:");
        if family == 1 {
            codec::write_ipv4(&buf, out);
        } else {
            codec::write_ipv6(&buf, out);
        }
        let _ = write!(out, "/{}", r[i + 2]);
        i += 4 + afd;
    }
    true
}

// ---- WKS (RFC 1035 §3.4.2) ---------------------------------------------------------------

/// Well-known service names (a fixed subset of the IANA registry, as BIND and NSD read them
/// from /etc/services).
const SERVICES: &[(&str, u16)] = &[
    ("tcpmux", 1),
    ("echo", 7),
    ("discard", 9),
    ("systat", 11),
    ("daytime", 13),
    ("netstat", 15),
    ("qotd", 17),
    ("chargen", 19),
    ("ftp-data", 20),
    ("ftp", 21),
    ("ssh", 22),
    ("telnet", 23),
    ("smtp", 25),
    ("time", 37),
    ("nameserver", 42),
    ("whois", 43),
    ("tacacs", 49),
    ("domain", 53),
    ("bootps", 67),
    ("bootpc", 68),
    ("tftp", 69),
    ("gopher", 70),
    ("finger", 79),
    ("http", 80),
    ("www", 80),
    ("kerberos", 88),
    ("pop3", 110),
    ("sunrpc", 111),
    ("auth", 113),
    ("nntp", 119),
    ("ntp", 123),
    ("netbios-ns", 137),
    ("netbios-dgm", 138),
    ("netbios-ssn", 139),
    ("imap", 143),
    ("snmp", 161),
    ("snmp-trap", 162),
    ("bgp", 179),
    ("irc", 194),
    ("ldap", 389),
    ("https", 443),
    ("microsoft-ds", 445),
    ("kpasswd", 464),
    ("submission", 587),
    ("ldaps", 636),
    ("domain-s", 853),
    ("rsync", 873),
    ("imaps", 993),
    ("pop3s", 995),
];

/// Reads `address protocol service...` (protocol a number or tcp/udp, services numbers or
/// well-known names).
pub(crate) fn parse_wks(fields: &mut Fields<'_>, out: &mut Vec<u8>) -> Result<(), RdataError> {
    let f = word(fields, "an IPv4 address")?;
    out.extend_from_slice(&codec::ipv4(f.text).ok_or_else(|| bad(&f, "expected an IPv4 address"))?);
    let f = word(fields, "a protocol")?;
    let proto = if f.text.eq_ignore_ascii_case(b"tcp") {
        6
    } else if f.text.eq_ignore_ascii_case(b"udp") {
        17
    } else {
        codec::uint(f.text, 255).ok_or_else(|| bad(&f, "expected a protocol number, tcp or udp"))?
            as u8
    };
    out.push(proto);
    let mut bits = vec![0u8; 8192];
    let mut high: Option<usize> = None;
    while let Some(f) = fields.next() {
        let port = codec::uint(f.text, 65535)
            .map(|p| p as u16)
            .or_else(|| {
                SERVICES
                    .iter()
                    .find(|(n, _)| n.as_bytes().eq_ignore_ascii_case(f.text))
                    .map(|&(_, p)| p)
            })
            .filter(|_| !f.quoted)
            .ok_or_else(|| bad(&f, "expected a port number or a well-known service name"))?
            as usize;
        bits[port / 8] |= 0x80 >> (port % 8);
        high = high.max(Some(port / 8));
    }
    if let Some(h) = high {
        out.extend_from_slice(&bits[..=h]);
    }
    Ok(())
}

/// Checks WKS: address, protocol and a bitmap of at most 8192 octets.
pub(crate) fn check_wks(r: &[u8]) -> Result<(), String> {
    if r.len() < 5 {
        return Err("RDATA too short".into());
    }
    if r.len() > 5 + 8192 {
        return Err("WKS bitmap longer than 8192 octets".into());
    }
    Ok(())
}

/// Writes WKS with numeric protocol and ports; false if the bitmap ends in a zero octet.
pub(crate) fn present_wks(r: &[u8], out: &mut String) -> bool {
    if r.len() > 5 && r.last() == Some(&0) {
        return false;
    }
    codec::write_ipv4(r, out);
    let _ = write!(out, " {}", r[4]);
    for (i, &b) in r[5..].iter().enumerate() {
        for k in 0..8 {
            if b & (0x80 >> k) != 0 {
                let _ = write!(out, " {}", i * 8 + k);
            }
        }
    }
    true
}

// ---- IPSECKEY (RFC 4025) -----------------------------------------------------------------

fn gateway(
    fields: &mut Fields<'_>,
    gw_type: u8,
    origin: &[u8],
    out: &mut Vec<u8>,
) -> Result<(), RdataError> {
    let f = word(fields, "a gateway")?;
    match gw_type {
        0 => {
            if f.text != b"." {
                return Err(bad(&f, "gateway type 0 takes . as its gateway"));
            }
        }
        1 => out.extend_from_slice(
            &codec::ipv4(f.text).ok_or_else(|| bad(&f, "expected an IPv4 gateway"))?,
        ),
        2 => out.extend_from_slice(
            &codec::ipv6(f.text).ok_or_else(|| bad(&f, "expected an IPv6 gateway"))?,
        ),
        _ => name_token(&f, origin, out)?,
    }
    Ok(())
}

/// End of a gateway of `gw_type` at `pos`.
fn gateway_end(r: &[u8], pos: usize, gw_type: u8) -> Result<usize, String> {
    let end = match gw_type {
        0 => pos,
        1 => pos + 4,
        2 => pos + 16,
        3 => pos + wire_name(r, pos)?,
        t => return Err(format!("unknown gateway type {t}")),
    };
    if end > r.len() {
        return Err("truncated gateway".into());
    }
    Ok(end)
}

fn write_gateway(r: &[u8], pos: usize, gw_type: u8, out: &mut String) {
    match gw_type {
        0 => out.push('.'),
        1 => codec::write_ipv4(&r[pos..], out),
        2 => codec::write_ipv6(&r[pos..], out),
        _ => {
            write_name(r, pos, out);
        }
    }
}

/// Reads `precedence gateway-type algorithm gateway [public-key]`.
pub(crate) fn parse_ipseckey(
    fields: &mut Fields<'_>,
    origin: &[u8],
    out: &mut Vec<u8>,
) -> Result<(), RdataError> {
    out.push(number(fields, "a precedence", 255)? as u8);
    let gw_type = number(fields, "a gateway type (0-3)", 3)? as u8;
    out.push(gw_type);
    let alg = number(fields, "an algorithm", 255)? as u8;
    out.push(alg);
    gateway(fields, gw_type, origin, out)?;
    if alg == 0 {
        if let Some(f) = fields.peek() {
            return Err(bad(&f, "algorithm 0 means no public key, but one is given"));
        }
        return Ok(());
    }
    if fields.is_empty() {
        return Ok(());
    }
    let mut d = codec::Base64Decoder::default();
    let first = fields.peek();
    while let Some(f) = fields.next() {
        if f.quoted {
            return Err(bad(&f, "expected base64 data, not a quoted string"));
        }
        d.feed(f.text, out).map_err(|m| bad(&f, m))?;
    }
    if let Some(f) = first {
        d.finish().map_err(|m| bad(&f, m))?;
    }
    Ok(())
}

/// Checks IPSECKEY: a known gateway type, its gateway, no key with algorithm 0.
pub(crate) fn check_ipseckey(r: &[u8]) -> Result<(), String> {
    let h = r.get(..3).ok_or("RDATA too short")?;
    let end = gateway_end(r, 3, h[1])?;
    if h[2] == 0 && end != r.len() {
        return Err("algorithm 0 means no public key, but one is present".into());
    }
    Ok(())
}

/// Writes IPSECKEY.
pub(crate) fn present_ipseckey(r: &[u8], out: &mut String) -> bool {
    let Ok(end) = gateway_end(r, 3, r[1]) else {
        return false;
    };
    let _ = write!(out, "{} {} {} ", r[0], r[1], r[2]);
    write_gateway(r, 3, r[1], out);
    if end < r.len() {
        out.push(' ');
        codec::write_base64(&r[end..], out);
    }
    true
}

/// The gateway name of IPSECKEY, if it has one.
pub(crate) fn names_ipseckey(r: &[u8], f: &mut dyn FnMut(NameRef)) {
    if r.get(1) == Some(&3)
        && let Ok(len) = wire_name(r, 3)
    {
        f(plain(3, len));
    }
}

fn plain(offset: usize, len: usize) -> NameRef {
    NameRef {
        offset,
        len,
        compress: false,
        additional: false,
        canonical_lower: false,
    }
}

// ---- HIP (RFC 8005) ----------------------------------------------------------------------

/// Reads `pk-algorithm HIT public-key [rendezvous-server...]`.
pub(crate) fn parse_hip(
    fields: &mut Fields<'_>,
    origin: &[u8],
    out: &mut Vec<u8>,
) -> Result<(), RdataError> {
    let at = out.len();
    out.extend_from_slice(&[0, 0, 0, 0]);
    out[at + 1] = number(fields, "a public key algorithm", 255)? as u8;
    let f = word(fields, "a HIT in hex")?;
    codec::hex_token_into(f.text, out).map_err(|m| bad(&f, m))?;
    let hit = out.len() - at - 4;
    if hit == 0 || hit > 255 {
        return Err(bad(&f, "HIT must be 1-255 octets"));
    }
    out[at] = hit as u8;
    let f = word(fields, "a public key in base64")?;
    let pk_at = out.len();
    codec::base64_token_into(f.text, out).map_err(|m| bad(&f, m))?;
    let pk = out.len() - pk_at;
    if pk == 0 || pk > 65535 {
        return Err(bad(&f, "public key must be 1-65535 octets"));
    }
    out[at + 2..at + 4].copy_from_slice(&(pk as u16).to_be_bytes());
    while !fields.is_empty() {
        name(fields, origin, out)?;
    }
    Ok(())
}

fn hip_names_start(r: &[u8]) -> Result<usize, String> {
    let h = r.get(..4).ok_or("RDATA too short")?;
    let hit = h[0] as usize;
    let pk = u16::from_be_bytes([h[2], h[3]]) as usize;
    if hit == 0 || pk == 0 {
        return Err("empty HIT or public key".into());
    }
    let end = 4 + hit + pk;
    if end > r.len() {
        return Err("truncated HIT or public key".into());
    }
    Ok(end)
}

/// Checks HIP: HIT and key present and within the RDATA, then whole names.
pub(crate) fn check_hip(r: &[u8]) -> Result<(), String> {
    let mut p = hip_names_start(r)?;
    while p < r.len() {
        p += wire_name(r, p)?;
    }
    Ok(())
}

/// Writes HIP.
pub(crate) fn present_hip(r: &[u8], out: &mut String) -> bool {
    let Ok(mut p) = hip_names_start(r) else {
        return false;
    };
    let hit = r[0] as usize;
    let _ = write!(out, "{} ", r[1]);
    codec::write_hex(&r[4..4 + hit], true, out);
    out.push(' ');
    codec::write_base64(&r[4 + hit..p], out);
    while p < r.len() {
        out.push(' ');
        let n = write_name(r, p, out);
        if n == 0 {
            return false;
        }
        p += n;
    }
    true
}

/// The rendezvous server names of HIP.
pub(crate) fn names_hip(r: &[u8], f: &mut dyn FnMut(NameRef)) {
    let Ok(mut p) = hip_names_start(r) else {
        return;
    };
    while let Ok(n) = wire_name(r, p) {
        f(plain(p, n));
        p += n;
    }
}

// ---- AMTRELAY (RFC 8777) -----------------------------------------------------------------

/// Reads `precedence discovery-optional type relay`.
pub(crate) fn parse_amtrelay(
    fields: &mut Fields<'_>,
    origin: &[u8],
    out: &mut Vec<u8>,
) -> Result<(), RdataError> {
    out.push(number(fields, "a precedence", 255)? as u8);
    let d = number(fields, "the discovery-optional flag (0 or 1)", 1)? as u8;
    let t = number(fields, "a relay type (0-3)", 3)? as u8;
    out.push(d << 7 | t);
    gateway(fields, t, origin, out)
}

/// Checks AMTRELAY; relay types above 3 are opaque.
pub(crate) fn check_amtrelay(r: &[u8]) -> Result<(), String> {
    let h = r.get(..2).ok_or("RDATA too short")?;
    let t = h[1] & 0x7f;
    if t > 3 {
        return Ok(());
    }
    if gateway_end(r, 2, t)? != r.len() {
        return Err("trailing data after the relay".into());
    }
    Ok(())
}

/// Writes AMTRELAY; false for relay types without a text form.
pub(crate) fn present_amtrelay(r: &[u8], out: &mut String) -> bool {
    let t = r[1] & 0x7f;
    if t > 3 {
        return false;
    }
    let _ = write!(out, "{} {} {} ", r[0], r[1] >> 7, t);
    write_gateway(r, 2, t, out);
    true
}

/// The relay name of AMTRELAY, if it has one.
pub(crate) fn names_amtrelay(r: &[u8], f: &mut dyn FnMut(NameRef)) {
    if r.get(1).is_some_and(|&b| b & 0x7f == 3)
        && let Ok(len) = wire_name(r, 2)
    {
        f(plain(2, len));
    }
}

// ---- A6 (RFC 2874) -----------------------------------------------------------------------

fn a6_suffix_len(plen: u8) -> usize {
    (128 - plen as usize).div_ceil(8)
}

/// Reads `prefix-length [address-suffix] [prefix-name]`.
pub(crate) fn parse_a6(
    fields: &mut Fields<'_>,
    origin: &[u8],
    out: &mut Vec<u8>,
) -> Result<(), RdataError> {
    let plen = number(fields, "a prefix length (0-128)", 128)? as u8;
    out.push(plen);
    let n = a6_suffix_len(plen);
    if n > 0 {
        let f = word(fields, "an IPv6 address suffix")?;
        let a = codec::ipv6(f.text).ok_or_else(|| bad(&f, "expected an IPv6 address suffix"))?;
        let mut suffix = [0u8; 16];
        suffix[..n].copy_from_slice(&a[16 - n..]);
        // The prefix bits of the suffix are not carried (as BIND, clear them).
        suffix[0] &= 0xff >> (plen % 8);
        out.extend_from_slice(&suffix[..n]);
    }
    if plen > 0 {
        name(fields, origin, out)?;
    }
    Ok(())
}

/// Checks A6: prefix length, suffix with the prefix bits clear, name when prefixed.
pub(crate) fn check_a6(r: &[u8]) -> Result<(), String> {
    let plen = *r.first().ok_or("RDATA too short")?;
    if plen > 128 {
        return Err("prefix length above 128".into());
    }
    let n = a6_suffix_len(plen);
    let s = r.get(1..1 + n).ok_or("truncated address suffix")?;
    if s.first().is_some_and(|&b| b & !(0xff >> (plen % 8)) != 0) {
        return Err("address suffix has bits set inside the prefix".into());
    }
    let end = if plen > 0 {
        1 + n + wire_name(r, 1 + n)?
    } else {
        1 + n
    };
    if end != r.len() {
        return Err("trailing data".into());
    }
    Ok(())
}

/// Writes A6.
pub(crate) fn present_a6(r: &[u8], out: &mut String) -> bool {
    let plen = r[0];
    let n = a6_suffix_len(plen);
    let _ = write!(out, "{plen}");
    if n > 0 {
        let mut a = [0u8; 16];
        a[16 - n..].copy_from_slice(&r[1..1 + n]);
        out.push(' ');
        codec::write_ipv6(&a, out);
    }
    if plen > 0 {
        out.push(' ');
        write_name(r, 1 + n, out);
    }
    true
}

/// The prefix name of A6, if it has one (lower-cased in the canonical form).
pub(crate) fn names_a6(r: &[u8], f: &mut dyn FnMut(NameRef)) {
    let Some(&plen) = r.first() else {
        return;
    };
    let at = 1 + a6_suffix_len(plen.min(128));
    if plen > 0
        && let Ok(len) = wire_name(r, at)
    {
        f(NameRef {
            canonical_lower: true,
            ..plain(at, len)
        });
    }
}

// ---- ATMA (ATM Forum af-dans-0152.000) ---------------------------------------------------

/// Checks that dots only separate digits (no leading, trailing or double dot).
fn dots_ok(s: &[u8]) -> bool {
    !s.is_empty() && s[0] != b'.' && s[s.len() - 1] != b'.' && !s.windows(2).any(|w| w == b"..")
}

/// Reads an ATM address: `+` and E.164 digits, or AESA hex digits; dots may separate digits.
pub(crate) fn parse_atma(fields: &mut Fields<'_>, out: &mut Vec<u8>) -> Result<(), RdataError> {
    let f = word(fields, "an ATM address")?;
    if let Some(digits) = f.text.strip_prefix(b"+") {
        if !dots_ok(digits) || !digits.iter().all(|&c| c == b'.' || c.is_ascii_digit()) {
            return Err(bad(
                &f,
                "expected an E.164 address: + and digits, dots between digits",
            ));
        }
        out.push(1);
        out.extend(digits.iter().filter(|&&c| c != b'.'));
    } else {
        if !dots_ok(f.text) {
            return Err(bad(
                &f,
                "expected an AESA address in hex, dots between digits",
            ));
        }
        out.push(0);
        let mut d = codec::HexDecoder::default();
        for part in f.text.split(|&c| c == b'.') {
            d.feed(part, out).map_err(|m| bad(&f, m))?;
        }
        d.finish().map_err(|m| bad(&f, m))?;
    }
    Ok(())
}

/// Checks ATMA: a format octet and an address; E.164 addresses are digits.
pub(crate) fn check_atma(r: &[u8]) -> Result<(), String> {
    if r.len() < 2 {
        return Err("RDATA too short".into());
    }
    if r[0] == 1 && !r[1..].iter().all(u8::is_ascii_digit) {
        return Err("E.164 address must be digits".into());
    }
    Ok(())
}

/// Writes ATMA; false for unknown address formats.
pub(crate) fn present_atma(r: &[u8], out: &mut String) -> bool {
    match r[0] {
        0 => codec::write_hex(&r[1..], false, out),
        1 => {
            out.push('+');
            out.extend(r[1..].iter().map(|&c| c as char));
        }
        _ => return false,
    }
    true
}

#[cfg(test)]
mod tests {
    use super::super::testutil::{case, refused, show};
    use crate::rrtype::t;

    #[test]
    fn apl() {
        case(t::APL, "", "", "");
        case(
            t::APL,
            "1:192.168.32.0/21 !1:192.168.38.0/28",
            "00011503c0a82000011c83c0a826",
            "1:192.168.32.0/21 !1:192.168.38.0/28",
        );
        case(
            t::APL,
            "2:FFFF:FFFF:FFFF::/2",
            "00020206ffffffffffff",
            "2:ffff:ffff:ffff::/2",
        );
        case(t::APL, "1:0.0.0.0/0", "00010000", "1:0.0.0.0/0");
        refused(t::APL, "0:0.0.0.0/32", "family must be 1");
        refused(t::APL, "2:0.0.0.0/32", "bad IPv6");
        refused(t::APL, "1:0.0.0.0/33", "0-32");
        refused(t::APL, "2::/0", "bad IPv6");
        refused(t::APL, "1:0.0.0.0/", "0-32");
        // Trailing zero octets are tolerated on the wire and printed generically.
        assert_eq!(show(t::APL, &[0, 1, 8, 2, 10, 0]), "\\# 6 000108020a00");
        assert_eq!(show(t::APL, &[0, 9, 8, 0]), "\\# 4 00090800");
        assert_eq!(show(t::APL, &[0, 9, 8, 20, 1]), "\\# 5 0009081401");
        let mut long_afd = vec![0, 9, 8, 127];
        long_afd.extend([1u8; 127]);
        assert!(show(t::APL, &long_afd).starts_with("\\#"));
        refused(t::APL, "\\# 5 0001080210", "truncated");
    }

    #[test]
    fn wks() {
        case(
            t::WKS,
            "192.0.2.1 tcp 0 tcpmux",
            "c000020106c0",
            "192.0.2.1 6 0 1",
        );
        case(
            t::WKS,
            "10.0.0.1 17 53",
            "0a0000011100000000000004",
            "10.0.0.1 17 53",
        );
        case(t::WKS, "10.0.0.1 UDP", "0a00000111", "10.0.0.1 17");
        refused(t::WKS, "127.1 6", "IPv4");
        refused(t::WKS, "10.0.0.1 6 nosuchservice", "service");
        refused(t::WKS, "10.0.0.1 6 65536", "service");
        assert_eq!(show(t::WKS, &[10, 0, 0, 1, 6, 0]), "\\# 6 0a0000010600");
    }

    #[test]
    fn ipseckey() {
        case(
            t::IPSECKEY,
            "10 1 2 192.0.2.38 AQNRU3mG7TVTO2BkR47usntb102uFJtugbo6BSGvgqt4AQ==",
            "0a0102c0000226010351537986ed35533b6064478eeeb27b5bd74dae149b6e81ba3a0521af82ab7801",
            "10 1 2 192.0.2.38 AQNRU3mG7TVTO2BkR47usntb102uFJtugbo6BSGvgqt4AQ==",
        );
        case(t::IPSECKEY, "0 0 0 .", "000000", "0 0 0 .");
        case(
            t::IPSECKEY,
            "1 3 1 gw",
            "01030102677707 6578616d706c6500".replace(' ', "").as_str(),
            "1 3 1 gw.example.",
        );
        case(
            t::IPSECKEY,
            "1 2 1 ::1",
            "01020100000000000000000000000000000001",
            "1 2 1 ::1",
        );
        refused(t::IPSECKEY, "0 4 0 .", "0-3");
        refused(t::IPSECKEY, "0 0 0 . AA==", "algorithm 0");
        refused(t::IPSECKEY, "0 0 0 x", "gateway type 0");
        refused(t::IPSECKEY, "0 1 0 ::1", "IPv4 gateway");
        refused(t::IPSECKEY, "\\# 3 000400", "unknown gateway type");
    }

    #[test]
    fn hip() {
        case(
            t::HIP,
            "2 200100107B1A74DF365639CC39F1D578 AwEAAQ== rvs.x.",
            "10020004200100107b1a74df365639cc39f1d57803010001037276730178 00"
                .replace(' ', "")
                .as_str(),
            "2 200100107B1A74DF365639CC39F1D578 AwEAAQ== rvs.x.",
        );
        refused(t::HIP, "2 - AwEAAQ==", "hex");
        refused(t::HIP, "2 00", "missing a public key");
        // Lengths pointing past the end: not read, printed generically.
        assert_eq!(show(t::HIP, &[5, 2, 0, 1, 0]), "\\# 5 0502000100");
    }

    #[test]
    fn amtrelay() {
        case(t::AMTRELAY, "200 0 0 .", "c800", "200 0 0 .");
        case(
            t::AMTRELAY,
            "10 0 1 203.0.113.15",
            "0a01cb00710f",
            "10 0 1 203.0.113.15",
        );
        case(
            t::AMTRELAY,
            "128 1 3 r.",
            "808301 7200".replace(' ', "").as_str(),
            "128 1 3 r.",
        );
        case(t::AMTRELAY, "\\# 2 0004", "0004", "\\# 2 0004");
        refused(t::AMTRELAY, "0 2 0 .", "flag (0 or 1)");
        refused(t::AMTRELAY, "0 0 0", "missing a gateway");
        refused(t::AMTRELAY, "0 0 1 0.0.0.0 x", "unexpected data");
    }

    #[test]
    fn a6() {
        case(
            t::A6,
            "0 2345:c1:ca11:1:1234:5678:9abc:def0",
            "0023450 0c1ca11000112345678 9abcdef0"
                .replace(' ', "")
                .as_str(),
            "0 2345:c1:ca11:1:1234:5678:9abc:def0",
        );
        case(
            t::A6,
            "64 ::1234:5678:9abc:def0 SUBNET-1.IP6.",
            "4012345678 9abcdef0 08 5355424e45542d31 03495036 00"
                .replace(' ', "")
                .as_str(),
            "64 ::1234:5678:9abc:def0 SUBNET-1.IP6.",
        );
        case(
            t::A6,
            "128 company.net.",
            "8007636f6d70616e79036e657400",
            "128 company.net.",
        );
        refused(t::A6, "129 x.", "0-128");
        refused(t::A6, "\\# 3 7cff00", "inside the prefix");
    }

    #[test]
    fn atma() {
        case(
            t::ATMA,
            "39.246f.00.0e7c9c.0312.0001.0001.000012345678.00",
            "0039246f000e7c9c03120001000100001234567800",
            "39246f000e7c9c03120001000100001234567800",
        );
        case(
            t::ATMA,
            "+1.908.555.1212",
            "013139303835353531323132",
            "+19085551212",
        );
        case(t::ATMA, "0.0", "0000", "00");
        for bad in [
            "0..0", "00.", ".00", "000", "+6120.", "+612..0", "+.61", "+",
        ] {
            assert!(
                super::super::testutil::parse_text(t::ATMA, bad).is_err(),
                "{bad}"
            );
        }
        assert_eq!(show(t::ATMA, &[2, 1]), "\\# 2 0201");
    }
}
