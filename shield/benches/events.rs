//! Aggregator record cost with 1 and 2 threads, 1,000 vs 10,000,000 distinct sources; flush cost; memory.
//!
//! `cargo bench -p shield --bench events`. Per-record time must not grow with distinct sources.

use criterion::{BenchmarkId, Criterion, criterion_group, criterion_main};
use shield::events::{Action, Aggregator, AggregatorConfig};
use std::hint::black_box;
use std::net::{IpAddr, Ipv4Addr};
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

fn cfg() -> Criterion {
    Criterion::default()
        .sample_size(10)
        .measurement_time(Duration::from_secs(1))
        .warm_up_time(Duration::from_millis(200))
}

fn agg_cfg() -> AggregatorConfig {
    // /32 aggregation so that every address is its own key (the hardest case).
    AggregatorConfig {
        v4_prefix: 32,
        top_k: 1024,
        ..Default::default()
    }
}

/// The i-th of `n` distinct sources.
#[inline]
fn src(i: u64, n: u64) -> IpAddr {
    IpAddr::V4(Ipv4Addr::from(((i % n) as u32).wrapping_mul(2_654_435_761)))
}

fn record(c: &mut Criterion) {
    let agg = Aggregator::new(agg_cfg());
    eprintln!(
        "aggregator: {} bytes per shard (live + spare), budget {} bytes for {} recorders",
        agg.shard_bytes(),
        agg.budget_bytes(),
        agg.config().max_recorders
    );
    let mut g = c.benchmark_group("record");
    for threads in [1usize, 2] {
        for n in [1_000u64, 100_000, 10_000_000] {
            let agg = Aggregator::new(agg_cfg());
            let mut offset = 0u64;
            g.bench_function(
                BenchmarkId::new(format!("{threads}-thread"), format!("{n}-sources")),
                |b| {
                    b.iter_custom(|iters| {
                        let start = offset;
                        offset += iters;
                        let barrier = Arc::new(Barrier::new(threads));
                        let hs: Vec<_> = (0..threads as u64)
                            .map(|t| {
                                let (agg, barrier) = (agg.clone(), barrier.clone());
                                std::thread::spawn(move || {
                                    let r = agg.recorder();
                                    barrier.wait();
                                    let t0 = Instant::now();
                                    for i in start..start + iters {
                                        r.record(
                                            1,
                                            src(i * 2 + t, n),
                                            Action::Blocked,
                                            shield::block::Evidence::Udp,
                                            0,
                                        );
                                    }
                                    t0.elapsed()
                                })
                            })
                            .collect();
                        // Per record, per thread: the slowest thread's time over its records.
                        hs.into_iter().map(|h| h.join().unwrap()).max().unwrap()
                    })
                },
            );
            assert!(agg.memory_bytes() <= agg.budget_bytes());
        }
    }
    g.finish();
}

fn flush(c: &mut Criterion) {
    let agg = Aggregator::new(agg_cfg());
    let (r1, r2) = (agg.recorder(), agg.recorder());
    let mut g = c.benchmark_group("flush");
    g.bench_function("2-shards-full-top_k-1024", |b| {
        b.iter_custom(|iters| {
            let mut total = Duration::ZERO;
            for it in 0..iters {
                for i in 0..5_000u64 {
                    r1.record(
                        1,
                        src(i + it * 10_000, u64::MAX),
                        Action::Blocked,
                        shield::block::Evidence::Udp,
                        0,
                    );
                    r2.record(
                        2,
                        src(i + it * 10_000 + 5_000, u64::MAX),
                        Action::RateLimited,
                        shield::block::Evidence::Udp,
                        0,
                    );
                }
                let t = Instant::now();
                black_box(agg.flush(1_000 + it));
                total += t.elapsed();
            }
            total
        })
    });
    g.finish();
}

criterion_group! {
    name = benches;
    config = cfg();
    targets = record, flush
}
criterion_main!(benches);
