//! The control socket of both daemons (knotc-style): `dnsd ctl COMMAND` and `http-front ctl
//! COMMAND` talk to a running server over a Unix socket, one JSON request line and one JSON
//! reply line per connection. [`serve`] is the server's loop, [`call`] the client; [`block`]
//! holds the block-map commands both daemons answer alike.
//!
//! # Who may
//!
//! Whoever reaches the socket commands the server (blocks, reloads, zones): the file is
//! made with `[control] mode` (default 0660) and `group` whatever the umask ([`bind`]), and
//! every connection's peer is checked with `SO_PEERCRED` ([`Peer`]): root, the daemon's own
//! user, or a member of the configured group; anyone else is refused and counted
//! ([`ControlStats`]). A request has [`REQUEST_TIMEOUT`] to arrive; accept errors back off.
//! Files a command names are opened only as the peer could have ([`Peer::open`]), and
//! their contents never appear in an error. The socket is removed when the server stops —
//! only if it is still the one this process made, so a second server that fails to start
//! never takes a running one's socket away.

pub mod block;

use std::io::{BufRead, BufReader, Write};
use std::os::unix::fs::{DirBuilderExt as _, MetadataExt as _, PermissionsExt as _};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use serde::{Deserialize, Deserializer, Serialize};

/// How long a connection may take to send its request.
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);

/// `[control] mode` and `group`: the socket file's permissions and the group whose members may
/// use it (besides root and the daemon's own user).
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Access {
    /// Permission bits of the socket file (octal: `0o660` or `"0660"`); set whatever the umask.
    #[serde(deserialize_with = "octal")]
    pub mode: u32,
    /// A group (name or number) whose members may use the socket; its group owner.
    pub group: Option<String>,
}

/// The default mode of a control socket: owner and group read and write.
pub const DEFAULT_MODE: u32 = 0o660;

/// [`DEFAULT_MODE`], for serde defaults.
pub fn default_mode() -> u32 {
    DEFAULT_MODE
}

impl Default for Access {
    fn default() -> Self {
        Access {
            mode: DEFAULT_MODE,
            group: None,
        }
    }
}

/// Deserializes a permission mode written `0o660` or `"0660"` (at most 0777).
pub fn octal<'de, D: Deserializer<'de>>(d: D) -> Result<u32, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum M {
        N(u32),
        S(String),
    }
    let v = match M::deserialize(d)? {
        M::N(n) => n,
        M::S(s) => u32::from_str_radix(s.trim_start_matches("0o"), 8).map_err(|_| {
            serde::de::Error::custom(format!("mode {s:?}: expected octal like \"0660\""))
        })?,
    };
    if v > 0o777 {
        return Err(serde::de::Error::custom(format!(
            "mode {v:o}: at most 0777"
        )));
    }
    Ok(v)
}

impl Access {
    /// The group's id, when one is configured (a name is looked up in the group database).
    pub fn gid(&self) -> Result<Option<u32>, String> {
        let Some(g) = &self.group else {
            return Ok(None);
        };
        if let Ok(n) = g.parse::<u32>() {
            return Ok(Some(n));
        }
        group_gid(g)
            .map(Some)
            .ok_or_else(|| format!("control.group {g:?}: no such group"))
    }
}

/// The gid of group `name` (from /etc/group).
fn group_gid(name: &str) -> Option<u32> {
    let text = std::fs::read_to_string("/etc/group").ok()?;
    text.lines().find_map(|l| {
        let mut f = l.split(':');
        (f.next()? == name).then_some(())?;
        f.next()?;
        f.next()?.parse().ok()
    })
}

/// Counters of a control socket (`palisade_control_*`).
#[derive(Debug, Default)]
pub struct ControlStats {
    accepted: AtomicU64,
    refused: AtomicU64,
    timeouts: AtomicU64,
    accept_errors: AtomicU64,
    busy: AtomicU64,
    too_long: AtomicU64,
}

impl crate::metrics::Source for ControlStats {
    fn collect(&self, out: &mut crate::metrics::Samples) {
        let l = |a: &AtomicU64| a.load(Ordering::Relaxed);
        for (what, v, help) in [
            (
                "accepted",
                l(&self.accepted),
                "Control connections accepted.",
            ),
            (
                "refused",
                l(&self.refused),
                "Control connections refused: the peer is not root, the daemon's user, nor in [control] group.",
            ),
            (
                "timeouts",
                l(&self.timeouts),
                "Control connections closed before their request arrived, or before they read their reply.",
            ),
            (
                "accept_errors",
                l(&self.accept_errors),
                "Failed accepts on the control socket (backed off).",
            ),
            (
                "busy",
                l(&self.busy),
                "Control connections closed at once: MAX_CONNECTIONS (64) were being served (root and the daemon's user have 8 more).",
            ),
            (
                "too_long",
                l(&self.too_long),
                "Control requests longer than MAX_REQUEST (64 KiB), answered as bad requests.",
            ),
        ] {
            out.counter(
                format!("control.{what}"),
                "palisade_control_connections_total",
                format!("result=\"{what}\""),
                help,
                v,
            );
        }
    }
}

/// One entry of a POSIX access ACL (`system.posix_acl_access`).
#[derive(Clone, Copy, Debug)]
struct AclEntry {
    tag: u16,
    perm: u32,
    id: u32,
}

const ACL_USER_OBJ: u16 = 0x01;
const ACL_USER: u16 = 0x02;
const ACL_GROUP_OBJ: u16 = 0x04;
const ACL_GROUP: u16 = 0x08;
const ACL_MASK: u16 = 0x10;
const ACL_OTHER: u16 = 0x20;

/// The access ACL of the file `fd` (an `O_PATH` descriptor) when it has one beyond its mode
/// bits; None without one (or where the filesystem has none).
fn access_acl(fd: &std::os::fd::OwnedFd) -> Option<Vec<AclEntry>> {
    use std::os::fd::AsRawFd as _;
    // An O_PATH descriptor takes no fgetxattr: its /proc/self/fd link names the very inode.
    let p = std::ffi::CString::new(format!("/proc/self/fd/{}", fd.as_raw_fd())).ok()?;
    let name = c"system.posix_acl_access";
    let mut buf = [0u8; 4 + 8 * 64];
    // SAFETY: NUL-terminated path and name; `buf` is writable for its length.
    let n = unsafe {
        libc::getxattr(
            p.as_ptr(),
            name.as_ptr(),
            buf.as_mut_ptr().cast(),
            buf.len(),
        )
    };
    let n = match usize::try_from(n) {
        Ok(n) => n,
        // No ACL beyond the mode bits, or none on this filesystem: the mode bits decide.
        Err(_)
            if matches!(
                std::io::Error::last_os_error().raw_os_error(),
                Some(libc::ENODATA | libc::EOPNOTSUPP)
            ) =>
        {
            return None;
        }
        // Anything else (more entries than the buffer holds, /proc not mounted, an I/O
        // error): an ACL that cannot be read grants nothing but the owner's entry, absent
        // here, so the peer is refused rather than judged by the mode bits.
        Err(_) => return Some(Vec::new()),
    };
    if n < 4 || u32::from_le_bytes(buf[..4].try_into().ok()?) != 2 {
        return None;
    }
    Some(
        buf[4..n]
            .chunks_exact(8)
            .map(|e| AclEntry {
                tag: u16::from_le_bytes([e[0], e[1]]),
                perm: u32::from(u16::from_le_bytes([e[2], e[3]])),
                id: u32::from_le_bytes([e[4], e[5], e[6], e[7]]),
            })
            .collect(),
    )
}

/// Whether the file `fd` lies on procfs or sysfs.
fn kernel_filesystem(fd: &std::os::fd::OwnedFd) -> bool {
    use std::os::fd::AsRawFd as _;
    // SAFETY: an all-zero statfs is a valid value to fill.
    let mut st: libc::statfs = unsafe { std::mem::zeroed() };
    // SAFETY: a valid descriptor and a statfs to fill.
    if unsafe { libc::fstatfs(fd.as_raw_fd(), &mut st) } != 0 {
        return true;
    }
    const PROC_SUPER_MAGIC: i64 = 0x9fa0;
    const SYSFS_MAGIC: i64 = 0x6265_6572;
    matches!(st.f_type as i64, PROC_SUPER_MAGIC | SYSFS_MAGIC)
}

/// The process at the other end of a control connection (`SO_PEERCRED`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Peer {
    /// Its user id.
    pub uid: u32,
    /// Its group id.
    pub gid: u32,
    /// Its supplementary groups (SO_PEERGROUPS; empty when unknown).
    pub groups: Vec<u32>,
}

impl Peer {
    /// This process, as a peer (what a daemon is to itself).
    pub fn this_process() -> Peer {
        // SAFETY: getuid/getgid have no preconditions.
        let (uid, gid) = unsafe { (libc::geteuid(), libc::getegid()) };
        Peer {
            uid,
            gid,
            groups: Vec::new(),
        }
    }

    fn in_group(&self, g: u32) -> bool {
        self.gid == g || self.groups.contains(&g)
    }

    /// True when this peer may command the server: root, the daemon's own user, or a
    /// member of `group`.
    pub fn allowed(&self, group: Option<u32>) -> bool {
        // SAFETY: geteuid has no preconditions.
        let me = unsafe { libc::geteuid() };
        self.uid == 0 || self.uid == me || group.is_some_and(|g| self.in_group(g))
    }

    /// True when this peer may read whatever the daemon may: root, or the daemon's own user.
    pub fn reads_as_the_daemon(&self) -> bool {
        // SAFETY: geteuid has no preconditions.
        self.uid == 0 || self.uid == unsafe { libc::geteuid() }
    }

    /// Opens `path` for reading as this peer could have: a regular file it may read, reached
    /// through directories it may search, as the kernel would judge (POSIX ACLs, else mode bits; never procfs or sysfs). Root and the daemon's own user
    /// open it as the daemon does. For anyone else the path is walked one directory at a
    /// time, each checked on the very inode the next step is looked up in, and no symbolic
    /// link is followed: nothing swapped in while it is opened (a link, a renamed file) makes
    /// the daemon read what the peer could not. The message names the path, never its
    /// contents.
    pub fn open(&self, path: &Path) -> Result<std::fs::File, String> {
        let named = |e: std::io::Error| format!("{}: {e}", path.display());
        if self.reads_as_the_daemon() {
            return crate::files::open_regular(path).map_err(named);
        }
        // A name with control characters would reach root's terminal and the log (a zone's
        // file is shown by `ctl zones` and in every load error) with its escapes and breaks.
        if path.to_string_lossy().chars().any(char::is_control) {
            return Err(format!(
                "{}: a file name with control characters is not taken",
                printable(&path.to_string_lossy())
            ));
        }
        let abs = std::path::absolute(path).map_err(named)?;
        let denied = || {
            format!(
                "{}: permission denied (for the user who asked)",
                path.display()
            )
        };
        // The file's POSIX ACL where it has one, else its mode bits: as the kernel decides.
        let may = |fd: &std::os::fd::OwnedFd, meta: &std::fs::Metadata, bits: u32| -> bool {
            if let Some(acl) = access_acl(fd) {
                return self.acl_allows(&acl, meta, bits);
            }
            let mode = meta.permissions().mode();
            let shift = if meta.uid() == self.uid {
                6
            } else if self.in_group(meta.gid()) {
                3
            } else {
                0
            };
            (mode >> shift) & bits == bits
        };
        let link = || {
            format!(
                "{}: permission denied (for the user who asked): a symbolic link on the way is \
                 not followed for a user other than root or the daemon's (name the file itself)",
                path.display()
            )
        };
        let at = |dir: &std::os::fd::OwnedFd, name: &std::ffi::OsStr, flags: i32| {
            use std::os::fd::{AsRawFd as _, FromRawFd as _};
            use std::os::unix::ffi::OsStrExt as _;
            let c = std::ffi::CString::new(name.as_bytes())
                .map_err(|_| std::io::Error::from(std::io::ErrorKind::InvalidInput))?;
            // SAFETY: a valid directory descriptor and a NUL-terminated name; the descriptor
            // returned is owned by nobody else.
            let fd = unsafe {
                libc::openat(
                    dir.as_raw_fd(),
                    c.as_ptr(),
                    flags | libc::O_NOFOLLOW | libc::O_CLOEXEC,
                )
            };
            if fd < 0 {
                return Err(std::io::Error::last_os_error());
            }
            // SAFETY: `fd` was just opened and is owned here alone.
            Ok(unsafe { std::os::fd::OwnedFd::from_raw_fd(fd) })
        };
        let meta = |fd: &std::os::fd::OwnedFd| -> std::io::Result<std::fs::Metadata> {
            std::fs::File::from(fd.try_clone()?).metadata()
        };
        let search = libc::O_PATH | libc::O_DIRECTORY;
        let mut dir: std::os::fd::OwnedFd = std::fs::File::open("/").map_err(named)?.into();
        let mut comps: Vec<std::path::Component<'_>> = abs.components().collect();
        let Some(std::path::Component::Normal(last)) = comps.pop() else {
            return Err(format!("{}: not a file", path.display()));
        };
        let open_failed = |e: std::io::Error| {
            if e.raw_os_error() == Some(libc::ELOOP) || e.raw_os_error() == Some(libc::ENOTDIR) {
                link()
            } else if e.kind() == std::io::ErrorKind::PermissionDenied {
                denied()
            } else {
                named(e)
            }
        };
        for c in comps {
            let name = match c {
                std::path::Component::Normal(n) => n,
                std::path::Component::ParentDir => std::ffi::OsStr::new(".."),
                _ => continue,
            };
            if !may(&dir, &meta(&dir).map_err(named)?, 0o1) {
                return Err(denied());
            }
            dir = at(&dir, name, search).map_err(open_failed)?;
        }
        if !may(&dir, &meta(&dir).map_err(named)?, 0o1) {
            return Err(denied());
        }
        // The entry as it is now (never opened for reading if it is no regular file the peer
        // may read: opening a device can act), then opened, and both must be one inode.
        let entry = at(&dir, last, libc::O_PATH).map_err(open_failed)?;
        let seen = meta(&entry).map_err(named)?;
        if seen.file_type().is_symlink() {
            return Err(link());
        }
        if !seen.is_file() {
            return Err(format!("{}: not a regular file", path.display()));
        }
        // Files of procfs and sysfs: their mode bits say little (the kernel checks who asks
        // at open: /proc/PID/maps is 0444 yet only its process's owner may read it).
        if kernel_filesystem(&entry) {
            return Err(denied());
        }
        if !may(&entry, &seen, 0o4) {
            return Err(denied());
        }
        let f = std::fs::File::from(
            at(
                &dir,
                last,
                libc::O_RDONLY | libc::O_NONBLOCK | libc::O_NOCTTY,
            )
            .map_err(open_failed)?,
        );
        let m = f.metadata().map_err(named)?;
        if (m.dev(), m.ino()) != (seen.dev(), seen.ino()) {
            return Err(format!("{}: changed while it was opened", path.display()));
        }
        Ok(f)
    }

    /// Whether POSIX ACL `acl` grants this peer `bits` (4 read, 1 search) on a file of
    /// `meta`'s owner and group: the owner's entry, else a named user's (under the mask),
    /// else any of its groups' entries that grants them (under the mask; a group entry that
    /// matches but grants less denies), else others'.
    fn acl_allows(&self, acl: &[AclEntry], meta: &std::fs::Metadata, bits: u32) -> bool {
        let perm = |tag: u16| acl.iter().find(|e| e.tag == tag).map(|e| e.perm);
        let mask = perm(ACL_MASK).unwrap_or(7);
        if meta.uid() == self.uid {
            return perm(ACL_USER_OBJ).unwrap_or(0) & bits == bits;
        }
        if let Some(e) = acl.iter().find(|e| e.tag == ACL_USER && e.id == self.uid) {
            return e.perm & mask & bits == bits;
        }
        let mut matched = false;
        for e in acl {
            let mine = match e.tag {
                ACL_GROUP_OBJ => self.in_group(meta.gid()),
                ACL_GROUP => self.in_group(e.id),
                _ => false,
            };
            if mine {
                matched = true;
                if e.perm & mask & bits == bits {
                    return true;
                }
            }
        }
        if matched {
            return false;
        }
        perm(ACL_OTHER).unwrap_or(0) & bits == bits
    }

    fn of(s: &tokio::net::UnixStream) -> Option<Peer> {
        let c = s.peer_cred().ok()?;
        let groups = peer_groups(s).unwrap_or_default();
        Some(Peer {
            uid: c.uid(),
            gid: c.gid(),
            groups,
        })
    }
}

/// The supplementary groups of the peer of `s` as they were when it connected
/// (`SO_PEERGROUPS`, Linux 4.13): read from /proc by its pid instead, they could be another
/// process's once that pid was reused.
fn peer_groups(s: &tokio::net::UnixStream) -> Option<Vec<u32>> {
    use std::os::fd::AsRawFd as _;
    let mut groups = vec![0u32; 64];
    for _ in 0..2 {
        let mut len = (groups.len() * 4) as libc::socklen_t;
        // SAFETY: a valid socket; `groups` is writable for `len` bytes.
        let r = unsafe {
            libc::getsockopt(
                s.as_raw_fd(),
                libc::SOL_SOCKET,
                libc::SO_PEERGROUPS,
                groups.as_mut_ptr().cast(),
                &mut len,
            )
        };
        if r == 0 {
            groups.truncate(len as usize / 4);
            return Some(groups);
        }
        if std::io::Error::last_os_error().raw_os_error() != Some(libc::ERANGE) {
            return None;
        }
        // Too small: `len` now says how much the list needs.
        groups.resize((len as usize / 4).clamp(1, 65_536), 0);
    }
    None
}

/// A request: the command and its arguments, as typed.
#[derive(Debug, Serialize, Deserialize)]
pub struct Request {
    /// Command words, e.g. `["reload", "example.com."]`.
    pub args: Vec<String>,
}

/// A reply: success and the text to print.
#[derive(Debug, Serialize, Deserialize)]
pub struct Reply {
    /// The command succeeded.
    pub ok: bool,
    /// What to print.
    pub text: String,
}

impl Reply {
    /// A successful reply.
    pub fn ok(text: impl Into<String>) -> Reply {
        Reply {
            ok: true,
            text: text.into(),
        }
    }
    /// A failed reply.
    pub fn err(text: impl Into<String>) -> Reply {
        Reply {
            ok: false,
            text: text.into(),
        }
    }
}

/// Longest request line accepted.
pub const MAX_REQUEST: usize = 64 * 1024;

/// Control connections served at once; past it a new one is closed at once (counted).
pub const MAX_CONNECTIONS: usize = 64;

/// Says why a socket in `dir` could be another user's: the directory lets others write
/// and has no sticky bit, so anyone may remove or rename the server's socket and put their
/// own where clients look (and be sent every command, or answer a fake success).
pub fn open_to_others(dir: &Path) -> Option<String> {
    let dir = if dir.as_os_str().is_empty() {
        Path::new(".")
    } else {
        dir
    };
    let m = std::fs::metadata(dir).ok()?;
    let mode = m.permissions().mode();
    (mode & 0o002 != 0 && mode & 0o1000 == 0).then(|| {
        format!(
            "{}: any user may write in this directory (mode {:04o}, no sticky bit): anyone \
             could put a socket of their own where the control socket is looked for; use a \
             directory only the daemon's user may write, such as /run/palisade",
            dir.display(),
            mode & 0o7777
        )
    })
}

/// The user of the process serving `s` (`SO_PEERCRED`).
fn server_uid(s: &UnixStream) -> Option<u32> {
    use std::os::fd::AsRawFd;
    let mut cred = libc::ucred {
        pid: 0,
        uid: 0,
        gid: 0,
    };
    let mut len = std::mem::size_of::<libc::ucred>() as libc::socklen_t;
    // SAFETY: `cred` and `len` are valid for writes of a `ucred`, the size given.
    let r = unsafe {
        libc::getsockopt(
            s.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_PEERCRED,
            (&mut cred as *mut libc::ucred).cast(),
            &mut len,
        )
    };
    (r == 0).then_some(cred.uid)
}

/// Why a socket in `dir` served by `uid` is not talked to: a server of root or of the
/// caller's user is; another user's only where nobody but root and that user could have put
/// it — every directory from `dir` up owned by root or that user and writable by no other
/// user, sticky or not (`/run/palisade` is; `/tmp/palisade`, which anyone may have made
/// first, is not) — since `ctl` cannot know the daemon's user: another user who bound the
/// path first got root's commands and answered them.
fn served_by_another(dir: &Path, uid: Option<u32>) -> Option<String> {
    // SAFETY: geteuid has no preconditions.
    let me = unsafe { libc::geteuid() };
    let Some(u) = uid else {
        return Some("cannot tell which user serves it (SO_PEERCRED)".into());
    };
    if u == 0 || u == me {
        return None;
    }
    let dir = if dir.as_os_str().is_empty() {
        Path::new(".")
    } else {
        dir
    };
    let dir = match std::fs::canonicalize(dir) {
        Ok(d) => d,
        Err(e) => return Some(format!("{}: {e}", dir.display())),
    };
    for d in dir.ancestors() {
        let m = match std::fs::metadata(d) {
            Ok(m) => m,
            Err(e) => return Some(format!("{}: {e}", d.display())),
        };
        let (mode, owner) = (
            m.permissions().mode(),
            std::os::unix::fs::MetadataExt::uid(&m),
        );
        if owner != 0 && owner != u {
            return Some(format!(
                "served by uid {u}, but {} is uid {owner}'s: it may be anyone's; use a directory \
                 only root and the daemon's user may write, such as /run/palisade",
                d.display()
            ));
        }
        if mode & 0o002 != 0 {
            return Some(format!(
                "served by uid {u} in {}, a directory any user may make names in (mode {:04o}): \
                 not root's or yours, it may be anyone's; use a directory only the daemon's \
                 user may write, such as /run/palisade",
                d.display(),
                mode & 0o7777
            ));
        }
    }
    None
}

/// `args` with the FILE of `zone add ORIGIN FILE` and `block import FILE` made absolute
/// from the caller's directory: the server's own is another (a relative name read a file of
/// the daemon's directory, not the one the operator meant).
fn with_absolute_files(args: &[String]) -> Vec<String> {
    let mut out = args.to_vec();
    let at = match args
        .iter()
        .map(String::as_str)
        .collect::<Vec<_>>()
        .as_slice()
    {
        ["zone", "add", _, _, ..] => Some(3),
        ["block", "import", _, ..] => Some(2),
        _ => None,
    };
    if let Some(i) = at
        && Path::new(&out[i]).is_relative()
        && let Ok(abs) = std::path::absolute(&out[i])
    {
        out[i] = abs.to_string_lossy().into_owned();
    }
    out
}

/// Sends `args` to the server at `socket`; returns its reply.
pub fn call(socket: &Path, args: &[String], timeout: Duration) -> Result<Reply, String> {
    // A socket where anyone may have put it is not talked to: the command (a block, a key's
    // path) would go to whoever did, and a fake success come back.
    if let Some(why) = socket.parent().and_then(open_to_others) {
        return Err(format!("{}: not used: {why}", socket.display()));
    }
    let mut s = UnixStream::connect(socket).map_err(|e| {
        format!(
            "cannot connect to {}: {e} (is the server running?)",
            socket.display()
        )
    })?;
    // In a directory any user may write but with the sticky bit (/tmp), another user may
    // have bound the path first (the daemon then refused to start) and would get root's
    // commands and answer them: the server must be root or the caller's own user.
    if let Some(why) = socket
        .parent()
        .and_then(|d| served_by_another(d, server_uid(&s)))
    {
        return Err(format!("{}: not used: {why}", socket.display()));
    }
    s.set_read_timeout(Some(timeout)).ok();
    s.set_write_timeout(Some(timeout)).ok();
    let mut line = serde_json::to_string(&Request {
        args: with_absolute_files(args),
    })
    .map_err(|e| e.to_string())?;
    line.push('\n');
    // A server that refuses the peer answers before reading and closes: the send may then
    // fail while its reply waits to be read.
    let sent = s.write_all(line.as_bytes());
    let mut r = BufReader::new(s);
    let mut reply = String::new();
    let read = r.read_line(&mut reply);
    if let Err(e) = sent
        && reply.is_empty()
    {
        return Err(format!("cannot send to {}: {e}", socket.display()));
    }
    read.map_err(|e| format!("no reply from {}: {e}", socket.display()))?;
    serde_json::from_str(&reply).map_err(|e| format!("bad reply from server: {e}"))
}

/// A bound control socket: the listener, who may use it, and the file to remove when it is
/// dropped (if it is still this process's).
pub struct Listener {
    inner: tokio::net::UnixListener,
    path: PathBuf,
    /// (device, inode) of the socket file this process made.
    id: (u64, u64),
    /// The group admitted: its gid, or -1 for none (a reload may change it).
    group: Arc<std::sync::atomic::AtomicI64>,
    stats: Arc<ControlStats>,
}

/// What a reload may change of a bound control socket: its mode and admitted group.
#[derive(Debug, Clone)]
pub struct AccessHandle {
    path: PathBuf,
    group: Arc<std::sync::atomic::AtomicI64>,
}

impl AccessHandle {
    /// Applies `access` to the running socket: its file's mode and group, and the group
    /// admitted from the next connection on (a group removed loses its access at once).
    pub fn apply(&self, access: &Access) -> Result<(), String> {
        let gid = access.gid()?;
        let e = |e: std::io::Error| format!("{}: {e}", self.path.display());
        // The group first: when it cannot be set, nothing changed.
        // SAFETY: getegid has no preconditions.
        let owner_group = gid.unwrap_or_else(|| unsafe { libc::getegid() });
        std::os::unix::fs::lchown(&self.path, None, Some(owner_group)).map_err(e)?;
        std::fs::set_permissions(&self.path, std::fs::Permissions::from_mode(access.mode))
            .map_err(e)?;
        self.group
            .store(gid.map_or(-1, i64::from), Ordering::Relaxed);
        Ok(())
    }
}

impl std::fmt::Debug for Listener {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Listener")
            .field("path", &self.path)
            .finish_non_exhaustive()
    }
}

impl Listener {
    /// Its counters (register them with the daemon's metrics).
    pub fn stats(&self) -> Arc<ControlStats> {
        Arc::clone(&self.stats)
    }

    /// What a reload may change of it.
    pub fn access_handle(&self) -> AccessHandle {
        AccessHandle {
            path: self.path.clone(),
            group: Arc::clone(&self.group),
        }
    }
}

impl Drop for Listener {
    fn drop(&mut self) {
        // Only our own socket: a newer server may have taken the path since.
        if let Ok(m) = std::fs::symlink_metadata(&self.path)
            && (m.dev(), m.ino()) == self.id
        {
            let _ = std::fs::remove_file(&self.path);
        }
    }
}

/// Serves the control socket `l` until the task is dropped: each connection's peer is
/// checked, its request goes to `run` (the daemon's commands, with the peer) and its reply is
/// written back.
pub async fn serve<F, Fut>(l: Listener, run: F)
where
    F: Fn(Vec<String>, Peer) -> Fut + Clone + Send + 'static,
    Fut: std::future::Future<Output = Reply> + Send + 'static,
{
    use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt};
    let mut backoff = Duration::from_millis(10);
    let slots = Arc::new(tokio::sync::Semaphore::new(MAX_CONNECTIONS));
    let reserved = Arc::new(tokio::sync::Semaphore::new(RESERVED_CONNECTIONS));
    loop {
        let s = match l.inner.accept().await {
            Ok((s, _)) => {
                backoff = Duration::from_millis(10);
                s
            }
            Err(e) => {
                // Out of descriptors or memory: back off instead of spinning.
                l.stats.accept_errors.fetch_add(1, Ordering::Relaxed);
                crate::limited!(1, warn!(error = %e, "control socket: accept failed"));
                tokio::time::sleep(backoff).await;
                backoff = (backoff * 2).min(Duration::from_secs(1));
                continue;
            }
        };
        // Who it is, before it takes anything: a peer refused (reaching a socket of a lax
        // mode) is answered at once, without a task or a slot, so that refused users cannot
        // crowd out those allowed.
        let peer = Peer::of(&s);
        let group = u32::try_from(l.group.load(Ordering::Relaxed)).ok();
        let Some(p) = peer.filter(|p| p.allowed(group)) else {
            l.stats.refused.fetch_add(1, Ordering::Relaxed);
            crate::limited!(
                1,
                warn!(
                    uid = peer_uid(&s),
                    "control socket: connection refused (not root, the daemon's user nor in [control] group)"
                )
            );
            answer_now(
                &s,
                "permission denied: not root, the daemon's user nor in [control] group\n",
            );
            continue;
        };
        // Connections that never send their request, or never read their reply, must not
        // hold descriptors without end: each has REQUEST_TIMEOUT for either, and only so many
        // at once — with some kept for root and the daemon's user, so that group members
        // holding every shared slot cannot lock the operator out.
        let slot = match slots.clone().try_acquire_owned() {
            Ok(s) => s,
            Err(_) if p.reads_as_the_daemon() => match reserved.clone().try_acquire_owned() {
                Ok(s) => s,
                Err(_) => {
                    l.stats.busy.fetch_add(1, Ordering::Relaxed);
                    answer_now(&s, BUSY);
                    continue;
                }
            },
            Err(_) => {
                l.stats.busy.fetch_add(1, Ordering::Relaxed);
                answer_now(&s, BUSY);
                continue;
            }
        };
        let stats = Arc::clone(&l.stats);
        let run = run.clone();
        tokio::spawn(async move {
            let _slot = slot;
            let (rd, mut wr) = s.into_split();
            stats.accepted.fetch_add(1, Ordering::Relaxed);
            let mut line = String::new();
            let mut rd = tokio::io::BufReader::new(rd.take(MAX_REQUEST as u64));
            let too_long =
                match tokio::time::timeout(REQUEST_TIMEOUT, rd.read_line(&mut line)).await {
                    Ok(Ok(n)) => n as u64 >= MAX_REQUEST as u64 && !line.ends_with('\n'),
                    Ok(Err(e)) if e.kind() == std::io::ErrorKind::InvalidData => {
                        // Not UTF-8 (or cut inside a character at the bound): a bad request.
                        line = "\u{fffd}".into();
                        rd.get_ref().limit() == 0
                    }
                    Ok(Err(_)) => return,
                    Err(_) => {
                        stats.timeouts.fetch_add(1, Ordering::Relaxed);
                        return;
                    }
                };
            // Cut at the bound: refused whole, never run on what was read of it.
            let mut reply = if too_long {
                stats.too_long.fetch_add(1, Ordering::Relaxed);
                Reply::err(format!("bad request: longer than {MAX_REQUEST} bytes"))
            } else {
                match serde_json::from_str::<Request>(&line) {
                    Ok(req) => run(req.args, p).await,
                    Err(e) => Reply::err(format!("bad request: {e}")),
                }
            };
            // Whatever a reply quotes (a file name a member chose, a zone's error), no
            // control character but its line breaks and tabs reaches the operator's terminal.
            if reply
                .text
                .chars()
                .any(|c| c.is_control() && c != '\n' && c != '\t')
            {
                let mut out = String::with_capacity(reply.text.len() + 16);
                for c in reply.text.chars() {
                    if c.is_control() && c != '\n' && c != '\t' {
                        out.extend(c.escape_default());
                    } else {
                        out.push(c);
                    }
                }
                reply.text = out;
            }
            let mut out = serde_json::to_string(&reply).unwrap_or_default();
            out.push('\n');
            if tokio::time::timeout(REQUEST_TIMEOUT, wr.write_all(out.as_bytes()))
                .await
                .is_err()
            {
                stats.timeouts.fetch_add(1, Ordering::Relaxed);
                return;
            }
            if too_long {
                // The rest of the request read and dropped (bounded) before the close: closed
                // with it unread, the client's read of the answer failed on a reset.
                let _ = wr.shutdown().await;
                let mut rest = rd.into_inner().into_inner().take(DRAIN_MAX);
                let _ = tokio::time::timeout(
                    REQUEST_TIMEOUT,
                    tokio::io::copy(&mut rest, &mut tokio::io::sink()),
                )
                .await;
            }
        });
    }
}

/// Most of an over-long request read and dropped after its refusal.
const DRAIN_MAX: u64 = 16 << 20;

/// A command as an error may quote it: quoted and escaped (no control character reaches a
/// terminal), and at most 200 characters of it (a 64 KiB request is not echoed whole).
pub fn shown(args: &[String]) -> String {
    let all = args.join(" ");
    match all.char_indices().nth(200) {
        Some((i, _)) => format!("{:?}... ({} bytes)", &all[..i], all.len()),
        None => format!("{all:?}"),
    }
}

/// `text` with every control character escaped (`\n`, `\u{1b}`): text that others chose
/// (a block's reason, a peer's node id) cannot forge lines or drive a terminal.
pub fn printable(text: &str) -> std::borrow::Cow<'_, str> {
    if !text.chars().any(char::is_control) {
        return std::borrow::Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() + 8);
    for c in text.chars() {
        if c.is_control() {
            out.extend(c.escape_default());
        } else {
            out.push(c);
        }
    }
    std::borrow::Cow::Owned(out)
}

/// What a connection turned away for want of a slot is told.
const BUSY: &str = "busy: too many control connections open; try again\n";

/// Control slots kept for root and the daemon's own user beyond [`MAX_CONNECTIONS`].
pub const RESERVED_CONNECTIONS: usize = 8;

/// The peer's uid, for a log line (None when the kernel does not say).
fn peer_uid(s: &tokio::net::UnixStream) -> Option<u32> {
    s.peer_cred().ok().map(|c| c.uid())
}

/// Answers `message` as an error reply, if the socket takes it now, and lets the connection
/// go (never waiting for a peer that does not read). Sent on the descriptor itself: a
/// freshly accepted stream's readiness is not known to the runtime yet, and its `try_write`
/// would refuse without trying.
fn answer_now(s: &tokio::net::UnixStream, message: &str) {
    use std::os::fd::AsRawFd as _;
    let mut out = serde_json::to_string(&Reply::err(message.to_string())).unwrap_or_default();
    out.push('\n');
    // SAFETY: a valid, open socket descriptor and a buffer of `out.len()` bytes.
    let _ = unsafe {
        libc::send(
            s.as_raw_fd(),
            out.as_ptr().cast(),
            out.len(),
            libc::MSG_DONTWAIT | libc::MSG_NOSIGNAL,
        )
    };
}

/// Binds the control socket at `path` with `access`'s mode and group, whatever the umask. A
/// stale socket left by a crash is replaced; a socket another live server answers on is an
/// error that leaves it alone (as is a path that is not a socket).
pub fn bind(path: &Path, access: &Access) -> std::io::Result<Listener> {
    use std::os::unix::fs::FileTypeExt as _;
    let other = |m: String| std::io::Error::other(m);
    let group = access.gid().map_err(other)?;
    if let Ok(m) = std::fs::symlink_metadata(path) {
        if UnixStream::connect(path).is_ok() {
            return Err(std::io::Error::new(
                std::io::ErrorKind::AddrInUse,
                format!("{}: another server answers on it", path.display()),
            ));
        }
        if !m.file_type().is_socket() {
            return Err(other(format!(
                "{}: exists and is not a socket (left alone)",
                path.display()
            )));
        }
        std::fs::remove_file(path)?;
    }
    if let Some(dir) = path.parent()
        && let Some(why) = open_to_others(dir)
    {
        return Err(other(why));
    }
    // A directory another user owns (made before the daemon first started) is theirs to
    // change: its owner could swap the socket.
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty())
        && let Ok(m) = std::fs::metadata(dir)
    {
        // SAFETY: geteuid has no preconditions.
        let me = unsafe { libc::geteuid() };
        if m.uid() != 0 && m.uid() != me {
            return Err(other(format!(
                "{}: owned by uid {}, neither root nor this process's user: its owner could put a socket of their own where the control socket is looked for",
                dir.display(),
                m.uid()
            )));
        }
    }
    if let Some(dir) = path.parent() {
        // Made 0755 whatever the umask (the peers are checked at the socket): a directory
        // others may write to would let them put a socket of their own where clients look.
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o755)
            .create(dir)?;
    }
    let inner = tokio::net::UnixListener::bind(path)?;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(access.mode))?;
    if let Some(g) = group {
        std::os::unix::fs::lchown(path, None, Some(g))?;
    }
    let m = std::fs::symlink_metadata(path)?;
    Ok(Listener {
        inner,
        path: path.to_path_buf(),
        id: (m.dev(), m.ino()),
        group: Arc::new(std::sync::atomic::AtomicI64::new(
            group.map_or(-1, i64::from),
        )),
        stats: Arc::default(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A socket directory anyone may write (and no sticky bit) is refused by the server and
    /// by the client: anyone could put a socket of their own there.
    #[tokio::test]
    async fn a_socket_where_anyone_may_write_is_neither_served_nor_used() {
        let d = tempfile::tempdir().unwrap();
        let path = d.path().join("ctl.sock");
        let access = Access {
            mode: 0o660,
            group: None,
        };
        std::fs::set_permissions(d.path(), std::fs::Permissions::from_mode(0o777)).unwrap();
        let Err(e) = bind(&path, &access) else {
            panic!("bound in a directory anyone may write");
        };
        assert!(e.to_string().contains("any user may write"), "{e}");
        // A socket someone put there is not talked to.
        let _theirs = std::os::unix::net::UnixListener::bind(&path).unwrap();
        let e = call(&path, &["status".into()], Duration::from_secs(1)).unwrap_err();
        assert!(e.contains("not used"), "{e}");
        std::fs::remove_file(&path).unwrap();
        // With the sticky bit (as /tmp), others cannot remove or rename the server's socket.
        std::fs::set_permissions(d.path(), std::fs::Permissions::from_mode(0o1777)).unwrap();
        assert!(bind(&path, &access).is_ok());
        std::fs::set_permissions(d.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
        assert_eq!(open_to_others(d.path()), None);
    }

    #[test]
    fn quoted_text_carries_no_control_character_and_no_more_than_its_bound() {
        assert_eq!(printable("plain text"), "plain text");
        assert_eq!(
            printable("a\nfake row\t\u{1b}[31m"),
            "a\\nfake row\\t\\u{1b}[31m"
        );
        let long = vec!["x".repeat(70_000)];
        let s = shown(&long);
        assert!(s.len() < 300 && s.ends_with("(70000 bytes)"), "{s}");
        assert_eq!(shown(&["a\nb".into()]), "\"a\\nb\"");
    }

    /// A file named by a user other than root or the daemon's is opened only through
    /// directories that user may search, never through a symbolic link, and only if the
    /// user may read it.
    #[test]
    fn a_peer_opens_only_what_it_could_and_follows_no_link() {
        // SAFETY: geteuid has no preconditions.
        if unsafe { libc::geteuid() } != 0 {
            eprintln!("SKIPPED: needs root (files of another user)");
            return;
        }
        let d = tempfile::tempdir().unwrap();
        std::fs::set_permissions(d.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
        let nobody = Peer {
            uid: 65534,
            gid: 65534,
            groups: Vec::new(),
        };
        let open = d.path().join("open.zone");
        std::fs::write(&open, "x").unwrap();
        std::fs::set_permissions(&open, std::fs::Permissions::from_mode(0o644)).unwrap();
        let closed = d.path().join("closed.zone");
        std::fs::write(&closed, "secret").unwrap();
        std::fs::set_permissions(&closed, std::fs::Permissions::from_mode(0o600)).unwrap();
        let shut = d.path().join("shut");
        std::fs::create_dir(&shut).unwrap();
        std::fs::set_permissions(&shut, std::fs::Permissions::from_mode(0o700)).unwrap();
        let inside = shut.join("inside.zone");
        std::fs::write(&inside, "secret").unwrap();
        std::fs::set_permissions(&inside, std::fs::Permissions::from_mode(0o644)).unwrap();
        let link = d.path().join("link.zone");
        std::os::unix::fs::symlink(&open, &link).unwrap();
        assert!(nobody.open(&open).is_ok());
        for (p, why) in [
            (&closed, "permission denied"),
            (&inside, "permission denied"),
            (&link, "symbolic link"),
            (&shut, "not a regular file"),
        ] {
            let e = nobody.open(p).unwrap_err();
            assert!(e.contains(why), "{}: {e}", p.display());
        }
        // Through a parent reached by `..` from a directory the user may not search: no.
        let via = shut.join("..").join("open.zone");
        assert!(nobody.open(&via).unwrap_err().contains("permission denied"));
        // Root opens what it names, links included.
        assert!(Peer::this_process().open(&link).is_ok());
    }

    #[test]
    fn files_named_relative_to_the_caller_are_sent_whole() {
        let v = |a: &[&str]| a.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        let cwd = std::env::current_dir().unwrap();
        let got = with_absolute_files(&v(&["zone", "add", "a.test.", "z/a.zone"]));
        assert_eq!(got[3], cwd.join("z/a.zone").to_string_lossy());
        let got = with_absolute_files(&v(&["block", "import", "list.txt", "--ttl", "5"]));
        assert_eq!(got[2], cwd.join("list.txt").to_string_lossy());
        assert_eq!(got[3..], v(&["--ttl", "5"]));
        for same in [
            v(&["zone", "add", "a.test.", "/etc/a.zone"]),
            v(&["block", "add", "192.0.2.0/24"]),
            v(&["zone", "remove", "a.test."]),
        ] {
            assert_eq!(with_absolute_files(&same), same);
        }
    }
}
