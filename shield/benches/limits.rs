//! Rate limiter against a `Mutex<HashMap>` token bucket (1 and 2 threads), and rule checks.
//!
//! `cargo bench -p shield --bench limits`.

use criterion::{BenchmarkId, Criterion, criterion_group, criterion_main};
use hashbrown::HashMap;
use shield::ratelimit::{Limit, RateLimiter, TableConfig};
use shield::rules::{Attrs, Now, Prepared, RuleState, StateConfig};
use std::hint::black_box;
use std::net::{IpAddr, Ipv4Addr};
use std::path::Path;
use std::sync::{Arc, Barrier, Mutex};
use std::time::{Duration, Instant};

fn cfg() -> Criterion {
    Criterion::default()
        .sample_size(10)
        .measurement_time(Duration::from_secs(1))
        .warm_up_time(Duration::from_millis(200))
}

struct Bucket {
    tokens: f64,
    last_us: u64,
}

/// The naive alternative: one mutex around a map of token buckets.
struct NaiveLimiter(Mutex<HashMap<u32, Bucket>>);

impl NaiveLimiter {
    fn check(&self, key: u32, rate: f64, burst: f64, now_us: u64) -> bool {
        let mut m = self.0.lock().unwrap();
        let b = m.entry(key).or_insert(Bucket {
            tokens: burst,
            last_us: now_us,
        });
        b.tokens = (b.tokens + (now_us - b.last_us) as f64 * rate / 1e6).min(burst);
        b.last_us = now_us;
        if b.tokens >= 1.0 {
            b.tokens -= 1.0;
            true
        } else {
            false
        }
    }
}

fn limiter(c: &mut Criterion) {
    let mut g = c.benchmark_group("ratelimit");
    let lim = Limit::per_second(100.0, 10);
    for threads in [1usize, 2] {
        for keys in [1_000u32, 1_000_000] {
            let rl = Arc::new(RateLimiter::new(&TableConfig { slots: 1 << 20 }));
            let naive = Arc::new(NaiveLimiter(Mutex::new(HashMap::new())));
            for (name, use_naive) in [("gcra-table", false), ("mutex-hashmap", true)] {
                let (rl, naive) = (rl.clone(), naive.clone());
                g.bench_function(
                    BenchmarkId::new(format!("{name}/{threads}-thread"), format!("{keys}-keys")),
                    |b| {
                        b.iter_custom(|iters| {
                            let barrier = Arc::new(Barrier::new(threads));
                            let hs: Vec<_> = (0..threads as u32)
                                .map(|t| {
                                    let (rl, naive, barrier) =
                                        (rl.clone(), naive.clone(), barrier.clone());
                                    std::thread::spawn(move || {
                                        barrier.wait();
                                        let t0 = Instant::now();
                                        for i in 0..iters {
                                            let key =
                                                ((i as u32).wrapping_mul(2_654_435_761) ^ t) % keys;
                                            let now = 1_000_000 + i;
                                            if use_naive {
                                                black_box(naive.check(key, 100.0, 10.0, now));
                                            } else {
                                                black_box(rl.check(&key, &lim, now));
                                            }
                                        }
                                        t0.elapsed()
                                    })
                                })
                                .collect();
                            hs.into_iter().map(|h| h.join().unwrap()).max().unwrap()
                        })
                    },
                );
            }
        }
    }
    g.finish();
}

fn rules(c: &mut Criterion) {
    let mut text = String::from(
        "[[tenant]]\nid = 1\ndeny = [\"192.0.2.0/24\"]\n\n[[tenant]]\nid = 2\ndeny = [",
    );
    for i in 0..10_000u32 {
        let a = Ipv4Addr::from(i.wrapping_mul(2_654_435_761) & 0xffff_ff00);
        text.push_str(&format!("\"{a}/24\","));
    }
    text.push_str("]\n");
    for i in 0..20 {
        text.push_str(&format!(
            "[[tenant.rule]]\nname = \"r{i}\"\naction = \"deny\"\nwhen = [{{ attr = \"user_agent\", regex = \"bot{i}[a-z]+\" }}]\n"
        ));
    }
    let p = Prepared::parse(Path::new("bench.toml"), &text).unwrap();
    let state = RuleState::new(&StateConfig::default(), None);
    let now = Now {
        unix_ms: 1,
        mono_us: 1,
    };
    let src = IpAddr::V4(Ipv4Addr::new(127, 0, 0, 1));
    let req = Attrs(&[
        ("user_agent", "Mozilla/5.0 (X11; Linux x86_64)"),
        ("path", "/"),
    ]);
    let mut g = c.benchmark_group("rules_check");
    g.bench_function("tenant-without-rules", |b| {
        b.iter(|| black_box(p.check(&state, black_box(7), src, &req, now).action))
    });
    g.bench_function("one-deny-prefix/miss", |b| {
        b.iter(|| black_box(p.check(&state, black_box(1), src, &req, now).action))
    });
    g.bench_function("10k-deny-prefixes+20-regex-rules/pass", |b| {
        b.iter(|| black_box(p.check(&state, black_box(2), src, &req, now).action))
    });
    let set = Arc::new(shield::rules::RuleSet::new(p, state));
    g.bench_function("ruleset(arc-swap)/tenant-without-rules", |b| {
        b.iter(|| black_box(set.check(black_box(7), src, &req, now).action))
    });
    let mut local = set.local();
    g.bench_function("local-rules(cached)/tenant-without-rules", |b| {
        b.iter(|| black_box(local.check(black_box(7), src, &req, now).action))
    });
    g.finish();
}

criterion_group! {
    name = benches;
    config = cfg();
    targets = limiter, rules
}
criterion_main!(benches);
