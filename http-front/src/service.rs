//! The request path, as phases with early exits (Pingora's): the request filter (blocked
//! source → Host → site → size limits → path normalised), the rules (skipped when the site
//! has none), the access record's sample, the upstream request; then the proxy.

use std::convert::Infallible;
use std::net::IpAddr;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use bytes::Bytes;
use http::header::{self, HeaderValue};
use http::{Method, Request, Response, StatusCode};
use hyper::body::Incoming;
use shield::block::{BlockEntry, Evidence, Origin};
use shield::events::Action as EventAction;
use shield::rules::Escalated;
use shield::rules::{Action, Now};

use crate::access_log::{self, AccessRecord};
use crate::challenge::{self, Binding};
use crate::conn_registry::{CloseCause, ConnCtl, OddHead, SourceWaiting};
use crate::counters::Counter;
use crate::forward::h1;
use crate::forward::relay;
use crate::forward::reqbody::{BodyError, BodyLimits, ClientBody};
use crate::forward::{self, ClientInfo, ForwardError, RespBody, simple};
use crate::front::Front;
use crate::front::Snapshot;
use crate::local;
use crate::target::{self, HOST_MAX, Host};
use crate::view::{Clearance, HttpView};

/// What the request path knows about the connection a request came on.
#[derive(Debug)]
pub struct ConnCtx {
    /// The front.
    pub front: Arc<Front>,
    /// The connection's control block.
    pub ctl: Arc<ConnCtl>,
    /// Source address.
    pub ip: IpAddr,
    /// HTTP/2 (else HTTP/1.1).
    pub h2: bool,
    /// Forwarding header values for this client.
    pub client: ClientInfo,
    /// `server.max_requests_per_connection` when the connection opened.
    pub max_requests: u32,
    /// `http2.reset_flood_min`.
    pub flood_min: u32,
    /// `http2.reset_flood_ratio`.
    pub flood_ratio: f64,
    /// `http2.reset_flood_block_secs`.
    pub flood_block_secs: u64,
    /// `http2.max_concurrent_streams`.
    pub max_streams: u32,
    /// JA4 of the ClientHello (TLS connections).
    pub ja4: Option<Box<str>>,
    /// The HTTP/2 fingerprint, set by the transport once the first HEADERS came (HTTP/2).
    pub h2_fingerprint: Arc<std::sync::OnceLock<Box<str>>>,
    /// The connection comes from a hop of `[server] real_ip_from` (these are the hops): its
    /// requests are their `X-Forwarded-For` client's.
    pub real_ip: Option<Arc<shield::proxy_proto::ProxyAllow>>,
    /// The connection is a listed hop's: it carries many clients, so no per-source bound of
    /// the connection's applies to its requests.
    pub hop: bool,
    /// `ip` is a client the hop named, not the connection's peer: refusing it never closes
    /// the connection, which carries the hop's other clients.
    pub forwarded: bool,
}

impl ConnCtx {
    /// The request's own context when the connection is a hop's and `headers` name another
    /// client in `X-Forwarded-For`: the rightmost address that is not itself a hop (all
    /// hops: the leftmost), as nginx's `real_ip_recursive` reads it. An entry that is no
    /// address ends the walk at the hop itself.
    fn for_client(&self, headers: &http::HeaderMap) -> Option<Box<ConnCtx>> {
        let hops = self.real_ip.as_deref()?;
        let mut client = None;
        // Field lines and entries from the right, as bytes: the entries a listed hop
        // appended are addresses, whatever the client wrote to their left (a line nginx
        // joins with the client's own, which may be anything, is read all the same).
        'lines: for v in headers.get_all("x-forwarded-for").iter().rev() {
            for entry in v.as_bytes().rsplit(|&b| b == b',') {
                let e = entry.trim_ascii();
                if e.is_empty() {
                    continue;
                }
                let Some(ip) = std::str::from_utf8(e)
                    .ok()
                    .and_then(|t| t.parse::<IpAddr>().ok())
                else {
                    // Not an address: written by the client, left of what the hops
                    // appended; the walk ends at the last hop.
                    break 'lines;
                };
                let ip = match ip {
                    IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(ip, IpAddr::V4),
                    v4 => v4,
                };
                client = Some(ip);
                if !hops.contains(ip) {
                    break 'lines;
                }
            }
        }
        let ip = client.filter(|c| *c != self.ip)?;
        let tls = self.client.proto == "https";
        Some(Box::new(ConnCtx {
            front: Arc::clone(&self.front),
            ctl: Arc::clone(&self.ctl),
            ip,
            h2: self.h2,
            client: ClientInfo::new(std::net::SocketAddr::new(ip, 0), self.client.dst, tls),
            max_requests: self.max_requests,
            flood_min: self.flood_min,
            flood_ratio: self.flood_ratio,
            flood_block_secs: self.flood_block_secs,
            max_streams: self.max_streams,
            ja4: self.ja4.clone(),
            h2_fingerprint: Arc::clone(&self.h2_fingerprint),
            real_ip: None,
            hop: true,
            forwarded: true,
        }))
    }
}

/// Counts a request in flight on its connection; a request dropped before its response head
/// (an HTTP/2 stream reset by the client) is a premature reset, and too many close the connection.
struct Flight {
    cx: Arc<ConnCtx>,
    done: bool,
    /// A browser marked it as sent on another site's behalf (HTTP/2 only: what a reset
    /// flood counts).
    cross_site: bool,
}

fn mono_ms() -> u64 {
    shield::clock::mono_us() / 1000
}

impl Flight {
    fn start(cx: Arc<ConnCtx>) -> Self {
        let ctl = &cx.ctl;
        let n = ctl.requests.fetch_add(1, Ordering::Relaxed) + 1;
        ctl.inflight.fetch_add(1, Ordering::Relaxed);
        if cx.h2 {
            ctl.last_active_ms.store(mono_ms(), Ordering::Relaxed);
        }
        if n == cx.max_requests {
            cx.front.counters.bump(Counter::LimitMaxRequests);
            ctl.close(CloseCause::MaxRequests);
        }
        Flight {
            cx,
            done: false,
            cross_site: false,
        }
    }
}

impl Drop for Flight {
    fn drop(&mut self) {
        let cx = &*self.cx;
        let ctl = &cx.ctl;
        // Its end starts the connection's idle time (HTTP/2's timeout; whom to evict).
        ctl.last_active_ms.store(mono_ms(), Ordering::Relaxed);
        ctl.inflight.fetch_sub(1, Ordering::Release);
        if !cx.h2 {
            return;
        }
        if self.done {
            return;
        }
        let c = &cx.front.counters;
        c.bump(Counter::H2PrematureResets);
        // Only streams the client reset make a flood: a client that closes its connection
        // (or loses it) with requests open leaves them unanswered too, and a browser behind
        // a slow origin must not be blocked for that.
        let p = (ctl.premature.fetch_add(1, Ordering::Relaxed) + 1)
            .min(ctl.resets.load(Ordering::Relaxed));
        let cross = if self.cross_site {
            ctl.premature_cross_site.fetch_add(1, Ordering::Relaxed) + 1
        } else {
            ctl.premature_cross_site.load(Ordering::Relaxed)
        };
        let r = ctl.requests.load(Ordering::Relaxed);
        if p >= cx.flood_min
            && f64::from(p) > cx.flood_ratio * f64::from(r)
            && ctl.close(CloseCause::ResetFlood)
        {
            c.bump(Counter::LimitResetFlood);
            shield::limited!(
                10,
                info!(source = %cx.ip, resets = p, requests = r, "HTTP/2 reset flood: closing the connection")
            );
            // A page elsewhere can make its visitors' browsers abort fetches by the hundred:
            // such a flood closes the connection, but blocks the host only when its own
            // requests alone make one.
            if cx.flood_block_secs > 0 && p.saturating_sub(cross) >= cx.flood_min {
                let now = shield::clock::unix_ms();
                // The host: an IPv6 source's /64, which it could otherwise step through.
                let r = cx.front.blocks.insert_host(cx.ip, |net| {
                    BlockEntry::with_ttl(
                        net,
                        std::time::Duration::from_secs(cx.flood_block_secs),
                        now,
                        "h2-reset-flood",
                        Origin::Local,
                        Evidence::Http,
                    )
                });
                if !matches!(
                    r,
                    shield::block::InsertOutcome::Refused(_)
                        | shield::block::InsertOutcome::SuspectsFull
                        | shield::block::InsertOutcome::NoRoom
                ) {
                    c.bump(Counter::EscalationsResetFlood);
                }
            }
        }
    }
}

/// Serves one request (hyper's service function). Everything up to the proxy runs here, when
/// hyper hands the request over; the future returned only forwards (or returns the answer).
pub fn handle(
    cx: Arc<ConnCtx>,
    req: Request<Incoming>,
) -> impl Future<Output = Result<Response<RespBody>, Infallible>> + Send + 'static {
    let mut flight = Flight::start(cx);
    if flight.cx.h2 {
        flight.cross_site = crate::view::cross_site(req.headers());
    }
    // Through a hop of `real_ip_from`: the request is its X-Forwarded-For client's (the
    // connection, its resets and bounds, stay the hop's).
    let own = flight.cx.for_client(req.headers());
    let head = req.method() == Method::HEAD;
    let verdict = decide(own.as_deref().unwrap_or(&flight.cx), req);
    async move {
        let mut flight = flight;
        let resp = match verdict {
            Verdict::Respond(r) => r,
            Verdict::Proxy(mut job) => {
                let cx = own.as_deref().unwrap_or(&flight.cx);
                if cx.h2 {
                    // A stream whose connection ended gives its origin up at once (nginx
                    // closes the upstream connection when its client goes): hyper lets
                    // the streams of a connection gone run on, each holding an origin
                    // connection until the origin answers. (HTTP/1.1: hyper drops the
                    // request with its connection.)
                    tokio::select! {
                        biased;
                        r = proxy(cx, &mut job) => r,
                        () = cx.ctl.ended() => {
                            cx.front.counters.bump(Counter::ReqAbandoned);
                            simple(StatusCode::BAD_GATEWAY, "client gone\n", true)
                        }
                    }
                } else {
                    proxy(cx, &mut job).await
                }
            }
        };
        // A stream its client reset before its body ended is a premature reset, as one reset
        // before the response head.
        flight.done = resp.extensions().get::<ClientReset>().is_none();
        Ok(if head { without_body(resp) } else { resp })
    }
}

/// The answer to a HEAD request: a body of ours (a deny, the challenge page, an error) goes
/// as its length alone (RFC 9110 §9.3.2; over HTTP/2 its DATA was a protocol error to the
/// client — curl, h2 health checks).
fn without_body(mut resp: Response<RespBody>) -> Response<RespBody> {
    if let RespBody::Full(Some(data)) = resp.body() {
        let n = data.len();
        resp.headers_mut()
            .entry(header::CONTENT_LENGTH)
            .or_insert_with(|| HeaderValue::from(n));
        *resp.body_mut() = RespBody::Full(None);
    }
    resp
}

/// The parts of a sampled request kept for its access record.
struct Sampled {
    ts_ms: u64,
    method: String,
    url: String,
    user_agent: Option<String>,
    referer: Option<String>,
    request_bytes: Option<u64>,
    action: &'static str,
    t0: Instant,
    /// The request's HTTP version (`HTTP/1.0` over an HTTP/1.1 connection was logged as
    /// HTTP/1.1).
    proto: &'static str,
}

/// What the request path decided before any waiting.
enum Verdict {
    /// Answer this.
    Respond(Response<RespBody>),
    /// Forward to the site's upstream.
    Proxy(Job),
}

/// A request to forward, with what the forwarding needs.
struct Job {
    snap: Arc<Snapshot>,
    site: usize,
    parts: http::request::Parts,
    body: Option<Incoming>,
    /// `Host` for the upstream (HTTP/2 clients: from `:authority`).
    host: Option<HeaderValue>,
    /// Kept for the access record, when this request is sampled (boxed: rare, and it keeps
    /// the future small).
    sampled: Option<Box<Sampled>>,
    /// The client connection's upgrade, for a WebSocket (boxed: rare).
    upgrade: Option<Box<hyper::upgrade::OnUpgrade>>,
    /// A challenge rule let it through on its clearance cookie: the answer varies by Cookie.
    cleared: bool,
    /// When the clearance that let it through expires (Unix seconds): a WebSocket opened on
    /// it ends then.
    cleared_until: Option<u64>,
    /// An allow list or rule let it through: a hold of its source made later lets it on.
    allowed: bool,
}

/// The request path as phases (Pingora's): the request filter (blocked source, method,
/// Host → site, sizes, path), the rules, the access record's sample, the upstream request.
/// Each phase may answer at once; what reaches the end is forwarded.
fn decide(cx: &ConnCtx, mut req: Request<Incoming>) -> Verdict {
    cx.front.counters.bump(if cx.h2 {
        Counter::RequestsH2
    } else {
        Counter::RequestsH1
    });
    if cx.h2 {
        // HTTP/2 may split cookies into fields; one line for the rules and the origin, as
        // RFC 9113 §8.2.3 asks before a hop that is not HTTP/2 (and as nginx sends it).
        forward::join_cookies(req.headers_mut());
    }
    // ACME's http-01 validation, before any rule or block (a rule must not fail issuance).
    if let Some(acme) = &cx.front.acme
        && req
            .uri()
            .path()
            .starts_with(crate::tls::acme_state::HTTP01_PREFIX)
        && let Some(ka) = acme.http01(req.uri().path())
    {
        let mut r = Response::new(RespBody::full(Bytes::from(ka)));
        r.headers_mut().insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/octet-stream"),
        );
        return Verdict::Respond(r);
    }
    let mut buf = [0u8; HOST_MAX];
    let f = match request_filter(cx, &req, &mut buf) {
        Ok(f) => f,
        Err(r) => return Verdict::Respond(r),
    };
    // A solved challenge comes back here: answered by the front, never the origin, however
    // its path is spelled (`//`, `./`, `%63`: the forms the origin would get).
    if f.path.view == challenge::VERIFY_PATH || f.path.forward == challenge::VERIFY_PATH {
        return Verdict::Respond(challenge_verify(cx, &f, &req));
    }
    let (action, cleared) = match rules(cx, &f, &req) {
        Ok(a) => a,
        Err(r) => return Verdict::Respond(r),
    };
    let sampled = sample(cx, &f, &req, action);
    // The upstream gets the host the site was chosen by, whatever else the client sent, and
    // the path the rules saw.
    let host = upstream_host(&f.host, f.raw_host, cx.client.proto == "https");
    let forward = match f.path.forward {
        std::borrow::Cow::Owned(p) if p != req.uri().path() => Some(p),
        _ => None,
    };
    let (snap, site) = (f.snap, f.site_ix);
    let mut job = upstream_request(cx, snap, site, req, host, forward, sampled);
    job.cleared = cleared.is_some();
    job.cleared_until = cleared;
    job.allowed = action == "allow";
    Verdict::Proxy(job)
}

/// What the request filter found: the site, the normalised host and path, the declared body
/// size.
struct Filtered<'a> {
    snap: Arc<Snapshot>,
    site_ix: usize,
    host: Host<'a>,
    raw_host: Option<&'a HeaderValue>,
    path: target::NormalPath<'a>,
    request_bytes: Option<u64>,
    /// When the request started (only a sampled access record needs it).
    t0: Option<Instant>,
}

/// Phase 1, the request filter: a blocked source, a method never proxied, the site by its
/// Host (one strict reading, or 400: never another site), the size limits, the path the
/// rules see and the origin gets.
// The error is the answer itself, moved once as `Verdict::Respond` was: boxing it would cost
// an allocation on every refused request.
#[allow(clippy::result_large_err)]
fn request_filter<'a>(
    cx: &ConnCtx,
    req: &'a Request<Incoming>,
    buf: &'a mut [u8; HOST_MAX],
) -> Result<Filtered<'a>, Response<RespBody>> {
    let front = &*cx.front;
    let c = &front.counters;
    // 1. A source blocked since the connection opened: refuse and close, before anything else.
    let blocked = cx.ctl.cause() == Some(CloseCause::Blocked)
        || local::with(front, |l| {
            l.blocked(front.conn_tenant.load(Ordering::Relaxed), cx.ip)
        });
    if blocked {
        c.bump(Counter::RespBlocked);
        if cx.forwarded {
            // A client behind a listed hop: the connection carries others.
            return Err(simple(StatusCode::FORBIDDEN, "blocked\n", false));
        }
        cx.ctl.close(CloseCause::Blocked);
        return Err(simple(StatusCode::FORBIDDEN, "blocked\n", !cx.h2));
    }
    // A method that is not upper case (`post`, `Trace`): 400, as nginx answers it. An origin
    // that upper-cases methods would read it as the method our rules did not see.
    if !req
        .method()
        .as_str()
        .bytes()
        .all(|b| b.is_ascii_uppercase() || b == b'_' || b == b'-')
    {
        c.bump(Counter::RespBadRequest);
        return Err(simple(StatusCode::BAD_REQUEST, "bad method\n", !cx.h2));
    }
    // A head hyper read only in part or otherwise than nginx (Content-Length with
    // Transfer-Encoding or twice, framing nginx refuses, a fragment): 400 and close, as nginx
    // answers it, never forwarded by the framing hyper kept.
    if !cx.h2
        && let Some(odd) = cx.ctl.odd_head(cx.ctl.requests.load(Ordering::Relaxed))
    {
        return Err(match odd {
            OddHead::LengthAndCoding => {
                c.bump(Counter::RespBadRequest);
                simple(
                    StatusCode::BAD_REQUEST,
                    "Content-Length sent with Transfer-Encoding\n",
                    true,
                )
            }
            OddHead::LengthTwice => {
                c.bump(Counter::RespDuplicateHeader);
                simple(
                    StatusCode::BAD_REQUEST,
                    "a single-valued header was sent twice\n",
                    true,
                )
            }
            OddHead::Framing => {
                c.bump(Counter::RespBadRequest);
                simple(StatusCode::BAD_REQUEST, "malformed body framing\n", true)
            }
            OddHead::Fragment => {
                c.bump(Counter::RespBadPath);
                simple(
                    StatusCode::BAD_REQUEST,
                    "a fragment in the request target\n",
                    true,
                )
            }
        });
    }
    // An HTTP/2 field value that starts or ends with a space or tab is malformed (RFC 9113
    // §8.2.1): an HTTP/1.1 origin trims it, so it would read another value than the rules did.
    if cx.h2
        && req.headers().values().any(|v| {
            let b = v.as_bytes();
            matches!(b.first(), Some(b' ' | b'\t')) || matches!(b.last(), Some(b' ' | b'\t'))
        })
    {
        c.bump(Counter::RespBadRequest);
        return Err(simple(
            StatusCode::BAD_REQUEST,
            "a header value starts or ends with white space\n",
            false,
        ));
    }
    // An empty `:scheme` or a `:path` that is not absolute makes an HTTP/2 request malformed
    // (RFC 9113 §8.3.1; h2 passes `?x` as `/?x`), as nginx answers it.
    if cx.h2 && h2_malformed(req) {
        c.bump(Counter::RespBadRequest);
        return Err(simple(
            StatusCode::BAD_REQUEST,
            "malformed HTTP/2 request\n",
            false,
        ));
    }
    // CONNECT is never proxied, but for an HTTP/2 WebSocket (RFC 8441) to a site that allows it.
    if req.method() == Method::CONNECT && !forward::websocket::wants(req) {
        c.bump(Counter::RespBadRequest);
        return Err(simple(
            StatusCode::METHOD_NOT_ALLOWED,
            "CONNECT is not proxied\n",
            !cx.h2,
        ));
    }

    // 2. Host → site: one strict reading of the authority, or 400 (never another site).
    let snap = front.snapshot();
    // Only a sampled access record needs the duration.
    let t0 = (snap.sample_period > 0).then(Instant::now);
    let (host, raw_host) = match target::request_host(req, cx.h2, buf) {
        Ok(h) => h,
        Err(why) => {
            c.bump(Counter::RespBadHost);
            // As nginx: a malformed request ends its connection (400, 413, 414, 431, 501).
            return Err(simple(StatusCode::BAD_REQUEST, why, !cx.h2));
        }
    };
    let Some(site_ix) = snap.sites.index(host.name) else {
        c.bump(Counter::RespUnknownHost);
        return Err(simple(
            StatusCode::MISDIRECTED_REQUEST,
            "unknown host\n",
            false,
        ));
    };
    let site = snap.sites.get(site_ix);

    if req.method() == Method::CONNECT && site.websocket.is_none() {
        c.bump(Counter::RespMethodNotAllowed);
        return Err(simple(
            StatusCode::METHOD_NOT_ALLOWED,
            "WebSocket is not proxied for this site\n",
            !cx.h2,
        ));
    }
    if req.method() == Method::TRACE && !site.allow_trace {
        c.bump(Counter::RespMethodNotAllowed);
        return Err(simple(
            StatusCode::METHOD_NOT_ALLOWED,
            "TRACE is not allowed\n",
            !cx.h2,
        ));
    }

    // 3. Sizes, and what hyper leaves to us of the head.
    let limits = &snap.cfg.limits;
    if let Err((status, text)) = check_head(req, limits, c) {
        return Err(simple(status, text, !cx.h2));
    }
    if req.uri().path_and_query().map_or(1, |p| p.as_str().len()) > limits.max_uri_bytes {
        c.bump(Counter::LimitUriBytes);
        c.bump(Counter::RespUriTooLong);
        return Err(simple(
            StatusCode::URI_TOO_LONG,
            "request target too long\n",
            !cx.h2,
        ));
    }
    let request_bytes = req
        .headers()
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    if request_bytes.is_some_and(|n| n > limits.max_body_bytes) {
        c.bump(Counter::LimitBodyBytes);
        c.bump(Counter::RespBodyTooLarge);
        return Err(simple(
            StatusCode::PAYLOAD_TOO_LARGE,
            "request body too large\n",
            !cx.h2,
        ));
    }

    // 4. The path the rules see and the origin gets (400 for what cannot be both).
    let path = match target::request_path(req, site.path) {
        Ok(p) => p,
        Err(e) => {
            c.bump(Counter::RespBadPath);
            return Err(simple(StatusCode::BAD_REQUEST, bad_path_text(e), !cx.h2));
        }
    };
    Ok(Filtered {
        snap,
        site_ix,
        host,
        raw_host,
        path,
        request_bytes,
        t0,
    })
}

/// Phase 2, the rules of the site's tenant (skipped when it has none): the action taken for
/// the access record and whether a clearance let it through a challenge rule, or the answer
/// of a deny, challenge or rate limit.
#[allow(clippy::result_large_err)]
fn rules(
    cx: &ConnCtx,
    f: &Filtered<'_>,
    req: &Request<Incoming>,
) -> Result<(&'static str, Option<u64>), Response<RespBody>> {
    let front = &*cx.front;
    let c = &front.counters;
    let site = f.snap.sites.get(f.site_ix);
    let mut action = "pass";
    let mut cleared = None;
    if site.has_rules {
        let now = Now::read();
        let clearance = Clearance::new(
            &f.snap.cfg.challenge_keys,
            binding(cx, f),
            req.headers(),
            now.unix_ms / 1000,
            f.snap.cfg.challenge.difficulty,
        )
        .lasting(f.snap.cfg.challenge.clearance_secs)
        .over_https(cx.client.proto == "https");
        // What the rules see of values an origin decodes: headers not in UTF-8 (obs-text
        // bytes: made UTF-8, the bad bytes U+FFFD, rather than hidden from the rules), and the
        // query percent-decoded besides as sent (only when the tenant's rules read it).
        // Names with `_` also under their `-` spelling where the site passes them, and an
        // HTTP/2 WebSocket as the GET with Upgrade its origin gets.
        let lossy = crate::view::lossy_headers(req.headers());
        let base = lossy.as_ref().unwrap_or(req.headers());
        let folded = if site.headers.underscores() {
            crate::view::folded_headers(base)
        } else {
            None
        };
        let base = folded.as_ref().unwrap_or(base);
        // A rule on a forwarding header sees what the origin gets (ours, or the client's
        // where it passes): the client's own `X-Forwarded-Proto: https` over cleartext, or
        // `X-Real-IP: 10.1.1.1`, passed rules the origin's copy would have failed.
        let forwarding = site.reads_forwarding.then(|| {
            let mut h = base.clone();
            let host = upstream_host(&f.host, f.raw_host, cx.client.proto == "https");
            forward::set_forwarding(&mut h, &f.snap.cfg.forwarded, &cx.client, host.as_ref());
            h
        });
        let base = forwarding.as_ref().unwrap_or(base);
        let ws = (req.method() == Method::CONNECT && forward::websocket::wants(req))
            .then(|| crate::view::websocket_headers(base));
        let decoded = req
            .uri()
            .query()
            .filter(|_| site.reads_query)
            .and_then(crate::view::decoded_query);
        let mut view = HttpView::new(req, f.host.name, &f.path.view)
            .with_headers(ws.as_ref().unwrap_or(base))
            .with_decoded_query(decoded.as_deref())
            .with_clearance(&clearance)
            .with_fingerprints(cx.ja4.as_deref(), cx.h2_fingerprint.get().map(|s| &**s));
        if ws.is_some() {
            view = view.with_method(&Method::GET);
        }
        let v = local::with(front, |l| {
            let v = l.rules.check(site.tenant, cx.ip, &view, now);
            if let Some(a) = EventAction::from_rules(v.action) {
                // What the rules saw: the view's evidence.
                let evidence = shield::rules::Request::evidence(&view);
                l.recorder.record(site.tenant, cx.ip, a, evidence, v.code);
                if v.escalated == Escalated::Blocked {
                    l.recorder.record(
                        site.tenant,
                        cx.ip,
                        EventAction::Escalated,
                        Evidence::Http,
                        v.code,
                    );
                }
            }
            v
        });
        if v.escalated == Escalated::Blocked {
            c.bump(Counter::Escalations);
        }
        if let Some(until) = clearance.passed_until() {
            c.bump(Counter::ChallengeCleared);
            cleared = Some(until);
        }
        if clearance.over_bound() {
            c.bump(Counter::LimitClearanceCookies);
        }
        match v.action {
            Action::Pass => c.bump(Counter::VerdictPass),
            Action::Allow => {
                c.bump(Counter::VerdictAllow);
                action = "allow";
            }
            Action::Deny => {
                c.bump(Counter::VerdictDeny);
                c.bump(Counter::RespDenied);
                return Err(simple(StatusCode::FORBIDDEN, "forbidden\n", false));
            }
            Action::Challenge => {
                c.bump(Counter::VerdictChallenge);
                c.bump(Counter::RespChallenged);
                c.bump(Counter::ChallengeIssued);
                return Err(challenge_page(
                    &f.snap.cfg,
                    &clearance,
                    v.difficulty,
                    req.uri(),
                    now.unix_ms / 1000,
                ));
            }
            Action::RateLimit => {
                c.bump(Counter::VerdictRateLimit);
                c.bump(Counter::RespRateLimited);
                let mut r = simple(StatusCode::TOO_MANY_REQUESTS, "too many requests\n", false);
                // The limiter's own wait, in whole seconds; the site's value when it has none.
                let retry = match v.retry_after_ms {
                    0 => site.retry_after.clone(),
                    ms => HeaderValue::from(ms.div_ceil(1000)),
                };
                r.headers_mut().insert(header::RETRY_AFTER, retry);
                return Err(r);
            }
        }
    } else {
        c.bump(Counter::VerdictNoRules);
    }
    Ok((action, cleared))
}

/// What a request's challenge and clearance are bound to: its site, its client, the rules.
fn binding<'a>(cx: &ConnCtx, f: &'a Filtered<'_>) -> Binding<'a> {
    let site = f.snap.sites.get(f.site_ix);
    Binding {
        site: &site.name,
        ip: cx.ip,
        version: site.rules_version,
    }
}

/// The challenge page for a request that met a challenge rule without a clearance: 403 (what
/// a client without JavaScript keeps), never cached.
fn challenge_page(
    cfg: &crate::config::Config,
    clearance: &Clearance<'_>,
    difficulty: u8,
    uri: &http::Uri,
    now: u64,
) -> Response<RespBody> {
    let d = if difficulty == 0 {
        cfg.challenge.difficulty
    } else {
        difficulty
    };
    let token = challenge::token(&cfg.challenge_keys, clearance.binding(), now, d);
    let ret = challenge::safe_return(uri.path_and_query().map_or("/", |p| p.as_str()));
    let page = challenge::page(&token, d, ret, cfg.challenge.page_timeout_secs * 1000);
    let mut r = Response::new(RespBody::full(Bytes::from(page)));
    *r.status_mut() = StatusCode::FORBIDDEN;
    let h = r.headers_mut();
    h.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/html; charset=utf-8"),
    );
    h.insert(
        header::CACHE_CONTROL,
        HeaderValue::from_static("no-store, private"),
    );
    h.insert(
        header::HeaderName::from_static("x-robots-tag"),
        HeaderValue::from_static("noindex"),
    );
    r
}

/// A solution sent to [`challenge::VERIFY_PATH`]: a clearance cookie and a redirect back, or
/// 403.
fn challenge_verify(cx: &ConnCtx, f: &Filtered<'_>, req: &Request<Incoming>) -> Response<RespBody> {
    let c = &cx.front.counters;
    let cfg = &f.snap.cfg;
    let binding = binding(cx, f);
    let q = req.uri().query().unwrap_or("");
    let value = |k| challenge::query_value(q, k).unwrap_or_default();
    let now = shield::clock::unix_ms() / 1000;
    match challenge::check_solution(
        &cfg.challenge_keys,
        &binding,
        &value("t"),
        &value("n"),
        now,
        cfg.challenge.solve_secs,
    ) {
        Ok((difficulty, issued)) => {
            c.bump(Counter::ChallengeSolved);
            // From the token's issue: the same solution sent again earns no later clearance
            // (a solve bought `solve_secs` more on top, each resend a fresh cookie).
            let exp = issued.min(now) + cfg.challenge.clearance_secs;
            let cookie = format!(
                "{}={}; Path=/; Max-Age={}; HttpOnly; SameSite=Lax{}",
                challenge::cookie_name(&cfg.challenge_keys, &binding, cx.client.proto == "https"),
                challenge::clearance(&cfg.challenge_keys, &binding, exp, difficulty),
                exp.saturating_sub(now).max(1),
                if cx.client.proto == "https" {
                    "; Secure"
                } else {
                    ""
                }
            );
            let back = value("r");
            let mut r = simple(StatusCode::SEE_OTHER, "cleared\n", false);
            let h = r.headers_mut();
            if let Ok(v) = HeaderValue::from_str(challenge::safe_return(&back)) {
                h.insert(header::LOCATION, v);
            }
            if let Ok(v) = HeaderValue::from_str(&cookie) {
                h.insert(header::SET_COOKIE, v);
            }
            r
        }
        Err(e) => {
            c.bump(Counter::ChallengeFailed);
            tracing::debug!(source = %cx.ip, "challenge refused: {e}");
            simple(StatusCode::FORBIDDEN, "challenge failed\n", false)
        }
    }
}

/// Phase 3, logging: the parts of a sampled request kept for its access record (one request
/// in `sample_period` of the sites that log).
fn sample(
    cx: &ConnCtx,
    f: &Filtered<'_>,
    req: &Request<Incoming>,
    action: &'static str,
) -> Option<Box<Sampled>> {
    let front = &*cx.front;
    let snap = &f.snap;
    let site = snap.sites.get(f.site_ix);
    let (host, request_bytes, t0) = (&f.host, f.request_bytes, f.t0);
    let sample = site.access_log
        && snap.sample_period > 0
        && local::with(front, |l| {
            l.sample_tick += 1;
            l.access.is_some() && l.sample_tick.is_multiple_of(snap.sample_period)
        });
    sample.then(|| {
        let text = |n: header::HeaderName| {
            // As sent, invalid UTF-8 replaced: a User-Agent with one byte past ASCII was
            // logged as null, and hid a bot's name from the access log.
            req.headers()
                .get(n)
                .map(|v| String::from_utf8_lossy(v.as_bytes()).into_owned())
        };
        let scheme = cx.client.proto.to_str().unwrap_or("http");
        let pq = req.uri().path_and_query().map_or("/", |p| p.as_str());
        let url = match host.port {
            Some(p) => format!("{scheme}://{}:{p}{pq}", host.name),
            None => format!("{scheme}://{}{pq}", host.name),
        };
        Box::new(Sampled {
            ts_ms: shield::clock::unix_ms(),
            method: req.method().as_str().to_string(),
            url,
            user_agent: text(header::USER_AGENT),
            referer: text(header::REFERER),
            request_bytes,
            action,
            t0: t0.unwrap_or_else(Instant::now),
            proto: crate::view::version_str(req.version()),
        })
    })
}

/// Phase 4, the upstream request: the head as the origin gets it (the normalised path when
/// it changed), with what the forwarding needs.
fn upstream_request(
    cx: &ConnCtx,
    snap: Arc<Snapshot>,
    site: usize,
    mut req: Request<Incoming>,
    host: Option<HeaderValue>,
    forward: Option<String>,
    sampled: Option<Box<Sampled>>,
) -> Job {
    // A WebSocket to a site that proxies them: the client connection's upgrade is taken.
    let upgrade = (snap.sites.get(site).websocket.is_some() && forward::websocket::wants(&req))
        .then(|| Box::new(hyper::upgrade::on(&mut req)));
    let (mut parts, body) = req.into_parts();
    if let Some(p) = forward {
        cx.front.counters.bump(Counter::PathNormalized);
        set_path(&mut parts.uri, &p);
    }
    Job {
        site,
        snap,
        parts,
        body: Some(body),
        host,
        sampled,
        upgrade,
        cleared: false,
        cleared_until: None,
        allowed: false,
    }
}

/// Makes an answer a clearance cookie let through a challenge rule private to its client:
/// `Vary: Cookie` (unless there, or `*`), and `Cache-Control` without `public` or `s-maxage`
/// and with `private` (unless `no-store`) — kept by a shared cache before us (many ignore
/// `Vary: Cookie`), it was served to clients that never solved the challenge.
fn vary_cookie(h: &mut http::HeaderMap) {
    let tokens = |h: &http::HeaderMap, name: header::HeaderName| -> Vec<String> {
        h.get_all(name)
            .iter()
            .flat_map(|v| v.as_bytes().split(|&b| b == b','))
            .map(|t| String::from_utf8_lossy(t.trim_ascii()).into_owned())
            .filter(|t| !t.is_empty())
            .collect()
    };
    let vary = tokens(h, header::VARY);
    if !vary
        .iter()
        .any(|t| t == "*" || t.eq_ignore_ascii_case("cookie"))
    {
        h.append(header::VARY, HeaderValue::from_static("Cookie"));
    }
    let cc = tokens(h, header::CACHE_CONTROL);
    let name = |t: &str| {
        t.split('=')
            .next()
            .unwrap_or("")
            .trim()
            .to_ascii_lowercase()
    };
    if cc.iter().any(|t| name(t) == "no-store") {
        return;
    }
    let mut kept: Vec<&str> = cc
        .iter()
        .map(String::as_str)
        .filter(|t| !matches!(name(t).as_str(), "public" | "s-maxage" | "private"))
        .collect();
    kept.push("private");
    if let Ok(v) = HeaderValue::from_str(&kept.join(", ")) {
        h.insert(header::CACHE_CONTROL, v);
    }
}

/// The `Host` the upstream gets: lower case, no trailing dot, the port in decimal and only
/// when it is not the scheme's default (`https`: 443, else 80) — the client's own value when
/// it is already so (no copy).
fn upstream_host(host: &Host<'_>, raw: Option<&HeaderValue>, https: bool) -> Option<HeaderValue> {
    let default = if https { 443 } else { 80 };
    let port = host.port.filter(|&p| p != default);
    if host.canonical
        && port == host.port
        && let Some(v) = raw
    {
        return Some(v.clone());
    }
    let text = match port {
        Some(p) => format!("{}:{p}", host.name),
        None => host.name.to_string(),
    };
    HeaderValue::from_str(&text).ok()
}

/// An HTTP/2 request with an empty scheme or a path that does not start with `/` (RFC 9113
/// §8.3.1; h2 keeps no scheme for a request that names its host by `host` alone). (Connection-specific fields, which h2 misses in a header block whose first
/// fragment ends inside a field, hyper strips before the request reaches us.)
fn h2_malformed<B>(req: &Request<B>) -> bool {
    let uri = req.uri();
    req.method() != Method::CONNECT
        && (uri.scheme_str() == Some("")
            || uri
                .path_and_query()
                .is_none_or(|pq| !pq.as_str().starts_with('/') && pq.as_str() != "*"))
}

/// Request headers that may appear once only: a second copy is refused (400) rather than
/// matched by the rules in one copy and read by the origin in the other.
const SINGLE_VALUED: &[header::HeaderName] = &[
    header::USER_AGENT,
    header::CONTENT_LENGTH,
    header::CONTENT_TYPE,
    header::AUTHORIZATION,
    header::PROXY_AUTHORIZATION,
    header::REFERER,
    header::ORIGIN,
    header::RANGE,
    header::IF_RANGE,
    header::IF_MODIFIED_SINCE,
    header::IF_UNMODIFIED_SINCE,
    header::MAX_FORWARDS,
    header::FROM,
    header::CONTENT_RANGE,
    header::EXPECT,
    header::IF_MATCH,
    header::IF_NONE_MATCH,
];

/// The head checks hyper leaves to us: header bytes (431; hyper's own limit also covers the
/// URI, which has its own), more copies of one header than the rules look at (431),
/// single-valued headers sent twice (400), and `Transfer-Encoding`
/// other than one final `chunked` (501, as nginx; `chunked` twice: 400).
fn check_head<B>(
    req: &Request<B>,
    limits: &crate::config::Limits,
    c: &crate::counters::Counters,
) -> Result<(), (StatusCode, &'static str)> {
    let h = req.headers();
    let (mut bytes, mut longest) = (0, 0);
    for (n, v) in h {
        let field = n.as_str().len() + v.len() + 4;
        bytes += field;
        longest = longest.max(field);
    }
    if longest > limits.max_header_field_bytes {
        // One field longer than nginx's header buffer: nginx refuses it (400), so the
        // origin behind it never met one.
        c.bump(Counter::LimitHeaderField);
        c.bump(Counter::RespHeaderTooLarge);
        return Err((
            StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE,
            "a request header field too large\n",
        ));
    }
    if bytes > limits.max_header_bytes {
        c.bump(Counter::LimitHeaderBytes);
        c.bump(Counter::RespHeaderTooLarge);
        return Err((
            StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE,
            "request headers too large\n",
        ));
    }
    // More copies of one header than the rules look at: one past the bound would go
    // unchecked to the origin (which may join them all).
    if h.len() != h.keys_len()
        && h.len() > shield::rules::MAX_VALUES
        && h.keys()
            .any(|n| h.get_all(n).iter().nth(shield::rules::MAX_VALUES).is_some())
    {
        c.bump(Counter::LimitHeaderCopies);
        c.bump(Counter::RespHeaderTooLarge);
        return Err((
            StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE,
            "too many copies of a request header\n",
        ));
    }
    if h.len() != h.keys_len()
        && let Some(n) = SINGLE_VALUED
            .iter()
            .find(|n| h.get_all(*n).iter().nth(1).is_some())
    {
        c.bump(Counter::RespDuplicateHeader);
        tracing::debug!(header = %n, "single-valued header sent twice");
        return Err((
            StatusCode::BAD_REQUEST,
            "a single-valued header was sent twice\n",
        ));
    }
    let mut chunked = 0;
    for v in h.get_all(header::TRANSFER_ENCODING) {
        for t in v.as_bytes().split(|&b| b == b',').map(<[u8]>::trim_ascii) {
            if t.is_empty() {
                continue;
            }
            if !t.eq_ignore_ascii_case(b"chunked") {
                c.bump(Counter::RespNotImplemented);
                return Err((
                    StatusCode::NOT_IMPLEMENTED,
                    "transfer coding not implemented\n",
                ));
            }
            chunked += 1;
        }
    }
    if chunked > 1 {
        c.bump(Counter::RespBadRequest);
        return Err((StatusCode::BAD_REQUEST, "chunked applied twice\n"));
    }
    Ok(())
}

/// Our answer to a request whose body failed (the connection closes: the rest of the body
/// is not read).
fn body_refused(c: &crate::counters::Counters, e: BodyError) -> Response<RespBody> {
    match e {
        BodyError::Malformed => {
            c.bump(Counter::RespBadBody);
            simple(StatusCode::BAD_REQUEST, "malformed request body\n", true)
        }
        BodyError::TooLarge => {
            c.bump(Counter::LimitBodyBytes);
            c.bump(Counter::RespBodyTooLarge);
            simple(
                StatusCode::PAYLOAD_TOO_LARGE,
                "request body too large\n",
                true,
            )
        }
        BodyError::Timeout => {
            c.bump(Counter::LimitBodyTimeout);
            c.bump(Counter::RespBodyTimeout);
            simple(
                StatusCode::REQUEST_TIMEOUT,
                "request body timed out\n",
                true,
            )
        }
        BodyError::TooSlow => {
            c.bump(Counter::LimitBodyMinRate);
            c.bump(Counter::RespBodyTimeout);
            simple(StatusCode::REQUEST_TIMEOUT, "request body too slow\n", true)
        }
        // Nobody reads it: marked so that its flight counts as a premature reset.
        BodyError::Reset => {
            let mut r = simple(StatusCode::BAD_REQUEST, "stream reset\n", true);
            r.extensions_mut().insert(ClientReset);
            r
        }
    }
}

/// Marks a response to a request whose stream its client reset before the body ended.
#[derive(Debug, Clone, Copy)]
struct ClientReset;

/// Replaces the path of `uri`, keeping its query.
fn set_path(uri: &mut http::Uri, path: &str) {
    let pq = match uri.query() {
        Some(q) => format!("{path}?{q}"),
        None => path.to_string(),
    };
    let mut parts = std::mem::take(uri).into_parts();
    parts.path_and_query = http::uri::PathAndQuery::from_maybe_shared(pq).ok();
    if let Ok(u) = http::Uri::from_parts(parts) {
        *uri = u;
    }
}

fn bad_path_text(e: target::PathError) -> &'static str {
    match e {
        target::PathError::NotAbsolute => "request target is not an absolute path\n",
        target::PathError::BadPercent => "invalid percent-encoding in the path\n",
        target::PathError::Control => "an encoded control character in the path\n",
        target::PathError::EncodedSlash => "encoded slash or backslash in the path\n",
        target::PathError::NotUtf8 => "path is not UTF-8\n",
        target::PathError::AboveRoot => "path climbs above the root\n",
    }
}

/// The request (`parts`, `body`, the upstream's `host`) to `site`: its body read under its
/// bounds, then the exchange with the HTTP/1.1 or h2c upstream.
async fn exchange(
    cx: &ConnCtx,
    snap: &Snapshot,
    site: &crate::site::PreparedSite,
    parts: &mut http::request::Parts,
    body: Option<Incoming>,
    host: &mut Option<HeaderValue>,
) -> Result<Response<RespBody>, ForwardError> {
    let front = &*cx.front;
    let c = &front.counters;
    let up = &*site.upstream;
    let fwd = &snap.cfg.forwarded;
    let srv = &snap.cfg.server;
    let limits = BodyLimits {
        max_body: snap.cfg.limits.max_body_bytes,
        buffer: srv.body_buffer_bytes,
        buffer_total: srv.body_buffer_total_bytes,
        min_rate: srv.body_min_rate_bytes_per_sec,
        timeout: Duration::from_millis(srv.body_timeout_ms),
        source_share: !cx.hop,
    };
    let mut body = ClientBody::new(
        &front.counters,
        &front.body_buffered,
        &cx.ctl.uploads,
        body,
        limits,
    );
    // The body is read before the upstream is contacted (up to its buffer): a malformed or
    // slow one never reaches the origin.
    let buffered = if body.is_empty() {
        Ok(())
    } else {
        match body.buffer().await {
            Ok(whole) => {
                c.bump(if whole {
                    Counter::BodiesBuffered
                } else {
                    Counter::BodiesStreamed
                });
                Ok(())
            }
            Err(e) => Err(ForwardError::Body(e)),
        }
    };
    match buffered {
        Err(e) => Err(e),
        Ok(()) if up.is_h2() => {
            let parts = std::mem::replace(parts, Request::new(()).into_parts().0);
            let watch = body.watch();
            let req = Request::from_parts(parts, body);
            // Boxed: the h2c path is the rarer one, and its future is large.
            let r = Box::pin(forward::h2::forward(
                up,
                req,
                host.take(),
                fwd,
                &site.headers,
                &cx.client,
            ))
            .await;
            match (r, watch.get()) {
                (Err(_), Some(e)) => Err(ForwardError::Body(e)),
                (r, _) => r,
            }
        }
        Ok(()) => {
            h1::forward(
                up,
                parts,
                &mut body,
                host.as_ref(),
                fwd,
                &site.headers,
                &cx.client,
            )
            .await
        }
    }
}

/// Forwards `job` to its site's upstream; the response, or ours when that fails.
async fn proxy(cx: &ConnCtx, job: &mut Job) -> Response<RespBody> {
    let front = &*cx.front;
    let c = &front.counters;
    let snap = &*job.snap;
    let site = snap.sites.get(job.site);
    let up = &*site.upstream;
    let fwd = &snap.cfg.forwarded;
    let srv = &snap.cfg.server;
    // One source's requests waiting on origins at once: its connections' HTTP/2 streams
    // would otherwise hold as many origin connections as it likes.
    // A listed hop's connection carries many clients: bounded in total only.
    let per_source = if cx.hop {
        u32::MAX
    } else {
        srv.max_upstream_per_source
    };
    let Some(waiting) = SourceWaiting::take(&cx.ctl.upstream, per_source) else {
        c.bump(Counter::LimitUpstreamPerSource);
        return simple(
            StatusCode::SERVICE_UNAVAILABLE,
            "too many requests of this source at the origin\n",
            false,
        );
    };
    // One site's requests waiting on its origin at once: each holds its client's connection
    // (busy: no eviction takes it), and a site whose origin hangs took every connection
    // place, the other sites' new clients refused at accept. Past the bound the connection
    // closes with the 503, giving its place back.
    let Some(site_waiting) = snap.sites.take_place(site) else {
        c.bump(Counter::LimitSiteInFlight);
        shield::limited!(
            1,
            warn!(site = %site.name, bound = site.max_in_flight, "site's requests waiting on its origin at their bound (max_requests_in_flight, or seven eighths of max_connections for every site's together): 503")
        );
        return simple(
            StatusCode::SERVICE_UNAVAILABLE,
            "too many requests waiting on this site's origin\n",
            true,
        );
    };
    // The site's place goes with the source's: held until the origin's body is read, or
    // while the tunnel is open (a trickling body, an idle WebSocket, hold the client's
    // connection as a hung origin does).
    let mut waiting = Some(waiting.with(site_waiting));
    let result = match (job.upgrade.take(), site.websocket) {
        // Boxed: a WebSocket is the rare path, and its future is large.
        (Some(on), Some(bounds)) => {
            // An HTTP/2 connection's tunnels (extended CONNECT) past its first take a
            // connection place of their own: its streams would otherwise hold as many origin
            // connections as it has streams, past every per-source and total bound.
            let (busy, first) = cx.ctl.tunnel_started_first();
            let place = if job.parts.method == http::Method::CONNECT && !first {
                match front.registry.register(
                    cx.ip,
                    srv.max_connections,
                    srv.max_connections_per_source,
                ) {
                    Ok(r) => Some(r.guard),
                    Err(refused) => {
                        c.bump(match refused {
                            crate::conn_registry::Refused::Total => Counter::LimitMaxConnections,
                            crate::conn_registry::Refused::PerSource => Counter::LimitPerSource,
                        });
                        return simple(
                            StatusCode::SERVICE_UNAVAILABLE,
                            "too many connections of this source\n",
                            false,
                        );
                    }
                }
            } else {
                None
            };
            Box::pin(forward::websocket::open(
                up,
                &job.parts,
                *on,
                job.host.as_ref(),
                fwd,
                &site.headers,
                &cx.client,
                forward::websocket::Tunnel {
                    ctl: Arc::clone(&cx.ctl),
                    busy,
                    counters: Arc::clone(&front.counters),
                    bounds,
                    cleared_until: job.cleared_until,
                    waiting: waiting.take(),
                    place,
                    held: {
                        let (rules, tenant, ip) = (Arc::clone(&front.rules), site.tenant, cx.ip);
                        // Nor for a tunnel whose upgrade passed a challenge or hold on its
                        // clearance: its requests pass a hold the same way.
                        let allowed = job.allowed || job.cleared;
                        // Asked again only once a hold was made since (an idle tunnel's check
                        // is a load), and never for what an allow list or rule let through.
                        let seen = std::sync::atomic::AtomicU64::new(u64::MAX);
                        Box::new(move || {
                            let epoch = rules.hold_epoch();
                            if allowed || seen.swap(epoch, Ordering::Relaxed) == epoch {
                                return false;
                            }
                            rules.held(tenant, ip, (shield::clock::unix_ms() / 1000) as u32)
                        })
                    },
                },
            ))
            .await
        }
        _ => {
            let body = job.body.take();
            exchange(cx, snap, site, &mut job.parts, body, &mut job.host).await
        }
    };
    let resp = match result {
        Ok(r) => {
            c.bump(Counter::RespProxied);
            let (mut parts, b) = r.into_parts();
            if job.cleared {
                vary_cookie(&mut parts.headers);
            }
            let b = match b {
                // A streamed upstream body goes through a relay, so that a client that does
                // not read cannot hold the upstream connection.
                // It keeps the source's place among requests at origins until the origin's
                // body is read.
                b @ (RespBody::H1(_) | RespBody::H2(_)) if waiting.is_some() => {
                    RespBody::Relay(relay::relay(
                        &front.counters,
                        &front.response_buffered,
                        &cx.ctl,
                        waiting.take().expect("checked"),
                        b,
                        relay::RelayLimits {
                            buffer: srv.response_buffer_bytes,
                            buffer_total: srv.response_buffer_total_bytes,
                            send_timeout: Duration::from_millis(srv.send_timeout_ms),
                            min_rate: srv.send_min_rate_bytes_per_sec,
                            source_share: !cx.hop,
                        },
                    ))
                }
                b => b,
            };
            Response::from_parts(parts, b)
        }
        Err(ForwardError::Timeout) => {
            c.bump(Counter::RespUpstreamTimeout);
            simple(StatusCode::GATEWAY_TIMEOUT, "upstream timed out\n", false)
        }
        Err(ForwardError::Upstream) => {
            c.bump(Counter::RespUpstreamError);
            simple(StatusCode::BAD_GATEWAY, "upstream unavailable\n", false)
        }
        Err(ForwardError::AtCapacity) => {
            c.bump(Counter::LimitUpstreamConnections);
            shield::limited!(
                1,
                warn!(
                    open = crate::forward::upstream::open_connections(),
                    "upstream connections at their bound (the upstream's three-quarter share of max_connections plus the idle pools, or all of it): requests answered 503"
                )
            );
            simple(
                StatusCode::SERVICE_UNAVAILABLE,
                "too many upstream connections\n",
                false,
            )
        }
        Err(ForwardError::Body(e)) => body_refused(c, e),
    };
    if let Some(s) = job.sampled.take() {
        let s = *s;
        let rec = AccessRecord {
            kind: "http_front.access",
            timestamp: access_log::rfc3339_ms(s.ts_ms),
            ts_ms: s.ts_ms,
            site: Arc::clone(&site.name),
            tenant: site.tenant_id,
            client: cx.ip,
            method: s.method,
            url: s.url,
            proto: s.proto,
            status: resp.status().as_u16(),
            duration_ms: access_log::duration_ms(s.t0.elapsed()),
            upstream: up.cfg.name.clone(),
            action: s.action,
            user_agent: s.user_agent,
            referer: s.referer,
            request_bytes: s.request_bytes,
            response_bytes: resp
                .headers()
                .get(header::CONTENT_LENGTH)
                .and_then(|v| v.to_str().ok())
                .and_then(|v| v.parse().ok()),
            ja4: cx.ja4.as_deref().map(str::to_string),
            h2_fingerprint: cx.h2_fingerprint.get().map(|s| s.to_string()),
        };
        local::with(front, |l| {
            if let Some(tx) = &l.access {
                access_log::send(tx, rec, c);
            }
        });
    }
    resp
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The origin gets one spelling of a site's host: lower case, no trailing dot, the port
    /// only when it is not the scheme's default, in decimal (nginx's `$host` drops it).
    #[test]
    fn the_upstream_host_is_one_spelling_of_the_site() {
        let up = |raw: &str, https: bool| {
            let mut b = [0u8; crate::target::HOST_MAX];
            let v = HeaderValue::from_str(raw).unwrap();
            let h = crate::target::parse_host(raw, &mut b).unwrap();
            upstream_host(&h, Some(&v), https).map(|v| v.to_str().unwrap().to_string())
        };
        for (raw, https, want) in [
            ("a.test", true, "a.test"),
            ("a.test:0443", true, "a.test"),
            ("a.test:443", true, "a.test"),
            ("a.test:443", false, "a.test:443"),
            ("a.test:80", false, "a.test"),
            ("a.test:00000", true, "a.test"),
            ("A.TEST.:28443", true, "a.test:28443"),
            ("a.test:08443", false, "a.test:8443"),
            ("[::1]:443", true, "[::1]"),
        ] {
            assert_eq!(up(raw, https).as_deref(), Some(want), "{raw} {https}");
        }
    }

    fn after(headers: &[(&str, &str)]) -> (Vec<String>, Option<String>) {
        let mut h = http::HeaderMap::new();
        for (k, v) in headers {
            h.append(
                header::HeaderName::from_bytes(k.as_bytes()).unwrap(),
                HeaderValue::from_str(v).unwrap(),
            );
        }
        vary_cookie(&mut h);
        let vary = h
            .get_all(header::VARY)
            .iter()
            .map(|v| v.to_str().unwrap().to_string())
            .collect();
        let cc = h
            .get(header::CACHE_CONTROL)
            .map(|v| v.to_str().unwrap().to_string());
        (vary, cc)
    }

    #[test]
    fn a_cleared_answer_varies_by_cookie_and_is_private() {
        assert_eq!(after(&[]), (vec!["Cookie".into()], Some("private".into())));
        let (vary, cc) = after(&[
            ("vary", "Accept-Encoding"),
            ("cache-control", "public, max-age=600, s-maxage=3600"),
        ]);
        assert_eq!(vary, ["Accept-Encoding", "Cookie"]);
        assert_eq!(cc.as_deref(), Some("max-age=600, private"));
        // Said already, or everything varies; no-store kept as it is.
        assert_eq!(
            after(&[("vary", "accept, COOKIE"), ("cache-control", "no-store")]),
            (vec!["accept, COOKIE".into()], Some("no-store".into()))
        );
        assert_eq!(after(&[("vary", "*")]).0, ["*"]);
        let (_, cc) = after(&[("cache-control", "private, max-age=5")]);
        assert_eq!(cc.as_deref(), Some("max-age=5, private"));
    }
}
