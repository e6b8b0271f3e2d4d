//! XDP guard benchmarks (needs root; prints a notice and exits otherwise).
//!
//! 1. Cost per packet in the kernel (BPF_PROG_TEST_RUN with a repeat count) with 1,000,000
//!    addresses in the IPv4 hash and 1,000 prefixes in the trie: hash hit, LPM hit, pass,
//!    rate-limited.
//! 2. Kernel map writes of 100,000 distinct keys: single updates vs BPF_MAP_UPDATE_BATCH, for
//!    the hash and the LPM trie.
//! 3. A burst of 100,000 unique blocked addresses through shield → mirror → kernel map: time
//!    until the last one is in the kernel, checking that none is lost; batched vs single.
//!
//! Run with `cargo bench -p xdp-guard`. Anchors (notes/xdp-build.md, 100k entries): hash hit
//! 47–58 ns, LPM hit 131–154 ns, pass 124–149 ns, rate limit 184–220 ns; hash single
//! 650k–840k/s, batch 2.4–2.6M/s; LPM single 320k–445k/s, batch 470k–660k/s.

use std::net::{IpAddr, Ipv4Addr};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

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
    per_packet();
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
