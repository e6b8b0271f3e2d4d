//! NSID (RFC 5001) and Extended DNS Errors (RFC 8914): dnsd names itself to a query that asks,
//! as Knot DNS and NSD do with the same identifier (the oracles), and says why it refuses what
//! it refuses on purpose; `[server] nsid` is checked when the config loads.

use std::time::Duration;

use palisade_tests::client::udp_exchange;
use palisade_tests::servers::{Dnsd, Knot, Nsd, Zone};
use palisade_tests::wire::{QueryOpts, RawMsg, build_query, qtype as T, rcode};

const NSID: u16 = 3;
const EDE: u16 = 15;

/// The reply of `addr` to `name`/`qtype` with EDNS and, if `nsid`, an empty NSID option.
fn ask(addr: std::net::SocketAddr, name: &str, qtype: u16, nsid: bool) -> RawMsg {
    let opts = QueryOpts {
        options: if nsid {
            vec![(NSID, Vec::new())]
        } else {
            vec![]
        },
        ..QueryOpts::edns(1232)
    };
    let q = build_query(0x4e53, name, qtype, &opts);
    let r = udp_exchange(addr, &q, Duration::from_secs(2))
        .expect("exchange")
        .expect("a reply");
    RawMsg::parse(&r).expect("a well-formed reply")
}

fn option(m: &RawMsg, code: u16) -> Option<Vec<u8>> {
    let o = m.opt.as_ref()?;
    o.options
        .iter()
        .find(|(c, _)| *c == code)
        .map(|(_, d)| d.clone())
}

#[test]
fn nsid_is_answered_as_knot_and_nsd_answer_it() {
    let zones = [Zone::data("example.com.")];
    let dnsd = Dnsd::builder()
        .zones(&zones)
        .server_option("nsid = \"node-a\"")
        .start();
    let mut servers = vec![("dnsd", dnsd.addr(), None::<Box<dyn std::any::Any>>)];
    if Knot::available() {
        let z = zones[0].clone();
        let knot = Knot::start_raw(&zones, move |d, addr| {
            Knot::server_section(d, addr).replacen("server:\n", "server:\n  nsid: node-a\n", 1)
                + &format!(
                    "template:\n  - id: default\n    storage: \"{}\"\n    zonefile-sync: -1\n\n\
                     zone:\n  - domain: {}\n    file: \"{}\"\n",
                    d.display(),
                    z.origin,
                    z.file.display()
                )
        });
        servers.push(("knot", knot.addr(), Some(Box::new(knot))));
    } else {
        palisade_tests::skipped("knotd not installed: Knot not compared");
    }
    if Nsd::available() {
        let nsd = Nsd::start_with(
            &zones,
            &["minimal-responses: yes", "nsid: \"ascii_node-a\""],
        );
        servers.push(("nsd", nsd.addr(), Some(Box::new(nsd))));
    } else {
        palisade_tests::skipped("nsd not installed: NSD not compared");
    }
    for (who, addr, _) in &servers {
        let asked = ask(*addr, "www.example.com.", T::A, true);
        assert_eq!(asked.rcode(), rcode::NOERROR, "{who}");
        assert_eq!(
            option(&asked, NSID).as_deref(),
            Some(&b"node-a"[..]),
            "{who}: NSID"
        );
        let plain = ask(*addr, "www.example.com.", T::A, false);
        assert_eq!(
            option(&plain, NSID),
            None,
            "{who}: NSID not asked, not sent"
        );
    }
}

#[test]
fn refusals_on_purpose_carry_an_extended_error() {
    let zones = [Zone::data("example.com.")];
    let dnsd = Dnsd::builder().zones(&zones).start();
    // Not a zone of ours: REFUSED, Not Authoritative (20).
    let r = ask(dnsd.addr(), "example.org.", T::A, false);
    assert_eq!(r.rcode(), rcode::REFUSED);
    assert_eq!(option(&r, EDE), Some(vec![0, 20]));
    // An answer carries none.
    let r = ask(dnsd.addr(), "www.example.com.", T::A, false);
    assert_eq!(option(&r, EDE), None);
    // Knot, the oracle: the same rcode and the same EDE.
    if Knot::available() {
        let knot = Knot::start(&zones);
        let k = ask(knot.addr(), "example.org.", T::A, false);
        assert_eq!(
            (k.rcode(), option(&k, EDE)),
            (rcode::REFUSED, Some(vec![0, 20]))
        );
    } else {
        palisade_tests::skipped("knotd not installed: Knot not compared");
    }
}

#[test]
fn a_bad_nsid_is_refused_with_its_key() {
    let dir = tempfile::tempdir().unwrap();
    let zone = Zone::data("example.com.");
    for (value, why) in [
        ("\"\"", "1 to 128 bytes"),
        ("\"0x4g\"", "hex"),
        (&format!("\"{}\"", "x".repeat(129)), "1 to 128 bytes"),
    ] {
        let conf = dir.path().join("bad.toml");
        std::fs::write(
            &conf,
            format!(
                "[server]\nlisten = [\"127.0.0.1\"]\nport = 5399\nnsid = {value}\n\n\
                 [[zone]]\norigin = \"{}\"\nfile = \"{}\"\n",
                zone.origin,
                zone.file.display()
            ),
        )
        .unwrap();
        let out = std::process::Command::new(palisade_tests::bin("dnsd"))
            .args(["check-config", "-c"])
            .arg(&conf)
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stderr).to_string()
            + &String::from_utf8_lossy(&out.stdout);
        assert!(!out.status.success(), "{value}: accepted");
        assert!(
            text.contains("server.nsid") && text.contains(why),
            "{value}: {text}"
        );
    }
}

#[test]
fn a_changed_nsid_is_kept_until_restart_and_the_reload_says_so() {
    let zones = [Zone::data("example.com.")];
    let dnsd = Dnsd::builder()
        .zones(&zones)
        .server_option("nsid = \"before\"")
        .start();
    let conf = dnsd.config_path().to_path_buf();
    let text = std::fs::read_to_string(&conf).unwrap();
    assert!(text.contains("nsid = \"before\""), "{text}");
    std::fs::write(&conf, text.replace("nsid = \"before\"", "nsid = \"after\"")).unwrap();
    let (ok, out) = dnsd.ctl(&["reload"]);
    assert!(ok, "{out}");
    assert!(
        out.contains("warning:") && out.contains("[server] nsid changed"),
        "the reload names the key it cannot apply: {out}"
    );
    let r = ask(dnsd.addr(), "www.example.com.", T::A, true);
    assert_eq!(
        option(&r, NSID).as_deref(),
        Some(&b"before"[..]),
        "the running value stays"
    );
    // A second reload: the file still differs from what runs, so it says so again.
    let (ok, out) = dnsd.ctl(&["reload"]);
    assert!(ok, "{out}");
    assert!(
        out.contains("[server] nsid changed"),
        "still differs from the running value: {out}"
    );
    std::fs::write(
        &conf,
        std::fs::read_to_string(&conf)
            .unwrap()
            .replace("\"after\"", "\"before\""),
    )
    .unwrap();
    let (ok, out) = dnsd.ctl(&["reload"]);
    assert!(
        ok && !out.contains("[server]"),
        "back to the running value: {out}"
    );
}

/// Every reply to a query with a client cookie carries our server cookie, and the NSID
/// when asked — CH answers, errors of class and opcode, a refused transfer or NOTIFY, IXFR
/// over UDP — and a refused transfer says why (EDE 18, Prohibited), as NSD says it. Those
/// replies came without the cookie (a resolver that enforces cookies takes such a UDP reply
/// for a forgery) and, from the transfer side, without NSID or EDE.
#[test]
fn every_reply_carries_the_server_cookie_and_the_nsid() {
    const COOKIE: u16 = 10;
    let zones = [Zone::data("example.com.")];
    let dnsd = Dnsd::builder()
        .zones(&zones)
        .server_option("nsid = \"node-a\"")
        .start();
    let client = b"\x01\x02\x03\x04\x05\x06\x07\x08".to_vec();
    let cases: Vec<(&str, &str, u16, QueryOpts, u16)> = vec![
        (
            "CH TXT",
            "version.bind.",
            T::TXT,
            QueryOpts {
                qclass: 3,
                ..QueryOpts::edns(1232)
            },
            u16::MAX,
        ),
        (
            "HS class",
            "www.example.com.",
            T::A,
            QueryOpts {
                qclass: 4,
                ..QueryOpts::edns(1232)
            },
            rcode::REFUSED,
        ),
        (
            "opcode 3",
            "www.example.com.",
            T::A,
            QueryOpts {
                opcode: 3,
                ..QueryOpts::edns(1232)
            },
            rcode::NOTIMP,
        ),
        (
            "AXFR over TCP, refused",
            "example.com.",
            252,
            QueryOpts {
                tcp: true,
                ..QueryOpts::edns(1232)
            },
            rcode::REFUSED,
        ),
        (
            "IXFR over UDP, refused",
            "example.com.",
            251,
            QueryOpts::edns(1232),
            rcode::REFUSED,
        ),
        (
            "NOTIFY from no primary",
            "example.com.",
            T::SOA,
            QueryOpts {
                opcode: 4,
                ..QueryOpts::edns(1232)
            },
            u16::MAX,
        ),
    ];
    for (what, name, qtype, mut opts, rc) in cases {
        opts.options = vec![(NSID, Vec::new()), (COOKIE, client.clone())];
        let q = build_query(0x4e53, name, qtype, &opts);
        let r = if opts.tcp {
            palisade_tests::client::tcp_exchange(dnsd.addr(), &q, Duration::from_secs(2))
        } else {
            udp_exchange(dnsd.addr(), &q, Duration::from_secs(2))
        }
        .expect("exchange")
        .unwrap_or_else(|| panic!("{what}: no reply"));
        let m = RawMsg::parse(&r).expect("a well-formed reply");
        if rc != u16::MAX {
            assert_eq!(m.rcode(), rc, "{what}");
        }
        let cookie = option(&m, COOKIE).unwrap_or_else(|| panic!("{what}: no COOKIE"));
        assert_eq!(cookie.len(), 24, "{what}: our cookie after the client's");
        assert_eq!(cookie[..8], client[..], "{what}");
        assert_eq!(
            option(&m, NSID).as_deref(),
            Some(&b"node-a"[..]),
            "{what}: NSID"
        );
        if what.contains("refused") {
            assert_eq!(option(&m, EDE), Some(vec![0, 18]), "{what}: EDE");
        }
    }
}
