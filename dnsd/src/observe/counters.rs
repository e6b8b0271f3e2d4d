//! Counters: one block per UDP worker (written by that worker only) and one for TCP,
//! summed when `ctl stats` or /metrics asks.

use std::sync::atomic::{AtomicU64, Ordering};

/// Query types counted by name; everything else is "other".
pub const QTYPES: &[(u16, &str)] = &[
    (1, "A"),
    (2, "NS"),
    (5, "CNAME"),
    (6, "SOA"),
    (12, "PTR"),
    (15, "MX"),
    (16, "TXT"),
    (28, "AAAA"),
    (33, "SRV"),
    (43, "DS"),
    (48, "DNSKEY"),
    (64, "SVCB"),
    (65, "HTTPS"),
    (251, "IXFR"),
    (252, "AXFR"),
    (255, "ANY"),
];

/// Response codes counted by name (index = rcode); 24 and above are "other".
pub const RCODES: &[&str] = &[
    "NOERROR",
    "FORMERR",
    "SERVFAIL",
    "NXDOMAIN",
    "NOTIMP",
    "REFUSED",
    "YXDOMAIN",
    "YXRRSET",
    "NXRRSET",
    "NOTAUTH",
    "NOTZONE",
    "DSOTYPENI",
    "RCODE12",
    "RCODE13",
    "RCODE14",
    "RCODE15",
    "BADVERS", // also BADSIG (TSIG error 16)
    "BADKEY",
    "BADTIME",
    "BADMODE",
    "BADNAME",
    "BADALG",
    "BADTRUNC",
    "BADCOOKIE",
];

/// Response kinds counted, by [`crate::query::internet::Kind`] order.
pub const KINDS: &[&str] = &["answer", "nodata", "nxdomain", "referral", "refused"];

/// Why a datagram or message got no answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(usize)]
pub enum DropCause {
    /// Too short to be a query, or a response.
    Malformed = 0,
    /// The source is in the block map.
    Blocked = 1,
    /// Response rate limiting dropped it.
    Rrl = 2,
    /// The random-subdomain defence dropped it.
    RandomSubdomain = 3,
    /// A TCP connection to an address that is not served.
    TcpWrongAddress = 4,
    /// A TCP connection over the total or per-source limit.
    TcpLimit = 5,
    /// A TCP connection closed for idleness.
    TcpTimeout = 6,
    /// A TCP connection closed after `tcp_max_queries` queries.
    TcpQueryLimit = 7,
    /// Dropped by a shield rule (deny, or over a rule's rate).
    Rules = 8,
    /// A truncated reply past the suspects' budget (`[defence.suspects] tc_per_second`).
    Suspect = 9,
    /// A PROXY header from an address not in `[server] proxy_allow`.
    ProxyUnlisted = 10,
    /// A malformed PROXY header from a listed proxy.
    ProxyMalformed = 11,
    /// A listed proxy's datagram or connection without a PROXY header (or one that did not
    /// arrive in time).
    ProxyMissing = 12,
    /// A UDP datagram from port 0 or a service port that answers any datagram (echo,
    /// daytime, qotd, chargen, time): a forged source that would make us feed it, or loop.
    ReflectorPort = 13,
}

impl DropCause {
    /// The cause of a PROXY header refused.
    pub fn proxy(e: shield::proxy_proto::ProxyError) -> DropCause {
        use shield::proxy_proto::ProxyError as E;
        match e {
            E::Unlisted => DropCause::ProxyUnlisted,
            E::Incomplete | E::Malformed => DropCause::ProxyMalformed,
            E::Missing | E::Timeout => DropCause::ProxyMissing,
        }
    }
}

/// Names of [`DropCause`] causes, by index.
pub const DROPS: &[&str] = &[
    "malformed",
    "blocked",
    "rrl",
    "random_subdomain",
    "tcp_wrong_address",
    "tcp_limit",
    "tcp_timeout",
    "tcp_query_limit",
    "rules",
    "suspect",
    "proxy_unlisted",
    "proxy_malformed",
    "proxy_missing",
    "reflector_port",
];

/// Compact denial (RFC 9824) counters, by index.
pub const COMPACT: &[&str] = &[
    "signed",
    "cached",
    "over_budget",
    "over_source",
    "over_zone",
];

/// What happened to one compact denial.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(usize)]
pub enum Compact {
    /// Signed now.
    Signed = 0,
    /// Taken from the worker's cache.
    Cached = 1,
    /// Over the worker's signing budget: answered TC=1 (over TCP, by the zone's chain).
    OverBudget = 2,
    /// Over the source's share: answered TC=1 (over TCP, by the zone's chain).
    OverSource = 3,
    /// Over the zone's three quarters of the worker's budget: answered TC=1 (over TCP, by the
    /// zone's chain).
    OverZone = 4,
}

/// Counters of one worker (or of TCP).
#[derive(Debug)]
pub struct WorkerStats {
    /// Queries by qtype: index into [`QTYPES`], the last slot is "other".
    pub qtype: [AtomicU64; QTYPES.len() + 1],
    /// Responses by rcode: index = rcode, the last slot is "other".
    pub rcode: [AtomicU64; RCODES.len() + 1],
    /// Messages without an answer, by [`DropCause`].
    pub drops: [AtomicU64; DROPS.len()],
    /// Responses with TC set.
    pub truncated: AtomicU64,
    /// Queries received.
    pub queries: AtomicU64,
    /// Answers by kind (index into [`KINDS`]).
    pub kinds: [AtomicU64; KINDS.len()],
    /// Compact denials by outcome (index into [`COMPACT`]).
    pub compact: [AtomicU64; COMPACT.len()],
    /// Responses whose names found the compression table full.
    pub compression_full: AtomicU64,
    /// Queries longer than the largest taken (over TCP: 16 KiB), answered FORMERR.
    pub oversized: AtomicU64,
}

impl Default for WorkerStats {
    fn default() -> Self {
        WorkerStats {
            qtype: std::array::from_fn(|_| AtomicU64::new(0)),
            rcode: std::array::from_fn(|_| AtomicU64::new(0)),
            drops: std::array::from_fn(|_| AtomicU64::new(0)),
            truncated: AtomicU64::new(0),
            queries: AtomicU64::new(0),
            kinds: std::array::from_fn(|_| AtomicU64::new(0)),
            compact: std::array::from_fn(|_| AtomicU64::new(0)),
            compression_full: AtomicU64::new(0),
            oversized: AtomicU64::new(0),
        }
    }
}

#[inline]
fn bump(c: &AtomicU64) {
    // Single writer per counter block (UDP) or low rate (TCP): a relaxed add is enough.
    c.fetch_add(1, Ordering::Relaxed);
}

impl WorkerStats {
    /// Counts a query of type `qtype`.
    #[inline]
    pub fn query(&self, qtype: u16) {
        bump(&self.queries);
        let i = QTYPES
            .iter()
            .position(|&(t, _)| t == qtype)
            .unwrap_or(QTYPES.len());
        bump(&self.qtype[i]);
    }

    /// Counts a response with `rcode` (full 12-bit value).
    #[inline]
    pub fn response(&self, rcode: u16, truncated: bool) {
        let i = (rcode as usize).min(RCODES.len());
        bump(&self.rcode[i]);
        if truncated {
            bump(&self.truncated);
        }
    }

    /// Counts an answer by kind: the index of its name in [`KINDS`] (`Kind as usize`).
    #[inline]
    pub fn kind(&self, k: usize) {
        if let Some(c) = self.kinds.get(k) {
            bump(c);
        }
    }

    /// Counts a compact denial's outcome.
    #[inline]
    pub fn compact(&self, c: Compact) {
        bump(&self.compact[c as usize]);
    }

    /// Counts a response whose names found the compression table full.
    #[inline]
    pub fn compression_full(&self) {
        bump(&self.compression_full);
    }

    /// Counts a query longer than the largest taken.
    #[inline]
    pub fn oversized(&self) {
        bump(&self.oversized);
    }

    /// Counts a dropped message.
    #[inline]
    pub fn dropped(&self, why: DropCause) {
        bump(&self.drops[why as usize]);
    }
}

/// A sum over several counter blocks.
#[derive(Debug, Default, Clone)]
pub struct Totals {
    /// Queries by qtype slot.
    pub qtype: Vec<u64>,
    /// Responses by rcode slot.
    pub rcode: Vec<u64>,
    /// Drops by cause.
    pub drops: Vec<u64>,
    /// TC responses.
    pub truncated: u64,
    /// Queries.
    pub queries: u64,
    /// Answers by kind.
    pub kinds: Vec<u64>,
    /// Compact denials by outcome.
    pub compact: Vec<u64>,
    /// Responses whose names found the compression table full.
    pub compression_full: u64,
    /// Queries longer than the largest taken.
    pub oversized: u64,
}

/// Sums counter blocks.
pub fn sum<'a>(blocks: impl Iterator<Item = &'a WorkerStats>) -> Totals {
    let mut t = Totals {
        qtype: vec![0; QTYPES.len() + 1],
        rcode: vec![0; RCODES.len() + 1],
        drops: vec![0; DROPS.len()],
        kinds: vec![0; KINDS.len()],
        compact: vec![0; COMPACT.len()],
        ..Default::default()
    };
    let l = |c: &AtomicU64| c.load(Ordering::Relaxed);
    for b in blocks {
        for (d, s) in t.qtype.iter_mut().zip(&b.qtype) {
            *d += l(s);
        }
        for (d, s) in t.rcode.iter_mut().zip(&b.rcode) {
            *d += l(s);
        }
        for (d, s) in t.drops.iter_mut().zip(&b.drops) {
            *d += l(s);
        }
        for (d, s) in t.kinds.iter_mut().zip(&b.kinds) {
            *d += l(s);
        }
        for (d, s) in t.compact.iter_mut().zip(&b.compact) {
            *d += l(s);
        }
        t.truncated += l(&b.truncated);
        t.compression_full += l(&b.compression_full);
        t.oversized += l(&b.oversized);
        t.queries += l(&b.queries);
    }
    t
}

#[cfg(test)]
mod tests {
    use super::RCODES;
    use crate::query::wire::rcode;

    #[test]
    fn rcode_names_are_indexed_by_value() {
        assert_eq!(RCODES.len(), 24);
        assert_eq!(RCODES[rcode::NOTAUTH as usize], "NOTAUTH");
        assert_eq!(RCODES[16], "BADVERS");
        assert_eq!(RCODES[17], "BADKEY");
        assert_eq!(RCODES[18], "BADTIME");
        assert_eq!(RCODES[rcode::BADCOOKIE as usize], "BADCOOKIE");
    }
}
