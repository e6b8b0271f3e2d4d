//! http-front's request matching on arbitrary request heads: the head as hyper reads it
//! (httparse, then `http` types), the Host read as the request path reads it
//! (`http_front::target::request_host`), the site looked up (`Sites::lookup`: exact,
//! wildcard, catch-all), the path normalised for the site (`target::request_path`, with the
//! path options the selector byte chooses) and, for a site with rules, shield's rules checked
//! with http-front's own `HttpView`. Nothing panics; a host is lower-case, without port or
//! trailing dot, at most 253 bytes; and, differentially, what the rules see of the path is
//! what the origin gets once it decodes the forwarded path: the forwarded path is already
//! normal (normalising it again changes neither form), has no empty or dot segment, and
//! decodes (once, by a separate decoder here) to the rules' view.
//!
//! Input: one byte choosing the source address and the path options, then the request head.
#![no_main]

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::sync::Arc;

use http_front::site::Sites;
use http_front::target::{self, HOST_MAX, PathOptions};
use http_front::forward::upstream::Upstream;
use http_front::view::HttpView;
use libfuzzer_sys::fuzz_target;
use palisade_fuzz::http_view::{decode_once, parse_head};
use shield::rules::{Now, Prepared, RuleState, StateConfig};

const RULES: &str = r#"
[[list]]
name = "scanners"
prefixes = ["192.0.2.0/24", "2001:db8:bad::/48"]

[[tenant]]
id = 1
allow = ["198.51.100.7/32"]
rate_limit = { per_second = 5.0, burst = 10 }
escalate = { after = 20, window_secs = 10, block_secs = 60 }

[[tenant.rule]]
name = "health"
action = "allow"
when = [{ attr = "path", exact = "/healthz" }]

[[tenant.rule]]
name = "wp"
action = "deny"
when = [{ attr = "path", prefix = "/wp-" }, { attr = "method", one_of = ["POST", "PUT"] }]

[[tenant.rule]]
name = "ua"
action = "deny"
when = [{ attr = "user_agent", regex = "(?i)sqlmap|nikto|^masscan/" }]

[[tenant.rule]]
name = "ua2"
action = "challenge"
when = [{ attr = "user_agent", regex = "curl/[0-9.]+$" }, { attr = "query", contains = "id=" }]

[[tenant.rule]]
name = "methods"
action = "deny"
when = [{ attr = "method", one_of = ["DELETE", "TRACE", "CONNECT", "PATCH", "OPTIONS", "PROPFIND", "MKCOL", "COPY", "MOVE"] }]

[[tenant.rule]]
name = "hdr"
action = "deny"
when = [{ attr = "header:x-attack", present = true }, { attr = "header:accept", present = false, not = true }]

[[tenant.rule]]
name = "scanners-slow"
action = "rate_limit"
source = ["@scanners"]
rate = { per_second = 1.0, burst = 2 }
when = [{ attr = "path", suffix = ".php" }]

[[tenant]]
id = 2
deny = ["@scanners", "203.0.113.0/24"]

[[tenant.rule]]
name = "old-http"
action = "deny"
when = [{ attr = "version", exact = "HTTP/1.0" }, { attr = "host", suffix = ".test" }]
"#;

const FRONT: &str = r#"
[server]
listen = ["127.0.0.1:1"]

[rules]
file = "rules.toml"

[[upstream]]
name = "app"
servers = ["127.0.0.1:2"]

[[site]]
hosts = ["a.test", "www.a.test"]
upstream = "app"
tenant = 1

[[site]]
hosts = ["*.b.test"]
upstream = "app"
tenant = 2

[[site]]
hosts = ["*"]
upstream = "app"
tenant = 3
"#;

struct Fixture {
    sites: Sites,
    rules: Prepared,
    state: RuleState,
}

fn fixture() -> Fixture {
    let dir = std::env::temp_dir().join(format!("palisade-fuzz-http-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("rules.toml"), RULES).unwrap();
    std::fs::write(dir.join("front.toml"), FRONT).unwrap();
    let l = http_front::config::Config::load(&dir.join("front.toml")).expect("fixture config");
    let _ = std::fs::remove_dir_all(&dir);
    let ups: Vec<_> = l
        .config
        .upstreams
        .iter()
        .map(|u| Arc::new(Upstream::new(u)))
        .collect();
    Fixture {
        sites: Sites::prepare(&l.config, &l.rules, &ups, None),
        rules: l.rules,
        state: RuleState::new(&StateConfig::default(), None),
    }
}

thread_local! {
    static F: Fixture = fixture();
}

fuzz_target!(|data: &[u8]| {
    let Some((&sel, head)) = data.split_first() else {
        return;
    };
    let Some(req) = parse_head(head) else {
        return;
    };
    let src = match sel & 3 {
        0 => IpAddr::V4(Ipv4Addr::new(192, 0, 2, sel)),
        1 => IpAddr::V4(Ipv4Addr::new(198, 51, 100, 7)),
        2 => IpAddr::V6(Ipv6Addr::new(0x2001, 0xdb8, 0xbad, 0, 0, 0, 0, sel as u16)),
        _ => IpAddr::V4(Ipv4Addr::new(203, 0, 113, sel)),
    };
    let mut buf = [0u8; HOST_MAX];
    let Ok((host, _)) = target::request_host(&req, false, &mut buf) else {
        return;
    };
    let host = host.name;
    assert!(!host.is_empty() && host.len() <= HOST_MAX, "host length");
    assert!(
        !host.bytes().any(|b| b.is_ascii_uppercase()),
        "host not lower-cased"
    );
    assert!(!host.ends_with('.'), "trailing dot kept");
    let opts = PathOptions {
        keep_encoded_slash: sel & 4 != 0,
        case_insensitive: sel & 8 != 0,
        strip_params: sel & 16 != 0,
    };
    let Ok(path) = target::request_path(&req, opts) else {
        return;
    };
    if path.forward != "*" {
        let fwd = &*path.forward;
        assert!(fwd.starts_with('/'), "forwarded path not absolute: {fwd:?}");
        assert!(!fwd.contains("//"), "empty segment forwarded: {fwd:?}");
        assert!(
            !fwd.split('/').any(|s| s == "." || s == ".."),
            "dot segment forwarded: {fwd:?}"
        );
        let again = target::normalize_path(fwd, opts).expect("a forwarded path normalises");
        assert_eq!(again.forward, path.forward, "normalising twice changed the path");
        assert_eq!(again.view, path.view, "the rules' view of the forwarded path differs");
        if !opts.case_insensitive && !opts.strip_params {
            assert_eq!(
                decode_once(fwd, opts.keep_encoded_slash).as_deref(),
                Some(&*path.view),
                "the origin's decoding of {fwd:?} is not what the rules saw"
            );
        }
    }
    F.with(|f| {
        let Some(site) = f.sites.lookup(host) else {
            return;
        };
        if site.has_rules {
            let now = Now {
                unix_ms: 1_800_000_000_000,
                mono_us: 1_000_000,
            };
            let view = HttpView::new(&req, host, &path.view);
            let _ = f.rules.check(&f.state, site.tenant, src, &view, now);
        }
    });
});
