//! Zones signed by real signers (BIND's dnssec-signzone, ldns-signzone) with NSEC, NSEC3
//! and NSEC3 opt-out load without a single DNSSEC warning, and their NSEC3 chains are
//! indexed: every name's own NSEC3 and its wildcard's covering NSEC3 found at load.

use std::path::{Path, PathBuf};
use std::process::Command;

use zones::rrtype::t;
use zones::zone::flags;
use zones::{Name, ReadOptions, load_file};

const ZONE: &str = "\
$TTL 3600
@       SOA ns1 hostmaster 2026010101 7200 3600 1209600 300
        NS ns1
        NS ns2.other.net.
ns1     A 192.0.2.1
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
d.e.insecure2 NS ns.other.net.
cn      CNAME www
";

/// True under CI (`$CI`) or `$PALISADE_STRICT`: the same rule as `palisade_tests::in_ci`
/// (set, non-empty, not "0" or "false"), restated because `zones` does not depend on
/// the end-to-end test crate. There every signer is installed, so a missing tool or a
/// signed file that was not made fails the test instead of skipping.
fn in_ci() -> bool {
    let set =
        |k: &str| std::env::var_os(k).is_some_and(|v| !v.is_empty() && v != "0" && v != "false");
    set("CI") || set("PALISADE_STRICT")
}

/// A loud skip, or under CI ([`in_ci`]) a failure.
fn skipped(why: &str) {
    assert!(
        !in_ci(),
        "{why} (CI / PALISADE_STRICT allow no skips: every signer must be installed and work)"
    );
    eprintln!("SKIPPED: {why}");
}

fn have(tool: &str) -> bool {
    Command::new("sh")
        .arg("-c")
        .arg(format!("command -v {tool}"))
        .output()
        .is_ok_and(|o| o.status.success())
}

fn run(dir: &Path, cmd: &str) {
    let out = Command::new("sh")
        .arg("-c")
        .arg(cmd)
        .current_dir(dir)
        .output()
        .expect("run signer");
    assert!(
        out.status.success(),
        "{cmd}:\n{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Signs the test zone in `dir` with each method; returns (label, signed file).
fn signed_files(dir: &Path) -> Vec<(&'static str, PathBuf)> {
    std::fs::write(dir.join("example.com.zone"), ZONE).unwrap();
    let mut out = Vec::new();
    if have("dnssec-signzone") && have("dnssec-keygen") {
        run(
            dir,
            "dnssec-keygen -q -a ECDSAP256SHA256 -K . example.com >/dev/null",
        );
        run(
            dir,
            "dnssec-keygen -q -f KSK -a ECDSAP256SHA256 -K . example.com >/dev/null",
        );
        run(
            dir,
            "dnssec-signzone -q -o example.com -K . -S -f bind-nsec.zone example.com.zone",
        );
        run(
            dir,
            "dnssec-signzone -q -3 aabbccdd -H 0 -o example.com -K . -S -f bind-nsec3.zone example.com.zone",
        );
        run(
            dir,
            "dnssec-signzone -q -3 aabbccdd -H 5 -A -o example.com -K . -S -f bind-optout.zone example.com.zone",
        );
        out.push(("dnssec-signzone NSEC", dir.join("bind-nsec.zone")));
        out.push(("dnssec-signzone NSEC3", dir.join("bind-nsec3.zone")));
        out.push((
            "dnssec-signzone NSEC3 opt-out",
            dir.join("bind-optout.zone"),
        ));
    } else {
        skipped("dnssec-signzone not installed (bind9-utils)");
    }
    if have("ldns-signzone") && have("ldns-keygen") {
        run(
            dir,
            "ldns-keygen -a ECDSAP256SHA256 example.com > ldnskey.name",
        );
        run(
            dir,
            "ldns-signzone -o example.com. -f ldns-nsec.zone example.com.zone $(cat ldnskey.name)",
        );
        run(
            dir,
            "ldns-signzone -n -s aabbccdd -t 1 -o example.com. -f ldns-nsec3.zone example.com.zone $(cat ldnskey.name)",
        );
        out.push(("ldns-signzone NSEC", dir.join("ldns-nsec.zone")));
        out.push(("ldns-signzone NSEC3", dir.join("ldns-nsec3.zone")));
    } else {
        skipped("ldns-signzone not installed (ldnsutils)");
    }
    // A signer that exits 0 without writing its file is a broken setup, never a skip (in
    // CI or not): say which file, rather than fail later on loading it.
    for (what, file) in &out {
        assert!(
            std::fs::metadata(file).is_ok_and(|m| m.is_file() && m.len() > 0),
            "{what}: the signer succeeded but {} was not made",
            file.display()
        );
    }
    out
}

#[test]
fn signed_zones_load_clean_and_are_indexed() {
    let dir = tempfile::tempdir().unwrap();
    let origin: Name = "example.com.".parse().unwrap();
    let files = signed_files(dir.path());
    if files.is_empty() {
        skipped("no signed zone was made");
    }
    for (what, file) in files {
        let l = load_file(&file, &origin, &ReadOptions::new(&origin))
            .unwrap_or_else(|e| panic!("{what}: {e}"));
        let w: Vec<String> = l.warnings.iter().map(|d| d.msg.clone()).collect();
        // The only warning allowed: the glue-less NS target of the test zone is out of zone.
        assert!(w.is_empty(), "{what}: {w:#?}");
        let z = &l.zone;
        assert!(z.rrsig(0, t::SOA).is_some(), "{what}: signed");
        if what.ends_with("NSEC") {
            assert!(z.has_nsec(), "{what}");
            // A missing name is covered by the NSEC of its predecessor.
            let lower = Name::parse("nothere.example.com.", None).unwrap();
            let c = z.nsec_covering(lower.as_wire()).expect("covering NSEC");
            assert!(z.rrset(c, t::NSEC).is_some());
        } else {
            let chain = z.nsec3().expect("NSEC3 chain");
            assert!(chain.params().is_some(), "{what}");
            // Every authoritative name has its NSEC3, except what opt-out leaves out.
            for id in z.node_ids() {
                let n = z.node(id);
                if n.has(flags::OCCLUDED) {
                    continue;
                }
                let opted = what.contains("opt-out")
                    && (n.has(flags::DELEG) && z.rrset(id, t::DS).is_none() || n.has(flags::EMPTY));
                if !opted {
                    assert!(
                        chain.node_match(id).is_some(),
                        "{what}: no NSEC3 for {:?}",
                        Name::from_wire(z.node_name(id))
                    );
                }
                assert!(chain.wildcard_cover(id).is_some(), "{what}: wildcard cover");
            }
            // And a query-time hash finds the same entries.
            let p = chain.params().unwrap();
            let apex_hash = p.hash(z.apex().as_wire());
            assert_eq!(chain.find_match(&apex_hash), chain.node_match(0));
        }
        // Printed and read back, the signed zone is the same.
        let text = zones::present::zone_to_text(z);
        let again =
            zones::load_bytes("printed", text, &origin, &ReadOptions::new(&origin)).unwrap();
        assert_eq!(again.zone.record_count(), z.record_count(), "{what}");
    }
}
