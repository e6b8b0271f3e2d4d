//! dnstap: the query log Knot DNS, BIND, NSD, PowerDNS and dnsdist write — AUTH_QUERY and
//! AUTH_RESPONSE messages (dnstap.proto, encoded here: a handful of fields) in Frame Streams
//! to a file or a Unix socket (`[dnstap]`).
//!
//! Workers never wait for it: a tapped query is copied into a buffer taken from a recycled
//! pool and handed over a bounded channel ([`Tap`]); when the channel is full the message is
//! dropped and counted. One writer thread encodes and writes; a socket is reconnected every
//! second while its reader is away (what is sent meanwhile is dropped, counted). Blocked
//! sources never reach dnstap (their packets cost one lookup); the events count them.

use std::io::{self, Read, Write};
use std::net::{IpAddr, SocketAddr};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{Receiver, SyncSender, TrySendError};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde::Deserialize;

/// Frame Streams content type of dnstap.
pub const CONTENT_TYPE: &[u8] = b"protobuf:dnstap.Dnstap";

/// `[dnstap]`.
#[derive(Debug, Clone, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct DnstapConfig {
    /// A Frame Streams reader's Unix socket (fstrm_capture, Vector, dnstap-receiver...).
    #[serde(default)]
    pub socket: Option<PathBuf>,
    /// A Frame Streams file (appended as a new stream at each start).
    #[serde(default)]
    pub file: Option<PathBuf>,
    /// One tapped query in `sample` (1: all).
    #[serde(default = "one")]
    pub sample: u32,
    /// Only answers with these rcodes ("NOERROR", "NXDOMAIN", "REFUSED", ...; empty: all).
    #[serde(default)]
    pub rcodes: Vec<String>,
    /// Only queries a defence acted on: slipped (TC or BADCOOKIE), dropped or refused by
    /// RRL, the rules or the random-subdomain defence.
    #[serde(default)]
    pub only_defence: bool,
    /// Write AUTH_QUERY messages.
    #[serde(default = "yes")]
    pub queries: bool,
    /// Write AUTH_RESPONSE messages.
    #[serde(default = "yes")]
    pub responses: bool,
    /// Messages waiting for the writer at most (beyond: dropped, counted).
    #[serde(default = "default_queue")]
    pub queue: usize,
    /// The identity field (default: the host name).
    #[serde(default)]
    pub identity: Option<String>,
}

fn one() -> u32 {
    1
}
fn yes() -> bool {
    true
}
fn default_queue() -> usize {
    8192
}

impl DnstapConfig {
    /// Checks the section: one output, known rcodes; the error names the key.
    pub fn check(&self) -> Result<(), (String, String)> {
        match (&self.socket, &self.file) {
            (Some(_), Some(_)) => {
                return Err(("dnstap".into(), "set socket or file, not both".into()));
            }
            (None, None) => {
                return Err(("dnstap".into(), "needs socket = PATH or file = PATH".into()));
            }
            _ => {}
        }
        if self.sample == 0 {
            return Err(("dnstap.sample".into(), "must be at least 1".into()));
        }
        if self.queue == 0 || self.queue > 1 << 24 {
            return Err((
                "dnstap.queue".into(),
                "must be 1 to 16777216 messages".into(),
            ));
        }
        for r in &self.rcodes {
            // The header's rcodes only: BADVERS and BADCOOKIE carry their upper bits in the
            // OPT record (BADCOOKIE slips are what `only_defence` picks).
            if shield::rules::rcode_by_name(r).is_none_or(|v| v > 15) {
                return Err((
                    "dnstap.rcodes".into(),
                    format!(
                        "unknown rcode {r:?} (NOERROR, FORMERR, SERVFAIL, NXDOMAIN, NOTIMP, REFUSED, NOTAUTH)"
                    ),
                ));
            }
        }
        Ok(())
    }
}

/// The counters.
#[derive(Debug, Default)]
pub struct DnstapStats {
    /// Messages written.
    pub written: AtomicU64,
    /// Messages dropped because the queue was full.
    pub dropped_queue: AtomicU64,
    /// Messages dropped because the output was not there (socket reader away, write error).
    pub dropped_output: AtomicU64,
    /// Connections (or file opens) made.
    pub connects: AtomicU64,
}

impl shield::metrics::Source for DnstapStats {
    fn collect(&self, out: &mut shield::metrics::Samples) {
        let l = |a: &AtomicU64| a.load(Ordering::Relaxed);
        out.counter(
            "dnstap.written",
            "dnsd_dnstap_messages_total",
            "",
            "dnstap messages written.",
            l(&self.written),
        );
        for (what, a) in [
            ("queue", &self.dropped_queue),
            ("output", &self.dropped_output),
        ] {
            out.counter(
                format!("dnstap.dropped_{what}"),
                "dnsd_dnstap_dropped_total",
                format!("why=\"{what}\""),
                "dnstap messages dropped: the queue to the writer was full, or the output was away.",
                l(a),
            );
        }
        out.counter(
            "dnstap.connects",
            "dnsd_dnstap_connects_total",
            "",
            "Connections to the dnstap socket (or opens of the file).",
            l(&self.connects),
        );
    }
}

/// One query (and its answer) handed to the writer.
struct Msg {
    tcp: bool,
    client: SocketAddr,
    server: Option<IpAddr>,
    server_port: u16,
    query_time: Duration,
    response_time: Duration,
    query: Vec<u8>,
    /// Empty when no answer was sent (dropped).
    response: Vec<u8>,
}

/// What a worker decided about a message, as the tap's filters see it.
#[derive(Debug, Clone, Copy)]
pub struct Tapped<'a> {
    /// The query as received.
    pub query: &'a [u8],
    /// The answer sent, if one was.
    pub response: Option<&'a [u8]>,
    /// A defence dropped, slipped or refused it.
    pub defence: bool,
}

/// A worker's handle: filters, the buffer pool and the channel to the writer.
pub struct Tap {
    cfg: Arc<DnstapConfig>,
    rcodes: Vec<u16>,
    tx: SyncSender<Msg>,
    free: Arc<std::sync::Mutex<Receiver<Msg>>>,
    spare: Option<Msg>,
    n: u32,
    server_port: u16,
    stats: Arc<DnstapStats>,
}

impl Tap {
    /// Another handle for another worker.
    pub fn clone_for_worker(&self) -> Tap {
        Tap {
            cfg: self.cfg.clone(),
            rcodes: self.rcodes.clone(),
            tx: self.tx.clone(),
            free: self.free.clone(),
            spare: None,
            n: 0,
            server_port: self.server_port,
            stats: self.stats.clone(),
        }
    }

    /// Hands `m` (from `client` to `server`, over TCP or UDP) to the writer when the filters
    /// let it through.
    #[inline]
    pub fn record(
        &mut self,
        m: &Tapped<'_>,
        client: SocketAddr,
        server: Option<IpAddr>,
        tcp: bool,
    ) {
        if self.cfg.only_defence && !m.defence {
            return;
        }
        if !self.rcodes.is_empty() {
            let Some(r) = m.response.filter(|r| r.len() >= 12) else {
                return;
            };
            if !self.rcodes.contains(&u16::from(r[3] & 0x0f)) {
                return;
            }
        }
        self.n += 1;
        if self.n < self.cfg.sample {
            return;
        }
        self.n = 0;
        // A recycled buffer (the writer sends them back); a new one only while the pool
        // fills up to the queue's size.
        let mut msg = match self.spare.take() {
            Some(s) => s,
            None => {
                let got = self.free.try_lock().ok().and_then(|f| f.try_recv().ok());
                got.unwrap_or_else(|| Msg {
                    tcp,
                    client,
                    server,
                    server_port: 0,
                    query_time: Duration::ZERO,
                    response_time: Duration::ZERO,
                    query: Vec::new(),
                    response: Vec::new(),
                })
            }
        };
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap_or_default();
        msg.tcp = tcp;
        msg.client = client;
        msg.server = server;
        msg.server_port = self.server_port;
        msg.query_time = now;
        msg.response_time = now;
        msg.query.clear();
        msg.query.extend_from_slice(m.query);
        msg.response.clear();
        if let Some(r) = m.response {
            msg.response.extend_from_slice(r);
        }
        match self.tx.try_send(msg) {
            Ok(()) => {}
            Err(TrySendError::Full(back) | TrySendError::Disconnected(back)) => {
                self.stats.dropped_queue.fetch_add(1, Ordering::Relaxed);
                self.spare = Some(back);
            }
        }
    }
}

/// Starts the writer thread for `cfg` (checked); the first worker's tap, and the counters.
pub fn start(cfg: DnstapConfig, server_port: u16) -> (Tap, Arc<DnstapStats>) {
    let cfg = Arc::new(cfg);
    let (tx, rx) = std::sync::mpsc::sync_channel::<Msg>(cfg.queue);
    let (free_tx, free_rx) = std::sync::mpsc::sync_channel::<Msg>(cfg.queue);
    let stats = Arc::new(DnstapStats::default());
    let rcodes = cfg
        .rcodes
        .iter()
        .filter_map(|r| shield::rules::rcode_by_name(r))
        .collect();
    let identity = cfg.identity.clone().unwrap_or_else(|| {
        std::fs::read_to_string("/proc/sys/kernel/hostname")
            .map(|s| s.trim().to_string())
            .unwrap_or_else(|_| "dnsd".into())
    });
    let w = Writer {
        cfg: cfg.clone(),
        identity: identity.into_bytes(),
        version: format!("palisade dnsd {}", env!("CARGO_PKG_VERSION")).into_bytes(),
        stats: stats.clone(),
    };
    std::thread::Builder::new()
        .name("dnsd-dnstap".into())
        .spawn(move || w.run(rx, free_tx))
        .expect("spawn the dnstap writer");
    (
        Tap {
            cfg,
            rcodes,
            tx,
            free: Arc::new(std::sync::Mutex::new(free_rx)),
            spare: None,
            n: 0,
            server_port,
            stats: stats.clone(),
        },
        stats,
    )
}

struct Writer {
    cfg: Arc<DnstapConfig>,
    identity: Vec<u8>,
    version: Vec<u8>,
    stats: Arc<DnstapStats>,
}

/// An open output: a file, or a socket whose reader accepted the stream.
enum Output {
    /// A file, and its length at the last frame boundary flushed whole.
    File(io::BufWriter<std::fs::File>, u64),
    Socket(io::BufWriter<std::os::unix::net::UnixStream>),
}

impl Output {
    fn writer(&mut self) -> &mut dyn Write {
        match self {
            Output::File(f, _) => f,
            Output::Socket(s) => s,
        }
    }

    /// Flushes; a file's length is then a frame boundary to come back to.
    fn flush(&mut self) -> io::Result<()> {
        match self {
            Output::File(f, whole) => {
                f.flush()?;
                *whole = f.get_ref().metadata()?.len();
                Ok(())
            }
            Output::Socket(s) => s.flush(),
        }
    }

    /// Closes an output that failed: a file is cut back to its last whole frame and its
    /// stream ended with STOP where that fits (a full disk left half a frame, where a reader
    /// stops, and the START of the next opening after it).
    fn abandon(self) {
        if let Output::File(f, whole) = self {
            let (mut file, _unwritten) = f.into_parts();
            if file.set_len(whole).is_ok() {
                let mut stop = Vec::with_capacity(12);
                let _ = control(&mut stop, STOP, false);
                if file.write_all(&stop).and_then(|()| file.flush()).is_err() {
                    let _ = file.set_len(whole);
                }
            }
        }
    }
}

impl Writer {
    fn run(self, rx: Receiver<Msg>, free: SyncSender<Msg>) {
        let mut out: Option<Output> = None;
        let mut next_try = std::time::Instant::now();
        let mut frame = Vec::with_capacity(4096);
        loop {
            let first = match rx.recv_timeout(Duration::from_millis(200)) {
                Ok(m) => Some(m),
                Err(std::sync::mpsc::RecvTimeoutError::Timeout) => None,
                Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => break,
            };
            if out.is_none() && std::time::Instant::now() >= next_try {
                match self.open() {
                    Ok(o) => {
                        self.stats.connects.fetch_add(1, Ordering::Relaxed);
                        out = Some(o);
                    }
                    Err(e) => {
                        shield::limited!(1, warn!("dnstap: {e}"));
                        next_try = std::time::Instant::now() + Duration::from_secs(1);
                    }
                }
            }
            // This message and whatever else is queued, then one flush.
            let mut next = first;
            let mut burst = 0;
            while let Some(msg) = next {
                if !self.write(&mut out, &mut frame, &msg) {
                    next_try = std::time::Instant::now() + Duration::from_secs(1);
                }
                // The buffer goes back to the workers' pool (freed when the pool is full).
                let _ = free.try_send(msg);
                burst += 1;
                next = if burst < 1024 {
                    rx.try_recv().ok()
                } else {
                    None
                };
            }
            if out.as_mut().is_some_and(|o| o.flush().is_err())
                && let Some(o) = out.take()
            {
                o.abandon();
            }
        }
        if let Some(mut o) = out {
            let _ = control(o.writer(), STOP, false);
            let _ = o.writer().flush();
            if let Output::Socket(s) = o
                && let Ok(s) = s.into_inner()
            {
                // The reader answers STOP with FINISH.
                let _ = s.set_read_timeout(Some(Duration::from_secs(1)));
                let _ = read_control(&mut &s);
            }
        }
    }

    /// Writes `msg`'s frames to `out`; false (and `out` closed) when the output failed.
    fn write(&self, out: &mut Option<Output>, frame: &mut Vec<u8>, msg: &Msg) -> bool {
        let Some(o) = out else {
            self.stats.dropped_output.fetch_add(1, Ordering::Relaxed);
            return true;
        };
        let mut n = 0;
        for (kind, wanted) in [
            (1u64, self.cfg.queries),
            (2u64, self.cfg.responses && !msg.response.is_empty()),
        ] {
            if !wanted {
                continue;
            }
            frame.clear();
            encode(frame, &self.identity, &self.version, kind, msg);
            let len = (frame.len() as u32).to_be_bytes();
            let w = o.writer();
            if w.write_all(&len).and_then(|()| w.write_all(frame)).is_err() {
                self.stats.dropped_output.fetch_add(1, Ordering::Relaxed);
                if let Some(o) = out.take() {
                    o.abandon();
                }
                return false;
            }
            n += 1;
        }
        self.stats.written.fetch_add(n, Ordering::Relaxed);
        true
    }

    fn open(&self) -> io::Result<Output> {
        if let Some(p) = &self.cfg.file {
            let f = std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(p)
                .map_err(|e| io::Error::new(e.kind(), format!("{}: {e}", p.display())))?;
            // What is there is whole (a failed write is cut back to its last whole frame).
            let whole = f.metadata()?.len();
            let mut w = io::BufWriter::new(f);
            control(&mut w, START, true)?;
            let mut o = Output::File(w, whole);
            if let Err(e) = o.flush() {
                o.abandon();
                return Err(e);
            }
            return Ok(o);
        }
        let p = self.cfg.socket.as_deref().unwrap_or(Path::new(""));
        if let Some(why) = squattable(p) {
            return Err(io::Error::new(io::ErrorKind::PermissionDenied, why));
        }
        let s = std::os::unix::net::UnixStream::connect(p)
            .map_err(|e| io::Error::new(e.kind(), format!("{}: {e}", p.display())))?;
        s.set_read_timeout(Some(Duration::from_secs(2)))?;
        s.set_write_timeout(Some(Duration::from_secs(2)))?;
        // Bidirectional Frame Streams: READY, the reader's ACCEPT, then START.
        let mut w = &s;
        control(&mut w, READY, true)?;
        let (kind, types) = read_control(&mut &s)?;
        if kind != ACCEPT || !types.iter().any(|t| t == CONTENT_TYPE) {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!(
                    "{}: the reader did not accept {}",
                    p.display(),
                    String::from_utf8_lossy(CONTENT_TYPE)
                ),
            ));
        }
        control(&mut w, START, true)?;
        Ok(Output::Socket(io::BufWriter::new(s)))
    }
}

/// Why the socket at `p` may be another user's to read every query from: it sits in a
/// directory any user may write (`/tmp`: sticky or not, a name not yet taken is anyone's to
/// bind) and is owned by neither root, this process's user nor the directory's owner.
fn squattable(p: &Path) -> Option<String> {
    use std::os::unix::fs::MetadataExt as _;
    let dir = match p.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    let d = std::fs::metadata(dir).ok()?;
    if d.mode() & 0o002 == 0 {
        return None;
    }
    let s = std::fs::symlink_metadata(p).ok()?;
    // SAFETY: geteuid has no preconditions.
    let me = unsafe { libc::geteuid() };
    if s.uid() == 0 || s.uid() == me || s.uid() == d.uid() {
        return None;
    }
    Some(format!(
        "{}: not connected: a socket of user {} in {}, a directory any user may write (anyone \
         could bind the name and read every query); put the reader's socket in a directory \
         only it and dnsd may write",
        p.display(),
        s.uid(),
        dir.display()
    ))
}

const ACCEPT: u32 = 1;
const START: u32 = 2;
const STOP: u32 = 3;
const READY: u32 = 4;
const FIELD_CONTENT_TYPE: u32 = 1;

/// Writes a control frame of `kind`, with the content type when `typed`.
fn control(w: &mut dyn Write, kind: u32, typed: bool) -> io::Result<()> {
    let mut f = Vec::with_capacity(64);
    f.extend_from_slice(&kind.to_be_bytes());
    if typed {
        f.extend_from_slice(&FIELD_CONTENT_TYPE.to_be_bytes());
        f.extend_from_slice(&(CONTENT_TYPE.len() as u32).to_be_bytes());
        f.extend_from_slice(CONTENT_TYPE);
    }
    w.write_all(&0u32.to_be_bytes())?;
    w.write_all(&(f.len() as u32).to_be_bytes())?;
    w.write_all(&f)
}

/// Reads one control frame: its type and content types.
fn read_control(r: &mut dyn Read) -> io::Result<(u32, Vec<Vec<u8>>)> {
    let mut b4 = [0u8; 4];
    r.read_exact(&mut b4)?;
    if u32::from_be_bytes(b4) != 0 {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            "expected a control frame",
        ));
    }
    r.read_exact(&mut b4)?;
    let len = u32::from_be_bytes(b4) as usize;
    if !(4..=512).contains(&len) {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            "control frame length",
        ));
    }
    let mut f = vec![0u8; len];
    r.read_exact(&mut f)?;
    let kind = u32::from_be_bytes(f[..4].try_into().expect("4 bytes"));
    let mut types = Vec::new();
    let mut p = 4;
    while p + 8 <= f.len() {
        let field = u32::from_be_bytes(f[p..p + 4].try_into().expect("4 bytes"));
        let n = u32::from_be_bytes(f[p + 4..p + 8].try_into().expect("4 bytes")) as usize;
        p += 8;
        if p + n > f.len() {
            break;
        }
        if field == FIELD_CONTENT_TYPE {
            types.push(f[p..p + n].to_vec());
        }
        p += n;
    }
    Ok((kind, types))
}

// Protocol Buffers, the few shapes dnstap.proto needs.

fn varint(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

fn key(out: &mut Vec<u8>, field: u32, wire: u8) {
    varint(out, (u64::from(field) << 3) | u64::from(wire));
}

fn bytes(out: &mut Vec<u8>, field: u32, b: &[u8]) {
    key(out, field, 2);
    varint(out, b.len() as u64);
    out.extend_from_slice(b);
}

fn uint(out: &mut Vec<u8>, field: u32, v: u64) {
    key(out, field, 0);
    varint(out, v);
}

fn fixed32(out: &mut Vec<u8>, field: u32, v: u32) {
    key(out, field, 5);
    out.extend_from_slice(&v.to_le_bytes());
}

/// A Dnstap message (type MESSAGE) carrying a Message of `kind` (1 AUTH_QUERY, 2
/// AUTH_RESPONSE) for `m`.
fn encode(out: &mut Vec<u8>, identity: &[u8], version: &[u8], kind: u64, m: &Msg) {
    let mut msg = Vec::with_capacity(64 + m.query.len() + m.response.len());
    uint(&mut msg, 1, kind);
    let v6 = m.client.is_ipv6();
    uint(&mut msg, 2, if v6 { 2 } else { 1 });
    uint(&mut msg, 3, if m.tcp { 2 } else { 1 });
    let addr = |ip: IpAddr| match ip {
        IpAddr::V4(a) => a.octets().to_vec(),
        IpAddr::V6(a) => a.octets().to_vec(),
    };
    bytes(&mut msg, 4, &addr(m.client.ip()));
    if let Some(s) = m.server {
        bytes(&mut msg, 5, &addr(s));
    }
    uint(&mut msg, 6, u64::from(m.client.port()));
    uint(&mut msg, 7, u64::from(m.server_port));
    uint(&mut msg, 8, m.query_time.as_secs());
    fixed32(&mut msg, 9, m.query_time.subsec_nanos());
    if kind == 1 || !m.query.is_empty() {
        bytes(&mut msg, 10, &m.query);
    }
    if kind == 2 {
        uint(&mut msg, 12, m.response_time.as_secs());
        fixed32(&mut msg, 13, m.response_time.subsec_nanos());
        bytes(&mut msg, 14, &m.response);
    }
    bytes(out, 1, identity);
    bytes(out, 2, version);
    bytes(out, 14, &msg);
    uint(out, 15, 1);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn varints_and_control_frames() {
        let mut v = Vec::new();
        varint(&mut v, 300);
        assert_eq!(v, [0xac, 0x02]);
        let mut f = Vec::new();
        control(&mut f, START, true).unwrap();
        assert_eq!(&f[..4], &[0, 0, 0, 0]);
        let (kind, types) = read_control(&mut &f[..]).unwrap();
        assert_eq!((kind, types), (START, vec![CONTENT_TYPE.to_vec()]));
    }

    #[test]
    fn config_is_checked() {
        let c = |s: &str| toml::from_str::<DnstapConfig>(s).unwrap().check();
        assert!(c("file = \"/tmp/x\"").is_ok());
        assert!(c("").is_err());
        assert!(c("file = \"/a\"\nsocket = \"/b\"").is_err());
        assert!(c("file = \"/a\"\nrcodes = [\"NXDOMAIN\", \"nope\"]").is_err());
        assert!(c("file = \"/a\"\nrcodes = [\"BADCOOKIE\"]").is_err());
        assert!(c("file = \"/a\"\nrcodes = [\"nxdomain\", \"REFUSED\"]").is_ok());
        assert!(c("file = \"/a\"\nsample = 0").is_err());
        assert!(toml::from_str::<DnstapConfig>("file = \"/a\"\nlevel = 1").is_err());
    }

    #[test]
    fn a_reader_socket_another_user_could_have_bound_is_not_connected() {
        use std::os::unix::fs::PermissionsExt as _;
        // SAFETY: geteuid has no preconditions.
        if unsafe { libc::geteuid() } != 0 {
            eprintln!("SKIPPED: needs root (to own a socket as another user)");
            return;
        }
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("tap.sock");
        let _l = std::os::unix::net::UnixListener::bind(&p).unwrap();
        let chown = |uid: u32| std::os::unix::fs::chown(&p, Some(uid), None).unwrap();
        // A directory only root writes: whoever owns the socket.
        chown(65534);
        assert_eq!(squattable(&p), None);
        // Any user may write the directory (sticky or not): another user's socket is refused.
        for mode in [0o777, 0o1777] {
            std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(mode)).unwrap();
            assert!(squattable(&p).is_some_and(|w| w.contains("any user may write")));
        }
        chown(0);
        assert_eq!(squattable(&p), None, "root's");
    }
}
