//! Differential: `dnsd::query::wire::parse_query` against hickory-proto's `Message::from_vec` on the
//! same bytes. They must agree on accepting a query and, when both accept, on the question
//! and EDNS; the disagreements that are by design are listed, and checked mechanically, in
//! `palisade_fuzz::differential`.
#![no_main]

use dnsd::query::wire::{Query, parse_query};
use libfuzzer_sys::fuzz_target;
use palisade_fuzz::differential::{hickory_accepts, normalise, ours_seen, ours_stricter};

fuzz_target!(|data: &[u8]| {
    if data.len() > 65535 {
        return;
    }
    let mut q = Query::default();
    let ours = parse_query(data, &mut q);
    let theirs = hickory_accepts(data);
    match (ours, theirs) {
        (Ok(()), Some(seen)) => assert_eq!(ours_seen(&q), seen, "parsers disagree"),
        (Ok(()), None) => {
            // Only what ours never reads may explain it.
            let norm = normalise(data).expect("ours accepted an unframed message");
            match hickory_accepts(&norm) {
                Some(seen) => assert_eq!(ours_seen(&q), seen, "parsers disagree (normalised)"),
                None => panic!(
                    "ours accepts, hickory rejects even with the unread parts neutralised: {:?}",
                    hickory_proto::op::Message::from_vec(&norm).err()
                ),
            }
        }
        (Err(e), Some(_)) => {
            if ours_stricter(data).is_none() {
                panic!("ours rejects ({e:?}) a query hickory accepts, for no listed reason");
            }
        }
        (Err(_), None) => {}
    }
});
