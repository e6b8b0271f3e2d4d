//! `dnsd serve`: brings up zones, the UDP fleet, TCP, control and metrics, and runs until
//! told to stop. UDP runs on dedicated worker threads; tokio runs everything else.

use std::fmt::Write as _;
use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use listener::addrs::AddrSet;
use listener::udp::{FleetCounters, Handler, UdpFleet, UdpOptions};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::sync::Mutex;

use crate::config::Config;
use crate::ctl::{Reply, Request};
use crate::defence;
use crate::process_query::{Outcome, PipelineConfig, Processor, Transport};
use crate::stats::{self, WorkerStats};
use crate::tcp::{TcpLimits, TcpServer};
use crate::zonereg::{self, Registry};

/// Everything the control and metrics endpoints read.
pub struct Shared {
    /// Zones and their state.
    pub registry: Mutex<Registry>,
    /// The config file, for reloads (None when run from flags).
    pub config_path: Option<PathBuf>,
    /// Per-worker UDP counters.
    pub udp_stats: Vec<Arc<WorkerStats>>,
    /// TCP counters.
    pub tcp_stats: Arc<WorkerStats>,
    /// Per-address counters.
    pub fleet: Arc<FleetCounters>,
    /// Service addresses (index = fleet counter index).
    pub addrs: Vec<SocketAddr>,
    /// The TCP side.
    pub tcp: Arc<TcpServer>,
    /// When the server started.
    pub started: Instant,
    /// How long binding the UDP fleet took.
    pub bind_time: Duration,
    /// The flood defences and the block map.
    pub defence: Arc<defence::Shared>,
    /// The event flusher, when sinks are configured.
    pub flusher: std::sync::Mutex<Option<shield::events::Flusher>>,
    /// The ClickHouse event sink's counters, when `[events.clickhouse]` is configured.
    pub clickhouse: Option<shield::events::ClickHouseMonitor>,
    /// The XDP guard and the mirror feeding it, when attached.
    pub xdp: std::sync::Mutex<Option<Xdp>>,
    /// The Redis block sync's counters, when `[redis]` is configured.
    pub redis: std::sync::OnceLock<shield::redis_sync::SyncMonitor>,
    /// Zone transfers, NOTIFY and TSIG.
    pub xfr: Arc<crate::transfer::Transfers>,
}

/// The XDP guard attached to an interface and the mirror of the block map into its maps.
pub struct Xdp {
    /// The mirror (dropped first on shutdown: a last drain, then its thread stops).
    pub mirror: Option<xdp_guard::MirrorHandle>,
    /// The attached program (dropped last: detaches it).
    pub guard: xdp_guard::XdpGuard,
}

impl Drop for Xdp {
    fn drop(&mut self) {
        // The mirror goes before the guard detaches.
        drop(self.mirror.take());
    }
}

/// Attaches the XDP guard and mirrors the block map into it; says once why not when it
/// cannot.
fn start_xdp(
    cfg: Option<&xdp_guard::XdpConfig>,
    blocks: &Arc<shield::block::BlockMap>,
) -> Option<Xdp> {
    if let Some(reason) = xdp_guard::unavailable_reason(cfg) {
        if cfg.is_some() {
            tracing::warn!("running without XDP: {reason}");
        } else {
            tracing::info!("running without XDP: no [xdp] section");
        }
        return None;
    }
    let cfg = cfg?;
    let guard = match xdp_guard::XdpGuard::start(cfg) {
        Ok(g) => g,
        Err(e) => {
            tracing::error!(
                "running without XDP: cannot attach to {}: {e}",
                cfg.interface
            );
            return None;
        }
    };
    let mirror = xdp_guard::Mirror::new(
        guard.maps().clone().with_owner(xdp_guard::OWNER_DNSD),
        blocks.subscribe("xdp"),
    )
    .spawn()
    .map_err(|e| tracing::error!("XDP mirror thread: {e}"))
    .ok();
    tracing::info!(interface = %cfg.interface, "XDP guard attached");
    Some(Xdp { mirror, guard })
}

struct UdpHandler {
    p: Processor,
}

impl Handler for UdpHandler {
    #[inline]
    fn begin_batch(&mut self) {
        self.p.refresh();
    }
    #[inline]
    fn handle(
        &mut self,
        req: &[u8],
        src: SocketAddr,
        _local: u32,
        out: &mut [u8],
    ) -> Option<usize> {
        match self.p.process(req, src, Transport::Udp, out) {
            Outcome::Reply(n) => Some(n),
            Outcome::Drop | Outcome::Transfer => None,
        }
    }
}

/// Runs the server until SIGTERM or SIGINT. Returns the process exit code.
pub fn run(cfg: Config, config_path: Option<PathBuf>) -> Result<(), String> {
    let addrs: Vec<IpAddr> =
        listener::addrs::expand(&cfg.server.listen).map_err(|e| format!("server.listen: {e}"))?;
    if addrs.is_empty() {
        return Err("server.listen: no addresses configured".into());
    }
    // Zones first: the server answers from its first packet.
    let mut registry = Registry::new(zone_list(&cfg));
    let (xfr, xfr_changes) = crate::transfer::Transfers::new(&cfg);
    let plan = crate::secondary::skip_missing(&xfr, registry.plan(None, true), true);
    let results = plan
        .into_iter()
        .map(|(i, origin, file)| {
            let (r, m) = zonereg::load_one(&origin, &file);
            (i, r, m)
        })
        .collect();
    let reports = registry.apply(results);
    let failed = reports.iter().filter(|r| r.result.is_err()).count();
    if failed > 0 {
        tracing::error!("{failed} of {} zones failed to load", reports.len());
    }
    registry.publish();
    let zones = registry.published();
    {
        let x = xfr.clone();
        registry.set_on_change(Arc::new(move |origin, old, new| {
            x.changed(origin, old, new)
        }));
    }

    let pcfg = Arc::new(PipelineConfig {
        udp_payload: cfg.server.udp_payload,
    });
    let blocks = shield::block::BlockMap::new(cfg.block.clone());
    let events = shield::events::Aggregator::new(shield::events::AggregatorConfig {
        interval_secs: cfg.events.interval,
        node: cfg.events.node.clone(),
        top_k: cfg.events.top_k,
        ..Default::default()
    });
    let defence = defence::Shared::new(cfg.defence.clone(), blocks.clone(), events.clone());
    let xdp = start_xdp(cfg.xdp.as_ref(), &blocks);
    let opts = UdpOptions {
        rcvbuf: cfg.server.udp_rcvbuf,
        sndbuf: cfg.server.udp_sndbuf,
        batch: cfg.server.udp_batch,
        max_request: 4096,
        max_response: (cfg.server.udp_payload as usize).max(512),
    };
    let tcp_max_connections = fit_descriptors(&cfg, addrs.len());
    let fleet = UdpFleet::bind(&addrs, cfg.server.port, &opts).map_err(|e| e.to_string())?;
    let bind_time = fleet.startup_time();
    tracing::info!(
        addresses = addrs.len(),
        port = cfg.server.port,
        ms = bind_time.as_millis() as u64,
        "UDP sockets bound"
    );
    let tcp_listeners = listener::tcp::wildcard_listeners(
        &addrs,
        cfg.server.port,
        &listener::tcp::TcpOptions::default(),
    )
    .map_err(|e| e.to_string())?;
    let fleet_counters = fleet.counters();
    let bound = fleet.addrs().to_vec();
    let workers = if cfg.server.workers == 0 {
        std::thread::available_parallelism().map_or(1, |n| n.get())
    } else {
        cfg.server.workers
    };
    let udp_stats: Vec<Arc<WorkerStats>> = (0..workers.min(addrs.len()).max(1))
        .map(|_| Arc::new(WorkerStats::default()))
        .collect();
    let stop = Arc::new(AtomicBool::new(false));
    let (handles, waker) = {
        let zones = zones.clone();
        let pcfg = pcfg.clone();
        let udp_stats = udp_stats.clone();
        let defence = defence.clone();
        let xfr = xfr.clone();
        fleet
            .run(
                workers,
                move |w| UdpHandler {
                    p: Processor::new(
                        zones.clone(),
                        pcfg.clone(),
                        udp_stats[w % udp_stats.len()].clone(),
                        Some(&defence),
                    )
                    .with_transfers(xfr.clone()),
                },
                stop.clone(),
            )
            .map_err(|e| e.to_string())?
    };

    let tcp_stats = Arc::new(WorkerStats::default());
    let tcp = {
        let zones = zones.clone();
        let pcfg = pcfg.clone();
        let ts = tcp_stats.clone();
        let d = defence.clone();
        let x = xfr.clone();
        TcpServer::new(
            TcpLimits {
                max_connections: tcp_max_connections,
                max_per_source: cfg.server.tcp_max_per_source,
                idle: Duration::from_millis(cfg.server.tcp_idle_timeout_ms),
                max_queries: cfg.server.tcp_max_queries,
                max_pipelined: cfg.server.tcp_max_pipelined,
            },
            AddrSet::new(&addrs),
            tcp_stats.clone(),
            Some(blocks.clone()),
            Box::new(move || {
                Processor::new(zones.clone(), pcfg.clone(), ts.clone(), Some(&d))
                    .with_transfers(x.clone())
            }),
        )
    };
    let mut clickhouse = None;
    let flusher = start_flusher(&cfg, &events, &mut clickhouse);
    let shared = Arc::new(Shared {
        registry: Mutex::new(registry),
        config_path,
        udp_stats,
        tcp_stats,
        fleet: fleet_counters,
        addrs: bound,
        tcp: tcp.clone(),
        started: Instant::now(),
        bind_time,
        defence: defence.clone(),
        flusher: std::sync::Mutex::new(flusher),
        clickhouse,
        xdp: std::sync::Mutex::new(xdp),
        redis: std::sync::OnceLock::new(),
        xfr: xfr.clone(),
    });

    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .thread_name("dnsd-rt")
        .enable_all()
        .build()
        .map_err(|e| format!("cannot start the runtime: {e}"))?;
    let result = rt.block_on(async {
        for l in tcp_listeners {
            tokio::spawn(tcp.clone().serve(l));
        }
        if let Some(path) = cfg.control.socket.clone() {
            let _ = std::fs::remove_file(&path);
            if let Some(dir) = path.parent() {
                let _ = std::fs::create_dir_all(dir);
            }
            let l = tokio::net::UnixListener::bind(&path)
                .map_err(|e| format!("control.socket {}: {e}", path.display()))?;
            tokio::spawn(control_loop(l, shared.clone()));
        }
        if let Some(m) = cfg.metrics.listen.clone() {
            let sa: SocketAddr = m.parse().map_err(|e| format!("metrics.listen {m}: {e}"))?;
            let l = tokio::net::TcpListener::bind(sa)
                .await
                .map_err(|e| format!("metrics.listen {m}: {e}"))?;
            tokio::spawn(crate::metrics::serve(l, shared.clone()));
        }
        tokio::spawn(housekeeping(shared.clone()));
        tokio::spawn(crate::transfer::run_changes(xfr.clone(), xfr_changes));
        crate::secondary::spawn_all(&shared);
        // Secondaries may have missed changes while we were down: tell them now.
        for e in shared.registry.lock().await.entries() {
            if let Some(z) = &e.current {
                crate::notify::spawn_notify(&xfr, &e.origin, z, None);
            }
        }
        let sync = match cfg.redis.clone() {
            Some(mut r) => {
                if r.node_id.is_empty() {
                    r.node_id = host_name();
                }
                let node = r.node_id.clone();
                match shield::redis_sync::RedisSync::spawn(r, blocks.clone()) {
                    Ok(h) => {
                        let _ = shared.redis.set(h.monitor());
                        tracing::info!(node = %node, "block map synced through Redis");
                        Some(h)
                    }
                    Err(e) => return Err(format!("redis: {e}")),
                }
            }
            None => None,
        };
        tracing::info!("dnsd ready");
        wait_for_signals(shared.clone()).await;
        if let Some(h) = sync {
            // Last decisions out before leaving (bounded by the sync's I/O timeout).
            let st = h.shutdown().await;
            tracing::info!(
                published = st.published,
                buffered = st.buffered,
                "Redis sync stopped"
            );
        }
        Ok::<(), String>(())
    });
    stop.store(true, Ordering::SeqCst);
    waker.wake();
    for h in handles {
        let _ = h.join();
    }
    if let Some(p) = &cfg.control.socket {
        let _ = std::fs::remove_file(p);
    }
    rt.shutdown_timeout(Duration::from_millis(500));
    if let Some(f) = shared.flusher.lock().expect("flusher lock").take() {
        f.stop();
    }
    drop(shared.xdp.lock().expect("xdp lock").take());
    result
}

/// This host's name (the Redis node id when none is configured).
fn host_name() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|s| s.trim().to_string())
        .ok()
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| format!("dnsd-{}", std::process::id()))
}

/// The Redis sync's counters, when it runs.
pub fn redis_counters(shared: &Shared) -> Vec<defence::Counter> {
    let Some(m) = shared.redis.get() else {
        return Vec::new();
    };
    let s = m.stats();
    let mut v = Vec::new();
    let mut c = |name: &str, help: &'static str, gauge: bool, value: u64| {
        v.push(defence::Counter {
            ctl: format!("redis.{name}"),
            metric: "dnsd_redis_sync",
            labels: format!("what=\"{name}\""),
            help,
            gauge,
            value,
        })
    };
    let help = "Redis block sync: connections, decisions published and received, buffer, resyncs.";
    c(
        "connected",
        help,
        true,
        (s.writer_connected && s.reader_connected) as u64,
    );
    c("connects", help, false, s.connects);
    c("connect_errors", help, false, s.connect_errors);
    c("write_errors", help, false, s.write_errors);
    c("read_errors", help, false, s.read_errors);
    c("published", help, false, s.published);
    c("received", help, false, s.received);
    c("received_removals", help, false, s.received_removals);
    c("buffered", help, true, s.buffered);
    c("buffer_overflows", help, false, s.buffer_overflows);
    c("buffer_dropped", help, false, s.buffer_dropped);
    c("full_republishes", help, false, s.full_republishes);
    c("snapshots", help, false, s.snapshots);
    c("decode_errors", help, false, s.decode_errors);
    v
}

/// The zones of a config: origin, file and cookie policy.
fn zone_list(cfg: &Config) -> Vec<(zones::Name, PathBuf, defence::config::CookiePolicy)> {
    cfg.zones
        .iter()
        .filter_map(|z| {
            zones::Name::parse(&z.origin, Some(&zones::Name::root()))
                .ok()
                .map(|n| {
                    (
                        n,
                        z.file.clone(),
                        z.cookies.unwrap_or(cfg.defence.cookies.policy),
                    )
                })
        })
        .collect()
}

/// Starts the event flusher when `[events]` names a sink.
fn start_flusher(
    cfg: &Config,
    events: &Arc<shield::events::Aggregator>,
    clickhouse: &mut Option<shield::events::ClickHouseMonitor>,
) -> Option<shield::events::Flusher> {
    use shield::events::{JsonLines, SinkWriter, UnixStreamSink};
    let mut writers = Vec::new();
    let queue = 16;
    if let Some(p) = &cfg.events.file {
        match JsonLines::file(p) {
            Ok(s) => writers.extend(SinkWriter::spawn(Box::new(s), queue).ok()),
            Err(e) => tracing::error!("events.file {}: {e}", p.display()),
        }
    }
    if let Some(p) = &cfg.events.socket {
        let s = UnixStreamSink::new(p, Duration::from_secs(1));
        writers.extend(SinkWriter::spawn(Box::new(s), queue).ok());
    }
    if cfg.events.stdout {
        writers.extend(SinkWriter::spawn(Box::new(JsonLines::stdout()), queue).ok());
    }
    if let Some((w, m)) = crate::event_sinks::clickhouse(cfg, queue) {
        writers.push(w);
        *clickhouse = Some(m);
    }
    if writers.is_empty() {
        return None;
    }
    events.spawn_flusher(writers).ok()
}

/// Raises RLIMIT_NOFILE to what the config needs: a descriptor per UDP address, per TCP
/// connection and per transfer, and a reserve. When the hard limit is lower, TCP gets what
/// is left (said once, loudly) so that accept never runs out of descriptors; the UDP fleet
/// itself reports a limit too low for its sockets.
fn fit_descriptors(cfg: &Config, udp: usize) -> usize {
    use listener::limits::{RESERVED_FDS, ensure_nofile, nofile};
    let others = RESERVED_FDS + cfg.transfer.max_out + cfg.transfer.max_in;
    let tcp = cfg.server.tcp_max_connections;
    if ensure_nofile(udp + tcp + others).is_ok() {
        return tcp;
    }
    let (_, hard) = nofile();
    let _ = ensure_nofile(usize::try_from(hard).unwrap_or(usize::MAX));
    let room = usize::try_from(hard)
        .unwrap_or(usize::MAX)
        .saturating_sub(udp + others)
        .max(16);
    let fitted = tcp.min(room);
    tracing::warn!(
        configured = tcp,
        effective = fitted,
        rlimit_nofile_hard = hard,
        "server.tcp_max_connections lowered to fit RLIMIT_NOFILE: raise the hard limit \
         (LimitNOFILE= in systemd) to {}",
        udp + tcp + others
    );
    fitted
}

/// Periodic work: block-map expiry in bounded steps, cookie secret rotation.
async fn housekeeping(shared: Arc<Shared>) {
    let d = &shared.defence;
    let rotate = Duration::from_secs(d.cfg.cookies.rotate_hours * 3600);
    let rotating = d.cookies.is_some() && !rotate.is_zero();
    let mut last_rotation = Instant::now();
    let mut tick = tokio::time::interval(Duration::from_millis(500));
    loop {
        tick.tick().await;
        let now = shield::clock::unix_ms();
        // Bounded steps: at most 50,000 expirations per tick.
        d.blocks.expire(now, 50_000);
        if rotating && last_rotation.elapsed() >= rotate {
            // Configured (shared) secrets are rotated by the operator, through a reload.
            if let Some(c) = &d.cookies
                && !c.configured()
            {
                c.rotate(None);
                tracing::info!("cookie secret rotated");
            }
            last_rotation = Instant::now();
        }
    }
}

async fn wait_for_signals(shared: Arc<Shared>) {
    use tokio::signal::unix::{SignalKind, signal};
    let mut hup = signal(SignalKind::hangup()).expect("SIGHUP handler");
    let mut term = signal(SignalKind::terminate()).expect("SIGTERM handler");
    let mut int = signal(SignalKind::interrupt()).expect("SIGINT handler");
    loop {
        tokio::select! {
            _ = hup.recv() => {
                tracing::info!("SIGHUP: reloading");
                let r = reload(&shared, None, false).await;
                tracing::info!("{}", r.text.trim_end());
            }
            _ = term.recv() => break,
            _ = int.recv() => break,
        }
    }
    tracing::info!("stopping");
}

/// Reloads one zone or every changed zone (all with `force`); re-reads the zone list from
/// the config file when there is one.
pub async fn reload(shared: &Arc<Shared>, zone: Option<&str>, force: bool) -> Reply {
    let mut reg = shared.registry.lock().await;
    if zone.is_none()
        && let Some(path) = &shared.config_path
    {
        match Config::load(path) {
            Ok(c) => {
                shared.xfr.set_policies(&c);
                reload_cookie_secrets(shared, &c);
                let n = sync_zone_list(&mut reg, &c);
                if n > 0 {
                    tracing::info!("zone list changed in {}", path.display());
                }
            }
            Err(e) => {
                return Reply::err(format!("config not reloaded, keeping the running one: {e}"));
            }
        }
    }
    let only = match zone {
        Some(z) => {
            let Ok(n) = zones::Name::parse(z, Some(&zones::Name::root())) else {
                return Reply::err(format!("bad zone name {z}"));
            };
            match reg.find(&n) {
                Some(i) => Some(i),
                None => return Reply::err(format!("zone {n} is not configured")),
            }
        }
        None => None,
    };
    let plan =
        crate::secondary::skip_missing(&shared.xfr, reg.plan(only, force), only.is_some() || force);
    if plan.is_empty() {
        return Reply::ok("no zone changed\n");
    }
    let results = tokio::task::spawn_blocking(move || {
        plan.into_iter()
            .map(|(i, origin, file)| {
                let (r, m) = zonereg::load_one(&origin, &file);
                (i, r, m)
            })
            .collect::<Vec<_>>()
    })
    .await
    .unwrap_or_default();
    let reports = reg.apply(results);
    let mut text = String::new();
    let mut ok = true;
    for r in &reports {
        match &r.result {
            Ok((serial, records)) => {
                let _ = writeln!(
                    text,
                    "{}: loaded, serial {serial}, {records} records",
                    r.origin
                );
            }
            Err(e) => {
                ok = false;
                let _ = writeln!(text, "{}: FAILED, last good version kept:\n{e}", r.origin);
            }
        }
    }
    Reply { ok, text }
}

/// Installs `c`'s shared cookie secrets when they changed (a shared secret is rotated by
/// hand: the old one moves to `previous_secret`). Other `[defence]` settings need a restart.
fn reload_cookie_secrets(shared: &Shared, c: &Config) {
    let Some(cookies) = &shared.defence.cookies else {
        return;
    };
    if let (Some(secret), previous) = defence::configured_secrets(&c.defence.cookies)
        && cookies.set(secret, previous)
    {
        tracing::info!("cookie secrets changed by the config");
    }
}

/// Adds zones new in `c` and drops zones no longer in it; returns how many changed.
fn sync_zone_list(reg: &mut Registry, c: &Config) -> usize {
    let want = zone_list(c);
    let same = want.len() == reg.entries().len()
        && want
            .iter()
            .zip(reg.entries())
            .all(|(w, e)| w.0 == e.origin && w.1 == e.file && w.2 == e.cookies);
    if same {
        return 0;
    }
    let mut fresh = Registry::new(want);
    // Keep what is loaded for zones that stay.
    let mut kept = Vec::new();
    for (i, e) in fresh.entries().iter().enumerate() {
        if let Some(j) = reg.find(&e.origin)
            && reg.entries()[j].file == e.file
        {
            kept.push((i, j));
        }
    }
    let changed = fresh.entries().len() + reg.entries().len() - 2 * kept.len();
    fresh.adopt(reg, &kept);
    std::mem::swap(reg, &mut fresh);
    reg.publish();
    changed.max(1)
}

async fn control_loop(l: tokio::net::UnixListener, shared: Arc<Shared>) {
    loop {
        let Ok((s, _)) = l.accept().await else {
            continue;
        };
        let shared = shared.clone();
        tokio::spawn(async move {
            let (rd, mut wr) = s.into_split();
            let mut line = String::new();
            let mut rd = BufReader::new(rd.take(crate::ctl::MAX_REQUEST as u64));
            if rd.read_line(&mut line).await.is_err() {
                return;
            }
            let reply = match serde_json::from_str::<Request>(&line) {
                Ok(req) => command(&shared, &req.args).await,
                Err(e) => Reply::err(format!("bad request: {e}")),
            };
            let mut out = serde_json::to_string(&reply).unwrap_or_default();
            out.push('\n');
            let _ = wr.write_all(out.as_bytes()).await;
        });
    }
}

async fn command(shared: &Arc<Shared>, args: &[String]) -> Reply {
    let a: Vec<&str> = args.iter().map(String::as_str).collect();
    match a.as_slice() {
        ["reload"] => reload(shared, None, false).await,
        ["reload", "--force"] => reload(shared, None, true).await,
        ["reload", z] => reload(shared, Some(z), true).await,
        ["stats"] => Reply::ok(stats_text(shared).await),
        ["block", rest @ ..] => crate::blockctl::command(&shared.defence.blocks, rest),
        ["zones"] => Reply::ok(zones_text(shared).await),
        ["events-init"] => crate::event_sinks::events_init(shared).await,
        ["zone-refresh", z] => zone_refresh(shared, z).await,
        ["zone-notify", z] => zone_notify(shared, z).await,
        ["status"] => Reply::ok(format!(
            "running for {} s, {} addresses (bound in {} ms), {} TCP connections\n",
            shared.started.elapsed().as_secs(),
            shared.addrs.len(),
            shared.bind_time.as_millis(),
            shared.tcp.open_connections()
        )),
        _ => Reply::err(format!(
            "unknown command {:?}; commands: reload [ZONE|--force], stats, zones, zone-refresh ZONE, zone-notify ZONE, status, block add|del|list, events-init",
            args.join(" ")
        )),
    }
}

/// `ctl zone-refresh ZONE`: refreshes a secondary zone now and says how it went.
async fn zone_refresh(shared: &Arc<Shared>, z: &str) -> Reply {
    let Ok(n) = zones::Name::parse(z, Some(&zones::Name::root())) else {
        return Reply::err(format!("bad zone name {z}"));
    };
    let (tx, rx) = tokio::sync::oneshot::channel();
    let t = crate::transfer::Trigger { reply: Some(tx) };
    if !shared.xfr.trigger(n.to_lowercase().as_wire(), t) {
        return Reply::err(format!("{n} is not a secondary zone\n"));
    }
    match tokio::time::timeout(Duration::from_secs(50), rx).await {
        Ok(Ok(text)) => Reply {
            ok: !text.contains("FAILED"),
            text,
        },
        // Merged into a refresh already pending: it reports in `ctl zones`.
        Ok(Err(_)) => Reply::ok(format!("{n}: refresh already pending\n")),
        Err(_) => Reply::ok(format!("{n}: refresh still running (see ctl zones)\n")),
    }
}

/// `ctl zone-notify ZONE`: sends NOTIFY to the zone's targets now and reports each.
async fn zone_notify(shared: &Arc<Shared>, z: &str) -> Reply {
    let Ok(n) = zones::Name::parse(z, Some(&zones::Name::root())) else {
        return Reply::err(format!("bad zone name {z}"));
    };
    let cur = {
        let reg = shared.registry.lock().await;
        reg.find(&n).and_then(|i| reg.entries()[i].current.clone())
    };
    let Some(zone) = cur else {
        return Reply::err(format!("zone {n} is not served\n"));
    };
    let (tx, rx) = tokio::sync::oneshot::channel();
    crate::notify::spawn_notify(&shared.xfr, &n, &zone, Some(tx));
    match tokio::time::timeout(Duration::from_secs(55), rx).await {
        Ok(Ok(text)) => Reply {
            ok: !text.contains("FAILED"),
            text,
        },
        _ => Reply::ok(format!("{n}: NOTIFY still being retried (see ctl zones)\n")),
    }
}

/// `ctl zones`: name, serial, records, load time, last error.
pub async fn zones_text(shared: &Arc<Shared>) -> String {
    let reg = shared.registry.lock().await;
    let mut s = String::new();
    for e in reg.entries() {
        match &e.current {
            Some(z) => {
                let _ = write!(
                    s,
                    "{}\tserial {}\trecords {}\tloaded in {} ms\t{}",
                    e.origin,
                    z.serial(),
                    z.record_count(),
                    e.load_time.as_millis(),
                    e.file.display()
                );
            }
            None => {
                let _ = write!(s, "{}\tNOT LOADED\t{}", e.origin, e.file.display());
            }
        }
        if let Some(err) = &e.last_error {
            let first = err.lines().next().unwrap_or("");
            let _ = write!(s, "\tlast reload failed: {first}");
        }
        s.push_str(&shared.xfr.zone_line(&e.origin));
        s.push('\n');
    }
    s
}

/// `ctl stats`: counters as text.
pub async fn stats_text(shared: &Arc<Shared>) -> String {
    let udp = stats::sum(shared.udp_stats.iter().map(|a| &**a));
    let tcp = stats::sum(std::iter::once(&*shared.tcp_stats));
    let mut s = String::new();
    let _ = writeln!(s, "queries.udp\t{}", udp.queries);
    let _ = writeln!(s, "queries.tcp\t{}", tcp.queries);
    for (i, (_, name)) in stats::QTYPES.iter().enumerate() {
        let n = udp.qtype[i] + tcp.qtype[i];
        if n > 0 {
            let _ = writeln!(s, "queries.qtype.{name}\t{n}");
        }
    }
    let other = udp.qtype[stats::QTYPES.len()] + tcp.qtype[stats::QTYPES.len()];
    if other > 0 {
        let _ = writeln!(s, "queries.qtype.other\t{other}");
    }
    for (i, name) in stats::RCODES.iter().enumerate() {
        let n = udp.rcode[i] + tcp.rcode[i];
        if n > 0 {
            let _ = writeln!(s, "responses.rcode.{name}\t{n}");
        }
    }
    let _ = writeln!(s, "responses.truncated\t{}", udp.truncated + tcp.truncated);
    for (i, name) in stats::KINDS.iter().enumerate() {
        let _ = writeln!(s, "responses.kind.{name}\t{}", udp.kinds[i] + tcp.kinds[i]);
    }
    for (i, name) in stats::DROPS.iter().enumerate() {
        let _ = writeln!(s, "drops.{name}\t{}", udp.drops[i] + tcp.drops[i]);
    }
    let (rx, tx, kd) = shared.fleet.totals();
    let _ = writeln!(s, "udp.received\t{rx}");
    let _ = writeln!(s, "udp.answered\t{tx}");
    let _ = writeln!(s, "udp.kernel_drops\t{kd}");
    let _ = writeln!(
        s,
        "udp.oversized\t{}",
        shared.fleet.oversized.load(Ordering::Relaxed)
    );
    let _ = writeln!(
        s,
        "udp.send_errors\t{}",
        shared.fleet.send_errors.load(Ordering::Relaxed)
    );
    for (i, d) in shared.fleet.top_drops(10) {
        let _ = writeln!(s, "udp.kernel_drops.top\t{}\t{d}", shared.addrs[i].ip());
    }
    let _ = writeln!(s, "tcp.connections\t{}", shared.tcp.open_connections());
    let _ = writeln!(
        s,
        "rrl.slipped_responses\t{}",
        udp.rrl_slipped + tcp.rrl_slipped
    );
    let _ = writeln!(
        s,
        "cookies.badcookie_responses\t{}",
        udp.cookie_bad + tcp.cookie_bad
    );
    for c in shared.defence.counters(shield::clock::unix_ms()) {
        let _ = writeln!(s, "{}\t{}", c.ctl, c.value);
    }
    for c in xdp_counters(shared)
        .into_iter()
        .chain(redis_counters(shared))
        .chain(crate::event_sinks::counters(shared))
    {
        let _ = writeln!(s, "{}\t{}", c.ctl, c.value);
    }
    shared.xfr.stats_lines(&mut s);
    let reg = shared.registry.lock().await;
    let _ = writeln!(s, "reloads.ok\t{}", reg.stats.ok.load(Ordering::Relaxed));
    let _ = writeln!(
        s,
        "reloads.failed\t{}",
        reg.stats.failed.load(Ordering::Relaxed)
    );
    s
}

/// The XDP guard's counters (verdicts summed over CPUs) and its mirror's, when attached.
pub fn xdp_counters(shared: &Shared) -> Vec<defence::Counter> {
    let x = shared.xdp.lock().expect("xdp lock");
    let Some(x) = x.as_ref() else {
        return Vec::new();
    };
    let mut v = Vec::new();
    if let Ok(c) = x.guard.counters() {
        for (name, value) in c.named() {
            v.push(defence::Counter {
                ctl: format!("xdp.{name}"),
                metric: "dnsd_xdp_packets_total",
                labels: format!("verdict=\"{name}\""),
                help: "Packets the XDP guard saw, by verdict.",
                gauge: false,
                value,
            });
        }
    }
    if let Some(m) = &x.mirror {
        let s = m.stats().snapshot();
        for (name, value, help) in [
            (
                "upserted",
                s.upserted,
                "Block entries written into the kernel maps.",
            ),
            (
                "deleted",
                s.deleted,
                "Block entries deleted from the kernel maps.",
            ),
            (
                "resyncs",
                s.resyncs,
                "Full rebuilds of the kernel maps after a lag.",
            ),
            ("full", s.full, "Entries a full kernel map refused."),
            ("failed", s.failed, "Kernel map updates that failed."),
        ] {
            v.push(defence::Counter {
                ctl: format!("xdp.mirror.{name}"),
                metric: "dnsd_xdp_mirror_total",
                labels: format!("event=\"{name}\""),
                help,
                gauge: false,
                value,
            });
        }
    }
    v
}
