//! The event path end to end: fixed memory under a million sources, the JSON-lines shape, and sinks that cannot keep up.

use shield::events::{
    Action, Aggregator, AggregatorConfig, Event, JsonLines, SinkWriter, TopSource, UnixStreamSink,
};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::sync::Arc;
use std::time::Duration;

#[test]
fn one_million_unique_sources_stay_within_budget() {
    let agg = Aggregator::new(AggregatorConfig {
        top_k: 256,
        top_n: 10,
        v4_prefix: 32,
        ..Default::default()
    });
    let r = agg.recorder();
    let before = agg.memory_bytes();
    assert!(before > 0 && before <= agg.budget_bytes());
    // A heavy source among a million one-off sources.
    for i in 0..1_000_000u32 {
        r.record(
            3,
            IpAddr::V4(Ipv4Addr::from(0x0b00_0000 + i)),
            Action::Blocked,
            shield::block::Evidence::Udp,
            1,
        );
        if i % 100 == 0 {
            r.record(
                3,
                IpAddr::V4(Ipv4Addr::new(192, 0, 2, 1)),
                Action::Blocked,
                shield::block::Evidence::Udp,
                2,
            );
        }
    }
    assert_eq!(
        agg.memory_bytes(),
        before,
        "memory does not grow with sources"
    );
    let ev = agg.flush(1_000);
    assert_eq!(ev.len(), 1);
    let e = &ev[0];
    assert_eq!(e.total, 1_010_000, "totals are exact");
    assert!(e.top.len() <= 10);
    assert_eq!(
        e.top[0].prefix,
        "192.0.2.1/32".parse().unwrap(),
        "the heavy hitter is found"
    );
    assert!(e.top[0].count >= 10_000 && e.top[0].min_count <= 10_000);
    let listed: u64 = e.top.iter().map(|t| t.count).sum();
    assert_eq!(e.other, e.total - listed);
    assert!(e.tracked <= 256);
    let st = agg.stats();
    assert!(e.other > 900_000, "one-off sources fold into other");
    assert!(st.memory_bytes <= st.budget_bytes);
}

#[test]
fn flusher_writes_vector_ready_json_lines() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("events.jsonl");
    let agg = Aggregator::new(AggregatorConfig {
        interval_secs: 3600,
        node: Some("edge-1".into()),
        ..Default::default()
    });
    let writer = SinkWriter::spawn(Box::new(JsonLines::file(&path).unwrap()), 4).unwrap();
    let flusher = agg.spawn_flusher(vec![writer]).unwrap();
    let r = agg.recorder();
    for i in 0..50u8 {
        r.record(
            9,
            IpAddr::V4(Ipv4Addr::new(198, 51, 100, i)),
            Action::RateLimited,
            shield::block::Evidence::Udp,
            5,
        );
    }
    r.record(
        9,
        IpAddr::V6(Ipv6Addr::new(0x2001, 0xdb8, 0, 0x100, 0, 0, 0, 1)),
        Action::Challenged,
        shield::block::Evidence::Udp,
        7,
    );
    let stats = flusher.stop();
    assert_eq!((stats[0].written, stats[0].dropped), (2, 0));
    let text = std::fs::read_to_string(&path).unwrap();
    let lines: Vec<serde_json::Value> = text
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.len(), 2);
    let rl = lines
        .iter()
        .find(|v| v["action"] == "rate_limited")
        .unwrap();
    assert_eq!(rl["kind"], "shield.aggregate");
    assert_eq!(rl["node"], "edge-1");
    assert_eq!(rl["tenant"], 9);
    assert_eq!(rl["total"], 50);
    assert_eq!(rl["other"], 0);
    assert_eq!(rl["top"][0]["prefix"], "198.51.100.0/24");
    assert_eq!(rl["top"][0]["count"], 50);
    assert_eq!(rl["top"][0]["min_count"], 50);
    assert_eq!(rl["top"][0]["reason"], 5);
    assert!(rl["timestamp"].as_str().unwrap().ends_with('Z'));
    assert!(rl["ts_ms"].as_u64().unwrap() > 1_600_000_000_000);
    let ch = lines.iter().find(|v| v["action"] == "challenged").unwrap();
    assert_eq!(ch["top"][0]["prefix"], "2001:db8:0:100::/56");
    // Round-trips through the typed shape.
    let typed: Event = serde_json::from_str(text.lines().next().unwrap()).unwrap();
    assert_eq!(typed.kind, "shield.aggregate");
}

fn big_event(i: u64) -> Event {
    Event {
        kind: "shield.aggregate".into(),
        timestamp: "2025-01-01T00:00:00.000Z".into(),
        ts_ms: i,
        interval_ms: 1000,
        node: None,
        tenant: 1,
        action: Action::Blocked,
        evidence: shield::block::Evidence::Udp,
        total: 1000,
        top: (0..1000u32)
            .map(|k| TopSource {
                prefix: ipnet::IpNet::from(IpAddr::V4(Ipv4Addr::from(k))),
                count: 1,
                min_count: 1,
                reason: 0,
            })
            .collect(),
        other: 0,
        tracked: 1000,
    }
}

#[test]
fn stuck_unix_socket_counts_drops_and_never_blocks_recording() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("vector.sock");
    let listener = std::os::unix::net::UnixListener::bind(&path).unwrap();
    // Accept and hold the connection without ever reading from it.
    let (release, released) = std::sync::mpsc::channel::<()>();
    let holder = std::thread::spawn(move || {
        let (conn, _) = listener.accept().unwrap();
        let _ = released.recv();
        drop(conn);
    });
    let writer = SinkWriter::spawn(
        Box::new(UnixStreamSink::new(&path, Duration::from_millis(100))),
        2,
    )
    .unwrap();
    let agg = Aggregator::new(AggregatorConfig::default());
    let r = agg.recorder();
    let batch: Arc<[Event]> = (0..20).map(big_event).collect::<Vec<_>>().into();
    let mut refused = 0u64;
    for round in 0..200u32 {
        // The record path runs on regardless of the sink.
        for i in 0..1000u32 {
            r.record(
                1,
                IpAddr::V4(Ipv4Addr::from(round * 1000 + i)),
                Action::Blocked,
                shield::block::Evidence::Udp,
                0,
            );
        }
        let flushed = agg.flush(1_000 + round as u64);
        assert_eq!(flushed[0].total, 1000);
        if !writer.send(batch.clone()) {
            refused += 1;
        }
    }
    let st = writer.stats();
    assert!(refused > 0, "the queue filled");
    assert!(st.dropped >= refused * 20, "dropped events counted: {st:?}");
    assert_eq!(st.queue_full, refused);
    drop(writer);
    release.send(()).unwrap();
    holder.join().unwrap();
    assert_eq!(agg.stats().records, 200_000);
}
