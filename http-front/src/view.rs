//! The request as shield's rules see it: `path` (normalised, see [`crate::target`]), `query`, `method`, `host`, `user_agent`, `version`, `header:<lower-case name>` (every value of a header sent more than once is matched).

use std::cell::Cell;

use http::header::{self, HeaderMap};
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
    memo: Cell<Option<bool>>,
    /// More clearance cookies came than are checked.
    over: Cell<bool>,
}

/// Clearance cookies checked per request at most (each costs an HMAC).
const MAX_COOKIES_CHECKED: usize = 4;

impl<'a> Clearance<'a> {
    /// The clearance `headers` may carry for `binding`, at `now_secs` (unix).
    pub fn new(
        keys: &'a Keys,
        binding: Binding<'a>,
        headers: &'a HeaderMap,
        now_secs: u64,
    ) -> Clearance<'a> {
        Clearance {
            keys,
            binding,
            headers,
            now_secs,
            memo: Cell::new(None),
            over: Cell::new(false),
        }
    }

    /// True when the request carries a valid clearance.
    pub fn valid(&self) -> bool {
        if let Some(v) = self.memo.get() {
            return v;
        }
        let mut v = false;
        for (i, c) in challenge::cookie_values(self.headers, challenge::COOKIE).enumerate() {
            if i == MAX_COOKIES_CHECKED {
                self.over.set(true);
                break;
            }
            if challenge::clearance_valid(self.keys, &self.binding, c, self.now_secs) {
                v = true;
                break;
            }
        }
        self.memo.set(Some(v));
        v
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

    /// Whether a challenge rule asked, and what the answer was (`None`: none asked).
    pub fn asked(&self) -> Option<bool> {
        self.memo.get()
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
            host,
            path,
            clearance: None,
            ja4: None,
            h2_fingerprint: None,
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
            "user_agent" => self.headers.get(header::USER_AGENT)?.to_str().ok(),
            "query" => self.query,
            "version" => Some(version_str(self.version)),
            "ja4" => self.ja4,
            "h2_fingerprint" => self.h2_fingerprint,
            _ => {
                let h = name.strip_prefix(shield::rules::attr::HEADER_PREFIX)?;
                self.headers.get(h)?.to_str().ok()
            }
        }
    }

    fn attr_nth(&self, name: &str, n: usize) -> Option<&str> {
        if n == 0 {
            return self.attr(name);
        }
        let h = match name {
            "user_agent" => "user-agent",
            _ => name.strip_prefix(shield::rules::attr::HEADER_PREFIX)?,
        };
        self.headers.get_all(h).iter().nth(n)?.to_str().ok()
    }

    #[inline]
    fn multi_valued(&self) -> bool {
        // HeaderMap counts fields and distinct names: they differ when a name repeats.
        self.headers.len() != self.headers.keys_len()
    }

    /// An HTTP request came over a completed TCP handshake: its source is proven, and an
    /// escalation blocks it (every packet).
    #[inline]
    fn evidence(&self) -> shield::block::Evidence {
        shield::block::Evidence::Http
    }

    fn cleared(&self) -> bool {
        self.clearance.is_some_and(Clearance::valid)
    }
}

fn version_str(v: Version) -> &'static str {
    match v {
        Version::HTTP_2 => "HTTP/2",
        Version::HTTP_10 => "HTTP/1.0",
        Version::HTTP_09 => "HTTP/0.9",
        Version::HTTP_3 => "HTTP/3",
        _ => "HTTP/1.1",
    }
}
