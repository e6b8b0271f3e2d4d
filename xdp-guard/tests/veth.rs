//! Real traffic: the guard attached to a veth end inside a namespace, fed by the shield block
//! map through the mirror; packets sent from another namespace over real sockets.

mod common;

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr, UdpSocket};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use common::*;
use ipnet::IpNet;
use palisade_tests::netns::VethPair;
use shield::block::{BlockConfig, BlockEntry, BlockMap, Evidence, Origin, RemoveCause};
use xdp_guard::{GuardMaps, Mirror, MirrorOptions, Mode, XdpGuard};

const PLAIN: u16 = 9000;
const DNS: u16 = 5300;
const MARK: &[u8] = b"end";

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64
}

fn ip(s: &str) -> IpAddr {
    s.parse().unwrap()
}

fn net(s: &str) -> IpNet {
    s.parse().unwrap()
}

/// Polls `cond` until it holds; fails the test after a generous deadline (no timing is
/// asserted: the deadline only turns a hang into a failure).
fn wait_for(what: &str, mut cond: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while !cond() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(5));
    }
}

fn block(blocks: &BlockMap, maps: &GuardMaps, s: &str) {
    blocks.insert(BlockEntry::new(
        net(s),
        now_ms() + 3_600_000,
        "test",
        Origin::Operator,
        Evidence::Operator,
    ));
    wait_for(&format!("{s} in the kernel map"), || {
        maps.get(net(s)).unwrap().is_some()
    });
}

fn unblock(blocks: &BlockMap, maps: &GuardMaps, s: &str) {
    assert!(blocks.remove(net(s), RemoveCause::Operator));
    wait_for(&format!("{s} out of the kernel map"), || {
        maps.get(net(s)).unwrap().is_none()
    });
}

struct Rig {
    pair: VethPair,
    guard: XdpGuard,
    blocks: Arc<BlockMap>,
    plain: UdpSocket,
    dns: UdpSocket,
    _mirror: xdp_guard::MirrorHandle,
}

impl Rig {
    fn new(mode: Mode, sources: &[&str], rate: u64, burst: u64) -> Self {
        let pair = VethPair::new().expect("create namespaces and veth pair");
        for s in sources {
            pair.add_source(ip(s)).unwrap();
        }
        let mut guard = private_guard(&[DNS], rate, burst);
        let (if_b, want) = (pair.if_b.clone(), mode);
        let got = pair
            .b
            .run(|| guard.attach(&if_b, want))
            .unwrap()
            .expect("attach XDP");
        match mode {
            Mode::Auto => assert!(matches!(got, Mode::Native | Mode::Generic)),
            m => assert_eq!(got, m),
        }
        assert_eq!(
            guard.attached().map(|(i, _)| i.to_owned()),
            Some(pair.if_b.clone())
        );
        let (plain, dns) = pair
            .b
            .run(|| {
                let bind = |p: u16| {
                    let s = UdpSocket::bind(SocketAddr::from(([0u16; 8], p))).unwrap();
                    s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
                    s
                };
                (bind(PLAIN), bind(DNS))
            })
            .unwrap();
        let blocks = BlockMap::new(BlockConfig::default());
        let opts = MirrorOptions {
            idle_wait: Duration::from_millis(10),
            ..Default::default()
        };
        let mirror = Mirror::with_options(guard.maps().clone(), blocks.subscribe("xdp"), opts)
            .spawn()
            .unwrap();
        Rig {
            pair,
            guard,
            blocks,
            plain,
            dns,
            _mirror: mirror,
        }
    }

    /// Sends `n` datagrams from each source to `port` on B, then a marker from A's own address
    /// to the plain port; all from one thread pinned to one CPU, so that they are processed in
    /// order and the rate-limit bucket of each source is a single one.
    fn send(&self, sources: &[&str], port: u16, n: usize) {
        let sources: Vec<IpAddr> = sources.iter().map(|s| ip(s)).collect();
        self.pair
            .a
            .run(|| {
                pin_to_current_cpu();
                for src in &sources {
                    let s = UdpSocket::bind(SocketAddr::new(*src, 0)).unwrap();
                    let dst: IpAddr = match src {
                        IpAddr::V4(_) => VethPair::B4.into(),
                        IpAddr::V6(_) => VethPair::B6.into(),
                    };
                    for i in 0..n {
                        s.send_to(format!("{src} {i}").as_bytes(), (dst, port))
                            .unwrap();
                    }
                }
                let m = UdpSocket::bind(SocketAddr::new(VethPair::A4.into(), 0)).unwrap();
                m.send_to(MARK, (VethPair::B4, PLAIN)).unwrap();
            })
            .unwrap();
    }

    /// Datagrams received per source: reads the plain port up to the marker, then whatever the
    /// DNS port holds (everything sent before the marker has been processed by then).
    fn received(&self) -> HashMap<IpAddr, usize> {
        let mut got = HashMap::new();
        let mut buf = [0u8; 512];
        loop {
            let (n, from) = self.plain.recv_from(&mut buf).expect("marker datagram");
            if &buf[..n] == MARK {
                break;
            }
            *got.entry(from.ip().to_canonical()).or_insert(0) += 1;
        }
        self.dns.set_nonblocking(true).unwrap();
        while let Ok((_, from)) = self.dns.recv_from(&mut buf) {
            *got.entry(from.ip().to_canonical()).or_insert(0) += 1;
        }
        self.dns.set_nonblocking(false).unwrap();
        got
    }
}

fn blocks_on_veth(mode: Mode, test: &str) {
    if !xdp_ready(test) {
        return;
    }
    let (addr, in_prefix, ok, addr6, ok6) = (
        "192.0.2.10",
        "192.0.2.70",
        "192.0.2.11",
        "2001:db8::10",
        "2001:db8::11",
    );
    let all = [addr, in_prefix, ok, addr6, ok6];
    let rig = Rig::new(mode, &all, 0, 0);
    let maps = rig.guard.maps().clone();
    block(&rig.blocks, &maps, "192.0.2.10/32");
    block(&rig.blocks, &maps, "192.0.2.64/26");
    block(&rig.blocks, &maps, "2001:db8::10/128");

    let n = 25;
    let before = rig.guard.counters().unwrap();
    rig.send(&all, PLAIN, n);
    let got = rig.received();
    let after = rig.guard.counters().unwrap();
    assert_eq!(got.get(&ip(ok)), Some(&n), "{got:?}");
    assert_eq!(got.get(&ip(ok6)), Some(&n), "{got:?}");
    for s in [addr, in_prefix, addr6] {
        assert_eq!(got.get(&ip(s)), None, "{s} is blocked: {got:?}");
    }
    assert_eq!(
        after.drop_blocked_addr - before.drop_blocked_addr,
        2 * n as u64
    );
    assert_eq!(
        after.drop_blocked_prefix - before.drop_blocked_prefix,
        n as u64
    );
    assert!(after.pass - before.pass > 2 * n as u64);

    // Change the blocks while attached: lift one, add another.
    unblock(&rig.blocks, &maps, "192.0.2.10/32");
    block(&rig.blocks, &maps, "192.0.2.11/32");
    let before = rig.guard.counters().unwrap();
    rig.send(&[addr, ok], PLAIN, n);
    let got = rig.received();
    let after = rig.guard.counters().unwrap();
    assert_eq!(got.get(&ip(addr)), Some(&n), "{addr} unblocked: {got:?}");
    assert_eq!(got.get(&ip(ok)), None, "{ok} now blocked: {got:?}");
    assert_eq!(after.drop_blocked_addr - before.drop_blocked_addr, n as u64);

    // Detach: nothing is dropped any more.
    let mut guard = rig.guard;
    guard.detach().unwrap();
    assert_eq!(guard.attached(), None);
    let before = guard.counters().unwrap();
    let (pair, plain, dns) = (rig.pair, rig.plain, rig.dns);
    let rig2 = RigView {
        pair: &pair,
        plain: &plain,
        dns: &dns,
    };
    rig2.send(&[ok], n);
    assert_eq!(rig2.received_plain().get(&ip(ok)), Some(&n));
    assert_eq!(
        guard.counters().unwrap(),
        before,
        "no packets seen once detached"
    );
}

/// The sockets and namespaces of a rig whose guard was detached.
struct RigView<'a> {
    pair: &'a VethPair,
    plain: &'a UdpSocket,
    dns: &'a UdpSocket,
}

impl RigView<'_> {
    fn send(&self, sources: &[&str], n: usize) {
        let sources: Vec<IpAddr> = sources.iter().map(|s| ip(s)).collect();
        self.pair
            .a
            .run(|| {
                for src in &sources {
                    let s = UdpSocket::bind(SocketAddr::new(*src, 0)).unwrap();
                    for _ in 0..n {
                        s.send_to(b"x", (VethPair::B4, PLAIN)).unwrap();
                    }
                }
                let m = UdpSocket::bind(SocketAddr::new(VethPair::A4.into(), 0)).unwrap();
                m.send_to(MARK, (VethPair::B4, PLAIN)).unwrap();
            })
            .unwrap();
    }

    fn received_plain(&self) -> HashMap<IpAddr, usize> {
        let _ = self.dns;
        let mut got = HashMap::new();
        let mut buf = [0u8; 64];
        loop {
            let (n, from) = self.plain.recv_from(&mut buf).expect("marker datagram");
            if &buf[..n] == MARK {
                return got;
            }
            *got.entry(from.ip().to_canonical()).or_insert(0) += 1;
        }
    }
}

#[test]
fn blocks_on_veth_native() {
    blocks_on_veth(Mode::Native, "blocks_on_veth_native");
}

#[test]
fn blocks_on_veth_generic() {
    blocks_on_veth(Mode::Generic, "blocks_on_veth_generic");
}

#[test]
fn udp_to_dns_port_above_rate_is_dropped_with_burst_on_veth() {
    let test = "udp_to_dns_port_above_rate_is_dropped_with_burst_on_veth";
    if !xdp_ready(test) {
        return;
    }
    let (rate, burst, n) = (1, 8, 60);
    let (src, other) = ("192.0.2.12", "2001:db8::12");
    let rig = Rig::new(Mode::Auto, &[src, other], rate, burst);
    let before = rig.guard.counters().unwrap();
    let start = Instant::now();
    rig.send(&[src, other], DNS, n);
    let got = rig.received();
    let bound = burst + (start.elapsed().as_secs_f64() * rate as f64).ceil() as u64 + 1;
    let after = rig.guard.counters().unwrap();
    let dropped = after.drop_ratelimit - before.drop_ratelimit;
    for s in [src, other] {
        let passed = *got.get(&ip(s)).unwrap_or(&0) as u64;
        assert!(
            passed >= burst,
            "{s}: burst of {burst} honoured, got {passed}"
        );
        assert!(
            passed <= bound,
            "{s}: {passed} passed, more than burst + refill {bound}"
        );
    }
    let passed: u64 = [src, other]
        .iter()
        .map(|s| *got.get(&ip(s)).unwrap_or(&0) as u64)
        .sum();
    assert_eq!(
        dropped + passed,
        2 * n as u64,
        "every datagram passed or was counted as dropped"
    );
    // The plain port is not rate-limited.
    rig.send(&[src], PLAIN, n);
    assert_eq!(rig.received().get(&ip(src)), Some(&n));
}
