//! Compiles the XDP program (`bpf/guard.c`) with clang into `OUT_DIR/guard.o`, and checks that
//! the Rust mirror of `bpf/guard.h` (src/maps.rs) has the same layout: a host-compiled probe of
//! the header prints sizes, offsets and constants as Rust `const` assertions
//! (`OUT_DIR/layout_check.rs`), which src/maps.rs includes. A mismatch fails the build.

use std::env;
use std::path::{Path, PathBuf};
use std::process::Command;

/// (C field, Rust field).
type Fields = &'static [(&'static str, &'static str)];

/// (C struct, Rust type, fields) checked for size and offsets.
const STRUCTS: &[(&str, &str, Fields)] = &[
    ("guard_v4_key", "V4Key", &[("addr", "addr")]),
    ("guard_v6_key", "V6Key", &[("addr", "addr")]),
    (
        "guard_lpm_v4_key",
        "LpmV4Key",
        &[("prefixlen", "prefixlen"), ("addr", "addr")],
    ),
    (
        "guard_lpm_v6_key",
        "LpmV6Key",
        &[("prefixlen", "prefixlen"), ("addr", "addr")],
    ),
    (
        "guard_block",
        "BlockValue",
        &[
            ("expires_ns", "expires_ns"),
            ("dns_only", "dns_only"),
            ("prefixlen", "prefixlen"),
        ],
    ),
    (
        "guard_svc",
        "SvcValue",
        &[("port", "port"), ("reserved", "reserved")],
    ),
    (
        "guard_bucket",
        "Bucket",
        &[("tokens", "tokens"), ("last_ns", "last_ns")],
    ),
    (
        "guard_config",
        "GuardConfig",
        &[
            ("rate_pps", "rate_pps"),
            ("cap_units", "cap_units"),
            ("fill_ns", "fill_ns"),
            ("flags", "flags"),
            ("suspects", "suspects"),
            ("dns_ports", "dns_ports"),
        ],
    ),
    ("guard_counters", "RawCounters", &[("count", "count")]),
    (
        "guard_ans_addr_key",
        "AnsAddrKey",
        &[("addr", "addr"), ("port", "port"), ("pad", "pad")],
    ),
    (
        "guard_ans_addr",
        "AnsAddr",
        &[
            ("gen", "gen_"),
            ("on", "on"),
            ("udp_payload", "udp_payload"),
            ("rate", "rate"),
            ("v4_prefix", "v4_prefix"),
            ("v6_prefix", "v6_prefix"),
            ("cookie_keys", "cookie_keys"),
            ("reply_to_sender", "reply_to_sender"),
            ("slip", "slip"),
            ("expires_ns", "expires_ns"),
            ("secret", "secret"),
            ("previous", "previous"),
            ("unix_off_ns", "unix_off_ns"),
        ],
    ),
    (
        "guard_ans_key",
        "AnsKey",
        &[
            ("addr", "addr"),
            ("port", "port"),
            ("gen", "gen_"),
            ("variant", "variant"),
            ("qtype", "qtype"),
            ("qname_len", "qname_len"),
            ("name_hash", "name_hash"),
        ],
    ),
    (
        "guard_answer",
        "Answer",
        &[
            ("flags", "flags"),
            ("an", "an"),
            ("ns", "ns"),
            ("ar", "ar"),
            ("len", "len"),
            ("csum", "csum"),
            ("cookie", "cookie"),
            ("reserved", "reserved"),
            ("qname", "qname"),
            ("data", "data"),
        ],
    ),
];

/// (C macro, Rust constant) checked for equal integer values.
const INTS: &[(&str, &str)] = &[
    ("GUARD_TOKEN_UNIT", "TOKEN_UNIT"),
    ("GUARD_SLOT_DNSD", "SLOT_DNSD"),
    ("GUARD_SLOT_HTTP_FRONT", "SLOT_HTTP_FRONT"),
    ("GUARD_SLOT_RULES", "SLOT_RULES"),
    ("GUARD_SLOT_OPERATOR", "SLOT_OPERATOR"),
    ("GUARD_SLOTS", "SLOTS"),
    ("GUARD_SLOT_EMPTY", "SLOT_EMPTY"),
    ("GUARD_NEVER", "NEVER"),
    ("GUARD_F_RATELIMIT", "F_RATELIMIT"),
    ("GUARD_MAX_EXT_HEADERS", "MAX_EXT_HEADERS"),
    ("GUARD_C_PASS", "C_PASS"),
    ("GUARD_C_PASS_NOT_IP", "C_PASS_NOT_IP"),
    ("GUARD_C_PASS_NOT_UNDERSTOOD", "C_PASS_NOT_UNDERSTOOD"),
    ("GUARD_C_DROP_BLOCKED_ADDR", "C_DROP_BLOCKED_ADDR"),
    ("GUARD_C_DROP_BLOCKED_PREFIX", "C_DROP_BLOCKED_PREFIX"),
    ("GUARD_C_DROP_RATELIMIT", "C_DROP_RATELIMIT"),
    ("GUARD_VERDICTS", "VERDICTS"),
    ("GUARD_C_BLOCK_EXPIRED", "C_BLOCK_EXPIRED"),
    ("GUARD_C_RATE_NEW_SOURCE", "C_RATE_NEW_SOURCE"),
    ("GUARD_C_RATE_EXEMPT", "C_RATE_EXEMPT"),
    ("GUARD_C_DROP_SLOT", "C_DROP_SLOT"),
    ("GUARD_DEFAULT_ALLOW_ENTRIES", "DEFAULT_ALLOW_ENTRIES"),
    ("GUARD_COUNTERS", "COUNTERS"),
    ("GUARD_DEFAULT_BLOCK_V4_ENTRIES", "DEFAULT_BLOCK_V4_ENTRIES"),
    ("GUARD_DEFAULT_BLOCK_V6_ENTRIES", "DEFAULT_BLOCK_V6_ENTRIES"),
    (
        "GUARD_DEFAULT_PREFIX_V4_ENTRIES",
        "DEFAULT_PREFIX_V4_ENTRIES",
    ),
    (
        "GUARD_DEFAULT_PREFIX_V6_ENTRIES",
        "DEFAULT_PREFIX_V6_ENTRIES",
    ),
    ("GUARD_DEFAULT_RATE_ENTRIES", "DEFAULT_RATE_ENTRIES"),
    ("GUARD_DEFAULT_ANSWER_ENTRIES", "DEFAULT_ANSWER_ENTRIES"),
    ("GUARD_DEFAULT_ANS_ADDR_ENTRIES", "DEFAULT_ANS_ADDR_ENTRIES"),
    ("GUARD_QNAME_MAX", "QNAME_MAX"),
    ("GUARD_ANSWER_MAX", "ANSWER_MAX"),
    ("GUARD_HEAD_MAX", "HEAD_MAX"),
    ("GUARD_ANS_SCRATCH_SIZE", "ANS_SCRATCH_SIZE"),
    ("GUARD_V_NO_EDNS", "V_NO_EDNS"),
    ("GUARD_V_EDNS", "V_EDNS"),
    ("GUARD_V_EDNS_DO", "V_EDNS_DO"),
    ("GUARD_C_ANSWERED", "C_ANSWERED"),
    ("GUARD_C_ANS_PASS_NO_ADDR", "C_ANS_PASS_NO_ADDR"),
    ("GUARD_C_ANS_PASS_QUERY", "C_ANS_PASS_QUERY"),
    ("GUARD_C_ANS_PASS_MISS", "C_ANS_PASS_MISS"),
    ("GUARD_C_ANS_PASS_SIZE", "C_ANS_PASS_SIZE"),
    ("GUARD_C_ANS_PASS_ROOM", "C_ANS_PASS_ROOM"),
    ("GUARD_C_ANS_RRL_DROP", "C_ANS_RRL_DROP"),
    ("GUARD_C_ANS_SLIP", "C_ANS_SLIP"),
    ("GUARD_C_ANS_COOKIE_VALID", "C_ANS_COOKIE_VALID"),
    ("GUARD_C_ANS_COOKIE_INVALID", "C_ANS_COOKIE_INVALID"),
    ("GUARD_C_ANS_PASS_COOKIE", "C_ANS_PASS_COOKIE"),
    ("GUARD_C_RATE_COOKIE", "C_RATE_COOKIE"),
    ("GUARD_C_ANS_PASS_FRAME", "C_ANS_PASS_FRAME"),
    ("GUARD_C_ANS_PASS_SUSPECT", "C_ANS_PASS_SUSPECT"),
    ("GUARD_C_ANS_PASS_ROUTE", "C_ANS_PASS_ROUTE"),
    ("GUARD_COOKIE_PASS", "COOKIE_PASS"),
    ("GUARD_COOKIE_IGNORE", "COOKIE_IGNORE"),
    ("GUARD_COOKIE_ANSWER", "COOKIE_ANSWER"),
    ("GUARD_KEYS_NONE", "KEYS_NONE"),
    ("GUARD_KEYS_CURRENT", "KEYS_CURRENT"),
    ("GUARD_KEYS_BOTH", "KEYS_BOTH"),
    ("GUARD_DEFAULT_ANS_RATE_ENTRIES", "DEFAULT_ANS_RATE_ENTRIES"),
    ("GUARD_DEFAULT_SVC_ENTRIES", "DEFAULT_SVC_ENTRIES"),
    ("GUARD_DEFAULT_PROXY_ENTRIES", "DEFAULT_PROXY_ENTRIES"),
    ("GUARD_DEFAULT_NEVER_ENTRIES", "DEFAULT_NEVER_ENTRIES"),
    ("GUARD_C_NEVER_BLOCK", "C_NEVER_BLOCK"),
];

/// (C macro, Rust constant) checked for equal strings (map names).
const STRS: &[(&str, &str)] = &[
    ("GUARD_MAP_BLOCK_V4", "MAP_BLOCK_V4"),
    ("GUARD_MAP_BLOCK_V6", "MAP_BLOCK_V6"),
    ("GUARD_MAP_PREFIX_V4", "MAP_PREFIX_V4"),
    ("GUARD_MAP_PREFIX_V6", "MAP_PREFIX_V6"),
    ("GUARD_MAP_RATE", "MAP_RATE"),
    ("GUARD_MAP_CONFIG", "MAP_CONFIG"),
    ("GUARD_MAP_COUNTERS", "MAP_COUNTERS"),
    ("GUARD_MAP_ALLOW_V4", "MAP_ALLOW_V4"),
    ("GUARD_MAP_ALLOW_V6", "MAP_ALLOW_V6"),
    ("GUARD_MAP_ANSWERS", "MAP_ANSWERS"),
    ("GUARD_MAP_ANS_ADDR", "MAP_ANS_ADDR"),
    ("GUARD_MAP_ANS_SCRATCH", "MAP_ANS_SCRATCH"),
    ("GUARD_MAP_ANS_RATE", "MAP_ANS_RATE"),
    ("GUARD_MAP_SVC", "MAP_SVC"),
    ("GUARD_MAP_NEVER", "MAP_NEVER"),
    ("GUARD_MAP_PROXY", "MAP_PROXY"),
];

fn main() {
    let manifest = PathBuf::from(env::var_os("CARGO_MANIFEST_DIR").expect("CARGO_MANIFEST_DIR"));
    let out = PathBuf::from(env::var_os("OUT_DIR").expect("OUT_DIR"));
    let bpf_dir = manifest.join("bpf");
    println!("cargo:rerun-if-changed=bpf/guard.c");
    println!("cargo:rerun-if-changed=bpf/guard.h");
    println!("cargo:rerun-if-changed=bpf/answer.h");
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-env-changed=CLANG");

    let clang = env::var("CLANG").unwrap_or_else(|_| "clang".to_owned());
    check_tools(&clang);

    let arch = env::var("CARGO_CFG_TARGET_ARCH").unwrap_or_else(|_| "x86_64".to_owned());
    let multiarch = format!("/usr/include/{arch}-linux-gnu");
    let object = out.join("guard.o");
    run(
        Command::new(&clang)
            .args(["-target", "bpf", "-O2", "-g", "-Wall", "-Werror"])
            .arg(format!("-I{multiarch}"))
            .arg("-I")
            .arg(&bpf_dir)
            .arg("-c")
            .arg(bpf_dir.join("guard.c"))
            .arg("-o")
            .arg(&object),
        "compiling bpf/guard.c for the BPF target",
    );

    println!("cargo:rerun-if-changed=bpf/sklookup.c");
    run(
        Command::new(&clang)
            .args(["-target", "bpf", "-O2", "-g", "-Wall", "-Werror"])
            .arg(format!("-I{multiarch}"))
            .arg("-c")
            .arg(bpf_dir.join("sklookup.c"))
            .arg("-o")
            .arg(out.join("sklookup.o")),
        "compiling bpf/sklookup.c for the BPF target",
    );

    let probe_src = out.join("layout_probe.c");
    std::fs::write(&probe_src, probe_source()).expect("write layout probe");
    let probe_bin = out.join("layout_probe");
    run(
        Command::new(&clang)
            .arg("-I")
            .arg(&bpf_dir)
            .arg(&probe_src)
            .arg("-o")
            .arg(&probe_bin),
        "compiling the host layout probe of bpf/guard.h",
    );
    let output = Command::new(&probe_bin)
        .output()
        .expect("run the layout probe");
    assert!(output.status.success(), "layout probe failed");
    std::fs::write(out.join("layout_check.rs"), output.stdout).expect("write layout_check.rs");
}

/// Fails with a message that says what to install when clang or libbpf-dev is missing.
fn check_tools(clang: &str) {
    match Command::new(clang).arg("--version").output() {
        Ok(o) if o.status.success() => {}
        _ => panic!(
            "\n\nxdp-guard: `{clang}` not found or not working.\n\
             The XDP program (bpf/guard.c) is compiled with clang for the BPF target.\n\
             Install it with `apt-get install clang libbpf-dev` (or set CLANG=/path/to/clang).\n\n"
        ),
    }
    if !Path::new("/usr/include/bpf/bpf_helpers.h").exists() {
        println!(
            "cargo:warning=/usr/include/bpf/bpf_helpers.h is missing: apt-get install libbpf-dev"
        );
    }
}

fn run(cmd: &mut Command, what: &str) {
    let output = cmd
        .output()
        .unwrap_or_else(|e| panic!("xdp-guard: {what}: cannot run {cmd:?}: {e}"));
    if !output.status.success() {
        panic!(
            "xdp-guard: {what} failed ({}):\n{}{}",
            output.status,
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        );
    }
}

/// A C program that prints Rust const assertions comparing the header with src/maps.rs.
fn probe_source() -> String {
    let mut c = String::from(
        "#include <stddef.h>\n#include <stdio.h>\n#include \"guard.h\"\nint main(void) {\n",
    );
    c.push_str(
        "  printf(\"// Generated by build.rs from bpf/guard.h: the Rust mirror must match.\\n\");\n",
    );
    for (cs, rs, fields) in STRUCTS {
        c.push_str(&format!(
            "  printf(\"const _: () = assert!(core::mem::size_of::<{rs}>() == %zu, \\\"size of {rs} != struct {cs}\\\");\\n\", sizeof(struct {cs}));\n"
        ));
        c.push_str(&format!(
            "  printf(\"const _: () = assert!(core::mem::align_of::<{rs}>() == %zu, \\\"align of {rs} != struct {cs}\\\");\\n\", _Alignof(struct {cs}));\n"
        ));
        for (cf, rf) in *fields {
            c.push_str(&format!(
                "  printf(\"const _: () = assert!(core::mem::offset_of!({rs}, {rf}) == %zu, \\\"offset of {rs}.{rf} != {cs}.{cf}\\\");\\n\", offsetof(struct {cs}, {cf}));\n"
            ));
            c.push_str(&format!(
                "  printf(\"const _: () = assert!(field_size!({rs}, {rf}) == %zu, \\\"size of {rs}.{rf} != {cs}.{cf}\\\");\\n\", sizeof(((struct {cs} *)0)->{cf}));\n"
            ));
        }
    }
    for (cm, rc) in INTS {
        c.push_str(&format!(
            "  printf(\"const _: () = assert!({rc} as u64 == %llu_u64, \\\"{rc} != {cm}\\\");\\n\", (unsigned long long)({cm}));\n"
        ));
    }
    for (cm, rc) in STRS {
        c.push_str(&format!(
            "  printf(\"const _: () = assert!(str_eq({rc}, \\\"%s\\\"), \\\"{rc} != {cm}\\\");\\n\", {cm});\n"
        ));
    }
    c.push_str("  return 0;\n}\n");
    c
}
