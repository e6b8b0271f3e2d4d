//! `[server]` (listeners and connection lifecycle), `[limits]` and `[http2]`.

use std::net::SocketAddr;

use super::values::*;
use serde::Deserialize;

/// `[server]`: listeners and connection lifecycle.
#[derive(Clone, Debug, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct Server {
    /// Plaintext listeners: HTTP/1.1, and HTTP/2 by prior knowledge (h2c) when `h2c`.
    pub listen: Vec<SocketAddr>,
    /// Runtime worker threads (0: one per core the process may run on). Start-time only.
    #[serde(deserialize_with = "range_usize::<0, 1024, _>")]
    pub workers: usize,
    /// Accept HTTP/2 by prior knowledge on the plaintext listeners.
    pub h2c: bool,
    /// Most open client connections; a further one takes the place of an idle one, or is
    /// closed at accept and counted when none is idle.
    #[serde(deserialize_with = "range_usize::<1, 10000000, _>")]
    pub max_connections: usize,
    /// Most open connections from one source address; further ones are closed at accept.
    #[serde(deserialize_with = "range_usize::<1, 10000000, _>")]
    pub max_connections_per_source: usize,
    /// Most requests of one source (an IPv4 address, an IPv6 /64) waiting on origins at
    /// once, over all its connections; further ones are answered 503 and counted.
    #[serde(deserialize_with = "range_u32::<1, 10000000, _>")]
    pub max_upstream_per_source: u32,
    /// A request head (and a TLS handshake, and the HTTP/2 preface) must arrive within this; also the HTTP/1.1 keep-alive idle limit.
    #[serde(deserialize_with = "range::<100, 3600000, _>")]
    pub header_read_timeout_ms: u64,
    /// An HTTP/2 connection with no request in flight for this long is closed (GOAWAY).
    #[serde(deserialize_with = "range::<100, 86400000, _>")]
    pub idle_timeout_ms: u64,
    /// A connection older than this is closed after its current requests (GOAWAY / `Connection: close`).
    #[serde(deserialize_with = "range::<1, 604800, _>")]
    pub max_connection_age_secs: u64,
    /// A connection that has carried this many requests (HTTP/2: streams) is closed after them.
    #[serde(deserialize_with = "range_u32::<1, 4000000000, _>")]
    pub max_requests_per_connection: u32,
    /// Blocked sources (the first this many entries of the block map) whose SYNs a
    /// kernel socket filter on the listeners drops before any connection exists (0: off;
    /// the accept-time check covers the rest). Start-time only.
    #[serde(deserialize_with = "range_usize::<0, 3500, _>")]
    pub syn_filter_max: usize,
    /// After GOAWAY (or `Connection: close`), how long in-flight requests may still finish.
    #[serde(deserialize_with = "range::<0, 600000, _>")]
    pub graceful_close_ms: u64,
    /// A response whose client takes none of it for this long (or, once the origin sent all
    /// of it, does not take the rest within this) is ended and the client dropped; an upstream
    /// connection still open is closed (nginx's `send_timeout`).
    #[serde(deserialize_with = "range::<100, 3600000, _>")]
    pub send_timeout_ms: u64,
    /// A response is read from the origin into memory up to this many bytes ahead of the
    /// client (nginx's proxy buffers): one that fits frees its origin connection at once.
    #[serde(deserialize_with = "range_usize::<4096, 1073741824, _>")]
    pub response_buffer_bytes: usize,
    /// Most bytes reserved for response buffers over all responses; past it, responses
    /// stream through a small window (counted as `limit="response_buffer_total"`).
    #[serde(deserialize_with = "range_usize::<0, 68719476736, _>")]
    pub response_buffer_total_bytes: usize,
    /// A response larger than its buffer must be taken by the client at least this fast on
    /// average after its first two seconds (0: no minimum), else the client is dropped and
    /// the origin connection closed.
    #[serde(deserialize_with = "range::<0, 1073741824, _>")]
    pub send_min_rate_bytes_per_sec: u64,
    /// A request body is read into memory up to this many bytes before the upstream is
    /// contacted (nginx's `client_body_buffer_size`); a larger one streams.
    #[serde(deserialize_with = "range_usize::<0, 67108864, _>")]
    pub body_buffer_bytes: usize,
    /// Most bytes of request bodies buffered at once over all requests; past it, bodies
    /// stream without a buffer (counted).
    #[serde(deserialize_with = "range_usize::<0, 68719476736, _>")]
    pub body_buffer_total_bytes: usize,
    /// Most bytes of HTTP/1.1 request heads held unfinished at once over all connections,
    /// past each head's first 8 KiB (which hyper's first read takes anyway): a connection
    /// whose head would go past it is closed (counted as `limit="header_buffer_total"`);
    /// HTTP/2 header blocks left open count too. 0: no head past its free part.
    #[serde(deserialize_with = "range_usize::<0, 68719476736, _>")]
    pub header_buffer_total_bytes: usize,
    /// A request body must keep at least this rate after its first two seconds (0: no
    /// minimum); a slower one is answered 408 and its upstream connection closed.
    #[serde(deserialize_with = "range::<0, 1073741824, _>")]
    pub body_min_rate_bytes_per_sec: u64,
    /// A whole request body must arrive within this.
    #[serde(deserialize_with = "range::<100, 86400000, _>")]
    pub body_timeout_ms: u64,
    /// Proxies (addresses or prefixes: load balancers) whose connections start with a PROXY
    /// protocol header (version 2, or version 1 text): its client is the one every rule,
    /// block and log sees. A listed proxy's connection without a valid header within
    /// `header_read_timeout_ms` is closed and counted. The listed proxies are never blocked.
    pub proxy_allow: Vec<String>,
    /// Hops (addresses or prefixes: a reverse proxy, a CDN) that name their client in
    /// `X-Forwarded-For` rather than a PROXY header: a request that came through one is its
    /// client's — the rightmost address of `X-Forwarded-For` that is not itself a listed hop
    /// (nginx's `set_real_ip_from` with `real_ip_recursive`) — for every rule, block, limit,
    /// challenge and log. The hops are never blocked, and their connections are bounded by
    /// `max_connections` only (they carry many clients).
    pub real_ip_from: Vec<String>,
}

impl Default for Server {
    fn default() -> Self {
        Server {
            listen: vec![SocketAddr::from(([127, 0, 0, 1], 8080))],
            workers: 0,
            h2c: true,
            max_connections: 50_000,
            max_connections_per_source: 256,
            max_upstream_per_source: 512,
            header_read_timeout_ms: 10_000,
            idle_timeout_ms: 60_000,
            max_connection_age_secs: 3_600,
            max_requests_per_connection: 1_000,
            graceful_close_ms: 5_000,
            syn_filter_max: 1_024,
            send_timeout_ms: 60_000,
            response_buffer_bytes: 1 << 20,
            response_buffer_total_bytes: 512 << 20,
            send_min_rate_bytes_per_sec: 1024,
            proxy_allow: Vec::new(),
            real_ip_from: Vec::new(),
            // As large as the default max_body_bytes: every body taken by default is whole
            // before an origin sees it (nginx's proxy_request_buffering, in memory).
            body_buffer_bytes: 1 << 20,
            body_buffer_total_bytes: 256 << 20,
            header_buffer_total_bytes: 64 << 20,
            body_min_rate_bytes_per_sec: 1024,
            body_timeout_ms: 60_000,
        }
    }
}

/// `[limits]`: sizes of what a client may send.
#[derive(Clone, Debug, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct Limits {
    /// Longest request target (path and query), bytes; longer gets 414.
    #[serde(deserialize_with = "range_usize::<64, 1048576, _>")]
    pub max_uri_bytes: usize,
    /// Largest request head: request line and headers (HTTP/1.1), header list (HTTP/2); larger gets 431.
    #[serde(deserialize_with = "range_usize::<1024, 1048576, _>")]
    pub max_header_bytes: usize,
    /// Largest single header field (name, `: `, value and line end), as nginx's
    /// `large_client_header_buffers` size; larger gets 431.
    #[serde(deserialize_with = "range_usize::<256, 1048576, _>")]
    pub max_header_field_bytes: usize,
    /// Most header fields in one HTTP/1.1 request; more gets 431.
    #[serde(deserialize_with = "range_usize::<8, 10000, _>")]
    pub max_headers: usize,
    /// Largest request body, bytes; larger gets 413 (from Content-Length at once, else when reached).
    #[serde(deserialize_with = "range::<0, 1099511627776, _>")]
    pub max_body_bytes: u64,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_uri_bytes: 8_192,
            max_header_bytes: 32_768,
            max_header_field_bytes: 8_192,
            max_headers: 100,
            // nginx's client_max_body_size.
            max_body_bytes: 1 << 20,
        }
    }
}

/// `[http2]`: limits against abusive HTTP/2 clients (hyper and h2 knobs, and our own reset-flood check).
#[derive(Clone, Debug, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct Http2 {
    /// SETTINGS_MAX_CONCURRENT_STREAMS.
    #[serde(deserialize_with = "range_u32::<1, 10000, _>")]
    pub max_concurrent_streams: u32,
    /// Streams reset by the client before we accepted them; beyond, GOAWAY ENHANCE_YOUR_CALM (h2).
    #[serde(deserialize_with = "range_usize::<1, 100000, _>")]
    pub max_pending_accept_reset_streams: usize,
    /// Streams we had to reset for protocol errors; beyond, GOAWAY (h2, RUSTSEC-2024-0003).
    #[serde(deserialize_with = "range_usize::<1, 100000, _>")]
    pub max_local_error_reset_streams: usize,
    /// Requests cancelled by the client before their response head are "premature resets"; a
    /// connection with at least this many, making up more than `reset_flood_ratio` of its
    /// requests, is closed (Envoy's rapid-reset heuristic).
    #[serde(deserialize_with = "range_u32::<1, 1000000, _>")]
    pub reset_flood_min: u32,
    /// Share of premature resets among a connection's requests beyond which it is closed.
    #[serde(deserialize_with = "fraction")]
    pub reset_flood_ratio: f64,
    /// When positive, a source caught in a reset flood also enters the block map for this long.
    #[serde(deserialize_with = "range::<0, 2592000, _>")]
    pub reset_flood_block_secs: u64,
    /// SETTINGS_INITIAL_WINDOW_SIZE per stream, bytes.
    #[serde(deserialize_with = "range_u32::<65535, 2147483647, _>")]
    pub initial_stream_window: u32,
    /// Connection-level receive window, bytes.
    #[serde(deserialize_with = "range_u32::<65535, 2147483647, _>")]
    pub initial_connection_window: u32,
    /// Bytes buffered per stream for a slow reader.
    #[serde(deserialize_with = "range_usize::<16384, 67108864, _>")]
    pub max_send_buf_size: usize,
    /// Interval of PINGs that detect dead peers (0, the default: none; idle connections end
    /// by the idle timeout and stalled readers by the send bounds, and a PING queued behind
    /// a slow reader's backlog would end a steady download).
    #[serde(deserialize_with = "range::<0, 3600000, _>")]
    pub keep_alive_interval_ms: u64,
    /// A PING not answered within this closes the connection.
    #[serde(deserialize_with = "range::<100, 3600000, _>")]
    pub keep_alive_timeout_ms: u64,
}

impl Default for Http2 {
    fn default() -> Self {
        Http2 {
            max_concurrent_streams: 128,
            max_pending_accept_reset_streams: 20,
            max_local_error_reset_streams: 256,
            reset_flood_min: 100,
            reset_flood_ratio: 0.5,
            reset_flood_block_secs: 0,
            initial_stream_window: 256 * 1024,
            initial_connection_window: 1 << 20,
            max_send_buf_size: 256 * 1024,
            keep_alive_interval_ms: 0,
            keep_alive_timeout_ms: 20_000,
        }
    }
}

/// Descriptors kept for what is not a client or origin connection (listeners, the runtime,
/// control and metrics sockets, files).
const RESERVED_FDS: usize = 1024;

/// Fewest client connections a config may be fitted down to: below it, it is refused.
const MIN_CONNECTIONS: usize = 16;

/// Raises RLIMIT_NOFILE's soft limit to what `server` needs (a descriptor per client
/// connection, one per origin connection serving it, the idle pools, a reserve); where the
/// hard limit is lower, lowers `max_connections` to fit and says so, so that accept never
/// runs out of descriptors while a request waits for its origin. Where not even
/// [`MIN_CONNECTIONS`] fit, the error says what is needed (as dnsd refuses a fleet that
/// does not fit).
pub(super) fn fit_descriptors(server: &mut Server, pools: usize) -> Result<Option<String>, String> {
    let needed = server
        .max_connections
        .saturating_mul(2)
        .saturating_add(pools)
        .saturating_add(RESERVED_FDS) as u64;
    let mut rl = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes into a valid struct.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut rl) } != 0 || rl.rlim_cur >= needed {
        return Ok(None);
    }
    let want = libc::rlimit {
        rlim_cur: needed.min(rl.rlim_max),
        rlim_max: rl.rlim_max,
    };
    // SAFETY: setrlimit reads a valid struct.
    let raised = unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &want) } == 0;
    let have = if raised { want.rlim_cur } else { rl.rlim_cur };
    if have >= needed {
        return Ok(None);
    }
    let room = (have as usize).saturating_sub(pools + RESERVED_FDS) / 2;
    if room < MIN_CONNECTIONS.min(server.max_connections) {
        let least = pools + RESERVED_FDS + 2 * MIN_CONNECTIONS.min(server.max_connections);
        return Err(format!(
            "{needed} file descriptors wanted, and the hard limit RLIMIT_NOFILE is {have}: \
             not even {MIN_CONNECTIONS} client connections (each with one to its origin) fit \
             beside the upstreams' idle pools ({pools}: pool_max_idle per worker thread) and \
             the {RESERVED_FDS} kept for listeners and files; raise the limit (LimitNOFILE= in \
             systemd) to at least {least}, or lower pool_max_idle"
        ));
    }
    let fitted = server.max_connections.min(room);
    let configured = server.max_connections;
    server.max_connections = fitted;
    Ok(Some(format!(
        "server.max_connections lowered from {configured} to {fitted} to fit RLIMIT_NOFILE \
         ({have}): each client connection may need one to its origin too; raise the limit \
         (LimitNOFILE= in systemd) to {needed}"
    )))
}
