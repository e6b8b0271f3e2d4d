//! `front.toml`: the schema with its defaults, and the checks that refuse a bad file with `file:line:col: key: message`.
//!
//! Values are range-checked while they are read, so that a bad value is reported at its own
//! line with its dotted key; references between sections (a site's upstream, duplicate hosts)
//! and the files the config names (rules, certificates) are checked afterwards, again at the
//! line of the key that names them. Unknown keys are refused by name.
//!
//! ```toml
//! [server]                        # defaults shown
//! listen = ["127.0.0.1:8080"]     # HTTP/1.1, and h2c by prior knowledge when h2c = true
//! workers = 0                     # 0: one per core; 1: a single-threaded runtime
//! h2c = true
//! max_connections = 50000
//! max_connections_per_source = 256
//! header_read_timeout_ms = 10000  # request head, TLS handshake, HTTP/2 preface, h1 keep-alive idle
//! idle_timeout_ms = 60000         # HTTP/2 without requests in flight
//! max_connection_age_secs = 3600
//! max_requests_per_connection = 1000
//! graceful_close_ms = 5000
//! syn_filter_max = 1024           # blocked sources dropped at SYN by a socket filter
//! send_timeout_ms = 60000         # a client that takes nothing for this long (or not a buffered rest within it): dropped
//! response_buffer_bytes = 1048576 # a response read from the origin ahead of the client (fits: origin freed at once)
//! response_buffer_total_bytes = 536870912  # over all responses; past it responses stream through 64 KiB
//! send_min_rate_bytes_per_sec = 1024   # a streamed response's client, over each 2 s it is waited on (0: none)
//! body_buffer_bytes = 1048576     # request bodies read into memory before the upstream is contacted
//! body_buffer_total_bytes = 268435456  # over all requests; past it bodies stream unbuffered
//! header_buffer_total_bytes = 67108864  # heads (and TLS hellos) being read, past each one's first 8 KiB; past it: closed
//! body_min_rate_bytes_per_sec = 1024   # after the first 2 s of a body (0: none); slower: 408
//! body_timeout_ms = 60000         # a whole request body; slower: 408
//! proxy_allow = []                # load balancers whose connections start with a PROXY header (v2 or v1)
//! real_ip_from = []               # hops (reverse proxies, CDNs) whose requests name their client in X-Forwarded-For
//!
//! [limits]
//! max_uri_bytes = 8192            # 414
//! max_header_bytes = 32768        # 431 (h1 head; h2 header list)
//! max_header_field_bytes = 8192   # 431: one header field (nginx's large_client_header_buffers)
//! max_headers = 100               # 431 (h1)
//! max_body_bytes = 1048576        # 413 (nginx's client_max_body_size)
//!
//! [http2]
//! max_concurrent_streams = 128
//! max_pending_accept_reset_streams = 20
//! max_local_error_reset_streams = 256
//! reset_flood_min = 100           # premature resets before the ratio applies
//! reset_flood_ratio = 0.5
//! reset_flood_block_secs = 0      # > 0: a reset flood also blocks the source
//! initial_stream_window = 262144
//! initial_connection_window = 1048576
//! max_send_buf_size = 262144
//! keep_alive_interval_ms = 0
//! keep_alive_timeout_ms = 20000
//!
//! [tls]                           # optional; ALPN h2, http/1.1, http/1.0
//! listen = ["0.0.0.0:443"]
//! cert = "cert.pem"               # the default pair (no or an unknown server name); NAME.ocsp beside it is stapled
//! key = "key.pem"
//! cert_dir = "certs"              # NAME.crt + NAME.key (+ NAME.ocsp) per host; _wildcard.NAME.crt for *.NAME
//! unknown_sni = "default"         # or "refuse"; "refuse" when there is no cert
//! max_client_hello_bytes = 16384  # a longer ClientHello is refused at its first record (BoringSSL's bound)
//!
//! [acme]                          # optional: certificates for sites with acme = true (RFC 8555)
//! directory = "https://acme-v02.api.letsencrypt.org/directory"
//! contact = ["mailto:ops@example.com"]
//! state_dir = "/var/lib/palisade/acme"   # made 0700: account.json, NAME.crt, NAME.key
//! # ca_file = "test-ca.pem"       # roots for the ACME server's HTTPS (default: the system's)
//! challenge = "http-01"           # or "tls-alpn-01"
//! retry_secs = 60                 # least wait after a failure, doubled up to an hour, with jitter
//!
//! [forwarded]
//! x_forwarded = true              # X-Forwarded-For/-Proto/-Host
//! forwarded = true                # Forwarded: for=...;proto=...
//! trust_incoming = false          # append to the client's own instead of replacing
//! x_real_ip = true                # X-Real-IP: the client address (the client's own is replaced)
//!
//! [rules]
//! file = "rules.toml"             # shield's rules format
//! state = { limiter = { slots = 65536 }, counters = { slots = 65536 } }
//!
//! [challenge]                     # what `challenge` rules answer (a proof-of-work page)
//! key_file = "/etc/palisade/fleet.key"  # optional: clearances valid on every node with it
//! clearance_secs = 3600           # a solved challenge lets its /24 (/56) through this long
//! solve_secs = 300                # a page's token must be solved within this
//! difficulty = 16                 # leading zero bits of the SHA-256 (a rule's `difficulty` wins)
//! page_timeout_secs = 30          # the page gives up and says so
//!
//! [block]
//! capacity = 1000000
//! feed_capacity = 65536
//!
//! [xdp]
//! pin_path = "/sys/fs/bpf/palisade"   # optional: mirror the block map into the XDP guard's
//!                                     # maps (xdp-guard attach), http-front's writer slot
//!
//! [redis]                         # optional: the block map synced through Redis, as dnsd's
//! url = "redis://127.0.0.1:6379"  # (shield::redis_sync::SyncConfig; node id {host}-http-front)
//! instance = ""                   # several http-fronts on one host: each its own
//!
//! [events]                        # the same section as dnsd's (shield::events::EventsConfig)
//! output = "none"                 # or a list; none | stdout | file:PATH | unix:PATH | unixgram:PATH
//! interval_secs = 10
//! top_k = 1024
//! top_n = 20
//! v4_prefix = 24
//! v6_prefix = 56
//! connection_tenant = 0
//! # [events.clickhouse] as in palisade.toml: aggregates into ClickHouse too
//!
//! [access_log]
//! output = "none"
//! sample_rate = 0.01
//! queue = 65536
//! clickhouse = false              # true: records into [events.clickhouse]'s access table
//!
//! [metrics]
//! listen = "127.0.0.1:9180"       # optional: /metrics
//!
//! [control]
//! socket = "/run/palisade/http-front.sock"   # optional: http-front ctl (block, stats, status, reload, certs)
//!
//! [[upstream]]
//! name = "app"
//! servers = ["127.0.0.1:9000"]
//! protocol = "http1"              # or "h2c"; over TLS: "https" (HTTP/1.1) or "h2" (ALPN h2)
//! # ca_file = "origin-ca.pem"     # TLS: roots the origin is verified against (default: the system's)
//! # tls_server_name = "origin.example.com"  # TLS: SNI and the name verified (default: each server's address)
//! # client_cert = "edge.crt"      # TLS: our certificate, for origins that accept only the edge
//! # client_key = "edge.key"
//! connect_timeout_ms = 2000
//! response_timeout_ms = 30000       # until the response head; then each wait for more body
//! pool_idle_timeout_ms = 60000
//! pool_max_idle = 256             # idle connections kept per worker thread
//! # send_proxy = "v2"             # a PROXY header (v2 or v1) to the origin; connections then not pooled
//!
//! [[site]]
//! hosts = ["example.com", "*.example.com"]   # "*": any host
//! upstream = "app"
//! tenant = 7                      # none (0): only the rules file's [global] list
//! retry_after_secs = 1            # Retry-After of a 429 when the limiter gives no wait
//! access_log = true
//! encoded_slash = "reject"        # %2F, %5C, \ in a path: 400; "keep": passed on encoded
//! path_case_insensitive = false   # true: rules see the path lower-cased (case-insensitive origins)
//! path_params = false             # true: rules see segments without ";params" (servlet origins)
//! allow_trace = false             # TRACE: 405 unless true
//! strip_headers = [...]           # never passed upstream; default: DEFAULT_STRIP_HEADERS
//! underscores_in_headers = false  # headers with '_' in the name are dropped unless true
//! websocket = false               # proxy WebSocket (HTTP/1.1 Upgrade, HTTP/2 extended CONNECT)
//! websocket_idle_ms = 60000       # a WebSocket with no byte either way for this long: closed
//! websocket_max_secs = 86400      # a WebSocket open this long: closed
//! # max_requests_in_flight = 37500  # its requests waiting on its origin at once (default: 3/4
//! #                                 # of max_connections); past it 503, connection closed
//! acme = false                    # true: its hosts' certificate from [acme] (exact names only)
//! cert = "example.com.crt"        # this site's pair for its hosts over TLS (wins over cert_dir)
//! key = "example.com.key"
//! ```

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Deserialize;
use shield::block::BlockConfig;
use shield::rules::StateConfig;

use crate::target::PathOptions;

/// Why a configuration was refused.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The file could not be read.
    #[error("{}: {source}", path.display())]
    Read {
        /// The file.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
    /// The file is wrong at this place.
    #[error("{}", fmt_at(path, *line, *col, key, msg))]
    At {
        /// The file.
        path: PathBuf,
        /// 1-based line (0 when unknown).
        line: usize,
        /// 1-based column (0 when unknown).
        col: usize,
        /// The dotted key (`site[1].upstream`), empty when the error is not about one key.
        key: String,
        /// What is wrong.
        msg: String,
    },
}

fn fmt_at(path: &Path, line: usize, col: usize, key: &str, msg: &str) -> String {
    let mut s = path.display().to_string();
    if line > 0 {
        s.push_str(&format!(":{line}:{col}"));
    }
    s.push_str(": ");
    if !key.is_empty() {
        s.push_str(key);
        s.push_str(": ");
    }
    s.push_str(msg);
    s
}

impl ConfigError {
    /// The line the error points at, when known.
    pub fn line(&self) -> Option<usize> {
        match self {
            ConfigError::At { line, .. } if *line > 0 => Some(*line),
            _ => None,
        }
    }
}

use shield::toml_pos::line_col;

mod sections;
mod server;
mod site;
mod upstream;
mod values;

use sections::*;
pub use sections::{AccessLog, Acme, AcmeChallenge, Challenge, Forwarded, UnknownSni};
pub use server::{Http2, Limits, Server};
pub use shield::events::{EventsConfig as Events, Output};
use site::*;
pub use site::{DEFAULT_STRIP_HEADERS, EncodedSlash};
use upstream::*;
pub use upstream::{SendProxy, UpstreamProtocol};

// ---------------------------------------------------------------------------------------------
// The schema. Every section has defaults; the checked form is built by `Config::parse`.

#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct FileSchema {
    #[serde(default)]
    server: Server,
    #[serde(default)]
    limits: Limits,
    #[serde(default)]
    http2: Http2,
    tls: Option<TlsSchema>,
    #[serde(default)]
    forwarded: Forwarded,
    rules: Option<RulesSchema>,
    #[serde(default)]
    block: BlockConfig,
    #[serde(default)]
    xdp: XdpSchema,
    redis: Option<shield::redis_sync::SyncConfig>,
    #[serde(default)]
    events: Events,
    #[serde(default)]
    access_log: AccessLog,
    #[serde(default)]
    metrics: MetricsSchema,
    #[serde(default)]
    control: ControlSchema,
    #[serde(default)]
    upstream: Vec<UpstreamSchema>,
    #[serde(default)]
    site: Vec<SiteSchema>,
    #[serde(default)]
    log: shield::logging::LogConfig,
    #[serde(default)]
    challenge: Challenge,
    #[serde(default)]
    acme: Option<Acme>,
}

// ---------------------------------------------------------------------------------------------
// The checked configuration.

/// `[tls]`, checked: the pairs it names were read at load time, `cert_dir` is a directory.
#[derive(Clone, Debug, PartialEq)]
pub struct Tls {
    /// TLS listeners. Start-time only.
    pub listen: Vec<SocketAddr>,
    /// The default pair: certificate chain and private key (PEM).
    pub cert: Option<(PathBuf, PathBuf)>,
    /// Pairs by host name (see [`crate::tls::certs`]).
    pub cert_dir: Option<PathBuf>,
    /// What a handshake without a known server name gets.
    pub unknown_sni: UnknownSni,
    /// Longest ClientHello body taken (its 4-byte header aside); a longer one is refused as
    /// soon as it says so.
    pub max_client_hello_bytes: usize,
}

/// One `[[upstream]]`.
#[derive(Clone, Debug, PartialEq)]
pub struct Upstream {
    /// Name sites refer to.
    pub name: String,
    /// Servers, connected to in turn.
    pub servers: Vec<SocketAddr>,
    /// HTTP/1.1 or HTTP/2, in cleartext or over TLS.
    pub protocol: UpstreamProtocol,
    /// Connect timeout.
    pub connect_timeout: Duration,
    /// Time from sending the request until the response head, and most time between two
    /// reads of a response body (HTTP/1.1 upstreams).
    pub response_timeout: Duration,
    /// Idle pooled connections are closed after this.
    pub pool_idle_timeout: Duration,
    /// Most idle pooled connections kept by each worker thread.
    pub pool_max_idle: usize,
    /// A PROXY protocol header starts each connection: connections are then one client's
    /// (never pooled, as haproxy keeps them private).
    pub send_proxy: Option<SendProxy>,
    /// TLS settings of `https` and `h2` upstreams.
    pub tls: Option<crate::tls::origin::OriginTls>,
}

/// One `[[site]]`: a tenant's hosts, its upstream and its rules.
#[derive(Clone, Debug, PartialEq)]
pub struct Site {
    /// Name for logs and metrics, unique among sites: what challenge clearances are bound to
    /// (default: its first host).
    pub name: String,
    /// Hosts, lower case: `example.com`, `*.example.com` (any subdomain), `*` (any host).
    pub hosts: Vec<String>,
    /// Index into [`Config::upstreams`].
    pub upstream: usize,
    /// Tenant id in the rules file; `None` (0) or a tenant without rules: straight to the proxy.
    pub tenant: Option<u32>,
    /// Its hosts get certificates from `[acme]`.
    pub acme: bool,
    /// `Retry-After` seconds sent with 429.
    pub retry_after_secs: u32,
    /// Sampled access logs for this site's passed requests.
    pub access_log: bool,
    /// How its paths are normalised (`encoded_slash`, `path_case_insensitive`, `path_params`).
    pub path: PathOptions,
    /// TRACE is proxied (else 405).
    pub allow_trace: bool,
    /// Request headers never passed upstream (lower case).
    pub strip_headers: Vec<String>,
    /// Request headers with `_` in their names are passed (else dropped, as nginx does).
    pub underscores_in_headers: bool,
    /// WebSocket (HTTP/1.1 `Upgrade`, HTTP/2 extended CONNECT) is proxied to the upstream.
    pub websocket: bool,
    /// A WebSocket with no byte either way for this long is closed.
    pub websocket_idle_ms: u64,
    /// A WebSocket open this long is closed.
    pub websocket_max_secs: u64,
    /// Most of its requests waiting on its origin at once (each holds its client's
    /// connection, which no eviction may take): past it, 503 and the connection closed.
    /// `None`: three quarters of `server.max_connections`.
    pub max_requests_in_flight: Option<u32>,
}

/// The whole configuration, checked.
#[derive(Clone, Debug)]
pub struct Config {
    /// The file it came from.
    pub path: PathBuf,
    /// `[server] proxy_allow`, parsed.
    pub proxy: shield::proxy_proto::ProxyAllow,
    /// `[server] real_ip_from`, parsed.
    pub real_ip: shield::proxy_proto::ProxyAllow,
    /// `[server]`.
    pub server: Server,
    /// `[limits]`.
    pub limits: Limits,
    /// `[http2]`.
    pub http2: Http2,
    /// `[tls]`.
    pub tls: Option<Tls>,
    /// `[forwarded]`.
    pub forwarded: Forwarded,
    /// `[rules] file`: the shield rules file.
    pub rules_file: Option<PathBuf>,
    /// `[rules.state]`: rate-limit and escalation tables. Start-time only.
    pub rules_state: StateConfig,
    /// `[block]`: the block map. Start-time only.
    pub block: BlockConfig,
    /// `[xdp] pin_path`: mirror the block map into the XDP guard's maps pinned there. Start-time only.
    pub xdp_pin_path: Option<PathBuf>,
    /// `[redis]`: the block map synced with the other nodes (node id filled in). Start-time only.
    pub redis: Option<shield::redis_sync::SyncConfig>,
    /// `[events]`.
    pub events: Events,
    /// `[access_log]`.
    pub access_log: AccessLog,
    /// `[metrics] listen`. Start-time only.
    pub metrics: Option<SocketAddr>,
    /// `[metrics] allow`: the addresses `/metrics` answers (empty: any). Start-time only.
    pub metrics_allow: Vec<ipnet::IpNet>,
    /// `[control] socket`: `http-front ctl` talks to the running proxy there. Start-time only.
    pub control_socket: Option<PathBuf>,
    /// `[control] mode` and `group`: who besides root and http-front's user may use it.
    pub control_access: shield::control::Access,
    /// `[[upstream]]`.
    pub upstreams: Vec<Upstream>,
    /// `[[site]]`.
    pub sites: Vec<Site>,
    /// `[log]`: format and filter. Start-time only.
    pub log: shield::logging::LogConfig,
    /// `[challenge]` (the key file's path made absolute).
    pub challenge: Challenge,
    /// `[acme]` (paths made absolute). Start-time only.
    pub acme: Option<Acme>,
    /// The challenge's keys: from `[challenge] key_file`, else this process's own.
    pub challenge_keys: crate::challenge::Keys,
    /// What loading noticed and did not refuse (old spellings, sites naming a tenant the
    /// rules file does not have): logged once logging is set up, and on every reload.
    pub warnings: Vec<String>,
}

/// A checked configuration with what it names already loaded: compiled rules, TLS settings.
#[derive(Debug)]
pub struct Loaded {
    /// The configuration.
    pub config: Config,
    /// The rules compiled from `[rules] file` (empty rules without one).
    pub rules: shield::rules::Prepared,
    /// The pairs `[tls]` and the sites name, read (`cert_dir` is read by the front).
    pub tls: Option<crate::tls::certs::Fixed>,
}

impl Config {
    /// Reads and checks `path`; compiles the rules file and reads the certificates it names.
    pub fn load(path: &Path) -> Result<Loaded, ConfigError> {
        let text =
            shield::files::read_config(path, shield::files::CONFIG_MAX).map_err(|source| {
                ConfigError::Read {
                    path: path.to_path_buf(),
                    source,
                }
            })?;
        Self::parse(path, &text)
    }

    /// Checks config `text`; `path` names it in errors and anchors relative paths.
    pub fn parse(path: &Path, text: &str) -> Result<Loaded, ConfigError> {
        let at = |span: Option<std::ops::Range<usize>>, key: &str, msg: String| {
            let (line, col) = span.map_or((0, 0), |s| line_col(text, s.start));
            ConfigError::At {
                path: path.to_path_buf(),
                line,
                col,
                key: key.to_string(),
                msg,
            }
        };
        let f: FileSchema = toml::from_str(text).map_err(|e| {
            let l = shield::toml_pos::locate(text, &e);
            at(e.span(), &l.key, l.message)
        })?;
        let dir = path.parent().unwrap_or(Path::new(".")).to_path_buf();
        let abs = |p: &Path| {
            if p.is_relative() {
                dir.join(p)
            } else {
                p.to_path_buf()
            }
        };

        // Upstreams: unique names, at least one server.
        let mut upstreams: Vec<Upstream> = Vec::with_capacity(f.upstream.len());
        for (i, u) in f.upstream.iter().enumerate() {
            let name = u.name.get_ref().trim().to_string();
            if name.is_empty() {
                return Err(at(
                    Some(u.name.span()),
                    &format!("upstream[{i}].name"),
                    "empty name".into(),
                ));
            }
            if upstreams.iter().any(|x| x.name == name) {
                return Err(at(
                    Some(u.name.span()),
                    &format!("upstream[{i}].name"),
                    format!("upstream {name:?} is defined twice"),
                ));
            }
            if u.servers.get_ref().is_empty() {
                return Err(at(
                    Some(u.servers.span()),
                    &format!("upstream[{i}].servers"),
                    "needs at least one server address".into(),
                ));
            }
            let key = |k: &str| format!("upstream[{i}].{k}");
            let tls = match u
                .protocol
                .is_tls()
                .then_some(u.protocol == UpstreamProtocol::H2)
            {
                None => {
                    let given = [
                        ("ca_file", u.ca_file.as_ref().map(|s| s.span())),
                        (
                            "tls_server_name",
                            u.tls_server_name.as_ref().map(|s| s.span()),
                        ),
                        ("client_cert", u.client_cert.as_ref().map(|s| s.span())),
                        ("client_key", u.client_key.as_ref().map(|s| s.span())),
                    ];
                    if let Some((k, span)) = given.into_iter().find(|(_, s)| s.is_some()) {
                        return Err(at(
                            span,
                            &key(k),
                            format!("{k} is for TLS upstreams: protocol = \"https\" or \"h2\""),
                        ));
                    }
                    None
                }
                Some(h2) => {
                    let client = match (&u.client_cert, &u.client_key) {
                        (None, None) => None,
                        (Some(c), Some(k)) => Some((abs(c.get_ref()), abs(k.get_ref()))),
                        (Some(c), None) => {
                            return Err(at(
                                Some(c.span()),
                                &key("client_key"),
                                "client_cert needs a client_key".into(),
                            ));
                        }
                        (None, Some(k)) => {
                            return Err(at(
                                Some(k.span()),
                                &key("client_cert"),
                                "client_key needs a client_cert".into(),
                            ));
                        }
                    };
                    let ca = u.ca_file.as_ref().map(|c| abs(c.get_ref()));
                    let t = crate::tls::origin::OriginTls::build(
                        h2,
                        u.tls_server_name.as_ref().map(|n| n.get_ref().as_str()),
                        ca.as_deref(),
                        client.as_ref().map(|(c, k)| (c.as_path(), k.as_path())),
                    )
                    .map_err(|(k, msg)| {
                        use crate::tls::origin::Key;
                        let (name, span) = match k {
                            Key::CaFile => ("ca_file", u.ca_file.as_ref().map(|s| s.span())),
                            Key::ClientCert => {
                                ("client_cert", u.client_cert.as_ref().map(|s| s.span()))
                            }
                            Key::ClientKey => {
                                ("client_key", u.client_key.as_ref().map(|s| s.span()))
                            }
                            Key::ServerName => (
                                "tls_server_name",
                                u.tls_server_name.as_ref().map(|s| s.span()),
                            ),
                        };
                        at(span, &key(name), msg)
                    })?;
                    Some(t)
                }
            };
            upstreams.push(Upstream {
                tls,
                name,
                servers: u.servers.get_ref().clone(),
                protocol: u.protocol,
                connect_timeout: Duration::from_millis(u.connect_timeout_ms),
                response_timeout: Duration::from_millis(u.response_timeout_ms),
                pool_idle_timeout: Duration::from_millis(u.pool_idle_timeout_ms),
                pool_max_idle: u.pool_max_idle,
                send_proxy: u.send_proxy.as_ref().map(|v| *v.get_ref()),
            });
            if let Some(sp) = &u.send_proxy
                && u.protocol.is_h2()
            {
                return Err(at(
                    Some(sp.span()),
                    &format!("upstream[{i}].send_proxy"),
                    "an HTTP/2 connection carries many clients' requests; send_proxy needs protocol = \"http1\" or \"https\"".into(),
                ));
            }
        }

        // Sites: known upstream, valid unique hosts.
        let mut sites = Vec::with_capacity(f.site.len());
        let mut seen_hosts: std::collections::HashMap<String, usize> = Default::default();
        // A site's name is what its challenge clearances are bound to: two sites of one name
        // would take each other's clearances.
        let mut seen_names: std::collections::HashMap<String, usize> = Default::default();
        for (i, s) in f.site.iter().enumerate() {
            let Some(up) = upstreams
                .iter()
                .position(|u| u.name == *s.upstream.get_ref())
            else {
                return Err(at(
                    Some(s.upstream.span()),
                    &format!("site[{i}].upstream"),
                    format!("no [[upstream]] named {:?}", s.upstream.get_ref()),
                ));
            };
            if s.hosts.is_empty() {
                return Err(at(
                    None,
                    &format!("site[{i}].hosts"),
                    "needs at least one host".into(),
                ));
            }
            let mut hosts = Vec::with_capacity(s.hosts.len());
            for h in &s.hosts {
                let key = format!("site[{i}].hosts");
                let host = h.get_ref().trim().to_ascii_lowercase();
                if let Err(msg) = check_host(&host) {
                    return Err(at(Some(h.span()), &key, format!("{host:?}: {msg}")));
                }
                if let Some(prev) = seen_hosts.insert(host.clone(), i) {
                    return Err(at(
                        Some(h.span()),
                        &key,
                        format!("host {host:?} is already served by site[{prev}]"),
                    ));
                }
                hosts.push(host);
            }
            let mut strip_headers = Vec::with_capacity(s.strip_headers.len());
            for h in &s.strip_headers {
                let name = h.get_ref().trim().to_ascii_lowercase();
                if http::HeaderName::from_bytes(name.as_bytes()).is_err() {
                    return Err(at(
                        Some(h.span()),
                        &format!("site[{i}].strip_headers"),
                        format!("{name:?} is not a header name"),
                    ));
                }
                strip_headers.push(name);
            }
            let name = s
                .name
                .as_ref()
                .map_or_else(|| hosts[0].clone(), |n| n.get_ref().clone());
            if let Some(prev) = seen_names.insert(name.clone(), i) {
                return Err(at(
                    s.name.as_ref().map(|n| n.span()),
                    &format!("site[{i}].name"),
                    format!(
                        "{name:?} is already site[{prev}]'s name (challenge clearances are bound \
                         to it){}",
                        if s.name.is_none() {
                            " (the default: its first host)"
                        } else {
                            ""
                        }
                    ),
                ));
            }
            sites.push(Site {
                name,
                hosts,
                upstream: up,
                tenant: s.tenant,
                retry_after_secs: s.retry_after_secs,
                access_log: s.access_log,
                path: PathOptions {
                    keep_encoded_slash: s.encoded_slash == EncodedSlash::Keep,
                    case_insensitive: s.path_case_insensitive,
                    strip_params: s.path_params,
                },
                allow_trace: s.allow_trace,
                strip_headers,
                underscores_in_headers: s.underscores_in_headers,
                websocket: s.websocket,
                websocket_idle_ms: s.websocket_idle_ms,
                websocket_max_secs: s.websocket_max_secs,
                max_requests_in_flight: s.max_requests_in_flight,
                acme: s.acme.as_ref().is_some_and(|a| *a.get_ref()),
            });
        }

        // Rules: compiled now, so that a bad rules file refuses the whole config.
        let rules_schema = f.rules.clone().unwrap_or_default();
        let (rules_file, prepared) = match &rules_schema.file {
            None => (None, shield::rules::Prepared::empty()),
            Some(p) => {
                let file = abs(p.get_ref());
                let prepared = shield::rules::Prepared::load(&file)
                    .map_err(|e| at(Some(p.span()), "rules.file", e.to_string()))?;
                (Some(file), prepared)
            }
        };

        let (tls, tls_fixed) = match &f.tls {
            None => {
                if let Some((i, s)) = f.site.iter().enumerate().find(|(_, s)| s.cert.is_some()) {
                    return Err(at(
                        s.cert.as_ref().map(|c| c.span()),
                        &format!("site[{i}].cert"),
                        "a site's certificate needs a [tls] section with listeners".into(),
                    ));
                }
                (None, None)
            }
            Some(t) => {
                if t.listen.is_empty() {
                    return Err(at(None, "tls.listen", "needs at least one address".into()));
                }
                let mut fixed = crate::tls::certs::Fixed::default();
                let load =
                    |c: &toml::Spanned<PathBuf>, k: &toml::Spanned<PathBuf>, keys: (&str, &str)| {
                        let (cp, kp) = (abs(c.get_ref()), abs(k.get_ref()));
                        crate::tls::load_pair(&cp, &kp)
                            .map(|ck| (std::sync::Arc::new(ck), cp.clone(), kp.clone()))
                            .map_err(|e| {
                                let (span, key) = match e.which {
                                    crate::tls::Which::Cert | crate::tls::Which::Ocsp => {
                                        (c.span(), keys.0)
                                    }
                                    crate::tls::Which::Key => (k.span(), keys.1),
                                };
                                at(Some(span), key, e.to_string())
                            })
                    };
                let cert = match (&t.cert, &t.key) {
                    (None, None) => None,
                    (Some(c), None) => {
                        return Err(at(Some(c.span()), "tls.key", "cert needs a key".into()));
                    }
                    (None, Some(k)) => {
                        return Err(at(Some(k.span()), "tls.cert", "key needs a cert".into()));
                    }
                    (Some(c), Some(k)) => {
                        let (ck, cp, kp) = load(c, k, ("tls.cert", "tls.key"))?;
                        fixed.default = Some(ck);
                        Some((cp, kp))
                    }
                };
                for (i, s) in f.site.iter().enumerate() {
                    let keys = (format!("site[{i}].cert"), format!("site[{i}].key"));
                    match (&s.cert, &s.key) {
                        (None, None) => {}
                        (Some(c), None) => {
                            return Err(at(Some(c.span()), &keys.1, "cert needs a key".into()));
                        }
                        (None, Some(k)) => {
                            return Err(at(Some(k.span()), &keys.0, "key needs a cert".into()));
                        }
                        (Some(c), Some(k)) => {
                            let (ck, _, _) = load(c, k, (&keys.0, &keys.1))?;
                            for h in &s.hosts {
                                let host = h.get_ref().trim().to_ascii_lowercase();
                                if host == "*" {
                                    return Err(at(
                                        Some(c.span()),
                                        &keys.0,
                                        "a site for any host (\"*\") cannot name a certificate: that is [tls] cert".into(),
                                    ));
                                }
                                fixed.sites.push((host, std::sync::Arc::clone(&ck)));
                            }
                        }
                    }
                }
                let cert_dir = match &t.cert_dir {
                    None => None,
                    Some(d) => {
                        let p = abs(d.get_ref());
                        if !p.is_dir() {
                            return Err(at(
                                Some(d.span()),
                                "tls.cert_dir",
                                format!("{}: not a directory", p.display()),
                            ));
                        }
                        Some(p)
                    }
                };
                let acme_sites = f
                    .site
                    .iter()
                    .any(|s| s.acme.as_ref().is_some_and(|a| *a.get_ref()));
                if cert.is_none() && cert_dir.is_none() && fixed.sites.is_empty() && !acme_sites {
                    return Err(at(
                        None,
                        "tls",
                        "no certificate: give cert and key, cert_dir, a site's cert and key, or a site with acme = true"
                            .into(),
                    ));
                }
                let unknown_sni = match &t.unknown_sni {
                    Some(u) if *u.get_ref() == UnknownSni::Default && cert.is_none() => {
                        return Err(at(
                            Some(u.span()),
                            "tls.unknown_sni",
                            "\"default\" needs the default pair: tls.cert and tls.key".into(),
                        ));
                    }
                    Some(u) => *u.get_ref(),
                    None if cert.is_some() => UnknownSni::Default,
                    None => UnknownSni::Refuse,
                };
                (
                    Some(Tls {
                        listen: t.listen.clone(),
                        cert,
                        cert_dir,
                        unknown_sni,
                        max_client_hello_bytes: t.max_client_hello_bytes,
                    }),
                    Some(fixed),
                )
            }
        };

        if f.server.listen.is_empty() && tls.is_none() {
            return Err(at(
                None,
                "server.listen",
                "no listener: give server.listen or [tls] listen".into(),
            ));
        }
        f.block
            .validate()
            .map_err(|e| at(None, "block", e.to_string()))?;
        prepared
            .check_min_prefix(f.block.min_prefix_v4, f.block.min_prefix_v6)
            .map_err(|e| at(None, "rules.file", e.to_string()))?;
        if f.block.capacity == 0 {
            return Err(at(None, "block.capacity", "must be at least 1".into()));
        }

        let mut warnings = Vec::new();
        let mut events = f.events.clone();
        for w in events.upgrade(&dir) {
            warnings.push(format!("{}: {w}", path.display()));
        }
        for site in &sites {
            if let Some(t) = site.tenant.filter(|&t| t != 0 && !prepared.declares(t)) {
                warnings.push(match &rules_file {
                    Some(_) => format!(
                        "site {} names tenant {t}, which the rules file does not have: its requests meet only [global]",
                        site.name
                    ),
                    None => format!(
                        "site {} names tenant {t}, but there is no [rules] file: its requests meet no rules",
                        site.name
                    ),
                });
            }
        }
        events.check().map_err(|(k, m)| at(None, &k, m))?;
        let redis = match f.redis.clone() {
            Some(r) => {
                let r = r.with_node_id_for("http-front");
                r.validate().map_err(|e| at(None, "redis", e.to_string()))?;
                // The fleet key read now: a missing or unreadable one refuses the config.
                r.record_key()
                    .map_err(|e| at(None, "redis", e.to_string()))?;
                Some(r)
            }
            None => None,
        };
        let mut access_log = f.access_log.clone();
        access_log.output = access_log.output.resolve(&dir);

        let proxy = shield::proxy_proto::ProxyAllow::parse(&f.server.proxy_allow)
            .map_err(|m| at(None, "server.proxy_allow", m))?;
        let real_ip =
            shield::proxy_proto::ProxyAllow::parse(&f.server.real_ip_from).map_err(|m| {
                at(
                    None,
                    "server.real_ip_from",
                    m.replace("proxy_allow", "real_ip_from"),
                )
            })?;
        let mut challenge = f.challenge.clone();
        if challenge.clearance_secs < challenge.solve_secs.saturating_mul(2) {
            // A clearance runs from its page's issue: one solved late would expire at once,
            // and the client go round the challenge for ever.
            return Err(at(
                None,
                "challenge.clearance_secs",
                format!(
                    "{} s is less than twice solve_secs ({} s): a clearance counts from its page's issue, and one solved late would be over at once",
                    challenge.clearance_secs, challenge.solve_secs
                ),
            ));
        }
        challenge.key_file = challenge.key_file.map(|p| abs(&p));
        let challenge_keys = match &challenge.key_file {
            Some(p) => crate::challenge::Keys::from_fleet(
                &shield::fleet_key::FleetKey::load(p)
                    .map_err(|e| at(None, "challenge.key_file", e.to_string()))?,
            ),
            None => {
                if prepared.has_challenges() {
                    warnings.push(format!(
                        "{}: challenge rules without [challenge] key_file: clearances hold on this node only, until it restarts",
                        path.display()
                    ));
                }
                crate::challenge::Keys::process_local()
            }
        };
        let acme = f.acme.clone().map(|mut a| {
            a.state_dir = abs(&a.state_dir);
            a.ca_file = a.ca_file.map(|p| abs(&p));
            a
        });
        if let Some(a) = &acme {
            if !(a.directory.starts_with("https://") || a.directory.starts_with("http://")) {
                return Err(at(
                    None,
                    "acme.directory",
                    format!("{:?}: an https:// URL", a.directory),
                ));
            }
            if let Some(p) = &a.ca_file
                && !p.is_file()
            {
                return Err(at(
                    None,
                    "acme.ca_file",
                    format!("{}: no such file", p.display()),
                ));
            }
            let listeners_ok = match a.challenge {
                AcmeChallenge::Http01 => !f.server.listen.is_empty(),
                AcmeChallenge::TlsAlpn01 => tls.is_some(),
            };
            if !listeners_ok {
                return Err(at(
                    None,
                    "acme.challenge",
                    "the challenge's listener is missing: http-01 needs server.listen, tls-alpn-01 [tls] listen".into(),
                ));
            }
        }
        for (i, s) in f.site.iter().enumerate() {
            let Some(flag) = s.acme.as_ref().filter(|a| *a.get_ref()) else {
                continue;
            };
            let key = format!("site[{i}].acme");
            if acme.is_none() || tls.is_none() {
                return Err(at(
                    Some(flag.span()),
                    &key,
                    "needs an [acme] section and [tls] listeners".into(),
                ));
            }
            if let Some(h) = s.hosts.iter().find(|h| h.get_ref().contains('*')) {
                return Err(at(
                    Some(h.span()),
                    &key,
                    format!(
                        "{:?}: ACME certificates need exact names (a wildcard needs dns-01, which http-front does not answer)",
                        h.get_ref()
                    ),
                ));
            }
        }
        let config = Config {
            path: path.to_path_buf(),
            proxy,
            real_ip,
            server: f.server,
            limits: f.limits,
            http2: f.http2,
            tls,
            forwarded: f.forwarded,
            rules_file,
            rules_state: rules_schema.state,
            block: shield::block::BlockConfig {
                state_file: f.block.state_file.as_deref().map(abs),
                ..f.block
            },
            xdp_pin_path: f.xdp.pin_path.map(|p| abs(&p)),
            redis,
            events,
            access_log,
            metrics: f.metrics.listen,
            metrics_allow: f.metrics.allow.clone(),
            control_socket: f.control.socket.map(|p| abs(&p)),
            control_access: shield::control::Access {
                mode: f.control.mode,
                group: f.control.group.clone(),
            },
            upstreams,
            sites,
            log: f.log,
            challenge,
            challenge_keys,
            acme,
            warnings,
        };
        config
            .check_start_values()
            .map_err(|(key, msg)| at(None, key, msg))?;
        Ok(Loaded {
            config,
            rules: prepared,
            tls: tls_fixed,
        })
    }

    /// What a start binds or installs, checked with the file: a reload (which applies these
    /// only at the next start) must refuse what that start would. Every listening address
    /// once (over `server.listen`, `tls.listen` and `metrics.listen`), a `[log] filter` that
    /// parses, a control socket that is no directory.
    fn check_start_values(&self) -> Result<(), (&'static str, String)> {
        let mut seen = std::collections::HashSet::new();
        let tls = self.tls.iter().flat_map(|t| t.listen.iter());
        let all = self
            .server
            .listen
            .iter()
            .map(|a| ("server.listen", a))
            .chain(tls.map(|a| ("tls.listen", a)))
            .chain(self.metrics.iter().map(|a| ("metrics.listen", a)));
        for (key, a) in all {
            if !seen.insert(*a) {
                return Err((key, format!("{a} is listed twice (one socket per address)")));
            }
        }
        self.log.validate().map_err(|e| ("log.filter", e))?;
        if let Some(s) = &self.control_socket
            && s.is_dir()
        {
            return Err(("control.socket", format!("{} is a directory", s.display())));
        }
        Ok(())
    }

    /// Raises RLIMIT_NOFILE to what `server.max_connections` needs, or lowers it to fit (the
    /// warning says so): for a config about to serve, at a start and at each reload. Refused
    /// where not even a few connections fit.
    pub fn fit_descriptors(&mut self) -> Result<Option<String>, ConfigError> {
        let pools = self.idle_pools();
        match server::fit_descriptors(&mut self.server, pools) {
            Ok(w) => Ok(w.map(|w| format!("{}: {w}", self.path.display()))),
            Err(msg) => Err(ConfigError::At {
                path: self.path.clone(),
                line: 0,
                col: 0,
                key: "server.max_connections".into(),
                msg,
            }),
        }
    }

    /// Idle upstream connections the pools may keep (each upstream's per worker thread).
    fn idle_pools(&self) -> usize {
        let workers = match self.server.workers {
            0 => std::thread::available_parallelism().map_or(1, |n| n.get()),
            n => n,
        };
        self.upstreams
            .iter()
            .map(|u| u.pool_max_idle)
            .sum::<usize>()
            .saturating_mul(workers)
    }

    /// How many HTTP/1.1 upstream connections may be open at once: one per client
    /// connection the descriptor budget allows, plus the idle pools (a client's HTTP/2
    /// streams would otherwise open one each, past the process's descriptors).
    pub fn upstream_connection_limit(&self) -> usize {
        self.server
            .max_connections
            .saturating_add(self.idle_pools())
    }

    /// Upstreams reached over HTTP/1.1 (each opens connections of its own per request; the
    /// others multiplex).
    pub fn h1_upstreams(&self) -> usize {
        self.upstreams
            .iter()
            .filter(|u| !u.protocol.is_h2())
            .count()
    }

    /// Start-time-only settings that differ from `other` (reload keeps the running ones).
    pub fn restart_only_changes(&self, other: &Config) -> Vec<&'static str> {
        let mut out = Vec::new();
        if self.server.listen != other.server.listen {
            out.push("server.listen");
        }
        if self.server.workers != other.server.workers {
            out.push("server.workers");
        }
        if self.log != other.log {
            out.push("log");
        }
        if self.server.syn_filter_max != other.server.syn_filter_max {
            out.push("server.syn_filter_max");
        }
        if self.tls.as_ref().map(|t| &t.listen) != other.tls.as_ref().map(|t| &t.listen) {
            out.push("tls.listen");
        }
        if self.metrics != other.metrics {
            out.push("metrics.listen");
        }
        if self.metrics_allow != other.metrics_allow {
            out.push("metrics.allow");
        }
        if self.control_socket != other.control_socket {
            out.push("control.socket");
        }
        if self.block != other.block {
            out.push("block");
        }
        if self.rules_state != other.rules_state {
            out.push("rules.state");
        }
        if self.xdp_pin_path != other.xdp_pin_path {
            out.push("xdp.pin_path");
        }
        if self.redis != other.redis {
            out.push("redis");
        }
        if self.acme != other.acme {
            out.push("acme");
        }
        if self.events.output != other.events.output
            || self.events.aggregator() != other.events.aggregator()
            || self.events.clickhouse != other.events.clickhouse
        {
            out.push("events");
        }
        if self.access_log.output != other.access_log.output
            || self.access_log.queue != other.access_log.queue
            || self.access_log.queue_bytes != other.access_log.queue_bytes
            || self.access_log.clickhouse != other.access_log.clickhouse
        {
            out.push("access_log.output");
        }
        out
    }
}

/// Splits a TOML error into its dotted key and its message.
fn check_host(h: &str) -> Result<(), &'static str> {
    if h == "*" {
        return Ok(());
    }
    let name = h.strip_prefix("*.").unwrap_or(h);
    if name.is_empty() || name.len() > 253 {
        return Err("not a host name");
    }
    if name.contains(':') {
        return Err("give the host without a port");
    }
    let ok = name.split('.').all(|l| {
        !l.is_empty()
            && l.len() <= 63
            && l.bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
    });
    if !ok {
        return Err("not a host name (letters, digits, '-', '_', dots; '*.' only in front)");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(t: &str) -> Result<Config, ConfigError> {
        Config::parse(Path::new("front.toml"), t).map(|l| l.config)
    }

    const MIN: &str = "[[upstream]]\nname = \"app\"\nservers = [\"127.0.0.1:9000\"]\n\n[[site]]\nhosts = [\"example.com\"]\nupstream = \"app\"\n";

    #[test]
    fn defaults() {
        let c = parse(MIN).unwrap();
        assert_eq!(c.server, Server::default());
        assert_eq!(c.limits.max_uri_bytes, 8192);
        assert_eq!(c.sites[0].name, "example.com");
        assert_eq!(c.sites[0].retry_after_secs, 1);
        assert_eq!(c.upstreams[0].protocol, UpstreamProtocol::Http1);
    }

    #[test]
    fn unknown_key_names_file_line_and_key() {
        let e = parse(&format!("[server]\nworkers = 1\nbogus = 3\n{MIN}"))
            .unwrap_err()
            .to_string();
        assert!(e.starts_with("front.toml:3:1: "), "{e}");
        assert!(e.contains("bogus"), "{e}");
    }

    #[test]
    fn bad_value_names_key_and_line() {
        let e = parse(&format!("{MIN}[limits]\nmax_uri_bytes = 5\n"))
            .unwrap_err()
            .to_string();
        assert!(
            e.starts_with("front.toml:9:17: limits.max_uri_bytes: must be between 64"),
            "{e}"
        );
        let e = parse(&format!("[server]\nlisten = [\"nope\"]\n{MIN}"))
            .unwrap_err()
            .to_string();
        assert!(e.starts_with("front.toml:2:"), "{e}");
        assert!(e.contains("server.listen"), "{e}");
    }

    #[test]
    fn references_are_checked() {
        let t = MIN.replace("upstream = \"app\"", "upstream = \"ap\"");
        let e = parse(&t).unwrap_err().to_string();
        assert_eq!(
            e,
            "front.toml:7:12: site[0].upstream: no [[upstream]] named \"ap\""
        );
        let t = format!("{MIN}[[site]]\nhosts = [\"Example.com\"]\nupstream = \"app\"\n");
        let e = parse(&t).unwrap_err().to_string();
        assert!(
            e.contains(
                "front.toml:9:10: site[1].hosts: host \"example.com\" is already served by site[0]"
            ),
            "{e}"
        );
        // Names are unique (clearances are bound to them), the default one included.
        let t = format!(
            "{MIN}[[site]]\nname = \"example.com\"\nhosts = [\"b.test\"]\nupstream = \"app\"\n"
        );
        let e = parse(&t).unwrap_err().to_string();
        assert!(
            e.starts_with(
                "front.toml:9:8: site[1].name: \"example.com\" is already site[0]'s name"
            ),
            "{e}"
        );
        let t = MIN.replace("example.com\"", "ex ample.com\"");
        assert!(
            parse(&t)
                .unwrap_err()
                .to_string()
                .contains("not a host name")
        );
    }

    #[test]
    fn rules_errors_carry_both_files() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(
            dir.path().join("rules.toml"),
            "[[tenant]]\nid = 1\ndeny = [\"1.2.3.0/33\"]\n",
        )
        .unwrap();
        let p = dir.path().join("front.toml");
        std::fs::write(&p, format!("{MIN}[rules]\nfile = \"rules.toml\"\n")).unwrap();
        let e = Config::load(&p).map(|_| ()).unwrap_err().to_string();
        assert!(e.contains("front.toml:9:8: rules.file: "), "{e}");
        assert!(e.contains("rules.toml:3:9:"), "{e}");
    }

    #[test]
    fn outputs() {
        let c = parse(&format!(
            "{MIN}[access_log]\noutput = \"file:log.jsonl\"\nsample_rate = 1.0\n"
        ))
        .unwrap();
        assert_eq!(
            c.access_log.output,
            Output::File(PathBuf::from("log.jsonl"))
        );
        let e = parse(&format!("{MIN}[events]\noutput = \"kafka\"\n"))
            .unwrap_err()
            .to_string();
        assert!(e.contains("events.output"), "{e}");
    }
}
