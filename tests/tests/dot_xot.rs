//! DNS over TLS (RFC 7858) and zone transfers over TLS (RFC 9103): dnsd answers over TLS
//! with the bytes it sends over UDP (checked with our client and with kdig +tls), keeps the
//! TCP defences there (the block map before the handshake, the per-source bound, the idle
//! time), reloads its pair keeping the last good one, and transfers zones over TLS both ways
//! with BIND 9.18: from a BIND primary (a wrong name or pin refused, never a cleartext
//! fallback) and to a BIND secondary (a `tls:` allow refuses the same peer over TCP).

use std::net::{IpAddr, SocketAddr};
use std::path::Path;
use std::time::{Duration, Instant};

use palisade_tests::client::udp_exchange;
use palisade_tests::dot::{DotConn, tcp_from};
use palisade_tests::net;
use palisade_tests::pki::Ca;
use palisade_tests::servers::{Bind, Dnsd, Zone};
use palisade_tests::wire::{QueryOpts, RawMsg, build_query, qtype as T, rcode};

/// A CA, and a pair for `dns.test` from it written as `dns.crt`/`dns.key` with `ca.pem`.
fn pki(dir: &Path) -> Ca {
    let ca = Ca::new();
    std::fs::write(dir.join("ca.pem"), ca.pem()).unwrap();
    ca.leaf(&["dns.test"]).write(dir, "dns");
    ca
}

/// A dnsd serving example.com. over UDP/TCP and over TLS on `tls`, with more `[server]`
/// lines and more config.
fn dnsd_with_tls(dir: &Path, tls: SocketAddr, server: &[&str], extra: &str) -> Dnsd {
    let ip = tls.ip();
    let mut b = Dnsd::builder()
        .zone(Zone::data("example.com."))
        .at(SocketAddr::new(ip, net::free_port(ip_v4(ip))))
        .server_option(&format!("tls_listen = [\"{tls}\"]"))
        .server_option(&format!(
            "tls_cert = \"{}\"\ntls_key = \"{}\"",
            dir.join("dns.crt").display(),
            dir.join("dns.key").display()
        ))
        .raw(extra);
    for l in server {
        b = b.server_option(l);
    }
    b.start()
}

fn ip_v4(ip: IpAddr) -> std::net::Ipv4Addr {
    match ip {
        IpAddr::V4(v) => v,
        IpAddr::V6(_) => unreachable!("test addresses are IPv4"),
    }
}

fn tls_addr() -> SocketAddr {
    let ip = net::test_ip();
    SocketAddr::from((ip, net::free_port(ip)))
}

fn kdig(args: &[&str]) -> String {
    let out = std::process::Command::new("kdig")
        .args(args)
        .output()
        .expect("run kdig");
    String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr)
}

/// Waits up to `secs` for `f` to hold.
fn eventually(secs: u64, mut f: impl FnMut() -> bool) -> bool {
    let end = Instant::now() + Duration::from_secs(secs);
    while Instant::now() < end {
        if f() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    f()
}

/// The base64 SHA-256 of the certificate file's public key, as openssl computes it (RFC 7858
/// §4.2's pin).
fn openssl_pin(cert: &Path) -> String {
    palisade_tests::sh(
        cert.parent().unwrap(),
        &format!(
            "openssl x509 -pubkey -noout -in {} | openssl pkey -pubin -outform der | \
             openssl dgst -sha256 -binary | base64",
            cert.display()
        ),
    )
    .trim()
    .to_string()
}

#[test]
fn dot_answers_with_the_bytes_udp_gets_and_kdig_reads_them() {
    let dir = tempfile::tempdir().unwrap();
    let ca = pki(dir.path());
    let tls = tls_addr();
    let dnsd = dnsd_with_tls(dir.path(), tls, &[], "");
    let mut c = DotConn::connect(None, tls, &ca.pem(), "dns.test").expect("handshake");
    assert_eq!(c.alpn().as_deref(), Some(&b"dot"[..]), "ALPN dot");
    // Several queries on one connection, each the same bytes as over UDP.
    for (i, (name, qtype)) in [
        ("www.example.com.", T::A),
        ("www.example.com.", T::AAAA),
        ("nothere.example.com.", T::A),
        ("example.com.", T::MX),
        ("example.net.", T::A),
    ]
    .into_iter()
    .enumerate()
    {
        let q = build_query(0x100 + i as u16, name, qtype, &QueryOpts::edns(1232));
        let udp = udp_exchange(dnsd.addr(), &q, Duration::from_secs(2))
            .unwrap()
            .expect("UDP reply");
        let dot = c.exchange(&q).unwrap().expect("DoT reply");
        assert_eq!(dot, udp, "{name} {qtype}: DoT and UDP differ");
    }
    let m = RawMsg::parse(
        &c.exchange(&build_query(7, "example.net.", T::A, &QueryOpts::udp()))
            .unwrap()
            .unwrap(),
    )
    .unwrap();
    assert_eq!(m.rcode(), rcode::REFUSED, "not ours: refused over TLS too");
    // kdig, verifying the certificate, and without verification (opportunistic).
    let port = tls.port().to_string();
    let ip = tls.ip().to_string();
    let ca_file = dir.path().join("ca.pem");
    let out = kdig(&[
        &format!("@{ip}"),
        "-p",
        &port,
        &format!("+tls-ca={}", ca_file.display()),
        "+tls-hostname=dns.test",
        "www.example.com.",
        "A",
    ]);
    assert!(out.contains("status: NOERROR"), "{out}");
    assert!(out.contains("192.0.2.80"), "{out}");
    assert!(out.contains("TLS"), "kdig says it used TLS: {out}");
    let out = kdig(&[
        &format!("@{ip}"),
        "-p",
        &port,
        "+tls",
        "+short",
        "www.example.com.",
        "AAAA",
    ]);
    assert_eq!(out.trim(), "2001:db8::80", "{out}");
    // A wrong name fails kdig's verification.
    let out = kdig(&[
        &format!("@{ip}"),
        "-p",
        &port,
        &format!("+tls-ca={}", ca_file.display()),
        "+tls-hostname=other.test",
        "www.example.com.",
    ]);
    assert!(!out.contains("status: NOERROR"), "{out}");
    assert!(dnsd.stat("tls.handshakes.ok") >= 3);
    // DoT's queries counted apart from plain TCP's (they share the TCP table).
    assert!(dnsd.stat("stream.tls.queries") >= 3);
}

#[test]
fn dot_keeps_the_tcp_defences_block_map_before_the_handshake_per_source_bound_idle_time() {
    let dir = tempfile::tempdir().unwrap();
    let ca = pki(dir.path());
    let tls = tls_addr();
    let dnsd = dnsd_with_tls(
        dir.path(),
        tls,
        &["tcp_max_per_source = 2", "tcp_idle_timeout_ms = 800"],
        "",
    );
    let ok0 = dnsd.stat("tls.handshakes.ok");
    // A blocked source is closed before the handshake: no handshake, counted as blocked.
    let blocked: IpAddr = "127.91.0.7".parse().unwrap();
    let (ok, out) = dnsd.ctl(&["block", "add", &blocked.to_string(), "--force"]);
    assert!(ok, "{out}");
    let e = DotConn::connect(Some(blocked), tls, &ca.pem(), "dns.test");
    assert!(e.is_err(), "a blocked source got a TLS connection");
    assert!(dnsd.stat("drops.blocked") >= 1);
    assert_eq!(dnsd.stat("tls.handshakes.ok"), ok0);
    // Its neighbour is served.
    let mut c = DotConn::connect(
        Some("127.91.0.8".parse().unwrap()),
        tls,
        &ca.pem(),
        "dns.test",
    )
    .expect("neighbour");
    let q = build_query(1, "www.example.com.", T::A, &QueryOpts::udp());
    assert!(c.exchange(&q).unwrap().is_some());
    // Two connections from one source at most: the third is closed.
    let src: IpAddr = "127.91.0.9".parse().unwrap();
    let mut a = DotConn::connect(Some(src), tls, &ca.pem(), "dns.test").unwrap();
    let mut b = DotConn::connect(Some(src), tls, &ca.pem(), "dns.test").unwrap();
    assert!(a.exchange(&q).unwrap().is_some() && b.exchange(&q).unwrap().is_some());
    let third = DotConn::connect(Some(src), tls, &ca.pem(), "dns.test")
        .and_then(|mut c| c.exchange(&q).map_err(|e| e.to_string()));
    assert!(
        matches!(third, Err(_) | Ok(None)),
        "a third connection of one source was served"
    );
    assert!(dnsd.stat("drops.tcp_limit") >= 1);
    drop((a, b));
    // A connection that never starts its handshake is closed after the idle time.
    let mut idle = tcp_from(Some("127.91.0.10".parse().unwrap()), tls).unwrap();
    let t0 = Instant::now();
    let mut buf = [0u8; 1];
    let n = std::io::Read::read(&mut idle, &mut buf).unwrap_or(0);
    assert_eq!(n, 0, "closed, nothing sent");
    assert!(
        t0.elapsed() < Duration::from_secs(4),
        "closed after the idle time"
    );
    assert!(eventually(2, || dnsd.stat("tls.handshakes.timeout") >= 1));
    // A client that is not speaking TLS fails its handshake, counted.
    let mut plain = tcp_from(None, tls).unwrap();
    let _ = std::io::Write::write_all(&mut plain, &palisade_tests::client::frame(&q));
    let _ = std::io::Read::read(&mut plain, &mut buf);
    assert!(eventually(2, || dnsd.stat("tls.handshakes.failed") >= 1));
}

#[test]
fn a_reload_takes_a_new_pair_and_keeps_the_last_good_one_over_a_bad_one() {
    let dir = tempfile::tempdir().unwrap();
    let ca = pki(dir.path());
    let tls = tls_addr();
    let dnsd = dnsd_with_tls(dir.path(), tls, &[], "");
    let first = DotConn::connect(None, tls, &ca.pem(), "dns.test")
        .unwrap()
        .leaf();
    // A key that is not the certificate's: refused, named, the running pair kept.
    let other = ca.leaf(&["dns.test"]);
    std::fs::write(dir.path().join("dns.key"), &other.key).unwrap();
    let (ok, out) = dnsd.ctl(&["reload"]);
    assert!(!ok, "a bad pair was accepted: {out}");
    assert!(out.contains("dns.key"), "the error names the file: {out}");
    let mut c = DotConn::connect(None, tls, &ca.pem(), "dns.test").expect("still serving");
    assert_eq!(c.leaf(), first, "the last good pair serves");
    let q = build_query(1, "www.example.com.", T::A, &QueryOpts::udp());
    assert!(c.exchange(&q).unwrap().is_some());
    assert_eq!(dnsd.stat("tls.reload_failures"), 1);
    // The whole new pair: new handshakes use it, the open connection goes on.
    std::fs::write(dir.path().join("dns.crt"), &other.cert).unwrap();
    let (ok, out) = dnsd.ctl(&["reload"]);
    assert!(ok, "{out}");
    let d = DotConn::connect(None, tls, &ca.pem(), "dns.test").unwrap();
    assert_eq!(d.leaf(), Some(other.der()), "the new pair serves");
    assert!(c.exchange(&q).unwrap().is_some(), "open connections go on");
    // An expired pair serves (as Knot and nginx serve one) but the reload says so, and the
    // metrics show its end.
    let mut old = rcgen::CertificateParams::new(vec!["dns.test".to_string()]).unwrap();
    old.not_before = rcgen::date_time_ymd(2019, 1, 1);
    old.not_after = rcgen::date_time_ymd(2020, 2, 1);
    ca.sign(old).write(dir.path(), "dns");
    let (ok, out) = dnsd.ctl(&["reload"]);
    assert!(ok, "{out}");
    assert!(
        out.contains("dns.crt: the certificate expired at 2020-02-01"),
        "{out}"
    );
    assert_eq!(dnsd.stat("tls.cert_not_after"), 1_580_515_200);
}

/// A BIND primary of example.com. answering zone transfers over TLS on its own port with
/// a pair for `primary.test`: (BIND, its TLS address).
fn bind_xot_primary(dir: &Path, ca: &Ca) -> (Bind, SocketAddr) {
    ca.leaf(&["primary.test"]).write(dir, "primary");
    let zone = Zone::data("example.com.");
    let tls_port = net::free_port(std::net::Ipv4Addr::LOCALHOST);
    let d = dir.to_path_buf();
    let bind = Bind::start_raw(
        std::slice::from_ref(&zone),
        |_, addr| {
            vec![
                format!("listen-on port {tls_port} tls xot {{ {}; }};", addr.ip()),
                "allow-transfer { any; };".into(),
            ]
        },
        |_, _| {
            format!(
                "tls xot {{ cert-file \"{0}/primary.crt\"; key-file \"{0}/primary.key\"; }};\n\
                 zone \"example.com\" {{ type primary; file \"{1}\"; }};\n",
                d.display(),
                zone.file.display()
            )
        },
    );
    let tls = SocketAddr::from(([127, 0, 0, 1], tls_port));
    (bind, tls)
}

#[test]
fn dnsd_transfers_from_a_bind_primary_over_tls_and_refuses_a_wrong_name_or_pin() {
    if !Bind::available() {
        palisade_tests::skipped("named is not installed");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let ca = pki(dir.path());
    let (_bind, primary) = bind_xot_primary(dir.path(), &ca);
    let pin = openssl_pin(&dir.path().join("primary.crt"));
    // One secondary zone per way of checking the primary: the good ones transfer, the
    // wrong ones never do (and never fall back to cleartext).
    let ca_file = dir.path().join("ca.pem");
    let zones = [
        (
            "by-name",
            format!(
                "name = \"primary.test\", ca_file = \"{}\"",
                ca_file.display()
            ),
        ),
        ("by-pin", format!("pin_sha256 = [\"{pin}\"]")),
        (
            "wrong-name",
            format!("name = \"other.test\", ca_file = \"{}\"", ca_file.display()),
        ),
        (
            "wrong-pin",
            "pin_sha256 = [\"47DEQpj8HBSa+/TImW+5JCeuQeRkm5NMpJWZG3hSuFU=\"]".to_string(),
        ),
    ];
    // Four zones of one origin cannot be served by one dnsd: one dnsd each.
    let mut results = Vec::new();
    for (name, check) in &zones {
        let block = format!(
            "\n[[zone]]\norigin = \"example.com.\"\nfile = \"{}\"\nprimaries = [\"tls:{primary}\"]\n\
             transfer_tls = {{ {check} }}\n",
            dir.path().join(format!("{name}.zone")).display()
        );
        let dnsd = Dnsd::builder()
            .zone(Zone::data("example.net."))
            .raw(&block)
            .start();
        // The good ones transfer within a second or two; the wrong ones are given time to.
        let served = eventually(if name.starts_with("by-") { 10 } else { 3 }, || {
            let q = build_query(9, "example.com.", T::SOA, &QueryOpts::udp());
            udp_exchange(dnsd.addr(), &q, Duration::from_secs(1))
                .ok()
                .flatten()
                .and_then(|r| RawMsg::parse(&r).ok())
                .is_some_and(|m| m.rcode() == rcode::NOERROR && m.counts[1] == 1)
        });
        let (_, zones_out) = dnsd.ctl(&["zones"]);
        results.push((*name, served, zones_out, dnsd.log()));
    }
    for (name, served, zones_out, log) in &results {
        let good = name.starts_with("by-");
        assert_eq!(*served, good, "{name}: served {served}\n{zones_out}\n{log}");
        if !good {
            assert!(log.contains("TLS"), "{name}: the failure says TLS:\n{log}");
            assert!(
                zones_out.contains("TLS"),
                "{name}: ctl zones says why:\n{zones_out}"
            );
        }
    }
}

#[test]
fn a_bind_secondary_transfers_from_dnsd_over_tls_while_tls_only_allows_refuse_tcp() {
    if !Bind::available() {
        palisade_tests::skipped("named is not installed");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    pki(dir.path());
    let tls = SocketAddr::from((
        [127, 0, 0, 1],
        net::free_port(std::net::Ipv4Addr::LOCALHOST),
    ));
    let dnsd = Dnsd::builder()
        .zone(Zone {
            options: vec!["allow_transfer = [\"tls:127.0.0.0/8\"]".into()],
            ..Zone::data("example.com.")
        })
        .at(SocketAddr::from((
            [127, 0, 0, 1],
            net::free_port(std::net::Ipv4Addr::LOCALHOST),
        )))
        .server_option(&format!(
            "tls_listen = [\"{tls}\"]\ntls_cert = \"{0}/dns.crt\"\ntls_key = \"{0}/dns.key\"",
            dir.path().display()
        ))
        .start();
    // Over TCP the allowed prefix is refused; over TLS it transfers.
    let ip = dnsd.addr().ip().to_string();
    let out = kdig(&[
        &format!("@{ip}"),
        "-p",
        &dnsd.addr().port().to_string(),
        "example.com.",
        "AXFR",
    ]);
    assert!(
        out.contains("REFUSED") || out.contains("failed"),
        "AXFR over TCP: {out}"
    );
    let out = kdig(&[
        &format!("@{ip}"),
        "-p",
        &tls.port().to_string(),
        &format!("+tls-ca={}/ca.pem", dir.path().display()),
        "+tls-hostname=dns.test",
        "example.com.",
        "AXFR",
    ]);
    assert!(out.contains("www.example.com."), "AXFR over TLS: {out}");
    // BIND as a secondary over TLS, verifying dnsd's certificate.
    let zone = Zone::data("example.com.");
    let d = dir.path().to_path_buf();
    let bind = Bind::start_raw(
        std::slice::from_ref(&zone),
        |_, _| vec![],
        |bdir, _| {
            format!(
                "tls to-dnsd {{ ca-file \"{0}/ca.pem\"; remote-hostname \"dns.test\"; }};\n\
                 zone \"example.com\" {{ type secondary; file \"{1}/example.com.copy\"; \
                 primaries {{ {2} port {3} tls to-dnsd; }}; }};\n",
                d.display(),
                bdir.display(),
                tls.ip(),
                tls.port()
            )
        },
    );
    let q = build_query(3, "www.example.com.", T::A, &QueryOpts::udp());
    let r = RawMsg::parse(
        &udp_exchange(bind.addr(), &q, Duration::from_secs(2))
            .unwrap()
            .unwrap(),
    )
    .unwrap();
    assert_eq!(r.rcode(), rcode::NOERROR);
    assert_eq!(
        r.counts[1] as usize, 1,
        "BIND serves what it transferred over TLS"
    );
    // It only knows dnsd's TLS port, and says it transferred over TLS.
    let log = bind.log();
    assert!(log.contains("Transfer status: success"), "{log}");
    assert!(
        log.contains(&format!(
            "from {}#{}: Transfer completed",
            tls.ip(),
            tls.port()
        )),
        "{log}"
    );
    assert!(
        dnsd.stat("transfer.out.axfr") >= 2,
        "kdig's AXFR and BIND's"
    );
}

/// Where `scripts/install-deps` puts dnspython with aioquic (an env var may say otherwise).
fn doq_python_path() -> Option<std::path::PathBuf> {
    let p = std::env::var_os("PALISADE_DOQ_PY")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| std::path::PathBuf::from("/opt/palisade-test-doq"));
    p.join("aioquic").is_dir().then_some(p)
}

/// dnsd with a QUIC listener (the test PKI's pair) and more `[server]` lines, and where
/// dnspython with aioquic is: (python path, the PKI's directory, the QUIC address, dnsd);
/// None (skipped) without them.
fn doq_server(
    server: &[&str],
) -> Option<(std::path::PathBuf, tempfile::TempDir, SocketAddr, Dnsd)> {
    doq_server_with(server, |b, _| b.zone(Zone::data("example.com.")))
}

/// As [`doq_server`], the builder given to `more` (with the PKI's directory, where it may
/// write files the config names) before it starts.
fn doq_server_with(
    server: &[&str],
    more: impl FnOnce(
        palisade_tests::servers::DnsdBuilder,
        &Path,
    ) -> palisade_tests::servers::DnsdBuilder,
) -> Option<(std::path::PathBuf, tempfile::TempDir, SocketAddr, Dnsd)> {
    let Some(py) = doq_python_path() else {
        palisade_tests::skipped("dnspython with aioquic is not installed (scripts/install-deps)");
        return None;
    };
    let dir = tempfile::tempdir().unwrap();
    pki(dir.path());
    let ip = net::test_ip();
    let quic = SocketAddr::from((ip, net::free_port(ip)));
    let mut b = Dnsd::builder()
        .at(SocketAddr::from((ip, net::free_port(ip))))
        .server_option(&format!(
            "quic_listen = [\"{quic}\"]\ntls_cert = \"{0}/dns.crt\"\ntls_key = \"{0}/dns.key\"",
            dir.path().display()
        ));
    for l in server {
        b = b.server_option(l);
    }
    b = more(b, dir.path());
    Some((py, dir, quic, b.start()))
}

/// Asks `name`/`qtype` over QUIC (dnspython + aioquic, verifying `dns.test` against `ca`) from
/// `src`, and the same query over UDP to `udp`: "same", "differ ..." or "error ...".
const DOQ_CLIENT: &str = r#"
import sys, dns.message, dns.query
quic, udp, ca, src, name, qtype = sys.argv[1:7]
(qa, qp), (ua, up) = quic.rsplit(":", 1), udp.rsplit(":", 1)
q = dns.message.make_query(name, qtype, use_edns=0, payload=1232)
q.id = 0
try:
    r = dns.query.quic(q, qa, port=int(qp), timeout=3, verify=ca, server_hostname="dns.test",
                       source=src or None)
except Exception as e:
    print("error", type(e).__name__, e)
    sys.exit(0)
u = dns.query.udp(q, ua, port=int(up), timeout=3)
print("same" if r.to_text() == u.to_text() else "differ\n" + r.to_text() + "\n--\n" + u.to_text())
"#;

#[test]
fn doq_answers_as_udp_does_and_a_blocked_source_gets_no_handshake() {
    let Some((py, dir, quic, dnsd)) = doq_server(&[]) else {
        return;
    };
    let ask = |src: &str, name: &str, qtype: &str| {
        let out = std::process::Command::new("/usr/bin/python3")
            .arg("-c")
            .arg(DOQ_CLIENT)
            .args([
                &quic.to_string(),
                &dnsd.addr().to_string(),
                &dir.path().join("ca.pem").display().to_string(),
                src,
                name,
                qtype,
            ])
            .env("PYTHONPATH", &py)
            .output()
            .expect("run python3");
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr)
    };
    for (name, qtype) in [
        ("www.example.com.", "A"),
        ("www.example.com.", "AAAA"),
        ("nothere.example.com.", "A"),
        ("example.com.", "MX"),
    ] {
        let out = ask("", name, qtype);
        assert_eq!(out.trim(), "same", "{name} {qtype}: {out}");
    }
    assert!(dnsd.stat("quic.handshakes.ok") >= 4);
    assert!(dnsd.stat("stream.quic.queries") >= 4);
    assert_eq!(dnsd.stat("stream.tls.queries"), 0);
    // A blocked source is ignored before the handshake: no answer, no handshake.
    let ok = dnsd.stat("quic.handshakes.ok");
    let (done, out) = dnsd.ctl(&["block", "add", "127.91.1.7", "--force"]);
    assert!(done, "{out}");
    let out = ask("127.91.1.7", "www.example.com.", "A");
    assert!(
        out.starts_with("error"),
        "a blocked source was answered: {out}"
    );
    assert!(dnsd.stat("drops.blocked") >= 1);
    assert_eq!(dnsd.stat("quic.handshakes.ok"), ok);
    // Its neighbour is served.
    let out = ask("127.91.1.8", "www.example.com.", "A");
    assert_eq!(out.trim(), "same", "{out}");
}

/// Sends one DoQ stream shaped by argv[4] (`ok`; `nonzero-id`; `short`: a length past the
/// bytes sent before FIN; `long`: bytes past the length) to argv[1]:argv[2], verifying
/// `dns.test` against argv[3]; prints "answer N" (bytes on the stream), "closed CODE" (the
/// connection closed with CODE) or "timeout".
const DOQ_RAW: &str = r#"
import asyncio, struct, sys
import dns.edns, dns.message
from aioquic.asyncio import connect
from aioquic.asyncio.protocol import QuicConnectionProtocol
from aioquic.quic.configuration import QuicConfiguration
from aioquic.quic.events import ConnectionTerminated, StreamDataReceived
host, port, ca, case = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]
class P(QuicConnectionProtocol):
    def __init__(self, *a, **k):
        super().__init__(*a, **k)
        self.done = asyncio.get_running_loop().create_future()
        self.data = b""
    def quic_event_received(self, ev):
        if isinstance(ev, StreamDataReceived):
            self.data += ev.data
            if ev.end_stream and not self.done.done():
                self.done.set_result("answer %d" % len(self.data))
        elif isinstance(ev, ConnectionTerminated) and not self.done.done():
            self.done.set_result("closed %d" % ev.error_code)
async def main():
    cfg = QuicConfiguration(alpn_protocols=["doq"], is_client=True, server_name="dns.test")
    cfg.load_verify_locations(ca)
    async with connect(host, port, configuration=cfg, create_protocol=P) as p:
        q = dns.message.make_query("www.example.com.", "A")
        if case == "keepalive":
            q.use_edns(0, options=[dns.edns.GenericOption(11, b"")])
        q.id = 0x1234 if case == "nonzero-id" else 0
        w = q.to_wire()
        n = {"short": len(w) + 10, "long": len(w) - 5}.get(case, len(w))
        sid = p._quic.get_next_available_stream_id()
        p._quic.send_stream_data(sid, struct.pack(">H", n) + w, end_stream=True)
        p.transmit()
        try:
            print(await asyncio.wait_for(p.done, 3))
        except asyncio.TimeoutError:
            print("timeout")
asyncio.run(main())
"#;

#[test]
fn a_malformed_doq_stream_closes_its_connection_with_doq_protocol_error() {
    let Some((py, dir, quic, dnsd)) = doq_server(&[]) else {
        return;
    };
    let send = |case: &str| {
        let out = std::process::Command::new("/usr/bin/python3")
            .arg("-c")
            .arg(DOQ_RAW)
            .args([
                &quic.ip().to_string(),
                &quic.port().to_string(),
                &dir.path().join("ca.pem").display().to_string(),
                case,
            ])
            .env("PYTHONPATH", &py)
            .output()
            .expect("run python3");
        String::from_utf8_lossy(&out.stdout).trim().to_owned()
            + &String::from_utf8_lossy(&out.stderr)
    };
    let ok = send("ok");
    assert!(ok.starts_with("answer "), "a well-formed stream: {ok}");
    let malformed = dnsd.stat("drops.malformed");
    // RFC 9250 §4.3.3 and §4.2.1: DOQ_PROTOCOL_ERROR is 0x2; §5.5.2: so is a message with
    // edns-tcp-keepalive (it was answered, the option echoed).
    for case in ["nonzero-id", "short", "long", "keepalive"] {
        assert_eq!(send(case), "closed 2", "{case}");
    }
    assert_eq!(dnsd.stat("drops.malformed"), malformed + 4, "each counted");
    // The server goes on: a new connection is answered.
    let again = send("ok");
    assert_eq!(again, ok, "after the malformed streams");
}

/// Holds argv[4] DoQ connections to argv[1]:argv[2] (`dns.test` verified against argv[3]),
/// each answered once and then silent (argv[6] `silent`) or holding a stream begun and never
/// finished (`unfinished`); prints "ready N" (N answered), waits for a line on
/// stdin, then opens argv[5] new connections one after another, each asking once, waits a
/// second and prints "new A closed C": A new ones answered, C of the silent ones closed by
/// the server.
const DOQ_HOLD: &str = r#"
import asyncio, contextlib, struct, sys
import dns.message
from aioquic.asyncio import connect
from aioquic.asyncio.protocol import QuicConnectionProtocol
from aioquic.quic.configuration import QuicConfiguration
from aioquic.quic.events import ConnectionTerminated, StreamDataReceived
host, port, ca = sys.argv[1], int(sys.argv[2]), sys.argv[3]
silent, new, mode = int(sys.argv[4]), int(sys.argv[5]), sys.argv[6]
class P(QuicConnectionProtocol):
    def __init__(self, *a, **k):
        super().__init__(*a, **k)
        self.answers = asyncio.Queue()
        self.closed = False
    def quic_event_received(self, ev):
        if isinstance(ev, StreamDataReceived) and ev.end_stream:
            self.answers.put_nowait(True)
        elif isinstance(ev, ConnectionTerminated):
            self.closed = True
            self.answers.put_nowait(False)
async def ask(p):
    q = dns.message.make_query("www.example.com.", "A")
    q.id = 0
    w = q.to_wire()
    sid = p._quic.get_next_available_stream_id()
    p._quic.send_stream_data(sid, struct.pack(">H", len(w)) + w, end_stream=True)
    p.transmit()
    try:
        return await asyncio.wait_for(p.answers.get(), 3)
    except asyncio.TimeoutError:
        return False
async def open_one(st, cfg, hold=False):
    try:
        p = await asyncio.wait_for(
            st.enter_async_context(connect(host, port, configuration=cfg, create_protocol=P)), 3)
    except Exception:
        return None
    if not await ask(p):
        return None
    if hold and mode == "unfinished":
        # A stream with the start of a query and no end: held open, never finished.
        sid = p._quic.get_next_available_stream_id()
        p._quic.send_stream_data(sid, b"\x00\x20\x00\x00\x01", end_stream=False)
        p.transmit()
    return p
async def main():
    cfg = QuicConfiguration(alpn_protocols=["doq"], is_client=True, server_name="dns.test",
                            idle_timeout=60)
    cfg.load_verify_locations(ca)
    async with contextlib.AsyncExitStack() as st:
        olds = [await open_one(st, cfg, hold=True) for _ in range(silent)]
        print("ready", sum(1 for p in olds if p), flush=True)
        await asyncio.get_running_loop().run_in_executor(None, sys.stdin.readline)
        answered = 0
        for _ in range(new):
            answered += await open_one(st, cfg) is not None
        await asyncio.sleep(1)
        print("new", answered, "closed", sum(1 for p in olds if p and p.closed), flush=True)
        sys.stdout.flush()
        import os
        os._exit(0)
asyncio.run(main())
"#;

/// A TCP client of `addr` asked www.example.com. A with message ID `id` and answered; its
/// connection, held open (from an address of its own: a source holding its share of a full
/// table makes no room for more).
fn answered_and_held(addr: SocketAddr, id: u16) -> std::net::TcpStream {
    use palisade_tests::client::{frame, tcp_read_msg};
    use std::io::Write;
    let q = palisade_tests::wire::build_query(
        id,
        "www.example.com.",
        palisade_tests::wire::qtype::A,
        &palisade_tests::wire::QueryOpts::edns(1232),
    );
    let sock = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).unwrap();
    sock.bind(&SocketAddr::from((palisade_tests::net::test_ip(), 0)).into())
        .unwrap();
    sock.connect(&addr.into()).unwrap();
    let mut tcp: std::net::TcpStream = sock.into();
    tcp.set_read_timeout(Some(Duration::from_secs(3))).unwrap();
    tcp.write_all(&frame(&q)).unwrap();
    let a = tcp_read_msg(&mut tcp).unwrap().expect("a TCP answer");
    assert_eq!(&a[..2], &id.to_be_bytes());
    tcp
}

/// DoQ connections take their slots in the TCP table and give them up as TCP connections
/// do: with the table full of silent DoQ connections, a new TCP client and new DoQ clients
/// are each answered, a silent connection closed for each, and the table never holds more
/// than `tcp_max_connections` (`mode` as DOQ_HOLD's).
#[test]
fn silent_doq_connections_make_room_for_new_clients_of_either_kind() {
    doq_connections_make_room("silent");
}

/// A DoQ connection that holds a stream open without finishing its query (or reading its
/// answer) waits on its client as a silent one does: it makes room too.
#[test]
fn doq_connections_holding_unfinished_streams_make_room_too() {
    doq_connections_make_room("unfinished");
}

fn doq_connections_make_room(mode: &str) {
    const MAX: usize = 8;
    let max = format!("tcp_max_connections = {MAX}");
    let opts = [
        max.as_str(),
        "tcp_max_per_source = 64",
        // Neither idle time ends a silent connection within the test: only eviction does.
        "tcp_idle_timeout_ms = 30000",
        "tcp_pressed_idle_timeout_ms = 20000",
    ];
    let Some((py, dir, quic, dnsd)) = doq_server(&opts) else {
        return;
    };
    use std::io::{BufRead, Write};
    let mut child = std::process::Command::new("/usr/bin/python3")
        .arg("-c")
        .arg(DOQ_HOLD)
        .args([
            &quic.ip().to_string(),
            &quic.port().to_string(),
            &dir.path().join("ca.pem").display().to_string(),
            &MAX.to_string(),
            "3",
            mode,
        ])
        .env("PYTHONPATH", &py)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("run python3");
    let mut out = std::io::BufReader::new(child.stdout.take().unwrap());
    let mut line = String::new();
    out.read_line(&mut line).unwrap();
    assert_eq!(line.trim(), format!("ready {MAX}"), "{}", dnsd.log());
    assert_eq!(dnsd.stat("tcp.connections"), MAX as u64);
    // The last answers out, every silent connection is one that may go.
    std::thread::sleep(Duration::from_millis(300));
    // A TCP client: answered, in the slot of a silent DoQ connection (and held open).
    let tcp = answered_and_held(dnsd.addr(), 7);
    assert_eq!(dnsd.stat("tcp.evicted"), 1);
    // Three new DoQ clients, one after another.
    writeln!(child.stdin.as_mut().unwrap()).unwrap();
    line.clear();
    out.read_line(&mut line).unwrap();
    let _ = child.wait();
    drop(tcp);
    assert_eq!(
        line.trim(),
        "new 3 closed 4",
        "evicted {}, connections {}, limit drops {}\n{}",
        dnsd.stat("tcp.evicted"),
        dnsd.stat("tcp.connections"),
        dnsd.stat("drops.tcp_limit"),
        dnsd.log()
    );
    assert_eq!(dnsd.stat("tcp.evicted"), 4);
    assert!(dnsd.stat("tcp.connections") <= MAX as u64);
}

/// Handshakes that never finish (a connection to the DoT port that sends nothing, or half a
/// ClientHello) wait on their clients as silent connections do: with the table full of
/// them, a new TCP client is answered in the slot of one.
#[test]
fn unfinished_dot_handshakes_make_room_for_new_clients() {
    let dir = tempfile::tempdir().unwrap();
    pki(dir.path());
    let tls = tls_addr();
    const MAX: usize = 8;
    let dnsd = dnsd_with_tls(
        dir.path(),
        tls,
        &[
            &format!("tcp_max_connections = {MAX}"),
            "tcp_max_per_source = 64",
            "tcp_idle_timeout_ms = 30000",
            "tcp_pressed_idle_timeout_ms = 20000",
        ],
        "",
    );
    use std::io::Write;
    // Half of them silent, half with the start of a ClientHello.
    let held: Vec<std::net::TcpStream> = (0..MAX)
        .map(|i| {
            let mut s = std::net::TcpStream::connect(tls).unwrap();
            if i % 2 == 1 {
                s.write_all(&[0x16, 0x03, 0x01, 0x02, 0x00, 0x01, 0x00])
                    .unwrap();
            }
            s
        })
        .collect();
    assert!(
        eventually(5, || dnsd.stat("tcp.connections") == MAX as u64),
        "{} open\n{}",
        dnsd.stat("tcp.connections"),
        dnsd.metrics()
    );
    // Three TCP clients, each answered and held open: each in the slot of a handshake.
    let mut clients = Vec::new();
    for i in 0..3u16 {
        let tcp = answered_and_held(dnsd.addr(), i);
        assert_eq!(dnsd.stat("tcp.evicted"), i as u64 + 1);
        assert!(dnsd.stat("tcp.connections") <= MAX as u64);
        clients.push(tcp);
    }
    drop(held);
}

/// Pipelined queries whose answers fill the socket are all answered as the client reads
/// them: none waits in the TLS session's buffer for the idle time (they did, for 10 s, when a
/// write left records buffered behind a full socket and nothing flushed them).
#[test]
fn pipelined_dot_answers_past_a_full_socket_all_arrive_as_the_client_reads() {
    let dir = tempfile::tempdir().unwrap();
    let ca = pki(dir.path());
    let tls = tls_addr();
    // A TXT RRset of about 43 KB.
    let mut zone = String::from(
        "$ORIGIN big.test.\n$TTL 3600\n@ SOA ns1 h 1 7200 3600 1209600 300\n@ NS ns1\nns1 A 192.0.2.1\n",
    );
    for i in 0..200 {
        zone.push_str(&format!("big TXT \"{i:03}{}\"\n", "x".repeat(200)));
    }
    let file = dir.path().join("big.test.zone");
    std::fs::write(&file, zone).unwrap();
    let ip = tls.ip();
    let dnsd = Dnsd::builder()
        .zone(Zone::new("big.test.", &file))
        .at(SocketAddr::new(ip, net::free_port(ip_v4(ip))))
        .server_option(&format!("tls_listen = [\"{tls}\"]"))
        .server_option(&format!(
            "tls_cert = \"{}\"\ntls_key = \"{}\"",
            dir.path().join("dns.crt").display(),
            dir.path().join("dns.key").display()
        ))
        .server_option("tcp_idle_timeout_ms = 30000")
        .start();
    let mut c = DotConn::connect(None, tls, &ca.pem(), "dns.test").expect("handshake");
    // A client that reads late through a small buffer: the server's writes find the socket
    // full and its last answers wait in the TLS session.
    c.set_receive_buffer(4096).unwrap();
    let n = 30u16;
    for i in 0..n {
        let (name, qtype) = if i % 4 == 0 {
            ("big.big.test.", T::TXT)
        } else {
            ("ns1.big.test.", T::A)
        };
        c.send(&build_query(1000 + i, name, qtype, &QueryOpts::edns(1232)))
            .unwrap();
    }
    std::thread::sleep(Duration::from_millis(500));
    // Then it reads (a window grown from 4 KiB takes about a second per 43 KB answer, plain
    // TCP as well; the stall was the idle time).
    c.set_receive_buffer(1 << 20).unwrap();
    let t0 = Instant::now();
    let mut ids = Vec::new();
    for _ in 0..n {
        // Each read waits at most 5 s (the client's timeout), far below the idle time.
        let m = c.recv().expect("an answer within 5 s").expect("open");
        ids.push(u16::from_be_bytes([m[0], m[1]]));
    }
    ids.sort_unstable();
    assert_eq!(ids, (1000..1000 + n).collect::<Vec<_>>());
    println!("{n} pipelined answers read in {:?}", t0.elapsed());
    drop(dnsd);
}

/// A padded query over TLS or QUIC gets a response padded to a multiple of 468 octets
/// (RFC 7830 §4, RFC 8467 §4.1), the Padding option last; over plain TCP, or unpadded, none.
#[test]
fn padded_queries_over_tls_and_quic_get_padded_answers() {
    let dir = tempfile::tempdir().unwrap();
    let ca = pki(dir.path());
    let tls = tls_addr();
    let ip = tls.ip();
    let quic = SocketAddr::from((ip, net::free_port(ip_v4(ip))));
    let dnsd = dnsd_with_tls(
        dir.path(),
        tls,
        &[&format!("quic_listen = [\"{quic}\"]")],
        "",
    );
    let padded = QueryOpts {
        options: vec![(12, vec![0; 64])],
        ..QueryOpts::edns(1232)
    };
    let padding = |m: &[u8]| {
        let r = RawMsg::parse(m).unwrap();
        let opt = r.opt.expect("an OPT");
        let pos = opt.options.iter().position(|(code, _)| *code == 12);
        (
            pos.is_some_and(|p| p + 1 == opt.options.len()),
            pos.is_some(),
        )
    };
    let mut c = DotConn::connect(None, tls, &ca.pem(), "dns.test").expect("handshake");
    for (name, qtype) in [
        ("www.example.com.", T::A),
        ("nothere.example.com.", T::A),
        ("example.net.", T::A),
    ] {
        let m = c
            .exchange(&build_query(1, name, qtype, &padded))
            .unwrap()
            .unwrap();
        assert_eq!(m.len() % 468, 0, "{name}: {} octets over TLS", m.len());
        assert_eq!(padding(&m), (true, true), "{name}: Padding last");
    }
    let plain = c
        .exchange(&build_query(
            2,
            "www.example.com.",
            T::A,
            &QueryOpts::edns(1232),
        ))
        .unwrap()
        .unwrap();
    assert!(!padding(&plain).1, "an unpadded query");
    let tcp = palisade_tests::client::tcp_exchange(
        dnsd.addr(),
        &build_query(3, "www.example.com.", T::A, &padded),
        Duration::from_secs(2),
    )
    .unwrap()
    .unwrap();
    assert!(!padding(&tcp).1, "plain TCP is not padded");
    // QUIC, through kdig.
    let out = kdig(&[
        &format!("@{ip}"),
        "-p",
        &quic.port().to_string(),
        "+quic",
        "+padding=468",
        "www.example.com.",
        "A",
    ]);
    assert!(out.contains("Received 468 B"), "{out}");
}

/// A DoQ client that completes its handshake from argv[4], asks one query from there, then
/// sends argv[6] more queries (ANY of example.com) on the same connection from a socket bound
/// to argv[5] — a forged source that never reads. Prints "own N" (answers to its own address)
/// and "forged M" (answers that reached the forged address).
const DOQ_MIGRATE: &str = r#"
import socket, ssl, struct, sys, time
import dns.message
from aioquic.quic.configuration import QuicConfiguration
from aioquic.quic.connection import QuicConnection
from aioquic.quic.events import StreamDataReceived
host, port, ca, own, forged, n = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4], sys.argv[5], int(sys.argv[6])
cfg = QuicConfiguration(is_client=True, alpn_protocols=["doq"], server_name="dns.test")
cfg.load_verify_locations(ca)
conn = QuicConnection(configuration=cfg)
a = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); a.bind((own, 0)); a.settimeout(0.05)
v = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); v.bind((forged, 0)); v.settimeout(0.05)
conn.connect((host, port), now=time.time())
got = {"own": 0, "forged": 0}
def pump(out, secs):
    end = time.time() + secs
    while time.time() < end:
        for data, addr in conn.datagrams_to_send(now=time.time()):
            out.sendto(data, addr)
        for s, who in ((a, "own"), (v, "forged")):
            try:
                data, addr = s.recvfrom(65535)
            except socket.timeout:
                continue
            if who == "forged":
                got["forged"] += 1
                continue
            conn.receive_datagram(data, addr, now=time.time())
        t = conn.get_timer()
        if t is not None and time.time() >= t:
            conn.handle_timer(now=time.time())
        while (ev := conn.next_event()) is not None:
            if isinstance(ev, StreamDataReceived) and ev.end_stream:
                got["own"] += 1
def query(name, qtype):
    q = dns.message.make_query(name, qtype); q.id = 0
    w = q.to_wire()
    sid = conn.get_next_available_stream_id()
    conn.send_stream_data(sid, struct.pack("!H", len(w)) + w, end_stream=True)
pump(a, 1.0)
query("www.example.com.", "A")
pump(a, 1.0)
for _ in range(n):
    query("example.com.", "ANY")
    for data, addr in conn.datagrams_to_send(now=time.time()):
        v.sendto(data, addr)
    time.sleep(0.02)
pump(v, 1.5)
print("own", got["own"], "forged", got["forged"])
"#;

#[test]
fn a_doq_connection_never_moves_to_an_address_its_handshake_did_not_prove() {
    // Tenant 7 refuses ANY and blocks whoever asks it three times over a proven transport.
    let Some((py, dir, quic, dnsd)) = doq_server_with(&[], |b, dir| {
        std::fs::write(
            dir.join("rules.toml"),
            "[[tenant]]\nid = 7\n\
             escalate = { after = 3, window_secs = 60, block_secs = 600, on = [\"deny\"], dns = \"block_map\" }\n\
             [[tenant.rule]]\nname = \"no-any\"\naction = \"deny\"\nrcode = \"REFUSED\"\n\
             when = [{ attr = \"qtype\", one_of = [\"ANY\"] }]\n",
        )
        .unwrap();
        let mut com = Zone::data("example.com.");
        com.options.push("tenant = 7".into());
        b.zone(com).raw(&format!(
            "[rules]\nfile = \"{}\"",
            dir.join("rules.toml").display()
        ))
    }) else {
        return;
    };
    let (own, victim) = (net::test_ip(), net::test_ip());
    let out = std::process::Command::new("/usr/bin/python3")
        .arg("-c")
        .arg(DOQ_MIGRATE)
        .args([
            &quic.ip().to_string(),
            &quic.port().to_string(),
            &dir.path().join("ca.pem").display().to_string(),
            &own.to_string(),
            &victim.to_string(),
            "6",
        ])
        .env("PYTHONPATH", &py)
        .output()
        .expect("run python3");
    let text =
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    assert!(text.starts_with("own 1 "), "its own query answered: {text}");
    let (ok, list) = dnsd.ctl(&["block", "list"]);
    assert!(ok, "{list}");
    assert!(
        !list.contains(&victim.to_string()),
        "queries sent in the victim's name blocked it: {list}\n{text}"
    );
    assert_eq!(dnsd.stat("rules.escalated"), 0, "{text}");
    assert!(
        text.trim_end().ends_with("forged 0"),
        "nothing reached the forged address: {text}"
    );
}

/// Runs `script` in python3 with dnspython and aioquic from `py`, given `args`, its stdin and
/// stdout piped: the child and the first line it printed (trimmed).
fn python_child(
    py: &std::path::Path,
    script: &str,
    args: &[String],
) -> (std::process::Child, String) {
    use std::io::BufRead;
    let mut child = std::process::Command::new("/usr/bin/python3")
        .arg("-c")
        .arg(script)
        .args(args)
        .env("PYTHONPATH", py)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("run python3");
    let mut out = std::io::BufReader::new(child.stdout.take().unwrap());
    let mut line = String::new();
    out.read_line(&mut line).unwrap();
    (child, line.trim().to_string())
}

/// Begins DoQ handshakes to argv[1]:argv[2] and never finishes them: one from argv[3] (its
/// address unproven), then argv[5] from argv[4], each answering the server's Retry (its
/// address proven) and silent after; prints "retried R" (R of them were sent a Retry) and
/// holds them until stdin closes.
const DOQ_STALL: &str = r#"
import socket, ssl, sys, time
from aioquic.quic.configuration import QuicConfiguration
from aioquic.quic.connection import QuicConnection
host, port, a, b, n = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4], int(sys.argv[5])
held = []
def begin(src, answer_retry):
    cfg = QuicConfiguration(alpn_protocols=["doq"], is_client=True, server_name="dns.test")
    cfg.verify_mode = ssl.CERT_NONE
    c = QuicConnection(configuration=cfg)
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.bind((src, 0))
    s.settimeout(2)
    c.connect((host, port), now=time.time())
    for d, _ in c.datagrams_to_send(now=time.time()):
        s.sendto(d, (host, port))
    retried = False
    if answer_retry:
        try:
            data, _ = s.recvfrom(65536)
            retried = (data[0] & 0xf0) == 0xf0  # a long header of type Retry
            c.receive_datagram(data, (host, port), now=time.time())
            for d, _ in c.datagrams_to_send(now=time.time()):
                s.sendto(d, (host, port))
        except socket.timeout:
            pass
    held.append((s, c))
    return retried
begin(a, False)
time.sleep(0.3)
r = sum(begin(b, True) for _ in range(n))
print("retried", r, flush=True)
sys.stdin.read()
"#;

/// An address a Retry proved counts against `tcp_max_per_source` from its handshake on: one
/// source answering Retries and never finishing its handshakes holds at most its share of
/// the table (it held 455 places past a share of 16), the rest refused and counted.
#[test]
fn doq_handshakes_of_a_proven_address_count_against_its_share() {
    let opts = [
        // A Retry for every handshake past the first one under way (an eighth of 8).
        "tcp_max_connections = 8",
        "tcp_max_per_source = 2",
        "tcp_idle_timeout_ms = 30000",
        "tcp_pressed_idle_timeout_ms = 20000",
    ];
    let Some((py, _dir, quic, dnsd)) = doq_server(&opts) else {
        return;
    };
    let (mut child, line) = python_child(
        &py,
        DOQ_STALL,
        &[
            quic.ip().to_string(),
            quic.port().to_string(),
            net::test_ip().to_string(),
            net::test_ip().to_string(),
            "5".into(),
        ],
    );
    let refused = dnsd.stat("drops.tcp_limit");
    drop(child.stdin.take());
    let _ = child.wait();
    assert_eq!(line, "retried 5", "{}", dnsd.log());
    assert_eq!(
        refused,
        3,
        "two proven handshakes held, three refused: {}",
        dnsd.metrics()
    );
}

/// Begins argv[4] DoQ handshakes to argv[1]:argv[2] from argv[3] and never answers them (as
/// forged Initials, whose source never hears back); prints "begun" and holds them until stdin
/// closes.
const DOQ_FORGED: &str = r#"
import socket, ssl, sys, time
from aioquic.quic.configuration import QuicConfiguration
from aioquic.quic.connection import QuicConnection
host, port, src, n = sys.argv[1], int(sys.argv[2]), sys.argv[3], int(sys.argv[4])
held = []
for _ in range(n):
    cfg = QuicConfiguration(alpn_protocols=["doq"], is_client=True, server_name="dns.test")
    cfg.verify_mode = ssl.CERT_NONE
    c = QuicConnection(configuration=cfg)
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.bind((src, 0))
    c.connect((host, port), now=time.time())
    for d, _ in c.datagrams_to_send(now=time.time()):
        s.sendto(d, (host, port))
    held.append((s, c))
print("begun", flush=True)
sys.stdin.read()
"#;

/// An Initial whose address no Retry proved takes no place in the TCP/DoT/DoQ table until its
/// handshake proves it: forged Initials held places (128 at a table of 1,024, none of them a
/// client), pressed the table so that every quiet TCP client was cut at 1 s, and at a full
/// table evicted established connections — those of the address they named first.
#[test]
fn unproven_doq_handshakes_take_no_place_in_the_table() {
    let opts = [
        // Up to 8 unproven handshakes under way before a Retry (an eighth of 64).
        "tcp_max_connections = 64",
        "tcp_idle_timeout_ms = 30000",
    ];
    let Some((py, _dir, quic, dnsd)) = doq_server(&opts) else {
        return;
    };
    let (mut child, line) = python_child(
        &py,
        DOQ_FORGED,
        &[
            quic.ip().to_string(),
            quic.port().to_string(),
            net::test_ip().to_string(),
            "8".into(),
        ],
    );
    assert_eq!(line, "begun");
    std::thread::sleep(std::time::Duration::from_millis(500));
    let held = dnsd.stat("tcp.connections");
    drop(child.stdin.take());
    let _ = child.wait();
    assert_eq!(
        held,
        0,
        "places held by unproven handshakes: {}",
        dnsd.metrics()
    );
}

/// The kernel's drops (`/proc/net/udp`, its last column) on the UDP socket bound to `addr`.
fn proc_udp_drops(addr: std::net::SocketAddr) -> u64 {
    let std::net::IpAddr::V4(ip) = addr.ip() else {
        return 0;
    };
    let local = format!(
        "{:08X}:{:04X}",
        u32::from_le_bytes(ip.octets()),
        addr.port()
    );
    std::fs::read_to_string("/proc/net/udp")
        .unwrap_or_default()
        .lines()
        .filter(|l| l.split_whitespace().nth(1) == Some(local.as_str()))
        .filter_map(|l| l.split_whitespace().last()?.parse::<u64>().ok())
        .sum()
}

/// Datagrams the kernel drops on a DoQ socket's full queue are counted (quinn reads the
/// socket: 11,363 drops under a flood of Initials showed nowhere in dnsd's metrics).
#[test]
fn kernel_drops_on_the_doq_socket_are_counted() {
    let Some((_py, _dir, quic, dnsd)) = doq_server(&[]) else {
        return;
    };
    // Bursts of junk from four sockets until the queue overflows (bounded).
    let end = std::time::Instant::now() + std::time::Duration::from_secs(5);
    while proc_udp_drops(quic) == 0 && std::time::Instant::now() < end {
        std::thread::scope(|sc| {
            for _ in 0..4 {
                sc.spawn(|| {
                    let s = std::net::UdpSocket::bind((net::test_ip(), 0)).unwrap();
                    for _ in 0..5_000 {
                        let _ = s.send_to(&[0x40; 1200], quic);
                    }
                });
            }
        });
    }
    let kernel = proc_udp_drops(quic);
    if kernel == 0 {
        palisade_tests::skipped("no drop could be made on the DoQ socket here");
        return;
    }
    let counted = dnsd.stat("quic.kernel_drops");
    assert!(
        counted >= kernel,
        "the kernel dropped {kernel}, dnsd counted {counted}"
    );
}

/// Opens argv[4] DoQ connections to argv[1]:argv[2] (verified against argv[3]), each with 32
/// streams carrying 16,000 bytes of a 16 KiB query it never finishes; prints "held" and keeps
/// them open for argv[5] seconds.
const DOQ_FAT: &str = r#"
import asyncio, ssl, struct, sys
from aioquic.asyncio import connect
from aioquic.quic.configuration import QuicConfiguration
host, port, ca, conns, secs = sys.argv[1], int(sys.argv[2]), sys.argv[3], int(sys.argv[4]), float(sys.argv[5])
async def one():
    cfg = QuicConfiguration(is_client=True, alpn_protocols=["doq"], server_name="dns.test")
    cfg.load_verify_locations(ca)
    async with connect(host, port, configuration=cfg) as p:
        for _ in range(32):
            sid = p._quic.get_next_available_stream_id()
            p._quic.send_stream_data(sid, struct.pack(">H", 16384) + bytes(15998), end_stream=False)
        p.transmit()
        await asyncio.sleep(secs)
async def main():
    tasks = [asyncio.create_task(one()) for _ in range(conns)]
    await asyncio.sleep(1.5)
    print("held", flush=True)
    await asyncio.gather(*tasks)
asyncio.run(main())
"#;

/// What a DoQ connection's unfinished queries hold is bounded, all its streams together
/// (64 KiB read by dnsd, as a TCP connection's message, and its window unread in quinn): 32
/// streams with a query's worth each grew dnsd by 888 KiB a connection (quinn gives the
/// window back as dnsd reads, so the window alone bounded nothing); 328 KiB now, the
/// connection's own state with it.
#[test]
fn a_doq_connections_unfinished_queries_hold_a_bounded_budget() {
    let opts = ["tcp_idle_timeout_ms = 30000", "tcp_max_per_source = 64"];
    let Some((py, dir, quic, dnsd)) = doq_server(&opts) else {
        return;
    };
    let rss = || palisade_tests::rss_kib(dnsd.pid());
    let before = rss();
    let conns = 20;
    let (mut child, line) = python_child(
        &py,
        DOQ_FAT,
        &[
            quic.ip().to_string(),
            quic.port().to_string(),
            dir.path().join("ca.pem").display().to_string(),
            conns.to_string(),
            "4".into(),
        ],
    );
    assert_eq!(line, "held");
    let mut grown = 0;
    for _ in 0..10 {
        std::thread::sleep(Duration::from_millis(150));
        grown = grown.max(rss().saturating_sub(before));
    }
    let _ = child.wait();
    let each = grown / conns;
    assert!(
        each < 500,
        "{conns} connections of 32 unfinished 16 KiB queries grew dnsd by {grown} KiB ({each} KiB each)"
    );
}

/// A DoQ client that sends each byte of its queries in a packet of its own, padded to
/// 1,200 bytes, on eight streams it never finishes: each byte kept its whole datagram alive
/// until the stream ended (eight streams of 12.6 KB made dnsd's memory grow by 126 MB in
/// ten seconds). What dnsd keeps of a query is now its bytes, copied out of the packets.
const DOQ_PADDED_BYTES: &str = r#"
import asyncio, ssl, struct, sys
from aioquic.asyncio import connect
from aioquic.quic.configuration import QuicConfiguration
from aioquic.quic.connection import QuicConnection
from aioquic.quic.packet import QuicFrameType
from aioquic.quic.stream import QuicStreamSender
host, port, ca, streams, size = sys.argv[1], int(sys.argv[2]), sys.argv[3], int(sys.argv[4]), int(sys.argv[5])
# One byte of stream data a frame, and each such frame alone in a padded packet.
get_frame = QuicStreamSender.get_frame
QuicStreamSender.get_frame = lambda self, max_size, max_offset=None: get_frame(self, min(max_size, 1), max_offset)
write_stream_frame = QuicConnection._write_stream_frame
def padded(self, builder, space, stream, max_offset):
    n = write_stream_frame(self, builder, space, stream, max_offset)
    room = builder.remaining_flight_space
    if n and room > 1:
        builder.start_frame(QuicFrameType.PADDING, capacity=room)
        builder._buffer.push_bytes(bytes(room - 1))
    return n
QuicConnection._write_stream_frame = padded
async def main():
    cfg = QuicConfiguration(is_client=True, alpn_protocols=["doq"], server_name="dns.test")
    cfg.load_verify_locations(ca)
    async with connect(host, port, configuration=cfg) as p:
        for _ in range(streams):
            sid = p._quic.get_next_available_stream_id()
            p._quic.send_stream_data(sid, struct.pack(">H", size - 2) + bytes(size - 2), end_stream=False)
        p.transmit()
        print("sent", flush=True)
        await asyncio.sleep(6)
asyncio.run(main())
"#;

#[test]
fn doq_queries_sent_a_byte_a_packet_hold_only_their_bytes() {
    let Some((py, dir, quic, dnsd)) = doq_server(&["tcp_idle_timeout_ms = 30000"]) else {
        return;
    };
    let rss = || palisade_tests::rss_kib(dnsd.pid());
    let before = rss();
    let mut child = std::process::Command::new("/usr/bin/python3")
        .arg("-c")
        .arg(DOQ_PADDED_BYTES)
        .args([
            &quic.ip().to_string(),
            &quic.port().to_string(),
            &dir.path().join("ca.pem").display().to_string(),
            "8",
            "12000",
        ])
        .env("PYTHONPATH", &py)
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("run python3");
    let mut grown = 0;
    for _ in 0..40 {
        std::thread::sleep(Duration::from_millis(150));
        grown = grown.max(rss().saturating_sub(before));
    }
    let _ = child.wait();
    assert!(
        grown < 24 * 1024,
        "eight unfinished DoQ queries of 12 KB sent a byte a packet grew dnsd by {grown} KiB"
    );
    // Nothing more than that connection was held.
    assert!(dnsd.stat("tcp.connections") <= 1);
}
