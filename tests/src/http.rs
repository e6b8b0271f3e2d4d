//! HTTP end-to-end helpers: an echoing origin server, http-front as a child process, and
//! small HTTP/1.1 and HTTP/2 (h2c, raw frames) clients that can bind any loopback source.
//!
//! - [`Origin`]: a threaded HTTP/1.1 origin on its own loopback address; it answers every
//!   request with 200 and a body echoing the request line, headers and body size
//!   (`/slow/MS` waits MS milliseconds first), and counts requests.
//! - [`Front`]: http-front from a `front.toml` (and optional `rules.toml`) written to its own
//!   temp dir, started in its own process group (killed on drop, log printed on panic),
//!   ready once `/metrics` answers; [`Front::reload`] sends SIGHUP and waits for the reload
//!   counters to move; [`Front::metric`] reads one series (absent: the test fails).
//! - [`H1Conn`] and [`get`]: HTTP/1.1 requests over a connection from a chosen source.
//! - [`H2Conn`]: HTTP/2 by prior knowledge with hand-made frames: requests, resets, and a
//!   reader that reports GOAWAY. It announces a zero HPACK table so that responses only use
//!   the static table, and decodes just `:status`.
//!
//! Every read has a timeout; every loop is bounded.

use std::collections::BTreeMap;
use std::io::{self, Read, Write};
use std::net::{Ipv4Addr, Shutdown, SocketAddr, TcpListener, TcpStream};
use std::os::fd::FromRawFd;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use crate::counters;
use crate::net;

/// How long a read waits by default.
pub const READ_TIMEOUT: Duration = Duration::from_secs(10);
/// How long a connect waits (a filtered SYN is never answered).
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(3);

// ---------------------------------------------------------------------------------------------
// Sockets from a chosen source address.

/// A TCP connection to `to` from source address `from` (any port), with read/write timeouts.
pub fn connect_from(from: Option<Ipv4Addr>, to: SocketAddr) -> io::Result<TcpStream> {
    let Some(src) = from else {
        let s = TcpStream::connect_timeout(&to, CONNECT_TIMEOUT)?;
        s.set_read_timeout(Some(READ_TIMEOUT))?;
        s.set_write_timeout(Some(READ_TIMEOUT))?;
        return Ok(s);
    };
    let SocketAddr::V4(dst) = to else {
        return Err(io::Error::new(io::ErrorKind::InvalidInput, "IPv4 only"));
    };
    // SAFETY: plain socket syscalls on a descriptor this function owns until it is wrapped.
    unsafe {
        let fd = libc::socket(libc::AF_INET, libc::SOCK_STREAM | libc::SOCK_CLOEXEC, 0);
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        let stream = TcpStream::from_raw_fd(fd);
        let sa = |ip: Ipv4Addr, port: u16| libc::sockaddr_in {
            sin_family: libc::AF_INET as libc::sa_family_t,
            sin_port: port.to_be(),
            sin_addr: libc::in_addr {
                s_addr: u32::from(ip).to_be(),
            },
            sin_zero: [0; 8],
        };
        let local = sa(src, 0);
        let len = std::mem::size_of::<libc::sockaddr_in>() as libc::socklen_t;
        if libc::bind(fd, &local as *const _ as *const libc::sockaddr, len) != 0 {
            return Err(io::Error::last_os_error());
        }
        // Bounds the connect: a SYN dropped by a filter is never answered.
        stream.set_write_timeout(Some(CONNECT_TIMEOUT))?;
        let remote = sa(*dst.ip(), dst.port());
        if libc::connect(fd, &remote as *const _ as *const libc::sockaddr, len) != 0 {
            return Err(io::Error::last_os_error());
        }
        stream.set_read_timeout(Some(READ_TIMEOUT))?;
        stream.set_write_timeout(Some(READ_TIMEOUT))?;
        Ok(stream)
    }
}

/// Reads until EOF or error within `timeout`; true when the peer closed (EOF or reset).
pub fn wait_closed(s: &mut TcpStream, timeout: Duration) -> bool {
    let end = Instant::now() + timeout;
    let mut buf = [0u8; 4096];
    while Instant::now() < end {
        let _ = s.set_read_timeout(Some(Duration::from_millis(200)));
        match s.read(&mut buf) {
            Ok(0) => return true,
            Ok(_) => continue,
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
                ) =>
            {
                continue;
            }
            Err(_) => return true,
        }
    }
    false
}

// ---------------------------------------------------------------------------------------------
// The origin.

/// An HTTP/1.1 origin that echoes requests; see the module documentation.
#[derive(Debug)]
pub struct Origin {
    addr: SocketAddr,
    requests: Arc<AtomicU64>,
    stop: Arc<AtomicBool>,
}

impl Origin {
    /// Starts the origin on a fresh loopback address.
    pub fn start() -> Origin {
        let ip = net::test_ip();
        let l = TcpListener::bind(SocketAddr::from((ip, 0))).expect("bind origin");
        let addr = l.local_addr().expect("origin address");
        let requests = Arc::new(AtomicU64::new(0));
        let stop = Arc::new(AtomicBool::new(false));
        let (r, st) = (Arc::clone(&requests), Arc::clone(&stop));
        std::thread::spawn(move || {
            for conn in l.incoming() {
                if st.load(Ordering::Acquire) {
                    break;
                }
                let Ok(conn) = conn else { continue };
                let r = Arc::clone(&r);
                std::thread::spawn(move || origin_conn(conn, &r));
            }
        });
        Origin {
            addr,
            requests,
            stop,
        }
    }

    /// Its address.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Requests answered so far.
    pub fn requests(&self) -> u64 {
        self.requests.load(Ordering::Acquire)
    }
}

impl Drop for Origin {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Release);
        let _ = TcpStream::connect_timeout(&self.addr, Duration::from_millis(200));
    }
}

fn origin_conn(mut s: TcpStream, count: &AtomicU64) {
    let _ = s.set_read_timeout(Some(Duration::from_secs(30)));
    let mut buf: Vec<u8> = Vec::new();
    loop {
        let Some(head_end) = read_until_head(&mut s, &mut buf, 256 * 1024) else {
            return;
        };
        let head = String::from_utf8_lossy(&buf[..head_end]).to_string();
        buf.drain(..head_end + 4);
        let mut lines = head.split("\r\n");
        let request_line = lines.next().unwrap_or("").to_string();
        let headers: Vec<(String, String)> = lines
            .filter_map(|l| l.split_once(':'))
            .map(|(k, v)| (k.trim().to_ascii_lowercase(), v.trim().to_string()))
            .collect();
        let find = |n: &str| {
            headers
                .iter()
                .find(|(k, _)| k == n)
                .map(|(_, v)| v.as_str())
        };
        let body_len = if find("transfer-encoding").is_some_and(|v| v.contains("chunked")) {
            match read_chunked(&mut s, &mut buf) {
                Some(n) => n,
                None => return,
            }
        } else {
            let n: usize = find("content-length")
                .and_then(|v| v.parse().ok())
                .unwrap_or(0);
            while buf.len() < n {
                let mut tmp = [0u8; 16384];
                match s.read(&mut tmp) {
                    Ok(0) | Err(_) => return,
                    Ok(k) => buf.extend_from_slice(&tmp[..k]),
                }
            }
            buf.drain(..n);
            n
        };
        let path = request_line.split(' ').nth(1).unwrap_or("/");
        if let Some(ms) = path
            .strip_prefix("/slow/")
            .and_then(|m| m.parse::<u64>().ok())
        {
            std::thread::sleep(Duration::from_millis(ms.min(10_000)));
        }
        count.fetch_add(1, Ordering::AcqRel);
        let mut body = format!("{request_line}\n");
        for (k, v) in &headers {
            body.push_str(&format!("{k}: {v}\n"));
        }
        body.push_str(&format!("body-bytes: {body_len}\n"));
        let resp = format!(
            "HTTP/1.1 200 OK\r\ncontent-type: text/plain\r\ncontent-length: {}\r\nx-origin: yes\r\n\r\n{body}",
            body.len()
        );
        if s.write_all(resp.as_bytes()).is_err() {
            return;
        }
        if find("connection").is_some_and(|v| v.eq_ignore_ascii_case("close")) {
            return;
        }
    }
}

/// Reads into `buf` until it holds `\r\n\r\n`; the offset of that marker, or `None` on EOF, error or `max` bytes.
fn read_until_head(s: &mut TcpStream, buf: &mut Vec<u8>, max: usize) -> Option<usize> {
    loop {
        if let Some(i) = find(buf, b"\r\n\r\n") {
            return Some(i);
        }
        if buf.len() > max {
            return None;
        }
        let mut tmp = [0u8; 16384];
        match s.read(&mut tmp) {
            Ok(0) | Err(_) => return None,
            Ok(n) => buf.extend_from_slice(&tmp[..n]),
        }
    }
}

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}

/// Reads a chunked body (consumed from `buf`, refilled from `s`); its size.
fn read_chunked(s: &mut TcpStream, buf: &mut Vec<u8>) -> Option<usize> {
    let mut total = 0;
    let mut fill = |buf: &mut Vec<u8>| -> Option<()> {
        let mut tmp = [0u8; 16384];
        match s.read(&mut tmp) {
            Ok(0) | Err(_) => None,
            Ok(n) => {
                buf.extend_from_slice(&tmp[..n]);
                Some(())
            }
        }
    };
    loop {
        let line_end = loop {
            if let Some(i) = find(buf, b"\r\n") {
                break i;
            }
            fill(buf)?;
        };
        let size_text = String::from_utf8_lossy(&buf[..line_end]).to_string();
        let size = usize::from_str_radix(size_text.split(';').next()?.trim(), 16).ok()?;
        buf.drain(..line_end + 2);
        if size == 0 {
            // Trailers (none expected) and the final CRLF.
            loop {
                if let Some(i) = find(buf, b"\r\n") {
                    buf.drain(..i + 2);
                    if i == 0 {
                        return Some(total);
                    }
                    continue;
                }
                fill(buf)?;
            }
        }
        while buf.len() < size + 2 {
            fill(buf)?;
        }
        buf.drain(..size + 2);
        total += size;
    }
}

// ---------------------------------------------------------------------------------------------
// http-front as a child process.

/// How long http-front may take to become ready.
const START_TIMEOUT: Duration = Duration::from_secs(20);

/// A running http-front; see the module documentation.
pub struct Front {
    child: Child,
    dir: tempfile::TempDir,
    addr: SocketAddr,
    metrics: SocketAddr,
    log: PathBuf,
}

impl std::fmt::Debug for Front {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Front")
            .field("addr", &self.addr)
            .finish_non_exhaustive()
    }
}

/// The `[server]`, `[metrics]` and `[[upstream]]` sections every test config starts with:
/// listen on `addr`, metrics on `metrics`, one upstream `app` at `origin`.
pub fn base_config(addr: SocketAddr, metrics: SocketAddr, origin: SocketAddr) -> String {
    format!(
        "[server]\nlisten = [\"{addr}\"]\nworkers = 2\n\n[metrics]\nlisten = \"{metrics}\"\n\n\
         [[upstream]]\nname = \"app\"\nservers = [\"{origin}\"]\n\n"
    )
}

impl Front {
    /// The process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Starts http-front with the config `make(addr, metrics_addr)` returns and the rules file
    /// `rules` (written as `rules.toml` next to it when given); panics when it does not become ready.
    pub fn start(make: impl Fn(SocketAddr, SocketAddr) -> String, rules: Option<&str>) -> Front {
        let mut last = String::new();
        for _ in 0..5 {
            let ip = net::test_ip();
            let addr = SocketAddr::from((ip, net::free_port(ip)));
            let metrics = SocketAddr::from((ip, net::free_port(ip)));
            if addr == metrics {
                continue;
            }
            let dir = tempfile::tempdir().expect("temp dir");
            // Whatever the test's umask: a socket directory others may write is refused.
            crate::private_dir(dir.path());
            if let Some(r) = rules {
                std::fs::write(dir.path().join("rules.toml"), r).expect("write rules");
            }
            std::fs::write(dir.path().join("front.toml"), make(addr, metrics))
                .expect("write config");
            match Self::spawn(dir, addr, metrics) {
                Ok(f) => return f,
                Err((log, retry)) => {
                    if !retry {
                        panic!("http-front did not start:\n{log}");
                    }
                    last = log;
                }
            }
        }
        panic!("http-front did not start after 5 tries:\n{last}");
    }

    fn spawn(
        dir: tempfile::TempDir,
        addr: SocketAddr,
        metrics: SocketAddr,
    ) -> Result<Front, (String, bool)> {
        let log = dir.path().join("front.log");
        let out = std::fs::File::create(&log).expect("log file");
        let err = out.try_clone().expect("log file");
        let mut cmd = Command::new(crate::bin("http-front"));
        cmd.arg("-c")
            .arg(dir.path().join("front.toml"))
            .env("RUST_LOG", "info")
            .stdin(Stdio::null())
            .stdout(Stdio::from(out))
            .stderr(Stdio::from(err))
            .process_group(0);
        // SAFETY: prctl is async-signal-safe and touches only the child.
        unsafe {
            cmd.pre_exec(|| {
                libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
                Ok(())
            });
        }
        let child = cmd.spawn().expect("start http-front");
        let mut f = Front {
            child,
            dir,
            addr,
            metrics,
            log,
        };
        let end = Instant::now() + START_TIMEOUT;
        while Instant::now() < end {
            if let Ok(Some(_)) = f.child.try_wait() {
                let l = f.log();
                let retry = l.contains("Address already in use");
                return Err((l, retry));
            }
            // Ready means everything is up, the control socket included (it is bound after
            // the listeners and the metrics server, which may answer first).
            if f.log().contains("http-front ready")
                && http_get_text(f.metrics, "/metrics").is_ok()
                && TcpStream::connect_timeout(&f.addr, Duration::from_millis(200)).is_ok()
            {
                return Ok(f);
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        Err((f.log(), false))
    }

    /// Where it listens.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Its metrics address.
    pub fn metrics_addr(&self) -> SocketAddr {
        self.metrics
    }

    /// Its temp dir (config, rules, log, outputs).
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// Its log so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// Every metric series (`name{labels}` → value).
    pub fn metrics(&self) -> BTreeMap<String, f64> {
        let text = http_get_text(self.metrics, "/metrics")
            .unwrap_or_else(|e| panic!("metrics: {e}\n{}", self.log()));
        counters::prometheus_series(&text)
    }

    /// One series, e.g. `http_front_limit_hits_total{limit="max_uri_bytes"}`; panics, listing
    /// the series there are, when it is absent (a misspelt series must not read as 0).
    #[track_caller]
    pub fn metric(&self, series: &str) -> u64 {
        counters::prometheus_value(&self.metrics(), series) as u64
    }

    /// Waits (at most `timeout`) until `series` reaches `at_least`; its last value.
    pub fn wait_metric(&self, series: &str, at_least: u64, timeout: Duration) -> u64 {
        let end = Instant::now() + timeout;
        loop {
            let v = self.metric(series);
            if v >= at_least || Instant::now() > end {
                return v;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Replaces `front.toml` (and `rules.toml` when given).
    pub fn write_config(&self, front_toml: &str, rules: Option<&str>) {
        if let Some(r) = rules {
            std::fs::write(self.dir().join("rules.toml"), r).expect("write rules");
        }
        std::fs::write(self.dir().join("front.toml"), front_toml).expect("write config");
    }

    /// Sends SIGHUP and waits until a reload succeeded or failed; true when it succeeded.
    pub fn reload(&self) -> bool {
        let ok = "http_front_reloads_total{result=\"ok\"}";
        let failed = "http_front_reloads_total{result=\"failed\"}";
        let (ok0, failed0) = (self.metric(ok), self.metric(failed));
        // SAFETY: kill has no memory preconditions.
        unsafe {
            libc::kill(self.child.id() as libc::pid_t, libc::SIGHUP);
        }
        let end = Instant::now() + Duration::from_secs(10);
        while Instant::now() < end {
            if self.metric(ok) > ok0 {
                return true;
            }
            if self.metric(failed) > failed0 {
                return false;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        panic!("reload did not finish within 10 s:\n{}", self.log());
    }

    /// `http-front ctl ARGS` through the control socket `ctl.sock` in its directory (the
    /// config's `[control] socket = "ctl.sock"`); panics, with the output, unless it succeeds.
    pub fn ctl(&self, args: &[&str]) -> String {
        let (code, out) = self.ctl_status(args);
        assert_eq!(code, Some(0), "ctl {args:?}: {out}");
        out
    }

    /// `http-front ctl ARGS...`: its exit code and output, whatever they are.
    pub fn ctl_status(&self, args: &[&str]) -> (Option<i32>, String) {
        let sock = self.dir().join("ctl.sock");
        let mut all = vec!["ctl", "-s", sock.to_str().expect("UTF-8 path")];
        all.extend_from_slice(args);
        run_front(&all)
    }

    /// True while the process runs.
    pub fn is_running(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }
}

impl Drop for Front {
    fn drop(&mut self) {
        if std::thread::panicking() {
            let log = self.log();
            let lines: Vec<&str> = log.lines().collect();
            let from = lines.len().saturating_sub(200);
            eprintln!("----- http-front log ({}) -----", self.log.display());
            for l in &lines[from..] {
                eprintln!("{l}");
            }
            eprintln!("----- end of http-front log -----");
        }
        let pgid = self.child.id() as libc::pid_t;
        // SAFETY: kill has no memory preconditions; the group is the one this child leads.
        unsafe {
            libc::kill(-pgid, libc::SIGKILL);
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Runs http-front with `args` to completion (bounded); (exit code, stdout + stderr).
pub fn run_front(args: &[&str]) -> (Option<i32>, String) {
    let out = Command::new(crate::bin("http-front"))
        .args(args)
        .stdin(Stdio::null())
        .output()
        .expect("run http-front");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.code(), text)
}

// ---------------------------------------------------------------------------------------------
// HTTP/1.1 client.

/// A response read off the wire.
#[derive(Debug, Clone, Default)]
pub struct Resp {
    /// Status code.
    pub status: u16,
    /// Headers, names in lower case, in order.
    pub headers: Vec<(String, String)>,
    /// Body as text (lossy).
    pub body: String,
}

impl Resp {
    /// The first header named `name` (lower case).
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }
}

/// One HTTP/1.1 connection.
#[derive(Debug)]
pub struct H1Conn {
    /// The socket.
    pub stream: TcpStream,
    buf: Vec<u8>,
}

impl H1Conn {
    /// Connects to `to` from `from`.
    pub fn connect(from: Option<Ipv4Addr>, to: SocketAddr) -> io::Result<H1Conn> {
        Ok(H1Conn {
            stream: connect_from(from, to)?,
            buf: Vec::new(),
        })
    }

    /// Sends raw bytes.
    pub fn send_raw(&mut self, bytes: &[u8]) -> io::Result<()> {
        self.stream.write_all(bytes)
    }

    /// Sends `method path` for `host` with extra header lines and a body; reads the response.
    pub fn request(
        &mut self,
        method: &str,
        host: &str,
        path: &str,
        extra: &[(&str, &str)],
        body: &[u8],
    ) -> io::Result<Resp> {
        let mut req = format!("{method} {path} HTTP/1.1\r\nhost: {host}\r\n");
        for (k, v) in extra {
            req.push_str(&format!("{k}: {v}\r\n"));
        }
        if !body.is_empty() || method == "POST" {
            req.push_str(&format!("content-length: {}\r\n", body.len()));
        }
        req.push_str("\r\n");
        let mut bytes = req.into_bytes();
        bytes.extend_from_slice(body);
        self.stream.write_all(&bytes)?;
        self.read_response()
    }

    /// Reads one response (Content-Length, chunked, or until close).
    pub fn read_response(&mut self) -> io::Result<Resp> {
        let eof = || io::Error::new(io::ErrorKind::UnexpectedEof, "connection closed");
        let head_end = loop {
            if let Some(i) = find(&self.buf, b"\r\n\r\n") {
                break i;
            }
            let mut tmp = [0u8; 16384];
            let n = self.stream.read(&mut tmp)?;
            if n == 0 {
                return Err(eof());
            }
            self.buf.extend_from_slice(&tmp[..n]);
        };
        let head = String::from_utf8_lossy(&self.buf[..head_end]).to_string();
        self.buf.drain(..head_end + 4);
        let mut lines = head.split("\r\n");
        let status = lines
            .next()
            .and_then(|l| l.split(' ').nth(1))
            .and_then(|s| s.parse().ok())
            .ok_or_else(|| {
                io::Error::new(
                    io::ErrorKind::InvalidData,
                    format!("bad status line in {head:?}"),
                )
            })?;
        let headers: Vec<(String, String)> = lines
            .filter_map(|l| l.split_once(':'))
            .map(|(k, v)| (k.trim().to_ascii_lowercase(), v.trim().to_string()))
            .collect();
        let mut r = Resp {
            status,
            headers,
            body: String::new(),
        };
        let body: Vec<u8> = if r
            .header("transfer-encoding")
            .is_some_and(|v| v.contains("chunked"))
        {
            let mut out = Vec::new();
            loop {
                let line_end = loop {
                    if let Some(i) = find(&self.buf, b"\r\n") {
                        break i;
                    }
                    self.fill()?;
                };
                let size = usize::from_str_radix(
                    String::from_utf8_lossy(&self.buf[..line_end])
                        .split(';')
                        .next()
                        .unwrap_or("")
                        .trim(),
                    16,
                )
                .map_err(|_| io::Error::new(io::ErrorKind::InvalidData, "bad chunk size"))?;
                self.buf.drain(..line_end + 2);
                while self.buf.len() < size + 2 {
                    self.fill()?;
                }
                out.extend_from_slice(&self.buf[..size]);
                self.buf.drain(..size + 2);
                if size == 0 {
                    break out;
                }
            }
        } else if let Some(n) = r
            .header("content-length")
            .and_then(|v| v.parse::<usize>().ok())
        {
            while self.buf.len() < n {
                self.fill()?;
            }
            self.buf.drain(..n).collect()
        } else if status == 204 || status == 304 || (100..200).contains(&status) {
            Vec::new()
        } else {
            loop {
                match self.fill() {
                    Ok(()) => continue,
                    Err(_) => break std::mem::take(&mut self.buf),
                }
            }
        };
        r.body = String::from_utf8_lossy(&body).to_string();
        Ok(r)
    }

    fn fill(&mut self) -> io::Result<()> {
        let mut tmp = [0u8; 16384];
        let n = self.stream.read(&mut tmp)?;
        if n == 0 {
            return Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                "connection closed",
            ));
        }
        self.buf.extend_from_slice(&tmp[..n]);
        Ok(())
    }
}

/// One GET over a fresh connection from `from`.
pub fn get(from: Option<Ipv4Addr>, to: SocketAddr, host: &str, path: &str) -> io::Result<Resp> {
    let mut c = H1Conn::connect(from, to)?;
    c.request("GET", host, path, &[("connection", "close")], b"")
}

/// GET `path` from `addr` (no Host checks): the body of a 200, else an error.
pub fn http_get_text(addr: SocketAddr, path: &str) -> Result<String, String> {
    let mut c = H1Conn::connect(None, addr).map_err(|e| e.to_string())?;
    let _ = c.stream.set_read_timeout(Some(Duration::from_secs(3)));
    let r = c
        .request("GET", "localhost", path, &[("connection", "close")], b"")
        .map_err(|e| e.to_string())?;
    if r.status != 200 {
        return Err(format!("status {}", r.status));
    }
    let _ = c.stream.shutdown(Shutdown::Both);
    Ok(r.body)
}

// ---------------------------------------------------------------------------------------------
// HTTP/2 client (h2c, prior knowledge).

/// Frame types used here.
pub mod frame {
    /// DATA.
    pub const DATA: u8 = 0;
    /// HEADERS.
    pub const HEADERS: u8 = 1;
    /// PRIORITY.
    pub const PRIORITY: u8 = 2;
    /// RST_STREAM.
    pub const RST_STREAM: u8 = 3;
    /// SETTINGS.
    pub const SETTINGS: u8 = 4;
    /// PING.
    pub const PING: u8 = 6;
    /// GOAWAY.
    pub const GOAWAY: u8 = 7;
    /// WINDOW_UPDATE.
    pub const WINDOW_UPDATE: u8 = 8;
    /// CONTINUATION.
    pub const CONTINUATION: u8 = 9;
    /// END_STREAM flag.
    pub const END_STREAM: u8 = 0x1;
    /// END_HEADERS flag.
    pub const END_HEADERS: u8 = 0x4;
    /// ACK flag (SETTINGS, PING).
    pub const ACK: u8 = 0x1;
}

/// One frame read.
#[derive(Debug, Clone)]
pub struct Frame {
    /// Type.
    pub kind: u8,
    /// Flags.
    pub flags: u8,
    /// Stream id.
    pub stream: u32,
    /// Payload.
    pub payload: Vec<u8>,
}

/// An HTTP/2 response.
#[derive(Debug, Clone)]
pub struct H2Resp {
    /// `:status`.
    pub status: u16,
    /// DATA bytes as text.
    pub body: String,
}

/// What ended an HTTP/2 read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum H2End {
    /// The server sent GOAWAY with this error code.
    GoAway(u32),
    /// The server reset the stream with this error code.
    Reset(u32),
    /// The connection closed or failed.
    Closed(String),
}

/// An HTTP/2 connection with hand-made frames; see the module documentation.
#[derive(Debug)]
pub struct H2Conn {
    /// The socket.
    pub stream: TcpStream,
    next_id: u32,
    buf: Vec<u8>,
    /// GOAWAY received (error code), if any.
    pub goaway: Option<u32>,
    /// The server's first SETTINGS: (identifier, value) in its order.
    pub server_settings: Vec<(u16, u32)>,
}

/// An HPACK integer with an `n`-bit prefix whose other bits are `first`.
fn hpack_int(out: &mut Vec<u8>, first: u8, n: u8, mut v: usize) {
    let max = (1usize << n) - 1;
    if v < max {
        out.push(first | v as u8);
        return;
    }
    out.push(first | max as u8);
    v -= max;
    while v >= 128 {
        out.push((v % 128) as u8 | 0x80);
        v /= 128;
    }
    out.push(v as u8);
}

/// Header fields as HPACK literals without indexing, new names, no Huffman.
pub fn hpack_encode(fields: &[(&str, &str)]) -> Vec<u8> {
    let mut out = Vec::new();
    for (k, v) in fields {
        out.push(0x00);
        hpack_int(&mut out, 0, 7, k.len());
        out.extend_from_slice(k.as_bytes());
        hpack_int(&mut out, 0, 7, v.len());
        out.extend_from_slice(v.as_bytes());
    }
    out
}

fn read_int(b: &[u8], pos: &mut usize, n: u8) -> Option<usize> {
    let max = (1usize << n) - 1;
    let mut v = (*b.get(*pos)? as usize) & max;
    *pos += 1;
    if v < max {
        return Some(v);
    }
    let mut shift = 0;
    loop {
        let byte = *b.get(*pos)?;
        *pos += 1;
        v += ((byte & 0x7f) as usize) << shift;
        if byte & 0x80 == 0 {
            return Some(v);
        }
        shift += 7;
        if shift > 28 {
            return None;
        }
    }
}

/// Decodes a Huffman string made of digits only (enough for `:status`).
fn huffman_digits(b: &[u8]) -> Option<String> {
    let bits: Vec<u8> = b
        .iter()
        .flat_map(|byte| (0..8).rev().map(move |i| (byte >> i) & 1))
        .collect();
    let mut out = String::new();
    let mut i = 0;
    let code = |from: usize, n: usize| {
        bits[from..from + n]
            .iter()
            .fold(0u32, |a, &x| (a << 1) | x as u32)
    };
    while i < bits.len() {
        if bits.len() - i < 8 && bits[i..].iter().all(|&x| x == 1) {
            break; // EOS padding
        }
        if bits.len() - i >= 5 && code(i, 5) <= 2 {
            out.push((b'0' + code(i, 5) as u8) as char);
            i += 5;
        } else if bits.len() - i >= 6 && (0b011001..=0b011111).contains(&code(i, 6)) {
            out.push((b'3' + (code(i, 6) - 0b011001) as u8) as char);
            i += 6;
        } else {
            return None;
        }
    }
    Some(out)
}

/// `:status` of a header block sent without dynamic-table references.
pub fn hpack_status(block: &[u8]) -> Option<u16> {
    const STATIC: [(usize, u16); 7] = [
        (8, 200),
        (9, 204),
        (10, 206),
        (11, 304),
        (12, 400),
        (13, 404),
        (14, 500),
    ];
    let mut pos = 0;
    while pos < block.len() {
        let b = block[pos];
        if b & 0xe0 == 0x20 {
            read_int(block, &mut pos, 5)?; // dynamic table size update
            continue;
        }
        if b & 0x80 != 0 {
            let idx = read_int(block, &mut pos, 7)?;
            return STATIC.iter().find(|(i, _)| *i == idx).map(|(_, s)| *s);
        }
        let prefix = if b & 0x40 != 0 { 6 } else { 4 };
        let idx = read_int(block, &mut pos, prefix)?;
        if idx == 0 {
            return None; // :status always uses an indexed name
        }
        let huff = block.get(pos)? & 0x80 != 0;
        let len = read_int(block, &mut pos, 7)?;
        let raw = block.get(pos..pos + len)?;
        if !(8..=14).contains(&idx) {
            return None;
        }
        let text = if huff {
            huffman_digits(raw)?
        } else {
            String::from_utf8_lossy(raw).to_string()
        };
        return text.parse().ok();
    }
    None
}

impl H2Conn {
    /// Connects from `from`, sends the preface and our SETTINGS (HPACK table 0, no push), and
    /// reads the server's SETTINGS.
    pub fn connect(from: Option<Ipv4Addr>, to: SocketAddr) -> io::Result<H2Conn> {
        Self::connect_with(from, to, &[], true)
    }

    /// As [`connect`](Self::connect), with extra SETTINGS (`(id, value)`, e.g. `(4, 0)` for a
    /// zero stream window) and, when `open_window`, the connection window opened to 16 MiB.
    pub fn connect_with(
        from: Option<Ipv4Addr>,
        to: SocketAddr,
        extra_settings: &[(u16, u32)],
        open_window: bool,
    ) -> io::Result<H2Conn> {
        let stream = connect_from(from, to)?;
        let mut c = H2Conn {
            stream,
            next_id: 1,
            buf: Vec::new(),
            goaway: None,
            server_settings: Vec::new(),
        };
        let mut out = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n".to_vec();
        let mut settings = Vec::new();
        for &(id, v) in [(1u16, 0u32), (2, 0)].iter().chain(extra_settings) {
            settings.extend_from_slice(&id.to_be_bytes());
            settings.extend_from_slice(&v.to_be_bytes());
        }
        out.extend(Self::frame_bytes(frame::SETTINGS, 0, 0, &settings));
        if open_window {
            out.extend(Self::frame_bytes(
                frame::WINDOW_UPDATE,
                0,
                0,
                &(1u32 << 24).to_be_bytes(),
            ));
        }
        c.stream.write_all(&out)?;
        // The server's SETTINGS comes first.
        let f = c.read_frame()?;
        if f.kind != frame::SETTINGS {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!("expected SETTINGS, got {f:?}"),
            ));
        }
        c.server_settings = f
            .payload
            .chunks_exact(6)
            .map(|s| {
                (
                    u16::from_be_bytes([s[0], s[1]]),
                    u32::from_be_bytes([s[2], s[3], s[4], s[5]]),
                )
            })
            .collect();
        c.write_frame(frame::SETTINGS, frame::ACK, 0, &[])?;
        Ok(c)
    }

    fn frame_bytes(kind: u8, flags: u8, stream: u32, payload: &[u8]) -> Vec<u8> {
        let len = payload.len() as u32;
        let mut out = vec![(len >> 16) as u8, (len >> 8) as u8, len as u8, kind, flags];
        out.extend_from_slice(&(stream & 0x7fff_ffff).to_be_bytes());
        out.extend_from_slice(payload);
        out
    }

    /// Writes one frame.
    pub fn write_frame(
        &mut self,
        kind: u8,
        flags: u8,
        stream: u32,
        payload: &[u8],
    ) -> io::Result<()> {
        self.stream
            .write_all(&Self::frame_bytes(kind, flags, stream, payload))
    }

    /// Reads one frame (within the socket's read timeout).
    pub fn read_frame(&mut self) -> io::Result<Frame> {
        loop {
            if self.buf.len() >= 9 {
                let len = ((self.buf[0] as usize) << 16)
                    | ((self.buf[1] as usize) << 8)
                    | self.buf[2] as usize;
                if self.buf.len() >= 9 + len {
                    let f = Frame {
                        kind: self.buf[3],
                        flags: self.buf[4],
                        stream: u32::from_be_bytes([
                            self.buf[5],
                            self.buf[6],
                            self.buf[7],
                            self.buf[8],
                        ]) & 0x7fff_ffff,
                        payload: self.buf[9..9 + len].to_vec(),
                    };
                    self.buf.drain(..9 + len);
                    if f.kind == frame::GOAWAY && f.payload.len() >= 8 {
                        self.goaway = Some(u32::from_be_bytes([
                            f.payload[4],
                            f.payload[5],
                            f.payload[6],
                            f.payload[7],
                        ]));
                    }
                    return Ok(f);
                }
            }
            let mut tmp = [0u8; 16384];
            let n = self.stream.read(&mut tmp)?;
            if n == 0 {
                return Err(io::Error::new(
                    io::ErrorKind::UnexpectedEof,
                    "connection closed",
                ));
            }
            self.buf.extend_from_slice(&tmp[..n]);
        }
    }

    /// Opens a stream with `method`, `authority`, `path` and extra fields; returns its id.
    pub fn send_request(
        &mut self,
        method: &str,
        authority: &str,
        path: &str,
        extra: &[(&str, &str)],
        end_stream: bool,
    ) -> io::Result<u32> {
        let id = self.next_id;
        self.next_id += 2;
        let mut fields = vec![
            (":method", method),
            (":scheme", "http"),
            (":authority", authority),
            (":path", path),
        ];
        fields.extend_from_slice(extra);
        let block = hpack_encode(&fields);
        let flags = frame::END_HEADERS | if end_stream { frame::END_STREAM } else { 0 };
        self.write_frame(frame::HEADERS, flags, id, &block)?;
        Ok(id)
    }

    /// Resets stream `id` with CANCEL.
    pub fn reset(&mut self, id: u32) -> io::Result<()> {
        self.write_frame(frame::RST_STREAM, 0, id, &8u32.to_be_bytes())
    }

    /// Reads frames until stream `id` ends; answers PINGs; other streams' frames are skipped.
    pub fn read_response(&mut self, id: u32) -> Result<H2Resp, H2End> {
        let mut status = None;
        let mut body = Vec::new();
        for _ in 0..100_000 {
            let f = self
                .read_frame()
                .map_err(|e| H2End::Closed(e.to_string()))?;
            match f.kind {
                frame::GOAWAY => {
                    let last = u32::from_be_bytes([
                        f.payload[0],
                        f.payload[1],
                        f.payload[2],
                        f.payload[3],
                    ]) & 0x7fff_ffff;
                    if last < id {
                        return Err(H2End::GoAway(self.goaway.unwrap_or(0)));
                    }
                }
                frame::PING if f.flags & frame::ACK == 0 => {
                    let _ = self.write_frame(frame::PING, frame::ACK, 0, &f.payload);
                }
                frame::SETTINGS if f.flags & frame::ACK == 0 => {
                    let _ = self.write_frame(frame::SETTINGS, frame::ACK, 0, &[]);
                }
                frame::RST_STREAM if f.stream == id => {
                    let code = u32::from_be_bytes([
                        f.payload[0],
                        f.payload[1],
                        f.payload[2],
                        f.payload[3],
                    ]);
                    return Err(H2End::Reset(code));
                }
                frame::HEADERS if f.stream == id => {
                    if status.is_none() {
                        status = hpack_status(&f.payload);
                    }
                    if f.flags & frame::END_STREAM != 0 {
                        break;
                    }
                }
                frame::DATA if f.stream == id => {
                    body.extend_from_slice(&f.payload);
                    if !f.payload.is_empty() {
                        let inc = (f.payload.len() as u32).to_be_bytes();
                        let _ = self.write_frame(frame::WINDOW_UPDATE, 0, id, &inc);
                        let _ = self.write_frame(frame::WINDOW_UPDATE, 0, 0, &inc);
                    }
                    if f.flags & frame::END_STREAM != 0 {
                        break;
                    }
                }
                _ => {}
            }
        }
        Ok(H2Resp {
            status: status.ok_or_else(|| H2End::Closed("no :status".into()))?,
            body: String::from_utf8_lossy(&body).to_string(),
        })
    }

    /// A whole GET.
    pub fn get(&mut self, authority: &str, path: &str) -> Result<H2Resp, H2End> {
        let id = self
            .send_request("GET", authority, path, &[], true)
            .map_err(|e| H2End::Closed(e.to_string()))?;
        self.read_response(id)
    }

    /// Reads until GOAWAY or close, for at most `timeout`; what ended it (`None`: neither came).
    /// A GOAWAY already read while waiting for responses counts.
    pub fn wait_end(&mut self, timeout: Duration) -> Option<H2End> {
        if let Some(code) = self.goaway {
            return Some(H2End::GoAway(code));
        }
        let end = Instant::now() + timeout;
        let _ = self
            .stream
            .set_read_timeout(Some(Duration::from_millis(200)));
        while Instant::now() < end {
            match self.read_frame() {
                Ok(f) if f.kind == frame::GOAWAY => {
                    return Some(H2End::GoAway(self.goaway.unwrap_or(0)));
                }
                Ok(f) if f.kind == frame::PING && f.flags & frame::ACK == 0 => {
                    let _ = self.write_frame(frame::PING, frame::ACK, 0, &f.payload);
                }
                Ok(_) => {}
                Err(e)
                    if matches!(
                        e.kind(),
                        io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
                    ) => {}
                Err(e) => {
                    return Some(match self.goaway {
                        Some(code) => H2End::GoAway(code),
                        None => H2End::Closed(e.to_string()),
                    });
                }
            }
        }
        let _ = self.stream.set_read_timeout(Some(READ_TIMEOUT));
        None
    }
}

/// The token and difficulty an http-front challenge page carries.
pub fn page_token(page: &str) -> (String, u32) {
    let t = page
        .split("var T=\"")
        .nth(1)
        .expect("a challenge page")
        .split('"')
        .next()
        .unwrap();
    let d = page.split(",D=").nth(1).unwrap().split(',').next().unwrap();
    (t.to_string(), d.parse().unwrap())
}

/// A nonce whose SHA-256 with `token` has `bits` leading zero bits (a challenge solved).
pub fn solve(token: &str, bits: u32) -> u64 {
    use sha2::{Digest, Sha256};
    (0u64..)
        .find(|n| {
            let h = Sha256::digest(format!("{token}.{n}").as_bytes());
            let lz = h
                .iter()
                .position(|&b| b != 0)
                .map_or(256, |i| i as u32 * 8 + h[i].leading_zeros());
            lz >= bits
        })
        .unwrap()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hpack_helpers() {
        let mut v = Vec::new();
        hpack_int(&mut v, 0, 7, 300);
        let mut p = 0;
        assert_eq!(read_int(&v, &mut p, 7), Some(300));
        assert_eq!(hpack_status(&[0x88]), Some(200));
        // "403" Huffman-coded: 011010 00000 011001 + padding 1s.
        assert_eq!(
            huffman_digits(&[0b0110_1000, 0b0000_1100, 0b1111_1111]).as_deref(),
            Some("403")
        );
        // Literal with incremental indexing, name index 8, Huffman "429".
        let b = [0x48, 0x83, 0x68, 0x4f, 0xff];
        assert_eq!(hpack_status(&b), Some(429));
        assert_eq!(
            hpack_status(&[0x20, 0x88]),
            Some(200),
            "skips a table size update"
        );
    }
}
