//! TLS to origins (`[[upstream]] protocol = "https"` or `"h2"`): the client settings of one
//! upstream — its roots (`ca_file`, else the system's), its client certificate, ALPN, and
//! its own session cache (so that resumption tickets stay with the upstream that issued
//! them) — and the causes a handshake fails for, counted for `/metrics`. A failure is a 502;
//! nothing falls back to cleartext.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use rustls::{AlertDescription, CertificateError};
use sha2::{Digest, Sha256};
use shield::metrics::{Samples, Source};

/// One upstream's TLS settings, checked and built at config load.
#[derive(Clone)]
pub struct OriginTls {
    /// `tls_server_name`: sent as SNI and verified; none: each server's address is verified (no SNI).
    pub server_name: Option<ServerName<'static>>,
    /// `ca_file` (none: the system's roots).
    pub ca_file: Option<PathBuf>,
    /// `client_cert`, `client_key`.
    pub client_cert: Option<(PathBuf, PathBuf)>,
    /// The rustls client settings with ALPN `http/1.1` (session cache included).
    pub h1: Arc<rustls::ClientConfig>,
    /// The same with ALPN `h2`, for `protocol = "h2"` (WebSockets still go over `h1`).
    pub h2: Option<Arc<rustls::ClientConfig>>,
    /// Over the files' contents: a reload with changed files builds new settings.
    digest: [u8; 32],
}

impl std::fmt::Debug for OriginTls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OriginTls")
            .field("server_name", &self.server_name)
            .field("ca_file", &self.ca_file)
            .field("client_cert", &self.client_cert)
            .finish_non_exhaustive()
    }
}

impl PartialEq for OriginTls {
    fn eq(&self, o: &Self) -> bool {
        self.server_name == o.server_name
            && self.ca_file == o.ca_file
            && self.client_cert == o.client_cert
            && self.digest == o.digest
            && self.h2.is_some() == o.h2.is_some()
    }
}

/// Which key an error is about.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Key {
    /// `ca_file`.
    CaFile,
    /// `client_cert`.
    ClientCert,
    /// `client_key`.
    ClientKey,
    /// `tls_server_name`.
    ServerName,
}

impl OriginTls {
    /// Reads and checks the files; `h2`: settings for HTTP/2 too.
    pub fn build(
        h2: bool,
        server_name: Option<&str>,
        ca_file: Option<&Path>,
        client: Option<(&Path, &Path)>,
    ) -> Result<OriginTls, (Key, String)> {
        let mut digest = Sha256::new();
        let server_name = server_name
            .map(|n| {
                ServerName::try_from(n.to_string())
                    .map_err(|e| (Key::ServerName, format!("{n:?}: {e}")))
            })
            .transpose()?;
        let roots = match ca_file {
            Some(p) => {
                let pem =
                    std::fs::read(p).map_err(|e| (Key::CaFile, format!("{}: {e}", p.display())))?;
                digest.update(&pem);
                shield::tls_roots::roots(Some((p, &pem)))
            }
            None => shield::tls_roots::roots(None),
        }
        .map_err(|e| (Key::CaFile, e))?;
        let builder = rustls::ClientConfig::builder_with_provider(Arc::clone(super::provider()))
            .with_safe_default_protocol_versions()
            .expect("ring supports the default protocol versions")
            .with_root_certificates(roots);
        let mut config = match client {
            None => builder.with_no_client_auth(),
            Some((c, k)) => {
                let cb = std::fs::read(c)
                    .map_err(|e| (Key::ClientCert, format!("{}: {e}", c.display())))?;
                let kb = std::fs::read(k)
                    .map_err(|e| (Key::ClientKey, format!("{}: {e}", k.display())))?;
                digest.update(&cb);
                digest.update(&kb);
                let chain: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(&cb)
                    .collect::<Result<_, _>>()
                    .map_err(|e| (Key::ClientCert, format!("{}: {e}", c.display())))?;
                if chain.is_empty() {
                    return Err((
                        Key::ClientCert,
                        format!("{}: no CERTIFICATE in the file", c.display()),
                    ));
                }
                let key = PrivateKeyDer::from_pem_slice(&kb)
                    .map_err(|e| (Key::ClientKey, format!("{}: {e}", k.display())))?;
                builder
                    .with_client_auth_cert(chain, key)
                    .map_err(|e| (Key::ClientKey, format!("{}: {e}", k.display())))?
            }
        };
        config.alpn_protocols = vec![b"http/1.1".to_vec()];
        // One session cache for both: the clone shares it.
        let h2 = h2.then(|| {
            let mut c = config.clone();
            c.alpn_protocols = vec![b"h2".to_vec()];
            Arc::new(c)
        });
        Ok(OriginTls {
            h2,
            server_name,
            ca_file: ca_file.map(Path::to_path_buf),
            client_cert: client.map(|(c, k)| (c.to_path_buf(), k.to_path_buf())),
            h1: Arc::new(config),
            digest: digest.finalize().into(),
        })
    }
}

/// Why a TLS connection to an origin failed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(usize)]
pub enum Cause {
    /// Its certificate is not from a trusted root (self-signed, another CA).
    UnknownIssuer,
    /// Its certificate does not name the server name (or address) we asked for.
    WrongName,
    /// Its certificate expired or is not valid yet.
    Expired,
    /// Another certificate problem (bad encoding, revoked, wrong usage).
    BadCertificate,
    /// The origin refused us (asked for a client certificate we do not have, or refused ours).
    RefusedByOrigin,
    /// The origin did not agree to the protocol (ALPN `h2` for `protocol = "h2"`).
    Alpn,
    /// Anything else in the handshake (protocol versions, ciphers, a reset).
    Handshake,
}

const CAUSES: [(Cause, &str); 7] = [
    (Cause::UnknownIssuer, "unknown_issuer"),
    (Cause::WrongName, "wrong_name"),
    (Cause::Expired, "expired"),
    (Cause::BadCertificate, "bad_certificate"),
    (Cause::RefusedByOrigin, "refused_by_origin"),
    (Cause::Alpn, "alpn"),
    (Cause::Handshake, "handshake"),
];

static FAILURES: [AtomicU64; 7] = [const { AtomicU64::new(0) }; 7];
static HANDSHAKES: AtomicU64 = AtomicU64::new(0);
static RESUMED: AtomicU64 = AtomicU64::new(0);

impl Cause {
    /// The cause of a failed handshake whose error is `e`.
    pub fn of(e: &std::io::Error) -> Cause {
        let Some(r) = e.get_ref().and_then(|i| i.downcast_ref::<rustls::Error>()) else {
            return Cause::Handshake;
        };
        match r {
            rustls::Error::InvalidCertificate(c) => match c {
                CertificateError::UnknownIssuer => Cause::UnknownIssuer,
                CertificateError::NotValidForName
                | CertificateError::NotValidForNameContext { .. } => Cause::WrongName,
                CertificateError::Expired
                | CertificateError::ExpiredContext { .. }
                | CertificateError::NotValidYet
                | CertificateError::NotValidYetContext { .. } => Cause::Expired,
                _ => Cause::BadCertificate,
            },
            rustls::Error::AlertReceived(
                AlertDescription::CertificateRequired
                | AlertDescription::BadCertificate
                | AlertDescription::UnknownCA
                | AlertDescription::AccessDenied
                | AlertDescription::CertificateUnknown,
            ) => Cause::RefusedByOrigin,
            rustls::Error::NoApplicationProtocol
            | rustls::Error::AlertReceived(AlertDescription::NoApplicationProtocol) => Cause::Alpn,
            _ => Cause::Handshake,
        }
    }

    /// Counts one failure of this cause.
    pub fn count(self) {
        FAILURES[self as usize].fetch_add(1, Ordering::Relaxed);
    }

    /// Its label value.
    pub fn name(self) -> &'static str {
        CAUSES[self as usize].1
    }
}

/// Counts a completed handshake (`resumed`: by a session ticket or id).
pub fn count_handshake(resumed: bool) {
    HANDSHAKES.fetch_add(1, Ordering::Relaxed);
    if resumed {
        RESUMED.fetch_add(1, Ordering::Relaxed);
    }
}

/// `/metrics` of origin TLS: handshakes, resumed ones, failures by cause.
pub struct OriginTlsStats;

impl Source for OriginTlsStats {
    fn collect(&self, out: &mut Samples) {
        out.counter(
            "upstream_tls.handshakes",
            "http_front_upstream_tls_handshakes_total",
            "resumed=\"no\"",
            "TLS handshakes with origins completed, fresh or resumed.",
            HANDSHAKES.load(Ordering::Relaxed) - RESUMED.load(Ordering::Relaxed),
        );
        out.counter(
            "upstream_tls.handshakes_resumed",
            "http_front_upstream_tls_handshakes_total",
            "resumed=\"yes\"",
            "TLS handshakes with origins completed, fresh or resumed.",
            RESUMED.load(Ordering::Relaxed),
        );
        for (c, name) in CAUSES {
            out.counter(
                format!("upstream_tls.failed.{name}"),
                "http_front_upstream_tls_failures_total",
                format!("cause=\"{name}\""),
                "TLS handshakes with origins that failed (each a 502), by cause.",
                FAILURES[c as usize].load(Ordering::Relaxed),
            );
        }
    }
}
