//! `http_front::config::Config::parse` on arbitrary text (configs naming a rules file or
//! certificates are skipped: the fuzzer reads no files), then the sites prepared from a
//! config it accepted: nothing panics.
#![no_main]

use std::path::Path;
use std::sync::Arc;

use http_front::config::Config;
use http_front::site::Sites;
use http_front::forward::upstream::Upstream;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    if palisade_fuzz::names_files(text) {
        return;
    }
    let Ok(l) = Config::parse(Path::new("/nonexistent/palisade/front.toml"), text) else {
        return;
    };
    let ups: Vec<_> = l
        .config
        .upstreams
        .iter()
        .map(|u| Arc::new(Upstream::new(u)))
        .collect();
    let sites = Sites::prepare(&l.config, &l.rules, &ups, None);
    for s in &l.config.sites {
        for h in &s.hosts {
            let _ = sites.lookup(h);
        }
    }
});
