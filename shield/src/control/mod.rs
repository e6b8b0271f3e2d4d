//! The control socket of both daemons (knotc-style): `dnsd ctl COMMAND` and `http-front ctl
//! COMMAND` talk to a running server over a Unix socket, one JSON request line and one JSON
//! reply line per connection. [`serve`] is the server's loop, [`call`] the client; [`block`]
//! holds the block-map commands both daemons answer alike.

pub mod block;

use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::time::Duration;

use serde::{Deserialize, Serialize};

/// A request: the command and its arguments, as typed.
#[derive(Debug, Serialize, Deserialize)]
pub struct Request {
    /// Command words, e.g. `["reload", "example.com."]`.
    pub args: Vec<String>,
}

/// A reply: success and the text to print.
#[derive(Debug, Serialize, Deserialize)]
pub struct Reply {
    /// The command succeeded.
    pub ok: bool,
    /// What to print.
    pub text: String,
}

impl Reply {
    /// A successful reply.
    pub fn ok(text: impl Into<String>) -> Reply {
        Reply {
            ok: true,
            text: text.into(),
        }
    }
    /// A failed reply.
    pub fn err(text: impl Into<String>) -> Reply {
        Reply {
            ok: false,
            text: text.into(),
        }
    }
}

/// Longest request line accepted.
pub const MAX_REQUEST: usize = 64 * 1024;

/// Sends `args` to the server at `socket`; returns its reply.
pub fn call(socket: &Path, args: &[String], timeout: Duration) -> Result<Reply, String> {
    let mut s = UnixStream::connect(socket).map_err(|e| {
        format!(
            "cannot connect to {}: {e} (is the server running?)",
            socket.display()
        )
    })?;
    s.set_read_timeout(Some(timeout)).ok();
    s.set_write_timeout(Some(timeout)).ok();
    let mut line = serde_json::to_string(&Request {
        args: args.to_vec(),
    })
    .map_err(|e| e.to_string())?;
    line.push('\n');
    s.write_all(line.as_bytes())
        .map_err(|e| format!("cannot send to {}: {e}", socket.display()))?;
    let mut r = BufReader::new(s);
    let mut reply = String::new();
    r.read_line(&mut reply)
        .map_err(|e| format!("no reply from {}: {e}", socket.display()))?;
    serde_json::from_str(&reply).map_err(|e| format!("bad reply from server: {e}"))
}

/// Serves the control socket `l` until the task is dropped: each connection's request goes
/// to `run` (the daemon's commands) and its reply is written back.
pub async fn serve<F, Fut>(l: tokio::net::UnixListener, run: F)
where
    F: Fn(Vec<String>) -> Fut + Clone + Send + 'static,
    Fut: std::future::Future<Output = Reply> + Send + 'static,
{
    use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt};
    loop {
        let Ok((s, _)) = l.accept().await else {
            continue;
        };
        let run = run.clone();
        tokio::spawn(async move {
            let (rd, mut wr) = s.into_split();
            let mut line = String::new();
            let mut rd = tokio::io::BufReader::new(rd.take(MAX_REQUEST as u64));
            if rd.read_line(&mut line).await.is_err() {
                return;
            }
            let reply = match serde_json::from_str::<Request>(&line) {
                Ok(req) => run(req.args).await,
                Err(e) => Reply::err(format!("bad request: {e}")),
            };
            let mut out = serde_json::to_string(&reply).unwrap_or_default();
            out.push('\n');
            let _ = wr.write_all(out.as_bytes()).await;
        });
    }
}

/// Binds the control socket at `path` (a stale socket file left by a crash is replaced;
/// a socket another live server answers on is an error).
pub fn bind(path: &Path) -> std::io::Result<tokio::net::UnixListener> {
    if path.exists() {
        if UnixStream::connect(path).is_ok() {
            return Err(std::io::Error::new(
                std::io::ErrorKind::AddrInUse,
                format!("{}: another server answers on it", path.display()),
            ));
        }
        std::fs::remove_file(path)?;
    }
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir)?;
    }
    tokio::net::UnixListener::bind(path)
}
