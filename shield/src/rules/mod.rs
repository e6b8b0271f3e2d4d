//! The rule engine shared by DNS and HTTP: per-tenant prepared rules answering "what applies to this source and request".
//!
//! # Flow
//!
//! A rules file (TOML, see [`schema`](self#rules-file)) is compiled once per change into a
//! [`Prepared`]: per tenant, allow and deny prefix tables ([`crate::prefix::PrefixMap`]), known-good crawler
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
//! source (or its prefix) into the block map with [`crate::block::Origin::Local`] for `block_secs`, and the
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
//! rate_limit = { per_second = 20.0, burst = 40 }           # v4_prefix = 32, v6_prefix = 64
//! escalate = { after = 50, window_secs = 10, block_secs = 600 }   # on = ["deny", "rate_limit"]
//!                                    # v4_prefix = 32, v6_prefix = 64 (the prefix blocked)
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
//! ```
//!
//! One is for HTTP only (dnsd's challenge is TC=1 and ignores it). http-front's attributes
//! are `path`, `method`, `host`, `user_agent`, `header:NAME`, and over TLS `ja4` (FoxIO's
//! JA4 of the ClientHello) and, on HTTP/2, `h2_fingerprint` (Akamai's format). A `rate` with
//! `key = "NAME"` counts per value of that attribute (a request without it: per source);
//! anyone can send a popular browser's JA4, so such a limit never escalates the sources it
//! answers 429 (they proved nothing), and its `when` should narrow it to suspect traffic:
//!
//! ```toml
//! [[tenant.rule]]
//! name = "check-browsers"
//! action = "challenge"
//! difficulty = 18                   # leading zero bits of the proof of work (front default: [challenge])
//! when = [{ attr = "path", prefix = "/login" }]
//!
//! [[tenant.rule]]
//! name = "one-bucket-per-tls-stack"  # botnets rotate addresses, not TLS stacks
//! action = "rate_limit"
//! rate = { per_second = 50.0, burst = 100, key = "ja4" }   # key: any attribute; default "source"
//! when = [{ attr = "h2_fingerprint", prefix = "1:65536;" }]
//!
//! [global]                          # every tenant of both daemons, and the XDP guard
//! deny = ["203.0.113.0/24", "@scanners"]   # dropped in XDP where the guard runs
//! allow = ["192.0.2.53/32"]         # exempt from the XDP rate limit (never from a block)
//! never_block = ["192.0.2.1/32"]    # no escalation, suspect list or peer record reaches these
//! ```
//!
//! A `[global] deny` entry that overlaps a `never_block` one is refused at load.

mod compiled;
mod error;
mod evaluate;
mod local;
mod prepared;
mod schema;
mod set;
mod sources;
mod tenants;
#[cfg(test)]
mod tests;

pub use compiled::MAX_VALUES;
pub use error::RulesError;
pub use local::LocalRules;
pub use prepared::{GlobalLists, Prepared};
pub use schema::{rcode_by_name, set_value_check};
pub use set::{HOLDS_MAX, RuleSet, RuleState, RulesStats, StateConfig, TenantHold};
pub use sources::{AsnTable, load_crawler_ranges, parse_crawler_ranges, parse_prefix_list};
pub use tenants::{KINDS as TENANT_KINDS, TOP_TENANTS, TenantCounts, tenant_counts};

use crate::block::{Evidence, Reason};
use serde::{Deserialize, Serialize};

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
    /// HTTP query string: as sent, and (a second value, when it differs) percent-decoded with
    /// `+` as space, as an origin's framework reads it.
    pub const QUERY: &str = "query";
    /// JA4 of the TLS ClientHello (HTTP over TLS).
    pub const JA4: &str = "ja4";
    /// HTTP/2 fingerprint, Akamai's format (`SETTINGS|WINDOW_UPDATE|PRIORITY|pseudo-headers`).
    pub const H2_FINGERPRINT: &str = "h2_fingerprint";
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
    /// HTTP version (`HTTP/1.1`, `HTTP/2`...).
    pub const VERSION: &str = "version";

    /// Every attribute name a daemon gives a value (and `header:<name>` beside them).
    pub const KNOWN: [&str; 19] = [
        PATH,
        METHOD,
        HOST,
        USER_AGENT,
        QUERY,
        JA4,
        H2_FINGERPRINT,
        VERSION,
        QNAME,
        QTYPE,
        QCLASS,
        OPCODE,
        TRANSPORT,
        EDNS,
        DO,
        COOKIE,
        UDP_SIZE,
        LOCAL_ADDRESS,
        "header:<name>",
    ];

    /// True when a daemon gives `name` a value: one of [`KNOWN`], or `header:` and a header
    /// name (a token). Any other name would never match: a typo that silently disables its
    /// rule.
    pub fn is_known(name: &str) -> bool {
        match name.strip_prefix(HEADER_PREFIX) {
            Some(h) => {
                !h.is_empty()
                    && h.bytes()
                        .all(|b| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b))
            }
            None => KNOWN[..KNOWN.len() - 1].contains(&name),
        }
    }

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
            QUERY => BIT_QUERY,
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
    /// [`bit`] of [`QUERY`].
    pub const BIT_QUERY: u32 = 1 << 10;

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
    /// Source escalated for this tenant's zones (DNS, `escalate` held for the tenant).
    pub const ESCALATED: u16 = 7;
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
    /// value matches, a negated one when some copy of a header does not (the query's forms:
    /// when none does), so that a second copy of a header can hide no value from the rules.
    fn multi_valued(&self) -> bool {
        false
    }

    /// What proves the request's source owns its address: an escalation on proven requests
    /// blocks, on unproven ones makes a suspect. The default is unproven (UDP): a caller
    /// that forgets to say can never make a block.
    fn evidence(&self) -> Evidence {
        Evidence::Udp
    }

    /// True when the request comes from an intermediary asking on others' behalf (a DNS
    /// query without RD: an iterating resolver relays whatever its users ask): its verdicts
    /// never escalate it — one user's denied queries would cut the resolver, and all its
    /// users, off the tenant. The default is false.
    fn relayed(&self) -> bool {
        false
    }

    /// True when the request may be a browser's (HTTP: it carries `Sec-Fetch-*`, or a
    /// browser's `User-Agent`): a page elsewhere, or a page of the site itself that shows what
    /// its users post, can make any visitor's browser send it, so an escalation on it holds
    /// the source for its tenant (challenged: a browser solves it) and never goes into the
    /// block map. The default is false.
    fn browser(&self) -> bool {
        false
    }

    /// [`Request::cleared`], by a clearance issued at or after `since_unix_s` (what lifts a
    /// hold of the source made then). The default is none.
    fn cleared_since(&self, difficulty: u8, since_unix_s: u64) -> bool {
        let _ = (difficulty, since_unix_s);
        false
    }

    /// True when the client holds a valid clearance for this site's challenges of
    /// `difficulty` (the rule's; 0: the caller's default), an HTTP cookie earned by solving
    /// one at least as hard: challenge rules then let it through, and the next rules are
    /// checked — never a deny, a rate limit or a block. Asked only when a challenge rule
    /// matches; the default is none (DNS).
    fn cleared(&self, difficulty: u8) -> bool {
        let _ = difficulty;
        false
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
    /// HTTP: leading zero bits of the proof of work a challenge asks for (0: the front's
    /// default).
    pub difficulty: u8,
    /// A rate limit counted in a bucket shared beyond this source (`rate.key`, e.g. a JA4
    /// that anyone can send): it says nothing about the source, so it never escalates it.
    pub shared: bool,
    /// DNS: the UDP (or cookie) query of a source held for the tenant (`dns_hold =
    /// "truncate"`), walked through the rules as any source's: unless they deny it, only an
    /// answer for a name that exists goes back whole, anything else TC=1.
    pub dns_held: bool,
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
        difficulty: 0,
        shared: false,
        dns_held: false,
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
            difficulty: 0,
            shared: false,
            dns_held: false,
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

/// The highest `difficulty` a challenge rule may ask (leading zero bits of a SHA-256: each
/// bit doubles a browser's work; 24 is already seconds to minutes).
pub const MAX_DIFFICULTY: u8 = 28;

/// One rate-limited DNS query in this many is slipped unless a rule says otherwise.
pub const DEFAULT_SLIP: u8 = 2;
