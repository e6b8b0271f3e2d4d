//! TLS through rustls (ring provider): certificate pairs read from PEM files (with an OCSP
//! response stapled when one lies beside them), the server settings of the TLS listeners
//! (ALPN `h2` then `http/1.1`, the certificate chosen by SNI in [`certs`]).

pub mod acme_state;
pub mod certs;
pub mod origin;

use std::sync::Arc;

pub use shield::tls_pair::{TlsError, Which, load_pair, ocsp_path, provider};

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
    /// Its DNS names (subject alternative names; without any, the subject's CN), lower case.
    pub dns_names: Vec<String>,
}

/// The issuer, validity and names of the DER certificate `der`, when it parses.
pub fn leaf_info(der: &[u8]) -> Option<LeafInfo> {
    let (_, c) = x509_parser::parse_x509_certificate(der).ok()?;
    let v = c.validity();
    let dns_names: Vec<String> = c
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
    // No DNS name among its alternative names: the subject's CN (what OpenSSL-based clients
    // still take).
    let dns_names = if dns_names.is_empty() {
        c.subject()
            .iter_common_name()
            .filter_map(|cn| cn.as_str().ok())
            .map(str::to_ascii_lowercase)
            .collect()
    } else {
        dns_names
    };
    Some(LeafInfo {
        issuer: c.issuer().to_string(),
        not_after: v.not_after.to_datetime().to_string(),
        not_after_unix: v.not_after.timestamp(),
        not_before_unix: v.not_before.timestamp(),
        dns_names,
    })
}

/// The server settings of the TLS listeners: certificates from `resolver`, ALPN `h2` then
/// `http/1.1` and `http/1.0` (and `acme-tls/1` for ACME's validation handshakes).
pub fn server_config(resolver: Arc<certs::Resolver>) -> Arc<rustls::ServerConfig> {
    let acme = resolver.has_acme();
    let mut cfg = rustls::ServerConfig::builder_with_provider(Arc::clone(provider()))
        .with_safe_default_protocol_versions()
        .expect("ring supports the default protocol versions")
        .with_no_client_auth()
        .with_cert_resolver(resolver);
    // `http/1.0` too: a client that offers only it was refused (no_application_protocol),
    // where nginx serves it; it is served as HTTP/1.x.
    cfg.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec(), b"http/1.0".to_vec()];
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
