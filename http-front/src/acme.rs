//! Certificates from an ACME server (RFC 8555, through `instant-acme`) for the hosts of sites
//! with `acme = true`: one certificate per site (all its hosts), its key made by rcgen for
//! the order's CSR, kept in `[acme] state_dir` as `NAME.crt`/`NAME.key` (NAME: the site's
//! first host) beside the account (`account.json`).
//!
//! Only names the configuration gives sites are ever ordered — never a server name a client
//! sends, which would let anyone make us ask for certificates. The challenge is answered by
//! http-front itself: `http-01` on the plain listeners before any rule (a blocked source or
//! a deny rule must not fail validation), or `tls-alpn-01` on the TLS listeners (a handshake
//! offering only ALPN `acme-tls/1` gets a certificate that proves the key, RFC 8737, and the
//! connection ends there). A certificate is renewed at two thirds of its lifetime; a failed
//! order keeps the current one, waits `retry_secs` doubled per failure (at most an hour,
//! with jitter) and shows its error in `http-front ctl certs`.

use std::collections::HashMap;
use std::os::unix::fs::PermissionsExt as _;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use instant_acme::{
    Account, AccountCredentials, AuthorizationStatus, ChallengeType, Identifier, NewAccount,
    NewOrder, OrderStatus, RetryPolicy,
};
use rustls::pki_types::PrivateKeyDer;
use rustls::sign::CertifiedKey;

use crate::config::{Acme, AcmeChallenge};
pub use crate::tls::acme_state::{ACME_TLS_ALPN, AcmeState, HTTP01_PREFIX, Status, renew_all};
use crate::tls::acme_state::{lock, now_unix};

/// Why an order failed.
#[derive(Debug, thiserror::Error)]
pub enum AcmeError {
    /// The ACME server said no, or could not be reached.
    #[error("ACME: {0}")]
    Acme(#[from] instant_acme::Error),
    /// The state directory.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The error.
        source: std::io::Error,
    },
    /// Something else (an order in an unexpected state, a certificate that does not load).
    #[error("{0}")]
    Other(String),
}

fn io_err(path: &Path) -> impl FnOnce(std::io::Error) -> AcmeError + '_ {
    move |source| AcmeError::Io {
        path: path.to_path_buf(),
        source,
    }
}

/// Writes `data` to `path` through a temporary file and a rename, mode `mode`.
fn write_atomic(path: &Path, data: &[u8], mode: u32) -> Result<(), AcmeError> {
    shield::files::write_atomic(path, data, mode).map_err(io_err(path))
}

/// `f`, or a failure saying `what` of `directory` after `limit`.
async fn within<T>(
    limit: Duration,
    directory: &str,
    what: &str,
    f: impl std::future::Future<Output = Result<T, AcmeError>>,
) -> Result<T, AcmeError> {
    tokio::time::timeout(limit, f).await.map_err(|_| {
        AcmeError::Other(format!("{directory}: {what} within {} s", limit.as_secs()))
    })?
}

/// Seconds a certificate's start may lie ahead of our clock (a CA's clock, or ours, a little
/// off) before it is refused as not valid yet.
const CLOCK_SKEW: i64 = 86_400;

/// Writes a new pair over the old one: both files written and synced beside them first (a
/// full disk leaves the old pair whole), then renamed into place.
fn write_pair(crt: &Path, key: &Path, chain: &[u8], key_pem: &[u8]) -> Result<(), AcmeError> {
    use std::io::Write as _;
    use std::os::unix::fs::OpenOptionsExt as _;
    let staged = |p: &Path| {
        let mut s = p.as_os_str().to_owned();
        s.push(".new");
        PathBuf::from(s)
    };
    let (crt_new, key_new) = (staged(crt), staged(key));
    let stage = |p: &Path, data: &[u8], mode: u32| -> Result<(), AcmeError> {
        let r = std::fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(mode)
            .open(p)
            .and_then(|mut f| {
                f.set_permissions(std::fs::Permissions::from_mode(mode))?;
                f.write_all(data)?;
                f.sync_all()
            });
        r.map_err(io_err(p))
    };
    let r = stage(&key_new, key_pem, 0o600)
        .and_then(|()| stage(&crt_new, chain, 0o644))
        .and_then(|()| std::fs::rename(&key_new, key).map_err(io_err(key)))
        .and_then(|()| std::fs::rename(&crt_new, crt).map_err(io_err(crt)));
    if r.is_err() {
        let _ = std::fs::remove_file(&key_new);
        let _ = std::fs::remove_file(&crt_new);
    }
    r
}

/// The issued pair checked before anything is written: it loads, its key is the chain's, it
/// covers `names`, and it is valid now (an expired one, or one for other names, replaced the
/// good pair on disk and was served).
fn check_issued(
    chain: &str,
    key_pem: &str,
    names: &[String],
    now: i64,
) -> Result<(Arc<CertifiedKey>, crate::tls::LeafInfo), AcmeError> {
    let bad = |m: String| AcmeError::Other(format!("the issued certificate is refused: {m}"));
    let ck = shield::tls_pair::pair_from_pem(chain.as_bytes(), key_pem.as_bytes()).map_err(bad)?;
    let info = ck
        .end_entity_cert()
        .ok()
        .and_then(|d| crate::tls::leaf_info(d))
        .ok_or_else(|| bad("its leaf does not parse".into()))?;
    if let Some(n) = names.iter().find(|n| !info.dns_names.contains(n)) {
        return Err(bad(format!(
            "it does not name {n} (it names {:?})",
            info.dns_names
        )));
    }
    if info.not_after_unix <= now {
        return Err(bad(format!("it expired at {}", info.not_after)));
    }
    if info.not_before_unix > now + CLOCK_SKEW {
        return Err(bad("it is not valid yet".into()));
    }
    Ok((Arc::new(ck), info))
}

/// The account: from `account.json`, else created on the server and saved there (0600).
async fn account(cfg: &Acme) -> Result<Account, AcmeError> {
    let path = cfg.state_dir.join("account.json");
    let builder = || match &cfg.ca_file {
        Some(ca) => Account::builder_with_root(ca),
        None => Account::builder(),
    };
    if let Ok(text) = std::fs::read_to_string(&path) {
        // An account of another directory (staging kept after a switch to production) is
        // not used: a new one is made for the directory configured.
        let dir = serde_json::from_str::<serde_json::Value>(&text)
            .ok()
            .and_then(|v| {
                v.get("directory")
                    .and_then(|d| d.as_str())
                    .map(String::from)
            });
        if dir.as_deref().is_none_or(|d| d == cfg.directory) {
            let creds: AccountCredentials = serde_json::from_str(&text)
                .map_err(|e| AcmeError::Other(format!("{}: {e}", path.display())))?;
            return Ok(builder()?.from_credentials(creds).await?);
        }
        tracing::info!(was = dir.as_deref().unwrap_or("?"), now = %cfg.directory, "acme.directory changed: a new account is made there");
    }
    let contact: Vec<&str> = cfg.contact.iter().map(String::as_str).collect();
    let (account, creds) = builder()?
        .create(
            &NewAccount {
                contact: &contact,
                terms_of_service_agreed: true,
                only_return_existing: false,
            },
            cfg.directory.clone(),
            None,
        )
        .await?;
    let json = serde_json::to_vec_pretty(&creds).map_err(|e| AcmeError::Other(e.to_string()))?;
    write_atomic(&path, &json, 0o600)?;
    tracing::info!(id = account.id(), "ACME account created");
    Ok(account)
}

/// The certificate that proves `key_auth`'s digest for `name` (RFC 8737).
fn alpn_cert(name: &str, digest: &[u8]) -> Result<Arc<CertifiedKey>, AcmeError> {
    let mut params = rcgen::CertificateParams::new(vec![name.to_string()])
        .map_err(|e| AcmeError::Other(e.to_string()))?;
    params
        .custom_extensions
        .push(rcgen::CustomExtension::new_acme_identifier(digest));
    let key = rcgen::KeyPair::generate().map_err(|e| AcmeError::Other(e.to_string()))?;
    let cert = params
        .self_signed(&key)
        .map_err(|e| AcmeError::Other(e.to_string()))?;
    // Not from_der: its key check parses the certificate with webpki, which refuses the
    // critical acmeIdentifier extension this certificate exists to carry.
    let signer = crate::tls::provider()
        .key_provider
        .load_private_key(PrivateKeyDer::Pkcs8(key.serialize_der().into()))
        .map_err(|e| AcmeError::Other(e.to_string()))?;
    let ck = CertifiedKey::new(vec![cert.der().clone()], signer);
    Ok(Arc::new(ck))
}

/// Orders a certificate for `names`; its chain and key (PEM).
async fn order(
    account: &Account,
    names: &[String],
    challenge: AcmeChallenge,
    state: &AcmeState,
) -> Result<(String, String), AcmeError> {
    let ids: Vec<Identifier> = names.iter().map(|n| Identifier::Dns(n.clone())).collect();
    let mut order = account.new_order(&NewOrder::new(&ids)).await?;
    let mut opened_tokens = Vec::new();
    let mut opened_names = Vec::new();
    let result = async {
        let mut authzs = order.authorizations();
        while let Some(a) = authzs.next().await {
            let mut authz = a?;
            match authz.status {
                AuthorizationStatus::Pending => {}
                AuthorizationStatus::Valid => continue,
                s => return Err(AcmeError::Other(format!("authorization is {s:?}"))),
            }
            let ty = match challenge {
                AcmeChallenge::Http01 => ChallengeType::Http01,
                AcmeChallenge::TlsAlpn01 => ChallengeType::TlsAlpn01,
            };
            let mut ch = authz.challenge(ty.clone()).ok_or_else(|| {
                AcmeError::Other(format!("the server offers no {ty:?} challenge"))
            })?;
            let ka = ch.key_authorization();
            match challenge {
                AcmeChallenge::Http01 => {
                    let token = ch.token.clone();
                    let mut m = HashMap::clone(&state.tokens.load());
                    m.insert(token.clone(), ka.as_str().to_string());
                    state.tokens.store(Arc::new(m));
                    opened_tokens.push(token);
                }
                AcmeChallenge::TlsAlpn01 => {
                    let name = ch.identifier().to_string();
                    let cert = alpn_cert(&name, ka.digest().as_ref())?;
                    let mut m = HashMap::clone(&state.alpn_challenges.load());
                    m.insert(name.as_str().into(), cert);
                    state.alpn_challenges.store(Arc::new(m));
                    opened_names.push(name);
                }
            }
            ch.set_ready().await?;
        }
        let retry = RetryPolicy::new()
            .initial_delay(Duration::from_millis(250))
            .timeout(Duration::from_secs(90));
        let status = order.poll_ready(&retry).await?;
        if status != OrderStatus::Ready {
            return Err(AcmeError::Other(format!("order is {status:?}, not ready")));
        }
        let key_pem = order.finalize().await?;
        let chain = order.poll_certificate(&retry).await?;
        Ok((chain, key_pem))
    }
    .await;
    // The challenges close whatever happened.
    if !opened_tokens.is_empty() {
        let mut m = HashMap::clone(&state.tokens.load());
        for t in &opened_tokens {
            m.remove(t);
        }
        state.tokens.store(Arc::new(m));
    }
    if !opened_names.is_empty() {
        let mut m = HashMap::clone(&state.alpn_challenges.load());
        for n in &opened_names {
            m.remove(n.as_str());
        }
        state.alpn_challenges.store(Arc::new(m));
    }
    result
}

/// When a certificate from `not_before` to `not_after` is due: two thirds into its life.
fn renew_at(not_before: i64, not_after: i64) -> i64 {
    not_before + (not_after - not_before) * 2 / 3
}

/// The pair in `state_dir` for `key`, when it loads and covers `names`, with what its leaf says.
fn load_current(
    dir: &Path,
    key: &str,
    names: &[String],
) -> Option<(Arc<CertifiedKey>, crate::tls::LeafInfo)> {
    let crt = dir.join(format!("{key}.crt"));
    let ck = crate::tls::load_pair(&crt, &dir.join(format!("{key}.key"))).ok()?;
    let info = crate::tls::leaf_info(ck.end_entity_cert().ok()?)?;
    if !names.iter().all(|n| info.dns_names.contains(n)) {
        return None;
    }
    Some((Arc::new(ck), info))
}

/// The sites with `acme = true`: (first host, hosts).
fn wanted(front: &crate::front::Front) -> Vec<(String, Vec<String>)> {
    front
        .snapshot()
        .cfg
        .sites
        .iter()
        .filter(|s| s.acme)
        .map(|s| (s.hosts[0].clone(), s.hosts.clone()))
        .collect()
}

/// Runs the ACME manager until the runtime ends; see the module documentation.
pub async fn run(front: Arc<crate::front::Front>, cfg: Acme, state: Arc<AcmeState>) {
    if let Err(e) = std::fs::create_dir_all(&cfg.state_dir).and_then(|()| {
        std::fs::set_permissions(&cfg.state_dir, std::fs::Permissions::from_mode(0o700))
    }) {
        tracing::error!(dir = %cfg.state_dir.display(), error = %e, "acme.state_dir unusable; no ACME certificates");
        return;
    }
    // What is on disk serves at once; orders wait for their turn.
    for (key, names) in wanted(&front) {
        let mut st = Status {
            names: names.clone(),
            ..Status::default()
        };
        if let Some((ck, info)) = load_current(&cfg.state_dir, &key, &names) {
            st.next_unix = renew_at(info.not_before_unix, info.not_after_unix);
            st.current = Some(info);
            state.publish(&names, ck);
        } else if cfg.state_dir.join(format!("{key}.crt")).exists() {
            tracing::warn!(site = %key, dir = %cfg.state_dir.display(), "the certificate kept on disk does not load or does not cover the site's hosts: ordered anew");
        }
        lock(&state.status).insert(key, st);
    }
    let mut account_cache: Option<Account> = None;
    loop {
        let now = now_unix();
        let sites = wanted(&front);
        {
            // Sites added by a reload are due now; gone ones leave the status, and their
            // certificates the handshake.
            let keep: std::collections::HashSet<&str> = sites
                .iter()
                .flat_map(|(_, names)| names.iter().map(String::as_str))
                .collect();
            state.retain(&keep);
            let mut st = lock(&state.status);
            st.retain(|k, _| sites.iter().any(|(s, _)| s == k));
            for (key, names) in &sites {
                let e = st.entry(key.clone()).or_default();
                if e.names != *names {
                    e.names = names.clone();
                    e.next_unix = 0;
                }
            }
        }
        let due: Vec<(String, Vec<String>)> = sites
            .iter()
            .filter(|(k, _)| {
                lock(&state.status)
                    .get(k)
                    .is_some_and(|s| s.next_unix <= now)
            })
            .cloned()
            .collect();
        for (key, names) in due {
            let r = async {
                // Bounded: a server that takes a connection and never answers held every
                // renewal of every site for good.
                let account_limit = Duration::from_secs(cfg.timeout_secs);
                let order_limit = account_limit * 3;
                if account_cache.is_none() {
                    let a = within(account_limit, &cfg.directory, "no account", account(&cfg));
                    account_cache = Some(a.await?);
                }
                let account = account_cache.as_ref().expect("set above");
                let o = order(account, &names, cfg.challenge, &state);
                let (chain, key_pem) =
                    within(order_limit, &cfg.directory, "no certificate", o).await?;
                let issued = check_issued(&chain, &key_pem, &names, now_unix())?;
                let crt = cfg.state_dir.join(format!("{key}.crt"));
                let kp = cfg.state_dir.join(format!("{key}.key"));
                write_pair(&crt, &kp, chain.as_bytes(), key_pem.as_bytes())?;
                Ok::<_, AcmeError>(issued)
            }
            .await;
            let mut st = lock(&state.status);
            let s = st.entry(key.clone()).or_default();
            match r {
                Ok((ck, info)) => {
                    state.issued.fetch_add(1, Ordering::Relaxed);
                    // Never due again at once (a certificate of a very short life).
                    s.next_unix = renew_at(info.not_before_unix, info.not_after_unix)
                        .max(now_unix() + cfg.retry_secs.max(60) as i64);
                    s.current = Some(info);
                    s.last_error = None;
                    s.failures = 0;
                    state.publish(&names, ck);
                    tracing::info!(site = %key, names = ?names, "ACME certificate issued");
                }
                Err(e) => {
                    state.failed.fetch_add(1, Ordering::Relaxed);
                    s.failures = s.failures.saturating_add(1);
                    let base = cfg
                        .retry_secs
                        .saturating_mul(1 << (s.failures - 1).min(12))
                        .min(3600);
                    let jitter = rand::random_range(0..=base / 4);
                    s.next_unix = now_unix() + (base + jitter) as i64;
                    s.last_error = Some(e.to_string());
                    // A failed account load is retried fresh; an account the server no longer
                    // knows is made again (every order failed for good).
                    if matches!(e, AcmeError::Acme(_)) || matches!(e, AcmeError::Other(_)) {
                        account_cache = None;
                    }
                    if e.to_string().contains("accountDoesNotExist") {
                        let p = cfg.state_dir.join("account.json");
                        let _ = std::fs::rename(&p, cfg.state_dir.join("account.json.gone"));
                        tracing::warn!(
                            "the ACME server no longer knows our account: a new one is made"
                        );
                    }
                    let keeps = if s.current.is_some() {
                        "the current certificate stays"
                    } else {
                        "no certificate yet"
                    };
                    tracing::warn!(site = %key, error = %e, retry_in_s = base + jitter, "ACME order failed; {keeps}");
                }
            }
        }
        let next = lock(&state.status)
            .values()
            .map(|s| s.next_unix)
            .min()
            .unwrap_or(i64::MAX);
        let wait = Duration::from_secs((next - now_unix()).clamp(1, 3600) as u64);
        tokio::select! {
            _ = tokio::time::sleep(wait) => {}
            _ = state.wake.notified() => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renewal_is_two_thirds_into_the_life() {
        assert_eq!(renew_at(0, 90 * 86400), 60 * 86400);
    }

    /// The tests' "now", Unix seconds.
    fn base() -> i64 {
        rcgen::date_time_ymd(2027, 1, 15).unix_timestamp()
    }

    /// A self-signed pair for `names`, valid from `from` to `to` (Unix seconds, within a
    /// year of [`base`]).
    fn pair(names: &[&str], from: i64, to: i64) -> (String, String) {
        let mut p =
            rcgen::CertificateParams::new(names.iter().map(|n| n.to_string()).collect::<Vec<_>>())
                .unwrap();
        let at = |t: i64| {
            let b = rcgen::date_time_ymd(2027, 1, 15);
            let d = Duration::from_secs((t - base()).unsigned_abs());
            if t >= base() { b + d } else { b - d }
        };
        p.not_before = at(from);
        p.not_after = at(to);
        let k = rcgen::KeyPair::generate().unwrap();
        let c = p.self_signed(&k).unwrap();
        (c.pem(), k.serialize_pem())
    }

    /// What an ACME server hands back is checked before it is written or served: another
    /// key, other names, an expired or far-future certificate are refused (they replaced
    /// the good pair on disk, and an expired one was served).
    #[test]
    fn an_issued_certificate_is_checked_before_it_is_kept() {
        let now = base();
        let names = vec!["www.acme.test".to_string()];
        let (c, k) = pair(&["www.acme.test"], now - 60, now + 86400);
        assert!(check_issued(&c, &k, &names, now).is_ok());
        let (_, other_key) = pair(&["www.acme.test"], now - 60, now + 86400);
        let err = |chain: &str, key: &str| match check_issued(chain, key, &names, now) {
            Err(e) => e.to_string(),
            Ok(_) => "taken".into(),
        };
        assert!(err(&c, &other_key).contains("not the certificate's"));
        let (c, k) = pair(&["evil.test"], now - 60, now + 86400);
        assert!(err(&c, &k).contains("does not name www.acme.test"));
        let (c, k) = pair(&["www.acme.test"], now - 9000, now - 60);
        assert!(err(&c, &k).contains("expired"));
        let (c, k) = pair(&["www.acme.test"], now + 3 * 86400, now + 9 * 86400);
        assert!(err(&c, &k).contains("not valid yet"));
        // A start a little ahead of our clock (a CA's clock off by minutes) is taken.
        let (c, k) = pair(&["www.acme.test"], now + 600, now + 86400);
        assert!(check_issued(&c, &k, &names, now).is_ok());
    }

    /// A pair that cannot be written whole leaves the old one as it was.
    #[test]
    fn a_pair_not_written_whole_leaves_the_old_one() {
        let dir = tempfile::tempdir().unwrap();
        let (crt, key) = (dir.path().join("s.crt"), dir.path().join("s.key"));
        std::fs::write(&crt, "old crt").unwrap();
        std::fs::write(&key, "old key").unwrap();
        // The certificate's staging file cannot be made (a directory in its place).
        std::fs::create_dir(dir.path().join("s.crt.new")).unwrap();
        assert!(write_pair(&crt, &key, b"new crt", b"new key").is_err());
        assert_eq!(std::fs::read_to_string(&crt).unwrap(), "old crt");
        assert_eq!(std::fs::read_to_string(&key).unwrap(), "old key");
        assert!(
            !dir.path().join("s.key.new").exists(),
            "its staging file removed"
        );
        std::fs::remove_dir(dir.path().join("s.crt.new")).unwrap();
        write_pair(&crt, &key, b"new crt", b"new key").unwrap();
        assert_eq!(std::fs::read_to_string(&crt).unwrap(), "new crt");
        assert_eq!(std::fs::read_to_string(&key).unwrap(), "new key");
    }
}
