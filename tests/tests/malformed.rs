//! Garbage never crashes dnsd: malformed and random messages over UDP and TCP each get a
//! FORMERR (or NOTIMP for unknown opcodes) or no answer at all; afterwards the server still
//! answers, and its malformed-input counters have risen.
//!
//! Over UDP every probe is followed by a valid sentinel query on the same socket: dnsd has
//! one worker and one socket here, so the replies come back in order and whatever arrives
//! before the sentinel's reply is the probe's — no waiting for a timeout to prove a drop.

use std::net::{SocketAddr, UdpSocket};
use std::time::{Duration, Instant};

use palisade_tests::client::{self, frame, tcp_raw};
use palisade_tests::counters::Counters;
use palisade_tests::rng::Rng;
use palisade_tests::servers::{Dnsd, Zone};
use palisade_tests::wire::{
    QueryOpts, RawMsg, build_query, flag, name_to_wire, qtype as T, rcode, rcode_name,
};

/// Seed of the random inputs (fixed: a failure replays).
const SEED: u64 = 0xBAD_DA7A;
/// Random datagrams and random mutations of valid queries sent over UDP, each.
const RANDOM_COUNT: usize = 1500;
/// Random byte streams sent over TCP.
const TCP_RANDOM_COUNT: usize = 60;

/// What a probe may get back.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Allowed {
    /// FORMERR, or nothing.
    FormErr,
    /// NOTIMP or FORMERR, or nothing (unknown opcodes).
    NotImp,
    /// Any well-formed response (or none): the input is odd but not clearly invalid.
    Any,
    /// Nothing at all (responses must never be answered).
    Nothing,
}

fn hdr(id: u16, flags: u16, qd: u16, an: u16, ns: u16, ar: u16) -> Vec<u8> {
    let mut m = Vec::new();
    for w in [id, flags, qd, an, ns, ar] {
        m.extend_from_slice(&w.to_be_bytes());
    }
    m
}

fn question(name: &str, t: u16) -> Vec<u8> {
    let mut q = name_to_wire(name);
    q.extend_from_slice(&t.to_be_bytes());
    q.extend_from_slice(&1u16.to_be_bytes());
    q
}

/// An OPT record with this owner (raw), payload size and RDATA.
fn opt(owner: &[u8], rdata: &[u8], rdlen: u16) -> Vec<u8> {
    let mut o = owner.to_vec();
    o.extend_from_slice(&41u16.to_be_bytes());
    o.extend_from_slice(&1232u16.to_be_bytes());
    o.extend_from_slice(&[0, 0, 0, 0]);
    o.extend_from_slice(&rdlen.to_be_bytes());
    o.extend_from_slice(rdata);
    o
}

fn option(code: u16, len: u16, data: &[u8]) -> Vec<u8> {
    let mut o = code.to_be_bytes().to_vec();
    o.extend_from_slice(&len.to_be_bytes());
    o.extend_from_slice(data);
    o
}

/// A raw name from labels (no checks: for oversized and odd names).
fn raw_name(labels: &[&[u8]]) -> Vec<u8> {
    let mut n = Vec::new();
    for l in labels {
        n.push(l.len() as u8);
        n.extend_from_slice(l);
    }
    n.push(0);
    n
}

/// The hand-made malformed messages: (what, bytes, what may come back).
fn cases() -> Vec<(&'static str, Vec<u8>, Allowed)> {
    use Allowed::*;
    let id = 0x4242;
    let q = |f: u16, qd, an, ns, ar| hdr(id, f, qd, an, ns, ar);
    let www = question("www.example.com.", T::A);
    let cat = |parts: &[&[u8]]| parts.concat();
    let valid_opt = opt(&[0], &[], 0);
    let long63 = [b'a'; 63];
    let mut v: Vec<(&'static str, Vec<u8>, Allowed)> = vec![
        ("empty datagram", vec![], Nothing),
        ("one octet", vec![0x42], Nothing),
        (
            "truncated header (11 octets)",
            q(0, 1, 0, 0, 0)[..11].to_vec(),
            Nothing,
        ),
        ("header only, QDCOUNT 1", q(0, 1, 0, 0, 0), FormErr),
        ("header only, QDCOUNT 0", q(0, 0, 0, 0, 0), FormErr),
        (
            "QDCOUNT 0 with a question",
            cat(&[&q(0, 0, 0, 0, 0), &www]),
            FormErr,
        ),
        (
            "QDCOUNT 2, one question",
            cat(&[&q(0, 2, 0, 0, 0), &www]),
            FormErr,
        ),
        (
            "QDCOUNT 2, two questions",
            cat(&[&q(0, 2, 0, 0, 0), &www, &www]),
            FormErr,
        ),
        (
            "QDCOUNT 65535",
            cat(&[&q(0, 0xFFFF, 0, 0, 0), &www]),
            FormErr,
        ),
        (
            "question name cut in a label",
            cat(&[&q(0, 1, 0, 0, 0), &www[..6]]),
            FormErr,
        ),
        (
            "question without type and class",
            cat(&[&q(0, 1, 0, 0, 0), &name_to_wire("www.example.com.")]),
            FormErr,
        ),
        (
            "question with the type only",
            cat(&[&q(0, 1, 0, 0, 0), &www[..www.len() - 2]]),
            FormErr,
        ),
        (
            "pointer to itself in the question",
            cat(&[&q(0, 1, 0, 0, 0), &[0xC0, 12, 0, 1, 0, 1]]),
            FormErr,
        ),
        (
            "pointer loop in the question (label, then back)",
            cat(&[&q(0, 1, 0, 0, 0), &[1, b'a', 0xC0, 12, 0, 1, 0, 1]]),
            FormErr,
        ),
        (
            "forward pointer in the question",
            cat(&[
                &q(0, 1, 0, 0, 0),
                &[0xC0, 18, 0, 1, 0, 1],
                &name_to_wire("www.example.com."),
            ]),
            FormErr,
        ),
        (
            "pointer past the end",
            cat(&[&q(0, 1, 0, 0, 0), &[0xC0, 0xFF, 0, 1, 0, 1]]),
            FormErr,
        ),
        (
            "pointer with no second octet",
            cat(&[&q(0, 1, 0, 0, 0), &[0xC0]]),
            FormErr,
        ),
        (
            "extended label type 0x40",
            cat(&[&q(0, 1, 0, 0, 0), &[0x41, 0, 0, 0, 1, 0, 1]]),
            FormErr,
        ),
        (
            "reserved label type 0x80",
            cat(&[&q(0, 1, 0, 0, 0), &[0x81, b'a', 0, 0, 1, 0, 1]]),
            FormErr,
        ),
        (
            "name of 320 octets (5 labels of 63)",
            cat(&[
                &q(0, 1, 0, 0, 0),
                &raw_name(&[&long63[..]; 5]),
                &[0, 1, 0, 1],
            ]),
            FormErr,
        ),
        (
            "name of 256 octets",
            cat(&[
                &q(0, 1, 0, 0, 0),
                &raw_name(&[&long63, &long63, &long63, &[b'b'; 62]]),
                &[0, 1, 0, 1],
            ]),
            FormErr,
        ),
        (
            "name of 255 octets (valid, in no zone)",
            cat(&[
                &q(0, 1, 0, 0, 0),
                &raw_name(&[&long63, &long63, &long63, &[b'b'; 61]]),
                &[0, 1, 0, 1],
            ]),
            Any,
        ),
        (
            "name of 128 labels (257 octets)",
            cat(&[
                &q(0, 1, 0, 0, 0),
                &raw_name(&[&b"a"[..]; 128]),
                &[0, 1, 0, 1],
            ]),
            FormErr,
        ),
        (
            "name of 127 labels (255 octets, valid)",
            cat(&[
                &q(0, 1, 0, 0, 0),
                &raw_name(&[&b"a"[..]; 127]),
                &[0, 1, 0, 1],
            ]),
            Any,
        ),
        (
            "ANCOUNT 1, no record",
            cat(&[&q(0, 1, 1, 0, 0), &www]),
            FormErr,
        ),
        (
            "ANCOUNT 1 with a record (a query with an answer)",
            cat(&[
                &q(0, 1, 1, 0, 0),
                &www,
                &[0xC0, 12, 0, 1, 0, 1, 0, 0, 0, 60, 0, 4, 192, 0, 2, 1],
            ]),
            FormErr,
        ),
        (
            "NSCOUNT 5, nothing there",
            cat(&[&q(0, 1, 0, 5, 0), &www]),
            FormErr,
        ),
        (
            "ARCOUNT 3, one OPT",
            cat(&[&q(0, 1, 0, 0, 3), &www, &valid_opt]),
            FormErr,
        ),
        (
            "ARCOUNT 1, nothing there",
            cat(&[&q(0, 1, 0, 0, 1), &www]),
            FormErr,
        ),
        (
            "OPT cut short",
            cat(&[&q(0, 1, 0, 0, 1), &www, &valid_opt[..7]]),
            FormErr,
        ),
        (
            "OPT RDLENGTH past the end",
            cat(&[&q(0, 1, 0, 0, 1), &www, &opt(&[0], &[0, 3, 0, 0], 40)]),
            FormErr,
        ),
        (
            "OPT option length past the RDATA",
            cat(&[
                &q(0, 1, 0, 0, 1),
                &www,
                &opt(&[0], &option(3, 200, &[1, 2]), 6),
            ]),
            FormErr,
        ),
        (
            "OPT option header cut (2 octets)",
            cat(&[&q(0, 1, 0, 0, 1), &www, &opt(&[0], &[0, 3], 2)]),
            FormErr,
        ),
        (
            "two OPT records",
            cat(&[&q(0, 1, 0, 0, 2), &www, &valid_opt, &valid_opt]),
            FormErr,
        ),
        (
            "OPT with a non-root owner",
            cat(&[
                &q(0, 1, 0, 0, 1),
                &www,
                &opt(&name_to_wire("example.com."), &[], 0),
            ]),
            FormErr,
        ),
        (
            "OPT whose owner points at the question",
            cat(&[&q(0, 1, 0, 0, 1), &www, &opt(&[0xC0, 12], &[], 0)]),
            FormErr,
        ),
        (
            "COOKIE of 3 octets",
            cat(&[
                &q(0, 1, 0, 0, 1),
                &www,
                &opt(&[0], &option(10, 3, &[1, 2, 3]), 7),
            ]),
            FormErr,
        ),
        (
            "COOKIE of 41 octets",
            cat(&[
                &q(0, 1, 0, 0, 1),
                &www,
                &opt(&[0], &option(10, 41, &[7; 41]), 45),
            ]),
            FormErr,
        ),
        (
            "two COOKIE options",
            cat(&[
                &q(0, 1, 0, 0, 1),
                &www,
                &opt(
                    &[0],
                    &[option(10, 8, &[1; 8]), option(10, 8, &[2; 8])].concat(),
                    24,
                ),
            ]),
            FormErr,
        ),
        (
            "TSIG before OPT (TSIG not last)",
            cat(&[
                &q(0, 1, 0, 0, 2),
                &www,
                &[
                    &name_to_wire("key.")[..],
                    &[0, 250, 0, 255, 0, 0, 0, 0, 0, 0],
                ]
                .concat(),
                &valid_opt,
            ]),
            FormErr,
        ),
        (
            "a response (QR set)",
            cat(&[&q(flag::QR, 1, 0, 0, 0), &www]),
            Nothing,
        ),
        (
            "opcode 3 (unassigned)",
            cat(&[&q(3 << 11, 1, 0, 0, 0), &www]),
            NotImp,
        ),
        (
            "opcode 5 (UPDATE) with garbage",
            cat(&[&q(5 << 11, 1, 7, 7, 7), &[0xFF; 9]]),
            NotImp,
        ),
        (
            "opcode 15, no question, garbage counts",
            q(15 << 11, 9, 9, 9, 9),
            NotImp,
        ),
        (
            "trailing garbage after a valid query",
            cat(&[&q(0, 1, 0, 0, 0), &www, &[0xDE, 0xAD, 0xBE, 0xEF]]),
            Any,
        ),
        (
            "QTYPE 0 and QCLASS 0",
            cat(&[
                &q(0, 1, 0, 0, 0),
                &name_to_wire("www.example.com."),
                &[0, 0, 0, 0],
            ]),
            Any,
        ),
        (
            "root name, QTYPE 65535",
            cat(&[&q(0, 1, 0, 0, 0), &[0, 0xFF, 0xFF, 0, 1]]),
            Any,
        ),
        (
            "all bits set in the header",
            cat(&[&hdr(id, 0x7FFF, 1, 0, 0, 0), &www]),
            NotImp,
        ),
    ];
    // An over-long datagram: a valid query followed by 5000 octets of padding.
    v.push((
        "5000 octets of trailing garbage",
        cat(&[&q(0, 1, 0, 0, 0), &www, &vec![0x5A; 5000]]),
        // Over UDP, longer than dnsd takes: FORMERR (`an_oversized_message_...`); over
        // TCP the trailing octets are ignored, as NSD ignores them.
        Any,
    ));
    v
}

/// Checks a reply to a probe: well-formed, ID echoed, QR set, an allowed rcode.
fn check_reply(what: &str, sent: &[u8], reply: &[u8], allowed: Allowed) -> Result<(), String> {
    let head = RawMsg::parse(reply).map_err(|e| format!("{what}: reply does not parse: {e}"))?;
    if !head.has(flag::QR) {
        return Err(format!("{what}: reply without QR"));
    }
    if sent.len() >= 2 && head.id != u16::from_be_bytes([sent[0], sent[1]]) {
        return Err(format!(
            "{what}: reply ID {:#06x} does not echo the query's",
            head.id
        ));
    }
    let rc = head.rcode();
    let ok = match allowed {
        Allowed::FormErr => rc == rcode::FORMERR,
        Allowed::NotImp => rc == rcode::NOTIMP || rc == rcode::FORMERR,
        Allowed::Any => true,
        Allowed::Nothing => false,
    };
    if !ok {
        return Err(format!(
            "{what}: answered {} (allowed: {allowed:?})",
            rcode_name(rc)
        ));
    }
    if head.has(flag::AA) && rc == rcode::FORMERR {
        return Err(format!("{what}: FORMERR with AA set"));
    }
    Ok(())
}

/// Sends `probe` then a sentinel query on one UDP socket; returns the datagrams that came
/// before the sentinel's reply (the probe's replies). Bounded: 5 s, 64 datagrams.
fn udp_probe(addr: SocketAddr, probe: &[u8], rng: &mut Rng) -> Result<Vec<Vec<u8>>, String> {
    let s = UdpSocket::bind("127.0.0.1:0").map_err(|e| e.to_string())?;
    s.connect(addr).map_err(|e| e.to_string())?;
    // A sentinel ID that the probe cannot share.
    let probe_id = (probe.len() >= 2).then(|| u16::from_be_bytes([probe[0], probe[1]]));
    let mut sid = rng.next_u64() as u16;
    if Some(sid) == probe_id {
        sid = sid.wrapping_add(1);
    }
    let sentinel = build_query(sid, "www.example.com.", T::A, &QueryOpts::udp());
    s.send(probe).map_err(|e| format!("send probe: {e}"))?;
    s.send(&sentinel)
        .map_err(|e| format!("send sentinel: {e}"))?;
    let deadline = Instant::now() + Duration::from_secs(5);
    let mut got = Vec::new();
    let mut buf = vec![0u8; 65536];
    for _ in 0..64 {
        let left = deadline
            .checked_duration_since(Instant::now())
            .ok_or("no reply to the sentinel query within 5 s: is dnsd alive?")?;
        s.set_read_timeout(Some(left.max(Duration::from_millis(1))))
            .map_err(|e| e.to_string())?;
        let n = s
            .recv(&mut buf)
            .map_err(|e| format!("no reply to the sentinel query ({e}): is dnsd alive?"))?;
        let m = &buf[..n];
        if n >= 12
            && u16::from_be_bytes([m[0], m[1]]) == sid
            && m[2] & 0x80 != 0
            && m[12..].starts_with(&sentinel[12..])
        {
            return Ok(got);
        }
        got.push(m.to_vec());
    }
    Err("more than 64 datagrams came back".into())
}

/// A random mutation of a valid query: a few octets changed, maybe cut or extended.
fn mutate(rng: &mut Rng) -> Vec<u8> {
    let names = [
        "www.example.com.",
        "example.com.",
        "a1.example.com.",
        "foo.wild.example.com.",
        "x.deleg.example.com.",
    ];
    let name = names[rng.below(names.len() as u64) as usize];
    let opts = if rng.coin() {
        QueryOpts::edns(1232)
    } else {
        QueryOpts::udp()
    };
    let mut m = build_query(rng.next_u64() as u16, name, T::A, &opts);
    for _ in 0..1 + rng.below(4) {
        let i = rng.below(m.len() as u64) as usize;
        m[i] = rng.next_u64() as u8;
    }
    match rng.below(4) {
        0 => {
            let cut = rng.below(m.len() as u64 + 1) as usize;
            m.truncate(cut);
        }
        1 => {
            let n = rng.below(16) as usize;
            m.extend(rng.bytes(n));
        }
        _ => {}
    }
    m
}

#[test]
fn malformed_input_never_crashes_dnsd() {
    let mut dnsd = Dnsd::builder()
        .zone(Zone::data("example.com."))
        // Short TCP idle time: connections left open by a probe end soon.
        .server_option("tcp_idle_timeout_ms = 2000")
        // Thousands of FORMERRs and sentinel queries from one source: rate limiting would
        // (rightly) drop them, and this test is about surviving garbage.
        .raw("[defence.rrl]\nenabled = false")
        .start();
    let addr = dnsd.addr();
    let before = dnsd.stats();
    let mut rng = Rng::new(SEED);
    let mut failures: Vec<String> = Vec::new();
    let mut formerr_seen = 0usize;

    // 1. Hand-made malformed messages over UDP.
    for (what, bytes, allowed) in cases() {
        match udp_probe(addr, &bytes, &mut rng) {
            Ok(replies) => {
                if replies.len() > 1 {
                    failures.push(format!("UDP {what}: {} replies", replies.len()));
                }
                if allowed == Allowed::Nothing && !replies.is_empty() {
                    failures.push(format!("UDP {what}: answered, must be dropped"));
                }
                for r in &replies {
                    if let Err(e) = check_reply(&format!("UDP {what}"), &bytes, r, allowed) {
                        failures.push(e);
                    }
                    if RawMsg::parse(r).is_ok_and(|h| h.rcode() == rcode::FORMERR) {
                        formerr_seen += 1;
                    }
                }
                let shown = replies
                    .first()
                    .and_then(|r| RawMsg::parse(r).ok())
                    .map_or("no answer".into(), |h| rcode_name(h.rcode()));
                println!("UDP {what:<52} -> {shown}");
            }
            Err(e) => failures.push(format!("UDP {what}: {e}")),
        }
        assert!(
            dnsd.is_running(),
            "dnsd died after UDP probe {what:?}:\n{}",
            dnsd.log()
        );
    }

    // 2. Random datagrams and random mutations of valid queries.
    let mut answered = 0usize;
    for i in 0..2 * RANDOM_COUNT {
        let bytes = if i % 2 == 0 {
            let n = rng.below(600) as usize;
            rng.bytes(n)
        } else {
            mutate(&mut rng)
        };
        match udp_probe(addr, &bytes, &mut rng) {
            Ok(replies) => {
                if replies.len() > 1 {
                    failures.push(format!("random #{i}: {} replies", replies.len()));
                }
                for r in &replies {
                    answered += 1;
                    if let Err(e) = check_reply(
                        &format!("random #{i} ({:02x?})", &bytes[..bytes.len().min(48)]),
                        &bytes,
                        r,
                        Allowed::Any,
                    ) {
                        failures.push(e);
                    }
                }
            }
            Err(e) => {
                failures.push(format!(
                    "random #{i} ({:02x?}): {e}",
                    &bytes[..bytes.len().min(48)]
                ));
                break;
            }
        }
        if i % 250 == 0 {
            assert!(
                dnsd.is_running(),
                "dnsd died during random input #{i}:\n{}",
                dnsd.log()
            );
        }
    }
    println!(
        "random UDP input: {} datagrams, {answered} answered",
        2 * RANDOM_COUNT
    );

    // 3. TCP: malformed messages framed correctly, each on its own connection.
    let t = Duration::from_secs(5);
    for (what, bytes, allowed) in cases() {
        if bytes.is_empty() || bytes.len() > 16 * 1024 {
            continue; // a zero length prefix and oversized messages have their own cases
        }
        match tcp_raw(addr, &frame(&bytes), true, t) {
            Ok(r) => {
                let msgs = r.messages();
                if msgs.len() > 1 {
                    failures.push(format!("TCP {what}: {} replies", msgs.len()));
                }
                if allowed == Allowed::Nothing && !msgs.is_empty() {
                    failures.push(format!("TCP {what}: answered, must be dropped"));
                }
                for m in &msgs {
                    if let Err(e) = check_reply(&format!("TCP {what}"), &bytes, m, allowed) {
                        failures.push(e);
                    }
                }
                if !r.closed {
                    failures.push(format!(
                        "TCP {what}: connection not closed after our half-close"
                    ));
                }
            }
            Err(e) => failures.push(format!("TCP {what}: {e}")),
        }
        assert!(
            dnsd.is_running(),
            "dnsd died after TCP probe {what:?}:\n{}",
            dnsd.log()
        );
    }

    // 4. TCP framing abuse.
    let valid = build_query(0x7777, "www.example.com.", T::A, &QueryOpts::edns(1232));
    let framing: Vec<(&str, Vec<u8>, bool)> = vec![
        ("length prefix 0", vec![0, 0], false),
        (
            "length prefix 0 then a valid query",
            [&[0u8, 0][..], &frame(&valid)].concat(),
            false,
        ),
        ("one octet of length, then EOF", vec![0], false),
        (
            "length 100, 20 octets, then EOF",
            [&[0u8, 100][..], &[0xAB; 20]].concat(),
            false,
        ),
        (
            "length 65535, 300 octets, then EOF",
            [&[0xFFu8, 0xFF][..], &[0; 300]].concat(),
            false,
        ),
        (
            "length 20000 (over the limit) and the data",
            [&20000u16.to_be_bytes()[..], &vec![0; 20000]].concat(),
            false,
        ),
        (
            "length shorter than the query",
            [&10u16.to_be_bytes()[..], &valid].concat(),
            false,
        ),
        (
            "valid, malformed, valid (pipelined)",
            [
                frame(&valid),
                frame(&hdr(0x1111, 0, 2, 0, 0, 0)),
                frame(&valid),
            ]
            .concat(),
            true,
        ),
    ];
    for (what, bytes, must_answer) in framing {
        match tcp_raw(addr, &bytes, true, t) {
            Ok(r) => {
                let msgs = r.messages();
                for m in &msgs {
                    if let Err(e) = check_reply(
                        &format!("TCP {what}"),
                        &m[..2.min(m.len())],
                        m,
                        Allowed::Any,
                    ) {
                        failures.push(e);
                    }
                }
                if must_answer && msgs.len() < 2 {
                    failures.push(format!(
                        "TCP {what}: {} replies, want the 2 valid queries answered",
                        msgs.len()
                    ));
                }
                if !r.closed {
                    failures.push(format!("TCP {what}: connection not closed"));
                }
                println!(
                    "TCP {what:<52} -> {} replies, closed {}",
                    msgs.len(),
                    r.closed
                );
            }
            Err(e) => failures.push(format!("TCP {what}: {e}")),
        }
        assert!(
            dnsd.is_running(),
            "dnsd died after TCP input {what:?}:\n{}",
            dnsd.log()
        );
    }
    for i in 0..TCP_RANDOM_COUNT {
        let n = 1 + rng.below(3000) as usize;
        let bytes = rng.bytes(n);
        match tcp_raw(addr, &bytes, true, t) {
            Ok(r) => {
                for m in r.messages() {
                    if let Err(e) = RawMsg::parse(&m) {
                        failures.push(format!("TCP random #{i}: reply does not parse: {e}"));
                    }
                }
            }
            Err(e) => failures.push(format!("TCP random #{i}: {e}")),
        }
    }
    assert!(
        dnsd.is_running(),
        "dnsd died during random TCP input:\n{}",
        dnsd.log()
    );

    // 5. Still serving, over UDP and TCP.
    for opts in [
        QueryOpts::udp(),
        QueryOpts::edns(1232),
        QueryOpts::edns(1232).over_tcp(),
    ] {
        let r = client::query_reply(addr, "www.example.com.", T::A, &opts);
        assert_eq!(
            r.head.rcode(),
            rcode::NOERROR,
            "after the garbage: {:?}",
            r.msg
        );
        assert_eq!(r.msg.answers.len(), 1, "after the garbage: {:?}", r.msg);
    }

    // 6. The counters say what happened.
    let after = dnsd.stats();
    // dnsd lists a rcode's counter only once it is nonzero: none was FORMERR before.
    let formerr = |s: &Counters| s.get_or_zero("responses.rcode.FORMERR");
    println!(
        "stats: drops.malformed {} -> {}, responses.rcode.FORMERR {} -> {}, FORMERR replies seen {formerr_seen}",
        before.get("drops.malformed"),
        after.get("drops.malformed"),
        formerr(&before),
        formerr(&after)
    );
    if after.get("drops.malformed") <= before.get("drops.malformed") {
        failures.push(format!(
            "drops.malformed did not rise: {before:?} -> {after:?}"
        ));
    }
    if formerr(&after) <= formerr(&before) {
        failures.push(format!(
            "responses.rcode.FORMERR did not rise: {before:?} -> {after:?}"
        ));
    }
    if formerr(&after) < formerr_seen as u64 {
        failures.push(format!(
            "responses.rcode.FORMERR is {} but {formerr_seen} FORMERR replies were seen",
            formerr(&after)
        ));
    }
    let metrics = dnsd.metrics();
    let malformed_metric = metrics
        .lines()
        .find(|l| l.starts_with("dnsd_drops_total{cause=\"malformed\"}"))
        .and_then(|l| l.rsplit(' ').next()?.parse::<u64>().ok());
    if malformed_metric.is_none_or(|v| v == 0) {
        failures.push(format!(
            "/metrics: dnsd_drops_total{{cause=\"malformed\"}} is {malformed_metric:?}"
        ));
    }

    for f in &failures {
        println!("FAILURE {f}");
    }
    assert!(
        failures.is_empty(),
        "{} malformed-input failures (see above)",
        failures.len()
    );
}

/// A message longer than dnsd takes (a datagram over 4,096 octets, a TCP message over
/// 16 KiB) is answered FORMERR, as Knot and NSD answer it: with its question when that came
/// within the limit, without OPT (the message was not read whole), never when it is a
/// response; each datagram and TCP message is counted as oversized.
#[test]
fn an_oversized_message_gets_formerr_with_its_question() {
    let mut dnsd = Dnsd::builder()
        .zone(Zone::data("example.com."))
        .raw("[defence.rrl]\nenabled = false")
        .start();
    let addr = dnsd.addr();
    let before = dnsd.stats().get("udp.oversized");
    let www = question("www.example.com.", T::A);
    // A sound message: one question and an OPT whose padding makes it 6,000 octets.
    let pad_len = 6000 - 12 - www.len() - 11 - 4;
    let padding = option(12, pad_len as u16, &vec![0; pad_len]);
    let edns = opt(&[0], &padding, padding.len() as u16);
    let big = [hdr(0x5151, 0, 1, 0, 0, 1), www.clone(), edns].concat();
    assert_eq!(big.len(), 6000);
    let mut rng = Rng::new(SEED);
    let replies = udp_probe(addr, &big, &mut rng).unwrap();
    assert_eq!(replies.len(), 1, "one reply to the oversized query");
    check_reply("oversized query", &big, &replies[0], Allowed::FormErr).unwrap();
    let r = &replies[0];
    let head = RawMsg::parse(r).unwrap();
    assert_eq!(
        head.counts,
        [1, 0, 0, 0],
        "the question and nothing else, no OPT"
    );
    assert_eq!(head.question, www, "the question as asked");
    // A question cut by the limit: FORMERR without it.
    let long = [hdr(0x5252, 0, 1, 0, 0, 0), vec![0x3F; 5000]].concat();
    let replies = udp_probe(addr, &long, &mut rng).unwrap();
    assert_eq!(replies.len(), 1);
    check_reply(
        "oversized, no question",
        &long,
        &replies[0],
        Allowed::FormErr,
    )
    .unwrap();
    assert_eq!(RawMsg::parse(&replies[0]).unwrap().counts, [0; 4]);
    // An oversized response: nothing.
    let mut resp = big.clone();
    resp[2] |= 0x80;
    assert!(udp_probe(addr, &resp, &mut rng).unwrap().is_empty());
    assert!(dnsd.is_running(), "{}", dnsd.log());
    let after = dnsd.stats().get("udp.oversized");
    assert_eq!(after, before + 3, "each oversized datagram counted");

    // Over TCP, a message past the 16 KiB dnsd takes: read past, FORMERR with its question,
    // and the connection goes on (the next query is answered).
    let mut big_tcp = [hdr(0x5353, 0, 1, 0, 0, 1), www.clone()].concat();
    let pad_len = 20_000 - big_tcp.len() - 11 - 4;
    let padding = option(12, pad_len as u16, &vec![0; pad_len]);
    big_tcp.extend_from_slice(&opt(&[0], &padding, padding.len() as u16));
    let next = build_query(0x5454, "www.example.com.", T::A, &QueryOpts::udp());
    let r = tcp_raw(
        addr,
        &[frame(&big_tcp), frame(&next)].concat(),
        true,
        Duration::from_secs(5),
    )
    .unwrap();
    let msgs = r.messages();
    assert_eq!(msgs.len(), 2, "both answered: {msgs:?}");
    check_reply("oversized over TCP", &big_tcp, &msgs[0], Allowed::FormErr).unwrap();
    let head = RawMsg::parse(&msgs[0]).unwrap();
    assert_eq!((head.counts, head.question), ([1, 0, 0, 0], www.clone()));
    let head = RawMsg::parse(&msgs[1]).unwrap();
    assert_eq!((head.id, head.rcode()), (0x5454, rcode::NOERROR));
    assert_eq!(
        dnsd.stats().get("tcp.oversized"),
        1,
        "the TCP message counted as oversized"
    );
}

/// fuzz/process_query: a TSIG error echoes the request's key and algorithm names, up to 255
/// octets each; behind a 255-octet question, without EDNS, that made a 541-octet UDP reply.
/// Now a TSIG error that does not fit goes unsigned with TC set (retry over TCP), within 512.
#[test]
fn a_tsig_error_never_exceeds_the_udp_limit() {
    let dnsd = Dnsd::builder().zone(Zone::data("example.com.")).start();
    let long_name = |fill: u8| -> Vec<u8> {
        let l = [fill; 63];
        raw_name(&[&l, &l, &l, &l[..61]])
    };
    let mut msg = hdr(0x5151, 0, 1, 0, 0, 1);
    msg.extend_from_slice(&long_name(b'q'));
    msg.extend_from_slice(&[0, 1, 0, 1]); // A IN
    // TSIG: an unknown 255-octet key name, a 255-octet algorithm name, a 32-octet MAC.
    let mut rdata = long_name(b'a');
    rdata.extend_from_slice(&[0, 0, 0x65, 0x5f, 0x00, 0x00, 1, 0x2c, 0, 32]);
    rdata.extend_from_slice(&[7; 32]);
    rdata.extend_from_slice(&[0x51, 0x51, 0, 0, 0, 0]);
    msg.extend_from_slice(&long_name(b'k'));
    msg.extend_from_slice(&[0, 250, 0, 255, 0, 0, 0, 0]);
    msg.extend_from_slice(&(rdata.len() as u16).to_be_bytes());
    msg.extend_from_slice(&rdata);

    let reply = client::udp_raw(dnsd.addr(), &msg, Duration::from_secs(2))
        .unwrap()
        .expect("a TSIG error is answered");
    let head = RawMsg::parse(&reply).unwrap();
    assert!(reply.len() <= 512, "UDP reply of {} octets", reply.len());
    assert_eq!(head.rcode(), rcode::NOTAUTH, "{}", rcode_name(head.rcode()));
    assert!(
        head.has(flag::TC),
        "the TSIG did not fit: TC tells the client to use TCP"
    );

    // Over TCP the same request gets its TSIG error record.
    let reply = client::tcp_exchange(dnsd.addr(), &msg, Duration::from_secs(2))
        .unwrap()
        .expect("answered over TCP");
    let head = RawMsg::parse(&reply).unwrap();
    assert_eq!(head.rcode(), rcode::NOTAUTH);
    assert!(!head.has(flag::TC));
    assert_eq!(
        u16::from_be_bytes([reply[10], reply[11]]),
        1,
        "ARCOUNT: the TSIG"
    );
}

/// A TCP message shorter than a DNS header closes the connection, as Knot and NSD close it:
/// it was skipped and the connection kept until the idle timeout (a peer sending junk held
/// its place that long); what came before it is answered.
#[test]
fn a_tcp_message_shorter_than_a_header_closes_the_connection() {
    let dnsd = Dnsd::builder().zone(Zone::data("example.com.")).start();
    let q = build_query(0x6161, "www.example.com.", T::A, &QueryOpts::udp());
    let after = build_query(0x6262, "www.example.com.", T::A, &QueryOpts::udp());
    let before = dnsd.stats().get("drops.malformed");
    let t0 = std::time::Instant::now();
    let r = tcp_raw(
        dnsd.addr(),
        &[frame(&q), frame(&[0x12, 0x34, 0, 0]), frame(&after)].concat(),
        false,
        Duration::from_secs(5),
    )
    .unwrap();
    assert!(r.closed, "the connection stays open");
    assert!(t0.elapsed() < Duration::from_secs(3), "{:?}", t0.elapsed());
    let msgs = r.messages();
    assert_eq!(msgs.len(), 1, "{msgs:?}");
    assert_eq!(RawMsg::parse(&msgs[0]).unwrap().id, 0x6161);
    assert_eq!(dnsd.stats().get("drops.malformed"), before + 1);
}
