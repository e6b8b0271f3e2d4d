//! What each zone allows and whom it talks to (ACL, TSIG key, NOTIFY targets, primaries),
//! from the config; replaced whole on reload.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;

use ipnet::IpNet;
use zones::Name;

use crate::config::transfer::{
    TransferTls, decode_secret, parse_addr, parse_allow, parse_prefix, parse_primary,
};
use crate::config::zone_list::CatalogRole;
use crate::config::{Config, ZoneConfig};
use crate::query::tsig::{self, KeyStore};

/// A primary: its address, and whether transfers from it go over TLS (XoT, RFC 9103).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Primary {
    /// Its address.
    pub addr: SocketAddr,
    /// Reached over TLS, verified by the zone's `transfer_tls`.
    pub tls: bool,
}

impl std::fmt::Display for Primary {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.tls {
            write!(f, "tls:{}", self.addr)
        } else {
            self.addr.fmt(f)
        }
    }
}

/// A prefix allowed to transfer a zone.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Allowed {
    /// The prefix.
    pub net: IpNet,
    /// Only over TLS (written `tls:PREFIX`).
    pub tls_only: bool,
}

/// What one zone allows and whom it talks to.
#[derive(Debug, Clone)]
pub struct ZonePolicy {
    /// Apex (lower case).
    pub origin: Name,
    /// The master file (for a secondary: where the copy is kept).
    pub file: PathBuf,
    /// Prefixes allowed to transfer the zone.
    pub allow: Vec<Allowed>,
    /// The key transfers and NOTIFY must be signed with.
    pub key: Option<Arc<tsig::Key>>,
    /// Secondaries to NOTIFY.
    pub notify: Vec<SocketAddr>,
    /// Primaries (non-empty: the zone is a secondary).
    pub primaries: Vec<Primary>,
    /// How `tls:` primaries are verified, as configured (a consumed catalog's members
    /// inherit it).
    pub transfer_tls: Option<TransferTls>,
    /// Its rustls settings, or why they could not be made (transfers from `tls:` primaries
    /// then fail with it; never fall back to cleartext).
    pub xot: Option<Result<Arc<super::tls::XotClient>, String>>,
    /// Prefixes besides the primaries that may send NOTIFY.
    pub allow_notify: Vec<IpNet>,
    /// A catalog zone: consumed or produced.
    pub catalog: Option<CatalogRole>,
    /// A consumed catalog: the template of members whose group names none.
    pub catalog_template: Option<String>,
    /// A consumed catalog: the templates a member's group may pick.
    pub catalog_groups: Vec<String>,
    /// A consumed catalog: most members it may list.
    pub catalog_max_members: usize,
    /// The zone's tenant (a consumed catalog's members are its tenant's, whatever their group).
    pub tenant: u32,
    /// The name of the TSIG key, as configured (a consumed catalog's members use it too).
    pub tsig_name: Option<String>,
    /// The consumed catalog that lists the zone, if one does (its refreshes take turns with
    /// other catalogs' and primaries').
    pub member_of: Option<Box<str>>,
}

impl ZonePolicy {
    /// True when the zone is a secondary.
    pub fn is_secondary(&self) -> bool {
        !self.primaries.is_empty()
    }
}

/// Policies of the zones with transfer settings and the keys, replaced whole on config
/// reload (one zone's on `ctl zone add` / `remove`).
#[derive(Debug, Default, Clone)]
pub struct Policies {
    zones: HashMap<Vec<u8>, Arc<ZonePolicy>>,
    /// The TSIG keys.
    pub keys: Arc<KeyStore>,
    /// The XoT clients made so far, by their settings.
    xot: HashMap<TransferTls, Result<Arc<super::tls::XotClient>, String>>,
}

impl Policies {
    /// The policies of a (checked) config.
    pub fn from_config(c: &Config) -> Policies {
        let keys: Vec<Arc<tsig::Key>> = c
            .tsig_keys
            .iter()
            .filter_map(|k| {
                let alg = tsig::Algorithm::from_config(&k.algorithm)?;
                let secret = decode_secret(&k.secret).ok()?;
                tsig::Key::new(&k.name, alg, secret).ok().map(Arc::new)
            })
            .collect();
        let mut p = Policies {
            zones: HashMap::new(),
            keys: Arc::new(KeyStore::new(keys)),
            xot: HashMap::new(),
        };
        for z in &c.zones {
            p.set_zone(z);
        }
        p
    }

    /// Sets (or, without transfer settings, drops) the policy of zone `z`.
    pub fn set_zone(&mut self, z: &ZoneConfig) {
        // A zone without transfer settings needs no policy: no transfers, no NOTIFY.
        let none = z.allow_transfer.is_empty()
            && z.notify.is_empty()
            && z.primaries.is_empty()
            && z.allow_notify.is_empty()
            && z.tsig.is_none()
            && z.catalog.is_none();
        if none && self.zones.is_empty() {
            return;
        }
        let Ok(origin) = Name::parse(&z.origin, Some(&Name::root())) else {
            return;
        };
        let origin = origin.to_lowercase();
        if none {
            self.zones.remove(origin.as_wire());
            return;
        }
        let keys = &self.keys;
        let p =
            ZonePolicy {
                file: z.file.clone(),
                allow: z
                    .allow_transfer
                    .iter()
                    .filter_map(|p| parse_allow(p).ok())
                    .map(|(net, tls_only)| Allowed { net, tls_only })
                    .collect(),
                key: z.tsig.as_deref().and_then(|k| keys.by_name(k).cloned()),
                notify: z.notify.iter().filter_map(|a| parse_addr(a).ok()).collect(),
                primaries: z
                    .primaries
                    .iter()
                    .filter_map(|a| parse_primary(a).ok())
                    .map(|(addr, tls)| Primary { addr, tls })
                    .collect(),
                transfer_tls: z.transfer_tls.clone(),
                xot: z.transfer_tls.as_ref().map(|t| {
                    // Zones of one template share one client (its files read once per reload).
                    self.xot
                        .entry(t.clone())
                        .or_insert_with(|| {
                            super::tls::XotClient::new(t).map(Arc::new).inspect_err(|e| {
                            tracing::error!(zone = %z.origin, "zone transfers over TLS: {e}");
                        })
                        })
                        .clone()
                }),
                allow_notify: z
                    .allow_notify
                    .iter()
                    .filter_map(|p| parse_prefix(p).ok())
                    .collect(),
                catalog: z.catalog,
                catalog_template: z.catalog_template.clone(),
                catalog_groups: z.catalog_groups.clone(),
                catalog_max_members: z.catalog_max_members,
                tenant: z.tenant,
                tsig_name: z.tsig.clone(),
                member_of: z.member_of.as_deref().map(Into::into),
                origin: origin.clone(),
            };
        self.zones.insert(origin.as_wire().to_vec(), Arc::new(p));
    }

    /// Drops the policy of the zone with this lower-case apex.
    pub fn remove_zone(&mut self, apex: &[u8]) {
        self.zones.remove(apex);
    }

    /// The policy of the zone with this lower-case apex.
    pub fn zone(&self, apex: &[u8]) -> Option<&Arc<ZonePolicy>> {
        self.zones.get(apex)
    }

    /// Every zone's policy.
    pub fn all(&self) -> impl Iterator<Item = &Arc<ZonePolicy>> {
        self.zones.values()
    }
}
