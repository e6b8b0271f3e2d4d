//! DNS over TLS (RFC 7858) and zone transfers over TLS (RFC 9103) served here: the
//! certificate pair of `[server] tls_cert`/`tls_key`, read at start and again on every
//! reload (a bad pair is refused with its file names and the last good one keeps serving),
//! and the handshake counters.

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use arc_swap::ArcSwap;
use rustls::ServerConfig;
use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;

/// The TLS side of the TCP server: its settings, swapped whole on reload.
pub struct DotTls {
    config: ArcSwap<ServerConfig>,
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
    /// The settings of the pair `cert`/`key`, or why it cannot serve (naming the file).
    pub fn load(cert: &Path, key: &Path) -> Result<Arc<DotTls>, String> {
        Ok(Arc::new(DotTls {
            config: ArcSwap::from(settings(cert, key)?),
            handshakes: AtomicU64::new(0),
            handshake_failures: AtomicU64::new(0),
            handshake_timeouts: AtomicU64::new(0),
            reload_failures: AtomicU64::new(0),
        }))
    }

    /// Reads the pair again (the files `cert`/`key` now name): on success new handshakes use
    /// it; on failure the last good pair keeps serving and the error is returned.
    pub fn reload(&self, cert: &Path, key: &Path) -> Result<(), String> {
        match settings(cert, key) {
            Ok(c) => {
                self.config.store(c);
                Ok(())
            }
            Err(e) => {
                self.reload_failures.fetch_add(1, Ordering::Relaxed);
                Err(e)
            }
        }
    }

    /// What a new connection's handshake uses.
    pub fn acceptor(&self) -> tokio_rustls::TlsAcceptor {
        tokio_rustls::TlsAcceptor::from(self.config.load_full())
    }
}

/// Server settings for a pair: TLS 1.2 and 1.3, ALPN `dot` (RFC 7858 §3.2, RFC 9103 §7.1),
/// and clients without ALPN accepted too (kdig, older stubs).
fn settings(cert: &Path, key: &Path) -> Result<Arc<ServerConfig>, String> {
    let ck = shield::tls_pair::load_pair(cert, key).map_err(|e| e.to_string())?;
    let mut c = ServerConfig::builder_with_provider(shield::tls_pair::provider().clone())
        .with_safe_default_protocol_versions()
        .map_err(|e| e.to_string())?
        .with_no_client_auth()
        .with_cert_resolver(Arc::new(One(Arc::new(ck))));
    c.alpn_protocols = vec![b"dot".to_vec()];
    Ok(Arc::new(c))
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
        out.counter(
            "tls.reload_failures",
            "dnsd_tls_reload_failures_total",
            "",
            "Reloads whose tls_cert/tls_key pair was refused (the last good pair kept serving).",
            self.reload_failures.load(Ordering::Relaxed),
        );
    }
}
