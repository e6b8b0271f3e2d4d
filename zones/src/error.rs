//! Errors and warnings from reading and checking a zone, each with its file and line.

use std::fmt;
use std::path::PathBuf;
use std::sync::Arc;

/// Where in the input something was found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Location {
    /// The file (the including file's name for `$INCLUDE`d records is the included file).
    pub file: Arc<PathBuf>,
    /// 1-based line, 0 when the problem concerns the zone as a whole.
    pub line: u32,
    /// 1-based column, 0 when unknown.
    pub col: u32,
}

impl fmt::Display for Location {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.file.display())?;
        if self.line > 0 {
            write!(f, ":{}", self.line)?;
            if self.col > 0 {
                write!(f, ":{}", self.col)?;
            }
        }
        Ok(())
    }
}

/// One problem found in a zone: an error (the zone does not load) or a warning.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Diagnostic {
    /// Where.
    pub at: Location,
    /// What, and what was expected.
    pub msg: String,
}

impl fmt::Display for Diagnostic {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // A problem of the zone as a whole (found after loading, e.g. by the signer) has
        // no file to name.
        if self.at.file.as_os_str().is_empty() {
            return write!(f, "{}", self.msg);
        }
        write!(f, "{}: {}", self.at, self.msg)
    }
}

/// Why a zone did not load: every error found (up to a limit), in input order.
#[derive(Debug, Clone, thiserror::Error)]
pub struct ZoneError {
    /// The errors, each with its location.
    pub errors: Vec<Diagnostic>,
    /// Errors found beyond those listed (the list is bounded).
    pub more: usize,
}

impl fmt::Display for ZoneError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, d) in self.errors.iter().enumerate() {
            if i > 0 {
                writeln!(f)?;
            }
            write!(f, "{d}")?;
        }
        if self.more > 0 {
            write!(f, "\n{} more errors", self.more)?;
        }
        Ok(())
    }
}

impl ZoneError {
    /// A single error.
    pub fn one(at: Location, msg: impl Into<String>) -> ZoneError {
        ZoneError {
            errors: vec![Diagnostic {
                at,
                msg: msg.into(),
            }],
            more: 0,
        }
    }
}

/// Where a record came from: file index and line.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Src {
    pub file: u16,
    pub line: u32,
}

/// Where an RRset's records came from.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct SetSrc {
    /// Its first record in reading order.
    pub first: Src,
    /// Its second distinct record, the one that breaks a one-record rule (the first again
    /// when it has one): NSD and BIND name that line.
    pub second: Src,
    /// The first record's place in reading order (across `$INCLUDE`d files).
    pub order: u32,
}

/// How bad a finding is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Severity {
    /// The zone must not be served.
    Error,
    /// Worth telling the operator; the zone loads.
    Warning,
}
