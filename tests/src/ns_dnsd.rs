//! dnsd run inside a network namespace the test made (XDP tests), and its control channel by
//! config file (the control socket path works from any namespace).

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

use crate::counters::Counters;
use crate::netns::Netns;

/// A dnsd started with `ip netns exec`, killed on drop; its log is printed when the test
/// fails.
pub struct NsDnsd {
    child: Child,
    log: PathBuf,
    config: PathBuf,
}

impl NsDnsd {
    /// Starts `dnsd serve -c config` in `ns`, its output in `config` with the extension `.log`.
    pub fn start(ns: &Netns, config: &Path) -> NsDnsd {
        let mut cmd = Command::new("ip");
        cmd.args(["netns", "exec", ns.name()])
            .arg(crate::bin("dnsd"));
        Self::spawn(cmd, config)
    }

    /// Starts `dnsd serve -c config` in `ns`, entered with setns alone: `ip netns exec`
    /// remounts /sys, which hides the bpffs pins of `xdp-guard attach`.
    pub fn start_setns(ns: &Netns, config: &Path) -> NsDnsd {
        Self::spawn(ns.command(crate::bin("dnsd")), config)
    }

    fn spawn(mut cmd: Command, config: &Path) -> NsDnsd {
        let log = config.with_extension("log");
        let out = std::fs::File::create(&log).expect("dnsd log file");
        let child = cmd
            .arg("serve")
            .arg("-c")
            .arg(config)
            .stdout(Stdio::from(out.try_clone().expect("dup log file")))
            .stderr(Stdio::from(out))
            .spawn()
            .expect("start dnsd in the namespace");
        NsDnsd {
            child,
            log,
            config: config.to_path_buf(),
        }
    }

    /// Its log so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// `dnsd ctl ARGS` against it.
    pub fn ctl(&self, args: &[&str]) -> (bool, String) {
        ctl(&self.config, args)
    }

    /// `dnsd ctl stats`, parsed.
    pub fn stats(&self) -> Counters {
        stats(&self.config)
    }
}

impl Drop for NsDnsd {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        if std::thread::panicking() {
            eprintln!("dnsd log ({}):\n{}", self.log.display(), self.log());
        }
    }
}

/// `dnsd ctl -c CONFIG ARGS`: success and standard output.
pub fn ctl(config: &Path, args: &[&str]) -> (bool, String) {
    let out = Command::new(crate::bin("dnsd"))
        .arg("ctl")
        .arg("-c")
        .arg(config)
        .args(args)
        .output()
        .expect("run dnsd ctl");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
    )
}

/// `dnsd ctl stats` of the dnsd running from `config`; panics when it fails.
pub fn stats(config: &Path) -> Counters {
    let (ok, s) = ctl(config, &["stats"]);
    assert!(ok, "dnsd ctl stats failed: {s}");
    Counters::parse(&s)
}
