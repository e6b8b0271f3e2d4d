//! Cost per query of the pipeline and of each defence: `Processor::process` on one A query
//! from the UDP path, with defences off, then each check on; then the shield rules of the
//! zone's tenant: none, 10 and 1,000 rules (qname exact, suffix and prefix, qtype one_of,
//! transport, udp_size and regex conditions; the query matches none, so every rule that
//! could apply is looked at); then answers made when asked: a name with variants by client
//! network (the source's prefix picks one) and an ALIAS to a name of the same zone, beside
//! the plain answer of the first case. `cargo bench -p dnsd`.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use arc_swap::ArcSwap;
use criterion::{Criterion, criterion_group, criterion_main};
use dnsd::config::defence::DefenceConfig;
use dnsd::observe::counters::WorkerStats;
use dnsd::query::defence;
use dnsd::query::process_query::{PipelineConfig, Processor, Transport};
use dnsd::zone::served::ZoneSet;
use shield::block::{BlockConfig, BlockEntry, BlockMap, Evidence, Origin};
use shield::events::{Aggregator, AggregatorConfig};

fn zones() -> Arc<ArcSwap<ZoneSet>> {
    zones_of(0)
}

fn zones_of(tenant: u32) -> Arc<ArcSwap<ZoneSet>> {
    let origin: zones::Name = "example.com.".parse().unwrap();
    let mut text = String::from("$TTL 300\n@ SOA ns h 1 2 3 4 5\n@ NS ns\nns A 192.0.2.1\n");
    for i in 0..10_000 {
        text.push_str(&format!("h{i} A 10.0.{}.{}\n", i / 256, i % 256));
    }
    let z = zones::load_bytes("bench", text, &origin, &zones::ReadOptions::new(&origin))
        .unwrap()
        .zone;
    Arc::new(ArcSwap::from_pointee(ZoneSet::new(
        vec![(
            Arc::new(z),
            dnsd::zone::served::ServeOptions {
                tenant,
                ..Default::default()
            },
        )],
        1,
    )))
}

/// The bench zone with `extra` records, and a geo file giving `h1234` variants for three
/// prefixes (the source's among them), when `geo`.
fn zones_made(extra: &str, geo: bool) -> Arc<ArcSwap<ZoneSet>> {
    let origin: zones::Name = "example.com.".parse().unwrap();
    let mut text = String::from("$TTL 300\n@ SOA ns h 1 2 3 4 5\n@ NS ns\nns A 192.0.2.1\n");
    for i in 0..10_000 {
        text.push_str(&format!("h{i} A 10.0.{}.{}\n", i / 256, i % 256));
    }
    text.push_str(extra);
    let z = zones::load_bytes("bench", text, &origin, &zones::ReadOptions::new(&origin))
        .unwrap()
        .zone;
    let g = geo.then(|| {
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("geo.yaml");
        std::fs::write(
            &f,
            "h1234.example.com:\n  - net: 10.0.0.0/8\n    A: 198.51.100.10\n  \
             - net: 192.0.2.0/24\n    A: 198.51.100.2\n  - net: 2001:db8::/32\n    A: 198.51.100.6\n",
        )
        .unwrap();
        Arc::new(
            dnsd::zone::geo::GeoZone::load(&f, &origin, &Default::default(), 60, 0).unwrap(),
        )
    });
    let mut set = ZoneSet::empty(0);
    set.put(0, Some(Arc::new(z)), Default::default(), false, 0, None, g);
    Arc::new(ArcSwap::from_pointee(set))
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
                Evidence::Operator,
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

/// A rules file with `n` rules for tenant 7 (a tenth of them, at most 10, regexes).
fn rules_file(n: usize) -> String {
    let mut t = String::from("[[tenant]]\nid = 7\n");
    let words = [
        "api", "mail", "cdn", "img", "static", "auth", "login", "shop", "blog", "dev",
    ];
    let mut regex = 0;
    for i in 0..n {
        let w = words[i % words.len()];
        let cond = match i % 8 {
            0 => format!("{{ attr = \"qname\", suffix = \"{w}{i}.example.net\" }}"),
            1 => format!("{{ attr = \"qname\", exact = \"{w}.{i}.example.com\" }}"),
            2 => format!("{{ attr = \"qname\", prefix = \"{w}-{i}\" }}"),
            3 => format!(
                "{{ attr = \"qtype\", one_of = [\"TYPE{}\", \"NULL\"] }}",
                1000 + i
            ),
            4 if regex < 10 && (n <= 10 || i % 96 == 4) => {
                regex += 1;
                format!("{{ attr = \"qname\", regex = \"^{w}[0-9]+-bad{i}\\\\.\" }}")
            }
            5 => format!("{{ attr = \"qname\", suffix = \"{w}.test{i}\" }}"),
            6 => format!(
                "{{ attr = \"qname\", exact = \"h{}.example.com\" }}, {{ attr = \"transport\", exact = \"tcp\" }}",
                20_000 + i
            ),
            _ => format!(
                "{{ attr = \"qname\", suffix = \"{w}{i}.example.org\" }}, {{ attr = \"udp_size\", lt = 512 }}"
            ),
        };
        t.push_str(&format!(
            "[[tenant.rule]]\nname = \"r{i}\"\naction = \"deny\"\nwhen = [{cond}]\n"
        ));
    }
    t
}

/// A rules file with `n` `contains` rules on the name for tenant 7 (none matching the query).
fn contains_rules(n: usize) -> String {
    let mut t = String::from("[[tenant]]\nid = 7\n");
    for i in 0..n {
        t.push_str(&format!(
            "[[tenant.rule]]\nname = \"c{i}\"\naction = \"deny\"\nwhen = [{{ attr = \"qname\", contains = \"bad{i}x\" }}]\n"
        ));
    }
    t
}

/// `n` `contains` rules on the name for tenant 7 that never decide an A query (each also
/// asks for another type, a condition the index cannot look up).
fn contains_rules_not_a(n: usize) -> String {
    let mut t = String::from("[[tenant]]\nid = 7\n");
    for i in 0..n {
        t.push_str(&format!(
            "[[tenant.rule]]\nname = \"c{i}\"\naction = \"deny\"\nwhen = [{{ attr = \"qname\", contains = \"bad{i}x\" }}, {{ attr = \"qtype\", exact = \"A\", not = true }}]\n"
        ));
    }
    t
}

/// An A query for the name of `labels` under example.com (no EDNS).
fn query_for(labels: &[String]) -> Vec<u8> {
    let mut m = vec![0x12, 0x34, 0x01, 0x00, 0, 1, 0, 0, 0, 0, 0, 0];
    for l in labels {
        m.push(l.len() as u8);
        m.extend_from_slice(l.as_bytes());
    }
    m.extend_from_slice(b"\x07example\x03com\x00\x00\x01\x00\x01");
    m
}

/// A processor whose zone belongs to tenant 7, with the shield rules `text` and the
/// defences off.
fn with_rules(text: &str) -> (Processor, Arc<defence::Shared>) {
    let prepared = shield::rules::Prepared::parse(std::path::Path::new("bench.toml"), text)
        .expect("bench rules");
    let map = BlockMap::new(BlockConfig::default());
    let state = shield::rules::RuleState::new(&Default::default(), Some(map.clone()));
    let set = Arc::new(shield::rules::RuleSet::new(prepared, state));
    let shared = defence::Shared::new(off(), map, Aggregator::new(AggregatorConfig::default()))
        .with_rules(set);
    let mut p = Processor::new(
        zones_of(7),
        Arc::new(PipelineConfig::default()),
        Arc::new(WorkerStats::default()),
        Some(&shared),
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

/// Benchmarks `p` on `q` from a new source per query: RRL never limits, every lookup misses.
fn from_new_sources(
    g: &mut criterion::BenchmarkGroup<'_, criterion::measurement::WallTime>,
    name: &str,
    p: &mut Processor,
    q: &[u8],
    out: &mut [u8],
) {
    let mut i = 0u32;
    g.bench_function(name, |b| {
        b.iter(|| {
            i = i.wrapping_add(1);
            let s = SocketAddr::new(
                std::net::IpAddr::from((0xc000_0000u32 | (i << 8)).to_be_bytes()),
                5353,
            );
            p.process(q, s, Transport::Udp, out)
        })
    });
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
        from_new_sources(&mut g, name, &mut p, &q, &mut out);
    }
    // The shield rules of the zone's tenant.
    let rule_cases = [
        (
            "rules: tenant without rules",
            "[[tenant]]\nid = 8\ndeny = [\"203.0.113.0/24\"]\n".to_string(),
        ),
        ("rules: 10 rules", rules_file(10)),
        ("rules: 1000 rules (10 regex)", rules_file(1000)),
        ("rules: 10000 contains", contains_rules(10_000)),
    ];
    for (name, text) in rule_cases {
        let (mut p, _s) = with_rules(&text);
        from_new_sources(&mut g, name, &mut p, &q, &mut out);
    }
    // A name holding 40 of them (past the stack's 32): their rules alone are tried.
    let labels: Vec<String> = (0..4)
        .map(|l| (0..10).map(|i| format!("bad{}x", l * 10 + i)).collect())
        .collect();
    let crafted = query_for(&labels);
    let (mut p, _s) = with_rules(&contains_rules_not_a(10_000));
    from_new_sources(
        &mut g,
        "rules: 10000 contains, 40 in the name",
        &mut p,
        &crafted,
        &mut out,
    );
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
        dnsd::query::process_query::Outcome::Reply(n) => n,
        _ => panic!("no reply"),
    };
    let full = learn[n - 24..n].to_vec();
    let with_cookie = query(Some(&full));
    g.bench_function("valid server cookie", |b| {
        b.iter(|| p.process(&with_cookie, src, Transport::Udp, &mut out))
    });
    // Answers made when asked, against the plain one ("no defences" above).
    let made = |zones| {
        let mut p = Processor::new(
            zones,
            Arc::new(PipelineConfig::default()),
            Arc::new(WorkerStats::default()),
            None,
        );
        p.refresh();
        p
    };
    let mut p = made(zones_made("", false));
    g.bench_function("answer: plain A", |b| {
        b.iter(|| p.process(&q, src, Transport::Udp, &mut out))
    });
    let mut p = made(zones_made("", true));
    g.bench_function("answer: a name with variants (3 prefixes)", |b| {
        b.iter(|| p.process(&q, src, Transport::Udp, &mut out))
    });
    let mut p = made(zones_made("flat ALIAS h1234\n", false));
    let flat: Vec<u8> = {
        let mut m = vec![0x12, 0x34, 0x01, 0x00, 0, 1, 0, 0, 0, 0, 0, 1];
        m.extend_from_slice(b"\x04flat\x07example\x03com\x00\x00\x01\x00\x01");
        m.extend_from_slice(&[0, 0, 41, 0x04, 0xd0, 0, 0, 0, 0, 0, 0]);
        m
    };
    g.bench_function("answer: an ALIAS to a name of the zone", |b| {
        b.iter(|| p.process(&flat, src, Transport::Udp, &mut out))
    });
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
