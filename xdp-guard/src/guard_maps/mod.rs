//! The kernel maps of one guard as a block table: install and remove blocks (in batches),
//! list them, sweep expired ones, write the rate-limit config and read the counters.
//!
//! Routing: a /32 or /128 goes to the address hash of its family; any shorter prefix goes to
//! the prefix trie (LPM lookups slow down as the trie grows, so it is sized small and long
//! lists of single addresses never land in it).
//!
//! Writers: each entry holds one expiry per writer slot ([`crate::maps::BlockValue`]), and a
//! handle writes only its own slot ([`GuardMaps::with_slot`]): dnsd, http-front and the
//! operator can block the same address, each until its own time, and a resync of one
//! never lifts another's blocks. Every change is a read-modify-write made under the writers'
//! lock: a process-wide mutex and an `flock` of the pin directory, shared by every process
//! that opened the pins.
//!
//! A [`GuardMaps`] is a set of file descriptors: cheap to clone, usable from any thread and any
//! network namespace, and obtainable either from a loaded program ([`crate::XdpGuard::maps`])
//! or from the pins of another process ([`GuardMaps::open_pinned`]).

use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::path::Path;
use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Mutex, MutexGuard};

use aya::maps::MapData;
use tracing::warn;

use crate::Error;
use crate::maps::{ALL_MAPS, BlockValue, GuardConfig, RawCounters, SLOTS};
use crate::sys;

mod blocks;
mod counters;
mod keys;
mod lists;

pub(crate) use blocks::coalesce;
pub use blocks::{ApplyReport, KernelBlock, KernelEntry};
pub use counters::Counters;
pub use keys::BlockMapKind;

/// Elements per batch syscall.
const CHUNK: usize = 4096;

/// Bytes of a block value (one expiry per writer slot).
const VS: usize = size_of::<BlockValue>();
/// Nested prefixes a source's trie lookup walks (`GUARD_NEST_MAX` in `guard.h`).
const NEST_MAX: usize = 4;

/// Changes to one address hash from which the whole map is read in batches instead of key by
/// key (prefix tries are always read whole: a lookup there is longest-match, not exact).
const DUMP_MIN: usize = 256;

const BPF_MAP_TYPE_HASH: u32 = 1;
const BPF_MAP_TYPE_ARRAY: u32 = 2;
const BPF_MAP_TYPE_PERCPU_ARRAY: u32 = 6;
const BPF_MAP_TYPE_LRU_PERCPU_HASH: u32 = 10;
const BPF_MAP_TYPE_LPM_TRIE: u32 = 11;

/// What a map must look like: (type, key size, value size), in [`ALL_MAPS`] order.
const SPECS: [(u32, u32, u32); 17] = [
    (BPF_MAP_TYPE_HASH, 4, VS as u32),
    (BPF_MAP_TYPE_HASH, 16, VS as u32),
    (BPF_MAP_TYPE_LPM_TRIE, 8, VS as u32),
    (BPF_MAP_TYPE_LPM_TRIE, 20, VS as u32),
    (BPF_MAP_TYPE_LRU_PERCPU_HASH, 16, 16),
    (BPF_MAP_TYPE_ARRAY, 4, size_of::<GuardConfig>() as u32),
    (
        BPF_MAP_TYPE_PERCPU_ARRAY,
        4,
        size_of::<RawCounters>() as u32,
    ),
    (BPF_MAP_TYPE_LPM_TRIE, 8, 4),
    (BPF_MAP_TYPE_LPM_TRIE, 20, 4),
    (
        BPF_MAP_TYPE_HASH,
        size_of::<crate::maps::AnsKey>() as u32,
        size_of::<crate::maps::Answer>() as u32,
    ),
    (
        BPF_MAP_TYPE_HASH,
        size_of::<crate::maps::AnsAddrKey>() as u32,
        size_of::<crate::maps::AnsAddr>() as u32,
    ),
    (
        BPF_MAP_TYPE_PERCPU_ARRAY,
        4,
        crate::maps::ANS_SCRATCH_SIZE as u32,
    ),
    // guard_ans_rate: source prefix and the reply's account; a bucket.
    (BPF_MAP_TYPE_LRU_PERCPU_HASH, 24, 24),
    (BPF_MAP_TYPE_LPM_TRIE, 20, 4),
    (BPF_MAP_TYPE_LPM_TRIE, 20, 4),
    (BPF_MAP_TYPE_LPM_TRIE, 20, 8),
    // guard_never: a bit per writer slot.
    (BPF_MAP_TYPE_LPM_TRIE, 20, 4),
];

/// Index of the service-address trie in [`ALL_MAPS`].
const SVC: usize = 13;

/// Index of the proxy trie in [`ALL_MAPS`].
const PROXY: usize = 14;

/// Index of the suspects' trie in [`ALL_MAPS`].
const SUSPECT: usize = 15;

/// Index of the never-block trie in [`ALL_MAPS`].
const NEVER: usize = 16;

/// Index of the answer map in [`ALL_MAPS`] (the address map follows).
pub(crate) const ANSWERS: usize = 9;

/// Index of the IPv4 allow trie in [`ALL_MAPS`] (the IPv6 one follows).
const ALLOW_V4: usize = 7;

struct Inner {
    /// In [`ALL_MAPS`] order.
    fds: Vec<OwnedFd>,
    /// Capacity of each map, in [`ALL_MAPS`] order.
    capacity: Vec<u32>,
    /// Per block map: batch commands work (cleared on EINVAL/ENOTSUPP, then singles are used).
    batch_ok: [AtomicBool; 4],
    ncpus: usize,
    /// The pin directory, `flock`ed around every read-modify-write (other processes write too).
    pin_dir: Option<OwnedFd>,
    /// The writers of this process, one at a time (an `flock` does not exclude its own holder).
    local: Mutex<()>,
}

/// The writers' lock: held for one read-modify-write.
struct WriteLock<'a> {
    _local: MutexGuard<'a, ()>,
    dir: Option<BorrowedFd<'a>>,
}

impl Drop for WriteLock<'_> {
    fn drop(&mut self) {
        if let Some(d) = self.dir {
            // SAFETY: d is an open descriptor this process holds the lock on.
            unsafe { libc::flock(d.as_raw_fd(), libc::LOCK_UN) };
        }
    }
}

/// Handle on the kernel maps of one guard (see the module docs).
#[derive(Clone)]
pub struct GuardMaps {
    inner: Arc<Inner>,
    /// The writer slot this handle sets and clears.
    slot: usize,
}

impl std::fmt::Debug for GuardMaps {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GuardMaps")
            .field("capacity", &self.inner.capacity)
            .field("slot", &self.slot)
            .finish_non_exhaustive()
    }
}

fn errno(e: &io::Error) -> i32 {
    e.raw_os_error().unwrap_or(0)
}

fn is_full(e: &io::Error) -> bool {
    matches!(errno(e), libc::E2BIG | libc::ENOSPC)
}

fn is_unsupported(e: &io::Error) -> bool {
    // ENOTSUPP (524) is the kernel-internal "not supported" that leaks to userspace.
    matches!(errno(e), libc::EINVAL | libc::EOPNOTSUPP | 524)
}

/// Opens `dir` for `flock` (a directory on bpffs takes locks like any file).
fn open_dir(dir: &Path) -> Result<OwnedFd, Error> {
    std::fs::File::open(dir)
        .map(OwnedFd::from)
        .map_err(|source| Error::Bpffs {
            path: dir.to_path_buf(),
            source,
        })
}

impl GuardMaps {
    /// Wraps the maps of a loaded program, checking their layout; `pin_dir` is where they are
    /// pinned (its `flock` is the writers' lock), when they are.
    pub(crate) fn from_map_data(
        maps: Vec<(&'static str, &MapData)>,
        pin_dir: Option<&Path>,
    ) -> Result<Self, Error> {
        let mut fds = Vec::with_capacity(ALL_MAPS.len());
        let mut capacity = Vec::with_capacity(ALL_MAPS.len());
        for (i, name) in ALL_MAPS.iter().enumerate() {
            let (_, data) = maps
                .iter()
                .find(|(n, _)| n == name)
                .ok_or_else(|| Error::Config(format!("program has no map {name}")))?;
            capacity.push(check_spec(i, data, None)?);
            let fd = data
                .fd()
                .as_fd()
                .try_clone_to_owned()
                .map_err(|source| syscall_err("dup", name, source))?;
            fds.push(fd);
        }
        let dir = pin_dir.map(open_dir).transpose()?;
        Self::new(fds, capacity, dir)
    }

    /// Opens the maps pinned under `dir` by the process that loaded the program (`xdp-guard
    /// attach`, or a daemon attached itself), checking their layout: a map of an older layout
    /// is an error that says so ([`Error::PinnedMismatch`]).
    pub fn open_pinned(dir: &Path) -> Result<Self, Error> {
        let mut fds = Vec::with_capacity(ALL_MAPS.len());
        let mut capacity = Vec::with_capacity(ALL_MAPS.len());
        for (i, name) in ALL_MAPS.iter().enumerate() {
            let path = dir.join(name);
            let data = MapData::from_pin(&path).map_err(|e| Error::Map {
                name,
                source: Box::new(e),
            })?;
            capacity.push(check_spec(i, &data, Some(&path))?);
            let fd = data
                .fd()
                .as_fd()
                .try_clone_to_owned()
                .map_err(|source| syscall_err("dup", name, source))?;
            fds.push(fd);
        }
        Self::new(fds, capacity, Some(open_dir(dir)?))
    }

    fn new(fds: Vec<OwnedFd>, capacity: Vec<u32>, pin_dir: Option<OwnedFd>) -> Result<Self, Error> {
        let ncpus = sys::possible_cpus().map_err(|source| syscall_err("ncpus", "cpu", source))?;
        Ok(Self {
            inner: Arc::new(Inner {
                fds,
                capacity,
                batch_ok: std::array::from_fn(|_| AtomicBool::new(true)),
                ncpus,
                pin_dir,
                local: Mutex::new(()),
            }),
            slot: crate::maps::SLOT_OPERATOR,
        })
    }

    /// The same maps, writing writer slot `slot` ([`crate::maps::SLOT_DNSD`],
    /// [`crate::maps::SLOT_HTTP_FRONT`], ...): its blocks and resyncs touch that slot only.
    pub fn with_slot(mut self, slot: usize) -> Self {
        assert!(slot < SLOTS, "writer slot {slot} out of range");
        self.slot = slot;
        self
    }

    /// The writer slot this handle writes.
    pub fn slot(&self) -> usize {
        self.slot
    }

    /// The kernel id of map `i` (changes when the pins are replaced).
    pub fn map_id(&self, i: usize) -> Option<u32> {
        sys::map_id(self.fd(i)).ok()
    }

    fn fd(&self, i: usize) -> BorrowedFd<'_> {
        self.inner.fds[i].as_fd()
    }

    /// The capacity (max entries) of map `i` of [`ALL_MAPS`].
    pub(crate) fn map_capacity(&self, i: usize) -> u32 {
        self.inner.capacity[i]
    }

    /// Map `i` of [`ALL_MAPS`] (for the other modules of this crate).
    pub(crate) fn raw_fd(&self, i: usize) -> BorrowedFd<'_> {
        self.fd(i)
    }

    /// Takes the writers' lock (this process's writers, then every process's).
    fn lock(&self) -> WriteLock<'_> {
        let local = self.inner.local.lock().unwrap_or_else(|e| e.into_inner());
        let dir = self.inner.pin_dir.as_ref().map(|d| d.as_fd());
        if let Some(d) = dir {
            // SAFETY: d is an open descriptor; LOCK_EX waits for the other writers.
            while unsafe { libc::flock(d.as_raw_fd(), libc::LOCK_EX) } != 0 {
                if io::Error::last_os_error().kind() != io::ErrorKind::Interrupted {
                    warn!("flock of the XDP pin directory failed; writing without it");
                    return WriteLock {
                        _local: local,
                        dir: None,
                    };
                }
            }
        }
        WriteLock { _local: local, dir }
    }

    /// Capacity (max entries) of a block map.
    pub fn capacity(&self, kind: BlockMapKind) -> u32 {
        self.inner.capacity[kind as usize]
    }
}

pub(crate) fn syscall_err(op: &'static str, map: &'static str, source: io::Error) -> Error {
    Error::Syscall { op, map, source }
}

/// Checks a map's kernel info against [`SPECS`]; returns its capacity.
fn check_spec(i: usize, data: &MapData, path: Option<&Path>) -> Result<u32, Error> {
    let name = ALL_MAPS[i];
    let info = data.info().map_err(|e| Error::Map {
        name,
        source: Box::new(e),
    })?;
    let (ty, ks, vs) = SPECS[i];
    let got_ty = info.map_type().map(|t| t as u32).unwrap_or(u32::MAX);
    if (got_ty, info.key_size(), info.value_size()) != (ty, ks, vs) {
        return Err(Error::PinnedMismatch {
            path: path.map_or_else(|| name.into(), Path::to_path_buf),
            what: format!(
                "type/key/value {got_ty}/{}/{}, expected {ty}/{ks}/{vs}",
                info.key_size(),
                info.value_size()
            ),
        });
    }
    Ok(info.max_entries())
}

/// Whether the pinned map at `path` has the layout of map `i` and capacity `max_entries`
/// (`Ok(None)` when nothing is pinned there).
pub(crate) fn pinned_matches(
    path: &Path,
    i: usize,
    max_entries: u32,
) -> Result<Option<bool>, Error> {
    if !path.exists() {
        return Ok(None);
    }
    let data = match MapData::from_pin(path) {
        Ok(d) => d,
        Err(_) => return Ok(Some(false)),
    };
    Ok(Some(
        matches!(check_spec(i, &data, Some(path)), Ok(cap) if cap == max_entries),
    ))
}

#[cfg(test)]
mod tests {
    use super::keys::{decode_key, encode_key};
    use super::*;
    use ipnet::IpNet;

    #[test]
    fn routes_addresses_to_hashes_and_prefixes_to_tries() {
        let n = |s: &str| s.parse::<IpNet>().unwrap();
        assert_eq!(BlockMapKind::of(&n("192.0.2.1/32")), BlockMapKind::AddrV4);
        assert_eq!(BlockMapKind::of(&n("192.0.2.0/24")), BlockMapKind::PrefixV4);
        assert_eq!(
            BlockMapKind::of(&n("2001:db8::1/128")),
            BlockMapKind::AddrV6
        );
        assert_eq!(
            BlockMapKind::of(&n("2001:db8::/64")),
            BlockMapKind::PrefixV6
        );
        for s in [
            "192.0.2.1/32",
            "192.0.2.0/24",
            "2001:db8::1/128",
            "2001:db8::/48",
        ] {
            let mut k = Vec::new();
            encode_key(&n(s), &mut k);
            assert_eq!(k.len(), BlockMapKind::of(&n(s)).key_size());
            assert_eq!(decode_key(BlockMapKind::of(&n(s)), &k), Some(n(s)));
        }
        // Host bits are cleared.
        let mut k = Vec::new();
        encode_key(&n("192.0.2.77/24"), &mut k);
        assert_eq!(k, [24, 0, 0, 0, 192, 0, 2, 0]);
    }

    #[test]
    fn coalesce_keeps_the_last_change_per_key() {
        let n = |s: &str| s.parse::<IpNet>().unwrap();
        let (ups, dels) = coalesce([
            (n("192.0.2.1/32"), Some((5, false))),
            (n("192.0.2.2/32"), None),
            (n("192.0.2.1/32"), None),
            (n("192.0.2.2/32"), Some((7, true))),
            (n("192.0.2.3/32"), Some((1, false))),
            (n("192.0.2.3/32"), Some((2, false))),
        ]);
        assert_eq!(dels, vec![n("192.0.2.1/32")]);
        assert_eq!(
            ups,
            vec![
                KernelBlock {
                    net: n("192.0.2.2/32"),
                    expires_ns: 7,
                    dns_only: true,
                },
                KernelBlock::all(n("192.0.2.3/32"), 2),
            ]
        );
    }
}
