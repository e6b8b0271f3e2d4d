//! The TCP listeners: one per service address for a few, one wildcard per family for more.
//!
//! Thousands of TCP listeners bound to specific addresses on one port once shared a single
//! kernel hash chain; one wildcard socket per family avoids that, and the local address of
//! an accepted connection tells which service address was asked. A few addresses get a
//! listener each, so that the port stays free at every other address of the host.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

use socket2::{Domain, Protocol, Socket, Type};

use crate::ListenerError;

/// Options for the TCP listeners.
#[derive(Debug, Clone)]
pub struct TcpOptions {
    /// listen(2) backlog (the kernel caps it at `net.core.somaxconn`).
    pub backlog: i32,
    /// TCP_FASTOPEN queue length (0: off).
    pub fastopen: i32,
}

impl Default for TcpOptions {
    fn default() -> Self {
        TcpOptions {
            // A burst of thousands of connects (clients retrying over TCP after TC=1) is
            // queued, not dropped into SYN retransmits of 1, 3, 7, 15 s.
            backlog: 4096,
            fastopen: 0,
        }
    }
}

/// Most service addresses that get a TCP listener each (as Knot and NSD bind); more share
/// one wildcard listener per family (a /16 of service addresses would take 65,536 descriptors).
pub const PER_ADDRESS_MAX: usize = 256;

/// Binds a listener on each of `addrs` (non-blocking sockets).
pub fn address_listeners(
    addrs: &[IpAddr],
    port: u16,
    opts: &TcpOptions,
) -> Result<Vec<std::net::TcpListener>, ListenerError> {
    addrs
        .iter()
        .map(|&ip| listener(SocketAddr::new(ip, port), opts))
        .collect()
}

/// Binds a wildcard listener for each family present in `addrs` (non-blocking sockets).
pub fn wildcard_listeners(
    addrs: &[IpAddr],
    port: u16,
    opts: &TcpOptions,
) -> Result<Vec<std::net::TcpListener>, ListenerError> {
    let mut out = Vec::new();
    let v4 = addrs.iter().any(IpAddr::is_ipv4);
    let v6 = addrs.iter().any(IpAddr::is_ipv6);
    if v4 {
        out.push(listener(
            SocketAddr::new(Ipv4Addr::UNSPECIFIED.into(), port),
            opts,
        )?);
    }
    if v6 {
        out.push(listener(
            SocketAddr::new(Ipv6Addr::UNSPECIFIED.into(), port),
            opts,
        )?);
    }
    Ok(out)
}

/// One listening socket bound to `sa` (SO_REUSEADDR, IPV6_V6ONLY for IPv6).
pub fn listener(sa: SocketAddr, opts: &TcpOptions) -> Result<std::net::TcpListener, ListenerError> {
    let bind_err = |e| ListenerError::Bind {
        addr: sa,
        source: e,
    };
    let domain = if sa.is_ipv4() {
        Domain::IPV4
    } else {
        Domain::IPV6
    };
    let s = Socket::new(
        domain,
        Type::STREAM.nonblocking().cloexec(),
        Some(Protocol::TCP),
    )
    .map_err(bind_err)?;
    if sa.is_ipv6() {
        s.set_only_v6(true).map_err(bind_err)?;
    }
    s.set_reuse_address(true).map_err(bind_err)?;
    // A service address need not be up yet (an anycast address announced later, an IPv6
    // address in DAD, a VIP on the other node), as for the UDP sockets.
    if !sa.ip().is_unspecified() {
        if sa.is_ipv6() {
            s.set_freebind_v6(true).map_err(bind_err)?;
        } else {
            s.set_freebind_v4(true).map_err(bind_err)?;
        }
    }
    s.set_tcp_nodelay(true).map_err(bind_err)?;
    if opts.fastopen > 0 {
        // SAFETY: setsockopt with a valid int on a socket we own.
        unsafe {
            libc::setsockopt(
                std::os::fd::AsRawFd::as_raw_fd(&s),
                libc::IPPROTO_TCP,
                libc::TCP_FASTOPEN,
                (&opts.fastopen as *const i32).cast(),
                std::mem::size_of::<i32>() as libc::socklen_t,
            );
        }
    }
    s.bind(&sa.into()).map_err(bind_err)?;
    s.listen(opts.backlog).map_err(bind_err)?;
    Ok(s.into())
}
