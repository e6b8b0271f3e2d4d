//! What fingerprinting costs per connection: JA4 of a real ClientHello (rustls's, with SNI
//! and ALPN) and the HTTP/2 fingerprint of a browser's first frames (SETTINGS,
//! WINDOW_UPDATE, the first HEADERS block).
//!
//! `cargo bench -p http-front --bench fingerprint`

use criterion::{Criterion, criterion_group, criterion_main};
use http_front::fingerprint::{H2Collect, ja4};
use std::hint::black_box;
use std::sync::{Arc, OnceLock};

/// The bytes of a rustls ClientHello for `example.com` offering h2 and http/1.1.
fn client_hello() -> Vec<u8> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let roots = rustls::RootCertStore::empty();
    let mut cfg = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
    cfg.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    let mut conn =
        rustls::ClientConnection::new(Arc::new(cfg), "example.com".try_into().unwrap()).unwrap();
    let mut out = Vec::new();
    conn.write_tls(&mut out).unwrap();
    out
}

fn frames() -> Vec<(u8, u8, u32, Vec<u8>)> {
    let mut settings = Vec::new();
    for (id, v) in [(1u16, 65536u32), (2, 0), (4, 6291456), (6, 262144)] {
        settings.extend_from_slice(&id.to_be_bytes());
        settings.extend_from_slice(&v.to_be_bytes());
    }
    let mut block = vec![0x82, 0x41, 11];
    block.extend_from_slice(b"example.com");
    block.extend_from_slice(&[0x87, 0x84]);
    block.extend_from_slice(&[
        0x40, 0x8a, 0xff, 0xfe, 0xfd, 0xfc, 0xfb, 0xfa, 0xf9, 0xf8, 0xf7, 0xf6, 0x02, b'a', b'b',
    ]);
    vec![
        (0x4, 0, 0, settings),
        (0x8, 0, 0, 15663105u32.to_be_bytes().to_vec()),
        (0x1, 0x5, 1, block),
    ]
}

fn bench(c: &mut Criterion) {
    let hello = client_hello();
    assert!(ja4(&hello).is_some());
    c.bench_function("ja4_rustls_client_hello", |b| {
        b.iter(|| ja4(black_box(&hello)))
    });
    let fr = frames();
    c.bench_function("h2_fingerprint_first_frames", |b| {
        b.iter(|| {
            let out = Arc::new(OnceLock::new());
            let mut col = H2Collect::new(Arc::clone(&out));
            for (kind, flags, stream, payload) in &fr {
                col.begin(*kind, *flags, *stream, payload.len());
                col.feed(black_box(payload));
                if col.end() {
                    break;
                }
            }
            out
        })
    });
}

criterion_group!(benches, bench);
criterion_main!(benches);
