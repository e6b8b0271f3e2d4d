//! Events into ClickHouse against JSON lines into a file, in one run: the record path's cost
//! per event, normalise + encode per row, rows per second and CPU per row into a real
//! clickhouse-server and into a file, and CPU per request on events under a unique-IP botnet
//! with both sinks running.
//!
//! `cargo bench -p shield --bench clickhouse` (needs clickhouse-server; without it the
//! ClickHouse figures are skipped loudly). `CH_BENCH_ROWS` scales the throughput part.

use palisade_tests::clickhouse::ClickHouseServer;
use shield::events::clickhouse::{AccessRow, ClickHouseConfig, Rows};
use shield::events::{
    Action, Aggregator, AggregatorConfig, ClickHouseSink, Event, JsonLines, Sink, SinkWriter,
    TopSource,
};
use std::hint::black_box;
use std::net::{IpAddr, Ipv4Addr};
use std::time::{Duration, Instant};

/// CPU time of the threads alive now (from their schedstat, nanoseconds).
fn cpu_live_threads() -> Duration {
    let mut ns = 0u64;
    for t in std::fs::read_dir("/proc/self/task")
        .into_iter()
        .flatten()
        .flatten()
    {
        if let Ok(s) = std::fs::read_to_string(t.path().join("schedstat")) {
            ns += s
                .split_whitespace()
                .next()
                .and_then(|v| v.parse::<u64>().ok())
                .unwrap_or(0);
        }
    }
    Duration::from_nanos(ns)
}

/// CPU time of the whole process, exited threads included (utime + stime, 10 ms resolution).
fn cpu_process() -> Duration {
    let s = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    let after = s.rsplit(')').next().unwrap_or("");
    let f: Vec<u64> = after
        .split_whitespace()
        .map(|x| x.parse().unwrap_or(0))
        .collect();
    // Fields 14 and 15 of stat; `after` starts at field 3.
    let ticks = f.get(11).copied().unwrap_or(0) + f.get(12).copied().unwrap_or(0);
    Duration::from_millis(ticks * 10)
}

fn unique_ip(i: u64) -> IpAddr {
    IpAddr::V4(Ipv4Addr::from((i as u32).wrapping_mul(2_654_435_761)))
}

/// A realistic flush: `n` events, each with 20 listed /24 prefixes and the rest.
fn events(n: usize) -> Vec<Event> {
    let ts = shield::clock::unix_ms();
    (0..n)
        .map(|e| Event {
            kind: "shield.aggregate".into(),
            timestamp: "2025-01-01T00:00:10.000Z".into(),
            ts_ms: ts,
            interval_ms: 10_000,
            node: Some("edge-1".into()),
            tenant: e as u32,
            action: Action::Blocked,
            evidence: shield::block::Evidence::Tcp,
            total: 20 * 900 + 5_000,
            top: (0..20u32)
                .map(|k| TopSource {
                    prefix: ipnet::IpNet::new(
                        IpAddr::V4(Ipv4Addr::from((e as u32) << 12 | k << 8)),
                        24,
                    )
                    .unwrap()
                    .trunc(),
                    count: 900,
                    min_count: 850,
                    reason: 1000,
                })
                .collect(),
            other: 5_000,
            tracked: 800,
        })
        .collect()
}

fn row_count(ev: &[Event]) -> u64 {
    ev.iter()
        .map(|e| e.top.len() as u64 + u64::from(e.other > 0 || e.top.is_empty()))
        .sum()
}

fn per(d: Duration, n: u64) -> f64 {
    d.as_nanos() as f64 / n.max(1) as f64
}

fn main() {
    // criterion passes --bench; nothing else to parse.
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    println!("# events into ClickHouse vs JSON lines to a file");
    println!("command: cargo bench -p shield --bench clickhouse");
    println!("cores: {cores} (shared with other work; figures are ratios within this run)");

    // 1. The record path: what a worker pays per blocked or limited request.
    let agg = Aggregator::new(AggregatorConfig {
        v4_prefix: 32,
        ..AggregatorConfig::default()
    });
    let r = agg.recorder();
    let n = 5_000_000u64;
    let t = Instant::now();
    for i in 0..n {
        r.record(
            1,
            unique_ip(i),
            Action::Blocked,
            shield::block::Evidence::Udp,
            1000,
        );
    }
    let record_ns = per(t.elapsed(), n);
    black_box(agg.flush(1));
    drop(r);
    println!("\n| step | cost |\n|---|---|");
    println!("| record path (Recorder::record, 5M unique IPs) | {record_ns:.1} ns/event |");

    // 2. Normalise and encode, on the sink thread, per row.
    let ev = events(1_000);
    let rows_per_flush = row_count(&ev);
    let mut rows = Rows::new();
    let reps = 20;
    let t = Instant::now();
    for _ in 0..reps {
        rows.clear();
        rows.push_events("dnsd", black_box(&ev));
    }
    let encode_ns = per(t.elapsed(), rows_per_flush * reps);
    let mut file_enc = Vec::new();
    let t = Instant::now();
    for _ in 0..reps {
        file_enc.clear();
        let mut j = JsonLines::new("mem", &mut file_enc);
        j.write(black_box(&ev)).unwrap();
    }
    let json_ns_event = per(t.elapsed(), ev.len() as u64 * reps);
    println!(
        "| normalise + encode a ClickHouse row (Rows::push_events) | {encode_ns:.0} ns/row ({:.0} ns/event of 21 rows) |",
        encode_ns * 21.0
    );
    println!("| encode an event as a JSON line (serde, file sink) | {json_ns_event:.0} ns/event |");
    let client: IpAddr = "192.0.2.1".parse().unwrap();
    let t = Instant::now();
    let m = 200_000u64;
    rows.clear();
    for i in 0..m {
        if rows.len() >= 10_000 {
            rows.clear();
        }
        rows.push_access(
            "http-front",
            &AccessRow {
                ts_ms: 1_735_689_610_123 + i,
                node: "edge-1",
                site: "example.com",
                tenant: Some(7),
                client,
                method: "GET",
                url: "http://example.com/some/path?with=query&and=more",
                proto: "HTTP/1.1",
                status: 200,
                duration_ms: 1.234,
                upstream: "app",
                action: "pass",
                user_agent: Some("Mozilla/5.0 (X11; Linux x86_64) Gecko/20100101 Firefox/128.0"),
                referer: None,
                request_bytes: None,
                response_bytes: Some(1234),
            },
        )
        .unwrap();
    }
    println!(
        "| normalise + encode an access row (Rows::push_access) | {:.0} ns/row |",
        per(t.elapsed(), m)
    );

    // 3. Throughput: the same events into a file and into ClickHouse.
    let scale: usize = std::env::var("CH_BENCH_ROWS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(1_000_000);
    let flushes = (scale as u64 / rows_per_flush).max(1);
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("events.jsonl");
    let (c0, t) = (cpu_process(), Instant::now());
    {
        let w = SinkWriter::spawn(Box::new(JsonLines::file(&path).unwrap()), 1 << 20).unwrap();
        let batch: std::sync::Arc<[Event]> = ev.clone().into();
        for _ in 0..flushes {
            w.send(batch.clone());
        }
        let st = w.close();
        assert_eq!(st.dropped, 0);
    }
    let (file_wall, file_cpu) = (t.elapsed(), cpu_process() - c0);
    let file_events = flushes * ev.len() as u64;
    let file_rows_s = (flushes * rows_per_flush) as f64 / file_wall.as_secs_f64();
    let file_bytes = std::fs::metadata(&path).map(|m| m.len()).unwrap_or(0);
    println!(
        "\n| sink | events | rows | wall | rows/s | CPU per event | CPU per row | bytes out |"
    );
    println!("|---|---|---|---|---|---|---|---|");
    println!(
        "| JSON lines → file | {file_events} | {} | {:.2} s | {:.0} | {:.2} µs | {:.3} µs | {} MB |",
        flushes * rows_per_flush,
        file_wall.as_secs_f64(),
        file_rows_s,
        file_cpu.as_secs_f64() * 1e6 / file_events as f64,
        file_cpu.as_secs_f64() * 1e6 / (flushes * rows_per_flush) as f64,
        file_bytes >> 20
    );

    let Some(ch) = ClickHouseServer::start() else {
        println!("\nSKIPPED: the ClickHouse figures (clickhouse-server is not installed)");
        return;
    };
    let cfg = ClickHouseConfig {
        url: ch.url(),
        init: true,
        batch_rows: 50_000,
        flush_ms: 200,
        max_buffered_rows: 4_000_000,
        max_buffered_bytes: 2 << 30,
        ..ClickHouseConfig::default()
    };
    shield::events::clickhouse::init_schema(&cfg).expect("schema");
    let (c0, t) = (cpu_process(), Instant::now());
    let sink = ClickHouseSink::new(&cfg, "dnsd").unwrap();
    let mon = sink.monitor();
    let total_rows = flushes * rows_per_flush;
    {
        let w = SinkWriter::spawn(Box::new(sink), 1 << 20).unwrap();
        let batch: std::sync::Arc<[Event]> = ev.clone().into();
        for _ in 0..flushes {
            w.send(batch.clone());
        }
        let deadline = Instant::now() + Duration::from_secs(300);
        while mon.stats().landed < total_rows && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(5));
        }
        w.close();
    }
    let (ch_wall, ch_cpu) = (t.elapsed(), cpu_process() - c0);
    let st = mon.stats();
    assert_eq!(
        (st.landed, st.overflow, st.rejected),
        (total_rows, 0, 0),
        "{st:?}"
    );
    let ch_rows_s = total_rows as f64 / ch_wall.as_secs_f64();
    println!(
        "| ClickHouse {} (gzip, batches of {}) | {file_events} | {total_rows} | {:.2} s | {:.0} | {:.2} µs | {:.3} µs | {} MB sent |",
        ch.version(),
        cfg.batch_rows,
        ch_wall.as_secs_f64(),
        ch_rows_s,
        ch_cpu.as_secs_f64() * 1e6 / file_events as f64,
        ch_cpu.as_secs_f64() * 1e6 / total_rows as f64,
        st.bytes_sent >> 20
    );
    println!(
        "\nratios: ClickHouse/file rows per second {:.2}; CPU per row ClickHouse/file {:.2} \
         (ClickHouse's own CPU is not counted: it is another process)",
        ch_rows_s / file_rows_s,
        ch_cpu.as_secs_f64() / file_cpu.as_secs_f64().max(1e-9)
    );

    // 4. A unique-IP botnet: 2 recording threads, every request from a new address, the
    //    aggregator flushing every second into both sinks. CPU of the whole process per
    //    request (recording, flushing, normalising, encoding, gzip, HTTP).
    let agg = Aggregator::new(AggregatorConfig {
        interval_secs: 1,
        ..AggregatorConfig::default()
    });
    let ch_sink = ClickHouseSink::new(&cfg, "dnsd").unwrap();
    let mon = ch_sink.monitor();
    let writers = vec![
        SinkWriter::spawn(Box::new(ch_sink), 16).unwrap(),
        SinkWriter::spawn(
            Box::new(JsonLines::file(&dir.path().join("botnet.jsonl")).unwrap()),
            16,
        )
        .unwrap(),
    ];
    let flusher = agg.spawn_flusher(writers).unwrap();
    let secs = 4;
    let threads = 2u64;
    let c0 = cpu_process();
    // The flusher and sink threads run from here on; recording threads are not yet born.
    let live0 = cpu_live_threads();
    let hs: Vec<_> = (0..threads)
        .map(|k| {
            let agg = agg.clone();
            std::thread::spawn(move || {
                let r = agg.recorder();
                let end = Instant::now() + Duration::from_secs(secs);
                let mut i = k << 40;
                let t0 = cpu_thread();
                while Instant::now() < end {
                    for _ in 0..10_000 {
                        r.record(
                            (i & 7) as u32,
                            unique_ip(i),
                            Action::Blocked,
                            shield::block::Evidence::Udp,
                            1000,
                        );
                        i += 1;
                    }
                }
                (i - (k << 40), cpu_thread() - t0)
            })
        })
        .collect();
    let (mut requests, mut rec_cpu) = (0u64, Duration::ZERO);
    for h in hs {
        let (n, c) = h.join().unwrap();
        requests += n;
        rec_cpu += c;
    }
    // The recording threads have exited: what the live threads spent is the flusher's,
    // the sinks' and ClickHouse senders' (and this thread's, waiting).
    let sink_cpu = cpu_live_threads().saturating_sub(live0);
    let stats = flusher.stop();
    let all_cpu = cpu_process() - c0;
    let st = mon.stats();
    println!("\n| unique-IP botnet, {threads} recording threads, {secs} s | value |\n|---|---|");
    println!(
        "| requests recorded | {requests} ({:.1} M/s) |",
        requests as f64 / secs as f64 / 1e6
    );
    println!(
        "| record path CPU per request | {:.3} µs |",
        rec_cpu.as_secs_f64() * 1e6 / requests as f64
    );
    println!(
        "| flush + sinks CPU (ClickHouse and file), {secs} flushes | {:.1} ms in all, {:.4} ns per request |",
        sink_cpu.as_secs_f64() * 1e3,
        sink_cpu.as_secs_f64() * 1e9 / requests as f64
    );
    println!(
        "| all event CPU per request | {:.3} µs (the provider's anchor: 37 → 16 µs) |",
        all_cpu.as_secs_f64() * 1e6 / requests as f64
    );
    println!(
        "| rows to ClickHouse | {} landed, {} overflow, {} rejected; sink drops {:?} |",
        st.landed,
        st.overflow,
        st.rejected,
        stats.iter().map(|s| s.dropped).collect::<Vec<_>>()
    );
}

/// CPU time of the calling thread.
fn cpu_thread() -> Duration {
    let s = std::fs::read_to_string("/proc/thread-self/schedstat").unwrap_or_default();
    Duration::from_nanos(
        s.split_whitespace()
            .next()
            .and_then(|v| v.parse().ok())
            .unwrap_or(0),
    )
}
