//! http-front proxies to a real origin over HTTP/1.1 and HTTP/2 (h2c), sets the forwarding
//! headers, logs sampled requests in their normalised shape, speaks h2c to an upstream, serves
//! TLS with ALPN, and refuses oversized requests before they reach the origin.

use std::time::{Duration, Instant};

use palisade_tests::http::{Front, H1Conn, H2Conn, H2End, Origin, base_config, get};
use palisade_tests::{have_program, in_ci, net, skipped};

fn site(host: &str, extra: &str) -> String {
    format!("[[site]]\nhosts = [\"{host}\"]\nupstream = \"app\"\n{extra}\n")
}

/// Waits (bounded) until the file has at least `n` lines; its text.
fn wait_lines(path: &std::path::Path, n: usize) -> String {
    let end = Instant::now() + Duration::from_secs(15);
    loop {
        let text = std::fs::read_to_string(path).unwrap_or_default();
        if text.lines().count() >= n || Instant::now() > end {
            return text;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn json_number(line: &str, key: &str) -> Option<f64> {
    let at = line.find(&format!("\"{key}\":"))? + key.len() + 3;
    let rest = &line[at..];
    let end = rest.find([',', '}']).unwrap_or(rest.len());
    rest[..end].parse().ok()
}

#[test]
fn http_proxies_http1_and_http2_with_forwarding_headers_and_access_logs() {
    let origin = Origin::start();
    let front = Front::start(
        |a, m| {
            format!(
                "{}[access_log]\noutput = \"file:access.jsonl\"\nsample_rate = 1.0\n\n{}",
                base_config(a, m, origin.addr()),
                site("site.test", "")
            )
        },
        None,
    );
    let src = net::test_ip();

    // HTTP/1.1: two requests on one keep-alive connection; a spoofed X-Forwarded-For is replaced.
    let mut c = H1Conn::connect(Some(src), front.addr()).unwrap();
    let r = c
        .request(
            "GET",
            "Site.Test",
            "/a?b=1",
            &[("x-forwarded-for", "6.6.6.6"), ("user-agent", "e2é/1")],
            b"",
        )
        .unwrap();
    assert_eq!(r.status, 200, "{r:?}");
    assert!(r.body.starts_with("GET /a?b=1 HTTP/1.1\n"), "{}", r.body);
    assert!(
        r.body.contains(&format!("x-forwarded-for: {src}\n")),
        "{}",
        r.body
    );
    assert!(!r.body.contains("6.6.6.6"), "{}", r.body);
    assert!(
        r.body
            .contains(&format!("forwarded: for={src};proto=http\n")),
        "{}",
        r.body
    );
    assert!(r.body.contains("x-forwarded-proto: http\n"), "{}", r.body);
    // The upstream gets the host the site was chosen by, normalised.
    assert!(r.body.contains("host: site.test\n"), "{}", r.body);
    assert_eq!(r.header("x-origin"), Some("yes"));
    let r = c
        .request("POST", "site.test", "/upload", &[], &[b'x'; 100_000])
        .unwrap();
    assert_eq!(r.status, 200, "{r:?}");
    assert!(r.body.contains("body-bytes: 100000\n"), "{}", r.body);

    // HTTP/2 by prior knowledge, several streams on one connection.
    let mut h2 = H2Conn::connect(Some(src), front.addr()).unwrap();
    for i in 0..3 {
        let r = h2.get("site.test", &format!("/h2/{i}")).unwrap();
        assert_eq!(r.status, 200);
        assert!(
            r.body.starts_with(&format!("GET /h2/{i} HTTP/1.1\n")),
            "{}",
            r.body
        );
        assert!(r.body.contains("host: site.test\n"), "{}", r.body);
        assert!(
            r.body.contains(&format!("x-forwarded-for: {src}\n")),
            "{}",
            r.body
        );
    }
    // HEAD over HTTP/2 to an answer of ours (an unknown host's 421): no DATA (its body was
    // sent, a protocol error to curl and h2 health checks).
    let id = h2
        .send_request("HEAD", "nope.test", "/", &[], true)
        .unwrap();
    let r = h2.read_response(id).unwrap();
    assert_eq!((r.status, r.body.as_str()), (421, ""));

    // An unknown Host never reaches the origin.
    assert_eq!(
        get(Some(src), front.addr(), "nope.test", "/")
            .unwrap()
            .status,
        421
    );
    assert_eq!(origin.requests(), 5);

    assert_eq!(
        front.metric("http_front_requests_total{proto=\"http2\"}"),
        4
    );
    assert!(front.metric("http_front_requests_total{proto=\"http1\"}") >= 3);
    assert_eq!(
        front.metric("http_front_verdicts_total{action=\"no_rules\"}"),
        5
    );
    assert_eq!(
        front.metric("http_front_responses_total{cause=\"proxied\"}"),
        5
    );
    assert_eq!(
        front.metric("http_front_responses_total{cause=\"unknown_host\"}"),
        2
    );

    // Access records: every field normalised.
    let text = wait_lines(&front.dir().join("access.jsonl"), 5);
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 5, "{text}");
    let first = lines
        .iter()
        .find(|l| l.contains("/a?b=1"))
        .expect("record of /a?b=1");
    assert!(
        first.starts_with("{\"kind\":\"http_front.access\",\"timestamp\":\""),
        "{first}"
    );
    assert!(
        first.contains("\"url\":\"http://site.test/a?b=1\""),
        "{first}"
    );
    assert!(first.contains(&format!("\"client\":\"{src}\"")), "{first}");
    assert!(first.contains("\"status\":200"), "{first}");
    assert!(first.contains("\"method\":\"GET\""), "{first}");
    assert!(first.contains("\"user_agent\":\"e2é/1\""), "{first}");
    let ts = &first[first.find("\"timestamp\":\"").unwrap() + 13..][..24];
    assert!(
        ts.len() == 24 && &ts[4..5] == "-" && &ts[10..11] == "T" && ts.ends_with('Z'),
        "{ts}"
    );
    assert!(json_number(first, "ts_ms").unwrap() > 1.5e12, "{first}");
    for l in &lines {
        assert!(json_number(l, "duration_ms").unwrap() >= 0.0, "{l}");
    }
    assert_eq!(
        lines
            .iter()
            .filter(|l| l.contains("\"proto\":\"HTTP/2\""))
            .count(),
        3,
        "{text}"
    );
    assert!(
        lines
            .iter()
            .any(|l| l.contains("\"method\":\"POST\"") && l.contains("\"request_bytes\":100000")),
        "{text}"
    );
    // An HTTP/1.0 request is logged as one (it was HTTP/1.1, the connection's protocol).
    let mut c = H1Conn::connect(Some(src), front.addr()).unwrap();
    c.send_raw(b"GET /ten HTTP/1.0\r\nHost: site.test\r\n\r\n")
        .unwrap();
    assert_eq!(c.read_response().unwrap().status, 200);
    let text = wait_lines(&front.dir().join("access.jsonl"), 6);
    assert!(
        text.lines()
            .any(|l| l.contains("/ten") && l.contains("\"proto\":\"HTTP/1.0\"")),
        "{text}"
    );
}

#[test]
fn http_h2c_upstream_behind_a_second_front() {
    let origin = Origin::start();
    let inner = Front::start(
        |a, m| {
            format!(
                "{}[forwarded]\ntrust_incoming = true\n\n{}",
                base_config(a, m, origin.addr()),
                site("site.test", "")
            )
        },
        None,
    );
    let inner_addr = inner.addr();
    let outer = Front::start(
        |a, m| {
            format!(
                "[server]\nlisten = [\"{a}\"]\n[metrics]\nlisten = \"{m}\"\n\n[[upstream]]\nname = \"inner\"\n\
                 servers = [\"{inner_addr}\"]\nprotocol = \"h2c\"\n\n[[site]]\nhosts = [\"site.test\"]\nupstream = \"inner\"\n"
            )
        },
        None,
    );
    let src = net::test_ip();
    for i in 0..3 {
        let r = get(Some(src), outer.addr(), "site.test", &format!("/chain/{i}")).unwrap();
        assert_eq!(r.status, 200, "{r:?}");
        assert!(
            r.body.contains(&format!("x-forwarded-for: {src}, 127.")),
            "{}",
            r.body
        );
        assert!(r.body.contains("host: site.test\n"), "{}", r.body);
    }
    assert_eq!(
        inner.metric("http_front_requests_total{proto=\"http2\"}"),
        3
    );
    assert_eq!(origin.requests(), 3);
}

#[test]
fn http_oversized_requests_are_refused_before_the_origin() {
    let origin = Origin::start();
    let front = Front::start(
        |a, m| {
            format!(
                "{}[limits]\nmax_header_bytes = 4096\nmax_uri_bytes = 256\nmax_body_bytes = 1000\n\n{}",
                base_config(a, m, origin.addr()),
                site("site.test", "")
            )
        },
        None,
    );
    let src = net::test_ip();
    let big = "x".repeat(8000);

    let mut c = H1Conn::connect(Some(src), front.addr()).unwrap();
    let r = c
        .request("GET", "site.test", "/", &[("x-big", &big)], b"")
        .unwrap();
    assert_eq!(r.status, 431, "{r:?}");

    let long = format!("/{}", "a".repeat(300));
    assert_eq!(
        get(Some(src), front.addr(), "site.test", &long)
            .unwrap()
            .status,
        414
    );

    let mut c = H1Conn::connect(Some(src), front.addr()).unwrap();
    let r = c
        .request("POST", "site.test", "/up", &[], &[b'y'; 5000])
        .unwrap();
    assert_eq!(r.status, 413, "{r:?}");

    // Chunked (no Content-Length): refused when the limit is reached while streaming.
    let mut c = H1Conn::connect(Some(src), front.addr()).unwrap();
    let mut req =
        b"POST /up HTTP/1.1\r\nhost: site.test\r\ntransfer-encoding: chunked\r\n\r\n".to_vec();
    for _ in 0..5 {
        req.extend_from_slice(b"3e8\r\n");
        req.extend_from_slice(&[b'z'; 1000]);
        req.extend_from_slice(b"\r\n");
    }
    req.extend_from_slice(b"0\r\n\r\n");
    c.send_raw(&req).unwrap();
    let r = c.read_response().unwrap();
    assert_eq!(r.status, 413, "{r:?}");

    // HTTP/2: a header list over the limit never becomes a request.
    let mut h2 = H2Conn::connect(Some(src), front.addr()).unwrap();
    let id = h2
        .send_request("GET", "site.test", "/", &[("x-big", &big)], true)
        .unwrap();
    match h2.read_response(id) {
        Ok(r) => assert_eq!(r.status, 431, "{r:?}"),
        Err(H2End::Reset(_)) | Err(H2End::GoAway(_)) | Err(H2End::Closed(_)) => {}
    }

    assert_eq!(origin.requests(), 0, "nothing oversized reached the origin");
    assert!(front.metric("http_front_limit_hits_total{limit=\"max_header_bytes\"}") >= 1);
    assert_eq!(
        front.metric("http_front_limit_hits_total{limit=\"max_uri_bytes\"}"),
        1
    );
    assert_eq!(
        front.metric("http_front_limit_hits_total{limit=\"max_body_bytes\"}"),
        2
    );

    // Ordinary requests still pass.
    assert_eq!(
        get(Some(src), front.addr(), "site.test", "/ok")
            .unwrap()
            .status,
        200
    );
    assert_eq!(origin.requests(), 1);
}

#[test]
fn by_default_what_nginx_refuses_for_size_never_reaches_the_origin() {
    // nginx's defaults: a header field must fit its 8 KiB header buffer
    // (large_client_header_buffers 4 8k), a body 1 MiB (client_max_body_size 1m).
    let origin = Origin::start();
    let front = Front::start(
        |a, m| {
            format!(
                "{}{}",
                base_config(a, m, origin.addr()),
                site("site.test", "")
            )
        },
        None,
    );
    let src = net::test_ip();
    // One field of 9,000 bytes (the whole head well under max_header_bytes): 431, h1 and h2.
    let field = "x".repeat(9000);
    let mut c = H1Conn::connect(Some(src), front.addr()).unwrap();
    let r = c
        .request("GET", "site.test", "/", &[("cookie", &field)], b"")
        .unwrap();
    assert_eq!(r.status, 431, "{r:?}");
    let mut h2 = H2Conn::connect(Some(src), front.addr()).unwrap();
    let id = h2
        .send_request("GET", "site.test", "/", &[("x-long", &field)], true)
        .unwrap();
    let r = h2.read_response(id).expect("an answer");
    assert_eq!(r.status, 431, "{r:?}");
    // A body over 1 MiB: 413 from its Content-Length, before the body is read (and the
    // connection closed, so only the head is sent here).
    let mut c = H1Conn::connect(Some(src), front.addr()).unwrap();
    c.send_raw(b"POST /up HTTP/1.1\r\nhost: site.test\r\ncontent-length: 1048577\r\n\r\nyyyy")
        .unwrap();
    let r = c.read_response().unwrap();
    assert_eq!(r.status, 413, "{r:?}");
    assert_eq!(origin.requests(), 0, "nothing oversized reached the origin");
    assert_eq!(
        front.metric("http_front_limit_hits_total{limit=\"max_header_field_bytes\"}"),
        2
    );
    // Header names nginx ignores (ignore_invalid_headers) never reach the origin.
    let mut c = H1Conn::connect(Some(src), front.addr()).unwrap();
    let r = c
        .request(
            "GET",
            "site.test",
            "/names",
            &[
                ("X.A", "1"),
                ("X!A", "2"),
                ("Authorization.", "x"),
                ("x-ok", "3"),
            ],
            b"",
        )
        .unwrap();
    assert_eq!(r.status, 200, "{r:?}");
    assert!(r.body.contains("x-ok: 3"), "{}", r.body);
    for gone in ["x.a", "x!a", "authorization."] {
        assert!(
            !r.body.contains(gone),
            "{gone} reached the origin: {}",
            r.body
        );
    }
    // Within both: forwarded, the field whole.
    let fits = "y".repeat(8000);
    let mut c = H1Conn::connect(Some(src), front.addr()).unwrap();
    let r = c
        .request(
            "POST",
            "site.test",
            "/ok",
            &[("x-fits", &fits)],
            &vec![b'z'; 1 << 20],
        )
        .unwrap();
    assert_eq!(r.status, 200, "{r:?}");
    assert!(r.body.contains(&fits), "the origin saw the field whole");
    assert_eq!(origin.requests(), 2);
}

#[test]
fn http_tls_listener_negotiates_h2_and_http1() {
    if !(have_program("openssl") && have_program("curl")) {
        assert!(!in_ci(), "openssl and curl are needed in CI");
        skipped("openssl or curl missing");
        return;
    }
    let certs = tempfile::tempdir().unwrap();
    let (cert, key) = (certs.path().join("cert.pem"), certs.path().join("key.pem"));
    let st = std::process::Command::new("openssl")
        .args([
            "req",
            "-x509",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:prime256v1",
            "-nodes",
            "-days",
            "2",
            "-subj",
            "/CN=site.test",
        ])
        .arg("-keyout")
        .arg(&key)
        .arg("-out")
        .arg(&cert)
        .output()
        .unwrap();
    assert!(
        st.status.success(),
        "{}",
        String::from_utf8_lossy(&st.stderr)
    );
    let origin = Origin::start();
    let front = Front::start(
        |a, m| {
            format!(
                "[server]\nlisten = []\n[tls]\nlisten = [\"{a}\"]\ncert = \"{}\"\nkey = \"{}\"\n[metrics]\nlisten = \"{m}\"\n\n\
                 [[upstream]]\nname = \"app\"\nservers = [\"{}\"]\n\n{}",
                cert.display(),
                key.display(),
                origin.addr(),
                site("site.test", "")
            )
        },
        None,
    );
    let a = front.addr();
    for (flag, want) in [("--http2", "2"), ("--http1.1", "1.1")] {
        let out = std::process::Command::new("curl")
            .args([
                "-sk",
                "--max-time",
                "10",
                flag,
                "-w",
                "\n%{http_code} %{http_version}",
            ])
            .arg("--resolve")
            .arg(format!("site.test:{}:{}", a.port(), a.ip()))
            .arg(format!("https://site.test:{}/tls", a.port()))
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout).to_string();
        assert!(text.ends_with(&format!("200 {want}")), "{flag}: {text}");
        assert!(text.contains("x-forwarded-proto: https\n"), "{text}");
    }
    assert_eq!(origin.requests(), 2);
}

/// An nginx h2c origin refuses a request that carries both `:authority` and `host` (a
/// duplicate host): http-front sends `:authority` only, whatever the client sent.
#[test]
fn http_h2c_upstream_nginx_gets_authority_only() {
    let Some(origin) = palisade_tests::nginx::Nginx::start(
        "server {\n    listen {LISTEN} http2;\n    server_name _;\n    \
         location / { return 200 \"h2c $host $uri $server_protocol\\n\"; }\n}\n",
    ) else {
        return;
    };
    let o = origin.addr();
    let front = Front::start(
        |a, m| {
            format!(
                "[server]\nlisten = [\"{a}\"]\nworkers = 2\n\n[metrics]\nlisten = \"{m}\"\n\n\
                 [[upstream]]\nname = \"app\"\nservers = [\"{o}\"]\nprotocol = \"h2c\"\n\n{}",
                site("site.test", "")
            )
        },
        None,
    );
    let src = net::test_ip();
    let r = get(Some(src), front.addr(), "Site.Test:8080", "/a/./b").unwrap();
    assert_eq!(
        (r.status, r.body.as_str()),
        (200, "h2c site.test /a/b HTTP/2.0\n"),
        "{}",
        origin.error_log()
    );
    let mut h2 = H2Conn::connect(Some(src), front.addr()).unwrap();
    let id = h2
        .send_request("GET", "site.test", "/x", &[("host", "site.test")], true)
        .unwrap();
    let r = h2.read_response(id).unwrap();
    assert_eq!(
        (r.status, r.body.as_str()),
        (200, "h2c site.test /x HTTP/2.0\n")
    );
}
