//! A real nginx (Debian's) as the origin behind http-front: the reference for what an origin
//! that normalises paths before it routes will serve.
//!
//! [`Nginx::start`] writes a config with the caller's `server` blocks into a temp dir (every
//! path nginx writes is there), listens on a fresh loopback address, and logs each request as
//! `request_uri|uri|host|status` so that a test can read what the origin received.

use std::net::{SocketAddr, TcpStream};
use std::path::PathBuf;
use std::process::Command;
use std::time::{Duration, Instant};

use crate::net;
use crate::servers::Proc;

/// A running nginx, killed on drop.
pub struct Nginx {
    proc_: Proc,
    dir: tempfile::TempDir,
    addr: SocketAddr,
}

impl std::fmt::Debug for Nginx {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Nginx").field("addr", &self.addr).finish()
    }
}

impl Nginx {
    /// Starts nginx with `servers` (whole `server { … }` blocks in which `{LISTEN}` stands for
    /// the address it gets); `None`, after a skip line, when nginx is not installed.
    pub fn start(servers: &str) -> Option<Nginx> {
        Self::start_with(|_| servers.to_string())
    }

    /// As [`Nginx::start`], with the `server` blocks made by `servers` for the address nginx
    /// gets (before it starts: a test may write certificates naming that address).
    pub fn start_with(servers: impl Fn(SocketAddr) -> String) -> Option<Nginx> {
        let Some(bin) = crate::find_program("nginx") else {
            crate::skipped("nginx is not installed");
            return None;
        };
        let mut last = String::new();
        for _ in 0..5 {
            let addr = net::test_addr();
            let dir = tempfile::tempdir().expect("temp dir");
            let d = dir.path().display();
            let user = if unsafe { libc::geteuid() } == 0 {
                "user root;\n"
            } else {
                ""
            };
            let conf = format!(
                "daemon off;\nmaster_process off;\n{user}worker_processes 1;\npid {d}/nginx.pid;\n\
                 error_log {d}/error.log info;\nevents {{ worker_connections 1024; }}\n\
                 http {{\n    log_format origin '$request_uri|$uri|$host|$status';\n\
                 access_log {d}/access.log origin;\n\
                 client_body_temp_path {d}/body;\n    proxy_temp_path {d}/proxy;\n\
                 fastcgi_temp_path {d}/fastcgi;\n    uwsgi_temp_path {d}/uwsgi;\n\
                 scgi_temp_path {d}/scgi;\n    keepalive_requests 100000;\n{}\n}}\n",
                servers(addr).replace("{LISTEN}", &addr.to_string())
            );
            let path = dir.path().join("nginx.conf");
            std::fs::write(&path, conf).expect("write nginx.conf");
            let mut cmd = Command::new(&bin);
            cmd.arg("-p")
                .arg(dir.path())
                .arg("-e")
                .arg(dir.path().join("error.log"))
                .arg("-c")
                .arg(&path);
            let mut p = Proc::spawn("nginx", cmd, dir.path().join("nginx.out"));
            let end = Instant::now() + Duration::from_secs(10);
            let mut up = false;
            while Instant::now() < end {
                if p.exited().is_some() {
                    break;
                }
                if TcpStream::connect_timeout(&addr, Duration::from_millis(200)).is_ok() {
                    up = true;
                    break;
                }
                std::thread::sleep(Duration::from_millis(20));
            }
            if up {
                return Some(Nginx {
                    proc_: p,
                    dir,
                    addr,
                });
            }
            last = format!(
                "{}\n{}",
                p.log(),
                std::fs::read_to_string(dir.path().join("error.log")).unwrap_or_default()
            );
            if !last.contains("Address already in use") {
                break;
            }
        }
        panic!("nginx did not start:\n{last}");
    }

    /// Where it listens.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Requests it logged so far, as `request_uri|uri|host|status` lines.
    pub fn access_log(&self) -> Vec<String> {
        std::fs::read_to_string(self.dir.path().join("access.log"))
            .unwrap_or_default()
            .lines()
            .map(str::to_string)
            .collect()
    }

    /// Its error log.
    pub fn error_log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("error.log")).unwrap_or_default()
    }

    /// Its directory.
    pub fn dir(&self) -> PathBuf {
        self.dir.path().to_path_buf()
    }

    /// The process (killed on drop).
    #[doc(hidden)]
    pub fn is_running(&mut self) -> bool {
        self.proc_.exited().is_none()
    }
}
