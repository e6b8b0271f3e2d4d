//! What ACME ([`crate::acme`]) shares with the handshake and request paths: issued
//! certificates by name, open tls-alpn-01 and http-01 challenges, each site's status for
//! `ctl certs` and `/metrics`.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{SystemTime, UNIX_EPOCH};

use arc_swap::ArcSwap;
use rustls::sign::CertifiedKey;
use shield::metrics::{Samples, Source};

/// The path prefix of http-01 challenges.
pub const HTTP01_PREFIX: &str = "/.well-known/acme-challenge/";

/// The ALPN protocol of tls-alpn-01 validation (RFC 8737).
pub const ACME_TLS_ALPN: &[u8] = b"acme-tls/1";

/// Where one site's certificate stands.
#[derive(Clone, Debug, Default)]
pub struct Status {
    /// The names it covers.
    pub names: Vec<String>,
    /// The current certificate's issuer and expiry (none yet).
    pub current: Option<crate::tls::LeafInfo>,
    /// When the next order is due (seconds since the epoch).
    pub next_unix: i64,
    /// The last failure, cleared by a success.
    pub last_error: Option<String>,
    /// Failures in a row.
    pub failures: u32,
}

/// What the ACME manager shares with the handshake and request paths.
#[derive(Default)]
pub struct AcmeState {
    /// Issued certificates by host name.
    pub certs: ArcSwap<HashMap<Box<str>, Arc<CertifiedKey>>>,
    /// tls-alpn-01 certificates by host name, while their challenge is open.
    pub alpn_challenges: ArcSwap<HashMap<Box<str>, Arc<CertifiedKey>>>,
    /// http-01 key authorizations by token, while their challenge is open.
    pub tokens: ArcSwap<HashMap<String, String>>,
    /// By the site's first host.
    pub status: Mutex<HashMap<String, Status>>,
    /// Wakes the manager (a reload, `ctl certs renew`).
    pub wake: tokio::sync::Notify,
    pub(crate) issued: AtomicU64,
    pub(crate) failed: AtomicU64,
}

impl std::fmt::Debug for AcmeState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AcmeState").finish_non_exhaustive()
    }
}

pub(crate) fn now_unix() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs() as i64)
}

pub(crate) fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl AcmeState {
    /// The key authorization for http-01 `path` (under [`HTTP01_PREFIX`]), while it is open.
    pub fn http01(&self, path: &str) -> Option<String> {
        let token = path.strip_prefix(HTTP01_PREFIX)?;
        self.tokens.load().get(token).cloned()
    }

    /// `ctl certs`: one line per ACME site.
    pub fn describe(&self) -> String {
        let st = lock(&self.status);
        let mut keys: Vec<&String> = st.keys().collect();
        keys.sort();
        let mut out = format!(
            "\nACME {:<34} {:<26} {:<20} {:<32} LAST ERROR\n",
            "NAME", "EXPIRES", "NEXT RENEWAL", "ISSUER"
        );
        for k in keys {
            let s = &st[k];
            let (exp, issuer) = s.current.as_ref().map_or(("-".into(), "-".into()), |c| {
                (c.not_after.clone(), c.issuer.clone())
            });
            let next = if s.next_unix <= now_unix() {
                "now".to_string()
            } else {
                format!("in {} s", s.next_unix - now_unix())
            };
            out.push_str(&format!(
                "     {:<34} {exp:<26} {next:<20} {issuer:<32} {}\n",
                s.names.join(","),
                s.last_error.as_deref().unwrap_or("-")
            ));
        }
        out
    }

    /// Stops serving the certificates of every host but those of `keep` (sites a reload
    /// removed kept theirs in the handshake).
    pub(crate) fn retain(&self, keep: &std::collections::HashSet<&str>) {
        let cur = self.certs.load();
        if cur.keys().all(|k| keep.contains(&**k)) {
            return;
        }
        let m: HashMap<Box<str>, Arc<CertifiedKey>> = cur
            .iter()
            .filter(|(k, _)| keep.contains(&***k))
            .map(|(k, v)| (k.clone(), Arc::clone(v)))
            .collect();
        self.certs.store(Arc::new(m));
    }

    pub(crate) fn publish(&self, names: &[String], ck: Arc<CertifiedKey>) {
        let mut m = HashMap::clone(&self.certs.load());
        for n in names {
            m.insert(n.as_str().into(), Arc::clone(&ck));
        }
        self.certs.store(Arc::new(m));
    }
}

/// `/metrics` of ACME: orders issued and failed.
impl Source for AcmeState {
    fn collect(&self, out: &mut Samples) {
        for (what, a) in [("issued", &self.issued), ("failed", &self.failed)] {
            out.counter(
                format!("acme.orders.{what}"),
                "http_front_acme_orders_total",
                format!("result=\"{what}\""),
                "ACME orders: certificates issued, orders failed (the current certificate kept).",
                a.load(Ordering::Relaxed),
            );
        }
        let st = lock(&self.status);
        let soonest = st
            .values()
            .filter_map(|s| s.current.as_ref().map(|c| c.not_after_unix))
            .min()
            .unwrap_or(0);
        out.gauge(
            "acme.soonest_expiry",
            "http_front_acme_soonest_expiry_seconds",
            "",
            "When the first ACME certificate expires (seconds since the epoch; 0: none yet).",
            soonest.max(0) as u64,
        );
    }
}

/// `ctl certs renew`: every ACME site due now.
pub fn renew_all(state: &AcmeState) {
    for s in lock(&state.status).values_mut() {
        s.next_unix = 0;
        s.failures = 0;
    }
    state.wake.notify_one();
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn http01_answers_open_tokens_only() {
        let s = AcmeState::default();
        s.tokens.store(Arc::new(HashMap::from([(
            "tok".to_string(),
            "tok.thumb".to_string(),
        )])));
        assert_eq!(
            s.http01("/.well-known/acme-challenge/tok").as_deref(),
            Some("tok.thumb")
        );
        assert_eq!(s.http01("/.well-known/acme-challenge/other"), None);
        assert_eq!(s.http01("/tok"), None);
    }
}
