//! dnstap from dnsd, read by real readers: a Frame Streams file read with `dnstap-read`
//! (bind9-dnsutils), and a Unix socket served by `fstrm_capture` (fstrm-bin) — connected
//! late, so dnsd reconnects. AUTH_QUERY and AUTH_RESPONSE for UDP and TCP, a blocked source
//! never logged, and the filters: rcodes, sampling, only what a defence acted on.

use std::net::{SocketAddr, UdpSocket};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use palisade_tests::servers::{Dnsd, Zone};
use palisade_tests::wait::wait_for;
use palisade_tests::wire::{QueryOpts, build_query};

/// `dnstap-read FILE` (its one-line-per-message form), or None when the tool is missing.
fn dnstap_read(file: &Path) -> Option<String> {
    let Some(tool) = palisade_tests::find_program("dnstap-read") else {
        palisade_tests::skipped("dnstap-read is not installed (bind9-dnsutils)");
        return None;
    };
    let out = Command::new(tool).arg(file).output().unwrap();
    assert!(
        out.status.success(),
        "dnstap-read: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    Some(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// Sends `name`/A from `from` and waits briefly for the reply.
fn ask(from: &UdpSocket, server: SocketAddr, id: u16, name: &str) {
    let _ = from.send_to(&build_query(id, name, 1, &QueryOpts::udp()), server);
    let mut buf = [0u8; 2048];
    let _ = from.recv(&mut buf);
}

fn client() -> UdpSocket {
    let s = UdpSocket::bind(SocketAddr::new(palisade_tests::net::test_ip().into(), 0)).unwrap();
    s.set_read_timeout(Some(Duration::from_millis(500)))
        .unwrap();
    s
}

#[test]
fn dnstap_file_has_queries_and_answers_and_never_a_blocked_source() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("tap.fstrm");
    let dnsd = Dnsd::builder()
        .zone(Zone::data("example.com."))
        .raw(&format!(
            "[dnstap]\nfile = \"{}\"\nidentity = \"ns-test\"",
            file.display()
        ))
        .start();
    let server = dnsd.addr();
    let c = client();
    let me = c.local_addr().unwrap();
    ask(&c, server, 1, "www.example.com.");
    ask(&c, server, 2, "nx.example.com.");
    // Over TCP too.
    let r = palisade_tests::client::tcp_exchange(
        server,
        &build_query(3, "mail.example.com.", 1, &QueryOpts::udp()),
        Duration::from_secs(5),
    );
    assert!(matches!(r, Ok(Some(_))), "TCP answered: {r:?}");
    // A blocked source costs one lookup and is never logged.
    let blocked = client();
    let bip = blocked.local_addr().unwrap().ip();
    let (ok, out) = dnsd.ctl(&["block", "add", &bip.to_string()]);
    assert!(ok, "{out}");
    ask(&blocked, server, 4, "www.example.com.");
    wait_for(
        "3 queries and answers written",
        Duration::from_secs(10),
        || {
            dnsd.stats().get("dnstap.written") >= 4 + 6 // with the 2 probes, queries and answers
        },
    );
    let Some(text) = dnstap_read(&file) else {
        return;
    };
    // (the harness's readiness probes ask for the SOA)
    let lines: Vec<&str> = text.lines().filter(|l| !l.contains("/IN/SOA")).collect();
    let has = |kind: &str, proto: &str, what: &str| {
        lines
            .iter()
            .any(|l| l.contains(&format!(" {kind} ")) && l.contains(proto) && l.contains(what))
    };
    assert!(has("AQ", "UDP", "www.example.com/IN/A"), "{text}");
    assert!(has("AR", "UDP", "www.example.com/IN/A"), "{text}");
    assert!(has("AR", "UDP", "nx.example.com/IN/A"), "{text}");
    assert!(has("AQ", "TCP", "mail.example.com/IN/A"), "{text}");
    assert!(has("AR", "TCP", "mail.example.com/IN/A"), "{text}");
    assert!(
        text.contains(&format!("{}:{}", me.ip(), me.port())),
        "{text}"
    );
    assert!(
        !text.contains(&bip.to_string()),
        "blocked source logged:\n{text}"
    );
    assert_eq!(lines.len(), 6, "{text}");
    // The message fields as a reader sees them.
    let out = Command::new("dnstap-read")
        .arg("-y")
        .arg(&file)
        .output()
        .unwrap();
    let yaml = String::from_utf8_lossy(&out.stdout);
    assert!(yaml.contains("identity: ns-test"), "{yaml}");
    assert!(yaml.contains("type: AUTH_RESPONSE") && yaml.contains("status: NXDOMAIN"));
}

/// `fstrm_capture` reading dnstap on `sock` into `out`.
fn capture(sock: &Path, out: &Path) -> Option<Child> {
    let Some(tool) = palisade_tests::find_program("fstrm_capture") else {
        palisade_tests::skipped("fstrm_capture is not installed (fstrm-bin)");
        return None;
    };
    let c = Command::new(tool)
        .args(["-t", "protobuf:dnstap.Dnstap", "-u"])
        .arg(sock)
        .arg("-w")
        .arg(out)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    wait_for("fstrm_capture listening", Duration::from_secs(10), || {
        sock.exists()
    });
    Some(c)
}

#[test]
fn dnstap_socket_reaches_fstrm_capture_started_late_with_filters() {
    let dir = tempfile::tempdir().unwrap();
    let sock = dir.path().join("tap.sock");
    let out = dir.path().join("captured.fstrm");
    // Only NXDOMAIN answers are logged.
    let dnsd = Dnsd::builder()
        .zone(Zone::data("example.com."))
        .raw(&format!(
            "[dnstap]\nsocket = \"{}\"\nrcodes = [\"NXDOMAIN\"]",
            sock.display()
        ))
        .start();
    let server = dnsd.addr();
    let c = client();
    // No reader yet: dropped, counted.
    ask(&c, server, 1, "nx1.example.com.");
    wait_for(
        "dropped while the reader is away",
        Duration::from_secs(10),
        || dnsd.stats().get("dnstap.dropped_output") >= 1,
    );
    let Some(mut cap) = capture(&sock, &out) else {
        return;
    };
    // dnsd reconnects within a second or so; then NXDOMAIN answers reach the reader.
    let mut id = 10;
    wait_for("connected", Duration::from_secs(10), || {
        id += 1;
        ask(&c, server, id, "nx2.example.com.");
        dnsd.stats().get("dnstap.written") >= 2
    });
    ask(&c, server, 100, "www.example.com.");
    ask(&c, server, 101, "nx3.example.com.");
    wait_for("nx3 written", Duration::from_secs(10), || {
        dnsd.stats().get("dnstap.written") >= 4
    });
    // The reader closes its file on SIGINT.
    // SAFETY: a signal to our own child.
    unsafe {
        libc::kill(cap.id() as i32, libc::SIGINT);
    }
    let _ = cap.wait();
    let Some(text) = dnstap_read(&out) else {
        return;
    };
    assert!(text.contains("nx2.example.com/IN/A"), "{text}");
    assert!(text.contains("nx3.example.com/IN/A"), "{text}");
    assert!(
        !text.contains("www.example.com"),
        "NOERROR filtered out:\n{text}"
    );
    assert!(
        !text.contains("nx1.example.com"),
        "sent while away:\n{text}"
    );
}

#[test]
fn dnstap_only_what_a_defence_acted_on_and_sampling() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("tap.fstrm");
    // RRL: 2 answers a second per source, one in two slipped: of 20 queries most are
    // limited (dropped or slipped) and only those are logged.
    let dnsd = Dnsd::builder()
        .zone(Zone::data("example.com."))
        .raw("[defence.rrl]\nresponses_per_second = 2\nslip = 2")
        .raw("[defence.random_subdomain]\nenabled = false")
        .raw(&format!(
            "[dnstap]\nfile = \"{}\"\nonly_defence = true\nresponses = true",
            file.display()
        ))
        .start();
    let server = dnsd.addr();
    let c = client();
    for i in 0..20 {
        let _ = c.send_to(
            &build_query(i, "www.example.com.", 1, &QueryOpts::udp()),
            server,
        );
    }
    std::thread::sleep(Duration::from_millis(300));
    let limited = {
        let s = dnsd.stats();
        s.get("rrl.limited")
    };
    assert!(limited >= 10, "RRL limited {limited}");
    wait_for("the limited ones written", Duration::from_secs(10), || {
        dnsd.stats().get("dnstap.written") >= limited
    });
    let Some(text) = dnstap_read(&file) else {
        return;
    };
    let queries = text.lines().filter(|l| l.contains(" AQ ")).count() as u64;
    assert_eq!(
        queries, limited,
        "one AUTH_QUERY per limited query:\n{text}"
    );
    drop(dnsd);

    // Sampling: one query in 5.
    let file = dir.path().join("sampled.fstrm");
    let dnsd = Dnsd::builder()
        .zone(Zone::data("example.com."))
        .raw("[defence.rrl]\nenabled = false")
        .raw(&format!(
            "[dnstap]\nfile = \"{}\"\nsample = 5\nresponses = false",
            file.display()
        ))
        .start();
    let server = dnsd.addr();
    for i in 0..50 {
        ask(&c, server, i, "www.example.com.");
    }
    wait_for("10 written", Duration::from_secs(10), || {
        dnsd.stats().get("dnstap.written") >= 10
    });
    let Some(text) = dnstap_read(&file) else {
        return;
    };
    assert_eq!(text.lines().count(), 10, "{text}");
    assert!(text.lines().all(|l| l.contains(" AQ ")), "{text}");
}

/// A full disk never leaves half a frame in the file: what was written is cut back to its
/// last whole frame (and its stream ended), so a reader reads every frame there (a partial
/// frame, and the next opening's START after it, stopped `dnstap-read` there).
#[test]
fn a_full_disk_leaves_only_whole_frames_in_the_dnstap_file() {
    if unsafe { libc::geteuid() } != 0 {
        palisade_tests::skipped("not root: no small tmpfs to fill");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let small = dir.path().join("small");
    std::fs::create_dir(&small).unwrap();
    let ok = Command::new("mount")
        .args(["-t", "tmpfs", "-o", "size=48k", "tmpfs"])
        .arg(&small)
        .status()
        .is_ok_and(|s| s.success());
    assert!(ok, "mount a 48 KiB tmpfs");
    struct Unmount<'a>(&'a Path);
    impl Drop for Unmount<'_> {
        fn drop(&mut self) {
            let _ = Command::new("umount").arg(self.0).status();
        }
    }
    let _unmount = Unmount(&small);
    let file = small.join("tap.fstrm");
    let dnsd = Dnsd::builder()
        .zone(Zone::data("example.com."))
        .raw(&format!(
            "[dnstap]\nfile = \"{}\"\nresponses = true",
            file.display()
        ))
        .start();
    let server = dnsd.addr();
    let c = client();
    // Some 700 queries and answers, far past 48 KiB, with pauses for the reopenings.
    for i in 0..700u16 {
        ask(&c, server, i, "www.example.com.");
        if i % 100 == 99 {
            std::thread::sleep(Duration::from_millis(1200));
        }
    }
    wait_for("the disk full", Duration::from_secs(10), || {
        dnsd.stats().get("dnstap.dropped_output") > 0
    });
    drop(dnsd);
    let Some(text) = dnstap_read(&file) else {
        return;
    };
    assert!(text.lines().count() > 50, "{text}");
}
