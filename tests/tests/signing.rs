//! Zones dnsd signs itself (`dnssec_policy`): `delv` and DNSViz validate every kind of
//! answer (positive, NXDOMAIN, NODATA, wildcard, referral, DNAME, CNAME) under NSEC, NSEC3
//! and NSEC3 opt-out with each algorithm; a changed zone is signed again keeping the
//! signatures of what did not change, with a new serial; Knot as a secondary of the signing
//! dnsd serves answers that validate; key rollovers on a shortened timetable never break
//! validation; pre-signed zones whose signatures near expiry are reported.

use std::net::{IpAddr, SocketAddr, UdpSocket};
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use palisade_tests::servers::{Dnsd, Knot, Zone};
use palisade_tests::wait::wait_for;
use palisade_tests::wire::{QueryOpts, RawMsg, build_query};

const ZONE: &str = "\
$TTL ZONE_TTL
@       SOA ns1 hostmaster 2026010101 7200 3600 1209600 300
        NS ns1
        NS ns2
ns1     A NS_ADDR
ns2     A NS_ADDR
www     A 192.0.2.10
        AAAA 2001:db8::10
mail    MX 10 www
a.b.c   TXT \"deep\"
*.wild  A 192.0.2.20
x.wild  TXT \"exists\"
secure  NS ns.secure
        DS 12345 13 2 49FD46E6C4B45C55D4AC69CBD3CD34AC1AFE51DE9BA6E1D9D5F7DB6E4C3DB9C9
ns.secure A 192.0.2.30
insecure NS ns.insecure
ns.insecure A 192.0.2.31
d.e.insecure2 NS ns.example.net.
cn      CNAME www
old     DNAME example.com.
";

/// What delv must say of each answer kind (name, type, verdict).
fn expectations(opt_out: bool) -> Vec<(&'static str, &'static str, &'static str)> {
    let neg = "; negative response, fully validated";
    vec![
        ("www.example.com", "A", "; fully validated"),
        ("www.example.com", "AAAA", "; fully validated"),
        ("example.com", "DNSKEY", "; fully validated"),
        ("nothere.example.com", "A", neg),
        // NSEC itself, at a name that does not exist and at an empty non-terminal: with
        // compact denial too (whose NSEC would list the type it denies).
        ("nothere.example.com", "NSEC", neg),
        ("c.example.com", "NSEC", neg),
        ("zz.nothere.example.com", "TXT", neg),
        ("www.example.com", "TXT", neg),
        ("c.example.com", "A", neg),
        ("b.c.example.com", "A", neg),
        (
            "a.wild.example.com",
            "A",
            if opt_out {
                // The next closer name is covered by an opt-out NSEC3: insecure (RFC 5155 §8.8).
                "; unsigned answer"
            } else {
                "; fully validated"
            },
        ),
        ("a.wild.example.com", "MX", neg),
        ("x.wild.example.com", "TXT", "; fully validated"),
        ("secure.example.com", "DS", "; fully validated"),
        ("insecure.example.com", "DS", neg),
        ("www.old.example.com", "A", "; fully validated"),
        ("cn.example.com", "A", "; fully validated"),
    ]
}

fn delv(addr: SocketAddr, anchor: &Path, name: &str, qtype: &str) -> String {
    palisade_tests::delv::delv(addr, None, anchor, "example.com", name, qtype)
}

use palisade_tests::delv::dig;

/// The zone's key-signing DNSKEYs as (flags, protocol, algorithm, base64) tuples.
fn ksks(addr: SocketAddr) -> Vec<[String; 4]> {
    palisade_tests::delv::served_ksks(addr, "example.com")
}

/// A delv trust anchor for the zone's KSKs; the first KSK as a DNSKEY line (DNSViz's).
fn anchor_from_dnskeys(addr: SocketAddr, file: &Path) -> String {
    palisade_tests::delv::anchor_from_served(addr, "example.com", file)
}

fn need(programs: &[&str]) -> bool {
    for p in programs {
        if !palisade_tests::have_program(p) {
            palisade_tests::skipped(&format!("{p} not installed"));
            return false;
        }
    }
    true
}

/// A dnsd serving ZONE (NS addresses its own, TTLs `ttl`) for example.com. signed under
/// `policy` (TOML lines), its key directory in `dir`.
fn start(dir: &Path, ttl: u32, policy: &str, extra_zone: &[&str]) -> (Dnsd, std::path::PathBuf) {
    start_with(dir, Some(ttl), policy, extra_zone, "", "")
}

/// [`start`] with lines for `[dnssec]` and for the defences; `ttl` None serves the zone file
/// and keys already in `dir` (a restart).
fn start_with(
    dir: &Path,
    ttl: Option<u32>,
    policy: &str,
    extra_zone: &[&str],
    dnssec: &str,
    defence: &str,
) -> (Dnsd, std::path::PathBuf) {
    let ip = palisade_tests::net::test_ip();
    let at = SocketAddr::from((ip, palisade_tests::net::free_port(ip)));
    let file = dir.join("example.com.zone");
    if let Some(ttl) = ttl {
        std::fs::write(
            &file,
            ZONE.replace("NS_ADDR", &ip.to_string())
                .replace("ZONE_TTL", &ttl.to_string()),
        )
        .unwrap();
    }
    let mut z = Zone::new("example.com.", &file);
    z.options.push("dnssec_policy = \"p\"".into());
    z.options.extend(extra_zone.iter().map(|s| s.to_string()));
    let dnsd = Dnsd::builder()
        .at(at)
        .zone(z)
        .raw(&format!(
            "[defence.rrl]\nenabled = false\n\n{defence}\n\n[dnssec]\nkey_dir = \"{}\"\n{dnssec}\n\n\
             [[dnssec_policy]]\nname = \"p\"\n{policy}\n",
            dir.join("keys").display()
        ))
        .start();
    (dnsd, file)
}

fn serial(addr: SocketAddr) -> u32 {
    dig(addr, "+short example.com SOA")
        .split_whitespace()
        .nth(2)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0)
}

#[test]
fn zones_dnsd_signs_validate_and_are_signed_again_on_change() {
    if !need(&["delv", "dig"]) {
        return;
    }
    let variants: &[(&str, &str, bool)] = &[
        ("NSEC, ECDSA P-256, CSK", "", false),
        (
            "NSEC3, Ed25519, KSK+ZSK",
            "nsec3 = true\nalgorithm = \"ed25519\"\nkeys = \"ksk-zsk\"",
            false,
        ),
        (
            "NSEC3 opt-out, RSA/SHA-256",
            "nsec3 = true\nnsec3_opt_out = true\nalgorithm = \"rsasha256\"",
            true,
        ),
        // NXDOMAIN and NODATA denied by one NSEC signed online (delv calls a compact
        // NXDOMAIN a negative response too: it is a NODATA).
        (
            "NSEC, compact denial (RFC 9824)",
            "compact_denial = true",
            false,
        ),
    ];
    let mut failures = Vec::new();
    for &(what, policy, opt_out) in variants {
        let dir = tempfile::tempdir().unwrap();
        let (dnsd, file) = start(dir.path(), 3600, policy, &[]);
        let anchor = dir.path().join("anchor.conf");
        let dnskey = anchor_from_dnskeys(dnsd.addr(), &anchor);
        let check = |failures: &mut Vec<String>, at: SocketAddr, step: &str| {
            for (name, qtype, want) in expectations(opt_out) {
                let text = delv(at, &anchor, name, qtype);
                if !text.contains(want) {
                    failures.push(format!(
                        "[{what}, {step}] delv {name} {qtype}: expected {want:?}:\n{text}"
                    ));
                }
            }
        };
        check(&mut failures, dnsd.addr(), "first signing");
        // The key files are the service's alone, in a directory of the zone's own.
        use std::os::unix::fs::PermissionsExt as _;
        let zdir = dir.path().join("keys").join("example.com");
        let mode = std::fs::metadata(&zdir).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o700, "{}", zdir.display());
        let mut keys = 0;
        for e in std::fs::read_dir(&zdir).unwrap() {
            let p = e.unwrap().path();
            if p.extension().is_some_and(|x| x == "toml") {
                let mode = std::fs::metadata(&p).unwrap().permissions().mode() & 0o777;
                assert_eq!(mode, 0o600, "{}", p.display());
                keys += 1;
            }
        }
        assert!(keys >= 1, "no key file in {}", zdir.display());
        if palisade_tests::dnsviz::available() {
            let work = dir.path().join("dnsviz");
            std::fs::create_dir_all(&work).unwrap();
            let v = palisade_tests::dnsviz::check(
                "example.com.",
                &[
                    ("ns1.example.com", dnsd.addr()),
                    ("ns2.example.com", dnsd.addr()),
                ],
                &[
                    "nothere.example.com.",
                    "www.example.com.",
                    "a.wild.example.com.",
                    "c.example.com.",
                    "zz.e.insecure2.example.com.",
                    "www.old.example.com.",
                ],
                &dnskey,
                &work,
            );
            for w in &v.warnings {
                eprintln!("[{what}] dnsviz: {w}");
            }
            failures.extend(
                v.errors
                    .into_iter()
                    .map(|e| format!("[{what}] dnsviz: {e}")),
            );
        } else {
            palisade_tests::skipped("dnsviz not installed");
        }
        // A change: one RRset edited, one name added. Signed again with a newer serial,
        // keeping the signatures of what did not change.
        let before = serial(dnsd.addr());
        let made_before = dnsd.stat("dnssec.signatures_made");
        let text = std::fs::read_to_string(&file).unwrap();
        std::fs::write(
            &file,
            text.replace("www     A 192.0.2.10", "www     A 192.0.2.11") + "new TXT \"added\"\n",
        )
        .unwrap();
        let (ok, out) = dnsd.ctl(&["reload", "example.com."]);
        assert!(ok, "{out}");
        let after = serial(dnsd.addr());
        assert!(
            after.wrapping_sub(before) as i32 > 0,
            "[{what}] serial {before} -> {after}: the file's serial did not move, the served one must"
        );
        let made = dnsd.stat("dnssec.signatures_made") - made_before;
        let kept = dnsd.stat("dnssec.signatures_kept");
        // SOA, the edited A, the new TXT, and the chain links around the new name.
        assert!(
            made > 0 && made <= 12 && kept >= 15,
            "[{what}] a small change re-signed {made} RRsets and kept {kept}"
        );
        let text = delv(dnsd.addr(), &anchor, "new.example.com", "TXT");
        if !text.contains("; fully validated") || !text.contains("added") {
            failures.push(format!(
                "[{what}] the added name does not validate:\n{text}"
            ));
        }
        let text = delv(dnsd.addr(), &anchor, "www.example.com", "A");
        if !text.contains("192.0.2.11") || !text.contains("; fully validated") {
            failures.push(format!(
                "[{what}] the edited RRset does not validate:\n{text}"
            ));
        }
        check(&mut failures, dnsd.addr(), "after the change");
        // Signing again on demand keeps everything but the SOA's signature.
        let (ok, out) = dnsd.ctl(&["zone-sign", "example.com."]);
        assert!(ok && out.contains("made"), "{out}");
        let (ok, keys) = dnsd.ctl(&["zone-keys", "example.com."]);
        assert!(ok && keys.contains("Active"), "{keys}");
        let (ok, zones) = dnsd.ctl(&["zones"]);
        assert!(ok && zones.contains("signed by dnsd (policy p)"), "{zones}");
        // A restart serves the version served before, serial and signatures, when its
        // signing would change nothing but the serial (the copy written of the last signed
        // version): every restart gave a new serial, and the secondaries a transfer.
        let s = serial(dnsd.addr());
        let copy = dir
            .path()
            .join("keys")
            .join("example.com")
            .join("signed.zone");
        let t = Instant::now();
        while !std::fs::read_to_string(&copy).is_ok_and(|c| c.contains(&format!("serial {s},")))
            && t.elapsed() < Duration::from_secs(10)
        {
            std::thread::sleep(Duration::from_millis(50));
        }
        drop(dnsd);
        let (dnsd, _) = start_with(dir.path(), None, policy, &[], "", "");
        let s2 = serial(dnsd.addr());
        assert_eq!(s2, s, "[{what}] serial {s} -> {s2} across a restart");
        let (made, kept) = (
            dnsd.stat("dnssec.signatures_made"),
            dnsd.stat("dnssec.signatures_kept"),
        );
        assert!(
            made == 0 && kept >= 15,
            "[{what}] after a restart {made} signatures made, {kept} kept"
        );
        // The same keys: the old trust anchor still validates.
        check(&mut failures, dnsd.addr(), "after a restart");
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn knot_as_secondary_of_a_signing_dnsd_serves_answers_that_validate_before_and_after_an_ixfr() {
    if !need(&["delv", "dig"]) {
        return;
    }
    if !Knot::available() {
        palisade_tests::skipped("knotd not installed");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let (dnsd, _) = start(
        dir.path(),
        3600,
        "nsec3 = true",
        &["allow_transfer = [\"127.0.0.0/8\"]"],
    );
    let anchor = dir.path().join("anchor.conf");
    anchor_from_dnskeys(dnsd.addr(), &anchor);
    let kd = dir.path().join("knot");
    std::fs::create_dir_all(&kd).unwrap();
    let d = dnsd.addr();
    let knot = Knot::start_raw(
        &[Zone::new("example.com.", kd.join("example.com.zone"))],
        move |_, addr| {
            format!(
                "{}remote:\n  - id: dnsd\n    address: {}@{}\n\n\
             template:\n  - id: default\n    storage: \"{kd}\"\n    zonefile-sync: -1\n    \
             journal-content: changes\n    semantic-checks: off\n\n\
             zone:\n  - domain: example.com.\n    master: dnsd\n",
                Knot::server_section(&kd, addr),
                d.ip(),
                d.port(),
                kd = kd.display()
            )
        },
    );
    assert_eq!(
        serial(knot.addr()),
        serial(dnsd.addr()),
        "Knot took the signed zone"
    );
    let mut failures = Vec::new();
    for (name, qtype, want) in expectations(false) {
        let text = delv(knot.addr(), &anchor, name, qtype);
        if !text.contains(want) {
            failures.push(format!(
                "knot: delv {name} {qtype}: expected {want:?}:\n{text}"
            ));
        }
    }
    // A change, signed again at dnsd, reaches Knot by IXFR and validates there.
    let file = dir.path().join("example.com.zone");
    let text = std::fs::read_to_string(&file).unwrap();
    std::fs::write(&file, text + "later TXT \"ixfr\"\n").unwrap();
    let (ok, out) = dnsd.ctl(&["reload", "example.com."]);
    assert!(ok, "{out}");
    let want = serial(dnsd.addr());
    let t = Instant::now();
    while serial(knot.addr()) != want && t.elapsed() < Duration::from_secs(15) {
        let _ = knot.knotc(&["zone-refresh", "example.com."]);
        std::thread::sleep(Duration::from_millis(300));
    }
    assert_eq!(
        serial(knot.addr()),
        want,
        "Knot took the change:\n{}",
        knot.log()
    );
    assert!(
        knot.log().contains("IXFR"),
        "Knot took the change by IXFR:\n{}",
        knot.log()
    );
    let text = delv(knot.addr(), &anchor, "later.example.com", "TXT");
    if !text.contains("; fully validated") || !text.contains("ixfr") {
        failures.push(format!("knot, after the IXFR: delv later TXT:\n{text}"));
    }
    let text = delv(knot.addr(), &anchor, "nothere.example.com", "A");
    if !text.contains("; negative response, fully validated") {
        failures.push(format!("knot, after the IXFR: delv nothere A:\n{text}"));
    }
    assert!(
        failures.is_empty(),
        "{}\nknot log:\n{}",
        failures.join("\n"),
        knot.log()
    );
}

/// The CDS records served, as delv `static-ds` anchors (the parent's DS set, as a parent
/// that follows CDS would hold it).
fn anchor_from_cds(addr: SocketAddr) -> Option<String> {
    anchor_from_set(addr, "CDS")
}

/// example.com's `rtype` (DS or CDS) records served at `addr`, as delv `static-ds` anchors.
fn anchor_from_set(addr: SocketAddr, rtype: &str) -> Option<String> {
    let cds: Vec<String> = dig(addr, &format!("+short example.com {rtype}"))
        .lines()
        .filter_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            (f.len() >= 4).then(|| {
                format!(
                    "  example.com. static-ds {} {} {} \"{}\";\n",
                    f[0],
                    f[1],
                    f[2],
                    f[3..].join("")
                )
            })
        })
        .collect();
    (!cds.is_empty()).then(|| format!("trust-anchors {{\n{}}};\n", cds.concat()))
}

/// Asks `delv` (anchored by `anchor`) each (name, type, what its answer must say) of
/// `dnsd`'s zone; each that fails goes to `failures` with the time since `start` and the
/// zone's keys.
fn validate(
    dnsd: &Dnsd,
    anchor: &Path,
    checks: &[(&str, &str, &str)],
    start: Instant,
    failures: &mut Vec<String>,
) {
    for &(name, qtype, want) in checks {
        let text = delv(dnsd.addr(), anchor, name, qtype);
        if !text.contains(want) {
            let (_, keys) = dnsd.ctl(&["zone-keys", "example.com."]);
            failures.push(format!(
                "after {:?}: delv {name} {qtype}: expected {want:?}:\n{text}\nkeys:\n{keys}",
                start.elapsed()
            ));
        }
    }
}

#[test]
fn key_rollovers_on_a_short_timetable_never_break_validation() {
    if !need(&["delv", "dig"]) {
        return;
    }
    // TTLs of 1-2 s and lifetimes of seconds: a ZSK pre-publish rollover and a KSK
    // double-signature rollover each run to the end within the test.
    let dir = tempfile::tempdir().unwrap();
    let (dnsd, _) = start(
        dir.path(),
        2,
        "keys = \"ksk-zsk\"\nzsk_lifetime = \"6\"\nksk_lifetime = \"12\"\ndnskey_ttl = \"1\"\n\
         propagation_delay = \"1\"\nparent_ds_ttl = \"1\"\nksk_submission = \"timer\"",
        &[],
    );
    let a = dnsd.addr();
    let anchor = dir.path().join("anchor.conf");
    anchor_from_dnskeys(a, &anchor);
    let first: Vec<[String; 4]> = ksks(a);
    let first_dnskeys = dig(a, "+short example.com DNSKEY");
    let mut failures = Vec::new();
    let mut steps = 0;
    let start = Instant::now();
    let mut seen_keys = std::collections::BTreeSet::new();
    while start.elapsed() < Duration::from_secs(35) {
        // The parent takes whatever the CDS says (from when it is first published).
        if let Some(a2) = anchor_from_cds(a) {
            std::fs::write(&anchor, a2).unwrap();
        }
        validate(
            &dnsd,
            &anchor,
            &[
                ("www.example.com", "A", "; fully validated"),
                (
                    "nothere.example.com",
                    "A",
                    "; negative response, fully validated",
                ),
                ("example.com", "DNSKEY", "; fully validated"),
            ],
            start,
            &mut failures,
        );
        for l in dig(a, "+short example.com DNSKEY").lines() {
            seen_keys.insert(l.to_string());
        }
        steps += 1;
        std::thread::sleep(Duration::from_millis(700));
    }
    assert!(
        failures.is_empty(),
        "{}\n{}",
        failures.join("\n"),
        dnsd.log()
    );
    // Both rollovers ran to their end: new keys in, the first ones gone.
    let now_keys = dig(a, "+short example.com DNSKEY");
    for k in first_dnskeys.lines() {
        assert!(
            !now_keys.contains(k),
            "a first key is still published after {steps} steps:\n{now_keys}\n{}",
            dnsd.log()
        );
    }
    assert!(ksks(a) != first, "the KSK did not roll");
    assert!(seen_keys.len() >= 4, "keys seen: {seen_keys:?}");
}

/// A parent slower than every timer: the KSK rollover's old key signs on until the parent's
/// server holds the new key's DS (asked every second), so a validator anchored at the
/// parent's DS set never sees the zone bogus; the rollover then ends. (Retiring on a timer,
/// the old key left while the parent still had only its DS: every answer bogus.)
#[test]
fn a_ksk_rollover_waits_for_the_parents_ds_and_never_leaves_the_zone_bogus() {
    if !need(&["delv", "dig"]) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    // The parent: com. delegating example.com., its DS set written by the test.
    let com = dir.path().join("com.zone");
    let com_text = |ds: &str| {
        format!(
            "$TTL 1\n@ SOA ns hostmaster 1 7200 3600 1209600 1\n@ NS ns\nns A 192.0.2.1\n\
             example NS ns1.example\nns1.example A 192.0.2.2\n{ds}"
        )
    };
    std::fs::write(&com, com_text("")).unwrap();
    let parent = Dnsd::builder().zone(Zone::new("com.", &com)).start();
    let set_ds = |cds: &str| {
        let ds: String = cds.lines().map(|l| format!("example DS {l}\n")).collect();
        std::fs::write(&com, com_text(&ds)).unwrap();
        let (ok, out) = parent.ctl(&["reload"]);
        assert!(ok, "{out}");
    };
    let kdir = tempfile::tempdir().unwrap();
    let (dnsd, _) = start(
        kdir.path(),
        1,
        &format!(
            "keys = \"ksk-zsk\"\nksk_lifetime = \"8\"\ndnskey_ttl = \"1\"\n\
             propagation_delay = \"1\"\nparent_ds_ttl = \"1\"\n\
             parent = [\"{}\"]\nparent_check_interval = \"1\"",
            parent.addr()
        ),
        &[],
    );
    let a = dnsd.addr();
    let cds = |a| dig(a, "+short example.com CDS");
    palisade_tests::wait::wait_for("the first KSK's CDS", Duration::from_secs(10), || {
        !cds(a).is_empty()
    });
    set_ds(&cds(a));
    let first = ksks(a);
    let anchor = dir.path().join("anchor.conf");
    let mut failures = Vec::new();
    let start = Instant::now();
    let mut rolled_at: Option<Instant> = None;
    while start.elapsed() < Duration::from_secs(40) {
        if rolled_at.is_none() && ksks(a).len() > 1 {
            rolled_at = Some(Instant::now());
        }
        // The parent is slow: it takes the new DS only 8 s into the rollover (the timer
        // would have retired the old key after 4), then follows the CDS.
        if rolled_at.is_some_and(|t| t.elapsed() > Duration::from_secs(8)) {
            let now = cds(a);
            if anchor_from_set(parent.addr(), "DS") != anchor_from_set(a, "CDS") {
                set_ds(&now);
            }
        }
        if let Some(text) = anchor_from_set(parent.addr(), "DS") {
            std::fs::write(&anchor, text).unwrap();
        }
        validate(
            &dnsd,
            &anchor,
            &[
                ("www.example.com", "A", "; fully validated"),
                ("example.com", "DNSKEY", "; fully validated"),
            ],
            start,
            &mut failures,
        );
        if rolled_at.is_some() && !ksks(a).iter().any(|k| first.contains(k)) {
            break;
        }
        std::thread::sleep(Duration::from_millis(500));
    }
    assert!(
        failures.is_empty(),
        "{}\n{}",
        failures.join("\n"),
        dnsd.log()
    );
    assert!(rolled_at.is_some(), "no rollover began");
    assert!(
        !ksks(a).iter().any(|k| first.contains(k)),
        "the first KSK is still published:\n{}",
        dnsd.log()
    );
    assert!(
        dnsd.stat("signing.ds_checks.lacking") > 0,
        "the slow parent was asked"
    );
    assert!(dnsd.stat("signing.ds_checks.held") > 0, "the DS was seen");
}

/// Without a parent to ask, the rollover waits for the operator: the old KSK signs on until
/// `ctl zone-ksk-submitted`, which retires it on its timeline from then.
#[test]
fn a_manual_ksk_submission_waits_for_the_operator() {
    if !need(&["dig"]) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let (dnsd, _) = start(
        dir.path(),
        1,
        "keys = \"ksk-zsk\"\nksk_lifetime = \"3\"\ndnskey_ttl = \"1\"\n\
         propagation_delay = \"1\"\nparent_ds_ttl = \"1\"",
        &[],
    );
    let a = dnsd.addr();
    let first = ksks(a);
    palisade_tests::wait::wait_for("a rollover", Duration::from_secs(10), || ksks(a).len() > 1);
    // Well past the timer's retirement (ready after 2 s, retired 2 s later).
    std::thread::sleep(Duration::from_secs(7));
    assert!(
        ksks(a).iter().any(|k| first.contains(k)),
        "the old KSK left unconfirmed"
    );
    assert_eq!(dnsd.stat("signing.awaiting_ds"), 1);
    let (ok, out) = dnsd.ctl(&["zone-ksk-submitted", "example.com.", "1"]);
    assert!(
        !ok && out.contains("no KSK rollover awaits the DS of key 1"),
        "{out}"
    );
    let (ok, out) = dnsd.ctl(&["zone-ksk-submitted", "example.com."]);
    assert!(
        ok && out.contains("the parent holds the DS of key"),
        "{out}"
    );
    palisade_tests::wait::wait_for("the old KSK gone", Duration::from_secs(15), || {
        !ksks(a).iter().any(|k| first.contains(k))
    });
}

#[test]
fn pre_signed_zones_near_expiry_are_reported() {
    if !need(&["dnssec-signzone", "dnssec-keygen"]) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    std::fs::write(
        d.join("soon.zone"),
        "$TTL 300\n@ SOA ns1 h 1 7200 3600 1209600 300\n@ NS ns1\nns1 A 192.0.2.1\n",
    )
    .unwrap();
    std::fs::write(
        d.join("gone.zone"),
        "$TTL 300\n@ SOA ns1 h 1 7200 3600 1209600 300\n@ NS ns1\nns1 A 192.0.2.1\n",
    )
    .unwrap();
    for z in ["soon.test", "gone.test"] {
        palisade_tests::sh(
            d,
            &format!("dnssec-keygen -q -f KSK -a ECDSAP256SHA256 -K . {z}"),
        );
    }
    // Signatures that end in two days, and some that ended an hour ago.
    palisade_tests::sh(
        d,
        "dnssec-signzone -q -o soon.test -K . -S -z -e now+172800 -f soon.signed soon.zone",
    );
    palisade_tests::sh(
        d,
        "dnssec-signzone -q -o gone.test -K . -S -z -P -s now-86400 -e now-3600 -f gone.signed gone.zone",
    );
    let dnsd = Dnsd::builder()
        .zone(Zone::new("soon.test.", d.join("soon.signed")))
        .zone(Zone::new("gone.test.", d.join("gone.signed")))
        .start();
    let (ok, zones) = dnsd.ctl(&["zones"]);
    assert!(ok, "{zones}");
    let line = |z: &str| {
        zones
            .lines()
            .find(|l| l.starts_with(z))
            .unwrap_or("")
            .to_string()
    };
    assert!(
        line("soon.test.").contains("WARNING: signatures expire"),
        "{zones}"
    );
    assert!(line("gone.test.").contains("SIGNATURES EXPIRED"), "{zones}");
    let log = dnsd.log();
    assert!(
        log.contains("rrsig_warn_days") && log.contains("expired signatures"),
        "{log}"
    );
    // The expired signatures served are counted (the first check runs at start).
    let t = Instant::now();
    while dnsd.stat("dnssec.expired_signatures") == 0 && t.elapsed() < Duration::from_secs(5) {
        std::thread::sleep(Duration::from_millis(100));
    }
    assert!(
        dnsd.stat("dnssec.expired_signatures") > 0,
        "{}",
        dnsd.metrics()
    );
    assert_eq!(dnsd.stat("dnssec.expiring_zones"), 2);
}

/// The response's OPT has the Compact Answers OK flag (dig shows it as `co`, or as an
/// unknown bit, `MBZ: 0x4000`).
fn co_flag(dig_out: &str) -> bool {
    dig_out.lines().any(|l| {
        l.starts_with("; EDNS:")
            && (l.contains("MBZ: 0x4000") || l.split(&[' ', ';', ','][..]).any(|w| w == "co"))
    })
}

#[test]
fn compact_denial_answers_noerror_with_one_nsec_and_transfers_a_full_chain() {
    if !need(&["dig"]) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let (dnsd, _) = start(
        dir.path(),
        3600,
        "compact_denial = true",
        &["allow_transfer = [\"127.0.0.0/8\"]"],
    );
    let a = dnsd.addr();
    // A name that does not exist: NOERROR, one NSEC at the name, next name \000.name,
    // types RRSIG NSEC NXNAME; no chain record.
    let out = dig(a, "+dnssec +norec nothere.example.com A");
    assert!(out.contains("status: NOERROR"), "{out}");
    let nsecs: Vec<&str> = out.lines().filter(|l| l.contains("\tNSEC\t")).collect();
    assert_eq!(nsecs.len(), 1, "{out}");
    assert!(
        nsecs[0].starts_with("nothere.example.com.")
            && nsecs[0].contains("\\000.nothere.example.com. RRSIG NSEC TYPE128"),
        "{out}"
    );
    // Without DO: a plain NXDOMAIN.
    let out = dig(a, "+norec nothere.example.com A");
    assert!(out.contains("status: NXDOMAIN"), "{out}");
    // Compact Answers OK (RFC 9824 §5, dig +coflag): the NXDOMAIN keeps its rcode
    // beside the same NSEC, and the responses of the zone say CO; without it they do not.
    let out = dig(a, "+dnssec +norec +coflag nothere.example.com A");
    assert!(out.contains("status: NXDOMAIN"), "{out}");
    assert!(
        out.contains("\\000.nothere.example.com. RRSIG NSEC TYPE128"),
        "{out}"
    );
    assert!(co_flag(&out), "{out}");
    let out = dig(a, "+dnssec +norec +coflag www.example.com A");
    assert!(out.contains("status: NOERROR") && co_flag(&out), "{out}");
    let out = dig(a, "+dnssec +norec www.example.com A");
    assert!(!co_flag(&out), "{out}");
    // An explicit query for NXNAME: FORMERR (RFC 9824 §3.5).
    let out = dig(a, "+norec nothere.example.com TYPE128");
    assert!(out.contains("status: FORMERR"), "{out}");
    // A type that does not exist: the name's own types.
    let out = dig(a, "+dnssec +norec www.example.com TXT");
    assert!(
        out.contains("www.example.com.") && out.contains("A AAAA RRSIG NSEC"),
        "{out}"
    );
    // The transfer holds the whole NSEC chain (a valid denial too) for secondaries.
    let axfr = dig(a, "example.com AXFR");
    let chain = axfr.lines().filter(|l| l.contains("\tNSEC\t")).count();
    // One per authoritative name: the apex, a.b.c, cn, insecure, d.e.insecure2, mail, ns1,
    // ns2, old, secure, *.wild, www, x.wild.
    assert_eq!(chain, 13, "NSEC in the transfer:\n{axfr}");
    assert!(
        !axfr.contains("\\000."),
        "an online denial leaked into the zone:\n{axfr}"
    );
    assert!(dnsd.stat("compact_denial.signed") >= 2);
}

#[test]
fn compact_denial_budgets_truncate_floods_and_positive_answers_go_on() {
    let dir = tempfile::tempdir().unwrap();
    // A worker signs at most 30 denials a second, one source 10 of them.
    let (dnsd, _) = start_with(
        dir.path(),
        Some(3600),
        "compact_denial = true",
        &[],
        "compact_denial_rate = 30\ncompact_denial_per_source = 10",
        "[defence.random_subdomain]\nenabled = false",
    );
    let at = dnsd.addr();
    let opts = QueryOpts::edns(1232).with_do();
    let ask = |sock: &UdpSocket, id: u16, name: &str| -> Option<RawMsg> {
        sock.send(&build_query(id, name, 1, &opts)).unwrap();
        let mut buf = [0u8; 4096];
        sock.recv(&mut buf)
            .ok()
            .map(|n| RawMsg::parse(&buf[..n]).unwrap())
    };
    let one = |ip: [u8; 4]| {
        let s = UdpSocket::bind(SocketAddr::new(IpAddr::from(ip), 0)).unwrap();
        s.connect(at).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
        s
    };
    let flooder = one([127, 4, 0, 1]);
    let others: Vec<UdpSocket> = (1..=6u8).map(|i| one([127, 5, i, 1])).collect();
    let legit = one([127, 6, 0, 1]);
    let (mut tc, mut full, mut legit_ok) = (0, 0, 0);
    // Budgets are per second: what a phase may sign depends on how many seconds it spans
    // (a loaded machine stretches it), so the bounds below count them.
    let unix = || {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_secs() as i64
    };
    let t0 = unix();
    // 40 random names from one source, 10 from each of six others, and an existing name
    // in between.
    for i in 0..40u16 {
        let m = ask(&flooder, i, &format!("f{i}.example.com.")).expect("an answer");
        if m.has(0x0200) {
            tc += 1;
        } else {
            full += 1;
        }
        if i % 4 == 0 {
            let m = ask(&legit, 1000 + i, "www.example.com.").expect("an answer");
            if m.rcode() == 0 && m.counts[1] > 0 && !m.has(0x0200) {
                legit_ok += 1;
            }
        }
    }
    for (k, s) in others.iter().enumerate() {
        for i in 0..10u16 {
            let _ = ask(s, 2000 + i, &format!("o{k}x{i}.example.com."));
        }
    }
    assert_eq!(
        legit_ok, 10,
        "positive answers are never held up by denials"
    );
    let seconds = unix() - t0 + 1;
    assert!(
        full <= 10 * seconds && tc >= 40 - 10 * seconds,
        "one source over {seconds} s: {full} signed, {tc} truncated"
    );
    let signed = dnsd.stat("compact_denial.signed") as i64;
    let over = (dnsd.stat("compact_denial.over_source")
        + dnsd.stat("compact_denial.over_budget")
        + dnsd.stat("compact_denial.over_zone")) as i64;
    // Unproven denials of one zone take at most half of the worker's 30 (the rest is other
    // zones' and proven sources').
    assert!(
        signed <= 22 * seconds && over >= 100 - 22 * seconds,
        "over {seconds} s: {signed} signed, {over} over a budget\n{}",
        dnsd.metrics()
    );
    if seconds <= 2 {
        // 100 denials asked in two seconds at most: the zone's 15 a second ran out.
        assert!(
            dnsd.stat("compact_denial.over_zone") > 0,
            "{}",
            dnsd.metrics()
        );
    }
    // Over TCP, every connection shares one budget: 25 connections from one address get
    // no more than its share (a budget each would grow with the connections opened). Past
    // it the zone's own NSEC chain proves the NXDOMAIN (nothing signed, and nothing to
    // retry: TC=1 over TCP would leave the resolver without an answer).
    std::thread::sleep(Duration::from_millis(1100));
    let before = dnsd.stat("compact_denial.over_source");
    let t0 = unix();
    let mut chain = 0;
    for i in 0..25 {
        let out = dig(
            at,
            &format!("+tcp +dnssec +norec +ignore -b 127.8.0.1 t{i}.example.com A"),
        );
        // The header's flags alone: a signature's base64 may hold " tc" too.
        let flags = out
            .lines()
            .find(|l| l.starts_with(";; flags:"))
            .unwrap_or("");
        assert!(!flags.contains(" tc"), "{out}");
        if out.contains("status: NXDOMAIN") && !out.contains("\\000.") {
            assert!(out.contains("\tNSEC\t"), "{out}");
            chain += 1;
        }
    }
    let seconds = unix() - t0 + 1;
    assert!(
        chain >= 25 - 10 * seconds,
        "{chain} of 25 TCP denials past the budget proved by the chain in {seconds} s"
    );
    assert!(dnsd.stat("compact_denial.over_source") as i64 - before as i64 >= 25 - 10 * seconds);
}

#[test]
fn random_subdomain_flood_on_a_compact_denial_zone_is_still_detected() {
    let dir = tempfile::tempdir().unwrap();
    let (dnsd, _) = start_with(
        dir.path(),
        Some(3600),
        "compact_denial = true",
        &[],
        "",
        "[defence.random_subdomain]\nzone_nxdomains_per_second = 100\nsource_nxdomain_limit = 5\n\
         escalate_after = 20\nwindow = 10\nblock_ttl = 300",
    );
    let at = dnsd.addr();
    let opts = QueryOpts::edns(1232).with_do();
    let flooders: Vec<UdpSocket> = (1..=50u8)
        .map(|i| {
            let s = UdpSocket::bind(SocketAddr::new(IpAddr::from([127, 7, 0, i]), 0)).unwrap();
            s.connect(at).unwrap();
            s.set_nonblocking(true).unwrap();
            s
        })
        .collect();
    let mut buf = [0u8; 4096];
    let mut noerror = 0;
    for round in 0..60u16 {
        for (k, s) in flooders.iter().enumerate() {
            let _ = s.send(&build_query(
                round,
                &format!("r{round}x{k}.example.com."),
                1,
                &opts,
            ));
            if let Ok(n) = s.recv(&mut buf)
                && RawMsg::parse(&buf[..n]).is_ok_and(|m| m.rcode() == 0)
            {
                noerror += 1;
            }
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    // The flood was answered NOERROR (compact denial), and still seen as NXDOMAINs.
    assert!(noerror > 0, "compact denials answer NOERROR");
    let stats = dnsd.stats();
    assert!(stats["random_subdomain.attacks"] >= 1, "{stats:?}");
    assert!(stats["random_subdomain.escalated"] >= 50, "{stats:?}");
    let (_, list) = dnsd.ctl(&["block", "list"]);
    let blocked = list
        .lines()
        .filter(|l| l.starts_with("127.7.0.") && l.contains("random-subdomain"))
        .count();
    assert_eq!(blocked, 50, "every flooder blocked:\n{list}");
}

#[test]
fn a_secondary_dnsd_signs_what_its_primary_sends_and_an_ixfr_re_signs_only_its_changes() {
    if !need(&["delv", "dig"]) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    // The primary: the tenant's unsigned zone (its NS addresses: the secondary's).
    let ip = palisade_tests::net::test_ip();
    let sec_at = SocketAddr::from((ip, palisade_tests::net::free_port(ip)));
    let pfile = d.join("primary.zone");
    std::fs::write(
        &pfile,
        ZONE.replace("NS_ADDR", &ip.to_string())
            .replace("ZONE_TTL", "3600"),
    )
    .unwrap();
    let mut pz = Zone::new("example.com.", &pfile);
    pz.options.push("allow_transfer = [\"127.0.0.0/8\"]".into());
    pz.options.push(format!("notify = [\"{sec_at}\"]"));
    let primary = Dnsd::builder().zone(pz).start();
    // The secondary signs what comes.
    let mut sz = Zone::new("example.com.", d.join("secondary.zone"));
    sz.options
        .push(format!("primaries = [\"{}\"]", primary.addr()));
    sz.options.push("allow_notify = [\"127.0.0.0/8\"]".into());
    sz.options.push("dnssec_policy = \"p\"".into());
    let secondary = Dnsd::builder()
        .at(sec_at)
        .zone(sz)
        .raw(&format!(
            "[defence.rrl]\nenabled = false\n\n[dnssec]\nkey_dir = \"{}\"\n\n\
             [[dnssec_policy]]\nname = \"p\"\nnsec3 = true\n",
            d.join("keys").display()
        ))
        .start();
    let s = secondary.addr();
    let anchor = d.join("anchor.conf");
    anchor_from_dnskeys(s, &anchor);
    let mut failures = Vec::new();
    for (name, qtype, want) in expectations(false) {
        let text = delv(s, &anchor, name, qtype);
        if !text.contains(want) {
            failures.push(format!("delv {name} {qtype}: expected {want:?}:\n{text}"));
        }
    }
    assert!(
        failures.is_empty(),
        "{}\n{}",
        failures.join("\n"),
        secondary.log()
    );
    let before = serial(s);
    let made = secondary.stat("dnssec.signatures_made");
    // The tenant changes one record and bumps the serial: NOTIFY, IXFR, signed again.
    let text = std::fs::read_to_string(&pfile).unwrap();
    std::fs::write(
        &pfile,
        text.replace("2026010101", "2026010102")
            .replace("www     A 192.0.2.10", "www     A 192.0.2.12"),
    )
    .unwrap();
    let (ok, out) = primary.ctl(&["reload", "example.com."]);
    assert!(ok, "{out}");
    let t = Instant::now();
    while serial(s) == before && t.elapsed() < Duration::from_secs(10) {
        std::thread::sleep(Duration::from_millis(100));
    }
    assert!(
        serial(s).wrapping_sub(before) as i32 > 0,
        "the secondary did not take the change:\n{}",
        secondary.log()
    );
    assert!(secondary.log().contains("IXFR"), "{}", secondary.log());
    let again = secondary.stat("dnssec.signatures_made") - made;
    assert!(
        again > 0 && again <= 8,
        "an IXFR of one record re-signed {again} RRsets"
    );
    let text = delv(s, &anchor, "www.example.com", "A");
    assert!(
        text.contains("192.0.2.12") && text.contains("; fully validated"),
        "{text}"
    );
    // The copy on disk is the primary's data (a restart signs it again).
    let copy = std::fs::read_to_string(d.join("secondary.zone")).unwrap();
    assert!(
        !copy.contains("RRSIG") && copy.contains("192.0.2.12"),
        "{copy}"
    );
}

#[test]
fn compact_denial_never_signs_for_a_zone_a_cname_leads_to() {
    if !need(&["dig"]) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    std::fs::write(
        d.join("a.zone"),
        "$TTL 300\n@ SOA ns h 1 7200 3600 1209600 300\n@ NS ns\nns A 192.0.2.1\n\
         out CNAME nothere.other.test.\n",
    )
    .unwrap();
    std::fs::write(
        d.join("o.zone"),
        "$TTL 300\n@ SOA ns h 1 7200 3600 1209600 300\n@ NS ns\nns A 192.0.2.1\n",
    )
    .unwrap();
    let mut a = Zone::new("example.com.", d.join("a.zone"));
    a.options.push("dnssec_policy = \"p\"".into());
    let dnsd = Dnsd::builder()
        .zone(a)
        .zone(Zone::new("other.test.", d.join("o.zone")))
        .raw(&format!(
            "[dnssec]\nkey_dir = \"{}\"\n\n[[dnssec_policy]]\nname = \"p\"\ncompact_denial = true\n",
            d.join("keys").display()
        ))
        .start();
    // The chain ends in the unsigned zone: its NXDOMAIN, no NSEC signed for it by
    // example.com's key.
    let out = dig(dnsd.addr(), "+dnssec +norec out.example.com A");
    assert!(out.contains("status: NXDOMAIN"), "{out}");
    assert!(!out.contains("\\000"), "{out}");
    // In example.com itself, compact denial as usual.
    let out = dig(dnsd.addr(), "+dnssec +norec nothere.example.com A");
    assert!(
        out.contains("status: NOERROR") && out.contains("\\000.nothere"),
        "{out}"
    );
}

#[test]
fn a_zone_whose_reload_failed_is_still_signed_again() {
    if !need(&["dig"]) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let (dnsd, file) = start(dir.path(), 3600, "", &[]);
    let before = serial(dnsd.addr());
    // A broken upload: the last good version keeps serving...
    std::fs::write(&file, "this is not a zone\n").unwrap();
    let (ok, out) = dnsd.ctl(&["reload", "example.com."]);
    assert!(!ok, "{out}");
    // ...and keeps being signed (its signatures must not run out while the tenant fixes it).
    let (ok, out) = dnsd.ctl(&["zone-sign", "example.com."]);
    assert!(ok && out.contains("signed, serial"), "{out}");
    assert!(serial(dnsd.addr()).wrapping_sub(before) as i32 > 0);
}

#[test]
fn a_damaged_signed_copy_is_refused_and_the_zone_signed_anew() {
    if !need(&["dig"]) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let (dnsd, _) = start(dir.path(), 3600, "", &[]);
    let copy = dir
        .path()
        .join("keys")
        .join("example.com")
        .join("signed.zone");
    let t = Instant::now();
    while !copy.exists() && t.elapsed() < Duration::from_secs(10) {
        std::thread::sleep(Duration::from_millis(50));
    }
    drop(dnsd);
    std::fs::write(&copy, "example.com. 300 IN SOA broken\n\u{0}garbage\n").unwrap();
    let (dnsd, _) = start_with(dir.path(), None, "", &[], "", "");
    assert!(!ksks(dnsd.addr()).is_empty(), "served signed");
    assert!(dnsd.stat("dnssec.signatures_made") >= 15, "signed anew");
    let log = dnsd.log();
    assert!(log.contains("does not load, signing anew"), "{log}");
}

/// A zone with what trips signers: case, escapes, `\000` labels, a wildcard at the apex and
/// below empty non-terminals, a DNAME, a delegation with glue, DS, types in
/// several bitmap windows, a name near 255 octets, ZONEMD digests to make again (and one of
/// an unknown scheme, dropped).
const TRICKY: &str = "\
$TTL 3600
@ SOA ns1 hostmaster 1 7200 3600 1209600 300
  NS ns1
  NS ns.other.example.
  ZONEMD 1 1 1 000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000
  ZONEMD 1 1 2 00000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000
  ZONEMD 1 240 1 000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000
ns1 A 192.0.2.1
* TXT \"apex wildcard\"
UPPER.Case A 192.0.2.2
a\\.b TXT \"escaped dot\"
\\000.nul TXT \"zero octet\"
\\001 TXT \"one\"
\\255x TXT \"high octet\"
sp\\032ace TXT \"space\"
slash/label TXT \"slash\"
*.w.ent1.ent2 A 192.0.2.3
x.y.ent3 AAAA 2001:db8::3
dn DNAME example.net.
sub NS ns.sub
ns.sub A 192.0.2.5
secure NS ns.other.example.
secure DS 12345 13 2 49FD46E6C4B45C55D4AC69CBD3CD34AC1AFE51DE9BA6E1D9D5F7DB6E4C3DB9C9
insecure NS ns.other.example.
cn CNAME ns1
types A 192.0.2.6
types CAA 0 issue \"ca.example\"
types HINFO \"cpu\" \"os\"
types TYPE300 \\# 0
types TYPE1234 \\# 2 0102
types TYPE65280 \\# 1 01
types SVCB 1 . alpn=h2
mx MX 10 ns1
aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa.bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb.ccccccccccccccccccccccccccccccccccccccccccccccccccccccccccccccc TXT \"long\"
";

/// Runs `argv` and returns (success, stdout + stderr).
fn run(argv: &[&dyn AsRef<std::ffi::OsStr>]) -> (bool, String) {
    let mut c = Command::new(argv[0]);
    for a in &argv[1..] {
        c.arg(a);
    }
    match c.output() {
        Ok(o) => (
            o.status.success(),
            format!(
                "{}{}",
                String::from_utf8_lossy(&o.stdout),
                String::from_utf8_lossy(&o.stderr)
            ),
        ),
        Err(e) => (false, e.to_string()),
    }
}

#[test]
fn every_zone_dnsd_signs_passes_bind_knot_and_ldns_zone_verifiers() {
    if !need(&["ldns-verify-zone", "dnssec-verify", "kzonecheck"]) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let tricky = dir.path().join("tricky.example.zone");
    std::fs::write(&tricky, TRICKY).unwrap();
    let mut zones = vec![("tricky.example.".to_string(), tricky)];
    // Unseen zones: the root zone (its own signatures replaced) and every zone BIND's
    // checkzone corpus accepts (each kind of record data).
    if let Some(c) = palisade_tests::corpora::corpora_dir() {
        zones.push((".".into(), c.join("root-zone/root.zone")));
        let b = c.join("bind9-checkzone");
        let tsv = std::fs::read_to_string(b.join("expectations.tsv")).unwrap();
        for l in tsv.lines().filter(|l| !l.starts_with('#')) {
            let f: Vec<&str> = l.split('\t').collect();
            if f.len() >= 4 && f[3].starts_with("accept") {
                zones.push((format!("{}.", f[1]), b.join("zones").join(f[0])));
            }
        }
    }
    let dnsd = palisade_tests::bin("dnsd");
    let policies: &[(&str, &str, &[&str])] = &[
        ("NSEC, ECDSA P-256, CSK", "", &["-z"]),
        (
            "NSEC3, Ed25519, KSK+ZSK",
            "nsec3 = true\nalgorithm = \"ed25519\"\nkeys = \"ksk-zsk\"",
            &[],
        ),
        (
            "NSEC3 opt-out, RSA/SHA-256, CSK",
            "nsec3 = true\nnsec3_opt_out = true\nalgorithm = \"rsasha256\"",
            &["-z"],
        ),
    ];
    let mut failures = Vec::new();
    let mut verified = 0;
    for (i, (origin, file)) in zones.iter().enumerate() {
        for (j, &(what, policy, verify_opts)) in policies.iter().enumerate() {
            let work = dir.path().join(format!("{i}-{j}"));
            std::fs::create_dir_all(&work).unwrap();
            let conf = work.join("dnsd.toml");
            std::fs::write(
                &conf,
                format!(
                    "[[zone]]\norigin = \"{origin}\"\nfile = \"{}\"\ndnssec_policy = \"p\"\n\n\
                     [dnssec]\nkey_dir = \"{}\"\n\n[[dnssec_policy]]\nname = \"p\"\n{policy}\n",
                    file.display(),
                    work.join("keys").display()
                ),
            )
            .unwrap();
            let signed = work.join("signed.zone");
            let (ok, out) = run(&[&dnsd, &"sign-zone", &"-c", &conf, &"-o", &signed, origin]);
            if !ok {
                // Only a zone dnsd refuses to load may fail to sign (TRICKY must load).
                let (loads, _) = run(&[&dnsd, &"check-zone", &"--origin", origin, file]);
                if loads || i == 0 {
                    failures.push(format!("{origin} ({what}): loads but is not signed: {out}"));
                }
                continue;
            }
            // BIND's and Knot's verifiers check every zone: each signature, the chain.
            let mut argv: Vec<&dyn AsRef<std::ffi::OsStr>> = vec![&"dnssec-verify"];
            for o in verify_opts {
                argv.push(o);
            }
            argv.extend([&"-o" as &dyn AsRef<std::ffi::OsStr>, origin, &signed]);
            let (ok, out) = run(&argv);
            if !ok {
                failures.push(format!("{origin} ({what}): dnssec-verify: {out}"));
            }
            // Knot's checks include the zone's content: a zone Knot refuses unsigned (data
            // below a DNAME, which RFC 6672 forbids: Knot would chain it, BIND and dnsd do
            // not) is left to BIND's verifier.
            let (ok, out) = run(&[&"kzonecheck", &"-o", origin, &"-d", &"on", &signed]);
            if !ok && run(&[&"kzonecheck", &"-o", origin, file]).0 {
                failures.push(format!("{origin} ({what}): kzonecheck: {out}"));
            }
            // ldns-verify-zone checks the ZONEMD digests too (the root zone's, TRICKY's),
            // on the zones it reads alike (it misreads an escaped comma in an SVCB alpn)
            // and quickly (it takes minutes over the root zone's NSEC3 chain).
            if i == 0 || (origin == "." && !policy.contains("nsec3")) {
                let (ok, out) = run(&[&"ldns-verify-zone", &signed]);
                if !ok {
                    failures.push(format!("{origin} ({what}): ldns-verify-zone: {out}"));
                }
            }
            verified += 1;
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
    assert!(verified >= 3, "only {verified} zones signed");
    eprintln!(
        "{verified} signed zones verified ({} zones × {} policies)",
        zones.len(),
        policies.len()
    );
}

/// A zone-signing key of another algorithm put in the key directory (`dnsd key generate
/// --role zsk`) signs the DNSKEY RRset too (RFC 4035 §2.2: every algorithm of the zone signs
/// every RRset): it signed all the rest, and BIND's verifier found the zone not fully signed.
#[test]
fn a_zone_signing_key_of_another_algorithm_signs_the_dnskey_set_too() {
    if !need(&["dnssec-verify"]) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let zone = dir.path().join("tricky.example.zone");
    std::fs::write(&zone, TRICKY).unwrap();
    let keys = dir.path().join("keys");
    let conf = dir.path().join("dnsd.toml");
    std::fs::write(
        &conf,
        format!(
            "[[zone]]\norigin = \"tricky.example.\"\nfile = \"{}\"\ndnssec_policy = \"p\"\n\n\
             [dnssec]\nkey_dir = \"{}\"\n\n[[dnssec_policy]]\nname = \"p\"\n",
            zone.display(),
            keys.display()
        ),
    )
    .unwrap();
    let dnsd = palisade_tests::bin("dnsd");
    let (ok, out) = run(&[
        &dnsd,
        &"key",
        &"generate",
        &"tricky.example.",
        &"--algorithm",
        &"ed25519",
        &"--role",
        &"zsk",
        &"--key-dir",
        &keys,
    ]);
    assert!(ok, "{out}");
    let signed = dir.path().join("signed.zone");
    let (ok, out) = run(&[
        &dnsd,
        &"sign-zone",
        &"-c",
        &conf,
        &"-o",
        &signed,
        &"--key-dir",
        &keys,
        &"tricky.example.",
    ]);
    assert!(ok, "{out}");
    let text = std::fs::read_to_string(&signed).unwrap();
    for alg in ["RRSIG\tDNSKEY 13 ", "RRSIG\tDNSKEY 15 "] {
        assert!(
            text.lines().any(|l| l.contains(alg)),
            "no {alg}: the DNSKEY RRset is not signed by that algorithm"
        );
    }
    let (ok, out) = run(&[&"dnssec-verify", &"-z", &"-o", &"tricky.example.", &signed]);
    assert!(ok, "{out}");
}

#[test]
fn key_files_gone_stop_signing_and_sign_zone_leaves_the_live_keys_alone() {
    if !need(&["dig"]) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let policy = "keys = \"ksk-zsk\"";
    let (dnsd, _) = start(dir.path(), 3600, policy, &[]);
    let zdir = dir.path().join("keys").join("example.com");
    let names = |d: &Path| -> Vec<String> {
        let mut v: Vec<String> = std::fs::read_dir(d)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .filter(|n| n.starts_with('K'))
            .collect();
        v.sort();
        v
    };
    let keys = names(&zdir);
    assert_eq!(keys.len(), 2, "{keys:?}");
    assert!(keys.iter().any(|n| n.contains("+ksk-")) && keys.iter().any(|n| n.contains("+zsk-")));
    let ksk_before = ksks(dnsd.addr());
    // `dnsd sign-zone` signs from a copy of the live keys: the directory is left as it was.
    let snapshot = |d: &Path| -> Vec<(String, std::time::SystemTime)> {
        let mut v: Vec<_> = std::fs::read_dir(d)
            .unwrap()
            .map(|e| {
                let e = e.unwrap();
                (
                    e.file_name().to_string_lossy().into_owned(),
                    e.metadata().unwrap().modified().unwrap(),
                )
            })
            .collect();
        v.sort();
        v
    };
    let before = snapshot(&zdir);
    let out = Command::new(palisade_tests::bin("dnsd"))
        .args(["sign-zone", "-c"])
        .arg(dnsd.config_path())
        .arg("-o")
        .arg(dir.path().join("offline.zone"))
        .arg("example.com.")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        snapshot(&zdir),
        before,
        "the live key directory is untouched"
    );
    // The KSK's file goes missing: no fresh KSK (the parent's DS names the old one), the
    // last signed version keeps serving, ctl zone-keys and a metric say so.
    let ksk = keys.iter().find(|n| n.contains("+ksk-")).unwrap();
    std::fs::remove_file(zdir.join(ksk)).unwrap();
    let (ok, out) = dnsd.ctl(&["zone-sign", "example.com."]);
    assert!(!ok, "{out}");
    assert!(
        out.contains("key files gone") && out.contains(ksk.as_str()),
        "{out}"
    );
    assert_eq!(names(&zdir).len(), 1, "no new key made: {:?}", names(&zdir));
    assert_eq!(
        ksks(dnsd.addr()),
        ksk_before,
        "still served signed as before"
    );
    let (_, kt) = dnsd.ctl(&["zone-keys", "example.com."]);
    assert!(kt.starts_with("ERROR:"), "{kt}");
    assert!(dnsd.stat("signing.keys_missing") >= 1);
    // A restart serves the last signed copy rather than signing with new keys.
    drop(dnsd);
    let (dnsd, _) = start_with(dir.path(), None, policy, &[], "", "");
    assert_eq!(ksks(dnsd.addr()), ksk_before, "the signed copy serves");
    assert_eq!(names(&zdir).len(), 1, "still no new key");
    assert!(dnsd.log().contains("key files gone"), "{}", dnsd.log());
    // A key file that is there but corrupt: the signed copy serves too (it was SERVFAIL).
    drop(dnsd);
    let zsk = zdir.join(&names(&zdir)[0]);
    let text = std::fs::read_to_string(&zsk).unwrap();
    let at = text.find("private_key = \"").unwrap() + "private_key = \"".len();
    let mut bad = text.clone();
    bad.replace_range(at..at + 10, "AAAAAAAAAA");
    std::fs::write(&zsk, bad).unwrap();
    let (dnsd, _) = start_with(dir.path(), None, policy, &[], "", "");
    assert_eq!(ksks(dnsd.addr()), ksk_before, "the signed copy serves");
}

/// A source made an NXDOMAIN suspect (by a random-subdomain flood) has its NXDOMAINs over
/// UDP truncated: a compact-denial zone signs none of them (it signed each, then sent only
/// TC=1, spending the worker's signing budget on answers nobody received).
#[test]
fn an_nxdomain_suspects_denials_are_truncated_unsigned() {
    let dir = tempfile::tempdir().unwrap();
    let (dnsd, _) = start_with(
        dir.path(),
        Some(3600),
        "compact_denial = true",
        &[],
        "",
        "[defence.random_subdomain]\nzone_nxdomains_per_second = 20\n\
         source_nxdomain_limit = 5\nescalate_after = 10\nwindow = 10\nblock_ttl = 300",
    );
    let s = UdpSocket::bind("127.4.9.1:0").unwrap();
    s.connect(dnsd.addr()).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
    let opts = QueryOpts::edns(1232).with_do();
    let mut rng = palisade_tests::rng::Rng::new(7);
    let mut ask = |id: u16| {
        let name = format!("r{:016x}.example.com.", rng.next_u64());
        s.send(&build_query(id, &name, 1, &opts)).unwrap();
        let mut buf = [0u8; 4096];
        s.recv(&mut buf)
            .ok()
            .map(|n| RawMsg::parse(&buf[..n]).unwrap())
    };
    let mut id = 0u16;
    wait_for("the flooder a suspect", Duration::from_secs(20), || {
        for _ in 0..20 {
            id += 1;
            let _ = ask(id);
        }
        dnsd.ctl(&["block", "list"]).1.contains("scope=nxdomain")
    });
    let signed = dnsd.stat("compact_denial.signed");
    let mut tc = 0;
    for _ in 0..30 {
        id += 1;
        if ask(id).is_some_and(|m| m.has(0x0200)) {
            tc += 1;
        }
    }
    assert!(tc >= 1, "the suspect's NXDOMAINs truncated");
    assert_eq!(
        dnsd.stat("compact_denial.signed"),
        signed,
        "no denial signed for a suspect"
    );
}

/// A zone whose policy a reload drops goes on from the serial it was served signed with
/// (its file's, far behind, was served: secondaries kept the signed copy, whose signatures
/// then ran out).
#[test]
fn a_zone_no_longer_signed_keeps_its_serial_going_forward() {
    if !need(&["dig"]) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let (dnsd, _) = start(dir.path(), 3600, "", &[]);
    // Signed once more so that the served serial runs ahead of the file's.
    let (ok, out) = dnsd.ctl(&["zone-sign", "example.com."]);
    assert!(ok, "{out}");
    let signed = serial(dnsd.addr());
    let conf = std::fs::read_to_string(dnsd.config_path()).unwrap();
    let unsigned = conf.replace("dnssec_policy = \"p\"\n", "");
    assert_ne!(conf, unsigned, "the policy line");
    std::fs::write(dnsd.config_path(), unsigned).unwrap();
    let (ok, out) = dnsd.ctl(&["reload"]);
    assert!(ok, "{out}");
    // The reload says what that costs while the parent holds the zone's DS.
    assert!(
        out.contains("dnssec_policy removed") && out.contains("remove the DS first"),
        "{out}"
    );
    let now = serial(dnsd.addr());
    assert_eq!(now, signed.wrapping_add(1), "reload said: {out}");
    assert!(
        dig(dnsd.addr(), "+short example.com DNSKEY")
            .trim()
            .is_empty(),
        "served unsigned"
    );
}

/// A zone whose name leaves no room for NSEC3's hash label (223 octets on the wire) under an
/// NSEC3 policy: refused for itself alone, named by `check-config`, and every other zone
/// served — its signing panicked and took dnsd down at start (Knot fails that one zone).
#[test]
fn a_zone_name_too_long_for_nsec3_fails_alone() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let l63 = "a".repeat(63);
    let long = format!("{l63}.{l63}.{l63}.{}.", "b".repeat(29));
    let file = d.join("long.zone");
    std::fs::write(
        &file,
        "$TTL 300\n@ SOA ns h 1 7200 3600 1209600 60\n@ NS ns\nns A 192.0.2.1\n",
    )
    .unwrap();
    let mut z = Zone::new(&long, &file);
    z.options.push("dnssec_policy = \"p\"".into());
    let mut dnsd = Dnsd::builder()
        .ready_on_first_zone()
        .zone(Zone::data("example.com."))
        .zone(z)
        .raw(&format!(
            "[dnssec]\nkey_dir = \"{}\"\n\n[[dnssec_policy]]\nname = \"p\"\nnsec3 = true\n",
            d.join("keys").display()
        ))
        .start();
    let a = dnsd.addr();
    let www = palisade_tests::client::query(a, "www.example.com.", 1, &QueryOpts::udp());
    assert_eq!(www.answers.len(), 1, "the other zone is served");
    // A reload says why that zone fails, and goes on.
    let (_, out) = dnsd.ctl(&["reload"]);
    assert!(out.contains("too long for NSEC3"), "{out}");
    assert!(dnsd.is_running(), "{}", dnsd.log());
    let out = Command::new(palisade_tests::bin("dnsd"))
        .args(["check-config", "-c"])
        .arg(dnsd.config_path())
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        !out.status.success() && text.contains("too long for NSEC3"),
        "{text}"
    );
}

/// Going insecure: `cds = "delete"` publishes RFC 8078's "remove every DS" (`CDS 0 0 0 00`,
/// `CDNSKEY 0 3 0 AA==`), signed by the key-signing keys, while the zone stays signed and
/// validates — a parent that follows CDS drops the DS before the operator stops signing
/// (removing the policy at once served the zone unsigned, bogus while the DS stood).
#[test]
fn cds_delete_asks_the_parent_to_remove_every_ds_while_the_zone_stays_signed() {
    if !need(&["dig", "delv"]) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let (dnsd, _) = start(dir.path(), 300, "cds = \"delete\"", &[]);
    let a = dnsd.addr();
    assert_eq!(dig(a, "+short example.com CDS").trim(), "0 0 0 00");
    assert_eq!(dig(a, "+short example.com CDNSKEY").trim(), "0 3 0 AA==");
    let anchor = dir.path().join("anchor.conf");
    anchor_from_dnskeys(a, &anchor);
    for (name, qtype) in [
        ("example.com", "CDS"),
        ("example.com", "CDNSKEY"),
        ("www.example.com", "A"),
    ] {
        let out = delv(a, &anchor, name, qtype);
        assert!(out.contains("; fully validated"), "{name} {qtype}:\n{out}");
    }
}
