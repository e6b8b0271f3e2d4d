//! The Palisade authoritative DNS daemon as a library: the binary `dnsd` is a thin CLI
//! over it, and benches and fuzzers reach the query parser and pipeline through it.
//!
//! Layout, by protocol responsibility (as Knot's `nameserver/`): [`wire`] parses queries,
//! [`process_query`] is the pipeline a query walks, [`internet`] answers in class IN,
//! [`response`] writes responses, [`defence`] holds the flood defences that plug into the
//! pipeline, [`tcp`] and [`server`] are the transports and the daemon, [`zonereg`] and
//! [`zoneset`] the zones served. Zone transfers: [`transfer`] (shared pieces and the
//! pipeline's entry point), [`axfr`], [`ixfr`] (with the journal), [`notify`], [`tsig`] and
//! [`secondary`] (refresh timers and transfer in).

pub mod axfr;
pub mod blockctl;
pub mod check_zone;
pub mod config;
pub mod ctl;
pub mod defence;
pub mod event_sinks;
pub mod internet;
pub mod ixfr;
pub mod metrics;
pub mod notify;
pub mod nsec_proofs;
pub mod process_query;
pub mod response;
pub mod secondary;
pub mod server;
pub mod stats;
pub mod tcp;
pub mod transfer;
pub mod tsig;
pub mod wire;
pub mod zonereg;
pub mod zoneset;
