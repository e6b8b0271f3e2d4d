//! `dnsd check-config`, the config `serve` runs from (a file with flags on top), and
//! `dnsd ctl -c CONFIG events-init` without a running server.

use std::process::ExitCode;

/// `dnsd ctl -c CONFIG events-init [--cluster NAME]`: applies the ClickHouse schema of the
/// config's `[events.clickhouse]`, whether or not a server runs.
pub fn events_init_from_config(path: &std::path::Path, rest: &[String]) -> ExitCode {
    let cluster = match rest {
        [] => None,
        [flag, name] if flag == "--cluster" => Some(name.as_str()),
        _ => {
            eprintln!("dnsd ctl: events-init takes nothing or --cluster NAME");
            return ExitCode::from(2);
        }
    };
    let cfg = match crate::config::Config::load(path) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("dnsd ctl: {e}");
            return ExitCode::from(2);
        }
    };
    let Some(ch) = &cfg.events.clickhouse else {
        eprintln!(
            "dnsd ctl: {} has no [events.clickhouse] section",
            path.display()
        );
        return ExitCode::from(1);
    };
    let done = match cluster {
        Some(c) => shield::events::clickhouse::init_cluster(ch, c),
        None => shield::events::clickhouse::init_schema(ch),
    };
    match done {
        Ok(text) => {
            print!("{text}");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("dnsd ctl: events-init: {e}");
            ExitCode::from(1)
        }
    }
}

/// The config from a file, with flags added on top (or from flags alone).
pub fn build_config(
    path: Option<&std::path::Path>,
    flags: &crate::config::Overrides,
) -> Result<crate::config::Config, String> {
    let mut cfg = match path {
        Some(p) => crate::config::Config::load(p).map_err(|e| e.to_string())?,
        None => crate::config::Config::default(),
    };
    flags.apply(&mut cfg)?;
    Ok(cfg)
}

/// `dnsd check-config -c FILE`: the config, each zone file (as check-zone, quietly: only
/// problems) and the rules file; 0 when everything would load.
pub fn check_config(path: &std::path::Path, with_zones: bool) -> u8 {
    let cfg = match crate::config::Config::load(path) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("dnsd: {e}");
            return 1;
        }
    };
    // What the load noticed, as `serve` logs it.
    for w in &cfg.warnings {
        eprintln!("warning: {w}");
    }
    // The zones as `serve` loads them (zone_registry::load_all, on all cores); a secondary's
    // file may not exist yet: it comes from the primary.
    // (Config::load refused any origin that does not parse.)
    // Each zone's geo file too, read as `serve` reads it (its views, TTL and keys).
    let geos: Vec<_> = if with_zones {
        crate::daemon::reload::zone_list(&cfg)
            .into_iter()
            .map(|d| d.geo)
            .collect()
    } else {
        Vec::new()
    };
    let plan: Vec<_> = cfg
        .zones
        .iter()
        .enumerate()
        .filter(|_| with_zones)
        // A catalog dnsd produces has no file.
        .filter(|(_, z)| z.catalog != Some(crate::config::zone_list::CatalogRole::Producer))
        .filter(|(_, z)| z.primaries.is_empty() || z.file.exists())
        .filter_map(|(i, z)| {
            let origin = zones::Name::parse(&z.origin, Some(&zones::Name::root())).ok()?;
            // A secondary's copy is read as `serve` reads it (see `Planned::secondary`).
            Some(crate::zone::registry::Planned {
                secondary: !z.primaries.is_empty(),
                geo: geos.get(i).cloned().flatten(),
                ..crate::zone::registry::Planned::unsigned(i, origin, z.file.clone())
            })
        })
        .collect();
    let mut bad = 0;
    // What signing would refuse that an unsigned load does not see: a name too long for
    // NSEC3's hash label (`serve` refuses that zone's signed version).
    for z in cfg.zones.iter().filter(|_| with_zones) {
        let policy = z
            .dnssec_policy
            .as_deref()
            .and_then(|n| cfg.policies.iter().find(|p| p.name == n));
        if let (Some(p), Ok(origin)) = (
            policy,
            zones::Name::parse(&z.origin, Some(&zones::Name::root())),
        ) && matches!(p.denial, zones::sign::Denial::Nsec3 { .. })
            && !zones::sign::nsec3_fits(&origin)
        {
            println!(
                "{}: zone {}: {} (dnssec_policy {:?})",
                z.file.display(),
                z.origin,
                zones::sign::SignError::Nsec3NameTooLong(origin.as_wire().len()),
                p.name
            );
            bad += 1;
        }
    }
    for (i, r) in crate::zone::load::load_all(plan) {
        let z = &cfg.zones[i];
        match r {
            Ok(l) => {
                for w in &l.loaded.warnings {
                    println!("{}: warning: {}", w.at, w.msg);
                }
            }
            Err(e) => {
                println!("{e}");
                println!("{}: zone {} does not load", z.file.display(), z.origin);
                bad += 1;
            }
        }
    }
    let mut tenants = 0;
    match cfg.load_rules() {
        Ok(p) => {
            tenants = p.as_ref().map_or(0, |p| p.tenant_count());
            // As `serve` and `ctl reload` warn: a zone whose tenant has no rules.
            for w in cfg.tenant_warnings(p.as_ref()) {
                eprintln!("warning: {w}");
            }
        }
        Err(e) => {
            eprintln!("dnsd: {e}");
            bad += 1;
        }
    }
    // The MaxMind database, opened as `serve` opens it (a corrupt one passed here and
    // stopped the start).
    if let Some(db) = &cfg.geoip.db {
        let keys = cfg
            .geoip
            .keys
            .iter()
            .filter_map(|k| crate::zone::geo::GeoKey::parse(k))
            .collect();
        if let Err(e) = crate::zone::geo::GeoDb::open(db, keys) {
            eprintln!("dnsd: geoip.db: {e}");
            bad += 1;
        }
    }
    // The DNS over TLS / QUIC pair, read as `serve` reads it (a key of another certificate
    // passed here and stopped the start).
    if let (Some(cert), Some(key)) = (&cfg.server.tls_cert, &cfg.server.tls_key)
        && (!cfg.server.tls_listen.is_empty() || !cfg.server.quic_listen.is_empty())
    {
        match crate::daemon::tls::DotTls::load(cert, key) {
            Ok(t) => {
                if let Some(w) = t.validity_warning(cert) {
                    eprintln!("warning: {w}");
                }
            }
            Err(e) => {
                eprintln!("dnsd: server.tls_cert/tls_key: {e}");
                bad += 1;
            }
        }
    }
    if bad > 0 {
        return 1;
    }
    println!(
        "{}: ok ({} zones{}, {} tenants with rules)",
        path.display(),
        cfg.zones.len(),
        if with_zones {
            ""
        } else {
            " listed, not loaded"
        },
        tenants
    );
    0
}
