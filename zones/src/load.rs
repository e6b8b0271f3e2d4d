//! Loading a zone: read the master file, compile, validate — one call.

use std::path::Path;
use std::time::{Duration, Instant};

use crate::build::ZoneBuilder;
use crate::error::{Diagnostic, ZoneError};
use crate::name::Name;
use crate::reader::{self, ReadOptions, Record};
use crate::zone::Zone;
use std::sync::mpsc;

/// A zone that loaded, with what was noticed on the way.
#[derive(Debug)]
pub struct Loaded {
    /// The compiled zone.
    pub zone: Zone,
    /// Warnings from reading and validation.
    pub warnings: Vec<Diagnostic>,
    /// Time spent reading and compiling.
    pub elapsed: Duration,
    /// The file's modification time when it was opened (None for text in memory).
    pub mtime: Option<std::time::SystemTime>,
}

/// Loads the zone `origin` from a master file.
pub fn load_file(path: &Path, origin: &Name, opts: &ReadOptions) -> Result<Loaded, ZoneError> {
    load_file_observed(path, origin, opts, &mut |_| {})
}

/// Loads like [`load_file`], showing each record to `observe` (for progress and the like).
///
/// Reading (scanning and RDATA parsing) runs on a second thread and hands records over in
/// batches, while this thread collects them into the builder.
pub fn load_file_observed(
    path: &Path,
    origin: &Name,
    opts: &ReadOptions,
    observe: &mut dyn FnMut(&Record<'_>),
) -> Result<Loaded, ZoneError> {
    // One open and one fstat per zone: with 100,000 zones, path lookups add up.
    let (f, meta) = reader::open(path)?;
    load_opened_observed(path, f, &meta, origin, opts, observe)
}

/// Loads like [`load_file`] from `f`, the file at `path` already opened (by whoever checked
/// who may read it), `meta` what its `fstat` said.
pub fn load_opened(
    path: &Path,
    f: std::fs::File,
    meta: &std::fs::Metadata,
    origin: &Name,
    opts: &ReadOptions,
) -> Result<Loaded, ZoneError> {
    load_opened_observed(path, f, meta, origin, opts, &mut |_| {})
}

fn load_opened_observed(
    path: &Path,
    f: std::fs::File,
    meta: &std::fs::Metadata,
    origin: &Name,
    opts: &ReadOptions,
    observe: &mut dyn FnMut(&Record<'_>),
) -> Result<Loaded, ZoneError> {
    let start = Instant::now();
    let mut b = ZoneBuilder::new(origin);
    let (len, mtime) = (meta.len(), meta.modified().ok());
    b.reserve_for_text(len);
    if len < reader::SMALL_FILE {
        // A small zone on this thread alone: a reader thread costs more than it saves (and
        // a server loading thousands of small zones runs them on all cores already).
        let summary = reader::read_opened(path, f, meta, opts, &mut |r| {
            observe(&r);
            b.add(r);
        })?;
        return finish(b, summary, start).map(|l| Loaded { mtime, ..l });
    }
    let (full_tx, full_rx) = mpsc::sync_channel::<Batch>(4);
    let (empty_tx, empty_rx) = mpsc::channel::<Batch>();
    let summary = std::thread::scope(|sc| {
        let reader = sc.spawn(move || {
            let mut cur = Batch::default();
            let r = reader::read_opened(path, f, meta, opts, &mut |r| {
                cur.push(&r);
                if cur.meta.len() >= BATCH {
                    let next = empty_rx.try_recv().unwrap_or_default();
                    let full = std::mem::replace(&mut cur, next);
                    let _ = full_tx.send(full);
                }
            });
            if !cur.meta.is_empty() {
                let _ = full_tx.send(cur);
            }
            r
        });
        for mut batch in full_rx {
            batch.for_each(&mut |r| {
                observe(&r);
                b.add(r);
            });
            batch.clear();
            let _ = empty_tx.send(batch);
        }
        reader.join().expect("zone reader thread")
    })?;
    finish(b, summary, start).map(|l| Loaded { mtime, ..l })
}

/// Records per batch handed from the reader thread to the builder.
const BATCH: usize = 4096;

/// Records copied out of the reader's buffers.
#[derive(Default)]
struct Batch {
    bytes: Vec<u8>,
    meta: Vec<Meta>,
}

/// One record of a batch: where its owner and RDATA are in `bytes`, and the rest.
#[derive(Clone, Copy)]
struct Meta {
    off: u32,
    owner_len: u8,
    rdata_len: u16,
    ttl: u32,
    rtype: u16,
    file: u16,
    line: u32,
    ttl_explicit: bool,
}

impl Batch {
    fn push(&mut self, r: &Record<'_>) {
        let off = self.bytes.len() as u32;
        self.bytes.extend_from_slice(r.owner);
        self.bytes.extend_from_slice(r.rdata);
        self.meta.push(Meta {
            off,
            owner_len: r.owner.len() as u8,
            rdata_len: r.rdata.len() as u16,
            ttl: r.ttl,
            rtype: r.rtype,
            file: r.file,
            line: r.line,
            ttl_explicit: r.ttl_explicit,
        });
    }

    fn for_each(&self, f: &mut dyn FnMut(Record<'_>)) {
        for m in &self.meta {
            let o = m.off as usize;
            let ol = m.owner_len as usize;
            f(Record {
                owner: &self.bytes[o..o + ol],
                ttl: m.ttl,
                ttl_explicit: m.ttl_explicit,
                rtype: m.rtype,
                rdata: &self.bytes[o + ol..o + ol + m.rdata_len as usize],
                file: m.file,
                line: m.line,
            });
        }
    }

    fn clear(&mut self) {
        self.bytes.clear();
        self.meta.clear();
    }
}

/// Loads the zone `origin` from master-file text in memory (`name` appears in errors).
pub fn load_bytes(
    name: &str,
    text: impl Into<Vec<u8>>,
    origin: &Name,
    opts: &ReadOptions,
) -> Result<Loaded, ZoneError> {
    let start = Instant::now();
    let mut b = ZoneBuilder::new(origin);
    let summary = reader::read_bytes(name, text, opts, &mut |r| b.add(r))?;
    finish(b, summary, start)
}

fn finish(
    b: ZoneBuilder,
    summary: reader::ReadSummary,
    start: Instant,
) -> Result<Loaded, ZoneError> {
    let built = b.finish(&summary.files)?;
    let mut warnings = summary.warnings;
    warnings.extend(built.warnings);
    Ok(Loaded {
        zone: built.zone,
        warnings,
        elapsed: start.elapsed(),
        mtime: None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A small file (read whole, on this thread) and the same zone past the small-file size
    /// (read through the window, on a reader thread) load alike, errors included.
    #[test]
    fn small_and_big_files_load_alike() {
        let dir = tempfile::tempdir().unwrap();
        let origin = Name::parse("example.com.", None).unwrap();
        let zone = "$TTL 300\n@ SOA ns1 hostmaster 7 7200 3600 1209600 300\n@ NS ns1\n\
                    ns1 A 192.0.2.1\nwww A 192.0.2.2\nwww AAAA 2001:db8::2\n\
                    *.w TXT \"wild\"\nsub NS ns.sub\nns.sub A 192.0.2.3\n";
        let small = dir.path().join("small.zone");
        std::fs::write(&small, zone).unwrap();
        let big = dir.path().join("big.zone");
        let pad = format!("; {}\n", "x".repeat(100));
        let mut text = pad.repeat((reader::SMALL_FILE as usize / pad.len()) + 10);
        text.push_str(zone);
        std::fs::write(&big, &text).unwrap();
        assert!(std::fs::metadata(&big).unwrap().len() > reader::SMALL_FILE);
        let opts = ReadOptions::new(&origin);
        let a = load_file(&small, &origin, &opts).unwrap().zone;
        let b = load_file(&big, &origin, &opts).unwrap().zone;
        assert_eq!(
            (a.serial(), a.record_count(), a.node_count()),
            (b.serial(), b.record_count(), b.node_count())
        );
        assert_eq!((a.serial(), a.record_count()), (7, 8));
        // An error names the same line relative to the file's own content.
        std::fs::write(
            &small,
            "@ SOA ns1 hostmaster 7 7200 3600 1209600 300\nbad A nope\n",
        )
        .unwrap();
        let e = load_file(&small, &origin, &opts).unwrap_err().to_string();
        assert!(e.contains("small.zone:2"), "{e}");
    }
}
