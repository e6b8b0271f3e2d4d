//! RFC 8906 §8 (the ISC EDNS compliance tester's queries) against dnsd, with Knot DNS and
//! NSD asked the same for comparison. Only dnsd's failures fail the test; every server's
//! results are printed side by side.

use std::fmt::Write as _;
use std::net::SocketAddr;

use hickory_proto::op::Message;
use hickory_proto::rr::RecordType;
use palisade_tests::client::{self, udp_exchange};
use palisade_tests::servers::{Dnsd, Knot, Nsd, Zone};
use palisade_tests::wire::{
    QueryOpts, RawMsg, build_query, flag, opt_record, qtype as T, rcode, rcode_name,
};

const ZONE: &str = "example.com.";

/// One thing a response must show.
#[derive(Debug, Clone)]
enum Expect {
    /// This full rcode.
    Rcode(u16),
    /// One of these rcodes.
    RcodeIn(&'static [u16]),
    /// AA set or clear.
    Aa(bool),
    /// Header bits `mask` all set (true) or all clear (false).
    Flag(&'static str, u16, bool),
    /// The opcode comes back as sent.
    Opcode(u8),
    /// The zone's SOA is (or is not) in the answer section.
    SoaInAnswer(bool),
    /// The answer section is empty.
    NoAnswer,
    /// An OPT record is (or is not) present.
    Opt(bool),
    /// The OPT's EDNS version.
    OptVersion(u8),
    /// No flag beyond DO in the OPT (unknown flags are not echoed).
    NoUnknownEdnsFlags,
    /// DO set (or clear) in the OPT.
    Do(bool),
    /// This option is not in the OPT.
    NoOption(u16),
    /// The OPT holds only options among these.
    OptionsAmong(&'static [u16]),
    /// A COOKIE option, if present, starts with this client cookie.
    CookieEcho([u8; 8]),
    /// The message is at most this long.
    MaxLen(usize),
    /// TC is set.
    Tc,
    /// The question comes back byte for byte.
    QuestionEcho,
}

/// How the query is sent.
#[derive(Debug, Clone)]
enum Send {
    /// A normal query.
    Query(&'static str, u16, QueryOpts),
    /// Only a header (QDCOUNT 0) with these flags, opcode, and maybe an OPT (RFC 8906
    /// `+header-only`).
    HeaderOnly(QueryOpts),
}

struct Check {
    id: &'static str,
    section: &'static str,
    send: Send,
    expect: Vec<Expect>,
    /// A dnsd bug this check shows (reported to the owner of dnsd): it still fails.
    bug: Option<&'static str>,
}

fn edns0() -> QueryOpts {
    QueryOpts::edns(4096)
}

fn checks() -> Vec<Check> {
    use Expect::*;
    let ok_soa = || {
        vec![
            Rcode(rcode::NOERROR),
            Aa(true),
            SoaInAnswer(true),
            QuestionEcho,
        ]
    };
    let badvers = || {
        vec![
            Rcode(rcode::BADVERS),
            Opt(true),
            OptVersion(0),
            SoaInAnswer(false),
        ]
    };
    let with = |mut base: Vec<Expect>, more: Vec<Expect>| {
        base.extend(more);
        base
    };
    let q = |t: u16, o: QueryOpts| Send::Query(ZONE, t, o);
    vec![
        Check {
            id: "plain DNS",
            section: "8.1.1",
            send: q(T::SOA, QueryOpts::udp()),
            expect: with(ok_soa(), vec![Opt(false)]),
            bug: None,
        },
        Check {
            id: "unknown type (TYPE1000)",
            section: "8.1.2",
            send: q(1000, QueryOpts::udp()),
            expect: vec![Rcode(rcode::NOERROR), Aa(true), NoAnswer, Opt(false)],
            bug: None,
        },
        Check {
            id: "RD=1 (recursion desired)",
            section: "8.1.3.1",
            send: q(
                T::SOA,
                QueryOpts {
                    rd: true,
                    ..QueryOpts::udp()
                },
            ),
            expect: with(
                ok_soa(),
                vec![Flag("RD", flag::RD, true), Flag("RA", flag::RA, false)],
            ),
            bug: None,
        },
        Check {
            id: "AD=1",
            section: "8.1.3.2",
            send: q(
                T::SOA,
                QueryOpts {
                    flags: flag::AD,
                    ..QueryOpts::udp()
                },
            ),
            expect: with(ok_soa(), vec![Flag("AD", flag::AD, false)]),
            bug: None,
        },
        Check {
            id: "reserved Z bit set",
            section: "8.1.3.3",
            send: q(
                T::SOA,
                QueryOpts {
                    flags: flag::Z,
                    ..QueryOpts::udp()
                },
            ),
            expect: with(ok_soa(), vec![Flag("Z", flag::Z, false)]),
            bug: None,
        },
        Check {
            id: "CD=1 (copied back)",
            section: "RFC 4035 §3.1.6",
            send: q(
                T::SOA,
                QueryOpts {
                    flags: flag::CD,
                    ..QueryOpts::udp()
                },
            ),
            expect: with(ok_soa(), vec![Flag("CD", flag::CD, true)]),
            bug: None,
        },
        Check {
            id: "unknown opcode 15, header only",
            section: "8.1.4",
            send: Send::HeaderOnly(QueryOpts {
                opcode: 15,
                ..QueryOpts::udp()
            }),
            expect: vec![Rcode(rcode::NOTIMP), Opcode(15), NoAnswer],
            bug: None,
        },
        Check {
            id: "unknown opcode 15 with a question",
            section: "8.1.4",
            send: q(
                T::SOA,
                QueryOpts {
                    opcode: 15,
                    ..QueryOpts::udp()
                },
            ),
            expect: vec![Rcode(rcode::NOTIMP), Opcode(15), NoAnswer],
            bug: None,
        },
        Check {
            id: "TCP",
            section: "8.1.5",
            send: q(T::SOA, QueryOpts::udp().over_tcp()),
            expect: with(ok_soa(), vec![Opt(false)]),
            bug: None,
        },
        Check {
            id: "minimal EDNS",
            section: "8.2.1",
            send: q(T::SOA, edns0()),
            expect: with(
                ok_soa(),
                vec![
                    Opt(true),
                    OptVersion(0),
                    NoUnknownEdnsFlags,
                    OptionsAmong(&[]),
                ],
            ),
            bug: None,
        },
        Check {
            id: "EDNS version 1",
            section: "8.2.2",
            send: q(
                T::SOA,
                QueryOpts {
                    edns_version: 1,
                    ..edns0()
                },
            ),
            expect: badvers(),
            bug: None,
        },
        Check {
            id: "unknown EDNS option (100)",
            section: "8.2.3",
            send: q(
                T::SOA,
                QueryOpts {
                    options: vec![(100, Vec::new())],
                    ..edns0()
                },
            ),
            expect: with(ok_soa(), vec![Opt(true), OptVersion(0), NoOption(100)]),
            bug: None,
        },
        Check {
            id: "unknown EDNS flag (0x0040)",
            section: "8.2.4",
            send: q(
                T::SOA,
                QueryOpts {
                    edns_flags: 0x0040,
                    ..edns0()
                },
            ),
            expect: with(ok_soa(), vec![Opt(true), OptVersion(0), NoUnknownEdnsFlags]),
            bug: None,
        },
        Check {
            id: "EDNS version 1 + unknown flag",
            section: "8.2.5",
            send: q(
                T::SOA,
                QueryOpts {
                    edns_version: 1,
                    edns_flags: 0x0040,
                    ..edns0()
                },
            ),
            expect: with(badvers(), vec![NoUnknownEdnsFlags]),
            bug: None,
        },
        Check {
            id: "EDNS version 1 + unknown option (100)",
            section: "8.2.6",
            send: q(
                T::SOA,
                QueryOpts {
                    edns_version: 1,
                    options: vec![(100, Vec::new())],
                    ..edns0()
                },
            ),
            expect: with(badvers(), vec![NoOption(100)]),
            bug: None,
        },
        Check {
            // An option's meaning is its version's: a version we do not implement is BADVERS
            // before a malformed cookie is FORMERR (RFC 6891 §6.1.3; Knot and NSD alike).
            id: "EDNS version 1 + malformed COOKIE (5 octets)",
            section: "8.2.6",
            send: q(
                T::SOA,
                QueryOpts {
                    edns_version: 1,
                    options: vec![(10, vec![1, 2, 3, 4, 5])],
                    ..edns0()
                },
            ),
            expect: badvers(),
            bug: None,
        },
        Check {
            id: "DO=1, UDP 512, DNSKEY (truncation)",
            section: "8.2.7",
            send: q(
                T::DNSKEY,
                QueryOpts {
                    edns: Some(512),
                    do_bit: true,
                    ..QueryOpts::udp()
                },
            ),
            expect: vec![Rcode(rcode::NOERROR), Opt(true), OptVersion(0), MaxLen(512)],
            bug: None,
        },
        Check {
            id: "UDP 512, large TXT: TC and fits",
            section: "8.2.7",
            send: Send::Query("big.example.com.", T::TXT, QueryOpts::edns(512)),
            expect: vec![
                Rcode(rcode::NOERROR),
                Tc,
                Opt(true),
                OptVersion(0),
                MaxLen(512),
            ],
            bug: None,
        },
        Check {
            id: "DO=1",
            section: "8.2.8",
            send: q(T::SOA, edns0().with_do()),
            expect: with(ok_soa(), vec![Opt(true), OptVersion(0), Do(true)]),
            bug: None,
        },
        Check {
            id: "EDNS version 1 + DO=1",
            section: "8.2.9",
            send: q(
                T::SOA,
                QueryOpts {
                    edns_version: 1,
                    ..edns0().with_do()
                },
            ),
            expect: with(badvers(), vec![Do(true)]),
            bug: None,
        },
        Check {
            id: "several defined options (NSID, ECS, EXPIRE, COOKIE)",
            section: "8.2.10",
            send: q(
                T::SOA,
                QueryOpts {
                    options: vec![(3, Vec::new()), (8, vec![0, 1, 0, 0]), (9, Vec::new())],
                    cookie: Some(b"\x01\x02\x03\x04\x05\x06\x07\x08".to_vec()),
                    ..edns0()
                },
            ),
            expect: with(
                ok_soa(),
                vec![
                    Opt(true),
                    OptVersion(0),
                    OptionsAmong(&[3, 8, 9, 10]),
                    CookieEcho(*b"\x01\x02\x03\x04\x05\x06\x07\x08"),
                ],
            ),
            bug: None,
        },
        Check {
            id: "EDNS over TCP",
            section: "8.2 (ednstcp)",
            send: q(T::SOA, edns0().over_tcp()),
            expect: with(ok_soa(), vec![Opt(true), OptVersion(0)]),
            bug: None,
        },
        Check {
            id: "EDNS UDP size 512",
            section: "8.2 (bufsize)",
            send: q(T::SOA, QueryOpts::edns(512)),
            expect: with(ok_soa(), vec![Opt(true), OptVersion(0), MaxLen(512)]),
            bug: None,
        },
        Check {
            id: "EDNS UDP size 4096",
            section: "8.2 (bufsize)",
            send: q(T::SOA, QueryOpts::edns(4096)),
            expect: with(ok_soa(), vec![Opt(true), OptVersion(0)]),
            bug: None,
        },
        Check {
            id: "EDNS UDP size 100 (below 512: treated as 512)",
            section: "RFC 6891 §6.2.5",
            send: q(T::SOA, QueryOpts::edns(100)),
            expect: with(ok_soa(), vec![Opt(true), OptVersion(0)]),
            bug: None,
        },
        Check {
            id: "unknown opcode 15 with EDNS",
            section: "8.1.4 + RFC 6891 §7",
            send: q(
                T::SOA,
                QueryOpts {
                    opcode: 15,
                    ..edns0()
                },
            ),
            expect: vec![Rcode(rcode::NOTIMP), Opcode(15), NoAnswer, Opt(true)],
            bug: None,
        },
        Check {
            id: "EDNS version 255 + DO + unknown flag and option",
            section: "8.2.2-8.2.9",
            send: q(
                T::SOA,
                QueryOpts {
                    edns_version: 255,
                    edns_flags: 0x4000,
                    options: vec![(65000, vec![1, 2, 3])],
                    ..edns0().with_do()
                },
            ),
            expect: with(
                badvers(),
                vec![Do(true), NoUnknownEdnsFlags, NoOption(65000)],
            ),
            bug: None,
        },
        Check {
            id: "unknown EDNS flags and DO together",
            section: "8.2.4 + 8.2.8",
            send: q(
                T::SOA,
                QueryOpts {
                    edns_flags: 0x7FFF,
                    ..edns0().with_do()
                },
            ),
            expect: with(ok_soa(), vec![Opt(true), Do(true), NoUnknownEdnsFlags]),
            bug: None,
        },
        Check {
            id: "NXDOMAIN with EDNS",
            section: "RFC 6891 §7",
            send: Send::Query("nothere.example.com.", T::A, edns0()),
            expect: vec![Rcode(rcode::NXDOMAIN), Aa(true), Opt(true), OptVersion(0)],
            bug: None,
        },
        Check {
            id: "REFUSED with EDNS",
            section: "RFC 6891 §7",
            send: Send::Query("www.example.org.", T::A, edns0()),
            expect: vec![Rcode(rcode::REFUSED), Opt(true), OptVersion(0)],
            bug: None,
        },
        Check {
            id: "EDNS version 1 for a name in no zone",
            section: "8.2.2",
            send: Send::Query(
                "www.example.org.",
                T::A,
                QueryOpts {
                    edns_version: 1,
                    ..edns0()
                },
            ),
            expect: vec![
                RcodeIn(&[rcode::BADVERS, rcode::REFUSED]),
                Opt(true),
                OptVersion(0),
            ],
            bug: None,
        },
    ]
}

/// The bytes to send for `s`.
fn message(s: &Send) -> (Vec<u8>, QueryOpts) {
    match s {
        Send::Query(name, t, o) => (build_query(client::next_id(), name, *t, o), o.clone()),
        Send::HeaderOnly(o) => {
            let mut m = build_query(client::next_id(), ".", T::SOA, o);
            // Keep the header and the OPT, drop the question.
            let opt = opt_record(o);
            m.truncate(12);
            m[4..6].copy_from_slice(&0u16.to_be_bytes());
            m.extend_from_slice(&opt);
            (m, o.clone())
        }
    }
}

/// Sends `s` to `addr`; returns the failed expectations (empty: passed).
fn run(addr: SocketAddr, c: &Check) -> Vec<String> {
    let (q, opts) = message(&c.send);
    let raw = if opts.tcp {
        client::tcp_exchange(addr, &q, opts.timeout)
    } else {
        udp_exchange(addr, &q, opts.timeout)
    };
    let raw = match raw {
        Ok(Some(r)) => r,
        Ok(None) => return vec!["no response".into()],
        Err(e) => return vec![format!("error: {e}")],
    };
    let head = match RawMsg::parse(&raw) {
        Ok(h) => h,
        Err(e) => return vec![format!("unparsable response: {e}")],
    };
    let msg = Message::from_vec(&raw);
    let mut bad = Vec::new();
    if head.id != u16::from_be_bytes([q[0], q[1]]) || !head.has(flag::QR) {
        bad.push("ID not echoed or QR clear".into());
    }
    if head.opt_count > 1 {
        bad.push(format!("{} OPT records", head.opt_count));
    }
    if let Some(o) = &head.opt
        && !o.owner_root
    {
        bad.push("OPT owner is not the root".into());
    }
    let soa_in_answer = |m: &Result<Message, _>| -> Result<bool, String> {
        match m {
            Ok(m) => Ok(m
                .answers
                .iter()
                .any(|r: &hickory_proto::rr::Record| r.record_type() == RecordType::SOA)),
            Err(e) => Err(format!("does not parse: {e}")),
        }
    };
    for e in &c.expect {
        let fail = match e {
            Expect::Rcode(rc) => (head.rcode() != *rc).then(|| {
                format!(
                    "rcode {} (want {})",
                    rcode_name(head.rcode()),
                    rcode_name(*rc)
                )
            }),
            Expect::RcodeIn(rcs) => (!rcs.contains(&head.rcode())).then(|| {
                let want: Vec<String> = rcs.iter().map(|r| rcode_name(*r)).collect();
                format!(
                    "rcode {} (want one of {})",
                    rcode_name(head.rcode()),
                    want.join(", ")
                )
            }),
            Expect::Aa(v) => (head.has(flag::AA) != *v).then(|| format!("AA {} (want {v})", !v)),
            Expect::Flag(n, m, v) => {
                let set = head.flags & m == *m;
                (set != *v).then(|| format!("{n} {} (want {})", set, v))
            }
            Expect::Opcode(op) => {
                (head.opcode() != *op).then(|| format!("opcode {} (want {op})", head.opcode()))
            }
            Expect::SoaInAnswer(v) => match soa_in_answer(&msg) {
                Ok(has) => (has != *v).then(|| format!("SOA in answer: {has} (want {v})")),
                Err(e) => Some(e),
            },
            Expect::NoAnswer => (head.counts[1] != 0)
                .then(|| format!("{} answer records (want none)", head.counts[1])),
            Expect::Opt(v) => {
                (head.opt.is_some() != *v).then(|| format!("OPT present: {} (want {v})", !v))
            }
            Expect::OptVersion(ver) => match &head.opt {
                Some(o) if o.version != *ver => {
                    Some(format!("OPT version {} (want {ver})", o.version))
                }
                Some(_) => None,
                None => Some("no OPT".into()),
            },
            Expect::NoUnknownEdnsFlags => head
                .opt
                .as_ref()
                .filter(|o| o.flags & 0x7FFF != 0)
                .map(|o| format!("unknown EDNS flags echoed: {:#06x}", o.flags)),
            Expect::Do(v) => match &head.opt {
                Some(o) => ((o.flags & 0x8000 != 0) != *v).then(|| format!("DO {} (want {v})", !v)),
                None => Some("no OPT".into()),
            },
            Expect::NoOption(code) => head
                .opt
                .as_ref()
                .filter(|o| o.options.iter().any(|(c, _)| c == code))
                .map(|_| format!("option {code} echoed")),
            Expect::OptionsAmong(ok) => head.opt.as_ref().and_then(|o| {
                let extra: Vec<u16> = o
                    .options
                    .iter()
                    .map(|(c, _)| *c)
                    .filter(|c| !ok.contains(c))
                    .collect();
                (!extra.is_empty()).then(|| format!("unexpected options {extra:?}"))
            }),
            Expect::CookieEcho(cc) => head.opt.as_ref().and_then(|o| {
                o.options
                    .iter()
                    .find(|(c, _)| *c == 10)
                    .filter(|(_, d)| d.len() < 8 || d[..8] != cc[..])
                    .map(|_| "COOKIE option without our client cookie".to_string())
            }),
            Expect::MaxLen(n) => {
                (raw.len() > *n).then(|| format!("{} octets (limit {n})", raw.len()))
            }
            Expect::Tc => (!head.has(flag::TC)).then(|| "TC clear (want set)".to_string()),
            Expect::QuestionEcho => (head.question != palisade_tests::wire::question_of(&q))
                .then(|| "question not echoed byte for byte".to_string()),
        };
        bad.extend(fail);
    }
    bad
}

#[test]
fn rfc8906_edns_compliance() {
    let zones = [Zone::data(ZONE)];
    let dnsd = Dnsd::start(&zones);
    let mut servers: Vec<(&str, SocketAddr)> = vec![("dnsd", dnsd.addr())];
    let knot = if Knot::available() {
        Some(Knot::start(&zones))
    } else {
        palisade_tests::skipped("knotd not installed: dnsd's EDNS results are shown alone");
        None
    };
    let nsd = if Nsd::available() {
        Some(Nsd::start(&zones))
    } else {
        palisade_tests::skipped("nsd not installed: not shown beside dnsd");
        None
    };
    if let Some(k) = &knot {
        servers.push(("knot", k.addr()));
    }
    if let Some(n) = &nsd {
        servers.push(("nsd", n.addr()));
    }
    let mut table = String::new();
    let _ = write!(table, "\n{:<52} {:<22}", "RFC 8906 check", "section");
    for (n, _) in &servers {
        let _ = write!(table, " {n:<6}");
    }
    table.push('\n');
    let mut details = String::new();
    let mut dnsd_failures = Vec::new();
    let mut fixed = Vec::new();
    for c in checks() {
        let _ = write!(table, "{:<52} {:<22}", c.id, c.section);
        for (n, a) in &servers {
            let bad = run(*a, &c);
            let _ = write!(table, " {:<6}", if bad.is_empty() { "ok" } else { "FAIL" });
            if !bad.is_empty() {
                let _ = writeln!(details, "  {n:<5} {}: {}", c.id, bad.join("; "));
                if *n == "dnsd" {
                    let mark = c
                        .bug
                        .map_or(String::new(), |b| format!(" [KNOWN DNSD BUG: {b}]"));
                    dnsd_failures.push(format!("{}: {}{mark}", c.id, bad.join("; ")));
                }
            } else if *n == "dnsd"
                && let Some(b) = c.bug
            {
                fixed.push(format!("{}: {b}", c.id));
            }
        }
        table.push('\n');
    }
    println!("{table}\nfailures:\n{details}");
    for f in &fixed {
        println!("known dnsd bug no longer seen, remove its mark: {f}");
    }
    assert!(
        dnsd_failures.is_empty(),
        "dnsd fails {} RFC 8906 checks:\n{}",
        dnsd_failures.len(),
        dnsd_failures.join("\n")
    );
}
