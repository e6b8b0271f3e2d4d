//! The block map: addresses and prefixes mapped to an expiry, a reason and an origin, with a change feed.
//!
//! # Shape
//!
//! ```text
//! BlockMap::new(cfg) -> Arc<BlockMap>      shared by every thread; writers go through &self
//!   insert(entry) -> InsertOutcome          New | Refreshed | Unchanged | Evicted(victim) | Refused(why)
//!   insert_forced(entry) -> InsertOutcome   an operator's `--force`: past the policy
//!   insert_batch(entries) -> BatchOutcome   many inserts, one publish
//!   set_policy(policy)                      never-block prefixes and the shortest prefixes
//!   remove(net, cause) -> bool
//!   remove_from_peer(net, node, operator) -> bool   a peer's removal: only what it may lift
//!   expire(now_ms, budget) -> usize         removes at most `budget` expired entries
//!   entries() / get(net) / len()            snapshots for `block list`, resyncs, Redis
//!   reader() -> BlockReader                 one per thread (Send + Clone, not Sync)
//!     lookup(ip, now_ms) -> Option<BlockHit>          the most specific live entry, any kind
//!     check(ip, now_ms, traffic) -> Check             Clear | Suspect(hit) | Blocked(hit)
//!   subscribe(name) -> Subscription         lossless change feed (XDP mirror, Redis publisher)
//!     poll(max) -> Option<Delivery>         Changes(batch) | Resync(full snapshot)
//!     changed().await / wait_timeout(d)
//!   stats() -> BlockStats
//! ```
//!
//! # Readers never wait
//!
//! The read side is a left-right pair of tables (see the private `epoch` module): readers use
//! one copy while the writer changes the other, then the two swap. A reader only swaps an epoch
//! counter that lives on its own cache line and loads one index; it never takes a lock, never
//! writes a line another core writes, and never waits for a writer. Writers serialise on one
//! mutex that readers never touch; `insert` publishes at once, so a returned insert is visible
//! to every later lookup. `benches/block.rs` compares this with `RwLock<HashMap>` and
//! `Mutex<HashMap>`.
//!
//! A lookup first loads one flag that says whether the map holds anything (an empty map costs
//! that load and nothing else), then walks the [`PrefixMap`]: one
//! hash probe when the map holds only host entries, one probe per prefix length in use
//! otherwise. An entry whose expiry has passed is never a hit, even before `expire` removes it.
//!
//! # Evidence and scope: a defence must not be aimable
//!
//! Every entry says what proved the source owns its address ([`Evidence`]) and what it stops
//! ([`Scope`]). UDP without a valid server cookie proves nothing: the address may be forged.
//! Such an entry makes the source a *suspect* on this node ([`Check::Suspect`]: dnsd answers
//! its UDP TC=1 so that a real client comes back over TCP), never a block; the Redis
//! publisher and the XDP mirror leave suspects alone. A proven entry blocks the traffic its
//! scope names: [`Scope::All`] every packet (an operator, the rules file's `[global] deny`,
//! a source proven over TCP or HTTP), [`Scope::Dns`] only UDP to the DNS service (a source
//! proven by a valid DNS cookie). Lookups say which traffic they are for ([`Traffic`]).
//!
//! Inserts never weaken an entry: an unproven insert never touches a proven entry, and a
//! writer never changes an entry of a writer above it (operator, then this node, then a
//! peer): a peer's record cannot relabel an operator's block, nor a peer's removal lift one
//! ([`BlockMap::remove_from_peer`]).
//!
//! Every insert meets the [`crate::never_block::BlockPolicy`] ([`BlockMap::set_policy`]): a prefix that overlaps
//! a never-block entry, or is shorter than the configured minimum, is refused and counted by
//! cause ([`InsertOutcome::Refused`]); only [`BlockMap::insert_forced`] (an operator's
//! `--force`) passes it.
//!
//! # Bounds
//!
//! - `capacity` entries: inserting a new entry into a full map evicts the entry closest to
//!   expiry (an indexed min-heap on expiry finds it in O(log n)) — but suspects, which forged
//!   packets can make, hold at most half the map and never push out a proven entry (a new
//!   suspect that would is not taken: `suspects_refused`), and an operator's entry is pushed
//!   out by another operator's alone (others take the closest to expiry of a sample that no
//!   operator made, or are not taken: `no_room`); evictions are counted and
//!   reach subscribers as [`Change::Remove`] with [`RemoveCause::Evicted`].
//! - `feed_capacity` queued changes per subscriber: a subscriber that falls behind loses its
//!   queue and receives [`Delivery::Resync`] with a full snapshot next, never a silent gap.
//!   Lag and resyncs are counted per subscriber.
//! - Reasons are at most [`REASON_MAX`] bytes and node ids at most [`NODE_MAX`] bytes (longer
//!   ones are cut at a character boundary).
//!
//! # Expiry
//!
//! Expiries are unix milliseconds. `expire(now_ms, budget)` pops the expiry heap while its top
//! has passed, at most `budget` entries per call, so a caller runs it on a timer without ever
//! scanning the whole map.
//!
//! # Sync between nodes
//!
//! Entries learned from another node are inserted with [`Origin::Peer`] and the peer's node id;
//! subscribers see the origin of every upsert and the cause of every removal, so a Redis
//! publisher skips what came from peers. [`BlockEntry::with_ttl`] and [`BlockEntry::ttl_ms`]
//! convert between relative TTLs (what travels between nodes) and absolute expiries.

use crate::epoch;
use crate::prefix::PrefixMap;
use crate::util::{CachePadded, bump_owned};
use hashbrown::HashMap;
use ipnet::IpNet;
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use std::collections::VecDeque;
use std::fmt;
use std::net::IpAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::Duration;

/// Longest reason kept, in bytes.
pub const REASON_MAX: usize = 39;
/// Longest node id kept, in bytes.
pub const NODE_MAX: usize = 64;

/// Locks a mutex, taking the data even if another thread panicked while holding it.
fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

fn cut(s: &str, max: usize) -> &str {
    if s.len() <= max {
        return s;
    }
    let mut end = max;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    &s[..end]
}

/// A short reason stored inline (no allocation, `Copy`), cut to [`REASON_MAX`] bytes.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct Reason {
    len: u8,
    buf: [u8; REASON_MAX],
}

impl Reason {
    /// The empty reason.
    pub const EMPTY: Reason = Reason {
        len: 0,
        buf: [0; REASON_MAX],
    };

    /// Builds a reason from `s`, cut at a character boundary to [`REASON_MAX`] bytes.
    pub fn new(s: &str) -> Self {
        let s = cut(s, REASON_MAX);
        let mut buf = [0u8; REASON_MAX];
        buf[..s.len()].copy_from_slice(s.as_bytes());
        Reason {
            len: s.len() as u8,
            buf,
        }
    }

    /// The reason as text.
    pub fn as_str(&self) -> &str {
        // Built only from a &str cut at a char boundary.
        std::str::from_utf8(&self.buf[..self.len as usize]).unwrap_or("")
    }
}

impl Default for Reason {
    fn default() -> Self {
        Self::EMPTY
    }
}

impl From<&str> for Reason {
    fn from(s: &str) -> Self {
        Reason::new(s)
    }
}

impl fmt::Display for Reason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl fmt::Debug for Reason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self.as_str(), f)
    }
}

impl Serialize for Reason {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

impl<'de> Deserialize<'de> for Reason {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        Ok(Reason::new(&s))
    }
}

/// Who decided a block.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Origin {
    /// A decision of this node's daemons (escalation, flood defence).
    Local,
    /// Entered by hand (`dnsd ctl block add`).
    Operator,
    /// Learned from another node (Redis sync); must not be re-published.
    Peer,
}

/// What proved that a source owns its address, or that nothing did.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Evidence {
    /// UDP without a valid server cookie: the address may be forged. Never blocks.
    Udp,
    /// A valid DNS server cookie (the source received our earlier reply).
    Cookie,
    /// A completed TCP handshake (DNS over TCP).
    Tcp,
    /// An HTTP request (over a completed TCP handshake).
    Http,
    /// An HTTP request a browser sent on another site's behalf (`Sec-Fetch-Site:
    /// cross-site`: an image, a form or a script of a page elsewhere): its source did not
    /// choose it, so it never blocks — a page could have every visitor blocked.
    #[serde(rename = "cross_site")]
    CrossSite,
    /// The rules file's `[global] deny` list.
    Rules,
    /// An operator command.
    Operator,
}

impl Evidence {
    /// Every kind, in counter order.
    pub const ALL: [Evidence; 7] = [
        Evidence::Udp,
        Evidence::Cookie,
        Evidence::Tcp,
        Evidence::Http,
        Evidence::CrossSite,
        Evidence::Rules,
        Evidence::Operator,
    ];

    /// True for everything but unproven UDP and an HTTP request sent on another site's
    /// behalf.
    #[inline]
    pub fn is_proven(self) -> bool {
        !matches!(self, Evidence::Udp | Evidence::CrossSite)
    }

    /// True when the address is its sender's (everything but unproven UDP): what a rate
    /// limit keeps apart (a request made on another site's behalf still comes from its
    /// sender's address, and shares its bucket).
    #[inline]
    pub fn owns_address(self) -> bool {
        self != Evidence::Udp
    }

    /// The name in `block list`, events, metrics and records.
    pub fn name(self) -> &'static str {
        match self {
            Evidence::Udp => "udp",
            Evidence::Cookie => "cookie",
            Evidence::Tcp => "tcp",
            Evidence::Http => "http",
            Evidence::CrossSite => "cross_site",
            Evidence::Rules => "rules",
            Evidence::Operator => "operator",
        }
    }

    /// The kind named `s`.
    pub fn parse(s: &str) -> Option<Evidence> {
        Evidence::ALL.into_iter().find(|e| e.name() == s)
    }

    /// The scope a block on this evidence has unless told otherwise: DNS only for what DNS
    /// over UDP proved (a cookie; an unproven suspect), every packet otherwise.
    pub fn default_scope(self) -> Scope {
        match self {
            Evidence::Udp | Evidence::Cookie => Scope::Dns,
            _ => Scope::All,
        }
    }
}

impl fmt::Display for Evidence {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// What an entry stops.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Scope {
    /// Only NXDOMAIN answers over UDP (a random-subdomain suspect: its queries for names that
    /// exist are answered as usual). Suspects only.
    Nxdomain,
    /// Only UDP to the DNS service's addresses and port.
    Dns,
    /// Every packet from the source (TCP, HTTP, and in XDP every protocol).
    All,
}

impl Scope {
    /// The name in `block list` and records.
    pub fn name(self) -> &'static str {
        match self {
            Scope::Nxdomain => "nxdomain",
            Scope::Dns => "dns",
            Scope::All => "all",
        }
    }

    /// The scope named `s`.
    pub fn parse(s: &str) -> Option<Scope> {
        [Scope::Nxdomain, Scope::Dns, Scope::All]
            .into_iter()
            .find(|x| x.name() == s)
    }
}

impl fmt::Display for Scope {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Which traffic a lookup is for: decides which entries apply.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Traffic {
    /// DNS over UDP: proven entries of every scope block; unproven ones make a suspect.
    DnsUdp,
    /// A stream (DNS over TCP, HTTP): only proven entries of scope [`Scope::All`] apply.
    Stream,
}

/// What a [`BlockReader::check`] found for one source.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Check {
    /// Nothing applies.
    Clear,
    /// A suspect (unproven evidence): treat as the scope says, never drop outright.
    Suspect(BlockHit),
    /// A proven block that applies to this traffic: drop.
    Blocked(BlockHit),
}

/// The rank of a writer: a writer never changes an entry of a higher one.
fn rank(o: Origin) -> u8 {
    match o {
        Origin::Peer => 0,
        Origin::Local => 1,
        Origin::Operator => 2,
    }
}

/// Why an entry left the map.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum RemoveCause {
    /// Its expiry passed and `expire` removed it.
    Expired,
    /// The map was full and a new entry took its place.
    Evicted,
    /// Removed by hand (`dnsd ctl block del`).
    Operator,
    /// Lifted by this node's daemons.
    Local,
    /// Removed because another node removed it (Redis sync); must not be re-published.
    Peer,
    /// Lifted by the control-group member who added it: it retracts this node's own
    /// decision fleet-wide (as the node's own stale records are), never another node's
    /// block of the prefix, as an operator's removal does.
    Retracted,
}

/// One block: an address or prefix, until when, why, and who decided it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BlockEntry {
    /// Blocked address (host prefix) or prefix; host bits are cleared on insert.
    pub net: IpNet,
    /// Expiry, unix milliseconds; the entry is not a hit at or after this instant.
    pub expires_ms: u64,
    /// Short reason.
    pub reason: Reason,
    /// Who decided it.
    pub origin: Origin,
    /// Id of the node that decided it, when known (at most [`NODE_MAX`] bytes).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node: Option<Arc<str>>,
    /// What proved the source owns its address (unproven: a suspect, never a block).
    pub evidence: Evidence,
    /// What the entry stops.
    pub scope: Scope,
    /// The tenants whose zones a suspect is one for by their rules' escalations (a flood
    /// forged in a resolver's name against one tenant's rules never touches the others'),
    /// and whether that is all it is. Empty: `scope` everywhere. Blocks (proven evidence)
    /// are never a tenant's.
    #[serde(default, skip_serializing_if = "TenantSet::is_empty")]
    pub tenants: TenantSet,
    /// The control-group member (uid) who added it, the only one besides root and the
    /// daemon's user who may lift it; `None`: anyone else's (or several members').
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub by: Option<u32>,
    /// A peer's entry: the `(process start, sequence)` of the signed record it came from. A
    /// lift in that node's mark at or after it voids it (a removal lost with the stream's gap
    /// is applied from the mark). Not kept in the state file.
    #[serde(skip)]
    pub record: Option<(u64, u64)>,
}

/// The tenants a suspect is one for (at most [`TenantSet::MAX`]), and whether it is one
/// nowhere else (`only`: made by tenants' rules alone, no suspicion of every zone beside).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct TenantSet {
    ids: [u32; TenantSet::MAX],
    len: u8,
    only: bool,
}

impl TenantSet {
    /// Most tenants one suspect names: past it, further tenants' escalations add nothing
    /// (they never widen it to every zone).
    pub const MAX: usize = 4;

    /// A suspect of `tenant`'s zones alone.
    pub fn only(tenant: u32) -> TenantSet {
        let mut ids = [0; Self::MAX];
        ids[0] = tenant;
        TenantSet {
            ids,
            len: 1,
            only: true,
        }
    }

    /// True when no tenant is named.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// True when the suspect is one in no zone but the tenants' (none: the entry's scope).
    pub fn is_only(&self) -> bool {
        self.only && self.len > 0
    }

    /// The tenants named.
    pub fn ids(&self) -> &[u32] {
        &self.ids[..usize::from(self.len).min(Self::MAX)]
    }

    /// True when `tenant` is named.
    #[inline]
    pub fn contains(&self, tenant: u32) -> bool {
        self.ids().contains(&tenant)
    }

    /// Both: the tenants of each (up to [`TenantSet::MAX`]), tenant-only when both are.
    pub fn union(self, other: TenantSet) -> TenantSet {
        let mut out = self;
        for &t in other.ids() {
            if !out.contains(t) && usize::from(out.len) < Self::MAX {
                out.ids[usize::from(out.len)] = t;
                out.len += 1;
            }
        }
        out.only = self.is_only() && other.is_only();
        out
    }
}

impl BlockEntry {
    /// An entry on `evidence` expiring at `expires_ms` (unix milliseconds), with the
    /// evidence's default scope ([`Evidence::default_scope`]).
    pub fn new(
        net: IpNet,
        expires_ms: u64,
        reason: &str,
        origin: Origin,
        evidence: Evidence,
    ) -> Self {
        BlockEntry {
            net: net.trunc(),
            expires_ms,
            reason: Reason::new(reason),
            origin,
            node: None,
            evidence,
            scope: evidence.default_scope(),
            tenants: TenantSet::default(),
            by: None,
            record: None,
        }
    }

    /// The same entry, from the peer record numbered `(start, seq)`.
    pub fn from_record(self, start: u64, seq: u64) -> Self {
        BlockEntry {
            record: Some((start, seq)),
            ..self
        }
    }

    /// The same entry, added by the control-group member `uid`.
    pub fn by_member(self, uid: u32) -> Self {
        BlockEntry {
            by: Some(uid),
            ..self
        }
    }

    /// The same entry, a suspect for `tenant`'s zones alone (ignored for proven evidence).
    pub fn for_tenant(self, tenant: u32) -> Self {
        BlockEntry {
            tenants: if self.evidence.is_proven() {
                TenantSet::default()
            } else {
                TenantSet::only(tenant)
            },
            ..self
        }
    }

    /// An entry living `ttl` from `now_ms` (relative TTL, as carried between nodes).
    pub fn with_ttl(
        net: IpNet,
        ttl: Duration,
        now_ms: u64,
        reason: &str,
        origin: Origin,
        evidence: Evidence,
    ) -> Self {
        let ttl_ms = u64::try_from(ttl.as_millis()).unwrap_or(u64::MAX);
        Self::new(net, now_ms.saturating_add(ttl_ms), reason, origin, evidence)
    }

    /// An operator's block (`ctl block add`): every packet, for `ttl`.
    pub fn operator(net: IpNet, ttl: Duration, now_ms: u64, reason: &str) -> Self {
        Self::with_ttl(
            net,
            ttl,
            now_ms,
            reason,
            Origin::Operator,
            Evidence::Operator,
        )
    }

    /// The same entry with scope `scope`.
    pub fn with_scope(mut self, scope: Scope) -> Self {
        self.scope = scope;
        self
    }

    /// True when the entry blocks (proven evidence) rather than makes a suspect.
    pub fn is_proven(&self) -> bool {
        self.evidence.is_proven()
    }

    /// True when the entry drops `traffic` from its sources (as [`BlockReader::check`]
    /// decides): every proven entry stops DNS over UDP, only those of scope `all` a stream.
    pub fn stops(&self, traffic: Traffic) -> bool {
        self.is_proven()
            && match traffic {
                Traffic::DnsUdp => true,
                Traffic::Stream => self.scope == Scope::All,
            }
    }

    /// The same entry tagged with the id of the node that decided it.
    pub fn with_node(mut self, node: &str) -> Self {
        self.node = Some(Arc::from(cut(node, NODE_MAX)));
        self
    }

    /// Milliseconds left at `now_ms` (0 once expired).
    pub fn ttl_ms(&self, now_ms: u64) -> u64 {
        self.expires_ms.saturating_sub(now_ms)
    }

    /// True once `now_ms` has reached the expiry.
    pub fn is_expired(&self, now_ms: u64) -> bool {
        self.expires_ms <= now_ms
    }
}

/// Two suspects of one address (prefixes of it) as one: its suspicion of every zone the wider
/// of theirs (a general one beats one of NXDOMAIN answers only), its tenants both's — the
/// entry shown the one whose suspicion of every zone is wider.
fn merged_suspects(a: BlockHit, b: BlockHit) -> BlockHit {
    let (ga, gb) = (!a.tenants.is_only(), !b.tenants.is_only());
    let (scope, base) = match (ga, gb) {
        (true, false) => (a.scope, a),
        (false, true) => (b.scope, b),
        _ if b.scope > a.scope => (b.scope, b),
        _ => (a.scope, a),
    };
    BlockHit {
        scope,
        tenants: a.tenants.union(b.tenants),
        ..base
    }
}

/// What a lookup found: the matching entry's prefix, expiry, reason, origin, evidence and scope (`Copy`, no allocation).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BlockHit {
    /// The entry that matched.
    pub net: IpNet,
    /// Its expiry, unix milliseconds.
    pub expires_ms: u64,
    /// Its reason.
    pub reason: Reason,
    /// Its origin.
    pub origin: Origin,
    /// Its evidence.
    pub evidence: Evidence,
    /// Its scope.
    pub scope: Scope,
    /// The tenants whose zones a suspect is one for besides `scope` (or only, see
    /// [`TenantSet::is_only`]).
    pub tenants: TenantSet,
}

/// What an insert did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum InsertOutcome {
    /// A new entry went in.
    New,
    /// An existing entry got a later expiry or a new reason (its expiry never shrinks).
    Refreshed,
    /// The entry was already there with the same reason and at least this expiry.
    Unchanged,
    /// A new entry went in after evicting the entry closest to expiry (given) to fit.
    Evicted(IpNet),
    /// The policy refused it (never-block, short prefix); nothing changed.
    Refused(crate::never_block::Refusal),
    /// A suspect found no room: suspects already hold half the map, or only a proven entry
    /// could have made room; nothing changed.
    SuspectsFull,
    /// A daemon's or a peer's entry found no room: only operators' entries could have made
    /// it (they are pushed out by operators' entries alone); nothing changed.
    NoRoom,
}

/// What a batch insert did, by outcome.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct BatchOutcome {
    /// New entries.
    pub new: usize,
    /// Refreshed entries.
    pub refreshed: usize,
    /// Entries already present unchanged.
    pub unchanged: usize,
    /// Entries evicted to make room.
    pub evicted: usize,
    /// Entries the policy refused.
    pub refused: usize,
}

impl BatchOutcome {
    fn count(&mut self, o: InsertOutcome) {
        match o {
            InsertOutcome::New => self.new += 1,
            InsertOutcome::Refreshed => self.refreshed += 1,
            InsertOutcome::Unchanged => self.unchanged += 1,
            InsertOutcome::Evicted(_) => {
                self.new += 1;
                self.evicted += 1;
            }
            InsertOutcome::Refused(_) | InsertOutcome::SuspectsFull | InsertOutcome::NoRoom => {
                self.refused += 1
            }
        }
    }
}

/// One change as delivered to subscribers.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "lowercase")]
pub enum Change {
    /// An entry was inserted or refreshed; this is its full new state.
    Upsert(BlockEntry),
    /// An entry left the map.
    Remove {
        /// The prefix removed.
        net: IpNet,
        /// Why.
        cause: RemoveCause,
    },
}

/// What a subscriber receives from one poll.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Delivery {
    /// The next changes, in order.
    Changes(Vec<Change>),
    /// The full current content: replace the mirror with it (after lag, or on first poll).
    Resync(Vec<BlockEntry>),
}

/// Block map configuration (`[block]` in the daemons' configs).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct BlockConfig {
    /// Most entries held (hosts and prefixes); a new entry beyond it evicts the one closest to expiry.
    pub capacity: usize,
    /// Most changes queued per subscriber before it is switched to a resync.
    pub feed_capacity: usize,
    /// Shortest IPv4 prefix an automatic source may block (an operator needs `--force`).
    pub min_prefix_v4: u8,
    /// Shortest IPv6 prefix an automatic source may block (an operator needs `--force`).
    pub min_prefix_v6: u8,
    /// Where this node's own blocks are kept across restarts (see [`crate::block_state`]);
    /// relative to the config file. None: Redis alone brings them back.
    pub state_file: Option<std::path::PathBuf>,
}

impl Default for BlockConfig {
    fn default() -> Self {
        BlockConfig {
            capacity: 1_000_000,
            feed_capacity: 65_536,
            min_prefix_v4: crate::never_block::DEFAULT_MIN_PREFIX_V4,
            min_prefix_v6: crate::never_block::DEFAULT_MIN_PREFIX_V6,
            state_file: None,
        }
    }
}

impl BlockConfig {
    /// Checks values; the message names the key.
    pub fn validate(&self) -> Result<(), String> {
        if self.min_prefix_v4 > 32 {
            return Err("block.min_prefix_v4: must be at most 32".into());
        }
        if self.min_prefix_v6 > 128 {
            return Err("block.min_prefix_v6: must be at most 128".into());
        }
        Ok(())
    }
}

/// Counters of one subscriber.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct SubscriberStats {
    /// Name given to `subscribe`.
    pub name: String,
    /// Changes waiting in its queue.
    pub queued: usize,
    /// Changes handed out by `poll`.
    pub delivered: u64,
    /// Changes that did not fit its queue (replaced by a resync).
    pub lagged: u64,
    /// Times its queue overflowed.
    pub overflows: u64,
    /// Resyncs handed out after overflow.
    pub resyncs: u64,
}

/// Counters of the block map.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct BlockStats {
    /// Entries held.
    pub len: usize,
    /// Entries that are prefixes rather than single hosts.
    pub prefixes: usize,
    /// Configured capacity.
    pub capacity: usize,
    /// New entries inserted.
    pub inserts: u64,
    /// Entries refreshed (later expiry or new reason).
    pub refreshes: u64,
    /// Inserts that changed nothing.
    pub unchanged: u64,
    /// Entries removed by `remove`.
    pub removals: u64,
    /// Entries removed by `expire`.
    pub expirations: u64,
    /// Entries evicted because the map was full.
    pub evictions: u64,
    /// Suspects not taken: suspects held half the map, or only a proven entry could go.
    pub suspects_refused: u64,
    /// Tenants a suspect was not made one for: it named [`TenantSet::MAX`] already.
    pub suspect_tenants_full: u64,
    /// Daemons' or peers' entries not taken: only operators' entries could have gone.
    pub no_room: u64,
    /// Never-block addresses learned at run time not kept: [`MAX_LEARNED`] were.
    pub learned_full: u64,
    /// Inserts refused by the policy, by cause ([`crate::never_block::Refusal::ALL`] order).
    pub refused: [u64; 2],
    /// Live entries by evidence ([`Evidence::ALL`] order).
    pub by_evidence: [usize; Evidence::ALL.len()],
    /// Lookups that hit a live entry, summed over readers.
    pub hits: u64,
    /// Per-subscriber counters.
    pub subscribers: Vec<SubscriberStats>,
}

// ---------------------------------------------------------------------------------------------
// Read side: the left-right tables.

#[derive(Clone, Copy, Debug)]
struct Slot {
    expires_ms: u64,
    reason: Reason,
    origin: Origin,
    evidence: Evidence,
    scope: Scope,
    tenants: TenantSet,
}

impl Slot {
    #[inline]
    fn hit(&self, net: IpNet) -> BlockHit {
        BlockHit {
            net,
            expires_ms: self.expires_ms,
            reason: self.reason,
            origin: self.origin,
            evidence: self.evidence,
            scope: self.scope,
            tenants: self.tenants,
        }
    }
}

#[derive(Clone, Default)]
struct Tables {
    map: PrefixMap<Slot>,
}

enum Op {
    Upsert(IpNet, Slot),
    Remove(IpNet),
}

impl epoch::Apply<Op> for Tables {
    fn apply(&mut self, op: &Op) {
        match op {
            Op::Upsert(net, slot) => {
                self.map.insert(*net, *slot);
            }
            Op::Remove(net) => {
                self.map.remove(net);
            }
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Write side: authoritative entries, expiry heap, subscribers.

struct Meta {
    entry: BlockEntry,
    heap_pos: usize,
}

#[derive(Default)]
struct WriterCounters {
    inserts: u64,
    refreshes: u64,
    unchanged: u64,
    removals: u64,
    expirations: u64,
    evictions: u64,
    suspects_refused: u64,
    suspect_tenants_full: u64,
    no_room: u64,
    learned_full: u64,
    refused: [u64; 2],
    /// Entries that are prefixes rather than hosts (kept here so stats never scan).
    prefixes: usize,
    /// Entries by evidence (kept here so stats never scan).
    by_evidence: [usize; Evidence::ALL.len()],
}

fn evidence_index(e: Evidence) -> usize {
    Evidence::ALL.iter().position(|x| *x == e).unwrap_or(0)
}

/// Heap positions a non-operator entry looks at for room when an operator's entry is the
/// closest to expiry.
const VICTIM_SAMPLE: usize = 64;

struct Writer {
    handle: epoch::Writer<Tables, Op>,
    /// The state of the victim sample's position picker.
    sample_state: u64,
    slots: Vec<Meta>,
    free: Vec<usize>,
    by_net: HashMap<IpNet, usize>,
    /// Min-heap of slot ids by expiry.
    heap: Vec<usize>,
    pending: Vec<Change>,
    subs: Vec<Arc<SubShared>>,
    counters: WriterCounters,
    policy: crate::never_block::BlockPolicy,
    /// Never-block addresses learned while running ([`BlockMap::protect`]): kept across
    /// policy installs.
    learned: Vec<(IpNet, Arc<str>)>,
}

/// Never-block addresses learned while running, at most.
pub const MAX_LEARNED: usize = 64;

impl Writer {
    fn exp(&self, id: usize) -> u64 {
        self.slots[id].entry.expires_ms
    }

    fn heap_set(&mut self, pos: usize, id: usize) {
        self.heap[pos] = id;
        self.slots[id].heap_pos = pos;
    }

    fn sift_up(&mut self, mut pos: usize) {
        let id = self.heap[pos];
        while pos > 0 {
            let parent = (pos - 1) / 2;
            let pid = self.heap[parent];
            if self.exp(pid) <= self.exp(id) {
                break;
            }
            self.heap_set(pos, pid);
            pos = parent;
        }
        self.heap_set(pos, id);
    }

    fn sift_down(&mut self, mut pos: usize) {
        let id = self.heap[pos];
        let n = self.heap.len();
        loop {
            let l = 2 * pos + 1;
            if l >= n {
                break;
            }
            let r = l + 1;
            let c = if r < n && self.exp(self.heap[r]) < self.exp(self.heap[l]) {
                r
            } else {
                l
            };
            let cid = self.heap[c];
            if self.exp(id) <= self.exp(cid) {
                break;
            }
            self.heap_set(pos, cid);
            pos = c;
        }
        self.heap_set(pos, id);
    }

    fn heap_remove(&mut self, pos: usize) {
        let last = self.heap.len() - 1;
        if pos != last {
            let moved = self.heap[last];
            self.heap_set(pos, moved);
            self.heap.pop();
            self.sift_up(pos);
            let p = self.slots[moved].heap_pos;
            self.sift_down(p);
        } else {
            self.heap.pop();
        }
    }

    fn slot_of(entry: &BlockEntry) -> Slot {
        Slot {
            expires_ms: entry.expires_ms,
            reason: entry.reason,
            origin: entry.origin,
            evidence: entry.evidence,
            scope: entry.scope,
            tenants: entry.tenants,
        }
    }

    fn remove_id(&mut self, id: usize, cause: RemoveCause) {
        let net = self.slots[id].entry.net;
        self.by_net.remove(&net);
        if is_prefix(&net) {
            self.counters.prefixes -= 1;
        }
        let pos = self.slots[id].heap_pos;
        self.heap_remove(pos);
        self.counters.by_evidence[evidence_index(self.slots[id].entry.evidence)] -= 1;
        self.slots[id].entry.node = None;
        self.free.push(id);
        self.handle.append(Op::Remove(net));
        self.pending.push(Change::Remove { net, cause });
        match cause {
            RemoveCause::Expired => self.counters.expirations += 1,
            RemoveCause::Evicted => self.counters.evictions += 1,
            _ => self.counters.removals += 1,
        }
    }

    fn insert_one(&mut self, capacity: usize, mut e: BlockEntry, forced: bool) -> InsertOutcome {
        e.net = crate::never_block::canonical_net(e.net.trunc());
        if !e.evidence.is_proven() && e.scope == Scope::All {
            // A suspect is a DNS matter: it never stops other traffic.
            e.scope = Scope::Dns;
        }
        if e.evidence.is_proven() && e.scope == Scope::Nxdomain {
            e.scope = Scope::Dns;
        }
        if e.evidence.is_proven() {
            e.tenants = TenantSet::default();
        }
        if !forced && let Err((why, _)) = self.policy.check(&e.net) {
            let i = crate::never_block::Refusal::ALL
                .iter()
                .position(|r| *r == why)
                .unwrap_or(0);
            self.counters.refused[i] += 1;
            return InsertOutcome::Refused(why);
        }
        let net = e.net;
        if let Some(&id) = self.by_net.get(&net) {
            let cur = &self.slots[id].entry;
            let (cur_proven, new_proven) = (cur.evidence.is_proven(), e.evidence.is_proven());
            let next = if cur_proven && !new_proven {
                // A suspicion never weakens a block.
                None
            } else if new_proven && cur_proven && e.by.is_some() && cur.by != e.by {
                // A member's block over another's (root's, an automatic one, a peer's,
                // another member's): it lasts longer and stops what the member's stops too,
                // and stays theirs — the member neither makes it an operator's entry nor
                // may lift it. (Over a suspicion, the member's block replaces it, below.)
                Some(BlockEntry {
                    expires_ms: e.expires_ms.max(cur.expires_ms),
                    scope: e.scope.max(cur.scope),
                    ..cur.clone()
                })
            } else if new_proven && cur.by.is_some() && e.by.is_none() {
                // Another's block over a member's: theirs from now on (a member's short
                // block absorbed a peer's or an escalation, then lapsed or was lifted).
                Some(BlockEntry {
                    expires_ms: e.expires_ms.max(cur.expires_ms),
                    ..e
                })
            } else if new_proven && !cur_proven {
                // A proof replaces a suspicion whole.
                Some(e)
            } else if rank(e.origin) < rank(cur.origin) {
                // A lower writer never changes a higher one's entry.
                None
            } else if rank(e.origin) > rank(cur.origin) {
                // A higher writer takes the entry over; its expiry never shrinks, and a
                // member takes over no one else's (it could lift it then).
                Some(BlockEntry {
                    expires_ms: e.expires_ms.max(cur.expires_ms),
                    by: e.by.filter(|_| cur.by == e.by),
                    ..e
                })
            } else {
                // The same writer: later expiry, the new reason, node and evidence, the wider
                // scope — a suspect's of every zone and its tenants' apart, each the union
                // (two tenants' rules make it one in their two tenants' zones, never in every
                // zone; a random-subdomain suspicion beside stays one of NXDOMAIN answers).
                let scope = match (cur.tenants.is_only(), e.tenants.is_only()) {
                    (true, false) => e.scope,
                    (false, true) => cur.scope,
                    _ => e.scope.max(cur.scope),
                };
                let tenants = cur.tenants.union(e.tenants);
                if e.tenants.ids().iter().any(|&t| !tenants.contains(t)) {
                    self.counters.suspect_tenants_full += 1;
                }
                // The newest record of one node it came from (one read late never moves
                // it back: a lift between the two would then void the newer block).
                let record = if e.node == cur.node {
                    e.record.max(cur.record)
                } else {
                    e.record
                };
                Some(BlockEntry {
                    expires_ms: e.expires_ms.max(cur.expires_ms),
                    scope,
                    tenants,
                    by: e.by.filter(|_| cur.by == e.by),
                    record,
                    ..e
                })
            };
            let next_record = next.as_ref().map(|n| n.record);
            let Some(next) = next.filter(|n| {
                n.net != cur.net
                    || BlockEntry {
                        record: cur.record,
                        ..n.clone()
                    } != *cur
            }) else {
                // The same entry: the newest record it came from noted, no change made.
                if let Some(n) = next_record {
                    self.slots[id].entry.record = n;
                }
                self.counters.unchanged += 1;
                return InsertOutcome::Unchanged;
            };
            let old_exp = cur.expires_ms;
            self.counters.by_evidence[evidence_index(cur.evidence)] -= 1;
            self.counters.by_evidence[evidence_index(next.evidence)] += 1;
            let slot = Self::slot_of(&next);
            let change = Change::Upsert(next.clone());
            let new_exp = next.expires_ms;
            self.slots[id].entry = next;
            let pos = self.slots[id].heap_pos;
            if new_exp >= old_exp {
                self.sift_down(pos);
            } else {
                self.sift_up(pos);
            }
            self.handle.append(Op::Upsert(net, slot));
            self.pending.push(change);
            self.counters.refreshes += 1;
            return InsertOutcome::Refreshed;
        }
        let full = self.by_net.len() >= capacity.max(1);
        if !e.evidence.is_proven() {
            // Forged packets make suspects: they may fill half the map at most, and never
            // push out an entry that proof or an operator put there.
            let suspects = self.counters.by_evidence[evidence_index(Evidence::Udp)]
                + self.counters.by_evidence[evidence_index(Evidence::CrossSite)];
            if suspects >= (capacity / 2).max(1)
                || (full && self.slots[self.heap[0]].entry.evidence.is_proven())
            {
                self.counters.suspects_refused += 1;
                return InsertOutcome::SuspectsFull;
            }
        }
        let mut outcome = InsertOutcome::New;
        if full {
            let Some(victim) = self.victim_for(e.origin) else {
                self.counters.no_room += 1;
                return InsertOutcome::NoRoom;
            };
            let vnet = self.slots[victim].entry.net;
            self.remove_id(victim, RemoveCause::Evicted);
            outcome = InsertOutcome::Evicted(vnet);
        }
        let slot = Self::slot_of(&e);
        self.counters.by_evidence[evidence_index(e.evidence)] += 1;
        self.pending.push(Change::Upsert(e.clone()));
        let meta = Meta {
            entry: e,
            heap_pos: self.heap.len(),
        };
        let id = match self.free.pop() {
            Some(id) => {
                self.slots[id] = meta;
                id
            }
            None => {
                self.slots.push(meta);
                self.slots.len() - 1
            }
        };
        self.by_net.insert(net, id);
        if is_prefix(&net) {
            self.counters.prefixes += 1;
        }
        self.heap.push(id);
        self.sift_up(self.heap.len() - 1);
        self.handle.append(Op::Upsert(net, slot));
        self.counters.inserts += 1;
        outcome
    }

    /// The entry a new one of `origin` pushes out of the full map: the one closest to expiry,
    /// unless an operator put it there and the newcomer is not an operator's (an attacker's
    /// escalations would push out the operator's blocks); then the closest to expiry of a
    /// sample of the heap (its top levels, then positions at random) that no operator put
    /// there. None when the sample holds only operators' entries.
    fn victim_for(&mut self, origin: Origin) -> Option<usize> {
        let top = *self.heap.first()?;
        if origin == Origin::Operator || self.slots[top].entry.origin != Origin::Operator {
            return Some(top);
        }
        let n = self.heap.len();
        let mut best: Option<usize> = None;
        for k in 1..=VICTIM_SAMPLE {
            let pos = if k <= VICTIM_SAMPLE / 2 {
                k
            } else {
                // xorshift64: cheap, and whom it picks needs no secrecy.
                let mut x = self.sample_state | 1;
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                self.sample_state = x;
                (x % n as u64) as usize
            };
            let Some(&id) = self.heap.get(pos) else {
                continue;
            };
            if self.slots[id].entry.origin != Origin::Operator
                && best.is_none_or(|b| self.exp(id) < self.exp(b))
            {
                best = Some(id);
            }
        }
        best
    }

    fn snapshot(&self) -> Vec<BlockEntry> {
        self.by_net
            .values()
            .map(|&id| self.slots[id].entry.clone())
            .collect()
    }
}

fn is_prefix(net: &IpNet) -> bool {
    net.prefix_len() < net.max_prefix_len()
}

struct Inner {
    cfg: BlockConfig,
    nonempty: CachePadded<AtomicBool>,
    shared: Arc<epoch::Shared<Tables>>,
    writer: Mutex<Writer>,
    readers: Mutex<ReaderRegistry>,
}

#[derive(Default)]
struct ReaderRegistry {
    live: Vec<Arc<CachePadded<AtomicU64>>>,
    retired_hits: u64,
}

impl Inner {
    /// Publishes pending operations, updates the empty flag and feeds subscribers.
    fn finish(&self, w: &mut Writer) {
        w.handle.publish();
        self.nonempty.store(!w.by_net.is_empty(), Ordering::Release);
        if w.pending.is_empty() {
            return;
        }
        for sub in &w.subs {
            sub.deliver(&w.pending);
        }
        w.pending.clear();
    }
}

/// The shared block map; see the module documentation.
pub struct BlockMap {
    inner: Arc<Inner>,
}

impl fmt::Debug for BlockMap {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("BlockMap")
            .field("cfg", &self.inner.cfg)
            .field("len", &self.len())
            .finish()
    }
}

impl BlockMap {
    /// An empty map with the given bounds.
    pub fn new(cfg: BlockConfig) -> Arc<Self> {
        let handle = epoch::Writer::new(Tables::default());
        let shared = Arc::clone(handle.shared());
        let writer = Writer {
            handle,
            slots: Vec::new(),
            free: Vec::new(),
            by_net: HashMap::new(),
            heap: Vec::new(),
            sample_state: 0x9e37_79b9_7f4a_7c15,
            pending: Vec::new(),
            subs: Vec::new(),
            counters: WriterCounters::default(),
            policy: crate::never_block::BlockPolicy {
                min_prefix_v4: cfg.min_prefix_v4,
                min_prefix_v6: cfg.min_prefix_v6,
                never_block: Arc::default(),
            },
            learned: Vec::new(),
        };
        Arc::new(BlockMap {
            inner: Arc::new(Inner {
                cfg,
                nonempty: CachePadded(AtomicBool::new(false)),
                shared,
                writer: Mutex::new(writer),
                readers: Mutex::new(ReaderRegistry::default()),
            }),
        })
    }

    /// The configuration the map was built with.
    pub fn config(&self) -> &BlockConfig {
        &self.inner.cfg
    }

    /// Inserts or refreshes one entry and publishes it to readers and subscribers at once.
    ///
    /// See the module documentation for what a refresh may change (never weaken, never
    /// relabel a higher writer's entry). In a full map a new entry evicts the entry closest to
    /// expiry. The policy ([`set_policy`](Self::set_policy)) refuses never-block and short
    /// prefixes, from every origin: an operator passes it with [`insert_forced`](Self::insert_forced).
    pub fn insert(&self, entry: BlockEntry) -> InsertOutcome {
        self.insert_with(entry, false)
    }

    /// Blocks the host of `ip` — an IPv4 address, an IPv6 source's /64
    /// ([`host_net`](crate::ratelimit::host_net)) — with the entry `make` builds for a prefix;
    /// where the policy refuses the /64 (a never-block address inside it, a `min_prefix_v6`
    /// above 64), the address alone.
    pub fn insert_host(&self, ip: IpAddr, make: impl Fn(IpNet) -> BlockEntry) -> InsertOutcome {
        let net = crate::ratelimit::host_net(ip);
        let r = self.insert(make(net));
        if matches!(r, InsertOutcome::Refused(_)) && net.prefix_len() != net.max_prefix_len() {
            return self.insert(make(IpNet::from(ip.to_canonical())));
        }
        r
    }

    /// [`insert`](Self::insert) past the policy (an operator's `--force`); logged by the caller.
    pub fn insert_forced(&self, entry: BlockEntry) -> InsertOutcome {
        self.insert_with(entry, true)
    }

    fn insert_with(&self, entry: BlockEntry, forced: bool) -> InsertOutcome {
        let mut w = lock(&self.inner.writer);
        let out = w.insert_one(self.inner.cfg.capacity, entry, forced);
        self.inner.finish(&mut w);
        out
    }

    /// Replaces the policy (never-block prefixes, shortest prefixes) that inserts meet.
    ///
    /// Entries already in the map that the new policy refuses are removed (cause
    /// [`RemoveCause::Local`]): a never-block prefix added at run time lifts what covers it.
    /// Operator entries stay (they passed `--force`, or were allowed when made).
    pub fn set_policy(&self, policy: crate::never_block::BlockPolicy) -> usize {
        let mut w = lock(&self.inner.writer);
        self.apply_policy(&mut w, policy)
    }

    fn apply_policy(&self, w: &mut Writer, policy: crate::never_block::BlockPolicy) -> usize {
        let stale: Vec<usize> = w
            .by_net
            .iter()
            .filter(|(net, id)| {
                w.slots[**id].entry.origin != Origin::Operator && policy.check(net).is_err()
            })
            .map(|(_, &id)| id)
            .collect();
        let n = stale.len();
        for id in stale {
            w.remove_id(id, RemoveCause::Local);
        }
        w.policy = policy;
        self.inner.finish(w);
        n
    }

    /// Adds `ip` to the never-block set while the process runs (and across policy installs):
    /// a peer learned at run time — the Redis master and replicas Sentinel names — which an
    /// escalation must never cut off (with XDP, its replies would be dropped, and the lift
    /// could not come through it). Lifts what covers it. False when already there, or when
    /// [`MAX_LEARNED`] are (counted as `learned_full`).
    pub fn protect(&self, ip: IpAddr, source: &str) -> bool {
        let net = crate::never_block::canonical_net(IpNet::from(ip));
        let mut w = lock(&self.inner.writer);
        if w.learned.iter().any(|(n, _)| *n == net) {
            return false;
        }
        if w.learned.len() >= MAX_LEARNED {
            w.counters.learned_full += 1;
            return false;
        }
        let source: Arc<str> = Arc::from(source);
        w.learned.push((net, source.clone()));
        let mut nb = (*w.policy.never_block).clone();
        nb.push(net, &source);
        let policy = crate::never_block::BlockPolicy {
            never_block: Arc::new(nb),
            ..w.policy.clone()
        };
        let lifted = self.apply_policy(&mut w, policy);
        tracing::info!(%ip, source = &*source, lifted, "never-block address learned");
        true
    }

    /// The policy inserts meet now.
    pub fn policy(&self) -> crate::never_block::BlockPolicy {
        lock(&self.inner.writer).policy.clone()
    }

    /// Puts `never_block` and `cfg`'s shortest prefixes in force (both daemons, at start and
    /// on every reload); automatic entries the policy no longer allows are lifted (logged).
    pub fn install_policy(
        &self,
        cfg: &BlockConfig,
        mut never_block: crate::never_block::NeverBlock,
    ) {
        // Merged under the writer's lock: an address learned meanwhile is not lost.
        let mut w = lock(&self.inner.writer);
        for (net, source) in &w.learned {
            never_block.push(*net, source);
        }
        let n = never_block.len();
        let lifted = self.apply_policy(
            &mut w,
            crate::never_block::BlockPolicy {
                min_prefix_v4: cfg.min_prefix_v4,
                min_prefix_v6: cfg.min_prefix_v6,
                never_block: Arc::new(never_block),
            },
        );
        drop(w);
        tracing::info!(
            never_block = n,
            min_prefix_v4 = cfg.min_prefix_v4,
            min_prefix_v6 = cfg.min_prefix_v6,
            "block policy in force"
        );
        if lifted > 0 {
            tracing::warn!(lifted, "blocks or suspects of never-block prefixes lifted");
        }
    }

    /// The policy in force, as `ctl status` shows it.
    pub fn render_policy(&self) -> String {
        let p = self.policy();
        format!(
            "block policy: min_prefix_v4 /{}, min_prefix_v6 /{}\nnever_block ({} entries):\n{}",
            p.min_prefix_v4,
            p.min_prefix_v6,
            p.never_block.len(),
            p.never_block.render()
        )
    }

    /// Inserts many entries with a single publish (Redis snapshots, bulk loads), each under the policy.
    pub fn insert_batch(&self, entries: impl IntoIterator<Item = BlockEntry>) -> BatchOutcome {
        self.insert_batch_with(entries, false)
    }

    /// [`insert_batch`](Self::insert_batch) past the policy (an operator's `block import --force`).
    pub fn insert_batch_forced(
        &self,
        entries: impl IntoIterator<Item = BlockEntry>,
    ) -> BatchOutcome {
        self.insert_batch_with(entries, true)
    }

    fn insert_batch_with(
        &self,
        entries: impl IntoIterator<Item = BlockEntry>,
        forced: bool,
    ) -> BatchOutcome {
        let mut w = lock(&self.inner.writer);
        let mut out = BatchOutcome::default();
        for e in entries {
            out.count(w.insert_one(self.inner.cfg.capacity, e, forced));
        }
        self.inner.finish(&mut w);
        out
    }

    /// Removes exactly `net` (not prefixes covering it); false when it was not there.
    pub fn remove(&self, net: IpNet, cause: RemoveCause) -> bool {
        let mut w = lock(&self.inner.writer);
        let Some(&id) = w
            .by_net
            .get(&crate::never_block::canonical_net(net.trunc()))
        else {
            return false;
        };
        w.remove_id(id, cause);
        self.inner.finish(&mut w);
        true
    }

    /// Removes `net` when `may(entry)` says so, in one step (nothing can change the entry
    /// between the check and the removal): `None` when absent, `Some(false)` when refused.
    pub fn remove_if(
        &self,
        net: IpNet,
        cause: RemoveCause,
        may: impl FnOnce(&BlockEntry) -> bool,
    ) -> Option<bool> {
        let mut w = lock(&self.inner.writer);
        let &id = w
            .by_net
            .get(&crate::never_block::canonical_net(net.trunc()))?;
        if !may(&w.slots[id].entry) {
            return Some(false);
        }
        w.remove_id(id, cause);
        self.inner.finish(&mut w);
        Some(true)
    }

    /// A removal another node asked for: lifts `net` only when this node holds it as that
    /// node's own peer entry; an operator's removal (`operator`) also lifts any peer entry
    /// and this node's automatic ones, never this node's operator entries. False when nothing
    /// was lifted.
    pub fn remove_from_peer(&self, net: IpNet, node: &str, operator: bool) -> bool {
        self.remove_peer_if(net, |e| match e.origin {
            Origin::Peer => operator || e.node.as_deref() == Some(node),
            Origin::Local => operator,
            // A control-group member's block is no root's: another node's operator lifts it.
            Origin::Operator => operator && e.by.is_some(),
        })
    }

    /// Lifts `node`'s peer entry of exactly `net` when the record it came from is at or
    /// before `upto` (a lift in the node's signed mark: its removal was lost with the
    /// stream); true when lifted.
    pub fn lift_voided(&self, net: IpNet, node: &str, upto: (u64, u64)) -> bool {
        self.remove_peer_if(net, |e| {
            e.origin == Origin::Peer
                && e.node.as_deref() == Some(node)
                && e.record.is_some_and(|r| r <= upto)
        })
    }

    /// Removes the entry of exactly `net`, as a peer asked, when `may` says so of it.
    fn remove_peer_if(&self, net: IpNet, may: impl FnOnce(&BlockEntry) -> bool) -> bool {
        let mut w = lock(&self.inner.writer);
        let Some(&id) = w
            .by_net
            .get(&crate::never_block::canonical_net(net.trunc()))
        else {
            return false;
        };
        if !may(&w.slots[id].entry) {
            return false;
        }
        w.remove_id(id, RemoveCause::Peer);
        self.inner.finish(&mut w);
        true
    }

    /// Removes up to `budget` entries whose expiry is at or before `now_ms`; returns how many.
    ///
    /// Works off the expiry heap from its top: never scans the map.
    pub fn expire(&self, now_ms: u64, budget: usize) -> usize {
        let mut w = lock(&self.inner.writer);
        let mut n = 0;
        while n < budget {
            let Some(&top) = w.heap.first() else { break };
            if w.exp(top) > now_ms {
                break;
            }
            w.remove_id(top, RemoveCause::Expired);
            n += 1;
        }
        self.inner.finish(&mut w);
        n
    }

    /// The entry stored for exactly `net`, expired or not.
    pub fn get(&self, net: IpNet) -> Option<BlockEntry> {
        let w = lock(&self.inner.writer);
        w.by_net
            .get(&crate::never_block::canonical_net(net.trunc()))
            .map(|&id| w.slots[id].entry.clone())
    }

    /// Number of entries (including expired ones `expire` has not removed yet).
    pub fn len(&self) -> usize {
        lock(&self.inner.writer).by_net.len()
    }

    /// True when the map holds nothing (one atomic load).
    pub fn is_empty(&self) -> bool {
        !self.inner.nonempty.load(Ordering::Acquire)
    }

    /// A copy of every entry, in no particular order.
    pub fn entries(&self) -> Vec<BlockEntry> {
        lock(&self.inner.writer).snapshot()
    }

    /// A lookup handle for one thread.
    pub fn reader(&self) -> BlockReader {
        BlockReader::new(Arc::clone(&self.inner))
    }

    /// A change feed named `name` (for stats). Its first poll on a non-empty map is a resync.
    pub fn subscribe(&self, name: &str) -> Subscription {
        let mut w = lock(&self.inner.writer);
        let shared = Arc::new(SubShared {
            name: name.to_string(),
            capacity: self.inner.cfg.feed_capacity.max(1),
            q: Mutex::new(SubQueue {
                items: VecDeque::new(),
                lagging: false,
                initial: !w.by_net.is_empty(),
            }),
            cv: Condvar::new(),
            notify: tokio::sync::Notify::new(),
            delivered: AtomicU64::new(0),
            lagged: AtomicU64::new(0),
            overflows: AtomicU64::new(0),
            resyncs: AtomicU64::new(0),
        });
        w.subs.push(Arc::clone(&shared));
        Subscription {
            inner: Arc::clone(&self.inner),
            shared,
        }
    }

    /// Current counters.
    pub fn stats(&self) -> BlockStats {
        let hits = {
            let r = lock(&self.inner.readers);
            r.live
                .iter()
                .map(|c| c.load(Ordering::Relaxed))
                .fold(r.retired_hits, u64::wrapping_add)
        };
        let w = lock(&self.inner.writer);
        let c = &w.counters;
        BlockStats {
            len: w.by_net.len(),
            prefixes: c.prefixes,
            capacity: self.inner.cfg.capacity,
            inserts: c.inserts,
            refreshes: c.refreshes,
            unchanged: c.unchanged,
            removals: c.removals,
            expirations: c.expirations,
            evictions: c.evictions,
            suspects_refused: c.suspects_refused,
            suspect_tenants_full: c.suspect_tenants_full,
            no_room: c.no_room,
            learned_full: c.learned_full,
            refused: c.refused,
            by_evidence: c.by_evidence,
            hits,
            subscribers: w.subs.iter().map(|s| s.stats()).collect(),
        }
    }
}

/// A per-thread lookup handle: `Send` and `Clone`, not `Sync`. Lookups never wait for writers.
pub struct BlockReader {
    inner: Arc<Inner>,
    handle: epoch::Reader<Tables>,
    hits: Arc<CachePadded<AtomicU64>>,
}

impl fmt::Debug for BlockReader {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("BlockReader").finish_non_exhaustive()
    }
}

impl BlockReader {
    fn new(inner: Arc<Inner>) -> Self {
        let hits = Arc::new(CachePadded(AtomicU64::new(0)));
        {
            let mut r = lock(&inner.readers);
            // Fold the counters of dropped readers so the registry stays as small as the live set.
            let mut retired = 0u64;
            r.live.retain(|c| {
                if Arc::strong_count(c) == 1 {
                    retired = retired.wrapping_add(c.load(Ordering::Relaxed));
                    false
                } else {
                    true
                }
            });
            r.retired_hits = r.retired_hits.wrapping_add(retired);
            r.live.push(Arc::clone(&hits));
        }
        let handle = epoch::Reader::new(&inner.shared);
        BlockReader {
            inner,
            handle,
            hits,
        }
    }

    /// The most specific live entry covering `ip` at `now_ms`, if any, proven or not.
    ///
    /// Empty map: one atomic load. Hosts only: one hash probe. Allocates nothing, takes no lock.
    #[inline]
    pub fn lookup(&self, ip: IpAddr, now_ms: u64) -> Option<BlockHit> {
        if !self.inner.nonempty.load(Ordering::Acquire) {
            return None;
        }
        let hit = self.handle.read(|t| {
            t.map
                .matches(ip)
                .find(|(_, s)| s.expires_ms > now_ms)
                .map(|(net, s)| s.hit(net))
        });
        if hit.is_some() {
            bump_owned(&self.hits, 1);
        }
        hit
    }

    /// What applies to `traffic` from `ip` at `now_ms`: the most specific proven entry that
    /// stops it, else (UDP DNS) the most specific suspect entry, else nothing.
    ///
    /// Empty map: one atomic load. Hosts only: one hash probe. Allocates nothing, takes no lock.
    #[inline]
    pub fn check(&self, ip: IpAddr, now_ms: u64, traffic: Traffic) -> Check {
        if !self.inner.nonempty.load(Ordering::Acquire) {
            return Check::Clear;
        }
        let found = self.handle.read(|t| {
            let mut suspect = None;
            for (net, slot) in t.map.matches(ip) {
                if slot.expires_ms <= now_ms {
                    continue;
                }
                let proven = slot.evidence.is_proven();
                match traffic {
                    Traffic::DnsUdp if proven => return Check::Blocked(slot.hit(net)),
                    Traffic::DnsUdp => {
                        // Every suspicion of the address's prefixes at once: one of a
                        // tenant's zones never hides another tenant's, nor one of every zone.
                        let h = slot.hit(net);
                        suspect = Some(match suspect.take() {
                            None => h,
                            Some(prev) => merged_suspects(prev, h),
                        });
                    }
                    Traffic::Stream if proven && slot.scope == Scope::All => {
                        return Check::Blocked(slot.hit(net));
                    }
                    Traffic::Stream => {}
                }
            }
            suspect.map_or(Check::Clear, Check::Suspect)
        });
        if matches!(found, Check::Blocked(_)) {
            bump_owned(&self.hits, 1);
        }
        found
    }

    /// True when a proven entry stops `traffic` from `ip` at `now_ms`.
    #[inline]
    pub fn is_blocked(&self, ip: IpAddr, now_ms: u64, traffic: Traffic) -> bool {
        matches!(self.check(ip, now_ms, traffic), Check::Blocked(_))
    }

    /// True when the map holds nothing (one atomic load).
    #[inline]
    pub fn is_empty(&self) -> bool {
        !self.inner.nonempty.load(Ordering::Acquire)
    }
}

impl Clone for BlockReader {
    fn clone(&self) -> Self {
        BlockReader::new(Arc::clone(&self.inner))
    }
}

// ---------------------------------------------------------------------------------------------
// Change feed.

struct SubQueue {
    items: VecDeque<Change>,
    /// The queue overflowed: the next poll is a resync.
    lagging: bool,
    /// Subscribed to a non-empty map: the first poll is a resync.
    initial: bool,
}

impl SubQueue {
    fn ready(&self) -> bool {
        self.lagging || self.initial || !self.items.is_empty()
    }
}

struct SubShared {
    name: String,
    capacity: usize,
    q: Mutex<SubQueue>,
    cv: Condvar,
    notify: tokio::sync::Notify,
    delivered: AtomicU64,
    lagged: AtomicU64,
    overflows: AtomicU64,
    resyncs: AtomicU64,
}

impl SubShared {
    fn deliver(&self, changes: &[Change]) {
        let n = changes.len();
        {
            let mut q = lock(&self.q);
            if q.lagging || q.initial {
                // A snapshot is due anyway; it will carry these changes.
                if q.lagging {
                    self.lagged.fetch_add(n as u64, Ordering::Relaxed);
                }
            } else if q.items.len() + n > self.capacity {
                let dropped = q.items.len() + n;
                q.items = VecDeque::new();
                q.lagging = true;
                self.lagged.fetch_add(dropped as u64, Ordering::Relaxed);
                self.overflows.fetch_add(1, Ordering::Relaxed);
                tracing::warn!(subscriber = %self.name, dropped, "block feed overflow; resync follows");
            } else {
                q.items.extend(changes.iter().cloned());
            }
        }
        self.cv.notify_all();
        self.notify.notify_one();
    }

    fn stats(&self) -> SubscriberStats {
        SubscriberStats {
            name: self.name.clone(),
            queued: lock(&self.q).items.len(),
            delivered: self.delivered.load(Ordering::Relaxed),
            lagged: self.lagged.load(Ordering::Relaxed),
            overflows: self.overflows.load(Ordering::Relaxed),
            resyncs: self.resyncs.load(Ordering::Relaxed),
        }
    }
}

/// A subscriber's end of the change feed; dropping it unsubscribes.
pub struct Subscription {
    inner: Arc<Inner>,
    shared: Arc<SubShared>,
}

impl fmt::Debug for Subscription {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Subscription")
            .field("name", &self.shared.name)
            .finish_non_exhaustive()
    }
}

impl Subscription {
    /// The never-block set of the map's policy now (a new `Arc` whenever it changes).
    pub fn never_block(&self) -> Arc<crate::never_block::NeverBlock> {
        lock(&self.inner.writer).policy.never_block.clone()
    }

    /// The name given to `subscribe`.
    pub fn name(&self) -> &str {
        &self.shared.name
    }

    /// Takes up to `max` queued changes, or the resync snapshot when one is due; `None` when idle.
    pub fn poll(&mut self, max: usize) -> Option<Delivery> {
        {
            let mut q = lock(&self.shared.q);
            if !q.lagging && !q.initial {
                if q.items.is_empty() {
                    return None;
                }
                let n = max.max(1).min(q.items.len());
                let batch: Vec<Change> = q.items.drain(..n).collect();
                self.shared.delivered.fetch_add(n as u64, Ordering::Relaxed);
                return Some(Delivery::Changes(batch));
            }
        }
        // Snapshot and queue reset under the writer lock, so that every change after the
        // snapshot lands in the (now empty) queue and none before it does.
        let w = lock(&self.inner.writer);
        let mut q = lock(&self.shared.q);
        let snapshot = w.snapshot();
        q.items.clear();
        if q.lagging {
            self.shared.resyncs.fetch_add(1, Ordering::Relaxed);
        }
        q.lagging = false;
        q.initial = false;
        Some(Delivery::Resync(snapshot))
    }

    /// Makes the next poll return a full snapshot (a mirror whose target was replaced).
    pub fn request_resync(&mut self) {
        lock(&self.shared.q).initial = true;
        self.shared.cv.notify_all();
        self.shared.notify.notify_one();
    }

    /// True when a poll would return something.
    pub fn is_ready(&self) -> bool {
        lock(&self.shared.q).ready()
    }

    /// Waits (async) until a poll would return something.
    pub async fn changed(&mut self) {
        loop {
            if self.is_ready() {
                return;
            }
            self.shared.notify.notified().await;
        }
    }

    /// Blocks the thread until a poll would return something or `timeout` passes; true when ready.
    pub fn wait_timeout(&mut self, timeout: Duration) -> bool {
        let q = lock(&self.shared.q);
        let (q, _) = self
            .shared
            .cv
            .wait_timeout_while(q, timeout, |q| !q.ready())
            .unwrap_or_else(|e| e.into_inner());
        q.ready()
    }

    /// This subscriber's counters.
    pub fn stats(&self) -> SubscriberStats {
        self.shared.stats()
    }
}

impl Drop for Subscription {
    fn drop(&mut self) {
        let mut w = lock(&self.inner.writer);
        w.subs.retain(|s| !Arc::ptr_eq(s, &self.shared));
    }
}

/// The block map's counters, named `palisade_blockmap_*` in both daemons.
impl crate::metrics::Source for BlockMap {
    fn collect(&self, out: &mut crate::metrics::Samples) {
        let b = self.stats();
        let g = |out: &mut crate::metrics::Samples, what: &str, m, help, v: usize| {
            out.gauge(format!("blockmap.{what}"), m, "", help, v as u64)
        };
        g(
            out,
            "entries",
            "palisade_blockmap_entries",
            "Entries in the block map.",
            b.len,
        );
        g(
            out,
            "prefixes",
            "palisade_blockmap_prefixes",
            "Prefix entries in the block map.",
            b.prefixes,
        );
        g(
            out,
            "capacity",
            "palisade_blockmap_capacity",
            "Capacity of the block map.",
            b.capacity,
        );
        for (what, m, help, v) in [
            (
                "inserts",
                "palisade_blockmap_inserts_total",
                "Entries added to the block map.",
                b.inserts,
            ),
            (
                "refreshes",
                "palisade_blockmap_refreshes_total",
                "Entries given a later expiry or a new reason.",
                b.refreshes,
            ),
            (
                "removals",
                "palisade_blockmap_removals_total",
                "Entries removed.",
                b.removals,
            ),
            (
                "expirations",
                "palisade_blockmap_expirations_total",
                "Entries that expired.",
                b.expirations,
            ),
            (
                "evictions",
                "palisade_blockmap_evictions_total",
                "Entries evicted because the map was full.",
                b.evictions,
            ),
            (
                "suspects_refused",
                "palisade_blockmap_suspects_refused_total",
                "Suspects not taken: suspects held half the map, or only a proven entry could have made room.",
                b.suspects_refused,
            ),
            (
                "suspect_tenants_full",
                "palisade_blockmap_suspect_tenants_full_total",
                "Tenants whose rules' escalation did not make a suspect one in their zones: it named four tenants already.",
                b.suspect_tenants_full,
            ),
            (
                "no_room",
                "palisade_blockmap_no_room_total",
                "Daemons' or peers' entries not taken into a full map: only operators' entries could have made room (they are pushed out by operators' alone).",
                b.no_room,
            ),
            (
                "learned_full",
                "palisade_blockmap_never_block_learned_full_total",
                "Never-block addresses learned at run time (Redis masters and replicas Sentinel names) not kept: 64 were.",
                b.learned_full,
            ),
            (
                "hits",
                "palisade_blockmap_hits_total",
                "Lookups that hit a live entry.",
                b.hits,
            ),
        ] {
            out.counter(format!("blockmap.{what}"), m, "", help, v);
        }
        for (i, why) in crate::never_block::Refusal::ALL.iter().enumerate() {
            out.counter(
                format!("blockmap.refused.{why}"),
                "palisade_blockmap_refused_total",
                format!("cause=\"{why}\""),
                "Blocks refused by the policy: a never-block prefix, or one shorter than [block] min_prefix_v4/v6.",
                b.refused[i],
            );
        }
        for (i, ev) in Evidence::ALL.iter().enumerate() {
            out.gauge(
                format!("blockmap.evidence.{ev}"),
                "palisade_blockmap_entries_by_evidence",
                format!("evidence=\"{ev}\""),
                "Entries in the block map by evidence (udp, cross_site: suspects, never block).",
                b.by_evidence[i] as u64,
            );
        }
        for s in &b.subscribers {
            let l = format!("subscriber=\"{}\"", crate::metrics::label_value(&s.name));
            out.gauge(
                format!("blockmap.feed.{}.lag", s.name),
                "palisade_blockmap_feed_queued",
                l.clone(),
                "Changes waiting for a change-feed subscriber.",
                s.queued as u64,
            );
            out.counter(
                format!("blockmap.feed.{}.lost", s.name),
                "palisade_blockmap_feed_lost_total",
                l.clone(),
                "Changes a subscriber's full queue could not take (replaced by a resync).",
                s.lagged,
            );
            out.counter(
                format!("blockmap.feed.{}.resyncs", s.name),
                "palisade_blockmap_feed_resyncs_total",
                l,
                "Full resyncs of a change-feed subscriber that fell behind.",
                s.resyncs,
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::prefix::parse_net;

    fn net(s: &str) -> IpNet {
        parse_net(s).unwrap()
    }

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    fn entry(s: &str, exp: u64) -> BlockEntry {
        BlockEntry::new(net(s), exp, "test", Origin::Local, Evidence::Tcp)
    }

    fn small(capacity: usize, feed: usize) -> Arc<BlockMap> {
        BlockMap::new(BlockConfig {
            capacity,
            feed_capacity: feed,
            min_prefix_v4: 0,
            min_prefix_v6: 0,
            ..BlockConfig::default()
        })
    }

    #[test]
    fn handles_are_send() {
        fn send<T: Send>() {}
        fn send_sync<T: Send + Sync>() {}
        send::<BlockReader>();
        send::<Subscription>();
        send_sync::<BlockMap>();
    }

    #[test]
    fn reason_is_cut_at_char_boundary() {
        let long = "é".repeat(30);
        let r = Reason::new(&long);
        assert!(r.as_str().len() <= REASON_MAX);
        assert_eq!(r.as_str().len() % 2, 0);
        assert_eq!(Reason::new("abc").as_str(), "abc");
        let e = entry("192.0.2.1", 5).with_node(&"n".repeat(100));
        assert_eq!(e.node.unwrap().len(), NODE_MAX);
    }

    #[test]
    fn a_tenants_suspect_stays_the_tenants_and_a_block_is_everyones() {
        let m = BlockMap::new(BlockConfig::default());
        let r = m.reader();
        let suspect = |at: &str| {
            let Check::Suspect(hit) = r.check(ip(at), 0, Traffic::DnsUdp) else {
                panic!("a suspect at {at}")
            };
            hit
        };
        let t5 = BlockEntry::new(net("192.0.2.0/24"), 1000, "r", Origin::Local, Evidence::Udp)
            .for_tenant(5);
        m.insert(t5.clone());
        let hit = suspect("192.0.2.1");
        assert_eq!((hit.tenants.ids(), hit.tenants.is_only()), (&[5][..], true));
        // Another tenant's rules too: a suspect in the two tenants' zones, never every zone
        // (forging against a tenant of one's own must not widen it).
        m.insert(t5.clone().for_tenant(7));
        let hit = suspect("192.0.2.1");
        assert_eq!(
            (hit.tenants.ids(), hit.tenants.is_only()),
            (&[5, 7][..], true)
        );
        // At most four tenants: a fifth and sixth add nothing, and widen nothing.
        for t in [8, 9, 10, 11] {
            m.insert(t5.clone().for_tenant(t));
        }
        let hit = suspect("192.0.2.1");
        assert_eq!(
            (hit.tenants.ids(), hit.tenants.is_only()),
            (&[5, 7, 8, 9][..], true)
        );
        assert_eq!(
            m.stats().suspect_tenants_full,
            2,
            "tenants 10 and 11, counted"
        );
        // A random-subdomain suspect (NXDOMAIN answers, every zone) of the same prefix: both
        // suspicions kept.
        let mut nx = BlockEntry::new(
            net("192.0.2.0/24"),
            2000,
            "nx",
            Origin::Local,
            Evidence::Udp,
        );
        nx.scope = Scope::Nxdomain;
        m.insert(nx.clone());
        let hit = suspect("192.0.2.1");
        assert_eq!(
            (hit.tenants.ids().len(), hit.tenants.is_only(), hit.scope),
            (4, false, Scope::Nxdomain)
        );
        // One prefix's suspicion never hides another's: a /32 of tenant 3 within the /24.
        m.insert(
            BlockEntry::new(net("192.0.2.9/32"), 1000, "r", Origin::Local, Evidence::Udp)
                .for_tenant(3),
        );
        let hit = suspect("192.0.2.9");
        assert!(
            hit.tenants.contains(3) && hit.tenants.contains(5),
            "{hit:?}"
        );
        assert_eq!((hit.tenants.is_only(), hit.scope), (false, Scope::Nxdomain));
        // Proof makes a block of every zone, whatever tenant it names.
        let other = BlockEntry::new(
            net("198.51.100.0/24"),
            1000,
            "r",
            Origin::Local,
            Evidence::Tcp,
        )
        .for_tenant(5);
        assert!(other.tenants.is_empty());
        let mut forced = other.clone();
        forced.tenants = TenantSet::only(5);
        m.insert(forced);
        let Check::Blocked(hit) = r.check(ip("198.51.100.1"), 0, Traffic::DnsUdp) else {
            panic!("a block")
        };
        assert!(hit.tenants.is_empty());
    }

    #[test]
    fn insert_lookup_expiry_semantics() {
        let m = small(100, 100);
        let r = m.reader();
        assert!(r.is_empty());
        assert_eq!(r.lookup(ip("192.0.2.1"), 0), None);
        assert_eq!(m.insert(entry("192.0.2.1", 1000)), InsertOutcome::New);
        assert!(!r.is_empty());
        let hit = r.lookup(ip("192.0.2.1"), 999).unwrap();
        assert_eq!(hit.net, net("192.0.2.1/32"));
        assert_eq!(hit.reason.as_str(), "test");
        // At and after expiry: not a hit, though still stored.
        assert_eq!(r.lookup(ip("192.0.2.1"), 1000), None);
        assert_eq!(m.len(), 1);
        assert_eq!(r.lookup(ip("192.0.2.2"), 0), None);
        assert_eq!(m.stats().hits, 1);
    }

    #[test]
    fn refresh_rules() {
        let m = small(100, 100);
        m.insert(entry("192.0.2.1", 1000));
        assert_eq!(m.insert(entry("192.0.2.1", 500)), InsertOutcome::Unchanged);
        assert_eq!(m.insert(entry("192.0.2.1", 2000)), InsertOutcome::Refreshed);
        let mut e = entry("192.0.2.1", 10);
        e.reason = Reason::new("other");
        assert_eq!(m.insert(e), InsertOutcome::Refreshed);
        let got = m.get(net("192.0.2.1/32")).unwrap();
        assert_eq!(got.expires_ms, 2000, "expiry never shrinks");
        assert_eq!(got.reason.as_str(), "other");
        let s = m.stats();
        assert_eq!((s.inserts, s.refreshes, s.unchanged), (1, 2, 1));
    }

    #[test]
    fn prefixes_match_and_expired_specific_falls_back() {
        let m = small(100, 100);
        m.insert(entry("10.0.0.0/8", 5000));
        m.insert(entry("10.1.0.0/16", 100));
        let r = m.reader();
        assert_eq!(
            r.lookup(ip("10.1.2.3"), 50).unwrap().net,
            net("10.1.0.0/16")
        );
        assert_eq!(
            r.lookup(ip("10.1.2.3"), 200).unwrap().net,
            net("10.0.0.0/8")
        );
        assert_eq!(
            r.lookup(ip("::ffff:10.9.9.9"), 200).unwrap().net,
            net("10.0.0.0/8")
        );
        assert_eq!(m.stats().prefixes, 2);
        m.remove(net("10.1.0.0/16"), RemoveCause::Operator);
        m.insert(entry("10.1.2.3", 100));
        assert_eq!((m.stats().prefixes, m.stats().len), (1, 2));
    }

    /// A member's entry stays its own only while no one else added the prefix: added on top
    /// of root's, an automatic block or another member's, it is no one's to lift but root's.
    #[test]
    fn a_member_takes_no_one_elses_block_over() {
        let m = small(100, 1000);
        let op = |s: &str| BlockEntry::new(net(s), 500, "op", Origin::Operator, Evidence::Operator);
        m.insert(op("192.0.2.1").by_member(7));
        m.insert(op("192.0.2.1").by_member(7));
        assert_eq!(m.get(net("192.0.2.1")).unwrap().by, Some(7));
        m.insert(op("192.0.2.2"));
        m.insert(op("192.0.2.2").by_member(7));
        m.insert(op("192.0.2.3").by_member(7));
        m.insert(op("192.0.2.3").by_member(8));
        m.insert(BlockEntry::new(
            net("192.0.2.4"),
            500,
            "udp",
            Origin::Local,
            Evidence::Tcp,
        ));
        m.insert(op("192.0.2.4").by_member(7));
        for (n, by, origin) in [
            ("192.0.2.2", None, Origin::Operator),
            ("192.0.2.3", Some(7), Origin::Operator),
            ("192.0.2.4", None, Origin::Local),
        ] {
            let e = m.get(net(n)).unwrap();
            assert_eq!((e.by, e.origin), (by, origin), "{n}");
            assert_eq!(e.expires_ms, 500, "{n}");
        }
        // Root's on top of a member's: root's.
        m.insert(op("192.0.2.1"));
        assert_eq!(m.get(net("192.0.2.1")).unwrap().by, None);
        // An escalation or a peer's block on a member's short one: theirs, and the longer.
        m.insert(
            BlockEntry::new(
                net("192.0.2.5"),
                100,
                "op",
                Origin::Operator,
                Evidence::Operator,
            )
            .by_member(7),
        );
        m.insert(BlockEntry::new(
            net("192.0.2.5"),
            900,
            "udp",
            Origin::Peer,
            Evidence::Tcp,
        ));
        let e = m.get(net("192.0.2.5")).unwrap();
        assert_eq!((e.by, e.origin, e.expires_ms), (None, Origin::Peer, 900));
        // A member's block over a suspect blocks (it replaced the suspicion, its own);
        // over a DNS-only block it stops everything, the block staying theirs.
        m.insert(BlockEntry::new(
            net("192.0.2.7"),
            900,
            "udp",
            Origin::Local,
            Evidence::Udp,
        ));
        m.insert(op("192.0.2.7").by_member(7));
        let e = m.get(net("192.0.2.7")).unwrap();
        assert!(e.is_proven());
        assert_eq!((e.by, e.scope), (Some(7), Scope::All));
        m.insert(BlockEntry::new(
            net("192.0.2.8"),
            900,
            "dns",
            Origin::Local,
            Evidence::Cookie,
        ));
        m.insert(op("192.0.2.8").by_member(7));
        let e = m.get(net("192.0.2.8")).unwrap();
        assert_eq!((e.by, e.origin, e.scope), (None, Origin::Local, Scope::All));
        // A member's block is lifted by another node's operator; root's is not.
        m.insert(
            BlockEntry::new(
                net("192.0.2.6"),
                900,
                "op",
                Origin::Operator,
                Evidence::Operator,
            )
            .by_member(7),
        );
        assert!(m.remove_from_peer(net("192.0.2.6"), "other", true));
        assert!(!m.remove_from_peer(net("192.0.2.1"), "other", true));
    }

    #[test]
    fn remove_and_expire_budget() {
        let m = small(100, 1000);
        for i in 0..10u64 {
            m.insert(entry(&format!("192.0.2.{i}"), 100 + i));
        }
        assert!(m.remove(net("192.0.2.0"), RemoveCause::Operator));
        assert!(!m.remove(net("192.0.2.0"), RemoveCause::Operator));
        assert_eq!(m.expire(104, 2), 2);
        assert_eq!(m.expire(104, 100), 2);
        assert_eq!(m.expire(104, 100), 0);
        assert_eq!(m.len(), 5);
        let s = m.stats();
        assert_eq!((s.removals, s.expirations), (1, 4));
        // The survivors are the ones that expire latest.
        let mut left: Vec<u64> = m.entries().iter().map(|e| e.expires_ms).collect();
        left.sort();
        assert_eq!(left, vec![105, 106, 107, 108, 109]);
    }

    #[test]
    fn only_an_operators_entry_pushes_out_an_operators() {
        let op = |s: &str, exp: u64| {
            BlockEntry::new(net(s), exp, "op", Origin::Operator, Evidence::Operator)
        };
        let m = small(200, 100_000);
        // The operator's blocks are the closest to expiry.
        for i in 0..100u64 {
            m.insert(op(&format!("198.51.100.{i}"), 100 + i));
        }
        for i in 0..100u64 {
            m.insert(entry(&format!("192.0.2.{i}"), 10_000 + i));
        }
        // A flood of escalations pushes out escalations alone.
        for i in 0..1000u64 {
            let o = m.insert(entry(&format!("10.0.{}.{}", i / 256, i % 256), 20_000 + i));
            assert!(
                matches!(o, InsertOutcome::Evicted(n) if !n.to_string().starts_with("198.51.100.")),
                "{o:?}"
            );
        }
        let ops = m
            .entries()
            .iter()
            .filter(|e| e.origin == Origin::Operator)
            .count();
        assert_eq!(ops, 100);
        // Peers' entries likewise.
        let peer = BlockEntry::new(
            net("203.0.113.1"),
            30_000,
            "peer",
            Origin::Peer,
            Evidence::Tcp,
        );
        assert!(matches!(m.insert(peer), InsertOutcome::Evicted(_)));
        // A map of operators' entries alone takes no other entry; an operator's goes in.
        let full = small(50, 100_000);
        for i in 0..50u64 {
            full.insert(op(&format!("198.51.100.{i}"), 100 + i));
        }
        assert_eq!(
            full.insert(entry("192.0.2.1", 10_000)),
            InsertOutcome::NoRoom
        );
        assert_eq!(full.stats().no_room, 1);
        assert_eq!(
            full.insert(op("198.51.100.200", 10_000)),
            InsertOutcome::Evicted(net("198.51.100.0/32"))
        );
    }

    #[test]
    fn capacity_evicts_closest_to_expiry() {
        let m = small(3, 100);
        let mut sub = m.subscribe("t");
        m.insert(entry("192.0.2.1", 300));
        m.insert(entry("192.0.2.2", 100));
        m.insert(entry("192.0.2.3", 200));
        assert_eq!(
            m.insert(entry("192.0.2.4", 50)),
            InsertOutcome::Evicted(net("192.0.2.2/32"))
        );
        assert_eq!(m.len(), 3);
        assert_eq!(m.stats().evictions, 1);
        let Some(Delivery::Changes(ch)) = sub.poll(100) else {
            panic!("expected changes")
        };
        assert_eq!(ch.len(), 5);
        assert_eq!(
            ch[3],
            Change::Remove {
                net: net("192.0.2.2/32"),
                cause: RemoveCause::Evicted
            }
        );
    }

    #[test]
    fn heap_stays_consistent_under_mixed_ops() {
        use rand::{Rng, SeedableRng};
        let mut rng = rand::rngs::StdRng::seed_from_u64(7);
        let m = small(50, 10);
        for _ in 0..5000 {
            let a: u8 = rng.random_range(0..80);
            let exp: u64 = rng.random_range(0..1000);
            match rng.random_range(0..4) {
                0 => {
                    m.remove(net(&format!("10.0.0.{a}")), RemoveCause::Local);
                }
                1 => {
                    m.expire(rng.random_range(0..1000), 3);
                }
                _ => {
                    m.insert(entry(&format!("10.0.0.{a}"), exp));
                }
            }
            let w = lock(&m.inner.writer);
            for (pos, &id) in w.heap.iter().enumerate() {
                assert_eq!(w.slots[id].heap_pos, pos);
                if pos > 0 {
                    assert!(w.exp(w.heap[(pos - 1) / 2]) <= w.exp(id));
                }
            }
            assert_eq!(w.heap.len(), w.by_net.len());
        }
    }

    #[test]
    fn feed_delivers_in_order_and_resyncs_after_lag() {
        let m = small(1000, 4);
        let mut sub = m.subscribe("x");
        assert!(sub.poll(10).is_none());
        m.insert(entry("192.0.2.1", 100));
        m.insert(entry("192.0.2.2", 100));
        assert!(sub.wait_timeout(Duration::from_millis(1)));
        assert_eq!(
            sub.poll(1),
            Some(Delivery::Changes(vec![Change::Upsert(entry(
                "192.0.2.1/32",
                100
            ))]))
        );
        for i in 3..10 {
            m.insert(entry(&format!("192.0.2.{i}"), 100));
        }
        let Some(Delivery::Resync(all)) = sub.poll(10) else {
            panic!("expected resync")
        };
        assert_eq!(all.len(), 9);
        assert!(sub.poll(10).is_none());
        m.remove(net("192.0.2.1"), RemoveCause::Operator);
        assert_eq!(
            sub.poll(10),
            Some(Delivery::Changes(vec![Change::Remove {
                net: net("192.0.2.1/32"),
                cause: RemoveCause::Operator
            }]))
        );
        let st = sub.stats();
        assert_eq!((st.overflows, st.resyncs), (1, 1));
        assert!(st.lagged >= 4);
    }

    #[test]
    fn late_subscriber_starts_with_snapshot_and_drop_unsubscribes() {
        let m = small(1000, 100);
        m.insert(entry("192.0.2.1", 100));
        let mut sub = m.subscribe("late");
        assert_eq!(
            sub.poll(10),
            Some(Delivery::Resync(vec![entry("192.0.2.1/32", 100)]))
        );
        assert_eq!(sub.stats().resyncs, 0);
        assert_eq!(m.stats().subscribers.len(), 1);
        drop(sub);
        assert!(m.stats().subscribers.is_empty());
    }

    #[test]
    fn peer_origin_is_visible_to_subscribers() {
        let m = small(1000, 100);
        let mut sub = m.subscribe("redis");
        let e = BlockEntry::with_ttl(
            net("2001:db8::/48"),
            Duration::from_secs(60),
            1_000,
            "peer says",
            Origin::Peer,
            Evidence::Tcp,
        )
        .with_node("node-b");
        assert_eq!(e.ttl_ms(31_000), 30_000);
        m.insert(e);
        let Some(Delivery::Changes(ch)) = sub.poll(10) else {
            panic!()
        };
        let Change::Upsert(got) = &ch[0] else {
            panic!()
        };
        assert_eq!(got.origin, Origin::Peer);
        assert_eq!(got.node.as_deref(), Some("node-b"));
        let json = serde_json::to_string(&ch[0]).unwrap();
        let back: Change = serde_json::from_str(&json).unwrap();
        assert_eq!(back, ch[0]);
    }

    #[test]
    fn suspects_hold_half_the_map_at_most_and_never_evict_a_proven_entry() {
        let m = small(8, 100);
        let s = |i: u8, exp: u64| {
            BlockEntry::new(
                net(&format!("192.0.2.{i}")),
                exp,
                "s",
                Origin::Local,
                Evidence::Udp,
            )
        };
        // An operator's block closest to expiry, then suspects: at most four of eight.
        let op = BlockEntry::new(
            net("198.51.100.1"),
            10,
            "op",
            Origin::Operator,
            Evidence::Operator,
        );
        assert_eq!(m.insert(op), InsertOutcome::New);
        for i in 0..4 {
            assert_eq!(m.insert(s(i, 1000)), InsertOutcome::New);
        }
        assert_eq!(m.insert(s(9, 1000)), InsertOutcome::SuspectsFull);
        // Proven entries fill the rest; the map is full.
        for i in 0..3 {
            let e = BlockEntry::new(
                net(&format!("203.0.113.{i}")),
                2000,
                "t",
                Origin::Local,
                Evidence::Tcp,
            );
            assert_eq!(m.insert(e), InsertOutcome::New);
        }
        // Below their share, in a full map, a suspect never pushes the operator's block
        // (closest to expiry) out.
        m.remove(net("192.0.2.0"), RemoveCause::Operator);
        let e = BlockEntry::new(net("203.0.113.7"), 2000, "t", Origin::Local, Evidence::Tcp);
        assert_eq!(m.insert(e), InsertOutcome::New);
        assert_eq!(m.insert(s(20, 5)), InsertOutcome::SuspectsFull);
        assert!(m.get(net("198.51.100.1")).is_some());
        assert_eq!(m.stats().suspects_refused, 2);
        // A proven entry may evict what is closest to expiry.
        let e = BlockEntry::new(net("203.0.113.9"), 3000, "t", Origin::Local, Evidence::Tcp);
        assert!(matches!(m.insert(e), InsertOutcome::Evicted(_)));
    }

    #[test]
    fn suspects_never_block_and_never_weaken_a_block() {
        let m = small(100, 100);
        let r = m.reader();
        let suspect = BlockEntry::new(net("192.0.2.1"), 1000, "s", Origin::Local, Evidence::Udp);
        assert_eq!(suspect.scope, Scope::Dns);
        m.insert(suspect.clone());
        let ip1 = ip("192.0.2.1");
        assert!(matches!(
            r.check(ip1, 0, Traffic::DnsUdp),
            Check::Suspect(_)
        ));
        assert_eq!(r.check(ip1, 0, Traffic::Stream), Check::Clear);
        assert!(!r.is_blocked(ip1, 0, Traffic::DnsUdp));
        // A suspect asked for with scope All is still DNS only.
        m.insert(suspect.clone().with_scope(Scope::All));
        assert_eq!(m.get(net("192.0.2.1")).unwrap().scope, Scope::Dns);
        // A proof replaces the suspicion; a later suspicion leaves the block alone.
        let proven = BlockEntry::new(net("192.0.2.1"), 500, "c", Origin::Local, Evidence::Cookie);
        assert_eq!(m.insert(proven), InsertOutcome::Refreshed);
        assert!(r.is_blocked(ip1, 0, Traffic::DnsUdp));
        assert!(
            !r.is_blocked(ip1, 0, Traffic::Stream),
            "a cookie block is DNS only"
        );
        assert_eq!(m.insert(suspect), InsertOutcome::Unchanged);
        assert_eq!(m.get(net("192.0.2.1")).unwrap().evidence, Evidence::Cookie);
        // The proof's own expiry, shorter than the suspicion's, holds.
        assert_eq!(m.get(net("192.0.2.1")).unwrap().expires_ms, 500);
        // A TCP-proven /24 stops every stream from it; a suspect /32 inside does not hide it.
        m.insert(BlockEntry::new(
            net("198.51.100.0/24"),
            1000,
            "t",
            Origin::Local,
            Evidence::Tcp,
        ));
        m.insert(BlockEntry::new(
            net("198.51.100.7"),
            1000,
            "s",
            Origin::Local,
            Evidence::Udp,
        ));
        let ip7 = ip("198.51.100.7");
        let Check::Blocked(h) = r.check(ip7, 0, Traffic::DnsUdp) else {
            panic!("the /24 blocks")
        };
        assert_eq!(h.net, net("198.51.100.0/24"));
        assert!(r.is_blocked(ip7, 0, Traffic::Stream));
        // A general suspicion beats one of NXDOMAIN answers only.
        let nx = BlockEntry::new(
            net("203.0.113.0/24"),
            1000,
            "n",
            Origin::Local,
            Evidence::Udp,
        )
        .with_scope(Scope::Nxdomain);
        m.insert(nx);
        let Check::Suspect(h) = r.check(ip("203.0.113.9"), 0, Traffic::DnsUdp) else {
            panic!()
        };
        assert_eq!(h.scope, Scope::Nxdomain);
        m.insert(BlockEntry::new(
            net("203.0.113.9"),
            1000,
            "g",
            Origin::Local,
            Evidence::Udp,
        ));
        let Check::Suspect(h) = r.check(ip("203.0.113.9"), 0, Traffic::DnsUdp) else {
            panic!()
        };
        assert_eq!(h.scope, Scope::Dns);
        let s = m.stats();
        assert_eq!(s.by_evidence[0], 3, "three suspects");
        assert_eq!(s.by_evidence[1] + s.by_evidence[2], 2);
    }

    #[test]
    fn writers_never_change_a_higher_writers_entry() {
        let m = small(100, 100);
        let n = net("192.0.2.9");
        let op = BlockEntry::new(n, 1000, "hand", Origin::Operator, Evidence::Operator);
        m.insert(op);
        let peer = BlockEntry::new(n, 9000, "intruder", Origin::Peer, Evidence::Tcp).with_node("x");
        assert_eq!(m.insert(peer.clone()), InsertOutcome::Unchanged);
        let local = BlockEntry::new(n, 9000, "esc", Origin::Local, Evidence::Tcp);
        assert_eq!(m.insert(local.clone()), InsertOutcome::Unchanged);
        let got = m.get(n).unwrap();
        assert_eq!(
            (got.origin, got.reason.as_str(), got.expires_ms),
            (Origin::Operator, "hand", 1000)
        );
        // A peer's removal never lifts an operator entry, even an operator's removal from afar.
        assert!(!m.remove_from_peer(n, "x", false));
        assert!(!m.remove_from_peer(n, "x", true));
        assert!(m.get(n).is_some());
        // A local entry: a peer's add leaves it, an operator's removal from afar lifts it.
        let n2 = net("192.0.2.10");
        m.insert(BlockEntry {
            net: n2,
            ..local.clone()
        });
        assert_eq!(
            m.insert(BlockEntry {
                net: n2,
                ..peer.clone()
            }),
            InsertOutcome::Unchanged
        );
        assert!(!m.remove_from_peer(n2, "x", false));
        assert!(m.remove_from_peer(n2, "x", true));
        // A peer entry: lifted by its own node, not by another's plain removal.
        let n3 = net("192.0.2.11");
        m.insert(BlockEntry {
            net: n3,
            ..peer.clone()
        });
        assert!(!m.remove_from_peer(n3, "y", false));
        assert!(m.remove_from_peer(n3, "x", false));
        // A local writer takes over a peer's entry (so that it republishes it) and keeps the later expiry.
        let n4 = net("192.0.2.12");
        m.insert(BlockEntry { net: n4, ..peer });
        m.insert(BlockEntry {
            net: n4,
            expires_ms: 10,
            ..local
        });
        let got = m.get(n4).unwrap();
        assert_eq!((got.origin, got.expires_ms), (Origin::Local, 9000));
    }

    #[test]
    fn a_host_block_takes_an_ipv6_sources_slash_64_or_its_address_where_the_policy_says_so() {
        use crate::never_block::{BlockPolicy, NeverBlock};
        let m = BlockMap::new(BlockConfig::default());
        let mk = |n: IpNet| BlockEntry::new(n, 1000, "test", Origin::Local, Evidence::Tcp);
        assert!(matches!(
            m.insert_host(ip("192.0.2.7"), mk),
            InsertOutcome::New
        ));
        assert!(m.reader().lookup(ip("192.0.2.7"), 0).is_some());
        assert!(m.reader().lookup(ip("192.0.2.8"), 0).is_none());
        assert!(matches!(
            m.insert_host(ip("2001:db8:0:1::7"), mk),
            InsertOutcome::New
        ));
        assert!(
            m.reader().lookup(ip("2001:db8:0:1:ffff::1"), 0).is_some(),
            "the /64"
        );
        // A never-block address inside the /64: the address alone is blocked.
        let mut nb = NeverBlock::new();
        nb.push(net("2001:db8:0:2::53"), "a transfer peer");
        m.set_policy(BlockPolicy {
            never_block: Arc::new(nb),
            ..m.policy()
        });
        assert!(matches!(
            m.insert_host(ip("2001:db8:0:2::7"), mk),
            InsertOutcome::New
        ));
        assert!(m.reader().lookup(ip("2001:db8:0:2::7"), 0).is_some());
        assert!(m.reader().lookup(ip("2001:db8:0:2::53"), 0).is_none());
        assert!(m.reader().lookup(ip("2001:db8:0:2::8"), 0).is_none());
        assert!(matches!(
            m.insert_host(ip("2001:db8:0:2::53"), mk),
            InsertOutcome::Refused(_)
        ));
    }

    #[test]
    fn the_policy_refuses_never_block_and_short_prefixes_unless_forced() {
        use crate::never_block::{BlockPolicy, NeverBlock, Refusal};
        let m = BlockMap::new(BlockConfig::default());
        m.insert(entry("192.0.2.0/24", 1000));
        let mut nb = NeverBlock::new();
        nb.push(net("192.0.2.53"), "redis server");
        // The new policy lifts the automatic entry that covers the protected address.
        let removed = m.set_policy(BlockPolicy {
            never_block: Arc::new(nb),
            ..m.policy()
        });
        assert_eq!(removed, 1);
        for (what, why) in [
            ("192.0.2.53", Refusal::NeverBlock),
            ("192.0.0.0/22", Refusal::NeverBlock),
            ("10.0.0.0/8", Refusal::ShortPrefix),
            ("0.0.0.0/0", Refusal::ShortPrefix),
            ("2001:db8::/16", Refusal::ShortPrefix),
        ] {
            assert_eq!(
                m.insert(entry(what, 1000)),
                InsertOutcome::Refused(why),
                "{what}"
            );
            let op = BlockEntry::new(net(what), 1000, "op", Origin::Operator, Evidence::Operator);
            assert_eq!(m.insert(op.clone()), InsertOutcome::Refused(why), "{what}");
            assert!(matches!(m.insert_forced(op), InsertOutcome::New));
        }
        assert_eq!(m.stats().refused, [4, 6]);
        assert_eq!(m.len(), 5);
        assert!(matches!(
            m.insert(entry("192.0.2.54", 1000)),
            InsertOutcome::New
        ));
    }

    /// A peer learned at run time (the Redis master Sentinel names) is never blocked from
    /// then on: what covers it is lifted, a later insert refused, and a policy installed
    /// afterwards (a reload) keeps it.
    #[test]
    fn an_address_learned_at_run_time_stays_never_block() {
        use crate::never_block::{NeverBlock, Refusal};
        let m = BlockMap::new(BlockConfig::default());
        m.insert(entry("192.0.2.0/24", 1000));
        let ip: IpAddr = "192.0.2.7".parse().unwrap();
        assert!(m.protect(ip, "redis master (named by sentinel)"));
        assert!(!m.protect(ip, "redis master (named by sentinel)"), "once");
        assert_eq!(m.len(), 0, "the block covering it lifted");
        assert_eq!(
            m.insert(entry("192.0.2.7", 1000)),
            InsertOutcome::Refused(Refusal::NeverBlock)
        );
        m.install_policy(&BlockConfig::default(), NeverBlock::new());
        assert_eq!(
            m.insert(entry("192.0.2.0/24", 1000)),
            InsertOutcome::Refused(Refusal::NeverBlock)
        );
        assert!(
            m.render_policy()
                .contains("redis master (named by sentinel)")
        );
        for i in 0..MAX_LEARNED as u32 {
            m.protect(IpAddr::from(std::net::Ipv4Addr::from(0x0a00_0000 + i)), "x");
        }
        assert!(m.stats().learned_full >= 1);
    }

    #[test]
    fn changed_wakes_async_waiter() {
        let m = small(1000, 100);
        let mut sub = m.subscribe("async");
        let rt = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        let m2 = Arc::clone(&m);
        let t = std::thread::spawn(move || m2.insert(entry("192.0.2.9", 100)));
        rt.block_on(sub.changed());
        t.join().unwrap();
        assert!(matches!(sub.poll(10), Some(Delivery::Changes(_))));
    }
}
