//! `zones::reader::read_bytes` (scanner, directives, RDATA) on arbitrary master-file text,
//! `$INCLUDE` off: it never panics or hangs, and every record it yields has an absolute,
//! well-formed owner and RDATA that `zones::rdata::check_wire` accepts.
#![no_main]

use libfuzzer_sys::fuzz_target;
use zones::{Name, ReadOptions};

fuzz_target!(|data: &[u8]| {
    let origin: Name = "example.com.".parse().unwrap();
    // `$GENERATE` budgets lowered so that each input stays fast (the defaults are tested
    // in zones/tests/regressions.rs); everything else as the server reads zones.
    let opts = ReadOptions {
        allow_include: false,
        max_generate: 1024,
        max_generate_total: 4096,
        ..ReadOptions::new(&origin)
    };
    let mut n = 0u64;
    let r = zones::reader::read_bytes("fuzz.zone", data, &opts, &mut |r| {
        n += 1;
        let o = r.owner;
        assert!(!o.is_empty() && o.len() <= 255, "owner length");
        let mut p = 0;
        while o[p] != 0 {
            assert!(o[p] <= 63, "owner label");
            p += 1 + o[p] as usize;
            assert!(p < o.len(), "owner runs past its end");
        }
        assert_eq!(p + 1, o.len(), "bytes after the owner's root label");
        if let Err(e) = zones::rdata::check_wire(r.rtype, r.rdata) {
            panic!("type {} read from text fails check_wire: {e}", r.rtype);
        }
    });
    if let Ok(s) = r {
        assert_eq!(s.records, n, "record count");
        assert!(s.warnings.len() <= opts.max_warnings);
    }
});
