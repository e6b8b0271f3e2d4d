//! http-front's own counters: one enum of every event the request path counts (with its
//! Prometheus family and label), striped per thread so that a bump is an uncontended add.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

use shield::metrics::{Samples, Source};

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
    ConnPlainHttpOnTls => ("connections_total", "event", "plain_http_on_tls"),
    ConnErrors => ("connections_total", "event", "protocol_error"),
    ConnClientGone => ("connections_total", "event", "client_gone"),
    TlsCertBySni => ("tls_handshake_certs_total", "cert", "sni"),
    TlsCertDefault => ("tls_handshake_certs_total", "cert", "default"),
    TlsCertRefused => ("tls_handshake_certs_total", "cert", "refused"),
    TlsCertsRead => ("tls_cert_pairs_read_total", "result", "ok"),
    TlsCertErrors => ("tls_cert_pairs_read_total", "result", "refused"),
    ConnAcceptErrors => ("connections_total", "event", "accept_error"),
    ConnProxied => ("connections_total", "event", "proxied"),
    ProxyMalformed => ("proxy_headers_refused_total", "cause", "malformed"),
    ProxyMissing => ("proxy_headers_refused_total", "cause", "missing"),
    ProxyTimeout => ("proxy_headers_refused_total", "cause", "timeout"),
    ProxyUnlisted => ("proxy_headers_refused_total", "cause", "unlisted"),
    ClosedBlocked => ("connections_closed_total", "cause", "blocked"),
    ClosedMaxAge => ("connections_closed_total", "cause", "max_age"),
    ClosedMaxRequests => ("connections_closed_total", "cause", "max_requests"),
    ClosedIdle => ("connections_closed_total", "cause", "idle"),
    ClosedResetFlood => ("connections_closed_total", "cause", "reset_flood"),
    ClosedShutdown => ("connections_closed_total", "cause", "shutdown"),
    ClosedSlowReader => ("connections_closed_total", "cause", "slow_reader"),
    ClosedEvicted => ("connections_closed_total", "cause", "evicted"),
    ClosedGraceExpired => ("connections_total", "event", "grace_expired"),
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
    LimitHeaderField => ("limit_hits_total", "limit", "max_header_field_bytes"),
    LimitHeaderCopies => ("limit_hits_total", "limit", "header_copies"),
    LimitUriBytes => ("limit_hits_total", "limit", "max_uri_bytes"),
    LimitBodyBytes => ("limit_hits_total", "limit", "max_body_bytes"),
    LimitMaxAge => ("limit_hits_total", "limit", "max_connection_age"),
    LimitMaxRequests => ("limit_hits_total", "limit", "max_requests_per_connection"),
    LimitIdle => ("limit_hits_total", "limit", "idle_timeout"),
    LimitResetFlood => ("limit_hits_total", "limit", "reset_flood"),
    LimitH2Protocol => ("limit_hits_total", "limit", "h2_goaway"),
    LimitH2ControlFlood => ("limit_hits_total", "limit", "h2_control_flood"),
    LimitSlowReaderStreams => ("limit_hits_total", "limit", "slow_reader_streams"),
    LimitSlowReaderStrikes => ("limit_hits_total", "limit", "slow_reader_strikes"),
    LimitAccessLogQueue => ("limit_hits_total", "limit", "access_log_queue"),
    LimitSendTimeout => ("limit_hits_total", "limit", "send_timeout"),
    LimitSendMinRate => ("limit_hits_total", "limit", "send_min_rate"),
    LimitResponseBufferTotal => ("limit_hits_total", "limit", "response_buffer_total"),
    LimitResponseBufferSource => ("limit_hits_total", "limit", "response_buffer_source"),
    LimitBodyBufferSource => ("limit_hits_total", "limit", "body_buffer_source"),
    LimitClearanceCookies => ("limit_hits_total", "limit", "clearance_cookies"),
    LimitBodyTimeout => ("limit_hits_total", "limit", "body_timeout"),
    LimitBodyMinRate => ("limit_hits_total", "limit", "body_min_rate"),
    LimitBodyBufferTotal => ("limit_hits_total", "limit", "body_buffer_total"),
    LimitUpstreamConnections => ("limit_hits_total", "limit", "upstream_connections"),
    LimitUpstreamPerSource => ("limit_hits_total", "limit", "max_upstream_per_source"),
    LimitSiteInFlight => ("limit_hits_total", "limit", "max_requests_in_flight"),
    LimitFingerprintItems => ("limit_hits_total", "limit", "fingerprint_items"),
    LimitHeaderBufferTotal => ("limit_hits_total", "limit", "header_buffer_total"),
    LimitHeaderBufferSource => ("limit_hits_total", "limit", "header_buffer_source"),
    LimitClientHello => ("limit_hits_total", "limit", "client_hello_bytes"),
    ReqAbandoned => ("responses_total", "cause", "client_gone"),
    BodiesBuffered => ("request_bodies_total", "mode", "buffered"),
    BodiesStreamed => ("request_bodies_total", "mode", "streamed"),
    ResponsesRelayed => ("responses_relayed_total", "", ""),
    H2PrematureResets => ("h2_premature_resets_total", "", ""),
    WsOpened => ("websockets_total", "event", "opened"),
    WsRefused => ("websockets_total", "event", "refused_by_upstream"),
    WsRefusedBodyDropped => ("websockets_total", "event", "refused_body_dropped"),
    WsClosedEnded => ("websockets_closed_total", "cause", "ended"),
    WsClosedError => ("websockets_closed_total", "cause", "upgrade_failed"),
    WsClosedIdle => ("websockets_closed_total", "cause", "idle"),
    WsClosedMaxAge => ("websockets_closed_total", "cause", "max_age"),
    WsClosedByFront => ("websockets_closed_total", "cause", "closed_by_front"),
    WsClosedHeld => ("websockets_closed_total", "cause", "held"),
    WsClosedClearance => ("websockets_closed_total", "cause", "clearance_expired"),
    ChallengeIssued => ("challenges_total", "result", "issued"),
    ChallengeSolved => ("challenges_total", "result", "solved"),
    ChallengeFailed => ("challenges_total", "result", "failed"),
    ChallengeCleared => ("challenges_total", "result", "cleared"),
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

    /// Every counter's sum over the stripes.
    pub fn all(&self) -> [u64; COUNT] {
        let mut out = [0u64; COUNT];
        for s in self.stripes.iter() {
            for (o, c) in out.iter_mut().zip(s.0.iter()) {
                *o = o.wrapping_add(c.load(Ordering::Relaxed));
            }
        }
        out
    }
}

/// The family's help text.
fn help_of(fam: &str) -> &'static str {
    match fam {
        "connections_total" => {
            "Client connection events: at accept (accepted, blocked_at_accept, proxied, ...) and at the end (protocol_error, client_gone, grace_expired); a connection may count under one of each."
        }
        "connections_closed_total" => "Client connections closed by the front, by cause.",
        "requests_total" => "Requests received, by protocol.",
        "responses_total" => "Responses, by cause.",
        "verdicts_total" => "Rule verdicts (no_rules: the site has none, checks skipped).",
        "escalations_total" => "Sources put into the block map.",
        "limit_hits_total" => "Times a configured bound was hit.",
        "h2_premature_resets_total" => "HTTP/2 requests cancelled before their response head.",
        "access_log_records_total" => "Sampled access-log records, queued or dropped (queue full).",
        "reloads_total" => "Configuration reloads.",
        "paths_normalized_total" => "Requests whose forwarded path differs from the one sent.",
        "request_bodies_total" => {
            "Request bodies by how they went upstream (buffered whole, or streamed)."
        }
        "responses_relayed_total" => {
            "Upstream response bodies read into memory by a relay (those not whole in the first read)."
        }
        "websockets_total" => "WebSockets opened to the upstream, or refused by it.",
        "websockets_closed_total" => {
            "WebSockets ended: the peers (a close or a reset), the client's upgrade failing, websocket_idle_ms, websocket_max_secs, the front closing the client (a block), or its source held for the site's tenant (an escalation after the tunnel opened)."
        }
        "challenges_total" => {
            "Challenges: pages issued, solutions accepted (a clearance set) or refused, and requests a clearance let through a challenge rule."
        }
        "tls_handshake_certs_total" => {
            "TLS handshakes by the certificate chosen: by the server name, the default (no or an unknown name), or none (refused)."
        }
        "tls_cert_pairs_read_total" => {
            "Certificate pairs read from disk (start, reload, cert_dir), and those refused (a bad file: the old pair keeps serving)."
        }
        "proxy_headers_refused_total" => {
            "Connections of a listed proxy closed for want of a valid PROXY header, by cause."
        }
        _ => "",
    }
}

/// Every counter as `http_front_<family>{<label>="<value>"}` (`ctl`-style names:
/// `<family>.<value>`).
impl Source for Counters {
    fn collect(&self, out: &mut Samples) {
        let values = self.all();
        // Families together, in the order they first appear.
        let mut order: Vec<&str> = Vec::new();
        for (fam, _, _) in META {
            if !order.contains(fam) {
                order.push(fam);
            }
        }
        for fam in order {
            let metric: &'static str = family_name(fam);
            for (i, (f, label, value)) in META.iter().enumerate() {
                if f != &fam {
                    continue;
                }
                let (ctl, labels) = if label.is_empty() {
                    (fam.to_string(), String::new())
                } else {
                    (format!("{fam}.{value}"), format!("{label}=\"{value}\""))
                };
                out.counter(ctl, metric, labels, help_of(fam), values[i]);
            }
        }
        out.counter(
            "access_log_written",
            "http_front_access_log_written_total",
            "",
            "Access-log records written.",
            self.access_log_written.load(Ordering::Relaxed),
        );
        out.counter(
            "access_log_write_errors",
            "http_front_access_log_write_errors_total",
            "",
            "Access-log batches that failed to write.",
            self.access_log_write_errors.load(Ordering::Relaxed),
        );
    }
}

/// `http_front_<family>` as a static string (the families are a fixed set).
fn family_name(fam: &str) -> &'static str {
    macro_rules! names {
        ($($f:literal),*) => {
            match fam {
                $($f => concat!("http_front_", $f),)*
                _ => "http_front_other_total",
            }
        };
    }
    names!(
        "connections_total",
        "connections_closed_total",
        "requests_total",
        "responses_total",
        "verdicts_total",
        "escalations_total",
        "limit_hits_total",
        "h2_premature_resets_total",
        "access_log_records_total",
        "reloads_total",
        "paths_normalized_total",
        "request_bodies_total",
        "responses_relayed_total",
        "proxy_headers_refused_total",
        "challenges_total",
        "websockets_total",
        "websockets_closed_total",
        "tls_handshake_certs_total",
        "tls_cert_pairs_read_total"
    )
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

    #[test]
    fn every_family_has_help_and_a_name() {
        let mut out = Samples::default();
        Counters::default().collect(&mut out);
        for s in out.as_slice() {
            assert!(
                s.metric.starts_with("http_front_") && s.metric != "http_front_other_total",
                "{s:?}"
            );
            assert!(!s.help.is_empty(), "{s:?}");
        }
    }
}
