//! TCP/53 where something else listens on port 53 at another address (a local resolver on
//! 127.0.0.53:53, as systemd-resolved): in a namespace the test makes, `xdp-guard attach`
//! installs sk_lookup steering, dnsd registers its listener for its service address and says
//! so at start, answers TCP there, and the resolver keeps its own connections; when dnsd stops
//! its address is withdrawn. Where no steering is installed, dnsd binds a listener on each
//! of a few service addresses (beside the resolver, as Knot and NSD), and takes the wildcard
//! socket for more than 256 — which cannot be bound beside the resolver.
//!
//! Needs root (namespaces, BPF); elsewhere it says so loudly and skips.

use std::io::{Read, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::time::Duration;

use palisade_tests::netns::{self, Netns, Pins, VethPair};
use palisade_tests::wait::wait_for;
use palisade_tests::wire::{QueryOpts, build_query};

/// A TCP query to `addr` from inside `ns`: the answer's rcode and answer count, or None.
fn tcp_ask(ns: &Netns, addr: SocketAddr) -> Option<(u8, u16)> {
    ns.run(move || {
        let mut s = TcpStream::connect_timeout(&addr, Duration::from_millis(500)).ok()?;
        s.set_read_timeout(Some(Duration::from_secs(2))).ok()?;
        let q = build_query(9, "www.example.com.", 1, &QueryOpts::udp());
        let mut m = (q.len() as u16).to_be_bytes().to_vec();
        m.extend_from_slice(&q);
        s.write_all(&m).ok()?;
        let mut len = [0u8; 2];
        s.read_exact(&mut len).ok()?;
        let mut r = vec![0u8; u16::from_be_bytes(len) as usize];
        s.read_exact(&mut r).ok()?;
        Some((r[3] & 0x0f, u16::from_be_bytes([r[6], r[7]])))
    })
    .expect("run in the namespace")
}

fn config(dir: &Path, tag: &str, ip: Ipv4Addr, xdp: Option<&Path>) -> PathBuf {
    config_listen(dir, tag, &ip.to_string(), xdp)
}

fn config_listen(dir: &Path, tag: &str, listen: &str, xdp: Option<&Path>) -> PathBuf {
    let mut c = format!(
        "[server]\nlisten = [\"{listen}\"]\nport = 53\nworkers = 1\n\n[[zone]]\norigin = \"example.com.\"\nfile = \"{}\"\n\n[control]\nsocket = \"{}\"\n",
        palisade_tests::data_dir()
            .join("example.com.zone")
            .display(),
        dir.join(format!("{tag}.sock")).display()
    );
    if let Some(p) = xdp {
        c.push_str(&format!("\n[xdp]\npin_path = \"{}\"\n", p.display()));
    }
    let path = dir.join(format!("{tag}.toml"));
    std::fs::write(&path, c).unwrap();
    path
}

/// A connection to the resolver's 127.0.0.53:53 from inside `ns` reaches the resolver.
fn resolver_keeps_its_connections(ns: &Netns, resolver: &TcpListener) {
    let to_resolver = ns
        .run(|| {
            TcpStream::connect_timeout(&"127.0.0.53:53".parse().unwrap(), Duration::from_secs(1))
        })
        .unwrap();
    assert!(to_resolver.is_ok(), "{to_resolver:?}");
    wait_for(
        "the resolver accepting its connection",
        Duration::from_secs(5),
        || resolver.accept().is_ok(),
    );
}

/// dnsd in a namespace, entered with setns alone (`ip netns exec` would remount /sys and
/// hide the bpffs at /sys/fs/bpf); killed on drop.
struct Daemon {
    child: std::process::Child,
    log: PathBuf,
}

impl Daemon {
    fn start(ns: &Netns, config: &Path) -> Daemon {
        let log = config.with_extension("log");
        let out = std::fs::File::create(&log).unwrap();
        let child = ns
            .command(palisade_tests::bin("dnsd"))
            .args(["serve", "-c"])
            .arg(config)
            .env("RUST_LOG", "info")
            .stdout(out.try_clone().unwrap())
            .stderr(out)
            .spawn()
            .unwrap();
        Daemon { child, log }
    }

    fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// SIGTERM, as a service manager stops it, and a wait.
    fn stop(mut self) {
        // SAFETY: a signal to our own child.
        unsafe {
            libc::kill(self.child.id() as i32, libc::SIGTERM);
        }
        let _ = self.child.wait();
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        if std::thread::panicking() {
            eprintln!("dnsd log:\n{}", self.log());
        }
    }
}

#[test]
fn tcp_53_is_steered_to_dnsd_beside_a_resolver_and_the_wildcard_elsewhere() {
    if let Err(why) = netns::available() {
        palisade_tests::skipped(&format!("sk_lookup test: {why}"));
        return;
    }
    let pair = VethPair::new().expect("veth pair");
    let dir = tempfile::tempdir().unwrap();
    let ns = &pair.b;
    ns.ip(&["link", "set", "lo", "up"]).unwrap();
    // The resolver: a listener on 127.0.0.53:53, there first.
    let resolver: TcpListener = ns
        .run(|| TcpListener::bind("127.0.0.53:53"))
        .unwrap()
        .expect("bind the resolver's listener");
    resolver.set_nonblocking(true).unwrap();

    // Without steering, more than 256 service addresses take the wildcard socket, which
    // cannot be bound beside it.
    let dnsd_ip = Ipv4Addr::new(127, 0, 0, 10);
    let wide = config_listen(dir.path(), "wide", "127.0.4.0/23", None);
    let d = Daemon::start(ns, &wide);
    wait_for("dnsd refusing to start", Duration::from_secs(10), || {
        d.log().contains("in use")
    });
    drop(d);
    // A few take a listener each: dnsd starts beside it and answers there; the resolver
    // keeps its own, and no other local address accepts DNS over TCP.
    let plain = config(dir.path(), "plain", dnsd_ip, None);
    let d = Daemon::start(ns, &plain);
    let svc = SocketAddr::from((dnsd_ip, 53));
    wait_for("dnsd answering over TCP", Duration::from_secs(20), || {
        tcp_ask(ns, svc) == Some((0, 1))
    });
    assert!(
        d.log().contains("TCP: a listener on each service address"),
        "{}",
        d.log()
    );
    let elsewhere = ns
        .run(|| {
            TcpStream::connect_timeout(&"127.0.0.12:53".parse().unwrap(), Duration::from_secs(1))
        })
        .unwrap();
    assert!(elsewhere.is_err(), "127.0.0.12:53 accepted a connection");
    resolver_keeps_its_connections(ns, &resolver);
    drop(d);

    // xdp-guard attach installs the steering in this namespace.
    let pins = Pins::new(ns, "sk");
    let guard = dir.path().join("guard.toml");
    std::fs::write(
        &guard,
        format!(
            "interface = \"{}\"\nmode = \"generic\"\ndns_ports = [53]\nrate = 0\npin_path = \"{}\"\n",
            pair.if_b,
            pins.path.display()
        ),
    )
    .unwrap();
    let out = ns
        .command(palisade_tests::bin("xdp-guard"))
        .args(["attach", "-c"])
        .arg(&guard)
        .output()
        .unwrap();
    let text =
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{text}");
    assert!(
        text.contains("TCP steering (sk_lookup) installed"),
        "{text}"
    );

    let steered = config(dir.path(), "steered", dnsd_ip, Some(&pins.path));
    let d = Daemon::start(ns, &steered);
    let svc = SocketAddr::from((dnsd_ip, 53));
    wait_for("dnsd answering over TCP", Duration::from_secs(20), || {
        tcp_ask(ns, svc) == Some((0, 1))
    });
    assert!(
        d.log().contains("sk_lookup steers the service addresses"),
        "{}",
        d.log()
    );
    // The resolver keeps its connections.
    resolver_keeps_its_connections(ns, &resolver);
    // dnsd stops: its address is withdrawn, connections to it are refused.
    d.stop();
    wait_for("the address withdrawn", Duration::from_secs(10), || {
        tcp_ask(ns, svc).is_none()
    });

    // Elsewhere (namespace A: no steering, nothing on port 53). An address not up yet (an
    // anycast address announced later): dnsd starts, and answers there once it is up.
    pair.a.ip(&["link", "set", "lo", "up"]).unwrap();
    let later = config_listen(dir.path(), "later", "127.0.0.11\", \"10.99.0.1", None);
    let d = Daemon::start(&pair.a, &later);
    let svc = SocketAddr::from(([127, 0, 0, 11], 53));
    wait_for("dnsd answering over TCP", Duration::from_secs(20), || {
        tcp_ask(&pair.a, svc) == Some((0, 1))
    });
    pair.a
        .ip(&["addr", "add", "10.99.0.1/32", "dev", "lo"])
        .unwrap();
    let up = SocketAddr::from(([10, 99, 0, 1], 53));
    wait_for(
        "an answer at the address now up",
        Duration::from_secs(10),
        || tcp_ask(&pair.a, up) == Some((0, 1)),
    );
    drop(d);
    // 512 addresses: the wildcard socket, any of which answers.
    let wild = config_listen(dir.path(), "wild", "127.0.4.0/23", None);
    let d = Daemon::start(&pair.a, &wild);
    let svc = SocketAddr::from(([127, 0, 5, 11], 53));
    wait_for("dnsd answering over TCP", Duration::from_secs(20), || {
        tcp_ask(&pair.a, svc) == Some((0, 1))
    });
    assert!(d.log().contains("TCP: the wildcard socket"), "{}", d.log());
}
