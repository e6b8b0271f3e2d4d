//! Verdicts of the XDP program on crafted frames, run in the kernel with BPF_PROG_TEST_RUN
//! against its real maps: blocks by address and prefix, VLAN, IPv4 options, IPv6 extension
//! headers, fragments, truncated frames, expiry, and the per-source rate limit.

mod common;

use std::net::{Ipv4Addr, Ipv6Addr};
use std::time::Instant;

use common::*;
use ipnet::IpNet;
use xdp_guard::{Counters, KernelBlock, Verdict, XdpGuard};

const DNS: u16 = 53;

/// Answers sent back to the frame's sender: `BPF_PROG_TEST_RUN` runs the program as if on
/// the loopback device, where no route leads back to the test's clients (the route look-up
/// itself is tested below, and on a veth in tests/tests/xdp_answers.rs).
const SENDER: xdp_guard::AnswerRate = xdp_guard::AnswerRate {
    per_second: 0,
    v4_prefix: 0,
    v6_prefix: 0,
    slip: 0,
    reply_to_sender: true,
};

fn net(s: &str) -> IpNet {
    s.parse().unwrap()
}

fn v4(s: &str) -> Ipv4Addr {
    s.parse().unwrap()
}

fn v6(s: &str) -> Ipv6Addr {
    s.parse().unwrap()
}

/// Runs `frame` once and returns the verdict and the counter change it caused.
fn run(g: &XdpGuard, frame: &[u8]) -> (Verdict, Counters) {
    let before = g.counters().unwrap();
    let v = g.test_run(frame, 1).unwrap().verdict;
    let after = g.counters().unwrap();
    let d = |a: u64, b: u64| a - b;
    let delta = Counters {
        pass: d(after.pass, before.pass),
        pass_not_ip: d(after.pass_not_ip, before.pass_not_ip),
        pass_not_understood: d(after.pass_not_understood, before.pass_not_understood),
        drop_blocked_addr: d(after.drop_blocked_addr, before.drop_blocked_addr),
        drop_blocked_prefix: d(after.drop_blocked_prefix, before.drop_blocked_prefix),
        drop_ratelimit: d(after.drop_ratelimit, before.drop_ratelimit),
        block_expired: d(after.block_expired, before.block_expired),
        rate_new_source: d(after.rate_new_source, before.rate_new_source),
        rate_exempt: d(after.rate_exempt, before.rate_exempt),
        rate_cookie: d(after.rate_cookie, before.rate_cookie),
        drop_by_slot: std::array::from_fn(|i| d(after.drop_by_slot[i], before.drop_by_slot[i])),
        answered: d(after.answered, before.answered),
        ans_pass: std::array::from_fn(|i| d(after.ans_pass[i], before.ans_pass[i])),
        ans_rrl: std::array::from_fn(|i| d(after.ans_rrl[i], before.ans_rrl[i])),
        ans_cookie: std::array::from_fn(|i| d(after.ans_cookie[i], before.ans_cookie[i])),
        ans_pass_untried: std::array::from_fn(|i| {
            d(after.ans_pass_untried[i], before.ans_pass_untried[i])
        }),
        ans_pass_route: d(after.ans_pass_route, before.ans_pass_route),
        rate_slip: d(after.rate_slip, before.rate_slip),
        never_block: d(after.never_block, before.never_block),
        rate_name: d(after.rate_name, before.rate_name),
    };
    assert_eq!(
        delta.packets(),
        1,
        "each frame counts in exactly one verdict: {delta:?}"
    );
    (v, delta)
}

fn assert_verdict(g: &XdpGuard, what: &str, frame: &[u8], want: Verdict, counter: &str) {
    let (v, d) = run(g, frame);
    assert_eq!(v, want, "{what}: verdict");
    let hit: Vec<&str> = d
        .named()
        .iter()
        .filter(|(_, n)| *n > 0)
        .map(|(k, _)| *k)
        .collect();
    assert!(
        hit.contains(&counter),
        "{what}: expected counter {counter}, got {hit:?}"
    );
}

fn block(g: &XdpGuard, s: &str) {
    assert!(g.maps().block(net(s), u64::MAX).unwrap());
}

#[test]
fn blocked_addresses_and_prefixes_drop_others_pass() {
    if !xdp_ready("blocked_addresses_and_prefixes_drop_others_pass") {
        return;
    }
    let g = private_guard(&[DNS], 0, 0);
    block(&g, "192.0.2.10/32");
    block(&g, "192.0.2.64/26");
    block(&g, "2001:db8::10/128");
    block(&g, "2001:db8:1::/48");

    use Verdict::*;
    assert_verdict(
        &g,
        "v4 addr",
        &udp4(v4("192.0.2.10"), DNS),
        Drop,
        "drop_blocked_addr",
    );
    assert_verdict(
        &g,
        "v4 prefix",
        &udp4(v4("192.0.2.70"), DNS),
        Drop,
        "drop_blocked_prefix",
    );
    assert_verdict(&g, "v4 other", &udp4(v4("192.0.2.11"), DNS), Pass, "pass");
    assert_verdict(
        &g,
        "v4 outside prefix",
        &udp4(v4("192.0.2.128"), 80),
        Pass,
        "pass",
    );
    assert_verdict(
        &g,
        "v6 addr",
        &udp6(v6("2001:db8::10"), DNS),
        Drop,
        "drop_blocked_addr",
    );
    assert_verdict(
        &g,
        "v6 prefix",
        &udp6(v6("2001:db8:1:ff::5"), DNS),
        Drop,
        "drop_blocked_prefix",
    );
    assert_verdict(
        &g,
        "v6 other",
        &udp6(v6("2001:db8:2::5"), DNS),
        Pass,
        "pass",
    );
    // Any protocol from a blocked source: TCP and ICMP too.
    let tcp4 = frame(
        &[],
        ETH_IP,
        &ipv4(v4("192.0.2.10"), DST4, TCP, &[], 0, &tcp(1234, 443)),
    );
    assert_verdict(&g, "v4 tcp addr", &tcp4, Drop, "drop_blocked_addr");
    let icmp = frame(
        &[],
        ETH_IP,
        &ipv4(
            v4("192.0.2.65"),
            DST4,
            ICMP,
            &[],
            0,
            &[8, 0, 0, 0, 0, 0, 0, 0],
        ),
    );
    assert_verdict(&g, "v4 icmp prefix", &icmp, Drop, "drop_blocked_prefix");
    let arp = frame(&[], ETH_ARP, &[0; 28]);
    assert_verdict(&g, "arp", &arp, Pass, "pass_not_ip");

    // Unblocking takes effect at once.
    assert!(g.maps().unblock(net("192.0.2.10/32")).unwrap());
    assert!(g.maps().unblock(net("192.0.2.64/26")).unwrap());
    assert!(!g.maps().unblock(net("192.0.2.64/26")).unwrap());
    assert_verdict(
        &g,
        "v4 unblocked",
        &udp4(v4("192.0.2.10"), DNS),
        Pass,
        "pass",
    );
    assert_verdict(
        &g,
        "v4 prefix unblocked",
        &udp4(v4("192.0.2.70"), DNS),
        Pass,
        "pass",
    );
    assert!(
        g.maps()
            .is_blocked("2001:db8:1::9".parse().unwrap())
            .unwrap()
    );
    assert!(!g.maps().is_blocked("192.0.2.70".parse().unwrap()).unwrap());
}

#[test]
fn vlan_options_extension_headers_and_fragments() {
    if !xdp_ready("vlan_options_extension_headers_and_fragments") {
        return;
    }
    let g = private_guard(&[DNS], 0, 0);
    block(&g, "192.0.2.10/32");
    block(&g, "2001:db8::10/128");
    let bad4 = v4("192.0.2.10");
    let bad6 = v6("2001:db8::10");
    let good6 = v6("2001:db8::11");
    let u = udp(40000, DNS, b"q");
    use Verdict::*;

    // One VLAN tag (802.1Q or 802.1ad) is looked through; two are not.
    let ip = ipv4(bad4, DST4, UDP, &[], 0, &u);
    assert_verdict(
        &g,
        "802.1Q",
        &frame(&[ETH_VLAN], ETH_IP, &ip),
        Drop,
        "drop_blocked_addr",
    );
    assert_verdict(
        &g,
        "802.1ad",
        &frame(&[ETH_QINQ], ETH_IP, &ip),
        Drop,
        "drop_blocked_addr",
    );
    let ip6 = ipv6(bad6, DST6, &[], UDP, &u);
    assert_verdict(
        &g,
        "802.1Q v6",
        &frame(&[ETH_VLAN], ETH_IP6, &ip6),
        Drop,
        "drop_blocked_addr",
    );
    assert_verdict(
        &g,
        "QinQ",
        &frame(&[ETH_QINQ, ETH_VLAN], ETH_IP, &ip),
        Pass,
        "pass_not_understood",
    );

    // IPv4 with options (IHL 8 and the maximum, 15).
    let opts = ipv4(bad4, DST4, UDP, &[1; 12], 0, &u);
    assert_verdict(
        &g,
        "v4 options",
        &frame(&[], ETH_IP, &opts),
        Drop,
        "drop_blocked_addr",
    );
    let max = ipv4(v4("192.0.2.11"), DST4, UDP, &[1; 40], 0, &u);
    assert_verdict(&g, "v4 IHL 15", &frame(&[], ETH_IP, &max), Pass, "pass");

    // IPv4 fragments: the source is judged on every fragment.
    let first = ipv4(bad4, DST4, UDP, &[], 0x2000, &u);
    assert_verdict(
        &g,
        "v4 first fragment",
        &frame(&[], ETH_IP, &first),
        Drop,
        "drop_blocked_addr",
    );
    let later = ipv4(bad4, DST4, UDP, &[], 185, b"rest of it");
    assert_verdict(
        &g,
        "v4 later fragment",
        &frame(&[], ETH_IP, &later),
        Drop,
        "drop_blocked_addr",
    );
    let later_ok = ipv4(v4("192.0.2.11"), DST4, UDP, &[], 185, b"rest");
    assert_verdict(
        &g,
        "v4 later fragment ok",
        &frame(&[], ETH_IP, &later_ok),
        Pass,
        "pass",
    );

    // IPv6 extension headers.
    let chain = [
        Ext::Opts(HOPOPTS, 0),
        Ext::Opts(ROUTING, 1),
        Ext::Opts(DSTOPTS, 0),
    ];
    let p = ipv6(good6, DST6, &chain, UDP, &u);
    assert_verdict(&g, "v6 ext chain", &frame(&[], ETH_IP6, &p), Pass, "pass");
    let p = ipv6(bad6, DST6, &chain, UDP, &u);
    assert_verdict(
        &g,
        "v6 ext chain blocked",
        &frame(&[], ETH_IP6, &p),
        Drop,
        "drop_blocked_addr",
    );
    let p = ipv6(
        good6,
        DST6,
        &[Ext::Opts(HOPOPTS, 0), Ext::Frag(0, true)],
        UDP,
        &u,
    );
    assert_verdict(
        &g,
        "v6 first fragment",
        &frame(&[], ETH_IP6, &p),
        Pass,
        "pass",
    );
    let p = ipv6(good6, DST6, &[Ext::Frag(100, false)], UDP, b"tail");
    assert_verdict(
        &g,
        "v6 later fragment",
        &frame(&[], ETH_IP6, &p),
        Pass,
        "pass",
    );
    let p = ipv6(bad6, DST6, &[Ext::Frag(100, false)], UDP, b"tail");
    assert_verdict(
        &g,
        "v6 later fragment blocked",
        &frame(&[], ETH_IP6, &p),
        Drop,
        "drop_blocked_addr",
    );
    // Seven extension headers: more than the program walks; passed unexamined.
    let deep: Vec<Ext> = (0..7).map(|_| Ext::Opts(DSTOPTS, 0)).collect();
    let p = ipv6(good6, DST6, &deep, UDP, &u);
    assert_verdict(
        &g,
        "v6 too deep",
        &frame(&[], ETH_IP6, &p),
        Pass,
        "pass_not_understood",
    );
    // ... but a blocked source is still dropped: its address is read first.
    let p = ipv6(bad6, DST6, &deep, UDP, &u);
    assert_verdict(
        &g,
        "v6 too deep blocked",
        &frame(&[], ETH_IP6, &p),
        Drop,
        "drop_blocked_addr",
    );
    let p = ipv6(good6, DST6, &[], TCP, &tcp(1, 443));
    assert_verdict(&g, "v6 tcp", &frame(&[], ETH_IP6, &p), Pass, "pass");
}

#[test]
fn truncated_and_malformed_frames_pass() {
    if !xdp_ready("truncated_and_malformed_frames_pass") {
        return;
    }
    let g = private_guard(&[DNS], 0, 0);
    block(&g, "192.0.2.10/32");
    let good = udp4(v4("192.0.2.11"), DNS);
    use Verdict::*;
    // Ethernet header only; cut inside the IPv4 header; cut inside UDP.
    assert_verdict(&g, "eth only", &good[..14], Pass, "pass_not_understood");
    assert_verdict(
        &g,
        "cut ipv4",
        &good[..14 + 19],
        Pass,
        "pass_not_understood",
    );
    assert_verdict(
        &g,
        "cut udp",
        &good[..14 + 20 + 7],
        Pass,
        "pass_not_understood",
    );
    // A VLAN tag cut short.
    assert_verdict(
        &g,
        "cut vlan",
        &eth(&[ETH_VLAN], ETH_IP)[..16],
        Pass,
        "pass_not_understood",
    );
    // IHL says 60 bytes but the frame ends before.
    let mut ihl = good.clone();
    ihl[14] = 0x4f;
    assert_verdict(&g, "ihl past end", &ihl, Pass, "pass_not_understood");
    // IHL below 5, wrong version.
    let mut low = good.clone();
    low[14] = 0x44;
    assert_verdict(&g, "ihl 4", &low, Pass, "pass_not_understood");
    let mut ver = good.clone();
    ver[14] = 0x65;
    assert_verdict(&g, "version 6 in v4", &ver, Pass, "pass_not_understood");
    // A blocked source with a truncated UDP header is still dropped (the address is complete).
    let bad = udp4(v4("192.0.2.10"), DNS);
    assert_verdict(
        &g,
        "cut udp blocked",
        &bad[..14 + 20 + 3],
        Drop,
        "drop_blocked_addr",
    );
    // IPv6: cut fixed header; extension header running past the end.
    let six = udp6(v6("2001:db8::11"), DNS);
    assert_verdict(&g, "cut ipv6", &six[..14 + 39], Pass, "pass_not_understood");
    let p = ipv6(
        v6("2001:db8::11"),
        DST6,
        &[Ext::Opts(HOPOPTS, 3)],
        UDP,
        &udp(1, DNS, b""),
    );
    let f = frame(&[], ETH_IP6, &p);
    assert_verdict(
        &g,
        "ext past end",
        &f[..14 + 40 + 16],
        Pass,
        "pass_not_understood",
    );
    // TCP with a data offset below 5.
    let mut t = tcp(1, 80);
    t[12] = 4 << 4;
    let f = frame(&[], ETH_IP, &ipv4(v4("192.0.2.11"), DST4, TCP, &[], 0, &t));
    assert_verdict(&g, "tcp doff 4", &f, Pass, "pass_not_understood");
}

#[test]
fn expired_blocks_do_not_drop_and_are_swept() {
    if !xdp_ready("expired_blocks_do_not_drop_and_are_swept") {
        return;
    }
    let g = private_guard(&[DNS], 0, 0);
    // Expiry in the past on the kernel's clock (1 ns after boot).
    let past = [
        KernelBlock {
            net: net("192.0.2.10/32"),
            expires_ns: 1,
            dns_only: false,
        },
        KernelBlock {
            net: net("192.0.2.64/26"),
            expires_ns: 1,
            dns_only: false,
        },
    ];
    let r = g.maps().apply(&past, &[], true);
    assert_eq!(r.upserted, 2);
    let (v, d) = run(&g, &udp4(v4("192.0.2.10"), DNS));
    assert_eq!((v, d.pass, d.block_expired), (Verdict::Pass, 1, 1));
    assert!(
        g.maps().get(net("192.0.2.10/32")).unwrap().is_some(),
        "left for the sweep (the program never deletes: writers read-modify-write)"
    );
    let (v, d) = run(&g, &udp4(v4("192.0.2.70"), DNS));
    assert_eq!((v, d.block_expired), (Verdict::Pass, 1));
    // Both are removed by the sweep.
    let swept = g.maps().sweep_expired(xdp_guard::boot_ns(), true).unwrap();
    assert_eq!(swept.deleted, 2);
    assert!(g.maps().list_all().unwrap().is_empty());
    // A block in the future drops; `block` refuses an expiry already past.
    let future = xdp_guard::boot_ns() + 3_600_000_000_000;
    g.maps().apply(
        &[KernelBlock {
            net: net("192.0.2.10/32"),
            expires_ns: future,
            dns_only: false,
        }],
        &[],
        true,
    );
    assert_eq!(run(&g, &udp4(v4("192.0.2.10"), DNS)).0, Verdict::Drop);
    assert!(!g.maps().block(net("192.0.2.99/32"), 1).unwrap());
}

/// Counts passes and drops of `n` frames, and the bound on passes from the refill during
/// the time taken: burst + rate × elapsed (+1 for rounding).
fn burst_run(g: &XdpGuard, frame: &[u8], n: usize, rate: u64, burst: u64) -> (u64, u64, u64) {
    let start = Instant::now();
    let mut pass = 0;
    for _ in 0..n {
        if g.test_run(frame, 1).unwrap().verdict == Verdict::Pass {
            pass += 1;
        }
    }
    let bound = burst + (start.elapsed().as_secs_f64() * rate as f64).ceil() as u64 + 1;
    (pass, n as u64 - pass, bound)
}

#[test]
fn udp_to_dns_ports_is_rate_limited_per_source_with_burst() {
    if !xdp_ready("udp_to_dns_ports_is_rate_limited_per_source_with_burst") {
        return;
    }
    let (rate, burst) = (1, 4);
    let g = private_guard(&[DNS, 5300], rate, burst);
    // Per-CPU buckets: keep every run on one CPU.
    pin_to_current_cpu();
    let u = udp(40000, DNS, b"q");
    let cases: Vec<(&str, Vec<u8>)> = vec![
        ("plain v4", udp4(v4("192.0.2.20"), DNS)),
        (
            "v4 options",
            frame(
                &[],
                ETH_IP,
                &ipv4(v4("192.0.2.21"), DST4, UDP, &[1; 8], 0, &u),
            ),
        ),
        (
            "vlan v4",
            frame(
                &[ETH_VLAN],
                ETH_IP,
                &ipv4(v4("192.0.2.22"), DST4, UDP, &[], 0, &u),
            ),
        ),
        (
            "v4 first fragment",
            frame(
                &[],
                ETH_IP,
                &ipv4(v4("192.0.2.23"), DST4, UDP, &[], 0x2000, &u),
            ),
        ),
        ("plain v6", udp6(v6("2001:db8::20"), 5300)),
        (
            "v6 ext headers",
            frame(
                &[],
                ETH_IP6,
                &ipv6(
                    v6("2001:db8:0:1::21"),
                    DST6,
                    &[Ext::Opts(HOPOPTS, 0), Ext::Opts(DSTOPTS, 1)],
                    UDP,
                    &u,
                ),
            ),
        ),
    ];
    let mut drops = 0;
    for (what, f) in &cases {
        let (pass, drop, bound) = burst_run(&g, f, 40, rate, burst);
        assert!(
            pass >= burst,
            "{what}: the burst of {burst} passes (passed {pass})"
        );
        assert!(
            pass <= bound,
            "{what}: passed {pass} > burst + refill {bound}"
        );
        assert!(
            drop >= 40u64.saturating_sub(bound),
            "{what}: dropped {drop}"
        );
        drops += drop;
    }
    let c = g.counters().unwrap();
    assert_eq!(c.drop_ratelimit, drops, "{c:?}");
    assert_eq!(c.rate_new_source, cases.len() as u64);

    // A limited source does not limit another one.
    assert_eq!(
        g.test_run(&udp4(v4("192.0.2.30"), DNS), 1).unwrap().verdict,
        Verdict::Pass
    );
    // An IPv6 source is its /64: another address of the limited network is limited with it
    // (one host cannot spread over its 2^64 addresses), another network is not.
    assert_eq!(
        burst_run(&g, &udp6(v6("2001:db8::ffff:1"), 5300), 10, rate, burst).0,
        0,
        "another address of 2001:db8::/64"
    );
    assert_eq!(
        g.test_run(&udp6(v6("2001:db8:0:2::20"), 5300), 1)
            .unwrap()
            .verdict,
        Verdict::Pass
    );
    // Ports not configured, TCP, and later fragments are not rate-limited.
    let limited = v4("192.0.2.20");
    assert_eq!(
        burst_run(&g, &udp4(limited, 54), 20, rate, burst).1,
        0,
        "port 54"
    );
    let t = frame(&[], ETH_IP, &ipv4(limited, DST4, TCP, &[], 0, &tcp(1, DNS)));
    assert_eq!(burst_run(&g, &t, 20, rate, burst).1, 0, "tcp/53");
    let frag = frame(&[], ETH_IP, &ipv4(limited, DST4, UDP, &[], 100, b"tail"));
    assert_eq!(burst_run(&g, &frag, 20, rate, burst).1, 0, "later fragment");
    // Forgetting the buckets gives the source its burst back.
    g.maps().clear_rate_buckets().unwrap();
    assert_eq!(
        g.test_run(&udp4(limited, DNS), 1).unwrap().verdict,
        Verdict::Pass
    );
}

#[test]
fn rate_limit_off_when_rate_is_zero() {
    if !xdp_ready("rate_limit_off_when_rate_is_zero") {
        return;
    }
    let g = private_guard(&[DNS], 0, 0);
    let f = udp4(v4("192.0.2.20"), DNS);
    let r = g.test_run(&f, 1000).unwrap();
    assert_eq!(r.verdict, Verdict::Pass);
    let c = g.counters().unwrap();
    assert_eq!((c.pass, c.drop_ratelimit, c.rate_new_source), (1000, 0, 0));
    assert!(!g.maps().config().unwrap().is_dns_port(54));
}

/// The rules file's `[global] allow` list (the allow tries): exempt from the rate limit,
/// never from a block; drops are counted by the writer slot that holds the block.
#[test]
fn allowed_sources_skip_the_rate_limit_but_not_a_block_and_drops_count_by_writer() {
    if !xdp_ready("allowed_sources_skip_the_rate_limit_but_not_a_block_and_drops_count_by_writer") {
        return;
    }
    let g = private_guard(&[DNS], 1, 1);
    pin_to_current_cpu();
    g.maps()
        .set_allow(&[net("192.0.2.0/25"), net("2001:db8:a::/48")])
        .unwrap();
    let mut listed = g.maps().allow_list().unwrap();
    listed.sort();
    assert_eq!(listed, vec![net("192.0.2.0/25"), net("2001:db8:a::/48")]);
    // An allowed source is never rate-limited, another one is after its burst of one.
    let ok = udp4(v4("192.0.2.7"), DNS);
    for _ in 0..5 {
        let (v, d) = run(&g, &ok);
        assert_eq!((v, d.rate_exempt), (Verdict::Pass, 1));
    }
    let other = udp4(v4("192.0.2.200"), DNS);
    assert_eq!(run(&g, &other).0, Verdict::Pass);
    assert_eq!(run(&g, &other).0, Verdict::Drop);
    let ok6 = udp6(v6("2001:db8:a::9"), DNS);
    for _ in 0..3 {
        assert_eq!(run(&g, &ok6).0, Verdict::Pass);
    }
    // Blocked in the rules slot: dropped all the same, counted for that writer.
    let rules = g.maps().clone().with_slot(xdp_guard::SLOT_RULES);
    assert!(rules.block(net("192.0.2.7/32"), u64::MAX).unwrap());
    let (v, d) = run(&g, &ok);
    assert_eq!((v, d.drop_blocked_addr), (Verdict::Drop, 1));
    assert_eq!(d.drop_by_slot, [0, 0, 1, 0]);
    // The list replaced: what is gone is rate-limited again.
    g.maps().set_allow(&[net("2001:db8:a::/48")]).unwrap();
    assert_eq!(g.maps().allow_list().unwrap(), vec![net("2001:db8:a::/48")]);
    let again = udp4(v4("192.0.2.8"), DNS);
    assert_eq!(run(&g, &again).0, Verdict::Pass);
    assert_eq!(run(&g, &again).0, Verdict::Drop);
}

/// A DNS query for the root name, type A, without EDNS.
fn root_query(id: u16) -> Vec<u8> {
    let mut q = id.to_be_bytes().to_vec();
    q.extend_from_slice(&[0, 0, 0, 1, 0, 0, 0, 0, 0, 0]);
    q.extend_from_slice(&[0, 0, 1, 0, 1]);
    q
}

/// A root/A query from `src` to DST4:53 with EDNS and a COOKIE option: `client`'s cookie and,
/// when given, a 16-byte server cookie.
fn cookie_query(src: Ipv4Addr, id: u16, client: &[u8; 8], server: Option<[u8; 16]>) -> Vec<u8> {
    let mut q = root_query(id);
    q[11] = 1;
    let rdlen: u16 = if server.is_some() { 28 } else { 12 };
    q.extend_from_slice(&[0, 0, 41, 0x10, 0, 0, 0, 0, 0]);
    q.extend_from_slice(&rdlen.to_be_bytes());
    q.extend_from_slice(&[0, 10, 0, (rdlen - 4) as u8]);
    q.extend_from_slice(client);
    if let Some(s) = server {
        q.extend_from_slice(&s);
    }
    frame(
        &[],
        ETH_IP,
        &ipv4(src, DST4, UDP, &[], 0, &udp(40000, 53, &q)),
    )
}

/// A www.example.com/A query from `src` to DST4:53 with an OPT record holding the options
/// `before`, a COOKIE option (`client`'s cookie, and `server`'s when given), then `after`.
fn options_query(
    src: Ipv4Addr,
    id: u16,
    client: &[u8; 8],
    server: Option<[u8; 16]>,
    before: &[(u16, Vec<u8>)],
    after: &[(u16, Vec<u8>)],
) -> Vec<u8> {
    let mut q = id.to_be_bytes().to_vec();
    q.extend_from_slice(&[0, 0, 0, 1, 0, 0, 0, 0, 0, 1]);
    for l in ["www", "example", "com"] {
        q.push(l.len() as u8);
        q.extend_from_slice(l.as_bytes());
    }
    q.extend_from_slice(&[0, 0, 1, 0, 1]);
    let mut cookie = client.to_vec();
    if let Some(s) = server {
        cookie.extend_from_slice(&s);
    }
    let mut rdata = Vec::new();
    for (code, data) in before
        .iter()
        .chain(std::iter::once(&(10u16, cookie)))
        .chain(after)
    {
        rdata.extend_from_slice(&code.to_be_bytes());
        rdata.extend_from_slice(&(data.len() as u16).to_be_bytes());
        rdata.extend_from_slice(data);
    }
    q.extend_from_slice(&[0, 0, 41, 0x10, 0, 0, 0, 0, 0]);
    q.extend_from_slice(&(rdata.len() as u16).to_be_bytes());
    q.extend_from_slice(&rdata);
    frame(
        &[],
        ETH_IP,
        &ipv4(src, DST4, UDP, &[], 0, &udp(40000, 53, &q)),
    )
}

/// The fast path's answer to the root's A at DST4:53 (no EDNS): its key and value.
fn root_a_answer() -> (xdp_guard::maps::AnsKey, xdp_guard::maps::Answer) {
    use xdp_guard::maps::{ANSWER_MAX, AnsKey, Answer, QNAME_MAX, V_NO_EDNS};
    let mut data = [0u8; ANSWER_MAX];
    data[..4].copy_from_slice(&[0xc0, 0x0c, 0, 1]);
    let key = AnsKey {
        addr: xdp_guard::mapped(DST4.into()),
        port: 53,
        ..AnsKey::for_name(V_NO_EDNS, 1, &[0])
    };
    let ans = Answer {
        flags: 0x8400,
        an: 1,
        ns: 0,
        ar: 0,
        len: 4,
        csum: 0xc00d,
        cookie: 0,
        reserved: 0,
        rrl_key: 1,
        qname: [0; QNAME_MAX],
        data,
    };
    (key, ans)
}

#[test]
fn registered_answers_are_sent_back_and_the_rest_passes() {
    use xdp_guard::maps::{AnsKey, V_NO_EDNS};
    let g = private_guard(&[53], 0, 1);
    let m = g.maps();
    let dst = DST4;
    let addr = xdp_guard::addr_key(dst.into(), 53);
    let (key, ans) = root_a_answer();
    let src = v4("198.51.100.7");
    let query = |payload: &[u8], pad: usize| {
        let mut f = frame(
            &[],
            ETH_IP,
            &ipv4(src, dst, UDP, &[], 0, &udp(40000, 53, payload)),
        );
        f.resize(f.len() + pad, 0); // Ethernet padding after the IP packet
        f
    };
    // Nothing registered for the address yet: passed.
    let (v, d) = run(&g, &query(&root_query(1), 1));
    assert_eq!((v, d.ans_pass[0]), (Verdict::Pass, 1));
    let r = m
        .publish_answers(&[addr], &mut [(key, ans)], 1232, SENDER, None)
        .unwrap();
    assert_eq!((r.written, r.full), (1, 0));
    // Answers are leased: renewed by the writer, they lapse if it dies.
    let lease = m.answer_addr(&addr).unwrap().unwrap().expires_ns;
    assert!(lease > xdp_guard::mono_ns() + 20_000_000_000);
    std::thread::sleep(std::time::Duration::from_millis(5));
    m.renew_answers(&[addr], None).unwrap();
    assert!(m.answer_addr(&addr).unwrap().unwrap().expires_ns > lease);
    // Where the kernel's routes decide where a reply goes (the default), a source no route
    // leads back to by the interface the query came in on passes to dnsd: here, under
    // BPF_PROG_TEST_RUN, the loopback device.
    m.publish_answers(&[addr], &mut [(key, ans)], 1232, Default::default(), None)
        .unwrap();
    let (v, d) = run(&g, &query(&root_query(2), 1));
    assert_eq!(
        (v, d.answered, d.ans_pass_route),
        (Verdict::Pass, 0, 1),
        "{d:?}"
    );
    m.publish_answers(&[addr], &mut [(key, ans)], 1232, SENDER, None)
        .unwrap();
    // A 59-byte query padded to 60 bytes is answered, not mistaken for trailing data.
    let (v, d) = run(&g, &query(&root_query(2), 1));
    assert_eq!((v, d.answered), (Verdict::Other(3), 1), "{d:?}");
    // A block of the source passed because a daemon never blocks it (dnsd's forced block of
    // its transfer peer): its queries go to dnsd, which holds the block — never answered
    // here (the names XDP held were answered, dnsd refused the others).
    let dnsd = g.maps().clone().with_slot(xdp_guard::SLOT_DNSD);
    dnsd.set_never(&[net("198.51.100.7/32")]).unwrap();
    assert!(dnsd.block(net("198.51.100.7/32"), u64::MAX).unwrap());
    let (v, d) = run(&g, &query(&root_query(2), 1));
    assert_eq!(
        (v, d.answered, d.never_block),
        (Verdict::Pass, 0, 1),
        "{d:?}"
    );
    assert!(dnsd.unblock(net("198.51.100.7/32")).unwrap());
    dnsd.set_never(&[]).unwrap();
    let (v, d) = run(&g, &query(&root_query(2), 1));
    assert_eq!((v, d.answered), (Verdict::Other(3), 1), "{d:?}");
    // From port 0 or a service that answers any datagram (chargen...): passed to dnsd,
    // which drops it, never answered.
    for port in [0u16, 7, 19, 37] {
        let f = frame(
            &[],
            ETH_IP,
            &ipv4(src, dst, UDP, &[], 0, &udp(port, 53, &root_query(2))),
        );
        let (v, d) = run(&g, &f);
        let passed = d.ans_pass[1] + d.ans_pass_untried[0];
        assert_eq!(
            (v, d.answered, passed),
            (Verdict::Pass, 0, 1),
            "{port} {d:?}"
        );
    }
    // Real trailing bytes inside the UDP payload: passed to dnsd.
    let mut long = root_query(3);
    long.push(0);
    let (v, d) = run(&g, &query(&long, 0));
    assert_eq!((v, d.ans_pass[1]), (Verdict::Pass, 1));
    // Malformed or unusual questions are passed to dnsd, never answered: a compression
    // pointer in the name, a question cut short, a label running past the end, class CH.
    let mut compressed = root_query(6);
    compressed[12] = 0xc0;
    compressed.insert(13, 0x0c);
    let cut = root_query(7)[..14].to_vec();
    let mut past = root_query(8);
    past[12] = 40;
    let mut chaos = root_query(9);
    chaos[16] = 3;
    for bad in [compressed, cut, past, chaos] {
        let (v, d) = run(&g, &query(&bad, 4));
        assert_eq!((v, d.ans_pass[1]), (Verdict::Pass, 1), "{bad:02x?}");
    }
    // With IPv4 options: left to dnsd (the kernel's own path handles them).
    let with_options = ipv4(
        src,
        dst,
        UDP,
        &[1, 1, 1, 0],
        0,
        &udp(40000, 53, &root_query(7)),
    );
    let (v, d) = run(&g, &frame(&[], ETH_IP, &with_options));
    assert_eq!(
        (v, d.ans_pass_untried),
        (Verdict::Pass, [1, 0]),
        "counted as a frame not answered from"
    );
    // So is a tagged frame (the kernel takes it only for a VLAN it has), while the same
    // frame to a port nothing is answered on is no query of the fast path's to count.
    let plain = ipv4(src, dst, UDP, &[], 0, &udp(40000, 53, &root_query(7)));
    let (v, d) = run(&g, &frame(&[ETH_VLAN], ETH_IP, &plain));
    assert_eq!((v, d.ans_pass_untried), (Verdict::Pass, [1, 0]));
    let elsewhere = ipv4(src, dst, UDP, &[], 0, &udp(40000, 54, &root_query(7)));
    let (v, d) = run(&g, &frame(&[ETH_VLAN], ETH_IP, &elsewhere));
    assert_eq!((v, d.ans_pass_untried), (Verdict::Pass, [0, 0]));
    // A query whose name has the key's hash but is another name is never answered with it:
    // the program compares the name (an entry written with a name that does not match its
    // hash, as a hash collision would leave it).
    let live = m.answer_addr(&addr).unwrap().unwrap().gen_;
    let other_name = {
        let mut a = ans;
        a.qname[..3].copy_from_slice(b"\x01b\x00");
        a
    };
    let forged_key = AnsKey {
        gen_: live,
        ..AnsKey {
            addr: key.addr,
            port: key.port,
            ..AnsKey::for_name(V_NO_EDNS, 1, b"\x01a\x00")
        }
    };
    m.insert_answer_unchecked(&forged_key, &other_name).unwrap();
    let mut a_query = 0x4242u16.to_be_bytes().to_vec();
    a_query.extend_from_slice(&[0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 1, b'a', 0, 0, 1, 0, 1]);
    let (v, d) = run(&g, &query(&a_query, 0));
    assert_eq!(
        (v, d.ans_pass[2]),
        (Verdict::Pass, 1),
        "another name: passed as a miss"
    );
    // Another type: no answer compiled.
    let mut aaaa = root_query(4);
    aaaa[14] = 28;
    let (v, d) = run(&g, &query(&aaaa, 0));
    assert_eq!((v, d.ans_pass[2]), (Verdict::Pass, 1));
    // RRL in XDP: `rate` answers per second per source prefix, then one in `slip` TC=1 and
    // the others dropped.
    let rate = xdp_guard::AnswerRate {
        per_second: 3,
        v4_prefix: 24,
        v6_prefix: 56,
        slip: 2,
        reply_to_sender: true,
    };
    m.publish_answers(&[addr], &mut [(key, ans)], 1232, rate, None)
        .unwrap();
    let mut tally = [0u64; 3]; // answered, slipped, dropped
    for i in 0..10 {
        let (v, d) = run(&g, &query(&root_query(10 + i), 1));
        match v {
            Verdict::Other(3) if d.ans_rrl[1] == 1 => tally[1] += 1,
            Verdict::Other(3) => tally[0] += 1,
            Verdict::Drop => {
                assert_eq!((d.ans_rrl[0], d.drop_ratelimit), (1, 1));
                tally[2] += 1
            }
            other => panic!("{other:?} {d:?}"),
        }
    }
    assert!((3..=4).contains(&tally[0]), "{tally:?}");
    assert_eq!(tally[1] + tally[2], 10 - tally[0]);
    assert!(
        tally[1] >= 2 && tally[2] >= 2,
        "one in two slipped: {tally:?}"
    );
    // One bucket per account, as dnsd's RRL keys replies (dnsd writes each answer's): the
    // source over its rate for ". A" still gets its first ". AAAA" answers (another account),
    // while ". MX" of the same account as ". A" (a referral's zone, a NODATA's name) does not.
    let aaaa_key = AnsKey {
        addr: key.addr,
        port: key.port,
        ..AnsKey::for_name(V_NO_EDNS, 28, &[0])
    };
    let mut aaaa_ans = ans;
    aaaa_ans.data[..4].copy_from_slice(&[0xc0, 0x0c, 0, 28]);
    aaaa_ans.csum = 0xc028;
    aaaa_ans.rrl_key = 2;
    let mx_key = AnsKey {
        addr: key.addr,
        port: key.port,
        ..AnsKey::for_name(V_NO_EDNS, 15, &[0])
    };
    m.publish_answers(
        &[addr],
        &mut [(key, ans), (aaaa_key, aaaa_ans), (mx_key, ans)],
        1232,
        rate,
        None,
    )
    .unwrap();
    let aaaa = |id: u16| {
        let mut q = root_query(id);
        q[14] = 28;
        q
    };
    let (v, d) = run(&g, &query(&root_query(20), 1));
    assert_ne!(v, Verdict::Pass, "{d:?}");
    assert_eq!(
        d.ans_rrl[0] + d.ans_rrl[1],
        1,
        "\". A\" still over the rate: {d:?}"
    );
    let mut mx = root_query(25);
    mx[14] = 15;
    let (_, d) = run(&g, &query(&mx, 1));
    assert_eq!(
        d.ans_rrl[0] + d.ans_rrl[1],
        1,
        "\". MX\", of \". A\"'s account, over the rate too: {d:?}"
    );
    for i in 0..3 {
        let (v, d) = run(&g, &query(&aaaa(21 + i), 1));
        assert_eq!(
            (v, d.answered, d.ans_rrl),
            (Verdict::Other(3), 1, [0, 0]),
            "\". AAAA\" {i}: {d:?}"
        );
    }
    // Queries XDP passes to dnsd (names or types it holds no answer for: dnsd's RRL limits
    // those) are charged to no bucket: a source whose forged flood of other names passed
    // still gets its answers.
    let other = |payload: &[u8]| {
        frame(
            &[],
            ETH_IP,
            &ipv4(
                v4("203.0.113.9"),
                dst,
                UDP,
                &[],
                0,
                &udp(40001, 53, payload),
            ),
        )
    };
    for i in 0..20 {
        let mut txt = root_query(30 + i);
        txt[14] = 16;
        assert_eq!(run(&g, &other(&txt)).0, Verdict::Pass);
    }
    for i in 0..3 {
        let (v, d) = run(&g, &other(&root_query(60 + i)));
        assert_eq!(
            (v, d.answered, d.ans_rrl),
            (Verdict::Other(3), 1, [0, 0]),
            "{i}: {d:?}"
        );
    }
    // Suspended (a reload under way): passed; withdrawn: passed, entries gone.
    m.suspend_answers(&[addr]).unwrap();
    let (v, d) = run(&g, &query(&root_query(5), 1));
    assert_eq!((v, d.ans_pass[0]), (Verdict::Pass, 1));
    assert_eq!(m.answer_count().unwrap(), 3);
    m.withdraw_answers(&[addr]).unwrap();
    assert_eq!(m.answer_count().unwrap(), 0);
}

/// The 16-bit one's complement sum of `b` (big-endian words from its first byte).
fn ones(b: &[u8]) -> u32 {
    b.chunks(2)
        .map(|c| u32::from(c[0]) << 8 | u32::from(*c.get(1).unwrap_or(&0)))
        .sum()
}

fn fold(mut s: u32) -> u16 {
    while s > 0xffff {
        s = (s & 0xffff) + (s >> 16);
    }
    s as u16
}

/// The DNS message of an IPv4 reply frame, after checking its IPv4 and UDP checksums.
fn checked_dns(f: &[u8]) -> &[u8] {
    let ip = &f[14..34];
    assert_eq!(fold(ones(ip)), 0xffff, "IPv4 header checksum");
    let udp_len = u16::from_be_bytes([f[38], f[39]]) as usize;
    let seg = &f[34..34 + udp_len];
    let pseudo = ones(&ip[12..20]) + 17 + udp_len as u32;
    assert_eq!(fold(pseudo + ones(seg)), 0xffff, "UDP checksum");
    &seg[8..]
}

/// RFC 9018's server cookie for `client` at `ip` made at `ts` under `secret`.
fn server_cookie(secret: &[u8; 16], client: &[u8; 8], ip: Ipv4Addr, ts: u32) -> [u8; 16] {
    use std::hash::Hasher;
    let mut head = [1u8, 0, 0, 0, 0, 0, 0, 0];
    head[4..].copy_from_slice(&ts.to_be_bytes());
    let mut h = siphasher::sip::SipHasher24::new_with_key(secret);
    h.write(client);
    h.write(&head);
    h.write(&ip.octets());
    let mut out = [0u8; 16];
    out[..8].copy_from_slice(&head);
    out[8..].copy_from_slice(&h.finish().to_le_bytes());
    out
}

fn unix_s() -> u32 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs() as u32
}

#[test]
fn cookies_are_verified_minted_and_exempt_from_rrl_in_xdp() {
    use xdp_guard::maps::{ANSWER_MAX, AnsKey, Answer, COOKIE_ANSWER, QNAME_MAX, V_EDNS};
    if !xdp_ready("cookies_are_verified_minted_and_exempt_from_rrl_in_xdp") {
        return;
    }
    let g = private_guard(&[53], 0, 1);
    let m = g.maps();
    let dst = DST4;
    let src = v4("198.51.100.7");
    let addr = xdp_guard::addr_key(dst.into(), 53);
    // The answer: one A record for the root, then our OPT (payload 1232, no options).
    let tail: Vec<u8> = [
        &[0xc0, 0x0c, 0, 1, 0, 1, 0, 0, 0, 60, 0, 4, 192, 0, 2, 1][..],
        &[0, 0, 41, 0x04, 0xd0, 0, 0, 0, 0, 0, 0],
    ]
    .concat();
    let mut data = [0u8; ANSWER_MAX];
    data[..tail.len()].copy_from_slice(&tail);
    let key = AnsKey {
        addr: xdp_guard::mapped(dst.into()),
        port: 53,
        ..AnsKey::for_name(V_EDNS, 1, &[0])
    };
    let mut ans = Answer {
        flags: 0x8400,
        an: 1,
        ns: 0,
        ar: 1,
        len: tail.len() as u16,
        csum: fold(ones(&tail)),
        cookie: COOKIE_ANSWER,
        reserved: 0,
        rrl_key: 1,
        qname: [0; QNAME_MAX],
        data,
    };
    let (secret, previous) = ([7u8; 16], [9u8; 16]);
    let keys = xdp_guard::CookieKeys {
        current: secret,
        previous: Some(previous),
    };
    // One answer a second per source, every reply over it slipped.
    let rate = xdp_guard::AnswerRate {
        per_second: 1,
        v4_prefix: 32,
        v6_prefix: 128,
        slip: 1,
        reply_to_sender: true,
    };
    m.publish_answers(&[addr], &mut [(key, ans)], 1232, rate, Some(&keys))
        .unwrap();
    let client = *b"clientck";
    // A root/A query with EDNS and a COOKIE option (`server`: none, or 16 bytes).
    let query = |id: u16, server: Option<[u8; 16]>| cookie_query(src, id, &client, server);
    let answer = |f: &[u8]| {
        let (v, out) = g.test_run_frame(f).unwrap();
        assert_eq!(v, Verdict::Other(3), "answered with XDP_TX");
        checked_dns(&out).to_vec()
    };
    // Our answer with its OPT's rdlen 28 and a COOKIE option: the client's cookie and a
    // fresh server cookie for this client made now with the current secret.
    let expect_cookie = |dns: &[u8], id: u16| {
        assert_eq!(&dns[..2], &id.to_be_bytes());
        let n = 12 + 5 + tail.len();
        assert_eq!(dns.len(), n + 28, "{dns:02x?}");
        assert_eq!(&dns[17..n - 2], &tail[..tail.len() - 2]);
        assert_eq!(&dns[n - 2..n + 4], &[0, 28, 0, 10, 0, 24]);
        assert_eq!(&dns[n + 4..n + 12], &client);
        let ts = u32::from_be_bytes(dns[n + 16..n + 20].try_into().unwrap());
        assert!(ts.abs_diff(unix_s()) <= 1, "timestamp {ts}");
        assert_eq!(
            dns[n + 12..n + 28],
            server_cookie(&secret, &client, src, ts),
            "RFC 9018 server cookie"
        );
    };
    // A client cookie alone: answered with a server cookie (within the rate).
    let before = g.counters().unwrap();
    expect_cookie(&answer(&query(1, None)), 1);
    // Valid server cookies (current and previous secret) skip the rate: every one answered.
    let now = unix_s();
    for i in 0..6 {
        let s = if i % 2 == 0 { &secret } else { &previous };
        expect_cookie(
            &answer(&query(2 + i, Some(server_cookie(s, &client, src, now)))),
            2 + i,
        );
    }
    let after = g.counters().unwrap();
    assert_eq!(after.ans_cookie[0] - before.ans_cookie[0], 6, "valid");
    assert_eq!(after.ans_rrl[0] + after.ans_rrl[1], 0, "none limited");
    // Invalid ones — another secret, stale, a flipped bit, another client's — are answered
    // (with a fresh cookie) within the rate like cookie-less queries: here slipped, and a
    // client that sent a cookie is slipped with BADCOOKIE and a fresh cookie (dnsd's slip).
    let mut flipped = server_cookie(&secret, &client, src, now);
    flipped[15] ^= 1;
    for (i, bad) in [
        server_cookie(&[1; 16], &client, src, now),
        server_cookie(&secret, &client, src, now - 3700),
        flipped,
        server_cookie(&secret, b"another!", src, now),
    ]
    .into_iter()
    .enumerate()
    {
        let id = 20 + i as u16;
        let dns = answer(&query(id, Some(bad)));
        let flags = u16::from_be_bytes([dns[2], dns[3]]);
        assert_eq!(
            flags & 0x820f,
            0x8007,
            "QR, BADCOOKIE's low bits: {flags:04x}"
        );
        assert_eq!(&dns[6..12], &[0, 0, 0, 0, 0, 1]);
        // The question, then OPT: extended rcode 1 (23 >> 4), rdlen 28, our cookie.
        assert_eq!(&dns[17..28], &[0, 0, 41, 0x04, 0xd0, 1, 0, 0, 0, 0, 28]);
        assert_eq!(&dns[28..32], &[0, 10, 0, 24]);
        assert_eq!(&dns[32..40], &client);
        let ts = u32::from_be_bytes(dns[44..48].try_into().unwrap());
        assert_eq!(dns[40..56], server_cookie(&secret, &client, src, ts));
    }
    let last = g.counters().unwrap();
    assert_eq!(last.ans_cookie[1] - after.ans_cookie[1], 4, "invalid");
    // Without the secrets, or for an answer that cannot carry a cookie, cookie queries pass
    // to dnsd.
    m.publish_answers(&[addr], &mut [(key, ans)], 1232, rate, None)
        .unwrap();
    let (v, d) = run(&g, &query(30, None));
    assert_eq!((v, d.ans_cookie[2]), (Verdict::Pass, 1));
    ans.cookie = xdp_guard::maps::COOKIE_PASS;
    m.publish_answers(&[addr], &mut [(key, ans)], 1232, rate, Some(&keys))
        .unwrap();
    let (v, d) = run(&g, &query(31, None));
    assert_eq!((v, d.ans_cookie[2]), (Verdict::Pass, 1));
    // Cookies off for the zone: the same answer, the cookie ignored (as dnsd does).
    ans.cookie = xdp_guard::maps::COOKIE_IGNORE;
    m.publish_answers(&[addr], &mut [(key, ans)], 1232, SENDER, None)
        .unwrap();
    let dns = answer(&query(32, Some(server_cookie(&secret, &client, src, now))));
    assert_eq!(&dns[17..], &tail[..]);
    // Malformed or other options pass to dnsd unanswered (it answers FORMERR or knows
    // better): a cookie option longer than its OPT, a 7-byte client cookie, a server cookie
    // of 8 bytes (valid in RFC 7873, not one of ours), another option code, trailing bytes.
    let with_opt = |id: u16, rdata: &[u8], trailing: &[u8]| {
        let mut q = root_query(id);
        q[11] = 1;
        q.extend_from_slice(&[0, 0, 41, 0x10, 0, 0, 0, 0, 0]);
        q.extend_from_slice(&(rdata.len() as u16).to_be_bytes());
        q.extend_from_slice(rdata);
        q.extend_from_slice(trailing);
        frame(
            &[],
            ETH_IP,
            &ipv4(src, dst, UDP, &[], 0, &udp(40000, 53, &q)),
        )
    };
    let cookie = |len: u8, body: &[u8]| [&[0u8, 10, 0, len][..], body].concat();
    for (i, (rdata, trailing)) in [
        (cookie(24, &client), vec![]),
        (cookie(7, &client[..7]), vec![]),
        (cookie(16, &[client, client].concat()), vec![]),
        ([&[0u8, 11, 0, 8][..], &client].concat(), vec![]),
        (cookie(8, &client), vec![0]),
    ]
    .into_iter()
    .enumerate()
    {
        let (v, d) = run(&g, &with_opt(40 + i as u16, &rdata, &trailing));
        assert_eq!(
            (v, d.ans_pass[1]),
            (Verdict::Pass, 1),
            "case {i}: {rdata:02x?}"
        );
    }
}

#[test]
fn dns_only_blocks_drop_udp_to_the_dns_service_and_nothing_else() {
    if !xdp_ready("dns_only_blocks_drop_udp_to_the_dns_service_and_nothing_else") {
        return;
    }
    let g = private_guard(&[DNS], 0, 0);
    // dnsd serves DST4 and DST6 on port 5300; 192.0.2.99 is another address of the node.
    g.maps()
        .set_services(&[net("192.0.2.2/32"), net("2001:db8::2/128")], 5300, 2)
        .unwrap();
    let dnsd = g.maps().clone().with_slot(xdp_guard::SLOT_DNSD);
    let far = xdp_guard::boot_ns() + 3_600_000_000_000;
    let dns_only = |s: &str| KernelBlock {
        net: net(s),
        expires_ns: far,
        dns_only: true,
    };
    let r = dnsd.apply(
        &[
            dns_only("198.51.100.7/32"),
            dns_only("203.0.113.0/24"),
            dns_only("2001:db8:7::7/128"),
        ],
        &[],
        true,
    );
    assert_eq!(r.upserted, 3);
    use Verdict::*;
    let src = v4("198.51.100.7");
    assert_verdict(
        &g,
        "UDP to the DNS service",
        &frame(
            &[],
            ETH_IP,
            &ipv4(src, DST4, UDP, &[], 0, &udp(1, 5300, b"q")),
        ),
        Drop,
        "drop_blocked_addr",
    );
    assert_verdict(
        &g,
        "UDP to the DNS service from a DNS-only prefix",
        &frame(
            &[],
            ETH_IP,
            &ipv4(v4("203.0.113.9"), DST4, UDP, &[], 0, &udp(1, 5300, b"q")),
        ),
        Drop,
        "drop_blocked_prefix",
    );
    assert_verdict(
        &g,
        "TCP to the DNS port",
        &frame(&[], ETH_IP, &ipv4(src, DST4, TCP, &[], 0, &tcp(1, 5300))),
        Pass,
        "pass",
    );
    assert_verdict(
        &g,
        "TCP to another port (SSH)",
        &frame(&[], ETH_IP, &ipv4(src, DST4, TCP, &[], 0, &tcp(1, 22))),
        Pass,
        "pass",
    );
    assert_verdict(
        &g,
        "UDP to another port",
        &frame(
            &[],
            ETH_IP,
            &ipv4(src, DST4, UDP, &[], 0, &udp(1, 123, b"q")),
        ),
        Pass,
        "pass",
    );
    assert_verdict(
        &g,
        "UDP to port 5300 of another local address",
        &frame(
            &[],
            ETH_IP,
            &ipv4(src, v4("192.0.2.99"), UDP, &[], 0, &udp(1, 5300, b"q")),
        ),
        Pass,
        "pass",
    );
    assert_verdict(
        &g,
        "ICMP",
        &frame(&[], ETH_IP, &ipv4(src, DST4, ICMP, &[], 0, &[8, 0, 0, 0])),
        Pass,
        "pass",
    );
    assert_verdict(
        &g,
        "IPv6 UDP to the DNS service",
        &frame(
            &[],
            ETH_IP6,
            &ipv6(v6("2001:db8:7::7"), DST6, &[], UDP, &udp(1, 5300, b"q")),
        ),
        Drop,
        "drop_blocked_addr",
    );
    assert_verdict(
        &g,
        "IPv6 TCP",
        &frame(
            &[],
            ETH_IP6,
            &ipv6(v6("2001:db8:7::7"), DST6, &[], TCP, &tcp(1, 5300)),
        ),
        Pass,
        "pass",
    );
    // Another writer's block of every packet on the same address stops all of it.
    g.maps().clone().with_slot(xdp_guard::SLOT_OPERATOR).apply(
        &[KernelBlock::all(net("198.51.100.7/32"), far)],
        &[],
        true,
    );
    assert_verdict(
        &g,
        "TCP once an operator blocks all",
        &frame(&[], ETH_IP, &ipv4(src, DST4, TCP, &[], 0, &tcp(1, 22))),
        Drop,
        "drop_blocked_addr",
    );
    let e = g.maps().get(net("198.51.100.7/32")).unwrap().unwrap();
    assert!(e.value.is_dns_only(xdp_guard::SLOT_DNSD));
    assert!(!e.value.is_dns_only(xdp_guard::SLOT_OPERATOR));
    assert!(!e.combined().dns_only);
    assert!(
        g.maps()
            .is_blocked("198.51.100.7".parse().unwrap())
            .unwrap()
    );
    assert!(!g.maps().is_blocked("203.0.113.9".parse().unwrap()).unwrap());
    assert!(
        g.maps()
            .is_blocked_for_dns("203.0.113.9".parse().unwrap())
            .unwrap()
    );
}

#[test]
fn a_nested_prefix_that_does_not_stop_a_packet_never_hides_the_one_around_it() {
    if !xdp_ready("a_nested_prefix_that_does_not_stop_a_packet_never_hides_the_one_around_it") {
        return;
    }
    let g = private_guard(&[DNS], 0, 0);
    g.maps()
        .set_services(&[net("192.0.2.2/32")], 5300, 2)
        .unwrap();
    let far = xdp_guard::boot_ns() + 3_600_000_000_000;
    // The operator blocks a /16 (every packet); dnsd holds DNS-only /24 and /20 inside it and
    // another writer a /28 that has already ended (not yet swept).
    g.maps().clone().with_slot(xdp_guard::SLOT_OPERATOR).apply(
        &[
            KernelBlock::all(net("10.20.0.0/16"), far),
            KernelBlock::all(net("2001:db8:20::/48"), far),
        ],
        &[],
        true,
    );
    let dns_only = |s: &str| KernelBlock {
        net: net(s),
        expires_ns: far,
        dns_only: true,
    };
    g.maps().clone().with_slot(xdp_guard::SLOT_DNSD).apply(
        &[
            dns_only("10.20.0.0/20"),
            dns_only("10.20.3.0/24"),
            dns_only("2001:db8:20:1::/64"),
        ],
        &[],
        true,
    );
    let rules = g.maps().clone().with_slot(xdp_guard::SLOT_RULES);
    rules.apply(
        &[KernelBlock::all(
            net("10.20.3.16/28"),
            xdp_guard::boot_ns() + 1,
        )],
        &[],
        true,
    );
    std::thread::sleep(std::time::Duration::from_millis(1));
    use Verdict::*;
    for (what, src) in [
        ("inside an ended /28, a DNS-only /24 and /20", "10.20.3.17"),
        ("inside a DNS-only /24 and /20", "10.20.3.200"),
        ("inside a DNS-only /20", "10.20.9.1"),
        ("inside the /16 alone", "10.20.200.1"),
    ] {
        assert_verdict(
            &g,
            &format!("TCP to SSH from {what}"),
            &frame(&[], ETH_IP, &ipv4(v4(src), DST4, TCP, &[], 0, &tcp(1, 22))),
            Drop,
            "drop_blocked_prefix",
        );
    }
    assert_verdict(
        &g,
        "IPv6 TCP from inside a DNS-only /64 in a /48 of every packet",
        &frame(
            &[],
            ETH_IP6,
            &ipv6(v6("2001:db8:20:1::9"), DST6, &[], TCP, &tcp(1, 22)),
        ),
        Drop,
        "drop_blocked_prefix",
    );
    // Outside the /16 the DNS-only scope alone holds: nothing but UDP to the service dropped.
    dnsd_only_outside(&g, far);
}

/// A DNS-only /24 with nothing around it lets TCP through.
fn dnsd_only_outside(g: &XdpGuard, far: u64) {
    g.maps().clone().with_slot(xdp_guard::SLOT_DNSD).apply(
        &[KernelBlock {
            net: net("10.30.1.0/24"),
            expires_ns: far,
            dns_only: true,
        }],
        &[],
        true,
    );
    assert_verdict(
        g,
        "TCP from a DNS-only /24 alone",
        &frame(
            &[],
            ETH_IP,
            &ipv4(v4("10.30.1.5"), DST4, TCP, &[], 0, &tcp(1, 22)),
        ),
        Verdict::Pass,
        "pass",
    );
}

/// A UDP frame from `proxy` to the DNS port whose payload is a PROXY v2 header naming
/// `client` (over IPv4 or IPv6) and a query after it.
fn proxied4(proxy: Ipv4Addr, client: std::net::SocketAddr) -> Vec<u8> {
    let dst = std::net::SocketAddr::new(DST4.into(), DNS);
    let mut payload = shield::proxy_proto::v2_header(client, dst);
    payload[13] = (payload[13] & 0xf0) | 0x02; // DGRAM
    payload.extend_from_slice(b"\x12\x34query");
    frame(
        &[],
        ETH_IP,
        &ipv4(proxy, DST4, UDP, &[], 0, &udp(40000, DNS, &payload)),
    )
}

#[test]
fn a_proxys_datagrams_are_judged_by_the_client_its_header_names() {
    if !xdp_ready("a_proxys_datagrams_are_judged_by_the_client_its_header_names") {
        return;
    }
    let (rate, burst) = (1, 2);
    let g = private_guard(&[DNS], rate, burst);
    pin_to_current_cpu();
    let proxy = v4("192.0.2.53");
    g.maps().set_proxies(&[net("192.0.2.53/32")]).unwrap();
    block(&g, "198.51.100.7/32");
    block(&g, "2001:db8:7::/48");
    use Verdict::*;
    let sa = |s: &str| s.parse::<std::net::SocketAddr>().unwrap();
    assert_verdict(
        &g,
        "a blocked client behind the proxy",
        &proxied4(proxy, sa("198.51.100.7:4000")),
        Drop,
        "drop_blocked_addr",
    );
    assert_verdict(
        &g,
        "a blocked IPv6 client behind the proxy",
        &proxied4(proxy, sa("[2001:db8:7::1]:4000")),
        Drop,
        "drop_blocked_prefix",
    );
    // The rate limit counts per client: one client runs out, the proxy and others do not.
    let busy = proxied4(proxy, sa("198.51.100.8:4000"));
    for _ in 0..burst {
        assert_verdict(&g, "client within its burst", &busy, Pass, "pass");
    }
    assert_verdict(&g, "client past its burst", &busy, Drop, "drop_ratelimit");
    for i in 0..5u8 {
        let other = proxied4(proxy, sa(&format!("198.51.100.{}:4000", 20 + i)));
        assert_verdict(&g, "another client", &other, Pass, "pass");
    }
    // The same header from a sender that is not a listed proxy: judged by the sender (and
    // dropped by dnsd), never by the address it claims.
    assert_verdict(
        &g,
        "an unlisted sender claiming a blocked client",
        &proxied4(v4("192.0.2.54"), sa("198.51.100.7:4000")),
        Pass,
        "pass",
    );
    // Emptied: the proxy's datagrams are the proxy's again.
    g.maps().set_proxies(&[]).unwrap();
    assert_verdict(
        &g,
        "proxy list emptied",
        &proxied4(proxy, sa("198.51.100.7:4000")),
        Pass,
        "pass",
    );
}

#[test]
fn a_source_over_its_rate_still_passes_with_our_server_cookie() {
    // Forged packets in a source's name spend its bucket; its own queries carrying a server
    // cookie dnsd made for it (it read our replies) still pass, as dnsd exempts them.
    if !xdp_ready("a_source_over_its_rate_still_passes_with_our_server_cookie") {
        return;
    }
    let g = private_guard(&[53], 1, 2);
    pin_to_current_cpu();
    let m = g.maps();
    let src = v4("198.51.100.9");
    let addr = xdp_guard::addr_key(DST4.into(), 53);
    let (secret, previous) = ([7u8; 16], [9u8; 16]);
    let keys = xdp_guard::CookieKeys {
        current: secret,
        previous: Some(previous),
    };
    m.publish_answers(&[addr], &mut [], 1232, SENDER, Some(&keys))
        .unwrap();
    let client = *b"clientck";
    let query = |id: u16, server: Option<[u8; 16]>| cookie_query(src, id, &client, server);
    // The burst of two, then over the rate.
    let plain = query(1, None);
    assert_eq!(run(&g, &plain).0, Verdict::Pass);
    assert_eq!(run(&g, &plain).0, Verdict::Pass);
    // The name's share of the second bucket, then nothing.
    let (v, d) = run(&g, &plain);
    assert_eq!((v, d.rate_name), (Verdict::Pass, 1));
    let (v, d) = run(&g, &plain);
    assert_eq!((v, d.drop_ratelimit), (Verdict::Drop, 1));
    // Our cookie, under the current or the previous secret: passed (to dnsd, no answer here),
    // within a proven bucket of the same rate — a cookie is no licence to flood.
    let now = unix_s();
    for s in [&secret, &previous] {
        let (v, d) = run(&g, &query(2, Some(server_cookie(s, &client, src, now))));
        assert_eq!((v, d.rate_cookie), (Verdict::Pass, 1), "{d:?}");
    }
    let (v, d) = run(
        &g,
        &query(2, Some(server_cookie(&secret, &client, src, now))),
    );
    assert_eq!(
        (v, d.rate_cookie),
        (Verdict::Drop, 0),
        "the proven bucket spent"
    );
    // Another source's proven bucket is its own.
    let other = v4("198.51.100.11");
    let proven = cookie_query(
        other,
        5,
        &client,
        Some(server_cookie(&secret, &client, other, now)),
    );
    for _ in 0..3 {
        run(&g, &cookie_query(other, 5, &client, None));
    }
    let (v, d) = run(&g, &proven);
    assert_eq!((v, d.rate_cookie), (Verdict::Pass, 1));
    // Another secret's, another address's, a stale one: dropped as before.
    for bad in [
        server_cookie(&[1; 16], &client, src, now),
        server_cookie(&secret, &client, v4("198.51.100.10"), now),
        server_cookie(&secret, &client, src, now - 3700),
    ] {
        let (v, d) = run(&g, &query(3, Some(bad)));
        assert_eq!((v, d.rate_cookie), (Verdict::Drop, 0));
    }
    // The cookie among other options (ECS, padding, NSID), before or after them, in a query
    // for a name of several labels: found, as dnsd and Knot find it (only the shape of a
    // cookie alone was read: an ECS resolver lost half its queries to a forged flood).
    let ecs = (8u16, vec![0, 1, 24, 0, 192, 0, 2]);
    let pad = (12u16, vec![0; 40]);
    let nsid = (3u16, vec![]);
    for (i, (before, after)) in [
        (vec![ecs.clone()], vec![]),
        (vec![], vec![pad.clone()]),
        (vec![nsid.clone(), ecs.clone()], vec![pad.clone()]),
    ]
    .into_iter()
    .enumerate()
    {
        let who = Ipv4Addr::new(198, 51, 100, 30 + i as u8);
        for _ in 0..3 {
            run(&g, &cookie_query(who, 6, &client, None));
        }
        let sc = server_cookie(&secret, &client, who, now);
        let q = options_query(who, 7, &client, Some(sc), &before, &after);
        let (v, d) = run(&g, &q);
        assert_eq!((v, d.rate_cookie), (Verdict::Pass, 1), "variant {i}: {d:?}");
        // A bad one among them: not proven (passed once, on its name's share), then
        // dropped.
        let bad = server_cookie(&[1; 16], &client, who, now);
        let q = options_query(who, 8, &client, Some(bad), &before, &after);
        let (_, d) = run(&g, &q);
        assert_eq!(
            (d.rate_cookie, d.rate_name),
            (0, 1),
            "variant {i}, a bad cookie"
        );
        assert_eq!(run(&g, &q).0, Verdict::Drop, "variant {i}, a bad cookie");
    }
    // A client cookie alone among options: nothing proven.
    let who = v4("198.51.100.40");
    for _ in 0..3 {
        run(&g, &cookie_query(who, 6, &client, None));
    }
    let q = options_query(who, 9, &client, None, std::slice::from_ref(&ecs), &[]);
    let (_, d) = run(&g, &q);
    assert_eq!(
        (d.rate_cookie, d.rate_name),
        (0, 1),
        "the name's share, no proof"
    );
    assert_eq!(run(&g, &q).0, Verdict::Drop);
    // Without dnsd's secrets nothing is verified: dropped.
    m.publish_answers(&[addr], &mut [], 1232, SENDER, None)
        .unwrap();
    let (v, _) = run(
        &g,
        &query(4, Some(server_cookie(&secret, &client, src, now))),
    );
    assert_eq!(v, Verdict::Drop);
}

/// A `name`/`qtype` query (labels given) from `src` to DST4:53 without EDNS.
fn name_query(src: Ipv4Addr, id: u16, labels: &[&str], qtype: u16) -> Vec<u8> {
    let mut q = id.to_be_bytes().to_vec();
    q.extend_from_slice(&[0, 0, 0, 1, 0, 0, 0, 0, 0, 0]);
    for l in labels {
        q.push(l.len() as u8);
        q.extend_from_slice(l.as_bytes());
    }
    q.push(0);
    q.extend_from_slice(&qtype.to_be_bytes());
    q.extend_from_slice(&[0, 1]);
    frame(
        &[],
        ETH_IP,
        &ipv4(src, DST4, UDP, &[], 0, &udp(40000, 53, &q)),
    )
}

/// Past its rate a source has a second bucket of the same rate and burst, drawn on per name
/// and type, each a quarter of it: a flood forged in a resolver's name for one name spends
/// that name's share, and the resolver's queries for other names still pass (the rate counted
/// a source whatever the name, as Knot's RRL does not); many names spend the second bucket
/// too. A name's spellings in other cases share one share.
#[test]
fn over_its_rate_a_source_keeps_a_share_for_each_name() {
    if !xdp_ready("over_its_rate_a_source_keeps_a_share_for_each_name") {
        return;
    }
    let (rate, burst) = (1, 8);
    let g = private_guard(&[53], rate, burst);
    pin_to_current_cpu();
    let src = v4("198.51.100.30");
    let flooded = name_query(src, 1, &["www", "example", "com"], 1);
    // The burst of 8, then the name's share (8 / 4 = 2), then nothing for that name —
    // in any spelling.
    for _ in 0..burst {
        assert_eq!(run(&g, &flooded).0, Verdict::Pass, "the burst");
    }
    for _ in 0..2 {
        let (v, d) = run(&g, &flooded);
        assert_eq!((v, d.rate_name), (Verdict::Pass, 1), "the share");
    }
    for q in [
        flooded.clone(),
        name_query(src, 2, &["WWW", "Example", "COM"], 1),
    ] {
        let (v, d) = run(&g, &q);
        assert_eq!((v, d.rate_name), (Verdict::Drop, 0), "{d:?}");
    }
    // Other names, and the same name with another type: each its share.
    for (i, q) in [
        name_query(src, 3, &["mail", "example", "com"], 1),
        name_query(src, 4, &["example", "com"], 15),
        name_query(src, 5, &["www", "example", "com"], 28),
    ]
    .iter()
    .enumerate()
    {
        let (v, d) = run(&g, q);
        assert_eq!((v, d.rate_name), (Verdict::Pass, 1), "name {i}: {d:?}");
    }
    // Many names spend what is left of the second bucket (8 - 2 - 3), then are held; so is
    // every name then, the flooded one's share or not.
    let mut passed = 0;
    for i in 0..20 {
        let label = format!("r{i}");
        let (v, _) = run(&g, &name_query(src, 10, &[&label, "example", "com"], 1));
        passed += usize::from(v == Verdict::Pass);
    }
    assert!((3..=4).contains(&passed), "{passed} random names passed");
    let (v, _) = run(&g, &name_query(src, 11, &["ns1", "example", "com"], 1));
    assert_eq!(v, Verdict::Drop);
    // Another source is untouched.
    assert_eq!(
        run(
            &g,
            &name_query(v4("198.51.100.31"), 1, &["www", "example", "com"], 1)
        )
        .0,
        Verdict::Pass
    );
}

/// Where the fast path answers under RRL, a query it does not answer (a miss) meets the
/// source's rate after it, as anything that goes on to dnsd: the burst, the name's share,
/// then dropped — its miss counted first.
#[test]
fn a_miss_where_answers_are_under_rrl_meets_the_source_rate_after_the_fast_path() {
    if !xdp_ready("a_miss_where_answers_are_under_rrl_meets_the_source_rate_after_the_fast_path") {
        return;
    }
    let g = private_guard(&[53], 1, 2);
    pin_to_current_cpu();
    let addr = xdp_guard::addr_key(DST4.into(), 53);
    let limited = xdp_guard::AnswerRate {
        per_second: 100,
        ..SENDER
    };
    // One answer (the root's A) makes the address one the fast path answers at.
    let (key, ans) = root_a_answer();
    g.maps()
        .publish_answers(&[addr], &mut [(key, ans)], 1232, limited, None)
        .unwrap();
    let q = name_query(v4("198.51.100.50"), 1, &["nothere", "example", "com"], 1);
    for _ in 0..2 {
        let (v, d) = run(&g, &q);
        assert_eq!(
            (v, d.ans_pass[2]),
            (Verdict::Pass, 1),
            "the burst, a miss: {d:?}"
        );
    }
    let (v, d) = run(&g, &q);
    assert_eq!((v, d.rate_name), (Verdict::Pass, 1), "the name's share");
    let (v, d) = run(&g, &q);
    assert_eq!(
        (v, d.drop_ratelimit, d.ans_pass[2]),
        (Verdict::Drop, 1, 1),
        "held by the rate after the fast path: {d:?}"
    );
}

/// Forged packets in a resolver's name spend its bucket (its address is all they need): past
/// it, one query in `slip` is answered TC=1 with its question alone — never more bytes than
/// came — so that the resolver comes back over TCP, which no bucket limits, as behind RRL.
/// Dropped whole, a flood forged in its name silenced it, with nothing to fall back on.
#[test]
fn over_its_rate_a_source_still_gets_one_truncated_reply_in_slip() {
    if !xdp_ready("over_its_rate_a_source_still_gets_one_truncated_reply_in_slip") {
        return;
    }
    let g = private_guard(&[53], 1, 2);
    pin_to_current_cpu();
    let m = g.maps();
    let addr = xdp_guard::addr_key(DST4.into(), 53);
    let slipping = xdp_guard::AnswerRate { slip: 2, ..SENDER };
    m.publish_answers(&[addr], &mut [], 1232, slipping, None)
        .unwrap();
    let src = v4("198.51.100.20");
    let q = cookie_query(src, 7, b"clientck", None);
    for _ in 0..2 {
        assert_eq!(run(&g, &q).0, Verdict::Pass, "the burst");
    }
    let (v, d) = run(&g, &q);
    assert_eq!((v, d.rate_name), (Verdict::Pass, 1), "the name's share");
    let (mut tx, mut dropped) = (0, 0);
    for _ in 0..10 {
        match run(&g, &q) {
            (Verdict::Other(3), d) if d.rate_slip == 1 => tx += 1,
            (Verdict::Drop, d) if d.drop_ratelimit == 1 => dropped += 1,
            other => panic!("{other:?}"),
        }
    }
    assert_eq!((tx, dropped), (5, 5), "one in two slipped");
    // The reply: back to the sender, QR and TC set, RD kept, the question alone, no OPT.
    let (v, out) = (0..2)
        .map(|_| g.test_run_frame(&q).unwrap())
        .find(|(v, _)| *v == Verdict::Other(3))
        .expect("a slip in two tries");
    assert_eq!(v, Verdict::Other(3));
    assert!(out.len() < q.len(), "{} >= {}", out.len(), q.len());
    assert_eq!(&out[26..30], &DST4.octets(), "from the service address");
    assert_eq!(&out[30..34], &src.octets(), "to the source");
    let dns = checked_dns(&out);
    let asked = &q[42..];
    assert_eq!(dns.len(), 12 + 5, "{dns:02x?}");
    assert_eq!(&dns[..2], &asked[..2], "the id");
    assert_eq!(dns[2] & 0x82, 0x82, "QR and TC: {:02x}", dns[2]);
    assert_eq!(&dns[4..12], &[0, 1, 0, 0, 0, 0, 0, 0]);
    assert_eq!(&dns[12..], &asked[12..17], "the question as asked");
    // To an address that is none of ours (no answers, no DNS service there): never slipped,
    // whatever port it names — we would answer in another's name.
    let mut elsewhere = root_query(8);
    elsewhere[2] = 1;
    let f = frame(
        &[],
        ETH_IP,
        &ipv4(
            src,
            v4("192.0.2.99"),
            UDP,
            &[],
            0,
            &udp(40000, 53, &elsewhere),
        ),
    );
    for _ in 0..4 {
        let (v, d) = run(&g, &f);
        assert_eq!((v, d.rate_slip), (Verdict::Drop, 0));
    }
    // Where the address's RRL never slips (slip 0), all are dropped; from a port of a service
    // that answers any datagram (chargen), none is slipped.
    m.publish_answers(&[addr], &mut [], 1232, SENDER, None)
        .unwrap();
    for _ in 0..4 {
        assert_eq!(run(&g, &q).0, Verdict::Drop);
    }
    m.publish_answers(&[addr], &mut [], 1232, slipping, None)
        .unwrap();
    let mut chargen = root_query(9);
    chargen[2] = 1; // RD
    let f = frame(
        &[],
        ETH_IP,
        &ipv4(src, DST4, UDP, &[], 0, &udp(19, 53, &chargen)),
    );
    for _ in 0..4 {
        assert_eq!(run(&g, &f).0, Verdict::Drop);
    }
}

/// The node's never-block set: each daemon writes its own (its Redis, transfer peers,
/// upstreams) under its bit; a block any other writer made of such a source — an address
/// entry, a covering prefix, a DNS-only one — is passed and counted, the operator's own
/// `xdp-guard block` still drops; a prefix no daemon lists any more is blocked again.
#[test]
fn what_a_daemon_never_blocks_passes_the_other_writers_blocks_but_not_the_operators() {
    if !xdp_ready(
        "what_a_daemon_never_blocks_passes_the_other_writers_blocks_but_not_the_operators",
    ) {
        return;
    }
    let g = private_guard(&[DNS], 0, 0);
    let dnsd = g.maps().clone().with_slot(xdp_guard::SLOT_DNSD);
    let front = g.maps().clone().with_slot(xdp_guard::SLOT_HTTP_FRONT);
    assert_eq!(
        dnsd.set_never(&[net("192.0.2.53/32"), net("2001:db8:5::/48")])
            .unwrap(),
        0
    );
    let far = xdp_guard::boot_ns() + 3_600_000_000_000;
    let kb = |s: &str, dns_only: bool| KernelBlock {
        net: net(s),
        expires_ns: far,
        dns_only,
    };
    let r = front.apply(
        &[
            kb("192.0.2.53/32", false),
            kb("192.0.2.0/24", false),
            kb("2001:db8:5::1/128", false),
            kb("198.51.100.0/24", true),
        ],
        &[],
        true,
    );
    assert_eq!(r.upserted, 4);
    use Verdict::*;
    let primary = udp4(v4("192.0.2.53"), 80);
    assert_verdict(&g, "dnsd's primary", &primary, Pass, "never_block");
    assert_verdict(
        &g,
        "beside it in the prefix",
        &udp4(v4("192.0.2.54"), 80),
        Drop,
        "drop_by_http_front",
    );
    assert_verdict(
        &g,
        "an IPv6 peer inside a listed prefix",
        &udp6(v6("2001:db8:5::1"), DNS),
        Pass,
        "never_block",
    );
    // A DNS-only block of a listed address: passed too.
    dnsd.set_never(&[
        net("192.0.2.53/32"),
        net("2001:db8:5::/48"),
        net("198.51.100.9/32"),
    ])
    .unwrap();
    g.maps()
        .set_services(&[net("192.0.2.2/32")], DNS, 0)
        .unwrap();
    assert_verdict(
        &g,
        "a DNS-only block of a listed address",
        &udp4(v4("198.51.100.9"), DNS),
        Pass,
        "never_block",
    );
    // Listed by two daemons: one's list dropping it leaves the other's.
    front.set_never(&[net("192.0.2.53/32")]).unwrap();
    dnsd.set_never(&[]).unwrap();
    assert_verdict(&g, "still http-front's", &primary, Pass, "never_block");
    assert_verdict(
        &g,
        "no more dnsd's",
        &udp6(v6("2001:db8:5::1"), DNS),
        Drop,
        "drop_by_http_front",
    );
    front.set_never(&[]).unwrap();
    assert_verdict(&g, "nobody's", &primary, Drop, "drop_by_http_front");
    // The operator's block holds, listed or not.
    front.set_never(&[net("192.0.2.53/32")]).unwrap();
    assert_verdict(&g, "listed again", &primary, Pass, "never_block");
    let op = g.maps().clone().with_slot(xdp_guard::SLOT_OPERATOR);
    assert!(op.block(net("192.0.2.53/32"), u64::MAX).unwrap());
    assert_verdict(
        &g,
        "the operator's block",
        &primary,
        Drop,
        "drop_blocked_addr",
    );
    // The operator's wider block holds too, past a daemon's narrower one found first.
    op.unblock(net("192.0.2.53/32")).unwrap();
    assert_verdict(
        &g,
        "unblocked by the operator",
        &primary,
        Pass,
        "never_block",
    );
    assert!(op.block(net("192.0.0.0/16"), u64::MAX).unwrap());
    assert_verdict(
        &g,
        "the operator's /16 around a daemon's /32",
        &primary,
        Drop,
        "drop_blocked_addr",
    );
}
