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
    /// Sign a zone of the config under its `dnssec_policy` as `serve` would (keys made or
    /// rolled in its key directory, the last signed copy's signatures kept), and write the
    /// signed zone as master-file text (as Knot's kzonesign or dnssec-signzone).
    SignZone {
        /// The config file (TOML).
        #[arg(long, short = 'c')]
        config: PathBuf,
        /// Where to write the signed zone (else standard output).
        #[arg(long, short = 'o')]
        out: Option<PathBuf>,
        /// Keys (and signing state) from and into this directory instead of the policy's
        /// live one.
        #[arg(long, conflicts_with = "update_keys")]
        key_dir: Option<PathBuf>,
        /// Let this run change the live key directory (make or roll keys, advance the
        /// serial). Without it (or --key-dir) the live directory is left as it was.
        #[arg(long)]
        update_keys: bool,
        /// The zone's origin.
        zone: String,
    },
    /// DNSSEC keys in the key directory: make one, import one, list a zone's.
    Key {
        /// The key directory (else `[dnssec] key_dir` of --config).
        #[arg(long, global = true)]
        key_dir: Option<PathBuf>,
        /// The config file whose `[dnssec] key_dir` to use.
        #[arg(long, short = 'c', global = true)]
        config: Option<PathBuf>,
        #[command(subcommand)]
        cmd: KeyCmd,
    },
    /// The fleet key that signs Redis block records (`[redis] key_file`).
    RedisKey {
        #[command(subcommand)]
        cmd: RedisKeyCmd,
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

#[derive(Subcommand)]
enum RedisKeyCmd {
    /// Write a new fleet key (32 random bytes as hex, mode 0600) to FILE; never overwrites.
    /// Copy the same file to every node of the fleet.
    Generate {
        /// Where to write it.
        file: PathBuf,
    },
    /// Check that FILE is a usable fleet key (mode, length).
    Check {
        /// The key file.
        file: PathBuf,
    },
}

#[derive(Subcommand)]
enum KeyCmd {
    /// Make a key for a zone: published and signing from now (the server makes the first
    /// keys itself; this is for keys made ahead, e.g. on an offline machine).
    Generate {
        /// The zone.
        zone: String,
        /// ecdsap256sha256, ed25519 or rsasha256.
        #[arg(long, default_value = "ecdsap256sha256")]
        algorithm: String,
        /// csk, ksk or zsk.
        #[arg(long, default_value = "csk")]
        role: String,
        /// RSA modulus bits.
        #[arg(long, default_value_t = 2048)]
        rsa_bits: u32,
    },
    /// Import a PKCS#8 private key (PEM, as Knot's key directory and openssl write, or DER).
    Import {
        /// The zone.
        zone: String,
        /// The key file.
        file: PathBuf,
        /// ecdsap256sha256, ed25519 or rsasha256.
        #[arg(long, default_value = "ecdsap256sha256")]
        algorithm: String,
        /// csk, ksk or zsk.
        #[arg(long, default_value = "csk")]
        role: String,
    },
    /// List a zone's keys.
    List {
        /// The zone.
        zone: String,
    },
}

/// Runs `dnsd key ...`.
fn key_command(
    key_dir: Option<PathBuf>,
    config: Option<PathBuf>,
    cmd: KeyCmd,
) -> Result<String, String> {
    use dnsd::signing::keys::{Algorithm, Key, Role, read_pkcs8};
    let dir = match (key_dir, config) {
        (Some(d), _) => d,
        (None, Some(c)) => config::Config::load(&c)
            .map_err(|e| e.to_string())?
            .dnssec
            .key_dir
            .ok_or_else(|| format!("{}: [dnssec] key_dir is not set", c.display()))?,
        (None, None) => return Err("give --key-dir DIR or -c CONFIG".into()),
    };
    let zone_name = |z: &str| {
        zones::Name::parse(z, Some(&zones::Name::root()))
            .map(|n| n.to_lowercase().to_string())
            .map_err(|e| format!("{z}: {e}"))
    };
    let alg = |a: &str| -> Result<Algorithm, String> {
        toml::Value::String(a.to_ascii_lowercase())
            .try_into()
            .map_err(|_| format!("{a}: expected ecdsap256sha256, ed25519 or rsasha256"))
    };
    let role = |r: &str| -> Result<Role, String> {
        toml::Value::String(r.to_ascii_lowercase())
            .try_into()
            .map_err(|_| format!("{r}: expected csk, ksk or zsk"))
    };
    let now = dnsd::signing::now();
    let made = |k: Key| {
        format!(
            "{}: key {} written to {}\n",
            k.file.zone,
            k.tag,
            k.path.display()
        )
    };
    match cmd {
        KeyCmd::Generate {
            zone,
            algorithm,
            role: r,
            rsa_bits,
        } => Key::generate(
            &dir,
            &zone_name(&zone)?,
            alg(&algorithm)?,
            rsa_bits,
            role(&r)?,
            now,
            Some(now),
        )
        .map(made)
        .map_err(|e| e.to_string()),
        KeyCmd::Import {
            zone,
            file,
            algorithm,
            role: r,
        } => {
            let der = read_pkcs8(&file).map_err(|e| e.to_string())?;
            Key::import_der(
                &dir,
                &zone_name(&zone)?,
                alg(&algorithm)?,
                role(&r)?,
                &der,
                now,
                Some(now),
            )
            .map(made)
            .map_err(|e| e.to_string())
        }
        KeyCmd::List { zone } => {
            dnsd::signing::keys_text(&dir, &zone_name(&zone)?, now).map_err(|e| e.to_string())
        }
    }
}

/// `dnsd sign-zone -c CONFIG ZONE [-o OUT]`: the zone loaded and signed as `serve` does it.
fn sign_zone(
    config: &std::path::Path,
    zone: &str,
    out: Option<&std::path::Path>,
    key_dir: Option<PathBuf>,
    update_keys: bool,
) -> Result<(), String> {
    let cfg = config::Config::load(config).map_err(|e| e.to_string())?;
    let origin = zones::Name::parse(zone, Some(&zones::Name::root()))
        .map_err(|e| format!("{zone}: not a zone name: {e}"))?;
    let zc = cfg
        .zones
        .iter()
        .find(|z| {
            zones::Name::parse(&z.origin, Some(&zones::Name::root())).is_ok_and(|o| o == origin)
        })
        .ok_or_else(|| format!("{origin}: no such [[zone]] in {}", config.display()))?;
    let name = zc
        .dnssec_policy
        .as_deref()
        .ok_or_else(|| format!("{origin}: the zone has no dnssec_policy"))?;
    let live = cfg
        .policy(name)
        .ok_or_else(|| format!("{origin}: no [[dnssec_policy]] named {name}"))?;
    // The live key directory is the running server's: changed only when asked. Otherwise
    // this run signs with a scratch copy of the zone's keys and state.
    let scratch = tempfile::tempdir().map_err(|e| format!("scratch directory: {e}"))?;
    let dir = match (&key_dir, update_keys) {
        (Some(d), _) => d.clone(),
        (None, true) => live.key_dir.clone(),
        (None, false) => {
            let from = dnsd::signing::keys::zone_dir(&live.key_dir, &origin.to_string());
            let to = dnsd::signing::keys::zone_dir(scratch.path(), &origin.to_string());
            copy_dir(&from, &to).map_err(|e| format!("{}: {e}", from.display()))?;
            scratch.path().to_path_buf()
        }
    };
    let mut p = (**live).clone();
    p.key_dir = dir.clone();
    let policy = std::sync::Arc::new(p);
    let plan = dnsd::zone_registry::Planned {
        slot: 0,
        origin: origin.clone(),
        file: zc.file.clone(),
        sign: Some(dnsd::signing::SignJob {
            policy: policy.clone(),
            prev: None,
            keep_unsigned: false,
        }),
    };
    let loaded = dnsd::zone_registry::load_planned(&plan)?;
    for w in &loaded.loaded.warnings {
        if w.at.file.as_os_str().is_empty() {
            eprintln!("{origin}: warning: {}", w.msg);
        } else {
            eprintln!("{}: warning: {}", w.at, w.msg);
        }
    }
    if key_dir.is_some() || update_keys {
        warn_foreign_owner(&dnsd::signing::keys::zone_dir(&dir, &origin.to_string()));
    }
    let z = &loaded.loaded.zone;
    let (made, kept) = loaded.signatures;
    eprintln!(
        "{origin}: serial {}, {made} signatures made, {kept} kept",
        z.serial()
    );
    match out {
        Some(path) => {
            let header = format!("{origin} serial {}, signed by dnsd sign-zone", z.serial());
            zones::present::write_file(z, path, &header)
                .map_err(|e| format!("{}: {e}", path.display()))
        }
        None => {
            use std::io::Write as _;
            std::io::stdout()
                .write_all(zones::present::zone_to_text(z).as_bytes())
                .map_err(|e| format!("standard output: {e}"))
        }
    }
}

/// Copies the files of directory `from` (if it exists) into `to`, keeping them private.
fn copy_dir(from: &std::path::Path, to: &std::path::Path) -> std::io::Result<()> {
    use std::os::unix::fs::DirBuilderExt as _;
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(to)?;
    let rd = match std::fs::read_dir(from) {
        Ok(rd) => rd,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(e),
    };
    for e in rd {
        let e = e?;
        if e.file_type()?.is_file() {
            std::fs::copy(e.path(), to.join(e.file_name()))?;
        }
    }
    Ok(())
}

/// Warns when files in `dir` are owned by another user than the directory (the service's):
/// a run as root in the live key directory leaves files the service cannot read or replace.
fn warn_foreign_owner(dir: &std::path::Path) {
    use std::os::unix::fs::MetadataExt as _;
    let Ok(d) = std::fs::metadata(dir) else {
        return;
    };
    let Ok(rd) = std::fs::read_dir(dir) else {
        return;
    };
    for e in rd.flatten() {
        if let Ok(m) = e.metadata()
            && m.uid() != d.uid()
        {
            eprintln!(
                "dnsd sign-zone: warning: {} is owned by uid {}, its directory by uid {} (the service's?): chown it back",
                e.path().display(),
                m.uid(),
                d.uid()
            );
        }
    }
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
        Cmd::SignZone {
            config,
            out,
            key_dir,
            update_keys,
            zone,
        } => match sign_zone(&config, &zone, out.as_deref(), key_dir, update_keys) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("dnsd sign-zone: {e}");
                ExitCode::FAILURE
            }
        },
        Cmd::RedisKey { cmd } => {
            let r = match &cmd {
                RedisKeyCmd::Generate { file } => shield::fleet_key::generate(file)
                    .map(|()| format!("{}: fleet key written (mode 0600)\n", file.display())),
                RedisKeyCmd::Check { file } => shield::fleet_key::FleetKey::load(file)
                    .map(|_| format!("{}: ok\n", file.display())),
            };
            match r {
                Ok(t) => {
                    print!("{t}");
                    ExitCode::SUCCESS
                }
                Err(e) => {
                    eprintln!("dnsd redis-key: {e}");
                    ExitCode::FAILURE
                }
            }
        }
        Cmd::Key {
            key_dir,
            config,
            cmd,
        } => match key_command(key_dir, config, cmd) {
            Ok(t) => {
                print!("{t}");
                ExitCode::SUCCESS
            }
            Err(e) => {
                eprintln!("dnsd key: {e}");
                ExitCode::FAILURE
            }
        },
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
            Some(dnsd::zone_registry::Planned::unsigned(
                i,
                origin,
                z.file.clone(),
            ))
        })
        .collect();
    let mut bad = 0;
    for (i, r) in dnsd::zone_registry::load_all(plan) {
        let z = &cfg.zones[i];
        match r {
            Ok(l) => {
                for w in &l.loaded.warnings {
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
