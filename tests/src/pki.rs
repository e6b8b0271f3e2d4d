//! A test certificate authority (rcgen, ECDSA P-256) and a TLS client (rustls) that reports
//! which certificate and OCSP response a server chose, whatever the name it was given.

use std::net::{SocketAddr, TcpStream};
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rcgen::{BasicConstraints, CertificateParams, CertifiedIssuer, DnType, IsCa, KeyPair};
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::CryptoProvider;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{DigitallySignedStruct, SignatureScheme};

/// A certificate authority for one test.
pub struct Ca {
    issuer: CertifiedIssuer<'static, KeyPair>,
}

/// A leaf certificate and its key, PEM.
#[derive(Clone, Debug)]
pub struct Pair {
    /// The chain (the leaf only).
    pub cert: String,
    /// The private key.
    pub key: String,
}

impl Pair {
    /// The leaf's DER, as a server sends it.
    pub fn der(&self) -> Vec<u8> {
        CertificateDer::from_pem_slice(self.cert.as_bytes())
            .expect("PEM certificate")
            .to_vec()
    }

    /// Writes `NAME.crt` and `NAME.key` into `dir`.
    pub fn write(&self, dir: &Path, name: &str) {
        std::fs::write(dir.join(format!("{name}.crt")), &self.cert).expect("write cert");
        std::fs::write(dir.join(format!("{name}.key")), &self.key).expect("write key");
    }
}

impl Default for Ca {
    fn default() -> Self {
        Self::new()
    }
}

impl Ca {
    /// A new self-signed authority.
    pub fn new() -> Ca {
        let mut params = CertificateParams::new(Vec::<String>::new()).expect("params");
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params
            .distinguished_name
            .push(DnType::CommonName, "Palisade test CA");
        let key = KeyPair::generate().expect("CA key");
        Ca {
            issuer: CertifiedIssuer::self_signed(params, key).expect("CA certificate"),
        }
    }

    /// The authority's certificate, PEM.
    pub fn pem(&self) -> String {
        self.issuer.pem()
    }

    /// A leaf made from `params`, signed by this authority.
    pub fn sign(&self, params: CertificateParams) -> Pair {
        let key = KeyPair::generate().expect("leaf key");
        let cert = params.signed_by(&key, &self.issuer).expect("sign leaf");
        Pair {
            cert: cert.pem(),
            key: key.serialize_pem(),
        }
    }

    /// A leaf for `names` (DNS names, the first also its CN) signed by this authority.
    pub fn leaf(&self, names: &[&str]) -> Pair {
        let mut params =
            CertificateParams::new(names.iter().map(|n| n.to_string()).collect::<Vec<_>>())
                .expect("params");
        params
            .distinguished_name
            .push(DnType::CommonName, names.first().copied().unwrap_or("leaf"));
        let key = KeyPair::generate().expect("leaf key");
        let cert = params.signed_by(&key, &self.issuer).expect("sign leaf");
        Pair {
            cert: cert.pem(),
            key: key.serialize_pem(),
        }
    }
}

/// A self-signed certificate for `names`, signed by no authority.
pub fn self_signed(names: &[&str]) -> Pair {
    let params = CertificateParams::new(names.iter().map(|n| n.to_string()).collect::<Vec<_>>())
        .expect("params");
    let key = KeyPair::generate().expect("key");
    let cert = params.self_signed(&key).expect("self-sign");
    Pair {
        cert: cert.pem(),
        key: key.serialize_pem(),
    }
}

/// The status `curl` gets for `https://NAME:PORT/PATH` from `addr` (NAME resolved to it),
/// verifying the server against `ca`; 0 when there is none. `flags`: e.g. `--http2`.
pub fn curl_status(
    addr: std::net::SocketAddr,
    name: &str,
    ca: &Path,
    flags: &[&str],
    path: &str,
) -> u16 {
    let out = std::process::Command::new("curl")
        .args([
            "-s",
            "--max-time",
            "10",
            "-o",
            "/dev/null",
            "-w",
            "%{http_code}",
        ])
        .args(flags)
        .arg("--cacert")
        .arg(ca)
        .arg("--resolve")
        .arg(format!("{name}:{}:{}", addr.port(), addr.ip()))
        .arg(format!("https://{name}:{}{path}", addr.port()))
        .output()
        .expect("run curl");
    String::from_utf8_lossy(&out.stdout).parse().unwrap_or(0)
}

/// What a server showed in a handshake.
#[derive(Clone, Debug, Default)]
pub struct Seen {
    /// The leaf certificate's DER.
    pub leaf: Vec<u8>,
    /// The stapled OCSP response (empty: none).
    pub ocsp: Vec<u8>,
    /// The ALPN protocol agreed.
    pub alpn: Option<Vec<u8>>,
}

#[derive(Debug)]
struct Record {
    provider: Arc<CryptoProvider>,
    seen: Mutex<Seen>,
}

impl ServerCertVerifier for Record {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        ocsp_response: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        let mut s = self.seen.lock().unwrap();
        s.leaf = end_entity.to_vec();
        s.ocsp = ocsp_response.to_vec();
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
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
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
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

/// Handshakes with `addr`, sending `sni` as the server name (none: no SNI), asking for
/// ALPN `http/1.1`; what the server showed, or the handshake's error.
pub fn hello(addr: SocketAddr, sni: Option<&str>) -> Result<Seen, String> {
    handshake(addr, sni, true)
}

/// As [`hello`], then the client vanishes: the socket closed without close_notify.
pub fn hello_and_vanish(addr: SocketAddr, sni: Option<&str>) -> Result<Seen, String> {
    handshake(addr, sni, false)
}

fn handshake(addr: SocketAddr, sni: Option<&str>, close_notify: bool) -> Result<Seen, String> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let record = Arc::new(Record {
        provider: Arc::clone(&provider),
        seen: Mutex::new(Seen::default()),
    });
    let mut cfg = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| e.to_string())?
        .dangerous()
        .with_custom_certificate_verifier(record.clone())
        .with_no_client_auth();
    cfg.alpn_protocols = vec![b"http/1.1".to_vec()];
    // Without SNI rustls sends an IP address name, which never goes into the hello.
    let name: ServerName<'static> = match sni {
        Some(n) => ServerName::try_from(n.to_string()).map_err(|e| e.to_string())?,
        None => ServerName::IpAddress(addr.ip().into()),
    };
    let mut conn = rustls::ClientConnection::new(Arc::new(cfg), name).map_err(|e| e.to_string())?;
    let mut sock =
        TcpStream::connect_timeout(&addr, Duration::from_secs(5)).map_err(|e| e.to_string())?;
    sock.set_read_timeout(Some(Duration::from_secs(5))).ok();
    sock.set_write_timeout(Some(Duration::from_secs(5))).ok();
    while conn.is_handshaking() {
        conn.complete_io(&mut sock).map_err(|e| e.to_string())?;
    }
    // Close cleanly (or not); a failed handshake already returned.
    if close_notify {
        conn.send_close_notify();
        let _ = conn.complete_io(&mut sock);
    }
    let mut seen = record.seen.lock().unwrap().clone();
    seen.alpn = conn.alpn_protocol().map(<[u8]>::to_vec);
    Ok(seen)
}
