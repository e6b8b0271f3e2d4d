//! The random-subdomain (also "water torture") defence: an `after_answer` module.
//!
//! A zone whose NXDOMAIN rate passes a threshold is under such a flood for a while. Then,
//! per source address and zone, NXDOMAIN and all responses are counted in a window: a
//! source that mostly draws NXDOMAIN beyond a limit has its NXDOMAIN answers dropped, and
//! beyond a higher threshold is escalated into the block map for a TTL. Queries for names
//! that exist are never limited here, and nothing is counted per source while the zone is
//! calm. State: two of shield's fixed, lock-free window-counter tables, plus one word per
//! zone.

use std::net::IpAddr;
use std::sync::atomic::{AtomicU64, Ordering};

use shield::prefix::PrefixSet;
use shield::ratelimit::{TableConfig, WindowCounter};

use crate::config::defence::RandomSubdomainConfig;

/// A window count at its ceiling (shield's window counters hold 16 bits).
const SATURATED: u32 = 65_535;

/// What to do with a response.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// Send it.
    Pass,
    /// Drop it (the source is limited harder).
    Drop,
    /// Drop it and block the source.
    Escalate,
}

/// Shared state of the defence.
pub struct RandomSubdomain {
    cfg: RandomSubdomainConfig,
    zone_nx: WindowCounter,
    src_nx: WindowCounter,
    src_all: WindowCounter,
    /// Per zone index: unix ms until which the zone counts as under attack.
    under_attack_until: Box<[AtomicU64]>,
    /// Times a zone went under attack.
    pub attacks: AtomicU64,
    /// NXDOMAIN responses dropped for limited sources.
    pub dropped: AtomicU64,
    /// Sources escalated into the block map.
    pub escalated: AtomicU64,
    /// Sources never limited here (the config's exempt prefixes and RRL's).
    exempt: PrefixSet,
    /// Responses that would have been dropped or escalated but for an exempt source.
    pub exempted: AtomicU64,
}

impl RandomSubdomain {
    /// State for `zones` zones (zone indexes of the zone set); `also_exempt` adds prefixes
    /// to the config's exempt list (checked by the config loader).
    pub fn new(
        cfg: &RandomSubdomainConfig,
        zones: usize,
        also_exempt: &[String],
    ) -> RandomSubdomain {
        let mut exempt = PrefixSet::new();
        for e in cfg.exempt.iter().chain(also_exempt) {
            if let Some(n) = shield::prefix::parse_net(e) {
                exempt.insert(n, ());
            }
        }
        RandomSubdomain {
            exempt,
            exempted: AtomicU64::new(0),
            cfg: cfg.clone(),
            zone_nx: WindowCounter::new(&TableConfig {
                slots: (zones * 2).next_power_of_two().max(64),
            }),
            src_nx: WindowCounter::new(&TableConfig {
                slots: cfg.table_size,
            }),
            src_all: WindowCounter::new(&TableConfig {
                slots: cfg.table_size,
            }),
            under_attack_until: (0..zones.max(1)).map(|_| AtomicU64::new(0)).collect(),
            attacks: AtomicU64::new(0),
            dropped: AtomicU64::new(0),
            escalated: AtomicU64::new(0),
        }
    }

    /// Zones under attack now.
    pub fn zones_under_attack(&self, now_ms: u64) -> usize {
        self.under_attack_until
            .iter()
            .filter(|u| u.load(Ordering::Relaxed) > now_ms)
            .count()
    }

    /// Table evictions (per-source state lost to make room).
    pub fn evictions(&self) -> u64 {
        self.src_nx.stats().evictions + self.src_all.stats().evictions
    }

    /// Counters for `ctl stats` and /metrics.
    pub fn collect(&self, out: &mut shield::metrics::Samples, now_ms: u64) {
        let l = |a: &AtomicU64| a.load(Ordering::Relaxed);
        out.counter(
            "random_subdomain.exempted",
            "dnsd_random_subdomain_exempted_total",
            "",
            "Responses the random-subdomain defence would have dropped or escalated but for an exempt source.",
            l(&self.exempted),
        );
        out.counter(
            "random_subdomain.attacks",
            "dnsd_random_subdomain_attacks_total",
            "",
            "Times a zone's NXDOMAIN rate crossed the flood threshold.",
            l(&self.attacks),
        );
        out.gauge(
            "random_subdomain.zones_under_attack",
            "dnsd_random_subdomain_zones_under_attack",
            "",
            "Zones under a random-subdomain flood now.",
            self.zones_under_attack(now_ms) as u64,
        );
        out.counter(
            "random_subdomain.dropped",
            "dnsd_random_subdomain_dropped_total",
            "",
            "NXDOMAIN answers dropped for limited sources.",
            l(&self.dropped),
        );
        out.counter(
            "random_subdomain.escalated",
            "dnsd_random_subdomain_escalated_total",
            "",
            "Sources blocked by the random-subdomain defence.",
            l(&self.escalated),
        );
        out.counter(
            "random_subdomain.evictions",
            "dnsd_random_subdomain_table_evictions_total",
            "",
            "Per-source state evicted because its table was full.",
            self.evictions(),
        );
    }

    /// Observes one response of zone `zone` to `src`; `nx` when it is NXDOMAIN.
    #[inline]
    pub fn observe(&self, zone: u32, src: IpAddr, nx: bool, now_ms: u64) -> Verdict {
        let Some(flag) = self.under_attack_until.get(zone as usize) else {
            return Verdict::Pass;
        };
        let mut attacked = flag.load(Ordering::Relaxed) > now_ms;
        if nx {
            let n = self.zone_nx.add(&zone, 1, 1000, now_ms);
            if n as f64 > self.cfg.zone_nxdomains_per_second {
                if !attacked {
                    self.attacks.fetch_add(1, Ordering::Relaxed);
                    shield::limited!(
                        10,
                        warn!(zone, "random-subdomain flood: NXDOMAIN rate over threshold")
                    );
                }
                flag.store(now_ms + self.cfg.window * 1000, Ordering::Relaxed);
                attacked = true;
            }
        }
        if !attacked {
            return Verdict::Pass;
        }
        let window = self.cfg.window * 1000;
        let all = self.src_all.add(&(src, zone), 1, window, now_ms);
        // The window counters saturate at 65,535: past that the share of NXDOMAIN cannot be
        // judged (a busy resolver would drift towards "mostly NXDOMAIN"). A flooder that
        // only draws NXDOMAIN is escalated long before, at `escalate_after`.
        if !nx || all >= SATURATED {
            return Verdict::Pass;
        }
        let n = self.src_nx.add(&(src, zone), 1, window, now_ms);
        // "Mostly NXDOMAIN": at least min_nx_share of this source's answers in the window.
        let mostly = n as f64 >= self.cfg.min_nx_share * all as f64;
        if !mostly {
            return Verdict::Pass;
        }
        let verdict = if n >= self.cfg.escalate_after {
            Verdict::Escalate
        } else if n > self.cfg.source_nxdomain_limit {
            Verdict::Drop
        } else {
            return Verdict::Pass;
        };
        if !self.exempt.is_empty() && self.exempt.contains(src) {
            self.exempted.fetch_add(1, Ordering::Relaxed);
            return Verdict::Pass;
        }
        let counter = match verdict {
            Verdict::Escalate => &self.escalated,
            _ => &self.dropped,
        };
        counter.fetch_add(1, Ordering::Relaxed);
        verdict
    }
}

/// The defence as a pipeline module (`after_answer`, UDP only, queries no module vouched
/// for, answers of a served zone); an escalation goes into the block map.
pub struct Module {
    shared: std::sync::Arc<super::Shared>,
}

impl Module {
    /// The module for `shared`'s defence.
    pub fn new(shared: &std::sync::Arc<super::Shared>) -> Module {
        Module {
            shared: std::sync::Arc::clone(shared),
        }
    }
}

impl crate::query_module::QueryModule for Module {
    #[inline(always)]
    fn after_answer(
        &mut self,
        env: &mut crate::query_module::Env,
        p: &crate::query_module::Parsed<'_>,
        a: &crate::query_module::Answered<'_>,
    ) -> crate::query_module::Step {
        use crate::query_module::{AnswerClass, Step, Transport};
        use crate::stats::DropCause;
        use shield::block::{BlockEntry, Origin};
        use shield::events::Action;
        if p.transport != Transport::Udp || p.exempt || a.class == AnswerClass::Error {
            return Step::Continue;
        }
        let (Some(zone), Some(w)) = (p.zone, &self.shared.random_subdomain) else {
            return Step::Continue;
        };
        match w.observe(zone, p.src, a.class == AnswerClass::NxDomain, env.now_ms) {
            Verdict::Pass => Step::Continue,
            Verdict::Drop => {
                env.recorder.record(
                    p.tenant,
                    p.src,
                    Action::RateLimited,
                    super::reason::RANDOM_SUBDOMAIN,
                );
                Step::Drop(DropCause::RandomSubdomain)
            }
            Verdict::Escalate => {
                let s = &self.shared;
                let ttl = std::time::Duration::from_secs(s.cfg.random_subdomain.block_ttl);
                s.blocks.insert(BlockEntry::with_ttl(
                    ipnet::IpNet::from(p.src),
                    ttl,
                    env.now_ms,
                    "dns random-subdomain flood",
                    Origin::Local,
                ));
                s.escalations.fetch_add(1, Ordering::Relaxed);
                env.recorder.record(
                    p.tenant,
                    p.src,
                    Action::Escalated,
                    super::reason::RANDOM_SUBDOMAIN,
                );
                shield::limited!(
                    10,
                    info!(src = %p.src, zone, "source blocked: random-subdomain flood")
                );
                Step::Drop(DropCause::RandomSubdomain)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flooders_escalate_legit_pass() {
        let cfg = RandomSubdomainConfig {
            zone_nxdomains_per_second: 50.0,
            source_nxdomain_limit: 5,
            escalate_after: 20,
            ..RandomSubdomainConfig::default()
        };
        let w = RandomSubdomain::new(&cfg, 2, &[]);
        let legit: IpAddr = "192.0.2.1".parse().unwrap();
        let now = 1_000_000;
        // Calm zone: nothing limited.
        for _ in 0..30 {
            assert_eq!(w.observe(0, legit, true, now), Verdict::Pass);
        }
        // A flood from 10 sources pushes the zone over its threshold.
        let mut escalated = 0;
        let mut dropped = 0;
        for i in 0..40 {
            for s in 0..10u8 {
                let src = IpAddr::from([198, 51, 100, s]);
                match w.observe(0, src, true, now + i) {
                    Verdict::Escalate => escalated += 1,
                    Verdict::Drop => dropped += 1,
                    Verdict::Pass => {}
                }
            }
            // The legitimate client asks for names that exist: never limited.
            assert_eq!(w.observe(0, legit, false, now + i), Verdict::Pass);
        }
        assert!(w.zones_under_attack(now + 40) == 1);
        assert!(escalated >= 10, "escalated {escalated}");
        assert!(dropped > 0);
        // The other zone is calm.
        assert_eq!(
            w.observe(1, IpAddr::from([198, 51, 100, 1]), true, now + 41),
            Verdict::Pass
        );
    }

    #[test]
    fn exempt_resolvers_are_never_dropped_nor_escalated() {
        let cfg = RandomSubdomainConfig {
            zone_nxdomains_per_second: 10.0,
            source_nxdomain_limit: 5,
            escalate_after: 20,
            exempt: vec!["198.51.100.0/24".into()],
            ..RandomSubdomainConfig::default()
        };
        let w = RandomSubdomain::new(&cfg, 1, &["2001:db8::/32".to_string()]);
        let now = 1_000_000;
        let resolver = IpAddr::from([198, 51, 100, 53]);
        let v6: IpAddr = "2001:db8::53".parse().unwrap();
        let flooder = IpAddr::from([203, 0, 113, 9]);
        let mut flooder_limited = 0;
        for i in 0..100 {
            assert_eq!(w.observe(0, resolver, true, now + i), Verdict::Pass);
            assert_eq!(w.observe(0, v6, true, now + i), Verdict::Pass);
            if w.observe(0, flooder, true, now + i) != Verdict::Pass {
                flooder_limited += 1;
            }
        }
        assert!(flooder_limited > 80, "{flooder_limited}");
        assert!(w.exempted.load(Ordering::Relaxed) >= 180);
    }

    #[test]
    fn a_busy_source_with_some_nxdomain_is_never_limited() {
        // A resolver sending 400,000 queries in one window, 20% NXDOMAIN, during a flood:
        // its counts saturate, and it must not drift into "mostly NXDOMAIN".
        let cfg = RandomSubdomainConfig {
            zone_nxdomains_per_second: 10.0,
            ..RandomSubdomainConfig::default()
        };
        let w = RandomSubdomain::new(&cfg, 1, &[]);
        let busy: IpAddr = "192.0.2.53".parse().unwrap();
        let now = 5_000_000;
        for i in 0..400_000u64 {
            let v = w.observe(0, busy, i % 5 == 0, now + i / 100);
            assert_eq!(v, Verdict::Pass, "query {i}");
        }
        assert_eq!(w.zones_under_attack(now + 100), 1);
    }
}
