//! The running front: the prepared configuration (one snapshot, swapped whole on reload), and what outlives reloads — block map, rules state, aggregator, counters, connection registry.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use arc_swap::ArcSwap;
use hyper::server::conn::{http1, http2};
use hyper_util::rt::{TokioExecutor, TokioTimer};
use shield::block::BlockMap;
use shield::events::{Aggregator, Flusher, SinkWriter};
use shield::rules::{Prepared, RuleSet, RuleState};
use tokio_rustls::TlsAcceptor;

use crate::tls::certs::Resolver;

use crate::access_log::{self, AccessLogger};
use crate::config::{Config, ConfigError, Loaded, Output};
use crate::conn_registry::Registry;
use crate::counters::{Counter, Counters};
use crate::forward::upstream::Upstream;
use crate::site::Sites;

/// Why the front could not start.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    /// A listener could not be bound.
    #[error("cannot listen on {addr}: {source}")]
    Listen {
        /// The address.
        addr: SocketAddr,
        /// The error.
        source: std::io::Error,
    },
    /// An event or access-log output could not be opened.
    #[error("{what} output: {source}")]
    Output {
        /// Which output.
        what: &'static str,
        /// The error.
        source: std::io::Error,
    },
}

/// Everything the request path reads from the configuration, prepared once per change.
pub struct Snapshot {
    /// The configuration.
    pub cfg: Config,
    /// Sites by host.
    pub sites: Sites,
    /// Upstreams with their pools (kept across reloads when their settings are unchanged).
    pub upstreams: Vec<Arc<Upstream>>,
    /// TLS acceptor for the TLS listeners.
    pub tls: Option<TlsAcceptor>,
    /// Its certificates by server name (kept for the next reload and `ctl certs`).
    pub certs: Option<Arc<Resolver>>,
    /// HTTP/1.1 connection settings.
    pub h1: http1::Builder,
    /// HTTP/2 connection settings.
    pub h2: http2::Builder<TokioExecutor>,
    /// Log one passed request in this many per thread (0: off).
    pub sample_period: u64,
}

impl std::fmt::Debug for Snapshot {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Snapshot")
            .field("sites", &self.sites.len())
            .finish_non_exhaustive()
    }
}

impl Snapshot {
    /// Prepares `cfg` (with `rules` for which tenants have any, `certs` for the TLS
    /// listeners); reuses `prev`'s upstreams whose settings did not change.
    pub fn build(
        cfg: Config,
        rules: &Prepared,
        certs: Option<Arc<Resolver>>,
        prev: Option<&Snapshot>,
    ) -> Snapshot {
        let upstreams: Vec<Arc<Upstream>> = cfg
            .upstreams
            .iter()
            .map(|u| {
                prev.and_then(|p| p.upstreams.iter().find(|x| x.cfg == *u))
                    .map(Arc::clone)
                    .unwrap_or_else(|| Arc::new(Upstream::new(u)))
            })
            .collect();
        let sites = Sites::prepare(&cfg, rules, &upstreams, prev.map(|p| &p.sites));
        let mut h1 = http1::Builder::new();
        // The request line counts against hyper's head limit: give the URI its own room, so
        // that a long URI is answered 414 by the request path, not 431 by hyper.
        let head_max = cfg.limits.max_header_bytes + cfg.limits.max_uri_bytes + 64;
        h1.timer(TokioTimer::new())
            .header_read_timeout(Duration::from_millis(cfg.server.header_read_timeout_ms))
            .max_header_size(head_max)
            // A connection's read buffer holds one head (and what came after it) at most:
            // hyper's default lets it grow to 400 KB, which pipelined requests behind one
            // waiting on its origin fill on every connection.
            .max_buf_size((head_max + 8192).max(16 * 1024))
            .keep_alive(true);
        if cfg.limits.max_headers != 100 {
            // Any other value makes hyper allocate the header array per request.
            h1.max_headers(cfg.limits.max_headers);
        }
        let h = &cfg.http2;
        let mut h2 = http2::Builder::new(TokioExecutor::new());
        h2.timer(TokioTimer::new())
            .max_concurrent_streams(h.max_concurrent_streams)
            .max_pending_accept_reset_streams(h.max_pending_accept_reset_streams)
            .max_local_error_reset_streams(h.max_local_error_reset_streams)
            .max_header_list_size(
                (cfg.limits.max_header_bytes + cfg.limits.max_uri_bytes + 64) as u32,
            )
            .initial_stream_window_size(h.initial_stream_window)
            .initial_connection_window_size(h.initial_connection_window)
            .max_send_buf_size(h.max_send_buf_size)
            .keep_alive_timeout(Duration::from_millis(h.keep_alive_timeout_ms));
        if cfg.sites.iter().any(|s| s.websocket) {
            // RFC 8441: HTTP/2 clients may open WebSockets with extended CONNECT.
            h2.enable_connect_protocol();
        }
        if h.keep_alive_interval_ms > 0 {
            h2.keep_alive_interval(Duration::from_millis(h.keep_alive_interval_ms));
        }
        let rate = cfg.access_log.sample_rate;
        let logging = cfg.access_log.output != Output::None || cfg.access_log.clickhouse;
        let sample_period = if !logging || rate <= 0.0 {
            0
        } else {
            (1.0 / rate).round().max(1.0) as u64
        };
        Snapshot {
            sites,
            upstreams,
            tls: certs
                .clone()
                .map(|r| TlsAcceptor::from(crate::tls::server_config(r))),
            certs,
            h1,
            h2,
            sample_period,
            cfg,
        }
    }
}

type Buffered = (
    Arc<std::sync::atomic::AtomicUsize>,
    Arc<std::sync::atomic::AtomicUsize>,
    Arc<std::sync::atomic::AtomicUsize>,
);

/// The running front; see the module documentation.
pub struct Front {
    id: u64,
    /// Counters shown by /metrics.
    pub counters: Arc<Counters>,
    /// The block map (escalations land here; the XDP mirror and connection closer read its feed).
    pub blocks: Arc<BlockMap>,
    /// The shield rules and their state.
    pub rules: Arc<RuleSet>,
    /// The 403/429/blocked event aggregator.
    pub events: Arc<Aggregator>,
    /// Open connections by source.
    pub registry: Arc<Registry>,
    /// Tenant under which connection-level blocks are recorded.
    pub conn_tenant: AtomicU32,
    /// Counters of the listeners' SYN filter.
    pub syn_filter: Arc<crate::synfilter::FilterStats>,
    /// Bytes of request bodies buffered now (bounded by `server.body_buffer_total_bytes`).
    pub body_buffered: Arc<std::sync::atomic::AtomicUsize>,
    /// Bytes reserved for response buffers now (bounded by `server.response_buffer_total_bytes`).
    pub response_buffered: Arc<std::sync::atomic::AtomicUsize>,
    /// Bytes of unfinished HTTP/1.1 heads past their free part now (bounded by
    /// `server.header_buffer_total_bytes`).
    pub head_buffered: Arc<std::sync::atomic::AtomicUsize>,
    /// Every counter, for /metrics.
    pub metrics: Arc<shield::metrics::Registry>,
    /// ACME's certificates and challenges (with `[acme]`).
    pub acme: Option<Arc<crate::tls::acme_state::AcmeState>>,
    /// The control socket's mode and admitted group, which a reload applies.
    pub control: std::sync::OnceLock<shield::control::AccessHandle>,
    /// The ClickHouse writers (events, access log) by config section, for `ctl status`.
    pub clickhouse: Vec<(&'static str, shield::events::ClickHouseMonitor)>,
    /// The Redis block sync, once it started, for `ctl status`.
    pub redis: std::sync::OnceLock<shield::redis_sync::SyncMonitor>,
    snapshot: Arc<ArcSwap<Snapshot>>,
    /// The config as started: what the settings read at start only still follow.
    started: Arc<Config>,
    flusher: Mutex<Option<Flusher>>,
    access_log: Mutex<Option<AccessLogger>>,
    xdp: Arc<Mutex<Option<xdp_guard::daemon::DaemonXdp>>>,
    config_path: PathBuf,
}

impl crate::local::Parts for Front {
    fn id(&self) -> u64 {
        self.id
    }
    fn blocks(&self) -> &Arc<BlockMap> {
        &self.blocks
    }
    fn events(&self) -> &Arc<Aggregator> {
        &self.events
    }
    fn rules(&self) -> &Arc<RuleSet> {
        &self.rules
    }
    fn access_log_sender(&self) -> Option<crate::access_log::RecordSender> {
        Front::access_log_sender(self)
    }
}

impl std::fmt::Debug for Front {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Front")
            .field("config", &self.config_path)
            .finish_non_exhaustive()
    }
}

/// The certificate index of `cfg`'s `[tls]`: at start (`prev` none) `cert_dir` is listed, not
/// read; on reload its new and changed pairs are read now.
fn prepare_certs(
    cfg: &Config,
    fixed: &crate::tls::certs::Fixed,
    prev: Option<&Resolver>,
    counters: &Arc<Counters>,
    acme: Option<&Arc<crate::tls::acme_state::AcmeState>>,
) -> crate::tls::certs::Built {
    let t = cfg.tls.as_ref();
    let built = crate::tls::certs::build(
        fixed,
        crate::tls::certs::Options {
            cert_dir: t.and_then(|t| t.cert_dir.as_deref()),
            refuse_unknown: t.is_some_and(|t| t.unknown_sni == crate::config::UnknownSni::Refuse),
            read_now: prev.is_some(),
            acme,
        },
        prev,
        Arc::clone(counters),
    );
    if prev.is_none() {
        for w in &built.warnings {
            tracing::warn!("{w}");
        }
    }
    built
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl Front {
    /// Builds the front from a loaded configuration: block map, rules, aggregator and its flusher, access log, XDP mirror.
    pub fn new(loaded: Loaded) -> Result<Arc<Front>, StartError> {
        static IDS: AtomicU64 = AtomicU64::new(1);
        let Loaded {
            config: cfg,
            rules,
            tls,
        } = loaded;
        let blocks = BlockMap::new(cfg.block.clone());
        crate::policy::install(&blocks, &cfg, &rules);
        crate::forward::upstream::set_limit(cfg.upstream_connection_limit(), cfg.h1_upstreams());
        let events = Aggregator::new(cfg.events.aggregator());
        // Optional parts (event outputs, ClickHouse, the access log, the XDP mirror) never
        // stop the front from serving: one that cannot start is an error in the log, its
        // metrics stay absent, and the front runs without it — as dnsd does.
        let mut writers = Vec::new();
        for o in cfg.events.output.active() {
            match o.sink::<shield::events::Event>().and_then(|s| {
                s.map(|s| SinkWriter::spawn(s, cfg.events.queue_batches))
                    .transpose()
            }) {
                Ok(w) => writers.extend(w),
                Err(e) => tracing::error!("events.output {o:?}: {e}; running without it"),
            }
        }
        let mut clickhouse = Vec::new();
        match crate::clickhouse::event_writer(&cfg) {
            Ok(Some((w, m))) => {
                clickhouse.push((m, "events.clickhouse", "clickhouse_events"));
                writers.push(w);
            }
            Ok(None) => {}
            Err(e) => tracing::error!("events.clickhouse: {e}; running without it"),
        }
        let flusher = events
            .spawn_flusher(writers)
            .map_err(|source| StartError::Output {
                what: "events",
                source,
            })?;
        let counters = Arc::new(Counters::default());
        let access_log = match access_log::sink_for(&cfg.access_log.output)
            .and_then(|s| crate::clickhouse::access_sink(&cfg, s))
            .map(|(s, m)| {
                clickhouse.extend(m.map(|m| (m, "access.clickhouse", "clickhouse_access")));
                s
            })
            .and_then(|s| match s {
                Some(s) => AccessLogger::spawn(
                    s,
                    cfg.access_log.queue,
                    cfg.access_log.queue_bytes,
                    Arc::clone(&counters),
                )
                .map(Some),
                None => Ok(None),
            }) {
            Ok(l) => l,
            Err(e) => {
                tracing::error!("access_log: {e}; running without access records");
                None
            }
        };
        let xdp = cfg.xdp_pin_path.as_ref().and_then(|path| {
            let x = xdp_guard::XdpConfig::pinned_only(path);
            xdp_guard::daemon::start(Some(&x), "http-front", xdp_guard::SLOT_HTTP_FRONT, || {
                blocks.subscribe("xdp")
            })
        });
        // A tenant's escalation holds for its own sites unless it asks for the block map.
        let state = RuleState::new(&cfg.rules_state, Some(Arc::clone(&blocks)))
            .scoped_to_tenants_http(&cfg.rules_state);
        let conn_tenant = AtomicU32::new(cfg.events.connection_tenant);
        let config_path = cfg.path.clone();
        let acme = cfg
            .acme
            .as_ref()
            .map(|_| Arc::new(crate::tls::acme_state::AcmeState::default()));
        let certs = tls.map(|fixed| {
            let built = prepare_certs(&cfg, &fixed, None, &counters, acme.as_ref());
            crate::tls::certs::read_in_background(built.unread, Arc::clone(&counters));
            built.resolver
        });
        let snapshot = Arc::new(ArcSwap::from_pointee(Snapshot::build(
            cfg, &rules, certs, None,
        )));
        let started = Arc::new(snapshot.load().cfg.clone());
        let rules = Arc::new(RuleSet::new(rules, state));
        let registry = Arc::new(Registry::default());
        let syn_filter: Arc<crate::synfilter::FilterStats> = Arc::default();
        let xdp = Arc::new(Mutex::new(xdp));
        // Every counter in one registry: http-front's own (`http_front_*`) and shield's
        // parts (`palisade_*`, the names dnsd gives the same parts).
        let metrics = shield::metrics::Registry::new();
        metrics.register("counters", counters.clone());
        metrics.register("connections", registry.clone());
        let snap = Arc::clone(&snapshot);
        metrics.register(
            "sites",
            Arc::new(move |out: &mut shield::metrics::Samples| {
                let s = snap.load();
                for (what, n) in [("any", s.sites.len()), ("with_rules", s.sites.with_rules())] {
                    out.gauge(
                        format!("sites.{what}"),
                        "http_front_sites",
                        format!("rules=\"{what}\""),
                        "Sites configured; with_rules: those whose tenant has rules.",
                        n as u64,
                    );
                }
            }),
        );
        metrics.register("syn_filter", syn_filter.clone());
        metrics.register("stalls", Arc::new(crate::sources::Stalls));
        metrics.register("upstream_tls", Arc::new(crate::tls::origin::OriginTlsStats));
        if let Some(a) = &acme {
            metrics.register("acme", a.clone());
        }
        metrics.register("log", Arc::new(shield::logging::LogMetrics));
        metrics.register("blockmap", blocks.clone());
        metrics.register("rules", rules.clone());
        metrics.register("events", events.clone());
        metrics.register("sinks", Arc::new(flusher.sinks_source()));
        let mut sinks = Vec::new();
        for (m, ctl, table) in clickhouse {
            sinks.push((ctl, m.clone()));
            metrics.register(
                table,
                Arc::new(shield::events::ClickHouseSource {
                    monitor: m,
                    ctl,
                    table: if table == "clickhouse_events" {
                        "events"
                    } else {
                        "access"
                    },
                }),
            );
        }
        metrics.register("xdp", Arc::new(xdp_guard::daemon::XdpSource(xdp.clone())));
        let (body_buffered, response_buffered, head_buffered): Buffered =
            (Arc::default(), Arc::default(), Arc::default());
        metrics.register(
            "buffers",
            Arc::new(crate::sources::Buffers {
                body: body_buffered.clone(),
                response: response_buffered.clone(),
                head: head_buffered.clone(),
            }),
        );
        Ok(Arc::new(Front {
            id: IDS.fetch_add(1, Ordering::Relaxed),
            counters,
            blocks,
            rules,
            events,
            registry,
            conn_tenant,
            syn_filter,
            body_buffered,
            response_buffered,
            head_buffered,
            metrics,
            acme,
            control: std::sync::OnceLock::new(),
            clickhouse: sinks,
            redis: std::sync::OnceLock::new(),
            snapshot,
            flusher: Mutex::new(Some(flusher)),
            access_log: Mutex::new(access_log),
            xdp,
            config_path,
            started,
        }))
    }

    /// A process-unique id (thread-local handles are keyed by it).
    pub fn id(&self) -> u64 {
        self.id
    }

    /// The current snapshot.
    #[inline]
    pub fn snapshot(&self) -> Arc<Snapshot> {
        self.snapshot.load_full()
    }

    /// The config file this front reloads from.
    pub fn config_path(&self) -> &Path {
        &self.config_path
    }

    /// Re-reads the config file; on success swaps in the new snapshot and rules (and returns
    /// the config's warnings), on failure keeps the last good ones.
    pub fn reload(&self) -> Result<Vec<String>, ConfigError> {
        shield::systemd::reloading();
        let r = self.reload_now();
        shield::systemd::ready(if r.is_ok() {
            "serving (reloaded)"
        } else {
            "serving (reload refused: the running config stays)"
        });
        r
    }

    fn reload_now(&self) -> Result<Vec<String>, ConfigError> {
        let mut loaded = match Config::load(&self.config_path) {
            Ok(l) => l,
            Err(e) => {
                self.counters.bump(Counter::ReloadFailed);
                tracing::error!(error = %e, "config refused; keeping the last good config");
                return Err(e);
            }
        };
        match loaded.config.fit_descriptors() {
            Ok(Some(w)) => loaded.config.warnings.push(w),
            Ok(None) => {}
            Err(e) => {
                self.counters.bump(Counter::ReloadFailed);
                tracing::error!(error = %e, "config refused; keeping the last good config");
                return Err(e);
            }
        }
        let prev = self.snapshot.load_full();
        // Against the config as started: a change stays named until a restart applies it.
        let ignored = loaded.config.restart_only_changes(&self.started);
        if !ignored.is_empty() {
            tracing::warn!(keys = ?ignored, "these settings change only at restart; keeping the running ones");
        }
        let Loaded { config, rules, tls } = loaded;
        let mut warnings = config.warnings.clone();
        if !ignored.is_empty() {
            warnings.push(format!(
                "{} changed: read at start only, the running values stay until http-front restarts",
                ignored.join(", ")
            ));
        }
        // [control] mode and group apply now: a group removed loses its access at once.
        if let Some(h) = self.control.get()
            && let Err(e) = h.apply(&config.control_access)
        {
            warnings.push(format!(
                "[control] not applied, the running access stays: {e}"
            ));
        }
        let certs = tls.map(|fixed| {
            let built = prepare_certs(
                &config,
                &fixed,
                prev.certs.as_deref(),
                &self.counters,
                self.acme.as_ref(),
            );
            warnings.extend(built.warnings);
            built.resolver
        });
        for w in &warnings {
            tracing::warn!("{w}");
        }
        crate::policy::install(&self.blocks, &config, &rules);
        crate::forward::upstream::set_limit(
            config.upstream_connection_limit(),
            config.h1_upstreams(),
        );
        let snap = Snapshot::build(config, &rules, certs, Some(&prev));
        self.conn_tenant
            .store(snap.cfg.events.connection_tenant, Ordering::Relaxed);
        self.rules.store(rules);
        self.snapshot.store(Arc::new(snap));
        self.counters.bump(Counter::ReloadOk);
        if let Some(a) = &self.acme {
            // Sites may have gained or lost acme = true.
            a.wake.notify_one();
        }
        tracing::info!(path = %self.config_path.display(), "config reloaded");
        Ok(warnings)
    }

    /// A sender into the access-log writer, when access logs are on.
    pub fn access_log_sender(&self) -> Option<crate::access_log::RecordSender> {
        lock(&self.access_log)
            .as_ref()
            .and_then(AccessLogger::sender)
    }

    /// Whether `net` is blocked in http-front's slot of the XDP maps now (`None`: no maps).
    pub fn xdp_holds_block(&self, net: ipnet::IpNet) -> Option<bool> {
        lock(&self.xdp).as_ref()?.holds_block(net)
    }

    /// Blocks the XDP maps had no room for so far (`None`: no mirror).
    pub fn xdp_refused_full(&self) -> Option<u64> {
        lock(&self.xdp).as_ref()?.refused_full()
    }

    /// Last flush of events and access logs, stop of the XDP mirror (after the runtime is gone).
    pub fn finish(&self) {
        // This thread's handles hold an access-log sender; the writer ends when all are gone.
        crate::local::clear();
        // Side by side: each drains within its own deadline.
        let flusher = lock(&self.flusher).take();
        let access_log = lock(&self.access_log).take();
        std::thread::scope(|s| {
            if let Some(f) = flusher {
                s.spawn(move || f.stop());
            }
            if let Some(mut l) = access_log {
                s.spawn(move || l.close());
            }
        });
        drop(lock(&self.xdp).take());
    }
}
