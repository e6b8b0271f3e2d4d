//! The running server (Knot's `server/`): [`server`] starts and stops it, [`udp`] and [`tcp`]
//! carry queries to the pipeline (TCP with [`tls`]'s pair for DNS over TLS, [`doq`] over QUIC), [`control`]
//! answers the control socket, [`reload`] re-reads the config and zones, [`catalogs`]
//! consumes catalog zones, [`alias`] resolves ALIAS targets we do not serve, [`state`] is what
//! they share, [`memory`] gives freed heap back.

pub mod alias;
pub mod catalogs;
pub mod control;
pub mod doq;
pub mod memory;
pub mod reload;
pub mod server;
pub mod state;
pub mod tcp;
pub mod tls;
pub mod udp;
