//! Compiled rules: each tenant's prefix tables, request rules with their compiled matchers
//! (exact, prefix, label suffix, sets, anchored regexes behind a shared `RegexSet`), its rate
//! and escalation, and the [`index`] that picks candidate rules by keyed lookups.

use super::{Request, TenantId, Verdict, attr};
use crate::block::Reason;
use crate::prefix::{PrefixMap, PrefixSet};
use crate::ratelimit::Limit;
use regex::{Regex, RegexSet};
use std::time::Duration;

pub(crate) mod index;

#[derive(Clone, Debug)]
pub(crate) struct RateSpec {
    pub(crate) limit: Limit,
    pub(crate) v4: u8,
    pub(crate) v6: u8,
    /// `key`: counted per value of this attribute (`ja4`), else per source prefix.
    pub(crate) key: Option<Box<str>>,
    /// `per_source`: with `key`, per value and source prefix together.
    pub(crate) per_source: bool,
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
    /// DNS (`dns = "block_map"`): into the block map (every zone, XDP, the fleet) even where
    /// escalations hold for the tenant alone.
    pub(crate) dns_block_map: bool,
    /// HTTP (`http = "block_map"`): the same for http-front (every site, every packet).
    pub(crate) http_block_map: bool,
    /// DNS (`relayed = "count"`): queries without RD count too (the tenant's clients ask it
    /// directly: no resolver relays for them).
    pub(crate) count_relayed: bool,
    /// DNS, held for the tenant (`dns_hold = "truncate"`, the default): the held source's
    /// queries go through the rules as any source's, and over UDP only its answers for names
    /// that exist go back whole (the rest TC=1) — a forwarder held for one user's queries
    /// keeps serving the others.
    pub(crate) dns_truncate: bool,
    /// HTTP, held for the tenant (`http_hold = "challenge"`, the default): the held source's
    /// requests are challenged, and one with a valid clearance goes through the rules — a
    /// page elsewhere can make any visitor's browser send what escalates, and a browser
    /// solves the challenge where a bot does not.
    pub(crate) http_challenge: bool,
}

impl Escalation {
    /// Whether it goes into the block map rather than hold for its tenant alone, in the
    /// daemon whose requests are HTTP (`http`) or DNS.
    #[inline]
    pub(crate) fn block_map(&self, http: bool) -> bool {
        if http {
            self.http_block_map
        } else {
            self.dns_block_map
        }
    }

    /// Whether holds for the tenant alone may exist: always in HTTP (with `http =
    /// "block_map"`, a browser's requests escalate into a hold), in DNS unless `dns =
    /// "block_map"`.
    #[inline]
    pub(crate) fn may_hold(&self, http: bool) -> bool {
        http || !self.dns_block_map
    }
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
    pub(crate) start: Box<[u8]>,
    /// A match ends with this (the pattern ends with `$`); empty: not known.
    pub(crate) end: Box<[u8]>,
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
    pub(crate) fn admits(&self, v: &[u8]) -> bool {
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

/// A decimal number without sign or spaces (at most 19 digits past leading zeros, which an
/// origin reads as the number: `Content-Length: 000…0150` is 150 to it).
#[inline]
fn parse_u64(v: &str) -> Option<u64> {
    let b = v.as_bytes();
    let lead = b.iter().take_while(|&&c| c == b'0').count();
    let b = if lead == b.len() {
        &b[b.len().saturating_sub(1)..]
    } else {
        &b[lead..]
    };
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
    pub(crate) fn matches<R: Request + ?Sized>(
        &self,
        req: &R,
        prefilters: &[(Box<str>, RegexSet)],
        cache: &mut [u8; MAX_PREFILTERS],
    ) -> bool {
        if req.multi_valued() && !matches!(self.matcher, Matcher::Present(_)) {
            // A negated condition on a header sent more than once holds when some copy fails
            // the matcher (or none is there): an allow-list ("deny unless one of ...") was
            // switched off by a second copy holding an allowed value, while the origin read
            // both joined. The query's two values are forms of one: there, neither matching.
            if self.negate && &*self.attr != attr::QUERY {
                for n in 0..MAX_VALUES {
                    let Some(v) = req.attr_nth(&self.attr, n) else {
                        return n == 0;
                    };
                    if !self.value_matches(v, &[], &mut [0; MAX_PREFILTERS], false) {
                        return true;
                    }
                }
                return false;
            }
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

/// Most values of one attribute a condition looks at: a caller whose requests may carry
/// more copies of a header refuses them (http-front: 431), so that none goes unchecked.
pub const MAX_VALUES: usize = 256;

#[derive(Debug)]
pub(crate) struct Rule {
    /// Its rate-limit state's key: from its name, so that a reload that moves it (a rule
    /// inserted before it) keeps every source's bucket.
    pub(crate) state_key: u32,
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
    /// Some rule allows (a source held for the tenant may still be let through by it).
    pub(crate) allow_rules: bool,
    /// Its holds' generation, part of their keys: a new one whenever a reload changes the
    /// tenant's rules ([`crate::rules::Prepared::tenant_version`]), so that the reload lifts
    /// its holds and no other tenant's, and a file put back as it was brings none back.
    pub(crate) hold_gen: u64,
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
