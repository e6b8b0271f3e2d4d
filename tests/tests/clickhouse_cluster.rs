//! dnsd's events into a ClickHouse cluster of two shards (two servers of Debian's ClickHouse,
//! each one shard in both servers' `remote_servers`): `ctl events-init --cluster` makes the
//! local tables and the `Distributed` ones on both through `urls` (the first over HTTPS,
//! verified against `ca_file`); blocked traffic goes on while the first endpoint's server (one
//! shard) is stopped for 20 s — its endpoint is set aside, the second takes the inserts and
//! its `Distributed` table holds the stopped shard's rows until it is back — and the counts read with `FINAL` through the `Distributed` table equal
//! dnsd's own counters: nothing lost, nothing twice.

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use palisade_tests::clickhouse::ClickHouseServer;
use palisade_tests::counters::prometheus_sum;
use palisade_tests::servers::{Dnsd, Zone};
use palisade_tests::wait::wait_for;

/// A CA and a certificate it signs for 127.0.0.1: (ca.pem, cert.pem, key.pem).
fn certificates(
    dir: &Path,
) -> Option<(std::path::PathBuf, std::path::PathBuf, std::path::PathBuf)> {
    let run = |args: &[&str]| {
        Command::new("openssl")
            .args(args)
            .current_dir(dir)
            .output()
            .is_ok_and(|o| o.status.success())
    };
    let ok = run(&[
        "req",
        "-x509",
        "-newkey",
        "rsa:2048",
        "-nodes",
        "-days",
        "2",
        "-subj",
        "/CN=test CA",
        "-keyout",
        "ca.key",
        "-out",
        "ca.pem",
    ]) && run(&[
        "req",
        "-newkey",
        "rsa:2048",
        "-nodes",
        "-subj",
        "/CN=127.0.0.1",
        "-keyout",
        "key.pem",
        "-out",
        "req.csr",
    ]) && {
        std::fs::write(
            dir.join("ext.cnf"),
            "subjectAltName = IP:127.0.0.1\nbasicConstraints = CA:FALSE\n",
        )
        .unwrap();
        run(&[
            "x509",
            "-req",
            "-in",
            "req.csr",
            "-CA",
            "ca.pem",
            "-CAkey",
            "ca.key",
            "-CAcreateserial",
            "-days",
            "2",
            "-extfile",
            "ext.cnf",
            "-out",
            "cert.pem",
        ])
    };
    ok.then(|| {
        (
            dir.join("ca.pem"),
            dir.join("cert.pem"),
            dir.join("key.pem"),
        )
    })
}

#[test]
fn a_shard_stopped_for_20_s_loses_nothing_and_final_counts_each_row_once() {
    let dir = tempfile::tempdir().unwrap();
    let Some((ca, cert, key)) = certificates(dir.path()) else {
        assert!(!palisade_tests::in_ci(), "openssl is needed in CI");
        palisade_tests::skipped("openssl missing: the ClickHouse cluster test did not run");
        return;
    };
    // The server runs as this user and reads the key.
    let https_port = palisade_tests::net::free_port(std::net::Ipv4Addr::LOCALHOST);
    let Some((mut a, b)) =
        ClickHouseServer::cluster_pair("pal", Some((https_port, cert.as_path(), key.as_path())))
    else {
        return;
    };
    let https = format!("https://127.0.0.1:{https_port}");
    let dnsd = Dnsd::builder()
        .zone(Zone::data("example.com."))
        .raw("[defence.rrl]\nenabled = false")
        .raw("[defence.random_subdomain]\nenabled = false")
        .raw(&format!(
            "[events]\ninterval_secs = 1\n\n[events.clickhouse]\nurls = [\"{https}\", \"{}\"]\n\
             ca_file = \"{}\"\nflush_ms = 200\nmax_backoff_ms = 500\nset_aside_ms = 2000\ntimeout_ms = 2000\n",
            b.url(),
            ca.display()
        ))
        .start();
    let (ok, out) = dnsd.ctl(&["events-init", "--cluster", "pal"]);
    assert!(ok, "events-init --cluster: {out}");
    for url in [https.as_str(), b.url().as_str()] {
        assert!(
            out.contains(&format!("{url}: cluster pal of 2 shards"))
                && out.contains(&format!(
                    "{url}: palisade.events: Distributed over palisade.events_local: ok"
                )),
            "{out}"
        );
    }
    assert_eq!(
        b.query("SELECT engine FROM system.tables WHERE database = 'palisade' AND name = 'events'")
            .unwrap()
            .trim(),
        "Distributed"
    );

    let (ok, out) = dnsd.ctl(&["block", "add", "127.250.0.0/16", "--ttl", "600"]);
    assert!(ok, "{out}");
    // Many sources, so that rows spread over both shards; some before, during and after the
    // outage of shard B.
    let mut src = 0u32;
    let mut burst = |n: u32| {
        for _ in 0..n {
            src += 1;
            palisade_tests::client::send_queries_from(
                dnsd.addr(),
                &format!("127.250.{}.{}", src / 250, src % 250 + 1),
                20,
            );
        }
    };
    burst(40);
    std::thread::sleep(Duration::from_millis(1500));
    // The shard behind the first endpoint, where inserts go while it works.
    a.stop();
    let stopped = Instant::now();
    while stopped.elapsed() < Duration::from_secs(20) {
        burst(5);
        std::thread::sleep(Duration::from_millis(500));
    }
    let st = dnsd.stats();
    eprintln!(
        "during the outage: endpoint 0 ok {} failed {}, endpoint 1 ok {} failed {}",
        st.get("events.clickhouse.endpoint.0.ok"),
        st.get("events.clickhouse.endpoint.0.failed"),
        st.get("events.clickhouse.endpoint.1.ok"),
        st.get("events.clickhouse.endpoint.1.failed"),
    );
    a.restart();
    burst(40);

    // Settled: dnsd's counter stands still and every row it accepted landed.
    let blocked = || prometheus_sum(&dnsd.metrics(), "dnsd_blocked_total", "");
    let mut last = blocked();
    wait_for(
        "dnsd's blocked counter to settle",
        Duration::from_secs(20),
        || {
            std::thread::sleep(Duration::from_millis(1500));
            let now = blocked();
            let same = now == last;
            last = now;
            same
        },
    );
    let blocked = blocked();
    let final_sum = |ch: &ClickHouseServer| {
        ch.query(
            "SELECT sum(hits) FROM palisade.events FINAL WHERE service = 'dnsd' AND action = 'blocked' FORMAT TSVRaw",
        )
        .ok()
        .and_then(|s| s.trim().parse::<u64>().ok())
        .unwrap_or(0)
    };
    let took = wait_for(
        "FINAL through the Distributed table to count every blocked query",
        Duration::from_secs(60),
        || final_sum(&a) == blocked && final_sum(&b) == blocked,
    );
    let per_shard =
        |ch: &ClickHouseServer| ch.number("SELECT count() FROM palisade.events_local FINAL");
    let (ra, rb) = (per_shard(&a), per_shard(&b));
    eprintln!(
        "blocked {blocked} = FINAL sum on both servers ({took:?} after the last burst); rows on shard A {ra}, shard B {rb}"
    );
    assert!(ra > 0 && rb > 0, "rows on both shards: {ra} / {rb}");
    let st = dnsd.stats();
    assert!(
        st.get("events.clickhouse.endpoint.0.failed") > 0,
        "the stopped shard's endpoint failed and was set aside"
    );
    assert!(
        st.get("events.clickhouse.endpoint.1.ok") > 0,
        "the other endpoint took the inserts"
    );
    // A second events-init is harmless.
    let (ok, out) = dnsd.ctl(&["events-init", "--cluster", "pal"]);
    assert!(ok, "{out}");
}
