//! Event sinks beyond JSON lines: ClickHouse (`[events.clickhouse]`) and `ctl events-init`.

use shield::events::{ClickHouseMonitor, ClickHouseSink, SinkWriter};

use shield::control::Reply;

/// The ClickHouse sink's writer and its monitor, when `[events.clickhouse]` is configured.
pub fn clickhouse(
    events: &shield::events::EventsConfig,
    queue: usize,
) -> Option<(SinkWriter, ClickHouseMonitor)> {
    let c = events.clickhouse.as_ref()?;
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
            tracing::info!(urls = ?c.url_list(), table = %c.table_name(shield::events::clickhouse::Table::Events), "events go to ClickHouse");
            Some((w, monitor))
        }
        Err(e) => {
            tracing::error!("events.clickhouse: writer thread: {e}");
            None
        }
    }
}

/// `ctl events-init [--cluster NAME]`: applies the shipped schema (database and tables, `IF
/// NOT EXISTS`) to the running server's `[events.clickhouse]`; with a cluster, on every
/// endpoint with `Distributed` tables over local ones.
pub async fn events_init(monitor: Option<&ClickHouseMonitor>, cluster: Option<&str>) -> Reply {
    let Some(m) = monitor else {
        return Reply::err("no [events.clickhouse] section in the running config\n");
    };
    let cfg = m.config().clone();
    let cluster = cluster.map(str::to_string);
    match tokio::task::spawn_blocking(move || match cluster {
        Some(c) => shield::events::clickhouse::init_cluster(&cfg, &c),
        None => shield::events::clickhouse::init_schema(&cfg),
    })
    .await
    {
        Ok(Ok(text)) => Reply::ok(text),
        Ok(Err(e)) => Reply::err(format!("{e}\n")),
        Err(e) => Reply::err(format!("events-init: {e}\n")),
    }
}
