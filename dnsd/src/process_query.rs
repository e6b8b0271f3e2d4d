//! The pipeline a query walks, shared by UDP and TCP: the named points of
//! [`crate::query_module`] with the defences of [`crate::defence`] plugged in, parsing,
//! answering, and the glue of [`crate::response`].
//!
//! 1. `before_parse` — the block map, on the source address alone;
//! 2. parse header, question and OPT ([`crate::wire`]); a malformed message is dropped or
//!    answered FORMERR;
//! 3. EDNS version, opcode, class and meta types; transfers, NOTIFY and TSIG go to
//!    [`crate::transfer`];
//! 4. the zone that answers, its tenant; `after_parse` — cookies (and whatever else
//!    decides on the query itself);
//! 5. answer from the zones ([`crate::internet`]);
//! 6. `after_answer` — the random-subdomain defence and RRL, which may turn the response into
//!    a slip (TC=1, or BADCOOKIE to a client that sent a cookie) or a drop;
//! 7. OPT (with our cookie) appended, counters bumped.
//!
//! Error replies walk `after_answer` too, as the error class.

use std::net::SocketAddr;
use std::sync::Arc;

use arc_swap::ArcSwap;
use zones::rrtype::t;

use crate::config::defence::CookiePolicy;
use crate::defence;
use crate::internet::{self, Kind};
use crate::query_module::{AnswerClass, Answered, CookieStatus, Parsed, Step};
use crate::response::{self, Writer};
use crate::stats::{DropCause, WorkerStats};
use crate::wire::{self, ParseError, Query, opcode, rcode};
use crate::zoneset::ZoneSet;

pub use crate::query_module::Transport;
pub use crate::response::opt_rr;

/// Settings the pipeline reads on every query (prepared once per config load).
#[derive(Debug, Clone)]
pub struct PipelineConfig {
    /// Our EDNS UDP payload size (what we advertise and the most we send).
    pub udp_payload: u16,
}

impl Default for PipelineConfig {
    fn default() -> Self {
        PipelineConfig { udp_payload: 1232 }
    }
}

/// One query processor per worker thread (or TCP connection): owns its scratch space and
/// its instance of every defence module.
pub struct Processor {
    zones: Arc<ArcSwap<ZoneSet>>,
    snapshot: Arc<ZoneSet>,
    cfg: Arc<PipelineConfig>,
    stats: Arc<WorkerStats>,
    plan: Option<defence::Plan>,
    q: Box<Query>,
    xfr: Option<Arc<crate::xfr::Transfers>>,
    job: Option<Box<crate::xfr::axfr::Job>>,
}

/// The outcome of processing one message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// Send this many bytes of the output buffer.
    Reply(usize),
    /// Send nothing.
    Drop,
    /// Stream a zone transfer (TCP only): take it with [`Processor::take_transfer`].
    Transfer,
}

impl Processor {
    /// A processor reading zones from `zones`, with the flood defences when given.
    pub fn new(
        zones: Arc<ArcSwap<ZoneSet>>,
        cfg: Arc<PipelineConfig>,
        stats: Arc<WorkerStats>,
        defence: Option<&Arc<defence::Shared>>,
    ) -> Processor {
        let snapshot = zones.load_full();
        Processor {
            zones,
            snapshot,
            cfg,
            stats,
            plan: defence.map(|d| d.plan()),
            q: Box::default(),
            xfr: None,
            job: None,
        }
    }

    /// Hands transfers, NOTIFY and TSIG-signed messages to `x` (without it they are refused).
    pub fn with_transfers(mut self, x: Arc<crate::xfr::Transfers>) -> Processor {
        self.xfr = Some(x);
        self
    }

    /// The transfer the last [`Outcome::Transfer`] asked for.
    pub fn take_transfer(&mut self) -> Option<Box<crate::xfr::axfr::Job>> {
        self.job.take()
    }

    /// Picks up a newer zone set if one was published and reads the clock (once per batch).
    #[inline]
    pub fn refresh(&mut self) {
        let cur = self.zones.load();
        if cur.generation() != self.snapshot.generation() {
            self.snapshot = arc_swap::Guard::into_inner(cur);
        }
        if let Some(p) = &mut self.plan {
            p.refresh();
        }
    }

    /// Processes one message from `src` into `out`.
    pub fn process(
        &mut self,
        req: &[u8],
        src: SocketAddr,
        transport: Transport,
        out: &mut [u8],
    ) -> Outcome {
        let stats = &*self.stats;
        // 1. Before parsing: a blocked source costs one lookup and nothing else.
        if let Some(p) = &mut self.plan
            && let Step::Drop(why) = p.before_parse(src.ip())
        {
            stats.dropped(why);
            return Outcome::Drop;
        }
        // 2. Parse.
        let (err, question, edns) = match wire::parse_query(req, &mut self.q) {
            Ok(()) => (None, true, self.q.edns.is_some()),
            Err(ParseError::Drop) => {
                stats.dropped(DropCause::Malformed);
                return Outcome::Drop;
            }
            Err(ParseError::FormErr { question, edns }) => (Some(rcode::FORMERR), question, edns),
            Err(ParseError::NotImp { edns }) => (Some(rcode::NOTIMP), false, edns),
        };
        let q = &*self.q;
        stats.query(if err.is_some() { 0 } else { q.qtype });
        // 3. EDNS version, opcode, class, meta types.
        let refuse = err.or_else(|| match () {
            _ if q.edns.is_some_and(|e| e.version > 0) => Some(rcode::BADVERS),
            _ => None,
        });
        if let Some(rc) = refuse {
            return self.error_reply(req, out, rc, question, edns, transport, src);
        }
        // Transfers, NOTIFY and TSIG-signed messages go to the transfer code.
        if let Some(x) = &self.xfr
            && crate::xfr::wants(q, transport)
        {
            let c = crate::xfr::Ctx {
                x,
                req,
                q,
                src,
                transport,
                zones: &self.snapshot,
                stats,
                udp_payload: self.cfg.udp_payload,
            };
            return match crate::xfr::process(&c, out) {
                crate::xfr::Handled::Reply(n) => Outcome::Reply(n),
                crate::xfr::Handled::Drop => Outcome::Drop,
                crate::xfr::Handled::Job(j) => {
                    self.job = Some(j);
                    Outcome::Transfer
                }
            };
        }
        let refuse = if q.opcode() != opcode::QUERY {
            // NOTIFY for a zone we are not a secondary of.
            Some(rcode::NOTAUTH)
        } else if q.qclass != 1 && q.qclass != 255 {
            // Class IN, or ANY (answered from IN, as Knot and NSD do); others are not served.
            Some(rcode::REFUSED)
        } else {
            match q.qtype {
                // AXFR is TCP only (RFC 5936 §4.2): NOTIMP over UDP, as Knot and NSD answer.
                t::AXFR if transport == Transport::Udp => Some(rcode::NOTIMP),
                t::AXFR | t::IXFR => Some(rcode::REFUSED),
                t::TSIG | t::TKEY => Some(rcode::FORMERR),
                _ => None,
            }
        };
        if let Some(rc) = refuse {
            return self.error_reply(req, out, rc, true, edns, transport, src);
        }
        // 4. The zone, its tenant; after parsing.
        let zones = &*self.snapshot;
        let zone = internet::find_zone(q, zones);
        let zone_idx = zone.map(|(i, _)| i);
        if zone_idx.is_some_and(|i| zones.is_expired(i)) {
            // A secondary zone whose primaries stopped answering.
            return self.error_reply(req, out, rcode::SERVFAIL, true, edns, transport, src);
        }
        let mut parsed = Parsed {
            req,
            q,
            src: src.ip(),
            transport,
            zone: zone_idx,
            apex: zone.map_or(&b""[..], |(_, z)| z.apex().as_wire()),
            tenant: zone_idx.map_or(0, |i| zones.tenant(i)),
            cookie_policy: zone_idx.map_or(CookiePolicy::On, |i| zones.cookie_policy(i)),
            cookie: CookieStatus::Absent,
            cookie_out: None,
            exempt: false,
        };
        if let Some(p) = &mut self.plan {
            match p.after_parse(&mut parsed) {
                Step::Continue => {}
                Step::Drop(why) => {
                    stats.dropped(why);
                    return Outcome::Drop;
                }
                Step::Slip => {
                    let (n, rc) = response::slip(
                        out,
                        req,
                        q,
                        self.cfg.udp_payload,
                        true,
                        parsed.cookie_out.as_ref(),
                    );
                    stats.response(rc, rc == rcode::NOERROR);
                    return Outcome::Reply(n);
                }
                Step::Refuse(rc) => {
                    return self.error_reply(req, out, rc, true, edns, transport, src);
                }
            }
        }
        // 5. Answer.
        let udp_payload = self.cfg.udp_payload;
        let limit = response::size_limit(q, transport, udp_payload, out.len());
        let opt = response::opt_room(q, parsed.cookie_out.is_some());
        let mut w = Writer::new(out, limit - opt);
        w.start(req, q, rcode::NOERROR, true);
        let ans = internet::answer_in(&mut w, q, zones, zone);
        // 6. After answering.
        if let Some(p) = &mut self.plan {
            let rc = w.rcode();
            let (class, key): (AnswerClass, &[u8]) = match ans.kind {
                _ if rc != rcode::NOERROR && rc != rcode::NXDOMAIN => (AnswerClass::Error, b""),
                Kind::NxDomain => (AnswerClass::NxDomain, parsed.apex),
                Kind::Referral => (AnswerClass::Referral, parsed.apex),
                Kind::Refused => (AnswerClass::Error, b""),
                Kind::Answer | Kind::NoData => (AnswerClass::Answer, q.qname()),
            };
            let a = Answered {
                class,
                key,
                rcode: rc,
            };
            match p.after_answer(&parsed, &a) {
                Step::Continue => {}
                Step::Drop(why) => {
                    stats.dropped(why);
                    return Outcome::Drop;
                }
                Step::Slip => {
                    let (n, rc) =
                        response::slip(out, req, q, udp_payload, true, parsed.cookie_out.as_ref());
                    stats.response(rc, rc == rcode::NOERROR);
                    return Outcome::Reply(n);
                }
                Step::Refuse(rc) => {
                    return self.error_reply(req, out, rc, true, edns, transport, src);
                }
            }
        }
        // 7. EDNS and counters.
        w.set_limit(limit);
        if edns {
            response::put_opt(&mut w, q, udp_payload, 0, parsed.cookie_out.as_ref());
        }
        let rc = w.rcode();
        let len = w.finish();
        stats.response(rc, ans.truncated);
        stats.kind(ans.kind as usize);
        Outcome::Reply(len)
    }

    /// A reply without answer data: FORMERR, NOTIMP, REFUSED, NOTAUTH, BADVERS, SERVFAIL.
    /// It walks `after_answer` as the error class (RRL limits error floods too).
    #[allow(clippy::too_many_arguments)]
    fn error_reply(
        &mut self,
        req: &[u8],
        out: &mut [u8],
        rc: u16,
        with_question: bool,
        with_edns: bool,
        transport: Transport,
        src: SocketAddr,
    ) -> Outcome {
        let q = &*self.q;
        let udp_payload = self.cfg.udp_payload;
        if let Some(p) = &mut self.plan {
            let parsed = Parsed {
                req,
                q,
                src: src.ip(),
                transport,
                zone: None,
                apex: b"",
                tenant: 0,
                cookie_policy: CookiePolicy::On,
                cookie: CookieStatus::Absent,
                cookie_out: None,
                exempt: false,
            };
            let a = Answered {
                class: AnswerClass::Error,
                key: b"",
                rcode: rc,
            };
            match p.after_answer(&parsed, &a) {
                Step::Continue | Step::Refuse(_) => {}
                Step::Drop(why) => {
                    self.stats.dropped(why);
                    return Outcome::Drop;
                }
                Step::Slip => {
                    let (n, rc) = response::slip(out, req, q, udp_payload, with_question, None);
                    self.stats.response(rc, true);
                    return Outcome::Reply(n);
                }
            }
        }
        let limit = response::size_limit(q, transport, udp_payload, out.len())
            .max(512)
            .min(out.len());
        let mut w = Writer::new(out, limit);
        w.start(req, q, rc & 0xF, with_question);
        if with_edns || rc > 15 {
            response::put_opt(&mut w, q, udp_payload, rc, None);
        }
        let len = w.finish();
        self.stats.response(rc, false);
        Outcome::Reply(len)
    }
}
