//! The addresses no automatic defence may block or suspect, and the shortest prefixes one may.
//!
//! A [`NeverBlock`] holds prefixes, each with where it came from (the rules file's `[global]
//! never_block`, the daemon's Redis server, a transfer peer, an upstream, the node's own
//! addresses). [`NeverBlock::conflict`] says whether a prefix overlaps one of them: the
//! prefix lies inside a listed one, or covers one (a `/8` that holds the Redis server is as
//! bad as the server's `/32`). Prefixes nest or are disjoint, so the test is one
//! longest-prefix probe for "inside" and one binary search over the sorted starts for
//! "covers": O(log n), whatever the list's length.
//!
//! A [`BlockPolicy`] adds the shortest prefix an automatic source may block (`[block]
//! min_prefix_v4`, `min_prefix_v6`); [`crate::block::BlockMap`] applies it to every insert.

use crate::prefix::PrefixMap;
use ipnet::IpNet;
use std::fmt;
use std::net::IpAddr;
use std::sync::Arc;

/// Default shortest IPv4 prefix an automatic source may block.
pub const DEFAULT_MIN_PREFIX_V4: u8 = 16;
/// Default shortest IPv6 prefix an automatic source may block.
pub const DEFAULT_MIN_PREFIX_V6: u8 = 32;

/// One never-block prefix and where it came from (for `ctl status`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Protected {
    /// The prefix.
    pub net: IpNet,
    /// Where it came from: `rules file`, `redis server`, `transfer peer`, `upstream`, `own address`...
    pub source: Arc<str>,
}

/// Prefixes out of every automatic writer's reach; see the module documentation.
#[derive(Clone, Debug, Default)]
pub struct NeverBlock {
    entries: Vec<Protected>,
    /// For "inside a listed prefix": every listed prefix, v4 as v4.
    inside: PrefixMap<u32>,
    /// For "covers a listed prefix": (start, index) in one 128-bit space (v4 as ::ffff:a.b.c.d), sorted.
    starts: Vec<(u128, u32)>,
}

/// An address as a point of the 128-bit space both families share (IPv4 mapped).
fn point(ip: IpAddr) -> u128 {
    match ip.to_canonical() {
        IpAddr::V4(a) => u128::from(a.to_ipv6_mapped()),
        IpAddr::V6(a) => u128::from(a),
    }
}

/// The first and last points of `net`.
fn range(net: &IpNet) -> (u128, u128) {
    let net = net.trunc();
    (point(net.network()), point(net.broadcast()))
}

impl NeverBlock {
    /// An empty list.
    pub fn new() -> Self {
        Self::default()
    }

    /// A list of `entries` (duplicates kept once, the first source named).
    pub fn from_entries(entries: impl IntoIterator<Item = Protected>) -> Self {
        let mut nb = NeverBlock::new();
        for e in entries {
            nb.push(e.net, &e.source);
        }
        nb
    }

    /// Adds `net` from `source` (host bits cleared; an exact duplicate is ignored).
    pub fn push(&mut self, net: IpNet, source: &str) {
        let net = canonical_net(net.trunc());
        if self.entries.iter().any(|e| e.net == net) {
            return;
        }
        let i = self.entries.len() as u32;
        self.entries.push(Protected {
            net,
            source: Arc::from(source),
        });
        self.inside.insert(net, i);
        let s = range(&net).0;
        let at = self.starts.partition_point(|&(x, _)| x < s);
        self.starts.insert(at, (s, i));
    }

    /// Every entry, in the order added.
    pub fn entries(&self) -> &[Protected] {
        &self.entries
    }

    /// Number of entries.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// True when nothing is protected.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// True when `ip` lies in a listed prefix.
    pub fn contains(&self, ip: IpAddr) -> bool {
        !self.inside.is_empty() && self.inside.contains(ip)
    }

    /// The listed entry that `net` overlaps (lies inside, or covers), if any.
    pub fn conflict(&self, net: &IpNet) -> Option<&Protected> {
        if self.entries.is_empty() {
            return None;
        }
        let net = canonical_net(net.trunc());
        // A listed prefix that holds `net`'s first address holds all of `net` or lies in it.
        if let Some((_, &i)) = self.inside.longest_match(net.network()) {
            return Some(&self.entries[i as usize]);
        }
        // A listed prefix inside `net` starts within it.
        let (lo, hi) = range(&net);
        let at = self.starts.partition_point(|&(x, _)| x < lo);
        match self.starts.get(at) {
            Some(&(s, i)) if s <= hi => Some(&self.entries[i as usize]),
            _ => None,
        }
    }

    /// The list as text, one `prefix<TAB>source` line per entry (for `ctl status`).
    pub fn render(&self) -> String {
        let mut s = String::new();
        for e in &self.entries {
            s.push_str(&format!("  {}\t{}\n", e.net, e.source));
        }
        if s.is_empty() {
            s.push_str("  (none)\n");
        }
        s
    }
}

/// The node's own addresses: every address of every interface, each as a host prefix
/// (getifaddrs; loopback included). Empty when the system does not say.
pub fn own_addresses() -> Vec<IpNet> {
    let mut out = Vec::new();
    let mut head: *mut libc::ifaddrs = std::ptr::null_mut();
    // SAFETY: getifaddrs fills `head` with a list we free below with freeifaddrs.
    if unsafe { libc::getifaddrs(&mut head) } != 0 {
        return out;
    }
    let mut cur = head;
    while !cur.is_null() {
        // SAFETY: `cur` is a node of the list getifaddrs returned, not yet freed.
        let ifa = unsafe { &*cur };
        if !ifa.ifa_addr.is_null() {
            // SAFETY: ifa_addr points at a sockaddr whose family says its real type.
            let fam = i32::from(unsafe { (*ifa.ifa_addr).sa_family });
            if fam == libc::AF_INET {
                // SAFETY: an AF_INET address is a sockaddr_in.
                let sin = unsafe { &*(ifa.ifa_addr as *const libc::sockaddr_in) };
                let ip = std::net::Ipv4Addr::from(u32::from_be(sin.sin_addr.s_addr));
                out.push(IpNet::from(IpAddr::V4(ip)));
            } else if fam == libc::AF_INET6 {
                // SAFETY: an AF_INET6 address is a sockaddr_in6.
                let sin6 = unsafe { &*(ifa.ifa_addr as *const libc::sockaddr_in6) };
                let ip = std::net::Ipv6Addr::from(sin6.sin6_addr.s6_addr);
                out.push(IpNet::from(IpAddr::V6(ip)));
            }
        }
        cur = ifa.ifa_next;
    }
    // SAFETY: `head` came from getifaddrs and is freed once.
    unsafe { libc::freeifaddrs(head) };
    out.sort();
    out.dedup();
    out
}

/// The addresses of the host part of `url` (`redis://user:pass@host:port/0`,
/// `https://host/`, `host:port`): an address as it is, a name resolved (empty when it does
/// not resolve).
pub fn url_addresses(url: &str) -> Vec<IpAddr> {
    let rest = url.split_once("://").map_or(url, |(_, r)| r);
    let rest = rest.rsplit_once('@').map_or(rest, |(_, h)| h);
    let hostport = rest.split(['/', '?']).next().unwrap_or("");
    host_addresses(hostport)
}

/// The addresses of `hostport` (`host`, `host:port`, `[v6]:port`, `v6`).
pub fn host_addresses(hostport: &str) -> Vec<IpAddr> {
    if let Ok(ip) = hostport.parse::<IpAddr>() {
        return vec![ip];
    }
    if let Ok(sa) = hostport.parse::<std::net::SocketAddr>() {
        return vec![sa.ip()];
    }
    let with_port = if hostport.contains(':') {
        hostport.to_string()
    } else {
        format!("{hostport}:0")
    };
    use std::net::ToSocketAddrs as _;
    let mut v: Vec<IpAddr> = with_port
        .to_socket_addrs()
        .map(|it| it.map(|a| a.ip()).collect())
        .unwrap_or_default();
    v.sort();
    v.dedup();
    v
}

/// An IPv4-mapped IPv6 prefix as the IPv4 prefix it is (`::ffff:192.0.2.0/120` is `192.0.2.0/24`).
pub fn canonical_net(net: IpNet) -> IpNet {
    if let IpNet::V6(n) = net
        && let Some(v4) = n.addr().to_ipv4_mapped()
        && n.prefix_len() >= 96
    {
        return ipnet::Ipv4Net::new(v4, n.prefix_len() - 96)
            .map(IpNet::V4)
            .unwrap_or(net);
    }
    net
}

/// Why an automatic block (or an operator's without `--force`) was refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Refusal {
    /// The prefix overlaps a never-block entry.
    NeverBlock,
    /// The prefix is shorter than `[block] min_prefix_v4` / `min_prefix_v6`.
    ShortPrefix,
}

impl Refusal {
    /// Every cause, in counter order.
    pub const ALL: [Refusal; 2] = [Refusal::NeverBlock, Refusal::ShortPrefix];

    /// The cause's name in counters and messages.
    pub fn name(self) -> &'static str {
        match self {
            Refusal::NeverBlock => "never_block",
            Refusal::ShortPrefix => "short_prefix",
        }
    }
}

impl fmt::Display for Refusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// What the block map refuses from automatic writers: never-block prefixes and short prefixes.
#[derive(Clone, Debug)]
pub struct BlockPolicy {
    /// Shortest IPv4 prefix allowed.
    pub min_prefix_v4: u8,
    /// Shortest IPv6 prefix allowed.
    pub min_prefix_v6: u8,
    /// Prefixes never blocked nor suspected.
    pub never_block: Arc<NeverBlock>,
}

impl Default for BlockPolicy {
    fn default() -> Self {
        BlockPolicy {
            min_prefix_v4: DEFAULT_MIN_PREFIX_V4,
            min_prefix_v6: DEFAULT_MIN_PREFIX_V6,
            never_block: Arc::default(),
        }
    }
}

impl BlockPolicy {
    /// Why `net` may not be blocked, if it may not; with the never-block entry it overlaps.
    pub fn check(&self, net: &IpNet) -> Result<(), (Refusal, Option<&Protected>)> {
        let net = canonical_net(net.trunc());
        let short = match net {
            IpNet::V4(n) => n.prefix_len() < self.min_prefix_v4,
            IpNet::V6(n) => n.prefix_len() < self.min_prefix_v6,
        };
        if short {
            return Err((Refusal::ShortPrefix, None));
        }
        match self.never_block.conflict(&net) {
            Some(p) => Err((Refusal::NeverBlock, Some(p))),
            None => Ok(()),
        }
    }

    /// The shortest prefix allowed for `net`'s family.
    pub fn min_len(&self, net: &IpNet) -> u8 {
        match canonical_net(*net) {
            IpNet::V4(_) => self.min_prefix_v4,
            IpNet::V6(_) => self.min_prefix_v6,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn net(s: &str) -> IpNet {
        crate::prefix::parse_net(s).unwrap()
    }

    #[test]
    fn overlap_both_ways_and_nothing_else() {
        let mut nb = NeverBlock::new();
        nb.push(net("192.0.2.53"), "redis server");
        nb.push(net("198.51.100.0/24"), "rules file");
        nb.push(net("2001:db8::1"), "transfer peer");
        // Inside a listed prefix.
        assert_eq!(
            nb.conflict(&net("198.51.100.7")).unwrap().source.as_ref(),
            "rules file"
        );
        assert!(nb.conflict(&net("198.51.100.128/25")).is_some());
        // Covering a listed address.
        assert_eq!(
            nb.conflict(&net("192.0.2.0/24")).unwrap().source.as_ref(),
            "redis server"
        );
        assert!(nb.conflict(&net("192.0.0.0/8")).is_some());
        assert!(nb.conflict(&net("0.0.0.0/0")).is_some());
        assert!(nb.conflict(&net("2001:db8::/32")).is_some());
        assert!(nb.conflict(&net("::/0")).is_some());
        // IPv4-mapped forms are the IPv4 prefixes they are.
        assert!(nb.conflict(&net("::ffff:192.0.2.53/128")).is_some());
        assert!(nb.contains("::ffff:198.51.100.9".parse().unwrap()));
        // Neighbours are free.
        for free in [
            "192.0.2.54",
            "192.0.2.54/31",
            "198.51.101.0/24",
            "2001:db8::2",
        ] {
            assert!(nb.conflict(&net(free)).is_none(), "{free}");
        }
        // A duplicate keeps the first source.
        nb.push(net("192.0.2.53/32"), "own address");
        assert_eq!(nb.len(), 3);
    }

    #[test]
    fn own_addresses_and_url_hosts() {
        let own = own_addresses();
        assert!(own.contains(&net("127.0.0.1")), "loopback is ours: {own:?}");
        assert_eq!(
            url_addresses("redis://user:pw@192.0.2.9:6379/0"),
            vec!["192.0.2.9".parse::<IpAddr>().unwrap()]
        );
        assert_eq!(
            url_addresses("rediss://[2001:db8::7]:6380"),
            vec!["2001:db8::7".parse::<IpAddr>().unwrap()]
        );
        assert_eq!(
            host_addresses("198.51.100.1:8080"),
            vec!["198.51.100.1".parse::<IpAddr>().unwrap()]
        );
        assert!(
            url_addresses("redis://localhost:6379")
                .iter()
                .any(|a| a.is_loopback())
        );
    }

    #[test]
    fn policy_refuses_short_prefixes_then_never_block() {
        let mut nb = NeverBlock::new();
        nb.push(net("10.1.2.3"), "own address");
        let p = BlockPolicy {
            never_block: Arc::new(nb),
            ..BlockPolicy::default()
        };
        assert_eq!(
            p.check(&net("10.0.0.0/8")).unwrap_err().0,
            Refusal::ShortPrefix
        );
        assert_eq!(
            p.check(&net("10.1.0.0/16")).unwrap_err().0,
            Refusal::NeverBlock
        );
        assert!(p.check(&net("10.2.0.0/16")).is_ok());
        assert_eq!(
            p.check(&net("2001:db8::/31")).unwrap_err().0,
            Refusal::ShortPrefix
        );
        assert!(p.check(&net("2001:db8::/32")).is_ok());
        assert_eq!(
            p.check(&net("::ffff:10.0.0.0/104")).unwrap_err().0,
            Refusal::ShortPrefix
        );
    }
}
