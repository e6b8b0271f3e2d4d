//! WebSocket through http-front to a real WebSocket origin (python3-websockets), over
//! HTTP/1.1 (`Upgrade`) and HTTP/2 (RFC 8441's extended CONNECT, from a python3-h2 client):
//! messages both ways, the rules at the upgrade, sites that do not proxy WebSocket, the idle
//! and lifetime bounds, a block closing open WebSockets, and the per-source bound.

use std::io::{BufRead, BufReader};
use std::net::{Ipv4Addr, SocketAddr};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use palisade_tests::http::{Front, H1Conn, base_config};
use palisade_tests::net;
use palisade_tests::wait::wait_for;

const RULES: &str = r#"
[[tenant]]
id = 1
[[tenant.rule]]
name = "no-denied"
action = "deny"
when = [{ attr = "path", prefix = "/denied" }]
[[tenant.rule]]
name = "no-websocket-on-admin"
action = "deny"
when = [{ attr = "path", prefix = "/wsadmin" }, { attr = "header:upgrade", regex = "(?i)websocket" }]
[[tenant.rule]]
name = "no-get-on-wsget"
action = "deny"
when = [{ attr = "path", prefix = "/wsget" }, { attr = "method", exact = "GET" }]
"#;

/// Debian's python3 (the one its python3-websockets and python3-h2 are for).
const PYTHON: &str = "/usr/bin/python3";

fn script(name: &str) -> PathBuf {
    palisade_tests::data_dir().join("ws").join(name)
}

/// True when the Python modules are there (else the test is skipped, loudly).
fn have_modules() -> bool {
    let ok = Command::new(PYTHON)
        .args(["-c", "import websockets, h2"])
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if !ok {
        palisade_tests::skipped("python3-websockets / python3-h2 are not installed");
    }
    ok
}

/// The WebSocket origin, killed on drop.
struct WsOrigin {
    child: Child,
    addr: SocketAddr,
    lines: std::sync::mpsc::Receiver<String>,
}

impl WsOrigin {
    fn start() -> WsOrigin {
        let ip = net::test_ip();
        let port = net::free_port(ip);
        let mut child = Command::new(PYTHON)
            .arg(script("origin.py"))
            .arg(ip.to_string())
            .arg(port.to_string())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("start the WebSocket origin");
        let out = BufReader::new(child.stdout.take().unwrap());
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for l in out.lines().map_while(Result::ok) {
                let _ = tx.send(l);
            }
        });
        let first = rx.recv_timeout(Duration::from_secs(15));
        assert_eq!(
            first.as_deref(),
            Ok("ready"),
            "the WebSocket origin did not start"
        );
        WsOrigin {
            child,
            addr: SocketAddr::from((ip, port)),
            lines: rx,
        }
    }

    /// The paths of the WebSockets it has seen opened so far.
    fn opened(&self) -> Vec<String> {
        self.lines
            .try_iter()
            .filter_map(|l| l.strip_prefix("open ").map(str::to_string))
            .collect()
    }
}

impl Drop for WsOrigin {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// http-front before `origin`: `a.test` proxies WebSocket (tenant 1), `b.test` does not.
fn front(origin: &WsOrigin, server_extra: &str, site_extra: &str) -> Front {
    front_with(origin, server_extra, site_extra, RULES)
}

/// As [`front`], with the rules `rules`.
fn front_with(origin: &WsOrigin, server_extra: &str, site_extra: &str, rules: &str) -> Front {
    let o = origin.addr;
    let (srv, site) = (server_extra.to_string(), site_extra.to_string());
    Front::start(
        move |a, m| {
            let sock = format!("{a}").replace([':', '.'], "_");
            base_config(a, m, o).replace("workers = 2\n", &format!("workers = 2\n{srv}"))
                + &format!(
                    "[rules]\nfile = \"rules.toml\"\n\n[control]\nsocket = \"/tmp/ws-{sock}.sock\"\n\n\
                     [[site]]\nhosts = [\"a.test\"]\nupstream = \"app\"\ntenant = 1\nwebsocket = true\n{site}\n\
                     [[site]]\nhosts = [\"b.test\"]\nupstream = \"app\"\n"
                )
        },
        Some(rules),
    )
}

/// Runs the test client (`h1` or `h2`) against `front` for `host`/`path` from `src`; its lines.
fn client(
    mode: &str,
    front: &Front,
    host: &str,
    path: &str,
    src: Ipv4Addr,
    msgs: &[&str],
) -> Vec<String> {
    client_at(mode, front.addr(), host, path, src, msgs)
}

/// As [`client`], for the front at `fa` (from a thread of its own).
fn client_at(
    mode: &str,
    fa: SocketAddr,
    host: &str,
    path: &str,
    src: Ipv4Addr,
    msgs: &[&str],
) -> Vec<String> {
    let mut child = Command::new(PYTHON)
        .arg(script("client.py"))
        .args([
            mode,
            &fa.ip().to_string(),
            &fa.port().to_string(),
            host,
            path,
            &src.to_string(),
            "--",
        ])
        .args(msgs)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start the WebSocket client");
    let end = Instant::now() + Duration::from_secs(40);
    while child.try_wait().unwrap().is_none() && Instant::now() < end {
        std::thread::sleep(Duration::from_millis(50));
    }
    let _ = child.kill();
    let out = child.wait_with_output().unwrap();
    let lines: Vec<String> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(str::to_string)
        .collect();
    if lines.is_empty() {
        panic!(
            "the {mode} client printed nothing:\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    lines
}

/// A raw WebSocket upgrade request for `path` of `a.test` over HTTP/`version`, sent.
fn raw_upgrade(front: &Front, path: &str, version: &str) -> std::net::TcpStream {
    let mut s = std::net::TcpStream::connect(front.addr()).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    std::io::Write::write_all(
        &mut s,
        format!(
            "GET {path} HTTP/{version}\r\nHost: a.test\r\nUpgrade: websocket\r\nConnection: upgrade\r\n\
             Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n"
        )
        .as_bytes(),
    )
    .unwrap();
    s
}

#[test]
fn websockets_over_http1_and_http2_reach_the_origin_after_the_rules() {
    if !have_modules() {
        return;
    }
    let origin = WsOrigin::start();
    let front = front(&origin, "", "");
    let src = net::test_ip();
    let h1 = client("h1", &front, "a.test", "/chat", src, &["hello", "whoami"]);
    assert_eq!(
        h1,
        ["open", "< hello", &format!("< path=/chat xff={src}")],
        "{}",
        front.log()
    );
    let h2 = client(
        "h2",
        &front,
        "a.test",
        "/chat2?x=1",
        src,
        &["hi over h2", "whoami", "ü"],
    );
    assert_eq!(
        h2,
        [
            "open",
            "< hi over h2",
            &format!("< path=/chat2?x=1 xff={src}"),
            "< ü"
        ],
        "{}",
        front.log()
    );
    // The rules see the upgrade request: a denied path never reaches the origin.
    assert_eq!(
        client("h1", &front, "a.test", "/denied", src, &["x"]),
        ["status 403"]
    );
    assert_eq!(
        client("h2", &front, "a.test", "/denied", src, &["x"]),
        ["status 403"]
    );
    // ... and see an HTTP/2 WebSocket (CONNECT with :protocol) as the GET with Upgrade its
    // origin gets: rules on the method or on Upgrade held over HTTP/1.1 alone.
    for mode in ["h1", "h2"] {
        for path in ["/wsadmin", "/wsget"] {
            assert_eq!(
                client(mode, &front, "a.test", path, src, &["x"]),
                ["status 403"],
                "{mode} {path}"
            );
        }
    }
    // A site that does not proxy WebSocket: HTTP/1.1 reaches the origin as a plain GET (which
    // it refuses), HTTP/2's CONNECT is 405.
    let plain = client("h1", &front, "b.test", "/chat", src, &["x"]);
    assert!(
        plain[0].starts_with("status ") && plain[0] != "status 101",
        "{plain:?}"
    );
    assert_eq!(
        client("h2", &front, "b.test", "/chat", src, &["x"]),
        ["status 405"]
    );
    // An HTTP/2 client that sends a key of its own: the origin gets that one key.
    assert_eq!(
        client("h2key", &front, "a.test", "/chat3", src, &["keyed"]),
        ["open", "< keyed"],
        "{}",
        front.log()
    );
    // An origin that answers 200 without upgrading: to HTTP/2 a 2xx would say the tunnel is
    // open, so it is a bad gateway; HTTP/1.1 gets the 200 as it came.
    assert_eq!(
        client("h2", &front, "a.test", "/plain200", src, &["x"]),
        ["status 502"]
    );
    assert_eq!(
        client("h1", &front, "a.test", "/plain200", src, &["x"]),
        ["status 200"]
    );
    // ... with its body (it came with Content-Length: 0).
    let mut s = raw_upgrade(&front, "/plain200b", "1.1");
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    while !got.ends_with(b"plain\n") {
        match std::io::Read::read(&mut s, &mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => got.extend_from_slice(&buf[..n]),
        }
    }
    let got = String::from_utf8_lossy(&got);
    assert!(
        got.starts_with("HTTP/1.1 200")
            && got.contains("content-length: 6")
            && got.ends_with("\r\n\r\nplain\n"),
        "{got}"
    );
    // A refusal's body past 64 KiB, or shorter than its length said: the head alone, counted.
    for (path, status) in [("/plainbig", "200"), ("/lying", "403")] {
        let mut s = raw_upgrade(&front, path, "1.1");
        let mut got = Vec::new();
        let mut buf = [0u8; 4096];
        while !got.windows(4).any(|w| w == b"\r\n\r\n") {
            match std::io::Read::read(&mut s, &mut buf) {
                Ok(0) | Err(_) => break,
                Ok(n) => got.extend_from_slice(&buf[..n]),
            }
        }
        let got = String::from_utf8_lossy(&got);
        assert!(
            got.starts_with(&format!("HTTP/1.1 {status}")) && got.contains("content-length: 0"),
            "{path}: {got}"
        );
    }
    assert_eq!(
        front.metric("http_front_websockets_total{event=\"refused_body_dropped\"}"),
        2
    );
    // An HTTP/1.0 upgrade request is a plain request (RFC 6455 wants HTTP/1.1): never 101.
    let mut s = raw_upgrade(&front, "/chat10", "1.0");
    let mut head = [0u8; 12];
    std::io::Read::read_exact(&mut s, &mut head).unwrap();
    assert!(
        head.starts_with(b"HTTP/1.") && &head[9..12] != b"101",
        "{}",
        String::from_utf8_lossy(&head)
    );
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(origin.opened(), ["/chat", "/chat2?x=1", "/chat3"]);
    assert_eq!(
        front.metric("http_front_websockets_total{event=\"opened\"}"),
        3
    );
    assert!(front.metric("http_front_websockets_closed_total{cause=\"ended\"}") >= 3);
}

#[test]
fn websockets_are_bounded_by_idle_lifetime_blocks_and_the_per_source_limit() {
    if !have_modules() {
        return;
    }
    let origin = WsOrigin::start();
    let front = front(
        &origin,
        "max_connections_per_source = 2\n",
        "websocket_idle_ms = 1000\nwebsocket_max_secs = 3\n",
    );
    // Idle: nothing either way for 2 s ends it (h1 and h2).
    for mode in ["h1", "h2"] {
        let out = client(
            mode,
            &front,
            "a.test",
            "/idle",
            net::test_ip(),
            &["a", "sleep:2", "b"],
        );
        assert_eq!(out[..2], ["open", "< a"], "{mode}: {out:?}");
        assert!(out[2] == "closed" || out[2] == "timeout", "{mode}: {out:?}");
    }
    assert!(front.metric("http_front_websockets_closed_total{cause=\"idle\"}") >= 2);
    // Lifetime: a busy WebSocket still ends after 3 s.
    let busy: Vec<&str> = std::iter::repeat_n(["m", "sleep:0.4"], 12)
        .flatten()
        .collect();
    let t0 = Instant::now();
    let out = client("h1", &front, "a.test", "/busy", net::test_ip(), &busy);
    assert!(
        out.iter().any(|l| l == "closed" || l == "timeout"),
        "{out:?}"
    );
    assert!(t0.elapsed() < Duration::from_secs(8), "{:?}", t0.elapsed());
    assert!(front.metric("http_front_websockets_closed_total{cause=\"max_age\"}") >= 1);

    // The per-source bound counts open WebSockets; a block closes them.
    let src = net::test_ip();
    let long: Vec<&str> = std::iter::repeat_n(["k", "sleep:0.3"], 8)
        .flatten()
        .collect();
    let runs: Vec<_> = (0..2)
        .map(|i| {
            let long = long.iter().map(|s| s.to_string()).collect::<Vec<_>>();
            let fa = front.addr();
            let mode = if i == 0 { "h1" } else { "h2" };
            std::thread::spawn(move || {
                let msgs: Vec<&str> = long.iter().map(String::as_str).collect();
                client_at(mode, fa, "a.test", "/long", src, &msgs).join("\n")
            })
        })
        .collect();
    std::thread::sleep(Duration::from_millis(1200));
    let third = H1Conn::connect(Some(src), front.addr())
        .and_then(|mut c| c.request("GET", "a.test", "/", &[], b""));
    assert!(
        third.is_err(),
        "a third connection of the source was served: {third:?}"
    );
    assert!(front.metric("http_front_limit_hits_total{limit=\"max_connections_per_source\"}") >= 1);
    let sock = front.log().lines().find_map(|l| {
        l.split("control socket socket=")
            .nth(1)
            .map(|s| s.trim().to_string())
    });
    let sock = sock.expect("the control socket in the log");
    let ok = Command::new(palisade_tests::bin("http-front"))
        .args(["ctl", "-s", &sock, "block", "add", &format!("{src}/32")])
        .status()
        .unwrap()
        .success();
    assert!(ok);
    for r in runs {
        let out = r.join().unwrap();
        assert!(out.contains("< k"), "{out}");
        assert!(
            out.lines().last() == Some("closed"),
            "a block closes the WebSocket: {out}"
        );
    }
    assert!(front.metric("http_front_websockets_closed_total{cause=\"closed_by_front\"}") >= 2);
}

/// A source held for the site's tenant (its escalation, `http = "tenant"`, the default) has
/// its open WebSockets to the tenant's sites closed within a second or two, as a block closes
/// them: the upgrade was ruled once, and the held source kept its tunnels for a day. (A
/// tunnel whose upgrade passed on a clearance stays, as the source's cleared requests pass
/// the hold.)
#[test]
fn a_source_held_for_the_tenant_loses_its_open_websockets() {
    if !have_modules() {
        return;
    }
    let origin = WsOrigin::start();
    let rules = "[[tenant]]\nid = 1\n\
                 escalate = { after = 3, window_secs = 60, block_secs = 60, on = [\"deny\"] }\n\
                 [[tenant.rule]]\nname = \"ok\"\naction = \"allow\"\n\
                 when = [{ attr = \"path\", prefix = \"/wsok\" }]\n\
                 [[tenant.rule]]\nname = \"trip\"\naction = \"deny\"\n\
                 when = [{ attr = \"path\", prefix = \"/trip\" }]\n";
    let front = front_with(&origin, "", "", rules);
    let src = net::test_ip();
    let long: Vec<String> = std::iter::repeat_n(["k", "sleep:0.3"], 30)
        .flatten()
        .map(str::to_string)
        .collect();
    let runs: Vec<_> = ["h1", "h2"]
        .into_iter()
        .map(|mode| {
            let (long, fa) = (long.clone(), front.addr());
            std::thread::spawn(move || {
                let msgs: Vec<&str> = long.iter().map(String::as_str).collect();
                client_at(mode, fa, "a.test", "/long", src, &msgs).join("\n")
            })
        })
        .collect();
    // One an allow rule let through: a hold lets it on, as it lets the source's requests
    // there through (it was closed with the others).
    let allowed = {
        let fa = front.addr();
        let msgs: Vec<String> = std::iter::repeat_n(["k", "sleep:0.3"], 12)
            .flatten()
            .map(str::to_string)
            .collect();
        std::thread::spawn(move || {
            let msgs: Vec<&str> = msgs.iter().map(String::as_str).collect();
            client_at("h1", fa, "a.test", "/wsok", src, &msgs).join("\n")
        })
    };
    std::thread::sleep(Duration::from_millis(1200));
    for _ in 0..3 {
        let r = H1Conn::connect(Some(src), front.addr())
            .and_then(|mut c| c.request("GET", "a.test", "/trip", &[], b""))
            .expect("a denied request");
        assert_eq!(r.status, 403);
    }
    let t0 = Instant::now();
    for r in runs {
        let out = r.join().unwrap();
        assert!(out.contains("< k"), "{out}");
        assert!(
            out.lines().last() == Some("closed"),
            "the hold closes the WebSocket: {out}\n{}",
            front.log()
        );
    }
    // 30 messages 0.3 s apart: a tunnel left open would run 9 s.
    assert!(t0.elapsed() < Duration::from_secs(5), "{:?}", t0.elapsed());
    let out = allowed.join().unwrap();
    assert_eq!(
        out.lines().filter(|l| *l == "< k").count(),
        12,
        "the allowed tunnel runs to its end: {out}"
    );
    assert_eq!(
        front.metric("http_front_websockets_closed_total{cause=\"held\"}"),
        2
    );
}

/// A WebSocket whose upgrade passed a challenge on its clearance ends when the clearance
/// expires: it ran on for `websocket_max_secs` (a day) where every request on the same cookie
/// was challenged again.
#[test]
fn a_websocket_opened_on_a_clearance_ends_with_it() {
    if !have_modules() {
        return;
    }
    let origin = WsOrigin::start();
    let o = origin.addr;
    let rules = "[[tenant]]\nid = 1\n[[tenant.rule]]\nname = \"check\"\naction = \"challenge\"\n\
                 difficulty = 8\nwhen = [{ attr = \"path\", prefix = \"/\" }]\n";
    let front = Front::start(
        move |a, m| {
            base_config(a, m, o)
                + "[rules]\nfile = \"rules.toml\"\n\n[challenge]\nclearance_secs = 4\nsolve_secs = 2\n\n\
                   [[site]]\nhosts = [\"a.test\"]\nupstream = \"app\"\ntenant = 1\nwebsocket = true\n"
        },
        Some(rules),
    );
    let src = net::test_ip();
    let get = |path: &str| {
        H1Conn::connect(Some(src), front.addr())
            .and_then(|mut c| c.request("GET", "a.test", path, &[], b""))
            .unwrap()
    };
    let page = get("/ws");
    assert_eq!(page.status, 403);
    let (t, d) = palisade_tests::http::page_token(&page.body);
    let n = palisade_tests::http::solve(&t, d);
    let issued = Instant::now();
    let verified = get(&format!("/.palisade/challenge?t={t}&n={n}&r=%2Fws"));
    let cookie = verified
        .header("set-cookie")
        .expect("a clearance")
        .split(';')
        .next()
        .unwrap()
        .to_string();
    // From the address the clearance is bound to (its /24).
    let mut s = palisade_tests::http::connect_from(Some(src), front.addr()).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(15))).unwrap();
    std::io::Write::write_all(
        &mut s,
        format!(
            "GET /ws HTTP/1.1\r\nHost: a.test\r\nCookie: {cookie}\r\nUpgrade: websocket\r\n\
             Connection: upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\
             Sec-WebSocket-Version: 13\r\n\r\n"
        )
        .as_bytes(),
    )
    .unwrap();
    let mut head = [0u8; 12];
    std::io::Read::read_exact(&mut s, &mut head).unwrap();
    assert_eq!(&head, b"HTTP/1.1 101", "{}", front.log());
    // Open until the clearance ends (4 s from the page's issue), then closed by the front.
    let mut rest = Vec::new();
    let _ = std::io::Read::read_to_end(&mut s, &mut rest);
    let lasted = issued.elapsed();
    assert!(
        lasted > Duration::from_secs(2) && lasted < Duration::from_secs(8),
        "{lasted:?}"
    );
    wait_for("the close counted", Duration::from_secs(5), || {
        front.metric("http_front_websockets_closed_total{cause=\"clearance_expired\"}") == 1
    });
}

/// An HTTP/2 connection's WebSockets past its first each take a connection place of their
/// own, and every open tunnel holds its origin connection's place among the upstream
/// connections: one connection's streams opened as many origin connections as it had
/// streams (256 from one address with the defaults), counted by no bound and no gauge.
#[test]
fn http2_websockets_count_as_connections_of_their_source_and_hold_origin_places() {
    if !have_modules() {
        return;
    }
    let origin = WsOrigin::start();
    let front = front(&origin, "max_connections_per_source = 3\n", "");
    let fa = front.addr();
    let src = net::test_ip();
    let run =
        std::thread::spawn(move || client_at("h2many", fa, "a.test", "/many", src, &["8", "3"]));
    wait_for("the tunnels open", Duration::from_secs(15), || {
        front.metric("http_front_websockets_total{event=\"opened\"}") >= 3
    });
    std::thread::sleep(Duration::from_millis(500));
    let open = front.metric("http_front_upstream_connections");
    let out = run.join().unwrap();
    let statuses: Vec<&str> = out[0]
        .strip_prefix("statuses ")
        .unwrap_or_else(|| panic!("{out:?}"))
        .split(' ')
        .collect();
    let opened = statuses.iter().filter(|s| **s == "200").count();
    assert_eq!(opened, 3, "{out:?}");
    assert!(
        statuses.iter().filter(|s| **s == "503").count() == 5,
        "{out:?}"
    );
    assert!(front.metric("http_front_limit_hits_total{limit=\"max_connections_per_source\"}") >= 5);
    assert!(open >= 3, "origin connections of open tunnels: {open}");
    // Their places are given back as they end.
    wait_for("the tunnels' places back", Duration::from_secs(10), || {
        front.metric("http_front_upstream_connections") == 0
    });
    let again = client("h2", &front, "a.test", "/again", src, &["x"]);
    assert_eq!(again[..2], ["open", "< x"], "{again:?}");
}
