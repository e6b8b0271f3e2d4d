//! http-front: Palisade's WAF reverse proxy (hyper, HTTP/1.1 and HTTP/2) on the shared policy core, `shield`.
//!
//! A request walks, with early exits: the block map at accept (a blocked source costs one
//! lookup and a reset, before any byte is read) → Host → the site prepared for it → size
//! limits → the site's shield rules (skipped entirely when it has none) → the upstream's
//! connection pool. 403 and 429 go to the shield aggregator; a source crossing its tenant's
//! escalation threshold enters the block map, which closes its open connections (HTTP/2 with
//! GOAWAY). See `config` for `front.toml`.
//!
//! Files by job: [`config`] (the file), [`front`] (running state and reload), [`client_conn`]
//! (accept and connection lifecycle), [`h1watch`] (request heads hyper reads in part), [`h2watch`] (HPACK size updates h2 misanswers), [`conn_registry`] (connections by source), [`service`] (the
//! request path), [`target`] (Host and path as the rules see them and the origin gets them), [`site`] (Host → site), [`forward`] (forwarding), [`forward::h1`] (the HTTP/1.1
//! upstream exchange), [`forward::reqbody`] (request bodies buffered and timed), [`forward::relay`] (response bodies a slow reader cannot hold an upstream with), [`forward::upstream`] (pools), [`view`] (the request as the rules see it),
//! [`blockwatch`] (block feed → closed connections), [`challenge`] (the proof-of-work page and its clearance), [`local`] (per-thread handles),
//! [`synfilter`] (blocked IPv4 sources' SYNs dropped in the kernel), [`policy`] (what no
//! automatic block may reach), [`access_log`],
//! [`counters`] (the request path's own counters), [`sources`] (the other counter sources:
//! connections, sites, SYN filter, stalls), [`tls`], [`server`] (start, signals, stop).

/// `AsyncWrite` for a read-side watch `$ty` whose writes pass straight to its field `$io`
/// (the ClientHello tap, the HTTP/1.1 head watch): one delegation instead of a copy each.
macro_rules! write_through {
    ($ty:ident, $io:ident) => {
        impl<I: tokio::io::AsyncWrite + Unpin> tokio::io::AsyncWrite for $ty<I> {
            fn poll_write(
                self: std::pin::Pin<&mut Self>,
                cx: &mut std::task::Context<'_>,
                buf: &[u8],
            ) -> std::task::Poll<std::io::Result<usize>> {
                std::pin::Pin::new(&mut self.get_mut().$io).poll_write(cx, buf)
            }

            fn poll_write_vectored(
                self: std::pin::Pin<&mut Self>,
                cx: &mut std::task::Context<'_>,
                bufs: &[std::io::IoSlice<'_>],
            ) -> std::task::Poll<std::io::Result<usize>> {
                std::pin::Pin::new(&mut self.get_mut().$io).poll_write_vectored(cx, bufs)
            }

            fn is_write_vectored(&self) -> bool {
                self.$io.is_write_vectored()
            }

            fn poll_flush(
                self: std::pin::Pin<&mut Self>,
                cx: &mut std::task::Context<'_>,
            ) -> std::task::Poll<std::io::Result<()>> {
                std::pin::Pin::new(&mut self.get_mut().$io).poll_flush(cx)
            }

            fn poll_shutdown(
                self: std::pin::Pin<&mut Self>,
                cx: &mut std::task::Context<'_>,
            ) -> std::task::Poll<std::io::Result<()>> {
                std::pin::Pin::new(&mut self.get_mut().$io).poll_shutdown(cx)
            }
        }
    };
}

pub mod access_log;
pub mod acme;
pub mod blockwatch;
pub mod challenge;
pub mod clickhouse;
pub mod client_conn;
pub mod config;
pub mod conn_registry;
pub mod counters;
pub mod fingerprint;
pub mod forward;
pub mod front;
pub mod h1watch;
pub mod h2watch;
pub mod local;
pub mod policy;
pub mod server;
pub mod service;
pub mod site;
pub mod sources;
pub mod synfilter;
pub mod target;
pub mod tls;
pub mod view;
