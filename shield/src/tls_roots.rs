//! The roots a TLS client verifies its server against: the certificates of a PEM file
//! (`ca_file`, a private CA), else the system's (read once per process).

use std::path::Path;
use std::sync::LazyLock;

use rustls::RootCertStore;
use rustls::pki_types::CertificateDer;
use rustls::pki_types::pem::PemObject;

fn system() -> &'static Result<Vec<CertificateDer<'static>>, String> {
    static ROOTS: LazyLock<Result<Vec<CertificateDer<'static>>, String>> = LazyLock::new(|| {
        let found = rustls_native_certs::load_native_certs();
        if found.certs.is_empty() {
            Err("no system root certificates found (set ca_file)".into())
        } else {
            Ok(found.certs)
        }
    });
    &ROOTS
}

/// The certificates of `pem` (the text of the file `path`), or the system's roots without
/// one; the error names the file.
pub fn roots(ca: Option<(&Path, &[u8])>) -> Result<RootCertStore, String> {
    let mut roots = RootCertStore::empty();
    match ca {
        Some((path, pem)) => {
            let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(pem)
                .collect::<Result<_, _>>()
                .map_err(|e| format!("{}: {e}", path.display()))?;
            if certs.is_empty() {
                return Err(format!("{}: no CERTIFICATE in the file", path.display()));
            }
            for c in certs {
                roots
                    .add(c)
                    .map_err(|e| format!("{}: {e}", path.display()))?;
            }
        }
        None => {
            roots.add_parsable_certificates(
                system().as_ref().map_err(Clone::clone)?.iter().cloned(),
            );
        }
    }
    Ok(roots)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_file_without_certificates_is_named() {
        let e = roots(Some((Path::new("ca.pem"), b"not pem\n"))).unwrap_err();
        assert_eq!(e, "ca.pem: no CERTIFICATE in the file");
    }
}
