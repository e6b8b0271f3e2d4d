//! The pipeline a query walks, shared by UDP and TCP: the named points of
//! [`crate::query_module`] with the defences of [`crate::defence`] plugged in, parsing,
//! answering, and the glue of [`crate::response`].
//!
//! 1. `before_parse` — the block map, on the source address alone (a proven block drops; an
//!    unproven entry marks the source a suspect);
//! 2. parse header, question and OPT ([`crate::wire`]); a malformed message is dropped or
//!    answered FORMERR;
//! 3. EDNS version, opcode, class and meta types; transfers, NOTIFY and TSIG go to
//!    [`crate::transfer`];
//! 4. the zone that answers, its tenant; `after_parse` — cookies, suspects, the tenant's
//!    rules (whatever decides on the query itself);
//! 5. answer from the zones ([`crate::internet`]);
//! 6. `after_answer` — suspects' NXDOMAIN, the random-subdomain defence and RRL, which may
//!    turn the response into a slip (TC=1, or BADCOOKIE to a client that sent a cookie), a
//!    truncated reply or a drop;
//! 7. OPT (with our cookie) appended, counters bumped.
//!
//! Error replies walk `after_answer` too, as the error class. Whatever a defence decides
//! becomes bytes (or nothing) in one place, [`Processor::act`].

use std::net::SocketAddr;
use std::sync::Arc;

use arc_swap::ArcSwap;
use zones::rrtype::t;

use crate::config::defence::CookiePolicy;
use crate::defence;
use crate::internet::{self, Kind};
use crate::query_module::{AnswerClass, Answered, CookieStatus, Parsed, Step};
use crate::response::{self, Writer};
use crate::served_zones::ZoneSet;
use crate::stats::{DropCause, WorkerStats};
use crate::wire::{self, ParseError, Query, opcode, rcode};

pub use crate::query_module::Transport;
pub use crate::response::opt_rr;

/// Settings the pipeline reads on every query (prepared once per config load).
#[derive(Debug, Clone)]
pub struct PipelineConfig {
    /// Our EDNS UDP payload size (what we advertise and the most we send).
    pub udp_payload: u16,
    /// The TCP idle timeout announced to clients that ask (RFC 7828), in units of 100 ms.
    pub tcp_keepalive: u16,
    /// Compact denials signed per second per worker, and per source.
    pub compact_denial: (u32, u32),
}

impl Default for PipelineConfig {
    fn default() -> Self {
        PipelineConfig {
            udp_payload: 1232,
            tcp_keepalive: 100,
            compact_denial: (2000, 100),
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
    xfr: Option<Arc<crate::xfr::Transfers>>,
    job: Option<Box<crate::xfr::axfr::Job>>,
    /// The service address of the next message (set by the transport).
    local: Option<std::net::IpAddr>,
    /// Samples answered names for the XDP fast path's hot names.
    hot: Option<crate::hot_names::HotSampler>,
    /// Budget, source shares and cache of compact denials.
    denier: DenierSlot,
    /// The query log (`[dnstap]`).
    tap: Option<crate::dnstap::Tap>,
    /// A defence dropped, slipped or refused the message being processed (for dnstap).
    defence_acted: bool,
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
            hot: None,
            denier: DenierSlot::Own(None),
            tap: None,
            defence_acted: false,
        }
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
    pub fn with_tap(mut self, tap: Option<crate::dnstap::Tap>) -> Processor {
        self.tap = tap;
        self
    }

    /// Samples this processor's UDP answers for the XDP fast path's hot names.
    pub fn with_hot(mut self, hot: Option<crate::hot_names::HotSampler>) -> Processor {
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
        let tapped = crate::dnstap::Tapped {
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
        let stats = &*self.stats;
        // 1. Before parsing: a blocked source costs one lookup and nothing else.
        if let Some(p) = &mut self.plan
            && let Step::Drop(why) = p.before_parse(src.ip(), transport)
        {
            stats.dropped(why);
            return Outcome::Refused;
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
                // NXNAME only ever appears in a compact denial's bitmap (RFC 9824 §3.5).
                crate::signing::online::NXNAME => Some(rcode::FORMERR),
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
            local: self.local,
            transport,
            zone: zone_idx.map(|i| zones.id(i)),
            apex: zone.map_or(&b""[..], |(_, z)| z.apex().as_wire()),
            tenant: zone_idx.map_or(0, |i| zones.tenant(i)),
            cookie_policy: zone_idx.map_or(CookiePolicy::On, |i| zones.cookie_policy(i)),
            cookie: CookieStatus::Absent,
            cookie_out: None,
            exempt: false,
            suspect: self.plan.as_ref().and_then(|p| p.suspect()),
        };
        if let Some(p) = &mut self.plan {
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
        let mut opts = response::OptOptions {
            cookie: parsed.cookie_out.as_ref(),
            keepalive: self.cfg.keepalive(q, transport),
            compact_ok: false,
        };
        let opt = response::opt_room(q, &opts);
        let mut w = Writer::new(out, limit - opt);
        w.start(req, q, rcode::NOERROR, true);
        let mut shared_denier: Option<std::sync::MutexGuard<'_, crate::signing::online::Denier>> =
            None;
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
                    src: src.ip(),
                    stats: &self.stats,
                    compact_ok: q.edns.is_some_and(|e| e.compact_ok),
                    chain_past_budget: transport == Transport::Tcp,
                })
            }
            _ => None,
        };
        // RFC 9824 §5: a compact-denial zone asked with CO says so, and its NXDOMAINs keep
        // their rcode.
        opts.compact_ok = online.as_ref().is_some_and(|o| o.compact_ok);
        let ans = internet::answer_in(&mut w, q, zones, zone, online);
        drop(shared_denier);
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
            let step = p.after_answer(&parsed, &a);
            if step != Step::Continue {
                let cookie = parsed.cookie_out;
                return self.act(step, req, out, true, edns, transport, src, cookie.as_ref());
            }
        }
        // 7. EDNS and counters.
        w.set_limit(limit);
        if edns {
            response::put_opt(&mut w, q, udp_payload, 0, opts);
        }
        let rc = w.rcode();
        let len = w.finish();
        stats.response(rc, ans.truncated);
        stats.kind(ans.kind as usize);
        if let (Some(h), Some(i)) = (&mut self.hot, zone_idx)
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
        cookie: Option<&crate::query_module::CookieOut>,
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
            Step::Slip => {
                let (n, rc) = response::slip(out, req, q, udp_payload, with_question, cookie);
                self.stats.response(rc, rc == rcode::NOERROR);
                Outcome::Reply(n)
            }
            Step::Truncate => {
                if !self
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
            Step::Refuse(rc) => {
                self.error_reply(req, out, rc, with_question, with_edns, transport, src)
            }
        }
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
                local: self.local,
                transport,
                zone: None,
                apex: b"",
                tenant: 0,
                cookie_policy: CookiePolicy::On,
                cookie: CookieStatus::Absent,
                cookie_out: None,
                exempt: false,
                suspect: p.suspect(),
            };
            let a = Answered {
                class: AnswerClass::Error,
                key: b"",
                rcode: rc,
            };
            match p.after_answer(&parsed, &a) {
                Step::Continue | Step::Refuse(_) => {}
                step => {
                    return self.act(
                        step,
                        req,
                        out,
                        with_question,
                        with_edns,
                        transport,
                        src,
                        None,
                    );
                }
            }
        }
        let limit = response::size_limit(q, transport, udp_payload, out.len())
            .max(512)
            .min(out.len());
        let mut w = Writer::new(out, limit);
        w.start(req, q, rc & 0xF, with_question);
        if with_edns || rc > 15 {
            let opts = response::OptOptions {
                cookie: None,
                keepalive: self.cfg.keepalive(q, transport),
                compact_ok: false,
            };
            response::put_opt(&mut w, q, udp_payload, rc, opts);
        }
        let len = w.finish();
        self.stats.response(rc, false);
        Outcome::Reply(len)
    }
}

#[cfg(test)]
pub(crate) mod tests {
    //! The pipeline in-process: the named points in order (block map before parsing, cookies
    //! after parsing, RRL after answering), the error replies and their rate limit. The
    //! helpers here (a test zone, a query builder, a strict reply reader, a processor rig)
    //! serve the tests of `internet`, `response`, `nsec_proofs` and `tcp` too.

    use std::net::{IpAddr, SocketAddr};
    use std::sync::Arc;
    use std::sync::atomic::{AtomicU64, Ordering};
    use std::time::Duration;

    use arc_swap::ArcSwap;
    use shield::block::{BlockConfig, BlockEntry, BlockMap, Evidence, Origin, Scope};
    use shield::events::{Action, Aggregator, AggregatorConfig, Event};
    use zones::Zone;

    use super::*;
    use crate::config::defence::{DefenceConfig, RrlConfig};
    use crate::defence::Shared;
    use crate::served_zones::ServeOptions;

    /// The test zone `example.com.`: answers, CNAME chains and loops, a wildcard, a
    /// delegation with glue, a DNAME and an RRset too big for UDP.
    pub(crate) fn example_text() -> String {
        let mut t = String::from(
            "$TTL 300\n\
             @        SOA ns1 hostmaster 2026010101 7200 3600 1209600 60\n\
             @        NS ns1\n\
             @        NS ns2.example.net.\n\
             ns1      A 192.0.2.1\n\
             www      A 192.0.2.10\n\
             www      AAAA 2001:db8::10\n\
             mail     MX 10 www\n\
             cn       CNAME cn2\n\
             cn2      CNAME www\n\
             cnx      CNAME nothere\n\
             loop1    CNAME loop2\n\
             loop2    CNAME loop1\n\
             *.wild   A 192.0.2.20\n\
             x.wild   TXT \"exists\"\n\
             sub      NS ns.sub\n\
             sub      NS ns.elsewhere.net.\n\
             ns.sub   A 192.0.2.30\n\
             dn       DNAME target\n\
             x.target A 192.0.2.40\n",
        );
        for i in 0..12 {
            t.push_str(&format!("big TXT \"{i:02}{}\"\n", "x".repeat(198)));
        }
        t
    }

    /// Loads `text` as the zone `origin`.
    pub(crate) fn load_zone(origin: &str, text: &str) -> Arc<Zone> {
        let o: zones::Name = origin.parse().unwrap();
        let l = zones::load_bytes("test", text, &o, &zones::ReadOptions::new(&o))
            .unwrap_or_else(|e| panic!("{origin}: {e}"));
        Arc::new(l.zone)
    }

    /// A published zone set of these zones.
    pub(crate) fn zone_set(zones: Vec<(Arc<Zone>, ServeOptions)>) -> Arc<ArcSwap<ZoneSet>> {
        Arc::new(ArcSwap::from_pointee(ZoneSet::new(zones, 1)))
    }

    /// `example.com.` alone, default options.
    pub(crate) fn example_set() -> Arc<ArcSwap<ZoneSet>> {
        zone_set(vec![(
            load_zone("example.com.", &example_text()),
            ServeOptions::default(),
        )])
    }

    /// A query to build.
    #[derive(Clone, Debug)]
    pub(crate) struct Q {
        pub id: u16,
        pub name: String,
        pub qtype: u16,
        pub qclass: u16,
        pub opcode: u8,
        pub edns: Option<u16>,
        pub version: u8,
        pub dnssec: bool,
        pub cookie: Option<Vec<u8>>,
    }

    impl Q {
        /// `name` `qtype` IN, RD, no EDNS.
        pub(crate) fn new(name: &str, qtype: u16) -> Q {
            Q {
                id: 0x1234,
                name: name.into(),
                qtype,
                qclass: 1,
                opcode: 0,
                edns: None,
                version: 0,
                dnssec: false,
                cookie: None,
            }
        }
        pub(crate) fn id(mut self, id: u16) -> Q {
            self.id = id;
            self
        }
        pub(crate) fn edns(mut self, size: u16) -> Q {
            self.edns = Some(size);
            self
        }
        pub(crate) fn version(mut self, v: u8) -> Q {
            self.version = v;
            self
        }
        pub(crate) fn dnssec(mut self) -> Q {
            self.dnssec = true;
            self.edns.get_or_insert(4096);
            self
        }
        pub(crate) fn cookie(mut self, c: &[u8]) -> Q {
            self.cookie = Some(c.to_vec());
            self.edns.get_or_insert(1232);
            self
        }
        pub(crate) fn class(mut self, c: u16) -> Q {
            self.qclass = c;
            self
        }
        pub(crate) fn opcode(mut self, op: u8) -> Q {
            self.opcode = op;
            self
        }

        /// The wire form.
        pub(crate) fn bytes(&self) -> Vec<u8> {
            let flags: u16 = ((self.opcode as u16) << 11) | crate::wire::hf::RD;
            let mut m = self.id.to_be_bytes().to_vec();
            m.extend_from_slice(&flags.to_be_bytes());
            m.extend_from_slice(&[0, 1, 0, 0, 0, 0, 0, self.edns.is_some() as u8]);
            let n = zones::Name::parse(&self.name, Some(&zones::Name::root())).unwrap();
            m.extend_from_slice(n.as_wire());
            m.extend_from_slice(&self.qtype.to_be_bytes());
            m.extend_from_slice(&self.qclass.to_be_bytes());
            if let Some(size) = self.edns {
                m.extend_from_slice(&[0, 0, 41]);
                m.extend_from_slice(&size.to_be_bytes());
                m.extend_from_slice(&[0, self.version, if self.dnssec { 0x80 } else { 0 }, 0]);
                let mut rd = Vec::new();
                if let Some(c) = &self.cookie {
                    rd.extend_from_slice(&crate::wire::OPT_COOKIE.to_be_bytes());
                    rd.extend_from_slice(&(c.len() as u16).to_be_bytes());
                    rd.extend_from_slice(c);
                }
                m.extend_from_slice(&(rd.len() as u16).to_be_bytes());
                m.extend_from_slice(&rd);
            }
            m
        }

        /// The parsed form.
        pub(crate) fn parsed(&self) -> (Vec<u8>, Query) {
            let b = self.bytes();
            let mut q = Query::default();
            crate::wire::parse_query(&b, &mut q).unwrap();
            (b, q)
        }
    }

    /// One record of a reply.
    #[derive(Debug, Clone)]
    pub(crate) struct Rr {
        /// Owner, lower case, with its trailing dot.
        pub owner: String,
        pub rtype: u16,
        pub class: u16,
        pub ttl: u32,
        pub rdata: Vec<u8>,
        /// Where the RDATA starts in the message (to read compressed names in it).
        pub rdata_at: usize,
    }

    /// A reply read strictly: every count matches, every byte is read.
    #[derive(Debug)]
    pub(crate) struct Reply {
        pub bytes: Vec<u8>,
        pub id: u16,
        pub flags: u16,
        /// (name, type, class) when the question is echoed.
        pub question: Option<(String, u16, u16)>,
        pub answer: Vec<Rr>,
        pub authority: Vec<Rr>,
        /// Additional records other than OPT.
        pub additional: Vec<Rr>,
        pub opt: Option<Rr>,
    }

    /// The name at `off` in `m` (compression followed), lower case with its trailing dot,
    /// and the offset after it where it is written.
    pub(crate) fn read_name(m: &[u8], mut off: usize) -> (String, usize) {
        let mut s = String::new();
        let mut end = None;
        for _ in 0..128 {
            let l = m[off] as usize;
            if l & 0xC0 == 0xC0 {
                end.get_or_insert(off + 2);
                off = ((l & 0x3F) << 8) | m[off + 1] as usize;
                continue;
            }
            assert!(l < 64, "label length {l} at {off}");
            if l == 0 {
                if s.is_empty() {
                    s.push('.');
                }
                return (s, end.unwrap_or(off + 1));
            }
            for &b in &m[off + 1..off + 1 + l] {
                s.push(b.to_ascii_lowercase() as char);
            }
            s.push('.');
            off += 1 + l;
        }
        panic!("name loop in {m:?}");
    }

    fn u16_at(m: &[u8], o: usize) -> u16 {
        u16::from_be_bytes([m[o], m[o + 1]])
    }

    impl Reply {
        pub(crate) fn parse(m: &[u8]) -> Reply {
            assert!(m.len() >= 12, "short reply {m:?}");
            let counts = [u16_at(m, 4), u16_at(m, 6), u16_at(m, 8), u16_at(m, 10)];
            assert!(counts[0] <= 1, "QDCOUNT {}", counts[0]);
            let mut p = 12;
            let mut question = None;
            if counts[0] == 1 {
                let (n, e) = read_name(m, p);
                question = Some((n, u16_at(m, e), u16_at(m, e + 2)));
                p = e + 4;
            }
            let mut secs: [Vec<Rr>; 3] = Default::default();
            for (i, sec) in secs.iter_mut().enumerate() {
                for _ in 0..counts[i + 1] {
                    let (owner, e) = read_name(m, p);
                    let rdlen = u16_at(m, e + 8) as usize;
                    assert!(e + 10 + rdlen <= m.len(), "RR past the end");
                    sec.push(Rr {
                        owner,
                        rtype: u16_at(m, e),
                        class: u16_at(m, e + 2),
                        ttl: u32::from_be_bytes([m[e + 4], m[e + 5], m[e + 6], m[e + 7]]),
                        rdata: m[e + 10..e + 10 + rdlen].to_vec(),
                        rdata_at: e + 10,
                    });
                    p = e + 10 + rdlen;
                }
            }
            assert_eq!(p, m.len(), "bytes after the last record");
            let [answer, authority, additional] = secs;
            assert!(answer.iter().chain(&authority).all(|r| r.rtype != 41));
            let (opts, additional): (Vec<Rr>, Vec<Rr>) =
                additional.into_iter().partition(|r| r.rtype == 41);
            assert!(opts.len() <= 1, "more than one OPT");
            Reply {
                bytes: m.to_vec(),
                id: u16_at(m, 0),
                flags: u16_at(m, 2),
                question,
                answer,
                authority,
                additional,
                opt: opts.into_iter().next(),
            }
        }

        /// The full rcode (extended bits from OPT).
        pub(crate) fn rcode(&self) -> u16 {
            (self.flags & 0xF) | self.opt.as_ref().map_or(0, |o| ((o.ttl >> 24) as u16) << 4)
        }
        pub(crate) fn tc(&self) -> bool {
            self.flags & crate::wire::hf::TC != 0
        }
        pub(crate) fn aa(&self) -> bool {
            self.flags & crate::wire::hf::AA != 0
        }
        pub(crate) fn qr(&self) -> bool {
            self.flags & crate::wire::hf::QR != 0
        }
        /// The COOKIE option's data.
        pub(crate) fn cookie(&self) -> Option<Vec<u8>> {
            let rd = &self.opt.as_ref()?.rdata;
            let mut p = 0;
            while p + 4 <= rd.len() {
                let (code, len) = (u16_at(rd, p), u16_at(rd, p + 2) as usize);
                if code == crate::wire::OPT_COOKIE {
                    return Some(rd[p + 4..p + 4 + len].to_vec());
                }
                p += 4 + len;
            }
            None
        }
        /// The name at `off` bytes into the RDATA of `rr`.
        pub(crate) fn rdata_name(&self, rr: &Rr, off: usize) -> String {
            read_name(&self.bytes, rr.rdata_at + off).0
        }
        /// Records of no section at all.
        pub(crate) fn is_empty(&self) -> bool {
            self.answer.is_empty() && self.authority.is_empty() && self.additional.is_empty()
        }
    }

    /// Defence settings: RRL as given (off without), cookies on or off, the
    /// random-subdomain defence off.
    pub(crate) fn defences(rrl: Option<RrlConfig>, cookies: bool) -> DefenceConfig {
        let mut c = DefenceConfig {
            rrl: rrl.unwrap_or_else(|| RrlConfig {
                enabled: false,
                ..RrlConfig::default()
            }),
            ..DefenceConfig::default()
        };
        c.cookies.enabled = cookies;
        c.random_subdomain.enabled = false;
        c
    }

    /// Shared defence state over an empty block map.
    pub(crate) fn shared(cfg: DefenceConfig) -> Arc<Shared> {
        Shared::new(
            cfg,
            BlockMap::new(BlockConfig::default()),
            Aggregator::new(AggregatorConfig::default()),
        )
    }

    /// Blocks `net` for a minute, decided by `origin` (proven: an operator's, or over TCP).
    pub(crate) fn block(s: &Shared, net: &str, origin: Origin) {
        let evidence = match origin {
            Origin::Operator => Evidence::Operator,
            _ => Evidence::Tcp,
        };
        s.blocks.insert(BlockEntry::with_ttl(
            net.parse().unwrap(),
            Duration::from_secs(60),
            shield::clock::unix_ms(),
            "test",
            origin,
            evidence,
        ));
    }

    /// Makes `net` a suspect of `scope` for a minute (unproven evidence).
    pub(crate) fn suspect(s: &Shared, net: &str, scope: Scope) {
        s.blocks.insert(
            BlockEntry::with_ttl(
                net.parse().unwrap(),
                Duration::from_secs(60),
                shield::clock::unix_ms(),
                "test",
                Origin::Local,
                Evidence::Udp,
            )
            .with_scope(scope),
        );
    }

    /// The events flushed now.
    pub(crate) fn events(s: &Shared, action: Action) -> Vec<Event> {
        s.events
            .flush(shield::clock::unix_ms())
            .into_iter()
            .filter(|e| e.action == action)
            .collect()
    }

    pub(crate) fn load(a: &AtomicU64) -> u64 {
        a.load(Ordering::Relaxed)
    }

    /// A processor over a zone set with its counters; the clock is read once (at `new`),
    /// so rate limits see every query at the same instant.
    pub(crate) struct Rig {
        pub p: Processor,
        pub stats: Arc<WorkerStats>,
        pub shared: Option<Arc<Shared>>,
        out: Vec<u8>,
    }

    impl Rig {
        pub(crate) fn new(zones: Arc<ArcSwap<ZoneSet>>, cfg: Option<DefenceConfig>) -> Rig {
            Rig::with_shared(zones, cfg.map(shared))
        }

        pub(crate) fn with_shared(zones: Arc<ArcSwap<ZoneSet>>, s: Option<Arc<Shared>>) -> Rig {
            let stats = Arc::new(WorkerStats::default());
            let mut p = Processor::new(
                zones,
                Arc::new(PipelineConfig::default()),
                stats.clone(),
                s.as_ref(),
            );
            p.refresh();
            Rig {
                p,
                stats,
                shared: s,
                out: vec![0u8; 65535],
            }
        }

        /// Processes `req` from `src` (an address, port 5353): the reply, or `None` for a drop.
        pub(crate) fn send(&mut self, req: &[u8], src: &str, t: Transport) -> Option<Reply> {
            let src = SocketAddr::new(src.parse::<IpAddr>().unwrap(), 5353);
            match self.p.process(req, src, t, &mut self.out) {
                Outcome::Reply(n) => {
                    if t == Transport::Udp {
                        assert!(n <= 1232, "a UDP reply of {n} bytes");
                    }
                    Some(Reply::parse(&self.out[..n]))
                }
                Outcome::Drop | Outcome::Refused => None,
                Outcome::Transfer => panic!("a transfer without transfers configured"),
            }
        }

        pub(crate) fn drops(&self, c: DropCause) -> u64 {
            load(&self.stats.drops[c as usize])
        }

        pub(crate) fn rcodes(&self, rc: u16) -> u64 {
            load(&self.stats.rcode[rc as usize])
        }

        pub(crate) fn shared(&self) -> &Shared {
            self.shared.as_ref().expect("defences on")
        }
    }

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
            (3, crate::defence::reason::BLOCKED)
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
        // Past the budget (5 a second per /24): dropped and counted.
        let q = Q::new(WWW, 1).bytes();
        let sent = (0..20)
            .filter(|_| r.send(&q, "192.0.2.10", UDP).is_some())
            .count();
        assert!(sent <= 3, "{sent} truncated replies past a budget of 5");
        assert!(r.drops(DropCause::Suspect) >= 17);
        // Another prefix is not a suspect.
        let a = r.send(&q, "198.51.100.1", UDP).unwrap();
        assert!(!a.tc());
        assert_eq!(load(&s.suspects.truncated), 5);
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
        let s = shared(defences(None, false));
        suspect(&s, "192.0.2.53/32", Scope::Nxdomain);
        let mut r = Rig::with_shared(example_set(), Some(s.clone()));
        let a = r.send(&Q::new(WWW, 1).bytes(), "192.0.2.53", UDP).unwrap();
        assert!(!a.tc());
        assert_eq!(a.answer[0].rdata, [192, 0, 2, 10]);
        let nx = Q::new("nope-7f3a.example.com.", 1).bytes();
        let a = r.send(&nx, "192.0.2.53", UDP).unwrap();
        assert!(a.tc() && a.is_empty(), "an NXDOMAIN is truncated");
        let a = r.send(&nx, "192.0.2.53", TCP).unwrap();
        assert_eq!(a.rcode(), rcode::NXDOMAIN, "and answered over TCP");
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
        // A sound OPT followed by a broken record: FORMERR with OPT (RFC 6891 §7); two
        // OPTs: FORMERR without.
        let mut m = Q::new(WWW, 1).edns(1232).bytes();
        m[11] = 2;
        m.extend_from_slice(&[0, 0, 1, 0]);
        let a = r.send(&m, "192.0.2.1", TCP).unwrap();
        assert_eq!(a.rcode(), rcode::FORMERR);
        assert!(
            a.opt.is_some(),
            "FORMERR to a query with a sound OPT carries OPT"
        );
        let mut m = Q::new(WWW, 1).edns(1232).bytes();
        m[11] = 2;
        m.extend_from_slice(&[0, 0, 41, 4, 0, 0, 0, 0, 0, 0, 0]);
        let a = r.send(&m, "192.0.2.1", TCP).unwrap();
        assert_eq!(a.rcode(), rcode::FORMERR);
        assert!(a.opt.is_none(), "{a:?}");
        assert_eq!(r.rcodes(rcode::FORMERR), 5);
        // Shorter than a header, or a response: no answer at all.
        assert!(r.send(&good[..11], "192.0.2.1", UDP).is_none());
        let mut resp = good.clone();
        resp[2] |= 0x80;
        assert!(r.send(&resp, "192.0.2.1", UDP).is_none());
        assert_eq!(r.drops(DropCause::Malformed), 2);
        assert_eq!(r.rcodes(rcode::FORMERR), 5);
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
        // TSIG and TKEY are not question types.
        assert_eq!(ask(&mut r, Q::new(apex, 250), UDP), rcode::FORMERR);
        assert_eq!(ask(&mut r, Q::new(apex, 249), UDP), rcode::FORMERR);
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
        assert_eq!(ev[0].top[0].reason, crate::defence::reason::RRL);
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
        assert_eq!(ev[0].top[0].reason, crate::defence::reason::COOKIE);
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
