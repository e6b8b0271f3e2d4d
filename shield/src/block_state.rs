//! This node's own blocks kept on disk (`[block] state_file`): the decisions of its daemons
//! and its operator survive a restart whatever Redis does. Redis carries them to the fleet
//! and brings them back after a restart — unless it was away when they were made, or lost
//! its data while the node was down; then a block an operator was told is in force for a day
//! would be gone everywhere. The file holds only entries of this node's own origins
//! ([`Origin::Local`], [`Origin::Operator`]), one JSON object a line, written whole and
//! renamed over the last (never half written), at most once a second while they change.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use ipnet::IpNet;

use crate::block::{BlockEntry, BlockMap, Change, Delivery, Origin};

/// Least time between two writes while entries change.
const WRITE_EVERY: Duration = Duration::from_secs(1);

/// Why the state file's last write failed, while it fails (one keeper per process).
static FAILING: std::sync::Mutex<Option<String>> = std::sync::Mutex::new(None);

/// Why the block state file cannot be written now, if it cannot (a full disk): what an
/// operator's `block add` or `block del` is told, as its change would not survive a
/// restart.
pub fn failing() -> Option<String> {
    FAILING.lock().unwrap_or_else(|e| e.into_inner()).clone()
}

fn set_failing(why: Option<String>) {
    *FAILING.lock().unwrap_or_else(|e| e.into_inner()) = why;
}

/// Entries restored from the file: how many came back, how many were past their expiry,
/// lines that were no entry.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Restored {
    /// Entries put back in the map.
    pub restored: usize,
    /// Entries that expired while the node was down.
    pub expired: usize,
    /// Lines that did not parse (a file edited by hand, cut by a full disk).
    pub bad_lines: usize,
    /// Entries today's policy refuses (never_block, min_prefix: add them again with --force).
    pub refused: usize,
}

/// An entry of this node's own that blocks: a suspect (unproven evidence, which forged
/// packets can make by the hundred thousand) is not kept, as Redis and XDP keep none.
fn own(e: &BlockEntry) -> bool {
    matches!(e.origin, Origin::Local | Origin::Operator) && e.is_proven()
}

/// Puts back the entries kept in `path` (a missing file is none): this node's own, not yet
/// expired, as they were decided (an operator's `--force` included).
pub fn restore(map: &BlockMap, path: &Path) -> Result<Restored, String> {
    let text = match crate::files::read_text(path, crate::files::LIST_MAX) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Restored::default()),
        Err(e) => return Err(format!("{}: {e}", path.display())),
    };
    let now = crate::clock::unix_ms();
    let mut out = Restored::default();
    let mut entries = Vec::new();
    for line in text.lines().filter(|l| !l.trim().is_empty()) {
        match serde_json::from_str::<BlockEntry>(line) {
            Ok(e) if !own(&e) => out.bad_lines += 1,
            Ok(e) if e.is_expired(now) => out.expired += 1,
            Ok(e) => entries.push(e),
            Err(_) => out.bad_lines += 1,
        }
    }
    // Under today's policy: a never_block added since keeps an entry out (an operator's
    // `--force` is not recorded; such a block refused now is said, to be added again).
    let n = entries.len();
    let refused = map.insert_batch(entries).refused;
    out.restored = n - refused.min(n);
    out.refused = refused;
    Ok(out)
}

/// Restores `path` into `map` and keeps it from now on, saying what came back; None (said
/// at error level) when the file cannot be read or kept.
pub fn start(map: &BlockMap, path: &Path) -> Option<Keeper> {
    match restore(map, path) {
        Ok(r) => tracing::info!(
            file = %path.display(),
            restored = r.restored,
            expired = r.expired,
            bad_lines = r.bad_lines,
            refused = r.refused,
            "this node's blocks restored from the state file (refused: by today's policy; add \
             them again with ctl block add --force)"
        ),
        Err(e) => {
            tracing::error!("block state file not read, not kept: {e}");
            return None;
        }
    }
    match Keeper::spawn(map, path.to_path_buf()) {
        Ok(k) => Some(k),
        Err(e) => {
            tracing::error!(file = %path.display(), error = %e, "block state file not kept");
            None
        }
    }
}

/// Writes `entries` to `path`: a new file beside it, synced, renamed over it (mode 0640).
fn write(path: &Path, entries: &HashMap<IpNet, BlockEntry>) -> std::io::Result<()> {
    let mut buf = Vec::with_capacity(entries.len() * 160);
    for e in entries.values() {
        serde_json::to_writer(&mut buf, e).map_err(std::io::Error::other)?;
        buf.push(b'\n');
    }
    crate::files::write_atomic(path, &buf, 0o640)
}

/// Keeps `path` in step with the map's own entries, on a thread of its own.
pub struct Keeper {
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl Keeper {
    /// Starts keeping `map`'s own entries in `path`.
    pub fn spawn(map: &BlockMap, path: PathBuf) -> std::io::Result<Keeper> {
        let stop = Arc::new(AtomicBool::new(false));
        let mut feed = map.subscribe("state_file");
        let halt = Arc::clone(&stop);
        let thread = std::thread::Builder::new()
            .name("block-state".into())
            .spawn(move || {
                let mut own_entries: HashMap<IpNet, BlockEntry> = HashMap::new();
                let mut dirty = false;
                let mut written = Instant::now() - WRITE_EVERY;
                loop {
                    let stopping = halt.load(Ordering::Relaxed);
                    while let Some(d) = feed.poll(4096) {
                        dirty = true;
                        match d {
                            Delivery::Resync(all) => {
                                own_entries = all
                                    .into_iter()
                                    .filter(own)
                                    .map(|e| (e.net, e))
                                    .collect();
                            }
                            Delivery::Changes(cs) => {
                                for c in cs {
                                    match c {
                                        Change::Upsert(e) if own(&e) => {
                                            own_entries.insert(e.net, e);
                                        }
                                        // A peer's decision over one of ours: ours no longer
                                        // stands for it.
                                        Change::Upsert(e) => {
                                            own_entries.remove(&e.net);
                                        }
                                        Change::Remove { net, .. } => {
                                            own_entries.remove(&net);
                                        }
                                    }
                                }
                            }
                        }
                    }
                    if dirty && (stopping || written.elapsed() >= WRITE_EVERY) {
                        match write(&path, &own_entries) {
                            Ok(()) => {
                                dirty = false;
                                set_failing(None);
                            }
                            Err(e) => {
                                set_failing(Some(format!("{}: {e}", path.display())));
                                crate::limited!(
                                    10,
                                    error!(file = %path.display(), error = %e, "block state file not written: this node's blocks would not survive a restart")
                                )
                            }
                        }
                        written = Instant::now();
                    }
                    if stopping {
                        return;
                    }
                    feed.wait_timeout(WRITE_EVERY);
                }
            })?;
        Ok(Keeper {
            stop,
            thread: Some(thread),
        })
    }

    /// Writes what changed last and stops.
    pub fn stop(mut self) {
        self.halt();
    }

    fn halt(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

impl Drop for Keeper {
    fn drop(&mut self) {
        self.halt();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::block::{BlockConfig, Evidence};

    fn net(s: &str) -> IpNet {
        s.parse().unwrap()
    }

    /// A node's own entries (local and operator) come back after a restart, under today's
    /// policy (a forced /8 is refused and counted); a peer's, a suspect, an expired one and
    /// junk lines do not.
    /// An operator's block made while the state file cannot be written (a full disk) is
    /// made, and said not to survive a restart: it was answered as any other.
    #[test]
    fn a_change_the_state_file_cannot_keep_is_said() {
        let dir = tempfile::tempdir().unwrap();
        // The state file's directory is a file: every write fails.
        std::fs::write(dir.path().join("not-a-dir"), b"").unwrap();
        let path = dir.path().join("not-a-dir").join("blocks.state");
        let a = BlockMap::new(BlockConfig::default());
        let _keeper = Keeper::spawn(&a, path).unwrap();
        let peer = crate::control::Peer::this_process();
        let r = crate::control::block::command(&a, &["add", "10.9.0.0/24"], &peer);
        assert!(r.ok, "{}", r.text);
        let deadline = Instant::now() + Duration::from_secs(5);
        while failing().is_none() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(20));
        }
        assert!(failing().is_some_and(|w| w.contains("not-a-dir")));
        let r = crate::control::block::command(&a, &["del", "10.9.0.0/24"], &peer);
        assert!(
            r.ok && r.text.contains("will not survive a restart"),
            "{}",
            r.text
        );
        let r = crate::control::block::command(&a, &["list"], &peer);
        assert!(!r.text.contains("will not survive"), "{}", r.text);
    }

    #[test]
    fn own_entries_survive_a_restart_and_nothing_else_comes_back() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("blocks.state");
        let a = BlockMap::new(BlockConfig::default());
        let keeper = Keeper::spawn(&a, path.clone()).unwrap();
        let now = crate::clock::unix_ms();
        let hour = Duration::from_secs(3600);
        a.insert(BlockEntry::operator(
            net("10.0.0.0/24"),
            hour,
            now,
            "by hand",
        ));
        a.insert_forced(BlockEntry::operator(net("11.0.0.0/8"), hour, now, "wide"));
        a.insert(BlockEntry::with_ttl(
            net("192.0.2.1/32"),
            hour,
            now,
            "flood",
            Origin::Local,
            Evidence::Tcp,
        ));
        a.insert(BlockEntry::with_ttl(
            net("198.51.100.1/32"),
            hour,
            now,
            "peer's",
            Origin::Peer,
            Evidence::Tcp,
        ));
        // A suspect (forged packets can make them by the hundred thousand): not kept.
        a.insert(BlockEntry::with_ttl(
            net("203.0.113.1/32"),
            hour,
            now,
            "suspect",
            Origin::Local,
            Evidence::Udp,
        ));
        keeper.stop();
        let text = std::fs::read_to_string(&path).unwrap();
        assert_eq!(text.lines().count(), 3, "{text}");
        // A line cut short and an expired entry beside them.
        let mut old = BlockEntry::operator(net("10.9.0.0/24"), hour, now, "old");
        old.expires_ms = now - 1;
        std::fs::write(
            &path,
            format!(
                "{text}{}\n{{\"net\":\"10.8",
                serde_json::to_string(&old).unwrap()
            ),
        )
        .unwrap();
        let b = BlockMap::new(BlockConfig::default());
        let r = restore(&b, &path).unwrap();
        assert_eq!(
            r,
            Restored {
                restored: 2,
                expired: 1,
                bad_lines: 1,
                refused: 1
            }
        );
        for n in ["10.0.0.0/24", "192.0.2.1/32"] {
            assert!(b.get(net(n)).is_some(), "{n}");
        }
        for n in ["11.0.0.0/8", "198.51.100.1/32", "203.0.113.1/32"] {
            assert!(b.get(net(n)).is_none(), "{n}");
        }
        // A missing file is no entry.
        assert_eq!(
            restore(&b, &dir.path().join("none")).unwrap(),
            Restored::default()
        );
    }
}
