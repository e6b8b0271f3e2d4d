//! Property: a compiled zone printed back as master-file text and read again is the same
//! zone — same records, same order.

use proptest::prelude::*;
use zones::{Name, ReadOptions, load_bytes, present};

/// A label with the characters that need escaping now and then.
fn label() -> impl Strategy<Value = String> {
    prop_oneof![
        8 => "[a-z0-9-]{1,12}",
        1 => "[a-z]{1,3}\\.[a-z]{1,3}".prop_map(|s| s.replace('.', "\\.")),
        1 => prop::collection::vec(any::<u8>(), 1..6).prop_map(|v| {
            v.iter().map(|b| format!("\\{b:03}")).collect::<String>()
        }),
        1 => Just("*".to_string()),
    ]
}

fn owner() -> impl Strategy<Value = String> {
    prop::collection::vec(label(), 1..4).prop_map(|ls| ls.join("."))
}

fn char_string() -> impl Strategy<Value = String> {
    prop::collection::vec(any::<u8>(), 0..40).prop_map(|v| {
        let mut s = String::from("\"");
        for b in v {
            match b {
                b'"' | b'\\' => {
                    s.push('\\');
                    s.push(b as char);
                }
                0x20..=0x7e => s.push(b as char),
                _ => s.push_str(&format!("\\{b:03}")),
            }
        }
        s.push('"');
        s
    })
}

fn rdata() -> impl Strategy<Value = String> {
    prop_oneof![
        any::<[u8; 4]>().prop_map(|a| format!("A {}.{}.{}.{}", a[0], a[1], a[2], a[3])),
        any::<[u8; 16]>().prop_map(|a| format!("AAAA {}", std::net::Ipv6Addr::from(a))),
        prop::collection::vec(char_string(), 1..4).prop_map(|v| format!("TXT {}", v.join(" "))),
        (any::<u16>(), owner()).prop_map(|(p, n)| format!("MX {p} {n}")),
        (any::<u16>(), any::<u16>(), any::<u16>(), owner())
            .prop_map(|(a, b, c, n)| format!("SRV {a} {b} {c} {n}")),
        (char_string(), char_string()).prop_map(|(a, b)| format!("HINFO {a} {b}")),
        (0u8..=255, "[a-z0-9]{1,10}", char_string())
            .prop_map(|(f, t, v)| format!("CAA {f} {t} {v}")),
        (1u8..5, 1u8..3, prop::collection::vec(any::<u8>(), 32..=32)).prop_map(|(a, f, d)| {
            // SHA-1 fingerprints are 20 octets, SHA-256 ones 32.
            let n = if f == 1 { 20 } else { 32 };
            format!(
                "SSHFP {a} {f} {}",
                d[..n]
                    .iter()
                    .map(|b| format!("{b:02x}"))
                    .collect::<String>()
            )
        }),
        prop::collection::vec(any::<u8>(), 0..30).prop_map(|d| {
            format!(
                "TYPE65000 \\# {} {}",
                d.len(),
                d.iter().map(|b| format!("{b:02x}")).collect::<String>()
            )
        }),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    #[test]
    fn print_then_read_gives_the_same_zone(
        recs in prop::collection::vec((owner(), 0u32..100_000, rdata()), 1..60)
    ) {
        let origin: Name = "example.com.".parse().unwrap();
        let mut text = String::from(
            "$TTL 300\n@ SOA ns1 hostmaster 1 7200 3600 1209600 300\n@ NS ns1\nns1 A 192.0.2.1\n",
        );
        for (o, ttl, rd) in &recs {
            text.push_str(&format!("{o} {ttl} IN {rd}\n"));
        }
        let opts = ReadOptions::new(&origin);
        let first = load_bytes("gen", text.clone(), &origin, &opts)
            .map_err(|e| format!("{e}\n{text}"))
            .unwrap();
        let printed = present::zone_to_text(&first.zone);
        let again = load_bytes("printed", printed.clone(), &origin, &opts)
            .map_err(|e| format!("{e}\n{printed}"))
            .unwrap();
        let a: Vec<_> = first.zone.records().collect();
        let b: Vec<_> = again.zone.records().collect();
        prop_assert_eq!(a, b, "printed:\n{}", printed);
    }
}
