//! `dnsd::query::wire::parse_query`, the hot-path query parser, on arbitrary bytes: never panics,
//! every parsed query satisfies `palisade_fuzz::check_query`, and parsing into a query
//! struct reused from the previous input (as the workers do) gives the same fields as
//! parsing into a fresh one.
#![no_main]

use std::cell::RefCell;

use dnsd::query::wire::{Query, parse_query};
use libfuzzer_sys::fuzz_target;
use palisade_fuzz::{check_query, query_fields};

thread_local! {
    static REUSED: RefCell<Query> = RefCell::new(Query::default());
}

fuzz_target!(|data: &[u8]| {
    // Nothing longer reaches the parser: TCP frames and UDP datagrams are at most 65535.
    if data.len() > 65535 {
        return;
    }
    let mut fresh = Query::default();
    let r = parse_query(data, &mut fresh);
    check_query(data, &fresh, r);
    REUSED.with(|q| {
        let q = &mut *q.borrow_mut();
        let r2 = parse_query(data, q);
        assert_eq!(
            query_fields(&fresh, r),
            query_fields(q, r2),
            "a reused Query parses differently"
        );
    });
});
