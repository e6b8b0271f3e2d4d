//! Suspects: sources the block map holds on unproven evidence — UDP without a valid server
//! cookie, whose address may be forged. A defence that crossed its threshold on such
//! evidence never blocks (that would let anyone pick whom we block by forging packets): it
//! makes the source a suspect on this node for the time a block would have lasted.
//!
//! A suspect's UDP queries without a valid cookie are answered TC=1 with the question alone
//! ([`Step::Truncate`], never more bytes than the query) so that a real resolver comes back
//! over TCP and is served; a forged source costs one small reply at most. Past
//! `[defence.suspects] tc_per_second` per source prefix (`[defence.rrl]` `ipv4_prefix` /
//! `ipv6_prefix`) the replies are dropped and counted, but for one in `slip` still answered
//! TC=1 (as RRL slips): a flood forged in a resolver's name then leaves that resolver a share
//! of truncations to come back over TCP with, never nothing. TCP queries and queries with a valid
//! server cookie are answered as usual. A suspect of scope [`Scope::Nxdomain`] (the
//! random-subdomain defence's) has only its NXDOMAIN answers truncated: its queries for
//! names that exist are answered.
//!
//! The budget ([`Suspects::admit`]) serves every [`Step::Truncate`] of the pipeline.

use std::net::IpAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use shield::block::Scope;
use shield::ratelimit::{Limit, RateLimiter, TableConfig, source_key};

use crate::config::defence::SuspectsConfig;
use crate::query::module::{
    AnswerClass, Answered, CookieStatus, Env, Parsed, QueryModule, Step, Transport,
};

/// The truncation budget and its counters, shared by every worker.
pub struct Suspects {
    limiter: RateLimiter,
    limit: Limit,
    /// One in this many queries past the budget is still truncated (0: none).
    slip: u64,
    /// Queries past the budget (the slip's count).
    over: AtomicU64,
    v4: u8,
    v6: u8,
    /// Queries answered TC=1 (a suspect's, a flooder's NXDOMAIN).
    pub truncated: AtomicU64,
    /// Truncated replies dropped past the budget.
    pub dropped: AtomicU64,
    /// A suspect's queries answered as usual because TCP or a valid cookie proved it.
    pub proven: AtomicU64,
}

impl Suspects {
    /// The budget of `cfg`, per source prefix of `v4` / `v6` bits.
    pub fn new(cfg: &SuspectsConfig, v4: u8, v6: u8) -> Suspects {
        let rate = cfg.tc_per_second.max(0.001);
        Suspects {
            limiter: RateLimiter::new(&TableConfig {
                slots: cfg.table_size,
            }),
            limit: Limit::per_second(rate, rate.ceil().max(1.0) as u32),
            slip: u64::from(cfg.slip),
            over: AtomicU64::new(0),
            v4,
            v6,
            truncated: AtomicU64::new(0),
            dropped: AtomicU64::new(0),
            proven: AtomicU64::new(0),
        }
    }

    /// True when `src` may get one more truncated reply now (counted either way).
    #[inline]
    pub fn admit(&self, src: IpAddr, now_us: u64) -> bool {
        let key = source_key(src, self.v4, self.v6);
        let slipped = || {
            self.slip > 0
                && self
                    .over
                    .fetch_add(1, Ordering::Relaxed)
                    .is_multiple_of(self.slip)
        };
        if self.limiter.check(&key, &self.limit, now_us).is_allow() || slipped() {
            self.truncated.fetch_add(1, Ordering::Relaxed);
            true
        } else {
            self.dropped.fetch_add(1, Ordering::Relaxed);
            false
        }
    }

    /// Counters for `ctl stats` and /metrics.
    pub fn collect(&self, out: &mut shield::metrics::Samples) {
        let l = |a: &AtomicU64| a.load(Ordering::Relaxed);
        out.counter(
            "suspects.truncated",
            "dnsd_suspects_truncated_total",
            "",
            "UDP queries answered TC=1 with the question alone (suspects, random-subdomain flooders): a real client retries over TCP.",
            l(&self.truncated),
        );
        out.counter(
            "suspects.dropped",
            "dnsd_suspects_dropped_total",
            "",
            "Truncated replies dropped past [defence.suspects] tc_per_second per source prefix.",
            l(&self.dropped),
        );
        out.counter(
            "suspects.proven",
            "dnsd_suspects_proven_total",
            "",
            "Queries of suspects answered as usual: TCP or a valid server cookie proved the source.",
            l(&self.proven),
        );
        out.counter(
            "suspects.evictions",
            "dnsd_suspects_table_evictions_total",
            "",
            "Source prefixes' truncation budgets dropped to make room in [defence.suspects] table_size (an evicted prefix starts afresh).",
            self.limiter.stats().evictions,
        );
    }
}

/// The suspects check of one worker.
pub struct Module {
    shared: Arc<super::Shared>,
}

impl Module {
    /// The module for `shared`'s suspects.
    pub fn new(shared: &Arc<super::Shared>) -> Module {
        Module {
            shared: Arc::clone(shared),
        }
    }

    fn proven(&self) -> Step {
        self.shared.suspects.proven.fetch_add(1, Ordering::Relaxed);
        Step::Continue
    }
}

impl QueryModule for Module {
    #[inline]
    fn after_parse(&mut self, env: &mut Env, p: &mut Parsed<'_>) -> Step {
        if p.suspect != Some(Scope::Dns) || p.transport != Transport::Udp {
            return Step::Continue;
        }
        if p.cookie == CookieStatus::Valid {
            return self.proven();
        }
        env.recorder.record(
            p.tenant,
            p.src,
            shield::events::Action::Challenged,
            p.evidence(),
            super::reason::SUSPECT,
        );
        Step::Truncate
    }

    #[inline]
    fn after_answer(&mut self, env: &mut Env, p: &Parsed<'_>, a: &Answered<'_>) -> Step {
        if p.suspect != Some(Scope::Nxdomain)
            || p.transport != Transport::Udp
            || a.class != AnswerClass::NxDomain
        {
            return Step::Continue;
        }
        if p.cookie == CookieStatus::Valid {
            return self.proven();
        }
        env.recorder.record(
            p.tenant,
            p.src,
            shield::events::Action::Challenged,
            p.evidence(),
            super::reason::SUSPECT,
        );
        Step::Truncate
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn budgets_evicted_from_a_full_table_are_counted() {
        let cfg = SuspectsConfig {
            tc_per_second: 5.0,
            slip: 0,
            table_size: 16,
        };
        let s = Suspects::new(&cfg, 24, 56);
        for i in 0..4096u32 {
            let src = IpAddr::from(std::net::Ipv4Addr::from(0x0a00_0000 + (i << 8)));
            s.admit(src, 1_000_000);
        }
        let mut out = shield::metrics::Samples::default();
        s.collect(&mut out);
        let evicted = out.get("suspects.evictions").unwrap();
        assert!(evicted > 3000, "{evicted} evictions");
    }
}
