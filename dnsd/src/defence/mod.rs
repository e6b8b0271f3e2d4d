//! Flood defences, plugged into the query pipeline at its named points: the block-map check
//! before parsing, DNS cookies after parsing, and after answering the random-subdomain
//! defence and response rate limiting (which may turn a response into a slip or a drop).
//!
//! [`Shared`] holds what all workers share (lock-free tables, the block map, counters);
//! each worker or TCP connection owns a [`Local`] with its block-map reader, event recorder,
//! cookie secrets and clock, refreshed once per batch.

pub mod config;
pub mod cookies;
pub mod rrl;
pub mod water_torture;

use std::net::IpAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use shield::block::{BlockEntry, BlockMap, BlockReader, Origin};
use shield::events::{Action, Aggregator, Recorder};

use config::DefenceConfig;
use cookies::{CookieStatus, Cookies, Secrets};

/// Event reason codes written with dnsd's events.
pub mod reason {
    /// The source is in the block map.
    pub const BLOCKED: u16 = 1000;
    /// Response rate limiting.
    pub const RRL: u16 = 1001;
    /// The random-subdomain defence.
    pub const RANDOM_SUBDOMAIN: u16 = 1002;
    /// A required cookie was missing or bad.
    pub const COOKIE: u16 = 1003;
}

/// Defence state shared by every worker.
pub struct Shared {
    /// The configuration.
    pub cfg: DefenceConfig,
    /// The block map (shared with the XDP mirror and Redis sync when configured).
    pub blocks: Arc<BlockMap>,
    /// Response rate limiting, when on.
    pub rrl: Option<rrl::Rrl>,
    /// Cookies, when on.
    pub cookies: Option<Arc<Cookies>>,
    /// The random-subdomain defence, when on.
    pub water: Option<water_torture::WaterTorture>,
    /// The event aggregator.
    pub events: Arc<Aggregator>,
    /// Datagrams dropped because the source is blocked: local, operator, peer decisions.
    pub blocked: [AtomicU64; 3],
    /// Escalations that the block map took.
    pub escalations: AtomicU64,
}

/// The configured cookie secrets (checked by the config loader): current and previous.
pub fn configured_secrets(c: &config::CookieConfig) -> (Option<[u8; 16]>, Option<[u8; 16]>) {
    let parse = |s: &Option<String>| s.as_deref().and_then(|s| cookies::parse_secret(s).ok());
    (parse(&c.secret), parse(&c.previous_secret))
}

/// Most zones the random-subdomain defence tracks (zone indexes beyond are not watched).
const MAX_WATCHED_ZONES: usize = 1 << 16;

impl Shared {
    /// Defence state from its config.
    pub fn new(cfg: DefenceConfig, blocks: Arc<BlockMap>, events: Arc<Aggregator>) -> Arc<Shared> {
        let cookies = cfg.cookies.enabled.then(|| {
            let (secret, previous) = configured_secrets(&cfg.cookies);
            Cookies::new(secret, previous)
        });
        Arc::new(Shared {
            rrl: cfg.rrl.enabled.then(|| rrl::Rrl::new(&cfg.rrl)),
            water: cfg.water_torture.enabled.then(|| {
                water_torture::WaterTorture::new(
                    &cfg.water_torture,
                    MAX_WATCHED_ZONES,
                    &cfg.rrl.exempt,
                )
            }),
            cookies,
            cfg,
            blocks,
            events,
            blocked: Default::default(),
            escalations: AtomicU64::new(0),
        })
    }

    /// Every defence counter, for `ctl stats` and /metrics alike.
    pub fn counters(&self, now_ms: u64) -> Vec<Counter> {
        let l = |a: &AtomicU64| a.load(Ordering::Relaxed);
        let mut v = Vec::new();
        let mut c = |ctl: &str,
                     metric: &'static str,
                     labels: &str,
                     help: &'static str,
                     gauge: bool,
                     value: u64| {
            v.push(Counter {
                ctl: ctl.to_string(),
                metric,
                labels: labels.to_string(),
                help,
                gauge,
                value,
            })
        };
        for (i, o) in ["local", "operator", "peer"].iter().enumerate() {
            c(
                &format!("blocked.{o}"),
                "dnsd_blocked_total",
                &format!("origin=\"{o}\""),
                "Datagrams dropped before parsing because the source is blocked, by who decided.",
                false,
                l(&self.blocked[i]),
            );
        }
        let b = self.blocks.stats();
        c(
            "blockmap.entries",
            "dnsd_blockmap_entries",
            "",
            "Entries in the block map.",
            true,
            b.len as u64,
        );
        c(
            "blockmap.prefixes",
            "dnsd_blockmap_prefixes",
            "",
            "Prefix entries in the block map.",
            true,
            b.prefixes as u64,
        );
        c(
            "blockmap.capacity",
            "dnsd_blockmap_capacity",
            "",
            "Capacity of the block map.",
            true,
            b.capacity as u64,
        );
        c(
            "blockmap.inserts",
            "dnsd_blockmap_inserts_total",
            "",
            "Entries added to the block map.",
            false,
            b.inserts,
        );
        c(
            "blockmap.expirations",
            "dnsd_blockmap_expirations_total",
            "",
            "Entries that expired.",
            false,
            b.expirations,
        );
        c(
            "blockmap.evictions",
            "dnsd_blockmap_evictions_total",
            "",
            "Entries evicted because the map was full.",
            false,
            b.evictions,
        );
        c(
            "blockmap.removals",
            "dnsd_blockmap_removals_total",
            "",
            "Entries removed.",
            false,
            b.removals,
        );
        for sub in &b.subscribers {
            c(
                &format!("blockmap.feed.{}.resyncs", sub.name),
                "dnsd_blockmap_feed_resyncs_total",
                &format!("subscriber=\"{}\"", sub.name),
                "Full resyncs of a change-feed subscriber that fell behind.",
                false,
                sub.resyncs,
            );
            c(
                &format!("blockmap.feed.{}.lag", sub.name),
                "dnsd_blockmap_feed_lag",
                &format!("subscriber=\"{}\"", sub.name),
                "Changes waiting for a change-feed subscriber.",
                true,
                sub.queued as u64,
            );
        }
        c(
            "escalations",
            "dnsd_escalations_total",
            "",
            "Sources escalated into the block map by dnsd.",
            false,
            l(&self.escalations),
        );
        if let Some(r) = &self.rrl {
            c(
                "rrl.limited",
                "dnsd_rrl_limited_total",
                "",
                "Responses over the RRL rate (slipped or dropped).",
                false,
                l(&r.limited),
            );
            c(
                "rrl.slipped",
                "dnsd_rrl_slipped_total",
                "",
                "Limited responses sent as TC=1 or BADCOOKIE.",
                false,
                l(&r.slipped),
            );
            c(
                "rrl.dropped",
                "dnsd_rrl_dropped_total",
                "",
                "Limited responses dropped.",
                false,
                l(&r.dropped),
            );
            c(
                "rrl.evictions",
                "dnsd_rrl_table_evictions_total",
                "",
                "RRL state evicted because its table was full.",
                false,
                r.evictions(),
            );
        }
        if let Some(k) = &self.cookies {
            c(
                "cookies.valid",
                "dnsd_cookies_total",
                "result=\"valid\"",
                "Server cookies checked, by result.",
                false,
                l(&k.valid),
            );
            c(
                "cookies.invalid",
                "dnsd_cookies_total",
                "result=\"invalid\"",
                "Server cookies checked, by result.",
                false,
                l(&k.invalid),
            );
            c(
                "cookies.rotations",
                "dnsd_cookie_rotations_total",
                "",
                "Cookie secret rotations.",
                false,
                l(&k.rotations),
            );
        }
        if let Some(w) = &self.water {
            c(
                "random_subdomain.exempted",
                "dnsd_random_subdomain_exempted_total",
                "",
                "Responses the random-subdomain defence would have dropped or escalated but for an exempt source.",
                false,
                l(&w.exempted),
            );
            c(
                "random_subdomain.attacks",
                "dnsd_random_subdomain_attacks_total",
                "",
                "Times a zone's NXDOMAIN rate crossed the flood threshold.",
                false,
                l(&w.attacks),
            );
            c(
                "random_subdomain.zones_under_attack",
                "dnsd_random_subdomain_zones_under_attack",
                "",
                "Zones under a random-subdomain flood now.",
                true,
                w.zones_under_attack(now_ms) as u64,
            );
            c(
                "random_subdomain.dropped",
                "dnsd_random_subdomain_dropped_total",
                "",
                "NXDOMAIN answers dropped for limited sources.",
                false,
                l(&w.dropped),
            );
            c(
                "random_subdomain.escalated",
                "dnsd_random_subdomain_escalated_total",
                "",
                "Sources blocked by the random-subdomain defence.",
                false,
                l(&w.escalated),
            );
            c(
                "random_subdomain.evictions",
                "dnsd_random_subdomain_table_evictions_total",
                "",
                "Per-source state evicted because its table was full.",
                false,
                w.evictions(),
            );
        }
        let a = self.events.stats();
        c(
            "events.records",
            "dnsd_events_recorded_total",
            "",
            "Events recorded into the aggregator.",
            false,
            a.records,
        );
        c(
            "events.replaced",
            "dnsd_events_replaced_total",
            "",
            "Heavy-hitter counters replaced (sources folded into other).",
            false,
            a.replaced,
        );
        c(
            "events.flushed",
            "dnsd_events_flushed_total",
            "",
            "Aggregated events flushed.",
            false,
            a.events,
        );
        c(
            "events.memory_bytes",
            "dnsd_events_memory_bytes",
            "",
            "Memory of the event aggregator.",
            true,
            a.memory_bytes as u64,
        );
        v
    }

    /// A worker's view.
    pub fn local(self: &Arc<Self>) -> Local {
        let mut l = Local {
            reader: self.blocks.reader(),
            recorder: self.events.recorder(),
            secrets: self.cookies.as_ref().map(|c| c.secrets()),
            shared: self.clone(),
            now_ms: 0,
            now_us: 0,
            slip_count: 0,
        };
        l.refresh();
        l
    }
}

/// One counter of the defences, named for `ctl stats` and for /metrics.
pub struct Counter {
    /// Name in `ctl stats`.
    pub ctl: String,
    /// Metric name.
    pub metric: &'static str,
    /// Metric labels (`k="v"`, may be empty).
    pub labels: String,
    /// Metric help text.
    pub help: &'static str,
    /// A gauge rather than a counter.
    pub gauge: bool,
    /// The value.
    pub value: u64,
}

/// One worker's defence state.
pub struct Local {
    shared: Arc<Shared>,
    reader: BlockReader,
    recorder: Recorder,
    secrets: Option<Arc<Secrets>>,
    /// Wall clock, unix ms (read once per batch).
    pub now_ms: u64,
    /// Monotonic clock, µs (read once per batch).
    pub now_us: u64,
    slip_count: u32,
}

impl Local {
    /// Reads the clocks and picks up rotated cookie secrets (once per batch).
    #[inline]
    pub fn refresh(&mut self) {
        self.now_ms = shield::clock::unix_ms();
        self.now_us = shield::clock::mono_us();
        if let Some(c) = &self.shared.cookies {
            let s = c.secrets();
            self.secrets = Some(s);
        }
    }

    /// The shared state.
    pub fn shared(&self) -> &Arc<Shared> {
        &self.shared
    }

    /// Before parsing: true when the source is blocked (one atomic load when the map is empty).
    #[inline]
    pub fn blocked(&mut self, src: IpAddr) -> bool {
        if self.reader.is_empty() {
            return false;
        }
        match self.reader.lookup(src, self.now_ms) {
            None => false,
            Some(hit) => {
                let i = match hit.origin {
                    Origin::Local => 0,
                    Origin::Operator => 1,
                    Origin::Peer => 2,
                };
                self.shared.blocked[i].fetch_add(1, Ordering::Relaxed);
                self.recorder
                    .record(0, src, Action::Blocked, reason::BLOCKED);
                true
            }
        }
    }

    /// Checks a query's cookie (`client`, `server` from the COOKIE option).
    #[inline]
    pub fn cookie_status(&self, client: &[u8], server: &[u8], src: IpAddr) -> CookieStatus {
        match (&self.secrets, &self.shared.cookies) {
            (Some(s), Some(c)) => {
                let st = s.check(client, server, src, (self.now_ms / 1000) as u32);
                match st {
                    CookieStatus::Valid => c.valid.fetch_add(1, Ordering::Relaxed),
                    CookieStatus::Invalid => c.invalid.fetch_add(1, Ordering::Relaxed),
                    _ => 0,
                };
                st
            }
            _ => CookieStatus::Absent,
        }
    }

    /// Writes a fresh server cookie for `client` at `src`, when cookies are on.
    #[inline]
    pub fn make_cookie(&self, client: &[u8], src: IpAddr, out: &mut [u8; 16]) -> bool {
        match &self.secrets {
            Some(s) => {
                s.make(client, src, (self.now_ms / 1000) as u32, out);
                true
            }
            None => false,
        }
    }

    /// Records that a query was challenged (BADCOOKIE or TC for a required cookie).
    pub fn record_challenge(&self, tenant: u32, src: IpAddr) {
        self.recorder
            .record(tenant, src, Action::Challenged, reason::COOKIE);
    }

    /// After answering (UDP, no valid cookie): the random-subdomain defence. Escalates into
    /// the block map when the source crosses the threshold.
    #[inline]
    pub fn water_torture(&mut self, zone: u32, src: IpAddr, nx: bool) -> water_torture::Verdict {
        let Some(w) = &self.shared.water else {
            return water_torture::Verdict::Pass;
        };
        let v = w.observe(zone, src, nx, self.now_ms);
        match v {
            water_torture::Verdict::Pass => {}
            water_torture::Verdict::Drop => {
                self.recorder
                    .record(zone + 1, src, Action::RateLimited, reason::RANDOM_SUBDOMAIN);
            }
            water_torture::Verdict::Escalate => {
                let ttl = Duration::from_secs(self.shared.cfg.water_torture.block_ttl);
                let host = ipnet::IpNet::from(src);
                let entry = BlockEntry::with_ttl(
                    host,
                    ttl,
                    self.now_ms,
                    "dns random-subdomain flood",
                    Origin::Local,
                );
                self.shared.blocks.insert(entry);
                self.shared.escalations.fetch_add(1, Ordering::Relaxed);
                self.recorder
                    .record(zone + 1, src, Action::Escalated, reason::RANDOM_SUBDOMAIN);
                tracing::info!(%src, zone, "source blocked: random-subdomain flood");
            }
        }
        v
    }

    /// After answering (UDP, no valid cookie): response rate limiting.
    #[inline]
    pub fn rrl(
        &mut self,
        src: IpAddr,
        class: rrl::Class,
        what: &[u8],
        qtype: u16,
        tenant: u32,
    ) -> rrl::Verdict {
        let Some(r) = &self.shared.rrl else {
            return rrl::Verdict::Pass;
        };
        let v = r.check(src, class, what, qtype, self.now_us, &mut self.slip_count);
        if v != rrl::Verdict::Pass {
            self.recorder
                .record(tenant, src, Action::RateLimited, reason::RRL);
        }
        v
    }
}
