//! PROXY protocol in front of dnsd and http-front, with real proxies.
//!
//! - Debian's `dnsdist` (`useProxyProtocol=true`) in front of dnsd (`[server] proxy_allow`):
//!   every client is seen by its own address over UDP and TCP — a `ctl block add` of one
//!   client drops only that client, RRL counts per client (a flooder is limited while a calm
//!   client behind the same proxy is answered), and the proxy itself is in the never-block
//!   set. A header from an unlisted address, a listed proxy's datagram without a header, and a
//!   malformed header are dropped and counted.
//! - Debian's `haproxy` (`send-proxy-v2`) in front of http-front (`[server] proxy_allow`) and
//!   nginx behind it (`listen ... proxy_protocol`, answering with `$proxy_protocol_addr`,
//!   reached with `[[upstream]] send_proxy = "v2"`): the rules deny by the real client, a
//!   block of one client closes only its connections, nginx sees each client's own address,
//!   and a listed proxy's connection without a header is closed and counted.

use std::io::{Read, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpStream, UdpSocket};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use palisade_tests::counters::prometheus_sum;
use palisade_tests::http::{Front, get};
use palisade_tests::nginx::Nginx;
use palisade_tests::servers::{Dnsd, Zone};
use palisade_tests::wait::wait_for;
use palisade_tests::wire::{QueryOpts, RawMsg, build_query};

/// A child process killed on drop.
struct Proc(Child);

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// One UDP query for `name` from `src` to `server`: the answer's rcode, None without one.
fn udp_ask(server: SocketAddr, src: Ipv4Addr, name: &str) -> Option<u16> {
    let s = UdpSocket::bind(SocketAddr::new(src.into(), 0)).unwrap();
    s.set_read_timeout(Some(Duration::from_millis(700)))
        .unwrap();
    s.send_to(
        &build_query(0x4242, name, 1, &QueryOpts::edns(1232)),
        server,
    )
    .unwrap();
    let mut buf = [0u8; 4096];
    let n = s.recv(&mut buf).ok()?;
    RawMsg::parse(&buf[..n]).ok().map(|m| m.rcode())
}

/// One TCP query from `src`: the answer's rcode, None without one.
fn tcp_ask(server: SocketAddr, src: Ipv4Addr, name: &str) -> Option<u16> {
    let sock = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).ok()?;
    sock.bind(&SocketAddr::new(src.into(), 0).into()).ok()?;
    sock.connect_timeout(&server.into(), Duration::from_secs(2))
        .ok()?;
    let mut s: TcpStream = sock.into();
    s.set_read_timeout(Some(Duration::from_secs(2))).ok()?;
    let q = build_query(0x4343, name, 1, &QueryOpts::edns(1232));
    let mut framed = (q.len() as u16).to_be_bytes().to_vec();
    framed.extend_from_slice(&q);
    s.write_all(&framed).ok()?;
    let mut len = [0u8; 2];
    s.read_exact(&mut len).ok()?;
    let mut msg = vec![0u8; u16::from_be_bytes(len) as usize];
    s.read_exact(&mut msg).ok()?;
    RawMsg::parse(&msg).ok().map(|m| m.rcode())
}

/// A PROXY v2 header for a UDP client `src` that reached `dst`.
fn v2_dgram(src: SocketAddr, dst: SocketAddr) -> Vec<u8> {
    let mut h = shield::proxy_proto::v2_header(src, dst);
    h[13] = (h[13] & 0xf0) | 0x02;
    h
}

const PROXY: Ipv4Addr = Ipv4Addr::new(127, 60, 0, 1);
const FRONT: Ipv4Addr = Ipv4Addr::new(127, 60, 0, 2);

fn dnsdist(dir: &Path, backend: SocketAddr, front: SocketAddr) -> Proc {
    let conf = dir.join("dnsdist.conf");
    std::fs::write(
        &conf,
        format!(
            "setLocal(\"{front}\")\n\
             newServer({{address=\"{backend}\", source=\"{PROXY}\", useProxyProtocol=true, \
             checkName=\"example.com.\", checkInterval=1}})\n\
             setSecurityPollSuffix(\"\")\n"
        ),
    )
    .unwrap();
    let child = Command::new("dnsdist")
        .args(["--supervised", "--disable-syslog", "-C"])
        .arg(&conf)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn dnsdist");
    Proc(child)
}

#[test]
fn dnsdist_in_front_every_defence_sees_the_client() {
    if !palisade_tests::have_program("dnsdist") {
        assert!(!palisade_tests::in_ci(), "dnsdist is needed in CI");
        palisade_tests::skipped("dnsdist is not installed: the PROXY protocol test did not run");
        return;
    }
    let dnsd = Dnsd::builder()
        .zone(Zone::data("example.com."))
        .server_option(&format!("proxy_allow = [\"{PROXY}\"]"))
        .raw("[defence.rrl]\nresponses_per_second = 5\nslip = 0")
        .raw("[defence.random_subdomain]\nenabled = false")
        .start();
    let dir = tempfile::tempdir().unwrap();
    let front = SocketAddr::new(FRONT.into(), palisade_tests::net::free_port(FRONT));
    let _dd = dnsdist(dir.path(), dnsd.addr(), front);
    let c1 = Ipv4Addr::new(127, 61, 0, 1);
    let c2 = Ipv4Addr::new(127, 61, 0, 2);
    wait_for(
        "dnsdist answers through dnsd",
        Duration::from_secs(20),
        || udp_ask(front, c1, "www.example.com.") == Some(0),
    );
    assert_eq!(
        tcp_ask(front, c1, "www.example.com."),
        Some(0),
        "TCP through dnsdist"
    );

    // The proxy is never blocked; a block of one client drops only that client.
    let (ok, out) = dnsd.ctl(&["status"]);
    assert!(ok && out.contains("proxy_allow"), "{out}");
    let (ok, out) = dnsd.ctl(&["block", "add", &c1.to_string(), "--ttl", "600"]);
    assert!(ok, "{out}");
    let (ok, out) = dnsd.ctl(&["block", "add", &PROXY.to_string(), "--ttl", "600"]);
    assert!(
        !ok && out.contains("never"),
        "the proxy may not be blocked: {out}"
    );
    assert_eq!(
        udp_ask(front, c1, "www.example.com."),
        None,
        "blocked client over UDP"
    );
    assert_eq!(
        tcp_ask(front, c1, "www.example.com."),
        None,
        "blocked client over TCP"
    );
    for _ in 0..5 {
        assert_eq!(
            udp_ask(front, c2, "www.example.com."),
            Some(0),
            "other client"
        );
    }
    assert_eq!(tcp_ask(front, c2, "www.example.com."), Some(0));
    let m = dnsd.metrics();
    assert!(prometheus_sum(&m, "dnsd_blocked_total", "") >= 1, "{m}");

    // RRL per client: a flooder behind the proxy is limited, a calm client is not.
    let flooder = Ipv4Addr::new(127, 61, 0, 3);
    let calm = Ipv4Addr::new(127, 61, 1, 4); // another /24 (RRL counts per /24)
    let s = UdpSocket::bind(SocketAddr::new(flooder.into(), 0)).unwrap();
    for i in 0..200u16 {
        s.send_to(
            &build_query(i, "www.example.com.", 1, &QueryOpts::edns(1232)),
            front,
        )
        .unwrap();
    }
    std::thread::sleep(Duration::from_millis(300));
    let limited = prometheus_sum(&dnsd.metrics(), "dnsd_rrl_limited_total", "");
    assert!(limited >= 100, "the flooder is limited: {limited}");
    for _ in 0..4 {
        assert_eq!(
            udp_ask(front, calm, "www.example.com."),
            Some(0),
            "calm client"
        );
    }

    // Headers where none is believed, and none where one is required: dropped, counted.
    let direct = dnsd.addr();
    let q = build_query(7, "www.example.com.", 1, &QueryOpts::edns(1232));
    // A client of its own /24 (the flood above has RRL limiting 127.61.0.0/24).
    let c5 = Ipv4Addr::new(127, 63, 0, 9);
    let mut with_header = v2_dgram(SocketAddr::new(c5.into(), 4000), direct);
    with_header.extend_from_slice(&q);
    let send = |src: Ipv4Addr, payload: &[u8]| -> bool {
        let s = UdpSocket::bind(SocketAddr::new(src.into(), 0)).unwrap();
        s.set_read_timeout(Some(Duration::from_millis(400)))
            .unwrap();
        s.send_to(payload, direct).unwrap();
        let mut buf = [0u8; 2048];
        s.recv(&mut buf).is_ok()
    };
    assert!(
        !send(Ipv4Addr::new(127, 62, 0, 1), &with_header),
        "unlisted sender"
    );
    assert!(send(PROXY, &with_header), "the listed proxy");
    assert!(!send(PROXY, &q), "the listed proxy without a header");
    let mut bad = with_header.clone();
    bad[15] = 200; // a length past the datagram
    assert!(!send(PROXY, &bad), "a malformed header");
    let st = dnsd.stats();
    assert!(st.get("drops.proxy_unlisted") >= 1, "unlisted counted");
    assert!(st.get("drops.proxy_missing") >= 1, "missing counted");
    assert!(st.get("drops.proxy_malformed") >= 1, "malformed counted");
    // Over TCP from an unlisted address, a header is refused too.
    let mut framed = shield::proxy_proto::v2_header(SocketAddr::new(c2.into(), 1), direct);
    framed.extend_from_slice(&(q.len() as u16).to_be_bytes());
    framed.extend_from_slice(&q);
    let raw = palisade_tests::client::tcp_raw(direct, &framed, true, Duration::from_secs(2))
        .expect("connect");
    assert!(
        raw.messages().is_empty(),
        "no answer to an unlisted header over TCP"
    );
    assert!(dnsd.stats().get("drops.proxy_unlisted") >= 2);
}

const HAP_SRC: Ipv4Addr = Ipv4Addr::new(127, 70, 0, 1);
const HAP_FRONT: Ipv4Addr = Ipv4Addr::new(127, 70, 0, 2);

#[test]
fn haproxy_in_front_and_nginx_behind_http_front_see_the_client() {
    for p in ["haproxy", "nginx"] {
        if !palisade_tests::have_program(p) {
            assert!(!palisade_tests::in_ci(), "{p} is needed in CI");
            palisade_tests::skipped(&format!(
                "{p} is not installed: the PROXY protocol test did not run"
            ));
            return;
        }
    }
    let Some(nginx) = Nginx::start(
        "server { listen {LISTEN} proxy_protocol; location / { return 200 \"pp=$proxy_protocol_addr remote=$remote_addr\\n\"; } }",
    ) else {
        return;
    };
    let origin = nginx.addr();
    let dir = tempfile::tempdir().unwrap();
    let sock = dir.path().join("front.sock");
    let s2 = sock.clone();
    let front = Front::start(
        move |addr, metrics| {
            format!(
                "[server]\nlisten = [\"{addr}\"]\nworkers = 2\nproxy_allow = [\"{HAP_SRC}\"]\n\n\
                 [metrics]\nlisten = \"{metrics}\"\n\n[rules]\nfile = \"rules.toml\"\n\n\
                 [control]\nsocket = \"{}\"\n\n\
                 [[upstream]]\nname = \"app\"\nservers = [\"{origin}\"]\nsend_proxy = \"v2\"\n\n\
                 [[site]]\nhosts = [\"a.test\"]\nupstream = \"app\"\ntenant = 1\n",
                s2.display()
            )
        },
        Some("[[tenant]]\nid = 1\ndeny = [\"127.71.0.0/24\"]\n"),
    );
    let hap = SocketAddr::new(HAP_FRONT.into(), palisade_tests::net::free_port(HAP_FRONT));
    let conf = dir.path().join("haproxy.cfg");
    std::fs::write(
        &conf,
        format!(
            "defaults\n  mode tcp\n  timeout connect 2s\n  timeout client 10s\n  timeout server 10s\n\
             frontend f\n  bind {hap}\n  default_backend b\n\
             backend b\n  server hf {} send-proxy-v2 source {HAP_SRC}\n",
            front.addr()
        ),
    )
    .unwrap();
    let _hap = Proc(
        Command::new("haproxy")
            .args(["-db", "-f"])
            .arg(&conf)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn haproxy"),
    );
    let good = Ipv4Addr::new(127, 71, 1, 1);
    let denied = Ipv4Addr::new(127, 71, 0, 1);
    wait_for(
        "haproxy passes to http-front",
        Duration::from_secs(20),
        || get(Some(good), hap, "a.test", "/").is_ok_and(|r| r.status == 200),
    );
    let r = get(Some(good), hap, "a.test", "/").unwrap();
    assert!(
        r.body.contains(&format!("pp={good} ")),
        "nginx sees the client: {}",
        r.body
    );
    let r = get(Some(denied), hap, "a.test", "/").unwrap();
    assert_eq!(
        r.status, 403,
        "the rules deny the real client behind haproxy"
    );
    // A client straight to http-front: its own address travels to nginx.
    let direct = Ipv4Addr::new(127, 72, 0, 1);
    let r = get(Some(direct), front.addr(), "a.test", "/").unwrap();
    assert!(r.body.contains(&format!("pp={direct} ")), "{}", r.body);

    // A block of one client behind the proxy closes only its connections.
    let (code, out) = palisade_tests::http::run_front(&[
        "ctl",
        "-s",
        sock.to_str().unwrap(),
        "block",
        "add",
        &good.to_string(),
        "--ttl",
        "600",
    ]);
    assert_eq!(code, Some(0), "{out}");
    wait_for(
        "the blocked client is refused",
        Duration::from_secs(5),
        || get(Some(good), hap, "a.test", "/").is_err(),
    );
    let other = Ipv4Addr::new(127, 71, 2, 1);
    assert_eq!(get(Some(other), hap, "a.test", "/").unwrap().status, 200);
    assert!(front.metric("http_front_connections_total{event=\"blocked_at_accept\"}") >= 1);
    assert!(front.metric("http_front_connections_total{event=\"proxied\"}") >= 3);

    // The proxy's own address without a header: closed, counted.
    let r = get(Some(HAP_SRC), front.addr(), "a.test", "/");
    assert!(
        r.is_err() || r.is_ok_and(|r| r.status != 200),
        "no header, no service"
    );
    front.wait_metric(
        "http_front_proxy_headers_refused_total{cause=\"missing\"}",
        1,
        Duration::from_secs(5),
    );
    // A header from an address not in proxy_allow: closed, counted, never at the origin.
    for header in [
        shield::proxy_proto::v2_header(
            SocketAddr::new(good.into(), 1),
            SocketAddr::new(HAP_FRONT.into(), 80),
        ),
        b"PROXY TCP4 127.71.1.1 127.70.0.2 1 80\r\n".to_vec(),
    ] {
        let mut s = palisade_tests::http::connect_from(Some(direct), front.addr()).unwrap();
        let _ = s.write_all(&header);
        let _ = s.write_all(b"GET / HTTP/1.1\r\nHost: a.test\r\n\r\n");
        s.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
        let mut buf = Vec::new();
        let _ = s.read_to_end(&mut buf);
        assert!(
            !String::from_utf8_lossy(&buf).contains("pp="),
            "an unlisted header never reaches the origin"
        );
    }
    front.wait_metric(
        "http_front_proxy_headers_refused_total{cause=\"unlisted\"}",
        2,
        Duration::from_secs(5),
    );
}

/// A listed proxy that connects and never sends its header (a stalled proxy, or any host of a
/// listed prefix) never holds the TCP table against direct clients: those connections wait as
/// a client's do (evictable, the pressed idle time) and at most a quarter of the table waits
/// so.
#[test]
fn a_listed_proxys_silent_connections_never_hold_the_table() {
    const SILENT: Ipv4Addr = Ipv4Addr::new(127, 60, 1, 1);
    let dnsd = Dnsd::builder()
        .zone(Zone::data("example.com."))
        .server_option(&format!("proxy_allow = [\"{SILENT}\"]"))
        .server_option("tcp_max_connections = 64")
        .raw("[defence.rrl]\nenabled = false")
        .start();
    let mut held = Vec::new();
    for _ in 0..100 {
        let sock =
            socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).unwrap();
        sock.bind(&SocketAddr::new(SILENT.into(), 0).into())
            .unwrap();
        if sock
            .connect_timeout(&dnsd.addr().into(), Duration::from_secs(2))
            .is_ok()
        {
            held.push(sock);
        }
    }
    std::thread::sleep(Duration::from_millis(300));
    // Direct clients from many sources, while the proxy's connections stay silent.
    let mut answered = 0;
    for i in 0..40u8 {
        let src = Ipv4Addr::new(127, 60, 2, 1 + i);
        if tcp_ask(dnsd.addr(), src, "www.example.com.") == Some(0) {
            answered += 1;
        }
    }
    assert_eq!(
        answered, 40,
        "direct TCP clients answered beside a silent proxy"
    );
    let m = dnsd.metrics();
    assert!(
        prometheus_sum(&m, "dnsd_drops_total", "cause=\"tcp_limit\"") >= 1,
        "the silent connections past a quarter of the table are refused and counted"
    );
    drop(held);
}
