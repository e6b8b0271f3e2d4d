//! The pipeline a query walks, shared by UDP and TCP: parse, check, answer, add EDNS.
//!
//! Stages, in order (defences plug in at the named points):
//! 1. `before_parse` — source checks that need no parsing (the block map);
//! 2. parse header, question and OPT ([`crate::wire`]);
//! 3. `after_parse` — EDNS version, cookies, opcode and class checks;
//! 4. answer from the zones ([`crate::internet`]);
//! 5. `after_answer` — response rate limiting may slip or drop the response;
//! 6. OPT appended, counters bumped.

use std::net::SocketAddr;
use std::sync::Arc;

use arc_swap::ArcSwap;
use zones::rrtype::t;

use crate::internet::{self, Answered};
use crate::response::{Section, Writer};
use crate::stats::{DropCause, WorkerStats};
use crate::wire::{self, ParseError, Query, opcode, rcode};
use crate::zoneset::ZoneSet;

/// Which transport a query came over.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Transport {
    /// UDP: size-limited, truncation applies.
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

/// One query processor per worker thread (or TCP connection): owns its scratch space.
pub struct Processor {
    zones: Arc<ArcSwap<ZoneSet>>,
    snapshot: Arc<ZoneSet>,
    cfg: Arc<PipelineConfig>,
    stats: Arc<WorkerStats>,
    q: Box<Query>,
}

/// The outcome of processing one message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// Send this many bytes of the output buffer.
    Reply(usize),
    /// Send nothing.
    Drop,
}

impl Processor {
    /// A processor reading zones from `zones`.
    pub fn new(
        zones: Arc<ArcSwap<ZoneSet>>,
        cfg: Arc<PipelineConfig>,
        stats: Arc<WorkerStats>,
    ) -> Processor {
        let snapshot = zones.load_full();
        Processor {
            zones,
            snapshot,
            cfg,
            stats,
            q: Box::default(),
        }
    }

    /// Picks up a newer zone set if one was published (once per batch).
    #[inline]
    pub fn refresh(&mut self) {
        let cur = self.zones.load();
        if cur.generation() != self.snapshot.generation() {
            self.snapshot = arc_swap::Guard::into_inner(cur);
        }
    }

    /// Processes one message from `src` into `out`.
    pub fn process(
        &mut self,
        req: &[u8],
        _src: SocketAddr,
        transport: Transport,
        out: &mut [u8],
    ) -> Outcome {
        let stats = self.stats.clone();
        // 2. Parse.
        let q = &mut *self.q;
        match wire::parse_query(req, q) {
            Ok(()) => {}
            Err(ParseError::Drop) => {
                stats.dropped(DropCause::Malformed);
                return Outcome::Drop;
            }
            Err(ParseError::FormErr { question, edns }) => {
                stats.query(0);
                return self.error_reply(req, out, rcode::FORMERR, question, edns, transport);
            }
            Err(ParseError::NotImp { edns }) => {
                stats.query(0);
                return self.error_reply(req, out, rcode::NOTIMP, false, edns, transport);
            }
        }
        let q = &*self.q;
        stats.query(q.qtype);
        // 3. After parse: EDNS version, opcode, class, meta types.
        if let Some(e) = q.edns
            && e.version > 0
        {
            return self.error_reply(req, out, rcode::BADVERS, true, true, transport);
        }
        if q.opcode() != opcode::QUERY {
            // NOTIFY for a zone we are not a secondary of.
            return self.error_reply(req, out, rcode::NOTAUTH, true, q.edns.is_some(), transport);
        }
        // Class IN, or ANY (answered from IN, as Knot and NSD do); other classes are not served.
        if q.qclass != 1 && q.qclass != 255 {
            return self.error_reply(req, out, rcode::REFUSED, true, q.edns.is_some(), transport);
        }
        match q.qtype {
            // AXFR is TCP only (RFC 5936 §4.2): NOTIMP over UDP, as Knot and NSD answer.
            t::AXFR if transport == Transport::Udp => {
                return self.error_reply(
                    req,
                    out,
                    rcode::NOTIMP,
                    true,
                    q.edns.is_some(),
                    transport,
                );
            }
            t::AXFR | t::IXFR => {
                return self.error_reply(
                    req,
                    out,
                    rcode::REFUSED,
                    true,
                    q.edns.is_some(),
                    transport,
                );
            }
            t::TSIG | t::TKEY => {
                return self.error_reply(
                    req,
                    out,
                    rcode::FORMERR,
                    true,
                    q.edns.is_some(),
                    transport,
                );
            }
            _ => {}
        }
        // 4. Answer.
        let limit = self.size_limit(q, transport, out.len());
        let opt = if q.edns.is_some() { OPT_LEN } else { 0 };
        let mut w = Writer::new(out, limit - opt);
        w.start(req, q, rcode::NOERROR, true);
        let ans: Answered = internet::answer(&mut w, q, &self.snapshot);
        // 6. EDNS and counters.
        w.set_limit(limit);
        if q.edns.is_some() {
            let _ = w.raw_rr(
                Section::Additional,
                &opt_rr(self.cfg.udp_payload, 0, q.dnssec_ok()),
            );
        }
        let rc = w.rcode();
        let len = w.finish();
        stats.response(rc, ans.truncated);
        stats.kind(ans.kind);
        Outcome::Reply(len)
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

    /// A reply without answer data: FORMERR, NOTIMP, REFUSED, NOTAUTH, BADVERS.
    fn error_reply(
        &mut self,
        req: &[u8],
        out: &mut [u8],
        rc: u16,
        with_question: bool,
        with_edns: bool,
        transport: Transport,
    ) -> Outcome {
        let q = &*self.q;
        let limit = self
            .size_limit(q, transport, out.len())
            .max(512)
            .min(out.len());
        let mut w = Writer::new(out, limit);
        w.start(req, q, rc & 0xF, with_question);
        if with_edns || rc > 15 {
            let _ = w.raw_rr(
                Section::Additional,
                &opt_rr(self.cfg.udp_payload, (rc >> 4) as u8, q.dnssec_ok()),
            );
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
