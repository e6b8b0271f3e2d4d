//! DNS over TLS (RFC 7858), zone transfers over TLS (RFC 9103) and DNS over QUIC (RFC 9250)
//! served here: the certificate pair of `[server] tls_cert`/`tls_key`, read at start and
//! again on every reload (a bad pair is refused with its file names and the last good one
//! keeps serving; the QUIC endpoints take the new pair too), and the handshake counters.

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use arc_swap::ArcSwap;
use rustls::ServerConfig;
use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;

/// The TLS side of the TCP server and of the QUIC endpoints: their settings, swapped whole
/// on reload.
pub struct DotTls {
    config: ArcSwap<ServerConfig>,
    /// The pair, for the QUIC endpoints' settings.
    pair: ArcSwap<CertifiedKey>,
    /// The QUIC endpoints and their transport settings.
    quic: std::sync::Mutex<(Vec<quinn::Endpoint>, Option<Arc<quinn::TransportConfig>>)>,
    /// QUIC handshakes completed, failed, not done in time.
    pub quic_handshakes: [AtomicU64; 3],
    /// QUIC clients asked to prove their address first (handshakes under way at the bound).
    pub quic_retries: AtomicU64,
    /// A second handle on each QUIC endpoint's socket (quinn reads it): its kernel drops.
    quic_sockets: std::sync::Mutex<Vec<std::net::UdpSocket>>,
    /// Handshakes completed.
    pub handshakes: AtomicU64,
    /// Handshakes that failed (a client that is not speaking TLS, a protocol error...).
    pub handshake_failures: AtomicU64,
    /// Handshakes not done within the idle time.
    pub handshake_timeouts: AtomicU64,
    /// Reloads whose pair was refused (the last good one kept).
    pub reload_failures: AtomicU64,
}

impl DotTls {
    /// Keeps a handle on a QUIC endpoint's socket, whose kernel drops the metrics read.
    pub fn watch_quic_socket(&self, sock: &std::net::UdpSocket) {
        if let Ok(s) = sock.try_clone() {
            self.quic_sockets
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .push(s);
        }
    }

    /// Datagrams the kernel dropped on the QUIC sockets' full receive queues (SO_MEMINFO's
    /// drops: quinn reads them, without SO_RXQ_OVFL).
    fn quic_kernel_drops(&self) -> u64 {
        use std::os::fd::AsRawFd as _;
        let socks = self.quic_sockets.lock().unwrap_or_else(|e| e.into_inner());
        socks
            .iter()
            .map(|s| {
                let mut info = [0u32; 16];
                let mut len = std::mem::size_of_val(&info) as libc::socklen_t;
                // SAFETY: `info` is writable for `len` bytes, the fd is our own handle.
                let r = unsafe {
                    libc::getsockopt(
                        s.as_raw_fd(),
                        libc::SOL_SOCKET,
                        libc::SO_MEMINFO,
                        info.as_mut_ptr().cast(),
                        &mut len,
                    )
                };
                if r == 0 && len as usize > libc::SK_MEMINFO_DROPS as usize * 4 {
                    u64::from(info[libc::SK_MEMINFO_DROPS as usize])
                } else {
                    0
                }
            })
            .sum()
    }

    /// Why the pair serving now is not valid today (expired, not yet valid), if it is not.
    pub fn validity_warning(&self, cert: &Path) -> Option<String> {
        shield::tls_pair::out_of_validity(
            &self.pair.load(),
            (shield::clock::unix_ms() / 1000) as i64,
        )
        .map(|why| format!("server.tls_cert {}: the certificate {why}", cert.display()))
    }

    /// The settings of the pair `cert`/`key`, or why it cannot serve (naming the file).
    pub fn load(cert: &Path, key: &Path) -> Result<Arc<DotTls>, String> {
        let ck = Arc::new(shield::tls_pair::load_pair(cert, key).map_err(|e| e.to_string())?);
        Ok(Arc::new(DotTls {
            config: ArcSwap::from(settings(&ck)?),
            pair: ArcSwap::from(ck),
            quic: Default::default(),
            quic_handshakes: Default::default(),
            quic_retries: AtomicU64::new(0),
            quic_sockets: std::sync::Mutex::new(Vec::new()),
            handshakes: AtomicU64::new(0),
            handshake_failures: AtomicU64::new(0),
            handshake_timeouts: AtomicU64::new(0),
            reload_failures: AtomicU64::new(0),
        }))
    }

    /// Reads the pair again (the files `cert`/`key` now name): on success new handshakes use
    /// it; on failure the last good pair keeps serving and the error is returned.
    pub fn reload(&self, cert: &Path, key: &Path) -> Result<(), String> {
        let read = shield::tls_pair::load_pair(cert, key)
            .map_err(|e| e.to_string())
            .map(Arc::new)
            .and_then(|ck| Ok((settings(&ck)?, ck)));
        match read {
            Ok((c, ck)) => {
                self.config.store(c);
                let q = self.quic.lock().unwrap_or_else(|e| e.into_inner());
                if let Some(t) = &q.1 {
                    let sc = quic_settings(&ck, t.clone())?;
                    for e in &q.0 {
                        e.set_server_config(Some(sc.clone()));
                    }
                }
                self.pair.store(ck);
                Ok(())
            }
            Err(e) => {
                self.reload_failures.fetch_add(1, Ordering::Relaxed);
                Err(e)
            }
        }
    }

    /// The QUIC server settings of the pair now in force, with `transport` (the idle time,
    /// the streams at once).
    pub fn quic_config(
        &self,
        transport: Arc<quinn::TransportConfig>,
    ) -> Result<quinn::ServerConfig, String> {
        quic_settings(&self.pair.load_full(), transport)
    }

    /// Keeps `e`'s settings following the pair on reload.
    pub fn follow(&self, e: quinn::Endpoint, transport: Arc<quinn::TransportConfig>) {
        let mut q = self.quic.lock().unwrap_or_else(|e| e.into_inner());
        q.0.push(e);
        q.1 = Some(transport);
    }

    /// What a new connection's handshake uses.
    pub fn acceptor(&self) -> tokio_rustls::TlsAcceptor {
        tokio_rustls::TlsAcceptor::from(self.config.load_full())
    }
}

/// Server settings for a pair: TLS 1.2 and 1.3, ALPN `dot` (RFC 7858 §3.2, RFC 9103 §7.1),
/// and clients without ALPN accepted too (kdig, older stubs).
fn settings(ck: &Arc<CertifiedKey>) -> Result<Arc<ServerConfig>, String> {
    let mut c = ServerConfig::builder_with_provider(shield::tls_pair::provider().clone())
        .with_safe_default_protocol_versions()
        .map_err(|e| e.to_string())?
        .with_no_client_auth()
        .with_cert_resolver(Arc::new(One(ck.clone())));
    c.alpn_protocols = vec![b"dot".to_vec()];
    Ok(Arc::new(c))
}

/// QUIC server settings for a pair: TLS 1.3 (QUIC's), ALPN `doq` required (RFC 9250 §4.1.1).
fn quic_settings(
    ck: &Arc<CertifiedKey>,
    transport: Arc<quinn::TransportConfig>,
) -> Result<quinn::ServerConfig, String> {
    let mut c = ServerConfig::builder_with_provider(shield::tls_pair::provider().clone())
        .with_protocol_versions(&[&rustls::version::TLS13])
        .map_err(|e| e.to_string())?
        .with_no_client_auth()
        .with_cert_resolver(Arc::new(One(ck.clone())));
    c.alpn_protocols = vec![b"doq".to_vec()];
    let crypto = quinn::crypto::rustls::QuicServerConfig::try_from(c).map_err(|e| e.to_string())?;
    let mut sc = quinn::ServerConfig::with_crypto(Arc::new(crypto));
    sc.transport_config(transport);
    // No migration: a connection stays at the address its handshake proved. With it, packets
    // of a connection sent from a forged address moved the connection there, and the queries
    // after them counted as proven from that address (an escalation then blocked whomever the
    // forger named). A client whose address changes opens a new connection, as over TCP.
    sc.migration(false);
    Ok(sc)
}

/// The one pair, whatever the client names.
#[derive(Debug)]
struct One(Arc<CertifiedKey>);

impl ResolvesServerCert for One {
    fn resolve(&self, _: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        Some(self.0.clone())
    }
}

/// Handshakes and reloads of the TLS listeners.
impl shield::metrics::Source for DotTls {
    fn collect(&self, out: &mut shield::metrics::Samples) {
        for (what, c) in [
            ("ok", &self.handshakes),
            ("failed", &self.handshake_failures),
            ("timeout", &self.handshake_timeouts),
        ] {
            out.counter(
                format!("tls.handshakes.{what}"),
                "dnsd_tls_handshakes_total",
                format!("result=\"{what}\""),
                "TLS handshakes on the DNS over TLS listeners, by result.",
                c.load(Ordering::Relaxed),
            );
        }
        for (i, what) in ["ok", "failed", "timeout"].into_iter().enumerate() {
            out.counter(
                format!("quic.handshakes.{what}"),
                "dnsd_quic_handshakes_total",
                format!("result=\"{what}\""),
                "QUIC handshakes on the DNS over QUIC endpoints, by result.",
                self.quic_handshakes[i].load(Ordering::Relaxed),
            );
        }
        out.counter(
            "quic.kernel_drops",
            "dnsd_quic_kernel_drops_total",
            "",
            "Datagrams the kernel dropped on the DNS over QUIC sockets' full receive queues.",
            self.quic_kernel_drops(),
        );
        out.counter(
            "quic.retries",
            "dnsd_quic_retries_total",
            "",
            "QUIC clients asked to prove their address (a Retry) because too many handshakes were under way.",
            self.quic_retries.load(Ordering::Relaxed),
        );
        if let Some((_, not_after, _)) = shield::tls_pair::leaf_validity(&self.pair.load()) {
            out.gauge(
                "tls.cert_not_after",
                "dnsd_tls_cert_not_after_seconds",
                "",
                "The end of the serving DoT/DoQ certificate's validity, in Unix seconds.",
                not_after.max(0) as u64,
            );
        }
        out.counter(
            "tls.reload_failures",
            "dnsd_tls_reload_failures_total",
            "",
            "Reloads whose tls_cert/tls_key pair was refused (the last good pair kept serving).",
            self.reload_failures.load(Ordering::Relaxed),
        );
    }
}
