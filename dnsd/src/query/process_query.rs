//! The pipeline a query walks, shared by UDP and TCP: the named points of
//! [`crate::query::module`] with the defences of [`crate::query::defence`] plugged in, parsing,
//! answering, and the glue of [`crate::query::response`].
//!
//! 1. `before_parse` — the block map, on the source address alone (a proven block drops; an
//!    unproven entry marks the source a suspect);
//! 2. parse header, question and OPT ([`crate::query::wire`]); a malformed message is dropped or
//!    answered FORMERR;
//! 3. EDNS version; a TSIG-signed request verified (by the keys of the side plugged in
//!    through [`crate::query::handoff`]: failures answered as RFC 8945 says); transfers and
//!    NOTIFY handed over there; opcode, class and meta types;
//! 4. the zone that answers, its tenant; `after_parse` — cookies, suspects, the tenant's
//!    rules (whatever decides on the query itself);
//! 5. answer from the zones ([`crate::query::internet`]);
//! 6. `after_answer` — suspects' NXDOMAIN, the random-subdomain defence and RRL, which may
//!    turn the response into a slip (TC=1, or BADCOOKIE to a client that sent a cookie), a
//!    truncated reply or a drop;
//! 7. OPT (with our cookie) appended, counters bumped;
//! 8. a signed request's response signed, last (a signed request skips the defences after
//!    parsing: the key vouches for the client).
//!
//! Error replies walk `after_answer` too, as the error class. Whatever a defence decides
//! becomes bytes (or nothing) in one place, `Processor::act`.

use std::net::SocketAddr;
use std::sync::Arc;

use arc_swap::ArcSwap;
use zones::rrtype::t;

use crate::config::defence::CookiePolicy;
use crate::observe::counters::{DropCause, WorkerStats};
use crate::query::defence;
use crate::query::handoff;
use crate::query::internet::{self, Kind};
use crate::query::module::{AnswerClass, Answered, CookieStatus, Parsed, Step};
use crate::query::response::{self, Writer};
use crate::query::tsig;
use crate::query::wire::{self, ParseError, Query, opcode, rcode};
use crate::zone::served::ZoneSet;

/// Class CH (RFC 1035 §3.2.4), where servers answer who and what they are (RFC 4892).
const CLASS_CH: u16 = 3;

pub use crate::query::module::Transport;
pub use crate::query::response::opt_rr;

/// Settings the pipeline reads on every query (prepared once per config load).
#[derive(Debug, Clone)]
pub struct PipelineConfig {
    /// Our EDNS UDP payload size (what we advertise and the most we send).
    pub udp_payload: u16,
    /// The TCP idle timeout announced to clients that ask (RFC 7828), in units of 100 ms.
    pub tcp_keepalive: u16,
    /// Compact denials signed per second per worker, and per source.
    pub compact_denial: (u32, u32),
    /// Our name server identifier (`[server] nsid`, RFC 5001), sent to queries that ask.
    pub nsid: Option<Arc<[u8]>>,
    /// What `id.server` and `hostname.bind` answer in class CH (`[server] identity`).
    pub identity: Option<Arc<[u8]>>,
    /// What `version.server` and `version.bind` answer in class CH (`[server] version`).
    pub version: Option<Arc<[u8]>>,
    /// ALIAS targets outside our zones, as `[alias] resolver` gave them.
    pub alias: Option<Arc<crate::query::alias::AliasCache>>,
    /// EDNS Client Subnet is read and echoed (`[server] ecs`, RFC 7871).
    pub ecs: bool,
    /// The sources whose Client Subnet is believed (`[server] ecs_from`; None: any).
    pub ecs_from: Option<Arc<shield::prefix::PrefixMap<()>>>,
    /// The MaxMind database `geo:` variants are chosen by (`[geoip] db`).
    pub geodb: Option<Arc<crate::zone::geo::GeoDb>>,
}

impl Default for PipelineConfig {
    fn default() -> Self {
        PipelineConfig {
            udp_payload: 1232,
            tcp_keepalive: 100,
            compact_denial: (2000, 100),
            nsid: None,
            identity: None,
            version: None,
            alias: None,
            ecs: false,
            ecs_from: None,
            geodb: None,
        }
    }
}

impl PipelineConfig {
    /// The edns-tcp-keepalive TIMEOUT for a TCP idle timeout of `ms` milliseconds (in units
    /// of 100 ms, at most 65535).
    pub fn keepalive_units(ms: u64) -> u16 {
        (ms / 100).min(u16::MAX as u64) as u16
    }

    /// The keepalive option for a response to `q` over `transport`: over TCP, to a query
    /// that carried the option (RFC 7828 §3.3.2); never over UDP.
    #[inline]
    fn keepalive(&self, q: &Query, transport: Transport) -> Option<u16> {
        (transport == Transport::Tcp && q.edns.is_some_and(|e| e.keepalive))
            .then_some(self.tcp_keepalive)
    }

    /// The Client Subnet of `q` from `src` when ECS is on, `src` may speak for others
    /// (`ecs_from`) and it sent a well-formed one.
    #[inline]
    fn ecs(&self, q: &Query, src: SocketAddr) -> Option<crate::query::wire::Ecs> {
        let ecs = q.edns.and_then(|e| e.ecs)?;
        self.ecs_believed(src).then_some(ecs)
    }

    /// ECS is on and `src`'s Client Subnet is believed: anyone's without `ecs_from`.
    #[inline]
    fn ecs_believed(&self, src: SocketAddr) -> bool {
        self.ecs && self.ecs_from.as_ref().is_none_or(|m| m.contains(src.ip()))
    }

    /// The CH TXT string answering `q` (`id.server`, `version.bind` ...), when one is set.
    fn chaos(&self, q: &Query) -> Option<&Arc<[u8]>> {
        if q.qtype != t::TXT {
            return None;
        }
        match q.qname() {
            b"\x02id\x06server\x00" | b"\x08hostname\x04bind\x00" => self.identity.as_ref(),
            b"\x07version\x06server\x00" | b"\x07version\x04bind\x00" => self.version.as_ref(),
            _ => None,
        }
    }

    /// Our NSID for a response to `q`: when it asked and one is set.
    #[inline]
    fn nsid(&self, q: &Query) -> Option<&[u8]> {
        if q.edns.is_some_and(|e| e.nsid) {
            self.nsid.as_deref()
        } else {
            None
        }
    }
}

/// Where a processor's compact-denial budget lives.
enum DenierSlot {
    /// Its own (a UDP worker), made at the first compact denial.
    Own(Option<Box<crate::signing::online::Denier>>),
    /// One for all TCP connections.
    Shared(Arc<std::sync::Mutex<crate::signing::online::Denier>>),
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
    xfr: Option<Arc<dyn handoff::Transfers>>,
    job: Option<Box<dyn handoff::TransferJob>>,
    /// The service address of the next message (set by the transport).
    local: Option<std::net::IpAddr>,
    /// The messages come over TLS (set by the transport).
    tls: bool,
    /// The messages come over an encrypted transport, TLS or QUIC (padded answers).
    encrypted: bool,
    /// The last answer was made from another name when asked (see [`Processor::volatile`]).
    volatile: bool,
    /// Samples answered names for the XDP fast path's hot names.
    hot: Option<crate::observe::hot_sampler::HotSampler>,
    /// Budget, source shares and cache of compact denials.
    denier: DenierSlot,
    /// The query log (`[dnstap]`).
    tap: Option<crate::observe::dnstap::Tap>,
    /// A defence dropped, slipped or refused the message being processed (for dnstap).
    defence_acted: bool,
    /// The RRL account of the last answer, kept when asked for (XDP's compilation).
    rrl_account: Option<Vec<u8>>,
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
    /// Send nothing, and serve this source no further: over TCP the connection closes (a
    /// source blocked after its connection opened).
    Refused,
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
            local: None,
            tls: false,
            encrypted: false,
            volatile: false,
            hot: None,
            denier: DenierSlot::Own(None),
            tap: None,
            defence_acted: false,
            rrl_account: None,
        }
    }

    /// Keeps the RRL account of each answer ([`Processor::rrl_account`]) from now on.
    pub fn keep_rrl_account(mut self) -> Processor {
        self.rrl_account = Some(Vec::with_capacity(260));
        self
    }

    /// The RRL account of the last answer, when kept: its class, the class's key and type
    /// (what dnsd's RRL hashes), as one byte string; empty when the last message got no
    /// answer.
    pub fn rrl_account(&self) -> &[u8] {
        self.rrl_account.as_deref().unwrap_or_default()
    }

    /// Shares one compact-denial budget among processors (TCP: one per connection, so a
    /// budget each would grow with the connections an attacker opens).
    pub fn with_shared_denier(
        mut self,
        d: Arc<std::sync::Mutex<crate::signing::online::Denier>>,
    ) -> Processor {
        self.denier = DenierSlot::Shared(d);
        self
    }

    /// Writes this processor's queries and answers to the query log.
    pub fn with_tap(mut self, tap: Option<crate::observe::dnstap::Tap>) -> Processor {
        self.tap = tap;
        self
    }

    /// Samples this processor's UDP answers for the XDP fast path's hot names.
    pub fn with_hot(mut self, hot: Option<crate::observe::hot_sampler::HotSampler>) -> Processor {
        self.hot = hot;
        self
    }

    /// Runs `plan` instead of the defences' whole plan.
    pub fn with_plan(mut self, plan: defence::Plan) -> Processor {
        self.plan = Some(plan);
        self
    }

    /// The service address the next messages were sent to (the rules' `local_address`).
    #[inline]
    pub fn set_local(&mut self, ip: std::net::IpAddr) {
        self.local = Some(ip);
    }

    /// True when the last answer was made from another name when asked (an ALIAS's): it
    /// changes with other zones or the resolver's cache, so it is not to be kept elsewhere.
    pub fn volatile(&self) -> bool {
        self.volatile
    }

    /// Marks the messages as coming over TLS (zone transfers allowed only over TLS).
    #[inline]
    pub fn set_tls(&mut self) {
        self.tls = true;
        self.encrypted = true;
    }

    /// Marks the messages as coming over QUIC (answers to padded queries are padded).
    #[inline]
    pub fn set_quic(&mut self) {
        self.encrypted = true;
    }

    /// True when a response to `q` is padded: a padded query over an encrypted transport,
    /// not TSIG-signed (the signature comes after the OPT and its room is kept).
    fn pads(&self, q: &Query, signed: bool) -> bool {
        self.encrypted && !signed && q.edns.is_some_and(|e| e.padding)
    }

    /// Hands transfers and NOTIFY to `x`, whose keys verify TSIG-signed requests (without it
    /// they are refused).
    pub fn with_transfers(mut self, x: Arc<dyn handoff::Transfers>) -> Processor {
        self.xfr = Some(x);
        self
    }

    /// The transfer the last [`Outcome::Transfer`] asked for.
    pub fn take_transfer(&mut self) -> Option<Box<dyn handoff::TransferJob>> {
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

    /// True (the drop counted) when the pipeline's point before parsing drops `src`'s
    /// message: a blocked source costs one lookup and nothing else.
    #[inline]
    fn blocked_before_parse(&mut self, src: SocketAddr, transport: Transport) -> bool {
        if transport == Transport::Udp && reflector_port(src.port()) {
            self.stats.dropped(DropCause::ReflectorPort);
            return true;
        }
        if let Some(p) = &mut self.plan
            && let Step::Drop(why) = p.before_parse(src.ip(), transport)
        {
            self.stats.dropped(why);
            return true;
        }
        false
    }

    /// Answers a message longer than we take, of which `head` is the start: FORMERR
    /// (echoing the question when `head` holds it, without OPT), as Knot and NSD answer a
    /// message they cannot take whole; rate-limited as every error reply.
    pub fn process_oversized(
        &mut self,
        head: &[u8],
        src: SocketAddr,
        transport: Transport,
        out: &mut [u8],
    ) -> Outcome {
        self.volatile = false;
        if self.blocked_before_parse(src, transport) {
            return Outcome::Refused;
        }
        let question = match wire::parse_query(head, &mut self.q) {
            Ok(()) => true,
            Err(ParseError::FormErr { question, .. }) => question,
            Err(ParseError::NotImp { .. }) => false,
            Err(ParseError::Drop) => {
                self.stats.dropped(DropCause::Malformed);
                return Outcome::Drop;
            }
        };
        // The OPT, if any, was not read whole: the reply is sized and written as without EDNS.
        self.q.edns = None;
        self.stats.query(0);
        let rc = rcode::FORMERR;
        self.error_reply(head, out, rc, question, false, transport, src, None, None)
    }

    /// Processes one message from `src` into `out`.
    pub fn process(
        &mut self,
        req: &[u8],
        src: SocketAddr,
        transport: Transport,
        out: &mut [u8],
    ) -> Outcome {
        self.volatile = false;
        if let Some(acct) = &mut self.rrl_account {
            // No account left from an earlier message for one that gets no answer.
            acct.clear();
        }
        if self.tap.is_none() {
            return self.process_message(req, src, transport, out);
        }
        self.defence_acted = false;
        let o = self.process_message(req, src, transport, out);
        let response = match o {
            Outcome::Reply(n) => Some(&out[..n]),
            Outcome::Drop => None,
            // A blocked source costs one lookup and never reaches the log; transfers are
            // logged by their own lines.
            Outcome::Refused | Outcome::Transfer => return o,
        };
        let tapped = crate::observe::dnstap::Tapped {
            query: req,
            response,
            defence: self.defence_acted,
        };
        if let Some(t) = &mut self.tap {
            t.record(&tapped, src, self.local, transport == Transport::Tcp);
        }
        o
    }

    fn process_message(
        &mut self,
        req: &[u8],
        src: SocketAddr,
        transport: Transport,
        out: &mut [u8],
    ) -> Outcome {
        // 1. Before parsing: a blocked source costs one lookup and nothing else.
        if self.blocked_before_parse(src, transport) {
            return Outcome::Refused;
        }
        let stats = &*self.stats;
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
        if err == Some(rcode::FORMERR)
            && !question
            && edns
            && self.q.opcode() == opcode::QUERY
            && req[4..10] == [0, 0, 0, 0, 0, 0]
            && self.q.edns.is_some_and(|e| e.version == 0)
        {
            // A client asking for our server cookie (RFC 7873 §5.4).
            self.stats.query(0);
            if let Some(o) = self.server_cookie_reply(req, out, transport, src) {
                return o;
            }
            let rc = rcode::FORMERR;
            return self.error_reply(req, out, rc, false, true, transport, src, None, None);
        }
        let q = &*self.q;
        stats.query(if err.is_some() { 0 } else { q.qtype });
        // 3. EDNS version, opcode, class, meta types.
        // A version we do not implement is BADVERS before anything its options say (RFC 6891
        // §6.1.3: their meaning is the version's), a malformed cookie included, as Knot and
        // NSD answer — where the OPT itself was sound (`edns`: a record misplaced after it is
        // FORMERR without OPT, as they answer that).
        let refuse = match () {
            _ if edns && q.edns.is_some_and(|e| e.version > 0) => Some(rcode::BADVERS),
            _ => err,
        };
        if let Some(rc) = refuse {
            return self.error_reply(req, out, rc, question, edns, transport, src, None, None);
        }
        // TSIG: a signed request is verified here (by the side that holds the keys) and its
        // response, whatever answers it, signed last. The key vouches for the client: the
        // defences after parsing leave it alone.
        let mut signer: Option<tsig::Signer> = None;
        if let Some(off) = q.tsig_off {
            let Some(x) = &self.xfr else {
                // No keys here at all: as for a key we do not know (RFC 8945 §5.2.1).
                return self.error_reply(
                    req,
                    out,
                    rcode::NOTAUTH,
                    true,
                    edns,
                    transport,
                    src,
                    None,
                    None,
                );
            };
            let c = handoff::Ctx {
                req,
                q,
                src,
                transport,
                tls: self.tls,
                zones: &self.snapshot,
                stats,
                udp_payload: self.cfg.udp_payload,
                opt: handoff::ReplyOpt::default(),
            };
            let failed = match x.verify(&c, off, out) {
                Ok(s) => {
                    signer = Some(s);
                    None
                }
                Err(n) => Some(n),
            };
            if let Some(n) = failed {
                // A TSIG failure: anyone can forge one, so its reply is rate limited.
                return self.limit_handed_off(req, out, n, edns, transport, src);
            }
        }
        // A malformed (or second) Client Subnet option where ECS is on is FORMERR (RFC 7871
        // §7.1.1), a transfer's or a NOTIFY's too (they were served, or NOTAUTH).
        let ecs_bad = q.edns.is_some_and(|e| e.ecs_bad) && self.cfg.ecs_believed(src);
        // Transfers and NOTIFY go to the transfer side.
        if let Some(x) = &self.xfr
            && !ecs_bad
            && handoff::wants(q, transport)
        {
            let opt = handoff::ReplyOpt {
                cookie: cookie_for(q, self.plan.as_mut(), req, self.local, transport, src),
                nsid: self.cfg.nsid(q),
                keepalive: self.cfg.keepalive(q, transport),
                pad: self.pads(q, signer.is_some()),
            };
            let c = handoff::Ctx {
                req,
                q,
                src,
                transport,
                tls: self.tls,
                zones: &self.snapshot,
                stats,
                udp_payload: self.cfg.udp_payload,
                opt,
            };
            let signed = signer.is_some();
            return match x.process(&c, signer, out) {
                // A signed request's key vouches for its client; NOTIFY, IXFR over UDP and
                // the transfer side's errors to others are rate limited as any error reply.
                handoff::Handled::Reply(n) if signed => Outcome::Reply(n),
                // A NOTIFY taken (from a zone's primary or `allow_notify`): its reply is no
                // bigger than it, and a primary that notifies many members at once saw
                // replies dropped and truncated, then timed out and sent again (Knot answers
                // them all). Refusals stay limited.
                handoff::Handled::Reply(n)
                    if q.opcode() == opcode::NOTIFY && n >= 4 && out[3] & 0xF == 0 =>
                {
                    Outcome::Reply(n)
                }
                handoff::Handled::Reply(n) => {
                    self.limit_handed_off(req, out, n, edns, transport, src)
                }
                handoff::Handled::Drop => Outcome::Drop,
                handoff::Handled::Job(j) => {
                    self.job = Some(j);
                    Outcome::Transfer
                }
            };
        }
        let refuse = if ecs_bad {
            Some(rcode::FORMERR)
        } else if q.opcode() != opcode::QUERY {
            // NOTIFY for a zone we are not a secondary of.
            Some(rcode::NOTAUTH)
        } else if q.qclass == CLASS_CH
            && let Some(txt) = self.cfg.chaos(q)
        {
            // Copied out (at most 255 bytes), not shared: the reply borrows the processor.
            let mut buf = [0u8; 255];
            let n = txt.len().min(255);
            buf[..n].copy_from_slice(&txt[..n]);
            return self.chaos_reply(req, out, &buf[..n], edns, transport, src, signer.as_mut());
        } else if q.qclass != 1 && q.qclass != 255 {
            // Class IN, or ANY (answered from IN, as Knot and NSD do); others are not served.
            Some(rcode::REFUSED)
        } else {
            match q.qtype {
                // AXFR is TCP only (RFC 5936 §4.2): NOTIMP over UDP, as Knot and NSD answer.
                t::AXFR if transport == Transport::Udp => Some(rcode::NOTIMP),
                t::AXFR | t::IXFR => Some(rcode::REFUSED),
                // NXNAME only ever appears in a compact denial's bitmap (RFC 9824 §3.5).
                crate::signing::online::NXNAME => Some(rcode::FORMERR),
                _ => None,
            }
        };
        if let Some(rc) = refuse {
            // A transfer refused here: the client may not have it (RFC 8914 Prohibited);
            // AXFR over UDP is not a way to ask for one (Not Supported).
            let why = match q.qtype {
                t::AXFR if rc == rcode::NOTIMP => Some(response::ede::NOT_SUPPORTED),
                t::AXFR | t::IXFR => Some(response::ede::PROHIBITED),
                _ => None,
            };
            let signer = signer.as_mut();
            return self.error_reply(req, out, rc, true, edns, transport, src, signer, why);
        }
        // 4. The zone, its tenant; after parsing.
        let zones = &*self.snapshot;
        let zone = internet::find_zone(q, zones);
        let zone_idx = zone.map(|(i, _)| i);
        if zone_idx.is_some_and(|i| zones.is_expired(i)) {
            // A secondary zone whose primaries stopped answering.
            let signer = signer.as_mut();
            return self.error_reply(
                req,
                out,
                rcode::SERVFAIL,
                true,
                edns,
                transport,
                src,
                signer,
                None,
            );
        }
        let mut parsed = Parsed {
            req,
            q,
            src: src.ip(),
            local: self.local,
            transport,
            zone: zone_idx.map(|i| zones.id(i)),
            apex: zone.map_or(&b""[..], |(_, z)| z.apex().as_wire()),
            tenant: zone_idx.map_or(0, |i| zones.tenant(i)),
            cookie_policy: zone_idx.map_or(CookiePolicy::On, |i| zones.cookie_policy(i)),
            cookie: CookieStatus::Absent,
            cookie_out: None,
            exempt: false,
            suspect: self.plan.as_ref().and_then(|p| {
                p.suspect(
                    zone_idx.map(|i| zones.id(i)),
                    zone_idx.map(|i| zones.tenant(i)),
                )
            }),
            held: false,
        };
        if let Some(p) = &mut self.plan
            && signer.is_none()
        {
            let step = p.after_parse(&mut parsed);
            if step != Step::Continue {
                let cookie = parsed.cookie_out;
                if matches!(step, Step::Slip) {
                    // The challenge is a reply too: rate limited like any other (a spoofed
                    // flood against a zone that requires cookies must not get one per packet).
                    let a = Answered {
                        class: AnswerClass::Error,
                        key: b"",
                        rcode: rcode::BADCOOKIE,
                        qtype: 0,
                        synthesized: false,
                    };
                    if let Step::Drop(why) = p.after_answer(&parsed, &a) {
                        return self.act(
                            Step::Drop(why),
                            req,
                            out,
                            true,
                            edns,
                            transport,
                            src,
                            None,
                        );
                    }
                }
                return self.act(step, req, out, true, edns, transport, src, cookie.as_ref());
            }
        }
        // 5. Answer.
        let udp_payload = self.cfg.udp_payload;
        let limit = response::size_limit(q, transport, udp_payload, out.len());
        // The Client Subnet believed (echoed, and the client's network below).
        let ecs = self.cfg.ecs(q, src);
        let mut opts = response::OptOptions {
            cookie: parsed.cookie_out.as_ref(),
            keepalive: self.cfg.keepalive(q, transport),
            compact_ok: false,
            nsid: self.cfg.nsid(q),
            ede: None,
            // Scope 0 unless the answer was chosen by the client's network (set below).
            ecs: ecs.map(|e| (e, 0)),
            pad: false,
        };
        let opt = response::opt_room(q, &opts);
        let sig = signer.as_ref().map_or(0, |s| s.reserve());
        let mut w = Writer::new(out, limit.saturating_sub(opt + sig));
        w.start(req, q, rcode::NOERROR, true);
        let mut shared_denier: Option<std::sync::MutexGuard<'_, crate::signing::online::Denier>> =
            None;
        let tsig_signed = signer.is_some();
        let online = match zone_idx.and_then(|i| zones.compact(i).map(|s| (i, s))) {
            Some((i, signer)) if q.dnssec_ok() => {
                let (rate, per_source) = self.cfg.compact_denial;
                let denier: &mut crate::signing::online::Denier = match &mut self.denier {
                    DenierSlot::Own(d) => d.get_or_insert_with(|| {
                        Box::new(crate::signing::online::Denier::new(rate, per_source))
                    }),
                    DenierSlot::Shared(m) => {
                        shared_denier.insert(m.lock().unwrap_or_else(|e| e.into_inner()))
                    }
                };
                Some(internet::Online {
                    signer,
                    zone_id: zones.id(i),
                    denier,
                    who: crate::signing::online::Asker {
                        ip: src.ip(),
                        proven: transport == Transport::Tcp || parsed.cookie == CookieStatus::Valid,
                    },
                    stats: &self.stats,
                    compact_ok: q.edns.is_some_and(|e| e.compact_ok),
                    chain_past_budget: transport == Transport::Tcp,
                    nx_truncated: parsed.suspect == Some(shield::block::Scope::Nxdomain)
                        && transport == Transport::Udp
                        && parsed.cookie != CookieStatus::Valid
                        && !tsig_signed,
                })
            }
            _ => None,
        };
        // RFC 9824 §5: a compact-denial zone asked with CO says so, and its NXDOMAINs keep
        // their rcode.
        opts.compact_ok = online
            .as_ref()
            .is_some_and(|o| o.compact_ok && o.signer.denies());
        // The client's network: its Client Subnet where ECS is on, else the source. A
        // SOURCE PREFIX-LENGTH of 0 names no network (RFC 7871 §7.1.2: the resolver asks for
        // an answer good for everyone): answered for the source, scope 0 (as Knot answers;
        // it was a client at 0.0.0.0, its scope longer than the prefix sent).
        let network = ecs.filter(|e| e.source > 0);
        let client = internet::Client {
            ip: network.map_or(src.ip(), |e| e.ip()),
            geodb: self.cfg.geodb.as_deref(),
            ecs: network.is_some(),
        };
        let ans = internet::answer_in(
            &mut w,
            q,
            zones,
            zone,
            online,
            self.cfg.alias.as_deref(),
            client,
        );
        if let Some((_, scope)) = &mut opts.ecs
            && network.is_some()
        {
            *scope = ans.scope;
        }
        drop(shared_denier);
        // 6. After answering.
        if let Some(acct) = &mut self.rrl_account {
            acct.clear();
        }
        if (self.plan.is_some() && signer.is_none()) || self.rrl_account.is_some() {
            let rc = w.rcode();
            let (class, key): (AnswerClass, &[u8]) = match ans.kind {
                _ if rc != rcode::NOERROR && rc != rcode::NXDOMAIN => (AnswerClass::Error, b""),
                Kind::NxDomain => (AnswerClass::NxDomain, parsed.apex),
                Kind::Referral => (AnswerClass::Referral, parsed.apex),
                Kind::Refused => (AnswerClass::Error, b""),
                // A wildcard's answers are one account, whatever name was asked.
                Kind::Answer | Kind::NoData => match (ans.synth, zone) {
                    (internet::Synth::Wildcard(id) | internet::Synth::Dname(id), Some((_, z))) => {
                        (AnswerClass::Answer, z.node_name(id))
                    }
                    (internet::Synth::Geo, _) => (AnswerClass::Answer, parsed.apex),
                    _ => (AnswerClass::Answer, q.qname()),
                },
            };
            let a = Answered {
                class,
                key,
                rcode: rc,
                qtype: if ans.kind == Kind::Answer && rc == rcode::NOERROR {
                    q.qtype
                } else {
                    0
                },
                synthesized: matches!(
                    ans.synth,
                    internet::Synth::Wildcard(_) | internet::Synth::Dname(_)
                ),
            };
            if let Some(acct) = &mut self.rrl_account {
                acct.push(a.class as u8);
                acct.extend(a.key.iter().map(u8::to_ascii_lowercase));
                acct.extend_from_slice(&a.qtype.to_be_bytes());
            }
            if let Some(p) = self.plan.as_mut().filter(|_| signer.is_none()) {
                let step = p.after_answer(&parsed, &a);
                if step != Step::Continue {
                    let cookie = parsed.cookie_out;
                    return self.act(step, req, out, true, edns, transport, src, cookie.as_ref());
                }
            }
        }
        // 7. EDNS and counters.
        w.set_limit(limit);
        if ans.kind == Kind::Refused {
            opts.ede = Some(response::ede::NOT_AUTHORITATIVE);
        }
        if edns {
            opts.pad = self.pads(q, signer.is_some());
            response::put_opt(&mut w, q, udp_payload, 0, opts);
        }
        let rc = w.rcode();
        let comp_full = w.compression_full();
        let mut len = w.finish();
        // 8. Signed last, when the request was.
        if let Some(s) = signer.as_mut() {
            len = s.sign(&mut out[..limit], len, tsig::now()).unwrap_or(len);
        }
        stats.response(rc, ans.truncated);
        stats.kind(ans.kind as usize);
        if comp_full {
            stats.compression_full();
        }
        self.volatile = ans.volatile;
        if let (Some(h), Some(i)) = (&mut self.hot, zone_idx)
            && !ans.volatile
            && transport == Transport::Udp
            && rc == rcode::NOERROR
            && !ans.truncated
            && matches!(ans.kind, Kind::Answer | Kind::NoData | Kind::Referral)
            && zones.xdp_hot(i)
        {
            h.answered(q.qname(), q.qtype);
        }
        Outcome::Reply(len)
    }

    /// Carries out what a defence decided — the one place a step becomes bytes or nothing:
    /// a counted drop, a slip (TC=1, or BADCOOKIE with our cookie to a client that sent one),
    /// a truncated reply within the suspects' budget (never more bytes than the query), or a
    /// refusal with an rcode.
    #[allow(clippy::too_many_arguments)]
    fn act(
        &mut self,
        step: Step,
        req: &[u8],
        out: &mut [u8],
        with_question: bool,
        with_edns: bool,
        transport: Transport,
        src: SocketAddr,
        cookie: Option<&crate::query::module::CookieOut>,
    ) -> Outcome {
        self.defence_acted = true;
        let q = &*self.q;
        let udp_payload = self.cfg.udp_payload;
        match step {
            Step::Continue => Outcome::Drop,
            Step::Drop(why) => {
                self.stats.dropped(why);
                Outcome::Drop
            }
            Step::Slip | Step::SlipRated => {
                let (n, rc) = response::slip(out, req, q, udp_payload, with_question, cookie);
                self.stats.response(rc, rc == rcode::NOERROR);
                Outcome::Reply(n)
            }
            Step::Truncate | Step::Held => {
                // A held source's TC=1 is outside the suspects' budget (a forwarder's users
                // come back over TCP only through it).
                if step == Step::Truncate
                    && !self
                        .plan
                        .as_ref()
                        .is_some_and(|p| p.admit_truncated(src.ip()))
                {
                    self.stats.dropped(DropCause::Suspect);
                    return Outcome::Drop;
                }
                let n = response::truncated(out, req, q, udp_payload, cookie);
                self.stats.response(rcode::NOERROR, true);
                Outcome::Reply(n)
            }
            // The rules' deny with an rcode: a client refused by policy.
            Step::Refuse(rc) => self.error_reply(
                req,
                out,
                rc,
                with_question,
                with_edns,
                transport,
                src,
                None,
                Some(response::ede::PROHIBITED),
            ),
        }
    }

    /// The defences' word on a reply that names no zone (an error, a CH answer), as the
    /// error class: RRL limits these floods too. `Some`: what they did instead.
    #[allow(clippy::too_many_arguments)]
    fn limit_zoneless(
        &mut self,
        req: &[u8],
        out: &mut [u8],
        rc: u16,
        with_question: bool,
        with_edns: bool,
        transport: Transport,
        src: SocketAddr,
    ) -> Option<Outcome> {
        let q = &*self.q;
        let p = self.plan.as_mut()?;
        let parsed = Parsed::zoneless(
            req,
            q,
            src.ip(),
            self.local,
            transport,
            p.suspect(None, None),
        );
        let a = Answered {
            class: AnswerClass::Error,
            key: b"",
            rcode: rc,
            qtype: 0,
            synthesized: false,
        };
        match p.after_answer(&parsed, &a) {
            Step::Continue | Step::Refuse(_) => None,
            step => Some(self.act(
                step,
                req,
                out,
                with_question,
                with_edns,
                transport,
                src,
                None,
            )),
        }
    }

    /// A reply of `n` bytes the transfer side wrote into `out` (NOTIFY, IXFR over UDP, a
    /// TSIG failure), through the defences as an error reply over UDP: a forged source gets
    /// no more of them than of any other reply (RRL).
    fn limit_handed_off(
        &mut self,
        req: &[u8],
        out: &mut [u8],
        n: usize,
        with_edns: bool,
        transport: Transport,
        src: SocketAddr,
    ) -> Outcome {
        if transport != Transport::Udp || n < 4 {
            return Outcome::Reply(n);
        }
        let rc = u16::from(out[3] & 0xF);
        match self.limit_zoneless(req, out, rc, true, with_edns, transport, src) {
            Some(o) => o,
            None => Outcome::Reply(n),
        }
    }

    /// Answers a CH TXT query for our identity or version with `txt`, as Knot and NSD do:
    /// TTL 0, no AA; rate limited as an error reply (it names no zone).
    #[allow(clippy::too_many_arguments)]
    fn chaos_reply(
        &mut self,
        req: &[u8],
        out: &mut [u8],
        txt: &[u8],
        with_edns: bool,
        transport: Transport,
        src: SocketAddr,
        signer: Option<&mut tsig::Signer>,
    ) -> Outcome {
        // The owner points at the question; TXT, CH, TTL 0, one character-string.
        let mut rr = [0u8; 12 + 1 + 255];
        let n = txt.len().min(255);
        rr[..2].copy_from_slice(&[0xC0, 0x0C]);
        rr[2..4].copy_from_slice(&t::TXT.to_be_bytes());
        rr[4..6].copy_from_slice(&CLASS_CH.to_be_bytes());
        rr[10..12].copy_from_slice(&(n as u16 + 1).to_be_bytes());
        rr[12] = n as u8;
        rr[13..13 + n].copy_from_slice(&txt[..n]);
        let rr = &rr[..13 + n];
        let rc = rcode::NOERROR;
        self.zoneless_reply(
            req,
            out,
            rc,
            true,
            with_edns,
            transport,
            src,
            signer,
            None,
            Some(rr),
            None,
        )
    }

    /// A reply without answer data: FORMERR, NOTIMP, REFUSED, NOTAUTH, BADVERS, SERVFAIL.
    /// Unsigned, it walks `after_answer` as the error class (RRL limits error floods too);
    /// signed (by `signer`, when the request was), it goes as it is.
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
        signer: Option<&mut tsig::Signer>,
        ede: Option<u16>,
    ) -> Outcome {
        let (q, e) = (with_question, with_edns);
        self.zoneless_reply(req, out, rc, q, e, transport, src, signer, ede, None, None)
    }

    /// The reply to a query without a question that carries a client cookie (RFC 7873 §5.4,
    /// a client asking for our server cookie): NOERROR with our cookie — BADCOOKIE with a fresh
    /// one when it returned a server cookie that is not ours — rate limited as every reply
    /// that names no zone. `None` where cookies are off or the query carries none (FORMERR).
    fn server_cookie_reply(
        &mut self,
        req: &[u8],
        out: &mut [u8],
        transport: Transport,
        src: SocketAddr,
    ) -> Option<Outcome> {
        let q = &*self.q;
        q.edns?.cookie(req)?;
        let p = self.plan.as_mut()?;
        let mut parsed = Parsed::zoneless(
            req,
            q,
            src.ip(),
            self.local,
            transport,
            p.suspect(None, None),
        );
        p.check_cookie(&mut parsed);
        let cookie = parsed.cookie_out?;
        let rc = if parsed.cookie == CookieStatus::Invalid {
            rcode::BADCOOKIE
        } else {
            rcode::NOERROR
        };
        Some(self.zoneless_reply(
            req,
            out,
            rc,
            false,
            true,
            transport,
            src,
            None,
            None,
            None,
            Some(&cookie),
        ))
    }

    /// Our server cookie for a query that names no zone and carries a client cookie (`None`
    /// without one, or with cookies off).
    fn zoneless_cookie(
        &mut self,
        req: &[u8],
        transport: Transport,
        src: SocketAddr,
    ) -> Option<crate::query::module::CookieOut> {
        cookie_for(&self.q, self.plan.as_mut(), req, self.local, transport, src)
    }

    /// A reply that names no zone: `rc`, `answer` (one record, raw) and our `cookie` in the
    /// OPT when given (else a fresh one when the query carries a client cookie).
    #[allow(clippy::too_many_arguments)]
    fn zoneless_reply(
        &mut self,
        req: &[u8],
        out: &mut [u8],
        rc: u16,
        with_question: bool,
        with_edns: bool,
        transport: Transport,
        src: SocketAddr,
        signer: Option<&mut tsig::Signer>,
        ede: Option<u16>,
        answer: Option<&[u8]>,
        cookie: Option<&crate::query::module::CookieOut>,
    ) -> Outcome {
        if signer.is_none()
            && let Some(o) =
                self.limit_zoneless(req, out, rc, with_question, with_edns, transport, src)
        {
            return o;
        }
        // Every reply to a query with a client cookie carries our server cookie (RFC 7873
        // §5.2), CH answers and errors alike, as Knot and NSD send it: a resolver that
        // enforces cookies takes a UDP reply without one for a forgery.
        let own = match cookie {
            None if with_edns => self.zoneless_cookie(req, transport, src),
            _ => None,
        };
        let cookie = cookie.or(own.as_ref());
        let q = &*self.q;
        let udp_payload = self.cfg.udp_payload;
        let limit = response::size_limit(q, transport, udp_payload, out.len())
            .max(512)
            .min(out.len());
        let sig = signer.as_ref().map_or(0, |s| s.reserve());
        let mut w = Writer::new(out, limit.saturating_sub(sig));
        w.start(req, q, rc & 0xF, with_question);
        if let Some(rr) = answer {
            let _ = w.raw_rr(response::Section::Answer, rr);
        }
        if with_edns || rc > 15 {
            let opts = response::OptOptions {
                cookie,
                keepalive: self.cfg.keepalive(q, transport),
                compact_ok: false,
                nsid: self.cfg.nsid(q),
                ede,
                ecs: self.cfg.ecs(q, src).map(|e| (e, 0)),
                pad: self.pads(q, signer.is_some()),
            };
            response::put_opt(&mut w, q, udp_payload, rc, opts);
        }
        let mut len = w.finish();
        if let Some(s) = signer {
            len = s.sign(&mut out[..limit], len, tsig::now()).unwrap_or(len);
        }
        self.stats.response(rc, false);
        Outcome::Reply(len)
    }
}

/// Our server cookie for `q` (read from `req`), which carries a client cookie, checked by
/// `plan` (`None` without a client cookie, or with cookies off).
fn cookie_for(
    q: &Query,
    plan: Option<&mut defence::Plan>,
    req: &[u8],
    local: Option<std::net::IpAddr>,
    transport: Transport,
    src: SocketAddr,
) -> Option<crate::query::module::CookieOut> {
    q.edns?.cookie(req)?;
    let p = plan?;
    let mut parsed = Parsed::zoneless(req, q, src.ip(), local, transport, p.suspect(None, None));
    p.check_cookie(&mut parsed);
    parsed.cookie_out
}

/// UDP source ports no DNS client sends from: 0, and the services that answer any datagram
/// (echo 7, daytime 13, qotd 17, chargen 19, time 37). A query "from" one is forged: answered,
/// it would make us feed that service, and chargen's reply a loop between the two.
#[inline]
fn reflector_port(port: u16) -> bool {
    matches!(port, 0 | 7 | 13 | 17 | 19 | 37)
}

#[cfg(test)]
pub(crate) mod tests {
    //! The pipeline in-process: the named points in order (block map before parsing, cookies
    //! after parsing, RRL after answering), the error replies and their rate limit.

    use std::net::SocketAddr;

    use shield::block::{Evidence, Origin, Scope};
    use shield::events::Action;

    use super::*;
    use crate::config::defence::RrlConfig;
    use crate::query::testkit::*;
    use crate::zone::served::ServeOptions;

    const UDP: Transport = Transport::Udp;
    const TCP: Transport = Transport::Tcp;
    const WWW: &str = "www.example.com.";

    #[test]
    fn cookie_challenges_are_rate_limited_like_any_reply() {
        use crate::config::defence::CookiePolicy;
        let zones = zone_set(vec![(
            load_zone("example.com.", &example_text()),
            ServeOptions {
                cookies: CookiePolicy::Require,
                tenant: 0,
                ..Default::default()
            },
        )]);
        let rrl = RrlConfig {
            responses_per_second: 5.0,
            slip: 0,
            ..RrlConfig::default()
        };
        let mut r = Rig::new(zones, Some(defences(Some(rrl), true)));
        // A spoofed flood without cookies: a challenge per packet only up to the error rate.
        let q = Q::new(WWW, 1).edns(1232).bytes();
        let answered = (0..50)
            .filter(|_| r.send(&q, "192.0.2.1", UDP).is_some())
            .count();
        assert!(
            (1..=6).contains(&answered),
            "{answered} challenges for 50 packets"
        );
    }

    #[test]
    fn udp_from_a_port_that_answers_any_datagram_is_dropped_and_counted() {
        let mut r = Rig::new(example_set(), None);
        let q = Q::new(WWW, 1).bytes();
        let ip: std::net::IpAddr = "192.0.2.7".parse().unwrap();
        let mut out = vec![0u8; 4096];
        for port in [0u16, 7, 13, 17, 19, 37] {
            let o = r.p.process(&q, SocketAddr::new(ip, port), UDP, &mut out);
            assert!(matches!(o, Outcome::Refused), "port {port}");
            // Over TCP the port proves nothing forged: answered.
            let o = r.p.process(&q, SocketAddr::new(ip, port), TCP, &mut out);
            assert!(matches!(o, Outcome::Reply(_)), "TCP port {port}");
        }
        assert_eq!(r.drops(DropCause::ReflectorPort), 6);
        for port in [53u16, 1024, 5353, 65535] {
            let o = r.p.process(&q, SocketAddr::new(ip, port), UDP, &mut out);
            assert!(matches!(o, Outcome::Reply(_)), "port {port}");
        }
    }

    #[test]
    fn a_blocked_source_is_dropped_and_counted_before_parsing() {
        let s = shared(defences(None, false));
        block(&s, "192.0.2.0/24", Origin::Operator);
        block(&s, "203.0.113.5/32", Origin::Peer);
        let mut r = Rig::with_shared(example_set(), Some(s.clone()));
        let q = Q::new(WWW, 1).bytes();
        // A runt from a blocked source counts as blocked, not malformed: nothing was read.
        assert!(r.send(&[1, 2, 3], "192.0.2.7", UDP).is_none());
        assert!(r.send(&q, "192.0.2.7", UDP).is_none());
        assert!(r.send(&q, "192.0.2.200", TCP).is_none());
        assert!(r.send(&q, "203.0.113.5", UDP).is_none());
        assert_eq!(r.drops(DropCause::Blocked), 4);
        assert_eq!(r.drops(DropCause::Malformed), 0);
        assert_eq!(load(&r.stats.queries), 0, "nothing parsed");
        assert_eq!(r.stats.rcode.iter().map(load).sum::<u64>(), 0);
        let by_origin: Vec<u64> = s.blocked.iter().map(load).collect();
        assert_eq!(by_origin, [0, 3, 1], "local, operator, peer");
        // Outside the blocked prefixes the same bytes are parsed: a runt is malformed, the
        // query answered.
        assert!(r.send(&[1, 2, 3], "192.0.3.7", UDP).is_none());
        assert_eq!(r.drops(DropCause::Malformed), 1);
        let a = r.send(&q, "192.0.3.7", UDP).unwrap();
        assert_eq!(a.rcode(), rcode::NOERROR);
        assert_eq!(a.answer[0].rdata, [192, 0, 2, 10]);
        assert_eq!(r.drops(DropCause::Blocked), 4);
        // `blocked` events (tenant 0: nothing of the query known), by the block's evidence
        // and source prefix.
        let ev = events(&s, shield::events::Action::Blocked);
        assert_eq!(ev.len(), 2, "{ev:?}");
        assert_eq!((ev[0].tenant, ev[0].total), (0, 1));
        assert_eq!((ev[1].evidence, ev[1].total), (Evidence::Operator, 3));
        let top = &ev[1].top[0];
        assert_eq!(top.prefix.to_string(), "192.0.2.0/24");
        assert_eq!(
            (top.count, top.reason),
            (3, crate::query::defence::reason::BLOCKED)
        );
    }

    #[test]
    fn suspects_get_small_truncated_replies_within_a_budget_and_proof_is_served() {
        let mut cfg = defences(None, true);
        cfg.suspects.tc_per_second = 5.0;
        let s = shared(cfg);
        suspect(&s, "192.0.2.0/24", Scope::Dns);
        let mut r = Rig::with_shared(example_set(), Some(s.clone()));
        // UDP without a cookie: TC=1, the question alone, never larger than the query.
        for q in [
            Q::new(WWW, 1).bytes(),
            Q::new(WWW, 1).edns(1232).bytes(),
            Q::new(WWW, 1).edns(1232).cookie(&[1; 8]).bytes(),
        ] {
            let raw = {
                let src = SocketAddr::new("192.0.2.9".parse().unwrap(), 5353);
                let mut out = vec![0u8; 4096];
                match r.p.process(&q, src, UDP, &mut out) {
                    Outcome::Reply(n) => out[..n].to_vec(),
                    o => panic!("{o:?}"),
                }
            };
            let a = Reply::parse(&raw);
            assert!(a.tc(), "truncated");
            assert!(a.is_empty(), "no records");
            assert_eq!(a.question, Some((WWW.into(), 1, 1)));
            assert!(raw.len() <= q.len(), "{} > {}", raw.len(), q.len());
        }
        // Over TCP the same source is answered.
        let a = r.send(&Q::new(WWW, 1).bytes(), "192.0.2.9", TCP).unwrap();
        assert_eq!(a.answer[0].rdata, [192, 0, 2, 10]);
        // Past the budget (5 a second per /24): dropped and counted, but one in two (the
        // slip) still truncated.
        let q = Q::new(WWW, 1).bytes();
        let sent = (0..20)
            .filter(|_| r.send(&q, "192.0.2.10", UDP).is_some())
            .count();
        assert!(
            (10..=13).contains(&sent),
            "{sent} truncated replies past a budget of 5"
        );
        assert!(r.drops(DropCause::Suspect) >= 7);
        // Another prefix is not a suspect.
        let a = r.send(&q, "198.51.100.1", UDP).unwrap();
        assert!(!a.tc());
        assert_eq!(load(&s.suspects.truncated), 3 + sent as u64);
        // A valid server cookie proves the source: answered over UDP (cookies are bound to the
        // address: the suspect learns its own over TCP).
        let learn = r
            .send(&Q::new(WWW, 1).cookie(&[7; 8]).bytes(), "192.0.2.77", TCP)
            .unwrap();
        let both = learn.cookie().unwrap();
        assert_eq!(both.len(), 24);
        let proven = Q::new(WWW, 1).cookie(&both).bytes();
        let a = r.send(&proven, "192.0.2.77", UDP).unwrap();
        assert!(!a.tc(), "a valid cookie beats the suspicion");
        assert_eq!(a.answer[0].rdata, [192, 0, 2, 10]);
        assert!(load(&s.suspects.proven) >= 1);
    }

    #[test]
    fn an_nxdomain_suspect_keeps_its_answers_for_names_that_exist() {
        let mut cfg = defences(None, false);
        cfg.random_subdomain.enabled = true;
        cfg.random_subdomain.zone_nxdomains_per_second = 5.0;
        cfg.random_subdomain.source_nxdomain_limit = 1000;
        cfg.random_subdomain.escalate_after = 1000;
        let s = shared(cfg);
        suspect(&s, "192.0.2.53/32", Scope::Nxdomain);
        let mut r = Rig::with_shared(example_set(), Some(s.clone()));
        let nx = Q::new("nope-7f3a.example.com.", 1).bytes();
        // A zone under no flood: the suspect's NXDOMAINs are whole (a resolver relaying a
        // flood on another tenant's zone had them truncated, and dropped, in every zone).
        let a = r.send(&nx, "192.0.2.53", UDP).unwrap();
        assert_eq!((a.tc(), a.rcode()), (false, rcode::NXDOMAIN));
        // The zone flooded (by others): its NXDOMAINs for the suspect are truncated.
        for i in 0..10u8 {
            let q = Q::new(&format!("r{i}.example.com."), 1).bytes();
            r.send(&q, &format!("198.51.100.{i}"), UDP).unwrap();
        }
        let a = r.send(&Q::new(WWW, 1).bytes(), "192.0.2.53", UDP).unwrap();
        assert!(!a.tc());
        assert_eq!(a.answer[0].rdata, [192, 0, 2, 10]);
        let a = r.send(&nx, "192.0.2.53", UDP).unwrap();
        assert!(a.tc() && a.is_empty(), "an NXDOMAIN is truncated");
        let a = r.send(&nx, "192.0.2.53", TCP).unwrap();
        assert_eq!(a.rcode(), rcode::NXDOMAIN, "and answered over TCP");
    }

    #[test]
    fn a_query_for_our_server_cookie_alone_is_answered_noerror_with_it() {
        // RFC 7873 §5.4: no question, an OPT with a COOKIE. NSD answers so; Knot FORMERR.
        let mut r = Rig::new(example_set(), Some(defences(None, true)));
        let ask = |cookie: &[u8]| {
            let mut m = vec![0, 9, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1];
            let len = cookie.len() as u8;
            m.extend_from_slice(&[0, 0, 41, 4, 0xd0, 0, 0, 0, 0, 0, 4 + len, 0, 10, 0, len]);
            m.extend_from_slice(cookie);
            m
        };
        let client = [1, 2, 3, 4, 5, 6, 7, 8];
        let a = r.send(&ask(&client), "192.0.2.1", UDP).unwrap();
        assert_eq!((a.id, a.rcode()), (9, rcode::NOERROR));
        assert!(a.question.is_none() && a.is_empty(), "{a:?}");
        let both = a.cookie().expect("our cookie");
        assert_eq!((both.len(), &both[..8]), (24, &client[..]));
        // Returned from the address it was made for: NOERROR; from another: BADCOOKIE with a
        // fresh one.
        let a = r.send(&ask(&both), "192.0.2.1", TCP).unwrap();
        assert_eq!(a.rcode(), rcode::NOERROR);
        let a = r.send(&ask(&both), "192.0.2.2", UDP).unwrap();
        assert_eq!(a.rcode(), rcode::BADCOOKIE);
        assert!(a.cookie().is_some_and(|c| c != both));
        // No cookie in the OPT, or no OPT: FORMERR as before.
        let mut m = vec![0, 9, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1];
        m.extend_from_slice(&[0, 0, 41, 4, 0xd0, 0, 0, 0, 0, 0, 0]);
        let a = r.send(&m, "192.0.2.1", UDP).unwrap();
        assert_eq!(a.rcode(), rcode::FORMERR);
        assert!(a.opt.is_some() && a.cookie().is_none(), "{a:?}");
        let a = r.send(&m[..12], "192.0.2.1", UDP).unwrap();
        assert_eq!(a.rcode(), rcode::FORMERR);
        // Only a version-0 OPT and nothing else makes one (RFC 7873 §5.4).
        let mut v1 = ask(&client);
        v1[18] = 1;
        let a = r.send(&v1, "192.0.2.1", UDP).unwrap();
        assert_ne!(a.rcode(), rcode::NOERROR, "{a:?}");
        // A NOTIFY without a question is no cookie query.
        let mut n = ask(&client);
        n[2] = 0x20;
        let a = r.send(&n, "192.0.2.1", UDP).unwrap();
        assert_eq!(a.rcode(), rcode::FORMERR);
    }

    #[test]
    fn malformed_queries_get_formerr_and_runts_and_responses_are_dropped() {
        let mut r = Rig::new(example_set(), None);
        let good = Q::new(WWW, 1).id(77).bytes();
        // Two questions: FORMERR without a question.
        let mut m = good.clone();
        m[5] = 2;
        let a = r.send(&m, "192.0.2.1", UDP).unwrap();
        assert!(a.qr());
        assert_eq!((a.id, a.rcode()), (77, rcode::FORMERR));
        assert!(a.question.is_none() && a.is_empty() && a.opt.is_none());
        // A question, then an additional count past the end: FORMERR echoing the question.
        let mut m = good.clone();
        m[11] = 3;
        let a = r.send(&m, "192.0.2.1", UDP).unwrap();
        assert_eq!(a.rcode(), rcode::FORMERR);
        assert_eq!(a.question, Some((WWW.into(), 1, 1)));
        assert!(a.is_empty());
        // A record in the answer section of a query.
        let mut m = good.clone();
        m[7] = 1;
        m.extend_from_slice(&[0, 0, 1, 0, 1, 0, 0, 0, 60, 0, 4, 192, 0, 2, 1]);
        let a = r.send(&m, "192.0.2.1", UDP).unwrap();
        assert_eq!(a.rcode(), rcode::FORMERR);
        assert!(a.question.is_some());
        // A sound OPT followed by a broken record, or two OPTs: FORMERR without OPT (as
        // Knot and NSD answer).
        let mut m = Q::new(WWW, 1).edns(1232).bytes();
        m[11] = 2;
        m.extend_from_slice(&[0, 0, 1, 0]);
        let a = r.send(&m, "192.0.2.1", TCP).unwrap();
        assert_eq!(a.rcode(), rcode::FORMERR);
        assert!(a.opt.is_none(), "{a:?}");
        let mut m = Q::new(WWW, 1).edns(1232).bytes();
        m[11] = 2;
        m.extend_from_slice(&[0, 0, 41, 4, 0, 0, 0, 0, 0, 0, 0]);
        let a = r.send(&m, "192.0.2.1", TCP).unwrap();
        assert_eq!(a.rcode(), rcode::FORMERR);
        assert!(a.opt.is_none(), "{a:?}");
        // No question, an OPT with a client cookie (RFC 7873 §5.4): FORMERR with OPT, as
        // Knot answers; without OPT, none.
        let mut m = vec![0, 9, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1];
        m.extend_from_slice(&[0, 0, 41, 4, 0xd0, 0, 0, 0, 0, 0, 12, 0, 10, 0, 8]);
        m.extend_from_slice(&[1, 2, 3, 4, 5, 6, 7, 8]);
        let a = r.send(&m, "192.0.2.1", UDP).unwrap();
        assert_eq!((a.id, a.rcode()), (9, rcode::FORMERR));
        assert!(a.question.is_none() && a.opt.is_some(), "{a:?}");
        let a = r.send(&m[..12], "192.0.2.1", UDP);
        assert!(a.as_ref().is_none_or(|a| a.opt.is_none()), "{a:?}");
        assert_eq!(r.rcodes(rcode::FORMERR), 7);
        // Shorter than a header, or a response: no answer at all.
        assert!(r.send(&good[..11], "192.0.2.1", UDP).is_none());
        let mut resp = good.clone();
        resp[2] |= 0x80;
        assert!(r.send(&resp, "192.0.2.1", UDP).is_none());
        assert_eq!(r.drops(DropCause::Malformed), 2);
        assert_eq!(r.rcodes(rcode::FORMERR), 7);
    }

    #[test]
    fn identity_and_version_in_class_ch_as_knot_and_nsd_answer_them() {
        let cfg = PipelineConfig {
            identity: Some(Arc::from(&b"ns1.node"[..])),
            version: None,
            ..Default::default()
        };
        let mut r = Rig::with_pipeline(example_set(), None, cfg);
        for name in ["id.server.", "HOSTNAME.bind."] {
            let a = r
                .send(
                    &Q::new(name, 16).class(3).edns(1232).bytes(),
                    "192.0.2.1",
                    UDP,
                )
                .unwrap();
            assert_eq!(a.rcode(), rcode::NOERROR);
            assert_eq!(a.flags & 0x0400, 0, "no AA");
            assert_eq!(a.answer.len(), 1);
            let rr = &a.answer[0];
            assert_eq!((rr.rtype, rr.class, rr.ttl), (16, 3, 0));
            assert_eq!(rr.rdata, b"\x08ns1.node");
            assert!(a.opt.is_some());
        }
        // Not set (or set to ""): refused, as other types and names in CH are.
        for (name, qtype) in [
            ("version.bind.", 16),
            ("id.server.", 1),
            ("authors.bind.", 16),
        ] {
            let a = r
                .send(&Q::new(name, qtype).class(3).bytes(), "192.0.2.1", UDP)
                .unwrap();
            assert_eq!(a.rcode(), rcode::REFUSED, "{name}");
            assert!(a.answer.is_empty());
        }
    }

    #[test]
    fn nsid_when_asked_and_extended_errors_on_what_is_refused_on_purpose() {
        use crate::query::wire::{OPT_EDE, OPT_NSID};
        let cfg = PipelineConfig {
            nsid: Some(Arc::from(&b"node-a"[..])),
            ..Default::default()
        };
        let mut r = Rig::with_pipeline(example_set(), None, cfg);
        let asked = Q::new(WWW, 1).option(OPT_NSID, &[]).bytes();
        let a = r.send(&asked, "192.0.2.1", UDP).unwrap();
        assert_eq!(a.rcode(), rcode::NOERROR);
        assert_eq!(a.option(OPT_NSID).as_deref(), Some(&b"node-a"[..]));
        assert_eq!(a.option(OPT_EDE), None, "no error, no EDE");
        // Not asked: not sent.
        let a = r
            .send(&Q::new(WWW, 1).edns(1232).bytes(), "192.0.2.1", UDP)
            .unwrap();
        assert_eq!(a.option(OPT_NSID), None);
        // A name outside every zone: REFUSED, Not Authoritative (20), and the NSID asked.
        let q = Q::new("example.org.", 1).option(OPT_NSID, &[]).bytes();
        let a = r.send(&q, "192.0.2.1", UDP).unwrap();
        assert_eq!(a.rcode(), rcode::REFUSED);
        assert_eq!(a.option(OPT_EDE), Some(vec![0, 20]));
        assert_eq!(a.option(OPT_NSID).as_deref(), Some(&b"node-a"[..]));
        // A transfer here without transfers set up: REFUSED, Prohibited (18).
        let a = r.send(
            &Q::new("example.com.", 252).edns(1232).bytes(),
            "192.0.2.1",
            TCP,
        );
        let a = a.unwrap();
        assert_eq!(
            (a.rcode(), a.option(OPT_EDE)),
            (rcode::REFUSED, Some(vec![0, 18]))
        );
        // AXFR over UDP: NOTIMP, Not Supported (21).
        let a = r
            .send(
                &Q::new("example.com.", 252).edns(1232).bytes(),
                "192.0.2.1",
                UDP,
            )
            .unwrap();
        assert_eq!(
            (a.rcode(), a.option(OPT_EDE)),
            (rcode::NOTIMP, Some(vec![0, 21]))
        );
        // Without EDNS there is nowhere to put either.
        let a = r
            .send(&Q::new("example.org.", 1).bytes(), "192.0.2.1", UDP)
            .unwrap();
        assert!(a.opt.is_none());
        // No NSID configured: asked, none sent.
        let mut plain = Rig::new(example_set(), None);
        let a = plain.send(&asked, "192.0.2.1", UDP).unwrap();
        assert_eq!(a.option(OPT_NSID), None);
    }

    #[test]
    fn an_edns_version_above_zero_gets_badvers() {
        let mut r = Rig::new(example_set(), None);
        let q = Q::new(WWW, 1).edns(4096).version(1).dnssec().id(9).bytes();
        let a = r.send(&q, "192.0.2.1", UDP).unwrap();
        assert_eq!(a.rcode(), rcode::BADVERS);
        assert_eq!(
            a.flags & 0xF,
            0,
            "BADVERS lives in the OPT's extended rcode"
        );
        let opt = a.opt.as_ref().unwrap();
        assert_eq!(opt.ttl >> 24, 1, "extended rcode 1 (16 >> 4)");
        assert_eq!((opt.ttl >> 16) & 0xFF, 0, "our version: 0");
        assert_eq!(opt.ttl & 0x8000, 0x8000, "DO echoed");
        assert_eq!(opt.class, 1232, "our payload size");
        assert_eq!(a.question, Some((WWW.into(), 1, 1)));
        assert!(a.is_empty());
        assert_eq!(r.rcodes(rcode::BADVERS), 1);
        assert_eq!(r.rcodes(rcode::NOERROR), 0);
    }

    #[test]
    fn axfr_over_udp_is_notimp_and_other_meta_queries_are_refused() {
        let mut r = Rig::new(example_set(), None);
        let ask = |r: &mut Rig, q: Q, t: Transport| {
            let a = r.send(&q.bytes(), "192.0.2.1", t).unwrap();
            assert!(a.answer.is_empty(), "{q:?}: {a:?}");
            a.rcode()
        };
        let apex = "example.com.";
        // RFC 5936 §4.2: AXFR is TCP only; over TCP without transfers configured, refused.
        assert_eq!(ask(&mut r, Q::new(apex, 252), UDP), rcode::NOTIMP);
        assert_eq!(ask(&mut r, Q::new(apex, 252), TCP), rcode::REFUSED);
        assert_eq!(ask(&mut r, Q::new(apex, 251), UDP), rcode::REFUSED);
        // TSIG and TKEY: no such data, NODATA (as Knot and NSD answer); NXNAME (128) is
        // FORMERR (RFC 9824).
        for qt in [250, 249] {
            assert_eq!(ask(&mut r, Q::new(apex, qt), UDP), rcode::NOERROR, "{qt}");
        }
        assert_eq!(ask(&mut r, Q::new(apex, 128), UDP), rcode::FORMERR);
        // Class CH, a name in no zone, NOTIFY for a zone we are not a secondary of.
        assert_eq!(ask(&mut r, Q::new(apex, 16).class(3), UDP), rcode::REFUSED);
        assert_eq!(ask(&mut r, Q::new("example.org.", 1), UDP), rcode::REFUSED);
        assert_eq!(ask(&mut r, Q::new(apex, 6).opcode(4), UDP), rcode::NOTAUTH);
        // UPDATE: not implemented.
        assert_eq!(ask(&mut r, Q::new(apex, 6).opcode(5), UDP), rcode::NOTIMP);
        // Class ANY is answered from IN.
        let a = r
            .send(&Q::new(WWW, 1).class(255).bytes(), "192.0.2.1", UDP)
            .unwrap();
        assert_eq!((a.rcode(), a.answer.len()), (rcode::NOERROR, 1));
        assert_eq!(r.rcodes(rcode::NOTIMP), 2);
        assert_eq!(r.rcodes(rcode::REFUSED), 4);
    }

    #[test]
    fn rrl_slips_and_drops_a_udp_flood_from_one_source_but_never_over_tcp() {
        let rrl = RrlConfig {
            responses_per_second: 5.0,
            slip: 2,
            ..RrlConfig::default()
        };
        let mut r = Rig::new(example_set(), Some(defences(Some(rrl), false)));
        let (mut answered, mut slipped, mut dropped) = (0, 0, 0);
        for id in 0..50 {
            let q = Q::new(WWW, 1).edns(1232).id(id).bytes();
            match r.send(&q, "192.0.2.1", UDP) {
                None => dropped += 1,
                Some(a) if a.tc() => {
                    // The slip: TC=1, the question, OPT, nothing else.
                    assert_eq!((a.id, a.rcode()), (id, rcode::NOERROR));
                    assert!(a.is_empty() && a.opt.is_some());
                    assert_eq!(a.question, Some((WWW.into(), 1, 1)));
                    slipped += 1;
                }
                Some(a) => {
                    assert_eq!(a.answer.len(), 1);
                    answered += 1;
                }
            }
        }
        assert_eq!((answered, slipped, dropped), (5, 22, 23));
        let rrl = r.shared().rrl.as_ref().unwrap();
        assert_eq!(load(&rrl.limited), 45);
        assert_eq!(load(&rrl.slipped), 22);
        assert_eq!(load(&rrl.dropped), 23);
        assert_eq!(r.drops(DropCause::Rrl), 23);
        assert_eq!(load(&r.stats.truncated), 22);
        // The same flood over TCP: every answer, nothing counted.
        for id in 0..50 {
            let q = Q::new(WWW, 1).edns(1232).id(id).bytes();
            let a = r.send(&q, "192.0.2.1", TCP).unwrap();
            assert!(!a.tc() && a.answer.len() == 1, "TCP {id}: {a:?}");
        }
        // Another prefix has its own account.
        let a = r.send(&Q::new(WWW, 1).bytes(), "192.0.3.1", UDP).unwrap();
        assert_eq!(a.answer.len(), 1);
        let rrl = r.shared().rrl.as_ref().unwrap();
        assert_eq!(load(&rrl.limited), 45);
        assert_eq!(r.drops(DropCause::Rrl), 23);
        let ev = events(r.shared(), Action::RateLimited);
        assert_eq!(ev.len(), 1, "{ev:?}");
        assert_eq!(ev[0].total, 45);
        assert_eq!(ev[0].top[0].reason, crate::query::defence::reason::RRL);
    }

    /// A qtype different in every query spreads no flood over many accounts: NODATA,
    /// NXDOMAIN and referrals name no type in their answers and are counted without it (as
    /// BIND counts them); positive answers of different types keep accounts of their own.
    #[test]
    fn random_qtypes_share_one_rrl_account_for_nodata_nxdomain_and_referrals() {
        let rrl = RrlConfig {
            responses_per_second: 5.0,
            slip: 0,
            ..RrlConfig::default()
        };
        let mut r = Rig::new(example_set(), Some(defences(Some(rrl), false)));
        // NODATA at www (types it does not have), NXDOMAIN, a referral: 20 types each.
        for (name, src) in [
            (WWW, "192.0.2.1"),
            ("nothere.example.com.", "192.0.3.1"),
            ("a.sub.example.com.", "192.0.4.1"),
        ] {
            let sent = (0..20u16)
                .filter(|&i| {
                    let q = Q::new(name, 100 + i).edns(1232).id(i).bytes();
                    r.send(&q, src, UDP).is_some()
                })
                .count();
            assert_eq!(sent, 5, "{name}: one account for every type");
        }
        // Positive answers: each type its own account (A and AAAA at www, 5 each).
        let sent = (0..20u16)
            .filter(|&i| {
                let t = if i % 2 == 0 { 1 } else { 28 };
                let q = Q::new(WWW, t).edns(1232).id(i).bytes();
                r.send(&q, "192.0.5.1", UDP).is_some()
            })
            .count();
        assert_eq!(sent, 10);
    }

    #[test]
    fn a_valid_server_cookie_exempts_from_rrl_and_a_forged_one_does_not() {
        let rrl = RrlConfig {
            responses_per_second: 1.0,
            slip: 1,
            ..RrlConfig::default()
        };
        let mut r = Rig::new(example_set(), Some(defences(Some(rrl), true)));
        let client = [1u8, 2, 3, 4, 5, 6, 7, 8];
        let first = r
            .send(&Q::new(WWW, 1).cookie(&client).bytes(), "192.0.2.1", UDP)
            .unwrap();
        assert_eq!(first.answer.len(), 1);
        let full = first.cookie().expect("a server cookie");
        assert_eq!((full.len(), &full[..8]), (24, &client[..]));
        // Far over the rate with the cookie: every query answered.
        for id in 0..20 {
            let a = r
                .send(
                    &Q::new(WWW, 1).cookie(&full).id(id).bytes(),
                    "192.0.2.1",
                    UDP,
                )
                .unwrap();
            assert!(
                !a.tc() && a.rcode() == 0 && a.answer.len() == 1,
                "{id}: {a:?}"
            );
            assert_eq!(a.cookie().unwrap()[..8], client);
        }
        let k = r.shared().cookies.as_ref().unwrap();
        assert_eq!(load(&k.valid), 20);
        assert_eq!(load(&r.shared().rrl.as_ref().unwrap().limited), 0);
        // A forged server cookie: not exempt, and its slips are BADCOOKIE with a fresh one.
        let mut forged = full.clone();
        forged[23] ^= 0xFF;
        for id in 0..5 {
            let a = r
                .send(
                    &Q::new(WWW, 1).cookie(&forged).id(id).bytes(),
                    "192.0.2.1",
                    UDP,
                )
                .unwrap();
            assert_eq!(a.rcode(), rcode::BADCOOKIE, "{id}: {a:?}");
            assert!(a.is_empty());
            let c = a.cookie().unwrap();
            assert_eq!((c.len(), &c[..8]), (24, &client[..]));
        }
        let k = r.shared().cookies.as_ref().unwrap();
        assert_eq!(load(&k.invalid), 5);
        assert_eq!(load(&r.shared().rrl.as_ref().unwrap().limited), 5);
        // A client cookie alone from another prefix: one answer, then BADCOOKIE slips.
        let mut badcookie = 0;
        for id in 0..20 {
            let a = r
                .send(
                    &Q::new(WWW, 1).cookie(&client).id(id).bytes(),
                    "192.0.3.1",
                    UDP,
                )
                .unwrap();
            if a.rcode() == rcode::BADCOOKIE {
                badcookie += 1;
            } else {
                assert_eq!((id, a.answer.len()), (0, 1));
            }
        }
        assert_eq!(badcookie, 19);
        assert_eq!(load(&r.shared().rrl.as_ref().unwrap().slipped), 24);
        assert_eq!(r.rcodes(rcode::BADCOOKIE), 24);
    }

    #[test]
    fn a_zone_that_requires_cookies_sends_udp_clients_to_tcp_or_badcookie() {
        use crate::config::defence::CookiePolicy;
        let zones = zone_set(vec![(
            load_zone("example.com.", &example_text()),
            ServeOptions {
                cookies: CookiePolicy::Require,
                tenant: 7,
                ..Default::default()
            },
        )]);
        let mut r = Rig::new(zones, Some(defences(None, true)));
        let src = "192.0.2.1";
        // No cookie, with and without EDNS: TC=1 with the question and nothing else.
        let a = r
            .send(&Q::new(WWW, 1).edns(1232).bytes(), src, UDP)
            .unwrap();
        assert!(
            a.tc() && a.is_empty() && a.rcode() == rcode::NOERROR,
            "{a:?}"
        );
        assert_eq!(a.question, Some((WWW.into(), 1, 1)));
        assert!(a.opt.is_some() && a.cookie().is_none());
        let a = r.send(&Q::new(WWW, 1).bytes(), src, UDP).unwrap();
        assert!(a.tc() && a.is_empty() && a.opt.is_none(), "{a:?}");
        // A client cookie alone, or a server cookie that is not ours: BADCOOKIE with a
        // fresh one.
        let client = [9u8; 8];
        let a = r
            .send(&Q::new(WWW, 1).cookie(&client).bytes(), src, UDP)
            .unwrap();
        assert_eq!(a.rcode(), rcode::BADCOOKIE);
        assert!(!a.tc() && a.is_empty());
        let mut forged = client.to_vec();
        forged.extend_from_slice(&[1, 0, 0, 0]);
        forged.extend_from_slice(&((shield::clock::unix_ms() / 1000) as u32).to_be_bytes());
        forged.extend_from_slice(&[0xAB; 8]);
        let a = r
            .send(&Q::new(WWW, 1).cookie(&forged).bytes(), src, UDP)
            .unwrap();
        assert_eq!(a.rcode(), rcode::BADCOOKIE);
        let fresh = a.cookie().unwrap();
        assert_eq!((fresh.len(), &fresh[..8]), (24, &client[..]));
        assert_ne!(fresh, forged);
        // The cookie we gave back is good: answered.
        let a = r
            .send(&Q::new(WWW, 1).cookie(&fresh).bytes(), src, UDP)
            .unwrap();
        assert!(
            a.aa() && !a.tc() && a.rcode() == 0 && a.answer.len() == 1,
            "{a:?}"
        );
        // Over TCP no cookie is needed.
        let a = r.send(&Q::new(WWW, 1).bytes(), src, TCP).unwrap();
        assert!(!a.tc() && a.answer.len() == 1, "{a:?}");
        let k = r.shared().cookies.as_ref().unwrap();
        assert_eq!(load(&k.challenged), 4);
        assert_eq!(load(&k.invalid), 1);
        assert_eq!(load(&k.valid), 1);
        assert_eq!(r.rcodes(rcode::BADCOOKIE), 2);
        // Challenges are events of the zone's tenant.
        let ev = events(r.shared(), Action::Challenged);
        assert_eq!(ev.len(), 1, "{ev:?}");
        assert_eq!((ev[0].tenant, ev[0].total), (7, 4));
        assert_eq!(ev[0].top[0].reason, crate::query::defence::reason::COOKIE);
    }

    #[test]
    fn error_replies_are_rate_limited_too_over_udp_only() {
        let rrl = RrlConfig {
            responses_per_second: 100.0,
            errors_per_second: Some(2.0),
            slip: 0,
            ..RrlConfig::default()
        };
        let mut r = Rig::new(example_set(), Some(defences(Some(rrl), false)));
        let mut formerr = Q::new(WWW, 1).bytes();
        formerr[5] = 2;
        let replies = (0..10)
            .filter(|_| r.send(&formerr, "192.0.2.1", UDP).is_some())
            .count();
        assert_eq!(replies, 2, "2 errors a second, then drops (slip 0)");
        assert_eq!(r.drops(DropCause::Rrl), 8);
        // Errors of any kind share the account: REFUSED and NOTIMP are dropped now too.
        let refused = Q::new("example.org.", 1).bytes();
        assert!(r.send(&refused, "192.0.2.1", UDP).is_none());
        let notimp = Q::new("example.com.", 252).bytes();
        assert!(r.send(&notimp, "192.0.2.1", UDP).is_none());
        assert_eq!(r.drops(DropCause::Rrl), 10);
        // Answers are another class, errors over TCP are never limited, and another
        // prefix has its own account.
        let a = r.send(&Q::new(WWW, 1).bytes(), "192.0.2.1", UDP).unwrap();
        assert_eq!(a.answer.len(), 1);
        for _ in 0..10 {
            let a = r.send(&formerr, "192.0.2.1", TCP).unwrap();
            assert_eq!(a.rcode(), rcode::FORMERR);
        }
        let a = r.send(&formerr, "192.0.3.1", UDP).unwrap();
        assert_eq!(a.rcode(), rcode::FORMERR);
        assert_eq!(r.rcodes(rcode::FORMERR), 2 + 10 + 1);
        assert_eq!(load(&r.shared().rrl.as_ref().unwrap().limited), 10);
    }

    #[test]
    fn udp_replies_fit_the_size_limit_and_tcp_gets_the_whole_rrset() {
        let mut r = Rig::new(example_set(), None);
        let big = "big.example.com.";
        // Without EDNS: 512 bytes; the 12 TXT records do not fit, none is sent, TC=1.
        let a = r.send(&Q::new(big, 16).bytes(), "192.0.2.1", UDP).unwrap();
        assert!(
            a.bytes.len() <= 512 && a.tc() && a.answer.is_empty(),
            "{a:?}"
        );
        // EDNS 4096 from the client, 1232 ours: still too big.
        let a = r
            .send(&Q::new(big, 16).edns(4096).bytes(), "192.0.2.1", UDP)
            .unwrap();
        assert!(
            a.bytes.len() <= 1232 && a.tc() && a.answer.is_empty(),
            "{a:?}"
        );
        assert_eq!(a.opt.as_ref().unwrap().class, 1232);
        // TCP: all of it.
        let a = r.send(&Q::new(big, 16).bytes(), "192.0.2.1", TCP).unwrap();
        assert!(!a.tc() && a.answer.len() == 12, "{a:?}");
        assert!(a.bytes.len() > 2400);
        assert_eq!(load(&r.stats.truncated), 2);
    }
}
