//! A zone's answers by client network: its geo file — Knot's geoip module's format, so one
//! file serves both — maps owner names to variants, each chosen by a prefix (`net:`) or by a
//! `[[view]]`'s prefixes (`view:`), each holding RRsets:
//!
//! ```yaml
//! www.example.com:
//!   - net: 192.0.2.0/24
//!     A: [ 198.51.100.1, 198.51.100.2 ]
//!   - view: eu-office
//!     A: 198.51.100.7
//!     AAAA: 2001:db8::7
//! ```
//!
//! With `[geoip] db` (a MaxMind DB), a variant may instead be chosen by location,
//! `geo: "EU;DE"`: the values of `[geoip] keys` (`continent/code`, `country/iso_code`) in
//! order, `*` for any, as Knot's geodb mode reads them; the most specific match wins and the
//! scope is the database network's prefix length.
//!
//! The client's network (ECS, else the source) picks the most specific prefix of the name's
//! variants — one longest-prefix lookup, not a walk over them; its scope is at least that
//! prefix's length, and long enough to leave out the other variants' networks
//! ([`GeoName::scope`]). No prefix covers the client, or its variant has neither the type
//! asked nor a CNAME: the zone's own records answer (as Knot's module does).

use std::collections::HashMap;
use std::net::IpAddr;
use std::path::Path;

use shield::prefix::PrefixMap;
use zones::Name;

/// Records of one type a variant holds at most (what one answer made from it carries).
pub const MAX_VARIANT_RRS: usize = 64;

/// One variant: its RRsets (type, RDATAs).
#[derive(Debug, Default)]
pub struct Variant {
    /// The RRsets, in the file's order.
    pub rrsets: Vec<(u16, Vec<Box<[u8]>>)>,
}

impl Variant {
    /// The RDATAs of `qtype`, else of a CNAME (followed by the answer), as Knot's module
    /// chooses: `(type, rdatas)`.
    pub fn rrset(&self, qtype: u16) -> Option<(u16, &[Box<[u8]>])> {
        use zones::rrtype::t;
        let own = self
            .rrsets
            .iter()
            .filter(|(ty, _)| *ty != t::RRSIG)
            .find(|(ty, _)| *ty == qtype || qtype == t::ANY);
        own.or_else(|| {
            self.rrsets
                .iter()
                .find(|(t, _)| *t == zones::rrtype::t::CNAME)
        })
        .map(|(t, r)| (*t, &r[..]))
    }
}

impl Variant {
    /// Refuses what one name's answer cannot hold (as Knot's module does): a CNAME beside
    /// other data or more than one (RFC 2181 §10.1), and the zone's own apex and DNSSEC
    /// types, which a variant would replace for some clients (a tenant's NS or key set).
    fn check(&self) -> Result<(), String> {
        use zones::rrtype::t;
        let types: Vec<u16> = self
            .rrsets
            .iter()
            .map(|(ty, _)| *ty)
            .filter(|&ty| ty != t::RRSIG)
            .collect();
        if let Some((_, c)) = self.rrsets.iter().find(|(ty, _)| *ty == t::CNAME) {
            if c.len() > 1 {
                return Err(format!("{} CNAMEs: a name holds one", c.len()));
            }
            if types.len() > 1 {
                return Err("a CNAME beside other data (RFC 2181 §10.1)".into());
            }
        }
        for ty in types {
            if matches!(
                ty,
                t::SOA
                    | t::NS
                    | t::DS
                    | t::DNSKEY
                    | t::CDS
                    | t::CDNSKEY
                    | t::NSEC
                    | t::NSEC3
                    | t::NSEC3PARAM
            ) {
                return Err(format!(
                    "{} is the zone's own: a variant cannot hold it",
                    zones::rrtype::to_text(ty)
                ));
            }
        }
        Ok(())
    }

    /// The signatures the file gives over its `rtype` records (a pre-signed zone's).
    pub fn sigs(&self, rtype: u16) -> impl Iterator<Item = &[u8]> + '_ {
        self.rrsets
            .iter()
            .filter(|(ty, _)| *ty == zones::rrtype::t::RRSIG)
            .flat_map(|(_, r)| r.iter())
            .filter(move |rd| rd.len() >= 2 && u16::from_be_bytes([rd[0], rd[1]]) == rtype)
            .map(|rd| &rd[..])
    }

    /// The first of its RRsets without a signature over it, if any (a pre-signed zone needs
    /// them all signed).
    pub fn unsigned(&self) -> Option<u16> {
        self.rrsets
            .iter()
            .map(|(ty, _)| *ty)
            .find(|&ty| ty != zones::rrtype::t::RRSIG && self.sigs(ty).next().is_none())
    }
}

/// A variant of `g` holds data other than a CNAME (and its signatures).
fn not_only_cname(g: &GeoName) -> bool {
    use zones::rrtype::t;
    g.variants.iter().any(|v| {
        v.rrsets
            .iter()
            .any(|(ty, _)| *ty != t::CNAME && *ty != t::RRSIG)
    })
}

impl GeoZone {
    /// The first variant RRset without a signature: (owner, variant number, type).
    pub fn first_unsigned(&self) -> Option<(String, usize, u16)> {
        self.names.iter().find_map(|(owner, g)| {
            g.variants.iter().enumerate().find_map(|(i, v)| {
                v.unsigned().map(|ty| {
                    let o = Name::from_wire(owner).map_or_else(|_| "?".into(), |n| n.to_string());
                    (o, i + 1, ty)
                })
            })
        })
    }
}

/// The variants of one name.
#[derive(Debug, Default)]
pub struct GeoName {
    nets: PrefixMap<u16>,
    /// Every prefix of the variants' networks, as (IPv6, length, bits left-aligned in 128):
    /// the scope of an answer must exclude those of other variants near the client's.
    branches: hashbrown::HashSet<(bool, u8, u128), foldhash::fast::RandomState>,
    /// The longest variant network, IPv4 and IPv6.
    longest: [u8; 2],
    /// The types any variant holds (sorted): a type none holds is answered alike for all.
    types: Vec<u16>,
    /// Variants by location: the values of `[geoip] keys` (`None`: any), the variant.
    locs: Vec<(Vec<Option<Box<str>>>, u16)>,
    /// Its variants.
    pub variants: Vec<Variant>,
}

/// `ip` as (IPv6, its bits left-aligned in 128).
fn bits(ip: IpAddr) -> (bool, u128) {
    match ip.to_canonical() {
        IpAddr::V4(a) => (false, (u32::from(a) as u128) << 96),
        IpAddr::V6(a) => (true, u128::from(a)),
    }
}

/// The first `len` of left-aligned `bits`.
fn first(bits: u128, len: u8) -> u128 {
    if len == 0 {
        0
    } else {
        bits & (u128::MAX << (128 - len as u32))
    }
}

/// Each top-level key of a geo file (unquoted) with its line and the lines its list's items
/// (`- `) start on, 1-based.
fn owner_lines(text: &str) -> HashMap<String, (usize, Vec<usize>)> {
    let mut out: HashMap<String, (usize, Vec<usize>)> = HashMap::new();
    let mut current: Option<String> = None;
    for (n, line) in text.lines().enumerate() {
        let body = line.trim_end();
        if body.is_empty() || body.trim_start().starts_with('#') {
            continue;
        }
        if !body.starts_with([' ', '\t', '-']) {
            let key = body.split_once(':').map_or(body, |(k, _)| k).trim();
            let key = key.trim_matches(['"', '\'']).to_string();
            out.entry(key.clone()).or_insert((n + 1, Vec::new()));
            current = Some(key);
        } else if body.trim_start().starts_with('-')
            && let Some(k) = &current
            && let Some(e) = out.get_mut(k)
        {
            e.1.push(n + 1);
        }
    }
    out
}

/// `text` with each top-level key that starts with `*` (a wildcard owner, as Knot's geo files
/// write it) quoted.
fn quote_wildcard_keys(text: &str) -> std::borrow::Cow<'_, str> {
    if !text.lines().any(|l| l.starts_with('*')) {
        return std::borrow::Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() + 16);
    for line in text.split_inclusive('\n') {
        // The key, then what follows it: blanks, a comment, the line's end.
        let code = line.split_once(" #").map_or(line, |(c, _)| c);
        let code = code.trim_end_matches(['\n', '\r', ' ', '\t']);
        match code.strip_suffix(':') {
            Some(key) if key.starts_with('*') && !key.contains(['"', '\'', ' ', '#']) => {
                // Single quotes: no escape in the key changes meaning.
                out.push('\'');
                out.push_str(key);
                out.push_str("':");
                out.push_str(&line[code.len()..]);
            }
            _ => out.push_str(line),
        }
    }
    std::borrow::Cow::Owned(out)
}

impl GeoName {
    /// Takes variant `idx` for network `n`.
    fn add_net(&mut self, n: ipnet::IpNet, idx: u16) {
        let n = n.trunc();
        let (v6, b) = bits(n.addr());
        let len = n.prefix_len();
        for l in 1..=len {
            self.branches.insert((v6, l, first(b, l)));
        }
        let longest = &mut self.longest[v6 as usize];
        *longest = (*longest).max(len);
        self.nets.insert(n, idx);
    }

    /// The SCOPE PREFIX-LENGTH (RFC 7871) of the answer given a client at `ip` whose variant
    /// was chosen by a prefix of length `chosen` (0: none chose one): at least that, and long
    /// enough that no other variant's network lies in it — a fallback answer, or one of a
    /// network holding more specific ones, is the answer of the client's part alone (scope 0
    /// or the outer network's length told a resolver to give it to clients the inner
    /// variants are for).
    pub fn scope(&self, ip: IpAddr, chosen: u8, qtype: u16) -> u8 {
        // No variant answers this type: every client gets the zone's answer.
        if !self.answers(qtype) {
            return 0;
        }
        // An IPv4-mapped client (an IPv6 ECS carrying one) is told its scope in IPv6 terms.
        let mapped = if ip.is_ipv6() && ip.to_canonical().is_ipv4() {
            96
        } else {
            0
        };
        mapped + self.scope_of(ip, chosen)
    }

    /// True when some variant answers `qtype` (holds it, or a CNAME): the answer for that
    /// type differs by client.
    fn answers(&self, qtype: u16) -> bool {
        use zones::rrtype::t;
        let holds = |ty: u16| self.types.binary_search(&ty).is_ok();
        qtype == t::ANY || holds(qtype) || holds(t::CNAME)
    }

    /// [`GeoName::scope`] whatever the type asked (an answer that differs by client in its
    /// rcode: a name of the geo file alone is NODATA for its clients, NXDOMAIN for others).
    pub fn scope_any(&self, ip: IpAddr, chosen: u8) -> u8 {
        self.scope(ip, chosen, zones::rrtype::t::ANY)
    }

    fn scope_of(&self, ip: IpAddr, chosen: u8) -> u8 {
        let (v6, b) = bits(ip);
        let longest = self.longest[v6 as usize];
        let mut l = longest;
        while l > chosen {
            // A network that shares the client's first l - 1 bits and not its l-th.
            let other = first(b, l) ^ (1u128 << (128 - l as u32));
            if self.branches.contains(&(v6, l, other)) {
                return l;
            }
            l -= 1;
        }
        chosen
    }

    /// The variant for a client at `ip` (by prefix, else by location in `db`), and the
    /// length of the network that decided: the prefix that chose, else the database network
    /// the client was located in (whether a location matched or not), else 0.
    pub fn pick(&self, ip: IpAddr, db: Option<&GeoDb>) -> (Option<&Variant>, u8) {
        if let Some((net, &i)) = self.nets.longest_match(ip) {
            return (Some(&self.variants[i as usize]), net.prefix_len());
        }
        if self.locs.is_empty() {
            return (None, 0);
        }
        let Some(db) = db else {
            return (None, 0);
        };
        let Some((loc, len)) = db.locate(ip) else {
            return (None, 0);
        };
        // Not in the database: the zone's answer, for the database's empty network around it.
        let Some(loc) = loc else {
            return (None, len);
        };
        // The most specific location that holds: every value it names is the client's.
        let best = self
            .locs
            .iter()
            .filter(|(want, _)| {
                want.iter()
                    .zip(&db.keys)
                    .all(|(w, k)| w.as_deref().is_none_or(|w| loc.get(*k) == Some(w)))
            })
            .max_by_key(|(want, _)| want.iter().filter(|w| w.is_some()).count());
        (best.map(|b| &self.variants[b.1 as usize]), len)
    }
}

/// A key of a MaxMind record that variants may be chosen by.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GeoKey {
    /// `continent/code` (EU, NA, ...).
    Continent,
    /// `country/iso_code` (DE, US, ...).
    Country,
}

impl GeoKey {
    /// The key a `[geoip] keys` entry names.
    pub fn parse(s: &str) -> Option<GeoKey> {
        match s {
            "continent/code" => Some(GeoKey::Continent),
            "country/iso_code" => Some(GeoKey::Country),
            _ => None,
        }
    }
}

/// A client's location, borrowed from the database (no allocation per query).
#[derive(Debug, Default, serde::Deserialize)]
pub struct Location<'a> {
    #[serde(borrow, default)]
    continent: Option<Code<'a>>,
    #[serde(borrow, default)]
    country: Option<IsoCode<'a>>,
}

#[derive(Debug, serde::Deserialize)]
struct Code<'a> {
    #[serde(borrow, default)]
    code: Option<&'a str>,
}

#[derive(Debug, serde::Deserialize)]
struct IsoCode<'a> {
    #[serde(borrow, default)]
    iso_code: Option<&'a str>,
}

impl Location<'_> {
    /// The value of `k`.
    pub fn get(&self, k: GeoKey) -> Option<&str> {
        match k {
            GeoKey::Continent => self.continent.as_ref().and_then(|c| c.code),
            GeoKey::Country => self.country.as_ref().and_then(|c| c.iso_code),
        }
    }
}

/// A MaxMind database (`[geoip] db`) and the keys variants name.
pub struct GeoDb {
    reader: maxminddb::Reader<Vec<u8>>,
    /// `[geoip] keys`, in order.
    pub keys: Vec<GeoKey>,
}

impl std::fmt::Debug for GeoDb {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "GeoDb({:?})", self.keys)
    }
}

impl GeoDb {
    /// Opens `path` (read whole), or says why not, naming it.
    pub fn open(path: &Path, keys: Vec<GeoKey>) -> Result<GeoDb, String> {
        let reader = maxminddb::Reader::open_readfile(path)
            .map_err(|e| format!("{}: {e}", path.display()))?;
        Ok(GeoDb { reader, keys })
    }

    /// The location of `ip` (none where the database has none) and the prefix length of
    /// the database's network holding it (or the empty one around it); None when the
    /// database cannot be read there.
    pub fn locate(&self, ip: IpAddr) -> Option<(Option<Location<'_>>, u8)> {
        let (loc, len) = self.reader.lookup_prefix::<Location<'_>>(ip).ok()?;
        // An IPv4 address in an IPv6 tree: its length counts the ::/96 above it.
        let len = match ip {
            IpAddr::V4(_) if len > 32 => len - 96,
            _ => len,
        };
        Some((loc, len as u8))
    }
}

/// A zone's variants by name.
#[derive(Debug, Default)]
pub struct GeoZone {
    names: HashMap<Box<[u8]>, GeoName>,
    /// TTL of every record given here.
    pub ttl: u32,
    /// The label counts of the names wildcards stand under (`*.X`: X's), as bits: a lookup
    /// tries `*.` only at those depths.
    wild_depths: u128,
}

impl GeoZone {
    /// The variants of `qname` (lower-case wire): its own, else those of the closest
    /// wildcard above it (`*.ancestor`, however many labels up), as Knot's module looks
    /// them up.
    pub fn name(&self, qname: &[u8]) -> Option<&GeoName> {
        self.lookup(qname).map(|(n, _)| n)
    }

    /// [`GeoZone::name`], and whether a wildcard gave it.
    pub fn lookup(&self, qname: &[u8]) -> Option<(&GeoName, bool)> {
        if let Some(n) = self.names.get(qname) {
            return Some((n, false));
        }
        if self.wild_depths == 0 {
            return None;
        }
        // The ancestors' starts, then each from the closest one that a wildcard stands under.
        let mut starts = [0u8; 128];
        let (mut n, mut i) = (0usize, 0usize);
        while let Some(&l) = qname.get(i) {
            if l == 0 || n == starts.len() {
                break;
            }
            starts[n] = i as u8;
            n += 1;
            i += 1 + l as usize;
        }
        let mut w = [0u8; 257];
        w[..2].copy_from_slice(b"\x01*");
        for (k, &at) in starts[..n].iter().enumerate().skip(1) {
            let depth = n - k;
            if depth >= 128 || self.wild_depths & (1u128 << depth) == 0 {
                continue;
            }
            let rest = &qname[at as usize..];
            w[2..2 + rest.len()].copy_from_slice(rest);
            if let Some(g) = self.names.get(&w[..2 + rest.len()]) {
                return Some((g, true));
            }
        }
        None
    }

    /// True when no name has variants.
    pub fn is_empty(&self) -> bool {
        self.names.is_empty()
    }

    /// Checks the variants against the zone they serve (`path`: the geo file, for errors):
    /// a name at or below a delegation or a DNAME (its answers are a referral, or the
    /// DNAME's), or holding a CNAME in the zone beside a variant's other data (RFC 2181
    /// §10.1), is refused. Returns the names that exist only in the geo file: in a signed
    /// zone their other types are denied by a proof that the name does not exist, which a
    /// resolver may then apply to every client (RFC 8198).
    pub fn check_against(&self, zone: &zones::Zone, path: &Path) -> Result<Vec<String>, String> {
        use zones::rrtype::t;
        use zones::zone::Lookup;
        let mut only_here = Vec::new();
        let mut names: Vec<&[u8]> = self.names.keys().map(|k| &k[..]).collect();
        names.sort();
        for wire in names {
            let name = Name::from_wire(wire).map_err(|e| e.to_string())?;
            let bad = |why: String| Err(format!("{}: {name}: {why}", path.display()));
            // A wildcard's variants answer the names below its parent: judged by that.
            let wildcard = wire.first() == Some(&1) && wire.get(1) == Some(&b'*');
            let at = if wildcard {
                Name::from_wire(&wire[2..]).map_err(|e| e.to_string())?
            } else {
                name.clone()
            };
            match zone.lookup_name(&at) {
                Lookup::Delegation { cut, .. } => {
                    let cut = Name::from_wire(zone.node_name(cut)).map_err(|e| e.to_string())?;
                    return bad(format!(
                        "at or below the delegation {cut}: its answers are a referral"
                    ));
                }
                Lookup::Dname(node) => {
                    let at = Name::from_wire(zone.node_name(node)).map_err(|e| e.to_string())?;
                    return bad(format!("below the DNAME at {at}"));
                }
                Lookup::Exact(node) if wildcard && zone.rrset(node, t::DNAME).is_some() => {
                    return bad(format!("below the DNAME at {at}"));
                }
                Lookup::Exact(node) if !wildcard && zone.rrset(node, t::CNAME).is_some() => {
                    if not_only_cname(&self.names[wire]) {
                        return bad(
                            "the zone has a CNAME here: a variant may hold only a CNAME".into()
                        );
                    }
                }
                Lookup::Exact(_) => {}
                Lookup::Wildcard { .. } | Lookup::NxDomain { .. } if !wildcard => {
                    only_here.push(name.to_string())
                }
                Lookup::Wildcard { .. } | Lookup::NxDomain { .. } => {}
            }
            if wildcard {
                // It answers each name one label below its parent, those the zone holds too:
                // never a delegation's (a referral), nor beside a CNAME with other data.
                let parent = &wire[2..];
                for n in zone.node_ids() {
                    let nm = zone.node_name(n);
                    let Some(&l) = nm.first() else { continue };
                    let l = l as usize;
                    if l == 0
                        || nm.len() != 1 + l + parent.len()
                        || !nm[1 + l..].eq_ignore_ascii_case(parent)
                    {
                        continue;
                    }
                    let child =
                        || Name::from_wire(nm).map_or_else(|_| "?".into(), |c| c.to_string());
                    if zone.rrset(n, t::NS).is_some() {
                        return bad(format!(
                            "answers {}, a delegation: its answers are a referral",
                            child()
                        ));
                    }
                    if zone.rrset(n, t::CNAME).is_some() && not_only_cname(&self.names[wire]) {
                        return bad(format!(
                            "answers {}, which has a CNAME in the zone: a variant may hold only a CNAME",
                            child()
                        ));
                    }
                }
            }
        }
        Ok(only_here)
    }

    /// Reads the geo file `path` of the zone `origin`, with `views` (name → prefixes), `ttl`
    /// and the number of `[geoip] keys` (0: no database, no `geo:`); the error names the
    /// file and what is wrong where.
    pub fn load(
        path: &Path,
        origin: &Name,
        views: &HashMap<String, Vec<ipnet::IpNet>>,
        ttl: u32,
        keys: usize,
    ) -> Result<GeoZone, String> {
        let at = |what: String| format!("{}: {what}", path.display());
        let text = shield::files::read_text(path, shield::files::LIST_MAX)
            .map_err(|e| at(e.to_string()))?;
        // Knot's files name wildcards bare (`*.x:`), which YAML reads as an alias: quoted
        // here, so that one file serves both.
        let text = quote_wildcard_keys(&text);
        let doc: serde_yaml::Value = serde_yaml::from_str(&text).map_err(|e| at(e.to_string()))?;
        // Where each owner and its variants start: errors name the file's line.
        let lines = owner_lines(&text);
        let line_of = |owner: &str, variant: Option<usize>| {
            lines
                .get(owner)
                .map(|(l, vs)| variant.and_then(|i| vs.get(i).copied()).unwrap_or(*l))
        };
        let at_line =
            |owner: &str, variant: Option<usize>, what: String| match line_of(owner, variant) {
                Some(l) => format!("{}:{l}: {what}", path.display()),
                None => at(what),
            };
        let mut z = GeoZone {
            names: HashMap::new(),
            ttl,
            wild_depths: 0,
        };
        let Some(map) = doc.as_mapping() else {
            if doc.is_null() {
                return Ok(z);
            }
            return Err(at(
                "expected owner names, each with a list of variants".into()
            ));
        };
        for (k, v) in map {
            let owner = yaml_text(k).ok_or_else(|| at(format!("{k:?} is not a name")))?;
            // Absolute, with or without the final dot (as Knot reads it).
            let abs = if owner.ends_with('.') {
                owner.clone()
            } else {
                format!("{owner}.")
            };
            let name = Name::parse(&abs, Some(&Name::root()))
                .map_err(|e| at_line(&owner, None, format!("{owner}: {e}")))?
                .to_lowercase();
            if !name.is_subdomain_of(origin) {
                return Err(at_line(
                    &owner,
                    None,
                    format!("{owner} is outside the zone {origin}"),
                ));
            }
            let list = v.as_sequence().ok_or_else(|| {
                at_line(
                    &owner,
                    None,
                    format!("{owner}: expected a list of variants"),
                )
            })?;
            let mut g = GeoName::default();
            for (i, var) in list.iter().enumerate() {
                let where_ =
                    |m: String| at_line(&owner, Some(i), format!("{owner} variant {}: {m}", i + 1));
                let var = var
                    .as_mapping()
                    .ok_or_else(|| where_("expected `net:` or `view:` and records".into()))?;
                let mut nets: Vec<ipnet::IpNet> = Vec::new();
                let mut locs: Vec<Vec<Option<Box<str>>>> = Vec::new();
                let mut variant = Variant::default();
                for (key, value) in var {
                    let key =
                        yaml_text(key).ok_or_else(|| where_("a key that is not text".into()))?;
                    match key.as_str() {
                        "net" => {
                            let s = yaml_text(value).unwrap_or_default();
                            let n = crate::config::transfer::parse_prefix(&s).map_err(&where_)?;
                            nets.push(n);
                        }
                        "view" => {
                            let s = yaml_text(value).unwrap_or_default();
                            let v = views
                                .get(&s)
                                .ok_or_else(|| where_(format!("no [[view]] named {s:?}")))?;
                            nets.extend(v.iter().copied());
                        }
                        "geo" => {
                            let s = yaml_text(value).unwrap_or_default();
                            let want: Vec<Option<Box<str>>> =
                                s.split(';').map(|v| (v != "*").then(|| v.into())).collect();
                            if want.len() > keys {
                                return Err(where_(format!(
                                    "geo: {s:?} names {} values, [geoip] keys has {keys}",
                                    want.len()
                                )));
                            }
                            locs.push(want);
                        }
                        ty => {
                            let rtype = zones::rrtype::from_text(ty.as_bytes())
                                .ok_or_else(|| where_(format!("{ty:?} is not a record type")))?;
                            let values: Vec<String> = match value {
                                serde_yaml::Value::Sequence(s) => {
                                    s.iter().filter_map(yaml_text).collect()
                                }
                                v => yaml_text(v).into_iter().collect(),
                            };
                            if values.len() > MAX_VARIANT_RRS {
                                return Err(where_(format!(
                                    "{} {ty} records: a variant holds at most {MAX_VARIANT_RRS} of one type",
                                    values.len()
                                )));
                            }
                            let mut rdatas = Vec::new();
                            for rd in values {
                                rdatas.push(parse_rdata(&name, ty, &rd).map_err(&where_)?);
                            }
                            variant.rrsets.push((rtype, rdatas));
                        }
                    }
                }
                if nets.is_empty() && locs.is_empty() {
                    return Err(where_("no `net:`, `view:` or `geo:` chooses it".into()));
                }
                variant.check().map_err(&where_)?;
                let idx = g.variants.len() as u16;
                for n in nets {
                    if let Some(&first) = g.nets.get(&n.trunc()).filter(|&&f| f != idx) {
                        return Err(where_(format!(
                            "{} chooses variant {} already: a network picks one variant",
                            n.trunc(),
                            first + 1
                        )));
                    }
                    g.add_net(n, idx);
                }
                for l in locs {
                    g.locs.push((l, idx));
                }
                g.types.extend(variant.rrsets.iter().map(|(ty, _)| *ty));
                g.variants.push(variant);
            }
            g.types.sort_unstable();
            g.types.dedup();
            if let Some(parent) = name.as_wire().strip_prefix(b"\x01*") {
                let depth = zones::name::label_count(parent);
                if depth < 128 {
                    z.wild_depths |= 1u128 << depth;
                }
            }
            z.names.insert(name.as_wire().into(), g);
        }
        Ok(z)
    }
}

/// A YAML scalar as text (strings, numbers, addresses written bare).
fn yaml_text(v: &serde_yaml::Value) -> Option<String> {
    match v {
        serde_yaml::Value::String(s) => Some(s.clone()),
        serde_yaml::Value::Number(n) => Some(n.to_string()),
        serde_yaml::Value::Bool(b) => Some(b.to_string()),
        _ => None,
    }
}

/// The wire RDATA of one record of type `ty` at `owner` written as `text`.
fn parse_rdata(owner: &Name, ty: &str, text: &str) -> Result<Box<[u8]>, String> {
    let line = format!("{owner} 0 IN {ty} {text}\n");
    let mut out = None;
    zones::reader::read_bytes("geo", line, &zones::ReadOptions::new(owner), &mut |r| {
        out = Some(Box::<[u8]>::from(r.rdata))
    })
    .map_err(|e| {
        // The one-line reader's own position ("geo:1:22") means nothing in the geo file.
        let m = e.to_string();
        let m = m
            .strip_prefix("geo:")
            .and_then(|r| r.split_once(": "))
            .map_or(m.clone(), |(_, m)| m.to_string());
        format!("{ty} {text:?}: {m}")
    })?;
    out.ok_or_else(|| format!("{ty} {text:?}: no record"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn load(text: &str) -> Result<GeoZone, String> {
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("example.geo");
        std::fs::write(&f, text).unwrap();
        let origin = Name::parse("example.", None).unwrap();
        GeoZone::load(&f, &origin, &HashMap::new(), 60, 0)
    }

    /// The scope an answer is given covers only the client's part of the variants'
    /// networks (RFC 7871 §7.2.1): the fallback answer and the answer of a network holding
    /// a more specific one were scoped 0 and the outer network's length, which told a
    /// resolver to give them to the clients other variants are for.
    #[test]
    fn a_scope_leaves_out_the_networks_of_other_variants() {
        let g = load(concat!(
            "www.example.:\n",
            "  - net: 10.1.0.0/16\n    A: 192.0.2.1\n",
            "  - net: 10.1.5.0/24\n    A: 192.0.2.2\n",
            "  - net: 2001:db8::/32\n    A: 192.0.2.3\n",
        ))
        .unwrap();
        let n = g.name(b"\x03www\x07example\x00").unwrap();
        let scope = |ip: &str| {
            let ip: IpAddr = ip.parse().unwrap();
            let chosen = n.pick(ip, None).1;
            n.scope(ip, chosen, 1)
        };
        // In the /24: its own length.
        assert_eq!(scope("10.1.5.7"), 24);
        // In the /16 beside the /24 (10.1.4.x differs from 10.1.5.x at bit 24): 24, not 16.
        assert_eq!(scope("10.1.4.1"), 24);
        // Far from the /24 in the /16: 16 keeps the /24 out (10.1.128.x differs at bit 17).
        assert_eq!(scope("10.1.128.1"), 17);
        // No variant: the fallback covers the part sharing no network (10.2.x differs from
        // 10.1.x at bit 15; 11.x from 10.x at bit 8).
        assert_eq!(scope("10.2.0.1"), 15);
        assert_eq!(scope("11.0.0.1"), 8);
        assert_eq!(scope("200.0.2.1"), 1);
        // IPv6 fallback beside 2001:db8::/32 (2001:db9:: differs at bit 32).
        assert_eq!(scope("2001:db9::1"), 32);
        // An IPv4-mapped client: in IPv6 terms (96 + the IPv4 scope).
        assert_eq!(scope("::ffff:10.1.5.7"), 96 + 24);
        // A type no variant holds: the zone's answer, the same for all.
        assert_eq!(n.scope("10.1.5.7".parse().unwrap(), 24, 16), 0);
    }

    /// A wildcard's variants answer every name below it that holds none of its own,
    /// however many labels down (one label only, before: `c.b.wild` got NXDOMAIN where Knot
    /// gave the variant).
    #[test]
    fn a_wildcard_covers_names_any_number_of_labels_below_it() {
        let g = load(concat!(
            "*.wild.example.:   # Knot's bare form, a comment after it\n",
            "  - net: 10.0.0.0/8\n    A: 192.0.2.1\n",
            "own.b.wild.example.:\n  - net: 10.0.0.0/8\n    A: 192.0.2.2\n",
        ))
        .unwrap();
        let n = |name: &str| {
            let w = Name::parse(name, None).unwrap();
            g.name(w.as_wire()).map(|n| n.variants.len())
        };
        assert_eq!(n("a.wild.example."), Some(1));
        assert_eq!(n("c.b.wild.example."), Some(1));
        assert_eq!(n("x.y.z.c.b.wild.example."), Some(1));
        assert_eq!(n("own.b.wild.example."), Some(1));
        assert_eq!(n("wild.example."), None, "not below it");
        assert_eq!(n("a.other.example."), None);
    }

    #[test]
    fn errors_name_the_line_of_the_owner_or_variant() {
        let Err(e) = load(concat!(
            "www.example.:\n  - net: 10.0.0.0/8\n    A: 192.0.2.1\n",
            "# a comment\n",
            "mail.example.:\n  - net: 10.0.0.0/8\n    A: 192.0.2.1\n",
            "  - net: 11.0.0.0/8\n    A: not-an-address\n",
        )) else {
            panic!("a bad address was taken");
        };
        assert!(e.contains("example.geo:8: mail.example. variant 2"), "{e}");
        assert!(!e.contains("geo:1:"), "{e}");
        let Err(e) = load("www.other.:\n  - net: 10.0.0.0/8\n    A: 192.0.2.1\n") else {
            panic!("outside the zone taken");
        };
        assert!(e.contains("example.geo:1: www.other. is outside"), "{e}");
    }

    #[test]
    fn a_network_picks_one_variant_of_a_name() {
        let Err(e) = load(concat!(
            "www.example.:\n  - net: 10.0.0.0/8\n    A: 192.0.2.1\n",
            "  - net: 10.1.2.3/8\n    A: 192.0.2.2\n",
        )) else {
            panic!("a network twice was taken (the last silently won)");
        };
        assert!(e.contains("10.0.0.0/8 chooses variant 1"), "{e}");
    }

    #[test]
    fn a_variant_holds_one_cname_alone_and_none_of_the_zones_own_types() {
        let v = |body: &str| load(&format!("www.example.:\n  - net: 10.0.0.0/8\n{body}"));
        assert!(v("    CNAME: a.example.\n").is_ok());
        for (body, why) in [
            (
                "    A: 192.0.2.1\n    CNAME: a.example.\n",
                "beside other data",
            ),
            ("    CNAME: [ a.example., b.example. ]\n", "2 CNAMEs"),
            ("    NS: ns.evil.\n", "NS is the zone's own"),
            ("    SOA: ns h 1 2 3 4 5\n", "SOA is the zone's own"),
        ] {
            let Err(e) = v(body) else {
                panic!("{body} taken");
            };
            assert!(e.contains(why) && e.contains("example.geo"), "{e}");
        }
    }

    #[test]
    fn a_variant_holds_at_most_the_records_one_answer_carries() {
        let list = |n: usize| {
            (0..n)
                .map(|i| format!("10.0.0.{}", i + 1))
                .collect::<Vec<_>>()
                .join(", ")
        };
        let ok = format!(
            "www.example.:\n  - net: 192.0.2.0/24\n    A: [ {} ]\n",
            list(MAX_VARIANT_RRS)
        );
        assert!(load(&ok).is_ok());
        let Err(e) = load(&format!(
            "www.example.:\n  - net: 192.0.2.0/24\n    A: [ {} ]\n",
            list(MAX_VARIANT_RRS + 1)
        )) else {
            panic!("65 records of one type were taken");
        };
        assert!(e.contains("example.geo") && e.contains("at most 64"), "{e}");
    }

    #[test]
    fn variants_below_a_cut_or_a_dname_or_beside_a_cname_are_refused() {
        let zone = crate::query::testkit::load_zone(
            "example.",
            "$ORIGIN example.\n$TTL 300\n@ SOA ns h 1 2 3 4 5\n@ NS ns\nns A 192.0.2.1\n\
             del NS ns.other.\ncn CNAME www\nwww A 192.0.2.2\nold DNAME new.\n",
        );
        let check = |text: &str| {
            let g = load(text).unwrap();
            g.check_against(&zone, Path::new("example.geo"))
        };
        let v = |name: &str, rr: &str| format!("{name}:\n  - net: 10.0.0.0/8\n    {rr}\n");
        for (name, rr, why) in [
            (
                "del.example.",
                "A: 192.0.2.9",
                "at or below the delegation del.example.",
            ),
            (
                "x.del.example.",
                "A: 192.0.2.9",
                "at or below the delegation del.example.",
            ),
            (
                "x.old.example.",
                "A: 192.0.2.9",
                "below the DNAME at old.example.",
            ),
            (
                "cn.example.",
                "A: 192.0.2.9",
                "a variant may hold only a CNAME",
            ),
            (
                "\"*.del.example.\"",
                "A: 192.0.2.9",
                "at or below the delegation del.example.",
            ),
            (
                "\"*.example.\"",
                "CNAME: www.example.",
                "answers del.example., a delegation",
            ),
            (
                "\"*.old.example.\"",
                "A: 192.0.2.9",
                "below the DNAME at old.example.",
            ),
        ] {
            let e = check(&v(name, rr)).unwrap_err();
            assert!(
                e.starts_with("example.geo: ") && e.contains(why),
                "{name}: {e}"
            );
        }
        // Allowed: other data at a name that exists, a CNAME beside the zone's CNAME, the
        // apex; a name only the geo file has is reported.
        let ok = [
            v("www.example.", "A: 192.0.2.9"),
            v("cn.example.", "CNAME: www.example."),
            v("example.", "TXT: apex"),
            v("\"*.cn.example.\"", "A: 192.0.2.9"),
            v("geo-only.example.", "A: 192.0.2.9"),
        ]
        .concat();
        assert_eq!(check(&ok).unwrap(), vec!["geo-only.example.".to_string()]);
    }
}
