//! The pipeline a query walks, shared by UDP and TCP: parse, check, answer, add EDNS.
//!
//! Stages, in order (the defences of [`crate::defence`] plug in at the named points):
//! 1. `before_parse` — the block map, on the source address alone;
//! 2. parse header, question and OPT ([`crate::wire`]);
//! 3. `after_parse` — EDNS version, opcode, class, cookies and the zone's cookie policy;
//! 4. answer from the zones ([`crate::internet`]);
//! 5. `after_answer` — UDP only, and skipped for a valid server cookie: the random-subdomain
//!    defence, then response rate limiting, which may turn the response into a slip (TC=1,
//!    or BADCOOKIE to a client that sent a cookie) or a drop;
//! 6. OPT (with our cookie) appended, counters bumped.

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;

use arc_swap::ArcSwap;
use zones::rrtype::t;

use crate::defence::config::CookiePolicy;
use crate::defence::cookies::CookieStatus;
use crate::defence::{self, rrl, water_torture};
use crate::internet::{self, Kind};
use crate::response::{Section, Writer};
use crate::stats::{DropCause, WorkerStats};
use crate::wire::{self, OPT_COOKIE, ParseError, Query, hf, opcode, rcode};
use crate::zoneset::ZoneSet;

/// Which transport a query came over.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Transport {
    /// UDP: size-limited, truncation and rate limiting apply.
    Udp,
    /// TCP: up to 65535 bytes.
    Tcp,
}

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

/// Bytes of an OPT RR without options.
const OPT_LEN: usize = 11;
/// Bytes of a COOKIE option with a client and a server cookie.
const COOKIE_OPT_LEN: usize = 4 + 8 + 16;

/// One query processor per worker thread (or TCP connection): owns its scratch space.
pub struct Processor {
    zones: Arc<ArcSwap<ZoneSet>>,
    snapshot: Arc<ZoneSet>,
    cfg: Arc<PipelineConfig>,
    stats: Arc<WorkerStats>,
    defence: Option<defence::Local>,
    q: Box<Query>,
    xfr: Option<Arc<crate::transfer::Transfers>>,
    job: Option<Box<crate::axfr::Job>>,
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

/// The cookie option to answer with: the client cookie and our fresh server cookie.
struct CookieOut {
    client: [u8; 8],
    server: [u8; 16],
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
            defence: defence.map(|d| d.local()),
            q: Box::default(),
            xfr: None,
            job: None,
        }
    }

    /// Hands transfers, NOTIFY and TSIG-signed messages to `x` (without it they are refused).
    pub fn with_transfers(mut self, x: Arc<crate::transfer::Transfers>) -> Processor {
        self.xfr = Some(x);
        self
    }

    /// The transfer the last [`Outcome::Transfer`] asked for.
    pub fn take_transfer(&mut self) -> Option<Box<crate::axfr::Job>> {
        self.job.take()
    }

    /// Picks up a newer zone set if one was published and reads the clock (once per batch).
    #[inline]
    pub fn refresh(&mut self) {
        let cur = self.zones.load();
        if cur.generation() != self.snapshot.generation() {
            self.snapshot = arc_swap::Guard::into_inner(cur);
        }
        if let Some(d) = &mut self.defence {
            d.refresh();
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
        let stats = self.stats.clone();
        // 1. Before parsing: a blocked source costs one lookup and nothing else.
        if let Some(d) = &mut self.defence
            && d.blocked(src.ip())
        {
            stats.dropped(DropCause::Blocked);
            return Outcome::Drop;
        }
        // 2. Parse.
        match wire::parse_query(req, &mut self.q) {
            Ok(()) => {}
            Err(ParseError::Drop) => {
                stats.dropped(DropCause::Malformed);
                return Outcome::Drop;
            }
            Err(ParseError::FormErr { question, edns }) => {
                stats.query(0);
                return self.error_reply(req, out, rcode::FORMERR, question, edns, transport, src);
            }
            Err(ParseError::NotImp { edns }) => {
                stats.query(0);
                return self.error_reply(req, out, rcode::NOTIMP, false, edns, transport, src);
            }
        }
        let q = &*self.q;
        stats.query(q.qtype);
        // 3. After parsing: EDNS version, opcode, class, meta types.
        let has_edns = q.edns.is_some();
        if let Some(e) = q.edns
            && e.version > 0
        {
            return self.error_reply(req, out, rcode::BADVERS, true, true, transport, src);
        }
        // Transfers, NOTIFY and TSIG-signed messages go to the transfer code.
        if let Some(x) = &self.xfr
            && crate::transfer::wants(q, transport)
        {
            let c = crate::transfer::Ctx {
                x,
                req,
                q,
                src,
                transport,
                zones: &self.snapshot,
                stats: &stats,
            };
            return match crate::transfer::process(&c, out) {
                crate::transfer::Handled::Reply(n) => Outcome::Reply(n),
                crate::transfer::Handled::Drop => Outcome::Drop,
                crate::transfer::Handled::Job(j) => {
                    self.job = Some(j);
                    Outcome::Transfer
                }
            };
        }
        if q.opcode() != opcode::QUERY {
            // NOTIFY for a zone we are not a secondary of.
            return self.error_reply(req, out, rcode::NOTAUTH, true, has_edns, transport, src);
        }
        // Class IN, or ANY (answered from IN, as Knot and NSD do); other classes are not served.
        if q.qclass != 1 && q.qclass != 255 {
            return self.error_reply(req, out, rcode::REFUSED, true, has_edns, transport, src);
        }
        match q.qtype {
            // AXFR is TCP only (RFC 5936 §4.2): NOTIMP over UDP, as Knot and NSD answer.
            t::AXFR if transport == Transport::Udp => {
                return self.error_reply(req, out, rcode::NOTIMP, true, has_edns, transport, src);
            }
            t::AXFR | t::IXFR => {
                return self.error_reply(req, out, rcode::REFUSED, true, has_edns, transport, src);
            }
            t::TSIG | t::TKEY => {
                return self.error_reply(req, out, rcode::FORMERR, true, has_edns, transport, src);
            }
            _ => {}
        }
        let zone = internet::find_zone(q, &self.snapshot);
        let zone_idx = zone.map(|(i, _)| i);
        if zone_idx.is_some_and(|i| self.snapshot.is_expired(i)) {
            // A secondary zone whose primaries stopped answering.
            return self.error_reply(req, out, rcode::SERVFAIL, true, has_edns, transport, src);
        }
        // Cookies: check what the client returned; answer with a fresh one.
        let (cookie_status, cookie_out) = self.cookies(req, src.ip(), zone_idx);
        if cookie_status == CookieStatus::Valid {
            stats.cookie(true);
        } else if cookie_status == CookieStatus::Invalid {
            stats.cookie(false);
        }
        let policy = zone_idx.map_or(CookiePolicy::On, |i| self.snapshot.cookie_policy(i));
        if transport == Transport::Udp
            && policy == CookiePolicy::Require
            && cookie_status != CookieStatus::Valid
            && self
                .defence
                .as_ref()
                .is_some_and(|d| d.shared().cookies.is_some())
        {
            // RFC 7873 §5.2.3: without a valid server cookie, BADCOOKIE (with a fresh one)
            // or, to a client without cookies, TC=1 so that it comes back over TCP.
            let tenant = zone_idx.map_or(0, |i| i + 1);
            if let Some(d) = &mut self.defence {
                d.record_challenge(tenant, src.ip());
            }
            return if cookie_status == CookieStatus::Absent {
                self.slip_reply(req, out, None)
            } else {
                stats.bad_cookie();
                let q = &*self.q;
                let mut w = Writer::new(out, out.len().min(512));
                w.start(req, q, rcode::BADCOOKIE & 0xF, true);
                self.finish_opt(&mut w, rcode::BADCOOKIE, cookie_out.as_ref());
                Outcome::Reply(w.finish())
            };
        }
        // 4. Answer.
        let q = &*self.q;
        let limit = self.size_limit(q, transport, out.len());
        let opt = if has_edns {
            OPT_LEN
                + if cookie_out.is_some() {
                    COOKIE_OPT_LEN
                } else {
                    0
                }
        } else {
            0
        };
        let mut w = Writer::new(out, limit - opt);
        w.start(req, q, rcode::NOERROR, true);
        let ans = internet::answer_in(&mut w, q, &self.snapshot, zone);
        // 5. After answering: UDP defences, unless the client proved itself with a cookie.
        if transport == Transport::Udp
            && cookie_status != CookieStatus::Valid
            && let Some(d) = &mut self.defence
        {
            let rc = w.rcode();
            if let Some(zi) = zone_idx {
                match d.water_torture(zi, src.ip(), ans.kind == Kind::NxDomain) {
                    water_torture::Verdict::Pass => {}
                    water_torture::Verdict::Drop | water_torture::Verdict::Escalate => {
                        stats.dropped(DropCause::WaterTorture);
                        return Outcome::Drop;
                    }
                }
            }
            let (class, what): (rrl::Class, &[u8]) = match ans.kind {
                _ if rc != rcode::NOERROR && rc != rcode::NXDOMAIN => (rrl::Class::Error, b""),
                Kind::NxDomain => (
                    rrl::Class::NxDomain,
                    zone.map_or(&b""[..], |(_, z)| z.apex().as_wire()),
                ),
                Kind::Referral => (
                    rrl::Class::Referral,
                    zone.map_or(&b""[..], |(_, z)| z.apex().as_wire()),
                ),
                Kind::Refused => (rrl::Class::Error, b""),
                Kind::Answer | Kind::NoData => (rrl::Class::Answer, q.qname()),
            };
            let tenant = zone_idx.map_or(0, |i| i + 1);
            match d.rrl(src.ip(), class, what, q.qtype, tenant) {
                rrl::Verdict::Pass => {}
                rrl::Verdict::Drop => {
                    stats.dropped(DropCause::Rrl);
                    return Outcome::Drop;
                }
                rrl::Verdict::Slip => {
                    stats.slipped();
                    return self.slip_reply(req, out, cookie_out.as_ref());
                }
            }
        }
        // 6. EDNS and counters.
        w.set_limit(limit);
        if has_edns {
            self.finish_opt(&mut w, 0, cookie_out.as_ref());
        }
        let rc = w.rcode();
        let len = w.finish();
        stats.response(rc, ans.truncated);
        stats.kind(ans.kind);
        Outcome::Reply(len)
    }

    /// Checks the query's cookie and prepares ours.
    fn cookies(
        &self,
        req: &[u8],
        src: IpAddr,
        zone: Option<u32>,
    ) -> (CookieStatus, Option<CookieOut>) {
        let q = &*self.q;
        let (Some(d), Some(e)) = (&self.defence, q.edns) else {
            return (CookieStatus::Absent, None);
        };
        let Some((client, server)) = e.cookie(req) else {
            return (CookieStatus::Absent, None);
        };
        if zone.is_some_and(|i| self.snapshot.cookie_policy(i) == CookiePolicy::Off) {
            return (CookieStatus::Absent, None);
        }
        let st = d.cookie_status(client, server, src);
        let mut out = CookieOut {
            client: [0; 8],
            server: [0; 16],
        };
        out.client.copy_from_slice(client);
        if !d.make_cookie(client, src, &mut out.server) {
            return (st, None);
        }
        (st, Some(out))
    }

    /// Appends OPT with extended rcode bits and, when given, our cookie.
    fn finish_opt(&self, w: &mut Writer<'_>, rc: u16, cookie: Option<&CookieOut>) {
        let q = &*self.q;
        let mut buf = [0u8; OPT_LEN + COOKIE_OPT_LEN];
        buf[..OPT_LEN].copy_from_slice(&opt_rr(
            self.cfg.udp_payload,
            (rc >> 4) as u8,
            q.dnssec_ok(),
        ));
        let mut len = OPT_LEN;
        if let Some(c) = cookie {
            buf[len..len + 2].copy_from_slice(&OPT_COOKIE.to_be_bytes());
            buf[len + 2..len + 4].copy_from_slice(&24u16.to_be_bytes());
            buf[len + 4..len + 12].copy_from_slice(&c.client);
            buf[len + 12..len + 28].copy_from_slice(&c.server);
            buf[9..11].copy_from_slice(&(COOKIE_OPT_LEN as u16).to_be_bytes());
            len += COOKIE_OPT_LEN;
        }
        let _ = w.raw_rr(Section::Additional, &buf[..len]);
    }

    /// The minimal TC=1 reply that RRL slips (BADCOOKIE instead to a client with a cookie,
    /// as BIND does), so that a real client retries over TCP or with its new cookie.
    fn slip_reply(&mut self, req: &[u8], out: &mut [u8], cookie: Option<&CookieOut>) -> Outcome {
        let q = &*self.q;
        let mut w = Writer::new(out, out.len().min(512));
        if cookie.is_some() {
            w.start(req, q, rcode::BADCOOKIE & 0xF, true);
            self.finish_opt(&mut w, rcode::BADCOOKIE, cookie);
            self.stats.response(rcode::BADCOOKIE, false);
        } else {
            w.start(req, q, rcode::NOERROR, true);
            w.set_flags(hf::TC);
            if q.edns.is_some() {
                self.finish_opt(&mut w, 0, None);
            }
            self.stats.response(rcode::NOERROR, true);
        }
        Outcome::Reply(w.finish())
    }

    /// The most a response to `q` may take.
    fn size_limit(&self, q: &Query, transport: Transport, buf: usize) -> usize {
        match transport {
            Transport::Tcp => buf.min(65535),
            Transport::Udp => {
                let client = q.edns.map_or(512, |e| e.udp_size) as usize;
                client.min(self.cfg.udp_payload.max(512) as usize).min(buf)
            }
        }
    }

    /// A reply without answer data: FORMERR, NOTIMP, REFUSED, NOTAUTH, BADVERS. Over UDP it
    /// counts as an error response for RRL.
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
        if transport == Transport::Udp
            && let Some(d) = &mut self.defence
        {
            match d.rrl(src.ip(), rrl::Class::Error, b"", 0, 0) {
                rrl::Verdict::Pass => {}
                rrl::Verdict::Drop => {
                    self.stats.dropped(DropCause::Rrl);
                    return Outcome::Drop;
                }
                rrl::Verdict::Slip => {
                    self.stats.slipped();
                    let q = &*self.q;
                    let mut w = Writer::new(out, out.len().min(512));
                    w.start(req, q, rcode::NOERROR, with_question);
                    w.set_flags(hf::TC);
                    self.stats.response(rcode::NOERROR, true);
                    return Outcome::Reply(w.finish());
                }
            }
        }
        let q = &*self.q;
        let limit = self
            .size_limit(q, transport, out.len())
            .max(512)
            .min(out.len());
        let mut w = Writer::new(out, limit);
        w.start(req, q, rc & 0xF, with_question);
        if with_edns || rc > 15 {
            self.finish_opt(&mut w, rc, None);
        }
        let len = w.finish();
        self.stats.response(rc, false);
        Outcome::Reply(len)
    }
}

/// An OPT RR with our payload size, an extended rcode and the DO bit echoed.
pub fn opt_rr(udp_payload: u16, ext_rcode: u8, dnssec_ok: bool) -> [u8; OPT_LEN] {
    let mut o = [0u8; OPT_LEN];
    o[1..3].copy_from_slice(&t::OPT.to_be_bytes());
    o[3..5].copy_from_slice(&udp_payload.to_be_bytes());
    o[5] = ext_rcode;
    o[6] = 0; // version
    if dnssec_ok {
        o[7] = 0x80;
    }
    o
}
