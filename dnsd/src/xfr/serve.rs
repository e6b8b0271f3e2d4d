//! What the query pipeline hands the transfer side ([`crate::query::handoff`]): AXFR and IXFR
//! requests (checked against the zone's ACL and key, answered as a transfer job), NOTIFY,
//! and the TSIG check of every signed request (failures answered as RFC 8945 §5.2 says; the
//! pipeline signs the rest).

use std::sync::Arc;
use std::sync::atomic::Ordering;

use zones::rrtype::t;

use super::axfr::{Job, JobKind};
use super::{Transfers, serial_gt, wire};
use crate::query::handoff::{self, Ctx, Handled};
use crate::query::module::Transport;
use crate::query::response::Writer;
use crate::query::tsig::{self, Signer};
use crate::query::wire::{opcode, rcode};

/// The transfer side plugged into the pipeline ([`crate::query::handoff`]).
pub struct Serve(pub Arc<Transfers>);

impl handoff::Transfers for Serve {
    fn verify(&self, c: &Ctx<'_>, off: usize, out: &mut [u8]) -> Result<Signer, usize> {
        let x = &self.0;
        let pol = x.policies();
        match tsig::verify_request(&pol.keys, c.req, off, tsig::now()) {
            Ok(v) => {
                x.stats.tsig_ok.fetch_add(1, Ordering::Relaxed);
                Ok(Signer::response(&v))
            }
            Err(f) => Err(tsig_error(x, c, out, &f)),
        }
    }

    fn process(&self, c: &Ctx<'_>, signer: Option<Signer>, out: &mut [u8]) -> Handled {
        process(&self.0, c, signer, out)
    }
}

/// Answers a message [`handoff::wants`] says is ours (its TSIG, if any, verified by the
/// pipeline into `signer`): NOTIFY, AXFR or IXFR.
pub fn process(
    x: &Arc<Transfers>,
    c: &Ctx<'_>,
    mut signer: Option<Signer>,
    out: &mut [u8],
) -> Handled {
    if c.q.qclass != 1 && !(c.q.qclass == 255 && c.q.opcode() == opcode::QUERY) {
        return Handled::Reply(wire::reply(c, out, rcode::REFUSED, None, signer.as_mut()));
    }
    if c.q.opcode() == opcode::NOTIFY {
        return Handled::Reply(super::notify::handle(x, c, out, signer.as_mut()));
    }
    transfer_request(x, c, out, signer)
}

/// The answer to a TSIG failure (§5.2): NOTAUTH with BADKEY or BADSIG unsigned, BADTIME
/// signed with the server's time in Other Data, FORMERR for a malformed TSIG.
fn tsig_error(x: &Transfers, c: &Ctx<'_>, out: &mut [u8], f: &tsig::Failure) -> usize {
    let st = &x.stats;
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
    // A request with OPT gets OPT back, errors included (RFC 6891 §6.1.1), as Knot and NSD
    // answer; the TSIG, when one goes, comes after it.
    if c.q.edns.is_some() {
        crate::query::response::put_opt(&mut w, c.q, c.udp_payload, f.rcode, Default::default());
    }
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

/// AXFR or IXFR: the zone, the ACL and the key, then the answer or a transfer job.
fn transfer_request(
    x: &Arc<Transfers>,
    c: &Ctx<'_>,
    out: &mut [u8],
    mut signer: Option<Signer>,
) -> Handled {
    let q = c.q;
    let Some((zi, zone)) = c.zones.get(q.qname()) else {
        x.stats.notauth.fetch_add(1, Ordering::Relaxed);
        return Handled::Reply(wire::reply(c, out, rcode::NOTAUTH, None, signer.as_mut()));
    };
    let pol = x.policies();
    let allowed = pol.zone(q.qname()).is_some_and(|p| {
        p.allow
            .iter()
            .any(|a| a.net.contains(&c.src.ip()) && (c.tls || !a.tls_only))
            && match (&p.key, &signer) {
                (None, _) => true,
                (Some(k), Some(s)) => Arc::ptr_eq(k, s.key()) || k.name == s.key().name,
                (Some(_), None) => false,
            }
    });
    if !allowed {
        x.stats.refused.fetch_add(1, Ordering::Relaxed);
        tracing::debug!(peer = %c.src, zone = %zone.apex(), "transfer refused");
        return Handled::Reply(wire::reply(c, out, rcode::REFUSED, None, signer.as_mut()));
    }
    if c.zones.is_expired(zi) {
        return Handled::Reply(wire::reply(c, out, rcode::SERVFAIL, None, signer.as_mut()));
    }
    if q.qtype == t::AXFR && c.transport == Transport::Udp {
        return Handled::Reply(wire::reply(c, out, rcode::NOTIMP, None, signer.as_mut()));
    }
    let kind = if q.qtype == t::IXFR {
        let Some(client) = wire::request_serial(c.req, q) else {
            return Handled::Reply(wire::reply(c, out, rcode::FORMERR, None, signer.as_mut()));
        };
        let ours = zone.serial();
        if !serial_gt(ours, client) || c.transport == Transport::Udp {
            // Current (or over UDP, RFC 1995 §2: the SOA alone sends the client to TCP).
            x.stats.ixfr_out_current.fetch_add(1, Ordering::Relaxed);
            return Handled::Reply(wire::reply(
                c,
                out,
                rcode::NOERROR,
                Some(zone),
                signer.as_mut(),
            ));
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
        return Handled::Reply(wire::reply(c, out, rcode::SERVFAIL, None, signer.as_mut()));
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
