//! DNSSEC keys: one file per key in the key directory, made or imported, signing with
//! aws-lc-rs.
//!
//! A key file is TOML (`<key_dir>/<zone>/K<zone>+<alg>+<tag>+<role>-<id>.toml`, mode 0600,
//! in a 0700 directory of the zone's own): the zone, algorithm, role, a random id that names
//! the key for good, its timeline (publish, active, retire, remove: seconds since the epoch)
//! and the private key as base64 PKCS#8. Knot's key directory holds PKCS#8 PEM files too:
//! those are imported with `dnsd key import`.
//!
//! A key file is never overwritten by another key: a new key's file is linked into place
//! only where no file is (its id is random), and no two keys of a zone share a key tag (a new
//! key whose tag is taken is made again; an import of one is refused) — RRSIGs name their
//! key by tag. The zone's manifest (`keys.list`) names the keys it holds: keys it names whose
//! files are gone make [`check_manifest`] fail, and the zone is not signed with fresh keys
//! the parent's DS does not know.

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
    /// Another key of the zone has this tag (RRSIGs name keys by tag).
    #[error("{zone}: another key of the zone has tag {tag}")]
    TagInUse {
        /// The zone.
        zone: String,
        /// The tag.
        tag: u16,
    },
    /// Key files the zone's manifest names are gone: signing with new keys would break the
    /// chain of trust (the parent's DS names the old ones).
    #[error(
        "{zone}: key files gone from {dir}: {missing}; not signing (the last signed version keeps serving): restore them, or remove {dir}/keys.list to start with new keys"
    )]
    Missing {
        /// The zone.
        zone: String,
        /// Its key directory.
        dir: String,
        /// The files named by the manifest and not found.
        missing: String,
    },
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
    /// The key's own id (random, in its file name): what names it whatever its tag.
    #[serde(default)]
    pub id: String,
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
    /// From when the parent holds its DS (a KSK or CSK succeeding another: its predecessor
    /// retires only after that).
    #[serde(default)]
    pub submitted: Option<u64>,
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

    /// Reads one key file (a file of before key ids takes its file name as its id).
    pub fn read(path: &Path) -> Result<Key, KeyError> {
        let text = std::fs::read_to_string(path).map_err(|e| KeyError::Io(path.into(), e))?;
        let mut file: KeyFile =
            toml::from_str(&text).map_err(|e| KeyError::Parse(path.into(), e.to_string()))?;
        if file.id.is_empty() {
            file.id = path
                .file_stem()
                .map(|s| s.to_string_lossy().into_owned())
                .unwrap_or_default();
        }
        let key = Key::from_file(file, path.into())?;
        // The name says the tag its key was made with: a private key swapped into the file
        // (another key's) would sign under another tag, its DNSKEY gone without a rollover.
        if let Some(named) = path
            .file_name()
            .and_then(|n| n.to_str())
            .and_then(|n| n.split('+').nth(2))
            .and_then(|t| t.parse::<u16>().ok())
            && named != key.tag
        {
            return Err(KeyError::Parse(
                path.into(),
                format!(
                    "the private key is not this file's: its tag is {}, the file name says {named}",
                    key.tag
                ),
            ));
        }
        Ok(key)
    }

    /// Writes this key's own file again (its timeline changed): whole, then renamed over
    /// itself; readable by the service only.
    pub fn write(&self) -> Result<(), KeyError> {
        write_private(
            &self.path,
            &toml::to_string(&self.file).expect("key file serialises"),
        )
    }

    /// The file name of a key: `K<zone>+<alg>+<tag>+<role>-<id>.toml` (the zone as
    /// [`zones::name::file_stem`] writes it).
    pub fn file_name(zone: &str, alg: Algorithm, tag: u16, role: Role, id: &str) -> String {
        let role = match role {
            Role::Ksk => "ksk",
            Role::Zsk => "zsk",
            Role::Csk => "csk",
        };
        format!(
            "K{}+{:03}+{tag:05}+{role}-{id}.toml",
            key_stem(zone),
            alg.number()
        )
    }

    /// Makes a key for `zone` in `dir`, written at once. `at` sets publish and active. A key
    /// whose tag another key of the zone has is made again.
    pub fn generate(
        dir: &Path,
        zone: &str,
        alg: Algorithm,
        rsa_bits: u32,
        role: Role,
        now: u64,
        active: Option<u64>,
    ) -> Result<Key, KeyError> {
        let mut tries = 0;
        loop {
            let der = generate_pkcs8(alg, rsa_bits)?;
            match Key::import_der(dir, zone, alg, role, &der, now, active) {
                Err(KeyError::TagInUse { .. }) if tries < 64 => tries += 1,
                r => return r,
            }
        }
    }

    /// Stores a PKCS#8 private key for `zone` in `dir`; refused when another key of the zone
    /// has its tag.
    pub fn import_der(
        dir: &Path,
        zone: &str,
        alg: Algorithm,
        role: Role,
        der: &[u8],
        now: u64,
        active: Option<u64>,
    ) -> Result<Key, KeyError> {
        let mut id = [0u8; 6];
        aws_lc_rs::rand::fill(&mut id).map_err(|_| KeyError::Generate)?;
        let file = KeyFile {
            zone: zone.to_ascii_lowercase(),
            id: id.iter().map(|b| format!("{b:02x}")).collect(),
            algorithm: alg,
            role,
            created: now,
            publish: now,
            active,
            retire: None,
            remove: None,
            ready: None,
            submitted: None,
            private_key: base64::engine::general_purpose::STANDARD.encode(der),
        };
        let mut k = Key::from_file(file, PathBuf::new())?;
        if zone_keys(dir, &k.file.zone)?.iter().any(|o| o.tag == k.tag) {
            return Err(KeyError::TagInUse {
                zone: k.file.zone.clone(),
                tag: k.tag,
            });
        }
        let zdir = zone_dir(dir, &k.file.zone);
        k.path = zdir.join(Key::file_name(&k.file.zone, alg, k.tag, role, &k.file.id));
        // The key directory is the service's alone (private keys inside).
        {
            use std::os::unix::fs::DirBuilderExt as _;
            std::fs::DirBuilder::new()
                .recursive(true)
                .mode(0o700)
                .create(&zdir)
                .map_err(|e| KeyError::Io(zdir.clone(), e))?;
        }
        write_new(
            &k.path,
            &toml::to_string(&k.file).expect("key file serialises"),
        )?;
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
    dir.join(zones::name::fit_stem(&zones::name::file_stem(zone), 0).as_ref())
}

/// The zone as key file names hold it: its [`zones::name::file_stem`], cut to leave room for
/// the rest of `K<zone>+<alg>+<tag>+<role>-<id>.toml.new` (37 bytes).
fn key_stem(zone: &str) -> String {
    zones::name::fit_stem(&zones::name::file_stem(zone), 37).into_owned()
}

/// Every key of `zone` in `dir` (a missing directory holds none). Unreadable key files are
/// errors: a signer must not drop a key it cannot read.
pub fn zone_keys(dir: &Path, zone: &str) -> Result<Vec<Key>, KeyError> {
    let prefix = format!("K{}+", key_stem(zone));
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

/// The zone's manifest: the key files it holds, one name per line.
fn manifest_path(dir: &Path, zone: &str) -> PathBuf {
    zone_dir(dir, zone).join("keys.list")
}

/// Fails when key files the zone's manifest names are not among `keys` (gone from the
/// directory). A zone without a manifest that was signed before (its serial file) and has no
/// keys at all fails too.
pub fn check_manifest(dir: &Path, zone: &str, keys: &[Key]) -> Result<(), KeyError> {
    let have: std::collections::HashSet<String> = keys
        .iter()
        .filter_map(|k| k.path.file_name().map(|n| n.to_string_lossy().into_owned()))
        .collect();
    let zdir = zone_dir(dir, zone);
    let missing: Vec<String> = match std::fs::read_to_string(manifest_path(dir, zone)) {
        Ok(t) => t
            .lines()
            .map(str::trim)
            .filter(|l| !l.is_empty() && !have.contains(*l))
            .map(str::to_string)
            .collect(),
        Err(_) if keys.is_empty() && zdir.join("serial").exists() => {
            vec!["every key (the zone was signed here before)".into()]
        }
        Err(_) => Vec::new(),
    };
    if missing.is_empty() {
        return Ok(());
    }
    Err(KeyError::Missing {
        zone: zone.to_string(),
        dir: zdir.display().to_string(),
        missing: missing.join(", "),
    })
}

/// Writes the zone's manifest: the files of `keys`.
pub fn write_manifest(dir: &Path, zone: &str, keys: &[Key]) -> Result<(), KeyError> {
    let mut names: Vec<String> = keys
        .iter()
        .filter_map(|k| k.path.file_name().map(|n| n.to_string_lossy().into_owned()))
        .collect();
    names.sort();
    let mut text = names.join("\n");
    text.push('\n');
    let p = manifest_path(dir, zone);
    // Unchanged (most signings): not written again — a full disk then fails no signing
    // for a file that needs no change.
    if std::fs::read_to_string(&p).is_ok_and(|old| old == text) {
        return Ok(());
    }
    shield::files::write_atomic(&p, text.as_bytes(), 0o640).map_err(|e| KeyError::Io(p, e))
}

/// Writes a new key's file at `path`, readable by the owner only, never over an existing
/// file: written whole beside it, then linked into place (which fails where a file is).
fn write_new(path: &Path, text: &str) -> Result<(), KeyError> {
    let tmp = path.with_extension("toml.new");
    if let Err(e) = write_file(&tmp, text) {
        // Cut short (a full disk): nothing of it left behind to hold the space.
        let _ = std::fs::remove_file(&tmp);
        return Err(e);
    }
    let r = std::fs::hard_link(&tmp, path);
    let _ = std::fs::remove_file(&tmp);
    r.map_err(|e| KeyError::Io(path.into(), e))
}

/// Writes `text` to a fresh `path` readable by the owner only.
fn write_file(path: &Path, text: &str) -> Result<(), KeyError> {
    use std::io::Write as _;
    use std::os::unix::fs::OpenOptionsExt as _;
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(path)
        .map_err(|e| KeyError::Io(path.into(), e))?;
    f.write_all(text.as_bytes())
        .and_then(|_| f.sync_all())
        .map_err(|e| KeyError::Io(path.into(), e))
}

/// Writes `text` to `path` readable by the owner only, replacing it whole.
fn write_private(path: &Path, text: &str) -> Result<(), KeyError> {
    shield::files::write_atomic(path, text.as_bytes(), 0o600)
        .map_err(|e| KeyError::Io(path.into(), e))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Another key's private key swapped into a key file is refused: it would sign under
    /// another tag than the file's name says.
    #[test]
    fn a_key_file_holding_another_keys_private_key_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        let a = Key::generate(d, "example.", Algorithm::Ed25519, 0, Role::Zsk, 1, Some(1)).unwrap();
        let b = Key::generate(d, "example.", Algorithm::Ed25519, 0, Role::Zsk, 1, Some(1)).unwrap();
        assert!(Key::read(&a.path).is_ok());
        let text = std::fs::read_to_string(&a.path)
            .unwrap()
            .replace(&a.file.private_key, &b.file.private_key);
        std::fs::write(&a.path, text).unwrap();
        let Err(e) = Key::read(&a.path) else {
            panic!("another key's private key read as this one's");
        };
        let e = e.to_string();
        assert!(e.contains("not this file's"), "{e}");
    }

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

    /// Files are named by role and id and never overwritten; a tag in use is refused on
    /// import and made again on generation; the manifest finds keys that are gone.
    #[test]
    fn key_files_never_collide_and_missing_keys_are_found() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        let ksk =
            Key::generate(d, "example.", Algorithm::Ed25519, 0, Role::Ksk, 1, Some(1)).unwrap();
        let name = ksk.path.file_name().unwrap().to_string_lossy().into_owned();
        assert!(
            name.starts_with(&format!("Kexample+015+{:05}+ksk-", ksk.tag)),
            "{name}"
        );
        assert_eq!(ksk.file.id.len(), 12);
        // A ZSK with the KSK's private key has the same public key but another role, so
        // another tag; a second import of the very KSK has the KSK's tag: refused.
        let der = base64::engine::general_purpose::STANDARD
            .decode(&ksk.file.private_key)
            .unwrap();
        let e = Key::import_der(d, "example.", Algorithm::Ed25519, Role::Ksk, &der, 2, None)
            .unwrap_err();
        assert!(
            matches!(e, KeyError::TagInUse { tag, .. } if tag == ksk.tag),
            "{e}"
        );
        // Forced collisions: many keys, never two with one tag, never a file lost.
        for i in 0..40 {
            Key::generate(
                d,
                "example.",
                Algorithm::Ed25519,
                0,
                Role::Zsk,
                10 + i,
                None,
            )
            .unwrap();
        }
        let keys = zone_keys(d, "example.").unwrap();
        assert_eq!(keys.len(), 41);
        let mut tags: Vec<u16> = keys.iter().map(|k| k.tag).collect();
        tags.sort();
        tags.dedup();
        assert_eq!(tags.len(), 41, "every tag unique");
        assert_eq!(
            Key::read(&ksk.path).unwrap().file.private_key,
            ksk.file.private_key
        );
        // The manifest: a key file gone is found.
        write_manifest(d, "example.", &keys).unwrap();
        check_manifest(d, "example.", &keys).unwrap();
        std::fs::remove_file(&ksk.path).unwrap();
        let left = zone_keys(d, "example.").unwrap();
        let e = check_manifest(d, "example.", &left)
            .unwrap_err()
            .to_string();
        assert!(e.contains(&name) && e.contains("not signing"), "{e}");
        // A zone signed before (its serial) whose keys and manifest are all gone.
        let other = zone_dir(d, "other.");
        std::fs::create_dir_all(&other).unwrap();
        std::fs::write(other.join("serial"), "5\n").unwrap();
        assert!(check_manifest(d, "other.", &[]).is_err());
        assert!(check_manifest(d, "fresh.", &[]).is_ok());
    }
}
