//! The bounds of zone transfers end to end (dnsd/src/transfer.rs, axfr.rs, notify.rs,
//! secondary.rs): concurrent AXFRs out are bounded in total (`[transfer] max_out`) and per
//! client (`max_out_per_client`), the excess answered SERVFAIL and counted, and slots come
//! back when transfers end; transfers of a large zone held open by slow readers never stall
//! the answering of other clients over UDP and TCP; and NOTIFY is taken only from a
//! secondary zone's primaries and `allow_notify`, any other being refused, counted and
//! triggering no refresh.

use std::fmt::Write as _;
use std::io::{ErrorKind, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpStream, UdpSocket};
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use hickory_proto::op::Message;
use hickory_proto::rr::RecordType;
use palisade_tests::client::{self, frame};
use palisade_tests::compare::Normalized;
use palisade_tests::net;
use palisade_tests::servers::{Dnsd, Zone};
use palisade_tests::wait::wait_for;
use palisade_tests::wire::{QueryOpts, RawMsg, build_query, flag, qtype, rcode};
use socket2::{Domain, Socket, Type};

/// How long any single read, write or query may wait.
const IO_WAIT: Duration = Duration::from_secs(5);

const BIG: &str = "big.test.";
/// TXT records of the large zone, besides its SOA, NS and the name server's A.
const BIG_RECORDS: usize = 200_000;
/// Records of an AXFR of the large zone: every record, and the SOA again at the end.
const BIG_AXFR_RECORDS: usize = BIG_RECORDS + 3 + 1;

/// Writes the large zone: about 14 MB as an AXFR, far more than the socket buffers and the
/// server's queue of a connection hold, so a client that stops reading keeps it open.
fn write_big_zone(path: &Path) {
    let mut s = String::with_capacity(BIG_RECORDS * 70);
    s.push_str(
        "$ORIGIN big.test.\n$TTL 300\n@ SOA ns1 hostmaster 1 3600 600 86400 60\n@ NS ns1\n\
         ns1 A 192.0.2.1\n",
    );
    for i in 0..BIG_RECORDS {
        let _ = writeln!(
            s,
            "h{i} TXT \"record {i:06} of the big zone, padding padding padding\""
        );
    }
    std::fs::write(path, s).unwrap();
}

/// A dnsd serving the large zone (transfers allowed from loopback), with `transfer` as its
/// `[transfer]` lines. TCP connections stay open for two minutes without progress, so the
/// transfers these tests hold are not cut off meanwhile.
fn start_big(dir: &Path, transfer: &str) -> Dnsd {
    let file = dir.join("big.test.zone");
    write_big_zone(&file);
    let mut z = Zone::new(BIG, &file);
    z.options = vec!["allow_transfer = [\"127.0.0.0/8\"]".into()];
    Dnsd::builder()
        .zone(z)
        .server_option("tcp_idle_timeout_ms = 120000")
        .raw("[defence.rrl]\nenabled = false")
        .raw(&format!("[transfer]\n{transfer}"))
        .start()
}

/// A TCP connection to `to` from the loopback address `from`; with `small_window`, a small
/// receive buffer, so that a client that stops reading holds the server back at once.
fn connect_from(from: Ipv4Addr, to: SocketAddr, small_window: bool) -> TcpStream {
    let s = Socket::new(Domain::IPV4, Type::STREAM, None).expect("socket");
    if small_window {
        s.set_recv_buffer_size(16 * 1024).unwrap();
    }
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

/// One message of a transfer: its rcode, answer count and the type of its last answer.
#[derive(Debug)]
struct Part {
    rcode: u16,
    answers: usize,
    last: Option<RecordType>,
}

/// Reads one message of a transfer from `s`.
fn read_part(s: &mut TcpStream, id: u16) -> Result<Part, String> {
    let m = match client::tcp_read_msg(s) {
        Ok(Some(m)) => m,
        Ok(None) => return Err("closed".into()),
        Err(e) => return Err(format!("read: {e}")),
    };
    let msg = Message::from_vec(&m).map_err(|e| format!("message does not parse: {e}"))?;
    let head = RawMsg::parse(&m)?;
    if head.id != id || !head.has(flag::QR) {
        return Err(format!(
            "not the answer to {id}: id {} flags {:#x}",
            head.id, head.flags
        ));
    }
    Ok(Part {
        rcode: head.rcode(),
        answers: msg.answers.len(),
        last: msg.answers.last().map(|r| r.record_type()),
    })
}

/// An AXFR of the large zone started from `from`: the connection and the first message.
struct Xfr {
    s: TcpStream,
    id: u16,
    first: Part,
}

fn start_axfr(from: Ipv4Addr, to: SocketAddr, small_window: bool) -> Xfr {
    let mut s = connect_from(from, to, small_window);
    let id = client::next_id();
    s.write_all(&frame(&build_query(
        id,
        BIG,
        qtype::AXFR,
        &QueryOpts::udp(),
    )))
    .unwrap();
    let first = read_part(&mut s, id).unwrap_or_else(|e| panic!("AXFR from {from}: {e}"));
    Xfr { s, id, first }
}

impl Xfr {
    /// True when the transfer is under way: NOERROR, the SOA first, more to come.
    fn running(&self) -> bool {
        self.first.rcode == rcode::NOERROR
            && self.first.answers > 0
            && self.first.answers < BIG_AXFR_RECORDS
    }

    /// Reads the rest of the transfer; returns the records of the whole of it.
    fn finish(mut self) -> Result<usize, String> {
        let mut total = self.first.answers;
        for _ in 0..100_000 {
            if total >= BIG_AXFR_RECORDS {
                break;
            }
            let p = read_part(&mut self.s, self.id)?;
            if p.rcode != rcode::NOERROR {
                return Err(format!("rcode {} after {total} records", p.rcode));
            }
            total += p.answers;
            if total == BIG_AXFR_RECORDS && p.last != Some(RecordType::SOA) {
                return Err("the last record is not the SOA".into());
            }
        }
        Ok(total)
    }
}

#[test]
fn concurrent_axfrs_out_are_bounded_in_total_and_per_client() {
    let dir = tempfile::tempdir().unwrap();
    let dnsd = start_big(dir.path(), "max_out = 4\nmax_out_per_client = 2");
    let addr = dnsd.addr();
    let (a, b, c) = (net::test_ip(), net::test_ip(), net::test_ip());

    // Client a: two transfers under way (neither read further), the third refused.
    let a1 = start_axfr(a, addr, true);
    let a2 = start_axfr(a, addr, true);
    assert!(
        a1.running() && a2.running(),
        "{:?} {:?}",
        a1.first,
        a2.first
    );
    let a3 = start_axfr(a, addr, true);
    assert_eq!(
        a3.first.rcode,
        rcode::SERVFAIL,
        "over max_out_per_client: {:?}",
        a3.first
    );
    assert_eq!(a3.first.answers, 0);
    let s = dnsd.stats();
    assert_eq!(
        (
            s["transfer.out.limit_client"],
            s["transfer.out.limit_total"]
        ),
        (1, 0),
        "{s:?}"
    );

    // Client b takes the other two slots; then client c, with none of its own, is refused.
    let b1 = start_axfr(b, addr, true);
    let b2 = start_axfr(b, addr, true);
    assert!(
        b1.running() && b2.running(),
        "{:?} {:?}",
        b1.first,
        b2.first
    );
    let c1 = start_axfr(c, addr, true);
    assert_eq!(
        c1.first.rcode,
        rcode::SERVFAIL,
        "over max_out: {:?}",
        c1.first
    );
    let s = dnsd.stats();
    assert_eq!(
        (
            s["transfer.out.limit_client"],
            s["transfer.out.limit_total"]
        ),
        (1, 1),
        "{s:?}"
    );
    assert_eq!(s["transfer.out.axfr"], 4, "{s:?}");

    // Ordinary queries are answered meanwhile, over UDP and TCP.
    for tcp in [false, true] {
        let o = QueryOpts {
            tcp,
            timeout: IO_WAIT,
            ..QueryOpts::udp()
        };
        let r = client::query_reply(addr, "h123.big.test.", qtype::TXT, &o);
        assert_eq!(r.head.rcode(), rcode::NOERROR);
    }

    // a1's client goes away: its slot (and a's share) comes back; c is served.
    drop(a1);
    wait_for("a1 to be released", Duration::from_secs(10), || {
        dnsd.stat("transfer.out.aborted") == 1
    });
    let c2 = start_axfr(c, addr, true);
    assert!(c2.running(), "a freed slot is used: {:?}", c2.first);
    // Full again.
    let c3 = start_axfr(c, addr, true);
    assert_eq!(c3.first.rcode, rcode::SERVFAIL, "{:?}", c3.first);
    assert_eq!(dnsd.stat("transfer.out.limit_total"), 2);

    // b1 goes away: a, below its share again, is served.
    drop(b1);
    wait_for("b1 to be released", Duration::from_secs(10), || {
        dnsd.stat("transfer.out.aborted") == 2
    });
    let a4 = start_axfr(a, addr, true);
    assert!(a4.running(), "{:?}", a4.first);

    // The transfers held meanwhile were whole all along: one read to the end holds every
    // record once and ends with the SOA.
    assert_eq!(b2.finish(), Ok(BIG_AXFR_RECORDS));
    let s = dnsd.stats();
    assert_eq!(s["transfer.out.axfr"], 6, "{s:?}");
    assert_eq!(
        (
            s["transfer.out.limit_client"],
            s["transfer.out.limit_total"]
        ),
        (1, 2),
        "every refusal counted once: {s:?}"
    );
    drop((a2, a3, a4, c1, c2, c3));
}

/// A client reading one message of a transfer every `pace` until `stop`: whether it saw the
/// transfer's end, and how many messages it read.
fn slow_reader(
    mut x: Xfr,
    pace: Duration,
    stop: Arc<AtomicBool>,
) -> std::thread::JoinHandle<(bool, u64)> {
    std::thread::spawn(move || {
        let mut total = x.first.answers;
        let mut msgs = 1;
        for _ in 0..10_000 {
            if stop.load(Ordering::Relaxed) {
                break;
            }
            std::thread::sleep(pace);
            match read_part(&mut x.s, x.id) {
                Ok(p) => {
                    total += p.answers;
                    msgs += 1;
                }
                Err(_) => break,
            }
            if total >= BIG_AXFR_RECORDS {
                return (true, msgs);
            }
        }
        (false, msgs)
    })
}

/// The TXT of `h{i}.big.test.` is answered (over UDP or TCP, on a new connection or `conn`).
fn check_txt(addr: SocketAddr, i: usize, tcp: bool) -> Result<(), String> {
    let o = QueryOpts {
        tcp,
        timeout: IO_WAIT,
        ..QueryOpts::udp()
    };
    let r = client::try_query(addr, &format!("h{i}.big.test."), qtype::TXT, &o)?;
    let want = format!("record {i:06} of");
    let n = Normalized::from_reply(&r);
    if r.head.rcode() != rcode::NOERROR || !n.answer.iter().any(|a| a.text.contains(&want)) {
        return Err(format!(
            "h{i} over {}: {:?}",
            if tcp { "TCP" } else { "UDP" },
            n.answer
        ));
    }
    Ok(())
}

#[test]
fn transfers_held_open_by_slow_readers_never_stall_answering() {
    let dir = tempfile::tempdir().unwrap();
    let dnsd = start_big(dir.path(), "max_out = 16\nmax_out_per_client = 2");
    let addr = dnsd.addr();
    let stop = Arc::new(AtomicBool::new(false));

    // Three transfers read slowly, one message at a time, from three clients...
    let slow: Vec<_> = (0..3)
        .map(|_| {
            let x = start_axfr(net::test_ip(), addr, true);
            assert!(x.running(), "{:?}", x.first);
            slow_reader(x, Duration::from_millis(100), stop.clone())
        })
        .collect();
    // ...and whole transfers read as fast as the client can, one after another.
    let fast_done = Arc::new(AtomicU64::new(0));
    let fast = {
        let (stop, done) = (stop.clone(), fast_done.clone());
        let from = net::test_ip();
        std::thread::spawn(move || -> Result<(), String> {
            for _ in 0..20 {
                if stop.load(Ordering::Relaxed) {
                    break;
                }
                let x = start_axfr(from, addr, false);
                let n = x.finish()?;
                if n != BIG_AXFR_RECORDS {
                    return Err(format!("a whole transfer had {n} records"));
                }
                done.fetch_add(1, Ordering::Relaxed);
            }
            Ok(())
        })
    };

    // Meanwhile every query of other clients is answered: over UDP, over TCP on new
    // connections, and pipelined on one connection kept open.
    let mut conn = connect_from(net::test_ip(), addr, false);
    let mut failures = Vec::new();
    for round in 0..40usize {
        for k in 0..5 {
            let i = (round * 5 + k) * 997 % BIG_RECORDS;
            if let Err(e) = check_txt(addr, i, false) {
                failures.push(e);
            }
        }
        if let Err(e) = check_txt(addr, round * 4999 % BIG_RECORDS, true) {
            failures.push(e);
        }
        let id = 7000 + round as u16;
        let q = build_query(id, "ns1.big.test.", qtype::A, &QueryOpts::udp());
        let got = conn
            .write_all(&frame(&q))
            .map_err(|e| e.to_string())
            .and_then(|_| {
                client::tcp_read_msg(&mut conn)
                    .map_err(|e| e.to_string())?
                    .ok_or_else(|| "closed".to_string())
            });
        match got.and_then(|m| RawMsg::parse(&m)) {
            Ok(r) if r.id == id && r.rcode() == rcode::NOERROR && r.counts[1] == 1 => {}
            other => failures.push(format!("kept-open connection, query {round}: {other:?}")),
        }
        std::thread::sleep(Duration::from_millis(25));
    }
    // The fast transfers ran alongside (at least one whole one while the queries went on).
    wait_for("a whole fast transfer", Duration::from_secs(60), || {
        fast_done.load(Ordering::Relaxed) >= 1
    });
    stop.store(true, Ordering::Relaxed);
    let slow: Vec<(bool, u64)> = slow.into_iter().map(|h| h.join().unwrap()).collect();
    fast.join().unwrap().expect("the fast transfers were whole");
    assert!(
        failures.is_empty(),
        "{} failures: {failures:?}",
        failures.len()
    );
    // The slow transfers were under way the whole time, not finished early.
    for (i, (ended, msgs)) in slow.iter().enumerate() {
        assert!(
            !ended && *msgs > 1,
            "slow transfer {i}: ended {ended} after {msgs} messages"
        );
    }
    let s = dnsd.stats();
    assert!(s["transfer.out.axfr"] >= 4, "{s:?}");
    assert_eq!(
        s["transfer.out.limit_total"] + s["transfer.out.limit_client"],
        0,
        "{s:?}"
    );
    let _ = conn.shutdown(std::net::Shutdown::Both);
}

// ---------------------------------------------------------------------------------------
// NOTIFY

const ZONE: &str = "notify.test.";

fn small_zone(serial: u32) -> String {
    format!(
        "$ORIGIN notify.test.\n$TTL 300\n@ SOA ns1 hostmaster {serial} 3600 600 86400 60\n\
         @ NS ns1\nns1 A 192.0.2.1\nwww TXT \"serial {serial}\"\n"
    )
}

/// The serial `addr` serves for [`ZONE`].
fn serial(addr: SocketAddr) -> Option<u32> {
    let r = client::try_query(addr, ZONE, qtype::SOA, &QueryOpts::udp()).ok()?;
    let n = Normalized::from_reply(&r);
    let soa = n.answer.iter().find(|r| r.rtype == qtype::SOA)?;
    soa.text.split_whitespace().nth(2)?.parse().ok()
}

/// Sends a NOTIFY for `zone` from the loopback address `from` to `to`: the answer's rcode.
fn notify_from(from: Ipv4Addr, to: SocketAddr, zone: &str) -> u16 {
    let s =
        UdpSocket::bind(SocketAddr::from((from, 0))).unwrap_or_else(|e| panic!("bind {from}: {e}"));
    s.connect(to).unwrap();
    s.set_read_timeout(Some(IO_WAIT)).unwrap();
    let id = client::next_id();
    let o = QueryOpts {
        opcode: 4,
        flags: flag::AA,
        ..QueryOpts::udp()
    };
    s.send(&build_query(id, zone, qtype::SOA, &o)).unwrap();
    let mut buf = [0u8; 4096];
    for _ in 0..8 {
        match s.recv(&mut buf) {
            Ok(n) => {
                let r = RawMsg::parse(&buf[..n]).expect("a NOTIFY answer that parses");
                if r.id != id {
                    continue;
                }
                assert!(r.has(flag::QR) && r.opcode() == 4, "{r:?}");
                return r.rcode();
            }
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => break,
            Err(e) => panic!("NOTIFY from {from}: {e}"),
        }
    }
    panic!("no answer to the NOTIFY from {from} within {IO_WAIT:?}");
}

/// Refreshes the secondary has done, whatever their result.
fn refreshes(d: &Dnsd) -> u64 {
    let s = d.stats();
    [
        "transfer.in.axfr",
        "transfer.in.ixfr",
        "transfer.in.current",
        "transfer.in.failed",
    ]
    .iter()
    .map(|k| s.get(k))
    .sum()
}

/// The primary's zone goes to `serial`, reloaded (the primary notifies no one itself).
fn primary_to(primary: &Dnsd, file: &Path, serial_now: u32) {
    std::fs::write(file, small_zone(serial_now)).unwrap();
    let (ok, out) = primary.ctl(&["reload"]);
    assert!(ok, "{out}");
    assert_eq!(serial(primary.addr()), Some(serial_now));
}

/// A refused NOTIFY changes nothing: no refresh, the old serial, for a while.
fn assert_no_refresh(secondary: &Dnsd, serial_then: u32, refreshes_then: u64) {
    for _ in 0..10 {
        std::thread::sleep(Duration::from_millis(150));
        assert_eq!(serial(secondary.addr()), Some(serial_then));
        assert_eq!(refreshes(secondary), refreshes_then, "{}", secondary.log());
    }
}

#[test]
fn notify_is_taken_only_from_primaries_and_allow_notify() {
    let dir = tempfile::tempdir().unwrap();
    let pfile = dir.path().join("primary.zone");
    std::fs::write(&pfile, small_zone(1)).unwrap();
    let mut pz = Zone::new(ZONE, &pfile);
    pz.options = vec!["allow_transfer = [\"127.0.0.0/8\"]".into()];
    let primary = Dnsd::builder().zone(pz).start();
    let p_ip = match primary.addr().ip() {
        std::net::IpAddr::V4(ip) => ip,
        std::net::IpAddr::V6(_) => unreachable!("IPv4 test addresses"),
    };

    // The secondary: refresh an hour away, so only a NOTIFY can make it look sooner.
    let allowed = net::test_ip();
    let stranger = net::test_ip();
    let mut sz = Zone::new(ZONE, dir.path().join("secondary").join("copy.zone"));
    sz.options = vec![
        format!("primaries = [\"{}\"]", primary.addr()),
        format!("allow_notify = [\"{allowed}/32\"]"),
    ];
    let secondary = Dnsd::builder()
        .zone(sz)
        .zone(Zone::data("example.com"))
        .start();
    let sa = secondary.addr();
    assert_eq!(serial(sa), Some(1));
    let r0 = refreshes(&secondary);
    assert_eq!(r0, 1, "the first transfer");

    primary_to(&primary, &pfile, 2);
    // From a stranger: REFUSED, counted, and nothing else happens.
    assert_eq!(notify_from(stranger, sa, ZONE), rcode::REFUSED);
    // For a zone that is not a secondary here (a primary one, or one not served): NOTAUTH,
    // counted with the refusals, even from the zone's primary's address.
    assert_eq!(notify_from(p_ip, sa, "example.com."), rcode::NOTAUTH);
    assert_eq!(notify_from(p_ip, sa, "elsewhere.test."), rcode::NOTAUTH);
    let s = secondary.stats();
    assert_eq!(
        (s["notify.in.refused"], s["notify.in.accepted"]),
        (3, 0),
        "{s:?}"
    );
    assert_no_refresh(&secondary, 1, r0);

    // From the primary's address: accepted, and the zone is brought up to date.
    assert_eq!(notify_from(p_ip, sa, ZONE), rcode::NOERROR);
    wait_for("serial 2 on the secondary", Duration::from_secs(20), || {
        serial(sa) == Some(2)
    });
    assert_eq!(secondary.stat("notify.in.accepted"), 1);
    let r1 = refreshes(&secondary);
    assert_eq!(r1, r0 + 1);

    // From an address of allow_notify: accepted too.
    primary_to(&primary, &pfile, 3);
    assert_eq!(notify_from(allowed, sa, ZONE), rcode::NOERROR);
    wait_for("serial 3 on the secondary", Duration::from_secs(20), || {
        serial(sa) == Some(3)
    });
    assert_eq!(secondary.stat("notify.in.accepted"), 2);
    let r2 = refreshes(&secondary);

    // Any other address is a stranger still, after NOTIFYs were accepted.
    primary_to(&primary, &pfile, 4);
    assert_eq!(notify_from(net::test_ip(), sa, ZONE), rcode::REFUSED);
    assert_no_refresh(&secondary, 3, r2);
    let s = secondary.stats();
    assert_eq!(
        (s["notify.in.refused"], s["notify.in.accepted"]),
        (4, 2),
        "{s:?}"
    );
}

/// A client that takes a transfer slower than `[transfer] out_min_rate_bytes_per_sec` is cut
/// (it would hold a `max_out` slot for minutes: 64 KiB every two seconds of a 14 MB zone),
/// counted as a TCP timeout; a client that reads at once takes the whole zone.
#[test]
fn a_transfer_read_below_the_minimum_rate_is_cut() {
    let dir = tempfile::tempdir().unwrap();
    let dnsd = start_big(
        dir.path(),
        "max_out = 4\nout_min_rate_bytes_per_sec = 65536",
    );
    let addr = dnsd.addr();
    let before = dnsd.stats()["drops.tcp_timeout"];
    let mut x = start_axfr(net::test_ip(), addr, true);
    assert!(x.running(), "{:?}", x.first);
    let t0 = Instant::now();
    let mut msgs = 1;
    let cut = loop {
        if t0.elapsed() > Duration::from_secs(60) {
            break false;
        }
        std::thread::sleep(Duration::from_secs(2));
        match read_part(&mut x.s, x.id) {
            Ok(_) => msgs += 1,
            Err(_) => break true,
        }
    };
    assert!(
        cut,
        "still served after {msgs} messages in {:?}",
        t0.elapsed()
    );
    assert!(msgs < 40, "{msgs} messages before the cut");
    assert!(dnsd.stats()["drops.tcp_timeout"] > before);
    let fast = start_axfr(net::test_ip(), addr, false);
    assert_eq!(fast.finish(), Ok(BIG_AXFR_RECORDS));
}

/// A hostile primary on `ip`: SOA answers over UDP with `serial`, and over TCP a transfer
/// answer trickled a byte every 200 ms (bounded: a minute), until `stop`.
fn trickling_primary(ip: Ipv4Addr, serial: u32, stop: Arc<AtomicBool>) -> SocketAddr {
    let udp = UdpSocket::bind(SocketAddr::from((ip, 0))).unwrap();
    let addr = udp.local_addr().unwrap();
    let tcp = std::net::TcpListener::bind(addr).unwrap();
    udp.set_read_timeout(Some(Duration::from_millis(100)))
        .unwrap();
    tcp.set_nonblocking(true).unwrap();
    let st = stop.clone();
    std::thread::spawn(move || {
        let mut buf = [0u8; 512];
        while !st.load(Ordering::Relaxed) {
            let Ok((n, from)) = udp.recv_from(&mut buf) else {
                continue;
            };
            // The question as asked (no EDNS in dnsd's SOA query), then the SOA answer.
            let mut end = 12;
            while end < n && buf[end] != 0 {
                end += 1 + buf[end] as usize;
            }
            let q = &buf[12..(end + 5).min(n)];
            let mut r = vec![buf[0], buf[1], 0x84, 0, 0, 1, 0, 1, 0, 0, 0, 0];
            r.extend_from_slice(q);
            r.extend_from_slice(&[0xc0, 12, 0, 6, 0, 1, 0, 0, 1, 44, 0, 22, 0, 0]);
            r.extend_from_slice(&serial.to_be_bytes());
            for v in [3600u32, 600, 86400, 60] {
                r.extend_from_slice(&v.to_be_bytes());
            }
            let _ = udp.send_to(&r, from);
        }
    });
    std::thread::spawn(move || {
        let mut conns: Vec<TcpStream> = Vec::new();
        for _ in 0..300 {
            if stop.load(Ordering::Relaxed) {
                break;
            }
            if let Ok((c, _)) = tcp.accept() {
                conns.push(c);
            }
            // A length of 400 bytes, then the message a byte at a time.
            conns.retain_mut(|c| c.write_all(&[1]).is_ok());
            std::thread::sleep(Duration::from_millis(200));
        }
    });
    addr
}

/// A primary cannot hold a transfer slot by trickling its answer, nor fill memory with a
/// large one: the transfer is cut once its average falls under `in_min_rate_bytes_per_sec`
/// (after 5 s) or its bytes pass `max_in_bytes`, counted, and the slot serves the next zone.
#[test]
fn a_transfer_in_trickled_or_too_large_is_cut() {
    let dir = tempfile::tempdir().unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let slow = trickling_primary(net::test_ip(), 5, stop.clone());
    // A healthy primary of the big zone (about 14 MB) and of a small one.
    let big_file = dir.path().join("big.test.zone");
    write_big_zone(&big_file);
    let small_file = dir.path().join("notify.test.zone");
    std::fs::write(&small_file, small_zone(3)).unwrap();
    let open = |z: &str, f: &Path| {
        let mut z = Zone::new(z, f);
        z.options = vec!["allow_transfer = [\"127.0.0.0/8\"]".into()];
        z
    };
    let primary = Dnsd::builder()
        .zones(&[open(BIG, &big_file), open(ZONE, &small_file)])
        .start();
    let p = primary.addr();
    let secondary_zone = |z: &str, from: SocketAddr| {
        let mut z = Zone::new(z, dir.path().join(format!("secondary-{z}zone")));
        z.options = vec![format!("primaries = [\"{from}\"]")];
        z
    };
    // A zone of its own first: what the harness asks to see it ready.
    let ready = dir.path().join("ready.test.zone");
    std::fs::write(
        &ready,
        small_zone(1).replace("$ORIGIN notify.test.", "$ORIGIN ready.test."),
    )
    .unwrap();
    let secondary = Dnsd::builder()
        .zone(Zone::new("ready.test.", &ready))
        .raw("[transfer]\nmax_in = 1\nin_min_rate_bytes_per_sec = 65536\nmax_in_bytes = 1000000")
        .start();
    let s = secondary.addr();
    // The secondary zones come with a reload (the harness waits for every zone it starts
    // with to be served).
    let mut cfg = std::fs::read_to_string(secondary.config_path()).unwrap();
    for z in [
        secondary_zone("slow.test.", slow),
        secondary_zone(BIG, p),
        secondary_zone(ZONE, p),
    ] {
        let _ = write!(
            cfg,
            "\n[[zone]]\norigin = \"{}\"\nfile = \"{}\"\n{}\n",
            z.origin,
            z.file.display(),
            z.options.join("\n")
        );
    }
    std::fs::write(secondary.config_path(), cfg).unwrap();
    let (ok, out) = secondary.ctl(&["reload"]);
    assert!(ok, "{out}");
    // The small zone comes whatever the other two do with the one slot.
    wait_for(
        "the small zone transferred",
        Duration::from_secs(30),
        || serial(s) == Some(3),
    );
    // The trickled one and the large one are both cut and counted, neither served.
    wait_for("both cut", Duration::from_secs(30), || {
        secondary.stats()["transfer.in.limit"] >= 2
    });
    let log = secondary.log();
    assert!(log.contains("max_in_bytes"), "{log}");
    assert!(log.contains("in_min_rate_bytes_per_sec"), "{log}");
    for z in ["slow.test.", BIG] {
        let r = client::try_query(s, z, qtype::SOA, &QueryOpts::udp()).unwrap();
        assert_ne!(r.head.rcode(), rcode::NOERROR, "{z} served");
    }
    stop.store(true, Ordering::Relaxed);
}
