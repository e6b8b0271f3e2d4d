//! A small zone set and query processors for fuzzing the whole pipeline end to end.
//!
//! The zones are the end-to-end tests' own (`tests/data`: CNAME and DNAME chains, wildcards,
//! delegations with and without DS, a child zone served beside its parent, large answers)
//! plus a tiny zone whose cookie policy is `require`.

use std::sync::Arc;

use arc_swap::ArcSwap;
use dnsd::config::Config;
use dnsd::config::defence::CookiePolicy;
use dnsd::query::defence;
use dnsd::zone::served::ServeOptions;
use dnsd::query::process_query::{PipelineConfig, Processor};
use dnsd::observe::counters::WorkerStats;
use dnsd::xfr::Transfers;
use dnsd::zone::served::ZoneSet;
use shield::block::{BlockConfig, BlockMap};
use shield::events::{Aggregator, AggregatorConfig};

const EXAMPLE_COM: &str = include_str!("../../tests/data/example.com.zone");
const EXAMPLE_NET: &str = include_str!("../../tests/data/example.net.zone");
const CHILD: &str = include_str!("../../tests/data/child.example.com.zone");
const STRICT: &str = "$TTL 60\n@ SOA ns h 1 2 3 4 5\n@ NS ns\nns A 192.0.2.1\n\
                      www A 192.0.2.2\n* TXT \"any\"\n";

/// The config the transfer side is built from: every zone open to transfers, one TSIG key.
const CONFIG: &str = r#"
[[tsig_key]]
name = "key."
algorithm = "hmac-sha256"
secret = "c2VjcmV0c2VjcmV0c2VjcmV0c2VjcmV0"

[[zone]]
origin = "example.com."
file = "example.com.zone"
allow_transfer = ["0.0.0.0/0", "::/0"]

[[zone]]
origin = "example.net."
file = "example.net.zone"
allow_transfer = ["0.0.0.0/0"]
tsig = "key."

[[zone]]
origin = "child.example.com."
file = "child.zone"

[[zone]]
origin = "strict.test."
file = "strict.zone"
cookies = "require"
"#;

fn load(origin: &str, text: &str) -> Arc<zones::Zone> {
    let o: zones::Name = origin.parse().expect("origin");
    let z = zones::load_bytes(origin, text, &o, &zones::ReadOptions::new(&o))
        .unwrap_or_else(|e| panic!("fixture zone {origin}: {e}"))
        .zone;
    Arc::new(z)
}

/// The zones served, as the query path sees them.
pub fn zones() -> Arc<ArcSwap<ZoneSet>> {
    let set = ZoneSet::new(
        vec![
            (load("example.com.", EXAMPLE_COM), ServeOptions { cookies: CookiePolicy::On, tenant: 0, xdp_answers: false, xdp_hot: false }),
            (load("example.net.", EXAMPLE_NET), ServeOptions { cookies: CookiePolicy::Off, tenant: 0, xdp_answers: false, xdp_hot: false }),
            (load("child.example.com.", CHILD), ServeOptions { cookies: CookiePolicy::On, tenant: 0, xdp_answers: false, xdp_hot: false }),
            (load("strict.test.", STRICT), ServeOptions { cookies: CookiePolicy::Require, tenant: 0, xdp_answers: false, xdp_hot: false }),
        ],
        1,
    );
    Arc::new(ArcSwap::from_pointee(set))
}

/// The processors a fuzz input picks from.
pub struct Processors {
    /// No defences and no transfer side.
    pub bare: Processor,
    /// Every defence on (RRL at one response a second, so that slips and drops happen),
    /// with transfers, NOTIFY and TSIG handled.
    pub full: Processor,
    /// Keeps the defence state alive.
    _shared: Arc<defence::Shared>,
}

/// Builds the processors over one zone set.
pub fn processors() -> Processors {
    let zones = zones();
    let cfg = Config::parse(std::path::Path::new("fuzz.toml"), CONFIG).expect("fixture config");
    let (xfr, rx) = Transfers::new(&cfg);
    // Zone-change notices are not consumed; the queue is bounded and only reloads fill it.
    std::mem::forget(rx);
    let mut d = cfg.defence.clone();
    d.rrl.responses_per_second = 1.0;
    d.rrl.slip = 2;
    d.cookies.secret = Some("00112233445566778899aabbccddeeff".into());
    let shared = defence::Shared::new(
        d,
        BlockMap::new(BlockConfig::default()),
        Aggregator::new(AggregatorConfig::default()),
    );
    let mut bare = Processor::new(
        zones.clone(),
        Arc::new(PipelineConfig::default()),
        Arc::new(WorkerStats::default()),
        None,
    );
    bare.refresh();
    let mut full = Processor::new(
        zones,
        Arc::new(PipelineConfig::default()),
        Arc::new(WorkerStats::default()),
        Some(&shared),
    )
    .with_transfers(Arc::new(dnsd::xfr::Serve(xfr)));
    full.refresh();
    Processors {
        bare,
        full,
        _shared: shared,
    }
}
