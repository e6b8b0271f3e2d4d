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
//! Files a command names are opened only as the peer could have ([`Peer::may_read`]), and
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
                "Control connections closed before their request arrived.",
            ),
            (
                "accept_errors",
                l(&self.accept_errors),
                "Failed accepts on the control socket (backed off).",
            ),
            (
                "busy",
                l(&self.busy),
                "Control connections closed at once: MAX_CONNECTIONS (64) were being served.",
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

/// The process at the other end of a control connection (`SO_PEERCRED`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Peer {
    /// Its user id.
    pub uid: u32,
    /// Its group id.
    pub gid: u32,
    /// Its supplementary groups (from /proc; empty when unknown).
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

    /// Checks that this peer could read `path` itself: search permission on every directory
    /// above it and read permission on it, by its mode bits (root may always). The message
    /// names the path, never its contents.
    pub fn may_read(&self, path: &Path) -> Result<(), String> {
        if self.uid == 0 {
            return Ok(());
        }
        let abs = std::path::absolute(path).map_err(|e| format!("{}: {e}", path.display()))?;
        let may = |meta: &std::fs::Metadata, bits: u32| -> bool {
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
        let denied = || {
            format!(
                "{}: permission denied (for the user who asked)",
                path.display()
            )
        };
        // The path as given, and as the daemon will open it (symbolic links followed): a link
        // in a directory of the user's own to a file in one the user may not enter must not
        // pass on the link's path alone.
        let real = std::fs::canonicalize(&abs).map_err(|e| format!("{}: {e}", path.display()))?;
        for p in [&abs, &real] {
            for dir in p.ancestors().skip(1) {
                let m = std::fs::metadata(dir).map_err(|_| denied())?;
                if !may(&m, 0o1) {
                    return Err(denied());
                }
            }
        }
        let m = std::fs::metadata(&real).map_err(|e| format!("{}: {e}", path.display()))?;
        if !m.is_file() || !may(&m, 0o4) {
            return Err(denied());
        }
        Ok(())
    }

    fn of(s: &tokio::net::UnixStream) -> Option<Peer> {
        let c = s.peer_cred().ok()?;
        let groups = c
            .pid()
            .and_then(|pid| std::fs::read_to_string(format!("/proc/{pid}/status")).ok())
            .and_then(|t| {
                t.lines().find_map(|l| l.strip_prefix("Groups:")).map(|g| {
                    g.split_whitespace()
                        .filter_map(|x| x.parse().ok())
                        .collect()
                })
            })
            .unwrap_or_default();
        Some(Peer {
            uid: c.uid(),
            gid: c.gid(),
            groups,
        })
    }
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

/// Sends `args` to the server at `socket`; returns its reply.
pub fn call(socket: &Path, args: &[String], timeout: Duration) -> Result<Reply, String> {
    let mut s = UnixStream::connect(socket).map_err(|e| {
        format!(
            "cannot connect to {}: {e} (is the server running?)",
            socket.display()
        )
    })?;
    s.set_read_timeout(Some(timeout)).ok();
    s.set_write_timeout(Some(timeout)).ok();
    let mut line = serde_json::to_string(&Request {
        args: args.to_vec(),
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
        let Ok(slot) = slots.clone().try_acquire_owned() else {
            // Connections that never send their request must not hold descriptors without
            // end: each has REQUEST_TIMEOUT, and only so many at once.
            l.stats.busy.fetch_add(1, Ordering::Relaxed);
            continue;
        };
        let peer = Peer::of(&s);
        let stats = Arc::clone(&l.stats);
        let group = u32::try_from(l.group.load(Ordering::Relaxed)).ok();
        let run = run.clone();
        tokio::spawn(async move {
            let _slot = slot;
            let (rd, mut wr) = s.into_split();
            let reply = match peer {
                Some(p) if p.allowed(group) => {
                    stats.accepted.fetch_add(1, Ordering::Relaxed);
                    let mut line = String::new();
                    let mut rd = tokio::io::BufReader::new(rd.take(MAX_REQUEST as u64));
                    match tokio::time::timeout(REQUEST_TIMEOUT, rd.read_line(&mut line)).await {
                        Ok(Ok(_)) => {}
                        Ok(Err(e)) if e.kind() == std::io::ErrorKind::InvalidData => {
                            line = "\u{fffd}".into(); // not UTF-8: answered as a bad request
                        }
                        Ok(Err(_)) => return,
                        Err(_) => {
                            stats.timeouts.fetch_add(1, Ordering::Relaxed);
                            return;
                        }
                    }
                    match serde_json::from_str::<Request>(&line) {
                        Ok(req) => run(req.args, p).await,
                        Err(e) => Reply::err(format!("bad request: {e}")),
                    }
                }
                p => {
                    stats.refused.fetch_add(1, Ordering::Relaxed);
                    crate::limited!(
                        1,
                        warn!(
                            uid = p.as_ref().map(|p| p.uid),
                            "control socket: connection refused (not root, the daemon's user nor in [control] group)"
                        )
                    );
                    Reply::err(
                        "permission denied: not root, the daemon's user nor in [control] group\n",
                    )
                }
            };
            let mut out = serde_json::to_string(&reply).unwrap_or_default();
            out.push('\n');
            let _ = wr.write_all(out.as_bytes()).await;
        });
    }
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
