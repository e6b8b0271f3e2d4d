//! Cost per query of the pipeline and of each defence: `Processor::process` on one A query
//! from the UDP path, with defences off, then each check on. `cargo bench -p dnsd`.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use arc_swap::ArcSwap;
use criterion::{Criterion, criterion_group, criterion_main};
use dnsd::config::defence::DefenceConfig;
use dnsd::defence;
use dnsd::process_query::{PipelineConfig, Processor, Transport};
use dnsd::served_zones::ZoneSet;
use dnsd::stats::WorkerStats;
use shield::block::{BlockConfig, BlockEntry, BlockMap, Origin};
use shield::events::{Aggregator, AggregatorConfig};

fn zones() -> Arc<ArcSwap<ZoneSet>> {
    let origin: zones::Name = "example.com.".parse().unwrap();
    let mut text = String::from("$TTL 300\n@ SOA ns h 1 2 3 4 5\n@ NS ns\nns A 192.0.2.1\n");
    for i in 0..10_000 {
        text.push_str(&format!("h{i} A 10.0.{}.{}\n", i / 256, i % 256));
    }
    let z = zones::load_bytes("bench", text, &origin, &zones::ReadOptions::new(&origin))
        .unwrap()
        .zone;
    Arc::new(ArcSwap::from_pointee(ZoneSet::new(
        vec![(Arc::new(z), dnsd::served_zones::ServeOptions::default())],
        1,
    )))
}

fn query(cookie: Option<&[u8]>) -> Vec<u8> {
    let mut m = vec![0x12, 0x34, 0x01, 0x00, 0, 1, 0, 0, 0, 0, 0, 1];
    m.extend_from_slice(b"\x05h1234\x07example\x03com\x00\x00\x01\x00\x01");
    m.extend_from_slice(&[0, 0, 41, 0x04, 0xd0, 0, 0, 0, 0]);
    match cookie {
        Some(c) => {
            m.extend_from_slice(&((4 + c.len()) as u16).to_be_bytes());
            m.extend_from_slice(&10u16.to_be_bytes());
            m.extend_from_slice(&(c.len() as u16).to_be_bytes());
            m.extend_from_slice(c);
        }
        None => m.extend_from_slice(&[0, 0]),
    }
    m
}

fn processor(
    cfg: Option<DefenceConfig>,
    blocks: usize,
) -> (Processor, Option<Arc<defence::Shared>>) {
    let shared = cfg.map(|c| {
        let map = BlockMap::new(BlockConfig {
            capacity: blocks.max(1) * 2,
            ..BlockConfig::default()
        });
        let now = shield::clock::unix_ms();
        map.insert_batch((0..blocks as u32).map(|i| {
            BlockEntry::with_ttl(
                ipnet::IpNet::from(std::net::IpAddr::from((0x0a00_0000u32 + i).to_be_bytes())),
                Duration::from_secs(3600),
                now,
                "bench",
                Origin::Operator,
            )
        }));
        defence::Shared::new(c, map, Aggregator::new(AggregatorConfig::default()))
    });
    let mut p = Processor::new(
        zones(),
        Arc::new(PipelineConfig::default()),
        Arc::new(WorkerStats::default()),
        shared.as_ref(),
    );
    p.refresh();
    (p, shared)
}

fn off() -> DefenceConfig {
    let mut c = DefenceConfig::default();
    c.rrl.enabled = false;
    c.cookies.enabled = false;
    c.random_subdomain.enabled = false;
    c
}

fn bench(c: &mut Criterion) {
    let src: SocketAddr = "192.0.2.77:5353".parse().unwrap();
    let q = query(None);
    let mut out = vec![0u8; 4096];
    let mut g = c.benchmark_group("pipeline");
    g.sample_size(30)
        .measurement_time(Duration::from_secs(2))
        .warm_up_time(Duration::from_millis(500));
    let cases: Vec<(&str, Option<DefenceConfig>, usize)> = vec![
        ("no defences", None, 0),
        ("block map empty", Some(off()), 0),
        ("block map 100k, miss", Some(off()), 100_000),
        (
            "rrl",
            Some(DefenceConfig {
                rrl: DefenceConfig::default().rrl,
                ..off()
            }),
            0,
        ),
        ("all defences", Some(DefenceConfig::default()), 0),
    ];
    for (name, cfg, n) in cases {
        let (mut p, _s) = processor(cfg, n);
        let mut i = 0u32;
        g.bench_function(name, |b| {
            b.iter(|| {
                // A new source per query: RRL never limits, every lookup misses.
                i = i.wrapping_add(1);
                let s = SocketAddr::new(
                    std::net::IpAddr::from((0xc000_0000u32 | (i << 8)).to_be_bytes()),
                    5353,
                );
                p.process(&q, s, Transport::Udp, &mut out)
            })
        });
    }
    // A blocked source: the whole cost of a packet we refuse.
    let (mut p, _s) = processor(Some(off()), 100_000);
    let blocked: SocketAddr = "10.0.0.9:5353".parse().unwrap();
    g.bench_function("blocked source (100k map, hit)", |b| {
        b.iter(|| p.process(&q, blocked, Transport::Udp, &mut out))
    });
    // A client with a cookie: check and answer with a fresh one.
    let (mut p, _s) = processor(Some(DefenceConfig::default()), 0);
    let client = [1u8, 2, 3, 4, 5, 6, 7, 8];
    let mut learn = vec![0u8; 4096];
    let n = match p.process(&query(Some(&client)), src, Transport::Udp, &mut learn) {
        dnsd::process_query::Outcome::Reply(n) => n,
        _ => panic!("no reply"),
    };
    let full = learn[n - 24..n].to_vec();
    let with_cookie = query(Some(&full));
    g.bench_function("valid server cookie", |b| {
        b.iter(|| p.process(&with_cookie, src, Transport::Udp, &mut out))
    });
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
