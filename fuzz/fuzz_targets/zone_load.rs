//! `zones::load_bytes` (read, compile, validate) on arbitrary master-file text, `$INCLUDE`
//! off. A zone that loads must print (`zone_to_text`) as text that loads again to the same
//! text, and every name in it must be answered by the query pipeline with well-formed
//! responses (framed, see `palisade_fuzz::check_framing`; A, AAAA, NS, CNAME, MX, TXT, DS, ANY, and a name below it) over UDP and TCP.
#![no_main]

use std::net::SocketAddr;
use std::sync::Arc;

use arc_swap::ArcSwap;
use dnsd::config::defence::CookiePolicy;
use dnsd::query::process_query::{Outcome, PipelineConfig, Processor, Transport};
use dnsd::observe::counters::WorkerStats;
use dnsd::zone::served::ZoneSet;
use libfuzzer_sys::fuzz_target;
use zones::present::zone_to_text;
use zones::{Name, ReadOptions};

fn query(name: &[u8], qtype: u16, edns: bool) -> Vec<u8> {
    let mut m = vec![0xab, 0xcd, 0, 0, 0, 1, 0, 0, 0, 0, 0, edns as u8];
    m.extend_from_slice(name);
    m.extend_from_slice(&qtype.to_be_bytes());
    m.extend_from_slice(&[0, 1]);
    if edns {
        m.extend_from_slice(&[0, 0, 41, 4, 0xd0, 0, 0, 0x80, 0, 0, 0]);
    }
    m
}

fuzz_target!(|data: &[u8]| {
    let origin: Name = "example.com.".parse().unwrap();
    // `$GENERATE` budgets lowered so that each input stays fast (the defaults are tested
    // in zones/tests/regressions.rs); everything else as the server reads zones.
    let opts = ReadOptions {
        allow_include: false,
        max_generate: 1024,
        max_generate_total: 4096,
        ..ReadOptions::new(&origin)
    };
    let Ok(loaded) = zones::load_bytes("fuzz.zone", data, &origin, &opts) else {
        return;
    };
    let zone = loaded.zone;
    let text = zone_to_text(&zone);
    let again =
        zones::load_bytes("printed.zone", text.as_bytes(), &origin, &opts).unwrap_or_else(|e| {
            panic!("a loaded zone printed as text that fails to load: {e}\n{text}")
        });
    assert_eq!(zone_to_text(&again.zone), text, "printing is not stable");

    let zone = Arc::new(zone);
    let names: Vec<Vec<u8>> = zone
        .node_ids()
        .take(12)
        .map(|id| zone.node_name(id).to_vec())
        .collect();
    let set = ZoneSet::new(
        vec![(
            zone,
            dnsd::zone::served::ServeOptions {
                cookies: CookiePolicy::On,
                tenant: 0,
                xdp_answers: false,
                xdp_hot: false,
            },
        )],
        1,
    );
    let mut p = Processor::new(
        Arc::new(ArcSwap::from_pointee(set)),
        Arc::new(PipelineConfig::default()),
        Arc::new(WorkerStats::default()),
        None,
    );
    p.refresh();
    let src: SocketAddr = "192.0.2.1:5353".parse().unwrap();
    let mut out = vec![0u8; 65535];
    for name in &names {
        let mut below = vec![1, b'x'];
        below.extend_from_slice(name);
        let below_ok = below.len() <= 255;
        for (i, qtype) in [1u16, 28, 2, 5, 15, 16, 43, 255].into_iter().enumerate() {
            for n in [name, &below] {
                if std::ptr::eq(n, &below) && !below_ok {
                    continue;
                }
                let req = query(n, qtype, i % 2 == 0);
                for (t, len) in [(Transport::Udp, 4096), (Transport::Tcp, 65535)] {
                    if let Outcome::Reply(len) = p.process(&req, src, t, &mut out[..len]) {
                        let r = &out[..len];
                        if let Err(e) = palisade_fuzz::check_framing(r) {
                            panic!("malformed reply ({e}) to {req:02x?}: {r:02x?}");
                        }
                        assert_eq!(&r[..2], &req[..2], "ID not echoed");
                    }
                }
            }
        }
    }
});
