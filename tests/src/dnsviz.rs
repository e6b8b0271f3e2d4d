//! DNSViz as a second validator: probe a server on loopback for some names of one zone,
//! assess the answers against a trust anchor, and list every error DNSViz finds (a missing
//! closest-encloser proof, a bogus signature, a wrong NSEC3 cover...).

use std::net::SocketAddr;
use std::path::Path;
use std::process::Command;

/// Probes and assesses in one run of DNSViz's own interpreter. Debian's dnsviz 0.9.4 asks
/// pygraphviz for a `release` module that pygraphviz 1.7 no longer has, so the assessment
/// (`grok`) runs in-process with that module supplied.
const SCRIPT: &str = r#"
import json, subprocess, sys, types
zone, servers, anchor, work = sys.argv[1:5]
names = sys.argv[5:]
probe = subprocess.run(
    ["dnsviz", "probe", "-4", "-A", "-x", zone + "+:" + servers, "-o", work + "/probe.json"]
    + names,
    capture_output=True, text=True, timeout=300)
if probe.returncode != 0:
    print("FAILED dnsviz probe: " + probe.stderr[-3000:])
    sys.exit(0)
import pygraphviz
if not hasattr(pygraphviz, "release"):
    m = types.ModuleType("pygraphviz.release")
    m.version = pygraphviz.__version__
    sys.modules["pygraphviz.release"] = m
    pygraphviz.release = m
from dnsviz.commands import grok
grok.main(["grok", "-t", anchor, "-r", work + "/probe.json", "-o", work + "/grok.json"])
with open(work + "/grok.json") as f:
    out = json.load(f)
def walk(o, path):
    if isinstance(o, dict):
        for k, v in o.items():
            if k in ("errors", "warnings") and isinstance(v, list):
                for e in v:
                    print("%s %s: %s: %s" % ("ERROR" if k == "errors" else "WARNING", path,
                                             e.get("code"), e.get("description")))
            elif k == "status" and v in ("BOGUS", "INVALID"):
                print("ERROR %s: status %s" % (path, v))
            else:
                walk(v, path + "/" + k if "." in k or "/" in k else path)
    elif isinstance(o, list):
        for v in o:
            walk(v, path)
walk(out, "")
print("DONE")
"#;

/// True when `dnsviz` is installed.
pub fn available() -> bool {
    crate::have_program("dnsviz")
}

/// What DNSViz said about the answers: its errors, and its warnings apart.
#[derive(Debug, Default)]
pub struct Verdict {
    /// Lines `ERROR <where>: <code>: <description>`.
    pub errors: Vec<String>,
    /// Lines `WARNING <where>: <code>: <description>`.
    pub warnings: Vec<String>,
}

/// Probes the authoritative `servers` of `zone` (each zone NS name with the address and port
/// it is reached at) for `names` and assesses the answers against `dnskey` (a zone-file
/// DNSKEY line); `work` holds the probe and the assessment. Panics when DNSViz fails.
///
/// DNSViz queries every address the zone gives its NS names, on port 53 unless mapped
/// here: the zone's NS addresses must be the test server's own, so that no query leaves
/// loopback and none waits on a silent address.
pub fn check(
    zone: &str,
    servers: &[(&str, SocketAddr)],
    names: &[&str],
    dnskey: &str,
    work: &Path,
) -> Verdict {
    let anchor = work.join("dnsviz-anchor.txt");
    std::fs::write(&anchor, format!("{}\n", dnskey.trim())).expect("write the trust anchor");
    // The interpreter dnsviz runs with (its `#!` line), so its modules are importable.
    let python = std::fs::read_to_string(crate::find_program("dnsviz").expect("dnsviz"))
        .ok()
        .and_then(|s| {
            s.lines()
                .next()
                .and_then(|l| l.strip_prefix("#!"))
                .map(|l| l.split_whitespace().next().unwrap_or("python3").to_string())
        })
        .unwrap_or_else(|| "python3".into());
    let out = Command::new(python)
        .arg("-c")
        .arg(SCRIPT)
        .arg(zone)
        .arg(
            servers
                .iter()
                .map(|(n, a)| format!("{n}={}:{}", a.ip(), a.port()))
                .collect::<Vec<_>>()
                .join(","),
        )
        .arg(&anchor)
        .arg(work)
        .args(names)
        .output()
        .expect("run dnsviz");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && text.contains("DONE") && !text.contains("FAILED"),
        "dnsviz did not run to the end:\n{text}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let mut v = Verdict::default();
    for l in text.lines() {
        if l.starts_with("ERROR ") {
            v.errors.push(l.to_string());
        } else if l.starts_with("WARNING ") {
            v.warnings.push(l.to_string());
        }
    }
    v
}
