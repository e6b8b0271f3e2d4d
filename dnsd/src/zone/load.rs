//! Loading a zone: its file read and checked (on all cores for many zones), and signed
//! when a policy says so — off the runtime's threads, with a typed error for each way it
//! fails.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::SystemTime;

use zones::rrtype::t;
use zones::{Name, ReadOptions, Zone};

use crate::signing::online::CompactSigner;
use crate::signing::{SignJob, SigningError};

/// A zone to load: its slot, apex, file, and how to sign it when it is signed.
#[derive(Debug, Clone)]
pub struct Planned {
    /// The zone's slot.
    pub slot: usize,
    /// Apex.
    pub origin: Name,
    /// Master file.
    pub file: PathBuf,
    /// Signing, for a zone with a `dnssec_policy`.
    pub sign: Option<SignJob>,
    /// Its geo file, read with it.
    pub geo: Option<Arc<GeoSpec>>,
    /// Added at run time by this user (other than root or the daemon's own): its file is
    /// read only if that user could read it, now (a link swapped in since the zone was added
    /// must not reach further), and may not `$INCLUDE`.
    pub added_by: Option<crate::config::zone_list::AddedBy>,
    /// A secondary: its file is the copy of what its primaries serve, held to the RDATA's
    /// structure only (a semantic fault is warned of), as a transfer is.
    pub secondary: bool,
}

/// A zone's geo file and what reading it needs.
#[derive(Debug, PartialEq, Eq)]
pub struct GeoSpec {
    /// The file.
    pub path: PathBuf,
    /// The `[[view]]`s by name.
    pub views: std::collections::HashMap<String, Vec<ipnet::IpNet>>,
    /// `[geoip] ttl`.
    pub ttl: u32,
    /// How many `[geoip] keys` `geo:` values may name (0 without `[geoip] db`).
    pub keys: usize,
}

impl Planned {
    /// A zone loaded as written (not signed).
    pub fn unsigned(slot: usize, origin: Name, file: PathBuf) -> Planned {
        Planned {
            slot,
            origin,
            file,
            sign: None,
            geo: None,
            added_by: None,
            secondary: false,
        }
    }
}

/// Why a zone did not load.
#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    /// Its file could not be read or has errors (each names the file and line).
    #[error("{0}")]
    Zone(#[from] zones::ZoneError),
    /// It loaded but could not be signed.
    #[error("{zone}: not signed: {source}")]
    Sign {
        /// The zone.
        zone: Name,
        /// What the signer said.
        source: SigningError,
    },
    /// Its geo file could not be read.
    #[error("{0}")]
    Geo(String),
    /// Building it would take more memory than is left.
    #[error("{file}: {why}; the last good version serves on")]
    Memory {
        /// The zone's file.
        file: String,
        /// How much it takes and what is left.
        why: crate::zone::room::NoRoom,
    },
    /// A pre-signed zone holds an ALIAS: the A and AAAA made from it when asked would carry
    /// no signature.
    #[error(
        "{file}: ALIAS at {owner} in a pre-signed zone: the A and AAAA it stands for would be unsigned (let dnsd sign the zone, or point the name at its target with CNAME)"
    )]
    SignedAlias {
        /// The zone's file.
        file: String,
        /// The ALIAS's owner.
        owner: String,
    },
    /// The loading task itself failed (a panic or a cancelled task).
    #[error("zone load task: {0}")]
    Task(String),
    /// The user who added the zone may not read its file (now).
    #[error("{0}")]
    Access(String),
}

impl LoadError {
    /// Where the zone is wrong, without what the file holds: `file:line:col` of each error
    /// listed (for a reply to someone who may not read all the daemon read).
    pub fn places(&self) -> String {
        match self {
            LoadError::Zone(z) => {
                let mut out: Vec<String> = z.errors.iter().map(|d| d.at.to_string()).collect();
                if z.more > 0 {
                    out.push(format!("{} more", z.more));
                }
                out.join(", ")
            }
            LoadError::Sign { zone, .. } => format!("{zone}: not signed"),
            LoadError::Geo(_) => "its geo file".into(),
            LoadError::Memory { why, .. } => why.to_string(),
            LoadError::SignedAlias { file, owner } => format!("{file}: ALIAS at {owner}"),
            LoadError::Task(_) => "the load task".into(),
            LoadError::Access(e) => e.clone(),
        }
    }
}

/// A file's modification time, if it can be read.
pub fn file_mtime(p: &std::path::Path) -> Option<SystemTime> {
    std::fs::metadata(p).and_then(|m| m.modified()).ok()
}

/// Loads (and signs, for zones with a policy) the zones of `plan` on all cores (blocking:
/// call from a blocking thread); the results in plan order.
pub fn load_all(plan: Vec<Planned>) -> Vec<LoadResult> {
    use std::sync::atomic::{AtomicUsize, Ordering};
    let threads = std::thread::available_parallelism()
        .map_or(1, |n| n.get())
        .min(plan.len());
    if threads <= 1 {
        return plan.iter().map(|p| (p.slot, load_contained(p))).collect();
    }
    // Each thread takes the next zone in turn: a big zone does not hold up the small ones.
    let next = AtomicUsize::new(0);
    let mut out: Vec<_> = std::thread::scope(|s| {
        let workers: Vec<_> = (0..threads)
            .map(|_| {
                s.spawn(|| {
                    let mut done = Vec::new();
                    loop {
                        let k = next.fetch_add(1, Ordering::Relaxed);
                        let Some(p) = plan.get(k) else {
                            break;
                        };
                        done.push((k, p.slot, load_contained(p)));
                    }
                    done
                })
            })
            .collect();
        workers
            .into_iter()
            .flat_map(|w| w.join().expect("a zone loader panicked"))
            .collect()
    });
    out.sort_unstable_by_key(|(k, ..)| *k);
    out.into_iter().map(|(_, i, r)| (i, r)).collect()
}

/// [`load_planned`], a panic in it (a bug) that zone's failure alone: one zone whose NSEC3
/// names passed 255 octets took down every zone at start, and a reload stopped silently with
/// the other zones' changes unapplied.
pub fn load_contained(p: &Planned) -> Result<LoadedZone, LoadError> {
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| load_planned(p))).unwrap_or_else(
        |panic| {
            let what = panic
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| panic.downcast_ref::<String>().cloned())
                .unwrap_or_default();
            tracing::error!(zone = %p.origin, file = %p.file.display(), panic = %what, "zone load failed on a bug");
            Err(LoadError::Task(format!(
                "{}: {} failed to load on a bug ({what}); its last good version, if any, serves on",
                p.file.display(),
                p.origin
            )))
        },
    )
}

/// Loads one planned zone, signed when it has a policy.
pub fn load_planned(p: &Planned) -> Result<LoadedZone, LoadError> {
    let mut opts = ReadOptions::new(&p.origin);
    opts.lenient = p.secondary;
    // Opened as the user who added it could (the file checked is the file read), without
    // `$INCLUDE`.
    let opened = match &p.added_by {
        Some(who) => {
            opts.allow_include = false;
            let f = who.open(&p.file).map_err(LoadError::Access)?;
            let meta = f
                .metadata()
                .map_err(|e| LoadError::Access(format!("{}: {e}", p.file.display())))?;
            Some((f, meta))
        }
        None => None,
    };
    // Room for the build, from the file's size (twice over for a zone dnsd signs), held
    // until it is done: one too big for what memory is left is refused, not the process
    // aborted with every zone. What `$INCLUDE` and `$GENERATE` add is held to the room
    // left too.
    let per = crate::zone::room::PER_TEXT_BYTE * if p.sign.is_some() { 2 } else { 1 };
    let len = match &opened {
        Some((_, meta)) => meta.len(),
        None => std::fs::metadata(&p.file).map_or(0, |m| m.len()),
    };
    let _room =
        crate::zone::room::reserve(len.saturating_mul(per)).map_err(|why| LoadError::Memory {
            file: p.file.display().to_string(),
            why,
        })?;
    opts.max_added_text = crate::zone::room::added_text_budget(per);
    let l = match opened {
        Some((f, meta)) => zones::load_opened(&p.file, f, &meta, &p.origin, &opts),
        None => zones::load_file(&p.file, &p.origin, &opts),
    }
    .inspect_err(|e| {
        // What `$INCLUDE` and `$GENERATE` added passed the room: counted as refused.
        if e.to_string().contains("not enough memory") {
            crate::zone::room::REFUSED.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        }
    })?;
    let presigned = p.sign.is_none() && l.zone.rrset(0, t::DNSKEY).is_some();
    // A zone dnsd signs gets its ALIAS answers signed when asked; a pre-signed one cannot.
    if presigned {
        let z = &l.zone;
        if let Some(n) = z.node_ids().find(|&n| z.rrset(n, t::ALIAS).is_some()) {
            return Err(LoadError::SignedAlias {
                file: p.file.display().to_string(),
                owner: Name::from_wire(z.node_name(n))
                    .map_or_else(|_| "?".into(), |n| n.to_string()),
            });
        }
    }
    let geo = match &p.geo {
        Some(g) => {
            let z = crate::zone::geo::GeoZone::load(&g.path, &p.origin, &g.views, g.ttl, g.keys)
                .map_err(LoadError::Geo)?;
            let only_geo = z.check_against(&l.zone, &g.path).map_err(LoadError::Geo)?;
            if (presigned || p.sign.is_some()) && !only_geo.is_empty() {
                tracing::warn!(
                    zone = %p.origin,
                    geo = %g.path.display(),
                    names = ?only_geo,
                    "names that exist only in the geo file of a signed zone: their other types, \
                     and every type for clients no variant covers, are denied as names that do \
                     not exist (a validating resolver may apply that denial to every client); \
                     give each a record in the zone"
                );
            }
            // A pre-signed zone's variants come signed, from the file (dnsd signs its own
            // zones' variants when asked).
            if presigned && let Some((owner, i, ty)) = z.first_unsigned() {
                return Err(LoadError::Geo(format!(
                    "{}: {owner} variant {i}: no RRSIG over its {} records: a pre-signed zone's variants must carry their signatures",
                    g.path.display(),
                    zones::rrtype::to_text(ty)
                )));
            }
            Some(Arc::new(z))
        }
        None => None,
    };
    let mut z = match &p.sign {
        None => LoadedZone::from(l),
        Some(job) => sign_loaded(l, job)?,
    };
    z.geo = geo;
    Ok(z)
}

/// Loads one zone as written (blocking: call from a blocking thread).
pub fn load_one(origin: &Name, file: &std::path::Path) -> Result<zones::Loaded, LoadError> {
    Ok(zones::load_file(file, origin, &ReadOptions::new(origin))?)
}

/// A zone loaded (and signed, for a zone with a policy).
#[derive(Debug)]
pub struct LoadedZone {
    /// The zone as it will be served.
    pub loaded: zones::Loaded,
    /// A zone dnsd signs: when to sign it again (seconds since the epoch).
    pub resign_at: Option<u64>,
    /// A signed zone: the earliest expiration of its signatures.
    pub rrsig_expiry: Option<u32>,
    /// Signatures made and kept by dnsd's signer.
    pub signatures: (usize, usize),
    /// Answered with compact denial: the online signer.
    pub compact: Option<Arc<CompactSigner>>,
    /// A secondary dnsd signs: the zone as loaded, before signing.
    pub upstream: Option<Arc<Zone>>,
    /// Its variants by client network (its geo file).
    pub geo: Option<Arc<crate::zone::geo::GeoZone>>,
}

impl From<zones::Loaded> for LoadedZone {
    /// A zone served as loaded (pre-signed or not: its signatures' expiry is read here).
    fn from(loaded: zones::Loaded) -> LoadedZone {
        let now = crate::signing::now() as u32;
        let (rrsig_expiry, _) = zones::dnssec::signature_expiry(&loaded.zone, now);
        LoadedZone {
            loaded,
            resign_at: None,
            rrsig_expiry,
            signatures: (0, 0),
            compact: None,
            upstream: None,
            geo: None,
        }
    }
}

/// One zone's load result: its slot and the zone or why it did not load.
pub type LoadResult = (usize, Result<LoadedZone, LoadError>);

/// Signs a loaded zone under `job` (its load time then counts the signing too).
pub fn sign_loaded(l: zones::Loaded, job: &SignJob) -> Result<LoadedZone, LoadError> {
    let t = std::time::Instant::now();
    let s = crate::signing::sign(&l.zone, job, crate::signing::now()).map_err(|source| {
        LoadError::Sign {
            zone: l.zone.apex().clone(),
            source,
        }
    })?;

    tracing::info!(
        zone = %l.zone.apex(),
        made = s.made,
        kept = s.kept,
        ms = t.elapsed().as_millis() as u64,
        "zone signed"
    );
    // The signed zone's checks repeat the unsigned zone's warnings: only new ones are added.
    let mut warnings = l.warnings;
    for w in s.warnings {
        if !warnings.iter().any(|x| x.msg == w.msg) {
            warnings.push(zones::Diagnostic {
                at: w.at,
                msg: format!("signed zone: {}", w.msg),
            });
        }
    }
    let upstream = job.keep_unsigned.then(|| Arc::new(l.zone));
    Ok(LoadedZone {
        loaded: zones::Loaded {
            zone: s.zone,
            warnings,
            elapsed: l.elapsed + t.elapsed(),
            mtime: l.mtime,
        },
        resign_at: Some(s.resign_at),
        // The signer knows it: no walk over the signatures.
        rrsig_expiry: Some(s.earliest_expiration),
        signatures: (s.made, s.kept),
        compact: s.compact,
        upstream,
        geo: None,
    })
}
