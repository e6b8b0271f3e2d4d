//! The HTTP challenge: a small interstitial page whose script solves a proof of work, and the
//! clearance cookie it earns — both stateless, so that any node holding the fleet key checks
//! them.
//!
//! A request that meets a `challenge` rule without a valid clearance is answered 403 with
//! [`page`]: no external resource, no third-party script, never cached, never forwarded. Its
//! script searches a nonce `n` such that SHA-256(`token` "." `n`) starts with `difficulty`
//! zero bits (the rule's `difficulty`, else `[challenge] difficulty`), then loads
//! [`VERIFY_PATH`]`?t=token&n=n&r=path`. A client without JavaScript stays on the 403 (the
//! page says so after `page_timeout_secs`): curl never reaches the origin.
//!
//! The token is `ts.difficulty.mac`, the MAC an HMAC-SHA256 (under a key derived from
//! `[challenge] key_file`, purpose [`POW_PURPOSE`]) over the site, the client's prefix (/24,
//! /56), `ts`, the difficulty and the rules' version: a token is good for `solve_secs` after
//! `ts`, for that site and prefix only, and its difficulty cannot be lowered. A solution
//! earns the cookie [`COOKIE`] = `expiry.difficulty.mac` (purpose [`CLEARANCE_PURPOSE`]) over
//! the site, the prefix, the expiry, the difficulty solved and the rules' version: checked
//! with one HMAC (well under a microsecond, see `cargo bench -p http-front --bench
//! challenge`), valid on every node with the key until `clearance_secs` pass or the rules
//! change, for challenges no harder than the one solved. A clearance passes challenge rules,
//! and a hold of its source made before it was earned (`http_hold = "challenge"`) — never a
//! deny, a rate limit or a block.

use std::fmt::Write as _;
use std::net::IpAddr;

use hmac::{Hmac, Mac};
use http::HeaderMap;
use sha2::{Digest, Sha256};

type HmacSha256 = Hmac<Sha256>;

/// The path a solved challenge is sent to (answered by http-front, never the origin).
pub const VERIFY_PATH: &str = "/.palisade/challenge";
/// The clearance cookie's name over plain HTTP.
pub const COOKIE: &str = "palisade_clearance";
/// Its name over HTTPS: a `__Host-` cookie, which only the site itself may set (Secure,
/// `Path=/`, no `Domain`): a sibling site could plant well-formed fakes of the plain name
/// ahead of the real one and lock a solved browser out.
pub const HOST_COOKIE: &str = "__Host-palisade_clearance";

/// The clearance cookie's name for a request over HTTPS (`https`): [`HOST_COOKIE`]; over
/// plain HTTP [`COOKIE`], `_`, and 12 hex digits of a MAC of the site and the client's prefix
/// ([`Binding`]) under the clearance key: a sibling site may set cookies for the parent
/// domain, and nine well-spelt fakes of one plain name, sent ahead of the real one, kept a
/// solved browser in the challenge; a name it cannot know, it cannot plant.
pub fn cookie_name(
    keys: &Keys,
    binding: &Binding<'_>,
    https: bool,
) -> std::borrow::Cow<'static, str> {
    if https {
        return HOST_COOKIE.into();
    }
    // Not bound to the rules' version: each rules edit would leave the browser another cookie.
    let unversioned = Binding {
        version: 0,
        ..*binding
    };
    let tag = unversioned
        .mac(&keys.clearance, b"cookie name", &[])
        .finalize()
        .into_bytes();
    let mut s = String::with_capacity(COOKIE.len() + 13);
    s.push_str(COOKIE);
    s.push('_');
    hex(&tag[..6], &mut s);
    s.into()
}
/// The key-derivation purpose of challenge tokens.
pub const POW_PURPOSE: &str = "http-front challenge token v1";
/// The key-derivation purpose of clearance cookies.
pub const CLEARANCE_PURPOSE: &str = "http-front clearance v1";
/// Bytes of MAC kept in tokens and cookies (128 bits, hex).
const MAC_BYTES: usize = 16;

/// The two keys of the challenge, derived from the fleet key (or made at start).
#[derive(Clone)]
pub struct Keys {
    pow: [u8; 32],
    clearance: [u8; 32],
}

impl std::fmt::Debug for Keys {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Keys(..)")
    }
}

impl Keys {
    /// The keys derived from a fleet key.
    pub fn from_fleet(key: &shield::fleet_key::FleetKey) -> Keys {
        Keys {
            pow: key.derive(POW_PURPOSE).0,
            clearance: key.derive(CLEARANCE_PURPOSE).0,
        }
    }

    /// Keys of this process alone (no `key_file`): clearances hold on this node only, until
    /// it restarts.
    pub fn process_local() -> Keys {
        static LOCAL: std::sync::OnceLock<Keys> = std::sync::OnceLock::new();
        LOCAL
            .get_or_init(|| {
                let mut seed = [0u8; 64];
                rand::fill(&mut seed);
                Keys::from_fleet(&shield::fleet_key::FleetKey::from_bytes(&seed))
            })
            .clone()
    }
}

/// What a challenge and its clearance are bound to.
#[derive(Clone, Copy, Debug)]
pub struct Binding<'a> {
    /// The site's name.
    pub site: &'a str,
    /// The client's address (its /24 or /56 is bound).
    pub ip: IpAddr,
    /// The rules' version ([`shield::rules::Prepared::version`]).
    pub version: u64,
}

impl Binding<'_> {
    /// The MAC of `what` (a tag) and `fields` under `key`, bound to this site, prefix and version.
    fn mac(&self, key: &[u8; 32], what: &[u8], fields: &[u64]) -> HmacSha256 {
        let mut m = HmacSha256::new_from_slice(key).expect("any key length");
        m.update(what);
        m.update(&(self.site.len() as u32).to_be_bytes());
        m.update(self.site.as_bytes());
        match self.ip.to_canonical() {
            IpAddr::V4(a) => {
                m.update(&[4]);
                m.update(&a.octets()[..3]);
            }
            IpAddr::V6(a) => {
                m.update(&[6]);
                m.update(&a.octets()[..7]);
            }
        }
        m.update(&self.version.to_be_bytes());
        for f in fields {
            m.update(&f.to_be_bytes());
        }
        m
    }
}

fn hex(bytes: &[u8], out: &mut String) {
    for b in bytes {
        let _ = write!(out, "{b:02x}");
    }
}

/// The MAC as written: lower-case hex only, as [`hex`] writes it (a token or clearance has
/// one spelling: revoking, counting or logging them by their text must not be dodged).
fn unhex(s: &str) -> Option<[u8; MAC_BYTES]> {
    let b = s.as_bytes();
    if b.len() != 2 * MAC_BYTES {
        return None;
    }
    let mut out = [0u8; MAC_BYTES];
    for (i, o) in out.iter_mut().enumerate() {
        let d = |c: u8| match c {
            b'0'..=b'9' | b'a'..=b'f' => (c as char).to_digit(16),
            _ => None,
        };
        *o = (d(b[2 * i])? * 16 + d(b[2 * i + 1])?) as u8;
    }
    Some(out)
}

/// A number as written: decimal digits, no sign, no leading zero (one spelling).
fn number<T: std::str::FromStr>(s: &str) -> Option<T> {
    let b = s.as_bytes();
    let canonical =
        !b.is_empty() && b.iter().all(u8::is_ascii_digit) && (b[0] != b'0' || b.len() == 1);
    canonical.then(|| s.parse().ok()).flatten()
}

/// A challenge token for `b`, issued at `now` (unix seconds) with `difficulty`.
pub fn token(keys: &Keys, b: &Binding<'_>, now: u64, difficulty: u8) -> String {
    let tag = b
        .mac(&keys.pow, b"pow", &[now, u64::from(difficulty)])
        .finalize()
        .into_bytes();
    let mut t = format!("{now}.{difficulty}.");
    hex(&tag[..MAC_BYTES], &mut t);
    t
}

/// Why a solution was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum Refused {
    /// Not a token of ours for this site and prefix (forged, another site's or another prefix's).
    #[error("not a token of this site for this client")]
    Forged,
    /// Issued more than `solve_secs` ago (or in the future).
    #[error("token expired")]
    Expired,
    /// The nonce does not give the leading zero bits asked.
    #[error("wrong proof of work")]
    Wrong,
}

/// Checks a solution (`token`, `nonce`) for `b` at `now`; the token must be at most
/// `solve_secs` old. When good, the difficulty solved and when the token was issued (a
/// clearance runs from then: a solution sent again earns no later one).
pub fn check_solution(
    keys: &Keys,
    b: &Binding<'_>,
    token: &str,
    nonce: &str,
    now: u64,
    solve_secs: u64,
) -> Result<(u8, u64), Refused> {
    let mut parts = token.splitn(3, '.');
    let (Some(ts), Some(d), Some(mac)) = (parts.next(), parts.next(), parts.next()) else {
        return Err(Refused::Forged);
    };
    let (Some(ts), Some(d), Some(mac)) = (number::<u64>(ts), number::<u8>(d), unhex(mac)) else {
        return Err(Refused::Forged);
    };
    b.mac(&keys.pow, b"pow", &[ts, u64::from(d)])
        .verify_truncated_left(&mac)
        .map_err(|_| Refused::Forged)?;
    if ts > now.saturating_add(5) || now.saturating_sub(ts) > solve_secs {
        return Err(Refused::Expired);
    }
    if nonce.is_empty() || nonce.len() > 32 || !nonce.bytes().all(|c| c.is_ascii_digit()) {
        return Err(Refused::Wrong);
    }
    let mut h = Sha256::new();
    h.update(token.as_bytes());
    h.update(b".");
    h.update(nonce.as_bytes());
    if leading_zero_bits(&h.finalize()) < u32::from(d) {
        return Err(Refused::Wrong);
    }
    Ok((d, ts))
}

/// Leading zero bits of `digest`.
pub fn leading_zero_bits(digest: &[u8]) -> u32 {
    let mut n = 0;
    for &b in digest {
        if b == 0 {
            n += 8;
        } else {
            return n + b.leading_zeros();
        }
    }
    n
}

/// The clearance cookie's value for `b`, earned by solving a challenge of `difficulty`,
/// valid until `expiry` (unix seconds).
pub fn clearance(keys: &Keys, b: &Binding<'_>, expiry: u64, difficulty: u8) -> String {
    let tag = b
        .mac(&keys.clearance, b"clr", &[expiry, u64::from(difficulty)])
        .finalize()
        .into_bytes();
    let mut v = format!("{expiry}.{difficulty}.");
    hex(&tag[..MAC_BYTES], &mut v);
    v
}

/// A clearance as written, not yet verified: what the cookie's text says.
#[derive(Clone, Copy, Debug)]
pub struct ClearanceText {
    expiry: u64,
    difficulty: u8,
    mac: [u8; MAC_BYTES],
}

impl ClearanceText {
    /// `value` when it is spelt as a clearance and has not expired at `now` (no MAC
    /// computed: a cookie of another shape costs nothing and is never counted).
    pub fn parse(value: &str, now: u64) -> Option<ClearanceText> {
        let mut parts = value.splitn(3, '.');
        let (exp, d, mac) = (parts.next()?, parts.next()?, parts.next()?);
        let (expiry, difficulty, mac) = (number::<u64>(exp)?, number::<u8>(d)?, unhex(mac)?);
        (expiry > now).then_some(ClearanceText {
            expiry,
            difficulty,
            mac,
        })
    }

    /// When it expires (Unix seconds).
    pub fn expiry(&self) -> u64 {
        self.expiry
    }

    /// The difficulty it was earned at, when its MAC is `b`'s.
    pub fn verify(&self, keys: &Keys, b: &Binding<'_>) -> Option<u8> {
        b.mac(
            &keys.clearance,
            b"clr",
            &[self.expiry, u64::from(self.difficulty)],
        )
        .verify_truncated_left(&self.mac)
        .is_ok()
        .then_some(self.difficulty)
    }
}

/// The difficulty `value` was earned at, when it is a clearance for `b` that has not expired
/// at `now`.
pub fn clearance_valid(keys: &Keys, b: &Binding<'_>, value: &str, now: u64) -> Option<u8> {
    ClearanceText::parse(value, now)?.verify(keys, b)
}

/// The values of the cookie `name` in a request's `Cookie` headers (HTTP/2 may send several),
/// read as bytes: another cookie's value in UTF-8 (a name a page's script set) hid every
/// clearance of its header (browsers send them raw), and the challenge came back forever.
/// Only values in UTF-8 are given.
pub fn cookie_values<'h>(headers: &'h HeaderMap, name: &'h str) -> impl Iterator<Item = &'h str> {
    headers
        .get_all(http::header::COOKIE)
        .iter()
        .flat_map(|v| v.as_bytes().split(|&b| b == b';'))
        .filter_map(move |kv| {
            let kv = kv.trim_ascii();
            let eq = kv.iter().position(|&b| b == b'=')?;
            (kv[..eq].trim_ascii() == name.as_bytes())
                .then(|| std::str::from_utf8(kv[eq + 1..].trim_ascii()).ok())
                .flatten()
        })
}

/// A path to return to after the challenge: the request's own (absolute path and query),
/// never another origin (`//host`, `/\host`), a path a client could resolve into one (dot
/// segments, empty segments, backslashes: `/.//evil.example` is `//evil.example` once its
/// dot segment goes) or anything with control characters.
pub fn safe_return(r: &str) -> &str {
    let path = r.split('?').next().unwrap_or("");
    let ok = r.starts_with('/')
        && !path.contains("//")
        && !path.contains('\\')
        && !path.split('/').any(|seg| seg == "." || seg == "..")
        && r.len() <= 4096
        && r.bytes().all(|c| c.is_ascii_graphic());
    if ok { r } else { "/" }
}

/// Decodes `%XX` escapes of a query value (`+` as space); `None` when malformed.
pub fn percent_decode(s: &str) -> Option<String> {
    let (bytes, well_formed) = crate::target::form_decode(s);
    if !well_formed {
        return None;
    }
    String::from_utf8(bytes).ok()
}

/// The value of `key` in a query string (first occurrence), decoded.
pub fn query_value(query: &str, key: &str) -> Option<String> {
    query.split('&').find_map(|kv| {
        let (k, v) = kv.split_once('=')?;
        (k == key).then(|| percent_decode(v)).flatten()
    })
}

/// A JavaScript string literal of `s` that is safe inside a `<script>` element.
fn js_string(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            'a'..='z' | 'A'..='Z' | '0'..='9' | '/' | '.' | '-' | '_' | '?' | '=' | '~' => {
                out.push(c)
            }
            c => {
                let mut buf = [0u16; 2];
                for u in c.encode_utf16(&mut buf) {
                    let _ = write!(out, "\\u{u:04x}");
                }
            }
        }
    }
    out.push('"');
    out
}

/// The challenge page for `token` at `difficulty`, returning to `ret` once solved; it gives
/// up (and says so) after `timeout_ms`.
pub fn page(token: &str, difficulty: u8, ret: &str, timeout_ms: u64) -> String {
    format!(
        r#"<!doctype html>
<html lang="en"><head><meta charset="utf-8"><meta name="robots" content="noindex,nofollow">
<meta name="viewport" content="width=device-width,initial-scale=1"><title>Checking your browser</title>
<style>body{{font:16px/1.5 system-ui,sans-serif;max-width:32em;margin:15vh auto;padding:0 1em;color:#222}}</style>
</head><body><h1>One moment</h1><p id="m">Checking your browser before you reach the site. This takes a second or two.</p>
<noscript><p>This check needs JavaScript. Without it the site cannot be reached from your network just now.</p></noscript>
<script>
(function(){{"use strict";
var T={token},D={difficulty},R={ret},L={timeout_ms},V={verify};
var K=[0x428a2f98,0x71374491,0xb5c0fbcf,0xe9b5dba5,0x3956c25b,0x59f111f1,0x923f82a4,0xab1c5ed5,0xd807aa98,0x12835b01,0x243185be,0x550c7dc3,0x72be5d74,0x80deb1fe,0x9bdc06a7,0xc19bf174,0xe49b69c1,0xefbe4786,0x0fc19dc6,0x240ca1cc,0x2de92c6f,0x4a7484aa,0x5cb0a9dc,0x76f988da,0x983e5152,0xa831c66d,0xb00327c8,0xbf597fc7,0xc6e00bf3,0xd5a79147,0x06ca6351,0x14292967,0x27b70a85,0x2e1b2138,0x4d2c6dfc,0x53380d13,0x650a7354,0x766a0abb,0x81c2c92e,0x92722c85,0xa2bfe8a1,0xa81a664b,0xc24b8b70,0xc76c51a3,0xd192e819,0xd6990624,0xf40e3585,0x106aa070,0x19a4c116,0x1e376c08,0x2748774c,0x34b0bcb5,0x391c0cb3,0x4ed8aa4a,0x5b9cca4f,0x682e6ff3,0x748f82ee,0x78a5636f,0x84c87814,0x8cc70208,0x90befffa,0xa4506ceb,0xbef9a3f7,0xc67178f2];
var W=new Int32Array(64);
function sha(s){{var n=s.length,l=((n+9+63)>>6)<<4,M=new Int32Array(l),i;
for(i=0;i<n;i++)M[i>>2]|=s.charCodeAt(i)<<(24-(i&3)*8);
M[n>>2]|=0x80<<(24-(n&3)*8);M[l-1]=n*8;
var h0=0x6a09e667,h1=0xbb67ae85|0,h2=0x3c6ef372,h3=0xa54ff53a|0,h4=0x510e527f,h5=0x9b05688c|0,h6=0x1f83d9ab,h7=0x5be0cd19;
for(var o=0;o<l;o+=16){{var a=h0,b=h1,c=h2,d=h3,e=h4,f=h5,g=h6,h=h7,j,t1,t2,x,y;
for(j=0;j<64;j++){{if(j<16)W[j]=M[o+j];else{{x=W[j-15];y=W[j-2];
W[j]=(((x>>>7)|(x<<25))^((x>>>18)|(x<<14))^(x>>>3))+W[j-7]+(((y>>>17)|(y<<15))^((y>>>19)|(y<<13))^(y>>>10))+W[j-16]|0;}}
t1=h+(((e>>>6)|(e<<26))^((e>>>11)|(e<<21))^((e>>>25)|(e<<7)))+((e&f)^(~e&g))+K[j]+W[j]|0;
t2=(((a>>>2)|(a<<30))^((a>>>13)|(a<<19))^((a>>>22)|(a<<10)))+((a&b)^(a&c)^(b&c))|0;
h=g;g=f;f=e;e=d+t1|0;d=c;c=b;b=a;a=t1+t2|0;}}
h0=h0+a|0;h1=h1+b|0;h2=h2+c|0;h3=h3+d|0;h4=h4+e|0;h5=h5+f|0;h6=h6+g|0;h7=h7+h|0;}}
return [h0,h1,h2];}}
function zeros(h){{var z=0;for(var i=0;i<3;i++){{if(h[i]===0){{z+=32;continue;}}return z+Math.clz32(h[i]);}}return z;}}
var p=T+".",n=0,t0=Date.now();
function step(){{for(var k=0;k<20000;k++,n++){{if(zeros(sha(p+n))>=D){{
location.replace(V+"?t="+encodeURIComponent(T)+"&n="+n+"&r="+encodeURIComponent(R));return;}}}}
if(Date.now()-t0>L){{document.getElementById("m").textContent="Forbidden: the check did not finish in time.";return;}}
setTimeout(step,0);}}
step();}})();
</script></body></html>
"#,
        token = js_string(token),
        ret = js_string(ret),
        verify = js_string(VERIFY_PATH),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn keys() -> Keys {
        Keys::from_fleet(&shield::fleet_key::FleetKey::from_bytes(&[7u8; 32]))
    }

    fn solve(token: &str, d: u8) -> String {
        (0u64..)
            .map(|n| n.to_string())
            .find(|n| {
                let mut h = Sha256::new();
                h.update(token.as_bytes());
                h.update(b".");
                h.update(n.as_bytes());
                leading_zero_bits(&h.finalize()) >= u32::from(d)
            })
            .unwrap()
    }

    #[test]
    fn a_solution_binds_site_prefix_time_and_difficulty() {
        let k = keys();
        let b = Binding {
            site: "a",
            ip: "192.0.2.7".parse().unwrap(),
            version: 9,
        };
        let t = token(&k, &b, 1000, 8);
        let n = solve(&t, 8);
        assert_eq!(check_solution(&k, &b, &t, &n, 1010, 300), Ok((8, 1000)));
        // The same /24 passes; another /24, site or version does not.
        let same24 = Binding {
            ip: "192.0.2.200".parse().unwrap(),
            ..b
        };
        assert_eq!(
            check_solution(&k, &same24, &t, &n, 1010, 300),
            Ok((8, 1000))
        );
        for other in [
            Binding {
                ip: "192.0.3.7".parse().unwrap(),
                ..b
            },
            Binding { site: "b", ..b },
            Binding { version: 10, ..b },
        ] {
            assert_eq!(
                check_solution(&k, &other, &t, &n, 1010, 300),
                Err(Refused::Forged)
            );
        }
        assert_eq!(
            check_solution(&k, &b, &t, &n, 1301, 300),
            Err(Refused::Expired)
        );
        // A lowered difficulty breaks the MAC; a wrong nonce fails the work.
        let lowered = t.replacen(".8.", ".1.", 1);
        assert_eq!(
            check_solution(&k, &b, &lowered, &n, 1010, 300),
            Err(Refused::Forged)
        );
        let wrong = (0u64..)
            .map(|x| x.to_string())
            .find(|x| check_solution(&k, &b, &t, x, 1010, 300).is_err())
            .unwrap();
        assert_eq!(
            check_solution(&k, &b, &t, &wrong, 1010, 300),
            Err(Refused::Wrong)
        );
    }

    #[test]
    fn clearances_expire_and_bind_the_prefix() {
        let k = keys();
        let b = Binding {
            site: "a",
            ip: "2001:db8:1:2ff::1".parse().unwrap(),
            version: 1,
        };
        let c = clearance(&k, &b, 2000, 14);
        assert_eq!(clearance_valid(&k, &b, &c, 1999), Some(14));
        assert_eq!(clearance_valid(&k, &b, &c, 2000), None);
        // One spelling: the same values written otherwise are refused.
        let (exp, rest) = c.split_once('.').unwrap();
        let (d, mac) = rest.split_once('.').unwrap();
        for odd in [
            format!("0{exp}.{d}.{mac}"),
            format!("+{exp}.{d}.{mac}"),
            format!("{exp}.0{d}.{mac}"),
            format!("{exp}.{d}.{}", mac.to_uppercase()),
        ] {
            assert_eq!(clearance_valid(&k, &b, &odd, 1999), None, "{odd}");
        }
        let t = token(&k, &b, 1000, 1);
        let n = solve(&t, 1);
        assert!(check_solution(&k, &b, &t, &n, 1010, 300).is_ok());
        assert_eq!(
            check_solution(&k, &b, &format!("0{t}"), &n, 1010, 300),
            Err(Refused::Forged)
        );
        // Same /56, other /56.
        let near = Binding {
            ip: "2001:db8:1:200::9".parse().unwrap(),
            ..b
        };
        let far = Binding {
            ip: "2001:db8:1:300::1".parse().unwrap(),
            ..b
        };
        assert_eq!(clearance_valid(&k, &near, &c, 1999), Some(14));
        assert_eq!(clearance_valid(&k, &far, &c, 1999), None);
        // A moved expiry, a raised difficulty, a forged MAC, the old format, another key.
        for forged in [
            c.replacen("2000", "3000", 1),
            c.replacen(".14.", ".28.", 1),
            "2000.14.00000000000000000000000000000000".to_string(),
            c.replacen(".14.", ".", 1),
        ] {
            assert_eq!(clearance_valid(&k, &b, &forged, 1), None, "{forged}");
        }
        assert_eq!(clearance_valid(&Keys::process_local(), &b, &c, 1999), None);
    }

    #[test]
    fn cookies_returns_and_queries() {
        let mut h = HeaderMap::new();
        h.append(
            http::header::COOKIE,
            "a=1; palisade_clearance=x.y".parse().unwrap(),
        );
        h.append(
            http::header::COOKIE,
            "palisade_clearance=z".parse().unwrap(),
        );
        assert_eq!(cookie_values(&h, COOKIE).collect::<Vec<_>>(), ["x.y", "z"]);
        // Another cookie's raw UTF-8 value hides none of them.
        h.append(
            http::header::COOKIE,
            http::HeaderValue::from_bytes(
                "name=J\u{fc}rgen; palisade_clearance=w; b=\u{e9}".as_bytes(),
            )
            .unwrap(),
        );
        assert_eq!(
            cookie_values(&h, COOKIE).collect::<Vec<_>>(),
            ["x.y", "z", "w"]
        );
        assert_eq!(safe_return("/a?b=c"), "/a?b=c");
        for bad in [
            "//evil.example/",
            "/\\evil",
            "http://evil/",
            "/a\nb",
            "",
            "/.//evil.example",
            "/a/..//evil.example",
            "/a\\b",
            "/./x",
        ] {
            assert_eq!(safe_return(bad), "/");
        }
        assert_eq!(
            query_value("t=1.2.ab&n=42&r=%2Fx%3Fy%3D1", "r").as_deref(),
            Some("/x?y=1")
        );
        assert_eq!(query_value("r=%zz", "r"), None);
        assert_eq!(
            js_string("</script>\"'"),
            "\"\\u003c/script\\u003e\\u0022\\u0027\""
        );
    }
}
