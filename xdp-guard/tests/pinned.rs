//! Maps pinned under bpffs: shared by a second handle (another process's view), kept across a
//! restart, replaced when their size changes.

mod common;

use std::net::Ipv4Addr;

use common::*;
use ipnet::IpNet;
use xdp_guard::maps::ALL_MAPS;
use xdp_guard::{Error, GuardMaps, Verdict, XdpConfig, XdpGuard};

fn pinned_cfg(dir: &PinDir) -> XdpConfig {
    let mut cfg = XdpConfig::new("lo");
    cfg.pin_path = dir.0.clone();
    cfg.block_v4_entries = 1024;
    cfg.rate = 0;
    cfg
}

#[test]
fn pinned_maps_are_shared_and_survive_a_restart() {
    if !xdp_ready("pinned_maps_are_shared_and_survive_a_restart") {
        return;
    }
    let dir = PinDir::new();
    let cfg = pinned_cfg(&dir);
    let bad: IpNet = "192.0.2.10/32".parse().unwrap();
    let pkt = udp4(Ipv4Addr::new(192, 0, 2, 10), 53);

    let first = XdpGuard::load(&cfg).unwrap();
    assert_eq!(first.pin_dir(), Some(dir.0.as_path()));
    for name in ALL_MAPS {
        assert!(dir.0.join(name).exists(), "{name} pinned");
    }
    // Another handle (as `dnsd ctl` or the HTTP front would open it) writes a block ...
    let other = GuardMaps::open_pinned(&dir.0).unwrap();
    assert!(other.block(bad, u64::MAX).unwrap());
    // ... that the loaded program enforces, and both read the same counters.
    assert_eq!(first.test_run(&pkt, 1).unwrap().verdict, Verdict::Drop);
    assert_eq!(other.counters().unwrap(), first.counters().unwrap());
    assert_eq!(other.counters().unwrap().drop_blocked_addr, 1);
    assert_eq!(other.capacity(xdp_guard::BlockMapKind::AddrV4), 1024);

    // A restart reuses the pins: the block and the counters are still there.
    drop(first);
    let second = XdpGuard::load(&cfg).unwrap();
    assert!(second.maps().get(bad).unwrap().is_some());
    assert_eq!(second.counters().unwrap().drop_blocked_addr, 1);
    assert_eq!(second.test_run(&pkt, 1).unwrap().verdict, Verdict::Drop);
    drop(second);

    // A new size replaces the pinned map (empty), rather than running with the old size.
    let mut bigger = cfg.clone();
    bigger.block_v4_entries = 2048;
    let third = XdpGuard::load(&bigger).unwrap();
    assert_eq!(third.maps().capacity(xdp_guard::BlockMapKind::AddrV4), 2048);
    assert!(third.maps().get(bad).unwrap().is_none());
    assert_eq!(third.test_run(&pkt, 1).unwrap().verdict, Verdict::Pass);
    // The old handle still points at the replaced map: it no longer affects the program.
    assert!(other.get(bad).unwrap().is_some());
    let fresh = GuardMaps::open_pinned(&dir.0).unwrap();
    assert_eq!(fresh.capacity(xdp_guard::BlockMapKind::AddrV4), 2048);
}

#[test]
fn opening_missing_or_foreign_pins_fails_clearly() {
    if !xdp_ready("opening_missing_or_foreign_pins_fails_clearly") {
        return;
    }
    let dir = PinDir::new();
    match GuardMaps::open_pinned(&dir.0) {
        Err(Error::Map { name, .. }) => assert_eq!(name, ALL_MAPS[0]),
        other => panic!("expected a missing-map error, got {other:?}"),
    }
    // Pins of the right names but the wrong layout: swap two maps' pins.
    let g = XdpGuard::load(&pinned_cfg(&dir)).unwrap();
    drop(g);
    let (a, b) = (dir.0.join(ALL_MAPS[0]), dir.0.join(ALL_MAPS[1]));
    let tmp = dir.0.join("swap");
    std::fs::rename(&a, &tmp).unwrap();
    std::fs::rename(&b, &a).unwrap();
    std::fs::rename(&tmp, &b).unwrap();
    match GuardMaps::open_pinned(&dir.0) {
        Err(e @ Error::PinnedMismatch { .. }) => {
            assert!(e.to_string().contains(ALL_MAPS[0]), "{e}")
        }
        other => panic!("expected a layout mismatch, got {other:?}"),
    }
    // The loader replaces mismatched pins instead of failing.
    let g = XdpGuard::load(&pinned_cfg(&dir)).unwrap();
    GuardMaps::open_pinned(&dir.0).unwrap();
    drop(g);
}
