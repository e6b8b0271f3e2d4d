//! What a challenge clearance costs to check (the request path pays it only when a
//! challenge rule matches): one HMAC-SHA256 over ~40 bytes, and the cookie's parsing.
//!
//! `cargo bench -p http-front --bench challenge`

use criterion::{Criterion, criterion_group, criterion_main};
use http::HeaderMap;
use http_front::challenge::{self, Binding, Keys};
use std::hint::black_box;

fn bench(c: &mut Criterion) {
    let keys = Keys::from_fleet(&shield::fleet_key::FleetKey::from_bytes(&[9u8; 32]));
    let b = Binding {
        site: "shop.example.com",
        ip: "198.51.100.23".parse().unwrap(),
        version: 0x1234_5678_9abc_def0,
    };
    let now = 1_800_000_000;
    let cookie = challenge::clearance(&keys, &b, now + 3600, 16);
    let mut h = HeaderMap::new();
    h.insert(
        http::header::COOKIE,
        format!("session=abc123; {}={cookie}; theme=dark", challenge::COOKIE)
            .parse()
            .unwrap(),
    );
    c.bench_function("clearance_valid", |bn| {
        bn.iter(|| challenge::clearance_valid(&keys, black_box(&b), black_box(&cookie), now))
    });
    c.bench_function("clearance_from_cookie_header", |bn| {
        bn.iter(|| {
            challenge::cookie_values(black_box(&h), challenge::COOKIE)
                .any(|v| challenge::clearance_valid(&keys, &b, v, now).is_some())
        })
    });
    c.bench_function("token_issue", |bn| {
        bn.iter(|| challenge::token(&keys, black_box(&b), now, 16))
    });
}

criterion_group!(benches, bench);
criterion_main!(benches);
