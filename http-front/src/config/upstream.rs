//! `[[upstream]]`: an origin's servers, protocol, timeouts and pool.

use std::fmt;
use std::net::SocketAddr;

use super::values::*;
use serde::Deserialize;
use toml::Spanned;

/// Protocol spoken to an upstream.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum UpstreamProtocol {
    /// HTTP/1.1 with pooled keep-alive connections.
    #[default]
    Http1,
    /// HTTP/2 over cleartext by prior knowledge, multiplexed.
    H2c,
    /// HTTP/1.1 over TLS, pooled.
    Https,
    /// HTTP/2 over TLS (ALPN `h2`), multiplexed.
    H2,
}

impl UpstreamProtocol {
    /// Whether requests go out over HTTP/2 (one multiplexed connection per worker).
    pub fn is_h2(self) -> bool {
        matches!(self, UpstreamProtocol::H2c | UpstreamProtocol::H2)
    }

    /// Whether it runs over TLS.
    pub fn is_tls(self) -> bool {
        matches!(self, UpstreamProtocol::Https | UpstreamProtocol::H2)
    }
}

/// The PROXY protocol header sent at the start of each upstream connection.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum SendProxy {
    /// The version 1 text line (`PROXY TCP4 ...`).
    V1,
    /// The version 2 binary header.
    V2,
}

#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct UpstreamSchema {
    pub(super) name: Spanned<String>,
    pub(super) servers: Spanned<Vec<SocketAddr>>,
    #[serde(default)]
    pub(super) protocol: UpstreamProtocol,
    #[serde(default = "d_connect", deserialize_with = "range::<1, 600000, _>")]
    pub(super) connect_timeout_ms: u64,
    #[serde(default = "d_response", deserialize_with = "range::<1, 3600000, _>")]
    pub(super) response_timeout_ms: u64,
    #[serde(default = "d_pool_idle", deserialize_with = "range::<0, 3600000, _>")]
    pub(super) pool_idle_timeout_ms: u64,
    #[serde(
        default = "d_pool_max",
        deserialize_with = "range_usize::<0, 100000, _>"
    )]
    pub(super) pool_max_idle: usize,
    #[serde(default)]
    pub(super) send_proxy: Option<Spanned<SendProxy>>,
    #[serde(default)]
    pub(super) ca_file: Option<Spanned<std::path::PathBuf>>,
    #[serde(default)]
    pub(super) tls_server_name: Option<Spanned<String>>,
    #[serde(default)]
    pub(super) client_cert: Option<Spanned<std::path::PathBuf>>,
    #[serde(default)]
    pub(super) client_key: Option<Spanned<std::path::PathBuf>>,
}

pub(super) fn d_connect() -> u64 {
    2_000
}
pub(super) fn d_response() -> u64 {
    30_000
}
pub(super) fn d_pool_idle() -> u64 {
    60_000
}
pub(super) fn d_pool_max() -> usize {
    256
}
pub(super) fn d_retry_after() -> u32 {
    1
}
pub(super) fn d_true() -> bool {
    true
}

impl fmt::Display for UpstreamProtocol {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            UpstreamProtocol::Http1 => "http1",
            UpstreamProtocol::H2c => "h2c",
            UpstreamProtocol::Https => "https",
            UpstreamProtocol::H2 => "h2",
        })
    }
}
