//! `[events.clickhouse]`: where rows go (endpoint, database, tables, credentials) and the
//! writer's bounds, checked when the config loads.

use super::SCHEMA_SQL;
use super::error::ClickHouseError;
use super::http::Endpoint;
use serde::{Deserialize, Serialize};
use std::time::Duration;

/// Most bytes in one insert before compression (a batch is cut there even below `batch_rows`).
pub(super) const MAX_BATCH_BYTES: usize = 16 << 20;
/// Most rows per insert (ClickHouse inserts bigger bodies in several blocks, not atomically).
pub(super) const MAX_BATCH_ROWS: usize = 100_000;
/// `[events.clickhouse]`: where and how rows go to ClickHouse.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ClickHouseConfig {
    /// ClickHouse's HTTP interface (`http://host:port`, or `https://` verified against
    /// `ca_file` or the system's roots); default `http://127.0.0.1:8123`. One endpoint: the
    /// spelling of `urls` with one entry (setting both is an error).
    pub url: String,
    /// Several endpoints (the servers of a cluster), tried in turn: an endpoint that fails is
    /// set aside for `set_aside_ms` and the next one takes the inserts.
    pub urls: Vec<String>,
    /// CA certificates (PEM) of the servers' certificates (`https://`); the system's roots
    /// when unset.
    pub ca_file: Option<std::path::PathBuf>,
    /// How long an endpoint that failed is passed over, milliseconds (when others remain).
    pub set_aside_ms: u64,
    /// Database of the tables.
    pub database: String,
    /// Table of aggregated events.
    pub table: String,
    /// Table of sampled access records (the HTTP front).
    pub access_table: String,
    /// Rows per insert at most (a batch goes when this many wait).
    pub batch_rows: usize,
    /// Longest a row waits for its batch to fill, in milliseconds.
    pub flush_ms: u64,
    /// Rows held at most (waiting and being sent); beyond, rows are counted as overflow.
    pub max_buffered_rows: usize,
    /// Bytes held at most (encoded rows).
    pub max_buffered_bytes: usize,
    /// Limit on each connect, write and read, and on draining at shutdown, in milliseconds.
    pub timeout_ms: u64,
    /// Longest wait between retries of a failed batch, in milliseconds.
    pub max_backoff_ms: u64,
    /// Gzip request bodies.
    pub gzip: bool,
    /// Apply the schema (CREATE … IF NOT EXISTS) before the first insert.
    pub init: bool,
    /// User (HTTP basic auth), when not the default one.
    pub user: Option<String>,
    /// Password (HTTP basic auth).
    pub password: Option<String>,
}

impl Default for ClickHouseConfig {
    fn default() -> Self {
        ClickHouseConfig {
            url: String::new(),
            urls: Vec::new(),
            ca_file: None,
            set_aside_ms: 30_000,
            database: "palisade".into(),
            table: "events".into(),
            access_table: "access".into(),
            batch_rows: 10_000,
            flush_ms: 1_000,
            max_buffered_rows: 100_000,
            max_buffered_bytes: 64 << 20,
            timeout_ms: 10_000,
            max_backoff_ms: 5_000,
            gzip: true,
            init: false,
            user: None,
            password: None,
        }
    }
}

/// A plain SQL identifier (letters, digits, `_`; not starting with a digit).
pub(super) fn identifier(s: &str) -> bool {
    let mut c = s.bytes();
    matches!(c.next(), Some(b'a'..=b'z' | b'A'..=b'Z' | b'_'))
        && c.all(|b| b.is_ascii_alphanumeric() || b == b'_')
}

impl ClickHouseConfig {
    /// Adds the servers of `url` and `urls` to a never-block set: a sink cut off by an
    /// escalation (with XDP, its replies dropped) would lose every node's events.
    pub fn add_never_block(&self, nb: &mut crate::never_block::NeverBlock) {
        for u in std::iter::once(&self.url).chain(&self.urls) {
            for ip in crate::never_block::url_addresses(u) {
                nb.push(ip.into(), "clickhouse server");
            }
        }
    }

    /// Checks names, URL and bounds; the message names the key.
    pub fn validate(&self) -> Result<(), String> {
        if !self.url.is_empty() && !self.urls.is_empty() {
            return Err("url and urls: set one (url is the one-endpoint spelling of urls)".into());
        }
        for (i, u) in self.url_list().iter().enumerate() {
            let key = if self.urls.is_empty() {
                "url".to_string()
            } else {
                format!("urls[{i}]")
            };
            Endpoint::parse(
                u,
                self.user.as_deref(),
                self.password.as_deref(),
                self.ca_file.as_deref(),
            )
            .map_err(|e| format!("{key}: {e}"))?;
        }
        if self.ca_file.is_some() && !self.url_list().iter().any(|u| u.starts_with("https://")) {
            return Err("ca_file: needs an https:// url".into());
        }
        if self.set_aside_ms == 0 {
            return Err("set_aside_ms: must be at least 1".into());
        }
        for (k, v) in [
            ("database", &self.database),
            ("table", &self.table),
            ("access_table", &self.access_table),
        ] {
            if !identifier(v) {
                return Err(format!("{k}: {v:?} is not a plain identifier"));
            }
        }
        if self.batch_rows == 0 || self.batch_rows > MAX_BATCH_ROWS {
            return Err(format!("batch_rows: must be 1..={MAX_BATCH_ROWS}"));
        }
        if self.max_buffered_rows < self.batch_rows {
            return Err("max_buffered_rows: must be at least batch_rows".into());
        }
        if self.max_buffered_bytes < 64 * 1024 {
            return Err("max_buffered_bytes: must be at least 65536".into());
        }
        if self.flush_ms == 0 || self.timeout_ms == 0 || self.max_backoff_ms == 0 {
            return Err("flush_ms, timeout_ms and max_backoff_ms must be at least 1".into());
        }
        Ok(())
    }

    /// `database.table` of `t`.
    pub fn table_name(&self, t: Table) -> String {
        match t {
            Table::Events => format!("{}.{}", self.database, self.table),
            Table::Access => format!("{}.{}", self.database, self.access_table),
        }
    }

    /// The schema's statements with the configured names.
    pub fn schema(&self) -> Vec<String> {
        let sql: String = SCHEMA_SQL
            .lines()
            .map(|l| l.split("--").next().unwrap_or(""))
            .collect::<Vec<_>>()
            .join("\n");
        sql.split(';')
            .map(str::trim)
            .filter(|s| !s.is_empty())
            .map(|s| {
                s.replace("palisade.events", &self.table_name(Table::Events))
                    .replace("palisade.access", &self.table_name(Table::Access))
                    .replace(
                        "DATABASE IF NOT EXISTS palisade",
                        &format!("DATABASE IF NOT EXISTS {}", self.database),
                    )
            })
            .collect()
    }

    /// The endpoints' URLs, in the order they are tried.
    pub fn url_list(&self) -> Vec<String> {
        if !self.urls.is_empty() {
            self.urls.clone()
        } else if !self.url.is_empty() {
            vec![self.url.clone()]
        } else {
            vec!["http://127.0.0.1:8123".into()]
        }
    }

    /// The endpoints, in the order they are tried.
    pub(super) fn endpoints(&self) -> Result<Vec<(String, Endpoint)>, ClickHouseError> {
        self.url_list()
            .into_iter()
            .map(|u| {
                Endpoint::parse(
                    &u,
                    self.user.as_deref(),
                    self.password.as_deref(),
                    self.ca_file.as_deref(),
                )
                .map(|e| (u, e))
                .map_err(ClickHouseError::Config)
            })
            .collect()
    }

    pub(super) fn timeout(&self) -> Duration {
        Duration::from_millis(self.timeout_ms.max(1))
    }
}

/// This host's name (part of a writer's identity, for reading; its random part makes it
/// unique).
pub(super) fn host_name() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|s| s.trim().to_string())
        .unwrap_or_default()
}

/// Which table a writer feeds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Table {
    /// Aggregated events (`table`).
    Events,
    /// Sampled access records (`access_table`).
    Access,
}
