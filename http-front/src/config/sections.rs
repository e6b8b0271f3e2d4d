//! The smaller sections: `[tls]`, `[forwarded]`, `[rules]`, `[xdp]`, `[access_log]`,
//! `[metrics]`, `[control]`.

use std::net::SocketAddr;
use std::path::PathBuf;

use super::values::*;
use serde::Deserialize;
use shield::events::Output;
use shield::rules::StateConfig;
use toml::Spanned;

/// `[tls]`: TLS listeners through rustls (ALPN h2 and http/1.1).
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct TlsSchema {
    pub(super) listen: Vec<SocketAddr>,
    #[serde(default)]
    pub(super) cert: Option<Spanned<PathBuf>>,
    #[serde(default)]
    pub(super) key: Option<Spanned<PathBuf>>,
    #[serde(default)]
    pub(super) cert_dir: Option<Spanned<PathBuf>>,
    #[serde(default)]
    pub(super) unknown_sni: Option<Spanned<UnknownSni>>,
    #[serde(
        default = "default_max_client_hello",
        deserialize_with = "range_usize::<512, 65535, _>"
    )]
    pub(super) max_client_hello_bytes: usize,
}

fn default_max_client_hello() -> usize {
    16 << 10
}

/// `[tls] unknown_sni`: what a handshake without a known server name gets.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum UnknownSni {
    /// The `[tls] cert` pair.
    Default,
    /// No certificate: the handshake fails.
    Refuse,
}

/// `[forwarded]`: what the proxy tells the upstream about the client.
#[derive(Clone, Debug, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct Forwarded {
    /// Set `X-Forwarded-For`, `X-Forwarded-Proto` and `X-Forwarded-Host`.
    pub x_forwarded: bool,
    /// Set `Forwarded: for=...;proto=...;host=...` (RFC 7239).
    pub forwarded: bool,
    /// Append to the client's own `X-Forwarded-For`/`Forwarded` instead of replacing them (only behind a trusted proxy).
    pub trust_incoming: bool,
    /// Set `X-Real-IP` to the client address (replacing the client's own).
    pub x_real_ip: bool,
}

impl Default for Forwarded {
    fn default() -> Self {
        Forwarded {
            x_forwarded: true,
            forwarded: true,
            trust_incoming: false,
            x_real_ip: true,
        }
    }
}

#[derive(Clone, Debug, Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub(super) struct RulesSchema {
    pub(super) file: Option<Spanned<PathBuf>>,
    #[serde(default)]
    pub(super) state: StateConfig,
}

#[derive(Clone, Debug, Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub(super) struct XdpSchema {
    pub(super) pin_path: Option<PathBuf>,
}

/// `[access_log]`: sampled, normalised records of passed requests.
#[derive(Clone, Debug, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct AccessLog {
    /// Where records go; `none` turns access logs off. Start-time only.
    pub output: Output,
    /// Share of passed requests logged (1.0: all; 0.01: one in a hundred, deterministic per thread).
    #[serde(deserialize_with = "fraction")]
    pub sample_rate: f64,
    /// Records queued for the writer; beyond, records are dropped and counted.
    #[serde(deserialize_with = "range_usize::<1, 10000000, _>")]
    pub queue: usize,
    /// Bytes of the records queued (their URLs, User-Agents, Referers...); beyond, records
    /// are dropped and counted. Start-time only.
    #[serde(deserialize_with = "range_usize::<65536, 17179869184, _>")]
    pub queue_bytes: usize,
    /// Also send records to `[events.clickhouse]`'s access table. Start-time only.
    pub clickhouse: bool,
}

impl Default for AccessLog {
    fn default() -> Self {
        AccessLog {
            output: Output::None,
            sample_rate: 0.01,
            queue: 65_536,
            queue_bytes: 64 << 20,
            clickhouse: false,
        }
    }
}

#[derive(Clone, Debug, Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub(super) struct MetricsSchema {
    pub(super) listen: Option<SocketAddr>,
    #[serde(default)]
    pub(super) allow: Vec<ipnet::IpNet>,
}

#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct ControlSchema {
    pub(super) socket: Option<PathBuf>,
    #[serde(
        default = "shield::control::default_mode",
        deserialize_with = "shield::control::octal"
    )]
    pub(super) mode: u32,
    pub(super) group: Option<String>,
}

impl Default for ControlSchema {
    fn default() -> Self {
        ControlSchema {
            socket: None,
            mode: shield::control::DEFAULT_MODE,
            group: None,
        }
    }
}

/// `[acme]`: certificates from an ACME (RFC 8555) server for sites with `acme = true` (see [`crate::acme`]).
#[derive(Clone, Debug, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Acme {
    /// The directory URL of the ACME server.
    pub directory: String,
    /// Contact URLs of the account (`mailto:ops@example.com`).
    #[serde(default)]
    pub contact: Vec<String>,
    /// Where the account and the certificates are kept (made 0700).
    pub state_dir: PathBuf,
    /// Roots the ACME server's HTTPS is verified against (a test CA); default: the system's.
    #[serde(default)]
    pub ca_file: Option<PathBuf>,
    /// The challenge answered: `http-01` (port 80, `server.listen`) or `tls-alpn-01` (`[tls] listen`).
    #[serde(default)]
    pub challenge: AcmeChallenge,
    /// Least wait after a failed order; doubled per failure up to an hour, with jitter.
    #[serde(default = "d_acme_retry", deserialize_with = "range::<1, 86400, _>")]
    pub retry_secs: u64,
    /// Longest the account may take to load or be made; an order may take three times it
    /// (a server that never answers counts as a failed order).
    #[serde(default = "d_acme_timeout", deserialize_with = "range::<1, 600, _>")]
    pub timeout_secs: u64,
}

fn d_acme_retry() -> u64 {
    60
}

fn d_acme_timeout() -> u64 {
    60
}

/// `[acme] challenge`.
#[derive(Clone, Copy, Debug, Default, Deserialize, PartialEq, Eq)]
pub enum AcmeChallenge {
    /// `http://NAME/.well-known/acme-challenge/TOKEN`, answered before any rule.
    #[default]
    #[serde(rename = "http-01")]
    Http01,
    /// A handshake with ALPN `acme-tls/1` gets a certificate that proves the key (RFC 8737).
    #[serde(rename = "tls-alpn-01")]
    TlsAlpn01,
}

/// `[challenge]`: the page and clearance of `challenge` rules (see [`crate::challenge`]).
#[derive(Clone, Debug, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct Challenge {
    /// The fleet key file clearances are signed with (the `[redis] key_file` may serve: each
    /// use derives its own key); without one, a key of this process: clearances then hold on
    /// this node only, until it restarts.
    pub key_file: Option<PathBuf>,
    /// How long a clearance lets its client through challenge rules.
    #[serde(deserialize_with = "range::<1, 2592000, _>")]
    pub clearance_secs: u64,
    /// How long a challenge may take to solve (and a solution be sent) after it was issued.
    #[serde(deserialize_with = "range::<1, 86400, _>")]
    pub solve_secs: u64,
    /// Leading zero bits of the proof of work, for rules that set no `difficulty`.
    #[serde(deserialize_with = "difficulty")]
    pub difficulty: u8,
    /// After this long the page gives up and says so (a browser that cannot solve it).
    #[serde(deserialize_with = "range::<1, 3600, _>")]
    pub page_timeout_secs: u64,
}

impl Default for Challenge {
    fn default() -> Self {
        Challenge {
            key_file: None,
            clearance_secs: 3600,
            solve_secs: 300,
            difficulty: 16,
            page_timeout_secs: 30,
        }
    }
}

fn difficulty<'de, D: serde::Deserializer<'de>>(d: D) -> Result<u8, D::Error> {
    range::<1, { shield::rules::MAX_DIFFICULTY as u64 }, D>(d).map(|v| v as u8)
}
