//! TLS to origins, against nginx as the origin: `https` (HTTP/1.1) and `h2` (ALPN h2)
//! verified against `ca_file` by `tls_server_name` or by the server's address, resumption
//! per upstream, a client certificate for an origin with `ssl_verify_client on`; a wrong
//! name, a self-signed origin or an origin without h2 is a 502 counted by its cause, and
//! nothing is sent in cleartext instead.

use std::net::SocketAddr;
use std::path::Path;

use palisade_tests::http::{Front, get};
use palisade_tests::nginx::Nginx;
use palisade_tests::pki::{Ca, self_signed};

fn write(dir: &Path, name: &str, text: &str) -> String {
    let p = dir.join(name);
    std::fs::write(&p, text).unwrap();
    p.display().to_string()
}

const BODY: &str = "return 200 \"$ssl_server_name|$ssl_session_reused|$server_protocol|$ssl_client_verify|$http_x_forwarded_proto|$connection\\n\";";

#[test]
fn tls_upstreams_verify_resume_and_fail_by_cause() {
    let ca = Ca::new();
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path().to_path_buf();
    let ca_pem = write(&d, "ca.pem", &ca.pem());
    let edge = ca.leaf(&["edge.test"]);
    let (edge_crt, edge_key) = (
        write(&d, "edge.crt", &edge.cert),
        write(&d, "edge.key", &edge.key),
    );
    let selfs = self_signed(&["selfsigned.test"]);
    write(&d, "self.crt", &selfs.cert);
    write(&d, "self.key", &selfs.key);
    let Some(nginx) = Nginx::start_with(|addr: SocketAddr| {
        // The origin's certificate names origin.test and the address nginx listens on.
        let o = ca.leaf(&[
            "origin.test",
            "mtls.test",
            "nocert.test",
            &addr.ip().to_string(),
        ]);
        write(&d, "origin.crt", &o.cert);
        write(&d, "origin.key", &o.key);
        let dd = d.display();
        format!(
            "ssl_session_tickets on;\n\
             server {{\n    listen {{LISTEN}} ssl http2 default_server;\n    server_name origin.test;\n    \
             ssl_certificate {dd}/origin.crt;\n    ssl_certificate_key {dd}/origin.key;\n    \
             location / {{ {BODY} }}\n}}\n\
             server {{\n    listen {{LISTEN}} ssl http2;\n    server_name selfsigned.test;\n    \
             ssl_certificate {dd}/self.crt;\n    ssl_certificate_key {dd}/self.key;\n    \
             location / {{ {BODY} }}\n}}\n\
             server {{\n    listen {{LISTEN}} ssl http2;\n    server_name mtls.test nocert.test;\n    \
             ssl_certificate {dd}/origin.crt;\n    ssl_certificate_key {dd}/origin.key;\n    \
             ssl_verify_client on;\n    ssl_client_certificate {dd}/ca.pem;\n    \
             location / {{ {BODY} }}\n}}\n"
        )
    }) else {
        return;
    };
    let o = nginx.addr();
    let upstream = |name: &str, proto: &str, extra: &str| {
        format!(
            "[[upstream]]\nname = \"{name}\"\nservers = [\"{o}\"]\nprotocol = \"{proto}\"\n\
             ca_file = \"{ca_pem}\"\n{extra}\n\n\
             [[site]]\nhosts = [\"{name}.test\"]\nupstream = \"{name}\"\n\n"
        )
    };
    let cfg = |a: SocketAddr, m: SocketAddr| {
        format!(
            "[server]\nlisten = [\"{a}\"]\nworkers = 1\n\n[metrics]\nlisten = \"{m}\"\n\n{}{}{}{}{}{}{}{}",
            upstream(
                "good",
                "https",
                "tls_server_name = \"origin.test\"\npool_max_idle = 0"
            ),
            upstream("pooled", "https", "tls_server_name = \"origin.test\""),
            upstream("byaddr", "https", ""),
            upstream("h2", "h2", "tls_server_name = \"origin.test\""),
            upstream("wrongname", "https", "tls_server_name = \"other.test\""),
            upstream(
                "selfsigned",
                "https",
                "tls_server_name = \"selfsigned.test\""
            ),
            upstream(
                "mtls",
                "https",
                &format!(
                    "tls_server_name = \"mtls.test\"\nclient_cert = \"{edge_crt}\"\nclient_key = \"{edge_key}\""
                )
            ),
            upstream("nocert", "https", "tls_server_name = \"nocert.test\""),
        )
    };
    let front = Front::start(cfg, None);
    let a = front.addr();
    let body = |host: &str| {
        let r = get(None, a, host, "/").unwrap();
        let b = r.body.trim();
        // Without nginx's connection number at the end.
        let b = b.rsplit_once('|').map_or(b, |(a, _)| a).to_string();
        (r.status, b)
    };
    let conn = |host: &str| {
        let r = get(None, a, host, "/").unwrap();
        r.body.trim().rsplit('|').next().unwrap().to_string()
    };

    let (st, b) = body("good.test");
    assert_eq!(st, 200, "{b}");
    assert_eq!(b, "origin.test|.|HTTP/1.1|NONE|http");
    // A second connection (no pooling here) resumes the first one's session.
    let (st, b) = body("good.test");
    assert_eq!((st, b.as_str()), (200, "origin.test|r|HTTP/1.1|NONE|http"));
    assert!(front.metric("http_front_upstream_tls_handshakes_total{resumed=\"yes\"}") >= 1);

    // A pooled TLS connection carries the next request (the session ticket that came after
    // the handshake does not make it look closed).
    let c1 = conn("pooled.test");
    std::thread::sleep(std::time::Duration::from_millis(50));
    assert_eq!(conn("pooled.test"), c1);

    // No name: the address is verified, no SNI is sent.
    let (st, b) = body("byaddr.test");
    assert_eq!(st, 200, "{b}");
    assert!(b.starts_with("|") && b.contains("|HTTP/1.1|"), "{b}");

    let (st, b) = body("h2.test");
    assert_eq!(st, 200, "{b}");
    assert!(
        b.starts_with("origin.test|") && b.contains("|HTTP/2.0|"),
        "{b}"
    );

    let (st, b) = body("mtls.test");
    assert_eq!((st, b.as_str()), (200, "mtls.test|.|HTTP/1.1|SUCCESS|http"));
    // Without our certificate nginx answers 400 itself.
    assert_eq!(body("nocert.test").0, 400);

    assert_eq!(body("wrongname.test").0, 502);
    assert_eq!(body("selfsigned.test").0, 502);
    assert_eq!(
        front.metric("http_front_upstream_tls_failures_total{cause=\"wrong_name\"}"),
        1
    );
    assert_eq!(
        front.metric("http_front_upstream_tls_failures_total{cause=\"unknown_issuer\"}"),
        1
    );
    // Nothing went to the origin in cleartext (or at all) for them.
    std::thread::sleep(std::time::Duration::from_millis(100));
    let log = nginx.access_log();
    assert!(
        !log.iter()
            .any(|l| l.contains("|wrongname.test|") || l.contains("|selfsigned.test|")),
        "{log:?}"
    );
    assert!(
        !nginx
            .error_log()
            .contains("plain HTTP request was sent to HTTPS port")
    );
}

/// An `h2` upstream whose origin does not agree to h2 is a 502 counted as `alpn`; a config
/// naming TLS keys for a cleartext upstream, or a missing ca_file, is refused at its line.
#[test]
fn tls_upstream_without_h2_and_bad_settings() {
    let ca = Ca::new();
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path().to_path_buf();
    let ca_pem = write(&d, "ca.pem", &ca.pem());
    let Some(nginx) = Nginx::start_with(|_| {
        let o = ca.leaf(&["origin.test"]);
        write(&d, "origin.crt", &o.cert);
        write(&d, "origin.key", &o.key);
        let dd = d.display();
        format!(
            "server {{\n    listen {{LISTEN}} ssl;\n    server_name origin.test;\n    \
             ssl_certificate {dd}/origin.crt;\n    ssl_certificate_key {dd}/origin.key;\n    \
             location / {{ {BODY} }}\n}}\n"
        )
    }) else {
        return;
    };
    let o = nginx.addr();
    let front = Front::start(
        |a, m| {
            format!(
                "[server]\nlisten = [\"{a}\"]\n[metrics]\nlisten = \"{m}\"\n\
                 [[upstream]]\nname = \"app\"\nservers = [\"{o}\"]\nprotocol = \"h2\"\n\
                 ca_file = \"{ca_pem}\"\ntls_server_name = \"origin.test\"\n\
                 [[site]]\nhosts = [\"*\"]\nupstream = \"app\"\n"
            )
        },
        None,
    );
    assert_eq!(get(None, front.addr(), "x.test", "/").unwrap().status, 502);
    assert_eq!(
        front.metric("http_front_upstream_tls_failures_total{cause=\"alpn\"}"),
        1
    );

    for (extra, want) in [
        (
            "protocol = \"http1\"\nca_file = \"ca.pem\"\n",
            "front.toml:5:11: upstream[0].ca_file: ca_file is for TLS upstreams",
        ),
        (
            "protocol = \"https\"\nca_file = \"missing.pem\"\n",
            "front.toml:5:11: upstream[0].ca_file:",
        ),
        (
            "protocol = \"https\"\nclient_cert = \"ca.pem\"\n",
            "upstream[0].client_key: client_cert needs a client_key",
        ),
        (
            "protocol = \"https\"\ntls_server_name = \"bad name!\"\n",
            "upstream[0].tls_server_name:",
        ),
    ] {
        let cfg = d.join("front.toml");
        std::fs::write(
            &cfg,
            format!(
                "[[upstream]]\nname = \"app\"\nservers = [\"127.0.0.1:1\"]\n{extra}\
                 [[site]]\nhosts = [\"*\"]\nupstream = \"app\"\n"
            ),
        )
        .unwrap();
        let (code, out) =
            palisade_tests::http::run_front(&["-c", cfg.to_str().unwrap(), "--check"]);
        assert_eq!(code, Some(1), "{out}");
        assert!(out.contains(want), "{want}\n{out}");
    }
}
