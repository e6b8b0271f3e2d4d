//! A TCP connection from a source that `dnsd ctl block add` put in the block map is closed at
//! accept, before the query written on it is read: counted once as `blocked.operator`
//! (`dnsd_blocked_total{origin="operator"}`) and once as `drops.blocked`, and reported as a
//! `blocked` event in the events file. Its neighbours are still served.

use std::io::{Read, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpStream};
use std::time::Duration;

use palisade_tests::counters::{prometheus_series, prometheus_value};
use palisade_tests::servers::{Dnsd, Zone};
use palisade_tests::wait::wait_for;
use palisade_tests::wire::{QueryOpts, RawMsg, build_query};

/// Connects from `src` to `to`, writes one query and reads: the reply, or `None` when the
/// server closed the connection (a clean close or a reset) without one.
fn ask_tcp(src: Ipv4Addr, to: SocketAddr) -> Option<RawMsg> {
    use socket2::{Domain, Socket, Type};
    let sock = Socket::new(Domain::IPV4, Type::STREAM, None).expect("socket");
    sock.bind(&SocketAddr::from((src, 0)).into())
        .expect("bind source");
    sock.connect_timeout(&to.into(), Duration::from_secs(5))
        .expect("connect: the kernel accepts even for a blocked source");
    let mut s: TcpStream = sock.into();
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let q = build_query(7, "www.example.com.", 1, &QueryOpts::udp());
    // The write may already fail on a connection the server closed.
    let _ = s.write_all(&palisade_tests::client::frame(&q));
    let mut len = [0u8; 2];
    match s.read(&mut len) {
        Ok(0) => return None,
        Ok(1) => s.read_exact(&mut len[1..]).expect("length"),
        Ok(_) => {}
        Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => return None,
        Err(e) => panic!("neither a reply nor a close from dnsd: {e}"),
    }
    let mut m = vec![0u8; u16::from_be_bytes(len) as usize];
    s.read_exact(&mut m).expect("reply");
    Some(RawMsg::parse(&m).expect("a DNS message"))
}

#[test]
fn a_tcp_connection_from_a_blocked_source_is_closed_at_accept_counted_and_reported() {
    let dnsd = Dnsd::builder()
        .zone(Zone::data("example.com."))
        .raw("[events]\noutput = \"file:events.jsonl\"\ninterval_secs = 1")
        .start();
    let events = dnsd
        .config_path()
        .parent()
        .expect("config dir")
        .join("events.jsonl");
    let addr = dnsd.addr();
    let blocked = palisade_tests::net::test_ip();
    let neighbour = palisade_tests::net::test_ip();

    // Served before it is blocked.
    let r = ask_tcp(blocked, addr).expect("an answer before the block");
    assert_eq!(r.id, 7);
    let (ok, out) = dnsd.ctl(&[
        "block",
        "add",
        &format!("{blocked}/32"),
        "--ttl",
        "300",
        "--reason",
        "e2e blocked at accept",
    ]);
    assert!(ok, "{out}");
    let before = dnsd.stats();

    // Blocked: closed without an answer.
    assert!(
        ask_tcp(blocked, addr).is_none(),
        "a blocked source's connection must be closed at accept"
    );
    wait_for(
        "blocked.operator to count the connection",
        Duration::from_secs(5),
        || dnsd.stat("blocked.operator") > before["blocked.operator"],
    );
    let after = dnsd.stats();
    assert_eq!(
        after["blocked.operator"],
        before["blocked.operator"] + 1,
        "one connection, counted once"
    );
    assert_eq!(after["drops.blocked"], before["drops.blocked"] + 1);
    assert_eq!(after["blocked.local"], before["blocked.local"]);
    assert_eq!(after["blocked.peer"], before["blocked.peer"]);
    assert_eq!(
        after["queries.tcp"], before["queries.tcp"],
        "the query written on the blocked connection is never read"
    );
    // /metrics says the same.
    let m = prometheus_series(&dnsd.metrics());
    assert_eq!(
        prometheus_value(&m, "dnsd_blocked_total{origin=\"operator\"}"),
        after["blocked.operator"] as f64
    );

    // A neighbour (another address, same /24 as a rule) is still served.
    let r = ask_tcp(neighbour, addr).expect("the neighbour is served");
    assert_eq!(r.rcode(), 0);
    assert_eq!(dnsd.stat("blocked.operator"), after["blocked.operator"]);

    // The flusher writes a `blocked` event (tenant 0: nothing of a query is known at
    // accept) with the source's /24 among the top sources.
    let o = blocked.octets();
    let prefix = format!("\"prefix\":\"{}.{}.{}.0/24\"", o[0], o[1], o[2]);
    let mut text = String::new();
    wait_for(
        "a blocked event in events.jsonl",
        Duration::from_secs(10),
        || {
            text = std::fs::read_to_string(&events).unwrap_or_default();
            text.lines().any(|l| l.contains("\"action\":\"blocked\""))
        },
    );
    let line = text
        .lines()
        .find(|l| l.contains("\"action\":\"blocked\""))
        .unwrap();
    assert!(line.contains("\"tenant\":0,"), "{line}");
    assert!(
        line.contains("\"total\":1,"),
        "one blocked connection: {line}"
    );
    assert!(line.contains(&prefix), "{prefix} in {line}");
    assert!(
        line.contains("\"reason\":1000"),
        "reason BLOCKED (1000): {line}"
    );
}

/// A source blocked while its TCP connection is open: its next query gets no answer and the
/// connection closes (it holds no connection slot until the idle timeout).
#[test]
fn an_open_tcp_connection_of_a_source_blocked_meanwhile_is_closed() {
    use socket2::{Domain, Socket, Type};
    let dnsd = Dnsd::builder().zone(Zone::data("example.com.")).start();
    let src = palisade_tests::net::test_ip();
    let sock = Socket::new(Domain::IPV4, Type::STREAM, None).expect("socket");
    sock.bind(&SocketAddr::from((src, 0)).into()).unwrap();
    sock.connect_timeout(&dnsd.addr().into(), Duration::from_secs(5))
        .unwrap();
    let mut s: TcpStream = sock.into();
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let q =
        palisade_tests::client::frame(&build_query(1, "www.example.com.", 1, &QueryOpts::udp()));
    s.write_all(&q).unwrap();
    let mut len = [0u8; 2];
    s.read_exact(&mut len).expect("an answer before the block");
    let mut m = vec![0u8; u16::from_be_bytes(len) as usize];
    s.read_exact(&mut m).unwrap();
    let (ok, out) = dnsd.ctl(&["block", "add", &format!("{src}/32")]);
    assert!(ok, "{out}");
    let _ = s.write_all(&q);
    let mut buf = [0u8; 64];
    match s.read(&mut buf) {
        Ok(0) => {}
        Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => {}
        other => panic!("the connection of a blocked source stays open: {other:?}"),
    }
    wait_for(
        "the connection to be released",
        Duration::from_secs(5),
        || dnsd.stat("tcp.connections") == 0,
    );
}
