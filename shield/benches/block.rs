//! Block map lookups against `RwLock<HashMap>` and `Mutex<HashMap>`, alone and with another core busy; and a 100k burst through the change feed.
//!
//! `cargo bench -p shield --bench block` (each group runs about a second per case).

use criterion::{BenchmarkId, Criterion, criterion_group, criterion_main};
use hashbrown::HashMap;
use ipnet::{IpNet, Ipv4Net};
use shield::block::{
    BlockConfig, BlockEntry, BlockMap, BlockReader, Delivery, Evidence, Origin, Reason,
};
use std::hint::black_box;
use std::net::{IpAddr, Ipv4Addr};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};

const FAR: u64 = u64::MAX / 2;
const NOW: u64 = 1_000;

fn cfg() -> Criterion {
    Criterion::default()
        .sample_size(10)
        .measurement_time(Duration::from_secs(1))
        .warm_up_time(Duration::from_millis(200))
}

/// The i-th distinct address (an odd multiplier permutes u32).
fn addr(i: u32) -> IpAddr {
    IpAddr::V4(Ipv4Addr::from(i.wrapping_mul(2_654_435_761)))
}

fn host_entry(i: u32) -> BlockEntry {
    BlockEntry::new(
        IpNet::from(addr(i)),
        FAR,
        "bench",
        Origin::Local,
        Evidence::Tcp,
    )
}

/// What the naive maps store: the same expiry and reason a block entry carries.
#[derive(Clone, Copy)]
struct Naive {
    expires_ms: u64,
    reason: Reason,
}

/// The same question a `BlockReader::lookup` answers: is there a live entry, and why.
#[inline]
fn naive_get(m: &Plain, ip: &IpAddr) -> Option<(u64, Reason)> {
    m.get(ip)
        .filter(|v| v.expires_ms > NOW)
        .map(|v| (v.expires_ms, v.reason))
}

type Plain = HashMap<IpAddr, Naive>;

fn plain(n: u32) -> Plain {
    (0..n)
        .map(|i| {
            (
                addr(i),
                Naive {
                    expires_ms: FAR,
                    reason: Reason::new("bench"),
                },
            )
        })
        .collect()
}

fn probes(n: u32, hit: bool) -> Vec<IpAddr> {
    (0..4096u32)
        .map(|k| {
            if hit {
                addr(k.wrapping_mul(7919) % n.max(1))
            } else {
                addr(n + 1 + k)
            }
        })
        .collect()
}

trait Lookup: Send + Sync + 'static {
    type Handle: Send;
    fn handle(&self) -> Self::Handle;
    fn lookup(h: &Self::Handle, ip: IpAddr) -> bool;
}

struct Lr(Arc<BlockMap>);
impl Lookup for Lr {
    type Handle = BlockReader;
    fn handle(&self) -> BlockReader {
        self.0.reader()
    }
    fn lookup(h: &BlockReader, ip: IpAddr) -> bool {
        h.lookup(ip, NOW).is_some()
    }
}

struct Rw(Arc<RwLock<Plain>>);
impl Lookup for Rw {
    type Handle = Arc<RwLock<Plain>>;
    fn handle(&self) -> Self::Handle {
        self.0.clone()
    }
    fn lookup(h: &Self::Handle, ip: IpAddr) -> bool {
        naive_get(&h.read().unwrap(), &ip).is_some()
    }
}

struct Mx(Arc<Mutex<Plain>>);
impl Lookup for Mx {
    type Handle = Arc<Mutex<Plain>>;
    fn handle(&self) -> Self::Handle {
        self.0.clone()
    }
    fn lookup(h: &Self::Handle, ip: IpAddr) -> bool {
        naive_get(&h.lock().unwrap(), &ip).is_some()
    }
}

fn run<L: Lookup>(c: &mut Criterion, group: &str, name: &str, l: &L, n: u32, busy_core: bool) {
    let mut g = c.benchmark_group(group);
    for hit in [true, false] {
        if n == 0 && hit {
            continue;
        }
        let ps = probes(n, hit);
        let id = BenchmarkId::new(name, format!("{n}/{}", if hit { "hit" } else { "miss" }));
        let h = l.handle();
        let stop = Arc::new(AtomicBool::new(false));
        // Optionally keep the other core reading the same structure.
        let other = busy_core.then(|| {
            let (h2, stop, ps) = (l.handle(), stop.clone(), ps.clone());
            std::thread::spawn(move || {
                let mut k = 0usize;
                while !stop.load(Ordering::Relaxed) {
                    black_box(L::lookup(&h2, ps[k & 4095]));
                    k += 1;
                }
            })
        });
        let mut k = 0usize;
        g.bench_function(id, |b| {
            b.iter(|| {
                k += 1;
                black_box(L::lookup(&h, ps[k & 4095]))
            })
        });
        stop.store(true, Ordering::Relaxed);
        if let Some(t) = other {
            t.join().unwrap();
        }
    }
    g.finish();
}

fn lookups(c: &mut Criterion) {
    for n in [0u32, 1_000, 1_000_000] {
        let map = BlockMap::new(BlockConfig {
            capacity: 2_000_000,
            ..Default::default()
        });
        map.insert_batch((0..n).map(host_entry));
        let lr = Lr(map);
        let rw = Rw(Arc::new(RwLock::new(plain(n))));
        let mx = Mx(Arc::new(Mutex::new(plain(n))));
        run(c, "lookup", "left-right", &lr, n, false);
        run(c, "lookup", "rwlock", &rw, n, false);
        run(c, "lookup", "mutex", &mx, n, false);
        if n == 1_000 {
            run(c, "lookup_other_core_reading", "left-right", &lr, n, true);
            run(c, "lookup_other_core_reading", "rwlock", &rw, n, true);
            run(c, "lookup_other_core_reading", "mutex", &mx, n, true);
        }
    }
}

fn prefixes(c: &mut Criterion) {
    // 10,000 prefixes spread over /16 ../24, and no hosts.
    let nets: Vec<IpNet> = (0..10_000u32)
        .map(|i| {
            let len = 16 + (i % 9) as u8;
            IpNet::V4(
                Ipv4Net::new(Ipv4Addr::from(i.wrapping_mul(2_654_435_761)), len)
                    .unwrap()
                    .trunc(),
            )
        })
        .collect();
    let map = BlockMap::new(BlockConfig::default());
    map.insert_batch(
        nets.iter()
            .map(|n| BlockEntry::new(*n, FAR, "p", Origin::Operator, Evidence::Operator)),
    );
    let r = map.reader();
    let hits: Vec<IpAddr> = nets
        .iter()
        .map(|n| n.hosts().next().unwrap_or(n.addr()))
        .collect();
    let misses: Vec<IpAddr> = (0..4096u32)
        .map(|i| IpAddr::V4(Ipv4Addr::new(127, 0, (i >> 8) as u8, i as u8)))
        .collect();
    let mut g = c.benchmark_group("lookup_10k_prefixes");
    let mut k = 0usize;
    g.bench_function("left-right/hit", |b| {
        b.iter(|| {
            k += 1;
            black_box(r.lookup(hits[k % hits.len()], NOW))
        })
    });
    g.bench_function("left-right/miss", |b| {
        b.iter(|| {
            k += 1;
            black_box(r.lookup(misses[k & 4095], NOW))
        })
    });
    // The naive alternative: a list scan under a read lock.
    let list = RwLock::new(nets.clone());
    g.bench_function("rwlock-list-scan/miss", |b| {
        b.iter(|| {
            k += 1;
            let ip = misses[k & 4095];
            black_box(list.read().unwrap().iter().any(|n| n.contains(&ip)))
        })
    });
    g.finish();
}

fn writer_running(c: &mut Criterion) {
    // Lookups while another thread inserts and removes as fast as it can.
    let mut g = c.benchmark_group("lookup_while_writing");
    let n = 1_000u32;
    let ps = probes(n, true);
    {
        let map = BlockMap::new(BlockConfig::default());
        map.insert_batch((0..n).map(host_entry));
        let stop = Arc::new(AtomicBool::new(false));
        let (m2, s2) = (map.clone(), stop.clone());
        let w = std::thread::spawn(move || {
            let (t, mut i) = (Instant::now(), 10_000_000u32);
            while !s2.load(Ordering::Relaxed) {
                m2.insert(host_entry(i));
                m2.remove(IpNet::from(addr(i)), shield::block::RemoveCause::Local);
                i += 1;
            }
            eprintln!(
                "left-right writer: {:.0} insert+remove pairs/s",
                (i - 10_000_000) as f64 / t.elapsed().as_secs_f64()
            );
        });
        let r = map.reader();
        let mut k = 0usize;
        g.bench_function("left-right/hit", |b| {
            b.iter(|| {
                k += 1;
                black_box(r.lookup(ps[k & 4095], NOW))
            })
        });
        stop.store(true, Ordering::Relaxed);
        w.join().unwrap();
    }
    {
        let map = Arc::new(RwLock::new(plain(n)));
        let stop = Arc::new(AtomicBool::new(false));
        let (m2, s2) = (map.clone(), stop.clone());
        let w = std::thread::spawn(move || {
            let (t, mut i) = (Instant::now(), 10_000_000u32);
            while !s2.load(Ordering::Relaxed) {
                m2.write().unwrap().insert(
                    addr(i),
                    Naive {
                        expires_ms: FAR,
                        reason: Reason::EMPTY,
                    },
                );
                m2.write().unwrap().remove(&addr(i));
                i += 1;
            }
            eprintln!(
                "rwlock writer: {:.0} insert+remove pairs/s",
                (i - 10_000_000) as f64 / t.elapsed().as_secs_f64()
            );
        });
        let mut k = 0usize;
        g.bench_function("rwlock/hit", |b| {
            b.iter(|| {
                k += 1;
                black_box(naive_get(&map.read().unwrap(), &ps[k & 4095]).is_some())
            })
        });
        stop.store(true, Ordering::Relaxed);
        w.join().unwrap();
    }
    g.finish();
}

/// Inserts 100,000 unique addresses while a subscriber thread mirrors them; asserts none is lost.
fn burst(c: &mut Criterion) {
    let mut g = c.benchmark_group("burst_100k");
    g.sample_size(10);
    for batch in [false, true] {
        let name = if batch {
            "insert_batch+deliver"
        } else {
            "insert+deliver"
        };
        g.bench_function(name, |b| {
            b.iter_custom(|iters| {
                let mut total = Duration::ZERO;
                for _ in 0..iters {
                    let map = BlockMap::new(BlockConfig::default());
                    let mut sub = map.subscribe("bench");
                    let consumer = std::thread::spawn(move || {
                        let mut seen = hashbrown::HashSet::new();
                        while seen.len() < 100_000 {
                            sub.wait_timeout(Duration::from_millis(1));
                            while let Some(d) = sub.poll(8192) {
                                match d {
                                    Delivery::Changes(cs) => {
                                        for ch in cs {
                                            if let shield::block::Change::Upsert(e) = ch {
                                                seen.insert(e.net);
                                            }
                                        }
                                    }
                                    Delivery::Resync(all) => {
                                        seen = all.into_iter().map(|e| e.net).collect();
                                    }
                                }
                            }
                        }
                        (seen.len(), sub.stats().resyncs)
                    });
                    let t = Instant::now();
                    if batch {
                        map.insert_batch((0..100_000).map(host_entry));
                    } else {
                        for i in 0..100_000 {
                            map.insert(host_entry(i));
                        }
                    }
                    let (seen, _resyncs) = consumer.join().unwrap();
                    total += t.elapsed();
                    assert_eq!(seen, 100_000, "an insert was lost");
                }
                total
            })
        });
    }
    g.finish();
}

criterion_group! {
    name = benches;
    config = cfg();
    targets = lookups, prefixes, writer_running, burst
}
criterion_main!(benches);
