//! Sites prepared once per config change: Host → site by hash lookups (exact, then `*.suffix` per label, then `*`), each site carrying its tenant, whether it has rules at all, and its upstream.

use std::sync::Arc;

use hashbrown::HashMap;
use http::HeaderValue;

use crate::config::Config;
use crate::forward::HeaderPolicy;
use crate::forward::upstream::Upstream;
use crate::target::PathOptions;

type Map = HashMap<Box<str>, u32, foldhash::fast::RandomState>;

/// One site, ready for the request path.
#[derive(Debug)]
pub struct PreparedSite {
    /// Name for logs, unique among sites: what challenge clearances are bound to.
    pub name: Arc<str>,
    /// Tenant id in the rules (meaningful when `has_rules`).
    pub tenant: u32,
    /// The tenant id as configured (access records carry it).
    pub tenant_id: Option<u32>,
    /// Its tenant's rules version, as challenge clearances name it (another tenant's
    /// edit leaves it).
    pub rules_version: u64,
    /// False: the rules have nothing for this site's tenant, and the request goes straight to the proxy.
    pub has_rules: bool,
    /// Its tenant's rules read the query (the rules then see it decoded too).
    pub reads_query: bool,
    /// Its tenant's rules read a forwarding header (`X-Forwarded-*`, `Forwarded`,
    /// `X-Real-IP`): the rules then see the values the origin gets, not the client's.
    pub reads_forwarding: bool,
    /// The upstream requests go to.
    pub upstream: Arc<Upstream>,
    /// `Retry-After` sent with a 429 whose verdict carries no wait of its own.
    pub retry_after: HeaderValue,
    /// Sampled access logs for passed requests.
    pub access_log: bool,
    /// How its paths are normalised.
    pub path: PathOptions,
    /// TRACE is proxied (else 405).
    pub allow_trace: bool,
    /// Request headers it never passes upstream.
    pub headers: HeaderPolicy,
    /// WebSocket bounds, when the site proxies WebSocket.
    pub websocket: Option<crate::forward::websocket::Bounds>,
    /// Its requests waiting on its origin now (kept across reloads, by site name).
    pub in_flight: Arc<std::sync::atomic::AtomicU32>,
    /// The most of them at once.
    pub max_in_flight: u32,
}

/// Every site, indexed by host.
#[derive(Debug, Default)]
pub struct Sites {
    exact: Map,
    wildcard: Map,
    any: Option<u32>,
    sites: Vec<PreparedSite>,
    /// Every site's requests waiting on origins now (kept across reloads).
    pub all_in_flight: Arc<std::sync::atomic::AtomicU32>,
    /// Past this many of them in all, a site takes a place only while it holds fewer than
    /// [`floor_in_flight`](Self::floor_in_flight): sites whose origins hang, each within
    /// its own bound, took every place together.
    pub max_all_in_flight: u32,
    /// The places any site may hold past [`max_all_in_flight`](Self::max_all_in_flight).
    pub floor_in_flight: u32,
}

impl Sites {
    /// A place of `site` among the requests waiting on origins: within its own bound, and
    /// past the bound of them all only while it holds few (a healthy site's requests, quick
    /// to come back, keep their way through while hung sites wait).
    pub fn take_place(&self, site: &PreparedSite) -> Option<crate::conn_registry::SourceWaiting> {
        use std::sync::atomic::Ordering;
        let mine = crate::conn_registry::SourceWaiting::take(&site.in_flight, site.max_in_flight)?;
        let held = site.in_flight.load(Ordering::Relaxed);
        let all = if held <= self.floor_in_flight {
            crate::conn_registry::SourceWaiting::take(&self.all_in_flight, u32::MAX)
        } else {
            crate::conn_registry::SourceWaiting::take(&self.all_in_flight, self.max_all_in_flight)
        }?;
        Some(mine.with(all))
    }
}

impl Sites {
    /// Prepares `cfg`'s sites against `rules` (to know which tenants have rules) and the built upstreams.
    pub fn prepare(
        cfg: &Config,
        rules: &shield::rules::Prepared,
        upstreams: &[Arc<Upstream>],
        prev: Option<&Sites>,
    ) -> Sites {
        let mut out = Sites {
            all_in_flight: prev.map_or_else(Default::default, |p| Arc::clone(&p.all_in_flight)),
            // Seven eighths of the connections for every site's waiting requests; past it a
            // site holds a sixty-fourth at most (at least 4).
            max_all_in_flight: (cfg.server.max_connections.saturating_mul(7) / 8)
                .clamp(1, u32::MAX as usize) as u32,
            floor_in_flight: (cfg.server.max_connections / 64).clamp(4, u32::MAX as usize) as u32,
            ..Sites::default()
        };
        let before: HashMap<&str, &Arc<std::sync::atomic::AtomicU32>, foldhash::fast::RandomState> =
            prev.map_or_else(Default::default, |p| {
                p.sites.iter().map(|x| (&*x.name, &x.in_flight)).collect()
            });
        // Three quarters of the connections by default (as an upstream's share of the
        // origin connections): a site whose origin hangs leaves the others a quarter.
        let default_in_flight =
            (cfg.server.max_connections.saturating_mul(3) / 4).clamp(1, u32::MAX as usize) as u32;
        for (i, s) in cfg.sites.iter().enumerate() {
            let i = i as u32;
            for h in &s.hosts {
                if h == "*" {
                    out.any = Some(i);
                } else if let Some(suffix) = h.strip_prefix("*.") {
                    out.wildcard.insert(suffix.into(), i);
                } else {
                    out.exact.insert(h.as_str().into(), i);
                }
            }
            // The rules file's [global] deny list applies to every site, tenant or not
            // (tenant 0, "none", has no rules of its own).
            let has_rules = rules.may_apply(s.tenant.unwrap_or(0));
            out.sites.push(PreparedSite {
                name: s.name.as_str().into(),
                tenant: s.tenant.unwrap_or(0),
                tenant_id: s.tenant,
                rules_version: rules.tenant_version(s.tenant.unwrap_or(0)),
                has_rules,
                reads_query: rules.reads(s.tenant.unwrap_or(0), shield::rules::attr::BIT_QUERY),
                reads_forwarding: crate::forward::FORWARDING_HEADERS.iter().any(|h| {
                    rules.reads_attr(
                        s.tenant.unwrap_or(0),
                        &format!("{}{h}", shield::rules::attr::HEADER_PREFIX),
                    )
                }),
                upstream: Arc::clone(&upstreams[s.upstream]),
                retry_after: HeaderValue::from(s.retry_after_secs),
                access_log: s.access_log,
                path: s.path,
                allow_trace: s.allow_trace,
                headers: HeaderPolicy::new(&s.strip_headers, s.underscores_in_headers),
                websocket: s.websocket.then(|| crate::forward::websocket::Bounds {
                    idle: std::time::Duration::from_millis(s.websocket_idle_ms),
                    max: std::time::Duration::from_secs(s.websocket_max_secs),
                }),
                // The requests of the version before still count (a reload must not make
                // room for as many again).
                in_flight: before
                    .get(s.name.as_str())
                    .map_or_else(Default::default, |&c| Arc::clone(c)),
                max_in_flight: s.max_requests_in_flight.unwrap_or(default_in_flight),
            });
        }
        out
    }

    /// The site for a host as [`crate::target::parse_host`] gives it (lower case, no port, no trailing dot).
    #[inline]
    pub fn lookup(&self, host: &str) -> Option<&PreparedSite> {
        self.index(host).map(|i| self.get(i))
    }

    /// The index of the site for a normalised host (see [`lookup`](Self::lookup)).
    #[inline]
    pub fn index(&self, host: &str) -> Option<usize> {
        if let Some(&i) = self.exact.get(host) {
            return Some(i as usize);
        }
        if !self.wildcard.is_empty() {
            let mut rest = host;
            while let Some((_, suffix)) = rest.split_once('.') {
                if let Some(&i) = self.wildcard.get(suffix) {
                    return Some(i as usize);
                }
                rest = suffix;
            }
        }
        self.any.map(|i| i as usize)
    }

    /// The site at `index` (from [`index`](Self::index)).
    #[inline]
    pub fn get(&self, index: usize) -> &PreparedSite {
        &self.sites[index]
    }

    /// Number of sites.
    pub fn len(&self) -> usize {
        self.sites.len()
    }

    /// True without sites.
    pub fn is_empty(&self) -> bool {
        self.sites.is_empty()
    }

    /// Number of sites whose tenant has rules.
    pub fn with_rules(&self) -> usize {
        self.sites.iter().filter(|s| s.has_rules).count()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lookup_exact_wildcard_any() {
        let text = r#"
[[upstream]]
name = "a"
servers = ["127.0.0.1:1"]
[[site]]
hosts = ["example.com"]
upstream = "a"
[[site]]
hosts = ["*.example.com"]
upstream = "a"
tenant = 3
[[site]]
hosts = ["*"]
upstream = "a"
"#;
        let l = crate::config::Config::parse(std::path::Path::new("f.toml"), text).unwrap();
        let ups: Vec<_> = l
            .config
            .upstreams
            .iter()
            .map(|u| Arc::new(Upstream::new(u)))
            .collect();
        let s = Sites::prepare(&l.config, &l.rules, &ups, None);
        assert_eq!(&*s.lookup("example.com").unwrap().name, "example.com");
        assert_eq!(&*s.lookup("a.b.example.com").unwrap().name, "*.example.com");
        assert_eq!(&*s.lookup("other.org").unwrap().name, "*");
        assert!(
            !s.lookup("a.example.com").unwrap().has_rules,
            "tenant 3 has no rules"
        );
        assert_eq!(s.with_rules(), 0);
    }
}
