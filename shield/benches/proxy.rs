//! The per-datagram cost of the PROXY protocol in dnsd's UDP path: a plain query from an
//! unlisted sender (the signature check only) against a query behind a v2 header from a
//! listed proxy (the allow-list match and the parse), IPv4 and IPv6 clients.
//!
//! `cargo bench -p shield --bench proxy`.

use criterion::{Criterion, criterion_group, criterion_main};
use shield::proxy_proto::{ProxyAllow, v2_header};
use std::hint::black_box;
use std::net::SocketAddr;
use std::time::Duration;

fn query() -> Vec<u8> {
    // A 33-byte A query for www.example.com.
    let mut q = vec![0x12, 0x34, 0x01, 0x00, 0, 1, 0, 0, 0, 0, 0, 0];
    for l in ["www", "example", "com"] {
        q.push(l.len() as u8);
        q.extend_from_slice(l.as_bytes());
    }
    q.extend_from_slice(&[0, 0, 1, 0, 1]);
    q
}

fn headered(client: &str) -> Vec<u8> {
    let mut d = v2_header(client.parse().unwrap(), "192.0.2.1:53".parse().unwrap());
    d[13] = (d[13] & 0xf0) | 0x02;
    d.extend_from_slice(&query());
    d
}

fn bench(c: &mut Criterion) {
    let allow = ProxyAllow::parse(&[
        "10.0.0.0/8".into(),
        "192.0.2.53".into(),
        "2001:db8:53::/48".into(),
    ])
    .unwrap();
    let none = ProxyAllow::default();
    let proxy: SocketAddr = "192.0.2.53:40000".parse().unwrap();
    let other: SocketAddr = "198.51.100.9:40000".parse().unwrap();
    let plain = query();
    let h4 = headered("203.0.113.7:5300");
    let h6 = headered("[2001:db8::7]:5300");
    let mut g = c.benchmark_group("proxy_datagram");
    g.bench_function("no proxies configured, plain query", |b| {
        b.iter(|| black_box(none.datagram(black_box(&plain), black_box(other)).is_ok()))
    });
    g.bench_function("proxies configured, plain query from another sender", |b| {
        b.iter(|| black_box(allow.datagram(black_box(&plain), black_box(other)).is_ok()))
    });
    g.bench_function("v2 header, IPv4 client", |b| {
        b.iter(|| black_box(allow.datagram(black_box(&h4), black_box(proxy)).is_ok()))
    });
    g.bench_function("v2 header, IPv6 client", |b| {
        b.iter(|| black_box(allow.datagram(black_box(&h6), black_box(proxy)).is_ok()))
    });
    g.finish();
}

criterion_group! {
    name = benches;
    config = Criterion::default()
        .sample_size(20)
        .measurement_time(Duration::from_secs(1))
        .warm_up_time(Duration::from_millis(300));
    targets = bench
}
criterion_main!(benches);
