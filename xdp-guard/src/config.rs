//! The XDP guard's settings: `guard.toml` of `xdp-guard attach`, and the `[xdp]` section of
//! the daemons (where `interface` is left out when `xdp-guard` attaches the program and the
//! daemon only mirrors into its pinned maps).

use std::fmt;
use std::path::PathBuf;

use serde::Deserialize;

use crate::Error;
use crate::maps::{
    DEFAULT_BLOCK_V4_ENTRIES, DEFAULT_BLOCK_V6_ENTRIES, DEFAULT_PREFIX_V4_ENTRIES,
    DEFAULT_PREFIX_V6_ENTRIES, DEFAULT_RATE_ENTRIES, GuardConfig, TOKEN_UNIT,
};

/// Default directory (on bpffs) where the maps are pinned.
pub const DEFAULT_PIN_PATH: &str = "/sys/fs/bpf/palisade";

/// How the program is attached to the interface.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Mode {
    /// In the driver (XDP_FLAGS_DRV_MODE): fastest; the driver must support XDP.
    Native,
    /// In the kernel stack after the skb is built (XDP_FLAGS_SKB_MODE): works everywhere.
    Generic,
    /// Native if the driver accepts it, else generic.
    #[default]
    Auto,
}

impl fmt::Display for Mode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Native => "native",
            Self::Generic => "generic",
            Self::Auto => "auto",
        })
    }
}

/// Where to attach, what to rate-limit, how big the maps are, where they are pinned.
///
/// ```toml
/// # guard.toml (xdp-guard attach -c guard.toml), or [xdp] in dnsd's config
/// interface = "eth0"
/// mode = "auto"            # "native" | "generic" | "auto"
/// dns_ports = [53]
/// rate = 1000              # UDP packets/s per source (per CPU); 0 = no rate limit
/// burst = 2000
/// block_v4_entries = 262144
/// pin_path = "/sys/fs/bpf/palisade"
/// ```
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct XdpConfig {
    /// Interface to attach to; empty (left out) in a daemon's `[xdp]`: the daemon does not
    /// attach, it opens the maps `xdp-guard` pinned at `pin_path`.
    #[serde(default)]
    pub interface: String,
    /// Attach mode.
    #[serde(default)]
    pub mode: Mode,
    /// UDP destination ports that are rate-limited per source.
    #[serde(default = "default_dns_ports")]
    pub dns_ports: Vec<u16>,
    /// Packets per second per source (token refill rate, per CPU); 0 turns rate limiting off.
    #[serde(default = "default_rate")]
    pub rate: u64,
    /// Bucket size in packets: how many a fresh source may send at once.
    #[serde(default = "default_burst")]
    pub burst: u64,
    /// Capacity of the IPv4 address hash.
    #[serde(default = "default_block_v4")]
    pub block_v4_entries: u32,
    /// Capacity of the IPv6 address hash.
    #[serde(default = "default_block_v6")]
    pub block_v6_entries: u32,
    /// Capacity of the IPv4 prefix trie (keep small: lookups slow down as it grows).
    #[serde(default = "default_prefix_v4")]
    pub prefix_v4_entries: u32,
    /// Capacity of the IPv6 prefix trie.
    #[serde(default = "default_prefix_v6")]
    pub prefix_v6_entries: u32,
    /// Sources tracked by the rate limiter (per-CPU LRU).
    #[serde(default = "default_rate_entries")]
    pub rate_entries: u32,
    /// Capacity of each allow trie (the rules file's `[global] allow`, per family).
    #[serde(default = "default_allow_entries")]
    pub allow_entries: u32,
    /// Answers one generation of the fast path holds (entries of up to 1,232 bytes). The map
    /// holds two generations — the live one and the one a publish stages beside it — and
    /// takes memory as entries are written: only a publish's overlap costs the second.
    #[serde(default = "default_answer_entries")]
    pub answer_entries: u32,
    /// A daemon's answers in XDP go where the kernel's route to the client sends them: out
    /// of the interface the query came in by, to the neighbour the route names, and only for
    /// frames sent to that interface's MAC (else the query passes to the daemon). false:
    /// back to the frame's sender with no look-up — only for a point-to-point link whose one
    /// neighbour is the router, since an on-link host could then forge a victim's address
    /// and read its answers (and its server cookies).
    #[serde(default = "default_true")]
    pub answer_route: bool,
    /// Directory on bpffs where the maps are pinned, shared by every process.
    #[serde(default = "default_pin_path")]
    pub pin_path: PathBuf,
    /// Pin the maps (false: private maps that die with the process).
    #[serde(default = "default_true")]
    pub pin: bool,
    /// `xdp-guard attach` also installs TCP steering (sk_lookup) in its network namespace:
    /// daemons that find it take the connections to their addresses through one listener
    /// instead of their own (one per address, or the wildcard socket).
    #[serde(default = "default_true")]
    pub tcp_steering: bool,
}

fn default_dns_ports() -> Vec<u16> {
    vec![53]
}
fn default_rate() -> u64 {
    1000
}
fn default_burst() -> u64 {
    2000
}
fn default_block_v4() -> u32 {
    DEFAULT_BLOCK_V4_ENTRIES
}
fn default_block_v6() -> u32 {
    DEFAULT_BLOCK_V6_ENTRIES
}
fn default_prefix_v4() -> u32 {
    DEFAULT_PREFIX_V4_ENTRIES
}
fn default_prefix_v6() -> u32 {
    DEFAULT_PREFIX_V6_ENTRIES
}
fn default_allow_entries() -> u32 {
    crate::maps::DEFAULT_ALLOW_ENTRIES
}
fn default_answer_entries() -> u32 {
    crate::maps::DEFAULT_ANSWER_ENTRIES
}
fn default_rate_entries() -> u32 {
    DEFAULT_RATE_ENTRIES
}
fn default_pin_path() -> PathBuf {
    PathBuf::from(DEFAULT_PIN_PATH)
}
fn default_true() -> bool {
    true
}

impl XdpConfig {
    /// The defaults for `interface`.
    pub fn new(interface: &str) -> Self {
        Self {
            interface: interface.to_owned(),
            mode: Mode::Auto,
            dns_ports: default_dns_ports(),
            rate: default_rate(),
            burst: default_burst(),
            block_v4_entries: DEFAULT_BLOCK_V4_ENTRIES,
            block_v6_entries: DEFAULT_BLOCK_V6_ENTRIES,
            prefix_v4_entries: DEFAULT_PREFIX_V4_ENTRIES,
            prefix_v6_entries: DEFAULT_PREFIX_V6_ENTRIES,
            rate_entries: DEFAULT_RATE_ENTRIES,
            allow_entries: crate::maps::DEFAULT_ALLOW_ENTRIES,
            answer_entries: crate::maps::DEFAULT_ANSWER_ENTRIES,
            answer_route: true,
            pin_path: default_pin_path(),
            pin: true,
            tcp_steering: true,
        }
    }

    /// Whether these settings attach the program (an interface is named).
    pub fn attaches(&self) -> bool {
        !self.interface.is_empty()
    }

    /// The settings of a daemon that only opens the maps pinned at `pin_path`.
    pub fn pinned_only(pin_path: &std::path::Path) -> Self {
        let mut c = Self::new("");
        c.pin_path = pin_path.to_path_buf();
        c
    }

    /// Checks the values that serde cannot: names, ranges, sizes.
    pub fn validate(&self) -> Result<(), Error> {
        let bad = |m: String| Err(Error::Config(m));
        if self.attaches() && self.interface.len() >= libc::IFNAMSIZ {
            return bad(format!(
                "interface {:?}: at most 15 characters",
                self.interface
            ));
        }
        if self.rate > TOKEN_UNIT {
            return bad(format!(
                "rate {}: at most {TOKEN_UNIT} packets/s",
                self.rate
            ));
        }
        if self.rate > 0 && self.burst == 0 {
            return bad("burst 0 with a rate: every packet would be dropped".into());
        }
        if self.burst > u64::MAX / TOKEN_UNIT {
            return bad(format!("burst {} too large", self.burst));
        }
        for (name, n) in [
            ("block_v4_entries", self.block_v4_entries),
            ("block_v6_entries", self.block_v6_entries),
            ("prefix_v4_entries", self.prefix_v4_entries),
            ("prefix_v6_entries", self.prefix_v6_entries),
            ("rate_entries", self.rate_entries),
            ("allow_entries", self.allow_entries),
            ("answer_entries", self.answer_entries),
        ] {
            if n == 0 {
                return bad(format!("{name} must be at least 1"));
            }
        }
        if !self.attaches() && !self.pin {
            return bad("pin = false without an interface: there are no maps to open".into());
        }
        if self.pin && !self.pin_path.is_absolute() {
            return bad(format!(
                "pin_path {}: must be absolute",
                self.pin_path.display()
            ));
        }
        Ok(())
    }

    /// The kernel-side config value for these settings.
    pub fn kernel_config(&self) -> GuardConfig {
        GuardConfig::new(self.rate, self.burst, &self.dns_ports)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_the_minimal_and_full_section() {
        let c: XdpConfig = toml::from_str("interface = \"eth0\"").unwrap();
        assert_eq!(c, XdpConfig::new("eth0"));
        c.validate().unwrap();
        let c: XdpConfig = toml::from_str(
            "interface = \"veth1\"\nmode = \"generic\"\ndns_ports = [53, 5353]\nrate = 10\n\
             burst = 5\nblock_v4_entries = 1000\nprefix_v6_entries = 10\npin = false\n\
             pin_path = \"/sys/fs/bpf/x\"",
        )
        .unwrap();
        assert_eq!(c.mode, Mode::Generic);
        assert_eq!(c.dns_ports, vec![53, 5353]);
        assert_eq!((c.rate, c.burst, c.block_v4_entries), (10, 5, 1000));
        assert!(!c.pin);
        assert!(c.kernel_config().is_dns_port(5353));
    }

    #[test]
    fn refuses_unknown_keys_and_bad_values() {
        let e = toml::from_str::<XdpConfig>("interface = \"eth0\"\nrat = 5").unwrap_err();
        assert!(e.to_string().contains("rat"), "{e}");
        assert!(toml::from_str::<XdpConfig>("interface = \"eth0\"\nmode = \"fast\"").is_err());
        // No interface: a daemon that opens the pinned maps.
        let c = toml::from_str::<XdpConfig>("mode = \"auto\"").unwrap();
        assert!(!c.attaches());
        c.validate().unwrap();
        let mut c = XdpConfig::new("eth0");
        c.burst = 0;
        assert!(c.validate().is_err());
        let mut c = XdpConfig::new("an-interface-name-too-long");
        assert!(c.validate().is_err());
        c.interface = "eth0".into();
        c.rate_entries = 0;
        assert!(c.validate().is_err());
    }
}
