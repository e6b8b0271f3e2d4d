//! Longest-prefix match over IPv4 and IPv6 prefixes: one hash table per prefix length in use.
//!
//! [`PrefixMap`] keeps, per address family, only the prefix lengths that hold entries, sorted
//! longest first. A lookup masks the address once per length in use and probes that length's
//! hash table, so its cost is bounded by the number of distinct lengths (at most 33 for IPv4,
//! 129 for IPv6; a few in practice), never by the number of prefixes. A map that holds only
//! host entries (/32, /128) answers with one hash probe; an empty map with none.
//!
//! IPv4-mapped IPv6 addresses (`::ffff:a.b.c.d`) are looked up as the IPv4 address they carry,
//! so a dual-stack socket's sources match IPv4 entries.

use hashbrown::HashMap;
use ipnet::{IpNet, Ipv4Net, Ipv6Net};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// A map from IP prefixes to values answering longest-prefix-match queries.
#[derive(Clone, Debug)]
pub struct PrefixMap<V> {
    v4: Vec<(u8, HashMap<u32, V>)>,
    v6: Vec<(u8, HashMap<u128, V>)>,
    len: usize,
}

impl<V> Default for PrefixMap<V> {
    fn default() -> Self {
        Self::new()
    }
}

#[inline]
fn mask4(addr: u32, len: u8) -> u32 {
    if len == 0 {
        0
    } else {
        addr & (u32::MAX << (32 - len))
    }
}

#[inline]
fn mask6(addr: u128, len: u8) -> u128 {
    if len == 0 {
        0
    } else {
        addr & (u128::MAX << (128 - len))
    }
}

/// Turns an IPv4-mapped IPv6 address into the IPv4 address it carries.
#[inline]
pub fn canonical(ip: IpAddr) -> IpAddr {
    ip.to_canonical()
}

impl<V> PrefixMap<V> {
    /// An empty map (allocates nothing until the first insert).
    pub fn new() -> Self {
        Self {
            v4: Vec::new(),
            v6: Vec::new(),
            len: 0,
        }
    }

    /// Number of entries (hosts and prefixes).
    pub fn len(&self) -> usize {
        self.len
    }

    /// True when the map holds nothing.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Number of entries that are not single hosts (shorter than /32 or /128).
    pub fn prefix_count(&self) -> usize {
        let v4: usize = self
            .v4
            .iter()
            .filter(|(l, _)| *l < 32)
            .map(|(_, t)| t.len())
            .sum();
        let v6: usize = self
            .v6
            .iter()
            .filter(|(l, _)| *l < 128)
            .map(|(_, t)| t.len())
            .sum();
        v4 + v6
    }

    /// Number of distinct prefix lengths in use (the worst-case number of probes per lookup).
    pub fn lengths_in_use(&self) -> usize {
        self.v4.len() + self.v6.len()
    }

    fn table4(&mut self, len: u8) -> &mut HashMap<u32, V> {
        let pos = match self.v4.binary_search_by(|(l, _)| len.cmp(l)) {
            Ok(pos) => pos,
            Err(pos) => {
                self.v4.insert(pos, (len, HashMap::new()));
                pos
            }
        };
        &mut self.v4[pos].1
    }

    fn table6(&mut self, len: u8) -> &mut HashMap<u128, V> {
        let pos = match self.v6.binary_search_by(|(l, _)| len.cmp(l)) {
            Ok(pos) => pos,
            Err(pos) => {
                self.v6.insert(pos, (len, HashMap::new()));
                pos
            }
        };
        &mut self.v6[pos].1
    }

    /// Inserts `net` (host bits are cleared first); returns the value it replaced.
    pub fn insert(&mut self, net: IpNet, value: V) -> Option<V> {
        let old = match net.trunc() {
            IpNet::V4(n) => {
                let len = n.prefix_len();
                self.table4(len).insert(u32::from(n.network()), value)
            }
            IpNet::V6(n) => {
                let len = n.prefix_len();
                self.table6(len).insert(u128::from(n.network()), value)
            }
        };
        if old.is_none() {
            self.len += 1;
        }
        old
    }

    /// Removes `net` exactly (not the prefixes covering it); returns its value.
    pub fn remove(&mut self, net: &IpNet) -> Option<V> {
        let old = match net.trunc() {
            IpNet::V4(n) => {
                let len = n.prefix_len();
                let pos = self.v4.binary_search_by(|(l, _)| len.cmp(l)).ok()?;
                let old = self.v4[pos].1.remove(&u32::from(n.network()));
                if self.v4[pos].1.is_empty() {
                    self.v4.remove(pos);
                }
                old
            }
            IpNet::V6(n) => {
                let len = n.prefix_len();
                let pos = self.v6.binary_search_by(|(l, _)| len.cmp(l)).ok()?;
                let old = self.v6[pos].1.remove(&u128::from(n.network()));
                if self.v6[pos].1.is_empty() {
                    self.v6.remove(pos);
                }
                old
            }
        };
        if old.is_some() {
            self.len -= 1;
        }
        old
    }

    /// The value stored for exactly `net`.
    pub fn get(&self, net: &IpNet) -> Option<&V> {
        match net.trunc() {
            IpNet::V4(n) => {
                let len = n.prefix_len();
                let pos = self.v4.binary_search_by(|(l, _)| len.cmp(l)).ok()?;
                self.v4[pos].1.get(&u32::from(n.network()))
            }
            IpNet::V6(n) => {
                let len = n.prefix_len();
                let pos = self.v6.binary_search_by(|(l, _)| len.cmp(l)).ok()?;
                self.v6[pos].1.get(&u128::from(n.network()))
            }
        }
    }

    /// The most specific entry covering `ip`.
    #[inline]
    pub fn longest_match(&self, ip: IpAddr) -> Option<(IpNet, &V)> {
        self.matches(ip).next()
    }

    /// True when some entry covers `ip`.
    #[inline]
    pub fn contains(&self, ip: IpAddr) -> bool {
        self.matches(ip).next().is_some()
    }

    /// Every entry covering `ip`, most specific first; allocates nothing.
    #[inline]
    pub fn matches(&self, ip: IpAddr) -> Matches<'_, V> {
        match canonical(ip) {
            IpAddr::V4(a) => Matches::V4 {
                addr: u32::from(a),
                tables: self.v4.iter(),
            },
            IpAddr::V6(a) => Matches::V6 {
                addr: u128::from(a),
                tables: self.v6.iter(),
            },
        }
    }

    /// Every entry, in no particular order.
    pub fn iter(&self) -> impl Iterator<Item = (IpNet, &V)> + '_ {
        let v4 = self.v4.iter().flat_map(|(len, t)| {
            t.iter().map(move |(k, v)| {
                let net = Ipv4Net::new(Ipv4Addr::from(*k), *len).expect("length <= 32");
                (IpNet::V4(net), v)
            })
        });
        let v6 = self.v6.iter().flat_map(|(len, t)| {
            t.iter().map(move |(k, v)| {
                let net = Ipv6Net::new(Ipv6Addr::from(*k), *len).expect("length <= 128");
                (IpNet::V6(net), v)
            })
        });
        v4.chain(v6)
    }
}

impl<V> FromIterator<(IpNet, V)> for PrefixMap<V> {
    fn from_iter<I: IntoIterator<Item = (IpNet, V)>>(iter: I) -> Self {
        let mut m = Self::new();
        for (net, v) in iter {
            m.insert(net, v);
        }
        m
    }
}

/// Iterator over the entries covering one address, most specific first.
#[derive(Debug)]
pub enum Matches<'a, V> {
    /// Walking the IPv4 tables.
    V4 {
        /// The address being matched.
        addr: u32,
        /// Remaining tables, longest prefix first.
        tables: std::slice::Iter<'a, (u8, HashMap<u32, V>)>,
    },
    /// Walking the IPv6 tables.
    V6 {
        /// The address being matched.
        addr: u128,
        /// Remaining tables, longest prefix first.
        tables: std::slice::Iter<'a, (u8, HashMap<u128, V>)>,
    },
}

impl<'a, V> Iterator for Matches<'a, V> {
    type Item = (IpNet, &'a V);

    #[inline]
    fn next(&mut self) -> Option<Self::Item> {
        match self {
            Matches::V4 { addr, tables } => {
                for (len, t) in tables.by_ref() {
                    let k = mask4(*addr, *len);
                    if let Some(v) = t.get(&k) {
                        let net = Ipv4Net::new(Ipv4Addr::from(k), *len).expect("length <= 32");
                        return Some((IpNet::V4(net), v));
                    }
                }
                None
            }
            Matches::V6 { addr, tables } => {
                for (len, t) in tables.by_ref() {
                    let k = mask6(*addr, *len);
                    if let Some(v) = t.get(&k) {
                        let net = Ipv6Net::new(Ipv6Addr::from(k), *len).expect("length <= 128");
                        return Some((IpNet::V6(net), v));
                    }
                }
                None
            }
        }
    }
}

/// A set of prefixes answering "is this address covered?"; a [`PrefixMap`] with unit values.
pub type PrefixSet = PrefixMap<()>;

/// Parses a prefix or a bare address (taken as a host prefix), e.g. `192.0.2.0/24` or `2001:db8::1`.
pub fn parse_net(s: &str) -> Option<IpNet> {
    let s = s.trim();
    if let Ok(n) = s.parse::<IpNet>() {
        return Some(n.trunc());
    }
    s.parse::<IpAddr>().ok().map(IpNet::from)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn net(s: &str) -> IpNet {
        parse_net(s).unwrap()
    }

    #[test]
    fn longest_match_prefers_specific() {
        let mut m = PrefixMap::new();
        m.insert(net("10.0.0.0/8"), 8);
        m.insert(net("10.1.0.0/16"), 16);
        m.insert(net("10.1.2.3"), 32);
        assert_eq!(m.longest_match("10.1.2.3".parse().unwrap()).unwrap().1, &32);
        assert_eq!(m.longest_match("10.1.9.9".parse().unwrap()).unwrap().1, &16);
        let (n, v) = m.longest_match("10.200.0.1".parse().unwrap()).unwrap();
        assert_eq!((n, *v), (net("10.0.0.0/8"), 8));
        assert!(m.longest_match("11.0.0.1".parse().unwrap()).is_none());
        let all: Vec<_> = m
            .matches("10.1.2.3".parse().unwrap())
            .map(|(_, v)| *v)
            .collect();
        assert_eq!(all, vec![32, 16, 8]);
        assert_eq!(m.prefix_count(), 2);
        assert_eq!(m.lengths_in_use(), 3);
    }

    #[test]
    fn host_bits_are_cleared_and_remove_drops_tables() {
        let mut m = PrefixMap::new();
        m.insert(net("192.0.2.77/24"), ());
        assert!(m.get(&net("192.0.2.0/24")).is_some());
        assert_eq!(m.remove(&net("192.0.2.1/24")), Some(()));
        assert!(m.is_empty());
        assert_eq!(m.lengths_in_use(), 0);
    }

    #[test]
    fn ipv6_and_mapped_addresses() {
        let mut m = PrefixMap::new();
        m.insert(net("2001:db8::/32"), "v6");
        m.insert(net("198.51.100.0/24"), "v4");
        m.insert(net("::/0"), "all6");
        assert_eq!(
            m.longest_match("2001:db8::1".parse().unwrap()).unwrap().1,
            &"v6"
        );
        assert_eq!(
            m.longest_match("2001:db9::1".parse().unwrap()).unwrap().1,
            &"all6"
        );
        assert_eq!(
            m.longest_match("::ffff:198.51.100.7".parse().unwrap())
                .unwrap()
                .1,
            &"v4"
        );
        assert_eq!(m.iter().count(), 3);
    }

    #[test]
    fn zero_length_prefix_matches_everything() {
        let mut m = PrefixMap::new();
        m.insert(net("0.0.0.0/0"), ());
        assert!(m.contains("255.255.255.255".parse().unwrap()));
        assert!(!m.contains("::1".parse().unwrap()));
    }

    proptest! {
        #[test]
        fn agrees_with_linear_scan(
            nets in proptest::collection::vec((any::<u32>(), 0u8..=32), 0..64),
            probes in proptest::collection::vec(any::<u32>(), 1..64),
        ) {
            let nets: Vec<IpNet> = nets
                .into_iter()
                .map(|(a, l)| IpNet::V4(Ipv4Net::new(Ipv4Addr::from(a), l).unwrap().trunc()))
                .collect();
            let m: PrefixSet = nets.iter().map(|n| (*n, ())).collect();
            for p in probes {
                let ip = IpAddr::V4(Ipv4Addr::from(p));
                let best = nets.iter().filter(|n| n.contains(&ip)).map(|n| n.prefix_len()).max();
                prop_assert_eq!(m.longest_match(ip).map(|(n, _)| n.prefix_len()), best);
            }
        }
    }
}
