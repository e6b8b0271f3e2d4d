//! Flood defences as modules of the query pipeline ([`crate::query::module`]), and the plan
//! that runs them in order at each point:
//!
//! | module | file | points |
//! |---|---|---|
//! | block map | [`block`] | `on_accept`, `before_parse` |
//! | DNS cookies (RFC 7873, 9018) | [`cookies`] | `after_parse` |
//! | suspects (unproven evidence: TC=1) | [`suspects`] | `after_parse`, `after_answer` |
//! | shield rules (the tenant's) | [`rules`] | `after_parse`, `after_answer` (held sources) |
//! | random-subdomain flood | [`random_subdomain`] | `after_answer` |
//! | response rate limiting | [`rrl`] | `after_answer` |
//!
//! No module blocks on what UDP alone shows (see [`crate::query::module`]'s evidence): the
//! rules' escalations block only proven sources (TCP, a valid cookie) and make suspects of
//! the rest; the random-subdomain defence, which counts unproven UDP only, only ever makes
//! suspects. Every automatic block meets the block map's policy (`[global] never_block`,
//! the node's own peers, `[block] min_prefix_v4`/`min_prefix_v6`).
//!
//! [`Shared`] holds what all workers share (lock-free tables, the block map, counters, the
//! event aggregator); each UDP worker, TCP connection and TCP accept loop owns a [`Plan`]:
//! its instance of every module that is on, and the [`Env`] they share (clocks read once
//! per batch, the worker's event recorder). A new defence is one file with a type that
//! implements [`QueryModule`], a field here and a line in each point it uses.

pub mod block;
pub mod cookies;
pub mod policy;
pub mod random_subdomain;
pub mod rrl;
pub mod rules;
pub mod suspects;

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use shield::block::BlockMap;
use shield::events::Aggregator;
use shield::metrics::Samples;

use crate::config::defence::{self as config, DefenceConfig};
use crate::query::module::{Answered, Env, Parsed, QueryModule, Step, Transport};
use cookies::Cookies;

/// Event reason codes written with dnsd's events.
pub mod reason {
    /// The source is in the block map.
    pub const BLOCKED: u16 = 1000;
    /// Response rate limiting.
    pub const RRL: u16 = 1001;
    /// The random-subdomain defence.
    pub const RANDOM_SUBDOMAIN: u16 = 1002;
    /// A required cookie was missing or bad.
    pub const COOKIE: u16 = 1003;
    /// RRL in XDP (the answer fast path): counted per source prefix from the kernel's buckets.
    pub const XDP_RRL: u16 = 1004;
    /// A suspect's query truncated (unproven evidence: TC=1).
    pub const SUSPECT: u16 = 1005;
}

/// Defence state shared by every worker.
pub struct Shared {
    /// The configuration.
    pub cfg: DefenceConfig,
    /// The block map (shared with the XDP mirror and Redis sync when configured).
    pub blocks: Arc<BlockMap>,
    /// Response rate limiting, when on.
    pub rrl: Option<rrl::Rrl>,
    /// Cookies, when on.
    pub cookies: Option<Arc<Cookies>>,
    /// The random-subdomain defence, when on.
    pub random_subdomain: Option<random_subdomain::RandomSubdomain>,
    /// The event aggregator.
    pub events: Arc<Aggregator>,
    /// Messages dropped because the source is blocked, by who decided: local, operator, peer.
    pub blocked: [AtomicU64; 3],
    /// Escalations that the block map took as blocks (proven evidence).
    pub escalations: AtomicU64,
    /// Escalations that made suspects (unproven evidence).
    pub suspected: AtomicU64,
    /// The suspects' truncation budget and counters.
    pub suspects: suspects::Suspects,
    /// Tenant of blocks seen before a zone is known (`[events] connection_tenant`).
    pub connection_tenant: u32,
    /// The shield rules (`[rules] file`), when configured.
    pub rules: Option<Arc<shield::rules::RuleSet>>,
    /// What the rules decided.
    pub rule_counters: rules::Counters,
}

/// The configured cookie secrets (checked by the config loader): current and previous.
pub fn configured_secrets(c: &config::CookieConfig) -> (Option<[u8; 16]>, Option<[u8; 16]>) {
    let parse = |s: &Option<String>| s.as_deref().and_then(|s| cookies::parse_secret(s).ok());
    (parse(&c.secret), parse(&c.previous_secret))
}

impl Shared {
    /// Defence state from its config.
    pub fn new(cfg: DefenceConfig, blocks: Arc<BlockMap>, events: Arc<Aggregator>) -> Arc<Shared> {
        let cookies = cfg.cookies.enabled.then(|| {
            let (secret, previous) = configured_secrets(&cfg.cookies);
            Cookies::new(secret, previous)
        });
        Arc::new(Shared {
            suspects: suspects::Suspects::new(
                &cfg.suspects,
                cfg.rrl.ipv4_prefix,
                cfg.rrl.ipv6_prefix,
            ),
            suspected: AtomicU64::new(0),
            rrl: cfg.rrl.enabled.then(|| rrl::Rrl::new(&cfg.rrl)),
            random_subdomain: cfg.random_subdomain.enabled.then(|| {
                random_subdomain::RandomSubdomain::new(&cfg.random_subdomain, &cfg.rrl.exempt)
            }),
            cookies,
            cfg,
            blocks,
            events,
            blocked: Default::default(),
            escalations: AtomicU64::new(0),
            connection_tenant: 0,
            rules: None,
            rule_counters: rules::Counters::default(),
        })
    }

    /// The same, with the shield rules deciding at `after_parse`.
    pub fn with_rules(self: Arc<Self>, rules: Arc<shield::rules::RuleSet>) -> Arc<Shared> {
        match Arc::try_unwrap(self) {
            Ok(mut s) => {
                s.rules = Some(rules);
                Arc::new(s)
            }
            Err(a) => a,
        }
    }

    /// The same, recording blocks seen before a zone is known under `tenant`.
    pub fn with_connection_tenant(self: Arc<Self>, tenant: u32) -> Arc<Shared> {
        match Arc::try_unwrap(self) {
            Ok(mut s) => {
                s.connection_tenant = tenant;
                Arc::new(s)
            }
            Err(a) => a,
        }
    }

    /// A plan: this worker's instance of every module that is on.
    pub fn plan(self: &Arc<Self>) -> Plan {
        Plan {
            env: Env::new(self.events.recorder()),
            block: Some(block::BlockCheck::new(self)),
            cookies: self
                .cookies
                .as_ref()
                .map(|_| cookies::CookieCheck::new(self)),
            random_subdomain: self
                .random_subdomain
                .as_ref()
                .map(|_| random_subdomain::Module::new(self)),
            rrl: self.rrl.as_ref().map(|_| rrl::Module::new(self)),
            rules: rules::Module::new(self),
            suspects: Some(suspects::Module::new(self)),
            shared: Arc::clone(self),
        }
    }

    /// A plan of the cookie check alone (what answers depend on, without rates or blocks):
    /// the XDP answer compiler's.
    pub fn cookie_plan(self: &Arc<Self>) -> Plan {
        Plan {
            env: Env::new(self.events.recorder()),
            block: None,
            cookies: self
                .cookies
                .as_ref()
                .map(|_| cookies::CookieCheck::new(self)),
            random_subdomain: None,
            rrl: None,
            rules: None,
            suspects: None,
            shared: Arc::clone(self),
        }
    }

    /// True when queries must carry a valid cookie somewhere (cookies on).
    pub fn cookies_on(&self) -> bool {
        self.cookies.is_some()
    }
}

/// The defences' counters (`dnsd_*`), for `ctl stats` and /metrics alike.
impl shield::metrics::Source for Shared {
    fn collect(&self, out: &mut Samples) {
        let l = |a: &AtomicU64| a.load(Ordering::Relaxed);
        for (i, o) in ["local", "operator", "peer"].iter().enumerate() {
            out.counter(
                format!("blocked.{o}"),
                "dnsd_blocked_total",
                format!("origin=\"{o}\""),
                "Messages dropped before parsing (or TCP connections closed at accept) because the source is blocked, by who decided.",
                l(&self.blocked[i]),
            );
        }
        out.counter(
            "escalations",
            "dnsd_escalations_total",
            "",
            "Sources blocked by dnsd's escalations (proven evidence: TCP or a valid cookie).",
            l(&self.escalations),
        );
        out.counter(
            "suspected",
            "dnsd_suspected_total",
            "",
            "Sources made suspects by dnsd's escalations (unproven UDP: never a block).",
            l(&self.suspected),
        );
        self.suspects.collect(out);
        if let Some(r) = &self.rrl {
            r.collect(out);
        }
        if let Some(r) = &self.rules {
            let c = &self.rule_counters;
            out.counter(
                "rules.checked",
                "dnsd_rules_checked_total",
                "",
                "Queries the shield rules looked at (their tenant has rules, or a [global] deny list).",
                {
                    // The engine counts its checks per thread; their sum, not a shared atomic.
                    let t = shield::rules::tenant_counts();
                    t.top.iter().map(|(_, n)| n[0]).sum::<u64>() + t.other[0]
                },
            );
            for (what, v) in [
                ("dropped", &c.dropped),
                ("refused", &c.refused),
                ("challenged", &c.challenged),
                ("rate_limited", &c.rate_limited),
                ("slipped", &c.slipped),
                ("held_truncated", &c.held_truncated),
                ("held_answered", &c.held_answered),
                ("allowed", &c.allowed),
                ("escalated", &c.escalated),
                ("suspected", &c.suspected),
            ] {
                out.counter(
                    format!("rules.{what}"),
                    "dnsd_rules_verdicts_total",
                    format!("outcome=\"{what}\""),
                    "Queries by what a shield rule made of them (dropped and refused: deny; rate_limited and slipped: over a rule's rate; held_truncated: a held source's UDP answered TC=1, for a name that does not exist or a wildcard's; held_answered: whole, for a name that exists).",
                    l(v),
                );
            }
            shield::metrics::Source::collect(&**r, out);
        }
        if let Some(k) = &self.cookies {
            k.collect(out);
        }
        if let Some(w) = &self.random_subdomain {
            w.collect(out, shield::clock::unix_ms());
        }
    }
}

/// Returns early from a point with the first step that is not [`Step::Continue`].
macro_rules! step {
    ($e:expr) => {
        if let Some(s) = $e
            && s != Step::Continue
        {
            return s;
        }
    };
}

/// One worker's modules, in pipeline order, and their shared environment.
pub struct Plan {
    env: Env,
    block: Option<block::BlockCheck>,
    cookies: Option<cookies::CookieCheck>,
    random_subdomain: Option<random_subdomain::Module>,
    rrl: Option<rrl::Module>,
    rules: Option<rules::Module>,
    suspects: Option<suspects::Module>,
    shared: Arc<Shared>,
}

impl Plan {
    /// Reads the clocks and lets modules pick up what changed (once per batch).
    #[inline]
    pub fn refresh(&mut self) {
        self.env.tick();
        if let Some(c) = &mut self.cookies {
            c.refresh();
        }
    }

    /// The shared state.
    pub fn shared(&self) -> &Arc<Shared> {
        &self.shared
    }

    /// `on_accept`: a TCP connection from `src`.
    #[inline]
    pub fn on_accept(&mut self, src: std::net::IpAddr) -> Step {
        let env = &mut self.env;
        step!(self.block.as_mut().map(|m| m.on_accept(env, src)));
        Step::Continue
    }

    /// `before_parse`: a message from `src` over `transport`.
    #[inline(always)]
    pub fn before_parse(&mut self, src: std::net::IpAddr, transport: Transport) -> Step {
        let env = &mut self.env;
        env.suspect = None;
        env.suspect_tenants = shield::block::TenantSet::default();
        step!(
            self.block
                .as_mut()
                .map(|m| m.before_parse(env, src, transport))
        );
        Step::Continue
    }

    /// What `before_parse` found of the message's source, for a query of `zone` (its id) of
    /// `tenant`: a suspect of this scope. A random-subdomain suspect (scope `nxdomain`) is one
    /// only in a zone under such a flood now: a resolver relaying a flood on one tenant's
    /// zone keeps every other zone's NXDOMAIN answers whole (they were truncated, and past
    /// the suspects' budget dropped, in every zone). A suspect of one tenant's rules is one
    /// only in that tenant's zones.
    #[inline]
    pub fn suspect(&self, zone: Option<u32>, tenant: Option<u32>) -> Option<shield::block::Scope> {
        let tenants = &self.env.suspect_tenants;
        if tenant.is_some_and(|t| tenants.contains(t)) {
            return Some(shield::block::Scope::Dns);
        }
        if tenants.is_only() {
            return None;
        }
        match self.env.suspect {
            Some(shield::block::Scope::Nxdomain) => {
                let flooded = |z| {
                    self.shared
                        .random_subdomain
                        .as_ref()
                        .is_some_and(|w| w.attacked_until(z) > self.env.now_ms)
                };
                zone.filter(|&z| flooded(z))
                    .map(|_| shield::block::Scope::Nxdomain)
            }
            s => s,
        }
    }

    /// `after_parse`: the query parsed, its zone and tenant known.
    #[inline(always)]
    pub fn after_parse(&mut self, p: &mut Parsed<'_>) -> Step {
        let env = &mut self.env;
        step!(self.cookies.as_mut().map(|m| m.after_parse(env, p)));
        step!(self.suspects.as_mut().map(|m| m.after_parse(env, p)));
        step!(self.rules.as_mut().map(|m| m.after_parse(env, p)));
        Step::Continue
    }

    /// The cookie check alone, for a message that names no zone: `p.cookie` and
    /// `p.cookie_out` set where the message carries a cookie and cookies are on.
    pub fn check_cookie(&mut self, p: &mut Parsed<'_>) {
        if let Some(m) = self.cookies.as_mut() {
            let _ = m.after_parse(&mut self.env, p);
        }
    }

    /// `after_answer`: the answer written.
    #[inline(always)]
    pub fn after_answer(&mut self, p: &Parsed<'_>, a: &Answered<'_>) -> Step {
        let env = &mut self.env;
        step!(self.rules.as_mut().map(|m| m.after_answer(env, p, a)));
        step!(self.suspects.as_mut().map(|m| m.after_answer(env, p, a)));
        step!(
            self.random_subdomain
                .as_mut()
                .map(|m| m.after_answer(env, p, a))
        );
        step!(self.rrl.as_mut().map(|m| m.after_answer(env, p, a)));
        Step::Continue
    }

    /// One more truncated reply to `src` within the suspects' budget (else drop it).
    #[inline]
    pub fn admit_truncated(&self, src: std::net::IpAddr) -> bool {
        self.shared.suspects.admit(src, self.env.now_us)
    }
}
