//! TLS through rustls (ring provider): the server settings from PEM files, ALPN `h2` then `http/1.1`.

use std::path::Path;
use std::sync::Arc;

use rustls::ServerConfig;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};

/// Which file an error is about.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Which {
    /// The certificate chain.
    Cert,
    /// The private key.
    Key,
}

/// Why TLS settings could not be built.
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

/// Reads a PEM certificate chain and private key and builds rustls server settings.
pub fn server_config(cert: &Path, key: &Path) -> Result<Arc<ServerConfig>, TlsError> {
    let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(cert)
        .map_err(|e| err(Which::Cert, cert, e))?
        .collect::<Result<_, _>>()
        .map_err(|e| err(Which::Cert, cert, e))?;
    if certs.is_empty() {
        return Err(err(Which::Cert, cert, "no CERTIFICATE in the file"));
    }
    let key_der = PrivateKeyDer::from_pem_file(key).map_err(|e| err(Which::Key, key, e))?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut cfg = ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| err(Which::Cert, cert, e))?
        .with_no_client_auth()
        .with_single_cert(certs, key_der)
        .map_err(|e| err(Which::Key, key, e))?;
    cfg.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    Ok(Arc::new(cfg))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn missing_and_empty_files_name_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let c = dir.path().join("c.pem");
        let k = dir.path().join("k.pem");
        let e = server_config(&c, &k).unwrap_err();
        assert_eq!(e.which, Which::Cert);
        assert!(e.to_string().contains("c.pem"), "{e}");
        std::fs::write(&c, "not pem\n").unwrap();
        let e = server_config(&c, &k).unwrap_err();
        assert!(e.to_string().contains("no CERTIFICATE"), "{e}");
    }
}
