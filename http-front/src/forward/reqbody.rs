//! Request bodies: read into memory before the upstream is contacted, and timed while they
//! arrive, so that a slow upload never holds an origin connection and a malformed body never
//! reaches the origin.
//!
//! [`ClientBody::buffer`] reads the body into memory up to `[server] body_buffer_bytes`
//! (nginx's `client_body_buffer_size` model, without temporary files) before the request goes
//! upstream: a body that fits — nearly every form and API call — is sent in one write with a
//! `Content-Length`, and a malformed one (bad chunking, a length that does not match) is
//! answered 400 without touching the origin. A larger body sends its buffered part, then
//! streams the rest. Either way the whole body must arrive within `body_timeout_ms`, and after
//! its first [`GRACE`] it must keep `body_min_rate_bytes_per_sec` — on average while it is
//! buffered, and over the last seconds once it streams to an open upstream connection (what
//! came before buys at most [`GRACE`] of waiting, so a burst cannot buy a long trickle);
//! otherwise the request is answered 408 and the upstream connection, if one was opened, is
//! closed. Buffers over all
//! requests share `body_buffer_total_bytes`; past it a body streams without one (counted).
//!
//! `Expect: 100-continue` is answered by http-front itself: hyper sends `100 Continue` when
//! the body is first read, which is here, after the rules passed the request; the upstream
//! never sees the expectation.

use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::task::{Context, Poll, ready};
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use hyper::body::{Body, Frame, Incoming, SizeHint};
use tokio::time::{Instant, Sleep};

use super::BoxError;
use crate::counters::{Counter, Counters};

/// Time a body may take before the minimum rate applies.
pub const GRACE: Duration = Duration::from_secs(2);

/// Why a request body was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum BodyError {
    /// The client's framing was wrong (400).
    #[error("malformed request body")]
    Malformed,
    /// Over `limits.max_body_bytes` (413).
    #[error("request body too large")]
    TooLarge,
    /// Not whole within `body_timeout_ms` (408).
    #[error("request body not received within body_timeout_ms")]
    Timeout,
    /// Below `body_min_rate_bytes_per_sec` (408).
    #[error("request body slower than body_min_rate_bytes_per_sec")]
    TooSlow,
    /// The client reset its HTTP/2 stream before the body ended: a premature reset, as one
    /// before the response head (a reset flood of such streams went uncounted).
    #[error("request stream reset by the client")]
    Reset,
}

/// True when `e` (a request body's error) is the client's reset of its HTTP/2 stream.
fn reset_by_client(e: &hyper::Error) -> bool {
    let mut s: Option<&dyn std::error::Error> = std::error::Error::source(e);
    while let Some(x) = s {
        if let Some(h) = x.downcast_ref::<h2::Error>() {
            return h.is_reset() && h.is_remote();
        }
        s = x.source();
    }
    false
}

/// The bounds a body is read under.
#[derive(Debug, Clone, Copy)]
pub struct BodyLimits {
    /// `limits.max_body_bytes`.
    pub max_body: u64,
    /// `server.body_buffer_bytes`.
    pub buffer: usize,
    /// `server.body_buffer_total_bytes`.
    pub buffer_total: usize,
    /// `server.body_min_rate_bytes_per_sec` (0: none).
    pub min_rate: u64,
    /// `server.body_timeout_ms`.
    pub timeout: Duration,
    /// The source holds a sixteenth of `buffer_total` at most (not a listed hop's connection,
    /// which carries many clients).
    pub source_share: bool,
}

/// The most of `body_buffer_total_bytes` one source may hold reserved is this part of it (at
/// least one `body_buffer_bytes`): past it, its bodies stream unbuffered (one address's 512
/// stalled uploads declaring 1 MiB each held the whole budget, and every other client's
/// uploads streamed to the origin as they trickled in).
pub const SOURCE_SHARE: usize = 16;

/// Room a buffering body takes ahead of what it has read.
const RESERVE_STEP: usize = 64 * 1024;

/// A client's request body: what was buffered, then the rest as it arrives, under the bounds.
pub struct ClientBody {
    counters: Arc<Counters>,
    /// Bytes of request bodies buffered now, over all requests.
    buffered_total: Arc<std::sync::atomic::AtomicUsize>,
    /// The same, of the client's source.
    source: Arc<std::sync::atomic::AtomicUsize>,
    /// The buffered part.
    head: Bytes,
    /// The buffered part went out (a retry may send it again while `rest` is `None`).
    head_sent: bool,
    /// What is still to come from the client; `None` once it ended.
    rest: Option<Incoming>,
    /// The client's `Content-Length`, when it sent one.
    exact: Option<u64>,
    received: u64,
    limits: BodyLimits,
    start: Instant,
    timer: Option<Pin<Box<Sleep>>>,
    /// Bytes of the shared budget this body holds.
    reserved: usize,
    failed: Option<BodyError>,
    /// Told of the error that ends the body, for a caller that gave the body away (h2c).
    watch: Option<Arc<Watch>>,
    /// While the body streams to an open upstream connection: the time its bytes so far
    /// have paid for at the minimum rate, never more than [`GRACE`] ahead of their arrival
    /// (a burst cannot buy a long trickle while an origin connection waits).
    paid_until: Option<Instant>,
    /// When the last piece went to the upstream side: the time until it asks for the next
    /// is the upstream's (back-pressure), not the client's, and is not charged to it.
    handed_at: Option<Instant>,
}

/// The error a body ended with, readable by whoever handed the body on.
#[derive(Debug, Default)]
pub struct Watch(std::sync::OnceLock<BodyError>);

impl Watch {
    /// The error, once there is one.
    pub fn get(&self) -> Option<BodyError> {
        self.0.get().copied()
    }
}

impl std::fmt::Debug for ClientBody {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ClientBody")
            .field("buffered", &self.head.len())
            .field("received", &self.received)
            .field("complete", &self.rest.is_none())
            .finish_non_exhaustive()
    }
}

impl ClientBody {
    /// The body of a request (`None`: it has none); `buffered_total` counts the bytes all
    /// requests hold in buffers now.
    pub fn new(
        counters: &Arc<Counters>,
        buffered_total: &Arc<std::sync::atomic::AtomicUsize>,
        source: &Arc<std::sync::atomic::AtomicUsize>,
        body: Option<Incoming>,
        limits: BodyLimits,
    ) -> ClientBody {
        let rest = body.filter(|b| !b.is_end_stream());
        let exact = rest.as_ref().and_then(|b| b.size_hint().exact());
        ClientBody {
            counters: Arc::clone(counters),
            buffered_total: Arc::clone(buffered_total),
            source: Arc::clone(source),
            head: Bytes::new(),
            head_sent: false,
            rest,
            exact,
            received: 0,
            limits,
            start: Instant::now(),
            timer: None,
            reserved: 0,
            failed: None,
            watch: None,
            paid_until: None,
            handed_at: None,
        }
    }

    /// True when the request has no body at all.
    pub fn is_empty(&self) -> bool {
        self.rest.is_none() && self.head.is_empty()
    }

    /// True when the whole body is in memory.
    pub fn is_complete(&self) -> bool {
        self.rest.is_none()
    }

    /// The body's length when known: all of it buffered, or the client's `Content-Length`.
    pub fn len(&self) -> Option<u64> {
        if self.rest.is_none() {
            Some(self.head.len() as u64)
        } else {
            self.exact
        }
    }

    /// The error that ended the body, if one did.
    pub fn failed(&self) -> Option<BodyError> {
        self.failed
    }

    /// Sends the buffered part again on the next read (a retry on a fresh connection);
    /// false when the body was streamed and cannot be.
    pub fn rewind(&mut self) -> bool {
        if self.rest.is_some() {
            return false;
        }
        self.head_sent = false;
        true
    }

    /// Reads the body into memory up to the buffer size (less when the shared budget, or the
    /// source's share of it, runs out). `Ok(true)`: it was buffered whole.
    ///
    /// The budget is charged by the bytes as they come, never by what a body declares: a
    /// stalled upload declaring 1 MiB held 1 MiB of it, and one address's 512 of them held the
    /// whole budget while sending 60 KiB each.
    pub async fn buffer(&mut self) -> Result<bool, BodyError> {
        if self.rest.is_none() {
            return Ok(true);
        }
        let want = match self.exact {
            Some(n) => self
                .limits
                .buffer
                .min(usize::try_from(n).unwrap_or(usize::MAX)),
            None => self.limits.buffer,
        };
        // A declared length that fits is read to the body's end, not only to its length: an
        // HTTP/2 stream may still send more (or never end), and such a request is refused
        // before any origin sees it.
        let whole = self
            .exact
            .is_some_and(|n| usize::try_from(n).is_ok_and(|n| n <= self.limits.buffer));
        let mut buf = BytesMut::new();
        while buf.len() < want || (whole && self.rest.is_some()) {
            // Room is taken a step ahead of what is read (never the whole declared length),
            // so that bodies reading at once at the budget's edge overshoot it by nothing.
            if buf.len() >= self.reserved
                && !self.reserve(RESERVE_STEP.min(want.saturating_sub(buf.len())).max(1024))
            {
                break;
            }
            match std::future::poll_fn(|cx| self.poll_rest(cx)).await {
                None => break,
                Some(Ok(d)) => {
                    buf.extend_from_slice(&d);
                    // A piece larger than the room left: charged as it is (what came is
                    // kept), and past the budget the rest streams.
                    if buf.len() > self.reserved {
                        let over = buf.len() - self.reserved;
                        if !self.charge(over) {
                            break;
                        }
                    }
                }
                Some(Err(e)) => return Err(e),
            }
        }
        self.head = buf.freeze();
        Ok(self.rest.is_none())
    }

    /// Takes `n` bytes of room in the budget and the source's share (held until the body
    /// goes); false, counted, and nothing taken when either has not that much left.
    fn reserve(&mut self, n: usize) -> bool {
        if self.charge(n) {
            return true;
        }
        self.buffered_total.fetch_sub(n, Ordering::Relaxed);
        self.source.fetch_sub(n, Ordering::Relaxed);
        self.reserved -= n;
        false
    }

    /// Charges `n` more bytes to the budget and the source's share (they stay charged until
    /// the body goes); false, counted, when either is now spent.
    fn charge(&mut self, n: usize) -> bool {
        let now = self.buffered_total.fetch_add(n, Ordering::Relaxed) + n;
        let mine = self.source.fetch_add(n, Ordering::Relaxed) + n;
        self.reserved += n;
        let l = &self.limits;
        let over_total = now > l.buffer_total;
        let over_share = l.source_share && mine > (l.buffer_total / SOURCE_SHARE).max(l.buffer);
        if over_total || over_share {
            self.counters.bump(if over_total {
                Counter::LimitBodyBufferTotal
            } else {
                Counter::LimitBodyBufferSource
            });
            return false;
        }
        true
    }

    /// A handle that reports the error this body ends with (for when it is given away).
    pub fn watch(&mut self) -> Arc<Watch> {
        Arc::clone(self.watch.get_or_insert_with(Arc::default))
    }

    fn fail(&mut self, e: BodyError) -> Poll<Option<Result<Bytes, BodyError>>> {
        self.failed = Some(e);
        if let Some(w) = &self.watch {
            let _ = w.0.set(e);
        }
        self.rest = None;
        Poll::Ready(Some(Err(e)))
    }

    /// The next piece of the body from the client, under the bounds.
    fn poll_rest(&mut self, cx: &mut Context<'_>) -> Poll<Option<Result<Bytes, BodyError>>> {
        loop {
            let Some(rest) = self.rest.as_mut() else {
                return Poll::Ready(None);
            };
            match Pin::new(rest).poll_frame(cx) {
                Poll::Ready(None) => {
                    self.rest = None;
                    if self.exact.is_some_and(|n| n != self.received) {
                        return self.fail(BodyError::Malformed);
                    }
                    return Poll::Ready(None);
                }
                Poll::Ready(Some(Err(e))) => {
                    return self.fail(if reset_by_client(&e) {
                        BodyError::Reset
                    } else {
                        BodyError::Malformed
                    });
                }
                Poll::Ready(Some(Ok(f))) => {
                    // Trailers are not passed on.
                    let Ok(d) = f.into_data() else { continue };
                    if d.is_empty() {
                        continue;
                    }
                    self.received += d.len() as u64;
                    if self.received > self.limits.max_body {
                        return self.fail(BodyError::TooLarge);
                    }
                    if let Some(paid) = self.paid_until
                        && self.limits.min_rate > 0
                    {
                        let now = Instant::now();
                        let earned =
                            Duration::from_secs_f64(d.len() as f64 / self.limits.min_rate as f64);
                        self.paid_until = Some((paid.max(now) + earned).min(now + GRACE));
                    }
                    return Poll::Ready(Some(Ok(d)));
                }
                Poll::Pending => {}
            }
            // Nothing yet: wake when the body would be too late or too slow.
            let now = Instant::now();
            let deadline = self.start + self.limits.timeout;
            if now >= deadline {
                return self.fail(BodyError::Timeout);
            }
            let mut wake = deadline;
            if self.limits.min_rate > 0 {
                let due = match self.paid_until {
                    // Streaming: the rate over the last seconds, not since the start.
                    Some(paid) => paid,
                    None => {
                        self.start
                            + GRACE
                            + Duration::from_secs_f64(
                                self.received as f64 / self.limits.min_rate as f64,
                            )
                    }
                };
                if now >= due {
                    return self.fail(BodyError::TooSlow);
                }
                wake = wake.min(due);
            }
            let timer = self
                .timer
                .get_or_insert_with(|| Box::pin(tokio::time::sleep_until(wake)));
            if timer.deadline() != wake {
                timer.as_mut().reset(wake);
            }
            ready!(timer.as_mut().poll(cx));
        }
    }

    /// The next piece to send upstream: the buffered part, then the rest as it arrives
    /// (from then on an upstream connection waits on the client: the minimum rate is kept
    /// over the last seconds).
    pub fn poll_next(&mut self, cx: &mut Context<'_>) -> Poll<Option<Result<Bytes, BodyError>>> {
        if !self.head_sent {
            self.head_sent = true;
            if !self.head.is_empty() {
                return Poll::Ready(Some(Ok(self.head.clone())));
            }
        }
        if self.rest.is_some() {
            let now = Instant::now();
            self.paid_until = Some(match self.paid_until {
                None => now + GRACE,
                // The time since the last piece was handed over was the upstream's.
                Some(paid) => {
                    let upstream = self.handed_at.take().map_or(Duration::ZERO, |t| now - t);
                    (paid + upstream).min(now + GRACE)
                }
            });
        }
        let r = self.poll_rest(cx);
        if matches!(r, Poll::Ready(Some(Ok(_)))) && self.paid_until.is_some() {
            self.handed_at = Some(Instant::now());
        }
        r
    }
}

impl Drop for ClientBody {
    fn drop(&mut self) {
        if self.reserved > 0 {
            self.buffered_total
                .fetch_sub(self.reserved, Ordering::Relaxed);
            self.source.fetch_sub(self.reserved, Ordering::Relaxed);
        }
    }
}

/// For h2c upstreams (hyper's client pulls the body).
impl Body for ClientBody {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        self.get_mut()
            .poll_next(cx)
            .map(|o| o.map(|r| r.map(Frame::data).map_err(|e| Box::new(e) as BoxError)))
    }

    fn is_end_stream(&self) -> bool {
        self.head_sent && self.rest.is_none() || self.is_empty()
    }

    fn size_hint(&self) -> SizeHint {
        match self.len() {
            Some(n) => SizeHint::with_exact(n),
            None => SizeHint::default(),
        }
    }
}
