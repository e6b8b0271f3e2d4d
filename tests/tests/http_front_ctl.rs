//! `http-front ctl` against a running proxy, as `dnsd ctl` works: `block add` refuses the
//! source at once and `block del` lets it in again, `block list` names origin and reason,
//! `block import` takes a file (a bad line refuses it whole, naming the line), `stats` and
//! `status` answer, `reload` reports a refused config and keeps the running one, and a
//! second proxy cannot take a control socket the first one answers on.

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use palisade_tests::http::{Front, Origin, base_config, get};
use palisade_tests::net;
use palisade_tests::wait::wait_for;

fn ctl(socket: &Path, args: &[&str]) -> (i32, String) {
    let out = Command::new(palisade_tests::bin("http-front"))
        .arg("ctl")
        .arg("-s")
        .arg(socket)
        .args(args)
        .output()
        .expect("run http-front ctl");
    let mut s = String::from_utf8_lossy(&out.stdout).into_owned();
    s.push_str(&String::from_utf8_lossy(&out.stderr));
    (out.status.code().unwrap_or(-1), s)
}

#[test]
fn http_front_ctl_blocks_lists_imports_and_reloads() {
    let origin = Origin::start();
    let dir = tempfile::tempdir().unwrap();
    let sock = dir.path().join("front.sock");
    let s2 = sock.clone();
    let o = origin.addr();
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
    let fa = front.addr();
    let src = net::test_ip();
    assert_eq!(get(Some(src), fa, "a.test", "/").unwrap().status, 200);

    let (code, out) = ctl(
        &sock,
        &[
            "block",
            "add",
            &src.to_string(),
            "--ttl",
            "600",
            "--reason",
            "test",
        ],
    );
    assert_eq!(code, 0, "{out}");
    assert!(out.contains("blocked for 600 s"), "{out}");
    wait_for("the source refused", Duration::from_secs(5), || {
        get(Some(src), fa, "a.test", "/").is_err()
    });
    let (code, out) = ctl(&sock, &["block", "list"]);
    assert!(
        code == 0
            && out.contains(&format!("{src}/32"))
            && out.contains("operator")
            && out.contains("test"),
        "{out}"
    );
    let (code, out) = ctl(&sock, &["block", "del", &src.to_string()]);
    assert_eq!(code, 0, "{out}");
    wait_for("the source served again", Duration::from_secs(5), || {
        get(Some(src), fa, "a.test", "/").is_ok_and(|r| r.status == 200)
    });
    let (code, _) = ctl(&sock, &["block", "del", &src.to_string()]);
    assert_eq!(code, 1, "nothing to remove");
    // A TTL with a typo's extra digits made a block for ever (renewed fleet-wide each day).
    let (code, out) = ctl(
        &sock,
        &[
            "block",
            "add",
            "192.0.2.0/24",
            "--ttl",
            "18446744073709551615",
        ],
    );
    assert!(code != 0 && out.contains("at most 31622400 s"), "{out}");

    // Import: a bad line refuses the file whole, naming the line.
    let file = dir.path().join("list.txt");
    std::fs::write(
        &file,
        "198.51.100.0/24\n# a comment\n203.0.113.7\nnot-an-address\n",
    )
    .unwrap();
    let (code, out) = ctl(&sock, &["block", "import", file.to_str().unwrap()]);
    assert_eq!(code, 1, "{out}");
    assert!(out.contains("list.txt:4:"), "{out}");
    std::fs::write(&file, "198.51.100.0/24\n# a comment\n203.0.113.7\n").unwrap();
    let (code, out) = ctl(
        &sock,
        &["block", "import", file.to_str().unwrap(), "--ttl", "60"],
    );
    assert!(code == 0 && out.contains("2 entries imported"), "{out}");
    let (_, stats) = ctl(&sock, &["stats"]);
    let c = palisade_tests::counters::Counters::parse(&stats);
    assert_eq!(c.get("blockmap.entries"), 2, "{stats}");
    let (code, out) = ctl(&sock, &["status"]);
    assert!(
        code == 0 && out.contains("1 sites") && out.contains("2 blocked sources"),
        "{out}"
    );

    // A refused reload keeps the running config.
    let good = std::fs::read_to_string(front.dir().join("front.toml")).unwrap();
    std::fs::write(
        front.dir().join("front.toml"),
        format!("{good}\nbogus = 1\n"),
    )
    .unwrap();
    let (code, out) = ctl(&sock, &["reload"]);
    assert_eq!(code, 1, "{out}");
    assert!(
        out.contains("reload refused") && out.contains("bogus"),
        "{out}"
    );
    assert_eq!(get(None, fa, "a.test", "/").unwrap().status, 200);
    std::fs::write(front.dir().join("front.toml"), good).unwrap();
    let (code, out) = ctl(&sock, &["reload"]);
    assert_eq!(code, 0, "{out}");

    // Unknown commands are named; no server: exit 2.
    let (code, out) = ctl(&sock, &["frobnicate"]);
    assert!(code == 1 && out.contains("Commands"), "{out}");
    let (code, _) = ctl(&dir.path().join("none.sock"), &["status"]);
    assert_eq!(code, 2);

    // A second proxy on the same control socket is refused at start.
    let s3 = sock.clone();
    let out = Command::new(palisade_tests::bin("http-front"))
        .arg("-c")
        .arg({
            let ip = net::test_ip();
            let p = dir.path().join("second.toml");
            std::fs::write(
                &p,
                format!(
                    "[server]\nlisten = [\"{ip}:{}\"]\n\n[control]\nsocket = \"{}\"\n\n\
                     [[upstream]]\nname = \"app\"\nservers = [\"{o}\"]\n\n\
                     [[site]]\nhosts = [\"a.test\"]\nupstream = \"app\"\n",
                    net::free_port(ip),
                    s3.display()
                ),
            )
            .unwrap();
            p
        })
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("another server answers on it"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let (code, _) = ctl(&sock, &["status"]);
    assert_eq!(code, 0, "the first proxy still answers");
}
