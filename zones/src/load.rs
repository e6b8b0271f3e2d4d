//! Loading a zone: read the master file, compile, validate — one call.

use std::path::Path;
use std::time::{Duration, Instant};

use crate::build::ZoneBuilder;
use crate::error::{Diagnostic, ZoneError};
use crate::name::Name;
use crate::reader::{self, ReadOptions};
use crate::zone::Zone;

/// A zone that loaded, with what was noticed on the way.
#[derive(Debug)]
pub struct Loaded {
    /// The compiled zone.
    pub zone: Zone,
    /// Warnings from reading and validation.
    pub warnings: Vec<Diagnostic>,
    /// Time spent reading and compiling.
    pub elapsed: Duration,
}

/// Loads the zone `origin` from a master file.
pub fn load_file(path: &Path, origin: &Name, opts: &ReadOptions) -> Result<Loaded, ZoneError> {
    let start = Instant::now();
    let mut b = ZoneBuilder::new(origin);
    if let Ok(m) = std::fs::metadata(path) {
        b.reserve_for_text(m.len());
    }
    let summary = reader::read_file(path, opts, &mut |r| b.add(r))?;
    finish(b, summary, start)
}

/// Loads the zone `origin` from master-file text in memory (`name` appears in errors).
pub fn load_bytes(
    name: &str,
    text: impl Into<Vec<u8>>,
    origin: &Name,
    opts: &ReadOptions,
) -> Result<Loaded, ZoneError> {
    let start = Instant::now();
    let mut b = ZoneBuilder::new(origin);
    let summary = reader::read_bytes(name, text, opts, &mut |r| b.add(r))?;
    finish(b, summary, start)
}

fn finish(
    b: ZoneBuilder,
    summary: reader::ReadSummary,
    start: Instant,
) -> Result<Loaded, ZoneError> {
    let built = b.finish(&summary.files)?;
    let mut warnings = summary.warnings;
    warnings.extend(built.warnings);
    Ok(Loaded {
        zone: built.zone,
        warnings,
        elapsed: start.elapsed(),
    })
}
