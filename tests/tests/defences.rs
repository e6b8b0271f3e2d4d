//! dnsd's flood defences end to end: response rate limiting (against Knot's mod-rrl on the
//! same burst), DNS cookies with dig, the random-subdomain defence escalating 50 flooders
//! into the block map while a legitimate client keeps every answer, and `ctl block`.

use std::collections::HashSet;
use std::net::{IpAddr, SocketAddr, UdpSocket};
use std::process::Command;
use std::time::{Duration, Instant};

use palisade_tests::servers::{Dnsd, Knot, Zone};
use palisade_tests::wire::{QueryOpts, RawMsg, build_query};

/// What a burst got back.
#[derive(Debug, Default, Clone, Copy)]
struct Tally {
    sent: usize,
    answered: usize,
    slipped: usize,
    other: usize,
}

impl Tally {
    fn dropped(&self) -> usize {
        self.sent - self.answered - self.slipped - self.other
    }
}

/// Sends `n` copies of one query (distinct IDs) from `src` as fast as possible, then
/// collects replies until 500 ms pass without one.
fn burst(server: SocketAddr, src: IpAddr, name: &str, n: usize, cookie: Option<Vec<u8>>) -> Tally {
    let s = UdpSocket::bind(SocketAddr::new(src, 0)).expect("bind source");
    s.connect(server).expect("connect");
    let opts = QueryOpts {
        cookie,
        ..QueryOpts::edns(1232)
    };
    for i in 0..n {
        let q = build_query(i as u16, name, 1, &opts);
        s.send(&q).expect("send");
    }
    let mut t = Tally {
        sent: n,
        ..Tally::default()
    };
    let mut seen = HashSet::new();
    let mut buf = [0u8; 4096];
    s.set_read_timeout(Some(Duration::from_millis(500)))
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    while Instant::now() < deadline && seen.len() < n {
        let Ok(len) = s.recv(&mut buf) else { break };
        let Ok(m) = RawMsg::parse(&buf[..len]) else {
            continue;
        };
        if !seen.insert(m.id) {
            continue;
        }
        if m.flags & 0x0200 != 0 || m.rcode() == 23 {
            t.slipped += 1; // TC=1, or BADCOOKIE to a client with a cookie
        } else if m.rcode() == 0 && m.counts[1] > 0 {
            t.answered += 1;
        } else {
            t.other += 1;
        }
    }
    t
}

fn no_random_subdomain() -> &'static str {
    "[defence.random_subdomain]\nenabled = false"
}

#[test]
fn rrl_limits_a_burst_with_slip_and_compares_with_knot() {
    let zone = Zone::data("example.com.");
    let dnsd = Dnsd::builder()
        .zone(zone.clone())
        .raw("[defence.rrl]\nresponses_per_second = 10\nslip = 2")
        .raw(no_random_subdomain())
        .start();
    let a: IpAddr = "127.21.0.1".parse().unwrap();
    let b: IpAddr = "127.22.0.1".parse().unwrap();
    let ours = burst(dnsd.addr(), a, "www.example.com.", 200, None);
    eprintln!(
        "dnsd  (rate 10, slip 2): {ours:?}, dropped {}",
        ours.dropped()
    );
    // The bucket allows about one second of responses; half the rest slip, half drop.
    assert!((8..=30).contains(&ours.answered), "{ours:?}");
    let limited = ours.sent - ours.answered;
    assert!(ours.slipped.abs_diff(limited / 2) <= 2, "{ours:?}");
    assert!(ours.dropped().abs_diff(limited / 2) <= 2, "{ours:?}");
    assert_eq!(ours.other, 0);
    // Another client prefix is not affected.
    let other = burst(dnsd.addr(), b, "www.example.com.", 5, None);
    assert_eq!(other.answered, 5, "{other:?}");
    let stats = dnsd.stats();
    assert!(stats["rrl.limited"] >= limited as u64, "{stats:?}");
    assert!(stats["drops.rrl"] > 0);

    // A client with a valid server cookie skips RRL: learn one from a calm prefix first.
    let learn = UdpSocket::bind(SocketAddr::new("127.23.0.1".parse().unwrap(), 0)).unwrap();
    learn.connect(dnsd.addr()).unwrap();
    let client_cookie = vec![1, 2, 3, 4, 5, 6, 7, 8];
    let q = build_query(
        9,
        "www.example.com.",
        1,
        &QueryOpts {
            cookie: Some(client_cookie.clone()),
            ..QueryOpts::edns(1232)
        },
    );
    learn.send(&q).unwrap();
    learn
        .set_read_timeout(Some(Duration::from_secs(2)))
        .unwrap();
    let mut buf = [0u8; 2048];
    let n = learn.recv(&mut buf).expect("reply with a cookie");
    let m = RawMsg::parse(&buf[..n]).unwrap();
    let full = m
        .opt
        .and_then(|o| o.options.into_iter().find(|(c, _)| *c == 10))
        .map(|(_, v)| v)
        .expect("a COOKIE option in the reply");
    assert_eq!(full.len(), 24);
    assert_eq!(&full[..8], &client_cookie[..]);
    // The cookie is bound to the client address: use it from the same source.
    let with_cookie = burst(
        dnsd.addr(),
        "127.23.0.1".parse().unwrap(),
        "www.example.com.",
        100,
        Some(full),
    );
    eprintln!("dnsd with a valid cookie: {with_cookie:?}");
    assert_eq!(with_cookie.answered, 100, "{with_cookie:?}");

    // The same burst against Knot DNS's mod-rrl with the same rate and slip.
    if !Knot::available() {
        palisade_tests::skipped("knotd not installed, no comparison with Knot's RRL");
        return;
    }
    let knot = Knot::start_with_rrl(&[zone], 10, 2);
    let theirs = burst(
        knot.addr(),
        "127.24.0.1".parse().unwrap(),
        "www.example.com.",
        200,
        None,
    );
    eprintln!(
        "knot  (rate 10, slip 2): {theirs:?}, dropped {}",
        theirs.dropped()
    );
    // Same order of magnitude for each outcome.
    for (what, x, y) in [
        ("answered", ours.answered, theirs.answered),
        ("slipped", ours.slipped, theirs.slipped),
        ("dropped", ours.dropped(), theirs.dropped()),
    ] {
        let (x, y) = (x.max(1) as f64, y.max(1) as f64);
        assert!(x / y < 10.0 && y / x < 10.0, "{what}: dnsd {x} vs knot {y}");
    }
}

/// Random names under a wildcard (or under a DNAME into one) were each an account of their
/// own: a spoofed flood of them was never limited (20 times the bytes in, toward the victim;
/// Knot 2.2). A wildcard's answers are one account, and a DNAME's, as BIND, Knot and NSD
/// count them; the names that exist keep theirs.
#[test]
fn rrl_counts_a_wildcards_or_dnames_answers_as_one_account_whatever_name_is_asked() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("w.test.zone");
    let big = (0..4)
        .map(|i| format!("\"{}\"", "x".repeat(200 + i)))
        .collect::<Vec<_>>()
        .join(" ");
    std::fs::write(
        &file,
        format!(
            "$TTL 300\n@ SOA ns h 1 3600 600 86400 300\n@ NS ns\nns A 192.0.2.1\n\
             www A 192.0.2.2\n*.wild TXT {big}\ndn DNAME wild.w.test.\n"
        ),
    )
    .unwrap();
    let dnsd = Dnsd::builder()
        .zone(Zone::new("w.test.", &file))
        .raw("[defence.rrl]\nresponses_per_second = 10\nslip = 2")
        .raw(no_random_subdomain())
        .start();
    // 200 random names below `under` from `src`: full answers, TC=1 ones.
    let flood = |src: IpAddr, under: &str| {
        let s = UdpSocket::bind(SocketAddr::new(src, 0)).unwrap();
        s.connect(dnsd.addr()).unwrap();
        let n = 200;
        for i in 0..n {
            let q = build_query(
                i as u16,
                &format!("r{i}x.{under}"),
                16,
                &QueryOpts::edns(1232),
            );
            s.send(&q).unwrap();
        }
        s.set_read_timeout(Some(Duration::from_millis(500)))
            .unwrap();
        let (mut full, mut tc, mut bytes) = (0, 0, 0);
        let mut buf = [0u8; 4096];
        while let Ok(len) = s.recv(&mut buf) {
            bytes += len;
            let m = RawMsg::parse(&buf[..len]).unwrap();
            if m.flags & 0x0200 != 0 {
                tc += 1;
            } else if m.counts[1] > 0 {
                full += 1;
            }
        }
        eprintln!("{n} random names under {under}: {full} full, {tc} TC, {bytes} bytes out");
        assert!(
            (8..=30).contains(&full),
            "{under}: {full} full answers of {n}"
        );
        assert!(tc > 0, "{under}");
    };
    let src: IpAddr = "127.25.0.1".parse().unwrap();
    flood(src, "wild.w.test.");
    // Below a DNAME into the wildcard: the DNAME's account (each name was one of its own,
    // 21 times the bytes in reflected; Knot 2.2).
    flood("127.25.0.2".parse().unwrap(), "dn.w.test.");
    // Another name that exists is an account of its own.
    let other = burst(dnsd.addr(), src, "www.w.test.", 5, None);
    assert_eq!(other.answered, 5, "{other:?}");
}

/// The COOKIE option of a `dig` reply line, e.g. `; COOKIE: 0102...  (good)`.
fn dig_cookie(out: &str) -> Option<(String, bool)> {
    let line = out.lines().find(|l| l.starts_with("; COOKIE:"))?;
    let mut it = line.trim_start_matches("; COOKIE:").split_whitespace();
    let hex = it.next()?.to_string();
    Some((hex, line.contains("(good)")))
}

fn dig(server: SocketAddr, src: &str, args: &[&str]) -> String {
    let out = Command::new("dig")
        .arg(format!("@{}", server.ip()))
        .arg("-p")
        .arg(server.port().to_string())
        .arg("-b")
        .arg(src)
        .args(["+tries=1", "+time=2", "+norec"])
        .args(args)
        .output()
        .expect("run dig");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[test]
fn cookies_interoperate_with_dig() {
    if !palisade_tests::have_program("dig") {
        palisade_tests::skipped("dig not installed");
        return;
    }
    let dnsd = Dnsd::builder()
        .zone(Zone::data("example.com."))
        .raw(no_random_subdomain())
        .start();
    let src = "127.25.0.1";
    // First contact: dig sends its client cookie and learns our server cookie.
    let out = dig(dnsd.addr(), src, &["+cookie", "www.example.com", "A"]);
    let (cookie, good) = dig_cookie(&out).unwrap_or_else(|| panic!("no COOKIE in:\n{out}"));
    assert!(good, "dig did not accept the server cookie:\n{out}");
    assert_eq!(
        cookie.len(),
        48,
        "client (8) + server (16) octets: {cookie}"
    );
    let before = dnsd.stats();
    // The learned cookie is accepted on the next query.
    let out = dig(
        dnsd.addr(),
        src,
        &[&format!("+cookie={cookie}"), "www.example.com", "A"],
    );
    assert!(out.contains("status: NOERROR"), "{out}");
    let after = dnsd.stats();
    assert_eq!(after["cookies.valid"], before["cookies.valid"] + 1);
    // A forged server cookie is not.
    let forged = format!("{}{}", &cookie[..16], "00".repeat(16));
    let _ = dig(
        dnsd.addr(),
        src,
        &[&format!("+cookie={forged}"), "www.example.com", "A"],
    );
    let after2 = dnsd.stats();
    assert_eq!(after2["cookies.invalid"], after["cookies.invalid"] + 1);
    // From another address the same cookie is not valid either (it is bound to the client IP).
    let _ = dig(
        dnsd.addr(),
        "127.25.0.2",
        &[&format!("+cookie={cookie}"), "www.example.com", "A"],
    );
    assert_eq!(
        dnsd.stats()["cookies.invalid"],
        after2["cookies.invalid"] + 1
    );
}

#[test]
fn required_cookies_get_badcookie_or_tc() {
    if !palisade_tests::have_program("dig") {
        palisade_tests::skipped("dig not installed");
        return;
    }
    let mut zone = Zone::data("example.com.");
    zone.options.push("cookies = \"require\"".into());
    let dnsd = Dnsd::builder()
        .zone(zone)
        .raw(no_random_subdomain())
        .start();
    let src = "127.26.0.1";
    // No cookie at all: TC=1, come back over TCP.
    let out = dig(
        dnsd.addr(),
        src,
        &["+nocookie", "+ignore", "www.example.com", "A"],
    );
    assert!(out.contains("flags: qr tc"), "{out}");
    // A client cookie alone: BADCOOKIE with a fresh server cookie.
    let out = dig(
        dnsd.addr(),
        src,
        &["+cookie", "+nobadcookie", "www.example.com", "A"],
    );
    assert!(out.contains("status: BADCOOKIE"), "{out}");
    let (cookie, _) = dig_cookie(&out).expect("a cookie with BADCOOKIE");
    // With that cookie: answered.
    let out = dig(
        dnsd.addr(),
        src,
        &[&format!("+cookie={cookie}"), "www.example.com", "A"],
    );
    assert!(
        out.contains("status: NOERROR") && out.contains("ANSWER: 1"),
        "{out}"
    );
    // Over TCP the cookie is not required.
    let out = dig(
        dnsd.addr(),
        src,
        &["+tcp", "+nocookie", "www.example.com", "A"],
    );
    assert!(out.contains("status: NOERROR"), "{out}");
}

#[test]
fn random_subdomain_flood_makes_flooders_suspects_never_blocks_and_legit_client_gets_every_answer()
{
    let dnsd = Dnsd::builder()
        .zone(Zone::data("example.com."))
        .raw("[defence.rrl]\nenabled = false")
        .raw(
            "[defence.random_subdomain]\nzone_nxdomains_per_second = 100\nsource_nxdomain_limit = 5\n\
             escalate_after = 20\nwindow = 10\nblock_ttl = 300",
        )
        .start();
    let server = dnsd.addr();
    // 50 flooders on 127.2.0.x, each with its own socket.
    let flooders: Vec<UdpSocket> = (1..=50u8)
        .map(|i| {
            let s = UdpSocket::bind(SocketAddr::new(IpAddr::from([127, 2, 0, i]), 0)).unwrap();
            s.connect(server).unwrap();
            s.set_nonblocking(true).unwrap();
            s
        })
        .collect();
    let legit = UdpSocket::bind("127.3.0.1:0").unwrap();
    legit.connect(server).unwrap();
    legit
        .set_read_timeout(Some(Duration::from_secs(2)))
        .unwrap();
    let opts = QueryOpts::udp();
    let mut legit_ok = 0;
    let mut legit_sent = 0;
    let mut rng = palisade_tests::rng::Rng::new(42);
    let mut buf = [0u8; 2048];
    let start = Instant::now();
    let (mut flood_bytes, mut reply_bytes, mut truncated) = (0usize, 0usize, 0usize);
    // 60 rounds: each flooder sends one random name per round; the legitimate client asks
    // for an existing name every other round and waits for its answer.
    for round in 0..60u16 {
        for s in &flooders {
            // Fixed-width names: every query the same size, whichever reply is drained.
            let name = format!("r{:016x}.example.com.", rng.next_u64());
            let q = build_query(round, &name, 1, &opts);
            flood_bytes += q.len();
            let _ = s.send(&q);
            // Drain what comes back: a truncated reply is never larger than its query.
            while let Ok(n) = s.recv(&mut buf) {
                reply_bytes += n;
                let m = RawMsg::parse(&buf[..n]).unwrap();
                if m.flags & 0x0200 != 0 {
                    truncated += 1;
                    assert!(
                        n <= q.len(),
                        "a truncated reply of {n} bytes to {}",
                        q.len()
                    );
                }
            }
        }
        if round % 2 == 0 {
            legit_sent += 1;
            let q = build_query(1000 + round, "www.example.com.", 1, &opts);
            legit.send(&q).unwrap();
            if let Ok(n) = legit.recv(&mut buf) {
                let m = RawMsg::parse(&buf[..n]).unwrap();
                if m.rcode() == 0 && m.counts[1] > 0 {
                    legit_ok += 1;
                }
            }
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    eprintln!(
        "flood of {} queries ({flood_bytes} bytes) in {:?}: {truncated} truncated, {reply_bytes} reply bytes; legitimate: {legit_ok}/{legit_sent}",
        60 * 50,
        start.elapsed()
    );
    assert_eq!(legit_ok, legit_sent, "every legitimate query is answered");
    assert!(truncated > 0, "flooders' NXDOMAINs are truncated");
    assert!(
        reply_bytes <= flood_bytes,
        "no more reply bytes than attack bytes"
    );
    let (_, list) = dnsd.ctl(&["block", "list"]);
    let suspects: Vec<&str> = list
        .lines()
        .filter(|l| l.starts_with("127.2.0.") && l.contains("random-subdomain"))
        .collect();
    assert_eq!(suspects.len(), 50, "every flooder a suspect:\n{list}");
    assert!(
        suspects
            .iter()
            .all(|l| l.contains("suspect evidence=udp scope=nxdomain")),
        "suspects, never blocks:\n{list}"
    );
    assert!(
        !list.contains("127.3.0.1"),
        "the legitimate client is not a suspect:\n{list}"
    );
    let stats = dnsd.stats();
    assert!(stats["random_subdomain.escalated"] >= 50, "{stats:?}");
    assert!(stats["random_subdomain.attacks"] >= 1);
    assert_eq!(stats["escalations"], 0, "nothing blocked: {stats:?}");
    assert!(stats["suspected"] >= 50, "{stats:?}");
    // A flood never becomes a log flood: at most 10 "suspect" lines a second, the rest
    // counted (in the lines that pass and in the metrics).
    let log = dnsd.log();
    let lines = log
        .lines()
        .filter(|l| l.contains("source made a suspect: random-subdomain flood"))
        .count();
    // (the limit counts per wall-clock second: the flood's spans at most this many)
    let secs = start.elapsed().as_secs() + 2;
    assert!(
        lines > 0 && lines as u64 <= 10 * secs && lines < 50,
        "{lines} lines in {secs} s"
    );
    assert!(stats["log.suppressed"] >= (50 - lines) as u64, "{stats:?}");
    // A suspect is never dropped before parsing: its queries for names that exist are
    // answered, over UDP, and a name that does not exist is answered over TCP.
    let before = dnsd.stats()["drops.blocked"];
    let s = &flooders[0];
    s.set_nonblocking(false).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
    while s.recv(&mut buf).is_ok_and(|_| true) {
        s.set_read_timeout(Some(Duration::from_millis(200)))
            .unwrap();
    }
    s.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
    s.send(&build_query(7, "www.example.com.", 1, &opts))
        .unwrap();
    let n = s
        .recv(&mut buf)
        .expect("a suspect's query for a name that exists");
    let m = RawMsg::parse(&buf[..n]).unwrap();
    assert!(m.rcode() == 0 && m.counts[1] > 0 && m.flags & 0x0200 == 0);
    assert_eq!(dnsd.stats()["drops.blocked"], before);
    let m = dnsd.metrics();
    assert!(m.contains("dnsd_suspects_truncated_total"), "{m}");
    assert!(
        m.contains("palisade_blockmap_entries_by_evidence{evidence=\"udp\"} 50"),
        "{m}"
    );
}

#[test]
fn ctl_block_add_del_list() {
    let dnsd = Dnsd::builder().zone(Zone::data("example.com.")).start();
    let src: IpAddr = "127.27.0.1".parse().unwrap();
    let ask = || burst(dnsd.addr(), src, "www.example.com.", 1, None).answered;
    assert_eq!(ask(), 1);
    let (ok, out) = dnsd.ctl(&[
        "block",
        "add",
        "127.27.0.0/24",
        "--ttl",
        "60",
        "--reason",
        "test",
    ]);
    assert!(ok, "{out}");
    assert_eq!(ask(), 0, "a blocked source gets nothing");
    let (_, list) = dnsd.ctl(&["block", "list"]);
    assert!(
        list.contains("127.27.0.0/24") && list.contains("operator") && list.contains("test"),
        "{list}"
    );
    // TCP from a blocked source is closed at accept, before anything is read.
    let before = dnsd.stats()["drops.blocked"];
    {
        use std::io::{Read, Write};
        let sock =
            socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).unwrap();
        sock.bind(&SocketAddr::new(src, 0).into()).unwrap();
        sock.connect(&dnsd.addr().into()).unwrap();
        let mut s: std::net::TcpStream = sock.into();
        s.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
        let q = palisade_tests::client::frame(&build_query(
            5,
            "www.example.com.",
            1,
            &QueryOpts::udp(),
        ));
        let _ = s.write_all(&q);
        let mut b = [0u8; 2];
        let got = s.read(&mut b);
        assert!(
            matches!(got, Ok(0) | Err(_)),
            "the connection must be closed: {got:?}"
        );
    }
    assert!(dnsd.stats()["drops.blocked"] > before);
    let (ok, out) = dnsd.ctl(&["block", "del", "127.27.0.0/24"]);
    assert!(ok, "{out}");
    assert_eq!(ask(), 1, "unblocked again");
    let (ok, _) = dnsd.ctl(&["block", "del", "127.27.0.0/24"]);
    assert!(!ok, "deleting twice fails");
    let (ok, out) = dnsd.ctl(&["block", "add", "not-an-address"]);
    assert!(!ok && out.contains("not an address"), "{out}");
}

#[test]
fn a_shared_cookie_secret_rotates_by_reload_across_an_anycast_set() {
    if !palisade_tests::have_program("dig") {
        palisade_tests::skipped("dig not installed");
        return;
    }
    const OLD: &str = "0123456789abcdef0123456789abcdef";
    const NEW: &str = "fedcba9876543210fedcba9876543210";
    let shared = format!(
        "{}\n[defence.cookies]\nsecret = \"{OLD}\"\n",
        no_random_subdomain()
    );
    let a = Dnsd::builder()
        .zone(Zone::data("example.com."))
        .raw(&shared)
        .start();
    let b = Dnsd::builder()
        .zone(Zone::data("example.com."))
        .raw(&shared)
        .start();
    let src = "127.27.0.1";
    let valid = |d: &Dnsd, cookie: &str| {
        let before = d.stats()["cookies.valid"];
        let out = dig(
            d.addr(),
            src,
            &[&format!("+cookie={cookie}"), "www.example.com", "A"],
        );
        assert!(out.contains("status: NOERROR"), "{out}");
        d.stats()["cookies.valid"] == before + 1
    };
    // A cookie from node B is valid at node A: one secret for the set.
    let out = dig(b.addr(), src, &["+cookie", "www.example.com", "A"]);
    let (from_b, _) = dig_cookie(&out).unwrap_or_else(|| panic!("no COOKIE in:\n{out}"));
    assert!(valid(&a, &from_b));
    // Rotate A: the new secret, the old one kept as previous, by a reload.
    let cfg = std::fs::read_to_string(a.config_path()).unwrap();
    let rotated = cfg.replace(
        &format!("secret = \"{OLD}\""),
        &format!("secret = \"{NEW}\"\nprevious_secret = \"{OLD}\""),
    );
    assert_ne!(cfg, rotated);
    std::fs::write(a.config_path(), rotated).unwrap();
    let (ok, text) = a.ctl(&["reload"]);
    assert!(ok, "{text}");
    // B's cookies (old secret) still pass at A; A's new cookies pass at A but not yet at B,
    // until B is rotated the same way.
    assert!(valid(&a, &from_b), "the previous secret is still accepted");
    let out = dig(a.addr(), src, &["+cookie", "www.example.com", "A"]);
    let (from_a, _) = dig_cookie(&out).unwrap_or_else(|| panic!("no COOKIE in:\n{out}"));
    assert!(valid(&a, &from_a));
    assert!(!valid(&b, &from_a), "B does not know the new secret yet");
    // A previous_secret without a secret is refused with its key, and the running one stays.
    let bad = std::fs::read_to_string(a.config_path())
        .unwrap()
        .replace(&format!("secret = \"{NEW}\"\n"), "");
    std::fs::write(a.config_path(), bad).unwrap();
    let (ok, text) = a.ctl(&["reload"]);
    assert!(!ok && text.contains("previous_secret"), "{text}");
    assert!(valid(&a, &from_a));
}
