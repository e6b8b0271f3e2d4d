//! Fingerprints as rule attributes: http-front's JA4 of curl's, openssl's and Chromium's
//! ClientHellos equals an independent implementation's (the `ja4plus` package from PyPI, on
//! a tcpdump capture of the same connections); the HTTP/2 fingerprint carries each client's
//! pseudo-header order; both go into access records, and rules match them (`attr = "ja4"`,
//! `attr = "h2_fingerprint"`) after a reload.

use std::collections::BTreeSet;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use palisade_tests::http::{Front, Origin};
use palisade_tests::pki::Ca;

const RULES: &str = "[[tenant]]\nid = 1\n[[tenant.rule]]\nname = \"none\"\naction = \"deny\"\n\
                     when = [{ attr = \"path\", prefix = \"/never\" }]\n";

/// Where `scripts/install-deps` puts the `ja4plus` package (an env var may say otherwise).
fn ja4plus_path() -> Option<PathBuf> {
    let p = std::env::var_os("PALISADE_JA4PLUS")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("/opt/palisade-test-py"));
    p.join("ja4plus").is_dir().then_some(p)
}

fn curl(addr: SocketAddr, ca: &Path, flag: &str, path: &str) -> u16 {
    palisade_tests::pki::curl_status(addr, "fp.test", ca, &[flag], path)
}

fn openssl(addr: SocketAddr) {
    let mut c = Command::new("openssl")
        .args([
            "s_client",
            "-quiet",
            "-connect",
            &addr.to_string(),
            "-servername",
            "fp.test",
        ])
        .args(["-alpn", "http/1.1"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    use std::io::Write as _;
    c.stdin
        .take()
        .unwrap()
        .write_all(b"GET /openssl HTTP/1.1\r\nHost: fp.test\r\nConnection: close\r\n\r\n")
        .unwrap();
    let end = Instant::now() + Duration::from_secs(10);
    while c.try_wait().unwrap().is_none() && Instant::now() < end {
        std::thread::sleep(Duration::from_millis(50));
    }
    let _ = c.kill();
    let _ = c.wait();
}

fn chromium(addr: SocketAddr) -> bool {
    palisade_tests::browser::dump_dom(
        &format!("https://fp.test:{}/chromium", addr.port()),
        "fp.test",
        addr.ip(),
        &["--ignore-certificate-errors"],
        Duration::from_secs(60),
    )
    .is_some()
}

/// The access records so far: (path, ja4, h2_fingerprint).
fn records(front: &Front) -> Vec<(String, String, String)> {
    let text = std::fs::read_to_string(front.dir().join("access.jsonl")).unwrap_or_default();
    text.lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .map(|v| {
            let url = v["url"].as_str().unwrap_or("").to_string();
            let path = url
                .splitn(4, '/')
                .nth(3)
                .map(|p| format!("/{p}"))
                .unwrap_or_default();
            (
                path,
                v["ja4"].as_str().unwrap_or("").to_string(),
                v["h2_fingerprint"].as_str().unwrap_or("").to_string(),
            )
        })
        .collect()
}

fn wait_records(front: &Front, n: usize) -> Vec<(String, String, String)> {
    let end = Instant::now() + Duration::from_secs(15);
    loop {
        let r = records(front);
        if r.len() >= n || Instant::now() > end {
            return r;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn ja4_matches_an_independent_implementation_and_rules_match_fingerprints() {
    let root = unsafe { libc::geteuid() } == 0;
    let (Some(py), true, true) = (
        ja4plus_path(),
        palisade_tests::have_program("tcpdump") && root,
        palisade_tests::have_program("curl") && palisade_tests::have_program("openssl"),
    ) else {
        assert!(
            !palisade_tests::in_ci(),
            "ja4plus, tcpdump (as root), curl and openssl are needed in CI"
        );
        palisade_tests::skipped("ja4plus, tcpdump as root, curl or openssl missing");
        return;
    };
    let ca = Ca::new();
    let dir = tempfile::tempdir().unwrap();
    let leaf = ca.leaf(&["fp.test"]);
    leaf.write(dir.path(), "fp");
    let ca_pem = dir.path().join("ca.pem");
    std::fs::write(&ca_pem, ca.pem()).unwrap();
    let origin = Origin::start();
    let d = dir.path().to_path_buf();
    let config = |a: SocketAddr, m: SocketAddr| {
        format!(
            "[server]\nlisten = []\nworkers = 2\n[tls]\nlisten = [\"{a}\"]\ncert = \"{0}/fp.crt\"\nkey = \"{0}/fp.key\"\n\
             [metrics]\nlisten = \"{m}\"\n[rules]\nfile = \"rules.toml\"\n\
             [access_log]\noutput = \"file:access.jsonl\"\nsample_rate = 1.0\n\
             [[upstream]]\nname = \"app\"\nservers = [\"{1}\"]\n\
             [[site]]\nhosts = [\"*\"]\nupstream = \"app\"\ntenant = 1\n",
            d.display(),
            origin.addr()
        )
    };
    let front = Front::start(config, Some(RULES));
    let a = front.addr();

    let pcap = dir.path().join("cap.pcap");
    let mut dump = Command::new("tcpdump")
        .args(["-i", "lo", "--immediate-mode", "-U", "-s", "0", "-w"])
        .arg(&pcap)
        .arg(format!("tcp port {} and host {}", a.port(), a.ip()))
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // tcpdump says "listening on lo" once it captures.
    {
        use std::io::Read as _;
        let mut err = dump.stderr.take().unwrap();
        let mut buf = [0u8; 256];
        let mut seen = String::new();
        let end = Instant::now() + Duration::from_secs(10);
        while !seen.contains("listening on") && Instant::now() < end {
            match err.read(&mut buf) {
                Ok(0) | Err(_) => break,
                Ok(n) => seen.push_str(&String::from_utf8_lossy(&buf[..n])),
            }
        }
        assert!(seen.contains("listening on"), "tcpdump: {seen}");
        std::thread::spawn(move || std::io::copy(&mut err, &mut std::io::sink()));
    }
    assert_eq!(curl(a, &ca_pem, "--http1.1", "/curl1"), 200);
    assert_eq!(curl(a, &ca_pem, "--http2", "/curl2"), 200);
    let browser = chromium(a);
    openssl(a);
    std::thread::sleep(Duration::from_millis(500));
    // SAFETY: kill has no memory preconditions.
    unsafe {
        libc::kill(dump.id() as libc::pid_t, libc::SIGINT);
    }
    let _ = dump.wait();

    let out = Command::new("/usr/bin/python3")
        .env("PYTHONPATH", &py)
        .args([
            "-m",
            "ja4plus.cli",
            "--format",
            "json",
            "--types",
            "ja4",
            "analyze",
        ])
        .arg(&pcap)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    // Every JA4 value in its output, wherever its format puts it.
    let theirs: BTreeSet<String> = text
        .split(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
        .filter(|w| w.len() == 36 && w.starts_with('t') && w.matches('_').count() == 2)
        .map(str::to_string)
        .collect();
    let recs = wait_records(&front, if browser { 4 } else { 3 });
    let ours = |p: &str| {
        recs.iter()
            .find(|r| r.0 == p)
            .unwrap_or_else(|| panic!("no record of {p}: {recs:?}"))
            .clone()
    };
    let mut clients = vec!["/curl1", "/curl2", "/openssl"];
    if browser {
        clients.push("/chromium");
    }
    for p in &clients {
        let (_, ja4, _) = ours(p);
        assert!(
            theirs.contains(&ja4),
            "{p}: ours {ja4}, ja4plus {theirs:?}\n{text}"
        );
    }
    let (_, ja4_h1, h2_none) = ours("/curl1");
    let (_, ja4_h2, curl_h2) = ours("/curl2");
    assert_ne!(ja4_h1, ja4_h2, "curl's ALPN differs between the two");
    assert!(
        ja4_h1.starts_with("t13d") && ja4_h1[8..10] == *"h1",
        "{ja4_h1}"
    );
    assert!(ja4_h2[8..10] == *"h2", "{ja4_h2}");
    assert!(h2_none.is_empty());
    // curl (nghttp2) sends :method :path :scheme :authority.
    assert!(curl_h2.ends_with("|m,p,s,a"), "{curl_h2}");
    assert_eq!(curl_h2.split('|').count(), 4, "{curl_h2}");
    if browser {
        let (_, _, chrome_h2) = ours("/chromium");
        assert!(chrome_h2.ends_with("|m,a,s,p"), "{chrome_h2}");
    }

    // Rules on the fingerprints: curl over HTTP/1.1 by its JA4, curl over HTTP/2 by its
    // HTTP/2 fingerprint's prefix.
    let settings = curl_h2.split('|').next().unwrap();
    front.write_config(
        &config(a, front.metrics_addr()),
        Some(&format!(
            "{RULES}[[tenant.rule]]\nname = \"curl-h1\"\naction = \"deny\"\n\
             when = [{{ attr = \"ja4\", exact = \"{ja4_h1}\" }}]\n\
             [[tenant.rule]]\nname = \"curl-h2\"\naction = \"deny\"\n\
             when = [{{ attr = \"h2_fingerprint\", prefix = \"{settings}|\" }}]\n"
        )),
    );
    assert!(front.reload());
    assert_eq!(curl(a, &ca_pem, "--http1.1", "/again"), 403);
    assert_eq!(curl(a, &ca_pem, "--http2", "/again"), 403);
    // Another stack passes.
    openssl(a);
    let recs = wait_records(&front, recs.len() + 1);
    assert!(
        recs.iter().filter(|r| r.0 == "/openssl").count() >= 2,
        "{recs:?}"
    );
}
