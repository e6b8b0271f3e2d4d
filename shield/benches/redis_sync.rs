//! Propagation latency of block decisions between two nodes through a real redis-server.
//!
//! Node A decides `BENCH_N` blocks (default 10,000) at `BENCH_RATE` per second (default 5,000),
//! one insert each; a thread on node B watches B's change feed and notes when each arrives.
//! Prints p50/p90/p99/max from decision to presence on B, then the time for a burst of
//! `BENCH_BURST` (default 100,000) decisions to arrive whole. Run: `cargo bench -p shield --bench redis_sync`.

#[path = "../tests/redis_harness.rs"]
mod redis_harness;

use ipnet::{IpNet, Ipv4Net};
use shield::block::{BlockConfig, BlockEntry, BlockMap, Change, Delivery, Evidence, Origin};
use shield::clock::unix_ms;
use shield::redis_sync::{RedisSync, SyncConfig};
use std::net::Ipv4Addr;
use std::sync::Arc;
use std::time::{Duration, Instant};

fn env(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn host(i: u32) -> IpNet {
    IpNet::V4(Ipv4Net::new(Ipv4Addr::from(0x0a00_0000 + i), 32).unwrap())
}

fn index(net: &IpNet) -> Option<usize> {
    match net {
        IpNet::V4(n) => u32::from(n.addr())
            .checked_sub(0x0a00_0000)
            .map(|i| i as usize),
        IpNet::V6(_) => None,
    }
}

fn entry(i: u32) -> BlockEntry {
    BlockEntry::with_ttl(
        host(i),
        Duration::from_secs(600),
        unix_ms(),
        "bench",
        Origin::Local,
        Evidence::Tcp,
    )
}

/// Watches `map`'s feed until `n` distinct peer entries have arrived; returns arrival times.
fn watch_arrivals(map: &BlockMap, n: usize, limit: Duration) -> Vec<Option<Instant>> {
    let mut sub = map.subscribe("bench");
    let mut seen = vec![None; n];
    let mut count = 0;
    let deadline = Instant::now() + limit;
    while count < n && Instant::now() < deadline {
        if !sub.wait_timeout(Duration::from_millis(10)) {
            continue;
        }
        let now = Instant::now();
        let mut note = |e: &BlockEntry| {
            if let Some(slot) = index(&e.net).and_then(|i| seen.get_mut(i))
                && e.origin == Origin::Peer
                && slot.is_none()
            {
                *slot = Some(now);
                count += 1;
            }
        };
        while let Some(d) = sub.poll(8192) {
            match d {
                Delivery::Changes(cs) => cs.iter().for_each(|c| {
                    if let Change::Upsert(e) = c {
                        note(e)
                    }
                }),
                Delivery::Resync(all) => all.iter().for_each(&mut note),
            }
        }
    }
    seen
}

fn pct(sorted: &[Duration], p: f64) -> Duration {
    sorted[((sorted.len() as f64 - 1.0) * p).round() as usize]
}

fn main() {
    let Some(redis) = redis_harness::RedisServer::start() else {
        return;
    };
    let n = env("BENCH_N", 10_000) as usize;
    let rate = env("BENCH_RATE", 5_000).max(1);
    let burst = env("BENCH_BURST", 100_000) as u32;
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let _guard = rt.enter();
    let cfg = |node: &str| SyncConfig {
        url: redis.url(),
        key_file: Some(redis.key_file()),
        node_id: node.into(),
        ..SyncConfig::default()
    };
    let (a, b) = (
        BlockMap::new(BlockConfig::default()),
        BlockMap::new(BlockConfig::default()),
    );
    let sa = RedisSync::spawn(cfg("a"), Arc::clone(&a)).unwrap();
    let sb = RedisSync::spawn(cfg("b"), Arc::clone(&b)).unwrap();
    assert!(rt.block_on(sa.wait_synced(Duration::from_secs(10))));
    assert!(rt.block_on(sb.wait_synced(Duration::from_secs(10))));

    // Paced decisions: latency of each.
    let b2 = Arc::clone(&b);
    let watcher = std::thread::spawn(move || watch_arrivals(&b2, n, Duration::from_secs(120)));
    std::thread::sleep(Duration::from_millis(50));
    let mut sent = Vec::with_capacity(n);
    let start = Instant::now();
    for i in 0..n {
        let due = start + Duration::from_secs_f64(i as f64 / rate as f64);
        if let Some(wait) = due.checked_duration_since(Instant::now()) {
            std::thread::sleep(wait);
        }
        sent.push(Instant::now());
        a.insert(entry(i as u32));
    }
    let arrived = watcher.join().unwrap();
    let mut lat: Vec<Duration> = sent
        .iter()
        .zip(&arrived)
        .filter_map(|(s, a)| a.map(|a| a.saturating_duration_since(*s)))
        .collect();
    lat.sort();
    let lost = n - lat.len();
    println!(
        "redis_sync propagation A -> B, {n} decisions at {rate}/s: p50 {:?}  p90 {:?}  p99 {:?}  max {:?}  (missing {lost})",
        pct(&lat, 0.50),
        pct(&lat, 0.90),
        pct(&lat, 0.99),
        lat.last().copied().unwrap_or_default(),
    );

    // Burst: time until all arrive.
    let base = n as u32;
    let b2 = Arc::clone(&b);
    let total = (base + burst) as usize;
    let base_published = sa.stats().published;
    let t0 = Instant::now();
    let watcher = std::thread::spawn(move || {
        let seen = watch_arrivals(&b2, total, Duration::from_secs(300));
        seen[base as usize..].iter().filter(|s| s.is_some()).count()
    });
    let all: Vec<u32> = (base..base + burst).collect();
    for chunk in all.chunks(1_000) {
        a.insert_batch(chunk.iter().map(|&i| entry(i)));
    }
    let made = t0.elapsed();
    let target = base_published + u64::from(burst);
    let written_deadline = Instant::now() + Duration::from_secs(300);
    while sa.stats().published < target && Instant::now() < written_deadline {
        std::thread::sleep(Duration::from_millis(1));
    }
    let written = t0.elapsed();
    let got = watcher.join().unwrap();
    let t = t0.elapsed();
    println!(
        "redis_sync burst: {burst} decisions made in {made:?}, written to Redis after {written:?}, \
         {got} on B after {t:?} ({:.0} decisions/s)",
        f64::from(burst) / t.as_secs_f64()
    );
    let (fa, fb) = (sa.stats(), sb.stats());
    println!(
        "A: {} published in {} batches, {} feed resyncs, {} overflows; B: {} received, {} snapshots",
        fa.published, fa.batches, fa.feed_resyncs, fa.buffer_overflows, fb.received, fb.snapshots
    );
    rt.block_on(async {
        sa.shutdown().await;
        sb.shutdown().await;
    });
}
