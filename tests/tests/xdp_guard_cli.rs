//! `xdp-guard` as the node's service, on a veth in namespaces: `attach` leaves the program
//! attached after it exits and `status` says so (exit 0; 3 when not attached); the
//! operator's `block`/`unblock` drop and pass a source with no daemon running; attaching
//! again updates the rate settings in place, or replaces maps of another size — and a
//! daemon's mirror into the pinned maps reopens them and writes its blocks again; dnsd
//! configured to attach itself refuses to attach over the node's guard and mirrors into its
//! maps instead; `detach` removes the program and keeps the maps, `--purge` removes them.
//!
//! Needs root (namespaces, XDP, bpffs); elsewhere it says so loudly and skips.

use std::net::{SocketAddr, UdpSocket};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::Arc;
use std::time::Duration;

use ipnet::IpNet;
use palisade_tests::netns::{self, VethPair};
use palisade_tests::wait::wait_for;
use shield::block::{BlockConfig, BlockEntry, BlockMap, Evidence, Origin};
use xdp_guard::{GuardMaps, Mirror, MirrorOptions};

/// A pin directory under /sys/fs/bpf of this test alone; detached and removed on drop.
struct Pins(PathBuf);

impl Pins {
    fn new(tag: &str) -> Pins {
        Pins(PathBuf::from(format!(
            "/sys/fs/bpf/palisade-cli-{}-{tag}",
            std::process::id()
        )))
    }

    fn arg(&self) -> &str {
        self.0.to_str().unwrap()
    }
}

impl Drop for Pins {
    fn drop(&mut self) {
        let _ = run(None, &["detach", "--purge", "--pin-path", self.arg()]);
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Runs xdp-guard (in `ns` when given): (exit code, stdout + stderr).
fn run(ns: Option<&netns::Netns>, args: &[&str]) -> (i32, String) {
    let bin = palisade_tests::bin("xdp-guard");
    let mut cmd = match ns {
        Some(ns) => ns.command(&bin),
        None => Command::new(&bin),
    };
    let out: Output = cmd.args(args).output().expect("run xdp-guard");
    let mut s = String::from_utf8_lossy(&out.stdout).into_owned();
    s.push_str(&String::from_utf8_lossy(&out.stderr));
    (out.status.code().unwrap_or(-1), s)
}

fn guard_toml(dir: &Path, pair: &VethPair, pins: &Pins, rate: u64, v4_entries: u32) -> PathBuf {
    let p = dir.join("guard.toml");
    std::fs::write(
        &p,
        format!(
            "interface = \"{}\"\nmode = \"generic\"\ndns_ports = [5353]\nrate = {rate}\nburst = 100\n\
             block_v4_entries = {v4_entries}\npin_path = \"{}\"\n",
            pair.if_b,
            pins.0.display()
        ),
    )
    .unwrap();
    p
}

/// XDP drops of blocked addresses so far.
fn drops(pins: &Pins) -> u64 {
    let (code, out) = run(None, &["stats", "--pin-path", pins.arg()]);
    assert_eq!(code, 0, "{out}");
    palisade_tests::counters::Counters::parse(&out).get("xdp.drop_blocked_addr")
}

/// Sends one UDP datagram from A to B; true when XDP dropped it as blocked.
fn dropped(pair: &VethPair, pins: &Pins) -> bool {
    let before = drops(pins);
    pair.a
        .run(|| {
            let s = UdpSocket::bind(SocketAddr::new(VethPair::A4.into(), 0)).unwrap();
            s.send_to(b"x", SocketAddr::new(VethPair::B4.into(), 9))
                .unwrap();
        })
        .unwrap();
    std::thread::sleep(Duration::from_millis(50));
    drops(pins) > before
}

#[test]
fn the_node_guard_outlives_its_process_and_daemons_follow_its_maps() {
    if let Err(why) = netns::available() {
        palisade_tests::skipped(&format!("xdp-guard CLI test: {why}"));
        return;
    }
    let pair = VethPair::new().expect("veth pair");
    let dir = tempfile::tempdir().unwrap();
    let pins = Pins::new("a");
    let a4 = VethPair::A4.to_string();

    // Not attached: exit 3.
    let (code, out) = run(None, &["status", "--pin-path", pins.arg()]);
    assert_eq!(code, 3, "{out}");
    assert!(out.contains("attached: no"), "{out}");
    // A config error names the file, line and key.
    let bad = dir.path().join("bad.toml");
    std::fs::write(&bad, "interface = \"x\"\nrat = 5\n").unwrap();
    let (code, out) = run(None, &["attach", "-c", bad.to_str().unwrap()]);
    assert_ne!(code, 0);
    assert!(out.contains("bad.toml:2:") && out.contains("rat"), "{out}");

    // Attach: the process exits, the program stays.
    let cfg = guard_toml(dir.path(), &pair, &pins, 1000, 4096);
    let (code, out) = run(Some(&pair.b), &["attach", "-c", cfg.to_str().unwrap()]);
    assert_eq!(code, 0, "{out}");
    assert!(out.contains(&format!("attached to {}", pair.if_b)), "{out}");
    let (code, out) = run(None, &["status", "--pin-path", pins.arg()]);
    assert_eq!(code, 0, "{out}");
    assert!(
        out.contains(&format!("attached: {} (generic)", pair.if_b))
            && out.contains("rate limit: 1000 packets/s per source, burst 100, UDP ports 5353")
            && out.contains("guard_block_v4")
            && out.contains("/ 4096"),
        "{out}"
    );

    // The operator's slot: a block drops the source with no daemon running; unblock passes it.
    assert!(!dropped(&pair, &pins));
    let (code, out) = run(
        None,
        &["block", "--pin-path", pins.arg(), &a4, "--ttl", "600"],
    );
    assert_eq!(code, 0, "{out}");
    assert!(dropped(&pair, &pins), "blocked by the operator");
    let (code, out) = run(None, &["list", "--pin-path", pins.arg()]);
    assert!(
        code == 0 && out.contains(&format!("{a4}/32")) && out.contains("operator="),
        "{out}"
    );
    let (code, out) = run(None, &["unblock", "--pin-path", pins.arg(), &a4]);
    assert_eq!(code, 0, "{out}");
    assert!(!dropped(&pair, &pins));
    let (code, _) = run(None, &["unblock", "--pin-path", pins.arg(), &a4]);
    assert_ne!(code, 0, "nothing left to unblock");

    // A daemon's mirror into the pinned maps (as http-front runs it), its own slot.
    let blocks = BlockMap::new(BlockConfig::default());
    let net: IpNet = format!("{a4}/32").parse().unwrap();
    blocks.insert(BlockEntry::new(
        net,
        u64::MAX,
        "test",
        Origin::Local,
        Evidence::Tcp,
    ));
    let opts = MirrorOptions {
        recheck_every: Duration::from_millis(100),
        ..Default::default()
    };
    let mirror = Mirror::pinned(
        pins.0.clone(),
        xdp_guard::SLOT_HTTP_FRONT,
        blocks.subscribe("xdp"),
        opts,
    )
    .spawn()
    .unwrap();
    wait_for(
        "the mirror writes its block",
        Duration::from_secs(5),
        || dropped(&pair, &pins),
    );
    let stats = Arc::clone(mirror.stats());
    assert_eq!(stats.snapshot().reopens, 1);

    // Attach again with a new rate: updated in place, same program, the block stays.
    let cfg = guard_toml(dir.path(), &pair, &pins, 2000, 4096);
    let (code, out) = run(Some(&pair.b), &["attach", "-c", cfg.to_str().unwrap()]);
    assert_eq!(code, 0, "{out}");
    assert!(
        out.contains("already attached") && out.contains("rate settings updated"),
        "{out}"
    );
    let (_, out) = run(None, &["status", "--pin-path", pins.arg()]);
    assert!(out.contains("rate limit: 2000 packets/s"), "{out}");
    assert!(dropped(&pair, &pins));

    // Attach with another map size: maps replaced; the mirror reopens them and resyncs.
    let cfg = guard_toml(dir.path(), &pair, &pins, 2000, 8192);
    let (code, out) = run(Some(&pair.b), &["attach", "-c", cfg.to_str().unwrap()]);
    assert_eq!(code, 0, "{out}");
    assert!(out.contains("replacing the attachment"), "{out}");
    wait_for(
        "the mirror reopens the new maps",
        Duration::from_secs(5),
        || stats.snapshot().reopens >= 2,
    );
    wait_for("its block written again", Duration::from_secs(5), || {
        dropped(&pair, &pins)
    });
    let maps = GuardMaps::open_pinned(&pins.0).unwrap();
    assert_eq!(maps.capacity(xdp_guard::BlockMapKind::AddrV4), 8192);
    let e = maps.get(net).unwrap().expect("entry");
    assert_eq!(e.value.slot(xdp_guard::SLOT_HTTP_FRONT), Some(0));
    drop(mirror);

    // dnsd configured to attach itself: refuses to attach over the node's guard and mirrors
    // into its maps (dnsd's slot) instead.
    let dnsd_toml = dir.path().join("dnsd.toml");
    std::fs::write(
        &dnsd_toml,
        format!(
            "[server]\nlisten = [\"{}\"]\nport = 5353\nworkers = 1\n\n\
             [[zone]]\norigin = \"example.com.\"\nfile = \"{}\"\n\n\
             [control]\nsocket = \"{}\"\n\n\
             [xdp]\ninterface = \"{}\"\npin_path = \"{}\"\n",
            VethPair::B4,
            palisade_tests::data_dir()
                .join("example.com.zone")
                .display(),
            dir.path().join("dnsd.sock").display(),
            pair.if_b,
            pins.0.display()
        ),
    )
    .unwrap();
    let log = dir.path().join("dnsd.log");
    let out = std::fs::File::create(&log).unwrap();
    let mut dnsd = pair
        .b
        .command(palisade_tests::bin("dnsd"))
        .args(["serve", "-c", dnsd_toml.to_str().unwrap()])
        .stdout(out.try_clone().unwrap())
        .stderr(out)
        .spawn()
        .unwrap();
    let ctl = |args: &[&str]| {
        Command::new(palisade_tests::bin("dnsd"))
            .args(["ctl", "-c", dnsd_toml.to_str().unwrap()])
            .args(args)
            .output()
            .map(|o| o.status.success())
            .unwrap_or(false)
    };
    wait_for("dnsd up", Duration::from_secs(20), || ctl(&["status"]));
    let text = std::fs::read_to_string(&log).unwrap();
    assert!(
        text.contains("not attaching over it") && !text.contains("XDP guard attached"),
        "{text}"
    );
    let other = "192.0.2.99";
    assert!(ctl(&["block", "add", other, "--ttl", "600"]));
    wait_for("dnsd's block in its slot", Duration::from_secs(5), || {
        let (_, out) = run(None, &["list", "--pin-path", pins.arg(), "--addr", other]);
        out.contains("dnsd=")
    });
    // The address map filled (the operator's slot): a block dnsd cannot put into it is said
    // so to the operator who added it (it was "ok" with XDP passing the source).
    let ctl_text = |args: &[&str]| {
        let o = Command::new(palisade_tests::bin("dnsd"))
            .args(["ctl", "-c", dnsd_toml.to_str().unwrap()])
            .args(args)
            .output()
            .unwrap();
        (
            o.status.success(),
            String::from_utf8_lossy(&o.stdout).into_owned(),
        )
    };
    let maps = GuardMaps::open_pinned(&pins.0).unwrap();
    let mut filled = 0u32;
    for i in 0..maps.capacity(xdp_guard::BlockMapKind::AddrV4) {
        let a = std::net::Ipv4Addr::from(0xC612_0000u32 + i);
        if maps
            .block(IpNet::from(std::net::IpAddr::V4(a)), u64::MAX)
            .is_err()
        {
            break;
        }
        filled += 1;
    }
    assert!(filled > 8000, "{filled}");
    let (ok, out) = ctl_text(&["block", "add", "192.0.2.100", "--ttl", "600"]);
    assert!(
        ok && out.contains("192.0.2.100/32 is not in the XDP block map")
            && out.contains("dnsd drops it itself"),
        "{out}"
    );
    // One that reaches it (dnsd's own entry, updated in place) is said nothing more of,
    // nor a prefix (the trie, looked up by its key: it was walked whole at each poll).
    let (ok, out) = ctl_text(&["block", "add", other, "--ttl", "900"]);
    assert!(ok && !out.contains("warning"), "{out}");
    let (ok, out) = ctl_text(&["block", "add", "198.51.100.0/24", "--ttl", "900"]);
    assert!(ok && !out.contains("warning"), "{out}");
    // An import of five more addresses: said how many did not fit.
    let list = dir.path().join("import.txt");
    std::fs::write(
        &list,
        "192.0.2.101\n192.0.2.102\n192.0.2.103\n192.0.2.104\n192.0.2.105\n",
    )
    .unwrap();
    let (ok, out) = ctl_text(&["block", "import", list.to_str().unwrap(), "--ttl", "600"]);
    assert!(
        ok && out.contains("warning: 5 blocks did not fit the XDP block map"),
        "{out}"
    );
    let _ = dnsd.kill();
    let _ = dnsd.wait();
    // dnsd gone, the node's guard still attached and still dropping.
    let (code, _) = run(None, &["status", "--pin-path", pins.arg()]);
    assert_eq!(code, 0);

    // Detach: program gone, maps kept (with their blocks); --purge removes them.
    let (code, out) = run(None, &["detach", "--pin-path", pins.arg()]);
    assert!(
        code == 0 && out.contains(&format!("detached from {}", pair.if_b)),
        "{out}"
    );
    let (code, out) = run(None, &["status", "--pin-path", pins.arg()]);
    assert_eq!(code, 3, "{out}");
    assert!(pins.0.join("guard_block_v4").exists());
    assert!(!dropped_without_guard(&pair));
    let (code, out) = run(None, &["detach", "--purge", "--pin-path", pins.arg()]);
    assert_eq!(code, 0, "{out}");
    assert!(!pins.0.join("guard_block_v4").exists());
}

/// With the program detached, a datagram from a (still listed) blocked source reaches B:
/// nothing drops it any more (checked through B's UDP socket).
fn dropped_without_guard(pair: &VethPair) -> bool {
    let got = pair
        .b
        .run(|| {
            let s = UdpSocket::bind(SocketAddr::new(VethPair::B4.into(), 5399)).unwrap();
            s.set_read_timeout(Some(Duration::from_millis(500)))
                .unwrap();
            s
        })
        .unwrap();
    pair.a
        .run(|| {
            let s = UdpSocket::bind(SocketAddr::new(VethPair::A4.into(), 0)).unwrap();
            s.send_to(b"y", SocketAddr::new(VethPair::B4.into(), 5399))
                .unwrap();
        })
        .unwrap();
    let mut b = [0u8; 8];
    got.recv(&mut b).is_err()
}

/// `xdp-guard attach` run by `ip netns exec` (which makes a mount namespace of its own, /sys
/// remounted): the bpffs it mounts, its pins and the attachment they hold vanish when it ends,
/// and it said "attached" with nothing left behind — it says so now, and how to run it.
#[test]
fn attach_under_ip_netns_exec_says_its_pins_vanish() {
    if let Err(why) = netns::available() {
        palisade_tests::skipped(&format!("xdp-guard CLI test: {why}"));
        return;
    }
    let pair = VethPair::new().expect("veth pair");
    let dir = tempfile::tempdir().unwrap();
    let pins = Pins::new("netnsexec");
    let cfg = guard_toml(dir.path(), &pair, &pins, 1000, 4096);
    let out = Command::new("ip")
        .args(["netns", "exec", pair.b.name()])
        .arg(palisade_tests::bin("xdp-guard"))
        .args(["attach", "-c", cfg.to_str().unwrap()])
        .output()
        .expect("run ip netns exec");
    let text =
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    assert!(text.contains("nsenter --net=/run/netns/NAME"), "{text}");
}
