//! http-front's configuration: a bad file is refused with `file:line:col: key: message` (at
//! start and by `--check`), and a bad file on SIGHUP leaves the previous config serving.

use palisade_tests::http::{Front, Origin, base_config, get, run_front};
use palisade_tests::net;
use palisade_tests::wait::wait_for;
use std::time::Duration;

const SITE: &str = "[[site]]\nhosts = [\"a.test\"]\nupstream = \"app\"\n";

fn refused(front_toml: &str, rules: Option<&str>) -> String {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("front.toml");
    std::fs::write(&path, front_toml).unwrap();
    if let Some(r) = rules {
        std::fs::write(dir.path().join("rules.toml"), r).unwrap();
    }
    let p = path.to_str().unwrap();
    let (code, out) = run_front(&["-c", p]);
    assert_eq!(code, Some(1), "{out}");
    let (code2, out2) = run_front(&["--check", "-c", p]);
    assert_eq!(code2, Some(1), "{out2}");
    out.replace(&format!("{}/", dir.path().display()), "")
}

#[test]
fn http_bad_config_is_refused_with_file_line_and_key() {
    let upstream = "[[upstream]]\nname = \"app\"\nservers = [\"127.0.0.1:9\"]\n";

    let e = refused(
        &format!("[server]\nworkers = 1\nbogus = 3\n{upstream}{SITE}"),
        None,
    );
    assert!(e.contains("front.toml:3:1: "), "{e}");
    assert!(e.contains("unknown field `bogus`"), "{e}");

    let e = refused(
        &format!("[limits]\nmax_uri_bytes = 1\n{upstream}{SITE}"),
        None,
    );
    assert!(
        e.contains("front.toml:2:17: limits.max_uri_bytes: must be between"),
        "{e}"
    );

    let e = refused(
        &format!("[server]\nlisten = [\"127.0.0.1\"]\n{upstream}{SITE}"),
        None,
    );
    assert!(
        e.contains("front.toml:2:") && e.contains("server.listen"),
        "{e}"
    );

    let e = refused(
        &format!("{upstream}{}", SITE.replace("\"app\"", "\"apq\"")),
        None,
    );
    assert!(
        e.contains("front.toml:6:12: site[0].upstream: no [[upstream]] named \"apq\""),
        "{e}"
    );

    let e = refused(
        &format!("[rules]\nfile = \"rules.toml\"\n{upstream}{SITE}"),
        Some("[[tenant]]\nid = 1\ndeny = [\"10.0.0.0/40\"]\n"),
    );
    assert!(
        e.contains("front.toml:2:8: rules.file: rules.toml:3:9: "),
        "{e}"
    );

    // A good file passes --check.
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("front.toml");
    std::fs::write(&path, format!("{upstream}{SITE}")).unwrap();
    let (code, out) = run_front(&["--check", "-c", path.to_str().unwrap()]);
    assert_eq!(code, Some(0), "{out}");
    assert!(out.contains("ok (1 sites, 1 upstreams"), "{out}");
}

#[test]
fn http_reload_keeps_the_last_good_config() {
    let origin = Origin::start();
    let rules_x = "[[tenant]]\nid = 1\n[[tenant.rule]]\nname = \"x\"\naction = \"deny\"\nwhen = [{ attr = \"path\", prefix = \"/x\" }]\n";
    let rules_y = rules_x.replace("\"/x\"", "\"/y\"");
    let sites = |more: &str| {
        format!(
            "[rules]\nfile = \"rules.toml\"\n\n[[site]]\nhosts = [\"a.test\"]\nupstream = \"app\"\ntenant = 1\n{more}"
        )
    };
    let mut good = String::new();
    let front = Front::start(
        |a, m| {
            let text = format!("{}{}", base_config(a, m, origin.addr()), sites(""));
            text
        },
        Some(rules_x),
    );
    let (fa, src) = (front.addr(), net::test_ip());
    good.push_str(&std::fs::read_to_string(front.dir().join("front.toml")).unwrap());
    let check = |path: &str, host: &str| get(Some(src), fa, host, path).unwrap().status;
    assert_eq!(
        (
            check("/", "a.test"),
            check("/x", "a.test"),
            check("/", "b.test")
        ),
        (200, 403, 421)
    );

    // A bad front.toml: refused, the old config keeps serving.
    front.write_config(&format!("{good}[server]\nbogus = 1\n"), None);
    assert!(!front.reload());
    assert_eq!((check("/", "a.test"), check("/x", "a.test")), (200, 403));
    // A bad rules file: refused too.
    front.write_config(&good, Some("[[tenant]]\nid = \"one\"\n"));
    assert!(!front.reload());
    assert_eq!((check("/", "a.test"), check("/x", "a.test")), (200, 403));
    assert!(front.log().contains("config refused"), "{}", front.log());
    // Files cut to nothing (they read as "no sites", "no rules"), and what a start refuses
    // when it binds (an address listed twice): refused too.
    front.write_config("", None);
    assert!(!front.reload());
    front.write_config(&good, Some(" \n"));
    assert!(!front.reload());
    let listen = good
        .lines()
        .find(|l| l.starts_with("listen = ["))
        .expect("a listen line");
    let twice = listen.replace(
        "]",
        &format!(", {}]", &listen["listen = [".len()..listen.len() - 1]),
    );
    front.write_config(&good.replacen(listen, &twice, 1), Some(rules_x));
    assert!(!front.reload());
    assert_eq!((check("/", "a.test"), check("/x", "a.test")), (200, 403));
    assert!(front.log().contains("is empty"), "{}", front.log());
    assert!(front.log().contains("listed twice"), "{}", front.log());
    assert_eq!(
        front.metric("http_front_reloads_total{result=\"failed\"}"),
        5
    );
    // A setting read at start only: the reload says it waits for a restart.
    // Named at each reload until a restart applies it (not only at the reload that made it).
    front.write_config(&good.replacen("workers = 2", "workers = 1", 1), None);
    for n in 1..=2 {
        assert!(front.reload(), "{}", front.log());
        wait_for("the warning", Duration::from_secs(5), || {
            let l = front.log();
            l.matches("server.workers changed: read at start only")
                .count()
                >= n
        });
    }

    // A good one: new site, new rules.
    front.write_config(
        &format!("{good}\n[[site]]\nhosts = [\"b.test\"]\nupstream = \"app\"\n"),
        Some(&rules_y),
    );
    assert!(front.reload(), "{}", front.log());
    assert_eq!(
        (
            check("/", "b.test"),
            check("/x", "a.test"),
            check("/y", "a.test")
        ),
        (200, 200, 403)
    );
    assert_eq!(front.metric("http_front_reloads_total{result=\"ok\"}"), 3);
}
