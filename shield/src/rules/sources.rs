//! Loaders for the data files rules refer to: crawler range JSON, prefix→ASN tables, prefix lists.
//!
//! These files come from outside (search engines publish the crawler files), so unknown JSON
//! fields are accepted; a malformed prefix is refused with the file's line and column.

use super::error::RulesError;
use crate::prefix::{PrefixMap, parse_net};
use ipnet::{IpNet, Ipv4Net, Ipv6Net};
use serde::Deserialize;
use std::net::IpAddr;
use std::path::Path;

#[derive(Deserialize)]
struct CrawlerFile {
    prefixes: Vec<CrawlerPrefix>,
}

#[derive(Deserialize)]
struct CrawlerPrefix {
    #[serde(rename = "ipv4Prefix")]
    ipv4: Option<Ipv4Net>,
    #[serde(rename = "ipv6Prefix")]
    ipv6: Option<Ipv6Net>,
}

/// Parses a crawler range file in the shape Google (`googlebot.json`, `common-crawlers.json`)
/// and Bing (`bingbot.json`) publish: `{"creationTime": ..., "prefixes": [{"ipv4Prefix": ...},
/// {"ipv6Prefix": ...}]}`. `path` only names the file in errors.
pub fn parse_crawler_ranges(path: &Path, json: &str) -> Result<Vec<IpNet>, RulesError> {
    let file: CrawlerFile = serde_json::from_str(json).map_err(|e| RulesError::At {
        path: path.to_path_buf(),
        line: e.line(),
        col: e.column(),
        message: e.to_string(),
    })?;
    Ok(file
        .prefixes
        .into_iter()
        .flat_map(|p| {
            p.ipv4
                .map(|n| IpNet::V4(n.trunc()))
                .into_iter()
                .chain(p.ipv6.map(|n| IpNet::V6(n.trunc())))
        })
        .collect())
}

/// Reads and parses a crawler range file (see [`parse_crawler_ranges`]).
pub fn load_crawler_ranges(path: &Path) -> Result<Vec<IpNet>, RulesError> {
    let text = crate::files::read_text(path, crate::files::LIST_MAX)
        .map_err(|e| RulesError::io(path, e))?;
    parse_crawler_ranges(path, &text)
}

/// Parses a prefix list: one prefix or address per line; `#` starts a comment; blank lines skipped.
pub fn parse_prefix_list(path: &Path, text: &str) -> Result<Vec<IpNet>, RulesError> {
    let mut out = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let line = line.split('#').next().unwrap_or("").trim();
        if line.is_empty() {
            continue;
        }
        let net = parse_net(line)
            .ok_or_else(|| RulesError::at_line(path, i + 1, format!("not a prefix: {line:?}")))?;
        out.push(net);
    }
    Ok(out)
}

/// A prefix→ASN table for ASN rules: longest prefix wins.
#[derive(Clone, Debug, Default)]
pub struct AsnTable {
    map: PrefixMap<u32>,
}

impl AsnTable {
    /// Parses `prefix,asn` lines (`AS64500` or `64500`; comma, tab or spaces between; `#` comments).
    pub fn parse(path: &Path, text: &str) -> Result<Self, RulesError> {
        let mut map = PrefixMap::new();
        for (i, raw) in text.lines().enumerate() {
            let line = raw.split('#').next().unwrap_or("").trim();
            if line.is_empty() {
                continue;
            }
            let mut parts = line
                .split(|c: char| c == ',' || c.is_whitespace())
                .filter(|s| !s.is_empty());
            let (Some(p), Some(a), None) = (parts.next(), parts.next(), parts.next()) else {
                return Err(RulesError::at_line(path, i + 1, "expected `prefix,asn`"));
            };
            let net = parse_net(p)
                .ok_or_else(|| RulesError::at_line(path, i + 1, format!("not a prefix: {p:?}")))?;
            let digits = a
                .strip_prefix("AS")
                .or_else(|| a.strip_prefix("as"))
                .unwrap_or(a);
            let asn: u32 = digits
                .parse()
                .map_err(|_| RulesError::at_line(path, i + 1, format!("not an ASN: {a:?}")))?;
            map.insert(net, asn);
        }
        Ok(AsnTable { map })
    }

    /// Reads and parses a table file (see [`AsnTable::parse`]).
    pub fn load(path: &Path) -> Result<Self, RulesError> {
        let text = crate::files::read_text(path, crate::files::LIST_MAX)
            .map_err(|e| RulesError::io(path, e))?;
        Self::parse(path, &text)
    }

    /// The ASN announcing `ip`, if the table knows it.
    #[inline]
    pub fn lookup(&self, ip: IpAddr) -> Option<u32> {
        self.map.longest_match(ip).map(|(_, asn)| *asn)
    }

    /// Number of prefixes in the table.
    pub fn len(&self) -> usize {
        self.map.len()
    }

    /// True when the table is empty.
    pub fn is_empty(&self) -> bool {
        self.map.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn crawler_json_both_families_and_unknown_fields() {
        let j = r#"{"creationTime":"2024-01-01T00:00:00","extra":1,"prefixes":[
            {"ipv6Prefix":"2001:4860:4801:10::/64"},{"ipv4Prefix":"66.249.64.0/27"}]}"#;
        let nets = parse_crawler_ranges(Path::new("g.json"), j).unwrap();
        assert_eq!(nets.len(), 2);
        assert!(nets.contains(&"66.249.64.0/27".parse().unwrap()));
    }

    #[test]
    fn crawler_json_bad_prefix_has_line() {
        let j = "{\"prefixes\":[\n{\"ipv4Prefix\":\"66.249.64.0/33\"}]}";
        let e = parse_crawler_ranges(Path::new("g.json"), j).unwrap_err();
        assert_eq!(e.line(), Some(2), "{e}");
        assert!(e.to_string().starts_with("g.json:2:"), "{e}");
    }

    #[test]
    fn asn_table_parses_and_matches_longest() {
        let t = AsnTable::parse(
            Path::new("asn.csv"),
            "# comment\n8.8.8.0/24,AS15169\n8.0.0.0/8 3356\n\n2001:4860::/32\t15169\n",
        )
        .unwrap();
        assert_eq!(t.len(), 3);
        assert_eq!(t.lookup("8.8.8.8".parse().unwrap()), Some(15169));
        assert_eq!(t.lookup("8.1.1.1".parse().unwrap()), Some(3356));
        assert_eq!(t.lookup("9.1.1.1".parse().unwrap()), None);
        let e = AsnTable::parse(Path::new("asn.csv"), "1.0.0.0/8,1\nbogus\n").unwrap_err();
        assert_eq!(e.to_string(), "asn.csv:2:1: expected `prefix,asn`");
        let e = AsnTable::parse(Path::new("asn.csv"), "1.0.0.0/8,ASx\n").unwrap_err();
        assert_eq!(e.line(), Some(1));
    }

    #[test]
    fn prefix_list_with_comments() {
        let nets =
            parse_prefix_list(Path::new("l"), "192.0.2.0/24 # docs\n\n2001:db8::1\n").unwrap();
        assert_eq!(nets.len(), 2);
        let e = parse_prefix_list(Path::new("l"), "192.0.2.0/24\nnope\n").unwrap_err();
        assert_eq!(e.line(), Some(2));
    }
}
