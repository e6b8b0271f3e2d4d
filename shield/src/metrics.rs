//! One counter registry for both daemons: each component describes its counters once — the
//! `ctl stats` name, the Prometheus family, labels, help and kind — and one encoder writes
//! `/metrics` while another writes `ctl stats`, so that one object has one name everywhere.
//!
//! A component implements [`Source`]; a daemon registers its sources in a [`Registry`] at
//! start (and later, when an optional part such as Redis or XDP comes up), and serves the
//! registry with [`serve`], the one `/metrics` server of both daemons (bounded request head,
//! header timeout, bounded concurrent scrapes, accept backoff). Values are read when asked:
//! nothing on a hot path touches the registry.
//!
//! Names: what `shield` owns (block map, event aggregator, sinks, Redis sync, rules state)
//! is named `palisade_*` in both daemons; what a daemon owns is named after it (`dnsd_*`,
//! `http_front_*`).

use std::fmt::Write as _;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// A counter only goes up; a gauge goes both ways.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// Monotonic.
    Counter,
    /// Up and down.
    Gauge,
}

/// One value, named for `ctl stats` and for `/metrics`.
#[derive(Debug, Clone)]
pub struct Sample {
    /// Name in `ctl stats` (empty: not shown there).
    pub ctl: String,
    /// Prometheus family (empty: not exported).
    pub metric: &'static str,
    /// Prometheus labels, `k="v",…` (may be empty).
    pub labels: String,
    /// Help text of the family.
    pub help: &'static str,
    /// Counter or gauge.
    pub kind: Kind,
    /// The value.
    pub value: u64,
}

/// What a source adds its samples to.
#[derive(Debug, Default)]
pub struct Samples(Vec<Sample>);

impl Samples {
    /// A counter named `ctl` in `ctl stats` and `metric{labels}` in `/metrics`.
    pub fn counter(
        &mut self,
        ctl: impl Into<String>,
        metric: &'static str,
        labels: impl Into<String>,
        help: &'static str,
        value: u64,
    ) {
        self.push(
            ctl.into(),
            metric,
            labels.into(),
            help,
            Kind::Counter,
            value,
        );
    }

    /// A gauge (see [`counter`](Self::counter)).
    pub fn gauge(
        &mut self,
        ctl: impl Into<String>,
        metric: &'static str,
        labels: impl Into<String>,
        help: &'static str,
        value: u64,
    ) {
        self.push(ctl.into(), metric, labels.into(), help, Kind::Gauge, value);
    }

    /// Adds a sample.
    pub fn push(
        &mut self,
        ctl: String,
        metric: &'static str,
        labels: String,
        help: &'static str,
        kind: Kind,
        value: u64,
    ) {
        self.0.push(Sample {
            ctl,
            metric,
            labels,
            help,
            kind,
            value,
        });
    }

    /// The samples so far.
    pub fn as_slice(&self) -> &[Sample] {
        &self.0
    }

    /// The value of the sample named `ctl` (tests).
    pub fn get(&self, ctl: &str) -> Option<u64> {
        self.0.iter().find(|s| s.ctl == ctl).map(|s| s.value)
    }
}

/// A component with counters.
pub trait Source: Send + Sync {
    /// Adds the component's current values.
    fn collect(&self, out: &mut Samples);
}

impl<F: Fn(&mut Samples) + Send + Sync> Source for F {
    fn collect(&self, out: &mut Samples) {
        self(out)
    }
}

/// The sources of one daemon.
#[derive(Default)]
pub struct Registry {
    sources: Mutex<Vec<(&'static str, Arc<dyn Source>)>>,
}

impl std::fmt::Debug for Registry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let names: Vec<&str> = lock(&self.sources).iter().map(|(n, _)| *n).collect();
        f.debug_struct("Registry").field("sources", &names).finish()
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl Registry {
    /// An empty registry.
    pub fn new() -> Arc<Registry> {
        Arc::new(Registry::default())
    }

    /// Adds `source` under `name` (a source registered again under the same name replaces
    /// the earlier one: an optional part that restarts).
    pub fn register(&self, name: &'static str, source: Arc<dyn Source>) {
        let mut v = lock(&self.sources);
        v.retain(|(n, _)| *n != name);
        v.push((name, source));
    }

    /// Removes the source registered under `name`.
    pub fn unregister(&self, name: &'static str) {
        lock(&self.sources).retain(|(n, _)| *n != name);
    }

    /// Every sample now, in registration order.
    pub fn collect(&self) -> Samples {
        let sources: Vec<Arc<dyn Source>> = lock(&self.sources)
            .iter()
            .map(|(_, s)| Arc::clone(s))
            .collect();
        let mut out = Samples::default();
        for s in sources {
            s.collect(&mut out);
        }
        out
    }

    /// `/metrics` in the Prometheus text format (0.0.4): each family's HELP and TYPE once,
    /// its samples together.
    pub fn render_prometheus(&self) -> String {
        render_prometheus(self.collect().as_slice())
    }

    /// `ctl stats`: one `name<TAB>value` line per sample that has a `ctl` name.
    pub fn render_ctl(&self) -> String {
        render_ctl(self.collect().as_slice())
    }
}

/// Prometheus text for `samples` (see [`Registry::render_prometheus`]).
pub fn render_prometheus(samples: &[Sample]) -> String {
    let mut s = String::with_capacity(64 * samples.len() + 64);
    let mut order: Vec<&'static str> = Vec::new();
    let mut by_family: hashbrown::HashMap<&'static str, Vec<&Sample>> = hashbrown::HashMap::new();
    for x in samples.iter().filter(|x| !x.metric.is_empty()) {
        by_family
            .entry(x.metric)
            .or_insert_with(|| {
                order.push(x.metric);
                Vec::new()
            })
            .push(x);
    }
    for name in order {
        let v = &by_family[name];
        let first = v[0];
        let kind = match first.kind {
            Kind::Counter => "counter",
            Kind::Gauge => "gauge",
        };
        let _ = writeln!(s, "# HELP {name} {}", first.help);
        let _ = writeln!(s, "# TYPE {name} {kind}");
        for x in v {
            if x.labels.is_empty() {
                let _ = writeln!(s, "{name} {}", x.value);
            } else {
                let _ = writeln!(s, "{name}{{{}}} {}", x.labels, x.value);
            }
        }
    }
    s
}

/// `ctl stats` text for `samples` (see [`Registry::render_ctl`]).
pub fn render_ctl(samples: &[Sample]) -> String {
    let mut s = String::with_capacity(32 * samples.len());
    for x in samples.iter().filter(|x| !x.ctl.is_empty()) {
        let _ = writeln!(s, "{}\t{}", x.ctl, x.value);
    }
    s
}

/// Escapes a label value (backslash, double quote, newline).
pub fn label_value(v: &str) -> String {
    let mut out = String::with_capacity(v.len());
    for c in v.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '"' => out.push_str("\\\""),
            '\n' => out.push_str("\\n"),
            c => out.push(c),
        }
    }
    out
}

/// Longest request head the metrics server reads.
const MAX_HEAD: usize = 8 * 1024;
/// A request head must arrive within this (a scraper sends its request at once: silent
/// connections must not keep scrapes out for long).
const HEAD_TIMEOUT: Duration = Duration::from_secs(2);
/// A response must be taken within this.
const WRITE_TIMEOUT: Duration = Duration::from_secs(30);
/// Pages made at once; a whole request waits up to [`HEAD_TIMEOUT`] for a place.
const MAX_SCRAPES: usize = 64;
/// Whole requests waiting for a place at once (past it: closed, counted busy).
const MAX_WAITING: usize = 256;
/// Answers being written at once, each within [`WRITE_TIMEOUT`] (past it: closed, busy).
const MAX_WRITING: usize = 256;
/// Connections reading their request head at once: past it the oldest is closed. Every
/// connection is accepted at once and a scraper's head comes with it, so connections that
/// send nothing can hold no scrape out (64 places taken before the accept, held 2 s each
/// by half-sent requests from 250 addresses, made every scrape wait 5 s).
const MAX_PENDING: usize = 512;

/// Connections one host (an IPv4 address, an IPv6 /64) may hold on the metrics port at
/// once: past it, closed at once (3,000 half-sent requests from one host held every slot,
/// and scrapes timed out).
const PER_SOURCE: u8 = 4;

/// The metrics port's own counters.
#[derive(Default)]
struct PortStats {
    refused: std::sync::atomic::AtomicU64,
    not_allowed: std::sync::atomic::AtomicU64,
    evicted: std::sync::atomic::AtomicU64,
    too_long: std::sync::atomic::AtomicU64,
    timeout: std::sync::atomic::AtomicU64,
    busy: std::sync::atomic::AtomicU64,
}

impl Source for PortStats {
    fn collect(&self, out: &mut Samples) {
        let l = |a: &std::sync::atomic::AtomicU64| a.load(std::sync::atomic::Ordering::Relaxed);
        out.counter(
            "metrics.refused_per_source",
            "palisade_metrics_connections_refused_total",
            "",
            "Connections to the metrics port closed at once: their host held 4 already.",
            l(&self.refused),
        );
        out.counter(
            "metrics.not_allowed",
            "palisade_metrics_connections_not_allowed_total",
            "",
            "Connections to the metrics port closed at once: their address is not in [metrics] allow.",
            l(&self.not_allowed),
        );
        out.counter(
            "metrics.evicted",
            "palisade_metrics_connections_evicted_total",
            "",
            "Connections to the metrics port closed before their request head was whole: the oldest of 512 still reading.",
            l(&self.evicted),
        );
        for (why, n, help) in [
            (
                "too_long",
                &self.too_long,
                "Requests to the metrics port closed unanswered: a head over 8 KiB.",
            ),
            (
                "timeout",
                &self.timeout,
                "Requests to the metrics port closed unanswered: no whole head within 2 s.",
            ),
            (
                "busy",
                &self.busy,
                "Requests to the metrics port closed unanswered: 64 pages made at once for 2 s, 256 whole requests waiting, or 256 answers being written.",
            ),
        ] {
            out.counter(
                format!("metrics.heads_refused.{why}"),
                "palisade_metrics_heads_refused_total",
                format!("why=\"{why}\""),
                help,
                l(n),
            );
        }
    }
}

/// Gives back its host's place when a scrape's connection ends.
struct Held {
    ip: std::net::IpAddr,
    map: Arc<Mutex<std::collections::HashMap<std::net::IpAddr, u8>>>,
}

impl Drop for Held {
    fn drop(&mut self) {
        let mut m = lock(&self.map);
        if let Some(n) = m.get_mut(&self.ip) {
            *n -= 1;
            if *n == 0 {
                m.remove(&self.ip);
            }
        }
    }
}

/// Connections still reading their head, by age (the lowest id is the oldest).
type Pending = Arc<Mutex<std::collections::BTreeMap<u64, tokio::task::AbortHandle>>>;

/// Takes a connection out of [`Pending`] when its head is whole or it ends.
struct Reading {
    id: u64,
    pending: Pending,
}

impl Drop for Reading {
    fn drop(&mut self) {
        lock(&self.pending).remove(&self.id);
    }
}

/// The host an address is counted as: an IPv4 address, an IPv6 /64 (one host holds a /64).
fn host_of(ip: std::net::IpAddr) -> std::net::IpAddr {
    match ip {
        std::net::IpAddr::V6(v6) => {
            std::net::IpAddr::V6((u128::from(v6) & !((1u128 << 64) - 1)).into())
        }
        v4 => v4,
    }
}

/// Serves `GET /metrics` from `registry` on `l` until the task is dropped, to the addresses
/// of `allow` (empty: any): one request per connection, heads bounded in size and time, a
/// few connections per host, the oldest half-sent head closed when too many are open, a few
/// scrapes answered at once, and a short pause after a failed accept (out of descriptors)
/// instead of a spin.
pub async fn serve(l: tokio::net::TcpListener, registry: Arc<Registry>, allow: Vec<ipnet::IpNet>) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let slots = Arc::new(tokio::sync::Semaphore::new(MAX_SCRAPES));
    let waiting = Arc::new(tokio::sync::Semaphore::new(MAX_WAITING));
    let writing = Arc::new(tokio::sync::Semaphore::new(MAX_WRITING));
    let stats = Arc::new(PortStats::default());
    registry.register("metrics_port", stats.clone());
    // Each host's connections (at most MAX_PENDING + MAX_WAITING + MAX_SCRAPES + MAX_WRITING).
    let held: Arc<Mutex<std::collections::HashMap<std::net::IpAddr, u8>>> = Default::default();
    let pending: Pending = Default::default();
    let mut next_id = 0u64;
    loop {
        let (mut stream, peer) = match l.accept().await {
            Ok(a) => a,
            Err(e) => {
                tracing::debug!(error = %e, "metrics accept failed");
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        let ip = peer.ip().to_canonical();
        if !allow.is_empty() && !allow.iter().any(|n| n.contains(&ip)) {
            stats
                .not_allowed
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            continue;
        }
        let host = host_of(ip);
        {
            let mut m = lock(&held);
            let n = m.entry(host).or_insert(0);
            if *n >= PER_SOURCE {
                drop(m);
                stats
                    .refused
                    .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                continue;
            }
            *n += 1;
        }
        let held_place = Held {
            ip: host,
            map: Arc::clone(&held),
        };
        let id = next_id;
        next_id += 1;
        let registry = Arc::clone(&registry);
        let stats_task = Arc::clone(&stats);
        let slots = Arc::clone(&slots);
        let (waiting, writing) = (Arc::clone(&waiting), Arc::clone(&writing));
        let reading = Reading {
            id,
            pending: Arc::clone(&pending),
        };
        // Held while the task is spawned and listed: it cannot take itself out before it is in.
        let mut p = lock(&pending);
        if p.len() >= MAX_PENDING
            && let Some((_, oldest)) = p.pop_first()
        {
            oldest.abort();
            stats
                .evicted
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        }
        let task = tokio::spawn(async move {
            let stats = stats_task;
            let _held = held_place;
            let mut buf = Vec::with_capacity(1024);
            let read = async {
                let mut tmp = [0u8; 1024];
                loop {
                    let n = stream.read(&mut tmp).await.ok()?;
                    if n == 0 {
                        return None;
                    }
                    buf.extend_from_slice(&tmp[..n]);
                    if buf.windows(4).any(|w| w == b"\r\n\r\n")
                        || buf.windows(2).any(|w| w == b"\n\n")
                    {
                        return Some(());
                    }
                    if buf.len() > MAX_HEAD {
                        stats
                            .too_long
                            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                        return None;
                    }
                }
            };
            match tokio::time::timeout(HEAD_TIMEOUT, read).await {
                Ok(Some(())) => {}
                Ok(None) => return,
                Err(_) => {
                    stats
                        .timeout
                        .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    return;
                }
            }
            // Whole: no longer the oldest to close. Every connection past here is bounded:
            // so many waiting for a place, 64 being answered, so many being written.
            drop(reading);
            let busy = || {
                stats
                    .busy
                    .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            };
            let Ok(waits) = waiting.try_acquire_owned() else {
                return busy();
            };
            let Ok(Ok(permit)) = tokio::time::timeout(HEAD_TIMEOUT, slots.acquire_owned()).await
            else {
                return busy();
            };
            drop(waits);
            let line = buf.split(|&b| b == b'\n').next().unwrap_or(&[]);
            let mut parts = line.split(|&b| b == b' ');
            let method = parts.next().unwrap_or(&[]);
            let target = parts.next().unwrap_or(&[]);
            let path = target.split(|&b| b == b'?').next().unwrap_or(&[]);
            let resp = if method != b"GET" && method != b"HEAD" {
                response(
                    "405 Method Not Allowed",
                    "text/plain",
                    "GET /metrics\n".into(),
                )
            } else if path == b"/metrics" {
                let body = registry.render_prometheus();
                if method == b"HEAD" {
                    let mut r = response("200 OK", "text/plain; version=0.0.4", body);
                    let cut = r
                        .windows(4)
                        .position(|w| w == b"\r\n\r\n")
                        .map_or(r.len(), |p| p + 4);
                    r.truncate(cut);
                    r
                } else {
                    response("200 OK", "text/plain; version=0.0.4", body)
                }
            } else {
                response("404 Not Found", "text/plain", "see /metrics\n".into())
            };
            // Made: the place goes to the next (a client that does not read holds a writer,
            // never a place).
            drop(permit);
            let Ok(_writer) = writing.try_acquire_owned() else {
                return busy();
            };
            let _ = tokio::time::timeout(WRITE_TIMEOUT, async {
                let _ = stream.write_all(&resp).await;
                let _ = stream.shutdown().await;
            })
            .await;
        });
        p.insert(id, task.abort_handle());
        drop(p);
    }
}

/// A warning when `/metrics` at `listen` answers whoever reaches it: not on a loopback
/// address and no `[metrics] allow` (it names zones, tenants and what is blocked).
pub fn exposure_warning(listen: std::net::SocketAddr, allow: &[ipnet::IpNet]) -> Option<String> {
    (allow.is_empty() && !listen.ip().is_loopback()).then(|| {
        format!(
            "metrics.listen {listen} answers any address that reaches it (zones, tenants and blocks by name): list its scrapers in [metrics] allow"
        )
    })
}

fn response(status: &str, ctype: &str, body: String) -> Vec<u8> {
    let mut out = format!(
        "HTTP/1.1 {status}\r\ncontent-type: {ctype}\r\ncontent-length: {}\r\nconnection: close\r\n\r\n",
        body.len()
    )
    .into_bytes();
    out.extend_from_slice(body.as_bytes());
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_family_header_and_both_renderings() {
        let r = Registry::new();
        r.register(
            "a",
            Arc::new(|s: &mut Samples| {
                s.counter("x.one", "t_x_total", "k=\"1\"", "X things.", 3);
                s.gauge("y", "t_y", "", "Y now.", 7);
                s.counter("", "t_x_total", "k=\"2\"", "X things.", 4);
                s.counter("ctl.only", "", "", "", 9);
            }),
        );
        let p = r.render_prometheus();
        assert_eq!(p.matches("# TYPE t_x_total counter").count(), 1);
        assert!(
            p.contains("t_x_total{k=\"1\"} 3\nt_x_total{k=\"2\"} 4\n"),
            "{p}"
        );
        assert!(p.contains("# TYPE t_y gauge\nt_y 7\n"), "{p}");
        assert!(!p.contains("ctl.only"));
        let c = r.render_ctl();
        assert_eq!(c, "x.one\t3\ny\t7\nctl.only\t9\n");
        // Registering under the same name replaces.
        r.register(
            "a",
            Arc::new(|s: &mut Samples| s.gauge("z", "t_z", "", "Z.", 1)),
        );
        assert_eq!(r.render_ctl(), "z\t1\n");
    }

    #[test]
    fn label_values_are_escaped() {
        assert_eq!(label_value("a\"b\\c\nd"), "a\\\"b\\\\c\\nd");
    }

    #[tokio::test(flavor = "current_thread")]
    async fn the_server_answers_metrics_and_refuses_the_rest() {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let r = Registry::new();
        r.register(
            "a",
            Arc::new(|s: &mut Samples| s.counter("c", "t_c_total", "", "C.", 1)),
        );
        let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = l.local_addr().unwrap();
        tokio::spawn(serve(l, r, Vec::new()));
        for (req, want) in [
            ("GET /metrics HTTP/1.1\r\nhost: x\r\n\r\n", "t_c_total 1"),
            ("GET /other HTTP/1.1\r\n\r\n", "404"),
            ("POST /metrics HTTP/1.1\r\n\r\n", "405"),
        ] {
            let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
            s.write_all(req.as_bytes()).await.unwrap();
            let mut out = String::new();
            s.read_to_string(&mut out).await.unwrap();
            assert!(out.contains(want), "{req:?}: {out}");
        }
    }

    /// One address holding connections that never send a request keeps at most 4 places:
    /// the others' scrapes are served at once (3,000 held every place, scrapes timed out).
    #[tokio::test(flavor = "current_thread")]
    async fn one_address_holds_at_most_four_places_on_the_metrics_port() {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let r = Registry::new();
        let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = l.local_addr().unwrap();
        tokio::spawn(serve(l, r.clone(), Vec::new()));
        let from = |ip: [u8; 4]| {
            let s = tokio::net::TcpSocket::new_v4().unwrap();
            s.bind((std::net::Ipv4Addr::from(ip), 0).into()).unwrap();
            s
        };
        let mut held = Vec::new();
        for _ in 0..80 {
            held.push(from([127, 0, 0, 2]).connect(addr).await.unwrap());
        }
        let mut s = from([127, 0, 0, 3]).connect(addr).await.unwrap();
        s.write_all(b"GET /metrics HTTP/1.1\r\n\r\n").await.unwrap();
        let mut out = String::new();
        s.read_to_string(&mut out).await.unwrap();
        assert!(
            out.contains("palisade_metrics_connections_refused_total 76"),
            "{out}"
        );
        drop(held);
    }
}
