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
                 [[site]]\nhosts = [\"a.test\"]\nupstream = \"app\"\ntenant = 42\n",
                base_config(a, m, origin.addr())
            )
        },
        Some("[[tenant]]\nid = 1\ndeny = [\"203.0.113.0/24\"]\n"),
    );
    let log = front.log();
    for w in [
        "events.interval is deprecated",
        "names tenant 42, which the rules file does not have",
    ] {
        assert!(log.contains(w), "{w}:\n{log}");
    }
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
