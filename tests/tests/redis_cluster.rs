//! Nodes sharing one Redis: a block made on A is enforced on B; removals follow; blocks made
//! while Redis is down arrive after it comes back; a burst of 100,000 blocks all arrives;
//! http-front's escalations reach dnsd on another node and dnsd's blocks reach http-front;
//! dnsd and http-front on one host get distinct default node ids; two live processes with
//! one node id are reported by both. Each test starts its own redis-server on a free
//! loopback port.

use std::collections::BTreeSet;
use std::net::{IpAddr, SocketAddr, UdpSocket};
use std::time::{Duration, Instant};

use palisade_tests::http::{Front, Origin, base_config, get};
use palisade_tests::redis::RedisServer;
use palisade_tests::servers::{Dnsd, Zone};
use palisade_tests::wait::wait_for;
use palisade_tests::wire::{QueryOpts, RawMsg, build_query};

fn node(redis: &RedisServer, id: &str) -> Dnsd {
    Dnsd::builder()
        .zone(Zone::data("example.com."))
        .raw("[defence.rrl]\nenabled = false")
        .raw(&format!(
            "[redis]\n{}node_id = \"{id}\"\nreconnect_max_ms = 300",
            redis.config()
        ))
        .start()
}

/// Nodes `a` and `b` on `redis`, a first block made on A already enforced on B.
fn two_nodes_in_sync(redis: &RedisServer) -> (Dnsd, Dnsd) {
    let a = node(redis, "a");
    let b = node(redis, "b");
    let (ok, _) = a.ctl(&["block", "add", "198.51.100.1"]);
    assert!(ok);
    wait_for("first block on B", Duration::from_secs(5), || {
        listed(&b).contains("198.51.100.1/32")
    });
    (a, b)
}

/// One query from `src`; true when answered.
fn answered(server: SocketAddr, src: IpAddr) -> bool {
    let s = UdpSocket::bind(SocketAddr::new(src, 0)).unwrap();
    s.connect(server).unwrap();
    s.set_read_timeout(Some(Duration::from_millis(200)))
        .unwrap();
    s.send(&build_query(3, "www.example.com.", 1, &QueryOpts::udp()))
        .unwrap();
    let mut buf = [0u8; 1024];
    s.recv(&mut buf)
        .ok()
        .and_then(|n| RawMsg::parse(&buf[..n]).ok())
        .is_some_and(|m| m.rcode() == 0)
}

/// The bytes of a bulk-string reply (`$N\r\n…\r\n`).
fn bulk(reply: &[u8]) -> Vec<u8> {
    let start = reply.iter().position(|&b| b == b'\n').unwrap() + 1;
    reply[start..reply.len() - 2].to_vec()
}

/// The prefixes in `block list`.
fn listed(d: &Dnsd) -> BTreeSet<String> {
    let (_, out) = d.ctl(&["block", "list"]);
    out.lines()
        .filter(|l| !l.starts_with('('))
        .filter_map(|l| l.split('\t').next().map(str::to_string))
        .collect()
}

#[test]
fn a_block_on_one_node_is_enforced_on_the_other() {
    let Some(redis) = RedisServer::start() else {
        return;
    };
    let a = node(&redis, "a");
    let b = node(&redis, "b");
    let client: IpAddr = "127.31.0.1".parse().unwrap();
    assert!(answered(b.addr(), client));
    let (ok, out) = a.ctl(&[
        "block",
        "add",
        "127.31.0.1",
        "--ttl",
        "600",
        "--reason",
        "abuse",
    ]);
    assert!(ok, "{out}");
    let took = wait_for("block reaches B", Duration::from_secs(5), || {
        !answered(b.addr(), client)
    });
    eprintln!("block on A enforced on B after {took:?}");
    let list = b.ctl(&["block", "list"]).1;
    assert!(
        list.contains("127.31.0.1/32") && list.contains("peer (a)") && list.contains("abuse"),
        "{list}"
    );
    assert!(b.stat("redis.received") >= 1);
    // B does not echo A's decision back.
    assert_eq!(b.stat("redis.published"), 0);
    let (ok, out) = a.ctl(&["block", "del", "127.31.0.1"]);
    assert!(ok, "{out}");
    let took = wait_for("removal reaches B", Duration::from_secs(5), || {
        answered(b.addr(), client)
    });
    eprintln!("removal on A reached B after {took:?}");
    let m = b.metrics();
    assert!(
        m.contains("palisade_redis_sync{what=\"received_removals\"} 1"),
        "the redis lines of /metrics: {:?}",
        m.lines()
            .filter(|l| l.contains("redis"))
            .collect::<Vec<_>>()
    );
}

#[test]
fn blocks_made_while_redis_is_down_arrive_after_it_restarts() {
    let Some(mut redis) = RedisServer::start() else {
        return;
    };
    let (a, b) = two_nodes_in_sync(&redis);
    let status = |d: &Dnsd| {
        let (ok, out) = d.ctl(&["status"]);
        assert!(ok, "{out}");
        out
    };
    assert!(
        status(&a).contains("redis: node a, synced, "),
        "{}",
        status(&a)
    );
    redis.kill();
    // `ctl status` says the sync is down.
    wait_for("status says it", Duration::from_secs(10), || {
        status(&a).contains("redis: node a, NOT SYNCED")
    });
    for ip in ["198.51.100.2", "198.51.100.3", "203.0.113.0/24"] {
        let (ok, out) = a.ctl(&["block", "add", ip]);
        assert!(ok, "{out}");
    }
    // Local blocking keeps working on A while Redis is away.
    assert!(listed(&a).contains("198.51.100.2/32"));
    std::thread::sleep(Duration::from_millis(500));
    redis.restart();
    let took = wait_for("B converges to A's set", Duration::from_secs(15), || {
        listed(&a) == listed(&b)
    });
    eprintln!(
        "B converged {took:?} after Redis restarted: {:?}",
        listed(&b)
    );
    assert_eq!(listed(&b).len(), 4);
}

#[test]
fn a_burst_of_100k_blocks_all_arrive() {
    let Some(redis) = RedisServer::start() else {
        return;
    };
    let a = node(&redis, "a");
    let b = node(&redis, "b");
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("burst.txt");
    let mut text = String::with_capacity(100_000 * 16);
    for i in 0..100_000u32 {
        let ip = std::net::Ipv4Addr::from(0x0a00_0000 + i);
        text.push_str(&format!("{ip}\n"));
    }
    std::fs::write(&file, text).unwrap();
    let t0 = Instant::now();
    let (ok, out) = a.ctl(&["block", "import", file.to_str().unwrap(), "--ttl", "600"]);
    assert!(ok, "{out}");
    wait_for("100,000 entries on B", Duration::from_secs(60), || {
        b.stat("blockmap.entries") >= 100_000
    });
    eprintln!(
        "100,000 blocks from A on B after {:?}; B received {}",
        t0.elapsed(),
        b.stat("redis.received")
    );
    assert_eq!(b.stat("blockmap.entries"), 100_000);
    assert_eq!(a.stat("redis.buffer_overflows"), 0);
}

/// An http-front whose site `a.test` (tenant 1) denies `deny` and escalates its first deny
/// into a 600 s block, synced through `redis` with `redis_extra` in its `[redis]`.
fn front(
    redis: &RedisServer,
    origin: &Origin,
    deny: std::net::Ipv4Addr,
    redis_extra: &str,
) -> Front {
    let rules = format!(
        "[[tenant]]\nid = 1\ndeny = [\"{deny}/32\"]\n\
         escalate = {{ after = 1, window_secs = 60, block_secs = 600, on = [\"deny\"], http = \"block_map\" }}\n"
    );
    let redis_cfg = redis.config();
    let extra = redis_extra.to_string();
    Front::start(
        move |a, m| {
            format!(
                "{}[rules]\nfile = \"rules.toml\"\n\n[redis]\n{redis_cfg}\
                 reconnect_max_ms = 300\n{extra}\n\n\
                 [[site]]\nhosts = [\"a.test\"]\nupstream = \"app\"\ntenant = 1\n",
                base_config(a, m, origin.addr())
            )
        },
        Some(&rules),
    )
}

#[test]
fn http_front_escalations_reach_dnsd_on_another_node_and_dnsd_blocks_reach_http_front() {
    let Some(redis) = RedisServer::start() else {
        return;
    };
    let origin = Origin::start();
    let attacker = palisade_tests::net::test_ip();
    let other = palisade_tests::net::test_ip();
    let a = front(&redis, &origin, attacker, "instance = \"a\"");
    let b = node(&redis, "b");
    wait_for("http-front synced", Duration::from_secs(10), || {
        a.metric("palisade_redis_sync{what=\"connected\"}") == 1
    });
    assert!(answered(b.addr(), attacker.into()));
    // The attacker's first request is denied and escalated at http-front on node A ...
    let t0 = Instant::now();
    assert_eq!(
        get(Some(attacker), a.addr(), "a.test", "/").unwrap().status,
        403
    );
    // ... and dnsd on node B ignores its queries within a second.
    wait_for(
        "the escalation reaches dnsd on B",
        Duration::from_secs(5),
        || !answered(b.addr(), attacker.into()),
    );
    let took = t0.elapsed();
    eprintln!("escalation at http-front on A enforced by dnsd on B after {took:?}");
    assert!(took < Duration::from_secs(1), "{took:?}");
    assert!(
        b.ctl(&["block", "list"])
            .1
            .contains(&format!("{attacker}/32"))
    );
    // The other way: dnsd's operator block reaches http-front, which refuses the source.
    assert_eq!(
        get(Some(other), a.addr(), "a.test", "/").unwrap().status,
        200
    );
    let (ok, out) = b.ctl(&["block", "add", &other.to_string(), "--ttl", "600"]);
    assert!(ok, "{out}");
    wait_for(
        "dnsd's block reaches http-front",
        Duration::from_secs(5),
        || get(Some(other), a.addr(), "a.test", "/").is_err(),
    );
    assert!(a.metric("palisade_redis_sync{what=\"received\"}") >= 1);
    assert!(a.metric("palisade_redis_sync{what=\"published\"}") >= 1);
}

#[test]
fn dnsd_and_http_front_on_one_host_have_distinct_node_ids() {
    let Some(redis) = RedisServer::start() else {
        return;
    };
    let origin = Origin::start();
    let host = shield::redis_sync::host_name();
    let d = Dnsd::builder()
        .zone(Zone::data("example.com."))
        .raw(&format!("[redis]\n{}", redis.config()))
        .start();
    let f = front(&redis, &origin, palisade_tests::net::test_ip(), "");
    for (what, log) in [("dnsd", d.log()), ("http-front", f.log())] {
        let id = format!("{host}-{what}");
        assert!(
            log.contains(&format!("node={id}")) || log.contains(&format!("node=\"{id}\"")),
            "{what} should sync as {id}:\n{log}"
        );
    }
    // Both beat, and neither sees the other as a clash.
    wait_for("heartbeats", Duration::from_secs(10), || {
        f.metric("palisade_redis_sync{what=\"heartbeats\"}") >= 3 && d.stat("redis.heartbeats") >= 3
    });
    assert_eq!(
        f.metric("palisade_redis_sync{what=\"node_id_conflicts\"}"),
        0
    );
    assert_eq!(d.stat("redis.node_id_conflicts"), 0);
}

#[test]
fn two_live_processes_with_one_node_id_are_reported_by_both() {
    let Some(redis) = RedisServer::start() else {
        return;
    };
    let one = node(&redis, "same");
    let two = node(&redis, "same");
    for d in [&one, &two] {
        wait_for("the clash reported", Duration::from_secs(15), || {
            d.stat("redis.node_id_conflict") == 1
                && d.log()
                    .contains("another live process uses this Redis node id")
        });
        let (_, status) = d.ctl(&["status"]);
        assert!(
            status.contains("ANOTHER PROCESS USES THIS NODE ID"),
            "{status}"
        );
        assert!(d.stat("redis.node_id_conflicts") >= 1);
    }
    // One goes away cleanly: the other stops reporting.
    drop(two);
    wait_for("the clash over", Duration::from_secs(15), || {
        one.stat("redis.node_id_conflict") == 0
    });
}

#[test]
fn a_restarted_process_is_not_taken_for_a_clash() {
    let Some(redis) = RedisServer::start() else {
        return;
    };
    // A process killed without a clean stop leaves its heartbeat behind; its successor on the
    // same id must not report it (the old heartbeat stands still).
    let mut first = node(&redis, "again");
    wait_for("heartbeats", Duration::from_secs(10), || {
        first.stat("redis.heartbeats") >= 2
    });
    first.kill();
    let second = node(&redis, "again");
    wait_for("heartbeats", Duration::from_secs(10), || {
        second.stat("redis.heartbeats") >= 4
    });
    assert_eq!(
        second.stat("redis.node_id_conflicts"),
        0,
        "{}",
        second.log()
    );
}

/// Whoever can write to Redis cannot stop the fleet's writes for good by adding the largest
/// stream ID (no entry can follow it): the writer starts the stream again, counts it, and
/// blocks made after flow from node to node as before.
#[test]
fn the_largest_stream_id_does_not_stop_the_fleet() {
    let Some(redis) = RedisServer::start() else {
        return;
    };
    let (a, b) = two_nodes_in_sync(&redis);
    let r = palisade_tests::redis::command(
        redis.port,
        "XADD palisade:log 18446744073709551615-18446744073709551614 d junk",
    );
    assert!(r.starts_with('$'), "{r}");
    // The first write after it takes the one ID left; the ones after find none.
    for ip in ["198.51.100.2", "198.51.100.3", "198.51.100.4"] {
        let (ok, out) = a.ctl(&["block", "add", ip]);
        assert!(ok, "{out}");
        wait_for("the blocks after it on B", Duration::from_secs(15), || {
            listed(&b).contains(&format!("{ip}/32"))
        });
    }
    assert!(a.stat("redis.stream_resets") >= 1);
}

/// A node whose own decisions live in `[block] state_file` never takes them back from Redis
/// at a restart: a lifted block's record planted back in Redis stays lifted (it came back
/// as the node's own, signed anew, and went to every node).
#[test]
fn a_lifted_block_planted_back_in_redis_stays_lifted_after_a_restart() {
    let Some(redis) = RedisServer::start() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("blocks.json");
    let start = || {
        Dnsd::builder()
            .zone(Zone::data("example.com."))
            .raw("[defence.rrl]\nenabled = false")
            .raw(&format!(
                "[redis]\n{}node_id = \"a\"\nreconnect_max_ms = 300\n\n[block]\nstate_file = \"{}\"",
                redis.config(),
                state.display()
            ))
            .start()
    };
    let a = start();
    let (ok, out) = a.ctl(&["block", "add", "127.99.113.0/24", "--ttl", "900"]);
    assert!(ok, "{out}");
    let (key, net) = (
        &b"palisade:block:127.99.113.0/24"[..],
        &b"127.99.113.0/24"[..],
    );
    wait_for("the record in Redis", Duration::from_secs(5), || {
        palisade_tests::redis::command_args(redis.port, &[b"EXISTS", key]).starts_with(b":1")
    });
    let record = bulk(&palisade_tests::redis::command_args(
        redis.port,
        &[b"GET", key],
    ));
    let score = bulk(&palisade_tests::redis::command_args(
        redis.port,
        &[b"ZSCORE", b"palisade:blocks", net],
    ));
    let (ok, out) = a.ctl(&["block", "del", "127.99.113.0/24"]);
    assert!(ok, "{out}");
    wait_for("the record gone", Duration::from_secs(5), || {
        palisade_tests::redis::command_args(redis.port, &[b"EXISTS", key]).starts_with(b":0")
    });
    wait_for("the state file written", Duration::from_secs(5), || {
        !std::fs::read_to_string(&state)
            .unwrap_or_default()
            .contains("127.99.113.0/24")
    });
    drop(a);
    // The old record planted back, as it was.
    assert!(
        palisade_tests::redis::command_args(redis.port, &[b"SET", key, &record, b"PX", b"800000"])
            .starts_with(b"+OK")
    );
    assert!(
        palisade_tests::redis::command_args(
            redis.port,
            &[b"ZADD", b"palisade:blocks", &score, net]
        )
        .starts_with(b":1")
    );
    let a = start();
    std::thread::sleep(Duration::from_secs(2));
    assert!(!listed(&a).contains("127.99.113.0/24"), "{:?}", listed(&a));
    assert!(answered(a.addr(), "127.99.113.7".parse().unwrap()));
}

/// An epoch key flipped again and again (anyone who can write to Redis can) sends a reader
/// back to the stream's start once a minute at most: each flip made every node read the
/// whole stream again, burying a real forgery under replay refusals.
#[test]
fn a_flipping_epoch_key_sends_readers_back_once_a_minute_at_most() {
    let Some(redis) = RedisServer::start() else {
        return;
    };
    let a = node(&redis, "a");
    let b = node(&redis, "b");
    let mut blocks = String::new();
    for i in 0..100 {
        blocks.push_str(&format!("198.18.{}.0/24\n", i));
    }
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("blocks.txt");
    std::fs::write(&file, blocks).unwrap();
    let (ok, out) = a.ctl(&["block", "import", file.to_str().unwrap(), "--ttl", "600"]);
    assert!(ok, "{out}");
    wait_for("B has them", Duration::from_secs(15), || {
        listed(&b).len() >= 100
    });
    let before = b.stat("redis.refused.replay");
    for i in 0..6 {
        let r = palisade_tests::redis::command(redis.port, &format!("SET palisade:epoch flip{i}"));
        assert!(r.starts_with("+OK"), "{r}");
        std::thread::sleep(Duration::from_millis(1_300));
    }
    assert!(
        b.stat("redis.epoch_changes") >= 3,
        "{}",
        b.stat("redis.epoch_changes")
    );
    let replayed = b.stat("redis.refused.replay") - before;
    // One reading of the stream again (its 100 records) at most, not one per flip.
    assert!(replayed <= 150, "{replayed} replay refusals");
    // Blocks still flow.
    let (ok, out) = a.ctl(&["block", "add", "198.51.100.77"]);
    assert!(ok, "{out}");
    wait_for("a new block on B", Duration::from_secs(15), || {
        listed(&b).contains("198.51.100.77/32")
    });
}

/// A Redis that holds writes while its connections look fine (`CLIENT PAUSE … WRITE`) shows
/// in `ctl status` as NOT SYNCED, writes waiting; once it lets them through, they arrive.
#[test]
fn a_redis_holding_writes_is_not_called_synced() {
    let Some(redis) = RedisServer::start() else {
        return;
    };
    let a = node(&redis, "a");
    let b = node(&redis, "b");
    let status = |d: &Dnsd| d.ctl(&["status"]).1;
    wait_for("synced", Duration::from_secs(10), || {
        status(&a).contains("redis: node a, synced")
    });
    let r = palisade_tests::redis::command(redis.port, "CLIENT PAUSE 25000 WRITE");
    assert!(r.starts_with("+OK"), "{r}");
    let (ok, out) = a.ctl(&["block", "add", "198.51.100.9"]);
    assert!(ok, "{out}");
    wait_for("NOT SYNCED", Duration::from_secs(20), || {
        status(&a).contains("redis: node a, NOT SYNCED")
    });
    let r = palisade_tests::redis::command(redis.port, "CLIENT UNPAUSE");
    assert!(r.starts_with("+OK"), "{r}");
    wait_for("the block on B", Duration::from_secs(20), || {
        listed(&b).contains("198.51.100.9/32")
    });
    wait_for("synced again", Duration::from_secs(20), || {
        status(&a).contains("redis: node a, synced")
    });
}

/// A node's signed record replayed into the stream after its block was lifted is refused by
/// a node started since, which never saw the node write: each node's latest record (its
/// mark) is read with the snapshot. Such a node took the old add as new, blocking the
/// prefix again until the deciding node's next full republish.
#[test]
fn a_replayed_record_is_refused_by_a_node_that_started_after_it_was_lifted() {
    let Some(redis) = RedisServer::start() else {
        return;
    };
    let a = node(&redis, "a");
    let (ok, out) = a.ctl(&["block", "add", "127.99.114.0/24", "--ttl", "900"]);
    assert!(ok, "{out}");
    let key = &b"palisade:block:127.99.114.0/24"[..];
    wait_for("the record in Redis", Duration::from_secs(5), || {
        palisade_tests::redis::command_args(redis.port, &[b"EXISTS", key]).starts_with(b":1")
    });
    let record = bulk(&palisade_tests::redis::command_args(
        redis.port,
        &[b"GET", key],
    ));
    let (ok, out) = a.ctl(&["block", "del", "127.99.114.0/24"]);
    assert!(ok, "{out}");
    wait_for("the record gone", Duration::from_secs(5), || {
        palisade_tests::redis::command_args(redis.port, &[b"EXISTS", key]).starts_with(b":0")
    });
    let c = node(&redis, "c");
    wait_for("C read the snapshot", Duration::from_secs(10), || {
        c.stat("redis.snapshots") >= 1
    });
    // Refused as a replay, or as lifted by its node's mark.
    let refusals = |c: &Dnsd| c.stat("redis.refused.replay") + c.stat("redis.refused.lifted");
    let before = refusals(&c);
    let r = palisade_tests::redis::command_args(
        redis.port,
        &[b"XADD", b"palisade:log", b"*", b"d", &record],
    );
    assert!(r.starts_with(b"$"), "{}", String::from_utf8_lossy(&r));
    wait_for("C refused the replay", Duration::from_secs(5), || {
        refusals(&c) > before
    });
    assert!(!listed(&c).contains("127.99.114.0/24"), "{:?}", listed(&c));
    assert!(answered(c.addr(), "127.99.114.7".parse().unwrap()));
}

/// Junk in the marks hash — a field that is no record, another node's record under a
/// node's field, a key of the wrong type — raises no mark and stops no snapshot: a node
/// started then syncs, and the junk is counted.
#[test]
fn junk_replay_marks_stop_no_snapshot() {
    let Some(redis) = RedisServer::start() else {
        return;
    };
    let (a, _b) = two_nodes_in_sync(&redis);
    let mark_a = bulk(&palisade_tests::redis::command_args(
        redis.port,
        &[b"HGET", b"palisade:marks", b"a"],
    ));
    for (field, value) in [
        (&b"junk"[..], &b"not a record"[..]),
        (&b"b"[..], &mark_a[..]),
    ] {
        let r = palisade_tests::redis::command_args(
            redis.port,
            &[b"HSET", b"palisade:marks", field, value],
        );
        assert!(r.starts_with(b":"), "{}", String::from_utf8_lossy(&r));
    }
    let c = node(&redis, "c");
    wait_for("C read the snapshot", Duration::from_secs(10), || {
        c.stat("redis.snapshots") >= 1
    });
    assert!(c.stat("redis.refused.malformed") >= 2);
    wait_for("the first block on C", Duration::from_secs(5), || {
        listed(&c).contains("198.51.100.1/32")
    });
    // A marks key of the wrong type: a node started then finds no mark to vouch for the
    // snapshot's records, and reads it again once the nodes have replaced the key and
    // written their marks (every ten seconds).
    palisade_tests::redis::command(redis.port, "DEL palisade:marks");
    palisade_tests::redis::command(redis.port, "SET palisade:marks x");
    let d = node(&redis, "d");
    wait_for("the first block on D", Duration::from_secs(40), || {
        listed(&d).contains("198.51.100.1/32")
    });
    assert!(d.stat("redis.resnaps") >= 1 || d.stat("redis.refused.unvouched") == 0);
    let (ok, out) = a.ctl(&["block", "add", "198.51.100.9"]);
    assert!(ok, "{out}");
    wait_for("a new block on D", Duration::from_secs(10), || {
        listed(&d).contains("198.51.100.9/32")
    });
}
