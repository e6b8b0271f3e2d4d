//! The HTTP challenge end to end: a real browser (Debian's headless Chromium) solves the
//! page's proof of work and reaches the origin; curl, a cookie replayed from another /24, a
//! forged or expired one, and a solution sent too late never do; a clearance made by node A
//! passes on node B (one fleet key), and a rules change challenges again.

use std::net::Ipv4Addr;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use palisade_tests::http::{Front, H1Conn, Origin, Resp, base_config, page_token, solve};
use palisade_tests::net;
use sha2::{Digest, Sha256};

const RULES: &str = r#"
[[tenant]]
id = 1
[[tenant.rule]]
name = "check-everyone"
action = "challenge"
difficulty = 10
when = [{ attr = "path", prefix = "/" }]
[[tenant.rule]]
name = "login-harder"
action = "challenge"
difficulty = 14
when = [{ attr = "path", prefix = "/login" }]
[[tenant.rule]]
name = "no-admin"
action = "deny"
when = [{ attr = "path", prefix = "/admin" }]
"#;

/// A fleet key file (64 hex digits, mode 0600) in `dir`.
fn key_file(dir: &Path, byte: u8) -> PathBuf {
    let p = dir.join(format!("fleet-{byte}.key"));
    std::fs::write(&p, format!("{}\n", format!("{byte:02x}").repeat(32))).unwrap();
    std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o600)).unwrap();
    p
}

/// http-front for site `a.test` (tenant 1) before `origin`, signing with `key`.
fn front(origin: &Origin, key: &Path, challenge_extra: &str) -> Front {
    front_with(origin, key, challenge_extra, RULES)
}

/// [`front`] with the rules `rules`, and `b.test` for tenant 2.
fn front_with(origin: &Origin, key: &Path, challenge_extra: &str, rules: &str) -> Front {
    let o = origin.addr();
    let key = key.display().to_string();
    let extra = challenge_extra.to_string();
    Front::start(
        move |a, m| {
            format!(
                "{}[rules]\nfile = \"rules.toml\"\n\n[control]\nsocket = \"ctl.sock\"\n\n\
                 [challenge]\nkey_file = \"{key}\"\n{extra}\n\
                 [[site]]\nhosts = [\"a.test\"]\nupstream = \"app\"\ntenant = 1\n\n\
                 [[site]]\nhosts = [\"b.test\"]\nupstream = \"app\"\ntenant = 2\n",
                base_config(a, m, o)
            )
        },
        Some(rules),
    )
}

/// An address in another /24 than `ip`.
fn other_24(ip: Ipv4Addr) -> Ipv4Addr {
    let [a, b, c, d] = ip.octets();
    Ipv4Addr::new(a, b, c.wrapping_add(1).max(1), d)
}

fn get(front: &Front, from: Ipv4Addr, path: &str, cookie: Option<&str>) -> Resp {
    let mut c = H1Conn::connect(Some(from), front.addr()).unwrap();
    let extra: Vec<(&str, &str)> = cookie.map(|v| ("cookie", v)).into_iter().collect();
    c.request("GET", "a.test", path, &extra, b"").unwrap()
}

/// Solves the page `from` gets and sends the solution; the verify answer.
fn pass(front: &Front, from: Ipv4Addr, path: &str) -> Resp {
    let page = get(front, from, path, None);
    assert_eq!(page.status, 403);
    let (t, d) = page_token(&page.body);
    let n = solve(&t, d);
    get(
        front,
        from,
        &format!("/.palisade/challenge?t={t}&n={n}&r=%2Fback%3Fq%3D1"),
        None,
    )
}

/// `name=value` of the clearance a verify answer sets.
fn clearance_of(r: &Resp) -> String {
    let sc = r.header("set-cookie").expect("a clearance cookie");
    assert!(
        sc.contains("HttpOnly") && sc.contains("Path=/") && sc.contains("Max-Age="),
        "{sc}"
    );
    sc.split(';').next().unwrap().to_string()
}

fn is_page(r: &Resp) -> bool {
    r.status == 403 && r.body.contains("Checking your browser")
}

#[test]
fn a_browser_solves_the_challenge_and_reaches_the_origin() {
    let dir = tempfile::tempdir().unwrap();
    let origin = Origin::start();
    let front = front(&origin, &key_file(dir.path(), 1), "");
    let fa = front.addr();
    let Some(dom) = palisade_tests::browser::dump_dom(
        &format!("http://a.test:{}/hello?x=1", fa.port()),
        "a.test",
        fa.ip(),
        &["--virtual-time-budget=30000"],
        Duration::from_secs(90),
    ) else {
        return;
    };
    // The origin's echo of the request, with the browser's clearance cookie.
    assert!(
        dom.contains("GET /hello?x=1 HTTP/1.1") && dom.contains("palisade_clearance_"),
        "the browser did not reach the origin:\n{dom}\n{}",
        front.log()
    );
    assert!(origin.requests() >= 1);
    for (result, at_least) in [("issued", 1), ("solved", 1), ("cleared", 1)] {
        let series = format!("http_front_challenges_total{{result=\"{result}\"}}");
        assert!(front.metric(&series) >= at_least, "{series}");
    }
}

#[test]
fn curl_replays_forgeries_and_other_prefixes_never_reach_the_origin() {
    let dir = tempfile::tempdir().unwrap();
    let key = key_file(dir.path(), 2);
    let origin = Origin::start();
    let a = front(&origin, &key, "");
    let b = front(&origin, &key, "");
    let other_key = key_file(dir.path(), 3);
    let c = front(&origin, &other_key, "");
    let src = net::test_ip();

    // curl gets the page, with no origin request, never cached.
    let out = Command::new("curl")
        .args(["-s", "-i", "--max-time", "5", "--interface"])
        .arg(src.to_string())
        .arg("-H")
        .arg("Host: a.test")
        .arg(format!("http://{}/private", a.addr()))
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.starts_with("HTTP/1.1 403"), "{text}");
    assert!(
        text.to_ascii_lowercase()
            .contains("cache-control: no-store"),
        "{text}"
    );
    assert!(
        text.contains("<script>") && !text.contains("src="),
        "no external script: {text}"
    );
    assert_eq!(origin.requests(), 0, "curl reached the origin");

    // A solution earns a clearance and a redirect back to the page asked.
    let v = pass(&a, src, "/private");
    assert_eq!(v.status, 303, "{}", v.body);
    assert_eq!(v.header("location"), Some("/back?q=1"));
    let cookie = clearance_of(&v);
    let ok = get(&a, src, "/private", Some(&cookie));
    assert_eq!(ok.status, 200, "{}", ok.body);
    assert_eq!(origin.requests(), 1);
    // Let through on its cookie: a shared cache before us must not give it to others.
    assert!(
        ok.header("vary")
            .is_some_and(|v| v.to_ascii_lowercase().contains("cookie")),
        "{:?}",
        ok.header("vary")
    );
    assert!(
        ok.header("cache-control")
            .is_some_and(|v| v.contains("private") && !v.contains("public")),
        "{:?}",
        ok.header("cache-control")
    );
    // A raw UTF-8 cookie beside it (a page's script set it) hides nothing.
    let mut raw = H1Conn::connect(Some(src), a.addr()).unwrap();
    let with_utf8 = format!("name=J\u{fc}rgen; {cookie}");
    let r = raw
        .request("GET", "a.test", "/private", &[("cookie", &with_utf8)], b"")
        .unwrap();
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(origin.requests(), 2);
    // Another address of the same /24 shares it; node B (same key) honours it.
    let same24 = Ipv4Addr::from(u32::from(src) ^ 1);
    assert_eq!(get(&a, same24, "/x", Some(&cookie)).status, 200);
    assert_eq!(get(&b, src, "/x", Some(&cookie)).status, 200);
    assert_eq!(origin.requests(), 4);

    // Challenged again: another /24, a node with another key, a forged MAC, another cookie name.
    let far = other_24(src);
    assert!(is_page(&get(&a, far, "/x", Some(&cookie))));
    assert!(is_page(&get(&c, src, "/x", Some(&cookie))));
    let (name, value) = cookie.split_once('=').unwrap();
    let (exp, mac) = value.split_once('.').unwrap();
    let flipped = format!(
        "{name}={exp}.{}{}",
        if mac.starts_with('0') { "1" } else { "0" },
        &mac[1..]
    );
    assert!(is_page(&get(&a, src, "/x", Some(&flipped))));
    let later = format!("{name}={}.{mac}", exp.parse::<u64>().unwrap() + 3600);
    assert!(is_page(&get(&a, src, "/x", Some(&later))));
    assert!(is_page(&get(
        &a,
        src,
        "/x",
        Some(&format!("other={value}"))
    )));
    // Eight clearance cookies spelt as one at most are checked: a good one after eight
    // bogus ones is not (each costs an HMAC), and the bound is counted; cookies of other
    // shapes (planted by a sibling site: four locked a solved client out) count for nothing.
    let d = mac.split('.').next().unwrap();
    let bogus = format!("{name}={exp}.{d}.{}", "0".repeat(32));
    let many = format!("{}{cookie}", format!("{bogus}; ").repeat(8));
    assert!(is_page(&get(&a, src, "/x", Some(&many))));
    assert!(a.metric("http_front_limit_hits_total{limit=\"clearance_cookies\"}") >= 1);
    let few = format!("{}{cookie}", format!("{bogus}; ").repeat(7));
    assert_eq!(get(&a, src, "/x", Some(&few)).status, 200);
    let junk = format!(
        "{}{cookie}",
        format!("{name}=x; {name}={exp}.0; ").repeat(8)
    );
    assert_eq!(get(&a, src, "/x", Some(&junk)).status, 200);
    // A clearance never passes a deny.
    let denied = get(&a, src, "/admin", Some(&cookie));
    assert_eq!((denied.status, denied.body.as_str()), (403, "forbidden\n"));
    assert_eq!(origin.requests(), 6);

    // A solution for one /24 is refused from another; a wrong nonce is refused.
    let page = get(&a, src, "/", None);
    let (t, d) = page_token(&page.body);
    let n = solve(&t, d);
    let stolen = get(
        &a,
        far,
        &format!("/.palisade/challenge?t={t}&n={n}&r=/"),
        None,
    );
    assert_eq!(
        (stolen.status, stolen.body.as_str()),
        (403, "challenge failed\n")
    );
    let wrong = (0..)
        .find(|x| {
            *x != n && {
                let h = Sha256::digest(format!("{t}.{x}").as_bytes());
                h[0] != 0
            }
        })
        .unwrap();
    let bad = get(
        &a,
        src,
        &format!("/.palisade/challenge?t={t}&n={wrong}&r=/"),
        None,
    );
    assert_eq!(bad.status, 403);
    // A lowered difficulty breaks the token.
    let parts: Vec<&str> = t.split('.').collect();
    let easy = format!("{}.0.{}", parts[0], parts[2]);
    let cheat = get(
        &a,
        src,
        &format!("/.palisade/challenge?t={easy}&n=0&r=/"),
        None,
    );
    assert_eq!(cheat.status, 403);
    // An offsite return is never followed.
    let v = get(
        &a,
        src,
        &format!("/.palisade/challenge?t={t}&n={n}&r=%2F%2Fevil.example%2F"),
        None,
    );
    assert_eq!(v.header("location"), Some("/"));
    assert!(a.metric("http_front_challenges_total{result=\"failed\"}") >= 3);
    assert!(a.metric("http_front_challenges_total{result=\"solved\"}") >= 2);

    // Another tenant's rules added and edited, a comment in them: the clearance holds
    // (an edit anywhere in the file challenged every client of every site again).
    let other = "\n[[tenant]]\nid = 2\n# theirs\n[[tenant.rule]]\nname = \"t2\"\n\
                 action = \"deny\"\nwhen = [{ attr = \"path\", prefix = \"/t2\" }]\n";
    for extra in [
        other.to_string(),
        other.replace("# theirs", "# theirs, edited"),
    ] {
        std::fs::write(a.dir().join("rules.toml"), format!("{RULES}{extra}")).unwrap();
        assert!(a.reload());
        assert_eq!(get(&a, src, "/x", Some(&cookie)).status, 200);
    }
    // Its own tenant's rules changed: every clearance is challenged again.
    std::fs::write(
        a.dir().join("rules.toml"),
        format!(
            "{}{other}",
            RULES.replace("difficulty = 10", "difficulty = 11")
        ),
    )
    .unwrap();
    assert!(a.reload());
    assert!(is_page(&get(&a, src, "/x", Some(&cookie))));
    assert_eq!(origin.requests(), 8);
    assert_eq!(get(&b, src, "/x", Some(&cookie)).status, 200);
    assert_eq!(origin.requests(), 9);
}

#[test]
fn clearances_and_solutions_expire() {
    let dir = tempfile::tempdir().unwrap();
    let origin = Origin::start();
    let a = front(
        &origin,
        &key_file(dir.path(), 4),
        "clearance_secs = 2\nsolve_secs = 1\n",
    );
    let src = net::test_ip();
    // A solution sent after solve_secs is refused.
    let page = get(&a, src, "/", None);
    let (t, d) = page_token(&page.body);
    let n = solve(&t, d);
    std::thread::sleep(Duration::from_millis(3100));
    let late = get(
        &a,
        src,
        &format!("/.palisade/challenge?t={t}&n={n}&r=/"),
        None,
    );
    assert_eq!(late.status, 403);
    // A clearance holds for clearance_secs, then the client is challenged again.
    let v = pass(&a, src, "/");
    let cookie = clearance_of(&v);
    assert_eq!(get(&a, src, "/x", Some(&cookie)).status, 200);
    std::thread::sleep(Duration::from_millis(3100));
    assert!(is_page(&get(&a, src, "/x", Some(&cookie))));
    assert_eq!(origin.requests(), 1);
}

/// A clearance is good for challenges no harder than the one solved (a per-rule difficulty
/// meant nothing once any challenge of the site was solved), and the verify path is the
/// front's however it is spelled: never forwarded.
#[test]
fn a_clearance_passes_no_harder_challenge_and_the_verify_path_is_never_forwarded() {
    let dir = tempfile::tempdir().unwrap();
    let key = key_file(dir.path(), 5);
    let origin = Origin::start();
    let a = front(&origin, &key, "");
    let src = net::test_ip();

    let easy = clearance_of(&pass(&a, src, "/x"));
    assert_eq!(get(&a, src, "/x", Some(&easy)).status, 200);
    let hard_page = get(&a, src, "/login", Some(&easy));
    assert!(
        is_page(&hard_page),
        "an easier clearance passed: {}",
        hard_page.status
    );
    assert_eq!(page_token(&hard_page.body).1, 14);
    assert_eq!(origin.requests(), 1);
    // Solving the harder one clears both.
    let (t, d) = page_token(&hard_page.body);
    let n = solve(&t, d);
    let hard = clearance_of(&get(
        &a,
        src,
        &format!("/.palisade/challenge?t={t}&n={n}&r=%2Flogin"),
        None,
    ));
    assert_eq!(get(&a, src, "/login", Some(&hard)).status, 200);
    assert_eq!(get(&a, src, "/x", Some(&hard)).status, 200);
    assert_eq!(origin.requests(), 3);

    // The verify path spelled as an origin would normalise it: answered by the front.
    let page = get(&a, src, "/y", None);
    let (t, d) = page_token(&page.body);
    let n = solve(&t, d);
    for path in [
        "/.palisade//challenge",
        "/.palisade/./challenge",
        "/.palisade/%63hallenge",
        "//.palisade/challenge",
        "/x/../.palisade/challenge",
    ] {
        let r = get(&a, src, &format!("{path}?t={t}&n={n}&r=%2F"), None);
        assert!(
            r.header("x-origin").is_none() && (r.status == 303 || r.status == 400),
            "{path}: {} {}",
            r.status,
            r.body
        );
    }
    assert_eq!(origin.requests(), 3, "a verify request reached the origin");
}

/// Whom a page can make a hold hit: any visitor, whose browser it makes send what escalates
/// (an `<img>` under `no-referrer` over plain HTTP says nothing of where it came from). A
/// source held for a tenant is challenged, not refused (`http_hold = "challenge"`, the
/// default): a browser solves it and reaches the origin, a bot does not; `http_hold =
/// "deny"` refuses it whatever it holds. A browser's requests never escalate into the block
/// map, even where the tenant asks for it: they hold the source for that tenant; a client
/// that is no browser is blocked there as asked. (A probe's Chromium, sent 15 `<img>` of a
/// denied path by a `no-referrer` page, was refused every request of the site, 0 of 20.)
#[test]
fn a_held_browser_is_challenged_and_passes_and_never_enters_the_block_map() {
    let dir = tempfile::tempdir().unwrap();
    let origin = Origin::start();
    let rules = |hold: &str| {
        format!(
            "[[tenant]]\nid = 1\n\
             escalate = {{ after = 3, window_secs = 60, block_secs = 600, on = [\"deny\"]{hold} }}\n\
             [[tenant.rule]]\nname = \"no-wp\"\naction = \"deny\"\n\
             when = [{{ attr = \"path\", prefix = \"/wp-login\" }}]\n\
             [[tenant.rule]]\nname = \"prove\"\naction = \"challenge\"\n\
             when = [{{ attr = \"path\", prefix = \"/protected\" }}]\n\
             [[tenant]]\nid = 2\n\
             escalate = {{ after = 1, window_secs = 60, block_secs = 600, on = [\"deny\"], http = \"block_map\" }}\n\
             [[tenant.rule]]\nname = \"no-wp\"\naction = \"deny\"\n\
             when = [{{ attr = \"path\", prefix = \"/wp-login\" }}]\n"
        )
    };
    let front = front_with(&origin, &key_file(dir.path(), 5), "", &rules(""));
    let browser_get = |from: Ipv4Addr, host: &str, path: &str, cookie: Option<&str>| {
        let mut c = H1Conn::connect(Some(from), front.addr()).unwrap();
        let mut extra = vec![("user-agent", "Mozilla/5.0 (X11; Linux x86_64) Chrome/120")];
        if let Some(v) = cookie {
            extra.push(("cookie", v));
        }
        c.request("GET", host, path, &extra, b"").unwrap()
    };
    // What a page made the visitor's browser send: no Referer, no Origin, no Sec-Fetch-*.
    let visitor = net::test_ip();
    for i in 0..4 {
        let r = browser_get(visitor, "a.test", &format!("/wp-login.php?{i}"), None);
        assert_eq!(r.status, 403);
    }
    // Held: challenged, not refused; solved, the origin again.
    let before = origin.requests();
    let page = browser_get(visitor, "a.test", "/", None);
    assert!(is_page(&page), "{} {}", page.status, page.body);
    let verify = pass(&front, visitor, "/");
    let cookie = clearance_of(&verify);
    let r = browser_get(visitor, "a.test", "/", Some(&cookie));
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(origin.requests(), before + 1);
    // What the rules deny stays denied, with a clearance too.
    let r = browser_get(visitor, "a.test", "/wp-login.php", Some(&cookie));
    assert_eq!((r.status, is_page(&r)), (403, false));
    // A clearance earned before the hold lifts nothing (one solve cleared every later hold of
    // its /24): challenged again, and solved again, served.
    let early = net::test_ip();
    let old = clearance_of(&pass(&front, early, "/protected"));
    assert_eq!(browser_get(early, "a.test", "/", Some(&old)).status, 200);
    std::thread::sleep(Duration::from_millis(1100));
    for i in 0..3 {
        browser_get(early, "a.test", &format!("/wp-login.php?{i}"), Some(&old));
    }
    assert!(is_page(&browser_get(early, "a.test", "/", Some(&old))));
    let fresh = clearance_of(&pass(&front, early, "/"));
    assert_eq!(browser_get(early, "a.test", "/", Some(&fresh)).status, 200);
    // Tenant 2 asks for the block map: a browser's request holds it for tenant 2 alone...
    let other = net::test_ip();
    let r = browser_get(other, "b.test", "/wp-login.php", None);
    assert_eq!(r.status, 403);
    assert!(is_page(&browser_get(other, "b.test", "/", None)));
    assert_eq!(browser_get(other, "a.test", "/", None).status, 200);
    let list = front.ctl(&["block", "list"]);
    let (map, held) = list
        .split_once("held for one tenant")
        .unwrap_or((&list, ""));
    assert!(
        !map.contains(&other.to_string()) && held.contains(&other.to_string()),
        "{list}"
    );
    // ... and a client that is no browser enters the block map, as asked.
    let bot = net::test_ip();
    let mut c = H1Conn::connect(Some(bot), front.addr()).unwrap();
    let r = c
        .request("GET", "b.test", "/wp-login.php", &[], b"")
        .unwrap();
    assert_eq!(r.status, 403);
    let list = front.ctl(&["block", "list"]);
    let (map, _) = list
        .split_once("held for one tenant")
        .unwrap_or((&list, ""));
    assert!(map.contains(&bot.to_string()), "{list}");
    // `http_hold = "deny"`: a held source is refused, clearance or not.
    std::fs::write(
        front.dir().join("rules.toml"),
        rules(", http_hold = \"deny\""),
    )
    .unwrap();
    assert!(front.reload(), "{}", front.log());
    let held_one = net::test_ip();
    for i in 0..3 {
        browser_get(held_one, "a.test", &format!("/wp-login.php?{i}"), None);
    }
    let r = browser_get(held_one, "a.test", "/", None);
    assert_eq!((r.status, is_page(&r)), (403, false), "{}", r.body);
}
