//! Zone transfers with real peers: Knot DNS as primary and dnsd as its secondary (AXFR,
//! then NOTIFY and IXFR), dnsd as primary of NSD and Knot with TSIG (AXFR, then IXFR after
//! a reload), refusals (ACL, wrong and unknown keys), a restarted secondary that serves its
//! copy and then expires, and the signed root zone out of dnsd checked by ldns-verify-zone.

use std::net::SocketAddr;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use palisade_tests::client;
use palisade_tests::compare::{Aspect, Normalized};
use palisade_tests::net;
use palisade_tests::servers::{Dnsd, Knot, Nsd, Zone};
use palisade_tests::wait::wait_for;
use palisade_tests::wire::{QueryOpts, build_query, qtype as T, rcode};

const ORIGIN: &str = "example.com.";
/// A 256-bit secret (base64) for hmac-sha256, and a 512-bit one for hmac-sha512.
const SECRET256: &str = "wqIQuCNXzAMa+fQZo7R6BPftjkZB/xEdW6bUz31wwec=";
const SECRET512: &str =
    "NpjYCG3SNoWGcRuuPxFD31DfS2036elq5s/AJNDPJeGF06vvLP373t9yAADmmwTZDbGFMsWFezG2Iau4kEr/CA==";

/// The test zone at `serial`; `v2` changes, adds and deletes records. SOA timers: `timers`
/// (refresh retry expire).
fn zone_text(serial: u32, v2: bool, timers: &str) -> String {
    let mut z = format!(
        "$ORIGIN example.com.\n$TTL 300\n@ SOA ns1 hostmaster {serial} {timers} 60\n\
         @ NS ns1\n@ NS ns2\n@ MX 10 mail\n@ TXT \"v=spf1 -all\"\n@ CAA 0 issue \"ca.example\"\n\
         ns1 A 192.0.2.1\nns2 AAAA 2001:db8::2\nmail A 192.0.2.10\nwww CNAME @\n\
         _sip._tcp SRV 10 5 5060 sip\nsip A 192.0.2.20\n*.wild TXT \"wildcard\"\n\
         sub NS ns.sub\nns.sub A 192.0.2.53\n"
    );
    // Enough records that a transfer takes several messages.
    for i in 1..=3000 {
        z.push_str(&format!(
            "filler{i} TXT \"record {i} of a zone that takes several messages\"\n"
        ));
    }
    if v2 {
        z.push_str("new A 192.0.2.100\nchanged A 192.0.2.2\nttl 600 TXT \"x\"\n");
    } else {
        z.push_str("gone A 192.0.2.99\nchanged A 192.0.2.1\nttl 300 TXT \"x\"\n");
    }
    z
}

/// The questions whose answers are compared.
fn questions() -> Vec<(&'static str, u16)> {
    vec![
        ("example.com.", T::SOA),
        ("example.com.", T::NS),
        ("example.com.", T::MX),
        ("example.com.", T::TXT),
        ("example.com.", T::CAA),
        ("ns1.example.com.", T::A),
        ("ns2.example.com.", T::AAAA),
        ("mail.example.com.", T::A),
        ("www.example.com.", T::CNAME),
        ("_sip._tcp.example.com.", T::SRV),
        ("a.wild.example.com.", T::TXT),
        ("gone.example.com.", T::A),
        ("new.example.com.", T::A),
        ("changed.example.com.", T::A),
        ("ttl.example.com.", T::TXT),
        ("nx.example.com.", T::A),
        ("mail.example.com.", T::AAAA),
    ]
}

fn skip_without(programs: &[&str]) -> bool {
    for p in programs {
        if !palisade_tests::have_program(p) {
            palisade_tests::skipped(&format!("{p} not installed"));
            assert!(
                !palisade_tests::in_ci(),
                "CI must have {p} (scripts/install-deps)"
            );
            return true;
        }
    }
    false
}

/// Rcode and answer section of `name`/`qtype` from `addr`.
fn answer(addr: SocketAddr, name: &str, qtype: u16) -> Normalized {
    Normalized::from_reply(&client::query_reply(addr, name, qtype, &QueryOpts::udp()))
}

/// Fails when `a` and `b` differ in rcode or answer for any of [`questions`].
fn assert_same_answers(an: &str, a: SocketAddr, bn: &str, b: SocketAddr) {
    let mut diffs = Vec::new();
    for (name, qt) in questions() {
        let (x, y) = (answer(a, name, qt), answer(b, name, qt));
        for asp in [Aspect::Rcode, Aspect::Answer] {
            if !x.same(&y, asp) {
                diffs.push(format!(
                    "{name} {qt} {asp:?}: {an} {} / {bn} {}",
                    x.show(asp),
                    y.show(asp)
                ));
            }
        }
    }
    assert!(diffs.is_empty(), "answers differ:\n{}", diffs.join("\n"));
}

/// The SOA serial `addr` serves for the test zone, if it answers one.
fn serial(addr: SocketAddr) -> Option<u32> {
    let r = client::try_query(addr, ORIGIN, T::SOA, &QueryOpts::udp()).ok()?;
    let n = Normalized::from_reply(&r);
    let soa = n.answer.iter().find(|r| r.rtype == T::SOA)?;
    soa.text.split_whitespace().nth(2)?.parse().ok()
}

/// Waits (bounded) until `addr` serves `want`.
fn wait_serial(what: &str, addr: SocketAddr, want: u32, limit: Duration) {
    let end = Instant::now() + limit;
    while Instant::now() < end {
        if serial(addr) == Some(want) {
            return;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    panic!(
        "{what} at {addr} does not serve serial {want} after {limit:?} (serves {:?})",
        serial(addr)
    );
}

/// A Knot primary of the test zone in `file`, with `notify` (dnsd, as `via` its own
/// address so that dnsd sees NOTIFY come from its primary) and the key `key`/`alg`.
fn knot_primary(file: &Path, notify: SocketAddr, key: (&str, &str, &str)) -> Knot {
    let file = file.to_path_buf();
    Knot::start_raw(&[Zone::new(ORIGIN, &file)], move |dir, addr| {
        let (kname, alg, secret) = key;
        format!(
            "{}key:\n  - id: {kname}\n    algorithm: {alg}\n    secret: {secret}\n\n\
             remote:\n  - id: dnsd\n    address: {}@{}\n    via: {}\n    key: {kname}\n\n\
             acl:\n  - id: xfr\n    address: 127.0.0.0/8\n    action: transfer\n    key: {kname}\n\n\
             template:\n  - id: default\n    storage: \"{}\"\n    zonefile-sync: -1\n    \
             zonefile-load: difference\n    journal-content: changes\n    semantic-checks: off\n    \
             notify: dnsd\n    acl: xfr\n\nzone:\n  - domain: {ORIGIN}\n    file: \"{}\"\n",
            Knot::server_section(dir, addr),
            notify.ip(),
            notify.port(),
            addr.ip(),
            dir.display(),
            file.display()
        )
    })
}

fn dnsd_secondary(at: SocketAddr, file: &Path, primary: SocketAddr) -> Dnsd {
    let mut z = Zone::new(ORIGIN, file);
    z.options = vec![
        format!("primaries = [\"{primary}\"]"),
        "tsig = \"k512\"".into(),
        "allow_transfer = [\"127.0.0.0/8\"]".into(),
    ];
    Dnsd::builder()
        .at(at)
        .zone(z)
        .raw(&format!(
            "[[tsig_key]]\nname = \"k512\"\nalgorithm = \"hmac-sha512\"\nsecret = \"{SECRET512}\"\n"
        ))
        .start()
}

fn fresh_addr() -> SocketAddr {
    let ip = net::test_ip();
    SocketAddr::from((ip, net::free_port(ip)))
}

#[test]
fn knot_primary_dnsd_secondary_axfr_then_notify_ixfr() {
    if skip_without(&["knotd", "knotc"]) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let primary_file = dir.path().join("primary.zone");
    std::fs::write(&primary_file, zone_text(1, false, "3600 600 86400")).unwrap();
    let copy = dir.path().join("secondary").join("example.com.zone");
    let at = fresh_addr();
    let knot = knot_primary(&primary_file, at, ("k512", "hmac-sha512", SECRET512));
    // dnsd starts without the zone and is ready once the AXFR brought it.
    let dnsd = dnsd_secondary(at, &copy, knot.addr());
    assert_eq!(dnsd.stat("transfer.in.axfr"), 1, "{}", dnsd.log());
    assert_same_answers("dnsd", dnsd.addr(), "knot", knot.addr());
    assert!(copy.exists(), "the transferred zone is written to its file");

    // The primary's zone changes: Knot reloads it, journals the difference and notifies.
    std::fs::write(&primary_file, zone_text(2, true, "3600 600 86400")).unwrap();
    let (ok, out) = knot.knotc(&["zone-reload", ORIGIN]);
    assert!(ok, "knotc zone-reload: {out}");
    wait_serial("dnsd", dnsd.addr(), 2, Duration::from_secs(20));
    let s = dnsd.stats();
    assert!(
        s["notify.in.accepted"] >= 1,
        "NOTIFY from Knot accepted: {s:?}"
    );
    assert_eq!(s["transfer.in.ixfr"], 1, "the change came by IXFR: {s:?}");
    assert_eq!(s["transfer.in.axfr"], 1, "no second AXFR: {s:?}");
    assert_same_answers("dnsd", dnsd.addr(), "knot", knot.addr());
    let text = std::fs::read_to_string(&copy).unwrap();
    assert!(text.contains("new.example.com.") && !text.contains("gone.example.com."));
    let (ok, zones) = dnsd.ctl(&["zones"]);
    assert!(
        ok && zones.contains("secondary of") && zones.contains("IXFR"),
        "{zones}"
    );
    assert!(
        dnsd.metrics()
            .contains("dnsd_zone_transfers_in_total{zone=\"example.com.\",result=\"ok\"} 2")
    );
    // ctl zone-refresh: current.
    let (ok, out) = dnsd.ctl(&["zone-refresh", ORIGIN]);
    assert!(ok && out.contains("current at serial 2"), "{out}");
}

#[test]
fn secondary_restart_serves_its_copy_then_expires() {
    if skip_without(&["knotd"]) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let primary_file = dir.path().join("primary.zone");
    // Refresh 1 s, retry 1 s, expire 4 s.
    std::fs::write(&primary_file, zone_text(7, false, "1 1 4")).unwrap();
    let copy = dir.path().join("copy.zone");
    let at = fresh_addr();
    let knot = knot_primary(&primary_file, at, ("k512", "hmac-sha512", SECRET512));
    let primary = knot.addr();
    let first = dnsd_secondary(at, &copy, primary);
    assert_eq!(serial(first.addr()), Some(7));
    drop(first);
    drop(knot);
    // Restarted with the primary gone: serves its copy at once...
    let again = dnsd_secondary(fresh_addr(), &copy, primary);
    assert_eq!(serial(again.addr()), Some(7));
    // ...until the zone expires: SERVFAIL.
    wait_for("the zone to expire", Duration::from_secs(20), || {
        let r = client::query_reply(again.addr(), "ns1.example.com.", T::A, &QueryOpts::udp());
        r.head.rcode() == rcode::SERVFAIL
    });
    let (_, zones) = again.ctl(&["zones"]);
    assert!(zones.contains("state expired"), "{zones}");
    assert!(
        again
            .metrics()
            .contains("dnsd_zone_expired{zone=\"example.com.\"} 1")
    );
    assert_eq!(again.stat("transfer.in.expired"), 1);
}

/// dnsd as primary of NSD and Knot, with TSIG.
#[test]
fn dnsd_primary_nsd_and_knot_secondaries_with_tsig() {
    if skip_without(&["knotd", "nsd"]) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("example.com.zone");
    std::fs::write(&file, zone_text(1, false, "3600 600 86400")).unwrap();
    let mut z = Zone::new(ORIGIN, &file);
    z.options = vec![
        "allow_transfer = [\"127.0.0.0/8\"]".into(),
        "tsig = \"k1\"".into(),
        "notify = []".into(),
    ];
    let dnsd = Dnsd::builder()
        .zone(z)
        .raw(&format!(
            "[[tsig_key]]\nname = \"k1\"\nalgorithm = \"hmac-sha256\"\nsecret = \"{SECRET256}\"\n"
        ))
        .start();
    let p = dnsd.addr();
    let ready = [Zone::new(ORIGIN, dir.path().join("unused"))];
    let nsd = Nsd::start_raw(&ready, |d, addr| {
        format!(
            "{}\nkey:\n  name: \"k1\"\n  algorithm: hmac-sha256\n  secret: \"{SECRET256}\"\n\n\
             zone:\n  name: \"{ORIGIN}\"\n  zonefile: \"{}/example.com.zone\"\n  \
             request-xfr: {}@{} k1\n  allow-notify: 127.0.0.0/8 k1\n",
            Nsd::server_section(d, addr),
            d.display(),
            p.ip(),
            p.port()
        )
    });
    let knot = Knot::start_raw(&ready, |d, addr| {
        format!(
            "{}key:\n  - id: k1\n    algorithm: hmac-sha256\n    secret: {SECRET256}\n\n\
             remote:\n  - id: dnsd\n    address: {}@{}\n    key: k1\n\n\
             acl:\n  - id: notify\n    address: 127.0.0.0/8\n    action: notify\n    key: k1\n\n\
             template:\n  - id: default\n    storage: \"{}\"\n    zonefile-sync: -1\n    \
             journal-content: changes\n    semantic-checks: off\n    master: dnsd\n    acl: notify\n\n\
             zone:\n  - domain: {ORIGIN}\n    file: \"{}/example.com.zone\"\n",
            Knot::server_section(d, addr),
            p.ip(),
            p.port(),
            d.display(),
            d.display()
        )
    });
    assert_eq!(dnsd.stat("transfer.out.axfr"), 2, "{}", dnsd.log());
    assert_same_answers("nsd", nsd.addr(), "dnsd", dnsd.addr());
    assert_same_answers("knot", knot.addr(), "dnsd", dnsd.addr());

    // Now that their addresses are known: NOTIFY them, and change the zone.
    let cfg = std::fs::read_to_string(dnsd.config_path()).unwrap();
    let cfg = cfg.replace(
        "notify = []",
        &format!("notify = [\"{}\", \"{}\"]", nsd.addr(), knot.addr()),
    );
    std::fs::write(dnsd.config_path(), cfg).unwrap();
    std::fs::write(&file, zone_text(2, true, "3600 600 86400")).unwrap();
    let (ok, out) = dnsd.ctl(&["reload"]);
    assert!(ok, "{out}");
    wait_serial("nsd", nsd.addr(), 2, Duration::from_secs(30));
    wait_serial("knot", knot.addr(), 2, Duration::from_secs(30));
    let s = dnsd.stats();
    assert_eq!(s["transfer.out.ixfr"], 2, "both came back by IXFR: {s:?}");
    assert_eq!(s["transfer.out.ixfr_full"], 0, "{s:?}");
    assert_eq!(s["transfer.out.axfr"], 2, "{s:?}");
    assert!(s["notify.out.acked"] >= 2, "{s:?}");
    assert!(s["tsig.verified"] >= 4, "{s:?}");
    assert!(knot.log().contains("IXFR"), "{}", knot.log());
    assert_same_answers("nsd", nsd.addr(), "dnsd", dnsd.addr());
    assert_same_answers("knot", knot.addr(), "dnsd", dnsd.addr());
    let (ok, out) = dnsd.ctl(&["zone-notify", ORIGIN]);
    assert!(ok && out.matches(" ok (").count() == 2, "{out}");
}

/// One AXFR over TCP, raw: the rcode of the first message.
fn axfr_rcode(addr: SocketAddr, zone: &str) -> u16 {
    let q = build_query(client::next_id(), zone, T::AXFR, &QueryOpts::udp());
    let r = client::tcp_exchange(addr, &q, Duration::from_secs(5))
        .unwrap()
        .expect("an answer");
    (r[3] & 0xF) as u16
}

fn kdig(args: &[&str]) -> String {
    let out = Command::new("kdig").args(args).output().expect("run kdig");
    let mut s = String::from_utf8_lossy(&out.stdout).into_owned();
    s.push_str(&String::from_utf8_lossy(&out.stderr));
    s
}

#[test]
fn refusals_acl_and_tsig() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("example.com.zone");
    std::fs::write(&file, zone_text(1, false, "3600 600 86400")).unwrap();
    let other = dir.path().join("example.net.zone");
    std::fs::write(
        &other,
        zone_text(1, false, "3600 600 86400").replace("example.com.", "example.net."),
    )
    .unwrap();
    let mut z1 = Zone::new(ORIGIN, &file);
    z1.options = vec![
        "allow_transfer = [\"127.0.0.0/8\"]".into(),
        "tsig = \"k1\"".into(),
    ];
    let mut z2 = Zone::new("example.net.", &other);
    z2.options = vec!["allow_transfer = [\"192.0.2.0/24\"]".into()];
    let dnsd = Dnsd::builder()
        .zone(z1)
        .zone(z2)
        .raw(&format!(
            "[[tsig_key]]\nname = \"k1\"\nalgorithm = \"hmac-sha256\"\nsecret = \"{SECRET256}\"\n"
        ))
        .start();
    let a = dnsd.addr();
    // Outside allow_transfer, and unsigned where the zone wants its key: REFUSED.
    assert_eq!(axfr_rcode(a, "example.net."), rcode::REFUSED);
    assert_eq!(axfr_rcode(a, ORIGIN), rcode::REFUSED);
    // Not served: NOTAUTH.
    assert_eq!(axfr_rcode(a, "example.org."), rcode::NOTAUTH);
    assert!(dnsd.stat("transfer.out.refused") >= 2);
    if skip_without(&["kdig"]) {
        return;
    }
    let (ip, port) = (format!("@{}", a.ip()), a.port().to_string());
    let base = [ip.as_str(), "-p", port.as_str(), "+tcp", ORIGIN, "AXFR"];
    let wrong = format!("hmac-sha256:k1:{}", SECRET512);
    let out = kdig(&[&base[..], &["-y", &wrong]].concat());
    assert!(out.contains("BADSIG"), "{out}");
    let unknown = format!("hmac-sha256:nokey:{SECRET256}");
    let out = kdig(&[&base[..], &["-y", &unknown]].concat());
    assert!(out.contains("BADKEY"), "{out}");
    let good = format!("hmac-sha256:k1:{SECRET256}");
    let out = kdig(&[&base[..], &["-y", &good]].concat());
    assert!(
        out.contains("new.example.com.") || out.contains("gone.example.com."),
        "{out}"
    );
    // Several messages, each signed and chained to the one before (kdig checks them all).
    assert!(out.contains("messages, 3019 records"), "{out}");
    assert!(!out.contains(";; ERROR"), "{out}");
    let s = dnsd.stats();
    assert_eq!((s["tsig.badsig"], s["tsig.badkey"]), (1, 1), "{s:?}");
    assert_eq!(s["transfer.out.axfr"], 1, "{s:?}");
    // IXFR from a serial the journal does not hold: the whole zone.
    let out = kdig(&[&base[..4], &[ORIGIN, "IXFR=0", "-y", &good]].concat());
    assert!(
        out.contains("3019 records") && !out.contains(";; ERROR"),
        "{out}"
    );
    assert_eq!(dnsd.stat("transfer.out.ixfr_full"), 1);
    // IXFR over UDP from a current client: the SOA alone, signed.
    let out = kdig(&[
        ip.as_str(),
        "-p",
        &port,
        ORIGIN,
        "IXFR=1",
        "+notcp",
        "-y",
        &good,
    ]);
    assert!(
        out.contains("SOA") && out.contains("NOERROR") && !out.contains("ERROR:"),
        "{out}"
    );
    // A secondary whose key of the same name has another secret: its refreshes fail on the
    // TSIG, counted as such (only transfer.in.failed rose: tampering read as a network
    // fault).
    let cdir = tempfile::tempdir().unwrap();
    let mut copy = Zone::new(ORIGIN, cdir.path().join("copy.zone"));
    copy.options = vec![format!("primaries = [\"{a}\"]"), "tsig = \"k1\"".into()];
    let mut anchor = Zone::new("example.net.", &other);
    anchor.options = vec![];
    let secondary = Dnsd::builder()
        .zone(anchor)
        .zone(copy)
        .ready_on_first_zone()
        .raw(&format!(
            "[[tsig_key]]\nname = \"k1\"\nalgorithm = \"hmac-sha256\"\nsecret = \"{}\"\n",
            &SECRET512[..44]
        ))
        .start();
    wait_for("the TSIG failure counted", Duration::from_secs(10), || {
        secondary.stat("tsig.in_failed") >= 1
    });
}

#[test]
fn root_zone_axfr_verifies_with_ldns() {
    let Some(corpora) = palisade_tests::corpora::corpora_dir() else {
        return;
    };
    if skip_without(&["kdig", "ldns-verify-zone"]) {
        return;
    }
    let root = corpora.join("root-zone/root.zone");
    let mut z = Zone::new(".", &root);
    z.options = vec![
        "allow_transfer = [\"127.0.0.0/8\"]".into(),
        "tsig = \"k512\"".into(),
    ];
    let dnsd = Dnsd::builder()
        .zone(z)
        .raw(&format!(
            "[[tsig_key]]\nname = \"k512\"\nalgorithm = \"hmac-sha512\"\nsecret = \"{SECRET512}\"\n"
        ))
        .start();
    let a = dnsd.addr();
    // Signed: kdig checks the TSIG of every message and its chaining to the one before.
    let key = format!("hmac-sha512:k512:{SECRET512}");
    let out = kdig(&[
        "-y",
        &key,
        &format!("@{}", a.ip()),
        "-p",
        &a.port().to_string(),
        "+tcp",
        "+noidn",
        ".",
        "AXFR",
    ]);
    let stats = out
        .lines()
        .find(|l| l.starts_with(";; Received"))
        .unwrap_or_else(|| panic!("no transfer: {}", &out[..out.len().min(2000)]))
        .to_string();
    // Streamed as several messages.
    let msgs: u64 = stats
        .split('(')
        .nth(1)
        .and_then(|s| s.split_whitespace().next())
        .and_then(|n| n.parse().ok())
        .unwrap_or(0);
    assert!(msgs > 1, "{stats}");
    assert!(
        !out.contains(";; ERROR") && !out.contains(";; WARNING"),
        "{stats}"
    );
    let mut recs: Vec<&str> = out
        .lines()
        .filter(|l| !l.starts_with(';') && !l.trim().is_empty())
        .filter(|l| l.split_whitespace().nth(3) != Some("TSIG"))
        .collect();
    // The closing SOA repeats the first.
    assert_eq!(recs.first(), recs.last());
    recs.pop();
    assert_eq!(recs.len(), 25031, "{stats}");
    let dir = tempfile::tempdir().unwrap();
    let copy = dir.path().join("root.axfr");
    std::fs::write(&copy, recs.join("\n") + "\n").unwrap();
    let v = Command::new("ldns-verify-zone")
        .args(["-Z", "-t", "20260217000000"])
        .arg(&copy)
        .output()
        .expect("run ldns-verify-zone");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&v.stdout),
        String::from_utf8_lossy(&v.stderr)
    );
    assert!(v.status.success(), "ldns-verify-zone failed: {text}");
    assert!(text.contains("verified"), "{text}");
}

/// A dnsd primary of the test zone and a dnsd secondary of it, the first transfer done
/// (the directory holds both files).
fn dnsd_primary_and_secondary() -> (tempfile::TempDir, Dnsd, Dnsd) {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("primary.zone");
    std::fs::write(&file, zone_text(1, false, "3600 600 86400")).unwrap();
    let mut pz = Zone::new(ORIGIN, &file);
    pz.options = vec!["allow_transfer = [\"127.0.0.0/8\"]".into()];
    let primary = Dnsd::builder().zone(pz).start();
    let mut sz = Zone::new(ORIGIN, dir.path().join("secondary.zone"));
    sz.options = vec![format!("primaries = [\"{}\"]", primary.addr())];
    let secondary = Dnsd::builder().zone(sz).start();
    (dir, primary, secondary)
}

/// A transfer whose zone file cannot be written (a full disk, a read-only directory) is not
/// served: served, it was lost at a restart (the serial going back for the secondaries that
/// took it, a catalog's members gone), and a later refresh, finding it current, only touched
/// the old file. Once the file can be written, the retry brings it.
#[test]
fn a_transfer_that_cannot_be_kept_on_disk_is_not_served() {
    let (dir, primary, secondary) = dnsd_primary_and_secondary();
    assert_eq!(serial(secondary.addr()), Some(1));
    // The write's temporary file cannot be made: a directory stands in its place.
    let blocker = dir.path().join("secondary.zone.tmp");
    std::fs::create_dir(&blocker).unwrap();
    std::fs::write(
        dir.path().join("primary.zone"),
        zone_text(2, true, "3600 600 86400"),
    )
    .unwrap();
    let (ok, out) = primary.ctl(&["reload"]);
    assert!(ok, "{out}");
    assert_eq!(serial(primary.addr()), Some(2));
    let (ok, out) = secondary.ctl(&["zone-refresh", ORIGIN]);
    assert!(!ok && out.contains("not served"), "{out}");
    assert_eq!(
        serial(secondary.addr()),
        Some(1),
        "served what is not on disk"
    );
    let text = std::fs::read_to_string(dir.path().join("secondary.zone")).unwrap();
    assert!(text.contains("serial 1"), "{text}");
    // The disk is back: the next refresh brings serial 2, to the file too.
    std::fs::remove_dir(&blocker).unwrap();
    let (ok, out) = secondary.ctl(&["zone-refresh", ORIGIN]);
    assert!(ok, "{out}");
    assert_eq!(serial(secondary.addr()), Some(2));
    let text = std::fs::read_to_string(dir.path().join("secondary.zone")).unwrap();
    assert!(text.contains("serial 2"), "{text}");
}

/// A NOTIFY for [`ORIGIN`]'s SOA.
fn notify_of_origin() -> Vec<u8> {
    build_query(
        9,
        ORIGIN,
        T::SOA,
        &QueryOpts {
            opcode: 4,
            ..QueryOpts::udp()
        },
    )
}

#[test]
fn a_notify_flood_from_a_primarys_address_checks_the_primary_about_once_a_second() {
    // A UDP source can be forged: a flood of NOTIFYs "from" the primary must not turn into a
    // flood of refreshes against it.
    let (_dir, primary, secondary) = dnsd_primary_and_secondary();
    assert_eq!(secondary.stat("transfer.in.axfr"), 1, "{}", secondary.log());
    let before = secondary.stat("transfer.in.current");
    let sock = std::net::UdpSocket::bind((primary.addr().ip(), 0)).unwrap();
    let notify = notify_of_origin();
    // A sustained flood: one a millisecond for about two seconds.
    let t0 = Instant::now();
    for _ in 0..2_000 {
        sock.send_to(&notify, secondary.addr()).unwrap();
        std::thread::sleep(Duration::from_millis(1));
    }
    wait_for("the NOTIFYs to be read", Duration::from_secs(5), || {
        secondary.stat("notify.in.accepted") >= 1_000
    });
    std::thread::sleep(Duration::from_millis(1500));
    let secs = t0.elapsed().as_secs_f64();
    let checks = secondary.stat("transfer.in.current") - before;
    println!("{checks} checks of the primary in {secs:.1} s for 2,000 NOTIFYs");
    assert!(checks >= 1, "a NOTIFY is still obeyed");
    assert!(
        (checks as f64) <= secs + 2.0,
        "{checks} checks in {secs:.1} s: about one a second at most"
    );
    // Every NOTIFY taken is answered, as Knot answers them (a primary notifying hundreds of
    // catalog members at once saw replies dropped and truncated, and sent them again): a
    // reply no larger than its NOTIFY, only ever to a primary's address.
    let limited = secondary.stat("rrl.limited");
    assert_eq!(limited, 0, "NOTIFY replies limited");
}

/// After failed refreshes a NOTIFY waits out the backoff (up to a minute), and an operator's
/// `ctl zone-refresh` meanwhile is done at once: it waited behind the NOTIFY's gap, and its
/// answer timed out ("refresh still running").
#[test]
fn an_operators_refresh_is_not_held_behind_a_notifys_backoff() {
    let (_dir, primary, secondary) = dnsd_primary_and_secondary();
    let from = primary.addr().ip();
    drop(primary);
    // Two failed refreshes: a NOTIFY now waits 20 s after the last.
    for _ in 0..2 {
        let (ok, out) = secondary.ctl(&["zone-refresh", ORIGIN]);
        assert!(!ok || out.contains("FAILED"), "{out}");
    }
    let sock = std::net::UdpSocket::bind((from, 0)).unwrap();
    let notify = notify_of_origin();
    sock.send_to(&notify, secondary.addr()).unwrap();
    wait_for("the NOTIFY taken", Duration::from_secs(5), || {
        secondary.stat("notify.in.accepted") >= 1
    });
    std::thread::sleep(Duration::from_millis(300));
    let t0 = Instant::now();
    let (_, out) = secondary.ctl(&["zone-refresh", ORIGIN]);
    let took = t0.elapsed();
    assert!(out.contains("FAILED"), "the refresh was done: {out}");
    assert!(
        took < Duration::from_secs(10),
        "the operator's refresh waited {took:?} behind the NOTIFY's 20 s gap"
    );
}

/// A NOTIFY from an address that may not notify is refused whatever it asks (a QTYPE other
/// than SOA too, as Knot and NSD refuse it); from a primary, such a NOTIFY is FORMERR.
#[test]
fn a_notify_is_refused_to_a_non_primary_before_its_question_is_judged() {
    let (_dir, primary, secondary) = dnsd_primary_and_secondary();
    let ask = |from: std::net::IpAddr, qtype: u16| {
        let sock = std::net::UdpSocket::bind((from, 0)).unwrap();
        sock.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
        let n = build_query(
            7,
            ORIGIN,
            qtype,
            &QueryOpts {
                opcode: 4,
                ..QueryOpts::udp()
            },
        );
        sock.send_to(&n, secondary.addr()).unwrap();
        let mut buf = [0u8; 512];
        let (len, _) = sock.recv_from(&mut buf).expect("a reply");
        assert!(len >= 12);
        u16::from(buf[3] & 0xF)
    };
    let stranger = std::net::IpAddr::V4(net::test_ip());
    assert_eq!(
        ask(stranger, T::A),
        rcode::REFUSED,
        "QTYPE A from a stranger"
    );
    assert_eq!(ask(stranger, T::SOA), rcode::REFUSED, "SOA from a stranger");
    assert_eq!(
        ask(primary.addr().ip(), T::A),
        rcode::FORMERR,
        "QTYPE A from the primary"
    );
}

/// A secondary serves what its primary serves when the RDATA is sound in structure but
/// faulty in meaning (an HTTPS record whose no-default-alpn lacks alpn, a DS digest of the
/// wrong length for its type), as Knot and NSD secondaries do: the transfer is taken and its
/// copy read back at the next start (with a warning), where a primary's own file is refused.
#[test]
fn a_secondary_takes_what_its_primary_serves_though_a_primary_would_refuse_it() {
    if skip_without(&["knotd", "knotc"]) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let primary_file = dir.path().join("primary.zone");
    let mut text = zone_text(1, false, "3600 600 86400");
    text.push_str("svc HTTPS 1 . no-default-alpn\nsub DS 1 13 2 0123\n");
    std::fs::write(&primary_file, &text).unwrap();
    let copy = dir.path().join("secondary").join("example.com.zone");
    let at = fresh_addr();
    let knot = knot_primary(&primary_file, at, ("k512", "hmac-sha512", SECRET512));
    let dnsd = dnsd_secondary(at, &copy, knot.addr());
    assert_eq!(dnsd.stat("transfer.in.axfr"), 1, "{}", dnsd.log());
    for (name, qtype) in [("svc.example.com.", 65), ("sub.example.com.", T::DS)] {
        let m = client::query(dnsd.addr(), name, qtype, &QueryOpts::udp());
        assert_eq!(m.answers.len(), 1, "{name}: {m}");
    }
    assert_same_answers("dnsd", dnsd.addr(), "knot", knot.addr());
    // Restarted with the primary gone: its copy is read back and served.
    drop(dnsd);
    drop(knot);
    let again = dnsd_secondary(fresh_addr(), &copy, fresh_addr());
    let m = client::query(again.addr(), "svc.example.com.", 65, &QueryOpts::udp());
    assert_eq!(m.answers.len(), 1, "{m}");
    assert!(again.log().contains("no-default-alpn"), "warned of");
    // A primary's own file with the same record is refused, naming it.
    let own = dir.path().join("own.zone");
    std::fs::write(&own, &text).unwrap();
    let out = Command::new(palisade_tests::bin("dnsd"))
        .args(["check-zone", "--origin", ORIGIN])
        .arg(&own)
        .output()
        .unwrap();
    let said =
        String::from_utf8_lossy(&out.stderr).into_owned() + &String::from_utf8_lossy(&out.stdout);
    assert!(
        !out.status.success() && said.contains("no-default-alpn"),
        "{said}"
    );
}

/// `[transfer] source`: SOA queries and transfers go out from the address given (a
/// primary's address-based ACL sees the service address); without it, from whatever the
/// routing table picks (on loopback 127.0.0.1), which such an ACL refuses.
#[test]
fn transfers_go_out_from_the_source_address_given() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("primary.zone");
    std::fs::write(&file, zone_text(1, false, "3600 600 86400")).unwrap();
    let mut pz = Zone::new(ORIGIN, &file);
    pz.options = vec!["allow_transfer = [\"127.0.0.77/32\"]".into()];
    let primary = Dnsd::builder().zone(pz).start();
    let secondary = |name: &str, extra: &str| {
        let mut sz = Zone::new(ORIGIN, dir.path().join(name));
        sz.options = vec![format!("primaries = [\"{}\"]", primary.addr())];
        // Ready once a zone of its own answers (the secondary may never get its data).
        Dnsd::builder()
            .zone(Zone::data("example.net."))
            .zone(sz)
            .raw(extra)
            .ready_on_first_zone()
            .start()
    };
    let from_77 = secondary("s77.zone", "[transfer]\nsource = [\"127.0.0.77\"]\n");
    wait_serial(
        "a transfer from 127.0.0.77",
        from_77.addr(),
        1,
        Duration::from_secs(20),
    );
    let plain = secondary("plain.zone", "");
    std::thread::sleep(Duration::from_secs(2));
    assert_eq!(serial(plain.addr()), None, "refused by the primary's ACL");
    // An address this host does not have now (a VIP held by another node) is said, by key,
    // not refused.
    let out = Command::new(palisade_tests::bin("dnsd"))
        .args(["check-config", "--no-zones", "-c"])
        .arg(from_77.config_path())
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let bad = std::fs::read_to_string(from_77.config_path())
        .unwrap()
        .replace("127.0.0.77", "192.0.2.77");
    let bad_path = dir.path().join("bad.toml");
    std::fs::write(&bad_path, bad).unwrap();
    let out = Command::new(palisade_tests::bin("dnsd"))
        .args(["check-config", "--no-zones", "-c"])
        .arg(&bad_path)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    let said = format!("{err}{}", String::from_utf8_lossy(&out.stdout));
    assert!(
        out.status.success() && said.contains("transfer.source 192.0.2.77"),
        "{said}"
    );
}

/// Primaries that never answer hold no `max_in` slot while their SOA queries wait: with one
/// slot and four zones of such primaries, a zone whose primary answers is transferred at
/// once, never waiting for a slot (it waited out their queries' timeouts).
#[test]
fn silent_primaries_hold_no_transfer_slot_while_their_soa_queries_wait() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("primary.zone");
    std::fs::write(&file, zone_text(1, false, "3600 600 86400")).unwrap();
    let mut pz = Zone::new(ORIGIN, &file);
    pz.options = vec!["allow_transfer = [\"127.0.0.0/8\"]".into()];
    let primary = Dnsd::builder().zone(pz).start();
    let (silent, mut zones) = silent_primary_zones(dir.path(), 4);
    let mut sz = Zone::new(ORIGIN, dir.path().join("secondary.zone"));
    sz.options = vec![format!("primaries = [\"{}\"]", primary.addr())];
    zones.push(sz);
    let secondary = Dnsd::builder()
        .zones(&zones)
        .raw("[transfer]\nmax_in = 1\nmessage_timeout_secs = 20\n")
        .ready_on_first_zone()
        .start();
    // Well within the silent primaries' timeout.
    wait_serial(
        "the answering primary's zone",
        secondary.addr(),
        1,
        Duration::from_secs(10),
    );
    assert_eq!(
        secondary.stat("transfer.in.waiting"),
        0,
        "no refresh waited for a slot"
    );
    drop(silent);
}

/// A primary that takes packets and connections and never answers (held while the value
/// lives), and `n` secondary zones of it beside a zone of data (the first served).
fn silent_primary_zones(
    dir: &Path,
    n: usize,
) -> ((std::net::UdpSocket, std::net::TcpListener), Vec<Zone>) {
    let ip = net::test_ip();
    let port = net::free_port(ip);
    let silent_udp = std::net::UdpSocket::bind((ip, port)).unwrap();
    let silent_tcp = std::net::TcpListener::bind((ip, port)).unwrap();
    let mut zones = vec![Zone::data("example.net.")];
    for i in 0..n {
        let name = format!("s{i}.test.");
        let mut z = Zone::new(&name, dir.join(format!("{name}zone")));
        z.options = vec![format!("primaries = [\"{ip}:{port}\"]")];
        zones.push(z);
    }
    ((silent_udp, silent_tcp), zones)
}

/// SOA checks past their slots (four times `max_in`, at least 16) wait and are counted: twenty
/// zones of a primary that never answers leave four checks waiting, shown by
/// `transfer.in.check_waiting`.
#[test]
fn soa_checks_past_their_slots_wait_and_are_counted() {
    let dir = tempfile::tempdir().unwrap();
    let (silent, zones) = silent_primary_zones(dir.path(), 20);
    let secondary = Dnsd::builder()
        .zones(&zones)
        .raw("[transfer]\nmax_in = 1\nmessage_timeout_secs = 20\n")
        .ready_on_first_zone()
        .start();
    wait_for("four SOA checks waiting", Duration::from_secs(10), || {
        secondary.stat("transfer.in.check_waiting") >= 4
    });
    assert_eq!(secondary.stat("transfer.in.waiting"), 0);
    drop(silent);
}

/// A primary behind a balancer: its SOA (from one backend) says 200, its AXFR (from
/// another) brings 150. A copy newer than ours is taken, with a warning (Knot takes it); it
/// was refused at each retry, the zone never served.
#[test]
fn a_transfer_older_than_the_announced_serial_but_newer_than_ours_is_taken() {
    use std::io::Write as _;
    let at = fresh_addr();
    let udp = std::net::UdpSocket::bind(at).unwrap();
    let tcp = std::net::TcpListener::bind(at).unwrap();
    // A record of the zone: owner (wire), type, rdata.
    let rr = |owner: &[u8], ty: u16, rd: &[u8]| {
        let mut v = owner.to_vec();
        v.extend_from_slice(&ty.to_be_bytes());
        v.extend_from_slice(&1u16.to_be_bytes());
        v.extend_from_slice(&300u32.to_be_bytes());
        v.extend_from_slice(&(rd.len() as u16).to_be_bytes());
        v.extend_from_slice(rd);
        v
    };
    let apex = palisade_tests::wire::name_to_wire(ORIGIN);
    let ns1 = palisade_tests::wire::name_to_wire("ns1.example.com.");
    let soa = move |serial: u32| {
        let mut rd = ns1.clone();
        rd.extend_from_slice(&palisade_tests::wire::name_to_wire(
            "hostmaster.example.com.",
        ));
        for v in [serial, 3600, 600, 86400, 300] {
            rd.extend_from_slice(&v.to_be_bytes());
        }
        rr(&apex, T::SOA, &rd)
    };
    // The reply to `q` with `records` as its answer.
    let reply = move |q: &[u8], records: &[Vec<u8>]| {
        let qend = 12 + palisade_tests::wire::name_to_wire(ORIGIN).len() + 4;
        let mut m = q[..qend.min(q.len())].to_vec();
        m[2] = 0x84;
        m[3] = 0;
        m[6..8].copy_from_slice(&(records.len() as u16).to_be_bytes());
        m[8..12].fill(0);
        for r in records {
            m.extend_from_slice(r);
        }
        m
    };
    let qtype = |q: &[u8]| {
        let qend = 12 + palisade_tests::wire::name_to_wire(ORIGIN).len();
        q.get(qend..qend + 2)
            .map_or(0, |t| u16::from_be_bytes([t[0], t[1]]))
    };
    let (soa_u, reply_u) = (soa.clone(), reply);
    std::thread::spawn(move || {
        let mut b = [0u8; 512];
        for _ in 0..200 {
            let Ok((n, from)) = udp.recv_from(&mut b) else {
                return;
            };
            let _ = udp.send_to(&reply_u(&b[..n], &[soa_u(200)]), from);
        }
    });
    std::thread::spawn(move || {
        let ns = palisade_tests::wire::name_to_wire("ns1.example.com.");
        let apex = palisade_tests::wire::name_to_wire(ORIGIN);
        for conn in tcp.incoming().take(50) {
            let Ok(mut c) = conn else { return };
            let Ok(Some(q)) = client::tcp_read_msg(&mut c) else {
                continue;
            };
            let records = if qtype(&q) == T::SOA {
                vec![soa(200)]
            } else {
                vec![
                    soa(150),
                    rr(&apex, T::NS, &ns),
                    rr(&ns, T::A, &[192, 0, 2, 1]),
                    soa(150),
                ]
            };
            let _ = c.write_all(&client::frame(&reply(&q, &records)));
        }
    });
    let dir = tempfile::tempdir().unwrap();
    let mut z = Zone::new(ORIGIN, dir.path().join("copy.zone"));
    z.options = vec![format!("primaries = [\"{at}\"]")];
    let secondary = Dnsd::builder().zone(z).start();
    wait_serial(
        "the copy the transfer brought",
        secondary.addr(),
        150,
        Duration::from_secs(15),
    );
    let log = secondary.log();
    assert!(
        log.contains("older than the 200 its SOA announced"),
        "{log}"
    );
}
