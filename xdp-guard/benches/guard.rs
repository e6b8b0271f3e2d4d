//! XDP guard benchmarks (needs root; prints a notice and exits otherwise).
//!
//! 1. Cost per packet in the kernel (BPF_PROG_TEST_RUN with a repeat count) with 1,000,000
//!    addresses in the IPv4 hash and 1,000 prefixes in the trie: hash hit, LPM hit, pass,
//!    rate-limited.
//! 2. The DNS answer fast path, per packet: answers of 60, 200, 500 and 1,200 bytes over IPv4
//!    and IPv6, with a client cookie, with a valid server cookie, with RRL on; a miss that
//!    passes; the drop of a blocked source. An answer rewrites the frame in place (a second
//!    repetition would see the reply, not the query), so each of these runs the program once
//!    per call, many calls interleaved across the cases, and reports the median of the
//!    kernel's own per-run time; the drop and a plain pass are measured the same way beside
//!    them (that way of measuring adds the same few ns of timer to every case).
//! 3. Kernel map writes of 100,000 distinct keys: single updates vs BPF_MAP_UPDATE_BATCH, for
//!    the hash and the LPM trie.
//! 4. A burst of 100,000 unique blocked addresses through shield → mirror → kernel map: time
//!    until the last one is in the kernel, checking that none is lost; batched vs single.
//!
//! Run with `cargo bench -p xdp-guard` (`-- answers`: part 2 alone). Anchors (notes/xdp-build.md, 100k entries): hash hit
//! 47–58 ns, LPM hit 131–154 ns, pass 124–149 ns, rate limit 184–220 ns; hash single
//! 650k–840k/s, batch 2.4–2.6M/s; LPM single 320k–445k/s, batch 470k–660k/s.

use std::net::{IpAddr, Ipv4Addr};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use std::net::Ipv6Addr;

use ipnet::{IpNet, Ipv4Net};
use shield::block::{BlockConfig, BlockEntry, BlockMap, Evidence, Origin};
use xdp_guard::{BlockMapKind, KernelBlock, Mirror, MirrorOptions, Verdict, XdpConfig, XdpGuard};

const REPEAT: u32 = 2_000_000;
const HASH_ENTRIES: u32 = 1_000_000;
const BURST: u32 = 100_000;

fn main() {
    // `cargo test --benches` runs bench binaries with --bench absent: keep that quick.
    if !std::env::args().any(|a| a == "--bench") {
        println!("xdp-guard bench: run with `cargo bench -p xdp-guard`");
        return;
    }
    if let Err(why) = xdp_guard::check_available() {
        println!("xdp-guard bench SKIPPED: {why}");
        return;
    }
    // `cargo bench -p xdp-guard -- answers`: the answer fast path alone.
    if std::env::args().any(|a| a == "answers") {
        answers();
        return;
    }
    per_packet();
    answers();
    map_writes();
    mirror_burst();
}

fn guard(v4_entries: u32, rate: u64, burst: u64) -> XdpGuard {
    let mut cfg = XdpConfig::new("lo");
    cfg.pin = false;
    cfg.block_v4_entries = v4_entries;
    cfg.prefix_v4_entries = 4096;
    cfg.dns_ports = vec![53];
    cfg.rate = rate;
    cfg.burst = burst;
    XdpGuard::load(&cfg).expect("load")
}

fn host(i: u32) -> IpNet {
    IpNet::V4(Ipv4Net::new(Ipv4Addr::from(0x0a00_0000 + i), 32).unwrap())
}

fn blocks(nets: impl Iterator<Item = IpNet>) -> Vec<KernelBlock> {
    nets.map(|net| KernelBlock {
        net,
        expires_ns: 0,
        dns_only: false,
    })
    .collect()
}

/// A UDP/IPv4 Ethernet frame from `src` to `dport`.
fn frame(src: Ipv4Addr, dport: u16) -> Vec<u8> {
    let mut f = vec![2, 0, 0, 0, 0, 2, 2, 0, 0, 0, 0, 1, 0x08, 0x00];
    let total: u16 = 20 + 8 + 12;
    f.extend_from_slice(&[0x45, 0]);
    f.extend_from_slice(&total.to_be_bytes());
    f.extend_from_slice(&[0, 1, 0, 0, 64, 17, 0, 0]);
    f.extend_from_slice(&src.octets());
    f.extend_from_slice(&[192, 0, 2, 2]);
    f.extend_from_slice(&40000u16.to_be_bytes());
    f.extend_from_slice(&dport.to_be_bytes());
    f.extend_from_slice(&20u16.to_be_bytes());
    f.extend_from_slice(&[0, 0]);
    f.extend_from_slice(&[0xab; 12]);
    f
}

/// Best of five runs of `REPEAT` repetitions, in ns per packet.
fn cost(g: &XdpGuard, f: &[u8], want: Verdict) -> f64 {
    (0..5)
        .map(|_| {
            let r = g.test_run(f, REPEAT).expect("test run");
            assert_eq!(r.verdict, want);
            r.per_run.as_secs_f64() * 1e9
        })
        .fold(f64::INFINITY, f64::min)
}

fn per_packet() {
    let g = guard(HASH_ENTRIES, 1, 1);
    let t = Instant::now();
    let r = g
        .maps()
        .apply(&blocks((0..HASH_ENTRIES).map(host)), &[], true);
    assert_eq!(r.upserted, u64::from(HASH_ENTRIES), "{r:?}");
    let fill = t.elapsed();
    let prefixes = (0..1000u32)
        .map(|i| IpNet::V4(Ipv4Net::new(Ipv4Addr::from(0xac10_0000 + (i << 8)), 24).unwrap()));
    g.maps().apply(&blocks(prefixes), &[], true);
    println!(
        "\n== per packet (BPF_PROG_TEST_RUN, repeat {REPEAT}, {HASH_ENTRIES} in hash (filled in {:.0} ms), 1000 in trie)",
        fill.as_secs_f64() * 1e3
    );
    let hash = cost(&g, &frame(Ipv4Addr::new(10, 0, 0, 5), 53), Verdict::Drop);
    let lpm = cost(&g, &frame(Ipv4Addr::new(172, 16, 7, 9), 53), Verdict::Drop);
    let pass = cost(&g, &frame(Ipv4Addr::new(192, 0, 2, 1), 80), Verdict::Pass);
    let rl = cost(&g, &frame(Ipv4Addr::new(192, 0, 2, 50), 53), Verdict::Drop);
    // An EDNS query without a cookie over the rate: looked through for one (its name walked).
    let rl_edns = cost(&g, &query_frame(false, 1, true, None), Verdict::Drop);
    let c = g.counters().unwrap();
    assert!(c.drop_ratelimit > 0 && c.drop_blocked_prefix > 0);
    println!("hash hit      {hash:7.1} ns   (anchor 47–58)");
    println!(
        "LPM hit       {lpm:7.1} ns   (anchor 131–154)  LPM/hash {:.2}",
        lpm / hash
    );
    println!(
        "pass          {pass:7.1} ns   (anchor 124–149)  pass/hash {:.2}",
        pass / hash
    );
    println!(
        "rate-limited  {rl:7.1} ns   (anchor 184–220)  rate/hash {:.2}",
        rl / hash
    );
    println!(
        "rate-limited EDNS query {rl_edns:7.1} ns   rate/hash {:.2}",
        rl_edns / hash
    );
}

/// The answer fast path's service addresses and query name.
const SVC4: Ipv4Addr = Ipv4Addr::new(192, 0, 2, 2);
const SVC6: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 0, 2);
const CLIENT4: Ipv4Addr = Ipv4Addr::new(198, 51, 100, 7);
const CLIENT6: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 0xc, 0, 0, 0, 0, 7);
const QNAME: &[u8] = b"\x03www\x05bench\x04test\x00";
/// Calls per case (each runs the program once), in rounds interleaved across the cases.
const ANSWER_CALLS: usize = 60_000;
const ANSWER_ROUNDS: usize = 30;

/// One's complement sum of `b` (from an even offset), unfolded.
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

/// The answer tail (after the question) of a DNS message of about `size` bytes: A records,
/// then, with EDNS, our OPT (payload 1232, no options).
fn answer_tail(size: usize, edns: bool) -> (Vec<u8>, u16) {
    let fixed = 12 + QNAME.len() + 4 + if edns { 11 } else { 0 };
    let n = size.saturating_sub(fixed).div_ceil(16).max(1);
    let mut t = Vec::new();
    for i in 0..n {
        t.extend_from_slice(&[0xc0, 0x0c, 0, 1, 0, 1, 0, 0, 0x0e, 0x10, 0, 4, 192, 0, 2]);
        t.push(i as u8);
    }
    if edns {
        t.extend_from_slice(&[0, 0, 41, 0x04, 0xd0, 0, 0, 0, 0, 0, 0]);
    }
    (t, n as u16)
}

/// A query frame for QNAME/`qtype` from the client to the service address (IPv4 or IPv6),
/// with EDNS (payload 1232) and optionally a COOKIE option of `cookie` (8 or 24 bytes).
fn query_frame(v6: bool, qtype: u16, edns: bool, cookie: Option<&[u8]>) -> Vec<u8> {
    let mut q = vec![0x12, 0x34, 0x01, 0, 0, 1, 0, 0, 0, 0, 0, u8::from(edns)];
    q.extend_from_slice(QNAME);
    q.extend_from_slice(&qtype.to_be_bytes());
    q.extend_from_slice(&[0, 1]);
    if edns {
        let rdlen = cookie.map_or(0, |c| 4 + c.len()) as u16;
        q.extend_from_slice(&[0, 0, 41, 0x04, 0xd0, 0, 0, 0, 0]);
        q.extend_from_slice(&rdlen.to_be_bytes());
        if let Some(c) = cookie {
            q.extend_from_slice(&[0, 10, 0, c.len() as u8]);
            q.extend_from_slice(c);
        }
    }
    let udp_len = (8 + q.len()) as u16;
    let mut udp = 40000u16.to_be_bytes().to_vec();
    udp.extend_from_slice(&53u16.to_be_bytes());
    udp.extend_from_slice(&udp_len.to_be_bytes());
    // Not verified by the program, but never zero over IPv6 (illegal there: passed).
    udp.extend_from_slice(&[0x12, 0x34]);
    udp.extend_from_slice(&q);
    let mut f = vec![2, 0, 0, 0, 0, 2, 2, 0, 0, 0, 0, 1];
    if v6 {
        f.extend_from_slice(&[0x86, 0xdd, 0x60, 0, 0, 0]);
        f.extend_from_slice(&udp_len.to_be_bytes());
        f.extend_from_slice(&[17, 64]);
        f.extend_from_slice(&CLIENT6.octets());
        f.extend_from_slice(&SVC6.octets());
    } else {
        f.extend_from_slice(&[0x08, 0x00, 0x45, 0]);
        f.extend_from_slice(&(20 + udp_len).to_be_bytes());
        f.extend_from_slice(&[0, 1, 0, 0, 64, 17, 0, 0]);
        f.extend_from_slice(&CLIENT4.octets());
        f.extend_from_slice(&SVC4.octets());
        let c = !fold(ones(&f[14..34]));
        f[24..26].copy_from_slice(&c.to_be_bytes());
    }
    f.extend_from_slice(&udp);
    f
}

/// RFC 9018's server cookie for `client` at `ip` made now under `secret`.
fn server_cookie(secret: &[u8; 16], client: &[u8; 8], ip: Ipv4Addr) -> [u8; 16] {
    use std::hash::Hasher;
    let ts = (now_ms() / 1000) as u32;
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

/// One guard with answers of each size for the bench name (qtypes 1..=4 by size, EDNS and
/// not), on one IPv4 and one IPv6 service address, with cookie secrets; RRL as `rate`.
fn answer_guard(rate: xdp_guard::AnswerRate) -> XdpGuard {
    use xdp_guard::maps::{
        ANSWER_MAX, AnsKey, Answer, COOKIE_ANSWER, V_EDNS, V_NO_EDNS, padded_name,
    };
    let g = guard(1024, 0, 0);
    let keys = xdp_guard::CookieKeys {
        current: [7; 16],
        previous: None,
    };
    for svc in [IpAddr::V4(SVC4), IpAddr::V6(SVC6)] {
        let addr = xdp_guard::addr_key(svc, 53);
        let mut entries = Vec::new();
        for (i, size) in ANSWER_SIZES.iter().enumerate() {
            for edns in [false, true] {
                let (tail, an) = answer_tail(*size, edns);
                let mut data = [0u8; ANSWER_MAX];
                data[..tail.len()].copy_from_slice(&tail);
                let variant = if edns { V_EDNS } else { V_NO_EDNS };
                entries.push((
                    AnsKey {
                        addr: xdp_guard::mapped(svc),
                        port: 53,
                        ..AnsKey::for_name(variant, i as u16 + 1, QNAME)
                    },
                    Answer {
                        flags: 0x8400,
                        an,
                        ns: 0,
                        ar: u16::from(edns),
                        len: tail.len() as u16,
                        csum: fold(ones(&tail)),
                        cookie: if edns { COOKIE_ANSWER } else { 0 },
                        reserved: 0,
                        rrl_key: i as u64 + 1,
                        qname: padded_name(QNAME).unwrap(),
                        data,
                    },
                ));
            }
        }
        let r = g
            .maps()
            .publish_answers(&[addr], &mut entries, 1232, rate, Some(&keys))
            .expect("publish answers");
        assert_eq!(r.full, 0, "{r:?}");
    }
    g
}

/// DNS message sizes of the bench's answers (qtype 1, 2, 3, 4).
const ANSWER_SIZES: [usize; 4] = [60, 200, 500, 1200];

/// Median of `v` (sorted here).
fn median(v: &mut [u32]) -> f64 {
    v.sort_unstable();
    f64::from(v[v.len() / 2])
}

fn answers() {
    let client = *b"clientck";
    let sc = server_cookie(&[7; 16], &client, CLIENT4);
    let mut with_server = client.to_vec();
    with_server.extend_from_slice(&sc);
    // Replies to the sender: BPF_PROG_TEST_RUN runs as on the loopback device, where no
    // route leads back to the frames' clients; the route look-up's own cost is the case
    // "route look-up" (no route here: it passes after the look-up).
    let sender = xdp_guard::AnswerRate {
        reply_to_sender: true,
        ..Default::default()
    };
    let plain = answer_guard(sender);
    let routed = answer_guard(Default::default());
    // RRL on at a rate no call here reaches: the bucket's cost, never its verdict.
    let rrl = answer_guard(xdp_guard::AnswerRate {
        per_second: 100_000_000,
        v4_prefix: 24,
        v6_prefix: 56,
        slip: 2,
        reply_to_sender: true,
    });
    plain.maps().apply(
        &blocks(std::iter::once(IpNet::V4(
            Ipv4Net::new(Ipv4Addr::new(198, 51, 100, 9), 32).unwrap(),
        ))),
        &[],
        true,
    );
    let mut blocked = query_frame(false, 2, true, None);
    blocked[26..30].copy_from_slice(&[198, 51, 100, 9]);
    let tx = Verdict::Other(3);
    let mut cases: Vec<(String, &XdpGuard, Vec<u8>, Verdict)> = Vec::new();
    for (i, size) in ANSWER_SIZES.iter().enumerate() {
        let qt = i as u16 + 1;
        for v6 in [false, true] {
            let ip = if v6 { "v6" } else { "v4" };
            cases.push((
                format!("answer {size:4} B {ip}"),
                &plain,
                query_frame(v6, qt, true, None),
                tx,
            ));
        }
        if *size <= 500 {
            // Without EDNS the client takes 512 bytes at most: larger ones pass to dnsd.
            cases.push((
                format!("answer {size:4} B v4 no EDNS"),
                &plain,
                query_frame(false, qt, false, None),
                tx,
            ));
        }
    }
    for (what, c) in [
        ("client cookie", &client[..]),
        ("server cookie", &with_server[..]),
    ] {
        cases.push((
            format!("answer  200 B v4 {what}"),
            &plain,
            query_frame(false, 2, true, Some(c)),
            tx,
        ));
    }
    cases.push((
        "answer  200 B v4 RRL on".into(),
        &rrl,
        query_frame(false, 2, true, None),
        tx,
    ));
    cases.push((
        "answer  200 B v4 route look-up".into(),
        &routed,
        query_frame(false, 2, true, None),
        Verdict::Pass,
    ));
    cases.push((
        "miss (passes to dnsd)".into(),
        &plain,
        query_frame(false, 99, true, None),
        Verdict::Pass,
    ));
    cases.push((
        "drop, blocked source".into(),
        &plain,
        blocked,
        Verdict::Drop,
    ));
    cases.push((
        "pass, not DNS".into(),
        &plain,
        frame(Ipv4Addr::new(192, 0, 2, 1), 80),
        Verdict::Pass,
    ));
    let before = plain.counters().unwrap();
    let mut times: Vec<Vec<u32>> = vec![Vec::with_capacity(ANSWER_CALLS); cases.len()];
    for _ in 0..ANSWER_ROUNDS {
        for (j, (what, g, f, want)) in cases.iter().enumerate() {
            for _ in 0..ANSWER_CALLS / ANSWER_ROUNDS {
                let r = g.test_run(f, 1).expect("test run");
                assert_eq!(r.verdict, *want, "{what}");
                times[j].push(r.per_run.as_nanos() as u32);
            }
        }
    }
    let after = plain.counters().unwrap();
    assert!(after.answered > before.answered, "{after:?}");
    println!(
        "\n== the DNS answer fast path per packet (BPF_PROG_TEST_RUN, one run per call, median of {ANSWER_CALLS} calls per case in {ANSWER_ROUNDS} interleaved rounds)"
    );
    let medians: Vec<f64> = times.iter_mut().map(|t| median(t)).collect();
    let drop = medians[cases.len() - 2];
    for ((what, _, f, _), m) in cases.iter().zip(&medians) {
        println!(
            "{what:32} {m:6.0} ns  frame {:4} B  {:4.2}x drop",
            f.len(),
            m / drop
        );
    }
    let a200 = medians[3];
    println!(
        "answer of 200 B (v4) / drop of a blocked source: {:.2}x (goal at most 3x)",
        a200 / drop
    );
}

fn rate(n: usize, d: Duration) -> f64 {
    n as f64 / d.as_secs_f64()
}

fn map_writes() {
    println!("\n== kernel map writes, {BURST} distinct keys (empty map each time)");
    let hosts = blocks((0..BURST).map(host));
    let prefixes = blocks(
        (0..BURST)
            .map(|i| IpNet::V4(Ipv4Net::new(Ipv4Addr::from(0x0b00_0000 + (i << 4)), 28).unwrap())),
    );
    for (what, kind, entries) in [
        ("hash", BlockMapKind::AddrV4, &hosts),
        ("LPM ", BlockMapKind::PrefixV4, &prefixes),
    ] {
        let mut rates = [0.0; 2];
        for (j, batch) in [false, true].into_iter().enumerate() {
            let mut cfg = XdpConfig::new("lo");
            cfg.pin = false;
            cfg.block_v4_entries = BURST * 2;
            cfg.prefix_v4_entries = BURST * 2;
            let g = XdpGuard::load(&cfg).expect("load");
            let t = Instant::now();
            let r = g.maps().apply(entries, &[], batch);
            let d = t.elapsed();
            assert_eq!(r.upserted, u64::from(BURST), "{r:?}");
            assert_eq!(g.maps().list(kind).unwrap().len(), BURST as usize);
            rates[j] = rate(BURST as usize, d);
            println!(
                "{what} {:6}  {:9.0}/s  {:7.1} ms  {} syscalls",
                if batch { "batch" } else { "single" },
                rates[j],
                d.as_secs_f64() * 1e3,
                r.syscalls
            );
        }
        println!("{what} batch/single {:.2}x", rates[1] / rates[0]);
    }
}

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64
}

fn mirror_burst() {
    println!("\n== {BURST} unique blocks: shield insert → mirror → kernel map");
    let mut times = [0.0; 3];
    let modes = [
        ("single", false, false),
        ("batch", true, false),
        ("batch, one insert_batch", true, true),
    ];
    for (j, (what, batch, bulk)) in modes.into_iter().enumerate() {
        let g = guard(BURST * 2, 0, 0);
        let block_map = BlockMap::new(BlockConfig::default());
        let opts = MirrorOptions {
            batch,
            idle_wait: Duration::from_millis(1),
            ..Default::default()
        };
        let handle = Mirror::with_options(g.maps().clone(), block_map.subscribe("xdp"), opts)
            .spawn()
            .unwrap();
        let expires = now_ms() + 3_600_000;
        let last = host(BURST - 1);
        let t = Instant::now();
        if bulk {
            block_map.insert_batch(
                (0..BURST).map(|i| {
                    BlockEntry::new(host(i), expires, "bench", Origin::Local, Evidence::Tcp)
                }),
            );
        } else {
            for i in 0..BURST {
                block_map.insert(BlockEntry::new(
                    host(i),
                    expires,
                    "bench",
                    Origin::Local,
                    Evidence::Tcp,
                ));
            }
        }
        let inserted = t.elapsed();
        while g.maps().get(last).unwrap().is_none() {
            std::thread::sleep(Duration::from_micros(200));
        }
        let done = t.elapsed();
        let s = handle.stop().expect("mirror thread").stats().snapshot();
        let kernel = g.maps().list(BlockMapKind::AddrV4).unwrap();
        let lost = BURST as usize - kernel.len();
        assert_eq!(lost, 0, "lost blocks");
        assert!(
            g.maps()
                .is_blocked(IpAddr::V4(Ipv4Addr::new(10, 0, 0, 77)))
                .unwrap()
        );
        times[j] = done.as_secs_f64();
        println!(
            "{what:24}: all in kernel after {:7.1} ms (shield inserts took {:6.1} ms), lost {lost}, \
             {} deliveries, {} resyncs, {} syscalls, full {}",
            done.as_secs_f64() * 1e3,
            inserted.as_secs_f64() * 1e3,
            s.deliveries,
            s.resyncs,
            s.syscalls,
            s.full
        );
    }
    println!(
        "single/batch time {:.2}x; mirror alone (after one insert_batch) {:.1} ms",
        times[0] / times[1],
        times[2] * 1e3
    );
}
