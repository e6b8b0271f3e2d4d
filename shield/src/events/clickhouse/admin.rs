//! Statements an operator runs through the daemons: one query, and the schema applied
//! (`ctl events-init`: database and tables, `IF NOT EXISTS`, columns added to older tables).

use super::config::{ClickHouseConfig, Table};
use super::error::{ClickHouseError, exception_code};

/// Runs one SQL statement (the body of the request) and returns the reply's text.
pub fn query(cfg: &ClickHouseConfig, sql: &str) -> Result<String, ClickHouseError> {
    let ep = cfg.endpoint()?;
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
    // Columns added since a table was made (CREATE … IF NOT EXISTS leaves it as it is).
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
    Ok(out)
}
