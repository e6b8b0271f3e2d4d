//! Statements an operator runs through the daemons: one query, and the schema applied
//! (`ctl events-init`: database and tables, `IF NOT EXISTS`, columns added to older tables).

use super::config::{ClickHouseConfig, Table};
use super::error::{ClickHouseError, exception_code};
use super::http::Endpoint;

/// Runs one SQL statement (the body of the request) on the first endpoint that answers and
/// returns the reply's text.
pub fn query(cfg: &ClickHouseConfig, sql: &str) -> Result<String, ClickHouseError> {
    let mut last = None;
    for (_, ep) in cfg.endpoints()? {
        match query_at(cfg, &ep, sql) {
            Err(ClickHouseError::Io(e)) => last = Some(ClickHouseError::Io(e)),
            r => return r,
        }
    }
    Err(last.unwrap_or_else(|| ClickHouseError::Config("no endpoint".into())))
}

/// Runs one SQL statement on one endpoint.
fn query_at(cfg: &ClickHouseConfig, ep: &Endpoint, sql: &str) -> Result<String, ClickHouseError> {
    let r = ep.post(None, sql.as_bytes(), false, cfg.timeout())?;
    let text = String::from_utf8_lossy(&r.body).into_owned();
    if r.status == 200 {
        Ok(text)
    } else {
        Err(ClickHouseError::Server {
            status: r.status,
            code: exception_code(&r.body).unwrap_or(0),
            message: text.trim().to_string(),
        })
    }
}

/// Applies the schema (database and both tables, `IF NOT EXISTS`), first moving a table of
/// the older layout (a plain `MergeTree` without the row identity) to the current one: it is
/// renamed aside, the new table made, its rows copied in (with the identity `migrated`/row
/// number), and the old one dropped once the counts match. Returns what was done, one line
/// per step.
pub fn init_schema(cfg: &ClickHouseConfig) -> Result<String, ClickHouseError> {
    cfg.validate().map_err(ClickHouseError::Config)?;
    let mut out = String::new();
    let schema = cfg.schema();
    // The database first: the engine check reads system.tables.
    if let Some(db) = schema.iter().find(|s| s.starts_with("CREATE DATABASE")) {
        query(cfg, db)?;
    }
    for (t, name) in [
        (Table::Events, cfg.table.as_str()),
        (Table::Access, cfg.access_table.as_str()),
    ] {
        let engine = query(
            cfg,
            &format!(
                "SELECT engine FROM system.tables WHERE database = '{}' AND name = '{name}' FORMAT TSVRaw",
                cfg.database
            ),
        )?;
        if engine.trim() != "MergeTree" {
            continue;
        }
        let full = cfg.table_name(t);
        let old = format!("{full}_mergetree_{}", crate::clock::unix_ms() / 1000);
        query(cfg, &format!("RENAME TABLE {full} TO {old}"))?;
        let create = schema
            .iter()
            .find(|s| s.contains(&format!("TABLE IF NOT EXISTS {full}")))
            .ok_or_else(|| ClickHouseError::Config(format!("no schema for {full}")))?;
        query(cfg, create)?;
        let cols = query(
            cfg,
            &format!(
                "SELECT name FROM system.columns WHERE database = '{}' AND table = '{}' FORMAT TSVRaw",
                cfg.database,
                old.rsplit('.').next().unwrap_or(&old)
            ),
        )?;
        let cols: Vec<&str> = cols.lines().filter(|c| !c.is_empty()).collect();
        let list = cols.join(", ");
        query(
            cfg,
            &format!(
                "INSERT INTO {full} ({list}, wid, rid) SELECT {list}, 'migrated', rowNumberInAllBlocks() FROM {old}"
            ),
        )?;
        let count = |t: &str| -> Result<u64, ClickHouseError> {
            Ok(
                query(cfg, &format!("SELECT count() FROM {t} FORMAT TSVRaw"))?
                    .trim()
                    .parse()
                    .unwrap_or(u64::MAX),
            )
        };
        let (a, b) = (count(&old)?, count(&full)?);
        if a == b {
            query(cfg, &format!("DROP TABLE {old}"))?;
            out.push_str(&format!(
                "{full}: moved from MergeTree to ReplacingMergeTree with row identity ({a} rows)\n"
            ));
        } else {
            out.push_str(&format!(
                "{full}: moved to ReplacingMergeTree; {b} of {a} rows copied, the old table is kept as {old}\n"
            ));
        }
    }
    for s in schema {
        query(cfg, &s)?;
        let first = s.lines().next().unwrap_or("").trim_end_matches('(').trim();
        out.push_str(first);
        out.push_str(": ok\n");
    }
    add_columns(cfg, &mut out)?;
    Ok(out)
}

/// Adds the columns added to the schema since a table was made (`CREATE … IF NOT EXISTS`
/// leaves it as it is).
fn add_columns(cfg: &ClickHouseConfig, out: &mut String) -> Result<(), ClickHouseError> {
    const ADDED: &[(Table, &str, &str)] =
        &[(Table::Events, "evidence", "String DEFAULT '' AFTER action")];
    for &(t, column, def) in ADDED {
        let name = match t {
            Table::Events => cfg.table.as_str(),
            Table::Access => cfg.access_table.as_str(),
        };
        let has = query(
            cfg,
            &format!(
                "SELECT count() FROM system.columns WHERE database = '{}' AND table = '{name}' AND name = '{column}' FORMAT TSVRaw",
                cfg.database
            ),
        )?;
        if has.trim() == "0" {
            let full = cfg.table_name(t);
            query(
                cfg,
                &format!("ALTER TABLE {full} ADD COLUMN {column} {def}"),
            )?;
            out.push_str(&format!("{full}: column {column} added\n"));
        }
    }
    Ok(())
}

/// The suffix of the local tables under a cluster's `Distributed` ones.
pub const LOCAL_SUFFIX: &str = "_local";

/// `ctl events-init --cluster NAME`: through each endpoint of `urls` in turn (each a shard,
/// or a replica of one), the database, the local `ReplacingMergeTree` tables (`{table}_local`,
/// as [`init_schema`] makes them) and the `Distributed` tables of the configured names over
/// them. The sharding key `cityHash64(wid, rid)` is the row's identity: a retried row lands on
/// the shard that may hold it already, so `FINAL` reads it once across shards. No `ON
/// CLUSTER` (that needs ZooKeeper). The cluster must be in every server's `remote_servers`.
pub fn init_cluster(cfg: &ClickHouseConfig, cluster: &str) -> Result<String, ClickHouseError> {
    cfg.validate().map_err(ClickHouseError::Config)?;
    if !super::config::identifier(cluster) {
        return Err(ClickHouseError::Config(format!(
            "--cluster {cluster:?}: not a plain identifier"
        )));
    }
    let mut out = String::new();
    for url in cfg.url_list() {
        let one = ClickHouseConfig {
            url: url.clone(),
            urls: Vec::new(),
            ca_file: cfg.ca_file.clone().filter(|_| url.starts_with("https://")),
            ..cfg.clone()
        };
        let shards = query(
            &one,
            &format!(
                "SELECT count(DISTINCT shard_num) FROM system.clusters WHERE cluster = '{cluster}' FORMAT TSVRaw"
            ),
        )?;
        let shards: u64 = shards.trim().parse().unwrap_or(0);
        if shards == 0 {
            return Err(ClickHouseError::Config(format!(
                "{url}: no cluster {cluster:?} in its remote_servers"
            )));
        }
        out.push_str(&format!("{url}: cluster {cluster} of {shards} shards\n"));
        let local = ClickHouseConfig {
            table: format!("{}{LOCAL_SUFFIX}", cfg.table),
            access_table: format!("{}{LOCAL_SUFFIX}", cfg.access_table),
            ..one.clone()
        };
        for line in init_schema(&local)?.lines() {
            out.push_str(&format!("{url}: {line}\n"));
        }
        for (t, name) in [
            (Table::Events, cfg.table.as_str()),
            (Table::Access, cfg.access_table.as_str()),
        ] {
            let engine = query(
                &one,
                &format!(
                    "SELECT engine FROM system.tables WHERE database = '{}' AND name = '{name}' FORMAT TSVRaw",
                    cfg.database
                ),
            )?;
            let engine = engine.trim();
            let full = cfg.table_name(t);
            if !engine.is_empty() && engine != "Distributed" {
                return Err(ClickHouseError::Config(format!(
                    "{url}: {full} exists as a {engine} table: rename it (its rows can be copied into {full}{LOCAL_SUFFIX}) before making the cluster's tables"
                )));
            }
            query(
                &one,
                &format!(
                    "CREATE TABLE IF NOT EXISTS {full} AS {full}{LOCAL_SUFFIX} ENGINE = Distributed({cluster}, {}, {name}{LOCAL_SUFFIX}, cityHash64(wid, rid))",
                    cfg.database
                ),
            )?;
            out.push_str(&format!(
                "{url}: {full}: Distributed over {full}{LOCAL_SUFFIX}: ok\n"
            ));
        }
        // The Distributed tables follow columns added to the local ones.
        let mut added = String::new();
        add_columns(&one, &mut added)?;
        for line in added.lines() {
            out.push_str(&format!("{url}: {line}\n"));
        }
    }
    Ok(out)
}
