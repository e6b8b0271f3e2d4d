//! ALIAS at the apex (PowerDNS's record): dnsd answers A and AAAA at an ALIAS from its target
//! — in the zones it serves, or through `[alias] resolver` — as PowerDNS (the oracle, bind
//! backend) answers them, with the lower TTL; a reload of the target's zone changes the
//! answer; AXFR carries the ALIAS record itself; signed zones with an ALIAS are refused.

use std::net::SocketAddr;
use std::path::Path;
use std::time::{Duration, Instant};

use palisade_tests::client::try_query;
use palisade_tests::servers::{Dnsd, Pdns, Zone};
use palisade_tests::wire::{QueryOpts, qtype as T, rcode};

const ALIAS_ZONE: &str = "$ORIGIN alias.test.
$TTL 3600
@       SOA ns1 hostmaster 1 7200 3600 1209600 300
@       NS  ns1
ns1     A   192.0.2.53
@       MX  10 ns1
@   300 ALIAS www.target.test.
same 30 ALIAS ns1.alias.test.
chain 300 ALIAS cname.target.test.
v4only 300 ALIAS v4.target.test.
ext 300 ALIAS host.external.test.
nx  300 ALIAS missing.target.test.
";

const TARGET_ZONE: &str = "$ORIGIN target.test.
$TTL 3600
@       SOA ns1 hostmaster 1 7200 3600 1209600 300
@       NS  ns1
ns1     A   192.0.2.54
www  60 A   198.51.100.1
www  60 A   198.51.100.2
www 3600 AAAA 2001:db8::1
cname 120 CNAME www
v4      A   198.51.100.4
";

const EXTERNAL_ZONE: &str = "$ORIGIN external.test.
$TTL 3600
@       SOA ns1 hostmaster 1 7200 3600 1209600 300
@       NS  ns1
ns1     A   192.0.2.55
host 45 A   203.0.113.7
host 45 AAAA 2001:db8::7
";

fn write(dir: &Path, name: &str, text: &str) -> Zone {
    let f = dir.join(format!("{name}.zone"));
    std::fs::write(&f, text).unwrap();
    Zone::new(&format!("{name}."), f)
}

/// The answer of `addr` to `name`/`qtype`: rcode, the answer's (type, data) sorted, and the
/// TTLs of the records of the type asked.
fn ask(addr: SocketAddr, name: &str, qtype: u16) -> (u16, Vec<(u16, String)>, Vec<u32>) {
    let opts = QueryOpts::edns(1232);
    let r = try_query(addr, name, qtype, &opts).unwrap_or_else(|e| panic!("{name}: {e}"));
    let mut data: Vec<(u16, String)> = r
        .msg
        .answers
        .iter()
        .map(|a| (u16::from(a.record_type()), a.data.to_string()))
        .collect();
    data.sort();
    let ttls = r
        .msg
        .answers
        .iter()
        .filter(|a| u16::from(a.record_type()) == qtype)
        .map(|a| a.ttl)
        .collect();
    (r.head.rcode(), data, ttls)
}

/// Asks until the answer is not SERVFAIL (a target outside our zones is fetched on the first
/// miss) or `secs` pass.
fn settled(
    addr: SocketAddr,
    name: &str,
    qtype: u16,
    secs: u64,
) -> (u16, Vec<(u16, String)>, Vec<u32>) {
    let end = Instant::now() + Duration::from_secs(secs);
    loop {
        let a = ask(addr, name, qtype);
        if a.0 != rcode::SERVFAIL || Instant::now() > end {
            return a;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn alias_answers_agree_with_powerdns() {
    let dir = tempfile::tempdir().unwrap();
    let alias = write(dir.path(), "alias.test", ALIAS_ZONE);
    let target = write(dir.path(), "target.test", TARGET_ZONE);
    let external = write(dir.path(), "external.test", EXTERNAL_ZONE);
    // A resolver stand-in: an authoritative dnsd for every target (dnsd asks it for what it
    // does not serve; PowerDNS asks it for every ALIAS target, even its own).
    let resolver = Dnsd::builder()
        .zones(&[alias.clone(), target.clone(), external.clone()])
        .start();
    let dnsd = Dnsd::builder()
        .zones(&[alias.clone(), target.clone()])
        .raw(&format!("\n[alias]\nresolver = \"{}\"\n", resolver.addr()))
        .start();
    let cases: [(&str, u16, u32); 13] = [
        ("alias.test.", T::A, 60),
        // The ALIAS's own type: NODATA (its target is ours to know).
        ("alias.test.", 65401, 0),
        ("same.alias.test.", 65401, 0),
        ("alias.test.", T::AAAA, 300),
        ("same.alias.test.", T::A, 30),
        ("same.alias.test.", T::AAAA, 0),
        ("chain.alias.test.", T::A, 60),
        ("chain.alias.test.", T::AAAA, 120),
        ("v4only.alias.test.", T::A, 300),
        ("v4only.alias.test.", T::AAAA, 0),
        ("ext.alias.test.", T::A, 45),
        ("ext.alias.test.", T::AAAA, 45),
        // A target that does not exist: SERVFAIL (PowerDNS's answer too).
        ("nx.alias.test.", T::A, u32::MAX),
    ];
    let ours: Vec<_> = cases
        .iter()
        .map(|(n, t, _)| match n.starts_with("ext.") {
            true => settled(dnsd.addr(), n, *t, 5),
            false => ask(dnsd.addr(), n, *t),
        })
        .collect();
    // Our own rules: the records of the target, with the lower TTL (of the ALIAS and of each
    // record on the way); a target without them is NODATA.
    for ((name, qtype, ttl), (rc, data, ttls)) in cases.iter().zip(&ours) {
        if *ttl == u32::MAX {
            assert_eq!(*rc, rcode::SERVFAIL, "{name} {qtype}: {data:?}");
            continue;
        }
        assert_eq!(*rc, rcode::NOERROR, "{name} {qtype}: {data:?}");
        if *ttl == 0 {
            assert!(
                data.is_empty(),
                "{name} {qtype}: NODATA expected, got {data:?}"
            );
        } else {
            assert!(!data.is_empty(), "{name} {qtype}: no answer");
            // From the resolver's cache the TTL counts down from what it gave.
            let low = if name.starts_with("ext.") {
                ttl - 5
            } else {
                *ttl
            };
            assert!(
                ttls.iter().all(|t| (low..=*ttl).contains(t)),
                "{name} {qtype}: TTLs {ttls:?}, want {ttl}"
            );
        }
    }
    // Other types at an ALIAS are the zone's own.
    let (rc, data, _) = ask(dnsd.addr(), "alias.test.", T::MX);
    assert_eq!((rc, data.len()), (rcode::NOERROR, 1), "{data:?}");
    if !Pdns::available() {
        palisade_tests::skipped("pdns_server is not installed");
        return;
    }
    let pdns = Pdns::start(&[alias, target], resolver.addr(), &[]);
    for ((name, qtype, _), ours) in cases.iter().zip(&ours) {
        let theirs = ask(pdns.addr(), name, *qtype);
        assert_eq!(
            (ours.0, &ours.1),
            (theirs.0, &theirs.1),
            "{name} {qtype}: dnsd and PowerDNS differ\n{}",
            pdns.log()
        );
    }
}

#[test]
fn an_alias_follows_a_reload_of_its_target_and_transfers_as_written() {
    let dir = tempfile::tempdir().unwrap();
    let mut alias = write(dir.path(), "alias.test", ALIAS_ZONE);
    alias
        .options
        .push("allow_transfer = [\"127.0.0.0/8\"]".into());
    let target = write(dir.path(), "target.test", TARGET_ZONE);
    let dnsd = Dnsd::builder().zones(&[alias, target.clone()]).start();
    let (_, before, _) = ask(dnsd.addr(), "alias.test.", T::A);
    assert_eq!(before.len(), 2, "{before:?}");
    // The target's zone changes: the next answer is the new one (the zone set is swapped
    // whole, so no answer mixes the two).
    let changed = TARGET_ZONE
        .replace("SOA ns1 hostmaster 1 ", "SOA ns1 hostmaster 2 ")
        .replace("www  60 A   198.51.100.2\n", "")
        .replace("198.51.100.1", "198.51.100.9");
    std::fs::write(&target.file, changed).unwrap();
    let (ok, out) = dnsd.ctl(&["reload"]);
    assert!(ok, "{out}");
    let (_, after, ttls) = ask(dnsd.addr(), "alias.test.", T::A);
    assert_eq!(after, vec![(T::A, "198.51.100.9".to_string())]);
    assert_eq!(ttls, vec![60]);
    // A query for the ALIAS's own type: NODATA (as PowerDNS answers; the record named a
    // target that is ours to know).
    let (rc, own, _) = ask(dnsd.addr(), "alias.test.", 65401);
    assert_eq!(
        (rc, own),
        (0, vec![]),
        "the ALIAS record answered as itself"
    );
    // AXFR carries the ALIAS record itself (type 65401), not what it stands for.
    let out = std::process::Command::new("kdig")
        .args([
            &format!("@{}", dnsd.addr().ip()),
            "-p",
            &dnsd.addr().port().to_string(),
            "alias.test.",
            "AXFR",
        ])
        .output()
        .expect("kdig");
    let out = String::from_utf8_lossy(&out.stdout);
    assert!(out.contains("TYPE65401"), "{out}");
    assert!(
        !out.lines()
            .any(|l| l.starts_with("alias.test.") && l.contains("\tA\t198.51")),
        "AXFR expanded the ALIAS:\n{out}"
    );
}

#[test]
fn a_zone_dnsd_signs_gets_its_alias_answers_signed_and_delv_validates_them() {
    for p in ["delv", "dig"] {
        if !palisade_tests::have_program(p) {
            palisade_tests::skipped(&format!("{p} not installed"));
            return;
        }
    }
    let dir = tempfile::tempdir().unwrap();
    let text = format!("{ALIAS_ZONE}*.wild 300 ALIAS www.target.test.\n");
    let mut alias = write(dir.path(), "alias.test", &text);
    alias.options.push("dnssec_policy = \"p\"".into());
    let target = write(dir.path(), "target.test", TARGET_ZONE);
    let external = write(dir.path(), "external.test", EXTERNAL_ZONE);
    let resolver = Dnsd::builder().zone(external).start();
    let dnsd = Dnsd::builder()
        .zones(&[alias, target])
        .raw(&format!(
            "\n[alias]\nresolver = \"{}\"\n\n[defence.rrl]\nenabled = false\n\n[dnssec]\n\
             key_dir = \"{}\"\n\n[[dnssec_policy]]\nname = \"p\"\n",
            resolver.addr(),
            dir.path().join("keys").display()
        ))
        .start();
    // The trust anchor: the zone's key-signing keys as served.
    let anchor_file = dir.path().join("anchor.conf");
    palisade_tests::delv::anchor_from_served(dnsd.addr(), "alias.test", &anchor_file);
    // The outside target is fetched on the first miss.
    settled(dnsd.addr(), "ext.alias.test.", T::A, 5);
    let delv = |name: &str, qtype: &str| {
        palisade_tests::delv::delv(dnsd.addr(), None, &anchor_file, "alias.test", name, qtype)
    };
    for (name, qtype, want) in [
        ("alias.test", "A", "; fully validated"),
        ("alias.test", "AAAA", "; fully validated"),
        ("chain.alias.test", "A", "; fully validated"),
        ("ext.alias.test", "A", "; fully validated"),
        (
            "v4only.alias.test",
            "AAAA",
            "; negative response, fully validated",
        ),
        ("alias.test", "MX", "; fully validated"),
        ("a.wild.alias.test", "A", "; fully validated"),
        ("b.c.wild.alias.test", "AAAA", "; fully validated"),
        // The ALIAS's own type: NODATA, its NSEC without the type (PowerDNS's bitmap).
        (
            "same.alias.test",
            "TYPE65401",
            "; negative response, fully validated",
        ),
        (
            "alias.test",
            "TYPE65401",
            "; negative response, fully validated",
        ),
        (
            "a.wild.alias.test",
            "TYPE65401",
            "; negative response, fully validated",
        ),
    ] {
        let out = delv(name, qtype);
        assert!(
            out.contains(want),
            "delv {name} {qtype}: expected {want:?}:\n{out}"
        );
    }
    // A denial at the ALIAS's name lists A and AAAA (a resolver reusing it, RFC 8198, would
    // deny the addresses the ALIAS answers): the chain's NSECs of the apex and of a name
    // holding only an ALIAS. (The NSEC signed when asked, for an address type the target
    // lacks, is what delv validated above: v4only AAAA.)
    for name in ["alias.test.", "same.alias.test."] {
        let r = palisade_tests::client::query_reply(
            dnsd.addr(),
            name,
            16,
            &QueryOpts::edns(1232).with_do(),
        );
        let n = palisade_tests::compare::Normalized::from_reply(&r);
        let nsec = n
            .authority
            .iter()
            .find(|r| r.rtype == 47 && r.owner == name)
            .unwrap_or_else(|| panic!("{name} TXT: no NSEC at the name: {n:?}"));
        let types = nsec_types(&nsec.rdata);
        assert!(
            types.contains(&T::A) && types.contains(&T::AAAA),
            "{name}: the NSEC denies the ALIAS's addresses: {types:?}"
        );
    }
    // A wildcard's ALIAS is signed over the wildcard (labels 3: wild.alias.test), as its
    // other records are: names asked over TCP, where no budget holds a proven source, cost
    // one signature per worker, not one each.
    let signed = dnsd.stat("compact_denial.signed");
    for i in 0..50 {
        let r = palisade_tests::client::query_reply(
            dnsd.addr(),
            &format!("n{i}.wild.alias.test."),
            T::A,
            &QueryOpts::edns(1232).over_tcp().with_do(),
        );
        let n = palisade_tests::compare::Normalized::from_reply(&r);
        let sig = n
            .answer
            .iter()
            .find(|r| r.rtype == 46)
            .unwrap_or_else(|| panic!("no RRSIG: {n:?}"));
        // RDATA: type covered (2), algorithm (1), labels (1).
        assert_eq!(sig.rdata[3], 3, "labels of {:?}", sig.rdata);
    }
    let more = dnsd.stat("compact_denial.signed") - signed;
    assert!(more <= 4, "{more} signatures for 50 names of one wildcard");
    // Its own check of the signed zone finds the bitmaps as the signer wrote them.
    assert!(
        !dnsd.log().contains("wrong NSEC(3) bitmap"),
        "{}",
        dnsd.log()
    );
    // Asked again: the signature comes from a worker's cache, and still validates (asked a
    // few times: each worker keeps its own cache, and a query may meet another worker).
    for _ in 0..4 {
        let out = delv("alias.test", "A");
        assert!(out.contains("; fully validated"), "{out}");
        if dnsd.stat("compact_denial.cached") >= 1 {
            break;
        }
    }
    assert!(
        dnsd.stat("compact_denial.cached") >= 1,
        "a cached signature was used"
    );
}

#[test]
fn without_a_resolver_an_outside_target_is_servfail_and_pre_signed_zones_refuse_alias() {
    let dir = tempfile::tempdir().unwrap();
    let alias = write(dir.path(), "alias.test", ALIAS_ZONE);
    // Signed elsewhere (it carries a DNSKEY): an ALIAS there could only be answered unsigned.
    let presigned = write(
        dir.path(),
        "signed.test",
        &(ALIAS_ZONE.replace("alias.test.", "signed.test.")
            + "@ DNSKEY 257 3 13 mdsswUyr3DPW132mOi8V9xESWE8jTo0dxCjjnopKl+GqJxpVXckHAeF+KkxLbxILfDLUT0rAK9iUzy1L53eKGQ==\n"),
    );
    let dnsd = Dnsd::builder()
        .zone(alias)
        .raw(&format!(
            "\n[[zone]]\norigin = \"signed.test.\"\nfile = \"{}\"\n",
            presigned.file.display()
        ))
        .start();
    let (rc, _, _) = ask(dnsd.addr(), "ext.alias.test.", T::A);
    assert_eq!(rc, rcode::SERVFAIL, "no resolver: SERVFAIL");
    // [alias] is read at start: a reload that changes it says so, and keeps the running one.
    let mut cfg = std::fs::read_to_string(dnsd.config_path()).unwrap();
    cfg.push_str("\n[alias]\nresolver = \"127.0.0.1:53\"\n");
    std::fs::write(dnsd.config_path(), cfg).unwrap();
    // (The reload fails for the pre-signed zone below; the warning comes with it.)
    let (_, out) = dnsd.ctl(&["reload"]);
    assert!(
        out.contains("[alias] changed") && out.contains("read at start only"),
        "{out}"
    );
    let (rc, data, _) = ask(dnsd.addr(), "same.alias.test.", T::A);
    assert_eq!(
        (rc, data.len()),
        (rcode::NOERROR, 1),
        "a target of our own still answers"
    );
    let log = dnsd.log();
    assert!(
        log.contains("ALIAS at signed.test. in a pre-signed zone"),
        "the pre-signed zone is refused, naming the ALIAS:\n{log}"
    );
    assert!(log.contains("signed.test.zone"), "and its file:\n{log}");
}

#[test]
fn an_alias_loop_or_a_target_past_the_record_bound_is_answered_within_bounds_and_counted() {
    let dir = tempfile::tempdir().unwrap();
    let mut big = String::from(
        "$ORIGIN bound.test.\n$TTL 3600\n@ SOA ns1 hostmaster 1 7200 3600 1209600 300\n@ NS ns1\nns1 A 192.0.2.53\n\
         loop1 ALIAS loop2.bound.test.\nloop2 CNAME loop1\n\
         big ALIAS many.bound.test.\nsmall ALIAS ns1.bound.test.\n",
    );
    // A chain of 12 CNAMEs: past the steps an ALIAS answer follows.
    big.push_str("long ALIAS c0.bound.test.\n");
    for i in 0..12 {
        big.push_str(&format!("c{i} CNAME c{}\n", i + 1));
    }
    big.push_str("c12 A 192.0.2.12\n");
    for i in 0..70 {
        big.push_str(&format!("many A 10.0.{}.{}\n", i / 250, i % 250 + 1));
    }
    let zone = write(dir.path(), "bound.test", &big);
    let dnsd = Dnsd::builder().zone(zone).start();
    let bound = |what: &str| -> u64 {
        let m = dnsd.metrics();
        let series = format!("dnsd_alias_bounds_total{{bound=\"{what}\"}} ");
        m.lines()
            .find_map(|l| l.strip_prefix(series.as_str()))
            .unwrap_or_else(|| panic!("no {series} in /metrics:\n{m}"))
            .trim()
            .parse()
            .unwrap()
    };
    assert_eq!((bound("chain"), bound("records")), (0, 0));
    let (rc, _, _) = ask(dnsd.addr(), "small.bound.test.", T::A);
    assert_eq!(rc, rcode::NOERROR);
    assert_eq!((bound("chain"), bound("records")), (0, 0), "within bounds");

    let (rc, data, _) = ask(dnsd.addr(), "loop1.bound.test.", T::A);
    assert_eq!((rc, data.len()), (rcode::SERVFAIL, 0), "a loop is SERVFAIL");
    assert_eq!(bound("chain"), 1);
    let (rc, _, _) = ask(dnsd.addr(), "long.bound.test.", T::A);
    assert_eq!(
        rc,
        rcode::SERVFAIL,
        "a chain past the steps followed is SERVFAIL"
    );
    assert_eq!(bound("chain"), 2);

    let (rc, data, _) = ask(dnsd.addr(), "big.bound.test.", T::A);
    assert_eq!(rc, rcode::NOERROR);
    assert_eq!(data.len(), 64, "at most 64 records from a target");
    assert_eq!(bound("records"), 1);
    // The target itself is answered whole.
    let (_, data, _) = ask(dnsd.addr(), "many.bound.test.", T::A);
    assert_eq!(data.len(), 70);
}

/// The types an NSEC RDATA (canonical wire form) lists.
fn nsec_types(rd: &[u8]) -> Vec<u16> {
    let mut i = 0;
    while rd[i] != 0 {
        i += 1 + rd[i] as usize;
    }
    i += 1;
    let mut out = Vec::new();
    while i + 2 <= rd.len() {
        let (w, n) = (rd[i] as u16, rd[i + 1] as usize);
        for (k, b) in rd[i + 2..i + 2 + n].iter().enumerate() {
            for bit in 0..8 {
                if b & (0x80 >> bit) != 0 {
                    out.push(w * 256 + (k * 8 + bit) as u16);
                }
            }
        }
        i += 2 + n;
    }
    out
}

/// A stand-in resolver on `127.0.0.x`: A 203.0.113.7 with TTL 1 for `host.ext.test.`,
/// SERVFAIL for anything else; counts what it is asked, by name.
fn flaky_resolver() -> (
    SocketAddr,
    std::sync::Arc<std::sync::Mutex<std::collections::HashMap<String, u32>>>,
) {
    let s = std::net::UdpSocket::bind((palisade_tests::net::test_ip(), 0)).unwrap();
    s.set_read_timeout(Some(Duration::from_millis(200)))
        .unwrap();
    let addr = s.local_addr().unwrap();
    let asked = std::sync::Arc::new(std::sync::Mutex::new(std::collections::HashMap::new()));
    let seen = asked.clone();
    std::thread::spawn(move || {
        let mut buf = [0u8; 512];
        // Bounded: the test ends well within this.
        let end = Instant::now() + Duration::from_secs(120);
        while Instant::now() < end {
            let Ok((n, from)) = s.recv_from(&mut buf) else {
                continue;
            };
            if n < 17 {
                continue;
            }
            // The question's name and type.
            let (mut name, mut i) = (String::new(), 12);
            while i < n && buf[i] != 0 {
                let l = buf[i] as usize;
                name.push_str(&String::from_utf8_lossy(&buf[i + 1..(i + 1 + l).min(n)]));
                name.push('.');
                i += 1 + l;
            }
            if i + 5 > n {
                continue;
            }
            let qtype = u16::from_be_bytes([buf[i + 1], buf[i + 2]]);
            let name = name.to_ascii_lowercase();
            *seen.lock().unwrap().entry(name.clone()).or_insert(0) += 1;
            let q = buf[12..i + 5].to_vec();
            let mut r = buf[..12].to_vec();
            r[2] |= 0x80;
            r[3] = 0x80;
            r[4..12].copy_from_slice(&[0, 1, 0, 0, 0, 0, 0, 0]);
            r.extend_from_slice(&q);
            if name == "host.ext.test." && qtype == T::A {
                r[3] = 0x80;
                r[7] = 1;
                r.extend_from_slice(&[0xC0, 12, 0, 1, 0, 1, 0, 0, 0, 1, 0, 4, 203, 0, 113, 7]);
            } else {
                r[3] = 0x82; // SERVFAIL
            }
            let _ = s.send_to(&r, from);
        }
    });
    (addr, asked)
}

/// A target whose resolver fails is kept failed a few seconds (it was asked again for
/// every query: a flood on the apex passed through to the resolver at its rate), and one
/// given a TTL of 1 is kept ten seconds (every query after the first second was a miss
/// answered SERVFAIL).
#[test]
fn a_failing_or_short_lived_target_is_not_asked_at_the_clients_rate() {
    let dir = tempfile::tempdir().unwrap();
    let zone = write(
        dir.path(),
        "flaky.test",
        "$ORIGIN flaky.test.\n$TTL 300\n@ SOA ns1 hm 1 7200 3600 1209600 300\n@ NS ns1\n\
         ns1 A 192.0.2.53\nok 300 ALIAS host.ext.test.\nbad 300 ALIAS down.ext.test.\n",
    );
    let (resolver, asked) = flaky_resolver();
    let dnsd = Dnsd::builder()
        .zone(zone)
        .raw(&format!(
            "\n[alias]\nresolver = \"{resolver}\"\n\n[defence.rrl]\nenabled = false\n"
        ))
        .start();
    let a = dnsd.addr();
    let (rc, _, _) = settled(a, "ok.flaky.test.", T::A, 5);
    assert_eq!(rc, rcode::NOERROR);
    // Three seconds of queries, past the target's TTL of 1: every one answered.
    let end = Instant::now() + Duration::from_secs(3);
    let mut servfail = 0;
    let mut n = 0;
    while Instant::now() < end {
        let (rc, _, ttls) = ask(a, "ok.flaky.test.", T::A);
        n += 1;
        if rc != rcode::NOERROR {
            servfail += 1;
        }
        assert!(ttls.iter().all(|&t| t <= 10), "{ttls:?}");
        std::thread::sleep(Duration::from_millis(50));
    }
    assert_eq!(servfail, 0, "of {n} queries past the TTL");
    // 300 queries for a target the resolver fails: SERVFAIL, and the resolver asked a few
    // times, not 300.
    for _ in 0..300 {
        let (rc, _, _) = ask(a, "bad.flaky.test.", T::A);
        assert_eq!(rc, rcode::SERVFAIL);
    }
    let times = asked
        .lock()
        .unwrap()
        .get("down.ext.test.")
        .copied()
        .unwrap_or(0);
    assert!(
        (1..=3).contains(&times),
        "the resolver was asked {times} times for 300 queries"
    );
}
