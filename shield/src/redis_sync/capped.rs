//! The sync's connections: TCP, TLS or a Unix socket as the URL says, read through a RESP
//! skimmer that ends the connection when one reply outgrows [`Limits`] — before the client
//! library has buffered more of it than that. Neither a Redis server nor whoever can write to
//! it (a stream entry, a snapshot value, a presence member of hundreds of megabytes; an array
//! header announcing a billion elements) makes a node read or allocate without bound.
//!
//! The skimmer follows RESP2 and RESP3 framing only (type byte, length or count line, bulk
//! bytes, nested aggregates) and copies nothing; the library still parses every reply.

use std::io;
use std::path::PathBuf;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::task::{Context, Poll, ready};
use std::time::Duration;

use redis::aio::MultiplexedConnection;
use redis::{ConnectionAddr, ConnectionInfo, IntoConnectionInfo, RedisError, RedisResult};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpStream, UnixStream};

/// Deepest nesting of aggregates accepted (the sync's own replies nest four deep).
const MAX_DEPTH: usize = 32;

/// How large one reply may be.
#[derive(Clone, Debug)]
pub(super) struct Limits {
    /// Bytes of one reply, framing included.
    pub(super) bytes: u64,
    /// Elements of one reply (each costs the library a value of some tens of bytes however
    /// short its framing).
    pub(super) elements: u64,
    /// Bumped for each reply that broke a bound (its connection then ends).
    pub(super) hits: Arc<AtomicU64>,
}

/// A Redis server or sentinel the sync connects to: where, with which credentials, and the
/// TLS client config for `rediss://`.
#[derive(Clone)]
pub(super) struct Server {
    info: ConnectionInfo,
    tls: Option<Arc<rustls::ClientConfig>>,
}

impl Server {
    /// The server `url` names; `tls` is required for `rediss://`.
    pub(super) fn new(
        url: &str,
        tls: Option<Arc<rustls::ClientConfig>>,
    ) -> Result<Server, RedisError> {
        let info = url.into_connection_info()?;
        match info.addr() {
            ConnectionAddr::TcpTls { insecure: true, .. } => {
                return Err(bad(
                    "#insecure (TLS without checking the server's name) is not supported",
                ));
            }
            ConnectionAddr::TcpTls { .. } if tls.is_none() => {
                return Err(bad("rediss:// without a TLS client config"));
            }
            _ => {}
        }
        Ok(Server { info, tls })
    }

    /// Opens a multiplexed connection (authenticated and on its database, as the URL says)
    /// whose replies `limits` bounds; connecting and the setup take at most `timeout`. The
    /// connection's I/O task lives as long as the [`Driver`] returned with it.
    pub(super) async fn open(
        &self,
        conf: redis::AsyncConnectionConfig,
        timeout: Duration,
        limits: &Limits,
    ) -> RedisResult<(MultiplexedConnection, Driver)> {
        let opening = async {
            let io = match self.info.addr() {
                ConnectionAddr::Tcp(host, port) => Io::Tcp(tcp(host, *port).await?),
                ConnectionAddr::TcpTls { host, port, .. } => {
                    let tls = self
                        .tls
                        .clone()
                        .ok_or_else(|| bad("no TLS client config"))?;
                    let name = rustls::pki_types::ServerName::try_from(unbracket(host).to_string())
                        .map_err(|e| bad_owned(format!("TLS server name {host:?}: {e}")))?;
                    let stream = tcp(host, *port).await?;
                    let tls = tokio_rustls::TlsConnector::from(tls)
                        .connect(name, stream)
                        .await?;
                    Io::Tls(Box::new(tls))
                }
                ConnectionAddr::Unix(path) => Io::Unix(unix(path).await?),
                other => return Err(bad_owned(format!("unsupported address {other}"))),
            };
            let capped = Capped {
                io,
                skim: Skimmer::new(limits),
                hits: Arc::clone(&limits.hits),
            };
            let (conn, driver) =
                MultiplexedConnection::new_with_config(self.info.redis_settings(), capped, conf)
                    .await?;
            // Aborted with its Driver: a connection dropped with a request unanswered (a
            // server gone silent) would otherwise keep its task and socket for ever.
            let task = tokio::spawn(driver);
            Ok((conn, Driver(task.abort_handle())))
        };
        match tokio::time::timeout(timeout, opening).await {
            Ok(r) => r,
            Err(_) => Err(RedisError::from(io::Error::new(
                io::ErrorKind::TimedOut,
                format!("not connected within {} ms", timeout.as_millis()),
            ))),
        }
    }
}

/// A connection's I/O task: aborted when this is dropped (the connection's handles then fail).
#[derive(Debug)]
pub(crate) struct Driver(tokio::task::AbortHandle);

impl Drop for Driver {
    fn drop(&mut self) {
        self.0.abort();
    }
}

fn bad(what: &'static str) -> RedisError {
    RedisError::from((
        redis::ErrorKind::InvalidClientConfig,
        "redis url",
        what.to_string(),
    ))
}

fn bad_owned(what: String) -> RedisError {
    RedisError::from((redis::ErrorKind::InvalidClientConfig, "redis url", what))
}

/// `host` without the brackets of an IPv6 literal.
fn unbracket(host: &str) -> &str {
    host.strip_prefix('[')
        .and_then(|h| h.strip_suffix(']'))
        .unwrap_or(host)
}

async fn tcp(host: &str, port: u16) -> io::Result<TcpStream> {
    let s = TcpStream::connect((unbracket(host), port)).await?;
    s.set_nodelay(true)?;
    Ok(s)
}

async fn unix(path: &PathBuf) -> io::Result<UnixStream> {
    UnixStream::connect(path).await
}

/// The transport under a connection.
enum Io {
    Tcp(TcpStream),
    Tls(Box<tokio_rustls::client::TlsStream<TcpStream>>),
    Unix(UnixStream),
}

/// A transport whose reads pass the skimmer.
struct Capped {
    io: Io,
    skim: Skimmer,
    hits: Arc<AtomicU64>,
}

impl AsyncRead for Capped {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let me = &mut *self;
        let before = buf.filled().len();
        ready!(match &mut me.io {
            Io::Tcp(s) => Pin::new(s).poll_read(cx, buf),
            Io::Tls(s) => Pin::new(s.as_mut()).poll_read(cx, buf),
            Io::Unix(s) => Pin::new(s).poll_read(cx, buf),
        })?;
        if let Err(e) = me.skim.feed(&buf.filled()[before..]) {
            // The bytes are withheld: the library never sees the reply's offending part.
            buf.set_filled(before);
            if e.is_bound() {
                me.hits.fetch_add(1, Ordering::Relaxed);
            }
            crate::limited!(10, warn!(error = %e, "redis connection closed"));
            return Poll::Ready(Err(io::Error::new(
                io::ErrorKind::InvalidData,
                e.to_string(),
            )));
        }
        Poll::Ready(Ok(()))
    }
}

impl AsyncWrite for Capped {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        match &mut self.io {
            Io::Tcp(s) => Pin::new(s).poll_write(cx, buf),
            Io::Tls(s) => Pin::new(s.as_mut()).poll_write(cx, buf),
            Io::Unix(s) => Pin::new(s).poll_write(cx, buf),
        }
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match &mut self.io {
            Io::Tcp(s) => Pin::new(s).poll_flush(cx),
            Io::Tls(s) => Pin::new(s.as_mut()).poll_flush(cx),
            Io::Unix(s) => Pin::new(s).poll_flush(cx),
        }
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match &mut self.io {
            Io::Tcp(s) => Pin::new(s).poll_shutdown(cx),
            Io::Tls(s) => Pin::new(s.as_mut()).poll_shutdown(cx),
            Io::Unix(s) => Pin::new(s).poll_shutdown(cx),
        }
    }
}

/// Why the skimmer ended a connection.
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
pub(super) enum Overrun {
    /// A reply passed the byte bound.
    #[error("a redis reply is larger than {0} bytes (the sync's bound for this config)")]
    Bytes(u64),
    /// A reply passed the element bound.
    #[error("a redis reply has more than {0} elements (the sync's bound for this config)")]
    Elements(u64),
    /// Aggregates nested too deep.
    #[error("a redis reply nests more than {MAX_DEPTH} levels deep")]
    Depth,
    /// Not RESP.
    #[error("malformed redis reply: {0}")]
    Malformed(&'static str),
}

impl Overrun {
    fn is_bound(&self) -> bool {
        !matches!(self, Overrun::Malformed(_))
    }
}

/// Where the skimmer is within a reply.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum At {
    /// Before an element's type byte.
    Type,
    /// In the rest of a line that carries nothing to count (`+`, `-`, `:`, `#`, ...).
    Line,
    /// In the number of a length or count line of type `kind`.
    Number { kind: u8, neg: bool, value: u64 },
    /// In the payload of a bulk element: this many bytes left, its CRLF included.
    Bulk(u64),
}

/// Follows RESP framing byte by byte, counting each top-level reply's bytes and elements.
struct Skimmer {
    at: At,
    /// Elements still due in each open aggregate, outermost first.
    open: Vec<u64>,
    bytes: u64,
    elements: u64,
    /// The bytes just followed ended a top-level reply.
    done: bool,
    max_bytes: u64,
    max_elements: u64,
}

impl Skimmer {
    fn new(l: &Limits) -> Skimmer {
        Skimmer {
            at: At::Type,
            open: Vec::with_capacity(8),
            bytes: 0,
            elements: 0,
            done: false,
            max_bytes: l.bytes,
            max_elements: l.elements,
        }
    }

    /// Follows `data`, the next bytes of the connection.
    fn feed(&mut self, mut data: &[u8]) -> Result<(), Overrun> {
        while !data.is_empty() {
            let used = match self.at {
                At::Bulk(left) => {
                    let n = left.min(data.len() as u64);
                    self.at = if n == left {
                        self.element_done()
                    } else {
                        At::Bulk(left - n)
                    };
                    n as usize
                }
                At::Line => match data.iter().position(|&b| b == b'\n') {
                    Some(i) => {
                        self.at = self.element_done();
                        i + 1
                    }
                    None => data.len(),
                },
                At::Type => {
                    self.elements += 1;
                    if self.elements > self.max_elements {
                        return Err(Overrun::Elements(self.max_elements));
                    }
                    self.at = match data[0] {
                        b'$' | b'!' | b'=' | b'*' | b'~' | b'>' | b'%' | b'|' => At::Number {
                            kind: data[0],
                            neg: false,
                            value: 0,
                        },
                        b'+' | b'-' | b':' | b'_' | b'#' | b',' | b'(' => At::Line,
                        _ => return Err(Overrun::Malformed("unknown type byte")),
                    };
                    1
                }
                At::Number { kind, neg, value } => {
                    let mut i = 0;
                    let mut at = At::Number { kind, neg, value };
                    while i < data.len() {
                        let b = data[i];
                        i += 1;
                        let At::Number { neg, value, .. } = &mut at else {
                            unreachable!()
                        };
                        match b {
                            b'0'..=b'9' => {
                                *value = value
                                    .checked_mul(10)
                                    .and_then(|v| v.checked_add(u64::from(b - b'0')))
                                    .ok_or(Overrun::Malformed("length out of range"))?;
                            }
                            b'-' if *value == 0 => *neg = true,
                            b'\r' | b' ' => {}
                            b'\n' => {
                                at = self.header(kind, *neg, *value)?;
                                break;
                            }
                            _ => return Err(Overrun::Malformed("not a number")),
                        }
                    }
                    self.at = at;
                    i
                }
            };
            self.bytes += used as u64;
            if self.bytes > self.max_bytes {
                return Err(Overrun::Bytes(self.max_bytes));
            }
            if self.done {
                // A top-level reply ended: the next one's counts start over.
                self.done = false;
                self.bytes = 0;
                self.elements = 0;
            }
            data = &data[used..];
        }
        Ok(())
    }

    /// What follows a length or count line.
    fn header(&mut self, kind: u8, neg: bool, n: u64) -> Result<At, Overrun> {
        if neg || (n == 0 && kind != b'|') {
            // A null (`$-1`, `*-1`), an empty string (its CRLF follows) or an empty aggregate
            // (an attribute of no pairs still has the value it describes).
            return Ok(match kind {
                b'$' | b'!' | b'=' if !neg => At::Bulk(2),
                _ => self.element_done(),
            });
        }
        let due = match kind {
            b'$' | b'!' | b'=' => {
                if n > self.max_bytes {
                    return Err(Overrun::Bytes(self.max_bytes));
                }
                return Ok(At::Bulk(n.saturating_add(2)));
            }
            b'%' => n.saturating_mul(2),
            // An attribute's pairs, then the value they describe.
            b'|' => n.saturating_mul(2).saturating_add(1),
            _ => n,
        };
        if self.elements.saturating_add(due) > self.max_elements {
            return Err(Overrun::Elements(self.max_elements));
        }
        if self.open.len() >= MAX_DEPTH {
            return Err(Overrun::Depth);
        }
        self.open.push(due);
        Ok(At::Type)
    }

    /// Notes an element complete (and every aggregate it completes), and whether that
    /// completes a top-level reply.
    fn element_done(&mut self) -> At {
        while let Some(due) = self.open.last_mut() {
            *due -= 1;
            if *due > 0 {
                return At::Type;
            }
            self.open.pop();
        }
        self.done = true;
        At::Type
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn skim(bytes: u64, elements: u64) -> Skimmer {
        Skimmer::new(&Limits {
            bytes,
            elements,
            hits: Arc::default(),
        })
    }

    /// Feeds `data` whole and then byte by byte; both must agree.
    fn both(s: &mut Skimmer, data: &[u8]) -> Result<(), Overrun> {
        let mut one = skim(s.max_bytes, s.max_elements);
        let whole = s.feed(data);
        let mut bytewise = Ok(());
        for b in data {
            bytewise = one.feed(std::slice::from_ref(b));
            if bytewise.is_err() {
                break;
            }
        }
        assert_eq!(whole, bytewise, "whole and bytewise differ on {data:?}");
        if whole.is_ok() {
            assert_eq!((s.at, &s.open), (one.at, &one.open));
        }
        whole
    }

    #[test]
    fn replies_of_every_kind_are_followed_to_their_end() {
        let mut s = skim(64, 16);
        // Each of these is one whole reply: the counts start over after each.
        for r in [
            &b"+OK\r\n"[..],
            b"-ERR no\r\n",
            b":42\r\n",
            b"$5\r\nhello\r\n",
            b"$0\r\n\r\n",
            b"$-1\r\n",
            b"*-1\r\n",
            b"*0\r\n",
            b"*2\r\n$1\r\na\r\n*1\r\n:1\r\n",
            b"%1\r\n+k\r\n*2\r\n_\r\n#t\r\n",
            b"|1\r\n+ttl\r\n:3\r\n$2\r\nab\r\n",
            // An attribute of no pairs still precedes its value; nulls and empties nested.
            b"|0\r\n:5\r\n",
            b"*3\r\n$-1\r\n*0\r\n%0\r\n",
            b"~2\r\n,1.5\r\n(12345\r\n",
            b">2\r\n$7\r\nmessage\r\n$1\r\nx\r\n",
            b"=8\r\ntxt:abcd\r\n",
        ] {
            both(&mut s, r).unwrap();
            assert_eq!(
                (s.at, s.open.len(), s.bytes, s.elements),
                (At::Type, 0, 0, 0)
            );
        }
    }

    #[test]
    fn a_reply_past_a_bound_is_refused_before_its_bytes_arrive() {
        // A bulk announcing more than the bound fails at its header.
        assert_eq!(
            both(&mut skim(100, 10), b"$1000\r\n"),
            Err(Overrun::Bytes(100))
        );
        // An aggregate announcing more elements than the bound fails at its header.
        assert_eq!(
            both(&mut skim(1 << 20, 10), b"*2000000000\r\n"),
            Err(Overrun::Elements(10))
        );
        assert_eq!(
            both(&mut skim(1 << 20, 10), b"%6\r\n"),
            Err(Overrun::Elements(10))
        );
        // Many small bulks that add up past the bound.
        let mut r = b"*8\r\n".to_vec();
        for _ in 0..8 {
            r.extend_from_slice(b"$10\r\n0123456789\r\n");
        }
        assert_eq!(both(&mut skim(100, 100), &r), Err(Overrun::Bytes(100)));
        // A line that never ends.
        assert_eq!(
            both(&mut skim(100, 10), &[b'+'; 200]),
            Err(Overrun::Bytes(100))
        );
        // Two replies each under the bound pass: the count starts over at each.
        let mut s = skim(40, 10);
        both(
            &mut s,
            b"$20\r\n01234567890123456789\r\n$20\r\n01234567890123456789\r\n",
        )
        .unwrap();
        // Deep nesting.
        assert_eq!(
            both(&mut skim(1 << 20, 1 << 20), &b"*1\r\n".repeat(40)),
            Err(Overrun::Depth)
        );
        // Not RESP.
        assert!(matches!(
            both(&mut skim(100, 10), b"HTTP/1.1 200"),
            Err(Overrun::Malformed(_))
        ));
        assert!(matches!(
            both(&mut skim(100, 10), b"$1x\r\n"),
            Err(Overrun::Malformed(_))
        ));
        assert!(matches!(
            both(&mut skim(u64::MAX, 10), b"$99999999999999999999999\r\n"),
            Err(Overrun::Malformed(_))
        ));
    }
}
