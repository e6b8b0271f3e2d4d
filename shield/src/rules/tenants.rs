//! Per-tenant counts of rule checks and verdicts, bounded in cardinality: each thread counts
//! into a table of its own (one writer, no lock, no shared cache line on the request path);
//! the metrics read all tables and show the 20 tenants with most checks, the rest summed as
//! `other`, so 100,000 tenants never make 100,000 series.

use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use super::Action;

/// Tenants one thread's table holds; a new one beyond takes the slot of the least busy
/// tenant near it (whose counts move to `other`).
pub const TENANT_SLOTS: usize = 4096;
/// Slots probed for a tenant before it is counted as `other`.
const PROBES: usize = 16;
/// Tenants given series of their own in the metrics.
pub const TOP_TENANTS: usize = 20;

/// What is counted per tenant: checks, then the verdicts that are not a pass.
pub const KINDS: [&str; 5] = ["checks", "deny", "challenge", "rate_limit", "allow"];

struct Slot {
    /// Tenant id + 1 (0: free).
    tenant: AtomicU32,
    n: [AtomicU64; KINDS.len()],
}

/// One thread's counts.
pub(crate) struct TenantTable {
    slots: Box<[Slot]>,
    other: [AtomicU64; KINDS.len()],
    /// Tenants that took a slot from a less busy one (the table was full around them).
    full: AtomicU64,
}

static TABLES: Mutex<Vec<Arc<TenantTable>>> = Mutex::new(Vec::new());

thread_local! {
    static TABLE: Arc<TenantTable> = {
        let t = Arc::new(TenantTable::new());
        TABLES.lock().unwrap_or_else(|e| e.into_inner()).push(Arc::clone(&t));
        t
    };
}

#[inline]
fn bump(c: &AtomicU64) {
    // One writer per table: a load and a store, no read-modify-write.
    c.store(c.load(Ordering::Relaxed).wrapping_add(1), Ordering::Relaxed);
}

impl TenantTable {
    fn new() -> Self {
        TenantTable {
            slots: (0..TENANT_SLOTS)
                .map(|_| Slot {
                    tenant: AtomicU32::new(0),
                    n: std::array::from_fn(|_| AtomicU64::new(0)),
                })
                .collect(),
            other: std::array::from_fn(|_| AtomicU64::new(0)),
            full: AtomicU64::new(0),
        }
    }

    #[inline]
    fn count(&self, tenant: u32, action: Action) {
        let kind = match action {
            Action::Pass => None,
            Action::Deny => Some(1),
            Action::Challenge => Some(2),
            Action::RateLimit => Some(3),
            Action::Allow => Some(4),
        };
        let key = tenant.wrapping_add(1);
        let start = (tenant.wrapping_mul(0x9E37_79B1) as usize) & (TENANT_SLOTS - 1);
        let mut i = start;
        let mut least = (u64::MAX, start);
        for _ in 0..PROBES {
            let s = &self.slots[i];
            let t = s.tenant.load(Ordering::Relaxed);
            if t == 0 {
                s.tenant.store(key, Ordering::Relaxed);
            }
            if t == 0 || t == key {
                bump(&s.n[0]);
                if let Some(k) = kind {
                    bump(&s.n[k]);
                }
                return;
            }
            let n = s.n[0].load(Ordering::Relaxed);
            if n < least.0 {
                least = (n, i);
            }
            i = (i + 1) & (TENANT_SLOTS - 1);
        }
        // Full around here: the tenant with fewest checks in the window gives its slot up
        // (its counts go to `other`), so that a tenant that gets busy later is still named.
        bump(&self.full);
        let s = &self.slots[least.1];
        for (o, n) in self.other.iter().zip(&s.n) {
            o.store(
                o.load(Ordering::Relaxed)
                    .wrapping_add(n.load(Ordering::Relaxed)),
                Ordering::Relaxed,
            );
            n.store(0, Ordering::Relaxed);
        }
        s.tenant.store(key, Ordering::Relaxed);
        bump(&s.n[0]);
        if let Some(k) = kind {
            bump(&s.n[k]);
        }
    }
}

/// Counts one check of `tenant` that gave `action` (on this thread's table).
#[inline]
pub(crate) fn count(tenant: u32, action: Action) {
    TABLE.with(|t| t.count(tenant, action));
}

/// The counts of every thread: the [`TOP_TENANTS`] tenants with most checks, the rest
/// summed (with what tables could not hold) as `other`, and how many checks went to `other`
/// because a table was full.
pub fn tenant_counts() -> TenantCounts {
    let tables: Vec<Arc<TenantTable>> = TABLES.lock().unwrap_or_else(|e| e.into_inner()).clone();
    let mut by: std::collections::HashMap<u32, [u64; KINDS.len()]> = Default::default();
    let mut other = [0u64; KINDS.len()];
    let mut full = 0;
    for t in &tables {
        for s in t.slots.iter() {
            let k = s.tenant.load(Ordering::Relaxed);
            if k == 0 {
                continue;
            }
            let e = by.entry(k - 1).or_default();
            for (d, v) in e.iter_mut().zip(&s.n) {
                *d += v.load(Ordering::Relaxed);
            }
        }
        for (d, v) in other.iter_mut().zip(&t.other) {
            *d += v.load(Ordering::Relaxed);
        }
        full += t.full.load(Ordering::Relaxed);
    }
    let mut all: Vec<(u32, [u64; KINDS.len()])> = by.into_iter().collect();
    all.sort_by(|a, b| b.1[0].cmp(&a.1[0]).then(a.0.cmp(&b.0)));
    let rest = all.split_off(all.len().min(TOP_TENANTS));
    for (_, n) in rest {
        for (d, v) in other.iter_mut().zip(n) {
            *d += v;
        }
    }
    TenantCounts {
        top: all,
        other,
        table_full: full,
    }
}

/// Per-tenant counts for the metrics (see [`tenant_counts`]).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TenantCounts {
    /// The tenants with most checks, most first: id and counts by [`KINDS`].
    pub top: Vec<(u32, [u64; KINDS.len()])>,
    /// Every other tenant's counts summed.
    pub other: [u64; KINDS.len()],
    /// Tenants that displaced a less busy one from a full table (its counts moved to `other`).
    pub table_full: u64,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_are_bounded_and_the_top_tenants_named() {
        // A thread of its own: its table starts empty.
        std::thread::spawn(|| {
            for t in 0..(TENANT_SLOTS as u32 * 2) {
                count(1_000_000 + t, Action::Pass);
            }
            for _ in 0..500 {
                count(7, Action::Deny);
            }
            for _ in 0..300 {
                count(8, Action::Pass);
            }
        })
        .join()
        .unwrap();
        let c = tenant_counts();
        assert!(c.top.len() <= TOP_TENANTS);
        let seven = c
            .top
            .iter()
            .find(|(t, _)| *t == 7)
            .expect("tenant 7 on top");
        assert!(seven.1[0] >= 500 && seven.1[1] >= 500);
        assert!(c.top.iter().any(|(t, _)| *t == 8));
        assert!(
            c.table_full > 0,
            "a full table moves the least busy into other"
        );
        assert!(c.other[0] >= TENANT_SLOTS as u64);
    }
}
