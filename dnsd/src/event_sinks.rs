//! Event sinks beyond JSON lines: ClickHouse (`[events.clickhouse]`), the sinks' counters for `ctl stats` and /metrics, and `ctl events-init`.

use std::sync::Arc;

use shield::events::{ClickHouseMonitor, ClickHouseSink, SinkWriter};

use crate::config::Config;
use crate::ctl::Reply;
use crate::defence::Counter;
use crate::server::Shared;

/// The ClickHouse sink's writer and its monitor, when `[events.clickhouse]` is configured.
pub fn clickhouse(cfg: &Config, queue: usize) -> Option<(SinkWriter, ClickHouseMonitor)> {
    let c = cfg.events.clickhouse.as_ref()?;
    let sink = match ClickHouseSink::new(c, "dnsd") {
        Ok(s) => s,
        Err(e) => {
            tracing::error!("events.clickhouse: {e}");
            return None;
        }
    };
    let monitor = sink.monitor();
    match SinkWriter::spawn(Box::new(sink), queue) {
        Ok(w) => {
            tracing::info!(url = %c.url, table = %c.table_name(shield::events::clickhouse::Table::Events), "events go to ClickHouse");
            Some((w, monitor))
        }
        Err(e) => {
            tracing::error!("events.clickhouse: writer thread: {e}");
            None
        }
    }
}

/// `ctl events-init`: applies the shipped schema (database and tables, `IF NOT EXISTS`).
pub async fn events_init(shared: &Arc<Shared>) -> Reply {
    let Some(m) = &shared.clickhouse else {
        return Reply::err("no [events.clickhouse] section in the running config\n");
    };
    let cfg = m.config().clone();
    match tokio::task::spawn_blocking(move || shield::events::clickhouse::init_schema(&cfg)).await {
        Ok(Ok(text)) => Reply::ok(text),
        Ok(Err(e)) => Reply::err(format!("{e}\n")),
        Err(e) => Reply::err(format!("events-init: {e}\n")),
    }
}

/// A Prometheus label value with `\`, `"` and newlines escaped.
fn label(v: &str) -> String {
    v.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

/// Counters of every event sink: each sink writer's queue, and the ClickHouse writer's rows,
/// requests and buffer. Series of one metric are adjacent, as /metrics needs.
pub fn counters(shared: &Shared) -> Vec<Counter> {
    let mut v = Vec::new();
    let mut c = |ctl: String, metric: &'static str, labels: String, help, gauge, value| {
        v.push(Counter {
            ctl,
            metric,
            labels,
            help,
            gauge,
            value,
        })
    };
    let sinks = shared
        .flusher
        .lock()
        .map(|f| f.as_ref().map(|f| f.sink_stats()).unwrap_or_default())
        .unwrap_or_default();
    let help = "Events handed to each sink's writer thread, by result (dropped: queue full or write failed).";
    for s in &sinks {
        for (what, n) in [("written", s.written), ("dropped", s.dropped)] {
            c(
                format!("events.sink.{}.{what}", s.name),
                "dnsd_events_sink_events_total",
                format!("sink=\"{}\",result=\"{what}\"", label(&s.name)),
                help,
                false,
                n,
            );
        }
    }
    for s in &sinks {
        c(
            format!("events.sink.{}.queue_full", s.name),
            "dnsd_events_sink_queue_full_total",
            format!("sink=\"{}\"", label(&s.name)),
            "Flushes a sink's queue had no room for.",
            false,
            s.queue_full,
        );
    }
    let Some(m) = &shared.clickhouse else {
        return v;
    };
    let s = m.stats();
    let p = "events.clickhouse";
    let help = "Rows for ClickHouse: accepted into the buffer, landed, or lost (overflow: buffer full; rejected: refused by the server; shutdown: left at stop).";
    for (what, n) in [
        ("accepted", s.accepted),
        ("landed", s.landed),
        ("overflow", s.overflow),
        ("rejected", s.rejected),
        ("shutdown_dropped", s.shutdown_dropped),
    ] {
        c(
            format!("{p}.{what}"),
            "dnsd_events_clickhouse_rows_total",
            format!("result=\"{what}\""),
            help,
            false,
            n,
        );
    }
    for (what, n) in &s.invalid {
        c(
            format!("{p}.invalid.{what}"),
            "dnsd_events_clickhouse_invalid_rows_total",
            format!("reason=\"{what}\""),
            "Rows refused before buffering because a value could not be made valid.",
            false,
            *n,
        );
    }
    for (what, n) in &s.fixed {
        c(
            format!("{p}.fixed.{what}"),
            "dnsd_events_clickhouse_fixed_values_total",
            format!("kind=\"{what}\""),
            "Values normalised in rows that were kept.",
            false,
            *n,
        );
    }
    for (code, n) in &s.rejected_by_code {
        c(
            format!("{p}.rejected.code.{code}"),
            "dnsd_events_clickhouse_rejected_rows_by_code_total",
            format!("code=\"{code}\""),
            "Rows the server rejected, by ClickHouse error code (0: other codes).",
            false,
            *n,
        );
    }
    for (what, n) in [
        ("ok", s.requests),
        ("failed", s.request_failures),
        ("rejected", s.request_rejections),
    ] {
        c(
            format!("{p}.requests.{what}"),
            "dnsd_events_clickhouse_requests_total",
            format!("result=\"{what}\""),
            "Inserts by result (failed: retried later; rejected: split to find the bad rows).",
            false,
            n,
        );
    }
    c(
        format!("{p}.buffered_rows"),
        "dnsd_events_clickhouse_buffered_rows",
        String::new(),
        "Rows held for ClickHouse now (waiting or being sent).",
        true,
        s.buffered_rows,
    );
    c(
        format!("{p}.buffered_bytes"),
        "dnsd_events_clickhouse_buffered_bytes",
        String::new(),
        "Bytes held for ClickHouse now.",
        true,
        s.buffered_bytes,
    );
    c(
        format!("{p}.sent_bytes"),
        "dnsd_events_clickhouse_sent_bytes_total",
        String::new(),
        "Bytes of successful inserts (compressed).",
        false,
        s.bytes_sent,
    );
    v
}
