//! Errors of the XDP guard, and why XDP may be unavailable on this host.

use std::fmt;
use std::io;
use std::path::PathBuf;

use crate::config::Mode;

/// Everything that can go wrong loading, attaching or driving the guard.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The `[xdp]` section is invalid.
    #[error("[xdp] config: {0}")]
    Config(String),
    /// XDP cannot run here (no privileges, no bpf(2)).
    #[error("XDP unavailable: {0}")]
    Unavailable(#[from] Unavailable),
    /// The object could not be parsed or its maps created.
    #[error("loading the XDP program: {0}")]
    Load(#[source] Box<aya::EbpfError>),
    /// The verifier or the kernel refused the program.
    #[error("XDP program: {0}")]
    Program(#[source] Box<aya::programs::ProgramError>),
    /// The interface does not exist (in this network namespace).
    #[error("interface {0:?} not found")]
    NoInterface(String),
    /// Attaching failed in every mode that was tried.
    #[error("attaching XDP to {interface} ({mode}): {source}")]
    Attach {
        /// The interface.
        interface: String,
        /// The mode asked for.
        mode: Mode,
        /// The last failure.
        #[source]
        source: Box<aya::programs::ProgramError>,
    },
    /// A map could not be opened (pinned) or is missing from the object.
    #[error("map {name}: {source}")]
    Map {
        /// The map's name.
        name: &'static str,
        /// The failure.
        #[source]
        source: Box<aya::maps::MapError>,
    },
    /// A pinned map exists but does not have this program's layout.
    #[error(
        "pinned map {path} does not match this program ({what}): remove it or use another pin_path"
    )]
    PinnedMismatch {
        /// The pin.
        path: PathBuf,
        /// What differs.
        what: String,
    },
    /// The pin directory or bpffs could not be prepared.
    #[error("bpffs at {path}: {source}")]
    Bpffs {
        /// The directory.
        path: PathBuf,
        /// The failure.
        #[source]
        source: io::Error,
    },
    /// A bpf(2) map command failed.
    #[error("bpf({op}) on {map}: {source}")]
    Syscall {
        /// The command.
        op: &'static str,
        /// The map's name.
        map: &'static str,
        /// The failure.
        #[source]
        source: io::Error,
    },
    /// `BPF_PROG_TEST_RUN` failed.
    #[error("test run: {0}")]
    TestRun(#[source] Box<aya::programs::ProgramError>),
}

impl From<aya::EbpfError> for Error {
    fn from(e: aya::EbpfError) -> Self {
        Self::Load(Box::new(e))
    }
}

impl From<aya::programs::ProgramError> for Error {
    fn from(e: aya::programs::ProgramError) -> Self {
        Self::Program(Box::new(e))
    }
}

/// Why this process cannot use XDP; the daemon logs it once and runs without.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Unavailable {
    /// Neither root nor CAP_BPF/CAP_SYS_ADMIN with CAP_NET_ADMIN.
    NotPrivileged,
    /// bpf(2) refused to create a map (errno).
    BpfSyscall(i32),
    /// The config has no `[xdp]` section.
    NotConfigured,
}

impl fmt::Display for Unavailable {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::NotPrivileged => f.write_str(
                "not running as root (needs CAP_BPF or CAP_SYS_ADMIN, and CAP_NET_ADMIN)",
            ),
            Self::BpfSyscall(errno) => write!(
                f,
                "bpf(2) cannot create a map: {}",
                io::Error::from_raw_os_error(*errno)
            ),
            Self::NotConfigured => f.write_str("no [xdp] section in the config"),
        }
    }
}

impl std::error::Error for Unavailable {}
