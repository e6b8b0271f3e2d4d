//! Zone transfers as a subsystem: AXFR and IXFR out and in, NOTIFY, TSIG, the secondary
//! zones' refresh timers, and what they share — the bounds, counters and per-zone state
//! kept here ([`Transfers`]).
//!
//! By job: [`serve`] is what the query pipeline hands over ([`crate::query::handoff`]:
//! requests answered or turned into a transfer job), [`policy`] what each zone allows, [`axfr`] zones streamed out and
//! collected in, [`ixfr`] the IXFR client, [`journal`] the differences IXFR answers from,
//! [`notify`] NOTIFY both ways, [`crate::query::tsig`] signing and verifying, [`secondary`] the refresh
//! timers and transfers in, [`wire`] whole messages read and built, [`client`] the
//! exchanges with primaries and secondaries, [`error`] why one failed.

pub mod axfr;
pub mod client;
pub mod ds_check;
pub mod error;
pub mod fair;
pub mod ixfr;
pub mod journal;
pub mod notify;
pub mod policy;
pub mod secondary;
pub mod serve;
pub mod tls;
pub mod wire;

pub use error::XfrError;
pub use policy::{Policies, ZonePolicy};
pub use serve::Serve;

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use arc_swap::ArcSwap;
use tokio::sync::{OwnedSemaphorePermit, Semaphore, mpsc};
use zones::{Name, Zone};

use crate::config::Config;
use crate::config::transfer::TransferConfig;
use journal::Journal;

macro_rules! counters {
    ($($field:ident => $name:literal, $help:literal;)*) => {
        /// Transfer, NOTIFY and TSIG counters (each bound that is hit has one).
        #[derive(Debug, Default)]
        pub struct XfrStats {
            $(#[doc = $help] pub $field: AtomicU64,)*
        }
        impl XfrStats {
            /// (ctl name, help, value) of every counter.
            pub fn list(&self) -> Vec<(&'static str, &'static str, u64)> {
                vec![$(($name, $help, self.$field.load(Ordering::Relaxed)),)*]
            }
        }
    };
}

counters! {
    axfr_out => "transfer.out.axfr", "AXFR responses streamed out.";
    ixfr_out => "transfer.out.ixfr", "IXFR responses answered from the journal.";
    ixfr_out_full => "transfer.out.ixfr_full", "IXFR requests answered with the whole zone (journal could not answer).";
    ixfr_out_current => "transfer.out.ixfr_current", "IXFR requests answered with the SOA alone (client current, or over UDP).";
    out_messages => "transfer.out.messages", "Messages of outgoing transfers.";
    out_aborted => "transfer.out.aborted", "Outgoing transfers cut off (client gone or too slow).";
    refused => "transfer.out.refused", "Transfer requests refused by allow_transfer or the zone's key.";
    notauth => "transfer.out.notauth", "Transfer requests for zones not served.";
    limit_total => "transfer.out.limit_total", "Transfer requests over `[transfer] max_out` (SERVFAIL).";
    limit_client => "transfer.out.limit_client", "Transfer requests over `[transfer] max_out_per_client` (SERVFAIL).";
    in_axfr => "transfer.in.axfr", "Zones received by AXFR (or an AXFR-style IXFR).";
    in_ixfr => "transfer.in.ixfr", "Zones updated by incremental IXFR.";
    in_current => "transfer.in.current", "Refreshes that found the zone current.";
    in_failed => "transfer.in.failed", "Refreshes or transfers in that failed.";
    in_limit => "transfer.in.limit", "Transfers in stopped by max_in_records, max_in_bytes, in_timeout_secs or in_min_rate_bytes_per_sec.";
    in_waiting => "transfer.in.waiting", "Refreshes that waited for a free `[transfer] max_in` slot.";
    check_waiting => "transfer.in.check_waiting", "SOA checks that waited for a free slot (four times `[transfer] max_in`, at least 16).";
    expired => "transfer.in.expired", "Secondary zones that expired (answered SERVFAIL).";
    notify_in => "notify.in.accepted", "NOTIFY messages accepted from primaries.";
    notify_in_refused => "notify.in.refused", "NOTIFY messages refused (not a primary, not a secondary zone, wrong key).";
    notify_coalesced => "notify.in.coalesced", "NOTIFY or refresh requests merged into one already pending.";
    notify_out => "notify.out.acked", "NOTIFY messages acknowledged by secondaries.";
    notify_out_failed => "notify.out.failed", "NOTIFY targets that never answered after all retries.";
    tsig_badkey => "tsig.badkey", "Requests with an unknown TSIG key or algorithm (NOTAUTH/BADKEY).";
    tsig_badsig => "tsig.badsig", "Requests whose TSIG MAC did not verify (NOTAUTH/BADSIG).";
    tsig_badtime => "tsig.badtime", "Requests whose TSIG time was outside the fudge (NOTAUTH/BADTIME).";
    tsig_formerr => "tsig.formerr", "Requests with a malformed TSIG (FORMERR).";
    tsig_ok => "tsig.verified", "Requests whose TSIG verified.";
    tsig_in_failed => "tsig.in_failed", "Answers from primaries and secondaries (SOA, AXFR, IXFR, NOTIFY) whose TSIG was missing or did not verify: tampering, or a key that differs.";
    journal_diffs => "journal.diffs", "Differences recorded in zone journals.";
    journal_trimmed => "journal.trimmed", "Old differences dropped from journals to stay within journal_max_bytes.";
    journal_trimmed_total => "journal.trimmed_total_budget", "Old differences dropped from any zone's journal to stay within journal_total_max_bytes.";
    journal_too_big => "journal.too_big", "Changes larger than journal_max_bytes (IXFR falls back to AXFR).";
    changes_dropped => "journal.changes_dropped", "Zone changes not journaled because the change queue was full.";
}

/// The state and last result of one zone's transfers, for `ctl zones` and /metrics.
#[derive(Debug, Clone, Default)]
pub struct ZoneStatus {
    /// What the secondary is doing: idle, refreshing, transferring, expired.
    pub state: ZoneState,
    /// The last transfer or refresh result, one line.
    pub last: String,
    /// When the last refresh or transfer succeeded (unix seconds).
    pub last_ok: u64,
    /// The primary's serial at the last refresh.
    pub primary_serial: Option<u32>,
    /// When the next refresh is due (unix seconds).
    pub next_refresh: u64,
    /// When the zone expires without a successful refresh (unix seconds).
    pub expires: u64,
    /// Successful transfers in.
    pub ok: u64,
    /// Failed refreshes or transfers in.
    pub failed: u64,
    /// The last NOTIFY round this zone sent, one line.
    pub last_notify: String,
    /// The last transfer out, one line.
    pub last_out: String,
}

/// A zone changed (reload or transfer): journal it and notify secondaries.
pub struct Change {
    /// The zone.
    pub origin: Name,
    /// The version before (none at first load).
    pub old: Option<Arc<Zone>>,
    /// The version now.
    pub new: Arc<Zone>,
}

/// Requests for a refresh of a secondary zone (from NOTIFY or `ctl zone-refresh`).
pub struct Trigger {
    /// Where to say how it went (ctl waits for it).
    pub reply: Option<tokio::sync::oneshot::Sender<String>>,
}

/// NOTIFY targets sent to at once (more wait their turn).
const NOTIFY_AT_ONCE: usize = 32;

/// The transfer side of the server: policies, bounds, journals, counters and state.
pub struct Transfers {
    policies: ArcSwap<Policies>,
    /// Bounds and timers.
    pub cfg: TransferConfig,
    /// Our EDNS payload size, advertised in transfer messages' OPT.
    pub udp_payload: u16,
    out_total: Arc<Semaphore>,
    per_client: Mutex<HashMap<IpAddr, usize>>,
    /// Slots for incoming transfers, granted in turn among catalogs and primaries.
    pub in_slots: Arc<fair::FairSlots>,
    /// Slots for SOA checks of primaries at once (each a socket, a TLS primary's a
    /// handshake): a start or reload of 100,000 secondaries asks them a few at a time, in
    /// turn among catalogs and primaries.
    pub check_slots: Arc<fair::FairSlots>,
    /// Slots for NOTIFY targets being sent to at once.
    pub notify_slots: Arc<Semaphore>,
    /// Counters.
    pub stats: XfrStats,
    journals: Mutex<journal::Journals>,
    triggers: Mutex<HashMap<Vec<u8>, mpsc::Sender<Trigger>>>,
    status: Mutex<HashMap<Vec<u8>, ZoneStatus>>,
    changes: mpsc::Sender<Change>,
}

impl Transfers {
    /// A TSIG failure of an answer from a peer, counted (`tsig.in_failed`).
    pub fn tsig_failed(&self, why: &'static str) -> XfrError {
        self.stats.tsig_in_failed.fetch_add(1, Ordering::Relaxed);
        XfrError::Tsig(why)
    }

    /// The transfer side for a config, and the receiving end of its zone-change queue.
    pub fn new(c: &Config) -> (Arc<Transfers>, mpsc::Receiver<Change>) {
        let (tx, rx) = mpsc::channel(64);
        let x = Transfers {
            policies: ArcSwap::from_pointee(Policies::from_config(c)),
            cfg: c.transfer.clone(),
            udp_payload: c.server.udp_payload,
            out_total: Arc::new(Semaphore::new(c.transfer.max_out)),
            per_client: Mutex::new(HashMap::new()),
            in_slots: fair::FairSlots::new(c.transfer.max_in),
            check_slots: fair::FairSlots::new(c.transfer.max_in.saturating_mul(4).max(16)),
            notify_slots: Arc::new(Semaphore::new(NOTIFY_AT_ONCE)),
            stats: XfrStats::default(),
            journals: Mutex::new(journal::Journals::default()),
            triggers: Mutex::new(HashMap::new()),
            status: Mutex::new(HashMap::new()),
            changes: tx,
        };
        (Arc::new(x), rx)
    }

    /// The policies in force.
    pub fn policies(&self) -> arc_swap::Guard<Arc<Policies>> {
        self.policies.load()
    }

    /// Replaces the policies (config reload).
    pub fn set_policies(&self, c: &Config) {
        self.policies.store(Arc::new(Policies::from_config(c)));
    }

    /// Sets one zone's policy (a zone added at run time); copies only the policies of
    /// zones with transfer settings.
    pub fn set_zone_policy(&self, z: &crate::config::ZoneConfig) {
        self.set_zone_policies(std::slice::from_ref(z));
    }

    /// Sets the policies of several zones at once (a catalog's members).
    pub fn set_zone_policies(&self, zs: &[crate::config::ZoneConfig]) {
        if zs.is_empty() {
            return;
        }
        let mut p = Policies::clone(&self.policies.load());
        for z in zs {
            p.set_zone(z);
        }
        self.policies.store(Arc::new(p));
    }

    /// Drops one zone's policy, journal and status (a zone removed at run time).
    pub fn remove_zone(&self, apex: &[u8]) {
        if self.policies.load().zone(apex).is_some() {
            let mut p = Policies::clone(&self.policies.load());
            p.remove_zone(apex);
            self.policies.store(Arc::new(p));
        }
        self.forget(apex);
    }

    /// Queues a zone change for the journal and NOTIFY (never blocks; a full queue is counted).
    pub fn changed(&self, origin: &Name, old: Option<Arc<Zone>>, new: Arc<Zone>) {
        let c = Change {
            origin: origin.to_lowercase(),
            old,
            new,
        };
        if self.changes.try_send(c).is_err() {
            self.stats.changes_dropped.fetch_add(1, Ordering::Relaxed);
            // The journal would miss this step: start it afresh.
            self.journals
                .lock()
                .expect("journal lock")
                .remove(origin.to_lowercase().as_wire());
        }
    }

    /// Runs `f` on the journal of the zone `apex` (created empty when missing); the oldest
    /// steps of all zones then go until the journals fit `journal_total_max_bytes`.
    pub fn journal<R>(&self, apex: &[u8], f: impl FnOnce(&mut Journal) -> R) -> R {
        let mut j = self.journals.lock().expect("journal lock");
        let (r, dropped) = j.with(
            apex,
            self.cfg.journal_max_bytes,
            self.cfg.journal_total_max_bytes,
            f,
        );
        if dropped > 0 {
            self.stats
                .journal_trimmed_total
                .fetch_add(dropped as u64, Ordering::Relaxed);
        }
        r
    }

    /// Bytes held by all zones' journals.
    pub fn journal_bytes(&self) -> usize {
        self.journals.lock().expect("journal lock").bytes()
    }

    /// Forgets what is kept of a zone that is no longer served.
    pub fn forget(&self, apex: &[u8]) {
        self.journals.lock().expect("journal lock").remove(apex);
        self.status.lock().expect("status lock").remove(apex);
    }

    /// Registers the refresh trigger of a secondary zone.
    pub fn set_trigger(&self, apex: &[u8], tx: mpsc::Sender<Trigger>) {
        self.triggers
            .lock()
            .expect("trigger lock")
            .insert(apex.to_vec(), tx);
    }

    /// Drops the refresh triggers of zones `keep` says no: their tasks end.
    pub fn retain_triggers(&self, keep: impl Fn(&[u8]) -> bool) {
        self.triggers
            .lock()
            .expect("trigger lock")
            .retain(|apex, _| keep(apex));
    }

    /// Whether the zone `apex` has a refresh task.
    pub fn has_trigger(&self, apex: &[u8]) -> bool {
        self.triggers
            .lock()
            .expect("trigger lock")
            .contains_key(apex)
    }

    /// Asks for a refresh of the secondary zone `apex`; false when it is not one. A request
    /// while one is pending is merged into it (and counted).
    pub fn trigger(&self, apex: &[u8], t: Trigger) -> bool {
        let g = self.triggers.lock().expect("trigger lock");
        let Some(tx) = g.get(apex) else {
            return false;
        };
        if tx.try_send(t).is_err() {
            self.stats.notify_coalesced.fetch_add(1, Ordering::Relaxed);
        }
        true
    }

    /// Updates the status of the zone `apex`.
    pub fn with_status(&self, apex: &[u8], f: impl FnOnce(&mut ZoneStatus)) {
        let mut g = self.status.lock().expect("status lock");
        f(g.entry(apex.to_vec()).or_default());
    }

    /// The status of the zone `apex`, if it has one.
    pub fn status(&self, apex: &[u8]) -> Option<ZoneStatus> {
        self.status.lock().expect("status lock").get(apex).cloned()
    }

    /// Takes an outgoing transfer slot for `ip` (by address: the clients are those the zone's
    /// `allow_transfer` lists, and secondaries may share a /64); `Err` names the bound that was hit.
    fn take_slot(self: &Arc<Self>, ip: IpAddr) -> Result<Slot, ()> {
        let Ok(permit) = self.out_total.clone().try_acquire_owned() else {
            self.stats.limit_total.fetch_add(1, Ordering::Relaxed);
            return Err(());
        };
        let mut m = self.per_client.lock().expect("per-client lock");
        let n = m.entry(ip).or_insert(0);
        if *n >= self.cfg.max_out_per_client {
            self.stats.limit_client.fetch_add(1, Ordering::Relaxed);
            return Err(());
        }
        *n += 1;
        Ok(Slot {
            x: self.clone(),
            ip,
            _permit: permit,
        })
    }

    /// The transfer state of a zone for `ctl zones` (empty when it has none).
    pub fn zone_line(&self, apex: &Name) -> String {
        let p = self.policies();
        let Some(pol) = p.zone(apex.to_lowercase().as_wire()) else {
            return String::new();
        };
        let st = self
            .status(apex.to_lowercase().as_wire())
            .unwrap_or_default();
        let mut s = String::new();
        if pol.is_secondary() {
            let prim: Vec<String> = pol.primaries.iter().map(|a| a.to_string()).collect();
            s.push_str(&format!(
                "\tsecondary of {}\tstate {}",
                prim.join(","),
                st.state.name()
            ));
            if let Some(ps) = st.primary_serial {
                s.push_str(&format!("\tprimary serial {ps}"));
            }
            let now = crate::query::tsig::now();
            if st.next_refresh > 0 {
                s.push_str(&format!(
                    "\trefresh in {} s",
                    st.next_refresh.saturating_sub(now)
                ));
            }
            if st.expires > 0 {
                s.push_str(&format!(
                    "\texpires in {} s",
                    st.expires.saturating_sub(now)
                ));
            }
            s.push_str(&format!("\ttransfers ok {} failed {}", st.ok, st.failed));
            if !st.last.is_empty() {
                s.push_str(&format!("\tlast: {}", st.last));
            }
        } else if !pol.allow.is_empty() || !pol.notify.is_empty() {
            s.push_str("\tprimary");
            if !st.last_out.is_empty() {
                s.push_str(&format!("\tlast out: {}", st.last_out));
            }
        }
        if !st.last_notify.is_empty() {
            s.push_str(&format!("\tlast notify: {}", st.last_notify));
        }
        s
    }
}

/// What a secondary zone's refresh task is doing.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ZoneState {
    /// Waiting for its next refresh.
    #[default]
    Idle,
    /// Asking a primary for the SOA.
    Refreshing,
    /// Transferring from a primary.
    Transferring,
    /// Past its expire time without an answer: served as SERVFAIL.
    Expired,
}

impl ZoneState {
    /// The state's name in `ctl zones`.
    pub fn name(self) -> &'static str {
        match self {
            ZoneState::Idle => "idle",
            ZoneState::Refreshing => "refreshing",
            ZoneState::Transferring => "transferring",
            ZoneState::Expired => "expired",
        }
    }
}

/// An outgoing transfer slot: one of `max_out`, and one of the client's `max_out_per_client`.
pub struct Slot {
    x: Arc<Transfers>,
    ip: IpAddr,
    _permit: OwnedSemaphorePermit,
}

impl Drop for Slot {
    fn drop(&mut self) {
        let mut m = self.x.per_client.lock().expect("per-client lock");
        if let Some(n) = m.get_mut(&self.ip) {
            *n -= 1;
            if *n == 0 {
                m.remove(&self.ip);
            }
        }
    }
}

pub use zones::serial_gt;

/// Runs the zone-change queue: each change is journaled (off the runtime threads) and
/// announced to the zone's NOTIFY targets.
pub async fn run_changes(x: Arc<Transfers>, mut rx: mpsc::Receiver<Change>) {
    while let Some(c) = rx.recv().await {
        let apex = c.origin.as_wire().to_vec();
        // Only a zone someone may transfer keeps a journal (IXFR out is all it is for).
        let journaled = x
            .policies()
            .zone(&apex)
            .is_some_and(|p| !p.allow.is_empty());
        if let Some(old) = c.old.clone().filter(|_| journaled) {
            let (new, max) = (c.new.clone(), x.cfg.journal_max_bytes);
            if old.serial() != new.serial() {
                let d = tokio::task::spawn_blocking(move || journal::diff(&old, &new, max))
                    .await
                    .ok()
                    .flatten();
                x.journal(&apex, |j| match d {
                    Some(d) => {
                        let trimmed = j.push(d);
                        x.stats.journal_diffs.fetch_add(1, Ordering::Relaxed);
                        x.stats
                            .journal_trimmed
                            .fetch_add(trimmed as u64, Ordering::Relaxed);
                    }
                    None => {
                        x.stats.journal_too_big.fetch_add(1, Ordering::Relaxed);
                        j.clear();
                    }
                });
            }
        }
        if c.old.as_ref().is_some_and(|o| o.serial() == c.new.serial()) {
            continue;
        }
        notify::spawn_notify(&x, &c.origin, &c.new, None);
    }
}

/// The transfer counters and per-zone transfer state, for `ctl stats` and /metrics.
impl shield::metrics::Source for Transfers {
    fn collect(&self, out: &mut shield::metrics::Samples) {
        for (name, _, v) in self.stats.list() {
            out.counter(
                name,
                "dnsd_transfer_total",
                format!("event=\"{name}\""),
                "Zone transfer, NOTIFY, TSIG and journal events (see ctl stats for each).",
                v,
            );
        }
        let st = self.status.lock().expect("status lock");
        let mut zones: Vec<_> = st.iter().collect();
        zones.sort_by(|a, b| a.0.cmp(b.0));
        let zname = |w: &[u8]| {
            Name::from_wire(w)
                .map(|n| shield::metrics::label_value(&n.to_string()))
                .unwrap_or_default()
        };
        for (z, v) in &zones {
            out.gauge(
                "",
                "dnsd_zone_expired",
                format!("zone=\"{}\"", zname(z)),
                "1 when a secondary zone has expired and is answered with SERVFAIL.",
                (v.state == ZoneState::Expired) as u64,
            );
        }
        for (z, v) in &zones {
            out.gauge(
                "",
                "dnsd_zone_transfer_last_success_seconds",
                format!("zone=\"{}\"", zname(z)),
                "When a secondary zone last refreshed or transferred (unix time).",
                v.last_ok,
            );
        }
        for (z, v) in &zones {
            for (what, n) in [("ok", v.ok), ("failed", v.failed)] {
                out.counter(
                    "",
                    "dnsd_zone_transfers_in_total",
                    format!("zone=\"{}\",result=\"{what}\"", zname(z)),
                    "Transfers into secondary zones, by result.",
                    n,
                );
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::wire::{RrBuf, read_response};
    use super::*;
    use std::net::SocketAddr;

    #[test]
    fn config_keys_defaults_and_errors() {
        let p = std::path::Path::new("x.toml");
        let c = Config::parse(p, "").unwrap();
        assert_eq!(c.transfer.max_out, 16);
        assert_eq!(c.transfer.journal_max_bytes, 16 << 20);
        let ok = "[[tsig_key]]\nname = \"k\"\nalgorithm = \"hmac-sha512\"\nsecret = \"c2VjcmV0\"\n\
                  [[zone]]\norigin = \"a.\"\nfile = \"f\"\nprimaries = [\"127.0.0.1:5301\", \"10.0.0.1\"]\n\
                  notify = [\"127.0.0.2@53\"]\nallow_notify = [\"192.0.2.0/24\"]\nallow_transfer = [\"10.0.0.0/8\", \"::1\"]\ntsig = \"k.\"\n";
        let c = Config::parse(p, ok).unwrap();
        let pol = Policies::from_config(&c);
        let z = pol.zone(b"\x01a\x00").unwrap();
        assert!(z.is_secondary());
        assert_eq!(
            z.primaries[1].addr,
            "10.0.0.1:53".parse::<SocketAddr>().unwrap()
        );
        assert!(!z.primaries[1].tls && z.xot.is_none());
        assert_eq!(z.notify[0].port(), 53);
        assert!(
            z.allow[0]
                .net
                .contains(&"10.1.2.3".parse::<IpAddr>().unwrap())
        );
        assert!(!z.allow[0].tls_only);
        assert_eq!(
            z.key.as_ref().unwrap().alg,
            crate::query::tsig::Algorithm::HmacSha512
        );
        for (bad, key) in [
            (
                ok.replace("tsig = \"k.\"", "tsig = \"nope\""),
                "zone[0].tsig",
            ),
            (ok.replace("c2VjcmV0", "!!"), "tsig_key[0].secret"),
            (
                ok.replace("hmac-sha512", "hmac-md5"),
                "tsig_key[0].algorithm",
            ),
            (
                ok.replace("10.0.0.0/8", "10.0.0.0/40"),
                "zone[0].allow_transfer",
            ),
            (ok.replace("10.0.0.1\"", "nowhere\""), "zone[0].primaries"),
            (ok.replace("192.0.2.0/24", "x"), "zone[0].allow_notify"),
        ] {
            let e = Config::parse(p, &bad).unwrap_err().to_string();
            assert!(e.contains(key), "{e}");
        }
        // Zone transfers over TLS: `tls:` primaries (port 853 unless given) checked by the
        // zone's transfer_tls, `tls:` prefixes allowed only over TLS.
        let tls = ok
            .replace("\"10.0.0.1\"]", "\"tls:10.0.0.1\"]")
            .replace("\"::1\"]", "\"tls:::1\"]")
            + "transfer_tls = { pin_sha256 = [\"47DEQpj8HBSa+/TImW+5JCeuQeRkm5NMpJWZG3hSuFU=\"] }\n";
        let c = Config::parse(p, &tls).unwrap();
        let pol = Policies::from_config(&c);
        let z = pol.zone(b"\x01a\x00").unwrap();
        assert_eq!(z.primaries[1].to_string(), "tls:10.0.0.1:853");
        assert!(!z.primaries[0].tls);
        assert!(matches!(z.xot, Some(Ok(_))));
        assert!(z.allow[1].tls_only && !z.allow[0].tls_only);
        for (bad, key, says) in [
            (
                tls.replace("transfer_tls = { pin", "x = { pin"),
                "zone",
                "unknown field `x`",
            ),
            (
                tls.replace("47DEQ", "47"),
                "zone[0].transfer_tls.pin_sha256",
                "base64 SHA-256",
            ),
            (
                tls.replace(
                    "pin_sha256 = [\"47DEQpj8HBSa+/TImW+5JCeuQeRkm5NMpJWZG3hSuFU=\"]",
                    "",
                ),
                "zone[0].transfer_tls.name",
                "or pin_sha256",
            ),
            (
                tls.replace("tls:10.0.0.1", "10.0.0.1"),
                "zone[0].transfer_tls",
                "no primary is tls:",
            ),
            (
                ok.replace("\"10.0.0.1\"]", "\"tls:10.0.0.1\"]"),
                "zone[0].transfer_tls",
                "needs transfer_tls",
            ),
            (
                tls.replace(
                    "pin_sha256",
                    "ca_file = \"/nonexistent/ca.pem\", name = \"a.test\", pin_sha256",
                ),
                "zone[0].transfer_tls.ca_file",
                "/nonexistent/ca.pem",
            ),
        ] {
            let e = Config::parse(p, &bad).unwrap_err().to_string();
            assert!(e.contains(key) && e.contains(says), "{e}");
        }
        let e = Config::parse(p, "[transfer]\nmax_out = 0\n")
            .unwrap_err()
            .to_string();
        assert!(e.contains("transfer"), "{e}");
    }

    #[test]
    fn reads_compressed_records() {
        // A response: question example., answer SOA with both names compressed, then MX
        // with a compressed exchange.
        let mut m = vec![0, 1, 0x84, 0, 0, 1, 0, 2, 0, 0, 0, 0];
        m.extend_from_slice(b"\x07example\x00\x00\x06\x00\x01");
        m.extend_from_slice(&[0xC0, 12, 0, 6, 0, 1, 0, 0, 0, 60]);
        let rd = [
            &b"\x02ns\xC0\x0c\x02hm\xC0\x0c"[..],
            &[0, 0, 0, 7],
            &[0; 16],
        ]
        .concat();
        m.extend_from_slice(&(rd.len() as u16).to_be_bytes());
        m.extend_from_slice(&rd);
        m.extend_from_slice(&[0xC0, 12, 0, 15, 0, 1, 0, 0, 0, 60, 0, 4, 0, 10, 0xC0, 12]);
        let mut b = RrBuf::default();
        let mut seen = Vec::new();
        let r = read_response(&m, &mut b, &mut |r| {
            seen.push((r.owner.to_vec(), r.rtype, r.rdata.to_vec()));
            Ok(())
        })
        .unwrap();
        assert_eq!(r.ancount, 2);
        assert_eq!(seen[0].0, b"\x07example\x00");
        assert_eq!(super::wire::soa_serial(&seen[0].2), Some(7));
        assert_eq!(
            &seen[0].2[..24],
            b"\x02ns\x07example\x00\x02hm\x07example\x00"
        );
        assert_eq!(seen[1].2, b"\x00\x0a\x07example\x00");
        // A pointer loop is refused, not followed forever.
        let mut bad = m.clone();
        bad[12] = 0xC0;
        bad[13] = 12;
        assert!(read_response(&bad, &mut b, &mut |_| Ok(())).is_err());
        assert!(serial_gt(1, 0) && serial_gt(0, u32::MAX) && !serial_gt(5, 5));
    }
}
