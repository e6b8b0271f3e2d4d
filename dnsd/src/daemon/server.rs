//! `dnsd serve`: brings up zones, the UDP fleet, TCP, control and metrics, and runs until
//! told to stop. UDP runs on dedicated worker threads; tokio runs everything else.
//!
//! Optional parts — event sinks, ClickHouse, the XDP guard, Redis — never stop the server
//! from answering: one that cannot start is reported loudly (an error in the log, its
//! metrics absent or at 0) and the server runs without it. http-front takes the same stance.

use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use listener::addrs::AddrSet;
use listener::udp::{UdpFleet, UdpOptions};

use crate::config::Config;
use crate::daemon::reload::{reload, zone_list};
use crate::daemon::state::State;
use crate::daemon::tcp::{TcpLimits, TcpServer};
use crate::daemon::udp::UdpHandler;
use crate::observe::counters::WorkerStats;
use crate::query::defence;
use crate::query::process_query::{PipelineConfig, Processor};
use crate::zone::registry::Registry;

/// Runs the server until SIGTERM or SIGINT. Returns the process exit code.
pub fn run(
    cfg: Config,
    config_path: Option<PathBuf>,
    flags: crate::config::Overrides,
) -> Result<(), String> {
    let addrs: Vec<IpAddr> =
        listener::addrs::expand(&cfg.server.listen).map_err(|e| format!("server.listen: {e}"))?;
    if addrs.is_empty() {
        return Err("server.listen: no addresses configured".into());
    }
    // Zones first: the server answers from its first packet.
    let mut registry = Registry::new(zone_list(&cfg));
    registry.rrsig_warn_days = cfg.dnssec.rrsig_warn_days;
    let (xfr, xfr_changes) = crate::xfr::Transfers::new(&cfg);
    let plan = crate::xfr::secondary::skip_missing(&xfr, registry.plan(None, true), true);
    let results = crate::zone::load::load_all(plan);
    let reports = registry.apply(results);
    let failed = reports.iter().filter(|r| r.result.is_err()).count();
    if failed > 0 {
        tracing::error!("{failed} of {} zones failed to load", reports.len());
    }
    registry.publish();
    let zones = registry.published();
    let any_xdp_answers = cfg
        .zones
        .iter()
        .any(|z| z.xdp_answers == crate::config::XdpAnswers::All);
    // The transfer peers in the zone list are out of every automatic writer's reach.
    let own_never_block = defence::policy::own_set(&cfg);
    let rate_exempt_peers = defence::policy::rate_exempt_peers(&own_never_block);
    // What the config's load noticed, and the zones' tenants (checked against the rules
    // below), before the zone list leaves the config.
    for w in &cfg.warnings {
        tracing::warn!("{w}");
    }
    let zone_tenants: Vec<(String, u32)> = cfg
        .zones
        .iter()
        .filter(|z| z.tenant != 0)
        .map(|z| (z.origin.clone(), z.tenant))
        .collect();
    // The registry holds the zone list from here on.
    let cfg = crate::daemon::state::without_zones(cfg);
    let catalog_queue = Arc::new(crate::zone::catalog::CatalogQueue::default());
    {
        let x = xfr.clone();
        let q = catalog_queue.clone();
        registry.set_on_change(Arc::new(move |origin, old, new| {
            if x.policies()
                .zone(origin.to_lowercase().as_wire())
                .is_some_and(|p| p.catalog == Some(crate::config::zone_list::CatalogRole::Consumer))
            {
                q.push(origin);
            }
            x.changed(origin, old, new)
        }));
    }

    // ALIAS targets we do not serve: a cache filled from [alias] resolver (without one,
    // such names are answered SERVFAIL).
    let alias = cfg.alias.resolver.as_deref().map(|r| {
        let (cache, rx) = crate::daemon::alias::cache();
        // Checked when the config loaded.
        let addr = crate::config::transfer::parse_addr(r).expect("alias.resolver checked");
        (cache, rx, addr)
    });
    // The location database `geo:` variants are chosen by: a bad one stops the start.
    let geodb = match &cfg.geoip.db {
        Some(p) => Some(Arc::new(
            crate::zone::geo::GeoDb::open(
                p,
                // Checked when the config loaded.
                cfg.geoip
                    .keys
                    .iter()
                    .filter_map(|k| crate::zone::geo::GeoKey::parse(k))
                    .collect(),
            )
            .map_err(|e| format!("geoip.db: {e}"))?,
        )),
        None => None,
    };
    let pcfg = Arc::new(PipelineConfig {
        geodb,
        alias: alias.as_ref().map(|(c, _, _)| c.clone()),
        ecs: cfg.server.ecs,
        // Checked when the config loaded.
        ecs_from: cfg.server.ecs_sources().ok().flatten().map(Arc::new),
        udp_payload: cfg.server.udp_payload,
        // Checked when the config loaded.
        nsid: cfg.server.nsid_bytes().ok().flatten().map(Arc::from),
        identity: cfg.server.identity_txt().ok().flatten().map(Arc::from),
        version: cfg.server.version_txt().ok().flatten().map(Arc::from),
        tcp_keepalive: PipelineConfig::keepalive_units(cfg.server.tcp_idle_timeout_ms),
        compact_denial: (
            cfg.dnssec.compact_denial_rate,
            cfg.dnssec.compact_denial_per_source,
        ),
    });
    let blocks = shield::block::BlockMap::new(cfg.block.clone());
    let events = shield::events::Aggregator::new(cfg.events.aggregator());
    // The shield rules: a file that does not compile refuses the start (file:line:col).
    let rules = match (cfg.load_rules()?, &cfg.rules) {
        (Some(prepared), Some(r)) => {
            tracing::info!(file = %r.file.display(), tenants = prepared.tenant_count(), "rules loaded");
            // A tenant's escalation holds for its own zones (a resolver relaying one
            // tenant's attack keeps every other tenant's answers), unless it asks for the
            // block map.
            let state = shield::rules::RuleState::new(&r.state, Some(blocks.clone()))
                .scoped_to_tenants(&r.state);
            Some(Arc::new(shield::rules::RuleSet::new(prepared, state)))
        }
        _ => None,
    };
    // What no automatic writer may block: before the first query, the first Redis record.
    let current = rules.as_ref().map(|r| r.current());
    let never = defence::policy::merge(current.as_ref().map(|g| &***g), &own_never_block);
    drop(current);
    blocks.install_policy(&cfg.block, never);
    let tenants = || zone_tenants.iter().map(|(o, t)| (o.as_str(), *t));
    let warnings = match &rules {
        Some(r) => crate::config::tenant_warnings(tenants(), Some(&r.current())),
        None => crate::config::tenant_warnings(tenants(), None),
    };
    for w in warnings {
        tracing::warn!("{w}");
    }
    let mut defence = defence::Shared::new(cfg.defence.clone(), blocks.clone(), events.clone())
        .with_connection_tenant(cfg.events.connection_tenant);
    if let Some(r) = &rules {
        defence = defence.with_rules(r.clone());
    }
    let proxy_allow = Arc::new(cfg.server.proxies());
    let xdp = Arc::new(Mutex::new(crate::xdp::start(cfg.xdp.as_ref(), &blocks)));
    // DNS-only blocks (proven by a cookie) drop UDP to these addresses and port, nothing else.
    if let Some(m) = xdp
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .as_ref()
        .and_then(|x| x.mirror())
    {
        let nets = cfg
            .server
            .listen
            .iter()
            .filter_map(|l| shield::prefix::parse_net(l))
            .collect();
        m.set_proxies(proxy_allow.nets().to_vec());
        m.set_rrl_exempt(
            cfg.defence
                .rrl
                .exempt
                .iter()
                .filter_map(|e| shield::prefix::parse_net(e))
                .collect(),
        );
        // The slip of queries over a source's XDP rate: RRL's (its default with RRL off).
        let rrl = &cfg.defence.rrl;
        let slip = if rrl.enabled {
            rrl.slip.min(64) as u8
        } else {
            2
        };
        m.set_services(nets, cfg.server.port, slip);
    }
    let opts = UdpOptions {
        rcvbuf: cfg.server.udp_rcvbuf,
        sndbuf: cfg.server.udp_sndbuf,
        batch: cfg.server.udp_batch,
        max_request: 4096,
        max_response: (cfg.server.udp_payload as usize).max(512),
    };
    // UDP sockets, and TCP listeners where each address gets one.
    let listening = addrs.len()
        + if addrs.len() <= listener::tcp::PER_ADDRESS_MAX {
            addrs.len()
        } else {
            2
        };
    let tcp_max_connections = fit_descriptors(&cfg, listening);
    let fleet = UdpFleet::bind(&addrs, cfg.server.port, &opts).map_err(|e| e.to_string())?;
    let bind_time = fleet.startup_time();
    tracing::info!(
        addresses = addrs.len(),
        port = cfg.server.port,
        ms = bind_time.as_millis() as u64,
        "UDP sockets bound"
    );
    // TCP: steered by sk_lookup where `xdp-guard attach` installed it (one listener per
    // family takes every service address, and other listeners on the port keep theirs),
    // else a listener on each service address (at most 256; the wildcard sockets past).
    let (tcp_listeners, _steering) = tcp_listeners(&cfg, &addrs)?;
    let fleet_counters = fleet.counters();
    let bound = fleet.addrs().to_vec();
    // The XDP answer fast path, for zones marked xdp_answers (with [xdp]). With cookies on it
    // runs even where nothing is answered in XDP: its address entries carry the cookie
    // secrets, by which XDP lets a source a valid server cookie proves past the per-source
    // rate limit (forged floods in a resolver's name spent its bucket, cookie or not).
    let answers_asked = any_xdp_answers || cfg.xdp_hot.names > 0;
    let xdp_running = xdp.lock().unwrap_or_else(|e| e.into_inner()).is_some();
    let xdp_answers = if answers_asked || (xdp_running && defence.cookies.is_some()) {
        if xdp_running {
            // RRL in XDP for what XDP answers: RRL's rate per source prefix, and its slip.
            // Clients with a valid server cookie never meet it (XDP verifies cookies too).
            let rrl = &cfg.defence.rrl;
            let rate = xdp_guard::AnswerRate {
                per_second: if rrl.enabled {
                    rrl.responses_per_second.ceil().max(1.0) as u32
                } else {
                    0
                },
                v4_prefix: rrl.ipv4_prefix,
                v6_prefix: rrl.ipv6_prefix,
                slip: rrl.slip,
                reply_to_sender: cfg.xdp.as_ref().is_some_and(|x| !x.answer_route),
            };
            let a = crate::xdp::sync::AnswerSync::start(
                &bound,
                rate,
                xdp.clone(),
                crate::xdp::sync::AnswerInputs {
                    zones: zones.clone(),
                    pcfg: pcfg.clone(),
                    rules: rules.clone(),
                    defence: defence.clone(),
                },
                cfg.xdp_hot,
            );
            let hook = a.clone();
            registry.set_before_publish(Arc::new(move |g| hook.suspend_for(g)));
            if answers_asked && !rrl.enabled && cfg.xdp.as_ref().is_some_and(|x| x.rate == 0) {
                tracing::warn!(
                    "xdp_answers: [defence.rrl] is off and [xdp] rate = 0: nothing limits the answers XDP sends per source"
                );
            }
            Some(a)
        } else {
            tracing::warn!(
                "xdp_answers: zones ask for XDP answers, but the XDP guard is not running here"
            );
            None
        }
    } else {
        None
    };
    let workers = if cfg.server.workers == 0 {
        std::thread::available_parallelism().map_or(1, |n| n.get())
    } else {
        cfg.server.workers
    };
    let udp_stats: Vec<Arc<WorkerStats>> = (0..workers.min(addrs.len()).max(1))
        .map(|_| Arc::new(WorkerStats::default()))
        .collect();
    let stop = Arc::new(AtomicBool::new(false));
    // The query log: one writer thread, a tap per worker (and per TCP connection).
    let dnstap = cfg.dnstap.clone().map(|d| {
        tracing::info!(output = %d.socket.as_ref().or(d.file.as_ref()).map_or(String::new(), |p| p.display().to_string()), "dnstap on");
        crate::observe::dnstap::start(d, cfg.server.port)
    });
    if !proxy_allow.is_empty() {
        tracing::info!(proxies = ?proxy_allow.nets(), "PROXY protocol v2 headers believed from these proxies");
    }
    let (handles, waker) = {
        let tap = dnstap.as_ref().map(|(t, _)| t.clone_for_worker());
        let hot = xdp_answers.as_ref().and_then(|a| a.sampler());
        let zones = zones.clone();
        let pcfg = pcfg.clone();
        let udp_stats = udp_stats.clone();
        let defence = defence.clone();
        let xfr = xfr.clone();
        let local: Arc<[IpAddr]> = fleet.addrs().iter().map(|a| a.ip()).collect();
        let proxy = proxy_allow.clone();
        fleet
            .run(
                workers,
                move |w| UdpHandler {
                    proxy: proxy.clone(),
                    stats: udp_stats[w % udp_stats.len()].clone(),
                    p: Processor::new(
                        zones.clone(),
                        pcfg.clone(),
                        udp_stats[w % udp_stats.len()].clone(),
                        Some(&defence),
                    )
                    .with_transfers(Arc::new(crate::xfr::Serve(xfr.clone())))
                    .with_hot(hot.as_ref().map(|h| h.clone_for_worker()))
                    .with_tap(tap.as_ref().map(|t| t.clone_for_worker())),
                    local: local.clone(),
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
        let tap = dnstap.as_ref().map(|(t, _)| t.clone_for_worker());
        // All TCP connections share one compact-denial budget, the size of a worker's.
        let tcp_denier = Arc::new(std::sync::Mutex::new(crate::signing::online::Denier::new(
            pcfg.compact_denial.0,
            pcfg.compact_denial.1,
        )));
        TcpServer::new(
            TcpLimits {
                max_connections: tcp_max_connections,
                max_per_source: cfg.server.tcp_max_per_source,
                idle: Duration::from_millis(cfg.server.tcp_idle_timeout_ms),
                // 0: no limit.
                max_queries: match cfg.server.tcp_max_queries {
                    0 => usize::MAX,
                    n => n,
                },
                max_pipelined: cfg.server.tcp_max_pipelined,
                pressed_idle: Duration::from_millis(cfg.server.tcp_pressed_idle_timeout_ms),
                xfr_min_rate: cfg.transfer.out_min_rate_bytes_per_sec,
            },
            AddrSet::new(&addrs),
            proxy_allow.clone(),
            tcp_stats.clone(),
            Some(defence.clone()),
            Box::new(move || {
                Processor::new(zones.clone(), pcfg.clone(), ts.clone(), Some(&d))
                    .with_shared_denier(tcp_denier.clone())
                    .with_transfers(Arc::new(crate::xfr::Serve(x.clone())))
                    .with_tap(tap.as_ref().map(|t| t.clone_for_worker()))
            }),
        )
    };
    // DNS over TLS: the pair read and the listeners bound before anything is served, so a
    // bad pair or a taken port stops the start with its name.
    let tls = match (&cfg.server.tls_cert, &cfg.server.tls_key) {
        (Some(cert), Some(key))
            if !cfg.server.tls_listen.is_empty() || !cfg.server.quic_listen.is_empty() =>
        {
            let t = crate::daemon::tls::DotTls::load(cert, key)
                .map_err(|e| format!("server.tls_cert/tls_key: {e}"))?;
            if let Some(w) = t.validity_warning(cert) {
                tracing::warn!("{w}");
            }
            let mut ls = Vec::new();
            for a in cfg.server.tls_addrs() {
                let l = listener::tcp::listener(a, &listener::tcp::TcpOptions::default())
                    .map_err(|e| format!("server.tls_listen {a}: {e}"))?;
                ls.push(l);
            }
            let mut qs = Vec::new();
            for a in cfg.server.quic_addrs() {
                let s = std::net::UdpSocket::bind(a)
                    .map_err(|e| format!("server.quic_listen {a}: {e}"))?;
                qs.push(s);
            }
            if !ls.is_empty() {
                tracing::info!(listen = ?cfg.server.tls_addrs(), "DNS over TLS on");
            }
            if !qs.is_empty() {
                tracing::info!(listen = ?cfg.server.quic_addrs(), "DNS over QUIC on");
            }
            Some((t, ls, qs))
        }
        _ => None,
    };
    let mut clickhouse = None;
    let flusher = start_flusher(&cfg, &events, &mut clickhouse);
    let metrics = shield::metrics::Registry::new();
    metrics.register(
        "queries",
        Arc::new(crate::observe::sources::QueryStats {
            udp: udp_stats.clone(),
            tcp: tcp_stats.clone(),
        }),
    );
    metrics.register(
        "fleet",
        Arc::new(crate::observe::sources::Fleet {
            counters: fleet_counters,
            addrs: bound.clone(),
        }),
    );
    metrics.register("tcp", tcp.clone());
    if let Some((c, _, _)) = &alias {
        metrics.register("alias", c.clone());
    }
    metrics.register("alias_bounds", Arc::new(crate::query::alias::BoundsSource));
    if let Some((t, _, _)) = &tls {
        metrics.register("tls", t.clone());
    }
    metrics.register("log", Arc::new(shield::logging::LogMetrics));
    if let Some((_, st)) = &dnstap {
        metrics.register("dnstap", st.clone());
    }
    metrics.register("defence", defence.clone());
    metrics.register("blockmap", blocks.clone());
    metrics.register("events", events.clone());
    if let Some(f) = &flusher {
        metrics.register("sinks", Arc::new(f.sinks_source()));
    }
    if let Some(m) = &clickhouse {
        metrics.register(
            "clickhouse",
            Arc::new(shield::events::ClickHouseSource {
                monitor: m.clone(),
                ctl: "events.clickhouse",
                table: "events",
            }),
        );
    }
    metrics.register("xdp", Arc::new(crate::xdp::XdpSource(xdp.clone())));
    if let Some(a) = &xdp_answers {
        metrics.register("xdp_answers", a.stats.clone());
    }
    metrics.register("transfers", xfr.clone());
    metrics.register(
        "catalogs",
        Arc::new(|out: &mut shield::metrics::Samples| crate::zone::catalog::collect(out)),
    );
    metrics.register(
        "signing_keys",
        Arc::new(|out: &mut shield::metrics::Samples| {
            out.counter(
                "signing.keys_missing",
                "dnsd_signing_keys_missing_total",
                "",
                "Signings refused because key files a zone held are gone (the last signed version keeps serving).",
                crate::signing::KEYS_MISSING.load(Ordering::Relaxed),
            );
            for (i, what) in ["held", "lacking", "failed"].into_iter().enumerate() {
                out.counter(
                    format!("signing.ds_checks.{what}"),
                    "dnsd_signing_ds_checks_total",
                    format!("result=\"{what}\""),
                    "KSK submission checks of a new key's DS at the parent's servers: held by every one, lacking at one, a server not asked (timeout, error).",
                    crate::signing::submission::CHECKS[i].load(Ordering::Relaxed),
                );
            }
            out.gauge(
                "signing.awaiting_ds",
                "dnsd_signing_awaiting_ds",
                "",
                "Zones whose KSK rollover awaits the parent's DS for the new key (the old key signs on meanwhile).",
                crate::signing::submission::awaiting_count(),
            );
        }),
    );
    metrics.register(
        "zones",
        Arc::new(crate::zone::registry::Zones {
            reloads: registry.stats.clone(),
            published: zones.clone(),
        }),
    );
    let shared = Arc::new(State {
        zones: Arc::new(tokio::sync::Mutex::new(registry)),
        config_path,
        flags,
        config: Mutex::new(Arc::new(cfg.clone())),
        started_server: cfg.server.clone(),
        started_lookups: (cfg.alias.clone(), cfg.geoip.clone()),
        started_sections: cfg.start_only_sections(),
        addrs: bound,
        tcp: tcp.clone(),
        tls: tls.as_ref().map(|(t, _, _)| t.clone()),
        started: Instant::now(),
        bind_time,
        defence: defence.clone(),
        flusher: Mutex::new(flusher),
        clickhouse,
        xdp,
        redis: std::sync::OnceLock::new(),
        xfr: xfr.clone(),
        metrics: metrics.clone(),
        xdp_global: cfg.rules.as_ref().is_some_and(|r| r.xdp_global),
        xdp_answers,
        consumed: Mutex::new(Default::default()),
        catalog_queue,
        control: std::sync::OnceLock::new(),
    });
    shared.sync_global_lists();
    shared.set_rate_exempt_peers(&cfg, rate_exempt_peers);

    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .thread_name("dnsd-rt")
        .enable_all()
        .build()
        .map_err(|e| format!("cannot start the runtime: {e}"))?;
    let result = rt.block_on(async {
        // Before anything answers: a SIGTERM as soon as TCP answers (a manager stopping a
        // start it sees serving) is caught and acted on, never lost between the handler's
        // installation and its stream (it left dnsd running, the manager waiting).
        let signals = Signals::new();
        for l in tcp_listeners {
            tokio::spawn(tcp.clone().serve(l));
        }
        if let Some((c, rx, addr)) = alias {
            tracing::info!(resolver = %addr, "ALIAS targets outside our zones asked of this resolver");
            tokio::spawn(crate::daemon::alias::run(c, rx, addr, cfg.alias.cache_size));
        }
        if let Some((t, ls, qs)) = tls {
            for l in ls {
                tokio::spawn(tcp.clone().serve_tls(l, t.clone()));
            }
            let transport = crate::daemon::doq::transport(
                Duration::from_millis(cfg.server.tcp_idle_timeout_ms),
                cfg.server.tcp_max_pipelined,
            );
            for s in qs {
                let e = crate::daemon::doq::endpoint(s, &t, transport.clone())
                    .map_err(|e| format!("server.quic_listen: {e}"))?;
                tokio::spawn(crate::daemon::doq::serve(tcp.clone(), e, t.clone()));
            }
        }
        if let Some(path) = cfg.control.socket.clone() {
            // A stale socket is replaced; one another live server answers on is refused (and
            // left alone). Mode and group whatever the umask; peers checked per connection.
            let l = shield::control::bind(&path, &cfg.control.access())
                .map_err(|e| format!("control.socket {}: {e}", path.display()))?;
            metrics.register("control", l.stats());
            let _ = shared.control.set((l.access_handle(), path.clone()));
            tokio::spawn(crate::daemon::control::serve(l, shared.clone()));
        }
        if let Some(m) = cfg.metrics.listen.clone() {
            let sa: SocketAddr = m.parse().map_err(|e| format!("metrics.listen {m}: {e}"))?;
            let l = tokio::net::TcpListener::bind(sa)
                .await
                .map_err(|e| format!("metrics.listen {m}: {e}"))?;
            if let Some(w) = shield::metrics::exposure_warning(sa, &cfg.metrics.allow) {
                tracing::warn!("{w}");
            }
            tokio::spawn(shield::metrics::serve(
                l,
                metrics.clone(),
                cfg.metrics.allow.clone(),
            ));
        }
        tokio::spawn(housekeeping(shared.clone()));
        let ask: crate::signing::submission::AskParent =
            Arc::new(|server, apex, tag, dnskey| {
                Box::pin(async move {
                    crate::xfr::ds_check::parent_holds(server, &apex, tag, &dnskey).await
                })
            });
        tokio::spawn(crate::signing::schedule::run(shared.zones.clone(), ask));
        tokio::spawn(crate::xfr::run_changes(xfr.clone(), xfr_changes));
        // Catalogs: those dnsd consumes read (their members come from the copies on disk,
        // then from their primaries), then those it produces written, members included — in
        // a task of its own: a start with many members to load and sign is not held by it.
        {
            let shared = shared.clone();
            tokio::spawn(async move {
                crate::daemon::catalogs::consume_all(&shared).await;
                crate::daemon::catalogs::run_catalogs(shared).await;
            });
        }
        crate::xfr::secondary::spawn_all(&shared.zones, &xfr);
        // Secondaries may have missed changes while we were down: tell them now.
        for e in shared.zones.lock().await.entries() {
            if let Some(z) = &e.current {
                crate::xfr::notify::spawn_notify(&xfr, &e.def.origin, z, None);
            }
        }
        // This node's own blocks from before a restart, before the sync publishes them.
        let keeper = cfg
            .block
            .state_file
            .as_deref()
            .and_then(|p| shield::block_state::start(&blocks, p));
        let sync = match cfg.redis.clone() {
            Some(r) => {
                let mut r = r.with_node_id_for("dnsd");
                // The state file keeps this node's own decisions (never taken from Redis).
                r.restore_own = cfg.block.state_file.is_none();
                let node = r.node_id.clone();
                match shield::redis_sync::RedisSync::spawn(r, blocks.clone()) {
                    Ok(h) => {
                        let m = h.monitor();
                        metrics.register("redis", Arc::new(m.clone()));
                        let _ = shared.redis.set(m);
                        tracing::info!(node = %node, "block map synced through Redis");
                        Some(h)
                    }
                    Err(e) => {
                        tracing::error!("running without the Redis block sync: {e}");
                        None
                    }
                }
            }
            None => None,
        };
        tracing::info!("dnsd ready");
        // Off the start's path: trimming the heap of 100,000 zones takes a while.
        std::thread::spawn(crate::daemon::memory::release_freed_memory);
        shield::systemd::ready(&format!(
            "serving {} zones on {} addresses",
            shared.zones.lock().await.len(),
            shared.addrs.len()
        ));
        wait_for_signals(shared.clone(), signals).await;
        shield::systemd::stopping();
        let answers = shared.xdp_answers.clone();
        shield::systemd::leave_within_budget(Duration::ZERO, move || {
            if let Some(a) = answers {
                a.withdraw();
            }
        });
        // First of all, the kernel stops answering for us: whatever the stop waits for
        // below, no answer of this process outlives it in the XDP maps.
        if let Some(a) = &shared.xdp_answers {
            a.withdraw();
        }
        // The sinks drain while the Redis sync writes its last decisions, side by side.
        let draining = shared
            .flusher
            .lock()
            .expect("flusher lock")
            .take()
            .map(|f| std::thread::spawn(move || f.stop()));
        if let Some(h) = sync {
            // Last decisions out before leaving (bounded by the sync's I/O timeout).
            let st = h.shutdown().await;
            tracing::info!(
                published = st.published,
                buffered = st.buffered,
                "Redis sync stopped"
            );
        }
        if let Some(d) = draining {
            let _ = d.join();
        }
        if let Some(k) = keeper {
            k.stop();
        }
        Ok::<(), String>(())
    });
    stop.store(true, Ordering::SeqCst);
    waker.wake();
    for h in handles {
        let _ = h.join();
    }
    // The control socket goes with its task (only if it is still this server's).
    rt.shutdown_timeout(Duration::from_millis(500));
    if let Some(f) = shared.flusher.lock().expect("flusher lock").take() {
        f.stop();
    }
    if let Some(a) = &shared.xdp_answers {
        a.withdraw();
    }
    drop(shared.xdp.lock().unwrap_or_else(|e| e.into_inner()).take());
    result
}

/// Starts the event flusher when `[events]` names a sink.
fn start_flusher(
    cfg: &Config,
    events: &Arc<shield::events::Aggregator>,
    clickhouse: &mut Option<shield::events::ClickHouseMonitor>,
) -> Option<shield::events::Flusher> {
    let queue = cfg.events.queue_batches;
    // An output that cannot be opened is reported, and the others still run.
    let mut writers = Vec::new();
    for o in cfg.events.output.active() {
        match o.sink::<shield::events::Event>().and_then(|s| {
            s.map(|s| shield::events::SinkWriter::spawn(s, queue))
                .transpose()
        }) {
            Ok(w) => writers.extend(w),
            Err(e) => tracing::error!("events.output {o:?}: {e}; running without it"),
        }
    }
    if let Some((w, m)) = crate::observe::event_sinks::clickhouse(&cfg.events, queue) {
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
async fn housekeeping(shared: Arc<State>) {
    let d = &shared.defence;
    let rotate = Duration::from_secs(d.cfg.cookies.rotate_hours * 3600);
    let rotating = d.cookies.is_some() && !rotate.is_zero();
    let mut last_rotation = Instant::now();
    let watchdog = shield::systemd::watchdog_period();
    let mut tick = tokio::time::interval(Duration::from_millis(500));
    loop {
        tick.tick().await;
        // The keep-alive comes from the runtime's own periodic work: a wedged runtime stops it.
        if let Some(p) = watchdog {
            shield::systemd::watchdog_tick(p);
        }
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

/// The signals dnsd acts on, caught from the start of its runtime.
struct Signals {
    hup: tokio::signal::unix::Signal,
    term: tokio::signal::unix::Signal,
    int: tokio::signal::unix::Signal,
}

impl Signals {
    fn new() -> Signals {
        use tokio::signal::unix::{SignalKind, signal};
        Signals {
            hup: signal(SignalKind::hangup()).expect("SIGHUP handler"),
            term: signal(SignalKind::terminate()).expect("SIGTERM handler"),
            int: signal(SignalKind::interrupt()).expect("SIGINT handler"),
        }
    }
}

async fn wait_for_signals(shared: Arc<State>, signals: Signals) {
    let Signals {
        mut hup,
        mut term,
        mut int,
    } = signals;
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

/// The TCP listening sockets, and the sk_lookup registration that steers the service
/// addresses to them (kept until the server stops; dropping it withdraws the addresses).
fn tcp_listeners(
    cfg: &Config,
    addrs: &[IpAddr],
) -> Result<
    (
        Vec<std::net::TcpListener>,
        Option<xdp_guard::sk_lookup::Steering>,
    ),
    String,
> {
    let opts = listener::tcp::TcpOptions::default();
    let port = cfg.server.port;
    let steering = match cfg.xdp.as_ref() {
        Some(x) => match xdp_guard::sk_lookup::Steering::open(&x.pin_path) {
            Ok(s) => s,
            Err(e) => {
                tracing::warn!("TCP steering (sk_lookup) unusable: {e}");
                None
            }
        },
        None => None,
    };
    if let Some(mut s) = steering {
        // One listener per family, bound to a service address on an ephemeral port: the
        // program hands it the connections to every service address on `port`.
        let mut ls = Vec::new();
        for v6 in [false, true] {
            if let Some(&ip) = addrs.iter().find(|a| a.is_ipv6() == v6) {
                ls.push(
                    listener::tcp::listener(SocketAddr::new(ip, 0), &opts)
                        .map_err(|e| e.to_string())?,
                );
            }
        }
        let refs: Vec<&std::net::TcpListener> = ls.iter().collect();
        match s.register(&refs, addrs, port) {
            Ok(()) => {
                tracing::info!(
                    addresses = addrs.len(),
                    port,
                    "TCP: sk_lookup steers the service addresses to dnsd's listeners"
                );
                return Ok((ls, Some(s)));
            }
            Err(e) => {
                tracing::warn!(
                    "TCP steering (sk_lookup) refused: {e}; dnsd's own listeners instead"
                )
            }
        }
    }
    // A wildcard among the addresses takes its family whole: the wildcard sockets.
    if addrs.len() <= listener::tcp::PER_ADDRESS_MAX && !addrs.iter().any(|a| a.is_unspecified()) {
        // A few addresses: a listener on each, as Knot and NSD — nothing else on the port
        // is taken from other servers, and no other local address accepts DNS over TCP.
        let ls = listener::tcp::address_listeners(addrs, port, &opts).map_err(|e| e.to_string())?;
        tracing::info!(
            addresses = addrs.len(),
            port,
            "TCP: a listener on each service address (no sk_lookup steering installed)"
        );
        return Ok((ls, None));
    }
    let ls = listener::tcp::wildcard_listeners(addrs, port, &opts).map_err(|e| e.to_string())?;
    tracing::info!(
        addresses = addrs.len(),
        port,
        "TCP: the wildcard socket (no sk_lookup steering installed; more than {} addresses)",
        listener::tcp::PER_ADDRESS_MAX
    );
    Ok((ls, None))
}
