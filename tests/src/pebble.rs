//! A real ACME server: Debian's `pebble`, on loopback, with an HTTPS certificate from a test
//! authority, validating challenges at the ports and through the DNS server a test gives it.

use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use crate::net;
use crate::pki::Ca;
use crate::servers::Proc;

/// A running pebble, killed on drop.
pub struct Pebble {
    proc_: Proc,
    dir: tempfile::TempDir,
    addr: SocketAddr,
    mgmt: SocketAddr,
}

impl std::fmt::Debug for Pebble {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Pebble").field("addr", &self.addr).finish()
    }
}

impl Pebble {
    /// Starts pebble: its HTTPS certificate from `ca`, validating http-01 at `http_port` and
    /// tls-alpn-01 at `tls_port` of the addresses `dns` resolves names to. `None`, after a
    /// skip line, when pebble is not installed.
    pub fn start(ca: &Ca, dns: SocketAddr, http_port: u16, tls_port: u16) -> Option<Pebble> {
        let Some(bin) = crate::find_program("pebble") else {
            assert!(!crate::in_ci(), "pebble is needed in CI");
            crate::skipped("pebble is not installed");
            return None;
        };
        let mut last = String::new();
        for _ in 0..5 {
            let ip = net::test_ip();
            let addr = SocketAddr::from((ip, net::free_port(ip)));
            let mgmt = SocketAddr::from((ip, net::free_port(ip)));
            if addr == mgmt {
                continue;
            }
            let dir = tempfile::tempdir().expect("temp dir");
            let pair = ca.leaf(&["localhost", &ip.to_string()]);
            pair.write(dir.path(), "pebble");
            let cfg = serde_json::json!({
                "pebble": {
                    "listenAddress": addr.to_string(),
                    "managementListenAddress": mgmt.to_string(),
                    "certificate": dir.path().join("pebble.crt"),
                    "privateKey": dir.path().join("pebble.key"),
                    "httpPort": http_port,
                    "tlsPort": tls_port,
                    "ocspResponderURL": "",
                    "externalAccountBindingRequired": false
                }
            });
            let path = dir.path().join("pebble.json");
            std::fs::write(&path, cfg.to_string()).expect("write pebble.json");
            let mut cmd = Command::new(&bin);
            cmd.arg("-config")
                .arg(&path)
                .arg("-dnsserver")
                .arg(dns.to_string())
                .env("PEBBLE_VA_NOSLEEP", "1")
                .env("PEBBLE_WFE_NONCEREJECT", "0")
                .env("PEBBLE_AUTHZREUSE", "0");
            let mut p = Proc::spawn("pebble", cmd, dir.path().join("pebble.out"));
            let end = Instant::now() + Duration::from_secs(15);
            let mut up = false;
            while Instant::now() < end {
                if p.exited().is_some() {
                    break;
                }
                if TcpStream::connect_timeout(&addr, Duration::from_millis(200)).is_ok()
                    && TcpStream::connect_timeout(&mgmt, Duration::from_millis(200)).is_ok()
                {
                    up = true;
                    break;
                }
                std::thread::sleep(Duration::from_millis(50));
            }
            if up {
                return Some(Pebble {
                    proc_: p,
                    dir,
                    addr,
                    mgmt,
                });
            }
            last = p.log();
            if !last.contains("address already in use") {
                break;
            }
        }
        panic!("pebble did not start:\n{last}");
    }

    /// The directory URL.
    pub fn directory(&self) -> String {
        format!("https://{}/dir", self.addr)
    }

    /// The root its certificates chain to (from the management interface), written into `dir`.
    pub fn root(&self, dir: &Path) -> PathBuf {
        let out = Command::new("curl")
            .args(["-sk", "--max-time", "10"])
            .arg(format!("https://{}/roots/0", self.mgmt))
            .output()
            .expect("run curl");
        assert!(
            out.status.success() && out.stdout.starts_with(b"-----BEGIN CERTIFICATE"),
            "pebble root: {}",
            String::from_utf8_lossy(&out.stdout)
        );
        let p = dir.join("pebble-root.pem");
        std::fs::write(&p, &out.stdout).expect("write root");
        p
    }

    /// Its log.
    pub fn log(&self) -> String {
        self.proc_.log()
    }

    /// Its directory.
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }
}
