//! `[events.clickhouse]`: the 403/429 aggregates and (with `[access_log] clickhouse = true`) the sampled access records into ClickHouse through shield's writer, and its counters for /metrics.
//!
//! Both go alongside the `output`s configured, never instead of them. Rows are normalised in
//! shield before they are buffered; the buffer is bounded and never makes the request path
//! or the access-log writer wait (see `shield::events::clickhouse`).

use std::io;

use shield::events::clickhouse::{AccessRow, ClickHouseWriter, Rows, Table};
use shield::events::{ClickHouseMonitor, ClickHouseSink, SinkError, SinkWriter};

use crate::access_log::{AccessRecord, RecordSink};

/// A boxed access-record sink.
type BoxSink = Box<dyn RecordSink<AccessRecord>>;
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
    let w = SinkWriter::spawn(Box::new(sink), cfg.events.queue_batches)?;
    Ok(Some((w, m)))
}

/// The access-log sink to use, and the ClickHouse writer's monitor when it is part of it.
pub type AccessSink = (Option<BoxSink>, Option<ClickHouseMonitor>);

/// The access-log sink with ClickHouse's access table added when `[access_log] clickhouse` is on.
pub fn access_sink(cfg: &Config, base: Option<BoxSink>) -> io::Result<AccessSink> {
    if !cfg.access_log.clickhouse {
        return Ok((base, None));
    }
    let c = cfg.events.clickhouse.as_ref().ok_or_else(|| {
        err("[access_log] clickhouse = true needs an [events.clickhouse] section")
    })?;
    let writer = ClickHouseWriter::spawn(c, Table::Access).map_err(err)?;
    let m = writer.monitor();
    let ch: BoxSink = Box::new(AccessRecords {
        writer,
        rows: Rows::for_writer(shield::events::clickhouse::writer_id(
            cfg.events.node.as_deref().unwrap_or(""),
            "http-front",
        )),
        node: cfg.events.node.clone().unwrap_or_default(),
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

impl RecordSink<AccessRecord> for AccessRecords {
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
pub struct Both(pub BoxSink, pub BoxSink);

impl RecordSink<AccessRecord> for Both {
    fn name(&self) -> &str {
        self.0.name()
    }

    fn write(&mut self, records: &[AccessRecord]) -> Result<(), SinkError> {
        let a = self.0.write(records);
        let b = self.1.write(records);
        a.and(b)
    }
}
