//! The block path of a node and of the fleet, with real processes in network namespaces on
//! one bridged segment: node A runs xdp-guard (attached to its interface), dnsd and
//! http-front; node B runs dnsd and http-front; one redis-server (reached by its Unix socket
//! from every namespace) syncs them; a client namespace sends from several addresses.
//!
//! - An escalation at http-front on A makes XDP on A drop the source's DNS packets, and dnsd
//!   on B ignore its queries within a second.
//! - Overlapping blocks of dnsd and http-front on one address (made while Redis is away, so
//!   each daemon holds only its own) last until the longer one ends: each writer has its
//!   own slot in the XDP entry.
//! - Redis stopped for 10 s while both daemons block new sources, then restarted: every
//!   decision made meanwhile is enforced everywhere afterwards.
//! - Stopping dnsd on A leaves XDP enforcing http-front's blocks.
//!
//! Needs root (network namespaces, XDP, bpffs); elsewhere it says so loudly and skips.

use std::net::{Ipv4Addr, SocketAddr, UdpSocket};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use palisade_tests::http::{get, http_get_text};
use palisade_tests::netns::{self, Netns};
use palisade_tests::redis::RedisServer;
use palisade_tests::wait::wait_for;
use palisade_tests::wire::{QueryOpts, RawMsg, build_query};

static NEXT: AtomicU32 = AtomicU32::new(0);

const DNS_PORT: u16 = 5353;
const HTTP_PORT: u16 = 8080;
const METRICS_PORT: u16 = 9153;

const CLIENT: Ipv4Addr = Ipv4Addr::new(192, 0, 2, 1);
const NODE_A: Ipv4Addr = Ipv4Addr::new(192, 0, 2, 2);
const NODE_B: Ipv4Addr = Ipv4Addr::new(192, 0, 2, 3);

/// Sources the client sends from (denied and escalated by the site's rules: 192.0.2.64/26).
fn hostile(n: u8) -> Ipv4Addr {
    Ipv4Addr::new(192, 0, 2, 64 + n)
}

/// Namespaces on one bridge: a switch namespace holding the bridge, and members each with
/// one veth into it. Deleted on drop (members first).
struct Lan {
    members: Vec<(Netns, String)>,
    _switch: Netns,
}

impl Lan {
    /// Members named `names`, addressed `addrs[i]` (/24, plus `extra[i]` more), up.
    fn new(names: &[&str], addrs: &[&[Ipv4Addr]]) -> std::io::Result<Lan> {
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let tag = format!("{:x}{n:x}", std::process::id() % 0x10_0000);
        let switch = Netns::new(&format!("pal{tag}sw"))?;
        switch.ip(&["link", "add", "br0", "type", "bridge"])?;
        switch.ip(&["link", "set", "br0", "up"])?;
        let mut members = Vec::new();
        for (i, (name, ips)) in names.iter().zip(addrs).enumerate() {
            let ns = Netns::new(&format!("pal{tag}{name}"))?;
            let (port, ifname) = (format!("sw{tag}{i}"), format!("if{tag}{i}"));
            switch.ip(&[
                "link",
                "add",
                &port,
                "type",
                "veth",
                "peer",
                "name",
                &ifname,
                "netns",
                ns.name(),
            ])?;
            switch.ip(&["link", "set", &port, "master", "br0"])?;
            switch.ip(&["link", "set", &port, "up"])?;
            for ip in ips.iter() {
                ns.ip(&["addr", "add", &format!("{ip}/24"), "dev", &ifname])?;
            }
            ns.ip(&["link", "set", &ifname, "up"])?;
            members.push((ns, ifname));
        }
        Ok(Lan {
            members,
            _switch: switch,
        })
    }

    fn ns(&self, i: usize) -> &Netns {
        &self.members[i].0
    }

    fn ifname(&self, i: usize) -> &str {
        &self.members[i].1
    }
}

/// A daemon in a namespace, killed on drop (its log printed when the test failed).
struct Daemon {
    what: String,
    child: Child,
    log: PathBuf,
}

/// `args` as a command run in `ns` (see [`Netns::command`]).
fn in_netns(ns: &Netns, args: &[&str]) -> Command {
    let mut cmd = ns.command(args[0]);
    cmd.args(&args[1..]);
    cmd
}

impl Daemon {
    fn spawn(what: &str, ns: &Netns, dir: &Path, args: &[&str]) -> Daemon {
        let log = dir.join(format!("{what}.log"));
        let out = std::fs::File::create(&log).unwrap();
        let child = in_netns(ns, args)
            .env("RUST_LOG", "info")
            .stdin(Stdio::null())
            .stdout(Stdio::from(out.try_clone().unwrap()))
            .stderr(Stdio::from(out))
            .spawn()
            .unwrap_or_else(|e| panic!("start {what}: {e}"));
        Daemon {
            what: what.into(),
            child,
            log,
        }
    }

    fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// SIGTERM, then wait (bounded) for the exit.
    fn stop(&mut self) {
        // SAFETY: kill(2) on our own child.
        unsafe { libc::kill(self.child.id() as i32, libc::SIGTERM) };
        let end = Instant::now() + Duration::from_secs(10);
        while Instant::now() < end {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        if std::thread::panicking() {
            eprintln!("----- {} log -----\n{}", self.what, self.log());
        }
    }
}

/// The node's pin directory: detached and unpinned on drop.
struct Pins(PathBuf);

impl Drop for Pins {
    fn drop(&mut self) {
        let _ = xdp_guard(&["detach", "--purge", "--pin-path", self.0.to_str().unwrap()]);
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn xdp_guard(args: &[&str]) -> (bool, String) {
    let out = Command::new(palisade_tests::bin("xdp-guard"))
        .args(args)
        .output()
        .expect("run xdp-guard");
    let mut s = String::from_utf8_lossy(&out.stdout).into_owned();
    s.push_str(&String::from_utf8_lossy(&out.stderr));
    (out.status.success(), s)
}

/// One DNS query from `src` (in the client namespace) to `server`; true when answered.
fn answered(client: &Netns, src: Ipv4Addr, server: Ipv4Addr) -> bool {
    client
        .run(move || {
            let s = UdpSocket::bind(SocketAddr::new(src.into(), 0)).unwrap();
            s.connect(SocketAddr::new(server.into(), DNS_PORT)).unwrap();
            s.set_read_timeout(Some(Duration::from_millis(250)))
                .unwrap();
            s.send(&build_query(9, "www.example.com.", 1, &QueryOpts::udp()))
                .unwrap();
            let mut buf = [0u8; 1500];
            s.recv(&mut buf)
                .ok()
                .and_then(|n| RawMsg::parse(&buf[..n]).ok())
                .is_some_and(|m| m.rcode() == 0 && m.counts[1] > 0)
        })
        .expect("client namespace")
}

/// The status of `GET /` for a.test from `src`; `None` when the connection is refused or
/// closed (a blocked source).
fn http_status(client: &Netns, src: Ipv4Addr, node: Ipv4Addr) -> Option<u16> {
    client
        .run(move || {
            get(
                Some(src),
                SocketAddr::new(node.into(), HTTP_PORT),
                "a.test",
                "/",
            )
            .ok()
            .map(|r| r.status)
        })
        .expect("client namespace")
}

/// One Prometheus sample of the http-front on `node` (0 when absent).
fn front_metric(client: &Netns, node: Ipv4Addr, series: &str) -> u64 {
    let text = client
        .run(move || {
            http_get_text(SocketAddr::new(node.into(), METRICS_PORT), "/metrics")
                .unwrap_or_default()
        })
        .expect("client namespace");
    text.lines()
        .find_map(|l| {
            l.strip_prefix(series)
                .and_then(|v| v.trim().parse::<f64>().ok())
        })
        .unwrap_or(0.0) as u64
}

fn dnsd_ctl(config: &Path, args: &[&str]) -> (bool, String) {
    let out = Command::new(palisade_tests::bin("dnsd"))
        .arg("ctl")
        .arg("-c")
        .arg(config)
        .args(args)
        .output()
        .expect("dnsd ctl");
    let mut s = String::from_utf8_lossy(&out.stdout).into_owned();
    s.push_str(&String::from_utf8_lossy(&out.stderr));
    (out.status.success(), s)
}

fn dnsd_stat(config: &Path, name: &str) -> u64 {
    let (ok, s) = dnsd_ctl(config, &["stats"]);
    assert!(ok, "{s}");
    palisade_tests::counters::Counters::parse(&s).get(name)
}

/// The writer slots `xdp-guard list` shows for `ip` ("dnsd=42s http-front=59s").
fn slots(pins: &Path, ip: Ipv4Addr) -> String {
    let (ok, out) = xdp_guard(&[
        "list",
        "--pin-path",
        pins.to_str().unwrap(),
        "--addr",
        &ip.to_string(),
    ]);
    assert!(ok, "{out}");
    out
}

fn xdp_drops(pins: &Path) -> u64 {
    let (ok, out) = xdp_guard(&["stats", "--pin-path", pins.to_str().unwrap()]);
    assert!(ok, "{out}");
    palisade_tests::counters::Counters::parse(&out).get("xdp.drop_blocked_addr")
}

fn dnsd_config(
    dir: &Path,
    node: &str,
    addr: Ipv4Addr,
    redis: &str,
    pins: Option<&Path>,
) -> PathBuf {
    let mut c = format!(
        "[server]\nlisten = [\"{addr}\"]\nport = {DNS_PORT}\nworkers = 1\n\n\
         [[zone]]\norigin = \"example.com.\"\nfile = \"{}\"\n\n\
         [control]\nsocket = \"{}\"\n\n\
         [defence.rrl]\nenabled = false\n\n\
         [redis]\nurl = \"{redis}\"\nkey_file = \"{}\"\ninstance = \"{node}\"\nreconnect_max_ms = 300\npresence_ms = 300\n",
        palisade_tests::data_dir()
            .join("example.com.zone")
            .display(),
        dir.join(format!("dnsd-{node}.sock")).display(),
        dir.join("fleet.key").display(),
    );
    if let Some(p) = pins {
        c.push_str(&format!("\n[xdp]\npin_path = \"{}\"\n", p.display()));
    }
    let path = dir.join(format!("dnsd-{node}.toml"));
    std::fs::write(&path, c).unwrap();
    path
}

fn front_config(
    dir: &Path,
    node: &str,
    addr: Ipv4Addr,
    redis: &str,
    pins: Option<&Path>,
) -> PathBuf {
    let key = dir.join("fleet.key").display().to_string();
    let mut c = format!(
        "[server]\nlisten = [\"{addr}:{HTTP_PORT}\"]\nworkers = 1\n\n\
         [metrics]\nlisten = \"{addr}:{METRICS_PORT}\"\n\n\
         [rules]\nfile = \"rules.toml\"\n\n\
         [redis]\nurl = \"{redis}\"\nkey_file = \"{key}\"\ninstance = \"{node}\"\nreconnect_max_ms = 300\npresence_ms = 300\n\n\
         [[upstream]]\nname = \"app\"\nservers = [\"127.0.0.1:9\"]\n\n\
         [[site]]\nhosts = [\"a.test\"]\nupstream = \"app\"\ntenant = 1\n"
    );
    if let Some(p) = pins {
        c.push_str(&format!("\n[xdp]\npin_path = \"{}\"\n", p.display()));
    }
    let path = dir.join(format!("front-{node}.toml"));
    std::fs::write(&path, c).unwrap();
    path
}

#[test]
fn blocks_flow_through_the_node_and_the_fleet() {
    if let Err(why) = netns::available() {
        palisade_tests::skipped(&format!("node block path test: {why}"));
        return;
    }
    let Some(mut redis) = RedisServer::start() else {
        return;
    };
    let client_addrs: Vec<Ipv4Addr> = std::iter::once(CLIENT).chain((2..6).map(hostile)).collect();
    let lan = Lan::new(&["c", "a", "b"], &[&client_addrs, &[NODE_A], &[NODE_B]])
        .expect("namespaces on a bridge");
    let (c, a, b) = (lan.ns(0), lan.ns(1), lan.ns(2));
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("rules.toml"),
        "[[tenant]]\nid = 1\ndeny = [\"192.0.2.64/26\"]\n\
         escalate = { after = 1, window_secs = 60, block_secs = 60, on = [\"deny\"], http = \"block_map\" }\n",
    )
    .unwrap();
    let url = redis.unix_url();
    std::fs::copy(redis.key_file(), dir.path().join("fleet.key")).unwrap();
    std::fs::set_permissions(
        dir.path().join("fleet.key"),
        std::os::unix::fs::PermissionsExt::from_mode(0o600),
    )
    .unwrap();
    let pins = Pins(PathBuf::from(format!(
        "/sys/fs/bpf/palisade-test-{}-{}",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    )));

    // Node A: the guard first (a node service), then its daemons.
    let guard_toml = dir.path().join("guard.toml");
    std::fs::write(
        &guard_toml,
        format!(
            "interface = \"{}\"\nmode = \"auto\"\ndns_ports = [{DNS_PORT}]\nrate = 0\npin_path = \"{}\"\n",
            lan.ifname(1),
            pins.0.display()
        ),
    )
    .unwrap();
    let guard_bin = palisade_tests::bin("xdp-guard");
    let out = in_netns(
        a,
        &[
            guard_bin.to_str().unwrap(),
            "attach",
            "-c",
            guard_toml.to_str().unwrap(),
        ],
    )
    .output()
    .unwrap();
    let text =
        String::from_utf8_lossy(&out.stdout).to_string() + &String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "xdp-guard attach: {text}");
    let (ok, st) = xdp_guard(&["status", "--pin-path", pins.0.to_str().unwrap()]);
    assert!(
        ok && st.contains(&format!("attached: {}", lan.ifname(1))),
        "{st}"
    );

    let dnsd = palisade_tests::bin("dnsd");
    let front = palisade_tests::bin("http-front");
    let cfg_da = dnsd_config(dir.path(), "a", NODE_A, &url, Some(&pins.0));
    let cfg_db = dnsd_config(dir.path(), "b", NODE_B, &url, None);
    let cfg_fa = front_config(dir.path(), "a", NODE_A, &url, Some(&pins.0));
    let cfg_fb = front_config(dir.path(), "b", NODE_B, &url, None);
    let s = |p: &PathBuf| p.to_str().unwrap().to_string();
    let mut dnsd_a = Daemon::spawn(
        "dnsd-a",
        a,
        dir.path(),
        &[dnsd.to_str().unwrap(), "serve", "-c", &s(&cfg_da)],
    );
    let _dnsd_b = Daemon::spawn(
        "dnsd-b",
        b,
        dir.path(),
        &[dnsd.to_str().unwrap(), "serve", "-c", &s(&cfg_db)],
    );
    let front_a = Daemon::spawn(
        "front-a",
        a,
        dir.path(),
        &[front.to_str().unwrap(), "-c", &s(&cfg_fa)],
    );
    let _front_b = Daemon::spawn(
        "front-b",
        b,
        dir.path(),
        &[front.to_str().unwrap(), "-c", &s(&cfg_fb)],
    );

    // Ready: both nodes answer DNS and HTTP, and all four daemons are synced.
    wait_for("DNS on both nodes", Duration::from_secs(30), || {
        answered(c, CLIENT, NODE_A) && answered(c, CLIENT, NODE_B)
    });
    wait_for("HTTP on both nodes", Duration::from_secs(30), || {
        http_status(c, CLIENT, NODE_A) == Some(502) && http_status(c, CLIENT, NODE_B) == Some(502)
    });
    wait_for("four synced daemons", Duration::from_secs(30), || {
        dnsd_stat(&cfg_da, "redis.connected") == 1
            && dnsd_stat(&cfg_db, "redis.connected") == 1
            && front_metric(c, NODE_A, "palisade_redis_sync{what=\"connected\"}") == 1
            && front_metric(c, NODE_B, "palisade_redis_sync{what=\"connected\"}") == 1
    });
    // The daemons on A write into the pinned maps (each in its slot).
    wait_for("mirrors open", Duration::from_secs(10), || {
        dnsd_stat(&cfg_da, "xdp.mirror.open") == 1
            && front_metric(c, NODE_A, "palisade_xdp_mirror_open") == 1
    });
    assert!(
        front_a.log().contains("-http-front-a"),
        "http-front's node id names daemon and instance:\n{}",
        front_a.log()
    );

    // 1. An escalation at http-front on A: XDP on A drops the source's DNS packets, dnsd on B
    //    ignores its queries, within a second.
    let h1 = hostile(2);
    assert!(answered(c, h1, NODE_A) && answered(c, h1, NODE_B));
    let drops_before = xdp_drops(&pins.0);
    let t0 = Instant::now();
    assert_eq!(http_status(c, h1, NODE_A), Some(403));
    wait_for("XDP on A drops the source", Duration::from_secs(5), || {
        !answered(c, h1, NODE_A)
    });
    let at_a = t0.elapsed();
    wait_for(
        "dnsd on B ignores the source",
        Duration::from_secs(5),
        || !answered(c, h1, NODE_B),
    );
    let at_b = t0.elapsed();
    eprintln!(
        "escalation at http-front A: XDP on A drops after {at_a:?}, dnsd on B after {at_b:?}"
    );
    assert!(at_b < Duration::from_secs(1), "dnsd on B took {at_b:?}");
    // dnsd on A may drop the first probes itself (the block reaches it over Redis as fast as
    // the XDP mirror writes the kernel maps): probe until XDP is the one dropping.
    wait_for("the drop happens in XDP", Duration::from_secs(5), || {
        let _ = answered(c, h1, NODE_A);
        xdp_drops(&pins.0) > drops_before
    });
    assert!(dnsd_stat(&cfg_db, "blocked.peer") >= 1);
    // In the kernel: http-front's slot, and dnsd's too once the sync brought it to dnsd on A.
    wait_for(
        "both writers hold the block",
        Duration::from_secs(5),
        || {
            let l = slots(&pins.0, h1);
            l.contains("http-front=") && l.contains("dnsd=")
        },
    );
    assert!(answered(c, CLIENT, NODE_A), "others are served");

    // 2. Redis away for 10 s while both daemons block new sources.
    redis.kill();
    let outage = Instant::now();
    let (overlap, by_front, by_dnsd) = (hostile(3), hostile(4), hostile(5));
    // Overlap on one address, each daemon holding only its own: http-front for 60 s, then
    // dnsd for 3 s (in that order: once in XDP, the source's HTTP would be dropped too).
    assert_eq!(http_status(c, overlap, NODE_A), Some(403));
    let (ok, out) = dnsd_ctl(
        &cfg_da,
        &["block", "add", &overlap.to_string(), "--ttl", "3"],
    );
    assert!(ok, "{out}");
    wait_for("both slots set", Duration::from_secs(5), || {
        let l = slots(&pins.0, overlap);
        l.contains("http-front=") && l.contains("dnsd=")
    });
    // New decisions on both nodes.
    assert_eq!(http_status(c, by_front, NODE_A), Some(403));
    let (ok, out) = dnsd_ctl(
        &cfg_db,
        &["block", "add", &by_dnsd.to_string(), "--ttl", "600"],
    );
    assert!(ok, "{out}");
    // dnsd's short block ends; http-front's keeps the address dropped.
    std::thread::sleep(Duration::from_millis(3500));
    assert!(
        !answered(c, overlap, NODE_A),
        "the longer block holds:\n{}",
        slots(&pins.0, overlap)
    );
    let l = slots(&pins.0, overlap);
    assert!(
        l.contains("http-front=") && (!l.contains("dnsd=") || l.contains("dnsd=expired")),
        "{l}"
    );
    std::thread::sleep(Duration::from_secs(10).saturating_sub(outage.elapsed()));
    redis.restart();
    let back = Instant::now();
    // Every decision made meanwhile is enforced everywhere.
    let t = wait_for(
        "by_front dropped by dnsd on B",
        Duration::from_secs(20),
        || !answered(c, by_front, NODE_B),
    );
    eprintln!(
        "{:?} after the restart: by_front dropped by dnsd on B (the check took {t:?})",
        back.elapsed()
    );
    let t = wait_for(
        "by_dnsd dropped by XDP on A",
        Duration::from_secs(20),
        || !answered(c, by_dnsd, NODE_A),
    );
    eprintln!(
        "{:?} after the restart: by_dnsd dropped by XDP on A (the check took {t:?})",
        back.elapsed()
    );
    let t = wait_for(
        "by_dnsd refused by http-front on A",
        Duration::from_secs(20),
        || http_status(c, by_dnsd, NODE_A).is_none(),
    );
    eprintln!(
        "{:?} after the restart: by_dnsd refused by http-front on A (the check took {t:?})",
        back.elapsed()
    );
    let t = wait_for(
        "by_front refused by http-front on B",
        Duration::from_secs(20),
        || http_status(c, by_front, NODE_B).is_none(),
    );
    eprintln!(
        "{:?} after the restart: by_front refused by http-front on B (the check took {t:?})",
        back.elapsed()
    );
    eprintln!(
        "after the Redis restart, every decision enforced everywhere in {:?}",
        back.elapsed()
    );

    // 3. dnsd on A stops: XDP keeps enforcing http-front's blocks.
    dnsd_a.stop();
    let drops = xdp_drops(&pins.0);
    let probe = |src: Ipv4Addr| -> bool {
        // dnsd is gone, so nothing on A answers DNS: count XDP drops of a UDP probe instead.
        let before = xdp_drops(&pins.0);
        let _ = answered(c, src, NODE_A);
        xdp_drops(&pins.0) > before
    };
    assert!(
        probe(h1) && probe(by_front),
        "http-front's blocks still dropped in XDP"
    );
    assert!(!probe(CLIENT), "an unblocked source is not dropped");
    assert!(xdp_drops(&pins.0) > drops);
    drop(front_a);
}
