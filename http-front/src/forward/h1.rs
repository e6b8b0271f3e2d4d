//! The HTTP/1.1 exchange with an upstream, driven inline in the task of the request it carries.
//!
//! The request head is written in one pass straight from the client's header map: hop-by-hop
//! headers (RFC 9110 §7.6.1, and those `Connection` names) and the client's forwarding headers
//! are skipped as they are met, ours are appended, and the body is framed from what hyper
//! decoded of the client's (`Content-Length` when its length is known, else chunked) — no
//! header map is edited, nothing is allocated but the head buffer the connection keeps.
//!
//! The response head is parsed with `httparse`; header values are slices of the read buffer.
//! A body already complete in the buffer (the common small response) is handed over whole and
//! the connection goes back to the pool before the client has seen a byte; any other body
//! streams from the connection ([`H1Body`]), which returns to the pool when the body ends.
//! A reused connection that the server closed before answering (the keep-alive race) is
//! retried once on a fresh connection, for requests without a body and an idempotent method.

use std::future::{Future, poll_fn};
use std::io;
use std::io::Write as _;
use std::mem::MaybeUninit;
use std::pin::{Pin, pin};
use std::task::{Context, Poll, ready};

use bytes::{Buf, Bytes, BytesMut};
use http::header::{self, HeaderMap, HeaderName, HeaderValue};
use http::{Method, Response, StatusCode};
use hyper::body::{Frame, SizeHint};
use tokio::io::{AsyncRead, AsyncWriteExt, ReadBuf};
use tokio::time::Sleep;

use super::reqbody::ClientBody;
use super::upstream::{Conn, PoolKey, READ_BUF, Upstream, checkin};
use super::{ClientInfo, ForwardError, Forwarding, HeaderPolicy, RespBody};
use crate::config::Forwarded;

/// Most header fields in an upstream's response head (nginx takes what fits its 4 KB
/// buffer: a hundred and more `Set-Cookie` lines pass there).
const MAX_HEADERS: usize = 256;
/// Longest upstream response head.
const HEAD_MAX: usize = 64 * 1024;
/// Longest chunk-size line (with extensions).
const CHUNK_LINE_MAX: usize = 4 * 1024;
/// Most bytes of chunked trailers (read and dropped).
const TRAILERS_MAX: usize = 16 * 1024;
/// Least free space offered to one read.
const MIN_READ: usize = 2 * 1024;
/// Chunks up to this size are copied behind their size line and written with it.
const CHUNK_COPY_MAX: usize = 16 * 1024;

/// Upstream response bodies ended because no byte came within the upstream's response
/// timeout (shown in /metrics).
pub static BODY_STALLS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

pub use super::BoxError;

/// How the request body goes upstream.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum ReqBody {
    /// No body; `Content-Length: 0` when the client sent one.
    None { zero_length: bool },
    /// `Content-Length`.
    Length(u64),
    /// `Transfer-Encoding: chunked`.
    Chunked,
}

/// What the head writer does with a client header.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Class {
    Pass,
    /// Hop-by-hop, or framing we write ourselves (`Content-Length`).
    Hop,
    /// A forwarding header (policy in [`super::Forwarding`]).
    Fwd(Forwarding),
    /// `Host`: replaced by the one the site was chosen by.
    Host,
}

#[inline]
fn classify(name: &str) -> Class {
    if name == "host" {
        return Class::Host;
    }
    if name == "content-length" || super::is_hop_by_hop(name.as_bytes()) {
        return Class::Hop;
    }
    match Forwarding::of(name) {
        Some(f) => Class::Fwd(f),
        None => Class::Pass,
    }
}

/// The comma-separated tokens of a header value, trimmed, empty ones skipped.
fn tokens(v: &[u8]) -> impl Iterator<Item = &[u8]> {
    v.split(|&b| b == b',')
        .map(<[u8]>::trim_ascii)
        .filter(|t| !t.is_empty())
}

/// Whether the line at the start of `b` has an LF not preceded by CR.
fn bare_lf_in_line(b: &[u8]) -> bool {
    match b.iter().position(|&c| c == b'\n') {
        Some(0) => true,
        Some(i) => b[i - 1] != b'\r',
        None => false,
    }
}

fn named_in_connection(h: &HeaderMap, name: &str) -> bool {
    h.get_all(header::CONNECTION)
        .iter()
        .any(|v| tokens(v.as_bytes()).any(|t| t.eq_ignore_ascii_case(name.as_bytes())))
}

#[inline]
fn put(dst: &mut Vec<u8>, name: &str, value: &[u8]) {
    dst.extend_from_slice(name.as_bytes());
    dst.extend_from_slice(b": ");
    dst.extend_from_slice(value);
    dst.extend_from_slice(b"\r\n");
}

/// Writes the request head for the upstream into `dst`.
fn encode_head(
    dst: &mut Vec<u8>,
    parts: &http::request::Parts,
    host: Option<&HeaderValue>,
    fwd: &Forwarded,
    policy: &HeaderPolicy,
    client: &ClientInfo,
    body: ReqBody,
) {
    encode_head_as(
        dst,
        parts.method.as_str(),
        parts,
        host,
        fwd,
        policy,
        client,
        body,
    );
}

/// Writes the upgrade head of a WebSocket for the upstream into `dst`: the request as
/// [`encode_head`] writes it, as a GET, with `Connection: upgrade`, `Upgrade: websocket`
/// and, for an HTTP/2 client (RFC 8441 sends neither), `key` and the version.
pub(crate) fn encode_upgrade_head(
    dst: &mut Vec<u8>,
    parts: &http::request::Parts,
    host: Option<&HeaderValue>,
    fwd: &Forwarded,
    policy: &HeaderPolicy,
    client: &ClientInfo,
    key: &[u8],
) {
    let none = ReqBody::None { zero_length: false };
    encode_head_as(dst, "GET", parts, host, fwd, policy, client, none);
    dst.truncate(dst.len() - 2);
    put(dst, "connection", b"upgrade");
    put(dst, "upgrade", b"websocket");
    // HTTP/2's extended CONNECT carries no key unless its client sent one (then passed as
    // it came, and `key` is that one).
    if parts.method == Method::CONNECT && !parts.headers.contains_key(header::SEC_WEBSOCKET_KEY) {
        put(dst, "sec-websocket-key", key);
    }
    if parts.method == Method::CONNECT && !parts.headers.contains_key(header::SEC_WEBSOCKET_VERSION)
    {
        put(dst, "sec-websocket-version", b"13");
    }
    dst.extend_from_slice(b"\r\n");
}

#[allow(clippy::too_many_arguments)]
fn encode_head_as(
    dst: &mut Vec<u8>,
    method: &str,
    parts: &http::request::Parts,
    host: Option<&HeaderValue>,
    fwd: &Forwarded,
    policy: &HeaderPolicy,
    client: &ClientInfo,
    body: ReqBody,
) {
    dst.extend_from_slice(method.as_bytes());
    dst.push(b' ');
    // Origin-form always: an absolute-form target with an empty path (`http://h?q`) is
    // `/?q` (RFC 9112 §3.2.1, RFC 3986 §6.2.3), never `?q`.
    let target = parts.uri.path_and_query().map_or("/", |p| p.as_str());
    if !target.starts_with('/') {
        dst.push(b'/');
    }
    dst.extend_from_slice(target.as_bytes());
    dst.extend_from_slice(b" HTTP/1.1\r\n");
    let h = &parts.headers;
    // Exactly one Host, the one the site was chosen by: a client's second Host, or one named
    // in its Connection, must not send the request to another site than the rules saw.
    if let Some(v) = host {
        put(dst, "host", v.as_bytes());
    }
    let conn_names = h.contains_key(header::CONNECTION);
    let trust = fwd.trust_incoming;
    let (mut prev_xff, mut prev_fwd) = (None, None);
    for (name, value) in h {
        let keep = match classify(name.as_str()) {
            Class::Pass => {
                !(policy.drops(name.as_str())
                    || (conn_names && named_in_connection(h, name.as_str())))
            }
            Class::Hop | Class::Host => false,
            Class::Fwd(Forwarding::Xff) if fwd.x_forwarded => {
                prev_xff = prev_xff.or(Some(value));
                false
            }
            Class::Fwd(Forwarding::Forwarded) if fwd.forwarded => {
                prev_fwd = prev_fwd.or(Some(value));
                false
            }
            Class::Fwd(f) => f.pass_client(fwd, host.is_some()) && !policy.drops(name.as_str()),
        };
        if keep {
            put(dst, name.as_str(), value.as_bytes());
        }
    }
    // Ours appended to the client's own only behind a trusted proxy, and only when printable:
    // every field line of it in order, one list (RFC 9110 §5.3; a hop that appends a line of
    // its own, as HAProxy does, would otherwise lose it to the client's first).
    let list = |dst: &mut Vec<u8>, name: &str, prev: Option<&HeaderValue>, ours: &HeaderValue| {
        dst.extend_from_slice(name.as_bytes());
        dst.extend_from_slice(b": ");
        if prev.is_some() && trust && h.get_all(name).iter().all(|v| v.to_str().is_ok()) {
            for p in h.get_all(name) {
                dst.extend_from_slice(p.as_bytes());
                dst.extend_from_slice(b", ");
            }
        }
        dst.extend_from_slice(ours.as_bytes());
        dst.extend_from_slice(b"\r\n");
    };
    if fwd.x_forwarded {
        list(dst, "x-forwarded-for", prev_xff, client.xff());
        put(dst, "x-forwarded-proto", client.proto.as_bytes());
        if let Some(v) = host {
            put(dst, "x-forwarded-host", v.as_bytes());
        }
    }
    if fwd.forwarded {
        list(dst, "forwarded", prev_fwd, client.forwarded());
    }
    if fwd.x_real_ip {
        put(dst, "x-real-ip", client.xff().as_bytes());
    }
    match body {
        ReqBody::None { zero_length: true } => dst.extend_from_slice(b"content-length: 0\r\n"),
        ReqBody::None { .. } => {}
        ReqBody::Length(n) => {
            let _ = write!(dst, "content-length: {n}\r\n");
        }
        ReqBody::Chunked => dst.extend_from_slice(b"transfer-encoding: chunked\r\n"),
    }
    dst.extend_from_slice(b"\r\n");
}

/// How the response body is delimited.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum RespFraming {
    Empty,
    Length(u64),
    Chunked,
    /// Until the server closes (the connection is not reused).
    Eof,
}

/// A parsed response head.
#[derive(Debug)]
struct Head {
    status: StatusCode,
    headers: HeaderMap,
    framing: RespFraming,
    keep_alive: bool,
}

/// A response the proxy cannot pass on.
#[derive(Debug)]
struct BadResponse(&'static str);

/// Parses a response head at the start of `rbuf` (skipping interim 1xx responses); `None`
/// while it is incomplete. The head's bytes leave `rbuf`; header values point into them.
fn parse_head(rbuf: &mut BytesMut, head_req: bool) -> Result<Option<Head>, BadResponse> {
    loop {
        let mut raw = [const { MaybeUninit::<httparse::Header<'_>>::uninit() }; MAX_HEADERS];
        let mut resp = httparse::Response::new(&mut []);
        let n = match httparse::ParserConfig::default().parse_response_with_uninit_headers(
            &mut resp,
            &rbuf[..],
            &mut raw,
        ) {
            Ok(httparse::Status::Complete(n)) => n,
            Ok(httparse::Status::Partial) if rbuf.len() < HEAD_MAX => return Ok(None),
            Ok(httparse::Status::Partial) => return Err(BadResponse("response head too large")),
            Err(_) => return Err(BadResponse("malformed response head")),
        };
        let code = resp.code.unwrap_or(0);
        if (100..200).contains(&code) {
            if code == 101 {
                return Err(BadResponse("unexpected protocol switch"));
            }
            rbuf.advance(n);
            continue;
        }
        let status =
            StatusCode::from_u16(code).map_err(|_| BadResponse("malformed status code"))?;
        let http10 = resp.version == Some(0);
        let mut keep_alive = !http10;
        let (mut te, mut chunked, mut cl, mut cl_bad, mut conn_names) =
            (false, false, None::<u64>, false, false);
        let base = rbuf.as_ptr() as usize;
        let mut spans = [(0u32, 0u32, 0u32, 0u32); MAX_HEADERS];
        let count = resp.headers.len();
        for (i, f) in resp.headers.iter().enumerate() {
            let name = f.name.as_bytes();
            if name.eq_ignore_ascii_case(b"connection") {
                for t in tokens(f.value) {
                    if t.eq_ignore_ascii_case(b"close") {
                        keep_alive = false;
                    } else if t.eq_ignore_ascii_case(b"keep-alive") {
                        keep_alive |= http10;
                    } else {
                        conn_names = true;
                    }
                }
            } else if name.eq_ignore_ascii_case(b"transfer-encoding") {
                te = true;
                chunked = tokens(f.value)
                    .last()
                    .is_some_and(|t| t.eq_ignore_ascii_case(b"chunked"));
            } else if name.eq_ignore_ascii_case(b"content-length") {
                let v = f.value.trim_ascii();
                // At most 2^63-1, as nginx reads it (an off_t): a larger one is invalid.
                let parsed = (!v.is_empty() && v.len() <= 19 && v.iter().all(u8::is_ascii_digit))
                    .then(|| v.iter().fold(0u64, |a, d| a * 10 + u64::from(d - b'0')))
                    .filter(|n| *n <= i64::MAX as u64);
                match (parsed, cl) {
                    (Some(x), Some(prev)) if x != prev => cl_bad = true,
                    (Some(x), _) => cl = Some(x),
                    (None, _) => cl_bad = true,
                }
            }
            spans[i] = (
                (name.as_ptr() as usize - base) as u32,
                name.len() as u32,
                (f.value.as_ptr() as usize - base) as u32,
                f.value.len() as u32,
            );
        }
        let framing = if head_req || code == 204 || code == 304 {
            // A head that announces a body where none may follow — a transfer coding, or a
            // length on a 204 (which carries none, RFC 9110 §8.6): should the origin send
            // that body after all, late, it would answer whichever request next took the
            // connection from the pool — another client's. Not reused. A HEAD's or a 304's
            // length is the GET's (§9.3.2, §15.4.5): kept (else every HEAD and conditional
            // GET would cost the origin a new connection, a lever for any client).
            if te || cl_bad || (code == 204 && cl.is_some_and(|n| n > 0)) {
                keep_alive = false;
            }
            RespFraming::Empty
        } else if te {
            // A length next to a coding is ignored, and the connection not reused (RFC 9112
            // §6.3); nor after a coding in HTTP/1.0, which has none: its framing is taken
            // for faulty (§6.1), whatever `Connection: keep-alive` says, else what follows
            // the body would answer the next request on the connection.
            keep_alive &= chunked && cl.is_none() && !cl_bad && !http10;
            if chunked {
                RespFraming::Chunked
            } else {
                RespFraming::Eof
            }
        } else if cl_bad {
            return Err(BadResponse("invalid Content-Length"));
        } else {
            match cl {
                Some(0) => RespFraming::Empty,
                Some(n) => RespFraming::Length(n),
                None => {
                    keep_alive = false;
                    RespFraming::Eof
                }
            }
        };
        let head = rbuf.split_to(n).freeze();
        let mut headers = HeaderMap::with_capacity(count);
        for &(no, nl, vo, vl) in &spans[..count] {
            let name = &head[no as usize..(no + nl) as usize];
            // With a transfer coding the length is not the body's: hyper frames it anew. A 204
            // carries none (RFC 9110 §8.6): an HTTP/2 client takes one for a protocol error.
            if super::is_hop_by_hop(name)
                || super::is_for_the_proxy(name)
                || ((te || code == 204) && name.eq_ignore_ascii_case(b"content-length"))
            {
                continue;
            }
            let name =
                HeaderName::from_bytes(name).map_err(|_| BadResponse("malformed header name"))?;
            let value = HeaderValue::from_maybe_shared(head.slice(vo as usize..(vo + vl) as usize))
                .map_err(|_| BadResponse("malformed header value"))?;
            headers.append(name, value);
        }
        if conn_names {
            for &(no, nl, vo, vl) in &spans[..count] {
                if head[no as usize..(no + nl) as usize].eq_ignore_ascii_case(b"connection") {
                    for t in tokens(&head[vo as usize..(vo + vl) as usize]) {
                        if let Ok(t) = std::str::from_utf8(t) {
                            headers.remove(t);
                        }
                    }
                }
            }
        }
        return Ok(Some(Head {
            status,
            headers,
            framing,
            keep_alive,
        }));
    }
}

/// The chunk-size line `buf` (not empty) starts with: `Ok(Some((length, size)))`,
/// `Ok(None)` while more of it is to come, `Err` when malformed. httparse takes an empty or
/// extension-only line for size 0, and a bare LF in an extension: a size line must start
/// with a hex digit and hold no LF before its CRLF.
fn chunk_size_line(buf: &[u8]) -> Result<Option<(usize, u64)>, ()> {
    if !buf[0].is_ascii_hexdigit() || bare_lf_in_line(buf) {
        return Err(());
    }
    match httparse::parse_chunk_size(buf) {
        Ok(httparse::Status::Complete((used, size))) => Ok(Some((used, size))),
        Ok(httparse::Status::Partial) if buf.len() < CHUNK_LINE_MAX => Ok(None),
        _ => Err(()),
    }
}

/// True when `rbuf` (a chunked body's first bytes) starts with a chunk-size line the body's
/// decoder refuses.
fn malformed_first_chunk(rbuf: &[u8]) -> bool {
    !rbuf.is_empty() && chunk_size_line(rbuf).is_err()
}

/// One read from `io` into `buf`'s free space (made at least [`MIN_READ`]); 0 at EOF.
fn poll_fill(
    io: &mut super::upstream::UpIo,
    buf: &mut BytesMut,
    cx: &mut Context<'_>,
) -> Poll<io::Result<usize>> {
    if buf.capacity() - buf.len() < MIN_READ {
        buf.reserve(READ_BUF.max(buf.len()));
    }
    let mut rb = ReadBuf::uninit(buf.spare_capacity_mut());
    ready!(Pin::new(io).poll_read(cx, &mut rb))?;
    let n = rb.filled().len();
    // SAFETY: `poll_read` initialised the first `n` bytes of the spare capacity.
    unsafe { buf.set_len(buf.len() + n) };
    Poll::Ready(Ok(n))
}

async fn fill(conn: &mut Conn) -> io::Result<usize> {
    poll_fn(|cx| poll_fill(&mut conn.io, &mut conn.rbuf, cx)).await
}

/// Why no response head came.
enum ReadError {
    /// The server closed (or reset) before sending a byte.
    ClosedEarly,
    /// Anything else.
    Failed,
}

async fn read_head(conn: &mut Conn, head_req: bool) -> Result<Head, ReadError> {
    let mut got = false;
    loop {
        if !conn.rbuf.is_empty() {
            match parse_head(&mut conn.rbuf, head_req) {
                Ok(Some(h)) => return Ok(h),
                Ok(None) => {}
                Err(e) => {
                    tracing::debug!(error = e.0, "bad upstream response");
                    return Err(ReadError::Failed);
                }
            }
        }
        match fill(conn).await {
            Ok(0) | Err(_) if !got => return Err(ReadError::ClosedEarly),
            Ok(0) | Err(_) => return Err(ReadError::Failed),
            Ok(_) => got = true,
        }
    }
}

/// Sends the client's body upstream in `framing`: its buffered part, then the rest as it
/// arrives (under the body's own bounds).
async fn send_body(
    conn: &mut Conn,
    body: &mut ClientBody,
    framing: ReqBody,
) -> Result<(), ForwardError> {
    let up_err = |_| ForwardError::Upstream;
    let mut sent: u64 = 0;
    while let Some(data) = poll_fn(|cx| body.poll_next(cx)).await {
        let data = data.map_err(ForwardError::Body)?;
        sent += data.len() as u64;
        match framing {
            ReqBody::Length(n) => {
                if sent > n {
                    return Err(ForwardError::Body(
                        crate::forward::reqbody::BodyError::Malformed,
                    ));
                }
                conn.io.write_all(&data).await.map_err(up_err)?;
            }
            ReqBody::Chunked => {
                conn.wbuf.clear();
                let _ = write!(conn.wbuf, "{:x}\r\n", data.len());
                if data.len() <= CHUNK_COPY_MAX {
                    conn.wbuf.extend_from_slice(&data);
                    conn.wbuf.extend_from_slice(b"\r\n");
                    conn.io.write_all(&conn.wbuf).await.map_err(up_err)?;
                } else {
                    conn.io.write_all(&conn.wbuf).await.map_err(up_err)?;
                    conn.io.write_all(&data).await.map_err(up_err)?;
                    conn.io.write_all(b"\r\n").await.map_err(up_err)?;
                }
            }
            ReqBody::None { .. } => return Err(ForwardError::Upstream),
        }
    }
    match framing {
        ReqBody::Chunked => conn.io.write_all(b"0\r\n\r\n").await.map_err(up_err),
        ReqBody::Length(n) if sent != n => Err(ForwardError::Body(
            crate::forward::reqbody::BodyError::Malformed,
        )),
        _ => Ok(()),
    }
}

fn idempotent(m: &Method) -> bool {
    matches!(
        *m,
        Method::GET | Method::HEAD | Method::OPTIONS | Method::TRACE | Method::PUT | Method::DELETE
    )
}

/// Polls `fut` until it is ready, or until `deadline` passes.
async fn timed<F: Future>(deadline: Pin<&mut Sleep>, fut: F) -> Result<F::Output, ForwardError> {
    let mut fut = pin!(fut);
    let mut deadline = deadline;
    poll_fn(|cx| {
        if let Poll::Ready(v) = fut.as_mut().poll(cx) {
            return Poll::Ready(Ok(v));
        }
        match deadline.as_mut().poll(cx) {
            Poll::Ready(()) => Poll::Ready(Err(ForwardError::Timeout)),
            Poll::Pending => Poll::Pending,
        }
    })
    .await
}

/// Sends the request (`parts`, `body`) to the HTTP/1.1 upstream `up` and returns its
/// response; the head must come within the upstream's response timeout.
#[allow(clippy::too_many_arguments)]
pub(crate) async fn forward(
    up: &Upstream,
    parts: &http::request::Parts,
    body: &mut ClientBody,
    host: Option<&HeaderValue>,
    fwd: &Forwarded,
    policy: &HeaderPolicy,
    client: &ClientInfo,
) -> Result<Response<RespBody>, ForwardError> {
    let framing = if body.is_empty() {
        ReqBody::None {
            zero_length: parts.headers.contains_key(header::CONTENT_LENGTH),
        }
    } else {
        match body.len() {
            Some(n) => ReqBody::Length(n),
            None => ReqBody::Chunked,
        }
    };
    let head_req = parts.method == Method::HEAD;
    // A body held whole in memory can be sent again; a streamed one cannot.
    let retry_ok = body.is_complete() && idempotent(&parts.method);
    let mut deadline = pin!(tokio::time::sleep(up.cfg.response_timeout));
    let mut fresh = false;
    let (mut conn, head) = loop {
        let pooled = if fresh { None } else { up.checkout() };
        let reused = pooled.is_some();
        let mut conn = match pooled {
            Some(c) => c,
            // Boxed: a connect is rare, and its future is large.
            None => timed(deadline.as_mut(), Box::pin(up.connect_h1(client)))
                .await?
                .map_err(|e| {
                    if crate::forward::upstream::at_capacity(&e) {
                        return ForwardError::AtCapacity;
                    }
                    tracing::debug!(upstream = %up.cfg.name, error = %e, "no upstream connection");
                    ForwardError::Upstream
                })?,
        };
        conn.wbuf.clear();
        encode_head(&mut conn.wbuf, parts, host, fwd, policy, client, framing);
        let Conn { io, wbuf, .. } = &mut conn;
        if let Err(e) = timed(deadline.as_mut(), io.write_all(wbuf)).await? {
            if reused && retry_ok && body.rewind() {
                fresh = true;
                continue;
            }
            tracing::debug!(upstream = %up.cfg.name, error = %e, "upstream write failed");
            return Err(ForwardError::Upstream);
        }
        if !matches!(framing, ReqBody::None { .. }) {
            // Boxed: requests with a body are the rarer ones. The body has its own bounds
            // (body_timeout_ms, the minimum rate), not the response timeout.
            Box::pin(send_body(&mut conn, body, framing)).await?;
            deadline
                .as_mut()
                .reset(tokio::time::Instant::now() + up.cfg.response_timeout);
        }
        match timed(deadline.as_mut(), read_head(&mut conn, head_req)).await? {
            Ok(h) => break (conn, h),
            Err(ReadError::ClosedEarly) if reused && retry_ok && body.rewind() => fresh = true,
            Err(_) => {
                tracing::debug!(upstream = %up.cfg.name, "upstream gave no response");
                return Err(ForwardError::Upstream);
            }
        }
    };
    let key = up.key();
    let done = |conn: Conn, keep_alive: bool| {
        if keep_alive && conn.rbuf.is_empty() {
            checkin(key, conn);
        }
    };
    let body = match head.framing {
        RespFraming::Empty => {
            done(conn, head.keep_alive);
            RespBody::Full(None)
        }
        RespFraming::Length(n) if conn.rbuf.len() as u64 >= n => {
            let data = conn.rbuf.split_to(n as usize).freeze();
            done(conn, head.keep_alive);
            RespBody::Full(Some(data))
        }
        RespFraming::Length(n) => RespBody::H1(H1Body::new(
            conn,
            Decode::Length(n),
            head.keep_alive,
            key,
            up.cfg.response_timeout,
        )),
        // A first chunk-size line already read that is malformed: 502 before any head goes
        // out, as nginx answers (the client got a 200 and a cut connection).
        RespFraming::Chunked if malformed_first_chunk(&conn.rbuf) => {
            tracing::debug!(upstream = %up.cfg.name, "malformed chunked body");
            return Err(ForwardError::Upstream);
        }
        RespFraming::Chunked => RespBody::H1(H1Body::new(
            conn,
            Decode::Chunked(Chunk::Size),
            head.keep_alive,
            key,
            up.cfg.response_timeout,
        )),
        RespFraming::Eof => RespBody::H1(H1Body::new(
            conn,
            Decode::Eof,
            false,
            key,
            up.cfg.response_timeout,
        )),
    };
    let mut resp = Response::new(body);
    *resp.status_mut() = head.status;
    *resp.headers_mut() = head.headers;
    Ok(resp)
}

/// Where a chunked body is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Chunk {
    Size,
    Data(u64),
    DataEnd,
    Trailers(usize),
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Decode {
    Length(u64),
    Chunked(Chunk),
    Eof,
    Done,
}

/// A response body streamed from its upstream connection, which goes back to the pool when
/// the body has ended cleanly (and is closed when the body fails or is dropped early).
#[derive(Debug)]
pub struct H1Body {
    conn: Option<Conn>,
    decode: Decode,
    keep_alive: bool,
    key: PoolKey,
    /// Longest wait for more of the body (the upstream's response timeout): a stalled
    /// upstream must not hold the client's connection and its own forever.
    stall: std::time::Duration,
    /// Armed while a read waits; made on the first wait of a body that streams.
    timer: Option<Pin<Box<Sleep>>>,
    waiting: bool,
}

#[derive(Debug)]
struct BodyError(&'static str);

impl std::fmt::Display for BodyError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.0)
    }
}

impl std::error::Error for BodyError {}

impl H1Body {
    fn new(
        conn: Conn,
        decode: Decode,
        keep_alive: bool,
        key: PoolKey,
        stall: std::time::Duration,
    ) -> H1Body {
        let mut b = H1Body {
            conn: Some(conn),
            decode,
            keep_alive,
            key,
            stall,
            timer: None,
            waiting: false,
        };
        if decode == Decode::Length(0) {
            b.finish();
        }
        b
    }

    fn finish(&mut self) {
        self.decode = Decode::Done;
        if let Some(conn) = self.conn.take()
            && self.keep_alive
            && conn.rbuf.is_empty()
        {
            checkin(self.key, conn);
        }
    }

    fn fail(&mut self, why: &'static str) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        self.decode = Decode::Done;
        self.conn = None;
        Poll::Ready(Some(Err(Box::new(BodyError(why)))))
    }

    /// The next frame, or `None` at the end; `Err` for a truncated or malformed body.
    pub fn poll_data(
        &mut self,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        loop {
            let Some(conn) = self.conn.as_mut() else {
                return Poll::Ready(None);
            };
            match self.decode {
                Decode::Done => return Poll::Ready(None),
                Decode::Length(rem) | Decode::Chunked(Chunk::Data(rem))
                    if !conn.rbuf.is_empty() =>
                {
                    let take = (conn.rbuf.len() as u64).min(rem);
                    let data = conn.rbuf.split_to(take as usize).freeze();
                    let left = rem - take;
                    match &mut self.decode {
                        Decode::Length(r) => {
                            *r = left;
                            if left == 0 {
                                self.finish();
                            }
                        }
                        d => {
                            *d = Decode::Chunked(if left == 0 {
                                Chunk::DataEnd
                            } else {
                                Chunk::Data(left)
                            });
                        }
                    }
                    return Poll::Ready(Some(Ok(Frame::data(data))));
                }
                Decode::Eof if !conn.rbuf.is_empty() => {
                    let data = conn.rbuf.split().freeze();
                    return Poll::Ready(Some(Ok(Frame::data(data))));
                }
                Decode::Chunked(Chunk::Size) if !conn.rbuf.is_empty() => {
                    match chunk_size_line(&conn.rbuf) {
                        Ok(Some((used, size))) => {
                            conn.rbuf.advance(used);
                            self.decode = Decode::Chunked(if size == 0 {
                                Chunk::Trailers(0)
                            } else {
                                Chunk::Data(size)
                            });
                            continue;
                        }
                        Ok(None) => {}
                        Err(()) => return self.fail("malformed chunk size"),
                    }
                }
                Decode::Chunked(Chunk::DataEnd) if conn.rbuf.len() >= 2 => {
                    if &conn.rbuf[..2] != b"\r\n" {
                        return self.fail("malformed chunk end");
                    }
                    conn.rbuf.advance(2);
                    self.decode = Decode::Chunked(Chunk::Size);
                    continue;
                }
                Decode::Chunked(Chunk::Trailers(seen)) if !conn.rbuf.is_empty() => {
                    // Each line ends in CRLF; a bare LF fails at once (waiting for a CRLF
                    // that never comes held the client and the origin until the stall bound).
                    match conn.rbuf.iter().position(|&b| b == b'\n') {
                        Some(i) if i == 0 || conn.rbuf[i - 1] != b'\r' => {
                            return self.fail("bare LF in the trailer section");
                        }
                        Some(1) => {
                            conn.rbuf.advance(2);
                            self.finish();
                            return Poll::Ready(None);
                        }
                        Some(i) if seen + i < TRAILERS_MAX => {
                            conn.rbuf.advance(i + 1);
                            self.decode = Decode::Chunked(Chunk::Trailers(seen + i + 1));
                            continue;
                        }
                        None if seen + conn.rbuf.len() < TRAILERS_MAX => {}
                        _ => return self.fail("trailers too large"),
                    }
                }
                _ => {}
            }
            // More bytes are needed, within the stall bound.
            let filled = match poll_fill(&mut conn.io, &mut conn.rbuf, cx) {
                Poll::Ready(r) => r,
                Poll::Pending => {
                    let deadline = tokio::time::Instant::now() + self.stall;
                    let timer = self
                        .timer
                        .get_or_insert_with(|| Box::pin(tokio::time::sleep_until(deadline)));
                    if !self.waiting {
                        self.waiting = true;
                        timer.as_mut().reset(deadline);
                    }
                    ready!(timer.as_mut().poll(cx));
                    BODY_STALLS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    return self.fail("upstream body stalled");
                }
            };
            self.waiting = false;
            match filled {
                Ok(0) if self.decode == Decode::Eof => {
                    self.decode = Decode::Done;
                    self.conn = None;
                    return Poll::Ready(None);
                }
                Ok(0) => return self.fail("upstream closed mid-body"),
                Ok(_) => {}
                Err(_) => return self.fail("upstream read failed"),
            }
        }
    }

    /// True once the body has ended.
    pub fn is_end(&self) -> bool {
        self.decode == Decode::Done
    }

    /// What is known of the remaining length.
    pub fn size_hint(&self) -> SizeHint {
        match self.decode {
            Decode::Length(n) => SizeHint::with_exact(n),
            Decode::Done => SizeHint::with_exact(0),
            _ => SizeHint::default(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::forward::ClientInfo;

    fn parts(req: &str, headers: &[(&str, &str)]) -> http::request::Parts {
        let mut b = http::Request::builder().uri(req);
        for (k, v) in headers {
            b = b.header(*k, *v);
        }
        b.body(()).unwrap().into_parts().0
    }

    fn head(
        p: &http::request::Parts,
        host: Option<&str>,
        fwd: &Forwarded,
        body: ReqBody,
    ) -> String {
        let c = ClientInfo::new(
            "192.0.2.7:1".parse().unwrap(),
            "192.0.2.1:80".parse().unwrap(),
            false,
        );
        let host = host.map(|h| HeaderValue::from_str(h).unwrap());
        let mut out = Vec::new();
        let policy = HeaderPolicy::new(
            &crate::config::DEFAULT_STRIP_HEADERS
                .iter()
                .map(|s| s.to_string())
                .collect::<Vec<_>>(),
            false,
        );
        encode_head(&mut out, p, host.as_ref(), fwd, &policy, &c, body);
        String::from_utf8(out).unwrap()
    }

    #[test]
    fn a_malformed_first_chunk_line_is_caught_before_any_head() {
        for bad in [
            &b"zz\r\nabc"[..],
            b"\n",
            b"5\nhello",
            b"-1\r\n",
            b"0x5\r\nhello",
            b"ffffffffffffffffffff\r\n",
        ] {
            assert!(
                malformed_first_chunk(bad),
                "{:?}",
                String::from_utf8_lossy(bad)
            );
        }
        for good in [
            &b""[..],
            b"5",
            b"5\r\nhello",
            b"5;ext=1\r\nhe",
            b"0\r\n\r\n",
        ] {
            assert!(
                !malformed_first_chunk(good),
                "{:?}",
                String::from_utf8_lossy(good)
            );
        }
    }

    #[test]
    fn request_head_strips_hop_by_hop_and_sets_forwarding() {
        let p = parts(
            "/a?b=1",
            &[
                ("host", "Site.Test"),
                ("connection", "keep-alive, x-secret"),
                ("x-secret", "1"),
                ("keep-alive", "timeout=5"),
                ("te", "trailers"),
                ("upgrade", "websocket"),
                ("content-length", "12"),
                ("x-forwarded-for", "6.6.6.6"),
                ("x-forwarded-host", "evil"),
                ("forwarded", "for=6.6.6.6"),
                ("user-agent", "ua"),
                ("x-real-ip", "6.6.6.6"),
                ("x-original-url", "/admin"),
                ("x_forwarded_for", "6.6.6.6"),
                ("expect", "100-continue"),
            ],
        );
        let h = head(
            &p,
            Some("Site.Test"),
            &Forwarded::default(),
            ReqBody::Length(12),
        );
        // The client's X-Real-IP is replaced, path overrides and names with '_' are dropped,
        // the expectation was answered here.
        assert_eq!(
            h,
            "GET /a?b=1 HTTP/1.1\r\nhost: Site.Test\r\nuser-agent: ua\r\n\
             x-forwarded-for: 192.0.2.7\r\nx-forwarded-proto: http\r\nx-forwarded-host: Site.Test\r\n\
             forwarded: for=192.0.2.7;proto=http\r\nx-real-ip: 192.0.2.7\r\ncontent-length: 12\r\n\r\n"
        );
        let trust = Forwarded {
            trust_incoming: true,
            ..Forwarded::default()
        };
        let h = head(&p, None, &trust, ReqBody::Chunked);
        assert!(h.contains("x-forwarded-for: 6.6.6.6, 192.0.2.7\r\n"), "{h}");
        assert!(
            h.contains("forwarded: for=6.6.6.6, for=192.0.2.7;proto=http\r\n"),
            "{h}"
        );
        assert!(h.contains("x-forwarded-host: evil\r\n"), "{h}");
        assert!(h.ends_with("transfer-encoding: chunked\r\n\r\n"), "{h}");
        // Every line of it, in order (a hop before us appended a line of its own).
        let two = parts(
            "/",
            &[
                ("x-forwarded-for", "6.6.6.6"),
                ("x-forwarded-for", "198.51.100.2"),
            ],
        );
        let h = head(&two, None, &trust, ReqBody::None { zero_length: false });
        assert!(
            h.contains("x-forwarded-for: 6.6.6.6, 198.51.100.2, 192.0.2.7\r\n"),
            "{h}"
        );
        // Only the Host the site was chosen by goes upstream (here: none given).
        assert!(!h.contains("\r\nhost: "), "{h}");
        // A second Host, or Host named in Connection, cannot change or drop it.
        let p = parts(
            "/",
            &[
                ("host", "open.test"),
                ("host", "protected.test"),
                ("connection", "host"),
            ],
        );
        let h = head(
            &p,
            Some("protected.test"),
            &off_forwarding(),
            ReqBody::None { zero_length: false },
        );
        assert_eq!(h, "GET / HTTP/1.1\r\nhost: protected.test\r\n\r\n");
        let off = off_forwarding();
        let h = head(
            &parts("/", &[("x-forwarded-for", "6.6.6.6")]),
            Some("a.test"),
            &off,
            ReqBody::None { zero_length: true },
        );
        assert_eq!(
            h,
            "GET / HTTP/1.1\r\nhost: a.test\r\ncontent-length: 0\r\n\r\n"
        );
    }

    fn off_forwarding() -> Forwarded {
        Forwarded {
            x_forwarded: false,
            forwarded: false,
            trust_incoming: false,
            x_real_ip: false,
        }
    }

    fn parse(text: &str, head_req: bool) -> Result<Option<(Head, BytesMut)>, BadResponse> {
        let mut b = BytesMut::from(text.as_bytes());
        Ok(parse_head(&mut b, head_req)?.map(|h| (h, b)))
    }

    #[test]
    fn response_heads() {
        let (h, rest) = parse(
            "HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: keep-alive, x-hop\r\n\
             X-Hop: 1\r\nX-Origin: yes\r\nKeep-Alive: timeout=5\r\n\r\nokNEXT",
            false,
        )
        .unwrap()
        .unwrap();
        assert_eq!(h.status, 200);
        assert_eq!(h.framing, RespFraming::Length(2));
        assert!(h.keep_alive);
        assert_eq!(h.headers.len(), 2, "{:?}", h.headers);
        assert_eq!(h.headers["x-origin"], "yes");
        assert_eq!(&rest[..], b"okNEXT");

        let (h, _) = parse(
            "HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip, chunked\r\n\r\n",
            false,
        )
        .unwrap()
        .unwrap();
        assert_eq!(h.framing, RespFraming::Chunked);
        assert!(h.keep_alive && h.headers.is_empty());
        let (h, _) = parse(
            "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nContent-Length: 5\r\n\r\n",
            false,
        )
        .unwrap()
        .unwrap();
        assert_eq!(h.framing, RespFraming::Chunked);
        assert!(!h.keep_alive);
        let (h, _) = parse("HTTP/1.0 200 OK\r\n\r\n", false).unwrap().unwrap();
        assert_eq!(h.framing, RespFraming::Eof);
        assert!(!h.keep_alive);
        let (h, _) = parse(
            "HTTP/1.0 200 OK\r\nConnection: keep-alive\r\nContent-Length: 1\r\n\r\n",
            false,
        )
        .unwrap()
        .unwrap();
        assert!(h.keep_alive);
        let (h, _) = parse(
            "HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 1\r\n\r\n",
            false,
        )
        .unwrap()
        .unwrap();
        assert!(!h.keep_alive);
        let (h, _) = parse("HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\n", true)
            .unwrap()
            .unwrap();
        assert_eq!(h.framing, RespFraming::Empty);
        assert_eq!(h.headers["content-length"], "10");
        let (h, _) = parse(
            "HTTP/1.1 304 Not Modified\r\nContent-Length: 10\r\n\r\n",
            false,
        )
        .unwrap()
        .unwrap();
        assert_eq!(h.framing, RespFraming::Empty);
        let (h, _) = parse(
            "HTTP/1.1 204 No Content\r\nContent-Length: 5\r\n\r\nfirst",
            false,
        )
        .unwrap()
        .unwrap();
        assert_eq!(h.framing, RespFraming::Empty);
        assert!(!h.headers.contains_key("content-length"), "{:?}", h.headers);
        let (h, _) = parse(
            "HTTP/1.1 200 OK\r\nContent-Length: 3\r\nContent-Length: 3\r\n\r\n",
            false,
        )
        .unwrap()
        .unwrap();
        assert_eq!(h.framing, RespFraming::Length(3));

        assert!(
            parse("HTTP/1.1 200 OK\r\nContent-Len", false)
                .unwrap()
                .is_none()
        );
        assert!(
            parse(
                "HTTP/1.1 200 OK\r\nContent-Length: 3\r\nContent-Length: 4\r\n\r\n",
                false
            )
            .is_err()
        );
        assert!(parse("HTTP/1.1 200 OK\r\nContent-Length: +3\r\n\r\n", false).is_err());
        assert!(parse("HTTP/1.1 101 Switching\r\n\r\n", false).is_err());
        assert!(parse("HTTX/1.1 200 OK\r\n\r\n", false).is_err());
        let huge = format!("HTTP/1.1 200 OK\r\nx: {}", "a".repeat(HEAD_MAX));
        assert!(parse(&huge, false).is_err());
    }

    /// A body decoded from `wire` sent by a server in pieces of `step` bytes.
    async fn decode(
        wire: &'static [u8],
        decode: Decode,
        step: usize,
    ) -> (Result<Vec<u8>, String>, bool) {
        let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let io = tokio::net::TcpStream::connect(l.local_addr().unwrap())
            .await
            .unwrap();
        let (mut s, _) = l.accept().await.unwrap();
        let writer = tokio::spawn(async move {
            for c in wire.chunks(step) {
                // The reader closes on a malformed body: the rest is not wanted.
                if s.write_all(c).await.is_err() {
                    break;
                }
                tokio::time::sleep(std::time::Duration::from_millis(2)).await;
            }
            s
        });
        let up = Upstream::new(&crate::config::Upstream {
            name: "t".into(),
            servers: vec!["127.0.0.1:1".parse().unwrap()],
            protocol: crate::config::UpstreamProtocol::Http1,
            connect_timeout: std::time::Duration::from_secs(1),
            response_timeout: std::time::Duration::from_secs(1),
            pool_idle_timeout: std::time::Duration::from_secs(60),
            pool_max_idle: 4,
            send_proxy: None,
            tls: None,
        });
        assert!(up.checkout().is_none());
        let conn = Conn {
            io: crate::forward::upstream::UpIo::Plain(io),
            rbuf: BytesMut::new(),
            wbuf: Vec::new(),
            _slot: crate::forward::upstream::Slot::take(&std::sync::Arc::default()).unwrap(),
        };
        let mut b = H1Body::new(
            conn,
            decode,
            true,
            up.key(),
            std::time::Duration::from_secs(5),
        );
        let mut out = Vec::new();
        let r = loop {
            match poll_fn(|cx| b.poll_data(cx)).await {
                None => break Ok(out),
                Some(Ok(f)) => out.extend_from_slice(&f.into_data().unwrap()),
                Some(Err(e)) => break Err(e.to_string()),
            }
        };
        let _s = writer.await.unwrap();
        (r, up.checkout().is_some())
    }

    #[tokio::test(flavor = "current_thread")]
    async fn bodies_stream_and_return_the_connection() {
        let wire: &[u8] = b"5;ext=1\r\nhello\r\n6\r\n world\r\n0\r\nx-trailer: 1\r\n\r\n";
        for step in [1, 3, 64] {
            let (r, pooled) = decode(wire, Decode::Chunked(Chunk::Size), step).await;
            assert_eq!(r.unwrap(), b"hello world", "step {step}");
            assert!(pooled, "step {step}");
        }
        let (r, pooled) = decode(b"0123456789", Decode::Length(10), 4).await;
        assert_eq!(r.unwrap(), b"0123456789");
        assert!(pooled);
        let (r, pooled) = decode(b"5\r\nhelloXX", Decode::Chunked(Chunk::Size), 64).await;
        assert!(r.is_err());
        assert!(!pooled);
        // A trailer section ended by a bare LF fails at once (not after the stall bound:
        // the origin keeps the connection open).
        for bad in [&b"0\r\n\n"[..], b"5\r\nhello\r\n0\r\nX: a\n\n"] {
            let (r, pooled) = decode(bad, Decode::Chunked(Chunk::Size), 64).await;
            let e = r.unwrap_err();
            assert!(e.contains("bare LF"), "{e}");
            assert!(!pooled);
        }
        // What httparse alone would take for a last chunk: an empty or extension-only size
        // line, and a bare LF in an extension. Each is an error, and the connection is closed.
        for bad in [
            &b"\r\nhello"[..],
            b" \r\nhello",
            b";x\r\nhello",
            b"5;a\nb\r\nhello\r\n0\r\n\r\n",
            b"zz\r\n",
        ] {
            for step in [1, 64] {
                let (r, pooled) = decode(bad, Decode::Chunked(Chunk::Size), step).await;
                assert!(r.is_err(), "{:?} step {step}", String::from_utf8_lossy(bad));
                assert!(!pooled);
            }
        }
    }

    #[tokio::test(flavor = "current_thread")]
    async fn a_stalled_body_fails_and_the_connection_is_closed() {
        let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let io = tokio::net::TcpStream::connect(l.local_addr().unwrap())
            .await
            .unwrap();
        let (mut s, _) = l.accept().await.unwrap();
        s.write_all(b"5\r\nhel").await.unwrap();
        let up = Upstream::new(&crate::config::Upstream {
            name: "t".into(),
            servers: vec!["127.0.0.1:1".parse().unwrap()],
            protocol: crate::config::UpstreamProtocol::Http1,
            connect_timeout: std::time::Duration::from_secs(1),
            response_timeout: std::time::Duration::from_secs(1),
            pool_idle_timeout: std::time::Duration::from_secs(60),
            pool_max_idle: 4,
            send_proxy: None,
            tls: None,
        });
        let conn = Conn {
            io: crate::forward::upstream::UpIo::Plain(io),
            rbuf: BytesMut::new(),
            wbuf: Vec::new(),
            _slot: crate::forward::upstream::Slot::take(&std::sync::Arc::default()).unwrap(),
        };
        let stall = std::time::Duration::from_millis(200);
        let mut b = H1Body::new(conn, Decode::Chunked(Chunk::Size), true, up.key(), stall);
        let first = poll_fn(|cx| b.poll_data(cx)).await.unwrap().unwrap();
        assert_eq!(&first.into_data().unwrap()[..], b"hel");
        // The upstream keeps the connection open and sends nothing more.
        let e = poll_fn(|cx| b.poll_data(cx)).await.unwrap().unwrap_err();
        assert_eq!(e.to_string(), "upstream body stalled");
        assert!(BODY_STALLS.load(std::sync::atomic::Ordering::Relaxed) >= 1);
        assert!(b.is_end());
        assert!(
            up.checkout().is_none(),
            "a stalled connection is not pooled"
        );
        drop(s);
    }

    #[test]
    fn a_length_past_2_63_is_invalid() {
        assert!(
            parse(
                "HTTP/1.1 200 OK\r\nContent-Length: 9223372036854775808\r\n\r\n",
                false
            )
            .is_err()
        );
        let (h, _) = parse(
            "HTTP/1.1 200 OK\r\nContent-Length: 9223372036854775807\r\n\r\n",
            false,
        )
        .unwrap()
        .unwrap();
        assert!(matches!(h.framing, RespFraming::Length(n) if n == i64::MAX as u64));
    }

    #[test]
    fn an_http_1_0_response_with_a_coding_never_keeps_its_connection() {
        let (h, _) = parse(
            "HTTP/1.0 200 OK\r\nConnection: keep-alive\r\nTransfer-Encoding: chunked\r\n\r\n",
            false,
        )
        .unwrap()
        .unwrap();
        assert!(!h.keep_alive);
        assert!(matches!(h.framing, RespFraming::Chunked));
        let (h, _) = parse(
            "HTTP/1.0 200 OK\r\nConnection: keep-alive\r\nContent-Length: 2\r\n\r\n",
            false,
        )
        .unwrap()
        .unwrap();
        assert!(h.keep_alive, "a length frames an HTTP/1.0 body");
    }

    #[test]
    fn length_beside_a_coding_is_not_passed_on() {
        let (h, _) = parse(
            "HTTP/1.1 200 OK\r\nContent-Length: 99\r\nTransfer-Encoding: chunked\r\nX-A: 1\r\n\r\n",
            false,
        )
        .unwrap()
        .unwrap();
        assert_eq!(h.framing, RespFraming::Chunked);
        assert!(!h.keep_alive);
        assert!(
            !h.headers.contains_key(header::CONTENT_LENGTH),
            "{:?}",
            h.headers
        );
        assert_eq!(h.headers["x-a"], "1");
    }
}
