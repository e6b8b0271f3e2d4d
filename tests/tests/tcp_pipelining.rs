//! Pipelined TCP end to end (RFC 7766 §7, RFC 7828): queries on one connection are answered
//! as soon as each is ready, so an SOA query sent after an AXFR of 100k records is answered
//! while the transfer still streams; `tcp_max_pipelined` bounds the queries read but not
//! yet answered (at 1 the connection is served strictly in order, and the bound is
//! counted); a client that sends edns-tcp-keepalive over TCP is told the idle timeout, as
//! BIND tells it (Knot DNS 3.2 and NSD 4.6 do not implement the option), and never over UDP.

use std::io::Write;
use std::net::SocketAddr;
use std::time::Duration;

use hickory_proto::op::Message;
use hickory_proto::rr::RecordType;
use palisade_tests::client::{self, frame};
use palisade_tests::servers::{Bind, Dnsd, Zone};
use palisade_tests::wire::{QueryOpts, build_query, qtype};

const ORIGIN: &str = "example.com.";
/// Records beyond the apex in the big zone.
const HOSTS: usize = 100_000;
/// edns-tcp-keepalive (RFC 7828).
const KEEPALIVE: u16 = 11;

/// A zone of `HOSTS` A records (about 35 AXFR messages of 64 KiB).
fn big_zone(dir: &std::path::Path) -> Zone {
    let mut z = String::with_capacity(HOSTS * 32);
    z.push_str("$TTL 3600\n@ SOA ns1 hostmaster 7 3600 600 86400 300\n  NS ns1\nns1 A 192.0.2.1\n");
    for i in 0..HOSTS {
        z.push_str(&format!(
            "h{i} A 10.{}.{}.{}\n",
            i >> 16,
            (i >> 8) & 255,
            i & 255
        ));
    }
    let file = dir.join("example.com.zone");
    std::fs::write(&file, z).unwrap();
    let mut zone = Zone::new(ORIGIN, &file);
    zone.options = vec!["allow_transfer = [\"127.0.0.0/8\"]".into()];
    zone
}

/// What came back on a connection that asked AXFR (ID 1) and then SOA (ID 2).
#[derive(Debug)]
struct Seen {
    /// AXFR messages read before the SOA answer.
    axfr_before_soa: usize,
    /// AXFR messages in all.
    axfr_messages: usize,
    /// Records the AXFR carried.
    axfr_records: usize,
    /// The SOA answer came.
    soa_answered: bool,
}

/// Sends AXFR and an SOA query in one write on one connection and reads until the transfer
/// has ended (its closing SOA) and the SOA answer has come.
fn axfr_then_soa(addr: SocketAddr) -> Seen {
    let mut s = client::tcp_connect(addr, Duration::from_secs(20)).unwrap();
    let mut burst = frame(&build_query(1, ORIGIN, qtype::AXFR, &QueryOpts::udp()));
    burst.extend(frame(&build_query(
        2,
        ORIGIN,
        qtype::SOA,
        &QueryOpts::udp(),
    )));
    s.write_all(&burst).unwrap();
    let mut seen = Seen {
        axfr_before_soa: 0,
        axfr_messages: 0,
        axfr_records: 0,
        soa_answered: false,
    };
    let mut soas = 0;
    // Bounded: a transfer of this zone is a few dozen messages.
    for _ in 0..10_000 {
        if soas >= 2 && seen.soa_answered {
            break;
        }
        let m = client::tcp_read_msg(&mut s)
            .expect("read")
            .expect("connection closed before the transfer and the SOA answer");
        let msg = Message::from_vec(&m).expect("parse");
        match msg.metadata.id {
            1 => {
                seen.axfr_messages += 1;
                if !seen.soa_answered {
                    seen.axfr_before_soa += 1;
                }
                seen.axfr_records += msg.answers.len();
                soas += msg
                    .answers
                    .iter()
                    .filter(|r| r.record_type() == RecordType::SOA)
                    .count();
            }
            2 => {
                assert!(!seen.soa_answered, "two answers with ID 2");
                assert_eq!(msg.answers.len(), 1);
                assert_eq!(msg.answers[0].record_type(), RecordType::SOA);
                seen.soa_answered = true;
            }
            id => panic!("a message with ID {id}"),
        }
    }
    seen
}

#[test]
fn an_soa_query_after_an_axfr_is_answered_while_the_transfer_streams() {
    let dir = tempfile::tempdir().unwrap();
    let zone = big_zone(dir.path());
    let dnsd = Dnsd::builder().zone(zone).start();
    let seen = axfr_then_soa(dnsd.addr());
    eprintln!("{seen:?}");
    // SOA, NS, ns1's A, the hosts, SOA again: all of it, whatever came between.
    assert_eq!(seen.axfr_records, HOSTS + 4, "{seen:?}");
    assert!(seen.axfr_messages > 10, "{seen:?}");
    assert!(
        seen.axfr_before_soa < seen.axfr_messages,
        "the SOA answer waited for the whole transfer: {seen:?}"
    );
    assert_eq!(dnsd.stat("transfer.out.axfr"), 1);
}

#[test]
fn at_one_unanswered_query_the_connection_is_served_in_order_and_the_bound_counted() {
    let dir = tempfile::tempdir().unwrap();
    let zone = big_zone(dir.path());
    let dnsd = Dnsd::builder()
        .zone(zone)
        .server_option("tcp_max_pipelined = 1")
        .start();
    let seen = axfr_then_soa(dnsd.addr());
    assert_eq!(seen.axfr_records, HOSTS + 4, "{seen:?}");
    assert_eq!(
        seen.axfr_before_soa, seen.axfr_messages,
        "with one query in flight the SOA query is not even read before the transfer ends: {seen:?}"
    );
    assert!(dnsd.stat("tcp.pipeline_full") >= 1, "{}", dnsd.metrics());
}

/// The keepalive option of the reply to an SOA query (with the option when `ask`).
fn keepalive_of(addr: SocketAddr, tcp: bool, ask: bool) -> Option<Vec<u8>> {
    let mut opts = QueryOpts::edns(1232);
    if ask {
        opts.options.push((KEEPALIVE, Vec::new()));
    }
    if tcp {
        opts = opts.over_tcp();
    }
    let reply = client::query_reply(addr, ORIGIN, qtype::SOA, &opts);
    let opt = reply.head.opt.expect("an OPT in the reply");
    let found: Vec<_> = opt
        .options
        .iter()
        .filter(|(c, _)| *c == KEEPALIVE)
        .collect();
    assert!(found.len() <= 1, "keepalive twice: {found:?}");
    found.first().map(|(_, d)| d.clone())
}

#[test]
fn edns_tcp_keepalive_tells_the_idle_timeout_over_tcp_only() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("example.com.zone");
    std::fs::write(
        &file,
        "$TTL 3600\n@ SOA ns1 hostmaster 7 3600 600 86400 300\n  NS ns1\nns1 A 192.0.2.1\n",
    )
    .unwrap();
    let zone = Zone::new(ORIGIN, &file);
    let dnsd = Dnsd::builder()
        .zone(zone.clone())
        .server_option("tcp_idle_timeout_ms = 7000")
        .start();
    let a = dnsd.addr();
    // 7 s in units of 100 ms.
    assert_eq!(
        keepalive_of(a, true, true),
        Some(70u16.to_be_bytes().to_vec())
    );
    assert_eq!(keepalive_of(a, true, false), None, "not asked");
    assert_eq!(keepalive_of(a, false, true), None, "never over UDP");
    // A query carrying a TIMEOUT (only responses may) is not the question: no option back,
    // as Knot and NSD answer it.
    let mut opts = QueryOpts::edns(1232).over_tcp();
    opts.options.push((KEEPALIVE, vec![0, 50]));
    let reply = client::query_reply(a, ORIGIN, qtype::SOA, &opts);
    let opt = reply.head.opt.expect("an OPT in the reply");
    assert!(opt.options.iter().all(|(c, _)| *c != KEEPALIVE), "{opt:?}");
    if !Bind::available() {
        palisade_tests::skipped("named not installed (bind9): keepalive not compared");
        return;
    }
    let bind = Bind::start_with(std::slice::from_ref(&zone), &["tcp-advertised-timeout 70;"]);
    for (tcp, ask) in [(true, true), (true, false), (false, true)] {
        assert_eq!(
            keepalive_of(bind.addr(), tcp, ask),
            keepalive_of(a, tcp, ask),
            "tcp {tcp}, asked {ask}: BIND and dnsd differ\n{}",
            bind.log()
        );
    }
}
