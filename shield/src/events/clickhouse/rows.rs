//! Rows normalised at the source: every value checked, fixed or refused before it is buffered, then encoded once as a JSONEachRow line.
//!
//! Times become unix seconds (plus unix milliseconds), durations microseconds and never
//! negative, addresses one form (16 bytes of IPv6, IPv4 as `::ffff:a.b.c.d`, prefix lengths
//! in IPv6 terms), strings are cut to a bound at a character boundary. A row that cannot be
//! made valid (a time outside what `DateTime` holds, a duration that is not a number, a
//! status that is not an HTTP status) is counted by reason and never encoded.

use super::super::Event;
use ipnet::IpNet;
use std::net::{IpAddr, Ipv6Addr};

/// Longest value of short string columns (service, node, site, method, proto, upstream, action), in bytes.
pub const MAX_SHORT: usize = 256;
/// Longest `url` kept, in bytes.
pub const MAX_URL: usize = 2048;
/// Longest `user_agent` and `referer` kept, in bytes.
pub const MAX_HEADER: usize = 512;

/// Earliest time accepted: 2000-01-01T00:00:00Z, unix ms.
pub const MIN_TS_MS: u64 = 946_684_800_000;
/// Latest time a `DateTime` column holds (2106-02-07), unix ms.
pub const MAX_TS_MS: u64 = u32::MAX as u64 * 1000;

/// Why a row was refused at the source (counted, never sent).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Invalid {
    /// The time is before 2000 or after what `DateTime` holds.
    Time,
    /// The duration is NaN or infinite.
    Duration,
    /// The status is not in 100..=599.
    Status,
}

impl Invalid {
    /// Every reason, in counter order.
    pub const ALL: [Invalid; 3] = [Invalid::Time, Invalid::Duration, Invalid::Status];

    /// The reason's name in counters.
    pub fn name(self) -> &'static str {
        match self {
            Invalid::Time => "time",
            Invalid::Duration => "duration",
            Invalid::Status => "status",
        }
    }
}

/// What normalisation changed in rows it kept.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fix {
    /// A string was cut to its bound.
    Truncated,
    /// A negative duration became 0.
    NegativeDuration,
    /// A prefix had host bits set; they were cleared.
    Masked,
    /// A lower bound above its estimate was lowered to it.
    Bound,
}

impl Fix {
    /// Every kind, in counter order.
    pub const ALL: [Fix; 4] = [
        Fix::Truncated,
        Fix::NegativeDuration,
        Fix::Masked,
        Fix::Bound,
    ];

    /// The kind's name in counters.
    pub fn name(self) -> &'static str {
        match self {
            Fix::Truncated => "truncated",
            Fix::NegativeDuration => "negative_duration",
            Fix::Masked => "masked_prefix",
            Fix::Bound => "lower_bound",
        }
    }
}

/// One passed HTTP request as the access table takes it (the HTTP front's sampled access record, borrowed).
#[derive(Clone, Debug)]
pub struct AccessRow<'a> {
    /// Arrival time, unix milliseconds.
    pub ts_ms: u64,
    /// Node id ('' when unset).
    pub node: &'a str,
    /// Site name.
    pub site: &'a str,
    /// Tenant, when the site has one (0 otherwise).
    pub tenant: Option<u32>,
    /// Client address.
    pub client: IpAddr,
    /// Method.
    pub method: &'a str,
    /// Full URL.
    pub url: &'a str,
    /// Protocol (`HTTP/1.1`, `HTTP/2`).
    pub proto: &'a str,
    /// Status sent.
    pub status: u16,
    /// Milliseconds from arrival to the response head.
    pub duration_ms: f64,
    /// Upstream name.
    pub upstream: &'a str,
    /// `pass` or `allow`.
    pub action: &'a str,
    /// User-Agent, when sent.
    pub user_agent: Option<&'a str>,
    /// Referer, when sent.
    pub referer: Option<&'a str>,
    /// Request Content-Length, when given.
    pub request_bytes: Option<u64>,
    /// Response Content-Length, when given.
    pub response_bytes: Option<u64>,
}

/// Encoded rows (one JSON object per line) with their boundaries and what validation counted.
///
/// Every row carries an identity that a retry does not change: `wid`, the writer (node,
/// service and a random id drawn when the writer started), and `rid`, the row's number in
/// that writer. The tables are `ReplacingMergeTree`s ordered by it, so a batch inserted
/// twice (a retry after a timeout whose first attempt landed) is stored once; queries with
/// `FINAL` are exact before the merge.
#[derive(Clone, Debug, Default)]
pub struct Rows {
    pub(super) bytes: Vec<u8>,
    pub(super) ends: Vec<usize>,
    pub(super) invalid: [u64; Invalid::ALL.len()],
    pub(super) fixed: [u64; Fix::ALL.len()],
    wid: String,
    next_rid: u64,
}

/// A writer identity: `node/service/` and 16 random hex digits.
pub fn writer_id(node: &str, service: &str) -> String {
    let r: u64 = rand_u64();
    format!(
        "{}/{}/{r:016x}",
        bounded(node, 64).0,
        bounded(service, 64).0
    )
}

fn rand_u64() -> u64 {
    use std::hash::{BuildHasher, Hasher};
    // RandomState is seeded from the OS per process; mix in the time and a counter.
    static N: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u64(crate::clock::unix_ms());
    h.write_u64(N.fetch_add(1, std::sync::atomic::Ordering::Relaxed));
    h.finish()
}

impl Rows {
    /// No rows, written under a fresh writer identity.
    pub fn new() -> Self {
        Self::for_writer(writer_id("", ""))
    }

    /// No rows, written under `wid` (see [`writer_id`]).
    pub fn for_writer(wid: String) -> Self {
        Rows {
            wid,
            ..Self::default()
        }
    }

    /// This writer's identity.
    pub fn writer(&self) -> &str {
        &self.wid
    }

    /// Forgets the rows and the counts (keeps the memory and the row numbering).
    pub fn clear(&mut self) {
        self.bytes.clear();
        self.ends.clear();
        self.invalid = Default::default();
        self.fixed = Default::default();
    }

    /// Rows held.
    pub fn len(&self) -> usize {
        self.ends.len()
    }

    /// True when no row is held.
    pub fn is_empty(&self) -> bool {
        self.ends.is_empty()
    }

    /// The `i`-th row's line (with its newline).
    pub fn row(&self, i: usize) -> &[u8] {
        let start = if i == 0 { 0 } else { self.ends[i - 1] };
        &self.bytes[start..self.ends[i]]
    }

    /// Rows refused so far, by reason.
    pub fn invalid(&self, r: Invalid) -> u64 {
        self.invalid[r as usize]
    }

    /// Values fixed so far, by kind.
    pub fn fixed(&self, f: Fix) -> u64 {
        self.fixed[f as usize]
    }

    /// Encodes the rows of every event (see [`Rows::push_event`]).
    pub fn push_events(&mut self, service: &str, events: &[Event]) {
        for e in events {
            self.push_event(service, e);
        }
    }

    /// Encodes one flushed aggregate as rows of the events table: one per listed source
    /// prefix, and one `is_other` row for the rest, so that an event's rows sum to its total.
    pub fn push_event(&mut self, service: &str, e: &Event) {
        let rows = e.top.len() as u64 + u64::from(e.other > 0 || e.top.is_empty());
        if !(MIN_TS_MS..MAX_TS_MS).contains(&e.ts_ms) {
            self.invalid[Invalid::Time as usize] += rows;
            return;
        }
        let node = e.node.as_deref().unwrap_or("");
        for t in &e.top {
            let (src, len, masked) = prefix16(&t.prefix);
            if masked {
                self.fix(Fix::Masked);
            }
            let min = if t.min_count > t.count {
                self.fix(Fix::Bound);
                t.count
            } else {
                t.min_count
            };
            self.event_row(service, node, e, t.reason, &src, len, false, t.count, min);
        }
        if e.other > 0 || e.top.is_empty() {
            self.event_row(service, node, e, 0, &[0; 16], 0, true, e.other, e.other);
        }
    }

    #[allow(clippy::too_many_arguments)]
    fn event_row(
        &mut self,
        service: &str,
        node: &str,
        e: &Event,
        reason: u16,
        src: &[u8; 16],
        src_len: u8,
        other: bool,
        hits: u64,
        min_hits: u64,
    ) {
        let mut w = Line::start(&mut self.bytes);
        w.u64("ts", e.ts_ms / 1000);
        w.u64("ts_ms", e.ts_ms);
        w.u64("interval_ms", e.interval_ms);
        let mut cut = w.str("service", service, MAX_SHORT);
        cut |= w.str("node", node, MAX_SHORT);
        w.u64("tenant", u64::from(e.tenant));
        w.str("action", action_name(e.action), MAX_SHORT);
        w.str("evidence", e.evidence.name(), MAX_SHORT);
        w.u64("reason", u64::from(reason));
        w.fixed("src", src);
        w.u64("src_len", u64::from(src_len));
        w.u64("is_other", u64::from(other));
        w.u64("hits", hits);
        w.u64("min_hits", min_hits);
        w.str("wid", &self.wid, MAX_SHORT);
        w.u64("rid", self.next_rid);
        w.end();
        self.next_rid += 1;
        if cut {
            self.fix(Fix::Truncated);
        }
        self.ends.push(self.bytes.len());
    }

    /// Encodes one access record as a row of the access table, or counts why it cannot be.
    pub fn push_access(&mut self, service: &str, r: &AccessRow<'_>) -> Result<(), Invalid> {
        let bad = if !(MIN_TS_MS..MAX_TS_MS).contains(&r.ts_ms) {
            Some(Invalid::Time)
        } else if !r.duration_ms.is_finite() {
            Some(Invalid::Duration)
        } else if !(100..=599).contains(&r.status) {
            Some(Invalid::Status)
        } else {
            None
        };
        if let Some(b) = bad {
            self.invalid[b as usize] += 1;
            return Err(b);
        }
        let duration_us = if r.duration_ms < 0.0 {
            self.fix(Fix::NegativeDuration);
            0
        } else {
            // Saturating float-to-int conversion; finite was checked above.
            (r.duration_ms * 1000.0).round() as u64
        };
        let start = self.bytes.len();
        let mut w = Line::start(&mut self.bytes);
        w.u64("ts", r.ts_ms / 1000);
        w.u64("ts_ms", r.ts_ms);
        let mut cut = w.str("service", service, MAX_SHORT);
        cut |= w.str("node", r.node, MAX_SHORT);
        cut |= w.str("site", r.site, MAX_SHORT);
        w.u64("tenant", u64::from(r.tenant.unwrap_or(0)));
        w.fixed("client", &addr16(r.client));
        cut |= w.str("method", r.method, MAX_SHORT);
        cut |= w.str("url", r.url, MAX_URL);
        cut |= w.str("proto", r.proto, MAX_SHORT);
        w.u64("status", u64::from(r.status));
        w.u64("duration_us", duration_us);
        cut |= w.str("upstream", r.upstream, MAX_SHORT);
        cut |= w.str("action", r.action, MAX_SHORT);
        cut |= w.str("user_agent", r.user_agent.unwrap_or(""), MAX_HEADER);
        cut |= w.str("referer", r.referer.unwrap_or(""), MAX_HEADER);
        w.opt_u64("request_bytes", r.request_bytes);
        w.opt_u64("response_bytes", r.response_bytes);
        w.str("wid", &self.wid, MAX_SHORT);
        w.u64("rid", self.next_rid);
        w.end();
        self.next_rid += 1;
        debug_assert!(self.bytes.len() > start);
        if cut {
            self.fix(Fix::Truncated);
        }
        self.ends.push(self.bytes.len());
        Ok(())
    }

    /// Test hook: appends `line` as a row without any validation (a newline is added when missing).
    #[doc(hidden)]
    pub fn push_unvalidated(&mut self, line: &[u8]) {
        self.bytes.extend_from_slice(line);
        if line.last() != Some(&b'\n') {
            self.bytes.push(b'\n');
        }
        self.ends.push(self.bytes.len());
    }

    fn fix(&mut self, f: Fix) {
        self.fixed[f as usize] += 1;
    }
}

/// The action's name as events carry it.
fn action_name(a: super::super::Action) -> &'static str {
    use super::super::Action as A;
    match a {
        A::Blocked => "blocked",
        A::RateLimited => "rate_limited",
        A::Challenged => "challenged",
        A::Denied => "denied",
        A::Escalated => "escalated",
        A::Suspected => "suspected",
    }
}

/// An address as 16 bytes of IPv6 (IPv4 as `::ffff:a.b.c.d`).
pub fn addr16(a: IpAddr) -> [u8; 16] {
    match a.to_canonical() {
        IpAddr::V4(v4) => v4.to_ipv6_mapped().octets(),
        IpAddr::V6(v6) => v6.octets(),
    }
}

/// A prefix as its network address in 16 bytes and its length in IPv6 terms (IPv4 /24 is
/// 120); true when host bits had to be cleared.
pub fn prefix16(p: &IpNet) -> ([u8; 16], u8, bool) {
    let t = p.trunc();
    let masked = t.addr() != p.addr();
    match t {
        IpNet::V4(n) => (
            n.network().to_ipv6_mapped().octets(),
            96 + n.prefix_len(),
            masked,
        ),
        IpNet::V6(n) => {
            let a: Ipv6Addr = n.network();
            (a.octets(), n.prefix_len(), masked)
        }
    }
}

/// Writes one JSON object, keys in the order given.
struct Line<'a> {
    b: &'a mut Vec<u8>,
    first: bool,
}

impl<'a> Line<'a> {
    fn start(b: &'a mut Vec<u8>) -> Self {
        Line { b, first: true }
    }

    fn key(&mut self, k: &str) {
        self.b.push(if self.first { b'{' } else { b',' });
        self.first = false;
        self.b.push(b'"');
        self.b.extend_from_slice(k.as_bytes());
        self.b.extend_from_slice(b"\":");
    }

    fn u64(&mut self, k: &str, v: u64) {
        self.key(k);
        let mut buf = [0u8; 20];
        let mut i = buf.len();
        let mut v = v;
        loop {
            i -= 1;
            buf[i] = b'0' + (v % 10) as u8;
            v /= 10;
            if v == 0 {
                break;
            }
        }
        self.b.extend_from_slice(&buf[i..]);
    }

    fn opt_u64(&mut self, k: &str, v: Option<u64>) {
        match v {
            Some(v) => self.u64(k, v),
            None => {
                self.key(k);
                self.b.extend_from_slice(b"null");
            }
        }
    }

    /// A string cut to `max` bytes at a character boundary; true when it was cut.
    fn str(&mut self, k: &str, s: &str, max: usize) -> bool {
        self.key(k);
        let (s, cut) = bounded(s, max);
        self.b.push(b'"');
        escape(self.b, s.as_bytes());
        self.b.push(b'"');
        cut
    }

    /// 16 raw bytes (ClickHouse reads JSON strings as bytes; `FixedString(16)`).
    fn fixed(&mut self, k: &str, v: &[u8; 16]) {
        self.key(k);
        self.b.push(b'"');
        escape(self.b, v);
        self.b.push(b'"');
    }

    fn end(self) {
        self.b.extend_from_slice(b"}\n");
    }
}

/// `s` cut to at most `max` bytes at a character boundary, and whether it was cut.
pub fn bounded(s: &str, max: usize) -> (&str, bool) {
    if s.len() <= max {
        return (s, false);
    }
    let mut end = max;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    (&s[..end], true)
}

/// JSON string escaping of raw bytes: quote, backslash and control bytes escaped, the rest as is.
fn escape(out: &mut Vec<u8>, s: &[u8]) {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    let mut from = 0;
    for (i, &c) in s.iter().enumerate() {
        if c >= 0x20 && c != b'"' && c != b'\\' {
            continue;
        }
        out.extend_from_slice(&s[from..i]);
        match c {
            b'"' => out.extend_from_slice(b"\\\""),
            b'\\' => out.extend_from_slice(b"\\\\"),
            b'\n' => out.extend_from_slice(b"\\n"),
            b'\t' => out.extend_from_slice(b"\\t"),
            b'\r' => out.extend_from_slice(b"\\r"),
            _ => out.extend_from_slice(&[
                b'\\',
                b'u',
                b'0',
                b'0',
                HEX[(c >> 4) as usize],
                HEX[(c & 15) as usize],
            ]),
        }
        from = i + 1;
    }
    out.extend_from_slice(&s[from..]);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::events::{Action, TopSource};

    fn event(top: Vec<TopSource>, other: u64) -> Event {
        Event {
            kind: "shield.aggregate".into(),
            timestamp: String::new(),
            ts_ms: 1_735_689_610_123,
            interval_ms: 10_000,
            node: Some("edge-1".into()),
            tenant: 7,
            action: Action::RateLimited,
            evidence: crate::block::Evidence::Udp,
            total: top.iter().map(|t| t.count).sum::<u64>() + other,
            top,
            other,
            tracked: 0,
        }
    }

    /// A row as JSON (raw address bytes read lossily).
    fn json(row: &[u8]) -> serde_json::Value {
        serde_json::from_str(&String::from_utf8_lossy(row)).unwrap()
    }

    fn access<'a>() -> AccessRow<'a> {
        AccessRow {
            ts_ms: 1_735_689_610_123,
            node: "n",
            site: "example.com",
            tenant: Some(7),
            client: "192.0.2.1".parse().unwrap(),
            method: "GET",
            url: "http://example.com/a?b=\"1\"",
            proto: "HTTP/1.1",
            status: 200,
            duration_ms: 1.2345,
            upstream: "app",
            action: "pass",
            user_agent: Some("curl/8\u{1}"),
            referer: None,
            request_bytes: None,
            response_bytes: Some(2),
        }
    }

    #[test]
    fn event_rows_sum_to_the_total() {
        let e = event(
            vec![TopSource {
                prefix: "192.0.2.0/24".parse().unwrap(),
                count: 90,
                min_count: 80,
                reason: 5,
            }],
            10,
        );
        let mut r = Rows::new();
        r.push_event("dnsd", &e);
        assert_eq!(r.len(), 2);
        let a = json(r.row(0));
        assert_eq!(a["ts"], 1_735_689_610);
        assert_eq!(a["ts_ms"], 1_735_689_610_123u64);
        assert_eq!(a["action"], "rate_limited");
        assert_eq!(a["src_len"], 120);
        assert_eq!(
            (a["hits"].as_u64(), a["min_hits"].as_u64()),
            (Some(90), Some(80))
        );
        let b = json(r.row(1));
        assert_eq!(
            (b["is_other"].as_u64(), b["hits"].as_u64()),
            (Some(1), Some(10))
        );
        // The address bytes: ::ffff:192.0.2.0, zeros as \u0000 and 0xff raw.
        let raw = r.row(0);
        let at = raw.windows(6).position(|w| w == b"\"src\":").unwrap() + 7;
        let mut want = Vec::new();
        escape(&mut want, &addr16("192.0.2.0".parse().unwrap()));
        assert_eq!(&raw[at..at + want.len()], &want[..]);
        assert_eq!(raw[at + want.len()], b'"');
    }

    #[test]
    fn bad_times_are_refused_and_bounds_fixed() {
        let mut e = event(
            vec![TopSource {
                prefix: "2001:db8::1/56".parse().unwrap(),
                count: 3,
                min_count: 9,
                reason: 1,
            }],
            0,
        );
        let mut r = Rows::new();
        r.push_event("dnsd", &e);
        assert_eq!(r.len(), 1);
        assert_eq!((r.fixed(Fix::Masked), r.fixed(Fix::Bound)), (1, 1));
        let v = json(r.row(0));
        assert_eq!(
            (v["src_len"].as_u64(), v["min_hits"].as_u64()),
            (Some(56), Some(3))
        );
        e.ts_ms = 5;
        r.push_event("dnsd", &e);
        assert_eq!((r.len(), r.invalid(Invalid::Time)), (1, 1));
    }

    #[test]
    fn access_rows_are_normalised() {
        let mut r = Rows::new();
        let mut a = access();
        r.push_access("http-front", &a).unwrap();
        let v = json(r.row(0));
        assert_eq!(v["duration_us"], 1235);
        assert_eq!(v["url"], "http://example.com/a?b=\"1\"");
        assert_eq!(v["user_agent"], "curl/8\u{1}");
        assert_eq!(v["referer"], "");
        assert!(v["request_bytes"].is_null());
        a.duration_ms = -3.0;
        let long = "é".repeat(MAX_URL);
        a.url = &long;
        r.push_access("http-front", &a).unwrap();
        let v = json(r.row(1));
        assert_eq!(v["duration_us"], 0);
        assert_eq!(v["url"].as_str().unwrap().len(), MAX_URL);
        assert_eq!(
            (r.fixed(Fix::NegativeDuration), r.fixed(Fix::Truncated)),
            (1, 1)
        );
        a.duration_ms = f64::NAN;
        assert_eq!(r.push_access("x", &a), Err(Invalid::Duration));
        a.duration_ms = 1.0;
        a.status = 0;
        assert_eq!(r.push_access("x", &a), Err(Invalid::Status));
        a.status = 200;
        a.ts_ms = u64::MAX;
        assert_eq!(r.push_access("x", &a), Err(Invalid::Time));
        assert_eq!(r.len(), 2);
    }

    #[test]
    fn escaping_covers_quotes_backslashes_and_controls() {
        let mut out = Vec::new();
        escape(&mut out, b"a\"b\\c\n\x00\x1f\xff");
        assert_eq!(out, b"a\\\"b\\\\c\\n\\u0000\\u001f\xff");
        assert_eq!(bounded("aé", 2), ("a", true));
    }
}
