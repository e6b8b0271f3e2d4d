//! Per-site shield rules in http-front: 403 for denies (prefix, path, method, header and
//! User-Agent matchers), 429 with Retry-After over the rate limit, sites without rules going
//! straight through, events reaching the aggregator's output, and escalation into the block
//! map closing the source's open connections (HTTP/2 with GOAWAY).

use std::time::{Duration, Instant};

use palisade_tests::http::{Front, H1Conn, H2Conn, H2End, Origin, base_config, get};
use palisade_tests::net;

/// Tenant 1 denies `/bad…` and escalates after three denies into the block map (every site,
/// every packet); tenant 2 has no rules.
const ESCALATE_ON_BAD: &str = r#"
[[tenant]]
id = 1
escalate = { after = 3, window_secs = 60, block_secs = 600, on = ["deny"], http = "block_map" }

[[tenant.rule]]
name = "bad"
action = "deny"
when = [{ attr = "path", prefix = "/bad" }]

[[tenant]]
id = 2
"#;

/// An origin and a front whose site a.test is tenant 1 of [`ESCALATE_ON_BAD`], with
/// `server_extra` lines in `[server]`.
fn escalating_front(server_extra: &str) -> (Origin, Front) {
    let origin = Origin::start();
    let extra = format!("workers = 2\n{server_extra}");
    let front = Front::start(
        |a, m| {
            format!(
                "{}{}",
                base_config(a, m, origin.addr()).replace("workers = 2\n", &extra),
                sites("")
            )
        },
        Some(ESCALATE_ON_BAD),
    );
    (origin, front)
}

/// An origin and a front with the rules file `rules` and the sites of [`sites`]`(extra)`.
fn front_with_rules(rules: &str, extra: &str) -> (Origin, Front) {
    let origin = Origin::start();
    let front = Front::start(
        |a, m| format!("{}{}", base_config(a, m, origin.addr()), sites(extra)),
        Some(rules),
    );
    (origin, front)
}

fn sites(extra: &str) -> String {
    format!(
        "[rules]\nfile = \"rules.toml\"\n\n{extra}\n\
         [[site]]\nhosts = [\"a.test\"]\nupstream = \"app\"\ntenant = 1\nretry_after_secs = 7\n\n\
         [[site]]\nhosts = [\"b.test\"]\nupstream = \"app\"\n\n\
         [[site]]\nhosts = [\"c.test\"]\nupstream = \"app\"\ntenant = 2\n"
    )
}

#[test]
fn http_site_rules_answer_403_and_429_and_reach_the_aggregator() {
    let denied = net::test_ip();
    let rules = format!(
        r#"
[[tenant]]
id = 1
rate_limit = {{ per_second = 0.05, burst = 3 }}

[[tenant.rule]]
name = "health"
action = "allow"
when = [{{ attr = "path", exact = "/healthz" }}]

[[tenant.rule]]
name = "no-admin"
action = "deny"
when = [{{ attr = "path", prefix = "/admin" }}]

[[tenant.rule]]
name = "bad-ua"
action = "deny"
when = [{{ attr = "user_agent", regex = "(?i)sqlmap|nikto" }}]

[[tenant.rule]]
name = "scanner-ua"
action = "deny"
when = [{{ attr = "user_agent", regex = "^masscan/" }}]

[[tenant.rule]]
name = "attack-header"
action = "deny"
when = [{{ attr = "header:x-attack", present = true }}]

[[tenant.rule]]
name = "no-delete"
action = "deny"
when = [{{ attr = "method", one_of = ["DELETE"] }}]

[[tenant]]
id = 2
deny = ["{denied}/32"]
"#
    );
    let (origin, front) = front_with_rules(
        &rules,
        "[events]\noutput = \"file:events.jsonl\"\ninterval_secs = 1\n",
    );
    let (fa, src) = (front.addr(), net::test_ip());

    // Denies: path prefix, User-Agent regex, header presence, method.
    let mut c = H1Conn::connect(Some(src), fa).unwrap();
    type Case<'a> = (&'a str, &'a str, &'a [(&'a str, &'a str)]);
    let deny_cases: [Case; 5] = [
        ("GET", "/admin/x", &[]),
        ("GET", "/", &[("user-agent", "SQLMap/1.7")]),
        ("GET", "/", &[("user-agent", "masscan/1.3")]),
        ("GET", "/", &[("x-attack", "1")]),
        ("DELETE", "/thing", &[]),
    ];
    for (method, path, extra) in deny_cases {
        let r = c.request(method, "a.test", path, extra, b"").unwrap();
        assert_eq!(r.status, 403, "{method} {path} {extra:?}: {r:?}");
    }
    assert_eq!(
        origin.requests(),
        0,
        "denied requests never reach the origin"
    );

    // The allow rule skips the rate limit.
    for _ in 0..6 {
        assert_eq!(
            c.request("GET", "a.test", "/healthz", &[], b"")
                .unwrap()
                .status,
            200
        );
    }
    // Rate limit: a burst of 3 at one per 20 s, then 429 with the limiter's own wait
    // (the site's retry_after_secs = 7 is only for verdicts without one).
    let mut statuses = Vec::new();
    let mut retry_after = None;
    for _ in 0..8 {
        let r = c.request("GET", "a.test", "/page", &[], b"").unwrap();
        if r.status == 429 {
            retry_after = r.header("retry-after").map(str::to_string);
        }
        statuses.push(r.status);
    }
    assert_eq!(statuses[0], 200, "{statuses:?}");
    assert!(
        statuses.iter().filter(|s| **s == 429).count() >= 3,
        "{statuses:?}"
    );
    assert!(
        statuses.iter().all(|s| *s == 200 || *s == 429),
        "{statuses:?}"
    );
    let wait: u32 = retry_after.expect("429 has Retry-After").parse().unwrap();
    assert!((19..=20).contains(&wait), "Retry-After {wait}");

    // The same source on a site without rules goes straight through; HTTP/2 sees the same rules.
    assert_eq!(get(Some(src), fa, "b.test", "/page").unwrap().status, 200);
    let mut h2 = H2Conn::connect(Some(src), fa).unwrap();
    assert_eq!(h2.get("a.test", "/admin").unwrap().status, 403);
    assert_eq!(h2.get("a.test", "/page").unwrap().status, 429);

    // Prefix deny of tenant 2 applies to that source only.
    assert_eq!(get(Some(denied), fa, "c.test", "/").unwrap().status, 403);
    assert_eq!(get(Some(src), fa, "c.test", "/").unwrap().status, 200);

    assert!(front.metric("http_front_verdicts_total{action=\"deny\"}") >= 7);
    assert!(front.metric("http_front_verdicts_total{action=\"rate_limit\"}") >= 4);
    assert_eq!(
        front.metric("http_front_verdicts_total{action=\"allow\"}"),
        6
    );
    assert_eq!(
        front.metric("http_front_verdicts_total{action=\"no_rules\"}"),
        1
    );

    // 403s and 429s reach the aggregator and its output.
    let path = front.dir().join("events.jsonl");
    let end = Instant::now() + Duration::from_secs(15);
    let mut text = String::new();
    while Instant::now() < end {
        text = std::fs::read_to_string(&path).unwrap_or_default();
        if text.contains("\"tenant\":1,\"action\":\"rate_limited\"")
            && text.contains("\"tenant\":2,\"action\":\"denied\"")
        {
            break;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    assert!(
        text.contains("\"tenant\":1,\"action\":\"denied\""),
        "{text}"
    );
    assert!(
        text.contains("\"tenant\":1,\"action\":\"rate_limited\""),
        "{text}"
    );
    assert!(
        text.contains(&format!(
            "\"prefix\":\"{}.0/24\"",
            denied.to_string().rsplit_once('.').unwrap().0
        )),
        "{text}"
    );
}

#[test]
fn http_known_crawlers_and_asn_rules() {
    let (bot, asn_src, other) = (net::test_ip(), net::test_ip(), net::test_ip());
    let data = tempfile::tempdir().unwrap();
    let bots = data.path().join("googlebot.json");
    std::fs::write(
        &bots,
        format!("{{\"prefixes\":[{{\"ipv4Prefix\":\"{bot}/32\"}}]}}"),
    )
    .unwrap();
    let asn = data.path().join("asn.csv");
    std::fs::write(&asn, format!("{asn_src}/32,64500\n")).unwrap();
    let rules = format!(
        r#"
[known_bots]
files = ["{}"]

[asn]
file = "{}"

[[tenant]]
id = 1
allow_known_bots = true
deny_asn = [64500]

[[tenant.rule]]
name = "fake-googlebot"
action = "deny"
when = [{{ attr = "user_agent", contains = "Googlebot" }}]
"#,
        bots.display(),
        asn.display()
    );
    let (_origin, front) = front_with_rules(&rules, "");
    let fa = front.addr();
    let ua = [("user-agent", "Mozilla/5.0 (compatible; Googlebot/2.1)")];
    let status = |src, extra: &[(&str, &str)]| {
        let mut c = H1Conn::connect(Some(src), fa).unwrap();
        c.request("GET", "a.test", "/", extra, b"").unwrap().status
    };
    assert_eq!(status(bot, &ua), 200, "a crawler from its published range");
    assert_eq!(
        status(other, &ua),
        403,
        "a crawler's User-Agent from elsewhere"
    );
    assert_eq!(status(other, &[]), 200);
    assert_eq!(
        status(asn_src, &[]),
        403,
        "a source announced by a denied ASN"
    );
    assert_eq!(
        front.metric("http_front_verdicts_total{action=\"allow\"}"),
        1
    );
    assert_eq!(
        front.metric("http_front_verdicts_total{action=\"deny\"}"),
        2
    );
}

#[test]
fn http_escalation_closes_open_connections_of_the_source() {
    let (_origin, front) = escalating_front("");
    let fa = front.addr();
    let (attacker, bystander) = (net::test_ip(), net::test_ip());

    // Open connections of the soon-to-be-blocked source: HTTP/2 and keep-alive HTTP/1.1.
    let mut h2 = H2Conn::connect(Some(attacker), fa).unwrap();
    assert_eq!(h2.get("a.test", "/").unwrap().status, 200);
    let mut h1 = H1Conn::connect(Some(attacker), fa).unwrap();
    assert_eq!(
        h1.request("GET", "b.test", "/", &[], b"").unwrap().status,
        200
    );
    let mut other = H2Conn::connect(Some(bystander), fa).unwrap();
    assert_eq!(other.get("a.test", "/").unwrap().status, 200);

    // Three denies cross the threshold.
    let mut c = H1Conn::connect(Some(attacker), fa).unwrap();
    for _ in 0..3 {
        assert_eq!(
            c.request("GET", "a.test", "/bad", &[], b"").unwrap().status,
            403
        );
    }

    // The open HTTP/2 connection gets GOAWAY.
    match h2.wait_end(Duration::from_secs(10)) {
        Some(H2End::GoAway(_)) => {}
        other => panic!("expected GOAWAY on the blocked source's HTTP/2 connection, got {other:?}"),
    }
    // The keep-alive HTTP/1.1 connection serves nothing more.
    if let Ok(r) = h1.request("GET", "b.test", "/", &[], b"") {
        assert_eq!(r.status, 403, "{r:?}");
    }
    // New connections are refused: reset at accept before any request is read, and once the
    // listeners' SYN filter has the source, never established at all.
    assert!(
        get(Some(attacker), fa, "b.test", "/").is_err(),
        "blocked source got an answer"
    );
    assert_eq!(
        front.wait_metric("http_front_syn_filter_entries", 1, Duration::from_secs(10)),
        1
    );
    assert!(
        get(Some(attacker), fa, "b.test", "/").is_err(),
        "blocked source got an answer"
    );
    // Everyone else is served, on open and new connections.
    assert_eq!(other.get("a.test", "/again").unwrap().status, 200);
    assert_eq!(get(Some(bystander), fa, "b.test", "/").unwrap().status, 200);

    assert_eq!(
        front.metric("http_front_escalations_total{by=\"rules\"}"),
        1
    );
    assert_eq!(front.metric("palisade_blockmap_entries"), 1);
    assert!(front.metric("http_front_connections_closed_total{cause=\"blocked\"}") >= 2);
}

/// A dual-stack IPv6 listener (`[::]:port`) gets the SYN filter too — its IPv4 clients' SYNs
/// come with their IPv4 header — and IPv6 sources are in the filter as well. Only IPv4
/// listeners had it: a blocked source on `[::]` was reset at accept, a socket each.
#[test]
fn the_syn_filter_guards_dual_stack_listeners_and_ipv6_sources() {
    let origin = Origin::start();
    let front = Front::start(
        |a, m| {
            base_config(a, m, origin.addr()).replace(
                &format!("listen = [\"{a}\"]"),
                &format!("listen = [\"[::]:{}\"]", a.port()),
            ) + "[control]\nsocket = \"ctl.sock\"\n\n[[site]]\nhosts = [\"a.test\"]\nupstream = \"app\"\n"
        },
        None,
    );
    let fa = front.addr();
    let attacker = net::test_ip();
    let six = std::net::SocketAddr::from((std::net::Ipv6Addr::LOCALHOST, fa.port()));
    assert_eq!(get(Some(attacker), fa, "a.test", "/").unwrap().status, 200);
    assert!(std::net::TcpStream::connect_timeout(&six, Duration::from_secs(3)).is_ok());
    front.ctl(&["block", "add", &format!("{attacker}/32"), "--ttl", "600"]);
    front.ctl(&["block", "add", "::1/128", "--ttl", "600", "--force"]);
    assert_eq!(
        front.wait_metric("http_front_syn_filter_entries", 2, Duration::from_secs(10)),
        2
    );
    let at_accept = "http_front_connections_total{event=\"blocked_at_accept\"}";
    let before = front.metric(at_accept);
    // Never established: the SYNs are dropped (the connects time out).
    assert!(
        palisade_tests::http::connect_from(Some(attacker), fa).is_err(),
        "a blocked IPv4 source completed a handshake"
    );
    assert!(
        std::net::TcpStream::connect_timeout(&six, Duration::from_secs(2)).is_err(),
        "a blocked IPv6 source completed a handshake"
    );
    assert_eq!(
        front.metric(at_accept),
        before,
        "reset at accept, not dropped at SYN"
    );
    assert_eq!(
        get(Some(net::test_ip()), fa, "a.test", "/").unwrap().status,
        200
    );
}

#[test]
fn http_blocked_sources_are_reset_at_accept_without_the_syn_filter() {
    let rules = r#"
[[tenant]]
id = 1
escalate = { after = 1, window_secs = 60, block_secs = 600, on = ["deny"], http = "block_map" }
[[tenant.rule]]
name = "bad"
action = "deny"
when = [{ attr = "path", prefix = "/bad" }]
"#;
    let origin = Origin::start();
    let o = origin.addr();
    let front = Front::start(
        |a, m| {
            format!(
                "[server]\nlisten = [\"{a}\"]\nsyn_filter_max = 0\n[metrics]\nlisten = \"{m}\"\n\
                 [[upstream]]\nname = \"app\"\nservers = [\"{o}\"]\n{}",
                sites("")
            )
        },
        Some(rules),
    );
    let (fa, attacker) = (front.addr(), net::test_ip());
    assert_eq!(
        get(Some(attacker), fa, "a.test", "/bad").unwrap().status,
        403
    );
    for _ in 0..5 {
        let mut c = H1Conn::connect(Some(attacker), fa).expect("the handshake completes");
        assert!(
            c.request("GET", "a.test", "/", &[], b"").is_err(),
            "blocked source got an answer"
        );
    }
    assert_eq!(
        front.metric("http_front_connections_total{event=\"blocked_at_accept\"}"),
        5
    );
    assert_eq!(front.metric("http_front_syn_filter_entries"), 0);
    assert_eq!(
        get(Some(net::test_ip()), fa, "a.test", "/").unwrap().status,
        200
    );
    assert_eq!(origin.requests(), 1);
}

/// Requests a browser marks as sent on another site's behalf (`Sec-Fetch-Site: cross-site`:
/// the images or forms of a page elsewhere) are refused as any other, but never escalate:
/// five `<img>` of a denied path on any page had each visitor blocked everywhere. The
/// source's own requests still do.
#[test]
fn requests_another_site_makes_a_browser_send_never_block_its_user() {
    let (_origin, front) = escalating_front("");
    let fa = front.addr();
    let visitor = net::test_ip();
    let mut c = H1Conn::connect(Some(visitor), fa).unwrap();
    let img = [
        ("sec-fetch-site", "cross-site"),
        ("sec-fetch-mode", "no-cors"),
        ("sec-fetch-dest", "image"),
    ];
    for i in 0..10 {
        let r = c
            .request("GET", "a.test", &format!("/bad{i}.png"), &img, b"")
            .unwrap();
        assert_eq!(r.status, 403);
    }
    // Over plain HTTP no Sec-Fetch-* is sent: a page elsewhere is told by its Referer (an
    // `<img>`), a cross-origin form by its Origin, another host of the registrable domain by
    // `same-site` (each held the visitor for the tenant's sites).
    for marks in [
        [("referer", "http://evil.test/page.html")],
        [("origin", "http://evil.test")],
        [("sec-fetch-site", "same-site")],
    ] {
        for i in 0..5 {
            let r = c
                .request("GET", "a.test", &format!("/bad{i}.png"), &marks, b"")
                .unwrap();
            assert_eq!(r.status, 403);
        }
    }
    assert_eq!(
        c.request("GET", "a.test", "/", &[], b"").unwrap().status,
        200
    );
    assert_eq!(get(Some(visitor), fa, "b.test", "/").unwrap().status, 200);
    assert_eq!(
        front.metric("http_front_escalations_total{by=\"rules\"}"),
        0
    );
    assert_eq!(
        front.metric("palisade_blockmap_entries_by_evidence{evidence=\"http\"}"),
        0
    );
    // Its own requests (no such mark) still escalate it.
    for _ in 0..3 {
        assert_eq!(
            c.request("GET", "a.test", "/bad", &[], b"").unwrap().status,
            403
        );
    }
    assert_eq!(
        front.wait_metric(
            "http_front_escalations_total{by=\"rules\"}",
            1,
            Duration::from_secs(5)
        ),
        1
    );
}

/// Behind a hop that names its clients in X-Forwarded-For (`real_ip_from`: a reverse proxy
/// without the PROXY protocol, a CDN), each request is its client's: three denied requests
/// of one client get that client blocked, not the hop (which blocked every user behind it,
/// on every site, on every node and for DNS); the others behind it are served. A client
/// that is no hop cannot name another in the header.
#[test]
fn behind_a_listed_hop_each_request_is_its_forwarded_clients() {
    let hop = net::test_ip();
    let (_origin, front) = escalating_front(&format!("real_ip_from = [\"{hop}\"]\n"));
    let fa = front.addr();
    let via_hop = |client: &str, host: &str, path: &str| {
        let mut c = H1Conn::connect(Some(hop), fa).unwrap();
        c.request(
            "GET",
            host,
            path,
            &[("x-forwarded-for", client), ("connection", "close")],
            b"",
        )
        .unwrap()
        .status
    };
    // The attacker, behind the hop (an address of the hop's own list to its right is
    // skipped, as nginx's real_ip_recursive does).
    for _ in 0..3 {
        assert_eq!(
            via_hop(&format!("203.0.113.5, 192.0.2.66, {hop}"), "a.test", "/bad"),
            403
        );
    }
    assert_eq!(
        front.wait_metric(
            "http_front_escalations_total{by=\"rules\"}",
            1,
            Duration::from_secs(5)
        ),
        1
    );
    // The attacker is refused on every site, its neighbours behind the hop are served, and
    // so is the hop itself.
    assert_eq!(via_hop("192.0.2.66", "b.test", "/"), 403);
    assert_eq!(via_hop("192.0.2.77", "a.test", "/"), 200);
    assert_eq!(via_hop("192.0.2.77", "b.test", "/"), 200);
    assert_eq!(get(Some(hop), fa, "b.test", "/").unwrap().status, 200);
    // On one keep-alive connection of the hop, the blocked client's request is refused and
    // the next client's served: refusing a named client never closes the hop's connection.
    let mut shared = H1Conn::connect(Some(hop), fa).unwrap();
    for (client, want) in [
        ("192.0.2.66", 403),
        ("192.0.2.77", 200),
        ("192.0.2.66", 403),
    ] {
        let r = shared
            .request("GET", "b.test", "/", &[("x-forwarded-for", client)], b"")
            .unwrap();
        assert_eq!(r.status, want, "{client}");
    }
    // Whatever the client wrote left of what the hop appended (here bytes that are no
    // text) does not make the request the hop's own.
    shared
        .send_raw(
            b"GET / HTTP/1.1\r\nhost: b.test\r\nx-forwarded-for: \x80\xff, 192.0.2.66\r\n\r\n",
        )
        .unwrap();
    assert_eq!(shared.read_response().unwrap().status, 403);
    // A client that is no hop cannot speak for another.
    let direct = net::test_ip();
    let mut c = H1Conn::connect(Some(direct), fa).unwrap();
    let r = c
        .request(
            "GET",
            "b.test",
            "/",
            &[("x-forwarded-for", "192.0.2.66")],
            b"",
        )
        .unwrap();
    assert_eq!(r.status, 200);
    assert_eq!(
        front.metric("palisade_blockmap_entries_by_evidence{evidence=\"http\"}"),
        1
    );
}

/// By default an HTTP escalation holds for the escalating tenant's sites alone, as dnsd's
/// for its zones: the source gets 403 from every site of tenant 1, and every other tenant's
/// sites, the rest of the node and the fleet as before (a page elsewhere can make its
/// visitors send what a rule denies; blocked by address, an office behind one NAT lost
/// every site and its DNS). `block list` shows the hold, `block del` lifts it.
#[test]
fn an_http_escalation_holds_for_its_tenants_sites_alone() {
    let rules = ESCALATE_ON_BAD.replace(r#", http = "block_map""#, "");
    let (_origin, front) = front_with_rules(&rules, "[control]\nsocket = \"ctl.sock\"\n");
    let (fa, src) = (front.addr(), net::test_ip());
    for _ in 0..3 {
        assert_eq!(get(Some(src), fa, "a.test", "/bad").unwrap().status, 403);
    }
    // Held for tenant 1: its site refuses even what no rule denies.
    assert_eq!(get(Some(src), fa, "a.test", "/").unwrap().status, 403);
    // Another tenant's site and a site without a tenant: served.
    assert_eq!(get(Some(src), fa, "c.test", "/").unwrap().status, 200);
    assert_eq!(get(Some(src), fa, "b.test", "/").unwrap().status, 200);
    assert_eq!(
        front.metric("palisade_blockmap_entries_by_evidence{evidence=\"http\"}"),
        0,
        "nothing in the block map (every site, every packet, the fleet)"
    );
    let list = front.ctl(&["block", "list"]);
    assert!(
        list.contains("held for one tenant") && list.contains(&format!("{src}/32\ttenant 1")),
        "{list}"
    );
    let out = front.ctl(&["block", "del", &src.to_string()]);
    assert!(out.contains("lifted for tenant 1"), "{out}");
    assert_eq!(get(Some(src), fa, "a.test", "/").unwrap().status, 200);
}
