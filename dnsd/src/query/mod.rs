//! One query, from bytes to an answer (Knot's `nameserver/`): parsed ([`wire`]), walked
//! through the pipeline ([`process_query`]) whose points [`module`] names and whose modules
//! [`defence`] holds, answered in class IN ([`internet`], [`nsec_proofs`]; ALIAS targets we
//! do not serve from [`alias`]'s cache), written
//! ([`response`]) and, when the request was, signed ([`tsig`]: verified as the query is
//! parsed, the response signed last). Transfers and NOTIFY leave the pipeline through
//! [`handoff`] to whatever side the daemon plugs in (the [`crate::xfr`] subsystem).

pub mod alias;
pub mod defence;
pub mod handoff;
pub mod internet;
pub mod module;
pub mod nsec_proofs;
pub mod process_query;
pub mod response;
#[cfg(test)]
pub(crate) mod testkit;
pub mod tsig;
pub mod wire;
