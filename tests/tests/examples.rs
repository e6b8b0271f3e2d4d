//! The examples the README's first lines run: `examples/palisade.toml` serves its zones and
//! answers as the README shows; `examples/front.toml` passes http-front's check.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use hickory_proto::rr::RData;
use palisade_tests::client::exchange;
use palisade_tests::http::run_front;
use palisade_tests::wire::{QueryOpts, build_query};
use palisade_tests::{bin, net};

fn examples() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples")
}

/// `text` with `from` replaced by `to`; `from` must occur exactly once, so that the example
/// and this test cannot drift apart unnoticed.
fn swap(text: &str, from: &str, to: &str) -> String {
    assert_eq!(
        text.matches(from).count(),
        1,
        "examples/palisade.toml no longer has `{from}` once"
    );
    text.replacen(from, to, 1)
}

struct Kill(std::process::Child);

impl Drop for Kill {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[test]
fn example_config_serves_the_example_zones_as_the_readme_shows() {
    let dir = tempfile::tempdir().unwrap();
    let ip = net::test_ip();
    let port = net::free_port(ip);
    let metrics = net::free_port(ip);
    let text = std::fs::read_to_string(examples().join("palisade.toml")).unwrap();
    // The example's own addresses (127.0.0.1:5353, a socket in /tmp) would collide with a
    // developer's running copy; everything else is the example as shipped.
    let zones = examples().join("zones").canonicalize().unwrap();
    let mut cfg = swap(
        &text,
        "listen = [\"127.0.0.1\"]",
        &format!("listen = [\"{ip}\"]"),
    );
    cfg = swap(&cfg, "port = 5353", &format!("port = {port}"));
    cfg = swap(
        &cfg,
        "socket = \"run/dnsd.sock\"",
        &format!("socket = \"{}\"", dir.path().join("dnsd.sock").display()),
    );
    cfg = swap(
        &cfg,
        "listen = \"127.0.0.1:9153\"",
        &format!("listen = \"{ip}:{metrics}\""),
    );
    cfg = cfg.replace("file = \"zones/", &format!("file = \"{}/", zones.display()));
    let rules = examples()
        .join("../shield/data/rules.toml")
        .canonicalize()
        .unwrap();
    cfg = swap(
        &cfg,
        "file = \"../shield/data/rules.toml\"",
        &format!("file = \"{}\"", rules.display()),
    );
    let path = dir.path().join("palisade.toml");
    std::fs::write(&path, cfg).unwrap();
    let log = std::fs::File::create(dir.path().join("dnsd.log")).unwrap();
    let child = Command::new(bin("dnsd"))
        .args(["serve", "-c"])
        .arg(&path)
        .stdin(Stdio::null())
        .stdout(log.try_clone().unwrap())
        .stderr(log)
        .spawn()
        .unwrap();
    let _kill = Kill(child);
    let addr = SocketAddr::from((ip, port));
    let opts = QueryOpts {
        timeout: Duration::from_millis(200),
        ..QueryOpts::default()
    };
    let deadline = Instant::now() + Duration::from_secs(20);
    let reply = loop {
        match exchange(addr, &build_query(7, "www.example.com.", 1, &opts), &opts) {
            Ok(r) => break r,
            Err(e) if Instant::now() > deadline => panic!(
                "the example never answered: {e}\n{}",
                std::fs::read_to_string(dir.path().join("dnsd.log")).unwrap_or_default()
            ),
            Err(_) => std::thread::sleep(Duration::from_millis(50)),
        }
    };
    let msg = reply.msg;
    assert!(msg.authoritative, "{msg:?}");
    let answers: Vec<String> = msg
        .answers
        .iter()
        .map(|r| match &r.data {
            RData::A(a) => a.to_string(),
            other => format!("{other:?}"),
        })
        .collect();
    assert_eq!(answers, ["192.0.2.80"]);
    // The second example zone is served too.
    let net_reply = exchange(addr, &build_query(8, "example.net.", 6, &opts), &opts).unwrap();
    assert_eq!(net_reply.msg.answers.len(), 1, "{:?}", net_reply.msg);
    // example.net is tenant 2 of the shared rules file, whose rule refuses ANY.
    let any = exchange(addr, &build_query(9, "example.net.", 255, &opts), &opts).unwrap();
    assert_eq!(any.head.rcode(), 5, "REFUSED: {:?}", any.msg);
}

#[test]
fn example_front_config_passes_the_check() {
    let path = examples().join("front.toml");
    let (code, out) = run_front(&["--check", "-c", path.to_str().unwrap()]);
    assert_eq!(code, Some(0), "{out}");
}
