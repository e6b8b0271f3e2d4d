//! /metrics in the Prometheus text format: queries by transport and qtype, responses by
//! rcode, drops by cause, per-address totals and the top addresses by kernel drops
//! (bounded: never one series per address), reloads and zone serials.

use std::convert::Infallible;
use std::fmt::Write as _;
use std::sync::Arc;
use std::sync::atomic::Ordering;

use http_body_util::Full;
use hyper::body::Bytes;
use hyper::{Request, Response};
use hyper_util::rt::TokioIo;

use crate::server::Shared;
use crate::stats;

/// How many addresses the kernel-drop top list shows.
const TOP_N: usize = 10;

/// Serves /metrics on `l` until the task is dropped.
pub async fn serve(l: tokio::net::TcpListener, shared: Arc<Shared>) {
    loop {
        let Ok((s, _)) = l.accept().await else {
            continue;
        };
        let shared = shared.clone();
        tokio::spawn(async move {
            let svc = hyper::service::service_fn(move |req: Request<hyper::body::Incoming>| {
                let shared = shared.clone();
                async move {
                    let resp = if req.uri().path() == "/metrics" {
                        Response::builder()
                            .header("content-type", "text/plain; version=0.0.4")
                            .body(Full::new(Bytes::from(render(&shared).await)))
                    } else {
                        Response::builder()
                            .status(404)
                            .body(Full::new(Bytes::from_static(b"see /metrics\n")))
                    };
                    Ok::<_, Infallible>(resp.expect("static response"))
                }
            });
            let _ = hyper::server::conn::http1::Builder::new()
                .serve_connection(TokioIo::new(s), svc)
                .await;
        });
    }
}

/// The metrics text.
pub async fn render(shared: &Arc<Shared>) -> String {
    let mut s = String::with_capacity(4096);
    let udp = stats::sum(shared.udp_stats.iter().map(|a| &**a));
    let tcp = stats::sum(std::iter::once(&*shared.tcp_stats));
    let _ = writeln!(s, "# HELP dnsd_queries_total Queries received.");
    let _ = writeln!(s, "# TYPE dnsd_queries_total counter");
    for (tr, t) in [("udp", &udp), ("tcp", &tcp)] {
        for (i, (_, name)) in stats::QTYPES.iter().enumerate() {
            let _ = writeln!(
                s,
                "dnsd_queries_total{{transport=\"{tr}\",qtype=\"{name}\"}} {}",
                t.qtype[i]
            );
        }
        let _ = writeln!(
            s,
            "dnsd_queries_total{{transport=\"{tr}\",qtype=\"other\"}} {}",
            t.qtype[stats::QTYPES.len()]
        );
    }
    let _ = writeln!(s, "# HELP dnsd_responses_total Responses sent, by rcode.");
    let _ = writeln!(s, "# TYPE dnsd_responses_total counter");
    for (i, name) in stats::RCODES.iter().enumerate() {
        let n = udp.rcode[i] + tcp.rcode[i];
        let _ = writeln!(s, "dnsd_responses_total{{rcode=\"{name}\"}} {n}");
    }
    let _ = writeln!(s, "# HELP dnsd_answers_total Responses by kind of answer.");
    let _ = writeln!(s, "# TYPE dnsd_answers_total counter");
    for (i, name) in stats::KINDS.iter().enumerate() {
        let _ = writeln!(
            s,
            "dnsd_answers_total{{kind=\"{name}\"}} {}",
            udp.kinds[i] + tcp.kinds[i]
        );
    }
    let _ = writeln!(s, "# HELP dnsd_truncated_total Responses with TC set.");
    let _ = writeln!(s, "# TYPE dnsd_truncated_total counter");
    let _ = writeln!(s, "dnsd_truncated_total {}", udp.truncated + tcp.truncated);
    let _ = writeln!(
        s,
        "# HELP dnsd_drops_total Messages not answered, by cause."
    );
    let _ = writeln!(s, "# TYPE dnsd_drops_total counter");
    for (i, name) in stats::DROPS.iter().enumerate() {
        let _ = writeln!(
            s,
            "dnsd_drops_total{{cause=\"{name}\"}} {}",
            udp.drops[i] + tcp.drops[i]
        );
    }
    let (rx, tx, kd) = shared.fleet.totals();
    let _ = writeln!(
        s,
        "# HELP dnsd_udp_received_total Datagrams received on all addresses."
    );
    let _ = writeln!(s, "# TYPE dnsd_udp_received_total counter");
    let _ = writeln!(s, "dnsd_udp_received_total {rx}");
    let _ = writeln!(
        s,
        "# HELP dnsd_udp_answered_total Datagrams sent on all addresses."
    );
    let _ = writeln!(s, "# TYPE dnsd_udp_answered_total counter");
    let _ = writeln!(s, "dnsd_udp_answered_total {tx}");
    let _ = writeln!(
        s,
        "# HELP dnsd_udp_kernel_drops_total Datagrams the kernel dropped on full receive queues."
    );
    let _ = writeln!(s, "# TYPE dnsd_udp_kernel_drops_total counter");
    let _ = writeln!(s, "dnsd_udp_kernel_drops_total {kd}");
    let _ = writeln!(
        s,
        "# HELP dnsd_udp_kernel_drops_top Kernel drops of the {TOP_N} addresses with most drops."
    );
    let _ = writeln!(s, "# TYPE dnsd_udp_kernel_drops_top gauge");
    for (i, d) in shared.fleet.top_drops(TOP_N) {
        let _ = writeln!(
            s,
            "dnsd_udp_kernel_drops_top{{address=\"{}\"}} {d}",
            shared.addrs[i].ip()
        );
    }
    let _ = writeln!(
        s,
        "# HELP dnsd_udp_send_errors_total Replies the kernel refused."
    );
    let _ = writeln!(s, "# TYPE dnsd_udp_send_errors_total counter");
    let _ = writeln!(
        s,
        "dnsd_udp_send_errors_total {}",
        shared.fleet.send_errors.load(Ordering::Relaxed)
    );
    let _ = writeln!(
        s,
        "# HELP dnsd_udp_addresses Service addresses with a UDP socket."
    );
    let _ = writeln!(s, "# TYPE dnsd_udp_addresses gauge");
    let _ = writeln!(s, "dnsd_udp_addresses {}", shared.addrs.len());
    let _ = writeln!(s, "# HELP dnsd_tcp_connections Open TCP connections.");
    let _ = writeln!(s, "# TYPE dnsd_tcp_connections gauge");
    let _ = writeln!(s, "dnsd_tcp_connections {}", shared.tcp.open_connections());
    let mut last = "";
    let mut counters = shared.defence.counters(shield::clock::unix_ms());
    counters.extend(crate::server::xdp_counters(shared));
    counters.extend(crate::server::redis_counters(shared));
    counters.extend(crate::event_sinks::counters(shared));
    for c in counters {
        if c.metric != last {
            let _ = writeln!(s, "# HELP {} {}", c.metric, c.help);
            let _ = writeln!(
                s,
                "# TYPE {} {}",
                c.metric,
                if c.gauge { "gauge" } else { "counter" }
            );
            last = c.metric;
        }
        if c.labels.is_empty() {
            let _ = writeln!(s, "{} {}", c.metric, c.value);
        } else {
            let _ = writeln!(s, "{}{{{}}} {}", c.metric, c.labels, c.value);
        }
    }
    shared.xfr.metrics(&mut s);
    let reg = shared.registry.lock().await;
    let _ = writeln!(s, "# HELP dnsd_reloads_total Zone loads by result.");
    let _ = writeln!(s, "# TYPE dnsd_reloads_total counter");
    let _ = writeln!(
        s,
        "dnsd_reloads_total{{result=\"ok\"}} {}",
        reg.stats.ok.load(Ordering::Relaxed)
    );
    let _ = writeln!(
        s,
        "dnsd_reloads_total{{result=\"failed\"}} {}",
        reg.stats.failed.load(Ordering::Relaxed)
    );
    let _ = writeln!(s, "# HELP dnsd_zone_serial SOA serial of each zone served.");
    let _ = writeln!(s, "# TYPE dnsd_zone_serial gauge");
    for e in reg.entries() {
        if let Some(z) = &e.current {
            let _ = writeln!(
                s,
                "dnsd_zone_serial{{zone=\"{}\"}} {}",
                e.origin,
                z.serial()
            );
        }
    }
    let _ = writeln!(s, "# HELP dnsd_zone_records Records in each zone served.");
    let _ = writeln!(s, "# TYPE dnsd_zone_records gauge");
    for e in reg.entries() {
        if let Some(z) = &e.current {
            let _ = writeln!(
                s,
                "dnsd_zone_records{{zone=\"{}\"}} {}",
                e.origin,
                z.record_count()
            );
        }
    }
    s
}
