//! Rules files on disk: the shipped sample loads and behaves; bad files are refused with file:line; crawler loaders read the published shapes.

use shield::block::{BlockConfig, BlockMap};
use shield::rules::{
    Action, AsnTable, Attrs, Escalated, Now, Prepared, RuleSet, RuleState, StateConfig, codes,
    load_crawler_ranges,
};
use std::net::IpAddr;
use std::path::{Path, PathBuf};

fn data(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("data")
        .join(name)
}

fn ip(s: &str) -> IpAddr {
    s.parse().unwrap()
}

const NOW: Now = Now {
    unix_ms: 1_700_000_000_000,
    mono_us: 50_000_000,
};

#[test]
fn crawler_files_load() {
    let g = load_crawler_ranges(&data("googlebot.json")).unwrap();
    assert_eq!(g.len(), 8);
    assert!(g.iter().any(|n| n.contains(&ip("66.249.66.1"))));
    assert!(g.iter().any(|n| n.contains(&ip("2001:4860:4801:10::5"))));
    let b = load_crawler_ranges(&data("bingbot.json")).unwrap();
    assert_eq!(b.len(), 4);
    let asn = AsnTable::load(&data("asn.csv")).unwrap();
    assert_eq!(asn.lookup(ip("66.249.66.1")), Some(15169));
}

#[test]
fn sample_rules_behave() {
    let blocks = BlockMap::new(BlockConfig::default());
    let p = Prepared::load(&data("rules.toml")).unwrap();
    assert_eq!(p.tenant_count(), 2);
    let rs = RuleSet::new(
        p,
        RuleState::new(&StateConfig::default(), Some(blocks.clone())),
    );
    let v = |t, src: &str, a: &[(&str, &str)]| rs.check(t, ip(src), &Attrs(a), NOW);
    // Known crawler skips everything, even a denied path.
    let g = v(1, "66.249.66.1", &[("path", "/wp-login.php")]);
    assert_eq!((g.action, g.code), (Action::Allow, codes::KNOWN_BOT));
    assert_eq!(v(1, "157.55.39.9", &[]).action, Action::Allow);
    assert_eq!(v(1, "203.0.113.5", &[]).reason.as_str(), "deny:@scanners");
    assert_eq!(v(1, "192.0.2.1", &[]).code, codes::DENY_ASN);
    assert_eq!(v(1, "198.51.100.10", &[]).code, codes::ALLOW_LIST);
    assert_eq!(
        v(1, "198.51.100.11", &[("path", "/wp-login.php")])
            .reason
            .as_str(),
        "wp-login"
    );
    assert_eq!(
        v(1, "198.51.100.11", &[("user_agent", "Nikto/2")]).action,
        Action::Challenge
    );
    assert_eq!(v(1, "198.51.100.11", &[("path", "/")]).action, Action::Pass);
    // DNS tenant: ANY denied, and never an escalation (a resolver relays ANY for its users:
    // any of them could otherwise have it blocked).
    for _ in 0..40 {
        let d = v(2, "198.51.100.99", &[("qtype", "ANY")]);
        assert_eq!((d.action, d.escalated), (Action::Deny, Escalated::No));
    }
    assert!(
        blocks
            .reader()
            .lookup(ip("198.51.100.99"), NOW.unix_ms)
            .is_none()
    );
    assert_eq!(
        v(2, "198.51.100.99", &[("qtype", "A")]).action,
        Action::Pass
    );
}

#[test]
fn bad_files_are_refused_with_file_line_and_last_good_kept() {
    let dir = tempfile::tempdir().unwrap();
    let rules = dir.path().join("rules.toml");
    let rs = RuleSet::new(
        Prepared::empty(),
        RuleState::new(&StateConfig::default(), None),
    );
    std::fs::write(&rules, "[[tenant]]\nid = 4\ndeny = [\"10.0.0.0/8\"]\n").unwrap();
    rs.reload(&rules).unwrap();

    let cases: &[(&str, &str)] = &[
        (
            "[[tenant]]\nid = 4\nallow = [\"10.0.0.0/8\"\n",
            "rules.toml:3:",
        ),
        (
            "[[tenant]]\nid = 4\nalow = []\n",
            "rules.toml:3:1: unknown field `alow`",
        ),
        (
            "[[tenant]]\nid = 4\n\n[[tenant.rule]]\nname = \"x\"\naction = \"deny\"\nwhen = [{ attr = \"ua\", regex = \"[\" }]\n",
            "rules.toml:7:",
        ),
        ("[known_bots]\nfiles = [\"bad.json\"]\n", "bad.json:3:"),
        ("[asn]\nfile = \"asn.csv\"\n", "asn.csv:2:1:"),
    ];
    std::fs::write(dir.path().join("bad.json"), "{\"prefixes\": [\n {\"ipv4Prefix\": \"1.2.3.0/24\"},\n {\"ipv4Prefix\": \"1.2.3.999/24\"}]}").unwrap();
    std::fs::write(dir.path().join("asn.csv"), "1.0.0.0/8,1\n2.0.0.0/8\n").unwrap();
    for (text, want) in cases {
        std::fs::write(&rules, text).unwrap();
        let e = rs.reload(&rules).unwrap_err().to_string();
        let shown = e.rsplit('/').next().unwrap();
        assert!(shown.starts_with(want), "{text:?}: got {e}, want {want}");
        // The last good rules still apply.
        assert_eq!(rs.check(4, ip("10.1.1.1"), &(), NOW).action, Action::Deny);
    }
    assert_eq!(rs.stats().reload_failures, cases.len() as u64);
}
