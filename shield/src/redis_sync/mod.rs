//! Block-map sync across nodes through Redis: every local decision is written to Redis and every
//! node applies every other node's decisions, losing none to a reconnect.
//!
//! # Shape
//!
//! ```text
//! RedisSync::spawn(cfg, map) -> SyncHandle      its tasks on a thread and runtime of their own
//!   collector: map.subscribe("redis") -> Outbox   local proven decisions only (Local/Operator
//!                                                 upserts, operator removals); Peer changes
//!                                                 never echo, suspects never travel
//!   writer:    Outbox -> MULTI/EXEC batches       signed records: SET key PX, ZADD, XADD MAXLEN ~
//!   reader:    XREAD BLOCK from its own last id   -> verified, judged records ->
//!                                                 map.insert_batch(Peer) / remove_from_peer
//! SyncHandle::stats() -> SyncStats                counters for /metrics (also SyncHandle::monitor())
//! SyncHandle::shutdown().await                    final flush, then stop
//! ```
//!
//! # Redis layout (prefix `palisade:` by default)
//!
//! | key | type | content |
//! |---|---|---|
//! | `{prefix}block:{net}` | string, `PX` = time left | the record of the latest decision on `net` |
//! | `{prefix}blocks` | sorted set | member `net`, score = expiry in Redis server time (ms): the snapshot index |
//! | `{prefix}log` | stream, `MAXLEN ~ stream_maxlen` | field `d` = one JSON record, or a JSON array of up to 128 (one batch) |
//! | `{prefix}epoch` | string, no TTL | random value set once per Redis data life |
//! | `{prefix}marks` | hash | field = node id, value = that node's latest record: how far it has written (see Reading) |
//! | `{prefix}node:{id}` | sorted set, TTL | member = one process's token, score = its last heartbeat (Redis time, ms) |
//!
//! # Node ids
//!
//! A node id names one process (each process drops its own id's records from the stream as
//! its own): by default `{host}-{daemon}`, or `{host}-{daemon}-{instance}` with `[redis]
//! instance` (several of one daemon on a host; network namespaces share the host name). Every
//! process beats in `{prefix}node:{id}` each `presence_ms`; a second live process on the same
//! id — a token whose heartbeat advances — is reported at error level by both, every ten
//! seconds while it lasts, and counted (`node_id_conflicts`). A predecessor that crashed does
//! not count: its heartbeat stands still and ages out.
//!
//! A record (version 2, [`record`]) is `{"v":2,"op":"add"|"del","net":"192.0.2.1/32","node":"a",
//! "start":<ms>,"seq":<n>,"exp":<ms>,"origin":"local","evidence":"tcp","scope":"all",
//! "reason":"...","tag":"<hmac>"}`, signed with the key derived from `key_file`; a node obeys
//! only what verifies and passes its own bounds (see [`record`] for every check). A batch of
//! decisions is one MULTI/EXEC (keys, sorted set, then stream), so a reader that captures the
//! stream position before reading the snapshot misses nothing: every decision is either in the
//! snapshot or after that position.
//!
//! # Trust
//!
//! Redis is a transport, not an authority. Without `key_file` the sync refuses to start unless
//! `insecure_unsigned = true` (warned at start). The transport may be TLS (`rediss://`, with
//! `ca_file` and optionally `client_cert`/`client_key`) and authenticated as an ACL user
//! (`redis://user:password@host`).
//!
//! # Reading: tail, gap, resync
//!
//! Each node reads the stream with plain `XREAD BLOCK` from its own last-seen id (no consumer
//! groups: every node must see every entry), pipelined with `XINFO STREAM` and `GET epoch`.
//! When its position has been trimmed away (the oldest entry held is newer than it), it loads the snapshot (ZSCAN of the sorted set, MGET of the keys) after capturing the
//! stream's last id, adds it to its Peer entries (records it has seen pass over: their
//! effect, or a later record's, is what it holds) and tails from the captured id. A Peer
//! entry the snapshot lacks is kept until it expires or a signed removal lifts it: whoever can
//! write to Redis can delete its keys, which must lift nothing; a record counts only under its
//! own prefix's key. The snapshot reads each node's mark first ([`record::Mark`], signed,
//! written in the transaction of each of its batches, at connect and every
//! [`record::MARK_REFRESH_MS`]): a record of a node at or before its mark, replayed into the
//! stream later, is refused by a reader that never saw that node write (one just started);
//! and a snapshot record is taken only where its node's fresh mark vouches for it — of that
//! process, with no lift of it since (a lifted block's record planted back is genuine and
//! signed). A stream record of a process the reader has not trusted yet is taken where that
//! node's mark, read again, vouches for it. On first start the snapshot also restores this
//! node's own earlier decisions (with their own origin), where its previous process's mark
//! vouches for them. A changed epoch means Redis lost its data (restart without
//! persistence, flush, failover to an empty replica): every node keeps its Peer entries, reads
//! the new stream from its start (everything written since the loss, removals included) and
//! republishes all its local entries.
//!
//! # Sentinel and failover
//!
//! With `sentinels` and `master_name` each connection asks the sentinels in turn for the
//! master (the `target` module) and checks that the server is one. Replication is asynchronous:
//! writes the old master acknowledged may be missing on the new one. So a task that
//! reconnects to another server than before (its `run_id`, or the master's address) acts as
//! after a data loss, without a new epoch: the writer republishes this node's live local
//! entries, and the reader reads the new master's snapshot again, merging it into its Peer
//! entries (removing none: the missing ones return as their nodes republish), then tails from
//! the position captured before it. A removal lost in the failover is not replayed: the
//! entry it lifted lives until its expiry on the nodes that had not yet read it.
//!
//! # Time
//!
//! Expiries in Redis are in Redis server time. Each node measures `offset = redis TIME - local
//! clock` (midpoint of the round trip) on every connect and every `time_sync_ms`, writes
//! `local expiry + offset` and reads `redis expiry - offset`: a node whose clock is skewed
//! still keeps a block exactly as long as its decider meant, on its own clock.
//!
//! # Redis down or slow
//!
//! Nothing here is on the query path: the map's readers never wait on this module. Local
//! decisions wait in a bounded outbox (`buffer_max`) and are flushed on reconnect; a failed
//! batch is retried. Overflow drops the queued upserts (counted) and queues a full republish of
//! the local entries, which reaches Redis after reconnect; queued removals are kept.
//!
//! Operator removals lift the entry on every node, unless it is that node's own operator
//! entry; a peer's entries are lifted by that peer's removals only. Removals for other causes
//! (expiry, eviction, local lifts) are not published: each node expires by TTL. Records carry at
//! most `max_block_secs` of life; longer local blocks are republished before they run out.
//! For Redis Cluster, give the prefix a hash tag (`{palisade}:`) so all keys share one slot.
//! Use a `noeviction` (or `volatile-lru`) maxmemory policy: an evicted epoch key reads as data loss.

mod capped;
mod outbox;
mod presence;
mod reader;
pub mod record;
mod target;
mod wire;
mod writer;

pub use record::Refused;

use crate::block::{BlockMap, Change, Delivery, NODE_MAX, Origin, RemoveCause, Subscription};
use outbox::{Item, Outbox};
use serde::{Deserialize, Serialize};
use std::fmt;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};
use tokio::sync::{Notify, watch};
use tokio::task::JoinHandle;

/// The epoch of a Redis whose epoch key cannot be read (an ACL without GET on it; a key of
/// another type is replaced): changes of data go unnoticed until it is repaired.
const UNREADABLE_EPOCH: &str = "unreadable";

/// A connection that lasted this long was healthy: the reconnect backoff starts over after it.
const HEALTHY_SESSION: Duration = Duration::from_secs(10);

/// A node's wall clock in unix milliseconds (the clock its daemons pass to the block map).
pub type Clock = Arc<dyn Fn() -> u64 + Send + Sync>;

/// Redis sync configuration (`[redis]` in the daemons' configs).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct SyncConfig {
    /// Redis URL (`redis://[user:pass@]host:port[/db]`, `rediss://` for TLS). With
    /// `sentinels`, its host and port are unused: the rest applies to the master and (but
    /// the database) to the sentinels.
    pub url: String,
    /// Redis Sentinel addresses (`host:port`): the sync connects to the master they name
    /// for `master_name` and follows its failovers. Empty: `url` names the server.
    pub sentinels: Vec<String>,
    /// The master's name in the sentinels' config (`sentinel monitor NAME ...`).
    pub master_name: String,
    /// The fleet key file (32+ random bytes, mode 0600) that signs and verifies records.
    pub key_file: Option<PathBuf>,
    /// The fleet key being replaced, during a rolling rotation: records it signed are still
    /// taken (this node signs with `key_file`). Without it, each half of a fleet refused the
    /// other's records until every node had the new key.
    pub previous_key_file: Option<PathBuf>,
    /// Run without `key_file`: records unsigned and unchecked (anyone who can write to Redis
    /// commands every node's block map). Warned at start.
    pub insecure_unsigned: bool,
    /// Longest a record may block, in seconds from now (records further ahead are refused;
    /// this node's longer blocks are republished before they run out).
    pub max_block_secs: u64,
    /// After a restart, take this node's own earlier decisions back from Redis (set by the
    /// daemon: not when `[block] state_file` keeps them, since a record of a lifted block
    /// planted back in Redis would otherwise come back as this node's own, signed anew).
    #[serde(skip)]
    pub restore_own: bool,
    /// CA certificates (PEM) that sign the Redis server's certificate (`rediss://`); the
    /// system's roots when unset.
    pub ca_file: Option<PathBuf>,
    /// Client certificate (PEM) for servers that ask for one (`rediss://`).
    pub client_cert: Option<PathBuf>,
    /// Its key (PEM).
    pub client_key: Option<PathBuf>,
    /// Prefix of every key (see the module doc for the layout).
    pub prefix: String,
    /// This process's id: unique per process, stable across restarts, no whitespace, at most
    /// 64 bytes (default: `{host}-{daemon}`, with `-{instance}` when `instance` is set).
    pub node_id: String,
    /// Told apart several processes of one daemon on one host: appended to the default node id.
    pub instance: String,
    /// How often this process beats in `{prefix}node:{id}`, milliseconds (its heartbeat ages
    /// out after five times this).
    pub presence_ms: u64,
    /// Most local decisions held while Redis is unreachable; overflow forces a full republish.
    pub buffer_max: usize,
    /// Most decisions per MULTI/EXEC write.
    pub batch_max: usize,
    /// Approximate length cap of the change stream in entries (`XADD MAXLEN ~`; an entry holds up to 128 decisions).
    pub stream_maxlen: u64,
    /// Most stream entries per `XREAD` (each up to 128 decisions).
    pub read_count: usize,
    /// How long one `XREAD BLOCK` waits, milliseconds.
    pub block_ms: u64,
    /// Connect and reply timeout, milliseconds (an `XREAD` gets `block_ms` on top).
    pub io_timeout_ms: u64,
    /// First delay before reconnecting, milliseconds (doubles up to `reconnect_max_ms`).
    pub reconnect_min_ms: u64,
    /// Longest delay between reconnect attempts, milliseconds.
    pub reconnect_max_ms: u64,
    /// How often the offset to Redis server time is measured again, milliseconds.
    pub time_sync_ms: u64,
    /// Sorted-set members per `ZSCAN` page while loading a snapshot.
    pub snapshot_page: usize,
}

impl Default for SyncConfig {
    fn default() -> Self {
        SyncConfig {
            url: "redis://127.0.0.1:6379".into(),
            sentinels: Vec::new(),
            master_name: String::new(),
            key_file: None,
            previous_key_file: None,
            insecure_unsigned: false,
            max_block_secs: 86_400,
            restore_own: true,
            ca_file: None,
            client_cert: None,
            client_key: None,
            prefix: "palisade:".into(),
            node_id: String::new(),
            instance: String::new(),
            presence_ms: 1_000,
            buffer_max: 500_000,
            batch_max: 2_000,
            stream_maxlen: 1_000_000,
            read_count: 256,
            block_ms: 1_000,
            io_timeout_ms: 5_000,
            reconnect_min_ms: 100,
            reconnect_max_ms: 5_000,
            time_sync_ms: 30_000,
            snapshot_page: 1_000,
        }
    }
}

impl SyncConfig {
    /// The same config with `node_id` filled in when empty: `{host}-{daemon}`, then
    /// `-{instance}` when set. An explicit `node_id` is kept as written.
    pub fn with_node_id_for(mut self, daemon: &str) -> Self {
        if self.node_id.is_empty() {
            let mut id = format!("{}-{daemon}", host_name());
            if !self.instance.is_empty() {
                id.push('-');
                id.push_str(&self.instance);
            }
            self.node_id = id;
        }
        self
    }

    /// Checks the values that a TOML file may get wrong; the message names the key.
    pub fn validate(&self) -> Result<(), SyncError> {
        let bad = |m: String| Err(SyncError::Config(m));
        if self.node_id.is_empty()
            || self.node_id.len() > NODE_MAX
            || self
                .node_id
                .chars()
                .any(|c| c.is_whitespace() || c.is_control())
        {
            return bad(format!(
                "node_id {:?}: must be 1..={NODE_MAX} bytes without whitespace",
                self.node_id
            ));
        }
        if self
            .prefix
            .chars()
            .any(|c| c.is_whitespace() || c.is_control())
        {
            return bad(format!("prefix {:?}: no whitespace allowed", self.prefix));
        }
        for (name, v) in [
            ("buffer_max", self.buffer_max as u64),
            ("batch_max", self.batch_max as u64),
            ("stream_maxlen", self.stream_maxlen),
            ("read_count", self.read_count as u64),
            ("block_ms", self.block_ms),
            ("io_timeout_ms", self.io_timeout_ms),
            ("reconnect_min_ms", self.reconnect_min_ms),
            ("time_sync_ms", self.time_sync_ms),
            ("snapshot_page", self.snapshot_page as u64),
            ("presence_ms", self.presence_ms),
            ("max_block_secs", self.max_block_secs),
        ] {
            if v == 0 {
                return bad(format!("{name}: must be at least 1"));
            }
        }
        if !self.node_id.is_empty()
            && !self.instance.is_empty()
            && !self.node_id.ends_with(&self.instance)
        {
            return bad(format!(
                "instance {:?}: set node_id or instance, not both (node_id {:?} is used as written)",
                self.instance, self.node_id
            ));
        }
        if self
            .instance
            .chars()
            .any(|c| c.is_whitespace() || c.is_control())
        {
            return bad(format!(
                "instance {:?}: no whitespace allowed",
                self.instance
            ));
        }
        if self.reconnect_max_ms < self.reconnect_min_ms {
            return bad("reconnect_max_ms: must be at least reconnect_min_ms".into());
        }
        if self.key_file.is_none() && !self.insecure_unsigned {
            return bad(
                "key_file: required (the fleet key that signs records; `dnsd redis-key generate FILE` \
                 makes one), or insecure_unsigned = true to run without"
                    .into(),
            );
        }
        if self.previous_key_file.is_some() && self.key_file.is_none() {
            return bad("previous_key_file: needs key_file (the key that replaces it)".into());
        }
        if self.client_cert.is_some() != self.client_key.is_some() {
            return bad("client_cert and client_key: set both or neither".into());
        }
        let tls = self.url.starts_with("rediss://");
        if !tls
            && (self.ca_file.is_some() || self.client_cert.is_some() || self.client_key.is_some())
        {
            return bad("ca_file, client_cert, client_key: need a rediss:// url".into());
        }
        if self.sentinels.is_empty() != self.master_name.is_empty() {
            return bad("sentinels and master_name: set both or neither".into());
        }
        if !self.sentinels.is_empty() {
            if !(self.url.starts_with("redis://") || self.url.starts_with("rediss://")) {
                return bad(format!(
                    "url {:?}: with sentinels, a redis:// or rediss:// url (its host is not used)",
                    redact(&self.url)
                ));
            }
            for s in &self.sentinels {
                self.url_at(s, false)?;
            }
        }
        self.server()?;
        Ok(())
    }

    /// `url` with its host and port replaced by `addr` (`host:port`, `[v6]:port`); without
    /// its database unless `keep_db` (a sentinel has none).
    fn url_at(&self, addr: &str, keep_db: bool) -> Result<String, SyncError> {
        let bad = || {
            SyncError::Config(format!(
                "sentinels: {addr:?} is not host:port (IPv6 as [addr]:port)"
            ))
        };
        let (host, port) = addr.rsplit_once(':').ok_or_else(bad)?;
        let port: u16 = port.parse().map_err(|_| bad())?;
        if host.is_empty() || port == 0 {
            return Err(bad());
        }
        let mut u = url::Url::parse(&self.url)
            .map_err(|e| SyncError::Config(format!("url {:?}: {e}", redact(&self.url))))?;
        u.set_host(Some(host)).map_err(|_| bad())?;
        u.set_port(Some(port)).map_err(|_| bad())?;
        if !keep_db {
            u.set_path("");
        }
        Ok(u.to_string())
    }

    /// The server of this config's `url`: plain, or TLS with the configured CA and client
    /// certificate.
    fn server(&self) -> Result<capped::Server, SyncError> {
        self.server_for(&self.url, self.tls_config()?)
    }

    /// The server `url` names, reached with `tls` (from [`Self::tls_config`]).
    fn server_for(
        &self,
        url: &str,
        tls: Option<Arc<rustls::ClientConfig>>,
    ) -> Result<capped::Server, SyncError> {
        capped::Server::new(url, tls)
            .map_err(|e| SyncError::Config(format!("url {:?}: {e}", redact(url))))
    }

    /// The TLS client config of a `rediss://` url: the server checked against `ca_file` (else
    /// the system's roots), `client_cert` and `client_key` offered. None for other schemes.
    fn tls_config(&self) -> Result<Option<Arc<rustls::ClientConfig>>, SyncError> {
        use rustls::pki_types::pem::PemObject;
        use rustls::pki_types::{CertificateDer, PrivateKeyDer};
        if !self.url.starts_with("rediss://") {
            return Ok(None);
        }
        let read = |key: &str, p: &PathBuf| {
            std::fs::read(p).map_err(|e| SyncError::Config(format!("{key} {}: {e}", p.display())))
        };
        let roots = match &self.ca_file {
            Some(p) => crate::tls_roots::roots(Some((p, &read("ca_file", p)?))),
            None => crate::tls_roots::roots(None),
        }
        .map_err(|e| SyncError::Config(format!("ca_file {e}")))?;
        let builder =
            rustls::ClientConfig::builder_with_provider(Arc::clone(crate::tls_pair::provider()))
                .with_safe_default_protocol_versions()
                .map_err(|e| SyncError::Config(format!("url: {e}")))?
                .with_root_certificates(roots);
        let cfg = match (&self.client_cert, &self.client_key) {
            (Some(c), Some(k)) => {
                let chain = CertificateDer::pem_slice_iter(&read("client_cert", c)?)
                    .collect::<Result<Vec<_>, _>>()
                    .map_err(|e| SyncError::Config(format!("client_cert {}: {e}", c.display())))?;
                let key = PrivateKeyDer::from_pem_slice(&read("client_key", k)?)
                    .map_err(|e| SyncError::Config(format!("client_key {}: {e}", k.display())))?;
                builder
                    .with_client_auth_cert(chain, key)
                    .map_err(|e| SyncError::Config(format!("client_cert/client_key: {e}")))?
            }
            _ => builder.with_no_client_auth(),
        };
        Ok(Some(Arc::new(cfg)))
    }

    /// How large one Redis reply may be: the largest the sync asks for (an `XREAD` of
    /// `read_count` full entries, a snapshot page of `snapshot_page` records) and a margin.
    fn reply_limits(&self, hits: Arc<AtomicU64>) -> capped::Limits {
        let stream = self.read_count as u64 * (record::MAX_FIELD_BYTES as u64 + 256);
        let page = self.snapshot_page as u64 * (record::MAX_RECORD_BYTES as u64 + 256);
        capped::Limits {
            bytes: stream.max(page) + (1 << 20),
            elements: 16 * (self.read_count + self.snapshot_page) as u64 + 65_536,
            // A stream field of packed records is the longest string the sync reads.
            string: 2 * record::MAX_FIELD_BYTES as u64,
            hits,
        }
    }

    /// Adds what this sync talks to — its server (`url`), its sentinels — to a never-block
    /// set (the masters Sentinel names are added as they are named).
    pub fn add_never_block(&self, nb: &mut crate::never_block::NeverBlock) {
        use crate::never_block::{host_addresses, url_addresses};
        for ip in url_addresses(&self.url) {
            nb.push(ip.into(), "redis server");
        }
        for s in &self.sentinels {
            for ip in host_addresses(s) {
                nb.push(ip.into(), "redis sentinel");
            }
        }
    }

    /// The fleet key of `key_file`, or none (unsigned).
    fn fleet_key(&self) -> Result<Option<crate::fleet_key::FleetKey>, SyncError> {
        self.key_file
            .as_ref()
            .map(|p| crate::fleet_key::FleetKey::load(p))
            .transpose()
            .map_err(|e| SyncError::Config(format!("key_file: {e}")))
    }

    /// The key that signs and verifies records: derived from `key_file`, or none (unsigned).
    pub fn record_key(&self) -> Result<Option<crate::fleet_key::DerivedKey>, SyncError> {
        Ok(self.fleet_key()?.map(|k| k.derive(record::KEY_PURPOSE)))
    }

    /// The key records are still verified with during a rotation (`previous_key_file`).
    pub fn previous_record_key(&self) -> Result<Option<crate::fleet_key::DerivedKey>, SyncError> {
        self.previous_key_file
            .as_ref()
            .map(|p| crate::fleet_key::FleetKey::load(p))
            .transpose()
            .map(|k| k.map(|k| k.derive(record::KEY_PURPOSE)))
            .map_err(|e| SyncError::Config(format!("previous_key_file: {e}")))
    }
}

/// `url` with its password replaced by `***` (for messages and logs).
pub fn redact(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_string();
    };
    let Some((cred, host)) = rest.rsplit_once('@') else {
        return url.to_string();
    };
    match cred.split_once(':') {
        Some((user, _)) => format!("{scheme}://{user}:***@{host}"),
        None => format!("{scheme}://***@{host}"),
    }
}

/// This host's name (`/proc/sys/kernel/hostname`), the first part of default node ids.
pub fn host_name() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|s| s.trim().to_string())
        .ok()
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| "localhost".into())
}

/// Why the sync could not start.
#[derive(Debug, thiserror::Error)]
pub enum SyncError {
    /// A configuration value is invalid.
    #[error("redis config: {0}")]
    Config(String),
    /// The sync's own thread or runtime could not start.
    #[error("redis sync: its thread could not start: {0}")]
    Thread(String),
}

/// Counters of the sync, for metrics. Every bound that is hit has its counter here.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct SyncStats {
    /// This node's id.
    pub node_id: String,
    /// The writer holds a working connection.
    pub writer_connected: bool,
    /// The reader holds a working connection and tails the stream.
    pub reader_connected: bool,
    /// Connections made (writer and reader).
    pub connects: u64,
    /// Connection attempts that failed.
    pub connect_errors: u64,
    /// Write batches that failed (retried after reconnecting).
    pub write_errors: u64,
    /// Reads that failed (resumed from the last id after reconnecting).
    pub read_errors: u64,
    /// Decisions written (upserts and removals, republished ones included).
    pub published: u64,
    /// Operator removals written.
    pub published_removals: u64,
    /// MULTI/EXEC batches written.
    pub batches: u64,
    /// Decisions waiting in the outbox now.
    pub buffered: u64,
    /// How long the outbox has waited without a batch written (0: empty): a Redis that holds
    /// writes (paused, read-only, refusing) shows here while the connection looks fine.
    pub writes_waiting_ms: u64,
    /// Outbox bound (`buffer_max`).
    pub buffer_max: u64,
    /// Times the outbox overflowed.
    pub buffer_overflows: u64,
    /// Upserts dropped from the outbox by overflow (republished in full instead).
    pub buffer_dropped: u64,
    /// Removals dropped from the outbox because removals alone filled half of it.
    pub removals_dropped: u64,
    /// Times the block map's change feed lagged and handed over a resync.
    pub feed_resyncs: u64,
    /// Full republishes of this node's local entries done.
    pub full_republishes: u64,
    /// This node's records found in Redis for entries it no longer holds (a Redis restored
    /// from an older dump), retracted at a republish.
    pub stale_retracted: u64,
    /// Entries written by full republishes.
    pub republished: u64,
    /// Local decisions already expired when their turn to be written came.
    pub skipped_expired_local: u64,
    /// Peer upserts applied from the stream.
    pub received: u64,
    /// Peer removals applied from the stream (that removed something).
    pub received_removals: u64,
    /// Peer entries lifted by a lift in their node's mark at a snapshot (their removal lost
    /// with the stream's gap).
    pub lifted_by_marks: u64,
    /// Stream entries of this node skipped.
    pub skipped_own: u64,
    /// Peer upserts already expired on arrival (by this node's clock).
    pub skipped_expired: u64,
    /// Records refused, by cause ([`Refused::ALL`] order).
    pub refused: [u64; Refused::ALL.len()],
    /// Peer removals that lifted nothing (the entry was absent, or not theirs to lift).
    pub removals_not_lifted: u64,
    /// Nodes forgotten by the replay table (more nodes than it holds).
    pub replay_forgotten: u64,
    /// Snapshots loaded.
    pub snapshots: u64,
    /// Entries taken from snapshots.
    pub snapshot_entries: u64,
    /// Snapshot entries left out because the snapshot exceeded the map's capacity, and
    /// snapshots whose index was read in part (over four times the map's capacity).
    pub snapshot_truncated: u64,
    /// Peer entries removed by a resync (none since a snapshot lifts nothing it lacks).
    pub resync_removed: u64,
    /// Gaps detected: this node's stream position had been trimmed away.
    pub gaps: u64,
    /// Times the change stream was started again because it had reached its last possible
    /// ID (an entry with the largest ID, written by hand or forged, stops every write).
    pub stream_resets: u64,
    /// Times this node's records were numbered past its mark in Redis: its clock had been
    /// ahead of what it gives now, or another process wrote as this node id.
    pub start_after_mark: u64,
    /// Times the replay marks key was of another type and was replaced.
    pub marks_repaired: u64,
    /// Marks written by this node.
    pub marks_written: u64,
    /// Lifts this node's mark forgot past its bound (its older records vouched for no more).
    pub mark_lifts_forgotten: u64,
    /// Nodes' marks read again for a record of a process not yet vouched for.
    pub marks_looked_up: u64,
    /// Snapshots read again for peers' records no fresh mark vouched for.
    pub resnaps: u64,
    /// Times the change stream or the snapshot index was of another type and was replaced.
    pub keys_repaired: u64,
    /// Records taken that the previous fleet key signed (`previous_key_file`: a rotation
    /// under way; none for long means it is done).
    pub previous_key_records: u64,
    /// Times Redis was found to have lost its data (epoch changed).
    pub epoch_changes: u64,
    /// Times the writer found another master than before (a failover, or a restart):
    /// each republished this node's local entries.
    pub master_changes: u64,
    /// Times the master the connections talked to was found deposed (its `ROLE`, or
    /// Sentinel naming another): every task reconnected.
    pub masters_deposed: u64,
    /// Sentinels that failed to name the master when asked.
    pub sentinel_errors: u64,
    /// Elements cut from Redis replies past the sync's bound (each read as malformed).
    pub replies_too_large: u64,
    /// Last measured offset of Redis server time over this node's clock, milliseconds.
    pub clock_offset_ms: i64,
    /// Heartbeats that found another live process using this node id.
    pub node_id_conflicts: u64,
    /// Presence members that did not verify (made up or replayed by a Redis writer).
    pub presence_refused: u64,
    /// Heartbeats whose read of the presence key stopped at its bound (planted members).
    pub presence_truncated: u64,
    /// Another live process uses this node id now.
    pub node_id_conflict: bool,
    /// The Redis server may evict keys (a memory limit and a policy other than
    /// `noeviction`): block records may vanish unsaid.
    pub evicting: bool,
    /// Heartbeats written.
    pub heartbeats: u64,
}

#[derive(Default)]
struct Counters {
    connects: AtomicU64,
    connect_errors: AtomicU64,
    write_errors: AtomicU64,
    read_errors: AtomicU64,
    published: AtomicU64,
    published_removals: AtomicU64,
    batches: AtomicU64,
    buffer_overflows: AtomicU64,
    buffer_dropped: AtomicU64,
    removals_dropped: AtomicU64,
    feed_resyncs: AtomicU64,
    full_republishes: AtomicU64,
    stale_retracted: AtomicU64,
    republished: AtomicU64,
    skipped_expired_local: AtomicU64,
    received: AtomicU64,
    received_removals: AtomicU64,
    lifted_by_marks: AtomicU64,
    skipped_own: AtomicU64,
    skipped_expired: AtomicU64,
    refused: [AtomicU64; Refused::ALL.len()],
    removals_not_lifted: AtomicU64,
    replay_forgotten: AtomicU64,
    snapshots: AtomicU64,
    snapshot_entries: AtomicU64,
    snapshot_truncated: AtomicU64,
    resync_removed: AtomicU64,
    gaps: AtomicU64,
    stream_resets: AtomicU64,
    start_after_mark: AtomicU64,
    marks_repaired: AtomicU64,
    marks_written: AtomicU64,
    mark_lifts_forgotten: AtomicU64,
    marks_looked_up: AtomicU64,
    resnaps: AtomicU64,
    keys_repaired: AtomicU64,
    epoch_changes: AtomicU64,
    master_changes: AtomicU64,
    masters_deposed: AtomicU64,
    sentinel_errors: AtomicU64,
    /// Shared with every connection's reader (see [`capped`]).
    replies_too_large: Arc<AtomicU64>,
    node_id_conflicts: AtomicU64,
    presence_refused: AtomicU64,
    presence_truncated: AtomicU64,
    heartbeats: AtomicU64,
}

fn add(c: &AtomicU64, n: u64) {
    c.fetch_add(n, Ordering::Relaxed);
}

fn get(c: &AtomicU64) -> u64 {
    c.load(Ordering::Relaxed)
}

/// A clock this far from Redis's is warned of.
const CLOCK_WARN_MS: u64 = 60_000;

/// State shared by the three tasks and the handle.
struct Shared {
    cfg: SyncConfig,
    keys: wire::Keys,
    node: Arc<str>,
    map: Arc<BlockMap>,
    clock: Clock,
    target: target::Target,
    /// How large one reply may be, on every connection.
    limits: capped::Limits,
    outbox: Mutex<Outbox>,
    wake_writer: Notify,
    /// Bumped when the presence task finds the master it talks to deposed (its `ROLE`, or
    /// another master named by Sentinel): every task's connection then goes and reconnects.
    master_moved: watch::Sender<u64>,
    offset_ms: AtomicI64,
    writer_connected: AtomicBool,
    reader_connected: AtomicBool,
    /// The reader has loaded its first snapshot and tails the stream.
    reader_ready: AtomicBool,
    /// Another live process uses this node id (last heartbeat's finding).
    conflict: AtomicBool,
    /// The ACL user may not write this node's mark (found by a refused transaction).
    marks_denied: AtomicBool,
    /// The writer waited for the reader's first snapshot (or gave up waiting).
    reader_waited: AtomicBool,
    /// See [`SyncStats::evicting`].
    evicting: AtomicBool,
    /// This process's presence token.
    token: String,
    /// Numbers and signs this process's records.
    sealer: record::Sealer,
    /// Opens and verifies others' records.
    opener: record::Opener,
    /// What this process lifted of its own records: carried by its mark.
    lifts: Mutex<record::Lifts>,
    /// Signs and verifies heartbeats (none when unsigned).
    presence_key: Option<crate::fleet_key::DerivedKey>,
    /// When the last full republish ended (`now()` ms; 0: none yet): the next waits
    /// `writer::FULL_GAP` after it, whatever asks for it.
    last_full_ms: std::sync::atomic::AtomicU64,
    c: Counters,
}

impl Shared {
    fn outbox(&self) -> MutexGuard<'_, Outbox> {
        self.outbox.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Whether this node's mark may be written: its reader read the previous process's
    /// (or the writer gave up waiting for it), and the ACL allows it.
    fn marks_may(&self) -> bool {
        (self.reader_ready.load(Ordering::Relaxed) || self.reader_waited.load(Ordering::Relaxed))
            && !self.marks_denied.load(Ordering::Relaxed)
    }

    /// This process's mark as of `at` (Redis time), its lifts then written.
    fn seal_mark(&self, at: i64) -> String {
        let mut l = self.lifts();
        l.dirty = false;
        self.sealer.mark(at, &l)
    }

    fn lifts(&self) -> MutexGuard<'_, record::Lifts> {
        self.lifts.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Voids this process's records of `net` numbered so far (or up to `seq`): a lift its
    /// next mark carries, so that no node started later takes one of them planted back.
    fn note_lift(&self, net: ipnet::IpNet, seq: Option<u64>) {
        let at = self.now() as i64 + self.offset();
        let seq = seq.unwrap_or_else(|| self.sealer.seq());
        let start = self.sealer.start();
        let mut l = self.lifts();
        l.push(net, start, seq, at, self.max_ttl_ms() as i64 + 60_000);
        self.c
            .mark_lifts_forgotten
            .store(l.forgotten, Ordering::Relaxed);
    }

    fn now(&self) -> u64 {
        (self.clock)()
    }

    fn offset(&self) -> i64 {
        self.offset_ms.load(Ordering::Relaxed)
    }

    /// The longest life a record carries, milliseconds.
    fn max_ttl_ms(&self) -> u64 {
        self.cfg.max_block_secs.saturating_mul(1000)
    }

    /// Judges a verified record against this node's bounds (see [`record`]); `redis_now` is
    /// Redis server time now.
    fn judge(&self, r: &record::Record, redis_now: i64) -> Result<(), Refused> {
        if r.origin == Origin::Peer {
            return Err(Refused::Unproven);
        }
        if r.op == record::RecordOp::Del {
            return Ok(());
        }
        if !r.evidence.is_some_and(|e| e.is_proven()) {
            return Err(Refused::Unproven);
        }
        // Five seconds of slack for the clock offset's error.
        let limit = redis_now.saturating_add(self.max_ttl_ms() as i64 + 5_000);
        if r.exp > limit {
            return Err(Refused::Expiry);
        }
        match self.map.policy().check(&r.net) {
            Ok(()) => Ok(()),
            Err((crate::never_block::Refusal::ShortPrefix, _)) => Err(Refused::ShortPrefix),
            Err((crate::never_block::Refusal::NeverBlock, _)) => Err(Refused::NeverBlock),
        }
    }

    /// Counts a refused record and logs it (at most ten lines a second).
    fn refuse(&self, why: Refused, id: wire::StreamId, node: &str) {
        add(&self.c.refused[why.index()], 1);
        let at = if id == wire::StreamId::default() {
            "snapshot".to_string()
        } else {
            id.to_string()
        };
        crate::limited!(
            10,
            warn!(node = %self.node, from = node, stream_id = %at, cause = why.name(), "redis record refused")
        );
    }

    fn backoff(&self, attempt: u32) -> Duration {
        let ms = self
            .cfg
            .reconnect_min_ms
            .saturating_mul(1u64 << attempt.min(20))
            .min(self.cfg.reconnect_max_ms);
        Duration::from_millis(ms)
    }

    /// Opens a connection named `role` to the master (`url`'s, or the one Sentinel names),
    /// checks that it is one, measures the clock offset and reads the Redis epoch.
    async fn connect(&self, role: &str, extra_timeout: Duration) -> redis::RedisResult<Connected> {
        let io = Duration::from_millis(self.cfg.io_timeout_ms);
        let conf =
            redis::AsyncConnectionConfig::new().set_response_timeout(Some(io + extra_timeout));
        // Subscribed before the master is named: a deposition found meanwhile ends this
        // connection too (it may have been named the old master).
        let moved = self.master_moved.subscribe();
        let reached = self
            .target
            .reach(&self.cfg, io, &self.c.sentinel_errors, &self.limits)
            .await?;
        if let Some(addr) = &reached.addr {
            tracing::debug!(node = %self.node, role, master = %addr, "redis master named by sentinel");
            // What the sync talks to is never blocked, the master the operator's sentinels
            // name learned before it is reached (blocked, with XDP its replies were dropped
            // fleet-wide, and the lift could not come through it). Its replicas are not: any
            // client can pose as one, and Sentinel lists it (a forged replica lifted the
            // fleet's block of its own address); one promoted is learned as it is named.
            // An address as Sentinel names it (no name resolved here: a blocking look-up).
            if let Ok(sa) = addr.parse::<std::net::SocketAddr>() {
                self.map
                    .protect(sa.ip(), "redis master (named by sentinel)");
            }
        }
        let (mut conn, driver) = reached.server.open(conf, io, &self.limits).await?;
        let server = target::identify(&mut conn, reached.addr.as_deref()).await?;
        if role == "writer" {
            // The writer's batches are transactions, and redis-rs panics on an error reply to
            // their MULTI (an ACL user without +multi, a Redis still loading): a panic and its
            // backtrace per batch, the cause never said; a user with +multi but -exec failed
            // every batch, unsaid too. An empty transaction asked first says it.
            let multi: redis::RedisResult<()> = redis::cmd("MULTI").query_async(&mut conn).await;
            let exec = match multi {
                Ok(()) => redis::cmd("EXEC")
                    .query_async::<redis::Value>(&mut conn)
                    .await
                    .map(|_| ()),
                Err(e) => Err(e),
            };
            if let Err(e) = exec {
                return Err(redis::RedisError::from((
                    redis::ErrorKind::Io,
                    "a transaction refused (an ACL user needs +multi +exec +discard)",
                    e.to_string(),
                )));
            }
        }
        // Best effort: lets `CLIENT LIST` tell the nodes apart.
        let _: redis::RedisResult<()> = redis::cmd("CLIENT")
            .arg("SETNAME")
            .arg(format!("palisade-{}-{role}", self.node))
            .query_async(&mut conn)
            .await;
        self.check_eviction(&mut conn).await;
        self.measure_offset(&mut conn).await?;
        let epoch = self.ensure_epoch(&mut conn).await?;
        add(&self.c.connects, 1);
        Ok(Connected {
            conn,
            driver,
            epoch,
            server,
            addr: reached.addr,
            moved,
        })
    }

    /// Notes whether the server may evict keys: with a memory limit, any policy but
    /// `noeviction` drops block records (they all carry a TTL, so `volatile-*` takes them too)
    /// and nodes loading the snapshot miss them with nothing to count. Best effort: an ACL
    /// user without `INFO` says nothing.
    async fn check_eviction(&self, conn: &mut redis::aio::MultiplexedConnection) {
        let Ok(info) = redis::cmd("INFO")
            .arg("memory")
            .query_async::<String>(conn)
            .await
        else {
            return;
        };
        let field = |k: &str| {
            info.lines()
                .find_map(|l| l.strip_prefix(k)?.strip_prefix(':'))
                .map(str::trim)
        };
        let limited = field("maxmemory").is_some_and(|m| m != "0");
        let policy = field("maxmemory_policy").unwrap_or("noeviction");
        let evicting = limited && policy != "noeviction";
        if evicting && !self.evicting.swap(true, Ordering::Relaxed) {
            tracing::error!(
                node = %self.node,
                policy,
                "redis may evict keys (maxmemory set, maxmemory-policy {policy}): block records \
                 can vanish without a trace; set maxmemory-policy noeviction"
            );
        } else if !evicting {
            self.evicting.store(false, Ordering::Relaxed);
        }
    }

    /// Deletes `key`, one the sync alone writes, found of another type (made so by whoever
    /// can write to Redis, to stall the fleet or blind the nodes started later): the next
    /// write makes it again. Counted and warned of, naming `what` it is; whether it went.
    async fn replace_wrong_type(
        &self,
        conn: &mut redis::aio::MultiplexedConnection,
        key: &str,
        what: &str,
    ) -> bool {
        let gone = redis::cmd("DEL")
            .arg(key)
            .query_async::<i64>(conn)
            .await
            .is_ok();
        if gone {
            add(&self.c.keys_repaired, 1);
            crate::limited!(
                1,
                warn!(node = %self.node, key, "redis: {what} was of another type: replaced")
            );
        }
        gone
    }

    /// Measures Redis server time against this node's clock (midpoint of the round trip).
    async fn measure_offset(
        &self,
        conn: &mut redis::aio::MultiplexedConnection,
    ) -> redis::RedisResult<()> {
        let t0 = self.now();
        let (secs, micros): (u64, u64) = redis::cmd("TIME").query_async(conn).await?;
        let t1 = self.now();
        let redis_ms = secs * 1000 + micros / 1000;
        let mid = t0 + t1.saturating_sub(t0) / 2;
        let offset = redis_ms as i64 - mid as i64;
        self.offset_ms.store(offset, Ordering::Relaxed);
        if offset.unsigned_abs() > CLOCK_WARN_MS {
            // Expiries are converted, but a clock this far off is set right one day, and the
            // node's event rows carry its time meanwhile.
            crate::limited!(
                60,
                warn!(node = %self.node, offset_ms = offset, "this node's clock is far from redis's: check its time sync (NTP)")
            );
        }
        Ok(())
    }

    /// The Redis epoch, created when missing (first node after an empty start or a data loss).
    async fn ensure_epoch(
        &self,
        conn: &mut redis::aio::MultiplexedConnection,
    ) -> redis::RedisResult<String> {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or(0);
        let candidate = format!("{}-{}-{nanos}", self.node, std::process::id());
        // Read first: a Redis out of memory refuses the SET even when the key is there, and
        // reading needs no memory.
        let mut pipe = redis::pipe();
        pipe.ignore_errors();
        pipe.cmd("GET").arg(&self.keys.epoch);
        let got: Vec<redis::Value> = pipe.query_async(conn).await?;
        match got.first() {
            Some(redis::Value::ServerError(e))
                if e.code() == "WRONGTYPE"
                    && self
                        .replace_wrong_type(conn, &self.keys.epoch, "the epoch key")
                        .await => {}
            Some(redis::Value::ServerError(e)) => {
                // Unreadable otherwise (an ACL without GET on it): changes of data go unnoticed
                // until it is repaired, but the sync goes on.
                crate::limited!(
                    1,
                    warn!(node = %self.node, error = %e.details().unwrap_or(e.code()), "redis epoch key unreadable")
                );
                return Ok(UNREADABLE_EPOCH.into());
            }
            Some(v) if let Some(b) = wire::bytes(v) => {
                return Ok(String::from_utf8_lossy(b).into_owned());
            }
            _ => {}
        }
        let (epoch,): (Option<Vec<u8>>,) = redis::pipe()
            .cmd("SET")
            .arg(&self.keys.epoch)
            .arg(candidate)
            .arg("NX")
            .ignore()
            .cmd("GET")
            .arg(&self.keys.epoch)
            .query_async(conn)
            .await?;
        Ok(String::from_utf8_lossy(&epoch.unwrap_or_default()).into_owned())
    }

    fn synced(&self) -> bool {
        self.writer_connected.load(Ordering::Relaxed)
            && self.reader_ready.load(Ordering::Relaxed)
            && self.reader_connected.load(Ordering::Relaxed)
    }

    fn stats(&self) -> SyncStats {
        let c = &self.c;
        let (buffered, buffer_max, writes_waiting_ms) = {
            let o = self.outbox();
            (
                o.len() as u64,
                self.cfg.buffer_max as u64,
                o.waiting().map_or(0, |d| d.as_millis() as u64),
            )
        };
        SyncStats {
            node_id: self.node.to_string(),
            writer_connected: self.writer_connected.load(Ordering::Relaxed),
            reader_connected: self.reader_connected.load(Ordering::Relaxed),
            connects: get(&c.connects),
            connect_errors: get(&c.connect_errors),
            write_errors: get(&c.write_errors),
            read_errors: get(&c.read_errors),
            published: get(&c.published),
            published_removals: get(&c.published_removals),
            batches: get(&c.batches),
            buffered,
            writes_waiting_ms,
            buffer_max,
            buffer_overflows: get(&c.buffer_overflows),
            buffer_dropped: get(&c.buffer_dropped),
            removals_dropped: get(&c.removals_dropped),
            feed_resyncs: get(&c.feed_resyncs),
            full_republishes: get(&c.full_republishes),
            stale_retracted: get(&c.stale_retracted),
            republished: get(&c.republished),
            skipped_expired_local: get(&c.skipped_expired_local),
            received: get(&c.received),
            received_removals: get(&c.received_removals),
            lifted_by_marks: get(&c.lifted_by_marks),
            skipped_own: get(&c.skipped_own),
            skipped_expired: get(&c.skipped_expired),
            refused: std::array::from_fn(|i| get(&c.refused[i])),
            removals_not_lifted: get(&c.removals_not_lifted),
            replay_forgotten: get(&c.replay_forgotten),
            snapshots: get(&c.snapshots),
            snapshot_entries: get(&c.snapshot_entries),
            snapshot_truncated: get(&c.snapshot_truncated),
            resync_removed: get(&c.resync_removed),
            gaps: get(&c.gaps),
            stream_resets: get(&c.stream_resets),
            start_after_mark: get(&c.start_after_mark),
            marks_repaired: get(&c.marks_repaired),
            marks_written: get(&c.marks_written),
            mark_lifts_forgotten: get(&c.mark_lifts_forgotten),
            marks_looked_up: get(&c.marks_looked_up),
            resnaps: get(&c.resnaps),
            keys_repaired: get(&c.keys_repaired),
            previous_key_records: self.opener.by_previous.load(Ordering::Relaxed),
            epoch_changes: get(&c.epoch_changes),
            master_changes: get(&c.master_changes),
            masters_deposed: get(&c.masters_deposed),
            sentinel_errors: get(&c.sentinel_errors),
            replies_too_large: get(&c.replies_too_large),
            clock_offset_ms: self.offset(),
            node_id_conflicts: get(&c.node_id_conflicts),
            presence_refused: get(&c.presence_refused),
            presence_truncated: get(&c.presence_truncated),
            node_id_conflict: self.conflict.load(Ordering::Relaxed),
            evicting: self.evicting.load(Ordering::Relaxed),
            heartbeats: get(&c.heartbeats),
        }
    }
}

/// A connection to the master, with what identifies the data it holds.
pub(super) struct Connected {
    pub(super) conn: redis::aio::MultiplexedConnection,
    /// Its I/O task, aborted when this is dropped: keep it as long as `conn`.
    pub(super) driver: capped::Driver,
    /// The Redis epoch (see the module doc).
    pub(super) epoch: String,
    /// The server's identity ([`target::identify`]), when known.
    pub(super) server: Option<String>,
    /// `host:port` of the master Sentinel named (None for `url`).
    pub(super) addr: Option<String>,
    /// Changes when the master this connection reached is found deposed.
    pub(super) moved: watch::Receiver<u64>,
}

/// The error a task's connection ends with when its master was found deposed.
fn deposed() -> redis::RedisError {
    redis::RedisError::from((
        redis::ErrorKind::Io,
        "redis master deposed",
        "another master serves now: reconnecting".to_string(),
    ))
}

/// Notes the server a task connected to; true when it is another than the last one known.
fn master_changed(last: &mut Option<String>, now: Option<String>) -> bool {
    let Some(now) = now else {
        return false;
    };
    let changed = last.as_ref().is_some_and(|l| *l != now);
    *last = Some(now);
    changed
}

/// Sleeps `d` unless `stop` turns true first; returns true when stopping.
async fn sleep_or_stop(d: Duration, stop: &mut watch::Receiver<bool>) -> bool {
    let stopped = tokio::select! {
        _ = tokio::time::sleep(d) => false,
        _ = stop.wait_for(|s| *s) => true,
    };
    stopped || *stop.borrow()
}

/// Entry point: starts the sync of one block map.
#[derive(Debug)]
pub struct RedisSync;

impl RedisSync {
    /// Starts the sync of `map` on a thread of its own, with the system clock.
    pub fn spawn(cfg: SyncConfig, map: Arc<BlockMap>) -> Result<SyncHandle, SyncError> {
        Self::spawn_with_clock(cfg, map, Arc::new(crate::clock::unix_ms))
    }

    /// Starts the sync with `clock` as this node's wall clock (the one its daemons use for expiry).
    pub fn spawn_with_clock(
        cfg: SyncConfig,
        map: Arc<BlockMap>,
        clock: Clock,
    ) -> Result<SyncHandle, SyncError> {
        cfg.validate()?;
        // A thread of its own: a hostile Redis (replies the sync must read through to their
        // end) cost http-front's serving thread (workers = 1) 60 % of a core and 64 % of its
        // requests; here it costs this thread alone. It ends with the handle.
        // Built on that thread and dropped there: a runtime dropped in an async context
        // panics (a thread that could not start dropped it on the caller's).
        let (thread_stop, thread_end) = tokio::sync::oneshot::channel::<()>();
        let (handle_tx, handle_rx) = std::sync::mpsc::channel();
        std::thread::Builder::new()
            .name("redis-sync".into())
            .spawn(move || {
                let runtime = match tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                {
                    Ok(r) => r,
                    Err(e) => {
                        let _ = handle_tx.send(Err(e.to_string()));
                        return;
                    }
                };
                let _ = handle_tx.send(Ok(runtime.handle().clone()));
                runtime.block_on(async {
                    let _ = thread_end.await;
                });
            })
            .map_err(|e| SyncError::Thread(e.to_string()))?;
        let rt = handle_rx
            .recv()
            .map_err(|e| SyncError::Thread(e.to_string()))?
            .map_err(SyncError::Thread)?;
        let target = target::Target::new(&cfg)?;
        let key = cfg.record_key()?;
        let presence_key = cfg.fleet_key()?.map(|k| k.derive(presence::KEY_PURPOSE));
        if key.is_none() {
            tracing::warn!(
                "[redis] insecure_unsigned: records are neither signed nor checked; anyone who can write to Redis commands every node's block map"
            );
        }
        // Numbered from the node's clock, and past its mark in Redis once the writer reads it.
        let start = clock();
        let sealer = record::Sealer::new(key.clone(), &cfg.node_id, start);
        let opener = record::Opener::new(key, cfg.insecure_unsigned)
            .with_previous(cfg.previous_record_key()?);
        // Subscribe before any task runs so that no decision made after spawn returns is missed.
        let sub = map.subscribe("redis");
        let c = Counters::default();
        let limits = cfg.reply_limits(Arc::clone(&c.replies_too_large));
        let shared = Arc::new(Shared {
            keys: wire::Keys::new(&cfg.prefix),
            node: Arc::from(cfg.node_id.as_str()),
            outbox: Mutex::new(Outbox::new(cfg.buffer_max)),
            cfg,
            map,
            clock,
            target,
            limits,
            wake_writer: Notify::new(),
            master_moved: watch::channel(0).0,
            offset_ms: AtomicI64::new(0),
            writer_connected: AtomicBool::new(false),
            reader_connected: AtomicBool::new(false),
            reader_ready: AtomicBool::new(false),
            conflict: AtomicBool::new(false),
            marks_denied: AtomicBool::new(false),
            reader_waited: AtomicBool::new(false),
            evicting: AtomicBool::new(false),
            token: presence::token(),
            sealer,
            opener,
            lifts: Mutex::new(record::Lifts::default()),
            presence_key,
            last_full_ms: std::sync::atomic::AtomicU64::new(0),
            c,
        });
        let (stop, stop_rx) = watch::channel(false);
        let (stop_writer, stop_writer_rx) = watch::channel(false);
        let collector = rt.spawn(collect(Arc::clone(&shared), sub, stop_rx.clone()));
        let reader = rt.spawn(reader::run(Arc::clone(&shared), stop_rx));
        let writer = rt.spawn(writer::run(Arc::clone(&shared), stop_writer_rx.clone()));
        let presence = rt.spawn(presence::run(Arc::clone(&shared), stop_writer_rx));
        tracing::info!(node = %shared.node, prefix = %shared.cfg.prefix, "redis block sync started");
        Ok(SyncHandle {
            shared,
            stop,
            stop_writer,
            collector: Some(collector),
            reader: Some(reader),
            writer: Some(writer),
            presence: Some(presence),
            _thread: thread_stop,
        })
    }
}

/// The running sync; dropping it aborts the tasks, [`SyncHandle::shutdown`] stops them cleanly.
pub struct SyncHandle {
    shared: Arc<Shared>,
    stop: watch::Sender<bool>,
    stop_writer: watch::Sender<bool>,
    collector: Option<JoinHandle<()>>,
    reader: Option<JoinHandle<()>>,
    writer: Option<JoinHandle<()>>,
    presence: Option<JoinHandle<()>>,
    /// Dropped with the handle: the sync's thread then ends.
    _thread: tokio::sync::oneshot::Sender<()>,
}

impl fmt::Debug for SyncHandle {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SyncHandle")
            .field("node", &self.shared.node)
            .finish_non_exhaustive()
    }
}

impl SyncHandle {
    /// This node's id.
    pub fn node_id(&self) -> &str {
        &self.shared.node
    }

    /// Current counters.
    pub fn stats(&self) -> SyncStats {
        self.shared.stats()
    }

    /// A cloneable read-only view (stats, sync state) for metrics and control tasks.
    pub fn monitor(&self) -> SyncMonitor {
        SyncMonitor {
            shared: Arc::clone(&self.shared),
        }
    }

    /// True once the writer is connected and the reader has loaded its snapshot and tails the stream.
    pub fn is_synced(&self) -> bool {
        self.shared.synced()
    }

    /// Waits until [`is_synced`](Self::is_synced) or `timeout`; true when synced.
    pub async fn wait_synced(&self, timeout: Duration) -> bool {
        let deadline = Instant::now() + timeout;
        while !self.is_synced() {
            if Instant::now() >= deadline {
                return false;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        true
    }

    /// Stops reading, flushes what the outbox holds (bounded by `io_timeout_ms`), and stops.
    pub async fn shutdown(mut self) -> SyncStats {
        let io = Duration::from_millis(self.shared.cfg.io_timeout_ms);
        let _ = self.stop.send(true);
        // Each pair together (one after another, a stalled Redis took 5 s for each task).
        let (collector, reader) = (self.collector.take(), self.reader.take());
        tokio::join!(
            async {
                if let Some(t) = collector {
                    join_or_abort(t, io).await;
                }
            },
            async {
                if let Some(t) = reader {
                    join_or_abort(t, io).await;
                }
            }
        );
        let _ = self.stop_writer.send(true);
        self.shared.wake_writer.notify_one();
        let (writer, presence) = (self.writer.take(), self.presence.take());
        tokio::join!(
            async {
                if let Some(t) = writer {
                    join_or_abort(t, io * 2).await;
                }
            },
            async {
                if let Some(t) = presence {
                    join_or_abort(t, io).await;
                }
            }
        );
        let stats = self.shared.stats();
        tracing::info!(node = %self.shared.node, unflushed = stats.buffered, "redis block sync stopped");
        stats
    }
}

/// A cloneable view of a running sync: its counters and state, without the power to stop it.
#[derive(Clone)]
pub struct SyncMonitor {
    shared: Arc<Shared>,
}

impl fmt::Debug for SyncMonitor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SyncMonitor")
            .field("node", &self.shared.node)
            .finish_non_exhaustive()
    }
}

impl SyncMonitor {
    /// Current counters.
    pub fn stats(&self) -> SyncStats {
        self.shared.stats()
    }

    /// True while the writer is connected and the reader tails the stream.
    pub fn is_synced(&self) -> bool {
        self.shared.synced()
    }

    /// One line for `ctl status`: whether the sync is up, what went each way, what was
    /// refused, and what needs the operator (another process with this node id, a Redis that
    /// may evict keys).
    pub fn status_line(&self) -> String {
        let s = self.stats();
        let state = match (s.writer_connected, s.reader_connected) {
            (true, true) if s.writes_waiting_ms >= 2_000 => format!(
                "NOT SYNCED (writes waiting for {} s: Redis holds or refuses them)",
                s.writes_waiting_ms / 1000
            ),
            (true, true) => "synced".to_string(),
            (w, r) => format!(
                "NOT SYNCED (writer {}, reader {})",
                if w { "connected" } else { "disconnected" },
                if r { "connected" } else { "disconnected" }
            ),
        };
        let mut line = format!(
            "redis: node {}, {state}, {} decisions published, {} received, {} records refused, \
             {} heartbeats refused, {} of {} waiting",
            s.node_id,
            s.published,
            s.received,
            s.refused.iter().sum::<u64>(),
            s.presence_refused,
            s.buffered,
            s.buffer_max
        );
        if s.node_id_conflict {
            line.push_str(", ANOTHER PROCESS USES THIS NODE ID");
        }
        if s.evicting {
            line.push_str(", REDIS MAY EVICT KEYS (maxmemory-policy)");
        }
        line.push('\n');
        line
    }
}

async fn join_or_abort(mut task: JoinHandle<()>, limit: Duration) {
    if tokio::time::timeout(limit, &mut task).await.is_err() {
        task.abort();
    }
}

impl Drop for SyncHandle {
    fn drop(&mut self) {
        for task in [&self.collector, &self.reader, &self.writer, &self.presence]
            .into_iter()
            .flatten()
        {
            task.abort();
        }
    }
}

/// Moves this node's decisions from the map's change feed into the outbox.
async fn collect(shared: Arc<Shared>, mut sub: Subscription, mut stop: watch::Receiver<bool>) {
    loop {
        let stopping = tokio::select! {
            _ = sub.changed() => false,
            _ = stop.wait_for(|s| *s) => true,
        };
        drain(&shared, &mut sub);
        shared.wake_writer.notify_one();
        if stopping {
            return;
        }
    }
}

fn drain(shared: &Shared, sub: &mut Subscription) {
    while let Some(d) = sub.poll(4096) {
        let mut o = shared.outbox();
        match d {
            Delivery::Changes(changes) => {
                for ch in changes {
                    let item = match ch {
                        // Suspects (unproven evidence) stay on this node.
                        Change::Upsert(e) if e.origin != Origin::Peer && e.is_proven() => {
                            Item::Add(e)
                        }
                        Change::Remove {
                            net,
                            cause: RemoveCause::Operator,
                        } => Item::Del(net, Origin::Operator),
                        // A member's lift of its own block: this node's decision retracted,
                        // no other node's block of the prefix lifted.
                        Change::Remove {
                            net,
                            cause: RemoveCause::Retracted,
                        } => Item::Del(net, Origin::Local),
                        _ => continue,
                    };
                    if let Some(ov) = o.push(item) {
                        add(&shared.c.buffer_overflows, 1);
                        add(&shared.c.buffer_dropped, ov.upserts);
                        add(&shared.c.removals_dropped, ov.removals);
                        tracing::warn!(
                            node = %shared.node,
                            dropped = ov.upserts,
                            "redis outbox full; a full republish follows"
                        );
                    }
                }
            }
            Delivery::Resync(_) => {
                // The first poll on a non-empty map, or the feed lagged: the writer republishes
                // the map's local entries as they are when it gets there.
                shared
                    .c
                    .feed_resyncs
                    .store(sub.stats().resyncs, Ordering::Relaxed);
                o.push_full();
            }
        }
    }
}

/// The Redis sync's counters, named `palisade_redis_sync{what=…}` in both daemons.
impl crate::metrics::Source for SyncMonitor {
    fn collect(&self, out: &mut crate::metrics::Samples) {
        let s = self.stats();
        let help =
            "Redis block sync: connections, decisions published and received, outbox, resyncs.";
        // One family of mixed counts and states: a gauge (as Prometheus requires of a family
        // whose series are not all counters).
        let mut c = |name: &str, _state: bool, value: u64| {
            let kind = crate::metrics::Kind::Gauge;
            out.push(
                format!("redis.{name}"),
                "palisade_redis_sync",
                format!("what=\"{name}\""),
                help,
                kind,
                value,
            );
        };
        c(
            "connected",
            true,
            (s.writer_connected && s.reader_connected) as u64,
        );
        c("writer_connected", true, s.writer_connected as u64);
        c("reader_connected", true, s.reader_connected as u64);
        c("connects", false, s.connects);
        c("connect_errors", false, s.connect_errors);
        c("write_errors", false, s.write_errors);
        c("read_errors", false, s.read_errors);
        c("published", false, s.published);
        c("published_removals", false, s.published_removals);
        c("received", false, s.received);
        c("received_removals", false, s.received_removals);
        c("lifted_by_marks", false, s.lifted_by_marks);
        c("buffered", true, s.buffered);
        c("buffer_max", true, s.buffer_max);
        c("buffer_overflows", false, s.buffer_overflows);
        c("buffer_dropped", false, s.buffer_dropped);
        c("removals_dropped", false, s.removals_dropped);
        c("feed_resyncs", false, s.feed_resyncs);
        c("full_republishes", false, s.full_republishes);
        c("stale_retracted", false, s.stale_retracted);
        c("republished", false, s.republished);
        c("skipped_own", false, s.skipped_own);
        c("skipped_expired", false, s.skipped_expired);
        c("removals_not_lifted", false, s.removals_not_lifted);
        c("replay_forgotten", false, s.replay_forgotten);
        c("snapshots", false, s.snapshots);
        c("snapshot_entries", false, s.snapshot_entries);
        // A bound: peer entries past the block map's capacity, left out of a snapshot.
        c("snapshot_truncated", false, s.snapshot_truncated);
        c("resync_removed", false, s.resync_removed);
        c("gaps", false, s.gaps);
        c("stream_resets", false, s.stream_resets);
        c("start_after_mark", false, s.start_after_mark);
        c("marks_repaired", false, s.marks_repaired);
        c("marks_written", false, s.marks_written);
        c("mark_lifts_forgotten", false, s.mark_lifts_forgotten);
        c("marks_looked_up", false, s.marks_looked_up);
        c("resnaps", false, s.resnaps);
        c("keys_repaired", false, s.keys_repaired);
        c("previous_key_records", false, s.previous_key_records);
        c("writes_waiting_ms", true, s.writes_waiting_ms);
        c("skipped_expired_local", false, s.skipped_expired_local);
        c(
            "clock_offset_ms_abs",
            true,
            s.clock_offset_ms.unsigned_abs(),
        );
        c("epoch_changes", false, s.epoch_changes);
        c("master_changes", false, s.master_changes);
        c("masters_deposed", false, s.masters_deposed);
        c("sentinel_errors", false, s.sentinel_errors);
        // A bound: elements cut from replies past the size the config implies.
        c("replies_too_large", false, s.replies_too_large);
        c("heartbeats", false, s.heartbeats);
        c("node_id_conflict", true, s.node_id_conflict as u64);
        c("node_id_conflicts", false, s.node_id_conflicts);
        // 1 while the server may evict keys (maxmemory with a policy but noeviction).
        c("evicting", true, s.evicting as u64);
        c("presence_refused", false, s.presence_refused);
        // A bound: presence reads stopped at their member limit.
        c("presence_truncated", false, s.presence_truncated);
        for (i, why) in Refused::ALL.iter().enumerate() {
            out.counter(
                format!("redis.refused.{}", why.name()),
                "palisade_redis_records_refused_total",
                format!("cause=\"{}\"", why.name()),
                "Redis records refused before any node obeyed them, by cause.",
                s.refused[i],
            );
        }
    }
}
