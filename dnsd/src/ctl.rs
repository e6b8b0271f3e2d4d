//! The control socket (knotc-style): `dnsd ctl COMMAND` talks to a running server over a
//! Unix socket, one JSON request line and one JSON reply line per connection.

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
            "cannot connect to {}: {e} (is dnsd running?)",
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
