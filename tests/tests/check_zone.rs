//! `dnsd check-zone FILE` as an operator runs it: exit 0 for a zone that would load, exit 1
//! with `file:line: message` for each error otherwise (at the line of the error, in the file
//! that holds it, an `$INCLUDE`d one too), and the verdict agrees with what `serve` loads.

use std::path::{Path, PathBuf};
use std::process::Command;

use palisade_tests::servers::Zone;

/// Runs `dnsd check-zone [args...] FILE`: (exit code, stdout and stderr).
fn check_zone(args: &[&str], file: &Path) -> (i32, String) {
    let out = Command::new(palisade_tests::bin("dnsd"))
        .arg("check-zone")
        .args(args)
        .arg(file)
        .output()
        .expect("run dnsd check-zone");
    let mut text = String::from_utf8_lossy(&out.stdout).into_owned();
    text.push_str(&String::from_utf8_lossy(&out.stderr));
    (out.status.code().expect("exited, not killed"), text)
}

/// The lines of `out` that report a problem at `file:line` (`file:line: msg` or
/// `file:line:col: msg`).
fn errors_at(out: &str, file: &Path, line: u32) -> Vec<String> {
    let prefix = format!("{}:{line}:", file.display());
    out.lines()
        .filter(|l| l.starts_with(&prefix))
        .map(str::to_string)
        .collect()
}

/// The `(file, line)` of every line of `out` that reports a problem at a line
/// (`file:line: message` or `file:line:col: message`), in order.
fn error_lines(out: &str) -> Vec<(String, u32)> {
    out.lines()
        .filter_map(|l| {
            let (at, _msg) = l.split_once(": ")?;
            let mut parts = at.split(':');
            let file = parts.next()?;
            let line = parts.next()?.parse().ok()?;
            match parts.next().map(str::parse::<u32>) {
                None | Some(Ok(_)) if parts.next().is_none() => Some((file.to_string(), line)),
                _ => None,
            }
        })
        .collect()
}

const HEAD: &str = "$ORIGIN example.org.\n$TTL 300\n\
                    @ SOA ns1 hostmaster 1 3600 600 86400 60\n\
                    @ NS ns1\n\
                    ns1 A 192.0.2.1\n";

fn write(dir: &Path, name: &str, text: &str) -> PathBuf {
    let p = dir.join(name);
    if let Some(d) = p.parent() {
        std::fs::create_dir_all(d).unwrap();
    }
    std::fs::write(&p, text).unwrap();
    p
}

#[test]
fn the_test_zones_are_valid_exit_0() {
    for origin in ["example.com", "example.net", "child.example.com"] {
        let z = Zone::data(origin);
        let (code, out) = check_zone(&[], &z.file);
        assert_eq!(code, 0, "{}: {out}", z.file.display());
        assert!(out.contains("loads"), "{out}");
        assert!(
            error_lines(&out).is_empty(),
            "no problem reported for {}: {out}",
            z.file.display()
        );
        let (code, out) = check_zone(&["--origin", &format!("{origin}.")], &z.file);
        assert_eq!(code, 0, "{out}");
        // --quiet: nothing at all for a good zone.
        let (code, out) = check_zone(&["-q"], &z.file);
        assert_eq!((code, out.trim()), (0, ""), "quiet and valid");
    }
}

#[test]
fn a_valid_zone_with_includes_exit_0() {
    let dir = tempfile::tempdir().unwrap();
    write(
        dir.path(),
        "sub/hosts.zone",
        "www A 192.0.2.80\nmail A 192.0.2.25\n",
    );
    let main = write(
        dir.path(),
        "example.org.zone",
        &format!("{HEAD}$INCLUDE sub/hosts.zone\n@ MX 10 mail\n"),
    );
    let (code, out) = check_zone(&[], &main);
    assert_eq!(code, 0, "{out}");
    assert!(
        out.contains("example.org.") && out.contains("6 records"),
        "{out}"
    );
}

#[test]
fn an_error_at_a_known_line_exit_1_with_file_and_line() {
    let dir = tempfile::tempdir().unwrap();
    // Line 7 holds a bad IPv4 address; the lines around it are valid.
    let text = format!("{HEAD}www A 192.0.2.80\nbad A 192.0.2.300\nok A 192.0.2.81\n");
    assert_eq!(text.lines().nth(6), Some("bad A 192.0.2.300"));
    let file = write(dir.path(), "example.org.zone", &text);
    let (code, out) = check_zone(&[], &file);
    assert_eq!(code, 1, "{out}");
    let at7 = errors_at(&out, &file, 7);
    assert_eq!(at7.len(), 1, "one error at line 7: {out}");
    assert!(
        at7[0].contains("IPv4"),
        "the message says what was expected: {out}"
    );
    assert_eq!(
        error_lines(&out),
        vec![(file.display().to_string(), 7)],
        "line 7 and nothing else: {out}"
    );
    assert!(out.contains("does not load"), "{out}");

    // Several errors: each reported at its own line, in order.
    let text = format!("{HEAD}a MX ten mail\nb A 192.0.2.1\nc AAAA 2001:db8::zz\nd TXT \"ok\"\n");
    let file = write(dir.path(), "example.org.zone", &text);
    let (code, out) = check_zone(&[], &file);
    assert_eq!(code, 1, "{out}");
    let f = file.display().to_string();
    assert_eq!(error_lines(&out), vec![(f.clone(), 6), (f, 8)], "{out}");

    // A zone that parses but does not validate (CNAME beside other data at lines 6-7).
    let text = format!("{HEAD}www A 192.0.2.80\nwww CNAME ns1\n");
    let file = write(dir.path(), "example.org.zone", &text);
    let (code, out) = check_zone(&[], &file);
    assert_eq!(code, 1, "{out}");
    let lines: Vec<u32> = error_lines(&out).into_iter().map(|(_, l)| l).collect();
    assert!(
        !lines.is_empty() && lines.iter().all(|l| (6..=7).contains(l)),
        "the error names line 6 or 7: {out}"
    );
    assert!(out.contains("CNAME"), "{out}");
}

#[test]
fn an_error_inside_an_included_file_names_that_file_and_its_line() {
    let dir = tempfile::tempdir().unwrap();
    // The included file's line 3 is wrong; the including file is fine.
    let inc = write(
        dir.path(),
        "sub/hosts.zone",
        "www A 192.0.2.80\nmail A 192.0.2.25\nmx MX 10 mail extra-field\nftp A 192.0.2.21\n",
    );
    let main = write(
        dir.path(),
        "example.org.zone",
        &format!("{HEAD}$INCLUDE sub/hosts.zone\n@ MX 10 mail\n"),
    );
    let (code, out) = check_zone(&[], &main);
    assert_eq!(code, 1, "{out}");
    assert_eq!(
        error_lines(&out),
        vec![(inc.display().to_string(), 3)],
        "the included file and its line, not the including one: {out}"
    );
    assert!(errors_at(&out, &main, 6).is_empty(), "{out}");

    // Nested includes (a relative name is relative to the including file): the innermost
    // file is named, with its own line numbers.
    let deep = write(
        dir.path(),
        "sub/deeper/more.zone",
        "; comment\n\nx A 192.0.2.7\ny A not-an-address\n",
    );
    write(
        dir.path(),
        "sub/hosts.zone",
        "www A 192.0.2.80\n$INCLUDE deeper/more.zone\n",
    );
    let (code, out) = check_zone(&[], &main);
    assert_eq!(code, 1, "{out}");
    assert_eq!(
        error_lines(&out),
        vec![(deep.display().to_string(), 4)],
        "{out}"
    );

    // An $INCLUDE of a missing file: the error is at the $INCLUDE line of the includer.
    write(
        dir.path(),
        "sub/hosts.zone",
        "www A 192.0.2.80\n\n$INCLUDE nowhere.zone\n",
    );
    let (code, out) = check_zone(&[], &main);
    assert_eq!(code, 1, "{out}");
    assert_eq!(
        error_lines(&out),
        vec![(inc.display().to_string(), 3)],
        "{out}"
    );
    assert!(out.contains("nowhere.zone"), "{out}");
}

#[test]
fn a_missing_file_exit_1_and_a_bad_origin_is_a_usage_error() {
    let dir = tempfile::tempdir().unwrap();
    let (code, out) = check_zone(&[], &dir.path().join("absent.zone"));
    assert_eq!(code, 1, "{out}");
    assert!(out.contains("absent.zone"), "{out}");
    let z = Zone::data("example.com");
    let (code, out) = check_zone(&["--origin", "bad..name."], &z.file);
    assert_ne!(code, 0, "{out}");
    assert_ne!(code, 1, "a usage error is not a verdict on the zone: {out}");
}

#[test]
fn check_zone_and_a_running_server_agree_on_the_same_files() {
    let dir = tempfile::tempdir().unwrap();
    write(dir.path(), "sub/hosts.zone", "www A 192.0.2.80\n");
    let file = write(
        dir.path(),
        "example.org.zone",
        &format!("{HEAD}$INCLUDE sub/hosts.zone\n"),
    );
    assert_eq!(check_zone(&[], &file).0, 0);
    let dnsd = palisade_tests::servers::Dnsd::builder()
        .zone(Zone::new("example.org.", &file))
        .start();

    // The included file goes bad at line 2: check-zone says so, and a reload fails on the
    // same file and line (and keeps serving the last good version).
    let inc = write(
        dir.path(),
        "sub/hosts.zone",
        "www A 192.0.2.80\nmail MX 10\n",
    );
    let (code, out) = check_zone(&[], &file);
    assert_eq!(code, 1, "{out}");
    assert_eq!(
        error_lines(&out),
        vec![(inc.display().to_string(), 2)],
        "{out}"
    );
    let (ok, reload) = dnsd.ctl(&["reload", "example.org."]);
    assert!(!ok, "the server refuses what check-zone refuses: {reload}");
    assert!(
        reload.contains(&format!("{}:2", inc.display())),
        "the reload names the same place: {reload}"
    );

    // Fixed: both accept it.
    write(
        dir.path(),
        "sub/hosts.zone",
        "www A 192.0.2.80\nmail MX 10 www\n",
    );
    let (code, out) = check_zone(&[], &file);
    assert_eq!(code, 0, "{out}");
    let (ok, reload) = dnsd.ctl(&["reload", "example.org."]);
    assert!(ok, "{reload}");

    // The file now holds another zone (example.net.): served as example.org. it does not
    // load, and check-zone told the origin example.org. says the same (it must not check
    // the file as the zone its SOA names instead of the origin it was given).
    let net = Zone::data("example.net");
    std::fs::copy(&net.file, &file).unwrap();
    let (code, out) = check_zone(&["--origin", "example.org."], &file);
    assert_eq!(code, 1, "{out}");
    assert!(out.contains("zone example.org. does not load"), "{out}");
    assert!(!error_lines(&out).is_empty(), "{out}");
    let (ok, reload) = dnsd.ctl(&["reload", "example.org."]);
    assert!(!ok, "{reload}");
}

/// Every error of a file is reported in one run: after a syntax error reading goes on at the
/// next line outside parentheses (an unclosed `(` included), at most 100 errors are listed,
/// then how many more there are.
#[test]
fn check_zone_reports_every_error_in_one_run() {
    let dir = tempfile::tempdir().unwrap();
    let text = format!(
        "{HEAD}a A 999.1.1.1\nb TXT \"unterminated\nc MX bogus\nd ( A 192.0.2.4\ne A 192.0.2.5\n\
         f A 1.2.3.4 extra\nh BOGUS 1\n"
    );
    let f = write(dir.path(), "many.zone", &text);
    let (code, out) = check_zone(&["--origin", "example.org."], &f);
    assert_eq!(code, 1, "{out}");
    let lines: Vec<u32> = error_lines(&out).into_iter().map(|(_, l)| l).collect();
    // Lines 6, 7, 8 and 9 (a '(' never closed), then 11 and 12 after it.
    for want in [6, 7, 8, 9, 11, 12] {
        assert!(lines.contains(&want), "no error at line {want}:\n{out}");
    }
    // 150 bad records: 100 listed, then the count of the rest.
    let mut big = HEAD.to_string();
    for i in 0..150 {
        big.push_str(&format!("x{i} A 300.0.0.{i}\n"));
    }
    let f = write(dir.path(), "big.zone", &big);
    let (code, out) = check_zone(&["--origin", "example.org."], &f);
    assert_eq!(code, 1);
    assert_eq!(error_lines(&out).len(), 100, "{out}");
    assert!(out.contains("50 more errors"), "{out}");
}

/// What Knot, NSD and BIND all refuse (or the RFCs forbid), refused at its line, and what
/// they take, taken: a CR not followed by LF (read as a blank, `n<CR>2 A` would load as
/// owner `n`, TTL 2), a backslash before the end of a line (it joined the next record into
/// a TXT), TYPE0, a text form for UINFO, a record no DNS message can carry; and CLASS1 (IN
/// in RFC 3597's spelling), `$INCLUDE /dev/null`, UINFO in `\#` form.
#[test]
fn what_every_other_server_refuses_is_refused_at_its_line() {
    let dir = tempfile::tempdir().unwrap();
    let huge = {
        let s = format!("\"{}\" ", "a".repeat(255));
        format!("x TXT ( {} \"{}\" )\n", s.repeat(255), "a".repeat(254))
    };
    for (body, what) in [
        ("n\r2 A 192.0.2.2\n".to_string(), "CR not followed by LF"),
        (
            "w TXT \"w\"\\\nc CAA 0 issue \"ca.example\"\n".to_string(),
            "escaped newline",
        ),
        ("x TYPE0 \\# 0\n".to_string(), "TYPE0"),
        ("x UINFO hello\n".to_string(), "no text form"),
        (huge, "cannot fit in any DNS message"),
    ] {
        let file = write(dir.path(), "bad.zone", &format!("{HEAD}{body}"));
        let (code, out) = check_zone(&[], &file);
        assert_eq!(code, 1, "{body:?}: {out}");
        let at6 = errors_at(&out, &file, 6);
        assert!(
            at6.iter().any(|l| l.contains(what)),
            "{what} at line 6: {out}"
        );
    }
    let body = "x CLASS1 A 192.0.2.9\ny IN UINFO \\# 2 0178\n$INCLUDE /dev/null\n";
    let file = write(dir.path(), "good.zone", &format!("{HEAD}{body}"));
    let (code, out) = check_zone(&[], &file);
    assert_eq!(code, 0, "{out}");
    // No $TTL: a record without a TTL takes the default, said even after a TTL was written
    // (BIND would repeat that one).
    let text = "$ORIGIN example.org.\n@ 600 SOA ns1 h 1 2 3 4 5\n@ NS ns1\nns1 A 192.0.2.1\n";
    let file = write(dir.path(), "nottl.zone", text);
    let (code, out) = check_zone(&[], &file);
    assert_eq!(code, 0, "{out}");
    let at3 = errors_at(&out, &file, 3);
    assert!(
        at3.iter()
            .any(|l| l.contains("using the default 3600") && l.contains("600")),
        "{out}"
    );
}
