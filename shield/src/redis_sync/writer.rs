//! The writer task: outbox → Redis in MULTI/EXEC batches, reconnecting with backoff.

use super::outbox::Item;
use super::record::PACK;
use super::record::RecordOp;
use super::{Shared, add, sleep_or_stop, wire};
use crate::block::Origin;
use hashbrown::{HashMap, HashSet};
use ipnet::IpNet;
use redis::Value;
use redis::aio::MultiplexedConnection;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};
use tokio::sync::watch;

pub(super) async fn run(shared: Arc<Shared>, mut stop: watch::Receiver<bool>) {
    let mut attempt = 0u32;
    let mut epoch: Option<String> = None;
    let mut server: Option<String> = None;
    loop {
        if *stop.borrow() {
            return;
        }
        let super::Connected {
            mut conn,
            epoch: e,
            server: now_server,
            moved: mut deposed,
            driver: _driver,
            ..
        } = match shared.connect("writer", Duration::ZERO).await {
            Ok(c) => c,
            Err(err) => {
                add(&shared.c.connect_errors, 1);
                crate::limited!(
                    1,
                    warn!(node = %shared.node, error = %err, "redis writer: connect failed")
                );
                if sleep_or_stop(shared.backoff(attempt), &mut stop).await {
                    return;
                }
                attempt = attempt.saturating_add(1);
                continue;
            }
        };
        let connected_at = Instant::now();
        let moved = super::master_changed(&mut server, now_server);
        if epoch.as_ref().is_some_and(|old| *old != e) {
            crate::limited!(
                1,
                warn!(node = %shared.node, "redis lost its data; republishing local blocks")
            );
            shared.outbox().push_full();
        } else if moved {
            // Replication is asynchronous: the last writes acknowledged by the old master
            // may not have reached this one.
            add(&shared.c.master_changes, 1);
            crate::limited!(
                1,
                warn!(node = %shared.node, "redis master changed; republishing local blocks")
            );
            shared.outbox().push_full();
        }
        epoch = Some(e);
        // Marks refused by the last connection's ACL are tried again (a grant since).
        shared.marks_denied.store(false, Ordering::Relaxed);
        start_after_mark(&shared, &mut conn, MarkCheck::Connect).await;
        // A fresh mark before any record: a reader that meets this process's first record
        // finds one that vouches for it.
        write_mark(&shared, &mut conn).await;
        shared.writer_connected.store(true, Ordering::Relaxed);
        crate::limited!(1, info!(node = %shared.node, "redis writer connected"));
        let res = serve(&shared, &mut conn, &mut epoch, &mut stop, &mut deposed).await;
        shared.writer_connected.store(false, Ordering::Relaxed);
        match res {
            Ok(()) => return,
            Err(err) => {
                add(&shared.c.write_errors, 1);
                crate::limited!(
                    1,
                    warn!(node = %shared.node, error = %err, "redis writer: write failed; will retry")
                );
            }
        }
        // Backoff starts over only after a connection that lasted: one Redis refuses at once
        // (a key of the wrong type) is retried ever more slowly, not at the fastest pace.
        if connected_at.elapsed() >= super::HEALTHY_SESSION {
            attempt = 0;
        }
        if sleep_or_stop(shared.backoff(attempt), &mut stop).await {
            return;
        }
        attempt = attempt.saturating_add(1);
    }
}

/// Writes the outbox while the connection works; returns Ok when told to stop with nothing left.
async fn serve(
    shared: &Shared,
    conn: &mut MultiplexedConnection,
    epoch: &mut Option<String>,
    stop: &mut watch::Receiver<bool>,
    moved: &mut watch::Receiver<u64>,
) -> redis::RedisResult<()> {
    let time_sync = Duration::from_millis(shared.cfg.time_sync_ms);
    let mut next_time_sync = Instant::now() + time_sync;
    // Records carry at most `max_block_secs` of life (what peers accept): local entries that
    // outlive that are republished well before their published expiry.
    let renew = Duration::from_secs((shared.cfg.max_block_secs / 4).max(1));
    let mut next_renew = Instant::now() + renew;
    let mut next_repair = Instant::now() + REPAIR;
    let mark_every = Duration::from_millis(super::record::MARK_REFRESH_MS);
    let mut next_mark = Instant::now() + mark_every;
    // Nothing is written before this process's reader has read its previous process's
    // mark (it vouches for what the reader restores, and this process's first mark replaces
    // it): a batch written without a mark is refused by peers. At most WAIT_READER.
    let wait_until = Instant::now() + WAIT_READER;
    while !shared.reader_ready.load(Ordering::Relaxed) && Instant::now() < wait_until {
        tokio::select! {
            _ = shared.wake_writer.notified() => {}
            _ = tokio::time::sleep_until(wait_until.into()) => {}
            _ = stop.wait_for(|s| *s) => break,
            _ = moved.changed() => return Err(super::deposed()),
        }
    }
    shared.reader_waited.store(true, Ordering::Relaxed);
    loop {
        // Fresh while this node lives (a mark older than `MARK_FRESH_MS` vouches for nothing),
        // and at once when a peer lifted one of this node's blocks.
        if Instant::now() >= next_mark || shared.lifts().dirty {
            write_mark(shared, conn).await;
            next_mark = Instant::now() + mark_every;
        }
        if Instant::now() >= next_repair {
            // Every local entry written again, and this node's records it no longer holds
            // retracted: snapshot keys someone deleted come back, and a lifted block's
            // record planted back goes again, within this time.
            next_repair = Instant::now() + REPAIR;
            if shared
                .map
                .entries()
                .iter()
                .any(|e| e.origin != Origin::Peer && e.is_proven())
            {
                shared.outbox().push_full();
            }
        }
        if Instant::now() >= next_time_sync {
            shared.measure_offset(conn).await?;
            next_time_sync = Instant::now() + time_sync;
        }
        if Instant::now() >= next_renew {
            next_renew = Instant::now() + renew;
            let long = shared.max_ttl_ms() / 2;
            let now = shared.now();
            if shared
                .map
                .entries()
                .iter()
                .any(|e| e.origin != Origin::Peer && e.is_proven() && e.ttl_ms(now) > long)
            {
                shared.outbox().push_full();
            }
        }
        // A busy writer looks too: it must not keep writing to a deposed master.
        if moved.has_changed().unwrap_or(false) {
            return Err(super::deposed());
        }
        let batch = shared.outbox().peek(shared.cfg.batch_max);
        let Some(&(last_seq, _)) = batch.last() else {
            if *stop.borrow() {
                return Ok(());
            }
            tokio::select! {
                _ = shared.wake_writer.notified() => {}
                _ = stop.wait_for(|s| *s) => {}
                _ = tokio::time::sleep_until(next_time_sync.min(next_renew).min(next_repair).min(next_mark).into()) => {}
                _ = moved.changed() => return Err(super::deposed()),
            }
            continue;
        };
        let full = matches!(batch[0].1, Item::Full);
        let seen = if full {
            // One full republish per FULL_GAP at most, whatever asks for them (an epoch key
            // flipped again and again would have every node rewrite all it holds each time).
            let last = shared.last_full_ms.load(Ordering::Relaxed);
            let due = last + FULL_GAP.as_millis() as u64;
            let now = shared.now();
            if last > 0 && now < due {
                tokio::select! {
                    _ = tokio::time::sleep(Duration::from_millis(due - now)) => {}
                    _ = stop.wait_for(|s| *s) => {}
                    _ = moved.changed() => return Err(super::deposed()),
                }
            }
            let r = republish(shared, conn).await;
            shared
                .last_full_ms
                .store(shared.now().max(1), Ordering::Relaxed);
            r?
        } else {
            let items: Vec<&Item> = batch.iter().map(|(_, i)| i).collect();
            write(shared, conn, &items).await?
        };
        shared.outbox().ack(last_seq);
        if full && seen.is_some() {
            // A republish went whole into the data set the epoch it read names.
            *epoch = seen;
        } else if seen.as_ref() != epoch.as_ref() {
            // The epoch key vanished or changed under a live connection (FLUSHALL, eviction).
            let e = shared.ensure_epoch(conn).await?;
            crate::limited!(
                1,
                warn!(node = %shared.node, "redis epoch changed; republishing local blocks")
            );
            shared.outbox().push_full();
            *epoch = Some(e);
        }
    }
}

/// Longest the writer waits for its reader's first snapshot before it writes.
const WAIT_READER: Duration = Duration::from_secs(10);

/// Longest between two full republishes while this node holds decisions of its own.
const REPAIR: Duration = Duration::from_secs(600);

/// Shortest between two full republishes.
pub(super) const FULL_GAP: Duration = Duration::from_secs(5);

/// Republishes every local entry of the map in batches; returns the epoch seen by the last one.
async fn republish(
    shared: &Shared,
    conn: &mut MultiplexedConnection,
) -> redis::RedisResult<Option<String>> {
    let now = shared.now();
    let entries: Vec<Item> = shared
        .map
        .entries()
        .into_iter()
        .filter(|e| e.origin != Origin::Peer && e.is_proven() && !e.is_expired(now))
        .map(Item::Add)
        .collect();
    let mut seen = None;
    for chunk in entries.chunks(shared.cfg.batch_max) {
        let items: Vec<&Item> = chunk.iter().collect();
        seen = write(shared, conn, &items).await?;
    }
    if entries.is_empty() {
        seen = write(shared, conn, &[]).await?;
    }
    // Records of ours left in Redis for entries this node no longer holds (a Redis restored
    // from an older dump keeps blocks lifted since): retracted, so that no node loads them
    // from a snapshot again, this one after a restart included.
    let held: HashSet<IpNet> = entries
        .iter()
        .filter_map(|i| match i {
            Item::Add(e) => Some(e.net),
            _ => None,
        })
        .collect();
    // Not while another live process claims this node's id: its records are not stale.
    let stale: Vec<Item> = if shared.conflict.load(Ordering::Relaxed) {
        Vec::new()
    } else {
        // Retracted as this node's own removal, whatever the record's origin was: it lifts
        // only what this node added, never another node's entry (an operator removal would
        // lift every peer's block of the prefix on every node).
        stale_own(shared, conn, &held)
            .await?
            .into_iter()
            .map(|net| Item::Del(net, Origin::Local))
            .collect()
    };
    for chunk in stale.chunks(shared.cfg.batch_max) {
        let items: Vec<&Item> = chunk.iter().collect();
        seen = write(shared, conn, &items).await?;
    }
    add(&shared.c.stale_retracted, stale.len() as u64);
    add(&shared.c.full_republishes, 1);
    add(&shared.c.republished, entries.len() as u64);
    tracing::info!(node = %shared.node, entries = entries.len(), "redis: local blocks republished");
    Ok(seen)
}

/// This node's live records in the snapshot for prefixes not in `held`.
async fn stale_own(
    shared: &Shared,
    conn: &mut MultiplexedConnection,
    held: &HashSet<IpNet>,
) -> redis::RedisResult<Vec<IpNet>> {
    let mut out = Vec::new();
    let mut cursor: u64 = 0;
    let mut scanned = 0usize;
    loop {
        let (next, page) = super::reader::snapshot_page(shared, conn, cursor).await?;
        scanned += page.len();
        let nets: Vec<IpNet> = page
            .into_iter()
            .filter_map(|(net, _)| net)
            .filter(|n| !held.contains(n))
            .collect();
        let redis_now = shared.now() as i64 + shared.offset();
        for (key_net, v) in super::reader::records_of(shared, conn, &nets).await? {
            // Ours, under its own prefix's key and not yet expired (an expired record needs
            // no retraction; one copied under another key is not that prefix's state).
            if let Ok(rec) = shared.opener.open(&v)
                && rec.op == RecordOp::Add
                && *rec.node == *shared.node
                && rec.net == key_net
                && rec.exp > redis_now
            {
                out.push(rec.net);
            }
        }
        cursor = next;
        // The index read no further than a snapshot is (junk must not stall republishing).
        if cursor == 0 || scanned >= super::reader::snapshot_budget(shared) {
            return Ok(out);
        }
    }
}

/// Writes this node's mark ([`super::record::Mark`]) alone — at connect, every
/// [`super::record::MARK_REFRESH_MS`], when a peer lifted one of its blocks, or to replace a
/// marks key of another type (each batch carries one in its transaction): how far it has
/// written, when, and what it lifted. A reader that loads the snapshot raises its replay
/// table to it, and takes this node's records only where a fresh mark vouches for them.
pub(super) async fn write_mark(shared: &Shared, conn: &mut MultiplexedConnection) {
    let keys = &shared.keys;
    let c = &shared.c;
    if !shared.marks_may() {
        // Not before the reader has read this node's earlier mark, which vouches for the
        // records of the process before this one that it restores: written once it has.
        shared.lifts().dirty = true;
        return;
    }
    let mark = shared.seal_mark(shared.now() as i64 + shared.offset());
    let r: redis::RedisResult<Value> = redis::cmd("HSET")
        .arg(&keys.marks)
        .arg(&*shared.node)
        .arg(&mark)
        .query_async(conn)
        .await;
    // A marks key of another type (written by hand, or by whoever can write to Redis, to
    // blind the nodes started later): replaced, and counted.
    let r = match r {
        Err(e) if e.code() == Some("WRONGTYPE") => {
            add(&c.marks_repaired, 1);
            crate::limited!(
                1,
                warn!(node = %shared.node, "redis: the replay marks key was of another type: replaced")
            );
            let mut pipe = redis::pipe();
            pipe.atomic()
                .cmd("DEL")
                .arg(&keys.marks)
                .ignore()
                .cmd("HSET")
                .arg(&keys.marks)
                .arg(&*shared.node)
                .arg(&mark)
                .ignore();
            pipe.query_async::<()>(conn).await.map(|()| Value::Nil)
        }
        r => r,
    };
    match r {
        Ok(_) => add(&c.marks_written, 1),
        Err(e) => {
            if e.code() == Some("NOPERM") {
                shared.marks_denied.store(true, Ordering::Relaxed);
            } else {
                shared.lifts().dirty = true;
            }
            // The ACL is one cause; a Redis out of memory (maxmemory, noeviction) another.
            let why = match e.code() {
                Some("NOPERM") => {
                    "grant +hset, +hscan, +hget and +del on the prefix: taken at the next connection"
                }
                Some("OOM") => "Redis is out of memory (maxmemory): retried with the next batch",
                _ => "retried with the next batch",
            };
            crate::limited!(
                1,
                warn!(node = %shared.node, error = %e, "redis: this node's mark not written (peers started later take none of its records; {why})")
            );
        }
    }
}

/// When [`start_after_mark`] looks.
#[derive(Clone, Copy, PartialEq, Eq)]
enum MarkCheck {
    /// At connect: a mark past this process's start is of a clock that was ahead.
    Connect,
    /// Before a batch: a mark past it is another process's, writing as this node.
    Batch,
}

/// Numbers this process's records past this node's mark (its latest record in Redis) when
/// the start its clock gave is not past it: a node whose clock was ahead, then set right,
/// had every record refused as a replay by every peer for as long as the clock had been
/// ahead (its status saying "synced"); and a second process under the same node id (a clone,
/// a second dnsd with a copied config), started later and gone after a few seconds, left the
/// first one's records refused as replays until it restarted — so it is read again before
/// every batch. A mark that does not verify (anyone who can write to Redis can put one) is
/// passed over; a genuine older one, or this process's own, changes nothing.
async fn start_after_mark(shared: &Shared, conn: &mut MultiplexedConnection, when: MarkCheck) {
    let r: redis::RedisResult<Option<Vec<u8>>> = redis::cmd("HGET")
        .arg(&shared.keys.marks)
        .arg(&*shared.node)
        .query_async(conn)
        .await;
    let Ok(Some(bytes)) = r else { return };
    let Ok(mark) = shared.opener.open_mark(&bytes) else {
        return;
    };
    if mark.node != *shared.node {
        return;
    }
    let before = shared.sealer.start();
    if shared.sealer.start_after(mark.start) {
        add(&shared.c.start_after_mark, 1);
        let ahead_ms = mark.start.saturating_sub(before);
        if when == MarkCheck::Connect {
            tracing::warn!(
                node = %shared.node,
                ahead_ms,
                "this node's last record in redis was numbered from a later start than its clock gives now (the clock was ahead, and was set right): its records are numbered past it, or every peer would refuse them as replays"
            );
        } else {
            crate::limited!(
                1,
                warn!(
                    node = %shared.node,
                    ahead_ms,
                    "another process wrote records as this node id (started later: a clone, a second daemon with a copied config): this one's are numbered past them, or every peer would refuse them as replays; give each process its own node_id"
                )
            );
        }
    }
}

/// Writes `items` in one MULTI/EXEC; returns the epoch value read at its start.
///
/// The key and sorted-set state is coalesced per prefix (the batch's last decision on a prefix
/// is the one that stands): one `SET PX` per upsert, one variadic `ZADD`, `ZREM` and `DEL`. The
/// stream keeps every decision in order, [`PACK`] records to an entry (a JSON array), written
/// last. MULTI makes the batch one step for readers: a snapshot sees it whole or not at all.
/// Redis runs the rest of a transaction when one command fails (a key of the wrong type):
/// when the stream entries went in, the batch is written (peers read it) and the failure is
/// counted and logged; when they did not, the batch fails and is retried.
async fn write(
    shared: &Shared,
    conn: &mut MultiplexedConnection,
    items: &[&Item],
) -> redis::RedisResult<Option<String>> {
    // One read of the mark per batch: records numbered behind another process's under this
    // node id would be refused by every peer.
    start_after_mark(shared, conn, MarkCheck::Batch).await;
    let keys = &shared.keys;
    let now = shared.now();
    let offset = shared.offset();
    let redis_now = now as i64 + offset;
    // Per prefix, the last decision of the batch: Some((json, ttl, exp_redis)) or None (removed).
    let mut last: HashMap<IpNet, Option<(usize, u64, i64)>> = HashMap::with_capacity(items.len());
    let mut records: Vec<String> = Vec::with_capacity(items.len());
    let (mut adds, mut dels, mut expired) = (0u64, 0u64, 0u64);
    for item in items {
        match item {
            Item::Add(e) => {
                // Capped at what peers accept; longer blocks are renewed (see `serve`).
                let ttl = e.ttl_ms(now).min(shared.max_ttl_ms());
                if ttl == 0 {
                    expired += 1;
                    continue;
                }
                // `now + ttl` rather than the expiry itself: the same unless the TTL was capped.
                let exp_redis = (now + ttl) as i64 + offset;
                records.push(shared.sealer.add(e, exp_redis));
                last.insert(e.net, Some((records.len() - 1, ttl, exp_redis)));
                adds += 1;
            }
            Item::Del(net, by) => {
                records.push(shared.sealer.del(net, *by));
                // This process's records of it are void: its mark says so.
                shared.note_lift(*net, None);
                last.insert(*net, None);
                dels += 1;
            }
            Item::Full => {}
        }
    }
    let mut pipe = redis::pipe();
    pipe.atomic().ignore_errors();
    pipe.cmd("GET").arg(&keys.epoch);
    pipe.cmd("ZREMRANGEBYSCORE")
        .arg(&keys.zset)
        .arg("-inf")
        .arg(redis_now);
    // This node's mark, in the same transaction: a reader that sees a record of the batch
    // sees a mark that vouches for it (and one that lists the batch's lifts). Not before the
    // reader read the earlier process's mark, which vouches for the records it restores.
    let with_mark = shared.marks_may();
    if with_mark {
        let mark = shared.seal_mark(redis_now);
        pipe.cmd("HSET")
            .arg(&keys.marks)
            .arg(&*shared.node)
            .arg(mark);
    } else {
        shared.lifts().dirty = true;
    }
    let mut zadd = redis::cmd("ZADD");
    zadd.arg(&keys.zset);
    let mut zrem = redis::cmd("ZREM");
    zrem.arg(&keys.zset);
    let mut del = redis::cmd("DEL");
    let (mut n_zadd, mut n_zrem) = (0, 0);
    for (net, state) in &last {
        match state {
            Some((rec, ttl, exp_redis)) => {
                pipe.cmd("SET")
                    .arg(keys.block(net))
                    .arg(&records[*rec])
                    .arg("PX")
                    .arg(*ttl);
                zadd.arg(*exp_redis).arg(net.to_string());
                n_zadd += 1;
            }
            None => {
                del.arg(keys.block(net));
                zrem.arg(net.to_string());
                n_zrem += 1;
            }
        }
    }
    if n_zadd > 0 {
        pipe.add_command(zadd);
    }
    if n_zrem > 0 {
        pipe.add_command(del);
        pipe.add_command(zrem);
    }
    let entries = records.len().div_ceil(PACK);
    for chunk in records.chunks(PACK) {
        let d = if chunk.len() == 1 {
            chunk[0].clone()
        } else {
            format!("[{}]", chunk.join(","))
        };
        pipe.cmd("XADD")
            .arg(&keys.log)
            .arg("MAXLEN")
            .arg("~")
            .arg(shared.cfg.stream_maxlen)
            .arg("*")
            .arg("d")
            .arg(d);
    }
    let replies: Vec<Value> = match pipe.query_async(conn).await {
        // An ACL user without HSET (granted before marks existed) has the whole transaction
        // refused: its batches go on without the mark, loudly (peers refuse what no mark
        // vouches for), until the next connection tries again. Only that: a Redis out of
        // memory, or a master demoted, aborts a transaction too.
        Err(e)
            if with_mark
                && e.code() == Some("EXECABORT")
                && e.to_string().to_ascii_lowercase().contains("'hset'") =>
        {
            shared.marks_denied.store(true, Ordering::Relaxed);
            tracing::error!(node = %shared.node, error = %e, "redis: this node may not write its mark (grant +hset +hscan +hget on the prefix): peers started later refuse its records");
            return Err(e);
        }
        r => r?,
    };
    let c = &shared.c;
    let stream_at = replies.len().saturating_sub(entries);
    if with_mark {
        match replies.get(2) {
            // The marks key made another type: replaced (and the mark written) apart.
            Some(Value::ServerError(e)) if e.code() == "WRONGTYPE" => {
                write_mark(shared, conn).await;
            }
            Some(Value::ServerError(_)) => shared.lifts().dirty = true,
            _ => add(&c.marks_written, 1),
        }
    }
    if let Some(Value::ServerError(e)) = replies[stream_at..]
        .iter()
        .find(|v| matches!(v, Value::ServerError(_)))
    {
        if e.details()
            .is_some_and(|d| d.contains("exhausted the last possible ID"))
        {
            // Someone wrote the largest stream ID (`XADD palisade:log 18446744073709551615-…`):
            // no entry can follow it, and every node would fail its writes for ever. The
            // stream starts again; readers take its restart for a gap and resync from the
            // snapshot keys, which this batch wrote (the batch is sent again).
            let _: redis::RedisResult<i64> =
                redis::cmd("DEL").arg(&keys.log).query_async(conn).await;
            add(&shared.c.stream_resets, 1);
            crate::limited!(
                1,
                warn!(node = %shared.node, "redis: the change stream reached its last possible ID (written by hand, or forged): started again")
            );
        } else if e.code() == "WRONGTYPE" {
            // The stream's key made another type (by whoever can write to Redis): the whole
            // fleet stopped exchanging decisions until someone deleted it. Only the sync
            // writes it: replaced (readers take it for a gap and resync from the snapshot).
            shared
                .replace_wrong_type(conn, &keys.log, "the change stream's key")
                .await;
        }
        return Err(e.clone().into());
    }
    if let Some(Value::ServerError(e)) = replies[..stream_at]
        .iter()
        .enumerate()
        .find(|(i, v)| !(with_mark && *i == 2) && matches!(v, Value::ServerError(_)))
        .map(|(_, v)| v)
    {
        add(&c.write_errors, 1);
        crate::limited!(
            1,
            warn!(node = %shared.node, error = %e.details().unwrap_or(e.code()), "redis: the stream took the batch but a snapshot key refused it (new nodes will miss it until it is repaired)")
        );
        // The snapshot index made another type: nodes started later loaded nothing and read
        // no stream after it. Replaced, and every local decision written again (those made
        // meanwhile were in no snapshot).
        let zset_wrong = replies
            .get(1)
            .is_some_and(|v| matches!(v, Value::ServerError(e) if e.code() == "WRONGTYPE"));
        if zset_wrong
            && shared
                .replace_wrong_type(conn, &keys.zset, "the snapshot index key")
                .await
        {
            shared.outbox().push_full();
        }
    }
    let epoch = match replies.first() {
        // An epoch key of the wrong type reads as `ensure_epoch` reads it: the same value
        // every time, not a change to republish for on every batch.
        Some(Value::ServerError(_)) => Some(super::UNREADABLE_EPOCH.to_string()),
        Some(v) => wire::bytes(v).map(|b| String::from_utf8_lossy(b).into_owned()),
        None => None,
    };
    add(&c.batches, 1);
    add(&c.published, adds + dels);
    add(&c.published_removals, dels);
    add(&c.skipped_expired_local, expired);
    Ok(epoch)
}
