//! `dnsd::config::Config::parse` on arbitrary text, then what dnsd builds from a config it
//! accepted (transfer policies, the block map, the defence state): nothing panics, and what
//! a config sizes stays within the memory limit libFuzzer enforces (`-rss_limit_mb`).
#![no_main]

use std::path::Path;

use dnsd::config::Config;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let Ok(c) = Config::parse(Path::new("/nonexistent/palisade/dnsd.toml"), text) else {
        return;
    };
    let _ = dnsd::xfr::Policies::from_config(&c);
    let blocks = shield::block::BlockMap::new(c.block.clone());
    let events = shield::events::Aggregator::new(shield::events::AggregatorConfig::default());
    let _ = dnsd::query::defence::Shared::new(c.defence.clone(), blocks, events);
});
