//! Builds the seed corpora of the fuzz targets into `fuzz/corpus/<target>/` (gitignored).
//!
//! Sources, read in place and never copied into the repository: the shared test corpora
//! (`$PALISADE_CORPORA`, else `../../shared/corpora` beside the workspace: zone files,
//! RDATA vectors), the tests' own data (`tests/data/*.zone`, `examples/`, `shield/data/`,
//! `bench/configs/`) and queries built with the end-to-end tests' message builder
//! (`palisade_tests::wire::build_query`) in every shape the tests send.
//!
//! Run from `fuzz/`: `cargo +nightly run --release --features seeds --bin seeds`.

use std::collections::HashSet;
use std::path::{Path, PathBuf};

use palisade_tests::wire::{QueryOpts, build_query, name_to_wire};

/// Largest seed kept: bigger inputs only slow the fuzzers down.
const MAX_SEED: usize = 64 * 1024;

struct Out {
    root: PathBuf,
    seen: HashSet<(String, u64)>,
    counts: std::collections::BTreeMap<String, usize>,
}

impl Out {
    fn put(&mut self, target: &str, data: &[u8]) {
        if data.len() > MAX_SEED {
            return;
        }
        use std::hash::{Hash, Hasher};
        let mut h = std::collections::hash_map::DefaultHasher::new();
        data.hash(&mut h);
        let h = h.finish();
        if !self.seen.insert((target.to_string(), h)) {
            return;
        }
        let dir = self.root.join(target);
        std::fs::create_dir_all(&dir).expect("create corpus dir");
        std::fs::write(dir.join(format!("seed-{h:016x}")), data).expect("write seed");
        *self.counts.entry(target.to_string()).or_default() += 1;
    }
}

fn files(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(rd) = std::fs::read_dir(dir) else {
        return;
    };
    for e in rd.flatten() {
        let p = e.path();
        if p.is_dir() {
            files(&p, out);
        } else {
            out.push(p);
        }
    }
}

/// Files of the corpora that hold master-file text (zone files and zone-scanner inputs).
fn is_zone_text(p: &Path) -> bool {
    let name = p.file_name().and_then(|n| n.to_str()).unwrap_or("");
    let ext = p.extension().and_then(|e| e.to_str()).unwrap_or("");
    !(name.starts_with("README")
        || name.starts_with("LICENSE")
        || name == "COPYING"
        || name == "TESTS"
        || matches!(
            ext,
            "md" | "tsv" | "yaml" | "out" | "rpl" | "json" | "toml" | "cmp"
        ))
}

fn tsv_unescape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut it = s.chars();
    while let Some(c) = it.next() {
        if c != '\\' {
            out.push(c);
            continue;
        }
        match it.next() {
            Some('\\') => out.push('\\'),
            Some('t') => out.push('\t'),
            Some('n') => out.push('\n'),
            Some(o) => {
                out.push('\\');
                out.push(o);
            }
            None => out.push('\\'),
        }
    }
    out
}

/// RDATA seeds from the records of a zone text: wire form and presentation form.
fn rdata_seeds(out: &mut Out, text: &[u8]) {
    let origin: zones::Name = "example.com.".parse().unwrap();
    let opts = zones::ReadOptions {
        allow_include: false,
        ..zones::ReadOptions::new(&origin)
    };
    let mut recs = Vec::new();
    let _ = zones::reader::read_bytes("seed", text, &opts, &mut |r| {
        recs.push((r.rtype, r.rdata.to_vec()))
    });
    for (rtype, rd) in recs {
        let sel = (0x8000 | rtype).to_be_bytes();
        let mut w = sel.to_vec();
        w.push(0);
        w.extend_from_slice(&rd);
        out.put("rdata", &w);
        let mut t = sel.to_vec();
        t.push(1);
        let mut s = String::new();
        zones::rdata::present(rtype, &rd, &mut s);
        t.extend_from_slice(s.as_bytes());
        out.put("rdata", &t);
    }
}

fn query_seeds(out: &mut Out, names: &[String]) {
    let types = [
        1u16, 2, 5, 6, 12, 15, 16, 28, 33, 43, 46, 48, 50, 64, 65, 99, 251, 252, 255, 0,
    ];
    let mut msgs: Vec<Vec<u8>> = Vec::new();
    let variants = {
        let mut v = vec![
            QueryOpts::udp(),
            QueryOpts::edns(1232),
            QueryOpts::edns(4096).with_do(),
        ];
        v.push(QueryOpts {
            cookie: Some(vec![1; 8]),
            ..QueryOpts::edns(1232)
        });
        v.push(QueryOpts {
            cookie: Some(vec![2; 24]),
            ..QueryOpts::edns(512)
        });
        v.push(QueryOpts {
            cookie: Some(vec![3; 7]),
            ..QueryOpts::edns(512)
        });
        v.push(QueryOpts {
            edns_version: 1,
            ..QueryOpts::edns(1232)
        });
        v.push(QueryOpts {
            options: vec![(8, vec![0, 1, 24, 0, 192, 0, 2]), (3, vec![])],
            ..QueryOpts::edns(1400)
        });
        v.push(QueryOpts {
            opcode: 4,
            ..QueryOpts::udp()
        });
        v.push(QueryOpts {
            opcode: 5,
            ..QueryOpts::edns(1232)
        });
        v.push(QueryOpts {
            opcode: 2,
            ..QueryOpts::udp()
        });
        v.push(QueryOpts {
            qclass: 3,
            ..QueryOpts::udp()
        });
        v.push(QueryOpts {
            qclass: 255,
            rd: true,
            flags: 0x0030,
            ..QueryOpts::edns(1232)
        });
        v
    };
    for (i, n) in names.iter().enumerate() {
        for (j, &t) in types.iter().enumerate() {
            // Every name with a few types and every variant with a few names.
            if (i + j) % 5 != 0 && i > 8 {
                continue;
            }
            for (k, o) in variants.iter().enumerate() {
                if (i + j + k) % 4 != 0 && i > 3 {
                    continue;
                }
                let mut m = build_query(0x1000 + i as u16, &mixed_case(n, i + k), t, o);
                if o.opcode == 4 {
                    m[2] |= 0x04; // AA, as a primary's NOTIFY carries
                }
                msgs.push(m);
            }
        }
    }
    // Shapes the malformed-input and transfer tests send.
    let base = build_query(7, "www.example.com.", 1, &QueryOpts::udp());
    let soa = {
        let mut r = name_to_wire("example.com.");
        r.extend_from_slice(&[0, 6, 0, 1, 0, 0, 0, 60]);
        let rd = [
            name_to_wire("ns1.example.com."),
            name_to_wire("h.example.com."),
            vec![0; 20],
        ]
        .concat();
        r.extend_from_slice(&(rd.len() as u16).to_be_bytes());
        r.extend_from_slice(&rd);
        r
    };
    let mut ixfr = build_query(8, "example.com.", 251, &QueryOpts::udp());
    ixfr[9] = 1;
    ixfr.extend_from_slice(&soa);
    msgs.push(ixfr);
    let mut notify = build_query(
        9,
        "example.net.",
        6,
        &QueryOpts {
            opcode: 4,
            ..QueryOpts::udp()
        },
    );
    notify[7] = 1;
    notify.extend_from_slice(&soa);
    msgs.push(notify);
    let mut tsig = build_query(10, "example.net.", 252, &QueryOpts::udp());
    tsig[11] = 1;
    tsig.extend_from_slice(&name_to_wire("key."));
    tsig.extend_from_slice(&[0, 250, 0, 255, 0, 0, 0, 0]);
    let rd = [
        name_to_wire("hmac-sha256."),
        vec![0, 0, 0x69, 0x00, 0x00, 0x00, 1, 0x2c, 0, 32],
        vec![0xaa; 32],
        vec![0, 10, 0, 0, 0, 0],
    ]
    .concat();
    tsig.extend_from_slice(&(rd.len() as u16).to_be_bytes());
    tsig.extend_from_slice(&rd);
    msgs.push(tsig);
    msgs.push(vec![
        0, 1, 1, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0xC0, 0x0C, 0, 1, 0, 1,
    ]);
    let mut two_opt = build_query(11, "a.example.com.", 1, &QueryOpts::edns(1232));
    two_opt[11] = 2;
    two_opt.extend_from_slice(&[0, 0, 41, 4, 0, 0, 0, 0, 0, 0, 0]);
    msgs.push(two_opt);
    let mut answer = base.clone();
    answer[7] = 1;
    answer.extend_from_slice(&[0xC0, 12, 0, 1, 0, 1, 0, 0, 0, 60, 0, 4, 192, 0, 2, 1]);
    msgs.push(answer);
    msgs.push(base[..base.len() - 3].to_vec());
    let mut resp = base.clone();
    resp[2] |= 0x80;
    msgs.push(resp);
    msgs.push(base[..11].to_vec());
    for m in &msgs {
        out.put("wire_query", m);
        out.put("query_differential", m);
        for sel in [0u8, 1, 2, 3, 7, 14] {
            let mut s = vec![sel];
            s.extend_from_slice(m);
            out.put("process_query", &s);
        }
    }
}

fn mixed_case(name: &str, salt: usize) -> String {
    name.chars()
        .enumerate()
        .map(|(i, c)| {
            if (i + salt) % 3 == 0 {
                c.to_ascii_uppercase()
            } else {
                c
            }
        })
        .collect()
}

fn main() {
    let fuzz = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let repo = fuzz.parent().unwrap().to_path_buf();
    let corpora = std::env::var_os("PALISADE_CORPORA")
        .map(PathBuf::from)
        .unwrap_or_else(|| fuzz.join("../../shared/corpora"));
    let mut out = Out {
        root: fuzz.join("corpus"),
        seen: HashSet::new(),
        counts: Default::default(),
    };

    // Zone texts: the tests' zones, the examples, and every zone-like file of the corpora.
    let mut zone_files = Vec::new();
    files(&repo.join("tests/data"), &mut zone_files);
    files(&repo.join("examples/zones"), &mut zone_files);
    if corpora.is_dir() {
        files(&corpora, &mut zone_files);
    } else {
        eprintln!(
            "corpora not found at {}: set PALISADE_CORPORA",
            corpora.display()
        );
    }
    let mut names: Vec<String> = Vec::new();
    for p in &zone_files {
        if !is_zone_text(p) {
            continue;
        }
        let Ok(text) = std::fs::read(p) else { continue };
        out.put("zone_read", &text);
        out.put("zone_load", &text);
        rdata_seeds(&mut out, &text);
        if p.starts_with(repo.join("tests/data")) {
            // Owner names to query for.
            let s = String::from_utf8_lossy(&text).into_owned();
            let origin = s
                .lines()
                .find_map(|l| l.strip_prefix("$ORIGIN "))
                .unwrap_or("example.com.")
                .trim()
                .to_string();
            for l in s.lines() {
                let Some(owner) = l.split_whitespace().next() else {
                    continue;
                };
                if l.starts_with([' ', '\t', ';', '$']) || owner.starts_with('(') {
                    continue;
                }
                let n = if owner == "@" {
                    origin.clone()
                } else if owner.ends_with('.') {
                    owner.to_string()
                } else {
                    format!("{owner}.{origin}")
                };
                if !names.contains(&n) {
                    names.push(n);
                }
            }
        }
    }
    names.extend(
        [
            "nothere.example.com.",
            "x.y.wild.example.com.",
            "example.org.",
            ".",
            "strict.test.",
            "www.strict.test.",
        ]
        .map(String::from),
    );

    // RDATA vectors: BIND's per-type texts and simdzone's records.
    let tsv = |rel: &str| std::fs::read_to_string(corpora.join(rel)).unwrap_or_default();
    for line in tsv("bind9-rdata-vectors/rdata_text_vectors.tsv").lines() {
        let cols: Vec<&str> = line.split('\t').collect();
        if line.starts_with('#') || cols.len() < 4 {
            continue;
        }
        let Some(rtype) = zones::rrtype::from_text(cols[0].as_bytes()) else {
            continue;
        };
        let mut t = (0x8000 | rtype).to_be_bytes().to_vec();
        t.push(1);
        t.extend_from_slice(tsv_unescape(cols[3]).as_bytes());
        out.put("rdata", &t);
    }
    for f in ["simdzone/types_vectors.tsv", "simdzone/svcb_vectors.tsv"] {
        let mut zone = String::from("$ORIGIN example.com.\n$TTL 3600\n");
        for line in tsv(f).lines() {
            let cols: Vec<&str> = line.split('\t').collect();
            if line.starts_with('#') || cols.len() < 2 {
                continue;
            }
            let rec = tsv_unescape(if cols.len() >= 4 { cols[3] } else { cols[1] });
            rdata_seeds(
                &mut out,
                format!("$ORIGIN example.com.\n{rec}\n").as_bytes(),
            );
            zone.push_str(&rec);
            zone.push('\n');
        }
        out.put("zone_read", zone.as_bytes());
    }

    query_seeds(&mut out, &names);

    // Configs and rules: the repository's own, and the shapes the tests write.
    for p in [repo.join("examples/palisade.toml")] {
        if let Ok(t) = std::fs::read(&p) {
            out.put("dnsd_config", &t);
        }
    }
    for t in [
        "[server]\nlisten = [\"127.1.0.0/22\", \"127.0.0.1\", \"::1\"]\nport = 5353\nworkers = 2\ntcp_max_connections = 100\ntcp_max_per_source = 2\ntcp_idle_timeout_ms = 1000\n\n[[zone]]\norigin = \"example.com.\"\nfile = \"zones/example.com.zone\"\ncookies = \"require\"\n\n[control]\nsocket = \"/run/palisade/dnsd.sock\"\n\n[metrics]\nlisten = \"127.0.0.1:9153\"\n",
        "[defence.rrl]\nenabled = true\nresponses_per_second = 5.0\nslip = 2\nwindow = 15\nipv4_prefix = 24\nipv6_prefix = 56\nexempt = [\"10.0.0.0/8\"]\ntable_size = 65536\n\n[defence.cookies]\nenabled = true\nsecret = \"00112233445566778899aabbccddeeff\"\nrotate_hours = 24\npolicy = \"on\"\n\n[defence.random_subdomain]\nenabled = true\nzone_nxdomains_per_second = 100.0\nsource_nxdomain_limit = 20\n\n[block]\ncapacity = 1000\n\n[events]\nstdout = true\ninterval = 5\ntop_k = 64\n",
        "[[tsig_key]]\nname = \"key.\"\nalgorithm = \"hmac-sha256\"\nsecret = \"c2VjcmV0\"\n\n[[zone]]\norigin = \"example.net.\"\nfile = \"x\"\nprimaries = [\"127.0.0.1:5300\"]\nnotify = [\"127.0.0.2@53\"]\nallow_transfer = [\"127.0.0.0/8\"]\ntsig = \"key.\"\n\n[transfer]\nmax_out = 4\njournal_max_bytes = 1000\n",
        "[xdp]\ninterface = \"lo\"\n",
    ] {
        out.put("dnsd_config", t.as_bytes());
    }
    for p in [repo.join("bench/configs/http_front/front.toml")] {
        if let Ok(t) = std::fs::read(&p) {
            out.put("front_config", &t);
        }
    }
    out.put(
        "front_config",
        b"[server]\nlisten = [\"127.0.0.1:8080\"]\nworkers = 2\nheader_read_timeout_ms = 1000\n\n[limits]\nmax_header_bytes = 4096\nmax_uri_bytes = 256\nmax_body_bytes = 1000\n\n[[upstream]]\nname = \"app\"\nservers = [\"127.0.0.1:9000\"]\n\n[[site]]\nhosts = [\"a.test\", \"*.b.test\", \"*\"]\nupstream = \"app\"\ntenant = 1\nretry_after_secs = 7\n",
    );
    let mut rules = Vec::new();
    files(&repo.join("shield/data"), &mut rules);
    files(&repo.join("bench/configs/http_front"), &mut rules);
    for p in rules {
        let Ok(t) = std::fs::read(&p) else { continue };
        let sel: &[u8] = match p.extension().and_then(|e| e.to_str()) {
            Some("toml") => &[3],
            Some("csv") => &[1],
            Some("json") => &[2],
            _ => &[0],
        };
        out.put("shield_rules", &[sel, &t].concat());
    }
    out.put(
        "shield_rules",
        b"\x00192.0.2.0/24\n# comment\n2001:db8::/32\n10.1.2.3\n",
    );
    let http_fixture = include_str!("../../fuzz_targets/http_request.rs");
    if let Some(r) = http_fixture
        .split("const RULES: &str = r#\"")
        .nth(1)
        .and_then(|s| s.split("\"#;").next())
    {
        out.put("shield_rules", &[b"\x03", r.as_bytes()].concat());
    }

    // HTTP request heads.
    for (i, head) in [
        "GET / HTTP/1.1\r\nHost: a.test\r\n\r\n",
        "POST /wp-login.php HTTP/1.1\r\nHost: WWW.A.TEST:8080\r\nUser-Agent: sqlmap/1.7\r\nContent-Length: 3\r\n\r\n",
        "GET /x.php?id=1 HTTP/1.0\r\nHost: deep.b.test.\r\nUser-Agent: curl/8.5.0\r\nX-Attack: 1\r\nAccept: */*\r\n\r\n",
        "GET http://other.example:81/healthz HTTP/1.1\r\nHost: a.test\r\n\r\n",
        "DELETE /admin HTTP/1.1\r\nHost: [::1]:443\r\n\r\n",
        "OPTIONS * HTTP/1.1\r\nHost: a.test\r\n\r\n",
        "CONNECT a.test:443 HTTP/1.1\r\nHost: a.test:443\r\n\r\n",
        "GET /%2e%2e/ HTTP/1.1\r\nhost: x.b.test\r\nuser-agent: masscan/1.3\r\n\r\n",
    ]
    .iter()
    .enumerate()
    {
        for sel in [0u8, 1, 2, 3] {
            out.put("http_request", &[&[sel.wrapping_add(i as u8 * 4)][..], head.as_bytes()].concat());
        }
    }

    for (t, n) in &out.counts {
        println!("{t}\t{n} seeds");
    }
}
