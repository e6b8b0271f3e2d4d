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
