//! What an origin sends back, through http-front: a response whose framing leaves the
//! connection's end unknown never returns it to the pool (what the origin sent after it would
//! answer the next client), and headers meant for the proxy stop there.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener};
use std::time::Duration;

use palisade_tests::http::{Front, get};
use palisade_tests::net;

/// An origin on loopback that answers each connection's requests by path: `/c` with an
/// HTTP/1.0 chunked response that asks to keep the connection, then, 300 ms later and
/// unasked, a second response (`SMUGGLED`); `/late`, `/n304` and `/n204` with a head that
/// announces a body where none may follow (a transfer coding on a HEAD's and a 304, a length
/// on a 204), then the same unasked response; `/accel` with a header meant for the proxy; anything else with `own`.
fn origin() -> SocketAddr {
    let l = TcpListener::bind((net::test_ip(), 0)).unwrap();
    let at = l.local_addr().unwrap();
    std::thread::spawn(move || {
        for c in l.incoming().take(200) {
            let Ok(mut c) = c else { break };
            std::thread::spawn(move || {
                let _ = c.set_read_timeout(Some(Duration::from_secs(10)));
                let mut buf = Vec::new();
                let mut b = [0u8; 4096];
                loop {
                    let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") else {
                        match c.read(&mut b) {
                            Ok(n) if n > 0 => buf.extend_from_slice(&b[..n]),
                            _ => return,
                        }
                        continue;
                    };
                    let head = String::from_utf8_lossy(&buf[..end]).to_string();
                    buf.drain(..end + 4);
                    let path = head.split(' ').nth(1).unwrap_or("/").to_string();
                    let late = matches!(path.as_str(), "/c" | "/late" | "/n304" | "/n204");
                    let out: &[u8] = match path.as_str() {
                        "/c" => {
                            b"HTTP/1.0 200 OK\r\nConnection: keep-alive\r\n\
                                  Transfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n"
                        }
                        "/accel" => {
                            b"HTTP/1.1 200 OK\r\nX-Accel-Redirect: /internal/secret\r\n\
                                      X-Pad: avoid browser bug\r\nContent-Length: 2\r\n\r\nok"
                        }
                        // Heads that announce a body framing allows none of (a HEAD's
                        // length is the GET's), the body never in the same read.
                        "/late" => b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n",
                        "/n304" => {
                            b"HTTP/1.1 304 Not Modified\r\nTransfer-Encoding: chunked\r\n\r\n"
                        }
                        "/n204" => b"HTTP/1.1 204 No Content\r\nContent-Length: 5\r\n\r\n",
                        // A chunked body whose first size line is no size.
                        "/badchunk" => {
                            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\nhello\r\n0\r\n\r\n"
                        }
                        _ => b"HTTP/1.1 200 OK\r\nContent-Length: 3\r\n\r\nown",
                    };
                    if c.write_all(out).is_err() {
                        return;
                    }
                    if late {
                        std::thread::sleep(Duration::from_millis(300));
                        let _ = c.write_all(
                            b"HTTP/1.1 200 OK\r\nContent-Length: 8\r\nX-Smuggled: yes\r\n\r\nSMUGGLED",
                        );
                    }
                }
            });
        }
    });
    at
}

/// The status of `method path` sent on a connection of its own (read to the end of the head).
fn head_only(front: SocketAddr, method: &str, path: &str) -> u16 {
    let mut c = palisade_tests::http::connect_from(Some(net::test_ip()), front).unwrap();
    c.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    c.write_all(
        format!("{method} {path} HTTP/1.1\r\nhost: a.test\r\nconnection: close\r\n\r\n").as_bytes(),
    )
    .unwrap();
    let mut got = Vec::new();
    let mut b = [0u8; 1024];
    while !got.windows(4).any(|w| w == b"\r\n\r\n") {
        match c.read(&mut b) {
            Ok(n) if n > 0 => got.extend_from_slice(&b[..n]),
            _ => break,
        }
    }
    String::from_utf8_lossy(&got)
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0)
}

#[test]
fn an_origin_cannot_answer_another_clients_request_nor_show_it_proxy_headers() {
    let o = origin();
    let front = Front::start(
        |a: SocketAddr, m: SocketAddr| {
            format!(
                "[server]\nlisten = [\"{a}\"]\nworkers = 1\n\n[metrics]\nlisten = \"{m}\"\n\n\
                 [[upstream]]\nname = \"app\"\nservers = [\"{o}\"]\n\n\
                 [[site]]\nhosts = [\"a.test\"]\nupstream = \"app\"\n"
            )
        },
        None,
    );
    for _ in 0..3 {
        let r = get(Some(net::test_ip()), front.addr(), "a.test", "/c").unwrap();
        assert_eq!((r.status, r.body.as_str()), (200, "hello"));
        // Another client at once, and once the unasked response came: its own answer.
        for wait in [0, 400] {
            std::thread::sleep(Duration::from_millis(wait));
            let r = get(Some(net::test_ip()), front.addr(), "a.test", "/next").unwrap();
            assert_eq!((r.status, r.body.as_str()), (200, "own"), "after {wait} ms");
        }
    }
    // A body announced where none may follow: the connection is not pooled, so whatever the
    // origin sends late answers nobody.
    // A malformed chunked body the first read holds: 502 before any head, as nginx answers
    // (the client got a 200 and a cut connection).
    assert_eq!(head_only(front.addr(), "GET", "/badchunk"), 502);
    for (method, path, status) in [
        ("HEAD", "/late", 200),
        ("GET", "/n304", 304),
        ("GET", "/n204", 204),
    ] {
        for wait in [0, 400] {
            assert_eq!(
                head_only(front.addr(), method, path),
                status,
                "{method} {path}"
            );
            std::thread::sleep(Duration::from_millis(wait));
            let r = get(Some(net::test_ip()), front.addr(), "a.test", "/next").unwrap();
            assert_eq!(
                (r.status, r.body.as_str()),
                (200, "own"),
                "{method} {path}, next after {wait} ms"
            );
        }
    }
    let r = get(Some(net::test_ip()), front.addr(), "a.test", "/accel").unwrap();
    assert_eq!((r.status, r.body.as_str()), (200, "ok"));
    let shown: Vec<_> = r
        .headers
        .iter()
        .filter(|(k, _)| k.starts_with("x-accel") || k == "x-pad")
        .collect();
    assert!(shown.is_empty(), "{shown:?}");
}
