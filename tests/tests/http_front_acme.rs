//! ACME against a real server (Debian's pebble): http-front orders certificates for the
//! hosts of sites with `acme = true` only, answers http-01 itself before any rule (a deny
//! rule on everything does not stop it) or tls-alpn-01 on its TLS listener, serves the issued
//! chain (checked with `openssl s_client -CAfile` and pebble's root), renews a certificate
//! two thirds into its life, and keeps the current one when a renewal fails.

use std::net::{Ipv4Addr, SocketAddr};
use std::os::unix::fs::PermissionsExt as _;
use std::path::Path;
use std::process::Command;
use std::time::Duration;

use palisade_tests::http::Front;
use palisade_tests::net;
use palisade_tests::pebble::Pebble;
use palisade_tests::pki::{Ca, hello};
use palisade_tests::servers::{Dnsd, Zone};

const DENY_ALL: &str = r#"
[[tenant]]
id = 1
[[tenant.rule]]
name = "nobody"
action = "deny"
when = [{ attr = "path", prefix = "/" }]
"#;

struct Setup {
    _dnsd: Dnsd,
    ip: Ipv4Addr,
    http: u16,
    tls: u16,
    dir: tempfile::TempDir,
    ca: Ca,
}

fn setup() -> Setup {
    let ip = net::test_ip();
    let http = net::free_port(ip);
    let mut tls = net::free_port(ip);
    while tls == http {
        tls = net::free_port(ip);
    }
    let dir = tempfile::tempdir().unwrap();
    let zone = dir.path().join("acme.test.zone");
    std::fs::write(
        &zone,
        format!(
            "$ORIGIN acme.test.\n$TTL 60\n@ SOA ns hostmaster 1 3600 600 86400 60\n@ NS ns\nns A {ip}\n\
             www A {ip}\napi A {ip}\nalpn A {ip}\nother A {ip}\n"
        ),
    )
    .unwrap();
    let dnsd = Dnsd::start(&[Zone::new("acme.test.", &zone)]);
    Setup {
        _dnsd: dnsd,
        ip,
        http,
        tls,
        dir,
        ca: Ca::new(),
    }
}

fn front(s: &Setup, pebble: &Pebble, challenge: &str, sites: &str) -> Front {
    let ca = s.dir.path().join("ca.pem");
    std::fs::write(&ca, s.ca.pem()).unwrap();
    let state = s.dir.path().join("acme-state");
    let (ip, http, tls) = (s.ip, s.http, s.tls);
    let directory = pebble.directory();
    Front::start(
        |a, m| {
            format!(
                "[server]\nlisten = [\"{a}\", \"{ip}:{http}\"]\nworkers = 2\n\n\
                 [tls]\nlisten = [\"{ip}:{tls}\"]\n\n[metrics]\nlisten = \"{m}\"\n\n\
                 [control]\nsocket = \"ctl.sock\"\n\n[rules]\nfile = \"rules.toml\"\n\n\
                 [acme]\ndirectory = \"{directory}\"\ncontact = [\"mailto:ops@acme.test\"]\n\
                 state_dir = \"{}\"\nca_file = \"{}\"\nchallenge = \"{challenge}\"\nretry_secs = 1\n\n\
                 [[upstream]]\nname = \"app\"\nservers = [\"127.0.0.1:9\"]\n\n{sites}",
                state.display(),
                ca.display()
            )
        },
        Some(DENY_ALL),
    )
}

fn wait_issued(front: &Front, n: u64) {
    let got = front.wait_metric(
        "http_front_acme_orders_total{result=\"issued\"}",
        n,
        Duration::from_secs(90),
    );
    assert!(
        got >= n,
        "{} issued, wanted {n}:\n{}",
        got,
        front.ctl(&["certs"])
    );
}

/// `openssl s_client` with pebble's root: the chain served for `name` verifies.
fn verifies(addr: SocketAddr, name: &str, root: &Path) -> String {
    let out = Command::new("openssl")
        .args([
            "s_client",
            "-connect",
            &addr.to_string(),
            "-servername",
            name,
        ])
        .arg("-CAfile")
        .arg(root)
        .args(["-verify_return_error", "-verify_hostname", name])
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    assert!(
        text.contains("Verify return code: 0 (ok)"),
        "{name}: {text}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    text
}

/// A certificate of our own for `names`, two thirds through its life (due for renewal).
fn due_pair(ca: &Ca, names: &[&str]) -> (String, String) {
    let mut p =
        rcgen::CertificateParams::new(names.iter().map(|n| n.to_string()).collect::<Vec<_>>())
            .unwrap();
    let now = time::OffsetDateTime::now_utc();
    p.not_before = now - time::Duration::days(10);
    p.not_after = now + time::Duration::days(1);
    let pair = ca.sign(p);
    (pair.cert, pair.key)
}

#[test]
fn acme_http01_issues_renews_and_keeps_the_current_on_failure() {
    if !palisade_tests::have_program("openssl") {
        palisade_tests::skipped("openssl missing");
        return;
    }
    let s = setup();
    let Some(pebble) = Pebble::start(&s.ca, s._dnsd.addr(), s.http, s.tls) else {
        return;
    };
    // A certificate of ours already in the state dir, due for renewal: served until renewed.
    let state = s.dir.path().join("acme-state");
    std::fs::create_dir_all(&state).unwrap();
    let (crt, key) = due_pair(&s.ca, &["www.acme.test", "api.acme.test"]);
    std::fs::write(state.join("www.acme.test.crt"), crt).unwrap();
    std::fs::write(state.join("www.acme.test.key"), key).unwrap();
    let f = front(
        &s,
        &pebble,
        "http-01",
        "[[site]]\nhosts = [\"www.acme.test\", \"api.acme.test\"]\nupstream = \"app\"\ntenant = 1\nacme = true\n\n\
         [[site]]\nhosts = [\"other.acme.test\"]\nupstream = \"app\"\ntenant = 1\n",
    );
    wait_issued(&f, 1);
    let tls = SocketAddr::from((s.ip, s.tls));
    let root = pebble.root(s.dir.path());
    for name in ["www.acme.test", "api.acme.test"] {
        let text = verifies(tls, name, &root);
        assert!(text.contains("Pebble"), "{text}");
    }
    // Only configured names: a handshake for another name gets nothing, nothing is ordered.
    assert!(hello(tls, Some("other.acme.test")).is_err());
    assert!(hello(tls, Some("evil.acme.test")).is_err());
    assert_eq!(
        f.metric("http_front_acme_orders_total{result=\"issued\"}"),
        1
    );
    // The state dir is private; the key too.
    let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode(&state), 0o700);
    assert_eq!(mode(&state.join("www.acme.test.key")), 0o600);
    assert_eq!(mode(&state.join("account.json")), 0o600);
    let certs = f.ctl(&["certs"]);
    assert!(
        certs.contains("www.acme.test,api.acme.test") && certs.contains("Pebble"),
        "{certs}"
    );

    // A renewal that fails keeps the certificate and says why.
    let served = hello(tls, Some("www.acme.test")).unwrap().leaf;
    drop(pebble);
    f.ctl(&["certs", "renew"]);
    let got = f.wait_metric(
        "http_front_acme_orders_total{result=\"failed\"}",
        1,
        Duration::from_secs(30),
    );
    assert!(got >= 1);
    assert_eq!(hello(tls, Some("www.acme.test")).unwrap().leaf, served);
    let certs = f.ctl(&["certs"]);
    assert!(certs.contains("ACME:"), "{certs}");
}

#[test]
fn acme_tls_alpn01_issues_on_the_tls_listener() {
    if !palisade_tests::have_program("openssl") {
        palisade_tests::skipped("openssl missing");
        return;
    }
    let s = setup();
    let Some(pebble) = Pebble::start(&s.ca, s._dnsd.addr(), s.http, s.tls) else {
        return;
    };
    let f = front(
        &s,
        &pebble,
        "tls-alpn-01",
        "[[site]]\nhosts = [\"alpn.acme.test\"]\nupstream = \"app\"\ntenant = 1\nacme = true\n",
    );
    wait_issued(&f, 1);
    let root = pebble.root(s.dir.path());
    verifies(SocketAddr::from((s.ip, s.tls)), "alpn.acme.test", &root);
    // The validation handshake's certificate is gone with its challenge: an acme-tls/1
    // handshake now gets nothing.
    let out = Command::new("openssl")
        .args([
            "s_client",
            "-connect",
            &SocketAddr::from((s.ip, s.tls)).to_string(),
        ])
        .args(["-servername", "alpn.acme.test", "-alpn", "acme-tls/1"])
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap();
    assert!(
        !String::from_utf8_lossy(&out.stdout).contains("BEGIN CERTIFICATE"),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );

    // A restart with the issued certificate on disk orders nothing: it is not due.
    drop(f);
    let f = front(
        &s,
        &pebble,
        "tls-alpn-01",
        "[[site]]\nhosts = [\"alpn.acme.test\"]\nupstream = \"app\"\ntenant = 1\nacme = true\n",
    );
    verifies(SocketAddr::from((s.ip, s.tls)), "alpn.acme.test", &root);
    std::thread::sleep(Duration::from_millis(500));
    assert_eq!(
        f.metric("http_front_acme_orders_total{result=\"issued\"}"),
        0
    );
    let certs = f.ctl(&["certs"]);
    assert!(
        certs.contains("alpn.acme.test") && certs.contains(" in "),
        "{certs}"
    );
}

/// An ACME server that takes the connection and never answers: the order fails within
/// `[acme] timeout_secs`, is counted and retried (no timeout held every renewal of every site
/// for good, with nothing said), and a certificate on disk keeps serving.
#[test]
fn an_acme_server_that_never_answers_fails_the_order_within_its_timeout() {
    let dir = tempfile::tempdir().unwrap();
    let ip = net::test_ip();
    let silent = std::net::TcpListener::bind((ip, 0)).unwrap();
    let at = silent.local_addr().unwrap();
    // Connections are taken (the kernel's backlog) and never read nor answered.
    let state = dir.path().join("acme-state");
    let (http, tls) = (net::free_port(ip), net::free_port(ip));
    let f = Front::start(
        |a, m| {
            format!(
                "[server]\nlisten = [\"{a}\", \"{ip}:{http}\"]\nworkers = 2\n\n\
                 [tls]\nlisten = [\"{ip}:{tls}\"]\n\n[metrics]\nlisten = \"{m}\"\n\n\
                 [control]\nsocket = \"ctl.sock\"\n\n[rules]\nfile = \"rules.toml\"\n\n\
                 [acme]\ndirectory = \"https://{at}/dir\"\nstate_dir = \"{}\"\n\
                 retry_secs = 1\ntimeout_secs = 2\n\n\
                 [[upstream]]\nname = \"app\"\nservers = [\"127.0.0.1:9\"]\n\n\
                 [[site]]\nhosts = [\"www.acme.test\"]\nupstream = \"app\"\ntenant = 1\nacme = true\n",
                state.display(),
            )
        },
        Some(DENY_ALL),
    );
    let got = f.wait_metric(
        "http_front_acme_orders_total{result=\"failed\"}",
        2,
        Duration::from_secs(20),
    );
    assert!(got >= 2, "failed orders {got}:\n{}", f.ctl(&["certs"]));
    let certs = f.ctl(&["certs"]);
    assert!(certs.contains("no account within 2 s"), "{certs}");
    drop(silent);
}
