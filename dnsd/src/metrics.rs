//! dnsd's own counters as sources of shield's registry ([`shield::metrics`]): queries by
//! transport and qtype, responses by rcode and kind, drops by cause (summed over the UDP
//! workers and TCP), the UDP fleet (totals and the top addresses by kernel drops: never one
//! series per address), TCP connections, zone reloads, serials and record counts. The
//! defences, transfers, the XDP guard and shield's own parts are sources of their own; the
//! daemon registers them all, and one renderer writes both `ctl stats` and `/metrics`.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::Ordering;

use arc_swap::ArcSwap;
use listener::udp::FleetCounters;
use shield::metrics::{Samples, Source, label_value};

use crate::served_zones::ZoneSet;
use crate::stats::{self, WorkerStats};
use crate::tcp::TcpServer;
use crate::zone_registry::ReloadStats;

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
        let udp = stats::sum(self.udp.iter().map(|a| &**a));
        let tcp = stats::sum(std::iter::once(&*self.tcp));
        let help = "Queries received.";
        for (tr, t) in [("udp", &udp), ("tcp", &tcp)] {
            out.counter(format!("queries.{tr}"), "", "", help, t.queries);
        }
        let names = || stats::QTYPES.iter().map(|(_, n)| *n).chain(["other"]);
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
        for (i, name) in stats::RCODES.iter().enumerate() {
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
        for (i, name) in stats::KINDS.iter().enumerate() {
            out.counter(
                format!("responses.kind.{name}"),
                "dnsd_answers_total",
                format!("kind=\"{name}\""),
                "Responses by kind of answer.",
                udp.kinds[i] + tcp.kinds[i],
            );
        }
        for (i, name) in stats::COMPACT.iter().enumerate() {
            out.counter(
                format!("compact_denial.{name}"),
                "dnsd_compact_denials_total",
                format!("outcome=\"{name}\""),
                "Compact denials (RFC 9824): signed, from the cache, or TC=1 over a budget.",
                udp.compact[i] + tcp.compact[i],
            );
        }
        for (i, name) in stats::DROPS.iter().enumerate() {
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

/// Open TCP connections, and connections held at the pipelining bound.
impl Source for TcpServer {
    fn collect(&self, out: &mut Samples) {
        out.gauge(
            "tcp.connections",
            "dnsd_tcp_connections",
            "",
            "Open TCP connections.",
            self.open_connections() as u64,
        );
        out.counter(
            "tcp.pipeline_full",
            "dnsd_tcp_pipeline_full_total",
            "",
            "Times a TCP connection stopped being read at tcp_max_pipelined unanswered queries.",
            self.pipeline_full(),
        );
    }
}

/// Zone loads by result, and each served zone's serial and record count.
pub struct Zones {
    /// Reload counters.
    pub reloads: Arc<ReloadStats>,
    /// The zone set the query path reads.
    pub published: Arc<ArcSwap<ZoneSet>>,
}

impl Source for Zones {
    fn collect(&self, out: &mut Samples) {
        for (what, a) in [("ok", &self.reloads.ok), ("failed", &self.reloads.failed)] {
            out.counter(
                format!("reloads.{what}"),
                "dnsd_reloads_total",
                format!("result=\"{what}\""),
                "Zone loads by result.",
                a.load(Ordering::Relaxed),
            );
        }
        let r = &self.reloads;
        for (ctl, prom, help, v) in [
            (
                "dnssec.signatures_made",
                "dnsd_dnssec_signatures_made_total",
                "Signatures made by the signer.",
                &r.signatures_made,
            ),
            (
                "dnssec.signatures_kept",
                "dnsd_dnssec_signatures_kept_total",
                "Signatures kept from the version signed before.",
                &r.signatures_kept,
            ),
        ] {
            out.counter(ctl, prom, "", help, v.load(Ordering::Relaxed));
        }
        out.gauge(
            "dnssec.expired_signatures",
            "dnsd_dnssec_expired_signatures",
            "",
            "Signatures past their expiration in the zones served.",
            r.expired_signatures.load(Ordering::Relaxed),
        );
        out.gauge(
            "dnssec.expiring_zones",
            "dnsd_dnssec_expiring_zones",
            "",
            "Zones whose signatures expire within [dnssec] rrsig_warn_days.",
            r.expiring_zones.load(Ordering::Relaxed),
        );
        let set = self.published.load();
        for (_, z) in set.zones() {
            out.gauge(
                "",
                "dnsd_zone_serial",
                format!("zone=\"{}\"", label_value(&z.apex().to_string())),
                "SOA serial of each zone served.",
                u64::from(z.serial()),
            );
        }
        for (_, z) in set.zones() {
            out.gauge(
                "",
                "dnsd_zone_records",
                format!("zone=\"{}\"", label_value(&z.apex().to_string())),
                "Records in each zone served.",
                z.record_count() as u64,
            );
        }
    }
}
