//! `http-front -c front.toml`: the Palisade WAF reverse proxy.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::Parser;
use http_front::config::Config;

/// mimalloc: per-thread free lists make the request path's few allocations cheap.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// Palisade's WAF reverse proxy.
#[derive(Parser, Debug)]
#[command(name = "http-front", version, about)]
struct Args {
    /// The configuration file (front.toml).
    #[arg(short, long)]
    config: PathBuf,
    /// Check the configuration (and the rules and certificates it names), then exit.
    #[arg(long)]
    check: bool,
}

fn main() -> ExitCode {
    let args = Args::parse();
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .init();
    let loaded = match Config::load(&args.config) {
        Ok(l) => l,
        Err(e) => {
            eprintln!("http-front: config refused: {e}");
            return ExitCode::from(1);
        }
    };
    if args.check {
        println!(
            "{}: ok ({} sites, {} upstreams, {} tenants with rules)",
            args.config.display(),
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
