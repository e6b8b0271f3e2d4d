//! The KSK submission check (Knot's `ksk-submission`): while a KSK or CSK rollover awaits the
//! parent's DS for its new key, the policy's `parent` servers are asked for the zone's DS
//! every `parent_check_interval`; once every one of them holds a DS of the new key, the key
//! is marked submitted and the zone signed again, and its predecessor retires once the old
//! DS can have left caches. Under `ksk_submission = "manual"` the zone waits for `ctl
//! zone-ksk-submitted` instead. Until then both keys sign the DNSKEY RRset: a slow parent
//! never leaves the zone without a key its DS names.

use std::collections::HashMap;
use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use super::keys::Key;
use super::{Policy, Submission};

/// Asks a parent server (its address, the zone's apex in lower-case wire form, the key's tag
/// and DNSKEY RDATA) whether it holds a DS of that key: the daemon gives the transfer
/// client's (signing sends no DNS of its own).
pub type AskParent = Arc<
    dyn Fn(
            SocketAddr,
            Vec<u8>,
            u16,
            Vec<u8>,
        ) -> Pin<Box<dyn Future<Output = Result<bool, String>> + Send>>
        + Send
        + Sync,
>;

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
        // Kept as it is while the policy asks the same way (a "parent" check keeps its
        // schedule); a change of `ksk_submission` takes effect at once.
        match (m.get(zone), &p.ksk_submission) {
            (Some(Some(_)), Submission::Parent { .. }) | (Some(None), Submission::Manual) => {
                return;
            }
            _ => {}
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
            Submission::Timer => {
                m.remove(zone);
                return;
            }
        };
        m.insert(zone.to_string(), next);
    });
}

/// Zones awaiting the parent's DS.
pub fn awaiting_count() -> u64 {
    awaiting(|m| m.len() as u64)
}

/// The zones whose parent servers are due to be asked at `now`; each is next asked its
/// policy's interval later (set when it is checked; until then a minute on, so that a check
/// slow to start is not started twice).
pub fn due(now: u64) -> Vec<String> {
    awaiting(|m| {
        m.iter_mut()
            .filter(|(_, n)| n.is_some_and(|n| n <= now))
            .map(|(z, n)| {
                *n = Some(now + 60);
                z.clone()
            })
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

/// Forgets every zone `keep` says no to (removed, or no longer signed).
pub fn retain(mut keep: impl FnMut(&str) -> bool) {
    awaiting(|m| m.retain(|z, _| keep(z)));
}

/// Forgets `zone` (its rollover went on, or it is no longer signed).
pub fn forget(zone: &str) {
    awaiting(|m| m.remove(zone));
}

/// Asks `servers` for the DS of each key `keys` awaits (tag, DNSKEY RDATA, CDS published);
/// the tags every server holds.
pub async fn check(
    ask: &AskParent,
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
            match ask(s, wire_apex.as_wire().to_vec(), *tag, dnskey.clone()).await {
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
