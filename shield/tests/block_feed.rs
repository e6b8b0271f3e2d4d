//! Block map under concurrency: readers never see wrong answers while writers churn, and the change feed never loses an entry.

use ipnet::{IpNet, Ipv4Net};
use shield::block::{
    BlockConfig, BlockEntry, BlockMap, Change, Delivery, Evidence, Origin, RemoveCause,
    Subscription,
};
use std::collections::HashMap;
use std::net::{IpAddr, Ipv4Addr};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

const FAR: u64 = u64::MAX / 2;

fn host(i: u32) -> IpNet {
    IpNet::V4(Ipv4Net::new(Ipv4Addr::from(0x0a00_0000 + i), 32).unwrap())
}

fn entry(i: u32, exp: u64) -> BlockEntry {
    BlockEntry::new(host(i), exp, "t", Origin::Local, Evidence::Tcp)
}

/// Applies deliveries to a mirror, as the XDP loader or the Redis publisher would.
fn apply(mirror: &mut HashMap<IpNet, BlockEntry>, d: Delivery) -> (usize, usize) {
    match d {
        Delivery::Changes(cs) => {
            let n = cs.len();
            for c in cs {
                match c {
                    Change::Upsert(e) => {
                        mirror.insert(e.net, e);
                    }
                    Change::Remove { net, .. } => {
                        mirror.remove(&net);
                    }
                }
            }
            (n, 0)
        }
        Delivery::Resync(all) => {
            mirror.clear();
            mirror.extend(all.into_iter().map(|e| (e.net, e)));
            (0, 1)
        }
    }
}

fn drain(sub: &mut Subscription, mirror: &mut HashMap<IpNet, BlockEntry>) {
    while let Some(d) = sub.poll(4096) {
        apply(mirror, d);
    }
}

fn same(mirror: &HashMap<IpNet, BlockEntry>, map: &BlockMap) {
    let truth: HashMap<IpNet, BlockEntry> = map.entries().into_iter().map(|e| (e.net, e)).collect();
    assert_eq!(mirror.len(), truth.len());
    assert!(mirror == &truth, "mirror differs from the map");
}

#[test]
fn readers_see_stable_entries_and_fresh_inserts_while_writer_churns() {
    let map = BlockMap::new(BlockConfig {
        capacity: 1_000_000,
        feed_capacity: 1024,
        ..BlockConfig::default()
    });
    // Stable entries 0..1000 never change; 1_000_000.. are never inserted.
    map.insert_batch((0..1000).map(|i| entry(i, FAR)));
    let published = Arc::new(AtomicU64::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    let readers: Vec<_> = (0..2)
        .map(|t| {
            let r = map.reader();
            let (published, stop) = (published.clone(), stop.clone());
            std::thread::spawn(move || {
                let mut n = 0u64;
                let mut i = t as u32;
                while !stop.load(Ordering::Relaxed) {
                    i = i.wrapping_mul(1_103_515_245).wrapping_add(12345);
                    let ip = |k: u32| IpAddr::V4(Ipv4Addr::from(0x0a00_0000 + k));
                    assert!(r.lookup(ip(i % 1000), 1).is_some(), "stable entry missing");
                    assert!(
                        r.lookup(ip(1_000_000 + i % 1000), 1).is_none(),
                        "phantom entry"
                    );
                    // Every insert the writer has announced must be visible.
                    let p = published.load(Ordering::Acquire);
                    if p > 0 {
                        assert!(
                            r.lookup(ip(100_000 + p as u32), 1).is_some(),
                            "announced insert {p} not visible"
                        );
                    }
                    n += 1;
                }
                n
            })
        })
        .collect();
    for k in 1..=20_000u32 {
        // Announced entries live forever; churn entries come and go.
        map.insert(entry(100_000 + k, FAR));
        published.store(k as u64, Ordering::Release);
        map.insert(entry(500_000 + k, 10 + (k % 50) as u64));
        if k % 7 == 0 {
            map.remove(host(500_000 + k - 3), RemoveCause::Local);
        }
        if k % 100 == 0 {
            map.expire(30, 64);
        }
    }
    stop.store(true, Ordering::Relaxed);
    let lookups: u64 = readers.into_iter().map(|h| h.join().unwrap()).sum();
    assert!(lookups > 0);
    assert!(map.stats().expirations > 0);
}

#[test]
fn burst_of_100k_unique_reaches_a_concurrent_subscriber() {
    let map = BlockMap::new(BlockConfig {
        capacity: 1_000_000,
        feed_capacity: 8192,
        ..BlockConfig::default()
    });
    let mut sub = map.subscribe("xdp");
    let done = Arc::new(AtomicBool::new(false));
    let d2 = done.clone();
    let consumer = std::thread::spawn(move || {
        let mut mirror = HashMap::new();
        let (mut changes, mut resyncs) = (0, 0);
        loop {
            let finished = d2.load(Ordering::Acquire);
            sub.wait_timeout(Duration::from_millis(5));
            while let Some(d) = sub.poll(4096) {
                let (c, r) = apply(&mut mirror, d);
                changes += c;
                resyncs += r;
            }
            if finished {
                break;
            }
        }
        (mirror, changes, resyncs, sub.stats())
    });
    for i in 0..100_000 {
        map.insert(entry(i, FAR));
    }
    done.store(true, Ordering::Release);
    let (mirror, changes, resyncs, st) = consumer.join().unwrap();
    assert_eq!(mirror.len(), 100_000, "every insert reached the subscriber");
    same(&mirror, &map);
    // Either every change arrived, or each lag was reported and healed by a resync.
    assert_eq!(st.resyncs as usize, resyncs);
    assert_eq!(st.overflows, st.resyncs);
    if resyncs == 0 {
        assert_eq!(changes, 100_000);
    }
}

#[test]
fn idle_subscriber_gets_a_resync_with_all_100k() {
    let map = BlockMap::new(BlockConfig {
        capacity: 1_000_000,
        feed_capacity: 1000,
        ..BlockConfig::default()
    });
    let mut sub = map.subscribe("redis");
    for i in 0..100_000 {
        map.insert(entry(i, FAR));
    }
    let Some(Delivery::Resync(all)) = sub.poll(10) else {
        panic!("expected a resync")
    };
    assert_eq!(all.len(), 100_000);
    let st = sub.stats();
    assert_eq!((st.overflows, st.resyncs), (1, 1));
    assert_eq!(st.lagged, 100_000, "lag counted");
    assert_eq!(map.stats().subscribers[0].resyncs, 1);
}

#[test]
fn mirror_converges_under_random_churn_with_evictions() {
    use rand::{Rng, SeedableRng};
    let map = BlockMap::new(BlockConfig {
        capacity: 500,
        feed_capacity: 64,
        ..BlockConfig::default()
    });
    let mut sub = map.subscribe("mirror");
    let mut mirror = HashMap::new();
    let mut rng = rand::rngs::StdRng::seed_from_u64(42);
    for step in 0..30_000u64 {
        let k: u32 = rng.random_range(0..2000);
        match rng.random_range(0..10) {
            0 => {
                map.remove(host(k), RemoveCause::Operator);
            }
            1 => {
                map.expire(step, rng.random_range(1..20));
            }
            _ => {
                map.insert(entry(k, step + rng.random_range(1..5000)));
            }
        }
        if rng.random_range(0..50) == 0 {
            drain(&mut sub, &mut mirror);
        }
        assert!(map.len() <= 500);
    }
    drain(&mut sub, &mut mirror);
    same(&mirror, &map);
    let s = map.stats();
    assert!(s.evictions > 0, "capacity was hit");
    assert!(s.subscribers[0].resyncs > 0, "lag happened and was healed");
}

#[test]
fn eviction_is_counted_and_delivered() {
    let map = BlockMap::new(BlockConfig {
        capacity: 10,
        feed_capacity: 100,
        ..BlockConfig::default()
    });
    let mut sub = map.subscribe("s");
    for i in 0..15 {
        map.insert(entry(i, 1000 + i as u64));
    }
    assert_eq!(map.len(), 10);
    assert_eq!(map.stats().evictions, 5);
    let Some(Delivery::Changes(cs)) = sub.poll(1000) else {
        panic!()
    };
    let evicted: Vec<IpNet> = cs
        .iter()
        .filter_map(|c| match c {
            Change::Remove {
                net,
                cause: RemoveCause::Evicted,
            } => Some(*net),
            _ => None,
        })
        .collect();
    assert_eq!(
        evicted,
        (0..5).map(host).collect::<Vec<_>>(),
        "the closest to expiry go first"
    );
}
