//! The block family: blocks set and lifted in this writer's slot (in batches, under the
//! writers' lock), read back, swept when they end, and the decision a lookup makes.

use std::collections::{HashMap, HashSet};
use std::io;
use std::net::IpAddr;
use std::sync::atomic::Ordering;

use ipnet::IpNet;
use tracing::{debug, warn};

use super::keys::*;
use super::*;
use crate::Error;
use crate::clock::ExpiryClock;
use crate::maps::{BlockValue, LpmV4Key, LpmV6Key, Plain, SLOTS, V4Key, V6Key};
use crate::sys;

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
pub(crate) type Edit = (IpNet, Option<(u64, bool)>);

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

impl GuardMaps {
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

    /// The stored entry of exactly `net`, every writer's slot, if any: one lookup (in a
    /// trie, the longest match, which is `net`'s own entry when its prefix length is `net`'s;
    /// the whole trie was walked, and `ctl block add` asked it every 25 ms for a second).
    pub fn get(&self, net: IpNet) -> Result<Option<KernelEntry>, Error> {
        let net = net.trunc();
        let kind = BlockMapKind::of(&net);
        let mut key = Vec::with_capacity(20);
        encode_key(&net, &mut key);
        let mut v = [0u8; VS];
        let found = sys::lookup(self.fd(kind as usize), &key, &mut v)
            .map_err(|source| syscall_err("lookup", kind.name(), source))?;
        let value = BlockValue::read_from(&v);
        let exact = !kind.is_trie() || u32::from(net.prefix_len()) == value.prefixlen;
        Ok((found && exact).then_some(KernelEntry { net, value }))
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
    /// `BPF_MAP_UPDATE_BATCH`/`DELETE_BATCH` per `CHUNK` elements) or one syscall per
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
