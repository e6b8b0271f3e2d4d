//! `[defence]`: response rate limiting, cookies and the random-subdomain defence, with the
//! documented defaults (RRL on, cookies on, random-subdomain defence on).

use serde::Deserialize;

/// `[defence]`.
#[derive(Debug, Clone, Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub struct DefenceConfig {
    /// `[defence.rrl]`.
    #[serde(default)]
    pub rrl: RrlConfig,
    /// `[defence.cookies]`.
    #[serde(default)]
    pub cookies: CookieConfig,
    /// `[defence.random_subdomain]` (`[defence.water_torture]` is the old spelling).
    #[serde(default, alias = "water_torture")]
    pub random_subdomain: RandomSubdomainConfig,
    /// `[defence.suspects]`.
    #[serde(default)]
    pub suspects: SuspectsConfig,
}

/// `[defence.suspects]`: what sources held on unproven evidence get (UDP TC=1, never a block).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct SuspectsConfig {
    /// Truncated (TC=1) replies per second per source prefix (`[defence.rrl]` `ipv4_prefix`,
    /// `ipv6_prefix`); beyond, a suspect's UDP queries are dropped and counted.
    pub tc_per_second: f64,
    /// Past the budget, one query in `slip` is still answered TC=1 (0: none), as RRL slips:
    /// a flood forged in a resolver's name cannot use up every reply its real queries get.
    pub slip: u32,
    /// Slots of the budget's table (8 bytes each).
    #[serde(deserialize_with = "shield::ratelimit::table_slots")]
    pub table_size: usize,
}

impl Default for SuspectsConfig {
    fn default() -> Self {
        SuspectsConfig {
            tc_per_second: 100.0,
            slip: 2,
            table_size: 1 << 16,
        }
    }
}

/// `[defence.rrl]`: response rate limiting.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct RrlConfig {
    /// RRL on.
    pub enabled: bool,
    /// Answers (and NODATA) per second per client prefix, name and type.
    pub responses_per_second: f64,
    /// NXDOMAIN per second per client prefix and zone (default: responses_per_second).
    pub nxdomains_per_second: Option<f64>,
    /// Referrals per second per client prefix and zone (default: responses_per_second).
    pub referrals_per_second: Option<f64>,
    /// Errors per second per client prefix (default: responses_per_second).
    pub errors_per_second: Option<f64>,
    /// Every Nth limited response is a TC=1 reply; 0: drop them all.
    pub slip: u32,
    /// Seconds of debt a client's excess runs up (BIND's window, 15 there; 1 here, as Knot
    /// forgets a flood): a client limited stays limited for at most this long after it slows.
    pub window: u32,
    /// Client prefix length for IPv4.
    pub ipv4_prefix: u8,
    /// Client prefix length for IPv6.
    pub ipv6_prefix: u8,
    /// Prefixes never limited.
    pub exempt: Vec<String>,
    /// Slots of the shared state table (8 bytes each).
    #[serde(deserialize_with = "shield::ratelimit::table_slots")]
    pub table_size: usize,
}

impl Default for RrlConfig {
    fn default() -> Self {
        RrlConfig {
            enabled: true,
            responses_per_second: 20.0,
            nxdomains_per_second: None,
            referrals_per_second: None,
            errors_per_second: None,
            slip: 2,
            window: 1,
            ipv4_prefix: 24,
            ipv6_prefix: 56,
            exempt: Vec::new(),
            table_size: 1 << 18,
        }
    }
}

/// `[defence.cookies]`: DNS Cookies (RFC 7873, RFC 9018).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct CookieConfig {
    /// Cookies on: answer with a server cookie, check returned ones.
    pub enabled: bool,
    /// Shared secret (32 hex digits) so that an anycast set accepts each other's cookies;
    /// random per start when absent. A reload applies a changed secret.
    pub secret: Option<String>,
    /// The shared secret before `secret`, still accepted: rotate a shared secret by moving
    /// it here, setting a new `secret` and reloading every node.
    pub previous_secret: Option<String>,
    /// Hours between secret rotations (the previous secret stays valid); 0: never.
    pub rotate_hours: u64,
    /// Default policy for zones: "on" (answer with cookies) or "require" (UDP queries
    /// without a valid server cookie get BADCOOKIE or TC).
    pub policy: CookiePolicy,
}

impl Default for CookieConfig {
    fn default() -> Self {
        CookieConfig {
            enabled: true,
            secret: None,
            previous_secret: None,
            rotate_hours: 24,
            policy: CookiePolicy::On,
        }
    }
}

/// Per-zone cookie policy.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum CookiePolicy {
    /// No cookie processing for the zone.
    Off,
    /// Cookies answered and checked; a missing or bad one only costs the RRL bypass.
    #[default]
    On,
    /// UDP queries must carry a valid server cookie.
    Require,
}

/// `[defence.random_subdomain]`: the random-subdomain defence.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct RandomSubdomainConfig {
    /// The defence on.
    pub enabled: bool,
    /// NXDOMAIN per second of one zone above which the zone is under a flood.
    pub zone_nxdomains_per_second: f64,
    /// NXDOMAIN per source per window beyond which its NXDOMAIN answers are truncated (TC=1,
    /// within the suspects' budget; dropped past it).
    pub source_nxdomain_limit: u32,
    /// NXDOMAIN per source per window at which it becomes a suspect (its NXDOMAIN answers
    /// truncated for `block_ttl`; never a block: UDP proves nothing of the source).
    pub escalate_after: u32,
    /// Share of a source's answers that must be NXDOMAIN for it to be limited.
    pub min_nx_share: f64,
    /// Window in seconds (also how long a zone stays "under attack").
    pub window: u64,
    /// Seconds an escalated source stays a suspect.
    pub block_ttl: u64,
    /// Slots of each per-source table (8 bytes each).
    #[serde(deserialize_with = "shield::ratelimit::table_slots")]
    pub table_size: usize,
    /// Sources never limited nor blocked by this defence (big recursive resolvers: they
    /// carry the flood of their own clients); `[defence.rrl] exempt` is exempt here too.
    pub exempt: Vec<String>,
}

impl Default for RandomSubdomainConfig {
    fn default() -> Self {
        RandomSubdomainConfig {
            enabled: true,
            zone_nxdomains_per_second: 500.0,
            source_nxdomain_limit: 20,
            escalate_after: 100,
            min_nx_share: 0.8,
            window: 10,
            block_ttl: 600,
            table_size: 1 << 18,
            exempt: Vec::new(),
        }
    }
}

impl DefenceConfig {
    /// Checks values; the error names the key.
    pub fn check(&self) -> Result<(), (String, String)> {
        let e = |k: &str, m: &str| Err((format!("defence.{k}"), m.to_string()));
        let r = &self.rrl;
        if r.responses_per_second.is_nan() || r.responses_per_second <= 0.0 {
            return e("rrl.responses_per_second", "must be above 0");
        }
        for (k, v) in [
            ("rrl.nxdomains_per_second", r.nxdomains_per_second),
            ("rrl.referrals_per_second", r.referrals_per_second),
            ("rrl.errors_per_second", r.errors_per_second),
        ] {
            if v.is_some_and(|v| v.is_nan() || v <= 0.0) {
                return e(k, "must be above 0");
            }
        }
        if r.ipv4_prefix > 32 {
            return e("rrl.ipv4_prefix", "must be at most 32");
        }
        if r.ipv6_prefix > 128 {
            return e("rrl.ipv6_prefix", "must be at most 128");
        }
        if r.window == 0 || r.window > 3600 {
            return e("rrl.window", "must be 1 to 3600 seconds");
        }
        for x in &r.exempt {
            if shield::prefix::parse_net(x).is_none() {
                return Err((
                    "defence.rrl.exempt".into(),
                    format!("{x:?} is not an address or prefix"),
                ));
            }
        }
        for (k, v) in [
            ("secret", &self.cookies.secret),
            ("previous_secret", &self.cookies.previous_secret),
        ] {
            if let Some(s) = v
                && let Err(m) = parse_secret(s)
            {
                return Err((format!("defence.cookies.{k}"), m));
            }
        }
        if self.cookies.previous_secret.is_some() && self.cookies.secret.is_none() {
            return e(
                "cookies.previous_secret",
                "needs a secret: it is the one before it",
            );
        }
        for x in &self.random_subdomain.exempt {
            if shield::prefix::parse_net(x).is_none() {
                return Err((
                    "defence.random_subdomain.exempt".into(),
                    format!("{x:?} is not an address or prefix"),
                ));
            }
        }
        let t = &self.suspects;
        if !(t.tc_per_second.is_finite() && t.tc_per_second > 0.0 && t.tc_per_second <= 250_000.0) {
            return e(
                "suspects.tc_per_second",
                "must be above 0 and at most 250000",
            );
        }
        if t.slip > 10 {
            return e("suspects.slip", "must be 0 (off) to 10");
        }
        let w = &self.random_subdomain;
        if w.zone_nxdomains_per_second.is_nan() || w.zone_nxdomains_per_second <= 0.0 {
            return e(
                "random_subdomain.zone_nxdomains_per_second",
                "must be above 0",
            );
        }
        if !(0.0..=1.0).contains(&w.min_nx_share) {
            return e("random_subdomain.min_nx_share", "must be between 0 and 1");
        }
        if w.window == 0 || w.escalate_after == 0 {
            return e(
                "random_subdomain",
                "window and escalate_after must be at least 1",
            );
        }
        Ok(())
    }
}

/// Parses a 16-byte cookie secret written as 32 hex digits.
pub fn parse_secret(hex: &str) -> Result<[u8; 16], String> {
    let b = hex.trim().as_bytes();
    if b.len() != 32 {
        return Err("the cookie secret must be 32 hex digits (16 bytes)".into());
    }
    let mut out = [0u8; 16];
    for (i, pair) in b.chunks(2).enumerate() {
        let s = std::str::from_utf8(pair).map_err(|_| "bad hex".to_string())?;
        out[i] =
            u8::from_str_radix(s, 16).map_err(|_| "bad hex in the cookie secret".to_string())?;
    }
    Ok(out)
}
