//! A private clickhouse-server for one test or bench: free loopback ports, data in a temp dir,
//! stopped (SIGTERM) on drop, restartable on the same ports with the same data.
//!
//! Debian's clickhouse-server (18.16) is enough; `scripts/install-deps` installs it. Without
//! it, [`ClickHouseServer::start`] says so loudly and returns None (and panics under CI).

use std::io::{Read, Write};
use std::net::{Ipv4Addr, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// One clickhouse-server on 127.0.0.1 with its own ports and data directory.
pub struct ClickHouseServer {
    child: Option<Child>,
    /// HTTP port.
    pub http_port: u16,
    /// Native protocol port.
    pub tcp_port: u16,
    exe: PathBuf,
    dir: tempfile::TempDir,
    /// XML added to config.xml (clusters, TLS).
    extra: String,
}

impl std::fmt::Debug for ClickHouseServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ClickHouseServer")
            .field("http_port", &self.http_port)
            .finish_non_exhaustive()
    }
}

/// The clickhouse-server binary, when installed.
pub fn server_binary() -> Option<PathBuf> {
    crate::find_program("clickhouse-server")
}

impl ClickHouseServer {
    /// Starts a server, or says loudly why not and returns None when clickhouse-server is
    /// missing (under CI a missing server is a failure).
    pub fn start() -> Option<Self> {
        let exe = Self::binary()?;
        let lo = Ipv4Addr::LOCALHOST;
        let http_port = crate::net::free_port(lo);
        let mut tcp_port = crate::net::free_port(lo);
        while tcp_port == http_port {
            tcp_port = crate::net::free_port(lo);
        }
        Some(Self::start_on(exe, http_port, tcp_port, String::new()))
    }

    /// Two servers in one cluster `name` of two shards (each server one shard, listed in both
    /// servers' `remote_servers`); the first also serves HTTPS on `https_port` with the
    /// certificate and key given, when `tls` is given.
    pub fn cluster_pair(
        name: &str,
        tls: Option<(u16, &std::path::Path, &std::path::Path)>,
    ) -> Option<(Self, Self)> {
        let exe = Self::binary()?;
        let lo = Ipv4Addr::LOCALHOST;
        let mut ports: Vec<u16> = Vec::new();
        while ports.len() < 4 {
            let p = crate::net::free_port(lo);
            if !ports.contains(&p) && tls.is_none_or(|t| t.0 != p) {
                ports.push(p);
            }
        }
        let shard = |tcp: u16| {
            format!("<shard><replica><host>127.0.0.1</host><port>{tcp}</port></replica></shard>")
        };
        let remote = format!(
            "<remote_servers><{name}>{}{}</{name}></remote_servers>",
            shard(ports[1]),
            shard(ports[3])
        );
        let tls_xml = tls
            .map(|(port, cert, key)| {
                format!(
                    "<https_port>{port}</https_port><openSSL><server><certificateFile>{}</certificateFile>                     <privateKeyFile>{}</privateKeyFile><verificationMode>none</verificationMode>                     <cacheSessions>true</cacheSessions><disableProtocols>sslv2,sslv3</disableProtocols>                     <preferServerCiphers>true</preferServerCiphers></server></openSSL>",
                    cert.display(),
                    key.display()
                )
            })
            .unwrap_or_default();
        let a = Self::start_on(
            exe.clone(),
            ports[0],
            ports[1],
            format!("{remote}{tls_xml}"),
        );
        let b = Self::start_on(exe, ports[2], ports[3], remote);
        Some((a, b))
    }

    fn binary() -> Option<PathBuf> {
        let Some(exe) = server_binary() else {
            let why = "clickhouse-server is not installed (scripts/install-deps, or apt-get install \
                       clickhouse-server); the ClickHouse tests did not run";
            assert!(!crate::in_ci(), "{why}");
            crate::skipped(why);
            return None;
        };
        Some(exe)
    }

    fn start_on(exe: PathBuf, http_port: u16, tcp_port: u16, extra: String) -> Self {
        let dir = tempfile::Builder::new()
            .prefix("palisade-clickhouse-")
            .tempdir()
            .expect("temp dir");
        let mut s = ClickHouseServer {
            child: None,
            http_port,
            tcp_port,
            exe,
            dir,
            extra,
        };
        s.write_config();
        s.spawn();
        s
    }

    /// `http://127.0.0.1:PORT`.
    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.http_port)
    }

    fn write_config(&self) {
        let d = self.dir.path().display();
        let config = format!(
            r#"<?xml version="1.0"?>
<yandex>
  <logger><level>warning</level><log>{d}/server.log</log><errorlog>{d}/server.err.log</errorlog></logger>
  <http_port>{http}</http_port>
  <tcp_port>{tcp}</tcp_port>
  <listen_host>127.0.0.1</listen_host>
  <path>{d}/data/</path>
  <tmp_path>{d}/data/tmp/</tmp_path>
  <user_files_path>{d}/data/user_files/</user_files_path>
  <format_schema_path>{d}/data/format_schemas/</format_schema_path>
  <users_config>{d}/users.xml</users_config>
  <default_profile>default</default_profile>
  <default_database>default</default_database>
  <mark_cache_size>67108864</mark_cache_size>
  <uncompressed_cache_size>67108864</uncompressed_cache_size>
  {extra}
</yandex>
"#,
            http = self.http_port,
            tcp = self.tcp_port,
            extra = self.extra
        );
        let users = r#"<?xml version="1.0"?>
<yandex>
  <profiles><default><max_memory_usage>2000000000</max_memory_usage></default></profiles>
  <users>
    <default><password></password><networks><ip>127.0.0.1</ip><ip>::1</ip></networks><profile>default</profile><quota>default</quota></default>
  </users>
  <quotas><default><interval><duration>3600</duration><queries>0</queries><errors>0</errors><result_rows>0</result_rows><read_rows>0</read_rows><execution_time>0</execution_time></interval></default></quotas>
</yandex>
"#;
        std::fs::write(self.dir.path().join("config.xml"), config).expect("write config.xml");
        std::fs::write(self.dir.path().join("users.xml"), users).expect("write users.xml");
    }

    fn spawn(&mut self) {
        let out = std::fs::File::create(self.dir.path().join("stdout.log")).expect("log file");
        let err = out.try_clone().expect("log file");
        let child = Command::new(&self.exe)
            .arg(format!(
                "--config-file={}",
                self.dir.path().join("config.xml").display()
            ))
            .stdin(Stdio::null())
            .stdout(out)
            .stderr(err)
            .spawn()
            .expect("spawn clickhouse-server");
        self.child = Some(child);
        let deadline = Instant::now() + Duration::from_secs(30);
        while self.query("SELECT 1").as_deref() != Ok("1\n") {
            if let Some(c) = self.child.as_mut()
                && let Ok(Some(st)) = c.try_wait()
            {
                panic!("clickhouse-server exited ({st}):\n{}", self.log());
            }
            assert!(
                Instant::now() < deadline,
                "clickhouse-server on port {} did not answer within 30 s:\n{}",
                self.http_port,
                self.log()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// The server's error log and console output.
    pub fn log(&self) -> String {
        let mut s = String::new();
        for f in ["server.err.log", "stdout.log"] {
            s.push_str(&std::fs::read_to_string(self.dir.path().join(f)).unwrap_or_default());
        }
        s
    }

    /// True while the server process runs.
    pub fn is_running(&mut self) -> bool {
        self.child
            .as_mut()
            .is_some_and(|c| matches!(c.try_wait(), Ok(None)))
    }

    /// Stops the server (SIGTERM, then SIGKILL after 20 s); the data stays.
    pub fn stop(&mut self) {
        if let Some(mut c) = self.child.take() {
            // SAFETY: kill(2) on our own child's pid.
            unsafe {
                libc::kill(c.id() as libc::pid_t, libc::SIGTERM);
            }
            let deadline = Instant::now() + Duration::from_secs(20);
            while Instant::now() < deadline {
                if let Ok(Some(_)) = c.try_wait() {
                    return;
                }
                std::thread::sleep(Duration::from_millis(20));
            }
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// Freezes the server (SIGSTOP): connections are still accepted by the kernel, nothing
    /// is answered — a server that hangs rather than one that is down.
    pub fn pause(&self) {
        if let Some(c) = &self.child {
            // SAFETY: kill(2) on our own child's pid.
            unsafe {
                libc::kill(c.id() as libc::pid_t, libc::SIGSTOP);
            }
        }
    }

    /// Lets a frozen server run on (SIGCONT).
    pub fn resume(&self) {
        if let Some(c) = &self.child {
            // SAFETY: kill(2) on our own child's pid.
            unsafe {
                libc::kill(c.id() as libc::pid_t, libc::SIGCONT);
            }
        }
    }

    /// Starts it again on the same ports with the same data.
    pub fn restart(&mut self) {
        self.stop();
        self.spawn();
    }

    /// Runs `sql` (the POST body) over HTTP; the reply's body, or the error text.
    pub fn query(&self, sql: &str) -> Result<String, String> {
        let t = Duration::from_secs(30);
        let mut s = TcpStream::connect(("127.0.0.1", self.http_port)).map_err(|e| e.to_string())?;
        s.set_read_timeout(Some(t)).map_err(|e| e.to_string())?;
        s.set_write_timeout(Some(t)).map_err(|e| e.to_string())?;
        write!(
            s,
            "POST / HTTP/1.0\r\nHost: 127.0.0.1\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{sql}",
            sql.len()
        )
        .map_err(|e| e.to_string())?;
        let mut resp = Vec::new();
        s.read_to_end(&mut resp).map_err(|e| e.to_string())?;
        let text = String::from_utf8_lossy(&resp);
        let (head, body) = text
            .split_once("\r\n\r\n")
            .ok_or_else(|| format!("bad reply: {text}"))?;
        if head.starts_with("HTTP/1.0 200") || head.starts_with("HTTP/1.1 200") {
            Ok(body.to_string())
        } else {
            Err(format!(
                "{}: {}",
                head.lines().next().unwrap_or(""),
                body.trim()
            ))
        }
    }

    /// Runs `sql` and parses its single number; panics with the error otherwise.
    pub fn number(&self, sql: &str) -> u64 {
        let r = self.query(sql).unwrap_or_else(|e| panic!("{sql}: {e}"));
        r.trim()
            .parse()
            .unwrap_or_else(|_| panic!("{sql}: not a number: {r:?}"))
    }

    /// The server's version string.
    pub fn version(&self) -> String {
        self.query("SELECT version()")
            .map(|s| s.trim().to_string())
            .unwrap_or_default()
    }
}

impl Drop for ClickHouseServer {
    fn drop(&mut self) {
        self.stop();
    }
}
