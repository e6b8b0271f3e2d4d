//! The mirror from the shield block map into the kernel maps: resyncs make the kernel exact,
//! changes apply in order, expired entries are skipped and swept, full maps are counted.

mod common;

use std::collections::BTreeSet;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use common::*;
use ipnet::IpNet;
use shield::block::{BlockConfig, BlockEntry, BlockMap, Evidence, Origin, RemoveCause};
use xdp_guard::{
    ExpiryClock, GuardMaps, KernelBlock, KernelExpiry, Mirror, MirrorOptions, XdpConfig, XdpGuard,
};

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64
}

fn net(s: &str) -> IpNet {
    s.parse().unwrap()
}

fn entry(s: &str, ttl_ms: u64) -> BlockEntry {
    BlockEntry::new(
        net(s),
        now_ms() + ttl_ms,
        "test",
        Origin::Local,
        Evidence::Tcp,
    )
}

fn kernel_nets(maps: &GuardMaps) -> BTreeSet<IpNet> {
    maps.list_all()
        .unwrap()
        .into_iter()
        .map(|b| b.net)
        .collect()
}

fn shield_nets(blocks: &BlockMap) -> BTreeSet<IpNet> {
    blocks.entries().into_iter().map(|e| e.net).collect()
}

fn guard_with(v4: u32, p4: u32) -> XdpGuard {
    let mut cfg = XdpConfig::new("lo");
    cfg.pin = false;
    cfg.rate = 0;
    cfg.block_v4_entries = v4;
    cfg.prefix_v4_entries = p4;
    XdpGuard::load(&cfg).unwrap()
}

const HOUR: u64 = 3_600_000;

#[test]
fn first_drain_makes_the_kernel_equal_to_the_block_map() {
    if !xdp_ready("first_drain_makes_the_kernel_equal_to_the_block_map") {
        return;
    }
    for batch in [true, false] {
        let g = private_guard(&[53], 0, 0);
        let maps = g.maps();
        // Stale entries from an earlier run (pinned maps survive restarts).
        for s in [
            "192.0.2.200/32",
            "192.0.2.128/25",
            "2001:db8::200/128",
            "2001:db8:f::/48",
        ] {
            maps.block(net(s), u64::MAX).unwrap();
        }
        let blocks = BlockMap::new(BlockConfig::default());
        for s in [
            "192.0.2.1/32",
            "192.0.2.64/26",
            "2001:db8::1/128",
            "2001:db8:1::/48",
        ] {
            blocks.insert(entry(s, HOUR));
        }
        let opts = MirrorOptions {
            batch,
            ..Default::default()
        };
        let mut m = Mirror::with_options(maps.clone(), blocks.subscribe("xdp"), opts);
        assert_eq!(m.drain(), 4);
        assert_eq!(kernel_nets(maps), shield_nets(&blocks), "batch={batch}");
        let s = m.stats().snapshot();
        assert_eq!((s.resyncs, s.upserted, s.deleted), (1, 4, 4));
        // Expiries land on the kernel clock within the conversion's rounding.
        let e = blocks.get(net("192.0.2.1/32")).unwrap();
        let k = maps.get(net("192.0.2.1/32")).unwrap().unwrap().combined();
        let want = match ExpiryClock::now().to_kernel(e.expires_ms) {
            KernelExpiry::At(ns) => ns,
            other => panic!("{other:?}"),
        };
        assert!(
            k.expires_ns.abs_diff(want) < 2_000_000_000,
            "{} vs {want}",
            k.expires_ns
        );
    }

    // An empty block map at subscription: the kernel is emptied on the first drain.
    let g = private_guard(&[53], 0, 0);
    g.maps().block(net("192.0.2.200/32"), u64::MAX).unwrap();
    let blocks = BlockMap::new(BlockConfig::default());
    let mut m = Mirror::new(g.maps().clone(), blocks.subscribe("xdp"));
    m.drain();
    assert!(kernel_nets(g.maps()).is_empty());
}

#[test]
fn changes_apply_in_order_and_expired_entries_are_skipped() {
    if !xdp_ready("changes_apply_in_order_and_expired_entries_are_skipped") {
        return;
    }
    let mut syscalls = Vec::new();
    for batch in [true, false] {
        let g = private_guard(&[53], 0, 0);
        let blocks = BlockMap::new(BlockConfig::default());
        let opts = MirrorOptions {
            batch,
            ..Default::default()
        };
        let mut m = Mirror::with_options(g.maps().clone(), blocks.subscribe("xdp"), opts);
        m.drain();
        blocks.insert(entry("192.0.2.1/32", HOUR));
        blocks.insert(entry("192.0.2.2/32", HOUR));
        blocks.insert(entry("192.0.2.0/28", HOUR));
        blocks.remove(net("192.0.2.1/32"), RemoveCause::Operator);
        blocks.insert(entry("192.0.2.1/32", HOUR)); // re-added after removal: must stay
        blocks.insert(entry("2001:db8::5/128", HOUR));
        blocks.remove(net("192.0.2.2/32"), RemoveCause::Operator);
        for i in 4..10 {
            blocks.insert(entry(&format!("192.0.2.{i}/32"), HOUR));
        }
        // Already expired on arrival: not installed.
        blocks.insert(BlockEntry::new(
            net("192.0.2.3/32"),
            now_ms() - 1,
            "old",
            Origin::Peer,
            Evidence::Tcp,
        ));
        m.drain();
        let mut want: BTreeSet<IpNet> = ["192.0.2.1/32", "192.0.2.0/28", "2001:db8::5/128"]
            .map(net)
            .into();
        want.extend((4..10).map(|i| net(&format!("192.0.2.{i}/32"))));
        assert_eq!(kernel_nets(g.maps()), want, "batch={batch}");
        let s = m.stats().snapshot();
        assert_eq!(s.expired_skipped, 1);
        assert_eq!((s.full, s.failed), (0, 0));
        syscalls.push(s.syscalls);
    }
    // A read-modify-write reads each of a few keys on its own, but writes them in batches.
    assert!(syscalls[0] < syscalls[1], "batched {syscalls:?}");
}

#[test]
fn feed_overflow_resyncs_without_loss() {
    if !xdp_ready("feed_overflow_resyncs_without_loss") {
        return;
    }
    let g = private_guard(&[53], 0, 0);
    let blocks = BlockMap::new(BlockConfig {
        capacity: 100_000,
        feed_capacity: 16,
        ..BlockConfig::default()
    });
    let mut m = Mirror::new(g.maps().clone(), blocks.subscribe("xdp"));
    m.drain();
    for i in 0..1000u32 {
        let ip = std::net::Ipv4Addr::from(0xC000_0207u32 + (i << 8)); // distinct keys, no traffic
        blocks.insert(BlockEntry::new(
            IpNet::from(std::net::IpAddr::V4(ip)),
            now_ms() + HOUR,
            "burst",
            Origin::Local,
            Evidence::Tcp,
        ));
    }
    m.drain();
    assert_eq!(kernel_nets(g.maps()).len(), 1000);
    assert_eq!(kernel_nets(g.maps()), shield_nets(&blocks));
    assert!(
        m.stats().snapshot().resyncs >= 2,
        "{:?}",
        m.stats().snapshot()
    );
}

#[test]
fn full_kernel_maps_are_counted() {
    if !xdp_ready("full_kernel_maps_are_counted") {
        return;
    }
    for batch in [true, false] {
        let g = guard_with(16, 4);
        let blocks = BlockMap::new(BlockConfig::default());
        let opts = MirrorOptions {
            batch,
            ..Default::default()
        };
        let mut m = Mirror::with_options(g.maps().clone(), blocks.subscribe("xdp"), opts);
        m.drain();
        for i in 0..40u8 {
            blocks.insert(entry(&format!("192.0.2.{i}/32"), HOUR));
        }
        for i in 0..6u8 {
            blocks.insert(entry(&format!("198.51.{i}.0/24"), HOUR));
        }
        m.drain();
        let s = m.stats().snapshot();
        assert_eq!(s.full, 24 + 2, "batch={batch}: {s:?}");
        assert_eq!(s.failed, 0);
        assert_eq!(
            g.maps()
                .list(xdp_guard::BlockMapKind::AddrV4)
                .unwrap()
                .len(),
            16
        );
        assert_eq!(
            g.maps()
                .list(xdp_guard::BlockMapKind::PrefixV4)
                .unwrap()
                .len(),
            4
        );
        // Room again after removals: a later change fits.
        for i in 0..40u8 {
            blocks.remove(net(&format!("192.0.2.{i}/32")), RemoveCause::Local);
        }
        blocks.insert(entry("192.0.2.99/32", HOUR));
        m.drain();
        assert_eq!(
            g.maps()
                .list(xdp_guard::BlockMapKind::AddrV4)
                .unwrap()
                .len(),
            1
        );
    }
}

#[test]
fn sweep_removes_expired_kernel_entries() {
    if !xdp_ready("sweep_removes_expired_kernel_entries") {
        return;
    }
    let g = private_guard(&[53], 0, 0);
    let blocks = BlockMap::new(BlockConfig::default());
    let mut m = Mirror::new(g.maps().clone(), blocks.subscribe("xdp"));
    m.drain();
    let past = xdp_guard::boot_ns() - 1;
    g.maps().apply(
        &[
            KernelBlock {
                net: net("192.0.2.1/32"),
                expires_ns: past,
                dns_only: false,
            },
            KernelBlock {
                net: net("192.0.2.64/26"),
                expires_ns: past,
                dns_only: false,
            },
            KernelBlock {
                net: net("2001:db8::/64"),
                expires_ns: 0,
                dns_only: false,
            },
        ],
        &[],
        true,
    );
    assert_eq!(m.sweep(), 2);
    let left: BTreeSet<IpNet> = [net("2001:db8::/64")].into();
    assert_eq!(kernel_nets(g.maps()), left);
    assert_eq!(m.stats().snapshot().swept, 2);
}

#[test]
fn background_mirror_follows_the_block_map_and_stops() {
    if !xdp_ready("background_mirror_follows_the_block_map_and_stops") {
        return;
    }
    let g = private_guard(&[53], 0, 0);
    let blocks = BlockMap::new(BlockConfig::default());
    let opts = MirrorOptions {
        idle_wait: Duration::from_millis(5),
        ..Default::default()
    };
    let handle = Mirror::with_options(g.maps().clone(), blocks.subscribe("xdp"), opts)
        .spawn()
        .unwrap();
    for i in 0..200u8 {
        blocks.insert(entry(&format!("192.0.2.{i}/32"), HOUR));
    }
    let deadline = Instant::now() + Duration::from_secs(20);
    while kernel_nets(g.maps()).len() < 200 {
        assert!(Instant::now() < deadline, "mirror did not catch up");
        std::thread::sleep(Duration::from_millis(5));
    }
    blocks.remove(net("192.0.2.7/32"), RemoveCause::Operator);
    // Stopping drains what is pending.
    let m = handle.stop().expect("mirror thread");
    assert_eq!(kernel_nets(g.maps()), shield_nets(&blocks));
    assert_eq!(m.stats().snapshot().failed, 0);
}

#[test]
fn two_mirrors_into_one_guard_keep_each_others_blocks() {
    if !xdp_ready("two_mirrors_into_one_guard_keep_each_others_blocks") {
        return;
    }
    let g = private_guard(&[53], 0, 0);
    let dns_blocks = BlockMap::new(BlockConfig::default());
    let http_blocks = BlockMap::new(BlockConfig::default());
    dns_blocks.insert(entry("192.0.2.1/32", HOUR));
    http_blocks.insert(entry("198.51.100.0/24", HOUR));
    http_blocks.insert(BlockEntry::new(
        net("198.51.100.7/32"),
        u64::MAX,
        "test",
        Origin::Local,
        Evidence::Tcp,
    ));
    let dns_maps = g.maps().clone().with_slot(xdp_guard::SLOT_DNSD);
    let http_maps = g.maps().clone().with_slot(xdp_guard::SLOT_HTTP_FRONT);
    let mut dns = Mirror::new(dns_maps.clone(), dns_blocks.subscribe("xdp"));
    let mut http = Mirror::new(http_maps, http_blocks.subscribe("xdp"));
    // Each first drain is a resync; the second must not erase the first one's entries.
    dns.drain();
    http.drain();
    let all: BTreeSet<IpNet> = ["192.0.2.1/32", "198.51.100.0/24", "198.51.100.7/32"]
        .iter()
        .map(|s| net(s))
        .collect();
    assert_eq!(kernel_nets(g.maps()), all);
    // dnsd resyncs again (say its feed overflowed) with a changed map: its stale entry goes,
    // http-front's stay.
    dns_maps
        .replace_all(
            &[KernelBlock {
                net: net("192.0.2.2/32"),
                expires_ns: xdp_guard::boot_ns() + HOUR * 1_000_000,
                dns_only: false,
            }],
            true,
        )
        .unwrap();
    let after: BTreeSet<IpNet> = ["192.0.2.2/32", "198.51.100.0/24", "198.51.100.7/32"]
        .iter()
        .map(|s| net(s))
        .collect();
    assert_eq!(kernel_nets(g.maps()), after);
    // The never-ending block keeps reading back as never, in http-front's slot only.
    let never = g.maps().get(net("198.51.100.7/32")).unwrap().unwrap();
    assert_eq!(never.combined().expires_ns, 0);
    assert_eq!(never.value.slot(xdp_guard::SLOT_HTTP_FRONT), Some(0));
    assert_eq!(never.value.slot(xdp_guard::SLOT_DNSD), None);
    assert!(
        g.maps()
            .is_blocked("198.51.100.7".parse().unwrap())
            .unwrap()
    );
    // Both sources are dropped by the program, and clear() empties the maps whoever wrote.
    assert!(g.maps().is_blocked("192.0.2.2".parse().unwrap()).unwrap());
    assert!(
        g.maps()
            .is_blocked("198.51.100.9".parse().unwrap())
            .unwrap()
    );
    g.maps().clear().unwrap();
    assert!(kernel_nets(g.maps()).is_empty());
}

/// One key blocked by both writers, each until its own time: the entry drops until the later
/// of the two ends; one writer lifting (or resyncing without) its block leaves the other's;
/// an expired slot is cleared by the sweep while the live one stays.
#[test]
fn overlapping_blocks_of_two_writers_last_until_the_longer_one_ends() {
    if !xdp_ready("overlapping_blocks_of_two_writers_last_until_the_longer_one_ends") {
        return;
    }
    let g = private_guard(&[53], 0, 0);
    let dns = g.maps().clone().with_slot(xdp_guard::SLOT_DNSD);
    let http = g.maps().clone().with_slot(xdp_guard::SLOT_HTTP_FRONT);
    let n = net("192.0.2.44/32");
    let ip = "192.0.2.44".parse().unwrap();
    let now = xdp_guard::boot_ns();
    let short = now + 1_000_000_000; // 1 s
    let long = now + 3_600_000_000_000; // 1 h
    let r = dns.apply(
        &[KernelBlock {
            net: n,
            expires_ns: short,
            dns_only: false,
        }],
        &[],
        true,
    );
    assert_eq!(r.upserted, 1);
    http.apply(
        &[KernelBlock {
            net: n,
            expires_ns: long,
            dns_only: false,
        }],
        &[],
        true,
    );
    let e = g.maps().get(n).unwrap().unwrap();
    assert_eq!(e.value.slot(xdp_guard::SLOT_DNSD), Some(short));
    assert_eq!(e.value.slot(xdp_guard::SLOT_HTTP_FRONT), Some(long));
    assert_eq!(e.combined().expires_ns, long);
    // dnsd's block ends: still dropped for http-front's; the sweep clears dnsd's slot only.
    let swept = g.maps().sweep_expired(short, true).unwrap();
    assert_eq!(swept.deleted, 1);
    let e = g.maps().get(n).unwrap().unwrap();
    assert_eq!(e.value.slot(xdp_guard::SLOT_DNSD), None);
    assert!(g.maps().is_blocked(ip).unwrap());
    // dnsd blocks again, then lifts: http-front's block stays.
    dns.apply(
        &[KernelBlock {
            net: n,
            expires_ns: long,
            dns_only: false,
        }],
        &[],
        true,
    );
    let r = dns.apply(&[], &[n], true);
    assert_eq!((r.deleted, r.absent), (1, 0));
    assert!(g.maps().is_blocked(ip).unwrap());
    // Lifting what it does not hold is counted as absent, and changes nothing.
    let r = dns.apply(&[], &[n], true);
    assert_eq!((r.deleted, r.absent), (0, 1));
    // dnsd resyncs to nothing: http-front's block stays.
    dns.replace_all(&[], true).unwrap();
    assert!(g.maps().is_blocked(ip).unwrap());
    // http-front lifts its block: the entry, held by no writer, is gone.
    let r = http.unblock(n).unwrap();
    assert!(r);
    assert_eq!(g.maps().get(n).unwrap(), None);
    assert!(!g.maps().is_blocked(ip).unwrap());
}

/// Writers in two threads of one process and on two handles opened from the pins (as two
/// daemons would) on the same keys: no write undoes another (the read-modify-write runs
/// under the writers' lock).
#[test]
fn concurrent_writers_never_undo_each_other() {
    if !xdp_ready("concurrent_writers_never_undo_each_other") {
        return;
    }
    let dir = tempfile::Builder::new()
        .prefix("palisade-xdp-lock-")
        .tempdir_in("/sys/fs/bpf")
        .ok();
    let Some(dir) = dir else {
        palisade_tests::skipped("bpffs not mounted at /sys/fs/bpf");
        return;
    };
    let mut cfg = xdp_guard::XdpConfig::new("lo");
    cfg.pin_path = dir.path().join("pins");
    cfg.block_v4_entries = 4096;
    let g = XdpGuard::load(&cfg).expect("load with pins");
    let a = GuardMaps::open_pinned(&cfg.pin_path)
        .unwrap()
        .with_slot(xdp_guard::SLOT_DNSD);
    let b = GuardMaps::open_pinned(&cfg.pin_path)
        .unwrap()
        .with_slot(xdp_guard::SLOT_HTTP_FRONT);
    let keys: Vec<IpNet> = (0..200)
        .map(|i| net(&format!("10.9.{}.{}/32", i / 250, i % 250)))
        .collect();
    let far = xdp_guard::boot_ns() + 3_600_000_000_000;
    std::thread::scope(|s| {
        for (maps, off) in [(&a, 1u64), (&b, 2u64)] {
            let keys = &keys;
            s.spawn(move || {
                for round in 0..20 {
                    for k in keys {
                        maps.apply(
                            &[KernelBlock {
                                net: *k,
                                expires_ns: far + round * 10 + off,
                                dns_only: false,
                            }],
                            &[],
                            false,
                        );
                    }
                }
            });
        }
    });
    for k in &keys {
        let e = g.maps().get(*k).unwrap().unwrap();
        assert_eq!(
            e.value.slot(xdp_guard::SLOT_DNSD),
            Some(far + 190 + 1),
            "{k}"
        );
        assert_eq!(
            e.value.slot(xdp_guard::SLOT_HTTP_FRONT),
            Some(far + 190 + 2),
            "{k}"
        );
    }
    drop(g);
    let _ = std::fs::remove_dir_all(dir.path());
}

/// Each mirror writes its block map's never-block set into the never trie under its slot's
/// bit, and follows a new set: another writer's block of an address there is passed by the
/// program, and blocks again once the set no longer holds it.
#[test]
fn a_mirror_writes_its_never_block_set_for_the_node() {
    if !xdp_ready("a_mirror_writes_its_never_block_set_for_the_node") {
        return;
    }
    let g = private_guard(&[53], 0, 0);
    let dns_blocks = BlockMap::new(BlockConfig::default());
    let mut nb = shield::never_block::NeverBlock::new();
    nb.push(net("192.0.2.53/32"), "transfer peer");
    dns_blocks.set_policy(shield::never_block::BlockPolicy {
        never_block: std::sync::Arc::new(nb),
        ..Default::default()
    });
    let mut dns = Mirror::new(
        g.maps().clone().with_slot(xdp_guard::SLOT_DNSD),
        dns_blocks.subscribe("xdp"),
    );
    dns.step();
    let front = g.maps().clone().with_slot(xdp_guard::SLOT_HTTP_FRONT);
    assert!(front.block(net("192.0.2.53/32"), u64::MAX).unwrap());
    let verdict = |g: &XdpGuard| {
        g.test_run(&udp4("192.0.2.53".parse().unwrap(), 80), 1)
            .unwrap()
            .verdict
    };
    assert_eq!(verdict(&g), xdp_guard::Verdict::Pass);
    assert!(g.counters().unwrap().never_block >= 1);
    // A mirror that stops takes its bit off; started again, it writes it anew.
    dns.withdraw_never();
    assert_eq!(verdict(&g), xdp_guard::Verdict::Drop);
    dns = Mirror::new(
        g.maps().clone().with_slot(xdp_guard::SLOT_DNSD),
        dns_blocks.subscribe("xdp2"),
    );
    dns.step();
    assert_eq!(verdict(&g), xdp_guard::Verdict::Pass);
    // A set larger than the trie: what found no room is counted.
    let mut big = shield::never_block::NeverBlock::new();
    for i in 0..(xdp_guard::maps::DEFAULT_NEVER_ENTRIES + 4) {
        big.push(
            IpNet::from(std::net::IpAddr::V4(std::net::Ipv4Addr::from(
                0x6400_0000 + i,
            ))),
            "own address",
        );
    }
    big.push(net("192.0.2.53/32"), "transfer peer");
    dns_blocks.set_policy(shield::never_block::BlockPolicy {
        never_block: std::sync::Arc::new(big),
        ..Default::default()
    });
    let start = Instant::now();
    while dns.stats().snapshot().never_full == 0 {
        assert!(
            start.elapsed() < Duration::from_secs(20),
            "the full trie not counted"
        );
        std::thread::sleep(Duration::from_millis(200));
        dns.step();
    }
    // The set changed (a reload dropped the peer): followed within a second or so.
    dns_blocks.set_policy(shield::never_block::BlockPolicy::default());
    let start = Instant::now();
    while verdict(&g) != xdp_guard::Verdict::Drop {
        assert!(
            start.elapsed() < Duration::from_secs(5),
            "the new set not followed"
        );
        std::thread::sleep(Duration::from_millis(100));
        dns.step();
    }
}
