//! The Redis test server (from palisade-tests) plus the synchronous connection these
//! tests use for their own look-ups.
//!
//! Included as a module by `redis_sync.rs` and `benches/redis_sync.rs`; built alone it checks itself.
#![allow(dead_code)]

pub use palisade_tests::redis::RedisServer;

/// A synchronous connection to a test server.
pub trait Conn {
    /// A connection for the test's own look-ups.
    fn conn(&self) -> redis::Connection;
}

impl Conn for RedisServer {
    fn conn(&self) -> redis::Connection {
        redis::Client::open(self.url())
            .and_then(|c| c.get_connection())
            .expect("connect to test redis")
    }
}

#[test]
fn harness_starts_restarts_and_kills() {
    use std::net::TcpStream;
    let Some(mut r) = RedisServer::start() else {
        return;
    };
    let mut c = r.conn();
    let _: () = redis::cmd("SET").arg("k").arg("v").query(&mut c).unwrap();
    r.restart();
    let mut c = r.conn();
    let v: Option<String> = redis::cmd("GET").arg("k").query(&mut c).unwrap();
    assert_eq!(v, None, "a restarted test server starts empty");
    let port = r.port;
    drop(r);
    assert!(
        TcpStream::connect(("127.0.0.1", port)).is_err(),
        "killed on drop"
    );
}
