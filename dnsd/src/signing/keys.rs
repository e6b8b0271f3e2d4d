//! DNSSEC keys: one file per key in the key directory, made or imported, signing with
//! aws-lc-rs.
//!
//! A key file is TOML (`<key_dir>/<zone>/K<zone>+<alg>+<tag>.toml`, mode 0600, in a 0700
//! directory of the zone's own): the zone, algorithm, role,
//! its timeline (publish, active, retire, remove: seconds since the epoch) and the private
//! key as base64 PKCS#8. Knot's key directory holds PKCS#8 PEM files too: those are imported
//! with `dnsd key import`.

use std::path::{Path, PathBuf};

use aws_lc_rs::encoding::AsDer;
use aws_lc_rs::rand::SystemRandom;
use aws_lc_rs::rsa::KeySize;
use aws_lc_rs::signature::{self, KeyPair as _};
use base64::Engine as _;
use serde::{Deserialize, Serialize};

/// DNSSEC algorithm numbers dnsd signs with.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Algorithm {
    /// RSA/SHA-256 (8), for parents that know nothing newer.
    Rsasha256,
    /// ECDSA P-256 with SHA-256 (13), the default.
    Ecdsap256sha256,
    /// Ed25519 (15).
    Ed25519,
}

impl Algorithm {
    /// The IANA number.
    pub fn number(self) -> u8 {
        match self {
            Algorithm::Rsasha256 => 8,
            Algorithm::Ecdsap256sha256 => 13,
            Algorithm::Ed25519 => 15,
        }
    }
}

/// What a key signs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    /// Key-signing key: signs the DNSKEY RRset (flags 257).
    Ksk,
    /// Zone-signing key: signs the rest (flags 256).
    Zsk,
    /// Combined signing key: both (flags 257).
    Csk,
}

impl Role {
    /// DNSKEY flags: ZONE, plus SEP for a key that signs keys.
    pub fn flags(self) -> u16 {
        match self {
            Role::Zsk => 256,
            Role::Ksk | Role::Csk => 257,
        }
    }
    /// Signs the DNSKEY RRset.
    pub fn signs_keys(self) -> bool {
        matches!(self, Role::Ksk | Role::Csk)
    }
    /// Signs the zone's other RRsets.
    pub fn signs_zone(self) -> bool {
        matches!(self, Role::Zsk | Role::Csk)
    }
}

/// Why a key could not be made, read or used.
#[derive(Debug, thiserror::Error)]
pub enum KeyError {
    /// The file could not be read or written.
    #[error("{0}: {1}")]
    Io(PathBuf, std::io::Error),
    /// The file is not a key file.
    #[error("{0}: {1}")]
    Parse(PathBuf, String),
    /// The private key is not one of the algorithm's.
    #[error("{0}: the private key is not a valid {1:?} key")]
    Rejected(PathBuf, Algorithm),
    /// The crypto library failed.
    #[error("key generation failed")]
    Generate,
}

/// A signature was not made (no room for it, or the crypto library refused).
#[derive(Debug, Clone, Copy, thiserror::Error)]
#[error("signing failed")]
pub struct SignFailed;

/// A key file as stored.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct KeyFile {
    /// The zone (absolute, lower case).
    pub zone: String,
    /// Algorithm.
    pub algorithm: Algorithm,
    /// Role.
    pub role: Role,
    /// When the key was made or imported.
    pub created: u64,
    /// From when its DNSKEY is published.
    pub publish: u64,
    /// From when it signs.
    #[serde(default)]
    pub active: Option<u64>,
    /// From when it no longer signs (still published).
    #[serde(default)]
    pub retire: Option<u64>,
    /// From when it is no longer published (then deleted).
    #[serde(default)]
    pub remove: Option<u64>,
    /// From when its CDS/CDNSKEY are published (a KSK or CSK the parent should take).
    #[serde(default)]
    pub ready: Option<u64>,
    /// PKCS#8, base64.
    pub private_key: String,
}

/// Where a key is in its life at a moment.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KeyState {
    /// Made, not published yet.
    Generated,
    /// Its DNSKEY is published; it does not sign yet.
    Published,
    /// It signs.
    Active,
    /// Published, no longer signing.
    Retired,
    /// Past its removal.
    Removed,
}

impl KeyFile {
    /// The key's state at `now`.
    pub fn state(&self, now: u64) -> KeyState {
        let past = |t: Option<u64>| t.is_some_and(|t| t <= now);
        if past(self.remove) {
            KeyState::Removed
        } else if past(self.retire) {
            KeyState::Retired
        } else if past(self.active) {
            KeyState::Active
        } else if self.publish <= now {
            KeyState::Published
        } else {
            KeyState::Generated
        }
    }
}

/// A key ready to sign.
pub struct Key {
    /// Its file's content.
    pub file: KeyFile,
    /// Where it is stored.
    pub path: PathBuf,
    /// DNSKEY RDATA.
    pub dnskey: Vec<u8>,
    /// Key tag (RFC 4034 Appendix B).
    pub tag: u16,
    pair: Pair,
}

enum Pair {
    Ecdsa(signature::EcdsaKeyPair),
    Ed25519(signature::Ed25519KeyPair),
    Rsa(signature::RsaKeyPair),
}

impl std::fmt::Debug for Key {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "Key({} {:?} {:?} {})",
            self.file.zone, self.file.algorithm, self.file.role, self.tag
        )
    }
}

impl Key {
    /// Signs `data` into `out` without allocating here (the query path signs online);
    /// returns the signature's length.
    pub fn sign_into(&self, data: &[u8], out: &mut [u8]) -> Result<usize, SignFailed> {
        let rng = SystemRandom::new();
        let put = |sig: &[u8], out: &mut [u8]| {
            let d = out.get_mut(..sig.len()).ok_or(SignFailed)?;
            d.copy_from_slice(sig);
            Ok(sig.len())
        };
        match &self.pair {
            Pair::Ecdsa(k) => put(k.sign(&rng, data).map_err(|_| SignFailed)?.as_ref(), out),
            Pair::Ed25519(k) => put(k.sign(data).as_ref(), out),
            Pair::Rsa(k) => {
                let n = k.public_modulus_len();
                let d = out.get_mut(..n).ok_or(SignFailed)?;
                k.sign(&signature::RSA_PKCS1_SHA256, &rng, data, d)
                    .map_err(|_| SignFailed)?;
                Ok(n)
            }
        }
    }
}

impl zones::sign::Key for Key {
    fn dnskey(&self) -> &[u8] {
        &self.dnskey
    }

    fn sign(&self, data: &[u8]) -> Result<Vec<u8>, String> {
        let rng = SystemRandom::new();
        match &self.pair {
            Pair::Ecdsa(k) => k
                .sign(&rng, data)
                .map(|s| s.as_ref().to_vec())
                .map_err(|_| "ECDSA signing failed".into()),
            Pair::Ed25519(k) => Ok(k.sign(data).as_ref().to_vec()),
            Pair::Rsa(k) => {
                let mut sig = vec![0; k.public_modulus_len()];
                k.sign(&signature::RSA_PKCS1_SHA256, &rng, data, &mut sig)
                    .map_err(|_| "RSA signing failed".to_string())?;
                Ok(sig)
            }
        }
    }
}

/// Makes a private key of `alg`, as PKCS#8.
pub fn generate_pkcs8(alg: Algorithm, rsa_bits: u32) -> Result<Vec<u8>, KeyError> {
    let rng = SystemRandom::new();
    match alg {
        Algorithm::Ecdsap256sha256 => signature::EcdsaKeyPair::generate_pkcs8(
            &signature::ECDSA_P256_SHA256_FIXED_SIGNING,
            &rng,
        )
        .map(|d| d.as_ref().to_vec())
        .map_err(|_| KeyError::Generate),
        Algorithm::Ed25519 => signature::Ed25519KeyPair::generate_pkcs8(&rng)
            .map(|d| d.as_ref().to_vec())
            .map_err(|_| KeyError::Generate),
        Algorithm::Rsasha256 => {
            let size = match rsa_bits {
                ..=2048 => KeySize::Rsa2048,
                2049..=3072 => KeySize::Rsa3072,
                _ => KeySize::Rsa4096,
            };
            let k = signature::RsaKeyPair::generate(size).map_err(|_| KeyError::Generate)?;
            let der = k.as_der().map_err(|_| KeyError::Generate)?;
            Ok(der.as_ref().to_vec())
        }
    }
}

impl Key {
    /// A key from its file's content (`path` names it in errors).
    pub fn from_file(file: KeyFile, path: PathBuf) -> Result<Key, KeyError> {
        let der = base64::engine::general_purpose::STANDARD
            .decode(file.private_key.trim())
            .map_err(|e| KeyError::Parse(path.clone(), format!("private_key: {e}")))?;
        let rejected = || KeyError::Rejected(path.clone(), file.algorithm);
        let (pair, public) = match file.algorithm {
            Algorithm::Ecdsap256sha256 => {
                let k = signature::EcdsaKeyPair::from_pkcs8(
                    &signature::ECDSA_P256_SHA256_FIXED_SIGNING,
                    &der,
                )
                .map_err(|_| rejected())?;
                // Uncompressed point 04|X|Y: DNSSEC keeps X|Y (RFC 6605 §4).
                let p = k.public_key().as_ref()[1..].to_vec();
                (Pair::Ecdsa(k), p)
            }
            Algorithm::Ed25519 => {
                let k = signature::Ed25519KeyPair::from_pkcs8_maybe_unchecked(&der)
                    .map_err(|_| rejected())?;
                let p = k.public_key().as_ref().to_vec();
                (Pair::Ed25519(k), p)
            }
            Algorithm::Rsasha256 => {
                let k = signature::RsaKeyPair::from_pkcs8(&der).map_err(|_| rejected())?;
                let e = k
                    .public_key()
                    .exponent()
                    .big_endian_without_leading_zero()
                    .to_vec();
                let n = k
                    .public_key()
                    .modulus()
                    .big_endian_without_leading_zero()
                    .to_vec();
                // RFC 3110 §2: exponent length, exponent, modulus.
                let mut p = Vec::with_capacity(n.len() + e.len() + 3);
                if e.len() < 256 {
                    p.push(e.len() as u8);
                } else {
                    p.push(0);
                    p.extend_from_slice(&(e.len() as u16).to_be_bytes());
                }
                p.extend_from_slice(&e);
                p.extend_from_slice(&n);
                (Pair::Rsa(k), p)
            }
        };
        let mut dnskey = Vec::with_capacity(public.len() + 4);
        dnskey.extend_from_slice(&file.role.flags().to_be_bytes());
        dnskey.push(3);
        dnskey.push(file.algorithm.number());
        dnskey.extend_from_slice(&public);
        let tag = zones::dnssec::key_tag(&dnskey);
        Ok(Key {
            file,
            path,
            dnskey,
            tag,
            pair,
        })
    }

    /// Reads one key file.
    pub fn read(path: &Path) -> Result<Key, KeyError> {
        let text = std::fs::read_to_string(path).map_err(|e| KeyError::Io(path.into(), e))?;
        let file: KeyFile =
            toml::from_str(&text).map_err(|e| KeyError::Parse(path.into(), e.to_string()))?;
        Key::from_file(file, path.into())
    }

    /// Writes the key file (whole, then renamed; readable by the service only).
    pub fn write(&self) -> Result<(), KeyError> {
        write_private(
            &self.path,
            &toml::to_string(&self.file).expect("key file serialises"),
        )
    }

    /// The file name of a key: `K<zone>+<alg>+<tag>.toml` (the zone as
    /// [`zones::name::file_stem`] writes it).
    pub fn file_name(zone: &str, alg: Algorithm, tag: u16) -> String {
        format!(
            "K{}+{:03}+{tag:05}.toml",
            zones::name::file_stem(zone),
            alg.number()
        )
    }

    /// Makes a key for `zone` in `dir`, written at once. `at` sets publish and active.
    pub fn generate(
        dir: &Path,
        zone: &str,
        alg: Algorithm,
        rsa_bits: u32,
        role: Role,
        now: u64,
        active: Option<u64>,
    ) -> Result<Key, KeyError> {
        let der = generate_pkcs8(alg, rsa_bits)?;
        Key::import_der(dir, zone, alg, role, &der, now, active)
    }

    /// Stores a PKCS#8 private key for `zone` in `dir`.
    pub fn import_der(
        dir: &Path,
        zone: &str,
        alg: Algorithm,
        role: Role,
        der: &[u8],
        now: u64,
        active: Option<u64>,
    ) -> Result<Key, KeyError> {
        let file = KeyFile {
            zone: zone.to_ascii_lowercase(),
            algorithm: alg,
            role,
            created: now,
            publish: now,
            active,
            retire: None,
            remove: None,
            ready: None,
            private_key: base64::engine::general_purpose::STANDARD.encode(der),
        };
        let mut k = Key::from_file(file, PathBuf::new())?;
        let zdir = zone_dir(dir, &k.file.zone);
        k.path = zdir.join(Key::file_name(&k.file.zone, alg, k.tag));
        // The key directory is the service's alone (private keys inside).
        {
            use std::os::unix::fs::DirBuilderExt as _;
            std::fs::DirBuilder::new()
                .recursive(true)
                .mode(0o700)
                .create(&zdir)
                .map_err(|e| KeyError::Io(zdir.clone(), e))?;
        }
        k.write()?;
        Ok(k)
    }
}

/// Reads a PKCS#8 private key from PEM (`-----BEGIN PRIVATE KEY-----`, as Knot and openssl
/// write) or DER.
pub fn read_pkcs8(path: &Path) -> Result<Vec<u8>, KeyError> {
    let bytes = std::fs::read(path).map_err(|e| KeyError::Io(path.into(), e))?;
    let Ok(text) = std::str::from_utf8(&bytes) else {
        return Ok(bytes);
    };
    let Some(body) = text
        .split("-----BEGIN PRIVATE KEY-----")
        .nth(1)
        .and_then(|r| r.split("-----END PRIVATE KEY-----").next())
    else {
        return Err(KeyError::Parse(
            path.into(),
            "expected a PKCS#8 key (-----BEGIN PRIVATE KEY-----)".into(),
        ));
    };
    let b64: String = body.chars().filter(|c| !c.is_whitespace()).collect();
    base64::engine::general_purpose::STANDARD
        .decode(b64)
        .map_err(|e| KeyError::Parse(path.into(), format!("PEM body: {e}")))
}

/// The directory of one zone's keys and signing state in the key directory: one per zone,
/// so that a zone's keys are found without listing every zone's; named by
/// [`zones::name::file_stem`], so that no zone name reaches outside the key directory.
pub fn zone_dir(dir: &Path, zone: &str) -> PathBuf {
    dir.join(zones::name::file_stem(zone))
}

/// Every key of `zone` in `dir` (a missing directory holds none). Unreadable key files are
/// errors: a signer must not drop a key it cannot read.
pub fn zone_keys(dir: &Path, zone: &str) -> Result<Vec<Key>, KeyError> {
    let prefix = format!("K{}+", zones::name::file_stem(zone));
    let dir = &zone_dir(dir, zone);
    let rd = match std::fs::read_dir(dir) {
        Ok(rd) => rd,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(KeyError::Io(dir.into(), e)),
    };
    let mut keys = Vec::new();
    for e in rd {
        let e = e.map_err(|e| KeyError::Io(dir.into(), e))?;
        let name = e.file_name();
        let name = name.to_string_lossy();
        if name.starts_with(&prefix) && name.ends_with(".toml") {
            keys.push(Key::read(&e.path())?);
        }
    }
    keys.sort_by_key(|k| (k.file.created, k.tag));
    Ok(keys)
}

/// Writes `text` to `path` readable by the owner only, replacing it whole.
fn write_private(path: &Path, text: &str) -> Result<(), KeyError> {
    use std::io::Write as _;
    use std::os::unix::fs::OpenOptionsExt as _;
    let tmp = path.with_extension("toml.tmp");
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(&tmp)
        .map_err(|e| KeyError::Io(tmp.clone(), e))?;
    f.write_all(text.as_bytes())
        .and_then(|_| f.sync_all())
        .map_err(|e| KeyError::Io(tmp.clone(), e))?;
    std::fs::rename(&tmp, path).map_err(|e| KeyError::Io(path.into(), e))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Each algorithm makes a key that reads back with the same DNSKEY and tag, in a file
    /// only its owner may read; the public key has the size its RFC gives.
    #[test]
    fn generated_keys_read_back() {
        use std::os::unix::fs::PermissionsExt as _;
        let dir = tempfile::tempdir().unwrap();
        for (alg, len) in [
            (Algorithm::Ecdsap256sha256, 64),
            (Algorithm::Ed25519, 32),
            (Algorithm::Rsasha256, 1 + 3 + 256),
        ] {
            let k = Key::generate(
                dir.path(),
                "Example.COM.",
                alg,
                2048,
                Role::Csk,
                100,
                Some(100),
            )
            .unwrap();
            assert_eq!(k.dnskey.len(), 4 + len, "{alg:?}");
            assert_eq!(&k.dnskey[..4], &[1, 1, 3, alg.number()]);
            let back = Key::read(&k.path).unwrap();
            assert_eq!((back.dnskey, back.tag), (k.dnskey.clone(), k.tag));
            let mode = std::fs::metadata(&k.path).unwrap().permissions().mode();
            assert_eq!(mode & 0o777, 0o600);
            let sig = zones::sign::Key::sign(&k, b"data").unwrap();
            assert_eq!(
                sig.len(),
                if alg == Algorithm::Rsasha256 { 256 } else { 64 }
            );
        }
        assert_eq!(zone_keys(dir.path(), "example.com.").unwrap().len(), 3);
        assert!(zone_keys(dir.path(), "other.").unwrap().is_empty());
        std::fs::write(
            dir.path()
                .join("example.com")
                .join("Kexample.com+013+00001.toml"),
            "zone = 1",
        )
        .unwrap();
        let e = zone_keys(dir.path(), "example.com.")
            .unwrap_err()
            .to_string();
        assert!(e.contains("Kexample.com+013+00001.toml"), "{e}");
    }
}
