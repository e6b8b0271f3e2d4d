//! DNS Cookies (RFC 7873) with interoperable server cookies (RFC 9018): SipHash-2-4 over
//! the client cookie, version, timestamp and client address, keyed by a secret that
//! rotates while the previous one stays valid.
//!
//! Servers of one anycast set that share the secret accept each other's cookies.
//!
//! As a pipeline module ([`CookieCheck`], at `after_parse`): a query's cookie is checked and
//! a fresh server cookie made for the answer; a valid one exempts the query from the rate
//! defences after answering; a zone with `cookies = "require"` slips UDP queries without a
//! valid one (TC=1, or BADCOOKIE to a client that sent a cookie).

use std::net::IpAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use arc_swap::ArcSwap;
use siphasher::sip::SipHasher24;

/// Length of an RFC 9018 server cookie.
pub const SERVER_COOKIE_LEN: usize = 16;
/// A server cookie is valid for an hour after it was made (RFC 9018 §4.3).
const MAX_AGE_S: u32 = 3600;
/// ... and may run at most five minutes ahead of our clock.
const MAX_AHEAD_S: u32 = 300;

pub use crate::query::module::CookieStatus;

/// The secrets: the current one makes cookies, both are accepted.
#[derive(Debug, Clone)]
pub struct Secrets {
    current: [u8; 16],
    previous: Option<[u8; 16]>,
}

/// Cookie state shared by all workers.
pub struct Cookies {
    secrets: ArcSwap<Secrets>,
    /// Cookies checked and found valid.
    pub valid: AtomicU64,
    /// Cookies checked and found invalid.
    pub invalid: AtomicU64,
    /// Secret rotations.
    pub rotations: AtomicU64,
    /// UDP queries slipped because their zone requires a valid cookie.
    pub challenged: AtomicU64,
    /// The secrets come from the config: never rotated to random ones.
    configured: AtomicBool,
}

impl Cookies {
    /// Cookie state with `secret` (random when `None`) and the `previous` one still accepted.
    pub fn new(secret: Option<[u8; 16]>, previous: Option<[u8; 16]>) -> Arc<Cookies> {
        Arc::new(Cookies {
            secrets: ArcSwap::from_pointee(Secrets {
                current: secret.unwrap_or_else(rand::random),
                previous,
            }),
            valid: AtomicU64::new(0),
            invalid: AtomicU64::new(0),
            rotations: AtomicU64::new(0),
            challenged: AtomicU64::new(0),
            configured: AtomicBool::new(secret.is_some()),
        })
    }

    /// The secrets come from the config (shared by an anycast set): only a reload changes them.
    pub fn configured(&self) -> bool {
        self.configured.load(Ordering::Relaxed)
    }

    /// Makes a new secret current; the old one is still accepted until the next rotation.
    pub fn rotate(&self, next: Option<[u8; 16]>) {
        let cur = self.secrets.load();
        self.secrets.store(Arc::new(Secrets {
            current: next.unwrap_or_else(rand::random),
            previous: Some(cur.current),
        }));
        self.rotations.fetch_add(1, Ordering::Relaxed);
    }

    /// Installs configured secrets (a reload); false when they are the ones in force.
    pub fn set(&self, current: [u8; 16], previous: Option<[u8; 16]>) -> bool {
        let cur = self.secrets.load();
        if cur.current == current && cur.previous == previous {
            return false;
        }
        self.configured.store(true, Ordering::Relaxed);
        self.secrets.store(Arc::new(Secrets { current, previous }));
        self.rotations.fetch_add(1, Ordering::Relaxed);
        true
    }

    /// The secrets now in force (a worker keeps this between batches).
    pub fn secrets(&self) -> Arc<Secrets> {
        self.secrets.load_full()
    }
}

impl Cookies {
    /// Counters for `ctl stats` and /metrics.
    pub fn collect(&self, out: &mut shield::metrics::Samples) {
        let l = |a: &AtomicU64| a.load(Ordering::Relaxed);
        for (what, a) in [("valid", &self.valid), ("invalid", &self.invalid)] {
            out.counter(
                format!("cookies.{what}"),
                "dnsd_cookies_total",
                format!("result=\"{what}\""),
                "Server cookies checked, by result.",
                l(a),
            );
        }
        out.counter(
            "cookies.challenged",
            "dnsd_cookies_challenged_total",
            "",
            "UDP queries slipped (TC or BADCOOKIE) because their zone requires a valid cookie.",
            l(&self.challenged),
        );
        out.counter(
            "cookies.rotations",
            "dnsd_cookie_rotations_total",
            "",
            "Cookie secret rotations.",
            l(&self.rotations),
        );
    }
}

/// A worker's cookie module: the secrets in force (picked up once per batch).
pub struct CookieCheck {
    shared: Arc<super::Shared>,
    secrets: Option<Arc<Secrets>>,
}

impl CookieCheck {
    /// The module for `shared`'s cookies.
    pub fn new(shared: &Arc<super::Shared>) -> CookieCheck {
        let mut c = CookieCheck {
            shared: Arc::clone(shared),
            secrets: None,
        };
        c.refresh();
        c
    }

    /// Picks up rotated secrets.
    #[inline]
    pub fn refresh(&mut self) {
        if let Some(c) = &self.shared.cookies {
            self.secrets = Some(c.secrets());
        }
    }
}

impl crate::query::module::QueryModule for CookieCheck {
    #[inline(always)]
    fn after_parse(
        &mut self,
        env: &mut crate::query::module::Env,
        p: &mut crate::query::module::Parsed<'_>,
    ) -> crate::query::module::Step {
        use crate::config::defence::CookiePolicy;
        use crate::query::module::{CookieOut, Step};
        let (Some(secrets), Some(cookies)) = (&self.secrets, &self.shared.cookies) else {
            return Step::Continue;
        };
        if p.cookie_policy == CookiePolicy::Off {
            return Step::Continue;
        }
        if let Some((client, server)) = p.q.edns.and_then(|e| e.cookie(p.req)) {
            let now_s = (env.now_ms / 1000) as u32;
            p.cookie = secrets.check(client, server, p.src, now_s);
            match p.cookie {
                CookieStatus::Valid => {
                    cookies.valid.fetch_add(1, Ordering::Relaxed);
                    // A client that proved its address skips the rate defences.
                    p.exempt = true;
                }
                CookieStatus::Invalid => {
                    cookies.invalid.fetch_add(1, Ordering::Relaxed);
                }
                _ => {}
            }
            let mut out = CookieOut {
                client: [0; 8],
                server: [0; 16],
            };
            out.client.copy_from_slice(client);
            secrets.make(client, p.src, now_s, &mut out.server);
            p.cookie_out = Some(out);
        }
        if p.transport == crate::query::module::Transport::Udp
            && p.cookie_policy == CookiePolicy::Require
            && p.cookie != CookieStatus::Valid
        {
            // RFC 7873 §5.2.3: without a valid server cookie, BADCOOKIE (with a fresh one)
            // or, to a client without cookies, TC=1 so that it comes back over TCP.
            cookies.challenged.fetch_add(1, Ordering::Relaxed);
            env.recorder.record(
                p.tenant,
                p.src,
                shield::events::Action::Challenged,
                p.evidence(),
                super::reason::COOKIE,
            );
            return Step::Slip;
        }
        Step::Continue
    }
}

/// The 8-byte hash of RFC 9018 §4.4 for `client` cookie, header (version, reserved,
/// timestamp) and client address.
fn hash(secret: &[u8; 16], client: &[u8], head: &[u8; 8], ip: IpAddr) -> [u8; 8] {
    use std::hash::Hasher;
    let mut h = SipHasher24::new_with_key(secret);
    h.write(client);
    h.write(head);
    match ip {
        IpAddr::V4(a) => h.write(&a.octets()),
        IpAddr::V6(a) => match a.to_ipv4_mapped() {
            Some(v4) => h.write(&v4.octets()),
            None => h.write(&a.octets()),
        },
    }
    h.finish().to_le_bytes()
}

impl Secrets {
    /// The secret that makes cookies.
    pub fn current(&self) -> [u8; 16] {
        self.current
    }

    /// The previous secret, still accepted.
    pub fn previous(&self) -> Option<[u8; 16]> {
        self.previous
    }

    /// Checks the server cookie a client returned.
    pub fn check(&self, client: &[u8], server: &[u8], ip: IpAddr, now_s: u32) -> CookieStatus {
        if server.is_empty() {
            return CookieStatus::ClientOnly;
        }
        if server.len() != SERVER_COOKIE_LEN || server[0] != 1 {
            return CookieStatus::Invalid;
        }
        let ts = u32::from_be_bytes([server[4], server[5], server[6], server[7]]);
        // Serial-number arithmetic on the 32-bit timestamp (RFC 1982).
        let age = now_s.wrapping_sub(ts);
        let ahead = ts.wrapping_sub(now_s);
        if age > MAX_AGE_S && ahead > MAX_AHEAD_S {
            return CookieStatus::Invalid;
        }
        let head: [u8; 8] = server[..8].try_into().expect("8 bytes");
        let mine = |s: &[u8; 16]| hash(s, client, &head, ip) == server[8..16];
        if mine(&self.current) || self.previous.as_ref().is_some_and(mine) {
            CookieStatus::Valid
        } else {
            CookieStatus::Invalid
        }
    }

    /// Writes a fresh server cookie for `client` and `ip` into `out`.
    pub fn make(&self, client: &[u8], ip: IpAddr, now_s: u32, out: &mut [u8; SERVER_COOKIE_LEN]) {
        let mut head = [0u8; 8];
        head[0] = 1;
        head[4..8].copy_from_slice(&now_s.to_be_bytes());
        out[..8].copy_from_slice(&head);
        out[8..].copy_from_slice(&hash(&self.current, client, &head, ip));
    }
}

pub use crate::config::defence::parse_secret;

#[cfg(test)]
mod tests {
    use super::*;

    fn hex(s: &str) -> Vec<u8> {
        (0..s.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
            .collect()
    }

    #[test]
    fn rfc9018_appendix_a1_vector() {
        // A.1: a resolver (client) learning a server cookie.
        let secret = parse_secret("e5e973e5a6b2a43f48e7dc849e37bfcf").unwrap();
        let s = Secrets {
            current: secret,
            previous: None,
        };
        let client = hex("2464c4abcf10c957");
        let ip: IpAddr = "198.51.100.100".parse().unwrap();
        let mut out = [0u8; 16];
        s.make(&client, ip, 1559731985, &mut out);
        assert_eq!(out.to_vec(), hex("010000005cf79f111f8130c3eee29480"));
        assert_eq!(
            s.check(&client, &out, ip, 1559731985 + 10),
            CookieStatus::Valid
        );
    }

    #[test]
    fn ipv6_and_mapped_ipv4() {
        let s = Secrets {
            current: [3u8; 16],
            previous: None,
        };
        let client = hex("22681ab97d52c298");
        let ip: IpAddr = "2001:db8:220:1:59de:d0f4:8769:82b8".parse().unwrap();
        let mut out = [0u8; 16];
        s.make(&client, ip, 1559734385, &mut out);
        assert_eq!(s.check(&client, &out, ip, 1559734385), CookieStatus::Valid);
        // An IPv4 client seen on a dual-stack socket hashes as IPv4.
        let v4: IpAddr = "192.0.2.7".parse().unwrap();
        let mapped: IpAddr = "::ffff:192.0.2.7".parse().unwrap();
        s.make(&client, v4, 7, &mut out);
        assert_eq!(s.check(&client, &out, mapped, 7), CookieStatus::Valid);
    }

    #[test]
    fn stale_forged_rotated() {
        let c = Cookies::new(None, None);
        let client = [7u8; 8];
        let ip: IpAddr = "192.0.2.1".parse().unwrap();
        let mut out = [0u8; 16];
        c.secrets().make(&client, ip, 1000, &mut out);
        let s = c.secrets();
        assert_eq!(s.check(&client, &out, ip, 1000), CookieStatus::Valid);
        // Another address, another client cookie, a flipped bit: all invalid.
        assert_eq!(
            s.check(&client, &out, "192.0.2.2".parse().unwrap(), 1000),
            CookieStatus::Invalid
        );
        assert_eq!(s.check(&[8u8; 8], &out, ip, 1000), CookieStatus::Invalid);
        let mut bad = out;
        bad[15] ^= 1;
        assert_eq!(s.check(&client, &bad, ip, 1000), CookieStatus::Invalid);
        // Too old, too far ahead.
        assert_eq!(
            s.check(&client, &out, ip, 1000 + 3601),
            CookieStatus::Invalid
        );
        assert_eq!(
            s.check(&client, &out, ip, 1000 - 301),
            CookieStatus::Invalid
        );
        // After one rotation still valid, after two not.
        c.rotate(None);
        assert_eq!(
            c.secrets().check(&client, &out, ip, 1000),
            CookieStatus::Valid
        );
        c.rotate(None);
        assert_eq!(
            c.secrets().check(&client, &out, ip, 1000),
            CookieStatus::Invalid
        );
        assert_eq!(s.check(&client, &[], ip, 1000), CookieStatus::ClientOnly);
        assert_eq!(
            s.check(&client, &out[..15], ip, 1000),
            CookieStatus::Invalid
        );
    }
}
