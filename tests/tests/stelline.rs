//! NLnet Labs' Stelline server scenarios (`nlnetlabs-domain/server/*.rpl` in the shared
//! corpora, from the `domain` crate) run by [`palisade_tests::stelline`] against a real dnsd
//! configured from each scenario's `server:` block.
//!
//! - `auth_zones.rpl`: the RFC 1034 §6.2 queries against the §6.1 root and EDU zones
//!   (`local-file:`, relative to the corpus directory). Knot DNS and NSD, when installed, run
//!   the same steps and their results are printed beside dnsd's (not asserted).
//! - `axfr_out.rpl`, `axfr_large_out.rpl`: AXFR over TCP of the `local-data:` zone;
//!   `provide-xfr: ADDR` becomes `allow_transfer` (the second client sends from 127.0.0.2).
//!   `COMPATIBLE` (one record per message, RFC 5936 §7.1) has no dnsd counterpart; the step
//!   that asks for it pools the messages (`EXTRA_PACKETS`), so any split is accepted.
//! - `notify.rpl`: the scenario's server has no zone; `domain`'s harness acknowledges NOTIFY
//!   for example.com only, as a secondary would. Mapped onto dnsd as a secondary of
//!   example.com (transferred from a second dnsd) that takes NOTIFY from 127.0.0.1.
//! - `tsig.rpl`: `TESTKEY` is the key `domain`'s harness makes (HMAC-SHA256, 32 zero octets);
//!   the scenario's request MAC is verified with it, then the query is signed again at the
//!   wall-clock time its mock clock stands for, and the reply's TSIG is verified. The query as
//!   written (time signed 0) is also sent: RFC 8945 §5.2.3 BADTIME, signed, with our time.
//! - `edns_downstream_cookies.rpl`: `answer-cookie` + `cookie-secret` become
//!   `[defence.cookies]` with that secret, `access-control: 127.0.0.1 allow_cookie` the zone's
//!   `cookies = "require"`. The scenario's server cookies are RFC 9018 ones (their hashes
//!   verify with the secret for 127.0.0.1), so their timestamps are moved from the mock clock
//!   to the wall clock with the ages the scenario means (see the driver's doc).
//! - `edns_keepalive.rpl`: dnsd answers edns-tcp-keepalive over TCP with its idle timeout
//!   (RFC 7828) and ignores it over UDP; a query whose option carries a TIMEOUT (a client's
//!   error) is answered as BIND answers it, not with unbound's FORMERR (step 11 compares no
//!   rcode).
//!
//! Mapping notes: a `local-data:` zone without NS records at its apex gets one (dnsd
//! refuses such a zone, RFC 1034 §4.2.1; no step asks for it). The driver compares a TTL
//! where the scenario writes one, which `domain` does only under `MATCH ttl`.
//! `edns_keepalive.rpl` steps 11 and 21 compare nothing (`MATCH TCP`/`MATCH UDP` alone) and
//! match whenever an answer comes.
//!
//! Each step dnsd disputes is in [`DISPUTED`] with the reason; such a step must keep
//! differing (and in the stated way), every other step must match. Steps that cannot be
//! mapped onto dnsd or onto a real clock are in [`NOT_RUN`].

use std::path::PathBuf;

use palisade_tests::client;
use palisade_tests::corpora::corpora_dir;
use palisade_tests::servers::{Dnsd, Knot, Nsd, Zone};
use palisade_tests::stelline::{self, Outcome, RunOpts, Scenario, ServerConfig, StepKind, TsigKey};

/// Where the scenarios are, below the corpora directory.
const SERVER_DIR: &str = "nlnetlabs-domain/server";

/// A step whose expectation dnsd disputes.
struct Disputed {
    scenario: &'static str,
    /// The CHECK_ANSWER step.
    step: u64,
    /// A text every such step's difference must contain (so that it differs for the reason
    /// given, not another).
    differs_in: &'static str,
    reason: &'static str,
}

const DISPUTED: &[Disputed] = &[
    Disputed {
        scenario: "auth_zones.rpl",
        step: 6211,
        differs_in: "answer: unexpected sri-nic.arpa. 3600 IN A",
        reason: "The RFC 1034 §6.1 zone writes no $TTL and a TTL on some records only: the \
                 scenario repeats the last explicit TTL (86400, RFC 1035 §5.1's reading); Knot \
                 and NSD give such records the default 3600, as dnsd does.",
    },
    Disputed {
        scenario: "auth_zones.rpl",
        step: 6221,
        differs_in: "answer matches none of the 3 alternatives: sri-nic.arpa. 3600",
        reason: "The same TTL as step 6211: Knot and NSD give 3600, as dnsd does.",
    },
    Disputed {
        scenario: "auth_zones.rpl",
        step: 6231,
        differs_in: "additional: unexpected sri-nic.arpa.",
        reason: "RFC 1035 §3.3.9: MX causes type A additional section processing for the \
                 exchange, and RFC 1034 §6.2.3 (the example this step is) shows the reply with \
                 SRI-NIC.ARPA's two A records in the additional section. The scenario left \
                 them out only because `domain` does not do additional processing yet (its \
                 comment says so) while `MATCH all` still compares the section. Knot adds \
                 the same two records; NSD with its defaults too (with the root's NS and \
                 their addresses besides).",
    },
    Disputed {
        scenario: "edns_downstream_cookies.rpl",
        step: 1,
        differs_in: "rcode NOERROR (expected REFUSED)",
        reason: "A UDP query without a COOKIE option to a zone that requires cookies: the \
                 scenario wants TC with REFUSED (unbound's `allow_cookie`); dnsd answers TC \
                 with NOERROR and no records, which every client takes as 'retry over TCP' \
                 (RFC 1035 §4.2.1, RFC 7766 §5). No RFC asks for REFUSED: RFC 7873 §5.2.1 \
                 has a query without a COOKIE option answered as if the server did not \
                 implement cookies, so a cookie-based refusal has no ground there, and \
                 REFUSED sends resolvers to another server instead of to TCP. Local policy \
                 either way; dnsd's keeps a cookie-less client able to get its answer.",
    },
];

/// Steps (CHECK_ANSWER numbers) not run, and why.
const NOT_RUN: &[(&str, u64, &str)] = &[
    (
        "edns_downstream_cookies.rpl",
        41,
        "the query comes from 1.2.3.4, an address this test cannot send from on loopback, and \
         the scenario exempts that address from the cookie requirement (`access-control: \
         1.2.3.4 allow`); dnsd's cookie policy is per zone, not per client address",
    ),
    (
        "edns_keepalive.rpl",
        71,
        "expects the server to have closed the TCP connection of step 50 after 31 s of mock \
         time idle; needs that connection kept across steps and a real 31 s wait",
    ),
];

fn scenario(name: &str) -> Option<Scenario> {
    let dir = corpora_dir()?.join(SERVER_DIR);
    let path = dir.join(name);
    if !path.is_file() {
        panic!("{} is missing from the corpora", path.display());
    }
    Some(Scenario::load(&path).unwrap_or_else(|e| panic!("{e}")))
}

fn skips(name: &str) -> Vec<(u64, String)> {
    NOT_RUN
        .iter()
        .filter(|(s, _, _)| *s == name)
        .map(|(_, n, why)| (*n, why.to_string()))
        .collect()
}

/// Asserts dnsd's outcomes against [`DISPUTED`] and [`NOT_RUN`]; the number that matched.
fn judge(s: &Scenario, outcomes: &[Outcome]) -> usize {
    println!("{}", stelline::report(&s.name, "dnsd", outcomes));
    let checks = s
        .steps
        .iter()
        .filter(|x| matches!(x.kind, StepKind::CheckAnswer(_)))
        .count();
    assert_eq!(
        outcomes.len(),
        checks,
        "{}: every CHECK_ANSWER has an outcome",
        s.name
    );
    let mut failures = Vec::new();
    for o in outcomes {
        let disputed = DISPUTED
            .iter()
            .find(|d| d.scenario == s.name && d.step == o.check_step);
        let listed_skip = NOT_RUN
            .iter()
            .any(|(n, st, _)| *n == s.name && *st == o.check_step);
        match (&o.skipped, disputed) {
            (Some(why), _) => {
                if !listed_skip {
                    failures.push(format!("step {}: not run ({why})", o.check_step));
                }
            }
            (None, Some(d)) => {
                let all = o.diffs.join("\n");
                if o.diffs.is_empty() {
                    failures.push(format!(
                        "step {} now matches the scenario: remove it from DISPUTED ({})",
                        o.check_step, d.reason
                    ));
                } else if !all.contains(d.differs_in) {
                    failures.push(format!(
                        "step {} differs otherwise than DISPUTED says ({:?}):\n  {}",
                        o.check_step,
                        d.differs_in,
                        o.diffs.join("\n  ")
                    ));
                } else {
                    println!(
                        "{} step {}: disputed as listed: {}",
                        s.name, o.check_step, d.reason
                    );
                }
            }
            (None, None) => {
                if !o.diffs.is_empty() {
                    failures.push(format!(
                        "step {} differs:\n  {}\n  got: {}",
                        o.check_step,
                        o.diffs.join("\n  "),
                        o.got.replace('\n', "\n  ")
                    ));
                }
            }
        }
    }
    for d in DISPUTED.iter().filter(|d| d.scenario == s.name) {
        if !outcomes.iter().any(|o| o.check_step == d.step) {
            failures.push(format!(
                "DISPUTED names step {}, which is not in the scenario",
                d.step
            ));
        }
    }
    assert!(failures.is_empty(), "{}:\n{}", s.name, failures.join("\n"));
    outcomes.iter().filter(|o| o.matched()).count()
}

/// The zones of a scenario: its `local-file:`s and its `local-data:` (written into `dir`).
fn zones(s: &Scenario, cfg: &ServerConfig, dir: &std::path::Path) -> Vec<Zone> {
    let mut z: Vec<Zone> = cfg
        .zone_files(&s.dir)
        .unwrap_or_else(|e| panic!("{}: {e}", s.name))
        .into_iter()
        .map(|(origin, file)| Zone::new(&origin, file))
        .collect();
    if let Some((origin, file)) = cfg
        .local_zone(dir)
        .unwrap_or_else(|e| panic!("{}: {e}", s.name))
    {
        // dnsd refuses a zone without NS records at its apex (RFC 1034 §4.2.1: a zone has
        // them); `domain`'s harness serves bare records. One NS, named outside the zone, is
        // added where the scenario's data has none: no step asks for it.
        let text = std::fs::read_to_string(&file).unwrap();
        let apex_ns = text.lines().any(|l| {
            let t: Vec<&str> = l.split_whitespace().collect();
            t.first().is_some_and(|o| o.eq_ignore_ascii_case(&origin))
                && t.iter().take(4).any(|w| w.eq_ignore_ascii_case("NS"))
        });
        if !apex_ns {
            std::fs::write(&file, format!("{text}{origin} 3600 IN NS ns.invalid.\n")).unwrap();
            println!(
                "{}: NS ns.invalid. added at {origin}, which has none",
                s.name
            );
        }
        z.push(Zone::new(&origin, file));
    }
    assert!(!z.is_empty(), "{}: no zone in the config", s.name);
    z
}

#[test]
fn auth_zones() {
    let Some(s) = scenario("auth_zones.rpl") else {
        return;
    };
    let cfg = s.server_config();
    let dir = tempfile::tempdir().unwrap();
    let zones = zones(&s, &cfg, dir.path());
    assert_eq!(zones.len(), 2, "the root and EDU zones");
    let dnsd = Dnsd::start(&zones);
    let opts = RunOpts::default();
    let out = stelline::run(&s, dnsd.addr(), &opts);
    // The oracles, for the record.
    if Knot::available() {
        let knot = Knot::start(&zones);
        let o = stelline::run(&s, knot.addr(), &opts);
        println!("{}", stelline::report(&s.name, "knot", &o));
    }
    if Nsd::available() {
        // NSD's own defaults (not the harness's minimal-responses): RFC 1034 §6.2 shapes.
        let nsd = Nsd::start_with(&zones, &[]);
        let o = stelline::run(&s, nsd.addr(), &opts);
        println!("{}", stelline::report(&s.name, "nsd", &o));
    }
    let matched = judge(&s, &out);
    assert_eq!(
        matched, 2,
        "6251 and 6261 match (6211, 6221, 6231 disputed)"
    );
}

/// An AXFR scenario: the `local-data:` zone, transfers allowed to the `provide-xfr:`
/// addresses.
fn axfr(name: &str, expect_matched: usize) {
    let Some(s) = scenario(name) else {
        return;
    };
    let cfg = s.server_config();
    assert!(!cfg.provide_xfr.is_empty(), "{name}: no provide-xfr");
    let dir = tempfile::tempdir().unwrap();
    let mut zones = zones(&s, &cfg, dir.path());
    let allow: Vec<String> = cfg
        .provide_xfr
        .iter()
        .map(|(a, _)| format!("\"{a}\""))
        .collect();
    for z in &mut zones {
        z.options
            .push(format!("allow_transfer = [{}]", allow.join(", ")));
    }
    let dnsd = Dnsd::start(&zones);
    let out = stelline::run(&s, dnsd.addr(), &RunOpts::default());
    assert_eq!(judge(&s, &out), expect_matched);
    // Each ADDRESS the scenario names was the source of a transfer.
    let log = dnsd.log();
    for st in &s.steps {
        if let StepKind::Query {
            address: Some(a), ..
        } = &st.kind
        {
            assert!(
                log.contains(&format!("AXFR to {a}:")),
                "no AXFR to {a}:\n{log}"
            );
        }
    }
}

#[test]
fn axfr_out() {
    axfr("axfr_out.rpl", 2);
}

#[test]
fn axfr_large_out() {
    axfr("axfr_large_out.rpl", 1);
}

#[test]
fn notify() {
    let Some(s) = scenario("notify.rpl") else {
        return;
    };
    let cfg = s.server_config();
    assert!(
        cfg.local_files.is_empty() && cfg.local_data.is_empty(),
        "notify.rpl's server has no zone of its own"
    );
    let dir = tempfile::tempdir().unwrap();
    let primary_file = dir.path().join("primary.zone");
    std::fs::write(
        &primary_file,
        "example.com. 3600 IN SOA ns.example.com. hostmaster.example.com. 1 3600 900 86400 3600\n\
         example.com. 3600 IN NS ns.example.net.\n",
    )
    .unwrap();
    let mut pz = Zone::new("example.com.", &primary_file);
    pz.options.push("allow_transfer = [\"127.0.0.0/8\"]".into());
    let primary = Dnsd::start(&[pz]);
    let mut sz = Zone::new("example.com.", dir.path().join("secondary.zone"));
    sz.options = vec![
        format!("primaries = [\"{}\"]", primary.addr()),
        "allow_notify = [\"127.0.0.1\"]".into(),
    ];
    let secondary = Dnsd::start(&[sz]);
    let out = stelline::run(&s, secondary.addr(), &RunOpts::default());
    assert_eq!(judge(&s, &out), 2);
    let st = secondary.stats();
    assert_eq!(st.get("notify.in.accepted"), 1, "{st:?}");
}

/// The key `domain`'s Stelline harness makes for `TESTKEY`: HMAC-SHA256 with a secret from a
/// random source that returns only zero octets (ring's `FixedByteRandom { byte: 0 }`).
fn testkey() -> TsigKey {
    TsigKey {
        name: "TESTKEY".into(),
        secret: vec![0; 32],
    }
}

#[test]
fn tsig() {
    let Some(s) = scenario("tsig.rpl") else {
        return;
    };
    let cfg = s.server_config();
    let dir = tempfile::tempdir().unwrap();
    let zones = zones(&s, &cfg, dir.path());
    let dnsd = Dnsd::builder()
        .zones(&zones)
        .raw(
            "[[tsig_key]]\nname = \"TESTKEY\"\nalgorithm = \"hmac-sha256\"\n\
             secret = \"AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA=\"\n",
        )
        .start();
    let opts = RunOpts {
        keys: vec![testkey()],
        ..RunOpts::default()
    };
    let out = stelline::run(&s, dnsd.addr(), &opts);
    assert_eq!(judge(&s, &out), 1);
    // The query exactly as written, signed at time 0 by the mock clock: outside the fudge
    // of a real clock, so RFC 8945 §5.2.3: NOTAUTH with BADTIME, signed, with our time in
    // Other Data. The MAC verified first (§5.2: key, then MAC, then time).
    let q = s
        .steps
        .iter()
        .find_map(|st| match &st.kind {
            StepKind::Query { entry, .. } => Some(entry.clone()),
            _ => None,
        })
        .expect("a query");
    let raw = stelline::literal_query(&q, 0);
    let reply = client::udp_exchange(dnsd.addr(), &raw, std::time::Duration::from_secs(3))
        .unwrap()
        .expect("an answer to the query as written");
    assert_eq!(reply[3] & 0xF, 9, "NOTAUTH");
    let (key, time, error, other, mac_len) =
        stelline::tsig_summary(&reply).expect("a signed BADTIME answer");
    assert_eq!((key.to_ascii_lowercase().as_str(), error), ("testkey.", 18));
    assert_eq!(time, 0, "the BADTIME answer carries the request's time");
    assert_eq!(mac_len, 32, "and is signed");
    assert_eq!(other.len(), 6, "with the server's time in Other Data");
    let server_time = other.iter().fold(0u64, |a, &x| (a << 8) | x as u64);
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs();
    assert!(now.abs_diff(server_time) < 60, "{server_time} vs {now}");
}

#[test]
fn edns_downstream_cookies() {
    let Some(s) = scenario("edns_downstream_cookies.rpl") else {
        return;
    };
    let cfg = s.server_config();
    assert!(cfg.answer_cookie);
    let secret_hex = cfg.cookie_secret.clone().expect("a cookie secret");
    let secret: [u8; 16] = (0..16)
        .map(|i| u8::from_str_radix(&secret_hex[2 * i..2 * i + 2], 16).unwrap())
        .collect::<Vec<u8>>()
        .try_into()
        .unwrap();
    assert!(
        cfg.access_control
            .iter()
            .any(|(p, a)| p == "127.0.0.1" && a == "allow_cookie"),
        "the client address must be the cookie-protected one: {:?}",
        cfg.access_control
    );
    let dir = tempfile::tempdir().unwrap();
    let mut zones = zones(&s, &cfg, dir.path());
    for z in &mut zones {
        z.options.push("cookies = \"require\"".into());
    }
    let dnsd = Dnsd::builder()
        .zones(&zones)
        .raw(&format!(
            "[defence.cookies]\nenabled = true\nsecret = \"{secret_hex}\"\n"
        ))
        .start();
    let opts = RunOpts {
        cookie_secret: Some(secret),
        skip: skips(&s.name),
        ..RunOpts::default()
    };
    let out = stelline::run(&s, dnsd.addr(), &opts);
    // The scenario's cookies are RFC 9018 ones: each valid one verified before being moved.
    for step in [51, 61, 71, 81] {
        let o = stelline::by_step(&out)[&step];
        assert!(
            o.notes.iter().any(|n| n.contains("hash verifies")),
            "step {step}: {:?}",
            o.notes
        );
    }
    assert_eq!(judge(&s, &out), 7);
}

#[test]
fn edns_keepalive() {
    let Some(s) = scenario("edns_keepalive.rpl") else {
        return;
    };
    let cfg = s.server_config();
    let timeout: u64 = cfg
        .settings
        .iter()
        .find(|(k, _)| k == "edns-tcp-keepalive-timeout")
        .and_then(|(_, v)| v.parse().ok())
        .expect("edns-tcp-keepalive-timeout");
    let dir = tempfile::tempdir().unwrap();
    let zones = zones(&s, &cfg, dir.path());
    let dnsd = Dnsd::builder()
        .zones(&zones)
        .server_option(&format!("tcp_idle_timeout_ms = {timeout}"))
        .start();
    let opts = RunOpts {
        skip: skips(&s.name),
        ..RunOpts::default()
    };
    let out = stelline::run(&s, dnsd.addr(), &opts);
    // 11 and 21 compare nothing (`MATCH TCP` / `MATCH UDP` alone): they match as long as an
    // answer comes; 31 and 51 compare the option and its TIMEOUT (the idle timeout / 100 ms).
    assert_eq!(judge(&s, &out), 4);
}

/// The corpus holds no scenario this file does not know.
#[test]
fn every_scenario_is_covered() {
    let Some(dir) = corpora_dir() else {
        return;
    };
    let known = [
        "auth_zones.rpl",
        "axfr_out.rpl",
        "axfr_large_out.rpl",
        "notify.rpl",
        "tsig.rpl",
        "edns_downstream_cookies.rpl",
        "edns_keepalive.rpl",
    ];
    let mut found: Vec<PathBuf> = std::fs::read_dir(dir.join(SERVER_DIR))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "rpl"))
        .collect();
    found.sort();
    for p in &found {
        let n = p.file_name().unwrap().to_string_lossy();
        assert!(known.contains(&n.as_ref()), "a new scenario: {n}");
        Scenario::load(p).unwrap_or_else(|e| panic!("{e}"));
    }
    assert_eq!(found.len(), known.len());
}
