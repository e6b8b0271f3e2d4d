//! Evaluation: a request checked against its tenant's prepared rules in the order the
//! module documentation gives, with early exits, and the escalation of deny, rate-limit and
//! challenge verdicts into the block map (proven and unproven apart).

use super::compiled::{Escalation, MAX_PREFILTERS, RateSpec, Rule, Tenant, index};
use super::prepared::{Prepared, TENANT_RATE_RULE};
use super::set::RuleState;
use super::{Action, Escalated, Now, Request, TenantId, Verdict, codes};
use crate::block::{BlockEntry, Evidence, InsertOutcome, Origin};
use crate::ratelimit::source_key;
use std::net::IpAddr;

impl Prepared {
    /// Evaluates `tenant`'s rules for a request from `src`; see the module documentation.
    ///
    /// A tenant without rules costs a bounds check and an `Option` test (inlined here),
    /// plus one emptiness test for the `[global]` deny list.
    #[inline(always)]
    pub fn check<R: Request + ?Sized>(
        &self,
        state: &RuleState,
        tenant: TenantId,
        src: IpAddr,
        req: &R,
        now: Now,
    ) -> Verdict {
        if !self.global_deny.is_empty() && self.global_deny.contains(src) {
            return Verdict::new(Action::Deny, codes::GLOBAL_DENY, "global-deny");
        }
        match self.tenants.get(tenant as usize) {
            Some(Some(t)) => self.check_tenant(t, state, src, req, now),
            _ => Verdict::PASS,
        }
    }

    #[inline(never)]
    fn check_tenant<R: Request + ?Sized>(
        &self,
        t: &Tenant,
        state: &RuleState,
        src: IpAddr,
        req: &R,
        now: Now,
    ) -> Verdict {
        // A source escalated for this tenant alone: nothing more from its zones or sites but
        // what its allow lists and allow rules let through — its rules walked only when some
        // rule allows (a held flood costs a lookup, and feeds no limiter), but in DNS with
        // `dns_hold = "truncate"` its TCP goes through the rules as any source's and so does
        // its UDP, marked held ([`Verdict::dns_held`]): only an answer for a name that
        // exists goes back whole, anything else TC=1 — a forwarder is held for its users'
        // queries and serves the rest of them, most over UDP (refused, one user cut its users
        // off the tenant; truncated whole, a forwarder that opens a TCP connection per query
        // ran out of connections under load). Its UDP then costs what any source's does
        // (the rules, the lookup): RRL and the block map bound a flood of it, not the hold.
        // In HTTP with `http_hold = "challenge"` its requests are challenged, and one with a
        // clearance earned since the hold began goes through the rules: a page can make any
        // visitor's browser send what escalates (an `<img>` under `no-referrer` says nothing
        // of where it came from). Where the tenant asks for the block map, only a browser's
        // requests are held (a client that is no browser escalates into the map as asked).
        let mut walked = None;
        let mut dns_held = false;
        if let (Some(e), Some(tbl)) = (&t.escalate, &state.tenant_scoped)
            && e.may_hold(state.http)
            && !(e.dns_truncate && !state.http && req.evidence() == Evidence::Tcp)
            && !(state.http && e.http_block_map && !req.browser())
            && let Some(until) =
                tbl.until(&(t.id, t.hold_gen, source_key(src, e.v4, e.v6)), secs(now))
        {
            if let Some(v) = self.allowed_source(t, src) {
                return v;
            }
            if !state.http && e.dns_truncate {
                dns_held = true;
            } else {
                if t.allow_rules {
                    let v = self.evaluate(t, state, src, req, now);
                    if v.action == Action::Allow {
                        return v;
                    }
                    // Walked once: a cleared request's verdict below is this one (walked
                    // twice, its rate limits were charged twice).
                    walked = Some(v);
                }
                if !state.http || !e.http_challenge {
                    return Verdict::new(Action::Deny, codes::ESCALATED, e.reason.as_str());
                }
                // A clearance from before the hold lifts nothing: one solve would have
                // cleared every later hold of its /24 for as long as it lasts.
                let since = u64::from(
                    until.saturating_sub(e.ttl.as_secs().min(u64::from(u32::MAX)) as u32),
                );
                if !req.cleared_since(0, since) {
                    return Verdict::new(Action::Challenge, codes::ESCALATED, e.reason.as_str());
                }
            }
        }
        let v = match walked {
            Some(v) => v,
            None => self.evaluate(t, state, src, req, now),
        };
        let v = Verdict { dns_held, ..v };
        match (&t.escalate, v.action) {
            (Some(e), Action::Deny) if e.on_deny => escalate(t, e, state, src, req, now, v),
            // A shared bucket (rate.key) says nothing about this source: no escalation.
            (Some(e), Action::RateLimit) if e.on_rate_limit && !v.shared => {
                escalate(t, e, state, src, req, now, v)
            }
            (Some(e), Action::Challenge) if e.on_challenge => {
                escalate(t, e, state, src, req, now, v)
            }
            _ => v,
        }
    }

    /// The verdict for a source the tenant lets through whatever it asks: its allow list,
    /// and known crawlers where it allows them.
    #[inline]
    pub(super) fn allowed_source(&self, t: &Tenant, src: IpAddr) -> Option<Verdict> {
        if !t.allow.is_empty() && t.allow.contains(src) {
            return Some(Verdict::new(Action::Allow, codes::ALLOW_LIST, "allow-list"));
        }
        if t.allow_bots && self.bots.contains(src) {
            return Some(Verdict::new(Action::Allow, codes::KNOWN_BOT, "known-bot"));
        }
        None
    }

    #[inline]
    fn evaluate<R: Request + ?Sized>(
        &self,
        t: &Tenant,
        state: &RuleState,
        src: IpAddr,
        req: &R,
        now: Now,
    ) -> Verdict {
        if let Some(v) = self.allowed_source(t, src) {
            return v;
        }
        if !t.deny.is_empty()
            && let Some((_, &i)) = t.deny.longest_match(src)
        {
            return t.deny_verdicts[i as usize];
        }
        if !t.deny_asn.is_empty()
            && let Some(asn) = self.asn.lookup(src)
            && t.deny_asn.binary_search(&asn).is_ok()
        {
            return Verdict::new(Action::Deny, codes::DENY_ASN, "deny-asn");
        }
        let mut cache = [0u8; MAX_PREFILTERS];
        if !t.rules.is_empty() {
            if t.index.is_trivial() {
                for rule in &t.rules {
                    if let Some(v) = rule_verdict(t, rule, state, src, req, now, &mut cache) {
                        return v;
                    }
                }
            } else {
                let mut c = index::Candidates::new();
                t.index.candidates(req, &mut c);
                if c.overflow {
                    // Past the stack's bounds: the candidates gathered again, into the
                    // thread's bitmap (never a walk over every rule: 10,000 `contains` rules
                    // cost 1,000 times the index for anyone who put 33 of them in one header).
                    state.index_walks.add(stripe(src), 1);
                    let found = t.index.spilled(t.rules.len(), req, |n| {
                        rule_verdict(t, &t.rules[n as usize], state, src, req, now, &mut cache)
                    });
                    if let Some(v) = found {
                        return v;
                    }
                } else {
                    // The candidates and the walked rules, merged in file order.
                    let (found, scan) = (c.sorted(), &t.index.scan[..]);
                    let (mut i, mut j) = (0, 0);
                    while i < found.len() || j < scan.len() {
                        let next = if j == scan.len() || (i < found.len() && found[i] < scan[j]) {
                            i += 1;
                            found[i - 1]
                        } else {
                            j += 1;
                            scan[j - 1]
                        };
                        let rule = &t.rules[next as usize];
                        if let Some(v) = rule_verdict(t, rule, state, src, req, now, &mut cache) {
                            return v;
                        }
                    }
                }
            }
        }
        if let Some(spec) = &t.rate
            && let Some((ms, shared)) =
                rate_limited(state, t.id, TENANT_RATE_RULE, spec, src, req, now)
        {
            return Verdict {
                retry_after_ms: ms,
                shared,
                ..Verdict::new(Action::RateLimit, codes::RATE_LIMIT, "rate-limit")
            };
        }
        Verdict::PASS
    }
}

/// The verdict of one rule for the request, when it decides (`None`: go on).
#[inline]
fn rule_verdict<R: Request + ?Sized>(
    t: &Tenant,
    rule: &Rule,
    state: &RuleState,
    src: IpAddr,
    req: &R,
    now: Now,
    cache: &mut [u8; MAX_PREFILTERS],
) -> Option<Verdict> {
    if let Some(s) = &rule.source
        && !s.contains(src)
    {
        return None;
    }
    if !rule
        .conds
        .iter()
        .all(|c| c.matches(req, &t.prefilters, cache))
    {
        return None;
    }
    match (rule.verdict.action, &rule.rate) {
        // A client with a clearance passes a challenge; the next rules still apply to it.
        (Action::Challenge, _) if req.cleared(rule.verdict.difficulty) => None,
        (Action::RateLimit, Some(spec)) => {
            rate_limited(state, t.id, rule.state_key, spec, src, req, now).map(|(ms, shared)| {
                Verdict {
                    retry_after_ms: ms,
                    shared,
                    ..rule.verdict
                }
            })
        }
        _ => Some(rule.verdict),
    }
}

/// `None` when the request conforms (and was counted); else milliseconds until one would
/// (at least 1), and whether the bucket was shared beyond the source. Counted per source
/// prefix, or per value of the spec's `key` attribute (a request without it: per source
/// prefix) — proven and unproven requests in buckets apart, so that packets forged in a
/// source's name never spend its real queries' allowance (nor, through their limited
/// verdicts, bring it to a proven escalation).
#[inline]
fn rate_limited<R: Request + ?Sized>(
    state: &RuleState,
    tenant: TenantId,
    rule: u32,
    spec: &RateSpec,
    src: IpAddr,
    req: &R,
    now: Now,
) -> Option<(u32, bool)> {
    let (by, shared) = match spec.key.as_deref().and_then(|k| req.attr(k)) {
        Some(value) if spec.per_source => (
            crate::ratelimit::source_value_key(source_key(src, spec.v4, spec.v6), value),
            false,
        ),
        Some(value) => (crate::ratelimit::value_key(value), true),
        None => (source_key(src, spec.v4, spec.v6), false),
    };
    let key = (tenant, rule, req.evidence().owns_address(), by);
    match state.limiter.check(&key, &spec.limit, now.mono_us) {
        crate::ratelimit::Decision::Allow => None,
        crate::ratelimit::Decision::Limit { retry_after_us } => Some((
            retry_after_us.div_ceil(1000).clamp(1, u64::from(u32::MAX)) as u32,
            shared,
        )),
    }
}

#[cold]
fn escalate<R: Request + ?Sized>(
    t: &Tenant,
    e: &Escalation,
    state: &RuleState,
    src: IpAddr,
    req: &R,
    now: Now,
    mut v: Verdict,
) -> Verdict {
    if req.relayed() && !e.count_relayed {
        // A resolver's users' verdicts, not its own: each is answered as it says, and
        // none counts against the resolver (Knot with RRL keeps answering them too).
        state.relayed_ignored.add(stripe(src), 1);
        return v;
    }
    let evidence = req.evidence();
    let proven = evidence.is_proven();
    // A browser's request (HTTP) holds its source for the tenant even where the tenant
    // asks for the block map: a page (another's, or the site's own showing what its users
    // post) made each visitor blocked on every site, in XDP and across the fleet.
    let scoped = state
        .tenant_scoped
        .as_ref()
        .filter(|_| !e.block_map(state.http) || (state.http && req.browser()));
    if scoped.is_some() && !proven {
        // Held for the tenant alone (DNS), unproven packets escalate nothing: forged in a
        // resolver's name they made it a suspect in every tenant's zones for `block_secs`.
        // Striped by source: forged floods come from everywhere, each core on its own line.
        state.unproven_ignored.add(stripe(src), 1);
        return v;
    }
    // Proven and unproven verdicts are counted apart: forged packets can neither block a
    // source nor bring a real one to the threshold.
    let key = (t.id, proven, source_key(src, e.v4, e.v6));
    // Each `after` verdicts of a window: a block lifted while the source goes on is made
    // again by as many more (a blocked source's requests no longer reach the rules; an
    // unproven one's refresh its suspect entry once per `after`, never per verdict).
    let n = state.counter.add(&key, 1, e.window_ms, now.unix_ms);
    if n > 0
        && n.is_multiple_of(e.after)
        && let Some(tbl) = scoped
    {
        let hold = (t.id, t.hold_gen, key.2);
        if tbl.live(&hold, secs(now)) {
            // Held already (its queries go through the rules with `dns_hold = "truncate"`):
            // not held again — one source's pipelined denies took every place of the list
            // `ctl block` lifts from, and kept its hold from ever lapsing.
            return v;
        }
        let net = key.2.to_net();
        // The block map's policy holds here too: never-block prefixes, the shortest.
        if let Some(why) = state
            .blocks
            .as_ref()
            .and_then(|b| b.policy().check(&net).err().map(|(r, _)| r))
        {
            state.refused.add(n as usize ^ t.id as usize, 1);
            crate::limited!(
                10,
                warn!(tenant = t.id, %net, %why, "escalation refused by the block policy")
            );
            v.escalated = Escalated::Refused;
            return v;
        }
        let until = secs(now).saturating_add(e.ttl.as_secs().min(u64::from(u32::MAX)) as u32);
        tbl.set(&hold, until, secs(now));
        state.note_hold(
            t.id,
            t.hold_gen,
            key.2,
            until,
            &why(e, &v, evidence),
            secs(now),
        );
        state.escalations.add(n as usize ^ t.id as usize, 1);
        crate::limited!(
            10,
            info!(tenant = t.id, %net, %evidence, reason = %v.reason, "source escalated for the tenant's zones")
        );
        v.escalated = Escalated::Blocked;
    } else if n > 0
        && n.is_multiple_of(e.after)
        && let Some(blocks) = &state.blocks
    {
        let net = key.2.to_net();
        let entry = BlockEntry::with_ttl(
            net,
            e.ttl,
            now.unix_ms,
            // 39 bytes kept, the evidence beside: the rule first.
            &format!("rule {} ({})", v.reason, e.reason.as_str()),
            Origin::Local,
            evidence,
        )
        // Unproven, a suspect for this tenant's zones alone: a flood forged in a resolver's
        // name against one tenant's rules made it a suspect in every tenant's zones.
        .for_tenant(t.id);
        v.escalated = match blocks.insert(entry) {
            InsertOutcome::Refused(why) => {
                state.refused.add(n as usize ^ t.id as usize, 1);
                crate::limited!(
                    10,
                    warn!(tenant = t.id, %net, %why, "escalation refused by the block policy")
                );
                Escalated::Refused
            }
            // Suspects at their share of the map: counted by the map, nothing to log here.
            InsertOutcome::SuspectsFull | InsertOutcome::NoRoom => Escalated::Refused,
            _ if proven => {
                state.escalations.add(n as usize ^ t.id as usize, 1);
                crate::limited!(
                    10,
                    info!(tenant = t.id, %net, %evidence, reason = %v.reason, "source escalated into the block map")
                );
                Escalated::Blocked
            }
            _ => {
                state.suspects.add(n as usize ^ t.id as usize, 1);
                crate::limited!(
                    10,
                    info!(tenant = t.id, %net, reason = %v.reason, "source made a suspect (unproven UDP)")
                );
                Escalated::Suspect
            }
        };
    }
    v
}

/// What an operator reads of an escalation in `ctl block list`: why, by which rule, on what
/// evidence (only "tenant 1 escalation" told nothing of it).
#[cold]
fn why(e: &Escalation, v: &Verdict, evidence: Evidence) -> String {
    format!(
        "{}: rule {}, {} verdicts in {} s, evidence={evidence}",
        e.reason.as_str(),
        v.reason,
        e.after,
        e.window_ms / 1000
    )
}

/// `now` in unix seconds (what the tenant-scoped escalations keep).
/// The stripe of a counter that `src` adds to: forged floods come from everywhere, each core
/// on its own line.
#[inline]
fn stripe(src: IpAddr) -> usize {
    match src {
        IpAddr::V4(a) => u32::from(a) as usize,
        IpAddr::V6(a) => u128::from(a) as usize,
    }
}

#[inline]
fn secs(now: Now) -> u32 {
    (now.unix_ms / 1000).min(u64::from(u32::MAX)) as u32
}
