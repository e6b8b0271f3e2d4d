//! What the running server holds for its control socket, reloads and metrics: the zones,
//! the transport sides, the defences, the optional parts (event sinks, XDP, Redis) and the
//! counter registry they all report into.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use crate::daemon::tcp::TcpServer;
use crate::query::defence;
use crate::xdp::Xdp;
use crate::zone::registry::Registry;

/// The running server's state.
pub struct State {
    /// Zones and their load state.
    pub zones: Arc<tokio::sync::Mutex<Registry>>,
    /// The config file, for reloads (None when run from flags).
    pub config_path: Option<PathBuf>,
    /// The `serve` flags, laid over the config file again at each reload.
    pub flags: crate::config::Overrides,
    /// The config in force without its zone list (templates, zone state, defaults): what
    /// `ctl zone add` needs without reading the config file again.
    pub config: Mutex<Arc<crate::config::Config>>,
    /// The `[server]` table the sockets and the pipeline were made from (a reload keeps them).
    pub started_server: crate::config::Server,
    /// `[alias]` and `[geoip]` as the server started with them (read at start only; `[geoip]
    /// ttl` is read with each zone).
    pub started_lookups: (crate::config::AliasConfig, crate::config::GeoipConfig),
    /// The other sections read at start only, as started
    /// ([`crate::config::Config::start_only_sections`]).
    pub started_sections: Vec<(&'static str, String)>,
    /// Service addresses.
    pub addrs: Vec<SocketAddr>,
    /// The TCP side.
    pub tcp: Arc<TcpServer>,
    /// The DNS over TLS pair (`[server] tls_listen`), re-read on reload.
    pub tls: Option<Arc<crate::daemon::tls::DotTls>>,
    /// When the server started.
    pub started: Instant,
    /// How long binding the UDP fleet took.
    pub bind_time: Duration,
    /// The flood defences and the block map.
    pub defence: Arc<defence::Shared>,
    /// The event flusher, when sinks are configured.
    pub flusher: Mutex<Option<shield::events::Flusher>>,
    /// The ClickHouse event sink, when `[events.clickhouse]` is configured.
    pub clickhouse: Option<shield::events::ClickHouseMonitor>,
    /// The XDP guard and the mirror feeding it, when attached.
    pub xdp: Arc<Mutex<Option<Xdp>>>,
    /// The Redis block sync, when `[redis]` is configured and it started.
    pub redis: OnceLock<shield::redis_sync::SyncMonitor>,
    /// Zone transfers, NOTIFY and TSIG.
    pub xfr: Arc<crate::xfr::Transfers>,
    /// Every counter, for `ctl stats` and /metrics.
    pub metrics: Arc<shield::metrics::Registry>,
    /// This dnsd writes the rules file's `[global]` lists into the XDP guard's maps.
    pub xdp_global: bool,
    /// The XDP answer publisher (zones with `xdp_answers`, with `[xdp]`).
    pub xdp_answers: Option<Arc<crate::xdp::sync::AnswerSync>>,
    /// The consumed catalog zones and their members.
    pub consumed: Mutex<crate::zone::catalog::Consumed>,
    /// Consumed catalogs waiting to be read.
    pub catalog_queue: Arc<crate::zone::catalog::CatalogQueue>,
    /// The control socket's mode and admitted group, which a reload applies; and its path as
    /// bound (another path waits for a restart).
    pub control: OnceLock<(shield::control::AccessHandle, PathBuf)>,
}

impl State {
    /// Keeps `c` (its zone list dropped) as the config in force.
    pub fn set_config(&self, c: crate::config::Config) {
        *self.config.lock().unwrap_or_else(|e| e.into_inner()) = Arc::new(without_zones(c));
    }

    /// The consumed catalogs' state.
    pub fn catalogs(&self) -> std::sync::MutexGuard<'_, crate::zone::catalog::Consumed> {
        self.consumed.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The config in force, without its zone list.
    pub fn config(&self) -> Arc<crate::config::Config> {
        self.config
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// Hands `peers`, the transfer peers of `c`'s zone list, to the XDP mirror, exempt from
    /// its per-source rate (their SOA checks, NOTIFYs and queries went TC=1 or unanswered
    /// under a flood forged in their name, the rate counting a source whatever the name): at
    /// start and on every reload, written with the `[global]` lists by the dnsd that writes
    /// them.
    pub fn set_rate_exempt_peers(&self, c: &crate::config::Config, peers: Vec<ipnet::IpNet>) {
        if !c.rules.as_ref().is_none_or(|r| r.xdp_global) {
            return;
        }
        let x = self.xdp.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(m) = x.as_ref().and_then(|x| x.mirror()) {
            m.set_rate_exempt_peers(peers);
        }
    }

    /// Hands the rules file's `[global]` lists to the XDP mirror (the `rules` slot and the
    /// allow tries), when this dnsd owns them (`[rules] xdp_global`, the default) and mirrors
    /// into XDP.
    pub fn sync_global_lists(&self) {
        if !self.xdp_global {
            return;
        }
        let Some(rules) = &self.defence.rules else {
            return;
        };
        let lists = rules.current().global_lists().clone();
        let x = self.xdp.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(m) = x.as_ref().and_then(|x| x.mirror()) {
            m.set_global_lists(lists);
        }
    }
}

/// `c` without its zone list (which the registry holds).
pub fn without_zones(mut c: crate::config::Config) -> crate::config::Config {
    c.zones = Vec::new();
    c.zone_specs = Vec::new();
    c
}
