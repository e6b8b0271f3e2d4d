//! The TCP bounds of dnsd end to end (dnsd/src/tcp.rs): `tcp_max_connections` (a new
//! connection to a full table closes a connection waiting on its client: silent, or stalled
//! in a query; the table never holds more),
//! `tcp_max_per_source` (one source is held to its share while others are served), and
//! `tcp_max_queries` (a connection is closed after that many queries, every one of them
//! answered, and the close is counted).

use std::io::{ErrorKind, Read, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpStream};
use std::time::Duration;

use palisade_tests::client::{self, frame};
use palisade_tests::net;
use palisade_tests::servers::{Dnsd, Zone};
use palisade_tests::wait::wait_for;
use palisade_tests::wire::{QueryOpts, RawMsg, build_query, qtype, rcode};
use socket2::{Domain, Socket, Type};

/// How long any single read or write may wait.
const IO_WAIT: Duration = Duration::from_secs(5);

/// A TCP connection to `to` from the loopback address `from`, with bounded waits.
fn connect_from(from: Ipv4Addr, to: SocketAddr) -> TcpStream {
    let s = Socket::new(Domain::IPV4, Type::STREAM, None).expect("socket");
    s.bind(&SocketAddr::from((from, 0)).into())
        .unwrap_or_else(|e| panic!("bind {from}: {e}"));
    s.connect_timeout(&to.into(), IO_WAIT)
        .unwrap_or_else(|e| panic!("connect {from} -> {to}: {e}"));
    let s: TcpStream = s.into();
    s.set_read_timeout(Some(IO_WAIT)).unwrap();
    s.set_write_timeout(Some(IO_WAIT)).unwrap();
    s.set_nodelay(true).unwrap();
    s
}

/// The query with ID `id` for www.example.com/A.
fn query(id: u16) -> Vec<u8> {
    build_query(id, "www.example.com.", qtype::A, &QueryOpts::udp())
}

/// What a connection did with one query.
#[derive(Debug, PartialEq, Eq)]
enum Fate {
    /// Answered NOERROR with the query's ID.
    Answered,
    /// Closed (EOF or reset) without an answer.
    Closed,
    /// Something else: no answer within the wait, or a wrong one.
    Other(String),
}

/// Sends one query on `s` and reads what comes back.
fn ask(s: &mut TcpStream, id: u16) -> Fate {
    if let Err(e) = s.write_all(&frame(&query(id))) {
        return match e.kind() {
            ErrorKind::BrokenPipe | ErrorKind::ConnectionReset => Fate::Closed,
            _ => Fate::Other(format!("write: {e}")),
        };
    }
    match client::tcp_read_msg(s) {
        Ok(Some(m)) => match RawMsg::parse(&m) {
            Ok(r) if r.id == id && r.rcode() == rcode::NOERROR && r.counts[1] > 0 => Fate::Answered,
            Ok(r) => Fate::Other(format!("answer id {} rcode {}", r.id, r.rcode())),
            Err(e) => Fate::Other(e),
        },
        Ok(None) => Fate::Closed,
        Err(e) if e.kind() == ErrorKind::ConnectionReset => Fate::Closed,
        Err(e) if e.kind() == ErrorKind::UnexpectedEof => Fate::Closed,
        Err(e) => Fate::Other(format!("read: {e}")),
    }
}

/// True when the server closes `s` (EOF or reset) within [`IO_WAIT`] without sending more.
fn closed_by_server(s: &mut TcpStream) -> Result<(), String> {
    let mut b = [0u8; 512];
    match s.read(&mut b) {
        Ok(0) => Ok(()),
        Err(e) if e.kind() == ErrorKind::ConnectionReset => Ok(()),
        Ok(n) => Err(format!("{n} more octets instead of a close")),
        Err(e) => Err(format!("no close within {IO_WAIT:?}: {e}")),
    }
}

/// A dnsd serving example.com with these extra `[server]` lines; returns once no TCP
/// connection (the readiness probe's) is open any more.
fn start(options: &[&str]) -> Dnsd {
    let mut b = Dnsd::builder()
        .zone(Zone::data("example.com"))
        // Long enough that no connection of these tests is closed for idleness.
        .server_option("tcp_idle_timeout_ms = 60000");
    for o in options {
        b = b.server_option(o);
    }
    let d = b.start();
    wait_for("the readiness probe's connection to close", IO_WAIT, || {
        d.stat("tcp.connections") == 0
    });
    d
}

/// Sends the first bytes of the query with ID `id` on `s` (its length and part of it): the
/// connection waits on its client for the rest.
fn begin_query(s: &mut TcpStream, id: u16) {
    s.write_all(&frame(&query(id))[..5])
        .expect("first bytes of a query");
}

#[test]
fn a_full_table_makes_room_and_never_holds_more_than_tcp_max_connections() {
    const MAX: usize = 8;
    // Connections held silent stay open however full the table (this test is about the
    // bound, not the pressed idle time).
    let dnsd = start(&[
        &format!("tcp_max_connections = {MAX}"),
        "tcp_pressed_idle_timeout_ms = 60000",
    ]);
    let addr = dnsd.addr();
    let src = net::test_ip();

    // MAX connections from one source are accepted and answered, and stay open; then each
    // begins a query and stalls (waiting on its client, as a slowloris does).
    let mut held: Vec<TcpStream> = (0..MAX).map(|_| connect_from(src, addr)).collect();
    for (i, s) in held.iter_mut().enumerate() {
        assert_eq!(ask(s, 100 + i as u16), Fate::Answered, "connection {i}");
        begin_query(s, 300);
    }
    assert_eq!(dnsd.stat("tcp.connections"), MAX as u64);
    // A stalled connection takes its place in the eviction order within a second of the
    // table's pressure.
    std::thread::sleep(Duration::from_millis(2500));

    // Three new clients from other sources are each served; three of the stalled connections
    // make room, and the table never holds more than MAX.
    let mut extra = Vec::new();
    for i in 0..3u16 {
        let mut s = connect_from(net::test_ip(), addr);
        assert_eq!(ask(&mut s, 200 + i), Fate::Answered, "extra connection {i}");
        extra.push(s);
    }
    assert_eq!(dnsd.stat("tcp.evicted"), 3);
    assert_eq!(dnsd.stat("drops.tcp_limit"), 0, "nobody refused");
    assert!(dnsd.stat("tcp.connections") <= MAX as u64);
    let mut closed = 0;
    for s in held.iter_mut() {
        s.set_read_timeout(Some(Duration::from_millis(500)))
            .unwrap();
        if closed_by_server(s).is_ok() {
            closed += 1;
        }
    }
    assert_eq!(closed, 3, "three stalled connections made room");

    // UDP does not share the TCP bound.
    let r = client::query_reply(addr, "www.example.com.", qtype::A, &QueryOpts::udp());
    assert_eq!(r.head.rcode(), rcode::NOERROR);
}

#[test]
fn a_full_table_of_silent_connections_makes_room_for_each_new_client() {
    const MAX: usize = 8;
    // Silent connections are not timed out here (a minute): room is made by closing the one
    // quiet longest, whatever comes back as fast as it is closed.
    let d = start(&[
        &format!("tcp_max_connections = {MAX}"),
        "tcp_pressed_idle_timeout_ms = 60000",
    ]);
    let mut held: Vec<TcpStream> = (0..MAX as u8)
        .map(|i| connect_from(Ipv4Addr::new(127, 0, 96, 1 + i), d.addr()))
        .collect();
    wait_for("the table full", IO_WAIT, || {
        d.stat("tcp.connections") == MAX as u64
    });
    // A connection takes its place among the quiet within a second of the table's pressure.
    std::thread::sleep(Duration::from_millis(2500));
    // Five new clients (staying connected), each served at once; five of the silent
    // connections closed (those that fell quiet first: the order the server began waiting
    // on them, about the order they were accepted), the other three still served.
    let mut new = Vec::new();
    for i in 0..5u8 {
        let mut s = connect_from(Ipv4Addr::new(127, 0, 97, 1 + i), d.addr());
        assert_eq!(ask(&mut s, i as u16), Fate::Answered, "new client {i}");
        new.push(s);
    }
    assert_eq!(d.stat("tcp.evicted"), 5);
    assert_eq!(d.stat("drops.tcp_limit"), 0, "nobody refused");
    let (mut closed, mut served) = (0, 0);
    for (i, s) in held.iter_mut().enumerate() {
        s.set_read_timeout(Some(Duration::from_millis(500)))
            .unwrap();
        if closed_by_server(s).is_ok() {
            closed += 1;
        } else {
            s.set_read_timeout(Some(IO_WAIT)).unwrap();
            assert_eq!(
                ask(s, 100 + i as u16),
                Fate::Answered,
                "silent connection {i}"
            );
            served += 1;
        }
    }
    assert_eq!((closed, served), (5, 3));
    for (i, s) in new.iter_mut().enumerate() {
        assert_eq!(
            ask(s, 200 + i as u16),
            Fate::Answered,
            "new client {i} again"
        );
    }
}

#[test]
fn one_source_is_held_to_tcp_max_per_source_while_others_are_served() {
    const PER_SOURCE: usize = 3;
    let dnsd = start(&[
        "tcp_max_connections = 64",
        &format!("tcp_max_per_source = {PER_SOURCE}"),
    ]);
    let addr = dnsd.addr();
    let (greedy, other) = (net::test_ip(), net::test_ip());

    let mut mine: Vec<TcpStream> = (0..PER_SOURCE)
        .map(|_| connect_from(greedy, addr))
        .collect();
    for (i, s) in mine.iter_mut().enumerate() {
        assert_eq!(
            ask(s, 10 + i as u16),
            Fate::Answered,
            "{greedy} connection {i}"
        );
    }
    for i in 0..2u16 {
        let mut s = connect_from(greedy, addr);
        assert_eq!(ask(&mut s, 20 + i), Fate::Closed, "{greedy} over its share");
    }
    assert_eq!(dnsd.stat("drops.tcp_limit"), 2);

    // Another source has its own share, whole.
    let mut theirs: Vec<TcpStream> = (0..PER_SOURCE).map(|_| connect_from(other, addr)).collect();
    for (i, s) in theirs.iter_mut().enumerate() {
        assert_eq!(
            ask(s, 30 + i as u16),
            Fate::Answered,
            "{other} connection {i}"
        );
    }
    let mut s = connect_from(other, addr);
    assert_eq!(ask(&mut s, 40), Fate::Closed, "{other} over its share");
    assert_eq!(dnsd.stat("drops.tcp_limit"), 3);
    assert_eq!(dnsd.stat("tcp.connections"), 2 * PER_SOURCE as u64);

    // One of the greedy source's connections closes: it may open one more, not two.
    mine.pop();
    wait_for("a connection to be released", IO_WAIT, || {
        dnsd.stat("tcp.connections") == 2 * PER_SOURCE as u64 - 1
    });
    let mut s = connect_from(greedy, addr);
    assert_eq!(ask(&mut s, 50), Fate::Answered, "{greedy} after a close");
    mine.push(s);
    let mut s = connect_from(greedy, addr);
    assert_eq!(ask(&mut s, 51), Fate::Closed, "{greedy} full again");
    assert_eq!(dnsd.stat("drops.tcp_limit"), 4);
    for (i, s) in mine.iter_mut().chain(theirs.iter_mut()).enumerate() {
        assert_eq!(ask(s, 60 + i as u16), Fate::Answered, "held connection {i}");
    }
}

/// Reads framed messages from `s` until the server closes it: (the IDs of the answers
/// read, the connection was closed). At most `max` messages are read.
fn read_until_close(s: &mut TcpStream, max: usize) -> (Vec<u16>, Result<(), String>) {
    let mut ids = Vec::new();
    for _ in 0..max {
        match client::tcp_read_msg(s) {
            Ok(Some(m)) => {
                let r = RawMsg::parse(&m).expect("an answer that parses");
                assert_eq!(r.rcode(), rcode::NOERROR, "answer {}", r.id);
                ids.push(r.id);
            }
            Ok(None) => return (ids, Ok(())),
            Err(e)
                if matches!(
                    e.kind(),
                    ErrorKind::ConnectionReset | ErrorKind::UnexpectedEof
                ) =>
            {
                return (ids, Ok(()));
            }
            Err(e) => return (ids, Err(format!("read: {e}"))),
        }
    }
    let closed = closed_by_server(s);
    (ids, closed)
}

#[test]
fn a_connection_is_closed_after_tcp_max_queries_all_of_them_answered() {
    const MAX_Q: u16 = 5;
    let dnsd = start(&[&format!("tcp_max_queries = {MAX_Q}")]);
    let addr = dnsd.addr();
    let closes0 = dnsd.stat("drops.tcp_query_limit");

    // One query at a time: each of the first MAX_Q is answered; then the server closes the
    // connection although the client keeps it open (the idle timeout is a minute away).
    let mut s = connect_from(net::test_ip(), addr);
    for i in 0..MAX_Q {
        assert_eq!(ask(&mut s, 1000 + i), Fate::Answered, "query {i}");
    }
    // (A close within IO_WAIT cannot be the idle timeout's.)
    closed_by_server(&mut s).expect("closed after the last query allowed");

    // Pipelined in one write: every query up to the limit is answered (in any order), then
    // the connection is closed.
    let mut s = connect_from(net::test_ip(), addr);
    let batch: Vec<u8> = (0..MAX_Q).flat_map(|i| frame(&query(2000 + i))).collect();
    s.write_all(&batch).unwrap();
    let (mut ids, closed) = read_until_close(&mut s, MAX_Q as usize + 1);
    ids.sort_unstable();
    assert_eq!(ids, (2000..2000 + MAX_Q).collect::<Vec<_>>());
    closed.expect("closed after the pipelined queries");

    // More queries than the limit in one write: exactly the first MAX_Q are answered.
    let mut s = connect_from(net::test_ip(), addr);
    let batch: Vec<u8> = (0..MAX_Q + 3)
        .flat_map(|i| frame(&query(3000 + i)))
        .collect();
    s.write_all(&batch).unwrap();
    let (mut ids, closed) = read_until_close(&mut s, MAX_Q as usize + 3);
    ids.sort_unstable();
    assert_eq!(ids, (3000..3000 + MAX_Q).collect::<Vec<_>>());
    closed.expect("closed after the limit");

    // A connection that stays under the limit is not closed: its next query is answered.
    let mut s = connect_from(net::test_ip(), addr);
    for i in 0..MAX_Q - 1 {
        assert_eq!(ask(&mut s, 4000 + i), Fate::Answered, "query {i}");
    }
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(ask(&mut s, 4100), Fate::Answered, "the last query allowed");
    closed_by_server(&mut s).expect("closed once at the limit");

    // Every close at the limit is counted, apart from idle closes.
    let s = dnsd.stats();
    assert_eq!(s["drops.tcp_timeout"], 0, "{s:?}");
    assert_eq!(
        s["drops.tcp_query_limit"] - closes0,
        4,
        "connections closed at tcp_max_queries are counted: {s:?}"
    );
    assert_eq!(s["drops.tcp_limit"], 0, "{s:?}");
    assert_eq!(s["tcp.connections"], 0, "{s:?}");
}

/// By default a connection is never closed for the queries it carried (as Knot and NSD): a
/// resolver that keeps one open answered 1,500 queries pipelined in batches (at 1,000 it was
/// closed, and what it had pipelined past the close went unanswered: SERVFAIL to its users).
#[test]
fn by_default_a_connection_answers_every_query_it_carries() {
    let dnsd = start(&[]);
    let mut s = connect_from(net::test_ip(), dnsd.addr());
    s.set_read_timeout(Some(IO_WAIT)).unwrap();
    let mut answered = 0;
    for batch in 0..75u16 {
        let ids: Vec<u16> = (0..20).map(|i| batch * 20 + i).collect();
        let bytes: Vec<u8> = ids.iter().flat_map(|&id| frame(&query(id))).collect();
        s.write_all(&bytes).expect("the connection is open");
        for _ in &ids {
            let m = client::tcp_read_msg(&mut s)
                .ok()
                .flatten()
                .unwrap_or_else(|| panic!("closed after {answered} answers"));
            let r = RawMsg::parse(&m).unwrap();
            assert!(ids.contains(&r.id) && r.rcode() == rcode::NOERROR, "{r:?}");
            answered += 1;
        }
    }
    assert_eq!(answered, 1500);
    assert_eq!(dnsd.stat("drops.tcp_query_limit"), 0);
}

#[test]
fn clients_that_never_read_large_answers_hold_little_of_our_memory() {
    // An RRset of about 50 KB, asked 40 times on each of 96 connections that never read (a
    // 4 KiB receive buffer): at 32 answers queued each, that was 1.6 MB a connection.
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("big.test.zone");
    let mut z = String::from(
        "$ORIGIN big.test.\n$TTL 300\n@ SOA ns h 1 7200 3600 1209600 300\n@ NS ns\nns A 192.0.2.1\n",
    );
    for i in 0..200 {
        z.push_str(&format!("txt TXT \"{i:03}{}\"\n", "x".repeat(240)));
    }
    std::fs::write(&file, z).unwrap();
    let d = Dnsd::builder()
        .zone(Zone::new("big.test.", &file))
        .server_option("tcp_idle_timeout_ms = 60000")
        .start();
    wait_for("the readiness probe's connection to close", IO_WAIT, || {
        d.stat("tcp.connections") == 0
    });
    let before = palisade_tests::rss_kib(d.pid());
    let q = frame(&build_query(
        7,
        "txt.big.test.",
        qtype::TXT,
        &QueryOpts::udp(),
    ));
    let mut conns = Vec::new();
    for i in 0..96u8 {
        let from = Ipv4Addr::new(127, 0, 93, 1 + i / 16);
        let s = Socket::new(Domain::IPV4, Type::STREAM, None).unwrap();
        s.set_recv_buffer_size(4096).unwrap();
        s.bind(&SocketAddr::from((from, 0)).into()).unwrap();
        s.connect_timeout(&d.addr().into(), IO_WAIT).unwrap();
        let mut s: TcpStream = s.into();
        s.set_write_timeout(Some(IO_WAIT)).unwrap();
        for _ in 0..40 {
            s.write_all(&q).unwrap();
        }
        conns.push(s);
    }
    wait_for(
        "every connection to stop being read",
        Duration::from_secs(20),
        || d.stat("tcp.pipeline_full") >= 96,
    );
    std::thread::sleep(Duration::from_millis(500));
    let grown = palisade_tests::rss_kib(d.pid()).saturating_sub(before);
    println!("dnsd grew by {grown} KiB for 96 connections that do not read");
    assert!(
        grown < 48 * 1024,
        "{grown} KiB for 96 connections: answers must not pile up for clients that do not read"
    );
    drop(conns);
}

#[test]
fn silent_connections_filling_the_table_are_closed_within_seconds() {
    // 8 connections at most; 7 open and silent is more than three quarters: silent ones are
    // closed after about a second (though the idle timeout is a minute) until the table is
    // back at the mark (RFC 7766 §6.2.3), and a new client is served.
    let d = start(&["tcp_max_connections = 8"]);
    let held: Vec<TcpStream> = (0..7u8)
        .map(|i| connect_from(Ipv4Addr::new(127, 0, 94, 1 + i), d.addr()))
        .collect();
    wait_for("the silent connections to be counted", IO_WAIT, || {
        d.stat("tcp.connections") == 7
    });
    wait_for("the table back at three quarters", IO_WAIT, || {
        d.stat("tcp.connections") <= 6
    });
    assert!(d.stat("drops.tcp_timeout") >= 1);
    let mut new = connect_from(Ipv4Addr::new(127, 0, 94, 100), d.addr());
    assert_eq!(ask(&mut new, 1), Fate::Answered);
    drop(held);
    // Below the mark, silence is allowed its idle timeout.
    wait_for("the table empty", IO_WAIT, || {
        d.stat("tcp.connections") <= 1
    });
    let mut few: Vec<TcpStream> = (0..3u8)
        .map(|i| connect_from(Ipv4Addr::new(127, 0, 95, 1 + i), d.addr()))
        .collect();
    std::thread::sleep(Duration::from_millis(2500));
    assert!(d.stat("tcp.connections") >= 3, "still open");
    for (i, s) in few.iter_mut().enumerate() {
        assert_eq!(ask(s, i as u16), Fate::Answered);
    }
}

/// A source that holds its share of a full table already makes room for its new connections
/// only out of its own quiet ones: a few addresses reconnecting fast took every eviction, and
/// other clients' connections were closed (a client with more connections than each of them
/// first) and their new ones reset.
#[test]
fn a_source_holding_its_share_of_a_full_table_makes_room_only_out_of_its_own() {
    const MAX: usize = 8;
    let d = start(&[
        &format!("tcp_max_connections = {MAX}"),
        "tcp_pressed_idle_timeout_ms = 60000",
    ]);
    // A client with five connections (a resolver), then a churner with three.
    let resolver = net::test_ip();
    let mut mine: Vec<TcpStream> = (0..5).map(|_| connect_from(resolver, d.addr())).collect();
    let churner = net::test_ip();
    let mut held: Vec<TcpStream> = (0..3).map(|_| connect_from(churner, d.addr())).collect();
    wait_for("the table full", IO_WAIT, || {
        d.stat("tcp.connections") == MAX as u64
    });
    std::thread::sleep(Duration::from_millis(2500));
    // The churner reconnecting takes only its own connections' places.
    for i in 0..3u16 {
        let mut s = connect_from(churner, d.addr());
        assert_eq!(
            ask(&mut s, 20 + i),
            Fate::Answered,
            "the churner's new connection {i}"
        );
        held.push(s);
    }
    assert_eq!(d.stat("tcp.evicted"), 3);
    for (i, s) in mine.iter_mut().enumerate() {
        assert_eq!(
            ask(s, 40 + i as u16),
            Fate::Answered,
            "the resolver's connection {i}"
        );
    }
    // A new client holding nothing still gets room (once connections wait on their
    // clients again).
    std::thread::sleep(Duration::from_millis(1500));
    let mut s = connect_from(net::test_ip(), d.addr());
    assert_eq!(ask(&mut s, 60), Fate::Answered);
    assert!(d.stat("tcp.connections") <= MAX as u64);
}
