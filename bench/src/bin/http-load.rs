//! http-load: the HTTP load generator of the http-front benchmarks, for what wrk cannot do:
//! connections from many source addresses (a botnet of unique addresses on loopback, each
//! connection from the next address of a range), a fixed number of requests per connection,
//! or a source the node does not count as its own (wrk always connects from 127.0.0.1, which
//! the never-block policy protects).
//!
//! One thread (pin it with taskset), `--conns` connections kept busy for `--seconds`; each
//! sends `GET PATH` with `Host` and `User-Agent` and reads the whole response (Content-Length
//! or chunked framing is not needed: the benchmark's answers carry a length), records its
//! latency, and after `--per-conn` requests (0: no limit) reconnects from the next source.
//! Prints one JSON object: requests, req/s, latency percentiles (us), non-2xx, errors,
//! connections made.
//!
//! With `--tls`, each connection shakes hands first (rustls, a full handshake every time:
//! no resumption, the certificate not verified), with the server name `--sni` (`{}`
//! replaced by the connection's number modulo `--sni-count`): with `--per-conn 1` it
//! measures TLS handshakes against a server holding thousands of certificates.

use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4};
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use clap::Parser;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::{TcpSocket, TcpStream};

/// HTTP load from many source addresses.
#[derive(Parser)]
#[command(name = "http-load")]
struct Cli {
    /// Where to connect.
    #[arg(long)]
    target: SocketAddr,
    /// The Host header.
    #[arg(long, default_value = "localhost")]
    host: String,
    /// The request path.
    #[arg(long, default_value = "/")]
    path: String,
    /// The User-Agent header.
    #[arg(long, default_value = "http-load")]
    ua: String,
    /// Concurrent connections.
    #[arg(long, default_value_t = 64)]
    conns: usize,
    /// How long to run.
    #[arg(long, default_value_t = 10.0)]
    seconds: f64,
    /// Source addresses used in turn (0: the kernel's choice, 127.0.0.1 on loopback).
    #[arg(long, default_value_t = 0)]
    sources: u32,
    /// The first source address.
    #[arg(long, default_value = "127.64.0.1")]
    first_source: Ipv4Addr,
    /// Requests per connection before reconnecting from the next source (0: no limit).
    #[arg(long, default_value_t = 0)]
    per_conn: u32,
    /// TLS (HTTP/1.1 over TLS).
    #[arg(long)]
    tls: bool,
    /// The server name sent, `{}` standing for the connection's number modulo --sni-count.
    #[arg(long, default_value = "localhost")]
    sni: String,
    /// How many server names `{}` in --sni takes in turn.
    #[arg(long, default_value_t = 1)]
    sni_count: u32,
}

/// Accepts any certificate: the load, not the server's identity, is measured.
#[derive(Debug)]
struct AnyCert(Arc<rustls::crypto::CryptoProvider>);

impl rustls::client::danger::ServerCertVerifier for AnyCert {
    fn verify_server_cert(
        &self,
        _: &rustls::pki_types::CertificateDer<'_>,
        _: &[rustls::pki_types::CertificateDer<'_>],
        _: &rustls::pki_types::ServerName<'_>,
        _: &[u8],
        _: rustls::pki_types::UnixTime,
    ) -> Result<rustls::client::danger::ServerCertVerified, rustls::Error> {
        Ok(rustls::client::danger::ServerCertVerified::assertion())
    }
    fn verify_tls12_signature(
        &self,
        m: &[u8],
        c: &rustls::pki_types::CertificateDer<'_>,
        d: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(m, c, d, &self.0.signature_verification_algorithms)
    }
    fn verify_tls13_signature(
        &self,
        m: &[u8],
        c: &rustls::pki_types::CertificateDer<'_>,
        d: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(m, c, d, &self.0.signature_verification_algorithms)
    }
    fn supported_verify_schemes(&self) -> Vec<rustls::SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}

fn tls_connector() -> tokio_rustls::TlsConnector {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut cfg = rustls::ClientConfig::builder_with_provider(Arc::clone(&provider))
        .with_safe_default_protocol_versions()
        .expect("protocol versions")
        .dangerous()
        .with_custom_certificate_verifier(Arc::new(AnyCert(provider)))
        .with_no_client_auth();
    cfg.resumption = rustls::client::Resumption::disabled();
    cfg.alpn_protocols = vec![b"http/1.1".to_vec()];
    tokio_rustls::TlsConnector::from(Arc::new(cfg))
}

/// Latencies in microseconds, 1 us buckets up to 200 ms (beyond: the last bucket).
struct Histogram(Vec<u64>);

impl Histogram {
    const MAX_US: usize = 200_000;

    fn record(&mut self, us: u64) {
        let i = (us as usize).min(Self::MAX_US);
        self.0[i] += 1;
    }

    fn percentile(&self, p: f64) -> Option<u64> {
        let total: u64 = self.0.iter().sum();
        if total == 0 {
            return None;
        }
        let want = ((total as f64) * p / 100.0).ceil().max(1.0) as u64;
        let mut seen = 0;
        for (us, &n) in self.0.iter().enumerate() {
            seen += n;
            if seen >= want {
                return Some(us as u64);
            }
        }
        None
    }
}

#[derive(Default)]
struct Totals {
    requests: AtomicU64,
    non_2xx: AtomicU64,
    errors: AtomicU64,
    connects: AtomicU64,
}

async fn connect(cli: &Cli, next: &AtomicU32) -> std::io::Result<TcpStream> {
    let sock = TcpSocket::new_v4()?;
    if cli.sources > 0 {
        let i = next.fetch_add(1, Ordering::Relaxed) % cli.sources;
        let ip = Ipv4Addr::from(u32::from(cli.first_source).wrapping_add(i));
        sock.set_reuseaddr(true)?;
        sock.bind(SocketAddr::V4(SocketAddrV4::new(ip, 0)))?;
    }
    let s = sock.connect(cli.target).await?;
    s.set_nodelay(true)?;
    Ok(s)
}

/// Reads one response; its status, or `None` when the connection ended or it was malformed.
async fn response<S: AsyncRead + Unpin>(s: &mut S, buf: &mut Vec<u8>) -> Option<(u16, bool)> {
    loop {
        let mut headers = [httparse::EMPTY_HEADER; 32];
        let mut r = httparse::Response::new(&mut headers);
        if let Ok(httparse::Status::Complete(n)) = r.parse(buf) {
            let len: usize = r
                .headers
                .iter()
                .find(|h| h.name.eq_ignore_ascii_case("content-length"))
                .and_then(|h| std::str::from_utf8(h.value).ok()?.trim().parse().ok())?;
            let close = r.headers.iter().any(|h| {
                h.name.eq_ignore_ascii_case("connection") && h.value.eq_ignore_ascii_case(b"close")
            });
            let code = r.code?;
            while buf.len() < n + len {
                let mut tmp = [0u8; 16384];
                let k = s.read(&mut tmp).await.ok()?;
                if k == 0 {
                    return None;
                }
                buf.extend_from_slice(&tmp[..k]);
            }
            buf.drain(..n + len);
            return Some((code, close));
        }
        let mut tmp = [0u8; 16384];
        let k = s.read(&mut tmp).await.ok()?;
        if k == 0 {
            return None;
        }
        buf.extend_from_slice(&tmp[..k]);
    }
}

async fn worker(
    cli: Arc<Cli>,
    next: Arc<AtomicU32>,
    totals: Arc<Totals>,
    end: Instant,
) -> Histogram {
    let mut hist = Histogram(vec![0; Histogram::MAX_US + 1]);
    let req = format!(
        "GET {} HTTP/1.1\r\nHost: {}\r\nUser-Agent: {}\r\nAccept: */*\r\n\r\n",
        cli.path, cli.host, cli.ua
    );
    let mut buf = Vec::with_capacity(16384);
    let tls = cli.tls.then(tls_connector);
    // Server names in turn over all connections.
    static SNI_NEXT: AtomicU32 = AtomicU32::new(0);
    while Instant::now() < end {
        // A connect the server never answers (SYNs dropped) gives up within a second, and at
        // the end of the run.
        let limit = end
            .saturating_duration_since(Instant::now())
            .min(Duration::from_secs(1));
        let s = match tokio::time::timeout(limit, connect(&cli, &next)).await {
            Ok(Ok(s)) => s,
            _ => {
                totals.errors.fetch_add(1, Ordering::Relaxed);
                tokio::time::sleep(Duration::from_millis(1)).await;
                continue;
            }
        };
        totals.connects.fetch_add(1, Ordering::Relaxed);
        buf.clear();
        let k = SNI_NEXT.fetch_add(1, Ordering::Relaxed);
        match &tls {
            None => exchange(&cli, &totals, &mut hist, &req, &mut buf, s, end).await,
            Some(t) => {
                let name = cli
                    .sni
                    .replace("{}", &(k % cli.sni_count.max(1)).to_string());
                let Ok(name) = rustls::pki_types::ServerName::try_from(name) else {
                    totals.errors.fetch_add(1, Ordering::Relaxed);
                    continue;
                };
                match tokio::time::timeout(limit.max(Duration::from_secs(1)), t.connect(name, s))
                    .await
                {
                    Ok(Ok(ts)) => exchange(&cli, &totals, &mut hist, &req, &mut buf, ts, end).await,
                    _ => {
                        totals.errors.fetch_add(1, Ordering::Relaxed);
                    }
                }
            }
        }
    }
    hist
}

/// Requests on one connection until its limit, the end, or an error.
async fn exchange<S: AsyncRead + AsyncWrite + Unpin>(
    cli: &Cli,
    totals: &Totals,
    hist: &mut Histogram,
    req: &str,
    buf: &mut Vec<u8>,
    mut s: S,
    end: Instant,
) {
    let mut n = 0u32;
    while Instant::now() < end && (cli.per_conn == 0 || n < cli.per_conn) {
        let t0 = Instant::now();
        if s.write_all(req.as_bytes()).await.is_err() {
            totals.errors.fetch_add(1, Ordering::Relaxed);
            break;
        }
        let Some((code, close)) = response(&mut s, buf).await else {
            totals.errors.fetch_add(1, Ordering::Relaxed);
            break;
        };
        hist.record(t0.elapsed().as_micros() as u64);
        totals.requests.fetch_add(1, Ordering::Relaxed);
        if !(200..400).contains(&code) {
            totals.non_2xx.fetch_add(1, Ordering::Relaxed);
        }
        n += 1;
        if close {
            break;
        }
    }
}

fn main() {
    let cli = Arc::new(Cli::parse());
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let totals = Arc::new(Totals::default());
    let next = Arc::new(AtomicU32::new(0));
    let t0 = Instant::now();
    let end = t0 + Duration::from_secs_f64(cli.seconds);
    let hists = rt.block_on(async {
        let tasks: Vec<_> = (0..cli.conns)
            .map(|_| {
                tokio::spawn(worker(
                    Arc::clone(&cli),
                    Arc::clone(&next),
                    Arc::clone(&totals),
                    end,
                ))
            })
            .collect();
        let mut out = Vec::new();
        for t in tasks {
            out.push(t.await.expect("worker"));
        }
        out
    });
    let wall = t0.elapsed().as_secs_f64();
    let mut all = Histogram(vec![0; Histogram::MAX_US + 1]);
    for h in hists {
        for (a, b) in all.0.iter_mut().zip(h.0) {
            *a += b;
        }
    }
    let requests = totals.requests.load(Ordering::Relaxed);
    let pct = |p| {
        all.percentile(p)
            .map_or("null".to_string(), |v| v.to_string())
    };
    println!(
        "{{\"requests\": {requests}, \"rps\": {:.1}, \"p50_us\": {}, \"p90_us\": {}, \"p99_us\": {}, \
         \"non_2xx\": {}, \"errors\": {}, \"connects\": {}, \"seconds\": {wall:.3}}}",
        requests as f64 / wall,
        pct(50.0),
        pct(90.0),
        pct(99.0),
        totals.non_2xx.load(Ordering::Relaxed),
        totals.errors.load(Ordering::Relaxed),
        totals.connects.load(Ordering::Relaxed),
    );
}
