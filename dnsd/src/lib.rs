//! The Palisade authoritative DNS daemon as a library: the binary `dnsd` is a thin CLI
//! over it, and benches and fuzzers reach the query parser and pipeline through it.
//!
//! Layout, by protocol responsibility (as Knot's `nameserver/`):
//! - the query: [`wire`] parses it, [`process_query`] is the pipeline it walks,
//!   [`query_module`] names the pipeline's points, [`defence`] holds the modules plugged into
//!   them (block map, cookies, random-subdomain, RRL), [`internet`] answers in class IN,
//!   [`nsec_proofs`] builds DNSSEC denials, [`response`] writes responses and the glue every
//!   reply shares (OPT, size limit, slip);
//! - transports, mirrored around that core: [`udp`] (the socket fleet's handler) and [`tcp`];
//! - zones: [`zone_registry`] (configured zones and their load state), [`served_zones`] (the set the
//!   query path reads), [`catalog`] (catalog zones consumed and produced), [`signing`]
//!   (online DNSSEC signing: policies, keys, rollovers, and compact denial on the workers);
//! - zone transfers: the [`xfr`] subsystem (AXFR, IXFR, journal, NOTIFY, TSIG, secondary
//!   zones);
//! - the daemon: [`config`], [`server`] (start and stop), [`state`] (what it holds),
//!   [`reload`], [`control`] (the control socket's commands; the protocol and
//!   the block commands are `shield::control`'s), [`metrics`]
//!   (dnsd's counter sources; [`stats`] the per-worker counters), [`xdp`], [`event_sinks`],
//!   [`check_zone`].

pub mod catalog;
pub mod check_zone;
pub mod config;
pub mod control;
pub mod defence;
pub mod dnstap;
pub mod event_sinks;
pub mod hot_names;
pub mod internet;
pub mod metrics;
pub mod nsec_proofs;
pub mod process_query;
pub mod query_module;
pub mod reload;
pub mod response;
pub mod served_zones;
pub mod server;
pub mod signing;
pub mod state;
pub mod stats;
pub mod tcp;
pub mod udp;
pub mod wire;
pub mod xdp;
pub mod xdp_answers;
pub mod xfr;
pub mod zone_registry;
