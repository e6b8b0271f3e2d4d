//! `http-front -c front.toml`: the Palisade WAF reverse proxy; `http-front ctl -c front.toml
//! COMMAND` drives a running one through its control socket.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};
use http_front::config::Config;

/// mimalloc: per-thread free lists make the request path's few allocations cheap.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// Palisade's WAF reverse proxy.
#[derive(Parser, Debug)]
#[command(name = "http-front", version, about)]
struct Args {
    /// The configuration file (front.toml).
    #[arg(short, long, global = true)]
    config: Option<PathBuf>,
    /// Check the configuration (and the rules and certificates it names), then exit.
    #[arg(long)]
    check: bool,
    /// Log lines as "text" or "json" (over the config's `[log] format`).
    #[arg(long, value_name = "FORMAT")]
    log_format: Option<shield::logging::LogFormat>,
    #[command(subcommand)]
    cmd: Option<Cmd>,
}

#[derive(Subcommand, Debug)]
enum Cmd {
    /// Control a running http-front: block add|del|list|import, stats, status, reload.
    #[command(after_help = http_front::server::CTL_HELP)]
    Ctl {
        /// The control socket (default: the config's `[control] socket`).
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

/// `http-front ctl`: sends the command, prints the reply; exit 0 ok, 1 refused, 2 no server.
fn ctl(
    config: Option<&std::path::Path>,
    socket: Option<PathBuf>,
    timeout: u64,
    args: &[String],
) -> ExitCode {
    let socket = match (socket, config) {
        (Some(s), _) => s,
        (None, Some(c)) => match Config::load(c) {
            Ok(l) => match l.config.control_socket {
                Some(s) => s,
                None => {
                    eprintln!("http-front ctl: {} has no [control] socket", c.display());
                    return ExitCode::from(2);
                }
            },
            Err(e) => {
                eprintln!("http-front ctl: {e}");
                return ExitCode::from(2);
            }
        },
        (None, None) => PathBuf::from("/run/palisade/http-front.sock"),
    };
    match shield::control::call(&socket, args, std::time::Duration::from_secs(timeout)) {
        Ok(r) => {
            print!("{}", r.text);
            if r.ok {
                ExitCode::SUCCESS
            } else {
                ExitCode::from(1)
            }
        }
        Err(e) => {
            eprintln!("http-front ctl: {e}");
            ExitCode::from(2)
        }
    }
}

fn main() -> ExitCode {
    let args = Args::parse();
    if let Some(Cmd::Ctl {
        socket,
        timeout,
        args: words,
    }) = &args.cmd
    {
        // Its output piped into `head` or `grep -q` ends it quietly, as for any Unix tool.
        // SAFETY: restoring a signal's default disposition before any thread starts.
        unsafe { libc::signal(libc::SIGPIPE, libc::SIG_DFL) };
        if words.first().map(String::as_str) == Some("help") {
            print!("{}", http_front::server::CTL_HELP);
            return ExitCode::SUCCESS;
        }
        return ctl(args.config.as_deref(), socket.clone(), *timeout, words);
    }
    let Some(config) = args.config.clone() else {
        eprintln!("http-front: -c CONFIG is required");
        return ExitCode::from(2);
    };
    let mut loaded = match Config::load(&config) {
        Ok(l) => l,
        Err(e) => {
            eprintln!("http-front: config refused: {e}");
            return ExitCode::from(1);
        }
    };
    if !args.check {
        match loaded.config.fit_descriptors() {
            Ok(Some(w)) => loaded.config.warnings.push(w),
            Ok(None) => {}
            Err(e) => {
                eprintln!("http-front: config refused: {e}");
                return ExitCode::from(1);
            }
        }
    }
    if let Err(e) = shield::logging::init(&loaded.config.log, args.log_format) {
        eprintln!("http-front: {e}");
        return ExitCode::from(2);
    }
    // What the config's load noticed, now that the log takes it.
    for w in &loaded.config.warnings {
        tracing::warn!("{w}");
        if args.check {
            eprintln!("warning: {w}");
        }
    }
    if args.check {
        let mut certs = String::new();
        if let (Some(t), Some(fixed)) = (&loaded.config.tls, &loaded.tls) {
            // Every pair of cert_dir read now (the daemon reads them after its listeners open).
            let t0 = std::time::Instant::now();
            let counters = std::sync::Arc::new(http_front::counters::Counters::default());
            let built = http_front::tls::certs::build(
                fixed,
                http_front::tls::certs::Options {
                    cert_dir: t.cert_dir.as_deref(),
                    refuse_unknown: true,
                    read_now: true,
                    acme: None,
                },
                None,
                std::sync::Arc::clone(&counters),
            );
            for w in &built.warnings {
                eprintln!("warning: {w}");
            }
            let refused = built
                .warnings
                .iter()
                .filter(|w| w.starts_with(http_front::tls::certs::REFUSED_PAIR))
                .count();
            if refused > 0 {
                eprintln!(
                    "http-front: {}: {refused} certificate pairs of cert_dir refused",
                    config.display()
                );
                return ExitCode::from(1);
            }
            let (names, _) = built.resolver.stats();
            certs = format!(
                ", {names} certificate names, {} pairs read in {} ms",
                counters.get(http_front::counters::Counter::TlsCertsRead),
                t0.elapsed().as_millis()
            );
        }
        println!(
            "{}: ok ({} sites, {} upstreams, {} tenants with rules{certs})",
            config.display(),
            loaded.config.sites.len(),
            loaded.config.upstreams.len(),
            loaded.rules.tenant_count()
        );
        return ExitCode::SUCCESS;
    }
    let workers = match loaded.config.server.workers {
        0 => std::thread::available_parallelism().map_or(1, |n| n.get()),
        n => n,
    };
    // One worker: a current-thread runtime (no work-stealing machinery on the hot path).
    let mut builder = if workers == 1 {
        tokio::runtime::Builder::new_current_thread()
    } else {
        let mut b = tokio::runtime::Builder::new_multi_thread();
        b.worker_threads(workers);
        b
    };
    let rt = match builder
        .thread_name("http-front")
        .enable_all()
        .on_thread_stop(http_front::local::clear)
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("http-front: cannot start the runtime ({workers} workers): {e}");
            return ExitCode::from(1);
        }
    };
    let front = match rt.block_on(http_front::server::run(loaded)) {
        Ok(f) => f,
        Err(e) => {
            eprintln!("http-front: cannot start: {e}");
            return ExitCode::from(1);
        }
    };
    rt.shutdown_timeout(std::time::Duration::from_secs(2));
    front.finish();
    ExitCode::SUCCESS
}
