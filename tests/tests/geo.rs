//! Answers by client network: a zone's geo file (Knot's geoip module's format) gives names
//! variants chosen by prefix (`net:`) or by a `[[view]]`; the client's network is its EDNS
//! Client Subnet (`[server] ecs = true`) or its source address, and the answer carries ECS
//! with the scope that chose it (0 for names without variants). Knot DNS with mod-geoip in
//! subnet mode serves the same zone and file: the oracle, source by source and subnet by
//! subnet. Also: a geo file re-read with the zone, signed variants validating with delv.

use std::net::{IpAddr, SocketAddr, UdpSocket};
use std::path::Path;
use std::time::Duration;

use palisade_tests::servers::{Dnsd, Knot, Zone};
use palisade_tests::wire::{QueryOpts, RawMsg, build_query, qtype as T};

const ZONE: &str = "$ORIGIN geo.test.
$TTL 3600
@       SOA ns1 hostmaster 1 7200 3600 1209600 300
@       NS  ns1
ns1     A   192.0.2.53
www     A   192.0.2.1
www     AAAA 2001:db8::1
www     TXT \"default\"
office  A   192.0.2.2
plain   A   192.0.2.3
cn      A   192.0.2.4
";

/// The geo file; `VIEW` is `view: office` for dnsd and the view's `net:` lines for Knot.
const GEO: &str = "www.geo.test:
  - net: 127.77.0.0/16
    A: [ 198.51.100.1, 198.51.100.2 ]
    AAAA: 2001:db8::77
  - net: 127.77.5.0/24
    A: 198.51.100.5
  - net: 10.0.0.0/8
    A: 198.51.100.10
  - net: 2001:db8:aaaa::/48
    A: 198.51.100.6
office.geo.test:
VIEW
cn.geo.test:
  - net: 10.1.0.0/16
    CNAME: plain.geo.test.
";

fn view_lines(dnsd: bool) -> String {
    if dnsd {
        "  - view: office\n    A: 203.0.113.8\n".into()
    } else {
        "  - net: 127.88.0.0/16\n    A: 203.0.113.8\n  - net: 10.88.0.0/16\n    A: 203.0.113.8\n"
            .into()
    }
}

/// A query of the oracle comparison: source, name, type, client subnet (address, length).
type Case<'a> = (&'a str, &'a str, u16, Option<(&'a str, u8)>);

/// An ECS option (RFC 7871) for `net`/`len`.
fn ecs(ip: IpAddr, len: u8) -> (u16, Vec<u8>) {
    let (family, bytes): (u16, Vec<u8>) = match ip {
        IpAddr::V4(v) => (1, v.octets().to_vec()),
        IpAddr::V6(v) => (2, v.octets().to_vec()),
    };
    let n = (len as usize).div_ceil(8);
    let mut d = family.to_be_bytes().to_vec();
    d.extend([len, 0]);
    d.extend(&bytes[..n]);
    (8, d)
}

/// What a reply says: rcode, the answer's records (type, presentation) sorted, the TTLs,
/// and the ECS option's scope if one came back.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Said {
    rcode: u16,
    answers: Vec<(u16, String)>,
    ttls: Vec<u32>,
    scope: Option<u8>,
}

fn ask(server: SocketAddr, src: &str, name: &str, qtype: u16, subnet: Option<(&str, u8)>) -> Said {
    let mut opts = QueryOpts::edns(1232);
    if let Some((ip, len)) = subnet {
        opts.options.push(ecs(ip.parse().unwrap(), len));
    }
    let q = build_query(0x6e0, name, qtype, &opts);
    let s = UdpSocket::bind((src, 0)).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
    s.send_to(&q, server).unwrap();
    let mut buf = [0u8; 4096];
    let n = s.recv(&mut buf).expect("a reply");
    let raw = RawMsg::parse(&buf[..n]).unwrap();
    let msg = hickory_proto::op::Message::from_vec(&buf[..n]).unwrap();
    let mut answers: Vec<(u16, String)> = msg
        .answers
        .iter()
        .map(|r| (u16::from(r.record_type()), r.data.to_string()))
        .collect();
    answers.sort();
    let ttls = msg.answers.iter().map(|r| r.ttl).collect();
    let scope = raw
        .opt
        .as_ref()
        .and_then(|o| o.options.iter().find(|(c, _)| *c == 8))
        .map(|(_, d)| d[3]);
    Said {
        rcode: raw.rcode(),
        answers,
        ttls,
        scope,
    }
}

fn setup(dir: &Path) -> (Zone, std::path::PathBuf, std::path::PathBuf) {
    let zf = dir.join("geo.test.zone");
    std::fs::write(&zf, ZONE).unwrap();
    let ours = dir.join("geo.yaml");
    std::fs::write(&ours, GEO.replace("VIEW\n", &view_lines(true))).unwrap();
    let knots = dir.join("geo.knot");
    std::fs::write(&knots, GEO.replace("VIEW\n", &view_lines(false))).unwrap();
    (Zone::new("geo.test.", zf), ours, knots)
}

fn dnsd(zone: &Zone, geo: &Path) -> Dnsd {
    let mut z = zone.clone();
    z.options.push(format!("geo = \"{}\"", geo.display()));
    Dnsd::builder()
        .zone(z)
        .server_option("ecs = true")
        .raw("\n[defence.rrl]\nenabled = false\n\n[[view]]\nname = \"office\"\nprefixes = [\"127.88.0.0/16\", \"10.88.0.0/16\"]\n")
        .start()
}

/// Knot DNS with mod-geoip on `zone` and the geo file `file`, ECS on, in `mode` (`subnet`,
/// or `geodb` with its database lines), compared with `ours` case by case; skipped loudly
/// when knotd or its geoip module is missing.
fn compare_with_knot(zone: &Zone, file: &Path, mode: &str, cases: &[Case], ours: &[Said]) {
    if !Knot::available()
        || !Path::new("/usr/lib/x86_64-linux-gnu/knot/modules-3.2/geoip.so").exists()
    {
        palisade_tests::skipped("knotd with knot-module-geoip is not installed");
        return;
    }
    let (z, file, mode) = (zone.clone(), file.to_path_buf(), mode.to_string());
    let knot = Knot::start_raw(std::slice::from_ref(zone), move |d, addr| {
        Knot::server_section(d, addr).replacen(
            "server:\n",
            "server:\n  edns-client-subnet: on\n",
            1,
        ) + &format!(
            "mod-geoip:\n  - id: geo\n    config-file: \"{}\"\n    ttl: 60\n    mode: {mode}\n\n\
             template:\n  - id: default\n    storage: \"{}\"\n    zonefile-sync: -1\n\n\
             zone:\n  - domain: {}\n    file: \"{}\"\n    module: mod-geoip/geo\n",
            file.display(),
            d.display(),
            z.origin,
            z.file.display()
        )
    });
    for ((src, name, t, sub), ours) in cases.iter().zip(ours) {
        let theirs = ask(knot.addr(), src, name, *t, *sub);
        // The scope may be longer than Knot's, never shorter: Knot scopes a fallback answer
        // 0 and an outer network's answer by its length, where other variants' networks
        // lie in them (RFC 7871 §7.2.1 wants them left out).
        let scoped = |s: &Said, scope| Said { scope, ..s.clone() };
        assert_eq!(
            ours,
            &scoped(&theirs, ours.scope),
            "{name} {t} from {src} subnet {sub:?}: dnsd and Knot differ\n{}",
            knot.log()
        );
        assert!(
            ours.scope >= theirs.scope,
            "{name} {t} from {src} subnet {sub:?}: scope {:?} shorter than Knot's {:?}",
            ours.scope,
            theirs.scope
        );
    }
}

#[test]
fn variants_by_source_and_by_client_subnet_agree_with_knots_geoip_module() {
    let dir = tempfile::tempdir().unwrap();
    let (zone, ours, knots) = setup(dir.path());
    let dnsd = dnsd(&zone, &ours);
    // Sources and subnets, each asked of both servers.
    let cases: &[Case] = &[
        // By source address.
        ("127.77.5.9", "www.geo.test.", T::A, None),
        ("127.77.9.9", "www.geo.test.", T::A, None),
        ("127.77.9.9", "www.geo.test.", T::AAAA, None),
        ("127.77.9.9", "www.geo.test.", T::TXT, None),
        ("127.1.1.1", "www.geo.test.", T::A, None),
        ("127.88.3.3", "office.geo.test.", T::A, None),
        ("127.1.1.1", "office.geo.test.", T::A, None),
        ("127.1.1.1", "plain.geo.test.", T::A, None),
        // By client subnet, whatever the source.
        ("127.1.1.1", "www.geo.test.", T::A, Some(("10.1.2.0", 24))),
        ("127.1.1.1", "www.geo.test.", T::A, Some(("10.0.0.0", 8))),
        ("127.1.1.1", "www.geo.test.", T::A, Some(("127.77.5.0", 24))),
        ("127.1.1.1", "www.geo.test.", T::A, Some(("192.0.2.0", 24))),
        (
            "127.1.1.1",
            "www.geo.test.",
            T::A,
            Some(("2001:db8:aaaa:1::", 56)),
        ),
        (
            "127.1.1.1",
            "office.geo.test.",
            T::A,
            Some(("10.88.1.0", 24)),
        ),
        (
            "127.1.1.1",
            "plain.geo.test.",
            T::A,
            Some(("10.88.1.0", 24)),
        ),
        ("127.1.1.1", "cn.geo.test.", T::A, Some(("10.1.9.0", 24))),
        ("127.1.1.1", "cn.geo.test.", T::A, Some(("10.2.9.0", 24))),
    ];
    let ours_said: Vec<Said> = cases
        .iter()
        .map(|(src, name, t, sub)| ask(dnsd.addr(), src, name, *t, *sub))
        .collect();
    // Our own expectations for a few, whatever the oracle says.
    assert_eq!(ours_said[0].answers, vec![(T::A, "198.51.100.5".into())]);
    assert_eq!(ours_said[0].ttls, vec![60], "[geoip] ttl");
    assert_eq!(ours_said[0].scope, None, "no ECS asked, none sent");
    assert_eq!(ours_said[1].answers.len(), 2);
    assert_eq!(
        ours_said[3].answers,
        vec![(T::TXT, "default".into())],
        "a variant without TXT: the zone's (as Knot 3.2)"
    );
    assert_eq!(
        ours_said[4].answers,
        vec![(T::A, "192.0.2.1".into())],
        "no variant: the zone's"
    );
    assert_eq!(
        ours_said[5].answers,
        vec![(T::A, "203.0.113.8".into())],
        "the view"
    );
    assert_eq!(ours_said[8].answers, vec![(T::A, "198.51.100.10".into())]);
    assert_eq!(ours_said[8].scope, Some(8), "scope: the prefix that chose");
    assert_eq!(
        ours_said[11].scope,
        Some(1),
        "no variant covers 192.0.2.0: its half of the space holds none (Knot: 0, which told a \
         resolver to give the zone's answer to every client)"
    );
    assert_eq!(
        ours_said[14].scope,
        Some(0),
        "a name without variants: scope 0"
    );
    // A SOURCE PREFIX-LENGTH of 0 names no network: answered for the source, scope 0 (it
    // was a client at 0.0.0.0, with a scope longer than the prefix sent).
    let zero = ask(
        dnsd.addr(),
        "127.77.5.9",
        "www.geo.test.",
        T::A,
        Some(("0.0.0.0", 0)),
    );
    assert_eq!(zero.answers, ours_said[0].answers);
    assert_eq!(zero.scope, Some(0));
    assert!(
        ours_said[15]
            .answers
            .contains(&(T::CNAME, "plain.geo.test.".into())),
        "the variant's CNAME, followed: {:?}",
        ours_said[15]
    );
    // kdig sends the subnet and shows the scope that came back.
    let out = std::process::Command::new("kdig")
        .args([
            &format!("@{}", dnsd.addr().ip()),
            "-p",
            &dnsd.addr().port().to_string(),
            "+subnet=10.1.2.0/24",
            "www.geo.test.",
            "A",
        ])
        .output()
        .expect("kdig");
    let out = String::from_utf8_lossy(&out.stdout);
    assert!(out.contains("198.51.100.10"), "{out}");
    assert!(
        out.contains("CLIENT-SUBNET: 10.1.2.0/24/8"),
        "scope 8 echoed: {out}"
    );
    compare_with_knot(&zone, &knots, "subnet", cases, &ours_said);
}

#[test]
fn a_geo_file_is_read_again_with_its_zone_and_a_bad_one_keeps_the_last_good() {
    let dir = tempfile::tempdir().unwrap();
    let (zone, ours, _) = setup(dir.path());
    let dnsd = dnsd(&zone, &ours);
    let before = ask(dnsd.addr(), "127.77.5.9", "www.geo.test.", T::A, None);
    assert_eq!(before.answers, vec![(T::A, "198.51.100.5".into())]);
    // The geo file changes (the zone file does not): a reload reads it.
    std::fs::write(
        &ours,
        GEO.replace("VIEW\n", &view_lines(true))
            .replace("198.51.100.5", "198.51.100.55"),
    )
    .unwrap();
    let (ok, out) = dnsd.ctl(&["reload"]);
    assert!(ok, "{out}");
    let after = ask(dnsd.addr(), "127.77.5.9", "www.geo.test.", T::A, None);
    assert_eq!(after.answers, vec![(T::A, "198.51.100.55".into())], "{out}");
    // A bad geo file: refused with its name, the last good version keeps serving.
    std::fs::write(
        &ours,
        "www.geo.test:\n  - net: not-a-prefix\n    A: 192.0.2.9\n",
    )
    .unwrap();
    let (ok, out) = dnsd.ctl(&["reload"]);
    assert!(!ok, "{out}");
    assert!(
        out.contains("geo.yaml") && out.contains("not-a-prefix"),
        "{out}"
    );
    let kept = ask(dnsd.addr(), "127.77.5.9", "www.geo.test.", T::A, None);
    assert_eq!(kept.answers, after.answers);
}

#[test]
fn a_malformed_client_subnet_is_formerr_where_ecs_is_on_and_ignored_where_it_is_off() {
    let dir = tempfile::tempdir().unwrap();
    let (zone, ours, _) = setup(dir.path());
    let on = dnsd(&zone, &ours);
    let off = Dnsd::builder().zone(zone.clone()).start();
    // Bits set past the source prefix; a scope in a query; an unknown family.
    let bad: [Vec<u8>; 3] = [
        vec![0, 1, 8, 0, 10, 1],
        vec![0, 1, 24, 8, 10, 1, 2],
        vec![0, 9, 8, 0, 10],
    ];
    // Asked as a query, as a NOTIFY and as an IXFR over UDP (handed to the transfer side:
    // served, or NOTAUTH, where Knot answers FORMERR).
    for (b, (opcode, qtype)) in bad
        .iter()
        .flat_map(|b| [(0u8, T::A), (4, T::SOA), (0, T::IXFR)].map(|k| (b, k)))
    {
        let mut opts = QueryOpts::edns(1232);
        opts.opcode = opcode;
        opts.options.push((8, b.clone()));
        let q = build_query(7, "www.geo.test.", qtype, &opts);
        let off_rc = match (opcode, qtype) {
            (4, _) => 9,
            (_, T::IXFR) => 9,
            _ => 0,
        };
        for (server, want) in [(on.addr(), 1u16), (off.addr(), off_rc)] {
            let r = palisade_tests::client::udp_exchange(server, &q, Duration::from_secs(2))
                .unwrap()
                .expect("a reply");
            let m = RawMsg::parse(&r).unwrap();
            assert_eq!(m.rcode(), want, "{b:?} {opcode} {qtype} to {server}");
            if server == off.addr() {
                let echoed = m
                    .opt
                    .as_ref()
                    .is_some_and(|o| o.options.iter().any(|(c, _)| *c == 8));
                assert!(!echoed, "ECS off: no option echoed");
            }
        }
    }
    // A sound ECS in a query answered with an error (a name outside our zones; an EDNS
    // version we do not speak; AXFR over UDP) comes back with scope 0, as in every answer
    // (RFC 7871 §7.2.1; Knot echoes it too).
    let scope_of = |server: SocketAddr, name: &str, qtype: u16, version: u8| {
        let mut opts = QueryOpts::edns(1232);
        opts.edns_version = version;
        opts.options.push(ecs("10.1.2.0".parse().unwrap(), 24));
        let q = build_query(8, name, qtype, &opts);
        let r = palisade_tests::client::udp_exchange(server, &q, Duration::from_secs(2))
            .unwrap()
            .expect("a reply");
        let m = RawMsg::parse(&r).unwrap();
        let scope = m
            .opt
            .as_ref()
            .and_then(|o| o.options.iter().find(|(c, _)| *c == 8))
            .map(|(_, d)| d[3]);
        (m.rcode(), scope)
    };
    for (name, qtype, version, rc) in [
        ("www.elsewhere.", T::A, 0, 5),
        ("www.geo.test.", T::A, 1, 16),
        ("geo.test.", T::AXFR, 0, 4),
    ] {
        let (got_rc, scope) = scope_of(on.addr(), name, qtype, version);
        assert_eq!((got_rc, scope), (rc, Some(0)), "{name} {qtype} v{version}");
        let (got_rc, scope) = scope_of(off.addr(), name, qtype, version);
        assert_eq!(
            (got_rc, scope),
            (rc, None),
            "ECS off: {name} {qtype} v{version}"
        );
    }
}

#[test]
fn variants_of_a_zone_dnsd_signs_are_signed_and_delv_validates_them() {
    for p in ["delv", "dig"] {
        if !palisade_tests::have_program(p) {
            palisade_tests::skipped(&format!("{p} not installed"));
            return;
        }
    }
    let dir = tempfile::tempdir().unwrap();
    let (zone, ours, _) = setup(dir.path());
    let mut z = zone.clone();
    z.options.push(format!("geo = \"{}\"", ours.display()));
    z.options.push("dnssec_policy = \"p\"".into());
    let dnsd = Dnsd::builder()
        .zone(z)
        .raw(&format!(
            "\n[defence.rrl]\nenabled = false\n\n[[view]]\nname = \"office\"\nprefixes = [\"127.88.0.0/16\"]\n\n\
             [dnssec]\nkey_dir = \"{}\"\n\n[[dnssec_policy]]\nname = \"p\"\n",
            dir.path().join("keys").display()
        ))
        .start();
    let anchor_file = dir.path().join("anchor.conf");
    palisade_tests::delv::anchor_from_served(dnsd.addr(), "geo.test", &anchor_file);
    for (src, name, qtype, want, data) in [
        (
            "127.77.5.9",
            "www.geo.test",
            "A",
            "; fully validated",
            "198.51.100.5",
        ),
        (
            "127.77.9.9",
            "www.geo.test",
            "AAAA",
            "; fully validated",
            "2001:db8::77",
        ),
        (
            "127.88.1.1",
            "office.geo.test",
            "A",
            "; fully validated",
            "203.0.113.8",
        ),
        (
            "127.1.1.1",
            "www.geo.test",
            "A",
            "; fully validated",
            "192.0.2.1",
        ),
    ] {
        let out = palisade_tests::delv::delv(
            dnsd.addr(),
            Some(src),
            &anchor_file,
            "geo.test",
            name,
            qtype,
        );
        assert!(
            out.contains(want) && out.contains(data),
            "delv -b {src} {name} {qtype}:\n{out}"
        );
    }
}

/// Where `scripts/install-deps` puts mmdb-writer (an env var may say otherwise).
fn mmdb_writer_path() -> Option<std::path::PathBuf> {
    let p = std::env::var_os("PALISADE_MMDB_PY")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| std::path::PathBuf::from("/opt/palisade-test-mmdb"));
    p.join("mmdb_writer.py").is_file().then_some(p)
}

/// A small MaxMind database: Germany, France and the United States at test prefixes.
const MMDB: &str = r#"
import sys
from mmdb_writer import MMDBWriter
from netaddr import IPSet
w = MMDBWriter(ip_version=6, ipv4_compatible=True, database_type="GeoIP2-Country")
for nets, cont, country in [
    (["127.77.0.0/16"], "EU", "DE"),
    (["127.78.0.0/16", "2001:db8:aaaa::/48"], "EU", "FR"),
    (["10.0.0.0/8"], "NA", "US"),
]:
    w.insert_network(IPSet(nets), {"continent": {"code": cont}, "country": {"iso_code": country}})
w.to_db_file(sys.argv[1])
"#;

const GEO_DB: &str = "www.geo.test:
  - geo: \"EU;DE\"
    A: 198.51.100.49
  - geo: \"EU;*\"
    A: 198.51.100.50
    AAAA: 2001:db8::50
  - geo: \"NA\"
    A: 198.51.100.1
";

#[test]
fn variants_by_location_in_a_maxmind_database_agree_with_knots_geodb_mode() {
    let Some(py) = mmdb_writer_path() else {
        palisade_tests::skipped("mmdb-writer is not installed (scripts/install-deps)");
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let (zone, _, _) = setup(dir.path());
    let db = dir.path().join("test.mmdb");
    let out = std::process::Command::new("/usr/bin/python3")
        .arg("-c")
        .arg(MMDB)
        .arg(&db)
        .env("PYTHONPATH", &py)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let geo = dir.path().join("geo-db.yaml");
    std::fs::write(&geo, GEO_DB).unwrap();
    let mut z = zone.clone();
    z.options.push(format!("geo = \"{}\"", geo.display()));
    let dnsd = Dnsd::builder()
        .zone(z)
        .server_option("ecs = true")
        .raw(&format!(
            "\n[defence.rrl]\nenabled = false\n\n[geoip]\ndb = \"{}\"\nkeys = [\"continent/code\", \"country/iso_code\"]\n",
            db.display()
        ))
        .start();
    let cases: &[Case] = &[
        ("127.77.1.1", "www.geo.test.", T::A, None),
        ("127.78.1.1", "www.geo.test.", T::A, None),
        ("127.78.1.1", "www.geo.test.", T::AAAA, None),
        ("127.1.1.1", "www.geo.test.", T::A, None),
        ("127.1.1.1", "www.geo.test.", T::A, Some(("10.1.0.0", 16))),
        ("127.1.1.1", "www.geo.test.", T::A, Some(("127.77.3.0", 24))),
        ("127.1.1.1", "www.geo.test.", T::A, Some(("192.0.2.0", 24))),
        (
            "127.1.1.1",
            "www.geo.test.",
            T::A,
            Some(("2001:db8:aaaa:1::", 64)),
        ),
        ("127.1.1.1", "www.geo.test.", T::TXT, Some(("10.1.0.0", 16))),
    ];
    let ours: Vec<Said> = cases
        .iter()
        .map(|(src, name, t, sub)| ask(dnsd.addr(), src, name, *t, *sub))
        .collect();
    assert_eq!(
        ours[0].answers,
        vec![(T::A, "198.51.100.49".into())],
        "EU;DE"
    );
    assert_eq!(
        ours[1].answers,
        vec![(T::A, "198.51.100.50".into())],
        "EU;*"
    );
    assert_eq!(
        ours[3].answers,
        vec![(T::A, "192.0.2.1".into())],
        "not in the database"
    );
    assert_eq!(ours[4].answers, vec![(T::A, "198.51.100.1".into())], "NA");
    assert_eq!(ours[4].scope, Some(8), "the database network's length");
    // Not in the database: the zone's answer, scoped to the database's empty network
    // around it (0 gave it to every client, those located too).
    assert!(ours[6].scope.is_some_and(|s| s > 0), "{:?}", ours[6]);
    let mode = format!(
        "geodb\n    geodb-file: \"{}\"\n    geodb-key: [ continent/code, country/iso_code ]",
        db.display()
    );
    compare_with_knot(&zone, &geo, &mode, cases, &ours);
}

#[test]
fn a_pre_signed_zone_takes_its_variants_signatures_from_the_geo_file() {
    for p in ["delv", "dnssec-keygen", "dnssec-signzone"] {
        if !palisade_tests::have_program(p) {
            palisade_tests::skipped(&format!("{p} not installed"));
            return;
        }
    }
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    std::fs::write(d.join("geo.test.zone"), ZONE).unwrap();
    let sh = |cmd: &str| palisade_tests::sh(d, cmd);
    let ksk = sh("dnssec-keygen -q -a ECDSAP256SHA256 -f KSK -n ZONE geo.test");
    sh("dnssec-keygen -q -a ECDSAP256SHA256 -n ZONE geo.test");
    sh("dnssec-signzone -q -O full -o geo.test -K . -S -f signed.zone geo.test.zone");
    // The variant signed with the same keys: the zone with www holding only its records.
    let variant = ZONE
        .lines()
        .filter(|l| !l.starts_with("www"))
        .collect::<Vec<_>>()
        .join("\n")
        + "\nwww 60 A 198.51.100.5\n";
    std::fs::write(d.join("variant.zone"), variant).unwrap();
    sh("dnssec-signzone -q -O full -o geo.test -K . -S -f variant.signed variant.zone");
    let signed = std::fs::read_to_string(d.join("variant.signed")).unwrap();
    let sig = signed
        .lines()
        .find(|l| l.starts_with("www.geo.test.") && l.contains("RRSIG\tA "))
        .and_then(|l| l.split("RRSIG\t").nth(1))
        .expect("the variant's RRSIG")
        .trim()
        .to_string();
    let geo = d.join("geo.yaml");
    let with_sig = format!(
        "www.geo.test:\n  - net: 127.77.5.0/24\n    A: 198.51.100.5\n    RRSIG: \"{sig}\"\n"
    );
    std::fs::write(&geo, &with_sig).unwrap();
    let mut z = Zone::new("geo.test.", d.join("signed.zone"));
    z.options.push(format!("geo = \"{}\"", geo.display()));
    let dnsd = Dnsd::builder()
        .zone(z)
        .raw("\n[defence.rrl]\nenabled = false\n")
        .start();
    let key = std::fs::read_to_string(d.join(format!("{}.key", ksk.trim()))).unwrap();
    let (anchor, _) = palisade_tests::delv::anchor_from_key_file("geo.test", &key);
    std::fs::write(d.join("anchor.conf"), anchor).unwrap();
    for (src, data) in [("127.77.5.9", "198.51.100.5"), ("127.1.1.1", "192.0.2.1")] {
        let out = palisade_tests::delv::delv(
            dnsd.addr(),
            Some(src),
            &d.join("anchor.conf"),
            "geo.test",
            "www.geo.test",
            "A",
        );
        assert!(
            out.contains("; fully validated") && out.contains(data),
            "delv -b {src}:\n{out}"
        );
    }
    // A variant without its signature cannot be served by a pre-signed zone: refused, named.
    std::fs::write(
        &geo,
        "www.geo.test:\n  - net: 127.77.5.0/24\n    A: 198.51.100.6\n",
    )
    .unwrap();
    let (ok, out) = dnsd.ctl(&["reload"]);
    assert!(!ok, "{out}");
    assert!(out.contains("no RRSIG over its A records"), "{out}");
}

#[test]
fn a_client_subnet_picks_a_variant_never_whom_the_defences_judge() {
    let dir = tempfile::tempdir().unwrap();
    let (zone, ours, _) = setup(dir.path());
    let dnsd = dnsd(&zone, &ours);
    let (ok, out) = dnsd.ctl(&["block", "add", "127.93.0.7", "--force"]);
    assert!(ok, "{out}");
    // A blocked source naming an unblocked network in ECS stays blocked.
    let mut opts = QueryOpts::edns(1232);
    opts.options.push(ecs("10.1.0.0".parse().unwrap(), 16));
    let q = build_query(9, "www.geo.test.", T::A, &opts);
    let s = UdpSocket::bind(("127.93.0.7", 0)).unwrap();
    s.set_read_timeout(Some(Duration::from_millis(700)))
        .unwrap();
    s.send_to(&q, dnsd.addr()).unwrap();
    let mut buf = [0u8; 512];
    assert!(
        s.recv(&mut buf).is_err(),
        "a blocked source was answered through ECS"
    );
    assert!(dnsd.stat("drops.blocked") >= 1);
    // Another source naming the blocked address in ECS is answered: ECS picks the variant
    // (here the zone's own, no variant covering 127.93.0.7), never whom the block map hits.
    let r = ask(
        dnsd.addr(),
        "127.93.0.8",
        "www.geo.test.",
        T::A,
        Some(("127.93.0.7", 32)),
    );
    assert_eq!(r.answers, vec![(T::A, "192.0.2.1".into())]);
    // Its scope keeps out 127.77.0.0/16 (127.93 differs from it at bit 12).
    assert_eq!(r.scope, Some(12));
}

/// `ecs_from` names the resolvers whose Client Subnet is believed: another source naming the
/// office's network in ECS gets the answer of its own address, and no ECS option back (any
/// client got the office view's private answer by naming its network).
#[test]
fn only_the_listed_resolvers_may_name_a_client_subnet() {
    let dir = tempfile::tempdir().unwrap();
    let (zone, ours, _) = setup(dir.path());
    let mut z = zone.clone();
    z.options.push(format!("geo = \"{}\"", ours.display()));
    let dnsd = Dnsd::builder()
        .zone(z)
        .server_option("ecs = true")
        .server_option("ecs_from = [\"127.94.0.1\"]")
        .raw("\n[defence.rrl]\nenabled = false\n\n[[view]]\nname = \"office\"\nprefixes = [\"127.88.0.0/16\", \"10.88.0.0/16\"]\n")
        .start();
    let office = Some(("10.88.1.0", 24));
    let listed = ask(dnsd.addr(), "127.94.0.1", "office.geo.test.", T::A, office);
    assert_eq!(listed.answers, vec![(T::A, "203.0.113.8".into())]);
    assert_eq!(listed.scope, Some(16));
    let other = ask(dnsd.addr(), "127.94.0.2", "office.geo.test.", T::A, office);
    assert_eq!(
        other.answers,
        vec![(T::A, "192.0.2.2".into())],
        "an unlisted source's ECS picked the office view"
    );
    assert_eq!(other.scope, None, "its ECS ignored, none echoed");
    // Its own address still picks (127.88.x is the office).
    let inside = ask(dnsd.addr(), "127.88.0.9", "office.geo.test.", T::A, None);
    assert_eq!(inside.answers, vec![(T::A, "203.0.113.8".into())]);
}

/// A name the geo file alone holds, asked for a type its client's variant lacks: NODATA in
/// an unsigned zone, as Knot answers (NXDOMAIN told the client's resolver the name was gone,
/// its A with it, RFC 8020); and a wildcard variant covers names several labels below it.
#[test]
fn a_geo_only_name_without_the_type_is_nodata_and_wildcards_reach_down() {
    let dir = tempfile::tempdir().unwrap();
    let (zone, _, _) = setup(dir.path());
    // A delegation below the wildcard: its names are the child's (a referral), never a
    // variant's.
    std::fs::write(
        &zone.file,
        format!("{ZONE}corp.sub.wild NS ns.other.test.\n"),
    )
    .unwrap();
    let geo = dir.path().join("only.yaml");
    std::fs::write(
        &geo,
        "geoonly.geo.test:\n  - net: 10.0.0.0/8\n    A: 198.51.100.30\n\
         \"*.wild.geo.test\":\n  - net: 10.0.0.0/8\n    A: 198.51.100.20\n",
    )
    .unwrap();
    let mut z = zone.clone();
    z.options.push(format!("geo = \"{}\"", geo.display()));
    let dnsd = Dnsd::builder()
        .zone(z)
        .server_option("ecs = true")
        .raw("\n[defence.rrl]\nenabled = false\n")
        .start();
    let ten = Some(("10.0.0.0", 8));
    let a = ask(dnsd.addr(), "127.1.1.1", "geoonly.geo.test.", T::A, ten);
    assert_eq!(a.answers, vec![(T::A, "198.51.100.30".into())]);
    let aaaa = ask(dnsd.addr(), "127.1.1.1", "geoonly.geo.test.", T::AAAA, ten);
    assert_eq!((aaaa.rcode, aaaa.answers.len()), (0, 0), "NODATA: {aaaa:?}");
    // Scoped to the client's network: others get NXDOMAIN (scope 0 told a resolver to give
    // everyone this NODATA, or them this client's NXDOMAIN).
    assert_eq!(aaaa.scope, Some(8));
    // No variant for this client: the name is the zone's, which lacks it.
    let other = ask(
        dnsd.addr(),
        "127.1.1.1",
        "geoonly.geo.test.",
        T::A,
        Some(("192.0.2.0", 24)),
    );
    assert_eq!(other.rcode, 3, "{other:?}");
    assert_eq!(other.scope, Some(1), "192/8 and 10/8 part at the first bit");
    let deep = ask(dnsd.addr(), "127.1.1.1", "c.b.wild.geo.test.", T::A, ten);
    assert_eq!(deep.answers, vec![(T::A, "198.51.100.20".into())]);
    let cut = ask(
        dnsd.addr(),
        "127.1.1.1",
        "www.corp.sub.wild.geo.test.",
        T::A,
        ten,
    );
    assert!(
        cut.answers.is_empty(),
        "a variant answered below a delegation: {cut:?}"
    );
}
