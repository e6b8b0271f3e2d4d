//! `dnsd check-zone`: parse and validate a zone file the way `serve` would load it.

use std::io::IsTerminal;
use std::path::Path;
use std::time::Instant;

use zones::{Name, ReadOptions};

/// Checks `file`; prints `file:line: message` for each problem. Returns the exit code.
pub fn run(file: &Path, origin: Option<&str>, quiet: bool) -> i32 {
    let given = origin.is_some();
    let origin = match origin {
        Some(o) => match Name::parse(o, Some(&Name::root())) {
            Ok(n) => n,
            Err(e) => {
                eprintln!("error: bad --origin {o}: {e}");
                return 2;
            }
        },
        None => guess_origin(file),
    };
    let start = Instant::now();
    let progress = std::io::stderr().is_terminal() && !quiet;
    let mut first_soa: Option<Name> = None;
    let result = load(file, &origin, progress, &mut first_soa);
    // Without --origin, the zone's own SOA owner decides when the file name guessed wrong.
    let (origin, result) = match (&result, first_soa) {
        (Err(_), Some(soa)) if soa != origin && !given => {
            let r = load(file, &soa, progress, &mut None);
            (soa, r)
        }
        _ => (origin, result),
    };
    match result {
        Ok(loaded) => {
            for w in &loaded.warnings {
                println!("{}: warning: {}", w.at, w.msg);
            }
            if !quiet {
                println!(
                    "{}: zone {} loads: serial {}, {} records, {} names, {:.1} MiB, {:.2} s",
                    file.display(),
                    origin,
                    loaded.zone.serial(),
                    loaded.zone.record_count(),
                    loaded.zone.node_count(),
                    loaded.zone.memory_bytes() as f64 / (1 << 20) as f64,
                    start.elapsed().as_secs_f64()
                );
            }
            0
        }
        Err(e) => {
            for d in &e.errors {
                println!("{}: {}", d.at, d.msg);
            }
            if e.more > 0 {
                println!("{}: {} more errors", file.display(), e.more);
            }
            println!("{}: zone {} does not load", file.display(), origin);
            1
        }
    }
}

fn load(
    file: &Path,
    origin: &Name,
    progress: bool,
    first_soa: &mut Option<Name>,
) -> Result<zones::Loaded, zones::ZoneError> {
    let start = Instant::now();
    let opts = ReadOptions::new(origin);
    let mut n: u64 = 0;
    let r = zones::load::load_file_observed(file, origin, &opts, &mut |r| {
        if first_soa.is_none() && r.rtype == zones::rrtype::t::SOA {
            *first_soa = Name::from_wire(r.owner).ok();
        }
        n += 1;
        if progress && n.is_multiple_of(1 << 18) {
            eprint!("\r{n} records read, {:.1} s", start.elapsed().as_secs_f64());
        }
    });
    if progress && n >= 1 << 18 {
        eprintln!("\r{n} records read, {:.1} s", start.elapsed().as_secs_f64());
    }
    r
}

/// The origin a file name suggests: `example.com.zone`, `db.example.com` → `example.com.`.
fn guess_origin(file: &Path) -> Name {
    let name = file
        .file_name()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_default();
    let mut s = name.as_str();
    for suffix in [".signed", ".zone", ".db", ".txt"] {
        if let Some(x) = s.strip_suffix(suffix) {
            s = x;
        }
    }
    if let Some(x) = s.strip_prefix("db.") {
        s = x;
    }
    Name::parse(&format!("{}.", s.trim_end_matches('.')), None).unwrap_or_else(|_| Name::root())
}
