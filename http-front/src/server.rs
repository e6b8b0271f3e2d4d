//! Starting and stopping: listeners bound before anything else, the accept loops, the background tasks, SIGHUP reload and a graceful SIGTERM/SIGINT.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use tokio::signal::unix::{SignalKind, signal};
use tokio::task::JoinSet;

use crate::config::Loaded;
use crate::conn_registry::CloseCause;
use crate::front::{Front, StartError};
use crate::{blockwatch, client_conn, synfilter};

/// Listen backlog of client listeners.
const BACKLOG: i32 = 4096;

/// Binds a TCP listener with `SO_REUSEADDR` and a deep backlog.
pub fn bind(addr: SocketAddr) -> Result<std::net::TcpListener, StartError> {
    let err = |source| StartError::Listen { addr, source };
    let sock = socket2::Socket::new(
        socket2::Domain::for_address(addr),
        socket2::Type::STREAM,
        None,
    )
    .map_err(err)?;
    sock.set_reuse_address(true).map_err(err)?;
    sock.set_nonblocking(true).map_err(err)?;
    sock.bind(&addr.into()).map_err(err)?;
    sock.listen(BACKLOG).map_err(err)?;
    Ok(sock.into())
}

/// Runs the front until SIGTERM or SIGINT; returns it so that the caller can flush its outputs
/// once the runtime is gone.
pub async fn run(loaded: Loaded) -> Result<Arc<Front>, StartError> {
    let cfg = &loaded.config;
    let mut plain = Vec::new();
    for a in &cfg.server.listen {
        plain.push((*a, bind(*a)?));
    }
    let mut tls = Vec::new();
    for a in cfg.tls.iter().flat_map(|t| t.listen.iter()) {
        tls.push((*a, bind(*a)?));
    }
    let metrics_listener = cfg.metrics.map(bind).transpose()?;
    let metrics_allow = cfg.metrics_allow.clone();
    let syn_filter_max = cfg.server.syn_filter_max;
    // Handles on the listeners for the SYN filter (a filter is per socket, not per fd).
    let mut filtered = Vec::new();
    if syn_filter_max > 0 {
        for (addr, l) in plain.iter().chain(tls.iter()) {
            let dup = l.try_clone().map_err(|source| StartError::Listen {
                addr: *addr,
                source,
            })?;
            filtered.push(std::os::fd::OwnedFd::from(dup));
        }
    }
    let front = Front::new(loaded)?;
    // This node's own blocks from before a restart, before the sync publishes them.
    let keeper = front
        .snapshot()
        .cfg
        .block
        .state_file
        .clone()
        .and_then(|p| shield::block_state::start(&front.blocks, &p));
    // The block map synced with the other nodes' daemons (dnsd's and http-front's alike). An
    // optional part: a sync that cannot start is reported and the proxy serves on.
    let sync = match front.snapshot().cfg.redis.clone() {
        Some(mut r) => {
            // The state file keeps this node's own decisions (never taken from Redis).
            r.restore_own = front.snapshot().cfg.block.state_file.is_none();
            let node = r.node_id.clone();
            match shield::redis_sync::RedisSync::spawn(r, Arc::clone(&front.blocks)) {
                Ok(h) => {
                    front.metrics.register("redis", Arc::new(h.monitor()));
                    let _ = front.redis.set(h.monitor());
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

    // Caught before anything is accepted: a SIGTERM once it serves is acted on, never lost
    // between the handler's installation and its stream.
    let sig = |k| {
        signal(k).map_err(|source| StartError::Output {
            what: "signal",
            source,
        })
    };
    let (mut hup, mut term, mut int) = (
        sig(SignalKind::hangup())?,
        sig(SignalKind::terminate())?,
        sig(SignalKind::interrupt())?,
    );
    let mut accept = JoinSet::new();
    for (is_tls, list) in [(false, plain), (true, tls)] {
        for (addr, l) in list {
            tracing::info!(%addr, tls = is_tls, "listening");
            accept.spawn(client_conn::accept_loop(Arc::clone(&front), l, is_tls));
        }
    }
    let mut background = JoinSet::new();
    if let Some(l) = metrics_listener {
        let addr = l.local_addr().map_err(|source| StartError::Listen {
            addr: SocketAddr::from(([0, 0, 0, 0], 0)),
            source,
        })?;
        let l = tokio::net::TcpListener::from_std(l)
            .map_err(|source| StartError::Listen { addr, source })?;
        tracing::info!(%addr, "metrics at /metrics");
        if let Some(w) = shield::metrics::exposure_warning(addr, &metrics_allow) {
            tracing::warn!("{w}");
        }
        background.spawn(shield::metrics::serve(
            l,
            Arc::clone(&front.metrics),
            metrics_allow,
        ));
    }
    if let Some(path) = front.snapshot().cfg.control_socket.clone() {
        let access = front.snapshot().cfg.control_access.clone();
        let l = shield::control::bind(&path, &access).map_err(|source| StartError::Output {
            what: "control.socket",
            source,
        })?;
        tracing::info!(socket = %path.display(), "control socket");
        front.metrics.register("control", l.stats());
        let _ = front.control.set(l.access_handle());
        let f = Arc::clone(&front);
        let started = std::time::Instant::now();
        background.spawn(shield::control::serve(l, move |args, peer| {
            let f = Arc::clone(&f);
            async move { control(&f, &args, &peer, started).await }
        }));
    }
    background.spawn(blockwatch::close_blocked(Arc::clone(&front)));
    if !filtered.is_empty() {
        let stats = Arc::clone(&front.syn_filter);
        background.spawn(synfilter::run(
            Arc::clone(&front.blocks),
            filtered,
            syn_filter_max,
            stats,
        ));
    }
    background.spawn(blockwatch::expire(Arc::clone(&front)));
    background.spawn(crate::forward::upstream::sweep_loop());
    if let (Some(state), Some(cfg)) = (front.acme.clone(), front.snapshot().cfg.acme.clone()) {
        background.spawn(crate::acme::run(Arc::clone(&front), cfg, state));
    }

    let snap = front.snapshot();
    tracing::info!(
        sites = snap.sites.len(),
        with_rules = snap.sites.with_rules(),
        "http-front ready"
    );
    shield::systemd::ready(&format!("serving {} sites", snap.sites.len()));
    drop(snap);
    // The service manager's watchdog, kept alive by this loop's own ticks.
    let watchdog = shield::systemd::watchdog_period();
    let mut tick = tokio::time::interval(Duration::from_millis(500));
    loop {
        tokio::select! {
            _ = hup.recv() => {
                let f = Arc::clone(&front);
                // Compiling rules may take a while: off the async workers.
                let _ = tokio::task::spawn_blocking(move || f.reload()).await;
            }
            _ = tick.tick() => {
                if let Some(p) = watchdog {
                    shield::systemd::watchdog_tick(p);
                }
            }
            _ = term.recv() => break,
            _ = int.recv() => break,
        }
    }
    shield::systemd::stopping();
    shield::systemd::leave_within_budget(
        Duration::from_millis(front.snapshot().cfg.server.graceful_close_ms),
        || {},
    );
    tracing::info!("shutting down: no new connections, GOAWAY to open ones");
    accept.abort_all();
    let n = front.registry.close_all(CloseCause::Shutdown);
    let grace = Duration::from_millis(front.snapshot().cfg.server.graceful_close_ms)
        + Duration::from_millis(500);
    let deadline = tokio::time::Instant::now() + grace;
    while front.registry.open() > 0 && tokio::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    tracing::info!(
        asked = n,
        left = front.registry.open(),
        "connections closed"
    );
    // The control socket goes with its task (only if it is still this front's).
    background.abort_all();
    if let Some(h) = sync {
        // Last decisions out before leaving (bounded by the sync's I/O timeout).
        let st = h.shutdown().await;
        tracing::info!(
            published = st.published,
            buffered = st.buffered,
            "Redis sync stopped"
        );
    }
    if let Some(k) = keeper {
        k.stop();
    }
    Ok(front)
}

/// The commands of `http-front ctl`: block (add, del, list, import), stats, status, reload, certs.
async fn control(
    front: &Arc<Front>,
    args: &[String],
    peer: &shield::control::Peer,
    started: std::time::Instant,
) -> shield::control::Reply {
    use shield::control::Reply;
    let a: Vec<&str> = args.iter().map(String::as_str).collect();
    match a.as_slice() {
        ["block", rest @ ..] => {
            let full = || front.xdp_refused_full();
            let before = full();
            let mut r = shield::control::block::command_with_holds(
                &front.blocks,
                Some(&front.rules),
                rest,
                peer,
            );
            let holds = |net| front.xdp_holds_block(net);
            shield::control::block::warn_unless_in_xdp(
                rest,
                &mut r,
                "http-front",
                holds,
                before,
                full,
            )
            .await;
            r
        }
        ["stats"] => Reply::ok(front.metrics.render_ctl()),
        ["status"] => {
            let snap = front.snapshot();
            Reply::ok(format!(
                "running for {} s, {} sites ({} with rules), {} client connections, {} blocked sources\n{}{}",
                started.elapsed().as_secs(),
                snap.sites.len(),
                snap.sites.with_rules(),
                front.registry.open(),
                front.blocks.len(),
                front
                    .redis
                    .get()
                    .map(|m| m.status_line())
                    .unwrap_or_default()
                    + &front
                        .clickhouse
                        .iter()
                        .map(|(what, m)| m.status_line(what))
                        .collect::<String>(),
                front.blocks.render_policy()
            ))
        }
        ["reload"] => {
            let f = Arc::clone(front);
            match tokio::task::spawn_blocking(move || f.reload()).await {
                // A pair that does not load fails the reload's status (as dnsd's refused
                // DoT pair does), whatever else it applied: `systemctl reload` says so.
                Ok(Ok(warnings))
                    if warnings
                        .iter()
                        .any(|w| w.starts_with(crate::tls::certs::REFUSED_PAIR)) =>
                {
                    Reply::err(
                        std::iter::once(
                            "reloaded, but a certificate pair was refused (a pair read before keeps serving its name):\n"
                                .to_string(),
                        )
                        .chain(warnings.iter().map(|w| format!("warning: {w}\n")))
                        .collect::<String>(),
                    )
                }
                Ok(Ok(warnings)) => Reply::ok(
                    std::iter::once("reloaded\n".to_string())
                        .chain(warnings.iter().map(|w| format!("warning: {w}\n")))
                        .collect::<String>(),
                ),
                Ok(Err(e)) => {
                    Reply::err(format!("reload refused, the running config stays: {e}\n"))
                }
                Err(e) => Reply::err(format!("reload: {e}\n")),
            }
        }
        ["certs"] => match &front.snapshot().certs {
            Some(r) => Reply::ok(r.describe()),
            None => Reply::err("no [tls] section: no certificates\n".to_string()),
        },
        ["certs", "renew"] => match &front.acme {
            Some(a) => {
                crate::acme::renew_all(a);
                Reply::ok("ACME: every site's certificate ordered now (see ctl certs)\n")
            }
            None => Reply::err("no [acme] section\n".to_string()),
        },
        ["help"] => Reply::ok(CTL_HELP),
        _ => Reply::err(format!(
            "unknown command {}\n{CTL_HELP}",
            shield::control::shown(args)
        )),
    }
}

/// Every control command with its arguments, as `http-front ctl help`, `http-front ctl
/// --help` and an unknown command's error list them.
pub const CTL_HELP: &str = concat!(
    "Commands (http-front [-c CONFIG] ctl [-s SOCKET] [--timeout SECONDS] COMMAND [ARGUMENTS]):
  status                              uptime, sites, client connections, blocked sources, the
                                      block policy and its never-block set with sources
  reload                              re-read the config and the rules (refused: the running ones stay)
  stats                               every counter (the /metrics samples, one per line)
  certs                               TLS certificates by server name: expiry, issuer, file;
                                      ACME sites: expiry, next renewal, last error
  certs renew                         order every ACME site's certificate now
",
    shield::block_help!(),
    "  help                                this list
"
);
