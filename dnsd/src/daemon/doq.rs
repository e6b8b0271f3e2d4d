//! DNS over QUIC (RFC 9250): each query on a bidirectional stream of its own, framed by a
//! two-octet length and ended by the client's FIN, its message ID 0. The TCP server's
//! pipeline and bounds serve it: a blocked source is ignored before any QUIC work (no packet
//! sent), a source counts against `tcp_max_per_source` once its address is proven (by a
//! Retry, from the handshake on; else by the handshake), streams at once are
//! `tcp_max_pipelined`, queries per connection `tcp_max_queries`, the idle time `tcp_idle_timeout_ms` (QUIC's own idle timeout, and
//! `tcp_pressed_idle_timeout_ms` while the table is pressed). Connections share the TCP
//! table: a handshake, or a connection waiting for its next stream (whatever its open
//! streams wait for), waits on its client and gives way to a new connection of either kind
//! when the table is full, as a TCP connection does — ordered by its last answer.
//! Handshakes beyond a bound ask the client to prove its address first (a Retry), so forged
//! sources cannot make us hold handshake state. Zone transfers are not served over QUIC.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::Duration;

use super::tcp::{Slot, TcpServer, Waited};
use super::tls::DotTls;
use crate::observe::counters::DropCause;
use crate::query::process_query::{Outcome, Transport};

/// RFC 9250 §4.3 error codes.
const DOQ_NO_ERROR: u32 = 0;
const DOQ_PROTOCOL_ERROR: u32 = 2;

/// Handshakes under way past which clients must prove their address first (Retry), and at
/// most an eighth of the connection table: forged Initials never fill a small table.
const HANDSHAKES_BEFORE_RETRY: usize = 256;

/// Longest query accepted over QUIC (with its length prefix).
const MAX_QUERY: usize = 2 + 16 * 1024;

thread_local! {
    /// Scratch space for one response: processing never awaits, so one per thread is enough.
    static OUT: std::cell::RefCell<Vec<u8>> = std::cell::RefCell::new(vec![0u8; 65535 + 2]);
}

/// Bytes a connection may have sent and not yet acknowledged.
const SEND_WINDOW: u64 = 128 * 1024;

/// Answers one connection may have built and not yet handed to QUIC (the queries read past
/// them wait unanswered, as over TCP).
const ANSWERS_IN_HAND: usize = 4;

/// A stream's query, at most [`MAX_QUERY`] bytes, in a buffer of our own: each piece is
/// copied out of the packet it came in and the packet freed (`read_to_end` kept every piece,
/// and a byte a packet kept a whole datagram each: eight streams of 12.6 KB, one byte per
/// padded packet, held 126 MB). `Err` past the bound or when the stream fails.
async fn read_query(
    recv: &mut quinn::RecvStream,
    budget: &Arc<tokio::sync::Semaphore>,
) -> Result<(Vec<u8>, Option<tokio::sync::OwnedSemaphorePermit>), Unread> {
    let mut q = Vec::new();
    let mut held: Option<tokio::sync::OwnedSemaphorePermit> = None;
    loop {
        // Room in the connection's budget before the bytes are taken from quinn (which
        // gives the client its flow-control credit back as they are read): the budget, not
        // the window, bounds what a connection's unfinished queries hold.
        let want = (MAX_QUERY + 1 - q.len()).min(READ_STEP);
        let mut p = budget
            .clone()
            .acquire_many_owned(want as u32)
            .await
            .map_err(|_| Unread::Gone)?;
        let chunk = recv.read_chunk(want, true).await.map_err(|e| match e {
            quinn::ReadError::ConnectionLost(quinn::ConnectionError::TimedOut) => Unread::TimedOut,
            _ => Unread::Gone,
        })?;
        let Some(c) = chunk else { break };
        let n = c.bytes.len();
        // What was not used goes back at once.
        drop(p.split(want - n));
        q.extend_from_slice(&c.bytes);
        match held.as_mut() {
            Some(h) => h.merge(p),
            None => held = Some(p),
        }
        if q.len() > MAX_QUERY {
            return Err(Unread::TooLong);
        }
    }
    Ok((q, held))
}

/// Bytes of a query read at a time (each taken from the connection's budget first).
const READ_STEP: usize = 2048;

/// Why a stream's query was not read.
enum Unread {
    /// Longer than any query: malformed.
    TooLong,
    /// The client reset the stream or its connection ended: nothing was asked (it was
    /// counted as malformed: 2,971 such in a run with no malformed byte sent).
    Gone,
    /// The connection went idle past QUIC's idle timeout while the query was unfinished.
    TimedOut,
}

/// True when `msg` parses as a query carrying edns-tcp-keepalive.
fn asks_keepalive(msg: &[u8]) -> bool {
    let mut q = crate::query::wire::Query::default();
    crate::query::wire::parse_query(msg, &mut q).is_ok() && q.edns.is_some_and(|e| e.keepalive)
}

/// Queries' worth of unread data a connection may hold in all (its flow-control window).
const CONN_WINDOW_QUERIES: usize = 4;
/// Bytes of queries a connection may hold read but unanswered, all its streams together:
/// 64 KiB, what a TCP or DoT connection may hold of a message (a query's worth on every
/// stream held about 480 KB a connection unfinished: 2 GiB at the default table).
const QUERY_BUDGET: usize = 4 * 16 * 1024;

/// The transport settings of the DNS over QUIC endpoints from the TCP limits.
pub fn transport(idle: Duration, streams: usize) -> Arc<quinn::TransportConfig> {
    let mut t = quinn::TransportConfig::default();
    t.max_idle_timeout(quinn::IdleTimeout::try_from(idle).ok());
    t.max_concurrent_bidi_streams(quinn::VarInt::from_u32(streams.clamp(1, 1024) as u32));
    t.max_concurrent_uni_streams(quinn::VarInt::from_u32(0));
    // What a client may send us unread: one query per stream (quinn's default allowed
    // 1.25 MB a stream), and four in all on the connection. What dnsd has read of
    // unfinished queries is bounded apart (`QUERY_BUDGET`): quinn gives the credit back
    // as data is read.
    t.stream_receive_window(quinn::VarInt::from_u32(MAX_QUERY as u32));
    t.receive_window(quinn::VarInt::from_u32(
        (MAX_QUERY * streams.clamp(1, CONN_WINDOW_QUERIES)) as u32,
    ));
    // What a connection may hold unacknowledged: a client that does not read (however much
    // flow-control credit it grants) makes our writes wait, not our memory grow.
    t.send_window(SEND_WINDOW);
    Arc::new(t)
}

/// A DNS over QUIC endpoint on the bound socket `sock`, following `tls`'s pair.
pub fn endpoint(
    sock: std::net::UdpSocket,
    tls: &DotTls,
    transport: Arc<quinn::TransportConfig>,
) -> Result<quinn::Endpoint, String> {
    let sc = tls.quic_config(transport.clone())?;
    tls.watch_quic_socket(&sock);
    let e = quinn::Endpoint::new(
        quinn::EndpointConfig::default(),
        Some(sc),
        sock,
        Arc::new(quinn::TokioRuntime),
    )
    .map_err(|e| e.to_string())?;
    tls.follow(e.clone(), transport);
    Ok(e)
}

/// Accepts DNS over QUIC connections on `e` until the task is dropped.
pub async fn serve(tcp: Arc<TcpServer>, e: quinn::Endpoint, tls: Arc<DotTls>) {
    let local = e.local_addr().map(|a| a.ip()).ok();
    let mut plan = tcp.accept_plan();
    let pending = Arc::new(AtomicUsize::new(0));
    while let Some(incoming) = e.accept().await {
        let peer = incoming.remote_address();
        if tcp.blocked_at_accept(&mut plan, peer.ip()) {
            incoming.ignore();
            continue;
        }
        let before_retry = HANDSHAKES_BEFORE_RETRY.min(tcp.max_connections() / 8);
        if pending.load(Ordering::Relaxed) >= before_retry
            && !incoming.remote_address_validated()
            && incoming.may_retry()
        {
            tls.quic_retries.fetch_add(1, Ordering::Relaxed);
            let _ = incoming.retry();
            continue;
        }
        // An address a Retry proved counts against its source's bound from the handshake on
        // (one source answering Retries held 455 handshakes past a bound of 16); an unproven
        // one only once its handshake proves it (a forged source must not spend another's
        // share), and unproven handshakes past `before_retry` are sent a Retry above.
        let proven = incoming.remote_address_validated();
        if proven && !tcp.enter(peer.ip()) {
            tcp.stats().dropped(DropCause::TcpLimit);
            incoming.refuse();
            continue;
        }
        // The TCP table's slots, made room for as over TCP: a connection of either kind
        // waiting on its client gives way to a new one of either kind — for a proven address
        // only. An unproven Initial (its source forgeable) takes no place until its handshake
        // proves it: forged Initials held places, pressed the table (every quiet TCP client
        // cut at 1 s) and evicted established connections, those of the address they named
        // first. Their number is bounded by `before_retry` (a Retry past it).
        let slot = if proven {
            let slot = tcp.take_slot(Some(peer.ip()));
            if let Slot::Full = slot {
                tcp.stats().dropped(DropCause::TcpLimit);
                tcp.leave(peer.ip());
                incoming.refuse();
                continue;
            }
            Some(slot)
        } else {
            None
        };
        let (tcp, tls, pending) = (tcp.clone(), tls.clone(), pending.clone());
        pending.fetch_add(1, Ordering::Relaxed);
        tokio::spawn(async move {
            let permit = match slot {
                None => None,
                Some(Slot::Free(p)) => Some(p),
                Some(other) => match tcp.after_eviction(other, Some(peer.ip())).await {
                    Some(p) => Some(p),
                    None => {
                        pending.fetch_sub(1, Ordering::Relaxed);
                        tcp.leave(peer.ip());
                        incoming.refuse();
                        return;
                    }
                },
            };
            // A handshake waits on its client: bounded as a silent connection is, and one
            // that makes room for a new connection when the table is full.
            // (An unproven one holds no place: never chosen to make room, which it would not
            // make.)
            let conn = match incoming.accept() {
                Ok(c) => tcp.on_client(c, tcp.idle(), peer.ip(), || proven).await,
                Err(e) => Waited::Done(Err(e)),
            };
            pending.fetch_sub(1, Ordering::Relaxed);
            let conn = match conn {
                Waited::Done(Ok(c)) => c,
                Waited::Done(Err(_)) | Waited::Evicted => {
                    tls.quic_handshakes[1].fetch_add(1, Ordering::Relaxed);
                    if proven {
                        tcp.leave(peer.ip());
                    }
                    return;
                }
                Waited::Idle => {
                    tls.quic_handshakes[2].fetch_add(1, Ordering::Relaxed);
                    tcp.stats().dropped(DropCause::TcpTimeout);
                    if proven {
                        tcp.leave(peer.ip());
                    }
                    return;
                }
            };
            tls.quic_handshakes[0].fetch_add(1, Ordering::Relaxed);
            // The handshake proved the address: now it counts against its source's bound
            // (counted already when a Retry proved it). Counted under the address the
            // handshake began from, so that `leave` matches `enter`.
            if !proven && !tcp.enter(peer.ip()) {
                tcp.stats().dropped(DropCause::TcpLimit);
                conn.close(quinn::VarInt::from_u32(DOQ_NO_ERROR), b"");
                return;
            }
            // Proven now: its place in the table, made room for as any other's.
            let _permit = match permit {
                Some(p) => p,
                None => {
                    let got = match tcp.take_slot(Some(peer.ip())) {
                        Slot::Free(p) => Some(p),
                        Slot::Full => {
                            tcp.stats().dropped(DropCause::TcpLimit);
                            None
                        }
                        other => tcp.after_eviction(other, Some(peer.ip())).await,
                    };
                    match got {
                        Some(p) => p,
                        None => {
                            tcp.leave(peer.ip());
                            conn.close(quinn::VarInt::from_u32(DOQ_NO_ERROR), b"");
                            return;
                        }
                    }
                }
            };
            let at = conn.remote_address();
            connection(&tcp, conn, at, local).await;
            tcp.leave(peer.ip());
        });
    }
}

/// One stream of a connection being answered, counted while it lives.
struct ActiveStream(Arc<AtomicUsize>);

impl ActiveStream {
    fn new(n: &Arc<AtomicUsize>) -> ActiveStream {
        n.fetch_add(1, Ordering::Relaxed);
        ActiveStream(n.clone())
    }
}

impl Drop for ActiveStream {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

/// Serves one connection's streams, each one query.
async fn connection(
    tcp: &Arc<TcpServer>,
    conn: quinn::Connection,
    peer: SocketAddr,
    local: Option<std::net::IpAddr>,
) {
    let mut p = tcp.processor();
    p.set_quic();
    if let Some(l) = local {
        p.set_local(l);
    }
    let p = Arc::new(std::sync::Mutex::new(p));
    let in_hand = Arc::new(tokio::sync::Semaphore::new(ANSWERS_IN_HAND));
    let budget = Arc::new(tokio::sync::Semaphore::new(QUERY_BUDGET));
    let mut streams = tokio::task::JoinSet::new();
    // Streams open (each bounded by the wait limit), and when the last answer went out:
    // while waiting for its next stream the connection waits on its client whatever its
    // open streams do (a query left unfinished, an answer left unread), and takes its place
    // in the eviction order as quiet since its last answer, not since its last stream.
    let active = Arc::new(AtomicUsize::new(0));
    let born = tokio::time::Instant::now();
    let answered = Arc::new(AtomicU64::new(0));
    let last_answer = || born + Duration::from_nanos(answered.load(Ordering::Relaxed));
    let mut served = 0;
    // Ended for its client's silence or to make room: its open streams wait on the client
    // and are not waited for.
    let mut cut = false;
    while served < tcp.max_queries() {
        while streams.try_join_next().is_some() {}
        let next = tcp
            .on_client_since(
                conn.accept_bi(),
                tcp.idle(),
                peer.ip(),
                || true,
                last_answer(),
            )
            .await;
        let (mut send, mut recv) = match next {
            Waited::Done(Ok(s)) => s,
            // Closed by the client, or idle (QUIC's idle timeout).
            Waited::Done(Err(_)) => break,
            // Streams still open bound themselves; the connection waits for them while it
            // answers now and then.
            Waited::Idle
                if active.load(Ordering::Relaxed) > 0 && last_answer().elapsed() < tcp.idle() =>
            {
                continue;
            }
            Waited::Idle => {
                tcp.stats().dropped(DropCause::TcpTimeout);
                cut = true;
                break;
            }
            Waited::Evicted => {
                cut = true;
                break;
            }
        };
        served += 1;
        let (p, conn, tcp, in_hand) = (p.clone(), conn.clone(), tcp.clone(), in_hand.clone());
        let budget = budget.clone();
        let busy = ActiveStream::new(&active);
        let answered = answered.clone();
        streams.spawn(async move {
            let _busy = busy;
            let limit = tcp.wait_limit(tcp.idle());
            let (q, _held) = match tokio::time::timeout(limit, read_query(&mut recv, &budget)).await
            {
                Ok(Ok(q)) => q,
                Ok(Err(Unread::Gone)) => return,
                Ok(Err(Unread::TimedOut)) => {
                    tcp.stats().dropped(DropCause::TcpTimeout);
                    return;
                }
                r => {
                    let why = match r {
                        Err(_) => DropCause::TcpTimeout,
                        Ok(_) => DropCause::Malformed,
                    };
                    tcp.stats().dropped(why);
                    let _ = send.reset(quinn::VarInt::from_u32(DOQ_PROTOCOL_ERROR));
                    return;
                }
            };
            // One message, its length first, its ID 0 (RFC 9250 §4.2, §4.2.1).
            let len = q.len().saturating_sub(2);
            if q.len() < 14 || u16::from_be_bytes([q[0], q[1]]) as usize != len || q[2..4] != [0, 0]
            {
                tcp.stats().dropped(DropCause::Malformed);
                conn.close(quinn::VarInt::from_u32(DOQ_PROTOCOL_ERROR), b"");
                return;
            }
            // The edns-tcp-keepalive option is never sent over DoQ; a message with it is a
            // protocol error that aborts the connection (RFC 9250 §5.5.2).
            if asks_keepalive(&q[2..]) {
                tcp.stats().dropped(DropCause::Malformed);
                conn.close(quinn::VarInt::from_u32(DOQ_PROTOCOL_ERROR), b"");
                return;
            }
            // Answered once an earlier answer went out: a client that does not read holds
            // a few answers, not one per stream.
            let _turn = match in_hand.clone().try_acquire_owned() {
                Ok(t) => t,
                Err(_) => {
                    tcp.held_back(super::tcp::Stream::Quic);
                    let Ok(t) = in_hand.acquire_owned().await else {
                        return;
                    };
                    t
                }
            };
            let outcome = OUT.with(|o| {
                let out = &mut *o.borrow_mut();
                let mut p = p.lock().unwrap_or_else(|e| e.into_inner());
                p.refresh();
                tcp.stream_query(super::tcp::Stream::Quic);
                let r = match p.process(&q[2..], peer, Transport::Tcp, &mut out[2..]) {
                    Outcome::Reply(n) => {
                        out[..2].copy_from_slice(&(n as u16).to_be_bytes());
                        Ok(Some(out[..n + 2].to_vec()))
                    }
                    Outcome::Drop | Outcome::Transfer => Ok(None),
                    Outcome::Refused => Err(()),
                };
                // Zone transfers are served over TCP and TLS, not here.
                drop(p.take_transfer());
                r
            });
            match outcome {
                Ok(Some(out)) => {
                    let limit = tcp.wait_limit(tcp.idle());
                    if let Ok(Ok(())) = tokio::time::timeout(limit, send.write_all(&out)).await {
                        let _ = send.finish();
                        answered.store(born.elapsed().as_nanos() as u64, Ordering::Relaxed);
                    }
                }
                Ok(None) => {
                    let _ = send.reset(quinn::VarInt::from_u32(DOQ_NO_ERROR));
                }
                // Blocked since the connection opened: nothing more for it.
                Err(()) => conn.close(quinn::VarInt::from_u32(DOQ_NO_ERROR), b""),
            }
        });
    }
    if served >= tcp.max_queries() {
        tcp.stats().dropped(DropCause::TcpQueryLimit);
    }
    if cut {
        streams.abort_all();
    }
    while streams.join_next().await.is_some() {}
    conn.close(quinn::VarInt::from_u32(DOQ_NO_ERROR), b"");
}
