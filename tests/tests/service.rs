//! The daemons as systemd runs them, on machines where systemd is not PID 1: each reports
//! READY=1, RELOADING=1 (with MONOTONIC_USEC) and READY=1 around a reload (ctl and SIGHUP),
//! WATCHDOG=1 within the watchdog period and STOPPING=1 to a NOTIFY_SOCKET the test owns; the
//! units in packaging/systemd pass `systemd-analyze verify`; and each binary runs as its unit
//! would — an unprivileged user with only the unit's capabilities, through `setpriv` — and
//! serves (and fails without those capabilities, so the check can fail).
//!
//! Needs root for the setpriv cases (CI runs as root); elsewhere they say so loudly and skip.

use std::net::{SocketAddr, UdpSocket};
use std::os::unix::net::UnixDatagram;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use palisade_tests::net;
use palisade_tests::wait::wait_for;
use palisade_tests::wire::{QueryOpts, RawMsg, build_query};

/// A NOTIFY_SOCKET the test reads.
struct Notify {
    sock: UnixDatagram,
    path: PathBuf,
}

impl Notify {
    fn new(dir: &Path) -> Notify {
        let path = dir.join("notify.sock");
        let sock = UnixDatagram::bind(&path).unwrap();
        sock.set_read_timeout(Some(Duration::from_millis(200)))
            .unwrap();
        Notify { sock, path }
    }

    /// The next message that contains `what` within `limit` (earlier ones are skipped), or
    /// a panic listing what came.
    fn expect(&self, what: &str, limit: Duration) -> String {
        let end = Instant::now() + limit;
        let mut seen = Vec::new();
        let mut buf = [0u8; 4096];
        while Instant::now() < end {
            if let Ok(n) = self.sock.recv(&mut buf) {
                let m = String::from_utf8_lossy(&buf[..n]).into_owned();
                if m.lines().any(|l| l == what || l.starts_with(what)) {
                    return m;
                }
                seen.push(m);
            }
        }
        panic!("no {what} within {limit:?}; got {seen:?}");
    }
}

fn dnsd_config(dir: &Path, addr: SocketAddr) -> PathBuf {
    // The zone beside the config: an unprivileged user may not reach the repository.
    let zone = dir.join("example.com.zone");
    std::fs::copy(palisade_tests::data_dir().join("example.com.zone"), &zone).unwrap();
    let path = dir.join("dnsd.toml");
    std::fs::write(
        &path,
        format!(
            "[server]\nlisten = [\"{}\"]\nport = {}\nworkers = 1\n\n[[zone]]\norigin = \"example.com.\"\nfile = \"{}\"\n\n[control]\nsocket = \"{}\"\n",
            addr.ip(),
            addr.port(),
            zone.display(),
            dir.join("run").join("dnsd.sock").display()
        ),
    )
    .unwrap();
    std::fs::create_dir_all(dir.join("run")).unwrap();
    path
}

fn answers(addr: SocketAddr) -> bool {
    let s = UdpSocket::bind("127.0.0.1:0").unwrap();
    s.set_read_timeout(Some(Duration::from_millis(300)))
        .unwrap();
    let _ = s.send_to(
        &build_query(7, "www.example.com.", 1, &QueryOpts::udp()),
        addr,
    );
    let mut buf = [0u8; 2048];
    s.recv(&mut buf)
        .ok()
        .and_then(|n| RawMsg::parse(&buf[..n]).ok())
        .is_some_and(|m| m.rcode() == 0 && m.counts[1] > 0)
}

/// A daemon killed when the test ends, even by a failure.
struct Daemon(Child);

impl Drop for Daemon {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// `program args` under the notify socket `n`, with a 1 s watchdog: WATCHDOG_PID is the
/// daemon's own pid (a shell that execs it), as systemd sets it.
fn notified(n: &Notify, program: &Path, args: &[&std::ffi::OsStr]) -> Daemon {
    let child = Command::new("sh")
        .arg("-c")
        .arg("WATCHDOG_PID=$$ exec \"$@\"")
        .arg("sh")
        .arg(program)
        .args(args)
        .env("NOTIFY_SOCKET", &n.path)
        .env("WATCHDOG_USEC", "1000000")
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    Daemon(child)
}

/// SIGHUP: RELOADING=1 then READY=1; SIGTERM: STOPPING=1.
fn hup_then_term(n: &Notify, child: &mut Child) {
    kill(child, libc::SIGHUP);
    n.expect("RELOADING=1", Duration::from_secs(5));
    n.expect("READY=1", Duration::from_secs(5));
    kill(child, libc::SIGTERM);
    n.expect("STOPPING=1", Duration::from_secs(5));
}

fn kill(child: &mut Child, sig: i32) {
    // SAFETY: a plain signal to our own child.
    unsafe {
        libc::kill(child.id() as i32, sig);
    }
}

#[test]
fn dnsd_tells_the_service_manager_ready_reloading_watchdog_stopping() {
    let dir = tempfile::tempdir().unwrap();
    let n = Notify::new(dir.path());
    let addr = net::test_addr();
    let cfg = dnsd_config(dir.path(), addr);
    let mut d = notified(
        &n,
        &palisade_tests::bin("dnsd"),
        &["serve".as_ref(), "-c".as_ref(), cfg.as_os_str()],
    );
    let child = &mut d.0;
    let ready = n.expect("READY=1", Duration::from_secs(20));
    assert!(ready.contains("STATUS=serving 1 zones"), "{ready}");
    assert!(answers(addr), "READY=1 comes once it answers");
    n.expect("WATCHDOG=1", Duration::from_secs(3));
    // ctl reload: RELOADING=1 with the monotonic time, then READY=1.
    let out = Command::new(palisade_tests::bin("dnsd"))
        .args(["ctl", "-c"])
        .arg(&cfg)
        .arg("reload")
        .output()
        .unwrap();
    assert!(out.status.success());
    let r = n.expect("RELOADING=1", Duration::from_secs(5));
    let usec: u64 = r
        .lines()
        .find_map(|l| l.strip_prefix("MONOTONIC_USEC="))
        .unwrap_or_else(|| panic!("no MONOTONIC_USEC in {r}"))
        .parse()
        .unwrap();
    assert!(usec > 0);
    n.expect("READY=1", Duration::from_secs(5));
    // SIGHUP does the same.
    hup_then_term(&n, child);
}

#[test]
fn http_front_tells_the_service_manager_ready_reloading_stopping() {
    let dir = tempfile::tempdir().unwrap();
    let n = Notify::new(dir.path());
    let ip = net::test_ip();
    let port = net::free_port(ip);
    let cfg = dir.path().join("front.toml");
    std::fs::write(
        &cfg,
        format!(
            "[server]\nlisten = [\"{ip}:{port}\"]\n\n[control]\nsocket = \"{}\"\n\n\
             [[upstream]]\nname = \"app\"\nservers = [\"127.0.0.1:9\"]\n\n\
             [[site]]\nhosts = [\"a.test\"]\nupstream = \"app\"\n",
            dir.path().join("front.sock").display()
        ),
    )
    .unwrap();
    let mut d = notified(
        &n,
        &palisade_tests::bin("http-front"),
        &["-c".as_ref(), cfg.as_os_str()],
    );
    let child = &mut d.0;
    let ready = n.expect("READY=1", Duration::from_secs(20));
    assert!(ready.contains("STATUS=serving 1 sites"), "{ready}");
    assert!(std::net::TcpStream::connect((ip, port)).is_ok());
    n.expect("WATCHDOG=1", Duration::from_secs(3));
    let out = Command::new(palisade_tests::bin("http-front"))
        .arg("-c")
        .arg(&cfg)
        .args(["ctl", "reload"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let r = n.expect("RELOADING=1", Duration::from_secs(5));
    assert!(r.contains("MONOTONIC_USEC="), "{r}");
    n.expect("READY=1", Duration::from_secs(5));
    hup_then_term(&n, child);
}

/// The unit files, with their binaries' paths pointed at this build.
fn units(dir: &Path) -> Vec<PathBuf> {
    let src = palisade_tests::repo_root().join("packaging/systemd");
    let mut out = Vec::new();
    for name in [
        "palisade-dnsd.service",
        "palisade-http-front.service",
        "palisade-xdp-guard.service",
    ] {
        let mut text = std::fs::read_to_string(src.join(name)).unwrap();
        for bin in ["dnsd", "http-front", "xdp-guard"] {
            text = text.replace(
                &format!("/usr/sbin/{bin}"),
                palisade_tests::bin(bin).to_str().unwrap(),
            );
        }
        let p = dir.join(name);
        std::fs::write(&p, text).unwrap();
        out.push(p);
    }
    out
}

#[test]
fn the_units_pass_systemd_analyze_verify() {
    let Some(tool) = palisade_tests::find_program("systemd-analyze") else {
        palisade_tests::skipped("systemd-analyze is not installed (Debian's systemd)");
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let files = units(dir.path());
    let out = Command::new(tool)
        .args(["verify", "--man=no"])
        .args(&files)
        .output()
        .unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success() && text.trim().is_empty(), "{text}");
}

/// A unit's `AmbientCapabilities=`, as setpriv's capability list (`-all,+cap,...`).
fn unit_caps(name: &str) -> String {
    let text = std::fs::read_to_string(
        palisade_tests::repo_root()
            .join("packaging/systemd")
            .join(name),
    )
    .unwrap();
    let caps: Vec<String> = text
        .lines()
        .find_map(|l| l.strip_prefix("AmbientCapabilities="))
        .unwrap_or("")
        .split_whitespace()
        .map(|c| format!("+{}", c.trim_start_matches("CAP_").to_lowercase()))
        .collect();
    format!("-all,{}", caps.join(","))
}

/// setpriv's arguments for uid/gid 65534 (nobody) with `caps` inheritable, ambient and
/// bounding, no new privileges — as a unit's User=, AmbientCapabilities= and
/// NoNewPrivileges= would run it.
fn setpriv_args(caps: &str) -> Vec<String> {
    vec![
        "--reuid=65534".into(),
        "--regid=65534".into(),
        "--clear-groups".into(),
        format!("--inh-caps={caps}"),
        format!("--ambient-caps={caps}"),
        format!("--bounding-set={caps}"),
        "--no-new-privs".into(),
        "--".into(),
    ]
}

/// `program` run as [`setpriv_args`] says.
fn as_unit(caps: &str, program: &Path) -> Command {
    let mut c = Command::new("setpriv");
    c.args(setpriv_args(caps)).arg(program);
    c
}

/// A directory the unprivileged user may read (and write `run/` in).
fn shared_dir() -> tempfile::TempDir {
    use std::os::unix::fs::PermissionsExt as _;
    let dir = tempfile::tempdir().unwrap();
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    dir
}

/// A copy of the workspace binary `name` in `dir` (an unprivileged user may not reach the
/// target directory, under /root on CI).
fn bin_copy(dir: &Path, name: &str) -> PathBuf {
    let p = dir.join(name);
    std::fs::copy(palisade_tests::bin(name), &p).unwrap();
    p
}

fn open_to_nobody(dir: &Path) {
    use std::os::unix::fs::PermissionsExt as _;
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            std::os::unix::fs::chown(&p, Some(65534), Some(65534)).unwrap();
        } else {
            let exec = p.metadata().unwrap().permissions().mode() & 0o100 != 0;
            let mode = if exec { 0o755 } else { 0o644 };
            std::fs::set_permissions(&p, std::fs::Permissions::from_mode(mode)).unwrap();
        }
    }
}

fn root_or_skip(what: &str) -> bool {
    // SAFETY: getuid has no preconditions.
    if unsafe { libc::getuid() } != 0 {
        palisade_tests::skipped(&format!(
            "{what}: needs root to change user and capabilities"
        ));
        return false;
    }
    true
}

#[test]
fn dnsd_serves_port_53_as_its_unit_runs_it_and_not_without_its_capabilities() {
    if !root_or_skip("dnsd as its unit") {
        return;
    }
    let dir = shared_dir();
    let addr = SocketAddr::new(net::test_ip().into(), 53);
    let cfg = dnsd_config(dir.path(), addr);
    let dnsd = bin_copy(dir.path(), "dnsd");
    open_to_nobody(dir.path());
    // The unit's capabilities: serves port 53, its control socket answers.
    let mut d = Daemon(
        as_unit(&unit_caps("palisade-dnsd.service"), &dnsd)
            .args(["serve", "-c"])
            .arg(&cfg)
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    wait_for(
        "dnsd as nobody answering on port 53",
        Duration::from_secs(20),
        || answers(addr),
    );
    let out = as_unit("-all", &dnsd)
        .args(["ctl", "-c"])
        .arg(&cfg)
        .arg("status")
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    kill(&mut d.0, libc::SIGTERM);
    let _ = d.0.wait();
    // Without CAP_NET_BIND_SERVICE it cannot bind port 53, and says so.
    let out = as_unit("-all", &dnsd)
        .args(["serve", "-c"])
        .arg(&cfg)
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("ermission denied"), "{err}");
}

#[test]
fn http_front_serves_port_80_as_its_unit_runs_it() {
    if !root_or_skip("http-front as its unit") {
        return;
    }
    let dir = shared_dir();
    let ip = net::test_ip();
    let cfg = dir.path().join("front.toml");
    std::fs::write(
        &cfg,
        format!(
            "[server]\nlisten = [\"{ip}:80\"]\n\n[[upstream]]\nname = \"app\"\nservers = [\"127.0.0.1:9\"]\n\n\
             [[site]]\nhosts = [\"a.test\"]\nupstream = \"app\"\n"
        ),
    )
    .unwrap();
    let front = bin_copy(dir.path(), "http-front");
    open_to_nobody(dir.path());
    let mut d = Daemon(
        as_unit(&unit_caps("palisade-http-front.service"), &front)
            .arg("-c")
            .arg(&cfg)
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    wait_for(
        "http-front as nobody on port 80",
        Duration::from_secs(20),
        || std::net::TcpStream::connect((ip, 80)).is_ok(),
    );
    kill(&mut d.0, libc::SIGTERM);
    let _ = d.0.wait();
    let out = as_unit("-all", &front)
        .arg("-c")
        .arg(&cfg)
        .output()
        .unwrap();
    assert!(!out.status.success(), "no port 80 without the capability");
}

#[test]
fn xdp_guard_attaches_as_its_unit_runs_it() {
    if !root_or_skip("xdp-guard as its unit") {
        return;
    }
    if let Err(why) = palisade_tests::netns::available() {
        palisade_tests::skipped(&format!("xdp-guard as its unit: {why}"));
        return;
    }
    let pair = palisade_tests::netns::VethPair::new().expect("veth pair");
    let dir = shared_dir();
    // The unit's ExecStartPre makes the pin directory, owned by the service user.
    let pins = PathBuf::from(format!("/sys/fs/bpf/palisade-unit-{}", std::process::id()));
    std::fs::create_dir_all(&pins).unwrap();
    std::os::unix::fs::chown(&pins, Some(65534), Some(65534)).unwrap();
    let cfg = dir.path().join("guard.toml");
    std::fs::write(
        &cfg,
        format!(
            "interface = \"{}\"\nmode = \"generic\"\ndns_ports = [53]\nrate = 100\nburst = 100\npin_path = \"{}\"\n",
            pair.if_b,
            pins.display()
        ),
    )
    .unwrap();
    let guard = bin_copy(dir.path(), "xdp-guard");
    open_to_nobody(dir.path());
    let run = |caps: &str, args: &[&str]| {
        pair.b
            .command("setpriv")
            .args(setpriv_args(caps))
            .arg(&guard)
            .args(args)
            .output()
            .unwrap()
    };
    let caps = unit_caps("palisade-xdp-guard.service");
    let out = run(&caps, &["attach", "-c", cfg.to_str().unwrap()]);
    let text = format!("{out:?}");
    let status = run(&caps, &["status", "--pin-path", pins.to_str().unwrap()]);
    let detach = run(
        &caps,
        &["detach", "--purge", "--pin-path", pins.to_str().unwrap()],
    );
    let _ = std::fs::remove_dir_all(&pins);
    assert!(out.status.success(), "attach as the unit: {text}");
    assert_eq!(status.status.code(), Some(0), "{status:?}");
    assert!(detach.status.success(), "{detach:?}");
    // Without the capabilities it cannot load the program.
    std::fs::create_dir_all(&pins).unwrap();
    std::os::unix::fs::chown(&pins, Some(65534), Some(65534)).unwrap();
    let out = run("-all", &["attach", "-c", cfg.to_str().unwrap()]);
    let _ = run(
        &caps,
        &["detach", "--purge", "--pin-path", pins.to_str().unwrap()],
    );
    let _ = std::fs::remove_dir_all(&pins);
    assert!(
        !out.status.success(),
        "attach without capabilities: {out:?}"
    );
}
