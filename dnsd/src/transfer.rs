//! Zone transfers, shared pieces: the `[transfer]` and `[[tsig_key]]` config, per-zone
//! policies (ACL, TSIG key, NOTIFY targets, primaries), the bounds and counters, the entry
//! point the query pipeline calls for transfers, NOTIFY and TSIG-signed messages
//! ([`process`]), and the wire helpers the client side uses (names and RDATA decompressed,
//! queries built, UDP and TCP exchanges).
//!
//! Where the work happens: [`crate::axfr`] streams a zone out and collects one coming in,
//! [`crate::ixfr`] keeps the journal and speaks IXFR both ways, [`crate::notify`] sends and
//! receives NOTIFY, [`crate::secondary`] runs the refresh timers, and [`crate::tsig`]
//! signs and verifies.

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use arc_swap::ArcSwap;
use ipnet::IpNet;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::sync::{OwnedSemaphorePermit, Semaphore, mpsc};
use zones::rrtype::t;
use zones::{Name, Zone};

use crate::axfr::{Job, JobKind};
use crate::config::Config;
use crate::config::transfer::{TransferConfig, decode_secret, parse_addr, parse_prefix};
use crate::internet;
use crate::ixfr::Journal;
use crate::query_module::Transport;
use crate::response::{Owner, Section, Writer};
use crate::stats::WorkerStats;
use crate::tsig::{self, KeyStore, Signer};
use crate::wire::{Query, hf, opcode, rcode};
use crate::zoneset::ZoneSet;

/// What one zone allows and whom it talks to.
#[derive(Debug, Clone)]
pub struct ZonePolicy {
    /// Apex (lower case).
    pub origin: Name,
    /// The master file (for a secondary: where the copy is kept).
    pub file: PathBuf,
    /// Prefixes allowed to transfer the zone.
    pub allow: Vec<IpNet>,
    /// The key transfers and NOTIFY must be signed with.
    pub key: Option<Arc<tsig::Key>>,
    /// Secondaries to NOTIFY.
    pub notify: Vec<SocketAddr>,
    /// Primaries (non-empty: the zone is a secondary).
    pub primaries: Vec<SocketAddr>,
    /// Prefixes besides the primaries that may send NOTIFY.
    pub allow_notify: Vec<IpNet>,
}

impl ZonePolicy {
    /// True when the zone is a secondary.
    pub fn is_secondary(&self) -> bool {
        !self.primaries.is_empty()
    }
}

/// Policies of all zones and the keys, replaced whole on config reload.
#[derive(Debug, Default)]
pub struct Policies {
    zones: HashMap<Vec<u8>, Arc<ZonePolicy>>,
    /// The TSIG keys.
    pub keys: KeyStore,
}

impl Policies {
    /// The policies of a (checked) config.
    pub fn from_config(c: &Config) -> Policies {
        let keys: Vec<Arc<tsig::Key>> = c
            .tsig_keys
            .iter()
            .filter_map(|k| {
                let alg = tsig::Algorithm::from_config(&k.algorithm)?;
                let secret = decode_secret(&k.secret).ok()?;
                tsig::Key::new(&k.name, alg, secret).ok().map(Arc::new)
            })
            .collect();
        let keys = KeyStore::new(keys);
        let mut zones = HashMap::new();
        for z in &c.zones {
            let Ok(origin) = Name::parse(&z.origin, Some(&Name::root())) else {
                continue;
            };
            let origin = origin.to_lowercase();
            let p = ZonePolicy {
                file: z.file.clone(),
                allow: z
                    .allow_transfer
                    .iter()
                    .filter_map(|p| parse_prefix(p).ok())
                    .collect(),
                key: z.tsig.as_deref().and_then(|k| keys.by_name(k).cloned()),
                notify: z.notify.iter().filter_map(|a| parse_addr(a).ok()).collect(),
                primaries: z
                    .primaries
                    .iter()
                    .filter_map(|a| parse_addr(a).ok())
                    .collect(),
                allow_notify: z
                    .allow_notify
                    .iter()
                    .filter_map(|p| parse_prefix(p).ok())
                    .collect(),
                origin: origin.clone(),
            };
            zones.insert(origin.as_wire().to_vec(), Arc::new(p));
        }
        Policies { zones, keys }
    }

    /// The policy of the zone with this lower-case apex.
    pub fn zone(&self, apex: &[u8]) -> Option<&Arc<ZonePolicy>> {
        self.zones.get(apex)
    }

    /// Every zone's policy.
    pub fn all(&self) -> impl Iterator<Item = &Arc<ZonePolicy>> {
        self.zones.values()
    }
}

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
    limit_total => "transfer.out.limit_total", "Transfer requests over [transfer] max_out (SERVFAIL).";
    limit_client => "transfer.out.limit_client", "Transfer requests over [transfer] max_out_per_client (SERVFAIL).";
    in_axfr => "transfer.in.axfr", "Zones received by AXFR (or an AXFR-style IXFR).";
    in_ixfr => "transfer.in.ixfr", "Zones updated by incremental IXFR.";
    in_current => "transfer.in.current", "Refreshes that found the zone current.";
    in_failed => "transfer.in.failed", "Refreshes or transfers in that failed.";
    in_limit => "transfer.in.limit", "Transfers in stopped by max_in_records or in_timeout_secs.";
    in_waiting => "transfer.in.waiting", "Refreshes that waited for a free [transfer] max_in slot.";
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
    journal_diffs => "journal.diffs", "Differences recorded in zone journals.";
    journal_trimmed => "journal.trimmed", "Old differences dropped from journals to stay within journal_max_bytes.";
    journal_too_big => "journal.too_big", "Changes larger than journal_max_bytes (IXFR falls back to AXFR).";
    changes_dropped => "journal.changes_dropped", "Zone changes not journaled because the change queue was full.";
}

/// The state and last result of one zone's transfers, for `ctl zones` and /metrics.
#[derive(Debug, Clone, Default)]
pub struct ZoneStatus {
    /// What the secondary is doing: idle, refreshing, transferring, expired.
    pub state: &'static str,
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
    /// Slots for incoming transfers.
    pub in_slots: Arc<Semaphore>,
    /// Slots for NOTIFY targets being sent to at once.
    pub notify_slots: Arc<Semaphore>,
    /// Counters.
    pub stats: XfrStats,
    journals: Mutex<HashMap<Vec<u8>, Journal>>,
    triggers: Mutex<HashMap<Vec<u8>, mpsc::Sender<Trigger>>>,
    status: Mutex<HashMap<Vec<u8>, ZoneStatus>>,
    changes: mpsc::Sender<Change>,
}

impl Transfers {
    /// The transfer side for a config, and the receiving end of its zone-change queue.
    pub fn new(c: &Config) -> (Arc<Transfers>, mpsc::Receiver<Change>) {
        let (tx, rx) = mpsc::channel(64);
        let x = Transfers {
            policies: ArcSwap::from_pointee(Policies::from_config(c)),
            cfg: c.transfer.clone(),
            udp_payload: c.server.udp_payload,
            out_total: Arc::new(Semaphore::new(c.transfer.max_out)),
            per_client: Mutex::new(HashMap::new()),
            in_slots: Arc::new(Semaphore::new(c.transfer.max_in)),
            notify_slots: Arc::new(Semaphore::new(NOTIFY_AT_ONCE)),
            stats: XfrStats::default(),
            journals: Mutex::new(HashMap::new()),
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

    /// Runs `f` on the journal of the zone `apex` (created empty when missing).
    pub fn journal<R>(&self, apex: &[u8], f: impl FnOnce(&mut Journal) -> R) -> R {
        let mut j = self.journals.lock().expect("journal lock");
        let max = self.cfg.journal_max_bytes;
        f(j.entry(apex.to_vec()).or_insert_with(|| Journal::new(max)))
    }

    /// Registers the refresh trigger of a secondary zone.
    pub fn set_trigger(&self, apex: &[u8], tx: mpsc::Sender<Trigger>) {
        self.triggers
            .lock()
            .expect("trigger lock")
            .insert(apex.to_vec(), tx);
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

    /// Takes an outgoing transfer slot for `ip`; `Err` names the bound that was hit.
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
                if st.state.is_empty() {
                    "idle"
                } else {
                    st.state
                }
            ));
            if let Some(ps) = st.primary_serial {
                s.push_str(&format!("\tprimary serial {ps}"));
            }
            let now = tsig::now();
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

/// RFC 1982 serial arithmetic: `a` is newer than `b`.
pub fn serial_gt(a: u32, b: u32) -> bool {
    a != b && (a.wrapping_sub(b) as i32) > 0
}

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
            crate::response::put_opt(&mut w, self.q, self.udp_payload, rc, None);
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
        return Handled::Reply(crate::notify::handle(c, out, signer.as_mut()));
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
    let ctr = match f.name() {
        "badkey" => &st.tsig_badkey,
        "badsig" => &st.tsig_badsig,
        "badtime" => &st.tsig_badtime,
        _ => &st.tsig_formerr,
    };
    ctr.fetch_add(1, Ordering::Relaxed);
    tracing::debug!(peer = %c.src, "TSIG check failed: {}", f.name());
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
    let ans = internet::answer_in(&mut w, q, c.zones, zone);
    w.set_limit(limit);
    if q.edns.is_some() {
        crate::response::put_opt(&mut w, q, c.udp_payload, 0, None);
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
        let Some(client) = crate::ixfr::request_serial(c.req, q) else {
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

// ---------------------------------------------------------------------------------------
// Wire helpers for the client side (responses of primaries, NOTIFY answers).

/// Reads a possibly compressed name at `pos` into `out` (wire form, case kept); returns
/// its length and the offset just past it in place.
pub fn read_name(msg: &[u8], mut pos: usize, out: &mut [u8; 255]) -> Option<(usize, usize)> {
    let mut len = 0usize;
    let mut after = None;
    let mut hops = 0;
    loop {
        let l = *msg.get(pos)? as usize;
        if l & 0xC0 == 0xC0 {
            let ptr = ((l & 0x3F) << 8) | *msg.get(pos + 1)? as usize;
            if after.is_none() {
                after = Some(pos + 2);
            }
            hops += 1;
            if hops > 127 {
                return None;
            }
            pos = ptr;
            continue;
        }
        if l & 0xC0 != 0 || len + 1 + l > 255 {
            return None;
        }
        out[len..len + 1 + l].copy_from_slice(msg.get(pos..pos + 1 + l)?);
        len += 1 + l;
        pos += 1 + l;
        if l == 0 {
            return Some((len, after.unwrap_or(pos)));
        }
    }
}

/// A field of RDATA, for decompressing names inside it.
#[derive(Clone, Copy)]
enum F {
    Name,
    Fixed(usize),
    Str,
}

/// The layout of RDATA whose names a sender may have compressed (RFC 3597 §4 and the
/// types it lists that receivers decompress).
fn layout(rtype: u16) -> Option<&'static [F]> {
    use F::*;
    Some(match rtype {
        t::NS | t::MD | t::MF | t::CNAME | t::MB | t::MG | t::MR | t::PTR | t::DNAME => &[Name],
        t::SOA => &[Name, Name, Fixed(20)],
        t::MINFO | t::RP => &[Name, Name],
        t::MX | t::AFSDB | t::RT | t::KX => &[Fixed(2), Name],
        t::SRV => &[Fixed(6), Name],
        t::PX => &[Fixed(2), Name, Name],
        t::NAPTR => &[Fixed(4), Str, Str, Str, Name],
        _ => return None,
    })
}

/// One RR of a message, names decompressed.
#[derive(Debug, Clone, Copy)]
pub struct RrRef<'a> {
    /// Owner, wire form as sent.
    pub owner: &'a [u8],
    /// Type.
    pub rtype: u16,
    /// Class.
    pub class: u16,
    /// TTL.
    pub ttl: u32,
    /// RDATA, uncompressed.
    pub rdata: &'a [u8],
}

/// Scratch space for reading RRs.
pub struct RrBuf {
    owner: [u8; 255],
    rdata: Vec<u8>,
}

impl Default for RrBuf {
    fn default() -> Self {
        RrBuf {
            owner: [0; 255],
            rdata: Vec::with_capacity(512),
        }
    }
}

/// Reads the RR at `pos`; returns it and the offset of the next one.
pub fn read_rr<'b>(msg: &[u8], pos: usize, b: &'b mut RrBuf) -> Option<(RrRef<'b>, usize)> {
    let (olen, p) = read_name(msg, pos, &mut b.owner)?;
    let head = msg.get(p..p + 10)?;
    let rtype = u16::from_be_bytes([head[0], head[1]]);
    let class = u16::from_be_bytes([head[2], head[3]]);
    let ttl = u32::from_be_bytes([head[4], head[5], head[6], head[7]]);
    let rdlen = u16::from_be_bytes([head[8], head[9]]) as usize;
    let rd = p + 10;
    let end = rd + rdlen;
    if end > msg.len() {
        return None;
    }
    b.rdata.clear();
    match layout(rtype) {
        None => b.rdata.extend_from_slice(&msg[rd..end]),
        Some(fields) => {
            let mut q = rd;
            let mut name = [0u8; 255];
            for f in fields {
                match *f {
                    F::Name => {
                        // Names within the RDATA, pointers anywhere before.
                        let (n, next) = read_name(&msg[..end], q, &mut name)?;
                        b.rdata.extend_from_slice(&name[..n]);
                        q = next;
                    }
                    F::Fixed(k) => {
                        b.rdata.extend_from_slice(msg.get(q..q + k)?);
                        q += k;
                    }
                    F::Str => {
                        let l = *msg.get(q)? as usize;
                        b.rdata.extend_from_slice(msg.get(q..q + 1 + l)?);
                        q += 1 + l;
                    }
                }
                if q > end {
                    return None;
                }
            }
            if q != end || b.rdata.len() > 65535 {
                return None;
            }
        }
    }
    Some((
        RrRef {
            owner: &b.owner[..olen],
            rtype,
            class,
            ttl,
            rdata: &b.rdata,
        },
        end,
    ))
}

/// A response read: its header fields and TSIG; answer RRs went to the callback.
#[derive(Debug)]
pub struct Response {
    /// Message ID.
    pub id: u16,
    /// Flags word.
    pub flags: u16,
    /// RCODE (low four bits).
    pub rcode: u16,
    /// Answer RRs.
    pub ancount: u16,
    /// The TSIG RR, when the message ends with one.
    pub tsig: Option<tsig::TsigRr>,
}

/// Reads a response: header, question skipped, each answer RR to `f`, authority skipped,
/// additional scanned for a final TSIG.
pub fn read_response(
    msg: &[u8],
    rr: &mut RrBuf,
    f: &mut dyn FnMut(RrRef<'_>) -> Result<(), String>,
) -> Result<Response, String> {
    if msg.len() < 12 {
        return Err("short message".into());
    }
    let u = |o: usize| u16::from_be_bytes([msg[o], msg[o + 1]]);
    let (id, flags, qd, an, ns, ar) = (u(0), u(2), u(4), u(6), u(8), u(10));
    if flags & hf::QR == 0 {
        return Err("not a response".into());
    }
    let mut p = 12;
    let mut name = [0u8; 255];
    for _ in 0..qd {
        let (_, next) = read_name(msg, p, &mut name).ok_or("bad question")?;
        p = next + 4;
        if p > msg.len() {
            return Err("bad question".into());
        }
    }
    for _ in 0..an {
        let (r, next) = read_rr(msg, p, rr).ok_or("malformed answer record")?;
        f(r)?;
        p = next;
    }
    for _ in 0..ns {
        p = read_rr(msg, p, rr).ok_or("malformed authority record")?.1;
    }
    let mut tsig_rr = None;
    for i in 0..ar {
        let start = p;
        let (r, next) = read_rr(msg, p, rr).ok_or("malformed additional record")?;
        if r.rtype == tsig::TSIG {
            if i != ar - 1 {
                return Err("TSIG is not the last record".into());
            }
            tsig_rr = Some(tsig::read(msg, start).ok_or("malformed TSIG")?);
        }
        p = next;
    }
    Ok(Response {
        id,
        flags,
        rcode: flags & 0xF,
        ancount: an,
        tsig: tsig_rr,
    })
}

/// Builds a query: `qname` (wire) `qtype` IN with the opcode, an SOA in the authority
/// section (IXFR) or the answer section (NOTIFY), signed when `signer` is given.
pub fn build_query(
    id: u16,
    op: u8,
    qname: &[u8],
    qtype: u16,
    soa: Option<(&[u8], u32, &[u8])>,
    soa_in_answer: bool,
    signer: Option<&mut Signer>,
) -> Vec<u8> {
    let mut m = Vec::with_capacity(512);
    let mut flags = (op as u16) << 11;
    if op == opcode::NOTIFY {
        flags |= hf::AA;
    }
    m.extend_from_slice(&id.to_be_bytes());
    m.extend_from_slice(&flags.to_be_bytes());
    let (an, ns) = match (soa.is_some(), soa_in_answer) {
        (false, _) => (0u16, 0u16),
        (true, true) => (1, 0),
        (true, false) => (0, 1),
    };
    for c in [1u16, an, ns, 0] {
        m.extend_from_slice(&c.to_be_bytes());
    }
    m.extend_from_slice(qname);
    m.extend_from_slice(&qtype.to_be_bytes());
    m.extend_from_slice(&1u16.to_be_bytes());
    if let Some((owner, ttl, rd)) = soa {
        m.extend_from_slice(owner);
        m.extend_from_slice(&t::SOA.to_be_bytes());
        m.extend_from_slice(&1u16.to_be_bytes());
        m.extend_from_slice(&ttl.to_be_bytes());
        m.extend_from_slice(&(rd.len() as u16).to_be_bytes());
        m.extend_from_slice(rd);
    }
    if let Some(s) = signer {
        s.sign_vec(&mut m, 0, tsig::now());
    }
    m
}

/// Sends `msg` over UDP to `to` and waits up to `timeout` for the answer with its ID.
pub async fn udp_exchange(
    to: SocketAddr,
    msg: &[u8],
    timeout: Duration,
) -> Result<Vec<u8>, String> {
    let local: SocketAddr = if to.is_ipv4() {
        "0.0.0.0:0".parse().expect("addr")
    } else {
        "[::]:0".parse().expect("addr")
    };
    let s = tokio::net::UdpSocket::bind(local)
        .await
        .map_err(|e| e.to_string())?;
    s.connect(to).await.map_err(|e| e.to_string())?;
    s.send(msg).await.map_err(|e| e.to_string())?;
    let mut buf = vec![0u8; 65535];
    let deadline = tokio::time::Instant::now() + timeout;
    loop {
        let n = tokio::time::timeout_at(deadline, s.recv(&mut buf))
            .await
            .map_err(|_| format!("no answer from {to} within {timeout:?}"))?
            .map_err(|e| format!("{to}: {e}"))?;
        if n >= 12 && buf[..2] == msg[..2] && buf[2] & 0x80 != 0 {
            buf.truncate(n);
            return Ok(buf);
        }
    }
}

/// A TCP connection to a primary: framed messages, each read with a timeout.
pub struct TcpClient {
    s: tokio::net::TcpStream,
    timeout: Duration,
}

impl TcpClient {
    /// Connects to `to` within `timeout` (which also bounds each later read).
    pub async fn connect(to: SocketAddr, timeout: Duration) -> Result<TcpClient, String> {
        let s = tokio::time::timeout(timeout, tokio::net::TcpStream::connect(to))
            .await
            .map_err(|_| format!("connect to {to}: timed out"))?
            .map_err(|e| format!("connect to {to}: {e}"))?;
        let _ = s.set_nodelay(true);
        Ok(TcpClient { s, timeout })
    }

    /// Sends one message.
    pub async fn send(&mut self, msg: &[u8]) -> Result<(), String> {
        let mut v = Vec::with_capacity(msg.len() + 2);
        v.extend_from_slice(&(msg.len() as u16).to_be_bytes());
        v.extend_from_slice(msg);
        tokio::time::timeout(self.timeout, self.s.write_all(&v))
            .await
            .map_err(|_| "send timed out".to_string())?
            .map_err(|e| e.to_string())
    }

    /// Reads one message into `buf`.
    pub async fn recv(&mut self, buf: &mut Vec<u8>) -> Result<(), String> {
        let mut len = [0u8; 2];
        let r = async {
            self.s.read_exact(&mut len).await?;
            buf.resize(u16::from_be_bytes(len) as usize, 0);
            self.s.read_exact(buf).await
        };
        tokio::time::timeout(self.timeout, r)
            .await
            .map_err(|_| format!("no message within {:?}", self.timeout))?
            .map(|_| ())
            .map_err(|e| format!("connection: {e}"))
    }
}

/// Runs the zone-change queue: each change is journaled (off the runtime threads) and
/// announced to the zone's NOTIFY targets.
pub async fn run_changes(x: Arc<Transfers>, mut rx: mpsc::Receiver<Change>) {
    while let Some(c) = rx.recv().await {
        let apex = c.origin.as_wire().to_vec();
        if let Some(old) = c.old.clone() {
            let (new, max) = (c.new.clone(), x.cfg.journal_max_bytes);
            if old.serial() != new.serial() {
                let d = tokio::task::spawn_blocking(move || crate::ixfr::diff(&old, &new, max))
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
        crate::notify::spawn_notify(&x, &c.origin, &c.new, None);
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
                (v.state == "expired") as u64,
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
    use super::*;

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
        assert_eq!(z.primaries[1], "10.0.0.1:53".parse::<SocketAddr>().unwrap());
        assert_eq!(z.notify[0].port(), 53);
        assert!(z.allow[0].contains(&"10.1.2.3".parse::<IpAddr>().unwrap()));
        assert_eq!(z.key.as_ref().unwrap().alg, tsig::Algorithm::HmacSha512);
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
        assert_eq!(crate::ixfr::soa_serial(&seen[0].2), Some(7));
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
