//! The client side of zone transfers over TLS (XoT, RFC 9103): a zone's `transfer_tls`
//! made into rustls settings — the primary's certificate checked against a name (WebPKI,
//! `ca_file` or the system's roots) and/or its key against pins (the SHA-256 of its
//! SubjectPublicKeyInfo), ALPN `dot`, an optional client certificate, sessions resumed.

use std::net::SocketAddr;
use std::sync::Arc;

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::client::{ClientConfig, WebPkiServerVerifier};
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{CertificateError, DigitallySignedStruct, Error, SignatureScheme};
use sha2::Digest;
use tokio::net::TcpStream;

use crate::config::transfer::TransferTls;

/// How one zone's `tls:` primaries are reached: its rustls settings and the name asked.
#[derive(Debug)]
pub struct XotClient {
    config: Arc<ClientConfig>,
    /// The name verified and sent as SNI; `None`: the primary's address (no SNI).
    name: Option<ServerName<'static>>,
}

impl XotClient {
    /// The settings `t` describes, or why they cannot be used (a file that does not read).
    pub fn new(t: &TransferTls) -> Result<XotClient, String> {
        t.check()
            .map_err(|(f, m)| format!("transfer_tls.{f}: {m}"))?;
        let provider = shield::tls_pair::provider().clone();
        let webpki = match &t.name {
            Some(_) => {
                let ca = match &t.ca_file {
                    Some(p) => Some((
                        p.as_path(),
                        std::fs::read(p).map_err(|e| format!("{}: {e}", p.display()))?,
                    )),
                    None => None,
                };
                let roots = shield::tls_roots::roots(ca.as_ref().map(|(p, b)| (*p, &b[..])))?;
                Some(
                    WebPkiServerVerifier::builder_with_provider(Arc::new(roots), provider.clone())
                        .build()
                        .map_err(|e| e.to_string())?,
                )
            }
            None => None,
        };
        let verifier = Arc::new(Verifier {
            webpki,
            pins: t.pins()?,
            provider: provider.clone(),
        });
        let builder = ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(|e| e.to_string())?
            .dangerous()
            .with_custom_certificate_verifier(verifier);
        let mut config = match (&t.client_cert, &t.client_key) {
            (Some(c), Some(k)) => {
                let ck = shield::tls_pair::load_pair(c, k).map_err(|e| e.to_string())?;
                builder
                    .with_client_auth_cert(ck.cert.clone(), load_key(k)?)
                    .map_err(|e| format!("{}: {e}", k.display()))?
            }
            _ => builder.with_no_client_auth(),
        };
        // RFC 9103 §7.1: XoT uses DoT's ALPN.
        config.alpn_protocols = vec![b"dot".to_vec()];
        let name = match &t.name {
            Some(n) => Some(
                ServerName::try_from(n.clone()).map_err(|e| format!("transfer_tls.name: {e}"))?,
            ),
            None => None,
        };
        Ok(XotClient {
            config: Arc::new(config),
            name,
        })
    }

    /// Runs the handshake on `tcp`, a connection to `peer`.
    pub async fn handshake(
        &self,
        peer: SocketAddr,
        tcp: TcpStream,
    ) -> std::io::Result<tokio_rustls::client::TlsStream<TcpStream>> {
        let name = self
            .name
            .clone()
            .unwrap_or_else(|| ServerName::IpAddress(peer.ip().into()));
        tokio_rustls::TlsConnector::from(self.config.clone())
            .connect(name, tcp)
            .await
    }
}

fn load_key(k: &std::path::Path) -> Result<rustls::pki_types::PrivateKeyDer<'static>, String> {
    use rustls::pki_types::pem::PemObject;
    rustls::pki_types::PrivateKeyDer::from_pem_file(k).map_err(|e| format!("{}: {e}", k.display()))
}

/// The SHA-256 of a DER certificate's SubjectPublicKeyInfo (its key pin), when it parses.
pub fn spki_sha256(der: &[u8]) -> Option<[u8; 32]> {
    let (_, c) = x509_parser::parse_x509_certificate(der).ok()?;
    Some(sha2::Sha256::digest(c.tbs_certificate.subject_pki.raw).into())
}

/// Checks the name (when one is set) and the pins (when some are).
#[derive(Debug)]
struct Verifier {
    webpki: Option<Arc<WebPkiServerVerifier>>,
    pins: Vec<[u8; 32]>,
    provider: Arc<rustls::crypto::CryptoProvider>,
}

impl ServerCertVerifier for Verifier {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, Error> {
        if let Some(w) = &self.webpki {
            w.verify_server_cert(end_entity, intermediates, server_name, ocsp, now)?;
        }
        if !self.pins.is_empty() {
            let pin = spki_sha256(end_entity)
                .ok_or(Error::InvalidCertificate(CertificateError::BadEncoding))?;
            if !self.pins.contains(&pin) {
                return Err(Error::InvalidCertificate(
                    CertificateError::ApplicationVerificationFailure,
                ));
            }
        }
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, Error> {
        rustls::crypto::verify_tls12_signature(
            message,
            cert,
            dss,
            &self.provider.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, Error> {
        rustls::crypto::verify_tls13_signature(
            message,
            cert,
            dss,
            &self.provider.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.provider
            .signature_verification_algorithms
            .supported_schemes()
    }
}
