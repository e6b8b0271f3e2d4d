//! The query path's test kit: a test zone, a query builder, a strict reply reader and a
//! processor rig, for the unit tests of the pipeline, `internet`, `response`,
//! `nsec_proofs`, `served`, the XDP answer compiler and `tcp`.

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use arc_swap::ArcSwap;
use shield::block::{BlockConfig, BlockEntry, BlockMap, Evidence, Origin, Scope};
use shield::events::{Action, Aggregator, AggregatorConfig, Event};
use zones::Zone;

use crate::config::defence::{DefenceConfig, RrlConfig};
use crate::observe::counters::{DropCause, WorkerStats};
use crate::query::defence::Shared;
use crate::query::module::Transport;
use crate::query::process_query::{Outcome, PipelineConfig, Processor};
use crate::query::wire::Query;
use crate::zone::served::ServeOptions;
use crate::zone::served::ZoneSet;

/// The test zone `example.com.`: answers, CNAME chains and loops, a wildcard, a
/// delegation with glue, a DNAME and an RRset too big for UDP.
pub(crate) fn example_text() -> String {
    let mut t = String::from(
        "$TTL 300\n\
         @        SOA ns1 hostmaster 2026010101 7200 3600 1209600 60\n\
         @        NS ns1\n\
         @        NS ns2.example.net.\n\
         ns1      A 192.0.2.1\n\
         www      A 192.0.2.10\n\
         www      AAAA 2001:db8::10\n\
         mail     MX 10 www\n\
         cn       CNAME cn2\n\
         cn2      CNAME www\n\
         cnx      CNAME nothere\n\
         loop1    CNAME loop2\n\
         loop2    CNAME loop1\n\
         *.wild   A 192.0.2.20\n\
         x.wild   TXT \"exists\"\n\
         sub      NS ns.sub\n\
         sub      NS ns.elsewhere.net.\n\
         ns.sub   A 192.0.2.30\n\
         dn       DNAME target\n\
         x.target A 192.0.2.40\n",
    );
    for i in 0..12 {
        t.push_str(&format!("big TXT \"{i:02}{}\"\n", "x".repeat(198)));
    }
    t
}

/// Loads `text` as the zone `origin`.
pub(crate) fn load_zone(origin: &str, text: &str) -> Arc<Zone> {
    let o: zones::Name = origin.parse().unwrap();
    let l = zones::load_bytes("test", text, &o, &zones::ReadOptions::new(&o))
        .unwrap_or_else(|e| panic!("{origin}: {e}"));
    Arc::new(l.zone)
}

/// A published zone set of these zones.
pub(crate) fn zone_set(zones: Vec<(Arc<Zone>, ServeOptions)>) -> Arc<ArcSwap<ZoneSet>> {
    Arc::new(ArcSwap::from_pointee(ZoneSet::new(zones, 1)))
}

/// `example.com.` alone, default options.
pub(crate) fn example_set() -> Arc<ArcSwap<ZoneSet>> {
    zone_set(vec![(
        load_zone("example.com.", &example_text()),
        ServeOptions::default(),
    )])
}

/// A query to build.
#[derive(Clone, Debug)]
pub(crate) struct Q {
    pub id: u16,
    pub name: String,
    pub qtype: u16,
    pub qclass: u16,
    pub opcode: u8,
    pub edns: Option<u16>,
    pub version: u8,
    pub dnssec: bool,
    pub cookie: Option<Vec<u8>>,
    /// Other EDNS options (code, data), after the cookie.
    pub options: Vec<(u16, Vec<u8>)>,
}

impl Q {
    /// `name` `qtype` IN, RD, no EDNS.
    pub(crate) fn new(name: &str, qtype: u16) -> Q {
        Q {
            id: 0x1234,
            name: name.into(),
            qtype,
            qclass: 1,
            opcode: 0,
            edns: None,
            version: 0,
            dnssec: false,
            cookie: None,
            options: Vec::new(),
        }
    }
    /// With the EDNS option `code` carrying `data` (EDNS on).
    pub(crate) fn option(mut self, code: u16, data: &[u8]) -> Q {
        self.options.push((code, data.to_vec()));
        self.edns.get_or_insert(1232);
        self
    }
    pub(crate) fn id(mut self, id: u16) -> Q {
        self.id = id;
        self
    }
    pub(crate) fn edns(mut self, size: u16) -> Q {
        self.edns = Some(size);
        self
    }
    pub(crate) fn version(mut self, v: u8) -> Q {
        self.version = v;
        self
    }
    pub(crate) fn dnssec(mut self) -> Q {
        self.dnssec = true;
        self.edns.get_or_insert(4096);
        self
    }
    pub(crate) fn cookie(mut self, c: &[u8]) -> Q {
        self.cookie = Some(c.to_vec());
        self.edns.get_or_insert(1232);
        self
    }
    pub(crate) fn class(mut self, c: u16) -> Q {
        self.qclass = c;
        self
    }
    pub(crate) fn opcode(mut self, op: u8) -> Q {
        self.opcode = op;
        self
    }

    /// The wire form.
    pub(crate) fn bytes(&self) -> Vec<u8> {
        let flags: u16 = ((self.opcode as u16) << 11) | crate::query::wire::hf::RD;
        let mut m = self.id.to_be_bytes().to_vec();
        m.extend_from_slice(&flags.to_be_bytes());
        m.extend_from_slice(&[0, 1, 0, 0, 0, 0, 0, self.edns.is_some() as u8]);
        let n = zones::Name::parse(&self.name, Some(&zones::Name::root())).unwrap();
        m.extend_from_slice(n.as_wire());
        m.extend_from_slice(&self.qtype.to_be_bytes());
        m.extend_from_slice(&self.qclass.to_be_bytes());
        if let Some(size) = self.edns {
            m.extend_from_slice(&[0, 0, 41]);
            m.extend_from_slice(&size.to_be_bytes());
            m.extend_from_slice(&[0, self.version, if self.dnssec { 0x80 } else { 0 }, 0]);
            let mut rd = Vec::new();
            if let Some(c) = &self.cookie {
                rd.extend_from_slice(&crate::query::wire::OPT_COOKIE.to_be_bytes());
                rd.extend_from_slice(&(c.len() as u16).to_be_bytes());
                rd.extend_from_slice(c);
            }
            for (code, data) in &self.options {
                rd.extend_from_slice(&code.to_be_bytes());
                rd.extend_from_slice(&(data.len() as u16).to_be_bytes());
                rd.extend_from_slice(data);
            }
            m.extend_from_slice(&(rd.len() as u16).to_be_bytes());
            m.extend_from_slice(&rd);
        }
        m
    }

    /// The parsed form.
    pub(crate) fn parsed(&self) -> (Vec<u8>, Query) {
        let b = self.bytes();
        let mut q = Query::default();
        crate::query::wire::parse_query(&b, &mut q).unwrap();
        (b, q)
    }
}

/// One record of a reply.
#[derive(Debug, Clone)]
pub(crate) struct Rr {
    /// Owner, lower case, with its trailing dot.
    pub owner: String,
    pub rtype: u16,
    pub class: u16,
    pub ttl: u32,
    pub rdata: Vec<u8>,
    /// Where the RDATA starts in the message (to read compressed names in it).
    pub rdata_at: usize,
}

/// A reply read strictly: every count matches, every byte is read.
#[derive(Debug)]
pub(crate) struct Reply {
    pub bytes: Vec<u8>,
    pub id: u16,
    pub flags: u16,
    /// (name, type, class) when the question is echoed.
    pub question: Option<(String, u16, u16)>,
    pub answer: Vec<Rr>,
    pub authority: Vec<Rr>,
    /// Additional records other than OPT.
    pub additional: Vec<Rr>,
    pub opt: Option<Rr>,
}

/// The name at `off` in `m` (compression followed), lower case with its trailing dot,
/// and the offset after it where it is written.
pub(crate) fn read_name(m: &[u8], mut off: usize) -> (String, usize) {
    let mut s = String::new();
    let mut end = None;
    for _ in 0..128 {
        let l = m[off] as usize;
        if l & 0xC0 == 0xC0 {
            end.get_or_insert(off + 2);
            off = ((l & 0x3F) << 8) | m[off + 1] as usize;
            continue;
        }
        assert!(l < 64, "label length {l} at {off}");
        if l == 0 {
            if s.is_empty() {
                s.push('.');
            }
            return (s, end.unwrap_or(off + 1));
        }
        for &b in &m[off + 1..off + 1 + l] {
            s.push(b.to_ascii_lowercase() as char);
        }
        s.push('.');
        off += 1 + l;
    }
    panic!("name loop in {m:?}");
}

fn u16_at(m: &[u8], o: usize) -> u16 {
    u16::from_be_bytes([m[o], m[o + 1]])
}

impl Reply {
    pub(crate) fn parse(m: &[u8]) -> Reply {
        assert!(m.len() >= 12, "short reply {m:?}");
        let counts = [u16_at(m, 4), u16_at(m, 6), u16_at(m, 8), u16_at(m, 10)];
        assert!(counts[0] <= 1, "QDCOUNT {}", counts[0]);
        let mut p = 12;
        let mut question = None;
        if counts[0] == 1 {
            let (n, e) = read_name(m, p);
            question = Some((n, u16_at(m, e), u16_at(m, e + 2)));
            p = e + 4;
        }
        let mut secs: [Vec<Rr>; 3] = Default::default();
        for (i, sec) in secs.iter_mut().enumerate() {
            for _ in 0..counts[i + 1] {
                let (owner, e) = read_name(m, p);
                let rdlen = u16_at(m, e + 8) as usize;
                assert!(e + 10 + rdlen <= m.len(), "RR past the end");
                sec.push(Rr {
                    owner,
                    rtype: u16_at(m, e),
                    class: u16_at(m, e + 2),
                    ttl: u32::from_be_bytes([m[e + 4], m[e + 5], m[e + 6], m[e + 7]]),
                    rdata: m[e + 10..e + 10 + rdlen].to_vec(),
                    rdata_at: e + 10,
                });
                p = e + 10 + rdlen;
            }
        }
        assert_eq!(p, m.len(), "bytes after the last record");
        let [answer, authority, additional] = secs;
        assert!(answer.iter().chain(&authority).all(|r| r.rtype != 41));
        let (opts, additional): (Vec<Rr>, Vec<Rr>) =
            additional.into_iter().partition(|r| r.rtype == 41);
        assert!(opts.len() <= 1, "more than one OPT");
        Reply {
            bytes: m.to_vec(),
            id: u16_at(m, 0),
            flags: u16_at(m, 2),
            question,
            answer,
            authority,
            additional,
            opt: opts.into_iter().next(),
        }
    }

    /// The full rcode (extended bits from OPT).
    pub(crate) fn rcode(&self) -> u16 {
        (self.flags & 0xF) | self.opt.as_ref().map_or(0, |o| ((o.ttl >> 24) as u16) << 4)
    }
    pub(crate) fn tc(&self) -> bool {
        self.flags & crate::query::wire::hf::TC != 0
    }
    pub(crate) fn aa(&self) -> bool {
        self.flags & crate::query::wire::hf::AA != 0
    }
    pub(crate) fn qr(&self) -> bool {
        self.flags & crate::query::wire::hf::QR != 0
    }
    /// The data of the OPT's option `code`, if there is one.
    pub(crate) fn option(&self, code: u16) -> Option<Vec<u8>> {
        let rd = &self.opt.as_ref()?.rdata;
        let mut p = 0;
        while p + 4 <= rd.len() {
            let (c, len) = (u16_at(rd, p), u16_at(rd, p + 2) as usize);
            if c == code {
                return Some(rd[p + 4..p + 4 + len].to_vec());
            }
            p += 4 + len;
        }
        None
    }
    /// The COOKIE option's data.
    pub(crate) fn cookie(&self) -> Option<Vec<u8>> {
        self.option(crate::query::wire::OPT_COOKIE)
    }
    /// The name at `off` bytes into the RDATA of `rr`.
    pub(crate) fn rdata_name(&self, rr: &Rr, off: usize) -> String {
        read_name(&self.bytes, rr.rdata_at + off).0
    }
    /// Records of no section at all.
    pub(crate) fn is_empty(&self) -> bool {
        self.answer.is_empty() && self.authority.is_empty() && self.additional.is_empty()
    }
}

/// Defence settings: RRL as given (off without), cookies on or off, the
/// random-subdomain defence off.
pub(crate) fn defences(rrl: Option<RrlConfig>, cookies: bool) -> DefenceConfig {
    let mut c = DefenceConfig {
        rrl: rrl.unwrap_or_else(|| RrlConfig {
            enabled: false,
            ..RrlConfig::default()
        }),
        ..DefenceConfig::default()
    };
    c.cookies.enabled = cookies;
    c.random_subdomain.enabled = false;
    c
}

/// Shared defence state over an empty block map.
pub(crate) fn shared(cfg: DefenceConfig) -> Arc<Shared> {
    Shared::new(
        cfg,
        BlockMap::new(BlockConfig::default()),
        Aggregator::new(AggregatorConfig::default()),
    )
}

/// Blocks `net` for a minute, decided by `origin` (proven: an operator's, or over TCP).
pub(crate) fn block(s: &Shared, net: &str, origin: Origin) {
    let evidence = match origin {
        Origin::Operator => Evidence::Operator,
        _ => Evidence::Tcp,
    };
    s.blocks.insert(BlockEntry::with_ttl(
        net.parse().unwrap(),
        Duration::from_secs(60),
        shield::clock::unix_ms(),
        "test",
        origin,
        evidence,
    ));
}

/// Makes `net` a suspect of `scope` for a minute (unproven evidence).
pub(crate) fn suspect(s: &Shared, net: &str, scope: Scope) {
    s.blocks.insert(
        BlockEntry::with_ttl(
            net.parse().unwrap(),
            Duration::from_secs(60),
            shield::clock::unix_ms(),
            "test",
            Origin::Local,
            Evidence::Udp,
        )
        .with_scope(scope),
    );
}

/// The events flushed now.
pub(crate) fn events(s: &Shared, action: Action) -> Vec<Event> {
    s.events
        .flush(shield::clock::unix_ms())
        .into_iter()
        .filter(|e| e.action == action)
        .collect()
}

pub(crate) fn load(a: &AtomicU64) -> u64 {
    a.load(Ordering::Relaxed)
}

/// A processor over a zone set with its counters; the clock is read once (at `new`),
/// so rate limits see every query at the same instant.
pub(crate) struct Rig {
    pub p: Processor,
    pub stats: Arc<WorkerStats>,
    pub shared: Option<Arc<Shared>>,
    out: Vec<u8>,
}

impl Rig {
    pub(crate) fn new(zones: Arc<ArcSwap<ZoneSet>>, cfg: Option<DefenceConfig>) -> Rig {
        Rig::with_shared(zones, cfg.map(shared))
    }

    pub(crate) fn with_shared(zones: Arc<ArcSwap<ZoneSet>>, s: Option<Arc<Shared>>) -> Rig {
        Rig::with_pipeline(zones, s, PipelineConfig::default())
    }

    /// With the pipeline settings `cfg`.
    pub(crate) fn with_pipeline(
        zones: Arc<ArcSwap<ZoneSet>>,
        s: Option<Arc<Shared>>,
        cfg: PipelineConfig,
    ) -> Rig {
        let stats = Arc::new(WorkerStats::default());
        let mut p = Processor::new(zones, Arc::new(cfg), stats.clone(), s.as_ref());
        p.refresh();
        Rig {
            p,
            stats,
            shared: s,
            out: vec![0u8; 65535],
        }
    }

    /// Processes `req` from `src` (an address, port 5353): the reply, or `None` for a drop.
    pub(crate) fn send(&mut self, req: &[u8], src: &str, t: Transport) -> Option<Reply> {
        let src = SocketAddr::new(src.parse::<IpAddr>().unwrap(), 5353);
        match self.p.process(req, src, t, &mut self.out) {
            Outcome::Reply(n) => {
                if t == Transport::Udp {
                    assert!(n <= 1232, "a UDP reply of {n} bytes");
                }
                Some(Reply::parse(&self.out[..n]))
            }
            Outcome::Drop | Outcome::Refused => None,
            Outcome::Transfer => panic!("a transfer without transfers configured"),
        }
    }

    pub(crate) fn drops(&self, c: DropCause) -> u64 {
        load(&self.stats.drops[c as usize])
    }

    pub(crate) fn rcodes(&self, rc: u16) -> u64 {
        load(&self.stats.rcode[rc as usize])
    }

    pub(crate) fn shared(&self) -> &Shared {
        self.shared.as_ref().expect("defences on")
    }
}
