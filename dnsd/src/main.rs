//! dnsd: the Palisade authoritative DNS daemon and its tools.

use dnsd::{check_zone, config, server};
use shield::control as ctl;

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::{Parser, Subcommand};

/// Palisade authoritative DNS server.
#[derive(Parser)]
#[command(name = "dnsd", version, about)]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Run the server from a config file, or from flags.
    Serve {
        /// The config file (TOML).
        #[arg(long, short = 'c')]
        config: Option<PathBuf>,
        /// Address to listen on: IP:PORT, or IP / PREFIX with --port (repeatable).
        #[arg(long)]
        listen: Vec<String>,
        /// Port for addresses given without one.
        #[arg(long)]
        port: Option<u16>,
        /// A zone as ORIGIN=FILE (repeatable).
        #[arg(long)]
        zone: Vec<String>,
        /// Control socket path.
        #[arg(long)]
        control: Option<PathBuf>,
        /// Metrics address (IP:PORT).
        #[arg(long)]
        metrics: Option<String>,
        /// UDP worker threads (0: one per core).
        #[arg(long)]
        workers: Option<usize>,
        /// Log lines as "text" or "json" (over the config's `[log] format`).
        #[arg(long, value_name = "FORMAT")]
        log_format: Option<shield::logging::LogFormat>,
    },
    /// Parse and validate a zone file; exit 0 when it would load, 1 when not.
    CheckZone {
        /// The zone's origin (default: the file name, or the SOA owner).
        #[arg(long, short = 'o')]
        origin: Option<String>,
        /// Print only problems.
        #[arg(long, short = 'q')]
        quiet: bool,
        /// The master file.
        file: PathBuf,
    },
    /// Check a config file, the zone files and the rules file it names, as `serve` would load
    /// them; exit 0 when all would load, 1 with every problem (file:line) when not.
    CheckConfig {
        /// The config file (TOML).
        #[arg(long, short = 'c')]
        config: PathBuf,
        /// The config and the rules file only, not the zone files (the unit's ExecStartPre:
        /// `serve` loads the zones itself, and one bad zone of many must not stop the start).
        #[arg(long)]
        no_zones: bool,
    },
    /// Control a running server (reload [ZONE], stats, zones, status, ...).
    #[command(after_help = dnsd::control::HELP)]
    Ctl {
        /// Find the control socket in this config file.
        #[arg(long, short = 'c')]
        config: Option<PathBuf>,
        /// The control socket.
        #[arg(long, short = 's')]
        socket: Option<PathBuf>,
        /// Seconds to wait for the reply.
        #[arg(long, default_value_t = 60)]
        timeout: u64,
        /// The command and its arguments.
        #[arg(trailing_var_arg = true, allow_hyphen_values = true, required = true)]
        args: Vec<String>,
    },
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match cli.cmd {
        Cmd::CheckZone {
            origin,
            quiet,
            file,
        } => ExitCode::from(check_zone::run(&file, origin.as_deref(), quiet) as u8),
        Cmd::CheckConfig { config, no_zones } => ExitCode::from(check_config(&config, !no_zones)),
        Cmd::Serve {
            config,
            listen,
            port,
            zone,
            control,
            metrics,
            workers,
            log_format,
        } => {
            let cfg = match build_config(
                config.as_deref(),
                listen,
                port,
                zone,
                control,
                metrics,
                workers,
            ) {
                Ok(c) => c,
                Err(e) => {
                    eprintln!("dnsd: {e}");
                    return ExitCode::from(2);
                }
            };
            if let Err(e) = shield::logging::init(&cfg.log, log_format) {
                eprintln!("dnsd: {e}");
                return ExitCode::from(2);
            }
            match server::run(cfg, config) {
                Ok(()) => ExitCode::SUCCESS,
                Err(e) => {
                    eprintln!("dnsd: {e}");
                    ExitCode::from(1)
                }
            }
        }
        Cmd::Ctl {
            config,
            socket,
            timeout,
            args,
        } => {
            if args.first().map(String::as_str) == Some("help") {
                print!("{}", dnsd::control::HELP);
                return ExitCode::SUCCESS;
            }
            // `events-init` needs only the config: it works without a running server.
            if args.first().map(String::as_str) == Some("events-init")
                && let Some(c) = &config
            {
                return events_init_from_config(c);
            }
            let socket = match (socket, config) {
                (Some(s), _) => s,
                (None, Some(c)) => match config::Config::control_socket(&c) {
                    Ok(socket) => match socket {
                        Some(s) => s,
                        None => {
                            eprintln!("dnsd ctl: {} has no [control] socket", c.display());
                            return ExitCode::from(2);
                        }
                    },
                    Err(e) => {
                        eprintln!("dnsd ctl: {e}");
                        return ExitCode::from(2);
                    }
                },
                (None, None) => PathBuf::from("/run/palisade/dnsd.sock"),
            };
            // `zone add ORIGIN FILE`: the server resolves no path against its own directory.
            let mut args = args;
            if args.len() >= 4
                && args[0] == "zone"
                && args[1] == "add"
                && let Ok(p) = std::path::absolute(&args[3])
            {
                args[3] = p.display().to_string();
            }
            match ctl::call(&socket, &args, Duration::from_secs(timeout)) {
                Ok(r) => {
                    print!("{}", r.text);
                    if r.ok {
                        ExitCode::SUCCESS
                    } else {
                        ExitCode::from(1)
                    }
                }
                Err(e) => {
                    eprintln!("dnsd ctl: {e}");
                    ExitCode::from(2)
                }
            }
        }
    }
}

/// `dnsd ctl -c CONFIG events-init`: applies the ClickHouse schema of the config's
/// `[events.clickhouse]`, whether or not a server runs.
fn events_init_from_config(path: &std::path::Path) -> ExitCode {
    let cfg = match config::Config::load(path) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("dnsd ctl: {e}");
            return ExitCode::from(2);
        }
    };
    let Some(ch) = &cfg.events.clickhouse else {
        eprintln!(
            "dnsd ctl: {} has no [events.clickhouse] section",
            path.display()
        );
        return ExitCode::from(1);
    };
    match shield::events::clickhouse::init_schema(ch) {
        Ok(text) => {
            print!("{text}");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("dnsd ctl: events-init: {e}");
            ExitCode::from(1)
        }
    }
}

/// The config from a file, with flags added on top (or from flags alone).
fn build_config(
    path: Option<&std::path::Path>,
    listen: Vec<String>,
    port: Option<u16>,
    zones: Vec<String>,
    control: Option<PathBuf>,
    metrics: Option<String>,
    workers: Option<usize>,
) -> Result<config::Config, String> {
    let mut cfg = match path {
        Some(p) => config::Config::load(p).map_err(|e| e.to_string())?,
        None => config::Config::default(),
    };
    if !listen.is_empty() {
        let mut addrs = Vec::new();
        let mut ports = Vec::new();
        for l in &listen {
            if let Ok(sa) = l.parse::<std::net::SocketAddr>() {
                addrs.push(sa.ip().to_string());
                ports.push(sa.port());
            } else {
                addrs.push(l.clone());
            }
        }
        ports.dedup();
        if ports.len() > 1 {
            return Err("--listen: all addresses must use one port".into());
        }
        cfg.server.listen = addrs;
        if let Some(p) = ports.first() {
            cfg.server.port = *p;
        }
    }
    if let Some(p) = port {
        cfg.server.port = p;
    }
    for z in zones {
        let (origin, file) = z
            .split_once('=')
            .ok_or_else(|| format!("--zone {z}: expected ORIGIN=FILE"))?;
        cfg.zones.push(config::ZoneConfig {
            origin: origin.into(),
            file: file.into(),
            key: format!("--zone {z}"),
            ..Default::default()
        });
    }
    if control.is_some() {
        cfg.control.socket = control;
    }
    if metrics.is_some() {
        cfg.metrics.listen = metrics;
    }
    if let Some(w) = workers {
        cfg.server.workers = w;
    }
    Ok(cfg)
}

/// `dnsd check-config -c FILE`: the config, each zone file (as check-zone, quietly: only
/// problems) and the rules file; 0 when everything would load.
fn check_config(path: &std::path::Path, with_zones: bool) -> u8 {
    let cfg = match config::Config::load(path) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("dnsd: {e}");
            return 1;
        }
    };
    // The zones as `serve` loads them (zone_registry::load_all, on all cores); a secondary's
    // file may not exist yet: it comes from the primary.
    // (Config::load refused any origin that does not parse.)
    let plan: Vec<_> = cfg
        .zones
        .iter()
        .enumerate()
        .filter(|_| with_zones)
        // A catalog dnsd produces has no file.
        .filter(|(_, z)| z.catalog != Some(config::zone_list::CatalogRole::Producer))
        .filter(|(_, z)| z.primaries.is_empty() || z.file.exists())
        .filter_map(|(i, z)| {
            let origin = zones::Name::parse(&z.origin, Some(&zones::Name::root())).ok()?;
            Some((i, origin, z.file.clone()))
        })
        .collect();
    let mut bad = 0;
    for (i, r) in dnsd::zone_registry::load_all(plan) {
        let z = &cfg.zones[i];
        match r {
            Ok(l) => {
                for w in &l.warnings {
                    println!("{}: warning: {}", w.at, w.msg);
                }
            }
            Err(e) => {
                println!("{e}");
                println!("{}: zone {} does not load", z.file.display(), z.origin);
                bad += 1;
            }
        }
    }
    let mut tenants = 0;
    if let Some(r) = &cfg.rules {
        match shield::rules::Prepared::load(&r.file) {
            Ok(p) => tenants = p.tenant_count(),
            Err(e) => {
                eprintln!("dnsd: rules: {e}");
                bad += 1;
            }
        }
    }
    if bad > 0 {
        return 1;
    }
    println!(
        "{}: ok ({} zones{}, {} tenants with rules)",
        path.display(),
        cfg.zones.len(),
        if with_zones {
            ""
        } else {
            " listed, not loaded"
        },
        tenants
    );
    0
}
