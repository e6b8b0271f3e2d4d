//! The rules file schema (TOML, unknown keys refused) and its compilation into [`Prepared`].

use super::compiled::{
    Condition, Escalation, MAX_PREFILTERS, Matcher, NumOp, RateSpec, Rule, Tenant,
};
use super::error::RulesError;
use super::prepared::{GlobalLists, Prepared};
use super::sources::{AsnTable, load_crawler_ranges, parse_prefix_list};
use super::{Action, MAX_TENANT_ID, Verdict, attr as attrs, codes};
use crate::block::Reason;
use crate::prefix::{PrefixMap, PrefixSet, parse_net};
use crate::ratelimit::Limit;
use ipnet::IpNet;
use regex::{RegexBuilder, RegexSetBuilder};
use serde::Deserialize;
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::time::Duration;
use toml::Spanned;

impl Prepared {
    /// Reads and compiles a rules file; files it names are read relative to its directory.
    pub fn load(path: &Path) -> Result<Self, RulesError> {
        let text = crate::files::read_config(path, crate::files::LIST_MAX)
            .map_err(|e| RulesError::io(path, e))?;
        Self::parse(path, &text)
    }

    /// Compiles rules from `text`; `path` names the file in errors and anchors relative paths.
    pub fn parse(path: &Path, text: &str) -> Result<Self, RulesError> {
        compile(path, text)
    }
}

/// Compiled size limit of one regex (and of one prefilter set).
const REGEX_SIZE_LIMIT: usize = 1 << 20;
/// Largest rules file compiled (about 150,000 rules of one line each).
pub(crate) const MAX_FILE_BYTES: usize = 16 << 20;
/// Most request rules per tenant.
const MAX_RULES_PER_TENANT: usize = 10_000;
/// `one_of` lists longer than this are matched through a hash set.
const ONE_OF_SET_MIN: usize = 8;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct FileSchema {
    global: Option<GlobalSchema>,
    known_bots: Option<KnownBotsSchema>,
    asn: Option<AsnSchema>,
    #[serde(default)]
    list: Vec<ListSchema>,
    #[serde(default)]
    tenant: Vec<TenantSchema>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct GlobalSchema {
    #[serde(default)]
    deny: Vec<Spanned<String>>,
    #[serde(default)]
    allow: Vec<Spanned<String>>,
    #[serde(default)]
    never_block: Vec<Spanned<String>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct KnownBotsSchema {
    files: Vec<Spanned<String>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct AsnSchema {
    file: Spanned<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ListSchema {
    name: Spanned<String>,
    #[serde(default)]
    prefixes: Vec<Spanned<String>>,
    file: Option<Spanned<String>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct TenantSchema {
    id: Spanned<u32>,
    #[serde(default)]
    name: Option<String>,
    #[serde(default)]
    allow: Vec<Spanned<String>>,
    #[serde(default)]
    deny: Vec<Spanned<String>>,
    deny_asn: Option<Spanned<Vec<u32>>>,
    #[serde(default)]
    allow_known_bots: bool,
    rate_limit: Option<Spanned<RateSchema>>,
    escalate: Option<Spanned<EscalateSchema>>,
    #[serde(default)]
    rule: Vec<RuleSchema>,
}

fn default_v4() -> u8 {
    32
}

/// The IPv6 prefix of a rate limit and of an escalation's block: one network (/64), the
/// least a host can leave by itself (per address, it could spread over 2^64 buckets; a /56
/// may hold several subscribers, a mobile carrier's devices each having a /64).
fn default_v6() -> u8 {
    64
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RateSchema {
    per_second: f64,
    burst: u32,
    #[serde(default = "default_v4")]
    v4_prefix: u8,
    #[serde(default = "default_v6")]
    v6_prefix: u8,
    #[serde(default)]
    key: Option<String>,
    /// With `key`: counted per value and per source prefix together (a name asked by one
    /// resolver), rather than per value over every source.
    #[serde(default)]
    per_source: bool,
}

#[derive(Deserialize, Clone, Copy, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
enum ActionName {
    Allow,
    Deny,
    Challenge,
    RateLimit,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct EscalateSchema {
    after: u32,
    window_secs: u64,
    block_secs: u64,
    on: Option<Vec<ActionName>>,
    #[serde(default = "default_v4")]
    v4_prefix: u8,
    #[serde(default = "default_v6")]
    v6_prefix: u8,
    reason: Option<String>,
    /// DNS: `tenant` (the default: the tenant's zones alone) or `block_map`.
    dns: Option<String>,
    /// HTTP: `tenant` (the default: the tenant's sites alone) or `block_map`.
    http: Option<String>,
    /// DNS: `ignore` (the default: a query without RD, a resolver's, counts for nothing) or
    /// `count`.
    relayed: Option<String>,
    /// DNS, held for the tenant: `truncate` (the default: UDP answered TC=1, TCP as the
    /// rules say) or `refuse` (nothing over any transport).
    dns_hold: Option<String>,
    /// HTTP, held for the tenant: `challenge` (the default: a clearance passes to the rules)
    /// or `deny` (403 whatever the client).
    http_hold: Option<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RuleSchema {
    name: Spanned<String>,
    action: ActionName,
    code: Option<u16>,
    /// Absent: every request (`when = []` written out is refused: a template's empty list).
    when: Option<Spanned<Vec<CondSchema>>>,
    #[serde(default)]
    source: Vec<Spanned<String>>,
    rate: Option<Spanned<RateSchema>>,
    /// DNS: the rcode a deny answers with (default: no answer).
    rcode: Option<Spanned<String>>,
    /// DNS: one rate-limited query in `slip` answered TC=1 (0: none).
    slip: Option<Spanned<u8>>,
    /// HTTP: the proof of work's leading zero bits a challenge asks for (dnsd ignores it).
    difficulty: Option<Spanned<u8>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct CondSchema {
    attr: Spanned<String>,
    exact: Option<String>,
    prefix: Option<String>,
    suffix: Option<String>,
    contains: Option<String>,
    one_of: Option<Vec<String>>,
    regex: Option<Spanned<String>>,
    present: Option<bool>,
    lt: Option<u64>,
    le: Option<u64>,
    gt: Option<u64>,
    ge: Option<u64>,
    #[serde(default)]
    not: bool,
}

struct Ctx<'a> {
    path: &'a Path,
    text: &'a str,
    base: PathBuf,
    lists: HashMap<String, Vec<IpNet>>,
    /// The files the rules read beside their own text (lists, ASN table, crawler ranges):
    /// part of every version, since a prefix added to a list file changes what every tenant
    /// that names it does.
    read: std::cell::RefCell<sha2::Sha256>,
}

impl Ctx<'_> {
    fn err<T>(
        &self,
        span: std::ops::Range<usize>,
        msg: impl Into<String>,
    ) -> Result<T, RulesError> {
        Err(RulesError::at_offset(self.path, self.text, span.start, msg))
    }

    fn resolve(&self, file: &str) -> PathBuf {
        let p = Path::new(file);
        if p.is_absolute() {
            p.to_path_buf()
        } else {
            self.base.join(p)
        }
    }

    /// Reads a referenced file; a missing one is reported at the line naming it.
    fn read(&self, file: &Spanned<String>) -> Result<(PathBuf, String), RulesError> {
        let p = self.resolve(file.get_ref());
        match crate::files::read_text(&p, crate::files::LIST_MAX) {
            Ok(t) => {
                use sha2::Digest;
                let mut h = self.read.borrow_mut();
                h.update(p.as_os_str().as_encoded_bytes());
                h.update((t.len() as u64).to_be_bytes());
                h.update(t.as_bytes());
                Ok((p, t))
            }
            Err(e) => self.err(file.span(), format!("cannot read {}: {e}", p.display())),
        }
    }

    /// Expands prefix strings and `@list` references.
    fn nets(&self, items: &[Spanned<String>]) -> Result<Vec<(IpNet, Option<String>)>, RulesError> {
        let mut out = Vec::new();
        for item in items {
            let s = item.get_ref().trim();
            if let Some(name) = s.strip_prefix('@') {
                let Some(list) = self.lists.get(name) else {
                    return self.err(item.span(), format!("unknown list {s:?}"));
                };
                out.extend(list.iter().map(|n| (*n, Some(name.to_string()))));
            } else {
                let Some(net) = parse_net(s) else {
                    return self.err(item.span(), format!("not a prefix or @list: {s:?}"));
                };
                out.push((net, None));
            }
        }
        Ok(out)
    }

    fn rate(&self, r: &Spanned<RateSchema>) -> Result<RateSpec, RulesError> {
        let v = r.get_ref();
        if !(v.per_second.is_finite() && v.per_second > 0.0 && v.per_second <= 250_000.0) {
            return self.err(r.span(), "per_second must be in (0, 250000]");
        }
        if v.burst == 0 {
            return self.err(r.span(), "burst must be at least 1");
        }
        if v.v4_prefix > 32 || v.v6_prefix > 128 {
            return self.err(r.span(), "v4_prefix must be <= 32 and v6_prefix <= 128");
        }
        let limit = Limit::per_second(v.per_second, v.burst);
        if limit.burst() < v.burst {
            return self.err(
                r.span(),
                "burst / per_second exceeds the limiter's 71-minute horizon",
            );
        }
        let key = match v.key.as_deref() {
            None | Some("source") => None,
            Some(k) if !attrs::is_known(k) => {
                return self.err(
                    r.span(),
                    format!("key: an attribute name, or \"source\" (not {k:?})"),
                );
            }
            Some(k) => Some(canonical_attr(k).into()),
        };
        if v.per_source && key.is_none() {
            return self.err(
                r.span(),
                "per_source goes with key (without a key a limit is per source already)",
            );
        }
        Ok(RateSpec {
            limit,
            v4: v.v4_prefix,
            v6: v.v6_prefix,
            key,
            per_source: v.per_source,
        })
    }

    fn condition(&self, c: &CondSchema) -> Result<Condition, RulesError> {
        let set = [
            c.exact.is_some(),
            c.prefix.is_some(),
            c.suffix.is_some(),
            c.contains.is_some(),
            c.one_of.is_some(),
            c.regex.is_some(),
            c.present.is_some(),
            c.lt.is_some(),
            c.le.is_some(),
            c.gt.is_some(),
            c.ge.is_some(),
        ]
        .iter()
        .filter(|b| **b)
        .count();
        if set != 1 {
            return self.err(
                c.attr.span(),
                "a condition needs exactly one of exact, prefix, suffix, contains, one_of, regex, present, lt, le, gt, ge",
            );
        }
        let attr = c.attr.get_ref().as_str();
        if attr.is_empty() {
            return self.err(c.attr.span(), "empty attribute name");
        }
        if !attrs::is_known(attr) {
            return self.err(
                c.attr.span(),
                format!(
                    "unknown attribute {attr:?} (it would never match): one of {}",
                    attrs::KNOWN.join(", ")
                ),
            );
        }
        if c.one_of.as_ref().is_some_and(|v| v.is_empty()) {
            return self.err(c.attr.span(), "one_of = [] matches nothing");
        }
        // Values the daemon that reads them knows (dnsd: the type, class and opcode
        // mnemonics): one it does not would never match.
        if let Some(check) = VALUE_CHECK.get() {
            for v in c.exact.iter().chain(c.one_of.iter().flatten()) {
                if let Some(why) = check(attr, v) {
                    return self.err(c.attr.span(), why);
                }
            }
        }
        // Attributes of a few values: another value never matches.
        let allowed: &[&str] = match attr {
            attrs::TRANSPORT => &["udp", "tcp"],
            attrs::COOKIE => &["none", "client_only", "valid", "invalid"],
            attrs::VERSION => &["http/1.0", "http/1.1", "http/2", "http/3"],
            _ => &[],
        };
        if !allowed.is_empty() {
            let values = c.exact.iter().chain(c.one_of.iter().flatten());
            for v in values {
                if !allowed.contains(&v.to_ascii_lowercase().as_str()) {
                    return self.err(
                        c.attr.span(),
                        format!("{attr} is one of {} (not {v:?})", allowed.join(", ")),
                    );
                }
            }
        }
        // An empty prefix, suffix or contains matches every value: `present = true` says so.
        for (k, v) in [
            ("prefix", &c.prefix),
            ("suffix", &c.suffix),
            ("contains", &c.contains),
        ] {
            if v.as_deref() == Some("") {
                return self.err(
                    c.attr.span(),
                    format!("{k} = \"\" matches every value: write present = true"),
                );
            }
        }
        // Header values reach the rules without the whitespace around them (RFC 9110 §5.5):
        // a value that starts or ends with it where the value does never matches.
        let header = attr == attrs::USER_AGENT || attr.starts_with(attrs::HEADER_PREFIX);
        if header {
            let ws = |v: &str, start: bool, end: bool| {
                (start && v.starts_with([' ', '\t'])) || (end && v.ends_with([' ', '\t']))
            };
            let bad = c
                .exact
                .iter()
                .chain(c.one_of.iter().flatten())
                .find(|v| ws(v, true, true))
                .or(c.prefix.as_ref().filter(|v| ws(v, true, false)))
                .or(c.suffix.as_ref().filter(|v| ws(v, false, true)));
            if let Some(v) = bad {
                return self.err(
                    c.attr.span(),
                    format!(
                        "{v:?}: a header value is matched without the spaces around it, so this never matches"
                    ),
                );
            }
        }
        // Names as the daemons see them: ASCII (an IDN as its A-label), no empty label, and
        // the HTTP host without its port; a value spelt otherwise never matched.
        let host = matches!(&*canonical_attr(attr), attrs::HOST | "header:host");
        if host || attr == attrs::QNAME {
            for v in c.exact.iter().chain(c.one_of.iter().flatten()) {
                // A whole name: the root alone may be "." (a host never is), none starts
                // with an empty label.
                let root = v == "." && !host;
                if !root && (v.is_empty() || v.starts_with('.')) {
                    return self.err(
                        c.attr.span(),
                        format!("{v:?} has an empty label: no {attr} has one"),
                    );
                }
            }
            // A qname suffix matches whole labels: a leading dot made one no name has.
            if attr == attrs::QNAME
                && let Some(v) = &c.suffix
                && v.len() > 1
                && v.starts_with('.')
            {
                return self.err(
                    c.attr.span(),
                    format!(
                        "suffix = {v:?}: write it without the leading dot (a suffix matches whole labels: the name and every name below it)"
                    ),
                );
            }
            let whole = c
                .exact
                .iter()
                .chain(c.one_of.iter().flatten())
                .chain(&c.suffix);
            for v in whole.clone().chain(&c.prefix).chain(&c.contains) {
                if !v.is_ascii() {
                    return self.err(
                        c.attr.span(),
                        format!("{attr} is ASCII: write {v:?} with its A-labels (xn--...)"),
                    );
                }
                if v.contains("..") {
                    return self.err(
                        c.attr.span(),
                        format!("{v:?} has an empty label: no {attr} has one"),
                    );
                }
                // A qname's space or control byte reaches the rules escaped (`\032`), a
                // host never holds one: either way the value never matches.
                if v.bytes()
                    .any(|b| b.is_ascii_whitespace() || b.is_ascii_control())
                {
                    return self.err(
                        c.attr.span(),
                        format!(
                            "{v:?} holds a space or control character: no {attr} does (a qname's is escaped, as \\032)"
                        ),
                    );
                }
            }
            if host {
                for v in whole {
                    let port = match v.strip_prefix('[') {
                        Some(lit) => lit.contains("]:"),
                        None => v.contains(':'),
                    };
                    if port {
                        return self.err(
                            c.attr.span(),
                            format!(
                                "{v:?}: the host is matched without its port (an IPv6 literal in brackets)"
                            ),
                        );
                    }
                }
            }
        }
        // DNS attributes compare in one spelling: names lower-case with the trailing dot,
        // type/class/opcode mnemonics upper-case, the others lower-case; a whole HTTP host
        // without its trailing dot (http-front strips it from the request's).
        let norm = |v: &str| {
            let n = normalize(attr, v);
            match n.strip_suffix('.') {
                Some(bare) if host && !bare.is_empty() => bare.to_string(),
                _ => n,
            }
        };
        let matcher = if let Some(s) = &c.exact {
            Matcher::Exact(norm(s).into())
        } else if let Some(s) = &c.prefix {
            let p = if attr == attrs::QNAME {
                s.to_ascii_lowercase()
            } else {
                normalize(attr, s)
            };
            Matcher::Prefix(p.into())
        } else if let Some(s) = &c.suffix {
            if attr == attrs::QNAME {
                // Whole labels: "example.com" and "example.com." alike.
                Matcher::LabelSuffix(norm(s).into())
            } else {
                Matcher::Suffix(norm(s).into())
            }
        } else if let Some(s) = &c.contains {
            let v = if attr == attrs::QNAME {
                s.to_ascii_lowercase()
            } else {
                normalize(attr, s)
            };
            Matcher::Contains(v.into())
        } else if let Some(v) = &c.one_of {
            if v.len() > ONE_OF_SET_MIN {
                Matcher::OneOfSet(v.iter().map(|s| norm(s).into()).collect())
            } else {
                Matcher::OneOf(v.iter().map(|s| norm(s).into()).collect())
            }
        } else if let Some(n) = c.lt {
            Matcher::Num(NumOp::Lt, n)
        } else if let Some(n) = c.le {
            Matcher::Num(NumOp::Le, n)
        } else if let Some(n) = c.gt {
            Matcher::Num(NumOp::Gt, n)
        } else if let Some(n) = c.ge {
            Matcher::Num(NumOp::Ge, n)
        } else if let Some(r) = &c.regex {
            match RegexBuilder::new(r.get_ref())
                .size_limit(REGEX_SIZE_LIMIT)
                .build()
            {
                Ok(re) => Matcher::Regex {
                    anchors: super::compiled::Anchors::of(r.get_ref()),
                    re,
                    prefilter: None,
                },
                Err(e) => return self.err(r.span(), format!("bad regex: {e}")),
            }
        } else {
            Matcher::Present(c.present.unwrap_or(true))
        };
        let attr = canonical_attr(attr);
        Ok(Condition {
            bit: super::attr::bit(&attr),
            attr: attr.into(),
            matcher,
            negate: c.not,
        })
    }

    fn tenant(
        &self,
        t: &TenantSchema,
        bots_loaded: bool,
        asn_loaded: bool,
    ) -> Result<Tenant, RulesError> {
        let id = *t.id.get_ref();
        let mut allow = PrefixSet::new();
        for (n, _) in self.nets(&t.allow)? {
            allow.insert(n, ());
        }
        let mut deny = PrefixMap::new();
        let mut deny_verdicts = vec![Verdict::new(Action::Deny, codes::DENY_LIST, "deny-list")];
        let mut list_index: HashMap<String, u16> = HashMap::new();
        for (n, list) in self.nets(&t.deny)? {
            let idx = match list {
                None => 0,
                Some(name) => *list_index.entry(name.clone()).or_insert_with(|| {
                    deny_verdicts.push(Verdict::new(
                        Action::Deny,
                        codes::DENY_LIST,
                        &format!("deny:@{name}"),
                    ));
                    (deny_verdicts.len() - 1) as u16
                }),
            };
            deny.insert(n, idx);
        }
        let mut deny_asn = t
            .deny_asn
            .as_ref()
            .map(|v| v.get_ref().clone())
            .unwrap_or_default();
        deny_asn.sort_unstable();
        deny_asn.dedup();
        if let Some(span) = t.deny_asn.as_ref().map(Spanned::span)
            && !deny_asn.is_empty()
            && !asn_loaded
        {
            return self.err(span, "deny_asn needs an [asn] table");
        }
        if t.allow_known_bots && !bots_loaded {
            return self.err(t.id.span(), "allow_known_bots needs [known_bots] files");
        }
        if t.rule.len() > MAX_RULES_PER_TENANT {
            return self.err(
                t.id.span(),
                format!("more than {MAX_RULES_PER_TENANT} rules"),
            );
        }
        let rate = t.rate_limit.as_ref().map(|r| self.rate(r)).transpose()?;
        let escalate = t
            .escalate
            .as_ref()
            .map(|e| self.escalation(id, e))
            .transpose()?;

        let mut rules = Vec::with_capacity(t.rule.len());
        // Rules of one name (not refused) keep buckets of their own: by name and the how
        // manyth of that name.
        let mut same_name: std::collections::HashMap<&str, u32> = Default::default();
        for (i, r) in t.rule.iter().enumerate() {
            let name = r.name.get_ref();
            let nth = {
                let n = same_name.entry(name.as_str()).or_default();
                *n += 1;
                *n - 1
            };
            let code = r.code.unwrap_or(codes::RULE_BASE.saturating_add(i as u16));
            let action = match r.action {
                ActionName::Allow => Action::Allow,
                ActionName::Deny => Action::Deny,
                ActionName::Challenge => Action::Challenge,
                ActionName::RateLimit => Action::RateLimit,
            };
            let rate = match (&r.rate, action) {
                (Some(rs), Action::RateLimit) => Some(self.rate(rs)?),
                (None, Action::RateLimit) => {
                    return self.err(r.name.span(), "action rate_limit needs `rate`");
                }
                (Some(rs), _) => {
                    return self.err(rs.span(), "`rate` only goes with action rate_limit");
                }
                (None, _) => None,
            };
            if let Some(w) = &r.when
                && w.get_ref().is_empty()
            {
                return self.err(
                    w.span(),
                    "when = [] is empty: it would match every request (leave `when` out for a rule on every request)",
                );
            }
            let conds = r
                .when
                .iter()
                .flat_map(|w| w.get_ref())
                .map(|c| self.condition(c))
                .collect::<Result<Vec<_>, _>>()?;
            let dns_rcode = match &r.rcode {
                None => None,
                Some(_) if action != Action::Deny => {
                    return self.err(
                        r.rcode.as_ref().map(Spanned::span).unwrap_or_default(),
                        "`rcode` only goes with action deny",
                    );
                }
                // A deny answers with one of the basic rcodes (they fit the header alone).
                Some(rc) => match rcode_by_name(rc.get_ref()).filter(|&v| v <= 5) {
                    Some(v) => Some(v),
                    None => {
                        return self.err(
                            rc.span(),
                            format!(
                                "unknown rcode {:?}: NOERROR, FORMERR, SERVFAIL, NXDOMAIN, NOTIMP or REFUSED",
                                rc.get_ref()
                            ),
                        );
                    }
                },
            };
            let slip = match &r.slip {
                None => super::DEFAULT_SLIP,
                Some(sl) if action != Action::RateLimit => {
                    return self.err(sl.span(), "`slip` only goes with action rate_limit");
                }
                Some(sl) => *sl.get_ref(),
            };
            let difficulty = match &r.difficulty {
                None => 0,
                Some(d) if action != Action::Challenge => {
                    return self.err(d.span(), "`difficulty` only goes with action challenge");
                }
                Some(d) if !(1..=super::MAX_DIFFICULTY).contains(d.get_ref()) => {
                    return self.err(
                        d.span(),
                        format!(
                            "difficulty {} out of range 1..={} (leading zero bits of a SHA-256)",
                            d.get_ref(),
                            super::MAX_DIFFICULTY
                        ),
                    );
                }
                Some(d) => *d.get_ref(),
            };
            let source = if r.source.is_empty() {
                None
            } else {
                Some(
                    self.nets(&r.source)?
                        .into_iter()
                        .map(|(n, _)| (n, ()))
                        .collect(),
                )
            };
            rules.push(Rule {
                state_key: state_key(name, nth),
                verdict: Verdict {
                    dns_rcode,
                    slip,
                    difficulty,
                    ..Verdict::new(action, code, name)
                },
                conds,
                source,
                rate,
            });
        }
        let prefilters = self.prefilters(&mut rules);
        let index = super::compiled::index::RuleIndex::build(&rules);
        let reads = rules
            .iter()
            .flat_map(|r| r.conds.iter())
            .fold(0u32, |m, c| m | attrs::bit(&c.attr));
        let allow_rules = rules.iter().any(|r| r.verdict.action == Action::Allow);
        Ok(Tenant {
            id,
            allow,
            allow_bots: t.allow_known_bots,
            deny,
            deny_verdicts,
            deny_asn,
            rules,
            prefilters,
            rate,
            escalate,
            index,
            name: t.name.as_deref().map(Box::from),
            reads,
            allow_rules,
            hold_gen: 0,
        })
    }

    fn escalation(
        &self,
        tenant: u32,
        e: &Spanned<EscalateSchema>,
    ) -> Result<Escalation, RulesError> {
        let v = e.get_ref();
        if v.after == 0 || v.after > 65_535 {
            return self.err(e.span(), "after must be in 1..=65535");
        }
        if v.window_secs == 0 || v.block_secs == 0 {
            return self.err(e.span(), "window_secs and block_secs must be positive");
        }
        if v.v4_prefix > 32 || v.v6_prefix > 128 {
            return self.err(e.span(), "v4_prefix must be <= 32 and v6_prefix <= 128");
        }
        let on =
            v.on.clone()
                .unwrap_or_else(|| vec![ActionName::Deny, ActionName::RateLimit]);
        if on.contains(&ActionName::Allow) {
            return self.err(e.span(), "`on` takes deny, rate_limit and challenge");
        }
        let reason = v
            .reason
            .clone()
            .unwrap_or_else(|| format!("tenant {tenant} escalation"));
        let block_map = |key: &str, v: Option<&str>| match v {
            None | Some("tenant") => Ok(false),
            Some("block_map") => Ok(true),
            Some(other) => self.err(
                e.span(),
                format!("{key} = {other:?}: \"tenant\" (the default) or \"block_map\""),
            ),
        };
        let dns_block_map = block_map("dns", v.dns.as_deref())?;
        let http_block_map = block_map("http", v.http.as_deref())?;
        let count_relayed = match v.relayed.as_deref() {
            None | Some("ignore") => false,
            Some("count") => true,
            Some(other) => {
                return self.err(
                    e.span(),
                    format!("relayed = {other:?}: \"ignore\" (the default) or \"count\""),
                );
            }
        };
        let dns_truncate = match v.dns_hold.as_deref() {
            Some(_) if dns_block_map => {
                return self.err(
                    e.span(),
                    "dns_hold is how a tenant's hold answers: it takes dns = \"tenant\" (a block in the block map refuses every packet)",
                );
            }
            None | Some("truncate") => true,
            Some("refuse") => false,
            Some(other) => {
                return self.err(
                    e.span(),
                    format!("dns_hold = {other:?}: \"truncate\" (the default) or \"refuse\""),
                );
            }
        };
        let http_challenge = match v.http_hold.as_deref() {
            None | Some("challenge") => true,
            Some("deny") => false,
            Some(other) => {
                return self.err(
                    e.span(),
                    format!("http_hold = {other:?}: \"challenge\" (the default) or \"deny\""),
                );
            }
        };
        Ok(Escalation {
            after: v.after,
            window_ms: v.window_secs.saturating_mul(1000),
            ttl: Duration::from_secs(v.block_secs),
            on_deny: on.contains(&ActionName::Deny),
            on_rate_limit: on.contains(&ActionName::RateLimit),
            on_challenge: on.contains(&ActionName::Challenge),
            v4: v.v4_prefix,
            v6: v.v6_prefix,
            reason: Reason::new(&reason),
            dns_block_map,
            http_block_map,
            count_relayed,
            dns_truncate,
            http_challenge,
        })
    }

    /// Groups regex conditions by attribute; an attribute with several gets one `RegexSet`.
    fn prefilters(&self, rules: &mut [Rule]) -> Vec<(Box<str>, regex::RegexSet)> {
        let mut by_attr: Vec<(Box<str>, Vec<String>)> = Vec::new();
        for rule in rules.iter() {
            for c in &rule.conds {
                if let Matcher::Regex { re, .. } = &c.matcher {
                    match by_attr.iter_mut().find(|(a, _)| *a == c.attr) {
                        Some((_, v)) => v.push(re.as_str().to_string()),
                        None => by_attr.push((c.attr.clone(), vec![re.as_str().to_string()])),
                    }
                }
            }
        }
        let mut out = Vec::new();
        for (attr, patterns) in by_attr {
            if patterns.len() < 2 || out.len() == MAX_PREFILTERS {
                continue;
            }
            // The shared set only saves work: past its size limit (each regex is within its
            // own) the attribute's regexes are tried one by one, and the file still loads.
            let set = match RegexSetBuilder::new(&patterns)
                .size_limit(REGEX_SIZE_LIMIT * 4)
                .build()
            {
                Ok(set) => set,
                Err(e) => {
                    tracing::warn!(
                        file = %self.path.display(),
                        attr = &*attr,
                        regexes = patterns.len(),
                        error = %e,
                        "the regexes on this attribute are too big to share one prefilter: each is tried alone"
                    );
                    continue;
                }
            };
            let idx = out.len() as u8;
            for rule in rules.iter_mut() {
                for c in &mut rule.conds {
                    if c.attr == attr
                        && let Matcher::Regex { prefilter, .. } = &mut c.matcher
                    {
                        *prefilter = Some(idx);
                    }
                }
            }
            out.push((attr, set));
        }
        out
    }
}

/// Parses and compiles a rules file.
pub(super) fn compile(path: &Path, text: &str) -> Result<Prepared, RulesError> {
    // Checked before parsing: deserialising TOML costs about 40 times the text in memory, so
    // a generated file of a million rules (110 MB) took 4.5 GB and 20 s only to be refused
    // by the per-tenant limit (found by the abuse tests).
    if text.len() > MAX_FILE_BYTES {
        let at = text.floor_char_boundary(MAX_FILE_BYTES);
        return Err(RulesError::at_offset(
            path,
            text,
            at,
            format!("rules file larger than {} MiB", MAX_FILE_BYTES >> 20),
        ));
    }
    let file: FileSchema = toml::from_str(text).map_err(|e| {
        let offset = e.span().map(|s| s.start).unwrap_or(0);
        RulesError::at_offset(path, text, offset, e.message().trim())
    })?;
    let mut ctx = Ctx {
        path,
        text,
        base: path.parent().map(Path::to_path_buf).unwrap_or_default(),
        lists: HashMap::new(),
        read: Default::default(),
    };

    let mut bots = PrefixSet::new();
    let bots_loaded = file.known_bots.is_some();
    if let Some(kb) = &file.known_bots {
        for f in &kb.files {
            let p = ctx.resolve(f.get_ref());
            if !p.exists() {
                return ctx.err(
                    f.span(),
                    format!("cannot read {}: file not found", p.display()),
                );
            }
            for n in load_crawler_ranges(&p)? {
                use sha2::Digest;
                ctx.read.borrow_mut().update(n.to_string().as_bytes());
                bots.insert(n, ());
            }
        }
    }
    let asn = match &file.asn {
        Some(a) => {
            let (p, t) = ctx.read(&a.file)?;
            AsnTable::parse(&p, &t)?
        }
        None => AsnTable::default(),
    };
    for l in &file.list {
        let name = l.name.get_ref();
        if name.is_empty() || name.contains(char::is_whitespace) {
            return ctx.err(l.name.span(), "list names are non-empty words");
        }
        if ctx.lists.contains_key(name) {
            return ctx.err(l.name.span(), format!("duplicate list {name:?}"));
        }
        let mut nets = Vec::new();
        for p in &l.prefixes {
            match parse_net(p.get_ref()) {
                Some(n) => nets.push(n),
                None => return ctx.err(p.span(), format!("not a prefix: {:?}", p.get_ref())),
            }
        }
        if let Some(f) = &l.file {
            let (p, t) = ctx.read(f)?;
            nets.extend(parse_prefix_list(&p, &t)?);
        }
        ctx.lists.insert(name.clone(), nets);
    }

    let mut tenants: Vec<Option<Box<Tenant>>> = Vec::new();
    let mut seen = std::collections::HashSet::new();
    for t in &file.tenant {
        let id = *t.id.get_ref();
        if id == 0 {
            return ctx.err(
                t.id.span(),
                "tenant 0 is \"no tenant\" (zones and sites that name none): ids start at 1",
            );
        }
        if id > MAX_TENANT_ID {
            return ctx.err(
                t.id.span(),
                format!("tenant id {id} is above {MAX_TENANT_ID}"),
            );
        }
        let i = id as usize;
        if tenants.len() <= i {
            tenants.resize_with(i + 1, || None);
        }
        if seen.contains(&id) {
            return ctx.err(t.id.span(), format!("duplicate tenant {id}"));
        }
        let tenant = ctx.tenant(t, bots_loaded, file.asn.is_some())?;
        // A tenant that can never match anything costs the same as an absent one.
        tenants[i] = (!tenant.is_noop()).then(|| Box::new(tenant));
        seen.insert(id);
    }
    let mut global_lists = GlobalLists::default();
    let mut global_deny = PrefixSet::new();
    if let Some(g) = &file.global {
        let mut never = crate::never_block::NeverBlock::new();
        for (n, _) in ctx.nets(&g.never_block)? {
            never.push(n, "rules file");
            global_lists.never_block.push(n);
        }
        // A deny that reaches a never-block address would block it in XDP: refused here.
        for item in &g.deny {
            for (n, _) in ctx.nets(std::slice::from_ref(item))? {
                // A whole family or most of it, for every tenant, in XDP too: the node would
                // answer no one of it (stopping the daemon says so more plainly). Shorter
                // than /4 (IPv4, `240.0.0.0/4` is a real one) or /8 (IPv6), IPv4 written as
                // IPv4-mapped IPv6 read as IPv4.
                let c = crate::never_block::canonical_net(n.trunc());
                let short = match c {
                    IpNet::V4(v) => v.prefix_len() < 4,
                    IpNet::V6(v) => v.prefix_len() < 8,
                };
                if short {
                    return ctx.err(
                        item.span(),
                        format!(
                            "deny {n} refuses most {} clients of every tenant (a global deny is \
                             at least a /4 of IPv4, a /8 of IPv6)",
                            if c.addr().is_ipv4() { "IPv4" } else { "IPv6" }
                        ),
                    );
                }
                if let Some(p) = never.conflict(&n) {
                    return ctx.err(
                        item.span(),
                        format!("deny {n} overlaps never_block {}", p.net),
                    );
                }
                global_deny.insert(n, ());
                global_lists.deny.push(n);
            }
        }
        global_lists.allow = ctx.nets(&g.allow)?.into_iter().map(|(n, _)| n).collect();
    }
    let escalations = file
        .tenant
        .iter()
        .filter_map(|t| {
            let e = t.escalate.as_ref()?;
            let (line, col) = crate::toml_pos::line_col(text, e.span().start);
            Some((line, col, e.get_ref().v4_prefix, e.get_ref().v6_prefix))
        })
        .collect();
    let mut tenant_versions = tenant_versions(text, file.tenant.iter().map(|t| *t.id.get_ref()));
    // What the files it reads hold goes into every version (the text alone left a held
    // source added to a never-block list file held, and clearances valid).
    let read = {
        use sha2::Digest;
        ctx.read.take().finalize()
    };
    let mix = |v: u64| {
        use sha2::Digest;
        let d = sha2::Sha256::new()
            .chain_update(v.to_be_bytes())
            .chain_update(read)
            .finalize();
        u64::from_be_bytes(d[..8].try_into().expect("8 bytes"))
    };
    let uses_files = file.known_bots.is_some() || file.asn.is_some() || !file.list.is_empty();
    if uses_files {
        for v in tenant_versions.0.values_mut() {
            *v = mix(*v);
        }
        tenant_versions.1 = mix(tenant_versions.1);
    }
    let version = if uses_files {
        mix(version_of(text))
    } else {
        version_of(text)
    };
    Ok(Prepared {
        version,
        tenant_versions,
        tenants,
        bots,
        asn,
        global_deny,
        global_lists,
        escalations,
        path: path.to_path_buf(),
    })
}

/// The rules' version: the first 8 bytes of the file text's SHA-256, alike on every node that
/// has the same file.
fn version_of(text: &str) -> u64 {
    use sha2::Digest;
    let d = sha2::Sha256::digest(text.as_bytes());
    u64::from_be_bytes(d[..8].try_into().expect("8 bytes"))
}

/// Each tenant's version, and that of the file without any tenant (for tenants it does not
/// name): the SHA-256 of the file's text with every other tenant's `[[tenant]]` table cut
/// out. A clearance names its site's tenant's: an edit to another tenant's rules (a line, a
/// comment) challenged every client of every site again.
fn tenant_versions(
    text: &str,
    ids: impl Iterator<Item = u32>,
) -> (std::collections::HashMap<u32, u64>, u64) {
    // Where each top-level table starts (its header): a tenant's table runs from its
    // `[[tenant]]` to the next one (its `[[tenant.rule]]`s are in it).
    #[derive(Deserialize)]
    struct Spans {
        global: Option<Spanned<toml::Value>>,
        known_bots: Option<Spanned<toml::Value>>,
        asn: Option<Spanned<toml::Value>>,
        #[serde(default)]
        list: Vec<Spanned<toml::Value>>,
        #[serde(default)]
        tenant: Vec<Spanned<toml::Value>>,
    }
    let spans: Vec<std::ops::Range<usize>> = match toml::from_str::<Spans>(text) {
        Ok(s) => {
            let mut starts: Vec<usize> = [&s.global, &s.known_bots, &s.asn]
                .into_iter()
                .flatten()
                .chain(&s.list)
                .chain(&s.tenant)
                .map(|t| t.span().start)
                .collect();
            starts.sort_unstable();
            s.tenant
                .iter()
                .map(|t| {
                    let start = t.span().start;
                    let end = starts
                        .iter()
                        .copied()
                        .find(|&x| x > start)
                        .unwrap_or(text.len());
                    start..end
                })
                .collect()
        }
        Err(_) => Vec::new(),
    };
    let without = |keep: Option<usize>| {
        use sha2::Digest;
        let mut h = sha2::Sha256::new();
        // Each piece kept, trimmed and length-prefixed: where the cuts fall (the blank
        // lines between tables) changes nothing.
        let mut piece = |b: &str| {
            let b = b.trim();
            if !b.is_empty() {
                h.update((b.len() as u64).to_be_bytes());
                h.update(b.as_bytes());
            }
        };
        let mut at = 0;
        for (i, r) in spans.iter().enumerate() {
            if Some(i) == keep || r.start < at || r.end > text.len() {
                continue;
            }
            piece(text.get(at..r.start).unwrap_or(""));
            at = r.end;
        }
        piece(text.get(at..).unwrap_or(""));
        let d = h.finalize();
        u64::from_be_bytes(d[..8].try_into().expect("8 bytes"))
    };
    let versions = ids
        .enumerate()
        .map(|(i, id)| (id, without((i < spans.len()).then_some(i))))
        .collect();
    (versions, without(None))
}

/// The process's check of condition values (see [`set_value_check`]).
static VALUE_CHECK: std::sync::OnceLock<fn(&str, &str) -> Option<String>> =
    std::sync::OnceLock::new();

/// Installs the process's check of the values an `exact` or `one_of` condition compares an
/// attribute with: `check(attr, value)` says why the value never matches, or `None`. A
/// daemon that knows an attribute's values (dnsd: DNS type mnemonics) installs it once,
/// before any rules file is read; a rules file with such a value is refused at its line.
pub fn set_value_check(check: fn(&str, &str) -> Option<String>) {
    let _ = VALUE_CHECK.set(check);
}

/// The value of a DNS rcode mnemonic (any case), for the rules' `rcode` and dnstap's filter.
pub fn rcode_by_name(name: &str) -> Option<u16> {
    Some(match name.to_ascii_uppercase().as_str() {
        "NOERROR" => 0,
        "FORMERR" => 1,
        "SERVFAIL" => 2,
        "NXDOMAIN" => 3,
        "NOTIMP" => 4,
        "REFUSED" => 5,
        "NOTAUTH" => 9,
        "BADVERS" => 16,
        "BADCOOKIE" => 23,
        _ => return None,
    })
}

/// A condition value in the spelling the attribute is compared in.
fn normalize(attr: &str, v: &str) -> String {
    match &*canonical_attr(attr) {
        attrs::QNAME => {
            let mut s = v.to_ascii_lowercase();
            if !s.ends_with('.') {
                s.push('.');
            }
            s
        }
        attrs::QTYPE | attrs::QCLASS | attrs::OPCODE => v.to_ascii_uppercase(),
        // HTTP's host is seen lower-case without its trailing dot, the method and version
        // upper-case (a lower-case method is refused before the rules): `Internal.a.test`,
        // `delete` or `http/2` would never match.
        // `header:host` is the host too (http-front gives the rules the normalised host).
        attrs::HOST | "header:host" => v.to_ascii_lowercase(),
        attrs::METHOD | attrs::VERSION => v.to_ascii_uppercase(),
        attrs::TRANSPORT | attrs::COOKIE => v.to_ascii_lowercase(),
        _ => v.to_string(),
    }
}

/// An attribute's name as the daemons look it up: a header's in lower case (`header:Host` is
/// `header:host`, which http-front maps to the normalised host; as written it matched the raw
/// value, and `header:X-Forwarded-Proto` the client's own copy).
fn canonical_attr(attr: &str) -> std::borrow::Cow<'_, str> {
    match attr.strip_prefix(super::attr::HEADER_PREFIX) {
        Some(h) if h.bytes().any(|b| b.is_ascii_uppercase()) => {
            format!("{}{}", super::attr::HEADER_PREFIX, h.to_ascii_lowercase()).into()
        }
        _ => attr.into(),
    }
}

/// A rule's rate-limit state key from its name and how manyth rule of that name it is in its
/// tenant (FNV-1a, the top bit clear: never the tenant-wide limit's key): the same in every
/// process and across reloads.
pub(crate) fn state_key(name: &str, nth: u32) -> u32 {
    let h = name
        .bytes()
        .chain(nth.to_le_bytes())
        .fold(0x811c_9dc5u32, |h, b| {
            (h ^ u32::from(b)).wrapping_mul(0x0100_0193)
        });
    h & 0x7fff_ffff
}

#[cfg(test)]
mod tests {
    use super::*;

    fn err(text: &str) -> String {
        compile(Path::new("r.toml"), text).unwrap_err().to_string()
    }

    #[test]
    fn syntax_and_unknown_keys_have_lines() {
        assert!(
            err("[[tenant]]\nid = 1\nbogus = 2\n").starts_with("r.toml:3:1: unknown field `bogus`")
        );
        assert!(err("[[tenant]]\nid = \n").starts_with("r.toml:2:"));
        assert!(
            err("[[tenant]]\nid = 1\n[[tenant.rule]]\nname = \"x\"\naction = \"explode\"\n")
                .starts_with("r.toml:5:")
        );
    }

    #[test]
    fn semantic_errors_have_lines() {
        assert_eq!(
            err("[[tenant]]\nid = 1\ndeny = [\"10.0.0.0/8\", \"@nope\"]\n"),
            "r.toml:3:23: unknown list \"@nope\""
        );
        assert_eq!(
            err("[[tenant]]\nid = 1\n[[tenant]]\nid = 1\n"),
            "r.toml:4:6: duplicate tenant 1"
        );
        assert!(err("[[tenant]]\nid = 1\n[[tenant.rule]]\nname = \"r\"\naction = \"deny\"\nwhen = [{ attr = \"path\", regex = \"(\" }]\n")
            .starts_with("r.toml:6:34: bad regex"));
        assert!(err("[[tenant]]\nid = 1\n[[tenant.rule]]\nname = \"r\"\naction = \"deny\"\nwhen = [{ attr = \"path\" }]\n")
            .starts_with("r.toml:6:18: a condition needs exactly one"));
        assert!(
            err("[[tenant]]\nid = 1\ndeny_asn = [1]\n").starts_with("r.toml:3:12: deny_asn needs")
        );
        assert!(
            err("[[tenant]]\nid = 1\n[[tenant.rule]]\nname = \"r\"\naction = \"rate_limit\"\n")
                .starts_with("r.toml:4:8: action rate_limit needs `rate`")
        );
        assert!(err("[[tenant]]\nid = 2000000\n").starts_with("r.toml:2:6: tenant id"));
        assert!(err("[asn]\nfile = \"missing.csv\"\n").starts_with("r.toml:2:8: cannot read"));
        // A condition that could never match: a misspelt attribute, a value it never has,
        // an empty one_of (each silently disabled its rule).
        let rule = |when: &str| {
            format!(
                "[[tenant]]\nid = 1\n[[tenant.rule]]\nname = \"r\"\naction = \"deny\"\nwhen = [{when}]\n"
            )
        };
        for (when, want) in [
            (
                "{ attr = \"qtipe\", exact = \"ANY\" }",
                "unknown attribute \"qtipe\"",
            ),
            (
                "{ attr = \"pathh\", prefix = \"/x\" }",
                "unknown attribute \"pathh\"",
            ),
            (
                "{ attr = \"header:\", present = true }",
                "unknown attribute",
            ),
            (
                "{ attr = \"header:a b\", present = true }",
                "unknown attribute",
            ),
            (
                "{ attr = \"transport\", exact = \"udpp\" }",
                "transport is one of udp, tcp",
            ),
            (
                "{ attr = \"cookie\", one_of = [\"valid\", \"good\"] }",
                "cookie is one of",
            ),
            (
                "{ attr = \"qtype\", one_of = [] }",
                "one_of = [] matches nothing",
            ),
            ("{ attr = \"host\", exact = \"bücher.test\" }", "A-labels"),
            (
                "{ attr = \"qname\", suffix = \"www.bücher.test\" }",
                "A-labels",
            ),
            ("{ attr = \"qname\", exact = \"a..b.test\" }", "empty label"),
            ("{ attr = \"host\", exact = \".a.test\" }", "empty label"),
            ("{ attr = \"host\", one_of = [\".\"] }", "empty label"),
            (
                "{ attr = \"path\", contains = \"\" }",
                "write present = true",
            ),
            (
                "{ attr = \"qname\", suffix = \".example.com\" }",
                "without the leading dot",
            ),
            (
                "{ attr = \"host\", exact = \"deny.a.test:8080\" }",
                "without its port",
            ),
            (
                "{ attr = \"header:Host\", one_of = [\"a.test\", \"[::1]:80\"] }",
                "without its port",
            ),
            (
                "{ attr = \"qname\", exact = \"a b.test\" }",
                "space or control",
            ),
            (
                "{ attr = \"host\", contains = \"a\\tb\" }",
                "space or control",
            ),
            (
                "{ attr = \"user_agent\", prefix = \" sqlmap\" }",
                "without the spaces around it",
            ),
            (
                "{ attr = \"header:x-a\", one_of = [\"b\", \"c \"] }",
                "without the spaces around it",
            ),
            (
                "{ attr = \"header:x-a\", suffix = \"c\\t\" }",
                "without the spaces around it",
            ),
        ] {
            let e = err(&rule(when));
            assert!(
                e.starts_with("r.toml:6:") && e.contains(want),
                "{when}: {e}"
            );
        }
        for deny in [
            "0.0.0.0/0",
            "::/0",
            "128.0.0.0/1",
            "::ffff:0:0/96",
            "2000::/3",
        ] {
            let e = err(&format!(
                "[global]\ndeny = [\"192.0.2.0/24\", \"{deny}\"]\n"
            ));
            assert!(
                e.starts_with("r.toml:2:25: deny") && e.contains("every"),
                "{e}"
            );
        }
        compile(Path::new("r.toml"), "[global]\ndeny = [\"240.0.0.0/4\"]\n").unwrap();
        let e = err(
            "[[tenant]]\nid = 1\n[[tenant.rule]]\nname = \"r\"\naction = \"deny\"\nwhen = []\n",
        );
        assert!(e.starts_with("r.toml:6:8: when = [] is empty"), "{e}");
        for when in [
            "{ attr = \"host\", exact = \"deny.a.test.\" }",
            "{ attr = \"host\", exact = \"[::1]\" }",
            "{ attr = \"host\", prefix = \"www.\" }",
            "{ attr = \"qname\", exact = \".\" }",
            "{ attr = \"qname\", suffix = \"xn--bcher-kva.test\" }",
            "{ attr = \"header:x-api-version\", exact = \"1\" }",
            "{ attr = \"transport\", exact = \"TCP\" }",
            "{ attr = \"version\", exact = \"HTTP/2\" }",
            "{ attr = \"user_agent\", suffix = \" bot\" }",
            "{ attr = \"user_agent\", contains = \" sqlmap \" }",
            "{ attr = \"path\", prefix = \" \" }",
        ] {
            compile(Path::new("r.toml"), &rule(when)).unwrap();
        }
    }

    #[test]
    fn one_of_sets_and_empty_file() {
        let p = compile(Path::new("r.toml"), "").unwrap();
        assert_eq!(p.tenant_count(), 0);
        let vals: Vec<String> = (0..20).map(|i| format!("\"v{i}\"")).collect();
        let text = format!(
            "[[tenant]]\nid = 1\n[[tenant.rule]]\nname = \"r\"\naction = \"deny\"\nwhen = [{{ attr = \"qtype\", one_of = [{}] }}]\n",
            vals.join(",")
        );
        let p = compile(Path::new("r.toml"), &text).unwrap();
        let t = p.tenants[1].as_ref().unwrap();
        assert!(matches!(t.rules[0].conds[0].matcher, Matcher::OneOfSet(_)));
    }
}
