//! A DNS over TLS client (rustls, verifying against a test CA): framed queries on one
//! connection, from a chosen loopback source.

use std::io::{Read, Write};
use std::net::{IpAddr, SocketAddr, TcpStream};
use std::sync::Arc;
use std::time::Duration;

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName};

/// A TLS connection to a DNS over TLS server.
pub struct DotConn {
    tls: rustls::StreamOwned<rustls::ClientConnection, TcpStream>,
}

/// A TCP connection to `addr` from `src` (any source when `None`).
pub fn tcp_from(src: Option<IpAddr>, addr: SocketAddr) -> std::io::Result<TcpStream> {
    let s = socket2::Socket::new(
        socket2::Domain::for_address(addr),
        socket2::Type::STREAM,
        None,
    )?;
    if let Some(ip) = src {
        s.bind(&SocketAddr::new(ip, 0).into())?;
    }
    s.connect_timeout(&addr.into(), Duration::from_secs(5))?;
    let s: TcpStream = s.into();
    s.set_read_timeout(Some(Duration::from_secs(5)))?;
    s.set_write_timeout(Some(Duration::from_secs(5)))?;
    Ok(s)
}

impl DotConn {
    /// Connects from `src` to `addr` and handshakes, verifying the server's certificate
    /// for `name` against the CA `ca_pem`, offering ALPN `dot`.
    pub fn connect(
        src: Option<IpAddr>,
        addr: SocketAddr,
        ca_pem: &str,
        name: &str,
    ) -> Result<DotConn, String> {
        let mut roots = rustls::RootCertStore::empty();
        for c in CertificateDer::pem_slice_iter(ca_pem.as_bytes()) {
            roots
                .add(c.map_err(|e| e.to_string())?)
                .map_err(|e| e.to_string())?;
        }
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let mut cfg = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(|e| e.to_string())?
            .with_root_certificates(roots)
            .with_no_client_auth();
        cfg.alpn_protocols = vec![b"dot".to_vec()];
        let sn = ServerName::try_from(name.to_string()).map_err(|e| e.to_string())?;
        let mut conn =
            rustls::ClientConnection::new(Arc::new(cfg), sn).map_err(|e| e.to_string())?;
        let mut sock = tcp_from(src, addr).map_err(|e| e.to_string())?;
        while conn.is_handshaking() {
            conn.complete_io(&mut sock).map_err(|e| e.to_string())?;
        }
        Ok(DotConn {
            tls: rustls::StreamOwned::new(conn, sock),
        })
    }

    /// Sets the socket's receive buffer to about `bytes` (a small one makes a server that
    /// writes more than the client has read find its socket full).
    pub fn set_receive_buffer(&self, bytes: usize) -> std::io::Result<()> {
        socket2::SockRef::from(&self.tls.sock).set_recv_buffer_size(bytes)
    }

    /// The ALPN protocol the server chose.
    pub fn alpn(&self) -> Option<Vec<u8>> {
        self.tls.conn.alpn_protocol().map(<[u8]>::to_vec)
    }

    /// The server's leaf certificate (DER).
    pub fn leaf(&self) -> Option<Vec<u8>> {
        self.tls
            .conn
            .peer_certificates()
            .and_then(|c| c.first())
            .map(|c| c.to_vec())
    }

    /// Sends one framed message.
    pub fn send(&mut self, msg: &[u8]) -> std::io::Result<()> {
        let mut f = (msg.len() as u16).to_be_bytes().to_vec();
        f.extend_from_slice(msg);
        self.tls.write_all(&f)?;
        self.tls.flush()
    }

    /// The next framed message; `None` when the server closed the connection.
    pub fn recv(&mut self) -> std::io::Result<Option<Vec<u8>>> {
        let mut len = [0u8; 2];
        match self.tls.read_exact(&mut len) {
            Ok(()) => {}
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::UnexpectedEof | std::io::ErrorKind::ConnectionReset
                ) =>
            {
                return Ok(None);
            }
            Err(e) => return Err(e),
        }
        let mut m = vec![0u8; u16::from_be_bytes(len) as usize];
        self.tls.read_exact(&mut m)?;
        Ok(Some(m))
    }

    /// One query, its reply.
    pub fn exchange(&mut self, msg: &[u8]) -> std::io::Result<Option<Vec<u8>>> {
        self.send(msg)?;
        self.recv()
    }
}
