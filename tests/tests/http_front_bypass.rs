//! Rule bypasses tried as an attacker would, against http-front in front of a real nginx
//! origin (which normalises paths and cuts the Host at its first `:` before it routes): for
//! every encoding of a denied path, and every malformed or conflicting Host, over HTTP/1.1
//! and HTTP/2, the request is refused or the origin never serves the denied resource. Control
//! requests show that the origin does serve it when asked without a rule.

use palisade_tests::http::{Front, H1Conn, H2Conn, H2End, base_config};
use palisade_tests::net;
use palisade_tests::nginx::Nginx;

/// The origin: `/admin…` is the secret on the protected hosts, everything else is public.
const ORIGIN: &str = r#"
server {
    listen {LISTEN};
    server_name a.test b.test c.test k.test ci.test p.test open.test;
    location / { return 200 "public $uri\n"; }
    location /admin { return 200 "SECRET $uri\n"; }
}
server {
    listen {LISTEN} default_server;
    server_name _;
    location / { return 200 "other $host $uri\n"; }
}
"#;

/// Tenants 1–3 deny `/admin` as a prefix, an exact path and a regex.
const RULES: &str = r#"
[[tenant]]
id = 1
[[tenant.rule]]
name = "admin-prefix"
action = "deny"
when = [{ attr = "path", prefix = "/admin" }]

[[tenant]]
id = 2
[[tenant.rule]]
name = "admin-exact"
action = "deny"
when = [{ attr = "path", exact = "/admin" }]

[[tenant]]
id = 3
[[tenant.rule]]
name = "admin-regex"
action = "deny"
when = [{ attr = "path", regex = "^/admin" }]
"#;

fn sites() -> String {
    "[rules]\nfile = \"rules.toml\"\n\n\
     [[site]]\nhosts = [\"a.test\"]\nupstream = \"app\"\ntenant = 1\n\n\
     [[site]]\nhosts = [\"b.test\"]\nupstream = \"app\"\ntenant = 2\n\n\
     [[site]]\nhosts = [\"c.test\"]\nupstream = \"app\"\ntenant = 3\n\n\
     [[site]]\nhosts = [\"k.test\"]\nupstream = \"app\"\ntenant = 1\nencoded_slash = \"keep\"\n\n\
     [[site]]\nhosts = [\"ci.test\"]\nupstream = \"app\"\ntenant = 1\npath_case_insensitive = true\n\n\
     [[site]]\nhosts = [\"p.test\"]\nupstream = \"app\"\ntenant = 1\npath_params = true\n\n\
     [[site]]\nhosts = [\"open.test\"]\nupstream = \"app\"\n\n\
     [[site]]\nhosts = [\"*\"]\nupstream = \"app\"\n"
        .to_string()
}

fn start() -> Option<(Nginx, Front)> {
    let origin = Nginx::start(ORIGIN)?;
    let o = origin.addr();
    let front = Front::start(
        |a, m| format!("{}{}", base_config(a, m, o), sites()),
        Some(RULES),
    );
    Some((origin, front))
}

/// Every spelling of `/admin` (and below it) an attacker would try.
const PATHS: &[&str] = &[
    "/admin",
    "/admin/",
    "/admin/x",
    "/%61dmin",
    "/%61%64%6d%69%6e",
    "/%61%64%6D%69%6E/",
    "/adm%69n/x",
    "//admin",
    "///admin/x",
    "/./admin",
    "/%2e/admin",
    "/x/../admin",
    "/x/%2e%2e/admin",
    "/x/%2E%2E/admin",
    "/x/.%2e/admin",
    "/x/%2e./admin",
    "/x//..//admin",
    "/../admin",
    "/../../admin/",
    "/x/y/../../admin",
    "/admin/.",
    "/admin/x/..",
    "/admin%2f",
    "/admin%2Fx",
    "/%2Fadmin",
    "/x/..%2Fadmin",
    "/x/..%2fadmin",
    "/admin%5c",
    "/%5cadmin",
    "/x/..%5cadmin",
    "/admin%00",
    "/admin%00.html",
    "/admin%0A",
    "/admin%0d%0a",
    "/admin%09",
    "/admin%",
    "/admin%2",
    "/admin%zz",
    "/admin;x",
    "/admin;/x",
    "/%2561dmin",
    "/admin?q=1",
    "/%2e%2e/admin",
];

/// Fails unless the origin logs a request line starting with `prefix` within 5 s (nginx
/// writes its access log after the response is sent).
fn assert_logged(origin: &Nginx, prefix: &str) {
    let logged = || origin.access_log().iter().any(|l| l.starts_with(prefix));
    let end = std::time::Instant::now() + std::time::Duration::from_secs(5);
    while !logged() && std::time::Instant::now() < end {
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    assert!(logged(), "no {prefix} in {:?}", origin.access_log());
}

/// A body that shows the origin served the denied resource, per rule kind.
fn leaked(tenant_kind: char, status: u16, body: &str) -> bool {
    if status != 200 {
        return false;
    }
    match tenant_kind {
        // Exact `/admin`: only the resource `/admin` itself is denied.
        'b' => body.trim_end() == "SECRET /admin",
        _ => body.starts_with("SECRET"),
    }
}

#[test]
fn http_front_no_path_encoding_reaches_a_denied_resource() {
    let Some((origin, front)) = start() else {
        return;
    };
    let fa = front.addr();
    let src = net::test_ip();

    // Controls: without a rule the origin serves the secret for these forms, so the checks
    // below can see a leak.
    for p in ["/admin", "/%61dmin", "//admin", "/x/../admin"] {
        let mut c = H1Conn::connect(Some(src), fa).unwrap();
        let r = c.request("GET", "open.test", p, &[], b"").unwrap();
        assert_eq!(
            (r.status, r.body.as_str()),
            (200, "SECRET /admin\n"),
            "control {p}"
        );
    }
    // The forwarded path is the normalised one (the origin logs what it received).
    let mut c = H1Conn::connect(Some(src), fa).unwrap();
    let r = c
        .request("GET", "a.test", "/x/%2e%2e//%70ublic?a=%41", &[], b"")
        .unwrap();
    assert_eq!((r.status, r.body.as_str()), (200, "public /public\n"));
    assert_logged(&origin, "/public?a=%41|/public|a.test|200");

    let mut leaks = Vec::new();
    for site in ["a.test", "b.test", "c.test"] {
        let kind = site.chars().next().unwrap();
        for p in PATHS {
            let mut c = H1Conn::connect(Some(src), fa).unwrap();
            match c.request("GET", site, p, &[("connection", "close")], b"") {
                Ok(r) if leaked(kind, r.status, &r.body) => {
                    leaks.push(format!("h1 {site}{p}: {} {}", r.status, r.body.trim()))
                }
                Ok(_) | Err(_) => {}
            }
            let mut h2 = H2Conn::connect(Some(src), fa).unwrap();
            match h2.get(site, p) {
                Ok(r) if leaked(kind, r.status, &r.body) => {
                    leaks.push(format!("h2 {site}{p}: {} {}", r.status, r.body.trim()))
                }
                Ok(_) | Err(H2End::Reset(_)) | Err(_) => {}
            }
        }
    }
    assert!(
        leaks.is_empty(),
        "the origin served denied resources:\n{}",
        leaks.join("\n")
    );
    assert!(front.metric("http_front_responses_total{cause=\"bad_path\"}") > 0);
    assert!(front.metric("http_front_paths_normalized_total") > 0);

    // Refused forms are 400, with the reason.
    let mut c = H1Conn::connect(Some(src), fa).unwrap();
    let r = c
        .request("GET", "a.test", "/a%2Fb", &[("connection", "close")], b"")
        .unwrap();
    assert_eq!(r.status, 400, "{r:?}");
    let mut c = H1Conn::connect(Some(src), fa).unwrap();
    let r = c
        .request("GET", "a.test", "/a%00", &[("connection", "close")], b"")
        .unwrap();
    assert_eq!(r.status, 400, "{r:?}");
}

#[test]
fn http_front_site_path_options() {
    let Some((origin, front)) = start() else {
        return;
    };
    let fa = front.addr();
    let src = net::test_ip();
    let req = |host: &str, p: &str| {
        let mut c = H1Conn::connect(Some(src), fa).unwrap();
        c.request("GET", host, p, &[("connection", "close")], b"")
            .unwrap()
    };
    // encoded_slash = "keep": %2F passes, encoded, as one segment; dot segments still go.
    let r = req("k.test", "/files/a%2fb");
    assert_eq!(r.status, 200, "{r:?}");
    assert_logged(&origin, "/files/a%2Fb|");
    assert_eq!(req("k.test", "/x/%2e%2e/admin").status, 403);
    assert_eq!(req("k.test", "/a%00").status, 400);
    // path_case_insensitive: the rules see lower case (for case-insensitive origins).
    assert_eq!(req("ci.test", "/ADMIN").status, 403);
    assert_eq!(req("ci.test", "/Adm%49n/x").status, 403);
    // Letters a case-insensitive origin takes for ASCII ones (dotless i, capital I with a
    // dot, long s): Java's equalsIgnoreCase finds "/admın" equal to "/admin".
    assert_eq!(req("ci.test", "/adm%C4%B1n").status, 403);
    assert_eq!(req("ci.test", "/ADM%C4%B0N/x").status, 403);
    assert_eq!(
        req("a.test", "/ADMIN").status,
        200,
        "case matters by default"
    );
    // path_params: `;` parameters cut for the rules (servlet containers route `/x/..;/admin`
    // to `/admin`).
    assert_eq!(req("p.test", "/public/..;/admin").status, 403);
    assert_eq!(req("p.test", "/admin;jsessionid=1").status, 403);
    assert_eq!(req("p.test", "/public;x").status, 200);
}

/// Sends `head` from `src` to `fa` on a connection of its own: the status and body of the
/// answer (0 and the error when none came).
fn raw_head(src: std::net::Ipv4Addr, fa: std::net::SocketAddr, head: &str) -> (u16, String) {
    let mut c = H1Conn::connect(Some(src), fa).unwrap();
    c.send_raw(head.as_bytes()).unwrap();
    match c.read_response() {
        Ok(r) => (r.status, r.body),
        Err(e) => (0, e.to_string()),
    }
}

#[test]
fn http_front_a_malformed_or_conflicting_host_is_refused_never_rerouted() {
    let Some((origin, front)) = start() else {
        return;
    };
    let fa = front.addr();
    let src = net::test_ip();
    let raw = |head: &str| raw_head(src, fa, head);
    // Control: the catch-all site (no rules) reaches the origin's protected server when the
    // Host names it, as an origin that cuts at ':' would.
    let (s, b) = raw("GET /admin HTTP/1.1\r\nhost: a.test\r\nconnection: close\r\n\r\n");
    assert_eq!(s, 403, "{b}");
    let (s, b) = raw("GET /admin HTTP/1.1\r\nhost: a.test:8080\r\nconnection: close\r\n\r\n");
    assert_eq!(s, 403, "a numeric port keeps the site: {b}");
    let (s, b) = raw("GET /public HTTP/1.1\r\nhost: A.Test.:8080\r\nconnection: close\r\n\r\n");
    assert_eq!((s, b.as_str()), (200, "public /public\n"));

    let mut leaks = Vec::new();
    let hosts = [
        "a.test:abc",
        "a.test:80x",
        "a.test:8080:1",
        "a.test:99999",
        "a.test:-1",
        "a.test: 80",
        "a.test:+80",
        "user@a.test",
        "a.test@other.test",
        "a.test/x",
        "a.test..",
        ".a.test",
        "a.test%00",
        "a.test\\",
        "[::1",
        "a.test,other.test",
        "a.test other.test",
    ];
    for h in hosts {
        let (s, b) = raw(&format!(
            "GET /admin HTTP/1.1\r\nhost: {h}\r\nconnection: close\r\n\r\n"
        ));
        if b.starts_with("SECRET") {
            leaks.push(format!("h1 Host {h:?}: {s} {b}"));
        } else if s != 400 && s != 0 {
            leaks.push(format!("h1 Host {h:?} was not refused: {s} {b}"));
        }
        // The same as an absolute-form target.
        let (s, b) = raw(&format!(
            "GET http://{h}/admin HTTP/1.1\r\nhost: other.test\r\nconnection: close\r\n\r\n"
        ));
        if b.starts_with("SECRET") {
            leaks.push(format!("h1 absolute {h:?}: {s} {b}"));
        }
        let mut h2 = H2Conn::connect(Some(src), fa).unwrap();
        if let Ok(r) = h2.get(h, "/admin") {
            if r.body.starts_with("SECRET") {
                leaks.push(format!("h2 :authority {h:?}: {} {}", r.status, r.body));
            } else if r.status != 400 {
                leaks.push(format!("h2 :authority {h:?} was not refused: {}", r.status));
            }
        }
    }
    // Two Hosts, or a Host beside an absolute-form target that names another.
    for head in [
        "GET /admin HTTP/1.1\r\nhost: other.test\r\nhost: a.test\r\nconnection: close\r\n\r\n",
        "GET /admin HTTP/1.1\r\nhost: a.test\r\nhost: other.test\r\nconnection: close\r\n\r\n",
        "GET http://other.test/admin HTTP/1.1\r\nhost: a.test\r\nconnection: close\r\n\r\n",
        "GET http://a.test/admin HTTP/1.1\r\nhost: other.test\r\nconnection: close\r\n\r\n",
        "GET /admin HTTP/1.1\r\nhost: other.test\r\nconnection: host\r\nhost: a.test\r\n\r\n",
    ] {
        let (s, b) = raw(head);
        if b.starts_with("SECRET") {
            leaks.push(format!("{head:?}: {s} {b}"));
        }
    }
    // HTTP/2: `:authority` and `host` that differ, either way round.
    for (auth, host) in [("other.test", "a.test"), ("a.test", "other.test")] {
        let mut h2 = H2Conn::connect(Some(src), fa).unwrap();
        let id = h2
            .send_request("GET", auth, "/admin", &[("host", host)], true)
            .unwrap();
        if let Ok(r) = h2.read_response(id) {
            if r.body.starts_with("SECRET") {
                leaks.push(format!("h2 {auth}/{host}: {} {}", r.status, r.body));
            } else if r.status != 400 {
                leaks.push(format!("h2 {auth}/{host} was not refused: {}", r.status));
            }
        }
    }
    assert!(leaks.is_empty(), "{}", leaks.join("\n"));
    assert!(front.metric("http_front_responses_total{cause=\"bad_host\"}") > 0);
    // The origin saw only the canonical host names.
    for l in origin.access_log() {
        let host = l.split('|').nth(2).unwrap_or("");
        assert!(
            ["a.test", "other.test", "open.test"].contains(&host),
            "origin saw {l}"
        );
    }
}

#[test]
fn http_front_an_http2_header_value_with_white_space_at_an_end_is_refused() {
    // RFC 9113 §8.2.1: malformed. An HTTP/1.1 origin trims it, so it would read another value
    // than the rules saw (a deny on `x-role: admin` passed `x-role: "\tadmin\t"`).
    let Some((_origin, front)) = start() else {
        return;
    };
    let src = net::test_ip();
    for v in [" admin", "admin ", "\tadmin\t", "\tadmin"] {
        let mut h2 = H2Conn::connect(Some(src), front.addr()).unwrap();
        let id = h2
            .send_request("GET", "open.test", "/", &[("x-role", v)], true)
            .unwrap();
        match h2.read_response(id) {
            Ok(r) => assert_eq!(r.status, 400, "{v:?}: {r:?}"),
            Err(e) => panic!("{v:?}: {e:?}"),
        }
    }
    // Inner white space is data.
    let mut h2 = H2Conn::connect(Some(src), front.addr()).unwrap();
    let id = h2
        .send_request("GET", "open.test", "/", &[("x-role", "a b")], true)
        .unwrap();
    assert_eq!(h2.read_response(id).unwrap().status, 200);
}

/// Heads nginx refuses (400) are refused, never forwarded: an invalid Host line beside an
/// absolute-form target (routed by the target, the line went unchecked), a second copy of a
/// single-valued field (Content-Range, Expect, If-Match, If-None-Match), and HTTP/2
/// requests with an empty `:scheme` or a `:path` that does not start with `/`.
#[test]
fn http_front_heads_nginx_refuses_are_refused_whatever_their_form() {
    use palisade_tests::http::{frame, hpack_encode};
    let Some((origin, front)) = start() else {
        return;
    };
    let fa = front.addr();
    let src = net::test_ip();
    let raw = |head: &str| raw_head(src, fa, head).0;
    let before = origin.access_log().len();
    let mut passed = Vec::new();
    for host in ["a b", "/admin", "", "open.test, other.test", ": open.test"] {
        let head =
            format!("GET http://open.test/x HTTP/1.1\r\nhost: {host}\r\nconnection: close\r\n\r\n");
        if raw(&head) != 400 {
            passed.push(head);
        }
    }
    for (name, a, b) in [
        ("content-range", "bytes 0-1/2", "bytes 5-6/9"),
        ("expect", "100-continue", "100-continue"),
        ("if-match", "\"a\"", "\"b\""),
        ("if-none-match", "\"a\"", "\"b\""),
    ] {
        let head = format!(
            "POST /x HTTP/1.1\r\nhost: open.test\r\n{name}: {a}\r\n{name}: {b}\r\ncontent-length: 2\r\nconnection: close\r\n\r\nab"
        );
        if raw(&head) != 400 {
            passed.push(head);
        }
    }
    // HTTP/2: each on a connection of its own, as stream 1.
    let h2 = |fields: &[(&str, &str)]| -> Option<u16> {
        let mut c = H2Conn::connect(Some(src), fa).unwrap();
        let block = hpack_encode(fields);
        c.write_frame(
            frame::HEADERS,
            frame::END_HEADERS | frame::END_STREAM,
            1,
            &block,
        )
        .unwrap();
        c.read_response(1).ok().map(|r| r.status)
    };
    let base = [
        (":method", "GET"),
        (":scheme", "http"),
        (":authority", "open.test"),
        (":path", "/x"),
    ];
    // (A `:path` of `#f/x` reaches us as `/`: the http crate drops a fragment, and the
    // rules see the `/` forwarded.)
    for (k, v) in [(":scheme", ""), (":path", "?/x")] {
        let f: Vec<(&str, &str)> = base
            .iter()
            .map(|&(n, old)| (n, if n == k { v } else { old }))
            .collect();
        if let Some(s) = h2(&f).filter(|s| *s != 400) {
            passed.push(format!("h2 {k} {v:?}: {s}"));
        }
    }
    assert!(passed.is_empty(), "not refused:\n{}", passed.join("\n"));
    assert_eq!(
        origin.access_log().len(),
        before,
        "the origin saw {:?}",
        &origin.access_log()[before..]
    );
    // A request that names its host by `host` alone (no `:authority`) is legal and served.
    let served = h2(&[
        (":method", "GET"),
        (":scheme", "http"),
        (":path", "/x"),
        ("host", "open.test"),
    ]);
    assert_eq!(served, Some(200));
}
