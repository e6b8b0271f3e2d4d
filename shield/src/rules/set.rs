//! The swappable rule set: the current [`Prepared`] rules behind an atomic pointer and the
//! state that outlives reloads ([`RuleState`]: rate-limit buckets, escalation counters, the
//! block map), with their counters.

use super::error::RulesError;
use super::prepared::Prepared;
use super::tenants::{self, tenant_counts};
use super::{Now, Request, TenantId, Verdict};
use crate::block::BlockMap;
use crate::ratelimit::{RateLimiter, TableConfig, TableStats, WindowCounter};
use crate::util::StripedCounter;
use arc_swap::ArcSwap;
use serde::{Deserialize, Serialize};
use std::net::IpAddr;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

/// Sizes of the state that outlives reloads (`[rules.state]`-style config).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct StateConfig {
    /// Rate-limit buckets (keys: tenant, rule, source prefix).
    pub limiter: TableConfig,
    /// Escalation counters (keys: tenant, source prefix).
    pub counters: TableConfig,
}

/// Rate-limit buckets, escalation counters and the block map escalations go to.
pub struct RuleState {
    pub(super) limiter: RateLimiter,
    pub(super) counter: WindowCounter,
    pub(super) blocks: Option<Arc<BlockMap>>,
    pub(super) escalations: StripedCounter,
    pub(super) suspects: StripedCounter,
    pub(super) refused: StripedCounter,
    /// DNS: sources escalated for one tenant's zones, until when (keys: tenant, source
    /// prefix); `None` where escalations go into the block map for every service (HTTP).
    pub(super) tenant_scoped: Option<crate::ratelimit::UntilTable>,
    /// The requests are HTTP (http-front): `escalate`'s `http` key says where they go.
    pub(super) http: bool,
    /// Unproven escalations not made where escalations are the tenant's alone.
    pub(super) unproven_ignored: StripedCounter,
    /// Verdicts of relayed requests (a resolver's users'), never counted toward escalation.
    pub(super) relayed_ignored: StripedCounter,
    /// Requests past the index's stack bounds: their candidates gathered into a bitmap.
    pub(super) index_walks: StripedCounter,
    /// The sources held for a tenant alone, as `ctl block list` shows them and `block del`
    /// lifts them (the table above holds hashes only); the most recent [`HOLDS_MAX`].
    pub(super) holds: std::sync::Mutex<std::collections::VecDeque<TenantHold>>,
    /// Holds the list above let go of, full (they still hold, unlisted, until they lapse).
    pub(super) holds_unlisted: std::sync::atomic::AtomicU64,
    /// The next tenant hold generation ([`RuleSet::store`]).
    hold_gens: std::sync::atomic::AtomicU64,
    /// Bumped at each new hold: a tunnel asks whether its source is held only when it moved.
    pub(super) hold_epoch: std::sync::atomic::AtomicU64,
}

/// Most sources held for a tenant alone that `ctl block list` lists.
pub const HOLDS_MAX: usize = 4096;

/// A source held for one tenant's zones (dnsd's `escalate` with `dns = "tenant"`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TenantHold {
    /// The tenant whose zones answer it nothing more.
    pub tenant: TenantId,
    /// The source's prefix.
    pub net: ipnet::IpNet,
    /// Until when, in Unix seconds.
    pub until_s: u32,
    /// The escalation's reason.
    pub reason: String,
    /// Its tenant's hold generation (part of its key).
    generation: u64,
    key: crate::ratelimit::SourceKey,
}

impl RuleState {
    /// Notes that `key` is held for `tenant` (hold generation `generation`) until `until_s`
    /// (at `now_s`).
    #[allow(clippy::too_many_arguments)]
    pub(super) fn note_hold(
        &self,
        tenant: TenantId,
        generation: u64,
        key: crate::ratelimit::SourceKey,
        until_s: u32,
        reason: &str,
        now_s: u32,
    ) {
        // Constant work per escalation (a botnet escalates thousands a second): lapsed holds
        // go from the front, oldest first (a source held is not escalated again while it
        // is; one held anew after it lapsed is listed twice, the lapsed one never shown).
        let mut h = self.holds.lock().unwrap_or_else(|e| e.into_inner());
        while h.front().is_some_and(|x| x.until_s <= now_s) {
            h.pop_front();
        }
        if h.len() >= HOLDS_MAX {
            h.pop_front();
            self.holds_unlisted
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        }
        self.hold_epoch
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        h.push_back(TenantHold {
            tenant,
            generation,
            net: key.to_net(),
            until_s,
            reason: reason.to_string(),
            key,
        });
    }
}

impl RuleState {
    /// Gives each tenant of `new` its hold generation: `old`'s where its rules did not
    /// change, a new one where they did (or it is new).
    fn number_holds(&self, old: Option<&Prepared>, new: &mut Prepared) {
        let versions: Vec<(TenantId, u64)> = new
            .tenants
            .iter()
            .flatten()
            .map(|t| (t.id, new.tenant_version(t.id)))
            .collect();
        for (t, (id, version)) in new.tenants.iter_mut().flatten().zip(versions) {
            let kept = old
                .filter(|o| o.tenant_version(id) == version)
                .and_then(|o| o.tenants.get(id as usize)?.as_ref())
                .map(|o| o.hold_gen);
            t.hold_gen = kept.unwrap_or_else(|| {
                self.hold_gens
                    .fetch_add(1, std::sync::atomic::Ordering::Relaxed)
            });
        }
    }
}

impl std::fmt::Debug for RuleState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RuleState")
            .field("limiter", &self.limiter)
            .field("counter", &self.counter)
            .finish_non_exhaustive()
    }
}

impl RuleState {
    /// State sized by `cfg`; escalations go into `blocks` (with `None`, thresholds count but block nothing).
    pub fn new(cfg: &StateConfig, blocks: Option<Arc<BlockMap>>) -> Self {
        RuleState {
            limiter: RateLimiter::new(&cfg.limiter),
            counter: WindowCounter::new(&cfg.counters),
            blocks,
            escalations: StripedCounter::default(),
            suspects: StripedCounter::default(),
            refused: StripedCounter::default(),
            tenant_scoped: None,
            http: false,
            unproven_ignored: StripedCounter::default(),
            relayed_ignored: StripedCounter::default(),
            index_walks: StripedCounter::default(),
            holds: Default::default(),
            holds_unlisted: Default::default(),
            hold_gens: std::sync::atomic::AtomicU64::new(1),
            hold_epoch: Default::default(),
        }
    }

    /// The same state, whose escalations hold for the escalating tenant alone (dnsd): a
    /// proven source over a tenant's threshold is held for that tenant's zones (its queries
    /// as the rules say, over UDP whole only for names that exist, or nothing with
    /// `dns_hold = "refuse"`),
    /// and every other tenant's answers as before; forged (unproven) packets escalate
    /// nothing, left to RRL. A tenant's `escalate = { dns = "block_map" }` keeps the block
    /// map (every zone, XDP, the fleet).
    pub fn scoped_to_tenants(mut self, cfg: &StateConfig) -> Self {
        self.tenant_scoped = Some(crate::ratelimit::UntilTable::new(&cfg.counters));
        self
    }

    /// The same for HTTP requests (http-front): a source over a tenant's threshold gets
    /// nothing more from that tenant's sites, every other tenant's and every other service
    /// of the node as before — a page elsewhere can make its visitors' browsers send what a
    /// rule denies, and blocked by address, an office behind one NAT lost every site and its
    /// DNS. `escalate = { http = "block_map" }` keeps the block map.
    pub fn scoped_to_tenants_http(mut self, cfg: &StateConfig) -> Self {
        self.tenant_scoped = Some(crate::ratelimit::UntilTable::new(&cfg.counters));
        self.http = true;
        self
    }
}

/// Counters of a rule set.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct RulesStats {
    /// Tenants with rules in the current set.
    pub tenants: usize,
    /// Successful reloads.
    pub reloads: u64,
    /// Refused reloads (the last good rules stayed).
    pub reload_failures: u64,
    /// Sources escalated into the block map (proven requests).
    pub escalations: u64,
    /// Sources made suspects (unproven requests crossed the threshold).
    pub suspects: u64,
    /// Unproven verdicts that would count toward a tenant's escalation where escalations
    /// hold for the tenant alone (DNS): they count for nothing.
    pub unproven_ignored: u64,
    /// Verdicts of relayed requests (DNS without RD: a resolver's users') that would count
    /// toward an escalation: they count for nothing.
    pub relayed_ignored: u64,
    /// Requests that matched more than the index gathers (more than 128 candidates, or 32
    /// `contains` values in one attribute): every rule of their tenant walked.
    pub index_walks: u64,
    /// The tenant-scoped escalations' table, where there is one.
    pub tenant_scoped: Option<crate::ratelimit::TableStats>,
    /// Sources held for a tenant that `ctl block list` no longer lists (past [`HOLDS_MAX`]).
    pub holds_unlisted: u64,
    /// Escalations the block map's policy refused (never-block, too short a prefix).
    pub escalations_refused: u64,
    /// Rate-limit table.
    pub limiter: TableStats,
    /// Escalation counter table.
    pub counters: TableStats,
}

/// The current [`Prepared`] rules (swapped atomically on reload) plus their [`RuleState`].
pub struct RuleSet {
    pub(super) current: Arc<ArcSwap<Prepared>>,
    pub(super) state: RuleState,
    reloads: AtomicU64,
    reload_failures: AtomicU64,
}

impl std::fmt::Debug for RuleSet {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RuleSet")
            .field("stats", &self.stats())
            .finish()
    }
}

impl RuleSet {
    /// A rule set starting with `prepared`.
    pub fn new(mut prepared: Prepared, state: RuleState) -> Self {
        state.number_holds(None, &mut prepared);
        RuleSet {
            current: Arc::new(ArcSwap::from_pointee(prepared)),
            state,
            reloads: AtomicU64::new(0),
            reload_failures: AtomicU64::new(0),
        }
    }

    /// The sources held now for a tenant's zones alone (the most recent [`HOLDS_MAX`]).
    pub fn tenant_holds(&self, now_s: u32) -> Vec<TenantHold> {
        let h = self.state.holds.lock().unwrap_or_else(|e| e.into_inner());
        h.iter().filter(|x| x.until_s > now_s).cloned().collect()
    }

    /// Lifts every hold of exactly `net`, for any tenant; returns those lifted.
    pub fn lift_tenant_holds(&self, net: ipnet::IpNet) -> Vec<TenantHold> {
        let Some(tbl) = &self.state.tenant_scoped else {
            return Vec::new();
        };
        let mut h = self.state.holds.lock().unwrap_or_else(|e| e.into_inner());
        let mut lifted = Vec::new();
        h.retain(|x| {
            if x.net != net.trunc() {
                return true;
            }
            tbl.lift(&(x.tenant, x.generation, x.key));
            lifted.push(x.clone());
            false
        });
        lifted
    }

    /// The current rules (lock-free; hold the guard briefly).
    #[inline]
    pub fn current(&self) -> arc_swap::Guard<Arc<Prepared>> {
        self.current.load()
    }

    /// Replaces the rules. Escalations held for a tenant alone are lifted where that
    /// tenant's rules changed (its `[[tenant]]` table, or what every tenant shares): an
    /// operator who adds a source to an allow list or `never_block` and reloads lifts it
    /// (they are listed nowhere else, and lapse after `block_secs`); an edit of another
    /// tenant's rules lets no one held go. Holds are keyed by their tenant's hold
    /// generation, new at each change of its rules, so a changed tenant's holds stop holding
    /// at once, listed or not (the list past its bound, or a hold made while the rules are
    /// swapped), and the file put back as it was brings none back; the list forgets them.
    pub fn store(&self, mut prepared: Prepared) {
        let old = self.current.load_full();
        self.state.number_holds(Some(&old), &mut prepared);
        let new = Arc::new(prepared);
        self.current.store(new.clone());
        if self.state.tenant_scoped.is_some() && old.version() != new.version() {
            let mut h = self.state.holds.lock().unwrap_or_else(|e| e.into_inner());
            h.retain(|x| new.hold_gen(x.tenant) == x.generation);
        }
        self.reloads.fetch_add(1, Ordering::Relaxed);
    }

    /// Loads and compiles `path`; on success swaps it in, on failure keeps the last good rules.
    /// Escalations shorter than the block map's minimum prefixes are refused here too.
    pub fn reload(&self, path: &Path) -> Result<(), RulesError> {
        self.reload_under(path, None)
    }

    /// [`reload`](Self::reload), the escalations checked against `min_prefix` (IPv4, IPv6)
    /// when given: the block policy the same reload installs, not the one it replaces.
    pub fn reload_under(
        &self,
        path: &Path,
        min_prefix: Option<(u8, u8)>,
    ) -> Result<(), RulesError> {
        let p = self.prepare_under(path, min_prefix)?;
        self.install(path, p);
        Ok(())
    }

    /// Loads and compiles `path` as [`reload_under`](Self::reload_under) does, without
    /// installing it (a reload that must refuse as a whole when the rules do); a failure is
    /// counted and logged.
    pub fn prepare_under(
        &self,
        path: &Path,
        min_prefix: Option<(u8, u8)>,
    ) -> Result<Prepared, RulesError> {
        let loaded = Prepared::load(path).and_then(|p| {
            let min = min_prefix.or_else(|| {
                self.state.blocks.as_ref().map(|b| {
                    let policy = b.policy();
                    (policy.min_prefix_v4, policy.min_prefix_v6)
                })
            });
            if let Some((v4, v6)) = min {
                p.check_min_prefix(v4, v6)?;
            }
            Ok(p)
        });
        loaded.inspect_err(|e| {
            self.reload_failures.fetch_add(1, Ordering::Relaxed);
            tracing::warn!(error = %e, "rules refused; keeping the last good rules");
        })
    }

    /// Swaps in rules [`prepare_under`](Self::prepare_under) compiled from `path`.
    pub fn install(&self, path: &Path, p: Prepared) {
        tracing::info!(path = %path.display(), tenants = p.tenant_count(), "rules reloaded");
        self.store(p);
    }

    /// Evaluates `tenant`'s current rules for a request from `src` (see [`Prepared::check`]).
    ///
    /// Loads the current rules through `arc-swap` (lock-free, about 10 ns); a thread that
    /// checks often should use a [`super::LocalRules`] from [`RuleSet::local`] instead.
    #[inline]
    pub fn check<R: Request + ?Sized>(
        &self,
        tenant: TenantId,
        src: IpAddr,
        req: &R,
        now: Now,
    ) -> Verdict {
        self.current
            .load()
            .check(&self.state, tenant, src, req, now)
    }

    /// A number that moves at each new hold of a source for a tenant alone: whoever asks
    /// [`held`](Self::held) again and again may skip it while this stays.
    pub fn hold_epoch(&self) -> u64 {
        self.state.hold_epoch.load(Ordering::Relaxed)
    }

    /// Whether `src` is held for `tenant` alone at `now_s` (Unix seconds): its `escalate`
    /// made a hold of the source's prefix that has not lapsed, and no allow list of the
    /// tenant lets the source through. What a tunnel opened before the hold asks (its
    /// requests were ruled once; one an allow rule or a clearance let through asks not).
    pub fn held(&self, tenant: TenantId, src: std::net::IpAddr, now_s: u32) -> bool {
        let p = self.current.load();
        let (Some(Some(t)), Some(tbl)) =
            (p.tenants.get(tenant as usize), &self.state.tenant_scoped)
        else {
            return false;
        };
        t.escalate.as_ref().is_some_and(|e| {
            e.may_hold(self.state.http)
                && tbl.live(
                    &(t.id, t.hold_gen, crate::ratelimit::source_key(src, e.v4, e.v6)),
                    now_s,
                )
                // What the tenant's allow lists let through, a hold lets through too.
                && p.allowed_source(t, src).is_none()
        })
    }

    /// The state shared across reloads.
    pub fn state(&self) -> &RuleState {
        &self.state
    }

    /// Current counters.
    pub fn stats(&self) -> RulesStats {
        RulesStats {
            tenants: self.current.load().tenant_count(),
            reloads: self.reloads.load(Ordering::Relaxed),
            reload_failures: self.reload_failures.load(Ordering::Relaxed),
            escalations: self.state.escalations.sum(),
            suspects: self.state.suspects.sum(),
            unproven_ignored: self.state.unproven_ignored.sum(),
            relayed_ignored: self.state.relayed_ignored.sum(),
            index_walks: self.state.index_walks.sum(),
            tenant_scoped: self.state.tenant_scoped.as_ref().map(|t| t.stats()),
            holds_unlisted: self
                .state
                .holds_unlisted
                .load(std::sync::atomic::Ordering::Relaxed),
            escalations_refused: self.state.refused.sum(),
            limiter: self.state.limiter.stats(),
            counters: self.state.counter.stats(),
        }
    }
}

/// The rules' counters, named `palisade_rules_*` in both daemons.
impl crate::metrics::Source for RuleSet {
    fn collect(&self, out: &mut crate::metrics::Samples) {
        let r = self.stats();
        out.gauge(
            "rules.tenants",
            "palisade_rules_tenants",
            "",
            "Tenants with rules.",
            r.tenants as u64,
        );
        for (what, n) in [("ok", r.reloads), ("failed", r.reload_failures)] {
            out.counter(
                format!("rules.reloads.{what}"),
                "palisade_rules_reloads_total",
                format!("result=\"{what}\""),
                "Rules file reloads, by result (a failed one keeps the running rules).",
                n,
            );
        }
        out.counter(
            "rules.escalations",
            "palisade_rules_escalations_total",
            "",
            "Sources the rules escalated (proven requests: TCP, a valid cookie, HTTP): into the block map, or in dnsd for the escalating tenant's zones alone.",
            r.escalations,
        );
        out.counter(
            "rules.unproven_ignored",
            "palisade_rules_unproven_not_escalated_total",
            "",
            "Unproven (UDP) verdicts that would count toward a tenant's escalation where escalations hold for the tenant alone (dnsd): they count for nothing (RRL meets forged floods).",
            r.unproven_ignored,
        );
        out.counter(
            "rules.relayed_ignored",
            "palisade_rules_relayed_not_escalated_total",
            "",
            "Verdicts of relayed queries (DNS without RD: an iterating resolver asks for its users) that would count toward an escalation: they count for nothing.",
            r.relayed_ignored,
        );
        out.counter(
            "rules.index_walks",
            "palisade_rules_index_walks_total",
            "",
            "Requests past the rule index's stack bounds (128 candidates, 32 contains values in one value, 16 values of one attribute): their candidates gathered into the thread's bitmap of the tenant's rules.",
            r.index_walks,
        );
        if let Some(t) = &r.tenant_scoped {
            out.counter(
                "rules.tenant_escalations.evictions",
                "palisade_rules_table_evictions_total",
                "table=\"tenant_escalations\"",
                "Live rate-limit or escalation state evicted from its full table.",
                t.evictions,
            );
            out.counter(
                "rules.tenant_holds.unlisted",
                "palisade_rules_tenant_holds_unlisted_total",
                "",
                "Sources held for a tenant that ctl block list stopped listing, its list full (they hold until they lapse).",
                r.holds_unlisted,
            );
        }
        out.counter(
            "rules.suspects",
            "palisade_rules_suspects_total",
            "",
            "Sources the rules made suspects: unproven UDP crossed an escalation threshold (never a block).",
            r.suspects,
        );
        out.counter(
            "rules.escalations_refused",
            "palisade_rules_escalations_refused_total",
            "",
            "Escalations refused by the block policy (never-block prefixes, prefixes shorter than the minimum).",
            r.escalations_refused,
        );
        for (table, t) in [("limiter", &r.limiter), ("escalation", &r.counters)] {
            out.counter(
                format!("rules.{table}.evictions"),
                "palisade_rules_table_evictions_total",
                format!("table=\"{table}\""),
                "Live rate-limit or escalation state evicted from its full table.",
                t.evictions,
            );
        }
        for (table, t) in [("limiter", &r.limiter), ("escalation", &r.counters)] {
            out.gauge(
                format!("rules.{table}.slots"),
                "palisade_rules_table_slots",
                format!("table=\"{table}\""),
                "Capacity of the rate-limit and escalation tables.",
                t.slots as u64,
            );
        }
        // Per tenant: the 20 with most checks by name, the rest as "other".
        let tc = tenant_counts();
        let rows = tc
            .top
            .iter()
            .map(|(t, n)| (t.to_string(), n))
            .chain(std::iter::once(("other".to_string(), &tc.other)));
        for (tenant, n) in rows {
            out.counter(
                format!("rules.tenant.{tenant}.checks"),
                "palisade_rules_tenant_checks_total",
                format!("tenant=\"{tenant}\""),
                "Rule checks by tenant: the 20 tenants with most, the others summed as other.",
                n[0],
            );
            for (i, kind) in tenants::KINDS.iter().enumerate().skip(1) {
                out.counter(
                    format!("rules.tenant.{tenant}.{kind}"),
                    "palisade_rules_tenant_verdicts_total",
                    format!("tenant=\"{tenant}\",action=\"{kind}\""),
                    "Rule verdicts other than pass by tenant (the same 20 tenants, the rest as other).",
                    n[i],
                );
            }
        }
        out.counter(
            "rules.tenant_table_full",
            "palisade_rules_tenant_table_full_total",
            "",
            "Tenants that displaced a less busy one from a full per-thread table (whose counts moved to other).",
            tc.table_full,
        );
    }
}
