//! Two dnsd nodes sharing one Redis: a block made on A is enforced on B; removals follow;
//! blocks made while Redis is down arrive after it comes back; a burst of 100,000 blocks
//! all arrives. Each test starts its own redis-server on a free loopback port.

use std::collections::BTreeSet;
use std::net::{IpAddr, SocketAddr, UdpSocket};
use std::time::{Duration, Instant};

use palisade_tests::redis::RedisServer;
use palisade_tests::servers::{Dnsd, Zone};
use palisade_tests::wait::wait_for;
use palisade_tests::wire::{QueryOpts, RawMsg, build_query};

fn node(redis: &RedisServer, id: &str) -> Dnsd {
    Dnsd::builder()
        .zone(Zone::data("example.com."))
        .raw("[defence.rrl]\nenabled = false")
        .raw(&format!(
            "[redis]\nurl = \"{}\"\nnode_id = \"{id}\"\nreconnect_max_ms = 300",
            redis.url()
        ))
        .start()
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
    let a = node(&redis, "a");
    let b = node(&redis, "b");
    let (ok, _) = a.ctl(&["block", "add", "198.51.100.1"]);
    assert!(ok);
    wait_for("first block on B", Duration::from_secs(5), || {
        listed(&b).contains("198.51.100.1/32")
    });
    redis.kill();
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
