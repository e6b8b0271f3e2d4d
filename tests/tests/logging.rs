//! Logs as operators read them: `[log] format = "json"` writes one JSON object per line
//! (tracing's JSON layer) from dnsd and http-front, `--log-format` overrides the file, `[log]
//! filter` picks the lines and `RUST_LOG` overrides it, and a bad filter is refused naming
//! where it came from.

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use palisade_tests::net;

/// What a daemon wrote to stderr, and whether it had exited by itself.
struct Run {
    lines: Vec<String>,
    exited: bool,
}

/// Starts `dnsd serve -c CONFIG` with `args` and `rust_log`; see [`lines_until`].
fn dnsd_lines(config: &str, args: &[&str], rust_log: Option<&str>, until: &str) -> Vec<String> {
    dnsd_run(config, args, rust_log, until, Duration::from_secs(15)).lines
}

fn dnsd_run(
    config: &str,
    args: &[&str],
    rust_log: Option<&str>,
    until: &str,
    limit: Duration,
) -> Run {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("dnsd.toml");
    std::fs::write(&path, config).unwrap();
    let mut cmd = Command::new(palisade_tests::bin("dnsd"));
    cmd.arg("serve").arg("-c").arg(&path).args(args);
    lines_until(cmd, rust_log, until, limit)
}

/// Runs `cmd` (RUST_LOG as given) and returns its stderr lines until one contains `until`,
/// it exits, or `limit` passes; then kills it.
fn lines_until(mut cmd: Command, rust_log: Option<&str>, until: &str, limit: Duration) -> Run {
    cmd.env_remove("RUST_LOG");
    if let Some(v) = rust_log {
        cmd.env("RUST_LOG", v);
    }
    let mut child: Child = cmd
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start");
    let err = child.stderr.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for l in BufReader::new(err).lines().map_while(Result::ok) {
            if tx.send(l).is_err() {
                break;
            }
        }
    });
    let mut out = Vec::new();
    let mut exited = false;
    let end = Instant::now() + limit;
    while Instant::now() < end {
        match rx.recv_timeout(Duration::from_millis(200)) {
            Ok(l) => {
                let done = l.contains(until);
                out.push(l);
                if done {
                    break;
                }
            }
            Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {
                if child.try_wait().unwrap().is_some() {
                    exited = true;
                    break;
                }
            }
            Err(_) => break,
        }
    }
    let _ = child.kill();
    let _ = child.wait();
    Run { lines: out, exited }
}

fn dnsd_config(log: &str) -> String {
    let ip = net::test_ip();
    format!(
        "[server]\nlisten = [\"{ip}\"]\nport = {}\nworkers = 1\n\n[[zone]]\norigin = \"example.com.\"\nfile = \"{}\"\n\n{log}\n",
        net::free_port(ip),
        palisade_tests::data_dir()
            .join("example.com.zone")
            .display()
    )
}

#[test]
fn dnsd_logs_json_lines_when_asked_and_text_when_the_flag_says() {
    let cfg = dnsd_config("[log]\nformat = \"json\"");
    let lines = dnsd_lines(&cfg, &[], None, "UDP sockets bound");
    assert!(
        lines.iter().any(|l| l.contains("UDP sockets bound")),
        "{lines:?}"
    );
    for l in &lines {
        let v: serde_json::Value =
            serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON ({e}): {l}"));
        assert!(v["level"].is_string() && v["timestamp"].is_string(), "{l}");
        assert!(v["fields"]["message"].is_string(), "{l}");
    }
    let bound = lines
        .iter()
        .find(|l| l.contains("UDP sockets bound"))
        .unwrap();
    let v: serde_json::Value = serde_json::from_str(bound).unwrap();
    assert_eq!(
        v["fields"]["addresses"], 1,
        "fields are JSON values: {bound}"
    );
    // The flag over the file.
    let lines = dnsd_lines(&cfg, &["--log-format", "text"], None, "UDP sockets bound");
    assert!(lines.iter().any(|l| l.contains("UDP sockets bound")));
    assert!(
        lines
            .iter()
            .all(|l| serde_json::from_str::<serde_json::Value>(l).is_err())
    );
}

#[test]
fn dnsd_log_filter_from_the_file_and_rust_log_over_it() {
    // warn only: the info lines of a start are not written; the server runs.
    let cfg = dnsd_config("[log]\nfilter = \"warn\"");
    let run = dnsd_run(&cfg, &[], None, "never", Duration::from_secs(2));
    assert!(!run.exited, "{:?}", run.lines);
    assert!(
        run.lines.iter().all(|l| !l.contains("INFO")),
        "{:?}",
        run.lines
    );
    // RUST_LOG over the file.
    let lines = dnsd_lines(&cfg, &[], Some("info"), "UDP sockets bound");
    assert!(lines.iter().any(|l| l.contains("INFO")), "{lines:?}");
    // A bad filter is refused, naming the key.
    let bad = dnsd_config("[log]\nfilter = \"dnsd=loud\"");
    let lines = dnsd_lines(&bad, &[], None, "never");
    assert!(lines.iter().any(|l| l.contains("log.filter")), "{lines:?}");
    let lines = dnsd_lines(&cfg, &[], Some("dnsd=loud"), "never");
    assert!(lines.iter().any(|l| l.contains("RUST_LOG")), "{lines:?}");
    // Unknown keys are refused.
    let unknown = dnsd_config("[log]\nlevel = \"info\"");
    let lines = dnsd_lines(&unknown, &[], None, "never");
    assert!(lines.iter().any(|l| l.contains("level")), "{lines:?}");
}

#[test]
fn http_front_logs_json_lines_when_asked() {
    let dir = tempfile::tempdir().unwrap();
    let ip = net::test_ip();
    let path = dir.path().join("front.toml");
    std::fs::write(
        &path,
        format!(
            "[server]\nlisten = [\"{ip}:{}\"]\n\n[log]\nformat = \"json\"\n\n\
             [[upstream]]\nname = \"app\"\nservers = [\"127.0.0.1:9\"]\n\n\
             [[site]]\nhosts = [\"a.test\"]\nupstream = \"app\"\n",
            net::free_port(ip)
        ),
    )
    .unwrap();
    let mut cmd = Command::new(palisade_tests::bin("http-front"));
    cmd.arg("-c").arg(&path);
    let lines = lines_until(cmd, None, "listening", Duration::from_secs(15)).lines;
    assert!(lines.iter().any(|l| l.contains("listening")), "{lines:?}");
    for l in &lines {
        let v: serde_json::Value =
            serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON ({e}): {l}"));
        assert!(v["level"].is_string(), "{l}");
    }
}
