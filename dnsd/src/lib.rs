//! The Palisade authoritative DNS daemon as a library: the binary `dnsd` is a thin CLI
//! over it, and benches and fuzzers reach the query parser and pipeline through it.
//!
//! The folders are the map (Knot's `nameserver/`, `server/` and `zone/` are the model). Read
//! [`query::process_query`] first: every query walks it.
//! - [`query`]: one query, from bytes to an answer — [`query::wire`] parses it,
//!   [`query::process_query`] is the pipeline it walks, [`query::module`] names the
//!   pipeline's points, [`query::defence`] holds the modules plugged into them (block map,
//!   cookies, suspects, rules, random-subdomain, RRL), [`query::internet`] answers in class
//!   IN, [`query::nsec_proofs`] builds DNSSEC denials, [`query::response`] writes responses
//!   and the glue every reply shares (OPT, size limit, slip);
//! - [`zone`]: a zone's life — [`zone::registry`] (the configured zones and their load
//!   state), [`zone::load`] (reading and signing a zone off the runtime), [`zone::served`]
//!   (the set the query path reads), [`zone::catalog`] (catalog zones read and produced);
//! - [`xfr`]: zone transfers (AXFR, IXFR, journal, NOTIFY, TSIG, secondary zones);
//! - [`signing`]: online DNSSEC signing (policies, keys, rollovers, re-sign scheduling, and
//!   compact denial on the workers);
//! - [`xdp`]: the XDP guard's side in dnsd — the block mirror, the answers compiled for the
//!   fast path and their publisher, the hot names;
//! - [`observe`]: what dnsd shows of itself — per-worker counters and the metric sources
//!   over them, dnstap, the event sinks, the sampler of answered names;
//! - [`daemon`]: the running server — start and stop, the UDP fleet's and TCP's handlers,
//!   the control socket's commands, reloads, the state they share;
//! - [`config`]: `palisade.toml`, by section;
//! - [`cli`]: the one-shot commands (`check-zone`, `key`, `sign-zone`).
//!
//! Lower layers never reach up: `observe` ← `signing` ← `config` ← `zone` ← `query` ←
//! `xfr`, `xdp` ← `daemon` (and `cli`); `scripts/check-module-cycles` keeps it so.

pub mod cli;
pub mod config;
pub mod daemon;
pub mod observe;
pub mod query;
pub mod signing;
pub mod xdp;
pub mod xfr;
pub mod zone;
