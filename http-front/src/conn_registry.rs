//! Open client connections by source address, so that a source entering the block map has its connections closed; also the connection bounds (total, per source: an IPv4 address, an IPv6 /64).
//!
//! The registry is touched twice per connection (accept, close), never per request: it is
//! sharded by address hash, so two cores only meet when their sources share a shard. Each
//! connection owns a [`ConnCtl`]: a close cause and a wake-up the connection task waits on,
//! plus the per-connection request and reset counts the request path bumps.

use std::net::IpAddr;
use std::sync::atomic::{AtomicU8, AtomicU32, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use hashbrown::HashMap;
use ipnet::IpNet;
use shield::ratelimit::host_source;
use tokio::sync::Notify;

const SHARDS: usize = 64;
/// Sources whose slow-reader drops are remembered, per shard.
const STRIKES_PER_SHARD: usize = 1024;
/// One slow-reader drop of a source is forgotten every so long.
const STRIKE_MS: u64 = 30_000;
/// Connections let in past `max_connections` while the idle ones they evicted close.
pub const EVICT_SLACK: usize = 64;
/// Connections one eviction looks at (whole shards: it finishes the shard it is in).
const EVICT_SAMPLE: usize = 256;
/// The least a connection has been idle to be evicted (a request may be on its way: a new
/// connection's first, a keep-alive client's next).
const EVICT_MIN_IDLE_MS: u64 = 1_000;
/// The most a source's connection count weighs its connections' idle time for eviction.
const PILE_WEIGHT: usize = 16;
/// The fewest HTTP/2 streams a source's connections are ever given.
pub const MIN_STREAMS: u32 = 8;

/// Why the front closes a connection.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum CloseCause {
    /// Its source is in the block map.
    Blocked = 1,
    /// It reached `max_connection_age_secs`.
    MaxAge = 2,
    /// It carried `max_requests_per_connection` requests.
    MaxRequests = 3,
    /// HTTP/2 without requests for `idle_timeout_ms`.
    Idle = 4,
    /// Too many requests cancelled before their response (rapid reset).
    ResetFlood = 5,
    /// The server is shutting down.
    Shutdown = 6,
    /// A client that did not take a response within the send bounds (closed at once).
    SlowReader = 7,
    /// Idle while `max_connections` were open: closed to make room for a new one.
    Evicted = 8,
}

impl CloseCause {
    fn from_u8(v: u8) -> Option<CloseCause> {
        Some(match v {
            1 => CloseCause::Blocked,
            2 => CloseCause::MaxAge,
            3 => CloseCause::MaxRequests,
            4 => CloseCause::Idle,
            5 => CloseCause::ResetFlood,
            6 => CloseCause::Shutdown,
            7 => CloseCause::SlowReader,
            8 => CloseCause::Evicted,
            _ => return None,
        })
    }
}

/// How far a connection's TCP stream went ([`ConnCtl::tcp_progress`]).
#[derive(Debug, Clone, Copy)]
pub struct TcpProgress {
    /// Bytes the client's TCP stack acknowledged.
    pub acked: u64,
    /// The socket holds bytes not yet sent: the client's TCP window holds the connection.
    pub backed_up: bool,
}

/// One connection's control block.
#[derive(Debug)]
pub struct ConnCtl {
    /// The source address (IPv4-mapped addresses as IPv4).
    pub ip: IpAddr,
    cause: AtomicU8,
    notify: Notify,
    /// Requests (HTTP/2: streams) started on it.
    pub requests: AtomicU32,
    /// Requests in flight (until their response head is handed over).
    pub inflight: AtomicU32,
    /// Response bodies still relayed to the client after their heads (a long download keeps
    /// an HTTP/2 connection from counting as idle).
    pub bodies: AtomicU32,
    /// Requests cancelled by the client before their response head.
    pub premature: AtomicU32,
    /// Of those, requests a browser marked as sent on another site's behalf (`Sec-Fetch-Site:
    /// cross-site`): a page's aborted fetches; they close a flooded connection, never block.
    pub premature_cross_site: AtomicU32,
    /// RST_STREAM frames the client sent (HTTP/2): what a reset flood is made of (a client
    /// that just closes its connection drops its requests unanswered too, resetting nothing).
    pub resets: AtomicU32,
    /// Monotonic milliseconds of the last request start (HTTP/2) or end, or of the
    /// connection's start (for the HTTP/2 idle timeout and the choice of whom to evict).
    pub last_active_ms: std::sync::atomic::AtomicU64,
    /// WebSocket tunnels running from this connection (they keep its registry place).
    tunnels: AtomicU32,
    tunnel_ended: Notify,
    /// The connection's TCP socket while it is served (-1: none): what the response relay
    /// asks how much the client acknowledged.
    pub tcp_fd: std::sync::atomic::AtomicI32,
    /// It speaks HTTP/2 (its streams share the TCP stream's progress).
    pub h2: std::sync::atomic::AtomicBool,
    /// The first odd HTTP/1.1 head ([`crate::h1watch`]): its ordinal shifted left by three,
    /// and its kind (0: none).
    odd_head: AtomicU32,
    /// Requests of its source (all of the source's open connections share this) waiting
    /// on an origin (`[server] max_upstream_per_source`).
    pub upstream: Arc<AtomicU32>,
    /// Response bytes reserved for its source (all of the source's open connections share
    /// this) out of `[server] response_buffer_total_bytes`.
    pub buffered: Arc<AtomicUsize>,
    /// Bytes of unfinished heads its source holds (all of the source's open connections share
    /// this) out of `[server] header_buffer_total_bytes`.
    pub heads: Arc<AtomicUsize>,
    /// Request-body bytes reserved for its source (all of the source's open connections share
    /// this) out of `[server] body_buffer_total_bytes`.
    pub uploads: Arc<AtomicUsize>,
    /// The connection has ended (its requests still waiting on an origin are abandoned).
    ended: std::sync::atomic::AtomicBool,
    end_notify: Notify,
}

/// A request head hyper reads only in part, refused as nginx refuses it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OddHead {
    /// Content-Length together with Transfer-Encoding.
    LengthAndCoding = 1,
    /// Content-Length sent twice.
    LengthTwice = 2,
    /// Framing nginx refuses or reads otherwise than hyper: a Content-Length or
    /// Transfer-Encoding line with a tab, an empty list item or too long a value, or a chunked
    /// body's trailer section ended by a bare LF (hyper reads on to the next CRLF CRLF, so
    /// what nginx takes for the next request hyper swallows as trailers).
    Framing = 3,
    /// A fragment (`#`) in the request target, which no client sends (nginx refuses it in
    /// an absolute-form target; hyper drops it silently).
    Fragment = 4,
}

/// What a source's connections share: requests at origins, response bytes reserved, bytes
/// of unfinished heads, request-body bytes reserved.
type SourceShared = (
    Arc<AtomicU32>,
    Arc<AtomicUsize>,
    Arc<AtomicUsize>,
    Arc<AtomicUsize>,
);

impl ConnCtl {
    fn new(ip: IpAddr, shared: SourceShared, now_ms: u64) -> Self {
        let (upstream, buffered, heads, uploads) = shared;
        ConnCtl {
            upstream,
            buffered,
            heads,
            uploads,
            ended: std::sync::atomic::AtomicBool::new(false),
            end_notify: Notify::new(),
            ip,
            cause: AtomicU8::new(0),
            notify: Notify::new(),
            requests: AtomicU32::new(0),
            inflight: AtomicU32::new(0),
            bodies: AtomicU32::new(0),
            premature: AtomicU32::new(0),
            premature_cross_site: AtomicU32::new(0),
            resets: AtomicU32::new(0),
            last_active_ms: std::sync::atomic::AtomicU64::new(now_ms),
            tcp_fd: std::sync::atomic::AtomicI32::new(-1),
            h2: std::sync::atomic::AtomicBool::new(false),
            odd_head: AtomicU32::new(0),
            tunnels: AtomicU32::new(0),
            tunnel_ended: Notify::new(),
        }
    }

    /// Asks the connection to close for `cause`; the first cause wins. True when this call set it.
    pub fn close(&self, cause: CloseCause) -> bool {
        let set = self
            .cause
            .compare_exchange(0, cause as u8, Ordering::AcqRel, Ordering::Acquire)
            .is_ok();
        if set {
            self.notify.notify_one();
        }
        set
    }

    /// What the client's TCP stack has acknowledged (`TCP_INFO`), and whether the socket
    /// holds bytes not yet sent (the client's TCP is what holds them back); `None` once the
    /// connection ended.
    pub fn tcp_progress(&self) -> Option<TcpProgress> {
        let fd = self.tcp_fd.load(Ordering::Acquire);
        if fd < 0 {
            return None;
        }
        // SAFETY: tcp_info is plain data; getsockopt writes at most `len` bytes into it. The
        // descriptor is the connection's while `tcp_fd` holds it (cleared before it closes).
        unsafe {
            let mut info: libc::tcp_info = std::mem::zeroed();
            let mut len = std::mem::size_of::<libc::tcp_info>() as libc::socklen_t;
            let rc = libc::getsockopt(
                fd,
                libc::IPPROTO_TCP,
                libc::TCP_INFO,
                (&mut info as *mut libc::tcp_info).cast(),
                &mut len,
            );
            let need = std::mem::offset_of!(libc::tcp_info, tcpi_notsent_bytes) + 4;
            (rc == 0 && len as usize >= need).then_some(TcpProgress {
                acked: info.tcpi_bytes_acked,
                backed_up: info.tcpi_notsent_bytes > 0,
            })
        }
    }

    /// Marks the connection's `ordinal`th request head (1: the first) as odd; the first mark stays.
    pub fn mark_odd_head(&self, ordinal: u32, odd: OddHead) {
        let v = ordinal.min(u32::MAX >> 3) << 3 | odd as u32;
        let _ = self
            .odd_head
            .compare_exchange(0, v, Ordering::AcqRel, Ordering::Acquire);
    }

    /// The oddity of the connection's `ordinal`th request, or of one before it (the connection
    /// closes after an odd one).
    pub fn odd_head(&self, ordinal: u32) -> Option<OddHead> {
        let v = self.odd_head.load(Ordering::Acquire);
        if v == 0 || ordinal < v >> 3 {
            return None;
        }
        Some(match v & 7 {
            1 => OddHead::LengthAndCoding,
            2 => OddHead::LengthTwice,
            3 => OddHead::Framing,
            _ => OddHead::Fragment,
        })
    }

    /// Counts a tunnel (a WebSocket) running from this connection until the guard drops.
    pub fn tunnel_started(self: &Arc<Self>) -> TunnelGuard {
        self.tunnel_started_first().0
    }

    /// As [`tunnel_started`](Self::tunnel_started); also true when no other tunnel runs from
    /// this connection (the first of an HTTP/2 connection's tunnels uses its place).
    pub fn tunnel_started_first(self: &Arc<Self>) -> (TunnelGuard, bool) {
        let before = self.tunnels.fetch_add(1, Ordering::AcqRel);
        (TunnelGuard(Arc::clone(self)), before == 0)
    }

    /// Tunnels running from this connection.
    pub fn tunnels(&self) -> u32 {
        self.tunnels.load(Ordering::Acquire)
    }

    /// Waits until no tunnel runs from this connection.
    pub async fn tunnels_ended(&self) {
        loop {
            let wait = self.tunnel_ended.notified();
            if self.tunnels() == 0 {
                return;
            }
            wait.await;
        }
    }

    /// Milliseconds it has been idle at `now_ms` (no request, response body or tunnel under
    /// way, not closing: waiting for a TLS handshake, a preface or a request head counts);
    /// `None` when it is not idle.
    fn idle_ms(&self, now_ms: u64) -> Option<u64> {
        let idle = self.cause.load(Ordering::Acquire) == 0
            && self.inflight.load(Ordering::Acquire) == 0
            && self.bodies.load(Ordering::Acquire) == 0
            && self.tunnels.load(Ordering::Acquire) == 0;
        idle.then(|| now_ms.saturating_sub(self.last_active_ms.load(Ordering::Relaxed)))
    }

    /// Why the connection is closing, if it is.
    #[inline]
    pub fn cause(&self) -> Option<CloseCause> {
        CloseCause::from_u8(self.cause.load(Ordering::Acquire))
    }

    /// Marks the connection ended: every request of it waiting on [`ended`](Self::ended)
    /// gives up.
    pub fn end(&self) {
        self.ended.store(true, Ordering::Release);
        self.end_notify.notify_waiters();
    }

    /// Waits until the connection has ended.
    pub async fn ended(&self) {
        let n = self.end_notify.notified();
        tokio::pin!(n);
        n.as_mut().enable();
        if self.ended.load(Ordering::Acquire) {
            return;
        }
        n.await;
    }

    /// Waits until [`close`](Self::close) has been called.
    pub async fn closed(&self) {
        loop {
            if self.cause().is_some() {
                return;
            }
            self.notify.notified().await;
        }
    }
}

/// One request of a source at an origin (see `[server] max_upstream_per_source`), and of
/// its site (`[[site]] max_requests_in_flight`): held until the origin's response body is
/// read (or the tunnel closes), released when dropped.
#[derive(Debug)]
pub struct SourceWaiting([Option<Arc<AtomicU32>>; 3]);

impl SourceWaiting {
    /// A place among the source's `max` requests at origins, when one is free.
    pub fn take(n: &Arc<AtomicU32>, max: u32) -> Option<Self> {
        if n.fetch_add(1, Ordering::Relaxed) >= max {
            n.fetch_sub(1, Ordering::Relaxed);
            return None;
        }
        Some(SourceWaiting([Some(Arc::clone(n)), None, None]))
    }

    /// This place and `other`'s held, and given back, together (three at most in all).
    pub fn with(mut self, mut other: SourceWaiting) -> Self {
        for theirs in other.0.iter_mut() {
            if let Some(slot) = self.0.iter_mut().find(|s| s.is_none()) {
                *slot = theirs.take();
            }
        }
        self
    }
}

impl Drop for SourceWaiting {
    fn drop(&mut self) {
        for n in self.0.iter().flatten() {
            n.fetch_sub(1, Ordering::Relaxed);
        }
    }
}

/// A running tunnel of a connection; see [`ConnCtl::tunnel_started`].
#[derive(Debug)]
pub struct TunnelGuard(Arc<ConnCtl>);

impl Drop for TunnelGuard {
    fn drop(&mut self) {
        self.0.tunnels.fetch_sub(1, Ordering::AcqRel);
        self.0.tunnel_ended.notify_waiters();
    }
}

/// Why a connection was refused at accept.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Refused {
    /// `max_connections` are open.
    Total,
    /// `max_connections_per_source` are open from this source.
    PerSource,
}

type Shard = HashMap<IpAddr, Vec<Arc<ConnCtl>>, foldhash::fast::RandomState>;

/// Slow-reader drops of a source: how many, and when the last came (ms, monotonic).
type Strikes = HashMap<IpAddr, (u32, u64), foldhash::fast::RandomState>;

/// Drops still counted of `(n, at)` at `now_ms` (one forgotten per [`STRIKE_MS`]).
fn live_strikes((n, at): (u32, u64), now_ms: u64) -> u32 {
    n.saturating_sub((now_ms.saturating_sub(at) / STRIKE_MS).min(u64::from(u32::MAX)) as u32)
}

/// Open connections by source; see the module documentation. It also remembers, past their
/// connections, the sources dropped as slow readers: each drop halves the HTTP/2 streams the
/// source's next connections may open, down to [`MIN_STREAMS`] — a client that opens many
/// streams of large responses and never reads them, then reconnects, would otherwise have an
/// origin read them all again for nobody at each round.
#[derive(Debug)]
pub struct Registry {
    shards: Box<[Mutex<Shard>]>,
    strikes: Box<[Mutex<Strikes>]>,
    /// Sources in `strikes` (none: an HTTP/2 accept takes no lock for them).
    striking: AtomicUsize,
    open: AtomicUsize,
    /// The shard the next eviction looks at first.
    evict_cursor: AtomicUsize,
    hasher: foldhash::fast::RandomState,
}

fn lock(m: &Mutex<Shard>) -> MutexGuard<'_, Shard> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl Default for Registry {
    fn default() -> Self {
        Registry {
            shards: (0..SHARDS).map(|_| Mutex::new(Shard::default())).collect(),
            strikes: (0..SHARDS)
                .map(|_| Mutex::new(Strikes::default()))
                .collect(),
            striking: AtomicUsize::new(0),
            open: AtomicUsize::new(0),
            evict_cursor: AtomicUsize::new(0),
            hasher: foldhash::fast::RandomState::default(),
        }
    }
}

/// A connection let in by [`Registry::register`].
#[derive(Debug)]
pub struct Registered {
    /// Its place in the registry.
    pub guard: ConnGuard,
    /// An idle connection was told to close to make room for it.
    pub evicted: bool,
}

/// A registered connection; dropping it unregisters.
#[derive(Debug)]
pub struct ConnGuard {
    registry: Arc<Registry>,
    /// Its control block.
    pub ctl: Arc<ConnCtl>,
}

impl Drop for ConnGuard {
    fn drop(&mut self) {
        self.registry.unregister(&self.ctl);
    }
}

impl Registry {
    fn shard(&self, ip: &IpAddr) -> &Mutex<Shard> {
        use std::hash::BuildHasher;
        &self.shards[(self.hasher.hash_one(ip) as usize) % SHARDS]
    }

    fn strikes_of(&self, ip: &IpAddr) -> MutexGuard<'_, Strikes> {
        use std::hash::BuildHasher;
        let m = &self.strikes[(self.hasher.hash_one(ip) as usize) % SHARDS];
        m.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Notes a slow-reader drop of `ip` (an IPv6 source: its /64); false when the table is
    /// full (not noted).
    pub fn strike(&self, ip: IpAddr, now_ms: u64) -> bool {
        let ip = host_source(ip);
        let mut s = self.strikes_of(&ip);
        if s.len() >= STRIKES_PER_SHARD && !s.contains_key(&ip) {
            let before = s.len();
            s.retain(|_, v| live_strikes(*v, now_ms) > 0);
            self.striking.fetch_sub(before - s.len(), Ordering::Relaxed);
            if s.len() >= STRIKES_PER_SHARD {
                return false;
            }
        }
        let e = s.entry(ip).or_insert_with(|| {
            self.striking.fetch_add(1, Ordering::Relaxed);
            (0, now_ms)
        });
        *e = (live_strikes(*e, now_ms).saturating_add(1), now_ms);
        true
    }

    /// The HTTP/2 streams a new connection from `ip` may open, of `max`.
    pub fn streams_for(&self, ip: IpAddr, max: u32, now_ms: u64) -> u32 {
        if self.striking.load(Ordering::Relaxed) == 0 {
            return max;
        }
        let ip = host_source(ip);
        let s = self.strikes_of(&ip);
        let n = s.get(&ip).map_or(0, |v| live_strikes(*v, now_ms));
        if n == 0 {
            return max;
        }
        (max >> n.min(31)).max(MIN_STREAMS).min(max)
    }

    /// Registers a connection from `ip` unless a bound refuses it. When `max_total` are open,
    /// an idle connection is told to close to make room ([`Registered::evicted`]; see
    /// [`evict`](Self::evict)), and the new one is let in at once: the table runs over its
    /// bound by at most [`EVICT_SLACK`] while the victims close. Refused when none is idle.
    pub fn register(
        self: &Arc<Self>,
        ip: IpAddr,
        max_total: usize,
        max_per_source: usize,
    ) -> Result<Registered, Refused> {
        let now_ms = shield::clock::mono_us() / 1000;
        self.register_at(ip, max_total, max_per_source, now_ms)
    }

    /// [`register`](Self::register) at `now_ms` (monotonic).
    fn register_at(
        self: &Arc<Self>,
        ip: IpAddr,
        max_total: usize,
        max_per_source: usize,
        now_ms: u64,
    ) -> Result<Registered, Refused> {
        let key = host_source(ip);
        let open = self.open.fetch_add(1, Ordering::AcqRel);
        let mut evicted = false;
        if open >= max_total {
            // Not for a source at its own bound (it would evict another's for nothing).
            let source_full = lock(self.shard(&key))
                .get(&key)
                .is_some_and(|l| l.len() >= max_per_source);
            if open >= max_total.saturating_add(EVICT_SLACK) || source_full || !self.evict(now_ms) {
                self.open.fetch_sub(1, Ordering::AcqRel);
                return Err(if source_full {
                    Refused::PerSource
                } else {
                    Refused::Total
                });
            }
            evicted = true;
        }
        let ctl = {
            let mut s = lock(self.shard(&key));
            let list = s.entry(key).or_default();
            if list.len() >= max_per_source {
                drop(s);
                self.open.fetch_sub(1, Ordering::AcqRel);
                return Err(Refused::PerSource);
            }
            // The source's connections share one count of their requests at origins (a
            // connection's requests give up when it ends, so a new first one starts afresh).
            let upstream = list
                .first()
                .map_or_else(Arc::default, |c| Arc::clone(&c.upstream));
            let buffered = list
                .first()
                .map_or_else(Arc::default, |c| Arc::clone(&c.buffered));
            let heads = list
                .first()
                .map_or_else(Arc::default, |c| Arc::clone(&c.heads));
            let uploads = list
                .first()
                .map_or_else(Arc::default, |c| Arc::clone(&c.uploads));
            let ctl = Arc::new(ConnCtl::new(
                ip,
                (upstream, buffered, heads, uploads),
                now_ms,
            ));
            list.push(Arc::clone(&ctl));
            ctl
        };
        Ok(Registered {
            guard: ConnGuard {
                registry: Arc::clone(self),
                ctl,
            },
            evicted,
        })
    }

    /// Tells the idle connection that has waited longest (a second at least) to close, a
    /// source's idle time weighed by how many connections it holds (up to `PILE_WEIGHT`
    /// times: one source's pile goes before another client's only one). It looks at up to
    /// `EVICT_SAMPLE` connections, from a shard that moves on at each call, one shard
    /// locked at a time. False when none of them is idle.
    pub fn evict(&self, now_ms: u64) -> bool {
        let start = self.evict_cursor.fetch_add(1, Ordering::Relaxed);
        let mut seen = 0;
        let mut best: Option<(u64, Arc<ConnCtl>)> = None;
        for i in 0..SHARDS {
            let shard = lock(&self.shards[(start + i) % SHARDS]);
            for list in shard.values() {
                let weight = list.len().min(PILE_WEIGHT) as u64;
                for c in list {
                    seen += 1;
                    let Some(idle) = c.idle_ms(now_ms).filter(|i| *i >= EVICT_MIN_IDLE_MS) else {
                        continue;
                    };
                    let score = idle.saturating_mul(weight);
                    if best.as_ref().is_none_or(|(b, _)| score > *b) {
                        best = Some((score, Arc::clone(c)));
                    }
                }
            }
            drop(shard);
            if seen >= EVICT_SAMPLE {
                break;
            }
        }
        match best {
            // Lost to another cause meanwhile: it closes all the same.
            Some((_, victim)) => {
                victim.close(CloseCause::Evicted);
                true
            }
            None => false,
        }
    }

    fn unregister(&self, ctl: &Arc<ConnCtl>) {
        {
            let key = host_source(ctl.ip);
            let mut s = lock(self.shard(&key));
            if let Some(list) = s.get_mut(&key) {
                list.retain(|c| !Arc::ptr_eq(c, ctl));
                if list.is_empty() {
                    s.remove(&key);
                }
            }
        }
        self.open.fetch_sub(1, Ordering::AcqRel);
    }

    /// Open connections.
    pub fn open(&self) -> usize {
        self.open.load(Ordering::Acquire)
    }

    /// Asks every connection from inside `net` to close; returns how many were asked.
    ///
    /// A host entry (an IPv6 prefix of /64 or longer) costs one shard lookup; a shorter
    /// prefix walks every shard (escalations are mostly hosts, and the walk holds one shard
    /// at a time).
    pub fn close_net(&self, net: IpNet, cause: CloseCause) -> usize {
        let mut n = 0;
        let of_net = |list: &Vec<Arc<ConnCtl>>| {
            list.iter()
                .filter(|c| net.contains(&c.ip))
                .map(|c| usize::from(c.close(cause)))
                .sum::<usize>()
        };
        let host = match net {
            IpNet::V4(v4) => v4.prefix_len() == 32,
            IpNet::V6(v6) => v6.prefix_len() >= 64,
        };
        if host {
            let key = host_source(net.addr());
            if let Some(list) = lock(self.shard(&key)).get(&key) {
                n += of_net(list);
            }
            return n;
        }
        for shard in self.shards.iter() {
            for list in lock(shard).values() {
                n += of_net(list);
            }
        }
        n
    }

    /// Asks every connection to close.
    pub fn close_all(&self, cause: CloseCause) -> usize {
        let mut n = 0;
        for shard in self.shards.iter() {
            for list in lock(shard).values() {
                for c in list {
                    n += usize::from(c.close(cause));
                }
            }
        }
        n
    }
}

#[cfg(test)]
mod tests {

    #[test]
    fn slow_reader_drops_halve_a_sources_streams_for_a_while_within_a_bounded_table() {
        let r = Registry::default();
        let ip: IpAddr = "192.0.2.7".parse().unwrap();
        let other: IpAddr = "192.0.2.8".parse().unwrap();
        assert_eq!(r.streams_for(ip, 128, 0), 128);
        assert!(r.strike(ip, 0));
        assert_eq!(r.streams_for(ip, 128, 0), 64);
        for _ in 0..10 {
            r.strike(ip, 1_000);
        }
        assert_eq!(r.streams_for(ip, 128, 1_000), MIN_STREAMS);
        assert_eq!(r.streams_for(other, 128, 1_000), 128, "another source");
        // An IPv6 source is its /64.
        let six: IpAddr = "2001:db8:0:1::1".parse().unwrap();
        r.strike(six, 1_000);
        assert_eq!(
            r.streams_for("2001:db8:0:1::ffff".parse().unwrap(), 128, 1_000),
            64
        );
        assert_eq!(
            r.streams_for("2001:db8:0:2::1".parse().unwrap(), 128, 1_000),
            128
        );
        // A limit below the minimum stays as configured.
        assert_eq!(r.streams_for(ip, 4, 1_000), 4);
        // One drop is forgotten every STRIKE_MS: 11 drops, all gone after 11 periods.
        assert_eq!(r.streams_for(ip, 128, 1_000 + 9 * STRIKE_MS), 32);
        assert_eq!(r.streams_for(ip, 128, 1_000 + 11 * STRIKE_MS), 128);
        // The table is bounded: past it, drops of new sources are not noted (the caller
        // counts them), until old entries have been forgotten.
        let full = Registry::default();
        let mut refused = 0;
        for i in 0..(SHARDS * STRIKES_PER_SHARD * 2) as u32 {
            if !full.strike(IpAddr::from(std::net::Ipv4Addr::from(0x0a00_0000 + i)), 0) {
                refused += 1;
            }
        }
        assert!(refused >= SHARDS * STRIKES_PER_SHARD / 2, "{refused}");
        assert!(full.strike("203.0.113.1".parse().unwrap(), STRIKE_MS));
    }
    use super::*;

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[test]
    fn bounds_and_close_by_prefix() {
        let r = Arc::new(Registry::default());
        let a1 = r.register(ip("192.0.2.1"), 3, 2).unwrap().guard;
        let a2 = r.register(ip("192.0.2.1"), 3, 2).unwrap().guard;
        assert_eq!(
            r.register(ip("192.0.2.1"), 3, 2).unwrap_err(),
            Refused::PerSource
        );
        let b = r.register(ip("192.0.2.9"), 3, 2).unwrap().guard;
        // None idle (an idle one would be evicted to make room).
        for g in [&a1, &a2, &b] {
            g.ctl.inflight.store(1, Ordering::Relaxed);
        }
        assert_eq!(
            r.register(ip("198.51.100.1"), 3, 2).unwrap_err(),
            Refused::Total
        );
        assert_eq!(r.open(), 3);
        assert_eq!(
            r.close_net("192.0.2.1/32".parse().unwrap(), CloseCause::Blocked),
            2
        );
        assert_eq!(a1.ctl.cause(), Some(CloseCause::Blocked));
        assert_eq!(b.ctl.cause(), None);
        assert_eq!(
            r.close_net("192.0.2.0/24".parse().unwrap(), CloseCause::Blocked),
            1
        );
        assert!(!b.ctl.close(CloseCause::Idle), "first cause wins");
        assert_eq!(b.ctl.cause(), Some(CloseCause::Blocked));
        drop((a1, a2, b));
        assert_eq!(r.open(), 0);
        assert!(r.register(ip("192.0.2.1"), 3, 2).is_ok());
    }

    /// The tests' clock (monotonic ms).
    const NOW: u64 = 1_000_000;

    /// A connection idle for `idle_ms` at [`NOW`] (busy: a request in flight).
    fn served(g: &ConnGuard, idle_ms: u64, busy: bool) {
        g.ctl.last_active_ms.store(NOW - idle_ms, Ordering::Relaxed);
        g.ctl.inflight.store(u32::from(busy), Ordering::Release);
    }

    #[test]
    fn a_full_table_evicts_an_idle_connection_the_pile_of_one_source_first_and_never_a_busy_one() {
        let r = Arc::new(Registry::default());
        let reg = |a: &str| {
            r.register_at(ip(a), 4, 3, NOW)
                .map(|x| (x.guard, x.evicted))
        };
        let (a1, _) = reg("192.0.2.1").unwrap();
        let (a2, _) = reg("192.0.2.1").unwrap();
        let (lone, _) = reg("198.51.100.7").unwrap();
        let (busy, _) = reg("203.0.113.9").unwrap();
        // One source's two connections idle 1 s weigh more than another's one idle 1.5 s;
        // a request in flight keeps a connection whatever its age.
        served(&a1, 1_000, false);
        served(&a2, 1_000, false);
        served(&lone, 1_500, false);
        served(&busy, 60_000, true);
        let (new, evicted) = reg("198.51.100.8").unwrap();
        assert!(evicted);
        assert_eq!(
            r.open(),
            5,
            "let in at once, over the bound while its victim closes"
        );
        let causes = [a1.ctl.cause(), a2.ctl.cause()];
        assert_eq!(
            causes
                .iter()
                .filter(|c| **c == Some(CloseCause::Evicted))
                .count(),
            1,
            "{causes:?}"
        );
        assert_eq!((lone.ctl.cause(), busy.ctl.cause()), (None, None));
        // The pile's other connection next (a closing one is no victim), then the longest
        // idle of the rest.
        let (new2, evicted) = reg("198.51.100.9").unwrap();
        assert!(evicted);
        assert_eq!(
            a1.ctl.cause().zip(a2.ctl.cause()),
            Some((CloseCause::Evicted, CloseCause::Evicted))
        );
        drop((a1, a2));
        let (new3, evicted) = reg("198.51.100.10").unwrap();
        assert!(evicted);
        assert_eq!(lone.ctl.cause(), Some(CloseCause::Evicted));
        drop(lone);
        // With none idle a new connection is refused: idle for less than a second counts as
        // busy (its request may be on its way).
        served(&new, 999, false);
        for g in [&new2, &new3] {
            served(g, 0, true);
        }
        assert_eq!(r.open(), 4);
        assert_eq!(reg("198.51.100.12").unwrap_err(), Refused::Total);
        assert_eq!(busy.ctl.cause(), None);
        // A source at its own bound evicts nobody's connection.
        let r = Arc::new(Registry::default());
        let mine: Vec<_> = (0..2)
            .map(|_| r.register_at(ip("192.0.2.50"), 2, 2, NOW).unwrap().guard)
            .collect();
        mine.iter().for_each(|g| served(g, 5_000, false));
        assert_eq!(
            r.register_at(ip("192.0.2.50"), 2, 2, NOW).unwrap_err(),
            Refused::PerSource
        );
        assert!(mine.iter().all(|g| g.ctl.cause().is_none()));
        // The table runs over its bound by EVICT_SLACK at most, while victims close.
        let r = Arc::new(Registry::default());
        let mut held = Vec::new();
        for i in 0..200u32 {
            let a = IpAddr::from(std::net::Ipv4Addr::from(0x0a00_0000 + i));
            match r.register_at(a, 10, 1, NOW) {
                Ok(x) => {
                    served(&x.guard, 1_000, false);
                    held.push(x.guard);
                }
                Err(e) => assert_eq!(e, Refused::Total),
            }
        }
        assert_eq!(r.open(), 10 + EVICT_SLACK);
    }

    #[test]
    fn an_ipv6_source_is_bounded_by_its_slash_64_and_closed_by_address_or_prefix() {
        let r = Arc::new(Registry::default());
        let a = r.register(ip("2001:db8:0:1::1"), 10, 2).unwrap().guard;
        let b = r.register(ip("2001:db8:0:1::2"), 10, 2).unwrap().guard;
        assert_eq!(
            r.register(ip("2001:db8:0:1:ffff::3"), 10, 2).unwrap_err(),
            Refused::PerSource,
            "another address of the same /64"
        );
        let c = r.register(ip("2001:db8:0:2::1"), 10, 2).unwrap().guard;
        // A host entry closes that address only; a /64 or shorter, all of its sources.
        assert_eq!(
            r.close_net("2001:db8:0:1::2/128".parse().unwrap(), CloseCause::Blocked),
            1
        );
        assert_eq!(
            (a.ctl.cause(), b.ctl.cause()),
            (None, Some(CloseCause::Blocked))
        );
        assert_eq!(
            r.close_net("2001:db8::/48".parse().unwrap(), CloseCause::Blocked),
            2
        );
        assert_eq!(c.ctl.cause(), Some(CloseCause::Blocked));
        drop(b);
        assert!(
            r.register(ip("2001:db8:0:1::9"), 10, 2).is_ok(),
            "a place freed"
        );
    }
}
