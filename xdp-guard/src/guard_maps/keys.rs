//! The four block maps (address hash and prefix trie, per family) and their keys: which
//! map a prefix goes to, and how it is encoded and read back.

use std::net::{Ipv4Addr, Ipv6Addr};

use ipnet::{IpNet, Ipv4Net, Ipv6Net};

use super::*;
use crate::maps::{ALL_MAPS, LpmV4Key, LpmV6Key, Plain, V4Key, V6Key};

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

    pub(super) fn key_size(self) -> usize {
        SPECS[self as usize].1 as usize
    }

    pub(super) fn is_trie(self) -> bool {
        matches!(self, Self::PrefixV4 | Self::PrefixV6)
    }
}

/// Encodes `net` (host bits cleared) as its map's key bytes.
pub(super) fn encode_key(net: &IpNet, out: &mut Vec<u8>) {
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
pub(super) fn encode_lpm_key(net: &IpNet, out: &mut Vec<u8>) {
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
pub(super) fn decode_key(kind: BlockMapKind, b: &[u8]) -> Option<IpNet> {
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
