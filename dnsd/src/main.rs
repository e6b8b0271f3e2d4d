//! dnsd: the Palisade authoritative DNS daemon and its tools. A thin dispatcher: each command
//! is the library's ([`dnsd::daemon::server`], [`dnsd::cli`]).

use dnsd::cli::{self, check_zone, keys::KeyCmd, keys::RedisKeyCmd};
use dnsd::{config, daemon::server};
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
    #[command(after_help = dnsd::daemon::control::HELP)]
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
    // Rules files are read (serve, check-config, reload) knowing what a query shows.
    shield::rules::set_value_check(dnsd::query::defence::rules::value_check);
    if !matches!(cli.cmd, Cmd::Serve { .. }) {
        // A tool's output piped into `head` or `grep -q` ends it quietly, as for any Unix
        // tool (Rust ignores SIGPIPE, and a print to the closed pipe panicked).
        // SAFETY: restoring a signal's default disposition before any thread starts.
        unsafe { libc::signal(libc::SIGPIPE, libc::SIG_DFL) };
    }
    match cli.cmd {
        Cmd::CheckZone {
            origin,
            quiet,
            file,
        } => ExitCode::from(check_zone::run(&file, origin.as_deref(), quiet) as u8),
        Cmd::CheckConfig { config, no_zones } => {
            ExitCode::from(cli::config::check_config(&config, !no_zones))
        }
        Cmd::SignZone {
            config,
            out,
            key_dir,
            update_keys,
            zone,
        } => {
            match cli::sign_zone::sign_zone(&config, &zone, out.as_deref(), key_dir, update_keys) {
                Ok(()) => ExitCode::SUCCESS,
                Err(e) => {
                    eprintln!("dnsd sign-zone: {e}");
                    ExitCode::FAILURE
                }
            }
        }
        Cmd::RedisKey { cmd } => match cli::keys::redis_key(&cmd) {
            Ok(t) => {
                print!("{t}");
                ExitCode::SUCCESS
            }
            Err(e) => {
                eprintln!("dnsd redis-key: {e}");
                ExitCode::FAILURE
            }
        },
        Cmd::Key {
            key_dir,
            config,
            cmd,
        } => match cli::keys::key_command(key_dir, config, cmd) {
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
            let flags = config::Overrides {
                listen,
                port,
                zones: zone,
                control,
                metrics,
                workers,
            };
            let cfg = match cli::config::build_config(config.as_deref(), &flags) {
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
            match server::run(cfg, config, flags) {
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
                print!("{}", dnsd::daemon::control::HELP);
                return ExitCode::SUCCESS;
            }
            // `events-init` needs only the config: it works without a running server.
            if args.first().map(String::as_str) == Some("events-init")
                && let Some(c) = &config
            {
                return cli::config::events_init_from_config(c, &args[1..]);
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
