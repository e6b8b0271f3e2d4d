//! DNSSEC validation of served answers with BIND's `delv`: trust anchors from a served zone's
//! key-signing keys or from a `dnssec-keygen` key file, and one `delv` query.

use std::net::SocketAddr;
use std::path::Path;
use std::process::Command;

/// `dig @addr ARGS` (split on white space), its standard output.
pub fn dig(addr: SocketAddr, args: &str) -> String {
    let out = Command::new("dig")
        .arg(format!("@{}", addr.ip()))
        .arg("-p")
        .arg(addr.port().to_string())
        .args(args.split_whitespace())
        .output()
        .expect("run dig");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// The key-signing DNSKEYs `addr` serves for `zone`, as (flags, protocol, algorithm, base64).
pub fn served_ksks(addr: SocketAddr, zone: &str) -> Vec<[String; 4]> {
    dig(addr, &format!("+short {zone} DNSKEY"))
        .lines()
        .filter_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            (f.len() >= 4 && f[0] == "257").then(|| {
                [
                    f[0].to_string(),
                    f[1].to_string(),
                    f[2].to_string(),
                    f[3..].join(""),
                ]
            })
        })
        .collect()
}

/// A `trust-anchors` clause for `zone` (no final dot) with these keys.
fn clause(zone: &str, keys: &[[String; 4]]) -> String {
    let mut a = String::from("trust-anchors {\n");
    for k in keys {
        a.push_str(&format!(
            "  {zone}. static-key {} {} {} \"{}\";\n",
            k[0], k[1], k[2], k[3]
        ));
    }
    a.push_str("};\n");
    a
}

/// Writes into `file` a delv trust anchor for the KSKs `addr` serves for `zone` (no final
/// dot); the first KSK as a DNSKEY line (DNSViz's). Panics when none is served.
pub fn anchor_from_served(addr: SocketAddr, zone: &str, file: &Path) -> String {
    let keys = served_ksks(addr, zone);
    assert!(
        !keys.is_empty(),
        "no KSK served: {}",
        dig(addr, &format!("{zone} DNSKEY"))
    );
    std::fs::write(file, clause(zone, &keys)).unwrap();
    format!(
        "{zone}. IN DNSKEY {} {} {} {}",
        keys[0][0], keys[0][1], keys[0][2], keys[0][3]
    )
}

/// A delv trust anchor for `zone` (no final dot) from the text of a `dnssec-keygen` `.key`
/// file, and that key's DNSKEY line.
pub fn anchor_from_key_file(zone: &str, key: &str) -> (String, String) {
    let line = key
        .lines()
        .find(|l| l.contains("DNSKEY"))
        .expect("a DNSKEY line");
    let f: Vec<&str> = line.split_whitespace().collect();
    let i = f.iter().position(|x| *x == "DNSKEY").expect("DNSKEY");
    let k = [
        f[i + 1].to_string(),
        f[i + 2].to_string(),
        f[i + 3].to_string(),
        f[i + 4..].join(""),
    ];
    (clause(zone, &[k]), line.to_string())
}

/// `delv @addr [-b src] -a anchor +root=ZONE name qtype`: its output (standard output, then
/// standard error).
pub fn delv(
    addr: SocketAddr,
    src: Option<&str>,
    anchor: &Path,
    zone: &str,
    name: &str,
    qtype: &str,
) -> String {
    let mut cmd = Command::new("delv");
    cmd.arg(format!("@{}", addr.ip()))
        .arg("-p")
        .arg(addr.port().to_string());
    if let Some(s) = src {
        cmd.args(["-b", s]);
    }
    let out = cmd
        .arg("-a")
        .arg(anchor)
        .arg(format!("+root={zone}"))
        .args([name, qtype])
        .output()
        .expect("run delv");
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}
