//! ClickHouse as an event sink: rows normalised at the source, a bounded buffer, batched gzip inserts over HTTP with retries and bisection of rejected batches.
//!
//! # Path of a row
//!
//! 1. The caller (the aggregator's sink thread, or the HTTP front's access-log thread) turns
//!    events or access records into [`Rows`]: every value is checked and normalised (see
//!    [`rows`](Rows)), a row that cannot be made valid is counted by reason and dropped alone,
//!    and the rest are encoded once as `JSONEachRow` lines.
//! 2. [`ClickHouseWriter::push`] appends the lines to a bounded buffer (at most
//!    `max_buffered_rows` rows and `max_buffered_bytes` bytes, the batch being sent included)
//!    and returns at once: what does not fit is counted as `overflow`, never waited for.
//! 3. The writer's own thread sends the buffer in order as `INSERT INTO db.table FORMAT
//!    JSONEachRow`, gzip-compressed, a batch when `batch_rows` rows are waiting or the oldest
//!    has waited `flush_ms`.
//! 4. A batch that fails for want of the server (refused connection, timeout, an error that
//!    is not about the data) is retried, the same batch first, with exponential backoff up to
//!    `max_backoff_ms`; meanwhile the buffer fills and overflows, counted. With several
//!    endpoints (`urls`), the one that failed is set aside for `set_aside_ms` and the retry
//!    goes to the next (plain HTTP, or HTTPS verified against `ca_file`). A batch the server
//!    rejects for its data is split in halves until the bad rows stand alone; those are
//!    counted by ClickHouse error code and dropped, every other row lands, in order.
//! 5. On close, what is buffered is sent for up to `timeout_ms`; what is left is counted as
//!    `shutdown_dropped`.
//!
//! Accounting: `accepted = landed + rejected + shutdown_dropped + buffered_rows`, and every
//! row offered is either accepted, counted in `overflow`, or counted in `invalid`.
//! Delivery is at least once: a batch whose reply was lost is sent again.
//!
//! A cluster ([`init_cluster`]): local tables on every shard and `Distributed` tables over
//! them sharded by the row's identity, so that a retry through any endpoint reaches the shard
//! that may hold the row already and `FINAL` reads it once.

mod admin;
mod config;
mod error;
mod http;
mod rows;
mod sink;
mod writer;

pub use admin::{LOCAL_SUFFIX, init_cluster, init_schema, query};
pub use config::{ClickHouseConfig, Table};
pub use error::ClickHouseError;
pub use sink::{ClickHouseSink, ClickHouseSource};
pub use writer::{ClickHouseMonitor, ClickHouseStats, ClickHouseWriter, EndpointStats};

pub use rows::{
    AccessRow, Fix, Invalid, MAX_HEADER, MAX_SHORT, MAX_TS_MS, MAX_URL, MIN_TS_MS, Rows, addr16,
    bounded, prefix16, writer_id,
};

/// The schema as shipped (`shield/sql/events.sql`); runs as is with `clickhouse-client --multiquery`.
pub const SCHEMA_SQL: &str = include_str!("../../../sql/events.sql");

#[cfg(test)]
mod tests;
