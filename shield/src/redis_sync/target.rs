//! Where the sync connects: the one server of `url`, or the master that Redis Sentinel names
//! for `master_name`, asked of `sentinels` in turn (the last one that answered first).
//!
//! A sentinel is reached with the scheme, ACL user, password and TLS settings of `url`; the
//! master it names with all of `url` but its host and port. Whatever the mode, the server
//! reached must say it is a master (`ROLE`, when the ACL user may ask): a sentinel whose view
//! is stale, or a URL naming a replica, is a connect error and retried. The server's identity
//! (`run_id` of `INFO server`, else the master's address) tells the tasks a failover happened.

use super::SyncConfig;
use super::capped::{Limits, Server};
use redis::Value;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

/// The sync's way to a master.
pub(super) enum Target {
    /// One server: `url`.
    Url(Server),
    /// The master Sentinel names.
    Sentinel(Sentinels),
}

/// The sentinels of `[redis] sentinels`, and the master's name.
pub(super) struct Sentinels {
    /// One server per sentinel, in config order.
    clients: Vec<(String, Server)>,
    master_name: String,
    /// The TLS client config of `rediss://`, for the master too.
    tls: Option<Arc<rustls::ClientConfig>>,
    /// The sentinel asked first next time (the last that answered).
    next: AtomicUsize,
}

/// A server reached: how to connect to it and what names it.
pub(super) struct Reached {
    pub(super) server: Server,
    /// `host:port` of a master Sentinel named; None for `url`.
    pub(super) addr: Option<String>,
}

fn err(what: &str, detail: String) -> redis::RedisError {
    redis::RedisError::from((
        redis::ErrorKind::Io,
        "redis sentinel",
        format!("{what}: {detail}"),
    ))
}

impl Target {
    /// The target `cfg` describes (validated already).
    pub(super) fn new(cfg: &SyncConfig) -> Result<Target, super::SyncError> {
        if cfg.sentinels.is_empty() {
            return Ok(Target::Url(cfg.server()?));
        }
        let tls = cfg.tls_config()?;
        let clients = cfg
            .sentinels
            .iter()
            .map(|s| {
                let url = cfg.url_at(s, false)?;
                Ok((s.clone(), cfg.server_for(&url, tls.clone())?))
            })
            .collect::<Result<Vec<_>, super::SyncError>>()?;
        Ok(Target::Sentinel(Sentinels {
            clients,
            master_name: cfg.master_name.clone(),
            tls,
            next: AtomicUsize::new(0),
        }))
    }

    /// The server to connect to now: `url`'s, or the master the first sentinel that answers
    /// names (each asked within `io`, its replies bounded by `limits`). `errors` counts
    /// sentinels that failed to answer.
    pub(super) async fn reach(
        &self,
        cfg: &SyncConfig,
        io: Duration,
        errors: &std::sync::atomic::AtomicU64,
        limits: &Limits,
    ) -> redis::RedisResult<Reached> {
        let s = match self {
            Target::Url(c) => {
                return Ok(Reached {
                    server: c.clone(),
                    addr: None,
                });
            }
            Target::Sentinel(s) => s,
        };
        let n = s.clients.len();
        let first = s.next.load(Ordering::Relaxed) % n;
        let mut last = err("no sentinel", "none configured".into());
        for k in 0..n {
            let i = (first + k) % n;
            let (name, client) = &s.clients[i];
            match ask(client, &s.master_name, io, limits).await {
                Ok(Some((host, port))) => {
                    s.next.store(i, Ordering::Relaxed);
                    let addr = if host.contains(':') {
                        format!("[{host}]:{port}")
                    } else {
                        format!("{host}:{port}")
                    };
                    let url = cfg
                        .url_at(&addr, true)
                        .map_err(|e| err(&addr, e.to_string()))?;
                    let server = cfg
                        .server_for(&url, s.tls.clone())
                        .map_err(|e| err(&addr, e.to_string()))?;
                    return Ok(Reached {
                        server,
                        addr: Some(addr),
                    });
                }
                Ok(None) => {
                    errors.fetch_add(1, Ordering::Relaxed);
                    last = err(name, format!("knows no master named {:?}", s.master_name));
                }
                Err(e) => {
                    errors.fetch_add(1, Ordering::Relaxed);
                    tracing::debug!(sentinel = %name, error = %e, "redis sentinel did not answer");
                    last = err(name, e.to_string());
                }
            }
        }
        Err(last)
    }
}

/// `SENTINEL GET-MASTER-ADDR-BY-NAME` of one sentinel: the master's host and port. Its
/// replicas are never asked for: any client of the master can pose as one (`REPLCONF
/// ip-address`, `PSYNC`), and Sentinel lists it — learned as never-block, a forged replica
/// lifted the fleet's block of its own address.
async fn ask(
    server: &Server,
    master: &str,
    io: Duration,
    limits: &Limits,
) -> redis::RedisResult<Option<(String, u16)>> {
    let conf = redis::AsyncConnectionConfig::new().set_response_timeout(Some(io));
    let (mut conn, _driver) = server.open(conf, io, limits).await?;
    let v: Option<(String, String)> = redis::cmd("SENTINEL")
        .arg("GET-MASTER-ADDR-BY-NAME")
        .arg(master)
        .query_async(&mut conn)
        .await?;
    Ok(v.and_then(|(h, p)| Some((h, p.parse().ok()?))))
}

/// Checks that the server is a master and returns its identity: `run_id`, else `addr`.
/// A server that refuses `ROLE` or `INFO` (an ACL user without them) passes unchecked.
pub(super) async fn identify(
    conn: &mut redis::aio::MultiplexedConnection,
    addr: Option<&str>,
) -> redis::RedisResult<Option<String>> {
    let mut pipe = redis::pipe();
    pipe.ignore_errors();
    pipe.cmd("ROLE");
    pipe.cmd("INFO").arg("server");
    let reply: Vec<Value> = pipe.query_async(conn).await?;
    if let Some(role) = reply.first().and_then(role_of)
        && role != "master"
    {
        return Err(err(
            addr.unwrap_or("url"),
            format!("the server is a {role}, not a master"),
        ));
    }
    let run_id = reply.get(1).and_then(run_id_of);
    Ok(run_id.or_else(|| addr.map(str::to_string)))
}

/// The role `ROLE` replied (its first element).
pub(super) fn role_of(v: &Value) -> Option<String> {
    match v {
        Value::Array(items) => items
            .first()
            .and_then(super::wire::bytes)
            .map(|b| String::from_utf8_lossy(b).into_owned()),
        _ => None,
    }
}

/// The `run_id:` line of an `INFO server` reply.
fn run_id_of(v: &Value) -> Option<String> {
    let text = match v {
        Value::VerbatimString { text, .. } => text.as_bytes(),
        v => super::wire::bytes(v)?,
    };
    std::str::from_utf8(text)
        .ok()?
        .lines()
        .find_map(|l| l.strip_prefix("run_id:"))
        .map(|id| id.trim().to_string())
        .filter(|id| !id.is_empty())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bulk(s: &str) -> Value {
        Value::BulkString(s.as_bytes().to_vec())
    }

    #[test]
    fn roles_and_run_ids_are_read() {
        let master = Value::Array(vec![bulk("master"), Value::Int(0), Value::Array(vec![])]);
        assert_eq!(role_of(&master).as_deref(), Some("master"));
        let replica = Value::Array(vec![bulk("slave"), bulk("127.0.0.1"), Value::Int(6379)]);
        assert_eq!(role_of(&replica).as_deref(), Some("slave"));
        assert_eq!(role_of(&Value::Nil), None);
        let info = bulk("# Server\r\nredis_version:7.0.15\r\nrun_id:abc123\r\ntcp_port:6379\r\n");
        assert_eq!(run_id_of(&info).as_deref(), Some("abc123"));
        assert_eq!(run_id_of(&bulk("# Server\r\n")), None);
    }

    #[test]
    fn sentinel_settings_are_checked_and_keep_the_url_credentials() {
        let mut cfg = SyncConfig {
            url: "redis://palisade:secret@ignored:6379/3".into(),
            insecure_unsigned: true,
            node_id: "n".into(),
            sentinels: vec!["127.0.0.1:26379".into(), "[::1]:26380".into()],
            master_name: "pal".into(),
            ..SyncConfig::default()
        };
        cfg.validate().unwrap();
        assert_eq!(
            cfg.url_at("127.0.0.1:26379", false).unwrap(),
            "redis://palisade:secret@127.0.0.1:26379"
        );
        assert_eq!(
            cfg.url_at("[::1]:6380", true).unwrap(),
            "redis://palisade:secret@[::1]:6380/3"
        );
        let bad = |c: &SyncConfig| c.validate().unwrap_err().to_string();
        let mut c = cfg.clone();
        c.master_name.clear();
        assert!(bad(&c).contains("sentinels and master_name"), "{}", bad(&c));
        c = cfg.clone();
        c.sentinels = vec!["nohost".into()];
        assert!(
            bad(&c).contains("\"nohost\" is not host:port"),
            "{}",
            bad(&c)
        );
        c = cfg.clone();
        c.url = "redis+unix:///run/redis.sock".into();
        assert!(bad(&c).contains("with sentinels"), "{}", bad(&c));
        cfg.sentinels.clear();
        assert!(bad(&cfg).contains("sentinels and master_name"));
    }
}
