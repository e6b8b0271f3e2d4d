//! The rules of one rules file, compiled and immutable ([`Prepared`]), and the `[global]`
//! lists the daemons and the XDP guard are given.

use crate::prefix::PrefixSet;

use super::TenantId;
use super::compiled::Tenant;
use super::error::RulesError;
use super::sources::AsnTable;
use std::net::IpAddr;
use std::path::{Path, PathBuf};

/// Rules compiled from one rules file: immutable, shared by all threads through a [`super::RuleSet`].
#[derive(Debug, Default)]
pub struct Prepared {
    pub(crate) path: PathBuf,
    /// The file's version (a hash of its text; 0 for empty rules).
    pub(crate) version: u64,
    /// Each tenant's version, and that of the file for tenants it does not name (see
    /// [`Prepared::tenant_version`]).
    pub(crate) tenant_versions: (std::collections::HashMap<super::TenantId, u64>, u64),
    pub(crate) tenants: Vec<Option<Box<Tenant>>>,
    pub(crate) bots: PrefixSet,
    pub(crate) asn: AsnTable,
    /// `[global] deny`: every tenant of both daemons (and the XDP guard).
    pub(crate) global_deny: PrefixSet,
    /// `[global]` lists as written (expanded), for the XDP guard's maps.
    pub(crate) global_lists: GlobalLists,
    /// Every tenant's `escalate`: (line, col, v4_prefix, v6_prefix), for the daemons' minimums.
    pub(crate) escalations: Vec<(usize, usize, u8, u8)>,
}

/// The rules file's `[global]` section, expanded: what the XDP guard is given.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct GlobalLists {
    /// Dropped for every tenant of both daemons, and in XDP.
    pub deny: Vec<ipnet::IpNet>,
    /// Exempt from the XDP rate limit (never from a block).
    pub allow: Vec<ipnet::IpNet>,
    /// Never blocked nor suspected by any automatic writer.
    pub never_block: Vec<ipnet::IpNet>,
}

pub(super) const TENANT_RATE_RULE: u32 = u32::MAX;

impl Prepared {
    /// Rules that apply nothing to anyone.
    pub fn empty() -> Self {
        Prepared::default()
    }

    /// The file these rules came from.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The rules' version: a hash of the file's text, alike on every node with the same file
    /// (HTTP challenge clearances name it, so that changed rules challenge again).
    pub fn version(&self) -> u64 {
        self.version
    }

    /// `tenant`'s rules' version: a hash of the file's text without the other tenants'
    /// tables, alike on every node with the same file (HTTP challenge clearances name it,
    /// so that a change to a tenant's rules — or to what every tenant shares — challenges
    /// that tenant's clients again, and an edit of another tenant's does not).
    pub fn tenant_version(&self, tenant: super::TenantId) -> u64 {
        let (by_tenant, rest) = &self.tenant_versions;
        by_tenant.get(&tenant).copied().unwrap_or(*rest)
    }

    /// `tenant`'s hold generation (0 without rules of its own).
    pub(crate) fn hold_gen(&self, tenant: super::TenantId) -> u64 {
        self.tenants
            .get(tenant as usize)
            .and_then(Option::as_ref)
            .map_or(0, |t| t.hold_gen)
    }

    /// The `[global]` deny, allow and never-block lists.
    pub fn global_lists(&self) -> &GlobalLists {
        &self.global_lists
    }

    /// Refuses an `escalate` whose `v4_prefix` / `v6_prefix` is shorter than the daemon's
    /// `[block] min_prefix_v4` / `min_prefix_v6` (such escalations would all be refused).
    pub fn check_min_prefix(&self, min_v4: u8, min_v6: u8) -> Result<(), RulesError> {
        for &(line, col, v4, v6) in &self.escalations {
            if v4 < min_v4 || v6 < min_v6 {
                return Err(RulesError::At {
                    path: self.path.clone(),
                    line,
                    col,
                    message: format!(
                        "escalate v4_prefix/v6_prefix /{v4} /{v6} is shorter than [block] \
                         min_prefix_v4/min_prefix_v6 /{min_v4} /{min_v6}"
                    ),
                });
            }
        }
        Ok(())
    }

    /// The name a tenant has in the rules file.
    pub fn tenant_name(&self, tenant: TenantId) -> Option<&str> {
        self.tenants
            .get(tenant as usize)
            .and_then(|t| t.as_ref())
            .and_then(|t| t.name.as_deref())
    }

    /// True when the file has a `[[tenant]]` of `tenant`, with rules or none.
    pub fn declares(&self, tenant: TenantId) -> bool {
        self.tenant_versions.0.contains_key(&tenant)
    }

    /// True when `tenant` escalates DNS sources into the block map (`escalate dns =
    /// "block_map"`): a forwarder relaying one user's queries is then blocked everywhere.
    pub fn dns_block_map(&self, tenant: TenantId) -> bool {
        self.tenants
            .get(tenant as usize)
            .and_then(|t| t.as_ref())
            .and_then(|t| t.escalate.as_ref())
            .is_some_and(|e| e.dns_block_map)
    }

    /// Number of tenants with rules.
    pub fn tenant_count(&self) -> usize {
        self.tenants.iter().filter(|t| t.is_some()).count()
    }

    /// True when a check of `tenant` may say anything but pass: it has rules, or the
    /// `[global]` deny list applies to everyone (callers skip the check otherwise).
    #[inline]
    pub fn may_apply(&self, tenant: TenantId) -> bool {
        !self.global_deny.is_empty() || self.has_rules(tenant)
    }

    /// True when `tenant`'s rules read an attribute of `bit` ([`super::attr::bit`]): a caller that
    /// formats attributes formats only those.
    #[inline]
    pub fn reads(&self, tenant: TenantId, bit: u32) -> bool {
        self.reads_mask(tenant) & bit != 0
    }

    /// Every attribute bit ([`super::attr::bit`]) `tenant`'s rules read.
    #[inline]
    pub fn reads_mask(&self, tenant: TenantId) -> u32 {
        self.tenants
            .get(tenant as usize)
            .and_then(|t| t.as_ref())
            .map_or(0, |t| t.reads)
    }

    /// True when `tenant`'s rules read the attribute `name` (a condition on it, or a rate
    /// limit keyed by it); for load-time decisions (it looks at every rule).
    pub fn reads_attr(&self, tenant: TenantId, name: &str) -> bool {
        let Some(t) = self.tenants.get(tenant as usize).and_then(|t| t.as_ref()) else {
            return false;
        };
        let keyed = |r: &Option<super::compiled::RateSpec>| {
            r.as_ref().and_then(|r| r.key.as_deref()) == Some(name)
        };
        keyed(&t.rate)
            || t.rules
                .iter()
                .any(|r| keyed(&r.rate) || r.conds.iter().any(|c| &*c.attr == name))
    }

    /// True when the tenant has any rule (callers may skip the check entirely otherwise).
    pub fn has_rules(&self, tenant: TenantId) -> bool {
        self.tenants
            .get(tenant as usize)
            .is_some_and(Option::is_some)
    }

    /// True when some tenant has a `challenge` rule.
    pub fn has_challenges(&self) -> bool {
        self.tenants.iter().flatten().any(|t| {
            t.rules
                .iter()
                .any(|r| r.verdict.action == super::Action::Challenge)
        })
    }

    /// True when `ip` is in the known-good crawler ranges.
    pub fn is_known_bot(&self, ip: IpAddr) -> bool {
        self.bots.contains(ip)
    }

    /// The ASN announcing `ip`, from the `[asn]` table.
    pub fn asn_of(&self, ip: IpAddr) -> Option<u32> {
        self.asn.lookup(ip)
    }
}
