//! Catalog zones (RFC 9432) with real processes: Knot producing a catalog that dnsd consumes,
//! dnsd producing one that Knot consumes — members added, removed and changed — and dnsd's
//! consumer rules (groups pick templates, a member another catalog holds is taken only when
//! its `coo` hands it over, a new unique id starts a member afresh) against a dnsd primary.

use std::net::SocketAddr;
use std::path::Path;
use std::time::{Duration, Instant};

use palisade_tests::client;
use palisade_tests::compare::Normalized;
use palisade_tests::net;
use palisade_tests::servers::{Dnsd, Knot, Zone};
use palisade_tests::wait::wait_for;
use palisade_tests::wire::QueryOpts;

const CATALOG: &str = "catalog.test.";

fn skip_without_knot() -> bool {
    if !palisade_tests::have_program("knotd") {
        palisade_tests::skipped("knotd not installed");
        assert!(
            !palisade_tests::in_ci(),
            "CI must have knotd (scripts/install-deps)"
        );
        return true;
    }
    false
}

/// A member zone: refresh an hour, so that what a test sees comes from NOTIFY or from the
/// consumer asking at once, never from a timer.
fn member_text(origin: &str, serial: u32) -> String {
    format!(
        "$ORIGIN {origin}\n$TTL 300\n@ SOA ns1 hostmaster {serial} 3600 600 86400 300\n@ NS ns1\nns1 A 192.0.2.1\nwww A 192.0.2.{}\n",
        serial % 250
    )
}

/// The SOA serial `addr` answers for `zone` (NOERROR with an answer), or None.
fn serial(addr: SocketAddr, zone: &str) -> Option<u32> {
    let r = client::try_query(addr, zone, 6, &QueryOpts::udp()).ok()?;
    let n = Normalized::from_reply(&r);
    let soa = n.answer.iter().find(|r| r.rtype == 6)?;
    soa.text.split_whitespace().nth(2)?.parse().ok()
}

/// Waits (bounded) until `addr` serves `zone` at `want` (None: does not serve it).
fn wait(what: &str, addr: SocketAddr, zone: &str, want: Option<u32>, log: &dyn Fn() -> String) {
    let end = Instant::now() + Duration::from_secs(30);
    while Instant::now() < end {
        if serial(addr, zone) == want {
            return;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    panic!(
        "{what}: {zone} at {addr} is {:?}, not {want:?} after 30 s; log:\n{}",
        serial(addr, zone),
        log()
    );
}

fn fresh_addr() -> SocketAddr {
    let ip = net::test_ip();
    SocketAddr::from((ip, net::free_port(ip)))
}

fn write(path: &Path, text: &str) {
    std::fs::write(path, text).unwrap();
}

/// Knot's config: the generated catalog and its members (each `(zone, group)`), NOTIFY to
/// `dnsd`, transfers open to loopback.
fn knot_producer_conf(
    dir: &Path,
    addr: SocketAddr,
    dnsd: SocketAddr,
    members: &[(&str, &str)],
) -> String {
    let mut s = format!(
        "{}remote:\n  - id: dnsd\n    address: {}@{}\n    via: {}\n\n\
         acl:\n  - id: xfr\n    address: 127.0.0.0/8\n    action: transfer\n\n\
         template:\n  - id: default\n    storage: \"{}\"\n    zonefile-sync: -1\n    \
         journal-content: changes\n    semantic-checks: off\n    notify: dnsd\n    acl: xfr\n\n\
         zone:\n  - domain: {CATALOG}\n    catalog-role: generate\n",
        Knot::server_section(dir, addr),
        dnsd.ip(),
        dnsd.port(),
        addr.ip(),
        dir.display(),
    );
    for (z, group) in members {
        s.push_str(&format!(
            "  - domain: {z}\n    file: \"{}/{z}zone\"\n    catalog-role: member\n    catalog-zone: {CATALOG}\n",
            dir.display()
        ));
        if !group.is_empty() {
            s.push_str(&format!("    catalog-group: {group}\n"));
        }
    }
    s
}

#[test]
fn knot_produces_a_catalog_dnsd_consumes_it() {
    if skip_without_knot() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let kdir = dir.path().join("knot");
    std::fs::create_dir(&kdir).unwrap();
    for (z, s) in [("m1.test.", 1), ("m2.test.", 1), ("m3.test.", 1)] {
        write(&kdir.join(format!("{z}zone")), &member_text(z, s));
    }
    let ddir = dir.path().join("dnsd");
    std::fs::create_dir(&ddir).unwrap();
    let at = fresh_addr();
    let members = [("m1.test.", "gold"), ("m2.test.", "")];
    let kd = kdir.clone();
    let knot = Knot::start_raw(
        &[Zone::new("m1.test.", kdir.join("m1.test.zone"))],
        move |d, addr| {
            // Knot's storage and zone files in our directory (members written there above).
            let _ = d;
            knot_producer_conf(&kd, addr, at, &members)
        },
    );
    let mut cat = Zone::new(CATALOG, ddir.join("catalog.test.zone"));
    cat.options = vec![
        format!("primaries = [\"{}\"]", knot.addr()),
        "catalog = \"consumer\"".into(),
        "catalog_template = \"members\"".into(),
        "catalog_groups = [\"gold\"]".into(),
    ];
    // A member's group "gold" picks the template of that name (its own file pattern).
    let dnsd = Dnsd::builder()
        .at(at)
        .zone(Zone::new("anchor.test.", {
            let f = ddir.join("anchor.zone");
            write(&f, &member_text("anchor.test.", 1));
            f
        }))
        .raw(&format!(
            "[[template]]\nname = \"members\"\nfile = \"{0}/member-%s.zone\"\n\n\
             [[template]]\nname = \"gold\"\nfile = \"{0}/gold-%s.zone\"\n",
            ddir.display()
        ))
        .zone(cat.clone())
        .start();
    let d = dnsd.addr();
    let log = || format!("dnsd:\n{}\nknot:\n{}", dnsd.log(), knot.log());
    wait("m1 from Knot's catalog", d, "m1.test.", Some(1), &log);
    wait("m2 from Knot's catalog", d, "m2.test.", Some(1), &log);
    assert!(
        ddir.join("gold-m1.test.zone").exists(),
        "group gold → template gold"
    );
    assert!(
        ddir.join("member-m2.test.zone").exists(),
        "no group → catalog_template"
    );
    let (_, zones) = dnsd.ctl(&["zones"]);
    assert!(zones.contains("member of catalog catalog.test."), "{zones}");
    let (ok, out) = dnsd.ctl(&["zone", "remove", "m1.test."]);
    assert!(!ok && out.contains("member of the catalog"), "{out}");

    // A member changes at Knot: NOTIFY, IXFR, the new serial at dnsd.
    write(&kdir.join("m1.test.zone"), &member_text("m1.test.", 2));
    let (ok, out) = knot.knotc(&["zone-reload", "m1.test."]);
    assert!(ok, "{out}");
    wait("m1 changed", d, "m1.test.", Some(2), &log);

    // Members added and removed at Knot (its config reloaded): the catalog follows.
    let conf = knot_producer_conf(
        &kdir,
        knot.addr(),
        at,
        &[("m1.test.", "gold"), ("m3.test.", "")],
    );
    std::fs::write(knot.conf_path(), conf).unwrap();
    let (ok, out) = knot.knotc(&["reload"]);
    assert!(ok, "{out}");
    wait("m3 added", d, "m3.test.", Some(1), &log);
    wait("m2 removed", d, "m2.test.", None, &log);
    assert_eq!(serial(d, "m1.test."), Some(2), "m1 stays");

    // A restart with the primary gone serves the catalog and its members from their copies.
    drop(knot);
    drop(dnsd);
    let again = Dnsd::builder()
        .raw(&format!(
            "[[template]]\nname = \"members\"\nfile = \"{0}/member-%s.zone\"\n\n\
             [[template]]\nname = \"gold\"\nfile = \"{0}/gold-%s.zone\"\n",
            ddir.display()
        ))
        .zone(cat)
        .start();
    let a = again.addr();
    let log = || again.log();
    wait("m1 from its copy", a, "m1.test.", Some(2), &log);
    wait("m3 from its copy", a, "m3.test.", Some(1), &log);
    assert_eq!(serial(a, "m2.test."), None);
}

#[test]
fn dnsd_produces_a_catalog_knot_consumes_it() {
    if skip_without_knot() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    for z in ["m1.test.", "m2.test.", "m3.test.", "ready.test."] {
        write(&d.join(format!("{z}zone")), &member_text(z, 1));
    }
    let state = d.join("state.toml");
    let at = fresh_addr();
    // Knot first (dnsd NOTIFYs it): a consumer of dnsd's catalog, members by its template.
    let kdir = d.join("knot");
    std::fs::create_dir(&kdir).unwrap();
    let kd = kdir.clone();
    let ready = d.join("ready.test.zone");
    let knot = Knot::start_raw(&[Zone::new("ready.test.", &ready)], move |_, addr| {
        format!(
            "{}remote:\n  - id: dnsd\n    address: {}@{}\n\n\
             acl:\n  - id: notify\n    address: 127.0.0.0/8\n    action: notify\n\n\
             template:\n  - id: default\n    storage: \"{kd}\"\n    zonefile-sync: -1\n    \
             journal-content: changes\n    semantic-checks: off\n  \
             - id: members\n    storage: \"{kd}\"\n    master: dnsd\n    acl: notify\n    \
             zonefile-sync: -1\n    journal-content: changes\n    semantic-checks: off\n\n\
             zone:\n  - domain: ready.test.\n    file: \"{}\"\n  - domain: {CATALOG}\n    \
             master: dnsd\n    acl: notify\n    catalog-role: interpret\n    catalog-template: members\n",
            Knot::server_section(&kd, addr),
            at.ip(),
            at.port(),
            ready.display(),
            kd = kd.display()
        )
    });
    let k = knot.addr();
    // Every zone of the default template is listed in dnsd's catalog; m2 with a group.
    let mut m2 = Zone::new("m2.test.", d.join("m2.test.zone"));
    m2.options.push("catalog_group = \"gold\"".into());
    let dnsd = Dnsd::builder()
        .at(at)
        .zone(Zone::new("m1.test.", d.join("m1.test.zone")))
        .zone(m2)
        .server_option(&format!("zone_state = \"{}\"", state.display()))
        .raw(&format!(
            "[[template]]\nname = \"default\"\ncatalog_zone = \"{CATALOG}\"\n\
             allow_transfer = [\"127.0.0.0/8\"]\nnotify = [\"{k}\"]\n\n\
             [[template]]\nname = \"catalog\"\nallow_transfer = [\"127.0.0.0/8\"]\nnotify = [\"{k}\"]\n\n\
             [[zone]]\norigin = \"{CATALOG}\"\ncatalog = \"producer\"\ntemplate = \"catalog\"\n"
        ))
        .start();
    let p = dnsd.addr();
    assert!(
        serial(p, CATALOG).is_some(),
        "dnsd serves the catalog it writes"
    );
    let log = || format!("knot:\n{}\ndnsd:\n{}", knot.log(), dnsd.log());
    // Knot asked before dnsd was up: a zone-refresh saves waiting for its retry timer.
    let _ = knot.knotc(&["zone-refresh", CATALOG]);
    wait(
        "m1 at Knot from dnsd's catalog",
        k,
        "m1.test.",
        Some(1),
        &log,
    );
    wait(
        "m2 at Knot from dnsd's catalog",
        k,
        "m2.test.",
        Some(1),
        &log,
    );
    assert_eq!(serial(k, "m3.test."), None);

    // Added at run time: listed, NOTIFY, Knot takes the catalog and then the member.
    let m3 = d.join("m3.test.zone");
    let (ok, out) = dnsd.ctl(&["zone", "add", "m3.test.", m3.to_str().unwrap()]);
    assert!(ok, "{out}");
    wait("m3 added at Knot", k, "m3.test.", Some(1), &log);
    // A member changes at dnsd: NOTIFY, Knot transfers it.
    write(&d.join("m1.test.zone"), &member_text("m1.test.", 2));
    let (ok, out) = dnsd.ctl(&["reload", "m1.test."]);
    assert!(ok, "{out}");
    wait("m1 changed at Knot", k, "m1.test.", Some(2), &log);
    // Removed at run time: Knot drops it.
    let (ok, out) = dnsd.ctl(&["zone", "remove", "m3.test."]);
    assert!(ok, "{out}");
    wait("m3 removed at Knot", k, "m3.test.", None, &log);
    assert_eq!(serial(k, "m2.test."), Some(1), "m2 stays");
    let (_, zones) = dnsd.ctl(&["zones"]);
    assert!(zones.contains("catalog written by dnsd"), "{zones}");
}

/// A catalog zone's text: `version`, then each (member, unique id, extra property lines).
fn catalog_text(
    origin: &str,
    serial: u32,
    version: &str,
    members: &[(&str, &str, &str)],
) -> String {
    let mut s = format!(
        "$ORIGIN {origin}\n$TTL 0\n@ SOA invalid. invalid. {serial} 1 1 3600 0\n@ NS invalid.\nversion TXT \"{version}\"\n"
    );
    for (z, id, extra) in members {
        s.push_str(&format!("{id}.zones PTR {z}\n{extra}"));
    }
    s
}

#[test]
fn consumer_rules_groups_coo_and_reset() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let pdir = d.join("primary");
    std::fs::create_dir(&pdir).unwrap();
    for z in ["m1.test.", "m2.test.", "m3.test."] {
        write(&pdir.join(format!("{z}zone")), &member_text(z, 1));
    }
    let a_file = pdir.join("a.cat.zone");
    let b_file = pdir.join("b.cat.zone");
    write(
        &a_file,
        &catalog_text(
            "a.cat.",
            1,
            "2",
            &[
                ("m1.test.", "a1", ""),
                ("m2.test.", "a2", "group.a2.zones TXT \"gold\"\n"),
            ],
        ),
    );
    write(
        &b_file,
        &catalog_text("b.cat.", 1, "2", &[("m3.test.", "b3", "")]),
    );
    let open = |z: &str, f: std::path::PathBuf| {
        let mut z = Zone::new(z, f);
        z.options.push("allow_transfer = [\"127.0.0.0/8\"]".into());
        z
    };
    let primary = Dnsd::builder()
        .zones(&[
            open("a.cat.", a_file.clone()),
            open("b.cat.", b_file.clone()),
            open("m1.test.", pdir.join("m1.test.zone")),
            open("m2.test.", pdir.join("m2.test.zone")),
            open("m3.test.", pdir.join("m3.test.zone")),
        ])
        .start();
    let p = primary.addr();
    let cdir = d.join("consumer");
    std::fs::create_dir(&cdir).unwrap();
    let consumer_cat = |z: &str| {
        let mut c = Zone::new(z, cdir.join(format!("{z}zone")));
        c.options = vec![
            format!("primaries = [\"{p}\"]"),
            "catalog = \"consumer\"".into(),
            "catalog_groups = [\"gold\"]".into(),
        ];
        c
    };
    let consumer = Dnsd::builder()
        .zones(&[consumer_cat("a.cat."), consumer_cat("b.cat.")])
        .raw(&format!(
            "[[template]]\nname = \"gold\"\nfile = \"{}/gold-%s.zone\"\n",
            cdir.display()
        ))
        .start();
    let c = consumer.addr();
    let log = || consumer.log();
    for z in ["m1.test.", "m2.test.", "m3.test."] {
        wait("member", c, z, Some(1), &log);
    }
    assert!(
        cdir.join("gold-m2.test.zone").exists(),
        "group gold → template gold"
    );
    assert!(
        cdir.join("m1.test.zone").exists(),
        "no group: beside the catalog's file"
    );
    let holder = |z: &str| {
        let (_, t) = consumer.ctl(&["zones"]);
        t.lines()
            .find(|l| l.starts_with(z))
            .and_then(|l| l.split("member of catalog ").nth(1))
            .map(|s| s.split('\t').next().unwrap().to_string())
    };
    assert_eq!(holder("m1.test."), Some("a.cat.".into()));
    let refresh = |z: &str| {
        let (ok, out) = consumer.ctl(&["zone-refresh", z]);
        assert!(ok, "{out}");
    };
    let primary_reload = || {
        let (ok, out) = primary.ctl(&["reload"]);
        assert!(ok, "{out}");
    };

    // b.cat. lists m1 too, without a coo from a.cat.: refused, a.cat. keeps it.
    write(
        &b_file,
        &catalog_text(
            "b.cat.",
            2,
            "2",
            &[("m3.test.", "b3", ""), ("m1.test.", "b1", "")],
        ),
    );
    primary_reload();
    refresh("b.cat.");
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(
        holder("m1.test."),
        Some("a.cat.".into()),
        "{}",
        consumer.log()
    );
    // a.cat. hands m1 over (coo b.cat.): b.cat. takes it.
    write(
        &a_file,
        &catalog_text(
            "a.cat.",
            2,
            "2",
            &[
                ("m1.test.", "a1", "coo.a1.zones PTR b.cat.\n"),
                ("m2.test.", "a2", "group.a2.zones TXT \"gold\"\n"),
            ],
        ),
    );
    primary_reload();
    refresh("a.cat.");
    let end = Instant::now() + Duration::from_secs(20);
    while holder("m1.test.").as_deref() != Some("b.cat.") && Instant::now() < end {
        std::thread::sleep(Duration::from_millis(100));
    }
    assert_eq!(
        holder("m1.test."),
        Some("b.cat.".into()),
        "{}",
        consumer.log()
    );
    wait("m1 under b.cat.", c, "m1.test.", Some(1), &log);

    // A new unique id for m2: its data goes and is transferred afresh; a.cat. dropping m1
    // (now b.cat.'s) leaves it served.
    write(
        &a_file,
        &catalog_text(
            "a.cat.",
            3,
            "2",
            &[("m2.test.", "a2new", "group.a2new.zones TXT \"gold\"\n")],
        ),
    );
    primary_reload();
    refresh("a.cat.");
    let end = Instant::now() + Duration::from_secs(20);
    while !consumer.log().contains("reset=1") && Instant::now() < end {
        std::thread::sleep(Duration::from_millis(100));
    }
    assert!(consumer.log().contains("reset=1"), "{}", consumer.log());
    wait("m2 after its reset", c, "m2.test.", Some(1), &log);
    assert_eq!(serial(c, "m1.test."), Some(1), "m1 stays with b.cat.");

    // A catalog of another schema version is refused, as a transfer: its members stay.
    write(&a_file, &catalog_text("a.cat.", 4, "1", &[]));
    primary_reload();
    let (ok, out) = consumer.ctl(&["zone-refresh", "a.cat."]);
    assert!(
        !ok && out.contains("serial 4 is not a valid catalog"),
        "{out}"
    );
    assert!(consumer.log().contains("version"), "{}", consumer.log());
    assert_eq!(serial(c, "a.cat."), Some(3), "the last valid version stays");
    assert_eq!(serial(c, "m2.test."), Some(1), "m2 stays");
    // b.cat. stops listing m3: it goes.
    assert!(cdir.join("m3.test.zone").exists(), "m3's copy");
    write(
        &b_file,
        &catalog_text("b.cat.", 3, "2", &[("m1.test.", "b1", "")]),
    );
    primary_reload();
    refresh("b.cat.");
    wait("m3 removed", c, "m3.test.", None, &log);
    // Its copy goes with it (listed again, it starts afresh; the disk does not fill).
    wait_for("m3's copy deleted", Duration::from_secs(5), || {
        !cdir.join("m3.test.zone").exists()
    });

    // b.cat. leaves the consumer's config: its members go with it, a.cat.'s stay.
    let cfg = std::fs::read_to_string(consumer.config_path()).unwrap();
    let start = cfg.find("origin = \"b.cat.\"").unwrap();
    let block_start = cfg[..start].rfind("[[zone]]").unwrap();
    let block_end = cfg[start..]
        .find("\n\n")
        .map_or(cfg.len(), |e| start + e + 2);
    std::fs::write(
        consumer.config_path(),
        format!("{}{}", &cfg[..block_start], &cfg[block_end..]),
    )
    .unwrap();
    let (ok, out) = consumer.ctl(&["reload"]);
    assert!(ok, "{out}");
    wait("m1 gone with b.cat.", c, "m1.test.", None, &log);
    assert_eq!(serial(c, "m2.test."), Some(1), "a.cat.'s m2 stays");
    let (_, zones) = consumer.ctl(&["zones"]);
    assert!(!zones.contains("m1.test."), "{zones}");
    // Nothing of it is kept: no transfer settings, no refresh task.
    let (ok, out) = consumer.ctl(&["zone-refresh", "m1.test."]);
    assert!(!ok && out.contains("not a secondary zone"), "{out}");
}

/// A temporary directory with a `primary` and a `consumer` directory in it.
fn primary_and_consumer_dirs() -> (tempfile::TempDir, std::path::PathBuf, std::path::PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let (pdir, cdir) = (dir.path().join("primary"), dir.path().join("consumer"));
    std::fs::create_dir(&pdir).unwrap();
    std::fs::create_dir(&cdir).unwrap();
    (dir, pdir, cdir)
}

/// A catalog's members as [`catalog_text`] takes them: (zone, unique id, extra lines).
type Members<'a> = &'a [(&'a str, &'a str, &'a str)];

/// A dnsd primary in `pdir` of the catalogs `cats` (each: origin, members) and of the member
/// zones `members` (serial 1), transfers open to loopback.
fn catalog_primary(pdir: &Path, cats: &[(&str, Members<'_>)], members: &[&str]) -> Dnsd {
    let open = |z: &str, f: std::path::PathBuf| {
        let mut z = Zone::new(z, f);
        z.options.push("allow_transfer = [\"127.0.0.0/8\"]".into());
        z
    };
    let mut pz = Vec::new();
    for (origin, list) in cats {
        let f = pdir.join(format!("{origin}zone"));
        write(&f, &catalog_text(origin, 1, "2", list));
        pz.push(open(origin, f));
    }
    for m in members {
        let f = pdir.join(format!("{m}zone"));
        write(&f, &member_text(m, 1));
        pz.push(open(m, f));
    }
    Dnsd::builder().zones(&pz).start()
}

/// Members whose names make file names longer than the system takes (near 255 bytes, or of
/// escaped bytes, three times their length) are written under a cut name and served: the
/// write failed, and such a member was never served (Knot serves it).
#[test]
fn catalog_members_too_long_for_a_file_name_are_served() {
    let dir = tempfile::tempdir().unwrap();
    let (pdir, cdir) = (dir.path().join("p"), dir.path().join("c"));
    std::fs::create_dir(&pdir).unwrap();
    std::fs::create_dir(&cdir).unwrap();
    let long = format!(
        "{}.{}.{}.{}.test.",
        "a".repeat(63),
        "b".repeat(63),
        "c".repeat(63),
        "d=".repeat(20)
    );
    let escaped = format!("{}.{}.test.", "+".repeat(60), "=".repeat(60));
    let members = [long.as_str(), escaped.as_str(), "short.test."];
    let open = |z: &str, f: std::path::PathBuf| {
        // The config's TOML string: its backslashes escaped.
        let mut z = Zone::new(&z.replace('\\', "\\\\"), f);
        z.options.push("allow_transfer = [\"127.0.0.0/8\"]".into());
        z
    };
    let list: Vec<(&str, String, &str)> = members
        .iter()
        .enumerate()
        .map(|(i, m)| (*m, format!("m{i}"), ""))
        .collect();
    let list: Vec<(&str, &str, &str)> = list
        .iter()
        .map(|(m, id, e)| (*m, id.as_str(), *e))
        .collect();
    let mut pz = vec![];
    write(
        &pdir.join("cat.zone"),
        &catalog_text("l.cat.", 1, "2", &list),
    );
    pz.push(open("l.cat.", pdir.join("cat.zone")));
    for (i, m) in members.iter().enumerate() {
        let f = pdir.join(format!("m{i}.zone"));
        write(&f, &member_text(m, 3));
        pz.push(open(m, f));
    }
    let primary = Dnsd::builder().zones(&pz).start();
    let mut cat = Zone::new("l.cat.", cdir.join("l.cat.zone"));
    cat.options = vec![
        format!("primaries = [\"{}\"]", primary.addr()),
        "catalog = \"consumer\"".into(),
    ];
    let consumer = Dnsd::builder().zones(std::slice::from_ref(&cat)).start();
    let c = consumer.addr();
    let log = || consumer.log();
    for m in members {
        wait("member served", c, m, Some(3), &log);
    }
    // Each on disk under a name the system takes, inside the catalog's directory.
    let names: Vec<String> = std::fs::read_dir(&cdir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(
        names.iter().filter(|n| n.contains('~')).count(),
        2,
        "{names:?}"
    );
    assert!(names.iter().all(|n| n.len() <= 255), "{names:?}");
    // A restart serves them from those files.
    drop(primary);
    drop(consumer);
    let again = Dnsd::builder().zones(&[cat]).start();
    for m in members {
        wait(
            "member served after a restart",
            again.addr(),
            m,
            Some(3),
            &|| again.log(),
        );
    }
}

#[test]
fn hostile_catalog_members_are_refused() {
    let (_dir, pdir, cdir) = primary_and_consumer_dirs();
    let primary = catalog_primary(
        &pdir,
        &[
            (
                "a.cat.",
                &[
                    // Below a zone of the consumer's config: would answer for its names.
                    ("www.victim.test.", "v1", ""),
                    // The config's own zone: another's, no coo.
                    ("victim.test.", "v2", ""),
                    // Its file would be the config zone other.test.'s.
                    ("taken.test.", "t1", ""),
                    // A group whose template names another tenant.
                    ("g1.test.", "g1", "group.g1.zones TXT \"gold\"\n"),
                    // A group naming a template the catalog was not offered (another
                    // primary, another key): not followed.
                    ("i1.test.", "i1", "group.i1.zones TXT \"internal\"\n"),
                ],
            ),
            (
                "b.cat.",
                &[
                    ("n1.test.", "n1", ""),
                    ("n2.test.", "n2", ""),
                    ("n3.test.", "n3", ""),
                    ("n4.test.", "n4", ""),
                ],
            ),
        ],
        &[
            "g1.test.", "i1.test.", "n1.test.", "n2.test.", "n3.test.", "n4.test.",
        ],
    );
    let p = primary.addr();
    // The consumer's own zones: victim.test. (tenant 1), and other.test. whose file is where
    // a member taken.test. would be written.
    write(
        &cdir.join("victim.test.zone"),
        &member_text("victim.test.", 7),
    );
    write(
        &cdir.join("taken.test.zone"),
        &member_text("other.test.", 7),
    );
    let mut victim = Zone::new("victim.test.", cdir.join("victim.test.zone"));
    victim.options.push("tenant = 1".into());
    let other = Zone::new("other.test.", cdir.join("taken.test.zone"));
    let cat = |z: &str, extra: &str| {
        let mut c = Zone::new(z, cdir.join(format!("{z}zone")));
        c.options = vec![
            format!("primaries = [\"{p}\"]"),
            "catalog = \"consumer\"".into(),
            "tenant = 5".into(),
        ];
        if !extra.is_empty() {
            c.options.push(extra.into());
        }
        c
    };
    let consumer = Dnsd::builder()
        .zones(&[
            victim,
            other,
            cat("a.cat.", "catalog_groups = [\"gold\"]"),
            cat("b.cat.", "catalog_max_members = 2"),
        ])
        .raw(&format!(
            "[[template]]\nname = \"gold\"\nfile = \"{0}/gold-%s.zone\"\ntenant = 1\n\n\
             [[template]]\nname = \"internal\"\nfile = \"{0}/internal-%s.zone\"\n\
             primaries = [\"127.0.0.1:9\"]\n",
            cdir.display()
        ))
        .start();
    let c = consumer.addr();
    let log = || consumer.log();
    wait("g1 served", c, "g1.test.", Some(1), &log);
    // i1 from the catalog's primary, as the catalog's defaults say: "internal" is not one of
    // the templates offered to its groups.
    wait("i1 served", c, "i1.test.", Some(1), &log);
    assert!(
        !cdir.join("internal-i1.test.zone").exists(),
        "a group picked a template the catalog was not offered"
    );
    wait("n1 served", c, "n1.test.", Some(1), &log);
    wait("n2 served", c, "n2.test.", Some(1), &log);
    std::thread::sleep(Duration::from_millis(500));
    // The config's zones keep their own data and files.
    assert_eq!(serial(c, "victim.test."), Some(7));
    assert_eq!(serial(c, "other.test."), Some(7));
    assert_eq!(
        std::fs::read_to_string(cdir.join("taken.test.zone")).unwrap(),
        member_text("other.test.", 7),
        "the other zone's file untouched"
    );
    // www.victim.test. is answered from victim.test. (NXDOMAIN there), not from the catalog.
    let (_, zones) = consumer.ctl(&["zones"]);
    for z in ["www.victim.test.", "taken.test.", "n3.test.", "n4.test."] {
        assert!(
            !zones.lines().any(|l| l.starts_with(z)),
            "{z} must not be served:\n{zones}"
        );
    }
    let st = consumer.stats();
    assert!(st["catalog.refused.below_other_zone"] >= 1, "{st:?}");
    assert!(st["catalog.refused.file_taken"] >= 1, "{st:?}");
    assert!(st["catalog.refused.over_max_members"] >= 2, "{st:?}");
    assert!(st["catalog.refused.tenant_overridden"] >= 1, "{st:?}");
    assert!(
        consumer.log().contains("names another tenant"),
        "{}",
        consumer.log()
    );
}

/// A catalog's members give way to the zones an operator configures after the catalog listed
/// them: a member of the very name (the config's zone replaces it, its data and its
/// primaries), a member below a zone added later; and a catalog never takes the root or a
/// parent of another tenant's zone (it would answer their DS and every name they lack).
#[test]
fn catalog_members_give_way_to_zones_the_config_adds_later() {
    let (_dir, pdir, cdir) = primary_and_consumer_dirs();
    let primary = catalog_primary(
        &pdir,
        &[(
            "a.cat.",
            &[
                ("later.test.", "l1", ""),
                ("www.below.test.", "b1", ""),
                ("parent.test.", "p1", ""),
                (".", "r1", ""),
                ("parent2.test.", "p2", ""),
                ("v.parent.test.", "v1", ""),
            ],
        )],
        &[
            "later.test.",
            "www.below.test.",
            "parent.test.",
            "parent2.test.",
        ],
    );
    let p = primary.addr();
    // Another tenant's zone below parent.test.
    write(
        &cdir.join("v.parent.test.zone"),
        &member_text("v.parent.test.", 7),
    );
    let mut v = Zone::new("v.parent.test.", cdir.join("v.parent.test.zone"));
    v.options.push("tenant = 1".into());
    // A zone of the catalog's own tenant below parent2.test.: not the catalog's either.
    write(
        &cdir.join("s.parent2.test.zone"),
        &member_text("s.parent2.test.", 7),
    );
    let mut s2 = Zone::new("s.parent2.test.", cdir.join("s.parent2.test.zone"));
    s2.options.push("tenant = 5".into());
    let mut cat = Zone::new("a.cat.", cdir.join("a.cat.zone"));
    cat.options = vec![
        format!("primaries = [\"{p}\"]"),
        "catalog = \"consumer\"".into(),
        "tenant = 5".into(),
    ];
    let consumer = Dnsd::builder().zones(&[v, s2, cat]).start();
    let c = consumer.addr();
    let log = || consumer.log();
    wait("later served", c, "later.test.", Some(1), &log);
    wait("www.below served", c, "www.below.test.", Some(1), &log);
    std::thread::sleep(Duration::from_millis(300));
    let (_, zones) = consumer.ctl(&["zones"]);
    for z in ["parent.test.", "parent2.test.", ". "] {
        assert!(
            !zones.lines().any(|l| l.starts_with(z)),
            "{z} must not be served:\n{zones}"
        );
    }
    let st = consumer.stats();
    assert!(st["catalog.refused.above_other_zone"] >= 3, "{st:?}");
    // A member the config holds: refused, and counted (it was only in the log).
    assert!(st["catalog.refused.held_elsewhere"] >= 1, "{st:?}");
    assert_eq!(serial(c, "v.parent.test."), Some(7));
    assert_eq!(serial(c, "s.parent2.test."), Some(7));

    // The operator now configures later.test. and below.test. for tenant 1.
    for z in ["later.test.", "below.test."] {
        write(&cdir.join(format!("{z}zone")), &member_text(z, 7));
    }
    let mut cfg = std::fs::read_to_string(consumer.config_path()).unwrap();
    for z in ["later.test.", "below.test."] {
        cfg.push_str(&format!(
            "\n[[zone]]\norigin = \"{z}\"\nfile = \"{}\"\ntenant = 1\n",
            cdir.join(format!("{z}zone")).display()
        ));
    }
    write(consumer.config_path(), &cfg);
    let (ok, out) = consumer.ctl(&["reload"]);
    assert!(ok, "{out}");
    wait(
        "later.test. from the config",
        c,
        "later.test.",
        Some(7),
        &log,
    );
    wait("below.test. served", c, "below.test.", Some(7), &log);
    // www.below.test. is below.test.'s name now (its www A), not the catalog's zone.
    wait(
        "www.below.test. not a zone",
        c,
        "www.below.test.",
        None,
        &log,
    );
    // A NOTIFY-driven change at the catalog's primary reaches neither.
    write(
        &pdir.join("later.test.zone"),
        &member_text("later.test.", 2),
    );
    let (ok, out) = primary.ctl(&["reload"]);
    assert!(ok, "{out}");
    std::thread::sleep(Duration::from_millis(1500));
    assert_eq!(serial(c, "later.test."), Some(7));
    let (_, zones) = consumer.ctl(&["zones"]);
    let later = zones
        .lines()
        .find(|l| l.starts_with("later.test."))
        .unwrap_or_default();
    assert!(!later.contains("secondary"), "{later}");
    assert!(
        !zones.lines().any(|l| l.starts_with("www.below.test.")),
        "{zones}"
    );
    assert_eq!(
        std::fs::read_to_string(cdir.join("later.test.zone")).unwrap(),
        member_text("later.test.", 7),
        "the config zone's file untouched"
    );
    let st = consumer.stats();
    assert!(st["catalog.refused.below_other_zone"] >= 1, "{st:?}");
}

/// A member two catalogs list stays with the catalog that held it first across restarts,
/// and a name below it is no other catalog's: read in the order of a hash map, a restart
/// gave it to either (another tenant's catalog took tenant 1's members at one restart in
/// three, with its primaries and key).
#[test]
fn a_contested_member_stays_with_its_catalog_across_restarts() {
    let (_dir, pdir, cdir) = primary_and_consumer_dirs();
    let primary = catalog_primary(
        &pdir,
        &[
            ("cat1.", &[("m1.test.", "a1", ""), ("m2.test.", "a2", "")]),
            ("cat2.", &[("own2.test.", "b0", "")]),
        ],
        &["m1.test.", "m2.test.", "own2.test.", "sub.m2.test."],
    );
    let consumed = |name: &str, tenant: u32| {
        let mut cat = Zone::new(name, cdir.join(format!("{name}zone")));
        cat.options = vec![
            format!("primaries = [\"{}\"]", primary.addr()),
            "catalog = \"consumer\"".into(),
            format!("tenant = {tenant}"),
        ];
        cat
    };
    let zones = [consumed("cat1.", 1), consumed("cat2.", 2)];
    let mut consumer = Dnsd::builder().zones(&zones).start();
    for z in ["m1.test.", "m2.test.", "own2.test."] {
        let c = &consumer;
        wait("{z} served", c.addr(), z, Some(1), &|| c.log());
    }
    // Tenant 2's catalog now lists tenant 1's members (one in other letter case) and a
    // name below one: refused while dnsd runs.
    write(
        &pdir.join("cat2.zone"),
        &catalog_text(
            "cat2.",
            2,
            "2",
            &[
                ("own2.test.", "b0", ""),
                ("M1.TEST.", "b1", ""),
                ("m2.test.", "b2", ""),
                ("sub.m2.test.", "b3", ""),
            ],
        ),
    );
    let (ok, out) = primary.ctl(&["reload"]);
    assert!(ok, "{out}");
    {
        let c = &consumer;
        until(
            "cat2's claims refused",
            20,
            &|| c.stats().get("catalog.refused.held_elsewhere") >= 2,
            &|| c.log(),
        );
    }
    for round in 0..6 {
        drop(consumer);
        consumer = Dnsd::builder().zones(&zones).start();
        let c = &consumer;
        let member_of = |z: &str| {
            c.ctl(&["zones"])
                .1
                .lines()
                .find(|l| l.starts_with(z))
                .map(|l| {
                    let of = l.split("member of catalog ").nth(1).unwrap_or("");
                    of.split_whitespace().next().unwrap_or("").to_string()
                })
        };
        until(
            "every catalog read",
            20,
            &|| member_of("own2.test.").as_deref() == Some("cat2."),
            &|| c.log(),
        );
        for z in ["m1.test.", "m2.test."] {
            assert_eq!(member_of(z).as_deref(), Some("cat1."), "round {round}: {z}");
        }
        assert_eq!(member_of("sub.m2.test."), None, "round {round}");
    }
}

/// A new version of a consumed catalog that is no catalog (its schema version missing or
/// another, a member listed twice) is refused as a transfer, as Knot refuses it: the last
/// valid version stays the copy, and a restart serves its members (taken, the bad copy gave a
/// restart no members: every tenant of the catalog REFUSED).
#[test]
fn a_catalog_version_that_is_no_catalog_is_refused_and_its_members_survive_a_restart() {
    let (_dir, pdir, cdir) = primary_and_consumer_dirs();
    let primary = catalog_primary(
        &pdir,
        &[("cat1.", &[("m1.test.", "a1", ""), ("m2.test.", "a2", "")])],
        &["m1.test.", "m2.test."],
    );
    let mut cat = Zone::new("cat1.", cdir.join("cat1.zone"));
    cat.options = vec![
        format!("primaries = [\"{}\"]", primary.addr()),
        "catalog = \"consumer\"".into(),
    ];
    let zones = [cat];
    let mut consumer = Dnsd::builder().zones(&zones).start();
    for z in ["m1.test.", "m2.test."] {
        let c = &consumer;
        wait("{z} served", c.addr(), z, Some(1), &|| c.log());
    }
    // Two of the kinds (the reader's unit tests have the others); each refusal backs the
    // refresh off, as any failed one.
    let bad = [
        catalog_text("cat1.", 2, "3", &[("m1.test.", "a1", "")]),
        catalog_text(
            "cat1.",
            3,
            "2",
            &[("m1.test.", "a1", ""), ("m1.test.", "a9", "")],
        ),
    ];
    for (i, text) in bad.iter().enumerate() {
        let version = i as u32 + 2;
        write(&pdir.join("cat1.zone"), text);
        let (ok, out) = primary.ctl(&["reload"]);
        assert!(ok, "{out}");
        let c = &consumer;
        until(
            "the bad version refused",
            40,
            &|| {
                c.log()
                    .contains(&format!("serial {version} is not a valid catalog"))
            },
            &|| c.log(),
        );
        assert_eq!(
            serial(c.addr(), "cat1."),
            Some(1),
            "version {version} taken"
        );
    }
    drop(consumer);
    consumer = Dnsd::builder().zones(&zones).start();
    for z in ["m1.test.", "m2.test."] {
        let c = &consumer;
        wait(
            "{z} served after the restart",
            c.addr(),
            z,
            Some(1),
            &|| c.log(),
        );
    }
}

/// A consumer that signs its members and lists them in a catalog it produces, restarted
/// with its primary gone: the members are served signed from their copies (they were served
/// unsigned, with the primary's serial, until a transfer), and the produced catalog keeps its
/// version — the members listed, the serial not gone back (it was written without the
/// consumed members at start, its serial started again from the clock: a consumer of it
/// purged them, or refused the catalog as outdated). A change of the consumed catalog reaches
/// the produced one (it waited for a `ctl zone add`), and so does a zone a reload adds.
#[test]
fn a_signing_consumer_that_produces_a_catalog_restarts_whole() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let pdir = d.join("primary");
    std::fs::create_dir(&pdir).unwrap();
    // Two consumed catalogs feed the produced one (each read alone at start wrote a version
    // without the other's members).
    let primary = catalog_primary(
        &pdir,
        &[
            ("a.cat.", &[("m1.test.", "i1", ""), ("m2.test.", "i2", "")]),
            ("b.cat.", &[("m4.test.", "i4", "")]),
        ],
        &["m1.test.", "m2.test.", "m3.test.", "m4.test."],
    );
    let cdir = d.join("consumer");
    std::fs::create_dir(&cdir).unwrap();
    let out = cdir.join("out.cat.zone");
    let consumed = |name: &str| {
        let mut cat = Zone::new(name, cdir.join(format!("{name}zone")));
        cat.options = vec![
            format!("primaries = [\"{}\"]", primary.addr()),
            "catalog = \"consumer\"".into(),
            "catalog_template = \"signed\"".into(),
        ];
        cat
    };
    let (cat, bcat) = (consumed("a.cat."), consumed("b.cat."));
    let raw = |extra: &str| {
        format!(
            "[dnssec]\nkey_dir = \"{0}/keys\"\n\n[[dnssec_policy]]\nname = \"p\"\n\n\
             [[template]]\nname = \"signed\"\nfile = \"{0}/m-%s.zone\"\ndnssec_policy = \"p\"\n\
             catalog_zone = \"out.cat.\"\n\n\
             [[zone]]\norigin = \"out.cat.\"\ncatalog = \"producer\"\nfile = \"{1}\"\n{extra}",
            cdir.display(),
            out.display()
        )
    };
    let consumer = Dnsd::builder()
        .zones(&[cat.clone(), bcat.clone()])
        .raw(&raw(""))
        .start();
    let c = consumer.addr();
    let log = || consumer.log();
    let signed = |addr: SocketAddr, z: &str| {
        client::try_query(addr, z, 48, &QueryOpts::udp()).is_ok_and(|r| {
            Normalized::from_reply(&r)
                .answer
                .iter()
                .any(|r| r.rtype == 48)
        })
    };
    let listed = |z: &str| {
        std::fs::read_to_string(&out)
            .unwrap_or_default()
            .contains(z)
    };
    for z in ["m1.test.", "m2.test."] {
        until("{z} served signed", 30, &|| signed(c, z), &log);
    }
    until(
        "the produced catalog lists both",
        10,
        &|| listed("m1.test.") && listed("m2.test.") && listed("m4.test."),
        &log,
    );

    // m3 joins the consumed catalog: the produced one lists it.
    write(
        &pdir.join("a.cat.zone"),
        &catalog_text(
            "a.cat.",
            2,
            "2",
            &[
                ("m1.test.", "i1", ""),
                ("m2.test.", "i2", ""),
                ("m3.test.", "i3", ""),
            ],
        ),
    );
    let (ok, o) = primary.ctl(&["reload"]);
    assert!(ok, "{o}");
    let (ok, o) = consumer.ctl(&["zone-refresh", "a.cat."]);
    assert!(ok, "{o}");
    until("m3 served signed", 30, &|| signed(c, "m3.test."), &log);
    until(
        "m3 listed in the produced catalog",
        10,
        &|| listed("m3.test."),
        &log,
    );
    // m2 leaves the consumed catalog: gone from the produced one, its keys deleted with it
    // (as Knot purges a member; a name listed again, perhaps another tenant's, was signed
    // with the old keys, and the key directory grew with every name ever listed).
    let m2_keys = cdir.join("keys").join("m2.test");
    assert!(m2_keys.is_dir(), "m2's keys at {}", m2_keys.display());
    write(
        &pdir.join("a.cat.zone"),
        &catalog_text(
            "a.cat.",
            3,
            "2",
            &[("m1.test.", "i1", ""), ("m3.test.", "i3", "")],
        ),
    );
    let (ok, o) = primary.ctl(&["reload"]);
    assert!(ok, "{o}");
    let (ok, o) = consumer.ctl(&["zone-refresh", "a.cat."]);
    assert!(ok, "{o}");
    until("m2 unlisted", 10, &|| !listed("m2.test."), &log);
    until("m2's keys deleted", 10, &|| !m2_keys.exists(), &log);
    let before = serial(c, "out.cat.").expect("the produced catalog served");
    let m1 = serial(c, "m1.test.").expect("m1 served");

    // Restarted with the primary gone.
    drop(primary);
    drop(consumer);
    let again = Dnsd::builder()
        .zones(&[cat.clone(), bcat.clone()])
        .raw(&raw(""))
        .start();
    let a = again.addr();
    let log = || again.log();
    until(
        "the produced catalog served",
        10,
        &|| serial(a, "out.cat.").is_some(),
        &log,
    );
    assert_eq!(
        serial(a, "out.cat."),
        Some(before),
        "the produced catalog as it was; log:\n{}",
        log()
    );
    until(
        "members served signed from their copies",
        10,
        &|| signed(a, "m1.test.") && signed(a, "m3.test."),
        &log,
    );
    assert!(
        serial(a, "m1.test.").is_some_and(|s| s >= m1),
        "m1's serial went back from {m1}: {:?}",
        serial(a, "m1.test.")
    );
    assert_eq!(serial(a, "out.cat."), Some(before), "nothing changed since");

    // A zone a reload adds to the config, listed in the produced catalog.
    let extra = cdir.join("x.test.zone");
    write(&extra, &member_text("x.test.", 1));
    std::fs::write(
        again.config_path(),
        std::fs::read_to_string(again.config_path()).unwrap()
            + &format!(
                "\n[[zone]]\norigin = \"x.test.\"\nfile = \"{}\"\ncatalog_zone = \"out.cat.\"\n",
                extra.display()
            ),
    )
    .unwrap();
    let (ok, o) = again.ctl(&["reload"]);
    assert!(ok, "{o}");
    until("x listed after the reload", 10, &|| listed("x.test."), &log);
    assert!(
        serial(a, "out.cat.").is_some_and(|s| s != before),
        "a new version served"
    );

    // The members' template signs with NSEC3 after a reload: the members are signed so at
    // once (they kept the policy they were added under until a restart).
    let conf = std::fs::read_to_string(again.config_path())
        .unwrap()
        .replace(
            "[[dnssec_policy]]\nname = \"p\"\n",
            "[[dnssec_policy]]\nname = \"p\"\nnsec3 = true\n",
        );
    assert!(conf.contains("nsec3 = true"), "{conf}");
    std::fs::write(again.config_path(), conf).unwrap();
    let (ok, o) = again.ctl(&["reload"]);
    assert!(ok, "{o}");
    let nsec3 = |z: &str| {
        client::try_query(a, z, 51, &QueryOpts::udp()).is_ok_and(|r| {
            Normalized::from_reply(&r)
                .answer
                .iter()
                .any(|r| r.rtype == 51)
        })
    };
    until(
        "the members signed with NSEC3",
        10,
        &|| nsec3("m1.test.") && nsec3("m3.test."),
        &log,
    );
}

/// Waits (bounded) until `f` holds; fails naming `what` with the log.
fn until(what: &str, secs: u64, f: &dyn Fn() -> bool, log: &dyn Fn() -> String) {
    let end = Instant::now() + Duration::from_secs(secs);
    while Instant::now() < end {
        if f() {
            return;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    panic!("{what}: not so after {secs} s; log:\n{}", log());
}

/// A catalog of 1,200 members to transfer (one slot, `max_in = 1`) and a zone of the
/// config whose refresh is asked while they wait: it takes its turn after one of the
/// catalog's transfers, not after all of them (first come, first served, a catalog of 3,000
/// members held an unrelated zone's refresh 46 s; Knot the same).
#[test]
fn a_catalog_of_many_members_takes_turns_with_the_other_zones() {
    const MEMBERS: usize = 1200;
    let (_dir, pdir, cdir) = primary_and_consumer_dirs();
    let names: Vec<String> = (0..MEMBERS).map(|i| format!("m{i}.many.test.")).collect();
    let list: Vec<(String, String)> = names
        .iter()
        .enumerate()
        .map(|(i, n)| (n.clone(), format!("u{i}")))
        .collect();
    let list: Vec<(&str, &str, &str)> = list
        .iter()
        .map(|(n, id)| (n.as_str(), id.as_str(), ""))
        .collect();
    let mut members: Vec<&str> = names.iter().map(String::as_str).collect();
    members.push("other.test.");
    let primary = catalog_primary(&pdir, &[("many.cat.", &list)], &members);
    let mut cat = Zone::new("many.cat.", cdir.join("many.cat.zone"));
    cat.options = vec![
        format!("primaries = [\"{}\"]", primary.addr()),
        "catalog = \"consumer\"".into(),
    ];
    let mut other = Zone::new("other.test.", cdir.join("other.test.zone"));
    other.options = vec![format!("primaries = [\"{}\"]", primary.addr())];
    let consumer = Dnsd::builder()
        .zones(&[other, cat])
        .raw("[transfer]\nmax_in = 1")
        .start();
    let c = consumer.addr();
    let log = || consumer.log();
    wait("the other zone", c, "other.test.", Some(1), &log);
    // The catalog read: its members queue for the one slot.
    until(
        "members transferring",
        30,
        &|| consumer.stat("transfer.in.axfr") >= 10,
        &log,
    );
    write(
        &pdir.join("other.test.zone"),
        &member_text("other.test.", 2),
    );
    let (ok, out) = primary.ctl(&["reload", "other.test."]);
    assert!(ok, "{out}");
    let (ok, out) = consumer.ctl(&["zone-refresh", "other.test."]);
    assert!(ok, "{out}");
    wait("the other zone refreshed", c, "other.test.", Some(2), &log);
    let done = consumer.stat("transfer.in.axfr");
    eprintln!("the other zone refreshed after {done} transfers in");
    assert!(
        done < MEMBERS as u64 / 2,
        "the other zone's refresh waited for {done} transfers of the catalog's {MEMBERS}"
    );
}
