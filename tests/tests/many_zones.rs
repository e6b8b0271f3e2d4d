//! Many tenants' zones: `[[template]]`, `[[zone_set]]` (a directory, a list file), zones
//! added and removed at run time (`ctl zone add` / `zone remove`, kept in `[server]
//! zone_state` across reloads and restarts), and zones that come and go without moving any
//! other zone's state.

use std::fmt::Write as _;
use std::net::{IpAddr, SocketAddr, UdpSocket};
use std::path::Path;
use std::time::Duration;

use palisade_tests::servers::{Dnsd, Zone};
use palisade_tests::wait::wait_for;
use palisade_tests::wire::{QueryOpts, RawMsg, build_query};

/// Writes a small zone `origin` with serial `serial` to `path`.
fn write_zone(path: &Path, origin: &str, serial: u32) {
    let mut s = String::new();
    let _ = writeln!(
        s,
        "$ORIGIN {origin}\n$TTL 300\n@ SOA ns1 hostmaster {serial} 7200 3600 1209600 300\n@ NS ns1\nns1 A 192.0.2.1\nwww A 192.0.2.{}",
        serial % 250
    );
    std::fs::write(path, s).unwrap();
}

/// One query of `name`/`qtype` from `src`: (rcode, SOA serial in the answer) or None when
/// nothing came back within 400 ms, or only TC=1 without an answer (a limited flooder).
fn ask(server: SocketAddr, src: IpAddr, name: &str, qtype: u16) -> Option<(u8, Option<u32>)> {
    let s = UdpSocket::bind(SocketAddr::new(src, 0)).unwrap();
    s.connect(server).unwrap();
    s.set_read_timeout(Some(Duration::from_millis(400)))
        .unwrap();
    s.send(&build_query(7, name, qtype, &QueryOpts::udp()))
        .unwrap();
    let mut buf = [0u8; 4096];
    let n = s.recv(&mut buf).ok()?;
    let m = RawMsg::parse(&buf[..n]).ok()?;
    if m.has(0x0200) && m.counts[1] == 0 {
        // TC=1 without an answer: a flooder's NXDOMAIN truncated (limited, as a drop is).
        return None;
    }
    let msg = hickory_proto::op::Message::from_vec(&buf[..n]).ok()?;
    let serial = msg.answers.iter().find_map(|rr| match &rr.data {
        hickory_proto::rr::RData::SOA(s) => Some(s.serial),
        _ => None,
    });
    Some((m.rcode() as u8, serial))
}

/// The SOA serial `name` is served with, or None (no answer, or not authoritative).
fn serial(server: SocketAddr, name: &str) -> Option<u32> {
    ask(server, IpAddr::from([127, 0, 0, 1]), name, 6).and_then(|(rc, s)| (rc == 0).then_some(s)?)
}

const REFUSED: u8 = 5;
const NXDOMAIN: u8 = 3;

#[test]
fn templates_zone_sets_and_zones_added_at_run_time() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let set_dir = d.join("set");
    std::fs::create_dir(&set_dir).unwrap();
    for i in 0..40 {
        let o = format!("t{i}.test.");
        write_zone(&set_dir.join(format!("t{i}.test.zone")), &o, 100 + i);
    }
    // Files the directory set must skip: another suffix, a hidden file.
    std::fs::write(set_dir.join("README"), "not a zone").unwrap();
    std::fs::write(set_dir.join(".t99.test.zone"), "hidden").unwrap();
    // A list file: one zone with its file, one named by the template's file pattern.
    let pattern_dir = d.join("by-pattern");
    std::fs::create_dir(&pattern_dir).unwrap();
    write_zone(&d.join("listed.zone"), "listed.test.", 7);
    write_zone(
        &pattern_dir.join("patterned.test.zone"),
        "patterned.test.",
        8,
    );
    std::fs::write(
        d.join("zones.list"),
        "# tenants of the list\nlisted.test. listed.zone\npatterned.test.   # file from the template\n",
    )
    .unwrap();
    write_zone(&d.join("anchor.zone"), "anchor.test.", 1);
    let state = d.join("zone-state.toml");
    let mut anchor = Zone::new("anchor.test.", d.join("anchor.zone"));
    anchor.options.push("template = \"plain\"".into());
    let raw = format!(
        "[[template]]\nname = \"default\"\ncookies = \"off\"\n\n\
         [[template]]\nname = \"plain\"\n\n\
         [[template]]\nname = \"pattern\"\nfile = \"{}/%s.zone\"\ntenant = 3\n\n\
         [[zone_set]]\ndir = \"{}\"\n\n\
         [[zone_set]]\nlist = \"{}\"\ntemplate = \"pattern\"\n",
        pattern_dir.display(),
        set_dir.display(),
        d.join("zones.list").display()
    );
    let dnsd = Dnsd::builder()
        .zone(anchor.clone())
        .server_option(&format!("zone_state = \"{}\"", state.display()))
        .raw("[defence.rrl]\nenabled = false")
        .raw(&raw)
        .start();
    let a = dnsd.addr();
    for i in 0..40 {
        assert_eq!(
            serial(a, &format!("t{i}.test.")),
            Some(100 + i),
            "t{i}.test."
        );
    }
    assert_eq!(serial(a, "listed.test."), Some(7));
    assert_eq!(serial(a, "patterned.test."), Some(8));
    assert_eq!(
        ask(a, IpAddr::from([127, 0, 0, 1]), "t99.test.", 6).map(|r| r.0),
        Some(REFUSED),
        "a hidden file is no zone"
    );
    let (ok, zones) = dnsd.ctl(&["zones"]);
    assert!(ok && zones.contains("memory "), "{zones}");
    assert_eq!(zones.lines().count(), 43, "{zones}");

    // A zone added at run time, with a template's file pattern not needed (file given).
    let new_file = d.join("new.zone");
    write_zone(&new_file, "new.test.", 55);
    let (ok, out) = dnsd.ctl(&[
        "zone",
        "add",
        "new.test.",
        new_file.to_str().unwrap(),
        "--template",
        "pattern",
    ]);
    assert!(ok, "{out}");
    assert!(out.contains("added, serial 55"), "{out}");
    assert_eq!(serial(a, "new.test."), Some(55));
    let kept = std::fs::read_to_string(&state).unwrap();
    assert!(
        kept.contains("new.test.") && kept.contains("pattern"),
        "{kept}"
    );
    // Refused: a zone already served, an unknown template, a zone that does not load (and
    // nothing of it is kept), a relative path resolved by ctl against its own directory.
    let (ok, out) = dnsd.ctl(&["zone", "add", "t3.test.", new_file.to_str().unwrap()]);
    assert!(!ok && out.contains("already served"), "{out}");
    let (ok, out) = dnsd.ctl(&[
        "zone",
        "add",
        "x.test.",
        new_file.to_str().unwrap(),
        "--template",
        "nope",
    ]);
    assert!(!ok && out.contains("no [[template]] named nope"), "{out}");
    let bad = d.join("bad.zone");
    std::fs::write(
        &bad,
        "$TTL 300\n@ SOA ns1 hostmaster 1 2 3 4 5\n@ IN BOGUS x\n",
    )
    .unwrap();
    let (ok, out) = dnsd.ctl(&["zone", "add", "bad.test.", bad.to_str().unwrap()]);
    assert!(!ok && out.contains("does not load"), "{out}");
    assert!(
        !std::fs::read_to_string(&state)
            .unwrap()
            .contains("bad.test.")
    );
    assert_eq!(
        ask(a, IpAddr::from([127, 0, 0, 1]), "bad.test.", 6).map(|r| r.0),
        Some(REFUSED)
    );
    // Zones the config defines are removed in the config, not at run time.
    for z in ["anchor.test.", "t5.test.", "listed.test."] {
        let (ok, out) = dnsd.ctl(&["zone", "remove", z]);
        assert!(!ok && out.contains("defined by the config"), "{z}: {out}");
        assert!(serial(a, z).is_some(), "{z} still served");
    }
    // A reload keeps the zone added at run time and picks up a new file in the directory.
    write_zone(&set_dir.join("t40.test.zone"), "t40.test.", 140);
    let (ok, out) = dnsd.ctl(&["reload"]);
    assert!(ok, "{out}");
    assert_eq!(serial(a, "t40.test."), Some(140));
    assert_eq!(serial(a, "new.test."), Some(55));

    // A restart (a second server reading the same config sections and zone state) serves it.
    let second = Dnsd::builder()
        .zone(anchor.clone())
        .server_option(&format!("zone_state = \"{}\"", state.display()))
        .raw(&raw)
        .start();
    wait_for(
        "the restarted server serves the zone added at run time",
        Duration::from_secs(10),
        || serial(second.addr(), "new.test.") == Some(55),
    );
    drop(second);

    // Removed at run time: not served, not kept.
    let (ok, out) = dnsd.ctl(&["zone", "remove", "new.test."]);
    assert!(ok, "{out}");
    assert_eq!(
        ask(a, IpAddr::from([127, 0, 0, 1]), "new.test.", 6).map(|r| r.0),
        Some(REFUSED)
    );
    assert!(
        !std::fs::read_to_string(&state)
            .unwrap()
            .contains("new.test.")
    );
    let (ok, out) = dnsd.ctl(&["zone", "remove", "new.test."]);
    assert!(!ok && out.contains("not served"), "{out}");
    assert_eq!(serial(a, "t7.test."), Some(107), "the others stay");
}

#[test]
fn config_errors_name_the_template_set_or_list_line() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    std::fs::write(d.join("l.list"), "a.test. a.zone\nb.test. b.zone extra\n").unwrap();
    let cases: [(&str, &str); 5] = [
        (
            "[[zone]]\norigin = \"a.\"\ntemplate = \"t\"\n",
            "zone[0].template: no [[template]] named t",
        ),
        ("[[template]]\nname = \"t\"\nbogus = 1\n", "bogus"),
        (
            "[[template]]\nname = \"t\"\n[[template]]\nname = \"t\"\n",
            "defined twice",
        ),
        (
            "[[zone_set]]\nlist = \"l.list\"\n",
            "l.list:2: expected ORIGIN [FILE]",
        ),
        ("[[zone_set]]\ndir = \"nowhere\"\n", "zone_set[0].dir"),
    ];
    for (i, (toml, want)) in cases.iter().enumerate() {
        let p = d.join(format!("c{i}.toml"));
        std::fs::write(&p, toml).unwrap();
        let out = std::process::Command::new(palisade_tests::bin("dnsd"))
            .args(["check-config", "-c"])
            .arg(&p)
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stderr).into_owned()
            + &String::from_utf8_lossy(&out.stdout);
        assert!(!out.status.success(), "{toml}: accepted");
        assert!(
            text.contains(want) && text.contains(&format!("c{i}.toml")),
            "{toml}: {text}"
        );
    }
}

#[test]
fn check_config_without_zones_passes_a_bad_zone_that_serve_leaves_out() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    write_zone(&d.join("good.zone"), "good.test.", 1);
    std::fs::write(
        d.join("bad.zone"),
        "$TTL 300\n@ SOA ns1 hm 1 2 3 4 5\n@ IN BOGUS x\n",
    )
    .unwrap();
    let cfg = d.join("c.toml");
    std::fs::write(
        &cfg,
        "[[zone]]\norigin = \"good.test.\"\nfile = \"good.zone\"\n\
         [[zone]]\norigin = \"bad.test.\"\nfile = \"bad.zone\"\n",
    )
    .unwrap();
    let run = |args: &[&str]| {
        let o = std::process::Command::new(palisade_tests::bin("dnsd"))
            .args(args)
            .arg(&cfg)
            .output()
            .unwrap();
        (
            o.status.success(),
            String::from_utf8_lossy(&o.stdout).into_owned(),
        )
    };
    let (ok, out) = run(&["check-config", "-c"]);
    assert!(!ok && out.contains("bad.zone"), "{out}");
    let (ok, out) = run(&["check-config", "--no-zones", "-c"]);
    assert!(ok && out.contains("2 zones listed, not loaded"), "{out}");
}

#[test]
fn zones_coming_and_going_move_no_other_zones_flood_state() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    for o in ["a", "b", "c"] {
        write_zone(&d.join(format!("{o}.zone")), &format!("{o}.test."), 1);
    }
    let state = d.join("state.toml");
    let dnsd = Dnsd::builder()
        .zone(Zone::new("a.test.", d.join("a.zone")))
        .zone(Zone::new("b.test.", d.join("b.zone")))
        .server_option(&format!("zone_state = \"{}\"", state.display()))
        .raw("[defence.rrl]\nenabled = false\n[defence.cookies]\nenabled = false")
        .raw(
            "[defence.random_subdomain]\nzone_nxdomains_per_second = 20\nsource_nxdomain_limit = 5\n\
             escalate_after = 100000\nwindow = 60\nmin_nx_share = 0.5",
        )
        .start();
    let a = dnsd.addr();
    let flooder = IpAddr::from([127, 3, 0, 1]);
    // The defence counts in windows of `window` seconds aligned on the clock: the test runs
    // within one (a run that crossed a minute began the flooder's count again, and its next
    // NXDOMAIN was answered).
    palisade_tests::wait::clear_of_window_edge(Duration::from_secs(60), Duration::from_secs(10));
    // Flood b.test. (the second zone) from one source until its NXDOMAIN are dropped.
    let s = UdpSocket::bind(SocketAddr::new(flooder, 0)).unwrap();
    s.connect(a).unwrap();
    for i in 0..300u16 {
        s.send(&build_query(
            i,
            &format!("r{i}.b.test."),
            1,
            &QueryOpts::udp(),
        ))
        .unwrap();
    }
    std::thread::sleep(Duration::from_millis(300));
    let dropped = dnsd.stat("random_subdomain.dropped");
    assert!(dropped > 0, "the flood was not limited");
    assert_eq!(
        ask(a, flooder, "again.b.test.", 1),
        None,
        "the flooder is limited before"
    );
    // The first zone goes (config edit + reload) and a new one comes (taking its place).
    let cfg = std::fs::read_to_string(dnsd.config_path()).unwrap();
    let block = format!(
        "[[zone]]\norigin = \"a.test.\"\nfile = \"{}\"\n",
        d.join("a.zone").display()
    );
    assert!(cfg.contains(&block), "{cfg}");
    std::fs::write(dnsd.config_path(), cfg.replace(&block, "")).unwrap();
    let (ok, out) = dnsd.ctl(&["reload"]);
    assert!(ok, "{out}");
    assert_eq!(ask(a, flooder, "x.a.test.", 1).map(|r| r.0), Some(REFUSED));
    let c = d.join("c.zone");
    let (ok, out) = dnsd.ctl(&["zone", "add", "c.test.", c.to_str().unwrap()]);
    assert!(ok, "{out}");
    // b.test. is still under attack and the flooder still limited there ...
    assert_eq!(
        ask(a, flooder, "after.b.test.", 1),
        None,
        "b.test.'s flood state moved when another zone went"
    );
    // ... while c.test. (in the first zone's old place) starts calm.
    assert_eq!(
        ask(a, flooder, "nothing.c.test.", 1).map(|r| r.0),
        Some(NXDOMAIN),
        "c.test. took over another zone's flood state"
    );
    assert_eq!(dnsd.stat("random_subdomain.zones_under_attack"), 1);
}

/// A config given by a relative path (`dnsd check-config -c conf/p.toml`) finds its zone
/// sets' files once: they were joined to the config's directory twice
/// (`conf/conf/zones/…`), and every zone of the set failed.
#[test]
fn zone_sets_of_a_config_given_by_a_relative_path_load() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    std::fs::create_dir_all(d.join("conf/zones")).unwrap();
    write_zone(&d.join("conf/zones/a.test.zone"), "a.test.", 1);
    write_zone(&d.join("conf/zones/b.test"), "b.test.", 1);
    std::fs::write(d.join("conf/l.list"), "b.test. zones/b.test\n").unwrap();
    std::fs::write(
        d.join("conf/p.toml"),
        "[[zone_set]]\ndir = \"zones\"\nsuffix = \".zone\"\n\n[[zone_set]]\nlist = \"l.list\"\n",
    )
    .unwrap();
    let out = std::process::Command::new(palisade_tests::bin("dnsd"))
        .args(["check-config", "-c", "conf/p.toml"])
        .current_dir(d)
        .output()
        .unwrap();
    let text =
        String::from_utf8_lossy(&out.stderr).into_owned() + &String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success() && text.contains("2 zones"), "{text}");
}
