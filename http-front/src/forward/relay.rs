//! Response bodies relayed through a bounded buffer, so that a client that does not read
//! never holds an origin connection.
//!
//! A streamed upstream body (HTTP/1.1 or h2c) is read by a task of its own into a channel of
//! [`FRAMES`] frames, whether or not the client takes them: a body that fits is read whole and
//! its upstream connection goes back to the pool at once (nginx's proxy buffering, without
//! temporary files). When the channel stays full for `send_timeout` — the client has taken
//! nothing for that long, over HTTP/1.1 or on an HTTP/2 stream whose window it keeps at zero —
//! the relay gives up: the upstream connection is closed, the event is counted
//! (`limit_hits_total{limit="send_timeout"}`), and the client's response ends with an error
//! (HTTP/1.1: the connection closes; HTTP/2: the stream is reset). A client that goes away
//! ends the relay too.
//!
//! Bodies complete in the first read never get here (see [`crate::forward::h1`]).

use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use hyper::body::{Body, Frame, SizeHint};
use tokio::sync::mpsc;

use super::{BoxError, RespBody};
use crate::counters::{Counter, Counters};

/// Frames buffered between the upstream and a client (each at most one upstream read).
pub const FRAMES: usize = 16;

#[derive(Debug)]
struct SendTimeout;

impl std::fmt::Display for SendTimeout {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("the client took nothing within send_timeout")
    }
}

impl std::error::Error for SendTimeout {}

/// The client's side of a relayed body.
#[derive(Debug)]
pub struct Relayed {
    rx: mpsc::Receiver<Result<Bytes, BoxError>>,
    /// What is left of an exact length, when the upstream gave one.
    left: Option<u64>,
    done: bool,
}

/// Starts relaying `body` (an upstream's streamed body); the body the client gets.
pub fn relay(counters: &Arc<Counters>, body: RespBody, send_timeout: Duration) -> Relayed {
    let (tx, rx) = mpsc::channel(FRAMES);
    let left = body.size_hint().exact();
    let counters = Arc::clone(counters);
    counters.bump(Counter::ResponsesRelayed);
    tokio::spawn(async move {
        let mut body = body;
        // One slot is held back for the error that ends a relay that gave up.
        let Ok(last) = tx.clone().reserve_owned().await else {
            return;
        };
        loop {
            let frame = std::future::poll_fn(|cx| Pin::new(&mut body).poll_frame(cx)).await;
            let item = match frame {
                None => return,
                Some(Ok(f)) => match f.into_data() {
                    Ok(d) if d.is_empty() => continue,
                    Ok(d) => Ok(d),
                    Err(_) => continue,
                },
                Some(Err(e)) => Err(e),
            };
            let failed = item.is_err();
            match tokio::time::timeout(send_timeout, tx.send(item)).await {
                // The body (and with it the upstream connection) is dropped: closed.
                Ok(Err(_)) => return,
                Ok(Ok(())) if failed => return,
                Ok(Ok(())) => {}
                Err(_) => {
                    counters.bump(Counter::LimitSendTimeout);
                    tracing::debug!("client took nothing within send_timeout: response ended");
                    last.send(Err(Box::new(SendTimeout)));
                    return;
                }
            }
        }
    });
    Relayed {
        rx,
        left,
        done: false,
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
            Poll::Ready(Some(Ok(d))) => {
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
