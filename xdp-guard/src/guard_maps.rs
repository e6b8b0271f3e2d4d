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

use std::collections::{HashMap, HashSet};
use std::io;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use aya::maps::MapData;
use ipnet::{IpNet, Ipv4Net, Ipv6Net};
use tracing::{debug, warn};

use crate::Error;
use crate::clock::ExpiryClock;
use crate::maps::{
    ALL_MAPS, BlockValue, C_BLOCK_EXPIRED, C_DROP_BLOCKED_ADDR, C_DROP_BLOCKED_PREFIX,
    C_DROP_RATELIMIT, C_DROP_SLOT, C_PASS, C_PASS_NOT_IP, C_PASS_NOT_UNDERSTOOD, C_RATE_EXEMPT,
    C_RATE_NEW_SOURCE, COUNTERS, GuardConfig, LpmV4Key, LpmV6Key, Plain, RawCounters, SLOTS, V4Key,
    V6Key,
};
use crate::sys;

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
const SPECS: [(u32, u32, u32); 14] = [
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
    (BPF_MAP_TYPE_LRU_PERCPU_HASH, 16, 24),
    (BPF_MAP_TYPE_LPM_TRIE, 20, 4),
];

/// Index of the service-address trie in [`ALL_MAPS`].
const SVC: usize = 13;

/// Index of the answer map in [`ALL_MAPS`] (the address map follows).
pub(crate) const ANSWERS: usize = 9;

/// Index of the IPv4 allow trie in [`ALL_MAPS`] (the IPv6 one follows).
const ALLOW_V4: usize = 7;

/// One of the four block maps.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum BlockMapKind {
    /// IPv4 addresses (HASH).
    AddrV4,
    /// IPv6 addresses (HASH).
    AddrV6,
    /// IPv4 prefixes (LPM_TRIE).
    PrefixV4,
    /// IPv6 prefixes (LPM_TRIE).
    PrefixV6,
}

impl BlockMapKind {
    /// All four, in map order.
    pub const ALL: [Self; 4] = [Self::AddrV4, Self::AddrV6, Self::PrefixV4, Self::PrefixV6];

    /// The map that holds `net`.
    pub fn of(net: &IpNet) -> Self {
        match net {
            IpNet::V4(n) if n.prefix_len() == 32 => Self::AddrV4,
            IpNet::V4(_) => Self::PrefixV4,
            IpNet::V6(n) if n.prefix_len() == 128 => Self::AddrV6,
            IpNet::V6(_) => Self::PrefixV6,
        }
    }

    /// The map's name.
    pub fn name(self) -> &'static str {
        ALL_MAPS[self as usize]
    }

    fn key_size(self) -> usize {
        SPECS[self as usize].1 as usize
    }

    fn is_trie(self) -> bool {
        matches!(self, Self::PrefixV4 | Self::PrefixV6)
    }
}

/// Encodes `net` (host bits cleared) as its map's key bytes.
fn encode_key(net: &IpNet, out: &mut Vec<u8>) {
    match net.trunc() {
        IpNet::V4(n) if n.prefix_len() == 32 => {
            out.extend_from_slice(V4Key::new(n.addr()).as_bytes())
        }
        IpNet::V4(n) => out.extend_from_slice(
            LpmV4Key {
                prefixlen: n.prefix_len().into(),
                addr: V4Key::new(n.addr()).addr,
            }
            .as_bytes(),
        ),
        IpNet::V6(n) if n.prefix_len() == 128 => {
            out.extend_from_slice(V6Key::new(n.addr()).as_bytes())
        }
        IpNet::V6(n) => out.extend_from_slice(
            LpmV6Key {
                prefixlen: n.prefix_len().into(),
                addr: n.addr().octets(),
            }
            .as_bytes(),
        ),
    }
}

/// Encodes `net` as a prefix-trie key (whatever its length).
fn encode_lpm_key(net: &IpNet, out: &mut Vec<u8>) {
    match net.trunc() {
        IpNet::V4(n) => out.extend_from_slice(
            LpmV4Key {
                prefixlen: n.prefix_len().into(),
                addr: V4Key::new(n.addr()).addr,
            }
            .as_bytes(),
        ),
        IpNet::V6(n) => out.extend_from_slice(
            LpmV6Key {
                prefixlen: n.prefix_len().into(),
                addr: n.addr().octets(),
            }
            .as_bytes(),
        ),
    }
}

/// Decodes key bytes of `kind`'s map.
fn decode_key(kind: BlockMapKind, b: &[u8]) -> Option<IpNet> {
    Some(match kind {
        BlockMapKind::AddrV4 => IpNet::V4(Ipv4Net::new(V4Key::read_from(b).ip(), 32).ok()?),
        BlockMapKind::AddrV6 => IpNet::V6(Ipv6Net::new(V6Key::read_from(b).ip(), 128).ok()?),
        BlockMapKind::PrefixV4 => {
            let k = LpmV4Key::read_from(b);
            let ip = Ipv4Addr::from(k.addr.to_ne_bytes());
            IpNet::V4(Ipv4Net::new(ip, u8::try_from(k.prefixlen).ok()?).ok()?)
        }
        BlockMapKind::PrefixV6 => {
            let k = LpmV6Key::read_from(b);
            IpNet::V6(Ipv6Net::new(Ipv6Addr::from(k.addr), u8::try_from(k.prefixlen).ok()?).ok()?)
        }
    })
}

/// What one write to the block maps did (counted from the writer's side: its slot).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ApplyReport {
    /// Blocks of this writer set or changed.
    pub upserted: u64,
    /// Blocks of this writer lifted (the entry deleted, or only this writer's slot cleared).
    pub deleted: u64,
    /// Lifts of blocks this writer did not hold (already expired, or never mirrored).
    pub absent: u64,
    /// Inserts refused because the map was full (E2BIG / ENOSPC).
    pub full: u64,
    /// Other failures (logged).
    pub failed: u64,
    /// bpf(2) calls made.
    pub syscalls: u64,
}

impl ApplyReport {
    /// Adds `o` into `self`.
    pub fn add(&mut self, o: &ApplyReport) {
        self.upserted += o.upserted;
        self.deleted += o.deleted;
        self.absent += o.absent;
        self.full += o.full;
        self.failed += o.failed;
        self.syscalls += o.syscalls;
    }
}

/// Packet counters summed over CPUs.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Counters {
    /// IP packets allowed.
    pub pass: u64,
    /// Non-IP frames passed.
    pub pass_not_ip: u64,
    /// Truncated, malformed or too-deep packets passed unexamined.
    pub pass_not_understood: u64,
    /// Dropped: source address blocked.
    pub drop_blocked_addr: u64,
    /// Dropped: source inside a blocked prefix.
    pub drop_blocked_prefix: u64,
    /// Dropped: UDP to a DNS port above the source's rate.
    pub drop_ratelimit: u64,
    /// Block entries found with every slot expired (passed; the sweep removes them).
    pub block_expired: u64,
    /// Rate-limit buckets created.
    pub rate_new_source: u64,
    /// UDP to a DNS port from an allowed source (`[global] allow`): not rate-limited.
    pub rate_exempt: u64,
    /// Drops of blocked sources by the first live writer slot (dnsd, http-front, rules,
    /// operator).
    pub drop_by_slot: [u64; crate::maps::SLOTS],
    /// Queries answered in XDP (XDP_TX).
    pub answered: u64,
    /// Passed to dnsd by the fast path: no answers for the address, a query it does not
    /// answer, no answer for the name, an answer too big for the client, no room in the
    /// frame to grow into the answer.
    pub ans_pass: [u64; 5],
    /// Over the answer rate (RRL in XDP): dropped, and slipped (answered TC=1).
    pub ans_rrl: [u64; 2],
    /// Server cookies verified in XDP: valid, invalid; and queries with a cookie passed
    /// because their answer cannot carry one byte-for-byte.
    pub ans_cookie: [u64; 3],
}

impl Counters {
    /// Every counter with its metric-friendly name.
    pub fn named(&self) -> [(&'static str, u64); COUNTERS] {
        [
            ("pass", self.pass),
            ("pass_not_ip", self.pass_not_ip),
            ("pass_not_understood", self.pass_not_understood),
            ("drop_blocked_addr", self.drop_blocked_addr),
            ("drop_blocked_prefix", self.drop_blocked_prefix),
            ("drop_ratelimit", self.drop_ratelimit),
            ("block_expired", self.block_expired),
            ("rate_new_source", self.rate_new_source),
            ("rate_exempt", self.rate_exempt),
            ("drop_by_dnsd", self.drop_by_slot[0]),
            ("drop_by_http_front", self.drop_by_slot[1]),
            ("drop_by_rules", self.drop_by_slot[2]),
            ("drop_by_operator", self.drop_by_slot[3]),
            ("answered", self.answered),
            ("answer_pass_no_address", self.ans_pass[0]),
            ("answer_pass_query", self.ans_pass[1]),
            ("answer_pass_miss", self.ans_pass[2]),
            ("answer_pass_size", self.ans_pass[3]),
            ("answer_pass_room", self.ans_pass[4]),
            ("answer_rrl_drop", self.ans_rrl[0]),
            ("answer_rrl_slip", self.ans_rrl[1]),
            ("answer_cookie_valid", self.ans_cookie[0]),
            ("answer_cookie_invalid", self.ans_cookie[1]),
            ("answer_pass_cookie", self.ans_cookie[2]),
        ]
    }

    /// Packets seen (the sum of the verdicts).
    pub fn packets(&self) -> u64 {
        self.pass + self.pass_not_ip + self.pass_not_understood + self.dropped() + self.answered
    }

    /// Packets dropped.
    pub fn dropped(&self) -> u64 {
        self.drop_blocked_addr + self.drop_blocked_prefix + self.drop_ratelimit
    }

    fn from_raw(c: &[u64; COUNTERS]) -> Self {
        Self {
            pass: c[C_PASS],
            pass_not_ip: c[C_PASS_NOT_IP],
            pass_not_understood: c[C_PASS_NOT_UNDERSTOOD],
            drop_blocked_addr: c[C_DROP_BLOCKED_ADDR],
            drop_blocked_prefix: c[C_DROP_BLOCKED_PREFIX],
            drop_ratelimit: c[C_DROP_RATELIMIT],
            block_expired: c[C_BLOCK_EXPIRED],
            rate_new_source: c[C_RATE_NEW_SOURCE],
            rate_exempt: c[C_RATE_EXEMPT],
            drop_by_slot: std::array::from_fn(|i| c[C_DROP_SLOT + i]),
            answered: c[crate::maps::C_ANSWERED],
            ans_pass: std::array::from_fn(|i| c[crate::maps::C_ANS_PASS_NO_ADDR + i]),
            ans_rrl: [c[crate::maps::C_ANS_RRL_DROP], c[crate::maps::C_ANS_SLIP]],
            ans_cookie: [
                c[crate::maps::C_ANS_COOKIE_VALID],
                c[crate::maps::C_ANS_COOKIE_INVALID],
                c[crate::maps::C_ANS_PASS_COOKIE],
            ],
        }
    }
}

/// A block as one writer sees it: the address or prefix, when that writer's block ends, and
/// whether it stops only UDP to the DNS service.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct KernelBlock {
    /// The address or prefix.
    pub net: IpNet,
    /// CLOCK_BOOTTIME ns at which it ends; 0 = never.
    pub expires_ns: u64,
    /// Stops only UDP to a DNS service address and port ([`crate::maps::MAP_SVC`]).
    pub dns_only: bool,
}

impl KernelBlock {
    /// A block of every packet from `net` until `expires_ns` (0 = never).
    pub fn all(net: IpNet, expires_ns: u64) -> Self {
        KernelBlock {
            net,
            expires_ns,
            dns_only: false,
        }
    }
}

/// One edit of a writer's slot: set it (expiry, DNS only) or clear it.
type Edit = (IpNet, Option<(u64, bool)>);

/// An entry as stored: the address or prefix and every writer's slot.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct KernelEntry {
    /// The address or prefix.
    pub net: IpNet,
    /// One expiry per writer slot.
    pub value: BlockValue,
}

impl KernelEntry {
    /// The entry as one block ending at its latest slot (0 = never), DNS only when every
    /// held slot is.
    pub fn combined(&self) -> KernelBlock {
        let held = (0..SLOTS).filter(|&i| self.value.slot(i).is_some());
        let dns_only =
            held.clone().count() > 0 && held.into_iter().all(|i| self.value.is_dns_only(i));
        KernelBlock {
            net: self.net,
            expires_ns: self.value.expiry().unwrap_or(0),
            dns_only,
        }
    }
}

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

    /// Writes the rate-limit configuration the program reads for every UDP packet.
    pub fn set_config(&self, cfg: &GuardConfig) -> Result<(), Error> {
        sys::update(self.fd(5), 0u32.as_bytes(), cfg.as_bytes(), sys::BPF_ANY)
            .map_err(|source| syscall_err("update", ALL_MAPS[5], source))
    }

    /// Reads the rate-limit configuration.
    pub fn config(&self) -> Result<GuardConfig, Error> {
        let mut buf = vec![0u8; size_of::<GuardConfig>()];
        sys::lookup(self.fd(5), 0u32.as_bytes(), &mut buf)
            .map_err(|source| syscall_err("lookup", ALL_MAPS[5], source))?;
        Ok(GuardConfig::read_from(&buf))
    }

    /// The packet counters, summed over CPUs.
    pub fn counters(&self) -> Result<Counters, Error> {
        let stride = size_of::<RawCounters>().next_multiple_of(8);
        let mut buf = vec![0u8; stride * self.inner.ncpus];
        sys::lookup(self.fd(6), 0u32.as_bytes(), &mut buf)
            .map_err(|source| syscall_err("lookup", ALL_MAPS[6], source))?;
        let mut sum = [0u64; COUNTERS];
        for cpu in buf.chunks_exact(stride) {
            let c = RawCounters::read_from(cpu);
            for (s, v) in sum.iter_mut().zip(c.count) {
                *s = s.wrapping_add(v);
            }
        }
        Ok(Counters::from_raw(&sum))
    }

    /// Sets every counter back to zero.
    pub fn reset_counters(&self) -> Result<(), Error> {
        let stride = size_of::<RawCounters>().next_multiple_of(8);
        let buf = vec![0u8; stride * self.inner.ncpus];
        sys::update(self.fd(6), 0u32.as_bytes(), &buf, sys::BPF_ANY)
            .map_err(|source| syscall_err("update", ALL_MAPS[6], source))
    }

    /// Blocks `net` in this writer's slot until `expires_unix_ms` (`u64::MAX` = never).
    /// `Ok(false)` if the expiry is already past (nothing written).
    pub fn block(&self, net: IpNet, expires_unix_ms: u64) -> Result<bool, Error> {
        let Some(ns) = ExpiryClock::now().to_kernel(expires_unix_ms).map_value() else {
            return Ok(false);
        };
        let r = self.edit(&[(net.trunc(), Some((ns, false)))], true, None);
        if r.failed > 0 || r.full > 0 {
            let kind = BlockMapKind::of(&net);
            return Err(syscall_err(
                "update",
                kind.name(),
                io::Error::from_raw_os_error(if r.full > 0 { libc::E2BIG } else { libc::EIO }),
            ));
        }
        Ok(true)
    }

    /// Lifts this writer's block of exactly `net` (other writers' stay); `Ok(false)` if it
    /// held none.
    pub fn unblock(&self, net: IpNet) -> Result<bool, Error> {
        let r = self.edit(&[(net.trunc(), None)], true, None);
        Ok(r.deleted > 0)
    }

    /// The stored entry of exactly `net`, every writer's slot, if any.
    pub fn get(&self, net: IpNet) -> Result<Option<KernelEntry>, Error> {
        let net = net.trunc();
        let kind = BlockMapKind::of(&net);
        if kind.is_trie() {
            return Ok(self.entries(kind)?.into_iter().find(|e| e.net == net));
        }
        let mut key = Vec::with_capacity(20);
        encode_key(&net, &mut key);
        let mut v = [0u8; VS];
        let found = sys::lookup(self.fd(kind as usize), &key, &mut v)
            .map_err(|source| syscall_err("lookup", kind.name(), source))?;
        Ok(found.then(|| KernelEntry {
            net,
            value: BlockValue::read_from(&v),
        }))
    }

    /// Whether every packet from `ip` would be dropped as blocked right now (address or
    /// prefix), decided as the program decides.
    pub fn is_blocked(&self, ip: IpAddr) -> Result<bool, Error> {
        self.blocked(ip, false)
    }

    /// Whether UDP from `ip` to the DNS service would be dropped as blocked right now (a slot
    /// of either scope), decided as the program decides.
    pub fn is_blocked_for_dns(&self, ip: IpAddr) -> Result<bool, Error> {
        self.blocked(ip, true)
    }

    fn blocked(&self, ip: IpAddr, dns: bool) -> Result<bool, Error> {
        let now = crate::clock::boot_ns();
        let (akind, pkind, akey, pkey) = match ip {
            IpAddr::V4(a) => (
                BlockMapKind::AddrV4,
                BlockMapKind::PrefixV4,
                V4Key::new(a).as_bytes().to_vec(),
                LpmV4Key {
                    prefixlen: 32,
                    addr: V4Key::new(a).addr,
                }
                .as_bytes()
                .to_vec(),
            ),
            IpAddr::V6(a) => (
                BlockMapKind::AddrV6,
                BlockMapKind::PrefixV6,
                V6Key::new(a).as_bytes().to_vec(),
                LpmV6Key {
                    prefixlen: 128,
                    addr: a.octets(),
                }
                .as_bytes()
                .to_vec(),
            ),
        };
        for (kind, mut key) in [(akind, akey), (pkind, pkey)] {
            // In the trie: the longest match, then (as the program does) the prefixes around
            // it while the one found does not stop the packet, at most NEST_MAX deep.
            let tries = if kind.is_trie() { NEST_MAX } else { 1 };
            for _ in 0..tries {
                let mut v = [0u8; VS];
                let found = sys::lookup(self.fd(kind as usize), &key, &mut v)
                    .map_err(|source| syscall_err("lookup", kind.name(), source))?;
                if !found {
                    break;
                }
                let v = BlockValue::read_from(&v);
                if v.is_live(now) || dns && v.is_live_for_dns(now) {
                    return Ok(true);
                }
                // The trie key starts with its prefix length (u32, host order).
                if v.prefixlen == 0 || !kind.is_trie() {
                    break;
                }
                key[..4].copy_from_slice(&(v.prefixlen - 1).to_ne_bytes());
            }
        }
        Ok(false)
    }

    /// Sets this writer's slot on each `upserts` entry and clears it on each of `deletes`
    /// (an entry no writer holds any more is deleted), in batches when `batch` (one
    /// `BPF_MAP_UPDATE_BATCH`/`DELETE_BATCH` per [`CHUNK`] elements) or one syscall per
    /// element. The two lists must not share a key. Full maps and failures are counted,
    /// never fatal.
    pub fn apply(&self, upserts: &[KernelBlock], deletes: &[IpNet], batch: bool) -> ApplyReport {
        let edits: Vec<Edit> = deletes
            .iter()
            .map(|n| (n.trunc(), None))
            .chain(
                upserts
                    .iter()
                    .map(|b| (b.net.trunc(), Some((b.expires_ns, b.dns_only)))),
            )
            .collect();
        self.edit(&edits, batch, None)
    }

    /// The read-modify-write of this writer's slot on `edits` (Some = set to that expiry,
    /// 0 = never, and scope; None = clear), under the writers' lock; `known` holds every entry
    /// of the maps when the caller has just read them under the same lock.
    fn edit(
        &self,
        edits: &[Edit],
        batch: bool,
        known: Option<&HashMap<IpNet, BlockValue>>,
    ) -> ApplyReport {
        let mut report = ApplyReport::default();
        let _lock = (known.is_none()).then(|| self.lock());
        for kind in BlockMapKind::ALL {
            let mine: Vec<&Edit> = edits
                .iter()
                .filter(|(n, _)| BlockMapKind::of(n) == kind)
                .collect();
            if mine.is_empty() {
                continue;
            }
            let ks = kind.key_size();
            // What the maps hold now for these keys.
            let dumped;
            let table: Option<&HashMap<IpNet, BlockValue>> = match known {
                Some(k) => Some(k),
                None if kind.is_trie() || mine.len() >= DUMP_MIN => match self.dump(kind) {
                    Ok(d) => {
                        report.syscalls += 1;
                        dumped = d.into_iter().collect::<HashMap<_, _>>();
                        Some(&dumped)
                    }
                    Err(e) => {
                        warn!(map = kind.name(), error = %e, "reading an XDP block map failed");
                        report.failed += mine.len() as u64;
                        continue;
                    }
                },
                None => None,
            };
            let mut set = (Vec::new(), Vec::new());
            let mut cleared = (Vec::new(), Vec::new());
            let mut gone = Vec::new();
            let mut key = Vec::with_capacity(ks);
            for (net, want) in mine {
                key.clear();
                encode_key(net, &mut key);
                let cur = match table {
                    Some(t) => t.get(net).copied(),
                    None => {
                        let mut v = [0u8; VS];
                        report.syscalls += 1;
                        match sys::lookup(self.fd(kind as usize), &key, &mut v) {
                            Ok(true) => Some(BlockValue::read_from(&v)),
                            Ok(false) => None,
                            Err(e) => {
                                self.count_write_error(kind, &e, &mut report);
                                continue;
                            }
                        }
                    }
                };
                let mut new = cur.unwrap_or_default().with_slot(
                    self.slot,
                    want.map(|w| w.0),
                    want.is_some_and(|w| w.1),
                );
                if kind.is_trie() {
                    new.prefixlen = net.prefix_len().into();
                }
                match want {
                    Some(_) => {
                        if cur != Some(new) {
                            set.0.extend_from_slice(&key);
                            set.1.extend_from_slice(new.as_bytes());
                        } else {
                            report.upserted += 1;
                        }
                    }
                    None if cur.is_none_or(|c| c.slot(self.slot).is_none()) => report.absent += 1,
                    None if new.is_empty() => gone.extend_from_slice(&key),
                    None => {
                        cleared.0.extend_from_slice(&key);
                        cleared.1.extend_from_slice(new.as_bytes());
                    }
                }
            }
            // Deletes first: they make room for the inserts in a full map.
            if !gone.is_empty() {
                let mut r = ApplyReport::default();
                self.remove(kind, &gone, ks, batch, &mut r);
                report.deleted += r.deleted + r.absent;
                report.syscalls += r.syscalls;
                report.failed += r.failed;
            }
            if !cleared.0.is_empty() {
                let mut r = ApplyReport::default();
                self.write(kind, &cleared.0, &cleared.1, ks, batch, &mut r);
                report.deleted += r.upserted;
                report.syscalls += r.syscalls;
                report.failed += r.failed + r.full;
            }
            if !set.0.is_empty() {
                self.write(kind, &set.0, &set.1, ks, batch, &mut report);
            }
        }
        report
    }

    fn write(
        &self,
        kind: BlockMapKind,
        keys: &[u8],
        values: &[u8],
        ks: usize,
        batch: bool,
        r: &mut ApplyReport,
    ) {
        let fd = self.fd(kind as usize);
        let n = keys.len() / ks;
        let mut i = 0;
        while i < n {
            if batch && self.inner.batch_ok[kind as usize].load(Ordering::Relaxed) {
                let count = (n - i).min(CHUNK);
                let (done, res) = sys::update_batch(fd, &keys[i * ks..], &values[i * VS..], count);
                r.syscalls += 1;
                r.upserted += done as u64;
                i += done;
                match res {
                    Ok(()) => {}
                    Err(e) if done == 0 && i == 0 && is_unsupported(&e) => {
                        debug!(map = kind.name(), error = %e, "batch update unsupported; single updates");
                        self.inner.batch_ok[kind as usize].store(false, Ordering::Relaxed);
                    }
                    Err(e) => {
                        self.count_write_error(kind, &e, r);
                        i += 1; // the element at `done` failed; go on after it
                    }
                }
            } else {
                let res = sys::update(
                    fd,
                    &keys[i * ks..(i + 1) * ks],
                    &values[i * VS..(i + 1) * VS],
                    sys::BPF_ANY,
                );
                r.syscalls += 1;
                match res {
                    Ok(()) => r.upserted += 1,
                    Err(e) => self.count_write_error(kind, &e, r),
                }
                i += 1;
            }
        }
    }

    fn count_write_error(&self, kind: BlockMapKind, e: &io::Error, r: &mut ApplyReport) {
        if is_full(e) {
            if r.full == 0 {
                warn!(
                    map = kind.name(),
                    capacity = self.capacity(kind),
                    "XDP block map full: block not installed in the kernel"
                );
            }
            r.full += 1;
        } else {
            if r.failed == 0 {
                warn!(map = kind.name(), error = %e, "XDP block map update failed");
            }
            r.failed += 1;
        }
    }

    fn remove(&self, kind: BlockMapKind, keys: &[u8], ks: usize, batch: bool, r: &mut ApplyReport) {
        let fd = self.fd(kind as usize);
        let n = keys.len() / ks;
        let mut i = 0;
        while i < n {
            if batch && self.inner.batch_ok[kind as usize].load(Ordering::Relaxed) {
                let count = (n - i).min(CHUNK);
                let (done, res) = sys::delete_batch(fd, &keys[i * ks..], count);
                r.syscalls += 1;
                r.deleted += done as u64;
                i += done;
                match res {
                    Ok(()) => {}
                    Err(e) if errno(&e) == libc::ENOENT => {
                        r.absent += 1;
                        i += 1;
                    }
                    Err(e) if done == 0 && i == 0 && is_unsupported(&e) => {
                        debug!(map = kind.name(), error = %e, "batch delete unsupported; single deletes");
                        self.inner.batch_ok[kind as usize].store(false, Ordering::Relaxed);
                    }
                    Err(e) => {
                        if r.failed == 0 {
                            warn!(map = kind.name(), error = %e, "XDP block map delete failed");
                        }
                        r.failed += 1;
                        i += 1;
                    }
                }
            } else {
                r.syscalls += 1;
                match sys::delete(fd, &keys[i * ks..(i + 1) * ks]) {
                    Ok(true) => r.deleted += 1,
                    Ok(false) => r.absent += 1,
                    Err(e) => {
                        if r.failed == 0 {
                            warn!(map = kind.name(), error = %e, "XDP block map delete failed");
                        }
                        r.failed += 1;
                    }
                }
                i += 1;
            }
        }
    }

    /// Every entry of one map with its slots, as read (hashes in batches, tries key by key).
    fn dump(&self, kind: BlockMapKind) -> Result<Vec<(IpNet, BlockValue)>, Error> {
        let fd = self.fd(kind as usize);
        let ks = kind.key_size();
        let mut out = Vec::new();
        let push = |out: &mut Vec<(IpNet, BlockValue)>, k: &[u8], v: &[u8]| {
            if let Some(net) = decode_key(kind, k) {
                out.push((net, BlockValue::read_from(v)));
            }
        };
        if !kind.is_trie() {
            // BPF_MAP_LOOKUP_BATCH walks the hash bucket by bucket.
            let mut keys = vec![0u8; ks * CHUNK];
            let mut values = vec![0u8; VS * CHUNK];
            let mut token = [0u8; 16];
            let mut next = [0u8; 16];
            let mut first = true;
            loop {
                let res = sys::lookup_batch(
                    fd,
                    (!first).then_some(&token[..]),
                    &mut next,
                    &mut keys,
                    &mut values,
                    CHUNK,
                );
                let (n, end) = match res {
                    Ok(r) => r,
                    Err(e) if first && is_unsupported(&e) => break,
                    Err(e) => return Err(syscall_err("lookup_batch", kind.name(), e)),
                };
                for j in 0..n {
                    push(
                        &mut out,
                        &keys[j * ks..(j + 1) * ks],
                        &values[j * VS..(j + 1) * VS],
                    );
                }
                if end {
                    return Ok(out);
                }
                token = next;
                first = false;
            }
        }
        // LPM tries (and a kernel without batch lookups): key by key.
        let mut key = vec![0u8; ks];
        let mut next = vec![0u8; ks];
        let mut v = [0u8; VS];
        let mut started = false;
        while sys::next_key(fd, started.then_some(&key[..]), &mut next)
            .map_err(|e| syscall_err("get_next_key", kind.name(), e))?
        {
            std::mem::swap(&mut key, &mut next);
            started = true;
            if sys::lookup(fd, &key, &mut v).map_err(|e| syscall_err("lookup", kind.name(), e))? {
                push(&mut out, &key, &v);
            }
        }
        Ok(out)
    }

    /// Every entry in one map, with every writer's slot.
    pub fn entries(&self, kind: BlockMapKind) -> Result<Vec<KernelEntry>, Error> {
        Ok(self
            .dump(kind)?
            .into_iter()
            .map(|(net, value)| KernelEntry { net, value })
            .collect())
    }

    /// Every block in one map, each ending at its latest slot.
    pub fn list(&self, kind: BlockMapKind) -> Result<Vec<KernelBlock>, Error> {
        Ok(self
            .entries(kind)?
            .iter()
            .filter(|e| !e.value.is_empty())
            .map(KernelEntry::combined)
            .collect())
    }

    /// Every block in the four maps, each ending at its latest slot.
    pub fn list_all(&self) -> Result<Vec<KernelBlock>, Error> {
        let mut out = Vec::new();
        for kind in BlockMapKind::ALL {
            out.extend(self.list(kind)?);
        }
        Ok(out)
    }

    /// This writer's blocks in the four maps.
    pub fn list_mine(&self) -> Result<Vec<KernelBlock>, Error> {
        let mut out = Vec::new();
        for kind in BlockMapKind::ALL {
            for e in self.entries(kind)? {
                if let Some(expires_ns) = e.value.slot(self.slot) {
                    out.push(KernelBlock {
                        net: e.net,
                        expires_ns,
                        dns_only: e.value.is_dns_only(self.slot),
                    });
                }
            }
        }
        Ok(out)
    }

    /// Makes this writer's blocks exactly `desired`: clears its slot everywhere else (other
    /// writers' blocks stay) and sets it on all of `desired`, in one read-modify-write.
    pub fn replace_all(&self, desired: &[KernelBlock], batch: bool) -> Result<ApplyReport, Error> {
        let _lock = self.lock();
        let mut known = HashMap::new();
        for kind in BlockMapKind::ALL {
            known.extend(self.dump(kind)?);
        }
        let want: HashSet<IpNet> = desired.iter().map(|b| b.net.trunc()).collect();
        let mut edits: Vec<Edit> = known
            .iter()
            .filter(|(n, v)| v.slot(self.slot).is_some() && !want.contains(n))
            .map(|(n, _)| (*n, None))
            .collect();
        edits.extend(
            desired
                .iter()
                .map(|b| (b.net.trunc(), Some((b.expires_ns, b.dns_only)))),
        );
        Ok(self.edit(&edits, batch, Some(&known)))
    }

    /// Clears every writer's slot that ended at or before `now_boot_ns` and deletes entries
    /// left empty; returns the slots cleared as `deleted`.
    pub fn sweep_expired(&self, now_boot_ns: u64, batch: bool) -> Result<ApplyReport, Error> {
        let _lock = self.lock();
        let mut report = ApplyReport::default();
        for kind in BlockMapKind::ALL {
            let ks = kind.key_size();
            let (mut keys, mut values, mut gone) = (Vec::new(), Vec::new(), Vec::new());
            for (net, v) in self.dump(kind)? {
                let kept = v.without_expired(now_boot_ns);
                if kept == v {
                    continue;
                }
                report.deleted += v
                    .expires_ns
                    .iter()
                    .zip(kept.expires_ns)
                    .filter(|(a, b)| **a != *b)
                    .count() as u64;
                if kept.is_empty() {
                    encode_key(&net, &mut gone);
                } else {
                    encode_key(&net, &mut keys);
                    values.extend_from_slice(kept.as_bytes());
                }
            }
            let mut r = ApplyReport::default();
            if !gone.is_empty() {
                self.remove(kind, &gone, ks, batch, &mut r);
            }
            if !keys.is_empty() {
                self.write(kind, &keys, &values, ks, batch, &mut r);
            }
            report.syscalls += r.syscalls;
            report.failed += r.failed + r.full;
        }
        Ok(report)
    }

    /// Removes every block, whoever wrote it.
    pub fn clear(&self) -> Result<ApplyReport, Error> {
        let _lock = self.lock();
        let mut report = ApplyReport::default();
        for kind in BlockMapKind::ALL {
            let mut keys = Vec::new();
            for (net, _) in self.dump(kind)? {
                encode_key(&net, &mut keys);
            }
            if !keys.is_empty() {
                self.remove(kind, &keys, kind.key_size(), true, &mut report);
            }
        }
        Ok(report)
    }

    /// Makes the allow tries (exempt from the rate limit) hold exactly `nets`; returns how
    /// many entries were written and deleted.
    pub fn set_allow(&self, nets: &[IpNet]) -> Result<(u64, u64), Error> {
        let _lock = self.lock();
        let (mut written, mut deleted) = (0, 0);
        for (i, v6) in [(ALLOW_V4, false), (ALLOW_V4 + 1, true)] {
            let fd = self.fd(i);
            let ks = if v6 { 20 } else { 8 };
            let want: HashSet<Vec<u8>> = nets
                .iter()
                .filter(|n| matches!(n, IpNet::V6(_)) == v6)
                .map(|n| {
                    let mut k = Vec::with_capacity(ks);
                    encode_lpm_key(n, &mut k);
                    k
                })
                .collect();
            let have = self.keys(i, ks)?;
            for k in have.iter().filter(|k| !want.contains(*k)) {
                if sys::delete(fd, k).map_err(|e| syscall_err("delete", ALL_MAPS[i], e))? {
                    deleted += 1;
                }
            }
            for k in want.iter().filter(|k| !have.contains(k)) {
                sys::update(fd, k, &1u32.to_ne_bytes(), sys::BPF_ANY)
                    .map_err(|e| syscall_err("update", ALL_MAPS[i], e))?;
                written += 1;
            }
        }
        Ok((written, deleted))
    }

    /// Makes the service-address trie hold `nets` (IPv4 as IPv4-mapped IPv6) with UDP `port`:
    /// entries of the same port that `nets` no longer holds go (another daemon's, on another
    /// port, stay). Returns how many entries `nets` made.
    pub fn set_services(&self, nets: &[IpNet], port: u16) -> Result<usize, Error> {
        let _lock = self.lock();
        let fd = self.fd(SVC);
        let key = |n: &IpNet| {
            let (len, addr) = match n.trunc() {
                IpNet::V4(v) => (
                    u32::from(v.prefix_len()) + 96,
                    v.network().to_ipv6_mapped().octets(),
                ),
                IpNet::V6(v) => (u32::from(v.prefix_len()), v.network().octets()),
            };
            LpmV6Key {
                prefixlen: len,
                addr,
            }
            .as_bytes()
            .to_vec()
        };
        let want: HashSet<Vec<u8>> = nets.iter().map(key).collect();
        let value = crate::maps::SvcValue { port, reserved: 0 };
        for k in self.keys(SVC, 20)? {
            if want.contains(&k) {
                continue;
            }
            let mut v = [0u8; 4];
            let found =
                sys::lookup(fd, &k, &mut v).map_err(|e| syscall_err("lookup", ALL_MAPS[SVC], e))?;
            if found && crate::maps::SvcValue::read_from(&v).port == port {
                sys::delete(fd, &k).map_err(|e| syscall_err("delete", ALL_MAPS[SVC], e))?;
            }
        }
        for k in &want {
            sys::update(fd, k, value.as_bytes(), sys::BPF_ANY)
                .map_err(|e| syscall_err("update", ALL_MAPS[SVC], e))?;
        }
        Ok(want.len())
    }

    /// Every key of map `i` of [`ALL_MAPS`] (`ks` bytes each), walked key by key.
    pub(crate) fn keys(&self, i: usize, ks: usize) -> Result<Vec<Vec<u8>>, Error> {
        let fd = self.fd(i);
        let mut out = Vec::new();
        let mut key = vec![0u8; ks];
        let mut next = vec![0u8; ks];
        let mut started = false;
        while sys::next_key(fd, started.then_some(&key[..]), &mut next)
            .map_err(|e| syscall_err("get_next_key", ALL_MAPS[i], e))?
        {
            std::mem::swap(&mut key, &mut next);
            started = true;
            out.push(key.clone());
        }
        Ok(out)
    }

    /// The allow tries' entries.
    pub fn allow_list(&self) -> Result<Vec<IpNet>, Error> {
        let mut out = Vec::new();
        for (i, kind) in [
            (ALLOW_V4, BlockMapKind::PrefixV4),
            (ALLOW_V4 + 1, BlockMapKind::PrefixV6),
        ] {
            out.extend(
                self.keys(i, kind.key_size())?
                    .iter()
                    .filter_map(|k| decode_key(kind, k)),
            );
        }
        Ok(out)
    }

    /// Forgets every rate-limit bucket (all sources start with a full burst again).
    pub fn clear_rate_buckets(&self) -> Result<(), Error> {
        let fd = self.fd(4);
        let mut key = [0u8; 16];
        while sys::next_key(fd, None, &mut key)
            .map_err(|e| syscall_err("get_next_key", ALL_MAPS[4], e))?
        {
            sys::delete(fd, &key).map_err(|e| syscall_err("delete", ALL_MAPS[4], e))?;
        }
        Ok(())
    }
}

/// Coalesces a sequence of changes so that the last one per key wins; returns (upserts,
/// deletes) with no key in both.
pub(crate) fn coalesce(changes: impl IntoIterator<Item = Edit>) -> (Vec<KernelBlock>, Vec<IpNet>) {
    let mut last: HashMap<IpNet, Option<(u64, bool)>> = HashMap::new();
    let mut order = Vec::new();
    for (net, v) in changes {
        let net = net.trunc();
        if last.insert(net, v).is_none() {
            order.push(net);
        }
    }
    let mut ups = Vec::new();
    let mut dels = Vec::new();
    for net in order {
        match last[&net] {
            Some((expires_ns, dns_only)) => ups.push(KernelBlock {
                net,
                expires_ns,
                dns_only,
            }),
            None => dels.push(net),
        }
    }
    (ups, dels)
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
    use super::*;

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
