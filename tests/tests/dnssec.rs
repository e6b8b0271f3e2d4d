//! Pre-signed zones served with DO set: answers compared with Knot DNS and NSD serving the
//! same signed files (rcode, AA, answer and authority as sets, signatures included), for
//! zones signed with NSEC, NSEC3 and NSEC3 opt-out; the signed root zone too; and `delv`,
//! a real validator, accepts dnsd's positive, NXDOMAIN, NODATA and wildcard answers, and
//! DNSViz finds no error in them (closest-encloser proofs below opt-out empty
//! non-terminals included).

use std::net::{Ipv4Addr, SocketAddr};
use std::path::Path;

use palisade_tests::client;
use palisade_tests::compare::{Normalized, diff};
use palisade_tests::servers::{Dnsd, Knot, Nsd, Zone};
use palisade_tests::sh;
use palisade_tests::wire::QueryOpts;

const ZONE: &str = "\
$TTL 3600
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
f.e.insecure2 NS ns.example.net.
cn      CNAME www
old     DNAME example.com.
wcn     CNAME a.wild
*.wmx   MX 10 www
self    DNAME example.com.
";

/// (name, type) asked with DO.
const QUERIES: &[(&str, u16)] = &[
    ("www.example.com.", 1),             // positive
    ("www.example.com.", 28),            // positive AAAA
    ("nothere.example.com.", 1),         // NXDOMAIN
    ("zzz.nothere.example.com.", 1),     // NXDOMAIN, deeper
    ("www.example.com.", 15),            // NODATA
    ("c.example.com.", 1),               // NODATA at an empty non-terminal
    ("b.c.example.com.", 16),            // NODATA at an empty non-terminal
    ("a.wild.example.com.", 1),          // wildcard answer
    ("q.r.wild.example.com.", 1),        // wildcard answer, two labels deep
    ("a.wild.example.com.", 15),         // wildcard NODATA
    ("x.wild.example.com.", 16),         // existing name beside a wildcard
    ("host.secure.example.com.", 1),     // referral to a signed child (DS)
    ("host.insecure.example.com.", 1),   // referral to an unsigned child (no DS proof)
    ("secure.example.com.", 43),         // DS at the cut
    ("insecure.example.com.", 43),       // no DS at the cut
    ("x.d.e.insecure2.example.com.", 1), // referral under an empty non-terminal
    // Below empty non-terminals whose only descendants are insecure delegations: with opt-out
    // they have no NSEC3, so the closest provable encloser is an ancestor (RFC 5155 §7.2.1).
    ("zz.e.insecure2.example.com.", 1), // NXDOMAIN below such an empty non-terminal
    ("zz.insecure2.example.com.", 1),   // NXDOMAIN one level higher
    ("a.zz.e.insecure2.example.com.", 16), // NXDOMAIN two labels below
    ("e.insecure2.example.com.", 1),    // NODATA at such an empty non-terminal
    ("www.old.example.com.", 5),        // CNAME query under a DNAME: DNAME + CNAME only
    ("nx.old.example.com.", 5),         // the same, target absent: nothing chased
    ("www.old.example.com.", 1),        // DNAME followed to the A RRset
    ("cn.example.com.", 1),             // CNAME
    ("wcn.example.com.", 1),            // CNAME to a wildcard
    ("example.com.", 48),               // DNSKEY
    ("example.com.", 6),                // SOA
    // A wildcard answer with additional data: the proof in authority, the MX target's
    // addresses after it (never the proof read as additional).
    ("q.wmx.example.com.", 15),
    ("cn.example.com.", 47), // NSEC beside a CNAME: answered, not followed
    ("cn.example.com.", 46), // RRSIG beside a CNAME: the owner's, not followed
    // One DNAME twice in a chain: it appears once in the answer.
    ("x.self.self.example.com.", 1),
];

/// A signed zone file and what signed it.
type Signed = Vec<(&'static str, std::path::PathBuf)>;

/// Signs the zone three ways with its name servers at `ns` (where DNSViz will query it);
/// returns (what, file), the KSK as a delv trust anchor, and the KSK's DNSKEY line
/// (DNSViz's trust anchor).
fn sign(dir: &Path, ns: Ipv4Addr) -> (Signed, String, String) {
    std::fs::write(
        dir.join("example.com.zone"),
        ZONE.replace("NS_ADDR", &ns.to_string()),
    )
    .unwrap();
    sh(dir, "dnssec-keygen -q -a ECDSAP256SHA256 -K . example.com");
    let ksk = sh(
        dir,
        "dnssec-keygen -q -f KSK -a ECDSAP256SHA256 -K . example.com",
    );
    sh(
        dir,
        "dnssec-signzone -q -o example.com -K . -S -f nsec.zone example.com.zone",
    );
    sh(
        dir,
        "dnssec-signzone -q -3 aabbccdd -H 0 -o example.com -K . -S -f nsec3.zone example.com.zone",
    );
    sh(
        dir,
        "dnssec-signzone -q -3 - -H 0 -A -o example.com -K . -S -f optout.zone example.com.zone",
    );
    let key = std::fs::read_to_string(dir.join(format!("{}.key", ksk.trim()))).unwrap();
    // "example.com. IN DNSKEY 257 3 13 KEY..." -> a delv trust-anchors clause.
    let (anchor, line) = palisade_tests::delv::anchor_from_key_file("example.com", &key);
    let files = vec![
        ("NSEC", dir.join("nsec.zone")),
        ("NSEC3", dir.join("nsec3.zone")),
        ("NSEC3 opt-out", dir.join("optout.zone")),
    ];
    // A signer that succeeded without writing its file is a broken setup: the test fails
    // (in CI and out), naming the file, instead of serving nothing or skipping.
    for (what, file) in &files {
        assert!(
            file.metadata().is_ok_and(|m| m.is_file() && m.len() > 0),
            "dnssec-signzone ({what}) succeeded but {} was not made",
            file.display()
        );
    }
    (files, anchor, line)
}

fn ask(addr: SocketAddr, name: &str, qtype: u16) -> Normalized {
    let opts = QueryOpts::edns(4096).with_do();
    Normalized::from_reply(&client::query_reply(addr, name, qtype, &opts))
}

#[test]
fn signed_answers_match_knot_and_nsd_and_validate_with_delv() {
    for t in ["dnssec-signzone", "dnssec-keygen"] {
        if !palisade_tests::have_program(t) {
            palisade_tests::skipped(&format!("{t} not installed (bind9-utils)"));
            return;
        }
    }
    let dir = tempfile::tempdir().unwrap();
    // dnsd's address, fixed first: the zone names it as its name servers' (for DNSViz).
    let ns_ip = palisade_tests::net::test_ip();
    let (files, anchor, dnskey) = sign(dir.path(), ns_ip);
    let anchor_file = dir.path().join("anchor.conf");
    std::fs::write(&anchor_file, &anchor).unwrap();
    let mut failures = Vec::new();
    let mut peers_disagree = Vec::new();
    let mut checked = 0;
    for (what, file) in &files {
        let zone = Zone::new("example.com.", file);
        let at = SocketAddr::from((ns_ip, palisade_tests::net::free_port(ns_ip)));
        let dnsd = Dnsd::builder()
            .zone(zone.clone())
            .at(at)
            .raw("[defence.rrl]\nenabled = false")
            .start();
        if !Knot::available() && !Nsd::available() {
            // Nothing to compare with: a skip, which CI does not allow.
            palisade_tests::skipped("neither knotd nor nsd is installed");
            return;
        }
        let knot = Knot::available().then(|| Knot::start(std::slice::from_ref(&zone)));
        let nsd = Nsd::available().then(|| Nsd::start(std::slice::from_ref(&zone)));
        for &(name, qtype) in QUERIES {
            checked += 1;
            let ours = ask(dnsd.addr(), name, qtype);
            let k = knot.as_ref().map(|k| ask(k.addr(), name, qtype));
            let n = nsd.as_ref().map(|n| ask(n.addr(), name, qtype));
            // Answer and authority as sets, signatures included; additional loosely.
            let strip = |x: &Normalized| Normalized {
                additional: Default::default(),
                opt: None,
                ..x.clone()
            };
            let (ours_s, k_s, n_s) = (strip(&ours), k.as_ref().map(strip), n.as_ref().map(strip));
            match (&k_s, &n_s) {
                (Some(k), Some(n)) if k == n => {
                    if &ours_s != k {
                        failures.push(format!(
                            "[{what}] {name} {qtype}: dnsd differs from Knot and NSD:\n  {}",
                            diff("dnsd", &ours_s, "knot+nsd", k).join("\n  ")
                        ));
                    }
                }
                (Some(k), Some(n)) => {
                    // The peers disagree: we must match one of them.
                    if &ours_s != k && &ours_s != n {
                        failures.push(format!(
                            "[{what}] {name} {qtype}: dnsd matches neither:\n  vs knot: {}\n  vs nsd: {}",
                            diff("dnsd", &ours_s, "knot", k).join("\n    "),
                            diff("dnsd", &ours_s, "nsd", n).join("\n    ")
                        ));
                    } else {
                        peers_disagree.push(format!(
                            "[{what}] {name} {qtype}: Knot and NSD disagree, dnsd = {}",
                            if &ours_s == k { "Knot" } else { "NSD" }
                        ));
                    }
                }
                (Some(p), None) | (None, Some(p)) => {
                    if &ours_s != p {
                        failures.push(format!(
                            "[{what}] {name} {qtype}:\n  {}",
                            diff("dnsd", &ours_s, "peer", p).join("\n  ")
                        ));
                    }
                }
                (None, None) => {}
            }
        }
        // A real validator accepts our answers.
        if palisade_tests::have_program("delv") {
            // A wildcard answer whose next closer name is covered by an opt-out NSEC3 could
            // hide an insecure delegation: validators call it insecure (RFC 5155 §8.8), and
            // Knot and NSD send the same records.
            let wild = if what.contains("opt-out") {
                "; unsigned answer"
            } else {
                "; fully validated"
            };
            for (name, qtype, want) in [
                ("www.example.com", "A", "; fully validated"),
                (
                    "nothere.example.com",
                    "A",
                    "; negative response, fully validated",
                ),
                (
                    "www.example.com",
                    "MX",
                    "; negative response, fully validated",
                ),
                ("a.wild.example.com", "A", wild),
                ("q.wmx.example.com", "MX", wild),
                ("c.example.com", "A", "; negative response, fully validated"),
                (
                    "zz.e.insecure2.example.com",
                    "A",
                    "; negative response, fully validated",
                ),
                (
                    "zz.insecure2.example.com",
                    "A",
                    "; negative response, fully validated",
                ),
                ("www.old.example.com", "A", "; fully validated"),
                ("www.old.example.com", "CNAME", "; fully validated"),
            ] {
                let text = palisade_tests::delv::delv(
                    dnsd.addr(),
                    None,
                    &anchor_file,
                    "example.com",
                    name,
                    qtype,
                );
                if !text.contains(want) {
                    failures.push(format!(
                        "[{what}] delv {name} {qtype}: expected {want:?}:\n{text}"
                    ));
                }
            }
        } else {
            palisade_tests::skipped("delv not installed (bind9-dnsutils)");
        }
        // DNSViz probes each name for many types and checks every proof it gets.
        if palisade_tests::dnsviz::available() {
            let work = dir
                .path()
                .join(format!("dnsviz-{}", what.replace(' ', "-")));
            std::fs::create_dir_all(&work).unwrap();
            let v = palisade_tests::dnsviz::check(
                "example.com.",
                &[
                    ("ns1.example.com", dnsd.addr()),
                    ("ns2.example.com", dnsd.addr()),
                ],
                &[
                    "zz.e.insecure2.example.com.",
                    "zz.insecure2.example.com.",
                    "e.insecure2.example.com.",
                    "nothere.example.com.",
                    "www.example.com.",
                    "a.wild.example.com.",
                    "www.old.example.com.",
                ],
                &dnskey,
                &work,
            );
            for w in &v.warnings {
                eprintln!("[{what}] dnsviz: {w}");
            }
            for e in v.errors {
                failures.push(format!("[{what}] dnsviz: {e}"));
            }
        } else {
            palisade_tests::skipped("dnsviz not installed");
        }
    }
    eprintln!(
        "{checked} queries with DO; Knot and NSD disagree on {}:",
        peers_disagree.len()
    );
    for d in &peers_disagree {
        eprintln!("  {d}");
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn root_zone_with_do_matches_knot_and_nsd() {
    let Some(c) = palisade_tests::corpora::corpora_dir() else {
        return;
    };
    let zone = Zone::new(".", c.join("root-zone/root.zone"));
    let dnsd = Dnsd::builder()
        .zone(zone.clone())
        .raw("[defence.rrl]\nenabled = false")
        .start();
    // Keep the servers alive for the whole test (dropping one stops it).
    let knot = Knot::available().then(|| Knot::start(std::slice::from_ref(&zone)));
    let nsd = Nsd::available().then(|| Nsd::start(std::slice::from_ref(&zone)));
    let mut peers = Vec::new();
    if let Some(k) = &knot {
        peers.push(("knot", k.addr()));
    }
    if let Some(n) = &nsd {
        peers.push(("nsd", n.addr()));
    }
    if peers.is_empty() {
        palisade_tests::skipped("neither knotd nor nsd installed");
        return;
    }
    let mut failures = Vec::new();
    for (name, qtype) in [
        (".", 6u16),
        (".", 48),
        ("com.", 1), // referral to a signed TLD
        ("www.example.com.", 1),
        ("com.", 43),            // DS at the cut
        ("nonexistent-tld.", 1), // NXDOMAIN with NSEC
        ("arpa.", 2),
        ("zz.", 1), // NXDOMAIN near the end of the chain
    ] {
        let ours = ask(dnsd.addr(), name, qtype);
        for (pn, pa) in &peers {
            let theirs = ask(*pa, name, qtype);
            let d: Vec<String> = diff("dnsd", &ours, pn, &theirs)
                .into_iter()
                .filter(|l| !l.starts_with("additional") && !l.starts_with("OPT"))
                .collect();
            if !d.is_empty() {
                failures.push(format!("{name} {qtype} vs {pn}:\n  {}", d.join("\n  ")));
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// Problems with the signatures of one section: an RRSIG whose RRset is absent, or an RRset
/// (other than a delegation's NS and glue) without its RRSIG.
fn unsigned_or_orphaned(
    what: &str,
    sec: &palisade_tests::compare::Section,
    ns_ok: bool,
) -> Vec<String> {
    use std::collections::BTreeSet;
    let sets: BTreeSet<(String, u16)> = sec
        .iter()
        .filter(|r| r.rtype != 46)
        .map(|r| (r.owner.to_lowercase(), r.rtype))
        .collect();
    let signed: BTreeSet<(String, u16)> = sec
        .iter()
        .filter(|r| r.rtype == 46 && r.rdata.len() >= 2)
        .map(|r| {
            (
                r.owner.to_lowercase(),
                u16::from_be_bytes([r.rdata[0], r.rdata[1]]),
            )
        })
        .collect();
    let mut out = Vec::new();
    for s in signed.difference(&sets) {
        out.push(format!(
            "{what}: RRSIG of {} type {} without its RRset",
            s.0, s.1
        ));
    }
    // A CNAME synthesised from a DNAME in the same section is unsigned (RFC 6672 §5.3.1):
    // validators check the DNAME's signature and synthesise it themselves.
    let dnames: Vec<&String> = sets
        .iter()
        .filter(|(_, t)| *t == 39)
        .map(|(o, _)| o)
        .collect();
    let synthesised = |o: &str| {
        dnames
            .iter()
            .any(|d| o.len() > d.len() && o.ends_with(&format!(".{d}")))
    };
    for s in sets.difference(&signed) {
        let exempt = (ns_ok && s.1 == 2) || (s.1 == 5 && synthesised(&s.0));
        if !exempt {
            out.push(format!("{what}: {} type {} without its RRSIG", s.0, s.1));
        }
    }
    out
}

#[test]
fn truncation_never_leaves_an_rrset_without_its_signatures_and_no_do_gets_none() {
    for t in ["dnssec-signzone", "dnssec-keygen"] {
        if !palisade_tests::have_program(t) {
            palisade_tests::skipped(&format!("{t} not installed (bind9-utils)"));
            return;
        }
    }
    let dir = tempfile::tempdir().unwrap();
    let (files, _, _) = sign(dir.path(), Ipv4Addr::new(192, 0, 2, 1));
    let mut failures = Vec::new();
    let mut truncated = 0;
    for (what, file) in &files {
        let dnsd = Dnsd::builder()
            .zone(Zone::new("example.com.", file))
            .raw("[defence.rrl]\nenabled = false")
            .start();
        for &(name, qtype) in QUERIES {
            // Every size from the smallest EDNS buffer up: some cut through proofs, some
            // through the SOA and its signature, some through the answer.
            for size in (512..=1232).step_by(24) {
                let opts = QueryOpts::edns(size).with_do();
                let r =
                    Normalized::from_reply(&client::query_reply(dnsd.addr(), name, qtype, &opts));
                truncated += usize::from(r.tc);
                let at = format!("[{what}] {name} {qtype} @{size}");
                // Signatures asked for by type come without their RRsets.
                if qtype != 46 {
                    failures.extend(unsigned_or_orphaned(
                        &format!("{at} answer"),
                        &r.answer,
                        false,
                    ));
                }
                failures.extend(unsigned_or_orphaned(
                    &format!("{at} authority"),
                    &r.authority,
                    true,
                ));
            }
            // Without DO a signed zone answers as if unsigned: no RRSIG, NSEC or NSEC3
            // (unless asked for by type), and the same data otherwise.
            let plain = Normalized::from_reply(&client::query_reply(
                dnsd.addr(),
                name,
                qtype,
                &QueryOpts::edns(4096),
            ));
            let dnssec_types = [46u16, 47, 50];
            for r in plain
                .answer
                .iter()
                .chain(&plain.authority)
                .chain(&plain.additional)
            {
                if dnssec_types.contains(&r.rtype) && r.rtype != qtype {
                    failures.push(format!("[{what}] {name} {qtype} without DO: {r}"));
                }
            }
            let with_do = ask(dnsd.addr(), name, qtype);
            let strip = |s: &palisade_tests::compare::Section| {
                s.iter()
                    .filter(|r| !dnssec_types.contains(&r.rtype) || r.rtype == qtype)
                    .cloned()
                    .collect::<palisade_tests::compare::Section>()
            };
            if strip(&with_do.answer) != plain.answer || plain.rcode != with_do.rcode {
                failures.push(format!(
                    "[{what}] {name} {qtype}: the answer without DO is not the DO answer unsigned"
                ));
            }
        }
    }
    assert!(
        truncated > 20,
        "the sizes never cut a response ({truncated})"
    );
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}
