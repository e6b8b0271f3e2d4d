//! The client side's exchanges: one query over UDP, framed messages over a TCP connection
//! (or TLS over it, for a `tls:` primary), each bounded in time.

use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};

use super::XfrError;

fn timeout(peer: SocketAddr, t: Duration) -> XfrError {
    XfrError::Timeout {
        peer,
        secs: t.as_secs().max(1),
    }
}

/// Sends `msg` over UDP to `to` (from `from`, else the routing table's choice) and waits up
/// to `timeout` for the answer with its ID.
pub async fn udp_exchange(
    to: SocketAddr,
    from: Option<IpAddr>,
    msg: &[u8],
    limit: Duration,
) -> Result<Vec<u8>, XfrError> {
    let io = |source| XfrError::Io { peer: to, source };
    let local: SocketAddr = match from {
        Some(ip) => SocketAddr::new(ip, 0),
        None if to.is_ipv4() => "0.0.0.0:0".parse().expect("addr"),
        None => "[::]:0".parse().expect("addr"),
    };
    let s = tokio::net::UdpSocket::bind(local).await.map_err(io)?;
    s.connect(to).await.map_err(io)?;
    s.send(msg).await.map_err(io)?;
    let mut buf = vec![0u8; 65535];
    let deadline = tokio::time::Instant::now() + limit;
    loop {
        let n = tokio::time::timeout_at(deadline, s.recv(&mut buf))
            .await
            .map_err(|_| timeout(to, limit))?
            .map_err(io)?;
        if n >= 12 && buf[..2] == msg[..2] && buf[2] & 0x80 != 0 {
            buf.truncate(n);
            return Ok(buf);
        }
    }
}

/// A TCP connection to `to` (from `from`, else the routing table's choice) within `limit`,
/// Nagle off.
async fn tcp_connect(
    to: SocketAddr,
    from: Option<IpAddr>,
    limit: Duration,
) -> Result<tokio::net::TcpStream, XfrError> {
    let io = |source| XfrError::Io { peer: to, source };
    let connect = async {
        match from {
            None => tokio::net::TcpStream::connect(to).await,
            Some(ip) => {
                let s = if ip.is_ipv4() {
                    tokio::net::TcpSocket::new_v4()?
                } else {
                    tokio::net::TcpSocket::new_v6()?
                };
                s.bind(SocketAddr::new(ip, 0))?;
                s.connect(to).await
            }
        }
    };
    let s = tokio::time::timeout(limit, connect)
        .await
        .map_err(|_| timeout(to, limit))?
        .map_err(io)?;
    let _ = s.set_nodelay(true);
    Ok(s)
}

/// A byte stream to a primary: TCP, or TLS over TCP.
trait Stream: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send {}
impl<T: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send> Stream for T {}

/// A TCP (or TLS) connection to a primary: framed messages, each read with a timeout.
pub struct TcpClient {
    s: Box<dyn Stream>,
    peer: SocketAddr,
    timeout: Duration,
}

impl TcpClient {
    /// Connects to `primary` of the zone `p` within `limit` (which also bounds each later
    /// read): over TLS, verified by the zone's `transfer_tls`, for a `tls:` primary (never
    /// falling back to cleartext).
    pub async fn open(
        p: &super::ZonePolicy,
        primary: super::policy::Primary,
        from: Option<IpAddr>,
        limit: Duration,
    ) -> Result<TcpClient, XfrError> {
        if !primary.tls {
            return TcpClient::connect(primary.addr, from, limit).await;
        }
        let peer = primary.addr;
        let tls = |msg: String| XfrError::Tls { peer, msg };
        let xot = match &p.xot {
            Some(Ok(x)) => x.clone(),
            Some(Err(e)) => return Err(tls(e.clone())),
            None => return Err(tls("the zone has no transfer_tls".into())),
        };
        let tcp = tcp_connect(peer, from, limit).await?;
        let s = tokio::time::timeout(limit, xot.handshake(peer, tcp))
            .await
            .map_err(|_| timeout(peer, limit))?
            .map_err(|e| tls(e.to_string()))?;
        Ok(TcpClient {
            s: Box::new(s),
            peer,
            timeout: limit,
        })
    }

    /// Connects to `to` (from `from`) within `timeout` (which also bounds each later read).
    pub async fn connect(
        to: SocketAddr,
        from: Option<IpAddr>,
        limit: Duration,
    ) -> Result<TcpClient, XfrError> {
        Ok(TcpClient {
            s: Box::new(tcp_connect(to, from, limit).await?),
            peer: to,
            timeout: limit,
        })
    }

    /// Sends one message.
    pub async fn send(&mut self, msg: &[u8]) -> Result<(), XfrError> {
        let mut v = Vec::with_capacity(msg.len() + 2);
        v.extend_from_slice(&(msg.len() as u16).to_be_bytes());
        v.extend_from_slice(msg);
        let peer = self.peer;
        tokio::time::timeout(self.timeout, self.s.write_all(&v))
            .await
            .map_err(|_| timeout(peer, self.timeout))?
            .map_err(|source| XfrError::Io { peer, source })
    }

    /// Reads one message into `buf` as a transfer's part: its length within `first`, then
    /// its body within `grace` plus its length at `rate` bytes per second (0: within the
    /// connection's timeout alone). `Ok(false)` when a bound passed.
    pub async fn recv_at_rate(
        &mut self,
        buf: &mut Vec<u8>,
        first: Duration,
        grace: Duration,
        rate: u64,
    ) -> Result<bool, XfrError> {
        let peer = self.peer;
        let io = |source| XfrError::Io { peer, source };
        let mut len = [0u8; 2];
        match tokio::time::timeout(first.min(self.timeout), self.s.read_exact(&mut len)).await {
            Err(_) => return Ok(false),
            Ok(r) => r.map_err(io)?,
        };
        let n = u16::from_be_bytes(len) as usize;
        buf.resize(n, 0);
        let body = match rate {
            0 => self.timeout,
            r => grace + Duration::from_secs_f64(n as f64 / r as f64),
        };
        match tokio::time::timeout(body.min(self.timeout), self.s.read_exact(buf)).await {
            Err(_) => Ok(false),
            Ok(r) => r.map(|_| true).map_err(io),
        }
    }

    /// Reads one message into `buf`, the whole of it within the connection's timeout.
    pub async fn recv(&mut self, buf: &mut Vec<u8>) -> Result<(), XfrError> {
        let (peer, limit) = (self.peer, self.timeout);
        let r = self.recv_at_rate(buf, limit, Duration::ZERO, 0);
        match tokio::time::timeout(limit, r).await {
            Ok(Ok(true)) => Ok(()),
            Ok(Ok(false)) | Err(_) => Err(timeout(peer, limit)),
            Ok(Err(e)) => Err(e),
        }
    }
}
