//! DNS over TCP (RFC 7766): one wildcard listener, pipelined queries answered out of order,
//! bounded everything.
//!
//! The local address of an accepted connection says which service address was asked; a
//! connection to any other address is closed. Queries on a connection are read while
//! earlier answers are still being written, and each is answered as soon as it is ready
//! (RFC 7766 §7): a zone transfer streams from a task of its own, and the answers to the
//! queries read after it go out between its messages instead of waiting for its end.
//! `tcp_max_pipelined` bounds the queries read but not yet answered (a transfer counts
//! until its last message is written), and 64 KiB (`QUEUED_BYTES`) the answers built but
//! not yet written: at either bound reading stops, so a client that does not read stops
//! being read from instead of growing our memory (a connection holds at most that much besides the
//! answer in hand and a transfer's few messages, whatever its answers' sizes). Connections
//! are bounded in total and per source, idle connections are closed (after a second while
//! the table is more than three quarters full), and so are connections that reach the query
//! limit. A client that asks (RFC 7828) is told the idle timeout. When the table is full, a
//! new connection closes a quiet connection (every query answered, none begun: RFC 7766
//! §6.2.3) rather than being refused: of the longest-quiet few, the one whose source holds
//! most connections. So connections opened and held silent, however fast they come back,
//! cannot keep new clients out, and a client with one connection is the last to go; only
//! when no connection is quiet is the new one refused.
//!
//! DNS over TLS (RFC 7858) is the same server behind a handshake: its listeners' sources
//! meet the block map before the handshake, and share the connection bounds with TCP.

use std::collections::{BTreeMap, HashMap};
use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use listener::addrs::AddrSet;
use shield::ratelimit::host_source;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{Notify, OwnedSemaphorePermit, Semaphore, mpsc};
use tokio::task::JoinSet;
use tokio::time::Instant;

use crate::observe::counters::{DropCause, WorkerStats};
use crate::query::module::Step;
use crate::query::process_query::{Outcome, Processor, Transport};

/// Longest query accepted over TCP; a longer length prefix closes the connection.
const MAX_QUERY: usize = 16 * 1024;

/// Bytes of answers one connection may hold built but not yet written (one larger answer
/// still goes, alone).
const QUEUED_BYTES: usize = 64 * 1024;

/// Evictions under way at once (each a new connection waiting for the slot its victim frees);
/// past it a new connection to a full table is refused.
const MAX_EVICTING: usize = 64;

/// The longest-quiet connections looked at for one eviction (the one whose source holds most
/// connections goes).
const EVICT_CANDIDATES: usize = 16;

/// How long a new connection waits for the slot of the connection it evicted.
const EVICT_WAIT: Duration = Duration::from_millis(250);

/// How long a new connection to a full table where no connection is in the eviction order
/// yet waits before looking again (those woken by the pressure take their places).
const REGISTER_WAIT: Duration = Duration::from_millis(50);

/// How often a connection waiting on its client under pressure, not yet in the eviction
/// order, looks whether it may take its place there.
const PRESSED_TICK: Duration = Duration::from_millis(100);

/// Bytes one connection's reads take from its socket at once: the queries a client
/// pipelines together cost one receive.
const READ_BUFFER: usize = 2048;

/// Bytes of answers waiting together that one write sends at most: the answers to
/// pipelined queries cost one send, not one each.
const WRITE_BATCH: usize = 16 * 1024;

/// Bytes of a batch buffer a connection keeps between bursts.
const KEPT_BATCH: usize = 4096;

/// Messages of the transfers of one connection queued for writing; a transfer waits while
/// the queue is full (answers to queries go first, from a queue of their own).
const XFR_QUEUE: usize = 4;

thread_local! {
    /// Scratch space for one response: processing never awaits, so one per thread is enough.
    static OUT: std::cell::RefCell<Vec<u8>> = std::cell::RefCell::new(vec![0u8; 65535 + 2]);
}

/// Limits for TCP clients.
#[derive(Debug, Clone)]
pub struct TcpLimits {
    /// Connections at once.
    pub max_connections: usize,
    /// Connections from one source address.
    pub max_per_source: usize,
    /// Idle time before closing.
    pub idle: Duration,
    /// Queries per connection.
    pub max_queries: usize,
    /// Queries read but not yet answered on one connection before reading stops.
    pub max_pipelined: usize,
    /// Idle time before closing while more than three quarters of `max_connections` are open.
    pub pressed_idle: Duration,
    /// Bytes per second a client must take of a transfer (`[transfer]
    /// out_min_rate_bytes_per_sec`; 0: none).
    pub xfr_min_rate: u64,
}

/// A message on its way to the writer (see [`crate::query::handoff::Outgoing`]).
type Answer = crate::query::handoff::Outgoing;

/// Shared state of the TCP side.
pub struct TcpServer {
    limits: TcpLimits,
    addrs: AddrSet,
    /// Proxies whose connections start with a PROXY v2 header (`[server] proxy_allow`).
    proxy: Arc<shield::proxy_proto::ProxyAllow>,
    slots: Arc<Semaphore>,
    per_source: Mutex<HashMap<IpAddr, usize>>,
    stats: Arc<WorkerStats>,
    defence: Option<Arc<crate::query::defence::Shared>>,
    make: Box<dyn Fn() -> Processor + Send + Sync>,
    /// Times a connection was held back at a bound on its unanswered queries or unread answers.
    pipeline_full: AtomicU64,
    /// Per stream transport (TCP, DoT, DoQ: [`Stream`] order): queries read, and times held
    /// back (the table and its bounds are shared; an incident needs to know which is abused).
    by_stream: [[AtomicU64; 2]; 3],
    /// Quiet connections while the table is pressed, by when they fell quiet (and a number
    /// to tell apart those of one instant): told to close, oldest first, when it is full.
    quiet: Mutex<BTreeMap<QuietKey, (IpAddr, Arc<Notify>)>>,
    /// Numbers for `quiet`'s keys.
    quiet_seq: AtomicU64,
    /// New connections waiting for the slot of the one they evicted.
    evicting: AtomicUsize,
    /// Quiet connections closed to make room for a new one.
    evicted: AtomicU64,
    /// See [`TcpServer::refused_over_share`].
    unfair: AtomicU64,
    /// Wakes the connections waiting on their clients when the table becomes pressed, so
    /// that they take their places in the eviction order at once.
    pressure: Notify,
    /// Listed proxies' connections whose PROXY header has not come yet (they count against
    /// no source's share: at most a quarter of the table).
    proxy_pending: AtomicUsize,
}

/// When a connection fell quiet, and a number to tell apart those of one instant.
type QuietKey = (Instant, u64);

/// The transports of the TCP table's connections.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Stream {
    /// DNS over TCP.
    Tcp = 0,
    /// DNS over TLS.
    Tls = 1,
    /// DNS over QUIC.
    Quic = 2,
}

impl Stream {
    const NAMES: [&'static str; 3] = ["tcp", "tls", "quic"];
}

/// A connection slot for a new connection.
pub(super) enum Slot {
    /// A free one.
    Free(OwnedSemaphorePermit),
    /// None free, but a quiet connection was told to close: wait for its slot
    /// ([`TcpServer::after_eviction`]).
    Evicting,
    /// None free and none quiet yet: the connections the pressure woke take their places
    /// within a moment; look again then ([`TcpServer::after_eviction`]).
    Later,
    /// None free and none to be made free.
    Full,
}

/// What waiting for a query's length prefix came to.
pub(super) enum Waited<T> {
    /// What was waited for came (a read ended, a permit was given).
    Done(T),
    /// Not within the idle time (the pressed idle time while the table is pressed).
    Idle,
    /// Closed to make room for a new connection.
    Evicted,
}

impl<T> Waited<T> {
    /// What was waited for, or `Err` when the wait ends the connection because its client
    /// held it without progress (the idle time counted as a timeout; an eviction counted
    /// where it was decided).
    fn or_cut(self, stats: &WorkerStats) -> Result<T, ()> {
        match self {
            Waited::Done(t) => Ok(t),
            Waited::Idle => {
                stats.dropped(DropCause::TcpTimeout);
                Err(())
            }
            Waited::Evicted => Err(()),
        }
    }
}

/// A quiet connection's place in [`TcpServer::quiet`], left when dropped.
struct QuietPlace<'a> {
    server: &'a TcpServer,
    key: QuietKey,
    told: Arc<Notify>,
}

impl Drop for QuietPlace<'_> {
    fn drop(&mut self) {
        self.server
            .quiet
            .lock()
            .expect("quiet lock")
            .remove(&self.key);
    }
}

impl TcpServer {
    /// A TCP server for the service addresses `addrs`; `make` builds a query processor
    /// (writing to `stats`); with `defence`, accepted connections walk its `on_accept` point.
    pub fn new(
        limits: TcpLimits,
        addrs: AddrSet,
        proxy: Arc<shield::proxy_proto::ProxyAllow>,
        stats: Arc<WorkerStats>,
        defence: Option<Arc<crate::query::defence::Shared>>,
        make: Box<dyn Fn() -> Processor + Send + Sync>,
    ) -> Arc<TcpServer> {
        Arc::new(TcpServer {
            slots: Arc::new(Semaphore::new(limits.max_connections)),
            limits,
            addrs,
            proxy,
            per_source: Mutex::new(HashMap::new()),
            stats,
            defence,
            make,
            pipeline_full: AtomicU64::new(0),
            by_stream: Default::default(),
            quiet: Mutex::new(BTreeMap::new()),
            quiet_seq: AtomicU64::new(0),
            evicting: AtomicUsize::new(0),
            evicted: AtomicU64::new(0),
            unfair: AtomicU64::new(0),
            pressure: Notify::new(),
            proxy_pending: AtomicUsize::new(0),
        })
    }

    /// A slot for a new connection from `src` (counted in already): a free one, else the one
    /// the longest-quiet connection is told to give up (at most `MAX_EVICTING` such waits at
    /// once, half of them for sources holding no other connection). A source that holds its
    /// share of a full table already makes room only out of its own quiet connections, and is
    /// refused when it has none: a few addresses reconnecting fast took every eviction, and
    /// 10–27 % of other clients' new connections were reset.
    pub(super) fn take_slot(&self, src: Option<IpAddr>) -> Slot {
        if let Ok(p) = self.slots.clone().try_acquire_owned() {
            // The connection that makes the table pressed tells those waiting on their
            // clients to take their places.
            let open = self.open_connections();
            if open * 4 > self.limits.max_connections * 3
                && (open - 1) * 4 <= self.limits.max_connections * 3
            {
                self.pressure.notify_waiters();
            }
            return Slot::Free(p);
        }
        let held = src.map_or(0, |ip| {
            let m = self.per_source.lock().expect("per-source lock");
            m.get(&host_source(ip)).copied().unwrap_or(0)
        });
        let own = src.filter(|_| held > self.fair_share()).map(host_source);
        let cap = if held <= 1 {
            MAX_EVICTING
        } else {
            MAX_EVICTING / 2
        };
        if self.evicting.fetch_add(1, Ordering::Relaxed) >= cap {
            self.evicting.fetch_sub(1, Ordering::Relaxed);
            return Slot::Full;
        }
        // The victim, and whether any connection waited on its client at all.
        let (victim, none_quiet) = {
            let mut quiet = self.quiet.lock().expect("quiet lock");
            let pick = match own {
                // Over its share: the longest-quiet of its own, looked for among a few more.
                Some(me) => quiet
                    .iter()
                    .take(EVICT_CANDIDATES * 4)
                    .find(|(_, (ip, _))| host_source(*ip) == me)
                    .map(|(k, _)| *k),
                // Of the longest-quiet few, the one whose source holds most connections (the
                // oldest of those): one source's pile goes before another client's only one.
                None => {
                    let per_source = self.per_source.lock().expect("per-source lock");
                    quiet
                        .iter()
                        .take(EVICT_CANDIDATES)
                        .map(|(k, (ip, _))| {
                            (per_source.get(&host_source(*ip)).copied().unwrap_or(0), *k)
                        })
                        .fold(
                            None,
                            |best: Option<(usize, (Instant, u64))>, c| match best {
                                Some(b) if b.0 >= c.0 => Some(b),
                                _ => Some(c),
                            },
                        )
                        .map(|(_, k)| k)
                }
            };
            (pick.and_then(|k| quiet.remove(&k)), quiet.is_empty())
        };
        match victim {
            Some((_, told)) => {
                told.notify_one();
                self.evicted.fetch_add(1, Ordering::Relaxed);
                Slot::Evicting
            }
            None if own.is_some() && !none_quiet => {
                // Quiet connections there are, none its own: it makes room for no one.
                self.evicting.fetch_sub(1, Ordering::Relaxed);
                self.unfair.fetch_add(1, Ordering::Relaxed);
                Slot::Full
            }
            // Still counted in `evicting`: at most MAX_EVICTING wait, either way.
            None => Slot::Later,
        }
    }

    /// The slot a [`Slot::Evicting`] waits for, once its victim has closed; for
    /// [`Slot::Later`], one looked for again a moment later (`None`, counted as a refusal,
    /// when none came).
    pub(super) async fn after_eviction(
        &self,
        slot: Slot,
        src: Option<IpAddr>,
    ) -> Option<OwnedSemaphorePermit> {
        if let Slot::Later = slot {
            tokio::time::sleep(REGISTER_WAIT).await;
            self.evicting.fetch_sub(1, Ordering::Relaxed);
            match self.take_slot(src) {
                Slot::Free(p) => return Some(p),
                Slot::Evicting => {}
                Slot::Later => {
                    self.evicting.fetch_sub(1, Ordering::Relaxed);
                    self.stats.dropped(DropCause::TcpLimit);
                    return None;
                }
                Slot::Full => {
                    self.stats.dropped(DropCause::TcpLimit);
                    return None;
                }
            }
        }
        let p = tokio::time::timeout(EVICT_WAIT, self.slots.clone().acquire_owned()).await;
        self.evicting.fetch_sub(1, Ordering::Relaxed);
        let p = p.ok().and_then(Result::ok);
        if p.is_none() {
            self.stats.dropped(DropCause::TcpLimit);
        }
        p
    }

    /// Quiet connections closed to make room for new ones.
    pub fn evicted(&self) -> u64 {
        self.evicted.load(Ordering::Relaxed)
    }

    /// New connections refused at a full table because their source held its share already
    /// and had no quiet connection of its own to give up.
    pub fn refused_over_share(&self) -> u64 {
        self.unfair.load(Ordering::Relaxed)
    }

    /// The connections one source may hold in a full table and still make room out of
    /// others' for another: a 64th of the table or a quarter of `tcp_max_per_source`, the
    /// smaller, at least 2.
    fn fair_share(&self) -> usize {
        (self.limits.max_connections / 64)
            .min(self.limits.max_per_source / 4)
            .max(2)
    }

    /// The longest a connection may wait for a client now: `idle`, or `pressed_idle` while
    /// the table is pressed.
    pub(super) fn wait_limit(&self, idle: Duration) -> Duration {
        if self.pressed() {
            idle.min(self.limits.pressed_idle)
        } else {
            idle
        }
    }

    /// A place among the quiet connections for `ip`'s connection, since `since`.
    fn fall_quiet(&self, ip: IpAddr, since: Instant) -> QuietPlace<'_> {
        let key = (since, self.quiet_seq.fetch_add(1, Ordering::Relaxed));
        let told = Arc::new(Notify::new());
        self.quiet
            .lock()
            .expect("quiet lock")
            .insert(key, (ip, told.clone()));
        QuietPlace {
            server: self,
            key,
            told,
        }
    }

    /// Counts a connection of `stream` held back at a bound on what it may have unanswered or
    /// unread (DoQ's answers in hand count here too).
    pub(super) fn held_back(&self, stream: Stream) {
        self.pipeline_full.fetch_add(1, Ordering::Relaxed);
        self.by_stream[stream as usize][1].fetch_add(1, Ordering::Relaxed);
    }

    /// Counts a query read from a connection of `stream`.
    #[inline]
    pub(super) fn stream_query(&self, stream: Stream) {
        self.by_stream[stream as usize][0].fetch_add(1, Ordering::Relaxed);
    }

    /// Times a connection was held back at a bound on its unanswered queries or unread answers.
    pub fn pipeline_full(&self) -> u64 {
        self.pipeline_full.load(Ordering::Relaxed)
    }

    /// The table's size (`tcp_max_connections`).
    pub fn max_connections(&self) -> usize {
        self.limits.max_connections
    }

    /// Connections open now.
    pub fn open_connections(&self) -> usize {
        self.limits.max_connections - self.slots.available_permits()
    }

    /// Accepts connections on `l` until the task is dropped.
    pub async fn serve(self: Arc<Self>, l: std::net::TcpListener) -> std::io::Result<()> {
        let l = TcpListener::from_std(l)?;
        // The pipeline's `on_accept` point (a blocked source is closed before anything is
        // read): one plan for this accept loop.
        let mut plan = self.accept_plan();
        let mut last_warn = None;
        loop {
            let (sock, peer) = accept(&l, &mut last_warn).await;
            let stats = &self.stats;
            // A listed proxy's connection: its client is known once the header is read.
            let proxied = self.proxy.contains(peer.ip());
            if !proxied && self.blocked_at_accept(&mut plan, peer.ip()) {
                drop(sock);
                continue;
            }
            let local = match sock.local_addr() {
                Ok(a) => a,
                Err(_) => continue,
            };
            if !self.addrs.contains(local.ip()) {
                stats.dropped(DropCause::TcpWrongAddress);
                drop(sock);
                continue;
            }
            // Over the source's share first: it must not evict anyone to be refused.
            if !proxied && !self.enter(peer.ip()) {
                stats.dropped(DropCause::TcpLimit);
                drop(sock);
                continue;
            }
            // A listed proxy's connection waiting for its header: at most a quarter of the
            // table, counted before it may make room (evict anyone) for itself.
            if proxied && !self.reserve_proxy_pending() {
                stats.dropped(DropCause::TcpLimit);
                drop(sock);
                continue;
            }
            // A listed proxy's connections are its clients': none holds a share.
            let src = (!proxied).then_some(peer.ip());
            let slot = self.take_slot(src);
            if let Slot::Full = slot {
                stats.dropped(DropCause::TcpLimit);
                if proxied {
                    self.proxy_pending.fetch_sub(1, Ordering::Relaxed);
                } else {
                    self.leave(peer.ip());
                }
                drop(sock);
                continue;
            }
            let me = self.clone();
            tokio::spawn(async move {
                let _permit = match slot {
                    Slot::Free(p) => p,
                    other => match me.after_eviction(other, src).await {
                        Some(p) => p,
                        None => {
                            if proxied {
                                me.proxy_pending.fetch_sub(1, Ordering::Relaxed);
                            } else {
                                me.leave(peer.ip());
                            }
                            return;
                        }
                    },
                };
                if proxied {
                    me.proxied(sock, peer, local.ip()).await;
                    return;
                }
                let _ = sock.set_nodelay(true);
                bound_unsent(&sock);
                let (rd, wr) = sock.into_split();
                me.connection(rd, wr, peer, local.ip(), Transport::Tcp, false)
                    .await;
                me.leave(peer.ip());
            });
        }
    }

    /// Accepts DNS over TLS connections on `l` until the task is dropped: a blocked source is
    /// closed before the handshake, the others count against the TCP bounds, and must finish
    /// the handshake within the idle time.
    pub async fn serve_tls(
        self: Arc<Self>,
        l: std::net::TcpListener,
        tls: Arc<super::tls::DotTls>,
    ) -> std::io::Result<()> {
        let l = TcpListener::from_std(l)?;
        let local = l.local_addr()?.ip();
        let mut plan = self.accept_plan();
        let mut last_warn = None;
        loop {
            let (sock, peer) = accept(&l, &mut last_warn).await;
            if self.blocked_at_accept(&mut plan, peer.ip()) {
                continue;
            }
            if !self.enter(peer.ip()) {
                self.stats.dropped(DropCause::TcpLimit);
                continue;
            }
            let slot = self.take_slot(Some(peer.ip()));
            if let Slot::Full = slot {
                self.stats.dropped(DropCause::TcpLimit);
                self.leave(peer.ip());
                continue;
            }
            let me = self.clone();
            let acceptor = tls.acceptor();
            let tls = tls.clone();
            tokio::spawn(async move {
                let _permit = match slot {
                    Slot::Free(p) => p,
                    other => match me.after_eviction(other, Some(peer.ip())).await {
                        Some(p) => p,
                        None => {
                            me.leave(peer.ip());
                            return;
                        }
                    },
                };
                let _ = sock.set_nodelay(true);
                bound_unsent(&sock);
                // A handshake waits on its client: bounded as a silent connection is, and
                // one that makes room for a new connection when the table is full.
                let handshake = acceptor.accept(sock);
                match me
                    .on_client(handshake, me.limits.idle, peer.ip(), || true)
                    .await
                {
                    Waited::Done(Ok(s)) => {
                        tls.handshakes.fetch_add(1, Ordering::Relaxed);
                        let (rd, wr) = tokio::io::split(s);
                        me.connection(rd, wr, peer, local, Transport::Tcp, true)
                            .await;
                    }
                    Waited::Done(Err(_)) => {
                        tls.handshake_failures.fetch_add(1, Ordering::Relaxed);
                    }
                    Waited::Idle => {
                        tls.handshake_timeouts.fetch_add(1, Ordering::Relaxed);
                        me.stats.dropped(DropCause::TcpTimeout);
                    }
                    // Counted where it was decided.
                    Waited::Evicted => {}
                }
                me.leave(peer.ip());
            });
        }
    }

    /// The plan of an accept loop: the defences' `on_accept` point.
    pub(super) fn accept_plan(&self) -> Option<crate::query::defence::Plan> {
        self.defence.as_ref().map(|d| d.plan())
    }

    /// True (and counted) when the pipeline's `on_accept` point drops `ip`: a blocked source
    /// is closed before anything is read (or, over TLS and QUIC, before the handshake).
    pub(super) fn blocked_at_accept(
        &self,
        plan: &mut Option<crate::query::defence::Plan>,
        ip: IpAddr,
    ) -> bool {
        let Some(p) = plan else { return false };
        p.refresh();
        match p.on_accept(ip) {
            Step::Drop(why) => {
                self.stats.dropped(why);
                true
            }
            _ => false,
        }
    }

    /// The counters of the connections' queries.
    pub(super) fn stats(&self) -> &Arc<WorkerStats> {
        &self.stats
    }

    /// The idle time (`tcp_idle_timeout_ms`).
    pub(super) fn idle(&self) -> Duration {
        self.limits.idle
    }

    /// Queries per connection (`tcp_max_queries`).
    pub(super) fn max_queries(&self) -> usize {
        self.limits.max_queries
    }

    /// A query processor for one connection.
    pub(super) fn processor(&self) -> Processor {
        (self.make)()
    }

    /// Counts a connection of `ip` in, unless its source (an IPv6 address: its /64) is at
    /// `tcp_max_per_source`.
    pub(super) fn enter(&self, ip: IpAddr) -> bool {
        let ip = host_source(ip);
        let mut m = self.per_source.lock().expect("per-source lock");
        let n = m.entry(ip).or_insert(0);
        if *n >= self.limits.max_per_source {
            return false;
        }
        *n += 1;
        true
    }

    /// Counts a connection of `ip` out.
    pub(super) fn leave(&self, ip: IpAddr) {
        let ip = host_source(ip);
        let mut m = self.per_source.lock().expect("per-source lock");
        if let Some(n) = m.get_mut(&ip) {
            *n -= 1;
            if *n == 0 {
                m.remove(&ip);
            }
        }
    }

    /// A listed proxy's connection: its PROXY v2 header (within the idle time) names the
    /// client, who then meets the accept-time defences and the per-source limit, and whose
    /// transport (a `DGRAM` client: unproven, sized for UDP) its queries are processed as.
    /// Until the header comes the connection waits as any client's does: the pressed idle
    /// time, evictable under pressure, and at most a quarter of the table waits so (counted
    /// in by [`TcpServer::reserve_proxy_pending`] at accept, out here) — a proxy that
    /// connects and stays silent (a stalled one, or any host of a listed prefix) never holds
    /// the table against direct clients.
    async fn proxied(&self, mut sock: TcpStream, proxy: SocketAddr, local: std::net::IpAddr) {
        use shield::proxy_proto::{Carried, read_header};
        let waited = self
            .on_client(
                read_header(&mut sock, false, self.limits.idle),
                self.limits.idle,
                proxy.ip(),
                || true,
            )
            .await;
        self.proxy_pending.fetch_sub(1, Ordering::Relaxed);
        let h = match waited {
            Waited::Done(Ok(h)) => h,
            Waited::Done(Err(e)) => {
                self.stats.dropped(DropCause::proxy(e));
                return;
            }
            Waited::Idle => {
                self.stats
                    .dropped(DropCause::proxy(shield::proxy_proto::ProxyError::Timeout));
                return;
            }
            Waited::Evicted => return,
        };
        let client = h.source.unwrap_or(proxy);
        if let Some(d) = &self.defence {
            let mut plan = d.plan();
            if let Step::Drop(why) = plan.on_accept(client.ip()) {
                self.stats.dropped(why);
                return;
            }
        }
        if !self.enter(client.ip()) {
            self.stats.dropped(DropCause::TcpLimit);
            return;
        }
        let transport = match h.carried {
            Carried::Datagram => Transport::Udp,
            Carried::Stream | Carried::Unspecified => Transport::Tcp,
        };
        let _ = sock.set_nodelay(true);
        bound_unsent(&sock);
        let (rd, wr) = sock.into_split();
        self.connection(rd, wr, client, local, transport, false)
            .await;
        self.leave(client.ip());
    }

    /// Counts in one more listed proxy's connection waiting for its header; false (nothing
    /// counted) when a quarter of `tcp_max_connections` wait so already.
    fn reserve_proxy_pending(&self) -> bool {
        let cap = (self.limits.max_connections / 4).max(1);
        if self.proxy_pending.fetch_add(1, Ordering::Relaxed) >= cap {
            self.proxy_pending.fetch_sub(1, Ordering::Relaxed);
            return false;
        }
        true
    }

    /// True when more than three quarters of `tcp_max_connections` are open: idle
    /// connections then get `pressed_idle` instead of the idle timeout (RFC 7766 §6.2.3),
    /// so connections held open and silent cannot fill the table against new clients.
    fn pressed(&self) -> bool {
        self.open_connections() * 4 > self.limits.max_connections * 3
    }

    /// Waits for `fut`, something only the client can bring about (its next bytes, or its
    /// reading our answers): [`Waited::Idle`] after `idle` (`pressed_idle` while the
    /// connection table is pressed, looked at again every second). While the table is
    /// pressed and `evictable` says so, the connection takes a place in the eviction order
    /// and may be told to make room for a new one ([`Waited::Evicted`]): a connection waiting
    /// on its client, never one whose queries we are still answering.
    pub(super) async fn on_client<F: std::future::Future>(
        &self,
        fut: F,
        idle: Duration,
        peer: IpAddr,
        evictable: impl Fn() -> bool,
    ) -> Waited<F::Output> {
        let now = Instant::now();
        self.on_client_since(fut, idle, peer, evictable, now).await
    }

    /// [`TcpServer::on_client`], the connection placed in the eviction order as waiting on
    /// its client since `since` (its last answer, for DoQ, whose streams come and go).
    pub(super) async fn on_client_since<F: std::future::Future>(
        &self,
        fut: F,
        idle: Duration,
        peer: IpAddr,
        evictable: impl Fn() -> bool,
        since: Instant,
    ) -> Waited<F::Output> {
        let start = Instant::now();
        // Polled across the waits below, never dropped half done.
        let mut fut = std::pin::pin!(fut);
        let mut place: Option<QuietPlace<'_>> = None;
        loop {
            // Only under pressure does a connection take a place (a lock): the path is free
            // otherwise.
            if place.is_none() && self.pressed() && evictable() {
                place = Some(self.fall_quiet(peer, since.min(start)));
            }
            let left = self.wait_limit(idle).saturating_sub(start.elapsed());
            // Under pressure, one not yet evictable (its last answer still going out) looks
            // again soon: a connection that just fell quiet can make room within a tick.
            let tick = if place.is_none() && self.pressed() {
                PRESSED_TICK
            } else {
                Duration::from_secs(1)
            };
            let told = async {
                match &place {
                    Some(p) => p.told.notified().await,
                    None => std::future::pending().await,
                }
            };
            let pressure = async {
                match place {
                    None => self.pressure.notified().await,
                    Some(_) => std::future::pending().await,
                }
            };
            tokio::select! {
                biased;
                r = &mut fut => return Waited::Done(r),
                _ = told => return Waited::Evicted,
                _ = pressure => {}
                _ = tokio::time::sleep(left.min(tick)) => {
                    if left <= tick {
                        return Waited::Idle;
                    }
                }
            }
        }
    }

    /// Serves one connection's queries, read from `rd`, answered on `wr` (over TLS when
    /// `tls`).
    async fn connection<R, W>(
        &self,
        rd: R,
        wr: W,
        peer: SocketAddr,
        local: std::net::IpAddr,
        transport: Transport,
        tls: bool,
    ) where
        R: AsyncRead + Unpin,
        W: AsyncWrite + Unpin + Send + 'static,
    {
        let depth = self.limits.max_pipelined.max(1);
        let idle = self.limits.idle;
        // One slot per query read and not yet answered.
        let slots = Arc::new(Semaphore::new(depth));
        let bytes = Arc::new(Semaphore::new(QUEUED_BYTES));
        let (tx, rx) = mpsc::channel::<Answer>(depth);
        let (xtx, xrx) = mpsc::channel::<Answer>(XFR_QUEUE);
        let writer = tokio::spawn(write(
            wr,
            rx,
            xrx,
            idle,
            self.limits.xfr_min_rate,
            self.stats.clone(),
        ));
        let mut transfers = JoinSet::new();
        let mut p = (self.make)();
        p.set_local(local);
        if tls {
            p.set_tls();
        }
        let stream = if tls { Stream::Tls } else { Stream::Tcp };
        let stats = self.stats.clone();
        // Queries pipelined together are read with one receive, not two each.
        let mut rd = tokio::io::BufReader::with_capacity(READ_BUFFER, rd);
        let mut len_buf = [0u8; 2];
        let mut req = vec![0u8; 512];
        let mut served = 0;
        let mut refused = false;
        // Closed while its client held it without progress (evicted for a new connection, or
        // stalled past the idle time): what is queued for it is not written.
        let mut cut = false;
        let ip = peer.ip();
        while served < self.limits.max_queries {
            // Finished transfers leave the set (their results are logged by the job).
            while transfers.try_join_next().is_some() {}
            let slot = match slots.clone().try_acquire_owned() {
                Ok(s) => s,
                Err(_) => {
                    // At the bound: nothing more is read until an answer is written, which
                    // waits on the client reading (unless a transfer holds the slots).
                    self.held_back(stream);
                    let wait = slots.clone().acquire_owned();
                    let waited = self.on_client(wait, idle, ip, || transfers.is_empty());
                    match waited.await.or_cut(&stats) {
                        Ok(Ok(s)) => s,
                        Ok(Err(_)) => break,
                        Err(()) => {
                            cut = true;
                            break;
                        }
                    }
                }
            };
            // Quiet: nothing read is unanswered (the slot just taken is the only one out)
            // and no transfer streams.
            let quiet = || slots.available_permits() + 1 == depth && transfers.is_empty();
            // A query already read (pipelined behind the last) is taken without a wait.
            let waited = if rd.buffer().len() >= len_buf.len() {
                Waited::Done(rd.read_exact(&mut len_buf).await)
            } else {
                let read = rd.read_exact(&mut len_buf);
                self.on_client(read, idle, ip, quiet).await
            };
            match waited {
                Waited::Done(Ok(_)) => {}
                Waited::Done(Err(_)) | Waited::Evicted => break,
                Waited::Idle => {
                    // Idle: no query for the idle time (a transfer still streaming keeps
                    // the connection open until it ends, and is not an idle connection).
                    if transfers.is_empty() {
                        stats.dropped(DropCause::TcpTimeout);
                        // Answers still unwritten all that time: the client does not read
                        // them; its writer is not waited for.
                        cut = slots.available_permits() + 1 < depth;
                    }
                    break;
                }
            }
            let len = u16::from_be_bytes(len_buf) as usize;
            // Shorter than a DNS header: no query, and no sign the stream is still framed
            // as the client meant; closed, as Knot and NSD close it (it held the connection
            // until the idle timeout).
            if len < 12 {
                stats.dropped(DropCause::Malformed);
                break;
            }
            // Longer than we take: its start is kept, the rest read past, and FORMERR
            // answers it (as Knot and NSD answer a message they cannot take whole).
            let (len, past) = (len.min(MAX_QUERY), len.saturating_sub(MAX_QUERY));
            if past > 0 {
                stats.oversized();
            }
            req.resize(len, 0);
            // A PROXY header where none is believed: its first two bytes read as a length
            // prefix (3338), its next ten are checked before that much is waited for.
            let mut have = 0;
            if served == 0 && len_buf == [0x0D, 0x0A] {
                have = shield::proxy_proto::V2_SIGNATURE.len() - 2;
                let read = rd.read_exact(&mut req[..have]);
                match self.on_client(read, idle, ip, || true).await {
                    Waited::Done(Ok(_)) => {}
                    _ => break,
                }
                if req[..have] == shield::proxy_proto::V2_SIGNATURE[2..] {
                    stats.dropped(DropCause::ProxyUnlisted);
                    break;
                }
            }
            // A query begun must come whole within the idle time (a second while the
            // table is pressed: a client sends its query at once); a connection waiting for
            // the rest may make room for a new one.
            let waited = if rd.buffer().len() >= len - have {
                Waited::Done(rd.read_exact(&mut req[have..len]).await)
            } else {
                let body = rd.read_exact(&mut req[have..len]);
                self.on_client(body, idle, ip, || true).await
            };
            match waited.or_cut(&stats) {
                Ok(Ok(_)) => {}
                Ok(Err(_)) => break,
                Err(()) => {
                    cut = true;
                    break;
                }
            }
            if past > 0 {
                let (mut rest, mut sink) = ((&mut rd).take(past as u64), tokio::io::sink());
                let rest = tokio::io::copy(&mut rest, &mut sink);
                match self.on_client(rest, idle, ip, || true).await.or_cut(&stats) {
                    Ok(Ok(n)) if n == past as u64 => {}
                    Ok(_) => break,
                    Err(()) => {
                        cut = true;
                        break;
                    }
                }
            }
            p.refresh();
            self.stream_query(stream);
            let reply = OUT.with(|o| {
                let out = &mut *o.borrow_mut();
                let req = &req[..len];
                let outcome = if past > 0 {
                    p.process_oversized(req, peer, transport, &mut out[2..])
                } else {
                    p.process(req, peer, transport, &mut out[2..])
                };
                match outcome {
                    Outcome::Reply(n) => {
                        out[..2].copy_from_slice(&(n as u16).to_be_bytes());
                        Ok(Some(out[..n + 2].to_vec()))
                    }
                    Outcome::Drop | Outcome::Transfer => Ok(None),
                    // Blocked since the connection opened: nothing more is read from it.
                    Outcome::Refused => Err(()),
                }
            });
            let Ok(reply) = reply else {
                refused = true;
                break;
            };
            if let Some(msg) = reply {
                let n = msg.len().min(QUEUED_BYTES) as u32;
                let held = match bytes.clone().try_acquire_many_owned(n) {
                    Ok(h) => h,
                    Err(_) => {
                        // Answers enough wait for a client that does not read: stop reading.
                        self.held_back(stream);
                        let wait = bytes.clone().acquire_many_owned(n);
                        match self.on_client(wait, idle, ip, || true).await.or_cut(&stats) {
                            Ok(Ok(h)) => h,
                            Ok(Err(_)) => break,
                            Err(()) => {
                                cut = true;
                                break;
                            }
                        }
                    }
                };
                let a = Answer {
                    msg,
                    slot: Some(slot),
                    bytes: Some(held),
                };
                if tx.send(a).await.is_err() {
                    break;
                }
            } else if let Some(job) = p.take_transfer() {
                // A zone transfer streams from a task of its own; its slot follows its last
                // message to the writer. Later queries are answered meanwhile.
                let xtx = xtx.clone();
                transfers.spawn(async move {
                    let done = job.run(xtx.clone()).await;
                    let marker = Answer {
                        msg: Vec::new(),
                        slot: Some(slot),
                        bytes: None,
                    };
                    let _ = xtx.send(marker).await;
                    done
                });
            }
            served += 1;
        }
        if served == self.limits.max_queries {
            // Closed at the query limit: a bound hit, counted.
            stats.dropped(DropCause::TcpQueryLimit);
        }
        if refused || cut {
            // A source blocked mid-connection gets nothing more, transfers included; nor does
            // a client that held the connection without progress.
            transfers.abort_all();
            writer.abort();
            return;
        }
        drop(tx);
        drop(xtx);
        // The transfers under way run to their end; the writer ends after their last message.
        while transfers.join_next().await.is_some() {}
        let _ = writer.await;
    }
}

/// The next connection of `l`; accepts that fail are waited out ([`accept_failed`]).
async fn accept(
    l: &TcpListener,
    last_warn: &mut Option<std::time::Instant>,
) -> (TcpStream, SocketAddr) {
    loop {
        match l.accept().await {
            Ok(x) => return x,
            Err(e) => accept_failed(&e, last_warn).await,
        }
    }
}

/// An accept that failed (out of descriptors and the like): back off briefly, keep serving,
/// and say so at most once a second.
async fn accept_failed(e: &std::io::Error, last_warn: &mut Option<std::time::Instant>) {
    let now = std::time::Instant::now();
    if last_warn.is_none_or(|t| now - t >= Duration::from_secs(1)) {
        tracing::warn!(error = %e, "TCP accept failed");
        *last_warn = Some(now);
    }
    tokio::time::sleep(Duration::from_millis(10)).await;
}

/// Time a transfer message may take besides its length at the minimum rate.
const XFR_GRACE: Duration = Duration::from_millis(500);

/// Unsent bytes past which the socket stops taking writes (`TCP_NOTSENT_LOWAT`): a writer
/// waits for its client's reading in steps of this, not of a third of a send buffer that
/// grows to megabytes — which the transfer rate is judged by.
const UNSENT_LOW_WATER: u32 = 128 * 1024;

/// Sets [`UNSENT_LOW_WATER`] on a connection's socket (best effort).
fn bound_unsent(sock: &impl std::os::fd::AsFd) {
    let _ = socket2::SockRef::from(sock).set_tcp_notsent_lowat(UNSENT_LOW_WATER);
}

/// Writes a connection's answers and transfer messages as they come, answers first; ends
/// when both queues are closed and empty, when the client does not read for `idle`, or
/// when it takes a transfer message slower than `xfr_min_rate` (plus [`XFR_GRACE`]).
async fn write<W: AsyncWrite + Unpin>(
    mut wr: W,
    mut answers: mpsc::Receiver<Answer>,
    mut xfr: mpsc::Receiver<Answer>,
    idle: Duration,
    xfr_min_rate: u64,
    stats: Arc<WorkerStats>,
) {
    // Bytes written since the last flush: over TLS a write may leave records in the
    // session's buffer when the socket is full, and nothing would push them once the client
    // reads (its pipelined answers waited for the idle time). Flushed whenever nothing else
    // waits — after an answer, or after a transfer's end marker.
    let mut unflushed = false;
    // Answers already waiting go out with the one just taken, in one write.
    let mut batch: Vec<u8> = Vec::new();
    let mut held: Vec<Answer> = Vec::new();
    loop {
        let (mut a, transfer) = tokio::select! {
            biased;
            Some(a) = answers.recv() => (a, false),
            Some(a) = xfr.recv() => (a, true),
            else => break,
        };
        let batched = !transfer && !answers.is_empty() && a.msg.len() < WRITE_BATCH;
        if batched {
            batch.extend_from_slice(&a.msg);
            while batch.len() < WRITE_BATCH {
                let Ok(next) = answers.try_recv() else { break };
                batch.extend_from_slice(&next.msg);
                held.push(next);
            }
            std::mem::swap(&mut a.msg, &mut batch);
        }
        // A client that does not read is cut off after the idle time; one that reads a
        // transfer too slowly holds a transfer slot no longer than its rate allows.
        let limit = match (transfer, xfr_min_rate) {
            (true, r) if r > 0 => {
                let due = Duration::from_secs_f64(a.msg.len() as f64 / r as f64);
                (XFR_GRACE + due).min(idle)
            }
            _ => idle,
        };
        let write = !a.msg.is_empty();
        let flush = (unflushed || write) && answers.is_empty() && xfr.is_empty();
        if write || flush {
            let sent = async {
                if write {
                    wr.write_all(&a.msg).await?;
                }
                if flush {
                    wr.flush().await?;
                }
                Ok::<(), std::io::Error>(())
            };
            unflushed = !flush;
            match tokio::time::timeout(limit, sent).await {
                Ok(Ok(())) => {}
                Ok(Err(_)) => return,
                Err(_) => {
                    stats.dropped(DropCause::TcpTimeout);
                    return;
                }
            }
        }
        // The queries are answered: their slots and bytes free the reader for the next ones.
        if batched {
            held.clear();
            std::mem::swap(&mut a.msg, &mut batch);
            batch.clear();
            // A burst's buffer is not kept by a connection that goes on quietly (thousands
            // of connections would each hold one).
            if batch.capacity() > KEPT_BATCH {
                batch = Vec::new();
            }
        }
        drop(a);
    }
    let _ = wr.shutdown().await;
}

/// Open TCP connections, and connections held at the pipelining bound.
impl shield::metrics::Source for TcpServer {
    fn collect(&self, out: &mut shield::metrics::Samples) {
        out.gauge(
            "tcp.connections",
            "dnsd_tcp_connections",
            "",
            "Open TCP connections.",
            self.open_connections() as u64,
        );
        out.counter(
            "tcp.pipeline_full",
            "dnsd_tcp_pipeline_full_total",
            "",
            "Times a TCP, DoT or DoQ connection was held back: tcp_max_pipelined unanswered queries, 64 KiB of unsent answers, or DoQ's four answers in hand.",
            self.pipeline_full(),
        );
        out.counter(
            "tcp.evicted",
            "dnsd_tcp_evicted_total",
            "",
            "TCP, DoT or DoQ connections waiting on their clients (silent, stalled in a query or a handshake, not reading answers) closed to make room for a new connection when tcp_max_connections were open.",
            self.evicted(),
        );
        for (i, name) in Stream::NAMES.iter().enumerate() {
            out.counter(
                format!("stream.{name}.queries"),
                "dnsd_stream_queries_total",
                format!("transport=\"{name}\""),
                "Queries read from TCP, DoT and DoQ connections, by transport (they share the TCP table, its bounds and dnsd_queries_total{transport=\"tcp\"}).",
                self.by_stream[i][0].load(Ordering::Relaxed),
            );
            out.counter(
                format!("stream.{name}.held_back"),
                "dnsd_stream_held_back_total",
                format!("transport=\"{name}\""),
                "dnsd_tcp_pipeline_full_total by transport.",
                self.by_stream[i][1].load(Ordering::Relaxed),
            );
        }
        out.counter(
            "tcp.refused_over_share",
            "dnsd_tcp_refused_over_share_total",
            "",
            "New TCP, DoT or DoQ connections refused at a full table because their source held its share (a 64th of tcp_max_connections or a quarter of tcp_max_per_source, at least 2) already and had no quiet connection of its own to give up.",
            self.refused_over_share(),
        );
    }
}

#[cfg(test)]
mod tests {
    //! A TcpServer on loopback, clients bound to chosen 127.0.0.x sources: pipelined queries
    //! answered in order, the query limit, the per-source and total connection limits, the
    //! block map at accept and connections to an address that is not served.

    use std::sync::atomic::Ordering;

    use tokio::net::TcpSocket;

    use super::*;
    use crate::query::defence::Shared;
    use crate::query::process_query::PipelineConfig;
    use crate::query::testkit::{Q, Reply, block, defences, events, example_set, shared};

    fn limits() -> TcpLimits {
        TcpLimits {
            max_connections: 8,
            max_per_source: 4,
            idle: Duration::from_secs(10),
            max_queries: 100,
            max_pipelined: 4,
            pressed_idle: Duration::from_secs(1),
            xfr_min_rate: 32 * 1024,
        }
    }

    /// A server on 127.0.0.1 (an ephemeral port) serving `example.com.`, accepting for
    /// `served` (127.0.0.1 when `None`).
    fn start(
        limits: TcpLimits,
        defence: Option<Arc<Shared>>,
        served: Option<IpAddr>,
    ) -> (Arc<TcpServer>, SocketAddr, Arc<WorkerStats>) {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.set_nonblocking(true).unwrap();
        let addr = l.local_addr().unwrap();
        let stats = Arc::new(WorkerStats::default());
        let zones = example_set();
        let s2 = stats.clone();
        let make = Box::new(move || {
            Processor::new(
                zones.clone(),
                Arc::new(PipelineConfig::default()),
                s2.clone(),
                None,
            )
        });
        let server = TcpServer::new(
            limits,
            AddrSet::new(&[served.unwrap_or(addr.ip())]),
            Arc::default(),
            stats.clone(),
            defence,
            make,
        );
        tokio::spawn(server.clone().serve(l));
        (server, addr, stats)
    }

    async fn connect(src: &str, to: SocketAddr) -> TcpStream {
        let s = TcpSocket::new_v4().unwrap();
        s.bind(SocketAddr::new(src.parse().unwrap(), 0)).unwrap();
        s.connect(to).await.unwrap()
    }

    fn frame(m: &[u8]) -> Vec<u8> {
        let mut f = (m.len() as u16).to_be_bytes().to_vec();
        f.extend_from_slice(m);
        f
    }

    /// The next message, or `None` when the server closed the connection.
    async fn read_msg(s: &mut TcpStream) -> Option<Reply> {
        let mut len = [0u8; 2];
        match tokio::time::timeout(Duration::from_secs(5), s.read_exact(&mut len)).await {
            Err(_) => panic!("no reply and not closed after 5 s"),
            Ok(Err(_)) => return None,
            Ok(Ok(_)) => {}
        }
        let mut m = vec![0u8; u16::from_be_bytes(len) as usize];
        s.read_exact(&mut m).await.unwrap();
        Some(Reply::parse(&m))
    }

    /// One query on `s`, its reply.
    async fn ask(s: &mut TcpStream, id: u16) -> Option<Reply> {
        let q = Q::new("www.example.com.", 1).id(id).bytes();
        if s.write_all(&frame(&q)).await.is_err() {
            return None;
        }
        read_msg(s).await
    }

    fn drops(st: &WorkerStats, c: DropCause) -> u64 {
        st.drops[c as usize].load(Ordering::Relaxed)
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn pipelined_queries_are_answered_in_order_until_the_query_limit() {
        let (_srv, addr, stats) = start(
            TcpLimits {
                max_queries: 3,
                ..limits()
            },
            None,
            None,
        );
        let mut s = connect("127.0.0.2", addr).await;
        // Four queries in one write: three answered in order, then the limit closes.
        let mut burst = Vec::new();
        for (id, name, qtype) in [
            (1, "www.example.com.", 1),
            (2, "www.example.com.", 28),
            (3, "nothere.example.com.", 1),
            (4, "www.example.com.", 1),
        ] {
            burst.extend(frame(&Q::new(name, qtype).id(id).bytes()));
        }
        s.write_all(&burst).await.unwrap();
        let a = read_msg(&mut s).await.unwrap();
        assert_eq!((a.id, a.answer.len()), (1, 1));
        assert_eq!(a.answer[0].rdata, [192, 0, 2, 10]);
        let a = read_msg(&mut s).await.unwrap();
        assert_eq!((a.id, a.answer[0].rtype), (2, 28));
        let a = read_msg(&mut s).await.unwrap();
        assert_eq!((a.id, a.rcode()), (3, crate::query::wire::rcode::NXDOMAIN));
        assert!(read_msg(&mut s).await.is_none(), "closed after 3 queries");
        assert_eq!(drops(&stats, DropCause::TcpQueryLimit), 1);
        assert_eq!(stats.queries.load(Ordering::Relaxed), 3);
        // A large answer goes whole over TCP.
        let mut s = connect("127.0.0.2", addr).await;
        s.write_all(&frame(&Q::new("big.example.com.", 16).bytes()))
            .await
            .unwrap();
        let a = read_msg(&mut s).await.unwrap();
        assert!(!a.tc() && a.answer.len() == 12);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn connections_over_the_per_source_or_total_limit_are_closed_and_counted() {
        let (srv, addr, stats) = start(
            TcpLimits {
                max_connections: 2,
                max_per_source: 1,
                // A query begun waits this long while the table is full (the test's pace).
                pressed_idle: Duration::from_secs(20),
                ..limits()
            },
            None,
            None,
        );
        let mut a = connect("127.0.0.2", addr).await;
        assert!(ask(&mut a, 1).await.is_some());
        // A second connection from the same source: closed at once, counted.
        let mut b = connect("127.0.0.2", addr).await;
        assert!(ask(&mut b, 2).await.is_none(), "over the per-source limit");
        assert_eq!(drops(&stats, DropCause::TcpLimit), 1);
        // Another source is served.
        let mut c = connect("127.0.0.3", addr).await;
        assert!(ask(&mut c, 3).await.is_some());
        assert_eq!(srv.open_connections(), 2);
        // Two open, the total limit, both waiting on their clients: a third source is
        // served by closing the one that waited longest; the table never holds more.
        wait_quiet(&srv, 2).await;
        let mut d = connect("127.0.0.4", addr).await;
        assert!(ask(&mut d, 4).await.is_some(), "served: room was made");
        assert_eq!(srv.evicted(), 1);
        assert_eq!(drops(&stats, DropCause::TcpLimit), 1);
        assert!(srv.open_connections() <= 2);
        assert!(ask(&mut a, 5).await.is_none(), "the longest waiting went");
        assert!(ask(&mut c, 6).await.is_some(), "the other stays");
        // With nobody to close (none in the eviction order), a new source is refused.
        srv.quiet.lock().unwrap().clear();
        let mut e = connect("127.0.0.5", addr).await;
        assert!(ask(&mut e, 7).await.is_none(), "over the total limit");
        assert_eq!(drops(&stats, DropCause::TcpLimit), 2);
        assert_eq!(srv.open_connections(), 2);
        drop((c, d));
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn an_ipv6_source_is_counted_by_its_slash_64() {
        let (srv, _addr, _stats) = start(
            TcpLimits {
                max_per_source: 2,
                ..limits()
            },
            None,
            None,
        );
        let ip = |s: &str| s.parse::<IpAddr>().unwrap();
        assert!(srv.enter(ip("2001:db8:0:1::1")));
        assert!(srv.enter(ip("2001:db8:0:1::2")));
        assert!(!srv.enter(ip("2001:db8:0:1:ffff::3")), "the /64 is full");
        assert!(srv.enter(ip("2001:db8:0:2::1")), "another /64");
        assert!(srv.enter(ip("192.0.2.1")) && srv.enter(ip("::ffff:192.0.2.1")));
        assert!(
            !srv.enter(ip("192.0.2.1")),
            "an IPv4-mapped address is its IPv4 source"
        );
        srv.leave(ip("2001:db8:0:1::1"));
        assert!(srv.enter(ip("2001:db8:0:1::7")), "a place freed");
    }

    /// Waits (5 s at most) for `n` connections to be in the eviction order.
    async fn wait_quiet(srv: &TcpServer, n: usize) {
        for _ in 0..500 {
            if srv.quiet.lock().unwrap().len() == n {
                return;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        let len = srv.quiet.lock().unwrap().len();
        assert_eq!(len, n, "connections in the eviction order");
    }

    /// The first bytes of a query (its length and part of it): the connection waits on its
    /// client for the rest.
    async fn begin_query(s: &mut TcpStream) {
        let f = frame(&Q::new("www.example.com.", 1).id(77).bytes());
        s.write_all(&f[..5]).await.unwrap();
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_full_table_closes_its_longest_quiet_connection_for_a_new_client() {
        let (srv, addr, stats) = start(
            TcpLimits {
                max_connections: 3,
                max_per_source: 1,
                pressed_idle: Duration::from_secs(20),
                ..limits()
            },
            None,
            None,
        );
        // Three connections fill the table; all answered, then silent.
        let mut held = Vec::new();
        for (i, src) in ["127.0.0.2", "127.0.0.3", "127.0.0.4"].iter().enumerate() {
            let mut s = connect(src, addr).await;
            assert!(ask(&mut s, i as u16).await.is_some());
            held.push(s);
        }
        // Each takes its place among the quiet within a second of the table's pressure.
        wait_quiet(&srv, 3).await;
        // A new client is served; the connection quiet longest (the first) is closed.
        let mut new = connect("127.0.0.5", addr).await;
        assert!(ask(&mut new, 10).await.is_some(), "a new client is served");
        assert!(
            read_msg(&mut held[0]).await.is_none(),
            "the oldest is closed"
        );
        assert_eq!(srv.evicted(), 1);
        assert_eq!(drops(&stats, DropCause::TcpLimit), 0);
        assert!(ask(&mut held[1], 11).await.is_some(), "the others stay");
        // A connection stalled in the middle of a query waits on its client too: it may make
        // room for the next one. One whose query ends in time is answered.
        begin_query(&mut held[1]).await;
        wait_quiet(&srv, 3).await;
        let mut late = connect("127.0.0.6", addr).await;
        assert!(ask(&mut late, 12).await.is_some(), "served");
        assert_eq!(srv.evicted(), 2);
        assert_eq!(drops(&stats, DropCause::TcpLimit), 0);
        let mut open = 0;
        for s in [&mut held[2], &mut new] {
            if ask(s, 13).await.is_some() {
                open += 1;
            }
        }
        assert!(open >= 1);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_source_holding_many_quiet_connections_loses_one_before_a_lone_client() {
        let (srv, addr, _stats) = start(
            TcpLimits {
                max_connections: 4,
                max_per_source: 3,
                pressed_idle: Duration::from_secs(20),
                ..limits()
            },
            None,
            None,
        );
        // The lone client came first (quiet longest), then three from one source.
        let mut lone = connect("127.0.0.2", addr).await;
        assert!(ask(&mut lone, 1).await.is_some());
        tokio::time::sleep(Duration::from_millis(50)).await;
        let mut pile = Vec::new();
        for i in 0..3 {
            let mut s = connect("127.0.0.3", addr).await;
            assert!(ask(&mut s, 2 + i).await.is_some());
            pile.push(s);
        }
        wait_quiet(&srv, 4).await;
        let mut new = connect("127.0.0.4", addr).await;
        assert!(ask(&mut new, 9).await.is_some());
        assert_eq!(srv.evicted(), 1);
        // One of the pile went, not the lone client.
        assert!(ask(&mut lone, 10).await.is_some(), "the lone client stays");
        let mut closed = 0;
        for s in pile.iter_mut() {
            if read_msg_within(s, Duration::from_millis(300))
                .await
                .is_none()
            {
                closed += 1;
            }
        }
        assert_eq!(closed, 1);
    }

    /// `None` when the server closed `s` within `wait`, else what it read (or a timeout
    /// marker).
    async fn read_msg_within(s: &mut TcpStream, wait: Duration) -> Option<()> {
        let mut b = [0u8; 1];
        match tokio::time::timeout(wait, s.read(&mut b)).await {
            Ok(Ok(0)) | Ok(Err(_)) => None,
            _ => Some(()),
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_blocked_source_is_closed_at_accept_before_anything_is_read() {
        let sh = shared(defences(None, false));
        block(&sh, "127.0.0.5/32", shield::block::Origin::Operator);
        let (_srv, addr, stats) = start(limits(), Some(sh.clone()), None);
        let mut s = connect("127.0.0.5", addr).await;
        assert!(ask(&mut s, 1).await.is_none(), "closed at accept");
        assert_eq!(drops(&stats, DropCause::Blocked), 1);
        assert_eq!(sh.blocked[1].load(Ordering::Relaxed), 1, "operator");
        assert_eq!(stats.queries.load(Ordering::Relaxed), 0, "nothing read");
        let ev = events(&sh, shield::events::Action::Blocked);
        assert_eq!(ev.len(), 1);
        assert_eq!((ev[0].tenant, ev[0].total), (0, 1));
        // Its neighbour is served.
        let mut s = connect("127.0.0.6", addr).await;
        assert!(ask(&mut s, 2).await.is_some());
        assert_eq!(drops(&stats, DropCause::Blocked), 1);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_connection_to_an_address_not_served_is_closed() {
        let (_srv, addr, stats) = start(limits(), None, Some("127.0.0.99".parse().unwrap()));
        let mut s = connect("127.0.0.2", addr).await;
        assert!(ask(&mut s, 1).await.is_none());
        assert_eq!(drops(&stats, DropCause::TcpWrongAddress), 1);
        assert_eq!(stats.queries.load(Ordering::Relaxed), 0);
    }
}
