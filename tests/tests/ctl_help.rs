//! `dnsd ctl help` and `http-front ctl help` list every control command, as `knotc` does:
//! without a running server, in `ctl --help`, and after an unknown command; and every command
//! the list names is one the running server knows (none answers "unknown command").

use std::process::Command;

use palisade_tests::http::{Front, Origin, base_config};
use palisade_tests::servers::{Dnsd, Zone};

/// Runs `bin args...`: (exit code, stdout and stderr).
fn run(bin: &str, args: &[&str]) -> (i32, String) {
    let out = Command::new(palisade_tests::bin(bin))
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("run {bin}: {e}"));
    let mut s = String::from_utf8_lossy(&out.stdout).into_owned();
    s.push_str(&String::from_utf8_lossy(&out.stderr));
    (out.status.code().unwrap_or(-1), s)
}

/// The command lines a help text lists (its indented lines, without the description), with
/// placeholders in capitals replaced by `fill`.
fn listed(help: &str, fill: &dyn Fn(&str) -> String) -> Vec<Vec<String>> {
    help.lines()
        .filter(|l| l.starts_with("  ") && !l.starts_with("   "))
        .map(|l| {
            let spec = l.trim().split("  ").next().unwrap();
            spec.split_whitespace()
                .take_while(|w| !w.starts_with('['))
                .map(|w| {
                    if w.chars().all(|c| c.is_ascii_uppercase() || c == '|') {
                        fill(w)
                    } else {
                        w.to_string()
                    }
                })
                .collect()
        })
        .collect()
}

#[test]
fn dnsd_ctl_help_lists_every_command_the_server_knows() {
    // Without a server, and in --help.
    let (code, help) = run("dnsd", &["ctl", "help"]);
    assert_eq!(code, 0, "{help}");
    for c in [
        "status",
        "reload ZONE",
        "zones",
        "zone-refresh ZONE",
        "zone-notify ZONE",
        "zone add ORIGIN FILE",
        "zone remove ORIGIN",
        "stats",
        "block add PREFIX",
        "block del PREFIX",
        "block list",
        "block import FILE",
        "events-init",
    ] {
        assert!(help.contains(c), "{c} missing from:\n{help}");
    }
    let (code, long) = run("dnsd", &["ctl", "--help"]);
    assert_eq!(code, 0);
    assert!(long.contains("zone-refresh ZONE"), "{long}");

    let dnsd = Dnsd::builder().zone(Zone::data("example.com.")).start();
    let fill = |w: &str| match w {
        "ZONE" => "example.com.".to_string(),
        "ORIGIN" => "new.example.".to_string(),
        "PREFIX" => "192.0.2.99".to_string(),
        "FILE" => "/nonexistent/blocks.txt".to_string(),
        "NAME" => "pal".to_string(),
        other => panic!("no value for {other}"),
    };
    let commands = listed(&help, &fill);
    assert!(commands.len() >= 12, "{commands:?}");
    for c in &commands {
        let args: Vec<&str> = c.iter().map(String::as_str).collect();
        let (_, out) = dnsd.ctl(&args);
        assert!(
            !out.contains("unknown command"),
            "ctl help lists {args:?}, the server does not know it: {out}"
        );
    }
    // An unknown command fails and says what exists.
    let (ok, out) = dnsd.ctl(&["frobnicate"]);
    assert!(!ok);
    assert!(
        out.contains("unknown command") && out.contains("zone-notify ZONE"),
        "{out}"
    );
}

#[test]
fn http_front_ctl_help_lists_every_command_the_proxy_knows() {
    let (code, help) = run("http-front", &["ctl", "help"]);
    assert_eq!(code, 0, "{help}");
    for c in [
        "status",
        "reload",
        "stats",
        "block add PREFIX",
        "block import FILE",
    ] {
        assert!(help.contains(c), "{c} missing from:\n{help}");
    }
    let (code, long) = run("http-front", &["ctl", "--help"]);
    assert_eq!(code, 0);
    assert!(long.contains("block import FILE"), "{long}");

    let origin = Origin::start();
    let dir = tempfile::tempdir().unwrap();
    let sock = dir.path().join("front.sock");
    let s2 = sock.clone();
    let o = origin.addr();
    let _front = Front::start(
        move |a, m| {
            format!(
                "{}[control]\nsocket = \"{}\"\n\n[[site]]\nhosts = [\"a.test\"]\nupstream = \"app\"\n",
                base_config(a, m, o),
                s2.display()
            )
        },
        None,
    );
    let fill = |w: &str| match w {
        "PREFIX" => "192.0.2.99".to_string(),
        "FILE" => "/nonexistent/blocks.txt".to_string(),
        "NAME" => "pal".to_string(),
        other => panic!("no value for {other}"),
    };
    let sock = sock.to_str().unwrap();
    let commands = listed(&help, &fill);
    assert!(commands.len() >= 8, "{commands:?}");
    for c in &commands {
        let mut args = vec!["ctl", "-s", sock];
        args.extend(c.iter().map(String::as_str));
        let (_, out) = run("http-front", &args);
        assert!(
            !out.contains("unknown command"),
            "ctl help lists {c:?}, the proxy does not know it: {out}"
        );
    }
    let (code, out) = run("http-front", &["ctl", "-s", sock, "frobnicate"]);
    assert_ne!(code, 0);
    assert!(
        out.contains("unknown command") && out.contains("block list"),
        "{out}"
    );
}

/// `dnsd ctl stats | grep -q …` (a reader that stops early) ends `ctl` quietly, as any Unix
/// tool: it panicked printing to the closed pipe.
#[test]
fn ctl_output_into_a_closed_pipe_ends_quietly() {
    let d = Dnsd::start(&[Zone::data("example.com.")]);
    for _ in 0..5 {
        let mut child = Command::new(palisade_tests::bin("dnsd"))
            .args(["ctl", "-s"])
            .arg(d.control_socket())
            .arg("stats")
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        // The reader goes away before anything is read.
        drop(child.stdout.take());
        let out = child.wait_with_output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!err.contains("panicked"), "{err}");
    }
}
