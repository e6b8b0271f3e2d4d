//! `dnsd sign-zone`: a zone loaded and signed as `serve` does it, written out — in a scratch
//! copy of the key directory unless told to use the live one.

use std::path::PathBuf;

/// `dnsd sign-zone -c CONFIG ZONE [-o OUT]`: the zone loaded and signed as `serve` does it.
pub fn sign_zone(
    config: &std::path::Path,
    zone: &str,
    out: Option<&std::path::Path>,
    key_dir: Option<PathBuf>,
    update_keys: bool,
) -> Result<(), String> {
    let cfg = crate::config::Config::load(config).map_err(|e| e.to_string())?;
    let origin = zones::Name::parse(zone, Some(&zones::Name::root()))
        .map_err(|e| format!("{zone}: not a zone name: {e}"))?;
    let zc = cfg
        .zones
        .iter()
        .find(|z| {
            zones::Name::parse(&z.origin, Some(&zones::Name::root())).is_ok_and(|o| o == origin)
        })
        .ok_or_else(|| format!("{origin}: no such [[zone]] in {}", config.display()))?;
    let name = zc
        .dnssec_policy
        .as_deref()
        .ok_or_else(|| format!("{origin}: the zone has no dnssec_policy"))?;
    let live = cfg
        .policy(name)
        .ok_or_else(|| format!("{origin}: no [[dnssec_policy]] named {name}"))?;
    // The live key directory is the running server's: changed only when asked. Otherwise
    // this run signs with a scratch copy of the zone's keys and state.
    let scratch = tempfile::tempdir().map_err(|e| format!("scratch directory: {e}"))?;
    let dir = match (&key_dir, update_keys) {
        (Some(d), _) => d.clone(),
        (None, true) => live.key_dir.clone(),
        (None, false) => {
            let from = crate::signing::keys::zone_dir(&live.key_dir, &origin.to_string());
            let to = crate::signing::keys::zone_dir(scratch.path(), &origin.to_string());
            copy_dir(&from, &to).map_err(|e| format!("{}: {e}", from.display()))?;
            scratch.path().to_path_buf()
        }
    };
    let mut p = (**live).clone();
    p.key_dir = dir.clone();
    let policy = std::sync::Arc::new(p);
    let plan = crate::zone::registry::Planned {
        slot: 0,
        origin: origin.clone(),
        file: zc.file.clone(),
        sign: Some(crate::signing::SignJob {
            policy: policy.clone(),
            prev: None,
            keep_unsigned: false,
        }),
        geo: None,
        added_by: zc.added_by.clone(),
        secondary: false,
    };
    let loaded = crate::zone::load::load_planned(&plan).map_err(|e| e.to_string())?;
    for w in &loaded.loaded.warnings {
        if w.at.file.as_os_str().is_empty() {
            eprintln!("{origin}: warning: {}", w.msg);
        } else {
            eprintln!("{}: warning: {}", w.at, w.msg);
        }
    }
    if key_dir.is_some() || update_keys {
        warn_foreign_owner(&crate::signing::keys::zone_dir(&dir, &origin.to_string()));
    }
    let z = &loaded.loaded.zone;
    let (made, kept) = loaded.signatures;
    eprintln!(
        "{origin}: serial {}, {made} signatures made, {kept} kept",
        z.serial()
    );
    match out {
        Some(path) => {
            let header = format!("{origin} serial {}, signed by dnsd sign-zone", z.serial());
            zones::present::write_file(z, path, &header)
                .map_err(|e| format!("{}: {e}", path.display()))
        }
        None => {
            use std::io::Write as _;
            std::io::stdout()
                .write_all(zones::present::zone_to_text(z).as_bytes())
                .map_err(|e| format!("standard output: {e}"))
        }
    }
}

/// Copies the files of directory `from` (if it exists) into `to`, keeping them private.
fn copy_dir(from: &std::path::Path, to: &std::path::Path) -> std::io::Result<()> {
    use std::os::unix::fs::DirBuilderExt as _;
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(to)?;
    let rd = match std::fs::read_dir(from) {
        Ok(rd) => rd,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(e),
    };
    for e in rd {
        let e = e?;
        if e.file_type()?.is_file() {
            std::fs::copy(e.path(), to.join(e.file_name()))?;
        }
    }
    Ok(())
}

/// Warns when files in `dir` are owned by another user than the directory (the service's):
/// a run as root in the live key directory leaves files the service cannot read or replace.
fn warn_foreign_owner(dir: &std::path::Path) {
    use std::os::unix::fs::MetadataExt as _;
    let Ok(d) = std::fs::metadata(dir) else {
        return;
    };
    let Ok(rd) = std::fs::read_dir(dir) else {
        return;
    };
    for e in rd.flatten() {
        if let Ok(m) = e.metadata()
            && m.uid() != d.uid()
        {
            eprintln!(
                "dnsd sign-zone: warning: {} is owned by uid {}, its directory by uid {} (the service's?): chown it back",
                e.path().display(),
                m.uid(),
                d.uid()
            );
        }
    }
}
