//! The fleet key: one secret file shared by the nodes of a fleet, from which each use derives
//! its own key (Redis records, HTTP challenge clearances).
//!
//! The file holds at least 32 random bytes, as hex (what [`generate`] writes: 64 hex digits
//! and a newline) or raw. It must be a regular file readable by its owner alone (no group or
//! other permission bits): a key anyone on the node can read signs for anyone. A use derives
//! its key as HMAC-SHA256(file key, purpose), so that one leaked derived key (say, the
//! challenge's) never signs another use's records.

use hmac::{Hmac, Mac};
use sha2::Sha256;
use std::io::Write as _;
use std::os::unix::fs::{OpenOptionsExt as _, PermissionsExt as _};
use std::path::{Path, PathBuf};

/// Fewest bytes of key material accepted.
pub const MIN_KEY_BYTES: usize = 32;

/// A derived key (32 bytes).
#[derive(Clone, PartialEq, Eq)]
pub struct DerivedKey(pub [u8; 32]);

impl std::fmt::Debug for DerivedKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("DerivedKey(..)")
    }
}

/// Why the key file was refused.
#[derive(Debug, thiserror::Error)]
pub enum KeyError {
    /// It could not be read or written.
    #[error("{}: {source}", path.display())]
    Io {
        /// The file.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
    /// Group or others may read or write it.
    #[error("{}: mode {mode:04o} lets others than its owner read it (chmod 600)", path.display())]
    Mode {
        /// The file.
        path: PathBuf,
        /// Its permission bits.
        mode: u32,
    },
    /// It holds too few bytes.
    #[error("{}: {got} bytes of key, at least {MIN_KEY_BYTES} are needed (dnsd redis-key generate makes one)", path.display())]
    Short {
        /// The file.
        path: PathBuf,
        /// Bytes found.
        got: usize,
    },
    /// It is not a regular file.
    #[error("{}: not a regular file", path.display())]
    NotFile {
        /// The file.
        path: PathBuf,
    },
}

/// The key material of a fleet key file.
#[derive(Clone)]
pub struct FleetKey {
    bytes: Vec<u8>,
    path: PathBuf,
}

impl std::fmt::Debug for FleetKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FleetKey")
            .field("path", &self.path)
            .finish_non_exhaustive()
    }
}

impl FleetKey {
    /// Reads `path`, checking that it is a regular file only its owner may read, holding at
    /// least [`MIN_KEY_BYTES`] bytes (hex or raw).
    pub fn load(path: &Path) -> Result<FleetKey, KeyError> {
        let io = |source| KeyError::Io {
            path: path.to_path_buf(),
            source,
        };
        let meta = std::fs::metadata(path).map_err(io)?;
        if !meta.is_file() {
            return Err(KeyError::NotFile {
                path: path.to_path_buf(),
            });
        }
        let mode = meta.permissions().mode() & 0o777;
        if mode & 0o077 != 0 {
            return Err(KeyError::Mode {
                path: path.to_path_buf(),
                mode,
            });
        }
        let raw = std::fs::read(path).map_err(io)?;
        let bytes = decode(&raw);
        if bytes.len() < MIN_KEY_BYTES {
            return Err(KeyError::Short {
                path: path.to_path_buf(),
                got: bytes.len(),
            });
        }
        Ok(FleetKey {
            bytes,
            path: path.to_path_buf(),
        })
    }

    /// A key from bytes (tests).
    pub fn from_bytes(bytes: &[u8]) -> FleetKey {
        FleetKey {
            bytes: bytes.to_vec(),
            path: PathBuf::new(),
        }
    }

    /// The file it came from.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The key of one use: HMAC-SHA256(file key, `purpose`).
    pub fn derive(&self, purpose: &str) -> DerivedKey {
        let mut m = <Hmac<Sha256> as Mac>::new_from_slice(&self.bytes).expect("any key length");
        m.update(purpose.as_bytes());
        DerivedKey(m.finalize().into_bytes().into())
    }
}

/// Hex text (whitespace ignored) when the file is that, else the raw bytes.
fn decode(raw: &[u8]) -> Vec<u8> {
    let text: Vec<u8> = raw
        .iter()
        .copied()
        .filter(|b| !b.is_ascii_whitespace())
        .collect();
    if !text.is_empty()
        && text.len().is_multiple_of(2)
        && text.iter().all(|b| b.is_ascii_hexdigit())
    {
        let nib = |b: u8| (b as char).to_digit(16).unwrap_or(0) as u8;
        return text.chunks(2).map(|p| nib(p[0]) << 4 | nib(p[1])).collect();
    }
    raw.to_vec()
}

/// Writes a new key of 32 random bytes (64 hex digits) to `path`, mode 0600; refuses to
/// overwrite an existing file.
pub fn generate(path: &Path) -> Result<(), KeyError> {
    let io = |source| KeyError::Io {
        path: path.to_path_buf(),
        source,
    };
    let mut key = [0u8; 32];
    getrandom(&mut key).map_err(io)?;
    let hex: String = key.iter().map(|b| format!("{b:02x}")).collect();
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)
        .map_err(io)?;
    f.write_all(format!("{hex}\n").as_bytes()).map_err(io)?;
    f.sync_all().map_err(io)?;
    Ok(())
}

/// Fills `buf` from the kernel's random source.
fn getrandom(buf: &mut [u8]) -> std::io::Result<()> {
    use std::io::Read as _;
    std::fs::File::open("/dev/urandom")?.read_exact(buf)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn generated_keys_load_and_loose_modes_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("fleet.key");
        generate(&p).unwrap();
        assert!(generate(&p).is_err(), "never overwrites");
        let k = FleetKey::load(&p).unwrap();
        assert_eq!(k.bytes.len(), 32);
        assert_ne!(k.derive("a"), k.derive("b"));
        assert_eq!(k.derive("a"), FleetKey::load(&p).unwrap().derive("a"));
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o640)).unwrap();
        let e = FleetKey::load(&p).unwrap_err().to_string();
        assert!(e.contains("mode 0640"), "{e}");
        let short = dir.path().join("short.key");
        std::fs::write(&short, "abcd\n").unwrap();
        std::fs::set_permissions(&short, std::fs::Permissions::from_mode(0o600)).unwrap();
        assert!(matches!(
            FleetKey::load(&short),
            Err(KeyError::Short { got: 2, .. })
        ));
        let raw = dir.path().join("raw.key");
        std::fs::write(&raw, [0xffu8; 40]).unwrap();
        std::fs::set_permissions(&raw, std::fs::Permissions::from_mode(0o400)).unwrap();
        assert_eq!(FleetKey::load(&raw).unwrap().bytes.len(), 40);
    }
}
