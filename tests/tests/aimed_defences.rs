//! Defences an attacker cannot aim at legitimate users, end to end:
//!
//! - a resolver relaying a random-subdomain flood beside its users' queries keeps at least
//!   99 % of them answered during the flood and after it (re-asking over TCP on TC=1, as
//!   resolvers do), and nothing about it reaches Redis;
//! - with the XDP guard attached in namespaces, an address only ever seen over UDP (it may
//!   be forged) keeps reaching the node over TCP/53 and over an unrelated TCP port;
//! - a source that reaches a tenant's `escalate` over TCP is blocked (every packet, in XDP)
//!   and so is one with valid cookies (DNS over UDP only), here and on a second node through
//!   Redis;
//! - `[global] never_block`: an escalation, a Redis record of another node and `ctl block
//!   add` without `--force` all leave a listed address alone.

use std::io::Write as _;
use std::net::{IpAddr, Ipv4Addr, SocketAddr, TcpListener, TcpStream, UdpSocket};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use palisade_tests::client::{frame, tcp_read_msg};
use palisade_tests::netns::{self, VethPair};
use palisade_tests::ns_dnsd::{NsDnsd, ctl, stats};
use palisade_tests::redis::RedisServer;
use palisade_tests::servers::{Dnsd, Zone};
use palisade_tests::wait::wait_for;
use palisade_tests::wire::{QueryOpts, RawMsg, build_query};

const TYPE_A: u16 = 1;
const TYPE_ANY: u16 = 255;
const REFUSED: u16 = 5;
const TC: u16 = 0x0200;

/// Tenant 7 refuses ANY and escalates after `after` denies, into the block map (every zone,
/// XDP, the fleet: `dns = "block_map"`).
fn rules(after: u32, global: &str) -> String {
    format!(
        "{global}\n[[tenant]]\nid = 7\n\
         escalate = {{ after = {after}, window_secs = 60, block_secs = 600, on = [\"deny\"], dns = \"block_map\" }}\n\
         [[tenant.rule]]\nname = \"no-any\"\naction = \"deny\"\nrcode = \"REFUSED\"\n\
         when = [{{ attr = \"qtype\", one_of = [\"ANY\"] }}]\n"
    )
}

/// One UDP exchange from `src` (bound here, in the caller's namespace).
fn udp_ask(server: SocketAddr, src: IpAddr, q: &[u8], wait: Duration) -> Option<RawMsg> {
    let s = UdpSocket::bind(SocketAddr::new(src, 0)).ok()?;
    s.connect(server).ok()?;
    s.set_read_timeout(Some(wait)).ok()?;
    s.send(q).ok()?;
    let mut buf = [0u8; 4096];
    let n = s.recv(&mut buf).ok()?;
    RawMsg::parse(&buf[..n]).ok()
}

/// One TCP exchange from `src`.
fn tcp_ask(server: SocketAddr, src: IpAddr, q: &[u8]) -> Option<RawMsg> {
    let sock = socket2::Socket::new(
        socket2::Domain::for_address(server),
        socket2::Type::STREAM,
        None,
    )
    .ok()?;
    sock.bind(&SocketAddr::new(src, 0).into()).ok()?;
    sock.connect_timeout(&server.into(), Duration::from_secs(2))
        .ok()?;
    let mut s: TcpStream = sock.into();
    s.set_read_timeout(Some(Duration::from_secs(2))).ok()?;
    s.write_all(&frame(q)).ok()?;
    let m = tcp_read_msg(&mut s).ok()??;
    RawMsg::parse(&m).ok()
}

fn answered(m: &Option<RawMsg>) -> bool {
    m.as_ref()
        .is_some_and(|m| m.rcode() == 0 && m.counts[1] > 0 && m.flags & TC == 0)
}

/// A query with a fresh id.
fn q(name: &str, qtype: u16, opts: &QueryOpts) -> Vec<u8> {
    build_query(palisade_tests::client::next_id(), name, qtype, opts)
}

#[test]
fn a_resolver_relaying_a_random_subdomain_flood_keeps_its_users_answers() {
    let Some(redis) = RedisServer::start() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let events = dir.path().join("events.jsonl");
    // dnsd's default defences (RRL, cookies, the random-subdomain defence) and Redis.
    let dnsd = Dnsd::builder()
        .zone(Zone::data("example.com."))
        .raw(&format!("[redis]\n{}node_id = \"a\"\n", redis.config()))
        .raw(&format!(
            "[events]\noutput = \"file:{}\"\ninterval_secs = 1\n",
            events.display()
        ))
        .start();
    wait_for("redis synced", Duration::from_secs(10), || {
        dnsd.stat("redis.connected") == 1
    });
    let server = dnsd.addr();
    let resolver: IpAddr = palisade_tests::net::test_ip().into();

    // The flood: random names under the zone from the resolver's address, about 2,500 a
    // second for 4 s, its replies drained (and measured) by a second thread.
    let flood = UdpSocket::bind(SocketAddr::new(resolver, 0)).unwrap();
    flood.connect(server).unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let (sent, sent_bytes, replies, reply_bytes) = (
        Arc::new(AtomicU64::new(0)),
        Arc::new(AtomicU64::new(0)),
        Arc::new(AtomicU64::new(0)),
        Arc::new(AtomicU64::new(0)),
    );
    let drain = {
        let s = flood.try_clone().unwrap();
        s.set_read_timeout(Some(Duration::from_millis(200)))
            .unwrap();
        let (stop, replies, reply_bytes) = (stop.clone(), replies.clone(), reply_bytes.clone());
        std::thread::spawn(move || {
            let mut buf = [0u8; 4096];
            while !stop.load(Ordering::Relaxed) {
                if let Ok(n) = s.recv(&mut buf) {
                    replies.fetch_add(1, Ordering::Relaxed);
                    reply_bytes.fetch_add(n as u64, Ordering::Relaxed);
                }
            }
        })
    };
    let flooder = {
        let (sent, sent_bytes) = (sent.clone(), sent_bytes.clone());
        std::thread::spawn(move || {
            let mut rng = palisade_tests::rng::Rng::new(7);
            let opts = QueryOpts::edns(1232);
            let t0 = Instant::now();
            while t0.elapsed() < Duration::from_secs(4) {
                for _ in 0..25 {
                    let name = format!("r{:016x}.example.com.", rng.next_u64());
                    let m = build_query(rng.next_u64() as u16, &name, TYPE_A, &opts);
                    if flood.send(&m).is_ok() {
                        sent.fetch_add(1, Ordering::Relaxed);
                        sent_bytes.fetch_add(m.len() as u64, Ordering::Relaxed);
                    }
                }
                std::thread::sleep(Duration::from_millis(10));
            }
        })
    };
    // Its users' ordinary queries, through the same address: over UDP, again over TCP on
    // TC=1, once more over UDP after a timeout, as a resolver does.
    let names = [
        "www.example.com.",
        "mail.example.com.",
        "ns1.example.com.",
        "sip.example.com.",
        "ttl60.example.com.",
        "ldap.sub.example.com.",
    ];
    let opts = QueryOpts::edns(1232);
    let ask = |name: &str| -> bool {
        for _ in 0..2 {
            let m = udp_ask(
                server,
                resolver,
                &q(name, TYPE_A, &opts),
                Duration::from_millis(500),
            );
            match m {
                Some(m) if m.flags & TC != 0 => {
                    return answered(&tcp_ask(server, resolver, &q(name, TYPE_A, &opts)));
                }
                Some(m) => return m.rcode() == 0 && m.counts[1] > 0,
                None => continue,
            }
        }
        false
    };
    let (mut during, mut during_ok) = (0, 0);
    let t0 = Instant::now();
    let mut i = 0;
    while !flooder.is_finished() {
        during += 1;
        during_ok += ask(names[i % names.len()]) as usize;
        i += 1;
        std::thread::sleep(Duration::from_millis(30));
        assert!(t0.elapsed() < Duration::from_secs(60), "bounded");
    }
    flooder.join().unwrap();
    let (mut after, mut after_ok) = (0, 0);
    for k in 0..60 {
        after += 1;
        after_ok += ask(names[k % names.len()]) as usize;
    }
    std::thread::sleep(Duration::from_millis(300));
    stop.store(true, Ordering::Relaxed);
    drain.join().unwrap();
    let (sent, sent_bytes) = (
        sent.load(Ordering::Relaxed),
        sent_bytes.load(Ordering::Relaxed),
    );
    let (replies, reply_bytes) = (
        replies.load(Ordering::Relaxed),
        reply_bytes.load(Ordering::Relaxed),
    );
    eprintln!(
        "flood: {sent} queries ({sent_bytes} bytes), {replies} replies ({reply_bytes} bytes); \
         ordinary answered: during {during_ok}/{during}, after {after_ok}/{after}"
    );
    assert!(sent > 5_000, "the flood ran: {sent}");
    assert!(
        during_ok * 100 >= during * 99,
        "during the flood: {during_ok}/{during}"
    );
    assert!(after_ok * 100 >= after * 99, "after it: {after_ok}/{after}");
    assert!(
        reply_bytes <= sent_bytes,
        "no more reply bytes than attack bytes"
    );
    // The zone's flood shows in the counters and events; nothing reached Redis.
    let st = dnsd.stats();
    assert!(st["random_subdomain.attacks"] >= 1, "{st:?}");
    assert!(
        st["suspects.truncated"] + st["suspects.dropped"] > 0,
        "{st:?}"
    );
    assert_eq!(st["escalations"], 0, "{st:?}");
    assert_eq!(st["redis.published"], 0, "{st:?}");
    let out = std::process::Command::new("redis-cli")
        .args(["-p", &redis.port.to_string(), "ZCARD", "palisade:blocks"])
        .output()
        .expect("redis-cli");
    let held = String::from_utf8_lossy(&out.stdout).trim().to_string();
    assert_eq!(held, "0", "no suspect travels");
    let text = wait_text(&events, "\"action\":\"suspected\"");
    assert!(
        text.contains("\"action\":\"suspected\",\"evidence\":\"udp\""),
        "{text}"
    );
}

/// Waits (bounded) until `file` contains `needle`; its text.
fn wait_text(file: &std::path::Path, needle: &str) -> String {
    let end = Instant::now() + Duration::from_secs(15);
    loop {
        let t = std::fs::read_to_string(file).unwrap_or_default();
        if t.contains(needle) || Instant::now() > end {
            return t;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// dnsd in namespace B with the XDP guard attached on its veth, tenant 7's rules, low
/// random-subdomain thresholds, and `extra`.
fn xdp_dnsd(pair: &VethPair, dir: &std::path::Path, extra: &str) -> (NsDnsd, std::path::PathBuf) {
    std::fs::write(dir.join("rules.toml"), rules(20, "")).unwrap();
    let config = dir.join("dnsd.toml");
    std::fs::write(
        &config,
        format!(
            "[server]\nlisten = [\"{}\"]\nport = 5353\nworkers = 1\n\n\
             [[zone]]\norigin = \"example.com.\"\nfile = \"{}\"\ntenant = 7\n\n\
             [control]\nsocket = \"{}\"\n\n\
             [rules]\nfile = \"rules.toml\"\n\n\
             [defence.rrl]\nenabled = false\n\n\
             [defence.random_subdomain]\nzone_nxdomains_per_second = 50\nsource_nxdomain_limit = 5\nescalate_after = 20\n\n\
             [xdp]\ninterface = \"{}\"\nmode = \"auto\"\ndns_ports = [5353]\nrate = 100000\nburst = 100000\npin = false\n\n\
             {extra}",
            VethPair::B4,
            palisade_tests::data_dir().join("example.com.zone").display(),
            dir.join("dnsd.sock").display(),
            pair.if_b,
        ),
    )
    .unwrap();
    let daemon = NsDnsd::start(&pair.b, &config);
    let server = SocketAddr::new(VethPair::B4.into(), 5353);
    wait_for("dnsd to answer", Duration::from_secs(20), || {
        pair.a
            .run(move || {
                answered(&udp_ask(
                    server,
                    VethPair::A4.into(),
                    &q("www.example.com.", TYPE_A, &QueryOpts::udp()),
                    Duration::from_millis(300),
                ))
            })
            .unwrap_or(false)
    });
    (daemon, config)
}

#[test]
fn an_address_only_ever_spoofed_keeps_reaching_the_node_over_tcp() {
    if let Err(why) = netns::available() {
        palisade_tests::skipped(&format!("aimed defences XDP test: {why}"));
        return;
    }
    let pair = VethPair::new().expect("veth pair");
    let spoofed: IpAddr = Ipv4Addr::new(192, 0, 2, 77).into();
    pair.add_source(spoofed).expect("a source for the forger");
    let dir = tempfile::tempdir().unwrap();
    let (daemon, config) = xdp_dnsd(&pair, dir.path(), "");
    // An unrelated service on the node: TCP port 2222.
    let l = pair
        .b
        .run(|| TcpListener::bind("192.0.2.2:2222"))
        .unwrap()
        .unwrap();
    std::thread::spawn(move || {
        for c in l.incoming().flatten() {
            let _ = (&c).write_all(b"hello\n");
        }
    });
    let server = SocketAddr::new(VethPair::B4.into(), 5353);
    // Forged UDP in the victim's name: denied queries past the tenant's threshold, and a
    // random-subdomain flood past its thresholds. Nothing but UDP, no cookie.
    pair.a
        .run(move || {
            let s = UdpSocket::bind(SocketAddr::new(spoofed, 0)).unwrap();
            s.connect(server).unwrap();
            let opts = QueryOpts::udp();
            let mut rng = palisade_tests::rng::Rng::new(3);
            for round in 0..40u16 {
                let _ = s.send(&build_query(round, "example.com.", TYPE_ANY, &opts));
                for k in 0..20u16 {
                    let name = format!("f{:016x}.example.com.", rng.next_u64());
                    let _ = s.send(&build_query(round * 20 + k, &name, TYPE_A, &opts));
                }
                std::thread::sleep(Duration::from_millis(20));
            }
        })
        .unwrap();
    std::thread::sleep(Duration::from_millis(500));
    let (_, list) = ctl(&config, &["block", "list"]);
    let lines: Vec<&str> = list
        .lines()
        .filter(|l| l.starts_with("192.0.2.77/32"))
        .collect();
    assert!(
        !lines.is_empty(),
        "the forged address is a suspect:\n{list}"
    );
    assert!(
        lines.iter().all(|l| l.contains("suspect evidence=udp")),
        "never a block:\n{list}"
    );
    let st = stats(&config);
    assert_eq!(st.get("escalations"), 0);
    assert!(st.get("suspected") >= 1, "{st:?}");
    assert_eq!(
        st.get("xdp.drop_blocked_addr") + st.get("xdp.drop_blocked_prefix"),
        0
    );
    // The address keeps reaching the node: DNS over TCP, and another TCP service.
    let dns = pair
        .a
        .run(move || {
            tcp_ask(
                server,
                spoofed,
                &q("www.example.com.", TYPE_A, &QueryOpts::udp()),
            )
        })
        .unwrap();
    assert!(answered(&dns), "DNS over TCP from the spoofed address");
    let other = pair
        .a
        .run(move || {
            let sock =
                socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).unwrap();
            sock.bind(&SocketAddr::new(spoofed, 0).into()).unwrap();
            sock.connect_timeout(
                &SocketAddr::new(VethPair::B4.into(), 2222).into(),
                Duration::from_secs(2),
            )
            .is_ok()
        })
        .unwrap();
    assert!(other, "an unrelated TCP port from the spoofed address");
    drop(daemon);
}

#[test]
fn sources_proven_over_tcp_or_by_cookie_are_blocked_in_xdp_and_on_a_second_node() {
    if let Err(why) = netns::available() {
        palisade_tests::skipped(&format!("aimed defences XDP test: {why}"));
        return;
    }
    let Some(redis) = RedisServer::start() else {
        return;
    };
    let pair = VethPair::new().expect("veth pair");
    let by_cookie: IpAddr = Ipv4Addr::new(192, 0, 2, 78).into();
    pair.add_source(by_cookie).expect("a second source");
    let dir = tempfile::tempdir().unwrap();
    let (daemon, config) = xdp_dnsd(
        &pair,
        dir.path(),
        &format!(
            "[redis]\nurl = \"{}\"\nkey_file = \"{}\"\nnode_id = \"xdp-node\"\n",
            redis.unix_url(),
            redis.key_file().display()
        ),
    );
    // A second node on loopback, sharing Redis.
    let second = Dnsd::builder()
        .zone(Zone::data("example.com."))
        .raw(&format!(
            "[redis]\n{}node_id = \"second\"\n",
            redis.config()
        ))
        .start();
    let server = SocketAddr::new(VethPair::B4.into(), 5353);
    let by_tcp: IpAddr = VethPair::A4.into();
    // 20 denied queries over TCP: proven, blocked (every packet).
    let refused = pair
        .a
        .run(move || {
            (0..20)
                .filter(|_| {
                    tcp_ask(
                        server,
                        by_tcp,
                        &q("example.com.", TYPE_ANY, &QueryOpts::udp().with_rd()),
                    )
                    .is_some_and(|m| m.rcode() == REFUSED)
                })
                .count()
        })
        .unwrap();
    assert_eq!(refused, 20);
    // 20 denied queries with a valid server cookie: proven, blocked for DNS over UDP.
    let refused = pair
        .a
        .run(move || {
            let opts = |c: Vec<u8>| QueryOpts {
                cookie: Some(c),
                ..QueryOpts::edns(1232).with_rd()
            };
            let first = udp_ask(
                server,
                by_cookie,
                &q("www.example.com.", TYPE_A, &opts(vec![9; 8])),
                Duration::from_secs(1),
            )
            .expect("a cookie");
            let both = first
                .opt
                .as_ref()
                .and_then(|o| o.options.iter().find(|(c, _)| *c == 10))
                .map(|(_, v)| v.clone())
                .expect("our server cookie");
            (0..20)
                .filter(|_| {
                    udp_ask(
                        server,
                        by_cookie,
                        &q("example.com.", TYPE_ANY, &opts(both.clone())),
                        Duration::from_millis(500),
                    )
                    .is_some_and(|m| m.rcode() == REFUSED)
                })
                .count()
        })
        .unwrap();
    assert_eq!(refused, 20);
    let (_, list) = ctl(&config, &["block", "list"]);
    assert!(
        list.contains("192.0.2.1/32") && list.contains("block evidence=tcp scope=all"),
        "{list}"
    );
    assert!(
        list.contains("192.0.2.78/32") && list.contains("block evidence=cookie scope=dns"),
        "{list}"
    );
    // In XDP: the TCP-proven source loses every packet; the cookie-proven one loses UDP to
    // the DNS service, and keeps TCP.
    std::thread::sleep(Duration::from_millis(500));
    let before = stats(&config).get("xdp.drop_blocked_addr");
    let (udp1, tcp1, udp2, tcp2) = pair
        .a
        .run(move || {
            let a = |src| {
                udp_ask(
                    server,
                    src,
                    &q("www.example.com.", TYPE_A, &QueryOpts::udp()),
                    Duration::from_millis(400),
                )
                .is_some()
            };
            let t = |src| {
                answered(&tcp_ask(
                    server,
                    src,
                    &q("www.example.com.", TYPE_A, &QueryOpts::udp()),
                ))
            };
            (a(by_tcp), t(by_tcp), a(by_cookie), t(by_cookie))
        })
        .unwrap();
    assert!(!udp1 && !tcp1, "the TCP-proven source gets nothing");
    assert!(!udp2, "the cookie-proven source's UDP is dropped");
    assert!(tcp2, "its TCP is served");
    let after = stats(&config).get("xdp.drop_blocked_addr");
    assert!(after >= before + 2, "dropped in XDP: {before} -> {after}");
    // On the second node, through Redis: both, with their evidence and scope.
    wait_for(
        "both blocks on the second node",
        Duration::from_secs(10),
        || {
            let (_, l) = second.ctl(&["block", "list"]);
            l.contains("192.0.2.1/32") && l.contains("192.0.2.78/32")
        },
    );
    let (_, l) = second.ctl(&["block", "list"]);
    let line = |p: &str| {
        l.lines()
            .find(|x| x.starts_with(p))
            .unwrap_or_default()
            .to_string()
    };
    assert!(line("192.0.2.1/32").contains("peer (xdp-node)"), "{l}");
    assert!(
        line("192.0.2.1/32").contains("evidence=tcp scope=all"),
        "{l}"
    );
    assert!(
        line("192.0.2.78/32").contains("evidence=cookie scope=dns"),
        "{l}"
    );
    drop(daemon);
}

#[test]
fn never_block_keeps_a_listed_address_out_of_every_writers_reach() {
    let Some(redis) = RedisServer::start() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let listed = palisade_tests::net::test_ip();
    let other = palisade_tests::net::test_ip();
    std::fs::write(
        dir.path().join("rules.toml"),
        rules(1, &format!("[global]\nnever_block = [\"{listed}\"]\n")),
    )
    .unwrap();
    let mut com = Zone::data("example.com.");
    com.options.push("tenant = 7".into());
    let a = Dnsd::builder()
        .zone(com)
        .raw("[defence.rrl]\nenabled = false")
        .raw(&format!(
            "[rules]\nfile = \"{}\"\n\n[redis]\n{}node_id = \"a\"\n",
            dir.path().join("rules.toml").display(),
            redis.config()
        ))
        .start();
    let b = Dnsd::builder()
        .zone(Zone::data("example.com."))
        .raw(&format!("[redis]\n{}node_id = \"b\"\n", redis.config()))
        .start();
    wait_for("both synced", Duration::from_secs(10), || {
        a.stat("redis.connected") == 1 && b.stat("redis.connected") == 1
    });
    // ctl status lists the effective set and each entry's source.
    let (ok, status) = a.ctl(&["status"]);
    assert!(ok, "{status}");
    assert!(
        status.contains(&format!("{listed}/32\trules file [global] never_block")),
        "{status}"
    );
    assert!(status.contains("\tredis server"), "{status}");
    assert!(status.contains("::1/128\town address"), "{status}");
    let server = a.addr();
    // An escalation (proven, over TCP) of the listed address is refused; the other is blocked.
    for src in [listed, other] {
        let m = tcp_ask(
            server,
            src.into(),
            &q("example.com.", TYPE_ANY, &QueryOpts::udp().with_rd()),
        );
        assert_eq!(m.map(|m| m.rcode()), Some(REFUSED));
    }
    assert!(answered(&tcp_ask(
        server,
        listed.into(),
        &q("www.example.com.", TYPE_A, &QueryOpts::udp())
    )));
    assert!(
        tcp_ask(
            server,
            other.into(),
            &q("www.example.com.", TYPE_A, &QueryOpts::udp())
        )
        .is_none()
    );
    let st = a.stats();
    assert_eq!(st["rules.escalations_refused"], 1, "{st:?}");
    // A Redis record of another node: B blocks the listed address by hand; A refuses it.
    let (ok, out) = b.ctl(&["block", "add", &listed.to_string()]);
    assert!(ok, "{out}");
    wait_for("A refuses B's record", Duration::from_secs(10), || {
        a.stat("redis.refused.never_block") >= 1
    });
    let (_, list) = a.ctl(&["block", "list"]);
    assert!(!list.contains(&format!("{listed}/32")), "{list}");
    // The operator: refused without --force (and a covering prefix too), done with it.
    let (ok, out) = a.ctl(&["block", "add", &listed.to_string()]);
    assert!(!ok, "{out}");
    assert!(
        out.contains("never-block") && out.contains("--force"),
        "{out}"
    );
    let covering = format!("{}/24", ipnet::Ipv4Net::new(listed, 24).unwrap().network());
    let (ok, out) = a.ctl(&["block", "add", &covering]);
    assert!(!ok, "{out}");
    let (ok, out) = a.ctl(&["block", "add", "10.0.0.0/8"]);
    assert!(!ok && out.contains("shorter than /16"), "{out}");
    let (ok, out) = a.ctl(&["block", "add", &listed.to_string(), "--force"]);
    assert!(ok, "{out}");
    assert!(a.log().contains("block add --force"), "logged");
    // Every change of the block map by hand is in the log, by whom, refused ones too.
    let uid = unsafe { libc::geteuid() };
    let log = a.log();
    assert!(
        log.lines().any(|l| l.contains("ctl block:")
            && l.contains(&format!("uid={uid}"))
            && l.contains(&covering)
            && l.contains("ok=false")),
        "{log}"
    );
    assert!(
        udp_ask(
            server,
            listed.into(),
            &q("www.example.com.", TYPE_A, &QueryOpts::udp()),
            Duration::from_millis(300)
        )
        .is_none()
    );
}

/// Forged UDP against one tenant's rules (`dns = "block_map"`: unproven, a suspect) makes
/// the resolver a suspect in that tenant's zones alone: its queries for another tenant's
/// zones are answered in full (they were answered TC=1 for `block_secs`, in every zone,
/// after some forty forged packets).
#[test]
fn a_suspect_of_one_tenants_rules_is_one_in_that_tenants_zones_alone() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("rules.toml"), rules(3, "")).unwrap();
    let mut com = Zone::data("example.com.");
    com.options.push("tenant = 7".into());
    let dnsd = Dnsd::builder()
        .zone(com)
        .zone(Zone::data("example.net."))
        .raw("[defence.rrl]\nenabled = false")
        .raw(&format!(
            "[rules]\nfile = \"{}\"\n",
            dir.path().join("rules.toml").display()
        ))
        .start();
    let server = dnsd.addr();
    let victim: IpAddr = palisade_tests::net::test_ip().into();
    let opts = QueryOpts::edns(1232).with_rd();
    // Denied ANY queries in the victim's name, past the threshold: unproven.
    for _ in 0..6 {
        let _ = udp_ask(
            server,
            victim,
            &q("example.com.", TYPE_ANY, &opts),
            Duration::from_millis(300),
        );
    }
    // The other tenant's zone: answered in full, over UDP.
    let other = udp_ask(
        server,
        victim,
        &q("www.example.net.", TYPE_A, &opts),
        Duration::from_secs(1),
    );
    assert!(answered(&other), "another tenant's zone: {other:?}");
    // The escalating tenant's zone: TC=1 (a real resolver comes back over TCP).
    let own = udp_ask(
        server,
        victim,
        &q("www.example.com.", TYPE_A, &opts),
        Duration::from_secs(1),
    )
    .expect("a reply");
    assert!(own.flags & TC != 0 && own.counts[1] == 0, "{own:?}");
    // Listed so.
    let (ok, list) = dnsd.ctl(&["block", "list"]);
    assert!(ok, "{list}");
    let line = list
        .lines()
        .find(|l| l.starts_with(&format!("{victim}/32")))
        .unwrap_or_else(|| panic!("a suspect:\n{list}"));
    assert!(
        line.contains("suspect evidence=udp") && line.contains("tenant=7"),
        "{line}"
    );
}
