//! Why a transfer, a refresh or a NOTIFY exchange failed, typed: each is reported in the log,
//! in `ctl zones` and to whoever asked (`ctl zone-refresh`), and counted.

use std::net::SocketAddr;

/// A failed exchange with a peer, or a transfer that could not be used.
#[derive(Debug, thiserror::Error)]
pub enum XfrError {
    /// A message or a record that does not parse.
    #[error("malformed message: {0}")]
    Malformed(&'static str),
    /// The peer broke the protocol (answer to another ID, records out of order...).
    #[error("{0}")]
    Protocol(&'static str),
    /// The peer answered with an error rcode.
    #[error("answered {0}")]
    Rcode(&'static str),
    /// A TSIG that is missing where one is required, or does not verify.
    #[error("TSIG: {0}")]
    Tsig(&'static str),
    /// No answer in time.
    #[error("no answer from {peer} within {secs} s")]
    Timeout {
        /// Who did not answer.
        peer: SocketAddr,
        /// How long we waited.
        secs: u64,
    },
    /// A whole transfer took longer than `in_timeout_secs`, or came slower than
    /// `in_min_rate_bytes_per_sec`.
    #[error(
        "transfer took longer than in_timeout_secs or came slower than in_min_rate_bytes_per_sec"
    )]
    TooSlow,
    /// A transfer of more bytes than `max_in_bytes`.
    #[error("transfer has more than {0} bytes (max_in_bytes)")]
    TooLarge(u64),
    /// A transfer whose zone would take more memory than is left.
    #[error("{0}")]
    NoMemory(crate::zone::room::NoRoom),
    /// A transfer with more records than `max_in_records`.
    #[error("transfer has more than {0} records (max_in_records)")]
    TooManyRecords(usize),
    /// A socket error.
    #[error("{peer}: {source}")]
    Io {
        /// The peer.
        peer: SocketAddr,
        /// The error.
        source: std::io::Error,
    },
    /// The zone the transfer carried does not load or validate.
    #[error("zone refused: {0}")]
    Zone(String),
    /// A TLS primary whose handshake failed (its certificate refused, among others), or
    /// whose zone's `transfer_tls` could not be made into TLS settings.
    #[error("{peer}: TLS: {msg}")]
    Tls {
        /// The peer.
        peer: SocketAddr,
        /// Why.
        msg: String,
    },
    /// The zone left the configuration while the transfer ran.
    #[error("zone no longer configured")]
    Unconfigured,
    /// Writing the zone file failed.
    #[error("cannot write {path}: {source}")]
    Write {
        /// The file.
        path: String,
        /// The error.
        source: std::io::Error,
    },
    /// Every primary failed; each one's error in order.
    #[error("{}", .0.iter().map(|(p, e)| format!("{p}: {e}")).collect::<Vec<_>>().join("; "))]
    AllPrimaries(Vec<(super::policy::Primary, XfrError)>),
}
