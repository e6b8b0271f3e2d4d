//! dnsd with its XDP guard on a veth, end to end: a client in the other namespace is
//! answered; `dnsd ctl block add` of the client's address stops the answers in the kernel
//! (the XDP drop counter rises); `dnsd ctl block del` restores them.
//!
//! Needs root (CI runs as root); elsewhere it says so loudly and skips.

use std::net::{SocketAddr, UdpSocket};
use std::time::Duration;

use palisade_tests::netns::{self, VethPair};
use palisade_tests::ns_dnsd::{NsDnsd, ctl, stats};
use palisade_tests::wait::wait_for;
use palisade_tests::wire::{QueryOpts, RawMsg, build_query};

/// One query from namespace A; true when answered.
fn ask(pair: &VethPair, server: SocketAddr) -> bool {
    burst_from(pair, VethPair::A4, server, 1) == 1
}

#[test]
fn dnsd_with_xdp_on_veth_blocks_and_unblocks_in_the_kernel() {
    if let Err(why) = netns::available() {
        palisade_tests::skipped(&format!("XDP end-to-end test: {why}"));
        return;
    }
    let pair = VethPair::new().expect("veth pair");
    let dir = tempfile::tempdir().unwrap();
    let port = 5353;
    let server = SocketAddr::new(VethPair::B4.into(), port);
    let config = dir.path().join("dnsd.toml");
    std::fs::write(
        &config,
        format!(
            "[server]\nlisten = [\"{}\"]\nport = {port}\nworkers = 1\n\n\
             [[zone]]\norigin = \"example.com.\"\nfile = \"{}\"\n\n\
             [control]\nsocket = \"{}\"\n\n\
             [defence.rrl]\nenabled = false\n\n\
             [xdp]\ninterface = \"{}\"\nmode = \"auto\"\ndns_ports = [{port}]\nrate = 100000\nburst = 100000\npin = false\n",
            VethPair::B4,
            palisade_tests::data_dir().join("example.com.zone").display(),
            dir.path().join("dnsd.sock").display(),
            pair.if_b,
        ),
    )
    .unwrap();
    let daemon = NsDnsd::start(&pair.b, &config);
    // Ready: answered from namespace A (bounded wait).
    wait_for("dnsd to answer", Duration::from_secs(20), || {
        ask(&pair, server)
    });
    let log_text = daemon.log();
    assert!(log_text.contains("XDP guard attached"), "{log_text}");
    let before = stats(&config).get("xdp.drop_blocked_addr");

    // Block the client: its queries now die in XDP, before the socket.
    let (ok, out) = ctl(
        &config,
        &["block", "add", &VethPair::A4.to_string(), "--ttl", "60"],
    );
    assert!(ok, "{out}");
    std::thread::sleep(Duration::from_millis(300)); // the mirror drains the feed
    for _ in 0..5 {
        assert!(!ask(&pair, server), "a blocked client must get no answer");
    }
    let dropped = stats(&config).get("xdp.drop_blocked_addr");
    assert!(dropped >= before + 5, "XDP drops: {before} -> {dropped}");
    // dnsd itself never saw them: its own block-map drops did not count these packets.
    assert_eq!(stats(&config).get("blocked.operator"), 0);

    // Unblock: answered again.
    let (ok, out) = ctl(&config, &["block", "del", &VethPair::A4.to_string()]);
    assert!(ok, "{out}");
    wait_for(
        "an answer again after block del",
        Duration::from_secs(5),
        || ask(&pair, server),
    );
    drop(daemon);
}

/// `n` queries from `src` in namespace A sent at once; how many were answered.
fn burst_from(pair: &VethPair, src: std::net::Ipv4Addr, server: SocketAddr, n: u16) -> usize {
    replies_from(pair, src, server, n).0
}

/// Sends `n` queries from `src` at once: how many were answered, and how many answered
/// TC=1 without records (distinct ids).
fn replies_from(
    pair: &VethPair,
    src: std::net::Ipv4Addr,
    server: SocketAddr,
    n: u16,
) -> (usize, usize) {
    let queries = (0..n)
        .map(|id| build_query(id, "www.example.com.", 1, &QueryOpts::udp()))
        .collect();
    burst_of(pair, src, server, queries, 0..n)
}

/// Sends `queries` from `src` at once: of the replies whose ids are in `counted`, how many
/// were answers, and how many TC=1 without records (distinct ids).
fn burst_of(
    pair: &VethPair,
    src: std::net::Ipv4Addr,
    server: SocketAddr,
    queries: Vec<Vec<u8>>,
    counted: std::ops::Range<u16>,
) -> (usize, usize) {
    pair.a
        .run(move || {
            // One CPU's buckets for the whole burst.
            netns::pin_to_current_cpu();
            let s = UdpSocket::bind(SocketAddr::new(src.into(), 0)).unwrap();
            s.connect(server).unwrap();
            s.set_read_timeout(Some(Duration::from_millis(400)))
                .unwrap();
            for q in &queries {
                s.send(q).unwrap();
            }
            let mut buf = [0u8; 2048];
            let mut seen = std::collections::HashSet::new();
            let mut truncated = std::collections::HashSet::new();
            while seen.len() + truncated.len() < counted.len() {
                let Ok(len) = s.recv(&mut buf) else { break };
                if let Ok(m) = RawMsg::parse(&buf[..len])
                    && m.rcode() == 0
                    && counted.contains(&m.id)
                {
                    if m.counts[1] > 0 {
                        seen.insert(m.id);
                    } else if m.has(0x0200) {
                        truncated.insert(m.id);
                    }
                }
            }
            (seen.len(), truncated.len())
        })
        .expect("run in namespace A")
}

/// A second client source in namespace A, beside `VethPair::A4`.
const PROBE: std::net::Ipv4Addr = std::net::Ipv4Addr::new(192, 0, 2, 3);

/// dnsd in namespace B on port 5353 (its [[zone]] given `zone_extra`, then `extra` sections,
/// a `rules.toml` of `rules` when not empty) behind XDP that rate-limits each source to 5
/// queries a second (burst 10), answering `PROBE`; None (said) without namespaces.
struct RateLimited {
    pair: VethPair,
    dir: tempfile::TempDir,
    server: SocketAddr,
    config: std::path::PathBuf,
    daemon: NsDnsd,
}

fn rate_limited(zone_extra: &str, extra: &str, rules: &str) -> Option<RateLimited> {
    if let Err(why) = netns::available() {
        palisade_tests::skipped(&format!("XDP end-to-end test: {why}"));
        return None;
    }
    let pair = VethPair::new().expect("veth pair");
    pair.add_source(PROBE.into()).expect("a second source");
    let dir = tempfile::tempdir().unwrap();
    pair.client_takes_xdp_tx(dir.path());
    let port = 5353;
    let server = SocketAddr::new(VethPair::B4.into(), port);
    if !rules.is_empty() {
        std::fs::write(dir.path().join("rules.toml"), rules).unwrap();
    }
    let config = dir.path().join("dnsd.toml");
    std::fs::write(
        &config,
        format!(
            "[server]\nlisten = [\"{}\"]\nport = {port}\nworkers = 1\n\n\
             [[zone]]\norigin = \"example.com.\"\nfile = \"{}\"\n{zone_extra}\n\
             [control]\nsocket = \"{}\"\n\n\
             [defence.rrl]\nenabled = false\n\n{extra}\n\
             [xdp]\ninterface = \"{}\"\nmode = \"auto\"\ndns_ports = [{port}]\nrate = 5\nburst = 10\npin = false\n",
            VethPair::B4,
            palisade_tests::data_dir().join("example.com.zone").display(),
            dir.path().join("dnsd.sock").display(),
            pair.if_b,
        ),
    )
    .unwrap();
    let daemon = NsDnsd::start(&pair.b, &config);
    wait_for("dnsd to answer the probe", Duration::from_secs(20), || {
        burst_from(&pair, PROBE, server, 1) == 1
    });
    Some(RateLimited {
        pair,
        dir,
        server,
        config,
        daemon,
    })
}

#[test]
fn the_rules_files_global_lists_reach_the_kernel() {
    let Some(RateLimited {
        pair,
        dir,
        server,
        config,
        daemon,
    }) = rate_limited(
        "",
        &format!(
            "[defence.cookies]\nsecret = \"{COOKIE_SECRET}\"\n\n[rules]\nfile = \"rules.toml\"\n"
        ),
        &format!("[global]\ndeny = [\"{}/32\"]\n", VethPair::A4),
    )
    else {
        return;
    };
    let probe = PROBE;
    let rules = dir.path().join("rules.toml");
    // [global] deny: the source's queries die in XDP, in the rules slot; dnsd never sees them.
    wait_for(
        "the global deny list in the kernel",
        Duration::from_secs(5),
        || {
            stats(&config).get("xdp.drop_by_rules") > 0
                || burst_from(&pair, VethPair::A4, server, 1) == 0
        },
    );
    let before = stats(&config);
    assert_eq!(
        burst_from(&pair, VethPair::A4, server, 5),
        0,
        "a denied source gets nothing"
    );
    let after = stats(&config);
    assert!(
        after.get("xdp.drop_by_rules") >= before.get("xdp.drop_by_rules") + 5,
        "{before:?} -> {after:?}"
    );
    assert_eq!(after.get("rules.checked"), before.get("rules.checked"));
    assert_eq!(after.get("xdp.drop_by_operator"), 0);

    // The same file with the source allowed instead: answered again, and exempt from the XDP
    // rate limit that holds the probe source back.
    std::fs::write(
        &rules,
        format!("[global]\nallow = [\"{}/32\"]\n", VethPair::A4),
    )
    .unwrap();
    let (ok, out) = ctl(&config, &["reload"]);
    assert!(ok, "{out}");
    wait_for("the deny lifted", Duration::from_secs(5), || {
        burst_from(&pair, VethPair::A4, server, 1) == 1
    });
    let before = stats(&config);
    let allowed = burst_from(&pair, VethPair::A4, server, 60);
    let (limited, truncated) = replies_from(&pair, probe, server, 60);
    let after = stats(&config);
    eprintln!(
        "burst of 60: allowed source {allowed} answered, other source {limited} (and {truncated} TC=1)"
    );
    assert_eq!(allowed, 60, "an allowed source is not rate-limited in XDP");
    assert!(limited < 30, "the XDP rate limit holds others: {limited}");
    assert!(after.get("xdp.rate_exempt") >= before.get("xdp.rate_exempt") + 60);
    assert!(after.get("xdp.drop_ratelimit") > before.get("xdp.drop_ratelimit"));
    // Past its rate one query in two is answered TC=1 from XDP (the question alone): a
    // flood forged in this source's name leaves it a way back, over TCP.
    let slipped = after.get("xdp.rate_slip") - before.get("xdp.rate_slip");
    assert!(
        truncated >= 15 && slipped as usize >= truncated,
        "{truncated} TC=1 replies, {slipped} slipped of {} over the rate",
        60 - limited
    );
    // Over its rate, the same source with a valid server cookie is answered: XDP verifies
    // the cookie and limits it in a bucket of its own, which no forged packet spends (no zone
    // here is answered in XDP: the address entries that carry the secrets are written all
    // the same), so a flood forged in its name never silences a resolver that proves itself.
    let before = stats(&config);
    let proven = cookie_replies_from(&pair, probe, server, 8);
    let after = stats(&config);
    assert_eq!(
        proven, 8,
        "a source proven by its cookie is not held by the bucket forged packets spent: {before:?} -> {after:?}"
    );
    assert!(
        after.get("xdp.rate_cookie") >= before.get("xdp.rate_cookie") + 8,
        "{before:?} -> {after:?}"
    );
    drop(daemon);
}

/// The cookie secret of the daemon in `the_rules_files_global_lists_reach_the_kernel`.
const COOKIE_SECRET: &str = "e5e973e5a6b2a43f48e7dc849e37bfcf";

/// Spends `src`'s bucket (40 queries without a cookie, as a forged flood in its name would),
/// then sends `n` queries at once, each with a valid server cookie (made under
/// [`COOKIE_SECRET`] now): how many of those were answered with records.
fn cookie_replies_from(
    pair: &VethPair,
    src: std::net::Ipv4Addr,
    server: SocketAddr,
    n: u16,
) -> usize {
    let key = palisade_tests::wire::hex16(COOKIE_SECRET);
    let client = b"\x01\x02\x03\x04\x05\x06\x07\x08".to_vec();
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs() as u32;
    let mut cookie = client.clone();
    cookie.extend(palisade_tests::wire::server_cookie(
        &key,
        &client,
        src.into(),
        now,
    ));
    let opts = QueryOpts {
        cookie: Some(cookie),
        ..QueryOpts::edns(1232)
    };
    let queries = (0..40)
        .map(|id| build_query(id, "www.example.com.", 1, &QueryOpts::udp()))
        .chain((1000..1000 + n).map(|id| build_query(id, "www.example.com.", 1, &opts)))
        .collect();
    burst_of(pair, src, server, queries, 1000..1000 + n).0
}

/// Past its rate a source keeps its other names: a flood forged in its name for one name
/// spends that name's share of the source's second bucket, not its queries for the others
/// (the rate counted a source whatever the name: a probe's resolver got 1 of 19 answers at
/// once for a name not flooded, Knot with RRL 27 of 27); a flood of many names is still held,
/// to twice the rate at most.
#[test]
fn a_flood_of_one_name_leaves_a_source_its_other_names_in_xdp() {
    // The dir holds the control socket: kept to the end.
    let Some(RateLimited {
        pair,
        config,
        daemon,
        server,
        dir: _dir,
    }) = rate_limited("", "", "")
    else {
        return;
    };
    let others = [
        "example.com.",
        "ns1.example.com.",
        "ns2.example.com.",
        "mail.example.com.",
        "ttl60.example.com.",
        "mixed-case.example.com.",
    ];
    // 60 queries for one name in PROBE's name, then at once its queries for six others.
    let queries = (0..60)
        .map(|id| build_query(id, "www.example.com.", 1, &QueryOpts::udp()))
        .chain(
            others
                .iter()
                .zip(100u16..)
                .map(|(n, id)| build_query(id, n, 1, &QueryOpts::udp())),
        )
        .collect();
    let before = stats(&config);
    let (answered, truncated) = burst_of(&pair, PROBE, server, queries, 100..106);
    let after = stats(&config);
    assert_eq!(
        (answered, truncated),
        (6, 0),
        "the other names answered in full: {before:?} -> {after:?}"
    );
    let flooded = after.get("xdp.drop_ratelimit") + after.get("xdp.rate_slip")
        - before.get("xdp.drop_ratelimit")
        - before.get("xdp.rate_slip");
    assert!(flooded >= 40, "the flooded name held: {flooded} limited");
    assert!(
        after.get("xdp.rate_name") >= before.get("xdp.rate_name") + 6,
        "{before:?} -> {after:?}"
    );

    // Many names (a random-subdomain flood forged in a source's name): held to twice the
    // rate's burst, the rest dropped or slipped as before.
    let queries = (0..80)
        .map(|id| build_query(id, &format!("r{id}x.example.com."), 1, &QueryOpts::udp()))
        .collect();
    let before = stats(&config);
    burst_of(&pair, VethPair::A4, server, queries, 0..0);
    let after = stats(&config);
    let limited = after.get("xdp.drop_ratelimit") + after.get("xdp.rate_slip")
        - before.get("xdp.drop_ratelimit")
        - before.get("xdp.rate_slip");
    let shared = after.get("xdp.rate_name") - before.get("xdp.rate_name");
    assert!(
        shared <= 11 && limited >= 80 - 10 - 11 - 2,
        "{shared} passed on names' shares, {limited} limited: {before:?} -> {after:?}"
    );
    drop(daemon);
}

/// The node's transfer peers are not rate-limited in XDP: the rate counts a source's packets
/// whatever the name, and a flood forged in a secondary's name took its SOA checks and
/// queries with it (TC=1 or nothing); another source is held to the rate as before.
#[test]
fn transfer_peers_are_not_rate_limited_in_xdp() {
    let Some(RateLimited {
        pair,
        server,
        config,
        dir: _dir,
        daemon: _daemon,
    }) = rate_limited(
        &format!("allow_transfer = [\"{}/32\"]\n", VethPair::A4),
        "",
        "",
    )
    else {
        return;
    };
    let probe = PROBE;
    std::thread::sleep(Duration::from_millis(1500));
    let peer = burst_from(&pair, VethPair::A4, server, 60);
    let (other, _) = replies_from(&pair, probe, server, 60);
    assert_eq!(peer, 60, "the transfer peer is answered in full");
    assert!(other < 30, "the XDP rate limit holds others: {other}");

    // A reload that makes the probe the peer, and lists a /16 besides (65,536 forgeable
    // addresses: never exempt), moves the exemption.
    let text = std::fs::read_to_string(&config).unwrap().replace(
        &format!("allow_transfer = [\"{}/32\"]", VethPair::A4),
        &format!("allow_transfer = [\"{probe}/32\", \"{}/16\"]", VethPair::A4),
    );
    std::fs::write(&config, text).unwrap();
    let (ok, out) = ctl(&config, &["reload"]);
    assert!(ok, "{out}");
    wait_for("the probe exempt", Duration::from_secs(10), || {
        std::thread::sleep(Duration::from_millis(1100));
        burst_from(&pair, probe, server, 40) == 40
    });
    std::thread::sleep(Duration::from_millis(1100));
    let (was_peer, _) = replies_from(&pair, VethPair::A4, server, 60);
    assert!(
        was_peer < 30,
        "the former peer, inside a /16, is held to the rate: {was_peer}"
    );
}
