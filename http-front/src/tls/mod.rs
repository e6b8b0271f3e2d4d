//! TLS through rustls (ring provider): certificate pairs read from PEM files (with an OCSP
//! response stapled when one lies beside them), the server settings of the TLS listeners
//! (ALPN `h2` then `http/1.1`, the certificate chosen by SNI in [`certs`]).

pub mod acme_state;
pub mod certs;
pub mod origin;

use std::path::{Path, PathBuf};
use std::sync::{Arc, LazyLock};

use rustls::crypto::CryptoProvider;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::sign::CertifiedKey;

/// Which file an error is about.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Which {
    /// The certificate chain.
    Cert,
    /// The private key.
    Key,
    /// The stapled OCSP response.
    Ocsp,
}

/// Why a certificate pair could not be used.
#[derive(Debug, thiserror::Error)]
#[error("{msg}")]
pub struct TlsError {
    /// The file at fault.
    pub which: Which,
    msg: String,
}

fn err(which: Which, path: &Path, what: impl std::fmt::Display) -> TlsError {
    TlsError {
        which,
        msg: format!("{}: {what}", path.display()),
    }
}

/// The crypto provider of every TLS setting here (ring).
pub fn provider() -> &'static Arc<CryptoProvider> {
    static P: LazyLock<Arc<CryptoProvider>> =
        LazyLock::new(|| Arc::new(rustls::crypto::ring::default_provider()));
    &P
}

/// The OCSP response file stapled with `cert`: `NAME.ocsp` beside `NAME.crt` (or `NAME.pem`).
pub fn ocsp_path(cert: &Path) -> PathBuf {
    cert.with_extension("ocsp")
}

/// Reads a PEM certificate chain and its private key, checks that they belong together, and
/// staples the DER OCSP response at [`ocsp_path`] when that file exists.
pub fn load_pair(cert: &Path, key: &Path) -> Result<CertifiedKey, TlsError> {
    let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(cert)
        .map_err(|e| err(Which::Cert, cert, e))?
        .collect::<Result<_, _>>()
        .map_err(|e| err(Which::Cert, cert, e))?;
    if certs.is_empty() {
        return Err(err(Which::Cert, cert, "no CERTIFICATE in the file"));
    }
    let key_der = PrivateKeyDer::from_pem_file(key).map_err(|e| err(Which::Key, key, e))?;
    let mut ck = CertifiedKey::from_der(certs, key_der, provider()).map_err(|e| {
        let msg = match e {
            rustls::Error::InconsistentKeys(_) => {
                format!("{}: the key is not the certificate's", key.display())
            }
            e => format!("{}: {e}", key.display()),
        };
        TlsError {
            which: Which::Key,
            msg,
        }
    })?;
    let ocsp = ocsp_path(cert);
    match std::fs::read(&ocsp) {
        Ok(der) if der.is_empty() => return Err(err(Which::Ocsp, &ocsp, "empty file")),
        Ok(der) => ck.ocsp = Some(der),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(err(Which::Ocsp, &ocsp, e)),
    }
    Ok(ck)
}

/// What `ctl certs` shows of a leaf certificate.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LeafInfo {
    /// The issuer's distinguished name.
    pub issuer: String,
    /// The end of its validity, UTC.
    pub not_after: String,
    /// The same, in seconds since the epoch.
    pub not_after_unix: i64,
    /// The start of its validity, in seconds since the epoch.
    pub not_before_unix: i64,
    /// Its DNS names (subject alternative names), lower case.
    pub dns_names: Vec<String>,
}

/// The issuer, validity and names of the DER certificate `der`, when it parses.
pub fn leaf_info(der: &[u8]) -> Option<LeafInfo> {
    let (_, c) = x509_parser::parse_x509_certificate(der).ok()?;
    let v = c.validity();
    let dns_names = c
        .subject_alternative_name()
        .ok()
        .flatten()
        .map(|san| {
            san.value
                .general_names
                .iter()
                .filter_map(|g| match g {
                    x509_parser::extensions::GeneralName::DNSName(d) => {
                        Some(d.to_ascii_lowercase())
                    }
                    _ => None,
                })
                .collect()
        })
        .unwrap_or_default();
    Some(LeafInfo {
        issuer: c.issuer().to_string(),
        not_after: v.not_after.to_datetime().to_string(),
        not_after_unix: v.not_after.timestamp(),
        not_before_unix: v.not_before.timestamp(),
        dns_names,
    })
}

/// The server settings of the TLS listeners: certificates from `resolver`, ALPN `h2` then
/// `http/1.1` (and `acme-tls/1` for ACME's validation handshakes).
pub fn server_config(resolver: Arc<certs::Resolver>) -> Arc<rustls::ServerConfig> {
    let acme = resolver.has_acme();
    let mut cfg = rustls::ServerConfig::builder_with_provider(Arc::clone(provider()))
        .with_safe_default_protocol_versions()
        .expect("ring supports the default protocol versions")
        .with_no_client_auth()
        .with_cert_resolver(resolver);
    cfg.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    if acme {
        cfg.alpn_protocols
            .push(crate::tls::acme_state::ACME_TLS_ALPN.to_vec());
    }
    Arc::new(cfg)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn missing_and_empty_files_name_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let c = dir.path().join("c.pem");
        let k = dir.path().join("k.pem");
        let e = load_pair(&c, &k).unwrap_err();
        assert_eq!(e.which, Which::Cert);
        assert!(e.to_string().contains("c.pem"), "{e}");
        std::fs::write(&c, "not pem\n").unwrap();
        let e = load_pair(&c, &k).unwrap_err();
        assert!(e.to_string().contains("no CERTIFICATE"), "{e}");
    }
}
