//! `listen` entries: addresses and prefixes, expanded into the list of service addresses.

use std::net::IpAddr;

use hashbrown::HashSet;
use ipnet::IpNet;

use crate::ListenerError;

/// Most addresses one prefix may expand to (a /16 of IPv4); larger prefixes are refused.
pub const MAX_EXPAND: u64 = 1 << 16;

/// Most addresses a whole `listen` list may expand to: one UDP socket each, so far past any
/// descriptor limit; without this bound a generated list of many /16s made the config check
/// itself allocate gigabytes (found by the abuse tests: 2000 × /16 = 131M addresses).
pub const MAX_TOTAL: usize = 1 << 20;

/// Expands `listen` entries (addresses or CIDR prefixes) into distinct addresses, in order.
pub fn expand(entries: &[String]) -> Result<Vec<IpAddr>, ListenerError> {
    let mut out = Vec::new();
    let mut seen: HashSet<IpAddr> = HashSet::new();
    for e in entries {
        if out.len() >= MAX_TOTAL {
            return Err(ListenerError::BadAddress {
                entry: e.clone(),
                why: format!("the listen list expands to more than {MAX_TOTAL} addresses"),
            });
        }
        let s = e.trim();
        if let Ok(ip) = s.parse::<IpAddr>() {
            if seen.insert(ip) {
                out.push(ip);
            }
            continue;
        }
        let net: IpNet = s.parse().map_err(|_| ListenerError::BadAddress {
            entry: e.clone(),
            why: "expected an IP address or a prefix such as 127.1.0.0/22".into(),
        })?;
        let host_bits = (net.max_prefix_len() - net.prefix_len()) as u32;
        if host_bits > 16 {
            return Err(ListenerError::BadAddress {
                entry: e.clone(),
                why: format!("prefix expands to more than {MAX_EXPAND} addresses"),
            });
        }
        // Every address of the prefix, network and broadcast included: these are service
        // addresses on loopback or anycast, not a LAN.
        let first = net.network();
        let count = 1u64 << host_bits;
        for i in 0..count {
            let ip = match first {
                IpAddr::V4(a) => IpAddr::V4((u32::from(a) + i as u32).into()),
                IpAddr::V6(a) => IpAddr::V6((u128::from(a) + i as u128).into()),
            };
            if seen.insert(ip) {
                out.push(ip);
            }
        }
    }
    if out.len() > MAX_TOTAL {
        return Err(ListenerError::BadAddress {
            entry: entries.last().cloned().unwrap_or_default(),
            why: format!("the listen list expands to more than {MAX_TOTAL} addresses"),
        });
    }
    Ok(out)
}

/// A set of service addresses, for checking an accepted connection's local address.
#[derive(Debug, Default, Clone)]
pub struct AddrSet {
    set: HashSet<IpAddr, foldhash::fast::FixedState>,
}

impl AddrSet {
    /// The set of `addrs`.
    pub fn new(addrs: &[IpAddr]) -> AddrSet {
        let mut set = HashSet::with_hasher(foldhash::fast::FixedState::default());
        set.extend(addrs.iter().copied().map(canonical));
        AddrSet { set }
    }

    /// True when `ip` (IPv4-mapped IPv6 counts as IPv4) is a service address.
    pub fn contains(&self, ip: IpAddr) -> bool {
        self.set.contains(&canonical(ip))
    }

    /// Number of addresses.
    pub fn len(&self) -> usize {
        self.set.len()
    }

    /// True when empty.
    pub fn is_empty(&self) -> bool {
        self.set.is_empty()
    }
}

fn canonical(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(v6) => v6
            .to_ipv4_mapped()
            .map(IpAddr::V4)
            .unwrap_or(IpAddr::V6(v6)),
        v4 => v4,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn expands_prefixes_and_dedups() {
        let v = expand(&["127.1.0.0/30".into(), "127.1.0.1".into(), "::1".into()]).unwrap();
        let s: Vec<String> = v.iter().map(|a| a.to_string()).collect();
        assert_eq!(
            s,
            vec!["127.1.0.0", "127.1.0.1", "127.1.0.2", "127.1.0.3", "::1"]
        );
        assert_eq!(expand(&["127.1.0.0/18".into()]).unwrap().len(), 16384);
        assert!(expand(&["10.0.0.0/8".into()]).is_err());
        assert!(expand(&["bogus".into()]).is_err());
        let v6 = expand(&["2001:db8::/126".into()]).unwrap();
        assert_eq!(v6.len(), 4);
    }

    #[test]
    fn a_generated_list_past_the_total_is_refused_without_expanding_it() {
        // 2000 distinct /16s would be 131M addresses.
        let list: Vec<String> = (0..2000u32)
            .map(|i| format!("{}.{}.0.0/16", 10 + i / 256, i % 256))
            .collect();
        let e = expand(&list).unwrap_err().to_string();
        assert!(e.contains("more than 1048576 addresses"), "{e}");
        assert_eq!(expand(&list[..16]).unwrap().len(), 16 << 16);
    }

    #[test]
    fn addr_set_maps_v4_in_v6() {
        let s = AddrSet::new(&["127.0.0.1".parse().unwrap()]);
        assert!(s.contains("127.0.0.1".parse().unwrap()));
        assert!(s.contains("::ffff:127.0.0.1".parse().unwrap()));
        assert!(!s.contains("127.0.0.2".parse().unwrap()));
    }
}
