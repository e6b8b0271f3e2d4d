//! The shield rule engine as a pipeline module, at `after_parse` (after the cookie check): a
//! zone's tenant's rules — the same file and format as http-front's — decide on the query.
//!
//! | action | in DNS |
//! |---|---|
//! | `deny` | dropped (over TCP, DoT and DoQ: REFUSED), or answered with the rule's `rcode` (`rcode = "REFUSED"`) |
//! | `challenge` | over UDP without a valid server cookie: TC=1, or BADCOOKIE to a cookie client; over TCP or with a valid cookie the query passes |
//! | `rate_limit` | over the rule's (or the tenant's) rate, per source prefix: dropped, one in `slip` answered TC=1 as RRL slips (over TCP, DoT and DoQ: REFUSED) |
//! | `allow` | answered, exempt from RRL and the random-subdomain defence |
//! | held (`escalate`, `dns = "tenant"`) | the rules as for any source, and over UDP only an answer for a name that exists (or a referral) whole, anything else TC=1 (`dns_hold = "truncate"`, the default); `dns_hold = "refuse"`: as a deny |
//!
//! `escalate` holds a source proven over TCP or by a valid cookie for the tenant's zones (the
//! default, `dns = "tenant"`: its UDP answered whole only for names that exist, the rest
//! TC=1, with `dns_hold = "truncate"`), held once until the hold lapses; unproven UDP
//! escalates nothing.
//! With `dns = "block_map"` it goes into the block map through the engine, as in http-front,
//! on the query's evidence ([`Parsed::evidence`]): over TCP blocked (every packet), by a
//! valid cookie blocked for DNS over UDP, unproven UDP only a suspect in that tenant's zones
//! (its UDP for them answered TC=1). A tenant without
//! rules costs one lookup (and the `[global]` deny list one test); the attributes are
//! formatted only when a rule reads them, into buffers on the stack.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use shield::block::Evidence;
use shield::events::Action as EventAction;
use shield::rules::{Action, Escalated, LocalRules, Now, Request, attr};

use super::Shared;
use crate::observe::counters::DropCause;
use crate::query::module::{
    AnswerClass, Answered, CookieStatus, Env, Parsed, QueryModule, Step, Transport,
};

/// The rule engine's counters in dnsd, by what the query got.
#[derive(Debug, Default)]
pub struct Counters {
    /// Denied: dropped.
    pub dropped: AtomicU64,
    /// Denied: answered with the rule's rcode.
    pub refused: AtomicU64,
    /// Challenged: TC=1 or BADCOOKIE.
    pub challenged: AtomicU64,
    /// Over a rule's rate: dropped.
    pub rate_limited: AtomicU64,
    /// Over a rule's rate: slipped (TC=1).
    pub slipped: AtomicU64,
    /// Held for the tenant (`dns_hold = "truncate"`): UDP answered TC=1 (a name that does
    /// not exist, a wildcard's or a DNAME's answer, an error).
    pub held_truncated: AtomicU64,
    /// Held for the tenant: UDP answered whole (a name that exists, NODATA, a referral).
    pub held_answered: AtomicU64,
    /// Allowed (exempt from the rate defences).
    pub allowed: AtomicU64,
    /// Sources blocked by a rule's escalation (proven: TCP or a valid cookie).
    pub escalated: AtomicU64,
    /// Sources made suspects by a rule's escalation (unproven UDP).
    pub suspected: AtomicU64,
}

/// One worker's rule check.
pub struct Module {
    rules: LocalRules,
    shared: Arc<Shared>,
    /// Rate-limited queries seen, for slipping one in `slip`.
    limited: u64,
    /// Where the attributes a tenant's rules read are formatted (reused, never reallocated).
    scratch: Box<Scratch>,
}

/// Buffers for formatted attributes.
struct Scratch {
    qname: Text<1024>,
    qtype: Text<16>,
    qclass: Text<16>,
    opcode: Text<16>,
    udp_size: Text<8>,
    local: Text<48>,
}

impl Module {
    /// The module of one worker.
    pub fn new(shared: &Arc<Shared>) -> Option<Module> {
        let rules = shared.rules.as_ref()?.local();
        Some(Module {
            rules,
            shared: Arc::clone(shared),
            limited: 0,
            scratch: Box::new(Scratch {
                qname: Text::new(),
                qtype: Text::new(),
                qclass: Text::new(),
                opcode: Text::new(),
                udp_size: Text::new(),
                local: Text::new(),
            }),
        })
    }
}

fn bump(c: &AtomicU64) {
    c.fetch_add(1, Ordering::Relaxed);
}

impl QueryModule for Module {
    #[inline]
    fn after_parse(&mut self, env: &mut Env, p: &mut Parsed<'_>) -> Step {
        let prepared = self.rules.current();
        if !prepared.may_apply(p.tenant) {
            return Step::Continue;
        }
        // Only what the tenant's rules read is formatted.
        let mask = prepared.reads_mask(p.tenant);
        let reads = |bit| mask & bit != 0;
        let (rq, rt, rc, ro, ru, rl) = (
            reads(attr::BIT_QNAME),
            reads(attr::BIT_QTYPE),
            reads(attr::BIT_QCLASS),
            reads(attr::BIT_OPCODE),
            reads(attr::BIT_UDP_SIZE),
            reads(attr::BIT_LOCAL_ADDRESS),
        );
        let sc = &mut *self.scratch;
        let q = p.q;
        if rq {
            sc.qname.len = 0;
            presentation(q.qname(), &mut sc.qname);
        }
        let qtype = if rt {
            mnemonic_or(
                &mut sc.qtype,
                zones::rrtype::mnemonic(q.qtype),
                "TYPE",
                q.qtype.into(),
            )
        } else {
            ""
        };
        let qclass = if rc {
            mnemonic_or(
                &mut sc.qclass,
                class_name(q.qclass),
                "CLASS",
                q.qclass.into(),
            )
        } else {
            ""
        };
        let opcode = if ro {
            let o = q.opcode();
            mnemonic_or(&mut sc.opcode, opcode_name(o), "OPCODE", o.into())
        } else {
            ""
        };
        let udp_size = match q.edns {
            Some(e) if ru => {
                sc.udp_size.len = 0;
                sc.udp_size.push_num(e.udp_size.into());
                Some(sc.udp_size.as_str())
            }
            _ => None,
        };
        let local = match p.local {
            Some(ip) if rl => {
                use std::io::Write as _;
                let mut w = std::io::Cursor::new(&mut sc.local.buf[..]);
                let _ = write!(w, "{ip}");
                sc.local.len = w.position() as usize;
                Some(sc.local.as_str())
            }
            _ => None,
        };
        let req = DnsRequest {
            p,
            qname: if rq { sc.qname.as_str() } else { "" },
            qtype,
            qclass,
            opcode,
            udp_size,
            local,
        };
        let c = &self.shared.rule_counters;
        let now = Now {
            unix_ms: env.now_ms,
            mono_us: env.now_us,
        };
        let v = self.rules.check(p.tenant, p.src, &req, now);
        let evidence = p.evidence();
        let event = |a: EventAction| env.recorder.record(p.tenant, p.src, a, evidence, v.code);
        match v.escalated {
            Escalated::Blocked => {
                bump(&c.escalated);
                self.shared.escalations.fetch_add(1, Ordering::Relaxed);
                event(EventAction::Escalated);
            }
            Escalated::Suspect => {
                bump(&c.suspected);
                self.shared.suspected.fetch_add(1, Ordering::Relaxed);
                event(EventAction::Suspected);
            }
            Escalated::No | Escalated::Refused => {}
        }
        match v.action {
            Action::Pass => {
                p.held = v.dns_held && p.transport == Transport::Udp;
                Step::Continue
            }
            Action::Allow => {
                bump(&c.allowed);
                p.exempt = true;
                Step::Continue
            }
            Action::Deny => {
                event(EventAction::Denied);
                match v.dns_rcode {
                    Some(rc) => {
                        bump(&c.refused);
                        Step::Refuse(rc)
                    }
                    // Over TCP (DoT, DoQ) a dropped query would hold its client until it
                    // times out, its connection's later queries behind it: REFUSED.
                    None if p.transport == Transport::Tcp => {
                        bump(&c.refused);
                        Step::Refuse(crate::query::wire::rcode::REFUSED)
                    }
                    None => {
                        bump(&c.dropped);
                        Step::Drop(DropCause::Rules)
                    }
                }
            }
            Action::Challenge => {
                if p.transport == Transport::Tcp || p.cookie == CookieStatus::Valid {
                    p.held = v.dns_held && p.transport == Transport::Udp;
                    return Step::Continue;
                }
                bump(&c.challenged);
                event(EventAction::Challenged);
                Step::Slip
            }
            Action::RateLimit => {
                event(EventAction::RateLimited);
                self.limited += 1;
                if p.transport == Transport::Udp
                    && v.slip != 0
                    && self.limited.is_multiple_of(u64::from(v.slip))
                {
                    bump(&c.slipped);
                    Step::SlipRated
                } else if p.transport == Transport::Tcp {
                    // As a deny over TCP: answered, never left to time out.
                    bump(&c.refused);
                    Step::Refuse(crate::query::wire::rcode::REFUSED)
                } else {
                    bump(&c.rate_limited);
                    Step::Drop(DropCause::Rules)
                }
            }
        }
    }

    /// A held source's UDP answer: whole for a name that exists, NODATA too (a forwarder's
    /// other users are served without a TCP connection each, and a flood of these is
    /// bounded by the zone's names), TC=1 for what an attacker can vary without end —
    /// NXDOMAIN, a wildcard's or a DNAME's answer, an error — so that it comes back over TCP, where its
    /// connections are counted.
    #[inline]
    fn after_answer(&mut self, _env: &mut Env, p: &Parsed<'_>, a: &Answered<'_>) -> Step {
        if !p.held {
            return Step::Continue;
        }
        let exists = match a.class {
            AnswerClass::Answer => !a.synthesized,
            AnswerClass::Referral => true,
            AnswerClass::NxDomain | AnswerClass::Error => false,
        };
        let c = &self.shared.rule_counters;
        if exists {
            bump(&c.held_answered);
            Step::Continue
        } else {
            bump(&c.held_truncated);
            Step::Held
        }
    }
}

/// A short text formatted in place (ASCII only).
struct Text<const N: usize> {
    buf: [u8; N],
    len: usize,
}

impl<const N: usize> Text<N> {
    fn new() -> Self {
        Text {
            buf: [0; N],
            len: 0,
        }
    }

    #[inline]
    fn push(&mut self, b: u8) {
        if self.len < N {
            self.buf[self.len] = b;
            self.len += 1;
        }
    }

    #[inline]
    fn extend(&mut self, s: &[u8]) {
        let n = s.len().min(N - self.len);
        // Byte by byte: labels are short, and a call to memmove costs more than them.
        for (d, &b) in self.buf[self.len..self.len + n].iter_mut().zip(&s[..n]) {
            *d = b;
        }
        self.len += n;
    }

    fn push_num(&mut self, mut n: u64) {
        let mut d = [0u8; 20];
        let mut i = d.len();
        loop {
            i -= 1;
            d[i] = b'0' + (n % 10) as u8;
            n /= 10;
            if n == 0 {
                break;
            }
        }
        self.extend(&d[i..]);
    }

    #[inline]
    fn as_str(&self) -> &str {
        // Only ASCII is ever written; checked in debug builds.
        debug_assert!(self.buf[..self.len].is_ascii());
        // SAFETY: every byte written is ASCII (see `presentation`, `push_num`, the
        // mnemonics and IP addresses), so the bytes are valid UTF-8.
        unsafe { std::str::from_utf8_unchecked(&self.buf[..self.len]) }
    }
}

/// Bytes a name label keeps as they are in presentation form.
const fn plain_bytes() -> [bool; 256] {
    let mut t = [false; 256];
    let mut b = 0;
    while b < 256 {
        let c = b as u8;
        t[b] = c.is_ascii_alphanumeric() || c == b'-' || c == b'_' || c == b'*';
        b += 1;
    }
    t
}
static PLAIN: [bool; 256] = plain_bytes();

/// `name` (lower-case wire) in presentation form with the trailing dot; bytes other than
/// letters, digits, `-`, `_` and `*` are written `\DDD`.
#[inline]
fn presentation(wire: &[u8], out: &mut Text<1024>) {
    // Fast path: the name copied whole, each length byte turned into the dot before it.
    let n = wire.len();
    if n > 1 && n <= 256 {
        out.buf[..n - 1].copy_from_slice(&wire[1..]);
        let mut i = 0;
        let mut plain = true;
        while i < n - 1 {
            let l = wire[i] as usize;
            if l == 0 || i + l >= n {
                break;
            }
            plain &= wire[i + 1..=i + l].iter().all(|&b| PLAIN[b as usize]);
            out.buf[i + l] = b'.';
            i += l + 1;
        }
        if plain && i < n && wire[i] == 0 {
            out.len = i;
            return;
        }
    }
    presentation_escaped(wire, out)
}

/// [`presentation`] of a name with bytes to escape.
#[cold]
fn presentation_escaped(wire: &[u8], out: &mut Text<1024>) {
    out.len = 0;
    let mut i = 0;
    while i < wire.len() {
        let l = wire[i] as usize;
        if l == 0 {
            break;
        }
        for &b in &wire[i + 1..(i + 1 + l).min(wire.len())] {
            if PLAIN[b as usize] {
                out.push(b);
            } else {
                out.extend(&[b'\\', b'0' + b / 100, b'0' + (b / 10) % 10, b'0' + b % 10]);
            }
        }
        out.push(b'.');
        i += 1 + l;
    }
    if out.len == 0 {
        out.push(b'.');
    }
}

/// `known`, or `prefix` and the number written into `out`.
fn mnemonic_or<'a, const N: usize>(
    out: &'a mut Text<N>,
    known: Option<&'static str>,
    prefix: &str,
    n: u64,
) -> &'a str {
    match known {
        Some(m) => m,
        None => {
            out.len = 0;
            out.extend(prefix.as_bytes());
            out.push_num(n);
            out.as_str()
        }
    }
}

/// Why a rules condition's value for `attr` never matches a query (dnsd presents types,
/// classes and opcodes by mnemonic, else `TYPEnnn`, `CLASSnnn`, `OPCODEnnn`): installed with
/// [`shield::rules::set_value_check`], so that a typo (`NOTATYPE`) or another spelling
/// (`TYPE1` for `A`) is refused at its line, not a rule that silently never matches.
pub fn value_check(attr: &str, value: &str) -> Option<String> {
    let up = value.to_ascii_uppercase();
    let numbered = |prefix: &str, max: u64| {
        up.strip_prefix(prefix)
            .filter(|d| !d.is_empty() && d.len() <= 5 && d.bytes().all(|b| b.is_ascii_digit()))
            .and_then(|d| d.parse::<u64>().ok())
            .filter(|n| *n <= max)
    };
    let (what, shown): (&str, Option<String>) = match attr {
        shield::rules::attr::QTYPE => (
            "a DNS type (a mnemonic such as AAAA, or TYPEnnn)",
            zones::rrtype::from_text(up.as_bytes()).map(|t| {
                zones::rrtype::mnemonic(t).map_or_else(|| format!("TYPE{t}"), str::to_string)
            }),
        ),
        shield::rules::attr::QCLASS => (
            "a DNS class (IN, CH, HS, NONE, ANY, or CLASSnnn)",
            ["IN", "CH", "HS", "NONE", "ANY"]
                .contains(&up.as_str())
                .then(|| up.clone())
                .or_else(|| {
                    numbered("CLASS", 65_535).map(|n| {
                        class_name(n as u16).map_or_else(|| format!("CLASS{n}"), str::to_string)
                    })
                }),
        ),
        shield::rules::attr::OPCODE => (
            "a DNS opcode (QUERY, IQUERY, STATUS, NOTIFY, UPDATE, DSO, or OPCODEnn)",
            ["QUERY", "IQUERY", "STATUS", "NOTIFY", "UPDATE", "DSO"]
                .contains(&up.as_str())
                .then(|| up.clone())
                .or_else(|| {
                    numbered("OPCODE", 15).map(|n| {
                        opcode_name(n as u8).map_or_else(|| format!("OPCODE{n}"), str::to_string)
                    })
                }),
        ),
        _ => return None,
    };
    match shown {
        None => Some(format!(
            "{attr} {value:?} is not {what}: it would never match"
        )),
        Some(m) if m != up => Some(format!(
            "{attr} {value:?} is compared as {m:?}: write {m} (it would never match)"
        )),
        Some(_) => None,
    }
}

fn class_name(c: u16) -> Option<&'static str> {
    Some(match c {
        1 => "IN",
        3 => "CH",
        4 => "HS",
        254 => "NONE",
        255 => "ANY",
        _ => return None,
    })
}

fn opcode_name(o: u8) -> Option<&'static str> {
    Some(match o {
        0 => "QUERY",
        1 => "IQUERY",
        2 => "STATUS",
        4 => "NOTIFY",
        5 => "UPDATE",
        6 => "DSO",
        _ => return None,
    })
}

/// A DNS query as the rule engine sees it: the attributes of [`shield::rules::attr`],
/// formatted beforehand (those the tenant's rules read).
pub struct DnsRequest<'a, 'p> {
    p: &'a Parsed<'p>,
    qname: &'a str,
    qtype: &'a str,
    qclass: &'a str,
    opcode: &'a str,
    udp_size: Option<&'a str>,
    local: Option<&'a str>,
}

impl Request for DnsRequest<'_, '_> {
    #[inline]
    fn attr(&self, name: &str) -> Option<&str> {
        self.attr_by_bit(attr::bit(name), name)
    }

    #[inline]
    fn evidence(&self) -> Evidence {
        self.p.evidence()
    }

    /// Without RD the query comes from an iterating resolver, asking for its users.
    #[inline]
    fn relayed(&self) -> bool {
        self.p.q.flags & crate::query::wire::hf::RD == 0
    }

    /// A DNS challenge is TC=1 (or BADCOOKIE): a query over TCP or with a valid server
    /// cookie has met it, and the rules after the challenge apply to it.
    #[inline]
    fn cleared(&self, _difficulty: u8) -> bool {
        self.p.transport == Transport::Tcp || self.p.cookie == CookieStatus::Valid
    }

    #[inline]
    fn attr_by_bit(&self, bit: u32, _: &str) -> Option<&str> {
        let p = self.p;
        let q = p.q;
        match bit {
            attr::BIT_QNAME => Some(self.qname),
            attr::BIT_QTYPE => Some(self.qtype),
            attr::BIT_QCLASS => Some(self.qclass),
            attr::BIT_OPCODE => Some(self.opcode),
            attr::BIT_TRANSPORT => Some(match p.transport {
                Transport::Udp => "udp",
                Transport::Tcp => "tcp",
            }),
            attr::BIT_EDNS => q.edns.map(|_| "0"),
            attr::BIT_DO => q.dnssec_ok().then_some("1"),
            attr::BIT_COOKIE => Some(match p.cookie {
                CookieStatus::Valid => "valid",
                CookieStatus::Invalid => "invalid",
                CookieStatus::ClientOnly => "client_only",
                // Cookies off here: what the option shows, unchecked.
                CookieStatus::Absent => match q.edns.and_then(|e| e.cookie(p.req)) {
                    None => "none",
                    Some((_, [])) => "client_only",
                    Some(_) => "invalid",
                },
            }),
            attr::BIT_UDP_SIZE => self.udp_size,
            attr::BIT_LOCAL_ADDRESS => self.local,
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rule_values_a_query_never_shows_are_refused() {
        use shield::rules::attr;
        for (a, v) in [
            (attr::QTYPE, "aaaa"),
            (attr::QTYPE, "TYPE65534"),
            (attr::QCLASS, "ch"),
            (attr::QCLASS, "CLASS7"),
            (attr::OPCODE, "notify"),
            (attr::OPCODE, "OPCODE3"),
            (attr::PATH, "anything"),
        ] {
            assert_eq!(value_check(a, v), None, "{a} {v}");
        }
        for (a, v, why) in [
            (attr::QTYPE, "NOTATYPE", "not a DNS type"),
            (attr::QTYPE, "TYPE1", "write A"),
            (attr::QCLASS, "CLASS1", "write IN"),
            (attr::QCLASS, "INTERNET", "not a DNS class"),
            (attr::OPCODE, "OPCODE4", "write NOTIFY"),
            (attr::OPCODE, "OPCODE16", "not a DNS opcode"),
        ] {
            let e = value_check(a, v).unwrap_or_default();
            assert!(e.contains(why), "{a} {v}: {e}");
        }
    }

    #[test]
    fn names_are_written_in_presentation_form() {
        let mut t = Text::new();
        presentation(b"\x03www\x07example\x03com\x00", &mut t);
        assert_eq!(t.as_str(), "www.example.com.");
        let mut t = Text::new();
        presentation(b"\x00", &mut t);
        assert_eq!(t.as_str(), ".");
        let mut t = Text::new();
        presentation(b"\x03a.b\x01*\x00", &mut t);
        assert_eq!(t.as_str(), "a\\046b.*.");
        // Truncated wire (never from the parser) is written as far as it goes, no panic.
        for bad in [&b"\x03ab"[..], b"\x03abc", b"\x02ab\x05x"] {
            let mut t = Text::new();
            presentation(bad, &mut t);
        }
    }
}
