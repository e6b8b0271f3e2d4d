//! Reading the text files an operator points a daemon at (configs, rules, lists): regular
//! files only, of a bounded size. A FIFO, a device or a directory is refused without waiting
//! (a FIFO's open would wait for a writer, and stall whoever reloads), and `/dev/zero` is
//! never read until memory runs out. And writing the small state files a daemon keeps:
//! whole or not at all.

use std::io::Read;
use std::path::Path;

/// Largest config file read (a config names its zones; 100,000 of them fit).
pub const CONFIG_MAX: u64 = 64 << 20;

/// Largest rules file or list it names (bot lists, ASN tables) read.
pub const LIST_MAX: u64 = 512 << 20;

/// The text of `path`, a regular file of at most `max` bytes; the error says what it is
/// instead, or that it is larger.
pub fn read_text(path: &Path, max: u64) -> std::io::Result<String> {
    let f = open_regular(path)?;
    let mut text = String::new();
    f.take(max.saturating_add(1)).read_to_string(&mut text)?;
    if text.len() as u64 > max {
        return Err(std::io::Error::new(
            std::io::ErrorKind::FileTooLarge,
            format!("larger than {max} bytes"),
        ));
    }
    Ok(text)
}

/// The text of the config or rules file `path`, as [`read_text`] reads it, refused when it
/// holds nothing but blanks: a file cut to nothing (a write under way, a disk full) must
/// never read as "no zones, no sites, no rules" and wipe what runs.
pub fn read_config(path: &Path, max: u64) -> std::io::Result<String> {
    let text = read_text(path, max)?;
    if text.trim().is_empty() {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            "is empty (cut to nothing, or still being written?): a file meant to say \
             nothing needs at least a comment",
        ));
    }
    Ok(text)
}

/// Opens `path` for reading when it is a regular file, never waiting (a FIFO is opened
/// without blocking, then refused).
pub fn open_regular(path: &Path) -> std::io::Result<std::fs::File> {
    use std::os::unix::fs::{FileTypeExt, OpenOptionsExt};
    let f = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK | libc::O_NOCTTY)
        .open(path)?;
    let t = f.metadata()?.file_type();
    let what = if t.is_file() {
        return Ok(f);
    } else if t.is_dir() {
        "a directory"
    } else if t.is_fifo() {
        "a FIFO"
    } else if t.is_char_device() {
        "a character device"
    } else if t.is_block_device() {
        "a block device"
    } else if t.is_socket() {
        "a socket"
    } else {
        "not a regular file"
    };
    Err(std::io::Error::new(
        std::io::ErrorKind::InvalidInput,
        format!("is {what}, not a regular file"),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_regular_files_of_a_bounded_size_are_read() {
        let dir = tempfile::tempdir().unwrap();
        let ok = dir.path().join("a.toml");
        std::fs::write(&ok, "x = 1\n").unwrap();
        assert_eq!(read_text(&ok, 100).unwrap(), "x = 1\n");
        let e = read_text(&ok, 3).unwrap_err().to_string();
        assert!(e.contains("larger than 3 bytes"), "{e}");
        let fifo = dir.path().join("fifo");
        let c = std::ffi::CString::new(fifo.as_os_str().as_encoded_bytes()).unwrap();
        // SAFETY: a valid NUL-terminated path.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
        let e = read_text(&fifo, 100).unwrap_err().to_string();
        assert!(e.contains("a FIFO"), "{e}");
        let e = read_text(Path::new("/dev/zero"), 100)
            .unwrap_err()
            .to_string();
        assert!(e.contains("a character device"), "{e}");
        let e = read_text(dir.path(), 100).unwrap_err().to_string();
        assert!(e.contains("a directory"), "{e}");
    }
}

/// Writes `data` to `path` whole or not at all: a new file beside it (`<path>.tmp.<pid>.<n>`,
/// its own to each writer, mode `mode` whatever the umask), synced, renamed over `path`. A
/// write cut short (a full disk) removes its temporary file, which would otherwise hold the
/// space every later write needs.
pub fn write_atomic(path: &Path, data: &[u8], mode: u32) -> std::io::Result<()> {
    use std::io::Write as _;
    use std::os::unix::fs::{OpenOptionsExt as _, PermissionsExt as _};
    static SEQ: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let suffix = format!(
        ".tmp.{}.{}",
        std::process::id(),
        SEQ.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
    );
    // Beside the file, under its name and the suffix — or, where that would pass the longest
    // file name (a key file of a zone name near 255 bytes), under the suffix alone.
    let name_len = path.file_name().map_or(0, |n| n.len());
    let tmp = if name_len + suffix.len() <= 255 {
        let mut tmp = path.as_os_str().to_owned();
        tmp.push(&suffix);
        std::path::PathBuf::from(tmp)
    } else {
        path.with_file_name(format!(".palisade{suffix}"))
    };
    let written = (|| {
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(mode)
            .open(&tmp)?;
        f.set_permissions(std::fs::Permissions::from_mode(mode))?;
        f.write_all(data)?;
        f.sync_all()?;
        std::fs::rename(&tmp, path)
    })();
    if written.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    written
}

#[cfg(test)]
mod write_tests {
    use super::*;

    #[test]
    fn write_atomic_replaces_whole_with_the_mode_asked() {
        use std::os::unix::fs::PermissionsExt as _;
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("state");
        write_atomic(&p, b"one\n", 0o640).unwrap();
        write_atomic(&p, b"two\n", 0o600).unwrap();
        assert_eq!(std::fs::read_to_string(&p).unwrap(), "two\n");
        assert_eq!(
            std::fs::metadata(&p).unwrap().permissions().mode() & 0o777,
            0o600
        );
        // A write that fails (the target a directory) leaves no temporary file behind.
        let d = dir.path().join("d");
        std::fs::create_dir(&d).unwrap();
        assert!(write_atomic(&d, b"x", 0o600).is_err());
        let left: Vec<_> = std::fs::read_dir(dir.path())
            .unwrap()
            .filter_map(|e| e.ok())
            .filter(|e| e.file_name().to_string_lossy().contains(".tmp"))
            .collect();
        assert!(left.is_empty(), "{left:?}");
    }
}
