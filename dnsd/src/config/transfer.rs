//! `[transfer]` and `[[tsig_key]]`, and the values zones' transfer keys hold (addresses,
//! prefixes, key names), checked at load with the key that is wrong.

use std::net::{IpAddr, SocketAddr};

use base64::Engine as _;
use ipnet::IpNet;
use serde::Deserialize;
use zones::Name;

use super::Config;

/// A TSIG algorithm (RFC 8945).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TsigAlgorithm {
    /// `hmac-sha256`.
    HmacSha256,
    /// `hmac-sha512`.
    HmacSha512,
}

impl TsigAlgorithm {
    /// The algorithm a config names (`hmac-sha256`, `hmac-sha512`, with or without the final dot).
    pub fn from_config(s: &str) -> Option<TsigAlgorithm> {
        match s.trim_end_matches('.').to_ascii_lowercase().as_str() {
            "hmac-sha256" => Some(TsigAlgorithm::HmacSha256),
            "hmac-sha512" => Some(TsigAlgorithm::HmacSha512),
            _ => None,
        }
    }
}

/// `[[tsig_key]]`: a TSIG key.
#[derive(Debug, Clone, Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub struct TsigKeyConfig {
    /// Key name (a domain name, as peers name it).
    pub name: String,
    /// `hmac-sha256` or `hmac-sha512`.
    pub algorithm: String,
    /// The shared secret, base64.
    pub secret: String,
}

/// `[transfer]`: bounds of zone transfers in and out, and NOTIFY retries.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct TransferConfig {
    /// Outgoing transfers at once, all clients together.
    pub max_out: usize,
    /// Outgoing transfers at once to one client address.
    pub max_out_per_client: usize,
    /// Incoming transfers (secondary zones) at once.
    pub max_in: usize,
    /// Bytes of differences kept per zone for IXFR (0: no journal, IXFR falls back to AXFR).
    pub journal_max_bytes: usize,
    /// Bytes of differences kept for all zones together (the oldest steps of any zone go
    /// first past it).
    pub journal_total_max_bytes: usize,
    /// Records an incoming transfer may carry.
    pub max_in_records: usize,
    /// Bytes (of DNS messages) an incoming transfer may carry: a primary cannot make one
    /// zone fill memory and disk.
    pub max_in_bytes: u64,
    /// Bytes per second an incoming transfer must bring on average once its first 5 s are
    /// past (0: no minimum): a primary trickling its answer cannot hold a `max_in` slot.
    pub in_min_rate_bytes_per_sec: u64,
    /// Seconds an incoming transfer may take in all.
    pub in_timeout_secs: u64,
    /// Seconds to wait for each message of an incoming transfer or a SOA answer.
    pub message_timeout_secs: u64,
    /// Bytes per second a client must take of a transfer we serve (0: no minimum): each
    /// message must be written within 2 s plus its length at this rate, so that slow
    /// readers cannot hold every `max_out` slot.
    pub out_min_rate_bytes_per_sec: u64,
    /// NOTIFY attempts per target.
    pub notify_retries: u32,
    /// Milliseconds to wait for the first NOTIFY answer (doubled on each retry).
    pub notify_timeout_ms: u64,
    /// The addresses NOTIFY, SOA queries and transfers go out from, at most one per family
    /// (Knot's `via`, NSD's `outgoing-interface`): a peer's address-based ACL sees a service
    /// address, not whatever the routing table picks.
    pub source: Vec<IpAddr>,
}

impl TransferConfig {
    /// The source address for a peer at `to` (None: the routing table's choice).
    pub fn source_for(&self, to: SocketAddr) -> Option<IpAddr> {
        self.source
            .iter()
            .copied()
            .find(|s| s.is_ipv4() == to.is_ipv4())
    }
}

impl Default for TransferConfig {
    fn default() -> Self {
        TransferConfig {
            max_out: 16,
            max_out_per_client: 2,
            max_in: 4,
            journal_max_bytes: 16 << 20,
            journal_total_max_bytes: 512 << 20,
            max_in_records: 10_000_000,
            max_in_bytes: 1 << 30,
            in_min_rate_bytes_per_sec: 8 * 1024,
            in_timeout_secs: 600,
            message_timeout_secs: 30,
            out_min_rate_bytes_per_sec: 32 * 1024,
            notify_retries: 5,
            notify_timeout_ms: 1000,
            source: Vec::new(),
        }
    }
}

/// `transfer_tls`: how a zone's `tls:` primaries are verified (zone transfers over TLS,
/// RFC 9103). With `name`, the primary's certificate must be valid for it (against `ca_file`,
/// else the system's roots); with `pin_sha256`, its key must be one of the pins; with both,
/// both must hold.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub struct TransferTls {
    /// The name the primaries' certificates must be valid for (sent as SNI).
    pub name: Option<String>,
    /// Base64 SHA-256 digests of the SubjectPublicKeyInfo of the primaries' certificates
    /// (RFC 7858 §4.2's pins, `openssl x509 -pubkey | openssl pkey -pubin -outform der |
    /// openssl dgst -sha256 -binary | base64`).
    #[serde(default)]
    pub pin_sha256: Vec<String>,
    /// PEM roots that `name` is verified against (else the system's).
    pub ca_file: Option<std::path::PathBuf>,
    /// A client certificate chain (PEM) for primaries that want one.
    pub client_cert: Option<std::path::PathBuf>,
    /// Its private key (PEM).
    pub client_key: Option<std::path::PathBuf>,
}

impl TransferTls {
    /// Makes its relative paths relative to `dir` (the config file's).
    pub fn resolve_paths(&mut self, dir: &std::path::Path) {
        for f in [
            &mut self.ca_file,
            &mut self.client_cert,
            &mut self.client_key,
        ]
        .into_iter()
        .flatten()
        {
            if f.is_relative() {
                *f = dir.join(&*f);
            }
        }
    }

    /// The pins' digests, or why one is not a base64 SHA-256 digest.
    pub fn pins(&self) -> Result<Vec<[u8; 32]>, String> {
        self.pin_sha256
            .iter()
            .map(|p| {
                base64::engine::general_purpose::STANDARD
                    .decode(p.trim())
                    .ok()
                    .and_then(|v| <[u8; 32]>::try_from(v).ok())
                    .ok_or_else(|| format!("{p:?} is not a base64 SHA-256 digest (44 characters)"))
            })
            .collect()
    }

    /// Checks what can be checked without a peer: `Err((field, message))`.
    pub fn check(&self) -> Result<(), (&'static str, String)> {
        if self.name.is_none() && self.pin_sha256.is_empty() {
            return Err((
                "name",
                "set name (the primary's certificate name) or pin_sha256 (its key), or both".into(),
            ));
        }
        if let Some(n) = &self.name {
            rustls::pki_types::ServerName::try_from(n.as_str())
                .map_err(|e| ("name", format!("{n:?}: {e}")))?;
        }
        self.pins().map_err(|m| ("pin_sha256", m))?;
        if let Some(ca) = &self.ca_file {
            let pem =
                std::fs::read(ca).map_err(|e| ("ca_file", format!("{}: {e}", ca.display())))?;
            shield::tls_roots::roots(Some((ca, &pem))).map_err(|m| ("ca_file", m))?;
        }
        match (&self.client_cert, &self.client_key) {
            (Some(c), Some(k)) => {
                shield::tls_pair::load_pair(c, k).map_err(|e| ("client_cert", e.to_string()))?;
            }
            (None, None) => {}
            _ => {
                return Err((
                    "client_cert",
                    "client_cert and client_key go together".into(),
                ));
            }
        }
        Ok(())
    }
}

/// Parses a primary: `IP:PORT`, `IP@PORT` or `IP` (port 53), or the same after `tls:` for
/// one reached over TLS (port 853 unless given): the address, and whether it is over TLS.
pub fn parse_primary(s: &str) -> Result<(SocketAddr, bool), String> {
    match s.strip_prefix("tls:") {
        Some(rest) => parse_addr_port(rest, 853).map(|a| (a, true)),
        None => parse_addr(s).map(|a| (a, false)),
    }
}

/// Parses an `allow_transfer` entry: a prefix, or `tls:` and a prefix allowed only over TLS.
pub fn parse_allow(s: &str) -> Result<(IpNet, bool), String> {
    match s.strip_prefix("tls:") {
        Some(rest) => parse_prefix(rest).map(|n| (n, true)),
        None => parse_prefix(s).map(|n| (n, false)),
    }
}

/// Parses `IP:PORT`, `IP@PORT` or `IP` (port 53).
pub fn parse_addr(s: &str) -> Result<SocketAddr, String> {
    parse_addr_port(s, 53)
}

/// Parses `IP:PORT`, `IP@PORT` or `IP` (port `port`).
pub fn parse_addr_port(s: &str, port: u16) -> Result<SocketAddr, String> {
    if let Ok(a) = s.parse::<SocketAddr>() {
        return Ok(a);
    }
    if let Some((ip, port)) = s.rsplit_once('@')
        && let (Ok(ip), Ok(port)) = (ip.parse::<IpAddr>(), port.parse::<u16>())
    {
        return Ok(SocketAddr::new(ip, port));
    }
    s.parse::<IpAddr>()
        .map(|ip| SocketAddr::new(ip, port))
        .map_err(|_| format!("{s:?} is not IP:PORT"))
}

/// Parses a prefix (`10.0.0.0/8`) or a single address.
pub fn parse_prefix(s: &str) -> Result<IpNet, String> {
    if let Ok(n) = s.parse::<IpNet>() {
        return Ok(n.trunc());
    }
    s.parse::<IpAddr>()
        .map(IpNet::from)
        .map_err(|_| format!("{s:?} is not a prefix"))
}

/// The bytes of a base64 TSIG secret.
pub fn decode_secret(s: &str) -> Result<Vec<u8>, String> {
    let v = base64::engine::general_purpose::STANDARD
        .decode(s.trim())
        .map_err(|e| format!("secret is not base64: {e}"))?;
    if v.is_empty() {
        return Err("secret is empty".into());
    }
    Ok(v)
}

/// Checks the transfer keys of a config: `Err((key, message))`.
pub fn check_config(c: &Config) -> Result<(), (String, String)> {
    let mut names = std::collections::HashSet::new();
    for (i, k) in c.tsig_keys.iter().enumerate() {
        let at = |f: &str| format!("tsig_key[{i}].{f}");
        let name = Name::parse(&k.name, Some(&Name::root()))
            .map_err(|e| (at("name"), e.to_string()))?
            .to_lowercase();
        if !names.insert(name.clone()) {
            return Err((at("name"), format!("key {name} is defined twice")));
        }
        if TsigAlgorithm::from_config(&k.algorithm).is_none() {
            return Err((
                at("algorithm"),
                format!("{:?}: expected hmac-sha256 or hmac-sha512", k.algorithm),
            ));
        }
        decode_secret(&k.secret).map_err(|e| (at("secret"), e))?;
    }
    for z in &c.zones {
        let at = |f: &str| format!("{}.{f}", z.key);
        let mut tls = false;
        for a in z.primaries.iter() {
            tls |= parse_primary(a).map_err(|e| (at("primaries"), e))?.1;
        }
        match (&z.transfer_tls, tls) {
            (Some(t), true) => t
                .check()
                .map_err(|(f, m)| (at(&format!("transfer_tls.{f}")), m))?,
            (None, true) => {
                return Err((
                    at("transfer_tls"),
                    "a tls: primary needs transfer_tls (name and/or pin_sha256)".into(),
                ));
            }
            (Some(_), false) => {
                return Err((at("transfer_tls"), "set, but no primary is tls:".into()));
            }
            (None, false) => {}
        }
        for a in z.notify.iter() {
            parse_addr(a).map_err(|e| (at("notify"), e))?;
        }
        for p in z.allow_transfer.iter() {
            parse_allow(p).map_err(|e| (at("allow_transfer"), e))?;
        }
        for p in z.allow_notify.iter() {
            parse_prefix(p).map_err(|e| (at("allow_notify"), e))?;
        }
        if let Some(k) = &z.tsig {
            let n = Name::parse(k, Some(&Name::root()))
                .map_err(|e| (at("tsig"), e.to_string()))?
                .to_lowercase();
            if !names.contains(&n) {
                return Err((at("tsig"), format!("no [[tsig_key]] named {k}")));
            }
        }
    }
    let t = &c.transfer;
    if t.max_out == 0 || t.max_out_per_client == 0 || t.max_in == 0 {
        return Err((
            "transfer".into(),
            "max_out, max_out_per_client and max_in must be at least 1".into(),
        ));
    }
    if t.message_timeout_secs == 0 || t.in_timeout_secs == 0 || t.notify_timeout_ms == 0 {
        return Err(("transfer".into(), "timeouts must be above 0".into()));
    }
    Ok(())
}
