//! Sites prepared once per config change: Host → site by hash lookups (exact, then `*.suffix` per label, then `*`), each site carrying its tenant, whether it has rules at all, and its upstream.

use std::sync::Arc;

use hashbrown::HashMap;
use http::HeaderValue;

use crate::config::Config;
use crate::upstream::Upstream;

type Map = HashMap<Box<str>, u32, foldhash::fast::RandomState>;

/// One site, ready for the request path.
#[derive(Debug)]
pub struct PreparedSite {
    /// Name for logs.
    pub name: Arc<str>,
    /// Tenant id in the rules (meaningful when `has_rules`).
    pub tenant: u32,
    /// The tenant id as configured (access records carry it).
    pub tenant_id: Option<u32>,
    /// False: the rules have nothing for this site's tenant, and the request goes straight to the proxy.
    pub has_rules: bool,
    /// The upstream requests go to.
    pub upstream: Arc<Upstream>,
    /// `Retry-After` sent with a 429 whose verdict carries no wait of its own.
    pub retry_after: HeaderValue,
    /// Sampled access logs for passed requests.
    pub access_log: bool,
}

/// Every site, indexed by host.
#[derive(Debug, Default)]
pub struct Sites {
    exact: Map,
    wildcard: Map,
    any: Option<u32>,
    sites: Vec<PreparedSite>,
}

impl Sites {
    /// Prepares `cfg`'s sites against `rules` (to know which tenants have rules) and the built upstreams.
    pub fn prepare(
        cfg: &Config,
        rules: &shield::rules::Prepared,
        upstreams: &[Arc<Upstream>],
    ) -> Sites {
        let mut out = Sites::default();
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
            let has_rules = s.tenant.is_some_and(|t| rules.has_rules(t));
            out.sites.push(PreparedSite {
                name: s.name.as_str().into(),
                tenant: s.tenant.unwrap_or(0),
                tenant_id: s.tenant,
                has_rules,
                upstream: Arc::clone(&upstreams[s.upstream]),
                retry_after: HeaderValue::from(s.retry_after_secs),
                access_log: s.access_log,
            });
        }
        out
    }

    /// The site for a normalised host (lower case, no port, no trailing dot).
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

/// Longest host name accepted.
pub const HOST_MAX: usize = 253;

/// Normalises a Host header or authority: drops the port and a trailing dot, lowers the case
/// (into `buf` only when needed). `None` for an empty or over-long host.
#[inline]
pub fn normalize_host<'a>(raw: &'a str, buf: &'a mut [u8; HOST_MAX]) -> Option<&'a str> {
    let host = if raw.starts_with('[') {
        // IPv6 literal: keep the brackets, drop the port.
        &raw[..=raw.find(']')?]
    } else {
        match raw.rsplit_once(':') {
            Some((h, port)) if port.bytes().all(|b| b.is_ascii_digit()) => h,
            _ => raw,
        }
    };
    let host = host.strip_suffix('.').unwrap_or(host);
    // A second trailing dot (`a.test..`) is an empty label, not a name: refused, or it would
    // miss `a.test`'s site and its rules and land on a wildcard or catch-all site (found by
    // the http_request fuzzer).
    if host.is_empty() || host.len() > HOST_MAX || host.ends_with('.') {
        return None;
    }
    if !host.bytes().any(|b| b.is_ascii_uppercase()) {
        return Some(host);
    }
    let out = &mut buf[..host.len()];
    out.copy_from_slice(host.as_bytes());
    out.make_ascii_lowercase();
    std::str::from_utf8(out).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn host_normalisation() {
        let mut b = [0u8; HOST_MAX];
        assert_eq!(
            normalize_host("Example.COM:8080", &mut b),
            Some("example.com")
        );
        let mut b = [0u8; HOST_MAX];
        assert_eq!(normalize_host("example.com.", &mut b), Some("example.com"));
        let mut b = [0u8; HOST_MAX];
        assert_eq!(normalize_host("[::1]:80", &mut b), Some("[::1]"));
        let mut b = [0u8; HOST_MAX];
        assert_eq!(normalize_host(":80", &mut b), None);
        // Regression (fuzz/http_request): more than one trailing dot.
        let mut b = [0u8; HOST_MAX];
        assert_eq!(normalize_host("ae.tst!!!!!!!!!!!.....", &mut b), None);
        let mut b = [0u8; HOST_MAX];
        assert_eq!(normalize_host("Example.COM..:8080", &mut b), None);
        let long = "a".repeat(300);
        let mut b = [0u8; HOST_MAX];
        assert_eq!(normalize_host(&long, &mut b), None);
    }

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
        let s = Sites::prepare(&l.config, &l.rules, &ups);
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
