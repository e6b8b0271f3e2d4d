//! Printing a compiled zone back as master-file text.

use std::fmt::Write;

use crate::name;
use crate::rdata;
use crate::rrtype;
use crate::zone::Zone;

/// Writes one record in master-file form: `owner TTL IN TYPE RDATA`.
pub fn write_record(out: &mut String, owner: &[u8], rtype: u16, ttl: u32, rdata: &[u8]) {
    let _ = name::write_presentation(owner, out);
    let _ = write!(out, "\t{ttl}\tIN\t{}\t", rrtype::to_text(rtype));
    rdata::present(rtype, rdata, out);
    out.push('\n');
}

/// The whole zone as master-file text (absolute names, canonical order, SOA first).
pub fn zone_to_text(zone: &Zone) -> String {
    let mut out = String::with_capacity(zone.record_count() * 48);
    for (owner, rtype, ttl, rdata) in zone.records() {
        write_record(&mut out, owner, rtype, ttl, rdata);
    }
    out
}
