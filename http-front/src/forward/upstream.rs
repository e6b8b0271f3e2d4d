//! Upstreams and their connection pools: one pool per upstream *per worker thread*, so that a
//! request takes and returns a connection without a lock or a shared cache line.
//!
//! HTTP/1.1 upstreams pool raw connections that [`crate::forward::h1`] drives inline, in the task of
//! the request that uses them (no connection task, no channel). A pool keeps at most
//! `pool_max_idle` idle connections (most recently used first), drops one idle for longer than
//! `pool_idle_timeout`, and drops one whose server closed it or sent bytes nobody asked for
//! (seen at checkout from the socket's readiness, without a system call, and by the sweep
//! each worker runs at most once a second as connections come back, and [`sweep_loop`]). A connection that errors, or whose
//! response said it is not reusable, is never returned.
//!
//! HTTP/2 upstreams (h2c, h2) keep one multiplexed hyper connection per worker thread (its
//! task spawned from that worker), replaced when it closes. New connections dial the
//! upstream's servers in turn, each within the connect timeout; `https` and `h2` upstreams
//! then shake hands under the same timeout, with the upstream's own settings and session
//! cache ([`crate::tls::origin`]), a failure counted by cause and never retried in cleartext.

use std::cell::RefCell;
use std::collections::VecDeque;
use std::io;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use bytes::BytesMut;
use http::Uri;
use http::uri::{Authority, PathAndQuery, Scheme};
use hyper::client::conn::http2;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use std::pin::Pin;
use std::task::{Context, Poll};

use rustls::pki_types::ServerName;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;
use tokio_rustls::client::TlsStream;

use crate::tls::origin::{Cause, count_handshake};

use crate::config;

/// The body type sent to h2c upstreams: the client's body, under its bounds ([`crate::forward::reqbody`]).
pub type UpBody = crate::forward::reqbody::ClientBody;

/// Initial read buffer of an upstream connection.
pub(crate) const READ_BUF: usize = 8 * 1024;

/// HTTP/1.1 upstream connections open (in use or idle), over every upstream and thread.
static OPEN: AtomicUsize = AtomicUsize::new(0);
/// The most that may be open at once ([`set_limit`]).
static LIMIT: AtomicUsize = AtomicUsize::new(usize::MAX);
/// The upstreams configured, among which [`LIMIT`]'s last quarter is shared evenly.
static UPSTREAMS: AtomicUsize = AtomicUsize::new(1);

/// Sets how many HTTP/1.1 upstream connections may be open at once: what the descriptor
/// budget gives origins (`max_connections` plus the idle pools), whatever the clients'
/// HTTP/2 streams ask for; and among how many upstreams (past three quarters of it, an
/// upstream opens more only below its even share).
pub fn set_limit(n: usize, upstreams: usize) {
    LIMIT.store(n.max(1), Ordering::Relaxed);
    UPSTREAMS.store(upstreams.max(1), Ordering::Relaxed);
}

/// HTTP/1.1 upstream connections open now.
pub fn open_connections() -> usize {
    OPEN.load(Ordering::Relaxed)
}

/// The error of a connection not made because [`set_limit`]'s bound is reached.
#[derive(Debug, thiserror::Error)]
#[error("the upstream connection limit is reached")]
pub struct AtCapacity;

/// Whether `e` says the upstream connection limit was reached.
pub fn at_capacity(e: &io::Error) -> bool {
    e.get_ref().is_some_and(|i| i.is::<AtCapacity>())
}

/// A place among the open upstream connections, given back with its connection.
#[derive(Debug)]
pub(crate) struct Slot(Arc<AtomicUsize>);

impl Slot {
    /// A place for a connection of the upstream whose open connections `mine` counts, when
    /// the limit leaves one. Past three quarters of the limit, only an upstream holding less
    /// than its even share (the limit divided among the upstreams) opens more: a hung origin
    /// whose requests pile up takes three quarters at most, and healthy upstreams keep the
    /// rest.
    pub(crate) fn take(mine: &Arc<AtomicUsize>) -> Option<Slot> {
        let open = OPEN.fetch_add(1, Ordering::Relaxed);
        let own = mine.fetch_add(1, Ordering::Relaxed);
        let (limit, upstreams) = (
            LIMIT.load(Ordering::Relaxed),
            UPSTREAMS.load(Ordering::Relaxed),
        );
        if !admits(limit, upstreams, open, own) {
            OPEN.fetch_sub(1, Ordering::Relaxed);
            mine.fetch_sub(1, Ordering::Relaxed);
            return None;
        }
        Some(Slot(Arc::clone(mine)))
    }
}

/// Whether one more connection is let open, of an upstream holding `own` while `open` are
/// open over all `upstreams` (see [`Slot::take`]).
fn admits(limit: usize, upstreams: usize, open: usize, own: usize) -> bool {
    open < limit && (open < limit - limit / 4 || own < limit / upstreams.max(1))
}

impl Drop for Slot {
    fn drop(&mut self) {
        OPEN.fetch_sub(1, Ordering::Relaxed);
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

/// One `[[upstream]]`: its settings, and what identifies its per-thread pools.
#[derive(Debug)]
pub struct Upstream {
    /// The settings it was built from (a reload with equal settings keeps this upstream and its pools).
    pub cfg: config::Upstream,
    id: u64,
    next: AtomicUsize,
    /// Alive while this upstream is: pools of an upstream gone after a reload are dropped by the sweep.
    token: Arc<()>,
    /// Its HTTP/1.1 connections open (in use or idle), for its share of [`set_limit`]'s.
    open: Arc<AtomicUsize>,
    /// `:authority` of h2c requests without a client host.
    authority: Authority,
}

/// What a pooled connection needs to find its way back: the pool's key and bounds (no
/// reference to the upstream, so that a response body does not touch a shared counter).
#[derive(Clone, Copy, Debug)]
pub(crate) struct PoolKey {
    id: u64,
    max_idle: usize,
}

/// The bytes of an upstream connection: cleartext, or TLS over it.
#[derive(Debug)]
pub(crate) enum UpIo {
    /// `http1`, `h2c`.
    Plain(TcpStream),
    /// `https`, `h2`.
    Tls(Box<TlsStream<TcpStream>>),
}

impl UpIo {
    /// The TCP connection under it.
    #[cfg(test)]
    pub(crate) fn tcp(&self) -> &TcpStream {
        match self {
            UpIo::Plain(s) => s,
            UpIo::Tls(s) => s.get_ref().0,
        }
    }
}

impl AsyncRead for UpIo {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        match self.get_mut() {
            UpIo::Plain(s) => Pin::new(s).poll_read(cx, buf),
            UpIo::Tls(s) => Pin::new(s.as_mut()).poll_read(cx, buf),
        }
    }
}

impl AsyncWrite for UpIo {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            UpIo::Plain(s) => Pin::new(s).poll_write(cx, buf),
            UpIo::Tls(s) => Pin::new(s.as_mut()).poll_write(cx, buf),
        }
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            UpIo::Plain(s) => Pin::new(s).poll_write_vectored(cx, bufs),
            UpIo::Tls(s) => Pin::new(s.as_mut()).poll_write_vectored(cx, bufs),
        }
    }

    fn is_write_vectored(&self) -> bool {
        match self {
            UpIo::Plain(s) => s.is_write_vectored(),
            UpIo::Tls(s) => s.is_write_vectored(),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            UpIo::Plain(s) => Pin::new(s).poll_flush(cx),
            UpIo::Tls(s) => Pin::new(s.as_mut()).poll_flush(cx),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            UpIo::Plain(s) => Pin::new(s).poll_shutdown(cx),
            UpIo::Tls(s) => Pin::new(s.as_mut()).poll_shutdown(cx),
        }
    }
}

/// An HTTP/1.1 connection to an upstream server, with its buffers.
#[derive(Debug)]
pub(crate) struct Conn {
    pub(crate) io: UpIo,
    /// Bytes read and not yet consumed.
    pub(crate) rbuf: BytesMut,
    /// The request head being written.
    pub(crate) wbuf: Vec<u8>,
    /// Its place among the open upstream connections.
    pub(crate) _slot: Slot,
}

struct Idle {
    conn: Conn,
    since: Instant,
}

/// One upstream's pool on one thread.
struct Pool {
    id: u64,
    token: Weak<()>,
    idle_timeout: Duration,
    /// Oldest first; checkout takes the newest.
    idle: VecDeque<Idle>,
    h2: Option<http2::SendRequest<UpBody>>,
}

thread_local! {
    static POOLS: RefCell<Vec<Pool>> = const { RefCell::new(Vec::new()) };
    /// When this thread's pools were last swept.
    static LAST_SWEEP: std::cell::Cell<Option<Instant>> = const { std::cell::Cell::new(None) };
}

/// Least time between two sweeps of a thread's pools.
const SWEEP_EVERY: Duration = Duration::from_secs(1);

/// True while an idle connection has nothing to read: a FIN, a reset or stray bytes make it
/// readable. The readiness check is a load; a read happens only when the socket is readable.
/// Over TLS, records that carry no data (a session ticket) are taken by rustls and leave
/// the connection idle; a close_notify or data does not.
fn idle_ok(io: &mut UpIo) -> bool {
    match io {
        UpIo::Plain(s) => {
            let mut b = [0u8; 1];
            matches!(s.try_read(&mut b), Err(e) if e.kind() == io::ErrorKind::WouldBlock)
        }
        UpIo::Tls(s) => {
            let mut b = [0u8; 1];
            let mut rb = ReadBuf::new(&mut b);
            let mut cx = Context::from_waker(std::task::Waker::noop());
            Pin::new(s.as_mut())
                .poll_read(&mut cx, &mut rb)
                .is_pending()
        }
    }
}

impl Upstream {
    /// The upstream for `cfg` (connects lazily).
    pub fn new(cfg: &config::Upstream) -> Upstream {
        static IDS: AtomicU64 = AtomicU64::new(1);
        Upstream {
            cfg: cfg.clone(),
            id: IDS.fetch_add(1, Ordering::Relaxed),
            next: AtomicUsize::new(0),
            token: Arc::new(()),
            open: Arc::default(),
            authority: Authority::try_from(cfg.servers[0].to_string().as_str())
                .expect("a socket address is an authority"),
        }
    }

    pub(crate) fn key(&self) -> PoolKey {
        PoolKey {
            id: self.id,
            // A connection that began with one client's PROXY header is that client's only.
            max_idle: if self.cfg.send_proxy.is_some() {
                0
            } else {
                self.cfg.pool_max_idle
            },
        }
    }

    fn with_pool<R>(&self, f: impl FnOnce(&mut Pool) -> R) -> R {
        POOLS.with(|p| {
            let mut pools = p.borrow_mut();
            let i = match pools.iter().position(|p| p.id == self.id) {
                Some(i) => i,
                None => {
                    pools.push(Pool {
                        id: self.id,
                        token: Arc::downgrade(&self.token),
                        idle_timeout: self.cfg.pool_idle_timeout,
                        idle: VecDeque::new(),
                        h2: None,
                    });
                    pools.len() - 1
                }
            };
            f(&mut pools[i])
        })
    }

    /// This thread's most recently used idle connection that is still good, if any.
    /// (Makes this thread's pool on first use, so that [`checkin`] finds it.)
    pub(crate) fn checkout(&self) -> Option<Conn> {
        if self.cfg.send_proxy.is_some() {
            return None;
        }
        self.with_pool(|pool| {
            while let Some(mut idle) = pool.idle.pop_back() {
                if idle.since.elapsed() >= pool.idle_timeout {
                    // Every older one has expired too.
                    pool.idle.clear();
                    return None;
                }
                if idle_ok(&mut idle.conn.io) {
                    return Some(idle.conn);
                }
            }
            None
        })
    }

    /// A new connection to the next server that accepts one within the connect timeout, and
    /// that server's address.
    async fn connect(&self) -> io::Result<(TcpStream, SocketAddr)> {
        let servers = &self.cfg.servers;
        let n = servers.len();
        let start = self.next.fetch_add(1, Ordering::Relaxed);
        let mut last = io::Error::new(io::ErrorKind::NotFound, "no upstream server");
        for k in 0..n {
            let addr: SocketAddr = servers[(start + k) % n];
            match tokio::time::timeout(self.cfg.connect_timeout, TcpStream::connect(addr)).await {
                Ok(Ok(s)) => {
                    let _ = s.set_nodelay(true);
                    return Ok((s, addr));
                }
                Ok(Err(e)) => {
                    tracing::debug!(upstream = %self.cfg.name, %addr, error = %e, "connect failed");
                    last = e;
                }
                Err(_) => {
                    tracing::debug!(upstream = %self.cfg.name, %addr, "connect timed out");
                    last = io::Error::new(io::ErrorKind::TimedOut, "connect timed out");
                }
            }
        }
        Err(last)
    }

    /// A new HTTP/1.1 connection (for `client`: with `send_proxy`, its PROXY header is
    /// written first).
    pub(crate) async fn connect_h1(&self, client: &crate::forward::ClientInfo) -> io::Result<Conn> {
        let slot = Slot::take(&self.open).ok_or_else(|| io::Error::other(AtCapacity))?;
        let (mut io, addr) = self.connect().await?;
        if let Some(v) = self.cfg.send_proxy {
            use tokio::io::AsyncWriteExt as _;
            let header = match v {
                config::SendProxy::V2 => shield::proxy_proto::v2_header(client.src, client.dst),
                config::SendProxy::V1 => {
                    shield::proxy_proto::v1_header(client.src, client.dst).into_bytes()
                }
            };
            io.write_all(&header).await?;
        }
        let io = self.secure(io, addr, false).await?;
        Ok(Conn {
            io,
            rbuf: BytesMut::with_capacity(READ_BUF),
            wbuf: Vec::with_capacity(1024),
            _slot: slot,
        })
    }

    /// `io` as is for a cleartext upstream; for a TLS one, after the handshake with `addr`
    /// (verified against `tls_server_name`, else the address), within the connect timeout,
    /// with ALPN `h2` (`h2`) or `http/1.1`.
    async fn secure(&self, io: TcpStream, addr: SocketAddr, h2: bool) -> io::Result<UpIo> {
        let Some(t) = &self.cfg.tls else {
            return Ok(UpIo::Plain(io));
        };
        let name = t
            .server_name
            .clone()
            .unwrap_or_else(|| ServerName::IpAddress(addr.ip().into()));
        let (config, want): (_, &[u8]) = match (&t.h2, h2) {
            (Some(c), true) => (c, b"h2"),
            _ => (&t.h1, b"http/1.1"),
        };
        let connector = tokio_rustls::TlsConnector::from(Arc::clone(config));
        let fail = |cause: Cause, e: io::Error| {
            cause.count();
            tracing::warn!(upstream = %self.cfg.name, %addr, cause = cause.name(), error = %e, "TLS to the origin failed");
            e
        };
        let s = match tokio::time::timeout(self.cfg.connect_timeout, connector.connect(name, io))
            .await
        {
            Ok(Ok(s)) => s,
            Ok(Err(e)) => return Err(fail(Cause::of(&e), e)),
            Err(_) => {
                return Err(fail(
                    Cause::Handshake,
                    io::Error::new(io::ErrorKind::TimedOut, "TLS handshake timed out"),
                ));
            }
        };
        let conn = s.get_ref().1;
        // An origin without ALPN speaks HTTP/1.1; h2 must be agreed.
        if conn.alpn_protocol().map_or(h2, |p| p != want) {
            return Err(fail(
                Cause::Alpn,
                io::Error::other(format!(
                    "the origin did not agree to ALPN {}",
                    String::from_utf8_lossy(want)
                )),
            ));
        }
        count_handshake(conn.handshake_kind() == Some(rustls::HandshakeKind::Resumed));
        Ok(UpIo::Tls(Box::new(s)))
    }

    /// This thread's HTTP/2 connection, dialled when there is none or it has closed.
    pub(crate) async fn h2_sender(&self) -> io::Result<http2::SendRequest<UpBody>> {
        if let Some(s) = self.with_pool(|p| {
            p.h2.as_ref()
                .filter(|s| !s.is_closed())
                .cloned()
                .or_else(|| {
                    p.h2 = None;
                    None
                })
        }) {
            return Ok(s);
        }
        let (io, addr) = self.connect().await?;
        let io = self.secure(io, addr, true).await?;
        let mut b = http2::Builder::new(TokioExecutor::new());
        b.timer(TokioTimer::new())
            .keep_alive_interval(Duration::from_secs(30))
            .keep_alive_timeout(Duration::from_secs(20));
        let (sender, conn) = b
            .handshake::<_, UpBody>(TokioIo::new(io))
            .await
            .map_err(io::Error::other)?;
        let name = self.cfg.name.clone();
        tokio::spawn(async move {
            if let Err(e) = conn.await {
                tracing::debug!(upstream = %name, error = %e, "h2c upstream connection ended");
            }
        });
        self.with_pool(|p| p.h2 = Some(sender.clone()));
        Ok(sender)
    }

    /// The URI an HTTP/2 request for `pq` is sent with (`https` over TLS): `:authority` is the client's host when it
    /// has one (else the first server's address), `:path` its path and query.
    pub fn h2_uri(&self, pq: Option<&PathAndQuery>, host: Option<&http::HeaderValue>) -> Uri {
        let mut parts = http::uri::Parts::default();
        parts.scheme = Some(if self.cfg.tls.is_some() {
            Scheme::HTTPS
        } else {
            Scheme::HTTP
        });
        parts.authority = Some(
            host.and_then(|h| Authority::try_from(h.as_bytes()).ok())
                .unwrap_or_else(|| self.authority.clone()),
        );
        parts.path_and_query = Some(
            pq.cloned()
                .unwrap_or_else(|| PathAndQuery::from_static("/")),
        );
        Uri::from_parts(parts).expect("scheme, authority and path make a URI")
    }

    /// Whether requests go out over HTTP/2 (h2c or h2).
    pub fn is_h2(&self) -> bool {
        self.cfg.protocol.is_h2()
    }
}

/// Returns a connection that finished an exchange and may carry another to this thread's pool
/// of `key` (dropped when the pool is full, or gone).
pub(crate) fn checkin(key: PoolKey, conn: Conn) {
    if key.max_idle == 0 {
        return;
    }
    let now = Instant::now();
    // Each worker sweeps its own pools as it works: the runtime moves tasks between threads,
    // so no single timer task sees every thread's pools.
    if LAST_SWEEP
        .get()
        .is_none_or(|t| now.duration_since(t) >= SWEEP_EVERY)
    {
        LAST_SWEEP.set(Some(now));
        sweep();
    }
    let overflow = POOLS.with(|p| {
        let mut pools = p.borrow_mut();
        let pool = pools.iter_mut().find(|p| p.id == key.id)?;
        pool.idle.push_back(Idle { conn, since: now });
        if pool.idle.len() > key.max_idle {
            pool.idle.pop_front()
        } else {
            None
        }
    });
    drop(overflow);
}

/// Drops this thread's idle connections that expired or were closed by their server, and
/// the pools (with their h2c connection) of upstreams that no longer exist.
pub fn sweep() {
    let gone: Vec<Pool> = POOLS.with(|p| {
        let mut pools = p.borrow_mut();
        let mut gone = Vec::new();
        let mut i = 0;
        while i < pools.len() {
            if pools[i].token.strong_count() == 0 {
                gone.push(pools.swap_remove(i));
                continue;
            }
            let pool = &mut pools[i];
            let timeout = pool.idle_timeout;
            pool.idle
                .retain_mut(|c| c.since.elapsed() < timeout && idle_ok(&mut c.conn.io));
            i += 1;
        }
        gone
    });
    drop(gone);
}

/// Runs [`sweep`] every second on whichever worker polls it (busy workers also sweep their
/// own pools as connections come back: see `checkin`).
pub async fn sweep_loop() {
    let mut tick = tokio::time::interval(SWEEP_EVERY);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        sweep();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg(max_idle: usize, idle_ms: u64) -> config::Upstream {
        config::Upstream {
            name: "t".into(),
            servers: vec!["127.0.0.1:1".parse().unwrap()],
            protocol: config::UpstreamProtocol::Http1,
            connect_timeout: Duration::from_secs(1),
            response_timeout: Duration::from_secs(1),
            pool_idle_timeout: Duration::from_millis(idle_ms),
            pool_max_idle: max_idle,
            send_proxy: None,
            tls: None,
        }
    }

    #[test]
    fn past_three_quarters_of_the_bound_only_an_upstream_under_its_share_opens_more() {
        // 100 among 4 upstreams: 25 each once 75 are open.
        assert!(admits(100, 4, 74, 74), "one takes three quarters");
        assert!(!admits(100, 4, 75, 75), "and no more");
        assert!(admits(100, 4, 75, 0), "another still opens");
        assert!(admits(100, 4, 99, 24));
        assert!(!admits(100, 4, 99, 25), "past its share");
        assert!(!admits(100, 4, 100, 0), "the bound holds for all");
        assert!(admits(100, 1, 99, 99), "a lone upstream has it all");
        assert!(admits(1, 1, 0, 0));
    }

    async fn pair(l: &tokio::net::TcpListener) -> (Conn, TcpStream) {
        let c = TcpStream::connect(l.local_addr().unwrap()).await.unwrap();
        let (s, _) = l.accept().await.unwrap();
        (
            Conn {
                io: UpIo::Plain(c),
                rbuf: BytesMut::new(),
                wbuf: Vec::new(),
                _slot: Slot::take(&Arc::default()).unwrap(),
            },
            s,
        )
    }

    #[tokio::test(flavor = "current_thread")]
    async fn pool_is_bounded_lifo_and_drops_closed_and_expired() {
        let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let up = Upstream::new(&cfg(2, 60_000));
        assert!(up.checkout().is_none());
        let mut peers = Vec::new();
        let mut ports = Vec::new();
        for _ in 0..3 {
            let (c, s) = pair(&l).await;
            ports.push(c.io.tcp().local_addr().unwrap().port());
            checkin(up.key(), c);
            peers.push(s);
        }
        // Bounded at two: the oldest went; the newest comes out first.
        let a = up.checkout().unwrap();
        assert_eq!(a.io.tcp().local_addr().unwrap().port(), ports[2]);
        checkin(up.key(), a);
        // The server closes the newest: checkout skips it once its FIN is seen.
        drop(peers.pop());
        tokio::time::sleep(Duration::from_millis(50)).await;
        tokio::task::yield_now().await;
        let b = up.checkout().unwrap();
        assert_eq!(b.io.tcp().local_addr().unwrap().port(), ports[1]);
        assert!(up.checkout().is_none());

        // Expiry.
        let up = Upstream::new(&cfg(4, 20));
        assert!(up.checkout().is_none());
        let (c, _s) = pair(&l).await;
        checkin(up.key(), c);
        tokio::time::sleep(Duration::from_millis(40)).await;
        assert!(up.checkout().is_none());

        // No pooling at all.
        let up = Upstream::new(&cfg(0, 60_000));
        assert!(up.checkout().is_none());
        let (c, _s) = pair(&l).await;
        checkin(up.key(), c);
        assert!(up.checkout().is_none());

        // A pool whose upstream is gone is swept.
        let n = POOLS.with(|p| p.borrow().len());
        drop(up);
        sweep();
        assert!(POOLS.with(|p| p.borrow().len()) < n);
    }
}
