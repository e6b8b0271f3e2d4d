//! A small DNS client for tests: queries over UDP and TCP with timeouts, parsed with
//! hickory-proto, and raw sends for malformed input. Every wait is bounded.

use std::io::{self, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpStream, UdpSocket};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use hickory_proto::op::Message;

use crate::rng::Rng;
use crate::wire::{QueryOpts, RawMsg, build_query};

/// A response: its bytes, its hickory-proto parse and its raw header/OPT view.
#[derive(Debug, Clone)]
pub struct Reply {
    /// The message bytes.
    pub raw: Vec<u8>,
    /// The message parsed by hickory-proto.
    pub msg: Message,
    /// Header, question bytes and OPT read at the byte level.
    pub head: RawMsg,
    /// The query that was sent.
    pub query: Vec<u8>,
}

/// A query ID from a process-wide generator.
pub fn next_id() -> u16 {
    static RNG: Mutex<Option<Rng>> = Mutex::new(None);
    let mut g = RNG.lock().unwrap_or_else(|e| e.into_inner());
    g.get_or_insert_with(Rng::from_entropy).next_u64() as u16
}

/// Sends `msg` over UDP to `addr`; waits up to `timeout` for a reply with the same ID
/// (other datagrams are ignored, at most 64). `Ok(None)` when nothing came.
pub fn udp_exchange(
    addr: SocketAddr,
    msg: &[u8],
    timeout: Duration,
) -> io::Result<Option<Vec<u8>>> {
    let s = udp_socket(addr)?;
    s.send(msg)?;
    let want = (msg.len() >= 2).then(|| [msg[0], msg[1]]);
    let deadline = Instant::now() + timeout;
    let mut buf = vec![0u8; 65536];
    for _ in 0..64 {
        let Some(left) = deadline.checked_duration_since(Instant::now()) else {
            return Ok(None);
        };
        s.set_read_timeout(Some(left.max(Duration::from_millis(1))))?;
        match s.recv(&mut buf) {
            Ok(n) => {
                if want.is_none() || (n >= 2 && Some([buf[0], buf[1]]) == want) {
                    return Ok(Some(buf[..n].to_vec()));
                }
            }
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
                ) =>
            {
                return Ok(None);
            }
            // ICMP port unreachable: nobody listens (yet).
            Err(e) if e.kind() == io::ErrorKind::ConnectionRefused => return Ok(None),
            Err(e) => return Err(e),
        }
    }
    Ok(None)
}

/// Sends a datagram and returns whatever single datagram comes back within `timeout`
/// (any ID), or `None`.
pub fn udp_raw(addr: SocketAddr, msg: &[u8], timeout: Duration) -> io::Result<Option<Vec<u8>>> {
    let s = udp_socket(addr)?;
    s.send(msg)?;
    s.set_read_timeout(Some(timeout))?;
    let mut buf = vec![0u8; 65536];
    match s.recv(&mut buf) {
        Ok(n) => Ok(Some(buf[..n].to_vec())),
        Err(e)
            if matches!(
                e.kind(),
                io::ErrorKind::WouldBlock
                    | io::ErrorKind::TimedOut
                    | io::ErrorKind::ConnectionRefused
            ) =>
        {
            Ok(None)
        }
        Err(e) => Err(e),
    }
}

fn udp_socket(addr: SocketAddr) -> io::Result<UdpSocket> {
    let local: SocketAddr = if addr.is_ipv4() {
        "127.0.0.1:0".parse().expect("addr")
    } else {
        "[::1]:0".parse().expect("addr")
    };
    let s = UdpSocket::bind(local)?;
    s.connect(addr)?;
    Ok(s)
}

/// `msg` with its two-octet TCP length prefix.
pub fn frame(msg: &[u8]) -> Vec<u8> {
    let mut v = (msg.len() as u16).to_be_bytes().to_vec();
    v.extend_from_slice(msg);
    v
}

/// Connects to `addr` over TCP with a bounded wait.
pub fn tcp_connect(addr: SocketAddr, timeout: Duration) -> io::Result<TcpStream> {
    let s = TcpStream::connect_timeout(&addr, timeout)?;
    s.set_read_timeout(Some(timeout))?;
    s.set_write_timeout(Some(timeout))?;
    s.set_nodelay(true)?;
    Ok(s)
}

/// Reads one length-prefixed message; `Ok(None)` on a clean close before it.
pub fn tcp_read_msg(s: &mut TcpStream) -> io::Result<Option<Vec<u8>>> {
    let mut len = [0u8; 2];
    match s.read_exact(&mut len) {
        Ok(()) => {}
        Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => return Ok(None),
        Err(e) => return Err(e),
    }
    let mut m = vec![0u8; u16::from_be_bytes(len) as usize];
    s.read_exact(&mut m)?;
    Ok(Some(m))
}

/// Sends `msg` framed over a new TCP connection and reads one framed reply.
pub fn tcp_exchange(
    addr: SocketAddr,
    msg: &[u8],
    timeout: Duration,
) -> io::Result<Option<Vec<u8>>> {
    let mut s = tcp_connect(addr, timeout)?;
    s.write_all(&frame(msg))?;
    match tcp_read_msg(&mut s) {
        Ok(m) => Ok(m),
        Err(e)
            if matches!(
                e.kind(),
                io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
            ) =>
        {
            Ok(None)
        }
        Err(e) if e.kind() == io::ErrorKind::ConnectionReset => Ok(None),
        Err(e) => Err(e),
    }
}

/// What came back on a TCP connection after raw bytes were written.
#[derive(Debug, Clone, Default)]
pub struct TcpRaw {
    /// Every octet received (length-prefixed messages, if the server answered).
    pub received: Vec<u8>,
    /// The server closed (or reset) the connection.
    pub closed: bool,
}

impl TcpRaw {
    /// The complete length-prefixed messages in what was received.
    pub fn messages(&self) -> Vec<Vec<u8>> {
        let mut out = Vec::new();
        let mut p = 0;
        while p + 2 <= self.received.len() {
            let l = u16::from_be_bytes([self.received[p], self.received[p + 1]]) as usize;
            if p + 2 + l > self.received.len() {
                break;
            }
            out.push(self.received[p + 2..p + 2 + l].to_vec());
            p += 2 + l;
        }
        out
    }
}

/// Writes `bytes` as they are on a new TCP connection (half-closing it after when
/// `shutdown`), then reads until the server closes or `timeout` passes.
pub fn tcp_raw(
    addr: SocketAddr,
    bytes: &[u8],
    shutdown: bool,
    timeout: Duration,
) -> io::Result<TcpRaw> {
    let mut s = tcp_connect(addr, timeout)?;
    let mut out = TcpRaw::default();
    if let Err(e) = s.write_all(bytes) {
        // The server may close before reading everything.
        if matches!(
            e.kind(),
            io::ErrorKind::BrokenPipe | io::ErrorKind::ConnectionReset
        ) {
            out.closed = true;
            return Ok(out);
        }
        return Err(e);
    }
    if shutdown {
        let _ = s.shutdown(Shutdown::Write);
    }
    let deadline = Instant::now() + timeout;
    let mut buf = [0u8; 4096];
    for _ in 0..1024 {
        let Some(left) = deadline.checked_duration_since(Instant::now()) else {
            break;
        };
        s.set_read_timeout(Some(left.max(Duration::from_millis(1))))?;
        match s.read(&mut buf) {
            Ok(0) => {
                out.closed = true;
                break;
            }
            Ok(n) => out.received.extend_from_slice(&buf[..n]),
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
                ) =>
            {
                break;
            }
            Err(e) if e.kind() == io::ErrorKind::ConnectionReset => {
                out.closed = true;
                break;
            }
            Err(e) => return Err(e),
        }
    }
    Ok(out)
}

/// Sends `query` over UDP or TCP as `opts` says; parses the reply.
pub fn exchange(addr: SocketAddr, query: &[u8], opts: &QueryOpts) -> Result<Reply, String> {
    let got = if opts.tcp {
        tcp_exchange(addr, query, opts.timeout)
    } else {
        udp_exchange(addr, query, opts.timeout)
    };
    let raw = match got {
        Ok(Some(r)) => r,
        Ok(None) => {
            return Err(format!(
                "no reply from {addr} over {} within {:?}",
                if opts.tcp { "TCP" } else { "UDP" },
                opts.timeout
            ));
        }
        Err(e) => return Err(format!("exchange with {addr}: {e}")),
    };
    let head = RawMsg::parse(&raw).map_err(|e| format!("reply from {addr}: {e}"))?;
    let msg =
        Message::from_vec(&raw).map_err(|e| format!("reply from {addr} does not parse: {e}"))?;
    Ok(Reply {
        raw,
        msg,
        head,
        query: query.to_vec(),
    })
}

/// Queries `addr` for `name`/`qtype` (the name is sent in its exact case).
pub fn try_query(
    addr: SocketAddr,
    name: &str,
    qtype: u16,
    opts: &QueryOpts,
) -> Result<Reply, String> {
    let q = build_query(next_id(), name, qtype, opts);
    exchange(addr, &q, opts)
}

/// [`try_query`], panicking with the reason when there is no usable reply.
pub fn query_reply(addr: SocketAddr, name: &str, qtype: u16, opts: &QueryOpts) -> Reply {
    try_query(addr, name, qtype, opts)
        .unwrap_or_else(|e| panic!("query {name} {}: {e}", crate::wire::type_name(qtype)))
}

/// Queries `addr` for `name`/`qtype` and returns the parsed message; panics without one.
pub fn query(addr: SocketAddr, name: &str, qtype: u16, opts: &QueryOpts) -> Message {
    query_reply(addr, name, qtype, opts).msg
}

/// Sends `n` queries for www.example.com. from `src` to `server` without waiting for answers
/// (paced a little so that the kernel's queue never overflows).
pub fn send_queries_from(server: SocketAddr, src: &str, n: usize) {
    let s = UdpSocket::bind(SocketAddr::new(src.parse().expect("a source address"), 0))
        .expect("bind source");
    s.connect(server).expect("connect");
    for i in 0..n {
        s.send(&build_query(
            i as u16,
            "www.example.com.",
            1,
            &QueryOpts::edns(1232),
        ))
        .expect("send");
        if i % 50 == 49 {
            std::thread::sleep(Duration::from_millis(5));
        }
    }
}
