//! `[dnssec]` and `[[dnssec_policy]]`: where keys live and how zones are signed.

use std::path::PathBuf;
use std::sync::Arc;

use serde::Deserialize;

use crate::signing::keys::Algorithm;
use crate::signing::{Policy, Submission};

/// `cds`: a switch, or "delete".
#[derive(Debug, Clone, Deserialize, PartialEq, Eq)]
#[serde(untagged)]
pub enum CdsSetting {
    /// true: the key-signing keys; false: none.
    Bool(bool),
    /// "delete" (RFC 8078).
    Text(String),
}

/// `[dnssec]`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DnssecConfig {
    /// The key directory (one file per key, readable by the service only); relative to the
    /// config file. Needed when a zone names a policy.
    #[serde(default)]
    pub key_dir: Option<PathBuf>,
    /// Warn (at load, in `ctl zones`) when a served signature expires within this many days.
    #[serde(default = "default_warn_days")]
    pub rrsig_warn_days: u32,
    /// Compact denials each UDP worker (and TCP) signs per second at most; over it a
    /// denial is answered TC=1.
    #[serde(default = "default_compact_rate")]
    pub compact_denial_rate: u32,
    /// Of those, what one source (IPv4 /24, IPv6 /56) may have per second.
    #[serde(default = "default_compact_per_source")]
    pub compact_denial_per_source: u32,
}

impl Default for DnssecConfig {
    fn default() -> DnssecConfig {
        DnssecConfig {
            key_dir: None,
            rrsig_warn_days: default_warn_days(),
            compact_denial_rate: default_compact_rate(),
            compact_denial_per_source: default_compact_per_source(),
        }
    }
}

fn default_warn_days() -> u32 {
    7
}

fn default_compact_rate() -> u32 {
    2000
}

fn default_compact_per_source() -> u32 {
    100
}

/// How a zone's keys are made, used and rolled (`[[dnssec_policy]]`). Durations are TTL
/// text: `3600`, `1h`, `14d`, `2w`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PolicyConfig {
    /// The name zones and templates give in `dnssec_policy`.
    pub name: String,
    /// "ecdsap256sha256" (default), "ed25519" or "rsasha256".
    #[serde(default)]
    pub algorithm: Option<Algorithm>,
    /// RSA modulus bits (2048, 3072 or 4096).
    #[serde(default)]
    pub rsa_bits: Option<u32>,
    /// "csk" (default: one key signs all) or "ksk-zsk".
    #[serde(default)]
    pub keys: Option<String>,
    /// How long a signature is valid (default 14d).
    #[serde(default)]
    pub rrsig_validity: Option<String>,
    /// Signatures with less than this left are made again (default 7d).
    #[serde(default)]
    pub rrsig_refresh: Option<String>,
    /// Deny with NSEC3 (else NSEC).
    #[serde(default)]
    pub nsec3: bool,
    /// NSEC3 additional iterations (RFC 9276: 0, the default).
    #[serde(default)]
    pub nsec3_iterations: u16,
    /// NSEC3 salt in hex (RFC 9276: none, the default).
    #[serde(default)]
    pub nsec3_salt: String,
    /// NSEC3 opt-out: insecure delegations get no NSEC3.
    #[serde(default)]
    pub nsec3_opt_out: bool,
    /// TTL of NSEC/NSEC3 (default: the smaller of the SOA's TTL and MINIMUM, RFC 9077).
    #[serde(default)]
    pub negative_ttl: Option<String>,
    /// TTL of DNSKEY, CDS and CDNSKEY (default: the SOA's TTL).
    #[serde(default)]
    pub dnskey_ttl: Option<String>,
    /// Roll the ZSK (or the CSK) after this long ("0": never, the default).
    #[serde(default)]
    pub zsk_lifetime: Option<String>,
    /// Roll the KSK after this long ("0": never, the default).
    #[serde(default)]
    pub ksk_lifetime: Option<String>,
    /// Time for a change to reach every secondary and cache (default 1h).
    #[serde(default)]
    pub propagation_delay: Option<String>,
    /// TTL of the DS at the parent (default 1d).
    #[serde(default)]
    pub parent_ds_ttl: Option<String>,
    /// CDS and CDNSKEY for the parent: true (the key-signing keys, the default), false
    /// (none) or "delete" (RFC 8078: remove every DS).
    #[serde(default)]
    pub cds: Option<CdsSetting>,
    /// How a KSK or CSK rollover learns that the parent holds the new DS: "parent" (ask the
    /// `parent` servers; the default when some are given), "manual" (`ctl
    /// zone-ksk-submitted`; the default otherwise) or "timer" (assume it after
    /// `propagation_delay`, unchecked).
    #[serde(default)]
    pub ksk_submission: Option<String>,
    /// The parent zone's servers asked for the new key's DS ("IP" or "IP:port").
    #[serde(default)]
    pub parent: Vec<String>,
    /// How often the parent servers are asked while a DS is awaited (default 1h).
    #[serde(default)]
    pub parent_check_interval: Option<String>,
    /// Answer NXDOMAIN and NODATA with compact denial (RFC 9824): NOERROR and one NSEC
    /// signed online. NSEC only; the zone keeps its NSEC chain for transfers.
    #[serde(default)]
    pub compact_denial: bool,
}

/// A duration in TTL text, else `default`; errors name the key.
fn secs(v: &Option<String>, default: u32, key: &str) -> Result<u32, (String, String)> {
    match v {
        None => Ok(default),
        Some(s) => zones::text::parse_ttl(s.as_bytes())
            .map_err(|e| (key.to_string(), format!("{s:?}: {e}"))),
    }
}

impl PolicyConfig {
    /// The policy, checked; `key` names it in errors (`dnssec_policy[0]`).
    pub fn resolve(&self, key: &str, key_dir: PathBuf) -> Result<Policy, (String, String)> {
        let k = |f: &str| format!("{key}.{f}");
        let validity = secs(&self.rrsig_validity, 14 * 86400, &k("rrsig_validity"))?;
        let refresh = secs(&self.rrsig_refresh, 7 * 86400, &k("rrsig_refresh"))?;
        if validity < 3600 * 2 {
            return Err((k("rrsig_validity"), "must be at least 2h".into()));
        }
        if refresh >= validity || refresh < 600 {
            return Err((
                k("rrsig_refresh"),
                "must be at least 10m and less than rrsig_validity".into(),
            ));
        }
        let split_keys = match self.keys.as_deref() {
            None | Some("csk") => false,
            Some("ksk-zsk") => true,
            Some(o) => return Err((k("keys"), format!("{o:?}: expected \"csk\" or \"ksk-zsk\""))),
        };
        if self.nsec3_iterations > 100 {
            return Err((
                k("nsec3_iterations"),
                "validators treat more than 100 as insecure (RFC 9276 asks for 0)".into(),
            ));
        }
        let salt = hex(&self.nsec3_salt)
            .ok_or_else(|| (k("nsec3_salt"), "expected hex, up to 255 bytes".into()))?;
        if self.compact_denial && self.nsec3 {
            return Err((
                k("compact_denial"),
                "compact denial answers with NSEC: set nsec3 = false".into(),
            ));
        }
        let denial = if self.nsec3 {
            zones::sign::Denial::Nsec3 {
                iterations: self.nsec3_iterations,
                salt,
                opt_out: self.nsec3_opt_out,
            }
        } else {
            if self.nsec3_opt_out || self.nsec3_iterations != 0 || !salt.is_empty() {
                return Err((k("nsec3"), "NSEC3 settings given but nsec3 is false".into()));
            }
            zones::sign::Denial::Nsec
        };
        let algorithm = self.algorithm.unwrap_or(Algorithm::Ecdsap256sha256);
        if self.compact_denial && algorithm == Algorithm::Rsasha256 {
            // The budget counts signatures: an RSA signature costs tens of ECDSA ones, so
            // the default budget would be several cores per worker under a flood.
            return Err((
                k("compact_denial"),
                format!(
                    "policy {:?}: compact denial signs online, and RSA signatures cost tens of times an ECDSA or Ed25519 one: use algorithm ecdsap256sha256 or ed25519",
                    self.name
                ),
            ));
        }
        let rsa_bits = self.rsa_bits.unwrap_or(2048);
        if !matches!(rsa_bits, 2048 | 3072 | 4096) {
            return Err((k("rsa_bits"), "must be 2048, 3072 or 4096".into()));
        }
        let mut parents = Vec::with_capacity(self.parent.len());
        for (i, a) in self.parent.iter().enumerate() {
            let addr = a
                .parse::<std::net::SocketAddr>()
                .or_else(|_| a.parse::<std::net::IpAddr>().map(|ip| (ip, 53).into()))
                .map_err(|_| {
                    (
                        format!("{}[{i}]", k("parent")),
                        format!("{a:?}: expected an IP address, with a port or without (53)"),
                    )
                })?;
            parents.push(addr);
        }
        if parents.len() > 16 {
            return Err((k("parent"), "at most 16 servers".into()));
        }
        let check_interval = secs(
            &self.parent_check_interval,
            3600,
            &k("parent_check_interval"),
        )?;
        if check_interval == 0 {
            return Err((k("parent_check_interval"), "must be at least 1s".into()));
        }
        let ksk_submission = match (self.ksk_submission.as_deref(), parents.is_empty()) {
            (None, false) | (Some("parent"), false) => Submission::Parent {
                servers: parents,
                check_interval: check_interval as u64,
            },
            (Some("parent"), true) => {
                return Err((
                    k("ksk_submission"),
                    "\"parent\" needs the parent's servers in `parent`".into(),
                ));
            }
            (None, true) | (Some("manual"), true) => Submission::Manual,
            (Some("timer"), true) => Submission::Timer,
            (Some("manual" | "timer"), false) => {
                return Err((
                    k("parent"),
                    "servers given while ksk_submission does not ask them".into(),
                ));
            }
            (Some(o), _) => {
                return Err((
                    k("ksk_submission"),
                    format!("{o:?}: expected \"parent\", \"manual\" or \"timer\""),
                ));
            }
        };
        let opt = |v: &Option<String>, f: &str| -> Result<Option<u32>, (String, String)> {
            v.as_ref().map(|_| secs(v, 0, &k(f))).transpose()
        };
        Ok(Policy {
            name: self.name.clone(),
            key_dir,
            algorithm,
            rsa_bits,
            split_keys,
            rrsig_validity: validity,
            rrsig_refresh: refresh,
            denial,
            negative_ttl: opt(&self.negative_ttl, "negative_ttl")?,
            dnskey_ttl: opt(&self.dnskey_ttl, "dnskey_ttl")?,
            zsk_lifetime: secs(&self.zsk_lifetime, 0, &k("zsk_lifetime"))? as u64,
            ksk_lifetime: secs(&self.ksk_lifetime, 0, &k("ksk_lifetime"))? as u64,
            propagation_delay: secs(&self.propagation_delay, 3600, &k("propagation_delay"))? as u64,
            parent_ds_ttl: secs(&self.parent_ds_ttl, 86400, &k("parent_ds_ttl"))? as u64,
            cds: match &self.cds {
                None | Some(CdsSetting::Bool(true)) => crate::signing::Cds::Keys,
                Some(CdsSetting::Bool(false)) => crate::signing::Cds::Off,
                Some(CdsSetting::Text(t)) if t == "delete" => crate::signing::Cds::Delete,
                Some(CdsSetting::Text(t)) => {
                    return Err((
                        k("cds"),
                        format!("{t:?}: expected true, false or \"delete\" (RFC 8078)"),
                    ));
                }
            },
            ksk_submission,
            compact_denial: self.compact_denial,
        })
    }
}

/// Hex text to bytes (empty and "-" are no bytes).
fn hex(s: &str) -> Option<Vec<u8>> {
    if s.is_empty() || s == "-" {
        return Some(Vec::new());
    }
    if !s.len().is_multiple_of(2) || s.len() > 510 {
        return None;
    }
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(s.get(i..i + 2)?, 16).ok())
        .collect()
}

/// Resolves every policy; errors name the policy's key.
pub fn resolve_all(
    policies: &[PolicyConfig],
    key_dir: Option<&PathBuf>,
) -> Result<Vec<Arc<Policy>>, (String, String)> {
    let mut out: Vec<Arc<Policy>> = Vec::with_capacity(policies.len());
    for (i, p) in policies.iter().enumerate() {
        let key = format!("dnssec_policy[{i}]");
        if out.iter().any(|o| o.name == p.name) {
            return Err((
                format!("{key}.name"),
                format!("{:?} is defined twice", p.name),
            ));
        }
        let Some(dir) = key_dir else {
            return Err((
                "dnssec.key_dir".into(),
                "missing: a dnssec_policy needs a key directory".into(),
            ));
        };
        out.push(Arc::new(p.resolve(&key, dir.clone())?));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use crate::config::Config;
    use std::path::Path;

    fn parse(text: &str) -> Result<Config, String> {
        Config::parse(Path::new("/etc/palisade/p.toml"), text).map_err(|e| e.to_string())
    }

    /// A template's policy reaches its zones, the key directory is made absolute, and each
    /// mistake names its key.
    #[test]
    fn policies_resolve_and_mistakes_name_their_key() {
        let c = parse(
            "[dnssec]\nkey_dir = \"keys\"\n[[dnssec_policy]]\nname = \"p\"\nnsec3 = true\n\
             rrsig_validity = \"2w\"\n[[template]]\nname = \"t\"\ndnssec_policy = \"p\"\n\
             [[zone]]\norigin = \"a.test.\"\nfile = \"a\"\ntemplate = \"t\"\n",
        )
        .unwrap();
        let p = c
            .policy(c.zones[0].dnssec_policy.as_deref().unwrap())
            .unwrap();
        assert_eq!(p.key_dir, Path::new("/etc/palisade/keys"));
        assert_eq!(p.rrsig_validity, 14 * 86400);
        assert!(matches!(
            p.denial,
            zones::sign::Denial::Nsec3 { iterations: 0, .. }
        ));
        for (text, key) in [
            (
                "[[zone]]\norigin = \"a.test.\"\nfile = \"a\"\ndnssec_policy = \"nope\"\n",
                "zone[0].dnssec_policy",
            ),
            ("[[dnssec_policy]]\nname = \"p\"\n", "dnssec.key_dir"),
            (
                "[dnssec]\nkey_dir = \"k\"\n[[dnssec_policy]]\nname = \"p\"\nnsec3 = true\ncompact_denial = true\n",
                "dnssec_policy[0].compact_denial",
            ),
            (
                "[dnssec]\nkey_dir = \"k\"\n[[dnssec_policy]]\nname = \"rsa\"\nalgorithm = \"rsasha256\"\ncompact_denial = true\n",
                "dnssec_policy[0].compact_denial",
            ),
            (
                "[dnssec]\nkey_dir = \"k\"\n[[dnssec_policy]]\nname = \"p\"\nnsec3 = true\nnsec3_iterations = 150\n",
                "dnssec_policy[0].nsec3_iterations",
            ),
            (
                "[dnssec]\nkey_dir = \"k\"\n[[dnssec_policy]]\nname = \"p\"\nrrsig_refresh = \"20d\"\n",
                "dnssec_policy[0].rrsig_refresh",
            ),
            (
                "[dnssec]\nkey_dir = \"k\"\n[[dnssec_policy]]\nname = \"p\"\nkeys = \"three\"\n",
                "dnssec_policy[0].keys",
            ),
            (
                "[dnssec]\nkey_dir = \"k\"\n[[dnssec_policy]]\nname = \"p\"\n[[dnssec_policy]]\nname = \"p\"\n",
                "dnssec_policy[1].name",
            ),
            (
                "[dnssec]\nkey_dir = \"k\"\n[[dnssec_policy]]\nname = \"p\"\nalgorithm = \"dsa\"\n",
                "algorithm",
            ),
        ] {
            let e = parse(text).unwrap_err();
            assert!(e.contains(key), "{key}: {e}");
        }
    }
}
