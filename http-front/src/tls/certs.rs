//! Certificates chosen by the ClientHello's server name: an index prepared once per
//! configuration (exact names, then one-label wildcards), else the default pair or a refused
//! handshake (`[tls] unknown_sni`).
//!
//! Pairs come from the config (`[tls] cert`/`key`, the default; `[[site]] cert`/`key`, read
//! with the config, a bad one refusing it) and from `[tls] cert_dir`: `NAME.crt` + `NAME.key`
//! (+ `NAME.ocsp`), `_wildcard.NAME.crt` for `*.NAME`. A directory of thousands is only
//! listed at start — the listeners open at once — and its pairs are read by a background
//! thread, or by the first handshake that asks for one before that thread reached it. On
//! reload only files whose size, mtime or inode changed are read again, before the new index
//! is published; a changed pair that fails keeps the one that served, and the reload reply
//! names its files. A site's own pair wins over the directory's for the same name.

use std::collections::HashMap;
use std::os::unix::fs::MetadataExt as _;
use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};
use std::time::Instant;

use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;

use crate::counters::{Counter, Counters};

/// Prefix of a wildcard pair's file name in `cert_dir`: `_wildcard.example.com.crt` is `*.example.com`.
pub const WILDCARD_PREFIX: &str = "_wildcard.";

/// Pairs the configuration names itself, read with it.
#[derive(Clone, Debug, Default)]
pub struct Fixed {
    /// `[tls] cert`/`key`: served to clients without a known server name (`unknown_sni = "default"`).
    pub default: Option<Arc<CertifiedKey>>,
    /// `[[site]] cert`/`key`, under each host the site names (`example.com`, `*.example.com`).
    pub sites: Vec<(String, Arc<CertifiedKey>)>,
}

/// What identifies one version of a file: a changed file has another.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Stamp {
    len: u64,
    mtime_ns: i128,
    ino: u64,
}

fn stamp(p: &Path) -> Option<Stamp> {
    let m = std::fs::metadata(p).ok()?;
    Some(Stamp {
        len: m.len(),
        mtime_ns: i128::from(m.mtime()) * 1_000_000_000 + i128::from(m.mtime_nsec()),
        ino: m.ino(),
    })
}

/// One pair of `cert_dir`, read at most once.
#[derive(Debug)]
pub struct Slot {
    /// The file name without `.crt`: `example.com`, `_wildcard.example.com`.
    pub stem: String,
    /// The certificate chain's file.
    pub crt: PathBuf,
    /// The key's file.
    pub key: PathBuf,
    stamps: [Option<Stamp>; 3],
    loaded: OnceLock<Result<Arc<CertifiedKey>, String>>,
}

impl Slot {
    fn new(stem: String, crt: PathBuf, key: PathBuf) -> Slot {
        let stamps = [stamp(&crt), stamp(&key), stamp(&super::ocsp_path(&crt))];
        Slot {
            stem,
            crt,
            key,
            stamps,
            loaded: OnceLock::new(),
        }
    }

    /// The pair, read now unless it was (a failure is logged and counted once).
    pub fn get(&self, counters: &Counters) -> Result<&Arc<CertifiedKey>, &str> {
        self.loaded
            .get_or_init(|| match super::load_pair(&self.crt, &self.key) {
                Ok(ck) => match self.uncovered(&ck) {
                    // Served for a name its certificate does not name, every client that
                    // checks refuses it (nginx does not look either): refused, and said.
                    Some(e) => {
                        counters.bump(Counter::TlsCertErrors);
                        tracing::error!(error = %e, "certificate pair refused");
                        Err(e)
                    }
                    None => {
                        counters.bump(Counter::TlsCertsRead);
                        Ok(Arc::new(ck))
                    }
                },
                Err(e) => {
                    counters.bump(Counter::TlsCertErrors);
                    tracing::error!(error = %e, "certificate pair refused");
                    Err(e.to_string())
                }
            })
            .as_ref()
            .map_err(String::as_str)
    }

    /// Why the pair's certificate does not cover the name its file stands for (`None`: it
    /// does, or the name or the certificate cannot be read here).
    fn uncovered(&self, ck: &CertifiedKey) -> Option<String> {
        let (name, wild) = name_of(&self.stem).ok()?;
        let leaf = super::leaf_info(ck.end_entity_cert().ok()?)?;
        let parent = name.split_once('.').map(|(_, p)| p);
        let covered = leaf.dns_names.iter().any(|n| match n.strip_prefix("*.") {
            Some(under) if wild => under == name,
            Some(under) => Some(under) == parent,
            None => !wild && *n == name,
        });
        (!covered).then(|| {
            format!(
                "{}: its certificate does not name {}{name} (it names {})",
                self.crt.display(),
                if wild { "*." } else { "" },
                if leaf.dns_names.is_empty() {
                    "no DNS name".to_string()
                } else {
                    leaf.dns_names.join(", ")
                }
            )
        })
    }

    /// Whether it has been read (well or not).
    pub fn is_read(&self) -> bool {
        self.loaded.get().is_some()
    }

    fn same_files(&self, other: &Slot) -> bool {
        self.crt == other.crt && self.key == other.key && self.stamps == other.stamps
    }
}

#[derive(Clone, Debug)]
enum Entry {
    Fixed(Arc<CertifiedKey>),
    Dir(Arc<Slot>),
}

impl Entry {
    fn get(&self, counters: &Counters) -> Option<Arc<CertifiedKey>> {
        match self {
            Entry::Fixed(ck) => Some(Arc::clone(ck)),
            Entry::Dir(s) => s.get(counters).ok().cloned(),
        }
    }
}

/// Chooses a handshake's certificate; see the module documentation.
pub struct Resolver {
    exact: HashMap<Box<str>, Entry>,
    /// `*.example.com` under `example.com`.
    wild: HashMap<Box<str>, Entry>,
    default: Option<Arc<CertifiedKey>>,
    refuse_unknown: bool,
    /// `cert_dir`'s pairs by stem, for the next reload.
    slots: HashMap<String, Arc<Slot>>,
    /// ACME's certificates and open tls-alpn-01 challenges.
    acme: Option<Arc<crate::tls::acme_state::AcmeState>>,
    counters: Arc<Counters>,
}

impl std::fmt::Debug for Resolver {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Resolver")
            .field("exact", &self.exact.len())
            .field("wild", &self.wild.len())
            .field("default", &self.default.is_some())
            .finish_non_exhaustive()
    }
}

/// How the warning of a `cert_dir` pair that does not load begins (a reload reply and
/// `--check` fail on it; the last good pair, if any, keeps serving).
pub const REFUSED_PAIR: &str = "certificate pair refused: ";

/// A prepared index, with what building it noticed.
#[derive(Debug)]
pub struct Built {
    /// The index.
    pub resolver: Arc<Resolver>,
    /// Pairs skipped or kept from before, by file name (for the log and the reload reply).
    pub warnings: Vec<String>,
    /// `cert_dir` pairs not read yet (start: for [`read_in_background`]).
    pub unread: Vec<Arc<Slot>>,
}

/// How `[tls]` asks for certificates to be found.
#[derive(Clone, Copy, Debug)]
pub struct Options<'a> {
    /// `[tls] cert_dir`.
    pub cert_dir: Option<&'a Path>,
    /// `[tls] unknown_sni = "refuse"`.
    pub refuse_unknown: bool,
    /// Read new and changed pairs of `cert_dir` now (reload), else leave them unread (start).
    pub read_now: bool,
    /// ACME's certificates (after exact names, before wildcards) and tls-alpn-01 challenges.
    pub acme: Option<&'a Arc<crate::tls::acme_state::AcmeState>>,
}

/// The name a `cert_dir` file stem stands for: (name, is a wildcard), or why it is skipped.
fn name_of(stem: &str) -> Result<(String, bool), &'static str> {
    let lower = stem.to_ascii_lowercase();
    let (name, wild) = match lower.strip_prefix(WILDCARD_PREFIX) {
        Some(rest) => (rest.to_string(), true),
        None => (lower, false),
    };
    if name.is_empty()
        || name.len() > 253
        || name.starts_with('.')
        || name.ends_with('.')
        || name.contains("..")
        || !name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'.')
    {
        return Err("not a host name");
    }
    Ok((name, wild))
}

/// A `cert_dir` pair found: (stem, `NAME.crt`, `NAME.key`).
type Found = (String, PathBuf, PathBuf);

/// `NAME.crt` files of `dir` with their `NAME.key`, sorted by name; and warnings for lone files.
fn scan(dir: &Path) -> std::io::Result<(Vec<Found>, Vec<String>)> {
    let mut out = Vec::new();
    let mut warnings = Vec::new();
    for e in std::fs::read_dir(dir)? {
        let e = e?;
        let fname = e.file_name();
        let Some(fname) = fname.to_str() else {
            continue;
        };
        let Some(stem) = fname.strip_suffix(".crt") else {
            continue;
        };
        if stem.starts_with('.') {
            continue;
        }
        let crt = e.path();
        let key = dir.join(format!("{stem}.key"));
        if !key.exists() {
            warnings.push(format!(
                "{}: no {} beside it; skipped",
                crt.display(),
                key.display()
            ));
            continue;
        }
        out.push((stem.to_string(), crt, key));
    }
    out.sort();
    Ok((out, warnings))
}

/// Prepares the index of `fixed` and `opts.cert_dir`, reusing `prev`'s pairs whose files did not change.
pub fn build(
    fixed: &Fixed,
    opts: Options<'_>,
    prev: Option<&Resolver>,
    counters: Arc<Counters>,
) -> Built {
    let mut exact: HashMap<Box<str>, Entry> = HashMap::new();
    let mut wild: HashMap<Box<str>, Entry> = HashMap::new();
    let mut slots: HashMap<String, Arc<Slot>> = HashMap::new();
    let mut warnings = Vec::new();
    let mut unread = Vec::new();
    if let Some(dir) = opts.cert_dir {
        match scan(dir) {
            Err(e) => {
                warnings.push(format!(
                    "{}: {e}; keeping the certificates read from it before",
                    dir.display()
                ));
                if let Some(p) = prev {
                    slots.extend(p.slots.iter().map(|(k, v)| (k.clone(), Arc::clone(v))));
                }
            }
            Ok((found, w)) => {
                warnings.extend(w);
                for (stem, crt, key) in found {
                    let old = prev.and_then(|p| p.slots.get(&stem));
                    let fresh = Slot::new(stem.clone(), crt, key);
                    let slot = match old {
                        Some(o) if o.same_files(&fresh) => Arc::clone(o),
                        _ if !opts.read_now => Arc::new(fresh),
                        _ => match fresh.get(&counters) {
                            Ok(_) => Arc::new(fresh),
                            Err(e) => match old {
                                Some(o) => {
                                    warnings.push(format!(
                                        "{REFUSED_PAIR}{e}; the pair read before keeps serving {stem}"
                                    ));
                                    Arc::clone(o)
                                }
                                None => {
                                    warnings.push(format!(
                                        "{REFUSED_PAIR}{e}; {stem} has no certificate"
                                    ));
                                    continue;
                                }
                            },
                        },
                    };
                    if !slot.is_read() {
                        unread.push(Arc::clone(&slot));
                    }
                    slots.insert(stem, slot);
                }
            }
        }
    }
    // In file-name order, so that two files naming one host (`A.test.crt`, `a.test.crt`)
    // resolve the same way on every node: the first serves, the other is named.
    let mut stems: Vec<&String> = slots.keys().collect();
    stems.sort();
    for stem in stems {
        let slot = &slots[stem];
        let (map, name) = match name_of(stem) {
            Ok((name, false)) => (&mut exact, name),
            Ok((name, true)) => (&mut wild, name),
            Err(why) => {
                warnings.push(format!("{}: {why}; skipped", slot.crt.display()));
                continue;
            }
        };
        if let Some(Entry::Dir(first)) = map.get(name.as_str()) {
            warnings.push(format!(
                "{}: names the same host as {}; skipped",
                slot.crt.display(),
                first.crt.display()
            ));
            continue;
        }
        map.insert(name.into(), Entry::Dir(Arc::clone(slot)));
    }
    // Expired or not yet valid leaves are served (as nginx serves them) but said: clients
    // refuse them.
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs() as i64);
    let fixed_named = fixed
        .sites
        .iter()
        .map(|(h, ck)| (h.clone(), ck))
        .chain(fixed.default.iter().map(|ck| ("(default)".to_string(), ck)));
    let read_named = slots.values().filter_map(|s| match s.loaded.get() {
        Some(Ok(ck)) => Some((s.crt.display().to_string(), ck)),
        _ => None,
    });
    for (what, ck) in fixed_named.chain(read_named) {
        if let Some(why) = shield::tls_pair::out_of_validity(ck, now) {
            warnings.push(format!("{what}: the certificate {why}"));
        }
    }
    for (host, ck) in &fixed.sites {
        let e = Entry::Fixed(Arc::clone(ck));
        match host.strip_prefix("*.") {
            Some(parent) => wild.insert(parent.into(), e),
            None => exact.insert(host.as_str().into(), e),
        };
    }
    Built {
        resolver: Arc::new(Resolver {
            exact,
            wild,
            default: fixed.default.clone(),
            refuse_unknown: opts.refuse_unknown,
            slots,
            acme: opts.acme.cloned(),
            counters,
        }),
        warnings,
        unread,
    }
}

/// Reads `slots` on a thread of their own (a handshake that needs one first reads it itself);
/// logs how long the lot took.
pub fn read_in_background(slots: Vec<Arc<Slot>>, counters: Arc<Counters>) {
    if slots.is_empty() {
        return;
    }
    let spawned = std::thread::Builder::new()
        .name("cert-reader".into())
        .spawn(move || {
            let t = Instant::now();
            let n = slots.len();
            let failed = slots.iter().filter(|s| s.get(&counters).is_err()).count();
            tracing::info!(
                pairs = n,
                failed,
                ms = t.elapsed().as_millis() as u64,
                "cert_dir read"
            );
        });
    if let Err(e) = spawned {
        tracing::warn!(error = %e, "no thread to read cert_dir ahead: handshakes read their pairs");
    }
}

impl Resolver {
    /// The pair for server name `name` (lower case): exact, ACME's, then `*.` its parent.
    pub fn find(&self, name: &str) -> Option<Arc<CertifiedKey>> {
        if let Some(ck) = self.exact.get(name).and_then(|e| e.get(&self.counters)) {
            return Some(ck);
        }
        if let Some(ck) = self
            .acme
            .as_ref()
            .and_then(|a| a.certs.load().get(name).cloned())
        {
            return Some(ck);
        }
        let (_, parent) = name.split_once('.')?;
        self.wild.get(parent).and_then(|e| e.get(&self.counters))
    }

    /// Whether ACME validation handshakes are answered (ALPN `acme-tls/1` offered).
    pub fn has_acme(&self) -> bool {
        self.acme.is_some()
    }

    /// Names indexed (exact and wildcard), and how many `cert_dir` pairs were read so far.
    pub fn stats(&self) -> (usize, usize) {
        (
            self.exact.len() + self.wild.len(),
            self.slots.values().filter(|s| s.is_read()).count(),
        )
    }

    /// One line per name (exact, wildcard, then the default pair): the name, the leaf's
    /// expiry and issuer, and where it comes from (`config`, or its file in `cert_dir`).
    pub fn describe(&self) -> String {
        let row = |name: String, e: &Entry| {
            let (ck, src) = match e {
                Entry::Fixed(ck) => (Ok(Arc::clone(ck)), "config".to_string()),
                Entry::Dir(s) => (
                    match s.loaded.get() {
                        None => Err("not read yet".to_string()),
                        Some(Err(e)) => Err(format!("refused: {e}")),
                        Some(Ok(ck)) => Ok(Arc::clone(ck)),
                    },
                    s.crt.display().to_string(),
                ),
            };
            let now = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_secs() as i64);
            let (expires, issuer) = match ck {
                Ok(ck) => match ck.end_entity_cert().ok().and_then(|c| super::leaf_info(c)) {
                    Some(i) if now > i.not_after_unix => {
                        (format!("{} EXPIRED", i.not_after), i.issuer)
                    }
                    Some(i) if now < i.not_before_unix => {
                        (format!("{} NOT YET VALID", i.not_after), i.issuer)
                    }
                    Some(i) => (i.not_after, i.issuer),
                    None => ("?".into(), "?".into()),
                },
                Err(why) => ("-".into(), format!("({why})")),
            };
            (name, expires, issuer, src)
        };
        let mut rows: Vec<(String, String, String, String)> = self
            .exact
            .iter()
            .map(|(k, e)| row(k.to_string(), e))
            .chain(self.wild.iter().map(|(k, e)| row(format!("*.{k}"), e)))
            .collect();
        rows.sort();
        if let Some(d) = &self.default {
            let mut r = row("(default)".into(), &Entry::Fixed(Arc::clone(d)));
            if self.refuse_unknown {
                r.0 = "(default, unused: unknown_sni = refuse)".into();
            }
            rows.push(r);
        }
        let mut out = format!("{:<40} {:<26} {:<32} SOURCE\n", "NAME", "EXPIRES", "ISSUER");
        for (n, e, i, s) in rows {
            out.push_str(&format!("{n:<40} {e:<26} {i:<32} {s}\n"));
        }
        if let Some(a) = &self.acme {
            out.push_str(&a.describe());
        }
        out
    }
}

impl ResolvesServerCert for Resolver {
    fn resolve(&self, hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        // A validation handshake offers acme-tls/1 alone (RFC 8737 §3); one offering h2 too
        // is a client's, never served the challenge's certificate.
        if let Some(acme) = &self.acme
            && hello.alpn().is_some_and(|mut p| {
                p.next() == Some(crate::tls::acme_state::ACME_TLS_ALPN) && p.next().is_none()
            })
        {
            // A validation handshake (RFC 8737): the challenge's certificate, or nothing.
            let name = hello.server_name()?.to_ascii_lowercase();
            return acme.alpn_challenges.load().get(name.as_str()).cloned();
        }
        if let Some(name) = hello.server_name() {
            let found = if name.bytes().any(|b| b.is_ascii_uppercase()) {
                self.find(&name.to_ascii_lowercase())
            } else {
                self.find(name)
            };
            if found.is_some() {
                self.counters.bump(Counter::TlsCertBySni);
                return found;
            }
        }
        match &self.default {
            Some(d) if !self.refuse_unknown => {
                self.counters.bump(Counter::TlsCertDefault);
                Some(Arc::clone(d))
            }
            _ => {
                self.counters.bump(Counter::TlsCertRefused);
                None
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The index of `dir` alone, its pairs read now when `read_now`.
    fn build_dir(dir: &Path, read_now: bool) -> Built {
        build(
            &Fixed::default(),
            Options {
                cert_dir: Some(dir),
                refuse_unknown: true,
                read_now,
                acme: None,
            },
            None,
            Arc::default(),
        )
    }

    #[test]
    fn two_files_for_one_host_resolve_by_file_name_order() {
        let dir = tempfile::tempdir().unwrap();
        for stem in ["b.test", "B.test", "a.test"] {
            std::fs::write(dir.path().join(format!("{stem}.crt")), "x").unwrap();
            std::fs::write(dir.path().join(format!("{stem}.key")), "x").unwrap();
        }
        let built = build_dir(dir.path(), false);
        assert_eq!(built.resolver.exact.len(), 2);
        let Entry::Dir(s) = &built.resolver.exact["b.test"] else {
            panic!("not from the directory")
        };
        assert_eq!(s.stem, "B.test", "\"B\" sorts before \"b\"");
        assert!(
            built
                .warnings
                .iter()
                .any(|w| w.contains("b.test.crt: names the same host as")),
            "{:?}",
            built.warnings
        );
    }

    /// A pair whose certificate does not name the host its file stands for is refused at
    /// reading, with what it names; a wildcard certificate covers a host one label below.
    #[test]
    fn a_pair_is_served_only_for_a_name_its_certificate_covers() {
        let dir = tempfile::tempdir().unwrap();
        let write = |stem: &str, names: &[&str]| {
            let p = rcgen::CertificateParams::new(
                names.iter().map(|n| n.to_string()).collect::<Vec<_>>(),
            )
            .unwrap();
            let k = rcgen::KeyPair::generate().unwrap();
            let c = p.self_signed(&k).unwrap();
            std::fs::write(dir.path().join(format!("{stem}.crt")), c.pem()).unwrap();
            std::fs::write(dir.path().join(format!("{stem}.key")), k.serialize_pem()).unwrap();
        };
        write("b.test", &["b.test"]);
        write("a.test", &["b.test"]);
        write("x.shared.test", &["*.shared.test"]);
        write("_wildcard.shared.test", &["*.shared.test"]);
        write("_wildcard.other.test", &["*.shared.test", "other.test"]);
        let built = build_dir(dir.path(), true);
        let refused: Vec<&String> = built
            .warnings
            .iter()
            .filter(|w| w.contains("does not name"))
            .collect();
        assert_eq!(refused.len(), 2, "{:?}", built.warnings);
        assert!(
            refused
                .iter()
                .any(|w| w.contains("a.test.crt") && w.contains("it names b.test")),
            "{refused:?}"
        );
        assert!(
            refused
                .iter()
                .any(|w| w.contains("_wildcard.other.test.crt") && w.contains("*.other.test")),
            "{refused:?}"
        );
        let r = &built.resolver;
        assert!(r.exact.contains_key("b.test") && r.exact.contains_key("x.shared.test"));
        assert!(!r.exact.contains_key("a.test") && r.wild.contains_key("shared.test"));
        assert!(!r.wild.contains_key("other.test"));
    }

    #[test]
    fn file_stems_name_hosts_and_wildcards() {
        assert_eq!(name_of("Example.COM"), Ok(("example.com".into(), false)));
        assert_eq!(
            name_of("_wildcard.example.com"),
            Ok(("example.com".into(), true))
        );
        assert!(name_of("_wildcard.").is_err());
        assert!(name_of("a..b").is_err());
        assert!(name_of("a b").is_err());
        assert!(name_of(".hidden").is_err());
    }
}
