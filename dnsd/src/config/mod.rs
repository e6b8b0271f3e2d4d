//! The configuration file (TOML) and the flags that can stand in for it.
//!
//! Unknown keys are refused with their name; errors carry the file, line and column.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use serde::Deserialize;

pub mod defence;
pub mod dnssec;
mod overrides;
pub mod transfer;
pub mod zone_list;

use defence::{CookiePolicy, DefenceConfig};
pub use overrides::Overrides;

/// Why a configuration could not be used.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The file could not be read.
    #[error("{path}: {source}")]
    Read {
        /// The file.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
    /// The file is not valid TOML or has unknown or mistyped keys.
    #[error("{path}:{line}:{col}: {msg}")]
    Parse {
        /// The file.
        path: PathBuf,
        /// 1-based line.
        line: usize,
        /// 1-based column.
        col: usize,
        /// What is wrong.
        msg: String,
    },
    /// A value is out of range or inconsistent.
    #[error("{path}: {key}: {msg}")]
    Invalid {
        /// The file.
        path: PathBuf,
        /// The key, dotted.
        key: String,
        /// What is wrong.
        msg: String,
    },
}

impl ConfigError {
    /// The same error with the line and column of its key where `text` holds it (a zone
    /// configured twice named `zone[1].origin` but no line).
    fn placed(self, text: &str) -> ConfigError {
        match self {
            ConfigError::Invalid { path, key, msg } => {
                match shield::toml_pos::key_position(text, &key) {
                    Some((line, col)) => ConfigError::Parse {
                        path,
                        line,
                        col,
                        msg: format!("{key}: {msg}"),
                    },
                    None => ConfigError::Invalid { path, key, msg },
                }
            }
            e => e,
        }
    }
}

/// The whole configuration.
#[derive(Debug, Clone, Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub struct Config {
    /// Listening addresses and socket settings.
    #[serde(default)]
    pub server: Server,
    /// Zones served: `[[zone]]`, `[[zone_set]]` and the zone state, templates applied.
    #[serde(skip)]
    pub zones: Vec<ZoneConfig>,
    /// What loading the file noticed and did not refuse (old spellings, entries skipped):
    /// logged once logging is set up, and in `ctl reload`'s answer.
    #[serde(skip)]
    pub warnings: Vec<String>,
    /// `[[zone]]` as written (resolved into `zones`).
    #[serde(default, rename = "zone")]
    pub zone_specs: Vec<zone_list::ZoneSpec>,
    /// `[[template]]`: settings shared by the zones that name them.
    #[serde(default, rename = "template")]
    pub templates: Vec<zone_list::ZoneSpec>,
    /// `[[zone_set]]`: zones from a directory or a list file.
    #[serde(default, rename = "zone_set")]
    pub zone_sets: Vec<zone_list::ZoneSetConfig>,
    /// The control socket.
    #[serde(default)]
    pub control: Control,
    /// The metrics endpoint.
    #[serde(default)]
    pub metrics: Metrics,
    /// Flood defences.
    #[serde(default)]
    pub defence: DefenceConfig,
    /// The block map.
    #[serde(default)]
    pub block: shield::block::BlockConfig,
    /// Where aggregated security events go.
    #[serde(default)]
    pub events: Events,
    /// The XDP guard in front of the sockets (needs root; without it dnsd runs without XDP).
    #[serde(default)]
    pub xdp: Option<xdp_guard::XdpConfig>,
    /// Block-map sync across nodes through Redis (`node_id` defaults to `{host}-dnsd`, with
    /// `-{instance}` when `instance` is set).
    #[serde(default)]
    pub redis: Option<shield::redis_sync::SyncConfig>,
    /// TSIG keys (`[[tsig_key]]`), named by zones' `tsig`.
    #[serde(default, rename = "tsig_key")]
    pub tsig_keys: Vec<transfer::TsigKeyConfig>,
    /// Zone transfer limits (`[transfer]`).
    #[serde(default)]
    pub transfer: transfer::TransferConfig,
    /// The shield rules file (`[rules]`): the format http-front reads (the same file, if
    /// the operator likes); zones name their tenant in it.
    #[serde(default)]
    pub rules: Option<RulesConfig>,
    /// The XDP answer fast path's hot names (`[xdp_hot]`).
    #[serde(default)]
    pub xdp_hot: XdpHot,
    /// Where ALIAS targets outside our zones are resolved (`[alias]`).
    #[serde(default)]
    pub alias: AliasConfig,
    /// `[[view]]`: named lists of client prefixes that zones' geo files key variants by.
    #[serde(default, rename = "view")]
    pub views: Vec<ViewConfig>,
    /// `[geoip]`: answers by client location.
    #[serde(default)]
    pub geoip: GeoipConfig,
    /// `[log]`: format ("text" or "json") and filter (RUST_LOG syntax). Start-time only.
    #[serde(default)]
    pub log: shield::logging::LogConfig,
    /// `[dnstap]`: the query log in Frame Streams. Start-time only.
    #[serde(default)]
    pub dnstap: Option<crate::observe::dnstap::DnstapConfig>,
    /// `[dnssec]`: the key directory and the expiry warning.
    #[serde(default)]
    pub dnssec: dnssec::DnssecConfig,
    /// `[[dnssec_policy]]` as written.
    #[serde(default, rename = "dnssec_policy")]
    pub dnssec_policies: Vec<dnssec::PolicyConfig>,
    /// The policies, checked (key directory made absolute), named by zones' `dnssec_policy`.
    #[serde(skip)]
    pub policies: Vec<std::sync::Arc<crate::signing::Policy>>,
}

/// `[xdp_hot]`: the hottest names of zones with `xdp_answers = "hot"` (the default), found by
/// sampling dnsd's answers, are answered in XDP too (with `[xdp]`).
#[derive(Debug, Clone, Copy, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct XdpHot {
    /// How many (name, type) pairs at most (0: off).
    #[serde(default)]
    pub names: u32,
    /// One UDP answer in `sample` is sampled, per worker.
    #[serde(default = "default_hot_sample")]
    pub sample: u32,
    /// How often the hottest names are picked again (ms).
    #[serde(default = "default_hot_interval")]
    pub interval_ms: u64,
    /// Samples a name needs in an interval (with the decayed count of earlier ones) to be hot.
    #[serde(default = "default_hot_min")]
    pub min_samples: u32,
}

fn default_hot_sample() -> u32 {
    64
}
fn default_hot_interval() -> u64 {
    5000
}
fn default_hot_min() -> u32 {
    4
}

impl Default for XdpHot {
    fn default() -> Self {
        XdpHot {
            names: 0,
            sample: default_hot_sample(),
            interval_ms: default_hot_interval(),
            min_samples: default_hot_min(),
        }
    }
}

/// Which of a zone's names the XDP guard answers (`xdp_answers`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum XdpAnswers {
    /// None (`false`).
    Off,
    /// Its hottest names, with `[xdp_hot] names` (`"hot"`, the default).
    #[default]
    Hot,
    /// Every name (`true`).
    All,
}

impl<'de> Deserialize<'de> for XdpAnswers {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl serde::de::Visitor<'_> for V {
            type Value = XdpAnswers;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("true, false or \"hot\"")
            }
            fn visit_bool<E: serde::de::Error>(self, v: bool) -> Result<XdpAnswers, E> {
                Ok(if v { XdpAnswers::All } else { XdpAnswers::Off })
            }
            fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<XdpAnswers, E> {
                match v {
                    "hot" => Ok(XdpAnswers::Hot),
                    _ => Err(E::invalid_value(serde::de::Unexpected::Str(v), &self)),
                }
            }
        }
        d.deserialize_any(V)
    }
}

/// `[rules]`.
#[derive(Debug, Clone, Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub struct RulesConfig {
    /// The rules file (relative paths are relative to the config file); `ctl reload`
    /// re-reads it, and a file that does not compile keeps the running rules.
    pub file: PathBuf,
    /// Sizes of the rate-limit and escalation tables (start-time only).
    #[serde(default)]
    pub state: shield::rules::StateConfig,
    /// Write the rules file's `[global]` lists into the XDP guard's `rules` slot and allow
    /// maps (with `[xdp]`). One daemon per node should: dnsd by default.
    #[serde(default = "default_true")]
    pub xdp_global: bool,
}

fn default_true() -> bool {
    true
}

/// `[events]`: aggregated events of blocked, limited and escalated traffic — the same
/// section as http-front's ([`shield::events::EventsConfig`]).
pub type Events = shield::events::EventsConfig;

/// `[[view]]`: a named list of client prefixes.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ViewConfig {
    /// Its name, as geo files write it (`view: NAME`).
    pub name: String,
    /// Its prefixes (addresses or prefixes, IPv4 and IPv6).
    pub prefixes: Vec<String>,
}

/// `[geoip]`: answers by client location.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct GeoipConfig {
    /// TTL of the records a zone's geo file gives (Knot's geoip module's `ttl`).
    pub ttl: u32,
    /// A MaxMind DB (GeoIP2/GeoLite2 Country or City) that `geo:` variants are chosen by
    /// (relative paths are relative to the config file); read at start.
    pub db: Option<PathBuf>,
    /// The record keys `geo:` values name, in order: `continent/code`, `country/iso_code`.
    pub keys: Vec<String>,
}

impl Default for GeoipConfig {
    fn default() -> Self {
        GeoipConfig {
            ttl: 60,
            db: None,
            keys: vec!["country/iso_code".into()],
        }
    }
}

/// The record keys `[geoip] keys` may name.
pub const GEOIP_KEYS: [&str; 2] = ["continent/code", "country/iso_code"];

/// `[alias]`: ALIAS records whose targets dnsd does not serve.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct AliasConfig {
    /// A resolver (`IP:PORT`, or `IP` for port 53) asked for such targets' A and AAAA, kept
    /// in a cache and asked again before they expire while in use. Unset: SERVFAIL.
    pub resolver: Option<String>,
    /// Most targets (name and type) the cache holds; the least recently used go first.
    pub cache_size: usize,
}

impl Default for AliasConfig {
    fn default() -> Self {
        AliasConfig {
            resolver: None,
            cache_size: 10_000,
        }
    }
}

/// `[server]`.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Server {
    /// Addresses and prefixes: one UDP socket per address; TCP one listener per address (to 256).
    #[serde(default = "default_listen")]
    pub listen: Vec<String>,
    /// Port for UDP and TCP.
    #[serde(default = "default_port")]
    pub port: u16,
    /// UDP worker threads (0: one per core).
    #[serde(default)]
    pub workers: usize,
    /// Our EDNS UDP payload size.
    #[serde(default = "default_udp_payload")]
    pub udp_payload: u16,
    /// SO_RCVBUF per UDP socket, bytes (0: kernel default).
    #[serde(default)]
    pub udp_rcvbuf: usize,
    /// SO_SNDBUF per UDP socket, bytes (0: kernel default).
    #[serde(default)]
    pub udp_sndbuf: usize,
    /// Datagrams per recvmmsg/sendmmsg batch.
    #[serde(default = "default_batch")]
    pub udp_batch: usize,
    /// TCP: most connections at once.
    #[serde(default = "default_tcp_max")]
    pub tcp_max_connections: usize,
    /// TCP: most connections from one source address.
    #[serde(default = "default_tcp_per_source")]
    pub tcp_max_per_source: usize,
    /// TCP: idle time before a connection is closed, milliseconds.
    #[serde(default = "default_tcp_idle")]
    pub tcp_idle_timeout_ms: u64,
    /// TCP: idle time before a connection is closed while more than three quarters of
    /// `tcp_max_connections` are open, milliseconds (silent connections must not fill the
    /// table against new clients).
    #[serde(default = "default_tcp_pressed_idle")]
    pub tcp_pressed_idle_timeout_ms: u64,
    /// TCP: most queries answered on one connection (0, the default: no limit, as Knot and
    /// NSD — the queries a client pipelined past a close went unanswered).
    #[serde(default = "default_tcp_queries")]
    pub tcp_max_queries: usize,
    /// TCP: queries read but not yet answered on one connection before it stops reading.
    #[serde(default = "default_tcp_queue")]
    pub tcp_max_pipelined: usize,
    /// Where zones added with `ctl zone add` are kept across reloads and restarts
    /// (relative paths are relative to the config file; unset: `zone add` is refused).
    #[serde(default)]
    pub zone_state: Option<PathBuf>,
    /// Our name server identifier (RFC 5001), sent to queries that ask: a string, `0x` and
    /// hex digits, or `"hostname"` (this host's name). Unset: none.
    #[serde(default)]
    pub nsid: Option<String>,
    /// The TXT answered to `id.server` and `hostname.bind` in class CH (RFC 4892), as Knot
    /// and NSD answer them. Unset: this host's name; `""`: not answered (REFUSED).
    #[serde(default)]
    pub identity: Option<String>,
    /// The TXT answered to `version.server` and `version.bind` in class CH. Unset:
    /// `Palisade` and its version; `""`: not answered (REFUSED).
    #[serde(default)]
    pub version: Option<String>,
    /// Proxies (addresses or prefixes) whose PROXY protocol v2 headers are believed, over UDP
    /// (every datagram) and TCP (each connection's start): the header's client is the one
    /// every defence sees. A header from anyone else, a malformed one, or none from a listed
    /// proxy is dropped and counted. The listed proxies join the never-block set.
    #[serde(default)]
    pub proxy_allow: Vec<String>,
    /// DNS over TLS (RFC 7858) listeners, `IP:PORT` or `IP` (port 853): the same pipeline,
    /// defences and TCP limits as TCP, the block map checked before the handshake; zone
    /// transfers over TLS (RFC 9103) are served there too. Needs `tls_cert` and `tls_key`.
    #[serde(default)]
    pub tls_listen: Vec<String>,
    /// DNS over QUIC (RFC 9250) endpoints, `IP:PORT` or `IP` (UDP port 853): the same
    /// pipeline, defences and TCP limits. Needs `tls_cert` and `tls_key`.
    #[serde(default)]
    pub quic_listen: Vec<String>,
    /// The PEM certificate chain of `tls_listen` and `quic_listen` (relative paths are relative to the config
    /// file); read again on every reload, the last good pair kept when the new one is bad.
    #[serde(default)]
    pub tls_cert: Option<PathBuf>,
    /// Its PEM private key.
    #[serde(default)]
    pub tls_key: Option<PathBuf>,
    /// Read EDNS Client Subnet (RFC 7871) from queries: a name with variants is answered for
    /// the client's network it names (else for the source address), and the option is echoed
    /// with the scope used (0 for names without variants). Off: the option is ignored.
    #[serde(default)]
    pub ecs: bool,
    /// The sources (addresses or prefixes: the resolvers) whose Client Subnet is believed;
    /// from others the option is ignored and their own address picks. Empty: anyone's (as
    /// Knot), so a client may name any network — a `[[view]]` then keeps nothing private.
    #[serde(default)]
    pub ecs_from: Vec<String>,
}

/// Most bytes of `[server] nsid`.
pub const NSID_MAX: usize = 128;

/// This host's name.
fn host_name() -> Result<Vec<u8>, String> {
    let mut buf = [0u8; 256];
    // SAFETY: buf is writable for its length; gethostname NUL-terminates within it or
    // truncates.
    if unsafe { libc::gethostname(buf.as_mut_ptr().cast(), buf.len()) } != 0 {
        return Err(format!(
            "cannot read the host name: {}",
            std::io::Error::last_os_error()
        ));
    }
    let n = buf.iter().position(|&b| b == 0).unwrap_or(buf.len());
    Ok(buf[..n].to_vec())
}

/// A CH TXT string: none when empty, an error past one character-string (255 bytes).
fn chaos_txt(s: Vec<u8>) -> Result<Option<Vec<u8>>, String> {
    match s.len() {
        0 => Ok(None),
        1..=255 => Ok(Some(s)),
        n => Err(format!("must be at most 255 bytes, not {n}")),
    }
}

impl Server {
    /// The keys of `[server]` whose values differ from `running`'s among those read only at
    /// start (sockets, workers, limits, NSID; `zone_state` is read at each use).
    pub fn start_only_changes(&self, running: &Server) -> Vec<&'static str> {
        let mut out = Vec::new();
        let mut diff = |key: &'static str, changed: bool| {
            if changed {
                out.push(key);
            }
        };
        diff("listen", self.listen != running.listen);
        diff("port", self.port != running.port);
        diff("workers", self.workers != running.workers);
        diff("udp_payload", self.udp_payload != running.udp_payload);
        diff("udp_rcvbuf", self.udp_rcvbuf != running.udp_rcvbuf);
        diff("udp_sndbuf", self.udp_sndbuf != running.udp_sndbuf);
        diff("udp_batch", self.udp_batch != running.udp_batch);
        diff(
            "tcp_max_connections",
            self.tcp_max_connections != running.tcp_max_connections,
        );
        diff(
            "tcp_max_per_source",
            self.tcp_max_per_source != running.tcp_max_per_source,
        );
        diff(
            "tcp_idle_timeout_ms",
            self.tcp_idle_timeout_ms != running.tcp_idle_timeout_ms,
        );
        diff(
            "tcp_pressed_idle_timeout_ms",
            self.tcp_pressed_idle_timeout_ms != running.tcp_pressed_idle_timeout_ms,
        );
        diff(
            "tcp_max_queries",
            self.tcp_max_queries != running.tcp_max_queries,
        );
        diff(
            "tcp_max_pipelined",
            self.tcp_max_pipelined != running.tcp_max_pipelined,
        );
        // By the bytes sent: "0x61" is "a", and "hostname" follows the host's name.
        diff("nsid", self.nsid_bytes().ok() != running.nsid_bytes().ok());
        diff("identity", self.identity != running.identity);
        diff("version", self.version != running.version);
        diff("proxy_allow", self.proxy_allow != running.proxy_allow);
        diff("tls_listen", self.tls_listen != running.tls_listen);
        diff("quic_listen", self.quic_listen != running.quic_listen);
        diff("ecs", self.ecs != running.ecs);
        diff("ecs_from", self.ecs_from != running.ecs_from);
        out
    }

    /// The addresses of `tls_listen` (checked when the config loaded).
    pub fn tls_addrs(&self) -> Vec<SocketAddr> {
        Self::addrs_853(&self.tls_listen)
    }

    /// The addresses of `quic_listen` (checked when the config loaded).
    pub fn quic_addrs(&self) -> Vec<SocketAddr> {
        Self::addrs_853(&self.quic_listen)
    }

    fn addrs_853(list: &[String]) -> Vec<SocketAddr> {
        list.iter()
            .filter_map(|a| transfer::parse_addr_port(a, 853).ok())
            .collect()
    }

    /// The sources of `ecs_from` (None: any), or what is wrong with one.
    pub fn ecs_sources(&self) -> Result<Option<shield::prefix::PrefixMap<()>>, String> {
        if self.ecs_from.is_empty() {
            return Ok(None);
        }
        let mut m = shield::prefix::PrefixMap::new();
        for s in &self.ecs_from {
            m.insert(transfer::parse_prefix(s)?, ());
        }
        Ok(Some(m))
    }

    /// The proxies of `proxy_allow` (checked when the config loaded: empty only when it is).
    pub fn proxies(&self) -> shield::proxy_proto::ProxyAllow {
        shield::proxy_proto::ProxyAllow::parse(&self.proxy_allow).unwrap_or_default()
    }

    /// The TXT string answered to `id.server` (`identity`, or this host's name), if any.
    pub fn identity_txt(&self) -> Result<Option<Vec<u8>>, String> {
        let s = match &self.identity {
            Some(s) => s.as_bytes().to_vec(),
            None => host_name()?,
        };
        chaos_txt(s)
    }

    /// The TXT string answered to `version.server` (`version`, or ours), if any.
    pub fn version_txt(&self) -> Result<Option<Vec<u8>>, String> {
        let s = match &self.version {
            Some(s) => s.as_bytes().to_vec(),
            None => concat!("Palisade ", env!("CARGO_PKG_VERSION"))
                .as_bytes()
                .to_vec(),
        };
        chaos_txt(s)
    }

    /// The NSID bytes `nsid` names (at most 128), or why it cannot be used.
    pub fn nsid_bytes(&self) -> Result<Option<Vec<u8>>, String> {
        let Some(s) = &self.nsid else {
            return Ok(None);
        };
        let bytes = if s == "hostname" {
            host_name()?
        } else if let Some(h) = s.strip_prefix("0x") {
            if h.len() % 2 != 0 || !h.bytes().all(|b| b.is_ascii_hexdigit()) {
                return Err(format!("{s:?}: 0x must be followed by pairs of hex digits"));
            }
            (0..h.len())
                .step_by(2)
                .map(|i| u8::from_str_radix(&h[i..i + 2], 16).expect("hex checked"))
                .collect()
        } else {
            s.as_bytes().to_vec()
        };
        if bytes.is_empty() || bytes.len() > NSID_MAX {
            return Err(format!(
                "must be 1 to {} bytes, not {}",
                NSID_MAX,
                bytes.len()
            ));
        }
        Ok(Some(bytes))
    }
}

fn default_listen() -> Vec<String> {
    vec!["127.0.0.1".into()]
}
fn default_port() -> u16 {
    53
}
fn default_udp_payload() -> u16 {
    1232
}
fn default_batch() -> usize {
    32
}
fn default_tcp_max() -> usize {
    4096
}
fn default_tcp_per_source() -> usize {
    16
}
fn default_tcp_idle() -> u64 {
    10_000
}
fn default_tcp_pressed_idle() -> u64 {
    1_000
}
fn default_tcp_queries() -> usize {
    0
}
fn default_tcp_queue() -> usize {
    32
}

impl Default for Server {
    fn default() -> Self {
        toml::from_str("").expect("defaults")
    }
}

/// Where a zone's entry comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ZoneSource {
    /// The config file (`[[zone]]` or `[[zone_set]]`) or the command line.
    #[default]
    Config,
    /// Added at run time (`ctl zone add`), kept in the zone state file.
    State,
    /// A member of a consumed catalog zone.
    Catalog,
}

/// One zone served, its template applied.
#[derive(Debug, Clone, Default)]
pub struct ZoneConfig {
    /// The zone's apex.
    pub origin: String,
    /// The master file (relative paths are relative to the config file).
    pub file: PathBuf,
    /// The template it names.
    pub template: Option<String>,
    /// Cookie policy for this zone: "off", "on" or "require" (default: `[defence.cookies] policy`).
    pub cookies: Option<CookiePolicy>,
    /// The tenant in the rules file whose rules, events and metrics this zone's queries
    /// belong to (default 0: no tenant, no rules but the `[global]` list).
    pub tenant: u32,
    /// Answer this zone's names in the XDP guard too (needs `[xdp]`; see README): `true`
    /// (every name), `"hot"` (its hottest, with `[xdp_hot]`; the default) or `false`.
    pub xdp_answers: XdpAnswers,
    /// Primaries (`IP:PORT`): set, the zone is a secondary kept in `file`.
    pub primaries: Vec<String>,
    /// Secondaries to NOTIFY (`IP:PORT`) on every change.
    pub notify: Vec<String>,
    /// Prefixes allowed to transfer the zone (empty: no transfers).
    pub allow_transfer: Vec<String>,
    /// Prefixes besides the primaries' addresses that may send NOTIFY for a secondary zone.
    pub allow_notify: Vec<String>,
    /// The TSIG key (a `[[tsig_key]]` name) transfers and NOTIFY of this zone must use.
    pub tsig: Option<String>,
    /// How the `tls:` primaries are verified (zone transfers over TLS).
    pub transfer_tls: Option<transfer::TransferTls>,
    /// The zone's variants by client network (its geo file).
    pub geo: Option<PathBuf>,
    /// A catalog zone: consumed or produced (RFC 9432).
    pub catalog: Option<zone_list::CatalogRole>,
    /// Listed in this catalog zone, which dnsd produces.
    pub catalog_zone: Option<String>,
    /// Its group property in that catalog.
    pub catalog_group: Option<String>,
    /// A consumed catalog: the template of members whose group names no template.
    pub catalog_template: Option<String>,
    /// A consumed catalog: the templates a member's group may pick.
    pub catalog_groups: Vec<String>,
    /// A consumed catalog: most members it may list (those beyond are refused, counted).
    pub catalog_max_members: usize,
    /// The `[[dnssec_policy]]` that signs the zone (unset: served as written).
    pub dnssec_policy: Option<String>,
    /// Where the entry comes from.
    pub source: ZoneSource,
    /// A consumed catalog's member: the catalog's apex.
    pub member_of: Option<String>,
    /// Added at run time by this user (other than root or the daemon's own): its file is
    /// read only if that user could read it, at every load, and never `$INCLUDE`s.
    pub added_by: Option<crate::config::zone_list::AddedBy>,
    /// How errors name the entry (`zone[3]`, `zone_set[0] (list:12)`, …).
    pub key: String,
}

/// `[control]`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Control {
    /// Unix socket path for `dnsd ctl`.
    pub socket: Option<PathBuf>,
    /// Permission bits of the socket (octal, default 0660), whatever the umask.
    #[serde(
        default = "shield::control::default_mode",
        deserialize_with = "shield::control::octal"
    )]
    pub mode: u32,
    /// A group whose members may use the socket besides root and dnsd's own user.
    pub group: Option<String>,
}

impl Default for Control {
    fn default() -> Self {
        Control {
            socket: None,
            mode: shield::control::DEFAULT_MODE,
            group: None,
        }
    }
}

impl Control {
    /// Who may use the socket.
    pub fn access(&self) -> shield::control::Access {
        shield::control::Access {
            mode: self.mode,
            group: self.group.clone(),
        }
    }
}

/// `[metrics]`.
#[derive(Debug, Clone, Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub struct Metrics {
    /// Address for the Prometheus endpoint (`/metrics`).
    pub listen: Option<String>,
    /// The addresses `/metrics` answers (empty: any).
    #[serde(default)]
    pub allow: Vec<ipnet::IpNet>,
}

impl Config {
    /// Reads and checks a config file; relative zone paths become relative to its directory.
    pub fn load(path: &Path) -> Result<Config, ConfigError> {
        let text = shield::files::read_config(path, shield::files::CONFIG_MAX).map_err(|e| {
            ConfigError::Read {
                path: path.to_path_buf(),
                source: e,
            }
        })?;
        Self::load_text(path, &text).map_err(|e| e.placed(&text))
    }

    fn load_text(path: &Path, text: &str) -> Result<Config, ConfigError> {
        let mut c = Self::parse(path, text)?;
        let dir = path.parent().unwrap_or(Path::new("."));
        for z in &mut c.zones {
            if z.file.is_relative() {
                z.file = dir.join(&z.file);
            }
        }
        if zone_list::expand_sets(&mut c, dir, path)? {
            // `parse` checked the [[zone]] entries: these checks again, over the zones the
            // sets and the zone state added.
            let inv = |(key, msg): (String, String)| ConfigError::Invalid {
                path: path.to_path_buf(),
                key,
                msg,
            };
            c.check_catalogs().map_err(inv)?;
            c.check_policies().map_err(inv)?;
            transfer::check_config(&c).map_err(inv)?;
        }
        if let Some(s) = &mut c.server.zone_state
            && s.is_relative()
        {
            *s = dir.join(&*s);
        }
        if let Some(s) = &mut c.block.state_file
            && s.is_relative()
        {
            *s = dir.join(&*s);
        }
        for f in [&mut c.server.tls_cert, &mut c.server.tls_key]
            .into_iter()
            .flatten()
        {
            if f.is_relative() {
                *f = dir.join(&*f);
            }
        }
        if let Some(g) = &mut c.geoip.db
            && g.is_relative()
        {
            *g = dir.join(&*g);
        }
        if let Some(r) = &mut c.rules
            && r.file.is_relative()
        {
            r.file = dir.join(&r.file);
        }
        if let Some(s) = &mut c.control.socket
            && s.is_relative()
        {
            *s = dir.join(&*s);
        }
        c.check_start_values()
            .map_err(|(key, msg)| ConfigError::Invalid {
                path: path.to_path_buf(),
                key,
                msg,
            })?;
        let mut seen = std::collections::HashSet::new();
        let twice: Vec<String> = c
            .server
            .listen
            .iter()
            .filter(|a| !seen.insert(a.as_str()))
            .cloned()
            .collect();
        for a in twice {
            c.warnings.push(format!(
                "server.listen lists {a} more than once: one socket serves it"
            ));
        }
        Ok(c)
    }

    /// The sections read at start only (the listeners and writers they make run on), each
    /// as text to compare with a later config's: `[metrics]`, `[log]`, `[dnstap]`, `[redis]`,
    /// `[xdp]`, `[events]`, and `[defence]` but its cookie secrets (a reload rotates those).
    pub fn start_only_sections(&self) -> Vec<(&'static str, String)> {
        let mut defence = self.defence.clone();
        defence.cookies = Default::default();
        vec![
            ("[metrics]", format!("{:?}", self.metrics)),
            ("[log]", format!("{:?}", self.log)),
            ("[dnstap]", format!("{:?}", self.dnstap)),
            ("[redis]", format!("{:?}", self.redis)),
            ("[xdp]", format!("{:?}", self.xdp)),
            ("[events]", format!("{:?}", self.events)),
            ("[defence] (but cookie secrets)", format!("{defence:?}")),
        ]
    }

    /// Values a start reads when it binds or installs them, checked with the file: a reload
    /// (which applies some only at the next start) must refuse what that start would.
    fn check_start_values(&self) -> Result<(), (String, String)> {
        if let Err(e) = self.block.validate() {
            let (key, msg) = e.split_once(": ").unwrap_or(("block", &e));
            return Err((key.to_string(), msg.to_string()));
        }
        self.log
            .validate()
            .map_err(|e| ("log.filter".to_string(), e))?;
        if let Some(m) = &self.metrics.listen {
            m.parse::<std::net::SocketAddr>().map_err(|e| {
                (
                    "metrics.listen".to_string(),
                    format!("{m:?}: {e} (an IP:PORT)"),
                )
            })?;
        }
        if let Some(s) = &self.control.socket
            && s.is_dir()
        {
            return Err((
                "control.socket".to_string(),
                format!("{} is a directory", s.display()),
            ));
        }
        Ok(())
    }

    /// Only `[control] socket` of a config file, read leniently: `dnsd ctl` must reach the
    /// running server even while the file holds an edit the server would refuse.
    pub fn control_socket(path: &Path) -> Result<Option<PathBuf>, ConfigError> {
        let text = shield::files::read_text(path, shield::files::CONFIG_MAX).map_err(|e| {
            ConfigError::Read {
                path: path.to_path_buf(),
                source: e,
            }
        })?;
        let v: toml::Table = toml::from_str(&text).map_err(|e| {
            let (line, col) = e.span().map(|s| line_col(&text, s.start)).unwrap_or((0, 0));
            ConfigError::Parse {
                path: path.to_path_buf(),
                line,
                col,
                msg: e.message().to_string(),
            }
        })?;
        // A relative path is relative to the config file, as the server reads it.
        let dir = path.parent().unwrap_or(Path::new("."));
        Ok(v.get("control")
            .and_then(|c| c.get("socket"))
            .and_then(|s| s.as_str())
            .map(|s| dir.join(s)))
    }

    /// Parses config text; `path` is used in errors.
    pub fn parse(path: &Path, text: &str) -> Result<Config, ConfigError> {
        Self::parse_text(path, text).map_err(|e| e.placed(text))
    }

    fn parse_text(path: &Path, text: &str) -> Result<Config, ConfigError> {
        let mut c: Config = toml::from_str(text).map_err(|e| {
            let l = shield::toml_pos::locate(text, &e);
            ConfigError::Parse {
                path: path.to_path_buf(),
                line: l.line,
                col: l.col,
                msg: if l.key.is_empty() {
                    l.message
                } else {
                    format!("{}: {}", l.key, l.message)
                },
            }
        })?;
        let dir = path.parent().unwrap_or(Path::new("."));
        for w in c.events.upgrade(dir) {
            c.warnings.push(format!("{}: {w}", path.display()));
        }
        // An address the host lacks now (a VIP held by another node, an IPv6 address still
        // tentative) fails NOTIFY and transfers until it comes: said, not refused.
        for a in &c.transfer.source {
            if let Err(e) = std::net::UdpSocket::bind((*a, 0)) {
                c.warnings.push(format!(
                    "{}: transfer.source {a}: cannot send from it now ({e}): NOTIFY, SOA queries and transfers fail until the host has it",
                    path.display()
                ));
            }
        }
        if text.contains("water_torture")
            && toml::from_str::<toml::Table>(text)
                .ok()
                .and_then(|t| {
                    t.get("defence")
                        .and_then(|d| d.get("water_torture"))
                        .cloned()
                })
                .is_some()
        {
            c.warnings.push(format!(
                "{}: defence.water_torture is the old spelling: write defence.random_subdomain",
                path.display()
            ));
        }
        if let Some(k) = &mut c.dnssec.key_dir
            && k.is_relative()
        {
            *k = dir.join(&*k);
        }
        c.policies = dnssec::resolve_all(&c.dnssec_policies, c.dnssec.key_dir.as_ref()).map_err(
            |(key, msg)| ConfigError::Invalid {
                path: path.to_path_buf(),
                key,
                msg,
            },
        )?;
        for (i, p) in c.policies.iter().enumerate() {
            let rolls = if p.split_keys {
                p.ksk_lifetime > 0
            } else {
                p.zsk_lifetime > 0
            };
            if rolls
                && p.ksk_submission == crate::signing::Submission::Manual
                && c.dnssec_policies[i].ksk_submission.is_none()
            {
                c.warnings.push(format!(
                    "{}: dnssec_policy {:?} rolls its key-signing key, and each rollover waits for `dnsd ctl zone-ksk-submitted` (the old key signs on meanwhile): set `parent` to the parent zone's servers to have them asked, or ksk_submission = \"manual\" to say so",
                    path.display(),
                    p.name
                ));
            }
            let w = &c.dnssec_policies[i];
            let salted = !matches!(w.nsec3_salt.as_str(), "" | "-");
            if w.nsec3 && (w.nsec3_iterations > 0 || salted) {
                c.warnings.push(format!(
                    "{}: dnssec_policy {:?}: NSEC3 with {} extra iterations and a salt of {} bytes: RFC 9276 asks for 0 and none (they cost every validator and protect nothing; resolvers may treat large counts as insecure)",
                    path.display(),
                    p.name,
                    w.nsec3_iterations,
                    if salted { w.nsec3_salt.len() / 2 } else { 0 }
                ));
            }
        }
        for z in c.templates.iter_mut().chain(c.zone_specs.iter_mut()) {
            if let Some(t) = &mut z.transfer_tls {
                t.resolve_paths(dir);
            }
            if let Some(g) = &mut z.geo
                && g.is_relative()
            {
                *g = dir.join(&*g);
            }
        }
        c.zones = zone_list::resolve_zones(&c).map_err(|(key, msg)| ConfigError::Invalid {
            path: path.to_path_buf(),
            key,
            msg,
        })?;
        c.check(path)?;
        Ok(c)
    }

    fn check(&self, path: &Path) -> Result<(), ConfigError> {
        let inv = |key: &str, msg: String| ConfigError::Invalid {
            path: path.to_path_buf(),
            key: key.into(),
            msg,
        };
        if !(512..=65535).contains(&self.server.udp_payload) {
            return Err(inv(
                "server.udp_payload",
                "must be between 512 and 65535".into(),
            ));
        }
        self.server
            .nsid_bytes()
            .map_err(|m| inv("server.nsid", m))?;
        self.server
            .identity_txt()
            .map_err(|m| inv("server.identity", m))?;
        self.server
            .version_txt()
            .map_err(|m| inv("server.version", m))?;
        shield::proxy_proto::ProxyAllow::parse(&self.server.proxy_allow)
            .map_err(|m| inv("server.proxy_allow", m))?;
        self.server
            .ecs_sources()
            .map_err(|m| inv("server.ecs_from", m))?;
        for (key, list) in [
            ("server.tls_listen", &self.server.tls_listen),
            ("server.quic_listen", &self.server.quic_listen),
        ] {
            for a in list {
                transfer::parse_addr_port(a, 853).map_err(|m| inv(key, m))?;
            }
            if !list.is_empty() && (self.server.tls_cert.is_none() || self.server.tls_key.is_none())
            {
                return Err(inv(key, "needs server.tls_cert and server.tls_key".into()));
            }
        }
        for k in &self.geoip.keys {
            if !GEOIP_KEYS.contains(&k.as_str()) {
                return Err(inv(
                    "geoip.keys",
                    format!("{k:?}: expected continent/code or country/iso_code"),
                ));
            }
        }
        let mut names = std::collections::HashSet::new();
        for (i, v) in self.views.iter().enumerate() {
            if !names.insert(v.name.as_str()) {
                return Err(inv(
                    &format!("view[{i}].name"),
                    format!("{:?} is defined twice", v.name),
                ));
            }
            for p in &v.prefixes {
                transfer::parse_prefix(p).map_err(|m| inv(&format!("view[{i}].prefixes"), m))?;
            }
        }
        if self
            .rules
            .as_ref()
            .is_some_and(|r| r.file.as_os_str().is_empty())
        {
            return Err(inv("rules.file", "an empty path".into()));
        }
        if let Some(r) = &self.alias.resolver {
            transfer::parse_addr(r).map_err(|m| inv("alias.resolver", m))?;
        }
        if self.alias.cache_size == 0 {
            return Err(inv("alias.cache_size", "must be at least 1".into()));
        }
        if self.server.udp_batch == 0 || self.server.udp_batch > 1024 {
            return Err(inv("server.udp_batch", "must be between 1 and 1024".into()));
        }
        let sv = &self.server;
        for (key, v, lo, hi) in [
            ("server.port", u64::from(sv.port), 1, 65_535),
            ("server.workers", sv.workers as u64, 0, 1024),
            (
                "server.tcp_max_connections",
                sv.tcp_max_connections as u64,
                1,
                10_000_000,
            ),
            (
                "server.tcp_max_per_source",
                sv.tcp_max_per_source as u64,
                1,
                10_000_000,
            ),
            (
                "server.tcp_idle_timeout_ms",
                sv.tcp_idle_timeout_ms,
                100,
                86_400_000,
            ),
            (
                "server.tcp_pressed_idle_timeout_ms",
                sv.tcp_pressed_idle_timeout_ms,
                100,
                86_400_000,
            ),
        ] {
            if !(lo..=hi).contains(&v) {
                return Err(inv(key, format!("{v}: must be between {lo} and {hi}")));
            }
        }
        let src = &self.transfer.source;
        if src.iter().filter(|a| a.is_ipv4()).count() > 1
            || src.iter().filter(|a| a.is_ipv6()).count() > 1
        {
            return Err(inv(
                "transfer.source",
                "at most one IPv4 and one IPv6 address".into(),
            ));
        }
        let mut seen = std::collections::HashSet::with_capacity_and_hasher(
            self.zones.len(),
            foldhash::fast::RandomState::default(),
        );
        for z in &self.zones {
            let n = zones::Name::parse(&z.origin, Some(&zones::Name::root()))
                .map_err(|e| inv(&format!("{}.origin", z.key), e.to_string()))?;
            if !seen.insert(n.to_lowercase()) {
                return Err(inv(
                    &format!("{}.origin", z.key),
                    format!("zone {n} is configured twice"),
                ));
            }
            if z.tenant > shield::rules::MAX_TENANT_ID {
                return Err(inv(
                    &format!("{}.tenant", z.key),
                    format!(
                        "tenant {} is out of range: ids go from 1 to {} (0: none)",
                        z.tenant,
                        shield::rules::MAX_TENANT_ID
                    ),
                ));
            }
        }
        self.check_catalogs().map_err(|(k, m)| inv(&k, m))?;
        self.check_policies().map_err(|(k, m)| inv(&k, m))?;
        listener::addrs::expand(&self.server.listen)
            .map_err(|e| inv("server.listen", e.to_string()))?;
        self.defence.check().map_err(|(k, m)| inv(&k, m))?;
        if self.block.capacity == 0 {
            return Err(inv("block.capacity", "must be at least 1".into()));
        }
        if let Some(x) = &self.xdp {
            x.validate().map_err(|e| inv("xdp", e.to_string()))?;
        }
        if let Some(r) = &self.redis {
            let r = r.clone().with_node_id_for("dnsd");
            r.validate().map_err(|e| inv("redis", e.to_string()))?;
            // The fleet key read now: a missing or unreadable one is refused with the config
            // (it left the node without the sync, said only in the log at the next start).
            r.record_key().map_err(|e| inv("redis", e.to_string()))?;
        }
        self.events.check().map_err(|(k, m)| inv(&k, m))?;
        if let Some(d) = &self.dnstap {
            d.check().map_err(|(k, m)| inv(&k, m))?;
        }
        transfer::check_config(self).map_err(|(k, m)| inv(&k, m))?;
        Ok(())
    }
}

impl Config {
    /// The rules file, compiled and checked against `[block]` as `serve` and `ctl reload`
    /// take it (`check-config` reads it so too); none without `[rules]`.
    pub fn load_rules(&self) -> Result<Option<shield::rules::Prepared>, String> {
        self.block.validate().map_err(|e| format!("block: {e}"))?;
        let Some(r) = &self.rules else {
            return Ok(None);
        };
        let prepared = shield::rules::Prepared::load(&r.file).map_err(|e| format!("rules: {e}"))?;
        prepared
            .check_min_prefix(self.block.min_prefix_v4, self.block.min_prefix_v6)
            .map_err(|e| format!("rules: {e}"))?;
        Ok(Some(prepared))
    }

    /// Each zone's `dnssec_policy` names a `[[dnssec_policy]]`, and the zone is not a
    /// catalog (catalogs are read by machines, not validated).
    pub fn check_policies(&self) -> Result<(), (String, String)> {
        for z in &self.zones {
            let Some(p) = &z.dnssec_policy else { continue };
            if !self.policies.iter().any(|x| &x.name == p) {
                return Err((
                    format!("{}.dnssec_policy", z.key),
                    format!("no [[dnssec_policy]] named {p}"),
                ));
            }
            if z.catalog.is_some() {
                // Said where the policy came from: a template (the `default` one, which the
                // README's producer example uses) gives it to a zone that never names it.
                let from = zone_list::Templates::new(self)
                    .ok()
                    .and_then(|t| {
                        let name = z.template.as_deref().unwrap_or("default");
                        t.get(Some(name))
                            .filter(|s| s.dnssec_policy.is_some())
                            .map(|_| name.to_string())
                    })
                    .map(|t| {
                        format!(
                            " (zone {}: from [[template]] {t}; give the catalog a template of its own without dnssec_policy, template = \"...\")",
                            z.origin
                        )
                    })
                    .unwrap_or_default();
                return Err((
                    format!("{}.dnssec_policy", z.key),
                    format!("a catalog zone is not signed{from}"),
                ));
            }
        }
        Ok(())
    }

    /// The policy named `name`.
    pub fn policy(&self, name: &str) -> Option<&std::sync::Arc<crate::signing::Policy>> {
        self.policies.iter().find(|p| p.name == name)
    }

    /// Catalog settings that fit together: a consumer has primaries, a member's
    /// `catalog_zone` names a catalog dnsd produces, a catalog's template exists.
    pub fn check_catalogs(&self) -> Result<(), (String, String)> {
        use zone_list::CatalogRole;
        let norm =
            |s: &str| zones::Name::parse(s, Some(&zones::Name::root())).map(|n| n.to_lowercase());
        let producers: std::collections::HashSet<zones::Name> = self
            .zones
            .iter()
            .filter(|z| z.catalog == Some(CatalogRole::Producer))
            .filter_map(|z| norm(&z.origin).ok())
            .collect();
        let templates = zone_list::Templates::new(self)?;
        for z in &self.zones {
            if z.catalog == Some(CatalogRole::Consumer) && z.primaries.is_empty() {
                return Err((
                    format!("{}.primaries", z.key),
                    "a consumed catalog is a secondary: it needs primaries".into(),
                ));
            }
            let member_templates = z
                .catalog_template
                .iter()
                .map(|t| (t, "catalog_template"))
                .chain(z.catalog_groups.iter().map(|t| (t, "catalog_groups")));
            for (t, key) in member_templates {
                if !templates.has(t) {
                    return Err((
                        format!("{}.{key}", z.key),
                        format!("no [[template]] named {t}"),
                    ));
                }
                // Each member keeps its copy in a file of its own: a pattern without `%s`
                // would have every member write over the others'.
                if let Some(f) = templates.get(Some(t)).and_then(|s| s.file.as_ref())
                    && !f.to_string_lossy().contains("%s")
                {
                    return Err((
                        format!("{}.{key}", z.key),
                        format!(
                            "template {t}'s file {} has no %s: every member would share one file",
                            f.display()
                        ),
                    ));
                }
                // A member is a zone, never a catalog of its own (which would list zones
                // past this catalog's bound, without end).
                if templates.makes_catalog(t) {
                    return Err((
                        format!("{}.{key}", z.key),
                        format!(
                            "template {t} sets catalog: a catalog's member cannot be a catalog"
                        ),
                    ));
                }
            }
            if let Some(c) = &z.catalog_zone {
                let n = norm(c).map_err(|e| (format!("{}.catalog_zone", z.key), e.to_string()))?;
                if !producers.contains(&n) {
                    return Err((
                        format!("{}.catalog_zone", z.key),
                        format!("{n} is not a zone with catalog = \"producer\""),
                    ));
                }
            }
        }
        Ok(())
    }

    /// Warnings for zones whose tenant the rules (`None`: no `[rules]`) do not know — their
    /// queries meet no rules of their own — or escalate into the block map.
    pub fn tenant_warnings(&self, rules: Option<&shield::rules::Prepared>) -> Vec<String> {
        tenant_warnings(
            self.zones.iter().map(|z| (z.origin.as_str(), z.tenant)),
            rules,
        )
    }
}

/// Warnings for zones (origin, tenant) whose tenant the rules (`None`: no rules file at all)
/// do not have, and for each tenant with zones that escalates into the block map.
pub fn tenant_warnings<'a>(
    zones: impl Iterator<Item = (&'a str, u32)>,
    rules: Option<&shield::rules::Prepared>,
) -> Vec<String> {
    let mut out = Vec::new();
    let mut block_map = std::collections::BTreeSet::new();
    for (origin, tenant) in zones.filter(|(_, t)| *t != 0) {
        match rules {
            Some(r) if r.declares(tenant) => {
                if r.dns_block_map(tenant) {
                    block_map.insert(tenant);
                }
            }
            Some(_) => out.push(format!(
                "zone {origin} names tenant {tenant}, which the rules file does not have: its queries meet only [global]"
            )),
            None => out.push(format!(
                "zone {origin} names tenant {tenant}, but there is no [rules] file: its queries meet no rules"
            )),
        }
    }
    for tenant in block_map {
        out.push(format!(
            "tenant {tenant} escalates DNS sources into the block map (escalate dns = \"block_map\"): \
             a resolver or forwarder relaying one user's queries is then blocked in every tenant's \
             zones and across the fleet (README, \"Mind whom a DNS escalation hits\"); \
             dns = \"tenant\" holds it for this tenant's zones alone"
        ));
    }
    out
}

use shield::toml_pos::line_col;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn start_only_server_keys_are_named_when_they_change() {
        let parse = |t: &str| Config::parse(Path::new("x.toml"), t).unwrap().server;
        let running = parse("[server]\nlisten = [\"127.0.0.1\"]\nnsid = \"a\"\n");
        let same =
            parse("[server]\nlisten = [\"127.0.0.1\"]\nnsid = \"a\"\nzone_state = \"z.toml\"\n");
        assert!(
            same.start_only_changes(&running).is_empty(),
            "zone_state is read at each use"
        );
        let moved = parse("[server]\nlisten = [\"127.0.0.2\"]\nudp_batch = 8\n");
        assert_eq!(
            moved.start_only_changes(&running),
            ["listen", "udp_batch", "nsid"]
        );
        // The same NSID spelled in hex is no change.
        let hex = parse("[server]\nlisten = [\"127.0.0.1\"]\nnsid = \"0x61\"\n");
        assert!(hex.start_only_changes(&running).is_empty());
    }

    #[test]
    fn a_loaded_file_is_checked_as_a_start_reads_it() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("d.toml");
        let load = |text: &str| {
            std::fs::write(&p, text).unwrap();
            Config::load(&p)
        };
        let e = |text: &str| load(text).unwrap_err().to_string();
        assert!(e("").contains("is empty"));
        assert!(e("[metrics]\nlisten = \"localhost\"\n").contains("metrics.listen"));
        assert!(e("[log]\nfilter = \"x=loud\"\n").contains("log.filter"));
        assert!(e("[block]\nmin_prefix_v4 = 40\n").contains("block.min_prefix_v4"));
        assert!(e("[defence.rrl]\ntable_size = 1099511627776\n").contains("table_size"));
        assert!(
            e(&format!(
                "[control]\nsocket = \"{}\"\n",
                dir.path().display()
            ))
            .contains("control.socket")
        );
        let c = load("[server]\nlisten = [\"127.0.0.1\", \"127.0.0.1\"]\n").unwrap();
        assert!(
            c.warnings.iter().any(|w| w.contains("more than once")),
            "{:?}",
            c.warnings
        );
        // NSEC3 iterations or a salt: loaded, with RFC 9276's advice; none, no warning.
        let nsec3 = |extra: &str| {
            load(&format!(
                "[dnssec]\nkey_dir = \"k\"\n[[dnssec_policy]]\nname = \"p\"\nnsec3 = true\n{extra}"
            ))
            .unwrap()
            .warnings
            .into_iter()
            .filter(|w| w.contains("RFC 9276"))
            .count()
        };
        assert_eq!(nsec3("nsec3_iterations = 60\nnsec3_salt = \"abcd\"\n"), 1);
        assert_eq!(nsec3("nsec3_salt = \"abcd\"\n"), 1);
        assert_eq!(nsec3("nsec3_salt = \"-\"\n"), 0);
        assert_eq!(nsec3(""), 0);
    }

    #[test]
    fn a_catalog_member_template_must_give_each_member_a_file_of_its_own() {
        let cfg = |file: &str| {
            format!(
                "[[template]]\nname = \"member\"\nfile = \"{file}\"\n\
                 [[zone]]\norigin = \"catalog.invalid.\"\nfile = \"cat.zone\"\n\
                 catalog = \"consumer\"\nprimaries = [\"127.0.0.1:53\"]\n\
                 catalog_template = \"member\"\n"
            )
        };
        let e = Config::parse(Path::new("x.toml"), &cfg("members.zone"))
            .unwrap_err()
            .to_string();
        assert!(e.contains("catalog_template") && e.contains("no %s"), "{e}");
        Config::parse(Path::new("x.toml"), &cfg("members/%s.zone")).unwrap();
    }

    #[test]
    fn a_catalog_signed_by_its_template_is_refused_naming_the_template() {
        let e = Config::parse(
            Path::new("x.toml"),
            "[dnssec]\nkey_dir = \"keys\"\n[[dnssec_policy]]\nname = \"p\"\n\
             [[template]]\nname = \"default\"\ncatalog_zone = \"cat.invalid.\"\n\
             dnssec_policy = \"p\"\n\
             [[zone]]\norigin = \"cat.invalid.\"\ncatalog = \"producer\"\n",
        )
        .unwrap_err()
        .to_string();
        assert!(
            e.contains("a catalog zone is not signed") && e.contains("[[template]] default"),
            "{e}"
        );
    }

    #[test]
    fn defaults_and_unknown_keys() {
        let c = Config::parse(Path::new("x.toml"), "").unwrap();
        assert_eq!(c.server.port, 53);
        assert_eq!(c.server.udp_payload, 1232);
        let e = Config::parse(Path::new("x.toml"), "[server]\nport = 5353\nbogus = 1\n")
            .unwrap_err()
            .to_string();
        assert!(e.starts_with("x.toml:3:1:"), "{e}");
        assert!(e.contains("bogus"), "{e}");
        // A value refused after parsing names its line too.
        let e = Config::parse(
            Path::new("x.toml"),
            "[[zone]]\norigin = \"a.test.\"\nfile = \"a\"\n\n[[zone]]\norigin = \"A.test.\"\nfile = \"b\"\n",
        )
        .unwrap_err()
        .to_string();
        assert!(
            e.starts_with("x.toml:6:10: zone[1].origin:") && e.contains("configured twice"),
            "{e}"
        );
        let e = Config::parse(Path::new("x.toml"), "[server]\nudp_payload = 100\n")
            .unwrap_err()
            .to_string();
        assert!(e.contains("server.udp_payload"), "{e}");
        let e = Config::parse(
            Path::new("x.toml"),
            "[[zone]]\norigin = \"a.\"\nfile = \"a\"\n[[zone]]\norigin = \"A.\"\nfile = \"b\"\n",
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("twice"), "{e}");
        let e = Config::parse(Path::new("x.toml"), "[server]\nlisten = [\"nope\"]\n")
            .unwrap_err()
            .to_string();
        assert!(e.contains("server.listen"), "{e}");
        let e = Config::parse(Path::new("x.toml"), "[defence.rrl]\nslip = 2\nrate = 5\n")
            .unwrap_err()
            .to_string();
        assert!(e.starts_with("x.toml:3:1:") && e.contains("rate"), "{e}");
        let e = Config::parse(
            Path::new("x.toml"),
            "[defence.rrl]\nexempt = [\"10.0.0.0/33\"]\n",
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("defence.rrl.exempt"), "{e}");
        let c = Config::parse(
            Path::new("x.toml"),
            "[defence.rrl]\nenabled = false\n[[zone]]\norigin = \"a.\"\nfile = \"f\"\ncookies = \"require\"\n",
        )
        .unwrap();
        assert!(!c.defence.rrl.enabled);
        assert!(c.defence.cookies.enabled);
        assert_eq!(c.zones[0].cookies, Some(CookiePolicy::Require));
    }
}
