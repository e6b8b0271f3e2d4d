//! A private redis-server for one test or bench: free loopback port and a Unix socket (which
//! every network namespace reaches: the file system is shared), no persistence, killed on
//! drop, restartable on the same port and socket.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// One redis-server process on 127.0.0.1, restartable on the same port.
pub struct RedisServer {
    child: Option<Child>,
    /// Its port.
    pub port: u16,
    dir: tempfile::TempDir,
}

/// True when `redis-server` can be run.
pub fn available() -> bool {
    Command::new("redis-server")
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// A port that was free a moment ago.
pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("no free loopback port")
}

impl RedisServer {
    /// Starts a server, or says loudly why not and returns None when redis-server is missing.
    pub fn start() -> Option<Self> {
        if !available() {
            crate::skipped(
                "redis-server is not installed (apt-get install redis-server); \
                 the Redis tests did not run",
            );
            return None;
        }
        let mut s = RedisServer {
            child: None,
            port: free_port(),
            dir: tempfile::tempdir().expect("tempdir"),
        };
        s.spawn();
        Some(s)
    }

    /// `redis://127.0.0.1:PORT`.
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    /// The fleet key file every node of a test shares (made on first use, mode 0600): what
    /// `[redis] key_file` names.
    pub fn key_file(&self) -> std::path::PathBuf {
        let p = self.dir.path().join("fleet.key");
        if !p.exists() {
            write_key(&p);
        }
        p
    }

    /// The `[redis]` lines a daemon of this test needs: `url` and `key_file`.
    pub fn config(&self) -> String {
        format!(
            "url = \"{}\"\nkey_file = \"{}\"\n",
            self.url(),
            self.key_file().display()
        )
    }

    /// The Unix socket's path.
    pub fn socket_path(&self) -> std::path::PathBuf {
        self.dir.path().join("redis.sock")
    }

    /// `redis+unix:///PATH`: reachable from any network namespace of this host.
    pub fn unix_url(&self) -> String {
        format!("redis+unix://{}", self.socket_path().display())
    }

    fn spawn(&mut self) {
        let child = Command::new("redis-server")
            .args(["--port", &self.port.to_string(), "--bind", "127.0.0.1"])
            .args(["--save", "", "--appendonly", "no", "--daemonize", "no"])
            .arg("--unixsocket")
            .arg(self.socket_path())
            .args(["--unixsocketperm", "700"])
            .arg("--dir")
            .arg(self.dir.path())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn redis-server");
        self.child = Some(child);
        let deadline = Instant::now() + Duration::from_secs(10);
        while !self.ping() {
            assert!(
                Instant::now() < deadline,
                "redis-server on port {} did not answer PING within 10 s",
                self.port
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// True when the server answers PING.
    pub fn ping(&self) -> bool {
        let Ok(mut s) = TcpStream::connect(("127.0.0.1", self.port)) else {
            return false;
        };
        let _ = s.set_read_timeout(Some(Duration::from_secs(1)));
        let mut buf = [0u8; 7];
        s.write_all(b"PING\r\n").is_ok() && s.read_exact(&mut buf).is_ok() && &buf == b"+PONG\r\n"
    }

    /// Kills the server (SIGKILL): everything it held is gone.
    pub fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// Starts it again, empty, on the same port.
    pub fn restart(&mut self) {
        self.kill();
        self.spawn();
    }
}

/// Writes a fleet key as `dnsd redis-key generate` does: 32 random bytes as hex, mode 0600.
pub fn write_key(path: &std::path::Path) {
    use std::os::unix::fs::OpenOptionsExt as _;
    let mut key = [0u8; 32];
    std::fs::File::open("/dev/urandom")
        .and_then(|mut f| f.read_exact(&mut key))
        .expect("random bytes");
    let hex: String = key.iter().map(|b| format!("{b:02x}")).collect();
    std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(path)
        .and_then(|mut f| f.write_all(format!("{hex}\n").as_bytes()))
        .expect("write the fleet key");
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        self.kill();
    }
}
