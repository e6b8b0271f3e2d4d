//! Reloads: while a 1M-record zone reloads, every query is answered from the old version;
//! a zone that fails to load keeps its last good version (and the caller hears why);
//! SIGHUP reloads too.

use std::fmt::Write as _;
use std::net::{SocketAddr, UdpSocket};
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use palisade_tests::servers::{Dnsd, Zone};
use palisade_tests::wait::wait_for;
use palisade_tests::wire::{QueryOpts, RawMsg, build_query};

/// Writes a zone of about `records` records with serial `serial`.
fn write_zone(path: &Path, serial: u32, records: usize) {
    let mut s = String::with_capacity(records * 30);
    let _ = writeln!(
        s,
        "$TTL 300\n@ SOA ns1 hostmaster {serial} 7200 3600 1209600 300\n@ NS ns1\nns1 A 192.0.2.1\nwww A 192.0.2.{}",
        serial % 250
    );
    for i in 0..records {
        let _ = writeln!(
            s,
            "h{i} A 10.{}.{}.{}",
            (i >> 16) & 255,
            (i >> 8) & 255,
            i & 255
        );
    }
    std::fs::write(path, s).unwrap();
}

fn serial_of(addr: SocketAddr) -> Option<u32> {
    let r = palisade_tests::client::query_reply(addr, "big.test.", 6, &QueryOpts::udp());
    let n = palisade_tests::compare::Normalized::from_reply(&r);
    let soa = n.answer.iter().find(|rr| rr.rtype == 6)?;
    let d = &soa.rdata;
    // SERIAL is the first of the five 32-bit fields that end the SOA RDATA.
    let s = d.len().checked_sub(20)?;
    Some(u32::from_be_bytes(d[s..s + 4].try_into().ok()?))
}

#[test]
fn queries_never_fail_while_a_million_record_zone_reloads() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("big.test.zone");
    write_zone(&file, 1, 1_000_000);
    let dnsd = Dnsd::builder()
        .zone(Zone::new("big.test.", &file))
        .raw("[defence.rrl]\nenabled = false")
        .start();
    let addr = dnsd.addr();
    assert_eq!(serial_of(addr), Some(1));
    // A steady stream of queries, each waiting for its answer (bounded count and time).
    let stop = Arc::new(AtomicBool::new(false));
    let (ok, failed) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
    let querier = {
        let (stop, ok, failed) = (stop.clone(), ok.clone(), failed.clone());
        std::thread::spawn(move || {
            let s = UdpSocket::bind("127.0.0.1:0").unwrap();
            s.connect(addr).unwrap();
            s.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
            let opts = QueryOpts::udp();
            let mut buf = [0u8; 1024];
            let deadline = Instant::now() + Duration::from_secs(120);
            let mut i: u32 = 0;
            while !stop.load(Ordering::Relaxed) && Instant::now() < deadline && i < 2_000_000 {
                let q = build_query(i as u16, &format!("h{}.big.test.", i % 1_000_000), 1, &opts);
                s.send(&q).unwrap();
                let answered = loop {
                    match s.recv(&mut buf) {
                        Ok(n) => {
                            let Ok(m) = RawMsg::parse(&buf[..n]) else {
                                break false;
                            };
                            if m.id != i as u16 {
                                continue; // a late reply to an earlier query
                            }
                            break m.rcode() == 0 && m.counts[1] == 1;
                        }
                        Err(_) => break false,
                    }
                };
                if answered {
                    ok.fetch_add(1, Ordering::Relaxed);
                } else {
                    failed.fetch_add(1, Ordering::Relaxed);
                }
                i = i.wrapping_add(1);
            }
        })
    };
    std::thread::sleep(Duration::from_millis(200));
    write_zone(&file, 2, 1_000_000);
    let t0 = Instant::now();
    // A control command while the zone loads is answered then, not after it (the load ran
    // with the zone registry held: `ctl zones` waited behind a big zone's reload, 8 s behind
    // a signed 200k-record one).
    let ((reloaded, out), (listed, zones_done)) = std::thread::scope(|sc| {
        let zones = sc.spawn(|| {
            std::thread::sleep(Duration::from_millis(150));
            let r = dnsd.ctl(&["zones"]);
            (r, Instant::now())
        });
        let r = dnsd.ctl(&["reload", "big.test."]);
        (r, zones.join().unwrap())
    });
    let reload_done = Instant::now();
    let took = t0.elapsed();
    eprintln!(
        "ctl zones answered {:?} into a reload of {took:?}",
        zones_done - t0
    );
    assert!(reloaded, "{out}");
    assert!(listed.0 && listed.1.contains("big.test."), "{}", listed.1);
    // (Before, it came back with the reload's own answer: 575.96 ms into a reload of
    // 576.02 ms.)
    assert!(
        zones_done + Duration::from_millis(50) < reload_done,
        "ctl zones waited for the reload: {:?} into {took:?}",
        zones_done - t0
    );
    assert_eq!(serial_of(addr), Some(2));
    std::thread::sleep(Duration::from_millis(200));
    stop.store(true, Ordering::Relaxed);
    querier.join().unwrap();
    let (ok, failed) = (ok.load(Ordering::Relaxed), failed.load(Ordering::Relaxed));
    eprintln!(
        "reload of 1M records took {took:?}; {ok} queries answered during it, {failed} failed"
    );
    assert!(ok > 100, "the querier ran");
    assert_eq!(failed, 0, "no query fails while the zone reloads");
}

#[test]
fn a_bad_zone_keeps_the_last_good_version_and_sighup_reloads() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("big.test.zone");
    write_zone(&file, 7, 10);
    let dnsd = Dnsd::builder().zone(Zone::new("big.test.", &file)).start();
    let addr = dnsd.addr();
    assert_eq!(serial_of(addr), Some(7));
    // Break the file: the reload fails with file:line, the old zone keeps serving.
    let mut text = std::fs::read_to_string(&file).unwrap();
    text.push_str("bad A 300.1.2.3\n");
    std::fs::write(&file, &text).unwrap();
    let (ok, out) = dnsd.ctl(&["reload", "big.test."]);
    assert!(!ok, "{out}");
    assert!(
        out.contains("big.test.zone:") && out.contains("FAILED"),
        "{out}"
    );
    assert_eq!(serial_of(addr), Some(7), "last good version still served");
    let (_, zones) = dnsd.ctl(&["zones"]);
    assert!(
        zones.contains("serial 7") && zones.contains("last reload failed"),
        "{zones}"
    );
    assert!(
        dnsd.metrics()
            .contains("dnsd_reloads_total{result=\"failed\"} 1")
    );
    // Fixed and changed: SIGHUP reloads it.
    write_zone(&file, 8, 10);
    let pid = dnsd.pid() as libc::pid_t;
    // SAFETY: kill(2) with a valid signal number.
    assert_eq!(unsafe { libc::kill(pid, libc::SIGHUP) }, 0);
    wait_for("SIGHUP to reload", Duration::from_secs(10), || {
        serial_of(addr) == Some(8)
    });
}

/// A reload of a zone too big for the memory left (here the address-space limit) is refused,
/// naming the file, and the last good version serves on: the process aborted on the failed
/// allocation, every zone with it (Knot refuses it, "not enough memory").
#[test]
fn a_zone_too_big_for_the_memory_left_is_refused_and_the_server_lives() {
    if !palisade_tests::have_program("prlimit") {
        palisade_tests::skipped("prlimit not installed (util-linux)");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("big.test.zone");
    write_zone(&file, 7, 10);
    let mut dnsd = Dnsd::builder().zone(Zone::new("big.test.", &file)).start();
    let addr = dnsd.addr();
    assert_eq!(serial_of(addr), Some(7));
    // 256 MiB of address space beyond what the server holds now.
    let pid = dnsd.pid();
    let statm = std::fs::read_to_string(format!("/proc/{pid}/statm")).unwrap();
    let pages: u64 = statm.split_whitespace().next().unwrap().parse().unwrap();
    let limit = pages * 4096 + (256 << 20);
    let ok = std::process::Command::new("prlimit")
        .arg(format!("--pid={pid}"))
        .arg(format!("--as={limit}:{limit}"))
        .status()
        .unwrap()
        .success();
    assert!(ok, "prlimit --pid");
    // Some 2.5 M records, 60 MB of text: its build takes several hundred MiB.
    write_zone(&file, 8, 2_500_000);
    let (ok, out) = dnsd.ctl(&["reload", "big.test."]);
    assert!(dnsd.is_running(), "the server died:\n{}", dnsd.log());
    assert!(!ok, "{out}");
    assert!(
        out.contains("big.test.zone") && out.contains("not enough memory"),
        "{out}"
    );
    assert_eq!(serial_of(addr), Some(7), "the last good version serves on");
    // The same records behind an `$INCLUDE` (the file's own size shows nothing of them),
    // and sixteen `$GENERATE` lines making a million records of 128 bytes.
    let included = dir.path().join("records.inc");
    write_zone(&included, 8, 2_500_000);
    let text = std::fs::read_to_string(&included).unwrap();
    let body: String = text.lines().skip(4).map(|l| format!("{l}\n")).collect();
    std::fs::write(&included, body).unwrap();
    write_zone(&file, 8, 1);
    let mut main = std::fs::read_to_string(&file).unwrap();
    main.push_str(&format!("$INCLUDE {}\n", included.display()));
    std::fs::write(&file, &main).unwrap();
    let (ok, out) = dnsd.ctl(&["reload", "big.test."]);
    assert!(dnsd.is_running(), "the server died:\n{}", dnsd.log());
    assert!(!ok && out.contains("not enough memory"), "{out}");
    write_zone(&file, 8, 1);
    let mut main = std::fs::read_to_string(&file).unwrap();
    let pad = "x".repeat(120);
    for k in 0..16 {
        main.push_str(&format!("$GENERATE 0-65535 g{k}-$ TXT \"{pad}$\"\n"));
    }
    std::fs::write(&file, &main).unwrap();
    let (ok, out) = dnsd.ctl(&["reload", "big.test."]);
    assert!(dnsd.is_running(), "the server died:\n{}", dnsd.log());
    assert!(!ok && out.contains("not enough memory"), "{out}");
    assert_eq!(serial_of(addr), Some(7), "the last good version serves on");
    // Each refusal counted as what it was (they counted as any failed reload).
    assert!(dnsd.stat("reloads.no_memory") >= 3, "{:?}", dnsd.stats());
    assert_eq!(dnsd.stat("reloads.memory_reserved"), 0, "nothing left held");
    // A zone that fits loads as before.
    write_zone(&file, 9, 10);
    let (ok, out) = dnsd.ctl(&["reload", "big.test."]);
    assert!(ok, "{out}");
    assert_eq!(serial_of(addr), Some(9));
}

/// A zone file that is no regular file is refused at once, naming what it is, and the last
/// good version keeps serving: a character device (`/dev/zero` was read without end until
/// the server ran out of memory) and a FIFO (its open waited for a writer for ever, holding
/// every later reload, zone command and shutdown) — as the zone file, or `$INCLUDE`d.
#[test]
fn a_zone_file_that_is_a_device_or_a_fifo_is_refused_and_nothing_waits() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("big.test.zone");
    write_zone(&file, 7, 10);
    let dnsd = Dnsd::builder().zone(Zone::new("big.test.", &file)).start();
    let addr = dnsd.addr();
    let fifo = dir.path().join("fifo");
    let c = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
    // SAFETY: mkfifo with a valid path.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o644) }, 0);
    let real = dir.path().join("real.zone");
    std::fs::rename(&file, &real).unwrap();
    for (target, what) in [
        (Path::new("/dev/zero"), "is a character device"),
        (fifo.as_path(), "is a FIFO"),
    ] {
        let _ = std::fs::remove_file(&file);
        std::os::unix::fs::symlink(target, &file).unwrap();
        let t0 = Instant::now();
        let (ok, out) = dnsd.ctl(&["reload", "big.test."]);
        assert!(!ok && out.contains(what), "{out}");
        assert!(t0.elapsed() < Duration::from_secs(5), "{:?}", t0.elapsed());
        assert_eq!(serial_of(addr), Some(7), "last good version still served");
        // $INCLUDEd from a file that is a zone file.
        std::fs::remove_file(&file).unwrap();
        let mut text = std::fs::read_to_string(&real).unwrap();
        let _ = writeln!(text, "$INCLUDE {}", target.display());
        std::fs::write(&file, text).unwrap();
        let (ok, out) = dnsd.ctl(&["reload", "big.test."]);
        assert!(!ok && out.contains(what), "{out}");
        assert_eq!(serial_of(addr), Some(7));
    }
    let (ok, out) = dnsd.ctl(&["zones"]);
    assert!(ok && out.contains("serial 7"), "{out}");
}

/// The config, the rules file and a zone list replaced by a FIFO or a device: each reload is
/// refused at once naming what it is, and everything keeps answering (a FIFO's open waited
/// for a writer on the runtime that serves TCP, the control socket and SIGHUP).
#[test]
fn a_config_rules_or_list_file_that_is_a_fifo_or_device_is_refused_and_nothing_waits() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("big.test.zone");
    write_zone(&file, 7, 10);
    let rules = dir.path().join("rules.toml");
    std::fs::write(&rules, "[[tenant]]\nid = 1\n").unwrap();
    let list = dir.path().join("zones.list");
    std::fs::write(&list, "").unwrap();
    let dnsd = Dnsd::builder()
        .zone(Zone::new("big.test.", &file))
        .raw(&format!(
            "[rules]\nfile = \"{}\"\n\n[[zone_set]]\nlist = \"{}\"",
            rules.display(),
            list.display(),
        ))
        .start();
    let addr = dnsd.addr();
    let fifo = dir.path().join("fifo");
    let c = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
    // SAFETY: mkfifo with a valid path.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o644) }, 0);
    let conf = dnsd.config_path().to_path_buf();
    for path in [conf.clone(), rules.clone(), list.clone()] {
        let keep = dir.path().join("kept");
        std::fs::rename(&path, &keep).unwrap();
        for (target, what) in [
            (fifo.as_path(), "is a FIFO"),
            (Path::new("/dev/zero"), "is a character device"),
        ] {
            std::os::unix::fs::symlink(target, &path).unwrap();
            let t0 = Instant::now();
            let (ok, out) = dnsd.ctl(&["reload"]);
            assert!(!ok && out.contains(what), "{}: {out}", path.display());
            assert!(t0.elapsed() < Duration::from_secs(5), "{:?}", t0.elapsed());
            assert_eq!(serial_of(addr), Some(7), "still served");
            std::fs::remove_file(&path).unwrap();
        }
        std::fs::rename(&keep, &path).unwrap();
    }
    let (ok, out) = dnsd.ctl(&["reload"]);
    assert!(ok, "{out}");
}

/// A primary's reload its secondaries would not follow is warned of, as Knot reports it: a
/// serial that went back, a changed zone under the same serial.
#[test]
fn a_serial_that_goes_back_or_stays_on_a_change_is_warned_of() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("big.test.zone");
    write_zone(&file, 7, 10);
    let dnsd = Dnsd::builder().zone(Zone::new("big.test.", &file)).start();
    write_zone(&file, 5, 10);
    let (ok, out) = dnsd.ctl(&["reload", "big.test."]);
    assert!(ok, "{out}");
    // Said to the operator who reloaded too (only the log said it).
    assert!(
        out.contains("warning: serial 7 -> 5: the serial went back"),
        "{out}"
    );
    assert_eq!(serial_of(dnsd.addr()), Some(5));
    write_zone(&file, 5, 12);
    let (ok, out) = dnsd.ctl(&["reload", "big.test."]);
    assert!(ok, "{out}");
    assert!(out.contains("changed under the same serial"), "{out}");
    // One address changed, as many records: said too (only the counts were compared).
    let text = std::fs::read_to_string(&file).unwrap();
    let i = text.rfind(" A ").expect("an A record");
    let changed = format!("{}{}", &text[..i], text[i..].replacen(".1", ".9", 1));
    assert_ne!(changed, text);
    std::fs::write(&file, changed).unwrap();
    let (ok, out) = dnsd.ctl(&["reload", "big.test."]);
    assert!(ok && out.contains("changed under the same serial"), "{out}");
    // Nothing changed (a forced reload): nothing said.
    let (ok, out) = dnsd.ctl(&["reload", "--force"]);
    assert!(ok && !out.contains("warning"), "{out}");
    wait_for("both warnings in the log", Duration::from_secs(5), || {
        let l = dnsd.log();
        l.contains("the serial went back") && l.contains("changed under the same serial")
    });
}

/// What a reload says of the config: a refused one is counted and logged as an error, a
/// `[redis]` whose fleet key is missing is refused (it left the node without the sync), and
/// a reload that drops zones says which (it said "no zone changed").
#[test]
fn a_reload_says_what_the_config_did() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("big.test.zone");
    write_zone(&file, 7, 10);
    let other = dir.path().join("other.test.zone");
    std::fs::write(
        &other,
        "$ORIGIN other.test.\n$TTL 300\n@ SOA ns1 h 1 3600 600 86400 60\n@ NS ns1\nns1 A 192.0.2.1\n",
    )
    .unwrap();
    let dnsd = Dnsd::builder()
        .zones(&[
            Zone::new("big.test.", &file),
            Zone::new("other.test.", &other),
        ])
        .start();
    let cfg = std::fs::read_to_string(dnsd.config_path()).unwrap();
    // An unknown key (a TOML that does not parse would stop `ctl -c` itself).
    std::fs::write(dnsd.config_path(), format!("{cfg}\nbogus = 1\n")).unwrap();
    let (ok, out) = dnsd.ctl(&["reload"]);
    assert!(!ok && out.contains("dnsd.toml:"), "{out}");
    assert_eq!(dnsd.stat("reloads.config_refused"), 1);
    assert!(dnsd.log().contains("ERROR"), "{}", dnsd.log());
    let missing = dir.path().join("no-such.key");
    std::fs::write(
        dnsd.config_path(),
        format!(
            "{cfg}\n[redis]\nurl = \"redis://127.0.0.1:1\"\nkey_file = \"{}\"\n",
            missing.display()
        ),
    )
    .unwrap();
    let (ok, out) = dnsd.ctl(&["reload"]);
    assert!(
        !ok && out.contains("redis") && out.contains("no-such.key"),
        "{out}"
    );
    assert_eq!(dnsd.stat("reloads.config_refused"), 2);
    // other.test. taken out of the config.
    let mut kept = String::new();
    let mut skip = false;
    for l in cfg.lines() {
        if l.starts_with("[[zone]]") || l.starts_with('[') {
            skip = false;
        }
        if l.contains("origin = \"other.test.\"") {
            skip = true;
            kept.truncate(kept.trim_end_matches("[[zone]]\n").len());
        }
        if !skip {
            kept.push_str(l);
            kept.push('\n');
        }
    }
    std::fs::write(dnsd.config_path(), kept).unwrap();
    let (ok, out) = dnsd.ctl(&["reload"]);
    assert!(ok, "{out}");
    assert!(
        out.contains("1 zone(s) removed") && out.contains("other.test."),
        "{out}"
    );
}

/// A configured zone without data (its file failed to load at start, or is missing) is
/// answered SERVFAIL at and below its apex, as Knot and NSD answer it: neither REFUSED nor
/// answered by a served parent (its referral, or an authoritative NXDOMAIN for a child it does
/// not delegate, which resolvers would cache). A chase from another zone stops at it; DS at
/// its apex stays the parent's; once its file is good it is served.
#[test]
fn a_zone_without_data_is_servfail_and_never_its_parents_answer() {
    use hickory_proto::op::ResponseCode;
    let dir = tempfile::tempdir().unwrap();
    let p = |f: &str| dir.path().join(f);
    std::fs::write(
        p("par.zone"),
        "$TTL 300\n@ SOA ns1 hostmaster 1 7200 3600 1209600 300\n@ NS ns1\nns1 A 192.0.2.1\n\
         kid NS ns.kid\nns.kid A 192.0.2.5\nalias CNAME www.kid\nnx CNAME x.nofile\n\
         al ALIAS lone.test.\n",
    )
    .unwrap();
    // A bad address: no server loads it.
    let bad = "$TTL 300\n@ SOA ns1 hostmaster 1 7200 3600 1209600 300\n@ NS ns1\nns1 A 192.0.2.1\nwww A 192.0.2.300\n";
    std::fs::write(p("kid.zone"), bad).unwrap();
    // The zones without data are configured raw: the harness waits for zones it serves.
    let mut raw = String::new();
    for (origin, file) in [
        ("kid.par.test.", "kid.zone"),
        ("nofile.par.test.", "missing.zone"),
        ("lone.test.", "missing-too.zone"),
    ] {
        let _ = write!(
            raw,
            "\n[[zone]]\norigin = \"{origin}\"\nfile = \"{}\"\n",
            p(file).display()
        );
    }
    let dnsd = Dnsd::builder()
        .zone(Zone::new("par.test.", p("par.zone")))
        .raw(&raw)
        .start();
    let addr = dnsd.addr();
    let ask = |name: &str, qtype: u16| {
        palisade_tests::client::query(addr, name, qtype, &QueryOpts::udp())
    };
    for (name, qtype) in [
        ("www.kid.par.test.", 1),
        ("kid.par.test.", 2),
        ("kid.par.test.", 6),
        ("x.nofile.par.test.", 1),
        ("nofile.par.test.", 6),
        ("lone.test.", 6),
        ("a.b.lone.test.", 28),
    ] {
        let m = ask(name, qtype);
        assert_eq!(
            m.response_code,
            ResponseCode::ServFail,
            "{name} {qtype}: {m}"
        );
        assert!(m.answers.is_empty() && m.authorities.is_empty(), "{m}");
    }
    // A chain from the parent into them: the CNAME, not an answer joined from no data.
    for name in ["alias.par.test.", "nx.par.test."] {
        let m = ask(name, 1);
        assert_eq!(m.response_code, ResponseCode::NoError, "{name}: {m}");
        assert!(m.authoritative && m.answers.len() == 1, "{name}: {m}");
    }
    // An ALIAS to such a zone's apex: its target cannot be had (not a NODATA from no data).
    let m = ask("al.par.test.", 1);
    assert_eq!(m.response_code, ResponseCode::ServFail, "{m}");
    // DS at the child's apex is the parent's (here: none, NODATA from the parent).
    let m = ask("kid.par.test.", 43);
    assert_eq!(m.response_code, ResponseCode::NoError, "{m}");
    assert!(m.authoritative, "{m}");
    let metrics = dnsd.metrics();
    assert!(
        metrics.contains("dnsd_zone_serial{zone=\"par.test.\"}")
            && !metrics.contains("dnsd_zone_serial{zone=\"kid.par.test.\"}"),
        "{metrics}"
    );
    // Fixed: served.
    std::fs::write(p("kid.zone"), bad.replace("192.0.2.300", "192.0.2.30")).unwrap();
    let (ok, out) = dnsd.ctl(&["reload", "kid.par.test."]);
    assert!(ok, "{out}");
    let m = ask("www.kid.par.test.", 1);
    assert_eq!(m.response_code, ResponseCode::NoError, "{m}");
    assert_eq!(m.answers.len(), 1, "{m}");
}

/// `[block] state_file`: this node's blocks (an operator's, the daemons' own) survive a
/// restart without Redis (it may have been away when they were made, or lost its data);
/// they were gone everywhere, an operator told "blocked for 86400 s".
#[test]
fn a_nodes_own_blocks_survive_a_restart_through_the_state_file() {
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("blocks.state");
    let cfg = format!("[block]\nstate_file = \"{}\"\n", state.display());
    let mut d = Dnsd::builder()
        .zone(Zone::data("example.com."))
        .raw(&cfg)
        .start();
    let (ok, out) = d.ctl(&["block", "add", "10.43.0.0/24", "--ttl", "86400"]);
    assert!(ok, "{out}");
    let (ok, out) = d.ctl(&["block", "add", "10.44.0.0/24", "--ttl", "86400"]);
    assert!(ok, "{out}");
    let (ok, out) = d.ctl(&["block", "del", "10.44.0.0/24"]);
    assert!(ok, "{out}");
    assert!(d.terminate(Duration::from_secs(14)), "stopped");
    let again = Dnsd::builder()
        .zone(Zone::data("example.com."))
        .raw(&cfg)
        .start();
    let (_, list) = again.ctl(&["block", "list"]);
    assert!(
        list.contains("10.43.0.0/24"),
        "kept across the restart:\n{list}"
    );
    assert!(
        !list.contains("10.44.0.0/24"),
        "a lifted block stays lifted:\n{list}"
    );
}

/// A reload refuses what a start would refuse, and the last good config keeps serving: a
/// config or rules file cut to nothing (it read as "no zones", "no rules" and wiped both),
/// values a start checks when it binds or installs them (`metrics.listen`, `log.filter`,
/// `block.min_prefix_v4`, a table too large to allocate), a rules value no query shows; a
/// zone whose file is gone is said at each reload; a section read at start only says so.
#[test]
fn a_reload_refuses_what_a_start_would_and_says_what_waits_for_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("big.test.zone");
    write_zone(&file, 7, 10);
    let rules = dir.path().join("rules.toml");
    let good_rules = "[[tenant]]\nid = 1\n[[tenant.rule]]\nname = \"no-any\"\naction = \"deny\"\n\
                      when = [{ attr = \"qtype\", exact = \"ANY\" }]\n";
    std::fs::write(&rules, good_rules).unwrap();
    let mut zone = Zone::new("big.test.", &file);
    zone.options.push("tenant = 1".into());
    let dnsd = Dnsd::builder()
        .zone(zone)
        .without_metrics()
        .raw(&format!("[rules]\nfile = \"{}\"", rules.display()))
        .start();
    let addr = dnsd.addr();
    let cfg = std::fs::read_to_string(dnsd.config_path()).unwrap();
    // Through the socket itself: `ctl -c` cannot find it in a config cut to nothing.
    let reload = || {
        let out = std::process::Command::new(palisade_tests::bin("dnsd"))
            .args(["ctl", "-s"])
            .arg(dnsd.control_socket())
            .arg("reload")
            .output()
            .unwrap();
        let mut text = String::from_utf8_lossy(&out.stdout).into_owned();
        text.push_str(&String::from_utf8_lossy(&out.stderr));
        (out.status.success(), text)
    };
    let refused = |text: &str, says: &str| {
        std::fs::write(dnsd.config_path(), text).unwrap();
        let (ok, out) = reload();
        assert!(!ok && out.contains(says), "{says}: {out}");
        assert_eq!(serial_of(addr), Some(7), "still served after {says}");
    };
    refused("", "is empty");
    refused("\n  \n", "is empty");
    refused(
        &format!("{cfg}\n[metrics]\nlisten = \"localhost\"\n"),
        "metrics.listen",
    );
    refused(
        &format!("{cfg}\n[log]\nfilter = \"dnsd=loud\"\n"),
        "log.filter",
    );
    refused(
        &format!("{cfg}\n[block]\nmin_prefix_v4 = 40\n"),
        "block.min_prefix_v4",
    );
    refused(
        &format!("{cfg}\n[defence.rrl]\ntable_size = 1099511627776\n"),
        "table_size",
    );
    std::fs::write(dnsd.config_path(), &cfg).unwrap();
    let (ok, out) = dnsd.ctl(&["reload"]);
    assert!(ok && !out.contains("at start only"), "{out}");
    // The rules: cut to nothing, or a type no query has.
    for (text, says) in [
        ("", "is empty"),
        (
            &good_rules.replace("ANY", "NOTATYPE") as &str,
            "not a DNS type",
        ),
        (&good_rules.replace("ANY", "TYPE255"), "write ANY"),
    ] {
        std::fs::write(&rules, text).unwrap();
        let (ok, out) = dnsd.ctl(&["reload"]);
        assert!(!ok && out.contains(says), "{says}: {out}");
    }
    std::fs::write(&rules, good_rules).unwrap();
    // A section read at start only: applied at the next start, and said.
    std::fs::write(
        dnsd.config_path(),
        format!("{cfg}\n[defence.suspects]\ntable_size = 4096\n"),
    )
    .unwrap();
    let (ok, out) = dnsd.ctl(&["reload"]);
    assert!(
        ok && out.contains("[defence]") && out.contains("at start only"),
        "{out}"
    );
    // The zone's file renamed in the config to one that is not there.
    std::fs::write(
        dnsd.config_path(),
        cfg.replace("big.test.zone", "gone.test.zone"),
    )
    .unwrap();
    for _ in 0..2 {
        let (ok, out) = dnsd.ctl(&["reload"]);
        assert!(!ok && out.contains("gone.test.zone"), "{out}");
        assert_eq!(serial_of(addr), Some(7));
    }
}

/// What `serve` flags set on top of the config file (`--zone`, `--metrics`) stays through a
/// reload: a flag's zone was dropped ("1 zone(s) removed"), and `--metrics` was named at each
/// reload as a change waiting for a restart.
#[test]
fn a_reload_keeps_what_the_serve_flags_set() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("big.test.zone");
    write_zone(&file, 3, 10);
    let ip = palisade_tests::net::test_addr().ip().to_string();
    let metrics = format!(
        "{ip}:{}",
        palisade_tests::net::free_port(ip.parse().unwrap())
    );
    let zone_flag = format!("big.test.={}", file.display());
    let dnsd = Dnsd::builder()
        .zone(Zone::data("example.com."))
        .without_metrics()
        .flags(&["--zone", &zone_flag, "--metrics", &metrics])
        .start();
    wait_for("the flag's zone served", Duration::from_secs(5), || {
        serial_of(dnsd.addr()) == Some(3)
    });
    for _ in 0..2 {
        let (ok, out) = dnsd.ctl(&["reload"]);
        assert!(ok, "{out}");
        assert!(
            !out.contains("removed") && !out.contains("[metrics]"),
            "{out}"
        );
        assert_eq!(serial_of(dnsd.addr()), Some(3), "{out}");
    }
    write_zone(&file, 4, 10);
    let (ok, out) = dnsd.ctl(&["reload"]);
    assert!(ok, "{out}");
    assert_eq!(serial_of(dnsd.addr()), Some(4), "{out}");
    assert!(
        palisade_tests::servers::http_get(metrics.parse().unwrap(), "/metrics").is_ok(),
        "the flag's metrics endpoint"
    );
}
