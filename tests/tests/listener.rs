//! The socket fleet end to end: 16,384 loopback addresses, each with its own UDP socket and
//! all behind one wildcard TCP socket; and isolation: a flood that overflows one address's
//! receive queue leaves every other address answering.

use std::net::{IpAddr, Ipv4Addr, SocketAddr, UdpSocket};
use std::time::{Duration, Instant};

use palisade_tests::servers::{Dnsd, Zone};
use palisade_tests::wire::{QueryOpts, RawMsg, build_query};

/// A /18 of loopback chosen from the process id, so parallel test processes do not collide.
fn block18() -> (Ipv4Addr, String) {
    let b = 64 + (std::process::id() % 60) as u8 * 2; // 127.64.0.0 .. 127.182.0.0, even
    let base = Ipv4Addr::new(127, b, 0, 0);
    (base, format!("{base}/18"))
}

fn v4(a: IpAddr) -> Ipv4Addr {
    match a {
        IpAddr::V4(a) => a,
        IpAddr::V6(_) => unreachable!("IPv4 test addresses"),
    }
}

fn addr_at(base: Ipv4Addr, i: u32) -> IpAddr {
    IpAddr::V4(Ipv4Addr::from(u32::from(base) + i))
}

/// One UDP query to `server`; true when answered with data.
fn udp_ok(server: SocketAddr, timeout: Duration) -> bool {
    let s = UdpSocket::bind("127.0.0.1:0").unwrap();
    s.connect(server).unwrap();
    s.set_read_timeout(Some(timeout)).unwrap();
    s.send(&build_query(1, "www.example.com.", 1, &QueryOpts::udp()))
        .unwrap();
    let mut buf = [0u8; 1024];
    match s.recv(&mut buf) {
        Ok(n) => RawMsg::parse(&buf[..n]).is_ok_and(|m| m.rcode() == 0 && m.counts[1] > 0),
        Err(_) => false,
    }
}

fn tcp_ok(server: SocketAddr) -> bool {
    use std::io::{Read, Write};
    let Ok(mut s) = std::net::TcpStream::connect_timeout(&server, Duration::from_secs(2)) else {
        return false;
    };
    s.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
    let q =
        palisade_tests::client::frame(&build_query(2, "www.example.com.", 1, &QueryOpts::udp()));
    if s.write_all(&q).is_err() {
        return false;
    }
    let mut len = [0u8; 2];
    if s.read_exact(&mut len).is_err() {
        return false;
    }
    let mut msg = vec![0u8; u16::from_be_bytes(len) as usize];
    s.read_exact(&mut msg).is_ok()
        && RawMsg::parse(&msg).is_ok_and(|m| m.rcode() == 0 && m.counts[1] > 0)
}

#[test]
fn sixteen_thousand_addresses_answer_udp_and_tcp() {
    let (base, net) = block18();
    let dnsd = Dnsd::builder()
        .zone(Zone::data("example.com."))
        .listen(&[&net], v4(addr_at(base, 1)))
        .raw("[defence.rrl]\nenabled = false")
        .start();
    let port = dnsd.addr().port();
    let (_, status) = dnsd.ctl(&["status"]);
    eprintln!("status: {status}");
    assert!(status.contains("16384 addresses"), "{status}");
    // A sample across the block answers over UDP and over TCP (the wildcard socket).
    for i in [0u32, 1, 2, 255, 256, 4097, 8191, 12345, 16382, 16383] {
        let a = SocketAddr::new(addr_at(base, i), port);
        assert!(udp_ok(a, Duration::from_secs(2)), "UDP to {a}");
        assert!(tcp_ok(a), "TCP to {a}");
    }
    // TCP to a loopback address outside the list reaches the wildcard socket but is closed.
    let outside = SocketAddr::new(addr_at(base, 16384), port);
    assert!(!tcp_ok(outside), "TCP to {outside} must be refused");
    assert!(
        !udp_ok(outside, Duration::from_millis(300)),
        "nothing listens on UDP there"
    );
    let stats = dnsd.stats();
    assert!(stats["drops.tcp_wrong_address"] >= 1, "{stats:?}");
}

#[test]
fn a_flooded_address_does_not_hurt_the_others() {
    let (base, _) = block18();
    // 64 addresses, small receive buffers so that the flood overflows its queue fast.
    let first = addr_at(base, 0);
    let net = format!("{first}/26");
    let dnsd = Dnsd::builder()
        .zone(Zone::data("example.com."))
        .listen(&[&net], v4(first))
        .server_option("udp_rcvbuf = 65536")
        .raw("[defence.rrl]\nenabled = false\n[defence.random_subdomain]\nenabled = false")
        .start();
    let port = dnsd.addr().port();
    let target = SocketAddr::new(addr_at(base, 7), port);
    // The flood: random subdomains to one address from a few sources, bounded in time and count.
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let floods: Vec<_> = (0..2)
        .map(|t| {
            let stop = stop.clone();
            std::thread::spawn(move || {
                let s =
                    UdpSocket::bind(SocketAddr::new(IpAddr::from([127, 9, 9, t + 1]), 0)).unwrap();
                s.connect(target).unwrap();
                let opts = QueryOpts::udp();
                let mut sent = 0u64;
                let deadline = Instant::now() + Duration::from_secs(4);
                let mut rng = palisade_tests::rng::Rng::new(t as u64);
                while !stop.load(std::sync::atomic::Ordering::Relaxed)
                    && Instant::now() < deadline
                    && sent < 2_000_000
                {
                    let name = format!("f{:x}.example.com.", rng.next_u64());
                    let _ = s.send(&build_query(sent as u16, &name, 1, &opts));
                    sent += 1;
                }
                sent
            })
        })
        .collect();
    // Probes to the other 63 addresses at a low rate while the flood runs.
    std::thread::sleep(Duration::from_millis(300));
    let mut lat = Vec::new();
    let mut failed = 0;
    let probe_deadline = Instant::now() + Duration::from_secs(3);
    let mut i = 0u32;
    while Instant::now() < probe_deadline {
        let n = 1 + (i % 62); // 1..=62, then skip 7: 1..=6 and 8..=63
        let n = if n >= 7 { n + 1 } else { n }; // skip the flooded one
        let a = SocketAddr::new(addr_at(base, n), port);
        let t0 = Instant::now();
        if udp_ok(a, Duration::from_secs(1)) {
            lat.push(t0.elapsed());
        } else {
            failed += 1;
        }
        i += 1;
        std::thread::sleep(Duration::from_millis(20));
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let sent: u64 = floods.into_iter().map(|h| h.join().unwrap()).sum();
    lat.sort();
    let pct = |p: f64| lat[((lat.len() as f64 * p) as usize).min(lat.len() - 1)];
    let stats = dnsd.stats();
    let top: Vec<&str> = dnsd_top(&dnsd);
    eprintln!(
        "flood: {sent} queries to {target}; probes: {} answered, {failed} failed, p50 {:?}, p99 {:?}, max {:?}; \
         kernel drops {}, send errors {}; top: {top:?}",
        lat.len(),
        pct(0.5),
        pct(0.99),
        lat.last().unwrap(),
        stats["udp.kernel_drops"],
        stats["udp.send_errors"]
    );
    assert_eq!(failed, 0, "every probe to another address is answered");
    assert!(lat.len() > 50);
    assert!(
        stats["udp.kernel_drops"] > 0,
        "the flood must overflow its queue: {stats:?}"
    );
    assert!(
        top.first()
            .is_some_and(|l| l.contains(&target.ip().to_string())),
        "the flooded address tops the kernel-drop list: {top:?}"
    );
}

fn dnsd_top(dnsd: &Dnsd) -> Vec<&'static str> {
    let (_, s) = dnsd.ctl(&["stats"]);
    s.lines()
        .filter(|l| l.starts_with("udp.kernel_drops.top"))
        .map(|l| &*Box::leak(l.to_string().into_boxed_str()))
        .collect()
}
