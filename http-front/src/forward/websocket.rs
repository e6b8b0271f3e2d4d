//! WebSocket through the proxy: an HTTP/1.1 `Upgrade: websocket` request, or an HTTP/2
//! extended CONNECT (RFC 8441, `:protocol = websocket`), to a site with `websocket = true`
//! is checked by the rules like any request, then opened to the upstream as an HTTP/1.1
//! upgrade on a connection of its own (with the upstream's PROXY header when it has one),
//! and, once the origin answers 101, tunnelled both ways.
//!
//! An HTTP/2 client sends no `Sec-WebSocket-Key` (RFC 8441 §5): the upgrade to the origin
//! carries one of ours, and the origin's `Sec-WebSocket-Accept` is checked against it. The
//! client gets 101 (HTTP/1.1) or 200 (HTTP/2) with the origin's `Sec-WebSocket-Protocol` and
//! `Sec-WebSocket-Extensions`; an origin that refuses the upgrade has its status passed on
//! (body dropped).
//!
//! A tunnel ends when either side closes (each direction is half-closed on its own), when no
//! byte went either way for `websocket_idle_ms`, after `websocket_max_secs`, when the
//! challenge clearance its upgrade passed on expires, or when its client connection is
//! closed by the front (a block of its source): counted by cause. The
//! tunnel keeps its client connection's place in the per-source registry while it runs, so
//! WebSockets count against `max_connections_per_source` like any connection; an HTTP/2
//! connection's tunnels past its first take a place of their own there (one connection
//! carries many). Each tunnel also
//! holds its origin connection's place among the upstream connections and its source's
//! among requests at origins (`max_upstream_per_source`) until it ends.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use base64::Engine as _;
use bytes::{Bytes, BytesMut};
use http::header::{self, HeaderName, HeaderValue};
use http::{Method, Request, Response, StatusCode};
use hyper::upgrade::OnUpgrade;
use hyper_util::rt::TokioIo;
use sha1::{Digest, Sha1};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::time::{Instant, sleep_until};

use super::upstream::{Conn, Upstream};
use super::{ClientInfo, ForwardError, HeaderPolicy, RespBody};
use crate::config::Forwarded;
use crate::conn_registry::ConnCtl;
use crate::counters::{Counter, Counters};

/// The GUID of the opening handshake (RFC 6455 §1.3).
const GUID: &str = "258EAFA5-E914-47DA-95CA-C5AB0DC85B11";
/// Longest origin answer head to an upgrade.
const HEAD_MAX: usize = 16 * 1024;
/// Bytes copied per read, each way, while data comes in bulk.
const COPY_BUF: usize = 16 * 1024;
/// Bytes a tunnel reads into while it waits, each way.
const SMALL_BUF: usize = 1024;

/// A site's WebSocket bounds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Bounds {
    /// No byte either way for this long: closed.
    pub idle: Duration,
    /// Open this long: closed.
    pub max: Duration,
}

/// Whether `req` asks to open a WebSocket: HTTP/1.1 GET with `Upgrade: websocket` and
/// `Connection: upgrade`, or HTTP/2 CONNECT with `:protocol = websocket`.
pub fn wants<B>(req: &Request<B>) -> bool {
    if req.method() == Method::CONNECT {
        return req
            .extensions()
            .get::<hyper::ext::Protocol>()
            .is_some_and(|p| p.as_str().eq_ignore_ascii_case("websocket"));
    }
    // HTTP/1.1 exactly (RFC 6455 §4.1): an HTTP/1.0 request's Upgrade is a plain header,
    // dropped as hop-by-hop, and the request goes as any other.
    req.method() == Method::GET
        && req.version() == http::Version::HTTP_11
        && has_token(req.headers(), header::UPGRADE, "websocket")
        && has_token(req.headers(), header::CONNECTION, "upgrade")
}

fn has_token(h: &http::HeaderMap, name: HeaderName, token: &str) -> bool {
    h.get_all(name).iter().any(|v| {
        v.as_bytes()
            .split(|&b| b == b',')
            .any(|t| t.trim_ascii().eq_ignore_ascii_case(token.as_bytes()))
    })
}

/// The `Sec-WebSocket-Accept` for `key`.
fn accept_of(key: &[u8]) -> String {
    let mut h = Sha1::new();
    h.update(key);
    h.update(GUID.as_bytes());
    base64::engine::general_purpose::STANDARD.encode(h.finalize())
}

/// What the tunnel needs besides the two connections.
pub struct Tunnel {
    /// The client connection's control block (its close ends the tunnel).
    pub ctl: Arc<ConnCtl>,
    /// The tunnel counted on its client connection (which is busy while it runs).
    pub busy: crate::conn_registry::TunnelGuard,
    /// Counters.
    pub counters: Arc<Counters>,
    /// The site's bounds.
    pub bounds: Bounds,
    /// When the challenge clearance the upgrade passed on expires (Unix seconds): the tunnel
    /// ends then (it outlived it by up to `websocket_max_secs`, a day, where every request
    /// on the same cookie was challenged again).
    pub cleared_until: Option<u64>,
    /// The source's place among its requests at origins (`[server]
    /// max_upstream_per_source`), held while the tunnel runs: an open tunnel holds an origin
    /// connection.
    pub waiting: Option<crate::conn_registry::SourceWaiting>,
    /// An HTTP/2 tunnel's own place in the per-source registry (`max_connections_per_source`,
    /// `max_connections`): one connection carries many streams, each tunnel an origin
    /// connection of its own (an HTTP/1.1 tunnel keeps its connection's place). A block of
    /// the source closes it.
    pub place: Option<crate::conn_registry::ConnGuard>,
    /// Whether the source is held for the site's tenant now (asked each second): the
    /// upgrade was ruled once, and an escalation after it left the tunnel open for a day.
    pub held: Box<dyn Fn() -> bool + Send + Sync>,
}

/// Opens a WebSocket to `up` for the request `parts` whose client connection hands over
/// `on_upgrade`; the answer for the client. The tunnel runs in a task of its own once the
/// client's side is upgraded.
#[allow(clippy::too_many_arguments)]
pub async fn open(
    up: &Upstream,
    parts: &http::request::Parts,
    on_upgrade: OnUpgrade,
    host: Option<&HeaderValue>,
    fwd: &Forwarded,
    policy: &HeaderPolicy,
    client: &ClientInfo,
    tunnel: Tunnel,
) -> Result<Response<RespBody>, ForwardError> {
    let h2 = parts.method == Method::CONNECT;
    // The key the origin answers to: the client's (HTTP/1.1; an HTTP/2 client need not send
    // one, RFC 8441 §5), else one of ours — one key, never two.
    let ours;
    let key: &[u8] = match parts.headers.get(header::SEC_WEBSOCKET_KEY) {
        Some(k) => k.as_bytes(),
        None => {
            let mut raw = [0u8; 16];
            rand::fill(&mut raw);
            ours = base64::engine::general_purpose::STANDARD.encode(raw);
            ours.as_bytes()
        }
    };
    let deadline = Instant::now() + up.cfg.connect_timeout + up.cfg.response_timeout;
    let mut conn = match tokio::time::timeout_at(deadline, Box::pin(up.connect_h1(client))).await {
        Ok(Ok(c)) => c,
        Ok(Err(e)) if super::upstream::at_capacity(&e) => return Err(ForwardError::AtCapacity),
        _ => {
            tracing::debug!(upstream = %up.cfg.name, "no upstream connection for a WebSocket");
            return Err(ForwardError::Upstream);
        }
    };
    conn.wbuf.clear();
    super::h1::encode_upgrade_head(&mut conn.wbuf, parts, host, fwd, policy, client, key);
    let head = match tokio::time::timeout_at(deadline, async {
        conn.io.write_all(&conn.wbuf).await?;
        read_head(&mut conn).await
    })
    .await
    {
        Ok(Ok(h)) => h,
        Ok(Err(e)) => {
            tracing::debug!(upstream = %up.cfg.name, error = %e, "WebSocket upgrade failed");
            return Err(ForwardError::Upstream);
        }
        Err(_) => return Err(ForwardError::Timeout),
    };
    let c = &tunnel.counters;
    if head.status != StatusCode::SWITCHING_PROTOCOLS && h2 && head.status.is_success() {
        // To an HTTP/2 client a 2xx says the tunnel is open (RFC 8441 §5): an origin that
        // answered 200 without upgrading is a bad gateway.
        c.bump(Counter::WsRefused);
        tracing::debug!(upstream = %up.cfg.name, status = %head.status, "WebSocket not upgraded");
        return Err(ForwardError::Upstream);
    }
    if head.status != StatusCode::SWITCHING_PROTOCOLS {
        // The origin refused: its answer, with its body when it is short and framed by its
        // length (an error page; it was dropped), else without.
        c.bump(Counter::WsRefused);
        // No body: 1xx, 204 and 304 (RFC 9112 §6.3), whatever their Content-Length says.
        let bodiless = head.status.is_informational()
            || head.status == StatusCode::NO_CONTENT
            || head.status == StatusCode::NOT_MODIFIED;
        let body = if bodiless {
            None
        } else {
            tokio::time::timeout_at(deadline, refused_body(&mut conn, &head.headers))
                .await
                .ok()
                .flatten()
        };
        // A body announced and not passed on (past the bound, chunked, read to the close,
        // shorter than its length said, or not whole by the deadline): the client gets the
        // head alone.
        let announced = head.headers.contains_key(header::TRANSFER_ENCODING)
            || match head.headers.get(header::CONTENT_LENGTH) {
                Some(v) => std::str::from_utf8(v.as_bytes())
                    .ok()
                    .and_then(|t| t.trim().parse::<u64>().ok())
                    .is_none_or(|n| n > 0),
                None => true,
            };
        if body.is_none() && !bodiless && announced {
            c.bump(Counter::WsRefusedBodyDropped);
        }
        let mut r = Response::new(RespBody::Full(body));
        *r.status_mut() = head.status;
        for (k, v) in head.headers.iter() {
            if !super::is_hop_by_hop(k.as_str().as_bytes()) && k != header::CONTENT_LENGTH {
                r.headers_mut().append(k.clone(), v.clone());
            }
        }
        return Ok(r);
    }
    let expected = accept_of(key);
    if head
        .headers
        .get(header::SEC_WEBSOCKET_ACCEPT)
        .map(HeaderValue::as_bytes)
        != Some(expected.as_bytes())
    {
        tracing::debug!(upstream = %up.cfg.name, "WebSocket upgrade without the right accept");
        return Err(ForwardError::Upstream);
    }
    let mut r = Response::new(RespBody::Full(None));
    *r.status_mut() = if h2 {
        StatusCode::OK
    } else {
        StatusCode::SWITCHING_PROTOCOLS
    };
    let h = r.headers_mut();
    if !h2 {
        // The client's key is the one the origin answered to: the same accept.
        h.insert(header::CONNECTION, HeaderValue::from_static("upgrade"));
        h.insert(header::UPGRADE, HeaderValue::from_static("websocket"));
        h.insert(
            header::SEC_WEBSOCKET_ACCEPT,
            HeaderValue::from_str(&expected).expect("base64 is a header value"),
        );
    }
    for name in [
        header::SEC_WEBSOCKET_PROTOCOL,
        header::SEC_WEBSOCKET_EXTENSIONS,
    ] {
        for v in head.headers.get_all(&name) {
            h.append(name.clone(), v.clone());
        }
    }
    c.bump(Counter::WsOpened);
    let _place_busy = tunnel.place.as_ref().map(|p| p.ctl.tunnel_started());
    tokio::spawn(async move {
        let _place_busy = _place_busy;
        // The whole connection moves in: its place among the open upstream connections
        // (`Slot`) is held as long as the tunnel runs.
        let Conn {
            io, rbuf, _slot, ..
        } = conn;
        let Ok(upgraded) = on_upgrade.await else {
            tunnel.counters.bump(Counter::WsClosedError);
            return;
        };
        let why = relay(TokioIo::new(upgraded), io, rbuf.freeze(), &tunnel).await;
        tunnel.counters.bump(why);
    });
    Ok(r)
}

/// Most of the body of an origin's refusal of an upgrade passed on.
const REFUSED_BODY_MAX: usize = 64 * 1024;

/// The body of an origin's answer that refused an upgrade, when `Content-Length` frames it
/// within [`REFUSED_BODY_MAX`] (`None`: dropped; a chunked or unframed one too).
async fn refused_body(conn: &mut Conn, headers: &http::HeaderMap) -> Option<bytes::Bytes> {
    let mut lengths = headers.get_all(header::CONTENT_LENGTH).iter();
    let n: usize = lengths.next()?.to_str().ok()?.trim().parse().ok()?;
    if lengths.next().is_some() || headers.contains_key(header::TRANSFER_ENCODING) {
        return None;
    }
    if n == 0 || n > REFUSED_BODY_MAX {
        return None;
    }
    while conn.rbuf.len() < n {
        conn.rbuf.reserve(n - conn.rbuf.len());
        if conn.io.read_buf(&mut conn.rbuf).await.ok()? == 0 {
            return None;
        }
    }
    Some(conn.rbuf.split_to(n).freeze())
}

/// The origin's answer head to an upgrade.
struct Head {
    status: StatusCode,
    headers: http::HeaderMap,
}

/// Reads the origin's answer head into `conn.rbuf` and parses it; what follows it stays in
/// `conn.rbuf` (the first WebSocket frames, for the client).
async fn read_head(conn: &mut Conn) -> std::io::Result<Head> {
    let bad = |m: &str| std::io::Error::new(std::io::ErrorKind::InvalidData, m.to_string());
    loop {
        let mut hs = [httparse::EMPTY_HEADER; 64];
        let mut resp = httparse::Response::new(&mut hs);
        match resp.parse(&conn.rbuf) {
            Ok(httparse::Status::Complete(n)) => {
                let code = resp.code.unwrap_or(0);
                if (100..200).contains(&code) && code != 101 {
                    let _ = conn.rbuf.split_to(n);
                    continue;
                }
                let status = StatusCode::from_u16(code).map_err(|_| bad("bad status"))?;
                let mut headers = http::HeaderMap::new();
                for f in resp.headers.iter() {
                    let (Ok(k), Ok(v)) = (
                        HeaderName::from_bytes(f.name.as_bytes()),
                        HeaderValue::from_bytes(f.value),
                    ) else {
                        return Err(bad("bad header"));
                    };
                    headers.append(k, v);
                }
                let _ = conn.rbuf.split_to(n);
                return Ok(Head { status, headers });
            }
            Ok(httparse::Status::Partial) if conn.rbuf.len() < HEAD_MAX => {}
            Ok(httparse::Status::Partial) => return Err(bad("head too large")),
            Err(_) => return Err(bad("malformed head")),
        }
        conn.rbuf.reserve(4096);
        if conn.io.read_buf(&mut conn.rbuf).await? == 0 {
            return Err(bad("closed before answering"));
        }
    }
}

/// Copies `r` to `w` until `r` ends (then half-closes `w`), noting the time of each read in
/// `last` (milliseconds since `start`).
async fn copy_half<R, W>(
    r: &mut R,
    w: &mut W,
    last: &AtomicU64,
    start: Instant,
) -> std::io::Result<()>
where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin,
{
    // A tunnel waits with a small buffer (an idle one held 16 KiB each way: 47 KB a tunnel,
    // nginx 17 KB); a read that fills it takes the big one while the data comes in bulk,
    // given back at the first short read.
    let mut small = [0u8; SMALL_BUF];
    let mut big: Option<BytesMut> = None;
    loop {
        let n = match big.as_mut() {
            Some(b) => {
                b.clear();
                r.read_buf(b).await?
            }
            None => r.read(&mut small).await?,
        };
        if n == 0 {
            let _ = w.shutdown().await;
            return Ok(());
        }
        last.store(start.elapsed().as_millis() as u64, Ordering::Relaxed);
        match &big {
            Some(b) => w.write_all(&b[..n]).await?,
            None => w.write_all(&small[..n]).await?,
        }
        w.flush().await?;
        if big.is_none() && n == SMALL_BUF {
            big = Some(BytesMut::with_capacity(COPY_BUF));
        } else if big.is_some() && n < COPY_BUF {
            big = None;
        }
    }
}

/// How often a tunnel asks whether its source is held for its site's tenant.
const HELD_CHECK: Duration = Duration::from_secs(1);

/// Copies both ways until both sides closed, or a bound ends it; how it ended.
async fn relay<C, U>(client: C, upstream: U, first: Bytes, t: &Tunnel) -> Counter
where
    C: AsyncRead + AsyncWrite + Unpin,
    U: AsyncRead + AsyncWrite + Unpin,
{
    let (mut cr, mut cw) = tokio::io::split(client);
    let (mut ur, mut uw) = tokio::io::split(upstream);
    let start = Instant::now();
    let last = AtomicU64::new(0);
    let both = async {
        if !first.is_empty() {
            cw.write_all(&first).await?;
            cw.flush().await?;
        }
        // A clean end of one direction half-closes the other side; a failed one (a reset, a
        // client gone) ends both at once.
        tokio::try_join!(
            copy_half(&mut cr, &mut uw, &last, start),
            copy_half(&mut ur, &mut cw, &last, start)
        )
    };
    let idle = async {
        loop {
            let at = || start + Duration::from_millis(last.load(Ordering::Relaxed)) + t.bounds.idle;
            sleep_until(at()).await;
            if at() <= Instant::now() {
                return;
            }
        }
    };
    let why = tokio::select! {
        // Both sides done, by a close or a reset: the peers ended it.
        _ = both => Counter::WsClosedEnded,
        () = idle => Counter::WsClosedIdle,
        () = sleep_until(start + t.bounds.max) => Counter::WsClosedMaxAge,
        () = async {
            match t.cleared_until {
                Some(until) => {
                    let left = until.saturating_sub(shield::clock::unix_ms() / 1000);
                    sleep_until(start + Duration::from_secs(left)).await;
                }
                None => std::future::pending().await,
            }
        } => Counter::WsClosedClearance,
        () = t.ctl.closed() => Counter::WsClosedByFront,
        () = async {
            match &t.place {
                Some(p) => p.ctl.closed().await,
                None => std::future::pending().await,
            }
        } => Counter::WsClosedByFront,
        () = async {
            let mut every = tokio::time::interval(HELD_CHECK);
            every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                every.tick().await;
                if (t.held)() {
                    return;
                }
            }
        } => Counter::WsClosedHeld,
    };
    // The front closing the client connection (HTTP/2: the whole connection) may end the
    // copy before the close is seen: it is still the front's doing.
    if why == Counter::WsClosedEnded
        && (t.ctl.cause().is_some() || t.place.as_ref().is_some_and(|p| p.ctl.cause().is_some()))
    {
        Counter::WsClosedByFront
    } else {
        why
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accept_is_rfc_6455s() {
        // RFC 6455 §1.3's example.
        assert_eq!(
            accept_of(b"dGhlIHNhbXBsZSBub25jZQ=="),
            "s3pPLMBiTxaQ9kYGzzhZRbK+xOo="
        );
    }

    #[test]
    fn h1_upgrade_requests() {
        let req = |up: &str, conn: &str| {
            Request::get("/")
                .header(header::UPGRADE, up)
                .header(header::CONNECTION, conn)
                .body(())
                .unwrap()
        };
        assert!(wants(&req("websocket", "Upgrade")));
        assert!(wants(&req("WebSocket", "keep-alive, upgrade")));
        assert!(!wants(&req("h2c", "upgrade")));
        assert!(!wants(&req("websocket", "keep-alive")));
    }
}
