//! The random-subdomain (also "water torture") defence: an `after_answer` module.
//!
//! A zone whose NXDOMAIN rate passes a threshold is under such a flood for a while. Then,
//! per source address and zone, NXDOMAIN and all responses are counted in a window: a
//! source that mostly draws NXDOMAIN beyond a limit has its NXDOMAIN answers truncated
//! (TC=1 with the question alone, within the suspects' budget, dropped past it), and beyond
//! a higher threshold becomes a suspect for a TTL — a suspect of scope
//! [`shield::block::Scope::Nxdomain`]: only its NXDOMAIN answers are truncated, and only in
//! zones under such a flood (a resolver relaying a flood on one tenant's zone is no suspect
//! in the others'). It never blocks. The flood
//! of random names mostly comes through resolvers, whose own users' queries share the
//! flood's source address, and it counts UDP without a valid cookie only, whose source may
//! be forged: a block would cut a resolver's users off our zones, or let anyone pick whom
//! we block. A real resolver re-asks a truncated name over TCP and gets its answer there;
//! its queries for names that exist are answered as usual. Nothing is counted per source
//! while the zone is calm. State: two of shield's fixed, lock-free window-counter tables,
//! plus one word per zone.

use std::net::IpAddr;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

use shield::prefix::PrefixSet;
use shield::ratelimit::{TableConfig, WindowCounter};

use crate::config::defence::RandomSubdomainConfig;

/// A window count at its ceiling (shield's window counters hold 16 bits).
const SATURATED: u32 = 65_535;

/// Zones tracked under attack at once (each zone takes one of `ATTACK_PROBES` places).
const ATTACK_SLOTS: usize = 16_384;
/// Places a zone may take in the attack table.
const ATTACK_PROBES: usize = 8;
/// Per-zone NXDOMAIN rate counters (by zone id; evictions counted).
const ZONE_SLOTS: usize = 131_072;

/// What to do with a response.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// Send it.
    Pass,
    /// Truncate it (the source is limited harder).
    Drop,
    /// Truncate it and make the source a suspect.
    Escalate,
}

/// Shared state of the defence.
pub struct RandomSubdomain {
    cfg: RandomSubdomainConfig,
    zone_nx: WindowCounter,
    src_nx: WindowCounter,
    src_all: WindowCounter,
    /// Zones under attack: (zone id + 1, unix ms until which it counts as under attack).
    attacked: Box<[(AtomicU32, AtomicU64)]>,
    /// Zones over the threshold that found no free place in `attacked`.
    pub attack_table_full: AtomicU64,
    /// Times a zone went under attack.
    pub attacks: AtomicU64,
    /// NXDOMAIN responses truncated (or dropped past the suspects' budget) for limited sources.
    pub dropped: AtomicU64,
    /// Sources made suspects (their NXDOMAIN answers truncated for `block_ttl`).
    pub escalated: AtomicU64,
    /// Sources never limited here (the config's exempt prefixes and RRL's).
    exempt: PrefixSet,
    /// Responses that would have been dropped or escalated but for an exempt source.
    pub exempted: AtomicU64,
}

impl RandomSubdomain {
    /// State for any number of zones (by zone id); `also_exempt` adds prefixes to the
    /// config's exempt list (checked by the config loader).
    pub fn new(cfg: &RandomSubdomainConfig, also_exempt: &[String]) -> RandomSubdomain {
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
            zone_nx: WindowCounter::new(&TableConfig { slots: ZONE_SLOTS }),
            src_nx: WindowCounter::new(&TableConfig {
                slots: cfg.table_size,
            }),
            src_all: WindowCounter::new(&TableConfig {
                slots: cfg.table_size,
            }),
            attacked: (0..ATTACK_SLOTS)
                .map(|_| (AtomicU32::new(0), AtomicU64::new(0)))
                .collect(),
            attack_table_full: AtomicU64::new(0),
            attacks: AtomicU64::new(0),
            dropped: AtomicU64::new(0),
            escalated: AtomicU64::new(0),
        }
    }

    /// Zones under attack now.
    pub fn zones_under_attack(&self, now_ms: u64) -> usize {
        self.attacked
            .iter()
            .filter(|(z, u)| z.load(Ordering::Relaxed) != 0 && u.load(Ordering::Relaxed) > now_ms)
            .count()
    }

    /// Table evictions (per-source or per-zone state lost to make room).
    pub fn evictions(&self) -> u64 {
        self.src_nx.stats().evictions
            + self.src_all.stats().evictions
            + self.zone_nx.stats().evictions
    }

    /// The places zone `zone` may take in `attacked`.
    #[inline]
    fn attack_slots(&self, zone: u32) -> impl Iterator<Item = &(AtomicU32, AtomicU64)> {
        let h = (zone.wrapping_mul(0x9E37_79B1) >> 8) as usize;
        (0..ATTACK_PROBES).map(move |k| &self.attacked[(h + k) % ATTACK_SLOTS])
    }

    /// Until when zone `zone` counts as under attack (0: it does not).
    #[inline]
    pub(crate) fn attacked_until(&self, zone: u32) -> u64 {
        let key = zone.wrapping_add(1);
        self.attack_slots(zone)
            .find(|(z, _)| z.load(Ordering::Relaxed) == key)
            .map_or(0, |(_, u)| u.load(Ordering::Relaxed))
    }

    /// Marks zone `zone` under attack until `until`: its own place, or one free or expired.
    fn mark_attacked(&self, zone: u32, until: u64, now_ms: u64) {
        let key = zone.wrapping_add(1);
        let place = self
            .attack_slots(zone)
            .find(|(z, _)| z.load(Ordering::Relaxed) == key)
            .or_else(|| {
                self.attack_slots(zone).find(|(z, u)| {
                    z.load(Ordering::Relaxed) == 0 || u.load(Ordering::Relaxed) <= now_ms
                })
            });
        match place {
            Some((z, u)) => {
                u.store(until, Ordering::Relaxed);
                z.store(key, Ordering::Relaxed);
            }
            None => {
                self.attack_table_full.fetch_add(1, Ordering::Relaxed);
            }
        }
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
            "NXDOMAIN answers truncated (TC=1) or dropped for limited sources.",
            l(&self.dropped),
        );
        out.counter(
            "random_subdomain.escalated",
            "dnsd_random_subdomain_escalated_total",
            "",
            "Sources made suspects by the random-subdomain defence (their NXDOMAIN answers truncated; never a block).",
            l(&self.escalated),
        );
        out.counter(
            "random_subdomain.attack_table_full",
            "dnsd_random_subdomain_attack_table_full_total",
            "",
            "Zones over the flood threshold not tracked because 16,384 places were taken.",
            l(&self.attack_table_full),
        );
        out.counter(
            "random_subdomain.evictions",
            "dnsd_random_subdomain_table_evictions_total",
            "",
            "Per-source state evicted because its table was full.",
            self.evictions(),
        );
    }

    /// Observes one response of zone `zone` (its id; `apex` its wire name, for the log) to
    /// `src`; `nx` when it is NXDOMAIN.
    #[inline]
    pub fn observe(&self, zone: u32, apex: &[u8], src: IpAddr, nx: bool, now_ms: u64) -> Verdict {
        let mut attacked = self.attacked_until(zone) > now_ms;
        if nx {
            let n = self.zone_nx.add(&zone, 1, 1000, now_ms);
            if n as f64 > self.cfg.zone_nxdomains_per_second {
                if !attacked {
                    self.attacks.fetch_add(1, Ordering::Relaxed);
                    shield::limited!(
                        10,
                        warn!(zone = %ZoneName(apex), "random-subdomain flood: NXDOMAIN rate over threshold")
                    );
                }
                self.mark_attacked(zone, now_ms + self.cfg.window * 1000, now_ms);
                attacked = true;
            }
        }
        if !attacked {
            return Verdict::Pass;
        }
        let window = self.cfg.window * 1000;
        // A host: an IPv6 source's /64 (one host could spread its flood over 2^64 addresses).
        let host = shield::ratelimit::host_source(src);
        let all = self.src_all.add(&(host, zone), 1, window, now_ms);
        // The window counters saturate at 65,535: past that the share of NXDOMAIN cannot be
        // judged (a busy resolver would drift towards "mostly NXDOMAIN"). A flooder that
        // only draws NXDOMAIN is escalated long before, at `escalate_after`.
        if !nx || all >= SATURATED {
            return Verdict::Pass;
        }
        let n = self.src_nx.add(&(host, zone), 1, window, now_ms);
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
/// for, answers of a served zone); an escalation makes a suspect in the block map.
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

impl crate::query::module::QueryModule for Module {
    #[inline(always)]
    fn after_answer(
        &mut self,
        env: &mut crate::query::module::Env,
        p: &crate::query::module::Parsed<'_>,
        a: &crate::query::module::Answered<'_>,
    ) -> crate::query::module::Step {
        use crate::query::module::{AnswerClass, Step, Transport};
        use shield::block::{BlockEntry, Evidence, Origin, Scope};
        use shield::events::Action;
        if p.transport != Transport::Udp || p.exempt || a.class == AnswerClass::Error {
            return Step::Continue;
        }
        let (Some(zone), Some(w)) = (p.zone, &self.shared.random_subdomain) else {
            return Step::Continue;
        };
        match w.observe(
            zone,
            p.apex,
            p.src,
            a.class == AnswerClass::NxDomain,
            env.now_ms,
        ) {
            Verdict::Pass => Step::Continue,
            Verdict::Drop => {
                env.recorder.record(
                    p.tenant,
                    p.src,
                    Action::RateLimited,
                    p.evidence(),
                    super::reason::RANDOM_SUBDOMAIN,
                );
                Step::Truncate
            }
            Verdict::Escalate => {
                let s = &self.shared;
                let ttl = std::time::Duration::from_secs(s.cfg.random_subdomain.block_ttl);
                // Unproven UDP: a suspect of NXDOMAIN answers, never a block.
                let entry = |net| {
                    BlockEntry::with_ttl(
                        net,
                        ttl,
                        env.now_ms,
                        "dns random-subdomain flood",
                        Origin::Local,
                        Evidence::Udp,
                    )
                    .with_scope(Scope::Nxdomain)
                };
                if !matches!(
                    s.blocks.insert_host(p.src, entry),
                    shield::block::InsertOutcome::Refused(_)
                        | shield::block::InsertOutcome::SuspectsFull
                        | shield::block::InsertOutcome::NoRoom
                ) {
                    s.suspected.fetch_add(1, Ordering::Relaxed);
                    env.recorder.record(
                        p.tenant,
                        p.src,
                        Action::Suspected,
                        p.evidence(),
                        super::reason::RANDOM_SUBDOMAIN,
                    );
                    shield::limited!(
                        10,
                        info!(src = %p.src, zone = %ZoneName(p.apex), "source made a suspect: random-subdomain flood (its NXDOMAIN answers truncated)")
                    );
                }
                Step::Truncate
            }
        }
    }
}

/// A zone's wire name shown as text in a log line (the id alone told an operator nothing).
struct ZoneName<'a>(&'a [u8]);

impl std::fmt::Display for ZoneName<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match zones::name::Name::from_wire(self.0) {
            Ok(n) => write!(f, "{n}"),
            Err(_) => f.write_str("?"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_zone_id_is_watched_and_a_full_attack_table_is_counted() {
        let cfg = RandomSubdomainConfig {
            zone_nxdomains_per_second: 5.0,
            source_nxdomain_limit: 2,
            escalate_after: 1000,
            ..RandomSubdomainConfig::default()
        };
        let w = RandomSubdomain::new(&cfg, &[]);
        let now = 5_000_000;
        let src: IpAddr = "192.0.2.7".parse().unwrap();
        // Zone ids far past any old cap on zone indexes go under attack and limit a flooder.
        for zone in [70_000u32, 1_000_000, u32::MAX - 1] {
            let dropped = (0..20)
                .filter(|&i| w.observe(zone, b"", src, true, now + i) == Verdict::Drop)
                .count();
            assert!(dropped > 0, "zone {zone} not watched");
        }
        assert_eq!(w.zones_under_attack(now + 30), 3);
        // More zones flooded at once than places: counted, never a panic or a wrong zone.
        for zone in 0..(ATTACK_SLOTS as u32 + 2_000) {
            for i in 0..7 {
                w.observe(zone, b"", src, true, now + 40 + i);
            }
        }
        assert!(w.attack_table_full.load(Ordering::Relaxed) > 0);
        assert!(w.zones_under_attack(now + 50) <= ATTACK_SLOTS);
        // Places of zones whose attack ended are taken again.
        let later = now + cfg.window * 1000 + 1000;
        let full = w.attack_table_full.load(Ordering::Relaxed);
        for i in 0..7 {
            w.observe(9_999_999, b"", src, true, later + i);
        }
        assert_eq!(w.attack_table_full.load(Ordering::Relaxed), full);
        assert!(w.attacked_until(9_999_999) > later);
    }

    #[test]
    fn an_ipv6_flooder_is_its_slash_64_whatever_address_it_sends_from() {
        let cfg = RandomSubdomainConfig {
            zone_nxdomains_per_second: 5.0,
            source_nxdomain_limit: 5,
            escalate_after: 20,
            ..RandomSubdomainConfig::default()
        };
        let w = RandomSubdomain::new(&cfg, &[]);
        let now = 1_000_000;
        // Each query from another address of one /64: limited, then escalated, as one source.
        let verdicts: Vec<Verdict> = (0..30u16)
            .map(|i| {
                let src = IpAddr::from([0x2001, 0xdb8, 0, 1, i, 0, 0, 1]);
                w.observe(0, b"", src, true, now + u64::from(i))
            })
            .collect();
        assert!(verdicts.contains(&Verdict::Drop), "{verdicts:?}");
        assert!(verdicts.contains(&Verdict::Escalate), "{verdicts:?}");
        // Another /64 is another source.
        let other = IpAddr::from([0x2001, 0xdb8, 0, 2, 0, 0, 0, 1]);
        assert_eq!(w.observe(0, b"", other, true, now + 31), Verdict::Pass);
    }

    #[test]
    fn flooders_escalate_legit_pass() {
        let cfg = RandomSubdomainConfig {
            zone_nxdomains_per_second: 50.0,
            source_nxdomain_limit: 5,
            escalate_after: 20,
            ..RandomSubdomainConfig::default()
        };
        let w = RandomSubdomain::new(&cfg, &[]);
        let legit: IpAddr = "192.0.2.1".parse().unwrap();
        let now = 1_000_000;
        // Calm zone: nothing limited.
        for _ in 0..30 {
            assert_eq!(w.observe(0, b"", legit, true, now), Verdict::Pass);
        }
        // A flood from 10 sources pushes the zone over its threshold.
        let mut escalated = 0;
        let mut dropped = 0;
        for i in 0..40 {
            for s in 0..10u8 {
                let src = IpAddr::from([198, 51, 100, s]);
                match w.observe(0, b"", src, true, now + i) {
                    Verdict::Escalate => escalated += 1,
                    Verdict::Drop => dropped += 1,
                    Verdict::Pass => {}
                }
            }
            // The legitimate client asks for names that exist: never limited.
            assert_eq!(w.observe(0, b"", legit, false, now + i), Verdict::Pass);
        }
        assert!(w.zones_under_attack(now + 40) == 1);
        assert!(escalated >= 10, "escalated {escalated}");
        assert!(dropped > 0);
        // The other zone is calm.
        assert_eq!(
            w.observe(1, b"", IpAddr::from([198, 51, 100, 1]), true, now + 41),
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
        let w = RandomSubdomain::new(&cfg, &["2001:db8::/32".to_string()]);
        let now = 1_000_000;
        let resolver = IpAddr::from([198, 51, 100, 53]);
        let v6: IpAddr = "2001:db8::53".parse().unwrap();
        let flooder = IpAddr::from([203, 0, 113, 9]);
        let mut flooder_limited = 0;
        for i in 0..100 {
            assert_eq!(w.observe(0, b"", resolver, true, now + i), Verdict::Pass);
            assert_eq!(w.observe(0, b"", v6, true, now + i), Verdict::Pass);
            if w.observe(0, b"", flooder, true, now + i) != Verdict::Pass {
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
        let w = RandomSubdomain::new(&cfg, &[]);
        let busy: IpAddr = "192.0.2.53".parse().unwrap();
        let now = 5_000_000;
        for i in 0..400_000u64 {
            let v = w.observe(0, b"", busy, i % 5 == 0, now + i / 100);
            assert_eq!(v, Verdict::Pass, "query {i}");
        }
        assert_eq!(w.zones_under_attack(now + 100), 1);
    }
}
