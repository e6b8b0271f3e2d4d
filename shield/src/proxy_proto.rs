//! The PROXY protocol (HAProxy's spec, version 2 binary and version 1 text) in front of dnsd
//! and http-front: who may send a header (`proxy_allow`), reading one from a datagram or the
//! start of a connection, and writing one to an origin.
//!
//! A header is believed only from an address in `proxy_allow`: from anyone else it is dropped
//! and counted, as is a malformed header, or a missing one from a listed address. The
//! header's source is then the client every defence sees; its transport is the client's
//! (`Datagram`: unproven, `Stream`: proven, for the aimed-defences evidence). A `LOCAL` header
//! (a proxy's own health check) leaves the connection's own address in place. Parsing is
//! `ppp`'s, which borrows the input and allocates nothing.

use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use ipnet::IpNet;
use tokio::io::{AsyncRead, AsyncReadExt};

/// The 12 bytes every version 2 header starts with.
pub const V2_SIGNATURE: &[u8; 12] = b"\r\n\r\n\0\r\nQUIT\n";

/// Longest header read from a connection: version 2 with up to 512 bytes of addresses and
/// TLVs (version 1 lines are at most 107 bytes).
pub const MAX_HEADER: usize = 16 + 512;

/// The client's transport as the proxy names it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Carried {
    /// TCP (`STREAM`, or any version 1 header).
    Stream,
    /// UDP (`DGRAM`).
    Datagram,
    /// Not given (`UNSPEC`, `LOCAL`).
    Unspecified,
}

/// What a header says.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Proxied {
    /// Bytes of the header (what follows is the client's data).
    pub len: usize,
    /// The client's address and port; None for `LOCAL` or an unspecified family.
    pub source: Option<SocketAddr>,
    /// The address the client reached (the proxy's listener).
    pub destination: Option<SocketAddr>,
    /// The client's transport.
    pub carried: Carried,
}

/// Why a header was not taken.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ProxyError {
    /// More bytes are needed (a connection's header still arriving).
    #[error("incomplete PROXY header")]
    Incomplete,
    /// Not a valid header (or a version this side does not take).
    #[error("malformed PROXY header")]
    Malformed,
    /// A listed proxy sent data without a header.
    #[error("no PROXY header from a listed proxy")]
    Missing,
    /// A header from an address not in `proxy_allow`.
    #[error("PROXY header from an address not in proxy_allow")]
    Unlisted,
    /// The header did not arrive within the time allowed.
    #[error("PROXY header timed out")]
    Timeout,
}

impl ProxyError {
    /// The cause's name in counters.
    pub fn name(self) -> &'static str {
        match self {
            ProxyError::Incomplete | ProxyError::Malformed => "malformed",
            ProxyError::Missing => "missing",
            ProxyError::Unlisted => "unlisted",
            ProxyError::Timeout => "timeout",
        }
    }
}

/// True when `b` starts with the version 2 signature.
#[inline]
pub fn has_v2_signature(b: &[u8]) -> bool {
    b.len() >= V2_SIGNATURE.len() && b[0] == 0x0D && &b[..V2_SIGNATURE.len()] == V2_SIGNATURE
}

/// Parses a version 2 header at the start of `b`.
pub fn parse_v2(b: &[u8]) -> Result<Proxied, ProxyError> {
    use ppp::v2::{Addresses, Command, ParseError, Protocol};
    let h = match ppp::v2::Header::try_from(b) {
        Ok(h) => h,
        Err(ParseError::Incomplete(_) | ParseError::Partial(..)) => {
            return Err(ProxyError::Incomplete);
        }
        Err(_) => return Err(ProxyError::Malformed),
    };
    // Its TLVs must fill the rest exactly, each within it (one that claims more bytes than
    // the header holds is malformed, as haproxy and dnsdist refuse it).
    if h.len() > MAX_HEADER || h.tlvs().any(|t| t.is_err()) {
        return Err(ProxyError::Malformed);
    }
    let carried = match h.protocol {
        Protocol::Stream => Carried::Stream,
        Protocol::Datagram => Carried::Datagram,
        Protocol::Unspecified => Carried::Unspecified,
    };
    let (source, destination) = match (h.command, h.addresses) {
        (Command::Local, _) => (None, None),
        (Command::Proxy, Addresses::IPv4(a)) => (
            Some(SocketAddr::new(a.source_address.into(), a.source_port)),
            Some(SocketAddr::new(
                a.destination_address.into(),
                a.destination_port,
            )),
        ),
        (Command::Proxy, Addresses::IPv6(a)) => (
            Some(SocketAddr::new(a.source_address.into(), a.source_port)),
            Some(SocketAddr::new(
                a.destination_address.into(),
                a.destination_port,
            )),
        ),
        // A unix socket or no address: nothing to take the client's place.
        (Command::Proxy, _) => (None, None),
    };
    Ok(Proxied {
        len: h.len(),
        source,
        destination,
        carried: if h.command == Command::Local {
            Carried::Unspecified
        } else {
            carried
        },
    })
}

/// Parses a version 1 line at the start of `b`.
pub fn parse_v1(b: &[u8]) -> Result<Proxied, ProxyError> {
    use ppp::v1::Addresses;
    let Some(end) = b.windows(2).take(106).position(|w| w == b"\r\n") else {
        return Err(if b.len() >= 107 {
            ProxyError::Malformed
        } else {
            ProxyError::Incomplete
        });
    };
    let Ok(h) = ppp::v1::Header::try_from(&b[..end + 2]) else {
        return Err(ProxyError::Malformed);
    };
    let (source, destination) = match h.addresses {
        Addresses::Tcp4(a) => (
            Some(SocketAddr::new(a.source_address.into(), a.source_port)),
            Some(SocketAddr::new(
                a.destination_address.into(),
                a.destination_port,
            )),
        ),
        Addresses::Tcp6(a) => (
            Some(SocketAddr::new(a.source_address.into(), a.source_port)),
            Some(SocketAddr::new(
                a.destination_address.into(),
                a.destination_port,
            )),
        ),
        Addresses::Unknown => (None, None),
    };
    Ok(Proxied {
        len: h.header.len(),
        source,
        destination,
        carried: if source.is_some() {
            Carried::Stream
        } else {
            Carried::Unspecified
        },
    })
}

/// The proxies whose headers are believed (`proxy_allow`): a short list of prefixes.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ProxyAllow {
    nets: Vec<IpNet>,
}

impl ProxyAllow {
    /// The list from config strings (`192.0.2.1`, `2001:db8::/64`); the error names the entry.
    pub fn parse(entries: &[String]) -> Result<ProxyAllow, String> {
        let mut nets = Vec::with_capacity(entries.len());
        for (i, e) in entries.iter().enumerate() {
            let net = e
                .parse::<IpNet>()
                .or_else(|_| e.parse::<IpAddr>().map(IpNet::from))
                .map_err(|_| format!("proxy_allow[{i}]: {e:?} is not an address or prefix"))?;
            nets.push(net.trunc());
        }
        Ok(ProxyAllow { nets })
    }

    /// No proxy configured.
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.nets.is_empty()
    }

    /// The prefixes.
    pub fn nets(&self) -> &[IpNet] {
        &self.nets
    }

    /// True when `ip` (a v4-mapped IPv6 address counts as IPv4) is a listed proxy.
    #[inline]
    pub fn contains(&self, ip: IpAddr) -> bool {
        let ip = match ip {
            IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(ip, IpAddr::V4),
            v4 => v4,
        };
        self.nets.iter().any(|n| n.contains(&ip))
    }

    /// A datagram from `src`: its payload, the client and its transport. Unlisted senders'
    /// datagrams pass as they are unless they carry a header (then [`ProxyError::Unlisted`]);
    /// a listed proxy's must carry a valid version 2 header.
    #[inline]
    pub fn datagram<'a>(
        &self,
        b: &'a [u8],
        src: SocketAddr,
    ) -> Result<(&'a [u8], SocketAddr, Carried), ProxyError> {
        if self.nets.is_empty() || !self.contains(src.ip()) {
            if has_v2_signature(b) {
                return Err(ProxyError::Unlisted);
            }
            return Ok((b, src, Carried::Datagram));
        }
        if !has_v2_signature(b) {
            return Err(ProxyError::Missing);
        }
        let h = parse_v2(b).map_err(|e| match e {
            ProxyError::Incomplete => ProxyError::Malformed,
            e => e,
        })?;
        Ok((&b[h.len..], h.source.unwrap_or(src), h.carried))
    }
}

/// Reads the header a listed proxy's connection starts with (version 2, or version 1 when
/// `v1`), exactly its bytes and no more, within `timeout`.
pub async fn read_header<R: AsyncRead + Unpin>(
    r: &mut R,
    v1: bool,
    timeout: Duration,
) -> Result<Proxied, ProxyError> {
    tokio::time::timeout(timeout, read_header_inner(r, v1))
        .await
        .unwrap_or(Err(ProxyError::Timeout))
}

async fn read_header_inner<R: AsyncRead + Unpin>(
    r: &mut R,
    v1: bool,
) -> Result<Proxied, ProxyError> {
    let mut buf = [0u8; MAX_HEADER];
    // Sixteen bytes: a version 2 header's fixed part, or the start of a version 1 line
    // (at least "PROXY UNKNOWN\r\n", 15 bytes: read the first 8, then byte by byte).
    let first = if v1 { 8 } else { 16 };
    r.read_exact(&mut buf[..first])
        .await
        .map_err(|_| ProxyError::Missing)?;
    if v1 && buf.starts_with(b"PROXY ") {
        let mut n = first;
        while n < 107 {
            r.read_exact(&mut buf[n..n + 1])
                .await
                .map_err(|_| ProxyError::Malformed)?;
            n += 1;
            if buf[..n].ends_with(b"\r\n") {
                return parse_v1(&buf[..n]);
            }
        }
        return Err(ProxyError::Malformed);
    }
    if first < 16 {
        r.read_exact(&mut buf[first..16])
            .await
            .map_err(|_| ProxyError::Missing)?;
    }
    if !has_v2_signature(&buf[..16]) {
        return Err(ProxyError::Missing);
    }
    let len = u16::from_be_bytes([buf[14], buf[15]]) as usize;
    if 16 + len > MAX_HEADER {
        return Err(ProxyError::Malformed);
    }
    r.read_exact(&mut buf[16..16 + len])
        .await
        .map_err(|_| ProxyError::Malformed)?;
    parse_v2(&buf[..16 + len])
}

/// A version 2 `PROXY` header for a client at `src` that reached `dst` over TCP (families
/// differing: `dst` as the client's family when it can be, else an unspecified address).
pub fn v2_header(src: SocketAddr, dst: SocketAddr) -> Vec<u8> {
    use ppp::v2::{Builder, Command, Protocol, Version};
    let dst = match (src, dst) {
        (SocketAddr::V4(_), SocketAddr::V6(d)) => d.ip().to_ipv4_mapped().map_or_else(
            || SocketAddr::new(std::net::Ipv4Addr::UNSPECIFIED.into(), d.port()),
            |v4| SocketAddr::new(v4.into(), d.port()),
        ),
        (SocketAddr::V6(_), SocketAddr::V4(d)) => {
            SocketAddr::new(d.ip().to_ipv6_mapped().into(), d.port())
        }
        _ => dst,
    };
    Builder::with_addresses(Version::Two | Command::Proxy, Protocol::Stream, (src, dst))
        .build()
        .unwrap_or_default()
}

/// A version 1 line for a client at `src` that reached `dst` (`PROXY TCP4|TCP6 ...`; mixed
/// families as IPv6).
pub fn v1_header(src: SocketAddr, dst: SocketAddr) -> String {
    let six = |a: SocketAddr| match a.ip() {
        IpAddr::V4(v4) => v4.to_ipv6_mapped(),
        IpAddr::V6(v6) => v6,
    };
    match (src.ip(), dst.ip()) {
        (IpAddr::V4(s), IpAddr::V4(d)) => {
            format!("PROXY TCP4 {s} {d} {} {}\r\n", src.port(), dst.port())
        }
        _ => format!(
            "PROXY TCP6 {} {} {} {}\r\n",
            six(src),
            six(dst),
            src.port(),
            dst.port()
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sa(s: &str) -> SocketAddr {
        s.parse().unwrap()
    }

    #[test]
    fn v2_headers_round_trip_and_bad_ones_are_refused() {
        let h = v2_header(sa("192.0.2.7:5300"), sa("198.51.100.1:53"));
        let p = parse_v2(&h).unwrap();
        assert_eq!(p.len, h.len());
        assert_eq!(p.source, Some(sa("192.0.2.7:5300")));
        assert_eq!(p.destination, Some(sa("198.51.100.1:53")));
        assert_eq!(p.carried, Carried::Stream);
        let h6 = v2_header(sa("[2001:db8::7]:1"), sa("192.0.2.1:53"));
        assert_eq!(parse_v2(&h6).unwrap().source, Some(sa("[2001:db8::7]:1")));
        assert_eq!(parse_v2(&h[..20]), Err(ProxyError::Incomplete));
        let mut bad = h.clone();
        bad[12] = 0x31; // version 3
        assert_eq!(parse_v2(&bad), Err(ProxyError::Malformed));
        // TLVs: a well-formed one (NOOP, 2 bytes) is taken; one that claims 100 bytes and
        // carries 2, or 2 bytes that are no TLV, are malformed.
        let with_tlv = |tlv: &[u8]| {
            let mut t = h.clone();
            let len = u16::from_be_bytes([t[14], t[15]]) + tlv.len() as u16;
            t[14..16].copy_from_slice(&len.to_be_bytes());
            t.extend_from_slice(tlv);
            t
        };
        let ok = with_tlv(&[0x04, 0x00, 0x02, 0xaa, 0xbb]);
        assert_eq!(parse_v2(&ok).unwrap().len, ok.len());
        for tlv in [&[0x04, 0x00, 0x64, 0xaa, 0xbb][..], &[0x04, 0x00][..]] {
            assert_eq!(
                parse_v2(&with_tlv(tlv)),
                Err(ProxyError::Malformed),
                "{tlv:02x?}"
            );
        }
        // A datagram header (as dnsdist sends) with a DNS query after it.
        let mut d = h.clone();
        d[13] = 0x12;
        d.extend_from_slice(b"\x12\x34query");
        let allow = ProxyAllow::parse(&["127.0.0.0/8".into()]).unwrap();
        let (payload, client, carried) = allow.datagram(&d, sa("127.0.0.1:9")).unwrap();
        assert_eq!(
            (payload, client, carried),
            (
                &b"\x12\x34query"[..],
                sa("192.0.2.7:5300"),
                Carried::Datagram
            )
        );
        // From an unlisted address: refused; a listed one without a header: refused.
        assert_eq!(
            allow.datagram(&d, sa("10.0.0.1:9")),
            Err(ProxyError::Unlisted)
        );
        assert_eq!(
            allow.datagram(b"\x12\x34plain dns", sa("127.0.0.1:9")),
            Err(ProxyError::Missing)
        );
        assert_eq!(
            allow.datagram(&d[..20], sa("127.0.0.1:9")),
            Err(ProxyError::Malformed)
        );
        // Without proxies, a header is still refused; plain DNS passes.
        let none = ProxyAllow::default();
        assert_eq!(
            none.datagram(&d, sa("127.0.0.1:9")),
            Err(ProxyError::Unlisted)
        );
        assert!(none.datagram(b"\x12\x34abc", sa("127.0.0.1:9")).is_ok());
        // A v4-mapped peer matches an IPv4 entry.
        assert!(allow.contains("::ffff:127.0.0.2".parse().unwrap()));
        assert!(
            ProxyAllow::parse(&["nonsense".into()])
                .unwrap_err()
                .contains("proxy_allow[0]")
        );
    }

    #[test]
    fn v1_lines_parse() {
        let p = parse_v1(b"PROXY TCP4 192.0.2.9 192.0.2.1 40000 443\r\nGET /").unwrap();
        assert_eq!(p.source, Some(sa("192.0.2.9:40000")));
        assert_eq!(p.len, 42);
        assert_eq!(parse_v1(b"PROXY UNKNOWN\r\n").unwrap().source, None);
        let line = v1_header(sa("192.0.2.9:40000"), sa("192.0.2.1:443"));
        assert_eq!(
            parse_v1(line.as_bytes()).unwrap().source,
            Some(sa("192.0.2.9:40000"))
        );
        let mixed = v1_header(sa("192.0.2.9:1"), sa("[2001:db8::1]:443"));
        assert!(
            mixed.starts_with("PROXY TCP6 ::ffff:192.0.2.9 2001:db8::1 1 443"),
            "{mixed}"
        );
        assert_eq!(
            parse_v1(b"PROXY TCP4 192.0.2.9"),
            Err(ProxyError::Incomplete)
        );
        assert_eq!(
            parse_v1(b"PROXY TCP9 x y 1 2\r\n"),
            Err(ProxyError::Malformed)
        );
    }

    #[tokio::test]
    async fn headers_are_read_exactly_from_a_stream() {
        let mut h = v2_header(sa("192.0.2.7:5300"), sa("198.51.100.1:53"));
        h.extend_from_slice(b"after");
        let mut r = &h[..];
        let p = read_header(&mut r, false, Duration::from_secs(1))
            .await
            .unwrap();
        assert_eq!(p.source, Some(sa("192.0.2.7:5300")));
        assert_eq!(r, b"after");
        let line = b"PROXY TCP6 2001:db8::1 2001:db8::2 1 2\r\nafter".to_vec();
        let mut r = &line[..];
        let p = read_header(&mut r, true, Duration::from_secs(1))
            .await
            .unwrap();
        assert_eq!(p.source, Some(sa("[2001:db8::1]:1")));
        assert_eq!(r, b"after");
        let mut r = &b"GET / HTTP/1.1\r\n\r\n"[..];
        assert_eq!(
            read_header(&mut r, true, Duration::from_secs(1)).await,
            Err(ProxyError::Missing)
        );
    }
}
