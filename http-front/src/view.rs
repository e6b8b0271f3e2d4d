//! The request as shield's rules see it: `path` (normalised, see [`crate::target`]), `query`
//! (as sent and percent-decoded), `method`, `host`, `user_agent`, `version`,
//! `header:<lower-case name>` (every value of a header sent more than once is matched; a value
//! that is not UTF-8 is seen with its bad bytes as U+FFFD, never hidden). `header:host` is
//! `host` (normalised); the forwarding headers are the values the origin gets.

use std::cell::Cell;

use http::header::{self, HeaderMap, HeaderValue};
use http::{Method, Request, Version};

use crate::challenge::{self, Binding, Keys};

/// A request's claim to a challenge clearance, checked at most once and only when a
/// challenge rule matches.
#[derive(Debug)]
pub struct Clearance<'a> {
    keys: &'a Keys,
    binding: Binding<'a>,
    headers: &'a HeaderMap,
    now_secs: u64,
    /// The difficulty a challenge rule of difficulty 0 asks (`[challenge] difficulty`).
    default_difficulty: u8,
    /// The valid clearance cookies, checked once.
    memo: Cell<Option<Checked>>,
    /// When the clearance that let the request through expires (Unix seconds; 0: none did):
    /// of each pass, the longest-lived cookie good enough for it, the soonest of those.
    until: Cell<u64>,
    /// How long a clearance lasts (`[challenge] clearance_secs`): its expiry less this is
    /// when it was earned.
    lasts_secs: u64,
    /// More clearance cookies came than are checked.
    over: Cell<bool>,
    /// A challenge rule let the request through on its clearance.
    passed: Cell<bool>,
    /// The request came over HTTPS (the cookie's name: [`challenge::cookie_name`]).
    https: bool,
}

/// What a request's clearance cookies came to.
#[derive(Clone, Copy, Debug)]
struct Checked {
    /// The highest difficulty a valid one was earned at.
    best: Option<u8>,
    /// The latest expiry of one earned at the default difficulty or harder (0: none).
    latest: u64,
    /// Each valid one: (difficulty, expiry).
    found: [(u8, u64); MAX_COOKIES_CHECKED],
    /// How many of `found` are set.
    n: usize,
}

/// Clearance cookies checked per request at most (each costs an HMAC): those spelt as a
/// clearance and unexpired (others, planted by a sibling site, count for nothing: four of
/// them locked a solved client out).
const MAX_COOKIES_CHECKED: usize = 8;

impl<'a> Clearance<'a> {
    /// The clearance `headers` may carry for `binding`, at `now_secs` (unix); a challenge
    /// rule without a difficulty of its own asks `default_difficulty`.
    pub fn new(
        keys: &'a Keys,
        binding: Binding<'a>,
        headers: &'a HeaderMap,
        now_secs: u64,
        default_difficulty: u8,
    ) -> Clearance<'a> {
        Clearance {
            keys,
            binding,
            headers,
            now_secs,
            default_difficulty,
            memo: Cell::new(None),
            until: Cell::new(0),
            lasts_secs: 0,
            over: Cell::new(false),
            passed: Cell::new(false),
            https: false,
        }
    }

    /// The same, reading the cookie of a request over HTTPS when `https`
    /// ([`challenge::HOST_COOKIE`]).
    pub fn over_https(mut self, https: bool) -> Self {
        self.https = https;
        self
    }

    /// The same, whose clearances last `secs` (`[challenge] clearance_secs`).
    pub fn lasting(mut self, secs: u64) -> Self {
        self.lasts_secs = secs;
        self
    }

    /// [`Clearance::valid`] by a clearance of the default difficulty earned at or after
    /// `since` (Unix seconds): what lifts a hold made then.
    pub fn valid_since(&self, since: u64) -> bool {
        let latest = self.checked().latest;
        let ok = latest.saturating_sub(self.lasts_secs) >= since && latest > 0;
        if ok {
            self.passed.set(true);
            self.until_at_most(latest);
        }
        ok
    }

    /// True when the request carries a valid clearance for a challenge of `difficulty` (0:
    /// the default one): earned by solving one at least as hard.
    pub fn valid(&self, difficulty: u8) -> bool {
        let want = if difficulty == 0 {
            self.default_difficulty
        } else {
            difficulty
        };
        let c = self.checked();
        let ok = c.best.is_some_and(|d| d >= want);
        if ok {
            self.passed.set(true);
            let good = c.found[..c.n]
                .iter()
                .filter(|(d, _)| *d >= want)
                .map(|(_, e)| *e)
                .max()
                .unwrap_or(0);
            self.until_at_most(good);
        }
        ok
    }

    /// Notes a pass on a clearance that expires at `expiry`: the soonest of the passes.
    fn until_at_most(&self, expiry: u64) {
        let u = self.until.get();
        self.until.set(if u == 0 { expiry } else { u.min(expiry) });
    }

    /// The clearance cookies, checked once: the best difficulty, and the latest expiry at the
    /// default difficulty or harder (0: none).
    fn checked(&self) -> Checked {
        match self.memo.get() {
            Some(m) => m,
            None => {
                let mut c = Checked {
                    best: None,
                    latest: 0,
                    found: [(0, 0); MAX_COOKIES_CHECKED],
                    n: 0,
                };
                let name = challenge::cookie_name(self.keys, &self.binding, self.https);
                let cookies = challenge::cookie_values(self.headers, &name)
                    .filter_map(|c| challenge::ClearanceText::parse(c, self.now_secs));
                for (i, cookie) in cookies.enumerate() {
                    if i == MAX_COOKIES_CHECKED {
                        self.over.set(true);
                        break;
                    }
                    if let Some(d) = cookie.verify(self.keys, &self.binding) {
                        c.best = c.best.max(Some(d));
                        if d >= self.default_difficulty {
                            c.latest = c.latest.max(cookie.expiry());
                        }
                        c.found[c.n] = (d, cookie.expiry());
                        c.n += 1;
                    }
                }
                self.memo.set(Some(c));
                c
            }
        }
    }

    /// True when the request carried more clearance cookies than are checked (those past
    /// the bound were not).
    pub fn over_bound(&self) -> bool {
        self.over.get()
    }

    /// What the clearance is bound to.
    pub fn binding(&self) -> &Binding<'a> {
        &self.binding
    }

    /// True when a challenge rule let the request through on its clearance.
    pub fn passed(&self) -> bool {
        self.passed.get()
    }

    /// When the clearance that let the request through expires (Unix seconds): what a
    /// WebSocket opened on it may last.
    pub fn passed_until(&self) -> Option<u64> {
        self.passed.get().then(|| self.until.get())
    }
}

/// A request's attributes for the rule engine; generic over the body, so that tests and
/// fuzzers use the very view the request path uses.
#[derive(Debug, Clone, Copy)]
pub struct HttpView<'a> {
    method: &'a Method,
    version: Version,
    headers: &'a HeaderMap,
    query: Option<&'a str>,
    /// The query percent-decoded, when that differs from `query`: its second value.
    query_decoded: Option<&'a str>,
    host: &'a str,
    path: &'a str,
    clearance: Option<&'a Clearance<'a>>,
    /// The connection's JA4 and HTTP/2 fingerprint.
    ja4: Option<&'a str>,
    h2_fingerprint: Option<&'a str>,
}

impl<'a> HttpView<'a> {
    /// The view of `req` routed by `host` (normalised) whose path the rules see as `path`.
    pub fn new<B>(req: &'a Request<B>, host: &'a str, path: &'a str) -> HttpView<'a> {
        HttpView {
            method: req.method(),
            version: req.version(),
            headers: req.headers(),
            query: req.uri().query(),
            query_decoded: None,
            host,
            path,
            clearance: None,
            ja4: None,
            h2_fingerprint: None,
        }
    }

    /// The same view, whose headers are `headers` (the request's, made UTF-8 by
    /// [`lossy_headers`] when some value was not).
    pub fn with_headers(self, headers: &'a HeaderMap) -> HttpView<'a> {
        HttpView { headers, ..self }
    }

    /// The same view, whose method is `method` (an HTTP/2 WebSocket's CONNECT is ruled as the
    /// GET the origin gets).
    pub fn with_method(self, method: &'a Method) -> HttpView<'a> {
        HttpView { method, ..self }
    }

    /// The same view, whose query has `decoded` ([`decoded_query`]) as its second value.
    pub fn with_decoded_query(self, decoded: Option<&'a str>) -> HttpView<'a> {
        HttpView {
            query_decoded: decoded,
            ..self
        }
    }

    /// The same view, with the connection's fingerprints.
    pub fn with_fingerprints(
        self,
        ja4: Option<&'a str>,
        h2_fingerprint: Option<&'a str>,
    ) -> HttpView<'a> {
        HttpView {
            ja4,
            h2_fingerprint,
            ..self
        }
    }

    /// The same view, whose challenge rules `clearance` may pass.
    pub fn with_clearance(self, clearance: &'a Clearance<'a>) -> HttpView<'a> {
        HttpView {
            clearance: Some(clearance),
            ..self
        }
    }
}

impl shield::rules::Request for HttpView<'_> {
    #[inline]
    fn attr(&self, name: &str) -> Option<&str> {
        match name {
            "path" => Some(self.path),
            "method" => Some(self.method.as_str()),
            "host" => Some(self.host),
            "user_agent" => header_text(self.headers.get(header::USER_AGENT)?),
            "query" => self.query,
            "version" => Some(version_str(self.version)),
            "ja4" => self.ja4,
            "h2_fingerprint" => self.h2_fingerprint,
            // The host as the site was chosen by (lower case, no trailing dot or port, from
            // `Host`, an absolute-form target or `:authority`): `header:host` compared the
            // raw value, and `HH.site.test`, `hh.site.test.`, `:80` or `:authority` passed a
            // rule on `hh.site.test` while the origin served that host.
            "header:host" => Some(self.host),
            _ => {
                let h = name.strip_prefix(shield::rules::attr::HEADER_PREFIX)?;
                header_text(self.headers.get(h)?)
            }
        }
    }

    fn attr_nth(&self, name: &str, n: usize) -> Option<&str> {
        if n == 0 {
            return self.attr(name);
        }
        let h = match name {
            "query" => return self.query_decoded.filter(|_| n == 1),
            "header:host" => return None,
            "user_agent" => "user-agent",
            _ => name.strip_prefix(shield::rules::attr::HEADER_PREFIX)?,
        };
        header_text(self.headers.get_all(h).iter().nth(n)?)
    }

    #[inline]
    fn multi_valued(&self) -> bool {
        // HeaderMap counts fields and distinct names: they differ when a name repeats.
        self.headers.len() != self.headers.keys_len() || self.query_decoded.is_some()
    }

    /// An HTTP request came over a completed TCP handshake: its source is proven, and an
    /// escalation blocks it (every packet) — unless a browser says it sent the request on
    /// another site's behalf (`Sec-Fetch-Site: cross-site`: a page elsewhere made its visitor
    /// load it), which never blocks: such requests are counted apart from the source's own
    /// and their escalations make it a suspect at most (HTTP ignores suspects). A client that
    /// sends the header itself is still refused and limited request by request; only the
    /// block that would make its further packets free is not earned.
    #[inline]
    fn evidence(&self) -> shield::block::Evidence {
        if cross_site(self.headers) || from_elsewhere(self.headers, self.host) {
            shield::block::Evidence::CrossSite
        } else {
            shield::block::Evidence::Http
        }
    }

    fn cleared(&self, difficulty: u8) -> bool {
        self.clearance.is_some_and(|c| c.valid(difficulty))
    }

    fn cleared_since(&self, difficulty: u8, since_unix_s: u64) -> bool {
        let _ = difficulty;
        self.clearance.is_some_and(|c| c.valid_since(since_unix_s))
    }

    /// A browser's request, which a page can make any visitor send (an `<img>` under
    /// `no-referrer` over plain HTTP carries no mark of where it came from): `Sec-Fetch-*`,
    /// or a browser's `User-Agent` (`Mozilla/`, which every browser sends). Its escalation
    /// holds the source for the tenant, challenged, never the block map; a bot that dresses
    /// as a browser gives up only the block map.
    #[inline]
    fn browser(&self) -> bool {
        self.headers.contains_key("sec-fetch-site")
            || self.headers.contains_key("sec-fetch-mode")
            || self.headers.contains_key("sec-fetch-dest")
            || self
                .headers
                .get(header::USER_AGENT)
                .is_some_and(|v| v.as_bytes().starts_with(b"Mozilla/"))
    }
}

/// True when a browser marks the request as sent on another site's behalf
/// (`Sec-Fetch-Site: cross-site`, Fetch Metadata).
pub fn cross_site(headers: &HeaderMap) -> bool {
    headers.get("sec-fetch-site").is_some_and(|v| {
        v.as_bytes()
            .trim_ascii()
            .eq_ignore_ascii_case(b"cross-site")
    })
}

/// True when a request says a page elsewhere made the browser send it, though not as
/// `Sec-Fetch-Site: cross-site`: `same-site` (another host of the registrable domain — maybe
/// another tenant's site), an `Origin` of another host or `null` (a cross-origin form or
/// fetch, which browsers mark so over plain HTTP too), a `Referer` of another host (an
/// `<img>` over plain HTTP, where no `Sec-Fetch-*` is sent). A browser that says
/// `same-origin` or `none` is believed. Counted as [`cross_site`] is: never a block.
pub fn from_elsewhere(headers: &HeaderMap, host: &str) -> bool {
    match headers
        .get("sec-fetch-site")
        .map(|v| v.as_bytes().trim_ascii())
    {
        Some(v) if v.eq_ignore_ascii_case(b"same-site") => return true,
        Some(v) if v.eq_ignore_ascii_case(b"same-origin") || v.eq_ignore_ascii_case(b"none") => {
            return false;
        }
        _ => {}
    }
    let other = |v: &HeaderValue, null: bool| {
        let b = v.as_bytes().trim_ascii();
        if b.eq_ignore_ascii_case(b"null") {
            return null;
        }
        url_host(b).is_some_and(|h| {
            let h = h.strip_suffix(b".").unwrap_or(h);
            !h.eq_ignore_ascii_case(host.as_bytes())
        })
    };
    headers
        .get(http::header::ORIGIN)
        .is_some_and(|v| other(v, true))
        || headers
            .get(http::header::REFERER)
            .is_some_and(|v| other(v, false))
}

/// The host of an absolute URL (`scheme://[userinfo@]host[:port]/...`), without its port.
fn url_host(url: &[u8]) -> Option<&[u8]> {
    let at = url.windows(3).position(|w| w == b"://")? + 3;
    let rest = &url[at..];
    let end = rest
        .iter()
        .position(|&c| matches!(c, b'/' | b'?' | b'#'))
        .unwrap_or(rest.len());
    let auth = &rest[..end];
    let auth = match auth.iter().rposition(|&c| c == b'@') {
        Some(i) => &auth[i + 1..],
        None => auth,
    };
    if let Some(v6) = auth.strip_prefix(b"[") {
        return Some(&v6[..v6.iter().position(|&c| c == b']')?]);
    }
    Some(match auth.iter().rposition(|&c| c == b':') {
        Some(i) => &auth[..i],
        None => auth,
    })
}

/// A header value as text: visible ASCII, or UTF-8 (a value from [`lossy_headers`] always is).
#[inline]
fn header_text(v: &HeaderValue) -> Option<&str> {
    v.to_str()
        .ok()
        .or_else(|| std::str::from_utf8(v.as_bytes()).ok())
}

/// `headers` with every value made UTF-8 (bytes that are not: U+FFFD), when some value is not
/// (`None`, the usual case, when all are): a rule must see a header whose value carries a
/// stray obs-text byte, as the origin gets it, rather than find it absent.
pub fn lossy_headers(headers: &HeaderMap) -> Option<HeaderMap> {
    let utf8 =
        |v: &HeaderValue| v.as_bytes().is_ascii() || std::str::from_utf8(v.as_bytes()).is_ok();
    if headers.values().all(utf8) {
        return None;
    }
    let mut out = HeaderMap::with_capacity(headers.len());
    for (n, v) in headers {
        let v = if utf8(v) {
            v.clone()
        } else {
            // U+FFFD's bytes are obs-text, valid in a header value.
            HeaderValue::from_str(&String::from_utf8_lossy(v.as_bytes()))
                .unwrap_or_else(|_| HeaderValue::from_static(""))
        };
        out.append(n.clone(), v);
    }
    Some(out)
}

/// `headers` with every field whose name holds `_` also under its name with `-` (`X_Role` is
/// `x-role` too), when some name does (`None` otherwise): for a site that passes such names,
/// whose CGI or WSGI origin reads both spellings as one variable (`HTTP_X_ROLE`), as nginx's
/// `$http_x_role` does with `underscores_in_headers on`.
pub fn folded_headers(headers: &HeaderMap) -> Option<HeaderMap> {
    if !headers.keys().any(|k| k.as_str().contains('_')) {
        return None;
    }
    let mut out = headers.clone();
    for (n, v) in headers {
        if n.as_str().contains('_')
            && let Ok(dashed) =
                header::HeaderName::from_bytes(n.as_str().replace('_', "-").as_bytes())
        {
            out.append(dashed, v.clone());
        }
    }
    Some(out)
}

/// The headers an HTTP/2 WebSocket (extended CONNECT, RFC 8441) is forwarded with, as the
/// rules must see them: `upgrade: websocket` and `connection: upgrade`, as the HTTP/1.1
/// request the origin gets carries them.
pub fn websocket_headers(headers: &HeaderMap) -> HeaderMap {
    let mut out = headers.clone();
    out.append(header::UPGRADE, HeaderValue::from_static("websocket"));
    out.append(header::CONNECTION, HeaderValue::from_static("upgrade"));
    out
}

/// `query` percent-decoded, `+` as space, as an origin's framework reads its parameters
/// (bytes that decode to no UTF-8: U+FFFD; a `%` without two hex digits kept as it is; the
/// separators `%26`, `%3D`, `%3B` kept encoded: inside a value they make no parameter of it,
/// `?q=a%26debug%3D1` searches for a text), when that differs from `query` (`None` otherwise).
pub fn decoded_query(query: &str) -> Option<String> {
    let b = query.as_bytes();
    if !b.iter().any(|&c| c == b'%' || c == b'+') {
        return None;
    }
    let (out, _) = crate::target::form_decode_keeping(query, b"&=;");
    let text = match String::from_utf8(out) {
        Ok(t) => t,
        Err(e) => String::from_utf8_lossy(e.as_bytes()).into_owned(),
    };
    (text != query).then_some(text)
}

/// An HTTP version as a request line names it.
pub(crate) fn version_str(v: Version) -> &'static str {
    match v {
        Version::HTTP_2 => "HTTP/2",
        Version::HTTP_10 => "HTTP/1.0",
        Version::HTTP_09 => "HTTP/0.9",
        Version::HTTP_3 => "HTTP/3",
        _ => "HTTP/1.1",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A value's encoded separators make no parameter of it: `?q=a%26debug%3D1` is a search
    /// for the text `a&debug=1`, never `debug=1` (a rule on that denied the search).
    #[test]
    fn the_decoded_query_keeps_encoded_separators() {
        assert_eq!(decoded_query("q=a%26debug%3D1"), None, "as sent");
        assert_eq!(
            decoded_query("q=a%26b%3dc%3Bd+e").as_deref(),
            Some("q=a%26b%3dc%3Bd e")
        );
        assert_eq!(decoded_query("de%62ug=%31").as_deref(), Some("debug=1"));
        assert_eq!(decoded_query("q=%2Bx").as_deref(), Some("q=+x"));
    }

    /// Names with `_` are also seen under their `-` spelling; an HTTP/2 WebSocket carries
    /// the Upgrade the origin gets.
    #[test]
    fn folded_and_websocket_headers() {
        let mut h = HeaderMap::new();
        assert!(folded_headers(&h).is_none());
        h.append("x_role", HeaderValue::from_static("admin"));
        h.append("x-role", HeaderValue::from_static("user"));
        let f = folded_headers(&h).unwrap();
        let roles: Vec<_> = f.get_all("x-role").iter().collect();
        assert_eq!(roles, ["user", "admin"]);
        assert_eq!(f.get("x_role").unwrap(), "admin");
        let w = websocket_headers(&h);
        assert_eq!(w.get(header::UPGRADE).unwrap(), "websocket");
        assert_eq!(w.get(header::CONNECTION).unwrap(), "upgrade");
    }

    #[test]
    fn a_clearance_is_found_among_cookies_of_other_shapes() {
        use crate::challenge::{self, Binding, Keys};
        let keys = Keys::from_fleet(&shield::fleet_key::FleetKey::from_bytes(&[7u8; 32]));
        let b = || Binding {
            site: "a",
            ip: "192.0.2.7".parse().unwrap(),
            version: 1,
        };
        let good = challenge::clearance(&keys, &b(), 2000, 10);
        let other = challenge::clearance(&keys, &Binding { site: "b", ..b() }, 2000, 10);
        let check = |cookie: &str| {
            let mut h = HeaderMap::new();
            h.append(
                header::COOKIE,
                http::HeaderValue::from_bytes(cookie.as_bytes()).unwrap(),
            );
            let c = Clearance::new(&keys, b(), &h, 1000, 10);
            (c.valid(0), c.over_bound())
        };
        // Over plain HTTP the name is the site's and the client's prefix's, which a sibling
        // site cannot know: fakes of the plain name, however many and well spelt, count
        // for nothing.
        let name = challenge::cookie_name(&keys, &b(), false);
        assert!(
            name.starts_with("palisade_clearance_") && name.len() == 31,
            "{name}"
        );
        assert_ne!(
            name,
            challenge::cookie_name(&keys, &Binding { site: "b", ..b() }, false)
        );
        let other_24 = Binding {
            ip: "192.0.3.7".parse().unwrap(),
            ..b()
        };
        assert_ne!(name, challenge::cookie_name(&keys, &other_24, false));
        let plain = format!("palisade_clearance={other}; ").repeat(20);
        assert_eq!(check(&format!("{plain}{name}={good}")), (true, false));
        // Junk under the name, an expired one, a raw UTF-8 cookie beside it.
        let junk =
            format!("{name}=x; ").repeat(12) + &format!("{name}=900.10.{}; ", "0".repeat(32));
        assert_eq!(
            check(&format!("n=J\u{fc}rgen; {junk}{name}={good}")),
            (true, false)
        );
        // Eight well-spelt ones that fail their MAC are checked; the ninth is not.
        let eight = format!("{name}={other}; ").repeat(8);
        assert_eq!(check(&format!("{eight}{name}={good}")), (false, true));
    }

    #[test]
    fn requests_a_page_elsewhere_made_are_told_apart() {
        let h = |pairs: &[(&str, &str)]| {
            let mut m = HeaderMap::new();
            for (k, v) in pairs {
                m.append(
                    http::header::HeaderName::from_bytes(k.as_bytes()).unwrap(),
                    HeaderValue::from_str(v).unwrap(),
                );
            }
            m
        };
        for (pairs, want) in [
            (vec![], false),
            (vec![("sec-fetch-site", "same-site")], true),
            (
                vec![
                    ("sec-fetch-site", "same-origin"),
                    ("referer", "http://evil.test/"),
                ],
                false,
            ),
            (vec![("origin", "http://evil.test")], true),
            (vec![("origin", "null")], true),
            (vec![("origin", "https://A.Test:8443")], false),
            (vec![("referer", "http://evil.test/page?x=1")], true),
            (vec![("referer", "http://u:p@a.test./x")], false),
            (vec![("referer", "null")], false),
            (vec![("referer", "not a url")], false),
            (vec![("origin", "http://[2001:db8::1]:80")], true),
        ] {
            assert_eq!(from_elsewhere(&h(&pairs), "a.test"), want, "{pairs:?}");
        }
    }
}
