//! `[events.clickhouse]`: the 403/429 aggregates and (with `[access_log] clickhouse = true`) the sampled access records into ClickHouse through shield's writer, and its counters for /metrics.
//!
//! Both go alongside the `output`s configured, never instead of them. Rows are normalised in
//! shield before they are buffered; the buffer is bounded and never makes the request path
//! or the access-log writer wait (see `shield::events::clickhouse`).

use std::fmt::Write as _;
use std::io;

use shield::events::clickhouse::{AccessRow, ClickHouseWriter, Rows, Table};
use shield::events::{ClickHouseMonitor, ClickHouseSink, SinkError, SinkWriter};

use crate::access_log::{AccessRecord, RecordSink};
use crate::config::Config;

fn err(e: impl std::fmt::Display) -> io::Error {
    io::Error::other(e.to_string())
}

/// The events table's sink writer and its monitor, when `[events.clickhouse]` is configured.
pub fn event_writer(cfg: &Config) -> io::Result<Option<(SinkWriter, ClickHouseMonitor)>> {
    let Some(c) = &cfg.events.clickhouse else {
        return Ok(None);
    };
    let sink = ClickHouseSink::new(c, "http-front").map_err(err)?;
    let m = sink.monitor();
    let w = SinkWriter::spawn(Box::new(sink), cfg.events.aggregator.queue_batches)?;
    Ok(Some((w, m)))
}

/// The access-log sink to use, and the ClickHouse writer's monitor when it is part of it.
pub type AccessSink = (Option<Box<dyn RecordSink>>, Option<ClickHouseMonitor>);

/// The access-log sink with ClickHouse's access table added when `[access_log] clickhouse` is on.
pub fn access_sink(cfg: &Config, base: Option<Box<dyn RecordSink>>) -> io::Result<AccessSink> {
    if !cfg.access_log.clickhouse {
        return Ok((base, None));
    }
    let c = cfg.events.clickhouse.as_ref().ok_or_else(|| {
        err("[access_log] clickhouse = true needs an [events.clickhouse] section")
    })?;
    let writer = ClickHouseWriter::spawn(c, Table::Access).map_err(err)?;
    let m = writer.monitor();
    let ch: Box<dyn RecordSink> = Box::new(AccessRecords {
        writer,
        rows: Rows::new(),
        node: cfg.events.aggregator.node.clone().unwrap_or_default(),
    });
    let sink = match base {
        Some(b) => Box::new(Both(b, ch)),
        None => ch,
    };
    Ok((Some(sink), Some(m)))
}

/// Access records into the access table (normalised, then buffered; never waits for the server).
pub struct AccessRecords {
    writer: ClickHouseWriter,
    rows: Rows,
    node: String,
}

impl RecordSink for AccessRecords {
    fn name(&self) -> &str {
        self.writer.name()
    }

    fn write(&mut self, records: &[AccessRecord]) -> Result<(), SinkError> {
        self.rows.clear();
        for r in records {
            // A record that cannot be made valid is counted by the writer and skipped alone.
            let _ = self.rows.push_access(
                "http-front",
                &AccessRow {
                    ts_ms: r.ts_ms,
                    node: &self.node,
                    site: &r.site,
                    tenant: r.tenant,
                    client: r.client,
                    method: &r.method,
                    url: &r.url,
                    proto: r.proto,
                    status: r.status,
                    duration_ms: r.duration_ms,
                    upstream: &r.upstream,
                    action: r.action,
                    user_agent: r.user_agent.as_deref(),
                    referer: r.referer.as_deref(),
                    request_bytes: r.request_bytes,
                    response_bytes: r.response_bytes,
                },
            );
        }
        self.writer.push(&self.rows);
        Ok(())
    }
}

/// Two record sinks fed the same batches; the first error is reported after both wrote.
pub struct Both(pub Box<dyn RecordSink>, pub Box<dyn RecordSink>);

impl RecordSink for Both {
    fn name(&self) -> &str {
        self.0.name()
    }

    fn write(&mut self, records: &[AccessRecord]) -> Result<(), SinkError> {
        let a = self.0.write(records);
        let b = self.1.write(records);
        a.and(b)
    }
}

/// The ClickHouse writers' counters in the Prometheus text format.
pub fn metrics(monitors: &[ClickHouseMonitor], s: &mut String) {
    if monitors.is_empty() {
        return;
    }
    let stats: Vec<_> = monitors.iter().map(ClickHouseMonitor::stats).collect();
    let family = |s: &mut String, name: &str, kind: &str, help: &str| {
        let _ = writeln!(s, "# HELP http_front_clickhouse_{name} {help}");
        let _ = writeln!(s, "# TYPE http_front_clickhouse_{name} {kind}");
    };
    family(
        s,
        "rows_total",
        "counter",
        "Rows for ClickHouse: accepted into the buffer, landed, or lost (overflow: buffer full; rejected: refused by the server; shutdown: left at stop).",
    );
    for st in &stats {
        for (what, n) in [
            ("accepted", st.accepted),
            ("landed", st.landed),
            ("overflow", st.overflow),
            ("rejected", st.rejected),
            ("shutdown_dropped", st.shutdown_dropped),
        ] {
            let _ = writeln!(
                s,
                "http_front_clickhouse_rows_total{{sink=\"{}\",result=\"{what}\"}} {n}",
                st.name
            );
        }
    }
    family(
        s,
        "invalid_rows_total",
        "counter",
        "Rows refused before buffering because a value could not be made valid.",
    );
    for st in &stats {
        for (what, n) in &st.invalid {
            let _ = writeln!(
                s,
                "http_front_clickhouse_invalid_rows_total{{sink=\"{}\",reason=\"{what}\"}} {n}",
                st.name
            );
        }
    }
    family(
        s,
        "requests_total",
        "counter",
        "Inserts by result (failed: retried later; rejected: split to find the bad rows).",
    );
    for st in &stats {
        for (what, n) in [
            ("ok", st.requests),
            ("failed", st.request_failures),
            ("rejected", st.request_rejections),
        ] {
            let _ = writeln!(
                s,
                "http_front_clickhouse_requests_total{{sink=\"{}\",result=\"{what}\"}} {n}",
                st.name
            );
        }
    }
    family(
        s,
        "buffered_rows",
        "gauge",
        "Rows held for ClickHouse now (waiting or being sent).",
    );
    for st in &stats {
        let _ = writeln!(
            s,
            "http_front_clickhouse_buffered_rows{{sink=\"{}\"}} {}",
            st.name, st.buffered_rows
        );
    }
}
