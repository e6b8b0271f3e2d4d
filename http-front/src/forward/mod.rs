//! Forwarding to the upstreams: what every exchange shares — the hop-by-hop list and the
//! forwarding-header policy (written once here), the client's forwarding values, the
//! response body type, errors — and, by job: [`h1`] (the HTTP/1.1 exchange, head written
//! straight from the client's headers), [`h2`] (h2c through hyper), [`upstream`] (per-worker
//! pools), [`reqbody`] (request bodies buffered and timed before the upstream is contacted),
//! [`relay`] (response bodies a client that does not read cannot hold an upstream with).

pub mod h1;
pub mod h2;
pub mod relay;
pub mod reqbody;
pub mod upstream;
pub mod websocket;

use std::net::IpAddr;
use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::Bytes;
use http::header::{self, HeaderMap, HeaderName, HeaderValue};
use http::{Response, StatusCode};
use hyper::body::{Body, Frame, Incoming, SizeHint};

use crate::config::Forwarded;
use h1::H1Body;

/// Errors of a streamed body.
pub type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// The response body: one of ours or a complete upstream body (whole), an HTTP/1.1 upstream
/// body streamed from its connection, or an h2c upstream's.
#[derive(Debug)]
pub enum RespBody {
    /// All of it (`None`: empty).
    Full(Option<Bytes>),
    /// Streamed from an HTTP/1.1 upstream connection.
    H1(H1Body),
    /// An h2c upstream's body.
    H2(Incoming),
    /// Either of the two above, read by a relay task into a bounded buffer ([`crate::forward::relay`]).
    Relay(crate::forward::relay::Relayed),
}

impl Body for RespBody {
    type Data = Bytes;
    type Error = BoxError;

    #[inline]
    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        match self.get_mut() {
            RespBody::Full(data) => Poll::Ready(data.take().map(|d| Ok(Frame::data(d)))),
            RespBody::H1(b) => b.poll_data(cx),
            RespBody::H2(b) => Pin::new(b).poll_frame(cx).map_err(Into::into),
            RespBody::Relay(b) => b.poll_data(cx),
        }
    }

    #[inline]
    fn is_end_stream(&self) -> bool {
        match self {
            RespBody::Full(data) => data.is_none(),
            RespBody::H1(b) => b.is_end(),
            RespBody::H2(b) => b.is_end_stream(),
            RespBody::Relay(b) => b.is_end(),
        }
    }

    #[inline]
    fn size_hint(&self) -> SizeHint {
        match self {
            RespBody::Full(data) => {
                SizeHint::with_exact(data.as_ref().map_or(0, |d| d.len() as u64))
            }
            RespBody::H1(b) => b.size_hint(),
            RespBody::H2(b) => b.size_hint(),
            RespBody::Relay(b) => b.size_hint(),
        }
    }
}

impl RespBody {
    /// A body of `data` (empty: none).
    pub fn full(data: Bytes) -> RespBody {
        RespBody::Full((!data.is_empty()).then_some(data))
    }
}

/// Hop-by-hop headers (RFC 9110 §7.6.1, and `Proxy-Connection`), and `Expect` (answered
/// here): never passed on in either direction. Headers a `Connection` header names go too.
pub const HOP_BY_HOP: &[&str] = &[
    "connection",
    "keep-alive",
    "proxy-connection",
    "te",
    "trailer",
    "transfer-encoding",
    "upgrade",
    "expect",
];

/// True when `name` (any case) is hop-by-hop.
#[inline]
pub fn is_hop_by_hop(name: &[u8]) -> bool {
    HOP_BY_HOP
        .iter()
        .any(|h| h.as_bytes().eq_ignore_ascii_case(name))
}

/// The client's forwarding headers (`X-Forwarded-*`, `Forwarded`, `X-Real-IP`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Forwarding {
    /// `X-Forwarded-For`.
    Xff,
    /// `X-Forwarded-Proto`.
    XfProto,
    /// `X-Forwarded-Host`.
    XfHost,
    /// `Forwarded`.
    Forwarded,
    /// `X-Real-IP`.
    XRealIp,
}

impl Forwarding {
    /// Which forwarding header `name` (lower case) is, if any.
    #[inline]
    pub fn of(name: &str) -> Option<Forwarding> {
        Some(match name {
            "x-forwarded-for" => Forwarding::Xff,
            "x-forwarded-proto" => Forwarding::XfProto,
            "x-forwarded-host" => Forwarding::XfHost,
            "forwarded" => Forwarding::Forwarded,
            "x-real-ip" => Forwarding::XRealIp,
            _ => return None,
        })
    }

    /// Whether the client's own header of this kind goes upstream: dropped when we set our
    /// own, or when the client is not trusted to send it (`x_forwarded`/`forwarded` with
    /// `trust_incoming` append to it instead: the caller keeps the client's value for that).
    #[inline]
    pub fn pass_client(self, cfg: &Forwarded, host_known: bool) -> bool {
        match self {
            Forwarding::Xff => !cfg.x_forwarded && cfg.trust_incoming,
            Forwarding::Forwarded => !cfg.forwarded && cfg.trust_incoming,
            Forwarding::XfProto => cfg.trust_incoming && !cfg.x_forwarded,
            Forwarding::XfHost => cfg.trust_incoming && !(cfg.x_forwarded && host_known),
            Forwarding::XRealIp => !cfg.x_real_ip,
        }
    }
}
/// The forwarding headers the proxy sets or drops ([`set_forwarding`]), lower case.
pub const FORWARDING_HEADERS: [&str; 5] = [
    "x-forwarded-for",
    "x-forwarded-proto",
    "x-forwarded-host",
    "forwarded",
    "x-real-ip",
];

static X_FORWARDED_FOR: HeaderName = HeaderName::from_static("x-forwarded-for");
static X_FORWARDED_PROTO: HeaderName = HeaderName::from_static("x-forwarded-proto");
static X_FORWARDED_HOST: HeaderName = HeaderName::from_static("x-forwarded-host");
static FORWARDED: HeaderName = HeaderName::from_static("forwarded");
static X_REAL_IP: HeaderName = HeaderName::from_static("x-real-ip");

/// Headers the proxy sets, frames or refuses twice itself: their `_` spellings never pass.
const PROXY_SET: &[&str] = &[
    "x-forwarded-for",
    "x-forwarded-proto",
    "x-forwarded-host",
    "forwarded",
    "x-real-ip",
    "host",
    "content-length",
    "transfer-encoding",
    "connection",
    "upgrade",
    "te",
    "trailer",
    "keep-alive",
    "proxy-connection",
];

/// Which request headers a site never passes upstream: its `strip_headers`, names with `_`
/// unless `underscores_in_headers` (a CGI origin reads `X_Real_IP` as `X-Real-IP`), and
/// names with any other byte than letters, digits, `-` and `_` (`X.A`, `Authorization.`:
/// nginx's `ignore_invalid_headers` drops them, and an origin that folds such names could
/// read one as a header our rules never saw).
#[derive(Debug, Default, Clone)]
pub struct HeaderPolicy {
    strip: hashbrown::HashSet<Box<str>, foldhash::fast::RandomState>,
    underscores: bool,
}

impl HeaderPolicy {
    /// The policy of a site that strips `strip` (lower case) and passes underscores or not.
    pub fn new(strip: &[String], underscores: bool) -> HeaderPolicy {
        HeaderPolicy {
            strip: strip.iter().map(|s| s.as_str().into()).collect(),
            underscores,
        }
    }

    /// True when names with `_` pass upstream.
    pub fn underscores(&self) -> bool {
        self.underscores
    }

    /// True when the header `name` (lower case) is not passed upstream: also, where names
    /// with `_` pass, one whose `-` spelling is stripped or set by the proxy (`X_Real_IP`,
    /// `X_Forwarded_For`, `Content_Length`: an origin that folds `_` into `-` reads it as
    /// that header).
    #[inline]
    pub fn drops(&self, name: &str) -> bool {
        let mut underscore = false;
        let odd = name.bytes().any(|b| {
            underscore |= b == b'_';
            !(b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
                && (b != b'_' || !self.underscores)
        });
        if odd || (!self.strip.is_empty() && self.strip.contains(name)) {
            return true;
        }
        if underscore {
            let dashed = name.replace('_', "-");
            return self.strip.contains(dashed.as_str()) || PROXY_SET.contains(&dashed.as_str());
        }
        false
    }

    /// Removes from `h` every header this policy drops.
    pub fn apply(&self, h: &mut HeaderMap) {
        if h.keys().any(|k| self.drops(k.as_str())) {
            let names: Vec<HeaderName> = h
                .keys()
                .filter(|k| self.drops(k.as_str()))
                .cloned()
                .collect();
            for n in names {
                h.remove(n);
            }
        }
    }
}

/// What the proxy says about one client connection, formatted once per connection when its
/// first request is forwarded (a connection whose requests are all refused never formats it).
#[derive(Debug)]
pub struct ClientInfo {
    /// `X-Forwarded-For` and `Forwarded` values, made when first asked.
    values: std::sync::OnceLock<(HeaderValue, HeaderValue)>,
    /// `http` or `https`.
    pub proto: HeaderValue,
    /// The client's address and port (a PROXY header's source behind a listed proxy).
    pub src: std::net::SocketAddr,
    /// The address it reached (ours, or the proxy's listener a PROXY header names).
    pub dst: std::net::SocketAddr,
}

impl ClientInfo {
    /// The forwarding values for a client at `src` that reached `dst`, over TLS or not.
    pub fn new(src: std::net::SocketAddr, dst: std::net::SocketAddr, tls: bool) -> ClientInfo {
        ClientInfo {
            values: std::sync::OnceLock::new(),
            proto: HeaderValue::from_static(if tls { "https" } else { "http" }),
            src,
            dst,
        }
    }

    fn values(&self) -> &(HeaderValue, HeaderValue) {
        self.values.get_or_init(|| {
            let ip = self.src.ip().to_canonical();
            let scheme = self.proto.to_str().unwrap_or("http");
            let for_ = match ip {
                IpAddr::V4(a) => format!("for={a};proto={scheme}"),
                IpAddr::V6(a) => format!("for=\"[{a}]\";proto={scheme}"),
            };
            (
                HeaderValue::from_str(&ip.to_string()).expect("an address is a header value"),
                HeaderValue::from_str(&for_).expect("ascii"),
            )
        })
    }

    /// The client address as `X-Forwarded-For` carries it.
    pub fn xff(&self) -> &HeaderValue {
        &self.values().0
    }

    /// `for=...;proto=...` as `Forwarded` carries it (IPv6 quoted and bracketed).
    pub fn forwarded(&self) -> &HeaderValue {
        &self.values().1
    }
}

/// Joins cookie fields sent apart (HTTP/2 may split them) into one, with `"; "`.
pub fn join_cookies(h: &mut HeaderMap) {
    let mut all = h.get_all(header::COOKIE).iter();
    if all.next().is_none() || all.next().is_none() {
        return;
    }
    let mut v = Vec::new();
    for c in h.get_all(header::COOKIE) {
        if !v.is_empty() {
            v.extend_from_slice(b"; ");
        }
        v.extend_from_slice(c.as_bytes());
    }
    if let Ok(joined) = HeaderValue::from_bytes(&v) {
        h.insert(header::COOKIE, joined);
    }
}

/// A response header an origin meant for the proxy in front of it, never for the client:
/// nginx's `X-Accel-*` (an internal redirect's path, buffering and rate orders) and `X-Pad`,
/// which nginx acts on or drops; passed on, they would show clients the origin's paths.
pub fn is_for_the_proxy(name: &[u8]) -> bool {
    (name.len() > 8 && name[..8].eq_ignore_ascii_case(b"x-accel-"))
        || name.eq_ignore_ascii_case(b"x-pad")
}

/// Removes from an origin's response the headers [`is_for_the_proxy`] names.
pub fn strip_for_the_proxy(h: &mut HeaderMap) {
    if !h.keys().any(|k| is_for_the_proxy(k.as_str().as_bytes())) {
        return;
    }
    let names: Vec<header::HeaderName> = h
        .keys()
        .filter(|k| is_for_the_proxy(k.as_str().as_bytes()))
        .cloned()
        .collect();
    for n in names {
        h.remove(n);
    }
}

/// Removes hop-by-hop headers: those named in `Connection`, and [`HOP_BY_HOP`].
pub fn strip_hop_by_hop(h: &mut HeaderMap) {
    if h.contains_key(header::CONNECTION) {
        let named: Vec<HeaderValue> = h.get_all(header::CONNECTION).iter().cloned().collect();
        for v in &named {
            for tok in v.to_str().unwrap_or("").split(',') {
                let t = tok.trim();
                if !t.is_empty() {
                    h.remove(t);
                }
            }
        }
    }
    for name in HOP_BY_HOP {
        h.remove(*name);
    }
}

/// Sets the forwarding headers on a request about to go upstream (a header map: h2c; the
/// HTTP/1.1 path writes the same policy straight into the head, see [`h1`]).
pub fn set_forwarding(
    h: &mut HeaderMap,
    cfg: &Forwarded,
    client: &ClientInfo,
    host: Option<&HeaderValue>,
) {
    // Every field line, in order, as one list (RFC 9110 §5.3); none unless all are printable.
    let joined = |name: &HeaderName| -> Option<String> {
        let mut out = String::new();
        for v in h.get_all(name) {
            if !out.is_empty() {
                out.push_str(", ");
            }
            out.push_str(v.to_str().ok()?);
        }
        (!out.is_empty()).then_some(out)
    };
    let prev_xff = joined(&X_FORWARDED_FOR);
    let prev_fwd = joined(&FORWARDED);
    for (name, kind) in [
        (&X_FORWARDED_FOR, Forwarding::Xff),
        (&X_FORWARDED_PROTO, Forwarding::XfProto),
        (&X_FORWARDED_HOST, Forwarding::XfHost),
        (&FORWARDED, Forwarding::Forwarded),
        (&X_REAL_IP, Forwarding::XRealIp),
    ] {
        if !kind.pass_client(cfg, host.is_some()) {
            h.remove(name);
        }
    }
    let appended = |prev: Option<String>, ours: &HeaderValue| match prev {
        Some(p) if cfg.trust_incoming => {
            HeaderValue::from_str(&format!("{p}, {}", ours.to_str().unwrap_or("")))
                .unwrap_or_else(|_| ours.clone())
        }
        _ => ours.clone(),
    };
    if cfg.x_forwarded {
        h.insert(X_FORWARDED_FOR.clone(), appended(prev_xff, client.xff()));
        h.insert(X_FORWARDED_PROTO.clone(), client.proto.clone());
        if let Some(host) = host {
            h.insert(X_FORWARDED_HOST.clone(), host.clone());
        }
    }
    if cfg.x_real_ip {
        h.insert(X_REAL_IP.clone(), client.xff().clone());
    }
    if cfg.forwarded {
        h.insert(FORWARDED.clone(), appended(prev_fwd, client.forwarded()));
    }
}

/// How a forward ended when it did not produce the upstream's response.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ForwardError {
    /// Connect or protocol failure: 502.
    Upstream,
    /// No response head within the upstream's response timeout: 504.
    Timeout,
    /// No upstream connection could be opened: the process's bound on them is reached (503).
    AtCapacity,
    /// The client's body failed (malformed 400, too large 413, too slow 408).
    Body(crate::forward::reqbody::BodyError),
}

/// A short plain-text response of ours; `close` adds `Connection: close` (HTTP/1.1 only).
pub fn simple(status: StatusCode, body: &'static str, close: bool) -> Response<RespBody> {
    let mut r = Response::new(RespBody::full(Bytes::from_static(body.as_bytes())));
    *r.status_mut() = status;
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    r.headers_mut()
        .insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    if close {
        r.headers_mut()
            .insert(header::CONNECTION, HeaderValue::from_static("close"));
    }
    r
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cookie_fields_are_joined_in_order() {
        let mut h = HeaderMap::new();
        h.append(header::COOKIE, HeaderValue::from_static("a=1"));
        h.append(header::COOKIE, HeaderValue::from_static("b=2"));
        h.append(header::COOKIE, HeaderValue::from_static("c=3"));
        join_cookies(&mut h);
        let all: Vec<_> = h.get_all(header::COOKIE).iter().collect();
        assert_eq!(all, ["a=1; b=2; c=3"]);
        let mut one = HeaderMap::new();
        one.insert(header::COOKIE, HeaderValue::from_static("a=1"));
        join_cookies(&mut one);
        assert_eq!(one[header::COOKIE], "a=1");
    }

    #[test]
    fn hop_by_hop_headers_go() {
        let mut h = HeaderMap::new();
        h.insert(
            header::CONNECTION,
            HeaderValue::from_static("keep-alive, x-secret"),
        );
        h.insert("x-secret", HeaderValue::from_static("1"));
        h.insert("keep-alive", HeaderValue::from_static("timeout=5"));
        h.insert(
            header::TRANSFER_ENCODING,
            HeaderValue::from_static("chunked"),
        );
        h.insert(header::USER_AGENT, HeaderValue::from_static("ua"));
        strip_hop_by_hop(&mut h);
        assert_eq!(h.len(), 1);
        assert!(h.contains_key(header::USER_AGENT));
    }

    #[test]
    fn forwarding_replaces_or_appends() {
        let dst: std::net::SocketAddr = "192.0.2.1:80".parse().unwrap();
        let c4 = ClientInfo::new("192.0.2.7:1".parse().unwrap(), dst, false);
        let c6 = ClientInfo::new("[2001:db8::1]:1".parse().unwrap(), dst, true);
        assert_eq!(c6.forwarded(), "for=\"[2001:db8::1]\";proto=https");
        assert_eq!(c6.xff(), "2001:db8::1");
        let mut h = HeaderMap::new();
        h.insert(&X_FORWARDED_FOR, HeaderValue::from_static("6.6.6.6"));
        h.insert(&FORWARDED, HeaderValue::from_static("for=6.6.6.6"));
        let host = HeaderValue::from_static("example.com");
        let mut h2 = h.clone();
        set_forwarding(&mut h, &Forwarded::default(), &c4, Some(&host));
        assert_eq!(h[&X_FORWARDED_FOR], "192.0.2.7");
        assert_eq!(h[&FORWARDED], "for=192.0.2.7;proto=http");
        assert_eq!(h[&X_FORWARDED_PROTO], "http");
        assert_eq!(h[&X_FORWARDED_HOST], "example.com");
        let trust = Forwarded {
            trust_incoming: true,
            ..Forwarded::default()
        };
        set_forwarding(&mut h2, &trust, &c4, None);
        assert_eq!(h2[&X_FORWARDED_FOR], "6.6.6.6, 192.0.2.7");
        assert_eq!(h2[&FORWARDED], "for=6.6.6.6, for=192.0.2.7;proto=http");
        // Every field line, in order.
        let mut h3 = HeaderMap::new();
        h3.append(&X_FORWARDED_FOR, HeaderValue::from_static("6.6.6.6"));
        h3.append(&X_FORWARDED_FOR, HeaderValue::from_static("198.51.100.2"));
        set_forwarding(&mut h3, &trust, &c4, None);
        assert_eq!(h3[&X_FORWARDED_FOR], "6.6.6.6, 198.51.100.2, 192.0.2.7");
    }
}
