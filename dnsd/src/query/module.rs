//! The named points of the query pipeline and what a module sees at each, as Knot DNS's
//! `query_module.h` names them: a defence is one type implementing [`QueryModule`], added
//! to the plan in [`crate::query::defence::Plan`].
//!
//! | point | when | what is known | a module may |
//! |---|---|---|---|
//! | `on_accept` | a TCP connection is accepted | the source | drop it (close) |
//! | `before_parse` | a datagram or TCP message arrived | the source, the transport | drop it; mark the source a suspect ([`Env::suspect`]) |
//! | `after_parse` | header, question and OPT parsed, zone found | [`Parsed`]: query, zone, tenant, cookie, suspicion | drop, slip (TC / BADCOOKIE), truncate (a suspect's TC=1), refuse with an rcode, exempt the query from later checks |
//! | `after_answer` | the answer is written (not sent) | [`Answered`]: its class and key for rate limiting | drop, slip, truncate |
//!
//! Every reply goes through `after_answer`, error replies included (as an error class), so
//! that a flood of malformed queries is rate limited like any other. What a step decides is
//! carried out once, in one place of [`crate::query::process_query`] (with [`crate::query::response`]'s
//! slip, BADCOOKIE and truncated replies, OPT, the size limit), never by the module. Modules
//! count their own decisions and record their own events; nothing here allocates or takes a
//! lock.
//!
//! # Evidence
//!
//! A UDP source address proves nothing: it may be forged. [`Parsed::evidence`] says what
//! does — a completed TCP handshake, or a valid server cookie — and defences never block on
//! less: unproven evidence only makes a *suspect* (see [`shield::block`]), whose UDP queries
//! are answered TC=1 ([`Step::Truncate`], never more bytes than the query) so that a real
//! client comes back over TCP, where it is served.

use std::net::IpAddr;

use shield::block::{Evidence, Scope};
use shield::events::Recorder;

use crate::config::defence::CookiePolicy;
use crate::observe::counters::DropCause;
use crate::query::wire::Query;

/// Which transport a query came over.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Transport {
    /// UDP: size-limited, truncation and rate limiting apply.
    Udp,
    /// TCP: up to 65535 bytes.
    Tcp,
}

/// What a query's COOKIE option proved.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CookieStatus {
    /// No COOKIE option (or cookies are off).
    Absent,
    /// A client cookie alone (first contact).
    ClientOnly,
    /// A server cookie we made, still fresh.
    Valid,
    /// A server cookie that is not ours, expired, or malformed.
    Invalid,
}

/// What a module decided at a point.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Step {
    /// Go on to the next module and the next point.
    Continue,
    /// Send nothing (TCP at accept: close), counted under this cause.
    Drop(DropCause),
    /// Answer with a minimal TC=1 reply — BADCOOKIE with a fresh cookie to a client that
    /// sent one — so that a real client proves itself (over TCP, or with our cookie).
    Slip,
    /// As [`Step::Slip`], for a query a rate limit already counted and slipped one in its
    /// `slip` (a rule's `rate_limit`): not rate limited again by RRL (the two stacked, and a
    /// resolver under a forged flood got one TC=1 in four, not in two).
    SlipRated,
    /// Answer with this rcode and nothing else.
    Refuse(u16),
    /// Answer TC=1 with the question alone, never more bytes than the query (a suspect's UDP,
    /// a flooder's NXDOMAIN), within the suspects' budget per source prefix (past it: a
    /// counted drop). A real client retries over TCP and is served.
    Truncate,
    /// As [`Step::Truncate`], outside the suspects' budget and RRL: a UDP answer to a
    /// source its tenant's rules hold (`dns_hold = "truncate"`) for a name that does not
    /// exist or a wildcard's or DNAME's, sent to TCP where its connections are counted — its answers
    /// for names that exist go back whole, so a forwarder held for one user keeps serving
    /// the others.
    Held,
}

/// Per-worker state every module may use: the clocks read once per batch, and the worker's
/// event recorder.
pub struct Env {
    /// Wall clock, unix ms.
    pub now_ms: u64,
    /// Monotonic clock, µs.
    pub now_us: u64,
    /// The worker's event recorder (per-thread shard of the aggregator).
    pub recorder: Recorder,
    /// What `before_parse` found of the message's source: a suspect, and of what scope
    /// (reset for every message).
    pub suspect: Option<Scope>,
    /// The tenants whose zones the suspect is one for by their rules (and whether only
    /// theirs).
    pub suspect_tenants: shield::block::TenantSet,
}

impl Env {
    /// An environment recording into `recorder`, with the clocks read now.
    pub fn new(recorder: Recorder) -> Env {
        let mut e = Env {
            now_ms: 0,
            now_us: 0,
            recorder,
            suspect: None,
            suspect_tenants: shield::block::TenantSet::default(),
        };
        e.tick();
        e
    }

    /// Reads the clocks (once per batch).
    #[inline]
    pub fn tick(&mut self) {
        self.now_ms = shield::clock::unix_ms();
        self.now_us = shield::clock::mono_us();
    }
}

/// A server cookie to answer with: the client's cookie and ours.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CookieOut {
    /// The client cookie, echoed.
    pub client: [u8; 8],
    /// Our fresh server cookie.
    pub server: [u8; 16],
}

/// A parsed query as modules see it after parsing.
pub struct Parsed<'a> {
    /// The message as received.
    pub req: &'a [u8],
    /// Header, question and OPT (for a query that failed to parse: what was read).
    pub q: &'a Query,
    /// The source address.
    pub src: IpAddr,
    /// The service address the query was sent to, when the transport says.
    pub local: Option<IpAddr>,
    /// UDP or TCP.
    pub transport: Transport,
    /// Id of the zone that answers, when one does (unique for the process's life: state
    /// keyed by it never moves to another zone).
    pub zone: Option<u32>,
    /// The answering zone's apex (lower-case wire), empty without a zone.
    pub apex: &'a [u8],
    /// The zone's tenant (0: none).
    pub tenant: u32,
    /// The zone's cookie policy (`on` without a zone).
    pub cookie_policy: CookiePolicy,
    /// What the client's cookie proved.
    pub cookie: CookieStatus,
    /// The cookie to answer with, when cookies are on and the client sent one.
    pub cookie_out: Option<CookieOut>,
    /// Set by a module that vouches for the query (a valid server cookie, an `allow` rule):
    /// the rate defences after answering leave it alone.
    pub exempt: bool,
    /// The source is a suspect (unproven evidence in the block map): `Dns`, every UDP query
    /// without a valid cookie is truncated; `Nxdomain`, only its NXDOMAIN answers are.
    pub suspect: Option<Scope>,
    /// Held for its tenant by the rules (`dns_hold = "truncate"`): over UDP only an answer
    /// for a name that exists goes back whole, anything else TC=1.
    pub held: bool,
}

impl<'a> Parsed<'a> {
    /// A message that names no zone (an error reply's, a query for our cookie alone): no
    /// tenant, cookies on, nothing checked yet.
    pub fn zoneless(
        req: &'a [u8],
        q: &'a crate::query::wire::Query,
        src: std::net::IpAddr,
        local: Option<std::net::IpAddr>,
        transport: Transport,
        suspect: Option<shield::block::Scope>,
    ) -> Parsed<'a> {
        Parsed {
            req,
            q,
            src,
            local,
            transport,
            zone: None,
            apex: b"",
            tenant: 0,
            cookie_policy: crate::config::defence::CookiePolicy::On,
            cookie: CookieStatus::Absent,
            cookie_out: None,
            exempt: false,
            suspect,
            held: false,
        }
    }
}

impl Parsed<'_> {
    /// What proves the source owns its address: a completed TCP handshake, a valid server
    /// cookie, or nothing (UDP: the address may be forged).
    #[inline]
    pub fn evidence(&self) -> Evidence {
        match (self.transport, self.cookie) {
            (Transport::Tcp, _) => Evidence::Tcp,
            (_, CookieStatus::Valid) => Evidence::Cookie,
            _ => Evidence::Udp,
        }
    }
}

/// Which rate an answer counts against (RRL's classes).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AnswerClass {
    /// Answers and NODATA, keyed by name (and type, for positive answers).
    Answer,
    /// NXDOMAIN, keyed by zone.
    NxDomain,
    /// Referrals, keyed by zone.
    Referral,
    /// Error replies (FORMERR, REFUSED, SERVFAIL, NOTIMP…), keyed by class alone.
    Error,
}

/// A written answer as modules see it.
#[derive(Debug, Clone, Copy)]
pub struct Answered<'a> {
    /// Its class.
    pub class: AnswerClass,
    /// The rate-limiting key within the class: the qname (answers), the zone apex
    /// (NXDOMAIN, referrals), nothing (errors).
    pub key: &'a [u8],
    /// The response code written.
    pub rcode: u16,
    /// The qtype within the key: positive answers only (0 otherwise: NODATA, NXDOMAIN and
    /// referrals answer no type, so that random qtypes cannot spread one flood over many
    /// accounts — BIND counts them so).
    pub qtype: u16,
    /// Made from a wildcard or a DNAME: the name asked need not exist (random names answer
    /// too).
    pub synthesized: bool,
}

/// One module of the pipeline: each point defaults to [`Step::Continue`].
pub trait QueryModule {
    /// A TCP connection from `src` was accepted (nothing read yet).
    #[inline]
    fn on_accept(&mut self, _env: &mut Env, _src: IpAddr) -> Step {
        Step::Continue
    }

    /// A message from `src` arrived over `transport` (nothing parsed yet).
    #[inline]
    fn before_parse(&mut self, _env: &mut Env, _src: IpAddr, _transport: Transport) -> Step {
        Step::Continue
    }

    /// The query is parsed and its zone and tenant known.
    #[inline]
    fn after_parse(&mut self, _env: &mut Env, _p: &mut Parsed<'_>) -> Step {
        Step::Continue
    }

    /// The answer is written and about to be sent.
    #[inline]
    fn after_answer(&mut self, _env: &mut Env, _p: &Parsed<'_>, _a: &Answered<'_>) -> Step {
        Step::Continue
    }
}
