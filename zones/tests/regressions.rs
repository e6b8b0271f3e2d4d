//! Inputs the fuzzers (fuzz/) found, kept as tests with the input inline.

use zones::{Name, ReadOptions};

fn opts() -> ReadOptions {
    let origin: Name = "example.com.".parse().unwrap();
    ReadOptions {
        allow_include: false,
        ..ReadOptions::new(&origin)
    }
}

/// fuzz/zone_read: 40 `$GENERATE` lines of 65,536 records each (1.4 KB of text) made 2.6
/// million records; the directives of a zone now share `max_generate_total`.
#[test]
fn generate_directives_share_one_budget() {
    let text: String = (0..40)
        .map(|i| format!("$GENERATE 1-65536 h{i}-$ A 10.0.0.1\n"))
        .collect();
    let mut n = 0u64;
    let e = zones::reader::read_bytes("gen.zone", text, &opts(), &mut |_| n += 1).unwrap_err();
    let msg = e.to_string();
    assert!(msg.contains("more than 1048576 records in all"), "{msg}");
    assert!(
        msg.contains("gen.zone:17:"),
        "the first directive past the budget: {msg}"
    );
    assert!(n <= 1 << 20, "{n} records made");
    // Within the budget, as many directives as wanted.
    let text: String = (0..16)
        .map(|i| format!("$GENERATE 1-65536 h{i}-$ A 10.0.0.1\n"))
        .collect();
    let mut n = 0u64;
    zones::reader::read_bytes("gen.zone", text, &opts(), &mut |_| n += 1).unwrap();
    assert_eq!(n, 16 * 65536);
}

/// Faults in meaning that Knot and NSD load from a primary's file — an SSHFP fingerprint of
/// another length than its type's, a ZONEMD digest under 12 octets, a CDS digest of another
/// length than its type's — are loaded and warned
/// of (refused, the zone was served by them and not by dnsd); a DS digest of the wrong length
/// stays refused, as Knot and BIND refuse it.
#[test]
fn faults_knot_and_nsd_load_are_warned_of_and_a_bad_ds_refused() {
    let text = "$TTL 300\n@ SOA ns h 1 3600 600 86400 300\n@ NS ns\nns A 192.0.2.1\n\
                @ ZONEMD 1 1 240 abcd\na SSHFP 1 1 abcd\n@ CDS 12345 8 2 0123456789abcdef\n";
    let mut n = 0;
    let s = zones::reader::read_bytes("z.zone", text, &opts(), &mut |_| n += 1).unwrap();
    assert_eq!(n, 6);
    let w: Vec<String> = s.warnings.iter().map(|d| d.to_string()).collect();
    assert!(
        w.iter()
            .any(|w| w.contains("ZONEMD") && w.contains("as Knot and NSD load it"))
            && w.iter()
                .any(|w| w.contains("SSHFP") && w.contains("20 octets")),
        "{w:?}"
    );
    let bad_ds = format!("{text}b DS 1 13 2 abcd\n");
    let e = zones::reader::read_bytes("z.zone", bad_ds, &opts(), &mut |_| {}).unwrap_err();
    assert!(e.to_string().contains("32-octet digest"), "{e}");
}
