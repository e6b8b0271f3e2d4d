//! The Debian package `palisade`, built by `cargo deb` (from this build's binaries): its
//! control fields, its files (the three binaries, the units, the configs as conffiles), its
//! maintainer scripts' syntax, and the configs it installs loading as they are — checked by
//! the installed binaries' own check commands — without installing it on this machine.

use std::path::Path;
use std::process::Command;

fn run(cmd: &mut Command) -> String {
    let out = cmd.output().unwrap_or_else(|e| panic!("{cmd:?}: {e}"));
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "{cmd:?} failed:\n{text}");
    text
}

#[test]
fn the_package_holds_the_daemons_units_and_configs_that_load() {
    let root = palisade_tests::repo_root();
    let have = Command::new("cargo")
        .args(["deb", "--version"])
        .output()
        .is_ok_and(|o| o.status.success());
    if !have {
        palisade_tests::skipped("cargo-deb is not installed (scripts/install-deps installs it)");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    // The binaries of this build (debug), unstripped: the package's shape is what is tested.
    let profile = palisade_tests::bin_dir();
    let profile = profile.file_name().unwrap().to_str().unwrap();
    let profile = if profile == "debug" { "dev" } else { profile };
    let out = run(Command::new("cargo")
        .current_dir(&root)
        .args([
            "deb",
            "-p",
            "dnsd",
            "--no-build",
            "--no-strip",
            "--profile",
            profile,
        ])
        .arg("-o")
        .arg(dir.path()));
    let deb = out
        .lines()
        .map(str::trim)
        .find(|l| l.ends_with(".deb"))
        .unwrap_or_else(|| panic!("no .deb in:\n{out}"))
        .to_string();

    let info = run(Command::new("dpkg-deb").arg("-I").arg(&deb));
    assert!(info.contains("Package: palisade"), "{info}");
    assert!(info.contains("Depends: adduser"), "{info}");
    for script in ["postinst", "prerm", "postrm"] {
        assert!(info.contains(script), "{script} missing:\n{info}");
    }
    let files = run(Command::new("dpkg-deb").arg("-c").arg(&deb));
    for f in [
        "./usr/sbin/dnsd",
        "./usr/sbin/http-front",
        "./usr/sbin/xdp-guard",
        "./lib/systemd/system/palisade-dnsd.service",
        "./lib/systemd/system/palisade-http-front.service",
        "./lib/systemd/system/palisade-xdp-guard.service",
        "./etc/palisade/palisade.toml",
        "./etc/palisade/front.toml",
        "./etc/palisade/guard.toml",
        "./etc/palisade/zones/example.com.zone",
    ] {
        assert!(
            files.lines().any(|l| l.ends_with(f)),
            "{f} missing:\n{files}"
        );
    }
    let ctl = dir.path().join("control");
    run(Command::new("dpkg-deb").arg("-e").arg(&deb).arg(&ctl));
    let conffiles = std::fs::read_to_string(ctl.join("conffiles")).unwrap();
    for f in ["palisade.toml", "front.toml", "guard.toml"] {
        assert!(
            conffiles.contains(&format!("/etc/palisade/{f}")),
            "{conffiles}"
        );
    }
    for script in ["postinst", "prerm", "postrm"] {
        run(Command::new("sh").arg("-n").arg(ctl.join(script)));
    }
    let postinst = std::fs::read_to_string(ctl.join("postinst")).unwrap();
    assert!(postinst.contains("adduser --system"), "{postinst}");

    // The files as installed, and the configs loading as they are.
    let x = dir.path().join("root");
    run(Command::new("dpkg-deb").arg("-x").arg(&deb).arg(&x));
    let sbin = |b: &str| x.join("usr/sbin").join(b);
    let etc = |f: &str| x.join("etc/palisade").join(f);
    let ok = run(Command::new(sbin("dnsd"))
        .args(["check-config", "-c"])
        .arg(etc("palisade.toml")));
    assert!(ok.contains("ok (1 zones"), "{ok}");
    run(Command::new(sbin("http-front"))
        .args(["--check", "-c"])
        .arg(etc("front.toml")));
    run(Command::new(sbin("xdp-guard"))
        .args(["check-config", "-c"])
        .arg(etc("guard.toml")));
    for unit in [
        "palisade-dnsd.service",
        "palisade-http-front.service",
        "palisade-xdp-guard.service",
    ] {
        let shipped = std::fs::read(x.join("lib/systemd/system").join(unit)).unwrap();
        let ours = std::fs::read(root.join("packaging/systemd").join(unit)).unwrap();
        assert_eq!(shipped, ours, "{unit}");
        // Every binary a unit runs is in the package.
        let text = String::from_utf8(ours).unwrap();
        for l in text.lines().filter(|l| l.starts_with("Exec")) {
            let cmd = l.split_once('=').unwrap().1.trim_start_matches(['+', '-']);
            let prog = cmd.split_whitespace().next().unwrap();
            if prog.starts_with("/usr/sbin/") {
                assert!(Path::new(&x.join(&prog[1..])).exists(), "{unit}: {prog}");
            }
        }
    }
    // `--help` lists every command of each binary.
    let help = run(Command::new(sbin("dnsd")).arg("--help"));
    for c in ["serve", "check-zone", "check-config", "ctl"] {
        assert!(help.contains(c), "{help}");
    }
    let help = run(Command::new(sbin("xdp-guard")).arg("--help"));
    for c in [
        "attach",
        "detach",
        "status",
        "stats",
        "block",
        "unblock",
        "list",
        "check-config",
    ] {
        assert!(help.contains(c), "{help}");
    }
}
