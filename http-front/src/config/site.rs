//! `[[site]]`: hosts, the upstream, tenant, path handling, headers stripped, access log.

use super::upstream::{d_retry_after, d_true};
use super::values::*;
use serde::Deserialize;
use toml::Spanned;

#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct SiteSchema {
    pub(super) name: Option<Spanned<String>>,
    pub(super) hosts: Vec<Spanned<String>>,
    pub(super) upstream: Spanned<String>,
    #[serde(default, deserialize_with = "tenant")]
    pub(super) tenant: Option<u32>,
    #[serde(
        default = "d_retry_after",
        deserialize_with = "range_u32::<1, 86400, _>"
    )]
    pub(super) retry_after_secs: u32,
    #[serde(default = "d_true")]
    pub(super) access_log: bool,
    #[serde(default)]
    pub(super) encoded_slash: EncodedSlash,
    #[serde(default)]
    pub(super) path_case_insensitive: bool,
    #[serde(default)]
    pub(super) path_params: bool,
    #[serde(default)]
    pub(super) allow_trace: bool,
    #[serde(default = "d_strip_headers")]
    pub(super) strip_headers: Vec<Spanned<String>>,
    #[serde(default)]
    pub(super) underscores_in_headers: bool,
    #[serde(default)]
    pub(super) websocket: bool,
    #[serde(
        default = "d_websocket_idle_ms",
        deserialize_with = "range::<100, 86400000, _>"
    )]
    pub(super) websocket_idle_ms: u64,
    #[serde(
        default = "d_websocket_max_secs",
        deserialize_with = "range::<1, 2592000, _>"
    )]
    pub(super) websocket_max_secs: u64,
    #[serde(default, deserialize_with = "opt_range_u32::<1, 4000000000, _>")]
    pub(super) max_requests_in_flight: Option<u32>,
    #[serde(default)]
    pub(super) cert: Option<Spanned<std::path::PathBuf>>,
    #[serde(default)]
    pub(super) key: Option<Spanned<std::path::PathBuf>>,
    #[serde(default)]
    pub(super) acme: Option<Spanned<bool>>,
}

fn d_websocket_idle_ms() -> u64 {
    60_000
}

fn d_websocket_max_secs() -> u64 {
    86_400
}

/// Request headers that origins may trust for the client's address or for the URL or
/// method they serve: stripped unless a site lists its own.
pub const DEFAULT_STRIP_HEADERS: &[&str] = &[
    "x-real-ip",
    "true-client-ip",
    "x-client-ip",
    "client-ip",
    "x-cluster-client-ip",
    "cf-connecting-ip",
    "fastly-client-ip",
    "x-original-url",
    "x-original-uri",
    "x-rewrite-url",
    "x-forwarded-server",
    "x-forwarded-port",
    "x-forwarded-prefix",
    "x-forwarded-scheme",
    "x-forwarded-ssl",
    "x-forwarded-protocol",
    "x-forwarded-uri",
    "x-forwarded-path",
    "x-url-scheme",
    "x-scheme",
    "front-end-https",
    "x-original-host",
    "x-host",
    "x-http-method-override",
    "x-http-method",
    "x-method-override",
];

pub(super) fn d_strip_headers() -> Vec<Spanned<String>> {
    DEFAULT_STRIP_HEADERS
        .iter()
        .map(|h| Spanned::new(0..0, (*h).to_string()))
        .collect()
}

/// `[[site]] encoded_slash`: what `%2F`, `%5C` and `\` in a path get.
#[derive(Clone, Copy, Debug, Deserialize, Default, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum EncodedSlash {
    /// 400 (the default: a separator to some origins, data to others).
    #[default]
    Reject,
    /// Passed on, kept encoded; one segment to the rules.
    Keep,
}
