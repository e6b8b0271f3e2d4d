//! Loopback addresses and free ports for tests running in parallel (one process per test
//! under nextest, one thread per test under `cargo test`).
//!
//! Each call to [`test_ip`] gives a fresh address in 127.0.0.0/8 made from the pid and a
//! counter; [`free_port`] picks a port below the kernel's ephemeral range (so that no
//! outgoing connection takes it meanwhile) that is free for UDP on the address and for TCP
//! on the wildcard address (dnsd listens for TCP on 0.0.0.0).

use std::net::{Ipv4Addr, SocketAddr, TcpListener, UdpSocket};
use std::sync::atomic::{AtomicU32, Ordering};

use crate::rng::Rng;

static NEXT: AtomicU32 = AtomicU32::new(0);

/// A loopback address of its own for this call: 127.A.B.C from the pid and a counter.
pub fn test_ip() -> Ipv4Addr {
    let pid = std::process::id();
    let n = NEXT.fetch_add(1, Ordering::Relaxed);
    let a = 2 + (pid % 200) as u8;
    let b = ((pid / 200) % 256) as u8;
    let c = 1 + (n % 254) as u8;
    Ipv4Addr::new(127, a, b, c)
}

/// The low end of the kernel's ephemeral port range (32768 when unknown).
fn ephemeral_low() -> u16 {
    std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|s| s.split_whitespace().next().and_then(|p| p.parse().ok()))
        .unwrap_or(32768)
}

/// A port free for UDP on `ip` and for TCP on both `ip` and the wildcard address; panics
/// after 500 tries.
pub fn free_port(ip: Ipv4Addr) -> u16 {
    let low = 10_000u16;
    let high = ephemeral_low().max(low + 1000);
    let mut rng = Rng::from_entropy();
    for _ in 0..500 {
        let port = low + rng.below((high - low) as u64) as u16;
        let tcp_any = TcpListener::bind(SocketAddr::from((Ipv4Addr::UNSPECIFIED, port)));
        let udp = UdpSocket::bind(SocketAddr::from((ip, port)));
        if tcp_any.is_ok() && udp.is_ok() {
            return port;
        }
    }
    panic!("no free port found for {ip} after 500 tries");
}

/// A fresh loopback address with a free port.
pub fn test_addr() -> SocketAddr {
    let ip = test_ip();
    SocketAddr::from((ip, free_port(ip)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn addresses_are_loopback_and_ports_free() {
        let (a, b) = (test_ip(), test_ip());
        assert!(a.is_loopback() && b.is_loopback());
        assert_ne!(a, b);
        let p = free_port(a);
        assert!(UdpSocket::bind(SocketAddr::from((a, p))).is_ok());
    }
}
