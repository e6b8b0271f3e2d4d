//! The block sync behind Redis Sentinel: one master, one replica, three sentinels (Debian's
//! `redis-sentinel`), two dnsd nodes that find the master through the sentinels. Node A
//! blocks 10,000 addresses in ten steps while the master is killed (SIGKILL) after the fifth:
//! the sentinels promote the replica, both nodes follow, A republishes what the failover may
//! have lost, and node B ends with all 10,000 in its block map and, when namespaces and XDP
//! are available, in the XDP maps it mirrors into. The time from the kill to B's last entry
//! is printed (`bench/run redis` reports it too). The guard is attached (with its TCP
//! steering) in a namespace of its own while node B runs outside it: B must leave that
//! steering alone and take the wildcard TCP socket.

use std::path::PathBuf;
use std::process::Command;
use std::time::{Duration, Instant};

use palisade_tests::netns::{self, VethPair};
use palisade_tests::redis::SentinelSet;
use palisade_tests::servers::{Dnsd, Zone};
use palisade_tests::wait::wait_for;

const TOTAL: u32 = 10_000;
const STEPS: u32 = 10;

fn node(set: &SentinelSet, id: &str, pins: Option<&str>) -> Dnsd {
    let mut b = Dnsd::builder()
        .zone(Zone::data("example.com."))
        .raw("[defence.rrl]\nenabled = false")
        .raw(&format!(
            "[redis]\n{}node_id = \"{id}\"\nreconnect_min_ms = 50\nreconnect_max_ms = 300\nio_timeout_ms = 1000",
            set.config()
        ));
    if let Some(p) = pins {
        b = b.raw(&format!("[xdp]\npin_path = \"{p}\""));
    }
    b.start()
}

/// The XDP guard of this test, attached in a namespace of its own; detached and its pins
/// removed on drop.
struct Guard {
    _pair: VethPair,
    pins: PathBuf,
}

impl Guard {
    fn attach(dir: &std::path::Path) -> Option<Guard> {
        if let Err(why) = netns::available() {
            palisade_tests::skipped(&format!(
                "Sentinel test: XDP maps not checked (block map only): {why}"
            ));
            return None;
        }
        let pair = VethPair::new().expect("veth pair");
        let pins = PathBuf::from(format!(
            "/sys/fs/bpf/palisade-sentinel-{}",
            std::process::id()
        ));
        let cfg = dir.join("guard.toml");
        std::fs::write(
            &cfg,
            format!(
                "interface = \"{}\"\nmode = \"generic\"\ndns_ports = [5353]\nrate = 0\n\
                 block_v4_entries = 65536\npin_path = \"{}\"\n",
                pair.if_b,
                pins.display()
            ),
        )
        .unwrap();
        let out = pair
            .b
            .command(palisade_tests::bin("xdp-guard"))
            .args(["attach", "-c", cfg.to_str().unwrap()])
            .output()
            .expect("run xdp-guard");
        assert!(
            out.status.success(),
            "xdp-guard attach: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        Some(Guard { _pair: pair, pins })
    }

    /// Entries of the 10.77.0.0/16 test range in the XDP maps.
    fn listed(&self) -> usize {
        let out = Command::new(palisade_tests::bin("xdp-guard"))
            .args(["list", "--pin-path", self.pins.to_str().unwrap()])
            .output()
            .expect("xdp-guard list");
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .filter(|l| l.starts_with("10.77."))
            .count()
    }
}

impl Drop for Guard {
    fn drop(&mut self) {
        let _ = Command::new(palisade_tests::bin("xdp-guard"))
            .args([
                "detach",
                "--purge",
                "--pin-path",
                self.pins.to_str().unwrap(),
            ])
            .output();
        let _ = std::fs::remove_dir_all(&self.pins);
    }
}

#[test]
fn a_failover_in_the_middle_of_a_burst_loses_no_decision() {
    let Some(mut set) = SentinelSet::start() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let guard = Guard::attach(dir.path());
    let a = node(&set, "a", None);
    let b = node(&set, "b", guard.as_ref().map(|g| g.pins.to_str().unwrap()));
    wait_for(
        "both nodes synced through the sentinels' master",
        Duration::from_secs(20),
        || a.stat("redis.connected") == 1 && b.stat("redis.connected") == 1,
    );
    assert!(
        b.log().contains("no sk_lookup steering installed"),
        "B does not use the steering of another network namespace"
    );
    // The master Sentinel names is never blocked (with XDP, a block would cut every node off
    // from it, and the lift could not come through).
    // (Here on the sentinels' address: the log says it was learned.)
    assert!(
        a.log().contains("never-block address learned")
            && a.log().contains("redis master (named by sentinel)"),
        "{}",
        a.log()
    );
    let first_master = set.master.port;
    assert_eq!(set.master_port(), Some(first_master));

    let per = TOTAL / STEPS;
    let mut killed_at = None;
    for step in 0..STEPS {
        let file = dir.path().join(format!("step{step}.txt"));
        let text: String = (0..per)
            .map(|i| {
                let n = step * per + i;
                format!("10.77.{}.{}\n", n / 256, n % 256)
            })
            .collect();
        std::fs::write(&file, text).unwrap();
        let (ok, out) = a.ctl(&["block", "import", file.to_str().unwrap(), "--ttl", "600"]);
        assert!(ok, "{out}");
        if step == STEPS / 2 - 1 {
            // Right after the fifth step, before its writes can all have replicated.
            set.master.kill();
            killed_at = Some(Instant::now());
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let killed_at = killed_at.unwrap();
    let took = wait_for("all 10,000 on B", Duration::from_secs(60), || {
        b.stat("blockmap.entries") >= TOTAL as u64
    });
    let converged = killed_at.elapsed();
    eprintln!(
        "B holds all {TOTAL} blocks {converged:?} after the master was killed (waited {took:?}); \
         A: master_changes {} republished {}; B: snapshots {} received {}",
        a.stat("redis.master_changes"),
        a.stat("redis.republished"),
        b.stat("redis.snapshots"),
        b.stat("redis.received"),
    );
    assert_eq!(b.stat("blockmap.entries"), TOTAL as u64);
    assert_eq!(
        set.master_port(),
        Some(set.replica_port),
        "the sentinels promoted the replica"
    );
    assert!(a.stat("redis.master_changes") >= 1, "A saw the failover");
    wait_for(
        "A's republish after the failover",
        Duration::from_secs(20),
        || a.stat("redis.republished") >= 5 * per as u64,
    );
    assert_eq!(a.stat("redis.buffer_overflows"), 0);
    if let Some(g) = &guard {
        wait_for(
            "all 10,000 in B's XDP maps",
            Duration::from_secs(20),
            || g.listed() >= TOTAL as usize,
        );
        assert_eq!(g.listed(), TOTAL as usize);
    }
    // Both nodes keep working on the new master: a block made now reaches B.
    let (ok, out) = a.ctl(&["block", "add", "10.78.0.1", "--ttl", "600"]);
    assert!(ok, "{out}");
    wait_for(
        "a block after the failover on B",
        Duration::from_secs(10),
        || b.stat("blockmap.entries") == TOTAL as u64 + 1,
    );
}

/// A master paused past the sentinels' patience and then back (split brain): it takes writes
/// again until Sentinel demotes it, seconds later, or never when Sentinel cannot reach it.
/// The nodes, whose connections to it outlive the pause (a long `io_timeout_ms`), must find
/// it deposed by themselves — its `ROLE`, the master the sentinels name — and move to the new
/// master: a decision made after the failover reaches the new master within seconds.
#[test]
fn nodes_leave_a_deposed_master_whose_connections_survive() {
    let Some(set) = SentinelSet::start() else {
        return;
    };
    let long_io = |id: &str| {
        Dnsd::builder()
            .zone(Zone::data("example.com."))
            .raw("[defence.rrl]\nenabled = false")
            .raw(&format!(
                "[redis]\n{}node_id = \"{id}\"\nreconnect_min_ms = 50\nreconnect_max_ms = 300\nio_timeout_ms = 15000",
                set.config()
            ))
            .start()
    };
    let a = long_io("a");
    let b = long_io("b");
    wait_for("both nodes synced", Duration::from_secs(20), || {
        a.stat("redis.connected") == 1 && b.stat("redis.connected") == 1
    });
    let old = set.master.port;
    set.master.pause(true);
    wait_for("the replica promoted", Duration::from_secs(30), || {
        set.master_port() == Some(set.replica_port)
    });
    set.master.pause(false);
    let back = Instant::now();
    // A decision of A's now: on the new master within seconds (the old one demotes itself
    // only when Sentinel gets to it).
    let (ok, out) = a.ctl(&["block", "add", "10.79.0.1", "--ttl", "600"]);
    assert!(ok, "{out}");
    let on_new = |port: u16| {
        palisade_tests::redis::command(port, "SCAN 0 MATCH *10.79.0.1* COUNT 100000")
            .contains("10.79.0.1")
    };
    let took = wait_for(
        "A's decision on the new master",
        Duration::from_secs(8),
        || on_new(set.replica_port),
    );
    eprintln!(
        "on the new master {took:?} after it was found deposed; old master {old} back {:?} ago",
        back.elapsed()
    );
    wait_for("B has it", Duration::from_secs(10), || {
        b.stat("blockmap.entries") >= 1
    });
    assert!(
        a.stat("redis.masters_deposed") >= 1,
        "A found the master deposed"
    );
}

/// Whoever can connect to the master can pose as a replica (`REPLCONF ip-address`, `PSYNC`)
/// and Sentinel then lists it: no node takes the address it claims as never-block (learned
/// so, it lifted the fleet's block covering it on every node behind Sentinel, and stayed
/// unblockable until a restart). The master the sentinels name is still learned.
#[test]
fn a_forged_replica_is_not_learned_as_never_block() {
    use std::io::{Read as _, Write as _};
    let Some(set) = SentinelSet::start() else {
        return;
    };
    let a = node(&set, "a", None);
    let b = node(&set, "b", None);
    wait_for("both nodes synced", Duration::from_secs(20), || {
        a.stat("redis.connected") == 1 && b.stat("redis.connected") == 1
    });
    let (ok, out) = a.ctl(&["block", "add", "10.78.9.0/24"]);
    assert!(ok, "{out}");
    let listed = |d: &Dnsd| d.ctl(&["block", "list"]).1.contains("10.78.9.0/24");
    wait_for("B has A's block", Duration::from_secs(10), || listed(&b));

    // The forged replica, inside the blocked prefix: it keeps its replication link alive.
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let port = set.master.port;
    let flag = std::sync::Arc::clone(&stop);
    let fake = std::thread::spawn(move || {
        let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
        s.set_read_timeout(Some(Duration::from_millis(200)))
            .unwrap();
        let cmd = |args: &[&str]| {
            let mut m = format!("*{}\r\n", args.len());
            for a in args {
                m.push_str(&format!("${}\r\n{a}\r\n", a.len()));
            }
            m
        };
        for c in [
            cmd(&["REPLCONF", "listening-port", "20999"]),
            cmd(&["REPLCONF", "ip-address", "10.78.9.9"]),
            cmd(&["REPLCONF", "capa", "psync2"]),
            cmd(&["PSYNC", "?", "-1"]),
        ] {
            s.write_all(c.as_bytes()).unwrap();
            // One at a time: PSYNC is refused while replies are pending.
            let _ = s.read(&mut [0u8; 256]);
        }
        let end = Instant::now() + Duration::from_secs(40);
        let mut buf = [0u8; 65536];
        while !flag.load(std::sync::atomic::Ordering::Relaxed) && Instant::now() < end {
            let _ = s.read(&mut buf);
            let _ = s.write_all(cmd(&["REPLCONF", "ACK", "0"]).as_bytes());
        }
    });
    let sentinel = set.sentinel_ports[0];
    wait_for(
        "a sentinel lists the forged replica",
        Duration::from_secs(30),
        || {
            palisade_tests::redis::command(
                sentinel,
                &format!("SENTINEL REPLICAS {}", palisade_tests::redis::MASTER_NAME),
            )
            .contains("10.78.9.9")
        },
    );
    // Every node connects again (and asks the sentinels anew).
    let before = (a.stat("redis.connects"), b.stat("redis.connects"));
    palisade_tests::redis::command(port, "CLIENT KILL TYPE normal");
    wait_for(
        "both nodes connected again",
        Duration::from_secs(20),
        || {
            a.stat("redis.connects") > before.0
                && b.stat("redis.connects") > before.1
                && a.stat("redis.connected") == 1
                && b.stat("redis.connected") == 1
        },
    );
    std::thread::sleep(Duration::from_millis(500));
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    fake.join().unwrap();
    for (name, d) in [("A", &a), ("B", &b)] {
        assert!(listed(d), "{name} lifted the block: {}", d.log());
        assert!(!d.log().contains("10.78.9.9"), "{name}: {}", d.log());
        let (_, status) = d.ctl(&["status"]);
        assert!(!status.contains("10.78.9.9"), "{name}: {status}");
    }
    // The master the sentinels name is learned.
    assert!(b.log().contains("redis master (named by sentinel)"));
}
