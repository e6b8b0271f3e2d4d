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

    /// Pauses (SIGSTOP) or resumes (SIGCONT) the server: alive to the kernel, silent to
    /// its clients meanwhile.
    pub fn pause(&self, paused: bool) {
        if let Some(c) = &self.child {
            let sig = if paused { libc::SIGSTOP } else { libc::SIGCONT };
            // SAFETY: kill(2) on this server's own child process, by its PID.
            unsafe { libc::kill(c.id() as libc::pid_t, sig) };
        }
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

/// One master, one replica and three sentinels on loopback (Sentinel failover tests): the
/// sentinels watch the master as `pal`, call it down after 1 s and fail over within 3 s.
pub struct SentinelSet {
    /// The first master.
    pub master: RedisServer,
    /// Its replica: the master after a failover.
    pub replica: Child,
    /// The replica's port.
    pub replica_port: u16,
    sentinels: Vec<Child>,
    /// The sentinels' ports.
    pub sentinel_ports: Vec<u16>,
    dir: tempfile::TempDir,
}

/// The master's name in the sentinels' config.
pub const MASTER_NAME: &str = "pal";

/// Sends one inline command to 127.0.0.1:`port`; its reply's text (empty on failure).
pub fn command(port: u16, cmd: &str) -> String {
    String::from_utf8_lossy(&exchange(port, format!("{cmd}\r\n").as_bytes())).into_owned()
}

/// Sends one command to 127.0.0.1:`port`, its arguments as bulk strings (any bytes, spaces
/// and quotes too); the reply's bytes as sent (empty on failure).
pub fn command_args(port: u16, args: &[&[u8]]) -> Vec<u8> {
    let mut m = format!("*{}\r\n", args.len()).into_bytes();
    for a in args {
        m.extend_from_slice(format!("${}\r\n", a.len()).as_bytes());
        m.extend_from_slice(a);
        m.extend_from_slice(b"\r\n");
    }
    exchange(port, &m)
}

/// Writes `msg` to 127.0.0.1:`port` and reads the reply (empty on failure).
fn exchange(port: u16, msg: &[u8]) -> Vec<u8> {
    let Ok(mut s) = TcpStream::connect(("127.0.0.1", port)) else {
        return Vec::new();
    };
    let _ = s.set_read_timeout(Some(Duration::from_millis(500)));
    if s.write_all(msg).is_err() {
        return Vec::new();
    }
    let mut out = Vec::new();
    let mut buf = [0u8; 65536];
    // A reply ends when the server stops sending for the timeout or sends a short read.
    while let Ok(n) = s.read(&mut buf) {
        if n == 0 {
            break;
        }
        out.extend_from_slice(&buf[..n]);
        if n < buf.len() {
            break;
        }
    }
    out
}

impl SentinelSet {
    /// Starts the set and waits until the sentinels know the replica and each other; None
    /// (said loudly) when redis-server or redis-sentinel is missing.
    pub fn start() -> Option<Self> {
        let master = RedisServer::start()?;
        let sentinel_bin = Command::new("redis-sentinel")
            .arg("--version")
            .output()
            .is_ok_and(|o| o.status.success());
        if !sentinel_bin {
            crate::skipped(
                "redis-sentinel is not installed (apt-get install redis-sentinel); \
                 the Sentinel tests did not run",
            );
            return None;
        }
        let dir = tempfile::tempdir().expect("tempdir");
        let replica_port = free_port();
        let replica = Command::new("redis-server")
            .args(["--port", &replica_port.to_string(), "--bind", "127.0.0.1"])
            .args(["--save", "", "--appendonly", "no", "--daemonize", "no"])
            .args(["--replicaof", "127.0.0.1", &master.port.to_string()])
            .arg("--dir")
            .arg(dir.path())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn the replica");
        let mut sentinels = Vec::new();
        let mut sentinel_ports = Vec::new();
        for i in 0..3 {
            let port = free_port();
            let sdir = dir.path().join(format!("sentinel{i}"));
            std::fs::create_dir_all(&sdir).unwrap();
            let conf = sdir.join("sentinel.conf");
            std::fs::write(
                &conf,
                format!(
                    "port {port}\nbind 127.0.0.1\ndaemonize no\ndir {}\n\
                     sentinel monitor {MASTER_NAME} 127.0.0.1 {} 2\n\
                     sentinel down-after-milliseconds {MASTER_NAME} 1000\n\
                     sentinel failover-timeout {MASTER_NAME} 3000\n\
                     sentinel parallel-syncs {MASTER_NAME} 1\n",
                    sdir.display(),
                    master.port
                ),
            )
            .unwrap();
            sentinels.push(
                Command::new("redis-sentinel")
                    .arg(&conf)
                    .stdout(Stdio::null())
                    .stderr(Stdio::null())
                    .spawn()
                    .expect("spawn redis-sentinel"),
            );
            sentinel_ports.push(port);
        }
        let set = SentinelSet {
            master,
            replica,
            replica_port,
            sentinels,
            sentinel_ports,
            dir,
        };
        crate::wait::wait_for(
            "the replica in sync and three sentinels that know it and each other",
            Duration::from_secs(30),
            || {
                command(set.replica_port, "INFO replication").contains("master_link_status:up")
                    && set.sentinel_ports.iter().all(|&p| {
                        let r = command(p, &format!("SENTINEL ckquorum {MASTER_NAME}"));
                        r.starts_with("+OK")
                            && command(p, &format!("SENTINEL replicas {MASTER_NAME}"))
                                .contains(&replica_port.to_string())
                    })
            },
        );
        Some(set)
    }

    /// The `[redis]` lines of a node of this set: sentinels, master name, key file (the url's
    /// host is not used).
    pub fn config(&self) -> String {
        let list: Vec<String> = self
            .sentinel_ports
            .iter()
            .map(|p| format!("\"127.0.0.1:{p}\""))
            .collect();
        format!(
            "url = \"redis://sentinel-named\"\nsentinels = [{}]\nmaster_name = \"{MASTER_NAME}\"\nkey_file = \"{}\"\n",
            list.join(", "),
            self.master.key_file().display()
        )
    }

    /// The port of the master the first sentinel names now.
    pub fn master_port(&self) -> Option<u16> {
        let r = command(
            self.sentinel_ports[0],
            &format!("SENTINEL get-master-addr-by-name {MASTER_NAME}"),
        );
        r.lines()
            .filter(|l| !l.starts_with(['*', '$']))
            .nth(1)?
            .trim()
            .parse()
            .ok()
    }

    /// The sentinels' working directory (their configs).
    pub fn dir(&self) -> &std::path::Path {
        self.dir.path()
    }
}

impl Drop for SentinelSet {
    fn drop(&mut self) {
        for c in self
            .sentinels
            .iter_mut()
            .chain(std::iter::once(&mut self.replica))
        {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}
