//! Abusive clients against http-front stay bounded: HTTP/2 rapid reset (a burst, and streams
//! cancelled after they were accepted), slowloris (partial heads, dribbled bytes, a stalled
//! preface, an idle HTTP/2 connection), too many connections from one source, and long-lived
//! connections (request cap and maximum age). Each attack ends with the server still serving
//! others, and each bound hit shows in /metrics.

use std::io::Write;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use palisade_tests::http::{
    Front, H1Conn, H2Conn, H2End, Origin, base_config, connect_from, frame, get, hpack_encode,
    wait_closed,
};
use palisade_tests::net;
use palisade_tests::wait::wait_for;

fn front_with(origin: &Origin, extra: &str) -> Front {
    let o = origin.addr();
    Front::start(
        |a: SocketAddr, m: SocketAddr| {
            format!(
                "{}{extra}\n[[site]]\nhosts = [\"a.test\"]\nupstream = \"app\"\n",
                base_config(a, m, o)
            )
        },
        None,
    )
}

#[test]
fn http_rapid_reset_burst_gets_goaway() {
    let origin = Origin::start();
    let front = front_with(&origin, "");
    let attacker = net::test_ip();
    let mut h2 = H2Conn::connect(Some(attacker), front.addr()).unwrap();
    let block = hpack_encode(&[
        (":method", "GET"),
        (":scheme", "http"),
        (":authority", "a.test"),
        (":path", "/slow/300"),
    ]);
    const STREAMS: u32 = 5000;
    let mut sent = 0;
    let mut id = 1u32;
    for _ in 0..STREAMS {
        let ok = h2
            .write_frame(
                frame::HEADERS,
                frame::END_HEADERS | frame::END_STREAM,
                id,
                &block,
            )
            .is_ok()
            && h2
                .write_frame(frame::RST_STREAM, 0, id, &8u32.to_be_bytes())
                .is_ok();
        if !ok {
            break;
        }
        sent += 1;
        id += 2;
    }
    let end = h2.wait_end(Duration::from_secs(15));
    assert!(
        matches!(end, Some(H2End::GoAway(_)) | Some(H2End::Closed(_))),
        "connection survived {sent} resets: {end:?}"
    );
    let accepted = front.metric("http_front_requests_total{proto=\"http2\"}");
    assert!(
        accepted < u64::from(STREAMS) / 2,
        "{accepted} of {sent} reset streams became requests"
    );
    assert!(
        origin.requests() < 200,
        "{} requests reached the origin",
        origin.requests()
    );
    let hits = front.metric("http_front_limit_hits_total{limit=\"h2_goaway\"}")
        + front.metric("http_front_limit_hits_total{limit=\"reset_flood\"}");
    assert!(hits >= 1, "no bound reported:\n{}", front.log());
    // Others are served, over both protocols.
    let other = net::test_ip();
    assert_eq!(
        get(Some(other), front.addr(), "a.test", "/")
            .unwrap()
            .status,
        200
    );
    assert_eq!(
        H2Conn::connect(Some(other), front.addr())
            .unwrap()
            .get("a.test", "/")
            .unwrap()
            .status,
        200
    );
}

/// Sends streams with `headers` and cancels each once the server has started on it (500 at
/// most), until the connection ends: how many were cancelled, and how it ended.
fn cancel_until_closed(h2: &mut H2Conn, headers: &[(&str, &str)]) -> (u32, Option<H2End>) {
    cancel_streams_until_closed(h2, headers, false)
}

/// As [`cancel_until_closed`]; with `body_open`, each stream a POST whose body (100 bytes
/// declared, 10 sent) never ends before the cancel.
fn cancel_streams_until_closed(
    h2: &mut H2Conn,
    headers: &[(&str, &str)],
    body_open: bool,
) -> (u32, Option<H2End>) {
    let mut cancelled = 0;
    let mut with_length = headers.to_vec();
    with_length.push(("content-length", "100"));
    for _ in 0..500 {
        let sent = match body_open {
            false => h2.send_request("GET", "a.test", "/slow/2000", headers, true),
            true => h2
                .send_request("POST", "a.test", "/slow/2000", &with_length, false)
                .and_then(|id| {
                    h2.write_frame(palisade_tests::http::frame::DATA, 0, id, &[b'x'; 10])
                        .map(|()| id)
                }),
        };
        let Ok(id) = sent else {
            break;
        };
        std::thread::sleep(Duration::from_millis(20));
        if h2.reset(id).is_err() {
            break;
        }
        cancelled += 1;
        if let Some(e) = h2.wait_end(Duration::from_millis(1)) {
            return (cancelled, Some(e));
        }
    }
    (cancelled, h2.wait_end(Duration::from_secs(10)))
}

/// Reset floods seen from 20 premature resets, half the requests, the source blocked a
/// minute.
const RESET_FLOOD: &str = "[http2]\nreset_flood_min = 20\nreset_flood_ratio = 0.5\nreset_flood_block_secs = 60\nmax_pending_accept_reset_streams = 10000\n";

#[test]
fn http_premature_resets_close_and_block_the_source() {
    let origin = Origin::start();
    let front = front_with(&origin, RESET_FLOOD);
    let attacker = net::test_ip();
    let mut h2 = H2Conn::connect(Some(attacker), front.addr()).unwrap();
    // A few honest streams first.
    for _ in 0..3 {
        assert_eq!(h2.get("a.test", "/").unwrap().status, 200);
    }
    // Then streams cancelled once the server has started on them.
    let (cancelled, ended) = cancel_until_closed(&mut h2, &[]);
    assert!(
        matches!(ended, Some(H2End::GoAway(_)) | Some(H2End::Closed(_))),
        "not closed after {cancelled} cancels: {ended:?}"
    );
    let premature = front.metric("http_front_h2_premature_resets_total");
    assert!(
        (20..=40).contains(&premature),
        "premature resets {premature} (cancelled {cancelled})"
    );
    assert_eq!(
        front.metric("http_front_limit_hits_total{limit=\"reset_flood\"}"),
        1
    );
    assert_eq!(
        front.metric("http_front_connections_closed_total{cause=\"reset_flood\"}"),
        1
    );
    assert_eq!(
        front.metric("http_front_escalations_total{by=\"reset_flood\"}"),
        1
    );
    // The source is now blocked at accept; others are served.
    assert!(get(Some(attacker), front.addr(), "a.test", "/").is_err());
    assert_eq!(
        get(Some(net::test_ip()), front.addr(), "a.test", "/")
            .unwrap()
            .status,
        200
    );
}

/// Streams reset while their request body is still coming (HEADERS without END_STREAM, a
/// little DATA, RST_STREAM) are premature resets too: the flood closes the connection and
/// blocks the source. They went uncounted (answered as malformed bodies), and one
/// connection reset about 3,800 streams without a flood being seen.
#[test]
fn resets_of_streams_whose_body_never_ended_are_a_reset_flood_too() {
    let origin = Origin::start();
    let front = front_with(&origin, RESET_FLOOD);
    let attacker = net::test_ip();
    let mut h2 = H2Conn::connect(Some(attacker), front.addr()).unwrap();
    let (cancelled, ended) = cancel_streams_until_closed(&mut h2, &[], true);
    assert!(
        matches!(ended, Some(H2End::GoAway(_)) | Some(H2End::Closed(_))),
        "not closed after {cancelled} cancels: {ended:?}"
    );
    assert_eq!(
        front.metric("http_front_limit_hits_total{limit=\"reset_flood\"}"),
        1
    );
    assert!(get(Some(attacker), front.addr(), "a.test", "/").is_err());
}

/// A client that closes its connection with many requests still waiting on an origin that
/// does not answer reset nothing: it is not a reset flood, and its source is not blocked (a
/// browser leaving a page behind a hung origin did both).
#[test]
fn closing_a_connection_with_requests_open_is_no_reset_flood() {
    let (to, _) = tarpit();
    let front = Front::start(
        |a: SocketAddr, m: SocketAddr| {
            format!(
                "{}[http2]\nreset_flood_min = 20\nreset_flood_ratio = 0.5\nreset_flood_block_secs = 60\n\
                 [[site]]\nhosts = [\"a.test\"]\nupstream = \"app\"\n",
                base_config(a, m, to)
            )
        },
        None,
    );
    let client = net::test_ip();
    for round in 0..4u64 {
        let mut h2 = H2Conn::connect(Some(client), front.addr())
            .unwrap_or_else(|e| panic!("the source is refused after {round} rounds: {e}"));
        for _ in 0..60 {
            h2.send_request("GET", "a.test", "/", &[], true).unwrap();
        }
        wait_for("the requests sent on", Duration::from_secs(10), || {
            front.metric("http_front_requests_total{proto=\"http2\"}") >= 60 * (round + 1)
        });
        std::thread::sleep(Duration::from_millis(200));
        // Half the rounds end with a FIN, half with a TCP reset (a client that exits with
        // unread bytes).
        if round % 2 == 1 {
            socket2::SockRef::from(&h2.stream)
                .set_linger(Some(Duration::ZERO))
                .unwrap();
        }
        drop(h2);
    }
    std::thread::sleep(Duration::from_millis(500));
    assert_eq!(
        front.metric("http_front_limit_hits_total{limit=\"reset_flood\"}"),
        0,
        "{}",
        front.log()
    );
    assert_eq!(
        front.metric("http_front_escalations_total{by=\"reset_flood\"}"),
        0
    );
    assert!(
        H2Conn::connect(Some(client), front.addr()).is_ok(),
        "the source is not blocked"
    );
}

/// An origin that takes connections and requests and never answers; counts the connections
/// it holds open.
fn tarpit() -> (SocketAddr, std::sync::Arc<std::sync::atomic::AtomicUsize>) {
    use std::io::Read;
    use std::sync::atomic::{AtomicUsize, Ordering};
    let l = std::net::TcpListener::bind((net::test_ip(), 0)).unwrap();
    let at = l.local_addr().unwrap();
    let open = std::sync::Arc::new(AtomicUsize::new(0));
    let n = open.clone();
    std::thread::spawn(move || {
        for c in l.incoming().take(5000) {
            let Ok(mut c) = c else { break };
            let n = n.clone();
            n.fetch_add(1, Ordering::SeqCst);
            std::thread::spawn(move || {
                let mut b = [0u8; 4096];
                while matches!(c.read(&mut b), Ok(k) if k > 0) {}
                n.fetch_sub(1, Ordering::SeqCst);
            });
        }
    });
    (at, open)
}

/// A front (two workers, `server` lines added) with the site `hung.test` on a [`tarpit`] and
/// `fine` on an origin that answers (`upstream` lines added to both upstreams); the tarpit's
/// count of connections it holds, and the origin (keep it alive).
fn front_with_a_hung_origin(
    server: &str,
    upstream: &str,
    fine: &str,
) -> (
    Front,
    std::sync::Arc<std::sync::atomic::AtomicUsize>,
    Origin,
) {
    let (hung, held) = tarpit();
    let origin = Origin::start();
    let o = origin.addr();
    let front = Front::start(
        |a: SocketAddr, m: SocketAddr| {
            format!(
                "[server]\nlisten = [\"{a}\"]\nworkers = 2\n{server}\n\n\
                 [metrics]\nlisten = \"{m}\"\n\n\
                 [[upstream]]\nname = \"hung\"\nservers = [\"{hung}\"]\n{upstream}\n\n\
                 [[upstream]]\nname = \"fine\"\nservers = [\"{o}\"]\n{upstream}\n\n\
                 [[site]]\nhosts = [\"hung.test\"]\nupstream = \"hung\"\n\n\
                 [[site]]\nhosts = [\"{fine}\"]\nupstream = \"fine\"\n"
            )
        },
        None,
    );
    (front, held, origin)
}

/// HTTP/2 streams to an origin that never answers hold origin connections within bounds: one
/// source's at `max_upstream_per_source`, all of them at what the descriptor budget gives
/// origins (`max_connections` plus the idle pools), one upstream's at three quarters of that
/// (a healthy upstream is served meanwhile), each bound answered 503 and counted; and once
/// their client connections are gone, their origin connections are closed.
#[test]
fn streams_to_a_hung_origin_hold_origin_connections_within_bounds() {
    use std::sync::atomic::Ordering;
    let (front, held, _fine) = front_with_a_hung_origin(
        "max_connections = 100\nmax_upstream_per_source = 50",
        "pool_max_idle = 2",
        "fine.test",
    );
    let (mut conns, mut conns_h1) = (Vec::new(), Vec::new());
    // One source, four connections of 100 streams each.
    let attacker = net::test_ip();
    for _ in 0..4 {
        let mut h2 = H2Conn::connect(Some(attacker), front.addr()).unwrap();
        for _ in 0..100 {
            h2.send_request("GET", "hung.test", "/", &[], true).unwrap();
        }
        conns.push(h2);
    }
    wait_for("the source's bound hit", Duration::from_secs(10), || {
        front.metric("http_front_limit_hits_total{limit=\"max_upstream_per_source\"}") >= 300
    });
    std::thread::sleep(Duration::from_millis(300));
    assert!(
        held.load(Ordering::SeqCst) <= 50,
        "{} held",
        held.load(Ordering::SeqCst)
    );
    // Three more sources, 60 streams each: the process's bound (100 + 2 x 2 x 2 idle).
    for _ in 0..3 {
        let mut h2 = H2Conn::connect(Some(net::test_ip()), front.addr()).unwrap();
        for _ in 0..60 {
            h2.send_request("GET", "hung.test", "/", &[], true).unwrap();
        }
        conns.push(h2);
    }
    // (The site's own bound, three quarters of max_connections, comes first here.)
    wait_for(
        "the process's or the site's bound hit",
        Duration::from_secs(10),
        || {
            front.metric("http_front_limit_hits_total{limit=\"upstream_connections\"}") > 0
                || front.metric("http_front_limit_hits_total{limit=\"max_requests_in_flight\"}") > 0
        },
    );
    assert!(front.metric("http_front_upstream_connections") <= 108);
    // The hung origin holds three quarters of it at most: the healthy one is served
    // meanwhile, over connections of its own.
    assert!(
        held.load(Ordering::SeqCst) <= 81,
        "{} held",
        held.load(Ordering::SeqCst)
    );
    for _ in 0..5 {
        let mut c = H1Conn::connect(Some(net::test_ip()), front.addr()).unwrap();
        c.send_raw(b"GET /slow/300 HTTP/1.1\r\nHost: fine.test\r\n\r\n")
            .unwrap();
        conns_h1.push(c);
    }
    for c in &mut conns_h1 {
        assert_eq!(
            c.read_response().unwrap().status,
            200,
            "the healthy upstream"
        );
    }
    // The clients go: their streams give the origin up.
    let holding = held.load(Ordering::SeqCst);
    drop(conns);
    wait_for(
        "the origin connections closed",
        Duration::from_secs(10),
        || held.load(Ordering::SeqCst) == 0,
    );
    // Counted where the request sees its connection end (hyper may drop a stream of a
    // connection gone before it does: the origin connection closes then too, uncounted).
    let gone = front.metric("http_front_responses_total{cause=\"client_gone\"}");
    assert!(gone > 0, "{gone} of {holding}");
    // Others are served.
    assert_eq!(
        get(Some(net::test_ip()), front.addr(), "fine.test", "/")
            .unwrap()
            .status,
        200
    );
}

#[test]
fn http_slowloris_is_bounded() {
    let origin = Origin::start();
    let o = origin.addr();
    let front = Front::start(
        |a, m| {
            format!(
                "[server]\nlisten = [\"{a}\"]\nworkers = 2\nheader_read_timeout_ms = 1000\nidle_timeout_ms = 1500\n\
                 max_connections_per_source = 8\n\n[metrics]\nlisten = \"{m}\"\n\n\
                 [[upstream]]\nname = \"app\"\nservers = [\"{o}\"]\n\n[[site]]\nhosts = [\"a.test\"]\nupstream = \"app\"\n"
            )
        },
        None,
    );
    let fa = front.addr();
    let attacker = net::test_ip();

    // 20 connections that send half a request head and stall.
    let mut conns = Vec::new();
    for _ in 0..20 {
        let mut s = connect_from(Some(attacker), fa).unwrap();
        let _ = s.write_all(b"GET / HTTP/1.1\r\nHost: a.test\r\nX-Slow: ");
        conns.push(s);
    }
    // One that dribbles a byte every 100 ms.
    let dribbler = std::thread::spawn(move || {
        let mut s = connect_from(Some(net::test_ip()), fa).unwrap();
        let _ = s.write_all(b"GET / HTTP/1.1\r\n");
        let start = Instant::now();
        while start.elapsed() < Duration::from_secs(20) {
            if s.write_all(b"X").is_err() {
                return true;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        false
    });
    // A stalled HTTP/2 preface, and an HTTP/2 connection that never sends a request.
    let mut preface = connect_from(Some(net::test_ip()), fa).unwrap();
    preface.write_all(b"PRI * HTTP/2.0\r\n").unwrap();
    let mut idle_h2 = H2Conn::connect(Some(net::test_ip()), fa).unwrap();

    // Meanwhile an ordinary client is served.
    assert_eq!(
        get(Some(net::test_ip()), fa, "a.test", "/").unwrap().status,
        200
    );

    for (i, s) in conns.iter_mut().enumerate() {
        assert!(
            wait_closed(s, Duration::from_secs(15)),
            "slow connection {i} still open"
        );
    }
    assert!(
        wait_closed(&mut preface, Duration::from_secs(15)),
        "stalled preface still open"
    );
    assert!(
        matches!(
            idle_h2.wait_end(Duration::from_secs(15)),
            Some(H2End::GoAway(_)) | Some(H2End::Closed(_))
        ),
        "idle HTTP/2 connection still open"
    );
    assert!(
        dribbler.join().unwrap(),
        "dribbling connection still open after 20 s"
    );

    assert!(
        front.metric("http_front_limit_hits_total{limit=\"max_connections_per_source\"}") >= 12
    );
    // The idle HTTP/2 connection too: no request within header_read_timeout_ms.
    assert!(front.metric("http_front_limit_hits_total{limit=\"header_read_timeout\"}") >= 11);
    assert_eq!(
        front.metric("http_front_limit_hits_total{limit=\"idle_timeout\"}"),
        0
    );
    assert_eq!(origin.requests(), 1);
    wait_for("every connection to close", Duration::from_secs(10), || {
        front.metric("http_front_open_connections") == 0
    });
}

#[test]
fn http_long_lived_connections_hit_request_cap_and_max_age() {
    let origin = Origin::start();
    let o = origin.addr();
    let front = Front::start(
        |a, m| {
            format!(
                "[server]\nlisten = [\"{a}\"]\nmax_requests_per_connection = 5\nmax_connection_age_secs = 2\n\n\
                 [metrics]\nlisten = \"{m}\"\n\n[[upstream]]\nname = \"app\"\nservers = [\"{o}\"]\n\n\
                 [[site]]\nhosts = [\"a.test\"]\nupstream = \"app\"\n"
            )
        },
        None,
    );
    let fa = front.addr();
    let src = net::test_ip();

    // HTTP/2: five streams are served, then GOAWAY.
    let mut h2 = H2Conn::connect(Some(src), fa).unwrap();
    for i in 0..5 {
        assert_eq!(h2.get("a.test", &format!("/{i}")).unwrap().status, 200);
    }
    assert!(matches!(
        h2.wait_end(Duration::from_secs(10)),
        Some(H2End::GoAway(_))
    ));

    // HTTP/1.1 keep-alive: five requests, then the connection is closed.
    let mut h1 = H1Conn::connect(Some(src), fa).unwrap();
    for i in 0..5 {
        assert_eq!(
            h1.request("GET", "a.test", &format!("/{i}"), &[], b"")
                .unwrap()
                .status,
            200
        );
    }
    assert!(wait_closed(&mut h1.stream, Duration::from_secs(10)));

    // An idle HTTP/2 connection is closed at its maximum age.
    let mut old = H2Conn::connect(Some(src), fa).unwrap();
    assert_eq!(old.get("a.test", "/").unwrap().status, 200);
    assert!(matches!(
        old.wait_end(Duration::from_secs(15)),
        Some(H2End::GoAway(_))
    ));

    assert_eq!(
        front.metric("http_front_limit_hits_total{limit=\"max_requests_per_connection\"}"),
        2
    );
    assert!(front.metric("http_front_limit_hits_total{limit=\"max_connection_age\"}") >= 1);
    assert_eq!(
        front.metric("http_front_connections_closed_total{cause=\"max_requests\"}"),
        2
    );
}

#[test]
fn http2_hpack_table_size_update_above_settings_is_a_compression_error() {
    let origin = Origin::start();
    let front = front_with(&origin, "");
    let fields = [
        (":method", "GET"),
        (":scheme", "http"),
        (":authority", "a.test"),
        (":path", "/"),
    ];
    let send = |update: &[u8], over_tls_like_split: bool| {
        let mut h2 = H2Conn::connect(Some(net::test_ip()), front.addr()).unwrap();
        // A first request, answered: the GOAWAY must name it as the last stream.
        let ok = h2.get("a.test", "/").unwrap();
        assert_eq!(ok.status, 200);
        let mut block = update.to_vec();
        block.extend(hpack_encode(&fields));
        let f = [
            &[0, 0, block.len() as u8, frame::HEADERS][..],
            &[frame::END_HEADERS | frame::END_STREAM],
            &3u32.to_be_bytes(),
            &block,
        ]
        .concat();
        if over_tls_like_split {
            // The frame in two writes, cut inside the size update.
            h2.stream.write_all(&f[..10]).unwrap();
            std::thread::sleep(Duration::from_millis(50));
            h2.stream.write_all(&f[10..]).unwrap();
        } else {
            h2.stream.write_all(&f).unwrap();
        }
        h2.read_response(3)
    };
    // 4,096 (the SETTINGS value) is allowed, as is shrinking to 0 then back.
    assert_eq!(send(&[0x3f, 0xe1, 0x1f], false).unwrap().status, 200);
    assert_eq!(send(&[0x20, 0x3f, 0xe1, 0x1f], false).unwrap().status, 200);
    // 4,097: GOAWAY COMPRESSION_ERROR (0x9), naming stream 1 as the last one processed.
    for split in [false, true] {
        match send(&[0x3f, 0xe2, 0x1f], split) {
            Err(H2End::GoAway(code)) => assert_eq!(code, 0x9, "split {split}"),
            other => panic!("split {split}: {other:?}"),
        }
    }
    assert!(front.metric("http_front_limit_hits_total{limit=\"h2_goaway\"}") >= 2);
}

/// Frames that carry nothing to serve are bounded per connection, as nginx bounds them: a
/// PRIORITY flood before any request (each frame also grew the fingerprint being gathered)
/// and a WINDOW_UPDATE flood after one each end in GOAWAY ENHANCE_YOUR_CALM, counted; a
/// client making many requests on one connection, with the frames a client sends, is served.
#[test]
fn http2_control_frame_floods_are_cut() {
    let origin = Origin::start();
    let front = front_with(&origin, "");
    let flood = |kind: u8, stream: u32, payload: &[u8], n: usize, first: bool| {
        let mut h2 = H2Conn::connect(Some(net::test_ip()), front.addr()).unwrap();
        if first {
            assert_eq!(h2.get("a.test", "/").unwrap().status, 200);
        }
        let one = [
            &[0, 0, payload.len() as u8, kind, 0][..],
            &stream.to_be_bytes(),
            payload,
        ]
        .concat();
        // Written in bursts; the server may close before the last one.
        for _ in 0..n / 1000 {
            if h2.stream.write_all(&one.repeat(1000)).is_err() {
                break;
            }
        }
        h2.wait_end(Duration::from_secs(10))
    };
    let priority = [0, 0, 0, 1, 16];
    match flood(frame::PRIORITY, 3, &priority, 20_000, false) {
        Some(H2End::GoAway(code)) => assert_eq!(code, 0xb, "ENHANCE_YOUR_CALM"),
        other => panic!("PRIORITY flood: {other:?}"),
    }
    match flood(frame::WINDOW_UPDATE, 0, &1u32.to_be_bytes(), 50_000, true) {
        Some(H2End::GoAway(code)) => assert_eq!(code, 0xb, "ENHANCE_YOUR_CALM"),
        other => panic!("WINDOW_UPDATE flood: {other:?}"),
    }
    // PINGs, which the server acknowledges (its ACKs earn the client nothing).
    match flood(frame::PING, 0, &[7; 8], 20_000, true) {
        Some(H2End::GoAway(code)) => assert_eq!(code, 0xb, "ENHANCE_YOUR_CALM"),
        other => panic!("PING flood: {other:?}"),
    }
    assert!(front.metric("http_front_limit_hits_total{limit=\"h2_control_flood\"}") >= 3);
    // An ordinary client: 300 requests on one connection, with five control frames each
    // (1,500 in all, past the 1,000 every connection has: the rest earned by its requests
    // and the frames answering them).
    let mut h2 = H2Conn::connect(Some(net::test_ip()), front.addr()).unwrap();
    for i in 0..300u32 {
        for _ in 0..2 {
            h2.write_frame(frame::PING, 0, 0, &[i as u8; 8]).unwrap();
            h2.write_frame(frame::WINDOW_UPDATE, 0, 0, &1024u32.to_be_bytes())
                .unwrap();
        }
        h2.write_frame(frame::PRIORITY, 0, 2 * i + 1, &[0, 0, 0, 0, 16])
            .unwrap();
        assert_eq!(h2.get("a.test", "/").unwrap().status, 200, "request {i}");
    }
    assert_eq!(
        front.metric("http_front_limit_hits_total{limit=\"h2_control_flood\"}"),
        3
    );
}

/// At `max_connections` a new client takes the place of an idle connection, as nginx reuses
/// its idle keep-alive connections: the longest idle, one source's pile first (here a source
/// holding twelve connections that never send a byte), idle for a second at least. A
/// connection with a request under way is never taken, and with none idle a new one is
/// refused and counted.
/// Sends `n` requests for `host`, each from an address and connection of its own: those
/// answered at once must be a site bound's 503 with the connection closed (counted and
/// returned), the others are left waiting on their origin in `waiting`.
fn ask_or_wait(front: SocketAddr, host: &str, n: usize, waiting: &mut Vec<H1Conn>) -> usize {
    let mut refused = 0;
    for _ in 0..n {
        let mut c = H1Conn::connect(Some(net::test_ip()), front).unwrap();
        c.send_raw(format!("GET / HTTP/1.1\r\nHost: {host}\r\n\r\n").as_bytes())
            .unwrap();
        c.stream
            .set_read_timeout(Some(Duration::from_millis(300)))
            .unwrap();
        match c.read_response() {
            Ok(r) => {
                assert_eq!(r.status, 503);
                assert!(wait_closed(&mut c.stream, Duration::from_secs(2)), "closed");
                refused += 1;
            }
            Err(_) => waiting.push(c),
        }
    }
    refused
}

/// At `max_connections`, idle connections make room for new clients, never busy ones; and
/// one site whose origin hangs holds three quarters of the places at most.
#[test]
fn a_full_front_makes_room_by_closing_idle_connections_never_busy_ones() {
    use std::sync::atomic::Ordering;
    let (front, held, _origin) = front_with_a_hung_origin(
        "max_connections = 16\nmax_connections_per_source = 12",
        "",
        "a.test",
    );
    let fa = front.addr();
    let wait_held = |n: usize| {
        wait_for(
            "requests at the hung origin",
            Duration::from_secs(10),
            || held.load(Ordering::SeqCst) >= n,
        )
    };
    // A client from an address of its own with a request on the origin that never answers.
    let hang_one = || {
        let mut c = H1Conn::connect(Some(net::test_ip()), fa).unwrap();
        c.send_raw(b"GET / HTTP/1.1\r\nHost: hung.test\r\n\r\n")
            .unwrap();
        c
    };
    // Three requests waiting on an origin that never answers.
    let mut busy = Vec::new();
    for _ in 0..3 {
        busy.push(hang_one());
    }
    wait_held(3);
    // A keep-alive client between its requests.
    let mut keeper = H1Conn::connect(Some(net::test_ip()), fa).unwrap();
    assert_eq!(
        keeper
            .request("GET", "a.test", "/", &[], b"")
            .unwrap()
            .status,
        200
    );
    // One source's twelve connections that never send a byte fill the table.
    let attacker = net::test_ip();
    let mut pile: Vec<_> = (0..12)
        .map(|_| connect_from(Some(attacker), fa).unwrap())
        .collect();
    wait_for("the table full", Duration::from_secs(10), || {
        front.metric("http_front_open_connections") >= 16
    });
    // Connections idle for less than a second are left be (a request may be on its way).
    std::thread::sleep(Duration::from_millis(1200));
    // New clients (who stay) are served, each in the place of one of the pile.
    let mut newcomers = Vec::new();
    for i in 0..8 {
        let mut c = H1Conn::connect(Some(net::test_ip()), fa).unwrap();
        let r = c.request("GET", "a.test", "/", &[], b"");
        assert_eq!(r.map(|r| r.status).ok(), Some(200), "new client {i}");
        newcomers.push(c);
    }
    let closed = pile
        .iter_mut()
        .map(|s| wait_closed(s, Duration::from_millis(200)))
        .filter(|c| *c)
        .count();
    assert!(closed >= 8, "{closed} of the pile closed");
    assert!(front.metric("http_front_connections_closed_total{cause=\"evicted\"}") >= 8);
    // The keep-alive client alone of its source kept its place; the busy ones theirs.
    assert_eq!(
        keeper
            .request("GET", "a.test", "/", &[], b"")
            .unwrap()
            .status,
        200
    );
    assert_eq!(held.load(Ordering::SeqCst), 3);
    // The hung site's requests fill three quarters of the places at most
    // (`max_requests_in_flight`): the rest are answered 503 and their connections closed, so
    // that the other site's new clients are served. (They took every place, and every other
    // site's new client was refused at accept.)
    drop((pile, keeper, newcomers));
    wait_for("the idle ones gone", Duration::from_secs(10), || {
        front.metric("http_front_open_connections") == 3
    });
    let refused = ask_or_wait(fa, "hung.test", 13, &mut busy);
    assert_eq!(refused, 4, "16 asked of a site held to 12");
    wait_held(12);
    assert_eq!(
        front.metric("http_front_limit_hits_total{limit=\"max_requests_in_flight\"}"),
        4
    );
    assert_eq!(
        get(Some(net::test_ip()), fa, "a.test", "/").unwrap().status,
        200
    );
    // Every place busy (the hung site's twelve, four slow requests of the other): a new
    // client is refused, and no request under way is cut.
    let mut slow = Vec::new();
    for _ in 0..4 {
        let mut c = H1Conn::connect(Some(net::test_ip()), fa).unwrap();
        c.send_raw(b"GET /slow/3000 HTTP/1.1\r\nHost: a.test\r\n\r\n")
            .unwrap();
        slow.push(c);
    }
    wait_for("every place taken", Duration::from_secs(10), || {
        front.metric("http_front_open_connections") >= 16
    });
    let before = front.metric("http_front_limit_hits_total{limit=\"max_connections\"}");
    let refused = get(Some(net::test_ip()), fa, "a.test", "/");
    assert!(refused.is_err(), "{:?}", refused.map(|r| r.status));
    assert!(front.metric("http_front_limit_hits_total{limit=\"max_connections\"}") > before);
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(
        held.load(Ordering::SeqCst),
        12,
        "a request under way was cut"
    );
    for c in &mut slow {
        assert_eq!(c.read_response().unwrap().status, 200, "a slow request cut");
    }
}

/// Streams a browser marks as sent on another site's behalf (a page's aborted fetches, by
/// the hundred) still close a flooded connection, but never block its host: a page could
/// have its visitors blocked that way.
#[test]
fn a_reset_flood_of_cross_site_requests_closes_the_connection_but_blocks_nobody() {
    let origin = Origin::start();
    let front = front_with(&origin, RESET_FLOOD);
    let visitor = net::test_ip();
    let mut h2 = H2Conn::connect(Some(visitor), front.addr()).unwrap();
    let mark = [("sec-fetch-site", "cross-site"), ("sec-fetch-mode", "cors")];
    let (_, ended) = cancel_until_closed(&mut h2, &mark);
    assert!(
        matches!(ended, Some(H2End::GoAway(_)) | Some(H2End::Closed(_))),
        "not closed: {ended:?}"
    );
    assert_eq!(
        front.metric("http_front_limit_hits_total{limit=\"reset_flood\"}"),
        1
    );
    assert_eq!(
        front.metric("http_front_escalations_total{by=\"reset_flood\"}"),
        0
    );
    assert_eq!(
        get(Some(visitor), front.addr(), "a.test", "/")
            .unwrap()
            .status,
        200
    );
}

/// A site's place is held while its origin's body comes, not only until its head: an origin
/// that sends its head at once and then a byte a second held every client connection of its
/// site past the site's bound (an idle WebSocket likewise), as a hung origin did before the
/// bound.
#[test]
fn a_sites_bound_holds_while_its_origin_trickles_a_body() {
    use std::io::Read;
    let l = std::net::TcpListener::bind((net::test_ip(), 0)).unwrap();
    let trickle = l.local_addr().unwrap();
    std::thread::spawn(move || {
        for c in l.incoming().take(50) {
            let Ok(mut c) = c else { break };
            std::thread::spawn(move || {
                let mut b = [0u8; 4096];
                let _ = c.read(&mut b);
                let _ = c.write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\n");
                for _ in 0..20 {
                    std::thread::sleep(Duration::from_millis(500));
                    if c.write_all(b"x").is_err() {
                        return;
                    }
                }
            });
        }
    });
    let front = Front::start(
        |a: SocketAddr, m: SocketAddr| {
            format!(
                "[server]\nlisten = [\"{a}\"]\nworkers = 1\n\n[metrics]\nlisten = \"{m}\"\n\n\
                 [[upstream]]\nname = \"slow\"\nservers = [\"{trickle}\"]\n\n\
                 [[site]]\nhosts = [\"slow.test\"]\nupstream = \"slow\"\nmax_requests_in_flight = 2\n"
            )
        },
        None,
    );
    let fa = front.addr();
    let mut held = Vec::new();
    for _ in 0..2 {
        let mut c = H1Conn::connect(Some(net::test_ip()), fa).unwrap();
        c.send_raw(b"GET / HTTP/1.1\r\nHost: slow.test\r\n\r\n")
            .unwrap();
        held.push(c);
    }
    // Both heads (and the first bytes) reach their clients: the origins answer.
    wait_for("both bodies coming", Duration::from_secs(10), || {
        front.metric("http_front_responses_total{cause=\"proxied\"}") >= 2
    });
    let r = get(Some(net::test_ip()), fa, "slow.test", "/").unwrap();
    assert_eq!(r.status, 503, "a third while two bodies trickle");
    assert_eq!(
        front.metric("http_front_limit_hits_total{limit=\"max_requests_in_flight\"}"),
        1
    );
    drop(held);
}

/// Two sites whose origins hang, each within its own bound, together took every place: past
/// seven eighths of `max_connections` for every site's waiting requests, a site takes a
/// place only while it holds few, and a healthy site's quick requests keep their way.
#[test]
fn two_hung_sites_together_leave_room_for_a_healthy_one() {
    use std::sync::atomic::Ordering;
    let (a, held_a) = tarpit();
    let (b, held_b) = tarpit();
    let origin = Origin::start();
    let o = origin.addr();
    let front = Front::start(
        |at: SocketAddr, m: SocketAddr| {
            format!(
                "[server]\nlisten = [\"{at}\"]\nworkers = 1\nmax_connections = 32\n\n\
                 [metrics]\nlisten = \"{m}\"\n\n\
                 [[upstream]]\nname = \"a\"\nservers = [\"{a}\"]\n\n\
                 [[upstream]]\nname = \"b\"\nservers = [\"{b}\"]\n\n\
                 [[upstream]]\nname = \"fine\"\nservers = [\"{o}\"]\n\n\
                 [[site]]\nhosts = [\"a.test\"]\nupstream = \"a\"\n\n\
                 [[site]]\nhosts = [\"b.test\"]\nupstream = \"b\"\n\n\
                 [[site]]\nhosts = [\"c.test\"]\nupstream = \"fine\"\n"
            )
        },
        None,
    );
    let fa = front.addr();
    // Each site alone may hold 24 of the 32 places; every site's together 28; past that a
    // site holds 4 at most.
    let mut kept = Vec::new();
    assert_eq!(ask_or_wait(fa, "a.test", 24, &mut kept), 0);
    assert_eq!(
        ask_or_wait(fa, "b.test", 8, &mut kept),
        4,
        "b past every site's bound"
    );
    wait_for(
        "the requests at the hung origins",
        Duration::from_secs(10),
        || held_a.load(Ordering::SeqCst) == 24 && held_b.load(Ordering::SeqCst) == 4,
    );
    // The healthy site is served (it took every place before: refused at accept).
    for _ in 0..3 {
        assert_eq!(
            get(Some(net::test_ip()), fa, "c.test", "/").unwrap().status,
            200
        );
    }
    assert_eq!(
        front.metric("http_front_limit_hits_total{limit=\"max_requests_in_flight\"}"),
        4
    );
    drop(kept);
}

/// The start of a GET for a.test padded with `lines` fields of 1 KB, not yet ended by its
/// empty line.
fn padded_head(lines: usize) -> Vec<u8> {
    let mut h = b"GET / HTTP/1.1\r\nHost: a.test\r\n".to_vec();
    for _ in 0..lines {
        h.extend_from_slice(b"X-Pad: ");
        h.extend_from_slice(&[b'a'; 991]);
        h.extend_from_slice(b"\r\n");
    }
    h
}

/// A front whose unfinished heads share `budget` bytes (heads and fields up to 64 KiB, a
/// head within 8 s), before `origin`.
fn front_with_head_budget(origin: &Origin, budget: usize) -> Front {
    let o = origin.addr();
    Front::start(
        |a, m| {
            format!(
                "[server]\nlisten = [\"{a}\"]\nworkers = 2\nheader_read_timeout_ms = 8000\n\
                 header_buffer_total_bytes = {budget}\n\n[limits]\nmax_header_bytes = 65536\n\
                 max_header_field_bytes = 65536\n\n[metrics]\nlisten = \"{m}\"\n\n\
                 [[upstream]]\nname = \"app\"\nservers = [\"{o}\"]\n\n[[site]]\nhosts = [\"a.test\"]\nupstream = \"app\"\n"
            )
        },
        None,
    )
}

/// Unfinished HTTP/1.1 heads share one budget (`header_buffer_total_bytes`): connections
/// that each hold 30 KB of a head that never ends fill it, further such heads close their
/// connections (counted), while an ordinary request — its head within the free 8 KiB — is
/// served all the same, and the budget is given back as the heads go.
#[test]
fn unfinished_heads_share_one_budget_and_ordinary_requests_pass() {
    let origin = Origin::start();
    let front = front_with_head_budget(&origin, 120_000);
    let fa = front.addr();
    // 12 connections from 12 addresses, each 30 KB into a head (22 KB past the free part):
    // the budget takes five.
    let mut conns = Vec::new();
    for i in 0..12 {
        let mut s = connect_from(Some(net::test_ip()), fa).unwrap();
        let _ = s.write_all(&padded_head(30));
        conns.push(s);
        if i == 5 {
            wait_for("the budget full", Duration::from_secs(10), || {
                front.metric("http_front_buffered_bytes{what=\"head\"}") > 100_000
            });
        }
    }
    wait_for(
        "heads past the budget refused",
        Duration::from_secs(10),
        || front.metric("http_front_limit_hits_total{limit=\"header_buffer_total\"}") >= 6,
    );
    let held = front.metric("http_front_buffered_bytes{what=\"head\"}");
    assert!(held <= 120_000, "{held} bytes held");
    let closed = conns
        .iter_mut()
        .filter_map(|s| {
            s.set_read_timeout(Some(Duration::from_millis(200))).ok()?;
            let mut b = [0u8; 64];
            // Closed: an end, or a reset — a read that times out is a connection still open.
            let gone = match std::io::Read::read(s, &mut b) {
                Ok(0) => true,
                Err(e) => e.kind() == std::io::ErrorKind::ConnectionReset,
                Ok(_) => false,
            };
            gone.then_some(())
        })
        .count();
    assert!(closed >= 6, "{closed} connections closed");
    // An ordinary request is served meanwhile.
    assert_eq!(
        get(Some(net::test_ip()), fa, "a.test", "/").unwrap().status,
        200
    );
    // The heads time out; what they held is given back.
    drop(conns);
    wait_for("the budget given back", Duration::from_secs(15), || {
        front.metric("http_front_buffered_bytes{what=\"head\"}") == 0
    });
    assert_eq!(origin.requests(), 1);
}

/// An HTTP/2 header block left open (a HEADERS frame whose last CONTINUATION never comes:
/// h2 holds its fragments) counts in the heads' budget as an HTTP/1.1 head does.
#[test]
fn open_http2_header_blocks_count_in_the_heads_budget() {
    let origin = Origin::start();
    let front = front_with_head_budget(&origin, 60_000);
    let fa = front.addr();
    let held = || front.metric("http_front_buffered_bytes{what=\"head\"}");
    // An HTTP/2 header block left open: HEADERS of 30 KB without END_HEADERS.
    let mut open = H2Conn::connect(Some(net::test_ip()), fa).unwrap();
    let pad = "a".repeat(990);
    let mut fields = vec![
        (":method", "GET"),
        (":scheme", "http"),
        (":authority", "a.test"),
        (":path", "/"),
    ];
    fields.extend(std::iter::repeat_n(("x-pad", pad.as_str()), 30));
    let block = hpack_encode(&fields);
    assert!(block.len() > 30_000);
    open.write_frame(frame::HEADERS, frame::END_STREAM, 1, &block[..16_000])
        .unwrap();
    open.write_frame(frame::CONTINUATION, 0, 1, &block[16_000..])
        .unwrap();
    wait_for("the open block charged", Duration::from_secs(5), || {
        held() > 20_000
    });
    // Two more go past the budget: refused, counted.
    let mut second = Vec::new();
    for _ in 0..2 {
        let mut c = H2Conn::connect(Some(net::test_ip()), fa).unwrap();
        let _ = c.write_frame(frame::HEADERS, frame::END_STREAM, 1, &block[..16_000]);
        let _ = c.write_frame(frame::CONTINUATION, 0, 1, &block[16_000..]);
        second.push(c);
    }
    wait_for(
        "the block past the budget refused",
        Duration::from_secs(5),
        || front.metric("http_front_limit_hits_total{limit=\"header_buffer_total\"}") >= 1,
    );
    assert!(held() <= 60_000, "{} held", held());
    // An ordinary request still passes; what was held is given back as they go.
    assert_eq!(
        get(Some(net::test_ip()), fa, "a.test", "/").unwrap().status,
        200
    );
    drop((open, second));
    wait_for("the budget given back", Duration::from_secs(15), || {
        held() == 0
    });
}

/// The heads' budget cannot be filled by a few addresses: each source holds a sixty-fourth
/// of it at most (its further heads refused, counted as `header_buffer_source`), so another
/// client's big head is still served; and a head that arrives whole is parsed at once,
/// never refused — even with no budget at all.
#[test]
fn one_source_holds_a_share_of_the_heads_budget_and_whole_heads_pass() {
    let origin = Origin::start();
    let start = |budget: usize| front_with_head_budget(&origin, budget);
    // 20 MiB: a source's share is 327,680 bytes, some 14 heads of 30 KB (22 KB each past
    // the free part).
    let front = start(20 << 20);
    let fa = front.addr();
    let attacker = net::test_ip();
    let mut conns = Vec::new();
    for _ in 0..20 {
        let mut s = connect_from(Some(attacker), fa).unwrap();
        let _ = s.write_all(&padded_head(30));
        conns.push(s);
    }
    wait_for(
        "the source's share refused",
        Duration::from_secs(10),
        || front.metric("http_front_limit_hits_total{limit=\"header_buffer_source\"}") >= 5,
    );
    let held = front.metric("http_front_buffered_bytes{what=\"head\"}");
    assert!(held <= 327_680, "{held} held by one source");
    // Another client's 12 KB head, sent in two halves: served.
    let mut c = connect_from(Some(net::test_ip()), fa).unwrap();
    let mut big = padded_head(12);
    big.extend_from_slice(b"\r\n");
    let (first, rest) = big.split_at(big.len() / 2);
    c.write_all(first).unwrap();
    std::thread::sleep(Duration::from_millis(100));
    c.write_all(rest).unwrap();
    c.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let mut reply = [0u8; 12];
    std::io::Read::read_exact(&mut c, &mut reply).unwrap();
    assert_eq!(
        &reply,
        b"HTTP/1.1 200",
        "{:?}",
        String::from_utf8_lossy(&reply)
    );
    drop((conns, c, front));
    // No budget at all: a head past the free part is refused while it is unfinished, but one
    // that arrives whole is parsed at once.
    let front = start(0);
    let fa = front.addr();
    let mut c = connect_from(Some(net::test_ip()), fa).unwrap();
    let mut whole = padded_head(12);
    whole.extend_from_slice(b"\r\n");
    c.write_all(&whole).unwrap();
    c.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let mut reply = [0u8; 12];
    std::io::Read::read_exact(&mut c, &mut reply).unwrap();
    assert_eq!(&reply, b"HTTP/1.1 200");
    let mut part = connect_from(Some(net::test_ip()), fa).unwrap();
    let _ = part.write_all(&padded_head(12));
    assert!(
        wait_closed(&mut part, Duration::from_secs(5)),
        "an unfinished 12 KB head with no budget"
    );
}

/// The first records of a ClientHello announcing `announce` bytes, `send` of them sent.
fn stalled_hello(announce: usize, send: usize) -> Vec<u8> {
    let mut msg = vec![
        1,
        (announce >> 16) as u8,
        (announce >> 8) as u8,
        announce as u8,
    ];
    msg.extend_from_slice(&[3, 3]);
    msg.extend_from_slice(&[0x11; 32]);
    msg.extend_from_slice(&[0, 0, 2, 0x13, 1, 1, 0]);
    msg.resize(send, 0);
    let mut wire = Vec::new();
    for part in msg.chunks(16_000) {
        wire.extend_from_slice(&[0x16, 3, 1]);
        wire.extend_from_slice(&(part.len() as u16).to_be_bytes());
        wire.extend_from_slice(part);
    }
    wire
}

/// TLS clients that stall cost what they sent, never what they announce, and within the
/// heads' budget: a hello longer than `tls.max_client_hello_bytes` is refused at its first
/// record (3,000 stalled 48 KB hellos announcing 60 KB held 130 KB each until the handshake
/// timeout, nginx 87 KB), stalled hellos hold the heads' budget — one source its share, past
/// it closed and counted — and a connection that sent nothing holds no TLS session and no
/// serving state (21 KB each, nginx's 0.5 KB); an ordinary client is served throughout.
#[test]
fn stalled_tls_hellos_and_silent_connections_hold_little() {
    if !palisade_tests::have_program("curl") {
        assert!(!palisade_tests::in_ci(), "curl is needed in CI");
        palisade_tests::skipped("curl missing");
        return;
    }
    let ca = palisade_tests::pki::Ca::new();
    let dir = tempfile::tempdir().unwrap();
    ca.leaf(&["a.test"]).write(dir.path(), "a");
    let ca_pem = dir.path().join("ca.pem");
    std::fs::write(&ca_pem, ca.pem()).unwrap();
    let origin = Origin::start();
    let (d, o) = (dir.path().to_path_buf(), origin.addr());
    let front = Front::start(
        |a, m| {
            format!(
                "[server]\nlisten = []\nworkers = 2\nheader_read_timeout_ms = 8000\n\
                 max_connections_per_source = 100\nheader_buffer_total_bytes = 16777216\n\
                 [tls]\nlisten = [\"{a}\"]\ncert = \"{0}/a.crt\"\nkey = \"{0}/a.key\"\n\
                 [metrics]\nlisten = \"{m}\"\n\
                 [[upstream]]\nname = \"app\"\nservers = [\"{o}\"]\n\
                 [[site]]\nhosts = [\"a.test\"]\nupstream = \"app\"\n",
                d.display()
            )
        },
        None,
    );
    let fa = front.addr();
    let served = || palisade_tests::pki::curl_status(fa, "a.test", &ca_pem, &[], "/");

    // Hellos announcing 60 KB: closed at their first record, counted.
    let long = stalled_hello(60_000, 48_000);
    let mut conns: Vec<_> = (0..20)
        .map(|i| {
            let mut s = connect_from(Some(net::test_ip()), fa).unwrap();
            let _ = s.write_all(&long[..if i % 2 == 0 { 9 } else { long.len() }]);
            s
        })
        .collect();
    for (i, s) in conns.iter_mut().enumerate() {
        assert!(
            wait_closed(s, Duration::from_secs(3)),
            "long hello {i} still open"
        );
    }
    // Counted as the connection task ends, just after the close the client saw.
    wait_for("the long hellos counted", Duration::from_secs(5), || {
        front.metric("http_front_limit_hits_total{limit=\"client_hello_bytes\"}") == 20
    });

    // 60 stalled 16 KB hellos from one address: its share of the budget (256 KiB, each
    // holding what it sent past the free 8 KiB) takes about 33; the rest are closed.
    let attacker = net::test_ip();
    let full = stalled_hello(16_300, 16_000);
    let stalled: Vec<_> = (0..60)
        .map(|_| {
            let mut s = connect_from(Some(attacker), fa).unwrap();
            let _ = s.write_all(&full);
            s
        })
        .collect();
    assert_eq!(served(), 200);
    std::thread::sleep(Duration::from_millis(500));
    let closed = stalled
        .iter()
        .filter(|s| {
            use std::io::Read as _;
            s.set_nonblocking(true).unwrap();
            let mut r: &std::net::TcpStream = s;
            !matches!(r.read(&mut [0u8; 64]), Err(e) if e.kind() == std::io::ErrorKind::WouldBlock)
        })
        .count();
    assert!((20..=35).contains(&closed), "{closed} of 60 closed");
    assert_eq!(
        front.metric("http_front_limit_hits_total{limit=\"header_buffer_source\"}"),
        closed as u64
    );
    drop(stalled);
    wait_for("the stalled hellos to go", Duration::from_secs(10), || {
        front.metric("http_front_open_connections") == 0
    });

    // What 1,000 connections from 20 addresses, each sending `first`, hold a connection
    // (bytes), once all are open; they are closed and gone after.
    let sources: Vec<_> = (0..20).map(|_| net::test_ip()).collect();
    let held_each = |first: &[u8]| {
        let before = palisade_tests::rss_kib(front.pid());
        let conns: Vec<_> = (0..1000)
            .map(|i| {
                let mut s = connect_from(Some(sources[i % 20]), fa).unwrap();
                s.write_all(first).unwrap();
                s
            })
            .collect();
        wait_for("the connections open", Duration::from_secs(10), || {
            front.metric("http_front_open_connections") >= 1000
        });
        std::thread::sleep(Duration::from_millis(300));
        let per = palisade_tests::rss_kib(front.pid()).saturating_sub(before) * 1024 / 1000;
        assert_eq!(served(), 200);
        drop(conns);
        wait_for("the connections to go", Duration::from_secs(10), || {
            front.metric("http_front_open_connections") == 0
        });
        per
    };
    // Sending nothing: a few KB each (the socket, a small task).
    let per = held_each(b"");
    assert!(per < 8 * 1024, "{per} B a silent connection");
    // Nine bytes, a hello's header announcing 16 KB: what they sent is held, never the
    // announced length nor a TLS session (35 KB each, nginx 46 KB).
    let per = held_each(&stalled_hello(16_300, 9)[..9]);
    assert!(per < 12 * 1024, "{per} B a nine-byte hello");
    // A client that offers only ALPN `http/1.0` is served (it was refused the handshake;
    // nginx serves it).
    assert_eq!(
        palisade_tests::pki::curl_status(fa, "a.test", &ca_pem, &["--http1.0"], "/"),
        200
    );
    // Plain HTTP to the TLS port: a 400 page that says why, as nginx answers (it got a TLS
    // alert), counted; the origin never sees it.
    let mut s = connect_from(None, fa).unwrap();
    s.write_all(b"GET / HTTP/1.1\r\nHost: a.test\r\n\r\n")
        .unwrap();
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let mut got = Vec::new();
    use std::io::Read as _;
    let _ = s.read_to_end(&mut got);
    let got = String::from_utf8_lossy(&got);
    assert!(
        got.starts_with("HTTP/1.1 400 ")
            && got.contains("plain HTTP request was sent to HTTPS port"),
        "{got}"
    );
    wait_for("the plain request counted", Duration::from_secs(5), || {
        front.metric("http_front_connections_total{event=\"plain_http_on_tls\"}") == 1
    });
}
