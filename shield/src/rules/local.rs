//! A thread's own view of the rule set ([`LocalRules`]): the current rules cached, checked
//! without the shared load.

use arc_swap::ArcSwap;

use super::prepared::Prepared;
use super::set::RuleSet;
use super::tenants;
use super::{Now, Request, TenantId, Verdict};
use std::net::IpAddr;
use std::sync::Arc;

/// A per-thread view of a [`RuleSet`]: the current rules cached, refreshed when a reload swaps them.
///
/// Keeps the previous rules alive until this thread's next check after a reload.
pub struct LocalRules {
    cache: arc_swap::Cache<Arc<ArcSwap<Prepared>>, Arc<Prepared>>,
    set: Arc<RuleSet>,
}

impl std::fmt::Debug for LocalRules {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LocalRules").finish_non_exhaustive()
    }
}

impl LocalRules {
    /// The current rules (refreshed if a reload happened).
    #[inline]
    pub fn current(&mut self) -> &Arc<Prepared> {
        self.cache.load()
    }

    /// As [`RuleSet::check`], without the shared load.
    #[inline]
    pub fn check<R: Request + ?Sized>(
        &mut self,
        tenant: TenantId,
        src: IpAddr,
        req: &R,
        now: Now,
    ) -> Verdict {
        let state = &self.set.state;
        let v = self.cache.load().check(state, tenant, src, req, now);
        tenants::count(tenant, v.action);
        v
    }
}

impl RuleSet {
    /// A per-thread handle that caches the current rules and notices a reload with one relaxed load.
    pub fn local(self: &Arc<Self>) -> LocalRules {
        LocalRules {
            cache: arc_swap::Cache::new(Arc::clone(&self.current)),
            set: Arc::clone(self),
        }
    }
}
