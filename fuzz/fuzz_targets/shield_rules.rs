//! shield's rules files (`Prepared::parse`) and the lists they name (`parse_prefix_list`,
//! `AsnTable::parse`, `parse_crawler_ranges`) on arbitrary text; a rules file that compiles
//! is then checked against a few requests and sources for every tenant 0..16: nothing
//! panics. Rules files that name other files are skipped (the fuzzer reads no files).
//!
//! Input: one selector byte, then the text.
#![no_main]

use std::net::IpAddr;
use std::path::Path;

use libfuzzer_sys::fuzz_target;
use shield::rules::{AsnTable, Attrs, Now, Prepared, RuleState, StateConfig};

const SOURCES: [&str; 4] = [
    "192.0.2.1",
    "203.0.113.77",
    "2001:db8::1",
    "::ffff:198.51.100.9",
];

fuzz_target!(|data: &[u8]| {
    let Some((&sel, rest)) = data.split_first() else {
        return;
    };
    let Ok(text) = std::str::from_utf8(rest) else {
        return;
    };
    let path = Path::new("/nonexistent/palisade/rules.toml");
    match sel % 8 {
        0 => {
            let _ = shield::rules::parse_prefix_list(path, text);
        }
        1 => {
            if let Ok(t) = AsnTable::parse(path, text) {
                for s in SOURCES {
                    let _ = t.lookup(s.parse().unwrap());
                }
            }
        }
        2 => {
            let _ = shield::rules::parse_crawler_ranges(path, text);
        }
        _ => {
            if palisade_fuzz::names_files(text) {
                return;
            }
            let Ok(p) = Prepared::parse(path, text) else {
                return;
            };
            let state = RuleState::new(&StateConfig::default(), None);
            let now = Now {
                unix_ms: 1_800_000_000_000,
                mono_us: 1_000_000,
            };
            let reqs: [&[(&str, &str)]; 3] = [
                &[],
                &[
                    ("path", "/wp-login.php"),
                    ("method", "POST"),
                    ("host", "a.test"),
                    ("user_agent", "sqlmap/1.0"),
                    ("header:x-attack", "1"),
                ],
                &[
                    ("qname", "xn--a.example.com."),
                    ("qtype", "ANY"),
                    ("path", ""),
                ],
            ];
            for t in 0..16 {
                for s in SOURCES {
                    let ip: IpAddr = s.parse().unwrap();
                    for r in reqs {
                        let _ = p.check(&state, t, ip, &Attrs(r), now);
                    }
                }
            }
        }
    }
});
