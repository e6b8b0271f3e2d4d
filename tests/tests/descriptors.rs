//! dnsd under a low RLIMIT_NOFILE: too many addresses for the hard limit is refused at start
//! with the numbers; a hard limit below what TCP connections need lowers the TCP bound,
//! says so once, and dnsd serves (instead of failing accept at the first busy minute).
//! http-front likewise: a hard limit where not even a few connections fit beside the idle
//! pools and the reserve is refused with the numbers (it started with 16 connections, then
//! failed accepts and answered 502 for want of descriptors to reach its origin).

use std::net::{Ipv4Addr, SocketAddr};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use palisade_tests::client::tcp_exchange;
use palisade_tests::servers::Zone;
use palisade_tests::wire::{QueryOpts, RawMsg, build_query};
use palisade_tests::{bin, net};

const HARD: u64 = 1500;

/// dnsd with `listen` under a hard RLIMIT_NOFILE of [`HARD`] that it cannot raise (root
/// loses CAP_SYS_RESOURCE for the child).
fn dnsd_limited(dir: &Path, listen: &str, port: u16) -> Command {
    let zone = Zone::data("example.com.");
    let cfg = format!(
        "[server]\nlisten = [\"{listen}\"]\nport = {port}\nworkers = 1\n\n\
         [[zone]]\norigin = \"example.com.\"\nfile = \"{}\"\n\n\
         [control]\nsocket = \"{}\"\n",
        zone.file.display(),
        dir.join("dnsd.sock").display()
    );
    let path = dir.join("dnsd.toml");
    std::fs::write(&path, cfg).unwrap();
    let mut cmd = under_nofile(HARD);
    cmd.arg(bin("dnsd"))
        .args(["serve", "-c"])
        .arg(&path)
        .env("RUST_LOG", "info")
        .stdin(Stdio::null());
    cmd
}

/// A command line (the program and its arguments to follow) under a hard RLIMIT_NOFILE of
/// `hard` that it cannot raise (root loses CAP_SYS_RESOURCE for the child).
fn under_nofile(hard: u64) -> Command {
    let mut cmd = Command::new("prlimit");
    cmd.arg(format!("--nofile={hard}:{hard}"));
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } == 0 {
        cmd.args(["setpriv", "--bounding-set=-sys_resource", "--"]);
    }
    cmd
}

fn tools() -> bool {
    for t in ["prlimit", "setpriv"] {
        if !palisade_tests::have_program(t) {
            palisade_tests::skipped(&format!("{t} not installed (util-linux)"));
            return false;
        }
    }
    true
}

#[test]
fn more_addresses_than_the_hard_limit_allows_is_refused_with_the_numbers() {
    if !tools() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let ip = net::test_ip();
    let o = ip.octets();
    // A /21 (2,048 addresses) of loopback around the test address.
    let prefix = format!("{}.{}.{}.0/21", o[0], o[1], o[2] & 0xF8);
    let mut child = dnsd_limited(dir.path(), &prefix, 5300)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("dnsd kept running with 2,048 addresses under a hard limit of {HARD}");
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let out = child.wait_with_output().unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(!status.success(), "{text}");
    assert!(
        text.contains(&format!("hard limit RLIMIT_NOFILE is {HARD}")) && text.contains("3072"),
        "the error names the limit and what is needed (2,048 + 1,024):\n{text}"
    );
}

#[test]
fn a_hard_limit_below_the_tcp_bound_lowers_it_and_dnsd_serves() {
    if !tools() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let ip: Ipv4Addr = net::test_ip();
    let port = net::free_port(ip);
    let log = std::fs::File::create(dir.path().join("dnsd.log")).unwrap();
    let child = dnsd_limited(dir.path(), &ip.to_string(), port)
        .stdout(log.try_clone().unwrap())
        .stderr(log)
        .spawn()
        .unwrap();
    struct Kill(std::process::Child);
    impl Drop for Kill {
        fn drop(&mut self) {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
    let _kill = Kill(child);
    let addr = SocketAddr::from((ip, port));
    let q = build_query(3, "www.example.com.", 1, &QueryOpts::default());
    let deadline = Instant::now() + Duration::from_secs(20);
    let reply = loop {
        if let Ok(Some(r)) = tcp_exchange(addr, &q, Duration::from_millis(300)) {
            break r;
        }
        assert!(
            Instant::now() < deadline,
            "dnsd never answered over TCP:\n{}",
            std::fs::read_to_string(dir.path().join("dnsd.log")).unwrap_or_default()
        );
        std::thread::sleep(Duration::from_millis(50));
    };
    let m = RawMsg::parse(&reply).unwrap();
    assert_eq!((m.rcode(), m.counts[1]), (0, 1));
    let log = std::fs::read_to_string(dir.path().join("dnsd.log")).unwrap();
    let lowered: Vec<&str> = log
        .lines()
        .filter(|l| l.contains("tcp_max_connections lowered"))
        .collect();
    assert_eq!(lowered.len(), 1, "{log}");
    // 1,500 minus one UDP socket and its address's TCP listener, the reserve of 1,024 and
    // the transfer slots (16 + 4).
    assert!(lowered[0].contains("effective=454"), "{}", lowered[0]);
}

#[test]
fn http_front_under_a_hard_limit_it_cannot_fit_is_refused_with_the_numbers() {
    if !tools() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let ip: Ipv4Addr = net::test_ip();
    let path = dir.path().join("front.toml");
    std::fs::write(
        &path,
        format!(
            "[server]\nlisten = [\"{ip}:{}\"]\nworkers = 2\n\n\
             [[upstream]]\nname = \"app\"\nservers = [\"{ip}:9\"]\n\n\
             [[site]]\nhosts = [\"a.test\"]\nupstream = \"app\"\n",
            net::free_port(ip)
        ),
    )
    .unwrap();
    let out = under_nofile(64)
        .arg(bin("http-front"))
        .arg("-c")
        .arg(&path)
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(!out.status.success(), "{text}");
    assert!(
        text.contains("server.max_connections")
            && text.contains("hard limit RLIMIT_NOFILE is 64")
            && text.contains("at least 1568"),
        "the error names the key, the limit and what is needed (512 pooled + 1,024 + 32):\n{text}"
    );
}
