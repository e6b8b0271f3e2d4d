//! Forwarding: hop-by-hop headers out, `X-Forwarded-*` and `Forwarded` in, the request sent through the upstream's pool within its response timeout, and the response cleaned for the client.
//!
//! HTTP/1.1 upstreams are spoken to by [`crate::h1`] (head written straight from the client's
//! headers); h2c upstreams through hyper, with the header map edited here.

use std::net::IpAddr;
use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::Bytes;
use http::header::{self, HeaderMap, HeaderName, HeaderValue};
use http::{Request, Response, StatusCode, Version};
use hyper::body::{Body, Frame, Incoming, SizeHint};

use crate::config::Forwarded;
use crate::h1::{BoxError, H1Body};
use crate::reqbody::ClientBody;
use crate::upstream::Upstream;

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
    /// Either of the two above, read by a relay task into a bounded buffer ([`crate::relay`]).
    Relay(crate::relay::Relayed),
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

static KEEP_ALIVE: HeaderName = HeaderName::from_static("keep-alive");
static PROXY_CONNECTION: HeaderName = HeaderName::from_static("proxy-connection");
static X_FORWARDED_FOR: HeaderName = HeaderName::from_static("x-forwarded-for");
static X_FORWARDED_PROTO: HeaderName = HeaderName::from_static("x-forwarded-proto");
static X_FORWARDED_HOST: HeaderName = HeaderName::from_static("x-forwarded-host");
static FORWARDED: HeaderName = HeaderName::from_static("forwarded");
static X_REAL_IP: HeaderName = HeaderName::from_static("x-real-ip");

/// Which request headers a site never passes upstream: its `strip_headers`, and names with
/// `_` unless `underscores_in_headers` (a CGI origin reads `X_Real_IP` as `X-Real-IP`).
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

    /// True when the header `name` (lower case) is not passed upstream.
    #[inline]
    pub fn drops(&self, name: &str) -> bool {
        (!self.underscores && name.as_bytes().contains(&b'_'))
            || (!self.strip.is_empty() && self.strip.contains(name))
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

/// What the proxy says about one client connection, formatted once per connection.
#[derive(Debug)]
pub struct ClientInfo {
    /// The client address as `X-Forwarded-For` carries it.
    pub xff: HeaderValue,
    /// `for=...;proto=...` as `Forwarded` carries it (IPv6 quoted and bracketed).
    pub forwarded: HeaderValue,
    /// `http` or `https`.
    pub proto: HeaderValue,
}

impl ClientInfo {
    /// The forwarding values for a client at `ip` over TLS or not.
    pub fn new(ip: IpAddr, tls: bool) -> ClientInfo {
        let scheme = if tls { "https" } else { "http" };
        let for_ = match ip {
            IpAddr::V4(a) => format!("for={a};proto={scheme}"),
            IpAddr::V6(a) => format!("for=\"[{a}]\";proto={scheme}"),
        };
        ClientInfo {
            xff: HeaderValue::from_str(&ip.to_string()).expect("an address is a header value"),
            forwarded: HeaderValue::from_str(&for_).expect("ascii"),
            proto: HeaderValue::from_static(scheme),
        }
    }
}

/// Removes hop-by-hop headers: those named in `Connection`, and the fixed list of RFC 9110 §7.6.1.
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
        h.remove(header::CONNECTION);
    }
    for name in [
        &KEEP_ALIVE,
        &PROXY_CONNECTION,
        &header::TE,
        &header::TRAILER,
        &header::TRANSFER_ENCODING,
        &header::UPGRADE,
        &header::EXPECT,
    ] {
        h.remove(name);
    }
}

/// Sets the forwarding headers on a request about to go upstream.
pub fn set_forwarding(
    h: &mut HeaderMap,
    cfg: &Forwarded,
    client: &ClientInfo,
    host: Option<&HeaderValue>,
) {
    if !cfg.trust_incoming {
        h.remove(&X_FORWARDED_FOR);
        h.remove(&X_FORWARDED_PROTO);
        h.remove(&X_FORWARDED_HOST);
        h.remove(&FORWARDED);
    }
    if cfg.x_forwarded {
        let xff = match h.get(&X_FORWARDED_FOR).and_then(|v| v.to_str().ok()) {
            Some(prev) if cfg.trust_incoming => {
                let joined = format!("{prev}, {}", client.xff.to_str().unwrap_or(""));
                HeaderValue::from_str(&joined).unwrap_or_else(|_| client.xff.clone())
            }
            _ => client.xff.clone(),
        };
        h.insert(X_FORWARDED_FOR.clone(), xff);
        h.insert(X_FORWARDED_PROTO.clone(), client.proto.clone());
        if let Some(host) = host {
            h.insert(X_FORWARDED_HOST.clone(), host.clone());
        }
    }
    if cfg.x_real_ip {
        h.insert(X_REAL_IP.clone(), client.xff.clone());
    }
    if cfg.forwarded {
        let fwd = match h.get(&FORWARDED).and_then(|v| v.to_str().ok()) {
            Some(prev) if cfg.trust_incoming => {
                let joined = format!("{prev}, {}", client.forwarded.to_str().unwrap_or(""));
                HeaderValue::from_str(&joined).unwrap_or_else(|_| client.forwarded.clone())
            }
            _ => client.forwarded.clone(),
        };
        h.insert(FORWARDED.clone(), fwd);
    }
}

/// How a forward ended when it did not produce the upstream's response.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ForwardError {
    /// Connect or protocol failure: 502.
    Upstream,
    /// No response head within the upstream's response timeout: 504.
    Timeout,
    /// The client's body failed (malformed 400, too large 413, too slow 408).
    Body(crate::reqbody::BodyError),
}

/// Forwards `req` over this worker's h2c connection to `up`; returns the cleaned response.
pub async fn forward_h2(
    up: &Upstream,
    req: Request<ClientBody>,
    host: Option<HeaderValue>,
    fwd: &Forwarded,
    policy: &HeaderPolicy,
    client: &ClientInfo,
) -> Result<Response<RespBody>, ForwardError> {
    let (mut parts, body) = req.into_parts();
    policy.apply(&mut parts.headers);
    let te_trailers = parts
        .headers
        .get(header::TE)
        .is_some_and(|v| v.as_bytes().eq_ignore_ascii_case(b"trailers"));
    strip_hop_by_hop(&mut parts.headers);
    if te_trailers {
        parts
            .headers
            .insert(header::TE, HeaderValue::from_static("trailers"));
    }
    // `:authority` only (RFC 9113 §8.3.1): an origin refuses a request with both as a
    // duplicate host, and the two could differ.
    parts.headers.remove(header::HOST);
    set_forwarding(&mut parts.headers, fwd, client, host.as_ref());
    parts.uri = up.h2_uri(parts.uri.path_and_query(), host.as_ref());
    parts.version = Version::HTTP_2;
    let req = Request::from_parts(parts, body);
    let send =
        async {
            let mut sender = up.h2_sender().await.map_err(|e| {
                tracing::debug!(upstream = %up.cfg.name, error = %e, "no h2c connection");
                ForwardError::Upstream
            })?;
            sender.ready().await.map_err(|e| {
                tracing::debug!(upstream = %up.cfg.name, error = %e, "h2c connection failed");
                ForwardError::Upstream
            })?;
            sender.send_request(req).await.map_err(|e| match body_error(&e) {
            Some(b) => ForwardError::Body(b),
            None => {
                tracing::debug!(upstream = %up.cfg.name, error = %e, "upstream request failed");
                ForwardError::Upstream
            }
        })
        };
    let resp = match tokio::time::timeout(up.cfg.response_timeout, send).await {
        Err(_) => return Err(ForwardError::Timeout),
        Ok(r) => r?,
    };
    let (mut parts, body) = resp.into_parts();
    strip_hop_by_hop(&mut parts.headers);
    parts.version = Version::HTTP_11;
    Ok(Response::from_parts(parts, RespBody::H2(body)))
}

/// The client body's own error, when that is what failed the exchange.
fn body_error(e: &(dyn std::error::Error + 'static)) -> Option<crate::reqbody::BodyError> {
    let mut cur: Option<&(dyn std::error::Error + 'static)> = Some(e);
    while let Some(err) = cur {
        if let Some(b) = err.downcast_ref::<crate::reqbody::BodyError>() {
            return Some(*b);
        }
        cur = err.source();
    }
    None
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
        let c4 = ClientInfo::new("192.0.2.7".parse().unwrap(), false);
        let c6 = ClientInfo::new("2001:db8::1".parse().unwrap(), true);
        assert_eq!(c6.forwarded, "for=\"[2001:db8::1]\";proto=https");
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
    }
}
