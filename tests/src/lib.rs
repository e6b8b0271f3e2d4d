//! End-to-end test helpers: binaries, corpora, loopback addresses, servers (dnsd, Knot, NSD),
//! a DNS client and a response comparator.
//!
//! - [`bin()`]: the path of a workspace binary (`target/debug/dnsd`).
//! - [`corpora::corpora_dir`]: the shared test corpora, or a loud `SKIPPED` line.
//! - [`net`]: a loopback address and free ports for each test, so tests run in parallel.
//! - [`servers`]: [`servers::Dnsd`], [`servers::Knot`] and [`servers::Nsd`] as child
//!   processes that are killed on drop.
//! - [`client`]: queries over UDP and TCP (exact bytes, mixed case, any EDNS), raw sends.
//! - [`wire`]: raw message builders and a raw reader for what hickory-proto would hide.
//! - [`compare`]: normalised responses and readable differences.
//! - [`clickhouse`]: a private clickhouse-server per test, restartable on the same ports.
//! - [`http`]: an echoing HTTP origin, http-front as a child process, HTTP/1.1 and raw HTTP/2 clients.
//! - [`nginx`]: a real nginx as the origin (what an origin that normalises paths will serve).
//! - [`dnsviz`]: DNSViz's probe and assessment of a served zone, its errors listed.
//! - [`wait`]: [`wait::wait_for`], the one bounded wait for a condition.
//! - [`ns_dnsd`]: dnsd inside a network namespace, and its control channel.
//! - [`sh()`]: a shell command in a directory (signing tools and the like), its output.
//! - [`counters`]: counters by name (`dnsd ctl stats`, Prometheus text); an absent name
//!   fails the test instead of reading as 0.

pub mod browser;
pub mod clickhouse;
pub mod client;
pub mod compare;
pub mod corpora;
pub mod counters;
pub mod delv;
pub mod dnsviz;
pub mod dot;
pub mod http;
pub mod net;
pub mod netns;
pub mod nginx;
pub mod ns_dnsd;
pub mod pebble;
pub mod pki;
pub mod redis;
pub mod rng;
pub mod servers;
pub mod stelline;
pub mod wait;
pub mod wire;

use std::path::PathBuf;

/// The path of the workspace binary `name` (from `$PALISADE_BIN_DIR`, else the target
/// directory this test runs from); panics, saying how to build it, when it is missing.
pub fn bin(name: &str) -> PathBuf {
    let dir = bin_dir();
    let p = dir.join(name);
    if !p.is_file() {
        panic!(
            "binary {name} not found at {}: run `cargo build --workspace --bins` first \
             (or set PALISADE_BIN_DIR to the directory holding it)",
            p.display()
        );
    }
    p
}

/// The directory holding the workspace binaries: `$PALISADE_BIN_DIR`, else the profile
/// directory of the running test (`target/debug` for `target/debug/deps/test-…`).
pub fn bin_dir() -> PathBuf {
    if let Some(d) = std::env::var_os("PALISADE_BIN_DIR") {
        return PathBuf::from(d);
    }
    let exe = std::env::current_exe().expect("current_exe");
    let mut dir = exe
        .parent()
        .expect("test binary has a directory")
        .to_path_buf();
    if dir.ends_with("deps") {
        dir.pop();
    }
    dir
}

/// The repository's root (the workspace directory).
pub fn repo_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("tests/ is inside the workspace")
        .to_path_buf()
}

/// The directory of the zone files and other data of these tests (`tests/data`).
pub fn data_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("data")
}

/// A field of `/proc/PID/status` in KiB (`VmRSS`, `VmHWM`); panics when there is none (a
/// size that reads as 0 would pass every bound).
pub fn status_kib(pid: u32, field: &str) -> u64 {
    let s = std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap_or_else(|e| panic!("/proc/{pid}/status (has the process exited?): {e}"));
    s.lines()
        .find_map(|l| l.strip_prefix(field)?.strip_prefix(':'))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .unwrap_or_else(|| panic!("no {field} in /proc/{pid}/status:\n{s}"))
}

/// The process's resident memory in KiB.
pub fn rss_kib(pid: u32) -> u64 {
    status_kib(pid, "VmRSS")
}

/// True when `name` is an executable on `$PATH` (or in /usr/sbin, /sbin, where Debian puts
/// knotd and nsd).
pub fn have_program(name: &str) -> bool {
    find_program(name).is_some()
}

/// The full path of the program `name` from `$PATH`, /usr/sbin or /sbin.
pub fn find_program(name: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    let extra = [PathBuf::from("/usr/sbin"), PathBuf::from("/sbin")];
    std::env::split_paths(&path)
        .chain(extra)
        .map(|d| d.join(name))
        .find(|p| {
            use std::os::unix::fs::PermissionsExt;
            p.metadata()
                .is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
        })
}

/// Prints a loud `SKIPPED:` line (tests that need a missing tool call this and return); under
/// CI or `PALISADE_STRICT` ([`in_ci`]), where `scripts/test-all` installed every tool, a skip
/// would hide a broken setup and fails the test instead.
pub fn skipped(why: &str) {
    assert!(
        !in_ci(),
        "{why} (a required tool or facility is missing: CI / PALISADE_STRICT allow no skips)"
    );
    announce_skip(why);
}

/// Prints a loud `SKIPPED:` line whatever the mode (for data that a clone may lack, such as
/// the shared corpora).
pub fn announce_skip(why: &str) {
    eprintln!("\n==================== SKIPPED: {why} ====================\n");
    println!("SKIPPED: {why}");
}

/// True under CI (`$CI`) or `$PALISADE_STRICT` (set by `scripts/test-all` as root): every
/// reference tool must be present and nothing may be skipped for want of one.
pub fn in_ci() -> bool {
    let set =
        |k: &str| std::env::var_os(k).is_some_and(|v| !v.is_empty() && v != "0" && v != "false");
    set("CI") || set("PALISADE_STRICT")
}

/// Runs `cmd` with `sh -c` in `dir`; its standard output. Panics, with its standard error,
/// when it fails.
pub fn sh(dir: &std::path::Path, cmd: &str) -> String {
    let out = std::process::Command::new("sh")
        .arg("-c")
        .arg(cmd)
        .current_dir(dir)
        .output()
        .expect("run sh");
    assert!(
        out.status.success(),
        "{cmd}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Makes `dir` 0700 (a test's umask may have made it writable by anyone).
pub fn private_dir(dir: &std::path::Path) {
    use std::os::unix::fs::PermissionsExt as _;
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700)).expect("chmod 0700");
}
