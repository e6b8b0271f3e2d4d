//! Slow clients must not hold origin connections, and request heads an origin could read
//! differently from the rules are refused — against http-front in front of a real nginx
//! origin, whose `stub_status` says how many connections it holds.
//!
//! - A response that fits the response buffer is read whole at once: its origin connection
//!   is free though the client reads nothing, and the client later gets all of it.
//! - A client that never reads a larger response (HTTP/1.1), or opens HTTP/2 streams with a
//!   zero window, releases its origin connections within `send_timeout_ms`, or within seconds
//!   under `send_min_rate_bytes_per_sec`, and is dropped (counted); a slow but steady reader
//!   is not.
//! - An origin's body of one-byte chunks (each with a long chunk extension) is relayed whole,
//!   in bounded memory.
//! - A slow upload is read before the origin is contacted; one that is too slow or too long is
//!   answered 408 and, when it had reached the origin (a body over the buffer), the origin
//!   connection is released. A malformed body never reaches the origin. `Expect: 100-continue`
//!   is answered by http-front.
//! - `Transfer-Encoding` other than one final `chunked`, TRACE, bad request-targets, a URI over
//!   the header budget, single-valued headers sent twice, and headers an origin may trust for
//!   the client's address or the URL it serves.

use std::io::{Read, Write};
use std::time::{Duration, Instant};

use palisade_tests::http::{Front, H1Conn, H2Conn, base_config, frame, http_get_text};
use palisade_tests::net;
use palisade_tests::nginx::Nginx;
use palisade_tests::wait::wait_for;

const ORIGIN: &str = r#"
server {
    listen {LISTEN};
    server_name _;
    underscores_in_headers on;
    root {ROOT};
    location = /nginx_status { stub_status; }
    location = /echo {
        return 200 "xrip=[$http_x_real_ip] xou=[$http_x_original_url] expect=[$http_expect] len=[$content_length] uri=[$uri]\n";
    }
    location /upload { client_body_timeout 60s; proxy_pass http://127.0.0.1:9/; }
    location / { }
}
"#;

const RULES: &str = r#"
[[tenant]]
id = 1
[[tenant.rule]]
name = "no-sqlmap"
action = "deny"
when = [{ attr = "header:x-tool", contains = "sqlmap" }]
[[tenant.rule]]
name = "no-scanner-ua"
action = "deny"
when = [{ attr = "user_agent", contains = "scanner" }]
"#;

/// The size of `/half`: more than one read, less than the default response buffer (1 MiB).
const HALF: usize = 512 * 1024;

struct Setup {
    origin: Nginx,
    front: Front,
    _root: tempfile::TempDir,
}

/// An nginx origin serving `big` (64 MiB) and `small`, and http-front in front of it.
fn setup(server_extra: &str) -> Option<Setup> {
    let root = tempfile::tempdir().expect("root");
    let big = vec![b'x'; 64 << 20];
    std::fs::write(root.path().join("big"), &big).unwrap();
    std::fs::write(root.path().join("small"), b"small\n").unwrap();
    std::fs::write(root.path().join("half"), "y".repeat(HALF)).unwrap();
    let origin = Nginx::start(&ORIGIN.replace("{ROOT}", &root.path().display().to_string()))?;
    let o = origin.addr();
    let extra = server_extra.to_string();
    let front = Front::start(
        |a, m| {
            base_config(a, m, o).replace("workers = 2\n", &format!("workers = 2\n{extra}"))
                + "[rules]\nfile = \"rules.toml\"\n\n[[site]]\nhosts = [\"s.test\"]\nupstream = \"app\"\ntenant = 1\n"
        },
        Some(RULES),
    );
    Some(Setup {
        origin,
        front,
        _root: root,
    })
}

/// A count of the origin's `stub_status` (`"Active connections:"`: connections it holds;
/// `"Writing:"`: those it is sending a response on — a response read whole into
/// http-front's buffer leaves its connection idle in the pool), besides the one asking.
fn origin_count(origin: &Nginx, key: &str) -> u64 {
    let text = http_get_text(origin.addr(), "/nginx_status").unwrap_or_default();
    let n: u64 = text
        .split(key)
        .nth(1)
        .and_then(|t| t.split_whitespace().next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no stub_status from the origin: {text:?}"));
    n.saturating_sub(1)
}

const ACTIVE: &str = "Active connections:";
const WRITING: &str = "Writing:";

fn origin_active(origin: &Nginx) -> u64 {
    origin_count(origin, ACTIVE)
}

/// Waits (bounded) until the origin's `key` count is at most `n`; the count then.
fn wait_count_at_most(origin: &Nginx, key: &str, n: u64, within: Duration) -> u64 {
    let end = Instant::now() + within;
    loop {
        let a = origin_count(origin, key);
        if a <= n || Instant::now() > end {
            return a;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn wait_origin_at_most(origin: &Nginx, n: u64, within: Duration) -> u64 {
    wait_count_at_most(origin, ACTIVE, n, within)
}

fn wait_writing_at_most(origin: &Nginx, n: u64, within: Duration) -> u64 {
    wait_count_at_most(origin, WRITING, n, within)
}

/// Four HTTP/1.1 clients that send `GET path` and read nothing, and an HTTP/2 connection
/// with a zero stream window and four such streams (ids 1, 3, 5, 7).
fn non_readers(
    fa: std::net::SocketAddr,
    src: std::net::Ipv4Addr,
    path: &str,
) -> (Vec<H1Conn>, H2Conn) {
    let mut h1 = Vec::new();
    for _ in 0..4 {
        let mut c = H1Conn::connect(Some(src), fa).unwrap();
        c.send_raw(format!("GET {path} HTTP/1.1\r\nhost: s.test\r\n\r\n").as_bytes())
            .unwrap();
        h1.push(c);
    }
    let mut h2 = H2Conn::connect_with(Some(src), fa, &[(4, 0)], false).unwrap();
    for _ in 0..4 {
        h2.send_request("GET", "s.test", path, &[], true).unwrap();
    }
    (h1, h2)
}

#[test]
fn http_front_reads_a_response_that_fits_whole_and_frees_the_origin_at_once() {
    // A long send timeout: only buffering can free the origin here.
    let Some(Setup {
        origin,
        front,
        _root,
    }) = setup("send_timeout_ms = 60000\n")
    else {
        return;
    };
    let fa = front.addr();
    let src = net::test_ip();
    let (mut h1, mut h2) = non_readers(fa, src, "/half");
    // Every response went through the relay (none was whole in the first read) …
    let relayed = front.wait_metric(
        "http_front_responses_relayed_total",
        8,
        Duration::from_secs(5),
    );
    assert!(relayed >= 8, "relayed {relayed}");
    // … and the origin wrote them all at once though no client read a byte.
    let writing = wait_writing_at_most(&origin, 0, Duration::from_secs(5));
    assert_eq!(
        writing, 0,
        "origin connections held by clients that read nothing"
    );
    // Past the min-rate grace: a buffered response is never judged by the rate.
    std::thread::sleep(Duration::from_millis(2500));
    for limit in ["send_timeout", "send_min_rate", "response_buffer_total"] {
        let series = format!("http_front_limit_hits_total{{limit=\"{limit}\"}}");
        assert_eq!(front.metric(&series), 0, "{series}");
    }
    // The clients then read whole, intact responses.
    let want = "y".repeat(HALF);
    for c in &mut h1 {
        let r = c.read_response().unwrap();
        assert_eq!(r.status, 200);
        assert!(r.body == want, "h1 body of {} bytes", r.body.len());
    }
    for id in [1u32, 3, 5, 7] {
        h2.write_frame(frame::WINDOW_UPDATE, 0, id, &(1u32 << 20).to_be_bytes())
            .unwrap();
    }
    h2.write_frame(frame::WINDOW_UPDATE, 0, 0, &(1u32 << 24).to_be_bytes())
        .unwrap();
    // The four streams' frames interleave: collect each one's body.
    let mut bodies: std::collections::BTreeMap<u32, Vec<u8>> = Default::default();
    let mut ended = std::collections::BTreeSet::new();
    for _ in 0..100_000 {
        if ended.len() == 4 {
            break;
        }
        let f = h2.read_frame().unwrap();
        match f.kind {
            frame::HEADERS => assert_eq!(palisade_tests::http::hpack_status(&f.payload), Some(200)),
            frame::DATA => {
                bodies
                    .entry(f.stream)
                    .or_default()
                    .extend_from_slice(&f.payload);
                // An empty DATA frame (a body's end sent on its own) gives nothing back: a
                // WINDOW_UPDATE of 0 is a PROTOCOL_ERROR (RFC 9113 §6.9).
                if !f.payload.is_empty() {
                    let inc = (f.payload.len() as u32).to_be_bytes();
                    h2.write_frame(frame::WINDOW_UPDATE, 0, 0, &inc).unwrap();
                }
            }
            frame::RST_STREAM | frame::GOAWAY => panic!("{f:?}"),
            _ => {}
        }
        if matches!(f.kind, frame::HEADERS | frame::DATA) && f.flags & frame::END_STREAM != 0 {
            ended.insert(f.stream);
        }
    }
    for id in [1u32, 3, 5, 7] {
        let b = bodies.get(&id).map_or(&[][..], |b| b);
        assert!(b == want.as_bytes(), "h2 stream {id}: {} bytes", b.len());
    }
}

#[test]
fn http_front_streams_past_the_global_response_budget_and_counts_it() {
    // Room for one 512 KiB response in all: the second streams through a small window.
    let Some(Setup {
        origin: _origin,
        front,
        _root,
    }) = setup("send_timeout_ms = 60000\nresponse_buffer_total_bytes = 600000\n")
    else {
        return;
    };
    let fa = front.addr();
    let src = net::test_ip();
    // HTTP/2 with zero windows: the socket buffers cannot swallow what the client does not
    // take (over HTTP/1.1 they may absorb a whole 512 KiB response and free its reservation).
    let mut conns: Vec<H2Conn> = (0..2)
        .map(|_| {
            let mut c = H2Conn::connect_with(Some(src), fa, &[(4, 0)], false).unwrap();
            c.send_request("GET", "s.test", "/half", &[], true).unwrap();
            c
        })
        .collect();
    let over = front.wait_metric(
        "http_front_limit_hits_total{limit=\"response_buffer_total\"}",
        1,
        Duration::from_secs(5),
    );
    assert_eq!(over, 1);
    // The streamed one holds its origin, so the rate judges it; the buffered one is not.
    let slow = front.wait_metric(
        "http_front_limit_hits_total{limit=\"send_min_rate\"}",
        1,
        Duration::from_secs(10),
    );
    assert_eq!(slow, 1);
    let want = "y".repeat(HALF);
    let mut whole = 0;
    for c in &mut conns {
        let _ = c.write_frame(frame::WINDOW_UPDATE, 0, 1, &(1u32 << 20).to_be_bytes());
        let _ = c.write_frame(frame::WINDOW_UPDATE, 0, 0, &(1u32 << 20).to_be_bytes());
        if let Ok(r) = c.read_response(1)
            && r.body == want
        {
            whole += 1;
        }
    }
    assert_eq!(
        whole, 1,
        "the buffered response arrives whole, the streamed one is dropped"
    );
    assert_eq!(
        front.metric("http_front_limit_hits_total{limit=\"send_min_rate\"}"),
        1
    );
}

#[test]
fn http_front_slow_readers_release_origin_connections() {
    // The rate check off: the send timeout alone drops them.
    let Some(Setup {
        origin,
        front,
        _root,
    }) = setup("send_timeout_ms = 1000\nsend_min_rate_bytes_per_sec = 0\n")
    else {
        return;
    };
    let fa = front.addr();
    let src = net::test_ip();
    // Control: a reading client gets the whole body.
    let mut c = H1Conn::connect(Some(src), fa).unwrap();
    let r = c.request("GET", "s.test", "/small", &[], b"").unwrap();
    assert_eq!(
        (r.status, r.body.as_str()),
        (200, "small\n"),
        "{}",
        origin.error_log()
    );

    // Clients that never read a 64 MiB response (larger than the 1 MiB buffer).
    let (mut h1, mut h2) = non_readers(fa, src, "/big");
    let deadline = Instant::now() + Duration::from_secs(3);
    while origin_active(&origin) < 2 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(50));
    }
    // The origin connections go within the send timeout (1 s), and it is counted.
    let left = wait_origin_at_most(&origin, 0, Duration::from_secs(10));
    assert_eq!(
        left, 0,
        "origin connections still held by non-reading clients"
    );
    // Four HTTP/1.1 responses, and at least one HTTP/2 stream (its connection closes with
    // it, ending the other three).
    let hits = front.wait_metric(
        "http_front_limit_hits_total{limit=\"send_timeout\"}",
        5,
        Duration::from_secs(5),
    );
    assert!(hits >= 5, "send_timeout hits {hits}");
    // The clients are dropped: what they hold in buffers would never finish.
    for c in &mut h1 {
        assert!(
            palisade_tests::http::wait_closed(&mut c.stream, Duration::from_secs(10)),
            "an HTTP/1.1 client that read nothing is dropped"
        );
    }
    assert!(
        h2.wait_end(Duration::from_secs(10)).is_some(),
        "the HTTP/2 connection with a stalled stream is dropped"
    );
    assert!(front.metric("http_front_connections_closed_total{cause=\"slow_reader\"}") >= 5);
}

#[test]
fn http_front_drops_a_streamed_response_below_the_min_rate_within_seconds() {
    // The default minimum rate (1,024 B/s) under a send timeout too long to matter.
    let Some(Setup {
        origin,
        front,
        _root,
    }) = setup("send_timeout_ms = 600000\n")
    else {
        return;
    };
    let fa = front.addr();
    let src = net::test_ip();
    // A slow but steady reader of the 64 MiB response (80 KB/s, for 8 s) keeps its origin.
    let steady = std::thread::spawn(move || {
        let mut c = H1Conn::connect(Some(src), fa).unwrap();
        c.send_raw(b"GET /big HTTP/1.1\r\nhost: s.test\r\n\r\n")
            .unwrap();
        c.stream
            .set_read_timeout(Some(Duration::from_millis(500)))
            .unwrap();
        let (mut got, mut closed) = (0usize, false);
        let mut buf = [0u8; 8192];
        let end = Instant::now() + Duration::from_secs(8);
        while Instant::now() < end {
            match c.stream.read(&mut buf) {
                Ok(0) => {
                    closed = true;
                    break;
                }
                Ok(n) => got += n,
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
                Err(_) => {
                    closed = true;
                    break;
                }
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        (got, closed)
    });
    std::thread::sleep(Duration::from_millis(300));
    let t0 = Instant::now();
    let (mut h1, mut h2) = non_readers(fa, src, "/big");
    // Non-readers of a streamed response are dropped within seconds, not the send timeout.
    let hits = front.wait_metric(
        "http_front_limit_hits_total{limit=\"send_min_rate\"}",
        5,
        Duration::from_secs(15),
    );
    assert!(hits >= 5, "send_min_rate hits {hits}");
    let took = t0.elapsed();
    assert!(took < Duration::from_secs(15), "{took:?}");
    // Only the steady reader's response is still being written by the origin.
    let writing = wait_writing_at_most(&origin, 1, Duration::from_secs(5));
    assert!(writing <= 1, "origin writes on {writing} connections");
    // (Each within the min rate's window after its socket buffers filled: 20 s leaves room
    // for a loaded machine, where one took more than 10.)
    for c in &mut h1 {
        assert!(palisade_tests::http::wait_closed(
            &mut c.stream,
            Duration::from_secs(20)
        ));
    }
    assert!(h2.wait_end(Duration::from_secs(20)).is_some());
    let (got, closed) = steady.join().unwrap();
    assert!(
        !closed && got > 200_000,
        "the steady reader was dropped or starved: {got} bytes, closed {closed}"
    );
    // The dropped source's next HTTP/2 connections may open fewer streams (each of its
    // drops halves them, down to 8): another source keeps the configured 128.
    let streams = |src| {
        let c = H2Conn::connect(Some(src), fa).unwrap();
        c.server_settings
            .iter()
            .find(|(id, _)| *id == 3)
            .map(|(_, v)| *v)
    };
    let reduced = streams(src).unwrap_or(128);
    assert!(reduced <= 16, "the slow reader's source: {reduced} streams");
    assert_eq!(streams(net::test_ip()), Some(128), "another source");
    assert!(front.metric("http_front_limit_hits_total{limit=\"slow_reader_streams\"}") >= 1);
    assert_eq!(
        front.metric("http_front_limit_hits_total{limit=\"send_timeout\"}"),
        0
    );
}

/// Sends `head` then `body` at `bytes_per_sec` in small pieces for at most `max`; the response.
fn slow_post(
    fa: std::net::SocketAddr,
    src: std::net::Ipv4Addr,
    head: &str,
    piece: &[u8],
    pause: Duration,
    max: Duration,
) -> (u16, String) {
    let mut c = H1Conn::connect(Some(src), fa).unwrap();
    c.stream
        .set_read_timeout(Some(Duration::from_millis(50)))
        .unwrap();
    c.send_raw(head.as_bytes()).unwrap();
    let end = Instant::now() + max;
    let mut got = Vec::new();
    while Instant::now() < end {
        if c.stream.write_all(piece).is_err() {
            break;
        }
        std::thread::sleep(pause);
        let mut buf = [0u8; 4096];
        match c.stream.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => {
                got.extend_from_slice(&buf[..n]);
                if got.windows(4).any(|w| w == b"\r\n\r\n") {
                    break;
                }
            }
            Err(_) => {}
        }
    }
    c.stream
        .set_read_timeout(Some(Duration::from_secs(5)))
        .unwrap();
    let mut buf = [0u8; 4096];
    if let Ok(n) = c.stream.read(&mut buf) {
        got.extend_from_slice(&buf[..n]);
    }
    let text = String::from_utf8_lossy(&got).to_string();
    let status = text
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    (status, text)
}

#[test]
fn http_front_slow_uploads_never_hold_the_origin() {
    let Some(Setup {
        origin,
        front,
        _root,
    }) = setup(
        "body_buffer_bytes = 4096\nbody_min_rate_bytes_per_sec = 200\nbody_timeout_ms = 6000\n",
    )
    else {
        return;
    };
    let fa = front.addr();
    let src = net::test_ip();

    // A small body sent one byte per 50 ms (20 B/s, under the minimum): buffered, so the
    // origin is never contacted; 408 after the grace period.
    let (s, t) = slow_post(
        fa,
        src,
        "POST /echo?slow-small HTTP/1.1\r\nhost: s.test\r\ncontent-length: 1000\r\n\r\n",
        b"x",
        Duration::from_millis(50),
        Duration::from_secs(8),
    );
    assert_eq!(s, 408, "{t}");
    assert!(
        !origin.access_log().iter().any(|l| l.contains("slow-small")),
        "a buffered slow upload reached the origin: {:?}",
        origin.access_log()
    );
    assert!(front.metric("http_front_limit_hits_total{limit=\"body_min_rate\"}") >= 1);

    // A body over the buffer (4 KiB) streams to the origin: first fast, then stalled. The
    // origin connection goes when the rate is missed.
    let mut c = H1Conn::connect(Some(src), fa).unwrap();
    c.send_raw(b"POST /upload HTTP/1.1\r\nhost: s.test\r\ncontent-length: 100000\r\n\r\n")
        .unwrap();
    c.send_raw(&[b'y'; 8192]).unwrap();
    wait_for(
        "the streamed body to reach the origin",
        Duration::from_secs(3),
        || origin_active(&origin) >= 1,
    );
    let left = wait_origin_at_most(&origin, 0, Duration::from_secs(10));
    assert_eq!(left, 0, "a stalled upload still holds the origin");
    let r = c.read_response().unwrap();
    assert_eq!(r.status, 408, "{r:?}");

    // A burst that would pay for minutes at the minimum rate, then a trickle far under it
    // (a byte every 300 ms): once the body streams, the rate is kept over the last seconds,
    // so the origin connection goes well before body_timeout_ms (6 s) would end it.
    let rate_hits = front.metric("http_front_limit_hits_total{limit=\"body_min_rate\"}");
    let mut c = H1Conn::connect(Some(src), fa).unwrap();
    c.send_raw(b"POST /upload HTTP/1.1\r\nhost: s.test\r\ncontent-length: 100000\r\n\r\n")
        .unwrap();
    c.send_raw(&[b'b'; 16384]).unwrap();
    let burst = Instant::now();
    wait_for(
        "the streamed body to reach the origin",
        Duration::from_secs(3),
        || origin_active(&origin) >= 1,
    );
    let mut released = None;
    for _ in 0..20 {
        std::thread::sleep(Duration::from_millis(300));
        if origin_active(&origin) == 0 {
            released = Some(burst.elapsed());
            break;
        }
        if c.send_raw(b"t").is_err() {
            break;
        }
    }
    let held = released.unwrap_or_else(|| burst.elapsed());
    assert!(
        held < Duration::from_millis(4500),
        "a trickle after a burst held the origin for {held:?}"
    );
    assert!(
        front.metric("http_front_limit_hits_total{limit=\"body_min_rate\"}") > rate_hits,
        "counted as too slow, not as the body timeout"
    );

    // A body that keeps the rate but never ends within body_timeout_ms (6 s): 408.
    let (s, t) = slow_post(
        fa,
        src,
        "POST /echo?too-long HTTP/1.1\r\nhost: s.test\r\ncontent-length: 100000\r\n\r\n",
        &[b'z'; 100],
        Duration::from_millis(250),
        Duration::from_secs(10),
    );
    assert_eq!(s, 408, "{t}");
    assert!(front.metric("http_front_limit_hits_total{limit=\"body_timeout\"}") >= 1);

    // A malformed chunked body: 400, the origin never sees the request.
    let mut c = H1Conn::connect(Some(src), fa).unwrap();
    c.send_raw(
        b"POST /echo?bad-chunks HTTP/1.1\r\nhost: s.test\r\ntransfer-encoding: chunked\r\n\r\n\
          5\r\nhello\r\nzz\r\nxx\r\n0\r\n\r\n",
    )
    .unwrap();
    let r = c.read_response().unwrap();
    assert_eq!(r.status, 400, "{r:?}");
    assert!(!origin.access_log().iter().any(|l| l.contains("bad-chunks")));

    // Expect: 100-continue is answered here; the origin gets the whole body, no expectation.
    let mut c = H1Conn::connect(Some(src), fa).unwrap();
    c.send_raw(
        b"POST /echo HTTP/1.1\r\nhost: s.test\r\ncontent-length: 5\r\nexpect: 100-continue\r\n\r\n",
    )
    .unwrap();
    let interim = c.read_response().unwrap();
    assert_eq!(interim.status, 100, "{interim:?}");
    c.send_raw(b"hello").unwrap();
    let r = c.read_response().unwrap();
    assert_eq!(r.status, 200, "{r:?}");
    assert!(r.body.contains("expect=[] len=[5]"), "{}", r.body);

    // HTTP/2: a stream whose body stalls is answered 408.
    let mut h2 = H2Conn::connect(Some(src), fa).unwrap();
    let id = h2
        .send_request(
            "POST",
            "s.test",
            "/echo?h2-slow",
            &[("content-length", "1000")],
            false,
        )
        .unwrap();
    h2.write_frame(frame::DATA, 0, id, b"abc").unwrap();
    let r = h2.read_response(id).unwrap();
    assert_eq!(r.status, 408);
    assert!(!origin.access_log().iter().any(|l| l.contains("h2-slow")));
    // And a whole HTTP/2 body goes through.
    let id = h2
        .send_request("POST", "s.test", "/echo", &[("content-length", "3")], false)
        .unwrap();
    h2.write_frame(frame::DATA, frame::END_STREAM, id, b"abc")
        .unwrap();
    let r = h2.read_response(id).unwrap();
    assert_eq!(r.status, 200);
    assert!(r.body.contains("len=[3]"), "{}", r.body);
}

#[test]
fn http_front_refuses_heads_an_origin_could_read_otherwise() {
    let Some(Setup {
        origin,
        front,
        _root,
    }) = setup("")
    else {
        return;
    };
    let fa = front.addr();
    let src = net::test_ip();
    let raw = |head: &str| -> (u16, String) {
        let mut c = H1Conn::connect(Some(src), fa).unwrap();
        c.send_raw(head.as_bytes()).unwrap();
        match c.read_response() {
            Ok(r) => (r.status, r.body),
            Err(e) => (0, e.to_string()),
        }
    };
    let cases: &[(&str, u16)] = &[
        (
            "POST /echo HTTP/1.1\r\nhost: s.test\r\ntransfer-encoding: gzip, chunked\r\n\r\n0\r\n\r\n",
            501,
        ),
        (
            "POST /echo HTTP/1.1\r\nhost: s.test\r\ntransfer-encoding: chunked, chunked\r\n\r\n0\r\n\r\n",
            400,
        ),
        ("TRACE /echo HTTP/1.1\r\nhost: s.test\r\n\r\n", 405),
        // A method not in upper case: 400, as nginx answers (an origin that upper-cases it
        // would run the method the rules did not see).
        ("Trace /echo HTTP/1.1\r\nhost: s.test\r\n\r\n", 400),
        (
            "post /echo HTTP/1.1\r\nhost: s.test\r\ncontent-length: 1\r\n\r\nx",
            400,
        ),
        ("GET * HTTP/1.1\r\nhost: s.test\r\n\r\n", 400),
        ("OPTIONS * HTTP/1.1\r\nhost: s.test\r\n\r\n", 400),
        (
            "GET /echo HTTP/1.1\r\nhost: s.test\r\nuser-agent: a\r\nuser-agent: b\r\n\r\n",
            400,
        ),
        (
            "POST /echo HTTP/1.1\r\nhost: s.test\r\ncontent-length: 1\r\ncontent-length: 2\r\n\r\nx",
            400,
        ),
        // Heads hyper reads only in part (it drops the Content-Length): refused as nginx
        // refuses them, in either order, with the same length twice too.
        (
            "POST /echo HTTP/1.1\r\nhost: s.test\r\ncontent-length: 5\r\ntransfer-encoding: chunked\r\n\r\n0\r\n\r\n",
            400,
        ),
        (
            "POST /echo HTTP/1.1\r\nhost: s.test\r\ntransfer-encoding: chunked\r\ncontent-length: 5\r\n\r\n0\r\n\r\n",
            400,
        ),
        (
            "POST /echo HTTP/1.1\r\nhost: s.test\r\ncontent-length: 1\r\ncontent-length: 1\r\n\r\nx",
            400,
        ),
        // A header the rules read, sent twice: every value is matched.
        (
            "GET /echo HTTP/1.1\r\nhost: s.test\r\nx-tool: curl\r\nx-tool: sqlmap\r\n\r\n",
            403,
        ),
        // What nginx refuses (400): an HTTP/1.1 request without Host (also with an
        // absolute-form target), a path climbing above the root.
        ("GET http://s.test/echo?nohost HTTP/1.1\r\n\r\n", 400),
        ("GET /echo HTTP/1.1\r\n\r\n", 400),
        ("GET /../echo HTTP/1.1\r\nhost: s.test\r\n\r\n", 400),
        (
            "GET /x/%2e%2e/../echo HTTP/1.1\r\nhost: s.test\r\n\r\n",
            400,
        ),
    ];
    for (head, want) in cases {
        let (s, b) = raw(head);
        assert_eq!(s, *want, "{head:?}: {b}");
    }
    // Pipelined: requests before an odd head are answered, bodies that look like odd heads are
    // not taken for them, the odd one is refused and the connection closes.
    let chunk = "GET /echo HTTP/1.1\r\ncontent-length: 1\r\ntransfer-encoding: chunked\r\n\r\n";
    let pipelined = format!(
        "POST /echo HTTP/1.1\r\nhost: s.test\r\ncontent-length: {}\r\n\r\n{chunk}\
         POST /echo HTTP/1.1\r\nhost: s.test\r\ntransfer-encoding: chunked\r\n\r\n\
         {:x}\r\n{chunk}\r\n0\r\n\r\n\
         POST /echo?odd HTTP/1.1\r\nhost: s.test\r\ncontent-length: 0\r\ncontent-length: 0\r\n\r\n\
         GET /echo?after HTTP/1.1\r\nhost: s.test\r\n\r\n",
        chunk.len(),
        chunk.len()
    );
    let mut c = H1Conn::connect(Some(src), fa).unwrap();
    c.send_raw(pipelined.as_bytes()).unwrap();
    for want in [200, 200, 400] {
        let r = c.read_response().unwrap();
        assert_eq!(r.status, want, "{}", r.body);
    }
    assert!(
        c.read_response().is_err(),
        "the connection closed after the odd head"
    );
    // A URI over the header budget (32 KiB) is a 414, not a 431.
    let long = format!("/{}", "a".repeat(40_000));
    let (s, b) = raw(&format!("GET {long} HTTP/1.1\r\nhost: s.test\r\n\r\n"));
    assert_eq!(s, 414, "{b}");
    // Headers over the budget are a 431.
    let big = "h".repeat(40_000);
    let (s, b) = raw(&format!(
        "GET /echo HTTP/1.1\r\nhost: s.test\r\nx-big: {big}\r\n\r\n"
    ));
    assert_eq!(s, 431, "{b}");
    // Headers an origin may trust for the client's address or the URL it serves: replaced or
    // stripped, names with '_' dropped.
    let (s, b) = raw(
        "GET /echo HTTP/1.1\r\nhost: s.test\r\nx-real-ip: 6.6.6.6\r\nx-original-url: /admin\r\n\r\n",
    );
    assert_eq!(s, 200, "{b}");
    assert!(b.contains(&format!("xrip=[{src}] xou=[]")), "{b}");
    let (s, b) = raw("GET /echo HTTP/1.1\r\nhost: s.test\r\nx_real_ip: 6.6.6.6\r\n\r\n");
    assert_eq!(s, 200, "{b}");
    assert!(b.contains(&format!("xrip=[{src}]")), "{b}");
    // None of the refused requests reached the origin.
    for l in origin.access_log() {
        assert!(l.starts_with("/echo|/echo|s.test|200"), "origin saw {l}");
    }
    // An absolute-form target without a path reaches the origin as `/?query`, never `?query`.
    // (The origin answers `/` itself, 403 here: what matters is the target it got.)
    let (s, b) = raw("GET http://s.test?abs-empty HTTP/1.1\r\nhost: s.test\r\n\r\n");
    assert_ne!(s, 400, "{b}");
    // (nginx logs after answering: wait for the line.)
    wait_for(
        "the origin's log line for /?abs-empty",
        Duration::from_secs(3),
        || {
            origin
                .access_log()
                .iter()
                .any(|l| l.starts_with("/?abs-empty|"))
        },
    );
}

#[test]
fn http_front_h2_requests_are_whole_before_any_origin_sees_them() {
    let Some(Setup {
        origin,
        front,
        _root,
    }) = setup("h2c = true\n")
    else {
        return;
    };
    let fa = front.addr();
    let src = net::test_ip();
    // The declared length arrives, then more DATA: refused, and the origin never saw it.
    let mut c = H2Conn::connect(Some(src), fa).unwrap();
    let id = c
        .send_request(
            "POST",
            "s.test",
            "/echo?h2-more",
            &[("content-length", "3")],
            false,
        )
        .unwrap();
    c.write_frame(frame::DATA, 0, id, b"abc").unwrap();
    c.write_frame(frame::DATA, 1, id, b"GET /x HTTP/1.1\r\n\r\n")
        .unwrap();
    // A reset of the stream, or an error status.
    if let Ok(r) = c.read_response(id) {
        assert!(r.status >= 400, "{}: {}", r.status, r.body);
    }
    // A length of 0 and the stream left open, then DATA.
    let mut c = H2Conn::connect(Some(src), fa).unwrap();
    let id = c
        .send_request(
            "POST",
            "s.test",
            "/echo?h2-zero",
            &[("content-length", "0")],
            false,
        )
        .unwrap();
    std::thread::sleep(Duration::from_millis(300));
    c.write_frame(frame::DATA, 1, id, b"x").unwrap();
    // A reset of the stream, or an error status.
    if let Ok(r) = c.read_response(id) {
        assert!(r.status >= 400, "{}: {}", r.status, r.body);
    }
    // A method not in upper case.
    let mut c = H2Conn::connect(Some(src), fa).unwrap();
    let id = c
        .send_request("post", "s.test", "/echo?h2-lower", &[], true)
        .unwrap();
    let r = c.read_response(id).expect("an answer");
    assert_eq!(r.status, 400, "{}", r.body);
    // A sound request still goes through, its body whole.
    let mut c = H2Conn::connect(Some(src), fa).unwrap();
    let id = c
        .send_request(
            "POST",
            "s.test",
            "/echo?h2-ok",
            &[("content-length", "3")],
            false,
        )
        .unwrap();
    c.write_frame(frame::DATA, 1, id, b"abc").unwrap();
    let r = c.read_response(id).expect("an answer");
    assert_eq!(r.status, 200, "{}", r.body);
    wait_for(
        "the origin's log line for the sound request",
        Duration::from_secs(3),
        || origin.access_log().iter().any(|l| l.contains("h2-ok")),
    );
    for l in origin.access_log() {
        assert!(
            !l.contains("h2-more") && !l.contains("h2-zero") && !l.contains("h2-lower"),
            "origin saw {l}"
        );
    }
}

/// A slow but steady HTTP/2 reader (128 KiB/s, above the minimum rate) of a streamed
/// response keeps it: the body's progress stalls for seconds while the socket's large send
/// buffer drains (the kernel wakes the writer only when a third of it is free), and the
/// client's TCP acknowledgements show it reads on (it was cut after about 4 MB); and a
/// download longer than the idle timeout is no idle connection (it got a GOAWAY once its
/// response head was that old).
#[test]
fn a_steady_http2_reader_of_a_large_response_keeps_it() {
    let Some(Setup {
        origin: _origin,
        front,
        _root,
    }) = setup("h2c = true\nsend_timeout_ms = 600000\nidle_timeout_ms = 3000\n")
    else {
        return;
    };
    let src = net::test_ip();
    let mut h2 = H2Conn::connect_with(Some(src), front.addr(), &[(4, 1 << 30)], false).unwrap();
    h2.write_frame(frame::WINDOW_UPDATE, 0, 0, &(1u32 << 30).to_be_bytes())
        .unwrap();
    let id = h2.send_request("GET", "s.test", "/big", &[], true).unwrap();
    h2.stream
        .set_read_timeout(Some(Duration::from_secs(3)))
        .unwrap();
    const RATE: f64 = 128.0 * 1024.0;
    let start = Instant::now();
    let mut got = 0usize;
    let mut ended = None;
    while start.elapsed() < Duration::from_secs(10) {
        let f = match h2.read_frame() {
            Ok(f) => f,
            Err(e) => {
                ended = Some(format!("read: {e}"));
                break;
            }
        };
        match f.kind {
            frame::DATA if f.stream == id => got += f.payload.len(),
            frame::RST_STREAM | frame::GOAWAY => {
                ended = Some(format!("{f:?}"));
                break;
            }
            _ => {}
        }
        // Paced: never ahead of RATE.
        let due = Duration::from_secs_f64(got as f64 / RATE);
        if let Some(wait) = due.checked_sub(start.elapsed()) {
            std::thread::sleep(wait);
        }
    }
    assert_eq!(ended, None, "dropped after {got} bytes");
    assert!(got > 1_000_000, "{got} bytes in 10 s");
    for limit in ["send_min_rate", "idle_timeout"] {
        assert_eq!(
            front.metric(&format!("http_front_limit_hits_total{{limit=\"{limit}\"}}")),
            0,
            "{limit}"
        );
    }
}

/// A client whose own application reads slowly (16 KB/s, sixteen times the default minimum
/// rate) keeps its streamed response: its kernel reopens the window in large steps (here
/// about 95 KB every 6 s), so its acknowledgements move seconds apart, and it is judged over
/// a horizon longer than those steps (judged over each 2 s, it was dropped).
#[test]
fn an_application_limited_reader_keeps_its_response() {
    let Some(Setup {
        origin: _origin,
        front,
        _root,
    }) = setup("")
    else {
        return;
    };
    let src = net::test_ip();
    let sock = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).unwrap();
    sock.bind(&std::net::SocketAddr::new(src.into(), 0).into())
        .unwrap();
    sock.connect(&front.addr().into()).unwrap();
    let mut stream: std::net::TcpStream = sock.into();
    stream
        .write_all(b"GET /big HTTP/1.1\r\nhost: s.test\r\n\r\n")
        .unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(5)))
        .unwrap();
    const RATE: f64 = 16.0 * 1024.0;
    let start = Instant::now();
    let (mut got, mut ended) = (0usize, None);
    let mut buf = [0u8; 4096];
    while start.elapsed() < Duration::from_secs(14) {
        match stream.read(&mut buf) {
            Ok(0) => {
                ended = Some("closed".to_string());
                break;
            }
            Ok(n) => got += n,
            Err(e) => {
                ended = Some(format!("read: {e}"));
                break;
            }
        }
        // Paced: never ahead of RATE.
        let due = Duration::from_secs_f64(got as f64 / RATE);
        if let Some(wait) = due.checked_sub(start.elapsed()) {
            std::thread::sleep(wait);
        }
    }
    assert_eq!(ended, None, "dropped after {got} bytes");
    assert_eq!(
        front.metric("http_front_limit_hits_total{limit=\"send_min_rate\"}"),
        0
    );
}

/// One source holds at most an eighth of the response budget (at least one response's
/// buffer): past it, its responses stream through a small window, and the others' are still
/// read whole. Zero-window HTTP/2 streams of one address held the whole budget.
#[test]
fn one_source_holds_a_share_of_the_response_budget_at_most() {
    let Some(Setup {
        origin: _origin,
        front,
        _root,
    }) = setup(
        "h2c = true\nsend_timeout_ms = 60000\nresponse_buffer_bytes = 600000\n\
         response_buffer_total_bytes = 4800000\n",
    )
    else {
        return;
    };
    let fa = front.addr();
    let (greedy, other) = (net::test_ip(), net::test_ip());
    let hold = |src| {
        let mut c = H2Conn::connect_with(Some(src), fa, &[(4, 0)], false).unwrap();
        c.send_request("GET", "s.test", "/half", &[], true).unwrap();
        c
    };
    let _a = hold(greedy);
    let _b = hold(greedy);
    let share = front.wait_metric(
        "http_front_limit_hits_total{limit=\"response_buffer_source\"}",
        1,
        Duration::from_secs(5),
    );
    assert_eq!(share, 1);
    let _c = hold(other);
    std::thread::sleep(Duration::from_millis(500));
    assert_eq!(
        front.metric("http_front_limit_hits_total{limit=\"response_buffer_source\"}"),
        1,
        "another source's response is read whole"
    );
    assert_eq!(
        front.metric("http_front_limit_hits_total{limit=\"response_buffer_total\"}"),
        0
    );
}

/// Reads a request head off `c` (what follows it is left); false when the client went.
fn read_head(c: &mut std::net::TcpStream) -> bool {
    let mut head = Vec::new();
    let mut b = [0u8; 4096];
    while !head.windows(4).any(|w| w == b"\r\n\r\n") {
        match c.read(&mut b) {
            Ok(0) | Err(_) => return false,
            Ok(n) => head.extend_from_slice(&b[..n]),
        }
    }
    true
}

/// An origin that answers each request (eight at most) with `chunks` one-byte chunks of
/// `b'z'`, each with a chunk extension of `ext` bytes, then the last chunk.
fn tiny_chunk_origin(chunks: usize, ext: usize) -> std::net::SocketAddr {
    let l = std::net::TcpListener::bind((net::test_ip(), 0)).unwrap();
    let addr = l.local_addr().unwrap();
    std::thread::spawn(move || {
        for conn in l.incoming().take(8) {
            let Ok(mut c) = conn else { return };
            std::thread::spawn(move || {
                if !read_head(&mut c) {
                    return;
                }
                let one = format!("1;e={}\r\nz\r\n", "x".repeat(ext));
                let batch = one.repeat(64);
                let _ = c.write_all(b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n");
                for _ in 0..chunks / 64 {
                    if c.write_all(batch.as_bytes()).is_err() {
                        return;
                    }
                }
                let _ = c.write_all(b"0\r\n\r\n");
            });
        }
    });
    addr
}

/// One-byte chunks, each with a long extension, to clients that read nothing (a small
/// receive buffer) and to one that reads: http-front's memory stays bounded and the reader
/// gets every byte, gathered from 100,000 pieces. (Each byte was a slice that kept its
/// whole read block alive: an unread response of such chunks held 1.5 GB at the default
/// 1 MiB buffer, nginx 4 MB. That needs more than the kernel's socket buffers to show; the
/// relay's unit test checks that no piece is a slice of the upstream's buffer.)
#[test]
fn an_origins_tiny_chunks_are_relayed_whole_in_bounded_memory() {
    const CHUNKS: usize = 100_032;
    let origin = tiny_chunk_origin(CHUNKS, 500);
    let front = Front::start(
        |a, m| {
            base_config(a, m, origin)
                .replace("workers = 2\n", "workers = 2\nsend_timeout_ms = 60000\n")
                + "[[site]]\nhosts = [\"s.test\"]\nupstream = \"app\"\n"
        },
        None,
    );
    let fa = front.addr();
    let before = palisade_tests::rss_kib(front.pid());
    let src = net::test_ip();
    let mut idle = Vec::new();
    for _ in 0..2 {
        // A small receive buffer: what the kernel takes for the client is soon full.
        let sock =
            socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).unwrap();
        sock.set_recv_buffer_size(4096).unwrap();
        sock.bind(&std::net::SocketAddr::from((src, 0)).into())
            .unwrap();
        sock.connect(&fa.into()).unwrap();
        let mut c = std::net::TcpStream::from(sock);
        c.write_all(b"GET /tiny HTTP/1.1\r\nhost: s.test\r\n\r\n")
            .unwrap();
        idle.push(c);
    }
    // Each relay fills its 64 KiB window (65,536 one-byte pieces read) and waits.
    front.wait_metric(
        "http_front_responses_relayed_total",
        2,
        Duration::from_secs(10),
    );
    let mut grown = 0;
    for _ in 0..10 {
        std::thread::sleep(Duration::from_millis(200));
        grown = grown.max(palisade_tests::rss_kib(front.pid()).saturating_sub(before));
    }
    assert!(
        grown < 64 * 1024,
        "two unread responses grew http-front by {grown} KiB"
    );
    // A client that reads gets every byte.
    let mut c = palisade_tests::http::H1Conn::connect(Some(net::test_ip()), fa).unwrap();
    c.send_raw(b"GET /tiny HTTP/1.1\r\nhost: s.test\r\n\r\n")
        .unwrap();
    let r = c.read_response().unwrap();
    assert_eq!(r.status, 200);
    assert!(
        r.body.len() == CHUNKS && r.body.bytes().all(|b| b == b'z'),
        "{} bytes",
        r.body.len()
    );
    drop(idle);
}

/// An event stream through the relay, in lock step: the origin sends each event only once
/// the client has read the one before, so an event the relay held back (gathering small
/// pieces for more to come) would never be followed — none is. Then the client stops
/// reading while five events come, takes them all at once, and lock step holds again.
#[test]
fn an_event_stream_is_never_held_back_from_a_client_that_keeps_up() {
    use std::sync::mpsc;
    let l = std::net::TcpListener::bind((net::test_ip(), 0)).unwrap();
    let origin = l.local_addr().unwrap();
    let (ack_tx, ack_rx) = mpsc::channel::<()>();
    std::thread::spawn(move || {
        let Ok((mut c, _)) = l.accept() else { return };
        if !read_head(&mut c) {
            return;
        }
        let _ = c.write_all(
            b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n",
        );
        let event = |c: &mut std::net::TcpStream, i: usize| {
            let e = format!("data: event-{i}\n\n");
            c.write_all(format!("{:x}\r\n{e}\r\n", e.len()).as_bytes())
                .is_ok()
        };
        for i in 0..20 {
            // Lock step, but for events 10 to 14, sent while the client does not read.
            if !(10..15).contains(&i)
                && i > 0
                && ack_rx.recv_timeout(Duration::from_secs(10)).is_err()
            {
                return;
            }
            if !event(&mut c, i) {
                return;
            }
            if (10..15).contains(&i) {
                std::thread::sleep(Duration::from_millis(50));
            }
        }
        let _ = c.write_all(b"0\r\n\r\n");
    });
    let front = Front::start(
        |a, m| base_config(a, m, origin) + "[[site]]\nhosts = [\"s.test\"]\nupstream = \"app\"\n",
        None,
    );
    let mut c = palisade_tests::http::connect_from(Some(net::test_ip()), front.addr()).unwrap();
    c.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    c.write_all(b"GET /events HTTP/1.1\r\nhost: s.test\r\n\r\n")
        .unwrap();
    let mut got = Vec::new();
    let mut b = [0u8; 4096];
    let mut wait_for_event = |i: usize, got: &mut Vec<u8>| {
        let want = format!("event-{i}\n");
        while !got.windows(want.len()).any(|w| w == want.as_bytes()) {
            match c.read(&mut b) {
                Ok(n) if n > 0 => got.extend_from_slice(&b[..n]),
                r => panic!(
                    "event {i} held back ({r:?}); got so far: {}",
                    String::from_utf8_lossy(got)
                ),
            }
        }
    };
    for i in 0..10 {
        wait_for_event(i, &mut got);
        if i < 9 {
            ack_tx.send(()).unwrap();
        }
    }
    // Not reading while events 10 to 14 come; then all of them at once.
    std::thread::sleep(Duration::from_millis(600));
    for i in 10..15 {
        wait_for_event(i, &mut got);
    }
    for i in 15..20 {
        ack_tx.send(()).unwrap();
        wait_for_event(i, &mut got);
    }
}

/// Twenty uploads from one address, each declaring 1 MiB and stalling after 60 KiB: they
/// hold what they sent (1.2 MB, past the source's share of the budget: its last ones
/// stream), never what they declared — each reserved its 1 MiB up front, so eight of them
/// spent the 8 MiB budget and every other client's upload streamed to the origin as it came.
/// Another address's 300 KiB upload is still read whole first.
#[test]
fn one_sources_stalled_uploads_hold_what_they_sent_not_what_they_declared() {
    let Some(Setup {
        origin: _origin,
        front,
        _root,
    }) = setup("body_buffer_total_bytes = 8388608\nbody_timeout_ms = 60000\n")
    else {
        return;
    };
    let fa = front.addr();
    let src = net::test_ip();
    let mut stalled = Vec::new();
    for _ in 0..20 {
        let mut c = H1Conn::connect(Some(src), fa).unwrap();
        c.send_raw(b"POST /upload HTTP/1.1\r\nhost: s.test\r\ncontent-length: 1048576\r\n\r\n")
            .unwrap();
        c.send_raw(&vec![b'x'; 60 * 1024]).unwrap();
        stalled.push(c);
    }
    let limit = |l: &str| front.metric(&format!("http_front_limit_hits_total{{limit=\"{l}\"}}"));
    wait_for("the source's share spent", Duration::from_secs(10), || {
        limit("body_buffer_source") >= 1
    });
    let buffered = || front.metric("http_front_request_bodies_total{mode=\"buffered\"}");
    let before = buffered();
    let mut c = H1Conn::connect(Some(net::test_ip()), fa).unwrap();
    let body = vec![b'y'; 300 * 1024];
    c.send_raw(
        format!(
            "POST /upload HTTP/1.1\r\nhost: s.test\r\ncontent-length: {}\r\n\r\n",
            body.len()
        )
        .as_bytes(),
    )
    .unwrap();
    c.send_raw(&body).unwrap();
    let _ = c.read_response();
    assert_eq!(
        buffered(),
        before + 1,
        "another address's upload read whole first"
    );
    assert_eq!(limit("body_buffer_total"), 0, "the budget was never spent");
    drop(stalled);
}
