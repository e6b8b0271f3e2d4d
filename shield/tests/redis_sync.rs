//! Block-map sync through a real redis-server: propagation, removals, restart without loss, gap
//! resync, a 100,000-decision burst and clock skew. Times are printed, never asserted; deadlines
//! are generous functional bounds.

mod redis_harness;

use ipnet::{IpNet, Ipv4Net};
use redis_harness::{Conn, RedisServer};
use shield::block::{BlockConfig, BlockEntry, BlockMap, Evidence, Origin, RemoveCause, Traffic};
use shield::clock::unix_ms;
use shield::redis_sync::{Clock, RedisSync, SyncConfig, SyncHandle};
use std::collections::HashSet;
use std::net::Ipv4Addr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinHandle;

const MIN: Duration = Duration::from_secs(60);
const DEADLINE: Duration = Duration::from_secs(20);

fn host(i: u32) -> IpNet {
    IpNet::V4(Ipv4Net::new(Ipv4Addr::from(0x0a00_0000 + i), 32).unwrap())
}

fn local(i: u32, ttl: Duration) -> BlockEntry {
    BlockEntry::with_ttl(
        host(i),
        ttl,
        unix_ms(),
        "test",
        Origin::Local,
        Evidence::Tcp,
    )
}

/// The fleet key every node of these tests shares (a file of 32 bytes, mode 0600).
fn key_file() -> std::path::PathBuf {
    static DIR: std::sync::OnceLock<tempfile::TempDir> = std::sync::OnceLock::new();
    let dir = DIR.get_or_init(|| {
        let d = tempfile::tempdir().unwrap();
        shield::fleet_key::generate(&d.path().join("fleet.key")).unwrap();
        d
    });
    dir.path().join("fleet.key")
}

fn cfg(url: &str, node: &str) -> SyncConfig {
    SyncConfig {
        url: url.to_string(),
        key_file: Some(key_file()),
        node_id: node.to_string(),
        prefix: "t:".to_string(),
        block_ms: 250,
        reconnect_min_ms: 20,
        reconnect_max_ms: 300,
        io_timeout_ms: 2_000,
        ..SyncConfig::default()
    }
}

/// Logs of the sync (shown for failing tests; `RUST_LOG` overrides the filter).
fn logs() {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("shield=info"));
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_test_writer()
        .try_init();
}

fn map() -> Arc<BlockMap> {
    BlockMap::new(BlockConfig::default())
}

fn spawn(cfg: SyncConfig, map: &Arc<BlockMap>) -> SyncHandle {
    RedisSync::spawn(cfg, Arc::clone(map)).expect("spawn sync")
}

async fn synced(h: &SyncHandle) {
    assert!(
        h.wait_synced(DEADLINE).await,
        "node {} not synced within {DEADLINE:?}: {:?}",
        h.node_id(),
        h.stats()
    );
}

/// Two nodes `x` and `y` on `r`, each with a map of its own, both synced: their maps and
/// handles.
/// Whether a node `name` started now holds `net` once it has read the snapshot (and what
/// came soon after it).
async fn started_now_holds(r: &RedisServer, name: &str, net: IpNet) -> bool {
    let m = map();
    let s = spawn(cfg(&r.url(), name), &m);
    synced(&s).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    let held = m.get(net).is_some();
    s.shutdown().await;
    held
}

async fn synced_pair(
    r: &RedisServer,
    x: &str,
    y: &str,
) -> (Arc<BlockMap>, Arc<BlockMap>, SyncHandle, SyncHandle) {
    let (a, b) = (map(), map());
    let (sa, sb) = (spawn(cfg(&r.url(), x), &a), spawn(cfg(&r.url(), y), &b));
    synced(&sa).await;
    synced(&sb).await;
    (a, b, sa, sb)
}

/// Polls `f` until it holds; returns how long that took, or panics with `what` at the deadline.
async fn until(what: &str, mut f: impl FnMut() -> bool) -> Duration {
    let t0 = Instant::now();
    while !f() {
        assert!(t0.elapsed() < DEADLINE, "not within {DEADLINE:?}: {what}");
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    t0.elapsed()
}

fn nets(map: &BlockMap, pick: impl Fn(&BlockEntry) -> bool) -> HashSet<IpNet> {
    map.entries()
        .into_iter()
        .filter(|e| pick(e))
        .map(|e| e.net)
        .collect()
}

fn xlen(r: &RedisServer) -> u64 {
    redis::cmd("XLEN")
        .arg("t:log")
        .query(&mut r.conn())
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn block_and_removal_propagate_without_echo() {
    logs();
    let Some(r) = RedisServer::start() else {
        return;
    };
    let (a, b, sa, sb) = synced_pair(&r, "a", "b").await;

    a.insert(local(1, MIN));
    let t = until("A's block on B", || b.get(host(1)).is_some()).await;
    println!("block A -> B: {t:?}");
    let got = b.get(host(1)).unwrap();
    assert_eq!(got.origin, Origin::Peer);
    assert_eq!(got.node.as_deref(), Some("a"));
    assert_eq!(got.reason.as_str(), "test");
    let want = a.get(host(1)).unwrap().expires_ms;
    assert!(
        got.expires_ms.abs_diff(want) < 1_000,
        "expiry carried: {} vs {want}",
        got.expires_ms
    );

    a.insert(BlockEntry::with_ttl(
        host(2),
        MIN,
        unix_ms(),
        "by hand",
        Origin::Operator,
        Evidence::Operator,
    ));
    until("A's operator block on B", || b.get(host(2)).is_some()).await;

    // B's own decision: once A has it, B's sync has passed its Peer copies of 1 and 2 without
    // writing them, so the stream holds exactly A's two entries and B's one.
    b.insert(local(3, MIN));
    let t = until("B's block on A", || a.get(host(3)).is_some()).await;
    println!("block B -> A: {t:?}");
    until("B's write counted", || sb.stats().published == 1).await;
    assert_eq!(xlen(&r), 3, "peer copies were re-published");
    assert_eq!(
        a.get(host(1)).unwrap().origin,
        Origin::Local,
        "A's own entry untouched"
    );
    assert_eq!(
        sa.stats().skipped_own,
        2,
        "A read its own two entries before B's"
    );

    // An operator removal on B lifts A's own block on A, and the reverse.
    assert!(b.remove(host(1), RemoveCause::Operator));
    let t = until("removal B -> A", || a.get(host(1)).is_none()).await;
    println!("removal B -> A: {t:?}");
    assert!(a.remove(host(3), RemoveCause::Operator));
    until("removal A -> B", || b.get(host(3)).is_none()).await;
    // Local lifts and expiry are not published: they act on each node by its own clock.
    assert!(a.remove(host(2), RemoveCause::Local));
    let short = local(4, Duration::from_millis(1_500));
    a.insert(short.clone());
    until("short block on B", || b.get(host(4)).is_some()).await;
    let rb = b.reader();
    let ip = std::net::IpAddr::V4(Ipv4Addr::from(0x0a00_0004));
    assert!(rb.is_blocked(ip, unix_ms(), Traffic::Stream));
    assert!(
        !rb.is_blocked(ip, short.expires_ms + 1_000, Traffic::Stream),
        "peer copy expires with the original"
    );
    assert!(b.get(host(2)).is_some(), "a local lift stays local");

    let (fa, fb) = (sa.shutdown().await, sb.shutdown().await);
    println!("stats A: {fa:?}\nstats B: {fb:?}");
    assert_eq!((fa.published_removals, fb.published_removals), (1, 1));
    assert_eq!(fb.received_removals, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_restart_loses_no_decision() {
    logs();
    let Some(mut r) = RedisServer::start() else {
        return;
    };
    // B reaches Redis through a relay, so that it can come back only after A has flushed.
    let relay = Partition::start(r.port).await;
    let (a, b) = (map(), map());
    let sa = spawn(cfg(&r.url(), "a"), &a);
    let sb = spawn(cfg(&relay.url(), "b"), &b);
    synced(&sa).await;
    synced(&sb).await;
    a.insert_batch((0..100).map(|i| local(i, MIN)));
    until("first 100 on B", || b.len() == 100).await;

    relay.cut();
    r.kill();
    // Decisions made while Redis is down: blocks on both nodes, an operator removal on A.
    a.insert_batch((100..1_100).map(|i| local(i, MIN)));
    for i in 1_100..1_200 {
        a.insert(local(i, MIN));
    }
    assert!(a.remove(host(5), RemoveCause::Operator));
    b.insert(local(50_000, MIN));
    // A third node comes up while Redis is down.
    let c = map();
    let sc = spawn(cfg(&r.url(), "c"), &c);
    until("A notices Redis is down", || !sa.stats().writer_connected).await;
    assert!(sa.stats().buffered > 0, "decisions wait in the outbox");

    let t0 = Instant::now();
    r.restart();
    // A flushes its outbox (the removal included) and republishes before B is back: B must
    // still learn the removal although Redis never held host 5 after the restart.
    until("A flushed and republished", || {
        let st = sa.stats();
        st.buffered == 0 && st.full_republishes >= 1 && st.writer_connected
    })
    .await;
    relay.heal();
    let want_b: HashSet<IpNet> = nets(&a, |e| e.origin == Origin::Local);
    assert_eq!(want_b.len(), 1_199);
    until("B converges on A's set", || {
        nets(&b, |e| e.origin == Origin::Peer) == want_b
    })
    .await;
    until("A has B's block", || a.get(host(50_000)).is_some()).await;
    let mut want_c = want_b.clone();
    want_c.insert(host(50_000));
    until("C converges", || nets(&c, |_| true) == want_c).await;
    println!("converged {:?} after restart", t0.elapsed());
    assert!(
        b.get(host(5)).is_none(),
        "removal made while Redis was down reached B"
    );

    let (fa, fb, fc) = (
        sa.shutdown().await,
        sb.shutdown().await,
        sc.shutdown().await,
    );
    println!("stats A: {fa:?}\nstats B: {fb:?}\nstats C: {fc:?}");
    assert!(fb.epoch_changes >= 1);
    assert!(fc.connect_errors >= 1);
    assert_eq!(fa.buffer_overflows, 0);
}

/// A TCP relay that can cut one node off Redis (a network partition) and heal it.
struct Partition {
    port: u16,
    cut: Arc<AtomicBool>,
    conns: Arc<Mutex<Vec<JoinHandle<()>>>>,
    accept: JoinHandle<()>,
}

impl Partition {
    async fn start(target: u16) -> Self {
        let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = l.local_addr().unwrap().port();
        let cut = Arc::new(AtomicBool::new(false));
        let conns: Arc<Mutex<Vec<JoinHandle<()>>>> = Arc::default();
        let (cut2, conns2) = (Arc::clone(&cut), Arc::clone(&conns));
        let accept = tokio::spawn(async move {
            while let Ok((mut inbound, _)) = l.accept().await {
                if cut2.load(Ordering::SeqCst) {
                    continue; // dropped: refused in effect
                }
                let task = tokio::spawn(async move {
                    if let Ok(mut out) = TcpStream::connect(("127.0.0.1", target)).await {
                        let _ = tokio::io::copy_bidirectional(&mut inbound, &mut out).await;
                    }
                });
                conns2.lock().unwrap().push(task);
            }
        });
        Partition {
            port,
            cut,
            conns,
            accept,
        }
    }

    fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    fn cut(&self) {
        self.cut.store(true, Ordering::SeqCst);
        for t in self.conns.lock().unwrap().drain(..) {
            t.abort();
        }
    }

    fn heal(&self) {
        self.cut.store(false, Ordering::SeqCst);
    }
}

impl Drop for Partition {
    fn drop(&mut self) {
        self.accept.abort();
        self.cut();
    }
}

/// Node A writing to Redis and node B reading it through a relay that can cut it off, synced,
/// both writing one decision per stream entry into a stream trimmed at about 50 entries (so
/// that a thousand decisions overflow it).
async fn trimming_pair(
    r: &RedisServer,
) -> (
    Partition,
    Arc<BlockMap>,
    Arc<BlockMap>,
    SyncHandle,
    SyncHandle,
) {
    let relay = Partition::start(r.port).await;
    let (a, b) = (map(), map());
    let small = |url: &str, node: &str| SyncConfig {
        stream_maxlen: 50,
        batch_max: 1,
        ..cfg(url, node)
    };
    let sa = spawn(small(&r.url(), "a"), &a);
    let sb = spawn(small(&relay.url(), "b"), &b);
    synced(&sa).await;
    synced(&sb).await;
    (relay, a, b, sa, sb)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn trimmed_position_is_detected_and_resynced_from_snapshot() {
    logs();
    let Some(r) = RedisServer::start() else {
        return;
    };
    let (relay, a, b, sa, sb) = trimming_pair(&r).await;
    a.insert_batch((0..10).map(|i| local(i, MIN)));
    until("first 10 on B", || b.len() == 10).await;

    relay.cut();
    until("B cut off", || !sb.stats().reader_connected).await;
    for i in 10..3_010 {
        a.insert(local(i, MIN));
    }
    assert!(a.remove(host(3), RemoveCause::Operator));
    until("A wrote everything", || {
        sa.stats().buffered == 0 && sa.stats().published >= 3_011
    })
    .await;
    let len = xlen(&r);
    println!("stream length after 3,011 decisions with MAXLEN ~ 50: {len}");
    assert!(len < 1_000, "stream was trimmed");

    let t0 = Instant::now();
    relay.heal();
    // Everything A holds, and not the one A lifted in the gap: a snapshot's lack lifts
    // nothing (whoever can write to Redis can delete its keys), but A's signed mark lists
    // the lift, and B applies it (the lifted entry lived out its TTL on every running peer).
    let want: HashSet<IpNet> = nets(&a, |e| e.origin == Origin::Local);
    assert!(!want.contains(&host(3)));
    until("B resynced to A's set", || {
        nets(&b, |e| e.origin == Origin::Peer) == want
    })
    .await;
    println!("gap resync took {:?}", t0.elapsed());
    until("the snapshot was read", || sb.stats().snapshots >= 2).await;
    let st = sb.stats();
    println!("stats B: {st:?}");
    assert!(st.gaps >= 1, "gap detected");
    assert_eq!(st.resync_removed, 0);
    assert!(b.get(host(3)).is_none());
    assert_eq!(st.lifted_by_marks, 1);
    sa.shutdown().await;
    sb.shutdown().await;
}

/// A mark that does not verify lifts nothing: whoever can write to Redis puts one in a
/// node's name listing that node's live block as lifted, and sends peers to a snapshot (the
/// stream trimmed past them) — the block stays on every peer.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unsigned_marks_lifts_lift_nothing() {
    logs();
    let Some(r) = RedisServer::start() else {
        return;
    };
    let (relay, a, b, sa, sb) = trimming_pair(&r).await;
    a.insert(local(3, MIN));
    until("A's block on B", || b.get(host(3)).is_some()).await;
    relay.cut();
    until("B cut off", || !sb.stats().reader_connected).await;
    for i in 10..1_010 {
        a.insert(local(i, MIN));
    }
    until("A wrote everything", || {
        sa.stats().buffered == 0 && sa.stats().published >= 1_001
    })
    .await;
    assert!(xlen(&r) < 500, "stream was trimmed");
    // A's own mark, fresh, its block listed as lifted — and no tag.
    let mut c = r.conn();
    let genuine: String = redis::cmd("HGET")
        .arg("t:marks")
        .arg("a")
        .query(&mut c)
        .unwrap();
    let mut m: serde_json::Value = serde_json::from_str(&genuine).unwrap();
    let lift = serde_json::json!({
        "net": host(3).to_string(), "start": m["start"], "seq": m["seq"], "at": m["at"],
    });
    m["lifts"] = serde_json::json!([lift]);
    m.as_object_mut().unwrap().remove("tag");
    let _: () = redis::cmd("HSET")
        .arg("t:marks")
        .arg("a")
        .arg(m.to_string())
        .query(&mut c)
        .unwrap();
    let unsigned = |h: &SyncHandle| {
        let at = shield::redis_sync::Refused::ALL
            .iter()
            .position(|r| *r == shield::redis_sync::Refused::Unsigned)
            .unwrap();
        h.stats().refused[at]
    };
    let before = unsigned(&sb);
    relay.heal();
    until("B read the snapshot", || sb.stats().snapshots >= 2).await;
    // The forged mark was read, and refused.
    until("B refused the unsigned mark", || unsigned(&sb) > before).await;
    assert!(
        b.get(host(3)).is_some(),
        "an unsigned mark lifted A's block"
    );
    assert_eq!(sb.stats().lifted_by_marks, 0);
    sa.shutdown().await;
    sb.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn burst_of_100k_decisions_arrives_whole() {
    logs();
    let Some(r) = RedisServer::start() else {
        return;
    };
    let (a, b, sa, sb) = synced_pair(&r, "a", "b").await;
    const N: u32 = 100_000;
    let t0 = Instant::now();
    for chunk in (0..N).collect::<Vec<_>>().chunks(1_000) {
        a.insert_batch(chunk.iter().map(|&i| local(i, Duration::from_secs(600))));
    }
    let made = t0.elapsed();
    let deadline = Instant::now() + Duration::from_secs(120);
    while sb.stats().received < u64::from(N) || b.len() < N as usize {
        assert!(
            Instant::now() < deadline,
            "burst not through in 120 s: {:?}",
            sb.stats()
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let t = t0.elapsed();
    let (fa, fb) = (sa.stats(), sb.stats());
    println!(
        "100,000 decisions: made in {made:?}, all on B after {t:?} ({:.0}/s); \
         A: {} batches, {} feed resyncs, {} overflows; B received {}",
        f64::from(N) / t.as_secs_f64(),
        fa.batches,
        fa.feed_resyncs,
        fa.buffer_overflows,
        fb.received
    );
    assert_eq!(nets(&b, |e| e.origin == Origin::Peer).len(), N as usize);
    sa.shutdown().await;
    sb.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn expiry_follows_the_receivers_clock_under_skew() {
    logs();
    let Some(r) = RedisServer::start() else {
        return;
    };
    const HOUR: u64 = 3_600_000;
    let behind: Clock = Arc::new(|| unix_ms() - HOUR);
    let ahead: Clock = Arc::new(|| unix_ms() + HOUR);
    let (a, b) = (map(), map());
    let sa =
        RedisSync::spawn_with_clock(cfg(&r.url(), "a"), Arc::clone(&a), behind.clone()).unwrap();
    let sb =
        RedisSync::spawn_with_clock(cfg(&r.url(), "b"), Arc::clone(&b), ahead.clone()).unwrap();
    synced(&sa).await;
    synced(&sb).await;
    println!(
        "offsets to Redis time: A {} ms, B {} ms",
        sa.stats().clock_offset_ms,
        sb.stats().clock_offset_ms
    );
    // A (an hour slow) blocks for 60 s by its own clock.
    a.insert(BlockEntry::with_ttl(
        host(1),
        MIN,
        behind(),
        "skew",
        Origin::Local,
        Evidence::Tcp,
    ));
    until("A's block on B", || b.get(host(1)).is_some()).await;
    let left = b.get(host(1)).unwrap().ttl_ms(ahead());
    println!("B (an hour fast) sees {left} ms left of A's 60,000");
    assert!(
        (50_000..=60_050).contains(&left),
        "B keeps it ~60 s by B's clock, got {left} ms"
    );
    // The reverse: B blocks for 30 s; A sees 30 s on A's clock.
    b.insert(BlockEntry::with_ttl(
        host(2),
        Duration::from_secs(30),
        ahead(),
        "skew",
        Origin::Local,
        Evidence::Tcp,
    ));
    until("B's block on A", || a.get(host(2)).is_some()).await;
    let left = a.get(host(2)).unwrap().ttl_ms(behind());
    assert!(
        (20_000..=30_050).contains(&left),
        "A keeps it ~30 s by A's clock, got {left} ms"
    );
    // A node that joins later learns both from the snapshot, converted by its own clock.
    let c = map();
    let sc =
        RedisSync::spawn_with_clock(cfg(&r.url(), "c"), Arc::clone(&c), ahead.clone()).unwrap();
    synced(&sc).await;
    let left = c
        .get(host(1))
        .expect("snapshot carried A's block")
        .ttl_ms(ahead());
    assert!(
        (50_000..=60_050).contains(&left),
        "snapshot path: got {left} ms"
    );
    sa.shutdown().await;
    sb.shutdown().await;
    sc.shutdown().await;
}

/// A node whose clock was ahead (a bad RTC, NTP not yet synced), then set right: its
/// records were numbered from an earlier start than those peers had seen of it, and every
/// peer refused them as replays — its blocks and lifts — for as long as the clock had been
/// ahead. Numbered past its mark in Redis, they arrive.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_whose_clock_was_set_back_is_no_replay_of_itself() {
    logs();
    let Some(r) = RedisServer::start() else {
        return;
    };
    const HOUR: u64 = 3_600_000;
    let ahead: Clock = Arc::new(|| unix_ms() + 2 * HOUR);
    let a = map();
    let sa = spawn(cfg(&r.url(), "a"), &a);
    synced(&sa).await;
    let b = map();
    let sb =
        RedisSync::spawn_with_clock(cfg(&r.url(), "b"), Arc::clone(&b), ahead.clone()).unwrap();
    synced(&sb).await;
    b.insert(BlockEntry::with_ttl(
        host(31),
        MIN,
        ahead(),
        "skewed",
        Origin::Operator,
        Evidence::Operator,
    ));
    until("B's block on A", || a.get(host(31)).is_some()).await;
    sb.shutdown().await;
    // B again, its clock set right.
    let b = map();
    let sb = spawn(cfg(&r.url(), "b"), &b);
    synced(&sb).await;
    until("B's block back on B", || b.get(host(31)).is_some()).await;
    b.insert(BlockEntry::with_ttl(
        host(32),
        MIN,
        unix_ms(),
        "after the fix",
        Origin::Operator,
        Evidence::Operator,
    ));
    until("B's new block on A", || a.get(host(32)).is_some()).await;
    b.remove(host(31), RemoveCause::Operator);
    until("B's lift on A", || a.get(host(31)).is_none()).await;
    assert_eq!(sb.stats().start_after_mark, 1);
    assert_eq!(
        sa.stats().refused.iter().sum::<u64>(),
        0,
        "{:?}",
        sa.stats()
    );
    sa.shutdown().await;
    sb.shutdown().await;
}

/// A second process under a node's id (a cloned machine, a second daemon with a copied
/// config), started later and gone after a few seconds: its records, numbered from its later
/// start, raised every peer's replay mark for the id, and the first process's records —
/// blocks and lifts — were refused as replays until it restarted, its status "synced".
/// Read before each batch, the mark numbers them past the other's, and they arrive.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_process_under_a_nodes_id_leaves_it_heard_once_gone() {
    logs();
    let Some(r) = RedisServer::start() else {
        return;
    };
    let (a, d, sa, sd) = synced_pair(&r, "a", "d").await;
    d.insert(local(71, MIN));
    until("D's block on A", || a.get(host(71)).is_some()).await;
    // The second "d", started later (its clock a second on), publishes, and goes.
    let later: Clock = Arc::new(|| unix_ms() + 1_000);
    let d2 = map();
    let sd2 = RedisSync::spawn_with_clock(cfg(&r.url(), "d"), Arc::clone(&d2), later).unwrap();
    synced(&sd2).await;
    d2.insert(local(72, MIN));
    until("the second's block on A", || a.get(host(72)).is_some()).await;
    sd2.shutdown().await;
    // The first goes on: its new block and its lift reach A.
    d.insert(local(73, MIN));
    until("D's new block on A", || a.get(host(73)).is_some()).await;
    d.remove(host(71), RemoveCause::Operator);
    until("D's lift on A", || a.get(host(71)).is_none()).await;
    assert!(sd.stats().start_after_mark >= 1, "{:?}", sd.stats());
    sa.shutdown().await;
    sd.shutdown().await;
}

/// A rolling rotation of the fleet key: a node on the new key (the old one as
/// `previous_key_file`) and a node still on the old key take each other's records; each half
/// refused the other's until every node had the new key.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rolling_key_rotation_keeps_the_fleet_whole() {
    logs();
    let Some(r) = RedisServer::start() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let new_key = dir.path().join("new.key");
    shield::fleet_key::generate(&new_key).unwrap();
    let (a, b) = (map(), map());
    // A still on the old key; B on the new one, the old as previous.
    let sa = spawn(cfg(&r.url(), "a"), &a);
    let sb = spawn(
        SyncConfig {
            key_file: Some(new_key.clone()),
            previous_key_file: Some(key_file()),
            ..cfg(&r.url(), "b")
        },
        &b,
    );
    synced(&sa).await;
    synced(&sb).await;
    a.insert(local(51, MIN));
    until("A's block on B", || b.get(host(51)).is_some()).await;
    assert!(sb.stats().previous_key_records >= 1);
    // B's records, under the new key, reach A once A has it too (A restarted onto it).
    sa.shutdown().await;
    let a = map();
    let sa = spawn(
        SyncConfig {
            key_file: Some(new_key.clone()),
            previous_key_file: Some(key_file()),
            ..cfg(&r.url(), "a")
        },
        &a,
    );
    synced(&sa).await;
    b.insert(local(52, MIN));
    until("B's block on A", || a.get(host(52)).is_some()).await;
    assert!(
        a.get(host(51)).is_some(),
        "its own block, signed with the old key, taken back"
    );
    // Without the previous key, the old key's records are refused.
    let c = map();
    let sc = spawn(
        SyncConfig {
            key_file: Some(new_key),
            ..cfg(&r.url(), "c")
        },
        &c,
    );
    synced(&sc).await;
    assert!(c.get(host(52)).is_some());
    sa.shutdown().await;
    sb.shutdown().await;
    sc.shutdown().await;
}

/// A mark that does not verify (anyone who can write to Redis can put one, its start far
/// ahead, to make the node number its records past anything peers will take later) moves
/// nothing: the node's records still reach a peer.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_forged_mark_moves_no_start() {
    logs();
    let Some(r) = RedisServer::start() else {
        return;
    };
    let mut c = r.conn();
    let forged = format!(
        r#"{{"v":2,"op":"add","net":"10.9.9.0/24","node":"a","start":{},"seq":1,"exp":0,"origin":"local","tag":"00"}}"#,
        u64::MAX / 2
    );
    let _: () = redis::cmd("HSET")
        .arg("t:marks")
        .arg("a")
        .arg(&forged)
        .query(&mut c)
        .unwrap();
    let (a, b, sa, sb) = synced_pair(&r, "a", "b").await;
    a.insert(local(60, MIN));
    until("A's block on B", || b.get(host(60)).is_some()).await;
    assert_eq!(sa.stats().start_after_mark, 0);
    sa.shutdown().await;
    sb.shutdown().await;
}

/// A replay marks key of another type (put there to blind the nodes started later) is
/// replaced by the next write, and counted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_marks_key_of_another_type_is_replaced() {
    logs();
    let Some(r) = RedisServer::start() else {
        return;
    };
    let a = map();
    let sa = spawn(cfg(&r.url(), "a"), &a);
    synced(&sa).await;
    let mut c = r.conn();
    let _: () = redis::cmd("SET")
        .arg("t:marks")
        .arg("junk")
        .query(&mut c)
        .unwrap();
    a.insert(local(41, MIN));
    until("the marks repaired", || sa.stats().marks_repaired == 1).await;
    let t: String = redis::cmd("TYPE").arg("t:marks").query(&mut c).unwrap();
    assert_eq!(t, "hash");
    sa.shutdown().await;
}

/// The change stream and the snapshot index made another type by whoever can write to
/// Redis: the fleet stopped exchanging decisions until someone deleted the stream's key, and
/// a node started while the index was wrong loaded nothing and followed no stream — the
/// decisions made meanwhile missing even after a repair. Both are replaced, and a node
/// started after gets every block.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_stream_and_snapshot_keys_of_another_type_are_replaced() {
    logs();
    let Some(r) = RedisServer::start() else {
        return;
    };
    let (a, b, sa, sb) = synced_pair(&r, "a", "b").await;
    let mut c = r.conn();
    let junk = |c: &mut redis::Connection, key: &str| {
        let _: () = redis::cmd("DEL").arg(key).query(c).unwrap();
        let _: () = redis::cmd("SET").arg(key).arg("junk").query(c).unwrap();
    };
    junk(&mut c, "t:log");
    a.insert(local(81, MIN));
    until("A's block on B through a replaced stream", || {
        b.get(host(81)).is_some()
    })
    .await;
    junk(&mut c, "t:blocks");
    a.insert(local(82, MIN));
    until("B has the second block", || b.get(host(82)).is_some()).await;
    // A node started now loads both from the snapshot.
    let n = map();
    let sn = spawn(cfg(&r.url(), "n"), &n);
    synced(&sn).await;
    until("both blocks on the new node", || {
        n.get(host(81)).is_some() && n.get(host(82)).is_some()
    })
    .await;
    for key in ["t:log", "t:blocks"] {
        let t: String = redis::cmd("TYPE").arg(key).query(&mut c).unwrap();
        assert_ne!(t, "string", "{key}");
    }
    let repaired = sa.stats().keys_repaired + sb.stats().keys_repaired + sn.stats().keys_repaired;
    assert!(repaired >= 2, "{repaired}");
    sa.shutdown().await;
    sb.shutdown().await;
    sn.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_flushes_and_a_restarted_node_gets_its_blocks_back() {
    logs();
    let Some(r) = RedisServer::start() else {
        return;
    };
    let a = map();
    let sa = spawn(cfg(&r.url(), "a"), &a);
    synced(&sa).await;
    a.insert(BlockEntry::with_ttl(
        host(7),
        MIN,
        unix_ms(),
        "by hand",
        Origin::Operator,
        Evidence::Operator,
    ));
    let mon = sa.monitor();
    assert!(mon.is_synced());
    let st = sa.shutdown().await;
    assert!(!mon.is_synced(), "stopped");
    assert_eq!(
        (st.published, st.buffered),
        (1, 0),
        "flushed on shutdown: {st:?}"
    );
    // Same node id, fresh process state: its earlier decision comes back with its origin.
    let a2 = map();
    let sa2 = spawn(cfg(&r.url(), "a"), &a2);
    synced(&sa2).await;
    let got = a2.get(host(7)).expect("own block restored");
    assert_eq!(got.origin, Origin::Operator);
    sa2.shutdown().await;
}

#[test]
fn config_is_strict_and_validated() {
    let c: SyncConfig =
        toml::from_str("url = \"redis://10.0.0.1:6379\"\nnode_id = \"ns1\"").unwrap();
    assert_eq!(c.prefix, "palisade:");
    // No key, no sync: unless the operator says unsigned records are fine.
    let e = c.validate().unwrap_err().to_string();
    assert!(e.contains("key_file"), "{e}");
    let c = SyncConfig {
        insecure_unsigned: true,
        ..c
    };
    c.validate().unwrap();
    let keyed = SyncConfig {
        insecure_unsigned: false,
        key_file: Some(key_file()),
        ..c.clone()
    };
    keyed.validate().unwrap();
    assert!(keyed.record_key().unwrap().is_some());
    // A previous key needs the key that replaces it, and must be a readable fleet key.
    let e = SyncConfig {
        previous_key_file: Some(key_file()),
        ..c.clone()
    }
    .validate()
    .unwrap_err()
    .to_string();
    assert!(e.contains("previous_key_file"), "{e}");
    let missing = SyncConfig {
        previous_key_file: Some("/nonexistent/old.key".into()),
        ..keyed.clone()
    };
    let e = missing.previous_record_key().unwrap_err().to_string();
    assert!(e.contains("previous_key_file"), "{e}");
    let bad = SyncConfig {
        ca_file: Some("/nonexistent".into()),
        ..c.clone()
    };
    assert!(
        bad.validate()
            .unwrap_err()
            .to_string()
            .contains("rediss://")
    );
    assert_eq!(
        shield::redis_sync::redact("redis://dnsd:s3cret@10.0.0.1:6379/0"),
        "redis://dnsd:***@10.0.0.1:6379/0"
    );
    let err = toml::from_str::<SyncConfig>("nodeid = \"x\"")
        .unwrap_err()
        .to_string();
    assert!(err.contains("nodeid"), "{err}");
    let bad = SyncConfig {
        node_id: String::new(),
        ..c.clone()
    };
    assert!(bad.validate().unwrap_err().to_string().contains("node_id"));
    let bad = SyncConfig {
        batch_max: 0,
        ..c.clone()
    };
    assert!(
        bad.validate()
            .unwrap_err()
            .to_string()
            .contains("batch_max")
    );
    let bad = SyncConfig {
        url: "http://x".into(),
        ..c
    };
    assert!(bad.validate().is_err());
    let m = map();
    let outside = RedisSync::spawn(
        SyncConfig {
            node_id: "x".into(),
            insecure_unsigned: true,
            ..SyncConfig::default()
        },
        m,
    );
    // Its own thread and runtime: it starts outside any (a hostile Redis costs that thread
    // alone), and dropping the handle ends it.
    assert!(outside.is_ok(), "{outside:?}");
    drop(outside);
}

/// Redis server time now, ms.
fn redis_now(r: &RedisServer) -> i64 {
    let (s, us): (i64, i64) = redis::cmd("TIME").query(&mut r.conn()).unwrap();
    s * 1000 + us / 1000
}

/// Writes one stream entry `d` as anyone with write access to Redis could.
/// Puts `value` back under `net`'s key and in the snapshot's index, as whoever can write
/// to Redis can (expiring at `score`, Redis time).
fn plant(r: &RedisServer, net: IpNet, value: &[u8], score: i64) {
    let conn = &mut r.conn();
    let _: () = redis::cmd("SET")
        .arg(format!("t:block:{net}"))
        .arg(value)
        .query(conn)
        .unwrap();
    let _: i64 = redis::cmd("ZADD")
        .arg("t:blocks")
        .arg(score)
        .arg(net.to_string())
        .query(conn)
        .unwrap();
}

fn xadd(r: &RedisServer, d: &str) {
    let _: String = redis::cmd("XADD")
        .arg("t:log")
        .arg("*")
        .arg("d")
        .arg(d)
        .query(&mut r.conn())
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn forged_replayed_oversized_and_unsigned_records_are_refused() {
    use shield::redis_sync::Refused;
    use shield::redis_sync::record::{KEY_PURPOSE, Lifts, Sealer};
    logs();
    let Some(r) = RedisServer::start() else {
        return;
    };
    let (a, b, sa, sb) = synced_pair(&r, "a", "b").await;
    let refused =
        |why: Refused| sb.stats().refused[Refused::ALL.iter().position(|x| *x == why).unwrap()];

    // A genuine decision of A reaches B; B's own operator block stands beside it.
    a.insert(local(1, MIN));
    until("A's block on B", || b.get(host(1)).is_some()).await;
    b.insert(BlockEntry::operator(host(9), MIN, unix_ms(), "hand"));
    // Its stream entry, written again by whoever can write to Redis: refused as a replay
    // (B lifted the block meanwhile: it stays lifted).
    let genuine: Vec<(String, Vec<String>)> = redis::cmd("XRANGE")
        .arg("t:log")
        .arg("-")
        .arg("+")
        .query(&mut r.conn())
        .unwrap();
    let d = genuine[0].1[1].clone();
    assert!(d.contains("\"tag\""), "{d}");
    assert!(b.remove(host(1), RemoveCause::Local));
    xadd(&r, &d);
    until("the replay refused", || refused(Refused::Replay) >= 1).await;
    assert!(b.get(host(1)).is_none(), "a replay does not block again");

    let far = redis_now(&r) + 10 * 365 * 86_400_000;
    // No tag: refused (B has a key).
    xadd(
        &r,
        &format!(
            r#"{{"v":2,"op":"add","net":"0.0.0.0/0","node":"x","start":1,"seq":1,"exp":{far},"origin":"operator","evidence":"operator","scope":"all"}}"#
        ),
    );
    // A tag that does not verify.
    xadd(
        &r,
        &format!(
            r#"{{"v":2,"op":"add","net":"10.0.0.1/32","node":"x","start":1,"seq":2,"exp":{far},"origin":"operator","evidence":"operator","scope":"all","tag":"{}"}}"#,
            "00".repeat(32)
        ),
    );
    // The old record version, and a removal in it of B's own operator block.
    xadd(
        &r,
        r#"{"op":"add","net":"0.0.0.0/0","node":"x","exp":9223372036854775807,"origin":"local"}"#,
    );
    xadd(
        &r,
        &format!(r#"{{"op":"del","net":"{}","node":"x"}}"#, host(9)),
    );
    // Far past the size bound, before any decoding.
    xadd(
        &r,
        &format!(r#"{{"v":2,"reason":"{}"}}"#, "x".repeat(300_000)),
    );
    // Signed with the fleet key by a node gone wrong: still judged.
    let key = shield::fleet_key::FleetKey::load(&key_file())
        .unwrap()
        .derive(KEY_PURPOSE);
    let rogue = Sealer::new(Some(key), "rogue", unix_ms());
    let op = |net: &str, ttl: Duration| {
        BlockEntry::operator(net.parse().unwrap(), ttl, unix_ms(), "rogue")
    };
    let now = redis_now(&r);
    // Its mark, as any node writes one: it vouches for the rogue's records.
    let _: () = redis::cmd("HSET")
        .arg("t:marks")
        .arg("rogue")
        .arg(rogue.mark(now, &Lifts::default()))
        .query(&mut r.conn())
        .unwrap();
    xadd(&r, &rogue.add(&op("0.0.0.0/0", MIN), now + 60_000));
    xadd(&r, &rogue.add(&op("10.0.0.2/32", MIN), i64::MAX));
    let suspect =
        BlockEntry::with_ttl(host(3), MIN, unix_ms(), "udp", Origin::Local, Evidence::Udp);
    xadd(&r, &rogue.add(&suspect, now + 60_000));
    xadd(&r, &rogue.del(&host(9), Origin::Local));
    // And one it may: a narrow block, obeyed.
    xadd(&r, &rogue.add(&op("10.0.0.4/32", MIN), now + 60_000));
    until("the rogue's narrow block", || {
        b.get("10.0.0.4/32".parse().unwrap()).is_some()
    })
    .await;
    until("every refusal counted", || {
        refused(Refused::Unsigned) >= 1
            && refused(Refused::BadTag) >= 1
            && refused(Refused::Version) >= 2
            && refused(Refused::Oversized) >= 1
            && refused(Refused::ShortPrefix) >= 1
            && refused(Refused::Expiry) >= 1
            && refused(Refused::Unproven) >= 1
    })
    .await;
    let st = sb.stats();
    println!("B refused: {:?}", st.refused);
    assert!(st.removals_not_lifted >= 1, "{st:?}");
    // Nothing absurd went in; B's own operator block stands.
    let nets: HashSet<String> = b.entries().iter().map(|e| e.net.to_string()).collect();
    for bad in ["0.0.0.0/0", "10.0.0.1/32", "10.0.0.2/32", "10.0.0.3/32"] {
        assert!(!nets.contains(bad), "{bad} in {nets:?}");
    }
    assert_eq!(b.get(host(9)).unwrap().origin, Origin::Operator);
    sa.shutdown().await;
    sb.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_that_starts_late_refuses_replays_of_records_older_than_its_snapshot() {
    use shield::redis_sync::Refused;
    logs();
    let Some(r) = RedisServer::start() else {
        return;
    };
    let a = map();
    let sa = spawn(cfg(&r.url(), "a"), &a);
    synced(&sa).await;
    // A's operator blocks a host, lifts it, blocks it again: add, del, add in the stream.
    let net = host(20);
    a.insert(BlockEntry::operator(net, MIN, unix_ms(), "first"));
    assert!(a.remove(net, RemoveCause::Operator));
    a.insert(BlockEntry::operator(net, MIN, unix_ms(), "again"));
    let log = || -> Vec<(String, Vec<String>)> {
        redis::cmd("XRANGE")
            .arg("t:log")
            .arg("-")
            .arg("+")
            .query(&mut r.conn())
            .unwrap()
    };
    // Records travel batched; each is signed alone, so a single one can be lifted out.
    let records = || -> Vec<serde_json::Value> {
        log()
            .into_iter()
            .flat_map(|(_, f)| match serde_json::from_str(&f[1]).unwrap() {
                serde_json::Value::Array(a) => a,
                v => vec![v],
            })
            .collect()
    };
    let deadline = std::time::Instant::now() + DEADLINE;
    while records().len() < 3 {
        assert!(
            std::time::Instant::now() < deadline,
            "A's records: {:?}",
            log()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let del = records()
        .into_iter()
        .find(|d| d["op"] == "del")
        .expect("A's del record")
        .to_string();
    // C starts now: it learns A's block from the snapshot, never having seen the del.
    let c = map();
    let sc = spawn(cfg(&r.url(), "c"), &c);
    synced(&sc).await;
    until("A's block on C", || c.get(net).is_some()).await;
    // The old del, written again by whoever can write to Redis: refused, the block stands.
    xadd(&r, &del);
    let replays = || {
        sc.stats().refused[Refused::ALL
            .iter()
            .position(|x| *x == Refused::Replay)
            .unwrap()]
    };
    until("the replayed del refused", || replays() >= 1).await;
    assert!(c.get(net).is_some(), "a replayed del lifted A's block on C");
    // Replayed while a node loads the snapshot (made slow by members planted in its index,
    // with no key): refused too, the block it loads standing (the stream from where the
    // load began is read before the replay table stands at the snapshot).
    let mut p = redis::pipe();
    let far = redis_now(&r) + 600_000;
    for i in 0..300_000u32 {
        p.cmd("ZADD")
            .arg("t:blocks")
            .arg(far)
            .arg(format!(
                "10.{}.{}.{}/32",
                100 + (i >> 16),
                (i >> 8) & 255,
                i & 255
            ))
            .ignore();
    }
    let _: () = p.query(&mut r.conn()).unwrap();
    let d = map();
    let sd = spawn(cfg(&r.url(), "d"), &d);
    let t0 = std::time::Instant::now();
    while sd.stats().snapshots == 0 && t0.elapsed() < Duration::from_millis(50) {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(
        sd.stats().snapshots,
        0,
        "the snapshot loaded too fast to test"
    );
    xadd(&r, &del);
    synced(&sd).await;
    until("A's block on D", || d.get(net).is_some()).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(
        d.get(net).is_some(),
        "a del replayed during D's load lifted A's block"
    );
    sa.shutdown().await;
    sc.shutdown().await;
    sd.shutdown().await;
}

/// Certificates for a TLS test: a CA, the server's (127.0.0.1) and a client's, by openssl.
fn tls_files(dir: &std::path::Path) -> bool {
    let run = |args: &[&str]| {
        std::process::Command::new("openssl")
            .args(args)
            .current_dir(dir)
            .output()
            .is_ok_and(|o| o.status.success())
    };
    std::fs::write(dir.join("san.ext"), "subjectAltName=IP:127.0.0.1\n").unwrap();
    // Extensions make version 3 certificates (webpki refuses version 1).
    std::fs::write(dir.join("client.ext"), "extendedKeyUsage=clientAuth\n").unwrap();
    run(&[
        "req",
        "-x509",
        "-newkey",
        "ec",
        "-pkeyopt",
        "ec_paramgen_curve:P-256",
        "-nodes",
        "-keyout",
        "ca.key",
        "-out",
        "ca.crt",
        "-days",
        "2",
        "-subj",
        "/CN=test CA",
    ]) && run(&[
        "req",
        "-newkey",
        "ec",
        "-pkeyopt",
        "ec_paramgen_curve:P-256",
        "-nodes",
        "-keyout",
        "server.key",
        "-out",
        "server.csr",
        "-subj",
        "/CN=127.0.0.1",
    ]) && run(&[
        "x509",
        "-req",
        "-in",
        "server.csr",
        "-CA",
        "ca.crt",
        "-CAkey",
        "ca.key",
        "-CAcreateserial",
        "-out",
        "server.crt",
        "-days",
        "2",
        "-extfile",
        "san.ext",
    ]) && run(&[
        "req",
        "-newkey",
        "ec",
        "-pkeyopt",
        "ec_paramgen_curve:P-256",
        "-nodes",
        "-keyout",
        "client.key",
        "-out",
        "client.csr",
        "-subj",
        "/CN=palisade",
    ]) && run(&[
        "x509",
        "-req",
        "-in",
        "client.csr",
        "-CA",
        "ca.crt",
        "-CAkey",
        "ca.key",
        "-CAcreateserial",
        "-out",
        "client.crt",
        "-days",
        "2",
        "-extfile",
        "client.ext",
    ])
}

/// The ACL README gives for the sync's user: its keys and the commands it uses, no more.
const ACL: &str = "on >s3cret resetkeys ~t:* resetchannels -@all +get +set +del +mget +exists \
    +zadd +zrem +zremrangebyscore +zscan +zrangebyscore +zrevrangebyscore +zcard +pexpire +expire \
    +xadd +xread +xinfo|stream +xlen +time +ping +hello +client|setname +multi +exec +discard \
    +info +role +hset +hscan +hget";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_and_an_acl_user_with_the_least_it_needs() {
    use shield::redis_sync::Refused;
    logs();
    if !palisade_tests::redis::available() {
        palisade_tests::skipped("redis-server missing: the TLS test did not run");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    assert!(tls_files(d), "openssl could not make the test certificates");
    let port = palisade_tests::redis::free_port();
    let mut srv = std::process::Command::new("redis-server")
        .args([
            "--port",
            "0",
            "--tls-port",
            &port.to_string(),
            "--bind",
            "127.0.0.1",
        ])
        .args([
            "--tls-cert-file",
            "server.crt",
            "--tls-key-file",
            "server.key",
        ])
        .args(["--tls-ca-cert-file", "ca.crt", "--tls-auth-clients", "yes"])
        .args(["--save", "", "--appendonly", "no"])
        .args(["--user", "palisade"])
        .args(ACL.split_whitespace())
        // Granted before the replay marks existed: no HSET, no HSCAN.
        .args(["--user", "older"])
        .args(ACL.replace(" +hset +hscan +hget", "").split_whitespace())
        // Without MULTI: the writer's transactions are refused.
        .args(["--user", "nomulti"])
        .args(ACL.replace(" +multi", "").split_whitespace())
        .args(["--user", "default", "off"])
        .current_dir(d)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("redis-server");
    let tls_as = |user: &str, node: &str, password: &str| SyncConfig {
        presence_ms: 100,
        url: format!("rediss://{user}:{password}@127.0.0.1:{port}"),
        ca_file: Some(d.join("ca.crt")),
        client_cert: Some(d.join("client.crt")),
        client_key: Some(d.join("client.key")),
        ..cfg("unused", node)
    };
    let tls = |node: &str, password: &str| tls_as("palisade", node, password);
    let (a, b) = (map(), map());
    let sa = spawn(tls("a", "s3cret"), &a);
    let sb = spawn(tls("b", "s3cret"), &b);
    synced(&sa).await;
    synced(&sb).await;
    a.insert(local(1, MIN));
    until("A's block on B over TLS", || b.get(host(1)).is_some()).await;
    assert!(b.remove_from_peer(host(1), "a", false));
    assert!(a.remove(host(1), RemoveCause::Operator));
    b.insert(local(2, MIN));
    until("B's block on A", || a.get(host(2)).is_some()).await;
    // Heartbeats go too: the ACL allows every command they send.
    let beats = sa.stats().heartbeats;
    until("heartbeats under the ACL", || {
        sa.stats().heartbeats >= beats + 3
    })
    .await;
    // A user without the marks' commands writes its batches (not aborted for ever), but no
    // mark vouches for them: peers refuse them, and count it.
    let o = map();
    let so = spawn(tls_as("older", "o", "s3cret"), &o);
    synced(&so).await;
    o.insert(local(3, MIN));
    let at = Refused::ALL
        .iter()
        .position(|x| *x == Refused::Unvouched)
        .unwrap();
    let unvouched = || sb.stats().refused[at];
    until("the older user's block refused on B", || unvouched() >= 1).await;
    assert!(b.get(host(3)).is_none());
    until("the older user's batch written", || {
        so.stats().published >= 1
    })
    .await;
    so.shutdown().await;
    // A user without MULTI: the writer says so at connect, never connected (redis-rs panicked
    // on each batch's refused MULTI, a backtrace each, the cause never said).
    let n = map();
    let sn = spawn(tls_as("nomulti", "n", "s3cret"), &n);
    n.insert(local(4, MIN));
    until("the writer refused at connect", || {
        sn.stats().connect_errors >= 2
    })
    .await;
    let st = sn.stats();
    assert!(
        !st.writer_connected && st.write_errors == 0 && st.published == 0,
        "{st:?}"
    );
    drop(sn);
    // The wrong password never syncs.
    let c = map();
    let sc = spawn(tls("c", "wrong"), &c);
    until("the wrong password fails", || {
        sc.stats().connect_errors >= 1
    })
    .await;
    assert!(!sc.is_synced());
    // Plain TCP to a TLS port fails too.
    let plain = SyncConfig {
        url: format!("redis://palisade:s3cret@127.0.0.1:{port}"),
        ..cfg("unused", "p")
    };
    let p = map();
    let sp = spawn(plain, &p);
    until("plain text fails", || sp.stats().connect_errors >= 1).await;
    for s in [sa, sb, sc, sp] {
        s.shutdown().await;
    }
    let _ = srv.kill();
    let _ = srv.wait();
}

/// What anyone with write access to Redis can do to the snapshot's structures (no fleet key
/// needed) must not stop a node from loading it, and a Redis that lost its data gets every
/// node's blocks back though no node writes anything.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_vandalised_snapshot_still_loads_and_a_flushed_redis_is_refilled_by_idle_nodes() {
    logs();
    let Some(r) = RedisServer::start() else {
        return;
    };
    let a = map();
    let sa = spawn(cfg(&r.url(), "a"), &a);
    synced(&sa).await;
    a.insert_batch((0..5).map(|i| local(i, MIN)));
    until("A wrote its blocks", || sa.stats().published >= 5).await;
    // A member that is no UTF-8, and one that is no prefix, beside the real ones.
    let far = redis_now(&r) + 600_000;
    let _: i64 = redis::cmd("ZADD")
        .arg("t:blocks")
        .arg(far)
        .arg(&b"\xff\xfe"[..])
        .arg(far)
        .arg("not-a-prefix")
        .query(&mut r.conn())
        .unwrap();
    let b = map();
    let sb = spawn(cfg(&r.url(), "b"), &b);
    synced(&sb).await;
    until("B loaded A's blocks from the snapshot", || b.len() == 5).await;
    let refused: u64 = sb.stats().refused.iter().sum();
    assert!(refused >= 2, "{:?}", sb.stats());

    // FLUSHALL while both are idle: each notices on its own and A republishes.
    let _: () = redis::cmd("FLUSHALL").query(&mut r.conn()).unwrap();
    until("A's blocks back in Redis", || {
        let n: u64 = redis::cmd("ZCARD")
            .arg("t:blocks")
            .query(&mut r.conn())
            .unwrap();
        n == 5
    })
    .await;
    // Counted once the republish is done (its stale-record scan comes after the writes).
    until("A's republish counted", || sa.stats().full_republishes >= 1).await;
    // A node starting now gets them from the snapshot.
    let c = map();
    let sc = spawn(cfg(&r.url(), "c"), &c);
    synced(&sc).await;
    until("C loaded A's blocks", || c.len() == 5).await;
    sa.shutdown().await;
    sb.shutdown().await;
    sc.shutdown().await;
}

/// Replaces `key` with a list (a type the sync never writes there).
fn as_a_list(r: &RedisServer, key: &str) {
    let _: () = redis::cmd("DEL").arg(key).query(&mut r.conn()).unwrap();
    let _: i64 = redis::cmd("RPUSH")
        .arg(key)
        .arg("x")
        .query(&mut r.conn())
        .unwrap();
}

/// A snapshot key of the wrong type: the stream still carries every decision (no retry
/// that writes it again: once, and once more when the key, replaced, is written again whole),
/// the failure is counted, and the key replaced.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_snapshot_key_of_the_wrong_type_never_duplicates_the_stream() {
    logs();
    let Some(r) = RedisServer::start() else {
        return;
    };
    let (a, b, sa, sb) = synced_pair(&r, "a", "b").await;
    as_a_list(&r, "t:blocks");
    let before = xlen(&r);
    a.insert(local(7, MIN));
    until("B has the block", || b.get(host(7)).is_some()).await;
    until("the failure counted", || sa.stats().write_errors >= 1).await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(
        (before + 1..=before + 2).contains(&xlen(&r)),
        "one stream entry for one decision, one for its rewrite"
    );
    assert_eq!(sa.stats().keys_repaired, 1, "{:?}", sa.stats());
    let t: String = redis::cmd("TYPE")
        .arg("t:blocks")
        .query(&mut r.conn())
        .unwrap();
    assert_eq!(t, "zset");
    assert!(sb.stats().received <= 2, "{:?}", sb.stats());
    assert_eq!(sa.stats().buffered, 0, "{:?}", sa.stats());
    sa.shutdown().await;
    sb.shutdown().await;
}

/// An epoch key of the wrong type: the sync goes on, without republishing on every batch, and
/// the key is replaced (it was logged every second, and Redis's loss of data went unseen).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_epoch_key_of_the_wrong_type_leaves_the_sync_working() {
    logs();
    let Some(r) = RedisServer::start() else {
        return;
    };
    let (a, b, sa, sb) = synced_pair(&r, "a", "b").await;
    as_a_list(&r, "t:epoch");
    for i in 0..20 {
        a.insert(local(i, MIN));
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    until("B has A's blocks", || b.len() == 20).await;
    until("the epoch key is a string again", || {
        let t: String = redis::cmd("TYPE")
            .arg("t:epoch")
            .query(&mut r.conn())
            .unwrap();
        t == "string"
    })
    .await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    let st = sa.stats();
    assert!(st.full_republishes <= 2, "{st:?}");
    assert!(st.keys_repaired + sb.stats().keys_repaired >= 1, "{st:?}");
    sa.shutdown().await;
    sb.shutdown().await;
}

/// A Redis restored from an older dump holds a record of a block its node lifted since: the
/// node retracts it at its next republish, so that no node loads it from a snapshot again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stale_record_of_a_lifted_block_is_retracted_by_its_node() {
    logs();
    let Some(r) = RedisServer::start() else {
        return;
    };
    let a = map();
    let sa = spawn(cfg(&r.url(), "a"), &a);
    synced(&sa).await;
    a.insert(local(40, MIN));
    let key = format!("t:block:{}", host(40));
    until("A wrote the block", || {
        let v: Option<Vec<u8>> = redis::cmd("GET").arg(&key).query(&mut r.conn()).unwrap();
        v.is_some()
    })
    .await;
    let value: Vec<u8> = redis::cmd("GET").arg(&key).query(&mut r.conn()).unwrap();
    let score: f64 = redis::cmd("ZSCORE")
        .arg("t:blocks")
        .arg(host(40).to_string())
        .query(&mut r.conn())
        .unwrap();
    assert!(a.remove(host(40), RemoveCause::Operator));
    until("A wrote the lift", || {
        let v: Option<Vec<u8>> = redis::cmd("GET").arg(&key).query(&mut r.conn()).unwrap();
        v.is_none()
    })
    .await;
    // The "restore": the record and its place in the snapshot are back, and the epoch is new.
    let _: () = redis::cmd("SET")
        .arg(&key)
        .arg(&value)
        .arg("PX")
        .arg(60_000)
        .query(&mut r.conn())
        .unwrap();
    let _: i64 = redis::cmd("ZADD")
        .arg("t:blocks")
        .arg(score)
        .arg(host(40).to_string())
        .query(&mut r.conn())
        .unwrap();
    let _: () = redis::cmd("SET")
        .arg("t:epoch")
        .arg("restored")
        .query(&mut r.conn())
        .unwrap();
    until("A retracted its stale record", || {
        sa.stats().stale_retracted >= 1
    })
    .await;
    let v: Option<Vec<u8>> = redis::cmd("GET").arg(&key).query(&mut r.conn()).unwrap();
    assert!(v.is_none(), "the stale record is gone");
    assert!(
        !started_now_holds(&r, "c", host(40)).await,
        "a node started now does not load it"
    );
    sa.shutdown().await;
}

/// Whoever can write to Redis, without the fleet key, can neither lift blocks nor bring lifted
/// ones back: (1) a lifted record of A's planted under another prefix's key, with an epoch
/// change, makes A retract nothing of C's (a retraction lifts only A's own entries, and a
/// record counts only under its own key); (2) deleting the snapshot and forcing a gap lifts
/// none of B's peer entries; (3) A's lifted record planted back under its own key is not
/// loaded by B, which saw its removal.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_writers_without_the_key_neither_lift_blocks_nor_bring_lifted_ones_back() {
    logs();
    let Some(r) = RedisServer::start() else {
        return;
    };
    let (a, b, c) = (map(), map(), map());
    let sa = spawn(cfg(&r.url(), "a"), &a);
    let sb = spawn(cfg(&r.url(), "b"), &b);
    let sc = spawn(cfg(&r.url(), "c"), &c);
    synced(&sa).await;
    synced(&sb).await;
    synced(&sc).await;
    let ten = Duration::from_secs(600);
    // A blocks 60 (later lifted) and 61.
    a.insert(local(60, ten));
    a.insert(local(61, ten));
    until("B holds A's blocks", || b.len() == 2).await;
    let key = |i: u32| format!("t:block:{}", host(i));
    // A's record of 60, captured before A lifts it.
    let captured: Vec<u8> = redis::cmd("GET").arg(key(60)).query(&mut r.conn()).unwrap();
    assert!(a.remove(host(60), RemoveCause::Operator));
    until("A's lift reached B", || b.get(host(60)).is_none()).await;
    // Now C blocks 60.
    c.insert(local(60, ten));
    until("B holds C's block of 60", || b.get(host(60)).is_some()).await;
    let far = redis_now(&r) + 600_000;
    let conn = &mut r.conn();
    // (1) Planted under 62's key, with an epoch change: A republishes.
    let _: () = redis::cmd("SET")
        .arg(key(62))
        .arg(&captured)
        .query(conn)
        .unwrap();
    let _: i64 = redis::cmd("ZADD")
        .arg("t:blocks")
        .arg(far)
        .arg(host(62).to_string())
        .query(conn)
        .unwrap();
    let _: () = redis::cmd("SET")
        .arg("t:epoch")
        .arg("vandal")
        .query(conn)
        .unwrap();
    until("A republished", || sa.stats().full_republishes >= 1).await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(
        sa.stats().stale_retracted,
        0,
        "nothing of A's own under its own key"
    );
    assert!(b.get(host(60)).is_some(), "C's block of 60 still on B");
    // (2) The snapshot deleted and a gap forced; (3) A's lifted record planted back under its
    // own key.
    let _: i64 = redis::cmd("DEL")
        .arg("t:blocks")
        .arg(key(61))
        .query(conn)
        .unwrap();
    let _: () = redis::cmd("SET")
        .arg(key(60))
        .arg(&captured)
        .query(conn)
        .unwrap();
    let _: i64 = redis::cmd("ZADD")
        .arg("t:blocks")
        .arg(far)
        .arg(host(60).to_string())
        .query(conn)
        .unwrap();
    let gaps = sb.stats().gaps;
    let _: () = redis::pipe()
        .atomic()
        .cmd("XADD")
        .arg("t:log")
        .arg("*")
        .arg("x")
        .arg("y")
        .ignore()
        .cmd("XTRIM")
        .arg("t:log")
        .arg("MAXLEN")
        .arg(0)
        .ignore()
        .query(conn)
        .unwrap();
    until("B saw the gap and read the snapshot", || {
        sb.stats().gaps > gaps
    })
    .await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(
        b.get(host(61)).is_some(),
        "deleting 61's key lifted nothing"
    );
    let from_a: Vec<_> = b
        .entries()
        .into_iter()
        .filter(|e| e.net == host(60) && e.node.as_deref() == Some("a"))
        .collect();
    assert!(from_a.is_empty(), "A's lifted block came back: {from_a:?}");
    assert!(b.get(host(60)).is_some(), "C's block of 60 still on B");
    sa.shutdown().await;
    sb.shutdown().await;
    sc.shutdown().await;
}

/// A lifted block's record planted back in Redis — genuine and signed, kept by whoever can
/// write to Redis — is obeyed by no node started later, the node that decided it restarted
/// included: each node's mark carries its lifts (its own, and those of its blocks another
/// node's operator lifted), and a node started later takes a snapshot record only where a
/// fresh mark of its node vouches for it. Replayed into the stream, it is refused as well.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lifted_blocks_record_planted_back_is_obeyed_by_no_node_started_later() {
    use shield::redis_sync::Refused;
    logs();
    let Some(r) = RedisServer::start() else {
        return;
    };
    let (a, c) = (map(), map());
    let sa = spawn(cfg(&r.url(), "a"), &a);
    let sc = spawn(cfg(&r.url(), "c"), &c);
    synced(&sa).await;
    synced(&sc).await;
    let ten = Duration::from_secs(600);
    // A blocks 80 (lifted below) and 82 (kept); C blocks 81 (lifted below by A's operator).
    a.insert(local(80, ten));
    a.insert(local(82, ten));
    c.insert(local(81, ten));
    until("A's blocks on C, C's on A", || c.len() == 3 && a.len() == 3).await;
    let key = |i: u32| format!("t:block:{}", host(i));
    let conn = &mut r.conn();
    let captured: Vec<(u32, Vec<u8>)> = [80, 81]
        .into_iter()
        .map(|i| (i, redis::cmd("GET").arg(key(i)).query(conn).unwrap()))
        .collect();
    let written = sc.stats().marks_written;
    assert!(a.remove(host(80), RemoveCause::Operator));
    assert!(a.remove(host(81), RemoveCause::Operator));
    until("both lifts on C", || {
        c.get(host(80)).is_none() && c.get(host(81)).is_none()
    })
    .await;
    until("C's mark says its block was lifted", || {
        sc.stats().marks_written > written
    })
    .await;
    // Planted back: the records under their own keys, in the snapshot's index.
    let far = redis_now(&r) + 600_000;
    for (i, v) in &captured {
        plant(&r, host(*i), v, far);
    }
    // A node started now loads the snapshot: A's kept block, neither lifted one.
    let d = map();
    let sd = spawn(cfg(&r.url(), "d"), &d);
    synced(&sd).await;
    until("A's kept block on D", || d.get(host(82)).is_some()).await;
    let refused =
        |why: Refused| sd.stats().refused[Refused::ALL.iter().position(|x| *x == why).unwrap()];
    assert!(refused(Refused::Lifted) >= 2, "{:?}", sd.stats());
    // Replayed into the stream too: refused by every node (as replays, or as lifted).
    let before = refused(Refused::Replay) + refused(Refused::Lifted);
    for (_, v) in &captured {
        xadd(&r, std::str::from_utf8(v).unwrap());
    }
    until("D refused the replays", || {
        refused(Refused::Replay) + refused(Refused::Lifted) >= before + 2
    })
    .await;
    // A restarted (no state file: it takes its own blocks back from Redis).
    sa.shutdown().await;
    let a2 = map();
    let sa2 = spawn(cfg(&r.url(), "a"), &a2);
    synced(&sa2).await;
    until("A's kept block back on A", || a2.get(host(82)).is_some()).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    for (who, m) in [("C", &c), ("D", &d), ("A restarted", &a2)] {
        for i in [80, 81] {
            assert!(m.get(host(i)).is_none(), "{who} obeys the lifted block {i}");
        }
    }
    for s in [sa2, sc, sd] {
        s.shutdown().await;
    }
}

/// Junk fields planted in the marks hash (past what a scan reads) hide no node's mark: a
/// node started then asks the marks of the nodes its snapshot names, and takes their blocks
/// (it took none of them).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn junk_in_the_marks_hash_hides_no_nodes_mark() {
    logs();
    let Some(r) = RedisServer::start() else {
        return;
    };
    let a = map();
    let sa = spawn(cfg(&r.url(), "a"), &a);
    synced(&sa).await;
    a.insert(local(95, MIN));
    let conn = &mut r.conn();
    until("A's block in the snapshot", || {
        let v: Option<Vec<u8>> = redis::cmd("GET")
            .arg(format!("t:block:{}", host(95)))
            .query(&mut r.conn())
            .unwrap();
        v.is_some()
    })
    .await;
    for chunk in (0..300_000u32).collect::<Vec<_>>().chunks(50_000) {
        let mut p = redis::pipe();
        for i in chunk {
            p.cmd("HSET")
                .arg("t:marks")
                .arg(format!("junk{i:06}"))
                .arg("x")
                .ignore();
        }
        let _: () = p.query(conn).unwrap();
    }
    let d = map();
    let sd = spawn(cfg(&r.url(), "d"), &d);
    synced(&sd).await;
    until("A's block on D", || d.get(host(95)).is_some()).await;
    sa.shutdown().await;
    sd.shutdown().await;
}

/// A control-group member's lift of the block it added retracts that node's decision on
/// every node, and lifts no other node's block of the prefix (an operator's removal would).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_members_lift_retracts_its_nodes_block_and_no_one_elses() {
    logs();
    let Some(r) = RedisServer::start() else {
        return;
    };
    let (a, b, c) = (map(), map(), map());
    let sa = spawn(cfg(&r.url(), "a"), &a);
    let sb = spawn(cfg(&r.url(), "b"), &b);
    let sc = spawn(cfg(&r.url(), "c"), &c);
    for s in [&sa, &sb, &sc] {
        synced(s).await;
    }
    // A member blocks 91 on A; C then decides 91 for itself.
    a.insert(BlockEntry::operator(host(91), MIN, unix_ms(), "member").by_member(7));
    until("A's block on C", || c.get(host(91)).is_some()).await;
    c.insert(local(91, MIN));
    until("C's own block of 91", || {
        c.get(host(91)).is_some_and(|e| e.origin == Origin::Local)
    })
    .await;
    assert_eq!(a.get(host(91)).unwrap().by, Some(7));
    until("C's block of 91 on B", || {
        b.get(host(91))
            .is_some_and(|e| e.node.as_deref() == Some("c"))
    })
    .await;
    assert!(a.remove(host(91), RemoveCause::Retracted));
    until("A's retraction read by B and C", || {
        [&sb, &sc].iter().all(|s| {
            let st = s.stats();
            st.received_removals + st.removals_not_lifted >= 1
        })
    })
    .await;
    assert!(
        c.get(host(91)).is_some_and(|e| e.origin == Origin::Local),
        "C's own block of 91 lifted by a member of A"
    );
    assert!(b.get(host(91)).is_some(), "C's block of 91 lifted on B");
    // A member's block on A lifted by B's operator: A's mark says so, and its record
    // planted back is taken by no node started later.
    a.insert(BlockEntry::operator(host(92), MIN, unix_ms(), "member").by_member(7));
    until("A's member block on B", || b.get(host(92)).is_some()).await;
    let key = format!("t:block:{}", host(92));
    let conn = &mut r.conn();
    let captured: Vec<u8> = redis::cmd("GET").arg(&key).query(conn).unwrap();
    let written = sa.stats().marks_written;
    assert!(b.remove(host(92), RemoveCause::Operator));
    until("B's lift on A, and A's mark", || {
        a.get(host(92)).is_none() && sa.stats().marks_written > written
    })
    .await;
    plant(&r, host(92), &captured, redis_now(&r) + 600_000);
    assert!(
        !started_now_holds(&r, "d", host(92)).await,
        "the lifted member block came back"
    );
    for s in [sa, sb, sc] {
        s.shutdown().await;
    }
}

/// A member that is no UTF-8 in a node's presence key (anyone who can write to Redis can add
/// one) is passed over: the heartbeats go on, with no reconnect loop (it made thousands of
/// connections a second).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_presence_member_that_is_no_utf8_makes_no_reconnect_loop() {
    logs();
    let Some(r) = RedisServer::start() else {
        return;
    };
    let a = map();
    let (sa, key) = beating(&r, &a).await;
    let now = redis_now(&r);
    let _: i64 = redis::cmd("ZADD")
        .arg(&key)
        .arg(now + 600_000)
        .arg(&b"\xff\xfe"[..])
        .query(&mut r.conn())
        .unwrap();
    let (connects, beats) = (sa.stats().connects, sa.stats().heartbeats);
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let st = sa.stats();
    assert!(st.heartbeats >= beats + 5, "heartbeats went on: {st:?}");
    assert!(st.connects <= connects + 1, "no reconnect loop: {st:?}");
    sa.shutdown().await;
}

/// Calls of `cmd` Redis has served (INFO commandstats).
fn calls(r: &RedisServer, cmd: &str) -> u64 {
    let info: String = redis::cmd("INFO")
        .arg("commandstats")
        .query(&mut r.conn())
        .unwrap();
    let tag = format!("cmdstat_{cmd}:calls=");
    info.lines()
        .find_map(|l| l.strip_prefix(&tag))
        .and_then(|rest| rest.split(',').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or(0)
}

/// An entry planted at the stream's head, too big for a reply: every reader asked for the
/// stream's ends (XINFO, which sends the first entry whole) after every read, so Redis sent
/// it to every node about once a second for as long as it stayed (330 MB/s for 100 MB and
/// four nodes). Asked when entries come or the length moves, and while the head is one too
/// big at most every minute; decisions flow as before.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_huge_entry_at_the_streams_head_is_not_fetched_at_every_read() {
    logs();
    let Some(r) = RedisServer::start() else {
        return;
    };
    let (a, b, sa, sb) = synced_pair(&r, "a", "b").await;
    let big = vec![b'x'; 4 << 20];
    let _: () = redis::cmd("XTRIM")
        .arg("t:log")
        .arg("MAXLEN")
        .arg(0)
        .query(&mut r.conn())
        .unwrap();
    let _: String = redis::cmd("XADD")
        .arg("t:log")
        .arg("*")
        .arg("d")
        .arg(&big[..])
        .query(&mut r.conn())
        .unwrap();
    // Both readers see it (refused as oversized) and ask for the ends once.
    tokio::time::sleep(Duration::from_millis(600)).await;
    let before = calls(&r, "xinfo|stream");
    // Idle, the readers block 250 ms per read: ten reads each in 2.5 s.
    tokio::time::sleep(Duration::from_millis(2500)).await;
    let idle = calls(&r, "xinfo|stream") - before;
    assert!(idle <= 2, "XINFO while idle with a huge head: {idle}");
    // Decisions still flow.
    a.insert(local(91, MIN));
    until("A's block on B", || b.get(host(91)).is_some()).await;
    sa.shutdown().await;
    sb.shutdown().await;
}

/// Node "a" syncing with a heartbeat every 100 ms, and its presence key.
async fn beating(r: &RedisServer, a: &Arc<BlockMap>) -> (SyncHandle, String) {
    let sa = spawn(
        SyncConfig {
            presence_ms: 100,
            ..cfg(&r.url(), "a")
        },
        a,
    );
    synced(&sa).await;
    let key: Vec<String> = redis::cmd("KEYS")
        .arg("t:node:*")
        .query(&mut r.conn())
        .unwrap();
    assert_eq!(key.len(), 1, "{key:?}");
    (sa, key[0].clone())
}

/// A presence key made another type (anyone who can write to Redis can): every heartbeat
/// failed, at debug level, and with them the node-id conflict and deposed-master checks. It
/// is replaced, and the heartbeats go on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_presence_key_of_another_type_is_replaced() {
    logs();
    let Some(r) = RedisServer::start() else {
        return;
    };
    let a = map();
    let (sa, key) = beating(&r, &a).await;
    let _: () = redis::cmd("DEL").arg(&key).query(&mut r.conn()).unwrap();
    let _: () = redis::cmd("SET")
        .arg(&key)
        .arg("junk")
        .query(&mut r.conn())
        .unwrap();
    until("the presence key replaced", || {
        sa.stats().keys_repaired >= 1
    })
    .await;
    let beats = sa.stats().heartbeats;
    until("heartbeats again", || sa.stats().heartbeats > beats + 3).await;
    let t: String = redis::cmd("TYPE").arg(&key).query(&mut r.conn()).unwrap();
    assert_eq!(t, "zset");
    sa.shutdown().await;
}

/// A Redis that may evict keys (a memory limit and a policy but noeviction: block records
/// carry TTLs, so even `volatile-lru` takes them) is said at connect and shown, since nodes
/// loading its snapshot would miss what it evicted with nothing to count.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_redis_that_may_evict_keys_is_said_and_shown() {
    logs();
    let Some(r) = RedisServer::start() else {
        return;
    };
    let a = map();
    let sa = spawn(cfg(&r.url(), "a"), &a);
    synced(&sa).await;
    assert!(!sa.stats().evicting, "{:?}", sa.stats());
    sa.shutdown().await;
    for (k, v) in [("maxmemory", "100mb"), ("maxmemory-policy", "volatile-lru")] {
        let _: () = redis::cmd("CONFIG")
            .arg("SET")
            .arg(k)
            .arg(v)
            .query(&mut r.conn())
            .unwrap();
    }
    let b = map();
    let sb = spawn(cfg(&r.url(), "b"), &b);
    synced(&sb).await;
    assert!(sb.stats().evicting, "{:?}", sb.stats());
    sb.shutdown().await;
}

/// A presence key stuffed with members (anyone who can write to Redis can plant a hundred
/// thousand, scored ahead of Redis time so they never age out) slows no heartbeat: a beat
/// removes those in Redis's future and reads no more than its bound of the rest, counted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_presence_key_stuffed_with_planted_members_slows_no_heartbeat() {
    logs();
    let Some(r) = RedisServer::start() else {
        return;
    };
    let a = map();
    let sa = spawn(
        SyncConfig {
            presence_ms: 100,
            ..cfg(&r.url(), "a")
        },
        &a,
    );
    synced(&sa).await;
    let key: Vec<String> = redis::cmd("KEYS")
        .arg("t:node:*")
        .query(&mut r.conn())
        .unwrap();
    assert_eq!(key.len(), 1, "{key:?}");
    let now = redis_now(&r);
    // 60,000 in the future (a day ahead), 2,000 within the age-out: no reply of the whole key
    // fits the reply bound.
    let mut pipe = redis::pipe();
    for chunk in 0..62u32 {
        let mut z = redis::cmd("ZADD");
        z.arg(&key[0]);
        for i in 0..1_000u32 {
            let score = if chunk < 60 {
                now + 86_400_000
            } else {
                now + 100
            };
            z.arg(score + i as i64).arg(format!(
                "host:{chunk}:{i:016x}|{}|{:032x}",
                score + i as i64,
                i
            ));
        }
        pipe.add_command(z).ignore();
    }
    let _: () = pipe.query(&mut r.conn()).unwrap();
    let (connects, beats) = (sa.stats().connects, sa.stats().heartbeats);
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let st = sa.stats();
    assert!(st.heartbeats >= beats + 5, "heartbeats went on: {st:?}");
    assert!(st.connects <= connects + 1, "no reconnect loop: {st:?}");
    assert!(st.presence_truncated >= 1, "{st:?}");
    assert!(!st.node_id_conflict, "planted members are nobody's: {st:?}");
    let future: i64 = redis::cmd("ZCOUNT")
        .arg(&key[0])
        .arg(now + 3_600_000)
        .arg("+inf")
        .query(&mut r.conn())
        .unwrap();
    assert_eq!(future, 0, "members in Redis's future are removed");
    sa.shutdown().await;
}

/// An index stuffed with junk members (anyone who can write to Redis can add millions) is
/// read no further than four times what the map holds: a node starting behind it syncs at
/// once, and counts the index it read in part.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_junk_stuffed_snapshot_index_is_read_in_part_and_stalls_nothing() {
    logs();
    let Some(r) = RedisServer::start() else {
        return;
    };
    let far = redis_now(&r) + 600_000;
    let mut pipe = redis::pipe();
    for chunk in 0..10u32 {
        let mut z = redis::cmd("ZADD");
        z.arg("t:blocks");
        for i in 0..1_000u32 {
            z.arg(far).arg(format!("junk-{chunk}-{i}"));
        }
        pipe.add_command(z).ignore();
    }
    let _: () = pipe.query(&mut r.conn()).unwrap();
    let small = BlockMap::new(BlockConfig {
        capacity: 100,
        ..BlockConfig::default()
    });
    let s = spawn(cfg(&r.url(), "a"), &small);
    synced(&s).await;
    let st = s.stats();
    assert!(st.snapshot_truncated >= 1, "{st:?}");
    s.shutdown().await;
}

/// Elements past what the config implies (a stream entry and a presence member of 8 MB,
/// entries of 20,000 fields, as anyone who can write to Redis could plant) are cut before they
/// are read — counted, refused as oversized — and the sync goes on past them while they stay.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn elements_past_the_reply_bound_are_cut_unread_and_the_sync_goes_on_past_them() {
    logs();
    let Some(r) = RedisServer::start() else {
        return;
    };
    // read_count 4 and snapshot_page 100: replies of at most about 1.6 MB and 67,000
    // elements; a string of at most 263 KB.
    let small = |node: &str| SyncConfig {
        read_count: 4,
        snapshot_page: 100,
        presence_ms: 100,
        ..cfg(&r.url(), node)
    };
    let (a, b) = (map(), map());
    let (sa, sb) = (spawn(small("a"), &a), spawn(small("b"), &b));
    synced(&sa).await;
    synced(&sb).await;
    b.insert(local(1, MIN));
    until("B's first block on A", || a.get(host(1)).is_some()).await;
    let refused = |s: &SyncHandle| s.stats().refused.iter().sum::<u64>();
    let refused_before = refused(&sa);

    // A stream entry of 8 MB: A's reader cuts it unread, refuses it and reads on.
    let huge = "x".repeat(8 << 20);
    let _: String = redis::cmd("XADD")
        .arg("t:log")
        .arg("*")
        .arg("d")
        .arg(&huge)
        .query(&mut r.conn())
        .unwrap();
    // Entries of 20,000 fields each: two of them fill a reply's elements, so the second is
    // cut behind the first and read again first; each is refused alone.
    let mut many = redis::cmd("XADD");
    many.arg("t:log").arg("*");
    for i in 0..20_000 {
        many.arg(format!("f{i}")).arg("v");
    }
    for _ in 0..3 {
        let _: String = many.query(&mut r.conn()).unwrap();
    }
    b.insert(local(2, MIN));
    until("B's block past the entries on A", || {
        a.get(host(2)).is_some()
    })
    .await;
    assert!(sa.stats().replies_too_large >= 1, "{:?}", sa.stats());
    assert!(refused(&sa) >= refused_before + 4, "{:?}", sa.stats());

    // A member of 8 MB in A's presence key: cut, refused as nobody's beat; heartbeats go on.
    let key = "t:node:a";
    let before = sa.stats().replies_too_large;
    // (Scored within the age-out: one in Redis's future is removed unread.)
    let _: i64 = redis::cmd("ZADD")
        .arg(key)
        .arg(redis_now(&r) + 400)
        .arg(&huge)
        .query(&mut r.conn())
        .unwrap();
    until("the presence reply cut", || {
        sa.stats().replies_too_large > before
    })
    .await;
    let beats = sa.stats().heartbeats;
    until("heartbeats with the member there", || {
        sa.stats().heartbeats >= beats + 3
    })
    .await;
    assert!(!sa.stats().node_id_conflict);
    // The sync still carries decisions both ways.
    a.insert(local(3, MIN));
    until("A's block on B", || b.get(host(3)).is_some()).await;
    sa.shutdown().await;
    sb.shutdown().await;
}

/// A snapshot index and values planted to fill a reply (a ladder of lengths, each within
/// the string bound, that leaves the reply no room for anything after it) lose no genuine
/// record: a page cut behind its first member is read again for fewer members, values cut
/// behind others are read again one by one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_snapshot_page_of_planted_long_members_loses_no_genuine_record() {
    logs();
    let Some(r) = RedisServer::start() else {
        return;
    };
    // read_count 4 and snapshot_page 1000: replies of at most about 2.3 MB; strings of at
    // most 263 KB; one page holds the whole index.
    let small = |node: &str| SyncConfig {
        read_count: 4,
        snapshot_page: 1_000,
        ..cfg(&r.url(), node)
    };
    let a = map();
    let sa = spawn(small("a"), &a);
    synced(&sa).await;
    for i in 1..=30 {
        a.insert(local(i, MIN));
    }
    let conn = &mut r.conn();
    until("A's blocks in the index", || {
        redis::cmd("ZCARD")
            .arg("t:blocks")
            .query::<u64>(&mut r.conn())
            .unwrap()
            >= 30
    })
    .await;
    // Members and values of 200 KB, 8 KB, 1 KB, 100 and 20 bytes: whatever order a page
    // takes, the shorter ones fill what the longer left of the bound.
    let far = redis_now(&r) + 600_000;
    let mut n = 0u32;
    for (len, count) in [(200_000, 15), (8_000, 15), (1_000, 15), (100, 15), (20, 30)] {
        for _ in 0..count {
            n += 1;
            let long = format!("{n:06}{}", "x".repeat(len - 6));
            let _: () = redis::pipe()
                .cmd("ZADD")
                .arg("t:blocks")
                .arg(far)
                .arg(&long)
                .ignore()
                .cmd("ZADD")
                .arg("t:blocks")
                .arg(far)
                .arg(host(1_000 + n).to_string())
                .ignore()
                .cmd("SET")
                .arg(format!("t:block:{}", host(1_000 + n)))
                .arg(&long)
                .ignore()
                .query(conn)
                .unwrap();
        }
    }
    // The stream emptied: a node starting now has only the snapshot.
    let _: () = redis::pipe()
        .atomic()
        .cmd("XADD")
        .arg("t:log")
        .arg("*")
        .arg("x")
        .arg("y")
        .ignore()
        .cmd("XTRIM")
        .arg("t:log")
        .arg("MAXLEN")
        .arg(0)
        .ignore()
        .query(conn)
        .unwrap();
    let b = map();
    let sb = spawn(small("b"), &b);
    synced(&sb).await;
    let missing: Vec<u32> = (1..=30).filter(|&i| b.get(host(i)).is_none()).collect();
    assert!(
        missing.is_empty(),
        "A's blocks not loaded: {missing:?} {:?}",
        sb.stats()
    );
    assert!(sb.stats().replies_too_large >= 1, "{:?}", sb.stats());
    sa.shutdown().await;
    sb.shutdown().await;
}

/// Heartbeats are signed: members made up by whoever can write to Redis, or a node's own
/// old members replayed with fresh scores, never count as a second live process on its id
/// (which would report a conflict and hold back its retractions); a real second process does.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn made_up_or_replayed_heartbeats_raise_no_node_id_conflict() {
    logs();
    let Some(r) = RedisServer::start() else {
        return;
    };
    let beats = |node: &str| SyncConfig {
        presence_ms: 100,
        ..cfg(&r.url(), node)
    };
    let a = map();
    let sa = spawn(beats("a"), &a);
    synced(&sa).await;
    until("a few beats", || sa.stats().heartbeats >= 3).await;
    let own: Vec<(String, i64)> = redis::cmd("ZRANGE")
        .arg("t:node:a")
        .arg(0)
        .arg(-1)
        .arg("WITHSCORES")
        .query(&mut r.conn())
        .unwrap();
    let (old, _) = own[0].clone();
    for _ in 0..15 {
        let now = redis_now(&r);
        let _: i64 = redis::cmd("ZADD")
            .arg("t:node:a")
            .arg(now)
            .arg(format!("evil:1:ff|{now}|{}", "0".repeat(32)))
            .arg(now)
            .arg(&old)
            .arg(now)
            .arg("bare-token")
            .query(&mut r.conn())
            .unwrap();
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let st = sa.stats();
    assert_eq!(
        (st.node_id_conflicts, st.node_id_conflict),
        (0, false),
        "{st:?}"
    );
    assert!(st.presence_refused >= 10, "{st:?}");

    // A second process on the same id is still found.
    let twin = map();
    let st = spawn(beats("a"), &twin);
    until("the twin reported", || {
        sa.stats().node_id_conflict && st.stats().node_id_conflict
    })
    .await;
    st.shutdown().await;
    sa.shutdown().await;
}
