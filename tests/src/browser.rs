//! Debian's headless Chromium, run once against a URL on loopback.

use std::net::IpAddr;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// Loads `url` in headless Chromium with host `name` mapped to `ip` (and `extra` flags), for
/// at most `limit`; the DOM it dumped. `None`, after a skip line, when Chromium is not installed.
pub fn dump_dom(
    url: &str,
    name: &str,
    ip: IpAddr,
    extra: &[&str],
    limit: Duration,
) -> Option<String> {
    let Some(bin) = crate::find_program("chromium") else {
        crate::skipped("chromium is not installed");
        return None;
    };
    let profile = tempfile::tempdir().expect("profile dir");
    let mut child = Command::new(bin)
        .args([
            "--headless=new",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-dev-shm-usage",
            "--no-first-run",
            "--disable-extensions",
            "--disable-background-networking",
        ])
        .args(extra)
        .arg(format!("--user-data-dir={}", profile.path().display()))
        .arg(format!("--host-resolver-rules=MAP {name} {ip}"))
        .arg("--dump-dom")
        .arg(url)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("start chromium");
    let end = Instant::now() + limit;
    while child.try_wait().ok().flatten().is_none() && Instant::now() < end {
        std::thread::sleep(Duration::from_millis(100));
    }
    let _ = child.kill();
    let out = child.wait_with_output().expect("chromium output");
    Some(String::from_utf8_lossy(&out.stdout).into_owned())
}
