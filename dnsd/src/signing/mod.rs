//! Online DNSSEC signing: policies, the key timeline (made when first needed, rolled over by
//! the policy's lifetimes) and signing a loaded zone before it is served.
//!
//! The signer runs where zones load (blocking threads, every core for a big zone); the
//! result replaces the unsigned zone whole. Re-signing starts from the zone being served:
//! its own DNSSEC records are dropped and made again, keeping every signature whose RRset
//! did not change and which is not due for refresh.

pub mod keys;
pub mod online;
pub mod schedule;
pub mod submission;

use std::path::{Path, PathBuf};
use std::time::SystemTime;

use zones::Zone;
use zones::sign::{Denial, Params, SigningKey};

use keys::{Algorithm, Key, KeyError, KeyFile, KeyState, Role};

/// A `[[dnssec_policy]]`, resolved.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Policy {
    /// Its name.
    pub name: String,
    /// Where the zones' keys are kept.
    pub key_dir: PathBuf,
    /// Algorithm of new keys.
    pub algorithm: Algorithm,
    /// RSA modulus size.
    pub rsa_bits: u32,
    /// A KSK and a ZSK (else one CSK).
    pub split_keys: bool,
    /// Seconds a signature is valid.
    pub rrsig_validity: u32,
    /// Signatures are made again when they have less than this left.
    pub rrsig_refresh: u32,
    /// NSEC or NSEC3.
    pub denial: Denial,
    /// TTL of NSEC/NSEC3 (RFC 9077's minimum when None).
    pub negative_ttl: Option<u32>,
    /// TTL of DNSKEY/CDS/CDNSKEY (the SOA's when None).
    pub dnskey_ttl: Option<u32>,
    /// A ZSK (or CSK) is rolled after this long (0: never).
    pub zsk_lifetime: u64,
    /// A KSK is rolled after this long (0: never).
    pub ksk_lifetime: u64,
    /// Time for a change to reach every secondary and cache.
    pub propagation_delay: u64,
    /// TTL of the DS at the parent: how long an old DS may still be cached.
    pub parent_ds_ttl: u64,
    /// What CDS and CDNSKEY say to the parent (RFC 7344, RFC 8078).
    pub cds: Cds,
    /// How a KSK or CSK rollover learns that the parent holds the new DS.
    pub ksk_submission: Submission,
    /// Answer NXDOMAIN and NODATA with compact denial (RFC 9824), signed online; the zone
    /// keeps its NSEC chain for transfers and wildcard proofs.
    pub compact_denial: bool,
}

/// What a signed zone's CDS and CDNSKEY say to its parent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Cds {
    /// Nothing: none are published.
    Off,
    /// The key-signing keys the parent should hold (RFC 7344).
    Keys,
    /// "Remove every DS" (RFC 8078 §4: `CDS 0 0 0 00`, `CDNSKEY 0 3 0 AA==`): the zone stays
    /// signed while the parent drops its DS, the way to go insecure without a day of
    /// SERVFAIL (Knot's `cds-cdnskey-publish: delete-dnssec`).
    Delete,
}

/// How a KSK or CSK rollover learns that the parent holds the successor's DS (the old key
/// retires only after that, plus the old DS's time in caches).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Submission {
    /// The parent's servers are asked for the DS every `check_interval` seconds; every one
    /// must hold it.
    Parent {
        /// The parent zone's servers.
        servers: Vec<std::net::SocketAddr>,
        /// Seconds between checks while a DS is awaited.
        check_interval: u64,
    },
    /// The operator says so (`ctl zone-ksk-submitted`), as Knot without a submission check.
    Manual,
    /// Assumed from the moment the successor's CDS is published, unchecked.
    Timer,
}

/// What a zone's signing needs besides the unsigned zone.
#[derive(Debug, Clone)]
pub struct SignJob {
    /// The zone's policy.
    pub policy: std::sync::Arc<Policy>,
    /// The version being served (its signatures are kept where they still hold).
    pub prev: Option<std::sync::Arc<Zone>>,
    /// Keep the unsigned zone beside the signed one (a secondary: the base of its next IXFR).
    pub keep_unsigned: bool,
}

/// Why a zone was not signed.
#[derive(Debug, thiserror::Error)]
pub enum SigningError {
    /// A key file.
    #[error(transparent)]
    Key(#[from] KeyError),
    /// The signer.
    #[error(transparent)]
    Sign(#[from] zones::sign::SignError),
}

/// The signed zone and when it must be signed again.
#[derive(Debug)]
pub struct SignedZone {
    /// The zone to serve.
    pub zone: Zone,
    /// Signatures made.
    pub made: usize,
    /// Signatures kept from the last version.
    pub kept: usize,
    /// What the signed zone's checks noticed.
    pub warnings: Vec<zones::Diagnostic>,
    /// When to sign again (signature refresh or the next key event), seconds since the epoch.
    pub resign_at: u64,
    /// The earliest expiration of the zone's signatures.
    pub earliest_expiration: u32,
    /// For a policy with compact denial: the online signer (the active zone-signing key).
    pub compact: Option<std::sync::Arc<crate::signing::online::CompactSigner>>,
}

/// Seconds since the epoch.
pub fn now() -> u64 {
    SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// Signs `unsigned` (or a served signed version, whose DNSSEC records are made again) under
/// `job`'s policy at `now`, making or rolling keys as the timeline asks.
pub fn sign(unsigned: &Zone, job: &SignJob, now: u64) -> Result<SignedZone, SigningError> {
    let p = &*job.policy;
    let zone = unsigned.apex().to_lowercase().to_string();
    let ttl = job.policy.dnskey_ttl.unwrap_or_else(|| soa_ttl(unsigned));
    let max_ttl = max_ttl(unsigned);
    let (mut keys, next_roll) = match timeline(p, &zone, now, ttl as u64, max_ttl as u64) {
        Ok(t) => t,
        Err(e) => {
            tracing::error!(zone, "{e}");
            // The last signed version keeps serving, whatever is wrong with the keys (gone,
            // unreadable, corrupt): a served one stays where it is (the caller keeps it on
            // error); at a start, the signed copy on disk is served.
            if job.prev.is_none()
                && let Some(copy) = read_copy(&p.key_dir, unsigned.apex())
            {
                if let Some(last) = read_serial(&p.key_dir, &zone)
                    && zones::serial_gt(last, copy.serial())
                {
                    // Older than what was served (its write failed or was cut short): the
                    // next signing still goes past the serial served.
                    tracing::warn!(
                        zone,
                        copy = copy.serial(),
                        served = last,
                        "serving the signed copy, older than the serial last served, until the keys sign again"
                    );
                }
                return Ok(copy_served(copy, now));
            }
            return Err(e.into());
        }
    };
    let mut signing: Vec<SigningKey<'_>> = keys
        .iter()
        .filter(|k| k.file.state(now) == KeyState::Active)
        .map(|k| SigningKey {
            key: k,
            signs_keys: k.file.role.signs_keys(),
            signs_zone: k.file.role.signs_zone(),
        })
        .collect();
    // Every algorithm the zone is signed with signs the DNSKEY RRset too (RFC 4035 §2.2): one
    // without an active key-signing key (a zone-signing key of another algorithm put in the
    // key directory) has its zone-signing keys sign it; else validators may hold the zone
    // bogus for that algorithm (dnssec-verify: "Missing self-signed KSK").
    let with_ksk: Vec<u8> = signing
        .iter()
        .filter(|s| s.signs_keys)
        .map(|s| s.key.dnskey()[3])
        .collect();
    // (Not where no algorithm has one: that zone is not signed, its last good version kept —
    // a zone-signing key alone over the DNSKEY RRset has no DS at the parent.)
    for s in signing.iter_mut().filter(|_| !with_ksk.is_empty()) {
        if s.signs_zone && !with_ksk.contains(&s.key.dnskey()[3]) {
            s.signs_keys = true;
        }
    }
    let published_only: Vec<Vec<u8>> = keys
        .iter()
        .filter(|k| matches!(k.file.state(now), KeyState::Published | KeyState::Retired))
        .map(|k| k.dnskey.clone())
        .collect();
    // CDS/CDNSKEY name the key-signing keys the parent should hold: those ready and not
    // retired (RFC 7344 §4).
    let (mut cds, mut cdnskey) = (Vec::new(), Vec::new());
    if p.cds == Cds::Delete {
        cds.push(vec![0, 0, 0, 0, 0]);
        cdnskey.push(vec![0, 0, 3, 0, 0]);
    }
    if p.cds == Cds::Keys {
        let apex = unsigned.apex().to_lowercase();
        let for_parent = |k: &Key| {
            k.file.role.signs_keys()
                && k.file.ready.is_some_and(|r| r <= now)
                && k.file.state(now) == KeyState::Active
        };
        // Once a key of the policy is ready, the keys a changed policy no longer calls for
        // are left out: the parent drops their DS (another algorithm's DS kept at the
        // parent after its keys went would leave the zone unsigned in it).
        let policy_ready = keys.iter().any(|k| for_parent(k) && is_ours(p, k));
        for k in keys
            .iter()
            .filter(|k| for_parent(k) && (!policy_ready || is_ours(p, k)))
        {
            if let Some(d) = zones::dnssec::ds_digest(apex.as_wire(), &k.dnskey, 2) {
                let mut rd = k.tag.to_be_bytes().to_vec();
                rd.extend_from_slice(&[k.file.algorithm.number(), 2]);
                rd.extend_from_slice(&d);
                cds.push(rd);
                cdnskey.push(k.dnskey.clone());
            }
        }
    }
    // Without a served version (a start), the copy of the last signed version: its
    // signatures are kept where they still hold, as after any change.
    let mut copy = match &job.prev {
        Some(_) => None,
        None => read_copy(&p.key_dir, unsigned.apex()),
    };
    let prev: Option<&Zone> = job.prev.as_deref().or(copy.as_ref());
    // The served serial moves forward on every signing, across restarts too (secondaries
    // would not take a version whose serial went back).
    // The last serial served is the newest of the version at hand and the serial file: the
    // copy is written after the serial, on a thread of its own, and may lag it (a full disk,
    // a kill just after a signing) — a restart must not serve an old serial again.
    let unsigned_serial = unsigned.serial();
    let stored = read_serial(&p.key_dir, &zone);
    let last = match (prev.map(|z| z.serial()), stored) {
        (Some(a), Some(b)) if zones::serial_gt(b, a) => Some(b),
        (Some(a), _) => Some(a),
        (None, b) => b,
    };
    let serial = match last {
        Some(l) if !zones::serial_gt(unsigned_serial, l) => l.wrapping_add(1),
        _ => unsigned_serial,
    };
    let params = Params {
        now: now as u32,
        inception_offset: 3600,
        validity: p.rrsig_validity,
        jitter: (p.rrsig_validity - p.rrsig_refresh) / 4,
        refresh: p.rrsig_refresh,
        // An hour, as Knot's default; less where the spread is shorter (short test policies).
        pre_refresh: ((p.rrsig_validity - p.rrsig_refresh) / 2).min(3600),
        denial: p.denial.clone(),
        dnskey_ttl: Some(ttl),
        negative_ttl: p.negative_ttl,
        serial,
        published_only,
        cds,
        cdnskey,
        threads: std::thread::available_parallelism().map_or(1, |n| n.get()),
    };
    let mut signed = zones::sign::sign_zone(unsigned, prev, &signing, &params)?;
    // A start whose signing changed nothing but the SOA's serial and its signature serves the
    // copy as it was, when that is the version last served and the file's serial did not
    // move: every restart gave every signed zone a new serial, and its secondaries a
    // transfer of it.
    if let Some(c) = copy.as_ref()
        && stored == Some(c.serial())
        && zones::serial_gt(serial, unsigned_serial)
        && same_but_serial(c, &signed.zone)
    {
        let c = copy.take().expect("checked above");
        signed.zone = c;
        // Every signature served is the copy's (those made over the new serial dropped).
        signed.kept += signed.made;
        signed.made = 0;
        signed.earliest_expiration = zones::dnssec::signature_expiry(&signed.zone, now as u32)
            .0
            .unwrap_or(signed.earliest_expiration);
        tracing::info!(
            zone,
            serial = signed.zone.serial(),
            "the signed copy is current: served as it is"
        );
    } else if let Err(e) = write_serial(&p.key_dir, &zone, serial) {
        // A start that cannot keep the serial it would serve (a full disk): the signed copy
        // serves, as when the keys cannot be read — the zone stayed dark until a reload.
        if let Some(copy) = copy {
            tracing::error!(zone, "{e}: serving the signed copy until signing succeeds");
            return Ok(copy_served(copy, now));
        }
        return Err(e.into());
    }
    let refresh_at = now
        + (zones::sign::secs_between(now as u32, signed.earliest_expiration)
            - p.rrsig_refresh as i64)
            .max(1) as u64;
    let resign_at = next_key_event(&keys, now)
        .into_iter()
        .chain(next_roll)
        .fold(refresh_at, u64::min);
    drop(signing);
    // An online signer for compact denials, and for what is made when asked: the A and AAAA
    // an ALIAS stands for, the variants of a name by client network.
    let compact = {
        keys.iter()
            .position(|k| k.file.state(now) == KeyState::Active && k.file.role.signs_zone())
            .map(|i| {
                let key = std::sync::Arc::new(keys.swap_remove(i));
                let s = crate::signing::online::CompactSigner::new(
                    key,
                    signed.zone.apex().to_lowercase().as_wire(),
                    signed.zone.negative_ttl(),
                    p.rrsig_validity,
                );
                std::sync::Arc::new(if p.compact_denial {
                    s
                } else {
                    s.without_denial()
                })
            })
    };
    Ok(SignedZone {
        zone: signed.zone,
        made: signed.made,
        kept: signed.kept,
        warnings: signed.warnings,
        resign_at,
        earliest_expiration: signed.earliest_expiration,
        compact,
    })
}

/// Whether two signed versions differ at most in the SOA's serial and the SOA's signatures
/// (records compared in the zone's canonical order).
fn same_but_serial(a: &Zone, b: &Zone) -> bool {
    if a.record_count() != b.record_count() {
        return false;
    }
    let apex = a.apex().as_wire().len();
    let soa_sig = |o: &[u8], rt: u16, rd: &[u8]| {
        rt == zones::rrtype::t::RRSIG && o.len() == apex && rd.get(..2) == Some(&[0, 6])
    };
    a.records().zip(b.records()).all(|(x, y)| {
        if x.1 != y.1 || x.2 != y.2 || !x.0.eq_ignore_ascii_case(y.0) {
            return false;
        }
        if x.1 == zones::rrtype::t::SOA {
            // MNAME, RNAME, then the serial and four counters.
            let (n, m) = (x.3.len(), y.3.len());
            return n == m
                && n >= 20
                && x.3[..n - 20] == y.3[..n - 20]
                && x.3[n - 16..] == y.3[n - 16..];
        }
        soa_sig(x.0, x.1, x.3) && soa_sig(y.0, y.1, y.3) || x.3 == y.3
    })
}

/// The signed copy served as it is (a start whose signing cannot be done or kept), checked
/// again in five minutes: the files or the disk space may be back.
fn copy_served(copy: Zone, now: u64) -> SignedZone {
    let earliest = zones::dnssec::signature_expiry(&copy, now as u32)
        .0
        .unwrap_or(now as u32);
    SignedZone {
        zone: copy,
        made: 0,
        kept: 0,
        warnings: Vec::new(),
        resign_at: now + 300,
        earliest_expiration: earliest,
        compact: None,
    }
}

/// The copy of the last signed version of the zone at `apex` (read back at a start).
pub fn copy_path(dir: &Path, apex: &zones::Name) -> PathBuf {
    keys::zone_dir(dir, &apex.to_string()).join("signed.zone")
}

/// The copy of the zone's last signed version, when there is a readable one.
fn read_copy(dir: &Path, apex: &zones::Name) -> Option<Zone> {
    let path = copy_path(dir, apex);
    if !path.exists() {
        return None;
    }
    // Our own output, of a zone whose source may be a secondary's (held to its structure).
    let opts = zones::ReadOptions {
        lenient: true,
        ..zones::ReadOptions::new(apex)
    };
    match zones::load_file(&path, apex, &opts) {
        Ok(l) => Some(l.zone),
        Err(e) => {
            tracing::warn!(zone = %apex, "the signed copy {} does not load, signing anew: {e}", path.display());
            None
        }
    }
}

/// Writes copies of signed zones on one thread of its own, so that a restart keeps their
/// signatures; a zone signed again before its copy was written is written once, the newest.
pub struct CopyWriter {
    tx: std::sync::mpsc::Sender<(PathBuf, std::sync::Arc<Zone>)>,
}

impl CopyWriter {
    /// Starts the writer thread.
    pub fn start() -> CopyWriter {
        let (tx, rx) = std::sync::mpsc::channel::<(PathBuf, std::sync::Arc<Zone>)>();
        std::thread::Builder::new()
            .name("signed-copies".into())
            .spawn(move || {
                while let Ok(first) = rx.recv() {
                    let mut batch = std::collections::HashMap::new();
                    batch.insert(first.0, first.1);
                    while let Ok((p, z)) = rx.try_recv() {
                        batch.insert(p, z);
                    }
                    for (path, z) in batch {
                        let header = format!("{} serial {}, signed by dnsd", z.apex(), z.serial());
                        if let Err(e) = zones::present::write_file(&z, &path, &header) {
                            tracing::warn!(zone = %z.apex(), "signed copy {} not written: {e}", path.display());
                        }
                    }
                }
            })
            .expect("spawn the signed-copy writer");
        CopyWriter { tx }
    }

    /// Queues a copy of `zone`, signed under `policy`.
    pub fn keep(&self, policy: &Policy, zone: std::sync::Arc<Zone>) {
        let _ = self
            .tx
            .send((copy_path(&policy.key_dir, zone.apex()), zone));
    }
}

/// The file keeping the last serial served for `zone`.
fn serial_path(dir: &Path, zone: &str) -> PathBuf {
    keys::zone_dir(dir, zone).join("serial")
}

/// The last serial served for `zone`, from an earlier run.
fn read_serial(dir: &Path, zone: &str) -> Option<u32> {
    std::fs::read_to_string(serial_path(dir, zone))
        .ok()
        .and_then(|t| t.trim().parse().ok())
}

/// Keeps the serial served for `zone` (written whole and synced, then renamed: a power loss
/// leaves the old serial or the new one, never an empty file).
fn write_serial(dir: &Path, zone: &str, serial: u32) -> Result<(), KeyError> {
    let p = serial_path(dir, zone);
    shield::files::write_atomic(&p, format!("{serial}\n").as_bytes(), 0o640)
        .map_err(|e| KeyError::Io(p, e))
}

/// The SOA's TTL.
fn soa_ttl(z: &Zone) -> u32 {
    z.rrset(z.apex_node(), zones::rrtype::t::SOA)
        .map_or(3600, |s| s.ttl)
}

/// The largest TTL in the zone: how long an old signature may stay in caches.
fn max_ttl(z: &Zone) -> u32 {
    z.node_ids()
        .flat_map(|id| z.rrsets(id).iter().map(|s| s.ttl))
        .max()
        .unwrap_or(0)
}

/// The next moment a key changes state after `now`.
fn next_key_event(keys: &[Key], now: u64) -> Option<u64> {
    keys.iter()
        .flat_map(|k| {
            [
                Some(k.file.publish),
                k.file.active,
                k.file.ready,
                k.file.retire,
                k.file.remove,
                k.file.submitted,
            ]
        })
        .flatten()
        .filter(|&t| t > now)
        .min()
}

/// Brings the zone's keys to where the policy wants them at `now`: the first keys made,
/// rollovers started and finished, removed keys deleted. Returns the keys still published.
///
/// ZSK (and CSK) rollover is pre-publish (RFC 6781 §4.1.1.1): the successor is published,
/// signs once its DNSKEY has reached every cache, and the old key stays published until its
/// signatures have expired from caches. KSK rollover is double-signature (§4.1.2): the
/// successor signs the DNSKEY RRset at once, its CDS/CDNSKEY appear once that RRset has
/// propagated, and the old key retires once the parent's DS for it can have left caches.
///
/// Also returns when the next rollover is due to start (its keys do not say).
pub fn timeline(
    p: &Policy,
    zone: &str,
    now: u64,
    dnskey_ttl: u64,
    max_ttl: u64,
) -> Result<(Vec<Key>, Option<u64>), KeyError> {
    // One timeline step at a time in the process: a reload and a background re-sign of the
    // same zone must not both start its first keys or a rollover.
    static STEP: std::sync::Mutex<()> = std::sync::Mutex::new(());
    let _step = STEP.lock().unwrap_or_else(|e| e.into_inner());
    let mut next_roll: Option<u64> = None;
    let mut keys = keys::zone_keys(&p.key_dir, zone)?;
    // Keys the zone held whose files are gone: never fresh keys in their place (the
    // parent's DS names the old ones).
    if let Err(e) = keys::check_manifest(&p.key_dir, zone, &keys) {
        KEYS_MISSING.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        return Err(e);
    }
    // Keys past removal go.
    keys.retain(|k| {
        if k.file.state(now) == KeyState::Removed {
            tracing::info!(zone, tag = k.tag, "DNSSEC key removed");
            let _ = std::fs::remove_file(&k.path);
            false
        } else {
            true
        }
    });
    let roles = p.roles();
    let publish_wait = dnskey_ttl + p.propagation_delay;
    for &role in roles {
        let live: Vec<usize> = (0..keys.len())
            .filter(|&i| keys[i].file.role == role && keys[i].file.algorithm == p.algorithm)
            .filter(|&i| {
                !matches!(
                    keys[i].file.state(now),
                    KeyState::Retired | KeyState::Removed
                )
            })
            .collect();
        if live.is_empty() {
            // First keys: published and signing at once (the zone was not signed before,
            // or its keys are gone). A key-signing key is ready for the parent after the
            // DNSKEY RRset has propagated.
            let ready = role.signs_keys().then_some(now + publish_wait);
            let k = new_key(p, zone, role, now, now, ready)?;
            tracing::info!(zone, tag = k.tag, ?role, "DNSSEC key made");
            keys.push(k);
            continue;
        }
        if role.signs_keys() {
            // A rollover under way ends once the parent holds the new DS, whatever the
            // lifetime says now (set to 0 meanwhile, it would leave both keys for good).
            retire_submitted(&mut keys, role, now, p, dnskey_ttl.max(max_ttl))?;
        }
        let lifetime = if role == Role::Ksk {
            p.ksk_lifetime
        } else {
            p.zsk_lifetime
        };
        if lifetime == 0 {
            continue;
        }
        // The key in charge: the newest active one; a successor is a newer one not active yet.
        let active: Vec<usize> = live
            .iter()
            .copied()
            .filter(|&i| keys[i].file.state(now) == KeyState::Active)
            .collect();
        let successor = live
            .iter()
            .copied()
            .find(|&i| keys[i].file.state(now) == KeyState::Published);
        let Some(&cur) = active.iter().max_by_key(|&&i| keys[i].file.active) else {
            continue;
        };
        let since = keys[cur].file.active.unwrap_or(keys[cur].file.created);
        let due = since + lifetime;
        // The moment this rollover starts, if nothing is rolling now.
        if successor.is_none() && active.len() == 1 {
            let start = if role == Role::Zsk {
                due.saturating_sub(publish_wait)
            } else {
                due
            };
            if start > now {
                next_roll = Some(next_roll.map_or(start, |n| n.min(start)));
            }
        }
        match role {
            Role::Zsk => {
                if successor.is_none() && active.len() == 1 && now + publish_wait >= due {
                    // Pre-publish: the successor signs once its DNSKEY is in every cache.
                    let at = now.max(due.saturating_sub(publish_wait)) + publish_wait;
                    let k = new_key(p, zone, role, now, at, None)?;
                    tracing::info!(
                        zone,
                        tag = k.tag,
                        active_at = at,
                        "ZSK rollover: successor published"
                    );
                    keys.push(k);
                }
                retire_older(&mut keys, role, now, max_ttl + p.propagation_delay)?;
            }
            Role::Ksk | Role::Csk => {
                if active.len() == 1 && now >= due {
                    // Double signature: the successor signs the DNSKEY RRset (a CSK: every
                    // RRset) from now; the parent is told by CDS once that has propagated.
                    let k = new_successor(p, zone, role, now, publish_wait)?;
                    tracing::info!(
                        zone,
                        old = keys[cur].tag,
                        new = k.tag,
                        "{role:?} rollover started; the old key retires once the parent holds the new DS"
                    );
                    keys.push(k);
                }
            }
        }
    }
    retire_strays(
        &mut keys,
        p,
        zone,
        now,
        publish_wait,
        dnskey_ttl.max(max_ttl),
    )?;
    keys::write_manifest(&p.key_dir, zone, &keys)?;
    submission::note(p, zone, &keys, now);
    Ok((keys, next_roll))
}

/// Keys the policy no longer calls for (of another role or algorithm: a change between a CSK
/// and a KSK with a ZSK, or of algorithm) sign on beside the policy's new keys until the
/// parent holds the DS of the policy's key-signing key, then retire as a KSK rollover's
/// predecessor does: the chain from the parent's DS never breaks, and no key outlives its
/// policy (they stayed active for good, every RRset signed twice).
///
/// The DS must be known held since the newest of them came: a policy changed back before
/// its keys took over waits for its old key's DS to be confirmed again.
fn retire_strays(
    keys: &mut Vec<Key>,
    p: &Policy,
    zone: &str,
    now: u64,
    publish_wait: u64,
    linger: u64,
) -> Result<(), KeyError> {
    let ours = |k: &Key| is_ours(p, k);
    let leaving = |k: &Key| {
        !ours(k)
            && k.file.retire.is_none()
            && matches!(k.file.state(now), KeyState::Active | KeyState::Published)
    };
    // When the keys leaving came (published).
    let Some(since) = keys
        .iter()
        .filter(|k| leaving(k))
        .map(|k| k.file.publish.min(now))
        .max()
    else {
        return Ok(());
    };
    // A policy changed back before its new keys took over: its own key-signing key is older
    // than one leaving, which the parent may hold the DS of by now. The DS moves to a new key
    // of the policy, as in a rollover (the newest key-signing key is the one awaited).
    let newest = |f: &dyn Fn(&Key) -> bool| {
        keys.iter()
            .filter(|k| f(k) && k.file.role.signs_keys() && k.file.state(now) == KeyState::Active)
            .filter_map(|k| k.file.active)
            .max()
    };
    if let (Some(theirs), Some(mine)) = (newest(&|k| leaving(k)), newest(&|k| ours(k)))
        && theirs >= mine
    {
        let role = p.roles()[0];
        let k = new_successor(p, zone, role, now, publish_wait)?;
        tracing::info!(
            zone,
            tag = k.tag,
            ?role,
            "policy changed back: a new key takes the DS over"
        );
        keys.push(k);
    }
    // Under "timer" a key's DS is taken for held once its CDS is out, and not before the
    // keys leaving came (the CDS set changed then).
    let timer = p.ksk_submission == Submission::Timer;
    let held = keys
        .iter()
        .filter(|k| ours(k) && k.file.role.signs_keys())
        .filter(|k| k.file.state(now) == KeyState::Active)
        .filter_map(|k| match k.file.submitted {
            Some(s) if s >= since => Some(s),
            _ if timer => k.file.ready.map(|r| r.max(since)),
            _ => None,
        })
        .min();
    let Some(held) = held.filter(|&h| h <= now) else {
        return Ok(());
    };
    let retire = held + p.parent_ds_ttl + p.propagation_delay;
    for k in keys.iter_mut() {
        if leaving(k) {
            k.file.retire = Some(retire);
            // A key of another algorithm goes whole, its DNSKEY with its signatures (a zone
            // is signed with every algorithm its DNSKEY RRset holds: RFC 4035 §2.2); one of
            // the same algorithm stays published while its signatures may be in caches.
            k.file.remove = Some(if k.file.algorithm == p.algorithm {
                retire + linger + p.propagation_delay
            } else {
                retire
            });
            k.write()?;
            tracing::info!(
                tag = k.tag,
                role = ?k.file.role,
                algorithm = ?k.file.algorithm,
                retire,
                "key no longer called for by the policy retires: the parent holds the new DS"
            );
        }
    }
    Ok(())
}

impl Policy {
    /// The roles of the keys it calls for, the key-signing one first.
    pub fn roles(&self) -> &'static [Role] {
        if self.split_keys {
            &[Role::Ksk, Role::Zsk]
        } else {
            &[Role::Csk]
        }
    }
}

/// True when `k` is of a role and the algorithm `p` calls for.
fn is_ours(p: &Policy, k: &Key) -> bool {
    p.roles().contains(&k.file.role) && k.file.algorithm == p.algorithm
}

/// Signings refused because key files the zone held are gone.
pub static KEYS_MISSING: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// A key-signing key of `role` taking the parent's DS over by double signature: signing at
/// once, its CDS ready once the DNSKEY RRset has propagated (`publish_wait`). Under "timer"
/// the parent is assumed, unchecked, to take the new DS as soon as its CDS is published (the
/// old key then retires after the old DS's TTL and the propagation delay).
fn new_successor(
    p: &Policy,
    zone: &str,
    role: Role,
    now: u64,
    publish_wait: u64,
) -> Result<Key, KeyError> {
    let mut k = new_key(p, zone, role, now, now, Some(now + publish_wait))?;
    if p.ksk_submission == Submission::Timer {
        k.file.submitted = Some(now + publish_wait);
        k.write()?;
    }
    Ok(k)
}

/// A new key of the policy's algorithm, published now, signing from `active`, its CDS
/// ready from `ready` (a key-signing key).
fn new_key(
    p: &Policy,
    zone: &str,
    role: Role,
    now: u64,
    active: u64,
    ready: Option<u64>,
) -> Result<Key, KeyError> {
    let mut k = Key::generate(
        &p.key_dir,
        zone,
        p.algorithm,
        p.rsa_bits,
        role,
        now,
        Some(active),
    )?;
    if ready.is_some() {
        k.file.ready = ready;
        k.write()?;
    }
    Ok(k)
}

/// Once the parent holds the DS of a newer key of `role` (its `submitted` time), the older
/// active ones retire when the old DS can have left caches (`parent_ds_ttl` plus
/// `propagation_delay` later) and are removed once their DNSKEY RRset's signatures have too.
fn retire_submitted(
    keys: &mut [Key],
    role: Role,
    now: u64,
    p: &Policy,
    linger: u64,
) -> Result<(), KeyError> {
    // Under "timer" a key's DS is taken for held once its CDS is out (also for a rollover
    // begun under another setting).
    let timer = p.ksk_submission == Submission::Timer;
    let newest = keys
        .iter()
        .filter(|k| k.file.role == role && k.file.state(now) == KeyState::Active)
        .filter_map(|k| {
            let held = k.file.submitted.or(if timer { k.file.ready } else { None });
            Some((k.file.active?, held?))
        })
        .max();
    let Some((newest, submitted)) = newest else {
        return Ok(());
    };
    if submitted > now {
        return Ok(());
    }
    for k in keys.iter_mut().filter(|k| k.file.role == role) {
        if k.file.state(now) == KeyState::Active
            && k.file.active < Some(newest)
            && k.file.retire.is_none()
        {
            let retire = submitted + p.parent_ds_ttl + p.propagation_delay;
            k.file.retire = Some(retire);
            k.file.remove = Some(retire + linger + p.propagation_delay);
            k.write()?;
            tracing::info!(
                tag = k.tag,
                retire,
                "{role:?} rollover: the parent holds the new DS; predecessor retires"
            );
        }
    }
    Ok(())
}

/// The newest active key of a KSK or CSK rollover under way whose DS the parent is not
/// known to hold yet: (its tag, its DNSKEY RDATA, whether its CDS is published). KSKs and
/// CSKs are one group: a policy changed from one to the other moves the DS from the old key
/// to the new as a rollover does.
pub fn awaiting_ds(keys: &[Key], now: u64) -> Vec<(u16, Vec<u8>, bool)> {
    let active: Vec<&Key> = keys
        .iter()
        .filter(|k| k.file.role.signs_keys() && k.file.state(now) == KeyState::Active)
        .collect();
    let unretired_older = |n: &Key| {
        active
            .iter()
            .any(|o| o.file.active < n.file.active && o.file.retire.is_none())
    };
    match active.iter().max_by_key(|k| k.file.active) {
        Some(n) if n.file.submitted.is_none() && unretired_older(n) => vec![(
            n.tag,
            n.dnskey.clone(),
            n.file.ready.is_some_and(|r| r <= now),
        )],
        _ => Vec::new(),
    }
}

/// Records that the parent holds the DS of `zone`'s key `tag` (awaited by a rollover) from
/// `at`; the next signing retires its predecessor. False when no rollover awaits that key.
pub fn mark_submitted(key_dir: &Path, zone: &str, tag: u16, at: u64) -> Result<bool, KeyError> {
    let mut keys = keys::zone_keys(key_dir, zone)?;
    let awaited: Vec<u16> = awaiting_ds(&keys, at).into_iter().map(|a| a.0).collect();
    let Some(k) = keys
        .iter_mut()
        .find(|k| k.tag == tag && awaited.contains(&k.tag))
    else {
        return Ok(false);
    };
    k.file.submitted = Some(at);
    k.write()?;
    Ok(true)
}

/// Once a newer key of `role` signs, the older ones retire and are removed after `linger`
/// (their signatures' time in caches).
fn retire_older(keys: &mut [Key], role: Role, now: u64, linger: u64) -> Result<(), KeyError> {
    let newest = keys
        .iter()
        .filter(|k| k.file.role == role && k.file.state(now) == KeyState::Active)
        .filter_map(|k| k.file.active)
        .max();
    let Some(newest) = newest else { return Ok(()) };
    for k in keys.iter_mut().filter(|k| k.file.role == role) {
        if k.file.state(now) == KeyState::Active
            && k.file.active < Some(newest)
            && k.file.retire.is_none()
        {
            k.file.retire = Some(newest);
            k.file.remove = Some(newest + linger);
            k.write()?;
            tracing::info!(tag = k.tag, "ZSK rollover: predecessor retired");
        }
    }
    Ok(())
}

/// One line per key of `zone` for `ctl zone-keys` (and the error when key files are gone).
pub fn keys_text(key_dir: &Path, zone: &str, now: u64) -> Result<String, KeyError> {
    use std::fmt::Write as _;
    let mut out = String::new();
    let all = keys::zone_keys(key_dir, zone)?;
    if let Err(e) = keys::check_manifest(key_dir, zone, &all) {
        let _ = writeln!(out, "ERROR: {e}");
    }
    for k in all {
        let f: &KeyFile = &k.file;
        let at =
            |t: Option<u64>| t.map_or("-".to_string(), |t| shield::clock::rfc3339_ms(t * 1000));
        let _ = writeln!(
            out,
            "{} tag {} id {} {:?} {:?} {:?} publish {} active {} ready {} submitted {} retire {} remove {}",
            f.zone,
            k.tag,
            f.id,
            f.algorithm,
            f.role,
            f.state(now),
            at(Some(f.publish)),
            at(f.active),
            at(f.ready),
            at(f.submitted),
            at(f.retire),
            at(f.remove),
        );
    }
    if out.is_empty() {
        out.push_str("no keys\n");
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn policy(dir: &Path, submission: Submission) -> Policy {
        Policy {
            name: "p".into(),
            key_dir: dir.to_path_buf(),
            algorithm: Algorithm::Ecdsap256sha256,
            rsa_bits: 2048,
            split_keys: true,
            rrsig_validity: 86400,
            rrsig_refresh: 3600,
            denial: Denial::Nsec,
            negative_ttl: None,
            dnskey_ttl: None,
            zsk_lifetime: 0,
            ksk_lifetime: 100,
            propagation_delay: 10,
            parent_ds_ttl: 50,
            cds: Cds::Keys,
            ksk_submission: submission,
            compact_denial: false,
        }
    }

    /// The KSKs at `now`: (tag, state, retire).
    fn ksks(p: &Policy, now: u64) -> Vec<(u16, KeyState, Option<u64>)> {
        let (keys, _) = timeline(p, "example.com.", now, 20, 20).unwrap();
        keys.iter()
            .filter(|k| k.file.role == Role::Ksk)
            .map(|k| (k.tag, k.file.state(now), k.file.retire))
            .collect()
    }

    /// The copy of the last signed version is written after the serial, on a thread of its
    /// own: when it lags (a full disk, a kill just after a signing), a start took its serial
    /// and served serials already served again, with other data — a secondary that holds
    /// the serial never fetches the change.
    #[test]
    fn a_start_never_serves_again_a_serial_served_when_the_copy_lags() {
        let dir = tempfile::tempdir().unwrap();
        let p = std::sync::Arc::new(policy(dir.path(), Submission::Manual));
        let apex = zones::Name::parse("example.com.", None).unwrap();
        let text =
            b"example.com. 3600 IN SOA ns.example.com. h.example.com. 5 3600 600 86400 300\n\
                     example.com. 3600 IN NS ns.example.com.\n\
                     ns.example.com. 3600 IN A 192.0.2.1\n";
        let unsigned = zones::load_bytes(
            "example.com.zone",
            &text[..],
            &apex,
            &zones::ReadOptions::new(&apex),
        )
        .unwrap()
        .zone;
        let job = |prev: Option<Zone>| SignJob {
            policy: p.clone(),
            prev: prev.map(std::sync::Arc::new),
            keep_unsigned: false,
        };
        let first = sign(&unsigned, &job(None), 1000).unwrap().zone;
        assert_eq!(first.serial(), 5);
        zones::present::write_file(&first, &copy_path(dir.path(), &apex), "copy").unwrap();
        // Two more signings served; their copies never reached the disk.
        let second = sign(&unsigned, &job(Some(first)), 1001).unwrap().zone;
        let third = sign(&unsigned, &job(Some(second)), 1002).unwrap().zone;
        assert_eq!(third.serial(), 7);
        // A start: the copy says 5, the serial file 7.
        let started = sign(&unsigned, &job(None), 1003).unwrap().zone;
        assert_eq!(started.serial(), 8, "a serial served before, served again");
        // A start that cannot keep its serial (here a directory where the file goes; a full
        // disk alike) serves the signed copy, and tries again in five minutes: the zone was
        // left dark until a reload.
        let serial = serial_path(dir.path(), "example.com.");
        std::fs::remove_file(&serial).unwrap();
        std::fs::create_dir_all(serial.join("in-the-way")).unwrap();
        let s = sign(&unsigned, &job(None), 1004).unwrap();
        assert_eq!((s.zone.serial(), s.resign_at), (5, 1304));
    }

    /// Every start signed again with a new serial: each restart made every secondary of
    /// every signed zone transfer it. A start that changes nothing but the serial serves the
    /// copy as it was; a changed file, or one whose serial moved on, gets a new version.
    #[test]
    fn a_start_that_changes_nothing_keeps_the_serial_served() {
        let dir = tempfile::tempdir().unwrap();
        let p = std::sync::Arc::new(policy(dir.path(), Submission::Manual));
        let apex = zones::Name::parse("example.com.", None).unwrap();
        let load = |serial: u32, a: &str| {
            let text = format!(
                "example.com. 3600 IN SOA ns.example.com. h.example.com. {serial} 3600 600 86400 300\n\
                 example.com. 3600 IN NS ns.example.com.\n\
                 ns.example.com. 3600 IN A {a}\n"
            );
            zones::load_bytes("z", text.as_bytes(), &apex, &zones::ReadOptions::new(&apex))
                .unwrap()
                .zone
        };
        let job = SignJob {
            policy: p.clone(),
            prev: None,
            keep_unsigned: false,
        };
        let first = sign(&load(5, "192.0.2.1"), &job, 1000).unwrap().zone;
        assert_eq!(first.serial(), 5);
        zones::present::write_file(&first, &copy_path(dir.path(), &apex), "copy").unwrap();
        for now in [1001, 1050] {
            let s = sign(&load(5, "192.0.2.1"), &job, now).unwrap();
            assert_eq!(s.zone.serial(), 5, "a restart at {now}");
            assert_eq!(s.made, 0);
            assert!(same_but_serial(&s.zone, &first));
        }
        // The file changed: a new version, past the one served.
        let s = sign(&load(5, "192.0.2.2"), &job, 1060).unwrap();
        assert_eq!(s.zone.serial(), 6);
        assert!(!same_but_serial(&s.zone, &first));
        // The file's serial moved on alone: the operator's serial is served.
        let s = sign(&load(9, "192.0.2.1"), &job, 1070).unwrap();
        assert_eq!(s.zone.serial(), 9);
    }

    #[test]
    fn a_ksk_rollover_retires_the_old_key_only_once_the_parent_holds_the_new_ds() {
        let dir = tempfile::tempdir().unwrap();
        let p = policy(dir.path(), Submission::Manual);
        let first = ksks(&p, 1000);
        assert_eq!(first.len(), 1);
        // The rollover starts at 1100; the new key's CDS is out at 1100 + 20 + 10.
        let rolled = ksks(&p, 1100);
        assert_eq!(rolled.len(), 2, "{rolled:?}");
        let (new_tag, ..) = *rolled.iter().find(|k| k.0 != first[0].0).unwrap();
        // However long the parent takes, the old key signs on.
        for now in [1131, 2000, 100_000] {
            let k = ksks(&p, now);
            assert!(
                k.iter().all(|k| k.1 == KeyState::Active && k.2.is_none()),
                "at {now}: {k:?}"
            );
            let keys = keys::zone_keys(dir.path(), "example.com.").unwrap();
            assert_eq!(
                awaiting_ds(&keys, now),
                vec![(
                    new_tag,
                    keys.iter()
                        .find(|k| k.tag == new_tag)
                        .unwrap()
                        .dnskey
                        .clone(),
                    true
                )]
            );
        }
        // The operator (or the parent check) says the parent holds it at 100,000: the old
        // key retires once the old DS can have left caches (parent_ds_ttl + propagation).
        assert!(
            !mark_submitted(dir.path(), "example.com.", first[0].0, 100_000).unwrap(),
            "the old key is not awaited"
        );
        assert!(mark_submitted(dir.path(), "example.com.", new_tag, 100_000).unwrap());
        let k = ksks(&p, 100_001);
        let old = k.iter().find(|k| k.0 == first[0].0).unwrap();
        assert_eq!(old.2, Some(100_000 + 50 + 10), "{k:?}");
        assert_eq!(
            ksks(&p, 100_060)
                .iter()
                .find(|k| k.0 == first[0].0)
                .unwrap()
                .1,
            KeyState::Retired
        );
        // (The new key, past its own lifetime by then, has started the next rollover.)
        let keys = keys::zone_keys(dir.path(), "example.com.").unwrap();
        assert!(!awaiting_ds(&keys, 100_060).iter().any(|a| a.0 == new_tag));
    }

    #[test]
    fn a_rollover_under_way_ends_when_its_settings_change() {
        // Begun under "manual", then "timer": the CDS already out counts as held.
        let dir = tempfile::tempdir().unwrap();
        let p = policy(dir.path(), Submission::Manual);
        let first = ksks(&p, 1000);
        assert_eq!(ksks(&p, 1100).len(), 2);
        let timer = policy(dir.path(), Submission::Timer);
        let k = ksks(&timer, 5000);
        let old = k.iter().find(|k| k.0 == first[0].0).unwrap();
        assert_eq!(old.2, Some(1130 + 50 + 10), "{k:?}");
        // Begun, then the lifetime set to 0: the submission still ends it.
        let dir = tempfile::tempdir().unwrap();
        let p = policy(dir.path(), Submission::Manual);
        let first = ksks(&p, 1000);
        let rolled = ksks(&p, 1100);
        let new_tag = rolled.iter().find(|k| k.0 != first[0].0).unwrap().0;
        let still = Policy {
            ksk_lifetime: 0,
            ..p.clone()
        };
        assert!(mark_submitted(dir.path(), "example.com.", new_tag, 2000).unwrap());
        let k = ksks(&still, 2001);
        let old = k.iter().find(|k| k.0 == first[0].0).unwrap();
        assert_eq!(old.2, Some(2000 + 50 + 10), "{k:?}");
    }

    /// A KSK+ZSK policy and a CSK one, both without rollovers, under "manual".
    fn split_and_csk(dir: &Path) -> (Policy, Policy) {
        let split = Policy {
            ksk_lifetime: 0,
            ..policy(dir, Submission::Manual)
        };
        let csk = Policy {
            split_keys: false,
            ..split.clone()
        };
        (split, csk)
    }

    /// Every key at `now`: (tag, role, algorithm, state, retire).
    fn all_keys(p: &Policy, now: u64) -> Vec<(u16, Role, Algorithm, KeyState, Option<u64>)> {
        let (keys, _) = timeline(p, "example.com.", now, 20, 20).unwrap();
        keys.iter()
            .map(|k| {
                let f = &k.file;
                (k.tag, f.role, f.algorithm, f.state(now), f.retire)
            })
            .collect()
    }

    /// A policy changed from a CSK to a KSK with a ZSK (or back, or to another algorithm)
    /// left the old keys active for good, every RRset signed twice and the old key never
    /// rolled: they sign on until the parent holds the new key-signing key's DS, then retire
    /// and go as a rollover's predecessor does.
    #[test]
    fn keys_the_policy_no_longer_calls_for_retire_once_the_new_ds_is_held() {
        let dir = tempfile::tempdir().unwrap();
        let (split, csk) = split_and_csk(dir.path());
        let first = all_keys(&csk, 1000);
        assert_eq!(first.len(), 1);
        let old = first[0].0;
        assert_eq!(first[0].1, Role::Csk);
        // Changed to KSK + ZSK: both made, the CSK signs on while the parent's DS names it.
        let now = all_keys(&split, 2000);
        assert_eq!(now.len(), 3, "{now:?}");
        assert!(now.iter().all(|k| k.3 == KeyState::Active && k.4.is_none()));
        let ksk = now.iter().find(|k| k.1 == Role::Ksk).unwrap().0;
        for t in [2031, 50_000] {
            let k = all_keys(&split, t);
            assert!(
                k.iter().all(|k| k.3 == KeyState::Active && k.4.is_none()),
                "{k:?}"
            );
            let keys = keys::zone_keys(dir.path(), "example.com.").unwrap();
            let waits: Vec<u16> = awaiting_ds(&keys, t).iter().map(|a| a.0).collect();
            assert_eq!(waits, vec![ksk], "the new KSK's DS is awaited");
        }
        assert!(mark_submitted(dir.path(), "example.com.", ksk, 50_000).unwrap());
        let k = all_keys(&split, 50_001);
        let c = k.iter().find(|k| k.0 == old).unwrap();
        assert_eq!(c.4, Some(50_000 + 50 + 10), "{k:?}");
        assert_eq!(
            all_keys(&split, 50_060)
                .iter()
                .find(|k| k.0 == old)
                .unwrap()
                .3,
            KeyState::Retired
        );
        // Removed once its signatures can have left caches (20 + 10 later).
        let k = all_keys(&split, 50_090);
        assert!(k.iter().all(|k| k.0 != old), "{k:?}");
        assert_eq!(k.len(), 2);
        let keys = keys::zone_keys(dir.path(), "example.com.").unwrap();
        assert!(awaiting_ds(&keys, 50_090).is_empty());

        // Another algorithm under "timer": the old pair goes once the new CDS is out (20 +
        // 10 after the change) and the old DS can have left caches (50 + 10).
        let ed = Policy {
            algorithm: Algorithm::Ed25519,
            ksk_submission: Submission::Timer,
            ..split.clone()
        };
        let k = all_keys(&ed, 60_000);
        assert_eq!(k.len(), 4, "{k:?}");
        let k = all_keys(&ed, 60_031);
        for k in k.iter().filter(|k| k.2 != Algorithm::Ed25519) {
            assert_eq!(k.4, Some(60_030 + 50 + 10), "{k:?}");
        }
        let k = all_keys(&ed, 60_200);
        assert_eq!(k.len(), 2, "{k:?}");
        assert!(
            k.iter()
                .all(|k| k.2 == Algorithm::Ed25519 && k.3 == KeyState::Active)
        );
    }

    /// A policy changed back before its new keys took over (CSK, then KSK+ZSK, then CSK
    /// again): its old CSK is older than the KSK leaving, whose DS the parent may hold by
    /// then; a new CSK takes the DS over as in a rollover, and everything else goes once the
    /// parent holds it (the old CSK could never be confirmed again: double signatures for
    /// good).
    #[test]
    fn a_policy_changed_back_moves_the_ds_to_a_new_key_of_its_own() {
        let dir = tempfile::tempdir().unwrap();
        let (split, csk) = split_and_csk(dir.path());
        let first = all_keys(&csk, 1000)[0].0;
        assert_eq!(all_keys(&split, 2000).len(), 3);
        let k = all_keys(&csk, 3000);
        assert_eq!(k.len(), 4, "a new CSK: {k:?}");
        let new = k
            .iter()
            .find(|k| k.1 == Role::Csk && k.0 != first)
            .unwrap()
            .0;
        let keys = keys::zone_keys(dir.path(), "example.com.").unwrap();
        let waits: Vec<u16> = awaiting_ds(&keys, 3031).iter().map(|a| a.0).collect();
        assert_eq!(waits, vec![new]);
        assert!(mark_submitted(dir.path(), "example.com.", new, 3100).unwrap());
        let k = all_keys(&csk, 3101);
        for k in k.iter().filter(|k| k.0 != new) {
            assert_eq!(k.4, Some(3100 + 50 + 10), "{k:?}");
        }
        let k = all_keys(&csk, 3300);
        assert_eq!(
            k.iter().map(|k| k.0).collect::<Vec<_>>(),
            vec![new],
            "{k:?}"
        );
    }

    #[test]
    fn a_timer_submission_retires_the_old_key_on_the_timeline_alone() {
        let dir = tempfile::tempdir().unwrap();
        let p = policy(dir.path(), Submission::Timer);
        let first = ksks(&p, 1000);
        assert_eq!(ksks(&p, 1100).len(), 2);
        // CDS out at 1130 (dnskey TTL 20 + propagation 10), retired 50 + 10 later.
        let k = ksks(&p, 1131);
        let old = k.iter().find(|k| k.0 == first[0].0).unwrap();
        assert_eq!(old.2, Some(1130 + 50 + 10), "{k:?}");
    }
}
