//! The sync's connections: TCP, TLS or a Unix socket as the URL says, read through a RESP
//! skimmer that cuts from a reply whatever would take it past [`Limits`] — before the client
//! library has buffered any of it. Neither a Redis server nor whoever can write to it (a
//! stream entry, a snapshot value, a presence member of hundreds of megabytes; an array
//! header announcing a billion elements) makes a node read or allocate without bound, and
//! none stalls the sync: the element cut is read as [`CUT`], which every reader refuses as
//! malformed, and the sync goes on past it.
//!
//! The skimmer follows RESP2 and RESP3 framing only (type byte, length or count line, bulk
//! bytes, nested aggregates); the library still parses every reply.

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
    /// Bytes of one string.
    pub(super) string: u64,
    /// Bumped for each element cut from a reply.
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
            let capped = Capped::new(io, limits);
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
    /// What was read from `io`, before the skimmer.
    raw: Box<[u8]>,
    /// What the skimmer passed on and the library has yet to read, from `taken`.
    out: Vec<u8>,
    taken: usize,
}

/// Bytes read from the transport at once.
const READ_CHUNK: usize = 16 * 1024;

impl Capped {
    fn new(io: Io, limits: &Limits) -> Capped {
        Capped {
            io,
            skim: Skimmer::new(limits),
            hits: Arc::clone(&limits.hits),
            raw: vec![0; READ_CHUNK].into_boxed_slice(),
            out: Vec::with_capacity(READ_CHUNK + 256),
            taken: 0,
        }
    }
}

impl AsyncRead for Capped {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let me = &mut *self;
        loop {
            if me.taken < me.out.len() {
                let n = (me.out.len() - me.taken).min(buf.remaining());
                buf.put_slice(&me.out[me.taken..me.taken + n]);
                me.taken += n;
                if me.taken == me.out.len() {
                    me.out.clear();
                    me.taken = 0;
                }
                return Poll::Ready(Ok(()));
            }
            let mut raw = ReadBuf::new(&mut me.raw);
            ready!(match &mut me.io {
                Io::Tcp(s) => Pin::new(s).poll_read(cx, &mut raw),
                Io::Tls(s) => Pin::new(s.as_mut()).poll_read(cx, &mut raw),
                Io::Unix(s) => Pin::new(s).poll_read(cx, &mut raw),
            })?;
            let got = raw.filled();
            if got.is_empty() {
                // The end of the stream.
                return Poll::Ready(Ok(()));
            }
            let cuts = me.skim.cuts;
            let res = me.skim.feed(got, &mut me.out);
            if me.skim.cuts > cuts {
                me.hits.fetch_add(me.skim.cuts - cuts, Ordering::Relaxed);
                crate::limited!(
                    10,
                    warn!(
                        bytes = me.skim.max_bytes,
                        elements = me.skim.max_elements,
                        string = me.skim.max_string,
                        "a redis reply held an element past the sync's bound: cut (read as malformed)"
                    )
                );
            }
            if let Err(e) = res {
                crate::limited!(10, warn!(error = %e, "redis connection closed"));
                return Poll::Ready(Err(io::Error::new(
                    io::ErrorKind::InvalidData,
                    e.to_string(),
                )));
            }
        }
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
    /// Not RESP.
    #[error("malformed redis reply: {0}")]
    Malformed(&'static str),
}

/// What stands in for an element cut from a reply: a bulk string no record, id, member or
/// number parses as, so that whatever read the element refuses it as malformed.
pub(crate) const CUT: &[u8] = b"\0palisade: cut, larger than the sync's reply bound";

/// Deepest nesting followed inside a cut element (whose levels cost a counter each).
const MAX_CUT_DEPTH: usize = 4096;

/// Longest length or count line, its type byte and CRLF included.
const MAX_HEADER: usize = 32;

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

/// Follows RESP framing byte by byte and passes each reply on, with every element that would
/// take the reply past a bound (a string longer than a record field may be, more bytes or
/// elements in all than the config implies, nesting past [`MAX_DEPTH`]) replaced by [`CUT`]
/// and its bytes dropped unread by the library.
struct Skimmer {
    at: At,
    /// Elements still due in each open aggregate, outermost first.
    open: Vec<u64>,
    /// Index in `open` of the aggregate being cut: everything inside it is dropped.
    cutting: Option<usize>,
    /// The length or count line being read (passed on once its fate is known).
    header: [u8; MAX_HEADER],
    header_len: usize,
    /// Bytes and elements of the current top-level reply passed on.
    bytes: u64,
    elements: u64,
    /// Elements the open aggregates passed on still owe (each will be passed, whole or as
    /// [`CUT`]): reserved, so that a reply never passes more than the bound in all.
    pending: u64,
    max_bytes: u64,
    max_elements: u64,
    max_string: u64,
    /// Elements cut so far.
    cuts: u64,
}

impl Skimmer {
    fn new(l: &Limits) -> Skimmer {
        Skimmer {
            at: At::Type,
            open: Vec::with_capacity(8),
            cutting: None,
            header: [0; MAX_HEADER],
            header_len: 0,
            bytes: 0,
            elements: 0,
            pending: 0,
            max_bytes: l.bytes,
            max_elements: l.elements,
            max_string: l.string,
            cuts: 0,
        }
    }

    /// Follows `data`, the next bytes of the connection, appending what the library may read
    /// of them to `out`.
    fn feed(&mut self, mut data: &[u8], out: &mut Vec<u8>) -> Result<(), Overrun> {
        while !data.is_empty() {
            let pass = self.cutting.is_none();
            let used = match self.at {
                At::Bulk(left) => {
                    let n = left.min(data.len() as u64);
                    if pass {
                        self.emit(&data[..n as usize], out);
                    }
                    self.at = if n == left {
                        self.element_done()
                    } else {
                        At::Bulk(left - n)
                    };
                    n as usize
                }
                At::Line => {
                    let (n, end) = match data.iter().position(|&b| b == b'\n') {
                        Some(i) => (i + 1, true),
                        None => (data.len(), false),
                    };
                    if pass {
                        // Lines are the server's own (status, error, number): never cut.
                        if self.bytes.saturating_add(n as u64) > self.max_bytes {
                            return Err(Overrun::Malformed("a line longer than the reply bound"));
                        }
                        self.emit(&data[..n], out);
                    }
                    if end {
                        self.at = self.element_done();
                    }
                    n
                }
                At::Type => {
                    let b = data[0];
                    self.at = match b {
                        b'$' | b'!' | b'=' | b'*' | b'~' | b'>' | b'%' | b'|' => {
                            self.header[0] = b;
                            self.header_len = 1;
                            At::Number {
                                kind: b,
                                neg: false,
                                value: 0,
                            }
                        }
                        b'+' | b'-' | b':' | b'_' | b'#' | b',' | b'(' => {
                            if pass {
                                self.elements += 1;
                                self.emit(&data[..1], out);
                            }
                            At::Line
                        }
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
                        if self.header_len == MAX_HEADER {
                            return Err(Overrun::Malformed("a length line too long"));
                        }
                        self.header[self.header_len] = b;
                        self.header_len += 1;
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
                                at = self.header(kind, *neg, *value, out)?;
                                break;
                            }
                            _ => return Err(Overrun::Malformed("not a number")),
                        }
                    }
                    self.at = at;
                    i
                }
            };
            data = &data[used..];
        }
        Ok(())
    }

    fn emit(&mut self, bytes: &[u8], out: &mut Vec<u8>) {
        self.bytes += bytes.len() as u64;
        out.extend_from_slice(bytes);
    }

    /// Passes [`CUT`] on in place of the element whose header was just read.
    fn emit_cut(&mut self, out: &mut Vec<u8>) {
        self.cuts += 1;
        self.elements += 1;
        let len = CUT.len().to_string();
        for part in [&b"$"[..], len.as_bytes(), b"\r\n", CUT, b"\r\n"] {
            self.emit(part, out);
        }
    }

    /// What follows a length or count line of `kind`, and what of it is passed on.
    fn header(&mut self, kind: u8, neg: bool, n: u64, out: &mut Vec<u8>) -> Result<At, Overrun> {
        let bulk = matches!(kind, b'$' | b'!' | b'=');
        if self.cutting.is_some() {
            // Inside a cut aggregate: followed, never passed on.
            return Ok(if neg {
                self.element_done()
            } else if bulk {
                At::Bulk(n.saturating_add(2))
            } else {
                self.open_aggregate(kind, n, MAX_CUT_DEPTH, false)?
            });
        }
        let header = self.header;
        let header = &header[..self.header_len];
        if neg {
            // A null (`$-1`, `*-1`).
            self.elements += 1;
            self.emit(header, out);
            return Ok(self.element_done());
        }
        if bulk {
            let whole = (header.len() as u64).saturating_add(n).saturating_add(2);
            if n > self.max_string || self.bytes.saturating_add(whole) > self.max_bytes {
                self.emit_cut(out);
                // Its bytes are read past unseen: a bulk cut alone, as an aggregate of one.
                self.open.push(1);
                self.cutting = Some(self.open.len() - 1);
                return Ok(At::Bulk(n.saturating_add(2)));
            }
            self.elements += 1;
            self.emit(header, out);
            return Ok(At::Bulk(n.saturating_add(2)));
        }
        let due = due(kind, n);
        // A top-level aggregate takes a slot of its own; a nested one's is reserved already.
        let slot = u64::from(self.open.is_empty());
        let promised = self
            .elements
            .saturating_add(self.pending)
            .saturating_add(slot)
            .saturating_add(due);
        if promised > self.max_elements || self.open.len() >= MAX_DEPTH {
            self.emit_cut(out);
            if due == 0 {
                return Ok(self.element_done());
            }
            let at = self.open_aggregate(kind, n, MAX_CUT_DEPTH, false)?;
            self.cutting = Some(self.open.len() - 1);
            return Ok(at);
        }
        self.elements += 1;
        self.emit(header, out);
        self.open_aggregate(kind, n, MAX_DEPTH, true)
    }

    /// Opens an aggregate of `kind` announcing `n`; `passed`: its elements will be passed on
    /// (reserved in `pending`).
    fn open_aggregate(
        &mut self,
        kind: u8,
        n: u64,
        depth: usize,
        passed: bool,
    ) -> Result<At, Overrun> {
        let due = due(kind, n);
        if due == 0 {
            return Ok(self.element_done());
        }
        if self.open.len() >= depth {
            return Err(Overrun::Malformed("nested too deep"));
        }
        self.open.push(due);
        if passed {
            self.pending += due;
        }
        Ok(At::Type)
    }

    /// Notes an element complete (and every aggregate it completes), and whether that
    /// completes a top-level reply.
    fn element_done(&mut self) -> At {
        while let Some(due) = self.open.last_mut() {
            *due -= 1;
            // A level outside a cut was reserved in `pending`.
            let at = self.open.len() - 1;
            if self.cutting.is_none_or(|c| at < c) {
                self.pending = self.pending.saturating_sub(1);
            }
            if self.open[at] > 0 {
                return At::Type;
            }
            self.open.pop();
            if self.cutting == Some(self.open.len()) {
                self.cutting = None;
            }
        }
        // A top-level reply ended: the next one's counts start over.
        self.bytes = 0;
        self.elements = 0;
        self.pending = 0;
        At::Type
    }
}

/// Elements an aggregate of `kind` announcing `n` holds.
fn due(kind: u8, n: u64) -> u64 {
    match kind {
        b'%' => n.saturating_mul(2),
        // An attribute's pairs, then the value they describe (an attribute of no pairs still
        // has it).
        b'|' => n.saturating_mul(2).saturating_add(1),
        _ => n,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use redis::Value;

    fn skim(bytes: u64, elements: u64, string: u64) -> Skimmer {
        Skimmer::new(&Limits {
            bytes,
            elements,
            string,
            hits: Arc::default(),
        })
    }

    /// Feeds `data` whole and then byte by byte; both must agree. What was passed on.
    fn both(s: &mut Skimmer, data: &[u8]) -> Result<Vec<u8>, Overrun> {
        let mut one = skim(s.max_bytes, s.max_elements, s.max_string);
        let mut whole = Vec::new();
        let whole = s.feed(data, &mut whole).map(|()| whole);
        let mut out = Vec::new();
        let mut bytewise = Ok(());
        for b in data {
            bytewise = one.feed(std::slice::from_ref(b), &mut out);
            if bytewise.is_err() {
                break;
            }
        }
        assert_eq!(
            whole,
            bytewise.map(|()| out),
            "whole and bytewise differ on {data:?}"
        );
        if whole.is_ok() {
            assert_eq!((s.at, &s.open, s.cuts), (one.at, &one.open, one.cuts));
        }
        whole
    }

    fn cut() -> Value {
        Value::BulkString(CUT.to_vec())
    }

    fn parse(out: &[u8]) -> Value {
        redis::parse_redis_value(out).unwrap()
    }

    #[test]
    fn replies_of_every_kind_pass_whole() {
        let mut s = skim(64, 16, 64);
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
            assert_eq!(both(&mut s, r).unwrap(), r);
            assert_eq!(
                (s.at, s.open.len(), s.bytes, s.elements, s.cuts),
                (At::Type, 0, 0, 0, 0)
            );
        }
    }

    #[test]
    fn elements_past_a_bound_are_cut_and_the_reply_keeps_its_shape() {
        // A string longer than a field may be, alone and inside an entry: cut, and the
        // reply after it passes whole.
        let mut s = skim(1 << 20, 100, 10);
        let mut r = b"$1000\r\n".to_vec();
        r.extend_from_slice(&[b'x'; 1000]);
        r.extend_from_slice(b"\r\n*2\r\n$4\r\n1-23\r\n*2\r\n$1\r\nd\r\n$20\r\n");
        r.extend_from_slice(&[b'y'; 20]);
        r.extend_from_slice(b"\r\n+OK\r\n");
        let out = both(&mut s, &r).unwrap();
        let (first, rest) = redis::parse_redis_value(&out)
            .map(|v| (v, out.len()))
            .unwrap();
        assert_eq!(first, cut());
        let tail = &out[5 + CUT.len().to_string().len() + CUT.len()..];
        assert_eq!(
            parse(tail),
            Value::Array(vec![
                Value::BulkString(b"1-23".to_vec()),
                Value::Array(vec![Value::BulkString(b"d".to_vec()), cut()]),
            ])
        );
        assert!(out.ends_with(b"+OK\r\n") && rest > 0);
        assert_eq!(s.cuts, 2);

        // An aggregate announcing more elements than the bound: cut whole (a billion
        // announced, a few sent and followed unseen), and the next reply passes.
        let mut r = b"*2\r\n:1\r\n*20\r\n".to_vec();
        r.extend_from_slice(&b":1\r\n".repeat(20));
        r.extend_from_slice(b"$2\r\nok\r\n");
        let out = both(&mut skim(1 << 20, 10, 100), &r).unwrap();
        let len = CUT.len().to_string();
        let cut_bytes = [&b"$"[..], len.as_bytes(), b"\r\n", CUT, b"\r\n"].concat();
        assert_eq!(
            out,
            [&b"*2\r\n:1\r\n"[..], &cut_bytes, b"$2\r\nok\r\n"].concat()
        );
        let out = both(&mut skim(1 << 20, 10, 100), b"*2000000000\r\n").unwrap();
        assert_eq!(parse(&out), cut());

        // Nested aggregates reserve what they owe: siblings that would take the reply past the
        // element bound are cut whole, and the reply never holds more than the bound.
        let mut r = b"*3\r\n".to_vec();
        for _ in 0..3 {
            r.extend_from_slice(b"*5\r\n");
            r.extend_from_slice(&b":1\r\n".repeat(5));
        }
        let out = both(&mut skim(1 << 20, 10, 100), &r).unwrap();
        let one = || Value::Int(1);
        assert_eq!(
            parse(&out),
            Value::Array(vec![
                Value::Array(vec![one(), one(), one(), one(), one()]),
                cut(),
                cut(),
            ])
        );

        // Many small strings that add up past the bound: the ones that no longer fit are cut.
        let mut r = b"*8\r\n".to_vec();
        for _ in 0..8 {
            r.extend_from_slice(b"$10\r\n0123456789\r\n");
        }
        let out = both(&mut skim(100, 100, 100), &r).unwrap();
        let Value::Array(items) = parse(&out) else {
            panic!("{out:?}")
        };
        assert_eq!(items.len(), 8);
        let kept = items.iter().take_while(|v| **v != cut()).count();
        assert!(
            kept >= 4 && items[kept..].iter().all(|v| *v == cut()),
            "{items:?}"
        );

        // Nesting past the bound: the deepest aggregate is cut.
        let mut r = b"*1\r\n".repeat(40);
        r.extend_from_slice(b":1\r\n");
        let out = both(&mut skim(1 << 20, 1 << 20, 100), &r).unwrap();
        let mut v = parse(&out);
        let mut depth = 0;
        while let Value::Array(mut a) = v {
            v = a.pop().unwrap();
            depth += 1;
        }
        assert_eq!((depth, v), (MAX_DEPTH, cut()));
    }

    #[test]
    fn what_is_no_resp_ends_the_connection() {
        assert!(both(&mut skim(100, 10, 100), b"HTTP/1.1 200").is_err());
        assert!(both(&mut skim(100, 10, 100), b"$1x\r\n").is_err());
        assert!(
            both(
                &mut skim(u64::MAX, 10, 100),
                b"$99999999999999999999999\r\n"
            )
            .is_err()
        );
        // A line that never ends.
        assert!(both(&mut skim(100, 10, 100), &[b'+'; 200]).is_err());
        // A length line that never ends.
        assert!(both(&mut skim(100, 10, 100), &[b'*'; 200]).is_err());
    }
}
