//! The zone list: `[[zone]]` entries, `[[template]]`s holding settings shared by many
//! zones, `[[zone_set]]`s (a directory of zone files, or a list file) and the zones added at
//! run time (`[server] zone_state`), resolved into one [`ZoneConfig`] per zone.
//!
//! A zone's own setting wins over its template's; a zone without `template` takes the
//! template named `default` when there is one (as Knot's templates do).

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::defence::CookiePolicy;
use super::{Config, ConfigError, XdpAnswers, ZoneConfig, ZoneSource};

/// `[[zone]]` as written, a `[[template]]`, or a zone in the zone state file: each setting
/// unset falls back to the template.
#[derive(Debug, Clone, Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub struct ZoneSpec {
    /// A template's name (`[[template]]` only).
    pub name: Option<String>,
    /// The zone's apex (`[[zone]]` only).
    pub origin: Option<String>,
    /// The master file; in a template, a pattern where `%s` stands for the origin without
    /// its final dot (relative paths are relative to the config file).
    pub file: Option<PathBuf>,
    /// The template whose settings this zone takes (`[[zone]]` only).
    pub template: Option<String>,
    /// Cookie policy: "off", "on" or "require" (default: `[defence.cookies] policy`).
    pub cookies: Option<CookiePolicy>,
    /// The tenant in the rules file (0: none).
    pub tenant: Option<u32>,
    /// Answer names in the XDP guard too: `true`, `"hot"` (default) or `false`.
    pub xdp_answers: Option<XdpAnswers>,
    /// Primaries (`IP:PORT`): set, the zone is a secondary kept in `file`.
    pub primaries: Option<Vec<String>>,
    /// Secondaries to NOTIFY (`IP:PORT`) on every change.
    pub notify: Option<Vec<String>>,
    /// Prefixes allowed to transfer the zone (empty: no transfers).
    pub allow_transfer: Option<Vec<String>>,
    /// Prefixes besides the primaries' addresses that may send NOTIFY.
    pub allow_notify: Option<Vec<String>>,
    /// The TSIG key (a `[[tsig_key]]` name) transfers and NOTIFY must use.
    pub tsig: Option<String>,
    /// The zone's variants by client network (Knot's geoip module's file: `net:`, or
    /// `view:` naming a `[[view]]`); in a template `%s` stands for the origin without its
    /// final dot (relative paths are relative to the config file). Read with the zone.
    pub geo: Option<PathBuf>,
    /// How `tls:` primaries are verified (zone transfers over TLS, RFC 9103): `name`
    /// and/or `pin_sha256`, `ca_file`, `client_cert`/`client_key`.
    pub transfer_tls: Option<super::transfer::TransferTls>,
    /// A catalog zone (RFC 9432): "consumer" (a secondary whose members dnsd serves) or
    /// "producer" (dnsd writes it, listing the zones that name it in `catalog_zone`).
    pub catalog: Option<CatalogRole>,
    /// Listed in this catalog zone, which dnsd produces.
    pub catalog_zone: Option<String>,
    /// The group property given to this zone in the catalog it is listed in.
    pub catalog_group: Option<String>,
    /// A consumed catalog: the template of members whose group names no template.
    pub catalog_template: Option<String>,
    /// A consumed catalog: the templates a member's group may pick (Knot's list of
    /// `catalog-template`s); a group naming another is not followed.
    pub catalog_groups: Option<Vec<String>>,
    /// A consumed catalog: most members it may list (default 100,000; beyond, refused and
    /// counted).
    pub catalog_max_members: Option<usize>,
    /// The `[[dnssec_policy]]` that signs the zone.
    pub dnssec_policy: Option<String>,
}

/// Most members a consumed catalog may list unless `catalog_max_members` says otherwise.
pub const DEFAULT_CATALOG_MAX_MEMBERS: usize = 100_000;

/// The role of a catalog zone (`catalog`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum CatalogRole {
    /// Transferred from primaries; its members are served as secondaries.
    Consumer,
    /// Written by dnsd from the zones that name it.
    Producer,
}

/// `[[zone_set]]`: many zones from a directory or a list file, with one template.
#[derive(Debug, Clone, Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub struct ZoneSetConfig {
    /// A directory: each file `ORIGIN{suffix}` in it is the zone ORIGIN (hidden files and
    /// other names are skipped). Read again on every reload.
    pub dir: Option<PathBuf>,
    /// A list file: one zone per line, `ORIGIN [FILE]` (`#` starts a comment); without
    /// FILE the template's file pattern names it. Read again on every reload.
    pub list: Option<PathBuf>,
    /// The file name ending that `dir` strips to find the origin.
    #[serde(default = "default_suffix")]
    pub suffix: String,
    /// The template of every zone of the set (default: the `default` template, if any).
    pub template: Option<String>,
}

fn default_suffix() -> String {
    ".zone".into()
}

/// One zone added at run time, as the zone state file keeps it.
#[derive(Debug, Clone, Deserialize, Serialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct StateZone {
    /// Apex.
    pub origin: String,
    /// Master file (absolute).
    pub file: PathBuf,
    /// Template, if one was named.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub template: Option<String>,
    /// Added by a user other than root or the daemon's own: its file is read only if that
    /// user could, at every load, and never `$INCLUDE`s.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub added_by: Option<AddedBy>,
}

/// Who added a zone at run time (`ctl zone add`), as its file is checked against.
#[derive(Debug, Clone, Deserialize, Serialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct AddedBy {
    /// User id.
    pub uid: u32,
    /// Group id.
    pub gid: u32,
    /// Supplementary groups.
    #[serde(default)]
    pub groups: Vec<u32>,
}

impl AddedBy {
    /// The control peer who asked.
    pub fn of(p: &shield::control::Peer) -> AddedBy {
        AddedBy {
            uid: p.uid,
            gid: p.gid,
            groups: p.groups.clone(),
        }
    }

    /// Opens `path` as this user could (see [`shield::control::Peer::open`]).
    pub fn open(&self, path: &std::path::Path) -> Result<std::fs::File, String> {
        shield::control::Peer {
            uid: self.uid,
            gid: self.gid,
            groups: self.groups.clone(),
        }
        .open(path)
    }
}

/// The zone state file (`[server] zone_state`): zones added with `ctl zone add`.
#[derive(Debug, Clone, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct ZoneState {
    /// The zones, in the order added.
    #[serde(default)]
    pub zone: Vec<StateZone>,
}

impl ZoneState {
    /// Reads the state file; a missing file is an empty state.
    pub fn read(path: &Path) -> Result<ZoneState, String> {
        match shield::files::read_text(path, shield::files::CONFIG_MAX) {
            Ok(t) => toml::from_str(&t).map_err(|e| {
                let l = shield::toml_pos::locate(&t, &e);
                format!("{}:{}:{}: {}", path.display(), l.line, l.col, l.message)
            }),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(ZoneState::default()),
            Err(e) => Err(format!("{}: {e}", path.display())),
        }
    }

    /// Writes the state file whole (a new file renamed over the old: never half written).
    pub fn write(&self, path: &Path) -> Result<(), String> {
        let text = format!(
            "# Zones added with `dnsd ctl zone add`; written by dnsd.\n{}",
            toml::to_string(self).map_err(|e| e.to_string())?
        );
        // 0640 whatever the umask: it names the files dnsd serves at its next start.
        shield::files::write_atomic(path, text.as_bytes(), 0o640)
            .map_err(|e| format!("{}: {e}", path.display()))
    }
}

/// Templates by name.
pub struct Templates<'a>(HashMap<&'a str, &'a ZoneSpec>);

impl<'a> Templates<'a> {
    /// The config's templates, checked: each named, once, with no zone-only key.
    pub fn new(c: &'a Config) -> Result<Templates<'a>, (String, String)> {
        let mut m = HashMap::new();
        for (i, t) in c.templates.iter().enumerate() {
            let key = format!("template[{i}]");
            let Some(name) = t.name.as_deref() else {
                return Err((format!("{key}.name"), "a template needs a name".into()));
            };
            if t.origin.is_some() || t.template.is_some() {
                return Err((
                    key,
                    "origin and template belong to [[zone]], not [[template]]".into(),
                ));
            }
            if t.tenant.is_some_and(|n| n > shield::rules::MAX_TENANT_ID) {
                return Err((
                    format!("{key}.tenant"),
                    format!(
                        "tenant ids go from 1 to {} (0: none)",
                        shield::rules::MAX_TENANT_ID
                    ),
                ));
            }
            if m.insert(name, t).is_some() {
                return Err((
                    format!("{key}.name"),
                    format!("template {name} is defined twice"),
                ));
            }
        }
        Ok(Templates(m))
    }

    /// True when the template `name` makes its zones catalogs.
    pub fn makes_catalog(&self, name: &str) -> bool {
        self.0.get(name).is_some_and(|t| t.catalog.is_some())
    }

    /// The template `name` (or `default`, when `name` is unset and there is one).
    fn pick(
        &self,
        name: Option<&str>,
        key: &str,
    ) -> Result<Option<&'a ZoneSpec>, (String, String)> {
        match name {
            Some(n) => self.0.get(n).copied().map(Some).ok_or_else(|| {
                (
                    format!("{key}.template"),
                    format!("no [[template]] named {n}"),
                )
            }),
            None => Ok(self.0.get("default").copied()),
        }
    }

    /// Whether a template `name` exists.
    pub fn has(&self, name: &str) -> bool {
        self.0.contains_key(name)
    }

    /// The template `name` (or `default`, when `name` is unset and there is one).
    pub fn get(&self, name: Option<&str>) -> Option<&'a ZoneSpec> {
        self.pick(name, "").ok().flatten()
    }

    /// The zone `origin` with `spec`'s settings over its template's; `key` names it in errors.
    pub fn resolve(
        &self,
        origin: &str,
        spec: &ZoneSpec,
        source: ZoneSource,
        key: String,
    ) -> Result<ZoneConfig, (String, String)> {
        let t = self.pick(spec.template.as_deref(), &key)?;
        let catalog = inherit(spec, t, |s| s.catalog.as_ref());
        let file = match (&spec.file, t.and_then(|t| t.file.as_ref())) {
            (Some(f), _) if f.as_os_str().is_empty() => {
                return Err((format!("{key}.file"), "an empty path".into()));
            }
            (Some(f), _) => f.clone(),
            (None, Some(pattern)) => file_from_pattern(pattern, origin),
            // A catalog dnsd produces lives in memory.
            (None, None) if catalog == Some(CatalogRole::Producer) => PathBuf::new(),
            (None, None) => {
                return Err((
                    format!("{key}.file"),
                    "missing (and no template with a file pattern)".into(),
                ));
            }
        };
        Ok(ZoneConfig {
            origin: origin.to_string(),
            added_by: None,
            file,
            template: spec.template.clone(),
            cookies: inherit(spec, t, |s| s.cookies.as_ref()),
            tenant: inherit(spec, t, |s| s.tenant.as_ref()).unwrap_or(0),
            xdp_answers: inherit(spec, t, |s| s.xdp_answers.as_ref()).unwrap_or_default(),
            primaries: inherit(spec, t, |s| s.primaries.as_ref()).unwrap_or_default(),
            notify: inherit(spec, t, |s| s.notify.as_ref()).unwrap_or_default(),
            allow_transfer: inherit(spec, t, |s| s.allow_transfer.as_ref()).unwrap_or_default(),
            allow_notify: inherit(spec, t, |s| s.allow_notify.as_ref()).unwrap_or_default(),
            tsig: inherit(spec, t, |s| s.tsig.as_ref()),
            transfer_tls: inherit(spec, t, |s| s.transfer_tls.as_ref()),
            geo: inherit(spec, t, |s| s.geo.as_ref()).map(|p| file_from_pattern(&p, origin)),
            catalog,
            catalog_zone: inherit(spec, t, |s| s.catalog_zone.as_ref()),
            catalog_group: inherit(spec, t, |s| s.catalog_group.as_ref()),
            catalog_template: inherit(spec, t, |s| s.catalog_template.as_ref()),
            catalog_groups: inherit(spec, t, |s| s.catalog_groups.as_ref()).unwrap_or_default(),
            catalog_max_members: inherit(spec, t, |s| s.catalog_max_members.as_ref())
                .unwrap_or(DEFAULT_CATALOG_MAX_MEMBERS),
            dnssec_policy: inherit(spec, t, |s| s.dnssec_policy.as_ref()),
            source,
            member_of: None,
            key,
        })
    }
}

/// A setting of the zone `spec`, else of its template `t` (the zone's own setting wins).
fn inherit<T: Clone>(
    spec: &ZoneSpec,
    t: Option<&ZoneSpec>,
    f: impl Fn(&ZoneSpec) -> Option<&T>,
) -> Option<T> {
    f(spec).or_else(|| t.and_then(&f)).cloned()
}

/// A template's file pattern for `origin`: `%s` → the origin as one file-name component
/// ([`zones::name::file_stem`]: without its final dot, no `/` or escape left in it), cut to
/// fit where the component would pass the longest file name ([`zones::name::fit_stem`]).
pub fn file_from_pattern(pattern: &Path, origin: &str) -> PathBuf {
    let o = zones::name::file_stem(origin);
    let mut out = PathBuf::new();
    for c in pattern.components() {
        let c = c.as_os_str().to_string_lossy();
        let n = c.matches("%s").count();
        if n == 0 {
            out.push(&*c);
            continue;
        }
        let other = c.len() - 2 * n;
        let room = zones::name::FILE_NAME_MAX.saturating_sub(other) / n;
        let fitted = zones::name::fit_stem(&o, zones::name::FILE_NAME_MAX - room);
        out.push(c.replace("%s", &fitted));
    }
    out
}

/// The `[[zone]]` entries with their templates (no file is read).
pub fn resolve_zones(c: &Config) -> Result<Vec<ZoneConfig>, (String, String)> {
    let t = Templates::new(c)?;
    let mut out = Vec::with_capacity(c.zone_specs.len());
    for (i, z) in c.zone_specs.iter().enumerate() {
        let key = format!("zone[{i}]");
        if z.name.is_some() {
            return Err((format!("{key}.name"), "name belongs to [[template]]".into()));
        }
        let Some(origin) = z.origin.as_deref() else {
            return Err((format!("{key}.origin"), "missing".into()));
        };
        out.push(t.resolve(origin, z, ZoneSource::Config, key)?);
    }
    Ok(out)
}

/// The zones of `[[zone_set]]`s and of the zone state file, with their templates; `dir` is
/// the config file's directory. Zones the config already has are skipped (a zone state
/// that names one is warned about). True when zones were added.
pub fn expand_sets(c: &mut Config, dir: &Path, path: &Path) -> Result<bool, ConfigError> {
    let inv = |key: String, msg: String| ConfigError::Invalid {
        path: path.to_path_buf(),
        key,
        msg,
    };
    // Absolute, so that a path already under it (a set's files) is never joined to it again
    // (a relative config path made `conf/conf/zones/…`).
    let abs;
    let dir = if dir.is_relative() {
        abs = std::env::current_dir()
            .map_err(|e| inv("zone_set".into(), format!("the current directory: {e}")))?
            .join(dir);
        abs.as_path()
    } else {
        dir
    };
    let mut added = Vec::new();
    {
        let t = Templates::new(c).map_err(|(k, m)| inv(k, m))?;
        for (i, s) in c.zone_sets.iter().enumerate() {
            let key = format!("zone_set[{i}]");
            if let Some(n) = &s.template
                && !t.has(n)
            {
                return Err(inv(
                    format!("{key}.template"),
                    format!("no [[template]] named {n}"),
                ));
            }
            let spec = ZoneSpec {
                template: s.template.clone(),
                ..Default::default()
            };
            let entries = match (&s.dir, &s.list) {
                (Some(d), None) => {
                    read_dir(&dir.join(d), &s.suffix).map_err(|m| inv(format!("{key}.dir"), m))?
                }
                (None, Some(l)) => {
                    read_list(&dir.join(l)).map_err(|m| inv(format!("{key}.list"), m))?
                }
                _ => return Err(inv(key, "needs one of dir or list".into())),
            };
            for (origin, file, at) in entries {
                let spec = ZoneSpec {
                    file,
                    ..spec.clone()
                };
                let z = t
                    .resolve(&origin, &spec, ZoneSource::Config, format!("{key} ({at})"))
                    .map_err(|(k, m)| inv(k, m))?;
                added.push(z);
            }
        }
        if let Some(sp) = &c.server.zone_state {
            let sp = dir.join(sp);
            let state = ZoneState::read(&sp).map_err(|m| inv("server.zone_state".into(), m))?;
            for (i, z) in state.zone.iter().enumerate() {
                let spec = ZoneSpec {
                    file: Some(z.file.clone()),
                    template: z.template.clone(),
                    ..Default::default()
                };
                let key = format!("server.zone_state ({}: zone {})", sp.display(), i + 1);
                let mut zc = t
                    .resolve(&z.origin, &spec, ZoneSource::State, key)
                    .map_err(|(k, m)| inv(k, m))?;
                zc.added_by = z.added_by.clone();
                added.push(zc);
            }
        }
    }
    if added.is_empty() {
        return Ok(false);
    }
    for z in &mut added {
        if z.file.is_relative() {
            z.file = dir.join(&z.file);
        }
    }
    let mut seen: std::collections::HashSet<zones::Name> = c
        .zones
        .iter()
        .filter_map(|z| zones::Name::parse(&z.origin, Some(&zones::Name::root())).ok())
        .map(|n| n.to_lowercase())
        .collect();
    for z in added {
        let n = zones::Name::parse(&z.origin, Some(&zones::Name::root()))
            .map_err(|e| inv(format!("{}.origin", z.key), e.to_string()))?
            .to_lowercase();
        if !seen.insert(n.clone()) {
            if z.source == ZoneSource::State {
                c.warnings.push(format!(
                    "{}: zone {n} is also in the config; the config's entry is served",
                    z.key
                ));
                continue;
            }
            return Err(inv(
                format!("{}.origin", z.key),
                format!("zone {n} is configured twice"),
            ));
        }
        c.zones.push(z);
    }
    drop_misplaced_user_zones(c);
    Ok(true)
}

/// Drops each zone a control-group member added (`ctl zone add`, kept in the zone state)
/// that sits above or below a zone that user did not add — the config's, root's, another
/// user's, added after it —, with a warning: above one it would answer that zone's DS and
/// delegation, below one its names. `zone add` refuses such a zone; this keeps it so when the
/// other zone came later.
fn drop_misplaced_user_zones(c: &mut Config) {
    // Most configs hold no user's zone: nothing to parse at every load of 100k zones.
    if c.zones.iter().all(|z| z.added_by.is_none()) {
        return;
    }
    let names: Vec<(Option<zones::Name>, Option<u32>)> = c
        .zones
        .iter()
        .map(|z| {
            (
                zones::Name::parse(&z.origin, Some(&zones::Name::root())).ok(),
                z.added_by.as_ref().map(|a| a.uid),
            )
        })
        .collect();
    let mut keep = Vec::with_capacity(c.zones.len());
    for (i, z) in std::mem::take(&mut c.zones).into_iter().enumerate() {
        let (Some(n), Some(uid)) = (&names[i].0, names[i].1) else {
            keep.push(z);
            continue;
        };
        let other = names.iter().enumerate().find_map(|(j, (o, by))| {
            let o = o.as_ref()?;
            let place = nesting(n, o)?;
            (j != i && *by != Some(uid)).then_some((o, place))
        });
        match other {
            Some((o, place)) => c.warnings.push(format!(
                "{}: zone {n}, added by user {uid}, is {place} {o}, a zone that user did not add: not served",
                z.key
            )),
            None => keep.push(z),
        }
    }
    c.zones = keep;
}

/// Where zone `n` stands to zone `other`: "above" it (an ancestor, or the same name), "below"
/// it, or neither.
pub fn nesting(n: &zones::Name, other: &zones::Name) -> Option<&'static str> {
    if other.is_subdomain_of(n) {
        Some("above")
    } else if n.is_subdomain_of(other) {
        Some("below")
    } else {
        None
    }
}

/// The zone files of a directory: (origin, file, where), sorted by origin.
fn read_dir(d: &Path, suffix: &str) -> Result<Vec<(String, Option<PathBuf>, String)>, String> {
    let rd = std::fs::read_dir(d).map_err(|e| format!("{}: {e}", d.display()))?;
    let mut out = Vec::new();
    for e in rd {
        let e = e.map_err(|e| format!("{}: {e}", d.display()))?;
        let name = e.file_name();
        let Some(name) = name.to_str() else { continue };
        let Some(stem) = name.strip_suffix(suffix) else {
            continue;
        };
        if stem.is_empty() || name.starts_with('.') || !e.file_type().is_ok_and(|t| !t.is_dir()) {
            continue;
        }
        let origin = if stem.ends_with('.') {
            stem.to_string()
        } else {
            format!("{stem}.")
        };
        out.push((origin, Some(e.path()), e.path().display().to_string()));
    }
    out.sort();
    Ok(out)
}

/// The zones of a list file: `ORIGIN [FILE]` per line; relative files are relative to the
/// list's directory.
fn read_list(l: &Path) -> Result<Vec<(String, Option<PathBuf>, String)>, String> {
    let text = shield::files::read_text(l, shield::files::CONFIG_MAX)
        .map_err(|e| format!("{}: {e}", l.display()))?;
    let base = l.parent().unwrap_or(Path::new("."));
    let mut out = Vec::new();
    for (n, line) in text.lines().enumerate() {
        let line = line.split('#').next().unwrap_or("").trim();
        if line.is_empty() {
            continue;
        }
        let at = format!("{}:{}", l.display(), n + 1);
        let mut f = line.split_whitespace();
        let origin = f.next().unwrap_or_default().to_string();
        let file = f.next().map(|p| base.join(p));
        if f.next().is_some() {
            return Err(format!("{at}: expected ORIGIN [FILE], found {line:?}"));
        }
        out.push((origin, file, at));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_file_pattern_keeps_every_zone_name_in_its_directory() {
        let pat = Path::new("/var/lib/palisade/zones/%s.zone");
        assert_eq!(
            file_from_pattern(pat, "Example.COM."),
            Path::new("/var/lib/palisade/zones/example.com.zone")
        );
        // Names a catalog's primary may send: a label holding `/`, an escaped dot.
        for origin in [
            "/etc/cron.d.",
            "a/../../b.",
            "0/25.2.0.192.in-addr.arpa.",
            "\\..",
            ".",
        ] {
            let f = file_from_pattern(pat, origin);
            assert_eq!(f.parent(), pat.parent(), "{origin}: {}", f.display());
        }
    }

    #[test]
    fn a_malformed_zone_state_is_refused_with_file_and_line_and_a_missing_one_is_empty() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("state.toml");
        assert!(ZoneState::read(&p).unwrap().zone.is_empty());
        for (text, want) in [
            ("[[zone]]\norigin = \"a.\"\n", "file"),
            (
                "[[zone]]\norigin = \"a.\"\nfile = \"/a\"\nbogus = 1\n",
                "bogus",
            ),
            ("[[zone]\n", ":1:"),
        ] {
            std::fs::write(&p, text).unwrap();
            let e = ZoneState::read(&p).unwrap_err();
            assert!(
                e.starts_with(&p.display().to_string()) && e.contains(want),
                "{text}: {e}"
            );
        }
        let st = ZoneState {
            zone: vec![StateZone {
                origin: "a.".into(),
                file: "/z/a.zone".into(),
                template: Some("t".into()),
                added_by: Some(AddedBy {
                    uid: 1000,
                    gid: 1000,
                    groups: vec![27],
                }),
            }],
        };
        st.write(&p).unwrap();
        assert_eq!(ZoneState::read(&p).unwrap().zone, st.zone);
    }
}
