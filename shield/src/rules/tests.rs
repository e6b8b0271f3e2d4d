//! The rule engine end to end: files compiled, requests checked, escalations.

use super::compiled::{Anchors, index};
use super::*;
use crate::block::BlockConfig;
use crate::block::{BlockMap, Origin};
use ipnet::IpNet;
use regex::Regex;
use std::net::IpAddr;
use std::path::Path;
use std::sync::Arc;

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

/// A tenant's rules version changes with its own table and with what every tenant shares,
/// never with another tenant's table (a clearance names it: an edit of one tenant's rules,
/// even a comment, challenged every client of every site again).
#[test]
fn a_tenants_version_is_its_own_rules_and_what_all_share() {
    let text = "[global]\ndeny = [\"203.0.113.0/24\"]\n\n\
                [[tenant]]\nid = 1\n[[tenant.rule]]\nname = \"c\"\naction = \"challenge\"\n\
                when = [{ attr = \"path\", prefix = \"/\" }]\n\n\
                [[tenant]]\nid = 2\n# theirs\n[[tenant.rule]]\nname = \"d\"\naction = \"deny\"\n\
                when = [{ attr = \"path\", prefix = \"/admin\" }]\n";
    let p = prepared(text);
    let (v1, v2, v9) = (
        p.tenant_version(1),
        p.tenant_version(2),
        p.tenant_version(9),
    );
    assert!(v1 != v2 && v1 != v9 && v2 != v9);
    let other = prepared(
        &text
            .replace("# theirs", "# theirs, edited")
            .replace("\"/admin\"", "\"/adm\""),
    );
    assert_eq!(
        other.tenant_version(1),
        v1,
        "tenant 2's edit kept tenant 1's"
    );
    assert_ne!(other.tenant_version(2), v2);
    assert_eq!(other.tenant_version(9), v9);
    let own = prepared(&text.replace("prefix = \"/\"", "prefix = \"/x\""));
    assert_ne!(own.tenant_version(1), v1);
    assert_eq!(own.tenant_version(2), v2);
    let shared = prepared(&text.replace("203.0.113.0/24", "198.51.100.0/24"));
    for t in [1, 2, 9] {
        assert_ne!(shared.tenant_version(t), p.tenant_version(t), "tenant {t}");
    }
}

/// A request whose header `.0` (`header:NAME`) was sent with each of the values `.1`.
struct Twice<'a>(&'a str, &'a [&'a str]);

impl Request for Twice<'_> {
    fn attr(&self, name: &str) -> Option<&str> {
        self.attr_nth(name, 0)
    }
    fn attr_nth(&self, name: &str, n: usize) -> Option<&str> {
        (name == self.0).then(|| self.1.get(n).copied()).flatten()
    }
    fn multi_valued(&self) -> bool {
        self.1.len() > 1
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
    let v = |vals: &[&str]| {
        p.check(&s, 1, src, &Twice("header:x-tool", vals), NOW)
            .action
    };
    assert_eq!(v(&["curl"]), Action::Pass);
    assert_eq!(v(&["curl", "sqlmap"]), Action::Deny);
    assert_eq!(v(&["sqlmap", "curl"]), Action::Deny);
    // Negated: matches when some copy does not (an allow-list a second copy holding an
    // allowed value switched off, while the origin read both).
    assert_eq!(v(&["wget"]), Action::Challenge);
    assert_eq!(v(&["wget", "curl"]), Action::Challenge);
    assert_eq!(v(&["curl", "wget"]), Action::Challenge);
    assert_eq!(v(&["curl", "curl"]), Action::Pass);
}

/// HTTP attributes compare in the spelling the request is seen in: `host` lower-case,
/// `method` and `version` upper-case (rules written otherwise never matched, silently); a
/// version HTTP never has is refused; a number padded with zeros is the number.
#[test]
fn http_attributes_compare_in_one_spelling_and_numbers_take_leading_zeros() {
    let p = prepared(
        "[[tenant]]\nid = 1\n\
         [[tenant.rule]]\nname = \"host\"\naction = \"deny\"\n\
         when = [{ attr = \"host\", exact = \"Internal.A.Test\" }]\n\
         [[tenant.rule]]\nname = \"dot\"\naction = \"deny\"\n\
         when = [{ attr = \"host\", one_of = [\"deny.a.test.\", \"x.test\"] }]\n\
         [[tenant.rule]]\nname = \"www\"\naction = \"challenge\"\n\
         when = [{ attr = \"host\", prefix = \"www.\" }]\n\
         [[tenant.rule]]\nname = \"method\"\naction = \"deny\"\n\
         when = [{ attr = \"method\", one_of = [\"delete\", \"put\"] }]\n\
         [[tenant.rule]]\nname = \"version\"\naction = \"challenge\"\n\
         when = [{ attr = \"version\", exact = \"http/1.0\" }]\n\
         [[tenant.rule]]\nname = \"length\"\naction = \"deny\"\n\
         when = [{ attr = \"header:content-length\", ge = 100 }]\n",
    );
    let s = state();
    let src = ip("192.0.2.1");
    let v = |a: &[(&str, &str)]| p.check(&s, 1, src, &Attrs(a), NOW).action;
    assert_eq!(v(&[(attr::HOST, "internal.a.test")]), Action::Deny);
    // A whole host written with its trailing dot is the host (http-front strips it); a
    // prefix keeps its dot.
    assert_eq!(v(&[(attr::HOST, "deny.a.test")]), Action::Deny);
    assert_eq!(v(&[(attr::HOST, "www.b.test")]), Action::Challenge);
    assert_eq!(v(&[(attr::METHOD, "DELETE")]), Action::Deny);
    assert_eq!(v(&[(attr::METHOD, "GET")]), Action::Pass);
    assert_eq!(v(&[(attr::VERSION, "HTTP/1.0")]), Action::Challenge);
    for len in [
        "150",
        "00000000000000000150",
        "0000000000000000000000000150",
    ] {
        assert_eq!(v(&[("header:content-length", len)]), Action::Deny, "{len}");
    }
    for len in ["99", "000000000000000000000099", "0", "00000"] {
        assert_eq!(v(&[("header:content-length", len)]), Action::Pass, "{len}");
    }
    let e = Prepared::parse(
        Path::new("t.toml"),
        "[[tenant]]\nid = 1\n[[tenant.rule]]\nname = \"v\"\naction = \"deny\"\n\
         when = [{ attr = \"version\", exact = \"HTTP/2.0\" }]\n",
    )
    .unwrap_err()
    .to_string();
    assert!(e.contains("t.toml:6:") && e.contains("HTTP/2.0"), "{e}");
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
    let start = |p: &str| Anchors::of(p).map(|a| String::from_utf8_lossy(&a.start).into_owned());
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
    let e = bad("[[tenant]]\nid = 1\n[[tenant.rule]]\nname = \"r\"\naction = \"deny\"\nslip = 3\n");
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
    // More `contains` values in one name than the index remembers: the walk, same verdicts.
    {
        let mut text = String::from("[[tenant]]\nid = 1\n");
        for (i, c) in ('a'..='z').chain('0'..='9').enumerate() {
            text.push_str(&format!(
                "[[tenant.rule]]\nname = \"c{i}\"\naction = \"deny\"\nwhen = [{{ attr = \"qname\", contains = \"{c}\" }}, {{ attr = \"qtype\", one_of = [\"TXT\", \"MX\"], not = true }}]\n"
            ));
        }
        text.push_str("[[tenant.rule]]\nname = \"last\"\naction = \"challenge\"\nwhen = [{ attr = \"qname\", contains = \"zz\" }]\n");
        let p = prepared(&text);
        let s = state();
        let src = ip("192.0.2.1");
        let all = "abcdefghijklmnopqrstuvwxyz0123456789zz.example.";
        // Indexed by their `contains` (the negated qtype is not indexable): a name holding
        // 37 of them overflows the index, and the walk gives the same verdicts.
        assert_eq!(
            p.check(&s, 1, src, &dns(all, "A"), NOW).action,
            Action::Deny
        );
        assert_eq!(s.index_walks.sum(), 1, "the walk counted");
        assert_eq!(
            p.check(&s, 1, src, &dns(all, "TXT"), NOW).action,
            Action::Challenge
        );
        assert_eq!(
            p.check(&s, 1, src, &dns("zz.", "TXT"), NOW).action,
            Action::Challenge
        );
        assert_eq!(
            p.check(&s, 1, src, &dns("zz.", "A"), NOW).action,
            Action::Deny
        );
        assert_eq!(
            s.index_walks.sum(),
            2,
            "a name of two values takes the index"
        );
    }
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
            let cond = match r.below(11) {
                9 => format!(
                    "{{ attr = \"qname\", contains = \"{}\" }}",
                    words[r.below(10)]
                ),
                10 => format!(
                    "{{ attr = \"path\", contains = \"{}\" }}",
                    &words[r.below(10)][..1]
                ),
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

/// A request without attributes, proven as `evidence`.
struct Proven(Evidence);

impl Request for Proven {
    fn attr(&self, _: &str) -> Option<&str> {
        None
    }
    fn evidence(&self) -> Evidence {
        self.0
    }
}

#[test]
fn rate_limit_and_escalation_into_block_map() {
    use crate::block::{Check, Scope, Traffic};
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
    // A suspect for tenant 5's zones alone: forged packets against one tenant's rules never
    // touch the others' answers.
    assert_eq!((hit.tenants.ids(), hit.tenants.is_only()), (&[5][..], true));
    assert!(!r.is_blocked(ip("192.0.2.1"), NOW.unix_ms, Traffic::DnsUdp));
    // Unproven verdicts never count towards a proven escalation, nor spend the proven
    // requests' bucket: two proven ones pass, two limited ones do not reach the threshold of
    // three, the third does and blocks every stream.
    let tcp = Proven(Evidence::Tcp);
    let v: Vec<Verdict> = (0..5).map(|_| p.check(&s, 5, src, &tcp, NOW)).collect();
    let actions: Vec<Action> = v.iter().map(|v| v.action).collect();
    assert_eq!(
        actions[..3],
        [Action::Pass, Action::Pass, Action::RateLimit]
    );
    assert_eq!(v[3].escalated, Escalated::No);
    assert_eq!(v[4].escalated, Escalated::Blocked);
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

/// A relayed request (a DNS query without RD: an iterating resolver's) never counts toward
/// an escalation, proven or not — unless the tenant says its clients ask directly
/// (`relayed = "count"`).
#[test]
fn relayed_requests_escalate_only_where_the_tenant_counts_them() {
    let blocks = BlockMap::new(BlockConfig::default());
    let cfg = StateConfig::default();
    let s = RuleState::new(&cfg, Some(blocks.clone())).scoped_to_tenants(&cfg);
    let p = prepared(
        r#"
[[tenant]]
id = 1
escalate = { after = 3, window_secs = 10, block_secs = 60, on = ["deny"] }
[[tenant.rule]]
name = "no"
action = "deny"
when = [{ attr = "qtype", exact = "ANY" }]
[[tenant]]
id = 2
escalate = { after = 3, window_secs = 10, block_secs = 60, on = ["deny"], relayed = "count" }
[[tenant.rule]]
name = "no"
action = "deny"
when = [{ attr = "qtype", exact = "ANY" }]
"#,
    );
    struct Relayed;
    impl Request for Relayed {
        fn attr(&self, n: &str) -> Option<&str> {
            (n == attr::QTYPE).then_some("ANY")
        }
        fn evidence(&self) -> Evidence {
            Evidence::Tcp
        }
        fn relayed(&self) -> bool {
            true
        }
    }
    let resolver = ip("198.51.100.7");
    for _ in 0..10 {
        let v = p.check(&s, 1, resolver, &Relayed, NOW);
        assert_eq!((v.action, v.escalated), (Action::Deny, Escalated::No));
    }
    let v: Vec<Escalated> = (0..3)
        .map(|_| p.check(&s, 2, resolver, &Relayed, NOW).escalated)
        .collect();
    assert_eq!(v, [Escalated::No, Escalated::No, Escalated::Blocked]);
    let e = Prepared::parse(
        Path::new("t.toml"),
        "[[tenant]]\nid = 1\nescalate = { after = 3, window_secs = 10, block_secs = 60, relayed = \"always\" }\n",
    )
    .unwrap_err()
    .to_string();
    assert!(e.contains("relayed = \"always\""), "{e}");
}

/// Where escalations hold for the escalating tenant alone (dnsd): a proven source over one
/// tenant's threshold gets nothing more from that tenant and everything from the others;
/// unproven (forged) requests escalate nothing; the block policy holds; a tenant that asks
/// for the block map (`dns = "block_map"`) gets it.
#[test]
fn escalations_held_for_the_tenant_alone() {
    let blocks = BlockMap::new(BlockConfig::default());
    let cfg = StateConfig::default();
    let s = RuleState::new(&cfg, Some(blocks.clone())).scoped_to_tenants(&cfg);
    let p = prepared(
        r#"
[[tenant]]
id = 1
escalate = { after = 3, window_secs = 10, block_secs = 60, on = ["deny"] }
[[tenant.rule]]
name = "no"
action = "deny"
when = [{ attr = "qtype", exact = "ANY" }]
[[tenant]]
id = 2
[[tenant]]
id = 3
escalate = { after = 3, window_secs = 10, block_secs = 60, on = ["deny"], dns = "block_map" }
[[tenant.rule]]
name = "no"
action = "deny"
when = [{ attr = "qtype", exact = "ANY" }]
[[tenant]]
id = 4
escalate = { after = 3, window_secs = 10, block_secs = 60, on = ["deny"], dns_hold = "refuse" }
[[tenant.rule]]
name = "no"
action = "deny"
when = [{ attr = "qtype", exact = "ANY" }]
"#,
    );
    struct Q(&'static str, Evidence);
    impl Request for Q {
        fn attr(&self, n: &str) -> Option<&str> {
            (n == attr::QTYPE).then_some(self.0)
        }
        fn evidence(&self) -> Evidence {
            self.1
        }
    }
    let any = |e| Q("ANY", e);
    let a = |e| Q("A", e);
    // Forged: denied one by one, never escalated.
    let victim = ip("192.0.2.10");
    for _ in 0..10 {
        let v = p.check(&s, 1, victim, &any(Evidence::Udp), NOW);
        assert_eq!((v.action, v.escalated), (Action::Deny, Escalated::No));
    }
    assert_eq!(
        p.check(&s, 1, victim, &a(Evidence::Udp), NOW).action,
        Action::Pass
    );
    // Proven: the third escalates, for tenant 1 alone, whatever it asks.
    let bad = ip("198.51.100.7");
    let v: Vec<Escalated> = (0..3)
        .map(|_| p.check(&s, 1, bad, &any(Evidence::Tcp), NOW).escalated)
        .collect();
    assert_eq!(v, [Escalated::No, Escalated::No, Escalated::Blocked]);
    // Held over UDP (`dns_hold = "truncate"`, the default): through the rules as any
    // source's, marked held (dnsd sends back whole only answers for names that exist);
    // what they deny stays denied. Over TCP the rules decide as for any source, unmarked.
    for e in [Evidence::Udp, Evidence::Cookie] {
        let v = p.check(&s, 1, bad, &a(e), NOW);
        assert_eq!((v.action, v.dns_held), (Action::Pass, true), "{e:?}");
        let v = p.check(&s, 1, bad, &any(e), NOW);
        assert_eq!((v.action, v.reason.as_str()), (Action::Deny, "no"), "{e:?}");
        assert_eq!(v.escalated, Escalated::No, "{e:?}");
    }
    let v = p.check(&s, 1, bad, &a(Evidence::Tcp), NOW);
    assert_eq!((v.action, v.dns_held), (Action::Pass, false));
    // A held source's verdict for `A` from `tenant` over each of `over`: refused.
    let held = |tenant, over: &[Evidence]| {
        for &e in over {
            let v = p.check(&s, tenant, bad, &a(e), NOW);
            assert_eq!(
                (v.action, v.code, v.dns_held),
                (Action::Deny, codes::ESCALATED, false),
                "tenant {tenant} {e:?}"
            );
        }
    };
    let v = p.check(&s, 1, bad, &any(Evidence::Tcp), NOW);
    assert_eq!((v.action, v.reason.as_str()), (Action::Deny, "no"));
    // ... and while held, its denies over TCP do not hold it again: 30 of them, 10
    // thresholds, one hold listed.
    for _ in 0..30 {
        let v = p.check(&s, 1, bad, &any(Evidence::Tcp), NOW);
        assert_eq!(v.escalated, Escalated::No);
    }
    assert_eq!(s.holds.lock().unwrap().len(), 1);
    // `dns_hold = "refuse"`: nothing over any transport, never TC=1.
    for _ in 0..3 {
        p.check(&s, 4, bad, &any(Evidence::Tcp), NOW);
    }
    held(4, &[Evidence::Udp, Evidence::Tcp, Evidence::Cookie]);
    assert_eq!(
        p.check(&s, 2, bad, &a(Evidence::Udp), NOW).action,
        Action::Pass
    );
    assert_eq!(blocks.len(), 0, "nothing in the block map");
    let later = Now {
        unix_ms: NOW.unix_ms + 61_000,
        ..NOW
    };
    assert_eq!(
        p.check(&s, 1, bad, &a(Evidence::Udp), later).action,
        Action::Pass
    );
    // The block policy: a never-block address is not escalated.
    let mut nb = crate::never_block::NeverBlock::new();
    let listed = ip("203.0.113.5");
    nb.push(IpNet::from(listed), "test");
    blocks.install_policy(&BlockConfig::default(), nb);
    for _ in 0..3 {
        p.check(&s, 1, listed, &any(Evidence::Tcp), NOW);
    }
    assert_eq!(
        p.check(&s, 1, listed, &a(Evidence::Tcp), NOW).action,
        Action::Pass
    );
    // Tenant 3 asked for the block map.
    for _ in 0..3 {
        p.check(&s, 3, bad, &any(Evidence::Cookie), NOW);
    }
    assert_eq!(blocks.len(), 1);
    let rs = RuleSet::new(prepared("[[tenant]]\nid = 1\n"), s);
    let st = rs.stats();
    assert_eq!(
        (st.escalations, st.suspects, st.unproven_ignored),
        (3, 0, 11)
    );
    let e = Prepared::parse(
        Path::new("t.toml"),
        "[[tenant]]\nid = 1\nescalate = { after = 3, window_secs = 10, block_secs = 60, dns = \"all\" }\n",
    )
    .unwrap_err()
    .to_string();
    assert!(e.contains("block_map"), "{e}");
    for (hold, says) in [
        (
            "dns_hold = \"drop\"",
            "\"truncate\" (the default) or \"refuse\"",
        ),
        (
            "dns = \"block_map\", dns_hold = \"refuse\"",
            "it takes dns = \"tenant\"",
        ),
        (
            "http_hold = \"block\"",
            "\"challenge\" (the default) or \"deny\"",
        ),
    ] {
        let e = Prepared::parse(
            Path::new("t.toml"),
            &format!(
                "[[tenant]]\nid = 1\nescalate = {{ after = 3, window_secs = 10, block_secs = 60, {hold} }}\n"
            ),
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains(says) && e.contains("t.toml:3"), "{e}");
    }
}

/// A DNS query of type `.0` over UDP with a valid cookie (proven, and marked held over UDP),
/// for the hold tests.
struct Q(&'static str);

impl Request for Q {
    fn attr(&self, n: &str) -> Option<&str> {
        (n == attr::QTYPE).then_some(self.0)
    }
    fn evidence(&self) -> Evidence {
        Evidence::Cookie
    }
}

/// An escalation held for a tenant lets through what the tenant's allow list allows, and a
/// reload of changed rules lifts it (the operator's way to lift one: nothing lists it).
#[test]
fn a_tenant_escalation_yields_to_allow_lists_and_a_changed_rules_file() {
    let cfg = StateConfig::default();
    let s = RuleState::new(&cfg, None).scoped_to_tenants(&cfg);
    let text = |allow: &str| {
        format!(
            "[[tenant]]\nid = 1\nallow = [{allow}]\n\
             escalate = {{ after = 1, window_secs = 10, block_secs = 60, on = [\"deny\"] }}\n\
             [[tenant.rule]]\nname = \"no\"\naction = \"deny\"\n\
             when = [{{ attr = \"qtype\", exact = \"ANY\" }}]\n"
        )
    };
    let rs = RuleSet::new(prepared(&text("")), s);
    let src = ip("198.51.100.8");
    assert_eq!(
        rs.check(1, src, &Q("ANY"), NOW).escalated,
        Escalated::Blocked
    );
    assert!(rs.check(1, src, &Q("A"), NOW).dns_held);
    // The same file again: still held.
    rs.store(prepared(&text("")));
    assert!(rs.check(1, src, &Q("A"), NOW).dns_held);
    // The source allowed: let through, and the changed file lifted the escalation too.
    rs.store(prepared(&text("\"198.51.100.8/32\"")));
    assert_eq!(rs.check(1, src, &Q("ANY"), NOW).action, Action::Allow);
    rs.store(prepared(&text("")));
    let v = rs.check(1, src, &Q("A"), NOW);
    assert_eq!((v.action, v.dns_held), (Action::Pass, false));
}

/// A new rules file lifts the holds of the tenants whose rules it changed, and only those:
/// an edit of one tenant's rules let every source held by every other tenant go.
#[test]
fn a_reload_lifts_the_holds_of_the_tenants_it_changed() {
    let cfg = StateConfig::default();
    let s = RuleState::new(&cfg, None).scoped_to_tenants(&cfg);
    let text = |global: &str, two: &str| {
        let mut t = String::from(global);
        for id in [1, 2, 3] {
            t.push_str(&format!(
                "[[tenant]]\nid = {id}\n\
                 escalate = {{ after = 1, window_secs = 10, block_secs = 60, on = [\"deny\"] }}\n\
                 [[tenant.rule]]\nname = \"no{}\"\naction = \"deny\"\n\
                 when = [{{ attr = \"qtype\", exact = \"ANY\" }}]\n",
                if id == 2 { two } else { "" }
            ));
        }
        t
    };
    let rs = RuleSet::new(prepared(&text("", "")), s);
    let src = ip("198.51.100.9");
    let held = |t| rs.check(t, src, &Q("A"), NOW).dns_held;
    for t in [1, 2, 3] {
        assert_eq!(
            rs.check(t, src, &Q("ANY"), NOW).escalated,
            Escalated::Blocked
        );
        assert!(held(t));
    }
    // Tenant 2's rule renamed: its hold goes, the others' stay (and are still listed).
    rs.store(prepared(&text("", "x")));
    assert!(held(1) && !held(2) && held(3));
    assert_eq!(rs.tenant_holds((NOW.unix_ms / 1000) as u32).len(), 2);
    // What every tenant shares changed: every hold goes.
    rs.store(prepared(&text(
        "[global]\nallow = [\"192.0.2.0/24\"]\n",
        "x",
    )));
    assert!(!held(1) && !held(3));
    assert!(rs.tenant_holds(0).is_empty());
}

/// A list file the rules read is part of every version: a held source added to a
/// never-block list file is lifted by the reload (the text alone was hashed: it stayed held),
/// and the file put back as it was brings no lifted hold back.
#[test]
fn a_list_file_edit_lifts_holds_and_a_revert_brings_none_back() {
    let dir = tempfile::tempdir().unwrap();
    let rules = dir.path().join("rules.toml");
    let list = dir.path().join("nb.txt");
    std::fs::write(
        &rules,
        "[[list]]\nname = \"nb\"\nfile = \"nb.txt\"\n[global]\nnever_block = [\"@nb\"]\n\
         [[tenant]]\nid = 1\n\
         escalate = { after = 1, window_secs = 10, block_secs = 60, on = [\"deny\"] }\n\
         [[tenant.rule]]\nname = \"no\"\naction = \"deny\"\n\
         when = [{ attr = \"qtype\", exact = \"ANY\" }]\n",
    )
    .unwrap();
    std::fs::write(&list, "203.0.113.0/24\n").unwrap();
    let cfg = StateConfig::default();
    let rs = RuleSet::new(
        Prepared::load(&rules).unwrap(),
        RuleState::new(&cfg, None).scoped_to_tenants(&cfg),
    );
    let src = ip("198.51.100.9");
    let held = || rs.check(1, src, &Q("A"), NOW).dns_held;
    let epoch = rs.hold_epoch();
    assert_eq!(
        rs.check(1, src, &Q("ANY"), NOW).escalated,
        Escalated::Blocked
    );
    assert!(held() && rs.held(1, src, (NOW.unix_ms / 1000) as u32));
    assert_ne!(rs.hold_epoch(), epoch, "a new hold moves the epoch");
    // The same files again: still held.
    rs.reload(&rules).unwrap();
    assert!(held());
    std::fs::write(&list, "203.0.113.0/24\n198.51.100.9/32\n").unwrap();
    rs.reload(&rules).unwrap();
    assert!(!held() && !rs.held(1, src, (NOW.unix_ms / 1000) as u32));
    // Put back as it was: the lifted hold stays lifted.
    std::fs::write(&list, "203.0.113.0/24\n").unwrap();
    rs.reload(&rules).unwrap();
    assert!(!held());
}

/// Packets forged in a source's name (unproven) empty only the unproven bucket: the source's
/// real queries (over TCP, or with a valid cookie) keep their own allowance and are never
/// limited, nor escalated, for what the forged ones did — per source and per /24 alike.
#[test]
fn forged_requests_never_spend_a_real_clients_rate_limit() {
    let blocks = BlockMap::new(BlockConfig::default());
    let s = RuleState::new(&StateConfig::default(), Some(blocks.clone()));
    let p = prepared(
        r#"
[[tenant]]
id = 5
rate_limit = { per_second = 1.0, burst = 3, v4_prefix = 24 }
escalate = { after = 2, window_secs = 10, block_secs = 60 }
"#,
    );
    let victim = ip("192.0.2.53");
    // Forged from the victim and from its /24 neighbours: the unproven bucket runs dry.
    for i in 0..50u8 {
        let from = if i % 2 == 0 {
            victim
        } else {
            ip(&format!("192.0.2.{}", 100 + i))
        };
        p.check(&s, 5, from, &(), NOW);
    }
    assert_eq!(p.check(&s, 5, victim, &(), NOW).action, Action::RateLimit);
    // The victim's proven queries: its own burst, untouched.
    for evidence in [Evidence::Cookie, Evidence::Tcp, Evidence::Cookie] {
        let v = p.check(&s, 5, victim, &Proven(evidence), NOW);
        assert_eq!((v.action, v.escalated), (Action::Pass, Escalated::No));
    }
    let r = blocks.reader();
    assert!(!r.is_blocked(victim, NOW.unix_ms, crate::block::Traffic::DnsUdp));
    assert!(!r.is_blocked(victim, NOW.unix_ms, crate::block::Traffic::Stream));
}

/// An IPv6 host cannot spread its requests over the addresses of its network: by default
/// a rate limit counts its /64 and an escalation blocks it.
#[test]
fn an_ipv6_source_is_its_network_not_its_address() {
    let blocks = BlockMap::new(BlockConfig::default());
    let s = RuleState::new(&StateConfig::default(), Some(blocks.clone()));
    let p = prepared(
        r#"
[[tenant]]
id = 5
rate_limit = { per_second = 1.0, burst = 3 }
escalate = { after = 2, window_secs = 10, block_secs = 60 }
"#,
    );
    // Each request from another address of one /64; then one from the next /64.
    let limited = (0..6u16)
        .map(|i| {
            let a = ip(&format!("2001:db8:0:1::{:x}", i + 1));
            p.check(&s, 5, a, &Proven(Evidence::Tcp), NOW).action
        })
        .filter(|a| *a == Action::RateLimit)
        .count();
    assert_eq!(limited, 3, "the /64 shares one burst of 3");
    let next = p.check(&s, 5, ip("2001:db8:0:2::1"), &Proven(Evidence::Tcp), NOW);
    assert_eq!(next.action, Action::Pass, "another /64 has its own");
    let r = blocks.reader();
    let t = crate::block::Traffic::Stream;
    assert!(
        r.is_blocked(ip("2001:db8:0:1::ffff"), NOW.unix_ms, t),
        "its /64 is blocked"
    );
    assert!(
        !r.is_blocked(ip("2001:db8:0:2::ffff"), NOW.unix_ms, t),
        "another /64 is not"
    );
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

/// `rate = { key = "qname", per_source = true }`: one account per name and source prefix,
/// as Knot's RRL keeps them — a resolver relaying a flood of one name keeps its users' other
/// names, and another resolver keeps that name (per source, its TXT answers of other names
/// were lost 13 % of the time behind a flood of one).
#[test]
fn rate_limit_per_value_and_source() {
    let p = prepared(
        r#"
[[tenant]]
id = 1
[[tenant.rule]]
name = "slow-txt"
action = "rate_limit"
when = [{ attr = "qtype", one_of = ["TXT"] }]
rate = { per_second = 0.01, burst = 2, key = "qname", per_source = true }
"#,
    );
    let s = state();
    let (resolver, other) = (ip("192.0.2.1"), ip("198.51.100.7"));
    let v = |src: IpAddr, name: &str| p.check(&s, 1, src, &dns(name, "TXT"), NOW).action;
    assert_eq!(v(resolver, "flood.example.com."), Action::Pass);
    assert_eq!(v(resolver, "flood.example.com."), Action::Pass);
    assert_eq!(v(resolver, "flood.example.com."), Action::RateLimit);
    assert_eq!(
        v(resolver, "_dmarc.example.com."),
        Action::Pass,
        "its users' other names"
    );
    assert_eq!(
        v(other, "flood.example.com."),
        Action::Pass,
        "another source"
    );
    let e = Prepared::parse(
        Path::new("t.toml"),
        "[[tenant]]\nid = 1\n[[tenant.rule]]\nname = \"r\"\naction = \"rate_limit\"\n\
         rate = { per_second = 1.0, burst = 1, per_source = true }\n",
    )
    .unwrap_err()
    .to_string();
    assert!(e.contains("per_source goes with key"), "{e}");
}

/// `rate = { key = "ja4" }`: a botnet rotating addresses behind one TLS stack shares one
/// bucket; another stack has its own; a request without the attribute is counted by source.
#[test]
fn rate_limit_keyed_by_an_attribute() {
    let p = prepared(
        r#"
[[tenant]]
id = 1
[[tenant.rule]]
name = "per-stack"
action = "rate_limit"
when = [{ attr = "path", prefix = "/" }]
rate = { per_second = 1.0, burst = 2, key = "ja4" }
"#,
    );
    let s = state();
    let bot = Attrs(&[
        ("path", "/"),
        ("ja4", "t13d1516h2_8daaf6152771_02713d6af862"),
    ]);
    let other = Attrs(&[
        ("path", "/"),
        ("ja4", "t13d1715h2_5b57614c22b0_3d5424432f57"),
    ]);
    let plain = Attrs(&[("path", "/")]);
    assert_eq!(
        p.check(&s, 1, ip("192.0.2.1"), &bot, NOW).action,
        Action::Pass
    );
    assert_eq!(
        p.check(&s, 1, ip("198.51.100.7"), &bot, NOW).action,
        Action::Pass
    );
    assert_eq!(
        p.check(&s, 1, ip("203.0.113.9"), &bot, NOW).action,
        Action::RateLimit,
        "three addresses, one stack: one bucket"
    );
    assert_eq!(
        p.check(&s, 1, ip("192.0.2.1"), &other, NOW).action,
        Action::Pass
    );
    for _ in 0..2 {
        assert_eq!(
            p.check(&s, 1, ip("192.0.2.50"), &plain, NOW).action,
            Action::Pass
        );
    }
    assert_eq!(
        p.check(&s, 1, ip("192.0.2.51"), &plain, NOW).action,
        Action::Pass
    );
    assert_eq!(
        p.check(&s, 1, ip("192.0.2.50"), &plain, NOW).action,
        Action::RateLimit
    );
    let e = Prepared::parse(
        Path::new("r.toml"),
        "[[tenant]]\nid = 1\n[[tenant.rule]]\nname = \"r\"\naction = \"rate_limit\"\n\
         rate = { per_second = 1.0, burst = 1, key = \"\" }\n",
    )
    .unwrap_err()
    .to_string();
    assert!(e.contains("key: an attribute name"), "{e}");
}

/// Whom could a forged JA4 hit? Anyone sharing it: their 429s come from the shared bucket
/// and never escalate them, while a source-keyed limit still escalates its own source.
#[test]
fn a_shared_rate_bucket_never_escalates_the_sources_it_limits() {
    let p = prepared(
        r#"
[[tenant]]
id = 1
escalate = { after = 2, window_secs = 60, block_secs = 600, on = ["rate_limit"] }
[[tenant.rule]]
name = "per-stack"
action = "rate_limit"
when = [{ attr = "path", prefix = "/" }]
rate = { per_second = 1.0, burst = 1, key = "ja4" }
"#,
    );
    use crate::block::{Check, Traffic};
    let blocks = BlockMap::new(BlockConfig::default());
    let s = RuleState::new(&StateConfig::default(), Some(blocks.clone()));
    let chrome = Attrs(&[
        ("path", "/"),
        ("ja4", "t13d1516h2_8daaf6152771_02713d6af862"),
    ]);
    // The attacker spends the bucket; a real user of the same stack is limited …
    assert_eq!(
        p.check(&s, 1, ip("203.0.113.9"), &chrome, NOW).action,
        Action::Pass
    );
    for _ in 0..5 {
        let v = p.check(&s, 1, ip("192.0.2.1"), &chrome, NOW);
        assert_eq!(v.action, Action::RateLimit);
        assert!(v.shared);
        // … but never escalated.
        assert_eq!(v.escalated, Escalated::No);
    }
    // Without the attribute the limit is the source's own, and escalates as before.
    let plain = Attrs(&[("path", "/")]);
    let mut last = Escalated::No;
    for _ in 0..5 {
        let v = p.check(&s, 1, ip("198.51.100.7"), &plain, NOW);
        assert!(!v.shared || v.action == Action::Pass);
        if v.escalated != Escalated::No {
            last = v.escalated;
        }
    }
    assert_ne!(last, Escalated::No, "a source-keyed limit escalates");
    let r = blocks.reader();
    assert!(
        !matches!(
            r.check(ip("192.0.2.1"), NOW.unix_ms, Traffic::Stream),
            Check::Blocked(_) | Check::Suspect(_)
        ),
        "the real user sharing the stack is neither blocked nor a suspect"
    );
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

/// A request with one attribute, holding a clearance of some difficulty or none.
struct Cleared<'a>(&'a str, Option<u8>);

impl Request for Cleared<'_> {
    fn attr(&self, name: &str) -> Option<&str> {
        (name == "path").then_some(self.0)
    }
    fn cleared(&self, difficulty: u8) -> bool {
        self.1.is_some_and(|d| d >= difficulty)
    }
}

#[test]
fn a_clearance_passes_challenge_rules_only_and_difficulty_is_read() {
    let text = "[[tenant]]\nid = 1\n\
         [[tenant.rule]]\nname = \"c\"\naction = \"challenge\"\ndifficulty = 12\n\
         when = [{ attr = \"path\", prefix = \"/\" }]\n\
         [[tenant.rule]]\nname = \"d\"\naction = \"deny\"\n\
         when = [{ attr = \"path\", prefix = \"/admin\" }]\n";
    let p = prepared(text);
    let s = state();
    let src = ip("192.0.2.1");
    let v = |path: &str, cleared: Option<u8>| p.check(&s, 1, src, &Cleared(path, cleared), NOW);
    let c = v("/x", None);
    assert_eq!((c.action, c.difficulty), (Action::Challenge, 12));
    assert_eq!(v("/x", Some(12)).action, Action::Pass);
    // The rule's difficulty is asked of the clearance: an easier one's does not pass.
    assert_eq!(v("/x", Some(11)).action, Action::Challenge);
    // The deny after the challenge still applies to a cleared client.
    assert_eq!(v("/admin", Some(20)).action, Action::Deny);
    assert!(p.has_challenges());
    // The version is the file's: alike for the same text, other for another.
    assert_eq!(p.version(), prepared(text).version());
    assert_ne!(p.version(), prepared(&text.replace("12", "13")).version());
    for (bad, msg) in [
        (
            text.replace("action = \"deny\"\n", "action = \"deny\"\ndifficulty = 3\n"),
            "only goes with action challenge",
        ),
        (
            text.replace("difficulty = 12", "difficulty = 29"),
            "out of range",
        ),
        (
            text.replace("difficulty = 12", "difficulty = 0"),
            "out of range",
        ),
    ] {
        let e = Prepared::parse(Path::new("test.toml"), &bad)
            .unwrap_err()
            .to_string();
        assert!(e.contains(msg), "{e}");
    }
}

/// A block lifted while the source goes on is made again after `after` more verdicts of
/// the window (it fired at exactly `after` only, so the source stayed free until the window
/// rolled over), never at every verdict.
#[test]
fn escalation_blocks_again_after_a_lift_at_each_multiple_of_after() {
    let blocks = BlockMap::new(BlockConfig::default());
    let s = RuleState::new(&StateConfig::default(), Some(blocks.clone()));
    let p = prepared(
        r#"
[[tenant]]
id = 5
rate_limit = { per_second = 0.001, burst = 1 }
escalate = { after = 4, window_secs = 60, block_secs = 60 }
"#,
    );
    let tcp = Proven(Evidence::Tcp);
    let src = ip("192.0.2.88");
    let base = (NOW.unix_ms / 60_000) * 60_000;
    let at = |ms: u64| Now {
        unix_ms: base + ms,
        mono_us: NOW.mono_us + ms * 1000,
    };
    assert_eq!(p.check(&s, 5, src, &tcp, at(0)).action, Action::Pass);
    // Four verdicts from the `from`-th on: the fourth blocks.
    let four = |from: u64| -> Vec<Escalated> {
        (from..from + 4)
            .map(|i| p.check(&s, 5, src, &tcp, at(i * 100)).escalated)
            .collect()
    };
    let blocked_at_the_fourth = [
        Escalated::No,
        Escalated::No,
        Escalated::No,
        Escalated::Blocked,
    ];
    assert_eq!(four(1), blocked_at_the_fourth);
    let net: IpNet = "192.0.2.88/32".parse().unwrap();
    assert!(blocks.remove(net, crate::block::RemoveCause::Operator));
    assert_eq!(four(5), blocked_at_the_fourth);
}

/// A rate-limited source stays limited across a reload that inserts a rule before the
/// limiting one: the buckets are keyed by the rule's name, not its place (a routine edit
/// gave every limited source a fresh burst).
#[test]
fn a_reload_that_moves_a_rate_rule_keeps_its_buckets() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("rules.toml");
    let limit = "[[tenant.rule]]\nname = \"slow\"\naction = \"rate_limit\"\n\
                 rate = { per_second = 0.001, burst = 2 }\n";
    std::fs::write(&path, format!("[[tenant]]\nid = 1\n{limit}")).unwrap();
    let rs = RuleSet::new(Prepared::empty(), state());
    rs.reload(&path).unwrap();
    let src = ip("192.0.2.44");
    let tcp = Proven(Evidence::Tcp);
    let actions: Vec<Action> = (0..3).map(|_| rs.check(1, src, &tcp, NOW).action).collect();
    assert_eq!(actions, [Action::Pass, Action::Pass, Action::RateLimit]);
    let before = "[[tenant.rule]]\nname = \"admin\"\naction = \"deny\"\n\
                  when = [{ attr = \"path\", prefix = \"/admin\" }]\n";
    std::fs::write(&path, format!("[[tenant]]\nid = 1\n{before}{limit}")).unwrap();
    rs.reload(&path).unwrap();
    assert_eq!(rs.check(1, src, &tcp, NOW).action, Action::RateLimit);
}

/// A header sent twice (or a query and its decoded form): the index gathers the candidates of
/// each value, and its verdicts are a walk's — every rule was walked for such a request (one
/// more header doubled the cost of a big rule set).
#[test]
fn an_attribute_with_several_values_is_indexed_by_each() {
    let multi = |vals| Twice("header:x-a", vals);
    let mut text = String::from("[[tenant]]\nid = 1\n");
    for i in 0..50 {
        text.push_str(&format!(
            "[[tenant.rule]]\nname = \"e{i}\"\naction = \"deny\"\nwhen = [{{ attr = \"header:x-a\", exact = \"v{i}\" }}]\n\
             [[tenant.rule]]\nname = \"c{i}\"\naction = \"challenge\"\nwhen = [{{ attr = \"header:x-a\", contains = \"bad{i}x\" }}]\n"
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
    let src = ip("192.0.2.1");
    let cases: [&'static [&'static str]; 5] = [
        &["nothing", "v7"],
        &["v3", "v9"],
        &["x", "y", "zz bad12x"],
        &["nothing", "else"],
        &[
            "a", "b", "c", "d", "e", "f", "g", "h", "i", "j", "k", "l", "m", "n", "o", "p", "v40",
        ],
    ];
    for vals in cases {
        let got = indexed.check(&s, 1, src, &multi(vals), NOW);
        let want = walked.check(&s, 1, src, &multi(vals), NOW);
        assert_eq!(got, want, "{vals:?}");
    }
    assert_eq!(
        indexed
            .check(&s, 1, src, &multi(&["nothing", "v7"]), NOW)
            .action,
        Action::Deny
    );
    // Past 16 values: the walk, counted.
    assert_eq!(s.index_walks.sum(), 1);
}

#[test]
fn regexes_too_big_to_share_a_prefilter_still_load_and_match() {
    // Each regex is within its own size limit; together they are past the shared set's.
    let mut text = String::from("[[tenant]]\nid = 1\n");
    for i in 0..24 {
        text.push_str(&format!(
            "[[tenant.rule]]\nname = \"r{i}\"\naction = \"deny\"\nwhen = [{{ attr = \"user_agent\", regex = \"\\\\w{{16}}z{i}\" }}]\n"
        ));
    }
    let p = prepared(&text);
    let t = p.tenants[1].as_ref().unwrap();
    assert!(
        t.prefilters.is_empty(),
        "the set was built: raise the sizes"
    );
    let s = state();
    let ua = format!("{}z7", "a".repeat(16));
    let v = p.check(&s, 1, ip("192.0.2.1"), &Attrs(&[("user_agent", &ua)]), NOW);
    assert_eq!(v.reason.as_str(), "r7");
    let v = p.check(
        &s,
        1,
        ip("192.0.2.1"),
        &Attrs(&[("user_agent", "curl")]),
        NOW,
    );
    assert_eq!(v, Verdict::PASS);
}
