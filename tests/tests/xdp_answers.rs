//! The XDP answer fast path on a veth between two namespaces: dnsd in B with `[xdp]` and a
//! zone marked `xdp_answers = true`; a second dnsd beside it, without XDP, serves the same
//! zones on another port (its queries pass the program). Every query of the set — each name
//! and type of the zone, names that do not exist, with and without EDNS, with DO, small EDNS
//! sizes, 0x20 mixed case, RD, over IPv4 and IPv6 — gets the same bytes from both, and the
//! XDP counters show that most were answered in the kernel. DNS cookies too: a client cookie
//! alone, a valid server cookie (current and previous secret, both dnsd sharing them) and a
//! bad one get dnsd's bytes, but for a server cookie minted in another second. A zone reload
//! flips to the new answers with no old answer served after the first new one.
//!
//! Needs root (CI runs as root); elsewhere it says so loudly and skips.

use std::net::{IpAddr, SocketAddr, UdpSocket};
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use palisade_tests::netns::{self, VethPair};
use palisade_tests::ns_dnsd::{NsDnsd, ctl, stats};
use palisade_tests::wait::wait_for;
use palisade_tests::wire::{QueryOpts, build_query};

/// Sends each query from namespace A to `server` and returns the replies (None: none came).
fn exchange_all(
    pair: &VethPair,
    server: SocketAddr,
    queries: Vec<Vec<u8>>,
) -> Vec<Option<Vec<u8>>> {
    pair.a
        .run(move || {
            let local: IpAddr = if server.is_ipv4() {
                VethPair::A4.into()
            } else {
                VethPair::A6.into()
            };
            let s = UdpSocket::bind(SocketAddr::new(local, 0)).unwrap();
            s.set_read_timeout(Some(Duration::from_millis(300)))
                .unwrap();
            let mut buf = [0u8; 65535];
            queries
                .iter()
                .map(|q| {
                    s.send_to(q, server).unwrap();
                    let end = Instant::now() + Duration::from_millis(600);
                    while Instant::now() < end {
                        match s.recv_from(&mut buf) {
                            Ok((n, from)) if from == server && n >= 2 && buf[..2] == q[..2] => {
                                return Some(buf[..n].to_vec());
                            }
                            Ok(_) => continue,
                            Err(_) => return None,
                        }
                    }
                    None
                })
                .collect()
        })
        .expect("run in namespace A")
}

/// Every (owner name, type) of a zone file, through named-checkzone's canonical dump.
fn names_and_types(origin: &str, file: &Path) -> Vec<(String, u16)> {
    let out = Command::new("named-checkzone")
        .args(["-D", "-o", "-", origin])
        .arg(file)
        .output()
        .expect("named-checkzone (bind9-utils)");
    let text = String::from_utf8_lossy(&out.stdout);
    let mut v: Vec<(String, u16)> = Vec::new();
    for l in text.lines() {
        let f: Vec<&str> = l.split_whitespace().collect();
        if f.len() < 4 || f[2] != "IN" {
            continue;
        }
        let t = match f[3] {
            "A" => 1,
            "NS" => 2,
            "CNAME" => 5,
            "SOA" => 6,
            "MX" => 15,
            "TXT" => 16,
            "AAAA" => 28,
            "SRV" => 33,
            "DNAME" => 39,
            "CAA" => 257,
            "DNSKEY" => 48,
            "DS" => 43,
            _ => continue,
        };
        if !v.contains(&(f[0].to_string(), t)) {
            v.push((f[0].to_string(), t));
        }
    }
    v
}

/// `name` with every other letter upper-cased (the 0x20 trick).
fn mixed_case(name: &str) -> String {
    name.chars()
        .enumerate()
        .map(|(i, c)| {
            if i % 2 == 0 {
                c.to_ascii_uppercase()
            } else {
                c
            }
        })
        .collect()
}

/// The cookie secrets both dnsd share (an anycast set's).
const SECRET: &str = "e5e973e5a6b2a43f48e7dc849e37bfcf";
const PREVIOUS: &str = "0123456789abcdef0123456789abcdef";

/// Whether two replies differ only in the server cookie that ends them, minted in different
/// seconds.
fn cookie_minted_apart(a: &[u8], b: &[u8]) -> bool {
    let n = a.len();
    n == b.len()
        && n > 28
        && a[n - 28..n - 24] == [0, 10, 0, 24]
        && a[..n - 16] == b[..n - 16]
        && a[n - 12..n - 8] != b[n - 12..n - 8]
}

fn config(
    dir: &Path,
    tag: &str,
    port: u16,
    zone: &Path,
    xdp_if: Option<&str>,
) -> std::path::PathBuf {
    config_rrl(dir, tag, port, zone, xdp_if, "enabled = false")
}

/// [`config`] with these `[defence.rrl]` lines.
fn config_rrl(
    dir: &Path,
    tag: &str,
    port: u16,
    zone: &Path,
    xdp_if: Option<&str>,
    rrl: &str,
) -> std::path::PathBuf {
    let mut c = format!(
        "[server]\nlisten = [\"{}\", \"{}\"]\nport = {port}\nworkers = 1\n\n\
         [[zone]]\norigin = \"example.com.\"\nfile = \"{}\"\nxdp_answers = true\n\n\
         [[zone]]\norigin = \"example.net.\"\nfile = \"{}\"\n\n\
         [control]\nsocket = \"{}\"\n\n\
         [defence.rrl]\n{rrl}\n\n\
         [defence.cookies]\nsecret = \"{SECRET}\"\nprevious_secret = \"{PREVIOUS}\"\n",
        VethPair::B4,
        VethPair::B6,
        zone.display(),
        palisade_tests::data_dir()
            .join("example.net.zone")
            .display(),
        dir.join(format!("{tag}.sock")).display(),
    );
    if let Some(i) = xdp_if {
        c.push_str(&format!(
            "\n[xdp]\ninterface = \"{i}\"\nmode = \"auto\"\ndns_ports = [{port}]\nrate = 0\npin = false\n"
        ));
    }
    let path = dir.join(format!("{tag}.toml"));
    std::fs::write(&path, c).unwrap();
    path
}

/// What every test here starts from: a temp dir, a veth pair whose client side takes XDP_TX
/// frames, and a copy of example.com.'s zone in the dir; None (said loudly) without
/// namespaces.
fn setup() -> Option<(tempfile::TempDir, VethPair, std::path::PathBuf)> {
    if let Err(why) = netns::available() {
        palisade_tests::skipped(&format!("XDP answer test: {why}"));
        return None;
    }
    let dir = tempfile::tempdir().unwrap();
    let pair = VethPair::new().expect("veth pair");
    pair.client_takes_xdp_tx(dir.path());
    let zone = dir.path().join("example.com.zone");
    std::fs::copy(palisade_tests::data_dir().join("example.com.zone"), &zone).unwrap();
    Some((dir, pair, zone))
}

#[test]
fn xdp_answers_are_dnsd_answers_byte_for_byte() {
    let Some((dir, pair, zone)) = setup() else {
        return;
    };
    compare_through_xdp(dir.path(), &pair, &zone);
}

#[test]
fn signed_answers_with_do_are_dnsd_answers_byte_for_byte() {
    let Some((dir, pair, _)) = setup() else {
        return;
    };
    palisade_tests::sh(
        dir.path(),
        "dnssec-keygen -q -a ECDSAP256SHA256 -K . example.com",
    );
    palisade_tests::sh(
        dir.path(),
        "dnssec-keygen -q -f KSK -a ECDSAP256SHA256 -K . example.com",
    );
    palisade_tests::sh(
        dir.path(),
        "dnssec-signzone -q -3 aabbccdd -H 0 -o example.com -K . -S -f signed.zone example.com.zone",
    );
    compare_through_xdp(dir.path(), &pair, &dir.path().join("signed.zone"));
}

/// Serves `zone` (example.com.) from a dnsd with XDP answers and one without, and compares
/// the replies to the whole query set.
fn compare_through_xdp(dir: &Path, pair: &VethPair, zone: &Path) {
    let zone = zone.to_path_buf();
    let (fast_port, slow_port) = (5353, 5354);
    let fast_cfg = config(dir, "fast", fast_port, &zone, Some(&pair.if_b));
    let slow_cfg = config(dir, "slow", slow_port, &zone, None);
    let _fast = NsDnsd::start(&pair.b, &fast_cfg);
    let _slow = NsDnsd::start(&pair.b, &slow_cfg);
    let probe = |port: u16| {
        let q = build_query(1, "example.net.", 6, &QueryOpts::udp());
        exchange_all(pair, SocketAddr::new(VethPair::B4.into(), port), vec![q])[0].is_some()
    };
    wait_for("both dnsd to answer", Duration::from_secs(20), || {
        probe(fast_port) && probe(slow_port)
    });
    wait_for("the XDP answers published", Duration::from_secs(20), || {
        stats(&fast_cfg).get("xdp_answers.published") > 0
    });
    let published = stats(&fast_cfg).get("xdp_answers.published");
    eprintln!("XDP answers published: {published}");

    // The query set.
    let mut pairs = names_and_types("example.com", &zone);
    for n in [
        "nx.example.com.",
        "deep.nx.example.com.",
        "www.example.net.",
    ] {
        pairs.push((n.to_string(), 1));
    }
    let extra: Vec<(String, u16)> = pairs
        .iter()
        .flat_map(|(n, _)| [(n.clone(), 1u16), (n.clone(), 28), (n.clone(), 255)])
        .collect();
    pairs.extend(extra);
    pairs.sort();
    pairs.dedup();
    let variants: Vec<(&str, QueryOpts)> = vec![
        ("plain", QueryOpts::udp()),
        ("edns", QueryOpts::edns(1232)),
        ("do", QueryOpts::edns(4096).with_do()),
        ("edns512", QueryOpts::edns(512)),
        (
            "rd",
            QueryOpts {
                rd: true,
                ..QueryOpts::edns(1232)
            },
        ),
    ];
    // Cookies, from the client's address: a client cookie alone, valid server cookies made
    // with the current and the previous secret, and a bad one.
    let client = b"\x01client8".to_vec();
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs() as u32;
    let with_cookie = |c: Vec<u8>| QueryOpts {
        cookie: Some(c),
        ..QueryOpts::edns(1232)
    };
    let cookie_variants = |from: IpAddr| -> Vec<(&str, QueryOpts)> {
        let valid = |key: &str| {
            [
                client.clone(),
                palisade_tests::wire::server_cookie(
                    &palisade_tests::wire::hex16(key),
                    &client,
                    from,
                    now,
                ),
            ]
        };
        let mut bad = valid(SECRET);
        bad[1][15] ^= 1;
        vec![
            ("client cookie", with_cookie(client.clone())),
            ("valid cookie", with_cookie(valid(SECRET).concat())),
            (
                "previous secret's cookie",
                with_cookie(valid(PREVIOUS).concat()),
            ),
            ("bad cookie", with_cookie(bad.concat())),
        ]
    };
    let query_set = |from: IpAddr| {
        let mut queries = Vec::new();
        let mut what = Vec::new();
        let mut id = 100u16;
        let mut all = variants.clone();
        all.extend(cookie_variants(from));
        for (name, t) in &pairs {
            for (vn, opts) in &all {
                for case in [false, true] {
                    let qn = if case { mixed_case(name) } else { name.clone() };
                    id = id.wrapping_add(1);
                    queries.push(build_query(id, &qn, *t, opts));
                    what.push(format!("{qn} type {t} {vn}"));
                }
            }
        }
        (queries, what)
    };
    let before = stats(&fast_cfg);
    let mut mismatches = Vec::new();
    let mut answered_fast = 0;
    let mut apart = 0;
    let mut total = 0;
    for (ip, from) in [
        (IpAddr::from(VethPair::B4), IpAddr::from(VethPair::A4)),
        (IpAddr::from(VethPair::B6), IpAddr::from(VethPair::A6)),
    ] {
        let (queries, what) = query_set(from);
        total += queries.len();
        let fast = exchange_all(pair, SocketAddr::new(ip, fast_port), queries.clone());
        let slow = exchange_all(pair, SocketAddr::new(ip, slow_port), queries.clone());
        for ((f, s), w) in fast.iter().zip(&slow).zip(&what) {
            answered_fast += usize::from(f.is_some());
            if let (Some(f), Some(s)) = (f, s)
                && cookie_minted_apart(f, s)
            {
                apart += 1;
                continue;
            }
            if f != s {
                mismatches.push(format!(
                    "{w} over {ip}: XDP {:02x?}\n  dnsd {:02x?}",
                    f.as_deref().map(|b| &b[..b.len().min(48)]),
                    s.as_deref().map(|b| &b[..b.len().min(48)])
                ));
            }
        }
    }
    let after = stats(&fast_cfg);
    let delta = |k: &str| after.get(k) - before.get(k);
    let answered = delta("xdp.answered");
    let passed_to_dnsd = delta("udp.received");
    eprintln!(
        "{total} queries: {answered} answered in XDP, {passed_to_dnsd} reached dnsd; pass reasons: query {}, miss {}, size {}, no room in the frame {}, cookie {}; cookies valid {}, invalid {}; {apart} cookies minted in another second",
        delta("xdp.answer_pass_query"),
        delta("xdp.answer_pass_miss"),
        delta("xdp.answer_pass_size"),
        delta("xdp.answer_pass_room"),
        delta("xdp.answer_pass_cookie"),
        delta("xdp.answer_cookie_valid"),
        delta("xdp.answer_cookie_invalid"),
    );
    assert!(
        mismatches.is_empty(),
        "{} of {total} replies differ:\n{}",
        mismatches.len(),
        mismatches[..mismatches.len().min(10)].join("\n")
    );
    assert_eq!(answered_fast, total, "every query answered");
    assert!(
        answered * 2 > total as u64,
        "most of the set is answered in XDP: {answered}"
    );
    assert_eq!(
        answered + passed_to_dnsd,
        total as u64,
        "each query answered once: in XDP or by dnsd"
    );
    // Cookies were verified in the kernel: valid ones (two of the four cookie variants) and
    // bad ones, none passed for want of a way to answer them.
    assert!(delta("xdp.answer_cookie_valid") > 0 && delta("xdp.answer_cookie_invalid") > 0);
    assert!(
        delta("xdp.answer_cookie_valid") >= 2 * delta("xdp.answer_cookie_invalid"),
        "valid: current and previous secret"
    );
}

#[test]
fn a_zone_reload_flips_the_xdp_answers_without_mixing() {
    let Some((dir, pair, zone)) = setup() else {
        return;
    };
    let text = std::fs::read_to_string(&zone).unwrap();
    let port = 5353;
    let cfg = config(dir.path(), "fast", port, &zone, Some(&pair.if_b));
    let _d = NsDnsd::start(&pair.b, &cfg);
    let server = SocketAddr::new(VethPair::B4.into(), port);
    let www = |id: u16| build_query(id, "www.example.com.", 1, &QueryOpts::edns(1232));
    wait_for("XDP answers", Duration::from_secs(20), || {
        exchange_all(&pair, server, vec![www(1)])[0].is_some()
            && stats(&cfg).get("xdp_answers.published") > 0
    });
    let a0 = stats(&cfg).get("xdp.answered");
    let old = exchange_all(&pair, server, vec![www(2)])[0]
        .clone()
        .unwrap();
    assert!(
        stats(&cfg).get("xdp.answered") > a0,
        "answered in XDP: route {} frame {} miss {}",
        stats(&cfg).get("xdp.answer_pass_route"),
        stats(&cfg).get("xdp.answer_pass_frame"),
        stats(&cfg).get("xdp.answer_pass_miss")
    );

    // New serial, new address for www; reload while a client keeps asking.
    let new_text = text
        .replace("2026010101 ; serial", "2026010102 ; serial")
        .replace(
            "www         A       192.0.2.80",
            "www         A       192.0.2.81",
        );
    assert_ne!(new_text, text);
    std::fs::write(&zone, new_text).unwrap();
    let asker = {
        let qs: Vec<Vec<u8>> = (0..400).map(|i| www(1000 + i)).collect();
        let p = &pair;
        std::thread::scope(|sc| {
            let h = sc.spawn(move || exchange_all(p, server, qs));
            std::thread::sleep(Duration::from_millis(50));
            let (ok, out) = ctl(&cfg, &["reload"]);
            assert!(ok, "{out}");
            h.join().unwrap()
        })
    };
    let new_addr = [192, 0, 2, 81];
    let old_addr = [192, 0, 2, 80];
    let mut seen_new = false;
    for r in asker.iter().flatten() {
        let is_new = r.windows(4).any(|w| w == new_addr);
        let is_old = r.windows(4).any(|w| w == old_addr);
        if is_new {
            seen_new = true;
        }
        assert!(!(seen_new && is_old), "an old answer after a new one");
    }
    // Answering resumes in XDP with the new data.
    let mut id = 2000;
    wait_for("the new answer from XDP", Duration::from_secs(10), || {
        id += 1;
        let a1 = stats(&cfg).get("xdp.answered");
        let r = exchange_all(&pair, server, vec![www(id)])[0].clone();
        r.is_some_and(|r| r.windows(4).any(|w| w == new_addr) && r[2..] != old[2..])
            && stats(&cfg).get("xdp.answered") > a1
    });
    // The sync thread counts a sync after its flip: the new answer can be seen first.
    wait_for("the second sync counted", Duration::from_secs(5), || {
        stats(&cfg).get("xdp_answers.syncs.ok") >= 2
    });
}

#[test]
fn rrl_in_xdp_slips_with_dnsd_s_bytes() {
    let Some((dir, pair, zone)) = setup() else {
        return;
    };
    let rrl = "responses_per_second = 2\nslip = 2";
    let fast_cfg = config_rrl(dir.path(), "fast", 5353, &zone, Some(&pair.if_b), rrl);
    // RRL in XDP reaches the events as counts per source prefix.
    let events = dir.path().join("events.jsonl");
    let mut c = std::fs::read_to_string(&fast_cfg).unwrap();
    c.push_str(&format!(
        "\n[events]\noutput = \"file:{}\"\ninterval_secs = 1\n",
        events.display()
    ));
    std::fs::write(&fast_cfg, c).unwrap();
    let slow_cfg = config_rrl(dir.path(), "slow", 5354, &zone, None, rrl);
    let fast = NsDnsd::start(&pair.b, &fast_cfg);
    let _slow = NsDnsd::start(&pair.b, &slow_cfg);
    wait_for("the XDP answers published", Duration::from_secs(20), || {
        let (ok, s) = ctl(&fast_cfg, &["stats"]);
        let (ok2, _) = ctl(&slow_cfg, &["stats"]);
        ok && ok2 && palisade_tests::counters::Counters::parse(&s).get("xdp_answers.published") > 0
    });
    for (what, opts) in [
        ("plain", QueryOpts::udp()),
        ("edns do", QueryOpts::edns(1232).with_do()),
    ] {
        // A burst from one source: the first answers, then TC=1 for one in two.
        let queries: Vec<Vec<u8>> = (0..30)
            .map(|i| build_query(500 + i, "www.example.com.", 1, &opts))
            .collect();
        let tc_of = |port: u16| {
            exchange_all(
                &pair,
                SocketAddr::new(VethPair::B4.into(), port),
                queries.clone(),
            )
            .into_iter()
            .flatten()
            .find(|r| r[2] & 0x02 != 0)
            .unwrap_or_else(|| panic!("{what}: no TC reply from port {port}"))
        };
        let before = fast.stats().get("xdp.answer_rrl_slip");
        let from_xdp = tc_of(5353);
        assert!(
            fast.stats().get("xdp.answer_rrl_slip") > before,
            "{what}: slipped in XDP"
        );
        let from_dnsd = tc_of(5354);
        assert_eq!(
            from_xdp[2..],
            from_dnsd[2..],
            "{what}: the slip reply is dnsd's"
        );
    }
    assert!(fast.stats().get("xdp.answer_rrl_drop") > 0);

    // A client cookie alone: over the rate, slipped as dnsd slips it — BADCOOKIE with a
    // fresh cookie (its server cookie may be minted in another second).
    let client = b"rrlcook1".to_vec();
    let burst = |cookie: Vec<u8>, first: u16| -> Vec<Vec<u8>> {
        let opts = QueryOpts {
            cookie: Some(cookie),
            ..QueryOpts::edns(1232)
        };
        (0..30)
            .map(|i| build_query(first + i, "www.example.com.", 1, &opts))
            .collect()
    };
    let badcookie_of = |port: u16, first: u16| {
        exchange_all(
            &pair,
            SocketAddr::new(VethPair::B4.into(), port),
            burst(client.clone(), first),
        )
        .into_iter()
        .flatten()
        .find(|r| r[3] & 0x0f == 7)
        .unwrap_or_else(|| panic!("no BADCOOKIE slip from port {port}"))
    };
    let before = fast.stats().get("xdp.answer_rrl_slip");
    let from_xdp = badcookie_of(5353, 700);
    assert!(
        fast.stats().get("xdp.answer_rrl_slip") > before,
        "slipped in XDP"
    );
    let from_dnsd = badcookie_of(5354, 800);
    assert!(
        from_xdp[2..] == from_dnsd[2..] || cookie_minted_apart(&from_xdp[2..], &from_dnsd[2..]),
        "the BADCOOKIE slip is dnsd's:\n{from_xdp:02x?}\n{from_dnsd:02x?}"
    );
    // A valid server cookie proves the address: a burst far over the rate, all answered in
    // XDP.
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs() as u32;
    let valid = [
        client.clone(),
        palisade_tests::wire::server_cookie(
            &palisade_tests::wire::hex16(SECRET),
            &client,
            VethPair::A4.into(),
            now,
        ),
    ]
    .concat();
    let before = fast.stats();
    let replies = exchange_all(
        &pair,
        SocketAddr::new(VethPair::B4.into(), 5353),
        burst(valid, 900),
    );
    let after = fast.stats();
    let full = replies
        .iter()
        .flatten()
        .filter(|r| r[3] & 0x0f == 0 && r[2] & 0x02 == 0 && r[7] > 0)
        .count();
    assert_eq!(full, 30, "every query with a valid cookie answered in full");
    assert_eq!(
        after.get("xdp.answer_cookie_valid") - before.get("xdp.answer_cookie_valid"),
        30
    );
    assert_eq!(after.get("xdp.answered") - before.get("xdp.answered"), 30);
    // The replies XDP limited, as rate_limited events with reason 1004 for the client's
    // prefix (read from the kernel's buckets every 5 s, flushed every second).
    let prefix = format!(
        "\"prefix\":\"{}/",
        std::net::Ipv4Addr::from(u32::from(VethPair::A4) & 0xffff_ff00)
    );
    wait_for("XDP RRL events", Duration::from_secs(20), || {
        std::fs::read_to_string(&events).is_ok_and(|t| {
            t.lines().any(|l| {
                l.contains("\"action\":\"rate_limited\"")
                    && l.contains("\"reason\":1004")
                    && l.contains(&prefix)
            })
        })
    });
}

#[test]
fn hot_names_of_other_zones_are_answered_in_xdp_while_hot() {
    let Some((dir, pair, zone)) = setup() else {
        return;
    };
    // example.net. is not marked: its hottest names only (`xdp_answers = "hot"`, the default).
    let fast_cfg = config(dir.path(), "fast", 5353, &zone, Some(&pair.if_b));
    let mut c = std::fs::read_to_string(&fast_cfg).unwrap();
    c.push_str("\n[xdp_hot]\nnames = 8\nsample = 1\ninterval_ms = 300\nmin_samples = 3\n");
    std::fs::write(&fast_cfg, c).unwrap();
    let slow_cfg = config(dir.path(), "slow", 5354, &zone, None);
    let fast = NsDnsd::start(&pair.b, &fast_cfg);
    let _slow = NsDnsd::start(&pair.b, &slow_cfg);
    wait_for("the XDP answers published", Duration::from_secs(20), || {
        let (ok, s) = ctl(&fast_cfg, &["stats"]);
        let (ok2, _) = ctl(&slow_cfg, &["stats"]);
        ok && ok2 && palisade_tests::counters::Counters::parse(&s).get("xdp_answers.published") > 0
    });
    let set = |first: u16| -> Vec<Vec<u8>> {
        let mut qs = Vec::new();
        for (i, opts) in [
            QueryOpts::udp(),
            QueryOpts::edns(1232),
            QueryOpts::edns(4096).with_do(),
        ]
        .iter()
        .enumerate()
        {
            for (j, name) in ["www.example.net.", "WwW.ExAmPlE.NeT."].iter().enumerate() {
                qs.push(build_query(first + (i * 2 + j) as u16, name, 1, opts));
            }
        }
        qs
    };
    let ask = |port: u16, first: u16| {
        exchange_all(
            &pair,
            SocketAddr::new(VethPair::B4.into(), port),
            set(first),
        )
    };
    // Not hot yet: dnsd answers.
    let before = fast.stats().get("xdp.answered");
    assert!(ask(5353, 10).iter().all(Option::is_some));
    assert_eq!(fast.stats().get("xdp.answered"), before, "not hot yet");
    // Asked often, the name turns hot and XDP answers it with dnsd's bytes.
    wait_for("www.example.net. hot", Duration::from_secs(20), || {
        ask(5353, 100);
        fast.stats().get("xdp_answers.hot") > 0
    });
    let before = fast.stats().get("xdp.answered");
    let (f, s) = (ask(5353, 200), ask(5354, 200));
    assert!(f.iter().all(Option::is_some));
    assert_eq!(f, s, "hot answers are dnsd's bytes");
    assert_eq!(
        fast.stats().get("xdp.answered") - before,
        f.len() as u64,
        "every query of the hot name answered in XDP"
    );
    // Asked no more, it cools off and dnsd answers again.
    wait_for(
        "www.example.net. cooled off",
        Duration::from_secs(20),
        || fast.stats().get("xdp_answers.hot") == 0,
    );
    let before = fast.stats().get("xdp.answered");
    assert!(ask(5353, 300).iter().all(Option::is_some));
    assert_eq!(fast.stats().get("xdp.answered"), before);
}

/// A zone of `n` names (h0..), serial `serial`.
fn many_names_zone(n: usize, serial: u32) -> String {
    let mut z = format!(
        "$ORIGIN example.com.\n$TTL 3600\n@ SOA ns1 hostmaster {serial} 7200 3600 1209600 300\n\
         @ NS ns1\nns1 A 192.0.2.53\n"
    );
    for i in 0..n {
        z.push_str(&format!("h{i} A 192.0.2.{}\n", i % 250 + 1));
    }
    z
}

#[test]
fn every_publish_fits_beside_the_live_generation() {
    let Some((dir, pair, zone)) = setup() else {
        return;
    };
    const N: usize = 40;
    let port = 5353;
    let server = SocketAddr::new(VethPair::B4.into(), port);
    let q = |i: usize, id: u16| {
        build_query(id, &format!("h{i}.example.com."), 1, &QueryOpts::edns(1232))
    };
    // How many entries the zone compiles to, with room to spare.
    std::fs::write(&zone, many_names_zone(N, 1)).unwrap();
    let entries = {
        let cfg = config(dir.path(), "probe", port, &zone, Some(&pair.if_b));
        let _d = NsDnsd::start(&pair.b, &cfg);
        wait_for("dnsd", Duration::from_secs(20), || ctl(&cfg, &["status"]).0);
        wait_for("XDP answers", Duration::from_secs(20), || {
            stats(&cfg).get("xdp_answers.published") > 0
        });
        stats(&cfg).get("xdp_answers.published")
    };
    assert!(entries >= N as u64, "{entries} entries");
    for share in [0.6, 0.9] {
        let room = (entries as f64 / share).ceil() as u64;
        let tag = format!("at{}", (share * 100.0) as u32);
        let cfg = config(dir.path(), &tag, port, &zone, Some(&pair.if_b));
        let text = std::fs::read_to_string(&cfg).unwrap().replace(
            "pin = false\n",
            &format!("pin = false\nanswer_entries = {room}\n"),
        );
        std::fs::write(&cfg, text).unwrap();
        let _d = NsDnsd::start(&pair.b, &cfg);
        wait_for("dnsd", Duration::from_secs(20), || ctl(&cfg, &["status"]).0);
        wait_for("XDP answers", Duration::from_secs(20), || {
            stats(&cfg).get("xdp_answers.syncs.ok") >= 1
        });
        for publish in 0..5u32 {
            if publish > 0 {
                let syncs = stats(&cfg).get("xdp_answers.syncs.ok");
                std::fs::write(&zone, many_names_zone(N, 1 + publish)).unwrap();
                let (ok, out) = ctl(&cfg, &["reload"]);
                assert!(ok, "{out}");
                wait_for("the publish", Duration::from_secs(10), || {
                    stats(&cfg).get("xdp_answers.syncs.ok") > syncs
                });
            }
            let st = stats(&cfg);
            assert_eq!(
                st.get("xdp_answers.full"),
                0,
                "{share}: publish {publish} lost answers: {st:?}"
            );
            let a0 = stats(&cfg).get("xdp.answered");
            let qs: Vec<Vec<u8>> = (0..N).map(|i| q(i, 100 + i as u16)).collect();
            let got = exchange_all(&pair, server, qs);
            assert!(
                got.iter().all(Option::is_some),
                "{share}: publish {publish}: unanswered"
            );
            let a1 = stats(&cfg).get("xdp.answered");
            assert_eq!(
                a1 - a0,
                N as u64,
                "{share} of answer_entries ({room}), publish {publish}: every name answered in XDP"
            );
        }
    }
}

/// Builds an Ethernet frame carrying `dns` over UDP from the client to dnsd at `port`, with
/// the fields a test spoils.
struct Frame {
    dst_mac: [u8; 6],
    src_mac: [u8; 6],
    vlan: Option<u16>,
    v6: bool,
    src4: [u8; 4],
    src6: Option<[u8; 16]>,
    dst6: Option<[u8; 16]>,
    bad_ip_csum: bool,
    ip_len_extra: i32,
    sport: u16,
    zero_udp_csum: bool,
}

fn mac(s: &str) -> [u8; 6] {
    let v: Vec<u8> = s
        .split(':')
        .map(|h| u8::from_str_radix(h, 16).unwrap())
        .collect();
    v.try_into().unwrap()
}

fn csum_fold(mut s: u32) -> u16 {
    while s > 0xffff {
        s = (s & 0xffff) + (s >> 16);
    }
    !(s as u16)
}

fn sum16(b: &[u8]) -> u32 {
    b.chunks(2)
        .map(|c| u32::from(c[0]) << 8 | u32::from(*c.get(1).unwrap_or(&0)))
        .sum()
}

impl Frame {
    fn good() -> Frame {
        Frame {
            dst_mac: mac(VethPair::MAC_B),
            src_mac: mac(VethPair::MAC_A),
            vlan: None,
            v6: false,
            src4: VethPair::A4.octets(),
            src6: None,
            dst6: None,
            bad_ip_csum: false,
            ip_len_extra: 0,
            sport: 40000,
            zero_udp_csum: false,
        }
    }

    fn bytes(&self, port: u16, dns: &[u8]) -> Vec<u8> {
        let mut udp = Vec::new();
        udp.extend_from_slice(&self.sport.to_be_bytes());
        udp.extend_from_slice(&port.to_be_bytes());
        udp.extend_from_slice(&((8 + dns.len()) as u16).to_be_bytes());
        udp.extend_from_slice(&[0, 0]);
        udp.extend_from_slice(dns);
        let mut f = Vec::new();
        f.extend_from_slice(&self.dst_mac);
        f.extend_from_slice(&self.src_mac);
        if let Some(v) = self.vlan {
            f.extend_from_slice(&[0x81, 0x00]);
            f.extend_from_slice(&v.to_be_bytes());
        }
        let ip_len = |base: usize| (base as i32 + self.ip_len_extra) as u16;
        if self.v6 {
            let src = self.src6.unwrap_or(VethPair::A6.octets());
            let dst = self.dst6.unwrap_or(VethPair::B6.octets());
            let mut pseudo = Vec::new();
            pseudo.extend_from_slice(&src);
            pseudo.extend_from_slice(&dst);
            pseudo.extend_from_slice(&(udp.len() as u32).to_be_bytes());
            pseudo.extend_from_slice(&[0, 0, 0, 17]);
            let c = csum_fold(sum16(&pseudo) + sum16(&udp));
            let c = if self.zero_udp_csum { 0 } else { c };
            udp[6..8].copy_from_slice(&c.to_be_bytes());
            f.extend_from_slice(&[0x86, 0xdd, 0x60, 0, 0, 0]);
            f.extend_from_slice(&ip_len(udp.len()).to_be_bytes());
            f.extend_from_slice(&[17, 64]);
            f.extend_from_slice(&src);
            f.extend_from_slice(&dst);
        } else {
            let dst = VethPair::B4.octets();
            let mut pseudo = Vec::new();
            pseudo.extend_from_slice(&self.src4);
            pseudo.extend_from_slice(&dst);
            pseudo.extend_from_slice(&[0, 17]);
            pseudo.extend_from_slice(&(udp.len() as u16).to_be_bytes());
            let c = csum_fold(sum16(&pseudo) + sum16(&udp));
            udp[6..8].copy_from_slice(&c.to_be_bytes());
            let mut ip = vec![0x45, 0];
            ip.extend_from_slice(&ip_len(20 + udp.len()).to_be_bytes());
            ip.extend_from_slice(&[0xbe, 0xef, 0, 0, 64, 17, 0, 0]);
            ip.extend_from_slice(&self.src4);
            ip.extend_from_slice(&dst);
            let c = csum_fold(sum16(&ip)) ^ u16::from(self.bad_ip_csum);
            ip[10..12].copy_from_slice(&c.to_be_bytes());
            f.extend_from_slice(&[0x08, 0x00]);
            f.extend_from_slice(&ip);
        }
        f.extend_from_slice(&udp);
        f
    }
}

/// Sends raw `frames` on the client's veth (inside its namespace), one by one.
fn send_raw(pair: &VethPair, frames: Vec<Vec<u8>>) {
    let ifname = pair.if_a.clone();
    pair.a
        .run(move || {
            // SAFETY: plain socket calls on a descriptor this closure owns and closes.
            unsafe {
                let fd = libc::socket(libc::AF_PACKET, libc::SOCK_RAW, 0);
                assert!(fd >= 0, "AF_PACKET socket");
                let name = std::ffi::CString::new(ifname).unwrap();
                let index = libc::if_nametoindex(name.as_ptr());
                assert!(index > 0);
                let mut sa: libc::sockaddr_ll = std::mem::zeroed();
                sa.sll_family = libc::AF_PACKET as u16;
                sa.sll_ifindex = index as i32;
                sa.sll_halen = 6;
                for f in &frames {
                    let n = libc::sendto(
                        fd,
                        f.as_ptr().cast(),
                        f.len(),
                        0,
                        (&sa as *const libc::sockaddr_ll).cast(),
                        std::mem::size_of::<libc::sockaddr_ll>() as u32,
                    );
                    assert_eq!(n, f.len() as isize, "sendto");
                }
                libc::close(fd);
            }
        })
        .expect("in the client's namespace");
}

/// The fast path answers only frames the kernel would take and sources a reply may go to:
/// a bad IPv4 header checksum, an IP length that is not the datagram's, a group source MAC
/// (the reply went to the whole segment), a VLAN tag, a loopback, multicast, broadcast or
/// own source, source port 0, a zero UDP checksum over IPv6 and an IPv4-mapped IPv6
/// destination were all answered in XDP, while the kernel dropped every one of them.
#[test]
fn xdp_answers_only_frames_the_kernel_would_take() {
    let Some((dir, pair, zone)) = setup() else {
        return;
    };
    let port = 5353;
    let cfg = config(dir.path(), "fast", port, &zone, Some(&pair.if_b));
    let _fast = NsDnsd::start(&pair.b, &cfg);
    let q = build_query(7, "www.example.com.", 1, &QueryOpts::edns(1232));
    wait_for("dnsd to answer", Duration::from_secs(20), || {
        exchange_all(
            &pair,
            SocketAddr::new(VethPair::B4.into(), port),
            vec![q.clone()],
        )[0]
        .is_some()
    });
    wait_for("the XDP answers published", Duration::from_secs(20), || {
        stats(&cfg).get("xdp_answers.published") > 0
    });
    // Control: a good frame, sent the same way, is answered in XDP (until it is, the
    // answers may not be in the kernel yet).
    wait_for(
        "a good raw frame answered in XDP",
        Duration::from_secs(20),
        || {
            let before = stats(&cfg).get("xdp.answered");
            send_raw(&pair, vec![Frame::good().bytes(port, &q)]);
            std::thread::sleep(Duration::from_millis(50));
            stats(&cfg).get("xdp.answered") > before
        },
    );
    let mut v6 = Frame::good();
    v6.v6 = true;
    let mut mapped = [0u8; 16];
    mapped[10] = 0xff;
    mapped[11] = 0xff;
    mapped[12..].copy_from_slice(&VethPair::B4.octets());
    // Each case is a good frame with one thing spoiled.
    fn spoilt(f: impl FnOnce(&mut Frame)) -> Frame {
        let mut x = Frame::good();
        f(&mut x);
        x
    }
    let odd: Vec<(&str, Frame)> = vec![
        ("bad IPv4 header checksum", spoilt(|f| f.bad_ip_csum = true)),
        ("IPv4 length 4 long", spoilt(|f| f.ip_len_extra = 4)),
        ("IPv4 length 4 short", spoilt(|f| f.ip_len_extra = -4)),
        ("broadcast source MAC", spoilt(|f| f.src_mac = [0xff; 6])),
        ("VLAN tag", spoilt(|f| f.vlan = Some(5))),
        ("loopback source", spoilt(|f| f.src4 = [127, 0, 0, 1])),
        ("multicast source", spoilt(|f| f.src4 = [224, 0, 0, 1])),
        ("broadcast source", spoilt(|f| f.src4 = [255; 4])),
        ("own source", spoilt(|f| f.src4 = VethPair::B4.octets())),
        ("source port 0", spoilt(|f| f.sport = 0)),
        (
            "IPv6 zero UDP checksum",
            spoilt(|f| {
                f.zero_udp_csum = true;
                f.v6 = true;
            }),
        ),
        (
            "IPv6 length 4 long",
            spoilt(|f| {
                f.ip_len_extra = 4;
                f.v6 = true;
            }),
        ),
        (
            "IPv4-mapped IPv6 destination",
            spoilt(|f| {
                f.dst6 = Some(mapped);
                f.v6 = true;
            }),
        ),
    ];
    for (what, f) in odd {
        let before = stats(&cfg);
        send_raw(&pair, vec![f.bytes(port, &q); 3]);
        std::thread::sleep(Duration::from_millis(100));
        let after = stats(&cfg);
        assert_eq!(
            after.get("xdp.answered"),
            before.get("xdp.answered"),
            "{what}: answered in XDP"
        );
        // Counted as passed untried (the IPv4-mapped destination is no address answered
        // here: not the fast path's to count).
        if !what.contains("mapped") {
            assert_eq!(
                after.get("xdp.answer_pass_frame") - before.get("xdp.answer_pass_frame"),
                3,
                "{what}: counted as a frame not answered from"
            );
        }
    }
    // IPv6 itself is answered.
    wait_for(
        "a good IPv6 frame answered in XDP",
        Duration::from_secs(5),
        || {
            let before = stats(&cfg).get("xdp.answered");
            send_raw(&pair, vec![v6.bytes(port, &q)]);
            std::thread::sleep(Duration::from_millis(50));
            stats(&cfg).get("xdp.answered") > before
        },
    );
}

/// Sends `frame` on the client's veth and returns the destination MACs of the replies from
/// `port` seen on that link within 300 ms (a veth hands its peer every frame, whatever MAC
/// it is addressed to: what went to another host is seen too).
fn replies_seen(pair: &VethPair, frame: Vec<u8>, port: u16) -> Vec<[u8; 6]> {
    let ifname = pair.if_a.clone();
    pair.a
        .run(move || {
            // SAFETY: plain socket calls on a descriptor this closure owns and closes; the
            // buffer outlives every recv into it.
            unsafe {
                let proto = (libc::ETH_P_ALL as u16).to_be();
                let fd = libc::socket(libc::AF_PACKET, libc::SOCK_RAW, i32::from(proto));
                assert!(fd >= 0, "AF_PACKET socket");
                let name = std::ffi::CString::new(ifname).unwrap();
                let index = libc::if_nametoindex(name.as_ptr());
                let mut sa: libc::sockaddr_ll = std::mem::zeroed();
                sa.sll_family = libc::AF_PACKET as u16;
                sa.sll_protocol = proto;
                sa.sll_ifindex = index as i32;
                sa.sll_halen = 6;
                let len = std::mem::size_of::<libc::sockaddr_ll>() as u32;
                assert_eq!(
                    libc::bind(fd, (&sa as *const libc::sockaddr_ll).cast(), len),
                    0
                );
                let tv = libc::timeval {
                    tv_sec: 0,
                    tv_usec: 50_000,
                };
                libc::setsockopt(
                    fd,
                    libc::SOL_SOCKET,
                    libc::SO_RCVTIMEO,
                    (&tv as *const libc::timeval).cast(),
                    std::mem::size_of::<libc::timeval>() as u32,
                );
                let n = libc::sendto(
                    fd,
                    frame.as_ptr().cast(),
                    frame.len(),
                    0,
                    (&sa as *const libc::sockaddr_ll).cast(),
                    len,
                );
                assert_eq!(n, frame.len() as isize, "sendto");
                let mut seen = Vec::new();
                let mut buf = [0u8; 2048];
                let end = std::time::Instant::now() + Duration::from_millis(300);
                while std::time::Instant::now() < end {
                    let mut from: libc::sockaddr_ll = std::mem::zeroed();
                    let mut flen = len;
                    let n = libc::recvfrom(
                        fd,
                        buf.as_mut_ptr().cast(),
                        buf.len(),
                        0,
                        (&mut from as *mut libc::sockaddr_ll).cast(),
                        &mut flen,
                    );
                    // Only what arrived (not what this socket sent), UDP from `port`.
                    if n < 62 || from.sll_pkttype == libc::PACKET_OUTGOING {
                        continue;
                    }
                    let f = &buf[..n as usize];
                    let v4 =
                        f[12..14] == [0x08, 0x00] && f[23] == 17 && f[34..36] == port.to_be_bytes();
                    let v6 =
                        f[12..14] == [0x86, 0xdd] && f[20] == 17 && f[54..56] == port.to_be_bytes();
                    if v4 || v6 {
                        seen.push(f[..6].try_into().unwrap());
                    }
                }
                libc::close(fd);
                seen
            }
        })
        .expect("in the client's namespace")
}

/// XDP's answers go where the kernel's routes send replies, never simply back to the
/// frame's sender: an on-link host forging another address (a victim's) had the fast path
/// answer it — with a server cookie minted for that address, which then took the victim's
/// forged queries past RRL — and frames sent to another host's MAC, or from sources the
/// kernel would not answer (no route, an unresolved neighbour, the subnet's broadcast), were
/// answered too, the reply sent in another host's name.
#[test]
fn xdp_answers_go_where_the_kernels_routes_send_them() {
    let Some((dir, pair, zone)) = setup() else {
        return;
    };
    let port = 5353;
    let cfg = config(dir.path(), "routed", port, &zone, Some(&pair.if_b));
    let _fast = NsDnsd::start(&pair.b, &cfg);
    // With a client cookie: an answer would carry a server cookie minted for the source.
    let mut opts = QueryOpts::edns(1232);
    opts.cookie = Some(b"ATTACKER".to_vec());
    let q = build_query(7, "www.example.com.", 1, &opts);
    answering_in_xdp(&pair, SocketAddr::new(VethPair::B4.into(), port), &cfg, &q);
    // The client's own frame is answered in XDP, to its MAC.
    let mine = replies_seen(&pair, Frame::good().bytes(port, &q), port);
    assert_eq!(mine, vec![mac(VethPair::MAC_A)], "the client's own query");
    fn forged(f: impl FnOnce(&mut Frame)) -> Frame {
        let mut x = Frame::good();
        f(&mut x);
        x
    }
    let cases: Vec<(&str, Frame)> = vec![
        (
            "sent to another host's MAC",
            forged(|f| f.dst_mac = [0x02, 0, 0, 0, 0, 0x99]),
        ),
        (
            "an on-link source with no neighbour",
            forged(|f| f.src4 = [192, 0, 2, 77]),
        ),
        (
            "the subnet's broadcast",
            forged(|f| f.src4 = [192, 0, 2, 255]),
        ),
        (
            "a source with no route",
            forged(|f| f.src4 = [198, 51, 100, 7]),
        ),
    ];
    for (what, f) in cases {
        let before = stats(&cfg);
        let seen = replies_seen(&pair, f.bytes(port, &q), port);
        let after = stats(&cfg);
        assert_eq!(
            after.get("xdp.answered"),
            before.get("xdp.answered"),
            "{what}: answered in XDP"
        );
        assert_eq!(
            after.get("xdp.answer_pass_route") - before.get("xdp.answer_pass_route"),
            1,
            "{what}: passed for its route"
        );
        assert!(
            !seen.contains(&mac(VethPair::MAC_A)),
            "{what}: a reply came back to the sender: {seen:02x?}"
        );
    }
    // IPv6 alike: the client's own query answered to it (its neighbour resolved by a query
    // through the kernel), an on-link source with no neighbour passed.
    let q6 = build_query(8, "www.example.com.", 1, &opts);
    answering_in_xdp(&pair, SocketAddr::new(VethPair::B6.into(), port), &cfg, &q6);
    let v6 = forged(|f| f.v6 = true);
    assert_eq!(
        replies_seen(&pair, v6.bytes(port, &q6), port),
        vec![mac(VethPair::MAC_A)],
        "the client's own IPv6 query"
    );
    let mut unresolved = VethPair::A6.octets();
    unresolved[15] = 0x77;
    let before = stats(&cfg);
    let seen = replies_seen(
        &pair,
        forged(|f| {
            f.v6 = true;
            f.src6 = Some(unresolved);
        })
        .bytes(port, &q6),
        port,
    );
    let after = stats(&cfg);
    assert!(!seen.contains(&mac(VethPair::MAC_A)), "{seen:02x?}");
    assert_eq!(
        after.get("xdp.answer_pass_route") - before.get("xdp.answer_pass_route"),
        1,
        "an IPv6 source with no neighbour"
    );
    // A victim on the link (its neighbour entry known): a query forged in its name is
    // answered, to the victim, not to the forger.
    let victim = [0x02, 0, 0xc0, 0, 0x02, 0x09];
    pair.b
        .ip(&[
            "neigh",
            "replace",
            "192.0.2.9",
            "lladdr",
            "02:00:c0:00:02:09",
            "dev",
            &pair.if_b,
            "nud",
            "permanent",
        ])
        .unwrap();
    let seen = replies_seen(
        &pair,
        forged(|f| f.src4 = [192, 0, 2, 9]).bytes(port, &q),
        port,
    );
    assert_eq!(seen, vec![victim], "the forged victim's answer");
    // Off the link, through the client as its router: answered, to the router.
    pair.b
        .ip(&[
            "route",
            "add",
            "198.51.100.0/24",
            "via",
            "192.0.2.1",
            "dev",
            &pair.if_b,
        ])
        .unwrap();
    let before = stats(&cfg).get("xdp.answered");
    let seen = replies_seen(
        &pair,
        forged(|f| f.src4 = [198, 51, 100, 7]).bytes(port, &q),
        port,
    );
    assert_eq!(
        seen,
        vec![mac(VethPair::MAC_A)],
        "routed through the client"
    );
    assert_eq!(stats(&cfg).get("xdp.answered"), before + 1);
}

/// Waits until dnsd at `server` (config `cfg`) answers `q`, and answers it in XDP.
fn answering_in_xdp(pair: &VethPair, server: SocketAddr, cfg: &Path, q: &[u8]) {
    wait_for("dnsd to answer", Duration::from_secs(20), || {
        exchange_all(pair, server, vec![q.to_vec()])[0].is_some()
    });
    wait_for("answered in XDP", Duration::from_secs(20), || {
        let before = stats(cfg).get("xdp.answered");
        exchange_all(pair, server, vec![q.to_vec()]);
        stats(cfg).get("xdp.answered") > before
    });
}

/// A source dnsd made a suspect (forged-looking UDP that reached an escalation) gets no
/// answer from the fast path: its queries pass to dnsd, which answers them TC=1 with the
/// question alone in the escalating tenant's zones (in full in the others'). The fast path
/// gave it full answers from every zone it holds.
#[test]
fn a_suspect_source_is_never_answered_in_xdp() {
    let Some((dir, pair, zone)) = setup() else {
        return;
    };
    let port = 5353;
    let cfg = config(dir.path(), "fast", port, &zone, Some(&pair.if_b));
    let rules = dir.path().join("rules.toml");
    std::fs::write(
        &rules,
        "[[tenant]]\nid = 7\n\
         escalate = { after = 3, window_secs = 60, block_secs = 600, on = [\"deny\"], dns = \"block_map\" }\n\
         [[tenant.rule]]\nname = \"no-any\"\naction = \"deny\"\nrcode = \"REFUSED\"\n\
         when = [{ attr = \"qtype\", one_of = [\"ANY\"] }]\n",
    )
    .unwrap();
    let text = std::fs::read_to_string(&cfg).unwrap().replacen(
        "origin = \"example.net.\"",
        "origin = \"example.net.\"\ntenant = 7",
        1,
    ) + &format!("\n[rules]\nfile = \"{}\"\n", rules.display());
    std::fs::write(&cfg, text).unwrap();
    let _fast = NsDnsd::start(&pair.b, &cfg);
    let server = SocketAddr::new(VethPair::B4.into(), port);
    let q = build_query(7, "www.example.com.", 1, &QueryOpts::edns(1232));
    answering_in_xdp(&pair, server, &cfg, &q);
    // Denied ANY over UDP (unproven) from the client: a suspect, not a block.
    let any = build_query(8, "example.net.", 255, &QueryOpts::edns(1232).with_rd());
    exchange_all(&pair, server, vec![any; 4]);
    let (_, list) = ctl(&cfg, &["block", "list"]);
    assert!(list.contains("suspect"), "{list}");
    std::thread::sleep(Duration::from_millis(300));
    let before = stats(&cfg);
    let replies = exchange_all(&pair, server, vec![q.clone(); 3]);
    let after = stats(&cfg);
    assert_eq!(
        after.get("xdp.answered"),
        before.get("xdp.answered"),
        "a suspect answered in XDP"
    );
    assert_eq!(
        after.get("xdp.answer_pass_suspect") - before.get("xdp.answer_pass_suspect"),
        3,
        "a suspect's queries counted as passed untried"
    );
    // A suspect of tenant 7's rules: dnsd answers it in full for another tenant's zone, TC=1
    // for tenant 7's.
    let r = replies[0].as_ref().expect("dnsd's reply");
    assert_eq!(
        u16::from_be_bytes([r[2], r[3]]) & 0x0200,
        0,
        "another tenant's zone: answered in full"
    );
    let own = build_query(9, "www.example.net.", 1, &QueryOpts::edns(1232));
    let replies = exchange_all(&pair, server, vec![own]);
    let r = replies[0].as_ref().expect("dnsd's reply");
    assert_ne!(
        u16::from_be_bytes([r[2], r[3]]) & 0x0200,
        0,
        "dnsd answers a suspect TC=1 for the escalating tenant's zone"
    );
}

/// A rules reload that gives a zone's tenant rules takes its names out of XDP before dnsd
/// applies them: once dnsd refuses a name the new rules deny, XDP never answers it again. The
/// reload woke the publisher, which compiled with the old rules and flipped: XDP answered
/// the newly denied name for one more compilation (35–80 ms in a probe).
#[test]
fn a_rules_reload_that_denies_a_name_is_never_met_by_an_xdp_answer() {
    let Some((dir, pair, zone)) = setup() else {
        return;
    };
    let port = 5353;
    let cfg = config(dir.path(), "fast", port, &zone, Some(&pair.if_b));
    let rules = dir.path().join("rules.toml");
    std::fs::write(&rules, "[[tenant]]\nid = 7\n").unwrap();
    let text = std::fs::read_to_string(&cfg).unwrap().replacen(
        "origin = \"example.com.\"",
        "origin = \"example.com.\"\ntenant = 7",
        1,
    ) + &format!("\n[rules]\nfile = \"{}\"\n", rules.display());
    std::fs::write(&cfg, text).unwrap();
    let _fast = NsDnsd::start(&pair.b, &cfg);
    let server = SocketAddr::new(VethPair::B4.into(), port);
    let www = |id: u16| build_query(id, "www.example.com.", 1, &QueryOpts::edns(1232));
    answering_in_xdp(&pair, server, &cfg, &www(1));
    std::fs::write(
        &rules,
        "[[tenant]]\nid = 7\n[[tenant.rule]]\nname = \"no-www\"\naction = \"deny\"\n\
         rcode = \"REFUSED\"\nwhen = [{ attr = \"qname\", exact = \"www.example.com.\" }]\n",
    )
    .unwrap();
    // A UDP query (XDP's, while it holds the name) and a TCP one (dnsd's alone) in turn,
    // across the reload: once dnsd refuses the name, XDP never answers it again.
    let rcode = |r: &[u8]| u16::from_be_bytes([r[2], r[3]]) & 0xF;
    let answered0 = stats(&cfg).get("xdp.answered");
    let turns = {
        let p = &pair;
        std::thread::scope(|sc| {
            let h = sc.spawn(move || {
                p.a.run(move || {
                    let s = UdpSocket::bind(SocketAddr::new(VethPair::A4.into(), 0)).unwrap();
                    s.set_read_timeout(Some(Duration::from_millis(300)))
                        .unwrap();
                    let mut buf = [0u8; 4096];
                    let mut out = Vec::new();
                    let end = Instant::now() + Duration::from_millis(1500);
                    for i in 0..20_000u16 {
                        if Instant::now() > end {
                            break;
                        }
                        let q = build_query(i, "www.example.com.", 1, &QueryOpts::edns(1232));
                        s.send_to(&q, server).unwrap();
                        let udp = match s.recv_from(&mut buf) {
                            Ok((n, _)) if n >= 4 && buf[..2] == q[..2] => Some(rcode(&buf[..n])),
                            _ => None,
                        };
                        let tcp = palisade_tests::client::tcp_exchange(
                            server,
                            &q,
                            Duration::from_millis(500),
                        )
                        .ok()
                        .flatten()
                        .map(|r| rcode(&r));
                        out.push((udp, tcp));
                    }
                    out
                })
                .expect("run in namespace A")
            });
            std::thread::sleep(Duration::from_millis(300));
            let (ok, out) = ctl(&cfg, &["reload"]);
            assert!(ok, "{out}");
            h.join().unwrap()
        })
    };
    let first = turns
        .iter()
        .position(|&(_, tcp)| tcp == Some(5))
        .expect("dnsd refused the name over TCP");
    assert!(first > 0, "the reload came after the first turns");
    assert!(
        stats(&cfg).get("xdp.answered") - answered0 >= first as u64 / 2,
        "XDP answered the turns before the reload"
    );
    for (i, &(udp, _)) in turns.iter().enumerate().skip(first + 1) {
        assert_ne!(
            udp,
            Some(0),
            "turn {i}: answered over UDP after dnsd refused at {first}"
        );
    }
    // Denied from now on, by dnsd alone.
    let before = stats(&cfg).get("xdp.answered");
    let r = exchange_all(&pair, server, vec![www(9000)])[0]
        .clone()
        .expect("REFUSED");
    assert_eq!(rcode(&r), 5);
    assert_eq!(stats(&cfg).get("xdp.answered"), before);
}

/// A source of `[defence.rrl] exempt` is not rate-limited in XDP either: dnsd answers it in
/// full, and the fast path answered 10 of 40, slipping or dropping the rest.
#[test]
fn an_rrl_exempt_source_is_answered_in_full_in_xdp() {
    let Some((dir, pair, zone)) = setup() else {
        return;
    };
    let rrl = format!(
        "responses_per_second = 2\nslip = 2\nexempt = [\"{}/32\"]",
        VethPair::A4
    );
    let cfg = config_rrl(dir.path(), "fast", 5353, &zone, Some(&pair.if_b), &rrl);
    let _fast = NsDnsd::start(&pair.b, &cfg);
    let server = SocketAddr::new(VethPair::B4.into(), 5353);
    let q = build_query(7, "www.example.com.", 1, &QueryOpts::edns(1232));
    answering_in_xdp(&pair, server, &cfg, &q);
    let before = stats(&cfg);
    let queries: Vec<Vec<u8>> = (0..40)
        .map(|i| build_query(900 + i, "www.example.com.", 1, &QueryOpts::edns(1232)))
        .collect();
    let replies = exchange_all(&pair, server, queries);
    let after = stats(&cfg);
    let full = replies
        .iter()
        .flatten()
        .filter(|r| r[2] & 0x02 == 0)
        .count();
    assert_eq!(full, 40, "answered in full");
    assert_eq!(
        after.get("xdp.answer_rrl_slip") + after.get("xdp.answer_rrl_drop"),
        before.get("xdp.answer_rrl_slip") + before.get("xdp.answer_rrl_drop"),
        "limited in XDP"
    );
    assert!(after.get("xdp.answered") >= before.get("xdp.answered") + 40);
}

/// Sends `n` queries for www.example.com. (EDNS) from namespace A to `server`, one after the
/// other: how many were answered in full (records, no TC).
fn www_answered_in_full(pair: &VethPair, server: SocketAddr, n: u16) -> usize {
    let queries: Vec<Vec<u8>> = (0..n)
        .map(|i| build_query(900 + i, "www.example.com.", 1, &QueryOpts::edns(1232)))
        .collect();
    exchange_all(pair, server, queries)
        .iter()
        .flatten()
        .filter(|r| r[2] & 0x02 == 0 && r[7] > 0)
        .count()
}

/// What XDP answers is limited by its RRL, per source and name, and not counted in the
/// per-source `[xdp] rate` (which counts what goes on to dnsd): a source's queries for one
/// name spent its bucket of every other name's (the XDP rate held 20 answered queries to its
/// burst of 10); with RRL off they are counted in it.
#[test]
fn xdp_answers_are_limited_by_rrl_not_by_the_source_rate() {
    let Some((dir, pair, zone)) = setup() else {
        return;
    };
    let rate_of = |cfg: &Path| {
        let c = std::fs::read_to_string(cfg)
            .unwrap()
            .replace("rate = 0\n", "rate = 5\nburst = 10\n");
        std::fs::write(cfg, c).unwrap();
    };
    let rrl = "responses_per_second = 20\nslip = 2";
    let cfg = config_rrl(dir.path(), "fast", 5353, &zone, Some(&pair.if_b), rrl);
    rate_of(&cfg);
    let fast = NsDnsd::start(&pair.b, &cfg);
    let server = SocketAddr::new(VethPair::B4.into(), 5353);
    let q = build_query(7, "www.example.com.", 1, &QueryOpts::edns(1232));
    answering_in_xdp(&pair, server, &cfg, &q);
    // A second for the buckets the wait spent to fill again.
    std::thread::sleep(Duration::from_millis(2100));
    let before = stats(&cfg);
    let full = www_answered_in_full(&pair, server, 20);
    let after = stats(&cfg);
    assert_eq!(full, 20, "answered in full: {before:?} -> {after:?}");
    assert_eq!(after.get("xdp.answered") - before.get("xdp.answered"), 20);
    assert_eq!(
        after.get("xdp.drop_ratelimit") + after.get("xdp.rate_slip"),
        before.get("xdp.drop_ratelimit") + before.get("xdp.rate_slip"),
        "nothing held by the source rate"
    );
    drop(fast);

    // RRL off: the answers count in the source's rate, which bounds what one address gets.
    let cfg = config_rrl(
        dir.path(),
        "norrl",
        5355,
        &zone,
        Some(&pair.if_b),
        "enabled = false",
    );
    rate_of(&cfg);
    let _fast = NsDnsd::start(&pair.b, &cfg);
    let server = SocketAddr::new(VethPair::B4.into(), 5355);
    answering_in_xdp(&pair, server, &cfg, &q);
    let before = stats(&cfg);
    let full = www_answered_in_full(&pair, server, 40);
    let after = stats(&cfg);
    assert!(full < 40, "{full} of 40 answered: {before:?} -> {after:?}");
    assert!(
        after.get("xdp.drop_ratelimit") + after.get("xdp.rate_slip")
            > before.get("xdp.drop_ratelimit") + before.get("xdp.rate_slip"),
        "{before:?} -> {after:?}"
    );
}

/// Maps replaced by `xdp-guard attach` of another size (the operator raising
/// `answer_entries` under attack) hold no answer: dnsd publishes every one again into them,
/// where it went on counting the old publish while every query passed to it.
#[test]
fn maps_replaced_by_xdp_guard_get_every_answer_again() {
    let Some((dir, pair, zone)) = setup() else {
        return;
    };
    let port = 5353;
    let guard_pins = netns::Pins::new(&pair.b, "xa");
    let pins = &guard_pins.path;
    let attach = |entries: u32| {
        let guard = dir.path().join("guard.toml");
        std::fs::write(
            &guard,
            format!(
                "interface = \"{}\"\nmode = \"auto\"\ndns_ports = [{port}]\nrate = 0\n\
                 pin_path = \"{}\"\nanswer_entries = {entries}\n",
                pair.if_b,
                pins.display()
            ),
        )
        .unwrap();
        let out = pair
            .b
            .command(palisade_tests::bin("xdp-guard"))
            .args(["attach", "-c"])
            .arg(&guard)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    };
    attach(4096);
    let cfg = config(dir.path(), "pinned", port, &zone, None);
    let mut text = std::fs::read_to_string(&cfg).unwrap();
    text.push_str(&format!("\n[xdp]\npin_path = \"{}\"\n", pins.display()));
    std::fs::write(&cfg, text).unwrap();
    let _d = NsDnsd::start_setns(&pair.b, &cfg);
    wait_for("dnsd", Duration::from_secs(20), || ctl(&cfg, &["status"]).0);
    let server = SocketAddr::new(VethPair::B4.into(), port);
    let answered_in_xdp = |id: u16| {
        let a0 = stats(&cfg).get("xdp.answered");
        let q = build_query(id, "www.example.com.", 1, &QueryOpts::edns(1232));
        let got = exchange_all(&pair, server, vec![q]);
        got[0].is_some() && stats(&cfg).get("xdp.answered") > a0
    };
    wait_for("answers in XDP", Duration::from_secs(30), || {
        answered_in_xdp(1)
    });
    let opened = stats(&cfg).get("xdp.mirror.reopens");
    attach(2048);
    wait_for("the maps reopened", Duration::from_secs(20), || {
        stats(&cfg).get("xdp.mirror.reopens") > opened
    });
    wait_for("answers in the new maps", Duration::from_secs(20), || {
        answered_in_xdp(2)
    });
}
