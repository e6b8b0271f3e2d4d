//! dnsd's own counters as sources of shield's registry ([`shield::metrics`]): queries by
//! transport and qtype, responses by rcode and kind, drops by cause (summed over the UDP
//! workers and TCP), the UDP fleet (totals and the top addresses by kernel drops: never one
//! series per address). TCP connections ([`crate::daemon::tcp`]), zone loads, serials and
//! record counts ([`crate::zone::registry`]), the defences, transfers, the XDP guard and
//! shield's own parts are sources of their own, each beside what it counts; the daemon
//! registers them all, and one renderer writes both `ctl stats` and `/metrics`.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::Ordering;

use listener::udp::FleetCounters;
use shield::metrics::{Samples, Source};

use crate::observe::counters::{self, WorkerStats};

/// How many addresses the kernel-drop top list shows.
const TOP_N: usize = 10;

/// Query, response and drop counters of the UDP workers and TCP.
pub struct QueryStats {
    /// One block per UDP worker.
    pub udp: Vec<Arc<WorkerStats>>,
    /// TCP's block.
    pub tcp: Arc<WorkerStats>,
}

impl Source for QueryStats {
    fn collect(&self, out: &mut Samples) {
        let udp = counters::sum(self.udp.iter().map(|a| &**a));
        let tcp = counters::sum(std::iter::once(&*self.tcp));
        let help = "Queries received.";
        for (tr, t) in [("udp", &udp), ("tcp", &tcp)] {
            out.counter(format!("queries.{tr}"), "", "", help, t.queries);
        }
        let names = || counters::QTYPES.iter().map(|(_, n)| *n).chain(["other"]);
        for (tr, t) in [("udp", &udp), ("tcp", &tcp)] {
            for (i, name) in names().enumerate() {
                out.counter(
                    "",
                    "dnsd_queries_total",
                    format!("transport=\"{tr}\",qtype=\"{name}\""),
                    help,
                    t.qtype[i],
                );
            }
        }
        // `ctl stats` sums the transports and leaves out types never seen.
        for (i, name) in names().enumerate() {
            let n = udp.qtype[i] + tcp.qtype[i];
            if n > 0 {
                out.counter(format!("queries.qtype.{name}"), "", "", help, n);
            }
        }
        for (i, name) in counters::RCODES.iter().enumerate() {
            out.counter(
                format!("responses.rcode.{name}"),
                "dnsd_responses_total",
                format!("rcode=\"{name}\""),
                "Responses sent, by rcode.",
                udp.rcode[i] + tcp.rcode[i],
            );
        }
        out.counter(
            "responses.truncated",
            "dnsd_truncated_total",
            "",
            "Responses with TC set.",
            udp.truncated + tcp.truncated,
        );
        out.counter(
            "responses.compression_table_full",
            "dnsd_compression_table_full_total",
            "",
            "Responses with more distinct names than the compression table holds (later names written whole).",
            udp.compression_full + tcp.compression_full,
        );
        out.counter(
            "tcp.oversized",
            "dnsd_tcp_oversized_total",
            "",
            "TCP queries longer than the largest taken (16 KiB): their start read, the rest skipped, FORMERR.",
            tcp.oversized,
        );
        for (i, name) in counters::KINDS.iter().enumerate() {
            out.counter(
                format!("responses.kind.{name}"),
                "dnsd_answers_total",
                format!("kind=\"{name}\""),
                "Responses by kind of answer.",
                udp.kinds[i] + tcp.kinds[i],
            );
        }
        for (i, name) in counters::COMPACT.iter().enumerate() {
            out.counter(
                format!("compact_denial.{name}"),
                "dnsd_compact_denials_total",
                format!("outcome=\"{name}\""),
                "Compact denials (RFC 9824): signed, from the cache, or TC=1 over a budget.",
                udp.compact[i] + tcp.compact[i],
            );
        }
        for (i, name) in counters::DROPS.iter().enumerate() {
            out.counter(
                format!("drops.{name}"),
                "dnsd_drops_total",
                format!("cause=\"{name}\""),
                "Messages not answered (TCP: connections closed), by cause.",
                udp.drops[i] + tcp.drops[i],
            );
        }
    }
}

/// The UDP socket fleet: totals, sockets, and the addresses with most kernel drops.
pub struct Fleet {
    /// The fleet's counters.
    pub counters: Arc<FleetCounters>,
    /// Service addresses (index = counter index).
    pub addrs: Vec<SocketAddr>,
}

impl Source for Fleet {
    fn collect(&self, out: &mut Samples) {
        let f = &self.counters;
        let (rx, tx, kd) = f.totals();
        out.counter(
            "udp.received",
            "dnsd_udp_received_total",
            "",
            "Datagrams received on all addresses.",
            rx,
        );
        out.counter(
            "udp.answered",
            "dnsd_udp_answered_total",
            "",
            "Datagrams sent on all addresses.",
            tx,
        );
        out.counter(
            "udp.kernel_drops",
            "dnsd_udp_kernel_drops_total",
            "",
            "Datagrams the kernel dropped on full receive queues.",
            kd,
        );
        out.counter(
            "udp.oversized",
            "dnsd_udp_oversized_total",
            "",
            "Datagrams longer than the largest query accepted.",
            f.oversized.load(Ordering::Relaxed),
        );
        out.counter(
            "udp.send_errors",
            "dnsd_udp_send_errors_total",
            "",
            "Replies the kernel refused.",
            f.send_errors.load(Ordering::Relaxed),
        );
        for (i, d) in f.top_drops(TOP_N) {
            let ip = self.addrs[i].ip();
            out.gauge(
                format!("udp.kernel_drops.top\t{ip}"),
                "dnsd_udp_kernel_drops_top",
                format!("address=\"{ip}\""),
                "Kernel drops of the 10 addresses with most drops.",
                d,
            );
        }
        out.gauge(
            "udp.addresses",
            "dnsd_udp_addresses",
            "",
            "Service addresses with a UDP socket.",
            self.addrs.len() as u64,
        );
    }
}
