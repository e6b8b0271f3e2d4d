//! NOTIFY (RFC 1996), both ways: a change of a zone is announced to its configured
//! secondaries over UDP, each retried with a doubling timeout until it is acknowledged; a
//! NOTIFY for a secondary zone is accepted only from the zone's primaries (and with its key
//! when it has one) and triggers a refresh.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use tokio::sync::oneshot;
use zones::rrtype::t;
use zones::{Name, Zone};

use super::wire::{self, RrBuf};
use super::{Transfers, Trigger, XfrError};
use crate::query::handoff::Ctx;
use crate::query::tsig::{self, Signer, Verifier};
use crate::query::wire::{opcode, rcode};

/// Answers a NOTIFY (already TSIG-verified when `signer` is given).
pub fn handle(
    x: &Arc<Transfers>,
    c: &Ctx<'_>,
    out: &mut [u8],
    signer: Option<&mut Signer>,
) -> usize {
    let pol = x.policies();
    let refuse = |rc| {
        x.stats.notify_in_refused.fetch_add(1, Ordering::Relaxed);
        rc
    };
    let Some(p) = pol.zone(c.q.qname()).filter(|p| p.is_secondary()) else {
        let rc = refuse(rcode::NOTAUTH);
        return wire::reply(c, out, rc, None, signer);
    };
    let from_primary = p.primaries.iter().any(|a| a.addr.ip() == c.src.ip())
        || p.allow_notify.iter().any(|n| n.contains(&c.src.ip()));
    let key_ok = match (&p.key, signer.as_deref()) {
        (None, _) => true,
        (Some(k), Some(s)) => k.name == s.key().name,
        (Some(_), None) => false,
    };
    if !from_primary || !key_ok {
        // Counted; logged at debug only (a spoofed flood must not flood the log).
        tracing::debug!(peer = %c.src, zone = %p.origin, "NOTIFY refused: not from a primary or without the zone's key");
        let rc = refuse(rcode::REFUSED);
        return wire::reply(c, out, rc, None, signer);
    }
    // Judged only for a sender that may notify (others are refused whatever they ask, as
    // Knot and NSD refuse them): a NOTIFY is about the SOA (RFC 1996 §3.7).
    if c.q.qtype != t::SOA {
        let rc = refuse(rcode::FORMERR);
        return wire::reply(c, out, rc, None, signer);
    }
    x.stats.notify_in.fetch_add(1, Ordering::Relaxed);
    // A UDP source can be forged: a flood from a primary's address is logged at a bounded rate.
    shield::limited!(
        10,
        info!(peer = %c.src, zone = %p.origin, "NOTIFY received: refreshing")
    );
    x.trigger(p.origin.as_wire(), Trigger { reply: None });
    wire::reply(c, out, rcode::NOERROR, None, signer)
}

/// Announces `zone` to the NOTIFY targets of `origin` (in the background); `done` gets a
/// one-line summary when every target answered or gave up.
pub fn spawn_notify(
    x: &Arc<Transfers>,
    origin: &Name,
    zone: &Arc<Zone>,
    done: Option<oneshot::Sender<String>>,
) {
    let pol = x.policies();
    let Some(p) = pol.zone(origin.to_lowercase().as_wire()).cloned() else {
        if let Some(d) = done {
            let _ = d.send(format!("{origin}: no notify targets\n"));
        }
        return;
    };
    if p.notify.is_empty() {
        if let Some(d) = done {
            let _ = d.send(format!("{origin}: no notify targets\n"));
        }
        return;
    }
    let Some(soa) = zone
        .records()
        .next()
        .map(|(o, _, ttl, rd)| (o.to_vec(), ttl, rd.to_vec()))
    else {
        return;
    };
    let x = x.clone();
    tokio::spawn(async move {
        let mut set = tokio::task::JoinSet::new();
        for target in p.notify.clone() {
            let (x, p, soa) = (x.clone(), p.clone(), soa.clone());
            set.spawn(async move {
                let _slot = x.notify_slots.clone().acquire_owned().await;
                let r = notify_one(&x, target, &p.origin, &soa, p.key.clone()).await;
                (target, r)
            });
        }
        let mut lines = Vec::new();
        while let Some(r) = set.join_next().await {
            let Ok((target, r)) = r else { continue };
            match r {
                Ok(tries) => {
                    x.stats.notify_out.fetch_add(1, Ordering::Relaxed);
                    lines.push(format!("{target} ok ({tries} tries)"));
                }
                Err(e) => {
                    x.stats.notify_out_failed.fetch_add(1, Ordering::Relaxed);
                    tracing::warn!(zone = %p.origin, %target, "NOTIFY failed: {e}");
                    lines.push(format!("{target} FAILED: {e}"));
                }
            }
        }
        lines.sort();
        let line = format!("serial {}: {}", ssn(&soa.2), lines.join(", "));
        tracing::info!(zone = %p.origin, "NOTIFY sent: {line}");
        x.with_status(p.origin.as_wire(), |s| s.last_notify = line.clone());
        if let Some(d) = done {
            let _ = d.send(format!("{}: {line}\n", p.origin));
        }
    });
}

fn ssn(rd: &[u8]) -> u32 {
    wire::soa_serial(rd).unwrap_or(0)
}

/// Sends one NOTIFY, retrying with a doubling timeout; returns the attempts it took.
async fn notify_one(
    x: &Transfers,
    target: SocketAddr,
    origin: &Name,
    soa: &(Vec<u8>, u32, Vec<u8>),
    key: Option<Arc<tsig::Key>>,
) -> Result<u32, XfrError> {
    let mut timeout = Duration::from_millis(x.cfg.notify_timeout_ms);
    let mut last = XfrError::Protocol("no NOTIFY sent");
    for attempt in 1..=x.cfg.notify_retries.max(1) {
        let mut signer = key.clone().map(Signer::request);
        let id: u16 = rand::random();
        let msg = wire::build_query(
            id,
            opcode::NOTIFY,
            origin.as_wire(),
            t::SOA,
            Some((&soa.0, soa.1, &soa.2)),
            true,
            signer.as_mut(),
        );
        match super::client::udp_exchange(target, x.cfg.source_for(target), &msg, timeout).await {
            Ok(resp) => {
                let mut b = RrBuf::default();
                let r = wire::read_response(&resp, &mut b, &mut |_| Ok(()))?;
                if ((r.flags >> 11) & 0xF) as u8 != opcode::NOTIFY {
                    return Err(XfrError::Protocol("answer is not a NOTIFY response"));
                }
                if r.id != id || !r.echoes(origin.as_wire(), t::SOA) {
                    // Not the answer (forged, or late for an earlier attempt): sent again.
                    last = XfrError::Protocol("answer to another NOTIFY");
                    timeout = (timeout * 2).min(Duration::from_secs(30));
                    continue;
                }
                if let Some(s) = &signer {
                    Verifier::new(s)
                        .check(&resp, r.tsig.as_ref(), tsig::now())
                        .map_err(|e| x.tsig_failed(e))?;
                }
                if r.rcode != rcode::NOERROR {
                    return Err(XfrError::Rcode(
                        crate::observe::counters::RCODES
                            .get(r.rcode as usize)
                            .copied()
                            .unwrap_or("?"),
                    ));
                }
                return Ok(attempt);
            }
            Err(e) => last = e,
        }
        timeout = (timeout * 2).min(Duration::from_secs(30));
    }
    Err(last)
}
