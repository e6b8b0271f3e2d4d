//! The list family: the `[global] allow` tries (exempt from the rate limit), the DNS
//! service addresses (what a DNS-only block stops), and the rate-limit buckets.

use std::collections::HashSet;

use ipnet::IpNet;

use super::keys::*;
use super::*;
use crate::Error;
use crate::maps::{ALL_MAPS, LpmV6Key, Plain};
use crate::sys;

impl GuardMaps {
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

    /// Makes the service-address trie hold `nets` (IPv4 as IPv4-mapped IPv6) with UDP `port`
    /// and the RRL `slip` of queries over their source's rate (one in `slip` answered TC=1, 0
    /// none): entries of the same port that `nets` no longer holds go (another daemon's, on
    /// another port, stay). Returns how many entries `nets` made.
    pub fn set_services(&self, nets: &[IpNet], port: u16, slip: u8) -> Result<usize, Error> {
        let _lock = self.lock();
        let fd = self.fd(SVC);
        let want: HashSet<Vec<u8>> = nets.iter().map(mapped_lpm_key).collect();
        let value = crate::maps::SvcValue {
            port,
            reserved: crate::maps::SVC_SLIP_SET | u16::from(slip),
        };
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

    /// Makes the proxy trie hold exactly `nets` (IPv4 as IPv4-mapped IPv6): the senders whose
    /// UDP datagrams carry a PROXY v2 header. Returns how many entries it holds.
    pub fn set_proxies(&self, nets: &[IpNet]) -> Result<usize, Error> {
        let _lock = self.lock();
        let fd = self.fd(PROXY);
        let want: HashSet<Vec<u8>> = nets.iter().map(mapped_lpm_key).collect();
        for k in self.keys(PROXY, 20)? {
            if !want.contains(&k) {
                sys::delete(fd, &k).map_err(|e| syscall_err("delete", ALL_MAPS[PROXY], e))?;
            }
        }
        for k in &want {
            sys::update(fd, k, &1u32.to_ne_bytes(), sys::BPF_ANY)
                .map_err(|e| syscall_err("update", ALL_MAPS[PROXY], e))?;
        }
        Ok(want.len())
    }

    /// Makes `nets` what this writer's slot never blocks in the never-block trie (IPv4 as
    /// IPv4-mapped IPv6): its bit set on each, cleared from every other entry (an entry no
    /// writer lists goes). Returns how many could not be written for want of room.
    pub fn set_never(&self, nets: &[IpNet]) -> Result<u64, Error> {
        let _lock = self.lock();
        let fd = self.fd(NEVER);
        let bit = 1u32 << self.slot();
        let want: HashSet<Vec<u8>> = nets.iter().map(mapped_lpm_key).collect();
        // Each entry's own value: a trie lookup of a key that is in it finds that entry
        // (a key not in it would find a shorter prefix's: never looked up).
        let mut have = std::collections::HashMap::new();
        for k in self.keys(NEVER, 20)? {
            let mut v = [0u8; 4];
            if sys::lookup(fd, &k, &mut v).map_err(|e| syscall_err("lookup", ALL_MAPS[NEVER], e))? {
                have.insert(k, u32::from_ne_bytes(v));
            }
        }
        for (k, &v) in &have {
            if want.contains(k) || v & bit == 0 {
                continue;
            }
            let left = v & !bit;
            if left == 0 {
                sys::delete(fd, k).map_err(|e| syscall_err("delete", ALL_MAPS[NEVER], e))?;
            } else {
                sys::update(fd, k, &left.to_ne_bytes(), sys::BPF_ANY)
                    .map_err(|e| syscall_err("update", ALL_MAPS[NEVER], e))?;
            }
        }
        let mut full = 0;
        for k in &want {
            let v = have.get(k).copied().unwrap_or(0);
            if v & bit != 0 {
                continue;
            }
            match sys::update(fd, k, &(v | bit).to_ne_bytes(), sys::BPF_ANY) {
                Ok(()) => {}
                Err(e) if is_full(&e) => full += 1,
                Err(e) => return Err(syscall_err("update", ALL_MAPS[NEVER], e)),
            }
        }
        Ok(full)
    }

    /// Sets (`Some(expires_ns)`, CLOCK_BOOTTIME) or clears each suspect of `edits` in the
    /// suspects' trie (IPv4 as IPv4-mapped IPv6); with `whole`, every other entry goes too.
    /// Returns how many could not be written for want of room.
    pub fn set_suspects(&self, edits: &[(IpNet, Option<u64>)], whole: bool) -> Result<u64, Error> {
        let _lock = self.lock();
        let fd = self.fd(SUSPECT);
        if whole {
            let want: HashSet<Vec<u8>> = edits
                .iter()
                .filter(|(_, e)| e.is_some())
                .map(|(n, _)| mapped_lpm_key(n))
                .collect();
            for k in self.keys(SUSPECT, 20)? {
                if !want.contains(&k) {
                    sys::delete(fd, &k).map_err(|e| syscall_err("delete", ALL_MAPS[SUSPECT], e))?;
                }
            }
        }
        let mut full = 0;
        for (n, e) in edits {
            let k = mapped_lpm_key(n);
            match e {
                Some(ns) => match sys::update(fd, &k, &ns.to_ne_bytes(), sys::BPF_ANY) {
                    Ok(()) => {}
                    Err(e) if is_full(&e) => full += 1,
                    Err(e) => return Err(syscall_err("update", ALL_MAPS[SUSPECT], e)),
                },
                None => {
                    sys::delete(fd, &k).map_err(|e| syscall_err("delete", ALL_MAPS[SUSPECT], e))?;
                }
            }
        }
        let mut first = [0u8; 20];
        let present = sys::next_key(fd, None, &mut first)
            .map_err(|e| syscall_err("get_next_key", ALL_MAPS[SUSPECT], e))?;
        self.set_suspects_present(present)?;
        Ok(full)
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

/// The key of `n` in an IPv6 trie that holds IPv4 as IPv4-mapped addresses (the service and
/// proxy tries).
fn mapped_lpm_key(n: &IpNet) -> Vec<u8> {
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
}
