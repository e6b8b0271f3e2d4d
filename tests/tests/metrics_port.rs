//! The metrics port against clients it should not serve: half-sent request heads from many
//! addresses never keep a scrape out (the oldest are closed, counted), and `[metrics] allow`
//! closes every other address at once.

use std::io::{Read, Write};
use std::net::{Ipv4Addr, SocketAddr};
use std::time::Duration;

use palisade_tests::http::connect_from;
use palisade_tests::net;
use palisade_tests::servers::{Dnsd, Zone};

/// `GET /metrics` from `from`: the body, or why none came within `wait`.
fn scrape(from: Option<Ipv4Addr>, addr: SocketAddr, wait: Duration) -> Result<String, String> {
    let mut s = connect_from(from, addr).map_err(|e| e.to_string())?;
    s.set_read_timeout(Some(wait)).map_err(|e| e.to_string())?;
    s.write_all(b"GET /metrics HTTP/1.0\r\n\r\n")
        .map_err(|e| e.to_string())?;
    let mut out = Vec::new();
    s.take(16 << 20)
        .read_to_end(&mut out)
        .map_err(|e| e.to_string())?;
    let text = String::from_utf8_lossy(&out).into_owned();
    if text.starts_with("HTTP/1.1 200") {
        Ok(text)
    } else {
        Err(format!("no answer: {text:?}"))
    }
}

/// A value of the page.
fn value(page: &str, series: &str) -> u64 {
    page.lines()
        .find_map(|l| l.strip_prefix(series)?.strip_prefix(' ')?.parse().ok())
        .unwrap_or_else(|| panic!("no {series}"))
}

/// 600 connections from 150 addresses, each a head never finished (four per address, the
/// most one host may hold): a scrape is answered while they stay open. Before, 64 places
/// were taken before the accept and each half-sent head held one for 2 s, so a scrape waited
/// behind every one of them (a probe: 5–6 s a scrape, some timed out).
#[test]
fn half_sent_heads_from_many_addresses_never_keep_a_scrape_out() {
    let dnsd = Dnsd::builder().zone(Zone::data("example.com.")).start();
    let m = dnsd.metrics_addr().expect("metrics");
    let mut held = Vec::new();
    for _ in 0..150 {
        let ip = net::test_ip();
        for _ in 0..4 {
            let mut s = connect_from(Some(ip), m).expect("connect");
            s.write_all(b"GET /metrics HTTP/1.1\r\nhost: x\r\n")
                .expect("half a head");
            held.push(s);
        }
    }
    let mut page = String::new();
    for i in 0..3 {
        page = scrape(None, m, Duration::from_secs(3))
            .unwrap_or_else(|e| panic!("scrape {i} with 600 half-sent heads open: {e}"));
    }
    // At most 512 heads read at once: the rest were closed, the oldest first, or timed out
    // (connections the kernel queued past its backlog come in later).
    let gone = value(&page, "palisade_metrics_connections_evicted_total")
        + value(
            &page,
            "palisade_metrics_heads_refused_total{why=\"timeout\"}",
        );
    assert!(gone >= 600 - 512, "{page}");
    drop(held);
}

/// `[metrics] allow`: an address not listed is closed at once, unanswered, and counted.
#[test]
fn metrics_allow_answers_only_its_addresses() {
    let dnsd = Dnsd::builder()
        .zone(Zone::data("example.com."))
        .metrics_allow("[\"127.0.0.1/32\"]")
        .start();
    let m = dnsd.metrics_addr().expect("metrics");
    let other = net::test_ip();
    let refused = scrape(Some(other), m, Duration::from_secs(3));
    assert!(refused.is_err(), "{other} answered: {refused:?}");
    let page = scrape(Some(Ipv4Addr::LOCALHOST), m, Duration::from_secs(3)).expect("a scrape");
    assert!(
        value(&page, "palisade_metrics_connections_not_allowed_total") >= 1,
        "{page}"
    );
}
