//! Upstreams: a pooled hyper client per `[[upstream]]` whose connector dials the configured servers in turn (HTTP/1.1 keep-alive or h2c).

use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;

use http::uri::{Authority, PathAndQuery, Scheme};
use http::{Uri, Version};
use http_body_util::Limited;
use hyper::body::Incoming;
use hyper_util::client::legacy::Client;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use tokio::net::TcpStream;

use crate::config::{self, UpstreamProtocol};

/// The body type sent upstream: the client's body, bounded by `limits.max_body_bytes`.
pub type UpBody = Limited<Incoming>;

/// Dials an upstream's servers in turn, each within the connect timeout; the URI is ignored.
#[derive(Clone, Debug)]
pub struct Connector {
    servers: Arc<[SocketAddr]>,
    next: Arc<AtomicUsize>,
    timeout: Duration,
}

impl Connector {
    async fn dial(self) -> io::Result<TokioIo<TcpStream>> {
        let n = self.servers.len();
        let start = self.next.fetch_add(1, Ordering::Relaxed);
        let mut last = io::Error::new(io::ErrorKind::NotFound, "no upstream server");
        for k in 0..n {
            let addr = self.servers[(start + k) % n];
            match tokio::time::timeout(self.timeout, TcpStream::connect(addr)).await {
                Ok(Ok(s)) => {
                    let _ = s.set_nodelay(true);
                    return Ok(TokioIo::new(s));
                }
                Ok(Err(e)) => last = e,
                Err(_) => {
                    last = io::Error::new(
                        io::ErrorKind::TimedOut,
                        format!("connect to {addr} timed out"),
                    )
                }
            }
        }
        Err(last)
    }
}

impl tower_service::Service<Uri> for Connector {
    type Response = TokioIo<TcpStream>;
    type Error = io::Error;
    type Future = Pin<Box<dyn Future<Output = io::Result<TokioIo<TcpStream>>> + Send>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, _: Uri) -> Self::Future {
        Box::pin(self.clone().dial())
    }
}

/// One upstream: its settings and its pooled client.
#[derive(Debug)]
pub struct Upstream {
    /// The settings it was built from (a reload with equal settings keeps this upstream and its pool).
    pub cfg: config::Upstream,
    /// The pooled client.
    pub client: Client<Connector, UpBody>,
    /// Pool key put in request URIs (the first server's address).
    authority: Authority,
    /// Version requests are sent with.
    pub version: Version,
}

impl Upstream {
    /// Builds the client for `cfg` (connects lazily).
    pub fn new(cfg: &config::Upstream) -> Upstream {
        let connector = Connector {
            servers: cfg.servers.clone().into(),
            next: Arc::new(AtomicUsize::new(0)),
            timeout: cfg.connect_timeout,
        };
        let mut b = Client::builder(TokioExecutor::new());
        b.pool_idle_timeout(cfg.pool_idle_timeout)
            .pool_max_idle_per_host(cfg.pool_max_idle)
            .pool_timer(TokioTimer::new())
            .timer(TokioTimer::new())
            .set_host(false);
        if cfg.protocol == UpstreamProtocol::H2c {
            b.http2_only(true)
                .http2_keep_alive_interval(Duration::from_secs(30))
                .http2_keep_alive_timeout(Duration::from_secs(20));
        }
        let authority = Authority::try_from(cfg.servers[0].to_string().as_str())
            .expect("a socket address is an authority");
        Upstream {
            cfg: cfg.clone(),
            client: b.build(connector),
            authority,
            version: match cfg.protocol {
                UpstreamProtocol::Http1 => Version::HTTP_11,
                UpstreamProtocol::H2c => Version::HTTP_2,
            },
        }
    }

    /// The URI a request for `pq` is sent with: path and query, and as authority the pool key
    /// (HTTP/1.1, where `Host` carries the client's host) or the client's host (h2c, where
    /// `:authority` must carry it; one multiplexed connection per host).
    #[inline]
    pub fn uri(&self, pq: Option<&PathAndQuery>, host: Option<&http::HeaderValue>) -> Uri {
        let mut parts = http::uri::Parts::default();
        parts.scheme = Some(Scheme::HTTP);
        let client_host = match (self.cfg.protocol, host) {
            (UpstreamProtocol::H2c, Some(h)) => Authority::try_from(h.as_bytes()).ok(),
            _ => None,
        };
        parts.authority = Some(client_host.unwrap_or_else(|| self.authority.clone()));
        parts.path_and_query = Some(
            pq.cloned()
                .unwrap_or_else(|| PathAndQuery::from_static("/")),
        );
        Uri::from_parts(parts).expect("scheme, authority and path make a URI")
    }
}
