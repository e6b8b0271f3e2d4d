//! A small blocking HTTP/1.1 client for ClickHouse's HTTP interface (`http://`, or `https://`
//! verified against `ca_file` or the system's roots): one POST per connection, bounded waits,
//! bounded reply.

use std::io::{self, Read, Write};
use std::net::{TcpStream, ToSocketAddrs};
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use rustls::pki_types::ServerName;

/// Longest reply body read (ClickHouse's error texts and small query results).
const MAX_REPLY: usize = 4 << 20;

/// Where ClickHouse listens: `http[s]://host[:port][/path]`.
#[derive(Clone)]
pub(super) struct Endpoint {
    host: String,
    port: u16,
    path: String,
    auth: Option<String>,
    /// TLS (https): the client config and the name the certificate must carry.
    tls: Option<(Arc<rustls::ClientConfig>, ServerName<'static>)>,
}

impl std::fmt::Debug for Endpoint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{}://{}:{}{}",
            if self.tls.is_some() { "https" } else { "http" },
            self.host,
            self.port,
            self.path
        )
    }
}

/// A connection: plain or TLS.
enum Conn {
    Plain(TcpStream),
    Tls(Box<rustls::StreamOwned<rustls::ClientConnection, TcpStream>>),
}

impl Conn {
    fn socket(&self) -> &TcpStream {
        match self {
            Conn::Plain(s) => s,
            Conn::Tls(s) => s.get_ref(),
        }
    }

    /// Time left before `deadline`, set as the socket's read and write timeouts; an error once
    /// it passed.
    fn time_left(&self, deadline: Instant, timeout: Duration) -> io::Result<()> {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(io::Error::new(
                io::ErrorKind::TimedOut,
                format!("no reply within {} ms", timeout.as_millis()),
            ));
        }
        self.socket().set_read_timeout(Some(left))?;
        self.socket().set_write_timeout(Some(left))
    }

    /// Writes all of `buf` before `deadline` (a server that reads slowly runs out the whole
    /// request's time, not a timeout per write).
    fn write_all_by(
        &mut self,
        mut buf: &[u8],
        deadline: Instant,
        timeout: Duration,
    ) -> io::Result<()> {
        while !buf.is_empty() {
            self.time_left(deadline, timeout)?;
            match self.write(&buf[..buf.len().min(64 * 1024)]) {
                Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
                Ok(n) => buf = &buf[n..],
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        self.time_left(deadline, timeout)?;
        self.flush()
    }

    /// Reads a reply until it is whole by its framing (or the server closes), at most `cap`
    /// bytes, before `deadline`.
    fn read_reply_by(
        &mut self,
        raw: &mut Vec<u8>,
        cap: usize,
        deadline: Instant,
        timeout: Duration,
    ) -> io::Result<()> {
        let mut buf = [0u8; 16 * 1024];
        loop {
            self.time_left(deadline, timeout)?;
            match self.read(&mut buf) {
                Ok(0) => return Ok(()),
                Ok(n) => {
                    raw.extend_from_slice(&buf[..n.min(cap - raw.len())]);
                    if raw.len() >= cap || framed_whole(raw) {
                        return Ok(());
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
    }
}

impl Read for Conn {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        match self {
            Conn::Plain(s) => s.read(buf),
            Conn::Tls(s) => s.read(buf),
        }
    }
}

impl Write for Conn {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        match self {
            Conn::Plain(s) => s.write(buf),
            Conn::Tls(s) => s.write(buf),
        }
    }
    fn flush(&mut self) -> io::Result<()> {
        match self {
            Conn::Plain(s) => s.flush(),
            Conn::Tls(s) => s.flush(),
        }
    }
}

/// The TLS client config for https endpoints: `ca_file`'s certificates, else the system's roots.
fn tls_config(ca_file: Option<&Path>) -> Result<Arc<rustls::ClientConfig>, String> {
    let roots = match ca_file {
        Some(p) => {
            let pem = std::fs::read(p).map_err(|e| format!("ca_file {}: {e}", p.display()))?;
            crate::tls_roots::roots(Some((p, &pem))).map_err(|e| format!("ca_file {e}"))?
        }
        None => crate::tls_roots::roots(None).map_err(|e| format!("https: {e}"))?,
    };
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let cfg = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| e.to_string())?
        .with_root_certificates(roots)
        .with_no_client_auth();
    Ok(Arc::new(cfg))
}

/// A reply: status and body (de-chunked).
#[derive(Debug)]
pub(super) struct Reply {
    pub status: u16,
    pub body: Vec<u8>,
    /// The head carries ClickHouse's own headers (`X-ClickHouse-*`, sent with every reply
    /// of its HTTP interface): without them, a 200 is some other server's.
    pub from_clickhouse: bool,
}

impl Endpoint {
    /// Parses `url` (`http://` or `https://`) with optional basic-auth credentials; an https
    /// endpoint verifies the server against `ca_file` (else the system's roots); plain http
    /// ignores it.
    pub fn parse(
        url: &str,
        user: Option<&str>,
        password: Option<&str>,
        ca_file: Option<&Path>,
    ) -> Result<Self, String> {
        let (rest, https) = match (url.strip_prefix("http://"), url.strip_prefix("https://")) {
            (Some(r), _) => (r, false),
            (_, Some(r)) => (r, true),
            _ => return Err(format!("{url}: an http:// or https:// URL")),
        };

        let (hostport, path) = match rest.find('/') {
            Some(i) => (&rest[..i], &rest[i..]),
            None => (rest, "/"),
        };
        if hostport.contains('@') {
            return Err(format!("{url}: put credentials in user and password"));
        }
        let (host, port) = if let Some(h) = hostport.strip_prefix('[') {
            let (h, p) = h
                .split_once(']')
                .ok_or_else(|| format!("{url}: unclosed [ in host"))?;
            (h.to_string(), p.strip_prefix(':'))
        } else {
            match hostport.rsplit_once(':') {
                Some((h, p)) => (h.to_string(), Some(p)),
                None => (hostport.to_string(), None),
            }
        };
        if host.is_empty() {
            return Err(format!("{url}: no host"));
        }
        let port = match port {
            Some(p) => p.parse().map_err(|_| format!("{url}: bad port {p:?}"))?,
            None if https => 8443,
            None => 8123,
        };
        let tls = if https {
            let name = ServerName::try_from(host.clone())
                .map_err(|e| format!("{url}: {e}"))?
                .to_owned();
            Some((
                tls_config(ca_file).map_err(|e| format!("{url}: {e}"))?,
                name,
            ))
        } else {
            None
        };
        let auth = match (user, password) {
            (None, None) => None,
            (u, p) => Some(base64(
                format!("{}:{}", u.unwrap_or("default"), p.unwrap_or("")).as_bytes(),
            )),
        };
        Ok(Endpoint {
            host,
            port,
            path: path.to_string(),
            auth,
            tls,
        })
    }

    /// POSTs `body` (already gzipped when `gzip`), with `query` as the URL's query parameter when given.
    pub fn post(
        &self,
        query: Option<&str>,
        body: &[u8],
        gzip: bool,
        timeout: Duration,
    ) -> io::Result<Reply> {
        self.post_tracked(query, body, gzip, timeout, &mut false)
    }

    /// As [`post`](Self::post); `sent` is set once the whole request went out (a failure
    /// after that may have been carried out by the server).
    pub fn post_tracked(
        &self,
        query: Option<&str>,
        body: &[u8],
        gzip: bool,
        timeout: Duration,
        sent_all: &mut bool,
    ) -> io::Result<Reply> {
        // One deadline for the whole request, connection and TLS handshake included: a server
        // that trickles its handshake, its reading or its reply a byte at a time must not
        // hold the writer longer than `timeout`.
        let deadline = Instant::now() + timeout;
        let mut s = self
            .connect(deadline, timeout)
            .map_err(|e| timed_out(e, "not connected", timeout))?;
        let mut head = Vec::with_capacity(256 + query.map_or(0, |q| q.len() * 3));
        head.extend_from_slice(b"POST ");
        head.extend_from_slice(self.path.as_bytes());
        if let Some(q) = query {
            head.extend_from_slice(if self.path.contains('?') { b"&" } else { b"?" });
            head.extend_from_slice(b"query=");
            url_encode(&mut head, q);
        }
        let host = if self.host.contains(':') {
            format!("[{}]", self.host)
        } else {
            self.host.clone()
        };
        let _ = write!(
            head,
            " HTTP/1.1\r\nHost: {host}:{}\r\nUser-Agent: palisade-shield\r\nContent-Length: {}\r\nConnection: close\r\n",
            self.port,
            body.len()
        );
        if gzip {
            head.extend_from_slice(b"Content-Encoding: gzip\r\n");
        }
        if let Some(a) = &self.auth {
            head.extend_from_slice(b"Authorization: Basic ");
            head.extend_from_slice(a.as_bytes());
            head.extend_from_slice(b"\r\n");
        }
        head.extend_from_slice(b"\r\n");
        let sent = s
            .write_all_by(&head, deadline, timeout)
            .and_then(|()| s.write_all_by(body, deadline, timeout));
        *sent_all = sent.is_ok();
        // The server may answer (an early error) and close before taking the whole body:
        // its reply, when there is one, says more than the write error. A reply is whole by
        // its framing: a server that keeps the connection open after it is not waited for.
        let mut raw = Vec::new();
        let read = s.read_reply_by(&mut raw, MAX_REPLY + 64 * 1024, deadline, timeout);
        match parse_reply(&raw) {
            Some(r) => Ok(r),
            None => {
                sent.map_err(|e| timed_out(e, "request not sent", timeout))?;
                read.map_err(|e| timed_out(e, "no reply", timeout))?;
                Err(io::Error::new(
                    io::ErrorKind::InvalidData,
                    "incomplete HTTP reply",
                ))
            }
        }
    }

    /// Connects (and for https, completes the handshake) before `deadline`.
    fn connect(&self, deadline: Instant, timeout: Duration) -> io::Result<Conn> {
        let left = || {
            let l = deadline.saturating_duration_since(Instant::now());
            if l.is_zero() {
                return Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    format!("not connected within {} ms", timeout.as_millis()),
                ));
            }
            Ok(l)
        };
        let mut last = None;
        for a in (self.host.as_str(), self.port).to_socket_addrs()? {
            match TcpStream::connect_timeout(&a, left()?) {
                Ok(s) => {
                    s.set_nodelay(true)?;
                    let Some((cfg, name)) = &self.tls else {
                        return Ok(Conn::Plain(s));
                    };
                    let conn = rustls::ClientConnection::new(Arc::clone(cfg), name.clone())
                        .map_err(io::Error::other)?;
                    let mut tls = rustls::StreamOwned::new(conn, s);
                    // Step by step (`complete_io` reads on while bytes trickle in): each
                    // read and write gets only what is left of the deadline.
                    let (conn, sock) = (&mut tls.conn, &mut tls.sock);
                    while conn.is_handshaking() || conn.wants_write() {
                        let l = left()?;
                        sock.set_read_timeout(Some(l))?;
                        sock.set_write_timeout(Some(l))?;
                        if conn.wants_write() {
                            conn.write_tls(sock)?;
                            continue;
                        }
                        if conn.read_tls(sock)? == 0 {
                            return Err(io::Error::new(
                                io::ErrorKind::UnexpectedEof,
                                "closed in the TLS handshake",
                            ));
                        }
                        if let Err(e) = conn.process_new_packets() {
                            // Its alert goes out, best effort.
                            let _ = conn.write_tls(sock);
                            return Err(io::Error::new(io::ErrorKind::InvalidData, e));
                        }
                    }
                    return Ok(Conn::Tls(Box::new(tls)));
                }
                Err(e) => last = Some(e),
            }
        }
        Err(last.unwrap_or_else(|| io::Error::other(format!("{}: no address", self.host))))
    }
}

/// A socket timeout (EAGAIN under SO_RCVTIMEO or SO_SNDTIMEO) said as the request's timeout
/// (`what` within `timeout`); other errors as they are.
fn timed_out(e: io::Error, what: &str, timeout: Duration) -> io::Error {
    match e.kind() {
        io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut => io::Error::new(
            io::ErrorKind::TimedOut,
            format!("{what} within {} ms", timeout.as_millis()),
        ),
        _ => e,
    }
}

/// What a reply's head says: its status, whether chunked, its Content-Length, where its
/// body starts, whether ClickHouse's own headers are there.
struct Head {
    status: u16,
    chunked: bool,
    length: Option<usize>,
    at: usize,
    from_clickhouse: bool,
}

/// A reply's final head: interim 1xx heads (100 Continue from an intermediary) are passed
/// over, as RFC 9110 §15.2 asks of a client.
fn parse_head(raw: &[u8]) -> Option<Head> {
    let mut base = 0;
    loop {
        let end = base + raw[base..].windows(4).position(|w| w == b"\r\n\r\n")?;
        let head = std::str::from_utf8(&raw[base..end]).ok()?;
        let mut lines = head.split("\r\n");
        let status: u16 = lines.next()?.split(' ').nth(1)?.parse().ok()?;
        if (100..200).contains(&status) && status != 101 {
            base = end + 4;
            continue;
        }
        let mut h = Head {
            status,
            chunked: false,
            length: None,
            at: end + 4,
            from_clickhouse: false,
        };
        for l in lines {
            let (k, v) = l.split_once(':')?;
            let v = v.trim();
            if k.eq_ignore_ascii_case("transfer-encoding") && v.eq_ignore_ascii_case("chunked") {
                h.chunked = true;
            } else if k.eq_ignore_ascii_case("content-length") {
                h.length = v.parse::<usize>().ok();
            } else if k
                .as_bytes()
                .get(..13)
                .is_some_and(|p| p.eq_ignore_ascii_case(b"x-clickhouse-"))
            {
                h.from_clickhouse = true;
            }
        }
        return Some(h);
    }
}

/// True when `raw` holds a whole reply by its framing (chunked or Content-Length); one
/// delimited by the connection's close is whole only then.
fn framed_whole(raw: &[u8]) -> bool {
    match parse_head(raw) {
        Some(Head {
            chunked: true, at, ..
        }) => dechunk(&raw[at..]).is_some(),
        Some(Head {
            chunked: false,
            length: Some(n),
            at,
            ..
        }) => raw.len() - at >= n,
        _ => false,
    }
}

/// Parses a whole HTTP/1.1 reply (status line, headers, body plain or chunked).
fn parse_reply(raw: &[u8]) -> Option<Reply> {
    let Head {
        status,
        chunked,
        length,
        at,
        from_clickhouse,
    } = parse_head(raw)?;
    let rest = &raw[at..];
    let body = if chunked {
        dechunk(rest)?
    } else {
        match length {
            Some(n) if rest.len() >= n => rest[..n].to_vec(),
            Some(_) => return None,
            None => rest.to_vec(),
        }
    };
    Some(Reply {
        status,
        body: body[..body.len().min(MAX_REPLY)].to_vec(),
        from_clickhouse,
    })
}

fn dechunk(mut b: &[u8]) -> Option<Vec<u8>> {
    let mut out = Vec::new();
    loop {
        let nl = b.windows(2).position(|w| w == b"\r\n")?;
        let size = std::str::from_utf8(&b[..nl]).ok()?;
        let size = usize::from_str_radix(size.split(';').next()?.trim(), 16).ok()?;
        b = &b[nl + 2..];
        if size == 0 {
            return Some(out);
        }
        if b.len() < size + 2 {
            // A reply cut at MAX_REPLY: keep what came.
            out.extend_from_slice(&b[..size.min(b.len())]);
            return (out.len() >= MAX_REPLY).then_some(out);
        }
        out.extend_from_slice(&b[..size]);
        b = &b[size + 2..];
    }
}

fn url_encode(out: &mut Vec<u8>, s: &str) {
    const HEX: &[u8; 16] = b"0123456789ABCDEF";
    for &c in s.as_bytes() {
        if c.is_ascii_alphanumeric() || matches!(c, b'-' | b'_' | b'.' | b'~') {
            out.push(c);
        } else {
            out.extend_from_slice(&[b'%', HEX[(c >> 4) as usize], HEX[(c & 15) as usize]]);
        }
    }
}

fn base64(b: &[u8]) -> String {
    const A: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::with_capacity(b.len().div_ceil(3) * 4);
    for c in b.chunks(3) {
        let n = (u32::from(c[0]) << 16)
            | (u32::from(*c.get(1).unwrap_or(&0)) << 8)
            | u32::from(*c.get(2).unwrap_or(&0));
        for i in 0..4 {
            if i <= c.len() {
                out.push(A[(n >> (18 - 6 * i) & 63) as usize] as char);
            } else {
                out.push('=');
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_parse() {
        let e = Endpoint::parse("http://127.0.0.1:18123", None, None, None).unwrap();
        assert_eq!(
            (e.host.as_str(), e.port, e.path.as_str()),
            ("127.0.0.1", 18123, "/")
        );
        let e = Endpoint::parse("http://[::1]/ch/", Some("u"), Some("p"), None).unwrap();
        assert_eq!(
            (e.host.as_str(), e.port, e.path.as_str()),
            ("::1", 8123, "/ch/")
        );
        assert_eq!(e.auth.as_deref(), Some("dTpw"));
        assert!(Endpoint::parse("ftp://x", None, None, None).is_err());
        assert!(Endpoint::parse("http://:80", None, None, None).is_err());
        let ca = std::path::Path::new("/nonexistent/ca.pem");
        let e = Endpoint::parse("https://x", None, None, Some(ca)).unwrap_err();
        assert!(e.contains("ca_file /nonexistent/ca.pem"), "{e}");
    }

    #[test]
    fn replies_parse_plain_and_chunked() {
        let r = parse_reply(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok").unwrap();
        assert_eq!((r.status, r.body.as_slice()), (200, &b"ok"[..]));
        let r = parse_reply(
            b"HTTP/1.1 500 Internal Server Error\r\nTransfer-Encoding: chunked\r\n\r\n4\r\nCode\r\n3\r\n: 1\r\n0\r\n\r\n",
        )
        .unwrap();
        assert_eq!((r.status, r.body.as_slice()), (500, &b"Code: 1"[..]));
        assert!(parse_reply(b"HTTP/1.1 200 OK\r\nContent-Length: 9\r\n\r\nok").is_none());
    }

    #[test]
    fn encodings() {
        assert_eq!(base64(b"default:"), "ZGVmYXVsdDo=");
        assert_eq!(base64(b"ab"), "YWI=");
        let mut o = Vec::new();
        url_encode(&mut o, "INSERT INTO a.b FORMAT JSONEachRow");
        assert_eq!(o, b"INSERT%20INTO%20a.b%20FORMAT%20JSONEachRow");
    }
}
