//! RDATA of every known type, both ways (`zones::rdata::{parse, check_wire, present}`),
//! checking the module's three rules on arbitrary input:
//! 1. `check_wire` accepts exactly the RDATA that the RFC 3597 `\# LEN HEX` form may carry;
//! 2. text never yields RDATA that `check_wire` refuses;
//! 3. `present` prints text that `parse` reads back to the same octets.
//!
//! Input: two bytes choosing the type (mostly from the known types), one byte choosing wire
//! or text, then the RDATA octets or text.
#![no_main]

use libfuzzer_sys::fuzz_target;
use zones::rdata::{self, Fields};
use zones::scan::Scanner;

/// Parses RDATA-only text as a master-file entry's RDATA, relative names under `origin`:
/// the text follows an owner token, so that empty RDATA (an empty APL) is an entry too.
fn parse_text(rtype: u16, text: &[u8], origin: &[u8]) -> Option<Result<Vec<u8>, String>> {
    let mut s = Scanner::from_bytes([&b"x "[..], text].concat());
    let mut toks = Vec::new();
    s.next_entry(&mut toks).ok()??;
    let mut f = Fields::new(&s, &toks[1..]);
    let mut out = Vec::new();
    Some(
        rdata::parse(rtype, &mut f, origin, &mut out)
            .map(|()| out)
            .map_err(|e| e.msg),
    )
}

fn round_trip(rtype: u16, rd: &[u8]) {
    let mut text = String::new();
    rdata::present(rtype, rd, &mut text);
    match parse_text(rtype, text.as_bytes(), &[0]) {
        Some(Ok(back)) => assert_eq!(back, rd, "type {rtype}: {text:?} reads back differently"),
        Some(Err(e)) => panic!("type {rtype}: presented {text:?} does not parse: {e}"),
        None => panic!("type {rtype}: presented {text:?} is not one entry"),
    }
    // Names inside the RDATA lie within it and are well formed.
    rdata::names(rtype, rd, &mut |n| {
        assert!(n.offset + n.len <= rd.len(), "name outside the RDATA");
        let name = &rd[n.offset..n.offset + n.len];
        assert_eq!(name.last(), Some(&0), "name does not end at the root");
    });
    let mut canon = rd.to_vec();
    rdata::to_canonical(rtype, &mut canon);
    assert!(
        rdata::check_wire(rtype, &canon).is_ok(),
        "canonical form refused"
    );
}

fuzz_target!(|data: &[u8]| {
    if data.len() < 3 {
        return;
    }
    let sel = u16::from_be_bytes([data[0], data[1]]);
    let rtype = if sel & 0x8000 == 0 {
        zones::rrtype::TYPES[sel as usize % zones::rrtype::TYPES.len()].0
    } else {
        sel & 0x7FFF
    };
    let body = &data[3..];
    if data[2] & 1 == 0 {
        let wire_ok = rdata::check_wire(rtype, body).is_ok();
        // Rule 1: the generic form carries exactly what check_wire accepts.
        let mut generic = String::new();
        rdata::present_generic(body, &mut generic);
        match parse_text(rtype, generic.as_bytes(), &[0]) {
            Some(Ok(back)) => {
                assert!(
                    wire_ok,
                    "type {rtype}: \\# form accepted RDATA check_wire refuses"
                );
                assert_eq!(back, body);
            }
            Some(Err(_)) | None => assert!(!wire_ok, "type {rtype}: \\# form refused valid RDATA"),
        }
        if wire_ok {
            round_trip(rtype, body);
        }
    } else if let Some(Ok(rd)) = parse_text(rtype, body, b"\x07example\x03com\x00") {
        // Rule 2, then rule 3.
        assert!(
            rdata::check_wire(rtype, &rd).is_ok(),
            "type {rtype}: text gave RDATA check_wire refuses"
        );
        round_trip(rtype, &rd);
    }
});
