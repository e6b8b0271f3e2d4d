//! Sockets for load generation: address lists, one UDP socket per source address, limits.

use std::io;
use std::net::Ipv4Addr;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};

/// Expands a comma-separated list of IPv4 addresses and prefixes (`127.3.0.0/16`); when
/// the list holds more than `max` addresses, takes `max` of them evenly spaced (so that a
/// few hundred sources spread over many /24s).
pub fn expand(list: &str, max: usize) -> Result<Vec<Ipv4Addr>, String> {
    let mut all: Vec<(u32, u64)> = Vec::new();
    let mut total = 0u64;
    for item in list.split(',').map(str::trim).filter(|s| !s.is_empty()) {
        let (ip, len) = match item.split_once('/') {
            Some((ip, p)) => (ip, p.parse::<u32>().map_err(|e| format!("{item}: {e}"))?),
            None => (item, 32),
        };
        let ip: Ipv4Addr = ip.parse().map_err(|e| format!("{item}: {e}"))?;
        if len > 32 {
            return Err(format!("{item}: prefix longer than 32"));
        }
        let n = 1u64 << (32 - len);
        let base = u32::from(ip) & (u64::from(u32::MAX) << (32 - len)) as u32;
        all.push((base, n));
        total += n;
    }
    if total == 0 {
        return Err(format!("no addresses in {list:?}"));
    }
    let take = (max as u64).min(total).max(1);
    let mut out = Vec::with_capacity(take as usize);
    for k in 0..take {
        let mut idx = k * total / take;
        for &(base, n) in &all {
            if idx < n {
                out.push(Ipv4Addr::from(base.wrapping_add(idx as u32)));
                break;
            }
            idx -= n;
        }
    }
    Ok(out)
}

/// Raises the soft limit on open files to the hard limit; returns the new soft limit.
pub fn raise_nofile() -> u64 {
    let mut r = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit/setrlimit with a valid struct.
    unsafe {
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut r) == 0 {
            r.rlim_cur = r.rlim_max;
            libc::setrlimit(libc::RLIMIT_NOFILE, &r);
        }
    }
    r.rlim_cur
}

/// A `sockaddr_in` for `ip:port`.
pub fn sockaddr(ip: Ipv4Addr, port: u16) -> libc::sockaddr_in {
    libc::sockaddr_in {
        sin_family: libc::AF_INET as libc::sa_family_t,
        sin_port: port.to_be(),
        sin_addr: libc::in_addr {
            s_addr: u32::from(ip).to_be(),
        },
        sin_zero: [0; 8],
    }
}

/// Reads back an IPv4 `sockaddr_in`.
pub fn from_sockaddr(sa: &libc::sockaddr_in) -> (Ipv4Addr, u16) {
    (
        Ipv4Addr::from(u32::from_be(sa.sin_addr.s_addr)),
        u16::from_be(sa.sin_port),
    )
}

fn setopt(fd: RawFd, level: libc::c_int, opt: libc::c_int, val: libc::c_int) -> io::Result<()> {
    // SAFETY: setsockopt with a valid int on a descriptor we own.
    let rc = unsafe {
        libc::setsockopt(
            fd,
            level,
            opt,
            (&val as *const libc::c_int).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Options of a client UDP socket.
#[derive(Debug, Clone, Copy, Default)]
pub struct UdpClientOpts {
    /// SO_RCVBUF(FORCE) in bytes (0: default).
    pub rcvbuf: usize,
    /// Kernel receive timestamps (SO_TIMESTAMPNS).
    pub timestamps: bool,
    /// Count datagrams dropped on a full receive queue (SO_RXQ_OVFL).
    pub rxq_ovfl: bool,
}

/// A non-blocking UDP socket bound to `src` (any port).
pub fn udp_client(src: Ipv4Addr, o: UdpClientOpts) -> io::Result<OwnedFd> {
    // SAFETY: plain syscall; the fd is owned on success.
    let fd = unsafe {
        libc::socket(
            libc::AF_INET,
            libc::SOCK_DGRAM | libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC,
            0,
        )
    };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: fd is a fresh, valid descriptor.
    let s = unsafe { OwnedFd::from_raw_fd(fd) };
    if o.rcvbuf > 0 {
        let v = o.rcvbuf as libc::c_int;
        if setopt(fd, libc::SOL_SOCKET, libc::SO_RCVBUFFORCE, v).is_err() {
            setopt(fd, libc::SOL_SOCKET, libc::SO_RCVBUF, v)?;
        }
    }
    if o.timestamps {
        setopt(fd, libc::SOL_SOCKET, libc::SO_TIMESTAMPNS, 1)?;
    }
    if o.rxq_ovfl {
        setopt(fd, libc::SOL_SOCKET, libc::SO_RXQ_OVFL, 1)?;
    }
    bind(s.as_raw_fd(), src, 0)?;
    Ok(s)
}

/// Binds `fd` to `ip:port`.
pub fn bind(fd: RawFd, ip: Ipv4Addr, port: u16) -> io::Result<()> {
    let sa = sockaddr(ip, port);
    // SAFETY: bind with a valid sockaddr_in of the right length.
    let rc = unsafe {
        libc::bind(
            fd,
            (&sa as *const libc::sockaddr_in).cast(),
            std::mem::size_of::<libc::sockaddr_in>() as libc::socklen_t,
        )
    };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// A blocking TCP socket bound to `src`, connected to `dst:port` within `timeout`.
pub fn tcp_connect(
    src: Ipv4Addr,
    dst: Ipv4Addr,
    port: u16,
    timeout: std::time::Duration,
) -> io::Result<std::net::TcpStream> {
    // SAFETY: plain syscall; the fd is owned on success.
    let fd = unsafe { libc::socket(libc::AF_INET, libc::SOCK_STREAM | libc::SOCK_CLOEXEC, 0) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: fd is a fresh, valid descriptor.
    let s = unsafe { OwnedFd::from_raw_fd(fd) };
    bind(fd, src, 0)?;
    let tv = libc::timeval {
        tv_sec: timeout.as_secs() as libc::time_t,
        tv_usec: timeout.subsec_micros() as libc::suseconds_t,
    };
    // SAFETY: setsockopt with a valid timeval; connect() honours SO_SNDTIMEO on Linux.
    unsafe {
        libc::setsockopt(
            fd,
            libc::SOL_SOCKET,
            libc::SO_SNDTIMEO,
            (&tv as *const libc::timeval).cast(),
            std::mem::size_of::<libc::timeval>() as libc::socklen_t,
        );
    }
    let sa = sockaddr(dst, port);
    // SAFETY: connect with a valid sockaddr_in.
    let rc = unsafe {
        libc::connect(
            fd,
            (&sa as *const libc::sockaddr_in).cast(),
            std::mem::size_of::<libc::sockaddr_in>() as libc::socklen_t,
        )
    };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    let t = std::net::TcpStream::from(s);
    t.set_read_timeout(Some(timeout))?;
    t.set_write_timeout(Some(timeout))?;
    t.set_nodelay(true)?;
    Ok(t)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn expand_spreads() {
        let v = expand("127.3.0.0/16", 256).unwrap();
        assert_eq!(v.len(), 256);
        assert_eq!(v[0], Ipv4Addr::new(127, 3, 0, 0));
        assert_eq!(v[1], Ipv4Addr::new(127, 3, 1, 0));
        let v = expand("127.0.0.1,127.2.0.0/30", 100).unwrap();
        assert_eq!(v.len(), 5);
        assert_eq!(v[4], Ipv4Addr::new(127, 2, 0, 3));
        assert!(expand("nope", 1).is_err());
    }
}
