//! Response bodies read from the origin into memory, so that a client that reads slowly or
//! not at all never holds an origin connection (nginx's proxy buffering, without temporary
//! files).
//!
//! A streamed upstream body (HTTP/1.1 or h2c) is read by a task of its own, whether or not
//! the client takes it, up to a per-response window: `[server] response_buffer_bytes` (or the
//! body's exact length when smaller), reserved from the global
//! `response_buffer_total_bytes` when the relay starts. A response that fits is read whole and
//! its upstream connection goes back to the pool at once, whatever the client does; the
//! client then has `send_timeout_ms` to take what is buffered. A larger response streams
//! through the window, holding its origin only while the client keeps up: while the relay
//! waits on the client, it must take `send_min_rate_bytes_per_sec` over each [`GRACE`]
//! (`limit="send_min_rate"`), and it may never take nothing for `send_timeout_ms`
//! (`limit="send_timeout"`). When the global budget is spent a response streams through a
//! small window of [`STREAM_WINDOW`] bytes instead (`limit="response_buffer_total"`).
//!
//! A client that breaks a bound is dropped: the upstream connection (if still open) is
//! closed, the client's response ends with an error, and the client's connection is closed
//! at once ([`CloseCause::SlowReader`]) — a zero HTTP/2 window or a full HTTP/1.1 socket keeps
//! hyper from ever polling the body, so only closing the connection frees what it holds (the
//! whole connection, as nginx's `send_timeout` does for HTTP/2).
//!
//! What is read is copied into buffers of the relay's own (16 KiB): besides the window,
//! a relay holds at most the bytes it is gathering and one piece of the upstream read past
//! them — never the upstream's read blocks, which a piece of a few bytes kept alive whole.
//!
//! Bodies complete in the first read never get here (see [`crate::forward::h1`]).

use std::pin::pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use hyper::body::{Body, Frame, SizeHint};
use tokio::sync::{Notify, Semaphore, mpsc};
use tokio::time::{Instant, sleep_until};

use super::{BoxError, RespBody};
use crate::conn_registry::{CloseCause, ConnCtl};
use crate::counters::{Counter, Counters};

/// Time a streamed response may take before the minimum send rate applies.
pub const GRACE: Duration = Duration::from_secs(2);

/// How far back a stalled body is judged by its client's TCP acknowledgements. A reader
/// limited by its own application (a throttled download, a paused player) has its receive
/// window reopened by its kernel in large steps (silly-window avoidance: when half its buffer
/// is free), so its acknowledgements move only every few seconds: over 2 s a reader at 30
/// KB/s, thirty times the default minimum, showed none and was dropped.
pub const ACK_HORIZON: Duration = Duration::from_secs(8);

/// Acknowledgement readings kept (one per [`GRACE`] while the body stalls): enough to reach
/// [`ACK_HORIZON`] back.
const ACK_READINGS: usize = (ACK_HORIZON.as_secs() / GRACE.as_secs()) as usize + 1;

/// The read-ahead window of a response streamed without a reservation (budget spent).
pub const STREAM_WINDOW: usize = 64 * 1024;

/// The bounds a response is relayed under (`[server]` keys).
#[derive(Debug, Clone, Copy)]
pub struct RelayLimits {
    /// `response_buffer_bytes`: read ahead per response.
    pub buffer: usize,
    /// `response_buffer_total_bytes`: read ahead over all responses.
    pub buffer_total: usize,
    /// `send_timeout_ms`.
    pub send_timeout: Duration,
    /// `send_min_rate_bytes_per_sec` (0: none).
    pub min_rate: u64,
    /// The source holds [`SOURCE_SHARE`] of the budget at most (not a listed hop's
    /// connection, which carries many clients).
    pub source_share: bool,
}

/// Why a relay dropped its client.
#[derive(Debug, Clone, Copy, thiserror::Error)]
enum SlowReader {
    #[error("the client took nothing within send_timeout")]
    Timeout,
    #[error("the client took less than send_min_rate_bytes_per_sec")]
    MinRate,
}

/// What the relay task and the client's side share.
#[derive(Debug)]
struct Shared {
    /// Room in the window, in bytes: the task takes before reading on, the client gives back.
    room: Semaphore,
    /// Bytes the client has taken.
    taken: AtomicU64,
    /// Told each time the client takes a piece (gathered bytes may go on).
    took: Notify,
}

/// Bytes reserved from the global budget, given back when the relay ends.
struct Reservation {
    total: Arc<AtomicUsize>,
    /// The source's share of it.
    source: Arc<AtomicUsize>,
    bytes: usize,
}

impl Drop for Reservation {
    fn drop(&mut self) {
        self.total.fetch_sub(self.bytes, Ordering::Relaxed);
        self.source.fetch_sub(self.bytes, Ordering::Relaxed);
    }
}

/// The most of `response_buffer_total_bytes` one source may hold reserved is this part of
/// it (at least one `response_buffer_bytes`): past it, its responses stream through
/// [`STREAM_WINDOW`] (zero-window HTTP/2 streams of one address held
/// the whole budget, so every other client's responses streamed).
pub const SOURCE_SHARE: usize = 8;

/// The client's side of a relayed body.
#[derive(Debug)]
pub struct Relayed {
    rx: mpsc::UnboundedReceiver<Result<(Bytes, u32), BoxError>>,
    shared: Arc<Shared>,
    /// What is left of an exact length, when the upstream gave one.
    left: Option<u64>,
    done: bool,
    _busy: BodyBusy,
}

/// A relayed body in its connection's count while the client's side of it lives; its end
/// is the connection's last activity.
#[derive(Debug)]
struct BodyBusy(Arc<ConnCtl>);

impl BodyBusy {
    fn new(ctl: &Arc<ConnCtl>) -> BodyBusy {
        ctl.bodies.fetch_add(1, Ordering::Relaxed);
        BodyBusy(Arc::clone(ctl))
    }
}

impl Drop for BodyBusy {
    fn drop(&mut self) {
        self.0
            .last_active_ms
            .store(shield::clock::mono_us() / 1000, Ordering::Relaxed);
        self.0.bodies.fetch_sub(1, Ordering::Relaxed);
    }
}

/// Starts relaying `body` (an upstream's streamed body) for the client of `ctl`; the body the
/// client gets. `buffered` counts the bytes reserved by all relays now.
pub fn relay(
    counters: &Arc<Counters>,
    buffered: &Arc<AtomicUsize>,
    ctl: &Arc<ConnCtl>,
    waiting: crate::conn_registry::SourceWaiting,
    body: RespBody,
    limits: RelayLimits,
) -> Relayed {
    let left = body.size_hint().exact();
    counters.bump(Counter::ResponsesRelayed);
    let want = left
        .map_or(limits.buffer, |n| {
            limits.buffer.min(usize::try_from(n).unwrap_or(usize::MAX))
        })
        .max(1);
    let now = buffered.fetch_add(want, Ordering::Relaxed) + want;
    let mine = ctl.buffered.fetch_add(want, Ordering::Relaxed) + want;
    let over_total = now > limits.buffer_total;
    let over_share =
        limits.source_share && mine > (limits.buffer_total / SOURCE_SHARE).max(limits.buffer);
    let (window, reservation) = if over_total || over_share {
        buffered.fetch_sub(want, Ordering::Relaxed);
        ctl.buffered.fetch_sub(want, Ordering::Relaxed);
        counters.bump(if over_total {
            Counter::LimitResponseBufferTotal
        } else {
            Counter::LimitResponseBufferSource
        });
        (STREAM_WINDOW.min(want), None)
    } else {
        let r = Reservation {
            total: Arc::clone(buffered),
            source: Arc::clone(&ctl.buffered),
            bytes: want,
        };
        (want, Some(r))
    };
    // A semaphore's permits are bounded (usize::MAX >> 3) and acquired as u32.
    let window = window.min(u32::MAX as usize);
    let shared = Arc::new(Shared {
        room: Semaphore::new(window),
        taken: AtomicU64::new(0),
        took: Notify::new(),
    });
    let (tx, rx) = mpsc::unbounded_channel();
    tokio::spawn(run(
        body,
        tx,
        Arc::clone(&shared),
        window as u32,
        limits,
        Arc::clone(counters),
        Arc::clone(ctl),
        reservation,
        waiting,
    ));
    Relayed {
        rx,
        shared,
        left,
        done: false,
        _busy: BodyBusy::new(ctl),
    }
}

type Tx = mpsc::UnboundedSender<Result<(Bytes, u32), BoxError>>;

/// The relay task: reads the upstream body into the window, then waits for the client to
/// take the rest, dropping it when it breaks a bound.
#[allow(clippy::too_many_arguments)]
async fn run(
    mut body: RespBody,
    tx: Tx,
    shared: Arc<Shared>,
    window: u32,
    limits: RelayLimits,
    counters: Arc<Counters>,
    ctl: Arc<ConnCtl>,
    _reservation: Option<Reservation>,
    waiting: crate::conn_registry::SourceWaiting,
) {
    let mut gather = Gather::default();
    // What the client had taken when the last short piece was sent.
    let mut flushed_at = u64::MAX;
    let end = loop {
        // Gathered bytes go on at once while the client keeps up (nothing of ours waits for
        // it, or it took something since the last short piece); else they wait to be
        // GATHER long: an unread response is a few large pieces, never many small ones.
        let keeping_up = shared.room.available_permits() >= window as usize
            || shared.taken.load(Ordering::Relaxed) != flushed_at;
        let next = tokio::select! {
            f = std::future::poll_fn(|cx| gather.poll_next(&mut body, keeping_up, cx)) => f,
            // The client took a piece: gathered bytes may go on.
            _ = shared.took.notified() => continue,
            // The client went away: the upstream connection (not at its end) is closed.
            _ = tx.closed() => return,
        };
        let data = match next {
            Next::End => break Ok(()),
            Next::Data(d) => d,
            Next::Err(e) => {
                let _ = tx.send(Err(e));
                return;
            }
        };
        if data.len() < GATHER {
            flushed_at = shared.taken.load(Ordering::Relaxed);
        }
        let n = u32::try_from(data.len()).unwrap_or(u32::MAX).min(window);
        if let Err(e) = room(&shared, n, &tx, &ctl, limits, false).await {
            break Err(e);
        }
        if tx.send(Ok((data, n))).is_err() {
            return;
        }
    };
    // At the end of the upstream body its connection goes back to the pool (or, when the
    // client broke a bound, is closed) before any further wait for the client, and the
    // source's place among requests at origins is free.
    drop(body);
    drop(waiting);
    let end = match end {
        Ok(()) => room(&shared, window, &tx, &ctl, limits, true).await,
        e => e,
    };
    match end {
        Ok(()) | Err(None) => {}
        Err(Some(why)) => {
            counters.bump(match why {
                SlowReader::Timeout => Counter::LimitSendTimeout,
                SlowReader::MinRate => Counter::LimitSendMinRate,
            });
            tracing::debug!(ip = %ctl.ip, "{why}: response ended, connection closed");
            let _ = tx.send(Err(Box::new(why)));
            ctl.close(CloseCause::SlowReader);
        }
    }
}

/// Small pieces of an upstream body are gathered into buffers of this many bytes. Every
/// piece is copied out of the read buffer it is a slice of: one byte of a chunked body kept
/// its connection's whole read block alive (an origin sending one-byte chunks, each with a
/// long chunk extension, made one unread response hold 1.5 GB where 1 MiB was counted, nginx
/// 4 MB).
const GATHER: usize = 16 * 1024;

/// What the relay reads next of an upstream body.
enum Next {
    Data(Bytes),
    End,
    Err(BoxError),
}

/// An upstream body's pieces copied into buffers of the relay's own.
#[derive(Default)]
struct Gather {
    acc: BytesMut,
    /// What came after the gathered bytes, sent once they are.
    stash: Option<Next>,
}

impl Gather {
    /// The next piece: a large one as it came (copied), small ones gathered — sent on when
    /// the body has no more ready and `eager` (a stream of events is never held back from a
    /// client that keeps up), else once [`GATHER`] long.
    fn poll_next<B>(&mut self, body: &mut B, eager: bool, cx: &mut Context<'_>) -> Poll<Next>
    where
        B: Body<Data = Bytes, Error = BoxError> + Unpin,
    {
        loop {
            if self.acc.is_empty()
                && let Some(n) = self.stash.take()
            {
                return Poll::Ready(n);
            }
            if self.stash.is_some() || self.acc.len() >= GATHER {
                return Poll::Ready(Next::Data(self.acc.split().freeze()));
            }
            match std::pin::Pin::new(&mut *body).poll_frame(cx) {
                Poll::Pending if eager && !self.acc.is_empty() => {
                    return Poll::Ready(Next::Data(self.acc.split().freeze()));
                }
                Poll::Pending => return Poll::Pending,
                Poll::Ready(None) => self.stash = Some(Next::End),
                Poll::Ready(Some(Err(e))) => self.stash = Some(Next::Err(e)),
                Poll::Ready(Some(Ok(f))) => match f.into_data() {
                    Ok(d) if d.is_empty() => {}
                    Ok(d) if d.len() >= GATHER => {
                        self.stash = Some(Next::Data(Bytes::copy_from_slice(&d)));
                    }
                    Ok(d) => {
                        if self.acc.capacity() - self.acc.len() < d.len() {
                            self.acc.reserve(GATHER);
                        }
                        self.acc.extend_from_slice(&d);
                    }
                    // Trailers are not relayed.
                    Err(_) => {}
                },
            }
        }
    }
}

/// Waits until the window has `n` bytes of room (`drain`: all of it, the client has taken
/// everything). `Err(None)`: the client went away; `Err(Some(_))`: it broke a bound.
///
/// Streaming, the client must take something within each `send_timeout`, and while the
/// relay waits on it, at least `min_rate` over each [`GRACE`] (measured from the wait's
/// start, so that what the socket buffers swallowed early gives no credit to a client that
/// then stops). The body's progress comes in steps as large as the socket's send buffer, so
/// a slow but steady reader is judged instead by what its TCP stack acknowledged over the
/// last [`ACK_HORIZON`] (one `TCP_INFO` read per [`GRACE`], only on this slow path); over
/// HTTP/2 only while the socket holds unsent bytes (else the stream's own window holds it
/// back).
/// Draining, all of the rest must go within one `send_timeout`.
async fn room(
    shared: &Shared,
    n: u32,
    tx: &Tx,
    ctl: &ConnCtl,
    limits: RelayLimits,
    drain: bool,
) -> Result<(), Option<SlowReader>> {
    let mut acquire = pin!(shared.room.acquire_many(n));
    let entered = Instant::now();
    let mut seen = shared.taken.load(Ordering::Relaxed);
    let mut idle_from = entered;
    let mut mark = (entered, seen);
    // What the client's TCP had acknowledged at each check the body's progress failed since
    // it last passed, the latest [`ACK_READINGS`].
    let mut acked: [Option<(Instant, u64)>; ACK_READINGS] = [None; ACK_READINGS];
    let mut readings = 0usize;
    let rate = !drain && limits.min_rate > 0;
    loop {
        let idle_due = idle_from + limits.send_timeout;
        let due = if rate {
            idle_due.min(mark.0 + GRACE)
        } else {
            idle_due
        };
        tokio::select! {
            biased;
            p = &mut acquire => {
                if let Ok(p) = p {
                    p.forget();
                }
                return Ok(());
            }
            _ = tx.closed() => return Err(None),
            _ = sleep_until(due) => {
                let now = Instant::now();
                let taken = shared.taken.load(Ordering::Relaxed);
                if rate && now >= mark.0 + GRACE {
                    let need = limits.min_rate as f64 * (now - mark.0).as_secs_f64();
                    if ((taken - mark.1) as f64) < need {
                        // The body's progress stalls while the socket's buffer drains: judged
                        // by what the client's TCP acknowledged. Over HTTP/2 only while the
                        // socket holds unsent bytes (the TCP stream holds the connection back,
                        // not this stream's window, which the acknowledgements do not show).
                        let p = ctl.tcp_progress().ok_or(Some(SlowReader::MinRate))?;
                        if ctl.h2.load(Ordering::Relaxed) && !p.backed_up {
                            return Err(Some(SlowReader::MinRate));
                        }
                        // Judged over the horizon: against the latest reading at least that
                        // old (none yet: not judged).
                        let back = acked
                            .iter()
                            .flatten()
                            .filter(|(t, _)| now - *t >= ACK_HORIZON)
                            .max_by_key(|(t, _)| *t);
                        if let Some(&(t, a)) = back {
                            let need = limits.min_rate as f64 * (now - t).as_secs_f64();
                            if (p.acked.saturating_sub(a) as f64) < need {
                                return Err(Some(SlowReader::MinRate));
                            }
                        }
                        acked[readings % ACK_READINGS] = Some((now, p.acked));
                        readings += 1;
                    } else {
                        acked = [None; ACK_READINGS];
                        readings = 0;
                    }
                    mark = (now, taken);
                }
                if taken != seen {
                    seen = taken;
                    if !drain {
                        idle_from = now;
                    }
                } else if now >= idle_due {
                    return Err(Some(SlowReader::Timeout));
                }
            }
        }
    }
}

impl Relayed {
    /// The next frame; `None` at the end.
    pub fn poll_data(
        &mut self,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        if self.done {
            return Poll::Ready(None);
        }
        match self.rx.poll_recv(cx) {
            Poll::Pending => Poll::Pending,
            Poll::Ready(None) => {
                self.done = true;
                Poll::Ready(None)
            }
            Poll::Ready(Some(Ok((d, n)))) => {
                self.shared
                    .taken
                    .fetch_add(d.len() as u64, Ordering::Relaxed);
                self.shared.room.add_permits(n as usize);
                self.shared.took.notify_one();
                if let Some(l) = &mut self.left {
                    *l = l.saturating_sub(d.len() as u64);
                }
                Poll::Ready(Some(Ok(Frame::data(d))))
            }
            Poll::Ready(Some(Err(e))) => {
                self.done = true;
                Poll::Ready(Some(Err(e)))
            }
        }
    }

    /// True once the body has ended.
    pub fn is_end(&self) -> bool {
        self.done
    }

    /// The remaining length when it is known.
    pub fn size_hint(&self) -> SizeHint {
        match self.left {
            Some(n) => SizeHint::with_exact(n),
            None => SizeHint::default(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A body of one piece.
    struct One(Option<Bytes>);

    impl Body for One {
        type Data = Bytes;
        type Error = BoxError;
        fn poll_frame(
            mut self: std::pin::Pin<&mut Self>,
            _: &mut Context<'_>,
        ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
            Poll::Ready(self.0.take().map(|b| Ok(Frame::data(b))))
        }
    }

    /// A body of `n` one-byte pieces, each a slice of one shared buffer (as a chunked body's
    /// bytes are slices of the connection's read block), `pending_every` pieces apart by a
    /// `Pending` (0: never).
    struct Slices {
        src: Bytes,
        at: usize,
        n: usize,
        pending_every: usize,
        pended: bool,
    }

    impl Body for Slices {
        type Data = Bytes;
        type Error = BoxError;
        fn poll_frame(
            mut self: std::pin::Pin<&mut Self>,
            cx: &mut Context<'_>,
        ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
            if self.at == self.n {
                return Poll::Ready(None);
            }
            if self.pending_every > 0 && self.at.is_multiple_of(self.pending_every) && !self.pended
            {
                self.pended = true;
                cx.waker().wake_by_ref();
                return Poll::Pending;
            }
            self.pended = false;
            let at = self.at;
            self.at += 1;
            Poll::Ready(Some(Ok(Frame::data(self.src.slice(at * 8..at * 8 + 1)))))
        }
    }

    fn slices(n: usize, pending_every: usize) -> Slices {
        Slices {
            src: Bytes::from(vec![b'z'; n * 8]),
            at: 0,
            n,
            pending_every,
            pended: false,
        }
    }

    /// Every piece sent on, and whether it shares memory with the upstream's buffer.
    fn drain(b: &mut Slices, eager: bool) -> Vec<Bytes> {
        let waker = std::task::Waker::noop();
        let mut cx = Context::from_waker(waker);
        let mut g = Gather::default();
        let mut out = Vec::new();
        for _ in 0..1_000_000 {
            match g.poll_next(b, eager, &mut cx) {
                Poll::Ready(Next::Data(d)) => out.push(d),
                Poll::Ready(Next::End) => return out,
                Poll::Ready(Next::Err(e)) => panic!("{e}"),
                Poll::Pending => {}
            }
        }
        panic!("no end");
    }

    #[test]
    fn pieces_never_pin_the_upstreams_buffer_and_an_unread_body_is_few_pieces() {
        // One-byte slices, a Pending every 10: to a client that does not keep up, pieces of
        // GATHER bytes, never a slice of the upstream's buffer.
        let mut b = slices(100_000, 10);
        let range = b.src.as_ptr() as usize..b.src.as_ptr() as usize + b.src.len();
        let out = drain(&mut b, false);
        assert_eq!(out.iter().map(Bytes::len).sum::<usize>(), 100_000);
        assert!(out.len() <= 100_000 / GATHER + 1, "{} pieces", out.len());
        assert!(out.iter().all(|d| !range.contains(&(d.as_ptr() as usize))));
        // To a client that keeps up, what is ready goes on at each Pending (an event stream is
        // never held back).
        let mut b = slices(1000, 10);
        let out = drain(&mut b, true);
        assert_eq!(out.len(), 100);
        assert!(
            out.iter()
                .all(|d| d.len() == 10 && d.iter().all(|&c| c == b'z'))
        );
        // A large piece goes on as it came, copied.
        let big = Bytes::from(vec![b'q'; 3 * GATHER]);
        let ptr = big.as_ptr();
        let mut s = One(Some(big));
        let waker = std::task::Waker::noop();
        let mut cx = Context::from_waker(waker);
        let mut g = Gather::default();
        match g.poll_next(&mut s, false, &mut cx) {
            Poll::Ready(Next::Data(d)) => assert!(d.len() == 3 * GATHER && d.as_ptr() != ptr),
            _ => panic!("the large piece"),
        }
        assert!(matches!(
            g.poll_next(&mut s, false, &mut cx),
            Poll::Ready(Next::End)
        ));
    }
}
