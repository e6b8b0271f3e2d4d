//! The query pipeline's entry into the transfer code: AXFR and IXFR requests (checked
//! against the zone's ACL and key, answered as a transfer job), NOTIFY, and every
//! TSIG-signed message (verified, answered signed; failures answered as RFC 8945 §5.2 says).

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::Ordering;

use zones::rrtype::t;

use super::axfr::{Job, JobKind};
use super::tsig::{self, Signer};
use super::{Transfers, serial_gt, wire};
use crate::internet;
use crate::query_module::Transport;
use crate::response::{Owner, Section, Writer};
use crate::served_zones::ZoneSet;
use crate::stats::WorkerStats;
use crate::wire::{Query, hf, opcode, rcode};
use zones::Zone;

/// What the pipeline should do with a message the transfer code took.
pub enum Handled {
    /// Send this many bytes of the output buffer.
    Reply(usize),
    /// Send nothing.
    Drop,
    /// Stream a transfer on this TCP connection.
    Job(Box<Job>),
}

/// True when the transfer code answers this message: TSIG-signed messages, NOTIFY, and
/// AXFR/IXFR (except AXFR over UDP, which the pipeline answers NOTIMP).
#[inline]
pub fn wants(q: &Query, transport: Transport) -> bool {
    q.tsig_off.is_some()
        || q.opcode() == opcode::NOTIFY
        || q.qtype == t::IXFR
        || (q.qtype == t::AXFR && transport == Transport::Tcp)
}

/// A message being answered by the transfer code.
pub struct Ctx<'a> {
    /// The transfer side.
    pub x: &'a Arc<Transfers>,
    /// The request.
    pub req: &'a [u8],
    /// Its parse.
    pub q: &'a Query,
    /// Who sent it.
    pub src: SocketAddr,
    /// Over what.
    pub transport: Transport,
    /// The zones served.
    pub zones: &'a ZoneSet,
    /// Counters of the transport.
    pub stats: &'a WorkerStats,
    /// Our EDNS UDP payload size (`[server] udp_payload`).
    pub udp_payload: u16,
}

impl Ctx<'_> {
    /// The most a response may take (as for any other response).
    pub fn limit(&self, out: usize) -> usize {
        crate::response::size_limit(self.q, self.transport, self.udp_payload, out)
    }

    /// A reply with `rc`, the question echoed, an optional SOA answer, OPT when the request
    /// had one, and a TSIG when `signer` is given.
    pub fn reply(
        &self,
        out: &mut [u8],
        rc: u16,
        soa: Option<&Zone>,
        signer: Option<&mut Signer>,
    ) -> usize {
        let limit = self.limit(out.len());
        let room = signer.as_ref().map_or(0, |s| s.reserve()) + 11;
        let mut w = Writer::new(out, limit.saturating_sub(room));
        w.start(self.req, self.q, rc & 0xF, true);
        if rc == rcode::NOERROR {
            w.set_flags(hf::AA);
        }
        if let Some(z) = soa
            && let Some((owner, rtype, ttl, rd)) = z.records().next()
        {
            let _ = w.rr(Section::Answer, Owner::Name(owner), rtype, ttl, rd);
        }
        w.set_limit(limit);
        if self.q.edns.is_some() {
            crate::response::put_opt(&mut w, self.q, self.udp_payload, rc, Default::default());
        }
        let mut n = w.finish();
        if let Some(s) = signer {
            n = s.sign(&mut out[..limit], n, tsig::now()).unwrap_or(n);
        }
        self.stats.response(rc, false);
        n
    }
}

/// Answers a message [`wants`] says is ours: verifies its TSIG, then NOTIFY, AXFR/IXFR, or
/// (signed) an ordinary query.
pub fn process(c: &Ctx<'_>, out: &mut [u8]) -> Handled {
    let x = c.x;
    let mut signer = None;
    if let Some(off) = c.q.tsig_off {
        let pol = x.policies();
        match tsig::verify_request(&pol.keys, c.req, off, tsig::now()) {
            Ok(v) => {
                x.stats.tsig_ok.fetch_add(1, Ordering::Relaxed);
                signer = Some(Signer::response(&v));
            }
            Err(f) => return Handled::Reply(tsig_error(c, out, &f)),
        }
    }
    if c.q.qclass != 1 && !(c.q.qclass == 255 && c.q.opcode() == opcode::QUERY) {
        return Handled::Reply(c.reply(out, rcode::REFUSED, None, signer.as_mut()));
    }
    if c.q.opcode() == opcode::NOTIFY {
        return Handled::Reply(super::notify::handle(c, out, signer.as_mut()));
    }
    match c.q.qtype {
        t::AXFR | t::IXFR => transfer_request(c, out, signer),
        _ => Handled::Reply(signed_answer(c, out, signer)),
    }
}

/// The answer to a TSIG failure (§5.2): NOTAUTH with BADKEY or BADSIG unsigned, BADTIME
/// signed with the server's time in Other Data, FORMERR for a malformed TSIG.
fn tsig_error(c: &Ctx<'_>, out: &mut [u8], f: &tsig::Failure) -> usize {
    let st = &c.x.stats;
    let kind = f.kind();
    let ctr = match kind {
        tsig::FailureKind::BadKey => &st.tsig_badkey,
        tsig::FailureKind::BadSig => &st.tsig_badsig,
        tsig::FailureKind::BadTime => &st.tsig_badtime,
        _ => &st.tsig_formerr,
    };
    ctr.fetch_add(1, Ordering::Relaxed);
    tracing::debug!(peer = %c.src, "TSIG check failed: {}", kind.name());
    let limit = c.limit(out.len());
    let mut w = Writer::new(out, limit);
    w.start(c.req, c.q, f.rcode, true);
    let n = w.finish();
    c.stats.response(f.rcode, false);
    let Some(rr) = &f.rr else {
        return n;
    };
    if f.rcode == rcode::FORMERR {
        return n;
    }
    // The TSIG echoes the request's key and algorithm names (up to 255 octets each): over
    // UDP it may not fit. Then the reply goes without it, truncated, for a retry over TCP.
    let room = &mut out[..limit];
    let signed = match (&f.key, f.error) {
        (Some(k), tsig::error::BADTIME) => {
            let now = tsig::now().to_be_bytes();
            let mut s = Signer::badtime(k.clone(), rr);
            s.sign_with(room, n, rr.time, tsig::error::BADTIME, &now[2..8])
        }
        _ => tsig::append_unsigned_error(room, n, rr, f.error),
    };
    signed.unwrap_or_else(|| {
        out[2] |= 0x02; // TC
        n
    })
}

/// An ordinary query that came signed: answered as usual (no rate limiting: the key
/// vouches for the client) and signed.
fn signed_answer(c: &Ctx<'_>, out: &mut [u8], mut signer: Option<Signer>) -> usize {
    let q = c.q;
    if q.opcode() != opcode::QUERY || (q.qclass != 1 && q.qclass != 255) {
        return c.reply(out, rcode::REFUSED, None, signer.as_mut());
    }
    if matches!(q.qtype, t::TSIG | t::TKEY) {
        return c.reply(out, rcode::FORMERR, None, signer.as_mut());
    }
    let zone = internet::find_zone(q, c.zones);
    if let Some((i, _)) = zone
        && c.zones.is_expired(i)
    {
        return c.reply(out, rcode::SERVFAIL, None, signer.as_mut());
    }
    let limit = c.limit(out.len());
    let room = signer.as_ref().map_or(0, |s| s.reserve()) + 11;
    let mut w = Writer::new(out, limit.saturating_sub(room));
    w.start(c.req, q, rcode::NOERROR, true);
    let ans = internet::answer_in(&mut w, q, c.zones, zone, None);
    w.set_limit(limit);
    if q.edns.is_some() {
        crate::response::put_opt(&mut w, q, c.udp_payload, 0, Default::default());
    }
    let rc = w.rcode();
    let mut n = w.finish();
    if let Some(s) = signer.as_mut() {
        n = s.sign(&mut out[..limit], n, tsig::now()).unwrap_or(n);
    }
    c.stats.response(rc, ans.truncated);
    c.stats.kind(ans.kind as usize);
    n
}

/// AXFR or IXFR: the zone, the ACL and the key, then the answer or a transfer job.
fn transfer_request(c: &Ctx<'_>, out: &mut [u8], mut signer: Option<Signer>) -> Handled {
    let x = c.x;
    let q = c.q;
    let Some((zi, zone)) = c.zones.get(q.qname()) else {
        x.stats.notauth.fetch_add(1, Ordering::Relaxed);
        return Handled::Reply(c.reply(out, rcode::NOTAUTH, None, signer.as_mut()));
    };
    let pol = x.policies();
    let allowed = pol.zone(q.qname()).is_some_and(|p| {
        p.allow.iter().any(|n| n.contains(&c.src.ip()))
            && match (&p.key, &signer) {
                (None, _) => true,
                (Some(k), Some(s)) => Arc::ptr_eq(k, s.key()) || k.name == s.key().name,
                (Some(_), None) => false,
            }
    });
    if !allowed {
        x.stats.refused.fetch_add(1, Ordering::Relaxed);
        tracing::debug!(peer = %c.src, zone = %zone.apex(), "transfer refused");
        return Handled::Reply(c.reply(out, rcode::REFUSED, None, signer.as_mut()));
    }
    if c.zones.is_expired(zi) {
        return Handled::Reply(c.reply(out, rcode::SERVFAIL, None, signer.as_mut()));
    }
    if q.qtype == t::AXFR && c.transport == Transport::Udp {
        return Handled::Reply(c.reply(out, rcode::NOTIMP, None, signer.as_mut()));
    }
    let kind = if q.qtype == t::IXFR {
        let Some(client) = wire::request_serial(c.req, q) else {
            return Handled::Reply(c.reply(out, rcode::FORMERR, None, signer.as_mut()));
        };
        let ours = zone.serial();
        if !serial_gt(ours, client) || c.transport == Transport::Udp {
            // Current (or over UDP, RFC 1995 §2: the SOA alone sends the client to TCP).
            x.stats.ixfr_out_current.fetch_add(1, Ordering::Relaxed);
            return Handled::Reply(c.reply(out, rcode::NOERROR, Some(zone), signer.as_mut()));
        }
        match x.journal(q.qname(), |j| j.chain(client, ours)) {
            Some(diffs) => JobKind::Ixfr(diffs),
            None => JobKind::IxfrFull,
        }
    } else {
        JobKind::Axfr
    };
    let Ok(slot) = x.take_slot(c.src.ip()) else {
        tracing::debug!(peer = %c.src, zone = %zone.apex(), "transfer refused: too many transfers");
        return Handled::Reply(c.reply(out, rcode::SERVFAIL, None, signer.as_mut()));
    };
    c.stats.response(rcode::NOERROR, false);
    Handled::Job(Box::new(Job::new(
        c.req.to_vec(),
        c.src,
        zone.clone(),
        kind,
        signer,
        x.clone(),
        slot,
    )))
}
