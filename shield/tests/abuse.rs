//! Abuse at the library level, where the numbers are large: ten million unique sources
//! through the rate limiter, the window counter and the event aggregator stay within their
//! configured memory; a rules file with a million rules is refused before it is parsed, a
//! refused reload keeps the last good rules, and the largest file allowed compiles within
//! stated bounds.

use std::fmt::Write as _;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::time::Instant;

use shield::events::{Action, Aggregator, AggregatorConfig};
use shield::ratelimit::{Limit, RateLimiter, TableConfig, WindowCounter, source_key};
use shield::rules::{Attrs, Now, Prepared, RuleSet, RuleState, StateConfig};

/// The tests measure this process's memory: one at a time (`cargo test` runs them in threads
/// of one process; nextest in processes of their own).
static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// A field of `/proc/self/status` in KiB (`VmRSS`, `VmHWM`).
fn status_kib(field: &str) -> u64 {
    let s = std::fs::read_to_string("/proc/self/status").unwrap();
    s.lines()
        .find_map(|l| l.strip_prefix(field)?.strip_prefix(':'))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .unwrap_or(0)
}

/// The `i`-th of ten million distinct sources: IPv4 and IPv6 alternately, each in its own
/// /24 or /56 so that every one is a new key after aggregation too.
fn source(i: u32) -> IpAddr {
    if i.is_multiple_of(2) {
        IpAddr::V4(Ipv4Addr::from(0x0100_0000u32.wrapping_add(i << 7)))
    } else {
        IpAddr::V6(Ipv6Addr::from(
            (0x2001_0db8u128 << 96) | ((i as u128) << 72) | 1,
        ))
    }
}

#[test]
fn ten_million_sources_stay_within_the_configured_memory() {
    let _one = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    const SOURCES: u32 = 10_000_000;
    let slots = 1 << 16;
    let limiter = RateLimiter::new(&TableConfig { slots });
    let counter = WindowCounter::new(&TableConfig { slots });
    let agg = Aggregator::new(AggregatorConfig {
        top_k: 1024,
        max_recorders: 4,
        ..AggregatorConfig::default()
    });
    let limit = Limit::per_second(5.0, 10);
    let rss_before = status_kib("VmRSS");
    let t0 = Instant::now();
    std::thread::scope(|s| {
        for w in 0..2u32 {
            let (limiter, counter, agg) = (&limiter, &counter, &agg);
            s.spawn(move || {
                let rec = agg.recorder();
                let mut i = w;
                while i < SOURCES {
                    let ip = source(i);
                    let key = (1u32, source_key(ip, 32, 128));
                    let now_us = 1_000_000 + u64::from(i);
                    if !limiter.check(&key, &limit, now_us).is_allow() {
                        rec.record(1, ip, Action::RateLimited, shield::block::Evidence::Udp, 5);
                    }
                    counter.add(&key, 1, 10_000, now_us / 1000);
                    rec.record(
                        1 + i % 7,
                        ip,
                        Action::Blocked,
                        shield::block::Evidence::Udp,
                        3,
                    );
                    i += 2;
                }
            });
        }
    });
    let elapsed = t0.elapsed();
    let rss_after = status_kib("VmRSS");
    let st = limiter.stats();
    let mem = agg.memory_bytes();
    let events = agg.flush(2_000_000_000_000);
    println!(
        "{SOURCES} sources in {elapsed:?}: RSS {rss_before} -> {rss_after} KiB; limiter {} B, \
         {} evictions; counter {} B; aggregator {mem} B of a {} B budget; {} events",
        st.bytes,
        st.evictions,
        counter.stats().bytes,
        agg.budget_bytes(),
        events.len()
    );
    assert_eq!(st.bytes, slots * 8, "the limiter's table never grows");
    assert!(
        st.evictions > 0,
        "ten million keys cannot fit: evictions are counted"
    );
    assert_eq!(counter.stats().bytes, slots * 8);
    assert!(mem <= agg.budget_bytes(), "aggregator over its budget");
    assert!(events.len() <= 7 * 2, "one event per (tenant, action)");
    for e in &events {
        assert!(e.top.len() <= agg.config().top_n, "top sources bounded");
    }
    // The tables above are fixed; nothing grew with the sources (a generous 64 MiB margin
    // covers the allocator and the test harness).
    assert!(
        rss_after < rss_before + 64 * 1024,
        "RSS grew from {rss_before} to {rss_after} KiB"
    );
}

/// A rules file with `tenants` tenants of `rules` rules each.
fn rules_text(tenants: u32, rules: u32) -> String {
    let mut s = String::with_capacity((tenants * rules) as usize * 110);
    for t in 1..=tenants {
        let _ = writeln!(s, "[[tenant]]\nid = {t}");
        for r in 0..rules {
            let _ = writeln!(
                s,
                "[[tenant.rule]]\nname = \"r{r}\"\naction = \"deny\"\nwhen = [{{ attr = \"path\", prefix = \"/p{r}/\" }}]"
            );
        }
    }
    s
}

#[test]
fn a_million_rules_are_refused_or_bounded_and_the_last_good_rules_stay() {
    let _one = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("rules.toml");
    std::fs::write(&path, rules_text(2, 3)).unwrap();
    let set = RuleSet::new(
        Prepared::load(&path).unwrap(),
        RuleState::new(&StateConfig::default(), None),
    );
    let probe = |set: &RuleSet| {
        let r = [("path", "/p2/x")];
        set.check(1, "192.0.2.1".parse().unwrap(), &Attrs(&r), Now::read())
            .action
    };
    assert_eq!(probe(&set), shield::rules::Action::Deny);

    // A million rules, in one tenant or spread over a hundred: refused before parsing
    // (larger than the 16 MiB a rules file may be), quickly, naming the file.
    for (tenants, rules) in [(1, 1_000_000), (100, 10_000)] {
        std::fs::write(&path, rules_text(tenants, rules)).unwrap();
        let hwm_before = status_kib("VmHWM");
        let t0 = Instant::now();
        let e = set.reload(&path).unwrap_err().to_string();
        let refused_in = t0.elapsed();
        let hwm_after = status_kib("VmHWM");
        println!(
            "1M rules over {tenants} tenant(s) refused in {refused_in:?}, peak RSS \
             {hwm_before} -> {hwm_after} KiB: {e}"
        );
        assert!(e.contains("larger than 16 MiB"), "{e}");
        assert!(
            e.contains("rules.toml:"),
            "the error names the file and line: {e}"
        );
        // The file is read whole (110 MB); nothing beyond that is allocated.
        assert!(
            hwm_after < hwm_before + 256 * 1024,
            "peak {hwm_before} -> {hwm_after} KiB"
        );
        assert_eq!(
            probe(&set),
            shield::rules::Action::Deny,
            "last good rules kept"
        );
    }
    assert_eq!(set.stats().reload_failures, 2);

    // The most a file may hold: 100,000 rules over 100 tenants compile within stated
    // bounds, and a check costs the same whatever the other tenants hold.
    std::fs::write(&path, rules_text(100, 1_000)).unwrap();
    let hwm_before = status_kib("VmHWM");
    let t0 = Instant::now();
    set.reload(&path).unwrap();
    let compiled_in = t0.elapsed();
    let hwm_after = status_kib("VmHWM");
    assert_eq!(set.current().tenant_count(), 100);
    let r = [("path", "/p999/x")];
    assert_eq!(
        set.check(99, "192.0.2.1".parse().unwrap(), &Attrs(&r), Now::read())
            .action,
        shield::rules::Action::Deny
    );
    println!(
        "100k rules over 100 tenants compiled in {compiled_in:?}, peak RSS {hwm_before} -> \
         {hwm_after} KiB"
    );
    assert!(
        hwm_after < hwm_before + 1024 * 1024,
        "peak RSS {hwm_before} -> {hwm_after} KiB"
    );
}
