//! The socket fleet: one UDP socket per service address, one wildcard TCP listener per
//! family, batched receive and send. Knows nothing of DNS: a [`udp::Handler`] turns a
//! datagram into a reply.

pub mod addrs;
pub mod limits;
pub mod tcp;
pub mod udp;

use std::net::SocketAddr;

/// Why the fleet could not be set up.
#[derive(Debug, thiserror::Error)]
pub enum ListenerError {
    /// A socket could not be bound.
    #[error("cannot bind {addr}: {source}")]
    Bind {
        /// The address.
        addr: SocketAddr,
        /// The OS error.
        source: std::io::Error,
    },
    /// More descriptors are needed than the process may open.
    #[error(
        "{needed} file descriptors needed (one UDP socket per service address, and 1024 kept for TCP connections, transfers, control and files), but the hard limit RLIMIT_NOFILE is {hard}; configure fewer addresses or raise the limit"
    )]
    TooManyFiles {
        /// Descriptors needed.
        needed: u64,
        /// The hard limit.
        hard: u64,
    },
    /// A `listen` entry is not an address or a prefix.
    #[error("bad listen entry {entry:?}: {why}")]
    BadAddress {
        /// The entry.
        entry: String,
        /// Why.
        why: String,
    },
    /// Another OS error.
    #[error("{0}")]
    Io(#[from] std::io::Error),
}
