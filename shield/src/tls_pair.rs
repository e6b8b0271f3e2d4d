//! Certificate pairs read from PEM files for TLS servers (http-front's listeners, dnsd's DNS
//! over TLS), with an OCSP response stapled when one lies beside them; the crypto provider
//! (ring) of every TLS setting of both daemons.

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

/// A PEM certificate chain and its private key held in memory (an ACME order's), checked
/// to belong together, as [`load_pair`] checks files.
pub fn pair_from_pem(chain: &[u8], key: &[u8]) -> Result<CertifiedKey, String> {
    let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(chain)
        .collect::<Result<_, _>>()
        .map_err(|e| format!("the chain: {e}"))?;
    if certs.is_empty() {
        return Err("the chain holds no CERTIFICATE".into());
    }
    let key_der = PrivateKeyDer::from_pem_slice(key).map_err(|e| format!("the key: {e}"))?;
    CertifiedKey::from_der(certs, key_der, provider()).map_err(|e| match e {
        rustls::Error::InconsistentKeys(_) => "the key is not the certificate's".to_string(),
        e => e.to_string(),
    })
}

/// The validity of `ck`'s leaf: its start and end in Unix seconds and its end as text (UTC).
pub fn leaf_validity(ck: &CertifiedKey) -> Option<(i64, i64, String)> {
    let der = ck.end_entity_cert().ok()?;
    let (_, c) = x509_parser::parse_x509_certificate(der).ok()?;
    let v = c.validity();
    Some((
        v.not_before.timestamp(),
        v.not_after.timestamp(),
        v.not_after.to_datetime().to_string(),
    ))
}

/// Says why `ck`'s leaf is not valid at `now` (Unix seconds), if it is not.
pub fn out_of_validity(ck: &CertifiedKey, now: i64) -> Option<String> {
    let (not_before, not_after, end) = leaf_validity(ck)?;
    if now > not_after {
        Some(format!("expired at {end}"))
    } else if now < not_before {
        Some("is not valid yet".into())
    } else {
        None
    }
}
