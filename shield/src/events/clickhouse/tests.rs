//! The writer against a fake ClickHouse (a loopback HTTP server that can fail, reject and record).

use super::writer::{Failure, classify};
use super::*;
use std::io::Write;
use std::io::{BufRead, BufReader, Read};
use std::net::{TcpListener, TcpStream};
use std::sync::atomic::AtomicBool;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// What the fake does with one insert.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Mode {
    Normal,
    /// Answer 503 with a non-data error to the next `n` requests.
    Down,
}

/// How the fake answers every request (beside `fail_next`).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum How {
    Normal,
    /// 413 to bodies longer than this.
    TooLargeOver(usize),
    /// A 200 sent a byte every 100 ms.
    Trickle,
    /// A whole 200, the connection then kept open for 5 s.
    KeepOpen,
    /// Every row refused (code 27), as a table whose column changed type refuses them.
    RejectAll,
    /// A 200 without ClickHouse's headers, storing nothing (a proxy, another server).
    NotClickHouse,
    /// A 100 Continue before the real reply (from an intermediary).
    Continue,
}

struct Fake {
    port: u16,
    rows: Arc<Mutex<Vec<String>>>,
    requests: Arc<AtomicU64>,
    fail_next: Arc<AtomicU64>,
    how: Arc<Mutex<How>>,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl Fake {
    fn start() -> Fake {
        Self::start_on(TcpListener::bind("127.0.0.1:0").unwrap())
    }

    fn start_on(l: TcpListener) -> Fake {
        let port = l.local_addr().unwrap().port();
        l.set_nonblocking(true).unwrap();
        let rows = Arc::new(Mutex::new(Vec::new()));
        let requests = Arc::new(AtomicU64::new(0));
        let fail_next = Arc::new(AtomicU64::new(0));
        let stop = Arc::new(AtomicBool::new(false));
        let how = Arc::new(Mutex::new(How::Normal));
        let (r, n, f, s, h) = (
            rows.clone(),
            requests.clone(),
            fail_next.clone(),
            stop.clone(),
            how.clone(),
        );
        let thread = std::thread::spawn(move || {
            while !s.load(Ordering::Relaxed) {
                match l.accept() {
                    Ok((c, _)) => {
                        n.fetch_add(1, Ordering::Relaxed);
                        let mode = if f.load(Ordering::Relaxed) > 0 {
                            f.fetch_sub(1, Ordering::Relaxed);
                            Mode::Down
                        } else {
                            Mode::Normal
                        };
                        let how = *h.lock().unwrap();
                        if how == How::Normal {
                            serve(c, mode, how, &r);
                        } else {
                            // Slow answers must not hold the next connection.
                            let r = r.clone();
                            std::thread::spawn(move || serve(c, mode, how, &r));
                        }
                    }
                    Err(_) => std::thread::sleep(Duration::from_millis(2)),
                }
            }
        });
        Fake {
            port,
            rows,
            requests,
            fail_next,
            how,
            stop,
            thread: Some(thread),
        }
    }

    fn rows(&self) -> Vec<String> {
        self.rows.lock().unwrap().clone()
    }
}

impl Drop for Fake {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

fn serve(c: TcpStream, mode: Mode, how: How, rows: &Mutex<Vec<String>>) {
    c.set_nonblocking(false).unwrap();
    let mut r = BufReader::new(c.try_clone().unwrap());
    let (mut len, mut gz) = (0usize, false);
    let mut line = String::new();
    loop {
        line.clear();
        if r.read_line(&mut line).unwrap_or(0) == 0 {
            return;
        }
        let l = line.trim_end().to_ascii_lowercase();
        if l.is_empty() {
            break;
        }
        if let Some(v) = l.strip_prefix("content-length:") {
            len = v.trim().parse().unwrap();
        }
        gz |= l == "content-encoding: gzip";
    }
    let mut body = vec![0; len];
    r.read_exact(&mut body).unwrap();
    if gz {
        let mut d = Vec::new();
        flate2::read::GzDecoder::new(&body[..])
            .read_to_end(&mut d)
            .unwrap();
        body = d;
    }
    let text = String::from_utf8_lossy(&body).into_owned();
    let mut c = c;
    match how {
        How::TooLargeOver(n) if body.len() > n => {
            let _ = write!(
                c,
                "HTTP/1.1 413 Too Large\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
            );
            return;
        }
        How::Trickle => {
            let reply = format!(
                "HTTP/1.1 200 OK\r\nX-ClickHouse-Summary: {{}}\r\nContent-Length: 60\r\n\r\n{}",
                "x".repeat(60)
            );
            for b in reply.bytes() {
                if c.write_all(&[b]).is_err() {
                    return;
                }
                std::thread::sleep(Duration::from_millis(100));
            }
            return;
        }
        How::NotClickHouse => {
            let _ = write!(
                c,
                "HTTP/1.1 200 OK\r\nContent-Length: 10\r\nConnection: close\r\n\r\n\0\u{7f} garbage"
            );
            return;
        }
        How::RejectAll => {
            let m = "Code: 27, e.displayText() = DB::Exception: Cannot parse input: expected '\"' before: '1}'";
            let _ = write!(
                c,
                "HTTP/1.1 500 X\r\nContent-Length: {}\r\n\r\n{m}",
                m.len()
            );
            return;
        }
        _ => {}
    }
    let (status, reply) = if mode == Mode::Down {
        (
            503,
            "Code: 241, e.displayText() = DB::Exception: Memory limit exceeded".to_string(),
        )
    } else if text.contains("POISON") {
        (
            500,
            "Code: 131, e.displayText() = DB::Exception: Too large value for FixedString(16)"
                .to_string(),
        )
    } else {
        rows.lock()
            .unwrap()
            .extend(text.lines().map(str::to_string));
        (200, String::new())
    };
    if how == How::Continue {
        let _ = write!(c, "HTTP/1.1 100 Continue\r\n\r\n");
    }
    let _ = write!(
        c,
        "HTTP/1.1 {status} X\r\nX-ClickHouse-Query-Id: q\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{reply}",
        reply.len()
    );
    if how == How::KeepOpen {
        std::thread::sleep(Duration::from_secs(5));
    }
}

fn cfg(port: u16) -> ClickHouseConfig {
    ClickHouseConfig {
        url: format!("http://127.0.0.1:{port}"),
        batch_rows: 10,
        flush_ms: 20,
        max_buffered_rows: 50,
        timeout_ms: 2_000,
        max_backoff_ms: 50,
        ..ClickHouseConfig::default()
    }
}

fn rows(range: std::ops::Range<u32>) -> Rows {
    let mut r = Rows::new();
    for i in range {
        r.push_unvalidated(format!("{{\"seq\":{i}}}").as_bytes());
    }
    r
}

fn wait_for(what: &str, mut f: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while !f() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(5));
    }
}

fn seqs(f: &Fake) -> Vec<u32> {
    f.rows()
        .iter()
        .map(|l| {
            serde_json::from_str::<serde_json::Value>(l).unwrap()["seq"]
                .as_u64()
                .unwrap() as u32
        })
        .collect()
}

#[test]
fn batches_land_in_order_after_retries() {
    let fake = Fake::start();
    fake.fail_next.store(3, Ordering::Relaxed);
    let w = ClickHouseWriter::spawn(&cfg(fake.port), Table::Events).unwrap();
    assert_eq!(w.push(&rows(0..25)), 25);
    wait_for("25 rows", || fake.rows().len() == 25);
    assert_eq!(w.push(&rows(25..30)), 5);
    let st = w.close();
    assert_eq!(seqs(&fake), (0..30).collect::<Vec<_>>());
    assert_eq!((st.landed, st.request_failures, st.overflow), (30, 3, 0));
    assert_eq!(st.buffered_rows, 0);
    assert!(st.batches >= 3, "10-row batches: {st:?}");
}

#[test]
fn a_server_trickling_its_reply_fails_the_insert_within_the_timeout() {
    let fake = Fake::start();
    *fake.how.lock().unwrap() = How::Trickle;
    let w = ClickHouseWriter::spawn(
        &ClickHouseConfig {
            timeout_ms: 300,
            ..cfg(fake.port)
        },
        Table::Events,
    )
    .unwrap();
    assert_eq!(w.push(&rows(0..5)), 5);
    // The whole reply takes 6 s, each byte well within the timeout: the deadline is the
    // request's, not each read's.
    wait_for("a timed-out insert", || w.stats().request_failures >= 1);
    // Said as the request's timeout, not as the socket's EAGAIN ("os error 11").
    let e = w.stats().last_error.unwrap_or_default();
    assert!(e.contains("no reply within 300 ms"), "{e}");
    *fake.how.lock().unwrap() = How::Normal;
    wait_for("5 rows", || fake.rows().len() == 5);
    let st = w.close();
    assert_eq!(st.landed, 5);
}

/// A 200 that is not ClickHouse's (no X-ClickHouse-* header: a proxy misrouted, another
/// server on the port) stores nothing: its rows are not counted landed but wait; a 100
/// Continue from an intermediary before the real reply is passed over.
#[test]
fn a_200_of_another_server_lands_nothing_and_an_interim_100_is_passed_over() {
    let fake = Fake::start();
    *fake.how.lock().unwrap() = How::NotClickHouse;
    let w = ClickHouseWriter::spawn(&cfg(fake.port), Table::Events).unwrap();
    assert_eq!(w.push(&rows(0..5)), 5);
    wait_for("a failed insert", || w.stats().request_failures >= 1);
    let st = w.stats();
    assert_eq!(st.landed, 0, "{st:?}");
    assert!(st.last_error.unwrap_or_default().contains("X-ClickHouse"));
    *fake.how.lock().unwrap() = How::Continue;
    wait_for("5 rows", || fake.rows().len() == 5);
    let st = w.close();
    assert_eq!(st.landed, 5);
}

/// A server that trickles its TLS handshake a byte at a time, each well within the timeout:
/// the insert fails within the request's one deadline (the handshake waited forever, and a
/// stop waited with it).
#[test]
fn a_server_trickling_its_tls_handshake_fails_the_insert_within_the_timeout() {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = l.local_addr().unwrap().port();
    l.set_nonblocking(true).unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let drip = {
        let stop = stop.clone();
        std::thread::spawn(move || {
            // Each connection gets a record of 16 KiB (a ServerHello), one byte a tick.
            let start = [0x16u8, 3, 3, 0x40, 0, 2, 0, 0x3f, 0xfc];
            let mut conns: Vec<(TcpStream, usize)> = Vec::new();
            for _ in 0..300 {
                if stop.load(Ordering::Relaxed) {
                    break;
                }
                if let Ok((c, _)) = l.accept() {
                    conns.push((c, 0));
                }
                conns.retain_mut(|(c, at)| {
                    let b = start.get(*at).copied().unwrap_or(0);
                    *at += 1;
                    c.write_all(&[b]).is_ok()
                });
                std::thread::sleep(Duration::from_millis(100));
            }
        })
    };
    let w = ClickHouseWriter::spawn(
        &ClickHouseConfig {
            url: format!("https://127.0.0.1:{port}"),
            timeout_ms: 300,
            ..cfg(port)
        },
        Table::Events,
    )
    .unwrap();
    assert_eq!(w.push(&rows(0..1)), 1);
    wait_for("a failed insert", || w.stats().request_failures >= 1);
    let e = w.stats().last_error.unwrap_or_default();
    assert!(e.contains("not connected within 300 ms"), "{e}");
    stop.store(true, Ordering::Relaxed);
    drip.join().unwrap();
    let _ = w.close();
}

#[test]
fn a_whole_reply_is_taken_without_waiting_for_the_close() {
    let fake = Fake::start();
    *fake.how.lock().unwrap() = How::KeepOpen;
    let w = ClickHouseWriter::spawn(
        &ClickHouseConfig {
            timeout_ms: 8_000,
            ..cfg(fake.port)
        },
        Table::Events,
    )
    .unwrap();
    // Four batches: waiting for each connection's close would take 20 s.
    assert_eq!(w.push(&rows(0..40)), 40);
    wait_for("40 rows", || fake.rows().len() == 40);
    let st = w.close();
    assert_eq!((st.landed, st.request_failures), (40, 0));
}

#[test]
fn a_batch_too_large_for_the_server_is_halved_and_a_row_too_large_dropped() {
    let fake = Fake::start();
    // A proxy in front that takes 200 KiB at most; one row of 300 KiB.
    *fake.how.lock().unwrap() = How::TooLargeOver(200 * 1024);
    let w = ClickHouseWriter::spawn(
        &ClickHouseConfig {
            batch_rows: 40,
            max_buffered_rows: 100,
            ..cfg(fake.port)
        },
        Table::Events,
    )
    .unwrap();
    let mut r = rows(0..20);
    r.push_unvalidated(format!("{{\"seq\":20,\"pad\":\"{}\"}}", "p".repeat(300 * 1024)).as_bytes());
    for i in 21..40 {
        r.push_unvalidated(format!("{{\"seq\":{i}}}").as_bytes());
    }
    assert_eq!(w.push(&r), 40);
    let st = w.close();
    let want: Vec<u32> = (0..40).filter(|&i| i != 20).collect();
    assert_eq!(seqs(&fake), want);
    assert_eq!((st.landed, st.rejected, st.request_failures), (39, 1, 0));
}

/// Something in front of ClickHouse that answers 413 to everything (rows of a few bytes,
/// smaller than any row could be too large): waited out as a server that is down, never a
/// reason to drop the rows (every one was dropped).
#[test]
fn a_413_for_rows_no_larger_than_any_is_waited_out() {
    let fake = Fake::start();
    *fake.how.lock().unwrap() = How::TooLargeOver(0);
    let w = ClickHouseWriter::spawn(
        &ClickHouseConfig {
            batch_rows: 20,
            max_buffered_rows: 100,
            ..cfg(fake.port)
        },
        Table::Events,
    )
    .unwrap();
    assert_eq!(w.push(&rows(0..20)), 20);
    wait_for("the insert failing as for a server that is down", || {
        w.stats().request_failures >= 3
    });
    assert_eq!(w.stats().rejected, 0);
    *fake.how.lock().unwrap() = How::Normal;
    wait_for("every row", || fake.rows().len() == 20);
    let st = w.close();
    assert_eq!((st.landed, st.rejected), (20, 0));
}

#[test]
fn rows_refused_one_after_another_wait_for_the_table_instead_of_being_dropped() {
    let fake = Fake::start();
    *fake.how.lock().unwrap() = How::RejectAll;
    let w = ClickHouseWriter::spawn(
        &ClickHouseConfig {
            batch_rows: 50,
            max_buffered_rows: 100,
            ..cfg(fake.port)
        },
        Table::Events,
    )
    .unwrap();
    assert_eq!(w.push(&rows(0..50)), 50);
    wait_for("the insert failing as for a server that is down", || {
        w.stats().request_failures >= 3
    });
    // None dropped: no row was taken, so none is to blame (16 were, before the table was
    // suspected).
    assert_eq!(w.stats().rejected, 0);
    // The table mended: every row lands.
    *fake.how.lock().unwrap() = How::Normal;
    wait_for("every row", || fake.rows().len() == 50);
    let st = w.close();
    assert_eq!((st.landed, st.rejected), (50, 0));
}

#[test]
fn a_rejected_batch_is_bisected_and_the_rest_lands() {
    let fake = Fake::start();
    let w = ClickHouseWriter::spawn(&cfg(fake.port), Table::Events).unwrap();
    let mut r = rows(0..5);
    r.push_unvalidated(b"{\"POISON\":1}");
    for i in 6..10 {
        r.push_unvalidated(format!("{{\"seq\":{i}}}").as_bytes());
    }
    assert_eq!(w.push(&r), 10);
    let st = w.close();
    assert_eq!(seqs(&fake), vec![0, 1, 2, 3, 4, 6, 7, 8, 9]);
    assert_eq!((st.landed, st.rejected), (9, 1));
    assert_eq!(st.rejected_by_code, vec![(131, 1)]);
    assert!(st.request_rejections >= 2, "{st:?}");
}

#[test]
fn overflow_is_counted_exactly_and_the_buffer_lands_on_recovery() {
    // Reserve a port, then close it: nothing listens until the fake starts there.
    let port = TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let w = ClickHouseWriter::spawn(&cfg(port), Table::Events).unwrap();
    let mut offered = 0;
    for k in 0..8u32 {
        offered += 10;
        w.push(&rows(k * 10..k * 10 + 10));
        std::thread::sleep(Duration::from_millis(10));
    }
    wait_for("failures", || w.stats().request_failures > 0);
    let st = w.stats();
    assert_eq!(st.buffered_rows, 50, "{st:?}");
    assert_eq!(st.overflow, offered - 50);
    assert_eq!(st.accepted, 50);
    let fake = Fake::start_on(TcpListener::bind(("127.0.0.1", port)).unwrap());
    wait_for("the buffer to land", || w.stats().landed == 50);
    let st = w.close();
    assert_eq!(
        seqs(&fake),
        (0..50).collect::<Vec<_>>(),
        "the first 50, in order"
    );
    assert_eq!(st.lost(), st.overflow);
    assert_eq!(st.accepted, st.landed);
    assert!(fake.requests.load(Ordering::Relaxed) >= 5);
}

#[test]
fn close_gives_up_after_the_drain_time() {
    let port = TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let mut c = cfg(port);
    c.timeout_ms = 200;
    let w = ClickHouseWriter::spawn(&c, Table::Events).unwrap();
    w.push(&rows(0..15));
    let t = Instant::now();
    let st = w.close();
    assert!(t.elapsed() < Duration::from_secs(3));
    assert_eq!((st.shutdown_dropped, st.landed), (15, 0));
    assert_eq!(st.buffered_rows, 0);
}

#[test]
fn errors_are_classified() {
    assert!(matches!(
        classify(
            500,
            b"Code: 27, e.displayText() = DB::Exception: Cannot parse input"
        ),
        Failure::Rejected { code: 27, .. }
    ));
    assert!(matches!(
        classify(
            400,
            b"Code: 72. DB::Exception: Unsigned type must not contain '-' symbol"
        ),
        Failure::Rejected { code: 72, .. }
    ));
    assert!(matches!(
        classify(500, b"Code: 117, e.displayText() = DB::Exception: Unknown field found while parsing JSONEachRow format: x"),
        Failure::Transient { code: 117, .. }
    ));
    assert!(matches!(
        classify(
            404,
            b"Code: 60, e.displayText() = DB::Exception: Table x.y doesn't exist."
        ),
        Failure::Transient { code: 60, .. }
    ));
    assert!(matches!(
        classify(502, b"bad gateway"),
        Failure::Transient { code: 0, .. }
    ));
}

#[test]
fn schema_names_are_substituted() {
    let c = ClickHouseConfig {
        database: "sec".into(),
        table: "ev".into(),
        access_table: "acc".into(),
        ..ClickHouseConfig::default()
    };
    let s = c.schema();
    assert_eq!(s.len(), 3, "{s:?}");
    assert!(s[0].contains("DATABASE IF NOT EXISTS sec"), "{}", s[0]);
    assert!(s[1].contains("TABLE IF NOT EXISTS sec.ev"), "{}", s[1]);
    assert!(s[2].contains("TABLE IF NOT EXISTS sec.acc"), "{}", s[2]);
    assert!(s.iter().all(|x| !x.contains("--")));
    let mut bad = c.clone();
    bad.table = "ev; DROP".into();
    assert!(bad.validate().is_err());
    bad = c;
    bad.max_buffered_rows = 1;
    assert!(bad.validate().unwrap_err().contains("max_buffered_rows"));
}

#[test]
fn one_url_or_several_and_tls_settings_are_checked() {
    let base = ClickHouseConfig::default();
    assert_eq!(base.url_list(), vec!["http://127.0.0.1:8123".to_string()]);
    base.validate().unwrap();
    let both = ClickHouseConfig {
        url: "http://a:8123".into(),
        urls: vec!["http://b:8123".into()],
        ..base.clone()
    };
    assert!(both.validate().unwrap_err().contains("url and urls"));
    let bad = ClickHouseConfig {
        urls: vec!["http://a:8123".into(), "ftp://b".into()],
        ..base.clone()
    };
    assert!(bad.validate().unwrap_err().starts_with("urls[1]: "));
    let ca_plain = ClickHouseConfig {
        ca_file: Some("/etc/ssl/ca.pem".into()),
        ..base.clone()
    };
    assert!(
        ca_plain
            .validate()
            .unwrap_err()
            .contains("ca_file: needs an https")
    );
    let ca_missing = ClickHouseConfig {
        urls: vec!["https://a:8443".into(), "http://b:8123".into()],
        ca_file: Some("/nonexistent/ca.pem".into()),
        ..base.clone()
    };
    let e = ca_missing.validate().unwrap_err();
    assert!(
        e.starts_with("urls[0]: ") && e.contains("/nonexistent/ca.pem"),
        "{e}"
    );
    let several = ClickHouseConfig {
        urls: vec!["http://a:8123".into(), "http://b:8123".into()],
        ..base
    };
    several.validate().unwrap();
    assert_eq!(several.url_list().len(), 2);
}
