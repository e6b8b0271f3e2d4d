//! Response rate limiting as BIND and Knot DNS define it: per client prefix and response
//! class, a rate per second; every Nth limited response slips out as a minimal TC=1 reply
//! so that a real client retries over TCP, the rest are dropped.
//!
//! Classes and their keys: answers by (qname, qtype), NODATA by qname (its answer names no
//! type: random qtypes are one account, as BIND counts them), NXDOMAIN by zone, referrals by
//! zone, errors by rcode class alone — all under the client's prefix (/24 for
//! IPv4, /56 for IPv6 by default). The state lives in shield's lock-free GCRA table: a
//! fixed number of slots shared by all workers, evictions counted. UDP only: TCP answers are
//! never limited, and a client that presents a valid server cookie skips RRL.

use std::hash::{BuildHasher, Hasher};
use std::net::IpAddr;
use std::sync::atomic::{AtomicU64, Ordering};

use shield::prefix::PrefixSet;
use shield::ratelimit::{Decision, Limit, RateLimiter, TableConfig, source_key};

use crate::config::defence::RrlConfig;

pub use crate::query::module::AnswerClass as Class;

/// What to do with a response.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// Send it.
    Pass,
    /// Send a minimal TC=1 reply instead.
    Slip,
    /// Send nothing.
    Drop,
}

/// RRL state shared by the workers.
pub struct Rrl {
    limiter: RateLimiter,
    limits: [Limit; 4],
    slip: u32,
    v4: u8,
    v6: u8,
    exempt: PrefixSet,
    /// Seeded per process: no query name can be aimed at another client's account.
    hasher: foldhash::fast::RandomState,
    /// Responses limited (slipped or dropped).
    pub limited: AtomicU64,
    /// Limited responses sent as TC=1.
    pub slipped: AtomicU64,
    /// Limited responses dropped.
    pub dropped: AtomicU64,
}

impl Rrl {
    /// RRL from its config (exempt prefixes already checked by the config loader).
    pub fn new(cfg: &RrlConfig) -> Rrl {
        // BIND's account: a second's worth of credit at most, `window` seconds of debt.
        let lim = |rate: f64| Limit::per_second(rate, rate.max(1.0) as u32).with_window(cfg.window);
        let mut exempt = PrefixSet::new();
        for e in &cfg.exempt {
            if let Some(n) = shield::prefix::parse_net(e) {
                exempt.insert(n, ());
            }
        }
        Rrl {
            limiter: RateLimiter::new(&TableConfig {
                slots: cfg.table_size,
            }),
            limits: [
                lim(cfg.responses_per_second),
                lim(cfg.nxdomains_per_second.unwrap_or(cfg.responses_per_second)),
                lim(cfg.referrals_per_second.unwrap_or(cfg.responses_per_second)),
                lim(cfg.errors_per_second.unwrap_or(cfg.responses_per_second)),
            ],
            slip: cfg.slip,
            v4: cfg.ipv4_prefix,
            v6: cfg.ipv6_prefix,
            exempt,
            hasher: foldhash::fast::RandomState::default(),
            limited: AtomicU64::new(0),
            slipped: AtomicU64::new(0),
            dropped: AtomicU64::new(0),
        }
    }

    /// Decides about one response. `what` is the class's key material (qname and qtype for
    /// answers, the zone for NXDOMAIN and referrals); `slip_count` is the caller's counter
    /// of limited responses.
    #[inline]
    pub fn check(
        &self,
        src: IpAddr,
        class: Class,
        what: &[u8],
        qtype: u16,
        now_us: u64,
        slip_count: &mut u32,
    ) -> Verdict {
        let key = source_key(src, self.v4, self.v6);
        let mut h = self.hasher.build_hasher();
        h.write_u128(key.addr);
        h.write_u8(key.len);
        h.write_u8(class as u8);
        h.write(what);
        h.write_u16(qtype);
        let limit = &self.limits[class as usize];
        match self.limiter.check_hash(h.finish(), limit, now_us) {
            Decision::Allow => Verdict::Pass,
            Decision::Limit { .. } => {
                if !self.exempt.is_empty() && self.exempt.contains(src) {
                    return Verdict::Pass;
                }
                self.limited.fetch_add(1, Ordering::Relaxed);
                *slip_count = slip_count.wrapping_add(1);
                if self.slip > 0 && (*slip_count).is_multiple_of(self.slip) {
                    self.slipped.fetch_add(1, Ordering::Relaxed);
                    Verdict::Slip
                } else {
                    self.dropped.fetch_add(1, Ordering::Relaxed);
                    Verdict::Drop
                }
            }
        }
    }

    /// Table evictions (state lost to make room).
    pub fn evictions(&self) -> u64 {
        self.limiter.stats().evictions
    }

    /// Counters for `ctl stats` and /metrics.
    pub fn collect(&self, out: &mut shield::metrics::Samples) {
        let l = |a: &AtomicU64| a.load(Ordering::Relaxed);
        out.counter(
            "rrl.limited",
            "dnsd_rrl_limited_total",
            "",
            "Responses over the RRL rate (slipped or dropped).",
            l(&self.limited),
        );
        out.counter(
            "rrl.slipped",
            "dnsd_rrl_slipped_total",
            "",
            "Limited responses sent as TC=1 or BADCOOKIE.",
            l(&self.slipped),
        );
        out.counter(
            "rrl.dropped",
            "dnsd_rrl_dropped_total",
            "",
            "Limited responses dropped.",
            l(&self.dropped),
        );
        out.counter(
            "rrl.evictions",
            "dnsd_rrl_table_evictions_total",
            "",
            "RRL state evicted because its table was full.",
            self.evictions(),
        );
    }
}

/// RRL as a pipeline module (`after_answer`, UDP only, queries no module vouched for).
pub struct Module {
    shared: std::sync::Arc<super::Shared>,
    /// This worker's count of limited responses (every `slip`-th slips).
    slip_count: u32,
}

impl Module {
    /// The module for `shared`'s RRL.
    pub fn new(shared: &std::sync::Arc<super::Shared>) -> Module {
        Module {
            shared: std::sync::Arc::clone(shared),
            slip_count: 0,
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
        use crate::observe::counters::DropCause;
        use crate::query::module::{Step, Transport};
        if p.transport != Transport::Udp || p.exempt {
            return Step::Continue;
        }
        let Some(r) = &self.shared.rrl else {
            return Step::Continue;
        };
        let v = r.check(
            p.src,
            a.class,
            a.key,
            a.qtype,
            env.now_us,
            &mut self.slip_count,
        );
        if v == Verdict::Pass {
            return Step::Continue;
        }
        env.recorder.record(
            p.tenant,
            p.src,
            shield::events::Action::RateLimited,
            p.evidence(),
            super::reason::RRL,
        );
        match v {
            Verdict::Slip => Step::Slip,
            _ => Step::Drop(DropCause::Rrl),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rrl(rate: f64, slip: u32) -> Rrl {
        Rrl::new(&RrlConfig {
            responses_per_second: rate,
            slip,
            ..RrlConfig::default()
        })
    }

    #[test]
    fn burst_is_limited_with_slip() {
        let r = Rrl::new(&RrlConfig {
            responses_per_second: 10.0,
            slip: 2,
            window: 15,
            ..RrlConfig::default()
        });
        let src: IpAddr = "192.0.2.1".parse().unwrap();
        let mut slip = 0;
        let mut v = Vec::new();
        for _ in 0..110 {
            v.push(r.check(src, Class::Answer, b"\x01a\x00", 1, 1_000_000, &mut slip));
        }
        let pass = v.iter().filter(|x| **x == Verdict::Pass).count();
        let slips = v.iter().filter(|x| **x == Verdict::Slip).count();
        let drops = v.iter().filter(|x| **x == Verdict::Drop).count();
        assert_eq!(pass, 10);
        assert_eq!(slips, 50);
        assert_eq!(drops, 50);
        // Another /24, another name: unaffected.
        let other: IpAddr = "198.51.100.1".parse().unwrap();
        assert_eq!(
            r.check(other, Class::Answer, b"\x01a\x00", 1, 1_000_000, &mut slip),
            Verdict::Pass
        );
        assert_eq!(
            r.check(src, Class::Answer, b"\x01b\x00", 1, 1_000_000, &mut slip),
            Verdict::Pass
        );
        // The same /24 shares the bucket.
        let near: IpAddr = "192.0.2.200".parse().unwrap();
        assert_ne!(
            r.check(near, Class::Answer, b"\x01a\x00", 1, 1_000_000, &mut slip),
            Verdict::Pass
        );
        // The 100 limited responses are a debt of 10 s (BIND's window of 15 s): a second
        // later the source is still limited, once paid it is answered again.
        assert_ne!(
            r.check(src, Class::Answer, b"\x01a\x00", 1, 2_100_000, &mut slip),
            Verdict::Pass
        );
        assert_eq!(
            r.check(src, Class::Answer, b"\x01a\x00", 1, 12_500_000, &mut slip),
            Verdict::Pass
        );
    }

    #[test]
    fn by_default_a_flood_is_forgotten_a_second_after_it_stops() {
        // A flood forged in a victim's name (10,000 limited responses): with the default
        // window of a second, the victim is answered again a second after it ends (as Knot's
        // RRL), not the 15 s BIND's window would keep it limited.
        let r = rrl(10.0, 2);
        let victim: IpAddr = "192.0.2.1".parse().unwrap();
        let mut slip = 0;
        for i in 0..10_000u64 {
            r.check(
                victim,
                Class::Answer,
                b"\x01a\x00",
                1,
                1_000_000 + i * 100,
                &mut slip,
            );
        }
        let end = 1_000_000 + 10_000 * 100;
        assert_ne!(
            r.check(victim, Class::Answer, b"\x01a\x00", 1, end, &mut slip),
            Verdict::Pass,
            "limited while the flood lasts"
        );
        assert_eq!(
            r.check(
                victim,
                Class::Answer,
                b"\x01a\x00",
                1,
                end + 1_200_000,
                &mut slip
            ),
            Verdict::Pass,
            "answered 1.2 s after the flood"
        );
    }

    #[test]
    fn slip_zero_drops_all_and_exempt_passes() {
        let mut cfg = RrlConfig {
            responses_per_second: 1.0,
            slip: 0,
            ..RrlConfig::default()
        };
        cfg.exempt = vec!["10.0.0.0/8".into()];
        let r = Rrl::new(&cfg);
        let mut slip = 0;
        let src: IpAddr = "192.0.2.1".parse().unwrap();
        r.check(src, Class::Error, b"", 0, 0, &mut slip);
        for _ in 0..10 {
            assert_eq!(
                r.check(src, Class::Error, b"", 0, 0, &mut slip),
                Verdict::Drop
            );
        }
        let ex: IpAddr = "10.1.2.3".parse().unwrap();
        for _ in 0..10 {
            assert_eq!(
                r.check(ex, Class::Error, b"", 0, 0, &mut slip),
                Verdict::Pass
            );
        }
    }
}
