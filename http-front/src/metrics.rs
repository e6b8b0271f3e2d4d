//! Counters striped per thread (no shared cache line on the hot path), summed on read, and `/metrics` in the Prometheus text format.

use std::convert::Infallible;
use std::fmt::Write as _;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

use bytes::Bytes;
use http_body_util::Full;
use hyper::{Request, Response};
use hyper_util::rt::TokioIo;

use crate::front::Front;

macro_rules! counters {
    ($($name:ident => ($family:literal, $label:literal, $value:literal)),* $(,)?) => {
        /// Every counter, by name; [`Counter::meta`] gives its metric family and label.
        #[derive(Clone, Copy, Debug, PartialEq, Eq)]
        #[repr(usize)]
        #[allow(missing_docs)]
        pub enum Counter { $($name),* }

        const META: &[(&str, &str, &str)] = &[$(($family, $label, $value)),*];
    };
}

counters! {
    ConnAccepted => ("connections_total", "event", "accepted"),
    ConnBlocked => ("connections_total", "event", "blocked_at_accept"),
    ConnTlsFailed => ("connections_total", "event", "tls_handshake_failed"),
    ConnErrors => ("connections_total", "event", "protocol_error"),
    ConnAcceptErrors => ("connections_total", "event", "accept_error"),
    ClosedBlocked => ("connections_closed_total", "cause", "blocked"),
    ClosedMaxAge => ("connections_closed_total", "cause", "max_age"),
    ClosedMaxRequests => ("connections_closed_total", "cause", "max_requests"),
    ClosedIdle => ("connections_closed_total", "cause", "idle"),
    ClosedResetFlood => ("connections_closed_total", "cause", "reset_flood"),
    ClosedShutdown => ("connections_closed_total", "cause", "shutdown"),
    ClosedGraceExpired => ("connections_closed_total", "cause", "grace_expired"),
    RequestsH1 => ("requests_total", "proto", "http1"),
    RequestsH2 => ("requests_total", "proto", "http2"),
    RespProxied => ("responses_total", "cause", "proxied"),
    RespDenied => ("responses_total", "cause", "denied"),
    RespChallenged => ("responses_total", "cause", "challenged"),
    RespRateLimited => ("responses_total", "cause", "rate_limited"),
    RespBlocked => ("responses_total", "cause", "blocked"),
    RespUnknownHost => ("responses_total", "cause", "unknown_host"),
    RespUriTooLong => ("responses_total", "cause", "uri_too_long"),
    RespBodyTooLarge => ("responses_total", "cause", "body_too_large"),
    RespBadRequest => ("responses_total", "cause", "bad_request"),
    RespBadHost => ("responses_total", "cause", "bad_host"),
    RespBadBody => ("responses_total", "cause", "bad_body"),
    RespBodyTimeout => ("responses_total", "cause", "body_timeout"),
    RespNotImplemented => ("responses_total", "cause", "not_implemented"),
    RespMethodNotAllowed => ("responses_total", "cause", "method_not_allowed"),
    RespHeaderTooLarge => ("responses_total", "cause", "header_too_large"),
    RespDuplicateHeader => ("responses_total", "cause", "duplicate_header"),
    RespBadPath => ("responses_total", "cause", "bad_path"),
    PathNormalized => ("paths_normalized_total", "", ""),
    RespUpstreamError => ("responses_total", "cause", "upstream_error"),
    RespUpstreamTimeout => ("responses_total", "cause", "upstream_timeout"),
    VerdictNoRules => ("verdicts_total", "action", "no_rules"),
    VerdictPass => ("verdicts_total", "action", "pass"),
    VerdictAllow => ("verdicts_total", "action", "allow"),
    VerdictDeny => ("verdicts_total", "action", "deny"),
    VerdictChallenge => ("verdicts_total", "action", "challenge"),
    VerdictRateLimit => ("verdicts_total", "action", "rate_limit"),
    Escalations => ("escalations_total", "by", "rules"),
    EscalationsResetFlood => ("escalations_total", "by", "reset_flood"),
    LimitMaxConnections => ("limit_hits_total", "limit", "max_connections"),
    LimitPerSource => ("limit_hits_total", "limit", "max_connections_per_source"),
    LimitHeaderTimeout => ("limit_hits_total", "limit", "header_read_timeout"),
    LimitHeaderBytes => ("limit_hits_total", "limit", "max_header_bytes"),
    LimitUriBytes => ("limit_hits_total", "limit", "max_uri_bytes"),
    LimitBodyBytes => ("limit_hits_total", "limit", "max_body_bytes"),
    LimitMaxAge => ("limit_hits_total", "limit", "max_connection_age"),
    LimitMaxRequests => ("limit_hits_total", "limit", "max_requests_per_connection"),
    LimitIdle => ("limit_hits_total", "limit", "idle_timeout"),
    LimitResetFlood => ("limit_hits_total", "limit", "reset_flood"),
    LimitH2Protocol => ("limit_hits_total", "limit", "h2_goaway"),
    LimitAccessLogQueue => ("limit_hits_total", "limit", "access_log_queue"),
    LimitSendTimeout => ("limit_hits_total", "limit", "send_timeout"),
    LimitBodyTimeout => ("limit_hits_total", "limit", "body_timeout"),
    LimitBodyMinRate => ("limit_hits_total", "limit", "body_min_rate"),
    LimitBodyBufferTotal => ("limit_hits_total", "limit", "body_buffer_total"),
    BodiesBuffered => ("request_bodies_total", "mode", "buffered"),
    BodiesStreamed => ("request_bodies_total", "mode", "streamed"),
    ResponsesRelayed => ("responses_relayed_total", "", ""),
    H2PrematureResets => ("h2_premature_resets_total", "", ""),
    AccessLogQueued => ("access_log_records_total", "result", "queued"),
    AccessLogDropped => ("access_log_records_total", "result", "dropped"),
    ReloadOk => ("reloads_total", "result", "ok"),
    ReloadFailed => ("reloads_total", "result", "failed"),
}

const COUNT: usize = META.len();
const STRIPES: usize = 16;

impl Counter {
    /// (metric family without the `http_front_` prefix, label name, label value).
    pub fn meta(self) -> (&'static str, &'static str, &'static str) {
        META[self as usize]
    }
}

#[repr(align(128))]
struct Stripe([AtomicU64; COUNT]);

/// Counters striped per thread: a bump is a relaxed add on a line only its thread writes (mostly).
pub struct Counters {
    stripes: Box<[Stripe]>,
    /// Access-log records written by the writer thread.
    pub access_log_written: AtomicU64,
    /// Access-log batches that failed to write.
    pub access_log_write_errors: AtomicU64,
}

impl std::fmt::Debug for Counters {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Counters").finish_non_exhaustive()
    }
}

impl Default for Counters {
    fn default() -> Self {
        Counters {
            stripes: (0..STRIPES)
                .map(|_| Stripe(std::array::from_fn(|_| AtomicU64::new(0))))
                .collect(),
            access_log_written: AtomicU64::new(0),
            access_log_write_errors: AtomicU64::new(0),
        }
    }
}

fn stripe_index() -> usize {
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    thread_local! {
        static MINE: usize = NEXT.fetch_add(1, Ordering::Relaxed) % STRIPES;
    }
    MINE.with(|m| *m)
}

impl Counters {
    /// Adds one.
    #[inline]
    pub fn bump(&self, c: Counter) {
        self.add(c, 1);
    }

    /// Adds `n`.
    #[inline]
    pub fn add(&self, c: Counter, n: u64) {
        self.stripes[stripe_index()].0[c as usize].fetch_add(n, Ordering::Relaxed);
    }

    /// The sum over all stripes.
    pub fn get(&self, c: Counter) -> u64 {
        self.stripes
            .iter()
            .map(|s| s.0[c as usize].load(Ordering::Relaxed))
            .fold(0, u64::wrapping_add)
    }

    fn all(&self) -> [u64; COUNT] {
        let mut out = [0u64; COUNT];
        for s in self.stripes.iter() {
            for (o, c) in out.iter_mut().zip(s.0.iter()) {
                *o = o.wrapping_add(c.load(Ordering::Relaxed));
            }
        }
        out
    }
}

fn family(s: &mut String, name: &str, kind: &str, help: &str) {
    let _ = writeln!(s, "# HELP http_front_{name} {help}");
    let _ = writeln!(s, "# TYPE http_front_{name} {kind}");
}

/// A family with one unlabelled sample.
fn single(s: &mut String, name: &str, kind: &str, help: &str, value: impl std::fmt::Display) {
    family(s, name, kind, help);
    let _ = writeln!(s, "http_front_{name} {value}");
}

fn help_of(fam: &str) -> &'static str {
    match fam {
        "connections_total" => "Client connections by what happened at accept.",
        "connections_closed_total" => "Client connections closed by the front, by cause.",
        "requests_total" => "Requests received, by protocol.",
        "responses_total" => "Responses, by cause.",
        "verdicts_total" => "Rule verdicts (no_rules: the site has none, checks skipped).",
        "escalations_total" => "Sources put into the block map.",
        "limit_hits_total" => "Times a configured bound was hit.",
        "h2_premature_resets_total" => "HTTP/2 requests cancelled before their response head.",
        "access_log_records_total" => "Sampled access-log records, queued or dropped (queue full).",
        "reloads_total" => "Configuration reloads.",
        _ => "",
    }
}

/// Renders every metric of `front`.
pub fn render(front: &Front) -> String {
    let mut s = String::with_capacity(8192);
    let values = front.counters.all();
    let mut done: Vec<&str> = Vec::new();
    for (i, (fam, _, _)) in META.iter().enumerate() {
        if done.contains(fam) {
            continue;
        }
        done.push(fam);
        family(&mut s, fam, "counter", help_of(fam));
        for (j, (f2, label, value)) in META.iter().enumerate().skip(i) {
            if f2 != fam {
                continue;
            }
            if label.is_empty() {
                let _ = writeln!(s, "http_front_{fam} {}", values[j]);
            } else {
                let _ = writeln!(s, "http_front_{fam}{{{label}=\"{value}\"}} {}", values[j]);
            }
        }
    }
    let c = &front.counters;
    single(
        &mut s,
        "open_connections",
        "gauge",
        "Client connections open now.",
        front.registry.open(),
    );
    single(
        &mut s,
        "access_log_written_total",
        "counter",
        "Access-log records written.",
        c.access_log_written.load(Ordering::Relaxed),
    );
    single(
        &mut s,
        "access_log_write_errors_total",
        "counter",
        "Access-log batches that failed to write.",
        c.access_log_write_errors.load(Ordering::Relaxed),
    );

    let snap = front.snapshot();
    family(
        &mut s,
        "sites",
        "gauge",
        "Sites configured; with_rules: those whose tenant has rules.",
    );
    let _ = writeln!(s, "http_front_sites{{rules=\"any\"}} {}", snap.sites.len());
    let _ = writeln!(
        s,
        "http_front_sites{{rules=\"with_rules\"}} {}",
        snap.sites.with_rules()
    );

    let b = front.blocks.stats();
    single(
        &mut s,
        "block_entries",
        "gauge",
        "Entries in the block map.",
        b.len,
    );
    single(
        &mut s,
        "block_capacity",
        "gauge",
        "Capacity of the block map.",
        b.capacity,
    );
    family(
        &mut s,
        "block_changes_total",
        "counter",
        "Block map changes by kind.",
    );
    for (k, v) in [
        ("insert", b.inserts),
        ("refresh", b.refreshes),
        ("removal", b.removals),
        ("expiration", b.expirations),
        ("eviction", b.evictions),
    ] {
        let _ = writeln!(s, "http_front_block_changes_total{{kind=\"{k}\"}} {v}");
    }
    single(
        &mut s,
        "block_hits_total",
        "counter",
        "Block map lookups that hit.",
        b.hits,
    );
    family(
        &mut s,
        "block_feed_lag_total",
        "counter",
        "Block feed changes a subscriber lost to overflow (resynced).",
    );
    for sub in &b.subscribers {
        let _ = writeln!(
            s,
            "http_front_block_feed_lag_total{{subscriber=\"{}\"}} {}",
            sub.name, sub.lagged
        );
    }

    let f = &front.syn_filter;
    single(
        &mut s,
        "syn_filter_entries",
        "gauge",
        "Blocked IPv4 sources whose SYNs the listeners' socket filter drops.",
        f.entries.load(Ordering::Relaxed),
    );
    single(
        &mut s,
        "upstream_body_stalls_total",
        "counter",
        "Upstream response bodies ended: no byte within the upstream's response timeout.",
        crate::h1::BODY_STALLS.load(Ordering::Relaxed),
    );
    single(
        &mut s,
        "syn_filter_overflow",
        "gauge",
        "Block entries beyond the SYN filter (checked at accept instead).",
        f.overflow.load(Ordering::Relaxed),
    );
    family(
        &mut s,
        "syn_filter_installs_total",
        "counter",
        "SYN filter programs installed (per listener), and refused.",
    );
    let _ = writeln!(
        s,
        "http_front_syn_filter_installs_total{{result=\"ok\"}} {}",
        f.installs.load(Ordering::Relaxed)
    );
    let _ = writeln!(
        s,
        "http_front_syn_filter_installs_total{{result=\"refused\"}} {}",
        f.failures.load(Ordering::Relaxed)
    );

    let r = front.rules.stats();
    family(&mut s, "rules_tenants", "gauge", "Tenants with rules.");
    let _ = writeln!(s, "http_front_rules_tenants {}", r.tenants);
    family(
        &mut s,
        "rules_table_evictions_total",
        "counter",
        "Live rate-limit or escalation state evicted from its full table.",
    );
    let _ = writeln!(
        s,
        "http_front_rules_table_evictions_total{{table=\"limiter\"}} {}",
        r.limiter.evictions
    );
    let _ = writeln!(
        s,
        "http_front_rules_table_evictions_total{{table=\"escalation\"}} {}",
        r.counters.evictions
    );
    family(
        &mut s,
        "rules_table_slots",
        "gauge",
        "Capacity of the rate-limit and escalation tables.",
    );
    let _ = writeln!(
        s,
        "http_front_rules_table_slots{{table=\"limiter\"}} {}",
        r.limiter.slots
    );
    let _ = writeln!(
        s,
        "http_front_rules_table_slots{{table=\"escalation\"}} {}",
        r.counters.slots
    );

    let a = front.events.stats();
    single(
        &mut s,
        "events_records_total",
        "counter",
        "403/429/blocked events aggregated (as of the last flush).",
        a.records,
    );
    single(
        &mut s,
        "events_replaced_total",
        "counter",
        "Aggregation keys that lost their counter (bounded top-k).",
        a.replaced,
    );
    single(
        &mut s,
        "events_totals_overflow_total",
        "counter",
        "Events whose (tenant, action) total did not fit.",
        a.totals_overflow,
    );
    single(
        &mut s,
        "events_flushes_total",
        "counter",
        "Aggregator flushes.",
        a.flushes,
    );
    family(
        &mut s,
        "events_memory_bytes",
        "gauge",
        "Aggregator memory now, and its budget.",
    );
    let _ = writeln!(
        s,
        "http_front_events_memory_bytes{{of=\"used\"}} {}",
        a.memory_bytes
    );
    let _ = writeln!(
        s,
        "http_front_events_memory_bytes{{of=\"budget\"}} {}",
        a.budget_bytes
    );
    if let Some(sinks) = front.sink_stats() {
        family(
            &mut s,
            "events_sink_dropped_total",
            "counter",
            "Aggregate events a sink dropped.",
        );
        for st in sinks {
            let _ = writeln!(
                s,
                "http_front_events_sink_dropped_total{{sink=\"{}\"}} {}",
                st.name, st.dropped
            );
        }
    }
    crate::clickhouse::metrics(front.clickhouse_monitors(), &mut s);
    if let Some(m) = front.xdp_stats() {
        family(
            &mut s,
            "xdp_mirror_changes_total",
            "counter",
            "Block changes mirrored into the XDP maps.",
        );
        let _ = writeln!(s, "http_front_xdp_mirror_changes_total {}", m.changes);
        family(
            &mut s,
            "xdp_mirror_full_total",
            "counter",
            "Blocks the full XDP maps could not take.",
        );
        let _ = writeln!(s, "http_front_xdp_mirror_full_total {}", m.full);
    }
    s
}

/// Serves `/metrics` on `l` until the task is dropped.
pub async fn serve(l: tokio::net::TcpListener, front: Arc<Front>) {
    loop {
        let Ok((stream, _)) = l.accept().await else {
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
            continue;
        };
        let front = Arc::clone(&front);
        tokio::spawn(async move {
            let svc = hyper::service::service_fn(move |req: Request<hyper::body::Incoming>| {
                let front = Arc::clone(&front);
                async move {
                    let resp = if req.uri().path() == "/metrics" {
                        Response::builder()
                            .header("content-type", "text/plain; version=0.0.4")
                            .body(Full::new(Bytes::from(render(&front))))
                    } else {
                        Response::builder()
                            .status(404)
                            .body(Full::new(Bytes::from_static(b"see /metrics\n")))
                    };
                    Ok::<_, Infallible>(resp.expect("static response parts"))
                }
            });
            let _ = hyper::server::conn::http1::Builder::new()
                .timer(hyper_util::rt::TokioTimer::new())
                .header_read_timeout(std::time::Duration::from_secs(10))
                .serve_connection(TokioIo::new(stream), svc)
                .await;
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stripes_sum() {
        let c = Counters::default();
        c.bump(Counter::RespProxied);
        std::thread::scope(|s| {
            for _ in 0..4 {
                s.spawn(|| c.add(Counter::RespProxied, 2));
            }
        });
        assert_eq!(c.get(Counter::RespProxied), 9);
        assert_eq!(
            Counter::RespProxied.meta(),
            ("responses_total", "cause", "proxied")
        );
    }
}
