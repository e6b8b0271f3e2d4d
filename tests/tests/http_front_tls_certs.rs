//! Certificates chosen by SNI: `[tls] cert_dir` (exact and `_wildcard.` pairs), a site's own
//! pair, the default pair or a refused handshake for an unknown name, OCSP stapling, and
//! reloads that read only the changed files, keep a bad pair's predecessor and fail no
//! handshake while clients connect.

use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use palisade_tests::http::{Front, Origin, run_front};
use palisade_tests::pki::{Ca, Pair, hello};

fn tls_config(a: SocketAddr, m: SocketAddr, origin: SocketAddr, tls: &str, sites: &str) -> String {
    format!(
        "[server]\nlisten = []\nworkers = 2\n\n[tls]\nlisten = [\"{a}\"]\n{tls}\n\n\
         [metrics]\nlisten = \"{m}\"\n\n[control]\nsocket = \"ctl.sock\"\n\n\
         [[upstream]]\nname = \"app\"\nservers = [\"{origin}\"]\n\n{sites}"
    )
}

fn site(host: &str, extra: &str) -> String {
    format!("[[site]]\nhosts = [\"{host}\"]\nupstream = \"app\"\n{extra}\n")
}

#[test]
fn tls_certificate_by_sni_from_cert_dir_site_and_default() {
    let ca = Ca::new();
    let dir = tempfile::tempdir().unwrap();
    let certs = dir.path().join("certs");
    std::fs::create_dir(&certs).unwrap();
    let default = ca.leaf(&["default.test"]);
    default.write(dir.path(), "default");
    let a = ca.leaf(&["a.test"]);
    a.write(&certs, "a.test");
    let b = ca.leaf(&["b.test"]);
    b.write(&certs, "b.test");
    std::fs::write(certs.join("b.test.ocsp"), b"stapled OCSP bytes of b.test").unwrap();
    let wild = ca.leaf(&["*.wild.test"]);
    wild.write(&certs, "_wildcard.wild.test");
    // The directory's pair for site.test loses to the site's own.
    ca.leaf(&["site.test"]).write(&certs, "site.test");
    let own = ca.leaf(&["site.test"]);
    own.write(dir.path(), "own");
    // A certificate with another pair's key: refused when read, the default serves instead.
    let bad = Pair {
        cert: ca.leaf(&["bad.test"]).cert,
        key: a.key.clone(),
    };
    bad.write(&certs, "bad.test");
    // A certificate without its key: skipped with a warning.
    std::fs::write(certs.join("lonely.test.crt"), &a.cert).unwrap();
    std::fs::write(dir.path().join("ca.pem"), ca.pem()).unwrap();

    let origin = Origin::start();
    let d = dir.path().to_path_buf();
    let front = Front::start(
        |addr, m| {
            tls_config(
                addr,
                m,
                origin.addr(),
                &format!(
                    "cert = \"{0}/default.crt\"\nkey = \"{0}/default.key\"\ncert_dir = \"{0}/certs\"",
                    d.display()
                ),
                &format!(
                    "{}\n{}",
                    site(
                        "site.test",
                        &format!("cert = \"{0}/own.crt\"\nkey = \"{0}/own.key\"", d.display())
                    ),
                    site("*", "")
                ),
            )
        },
        None,
    );
    let addr = front.addr();
    let leaf = |sni: Option<&str>| hello(addr, sni).unwrap_or_else(|e| panic!("{sni:?}: {e}"));
    assert_eq!(leaf(Some("a.test")).leaf, a.der());
    assert_eq!(
        leaf(Some("A.Test")).leaf,
        a.der(),
        "names are case-insensitive"
    );
    assert_eq!(leaf(Some("x.wild.test")).leaf, wild.der());
    assert_eq!(
        leaf(Some("y.x.wild.test")).leaf,
        default.der(),
        "a wildcard covers one label"
    );
    assert_eq!(leaf(Some("wild.test")).leaf, default.der());
    assert_eq!(leaf(Some("site.test")).leaf, own.der());
    assert_eq!(leaf(Some("unknown.test")).leaf, default.der());
    assert_eq!(leaf(None).leaf, default.der(), "no SNI");
    assert_eq!(leaf(Some("bad.test")).leaf, default.der());
    assert_eq!(leaf(Some("lonely.test")).leaf, default.der());
    let seen = leaf(Some("b.test"));
    assert_eq!(seen.leaf, b.der());
    assert_eq!(seen.ocsp, b"stapled OCSP bytes of b.test");
    assert!(leaf(Some("a.test")).ocsp.is_empty());

    assert_eq!(
        front.metric("http_front_tls_handshake_certs_total{cert=\"sni\"}"),
        6
    );
    assert_eq!(
        front.metric("http_front_tls_handshake_certs_total{cert=\"default\"}"),
        6
    );
    assert_eq!(
        front.metric("http_front_tls_cert_pairs_read_total{result=\"refused\"}"),
        1
    );
    // Clients that handshake and go away without close_notify (monitors, scanners) are
    // counted as gone, not as protocol errors.
    for _ in 0..3 {
        palisade_tests::pki::hello_and_vanish(addr, Some("a.test")).unwrap();
    }
    palisade_tests::wait::wait_for("clients gone counted", Duration::from_secs(5), || {
        front.metric("http_front_connections_total{event=\"client_gone\"}") >= 3
    });
    assert_eq!(
        front.metric("http_front_connections_total{event=\"protocol_error\"}"),
        0
    );
    let log = front.log();
    assert!(log.contains("lonely.test.crt"), "{log}");
    assert!(log.contains("bad.test.key"), "{log}");
    assert!(log.contains("cert_dir read"), "{log}");

    // A client that verifies: the chosen pair is valid for the name it asked for.
    assert_eq!(
        palisade_tests::pki::curl_status(addr, "x.wild.test", &dir.path().join("ca.pem"), &[], "/"),
        200
    );

    let list = front.ctl(&["certs"]);
    assert!(list.contains("*.wild.test"), "{list}");
    assert!(list.contains("a.test"), "{list}");
}

/// `http-front -c front.toml --check` reads every pair of cert_dir and names a bad one.
#[test]
fn tls_check_reads_cert_dir() {
    let ca = Ca::new();
    let dir = tempfile::tempdir().unwrap();
    let certs = dir.path().join("certs");
    std::fs::create_dir(&certs).unwrap();
    for i in 0..5 {
        ca.leaf(&[&format!("n{i}.test")])
            .write(&certs, &format!("n{i}.test"));
    }
    let a = ca.leaf(&["x.test"]);
    Pair {
        cert: a.cert,
        key: ca.leaf(&["y.test"]).key,
    }
    .write(&certs, "x.test");
    let cfg = dir.path().join("front.toml");
    std::fs::write(
        &cfg,
        "[server]\nlisten = []\n[tls]\nlisten = [\"127.0.0.1:1\"]\ncert_dir = \"certs\"\n\
         [[upstream]]\nname = \"app\"\nservers = [\"127.0.0.1:2\"]\n\
         [[site]]\nhosts = [\"*\"]\nupstream = \"app\"\n",
    )
    .unwrap();
    // A pair that does not load fails the check (a CI gate running it must not pass).
    let (code, out) = run_front(&["-c", cfg.to_str().unwrap(), "--check"]);
    assert_eq!(code, Some(1), "{out}");
    assert!(
        out.contains("x.test.key: the key is not the certificate's")
            && out.contains("1 certificate pairs of cert_dir refused"),
        "{out}"
    );
    std::fs::remove_file(certs.join("x.test.crt")).unwrap();
    // An expired pair is served (as nginx serves it) but said.
    let mut old = rcgen::CertificateParams::new(vec!["old.test".to_string()]).unwrap();
    old.not_before = rcgen::date_time_ymd(2019, 1, 1);
    old.not_after = rcgen::date_time_ymd(2020, 2, 1);
    ca.sign(old).write(&certs, "old.test");
    let (code, out) = run_front(&["-c", cfg.to_str().unwrap(), "--check"]);
    assert_eq!(code, Some(0), "{out}");
    assert!(out.contains("6 pairs read"), "{out}");
    assert!(
        out.contains("old.test.crt: the certificate expired at 2020-02-01"),
        "{out}"
    );

    // unknown_sni = "default" without a default pair is refused at its line.
    std::fs::write(
        &cfg,
        "[server]\nlisten = []\n[tls]\nlisten = [\"127.0.0.1:1\"]\ncert_dir = \"certs\"\nunknown_sni = \"default\"\n\
         [[upstream]]\nname = \"app\"\nservers = [\"127.0.0.1:2\"]\n",
    )
    .unwrap();
    let (code, out) = run_front(&["-c", cfg.to_str().unwrap(), "--check"]);
    assert_eq!(code, Some(1), "{out}");
    assert!(
        out.contains("front.toml:6:") && out.contains("tls.unknown_sni"),
        "{out}"
    );
}

fn handshake_load(
    addr: SocketAddr,
    names: Vec<String>,
    stop: Arc<AtomicBool>,
    ok: Arc<AtomicU64>,
    failed: Arc<AtomicU64>,
) -> std::thread::JoinHandle<Vec<String>> {
    std::thread::spawn(move || {
        let mut errors = Vec::new();
        let end = Instant::now() + Duration::from_secs(60);
        let mut i = 0usize;
        while !stop.load(Ordering::Relaxed) && Instant::now() < end {
            let n = &names[i % names.len()];
            i += 1;
            match hello(addr, Some(n)) {
                Ok(_) => {
                    ok.fetch_add(1, Ordering::Relaxed);
                }
                Err(e) => {
                    failed.fetch_add(1, Ordering::Relaxed);
                    if errors.len() < 10 {
                        errors.push(format!("{n}: {e}"));
                    }
                }
            }
        }
        errors
    })
}

fn replace(dir: &Path, name: &str, p: &Pair) {
    // Written aside and renamed, as an operator's tools (and ACME clients) do.
    for (ext, text) in [("crt", &p.cert), ("key", &p.key)] {
        let tmp = dir.join(format!(".{name}.{ext}.tmp"));
        std::fs::write(&tmp, text).unwrap();
        std::fs::rename(&tmp, dir.join(format!("{name}.{ext}"))).unwrap();
    }
}

#[test]
fn tls_reload_reads_changed_pairs_only_and_fails_no_handshake() {
    const N: usize = 300;
    let ca = Ca::new();
    let dir = tempfile::tempdir().unwrap();
    let certs = dir.path().join("certs");
    std::fs::create_dir(&certs).unwrap();
    let mut pairs = Vec::new();
    for i in 0..N {
        let p = ca.leaf(&[&format!("n{i}.test")]);
        p.write(&certs, &format!("n{i}.test"));
        pairs.push(p);
    }
    let origin = Origin::start();
    let c = certs.clone();
    let front = Front::start(
        |addr, m| {
            tls_config(
                addr,
                m,
                origin.addr(),
                &format!("cert_dir = \"{}\"", c.display()),
                &site("*", ""),
            )
        },
        None,
    );
    let addr = front.addr();
    let read_ok = "http_front_tls_cert_pairs_read_total{result=\"ok\"}";
    assert_eq!(
        front.wait_metric(read_ok, N as u64, Duration::from_secs(30)),
        N as u64
    );

    // Unknown names are refused (no default pair).
    assert!(hello(addr, Some("unknown.test")).is_err());
    assert!(hello(addr, None).is_err());
    assert_eq!(
        front.metric("http_front_tls_handshake_certs_total{cert=\"refused\"}"),
        2
    );

    let stop = Arc::new(AtomicBool::new(false));
    let (ok, failed) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
    let names: Vec<String> = (10..N).map(|i| format!("n{i}.test")).collect();
    let load: Vec<_> = (0..2)
        .map(|_| {
            handshake_load(
                addr,
                names.clone(),
                stop.clone(),
                ok.clone(),
                failed.clone(),
            )
        })
        .collect();

    // One pair replaced: read again (that one only) and served.
    let new5 = ca.leaf(&["n5.test"]);
    replace(&certs, "n5.test", &new5);
    let reply = front.ctl(&["reload"]);
    assert!(reply.starts_with("reloaded"), "{reply}");
    assert_eq!(front.metric(read_ok), N as u64 + 1);
    assert_eq!(hello(addr, Some("n5.test")).unwrap().leaf, new5.der());

    // A broken pair: the reply names its files, the one read before keeps serving.
    replace(
        &certs,
        "n6.test",
        &Pair {
            cert: ca.leaf(&["n6.test"]).cert,
            key: pairs[7].key.clone(),
        },
    );
    // The reload's status fails (as `systemctl reload` should say), the rest applied.
    let (code, reply) = front.ctl_status(&["reload"]);
    assert_eq!(code, Some(1), "{reply}");
    assert!(
        reply.contains("n6.test.key: the key is not the certificate's")
            && reply.contains("keeps serving n6.test"),
        "{reply}"
    );
    assert_eq!(hello(addr, Some("n6.test")).unwrap().leaf, pairs[6].der());
    // Mended: the next reload is clean.
    replace(&certs, "n6.test", &pairs[6]);
    assert!(front.ctl(&["reload"]).starts_with("reloaded"));

    // A pair added, one removed.
    let added = ca.leaf(&["added.test"]);
    added.write(&certs, "added.test");
    std::fs::remove_file(certs.join("n7.test.crt")).unwrap();
    front.ctl(&["reload"]);
    assert_eq!(hello(addr, Some("added.test")).unwrap().leaf, added.der());
    assert!(hello(addr, Some("n7.test")).is_err());

    // Reloads while clients connect: nothing unchanged is read, no handshake fails.
    let before = front.metric(read_ok);
    for _ in 0..10 {
        assert!(front.ctl(&["reload"]).starts_with("reloaded"));
        std::thread::sleep(Duration::from_millis(50));
    }
    assert_eq!(
        front.metric(read_ok),
        before,
        "unchanged pairs were read again"
    );
    stop.store(true, Ordering::Relaxed);
    let errors: Vec<String> = load.into_iter().flat_map(|h| h.join().unwrap()).collect();
    assert_eq!(failed.load(Ordering::Relaxed), 0, "{errors:?}");
    assert!(
        ok.load(Ordering::Relaxed) > 50,
        "{}",
        ok.load(Ordering::Relaxed)
    );
}
