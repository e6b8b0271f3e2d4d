//! Shared policy core of Palisade: block map, rule engine, rate limiters, event aggregator.
//!
//! `shield` knows nothing of DNS or HTTP wire formats. The daemons (`dnsd`, `http-front`) and
//! the XDP loader (`xdp-guard`) build on these pieces:
//!
//! - [`block`]: the block map (address or prefix → expiry, reason, origin) that readers consult
//!   without waiting for writers, with a lossless change feed for mirrors (XDP, Redis).
//! - [`never_block`]: the prefixes no automatic defence may block or suspect, and the
//!   shortest prefix one may (the policy every block-map insert meets).
//! - [`prefix`]: longest-prefix match over IPv4/IPv6 prefixes, shared by the block map and rules.
//! - [`ratelimit`]: lock-free rate limiters and window counters in bounded tables.
//! - [`rules`]: per-tenant prepared rules (prefix lists, known crawlers, ASNs, attribute
//!   matchers, rate limits, escalation into the block map), loaded from TOML.
//! - [`events`]: the bounded-memory event aggregator and its sinks (JSON lines, ClickHouse).
//! - [`clock`]: the two clocks the other modules take as plain integers.
//! - [`metrics`]: the counter registry both daemons render for `ctl stats` and `/metrics`,
//!   and the one `/metrics` server.
//! - [`toml_pos`]: `file:line:col` and the key of a TOML error, for every config file.
//! - [`redis_sync`]: block-map sync across nodes through Redis (snapshot, capped change stream,
//!   bounded outbox), built on [`block::Subscription`] and [`block::Origin::Peer`].
//! - [`fleet_key`]: the fleet key file and the keys each use derives from it (Redis records).
//! - [`control`]: the control socket's protocol, server loop and client, and the block-map
//!   commands both daemons answer (`ctl block add|del|list|import`).
//! - [`systemd`]: the service manager's notify protocol (ready, reloading, stopping,
//!   watchdog), a no-op when not started by systemd.
//! - [`logging`]: the daemons' `tracing` setup.
//!
//! Out of scope here: wire-format parsing.

pub mod block;
pub mod block_state;
pub mod clock;
pub mod control;
pub mod events;
pub mod files;
pub mod fleet_key;
pub mod logging;
pub mod metrics;
pub mod never_block;
pub mod prefix;
pub mod proxy_proto;
pub mod ratelimit;
pub mod redis_sync;
pub mod rules;
pub mod systemd;
pub mod tls_pair;
pub mod tls_roots;
pub mod toml_pos;

mod epoch;
mod util;
