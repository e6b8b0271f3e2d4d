//! The request's Host and path as the rules see them and as they go upstream: one strict
//! parse of the authority, one normalisation of the path, so that what a rule matched is what
//! the origin serves.
//!
//! **Host** ([`parse_host`]): a DNS name (letters, digits, `-`, `_`, dots between non-empty
//! labels, one trailing dot allowed), an IPv4 address or a bracketed IPv6 address, then
//! optionally `:` and a port of at most five digits (an empty port is no port, RFC 3986 §3.2.3).
//! Anything else — a port that is not a number, user info, a second colon, a character outside
//! that set — is refused (400), never routed to another site. The name is lower-cased and its
//! trailing dot dropped; the upstream gets that form, with the client's port.
//!
//! **Path** ([`normalize_path`]), two forms from one pass:
//! - the *forwarded* path (RFC 3986 §6.2.2): percent-encoded unreserved characters decoded,
//!   other percent-encodings kept with upper-case hex digits, runs of `/` merged into one (as
//!   nginx's `merge_slashes` and Apache do by default), dot segments removed (§5.2.4; `..`
//!   never climbs above the root);
//! - the *rules' view*: the forwarded path percent-decoded once more, exactly as an origin
//!   decodes it before it maps the path to a resource (so `%2561` is `%61` to both, never `a`);
//!   lower-cased when the site sets `path_case_insensitive`; with `path_params`, `;`
//!   parameters cut from every segment and dot segments removed again (`/x/..;/admin` is
//!   `/admin` to a servlet container).
//!
//! Refused (400): a path that does not start with `/`, `%00`, an invalid percent-encoding, a
//! view that is not UTF-8, and — unless the site sets `encoded_slash = "keep"` — `%2F`, `%5C`
//! and a raw `\` (separators to some origins, data to others). With `keep`, `%2F` and `%5C` stay
//! encoded in both forms (one segment to the rules, as to an origin that keeps them).
//!
//! The common path needs none of this: a path without `%`, `\`, `//` or a dot segment (and,
//! with the site options, without `;` or upper case) is returned as it is, without a copy.

use std::borrow::Cow;

use http::Request;
use http::header::{self, HeaderValue};

/// Longest host name accepted.
pub const HOST_MAX: usize = 253;

/// A Host (or `:authority`) the request may be routed by.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Host<'a> {
    /// Lower case, without port or trailing dot (`[v6]` keeps its brackets).
    pub name: &'a str,
    /// The port, when one was given.
    pub port: Option<u16>,
    /// True when the raw value is already `name[:port]` (no copy is needed upstream).
    pub canonical: bool,
}

/// Parses a Host header or authority strictly (see the module doc); `None` when it is not one.
/// The lower-cased name goes into `buf` when the raw one has upper case.
pub fn parse_host<'a>(raw: &'a str, buf: &'a mut [u8; HOST_MAX]) -> Option<Host<'a>> {
    let mut v6 = None;
    let (name, rest) = if raw.starts_with('[') {
        let end = raw.find(']')?;
        let inner = &raw[1..end];
        v6 = Some(inner.parse::<std::net::Ipv6Addr>().ok()?);
        (&raw[..=end], &raw[end + 1..])
    } else {
        match raw.find(':') {
            Some(i) => (&raw[..i], &raw[i..]),
            None => (raw, ""),
        }
    };
    let mut canonical = !rest.ends_with(':');
    let port = match rest.strip_prefix(':') {
        None if rest.is_empty() => None,
        None => return None,
        Some("") => None,
        Some(p) => {
            if p.len() > 5 || !p.bytes().all(|b| b.is_ascii_digit()) {
                return None;
            }
            // Spelt one way only upstream: `0443` is 443, and port 0 is none (an origin or
            // a cache keyed on Host saw every spelling the client chose as another site).
            canonical &= !p.starts_with('0');
            Some(p.parse::<u16>().ok()?).filter(|&n| n != 0)
        }
    };
    if let Some(a) = v6 {
        // One spelling of the address upstream (`[0:0::1]`, `[::0001]` and `[::1]` are one
        // host), as RFC 5952 writes it.
        use std::io::Write as _;
        let mut w = std::io::Cursor::new(&mut buf[..]);
        write!(w, "[{a}]").ok()?;
        let n = w.position() as usize;
        let text = std::str::from_utf8(&buf[..n]).ok()?;
        canonical &= text == name;
        return Some(Host {
            name: text,
            port,
            canonical,
        });
    }
    let name = if name.starts_with('[') {
        name
    } else {
        let trimmed = name.strip_suffix('.').unwrap_or(name);
        canonical &= trimmed.len() == name.len();
        if trimmed.is_empty() || trimmed.len() > HOST_MAX || !valid_reg_name(trimmed) {
            return None;
        }
        trimmed
    };
    if !name.bytes().any(|b| b.is_ascii_uppercase()) {
        return Some(Host {
            name,
            port,
            canonical,
        });
    }
    let out = &mut buf[..name.len()];
    out.copy_from_slice(name.as_bytes());
    out.make_ascii_lowercase();
    Some(Host {
        name: std::str::from_utf8(out).ok()?,
        port,
        canonical: false,
    })
}

/// Letters, digits, `-` and `_` in non-empty labels of at most 63 octets.
fn valid_reg_name(name: &str) -> bool {
    name.split('.').all(|l| {
        !l.is_empty()
            && l.len() <= 63
            && l.bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
    })
}

/// The authority a request is routed by: `:authority` or an absolute-form target's, else
/// the one `Host`; with its raw value when it came from a header. Refuses (the 400's text)
/// a missing or malformed one, user info, more than one `Host`, and an HTTP/2 `host` header
/// that names another host than `:authority`.
pub fn request_host<'a, B>(
    req: &'a Request<B>,
    h2: bool,
    buf: &'a mut [u8; HOST_MAX],
) -> Result<(Host<'a>, Option<&'a HeaderValue>), &'static str> {
    let mut hosts = req.headers().get_all(header::HOST).iter();
    let first = hosts.next();
    if hosts.next().is_some() {
        return Err("more than one Host\n");
    }
    let header_text = match first {
        Some(v) => Some(v.to_str().map_err(|_| "bad Host\n")?),
        None => None,
    };
    if let Some(a) = req.uri().authority() {
        let a = a.as_str();
        if a.contains('@') {
            return Err("user info in the request target\n");
        }
        // An HTTP/1.1 request names its Host even with an absolute-form target (RFC 9112
        // §3.2: 400 without one, as nginx answers).
        if !h2 && header_text.is_none() && req.version() == http::Version::HTTP_11 {
            return Err("missing Host\n");
        }
        // The Host line it names must be one too (RFC 9112 §3.2: 400 for an invalid one,
        // as nginx answers), though the target's authority is the one routed by.
        if !h2
            && let Some(h) = header_text
            && parse_host(h, &mut [0u8; HOST_MAX]).is_none()
        {
            return Err("bad Host\n");
        }
        let host = parse_host(a, buf).ok_or("bad authority\n")?;
        if h2 && let Some(h) = header_text {
            let mut other = [0u8; HOST_MAX];
            let same = parse_host(h, &mut other)
                .is_some_and(|o| o.name == host.name && o.port == host.port);
            if !same {
                return Err(":authority and host differ\n");
            }
        }
        return Ok((host, None));
    }
    let text = header_text.ok_or("missing Host\n")?;
    let host = parse_host(text, buf).ok_or("bad Host\n")?;
    Ok((host, first))
}

/// The path of `req` in its two forms for `opts` (see [`normalize_path`]); an absolute-form
/// target without a path is `/`. `OPTIONS *` is refused (not an absolute path), as nginx
/// refuses it: an origin might read a server-wide request otherwise than the rules did.
pub fn request_path<B>(req: &Request<B>, opts: PathOptions) -> Result<NormalPath<'_>, PathError> {
    let raw = req.uri().path();
    if raw.is_empty() && req.uri().scheme().is_some() {
        return Ok(NormalPath {
            forward: Cow::Borrowed("/"),
            view: Cow::Borrowed("/"),
        });
    }
    normalize_path(raw, opts)
}

/// What a site's origin treats specially in a path (the `[[site]]` path keys).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct PathOptions {
    /// `encoded_slash = "keep"`: `%2F` and `%5C` pass, kept encoded, instead of a 400.
    pub keep_encoded_slash: bool,
    /// `path_case_insensitive`: the rules see the path lower-cased.
    pub case_insensitive: bool,
    /// `path_params`: the rules see each segment without its `;` parameters.
    pub strip_params: bool,
}

/// Why a path was refused (each is a 400).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum PathError {
    /// Neither `/…` (nor `*`, which the caller handles).
    #[error("request target is not an absolute path")]
    NotAbsolute,
    /// `%` not followed by two hex digits.
    #[error("invalid percent-encoding")]
    BadPercent,
    /// `%00` to `%1F`, or `%7F`: no path holds one, and a router's regex may read a final
    /// line feed otherwise than the rules (PCRE's `$` matches before it).
    #[error("encoded control character")]
    Control,
    /// `%2F`, `%5C` or `\` where the site does not keep them.
    #[error("encoded slash or backslash")]
    EncodedSlash,
    /// The decoded path is not UTF-8.
    #[error("path is not UTF-8 once decoded")]
    NotUtf8,
    /// A `..` segment above the root.
    #[error("path climbs above the root")]
    AboveRoot,
}

/// A path in its two forms; each borrows the raw path when it equals it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NormalPath<'a> {
    /// What goes upstream.
    pub forward: Cow<'a, str>,
    /// What the rules match (`path`).
    pub view: Cow<'a, str>,
}

#[inline]
fn is_unreserved(b: u8) -> bool {
    b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~')
}

#[inline]
fn hex(b: u8) -> Option<u8> {
    match b {
        b'0'..=b'9' => Some(b - b'0'),
        b'a'..=b'f' => Some(b - b'a' + 10),
        b'A'..=b'F' => Some(b - b'A' + 10),
        _ => None,
    }
}

const HEX: &[u8; 16] = b"0123456789ABCDEF";

/// True when `p` has an empty segment (`//`) or a dot segment.
fn has_dot_or_empty_segment(p: &[u8]) -> bool {
    p.windows(2).any(|w| w == b"//") || p.split(|&b| b == b'/').any(|s| s == b"." || s == b"..")
}

/// Normalises `raw` (the path of a request-target, without the query) for `opts`.
pub fn normalize_path<'a>(raw: &'a str, opts: PathOptions) -> Result<NormalPath<'a>, PathError> {
    let b = raw.as_bytes();
    if b.first() != Some(&b'/') {
        return Err(PathError::NotAbsolute);
    }
    let special = b.iter().any(|&c| c == b'%' || c == b'\\');
    let needs_forward = special || has_dot_or_empty_segment(b);
    let forward: Cow<'a, str> = if needs_forward {
        Cow::Owned(forward_form(b, opts)?)
    } else {
        Cow::Borrowed(raw)
    };
    let view = view_form(&forward, opts)?;
    let view = match view {
        Some(v) => Cow::Owned(v),
        None => match &forward {
            Cow::Borrowed(s) => Cow::Borrowed(*s),
            Cow::Owned(s) => Cow::Owned(s.clone()),
        },
    };
    Ok(NormalPath { forward, view })
}

/// The forwarded form (see the module doc).
fn forward_form(b: &[u8], opts: PathOptions) -> Result<String, PathError> {
    let mut out: Vec<u8> = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        let c = b[i];
        match c {
            b'%' => {
                let (h, l) = match (
                    b.get(i + 1).copied().and_then(hex),
                    b.get(i + 2).copied().and_then(hex),
                ) {
                    (Some(h), Some(l)) => (h, l),
                    _ => return Err(PathError::BadPercent),
                };
                let v = h << 4 | l;
                match v {
                    0..=0x1F | 0x7F => return Err(PathError::Control),
                    b'/' | b'\\' if !opts.keep_encoded_slash => {
                        return Err(PathError::EncodedSlash);
                    }
                    v if is_unreserved(v) => out.push(v),
                    v => out.extend_from_slice(&[
                        b'%',
                        HEX[usize::from(v >> 4)],
                        HEX[usize::from(v & 15)],
                    ]),
                }
                i += 3;
                continue;
            }
            b'\\' if !opts.keep_encoded_slash => return Err(PathError::EncodedSlash),
            b'\\' => out.extend_from_slice(b"%5C"),
            b'/' if out.last() == Some(&b'/') => {}
            c => out.push(c),
        }
        i += 1;
    }
    if climbs_above_root(&out) {
        return Err(PathError::AboveRoot);
    }
    // Kept encoded slashes that an origin decoding them (Tomcat with them allowed, IIS)
    // reads as separators of `.` or `..` segments: a traversal no rule saw (nginx decodes
    // them and normalises, we keep them — refused).
    if opts.keep_encoded_slash && encoded_dot_segment(&out) {
        return Err(PathError::EncodedSlash);
    }
    let out = remove_dot_segments(&out);
    // Only ASCII went in: percent-encodings stay encoded here.
    Ok(String::from_utf8(out).expect("the forwarded path is ASCII"))
}

/// True when `p` (the forwarded form: upper-case hex) holds `%2F` or `%5C` and a `.` or `..`
/// segment once those are read as slashes.
fn encoded_dot_segment(p: &[u8]) -> bool {
    let enc = |w: &[u8]| w == b"%2F" || w == b"%5C";
    if !p.windows(3).any(enc) {
        return false;
    }
    let mut seg_start = 0;
    let mut i = 0;
    let dot = |s: &[u8]| s == b"." || s == b"..";
    while i < p.len() {
        let sep = if p[i] == b'/' {
            1
        } else if p.get(i..i + 3).is_some_and(enc) {
            3
        } else {
            0
        };
        if sep > 0 {
            if dot(&p[seg_start..i]) {
                return true;
            }
            i += sep;
            seg_start = i;
        } else {
            i += 1;
        }
    }
    dot(&p[seg_start..])
}

/// True when a `..` of `p` (an absolute path, slashes merged) would climb above the root
/// (`/..`, `/a/../..`): nginx refuses such a target (400), and so do we.
fn climbs_above_root(p: &[u8]) -> bool {
    let mut depth = 0usize;
    for s in p[1..].split(|&c| c == b'/') {
        match s {
            b"." | b"" => {}
            b".." => match depth.checked_sub(1) {
                Some(d) => depth = d,
                None => return true,
            },
            _ => depth += 1,
        }
    }
    false
}

/// RFC 3986 §5.2.4 on an absolute path whose slashes are already merged; `..` stops at the root.
fn remove_dot_segments(p: &[u8]) -> Vec<u8> {
    let mut out: Vec<u8> = Vec::with_capacity(p.len());
    let segs: Vec<&[u8]> = p[1..].split(|&c| c == b'/').collect();
    let last = segs.len() - 1;
    for (i, s) in segs.iter().enumerate() {
        match *s {
            b"." => {
                if i == last {
                    out.push(b'/');
                }
            }
            b".." => {
                while let Some(c) = out.pop() {
                    if c == b'/' {
                        break;
                    }
                }
                if i == last {
                    out.push(b'/');
                }
            }
            s => {
                out.push(b'/');
                out.extend_from_slice(s);
            }
        }
    }
    if out.is_empty() {
        out.push(b'/');
    }
    out
}

/// The rules' view of a forwarded path; `None` when it is the forwarded path itself.
fn view_form(fwd: &str, opts: PathOptions) -> Result<Option<String>, PathError> {
    let b = fwd.as_bytes();
    let decode = b.contains(&b'%');
    let params = opts.strip_params && b.contains(&b';');
    let lower = opts.case_insensitive
        && b.iter()
            .any(|c| c.is_ascii_uppercase() || *c == b'%' || !c.is_ascii());
    if !decode && !params && !lower {
        return Ok(None);
    }
    let mut v: Vec<u8> = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%' {
            // The forwarded form holds only valid encodings, with upper-case digits.
            let x = hex(b[i + 1]).unwrap_or(0) << 4 | hex(b[i + 2]).unwrap_or(0);
            if matches!(x, b'/' | b'\\') {
                // Kept (`encoded_slash = "keep"`): one segment, as to the origin.
                v.extend_from_slice(&b[i..i + 3]);
            } else {
                v.push(x);
            }
            i += 3;
        } else {
            v.push(b[i]);
            i += 1;
        }
    }
    let mut s = String::from_utf8(v).map_err(|_| PathError::NotUtf8)?;
    if opts.strip_params && s.contains(';') {
        let mut cut = String::with_capacity(s.len());
        for (k, seg) in s.split('/').enumerate() {
            if k > 0 {
                cut.push('/');
            }
            cut.push_str(seg.split_once(';').map_or(seg, |(a, _)| a));
        }
        let merged = merge_slashes(cut.as_bytes());
        s = String::from_utf8(remove_dot_segments(&merged)).map_err(|_| PathError::NotUtf8)?;
    }
    if opts.case_insensitive {
        s = s.chars().map(fold_case).collect();
    }
    Ok(Some(s))
}

/// `c` as a case-insensitive origin compares it: lower case of its upper case, one
/// character for one (as Java's `equalsIgnoreCase` and .NET's `OrdinalIgnoreCase` fold):
/// `ı` and `İ` are `i`, `ſ` is `s`, the Kelvin sign is `k` — letters `to_lowercase` alone
/// leaves apart from the ASCII ones an origin takes them for.
fn fold_case(c: char) -> char {
    if c.is_ascii() {
        return c.to_ascii_lowercase();
    }
    let mut up = c.to_uppercase();
    let u = match (up.next(), up.next()) {
        (Some(u), None) => u,
        _ => c,
    };
    u.to_lowercase().next().unwrap_or(u)
}

fn merge_slashes(b: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(b.len());
    for &c in b {
        if !(c == b'/' && out.last() == Some(&b'/')) {
            out.push(c);
        }
    }
    out
}

/// `s` with its `%XX` escapes decoded and `+` as a space (as a form's values are read), and
/// whether every `%` was followed by two hex digits (one that is not is kept as it is).
pub fn form_decode(s: &str) -> (Vec<u8>, bool) {
    form_decode_keeping(s, &[])
}

/// As [`form_decode`], but a percent-encoding of a byte in `keep` stays as it was sent (the
/// query's separators: `%26` inside a value is no new parameter to an origin).
pub fn form_decode_keeping(s: &str, keep: &[u8]) -> (Vec<u8>, bool) {
    let b = s.as_bytes();
    let hex = |c: Option<&u8>| c.and_then(|&c| (c as char).to_digit(16));
    let mut out = Vec::with_capacity(b.len());
    let mut well_formed = true;
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            b'%' => match (hex(b.get(i + 1)), hex(b.get(i + 2))) {
                (Some(h), Some(l)) if keep.contains(&((h * 16 + l) as u8)) => {
                    out.extend_from_slice(&b[i..i + 3]);
                    i += 3;
                }
                (Some(h), Some(l)) => {
                    out.push((h * 16 + l) as u8);
                    i += 3;
                }
                _ => {
                    well_formed = false;
                    out.push(b'%');
                    i += 1;
                }
            },
            b'+' => {
                out.push(b' ');
                i += 1;
            }
            c => {
                out.push(c);
                i += 1;
            }
        }
    }
    (out, well_formed)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn host(raw: &str) -> Option<(String, Option<u16>, bool)> {
        let mut b = [0u8; HOST_MAX];
        parse_host(raw, &mut b).map(|h| (h.name.to_string(), h.port, h.canonical))
    }

    #[test]
    fn hosts() {
        assert_eq!(
            host("example.com"),
            Some(("example.com".into(), None, true))
        );
        assert_eq!(
            host("Example.COM:8080"),
            Some(("example.com".into(), Some(8080), false))
        );
        assert_eq!(
            host("example.com."),
            Some(("example.com".into(), None, false))
        );
        assert_eq!(
            host("example.com:"),
            Some(("example.com".into(), None, false))
        );
        assert_eq!(host("[::1]:80"), Some(("[::1]".into(), Some(80), true)));
        for v6 in [
            "[0:0::1]:80",
            "[::0001]:80",
            "[0000:0000:0000:0000:0000:0000:0000:0001]:80",
        ] {
            assert_eq!(host(v6), Some(("[::1]".into(), Some(80), false)), "{v6}");
        }
        assert_eq!(
            host("[2001:DB8::A]"),
            Some(("[2001:db8::a]".into(), None, false))
        );
        assert_eq!(
            host("192.0.2.1:443"),
            Some(("192.0.2.1".into(), Some(443), true))
        );
        assert_eq!(host("a_b.test"), Some(("a_b.test".into(), None, true)));
        // One spelling of a port upstream: no leading zeros, and port 0 is none.
        assert_eq!(
            host("a.test:0443"),
            Some(("a.test".into(), Some(443), false))
        );
        for zero in ["a.test:0", "a.test:00000"] {
            assert_eq!(host(zero), Some(("a.test".into(), None, false)), "{zero}");
        }
        for bad in [
            "",
            ":80",
            "example.com:80x",
            "example.com:abc",
            "example.com:8080:1",
            "example.com:99999",
            "example.com:123456",
            "user@example.com",
            "example.com/x",
            "exa mple.com",
            "example..com",
            ".example.com",
            "example.com..",
            "Example.COM..:8080",
            "ae.tst!!!!!!!!!!!.....",
            "[::1",
            "[::1]x",
            "[::1]:8x",
            "[zz]",
            "a.test\\",
            "a.test%00",
        ] {
            assert_eq!(host(bad), None, "{bad:?}");
        }
        assert_eq!(host(&"a".repeat(300)), None);
        assert_eq!(host(&format!("{}.test", "a".repeat(64))), None);
    }

    fn norm(raw: &str, opts: PathOptions) -> Result<(String, String), PathError> {
        normalize_path(raw, opts).map(|p| (p.forward.into_owned(), p.view.into_owned()))
    }

    fn both(raw: &str) -> Result<(String, String), PathError> {
        norm(raw, PathOptions::default())
    }

    #[test]
    fn common_paths_are_not_copied() {
        let p = normalize_path("/a/b.html", PathOptions::default()).unwrap();
        assert!(matches!(p.forward, Cow::Borrowed(_)));
        assert!(matches!(p.view, Cow::Borrowed(_)));
        let p = normalize_path("/", PathOptions::default()).unwrap();
        assert_eq!(p.forward, "/");
        let p = normalize_path("/a/", PathOptions::default()).unwrap();
        assert!(matches!(p.forward, Cow::Borrowed("/a/")));
    }

    #[test]
    fn every_form_of_admin_is_admin() {
        for raw in [
            "/admin",
            "/%61dmin",
            "/%61%64%6D%69%6E",
            "/%61%64%6d%69%6e",
            "//admin",
            "///admin",
            "/./admin",
            "/x/../admin",
            "/x/%2e%2e/admin",
            "/x/%2E%2E/admin",
            "/x/.%2e/admin",
            "/./././admin",
            "/x//..//admin",
        ] {
            let (f, v) = both(raw).unwrap();
            assert_eq!((f.as_str(), v.as_str()), ("/admin", "/admin"), "{raw}");
        }
        let (f, v) = both("/admin/.").unwrap();
        assert_eq!((f.as_str(), v.as_str()), ("/admin/", "/admin/"));
        let (f, _) = both("/admin/x/..").unwrap();
        assert_eq!(f, "/admin/");
        // Above the root: refused, as nginx refuses it.
        for raw in [
            "/../admin",
            "/../../admin",
            "/%2e%2e/admin",
            "/x/../../admin",
            "/..",
        ] {
            assert_eq!(both(raw), Err(PathError::AboveRoot), "{raw}");
        }
    }

    #[test]
    fn reserved_encodings_stay_encoded_upstream_and_decode_once_for_rules() {
        // %25 is decoded once: the origin sees %61, never a.
        let (f, v) = both("/%2561dmin").unwrap();
        assert_eq!((f.as_str(), v.as_str()), ("/%2561dmin", "/%61dmin"));
        let (f, v) = both("/a%3bb%3fc%20d%c3%a9").unwrap();
        assert_eq!(
            (f.as_str(), v.as_str()),
            ("/a%3Bb%3Fc%20d%C3%A9", "/a;b?c dé")
        );
        assert_eq!(both("/%ff"), Err(PathError::NotUtf8));
    }

    #[test]
    fn refused_forms() {
        assert_eq!(both("admin"), Err(PathError::NotAbsolute));
        assert_eq!(both(""), Err(PathError::NotAbsolute));
        assert_eq!(both("/a%2Fb"), Err(PathError::EncodedSlash));
        assert_eq!(both("/a%2fb"), Err(PathError::EncodedSlash));
        assert_eq!(both("/a%5cb"), Err(PathError::EncodedSlash));
        assert_eq!(both("/a\\b"), Err(PathError::EncodedSlash));
        assert_eq!(both("/a%00"), Err(PathError::Control));
        assert_eq!(both("/secret1%0A"), Err(PathError::Control));
        assert_eq!(both("/a%0d%0ab"), Err(PathError::Control));
        assert_eq!(both("/a%7f"), Err(PathError::Control));
        assert_eq!(both("/a%09"), Err(PathError::Control));
        assert_eq!(both("/a%0"), Err(PathError::BadPercent));
        assert_eq!(both("/a%g0"), Err(PathError::BadPercent));
        assert_eq!(both("/a%"), Err(PathError::BadPercent));
    }

    #[test]
    fn keep_encoded_slash() {
        let keep = PathOptions {
            keep_encoded_slash: true,
            ..PathOptions::default()
        };
        let (f, v) = norm("/a%2fb/c", keep).unwrap();
        assert_eq!((f.as_str(), v.as_str()), ("/a%2Fb/c", "/a%2Fb/c"));
        // Dot segments once the kept slashes are read as slashes (an origin that decodes
        // them climbs): refused, as are they encoded or raw.
        for p in [
            "/x%2F..%2Fadmin",
            "/x%5C..%5Cadmin",
            "/x\\..\\admin",
            "/a%2fb/..%2F/c",
            "/x%2F.%2Fadmin",
            "/x%2F%2E%2E%2Fadmin",
            "/x/..%2F",
        ] {
            assert_eq!(norm(p, keep), Err(PathError::EncodedSlash), "{p}");
        }
        let (f, _) = norm("/x%2F...%2Fadmin", keep).unwrap();
        assert_eq!(f, "/x%2F...%2Fadmin");
        let (f, _) = norm("/a\\b", keep).unwrap();
        assert_eq!(f, "/a%5Cb");
        assert_eq!(norm("/a%00", keep), Err(PathError::Control));
    }

    #[test]
    fn site_options() {
        let ci = PathOptions {
            case_insensitive: true,
            ..PathOptions::default()
        };
        let (f, v) = norm("/ADMIN/%41", ci).unwrap();
        assert_eq!((f.as_str(), v.as_str()), ("/ADMIN/A", "/admin/a"));
        // Letters a case-insensitive origin takes for ASCII ones (Java's equalsIgnoreCase
        // finds "/admın" equal to "/admin"), encoded or raw.
        for (raw, view) in [
            ("/adm%C4%B1n", "/admin"),
            ("/ADM%C4%B0N", "/admin"),
            ("/%C5%BFecret1", "/secret1"),
            ("/%E2%84%AAey", "/key"),
            ("/stra%C3%9Fe", "/straße"),
            ("/%C3%89T%C3%89", "/été"),
        ] {
            assert_eq!(norm(raw, ci).unwrap().1, view, "{raw}");
        }
        assert_eq!(normalize_path("/admın", ci).unwrap().view, "/admin");
        let params = PathOptions {
            strip_params: true,
            ..PathOptions::default()
        };
        let (f, v) = norm("/admin;jsessionid=1/x", params).unwrap();
        assert_eq!(
            (f.as_str(), v.as_str()),
            ("/admin;jsessionid=1/x", "/admin/x")
        );
        let (f, v) = norm("/public/..;/admin", params).unwrap();
        assert_eq!((f.as_str(), v.as_str()), ("/public/..;/admin", "/admin"));
        let (_, v) = norm("/adm%3Bx/in", params).unwrap();
        assert_eq!(v, "/adm/in");
        let (_, v) = both("/admin;x").unwrap();
        assert_eq!(v, "/admin;x", "without path_params, `;` is data");
    }

    #[test]
    fn normalising_twice_changes_nothing() {
        for raw in ["/a/./b//c/../%7e%41%2561", "/%c3%a9/x/..", "/a;b/./c"] {
            let (f, _) = both(raw).unwrap();
            let (f2, _) = both(&f).unwrap();
            assert_eq!(f, f2, "{raw}");
        }
    }
}
