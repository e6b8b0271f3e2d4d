//! http-front's counters beyond the request path's own ([`crate::counters`]): open
//! connections, sites, the SYN filter and the upstream body stalls, as sources of shield's
//! registry. The daemon registers them with shield's parts (block map, aggregator, sinks,
//! ClickHouse, rules, XDP mirror: named `palisade_*`, as in dnsd), and shield's one `/metrics`
//! server renders them.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use shield::metrics::{Samples, Source};

use crate::conn_registry::Registry;
use crate::synfilter::FilterStats;

/// Open client connections.
impl Source for Registry {
    fn collect(&self, out: &mut Samples) {
        out.gauge(
            "open_connections",
            "http_front_open_connections",
            "",
            "Client connections open now.",
            self.open() as u64,
        );
        out.gauge(
            "upstream_connections",
            "http_front_upstream_connections",
            "",
            "HTTP/1.1 connections to origins open now (in use or idle in the pools).",
            crate::forward::upstream::open_connections() as u64,
        );
    }
}

/// The listeners' SYN filter.
impl Source for FilterStats {
    fn collect(&self, out: &mut Samples) {
        out.gauge(
            "syn_filter.entries",
            "http_front_syn_filter_entries",
            "",
            "Blocked IPv4 sources whose SYNs the listeners' socket filter drops.",
            self.entries.load(Ordering::Relaxed),
        );
        out.gauge(
            "syn_filter.overflow",
            "http_front_syn_filter_overflow",
            "",
            "Block entries beyond the SYN filter (checked at accept instead).",
            self.overflow.load(Ordering::Relaxed),
        );
        for (what, a) in [("ok", &self.installs), ("refused", &self.failures)] {
            out.counter(
                format!("syn_filter.installs.{what}"),
                "http_front_syn_filter_installs_total",
                format!("result=\"{what}\""),
                "SYN filter programs installed (per listener), and refused.",
                a.load(Ordering::Relaxed),
            );
        }
    }
}

/// Upstream response bodies ended by the stall bound.
pub struct Stalls;

impl Source for Stalls {
    fn collect(&self, out: &mut Samples) {
        out.counter(
            "upstream_body_stalls",
            "http_front_upstream_body_stalls_total",
            "",
            "Upstream response bodies ended: no byte within the upstream's response timeout.",
            crate::forward::h1::BODY_STALLS.load(Ordering::Relaxed),
        );
    }
}

/// The bytes the memory budgets of `[server]` hold now.
pub struct Buffers {
    /// Request bodies buffered (`body_buffer_total_bytes`).
    pub body: Arc<AtomicUsize>,
    /// Response buffers reserved (`response_buffer_total_bytes`).
    pub response: Arc<AtomicUsize>,
    /// Unfinished HTTP/1.1 heads past their free part (`header_buffer_total_bytes`).
    pub head: Arc<AtomicUsize>,
}

impl Source for Buffers {
    fn collect(&self, out: &mut Samples) {
        for (what, a) in [
            ("body", &self.body),
            ("response", &self.response),
            ("head", &self.head),
        ] {
            out.gauge(
                format!("buffered.{what}"),
                "http_front_buffered_bytes",
                format!("what=\"{what}\""),
                "Bytes held now under each [server] *_buffer_total_bytes budget.",
                a.load(Ordering::Relaxed) as u64,
            );
        }
    }
}
