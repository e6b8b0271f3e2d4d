//! dnsd's events into a real ClickHouse: `ctl events-init` applies the schema, blocked and
//! rate-limited traffic arrives with counts equal to dnsd's own counters in /metrics (and
//! to the JSON-lines file sink running alongside), and a ClickHouse stopped under attack
//! loses exactly the rows dnsd counted as overflow.

use std::net::{IpAddr, SocketAddr, UdpSocket};
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use palisade_tests::clickhouse::ClickHouseServer;
use palisade_tests::counters::prometheus_sum;
use palisade_tests::servers::{Dnsd, Zone};
use palisade_tests::wait::wait_for;
use palisade_tests::wire::{QueryOpts, build_query};

/// Waits until `f` returns the same value twice 300 ms apart; returns it.
fn settled(mut f: impl FnMut() -> String) -> String {
    let mut last = f();
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        std::thread::sleep(Duration::from_millis(300));
        let now = f();
        if now == last || Instant::now() > deadline {
            return now;
        }
        last = now;
    }
}

/// Rows the events in a JSON-lines file make (one per listed prefix, one for the rest).
fn rows_in_file(path: &Path) -> (u64, u64) {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let (mut rows, mut total) = (0, 0);
    for l in text.lines() {
        let v: serde_like::Value = serde_like::parse(l);
        let top = v.top;
        rows += top + u64::from(v.other > 0 || top == 0);
        total += v.total;
    }
    (rows, total)
}

/// Just enough JSON reading for the event lines (the tests crate has no serde).
mod serde_like {
    pub struct Value {
        pub top: u64,
        pub other: u64,
        pub total: u64,
    }

    fn num(line: &str, key: &str) -> u64 {
        let at = line.find(&format!("\"{key}\":")).expect(key) + key.len() + 3;
        line[at..]
            .chars()
            .take_while(char::is_ascii_digit)
            .collect::<String>()
            .parse()
            .expect(key)
    }

    pub fn parse(line: &str) -> Value {
        Value {
            top: line.matches("\"prefix\":").count() as u64,
            other: num(line, "other"),
            total: num(line, "total"),
        }
    }
}

fn dnsd_with_clickhouse(ch: &ClickHouseServer, dir: &Path, extra: &str) -> Dnsd {
    Dnsd::builder()
        .zone(Zone::data("example.com."))
        .raw("[defence.rrl]\nresponses_per_second = 10\nslip = 2")
        .raw("[defence.random_subdomain]\nenabled = false")
        .raw(&format!(
            "[events]\ninterval_secs = 1\noutput = \"file:{}\"\n\n[events.clickhouse]\nurl = \"{}\"\n\
             flush_ms = 200\nmax_backoff_ms = 200\n{extra}",
            dir.join("events.jsonl").display(),
            ch.url()
        ))
        .start()
}

#[test]
fn blocked_and_rate_limited_traffic_lands_with_the_counts_of_metrics() {
    let Some(ch) = ClickHouseServer::start() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let dnsd = dnsd_with_clickhouse(&ch, dir.path(), "");
    let (ok, out) = dnsd.ctl(&["events-init"]);
    assert!(ok, "events-init: {out}");
    assert_eq!(
        out.lines().filter(|l| l.ends_with(": ok")).count(),
        3,
        "{out}"
    );

    let (ok, out) = dnsd.ctl(&["block", "add", "127.250.1.0/24", "--ttl", "600"]);
    assert!(ok, "{out}");
    palisade_tests::client::send_queries_from(dnsd.addr(), "127.250.1.1", 300);
    palisade_tests::client::send_queries_from(dnsd.addr(), "127.250.1.2", 200);
    palisade_tests::client::send_queries_from(dnsd.addr(), "127.251.1.1", 400); // an RRL flood from one source
    palisade_tests::client::send_queries_from(dnsd.addr(), "127.252.1.1", 3); // a calm client

    let m = settled(|| dnsd.metrics());
    let blocked = prometheus_sum(&m, "dnsd_blocked_total", "");
    let limited = prometheus_sum(&m, "dnsd_rrl_limited_total", "");
    eprintln!("metrics: blocked {blocked}, rrl limited {limited}");
    assert!(blocked >= 400, "most blocked datagrams arrive: {blocked}");
    assert!(limited >= 300, "the flood is limited: {limited}");

    let sum = |action: &str| {
        ch.number(&format!(
            "SELECT sum(hits) FROM palisade.events WHERE service = 'dnsd' AND action = '{action}'"
        ))
    };
    wait_for(
        "ClickHouse to have every blocked and limited event",
        Duration::from_secs(20),
        || sum("blocked") == blocked && sum("rate_limited") == limited,
    );
    // One source prefix holds all of it.
    assert_eq!(
        ch.query(
            "SELECT IPv6NumToString(src), src_len, sum(hits), sum(min_hits) FROM palisade.events \
             WHERE action = 'blocked' AND is_other = 0 GROUP BY src, src_len FORMAT TSV"
        )
        .unwrap(),
        format!("::ffff:127.250.1.0\t120\t{blocked}\t{blocked}\n")
    );
    assert_eq!(
        ch.query(
            "SELECT IPv6NumToString(src), groupUniqArray(reason), sum(hits) FROM palisade.events \
             WHERE action = 'rate_limited' GROUP BY src FORMAT TSV"
        )
        .unwrap(),
        format!("::ffff:127.251.1.0\t[1001]\t{limited}\n")
    );

    // The JSON-lines file sink ran alongside and says the same.
    let file = dir.path().join("events.jsonl");
    wait_for("the file sink", Duration::from_secs(10), || {
        rows_in_file(&file).1 == blocked + limited
    });
    let (rows, _) = rows_in_file(&file);
    assert_eq!(ch.number("SELECT count() FROM palisade.events"), rows);

    let m = dnsd.metrics();
    for (series, want) in [
        ("result=\"overflow\"", 0),
        ("result=\"rejected\"", 0),
        ("result=\"shutdown_dropped\"", 0),
        ("result=\"landed\"", rows),
    ] {
        assert_eq!(
            prometheus_sum(&m, "palisade_clickhouse_rows_total", series),
            want,
            "{series}"
        );
    }
    assert_eq!(
        prometheus_sum(&m, "palisade_clickhouse_invalid_rows_total", ""),
        0
    );
    assert_eq!(
        prometheus_sum(&m, "palisade_clickhouse_buffered_rows", ""),
        0
    );
    assert_eq!(
        prometheus_sum(
            &m,
            "palisade_events_sink_events_total",
            "result=\"dropped\""
        ),
        0
    );
    assert_eq!(
        prometheus_sum(&m, "palisade_events_sink_queue_full_total", ""),
        0
    );
    let stats = dnsd.stats();
    assert_eq!(stats["events.clickhouse.landed"], rows);
    assert_eq!(stats["events.clickhouse.overflow"], 0);
}

#[test]
fn clickhouse_stopped_under_attack_loses_exactly_the_counted_overflow() {
    let Some(mut ch) = ClickHouseServer::start() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    // 60 rows of room: about three flushes of 21 rows (20 listed prefixes and the rest).
    let dnsd = dnsd_with_clickhouse(
        &ch,
        dir.path(),
        "init = true\nbatch_rows = 30\nmax_buffered_rows = 60\ntimeout_ms = 2000",
    );
    let (ok, out) = dnsd.ctl(&["block", "add", "127.250.0.0/16", "--ttl", "600"]);
    assert!(ok, "{out}");

    // An attack from 100 source prefixes, each sending every 100 ms, until told to stop.
    let stop = Arc::new(AtomicBool::new(false));
    let attack = {
        let (stop, server) = (stop.clone(), dnsd.addr());
        std::thread::spawn(move || {
            let socks: Vec<UdpSocket> = (0..100u8)
                .map(|i| {
                    let s = UdpSocket::bind(SocketAddr::new(IpAddr::from([127, 250, i, 1]), 0))
                        .unwrap();
                    s.connect(server).unwrap();
                    s
                })
                .collect();
            let q = build_query(1, "www.example.com.", 1, &QueryOpts::edns(1232));
            while !stop.load(Ordering::Relaxed) {
                for s in &socks {
                    let _ = s.send(&q);
                }
                std::thread::sleep(Duration::from_millis(100));
            }
        })
    };
    let landed = || {
        prometheus_sum(
            &dnsd.metrics(),
            "palisade_clickhouse_rows_total",
            "result=\"landed\"",
        )
    };
    wait_for("rows landing", Duration::from_secs(20), || landed() >= 40);
    // `ctl status` says how the sink fares: taking rows, then failing and why.
    let status = || {
        let (ok, out) = dnsd.ctl(&["status"]);
        assert!(ok, "{out}");
        out
    };
    let s = status();
    assert!(
        s.contains("events.clickhouse: ") && s.contains(", ok"),
        "{s}"
    );
    ch.stop();
    wait_for(
        "overflow while ClickHouse is down",
        Duration::from_secs(30),
        || {
            prometheus_sum(
                &dnsd.metrics(),
                "palisade_clickhouse_rows_total",
                "result=\"overflow\"",
            ) >= 40
        },
    );
    let m = dnsd.metrics();
    assert_eq!(
        prometheus_sum(&m, "palisade_clickhouse_buffered_rows", ""),
        60,
        "bounded"
    );
    let s = status();
    assert!(s.contains("60 held") && s.contains("FAILING: "), "{s}");
    assert!(
        prometheus_sum(
            &m,
            "palisade_clickhouse_requests_total",
            "result=\"failed\""
        ) > 0
    );
    assert_eq!(
        prometheus_sum(
            &m,
            "palisade_events_sink_events_total",
            "result=\"dropped\""
        ),
        0,
        "the sink writers' queues never back up"
    );
    ch.restart();
    wait_for("the buffer to drain", Duration::from_secs(30), || {
        prometheus_sum(&dnsd.metrics(), "palisade_clickhouse_buffered_rows", "") < 30
    });
    stop.store(true, Ordering::Relaxed);
    attack.join().unwrap();
    let file = dir.path().join("events.jsonl");
    // Quiet: the last flush is in the file, and every row of it was taken by the ClickHouse
    // writer (accepted or counted) and sent.
    let rows = |m: &str, r: &str| prometheus_sum(m, "palisade_clickhouse_rows_total", r);
    wait_for("the last flush", Duration::from_secs(20), || {
        let m = dnsd.metrics();
        let (offered, total) = rows_in_file(&file);
        total == prometheus_sum(&m, "dnsd_blocked_total", "")
            && rows(&m, "result=\"accepted\"") + rows(&m, "result=\"overflow\"") == offered
            && prometheus_sum(&m, "palisade_clickhouse_buffered_rows", "") == 0
    });
    let m = dnsd.metrics();
    let accepted = prometheus_sum(&m, "palisade_clickhouse_rows_total", "result=\"accepted\"");
    let landed = prometheus_sum(&m, "palisade_clickhouse_rows_total", "result=\"landed\"");
    let overflow = prometheus_sum(&m, "palisade_clickhouse_rows_total", "result=\"overflow\"");
    let (offered, total) = rows_in_file(&file);
    let blocked = prometheus_sum(&m, "dnsd_blocked_total", "");
    eprintln!(
        "offered {offered} rows ({total} events, dnsd_blocked_total {blocked}); accepted {accepted}, landed {landed}, overflow {overflow}"
    );
    assert_eq!(total, blocked, "the file sink has every event");
    assert!(overflow > 0);
    assert_eq!(
        accepted + overflow,
        offered,
        "every row is accepted or counted"
    );
    assert_eq!(landed, accepted, "nothing accepted is lost");
    assert_eq!(ch.number("SELECT count() FROM palisade.events"), landed);
    assert_eq!(
        prometheus_sum(&m, "palisade_clickhouse_rows_total", "result=\"rejected\""),
        0
    );
}

/// A ClickHouse that hangs (SIGSTOP) past the writer's timeout while traffic flows: the
/// writer retries batches the server may already have stored, and when it resumes it runs
/// the abandoned INSERTs too. Rows keep their identity across retries, the tables are
/// ReplacingMergeTrees, and the operator queries (with FINAL) give exact totals; the
/// uncertain retries are counted.
#[test]
fn a_frozen_clickhouse_never_makes_rows_count_twice() {
    let Some(ch) = ClickHouseServer::start() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let dnsd = dnsd_with_clickhouse(&ch, dir.path(), "init = true\ntimeout_ms = 1000");
    let (ok, out) = dnsd.ctl(&["block", "add", "127.250.0.0/16", "--ttl", "600"]);
    assert!(ok, "{out}");
    // Traffic before, during and after a 4 s freeze.
    let stop = Arc::new(AtomicBool::new(false));
    let attack = {
        let (stop, server) = (stop.clone(), dnsd.addr());
        std::thread::spawn(move || {
            let socks: Vec<UdpSocket> = (0..20u8)
                .map(|i| {
                    let s = UdpSocket::bind(SocketAddr::new(IpAddr::from([127, 250, i, 1]), 0))
                        .unwrap();
                    s.connect(server).unwrap();
                    s
                })
                .collect();
            let q = build_query(1, "www.example.com.", 1, &QueryOpts::edns(1232));
            let end = Instant::now() + Duration::from_secs(30);
            while !stop.load(Ordering::Relaxed) && Instant::now() < end {
                for s in &socks {
                    let _ = s.send(&q);
                }
                std::thread::sleep(Duration::from_millis(50));
            }
        })
    };
    std::thread::sleep(Duration::from_millis(2500));
    ch.pause();
    std::thread::sleep(Duration::from_secs(4));
    ch.resume();
    std::thread::sleep(Duration::from_millis(2500));
    stop.store(true, Ordering::Relaxed);
    attack.join().unwrap();

    let m = settled(|| dnsd.metrics());
    let blocked = prometheus_sum(&m, "dnsd_blocked_total", "");
    assert!(blocked > 500, "{blocked}");
    wait_for("the buffer to drain", Duration::from_secs(30), || {
        prometheus_sum(&dnsd.metrics(), "palisade_clickhouse_buffered_rows", "") == 0
            && prometheus_sum(&dnsd.metrics(), "palisade_events_flushed_total", "") > 0
    });
    let m = dnsd.metrics();
    let uncertain = prometheus_sum(&m, "palisade_clickhouse_uncertain_retries_total", "");
    assert!(uncertain >= 1, "the freeze made no uncertain retry: {m}");
    assert_eq!(
        prometheus_sum(&m, "palisade_clickhouse_rows_total", "result=\"overflow\""),
        0
    );
    // README's per-tenant total, read with FINAL: exactly dnsd's own count.
    let total = |final_: &str| {
        ch.number(&format!(
            "SELECT sum(hits) FROM palisade.events {final_} WHERE service = 'dnsd' AND action = 'blocked'"
        ))
    };
    wait_for(
        "ClickHouse to hold every blocked event",
        Duration::from_secs(30),
        || total("FINAL") == blocked,
    );
    let stored = ch.number("SELECT count() FROM palisade.events");
    let distinct = ch.number("SELECT count() FROM palisade.events FINAL");
    eprintln!(
        "blocked {blocked}, uncertain retries {uncertain}, rows stored {stored}, distinct {distinct}, sum without FINAL {}",
        total("")
    );
    assert!(stored >= distinct);
}

/// `dnsd ctl -c CONFIG events-init` applies the schema from the config alone, no server running.
#[test]
fn events_init_works_from_the_config_without_a_server() {
    let Some(ch) = ClickHouseServer::start() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let conf = dir.path().join("palisade.toml");
    std::fs::write(
        &conf,
        format!(
            "[control]\nsocket = \"{}\"\n\n[events.clickhouse]\nurl = \"{}\"\ndatabase = \"offline\"\n",
            dir.path().join("none.sock").display(),
            ch.url()
        ),
    )
    .unwrap();
    let out = std::process::Command::new(palisade_tests::bin("dnsd"))
        .args(["ctl", "-c"])
        .arg(&conf)
        .arg("events-init")
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        ch.query("SELECT count() FROM system.tables WHERE database = 'offline' FORMAT TSVRaw")
            .unwrap()
            .trim(),
        "2"
    );
}

/// A ClickHouse that takes connections and never answers (its host hung, a proxy gone
/// silent) with a long `timeout_ms` does not hold a stop past the budget the packaged unit
/// gives it (15 s before SIGKILL): dnsd leaves within 12 s, saying what it dropped.
#[test]
fn a_clickhouse_that_never_answers_does_not_hold_a_stop_past_its_budget() {
    let hole = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}", hole.local_addr().unwrap());
    let done = Arc::new(AtomicBool::new(false));
    let holder = {
        let done = done.clone();
        hole.set_nonblocking(true).unwrap();
        std::thread::spawn(move || {
            let mut held = Vec::new();
            let end = Instant::now() + Duration::from_secs(60);
            while !done.load(Ordering::Relaxed) && Instant::now() < end {
                if let Ok((s, _)) = hole.accept()
                    && held.len() < 100
                {
                    held.push(s);
                }
                std::thread::sleep(Duration::from_millis(10));
            }
        })
    };
    let dir = tempfile::tempdir().unwrap();
    let mut dnsd = Dnsd::builder()
        .zone(Zone::data("example.com."))
        .raw("[defence.rrl]\nresponses_per_second = 10\nslip = 2")
        .raw("[defence.random_subdomain]\nenabled = false")
        .raw(&format!(
            "[events]\ninterval_secs = 1\noutput = \"file:{}\"\n\n[events.clickhouse]\nurl = \"{url}\"\n\
             flush_ms = 200\nmax_backoff_ms = 200\ntimeout_ms = 60000\n",
            dir.path().join("events.jsonl").display(),
        ))
        .start();
    // Rate-limited answers: events to send, and an insert in flight that is never answered.
    let s = UdpSocket::bind("127.0.0.1:0").unwrap();
    let q = build_query(0x4242, "www.example.com.", 1, &QueryOpts::udp());
    for _ in 0..300 {
        let _ = s.send_to(&q, dnsd.addr());
    }
    wait_for("an event flushed", Duration::from_secs(10), || {
        std::fs::read_to_string(dir.path().join("events.jsonl")).is_ok_and(|t| !t.is_empty())
    });
    std::thread::sleep(Duration::from_millis(1500));
    let t = Instant::now();
    let gone = dnsd.terminate(Duration::from_secs(14));
    done.store(true, Ordering::Relaxed);
    let _ = holder.join();
    assert!(
        gone,
        "still running {:?} after SIGTERM:\n{}",
        t.elapsed(),
        dnsd.log()
    );
}

/// A failure streak whose cause changes (a server out of memory, then a table gone) says the
/// new cause at warning level (only the first was said, the rest at debug), and a full
/// buffer says it drops rows (it was only counted).
#[test]
fn a_changed_cause_of_failure_and_a_full_buffer_are_said() {
    let fake = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}", fake.local_addr().unwrap());
    let table_gone = Arc::new(AtomicBool::new(false));
    let done = Arc::new(AtomicBool::new(false));
    let server = {
        let (table_gone, done) = (table_gone.clone(), done.clone());
        fake.set_nonblocking(true).unwrap();
        std::thread::spawn(move || {
            use std::io::{Read, Write};
            let end = Instant::now() + Duration::from_secs(60);
            while !done.load(Ordering::Relaxed) && Instant::now() < end {
                let Ok((mut c, _)) = fake.accept() else {
                    std::thread::sleep(Duration::from_millis(5));
                    continue;
                };
                let _ = c.set_nonblocking(false);
                let _ = c.set_read_timeout(Some(Duration::from_millis(300)));
                let mut buf = [0u8; 65536];
                let _ = c.read(&mut buf);
                let (status, body) = if table_gone.load(Ordering::Relaxed) {
                    (
                        404,
                        "Code: 60. DB::Exception: Table palisade.events does not exist",
                    )
                } else {
                    (503, "Code: 241. DB::Exception: Memory limit exceeded")
                };
                let _ = write!(
                    c,
                    "HTTP/1.1 {status} X\r\nX-ClickHouse-Exception-Code: 1\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                    body.len()
                );
            }
        })
    };
    let dir = tempfile::tempdir().unwrap();
    let dnsd = Dnsd::builder()
        .zone(Zone::data("example.com."))
        .raw("[defence.rrl]\nresponses_per_second = 10\nslip = 2")
        .raw("[defence.random_subdomain]\nenabled = false")
        .raw(&format!(
            "[events]\ninterval_secs = 1\noutput = \"file:{}\"\n\n[events.clickhouse]\nurl = \"{url}\"\n\
             flush_ms = 100\nmax_backoff_ms = 100\nbatch_rows = 1\nmax_buffered_rows = 1\n",
            dir.path().join("events.jsonl").display(),
        ))
        .start();
    let s = UdpSocket::bind("127.0.0.1:0").unwrap();
    let flood = |n: u16| {
        for i in 0..n {
            let q = build_query(i, "www.example.com.", 1, &QueryOpts::udp());
            let _ = s.send_to(&q, dnsd.addr());
        }
    };
    flood(300);
    wait_for("the first cause said", Duration::from_secs(15), || {
        dnsd.log().contains("Memory limit exceeded")
    });
    table_gone.store(true, Ordering::Relaxed);
    wait_for("the new cause said", Duration::from_secs(15), || {
        flood(50);
        dnsd.log().contains("does not exist")
    });
    wait_for("a full buffer said", Duration::from_secs(15), || {
        flood(50);
        dnsd.log().contains("ClickHouse buffer full")
    });
    done.store(true, Ordering::Relaxed);
    let _ = server.join();
}
