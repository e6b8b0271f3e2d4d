//! The rule engine shared by DNS and HTTP: per-tenant prepared rules answering "what applies to this source and request".
//!
//! # Flow
//!
//! A rules file (TOML, see [`schema`](self#rules-file)) is compiled once per change into a
//! [`Prepared`]: per tenant, allow and deny prefix tables ([`PrefixMap`]), known-good crawler
//! ranges, ASN deny lists, request rules with compiled attribute matchers, a rate limit and an
//! escalation threshold. A [`RuleSet`] holds the current `Prepared` behind an atomic pointer
//! (`arc-swap`) together with the state that outlives reloads ([`RuleState`]: rate-limit buckets
//! and escalation counters in bounded lock-free tables, and the block map to escalate into).
//! A reload that fails leaves the last good rules in place.
//!
//! [`RuleSet::check`] evaluates, with early exits, in this order:
//!
//! 1. tenant lookup: a tenant without rules costs one bounds check and one `Option` test;
//! 2. `allow` prefixes → [`Action::Allow`] (skips everything else);
//! 3. known-good crawlers, when the tenant allows them → [`Action::Allow`];
//! 4. `deny` prefixes → [`Action::Deny`]; 5. `deny_asn` → [`Action::Deny`];
//! 6. request rules in file order: the first matching allow/deny/challenge rule decides; a
//!    matching `rate_limit` rule decides only when its own limit is exceeded;
//! 7. the tenant's rate limit → [`Action::RateLimit`]; otherwise [`Action::Pass`].
//!
//! A deny, rate-limit or challenge verdict also counts towards the tenant's escalation
//! threshold: the `after`-th such verdict for one source within `window_secs` inserts the
//! source (or its prefix) into the block map with [`Origin::Local`] for `block_secs`, and the
//! verdict says so ([`Verdict::escalated`]). What the request proved ([`Request::evidence`])
//! decides what that entry is: proven requests (TCP, a valid DNS cookie, HTTP) are counted on
//! their own and block; unproven ones (UDP without a valid cookie: the address may be forged)
//! are counted apart and only make the source a suspect (see [`crate::block`]), so that
//! spoofed packets can neither block an address nor push a real client over the threshold.
//! Escalations into never-block or too short prefixes are refused by the block map's policy.
//!
//! Requests are abstract: the caller implements [`Request`] (`attr(name) -> Option<&str>`), e.g.
//! `path`, `method`, `host`, `user_agent`, `header:<name>` for HTTP, `qname`, `qtype` for DNS.
//! shield parses neither protocol. The check allocates nothing and takes no lock.
//!
//! # Rules file
//!
//! ```toml
//! [known_bots]                      # known-good crawler range files (Google/Bing JSON shape)
//! files = ["googlebot.json", "bingbot.json"]   # paths relative to this file
//!
//! [asn]
//! file = "asn.csv"                  # `prefix,asn` lines
//!
//! [[list]]                          # a named prefix list, referenced as "@scanners"
//! name = "scanners"
//! prefixes = ["192.0.2.0/24"]
//! file = "scanners.txt"             # optional, one prefix per line
//!
//! [[tenant]]
//! id = 7                            # 1 ..= 1048575 (0: zones and sites that name none)
//! name = "acme"                     # optional
//! allow = ["198.51.100.0/24"]
//! deny = ["203.0.113.0/24", "@scanners"]
//! deny_asn = [64496]
//! allow_known_bots = true
//! rate_limit = { per_second = 20.0, burst = 40 }           # v4_prefix = 32, v6_prefix = 128
//! escalate = { after = 50, window_secs = 10, block_secs = 600 }   # on = ["deny", "rate_limit"]
//!
//! [[tenant.rule]]
//! name = "no-wp-login"
//! action = "deny"                   # allow | deny | challenge | rate_limit (needs `rate`)
//! code = 101                        # optional reason code for events (default 100 + index)
//! when = [{ attr = "path", prefix = "/wp-login" }, { attr = "method", one_of = ["POST"] }]
//! source = ["@scanners"]            # optional: only for these sources
//! ```
//!
//! A condition has `attr` and exactly one of `exact`, `prefix`, `suffix`, `contains`,
//! `one_of`, `regex`, `present`, or one of the numeric `lt`, `le`, `gt`, `ge`; `not = true`
//! inverts it. An absent attribute matches nothing (except `present = false`). Regexes are
//! compiled once; those on one attribute also share a `RegexSet` that rules them all out in
//! one pass. Every error names `file:line:col`.
//!
//! ## DNS
//!
//! dnsd reads the same file: a zone's `tenant` picks the rules its queries meet (zones and
//! sites that name none are tenant 0: no rules of their own, only `[global]`). The DNS attributes are in [`attr`]
//! (`qname`, `qtype`, `qclass`, `opcode`, `transport`, `edns`, `do`, `cookie`, `udp_size`,
//! `local_address`); their values in the file are normalised as dnsd formats them (`qname`
//! lower-case with the trailing dot, and its `suffix` matches whole labels; mnemonics
//! upper-case). Two keys are for DNS only:
//!
//! ```toml
//! [[tenant.rule]]
//! name = "no-any"
//! action = "deny"
//! rcode = "REFUSED"                 # answer with this rcode instead of dropping
//! when = [{ attr = "qtype", one_of = ["ANY"] }]
//!
//! [[tenant.rule]]
//! name = "slow-txt"
//! action = "rate_limit"
//! rate = { per_second = 5.0, burst = 10 }
//! slip = 2                          # one limited query in 2 answered TC=1 (0: none)
//! when = [{ attr = "qtype", one_of = ["TXT"] }, { attr = "udp_size", ge = 4000 }]
//!
//! [global]                          # every tenant of both daemons, and the XDP guard
//! deny = ["203.0.113.0/24", "@scanners"]   # dropped in XDP where the guard runs
//! allow = ["192.0.2.53/32"]         # exempt from the XDP rate limit (never from a block)
//! never_block = ["192.0.2.1/32"]    # no escalation, suspect list or peer record reaches these
//! ```
//!
//! A `[global] deny` entry that overlaps a `never_block` one is refused at load.

mod error;
mod index;
mod schema;
mod sources;
mod tenants;

pub use error::RulesError;
pub use schema::rcode_by_name;
pub use sources::{AsnTable, load_crawler_ranges, parse_crawler_ranges, parse_prefix_list};
pub use tenants::{KINDS as TENANT_KINDS, TOP_TENANTS, TenantCounts, tenant_counts};

use crate::block::{BlockEntry, BlockMap, Evidence, InsertOutcome, Origin, Reason};
use crate::prefix::{PrefixMap, PrefixSet};
use crate::ratelimit::{Limit, RateLimiter, TableConfig, TableStats, WindowCounter, source_key};
use crate::util::StripedCounter;
use arc_swap::ArcSwap;
use regex::{Regex, RegexSet};
use serde::{Deserialize, Serialize};
use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// A tenant's id as configured (1 ..= [`MAX_TENANT_ID`]; 0 is "no tenant": zones and sites that name none).
pub type TenantId = u32;

/// Largest tenant id a rules file may use (tenants are indexed directly by id).
pub const MAX_TENANT_ID: TenantId = (1 << 20) - 1;

/// Well-known attribute names; callers may use any others (`header:<lowercase name>` for headers).
pub mod attr {
    /// HTTP request path.
    pub const PATH: &str = "path";
    /// HTTP method.
    pub const METHOD: &str = "method";
    /// HTTP Host.
    pub const HOST: &str = "host";
    /// HTTP User-Agent.
    pub const USER_AGENT: &str = "user_agent";
    /// Prefix of header attributes: `header:x-forwarded-for`.
    pub const HEADER_PREFIX: &str = "header:";
    /// DNS query name: lower-case presentation form with the trailing dot (`www.example.com.`).
    pub const QNAME: &str = "qname";
    /// DNS query type mnemonic (`A`, `AAAA`, `ANY`..., `TYPE65000` for others).
    pub const QTYPE: &str = "qtype";
    /// DNS query class mnemonic (`IN`, `CH`..., `CLASS3` for others).
    pub const QCLASS: &str = "qclass";
    /// DNS opcode mnemonic (`QUERY`, `NOTIFY`, `UPDATE`..., `OPCODE7` for others).
    pub const OPCODE: &str = "opcode";
    /// The transport a DNS query came over: `udp` or `tcp`.
    pub const TRANSPORT: &str = "transport";
    /// Present (its EDNS version) when the DNS query has an OPT record.
    pub const EDNS: &str = "edns";
    /// Present (`1`) when the DNS query sets DO.
    pub const DO: &str = "do";
    /// What the DNS query's cookie proved: `none`, `client_only`, `valid`, `invalid`.
    pub const COOKIE: &str = "cookie";
    /// The DNS query's EDNS UDP payload size (present with EDNS): compare with `lt`/`ge`.
    pub const UDP_SIZE: &str = "udp_size";
    /// The service address the DNS query was sent to.
    pub const LOCAL_ADDRESS: &str = "local_address";

    /// The bit of a well-known attribute in [`super::Prepared::reads`] (other names share
    /// [`OTHER`]).
    pub fn bit(name: &str) -> u32 {
        match name {
            QNAME => BIT_QNAME,
            QTYPE => BIT_QTYPE,
            QCLASS => BIT_QCLASS,
            OPCODE => BIT_OPCODE,
            TRANSPORT => BIT_TRANSPORT,
            EDNS => BIT_EDNS,
            DO => BIT_DO,
            COOKIE => BIT_COOKIE,
            UDP_SIZE => BIT_UDP_SIZE,
            LOCAL_ADDRESS => BIT_LOCAL_ADDRESS,
            _ => OTHER,
        }
    }

    /// [`bit`] of [`QNAME`].
    pub const BIT_QNAME: u32 = 1;
    /// [`bit`] of [`QTYPE`].
    pub const BIT_QTYPE: u32 = 1 << 1;
    /// [`bit`] of [`QCLASS`].
    pub const BIT_QCLASS: u32 = 1 << 2;
    /// [`bit`] of [`OPCODE`].
    pub const BIT_OPCODE: u32 = 1 << 3;
    /// [`bit`] of [`TRANSPORT`].
    pub const BIT_TRANSPORT: u32 = 1 << 4;
    /// [`bit`] of [`EDNS`].
    pub const BIT_EDNS: u32 = 1 << 5;
    /// [`bit`] of [`DO`].
    pub const BIT_DO: u32 = 1 << 6;
    /// [`bit`] of [`COOKIE`].
    pub const BIT_COOKIE: u32 = 1 << 7;
    /// [`bit`] of [`UDP_SIZE`].
    pub const BIT_UDP_SIZE: u32 = 1 << 8;
    /// [`bit`] of [`LOCAL_ADDRESS`].
    pub const BIT_LOCAL_ADDRESS: u32 = 1 << 9;

    /// The bit shared by every attribute name not listed in [`bit`].
    pub const OTHER: u32 = 1 << 31;
}

/// Reason codes of the built-in checks (rules use their `code`, default 100 + index).
pub mod codes {
    /// Source in the tenant's allow list.
    pub const ALLOW_LIST: u16 = 1;
    /// Source is a known-good crawler.
    pub const KNOWN_BOT: u16 = 2;
    /// Source in a deny list.
    pub const DENY_LIST: u16 = 3;
    /// Source announced by a denied ASN.
    pub const DENY_ASN: u16 = 4;
    /// Tenant-wide rate limit exceeded.
    pub const RATE_LIMIT: u16 = 5;
    /// Source in the rules file's `[global]` deny list (every tenant).
    pub const GLOBAL_DENY: u16 = 6;
    /// First code given to request rules without an explicit one.
    pub const RULE_BASE: u16 = 100;
}

/// What the caller knows about a request, by attribute name; shield never parses wire formats.
pub trait Request {
    /// The value of attribute `name`, if the request has it.
    fn attr(&self, name: &str) -> Option<&str>;

    /// The value of attribute `name` whose [`attr::bit`] is `bit` (computed once, when the
    /// rules were prepared): a caller with many attributes answers by `bit` without
    /// comparing names. The default asks [`attr`](Self::attr).
    #[inline]
    fn attr_by_bit(&self, bit: u32, name: &str) -> Option<&str> {
        let _ = bit;
        self.attr(name)
    }

    /// The `n`-th value of an attribute a request may carry more than once (an HTTP header
    /// sent twice); `n = 0` is [`attr`](Self::attr).
    fn attr_nth(&self, name: &str, n: usize) -> Option<&str> {
        if n == 0 { self.attr(name) } else { None }
    }

    /// True when some attribute has more than one value: a condition then matches when any
    /// value matches (a negated one when none does), so that a second copy of a header
    /// cannot hide a value from the rules.
    fn multi_valued(&self) -> bool {
        false
    }

    /// What proves the request's source owns its address: an escalation on proven requests
    /// blocks, on unproven ones makes a suspect. The default is unproven (UDP): a caller
    /// that forgets to say can never make a block.
    fn evidence(&self) -> Evidence {
        Evidence::Udp
    }
}

/// A request with no attributes: only source checks apply.
impl Request for () {
    fn attr(&self, _: &str) -> Option<&str> {
        None
    }
}

/// A request given as a few `(name, value)` pairs (tests, simple callers).
#[derive(Clone, Copy, Debug)]
pub struct Attrs<'a>(pub &'a [(&'a str, &'a str)]);

impl Request for Attrs<'_> {
    fn attr(&self, name: &str) -> Option<&str> {
        self.0.iter().find(|(n, _)| *n == name).map(|(_, v)| *v)
    }
}

/// What a verdict tells the caller to do.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Action {
    /// Nothing applied: serve normally.
    Pass,
    /// Explicitly allowed: serve, skipping the remaining checks.
    Allow,
    /// Refuse (HTTP 403, DNS drop or REFUSED).
    Deny,
    /// Ask the client to prove itself (HTTP challenge, DNS TC=1 / cookie).
    Challenge,
    /// Over a rate limit (HTTP 429, DNS drop or slip).
    RateLimit,
}

/// What a verdict's escalation did to the source.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum Escalated {
    /// No escalation (below the threshold, or past it already).
    #[default]
    No,
    /// Unproven requests crossed the threshold: the source is a suspect on this node.
    Suspect,
    /// Proven requests crossed the threshold: the source is blocked.
    Blocked,
    /// The threshold was crossed but the block map's policy refused the prefix (never-block,
    /// too short).
    Refused,
}

/// The outcome of a check: action, reason code and text, and whether the source was escalated.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Verdict {
    /// What to do.
    pub action: Action,
    /// Reason code (see [`codes`]); events carry it.
    pub code: u16,
    /// Short reason text (rule name, list name...).
    pub reason: Reason,
    /// What this verdict's escalation did (a block, a suspect, a refusal, or nothing).
    pub escalated: Escalated,
    /// For a rate limit: milliseconds until the source's next request would conform (a
    /// Retry-After); 0 otherwise.
    pub retry_after_ms: u32,
    /// DNS: the rcode a deny answers with (`rcode = "REFUSED"`); `None`: the query is dropped.
    pub dns_rcode: Option<u16>,
    /// DNS: one rate-limited query in `slip` is answered TC=1 (BADCOOKIE to a cookie
    /// client) instead of dropped, as RRL slips; 0 never.
    pub slip: u8,
}

impl Verdict {
    /// Nothing applied.
    pub const PASS: Verdict = Verdict {
        action: Action::Pass,
        code: 0,
        reason: Reason::EMPTY,
        escalated: Escalated::No,
        retry_after_ms: 0,
        dns_rcode: None,
        slip: DEFAULT_SLIP,
    };

    pub(crate) fn new(action: Action, code: u16, reason: &str) -> Self {
        Verdict {
            action,
            code,
            reason: Reason::new(reason),
            escalated: Escalated::No,
            retry_after_ms: 0,
            dns_rcode: None,
            slip: DEFAULT_SLIP,
        }
    }
}

/// The time a check runs at: wall clock for escalations and block expiry, monotonic for rates.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Now {
    /// Unix milliseconds ([`crate::clock::unix_ms`]).
    pub unix_ms: u64,
    /// Monotonic microseconds ([`crate::clock::mono_us`]).
    pub mono_us: u64,
}

impl Now {
    /// Reads both clocks.
    pub fn read() -> Self {
        Now {
            unix_ms: crate::clock::unix_ms(),
            mono_us: crate::clock::mono_us(),
        }
    }
}

/// One rate-limited DNS query in this many is slipped unless a rule says otherwise.
pub const DEFAULT_SLIP: u8 = 2;

// ---------------------------------------------------------------------------------------------
// Prepared (compiled) rules.

#[derive(Clone, Copy, Debug)]
pub(crate) struct RateSpec {
    pub(crate) limit: Limit,
    pub(crate) v4: u8,
    pub(crate) v6: u8,
}

#[derive(Clone, Copy, Debug)]
pub(crate) struct Escalation {
    pub(crate) after: u32,
    pub(crate) window_ms: u64,
    pub(crate) ttl: Duration,
    pub(crate) on_deny: bool,
    pub(crate) on_rate_limit: bool,
    pub(crate) on_challenge: bool,
    pub(crate) v4: u8,
    pub(crate) v6: u8,
    pub(crate) reason: Reason,
}

#[derive(Debug)]
pub(crate) enum Matcher {
    Exact(Box<str>),
    Prefix(Box<str>),
    Suffix(Box<str>),
    /// A `qname` suffix of whole labels, normalised ("example.com."): the name itself or a
    /// name below it, never "badexample.com.".
    LabelSuffix(Box<str>),
    Contains(Box<str>),
    OneOf(Box<[Box<str>]>),
    OneOfSet(hashbrown::HashSet<Box<str>>),
    Regex {
        re: Regex,
        /// The attribute's shared `RegexSet`, when it has one.
        prefilter: Option<u8>,
        /// Literals a match must start (or end) with: most values are ruled out without
        /// running the regex.
        anchors: Option<Box<Anchors>>,
    },
    Present(bool),
    /// The value read as a decimal number, compared; not a number matches nothing.
    Num(NumOp, u64),
}

/// What an anchored regex's matches must start or end with (from its syntax): the longest
/// literal every match shares at that end, so one short comparison rules a value out.
#[derive(Debug)]
pub(crate) struct Anchors {
    /// A match starts with this (the pattern begins with `^`); empty: not known.
    start: Box<[u8]>,
    /// A match ends with this (the pattern ends with `$`); empty: not known.
    end: Box<[u8]>,
}

impl Anchors {
    /// The anchors of `pattern`, or `None` when it has none worth testing.
    pub(crate) fn of(pattern: &str) -> Option<Box<Anchors>> {
        use regex_syntax::hir::Look;
        use regex_syntax::hir::literal::{ExtractKind, Extractor};
        let hir = regex_syntax::Parser::new().parse(pattern).ok()?;
        let props = hir.properties();
        let side = |prefix: bool, anchored: bool| -> Box<[u8]> {
            if !anchored {
                return Box::default();
            }
            let mut ex = Extractor::new();
            ex.kind(if prefix {
                ExtractKind::Prefix
            } else {
                ExtractKind::Suffix
            });
            let seq = ex.extract(&hir);
            let common = if prefix {
                seq.longest_common_prefix()
            } else {
                seq.longest_common_suffix()
            };
            common.unwrap_or_default().into()
        };
        let start = side(true, props.look_set_prefix().contains(Look::Start));
        let end = side(false, props.look_set_suffix().contains(Look::End));
        (!start.is_empty() || !end.is_empty()).then(|| Box::new(Anchors { start, end }))
    }

    /// False when `v` cannot match.
    #[inline]
    fn admits(&self, v: &[u8]) -> bool {
        // Byte loops: the literals are short, and a call to memcmp costs more than them.
        let (s, e) = (&self.start[..], &self.end[..]);
        v.len() >= s.len()
            && v.len() >= e.len()
            && v.iter().zip(s).all(|(a, b)| a == b)
            && v[v.len() - e.len()..].iter().zip(e).all(|(a, b)| a == b)
    }
}

/// A numeric comparison (`lt`, `le`, `gt`, `ge`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum NumOp {
    Lt,
    Le,
    Gt,
    Ge,
}

/// A decimal number without sign or spaces (at most 19 digits).
#[inline]
fn parse_u64(v: &str) -> Option<u64> {
    let b = v.as_bytes();
    if b.is_empty() || b.len() > 19 {
        return None;
    }
    let mut n = 0u64;
    for &c in b {
        if !c.is_ascii_digit() {
            return None;
        }
        n = n * 10 + u64::from(c - b'0');
    }
    Some(n)
}

#[derive(Debug)]
pub(crate) struct Condition {
    pub(crate) attr: Box<str>,
    /// `attr`'s [`attr::bit`].
    pub(crate) bit: u32,
    pub(crate) matcher: Matcher,
    pub(crate) negate: bool,
}

/// Most attributes per tenant that get a shared `RegexSet` prefilter.
pub(crate) const MAX_PREFILTERS: usize = 16;

impl Condition {
    #[inline]
    fn matches<R: Request + ?Sized>(
        &self,
        req: &R,
        prefilters: &[(Box<str>, RegexSet)],
        cache: &mut [u8; MAX_PREFILTERS],
    ) -> bool {
        if req.multi_valued() && !matches!(self.matcher, Matcher::Present(_)) {
            let mut any = false;
            for n in 0..MAX_VALUES {
                let Some(v) = req.attr_nth(&self.attr, n) else {
                    break;
                };
                // The shared prefilter caches one value per attribute: not used here.
                if self.value_matches(v, &[], &mut [0; MAX_PREFILTERS], false) {
                    any = true;
                    break;
                }
            }
            return any != self.negate;
        }
        let value = req.attr_by_bit(self.bit, &self.attr);
        let m = match value {
            None => matches!(self.matcher, Matcher::Present(false)),
            Some(v) => self.value_matches(v, prefilters, cache, true),
        };
        m != self.negate
    }

    /// Whether a present value matches.
    #[inline]
    fn value_matches(
        &self,
        v: &str,
        prefilters: &[(Box<str>, RegexSet)],
        cache: &mut [u8; MAX_PREFILTERS],
        use_prefilter: bool,
    ) -> bool {
        match &self.matcher {
            Matcher::Present(want) => *want,
            Matcher::Exact(s) => v == &**s,
            Matcher::Prefix(s) => v.starts_with(&**s),
            Matcher::Suffix(s) => v.ends_with(&**s),
            Matcher::LabelSuffix(s) => {
                &**s == "."
                    || v == &**s
                    || (v.len() > s.len()
                        && v.ends_with(&**s)
                        && v.as_bytes()[v.len() - s.len() - 1] == b'.')
            }
            Matcher::Num(op, n) => match parse_u64(v) {
                Some(x) => match op {
                    NumOp::Lt => x < *n,
                    NumOp::Le => x <= *n,
                    NumOp::Gt => x > *n,
                    NumOp::Ge => x >= *n,
                },
                None => false,
            },
            Matcher::Contains(s) => v.contains(&**s),
            Matcher::OneOf(set) => set.iter().any(|s| v == &**s),
            Matcher::OneOfSet(set) => set.contains(v),
            Matcher::Regex {
                re,
                prefilter,
                anchors,
            } => {
                if let Some(a) = anchors
                    && !a.admits(v.as_bytes())
                {
                    return false;
                }
                let ruled_out = match prefilter {
                    Some(i) if use_prefilter => {
                        let i = *i as usize;
                        if cache[i] == 0 {
                            cache[i] = if prefilters[i].1.is_match(v) { 2 } else { 1 };
                        }
                        cache[i] == 1
                    }
                    _ => false,
                };
                !ruled_out && re.is_match(v)
            }
        }
    }
}

/// Most values of one attribute a condition looks at.
const MAX_VALUES: usize = 64;

#[derive(Debug)]
pub(crate) struct Rule {
    pub(crate) index: u32,
    pub(crate) verdict: Verdict,
    pub(crate) conds: Vec<Condition>,
    pub(crate) source: Option<PrefixSet>,
    pub(crate) rate: Option<RateSpec>,
}

#[derive(Debug)]
pub(crate) struct Tenant {
    pub(crate) id: TenantId,
    pub(crate) allow: PrefixSet,
    pub(crate) allow_bots: bool,
    pub(crate) deny: PrefixMap<u16>,
    pub(crate) deny_verdicts: Vec<Verdict>,
    pub(crate) deny_asn: Vec<u32>,
    pub(crate) rules: Vec<Rule>,
    pub(crate) prefilters: Vec<(Box<str>, RegexSet)>,
    pub(crate) rate: Option<RateSpec>,
    pub(crate) escalate: Option<Escalation>,
    /// Candidate rules by keyed lookups.
    pub(crate) index: index::RuleIndex,
    /// The tenant's name in the rules file, if given.
    pub(crate) name: Option<Box<str>>,
    /// The attributes its rules read ([`attr::bit`]).
    pub(crate) reads: u32,
}

impl Tenant {
    /// True when no check of this tenant can ever apply.
    pub(crate) fn is_noop(&self) -> bool {
        self.allow.is_empty()
            && !self.allow_bots
            && self.deny.is_empty()
            && self.deny_asn.is_empty()
            && self.rules.is_empty()
            && self.rate.is_none()
    }
}

/// Rules compiled from one rules file: immutable, shared by all threads through a [`RuleSet`].
#[derive(Debug, Default)]
pub struct Prepared {
    pub(crate) path: PathBuf,
    pub(crate) tenants: Vec<Option<Box<Tenant>>>,
    pub(crate) bots: PrefixSet,
    pub(crate) asn: AsnTable,
    /// `[global] deny`: every tenant of both daemons (and the XDP guard).
    pub(crate) global_deny: PrefixSet,
    /// `[global]` lists as written (expanded), for the XDP guard's maps.
    pub(crate) global_lists: GlobalLists,
    /// Every tenant's `escalate`: (line, col, v4_prefix, v6_prefix), for the daemons' minimums.
    pub(crate) escalations: Vec<(usize, usize, u8, u8)>,
}

/// The rules file's `[global]` section, expanded: what the XDP guard is given.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct GlobalLists {
    /// Dropped for every tenant of both daemons, and in XDP.
    pub deny: Vec<ipnet::IpNet>,
    /// Exempt from the XDP rate limit (never from a block).
    pub allow: Vec<ipnet::IpNet>,
    /// Never blocked nor suspected by any automatic writer.
    pub never_block: Vec<ipnet::IpNet>,
}

const TENANT_RATE_RULE: u32 = u32::MAX;

impl Prepared {
    /// Rules that apply nothing to anyone.
    pub fn empty() -> Self {
        Prepared::default()
    }

    /// Reads and compiles a rules file; files it names are read relative to its directory.
    pub fn load(path: &Path) -> Result<Self, RulesError> {
        let text = std::fs::read_to_string(path).map_err(|e| RulesError::io(path, e))?;
        Self::parse(path, &text)
    }

    /// Compiles rules from `text`; `path` names the file in errors and anchors relative paths.
    pub fn parse(path: &Path, text: &str) -> Result<Self, RulesError> {
        schema::compile(path, text)
    }

    /// The file these rules came from.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The `[global]` deny, allow and never-block lists.
    pub fn global_lists(&self) -> &GlobalLists {
        &self.global_lists
    }

    /// Refuses an `escalate` whose `v4_prefix` / `v6_prefix` is shorter than the daemon's
    /// `[block] min_prefix_v4` / `min_prefix_v6` (such escalations would all be refused).
    pub fn check_min_prefix(&self, min_v4: u8, min_v6: u8) -> Result<(), RulesError> {
        for &(line, col, v4, v6) in &self.escalations {
            if v4 < min_v4 || v6 < min_v6 {
                return Err(RulesError::At {
                    path: self.path.clone(),
                    line,
                    col,
                    message: format!(
                        "escalate v4_prefix/v6_prefix /{v4} /{v6} is shorter than [block] \
                         min_prefix_v4/min_prefix_v6 /{min_v4} /{min_v6}"
                    ),
                });
            }
        }
        Ok(())
    }

    /// The name a tenant has in the rules file.
    pub fn tenant_name(&self, tenant: TenantId) -> Option<&str> {
        self.tenants
            .get(tenant as usize)
            .and_then(|t| t.as_ref())
            .and_then(|t| t.name.as_deref())
    }

    /// Number of tenants with rules.
    pub fn tenant_count(&self) -> usize {
        self.tenants.iter().filter(|t| t.is_some()).count()
    }

    /// True when a check of `tenant` may say anything but pass: it has rules, or the
    /// `[global]` deny list applies to everyone (callers skip the check otherwise).
    #[inline]
    pub fn may_apply(&self, tenant: TenantId) -> bool {
        !self.global_deny.is_empty() || self.has_rules(tenant)
    }

    /// True when `tenant`'s rules read an attribute of `bit` ([`attr::bit`]): a caller that
    /// formats attributes formats only those.
    #[inline]
    pub fn reads(&self, tenant: TenantId, bit: u32) -> bool {
        self.reads_mask(tenant) & bit != 0
    }

    /// Every attribute bit ([`attr::bit`]) `tenant`'s rules read.
    #[inline]
    pub fn reads_mask(&self, tenant: TenantId) -> u32 {
        self.tenants
            .get(tenant as usize)
            .and_then(|t| t.as_ref())
            .map_or(0, |t| t.reads)
    }

    /// True when the tenant has any rule (callers may skip the check entirely otherwise).
    pub fn has_rules(&self, tenant: TenantId) -> bool {
        self.tenants
            .get(tenant as usize)
            .is_some_and(Option::is_some)
    }

    /// True when `ip` is in the known-good crawler ranges.
    pub fn is_known_bot(&self, ip: IpAddr) -> bool {
        self.bots.contains(ip)
    }

    /// The ASN announcing `ip`, from the `[asn]` table.
    pub fn asn_of(&self, ip: IpAddr) -> Option<u32> {
        self.asn.lookup(ip)
    }

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
        let v = self.evaluate(t, state, src, req, now);
        match (&t.escalate, v.action) {
            (Some(e), Action::Deny) if e.on_deny => escalate(t, e, state, src, req, now, v),
            (Some(e), Action::RateLimit) if e.on_rate_limit => {
                escalate(t, e, state, src, req, now, v)
            }
            (Some(e), Action::Challenge) if e.on_challenge => {
                escalate(t, e, state, src, req, now, v)
            }
            _ => v,
        }
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
        if !t.allow.is_empty() && t.allow.contains(src) {
            return Verdict::new(Action::Allow, codes::ALLOW_LIST, "allow-list");
        }
        if t.allow_bots && self.bots.contains(src) {
            return Verdict::new(Action::Allow, codes::KNOWN_BOT, "known-bot");
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
            if t.index.is_trivial() || req.multi_valued() {
                for rule in &t.rules {
                    if let Some(v) = rule_verdict(t, rule, state, src, req, now, &mut cache) {
                        return v;
                    }
                }
            } else {
                let mut c = index::Candidates::new();
                t.index.candidates(req, &mut c);
                if c.overflow {
                    for rule in &t.rules {
                        if let Some(v) = rule_verdict(t, rule, state, src, req, now, &mut cache) {
                            return v;
                        }
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
            && let Some(ms) = rate_limited(state, t.id, TENANT_RATE_RULE, spec, src, now)
        {
            return Verdict {
                retry_after_ms: ms,
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
        (Action::RateLimit, Some(spec)) => rate_limited(state, t.id, rule.index, spec, src, now)
            .map(|ms| Verdict {
                retry_after_ms: ms,
                ..rule.verdict
            }),
        _ => Some(rule.verdict),
    }
}

/// `None` when the request conforms (and was counted); else milliseconds until one would
/// (at least 1).
#[inline]
fn rate_limited(
    state: &RuleState,
    tenant: TenantId,
    rule: u32,
    spec: &RateSpec,
    src: IpAddr,
    now: Now,
) -> Option<u32> {
    let key = (tenant, rule, source_key(src, spec.v4, spec.v6));
    match state.limiter.check(&key, &spec.limit, now.mono_us) {
        crate::ratelimit::Decision::Allow => None,
        crate::ratelimit::Decision::Limit { retry_after_us } => {
            Some(retry_after_us.div_ceil(1000).clamp(1, u64::from(u32::MAX)) as u32)
        }
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
    let evidence = req.evidence();
    let proven = evidence.is_proven();
    // Proven and unproven verdicts are counted apart: forged packets can neither block a
    // source nor bring a real one to the threshold.
    let key = (t.id, proven, source_key(src, e.v4, e.v6));
    let n = state.counter.add(&key, 1, e.window_ms, now.unix_ms);
    if n == e.after
        && let Some(blocks) = &state.blocks
    {
        let net = key.2.to_net();
        let entry = BlockEntry::with_ttl(
            net,
            e.ttl,
            now.unix_ms,
            e.reason.as_str(),
            Origin::Local,
            evidence,
        );
        v.escalated = match blocks.insert(entry) {
            InsertOutcome::Refused(why) => {
                state.refused.add(n as usize ^ t.id as usize, 1);
                crate::limited!(
                    10,
                    warn!(tenant = t.id, %net, %why, "escalation refused by the block policy")
                );
                Escalated::Refused
            }
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

// ---------------------------------------------------------------------------------------------
// State and the swappable rule set.

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
    limiter: RateLimiter,
    counter: WindowCounter,
    blocks: Option<Arc<BlockMap>>,
    escalations: StripedCounter,
    suspects: StripedCounter,
    refused: StripedCounter,
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
        }
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
    /// Escalations the block map's policy refused (never-block, too short a prefix).
    pub escalations_refused: u64,
    /// Rate-limit table.
    pub limiter: TableStats,
    /// Escalation counter table.
    pub counters: TableStats,
}

/// The current [`Prepared`] rules (swapped atomically on reload) plus their [`RuleState`].
pub struct RuleSet {
    current: Arc<ArcSwap<Prepared>>,
    state: RuleState,
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
    pub fn new(prepared: Prepared, state: RuleState) -> Self {
        RuleSet {
            current: Arc::new(ArcSwap::from_pointee(prepared)),
            state,
            reloads: AtomicU64::new(0),
            reload_failures: AtomicU64::new(0),
        }
    }

    /// The current rules (lock-free; hold the guard briefly).
    #[inline]
    pub fn current(&self) -> arc_swap::Guard<Arc<Prepared>> {
        self.current.load()
    }

    /// Replaces the rules.
    pub fn store(&self, prepared: Prepared) {
        self.current.store(Arc::new(prepared));
        self.reloads.fetch_add(1, Ordering::Relaxed);
    }

    /// Loads and compiles `path`; on success swaps it in, on failure keeps the last good rules.
    /// Escalations shorter than the block map's minimum prefixes are refused here too.
    pub fn reload(&self, path: &Path) -> Result<(), RulesError> {
        let loaded = Prepared::load(path).and_then(|p| {
            if let Some(b) = &self.state.blocks {
                let policy = b.policy();
                p.check_min_prefix(policy.min_prefix_v4, policy.min_prefix_v6)?;
            }
            Ok(p)
        });
        match loaded {
            Ok(p) => {
                tracing::info!(path = %path.display(), tenants = p.tenant_count(), "rules reloaded");
                self.store(p);
                Ok(())
            }
            Err(e) => {
                self.reload_failures.fetch_add(1, Ordering::Relaxed);
                tracing::warn!(error = %e, "rules refused; keeping the last good rules");
                Err(e)
            }
        }
    }

    /// Evaluates `tenant`'s current rules for a request from `src` (see [`Prepared::check`]).
    ///
    /// Loads the current rules through `arc-swap` (lock-free, about 10 ns); a thread that
    /// checks often should use a [`LocalRules`] from [`RuleSet::local`] instead.
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

    /// A per-thread handle that caches the current rules and notices a reload with one relaxed load.
    pub fn local(self: &Arc<Self>) -> LocalRules {
        LocalRules {
            cache: arc_swap::Cache::new(Arc::clone(&self.current)),
            set: Arc::clone(self),
        }
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
            "Sources the rules escalated into the block map (proven requests: TCP, a valid cookie, HTTP).",
            r.escalations,
        );
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

/// A per-thread view of a [`RuleSet`]: the current rules cached, refreshed when a reload swaps them.
///
/// Keeps the previous rules alive until this thread's next check after a reload.
pub struct LocalRules {
    cache: arc_swap::Cache<Arc<ArcSwap<Prepared>>, Arc<Prepared>>,
    set: Arc<RuleSet>,
}

impl std::fmt::Debug for LocalRules {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LocalRules").finish_non_exhaustive()
    }
}

impl LocalRules {
    /// The current rules (refreshed if a reload happened).
    #[inline]
    pub fn current(&mut self) -> &Arc<Prepared> {
        self.cache.load()
    }

    /// As [`RuleSet::check`], without the shared load.
    #[inline]
    pub fn check<R: Request + ?Sized>(
        &mut self,
        tenant: TenantId,
        src: IpAddr,
        req: &R,
        now: Now,
    ) -> Verdict {
        let state = &self.set.state;
        let v = self.cache.load().check(state, tenant, src, req, now);
        tenants::count(tenant, v.action);
        v
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::block::BlockConfig;
    use ipnet::IpNet;

    const NOW: Now = Now {
        unix_ms: 1_700_000_000_000,
        mono_us: 10_000_000,
    };

    fn prepared(text: &str) -> Prepared {
        Prepared::parse(Path::new("test.toml"), text).unwrap_or_else(|e| panic!("{e}"))
    }

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    fn state() -> RuleState {
        RuleState::new(&StateConfig::default(), None)
    }

    /// A request whose `header:x-tool` was sent twice.
    struct Twice<'a>(&'a [&'a str]);

    impl Request for Twice<'_> {
        fn attr(&self, name: &str) -> Option<&str> {
            self.attr_nth(name, 0)
        }
        fn attr_nth(&self, name: &str, n: usize) -> Option<&str> {
            (name == "header:x-tool")
                .then(|| self.0.get(n).copied())
                .flatten()
        }
        fn multi_valued(&self) -> bool {
            self.0.len() > 1
        }
    }

    #[test]
    fn every_value_of_a_repeated_attribute_is_matched() {
        let p = prepared(
            "[[tenant]]\nid = 1\n[[tenant.rule]]\nname = \"t\"\naction = \"deny\"\n\
             when = [{ attr = \"header:x-tool\", regex = \"sqlmap\" }]\n\
             [[tenant.rule]]\nname = \"n\"\naction = \"challenge\"\n\
             when = [{ attr = \"header:x-tool\", exact = \"curl\", not = true }]\n",
        );
        let s = state();
        let src = ip("192.0.2.1");
        let v = |vals: &[&str]| p.check(&s, 1, src, &Twice(vals), NOW).action;
        assert_eq!(v(&["curl"]), Action::Pass);
        assert_eq!(v(&["curl", "sqlmap"]), Action::Deny);
        assert_eq!(v(&["sqlmap", "curl"]), Action::Deny);
        // Negated: matches when no value matches.
        assert_eq!(v(&["wget"]), Action::Challenge);
        assert_eq!(v(&["wget", "curl"]), Action::Pass);
    }

    /// A DNS query as attributes.
    fn dns<'a>(qname: &'a str, qtype: &'a str) -> Attrs<'a> {
        // Leaked: the test's requests live as long as the test.
        let v: &'a [(&'a str, &'a str)] = Box::leak(Box::new([
            (attr::QNAME, qname),
            (attr::QTYPE, qtype),
            (attr::TRANSPORT, "udp"),
            (attr::UDP_SIZE, "1232"),
        ]));
        Attrs(v)
    }

    #[test]
    fn dns_attributes_compare_in_one_spelling_and_suffixes_take_whole_labels() {
        let p = prepared(
            "[[tenant]]\nid = 7\n\
             [[tenant.rule]]\nname = \"suffix\"\naction = \"deny\"\nrcode = \"refused\"\n\
             when = [{ attr = \"qname\", suffix = \"Example.COM\" }]\n\
             [[tenant.rule]]\nname = \"exact\"\naction = \"deny\"\n\
             when = [{ attr = \"qname\", exact = \"WWW.Other.Test\" }, { attr = \"qtype\", one_of = [\"txt\", \"any\"] }]\n\
             [[tenant.rule]]\nname = \"small\"\naction = \"challenge\"\n\
             when = [{ attr = \"udp_size\", lt = 1232 }]\n",
        );
        let s = state();
        let src = ip("192.0.2.1");
        let v = |q: &str, t: &str| p.check(&s, 7, src, &dns(q, t), NOW);
        let d = v("a.example.com.", "A");
        assert_eq!((d.action, d.dns_rcode), (Action::Deny, Some(5)));
        assert_eq!(v("example.com.", "A").action, Action::Deny);
        assert_eq!(v("badexample.com.", "A").action, Action::Pass);
        assert_eq!(v("com.", "A").action, Action::Pass);
        assert_eq!(v("www.other.test.", "TXT").action, Action::Deny);
        assert_eq!(v("www.other.test.", "A").action, Action::Pass);
        let r = Attrs(&[(attr::QNAME, "x.test."), (attr::UDP_SIZE, "512")]);
        assert_eq!(p.check(&s, 7, src, &r, NOW).action, Action::Challenge);
        let r = Attrs(&[(attr::QNAME, "x.test."), (attr::UDP_SIZE, "4096")]);
        assert_eq!(p.check(&s, 7, src, &r, NOW).action, Action::Pass);
        let r = Attrs(&[(attr::QNAME, "x.test.")]);
        assert_eq!(
            p.check(&s, 7, src, &r, NOW).action,
            Action::Pass,
            "no EDNS: no size"
        );
    }

    #[test]
    fn regex_anchors_rule_out_only_what_cannot_match() {
        let start =
            |p: &str| Anchors::of(p).map(|a| String::from_utf8_lossy(&a.start).into_owned());
        assert_eq!(start(r"^api[0-9]+-bad\."), Some("api".to_string()));
        assert_eq!(
            start("^(cdn|img)-x"),
            None,
            "no literal every match starts with"
        );
        assert_eq!(start("^(cdn|cdx)-x"), Some("cd".to_string()));
        assert_eq!(start("(?i)^ab"), None);
        for none in ["foo", "(?m)^x", "^a|b", "^.*x", "^[a-z]+", ""] {
            assert!(Anchors::of(none).is_none(), "{none}");
        }
        let a = Anchors::of(r"\.example\.com\.$").expect("suffix anchor");
        assert!(a.admits(b"www.example.com.") && !a.admits(b"www.example.net."));

        // Never rules out a value the regex matches.
        let patterns = [
            r"^api[0-9]+-bad\.",
            "^(cdn|img)-x",
            "(?i)^ab",
            r"\.example\.com\.$",
            "^a.*z$",
            "^(?:ab|a)c?$",
            "^é",
        ];
        let values = [
            "api12-bad.x",
            "api-bad.",
            "cdn-x",
            "img-xy",
            "IMG-x",
            "Ab",
            "aB",
            "x.example.com.",
            "example.com.",
            "az",
            "abz",
            "a",
            "ab",
            "ac",
            "abc",
            "é",
            "",
        ];
        for p in patterns {
            let re = Regex::new(p).unwrap();
            let Some(a) = Anchors::of(p) else { continue };
            for v in values {
                if re.is_match(v) {
                    assert!(
                        a.admits(v.as_bytes()),
                        "{p} matches {v:?} but was ruled out"
                    );
                }
            }
        }
    }

    #[test]
    fn rcode_and_slip_go_with_their_actions() {
        let bad = |t: &str| {
            Prepared::parse(Path::new("r.toml"), t)
                .unwrap_err()
                .to_string()
        };
        let e = bad(
            "[[tenant]]\nid = 1\n[[tenant.rule]]\nname = \"r\"\naction = \"allow\"\nrcode = \"REFUSED\"\n",
        );
        assert!(e.contains("`rcode` only goes with action deny"), "{e}");
        let e = bad(
            "[[tenant]]\nid = 1\n[[tenant.rule]]\nname = \"r\"\naction = \"deny\"\nrcode = \"NOPE\"\n",
        );
        assert!(
            e.starts_with("r.toml:6:") && e.contains("unknown rcode"),
            "{e}"
        );
        let e =
            bad("[[tenant]]\nid = 1\n[[tenant.rule]]\nname = \"r\"\naction = \"deny\"\nslip = 3\n");
        assert!(e.contains("`slip` only goes with action rate_limit"), "{e}");
        let p = prepared(
            "[[tenant]]\nid = 1\n[[tenant.rule]]\nname = \"r\"\naction = \"rate_limit\"\nslip = 0\n\
             rate = { per_second = 1.0, burst = 1 }\n",
        );
        let s = state();
        let src = ip("192.0.2.1");
        assert_eq!(p.check(&s, 1, src, &(), NOW).action, Action::Pass);
        let v = p.check(&s, 1, src, &(), NOW);
        assert_eq!((v.action, v.slip), (Action::RateLimit, 0));
    }

    #[test]
    fn the_global_deny_list_applies_to_every_tenant() {
        let p = prepared(
            "[[list]]\nname = \"bad\"\nprefixes = [\"203.0.113.0/24\"]\n\
             [global]\ndeny = [\"@bad\", \"198.51.100.7\"]\nallow = [\"192.0.2.0/24\"]\n\
             [[tenant]]\nid = 2\nallow = [\"203.0.113.0/24\"]\n",
        );
        let s = state();
        for t in [0, 2, 99] {
            let v = p.check(&s, t, ip("203.0.113.9"), &(), NOW);
            assert_eq!(
                (v.action, v.code),
                (Action::Deny, codes::GLOBAL_DENY),
                "tenant {t}"
            );
        }
        assert_eq!(p.check(&s, 0, ip("192.0.2.1"), &(), NOW), Verdict::PASS);
        let g = p.global_lists();
        assert_eq!(g.deny.len(), 2);
        assert_eq!(g.allow, vec!["192.0.2.0/24".parse::<IpNet>().unwrap()]);
    }

    /// Random tenants and requests: the index gives exactly the walk's verdicts.
    #[test]
    fn the_index_gives_the_verdicts_of_a_walk_over_every_rule() {
        use rand_like::Lcg;
        let mut r = Lcg(0x5eed);
        let words = [
            "a", "b", "example", "com", "net", "www", "mail", "api", "x1", "q",
        ];
        let name = |r: &mut Lcg| {
            let n = 1 + r.below(4);
            let mut s = String::new();
            for _ in 0..n {
                s.push_str(words[r.below(words.len())]);
                s.push('.');
            }
            s
        };
        for round in 0..40 {
            let mut text = String::from("[[tenant]]\nid = 1\n");
            for i in 0..(1 + r.below(60)) {
                let cond = match r.below(9) {
                    0 => format!("{{ attr = \"qname\", exact = \"{}\" }}", name(&mut r)),
                    1 => format!("{{ attr = \"qname\", suffix = \"{}\" }}", name(&mut r)),
                    2 => {
                        let n = name(&mut r);
                        let k = (1 + r.below(3)).min(n.len());
                        format!("{{ attr = \"qname\", prefix = \"{}\" }}", &n[..k])
                    }
                    3 => format!("{{ attr = \"path\", suffix = \"{}\" }}", words[r.below(10)]),
                    4 => format!(
                        "{{ attr = \"qtype\", one_of = [\"A\", \"{}\"] }}",
                        ["TXT", "MX", "AAAA"][r.below(3)]
                    ),
                    5 => format!(
                        "{{ attr = \"qname\", regex = \"^{}\\\\.\" }}",
                        words[r.below(10)]
                    ),
                    6 => format!(
                        "{{ attr = \"qname\", contains = \"{}\", not = true }}",
                        words[r.below(10)]
                    ),
                    7 => format!("{{ attr = \"udp_size\", ge = {} }}", 512 * (1 + r.below(8))),
                    _ => format!(
                        "{{ attr = \"qname\", exact = \"{}\", not = true }}",
                        name(&mut r)
                    ),
                };
                let second = if r.below(3) == 0 {
                    format!(
                        ", {{ attr = \"qtype\", exact = \"{}\" }}",
                        ["A", "TXT"][r.below(2)]
                    )
                } else {
                    String::new()
                };
                let action = ["deny", "allow", "challenge"][r.below(3)];
                text.push_str(&format!(
                    "[[tenant.rule]]\nname = \"r{i}\"\naction = \"{action}\"\nwhen = [{cond}{second}]\n"
                ));
            }
            let indexed = prepared(&text);
            let mut walked = prepared(&text);
            let t = walked.tenants[1].as_mut().unwrap();
            t.index = index::RuleIndex {
                scan: (0..t.rules.len() as u32).collect(),
                attrs: Vec::new(),
            };
            let s = state();
            for _ in 0..200 {
                let q = name(&mut r);
                let size = (256 * (1 + r.below(16))).to_string();
                let path = format!("/{}", words[r.below(10)]);
                let qtype = ["A", "TXT", "MX", "AAAA"][r.below(4)];
                let req = Attrs(Box::leak(Box::new([
                    (attr::QNAME, Box::leak(q.clone().into_boxed_str()) as &str),
                    (attr::QTYPE, qtype),
                    (attr::UDP_SIZE, Box::leak(size.into_boxed_str()) as &str),
                    ("path", Box::leak(path.into_boxed_str()) as &str),
                ])));
                let src = ip("192.0.2.1");
                assert_eq!(
                    indexed.check(&s, 1, src, &req, NOW),
                    walked.check(&s, 1, src, &req, NOW),
                    "round {round}, {req:?}\n{text}"
                );
            }
        }
    }

    mod rand_like {
        /// A small deterministic generator for the tests.
        pub struct Lcg(pub u64);
        impl Lcg {
            pub fn below(&mut self, n: usize) -> usize {
                self.0 = self
                    .0
                    .wrapping_mul(6364136223846793005)
                    .wrapping_add(1442695040888963407);
                ((self.0 >> 33) % n as u64) as usize
            }
        }
    }

    #[test]
    fn tenant_without_rules_passes() {
        let p = prepared("[[tenant]]\nid = 3\ndeny = [\"0.0.0.0/0\"]\n[[tenant]]\nid = 4\n");
        let s = state();
        assert_eq!(p.check(&s, 1, ip("192.0.2.1"), &(), NOW), Verdict::PASS);
        assert_eq!(
            p.check(&s, 99_999, ip("192.0.2.1"), &(), NOW),
            Verdict::PASS
        );
        assert_eq!(
            p.check(&s, 3, ip("192.0.2.1"), &(), NOW).action,
            Action::Deny
        );
        assert!(p.has_rules(3) && !p.has_rules(1));
        assert!(
            !p.has_rules(4),
            "a tenant without rules compiles to nothing"
        );
        assert_eq!(p.check(&s, 4, ip("192.0.2.1"), &(), NOW), Verdict::PASS);
    }

    #[test]
    fn order_allow_beats_deny_and_lists_resolve() {
        let p = prepared(
            r#"
[[list]]
name = "bad"
prefixes = ["203.0.113.0/24", "2001:db8:bad::/48"]

[[tenant]]
id = 1
allow = ["203.0.113.7"]
deny = ["@bad", "192.0.2.0/24"]
"#,
        );
        let s = state();
        let v = p.check(&s, 1, ip("203.0.113.7"), &(), NOW);
        assert_eq!((v.action, v.code), (Action::Allow, codes::ALLOW_LIST));
        let v = p.check(&s, 1, ip("203.0.113.8"), &(), NOW);
        assert_eq!(
            (v.action, v.code, v.reason.as_str()),
            (Action::Deny, codes::DENY_LIST, "deny:@bad")
        );
        let v = p.check(&s, 1, ip("2001:db8:bad::1"), &(), NOW);
        assert_eq!(v.action, Action::Deny);
        let v = p.check(&s, 1, ip("192.0.2.9"), &(), NOW);
        assert_eq!(v.reason.as_str(), "deny-list");
        assert_eq!(p.check(&s, 1, ip("198.51.100.1"), &(), NOW), Verdict::PASS);
    }

    #[test]
    fn request_rules_match_attributes() {
        let p = prepared(
            r#"
[[tenant]]
id = 2

[[tenant.rule]]
name = "ok-health"
action = "allow"
when = [{ attr = "path", exact = "/healthz" }]

[[tenant.rule]]
name = "wp"
action = "deny"
code = 7
when = [{ attr = "path", prefix = "/wp-" }, { attr = "method", one_of = ["POST", "PUT"] }]

[[tenant.rule]]
name = "scanner-ua"
action = "challenge"
when = [{ attr = "user_agent", regex = "(?i)sqlmap|nikto" }]

[[tenant.rule]]
name = "no-ua"
action = "challenge"
when = [{ attr = "user_agent", present = false }, { attr = "path", suffix = ".php", not = true }]

[[tenant.rule]]
name = "any-dns"
action = "deny"
when = [{ attr = "qtype", exact = "ANY" }, { attr = "qname", contains = "example" }]
"#,
        );
        let s = state();
        let src = ip("192.0.2.1");
        let check = |a: &[(&str, &str)]| p.check(&s, 2, src, &Attrs(a), NOW);
        assert_eq!(check(&[("path", "/healthz")]).action, Action::Allow);
        let v = check(&[
            ("path", "/wp-login.php"),
            ("method", "POST"),
            ("user_agent", "x"),
        ]);
        assert_eq!(
            (v.action, v.code, v.reason.as_str()),
            (Action::Deny, 7, "wp")
        );
        assert_eq!(
            check(&[
                ("path", "/wp-login.php"),
                ("method", "GET"),
                ("user_agent", "x")
            ])
            .action,
            Action::Pass
        );
        let v = check(&[("path", "/"), ("user_agent", "SQLMap/1.0")]);
        assert_eq!(
            (v.action, v.code),
            (Action::Challenge, codes::RULE_BASE + 2)
        );
        assert_eq!(check(&[("path", "/")]).reason.as_str(), "no-ua");
        assert_eq!(check(&[("path", "/x.php")]).action, Action::Pass);
        assert_eq!(
            check(&[
                ("qtype", "ANY"),
                ("qname", "www.example.com."),
                ("user_agent", "-")
            ])
            .action,
            Action::Deny
        );
    }

    #[test]
    fn regex_prefilter_is_shared_per_attribute() {
        let p = prepared(
            r#"
[[tenant]]
id = 1
[[tenant.rule]]
name = "a"
action = "deny"
when = [{ attr = "user_agent", regex = "^curl/" }]
[[tenant.rule]]
name = "b"
action = "challenge"
when = [{ attr = "user_agent", regex = "python-requests" }]
"#,
        );
        let t = p.tenants[1].as_ref().unwrap();
        assert_eq!(t.prefilters.len(), 1);
        let s = state();
        let v = p.check(
            &s,
            1,
            ip("192.0.2.1"),
            &Attrs(&[("user_agent", "python-requests/2")]),
            NOW,
        );
        assert_eq!(v.reason.as_str(), "b");
        let v = p.check(
            &s,
            1,
            ip("192.0.2.1"),
            &Attrs(&[("user_agent", "curl/8")]),
            NOW,
        );
        assert_eq!(v.reason.as_str(), "a");
        let v = p.check(
            &s,
            1,
            ip("192.0.2.1"),
            &Attrs(&[("user_agent", "Mozilla")]),
            NOW,
        );
        assert_eq!(v, Verdict::PASS);
    }

    #[test]
    fn rate_limit_and_escalation_into_block_map() {
        use crate::block::{Check, Scope, Traffic};
        /// A request proven as `evidence`.
        struct Proven(Evidence);
        impl Request for Proven {
            fn attr(&self, _: &str) -> Option<&str> {
                None
            }
            fn evidence(&self) -> Evidence {
                self.0
            }
        }
        let blocks = BlockMap::new(BlockConfig::default());
        let s = RuleState::new(&StateConfig::default(), Some(blocks.clone()));
        let p = prepared(
            r#"
[[tenant]]
id = 5
rate_limit = { per_second = 1.0, burst = 2 }
escalate = { after = 3, window_secs = 10, block_secs = 60, v4_prefix = 24 }
"#,
        );
        // Unproven requests (the default): the third limited one makes a suspect, no block.
        let src = ip("192.0.2.77");
        let v: Vec<Verdict> = (0..6).map(|_| p.check(&s, 5, src, &(), NOW)).collect();
        let actions: Vec<Action> = v.iter().map(|v| v.action).collect();
        assert_eq!(
            actions,
            [
                Action::Pass,
                Action::Pass,
                Action::RateLimit,
                Action::RateLimit,
                Action::RateLimit,
                Action::RateLimit
            ]
        );
        assert_eq!(v[4].escalated, Escalated::Suspect);
        let r = blocks.reader();
        let Check::Suspect(hit) = r.check(ip("192.0.2.1"), NOW.unix_ms, Traffic::DnsUdp) else {
            panic!("a suspect /24")
        };
        assert_eq!(hit.net, "192.0.2.0/24".parse::<IpNet>().unwrap());
        assert_eq!((hit.origin, hit.evidence), (Origin::Local, Evidence::Udp));
        assert_eq!(hit.expires_ms, NOW.unix_ms + 60_000);
        assert!(!r.is_blocked(ip("192.0.2.1"), NOW.unix_ms, Traffic::DnsUdp));
        // Unproven verdicts never count towards a proven escalation: two proven ones do not
        // reach the threshold of three, the third does and blocks every stream.
        let tcp = Proven(Evidence::Tcp);
        let v: Vec<Verdict> = (0..3).map(|_| p.check(&s, 5, src, &tcp, NOW)).collect();
        assert_eq!(v[1].escalated, Escalated::No);
        assert_eq!(v[2].escalated, Escalated::Blocked);
        let Check::Blocked(hit) = r.check(ip("192.0.2.1"), NOW.unix_ms, Traffic::Stream) else {
            panic!("a TCP-proven block")
        };
        assert_eq!((hit.evidence, hit.scope), (Evidence::Tcp, Scope::All));
        assert_eq!(blocks.len(), 1, "one entry, the suspect proven");
        // A cookie-proven escalation blocks DNS over UDP only.
        let cookie = Proven(Evidence::Cookie);
        let other = ip("198.51.100.9");
        for _ in 0..5 {
            p.check(&s, 5, other, &cookie, NOW);
        }
        assert!(r.is_blocked(other, NOW.unix_ms, Traffic::DnsUdp));
        assert!(!r.is_blocked(other, NOW.unix_ms, Traffic::Stream));
        let rs = RuleSet::new(prepared("[[tenant]]\nid = 1\n"), s);
        let st = rs.stats();
        assert_eq!((st.escalations, st.suspects), (2, 1));
    }

    #[test]
    fn never_block_is_out_of_reach_and_short_escalations_are_refused() {
        use crate::never_block::{BlockPolicy, NeverBlock};
        let e = Prepared::parse(
            Path::new("r.toml"),
            "[global]\nnever_block = [\"192.0.2.1\"]\ndeny = [\"192.0.2.0/24\"]\n",
        )
        .unwrap_err()
        .to_string();
        assert!(e.starts_with("r.toml:3:"), "{e}");
        assert!(e.contains("overlaps never_block 192.0.2.1/32"), "{e}");
        let p = prepared(
            "[global]\nnever_block = [\"192.0.2.1\"]\n[[tenant]]\nid = 5\ndeny = [\"192.0.2.0/24\"]\n\
             escalate = { after = 1, window_secs = 10, block_secs = 60, v4_prefix = 24 }\n",
        );
        assert_eq!(p.global_lists().never_block.len(), 1);
        let blocks = BlockMap::new(BlockConfig::default());
        blocks.set_policy(BlockPolicy {
            never_block: Arc::new(NeverBlock::from_entries(
                p.global_lists()
                    .never_block
                    .iter()
                    .map(|n| crate::never_block::Protected {
                        net: *n,
                        source: Arc::from("rules file"),
                    }),
            )),
            ..blocks.policy()
        });
        let s = RuleState::new(&StateConfig::default(), Some(blocks.clone()));
        let v = p.check(&s, 5, ip("192.0.2.9"), &(), NOW);
        assert_eq!(v.action, Action::Deny);
        assert_eq!(
            v.escalated,
            Escalated::Refused,
            "the /24 holds a never-block address"
        );
        assert!(blocks.is_empty());
        assert!(p.check_min_prefix(16, 32).is_ok());
        let e = p.check_min_prefix(25, 32).unwrap_err().to_string();
        assert!(e.starts_with("test.toml:6:"), "{e}");
        assert!(e.contains("shorter than [block]"), "{e}");
    }

    #[test]
    fn rate_limit_rule_limits_only_its_requests() {
        let p = prepared(
            r#"
[[tenant]]
id = 1
[[tenant.rule]]
name = "login"
action = "rate_limit"
when = [{ attr = "path", exact = "/login" }]
rate = { per_second = 1.0, burst = 1 }
"#,
        );
        let s = state();
        let src = ip("192.0.2.1");
        let login = Attrs(&[("path", "/login")]);
        let home = Attrs(&[("path", "/")]);
        assert_eq!(p.check(&s, 1, src, &login, NOW).action, Action::Pass);
        let limited = p.check(&s, 1, src, &login, NOW);
        assert_eq!(limited.action, Action::RateLimit);
        // One per second, just spent: the next conforms in a second.
        assert!(
            (990..=1000).contains(&limited.retry_after_ms),
            "{limited:?}"
        );
        assert_eq!(p.check(&s, 1, src, &home, NOW).retry_after_ms, 0);
        assert_eq!(p.check(&s, 1, src, &home, NOW).action, Action::Pass);
        assert_eq!(
            p.check(&s, 1, ip("192.0.2.2"), &login, NOW).action,
            Action::Pass
        );
    }

    #[test]
    fn rule_set_reload_keeps_last_good() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("rules.toml");
        std::fs::write(&path, "[[tenant]]\nid = 1\ndeny = [\"192.0.2.0/24\"]\n").unwrap();
        let rs = RuleSet::new(Prepared::empty(), state());
        assert_eq!(rs.check(1, ip("192.0.2.1"), &(), NOW).action, Action::Pass);
        rs.reload(&path).unwrap();
        assert_eq!(rs.check(1, ip("192.0.2.1"), &(), NOW).action, Action::Deny);
        std::fs::write(&path, "[[tenant]]\nid = 1\ndeny = [\"192.0.2.0/33\"]\n").unwrap();
        let e = rs.reload(&path).unwrap_err();
        assert!(e.to_string().contains("rules.toml:3:9:"), "{e}");
        assert_eq!(rs.check(1, ip("192.0.2.1"), &(), NOW).action, Action::Deny);
        let st = rs.stats();
        assert_eq!((st.reloads, st.reload_failures, st.tenants), (1, 1, 1));
        let rs = Arc::new(rs);
        let mut local = rs.local();
        assert_eq!(
            local.check(1, ip("192.0.2.1"), &(), NOW).action,
            Action::Deny
        );
        rs.store(Prepared::empty());
        assert_eq!(
            local.check(1, ip("192.0.2.1"), &(), NOW).action,
            Action::Pass,
            "sees the swap"
        );
    }
}
