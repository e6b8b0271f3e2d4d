//! Every warning of a config's load reaches the log at start and `ctl reload`'s answer:
//! old spellings, and zones or sites naming a tenant the rules file does not have.

use palisade_tests::http::{Front, Origin, base_config};
use palisade_tests::servers::{Dnsd, Zone};

#[test]
fn dnsd_config_warnings_reach_the_log_and_the_reload_answer() {
    let mut z = Zone::data("example.com.");
    z.options.push("tenant = 9".into());
    let d = Dnsd::builder()
        .zone(z)
        .raw("[defence.water_torture]\nenabled = true")
        .start();
    let log = d.log();
    for w in [
        "defence.water_torture is the old spelling",
        "zone example.com. names tenant 9, but there is no [rules] file",
    ] {
        assert!(log.contains(w), "{w}:\n{log}");
    }
    let (ok, out) = d.ctl(&["reload"]);
    assert!(ok, "{out}");
    assert!(
        out.contains("warning:") && out.contains("water_torture") && out.contains("tenant 9"),
        "{out}"
    );
}

#[test]
fn http_front_config_warnings_reach_the_log_and_the_reload_answer() {
    let origin = Origin::start();
    let front = Front::start(
        |a, m| {
            format!(
                "{}[rules]\nfile = \"rules.toml\"\n\n[events]\ninterval = 5\n\n\
                 [control]\nsocket = \"ctl.sock\"\n\n\
                 [[site]]\nhosts = [\"a.test\"]\nupstream = \"app\"\ntenant = 42\n\
                 [[site]]\nhosts = [\"b.test\"]\nupstream = \"app\"\ntenant = 2\n",
                base_config(a, m, origin.addr())
            )
        },
        Some("[[tenant]]\nid = 1\ndeny = [\"203.0.113.0/24\"]\n[[tenant]]\nid = 2\n"),
    );
    let log = front.log();
    for w in [
        "events.interval is deprecated",
        "names tenant 42, which the rules file does not have",
    ] {
        assert!(log.contains(w), "{w}:\n{log}");
    }
    // A tenant the file declares without rules is no unknown one.
    assert!(!log.contains("names tenant 2,"), "{log}");
    let out = std::process::Command::new(palisade_tests::bin("http-front"))
        .arg("-c")
        .arg(front.dir().join("front.toml"))
        .args(["ctl", "reload"])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}");
    assert!(
        text.contains("warning:") && text.contains("tenant 42"),
        "{text}"
    );
}

#[test]
fn check_config_refuses_a_rules_file_serve_would_refuse() {
    // An escalation wider than `[block] min_prefix_v4` (16): `serve` and `ctl reload` refuse
    // the file, so `check-config` must too, naming the file and line.
    let dir = tempfile::tempdir().unwrap();
    let zone = dir.path().join("example.com.zone");
    std::fs::write(
        &zone,
        "$ORIGIN example.com.\n$TTL 60\n@ SOA ns h 1 1 1 1 1\n@ NS ns\nns A 192.0.2.1\n",
    )
    .unwrap();
    let rules = dir.path().join("rules.toml");
    std::fs::write(
        &rules,
        "[[tenant]]\nid = 1\n\
         escalate = { after = 5, window_secs = 10, block_secs = 60, v4_prefix = 15 }\n",
    )
    .unwrap();
    let conf = dir.path().join("dnsd.toml");
    std::fs::write(
        &conf,
        format!(
            "[server]\nlisten = [\"127.0.0.1\"]\nport = 1\n\n[[zone]]\norigin = \"example.com.\"\n\
             file = \"{}\"\n\n[rules]\nfile = \"{}\"\n",
            zone.display(),
            rules.display()
        ),
    )
    .unwrap();
    let run = |args: &[&str]| {
        let out = std::process::Command::new(palisade_tests::bin("dnsd"))
            .args(args)
            .arg(&conf)
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stderr).to_string()
            + &String::from_utf8_lossy(&out.stdout);
        (out.status.success(), text)
    };
    let (ok, text) = run(&["check-config", "-c"]);
    assert!(!ok, "accepted: {text}");
    assert!(
        text.contains("rules.toml:3:") && text.contains("min_prefix_v4"),
        "{text}"
    );
    let (ok, text) = run(&["serve", "-c"]);
    assert!(!ok && text.contains("min_prefix_v4"), "{text}");

    // A DNS over TLS key of another certificate: `serve` refuses to start, so `check-config`
    // (which the unit's pre-start check runs with --no-zones) must refuse it too.
    std::fs::write(&rules, "[[tenant]]\nid = 1\n").unwrap();
    let ca = palisade_tests::pki::Ca::new();
    ca.leaf(&["dns.test"]).write(dir.path(), "one");
    ca.leaf(&["dns.test"]).write(dir.path(), "two");
    let text = std::fs::read_to_string(&conf).unwrap().replace(
        "port = 1\n",
        &format!(
            "port = 1\ntls_listen = [\"127.0.0.1:1\"]\ntls_cert = \"{0}/one.crt\"\ntls_key = \"{0}/two.key\"\n",
            dir.path().display()
        ),
    );
    std::fs::write(&conf, text).unwrap();
    for args in [
        &["check-config", "-c"][..],
        &["check-config", "--no-zones", "-c"],
    ] {
        let (ok, text) = run(args);
        assert!(
            !ok && text.contains("server.tls_cert/tls_key"),
            "{args:?}: {text}"
        );
    }

    // A zone's geo file that is not there: `serve` answers the zone SERVFAIL, so
    // `check-config` says so, naming the file.
    let geo = dir.path().join("no-such.geo");
    std::fs::write(
        &conf,
        format!(
            "[server]\nlisten = [\"127.0.0.1\"]\nport = 1\n\n[[zone]]\norigin = \"example.com.\"\n\
             file = \"{}\"\ngeo = \"{}\"\n",
            zone.display(),
            geo.display()
        ),
    )
    .unwrap();
    let (ok, text) = run(&["check-config", "-c"]);
    assert!(!ok && text.contains("no-such.geo"), "{text}");
}
