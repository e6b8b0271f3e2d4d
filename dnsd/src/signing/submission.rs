//! The KSK submission check (Knot's `ksk-submission`): while a KSK or CSK rollover awaits the
//! parent's DS for its new key, the policy's `parent` servers are asked for the zone's DS
//! every `parent_check_interval`; once every one of them holds a DS of the new key, the key
//! is marked submitted and the zone signed again, and its predecessor retires once the old
//! DS can have left caches. Under `ksk_submission = "manual"` the zone waits for `ctl
//! zone-ksk-submitted` instead. Until then both keys sign the DNSKEY RRset: a slow parent
//! never leaves the zone without a key its DS names.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use zones::rrtype::t;

use super::keys::Key;
use super::{Policy, Submission};
use crate::query::wire::{hf, opcode, rcode};
use crate::xfr::wire::{self, RrBuf};

/// Zones whose rollover awaits the parent's DS (lower-case text), with when their parent
/// servers are next asked (`None`: the operator says it, `ctl zone-ksk-submitted`).
static AWAITING: Mutex<Option<HashMap<String, Option<u64>>>> = Mutex::new(None);

/// DS checks by result: every parent server held the DS, one lacked it, one failed.
pub static CHECKS: [AtomicU64; 3] = [AtomicU64::new(0), AtomicU64::new(0), AtomicU64::new(0)];

fn awaiting<R>(f: impl FnOnce(&mut HashMap<String, Option<u64>>) -> R) -> R {
    let mut g = AWAITING.lock().unwrap_or_else(|e| e.into_inner());
    f(g.get_or_insert_with(HashMap::new))
}

/// Notes, after a signing at `now`, whether `zone`'s rollover awaits the parent's DS for
/// a key whose CDS is published (`keys` as the timeline left them).
pub fn note(p: &Policy, zone: &str, keys: &[Key], now: u64) {
    let wanted = super::awaiting_ds(keys, now).iter().any(|a| a.2);
    awaiting(|m| {
        if !wanted {
            m.remove(zone);
            return;
        }
        if m.contains_key(zone) {
            return;
        }
        let next = match &p.ksk_submission {
            Submission::Parent { .. } => Some(now),
            Submission::Manual => {
                tracing::warn!(
                    zone,
                    "KSK rollover: the new key's CDS is published; its predecessor keeps signing until `ctl zone-ksk-submitted {zone}` says the parent holds the new DS"
                );
                None
            }
            Submission::Timer => return,
        };
        m.insert(zone.to_string(), next);
    });
}

/// Zones awaiting the parent's DS.
pub fn awaiting_count() -> u64 {
    awaiting(|m| m.len() as u64)
}

/// The zones whose parent servers are due to be asked at `now`; each is next asked
/// `interval` of its policy later (set when it is checked).
pub fn due(now: u64) -> Vec<String> {
    awaiting(|m| {
        m.iter()
            .filter(|(_, n)| n.is_some_and(|n| n <= now))
            .map(|(z, _)| z.clone())
            .collect()
    })
}

/// Puts `zone`'s next check at `at` (when it still awaits a DS).
pub fn next_check(zone: &str, at: u64) {
    awaiting(|m| {
        if let Some(n) = m.get_mut(zone) {
            *n = Some(at);
        }
    });
}

/// Forgets `zone` (its rollover went on, or it is no longer signed).
pub fn forget(zone: &str) {
    awaiting(|m| m.remove(zone));
}

/// Whether `server` holds a DS at `apex` (wire, lower case) for the key `dnskey` (tag
/// `tag`): asked over UDP, then over TCP when the answer is truncated or lost.
pub async fn parent_holds(
    server: SocketAddr,
    apex: &[u8],
    tag: u16,
    dnskey: &[u8],
) -> Result<bool, String> {
    let limit = Duration::from_secs(5);
    let id: u16 = rand::random();
    let q = wire::build_query(id, opcode::QUERY, apex, t::DS, None, false, None);
    let udp = crate::xfr::client::udp_exchange(server, None, &q, limit).await;
    let resp = match udp {
        Ok(r) if r.len() >= 4 && u16::from_be_bytes([r[2], r[3]]) & hf::TC == 0 => r,
        _ => {
            let mut c = crate::xfr::client::TcpClient::connect(server, None, limit)
                .await
                .map_err(|e| e.to_string())?;
            c.send(&q).await.map_err(|e| e.to_string())?;
            let mut buf = Vec::new();
            c.recv(&mut buf).await.map_err(|e| e.to_string())?;
            buf
        }
    };
    let mut held = false;
    let mut b = RrBuf::default();
    let r = wire::read_response(&resp, &mut b, &mut |rr| {
        if rr.rtype == t::DS && rr.owner.eq_ignore_ascii_case(apex) {
            held |= ds_names_key(rr.rdata, apex, tag, dnskey);
        }
        Ok(())
    })
    .map_err(|e| e.to_string())?;
    if r.id != id {
        return Err("an answer with another ID".into());
    }
    match r.rcode {
        rcode::NOERROR => Ok(held),
        rcode::NXDOMAIN => Ok(false),
        x => Err(format!("rcode {x}")),
    }
}

/// Whether the DS RDATA `rd` names the key `dnskey` (tag `tag`) of `apex`.
fn ds_names_key(rd: &[u8], apex: &[u8], tag: u16, dnskey: &[u8]) -> bool {
    if rd.len() < 5 || u16::from_be_bytes([rd[0], rd[1]]) != tag || dnskey.len() < 4 {
        return false;
    }
    // The DS's algorithm is the key's (the DNSKEY RDATA's fourth byte).
    rd[2] == dnskey[3]
        && zones::dnssec::ds_digest(apex, dnskey, rd[3]).is_some_and(|d| d == rd[4..])
}

/// Asks `servers` for the DS of each key `keys` awaits (tag, DNSKEY RDATA, CDS published);
/// the tags every server holds.
pub async fn check(
    servers: &[SocketAddr],
    apex: &zones::Name,
    keys: &[(u16, Vec<u8>, bool)],
) -> Vec<u16> {
    let wire_apex = apex.to_lowercase();
    let mut held = Vec::new();
    for (tag, dnskey, ready) in keys {
        if !ready {
            continue;
        }
        let mut all = true;
        for &s in servers {
            match parent_holds(s, wire_apex.as_wire(), *tag, dnskey).await {
                Ok(true) => {}
                Ok(false) => {
                    CHECKS[1].fetch_add(1, Ordering::Relaxed);
                    tracing::info!(zone = %apex, tag, "KSK submission: parent server {s} has no DS for the new key yet");
                    all = false;
                }
                Err(e) => {
                    CHECKS[2].fetch_add(1, Ordering::Relaxed);
                    tracing::warn!(zone = %apex, tag, "KSK submission: parent server {s} not asked: {e}");
                    all = false;
                }
            }
            if !all {
                break;
            }
        }
        if all {
            CHECKS[0].fetch_add(1, Ordering::Relaxed);
            held.push(*tag);
        }
    }
    held
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_ds_names_its_key_by_tag_algorithm_and_digest() {
        let apex = b"\x07example\x03com\x00";
        let dnskey = [1u8, 1, 3, 13, 9, 9, 9, 9];
        let d = zones::dnssec::ds_digest(apex, &dnskey, 2).unwrap();
        let mut rd = vec![0x12, 0x34, 13, 2];
        rd.extend_from_slice(&d);
        assert!(ds_names_key(&rd, apex, 0x1234, &dnskey));
        assert!(!ds_names_key(&rd, apex, 0x1235, &dnskey), "another tag");
        assert!(
            !ds_names_key(&rd, b"\x03org\x00", 0x1234, &dnskey),
            "another owner"
        );
        let mut other = rd.clone();
        other[2] = 8;
        assert!(
            !ds_names_key(&other, apex, 0x1234, &dnskey),
            "another algorithm"
        );
        let mut bad = rd.clone();
        *bad.last_mut().unwrap() ^= 1;
        assert!(!ds_names_key(&bad, apex, 0x1234, &dnskey), "another digest");
        assert!(!ds_names_key(&rd[..4], apex, 0x1234, &dnskey), "cut short");
    }
}
