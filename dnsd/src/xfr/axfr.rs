//! AXFR (RFC 5936), both ways: a transfer [`Job`] streams a zone (or an IXFR answer) out
//! over a TCP connection as several messages, encoding each from the compiled zone as it
//! goes (names compressed within each message, nothing held twice); a [`Collector`] builds
//! and validates a zone from the records of an incoming transfer.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Instant;

use tokio::sync::mpsc;
use zones::build::ZoneBuilder;
use zones::reader::Record;
use zones::{Name, Zone};

use super::journal::{Diff, Rec};
use super::wire::RrRef;
use super::{Slot, Transfers, XfrError};
use crate::query::response::{Owner, Section, Writer};
use crate::query::tsig::{self, Signer};
use crate::query::wire::{self, Query, hf, rcode};

/// Largest message of an outgoing transfer.
const MSG_MAX: usize = 65535;

/// What a job sends.
pub enum JobKind {
    /// The whole zone, as AXFR.
    Axfr,
    /// IXFR from the journal: these differences in order.
    Ixfr(Vec<Arc<Diff>>),
    /// IXFR that the journal cannot answer: the whole zone in the IXFR answer (RFC 1995 §4).
    IxfrFull,
}

/// An outgoing transfer, run by the TCP connection it was asked on.
pub struct Job {
    req: Vec<u8>,
    peer: SocketAddr,
    zone: Arc<Zone>,
    kind: JobKind,
    signer: Option<Signer>,
    x: Arc<Transfers>,
    _slot: Slot,
}

impl Job {
    /// A job answering `req` from `peer` with `zone`; holds a transfer slot until done.
    pub fn new(
        req: Vec<u8>,
        peer: SocketAddr,
        zone: Arc<Zone>,
        kind: JobKind,
        signer: Option<Signer>,
        x: Arc<Transfers>,
        slot: Slot,
    ) -> Job {
        Job {
            req,
            peer,
            zone,
            kind,
            signer,
            x,
            _slot: slot,
        }
    }

    /// Streams the transfer into the connection's writer queue (waiting while it is full),
    /// each message a framed `Vec<u8>` made into the queue's item. Returns false when the
    /// connection went away.
    pub async fn run<T: From<Vec<u8>>>(mut self, tx: &mpsc::Sender<T>) -> bool {
        let start = Instant::now();
        let mut q = Box::<Query>::default();
        if wire::parse_query(&self.req, &mut q).is_err() {
            return true;
        }
        let zone = self.zone.clone();
        let soa = zone.records().next();
        let Some(soa) = soa else {
            return true;
        };
        let (what, ctr) = match &self.kind {
            JobKind::Axfr => ("AXFR", &self.x.stats.axfr_out),
            JobKind::Ixfr(_) => ("IXFR", &self.x.stats.ixfr_out),
            JobKind::IxfrFull => ("IXFR (whole zone)", &self.x.stats.ixfr_out_full),
        };
        ctr.fetch_add(1, Ordering::Relaxed);
        let kind = std::mem::replace(&mut self.kind, JobKind::Axfr);
        let mut it: Box<dyn Iterator<Item = Rec<'_>> + Send + '_> = match &kind {
            JobKind::Axfr | JobKind::IxfrFull => {
                Box::new(zone.records().chain(std::iter::once(soa)))
            }
            JobKind::Ixfr(diffs) => Box::new(
                std::iter::once(soa)
                    .chain(diffs.iter().flat_map(|d| d.records()))
                    .chain(std::iter::once(soa)),
            ),
        };
        let mut enc = Encoder {
            req: &self.req,
            q: &q,
            signer: self.signer.as_mut(),
            pending: None,
            udp_payload: self.x.udp_payload,
        };
        let mut msgs = 0u64;
        let mut records = 0u64;
        loop {
            let m = match enc.message(&mut *it) {
                Ok(Some((m, n))) => {
                    records += n as u64;
                    m
                }
                Ok(None) => break,
                Err(e) => {
                    tracing::error!(peer = %self.peer, zone = %zone.apex(), "{what} out failed: {e}");
                    self.x.stats.out_aborted.fetch_add(1, Ordering::Relaxed);
                    return false;
                }
            };
            msgs += 1;
            self.x.stats.out_messages.fetch_add(1, Ordering::Relaxed);
            if tx.send(T::from(m)).await.is_err() {
                self.x.stats.out_aborted.fetch_add(1, Ordering::Relaxed);
                tracing::info!(peer = %self.peer, zone = %zone.apex(), "{what} out cut off by the client");
                return false;
            }
        }
        let line = format!(
            "{what} to {}: serial {}, {records} records in {msgs} messages, {} ms",
            self.peer,
            zone.serial(),
            start.elapsed().as_millis()
        );
        tracing::info!(zone = %zone.apex(), "{line}");
        self.x
            .with_status(zone.apex().as_wire(), |s| s.last_out = line);
        true
    }
}

/// Encodes records into transfer messages.
struct Encoder<'a, 'q> {
    req: &'a [u8],
    q: &'q Query,
    signer: Option<&'a mut Signer>,
    pending: Option<Rec<'a>>,
    udp_payload: u16,
}

impl<'a> Encoder<'a, '_> {
    /// The next message (framed with its length) and how many records it holds; `None`
    /// when every record was sent.
    fn message(
        &mut self,
        it: &mut dyn Iterator<Item = Rec<'a>>,
    ) -> Result<Option<(Vec<u8>, usize)>, String> {
        let first = match self.pending.take().or_else(|| it.next()) {
            Some(r) => r,
            None => return Ok(None),
        };
        let tsig_room = self.signer.as_ref().map_or(0, |s| s.reserve());
        let opt_room = crate::query::response::opt_room(self.q, &Default::default());
        let mut buf = vec![0u8; 2 + MSG_MAX];
        let mut w = Writer::new(&mut buf[2..], MSG_MAX - tsig_room - opt_room);
        w.start(self.req, self.q, rcode::NOERROR, true);
        w.set_flags(hf::AA);
        let mut n = 0usize;
        let mut next = Some(first);
        while let Some(r) = next {
            if w.rr(Section::Answer, Owner::Name(r.0), r.1, r.2, r.3)
                .is_err()
            {
                if n == 0 {
                    return Err("a record does not fit in a message".into());
                }
                self.pending = Some(r);
                break;
            }
            n += 1;
            next = it.next();
        }
        w.set_limit(MSG_MAX - tsig_room);
        if self.q.edns.is_some() {
            crate::query::response::put_opt(
                &mut w,
                self.q,
                self.udp_payload,
                0,
                Default::default(),
            );
        }
        let mut len = w.finish();
        if let Some(s) = self.signer.as_deref_mut() {
            len = s
                .sign(&mut buf[2..], len, tsig::now())
                .ok_or("no room for the TSIG")?;
        }
        buf[..2].copy_from_slice(&(len as u16).to_be_bytes());
        buf.truncate(len + 2);
        Ok(Some((buf, n)))
    }
}

impl crate::query::handoff::TransferJob for Job {
    fn run(
        self: Box<Self>,
        tx: mpsc::Sender<crate::query::handoff::Outgoing>,
    ) -> std::pin::Pin<Box<dyn std::future::Future<Output = bool> + Send>> {
        Box::pin(async move { Job::run(*self, &tx).await })
    }
}

/// Builds a zone from the records of an incoming transfer, checking each record's RDATA as
/// it comes and the whole zone at the end (as a zone loaded from a file).
pub struct Collector {
    b: ZoneBuilder,
    apex: Name,
    count: usize,
    max: usize,
    /// Records outside the zone passed over, and the first of them.
    outside: usize,
    first_outside: Option<String>,
}

impl Collector {
    /// A collector for the zone `apex`, refusing more than `max` records.
    pub fn new(apex: &Name, max: usize) -> Collector {
        Collector {
            b: ZoneBuilder::new(apex),
            apex: apex.clone(),
            count: 0,
            max,
            outside: 0,
            first_outside: None,
        }
    }

    /// Adds one record.
    pub fn add(&mut self, r: RrRef<'_>) -> Result<(), XfrError> {
        self.add_parts(r.owner, r.rtype, r.class, r.ttl, r.rdata)
    }

    /// Adds one record given by its parts.
    pub fn add_parts(
        &mut self,
        owner: &[u8],
        rtype: u16,
        class: u16,
        ttl: u32,
        rdata: &[u8],
    ) -> Result<(), XfrError> {
        if class != 1 {
            return Err(XfrError::Protocol("a record of another class than IN"));
        }
        self.count += 1;
        if self.count > self.max {
            return Err(XfrError::TooManyRecords(self.max));
        }
        // A record outside the zone is no part of it: passed over (as Knot and NSD do), and
        // said once the zone is compiled; the rest of the transfer is taken.
        if !zones::name::is_subdomain(owner, self.apex.as_wire()) {
            self.outside += 1;
            if self.first_outside.is_none() {
                let mut s = String::new();
                let _ = zones::name::write_presentation(owner, &mut s);
                self.first_outside = Some(s);
            }
            return Ok(());
        }
        // Held to its structure only: what the primary serves, a secondary serves (as Knot
        // and NSD take it), a semantic fault is the primary's to mend.
        zones::rdata::check_structure(rtype, rdata).map_err(|e| {
            let mut s = String::new();
            let _ = zones::name::write_presentation(owner, &mut s);
            XfrError::Zone(format!("{s}: {e}"))
        })?;
        self.b.add(Record {
            owner,
            ttl,
            ttl_explicit: true,
            rtype,
            rdata,
            file: 0,
            line: self.count.min(u32::MAX as usize) as u32,
        });
        Ok(())
    }

    /// Records added.
    pub fn len(&self) -> usize {
        self.count
    }

    /// True when no record was added.
    pub fn is_empty(&self) -> bool {
        self.count == 0
    }

    /// Compiles and validates the zone (blocking: call off the runtime threads).
    pub fn finish(self, source: &str) -> Result<Zone, XfrError> {
        let files = [Arc::new(PathBuf::from(source))];
        match self.b.finish(&files) {
            Ok(b) => {
                for w in b.warnings.iter().take(10) {
                    tracing::warn!(zone = %self.apex, "{w}");
                }
                if let Some(first) = &self.first_outside {
                    tracing::warn!(zone = %self.apex, records = self.outside, first = %first, "{source}: records outside the zone ignored");
                }
                Ok(b.zone)
            }
            Err(e) => Err(XfrError::Zone(e.to_string())),
        }
    }
}

/// Writes a zone to `path` as master-file text, atomically (a temporary file renamed over
/// it), streaming record by record (blocking).
pub fn write_zone_file(zone: &Zone, path: &std::path::Path) -> std::io::Result<()> {
    let header = format!(
        "{} serial {}, written by dnsd after a transfer",
        zone.apex(),
        zone.serial()
    );
    zones::present::write_file(zone, path, &header)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn collects_and_writes_a_zone() {
        let origin = Name::parse("example.", None).unwrap();
        let text = "$ORIGIN example.\n$TTL 300\n@ SOA ns hm 7 60 60 600 60\n@ NS ns\nns A 192.0.2.1\n\
                    www CNAME ns\nmx MX 10 ns\n";
        let z = zones::load_bytes("t", text, &origin, &zones::ReadOptions::new(&origin))
            .unwrap()
            .zone;
        let mut c = Collector::new(&origin, 100);
        for (o, t, ttl, rd) in z.records() {
            c.add_parts(o, t, 1, ttl, rd).unwrap();
        }
        let z2 = c.finish("test").unwrap();
        assert_eq!(z2.serial(), 7);
        assert_eq!(
            zones::present::zone_to_text(&z),
            zones::present::zone_to_text(&z2)
        );
        let dir = tempfile_dir();
        let p = dir.join("z.zone");
        write_zone_file(&z2, &p).unwrap();
        let z3 = zones::load_file(&p, &origin, &zones::ReadOptions::new(&origin))
            .unwrap()
            .zone;
        assert_eq!(
            zones::present::zone_to_text(&z),
            zones::present::zone_to_text(&z3)
        );
        let _ = std::fs::remove_dir_all(&dir);
        let mut c = Collector::new(&origin, 1);
        c.add_parts(b"\x07example\x00", 1, 1, 1, &[1, 2, 3, 4])
            .unwrap();
        assert!(
            c.add_parts(b"\x07example\x00", 1, 1, 1, &[1, 2, 3, 5])
                .is_err()
        );
        let mut c = Collector::new(&origin, 10);
        assert!(
            c.add_parts(b"\x07example\x00", 1, 1, 1, &[1, 2, 3])
                .is_err()
        );
    }

    /// Records outside the zone in a transfer are passed over and the rest taken, as Knot
    /// and NSD take it (the zone stayed old until it expired).
    #[test]
    fn records_outside_the_zone_are_passed_over() {
        let origin = Name::parse("example.", None).unwrap();
        let text =
            "$ORIGIN example.\n$TTL 300\n@ SOA ns hm 7 60 60 600 60\n@ NS ns\nns A 192.0.2.1\n";
        let z = zones::load_bytes("t", text, &origin, &zones::ReadOptions::new(&origin))
            .unwrap()
            .zone;
        let mut c = Collector::new(&origin, 100);
        for (o, t, ttl, rd) in z.records() {
            c.add_parts(o, t, 1, ttl, rd).unwrap();
            // After each, a stray: another zone, and a name ending like ours but not below.
            c.add_parts(b"\x04evil\x05other\x00", 1, 1, 1, &[1, 2, 3, 4])
                .unwrap();
            c.add_parts(b"\x09badexample\x00", 1, 1, 1, &[1, 2, 3, 4])
                .unwrap();
        }
        let z2 = c.finish("test").unwrap();
        assert_eq!(
            zones::present::zone_to_text(&z),
            zones::present::zone_to_text(&z2)
        );
    }

    fn tempfile_dir() -> PathBuf {
        let d = std::env::temp_dir().join(format!("dnsd-axfr-test-{}", std::process::id()));
        std::fs::create_dir_all(&d).unwrap();
        d
    }
}
