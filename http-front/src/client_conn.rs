//! Client connections: the blocked-source check at accept (before a byte is read), the connection bounds, the protocol (ALPN, or the HTTP/2 preface on plaintext), and each connection's lifecycle — GOAWAY or `Connection: close` when it is blocked, too old, has served its requests, sits idle (HTTP/2), or floods resets.

use std::future::Future;
use std::io;
use std::pin::{Pin, pin};
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use std::net::SocketAddr;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use tokio::io::{AsyncRead, AsyncWrite};

use tokio::io::Interest;
use tokio::io::unix::AsyncFd;
use tokio::net::TcpStream;
use tokio::time::{Instant, sleep_until};

use crate::conn_registry::{CloseCause, ConnGuard, Refused};
use crate::counters::{Counter, Counters};
use crate::forward::ClientInfo;
use crate::front::{Front, Snapshot};
use crate::local;
use crate::service::{self, ConnCtx};

/// The HTTP/2 connection preface (RFC 9113 §3.4).
const PREFACE: &[u8; 24] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

/// Closes a raw accepted descriptor with a reset (`SO_LINGER` 0, then `close`): two syscalls.
fn reset_fd(fd: OwnedFd) {
    let _ = socket2::SockRef::from(&fd).set_linger(Some(Duration::ZERO));
    drop(fd);
}

/// Most connections accepted in one go before the accept task lets others run.
const ACCEPT_BATCH: usize = 128;

/// One `accept4(2)`: the new descriptor (non-blocking, close-on-exec) and the peer address.
fn accept_raw(listener: &std::net::TcpListener) -> io::Result<(OwnedFd, SocketAddr)> {
    // SAFETY: an all-zero sockaddr_storage is a valid value.
    let mut storage: libc::sockaddr_storage = unsafe { std::mem::zeroed() };
    let mut len = std::mem::size_of::<libc::sockaddr_storage>() as libc::socklen_t;
    // SAFETY: the listener's descriptor is valid for its lifetime; storage and len describe a
    // buffer large enough for any socket address.
    let fd = unsafe {
        libc::accept4(
            listener.as_raw_fd(),
            (&raw mut storage).cast::<libc::sockaddr>(),
            &mut len,
            libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC,
        )
    };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: accept4 returned a new descriptor that nothing else owns.
    let fd = unsafe { OwnedFd::from_raw_fd(fd) };
    let addr = match storage.ss_family as libc::c_int {
        libc::AF_INET => {
            // SAFETY: the kernel wrote a sockaddr_in (family AF_INET) into storage.
            let a = unsafe { &*(&raw const storage).cast::<libc::sockaddr_in>() };
            SocketAddr::from((
                u32::from_be(a.sin_addr.s_addr).to_be_bytes(),
                u16::from_be(a.sin_port),
            ))
        }
        libc::AF_INET6 => {
            // SAFETY: the kernel wrote a sockaddr_in6 (family AF_INET6) into storage.
            let a = unsafe { &*(&raw const storage).cast::<libc::sockaddr_in6>() };
            SocketAddr::from((a.sin6_addr.s6_addr, u16::from_be(a.sin6_port)))
        }
        _ => return Err(io::Error::new(io::ErrorKind::InvalidData, "not an IP peer")),
    };
    Ok((fd, addr))
}

/// Accepts connections on `listener` until the task is dropped.
///
/// Connections are taken with raw `accept4(2)` in batches; the source is checked against the
/// block map before the socket is registered with the runtime, so a blocked source costs
/// `accept4`, one lookup, `setsockopt` and `close` — no allocation, no epoll registration,
/// no task, no byte read.
pub async fn accept_loop(front: Arc<Front>, listener: std::net::TcpListener, tls: bool) {
    let c = &front.counters;
    // The address connections reach: the listener's own, unless it is a wildcard (then one
    // `getsockname` per connection says which).
    let bound = listener
        .local_addr()
        .ok()
        .filter(|a| !a.ip().is_unspecified());
    // SAFETY: the listener owns its descriptor and is neither closed nor replaced while the
    // AsyncFd holds it.
    let listener = match unsafe { AsyncFd::register_with_interest(listener, Interest::READABLE) } {
        Ok(l) => l,
        Err(e) => {
            tracing::error!(error = %e, "cannot register a listener");
            return;
        }
    };
    loop {
        let mut ready = match listener.readable().await {
            Ok(r) => r,
            Err(e) => {
                tracing::error!(error = %e, "listener failed");
                return;
            }
        };
        for _ in 0..ACCEPT_BATCH {
            let (fd, peer) = match accept_raw(listener.get_ref()) {
                Ok(x) => x,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    ready.clear_ready();
                    break;
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => {
                    c.bump(Counter::ConnAcceptErrors);
                    tracing::debug!(error = %e, "accept failed");
                    // Out of descriptors or memory: back off instead of spinning.
                    tokio::time::sleep(Duration::from_millis(10)).await;
                    break;
                }
            };
            let ip = peer.ip().to_canonical();
            // A listed proxy is never blocked (it is in the never-block set): this check stays
            // the first thing a blocked source costs.
            if blocked(&front, ip) {
                c.bump(Counter::ConnBlocked);
                reset_fd(fd);
                continue;
            }
            let snap = front.snapshot();
            let proxy = snap.cfg.proxy.contains(ip);
            // A listed proxy's client, named by its header, is admitted in `proxied`.
            let guard = if proxy {
                None
            } else {
                match register(&front, &snap, ip) {
                    Ok(g) => Some(g),
                    Err(refusal) => {
                        c.bump(refusal);
                        reset_fd(fd);
                        continue;
                    }
                }
            };
            let stream = match TcpStream::from_std(std::net::TcpStream::from(fd)) {
                Ok(s) => s,
                Err(e) => {
                    c.bump(Counter::ConnAcceptErrors);
                    tracing::debug!(error = %e, "cannot register a connection");
                    continue;
                }
            };
            let front = Arc::clone(&front);
            match guard {
                None => {
                    tokio::spawn(proxied(front, snap, stream, peer, tls));
                }
                Some(guard) => {
                    c.bump(Counter::ConnAccepted);
                    let local = bound.unwrap_or_else(|| stream.local_addr().unwrap_or(peer));
                    tokio::spawn(serve(front, snap, stream, guard, tls, (peer, local)));
                }
            }
        }
        tokio::task::yield_now().await;
    }
}

/// True when `ip` is blocked for connections (the block map, by the connection tenant).
fn blocked(front: &Front, ip: std::net::IpAddr) -> bool {
    local::with(front, |l| {
        l.blocked(front.conn_tenant.load(Ordering::Relaxed), ip)
    })
}

/// Registers a connection of `ip` within the total and per-source bounds (at the total, in
/// the place of an idle connection it evicts, counted as that one closes); the refusal's
/// counter otherwise.
fn register(front: &Front, snap: &Snapshot, ip: std::net::IpAddr) -> Result<ConnGuard, Counter> {
    let s = &snap.cfg.server;
    // A hop that names its clients in X-Forwarded-For carries many: bounded in total only.
    let per_source = if snap.cfg.real_ip.contains(ip) {
        s.max_connections
    } else {
        s.max_connections_per_source
    };
    front
        .registry
        .register(ip, s.max_connections, per_source)
        .map(|r| r.guard)
        .map_err(|r| match r {
            Refused::Total => Counter::LimitMaxConnections,
            Refused::PerSource => Counter::LimitPerSource,
        })
}

/// The answer to a plain HTTP request on a TLS port (as nginx's, with a page that says why;
/// a TLS alert told the client nothing).
const PLAIN_HTTP_ON_TLS: &[u8] = b"HTTP/1.1 400 Bad Request\r\n\
Content-Type: text/html\r\n\
Content-Length: 146\r\n\
Connection: close\r\n\r\n\
<html><head><title>400 Bad Request</title></head><body>\
<h1>400 Bad Request</h1><p>The plain HTTP request was sent to HTTPS port</p></body></html>\n";

/// A listed proxy's connection: reads its PROXY header (version 2 or 1) within the header
/// timeout, then treats the client it names as if it had connected itself (the block check,
/// the connection bounds, every rule and log); the proxy's own address is used only for a
/// `LOCAL` header (its health checks).
async fn proxied(
    front: Arc<Front>,
    snap: Arc<Snapshot>,
    mut stream: TcpStream,
    proxy: SocketAddr,
    tls: bool,
) {
    use shield::proxy_proto::{ProxyError, read_header};
    let c = &front.counters;
    let timeout = Duration::from_millis(snap.cfg.server.header_read_timeout_ms);
    let h = match read_header(&mut stream, true, timeout).await {
        Ok(h) => h,
        Err(e) => {
            c.bump(match e {
                ProxyError::Timeout => Counter::ProxyTimeout,
                ProxyError::Missing => Counter::ProxyMissing,
                _ => Counter::ProxyMalformed,
            });
            return;
        }
    };
    let local = stream.local_addr().unwrap_or(proxy);
    let client = h.source.unwrap_or(proxy);
    let dst = h.destination.unwrap_or(local);
    let ip = client.ip().to_canonical();
    if blocked(&front, ip) {
        c.bump(Counter::ConnBlocked);
        let _ = socket2::SockRef::from(&stream).set_linger(Some(Duration::ZERO));
        return;
    }
    let guard = match register(&front, &snap, ip) {
        Ok(g) => g,
        Err(refusal) => {
            c.bump(refusal);
            return;
        }
    };
    c.bump(Counter::ConnAccepted);
    c.bump(Counter::ConnProxied);
    serve(front, snap, stream, guard, tls, (client, dst)).await;
}

/// Waits until the peer has sent enough to tell the HTTP/2 preface from an HTTP/1 request
/// line; a PROXY header (from an address not in `proxy_allow`) is an `InvalidData` error.
async fn is_h2_preface(s: &TcpStream) -> io::Result<bool> {
    let mut buf = [0u8; 24];
    loop {
        let n = s.peek(&mut buf).await?;
        if n == 0 {
            return Err(io::ErrorKind::UnexpectedEof.into());
        }
        let sig = shield::proxy_proto::V2_SIGNATURE;
        let m = n.min(sig.len());
        if (n >= 6 && buf.starts_with(b"PROXY ")) || (m >= 4 && buf[..m] == sig[..m]) {
            return Err(io::ErrorKind::InvalidData.into());
        }
        if buf[..n] != PREFACE[..n] {
            return Ok(false);
        }
        if n == PREFACE.len() {
            return Ok(true);
        }
        // A split preface: peek would return the same bytes at once, so wait a little.
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// Time limits of one connection, and its share of the heads' budget.
#[derive(Clone, Copy, Debug)]
struct Life {
    /// `header_buffer_total_bytes`: what all connections' unfinished heads may hold.
    head_budget: usize,
    max_age: Duration,
    idle: Duration,
    /// How long an HTTP/2 connection may stay without its first request
    /// (`header_read_timeout_ms`, as an HTTP/1.1 head must come within it).
    first: Duration,
    grace: Duration,
}

/// Serves a client's connection once its client sent something: until then it holds its
/// socket and this small task, never a TLS session, hyper's buffers or the serving state (an
/// idle connection held 13–19 KB, nginx's 0.5 KB).
async fn serve(
    front: Arc<Front>,
    snap: Arc<Snapshot>,
    stream: TcpStream,
    guard: ConnGuard,
    tls: bool,
    addrs: (SocketAddr, SocketAddr),
) {
    let c = &front.counters;
    let deadline = Instant::now() + Duration::from_millis(snap.cfg.server.header_read_timeout_ms);
    let sent = tokio::select! {
        r = tokio::time::timeout_at(deadline, stream.readable()) => r,
        _ = guard.ctl.closed() => {
            count_close(c, guard.ctl.cause());
            return;
        }
    };
    match sent {
        Ok(Ok(())) => {}
        Ok(Err(_)) => return,
        Err(_) => {
            if tls {
                c.bump(Counter::ConnTlsFailed);
            }
            c.bump(Counter::LimitHeaderTimeout);
            return;
        }
    }
    Box::pin(serve_sent(front, snap, stream, guard, tls, addrs, deadline)).await;
}

/// Serves a connection whose client sent its first bytes; its TLS handshake or HTTP/2
/// preface must be whole by `deadline`.
async fn serve_sent(
    front: Arc<Front>,
    snap: Arc<Snapshot>,
    stream: TcpStream,
    guard: ConnGuard,
    tls: bool,
    (src, dst): (SocketAddr, SocketAddr),
    deadline: Instant,
) {
    let _ = stream.set_nodelay(true);
    let s = &snap.cfg.server;
    let head_timeout = Duration::from_millis(s.header_read_timeout_ms);
    let life = Life {
        head_budget: s.header_buffer_total_bytes,
        max_age: Duration::from_secs(s.max_connection_age_secs),
        idle: Duration::from_millis(s.idle_timeout_ms),
        first: head_timeout,
        grace: Duration::from_millis(s.graceful_close_ms),
    };
    let ip = guard.ctl.ip;
    let make_cx = |h2: bool, ja4: Option<Box<str>>| {
        Arc::new(ConnCtx {
            front: Arc::clone(&front),
            ctl: Arc::clone(&guard.ctl),
            ip,
            h2,
            client: ClientInfo::new(src, dst, tls),
            max_requests: s.max_requests_per_connection,
            flood_min: snap.cfg.http2.reset_flood_min,
            flood_ratio: snap.cfg.http2.reset_flood_ratio,
            flood_block_secs: snap.cfg.http2.reset_flood_block_secs,
            max_streams: snap.cfg.http2.max_concurrent_streams,
            ja4,
            h2_fingerprint: Arc::default(),
            real_ip: (snap.cfg.real_ip.contains(ip)).then(|| Arc::new(snap.cfg.real_ip.clone())),
            hop: snap.cfg.real_ip.contains(ip),
            forwarded: false,
        })
    };
    let c = &front.counters;
    if tls {
        let Some(acceptor) = snap.tls.clone() else {
            return;
        };
        // The hello being read is charged to the heads' budget as it comes, and bounded
        // (3,000 stalled 48 KB hellos held 146 KB each, outside any budget, where nginx held
        // 87 KB).
        let max_hello = snap
            .cfg
            .tls
            .as_ref()
            .map_or(16 << 10, |t| t.max_client_hello_bytes);
        let hop = snap.cfg.real_ip.contains(ip);
        let budget = head_budget(&front, &guard.ctl, hop, life.head_budget);
        let charge = crate::h1watch::HeadCharge::new(Some(budget));
        let mut tapped = crate::fingerprint::HelloTap::new(stream, max_hello, charge);
        // The hello whole before rustls is asked to take it (a session and its buffer for
        // each stalled hello); closed meanwhile (evicted, blocked): the handshake goes
        // unfinished.
        let handshake = tokio::select! {
            r = tokio::time::timeout_at(deadline, async {
                tapped.hello().await?;
                if tapped.plain_http() {
                    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
                    tapped.write_all(PLAIN_HTTP_ON_TLS).await?;
                    tapped.shutdown().await?;
                    // What the client sent past what was read goes unread a moment (up to
                    // 64 KiB or a second), as nginx lingers: closed with it unread, the
                    // kernel's reset could reach the client before the 400 was read.
                    let mut sink = [0u8; 4096];
                    let mut left = 64usize << 10;
                    let _ = tokio::time::timeout(Duration::from_secs(1), async {
                        while left > 0 {
                            match tapped.read(&mut sink).await {
                                Ok(0) | Err(_) => break,
                                Ok(n) => left = left.saturating_sub(n),
                            }
                        }
                    })
                    .await;
                    return Ok(None);
                }
                acceptor.accept(tapped).await.map(Some)
            }) => r,
            _ = guard.ctl.closed() => {
                count_close(c, guard.ctl.cause());
                return;
            }
        };
        let mut stream = match handshake {
            Ok(Ok(Some(s))) => s,
            Ok(Ok(None)) => {
                c.bump(Counter::ConnPlainHttpOnTls);
                return;
            }
            Ok(Err(e)) => {
                c.bump(Counter::ConnTlsFailed);
                // Over the budget: counted by the charge.
                if crate::fingerprint::HelloRefused::of(&e)
                    == Some(crate::fingerprint::HelloRefused::TooLong)
                {
                    c.bump(Counter::LimitClientHello);
                }
                return;
            }
            Err(_) => {
                c.bump(Counter::ConnTlsFailed);
                c.bump(Counter::LimitHeaderTimeout);
                return;
            }
        };
        let alpn = stream.get_ref().1.alpn_protocol();
        if alpn == Some(crate::tls::acme_state::ACME_TLS_ALPN) {
            // An ACME validation handshake (RFC 8737): done once it completed.
            return;
        }
        let h2 = alpn == Some(b"h2");
        let ja4 = match stream.get_mut().0.take() {
            (crate::fingerprint::Tapped::Whole, print) => print.map(|(print, cut)| {
                if cut {
                    c.bump(Counter::LimitFingerprintItems);
                }
                print.into_boxed_str()
            }),
            // A handshake done without a hello the tap could read: no fingerprint, never
            // silently (a 25 KB hello, or a warning alert before it, passed every `ja4` rule
            // uncounted).
            _ => {
                c.bump(Counter::LimitFingerprintItems);
                None
            }
        };
        let cx = make_cx(h2, ja4);
        let (b1, b2) = (snap.h1.clone(), snap.h2.clone());
        drop(snap);
        let fd = stream.get_ref().0.get_ref().as_raw_fd();
        // Boxed: a handshake under way holds only its own state, not the serving one's.
        Box::pin(run(cx, stream, fd, h2, b1, b2, life)).await;
    } else {
        let h2 = if s.h2c {
            let peeked = tokio::select! {
                r = tokio::time::timeout_at(deadline, is_h2_preface(&stream)) => r,
                _ = guard.ctl.closed() => {
                    count_close(c, guard.ctl.cause());
                    return;
                }
            };
            match peeked {
                Ok(Ok(h2)) => h2,
                Ok(Err(e)) => {
                    if e.kind() == io::ErrorKind::InvalidData {
                        c.bump(Counter::ProxyUnlisted);
                    }
                    return;
                }
                Err(_) => {
                    c.bump(Counter::LimitHeaderTimeout);
                    return;
                }
            }
        } else {
            false
        };
        let cx = make_cx(h2, None);
        let (b1, b2) = (snap.h1.clone(), snap.h2.clone());
        drop(snap);
        let fd = stream.as_raw_fd();
        Box::pin(run(cx, stream, fd, h2, b1, b2, life)).await;
    }
    // A WebSocket outlives its HTTP/1.1 connection's serving: it keeps the place.
    guard.ctl.tunnels_ended().await;
    drop(guard);
}

/// Serves the connection `io` (whose socket is `fd`) with hyper until it ends.
async fn run<I>(
    cx: Arc<ConnCtx>,
    io: I,
    fd: std::os::fd::RawFd,
    h2: bool,
    b1: hyper::server::conn::http1::Builder,
    b2: hyper::server::conn::http2::Builder<hyper_util::rt::TokioExecutor>,
    life: Life,
) where
    I: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let svc = {
        let cx = Arc::clone(&cx);
        service_fn(move |req: hyper::Request<Incoming>| service::handle(Arc::clone(&cx), req))
    };
    // The response relay reads what the client acknowledged (`drive` clears it before the
    // socket closes).
    cx.ctl.tcp_fd.store(fd, Ordering::Release);
    cx.ctl.h2.store(h2, Ordering::Relaxed);
    if h2 {
        // A source whose connections were dropped as slow readers gets fewer streams: each
        // such stream is a response read from an origin for nobody.
        let mut b2 = b2;
        let now_ms = shield::clock::mono_us() / 1000;
        let streams = cx.front.registry.streams_for(cx.ip, cx.max_streams, now_ms);
        if streams < cx.max_streams {
            b2.max_concurrent_streams(streams);
            cx.front.counters.bump(Counter::LimitSlowReaderStreams);
        }
        let budget = head_budget(&cx.front, &cx.ctl, cx.hop, life.head_budget);
        let io = TokioIo::new(crate::h2watch::H2Watch::new(
            io,
            Arc::clone(&cx.front.counters),
            Some(Arc::clone(&cx.h2_fingerprint)),
            Some(Arc::clone(&cx.ctl)),
            Some(budget),
        ));
        let conn = b2.serve_connection(io, svc);
        drive(&cx, conn, life, |c| c.graceful_shutdown()).await;
    } else {
        // With upgrades: a WebSocket takes the connection over (its tunnel holds the
        // connection's place in the registry until it ends).
        let budget = head_budget(&cx.front, &cx.ctl, cx.hop, life.head_budget);
        let io = crate::h1watch::H1Watch::new(io, Arc::clone(&cx.ctl), Some(budget));
        let conn = b1.serve_connection(TokioIo::new(io), svc).with_upgrades();
        drive(&cx, conn, life, |c| c.graceful_shutdown()).await;
    }
}

/// The connection's share of the heads' budget: the node's, and its source's (a listed hop
/// carries many clients: the node's alone).
fn head_budget(
    front: &Front,
    ctl: &Arc<crate::conn_registry::ConnCtl>,
    hop: bool,
    limit: usize,
) -> crate::h1watch::HeadBudget {
    crate::h1watch::HeadBudget {
        held: Arc::clone(&front.head_buffered),
        limit,
        source: (!hop).then(|| Arc::clone(&ctl.heads)),
        counters: Arc::clone(&front.counters),
    }
}

/// Clears [`ConnCtl::tcp_fd`](crate::conn_registry::ConnCtl) when dropped.
struct ForgetFd<'a>(&'a crate::conn_registry::ConnCtl);

impl Drop for ForgetFd<'_> {
    fn drop(&mut self) {
        self.0.tcp_fd.store(-1, Ordering::Release);
    }
}

fn count_close(c: &Counters, cause: Option<CloseCause>) {
    c.bump(match cause {
        Some(CloseCause::Blocked) => Counter::ClosedBlocked,
        Some(CloseCause::MaxAge) => Counter::ClosedMaxAge,
        Some(CloseCause::MaxRequests) => Counter::ClosedMaxRequests,
        Some(CloseCause::Idle) => Counter::ClosedIdle,
        Some(CloseCause::ResetFlood) => Counter::ClosedResetFlood,
        Some(CloseCause::SlowReader) => Counter::ClosedSlowReader,
        Some(CloseCause::Evicted) => Counter::ClosedEvicted,
        Some(CloseCause::Shutdown) | None => Counter::ClosedShutdown,
    });
}

/// The connection ended because the client went away (a TLS client closing without
/// close_notify, a reset), which is no protocol error of its.
fn client_gone(e: &hyper::Error) -> bool {
    let src = std::error::Error::source(e);
    let io = src.and_then(|s| s.downcast_ref::<io::Error>()).or_else(|| {
        src.and_then(|s| s.downcast_ref::<h2::Error>())
            .and_then(|h| h.get_io())
    });
    io.is_some_and(|io| {
        matches!(
            io.kind(),
            io::ErrorKind::UnexpectedEof
                | io::ErrorKind::ConnectionReset
                | io::ErrorKind::ConnectionAborted
                | io::ErrorKind::BrokenPipe
        )
    })
}

fn count_error(c: &Counters, e: &hyper::Error) {
    if e.is_parse_too_large() {
        // hyper answered it itself: 414 for a URI past its own limit, else 431 (a head past
        // the buffer, or more headers than `max_headers`: one error for both), counted with
        // the ones the service sends.
        if e.to_string().contains("URI too long") {
            c.bump(Counter::LimitUriBytes);
            c.bump(Counter::RespUriTooLong);
        } else {
            c.bump(Counter::LimitHeaderBytes);
            c.bump(Counter::RespHeaderTooLarge);
        }
    } else if e.is_timeout() {
        c.bump(Counter::LimitHeaderTimeout);
    } else if let Some(h2e) =
        std::error::Error::source(e).and_then(|s| s.downcast_ref::<h2::Error>())
        && h2e.is_go_away()
        && h2e.is_library()
    {
        // h2 itself sent GOAWAY: pending-accept resets, local error resets, CONTINUATION abuse.
        c.bump(Counter::LimitH2Protocol);
    } else if client_gone(e) {
        c.bump(Counter::ConnClientGone);
    } else {
        c.bump(Counter::ConnErrors);
    }
}

/// Polls a connection until it ends, asking it to shut down gracefully when its control block
/// says so or a time limit passes, and dropping it when the grace period after that runs out.
/// Marks its connection ended when dropped.
struct EndOnDrop<'a>(&'a crate::conn_registry::ConnCtl);

impl Drop for EndOnDrop<'_> {
    fn drop(&mut self) {
        self.0.end();
    }
}

async fn drive<F, G>(cx: &ConnCtx, conn: F, life: Life, mut shutdown: G)
where
    F: Future<Output = hyper::Result<()>>,
    G: FnMut(Pin<&mut F>),
{
    let c = &cx.front.counters;
    let ctl = &cx.ctl;
    // Whichever way this returns, the connection's requests still waiting on an origin give
    // up (HTTP/2 streams would otherwise wait on, each holding an origin connection).
    let _end = EndOnDrop(ctl);
    let mut conn = pin!(conn);
    // Dropped before `conn` (declared after it): the socket's descriptor is forgotten before
    // it closes.
    let _fd = ForgetFd(ctl);
    let start = Instant::now();
    let mut age = pin!(sleep_until(start + life.max_age));
    // Until its first request an HTTP/2 connection has `first` (a preface and SETTINGS
    // alone hold a connection's memory, as an HTTP/1.1 head never finished would).
    let mut idle_at = start + life.idle.min(life.first);
    let mut grace_end: Option<Instant> = None;
    loop {
        tokio::select! {
            biased;
            res = conn.as_mut() => {
                if let Err(e) = res {
                    count_error(c, &e);
                }
                return;
            }
            _ = ctl.closed(), if grace_end.is_none() => {
                let cause = ctl.cause();
                count_close(c, cause);
                if cause == Some(CloseCause::SlowReader)
                    && !cx.front.registry.strike(ctl.ip, shield::clock::mono_us() / 1000)
                {
                    c.bump(Counter::LimitSlowReaderStrikes);
                }
                shutdown(conn.as_mut());
                // A hostile source gets little time to finish, a slow reader none (what it
                // stalls would never finish).
                let grace = match cause {
                    Some(CloseCause::SlowReader) => Duration::ZERO,
                    // An evicted connection was idle: a request that raced in gets a moment.
                    Some(CloseCause::Blocked | CloseCause::ResetFlood | CloseCause::Evicted) => life.grace.min(Duration::from_secs(1)),
                    _ => life.grace,
                };
                grace_end = Some(Instant::now() + grace);
            }
            _ = &mut age, if grace_end.is_none() => {
                if ctl.close(CloseCause::MaxAge) {
                    c.bump(Counter::LimitMaxAge);
                }
            }
            _ = sleep_until(idle_at), if cx.h2 && grace_end.is_none() => {
                let now_ms = shield::clock::mono_us() / 1000;
                let last = ctl.last_active_ms.load(Ordering::Relaxed);
                let idle_ms = life.idle.as_millis() as u64;
                // `last` starts as the connection's registration.
                let quiet_ms = now_ms.saturating_sub(last);
                let idle_ms = if ctl.requests.load(Ordering::Relaxed) == 0 {
                    idle_ms.min(life.first.as_millis() as u64)
                } else {
                    idle_ms
                };
                let busy = ctl.inflight.load(Ordering::Relaxed) > 0
                    || ctl.bodies.load(Ordering::Relaxed) > 0
                    || ctl.tunnels() > 0;
                if !busy && quiet_ms >= idle_ms {
                    if ctl.requests.load(Ordering::Relaxed) == 0 {
                        // No request ever: counted as an HTTP/1.1 head that never came.
                        if ctl.close(CloseCause::Idle) {
                            c.bump(Counter::LimitHeaderTimeout);
                        }
                    } else if ctl.close(CloseCause::Idle) {
                        c.bump(Counter::LimitIdle);
                    }
                } else {
                    idle_at = Instant::now() + Duration::from_millis(idle_ms.saturating_sub(quiet_ms).max(10));
                }
            }
            _ = sleep_until(grace_end.unwrap_or(start)), if grace_end.is_some() => {
                c.bump(Counter::ClosedGraceExpired);
                return;
            }
        }
    }
}
