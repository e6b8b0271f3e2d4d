//! The reader task: snapshot, then `XREAD BLOCK` from this node's own last id; detects gaps and
//! data loss and resyncs.

use super::record::{Mark, Record, RecordOp, Refused, Replay};
use super::wire::{self, StreamId};
use super::{Shared, add, sleep_or_stop};
use crate::block::{BlockEntry, Origin};
use hashbrown::HashMap;
use ipnet::IpNet;
use redis::Value;
use redis::aio::MultiplexedConnection;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};
use tokio::sync::watch;

/// A snapshot's newest `(start, seq)` per node, and the stream id it was read up to.
type Seed = (StreamId, HashMap<String, (u64, u64)>);

/// How long after a snapshot with records no fresh mark vouched for it is read again.
const RESNAP_AFTER: Duration = Duration::from_millis(super::record::MARK_REFRESH_MS + 2_000);
/// How many times in a row a snapshot is read again for records no mark vouched for.
const RESNAPS: u32 = 3;

/// Shortest between two rounds of snapshot readings that stream adds no mark vouched for
/// asked (a node of a version without marks sends such adds all the time).
const RESNAP_CYCLE: Duration = Duration::from_secs(300);

/// Shortest between two readings of one node's mark for records it does not vouch for.
const LOOKUP_GAP: Duration = Duration::from_secs(1);

/// Where [`apply`] stopped to have a node's mark read: entry, record within it, the node
/// and the process (start) its record came from.
type Lookup = (usize, usize, String, u64);

struct State {
    /// Last stream id applied; `None` when a snapshot is due.
    pos: Option<StreamId>,
    epoch: Option<String>,
    /// No snapshot loaded yet in this process: restore this node's own records too.
    first_load: bool,
    /// The Redis server last read from (its run id, or the master's address): another one
    /// means a failover, after which the snapshot is read again (every snapshot adds to the
    /// Peer entries and removes none).
    server: Option<String>,
    /// The last record seen from each node.
    replay: Replay,
    /// The newest `(start, seq)` per node in the last snapshot, and the stream's last id when
    /// it was read: merged into `replay` once the stream passes that id (entries up to it
    /// may be older than the snapshot's records and are still due). A record replayed later
    /// is refused even when this reader never saw its node in the stream.
    seed: Option<Seed>,
    /// When an epoch change last sent this reader back to the stream's start.
    rewound_at: Option<Instant>,
    /// When the snapshot is read again (its peers' records no mark vouched for), and how
    /// many more times after that.
    resnap: Option<(Instant, u32)>,
    /// When a stream add no mark vouched for last asked for that.
    resnap_asked: Option<Instant>,
    /// Each node's mark as last read (at a snapshot, or looked up for a record), when, and
    /// the newest process it was looked up for: read again at most once a [`LOOKUP_GAP`],
    /// but at once for a newer process (a node that restarted since).
    marks: HashMap<String, (Option<Mark>, Instant, u64)>,
    /// The process (start) of each node whose records past a number are taken by the
    /// replay order alone: past 0 for a fresh mark of the snapshot (the replay table stands
    /// at it), past a looked-up mark's number for that mark (records up to it may be
    /// lifted: each is vouched for). Any other record is taken only where its node's fresh
    /// mark vouches for it.
    trusted: HashMap<String, (u64, u64)>,
}

/// Shortest between two readings of the whole stream for an epoch change: a key flipped
/// again and again (anyone who can write to Redis can) would have every reader read it all
/// each time. A Redis that really lost its data is found by the gap check anyway.
const REWIND_GAP: Duration = Duration::from_secs(60);

impl State {
    /// Notes the epoch read from Redis. A new one means Redis lost its data: everything written
    /// since is in the new stream, so this node reads it from the start (its Peer entries stay;
    /// the nodes republish theirs). Were that stream trimmed already, the gap check resyncs.
    /// True when the epoch changed.
    fn observe_epoch(&mut self, shared: &Shared, e: String) -> bool {
        let changed = self.epoch.as_ref().is_some_and(|old| *old != e);
        if changed {
            add(&shared.c.epoch_changes, 1);
            if self.rewound_at.is_some_and(|t| t.elapsed() < REWIND_GAP) {
                crate::limited!(
                    1,
                    warn!(node = %shared.node, "redis epoch changed again within a minute; republishing local blocks, the stream not read from its start again")
                );
            } else {
                tracing::warn!(node = %shared.node, "redis lost its data (epoch changed); reading its stream from the start and republishing local blocks");
                self.pos = Some(StreamId::default());
                self.rewound_at = Some(Instant::now());
            }
            // An idle writer would not notice before its next write: tell it.
            shared.outbox().push_full();
            shared.wake_writer.notify_one();
        }
        self.epoch = Some(e);
        changed
    }
}

pub(super) async fn run(shared: Arc<Shared>, mut stop: watch::Receiver<bool>) {
    let mut st = State {
        pos: None,
        epoch: None,
        first_load: true,
        server: None,
        replay: Replay::default(),
        seed: None,
        rewound_at: None,
        marks: HashMap::new(),
        trusted: HashMap::new(),
        resnap: None,
        resnap_asked: None,
    };
    let block = Duration::from_millis(shared.cfg.block_ms);
    let mut attempt = 0u32;
    loop {
        if *stop.borrow() {
            return;
        }
        let super::Connected {
            mut conn,
            epoch: e,
            server,
            moved: mut deposed,
            driver: _driver,
            ..
        } = match shared.connect("reader", block).await {
            Ok(c) => c,
            Err(err) => {
                add(&shared.c.connect_errors, 1);
                crate::limited!(
                    1,
                    warn!(node = %shared.node, error = %err, "redis reader: connect failed")
                );
                if sleep_or_stop(shared.backoff(attempt), &mut stop).await {
                    return;
                }
                attempt = attempt.saturating_add(1);
                continue;
            }
        };
        let connected_at = Instant::now();
        let lost = st.observe_epoch(&shared, e);
        let moved = super::master_changed(&mut st.server, server);
        if moved && !lost && st.pos.is_some() {
            // Its stream may lack what this reader read last (writes not replicated before
            // the failover) and its ids may run on another clock: capture its position and
            // read its snapshot again, keeping every Peer entry held now.
            st.pos = None;
            // It may also lack this node's own latest decisions: an idle writer would not
            // find out before its next write.
            shared.outbox().push_full();
            shared.wake_writer.notify_one();
        }
        shared.reader_connected.store(true, Ordering::Relaxed);
        // A Redis that drops every connection (or someone killing them) brings a line per
        // reconnect at most once a second.
        crate::limited!(
            1,
            info!(node = %shared.node, pos = ?st.pos.map(|p| p.to_string()), "redis reader connected")
        );
        let res = tail(&shared, &mut conn, &mut st, &mut stop, &mut deposed).await;
        shared.reader_connected.store(false, Ordering::Relaxed);
        match res {
            Ok(()) => return,
            Err(err) => {
                add(&shared.c.read_errors, 1);
                crate::limited!(
                    1,
                    warn!(node = %shared.node, error = %err, "redis reader: read failed; will resume")
                );
            }
        }
        // As the writer's: quick failures back off further.
        if connected_at.elapsed() >= super::HEALTHY_SESSION {
            attempt = 0;
        }
        if sleep_or_stop(shared.backoff(attempt), &mut stop).await {
            return;
        }
        attempt = attempt.saturating_add(1);
    }
}

/// How often a reader asks for the stream's ends while the stream does not move, or its
/// first entry is one too big for a reply (see [`tail`]).
const INFO_IDLE: Duration = Duration::from_secs(60);

async fn tail(
    shared: &Shared,
    conn: &mut MultiplexedConnection,
    st: &mut State,
    stop: &mut watch::Receiver<bool>,
    moved: &mut watch::Receiver<u64>,
) -> redis::RedisResult<()> {
    let keys = &shared.keys;
    let time_sync = Duration::from_millis(shared.cfg.time_sync_ms);
    let mut next_time_sync = Instant::now() + time_sync;
    // When the stream's ends were last asked (XINFO), and whether its first entry was cut
    // from the reply (one planted there, of any size, is sent whole by Redis with every
    // XINFO: asked after every read, 100 MB of it made Redis send 330 MB/s to four nodes).
    let mut info_at: Option<Instant> = None;
    let mut head_cut = false;
    let mut last_len: Option<u64> = None;
    loop {
        if st.pos.is_some() && st.resnap.is_some_and(|(due, _)| Instant::now() >= due) {
            // Read again where it stands: the stream goes on from this reader's position.
            add(&shared.c.resnaps, 1);
            load_snapshot(shared, conn, st).await?;
        }
        let pos = match st.pos {
            Some(p) => p,
            None => {
                let p = load_snapshot(shared, conn, st).await?;
                st.pos = Some(p);
                st.first_load = false;
                shared.reader_ready.store(true, Ordering::Relaxed);
                // The writer held this process's first mark back until now.
                shared.wake_writer.notify_one();
                p
            }
        };
        if Instant::now() >= next_time_sync {
            shared.measure_offset(conn).await?;
            next_time_sync = Instant::now() + time_sync;
        }
        let mut pipe = redis::pipe();
        pipe.ignore_errors();
        pipe.cmd("XREAD")
            .arg("COUNT")
            .arg(shared.cfg.read_count)
            .arg("BLOCK")
            .arg(shared.cfg.block_ms)
            .arg("STREAMS")
            .arg(&keys.log)
            .arg(pos.to_string());
        pipe.cmd("GET").arg(&keys.epoch);
        pipe.cmd("XLEN").arg(&keys.log);
        let reply: Vec<Value> = tokio::select! {
            r = pipe.query_async(conn) => r?,
            _ = stop.wait_for(|s| *s) => return Ok(()),
            _ = moved.changed() => return Err(super::deposed()),
        };
        let [xread, epoch, xlen] = <[Value; 3]>::try_from(reply).map_err(|_| {
            redis::RedisError::from((redis::ErrorKind::UnexpectedReturnType, "pipeline reply"))
        })?;
        let entries = wire::parse_xread(&xread);
        // XINFO after XREAD: a position trimmed before or during the read shows there. Asked
        // when the read brought entries or the stream's length moved (written, trimmed,
        // replaced: XLEN, which sends no entry, says so), and every INFO_IDLE besides — only
        // then while its first entry is one too big for the reply.
        let len = match xlen {
            Value::Int(n) => u64::try_from(n).ok(),
            _ => None,
        };
        let moved_len = len != last_len;
        last_len = len;
        let due = info_at.is_none_or(|t| t.elapsed() >= INFO_IDLE);
        let xinfo = if due || ((moved_len || !entries.is_empty()) && !head_cut) {
            info_at = Some(Instant::now());
            let mut pipe = redis::pipe();
            pipe.ignore_errors();
            pipe.cmd("XINFO").arg("STREAM").arg(&keys.log);
            let r: Vec<Value> = pipe.query_async(conn).await?;
            let v = r.into_iter().next().unwrap_or(Value::Nil);
            head_cut = wire::first_entry_cut(&v);
            Some(v)
        } else {
            None
        };
        if let Value::ServerError(e) = xread {
            if e.code() == "WRONGTYPE" {
                // The stream's key made another type: replaced (see the writer), and this
                // reader resyncs from the snapshot.
                shared
                    .replace_wrong_type(conn, &keys.log, "the change stream's key")
                    .await;
            }
            return Err(e.into());
        }
        let epoch = match wire::bytes(&epoch) {
            Some(b) => String::from_utf8_lossy(b).into_owned(),
            None => shared.ensure_epoch(conn).await?,
        };
        let _ = st.observe_epoch(shared, epoch);
        if st.pos != Some(pos) {
            continue;
        }
        let gap = match &xinfo {
            Some(v) => wire::is_gap(pos, wire::parse_xinfo(v).as_ref()),
            None => false,
        };
        if gap {
            add(&shared.c.gaps, 1);
            crate::limited!(
                1,
                warn!(node = %shared.node, pos = %pos, "redis stream trimmed past this node's position; resyncing")
            );
            st.pos = None;
            continue;
        }
        if let Some(&(last, _)) = entries.last() {
            let mut from = (0, 0);
            while let Some((entry, record, node, start)) = apply(shared, st, &entries, from) {
                look_up_mark(shared, conn, st, node, start).await?;
                from = (entry, record);
            }
            st.pos = Some(last);
        }
    }
}

/// Applies stream entries in order from `from` (entry, record within it): peer upserts in
/// batches, removals one by one. Every record is opened (bounded, decoded, verified),
/// vouched for by its node's mark where its process is not trusted yet, checked for replay
/// and judged ([`Shared::judge`]); refusals are counted and logged with their stream id.
/// Returns where it stopped to have a node's mark read (at most once a [`LOOKUP_GAP`] per
/// node), or `None` when all is applied.
fn apply(
    shared: &Shared,
    st: &mut State,
    entries: &[(StreamId, Option<&[u8]>)],
    from: (usize, usize),
) -> Option<Lookup> {
    let c = &shared.c;
    let now = shared.now();
    let offset = shared.offset();
    let redis_now = now as i64 + offset;
    let mut adds: Vec<BlockEntry> = Vec::new();
    let flush = |adds: &mut Vec<BlockEntry>| {
        if !adds.is_empty() {
            add(&c.received, adds.len() as u64);
            shared.map.insert_batch(adds.drain(..));
        }
    };
    for (i, (id, d)) in entries.iter().enumerate().skip(from.0) {
        if st.seed.as_ref().is_some_and(|(end, _)| id > end)
            && let Some((_, seen)) = st.seed.take()
        {
            for (node, (start, seq)) in seen {
                st.replay.raise(node, start, seq);
            }
            // A fresh mark's process is trusted past the mark's own number (records up to it
            // are each vouched for: the replay table stands at the snapshot's marks, not at
            // one looked up since, which anyone who can write to Redis may have put back).
            for (node, (m, _, _)) in &st.marks {
                if let Some(m) = m
                    && m.at >= redis_now.saturating_sub(super::record::MARK_FRESH_MS)
                    && st.trusted.len() < super::record::REPLAY_NODES
                {
                    st.trusted.insert(node.clone(), (m.start, m.seq));
                }
            }
        }
        let Some(d) = d else {
            shared.refuse(Refused::Malformed, *id, "");
            continue;
        };
        if *d == super::capped::CUT {
            shared.refuse(Refused::Oversized, *id, "");
            continue;
        }
        let skip = if i == from.0 { from.1 } else { 0 };
        for (j, rec) in shared
            .opener
            .open_many(d)
            .into_iter()
            .enumerate()
            .skip(skip)
        {
            let rec = match rec {
                Ok(r) => r,
                Err(why) => {
                    shared.refuse(why, *id, "");
                    continue;
                }
            };
            if *rec.node == *shared.node {
                add(&c.skipped_own, 1);
                continue;
            }
            // A removal read before the replay table stands at the snapshot (the stream from
            // where the load began) and no newer than what the snapshot showed of its node:
            // an old one replayed (it lifted what the snapshot just loaded). A genuine one of
            // that age came before the snapshot's keys were read, which it had emptied.
            if rec.op == RecordOp::Del
                && st.seed.as_ref().is_some_and(|(_, seen)| {
                    seen.get(rec.node.as_str())
                        .is_some_and(|&last| (rec.start, rec.seq) <= last)
                })
            {
                shared.refuse(Refused::Replay, *id, &rec.node);
                continue;
            }
            if !st
                .trusted
                .get(rec.node.as_str())
                .is_some_and(|&(start, past)| start == rec.start && rec.seq > past)
            {
                match vouch(st, &rec, redis_now) {
                    Ok(()) => {}
                    // Read again at most once a LOOKUP_GAP, but at once for a process
                    // newer than the mark held (a node that restarted since).
                    Err(Refused::Unvouched)
                        if st
                            .marks
                            .get(rec.node.as_str())
                            .is_none_or(|(_, at, asked)| {
                                at.elapsed() >= LOOKUP_GAP || rec.start > *asked
                            }) =>
                    {
                        flush(&mut adds);
                        return Some((i, j, rec.node, rec.start));
                    }
                    Err(why) => {
                        if why == Refused::Unvouched
                            && rec.op == RecordOp::Add
                            && st.resnap.is_none()
                            && st.resnap_asked.is_none_or(|t| t.elapsed() >= RESNAP_CYCLE)
                        {
                            st.resnap_asked = Some(Instant::now());
                            // Its node's mark unreadable now (deleted, vandalised): the
                            // snapshot, which holds the add, is read again once the node has
                            // written it anew.
                            st.resnap = Some((Instant::now() + RESNAP_AFTER, RESNAPS - 1));
                        }
                        shared.refuse(why, *id, &rec.node);
                        continue;
                    }
                }
            }
            if !st.replay.fresh(&rec) {
                shared.refuse(Refused::Replay, *id, &rec.node);
                continue;
            }
            c.replay_forgotten
                .store(st.replay.forgotten, std::sync::atomic::Ordering::Relaxed);
            if let Err(why) = shared.judge(&rec, redis_now) {
                shared.refuse(why, *id, &rec.node);
                continue;
            }
            match rec.op {
                RecordOp::Add => {
                    let e = rec.to_entry(offset, Origin::Peer);
                    if e.is_expired(now) {
                        add(&c.skipped_expired, 1);
                    } else {
                        adds.push(e);
                    }
                }
                RecordOp::Del => {
                    flush(&mut adds);
                    let operator = rec.origin == Origin::Operator;
                    let ours = shared
                        .map
                        .get(rec.net)
                        .is_some_and(|e| e.origin != Origin::Peer);
                    if shared.map.remove_from_peer(rec.net, &rec.node, operator) {
                        add(&c.received_removals, 1);
                        if ours {
                            // A peer's operator lifted this node's own block: its records
                            // of it are void, and its mark says so at once.
                            shared.note_lift(rec.net, None);
                            shared.wake_writer.notify_one();
                        }
                    } else {
                        add(&c.removals_not_lifted, 1);
                    }
                }
            }
        }
    }
    flush(&mut adds);
    None
}

/// Whether the mark this reader holds of `r`'s node vouches for `r`. Once the snapshot's
/// replay marks are in the replay table, a vouched record makes its process's records past
/// the mark trusted (written after it, they are seen in order).
fn vouch(st: &mut State, r: &Record, redis_now: i64) -> Result<(), Refused> {
    let Some((Some(m), _, _)) = st.marks.get(r.node.as_str()) else {
        return Err(Refused::Unvouched);
    };
    m.vouches(r, redis_now)?;
    if st.seed.is_none()
        && (st.trusted.len() < super::record::REPLAY_NODES
            || st.trusted.contains_key(r.node.as_str()))
    {
        let past = m.seq;
        st.trusted.insert(r.node.clone(), (r.start, past));
    }
    Ok(())
}

/// The marks of `nodes` (a bounded number at a time): each node's that verifies
/// and is its own, else `None`.
async fn fetch_marks(
    shared: &Shared,
    conn: &mut MultiplexedConnection,
    nodes: &[String],
) -> redis::RedisResult<Vec<(String, Option<Mark>)>> {
    let mut out = Vec::with_capacity(nodes.len());
    // As many marks a reply as its byte bound holds.
    let batch = (shared.limits.bytes / super::record::MAX_MARK_BYTES as u64).clamp(1, 256) as usize;
    for chunk in nodes.chunks(batch) {
        let mut pipe = redis::pipe();
        pipe.ignore_errors();
        // HGETs, pipelined (the ACL the README gives grants HGET, not HMGET).
        for node in chunk {
            pipe.cmd("HGET").arg(&shared.keys.marks).arg(node);
        }
        let reply: Vec<Value> = pipe.query_async(conn).await?;
        // An error (a marks key of another type): no mark.
        let values: Vec<Option<Vec<u8>>> = reply
            .iter()
            .map(|x| wire::bytes(x).map(<[u8]>::to_vec))
            .collect();
        for (i, node) in chunk.iter().enumerate() {
            let mark = values
                .get(i)
                .and_then(Option::as_deref)
                .and_then(|b| mark_of(shared, node.as_bytes(), b, node));
            out.push((node.clone(), mark));
        }
    }
    Ok(out)
}

/// The mark `value` read under the field `field` of the marks hash, when it verifies and
/// is that field's node's; refusals are counted (logged naming `shown`).
fn mark_of(shared: &Shared, field: &[u8], value: &[u8], shown: &str) -> Option<Mark> {
    if value == super::capped::CUT {
        shared.refuse(Refused::Oversized, StreamId::default(), shown);
        return None;
    }
    match shared.opener.open_mark(value) {
        Ok(m) if m.node.as_bytes() == field => Some(m),
        Ok(_) => {
            shared.refuse(Refused::Malformed, StreamId::default(), shown);
            None
        }
        Err(why) => {
            shared.refuse(why, StreamId::default(), shown);
            None
        }
    }
}

/// Reads `node`'s mark again (a record of a process not yet vouched for came).
async fn look_up_mark(
    shared: &Shared,
    conn: &mut MultiplexedConnection,
    st: &mut State,
    node: String,
    start: u64,
) -> redis::RedisResult<()> {
    add(&shared.c.marks_looked_up, 1);
    let mark = fetch_marks(shared, conn, std::slice::from_ref(&node))
        .await?
        .pop()
        .and_then(|(_, m)| m);
    if st.marks.len() >= super::record::REPLAY_NODES && !st.marks.contains_key(&node) {
        st.marks.clear();
    }
    let asked = st.marks.get(&node).map_or(start, |e| e.2.max(start));
    st.marks.insert(node, (mark, Instant::now(), asked));
    Ok(())
}

/// Members of the snapshot's index read at most: four times what the block map holds.
pub(super) fn snapshot_budget(shared: &Shared) -> usize {
    shared.map.config().capacity.max(1).saturating_mul(4)
}

/// One page of the snapshot's sorted set from `cursor`: the next cursor, and each member as
/// a prefix (`None`: not one, or no UTF-8 — anyone who can write to Redis can add such a
/// member, which must not stop a snapshot) with its score (`None`: unreadable).
///
/// A page whose reply passed the bound (members planted long enough that a page of them
/// fills it) has every member after the cut lost: it is asked again from the same cursor for
/// half as many, until nothing but a first member is cut (too large alone, refused).
pub(super) async fn snapshot_page(
    shared: &Shared,
    conn: &mut MultiplexedConnection,
    cursor: u64,
) -> redis::RedisResult<(u64, Vec<(Option<IpNet>, Option<f64>)>)> {
    let mut count = shared.cfg.snapshot_page.max(1);
    let (next, flat) = loop {
        let r: redis::RedisResult<(u64, Vec<Vec<u8>>)> = redis::cmd("ZSCAN")
            .arg(&shared.keys.zset)
            .arg(cursor)
            .arg("COUNT")
            .arg(count)
            .query_async(conn)
            .await;
        let (next, flat) = match r {
            // The index made another type by whoever can write to Redis: every node started
            // since loaded nothing and followed no stream. It holds nothing of the sync's:
            // replaced by an empty one (the writers fill it again), and the stream followed.
            Err(e) if e.code() == Some("WRONGTYPE") => {
                shared
                    .replace_wrong_type(conn, &shared.keys.zset, "the snapshot index key")
                    .await;
                return Ok((0, Vec::new()));
            }
            r => r?,
        };
        let full = flat.iter().skip(1).any(|e| e == super::capped::CUT);
        if !full || count == 1 {
            break (next, flat);
        }
        count /= 2;
    };
    let text = |b: &[u8]| std::str::from_utf8(b).ok().map(str::to_owned);
    let page = flat
        .chunks_exact(2)
        .map(|p| {
            let net = text(&p[0]).and_then(|m| m.parse().ok());
            (net, text(&p[1]).and_then(|s| s.parse().ok()))
        })
        .collect();
    Ok((next, page))
}

/// The records of `nets` that are still there.
///
/// Values the `MGET` reply cut behind others (planted values long enough that a page of
/// them passes the reply bound) are read again one by one, each its own reply: only a value
/// too large alone stays [`CUT`](super::capped::CUT), refused by the caller.
pub(super) async fn records_of(
    shared: &Shared,
    conn: &mut MultiplexedConnection,
    nets: &[IpNet],
) -> redis::RedisResult<Vec<(IpNet, Vec<u8>)>> {
    if nets.is_empty() {
        return Ok(Vec::new());
    }
    let names: Vec<String> = nets.iter().map(|n| shared.keys.block(n)).collect();
    let mut values: Vec<Option<Vec<u8>>> = redis::cmd("MGET").arg(&names).query_async(conn).await?;
    let again: Vec<usize> = (1..values.len())
        .filter(|&i| values[i].as_deref() == Some(super::capped::CUT))
        .collect();
    // As many at once as the reply bound holds of the longest strings read whole: what one
    // batch makes the library hold stays within one reply's bound.
    let l = &shared.limits;
    let batch = (l.bytes / l.string.max(1)).max(1) as usize;
    for chunk in again.chunks(batch) {
        let mut pipe = redis::pipe();
        for &i in chunk {
            pipe.cmd("GET").arg(&names[i]);
        }
        let one_by_one: Vec<Option<Vec<u8>>> = pipe.query_async(conn).await?;
        for (&i, v) in chunk.iter().zip(one_by_one) {
            values[i] = v;
        }
    }
    Ok(nets
        .iter()
        .zip(values)
        .filter_map(|(n, v)| Some((*n, v?)))
        .collect())
}

/// Reads every node's mark ([`Mark`]) and raises `seen` to each: a record of that node at
/// or before its mark, replayed into the stream after this snapshot, is refused even when
/// this reader never saw the node write; and a snapshot record is taken only where its
/// node's fresh mark vouches for it. A mark that does not verify, or stands under another
/// node's field, counts for nothing (counted); marks past [`super::record::REPLAY_NODES`]
/// fields are not read. A marks key of the wrong type (anyone who can write to Redis can
/// make one) is passed over, counted, never stalling the snapshot.
async fn read_marks(
    shared: &Shared,
    conn: &mut MultiplexedConnection,
    seen: &mut HashMap<String, (u64, u64)>,
) -> redis::RedisResult<HashMap<String, Mark>> {
    let mut marks: HashMap<String, Mark> = HashMap::new();
    let mut cursor: u64 = 0;
    let mut scanned = 0usize;
    // Marks are up to `MAX_MARK_BYTES`: a page of them stays within a reply's bound.
    let page = (shared.limits.bytes / super::record::MAX_MARK_BYTES as u64).clamp(1, 1_000);
    loop {
        let mut pipe = redis::pipe();
        pipe.ignore_errors();
        pipe.cmd("HSCAN")
            .arg(&shared.keys.marks)
            .arg(cursor)
            .arg("COUNT")
            .arg(page.min(shared.cfg.snapshot_page.max(1) as u64));
        let reply: Vec<Value> = pipe.query_async(conn).await?;
        let page = match reply.into_iter().next() {
            // An ACL user without HSCAN (granted before marks existed): no marks.
            Some(Value::ServerError(e)) if e.code() == "NOPERM" => {
                crate::limited!(
                    1,
                    warn!(node = %shared.node, "redis: replay marks not readable (grant +hscan on the prefix): no peer's snapshot records are taken")
                );
                return Ok(marks);
            }
            Some(Value::ServerError(_)) | None => {
                shared.refuse(Refused::Malformed, StreamId::default(), "");
                return Ok(marks);
            }
            Some(v) => v,
        };
        let (next, flat): (u64, Vec<Vec<u8>>) = redis::from_redis_value(page)?;
        scanned += flat.len() / 2;
        for pair in flat.chunks_exact(2) {
            // A field is anyone's bytes: refusals name no node.
            if let Some(m) = mark_of(shared, &pair[0], &pair[1], "") {
                if seen.len() < super::record::REPLAY_NODES || seen.contains_key(m.node.as_str()) {
                    let last = seen.entry(m.node.clone()).or_insert((0, 0));
                    *last = (*last).max((m.start, m.seq));
                }
                if marks.len() < super::record::REPLAY_NODES {
                    marks.insert(m.node.clone(), m);
                }
            }
        }
        cursor = next;
        if cursor == 0 {
            return Ok(marks);
        }
        if scanned >= super::record::REPLAY_NODES {
            // Fields past any fleet's nodes (junk anyone who can write to Redis can add):
            // the rest is not read, and the snapshot counts as read in part.
            add(&shared.c.snapshot_truncated, 1);
            return Ok(marks);
        }
    }
}

/// Loads the snapshot and replaces this node's Peer entries with it; returns the stream id to
/// tail from, captured before the snapshot was read.
async fn load_snapshot(
    shared: &Shared,
    conn: &mut MultiplexedConnection,
    st: &mut State,
) -> redis::RedisResult<StreamId> {
    let keys = &shared.keys;
    let mut pipe = redis::pipe();
    pipe.ignore_errors();
    pipe.cmd("XINFO").arg("STREAM").arg(&keys.log);
    let reply: Vec<Value> = pipe.query_async(conn).await?;
    let start = reply
        .first()
        .and_then(wire::parse_xinfo)
        .map(|i| i.last_generated)
        .unwrap_or_default();

    let max = shared.map.config().capacity.max(1);
    let mut peers: HashMap<IpNet, BlockEntry> = HashMap::new();
    let mut own: Vec<BlockEntry> = Vec::new();
    let mut truncated = 0u64;
    let mut seen: HashMap<String, (u64, u64)> = HashMap::new();
    let mut unvouched = 0u64;
    // The marks first: each snapshot record is taken only where its node's fresh mark
    // vouches for it (a lifted block's record planted back is genuine, and signed).
    let mut marks = read_marks(shared, conn, &mut seen).await?;
    let mut asked: hashbrown::HashSet<String> = hashbrown::HashSet::new();
    let mut cursor: u64 = 0;
    let mut scanned = 0usize;
    loop {
        let (next, page) = snapshot_page(shared, conn, cursor).await?;
        scanned += page.len();
        let redis_now = shared.now() as i64 + shared.offset();
        let mut live = Vec::new();
        for (net, score) in page {
            if !score.is_some_and(|s| s > redis_now as f64) {
                continue;
            }
            match net {
                Some(n) => live.push(n),
                None => shared.refuse(Refused::Malformed, StreamId::default(), ""),
            }
        }
        let values = records_of(shared, conn, &live).await?;
        let (now, offset) = (shared.now(), shared.offset());
        let mut recs = Vec::with_capacity(values.len());
        for (key_net, v) in values {
            if v == super::capped::CUT {
                shared.refuse(Refused::Oversized, StreamId::default(), "");
                continue;
            }
            let rec = match shared.opener.open(&v) {
                // A record counts only under its own prefix's key: one copied under another
                // key (by anyone who can write to Redis) is not that prefix's state.
                Ok(r) if r.op == RecordOp::Add && r.net == key_net => r,
                Ok(_) => {
                    shared.refuse(Refused::Malformed, StreamId::default(), "");
                    continue;
                }
                Err(why) => {
                    shared.refuse(why, StreamId::default(), "");
                    continue;
                }
            };
            if let Err(why) = shared.judge(&rec, now as i64 + offset) {
                shared.refuse(why, StreamId::default(), &rec.node);
                continue;
            }
            recs.push(rec);
        }
        // The marks of this page's nodes that the scan did not bring (junk fields planted in
        // the marks hash push genuine ones past what a scan reads): asked by name, once.
        let missing: Vec<String> = {
            let mut m: Vec<String> = recs
                .iter()
                .filter(|r| {
                    !marks.contains_key(r.node.as_str()) && !asked.contains(r.node.as_str())
                })
                .map(|r| r.node.clone())
                .collect();
            m.sort_unstable();
            m.dedup();
            m
        };
        for (node, mark) in fetch_marks(shared, conn, &missing).await? {
            asked.insert(node.clone());
            if let Some(m) = mark
                && marks.len() < super::record::REPLAY_NODES
            {
                marks.insert(node, m);
            }
        }
        for rec in recs {
            if let Err(why) = marks
                .get(rec.node.as_str())
                .map_or(Err(Refused::Unvouched), |m| {
                    m.vouches(&rec, now as i64 + offset)
                })
            {
                if why == Refused::Unvouched && *rec.node != *shared.node {
                    unvouched += 1;
                }
                shared.refuse(why, StreamId::default(), &rec.node);
                continue;
            }
            if seen.len() < super::record::REPLAY_NODES || seen.contains_key(rec.node.as_str()) {
                let last = seen.entry(rec.node.to_string()).or_insert((0, 0));
                *last = (*last).max((rec.start, rec.seq));
            }
            if *rec.node == *shared.node {
                // Our own earlier decisions: restored once, after a restart of this node.
                if st.first_load && shared.cfg.restore_own && own.len() < max {
                    let e = rec.to_entry(offset, rec.origin);
                    if !e.is_expired(now) {
                        own.push(e);
                    }
                }
                continue;
            }
            if st.replay.seen(&rec) {
                // What this node holds already has this record's effect, or a later one's
                // (a removal: a Redis restored from an older dump, or a lifted block's
                // record planted back, must not bring back a block its node lifted). Kept
                // entries are never dropped for a snapshot's lack (below), so nothing seen
                // is lost by passing it over.
                continue;
            }
            let e = rec.to_entry(offset, Origin::Peer);
            if e.is_expired(now) {
                continue;
            }
            if peers.len() >= max && !peers.contains_key(&e.net) {
                truncated += 1;
                continue;
            }
            peers.insert(e.net, e);
        }
        cursor = next;
        if cursor == 0 {
            break;
        }
        if scanned >= snapshot_budget(shared) {
            // Members past what any map holds several times over (junk anyone who can write
            // to Redis can add): the rest is not read, so that no index stalls the sync.
            truncated += 1;
            crate::limited!(
                1,
                warn!(node = %shared.node, scanned, "redis snapshot index too large: read in part")
            );
            break;
        }
    }
    // Where the stream stood once the snapshot (and the marks) were read: records after it
    // are newer than every record the snapshot holds, and than every node's mark.
    let mut pipe = redis::pipe();
    pipe.ignore_errors();
    pipe.cmd("XINFO").arg("STREAM").arg(&keys.log);
    let reply: Vec<Value> = pipe.query_async(conn).await?;
    let end = reply
        .first()
        .and_then(wire::parse_xinfo)
        .map(|i| i.last_generated)
        .unwrap_or_default();
    st.seed = Some((end, seen));
    // Peers' records no fresh mark vouched for: their nodes are down, or their marks were
    // deleted or vandalised (the nodes write them again within MARK_REFRESH_MS). The
    // snapshot is read again once they have, a few times at most.
    st.resnap = match st.resnap {
        _ if unvouched == 0 => None,
        Some((_, 0)) => None,
        Some((_, left)) => Some((Instant::now() + RESNAP_AFTER, left - 1)),
        None => Some((Instant::now() + RESNAP_AFTER, RESNAPS - 1)),
    };
    // Until the stream passes `end`, every record is vouched for by these marks (and the
    // processes they vouch for trusted after it): a mark can be read again at once.
    let looked = Instant::now()
        .checked_sub(LOOKUP_GAP)
        .unwrap_or_else(Instant::now);
    st.trusted.clear();
    st.marks = marks
        .into_iter()
        .map(|(node, m)| (node, (Some(m), looked, 0)))
        .collect();
    let c = &shared.c;
    let n = peers.len() + own.len();
    add(&c.snapshots, 1);
    add(&c.snapshot_entries, n as u64);
    add(&c.snapshot_truncated, truncated);
    // Peer entries the snapshot lacks are kept until they expire or a signed removal lifts
    // them: a snapshot is what Redis holds, and whoever can write to Redis can delete its
    // keys, which must lift no block (a removal lost with the stream's gap waits for its
    // entry's expiry, at most `max_block_secs`). Our own restored entries go last.
    shared.map.insert_batch(peers.into_values().chain(own));
    // The lifts each fresh mark lists, applied to what this node holds: a removal lost with
    // the stream's gap (trimmed by anyone who can write to Redis, or read past while this
    // node was away) kept an operator's lift from every running peer until the block
    // expired, and a second `block del` on the deciding node had nothing left to publish.
    let redis_now = shared.now() as i64 + shared.offset();
    let mut lifted = 0u64;
    for (node, (m, _, _)) in &st.marks {
        let Some(m) = m.as_ref().filter(|m| m.fresh(redis_now)) else {
            continue;
        };
        for l in &m.lifts {
            if shared.map.lift_voided(l.net, node, (l.start, l.seq)) {
                lifted += 1;
            }
        }
    }
    add(&c.lifted_by_marks, lifted);
    crate::limited!(
        1,
        info!(node = %shared.node, entries = n, from = %start, "redis snapshot loaded")
    );
    Ok(start)
}
