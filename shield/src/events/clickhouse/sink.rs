//! ClickHouse as a sink of the event aggregator, and its counters as a metrics source.

use super::config::{ClickHouseConfig, Table, host_name};
use super::error::ClickHouseError;
use super::rows::{self, MAX_SHORT, Rows, bounded};
use super::writer::{ClickHouseMonitor, ClickHouseWriter};
use crate::events::{Event, Sink, SinkError};

/// The aggregator's events into the events table: a [`Sink`] for [`crate::events::SinkWriter`].
///
/// `write` only normalises and buffers (it never waits for ClickHouse), so the sink writer's
/// queue never backs up because of the server.
pub struct ClickHouseSink {
    writer: ClickHouseWriter,
    service: String,
    rows: Rows,
}

impl std::fmt::Debug for ClickHouseSink {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ClickHouseSink")
            .field("writer", &self.writer)
            .finish_non_exhaustive()
    }
}

impl ClickHouseSink {
    /// A sink writing events of `service` (`dnsd`, `http-front`) to the events table.
    pub fn new(cfg: &ClickHouseConfig, service: &str) -> Result<Self, ClickHouseError> {
        Ok(ClickHouseSink {
            writer: ClickHouseWriter::spawn(cfg, Table::Events)?,
            service: bounded(service, MAX_SHORT).0.to_string(),
            rows: Rows::for_writer(rows::writer_id(&host_name(), service)),
        })
    }

    /// A handle for reading counters.
    pub fn monitor(&self) -> ClickHouseMonitor {
        self.writer.monitor()
    }

    /// The writer underneath.
    pub fn writer(&self) -> &ClickHouseWriter {
        &self.writer
    }
}

impl Sink for ClickHouseSink {
    fn name(&self) -> &str {
        self.writer.name()
    }

    fn write(&mut self, events: &[Event]) -> Result<(), SinkError> {
        self.rows.clear();
        self.rows.push_events(&self.service, events);
        self.writer.push(&self.rows);
        Ok(())
    }
}

/// A ClickHouse writer's counters as a metrics source, named `palisade_clickhouse_*{table=…}`
/// in both daemons; `ctl` prefixes its `ctl stats` names (`events.clickhouse`,
/// `access.clickhouse`).
#[derive(Debug, Clone)]
pub struct ClickHouseSource {
    /// The writer.
    pub monitor: ClickHouseMonitor,
    /// `ctl stats` prefix.
    pub ctl: &'static str,
    /// The `table` label: `events` or `access`.
    pub table: &'static str,
}

impl crate::metrics::Source for ClickHouseSource {
    fn collect(&self, out: &mut crate::metrics::Samples) {
        let s = self.monitor.stats();
        let (p, t) = (self.ctl, self.table);
        let help = "Rows for ClickHouse: accepted into the buffer, landed, or lost (overflow: buffer full; rejected: refused by the server; shutdown: left at stop).";
        for (what, n) in [
            ("accepted", s.accepted),
            ("landed", s.landed),
            ("overflow", s.overflow),
            ("rejected", s.rejected),
            ("shutdown_dropped", s.shutdown_dropped),
        ] {
            out.counter(
                format!("{p}.{what}"),
                "palisade_clickhouse_rows_total",
                format!("table=\"{t}\",result=\"{what}\""),
                help,
                n,
            );
        }
        for (what, n) in &s.invalid {
            out.counter(
                format!("{p}.invalid.{what}"),
                "palisade_clickhouse_invalid_rows_total",
                format!("table=\"{t}\",reason=\"{what}\""),
                "Rows refused before buffering because a value could not be made valid.",
                *n,
            );
        }
        for (what, n) in &s.fixed {
            out.counter(
                format!("{p}.fixed.{what}"),
                "palisade_clickhouse_fixed_values_total",
                format!("table=\"{t}\",kind=\"{what}\""),
                "Values normalised in rows that were kept.",
                *n,
            );
        }
        for (code, n) in &s.rejected_by_code {
            out.counter(
                format!("{p}.rejected.code.{code}"),
                "palisade_clickhouse_rejected_rows_by_code_total",
                format!("table=\"{t}\",code=\"{code}\""),
                "Rows the server rejected, by ClickHouse error code (0: codes beyond the first 32 seen).",
                *n,
            );
        }
        for (what, n) in [
            ("ok", s.requests),
            ("failed", s.request_failures),
            ("rejected", s.request_rejections),
        ] {
            out.counter(
                format!("{p}.requests.{what}"),
                "palisade_clickhouse_requests_total",
                format!("table=\"{t}\",result=\"{what}\""),
                "Inserts by result (failed: retried later; rejected: split to find the bad rows).",
                n,
            );
        }
        out.gauge(
            format!("{p}.buffered_rows"),
            "palisade_clickhouse_buffered_rows",
            format!("table=\"{t}\""),
            "Rows held for ClickHouse now (waiting or being sent).",
            s.buffered_rows,
        );
        out.gauge(
            format!("{p}.buffered_bytes"),
            "palisade_clickhouse_buffered_bytes",
            format!("table=\"{t}\""),
            "Bytes held for ClickHouse now.",
            s.buffered_bytes,
        );
        out.counter(
            format!("{p}.sent_bytes"),
            "palisade_clickhouse_sent_bytes_total",
            format!("table=\"{t}\""),
            "Bytes of successful inserts (compressed).",
            s.bytes_sent,
        );
        out.counter(
            format!("{p}.uncertain_retries"),
            "palisade_clickhouse_uncertain_retries_total",
            format!("table=\"{t}\""),
            "Inserts retried after the request had gone out whole (the first may have landed; rows keep their identity, so they are stored once).",
            s.uncertain_retries,
        );
        for (i, e) in s.endpoints.iter().enumerate() {
            for (what, n) in [("ok", e.requests), ("failed", e.failures)] {
                out.counter(
                    format!("{p}.endpoint.{i}.{what}"),
                    "palisade_clickhouse_endpoint_requests_total",
                    format!("table=\"{t}\",endpoint=\"{i}\",result=\"{what}\""),
                    "Requests per endpoint of urls (by its position), by result.",
                    n,
                );
            }
            out.gauge(
                format!("{p}.endpoint.{i}.set_aside"),
                "palisade_clickhouse_endpoint_set_aside",
                format!("table=\"{t}\",endpoint=\"{i}\""),
                "1 while the endpoint is passed over after a failure.",
                e.set_aside as u64,
            );
        }
        out.gauge(
            format!("{p}.failing"),
            "palisade_clickhouse_failing",
            format!("table=\"{t}\""),
            "1 while inserts fail for want of the server.",
            s.last_error.is_some() as u64,
        );
    }
}
