//! http-front's 403/429 aggregates and sampled access records into a real ClickHouse: the
//! counts in ClickHouse equal the front's own response counters, every passed request's
//! record lands normalised, and the sink's counters show no loss.

use std::time::Duration;

use palisade_tests::clickhouse::ClickHouseServer;
use palisade_tests::http::{Front, Origin, base_config, get};
use palisade_tests::net;
use palisade_tests::wait::wait_for;

#[test]
fn http_front_403_429_and_access_records_land_with_the_counts_of_metrics() {
    let Some(ch) = ClickHouseServer::start() else {
        return;
    };
    let url = ch.url();
    let cfg = shield::events::ClickHouseConfig {
        url: url.clone(),
        ..Default::default()
    };
    shield::events::clickhouse::init_schema(&cfg).expect("schema");
    let rules = r#"
[[tenant]]
id = 1
rate_limit = { per_second = 0.05, burst = 5 }

[[tenant.rule]]
name = "no-admin"
action = "deny"
when = [{ attr = "path", prefix = "/admin" }]
"#;
    let origin = Origin::start();
    let front = Front::start(
        |a, m| {
            format!(
                "{}[rules]\nfile = \"rules.toml\"\n\n\
                 [events]\noutput = \"file:events.jsonl\"\ninterval_secs = 1\nnode = \"edge-7\"\n\
                 [events.clickhouse]\nurl = \"{url}\"\nflush_ms = 200\n\n\
                 [access_log]\nclickhouse = true\nsample_rate = 1.0\n\n\
                 [[site]]\nhosts = [\"a.test\"]\nupstream = \"app\"\ntenant = 1\n",
                base_config(a, m, origin.addr())
            )
        },
        Some(rules),
    );
    let (fa, src) = (front.addr(), net::test_ip());
    let mut statuses = Vec::new();
    for i in 0..12 {
        statuses.push(get(Some(src), fa, "a.test", "/admin/x").unwrap().status);
        statuses.push(
            get(
                Some(src),
                fa,
                "a.test",
                &format!("/page?i={i}&q=%22quoted%22"),
            )
            .unwrap()
            .status,
        );
    }
    assert!(statuses.contains(&403) && statuses.contains(&429) && statuses.contains(&200));
    let denied = front.metric("http_front_responses_total{cause=\"denied\"}");
    let limited = front.metric("http_front_responses_total{cause=\"rate_limited\"}");
    let proxied = front.metric("http_front_responses_total{cause=\"proxied\"}");
    eprintln!("front: denied {denied}, rate_limited {limited}, proxied {proxied}");
    assert_eq!(
        denied + limited + proxied,
        statuses.len() as u64,
        "{statuses:?}"
    );

    let sum = |action: &str| {
        ch.number(&format!(
            "SELECT sum(hits) FROM palisade.events WHERE service = 'http-front' AND tenant = 1 \
             AND action = '{action}'"
        ))
    };
    wait_for(
        "ClickHouse to have the 403s, 429s and access records",
        Duration::from_secs(20),
        || {
            sum("denied") == denied
                && sum("rate_limited") == limited
                && ch.number("SELECT count() FROM palisade.access") == proxied
        },
    );
    assert_eq!(
        ch.query(
            "SELECT DISTINCT node, IPv6NumToString(src), src_len FROM palisade.events \
             WHERE is_other = 0 FORMAT TSV"
        )
        .unwrap(),
        format!("edge-7\t::ffff:{}\t120\n", {
            let o = src.octets();
            format!("{}.{}.{}.0", o[0], o[1], o[2])
        })
    );
    let rows = ch
        .query(
            "SELECT site, tenant, IPv6NumToString(client), method, url, status, action \
             FROM palisade.access ORDER BY ts_ms LIMIT 1 FORMAT TSVRaw",
        )
        .unwrap();
    assert_eq!(
        rows,
        format!("a.test\t1\t::ffff:{src}\tGET\thttp://a.test/page?i=0&q=%22quoted%22\t200\tpass\n")
    );
    let m = front.metrics();
    let mut zeros = 0;
    for (k, v) in &m {
        if k.starts_with("palisade_clickhouse_rows_total") {
            let want_zero = ["overflow", "rejected", "shutdown_dropped"]
                .iter()
                .any(|r| k.contains(&format!("result=\"{r}\"")));
            if want_zero {
                assert_eq!(*v, 0.0, "{k}");
                zeros += 1;
            }
        }
    }
    // Both sinks (events and access) have all three: the loop above checked something.
    assert!(
        zeros >= 6,
        "only {zeros} loss series of palisade_clickhouse_rows_total: {m:?}"
    );
    assert_eq!(
        front.metric("palisade_clickhouse_rows_total{table=\"access\",result=\"landed\"}"),
        proxied
    );
}
