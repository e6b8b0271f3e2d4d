//! Control sockets take only those they should: made 0660 whatever the umask (here 000),
//! peers checked with SO_PEERCRED (another user, run with `setpriv`, is refused even where
//! the file mode would let it in; a member of `[control] group` is let in), files named by a
//! command read only as the peer could and never echoed, and a second server that fails to
//! start leaves the running one's socket alone.
//!
//! Needs root (to run commands as another user); elsewhere it says so loudly and skips.

use std::os::unix::fs::PermissionsExt as _;
use std::path::Path;
use std::process::Command;
use std::time::Duration;

use palisade_tests::servers::{Dnsd, Zone};

/// `dnsd ctl -s SOCKET ARGS...` as user and group 65534 (nobody, nogroup), no other group.
fn ctl_as_nobody(socket: &Path, args: &[&str]) -> (bool, String) {
    ctl_of_as_nobody("dnsd", socket, args)
}

/// `BIN ctl -s SOCKET ARGS...` as nobody (dnsd or http-front).
fn ctl_of_as_nobody(bin: &str, socket: &Path, args: &[&str]) -> (bool, String) {
    let out = Command::new("setpriv")
        .args(["--reuid=65534", "--regid=65534", "--clear-groups"])
        .arg(palisade_tests::bin(bin))
        .arg("ctl")
        .arg("-s")
        .arg(socket)
        .args(args)
        .output()
        .expect("run setpriv");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.success(), text)
}

fn root() -> bool {
    // SAFETY: geteuid has no preconditions.
    let uid = unsafe { libc::geteuid() };
    if uid != 0 {
        palisade_tests::skipped("control access tests need root (to act as another user)");
    }
    uid == 0
}

/// Lets others traverse the server's directory (to reach the socket at all).
fn open_dir(d: &Dnsd) {
    open_dir_path(d.control_socket().parent().unwrap());
}

fn open_dir_path(dir: &Path) {
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o755)).unwrap();
}

#[test]
fn the_socket_is_0660_whatever_the_umask_and_peers_are_checked() {
    if !root() {
        return;
    }
    // The daemons inherit this process's umask: the worst one.
    // SAFETY: umask has no preconditions (each test is its own process).
    unsafe { libc::umask(0) };
    let d = Dnsd::builder().zone(Zone::data("example.com.")).start();
    open_dir(&d);
    let mode = std::fs::metadata(d.control_socket())
        .unwrap()
        .permissions()
        .mode();
    assert_eq!(mode & 0o777, 0o660, "socket mode {mode:o}");
    // Another user: the file mode keeps it out.
    let (ok, out) = ctl_as_nobody(
        d.control_socket(),
        &["block", "add", "0.0.0.0/0", "--force"],
    );
    assert!(!ok, "{out}");
    assert!(d.ctl(&["block", "list"]).1.contains("(no blocks)"));

    // A file mode that would let anyone in: the peer check still refuses, and counts.
    let open = Dnsd::builder()
        .zone(Zone::data("example.com."))
        .control("mode = \"0666\"")
        .start();
    open_dir(&open);
    let (ok, out) = ctl_as_nobody(open.control_socket(), &["block", "add", "203.0.113.0/24"]);
    assert!(!ok, "{out}");
    assert!(out.contains("permission denied"), "{out}");
    assert!(open.ctl(&["block", "list"]).1.contains("(no blocks)"));
    assert_eq!(open.stat("control.refused"), 1);
    assert!(open.stat("control.accepted") >= 1);

    // A member of [control] group is let in; files it names are read as it could.
    let grouped = Dnsd::builder()
        .zone(Zone::data("example.com."))
        .control("group = \"nogroup\"")
        .start();
    open_dir(&grouped);
    let m = std::fs::metadata(grouped.control_socket()).unwrap();
    assert_eq!(std::os::unix::fs::MetadataExt::gid(&m), 65534);
    let (ok, out) = ctl_as_nobody(
        grouped.control_socket(),
        &["block", "add", "203.0.113.0/24"],
    );
    assert!(ok, "{out}");
    // A file only root may read: refused, and nothing of it in the answer.
    let dir = tempfile::tempdir().unwrap();
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let secret = dir.path().join("secret.txt");
    std::fs::write(&secret, "hunter2-not-a-prefix\n").unwrap();
    std::fs::set_permissions(&secret, std::fs::Permissions::from_mode(0o600)).unwrap();
    let (ok, out) = ctl_as_nobody(
        grouped.control_socket(),
        &["block", "import", secret.to_str().unwrap()],
    );
    assert!(!ok, "{out}");
    assert!(out.contains("permission denied"), "{out}");
    assert!(!out.contains("hunter2"), "never echoed: {out}");
    let (ok, out) = ctl_as_nobody(
        grouped.control_socket(),
        &["zone", "add", "x.test.", secret.to_str().unwrap()],
    );
    assert!(!ok && !out.contains("hunter2"), "{out}");
    // A readable file with a bad line: its line number, not its contents.
    std::fs::set_permissions(&secret, std::fs::Permissions::from_mode(0o644)).unwrap();
    let (ok, out) = ctl_as_nobody(
        grouped.control_socket(),
        &["block", "import", secret.to_str().unwrap()],
    );
    assert!(!ok, "{out}");
    assert!(
        out.contains("secret.txt:1: not an address or prefix"),
        "{out}"
    );
    assert!(!out.contains("hunter2"), "never echoed: {out}");
}

/// A socket in a directory where any user may make names (sticky, mode 1777: /tmp) served by
/// another user than root or the caller is not talked to: nobody bound the path first (the
/// daemon then refused to start) and root's `ctl` sent it its commands and printed its fake
/// success, exit 0. The daemon's own socket there, served by root, is used.
#[test]
fn ctl_talks_to_no_other_users_socket_in_a_sticky_directory() {
    if !root() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let sticky = dir.path().join("tmp");
    std::fs::create_dir(&sticky).unwrap();
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    std::fs::set_permissions(&sticky, std::fs::Permissions::from_mode(0o1777)).unwrap();
    let sock = sticky.join("dnsd.sock");
    // A server at argv[1] that answers any request "ok" (argv[2]: made once it listens).
    let script = "import socket,sys\ns=socket.socket(socket.AF_UNIX)\ns.bind(sys.argv[1])\n\
                  s.listen(4)\nopen(sys.argv[2],'w').close()\n\
                  while True:\n  c,_=s.accept()\n  c.recv(65536)\n  c.sendall(b'{\"ok\":true,\"text\":\"fake\\\\n\"}\\n')\n  c.close()\n";
    let ready = sticky.join("ready");
    // Served at `at` by `as_user` (`None`: root, as this test): what `dnsd ctl` says.
    let ctl_against_at = |at: &Path, as_user: Option<&str>| {
        let _ = std::fs::remove_file(at);
        let _ = std::fs::remove_file(&ready);
        let mut cmd = match as_user {
            Some(u) => {
                let mut c = Command::new("setpriv");
                c.args([
                    &format!("--reuid={u}"),
                    &format!("--regid={u}"),
                    "--clear-groups",
                    "/usr/bin/python3",
                ]);
                c
            }
            None => Command::new("/usr/bin/python3"),
        };
        let mut fake = cmd
            .arg("-c")
            .arg(script)
            .arg(at)
            .arg(&ready)
            .spawn()
            .expect("run python3");
        palisade_tests::wait::wait_for("the socket", Duration::from_secs(10), || ready.exists());
        let out = Command::new(palisade_tests::bin("dnsd"))
            .args(["ctl", "-s"])
            .arg(at)
            .args(["block", "add", "192.0.2.1"])
            .output()
            .unwrap();
        let _ = fake.kill();
        let _ = fake.wait();
        let text = String::from_utf8_lossy(&out.stderr).into_owned()
            + &String::from_utf8_lossy(&out.stdout);
        (out.status.success(), text)
    };
    let ctl_against = |as_user: Option<&str>| ctl_against_at(&sock, as_user);
    let (ok, text) = ctl_against(Some("65534"));
    assert!(!ok, "{text}");
    assert!(
        text.contains("not used") && text.contains("served by uid 65534") && !text.contains("fake"),
        "{text}"
    );
    // nobody's own directory in it, made first (`/tmp/palisade`): refused too.
    let own = sticky.join("palisade");
    std::fs::create_dir(&own).unwrap();
    std::os::unix::fs::chown(&own, Some(65534), Some(65534)).unwrap();
    let (ok, text) = ctl_against_at(&own.join("dnsd.sock"), Some("65534"));
    assert!(!ok && text.contains("not used"), "{text}");
    // A daemon's own user in its own directory where only root could have made it
    // (`/run/palisade`, 0750): used.
    let run = tempfile::Builder::new().tempdir_in("/run").unwrap();
    std::fs::set_permissions(run.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let theirs = run.path().join("palisade");
    std::fs::create_dir(&theirs).unwrap();
    std::os::unix::fs::chown(&theirs, Some(65534), Some(65534)).unwrap();
    std::fs::set_permissions(&theirs, std::fs::Permissions::from_mode(0o750)).unwrap();
    let (ok, text) = ctl_against_at(&theirs.join("dnsd.sock"), Some("65534"));
    assert!(ok && text.contains("fake"), "{text}");
    // Root's socket in that directory: used.
    let (ok, text) = ctl_against(None);
    assert!(ok && text.contains("fake"), "{text}");
}

#[test]
fn a_second_server_that_fails_to_start_leaves_the_running_ones_socket() {
    let a = Dnsd::start(&[Zone::data("example.com.")]);
    let sock = a.control_socket().to_path_buf();
    // The same config again: its address and its socket are taken.
    let out = Command::new(palisade_tests::bin("dnsd"))
        .args(["serve", "-c"])
        .arg(a.config_path())
        .env("RUST_LOG", "warn")
        .output()
        .expect("run a second dnsd");
    assert!(!out.status.success());
    assert!(sock.exists(), "the running server's socket stays");
    let (ok, text) = a.ctl(&["status"]);
    assert!(ok, "{text}");
    // Another address and port, the same socket: refused for the socket, which stays.
    let cfg = std::fs::read_to_string(a.config_path()).unwrap();
    let other_ip = palisade_tests::net::test_ip();
    let other_port = palisade_tests::net::free_port(other_ip);
    let other = cfg
        .replace(
            &format!("listen = [\"{}\"]", a.addr().ip()),
            &format!("listen = [\"{other_ip}\"]"),
        )
        .replace(
            &format!("port = {}", a.addr().port()),
            &format!("port = {other_port}"),
        );
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("second.toml");
    std::fs::write(&path, other).unwrap();
    let mut child = Command::new(palisade_tests::bin("dnsd"))
        .args(["serve", "-c"])
        .arg(&path)
        .env("RUST_LOG", "warn")
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the second dnsd kept running"
        );
        std::thread::sleep(Duration::from_millis(50));
    };
    assert!(!status.success());
    let mut err = String::new();
    std::io::Read::read_to_string(child.stderr.as_mut().unwrap(), &mut err).unwrap();
    assert!(err.contains("another server answers on it"), "{err}");
    assert!(sock.exists(), "the running server's socket stays");
    assert!(a.ctl(&["status"]).0);
}

#[test]
fn http_fronts_socket_is_0660_checked_and_survives_a_second_front() {
    use palisade_tests::http::{Front, Origin, base_config};
    if !root() {
        return;
    }
    let origin = Origin::start();
    let dir = tempfile::tempdir().unwrap();
    open_dir_path(dir.path());
    let sock = dir.path().join("front.sock");
    let s2 = sock.clone();
    let o = origin.addr();
    // SAFETY: umask has no memory preconditions; the old mask is restored below.
    let old = unsafe { libc::umask(0) };
    let front = Front::start(
        move |a, m| {
            format!(
                "{}[control]\nsocket = \"{}\"\n\n[[site]]\nhosts = [\"a.test\"]\nupstream = \"app\"\n",
                base_config(a, m, o),
                s2.display()
            )
        },
        None,
    );
    // SAFETY: as above.
    unsafe { libc::umask(old) };
    let mode = std::fs::metadata(&sock).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o660, "http-front's socket is 0660 under umask 000");
    // Another user may not use it even with the file opened to everyone.
    std::fs::set_permissions(&sock, std::fs::Permissions::from_mode(0o666)).unwrap();
    let (ok, text) = ctl_of_as_nobody("http-front", &sock, &["block", "add", "10.9.0.0/16"]);
    assert!(!ok, "another uid was let in: {text}");
    let ctl = |args: &[&str]| {
        let out = Command::new(palisade_tests::bin("http-front"))
            .args(["ctl", "-s"])
            .arg(&sock)
            .args(args)
            .output()
            .unwrap();
        (
            out.status.success(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
        )
    };
    let (ok, list) = ctl(&["block", "list"]);
    assert!(ok && !list.contains("10.9.0.0/16"), "{list}");
    // The same config again: the address and the socket are taken; it fails and leaves both.
    let (code, text) =
        palisade_tests::http::run_front(&["-c", front.dir().join("front.toml").to_str().unwrap()]);
    assert_ne!(code, Some(0), "{text}");
    assert!(sock.exists(), "the running front's socket stays");
    assert!(ctl(&["status"]).0, "the running front still answers on it");
}

#[test]
fn the_control_socket_answers_junk_as_a_bad_request_and_bounds_its_connections() {
    use std::io::{Read, Write};
    use std::os::unix::net::UnixStream;
    let d = Dnsd::start(&[Zone::data("example.com")]);
    let sock = d.control_socket();
    // Bytes that are no UTF-8: a reply saying so, not a silent close.
    let mut s = UnixStream::connect(sock).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    s.write_all(b"\xff\xfe\x00junk\n").unwrap();
    let mut reply = String::new();
    s.read_to_string(&mut reply).unwrap();
    assert!(reply.contains("bad request"), "{reply:?}");
    // A valid request padded past the 64 KiB bound: refused whole (never run on what was
    // read of it), counted.
    let mut s = UnixStream::connect(sock).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let mut req = br#"{"args":["zone","remove","example.com."]}"#.to_vec();
    req.resize(70_000, b' ');
    let _ = s.write_all(&req);
    let mut reply = String::new();
    let _ = s.read_to_string(&mut reply);
    assert!(reply.contains("longer than"), "{reply:?}");
    assert!(d.metrics().lines().any(|l| {
        l.starts_with("palisade_control_connections_total{result=\"too_long\"}")
            && l.ends_with(" 1")
    }));
    let (ok, zones) = d.ctl(&["zones"]);
    assert!(ok && zones.contains("example.com."), "{zones}");
    // `ctl` itself sending one (150 KB of arguments): the refusal reaches it, not a reset
    // (the server reads the rest, bounded, before it closes).
    let long = "x".repeat(50_000);
    let (ok, text) = d.ctl(&["block", "add", &long, &long, &long]);
    assert!(
        !ok && text.contains("longer than 65536 bytes"),
        "{}",
        &text[..text.len().min(300)]
    );
    // 73 silent connections of root's: 72 fill every place (the 64 shared ones and the 8 kept
    // for root and the daemon's user), and one of them (whichever the server took last: its
    // tasks may run out of order under load) is told so at once, closed, and counted.
    let mut held: Vec<UnixStream> = (0..73)
        .map(|_| UnixStream::connect(sock).unwrap())
        .collect();
    let busy = || {
        d.metrics().lines().any(|l| {
            l.starts_with("palisade_control_connections_total{result=\"busy\"}")
                && !l.ends_with(" 0")
        })
    };
    palisade_tests::wait::wait_for("a connection turned away", Duration::from_secs(10), busy);
    let mut told = 0;
    for c in &mut held {
        c.set_read_timeout(Some(Duration::from_millis(50))).unwrap();
        let mut text = String::new();
        let _ = c.read_to_string(&mut text);
        told += usize::from(text.contains("busy"));
    }
    drop(held);
    assert!(told >= 1, "none of 73 told busy");
    assert!(busy(), "the refusal counted");
}

/// `zone add` by a member of `[control] group` reads only what that user could: not through a
/// symbolic link into a directory closed to it, not through `$INCLUDE` (refused in its
/// files, now and at later loads), and a file that does not load is answered with where it is
/// wrong, never with what it holds.
#[test]
fn a_group_members_zone_add_reads_only_what_it_could() {
    if !root() {
        return;
    }
    let state = tempfile::tempdir().unwrap();
    let d = Dnsd::builder()
        .zone(Zone::data("example.com."))
        .control("group = \"nogroup\"")
        .server_option(&format!(
            "zone_state = \"{}\"",
            state.path().join("zones-state.toml").display()
        ))
        .raw("[[template]]\nname = \"sec\"\nprimaries = [\"127.0.0.1:53\"]\n")
        .start();
    open_dir(&d);
    let zone = |origin: &str, extra: &str| {
        format!(
            "$ORIGIN {origin}\n$TTL 300\n@ SOA ns1 h 1 3600 600 86400 60\n@ NS ns1\nns1 A 192.0.2.1\n{extra}"
        )
    };
    // Root's: a closed directory with a readable zone in it, and a 0600 file of records.
    let closed = tempfile::tempdir().unwrap();
    std::fs::set_permissions(closed.path(), std::fs::Permissions::from_mode(0o700)).unwrap();
    let private = closed.path().join("private.zone");
    std::fs::write(&private, zone("p.test.", "key TXT \"hunter2-private\"\n")).unwrap();
    std::fs::set_permissions(&private, std::fs::Permissions::from_mode(0o644)).unwrap();
    let open = tempfile::tempdir().unwrap();
    open_dir_path(open.path());
    let records = open.path().join("records.txt");
    std::fs::write(&records, "key TXT \"hunter2-records\"\n").unwrap();
    std::fs::set_permissions(&records, std::fs::Permissions::from_mode(0o600)).unwrap();
    // The user's: readable files in an open directory.
    let mk = |name: &str, text: String| {
        let p = open.path().join(name);
        std::fs::write(&p, text).unwrap();
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o644)).unwrap();
        p
    };
    let link = open.path().join("link.zone");
    std::os::unix::fs::symlink(&private, &link).unwrap();
    let inc = mk(
        "inc.zone",
        zone("i.test.", &format!("$INCLUDE {}\n", records.display())),
    );
    let bad = mk("bad.zone", zone("b.test.", "x hunter2-bad 1\n"));
    let good = mk("good.zone", zone("g.test.", "www A 192.0.2.2\n"));
    let add = |origin: &str, f: &Path| {
        ctl_as_nobody(
            d.control_socket(),
            &["zone", "add", origin, f.to_str().unwrap()],
        )
    };
    let (ok, out) = add("p.test.", &link);
    assert!(!ok && out.contains("permission denied"), "{out}");
    let (ok, out) = add("i.test.", &inc);
    assert!(!ok && !out.contains("hunter2"), "{out}");
    assert!(out.contains("inc.zone:6"), "{out}");
    let (ok, out) = add("b.test.", &bad);
    assert!(!ok && !out.contains("hunter2"), "{out}");
    assert!(out.contains("bad.zone:6"), "{out}");
    let (ok, out) = add("g.test.", &good);
    assert!(ok, "{out}");
    // Never above or below a zone the user did not add (above, it would answer that zone's
    // DS and delegation; below, its names): root's example.com. is out of reach; below its
    // own g.test. it may add.
    let com = mk(
        "com.zone",
        zone("com.", &format!("example DS 1 13 2 {}\n", "ab".repeat(32))),
    );
    let (ok, out) = add("com.", &com);
    assert!(
        !ok && out.contains("above example.com."),
        "a parent of root's zone added: {out}"
    );
    let sub = mk("sub.zone", zone("sub.example.com.", ""));
    let (ok, out) = add("sub.example.com.", &sub);
    assert!(!ok && out.contains("below example.com."), "{out}");
    let mine = mk("mine.zone", zone("sub.g.test.", ""));
    let (ok, out) = add("sub.g.test.", &mine);
    assert!(ok, "below its own zone: {out}");
    // Root is told to remove the user's zone first (it would be dropped at the next load).
    let inner = mk("inner.zone", zone("in.g.test.", ""));
    let (ok, out) = d.ctl(&["zone", "add", "in.g.test.", inner.to_str().unwrap()]);
    assert!(!ok && out.contains("control-group member added"), "{out}");
    let st = std::fs::read_to_string(state.path().join("zones-state.toml")).unwrap();
    assert!(
        st.contains("[zone.added_by]") && st.contains("uid = 65534"),
        "{st}"
    );
    // The user's file now names the records: a reload does not read them.
    std::fs::write(
        &good,
        zone("g.test.", &format!("$INCLUDE {}\n", records.display())),
    )
    .unwrap();
    let (_, out) = d.ctl(&["reload", "g.test."]);
    assert!(!out.contains("hunter2"), "{out}");
    let txt = || {
        let r = palisade_tests::client::try_query(
            d.addr(),
            "key.g.test.",
            16,
            &palisade_tests::wire::QueryOpts::udp(),
        )
        .unwrap();
        String::from_utf8_lossy(&r.raw).into_owned()
    };
    assert!(!txt().contains("hunter2"));
    // The file swapped for a link into the closed directory after the add: not read.
    let swapped = closed.path().join("g.zone");
    std::fs::write(&swapped, zone("g.test.", "key TXT \"hunter2-swapped\"\n")).unwrap();
    std::fs::set_permissions(&swapped, std::fs::Permissions::from_mode(0o644)).unwrap();
    std::fs::remove_file(&good).unwrap();
    std::os::unix::fs::symlink(&swapped, &good).unwrap();
    let (ok, out) = d.ctl(&["reload", "g.test."]);
    assert!(
        !ok && out.contains("permission denied") && !out.contains("hunter2"),
        "{out}"
    );
    assert!(!txt().contains("hunter2"));
    // A file its mode bits open to all but whose ACL denies the user: as the kernel, refused
    // (a zone add served its records, a block import listed its addresses).
    let acl = mk("acl.zone", zone("a.test.", "key TXT \"hunter2-acl\"\n"));
    let st = Command::new("setfacl")
        .args(["-m", "u:nobody:---"])
        .arg(&acl)
        .status()
        .expect("setfacl (package acl)");
    assert!(st.success());
    let (ok, out) = add("a.test.", &acl);
    assert!(!ok && out.contains("permission denied"), "{out}");
    let (ok, out) = ctl_as_nobody(
        d.control_socket(),
        &["block", "import", acl.to_str().unwrap()],
    );
    assert!(!ok && out.contains("permission denied"), "{out}");
    // procfs's modes say little: /proc/PID/maps is 0444, yet only its owner may read it.
    let maps = format!("/proc/{}/maps", d.pid());
    let (ok, out) = add("m.test.", Path::new(&maps));
    assert!(!ok && out.contains("permission denied"), "{out}");
    // A name with control characters is not taken (it reached root's terminal and the log).
    let esc = mk("z\u{1b}[2J\nforged.zone", zone("e.test.", ""));
    let (ok, out) = add("e.test.", &esc);
    assert!(!ok && !out.contains('\u{1b}'), "{out:?}");
    // Another's zone — root's — is not the member's to remove (it could add its own in its
    // place), sign or roll; its own it may remove. --force is root's.
    let (ok, out) = ctl_as_nobody(d.control_socket(), &["zone", "remove", "example.com."]);
    assert!(!ok && out.contains("not a zone you added"), "{out}");
    let (ok, out) = ctl_as_nobody(d.control_socket(), &["zone-ksk-submitted", "example.com."]);
    assert!(!ok && out.contains("not a zone you added"), "{out}");
    // Nor are its re-reads and transfers the member's to trigger at will.
    for cmd in [
        ["reload", "example.com."],
        ["zone-refresh", "example.com."],
        ["zone-notify", "example.com."],
    ] {
        let (ok, out) = ctl_as_nobody(d.control_socket(), &cmd);
        assert!(
            !ok && out.contains("not a zone you added"),
            "{cmd:?}: {out}"
        );
    }
    // Every zone re-read at once, ClickHouse's tables changed: root's and the daemon's.
    for cmd in [&["reload", "--force"][..], &["events-init"][..]] {
        let (ok, out) = ctl_as_nobody(d.control_socket(), cmd);
        assert!(
            !ok && out.contains("root and dnsd's own user only"),
            "{cmd:?}: {out}"
        );
    }
    let (ok, out) = ctl_as_nobody(
        d.control_socket(),
        &["block", "add", "0.0.0.0/0", "--force"],
    );
    assert!(!ok && out.contains("--force is for root"), "{out}");
    // Blocks: a member lifts only what it added alone — not root's, not one it added on
    // top of root's (it takes no one's block over), which root still lifts.
    assert!(d.ctl(&["block", "add", "10.0.0.0/8", "--force"]).0);
    assert!(d.ctl(&["block", "add", "198.51.100.0/24"]).0);
    let member = |args: &[&str]| ctl_as_nobody(d.control_socket(), args);
    assert!(member(&["block", "add", "198.51.100.0/24"]).0);
    assert!(member(&["block", "add", "203.0.113.0/24"]).0);
    for net in ["10.0.0.0/8", "198.51.100.0/24"] {
        let (ok, out) = member(&["block", "del", net]);
        assert!(
            !ok && out.contains("not blocked by you alone"),
            "{net}: {out}"
        );
    }
    let listed = d.ctl(&["block", "list"]).1;
    assert!(listed.contains("10.0.0.0/8") && listed.contains("198.51.100.0/24"));
    assert!(listed.contains("203.0.113.0/24\t") && listed.contains(" by uid 65534"));
    let (ok, out) = member(&["block", "del", "203.0.113.0/24"]);
    assert!(ok, "{out}");
    assert!(d.ctl(&["block", "del", "198.51.100.0/24"]).0);
    let (ok, out) = ctl_as_nobody(d.control_socket(), &["zone", "remove", "sub.g.test."]);
    assert!(ok, "{out}");
    // A secondary's file (written as the daemon) is never a user's to name.
    let (ok, out) = ctl_as_nobody(
        d.control_socket(),
        &[
            "zone",
            "add",
            "s.test.",
            open.path().join("s.zone").to_str().unwrap(),
            "--template",
            "sec",
        ],
    );
    assert!(!ok, "{out}");
}

/// Under the worst umask (000), what dnsd writes that names what it serves is not writable
/// by others: the zone state file (every zone it loads at its next start).
#[test]
fn the_zone_state_is_not_writable_by_others_whatever_the_umask() {
    if !root() {
        return;
    }
    // SAFETY: umask has no preconditions (each test is its own process).
    unsafe { libc::umask(0) };
    let state = tempfile::tempdir().unwrap();
    let path = state.path().join("zones-state.toml");
    let d = Dnsd::builder()
        .zone(Zone::data("example.com."))
        .server_option(&format!("zone_state = \"{}\"", path.display()))
        .start();
    let f = state.path().join("a.zone");
    std::fs::write(
        &f,
        "$ORIGIN a.test.\n$TTL 300\n@ SOA ns1 h 1 3600 600 86400 60\n@ NS ns1\nns1 A 192.0.2.1\n",
    )
    .unwrap();
    let (ok, out) = d.ctl(&["zone", "add", "a.test.", f.to_str().unwrap()]);
    assert!(ok, "{out}");
    let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode & 0o022, 0, "zone state mode {mode:o}");
}

/// A reload applies `[control] group` and `mode`: a group taken out of the config loses its
/// access at once (it kept commanding the server until a restart).
#[test]
fn a_reload_applies_the_control_group_and_mode() {
    if !root() {
        return;
    }
    let d = Dnsd::builder()
        .zone(Zone::data("example.com."))
        .control("group = \"nogroup\"")
        .start();
    open_dir(&d);
    let (ok, out) = ctl_as_nobody(d.control_socket(), &["block", "add", "203.0.113.0/24"]);
    assert!(ok, "{out}");
    let cfg = std::fs::read_to_string(d.config_path()).unwrap();
    std::fs::write(
        d.config_path(),
        cfg.replace("group = \"nogroup\"", "mode = \"0600\""),
    )
    .unwrap();
    let (ok, out) = d.ctl(&["reload"]);
    assert!(
        ok && out.contains("[control] applied: mode 600, group (none)"),
        "{out}"
    );
    let (ok, out) = ctl_as_nobody(d.control_socket(), &["block", "add", "198.51.100.0/24"]);
    assert!(
        !ok && out.to_lowercase().contains("permission denied"),
        "{out}"
    );
    assert!(!d.ctl(&["block", "list"]).1.contains("198.51.100.0/24"));
    let m = std::fs::metadata(d.control_socket()).unwrap();
    assert_eq!(m.permissions().mode() & 0o777, 0o600);
    assert_ne!(std::os::unix::fs::MetadataExt::gid(&m), 65534);
}

/// Group members holding every shared control slot (connections that never send, or never
/// read their reply) do not lock root out: root and the daemon's user have slots of their
/// own, and a connection turned away is told why.
#[test]
fn group_members_holding_every_control_slot_leave_root_its_own() {
    if !root() {
        return;
    }
    let d = Dnsd::builder()
        .zone(Zone::data("example.com."))
        .control("group = \"nogroup\"")
        .start();
    open_dir(&d);
    let sock = d.control_socket().to_str().unwrap().to_string();
    // 70 silent connections as nobody (in nogroup): 64 held, the rest told "busy".
    let script = format!(
        "import socket,sys,time\n\
         held=[]\n\
         for i in range(70):\n\
         \x20   s=socket.socket(socket.AF_UNIX); s.connect({sock:?}); held.append(s)\n\
         time.sleep(0.5)\n\
         s=socket.socket(socket.AF_UNIX); s.connect({sock:?}); s.settimeout(5)\n\
         print('extra:', s.recv(4096).decode(), flush=True)\n\
         time.sleep(6)\n"
    );
    struct Holder(std::process::Child);
    impl Drop for Holder {
        fn drop(&mut self) {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
    let mut holder = Command::new("setpriv")
        .args(["--reuid=65534", "--regid=65534", "--clear-groups"])
        .args(["/usr/bin/python3", "-c", &script])
        .stdout(std::process::Stdio::piped())
        .spawn()
        .map(Holder)
        .expect("python3");
    let mut line = String::new();
    std::io::BufRead::read_line(
        &mut std::io::BufReader::new(holder.0.stdout.as_mut().unwrap()),
        &mut line,
    )
    .unwrap();
    assert!(
        line.contains("busy"),
        "the one turned away is told: {line:?}"
    );
    let (ok, out) = d.ctl(&["status"]);
    assert!(
        ok,
        "root's command while a group member holds every slot: {out}"
    );
}

/// A group member's `zone add` swapping the named file for a link to a file it may not read,
/// as fast as it can while the daemon opens it, never gets that file served: the file the
/// daemon checks is the file it reads, and no link is followed for such a user.
#[test]
fn a_file_swapped_while_a_group_members_zone_add_opens_it_is_never_read() {
    if !root() {
        return;
    }
    let state = tempfile::tempdir().unwrap();
    let d = Dnsd::builder()
        .zone(Zone::data("example.com."))
        .control("group = \"nogroup\"")
        .server_option(&format!(
            "zone_state = \"{}\"",
            state.path().join("zones-state.toml").display()
        ))
        .start();
    open_dir(&d);
    let zone = |txt: &str| {
        format!(
            "$TTL 300\n@ SOA ns1 h 1 3600 600 86400 60\n@ NS ns1\nns1 A 192.0.2.1\nkey TXT \"{txt}\"\n"
        )
    };
    let closed = tempfile::tempdir().unwrap();
    let secret = closed.path().join("secret.zone");
    std::fs::write(&secret, zone("hunter2-race")).unwrap();
    std::fs::set_permissions(&secret, std::fs::Permissions::from_mode(0o600)).unwrap();
    let open = tempfile::tempdir().unwrap();
    open_dir_path(open.path());
    let path = open.path().join("race.zone");
    let other = open.path().join("race.other");
    std::fs::write(&path, zone("fine")).unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).unwrap();
    std::os::unix::fs::symlink(&secret, &other).unwrap();
    // Swapped back and forth (one atomic exchange each) until told to stop.
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let swapper = {
        let (stop, a, b) = (stop.clone(), path.clone(), other.clone());
        std::thread::spawn(move || {
            use std::os::unix::ffi::OsStrExt as _;
            let a = std::ffi::CString::new(a.as_os_str().as_bytes()).unwrap();
            let b = std::ffi::CString::new(b.as_os_str().as_bytes()).unwrap();
            let mut n = 0u64;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) && n < 50_000_000 {
                // SAFETY: two NUL-terminated paths.
                unsafe {
                    libc::renameat2(
                        libc::AT_FDCWD,
                        a.as_ptr(),
                        libc::AT_FDCWD,
                        b.as_ptr(),
                        libc::RENAME_EXCHANGE,
                    )
                };
                n += 1;
                if n.is_multiple_of(64) {
                    // The adds and the server share the machine's cores with this loop.
                    std::thread::yield_now();
                }
            }
        })
    };
    let mut loaded = Vec::new();
    let mut refusals = std::collections::BTreeMap::new();
    // 150 adds, and on (600 at most) until one met the readable file: on a machine busy
    // with other tests every one of 150 could meet the link.
    for i in 0..600 {
        if i >= 150 && !loaded.is_empty() {
            break;
        }
        let origin = format!("r{i}.race.test.");
        let (ok, out) = ctl_as_nobody(
            d.control_socket(),
            &["zone", "add", &origin, path.to_str().unwrap()],
        );
        assert!(!out.contains("hunter2"), "{out}");
        if ok {
            loaded.push(origin);
        } else {
            *refusals.entry(out.replace(&origin, "ORIGIN")).or_insert(0) += 1;
        }
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    swapper.join().unwrap();
    assert!(
        !loaded.is_empty(),
        "some adds met the readable file; refusals: {refusals:#?}"
    );
    for origin in &loaded {
        let r = palisade_tests::client::try_query(
            d.addr(),
            &format!("key.{origin}"),
            16,
            &palisade_tests::wire::QueryOpts::udp(),
        )
        .unwrap();
        let text = String::from_utf8_lossy(&r.raw).into_owned();
        assert!(!text.contains("hunter2"), "{origin} serves the secret");
    }
}
