//! dnsd: the Palisade authoritative DNS daemon and its tools.

mod check_zone;

use std::path::PathBuf;
use std::process::ExitCode;

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
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match cli.cmd {
        Cmd::CheckZone {
            origin,
            quiet,
            file,
        } => ExitCode::from(check_zone::run(&file, origin.as_deref(), quiet) as u8),
    }
}
