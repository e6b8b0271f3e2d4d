//! Servers as child processes: dnsd under test, Knot DNS and NSD as oracles.
//!
//! Each runs in the foreground from a config written to its own temp dir, on its own
//! loopback address and port ([`crate::net`]), with its output kept in a log file there.
//! Starting waits (bounded) until every zone's SOA is answered authoritatively over UDP and
//! TCP; a port taken meanwhile by someone else is retried with another. Each server runs in
//! its own process group, which is killed on drop (also while a test panics, when the log
//! is printed) and gets SIGKILL if the test thread dies first (PR_SET_PDEATHSIG).

use std::fmt::Write as _;
use std::io::{Read, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpStream};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::client;
use crate::counters::Counters;
use crate::net;
use crate::wire::{QueryOpts, qtype, rcode};

/// How long a server may take to answer for all its zones.
const START_TIMEOUT: Duration = Duration::from_secs(20);
/// How many times a start is retried on another port when the port was taken.
const START_TRIES: usize = 5;

/// A zone to serve: its origin and master file.
#[derive(Debug, Clone)]
pub struct Zone {
    /// The origin, with its trailing dot.
    pub origin: String,
    /// The master file (absolute).
    pub file: PathBuf,
    /// Extra `key = value` lines for dnsd's `[[zone]]` table (e.g. `cookies = "require"`).
    pub options: Vec<String>,
}

impl Zone {
    /// A zone from an origin and a file.
    pub fn new(origin: &str, file: impl Into<PathBuf>) -> Zone {
        let mut origin = origin.to_string();
        if !origin.ends_with('.') {
            origin.push('.');
        }
        Zone {
            origin,
            file: file.into(),
            options: Vec::new(),
        }
    }

    /// The zone `origin` from `tests/data/ORIGIN.zone` (origin without its trailing dot).
    pub fn data(origin: &str) -> Zone {
        let base = origin.trim_end_matches('.');
        Zone::new(origin, crate::data_dir().join(format!("{base}.zone")))
    }
}

/// A child process in its own process group with its output in a log file.
pub(crate) struct Proc {
    what: String,
    child: Child,
    log: PathBuf,
}

impl Proc {
    pub(crate) fn spawn(what: &str, mut cmd: Command, log: PathBuf) -> Proc {
        let out = std::fs::File::create(&log).expect("create log file");
        let err = out.try_clone().expect("clone log file");
        cmd.stdin(Stdio::null())
            .stdout(Stdio::from(out))
            .stderr(Stdio::from(err))
            .process_group(0);
        // SAFETY: prctl is async-signal-safe and touches only the calling (child) process.
        unsafe {
            cmd.pre_exec(|| {
                libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
                Ok(())
            });
        }
        let child = cmd
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {what} ({cmd:?}): {e}"));
        Proc {
            what: what.to_string(),
            child,
            log,
        }
    }

    pub(crate) fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// `Some(status)` when the process has exited.
    pub(crate) fn exited(&mut self) -> Option<std::process::ExitStatus> {
        self.child.try_wait().ok().flatten()
    }

    fn print_log(&self) {
        let log = self.log();
        let lines: Vec<&str> = log.lines().collect();
        let from = lines.len().saturating_sub(300);
        eprintln!(
            "----- {} log ({}, last {} lines) -----",
            self.what,
            self.log.display(),
            lines.len() - from
        );
        for l in &lines[from..] {
            eprintln!("{l}");
        }
        eprintln!("----- end of {} log -----", self.what);
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        if std::thread::panicking() {
            self.print_log();
        }
        let pgid = self.child.id() as libc::pid_t;
        // SAFETY: kill has no memory preconditions; the group is the one this child leads.
        unsafe {
            libc::kill(-pgid, libc::SIGKILL);
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
        // Members forked by the leader (NSD's xfrd and server processes) keep the group alive.
        // SAFETY: as above.
        unsafe {
            libc::kill(-pgid, libc::SIGKILL);
        }
    }
}

/// Why a start attempt failed.
enum StartError {
    /// The port was taken: try another.
    AddrInUse(String),
    /// Anything else: give up.
    Fatal(String),
}

fn addr_in_use(log: &str) -> bool {
    let l = log.to_ascii_lowercase();
    l.contains("address already in use") || l.contains("address in use") || l.contains("eaddrinuse")
}

/// Waits until every zone's SOA is answered with NOERROR and AA over UDP, then over TCP.
fn wait_ready(p: &mut Proc, addr: SocketAddr, zones: &[Zone]) -> Result<(), StartError> {
    let deadline = Instant::now() + START_TIMEOUT;
    let mut pending: Vec<&Zone> = zones.iter().collect();
    let probe = QueryOpts {
        timeout: Duration::from_millis(250),
        ..QueryOpts::udp()
    };
    let mut last = String::new();
    for _ in 0..2000 {
        if let Some(st) = p.exited() {
            let log = p.log();
            return Err(if addr_in_use(&log) {
                StartError::AddrInUse(log)
            } else {
                StartError::Fatal(format!(
                    "{} exited ({st}) before it was ready:\n{log}",
                    p.what
                ))
            });
        }
        if Instant::now() > deadline {
            let log = p.log();
            return Err(if addr_in_use(&log) {
                StartError::AddrInUse(log)
            } else {
                StartError::Fatal(format!(
                    "{} not ready on {addr} after {START_TIMEOUT:?} ({last}):\n{log}",
                    p.what
                ))
            });
        }
        if pending.is_empty() {
            // UDP answers everything: check TCP once.
            let tcp = QueryOpts {
                tcp: true,
                ..probe.clone()
            };
            // No zone to wait for (a forwarder): any reply over TCP will do.
            let name = zones.first().map_or(".", |z| z.origin.as_str());
            match client::try_query(addr, name, qtype::SOA, &tcp) {
                Ok(_) => return Ok(()),
                Err(e) => last = e,
            }
        } else {
            let z = pending[0];
            match client::try_query(addr, &z.origin, qtype::SOA, &probe) {
                Ok(r) if r.head.rcode() == rcode::NOERROR && r.msg.authoritative => {
                    pending.remove(0);
                    continue;
                }
                // A zone that requires DNS cookies sends UDP clients without one to TCP.
                Ok(r) if r.head.flags & 0x0200 != 0 => {
                    let tcp = QueryOpts {
                        tcp: true,
                        ..probe.clone()
                    };
                    if let Ok(r) = client::try_query(addr, &z.origin, qtype::SOA, &tcp)
                        && r.head.rcode() == rcode::NOERROR
                        && r.msg.authoritative
                    {
                        pending.remove(0);
                        continue;
                    }
                    last = format!("{} SOA: TC over UDP, not ready over TCP", z.origin);
                }
                Ok(r) => {
                    last = format!(
                        "{} SOA: {}",
                        z.origin,
                        crate::wire::rcode_name(r.head.rcode())
                    )
                }
                Err(e) => last = e,
            }
        }
        std::thread::sleep(Duration::from_millis(25));
    }
    Err(StartError::Fatal(format!(
        "{} never became ready: {last}",
        p.what
    )))
}

/// Starts a server up to [`START_TRIES`] times, each on a fresh address and port.
fn start_with_retries<T>(
    what: &str,
    attempt: impl FnMut(SocketAddr) -> Result<T, StartError>,
) -> T {
    start_with_retries_at(what, net::test_addr, attempt)
}

/// As [`start_with_retries`], with `pick` choosing each attempt's address.
fn start_with_retries_at<T>(
    what: &str,
    pick: impl Fn() -> SocketAddr,
    mut attempt: impl FnMut(SocketAddr) -> Result<T, StartError>,
) -> T {
    let mut last = String::new();
    for _ in 0..START_TRIES {
        match attempt(pick()) {
            Ok(t) => return t,
            Err(StartError::AddrInUse(log)) => last = log,
            Err(StartError::Fatal(msg)) => panic!("{msg}"),
        }
    }
    panic!("{what}: ports kept being taken, {START_TRIES} tries; last log:\n{last}");
}

/// Builds a [`Dnsd`] with more settings than [`Dnsd::start`] takes.
#[derive(Debug, Clone, Default)]
pub struct DnsdBuilder {
    zones: Vec<Zone>,
    listen: Option<(String, Ipv4Addr)>,
    server_lines: Vec<String>,
    control_lines: Vec<String>,
    extra: String,
    no_metrics: bool,
    metrics_allow: Option<String>,
    at: Option<SocketAddr>,
    ready_on_first: bool,
    flags: Vec<String>,
}

impl DnsdBuilder {
    /// Ready once the first zone answers (the others, secondaries, may never get data).
    pub fn ready_on_first_zone(mut self) -> Self {
        self.ready_on_first = true;
        self
    }

    /// Adds a line to `[control]` (`mode = "0666"`, `group = "nogroup"`).
    pub fn control(mut self, line: &str) -> Self {
        self.control_lines.push(line.to_string());
        self
    }

    /// Serves `zone` too.
    pub fn zone(mut self, zone: Zone) -> Self {
        self.zones.push(zone);
        self
    }

    /// Serves these zones too.
    pub fn zones(mut self, zones: &[Zone]) -> Self {
        self.zones.extend_from_slice(zones);
        self
    }

    /// Adds a `key = value` line to `[server]` (e.g. `tcp_idle_timeout_ms = 1000`).
    pub fn server_option(mut self, line: &str) -> Self {
        self.server_lines.push(line.to_string());
        self
    }

    /// Appends raw TOML to the config (further sections).
    pub fn raw(mut self, toml: &str) -> Self {
        self.extra.push_str(toml);
        self.extra.push('\n');
        self
    }

    /// Listens on `entries` (addresses or prefixes, as `[server] listen` takes them)
    /// instead of one test address; `probe`, one of them, is where readiness is checked
    /// and what [`Dnsd::addr`] returns.
    pub fn listen(mut self, entries: &[&str], probe: Ipv4Addr) -> Self {
        let list = entries
            .iter()
            .map(|e| format!("\"{e}\""))
            .collect::<Vec<_>>()
            .join(", ");
        self.listen = Some((list, probe));
        self
    }

    /// Listens on exactly `addr` (known in advance, e.g. to peers' configs) instead of a
    /// fresh test address; a start that finds it taken fails.
    pub fn at(mut self, addr: SocketAddr) -> Self {
        self.at = Some(addr);
        self
    }

    /// Adds `serve` flags after `-c CONFIG` (`--zone ORIGIN=FILE`, `--metrics IP:PORT`).
    pub fn flags(mut self, flags: &[&str]) -> Self {
        self.flags.extend(flags.iter().map(|f| f.to_string()));
        self
    }

    /// No `[metrics]` endpoint.
    pub fn without_metrics(mut self) -> Self {
        self.no_metrics = true;
        self
    }

    /// `[metrics] allow`, as TOML (`["127.0.0.1/32"]`).
    pub fn metrics_allow(mut self, allow: &str) -> Self {
        self.metrics_allow = Some(allow.to_string());
        self
    }

    /// Starts dnsd and waits until it answers for every zone.
    pub fn start(self) -> Dnsd {
        assert!(
            !self.zones.is_empty(),
            "dnsd needs at least one zone to be probed"
        );
        let exe = crate::bin("dnsd");
        let pick = || match (&self.at, &self.listen) {
            (Some(a), _) => *a,
            (None, Some((_, ip))) => SocketAddr::from((*ip, net::free_port(*ip))),
            (None, None) => net::test_addr(),
        };
        start_with_retries_at("dnsd", pick, |addr| {
            let dir = tempfile::Builder::new()
                .prefix("palisade-dnsd-")
                .tempdir()
                .expect("temp dir");
            // Whatever the test's umask: a socket directory others may write is refused.
            crate::private_dir(dir.path());
            let control = dir.path().join("dnsd.sock");
            let ip = match addr {
                SocketAddr::V4(a) => *a.ip(),
                SocketAddr::V6(_) => unreachable!("test addresses are IPv4"),
            };
            let metrics = (!self.no_metrics).then(|| SocketAddr::from((ip, net::free_port(ip))));
            let mut cfg = String::new();
            let listen = match &self.listen {
                Some((list, _)) => list.clone(),
                None => format!("\"{}\"", addr.ip()),
            };
            let _ = writeln!(
                cfg,
                "[server]\nlisten = [{listen}]\nport = {}\nworkers = 1",
                addr.port()
            );
            for l in &self.server_lines {
                let _ = writeln!(cfg, "{l}");
            }
            for z in &self.zones {
                let _ = writeln!(
                    cfg,
                    "\n[[zone]]\norigin = \"{}\"\nfile = \"{}\"",
                    z.origin,
                    z.file.display()
                );
                for o in &z.options {
                    let _ = writeln!(cfg, "{o}");
                }
            }
            let _ = writeln!(cfg, "\n[control]\nsocket = \"{}\"", control.display());
            for l in &self.control_lines {
                let _ = writeln!(cfg, "{l}");
            }
            if let Some(m) = metrics {
                let _ = writeln!(cfg, "\n[metrics]\nlisten = \"{m}\"");
                if let Some(a) = &self.metrics_allow {
                    let _ = writeln!(cfg, "allow = {a}");
                }
            }
            cfg.push_str(&self.extra);
            let config = dir.path().join("dnsd.toml");
            std::fs::write(&config, &cfg).expect("write dnsd.toml");
            let mut cmd = Command::new(&exe);
            cmd.arg("serve")
                .arg("-c")
                .arg(&config)
                .args(&self.flags)
                .env("RUST_LOG", "info");
            let mut proc = Proc::spawn("dnsd", cmd, dir.path().join("dnsd.log"));
            let ready = if self.ready_on_first {
                &self.zones[..1]
            } else {
                &self.zones[..]
            };
            wait_ready(&mut proc, addr, ready)?;
            // The control socket comes up just after the listeners.
            for _ in 0..200 {
                if control.exists() {
                    break;
                }
                std::thread::sleep(Duration::from_millis(10));
            }
            Ok(Dnsd {
                proc,
                addr,
                config,
                control,
                metrics,
                _dir: dir,
            })
        })
    }
}

/// A running dnsd, killed on drop.
pub struct Dnsd {
    proc: Proc,
    addr: SocketAddr,
    config: PathBuf,
    control: PathBuf,
    metrics: Option<SocketAddr>,
    _dir: tempfile::TempDir,
}

impl std::fmt::Debug for Dnsd {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Dnsd")
            .field("addr", &self.addr)
            .field("config", &self.config)
            .finish()
    }
}

impl Dnsd {
    /// Starts dnsd serving `zones` on a fresh loopback address.
    pub fn start(zones: &[Zone]) -> Dnsd {
        Self::builder().zones(zones).start()
    }

    /// A builder for more settings.
    pub fn builder() -> DnsdBuilder {
        DnsdBuilder::default()
    }

    /// The service address (UDP and TCP).
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// The config file.
    pub fn config_path(&self) -> &Path {
        &self.config
    }

    /// The control socket.
    pub fn control_socket(&self) -> &Path {
        &self.control
    }

    /// The metrics address, unless disabled.
    pub fn metrics_addr(&self) -> Option<SocketAddr> {
        self.metrics
    }

    /// Runs `dnsd ctl -c CONFIG args...`: (exit status was success, stdout and stderr).
    pub fn ctl(&self, args: &[&str]) -> (bool, String) {
        let out = Command::new(crate::bin("dnsd"))
            .arg("ctl")
            .arg("-c")
            .arg(&self.config)
            .arg("--timeout")
            .arg("10")
            .args(args)
            .output()
            .expect("run dnsd ctl");
        let mut text = String::from_utf8_lossy(&out.stdout).into_owned();
        text.push_str(&String::from_utf8_lossy(&out.stderr));
        (out.status.success(), text)
    }

    /// `dnsd ctl stats` (lines `name<TAB>value`) as one snapshot; reading a counter that is
    /// not there fails the test.
    pub fn stats(&self) -> Counters {
        let (ok, text) = self.ctl(&["stats"]);
        assert!(ok, "dnsd ctl stats failed: {text}");
        Counters::parse(&text)
    }

    /// The counter `name` of `dnsd ctl stats`, read now; panics, listing the counters there
    /// are, when it is absent.
    #[track_caller]
    pub fn stat(&self, name: &str) -> u64 {
        self.stats().get(name)
    }

    /// The body of `GET /metrics` (Prometheus text).
    pub fn metrics(&self) -> String {
        let addr = self.metrics.expect("dnsd started without metrics");
        http_get(addr, "/metrics").unwrap_or_else(|e| panic!("GET http://{addr}/metrics: {e}"))
    }

    /// Everything dnsd has logged so far.
    pub fn log(&self) -> String {
        self.proc.log()
    }

    /// True while the process runs.
    pub fn is_running(&mut self) -> bool {
        self.proc.exited().is_none()
    }

    /// The process id.
    pub fn pid(&self) -> u32 {
        self.proc.child.id()
    }

    /// Kills it at once (SIGKILL: no clean stop, nothing flushed).
    pub fn kill(&mut self) {
        let _ = self.proc.child.kill();
        let _ = self.proc.child.wait();
    }

    /// Stops it cleanly (SIGTERM) and waits up to `limit` for it to exit; true when it did.
    pub fn terminate(&mut self, limit: Duration) -> bool {
        // SAFETY: kill(2) on our own child's pid.
        unsafe { libc::kill(self.proc.child.id() as i32, libc::SIGTERM) };
        let end = Instant::now() + limit;
        while Instant::now() < end {
            if self.proc.exited().is_some() {
                return true;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        false
    }
}

/// A minimal HTTP/1.0 GET with bounded waits; returns the body of a 200 response.
pub fn http_get(addr: SocketAddr, path: &str) -> Result<String, String> {
    let t = Duration::from_secs(5);
    let mut s = TcpStream::connect_timeout(&addr, t).map_err(|e| e.to_string())?;
    s.set_read_timeout(Some(t)).map_err(|e| e.to_string())?;
    s.set_write_timeout(Some(t)).map_err(|e| e.to_string())?;
    write!(
        s,
        "GET {path} HTTP/1.0\r\nHost: {addr}\r\nConnection: close\r\n\r\n"
    )
    .map_err(|e| e.to_string())?;
    let mut resp = Vec::new();
    s.take(16 << 20)
        .read_to_end(&mut resp)
        .map_err(|e| e.to_string())?;
    let text = String::from_utf8_lossy(&resp);
    let (head, body) = text.split_once("\r\n\r\n").ok_or("no end of headers")?;
    let status = head.lines().next().unwrap_or("");
    if !status.contains(" 200") {
        return Err(format!("status {status}"));
    }
    Ok(body.to_string())
}

/// A running Knot DNS (knotd), killed on drop.
pub struct Knot {
    proc: Proc,
    addr: SocketAddr,
    conf: PathBuf,
    _dir: tempfile::TempDir,
}

impl Knot {
    /// True when knotd is installed.
    pub fn available() -> bool {
        crate::have_program("knotd")
    }

    /// Starts knotd serving `zones` on a fresh loopback address.
    pub fn start(zones: &[Zone]) -> Knot {
        Self::start_with(zones, "", "")
    }

    /// Starts knotd with its response rate limiting module (mod-rrl) at `rate` responses
    /// per second and `slip`, as an operator would configure it.
    pub fn start_with_rrl(zones: &[Zone], rate: u32, slip: u32) -> Knot {
        Self::start_with(
            zones,
            &format!("mod-rrl:\n  - id: rrl\n    rate-limit: {rate}\n    slip: {slip}\n\n"),
            "    global-module: mod-rrl/rrl\n",
        )
    }

    /// Starts knotd with extra top-level config (`modules`) and extra lines for the default
    /// template (`template_lines`, indented by four spaces).
    pub fn start_with(zones: &[Zone], modules: &str, template_lines: &str) -> Knot {
        let exe =
            crate::find_program("knotd").expect("knotd not installed (check Knot::available)");
        start_with_retries("knotd", |addr| {
            let dir = tempfile::Builder::new()
                .prefix("palisade-knot-")
                .tempdir()
                .expect("temp dir");
            let d = dir.path().display();
            let mut cfg = format!(
                "server:\n  rundir: \"{d}\"\n  listen: {}@{}\n  udp-workers: 1\n  tcp-workers: 1\n  \
                 background-workers: 1\n\ndatabase:\n  storage: \"{d}/db\"\n\nlog:\n  - target: stderr\n    \
                 any: info\n\n{modules}template:\n  - id: default\n    storage: \"{d}\"\n    \
                 zonefile-sync: -1\n    zonefile-load: whole\n    journal-content: none\n    \
                 semantic-checks: off\n{template_lines}\nzone:\n",
                addr.ip(),
                addr.port()
            );
            for z in zones {
                let _ = writeln!(
                    cfg,
                    "  - domain: \"{}\"\n    file: \"{}\"",
                    z.origin,
                    z.file.display()
                );
            }
            let conf = dir.path().join("knot.conf");
            std::fs::write(&conf, cfg).expect("write knot.conf");
            let mut cmd = Command::new(&exe);
            cmd.arg("-c").arg(&conf);
            let mut proc = Proc::spawn("knotd", cmd, dir.path().join("knotd.log"));
            wait_ready(&mut proc, addr, zones)?;
            Ok(Knot {
                proc,
                addr,
                conf,
                _dir: dir,
            })
        })
    }

    /// Starts knotd from a whole config that `config(dir, addr)` writes (its temp dir and
    /// listen address), waiting until it answers for `ready` (e.g. zones it is a secondary
    /// of, once transferred).
    pub fn start_raw(ready: &[Zone], config: impl Fn(&Path, SocketAddr) -> String) -> Knot {
        let exe =
            crate::find_program("knotd").expect("knotd not installed (check Knot::available)");
        start_with_retries("knotd", |addr| {
            let dir = tempfile::Builder::new()
                .prefix("palisade-knot-")
                .tempdir()
                .expect("temp dir");
            let conf = dir.path().join("knot.conf");
            std::fs::write(&conf, config(dir.path(), addr)).expect("write knot.conf");
            let mut cmd = Command::new(&exe);
            cmd.arg("-c").arg(&conf);
            let mut proc = Proc::spawn("knotd", cmd, dir.path().join("knotd.log"));
            wait_ready(&mut proc, addr, ready)?;
            Ok(Knot {
                proc,
                addr,
                conf,
                _dir: dir,
            })
        })
    }

    /// The `server:`, `database:` and `log:` sections [`Knot::start`] uses, for configs of
    /// [`Knot::start_raw`]: in `dir`, on `addr`, one worker of each kind.
    pub fn server_section(dir: &Path, addr: SocketAddr) -> String {
        let _ = std::fs::create_dir_all(dir.join("db"));
        let d = dir.display();
        format!(
            "server:\n  rundir: \"{d}\"\n  listen: {}@{}\n  udp-workers: 1\n  tcp-workers: 1\n  \
             background-workers: 1\n\ndatabase:\n  storage: \"{d}/db\"\n\nlog:\n  - target: stderr\n    \
             any: info\n\n",
            addr.ip(),
            addr.port()
        )
    }

    /// The config file (a test may rewrite it, then `knotc reload`).
    pub fn conf_path(&self) -> &Path {
        &self.conf
    }

    /// Runs `knotc -c CONF args...` against this knotd: (success, output).
    pub fn knotc(&self, args: &[&str]) -> (bool, String) {
        let exe = crate::find_program("knotc").expect("knotc not installed");
        let out = Command::new(exe)
            .arg("-c")
            .arg(&self.conf)
            .arg("-t")
            .arg("10")
            .args(args)
            .output()
            .expect("run knotc");
        let mut text = String::from_utf8_lossy(&out.stdout).into_owned();
        text.push_str(&String::from_utf8_lossy(&out.stderr));
        (out.status.success(), text)
    }

    /// The service address.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Everything knotd has logged so far.
    pub fn log(&self) -> String {
        self.proc.log()
    }
}

/// A running NSD, killed on drop (with the processes it forks).
pub struct Nsd {
    proc: Proc,
    addr: SocketAddr,
    _dir: tempfile::TempDir,
}

impl Nsd {
    /// True when nsd is installed.
    pub fn available() -> bool {
        crate::have_program("nsd")
    }

    /// Starts nsd serving `zones` on a fresh loopback address, with response rate limiting
    /// off and `minimal-responses: yes` (no apex NS in the authority section of positive
    /// answers, additional data only for referrals: the shape Knot and dnsd give).
    pub fn start(zones: &[Zone]) -> Nsd {
        Self::start_with(zones, &["minimal-responses: yes"])
    }

    /// Starts nsd with further `server:` lines (e.g. `refuse-any: yes`).
    pub fn start_with(zones: &[Zone], server_lines: &[&str]) -> Nsd {
        let exe = crate::find_program("nsd").expect("nsd not installed (check Nsd::available)");
        start_with_retries("nsd", |addr| {
            let dir = tempfile::Builder::new()
                .prefix("palisade-nsd-")
                .tempdir()
                .expect("temp dir");
            let d = dir.path().display();
            let mut cfg = format!(
                "server:\n  ip-address: {}@{}\n  server-count: 1\n  username: \"\"\n  chroot: \"\"\n  \
                 database: \"\"\n  zonesdir: \"{d}\"\n  pidfile: \"{d}/nsd.pid\"\n  \
                 xfrdfile: \"{d}/xfrd.state\"\n  xfrdir: \"{d}\"\n  zonelistfile: \"{d}/zone.list\"\n  \
                 do-ip6: no\n  verbosity: 1\n  rrl-ratelimit: 0\n",
                addr.ip(),
                addr.port()
            );
            for l in server_lines {
                let _ = writeln!(cfg, "  {l}");
            }
            cfg.push_str("\nremote-control:\n  control-enable: no\n");
            for z in zones {
                let _ = writeln!(
                    cfg,
                    "\nzone:\n  name: \"{}\"\n  zonefile: \"{}\"",
                    z.origin,
                    z.file.display()
                );
            }
            let conf = dir.path().join("nsd.conf");
            std::fs::write(&conf, cfg).expect("write nsd.conf");
            let mut cmd = Command::new(&exe);
            cmd.arg("-d").arg("-c").arg(&conf);
            let mut proc = Proc::spawn("nsd", cmd, dir.path().join("nsd.log"));
            wait_ready(&mut proc, addr, zones)?;
            Ok(Nsd {
                proc,
                addr,
                _dir: dir,
            })
        })
    }

    /// Starts nsd from a whole config that `config(dir, addr)` writes (its temp dir and
    /// listen address), waiting until it answers for `ready` (e.g. zones it is a secondary
    /// of, once transferred).
    pub fn start_raw(ready: &[Zone], config: impl Fn(&Path, SocketAddr) -> String) -> Nsd {
        let exe = crate::find_program("nsd").expect("nsd not installed (check Nsd::available)");
        start_with_retries("nsd", |addr| {
            let dir = tempfile::Builder::new()
                .prefix("palisade-nsd-")
                .tempdir()
                .expect("temp dir");
            let conf = dir.path().join("nsd.conf");
            std::fs::write(&conf, config(dir.path(), addr)).expect("write nsd.conf");
            let mut cmd = Command::new(&exe);
            cmd.arg("-d").arg("-c").arg(&conf);
            let mut proc = Proc::spawn("nsd", cmd, dir.path().join("nsd.log"));
            wait_ready(&mut proc, addr, ready)?;
            Ok(Nsd {
                proc,
                addr,
                _dir: dir,
            })
        })
    }

    /// The `server:` lines [`Nsd::start`] uses, for configs of [`Nsd::start_raw`]: in
    /// `dir`, on `addr`, rate limiting off.
    pub fn server_section(dir: &Path, addr: SocketAddr) -> String {
        let d = dir.display();
        format!(
            "server:\n  ip-address: {}@{}\n  server-count: 1\n  username: \"\"\n  chroot: \"\"\n  \
             database: \"\"\n  zonesdir: \"{d}\"\n  pidfile: \"{d}/nsd.pid\"\n  \
             xfrdfile: \"{d}/xfrd.state\"\n  xfrdir: \"{d}\"\n  zonelistfile: \"{d}/zone.list\"\n  \
             do-ip6: no\n  verbosity: 2\n  rrl-ratelimit: 0\n  minimal-responses: yes\n\n\
             remote-control:\n  control-enable: no\n",
            addr.ip(),
            addr.port()
        )
    }

    /// The service address.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Everything nsd has logged so far.
    pub fn log(&self) -> String {
        self.proc.log()
    }
}

/// A running BIND named, killed on drop: the oracle for what Knot and NSD do not implement
/// (edns-tcp-keepalive).
pub struct Bind {
    proc: Proc,
    addr: SocketAddr,
    _dir: tempfile::TempDir,
}

impl Bind {
    /// True when named is installed.
    pub fn available() -> bool {
        crate::have_program("named")
    }

    /// Starts named as an authoritative server of `zones` on 127.0.0.1 (named listens only
    /// on addresses its interfaces carry) and a free port, with further `options { }` lines
    /// (e.g. `tcp-advertised-timeout 70;`). Nothing it sends leaves loopback: validation is
    /// off (no trust-anchor fetch), its root hints name only 127.0.0.1, no control channel.
    pub fn start_with(zones: &[Zone], option_lines: &[&str]) -> Bind {
        let lines: Vec<String> = option_lines.iter().map(|l| l.to_string()).collect();
        Self::start_raw(
            zones,
            |_, _| lines.clone(),
            |_, _| {
                let mut cfg = String::new();
                for z in zones {
                    let _ = writeln!(
                        cfg,
                        "zone \"{}\" {{ type primary; file \"{}\"; }};",
                        z.origin,
                        z.file.display()
                    );
                }
                cfg
            },
        )
    }

    /// Starts named as a forwarder (`forward only`) to `to`, asking from `source`: a
    /// resolver whose users' queries reach the server with RD set, with BIND's cookies.
    /// Ready once it answers for `ready` through `to` (none: once it answers over TCP).
    pub fn start_forwarder(ready: &[Zone], to: SocketAddr, source: Ipv4Addr) -> Bind {
        Self::start_raw(
            ready,
            |_, _| {
                vec![
                    "recursion yes;".into(),
                    "allow-recursion { any; };".into(),
                    "forward only;".into(),
                    format!("forwarders {{ {} port {}; }};", to.ip(), to.port()),
                    format!("query-source address {source};"),
                ]
            },
            |_, _| String::new(),
        )
    }

    /// As [`Bind::start_with`], the `options { }` lines and the rest of the config (zones,
    /// `tls` blocks) written by `options(dir, addr)` and `rest(dir, addr)` (its temp dir and
    /// address); ready once it answers for `ready` (zones it is a secondary of, once
    /// transferred). A `recursion` line among the options replaces `recursion no;`.
    pub fn start_raw(
        ready: &[Zone],
        options: impl Fn(&Path, SocketAddr) -> Vec<String>,
        rest: impl Fn(&Path, SocketAddr) -> String,
    ) -> Bind {
        let exe =
            crate::find_program("named").expect("named not installed (check Bind::available)");
        let lo = Ipv4Addr::LOCALHOST;
        let pick = || SocketAddr::from((lo, net::free_port(lo)));
        start_with_retries_at("named", pick, |addr| {
            let dir = tempfile::Builder::new()
                .prefix("palisade-named-")
                .tempdir()
                .expect("temp dir");
            let d = dir.path().display();
            std::fs::write(
                dir.path().join("root.hints"),
                ".  3600000 NS a.root.test.\na.root.test. 3600000 A 127.0.0.1\n",
            )
            .expect("write root.hints");
            let mut cfg = String::from("options {\n");
            let extra = options(dir.path(), addr);
            let recursion = extra.iter().any(|l| l.starts_with("recursion "));
            for l in [
                format!("directory \"{d}\";"),
                format!("pid-file \"{d}/named.pid\";"),
                format!("listen-on port {} {{ {}; }};", addr.port(), addr.ip()),
                "listen-on-v6 { none; };".into(),
                "dnssec-validation no;".into(),
                "notify no;".into(),
            ] {
                let _ = writeln!(cfg, "  {l}");
            }
            if !recursion {
                cfg.push_str("  recursion no;\n");
            }
            for l in extra {
                let _ = writeln!(cfg, "  {l}");
            }
            cfg.push_str("};\ncontrols { };\n");
            let _ = writeln!(cfg, "zone \".\" {{ type hint; file \"{d}/root.hints\"; }};");
            cfg.push_str(&rest(dir.path(), addr));
            let conf = dir.path().join("named.conf");
            std::fs::write(&conf, cfg).expect("write named.conf");
            let mut cmd = Command::new(&exe);
            cmd.args(["-g", "-n", "1", "-U", "1", "-c"]).arg(&conf);
            let mut proc = Proc::spawn("named", cmd, dir.path().join("named.log"));
            wait_ready(&mut proc, addr, ready)?;
            Ok(Bind {
                proc,
                addr,
                _dir: dir,
            })
        })
    }

    /// The service address.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Everything named has logged so far.
    pub fn log(&self) -> String {
        self.proc.log()
    }
}

/// A running PowerDNS Authoritative Server (bind backend), killed on drop: the oracle for
/// ALIAS (Knot and NSD have none).
pub struct Pdns {
    proc: Proc,
    addr: SocketAddr,
    _dir: tempfile::TempDir,
}

impl Pdns {
    /// True when pdns_server is installed.
    pub fn available() -> bool {
        crate::have_program("pdns_server")
    }

    /// Starts pdns_server serving `zones` (bind backend) on a fresh loopback address, with
    /// ALIAS expanded through `resolver` (PowerDNS asks its resolver for every ALIAS target,
    /// even one it serves) and further `pdns.conf` lines.
    pub fn start(zones: &[Zone], resolver: SocketAddr, lines: &[&str]) -> Pdns {
        let exe = crate::find_program("pdns_server")
            .expect("pdns_server not installed (check Pdns::available)");
        start_with_retries("pdns", |addr| {
            let dir = tempfile::Builder::new()
                .prefix("palisade-pdns-")
                .tempdir()
                .expect("temp dir");
            let d = dir.path();
            let mut named = String::new();
            for z in zones {
                let _ = writeln!(
                    named,
                    "zone \"{}\" {{ type master; file \"{}\"; }};",
                    z.origin.trim_end_matches('.'),
                    z.file.display()
                );
            }
            std::fs::write(d.join("named.conf"), named).expect("write named.conf");
            let mut cfg = format!(
                "launch=bind\nbind-config={}/named.conf\nlocal-address={}\nlocal-port={}\n\
                 socket-dir={}\nguardian=no\ndaemon=no\ndisable-syslog=yes\nwrite-pid=no\n\
                 expand-alias=yes\nresolver={resolver}\nloglevel=4\n",
                d.display(),
                addr.ip(),
                addr.port(),
                d.display()
            );
            for l in lines {
                let _ = writeln!(cfg, "{l}");
            }
            std::fs::write(d.join("pdns.conf"), cfg).expect("write pdns.conf");
            let mut cmd = Command::new(&exe);
            cmd.arg(format!("--config-dir={}", d.display()));
            let mut proc = Proc::spawn("pdns", cmd, d.join("pdns.log"));
            wait_ready(&mut proc, addr, zones)?;
            Ok(Pdns {
                proc,
                addr,
                _dir: dir,
            })
        })
    }

    /// The service address.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Everything pdns has logged so far.
    pub fn log(&self) -> String {
        self.proc.log()
    }
}
