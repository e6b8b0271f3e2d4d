//! Directives and records: `$ORIGIN`, `$TTL`, `$INCLUDE`, `$GENERATE`, owner, TTL and class
//! inheritance, turning scanned entries into records with wire-format owner and RDATA.

use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::error::{Diagnostic, Location, ZoneError};
use crate::name::{self, NameBuf};
use crate::rdata::{self, Fields};
use crate::rrtype::{self, t};
use crate::scan::{EntryInfo, Scanner, Tok};
use crate::text::{load_ttl, parse_ttl, parse_u64};

/// Limits and defaults for reading a master file.
#[derive(Debug, Clone)]
pub struct ReadOptions {
    /// The initial `$ORIGIN` (normally the zone apex), wire format.
    pub origin: Vec<u8>,
    /// TTL for records before any `$TTL` or explicit TTL.
    pub default_ttl: u32,
    /// `$INCLUDE` is honoured (off for untrusted input such as fuzzing).
    pub allow_include: bool,
    /// How deep `$INCLUDE`s may nest.
    pub max_include_depth: usize,
    /// Most records one `$GENERATE` may make.
    pub max_generate: u64,
    /// Most records all the `$GENERATE`s of a zone (with its includes) may make together.
    pub max_generate_total: u64,
    /// Errors listed at most; further ones are counted (the whole file is still read, so
    /// that a check reports every error at once).
    pub max_errors: usize,
    /// Most warnings kept (further ones are counted only).
    pub max_warnings: usize,
    /// RDATA is held to its structure only, a semantic fault warned of, not refused
    /// ([`rdata::check_structure`]): a secondary's copy of what its primary serves.
    pub lenient: bool,
    /// Most bytes of text its `$INCLUDE`d files and `$GENERATE`d records may add to the
    /// zone's own file (a caller's memory budget: what the file's size alone does not show).
    pub max_added_text: u64,
}

/// Types whose RDATA, sound in structure though faulty in meaning (an SSHFP fingerprint of
/// another length than its type's, a ZONEMD digest under 12 octets, a CDS digest of another
/// length than its type's), Knot and NSD load from a primary's file: loaded, warned of
/// (refused, such a zone was served by them and not by us; BIND refuses them). A DS digest
/// of the wrong length stays refused, as Knot and BIND do.
const LOADED_AS_KNOT_AND_NSD: &[u16] = &[rrtype::t::SSHFP, rrtype::t::ZONEMD, rrtype::t::CDS];

impl ReadOptions {
    /// Defaults for a zone whose apex is `origin`.
    pub fn new(origin: &name::Name) -> ReadOptions {
        ReadOptions {
            origin: origin.as_wire().to_vec(),
            default_ttl: 3600,
            allow_include: true,
            max_include_depth: 16,
            max_generate: 65_536,
            max_generate_total: 1 << 20,
            max_errors: 100,
            max_warnings: 200,
            lenient: false,
            max_added_text: u64::MAX,
        }
    }
}

/// One record as read: owner and RDATA borrow the reader's buffers.
#[derive(Debug, Clone, Copy)]
pub struct Record<'a> {
    /// Owner, absolute, wire format, case as written.
    pub owner: &'a [u8],
    /// TTL.
    pub ttl: u32,
    /// True when the TTL was written on the record (not inherited).
    pub ttl_explicit: bool,
    /// Type.
    pub rtype: u16,
    /// RDATA, uncompressed wire format.
    pub rdata: &'a [u8],
    /// Index into [`ReadSummary::files`].
    pub file: u16,
    /// 1-based line.
    pub line: u32,
}

/// What reading produced besides the records.
#[derive(Debug, Default)]
pub struct ReadSummary {
    /// Every file read, the top file first.
    pub files: Vec<Arc<PathBuf>>,
    /// Warnings (the zone still loads).
    pub warnings: Vec<Diagnostic>,
    /// Warnings not kept because of the limit.
    pub warnings_dropped: usize,
    /// Records read.
    pub records: u64,
}

struct Frame {
    scanner: Scanner,
    file: u16,
    origin: NameBuf,
    dir: PathBuf,
    /// Owner of the parent, restored when an included file ends (RFC 1035 §5.1).
    saved_owner: Option<Option<NameBuf>>,
    /// `$TTL` and last TTL of the parent, restored too (as Knot does).
    saved_ttls: Option<(Option<u32>, Option<u32>)>,
}

/// Reads a master file (and what it includes), calling `sink` for each record.
///
/// All errors up to the limit are collected; if there is any, the result is `Err` and the
/// records already given to `sink` must be discarded by the caller.
pub fn read_file(
    path: &Path,
    opts: &ReadOptions,
    sink: &mut dyn FnMut(Record<'_>),
) -> Result<ReadSummary, ZoneError> {
    let (f, meta) = open(path)?;
    read_opened(path, f, &meta, opts, sink)
}

/// Opens a master file: the file and what one `fstat` says of it. Anything but a regular
/// file is refused: a directory, and a device, FIFO or socket (`/dev/zero` would be read
/// without end, a FIFO's open would wait for a writer for ever).
pub fn open(path: &Path) -> Result<(File, std::fs::Metadata), ZoneError> {
    let at = || Location {
        file: Arc::new(path.to_path_buf()),
        line: 0,
        col: 0,
    };
    open_regular(path).map_err(|e| ZoneError::one(at(), e))
}

/// Opens `path` for reading when it is a regular file (never waiting: a FIFO is opened
/// without blocking, then refused); the error says what it is instead.
fn open_regular(path: &Path) -> Result<(File, std::fs::Metadata), String> {
    use std::os::unix::fs::{FileTypeExt, OpenOptionsExt};
    let f = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK | libc::O_NOCTTY)
        .open(path)
        .map_err(|e| format!("cannot open: {e}"))?;
    let meta = f.metadata().map_err(|e| format!("cannot read: {e}"))?;
    let t = meta.file_type();
    let what = if t.is_file() || (t.is_char_device() && path == Path::new("/dev/null")) {
        // /dev/null: the empty file some configurations include (Knot, NSD and BIND take it).
        return Ok((f, meta));
    } else if t.is_dir() {
        "a directory"
    } else if t.is_fifo() {
        "a FIFO"
    } else if t.is_char_device() {
        "a character device"
    } else if t.is_block_device() {
        "a block device"
    } else if t.is_socket() {
        "a socket"
    } else {
        "not a regular file"
    };
    Err(format!("is {what}, not a zone file"))
}

/// Reads a master file already opened (`len` bytes long), as [`read_file`] does.
pub fn read_opened(
    path: &Path,
    f: File,
    meta: &std::fs::Metadata,
    opts: &ReadOptions,
    sink: &mut dyn FnMut(Record<'_>),
) -> Result<ReadSummary, ZoneError> {
    let file = Arc::new(path.to_path_buf());
    let dir = path.parent().map(Path::to_path_buf).unwrap_or_default();
    let len = meta.len();
    // A small file is read whole (no window to allocate and clear: hosting many small zones
    // makes that the bulk of a load); a big one through the scanner's bounded window.
    let scanner = if len < SMALL_FILE {
        let mut text = Vec::with_capacity(len as usize + 1);
        std::io::Read::read_to_end(&mut AsOpened::new(f, meta), &mut text).map_err(|e| {
            ZoneError::one(
                Location {
                    file: file.clone(),
                    line: 0,
                    col: 0,
                },
                format!("cannot read: {e}"),
            )
        })?;
        Scanner::from_bytes(text)
    } else {
        Scanner::from_reader(AsOpened::new(f, meta))
    };
    read(scanner, file, dir, opts, sink)
}

/// A file read no further than its size when opened: one that grows meanwhile (appended
/// to while it is read, by its owner: a member's zone) made a load read on without bound,
/// past the memory reserved for its size, and the process aborted. Refused with a read
/// error instead (the last good version serves on).
struct AsOpened {
    f: File,
    left: u64,
    len: u64,
    /// Its modification time when opened: a rewrite in place to the same size (or longer,
    /// cut back) changes it.
    mtime: Option<std::time::SystemTime>,
}

impl AsOpened {
    /// `f` as `meta` said it was when it was opened.
    fn new(f: File, meta: &std::fs::Metadata) -> AsOpened {
        AsOpened {
            f,
            left: meta.len(),
            len: meta.len(),
            mtime: meta.modified().ok(),
        }
    }
}

impl std::io::Read for AsOpened {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        if self.left == 0 {
            // At the size it had: one more byte says it grew.
            let mut one = [0u8; 1];
            return match std::io::Read::read(&mut self.f, &mut one)? {
                0 if self.mtime.is_some()
                    && self.f.metadata().and_then(|m| m.modified()).ok() != self.mtime =>
                {
                    Err(std::io::Error::other(
                        "the file was written to while it was read (its text is part old, part \
                         new: write a new file and rename it over the old one)",
                    ))
                }
                0 => Ok(0),
                _ => Err(std::io::Error::other(format!(
                    "the file grew while it was read (it was {} bytes when opened: write a \
                     new file and rename it over the old one)",
                    self.len
                ))),
            };
        }
        let n = buf.len().min(self.left.min(usize::MAX as u64) as usize);
        let got = std::io::Read::read(&mut self.f, &mut buf[..n])?;
        if got == 0 && n > 0 {
            // The end before the size it had: cut while read (a shorter zone, its last
            // names gone, would have loaded as though whole).
            return Err(std::io::Error::other(format!(
                "the file shrank while it was read (it was {} bytes when opened, it ended at {}: write a new file and rename it over the old one)",
                self.len,
                self.len - self.left
            )));
        }
        self.left -= got as u64;
        Ok(got)
    }
}

/// Files below this size are read whole rather than through the scanner's window.
pub const SMALL_FILE: u64 = 256 * 1024;

/// Reads master-file text held in memory; `name` is used in errors.
pub fn read_bytes(
    name: &str,
    text: impl Into<Vec<u8>>,
    opts: &ReadOptions,
    sink: &mut dyn FnMut(Record<'_>),
) -> Result<ReadSummary, ZoneError> {
    let file = Arc::new(PathBuf::from(name));
    let dir = file.parent().map(Path::to_path_buf).unwrap_or_default();
    read(Scanner::from_bytes(text), file, dir, opts, sink)
}

fn read(
    scanner: Scanner,
    file: Arc<PathBuf>,
    dir: PathBuf,
    opts: &ReadOptions,
    sink: &mut dyn FnMut(Record<'_>),
) -> Result<ReadSummary, ZoneError> {
    let mut origin = NameBuf::new();
    origin.set_wire(&opts.origin);
    let mut r = Reader {
        opts,
        summary: ReadSummary {
            files: vec![file],
            ..Default::default()
        },
        errors: Vec::new(),
        more: 0,
        stack: vec![Frame {
            scanner,
            file: 0,
            origin,
            dir,
            saved_owner: None,
            saved_ttls: None,
        }],
        owner: None,
        default_ttl: None,
        last_ttl: None,
        default_ttl_warned: false,
        toks: Vec::with_capacity(64),
        rdata: Vec::with_capacity(512),
        scratch: NameBuf::new(),
        generated: 0,
        added_text: 0,
    };
    r.run(sink);
    if r.errors.is_empty() {
        Ok(r.summary)
    } else {
        Err(ZoneError {
            errors: r.errors,
            more: r.more,
        })
    }
}

struct Reader<'o> {
    opts: &'o ReadOptions,
    summary: ReadSummary,
    errors: Vec<Diagnostic>,
    /// Errors found past `max_errors` (counted, not kept).
    more: usize,
    stack: Vec<Frame>,
    owner: Option<NameBuf>,
    default_ttl: Option<u32>,
    last_ttl: Option<u32>,
    /// A record took the default TTL for want of any `$TTL` (warned once).
    default_ttl_warned: bool,
    toks: Vec<Tok>,
    rdata: Vec<u8>,
    scratch: NameBuf,
    /// Records promised by the `$GENERATE`s so far.
    generated: u64,
    /// Bytes of text `$INCLUDE`s and `$GENERATE`s added.
    added_text: u64,
}

/// An error inside one entry: message and column.
struct EntryError {
    line: u32,
    col: u32,
    msg: String,
}

impl EntryError {
    fn at(t: &Tok, msg: impl Into<String>) -> EntryError {
        EntryError {
            line: t.line,
            col: t.col,
            msg: msg.into(),
        }
    }
}

enum Directive {
    Origin,
    Ttl,
    Include,
    Generate,
}

impl<'o> Reader<'o> {
    fn loc(&self, file: u16, line: u32, col: u32) -> Location {
        Location {
            file: self.summary.files[file as usize].clone(),
            line,
            col,
        }
    }

    fn error(&mut self, file: u16, line: u32, col: u32, msg: impl Into<String>) {
        if self.errors.len() >= self.opts.max_errors {
            self.more += 1;
            return;
        }
        let at = self.loc(file, line, col);
        self.errors.push(Diagnostic {
            at,
            msg: msg.into(),
        });
    }

    fn warn(&mut self, file: u16, line: u32, msg: impl Into<String>) {
        if self.summary.warnings.len() >= self.opts.max_warnings {
            self.summary.warnings_dropped += 1;
            return;
        }
        let at = self.loc(file, line, 0);
        self.summary.warnings.push(Diagnostic {
            at,
            msg: msg.into(),
        });
    }

    fn run(&mut self, sink: &mut dyn FnMut(Record<'_>)) {
        let mut toks = std::mem::take(&mut self.toks);
        while let Some(frame) = self.stack.last_mut() {
            let file = frame.file;
            let info = match frame.scanner.next_entry(&mut toks) {
                Ok(Some(info)) => info,
                Ok(None) => {
                    let f = self.stack.pop().expect("frame");
                    if let Some(o) = f.saved_owner {
                        self.owner = o;
                    }
                    if let Some((d, l)) = f.saved_ttls {
                        self.default_ttl = d;
                        self.last_ttl = l;
                    }
                    continue;
                }
                Err(e) => {
                    self.error(file, e.line, e.col, e.msg);
                    if e.fatal {
                        break;
                    }
                    continue;
                }
            };
            if let Err(e) = self.entry(info, &toks, sink) {
                self.error(file, e.line, e.col, e.msg);
            }
        }
        self.toks = toks;
    }

    fn frame(&self) -> &Frame {
        self.stack.last().expect("frame")
    }

    fn entry(
        &mut self,
        info: EntryInfo,
        toks: &[Tok],
        sink: &mut dyn FnMut(Record<'_>),
    ) -> Result<(), EntryError> {
        let first = toks[0];
        let first_text = self.frame().scanner.text(&first);
        if !first.quoted && first_text.first() == Some(&b'$') {
            if info.blank_owner {
                // RFC 1035 §5.1: a line that starts with a blank is a record of the last
                // owner; `$TTL` there would be its type (Knot, NSD and BIND refuse it).
                return Err(EntryError::at(
                    &first,
                    format!(
                        "{} after leading blanks: a directive must start its line",
                        String::from_utf8_lossy(first_text)
                    ),
                ));
            }
            let d = match first_text.to_ascii_uppercase().as_slice() {
                b"$ORIGIN" => Directive::Origin,
                b"$TTL" => Directive::Ttl,
                b"$INCLUDE" => Directive::Include,
                b"$GENERATE" => Directive::Generate,
                _ => {
                    return Err(EntryError::at(
                        &first,
                        format!(
                            "unknown directive {}: expected $ORIGIN, $TTL, $INCLUDE or $GENERATE",
                            String::from_utf8_lossy(first_text)
                        ),
                    ));
                }
            };
            return match d {
                Directive::Origin => self.dir_origin(toks),
                Directive::Ttl => self.dir_ttl(toks),
                Directive::Include => self.dir_include(toks),
                Directive::Generate => self.dir_generate(toks, sink),
            };
        }
        self.record(info, toks, None, sink)
    }

    fn dir_origin(&mut self, toks: &[Tok]) -> Result<(), EntryError> {
        let [_, arg] = toks else {
            return Err(EntryError::at(
                &toks[0],
                "$ORIGIN takes exactly one absolute domain name",
            ));
        };
        let frame = self.stack.last_mut().expect("frame");
        let text = frame.scanner.text(arg);
        if !name_text_ok(text, arg.quoted) {
            return Err(EntryError::at(arg, "bad character in $ORIGIN name"));
        }
        let mut n = NameBuf::new();
        n.parse(text, Some(frame.origin.as_wire()))
            .map_err(|e| EntryError::at(arg, format!("bad $ORIGIN: {e}")))?;
        frame.origin = n;
        Ok(())
    }

    fn dir_ttl(&mut self, toks: &[Tok]) -> Result<(), EntryError> {
        let [_, arg] = toks else {
            return Err(EntryError::at(&toks[0], "$TTL takes exactly one TTL value"));
        };
        let v = self.ttl_value(arg)?;
        self.default_ttl = Some(v);
        Ok(())
    }

    fn ttl_value(&mut self, tok: &Tok) -> Result<u32, EntryError> {
        let text = self.frame().scanner.text(tok);
        let v = parse_ttl(text).map_err(|m| EntryError::at(tok, m))?;
        Ok(self.loaded_ttl(tok, v))
    }

    /// The TTL a record gets for `v` as written at `tok` (0 for one with the top bit set,
    /// with a warning).
    fn loaded_ttl(&mut self, tok: &Tok, v: u32) -> u32 {
        if v > i32::MAX as u32 {
            let file = self.frame().file;
            self.warn(
                file,
                tok.line,
                format!("TTL {v} above 2^31-1: loaded as 0 (RFC 2181 §8)"),
            );
        }
        load_ttl(v)
    }

    /// Counts `n` bytes of text an `$INCLUDE` or a `$GENERATE` adds, within
    /// [`ReadOptions::max_added_text`].
    fn add_text(&mut self, at: &Tok, n: u64) -> Result<(), EntryError> {
        self.added_text = self.added_text.saturating_add(n);
        if self.added_text > self.opts.max_added_text {
            return Err(EntryError::at(
                at,
                format!(
                    "not enough memory: with its $INCLUDEs and $GENERATEs the zone's text passes \
                     {} MiB more than its file, what the memory left can build",
                    self.opts.max_added_text >> 20
                ),
            ));
        }
        Ok(())
    }

    fn dir_include(&mut self, toks: &[Tok]) -> Result<(), EntryError> {
        if !self.opts.allow_include {
            return Err(EntryError::at(&toks[0], "$INCLUDE is not allowed here"));
        }
        if toks.len() < 2 || toks.len() > 3 {
            return Err(EntryError::at(
                &toks[0],
                "$INCLUDE takes a file name and an optional origin",
            ));
        }
        if self.stack.len() > self.opts.max_include_depth {
            return Err(EntryError::at(
                &toks[0],
                format!(
                    "$INCLUDE nested deeper than {} files",
                    self.opts.max_include_depth
                ),
            ));
        }
        let frame = self.frame();
        let raw = frame.scanner.text(&toks[1]);
        let mut fname = Vec::with_capacity(raw.len());
        let mut i = 0;
        while i < raw.len() {
            if raw[i] == b'\\' {
                let (b, used) = name::unescape(&raw[i..])
                    .ok_or_else(|| EntryError::at(&toks[1], "bad escape in file name"))?;
                fname.push(b);
                i += used;
            } else {
                fname.push(raw[i]);
                i += 1;
            }
        }
        use std::os::unix::ffi::OsStrExt;
        let p = Path::new(std::ffi::OsStr::from_bytes(&fname));
        let path = if p.is_absolute() {
            p.to_path_buf()
        } else {
            frame.dir.join(p)
        };
        let mut origin = frame.origin.clone();
        if let Some(o) = toks.get(2) {
            let text = frame.scanner.text(o);
            if !name_text_ok(text, o.quoted) {
                return Err(EntryError::at(o, "bad character in $INCLUDE origin"));
            }
            // A relative origin is relative to the current one (RFC 1035 §5.1, BIND).
            let cur = frame.origin.clone();
            origin
                .parse(text, Some(cur.as_wire()))
                .map_err(|e| EntryError::at(o, format!("bad $INCLUDE origin: {e}")))?;
        }
        // Refuse cycles: a file already open on the stack.
        let canon = std::fs::canonicalize(&path).map_err(|e| {
            EntryError::at(&toks[1], format!("cannot include {}: {e}", path.display()))
        })?;
        for f in &self.stack {
            let open = &self.summary.files[f.file as usize];
            if std::fs::canonicalize(open.as_path()).ok().as_deref() == Some(canon.as_path()) {
                return Err(EntryError::at(
                    &toks[1],
                    format!("$INCLUDE cycle: {} is already being read", path.display()),
                ));
            }
        }
        let (file, meta) = open_regular(&path).map_err(|e| {
            EntryError::at(&toks[1], format!("cannot include {}: {e}", path.display()))
        })?;
        self.add_text(&toks[1], meta.len())?;
        if self.summary.files.len() >= u16::MAX as usize {
            return Err(EntryError::at(&toks[1], "too many included files"));
        }
        self.summary.files.push(Arc::new(path.clone()));
        let idx = (self.summary.files.len() - 1) as u16;
        let dir = path.parent().map(Path::to_path_buf).unwrap_or_default();
        let saved_owner = self.owner.clone();
        self.stack.push(Frame {
            scanner: Scanner::from_reader(AsOpened::new(file, &meta)),
            file: idx,
            origin,
            dir,
            saved_owner: Some(saved_owner),
            saved_ttls: Some((self.default_ttl, self.last_ttl)),
        });
        Ok(())
    }

    fn record(
        &mut self,
        info: EntryInfo,
        toks: &[Tok],
        generated_owner: Option<&[u8]>,
        sink: &mut dyn FnMut(Record<'_>),
    ) -> Result<(), EntryError> {
        let frame = self.stack.last().expect("frame");
        let file = frame.file;
        let mut i = 0;
        // Owner.
        if let Some(o) = generated_owner {
            self.scratch.set_wire(o);
        } else if info.blank_owner {
            match &self.owner {
                Some(o) => self.scratch = o.clone(),
                None => {
                    return Err(EntryError::at(
                        &toks[0],
                        "no owner: the first record must name its owner",
                    ));
                }
            }
        } else {
            let t0 = &toks[0];
            let text = frame.scanner.text(t0);
            if !name_text_ok(text, t0.quoted) {
                return Err(EntryError::at(t0, "bad character in owner name"));
            }
            self.scratch
                .parse(text, Some(frame.origin.as_wire()))
                .map_err(|e| EntryError::at(t0, format!("bad owner name: {e}")))?;
            i = 1;
        }
        // [TTL] [class] in either order.
        let mut ttl: Option<u32> = None;
        let mut class_seen = false;
        for _ in 0..2 {
            let Some(tok) = toks.get(i) else { break };
            let text = frame.scanner.text(tok);
            if tok.quoted {
                break;
            }
            if !class_seen && is_class(text) {
                // IN, or its RFC 3597 spelling CLASS1.
                let is_in = text.eq_ignore_ascii_case(b"IN")
                    || (text.len() > 5
                        && std::str::from_utf8(&text[5..])
                            .ok()
                            .and_then(|d| d.parse::<u16>().ok())
                            == Some(1));
                if !is_in {
                    return Err(EntryError::at(
                        tok,
                        format!(
                            "class {} not supported: only IN is served",
                            String::from_utf8_lossy(text)
                        ),
                    ));
                }
                class_seen = true;
                i += 1;
            } else if ttl.is_none() && text.first().is_some_and(u8::is_ascii_digit) {
                ttl = Some(parse_ttl(text).map_err(|m| EntryError::at(tok, m))?);
                i += 1;
            } else if text.first() == Some(&b'-') {
                return Err(EntryError::at(tok, "negative TTL"));
            } else {
                break;
            }
        }
        let ttl = ttl.map(|v| self.loaded_ttl(&toks[i - 1], v));
        let frame = self.stack.last().expect("frame");
        let Some(type_tok) = toks.get(i) else {
            return Err(EntryError::at(
                toks.last().expect("token"),
                "expected a record type",
            ));
        };
        let type_text = frame.scanner.text(type_tok);
        let rtype = match type_from_text(type_text) {
            Some(v) if !type_tok.quoted => v,
            _ => {
                return Err(EntryError::at(
                    type_tok,
                    format!(
                        "unknown record type {}: expected a type mnemonic or TYPEnnn",
                        String::from_utf8_lossy(type_text)
                    ),
                ));
            }
        };
        if rtype == 0 {
            // Reserved (RFC 6895 §3.1): NSD and BIND refuse it, and a secondary built on
            // BIND's libraries fails the whole transfer on it.
            return Err(EntryError::at(
                type_tok,
                "TYPE0 is reserved and cannot appear in a zone",
            ));
        }
        if rrtype::is_meta(rtype) {
            return Err(EntryError::at(
                type_tok,
                format!(
                    "{} is a meta type and cannot appear in a zone",
                    rrtype::to_text(rtype)
                ),
            ));
        }
        self.rdata.clear();
        let mut fields = Fields::new(&frame.scanner, &toks[i + 1..]);
        // Held to its structure only: a secondary's copy of what its primary serves, and
        // the types whose faults in meaning Knot and NSD load (warned of here).
        let semantic = !self.opts.lenient && !LOADED_AS_KNOT_AND_NSD.contains(&rtype);
        rdata::parse_with(
            rtype,
            &mut fields,
            frame.origin.as_wire(),
            &mut self.rdata,
            semantic,
        )
        .map_err(|e| EntryError {
            line: if e.line > 0 { e.line } else { type_tok.line },
            col: e.col,
            msg: format!("{} RDATA: {}", rrtype::to_text(rtype), e.msg),
        })?;
        if !semantic && let Err(m) = rdata::check_wire(rtype, &self.rdata) {
            let (file, line) = (frame.file, type_tok.line);
            let why = if self.opts.lenient {
                "kept: the primary serves it"
            } else {
                "loaded, as Knot and NSD load it"
            };
            self.warn(file, line, format!("{m} ({why})"));
        }
        if self.rdata.len() > u16::MAX as usize {
            return Err(EntryError::at(type_tok, "RDATA longer than 65535 octets"));
        }
        let explicit = ttl.is_some();
        let ttl = match ttl {
            Some(v) => {
                self.last_ttl = Some(v);
                v
            }
            None => match (self.default_ttl, self.last_ttl) {
                (Some(d), _) => d,
                // No $TTL: the default (3600), as Knot and NSD read such a file, also after
                // an explicit TTL on another record (RFC 1035 §5.1 repeats that one; BIND
                // takes the SOA MINIMUM). Warned once.
                (None, last) => {
                    let v = self.opts.default_ttl;
                    if !self.default_ttl_warned {
                        self.default_ttl_warned = true;
                        let bind = match last {
                            Some(l) if l != v => {
                                format!(" (BIND would repeat the last TTL written, {l})")
                            }
                            _ => String::new(),
                        };
                        self.warn(
                            file,
                            type_tok.line,
                            format!("no TTL given and no $TTL: using the default {v}{bind}"),
                        );
                    }
                    self.last_ttl.get_or_insert(v);
                    v
                }
            },
        };
        if generated_owner.is_none() {
            self.owner = Some(self.scratch.clone());
        }
        self.summary.records += 1;
        sink(Record {
            owner: self.scratch.as_wire(),
            ttl,
            ttl_explicit: explicit,
            rtype,
            rdata: &self.rdata,
            file,
            line: type_tok.line,
        });
        Ok(())
    }

    fn dir_generate(
        &mut self,
        toks: &[Tok],
        sink: &mut dyn FnMut(Record<'_>),
    ) -> Result<(), EntryError> {
        if toks.len() < 5 {
            return Err(EntryError::at(
                &toks[0],
                "$GENERATE takes: range lhs [ttl] [class] type rhs",
            ));
        }
        let range_text = self.frame().scanner.text(&toks[1]).to_vec();
        let (start, stop, step) = parse_range(&range_text).ok_or_else(|| {
            EntryError::at(&toks[1], "bad $GENERATE range: expected START-STOP[/STEP]")
        })?;
        let count = (stop - start) / step + 1;
        if count > self.opts.max_generate {
            return Err(EntryError::at(
                &toks[1],
                format!(
                    "$GENERATE would make {count} records, more than the limit of {}",
                    self.opts.max_generate
                ),
            ));
        }
        // The per-directive bound alone let 1.4 KB of text (40 lines) make 2.6 million
        // records (found by the zone_read fuzzer): the directives of a zone share a budget.
        self.generated += count;
        if self.generated > self.opts.max_generate_total {
            return Err(EntryError::at(
                &toks[1],
                format!(
                    "$GENERATE directives would make more than {} records in all",
                    self.opts.max_generate_total
                ),
            ));
        }
        let frame = self.frame();
        let file = frame.file;
        let texts: Vec<(Vec<u8>, bool, u32, u32)> = toks[2..]
            .iter()
            .map(|t| (frame.scanner.text(t).to_vec(), t.quoted, t.line, t.col))
            .collect();

        let origin = frame.origin.clone();
        // Each record about as long as its template.
        let per: u64 = texts.iter().map(|t| t.0.len() as u64 + 3).sum();
        self.add_text(&toks[1], count.saturating_mul(per))?;
        let mut line = Vec::with_capacity(256);
        let mut v = start;
        loop {
            line.clear();
            for (k, (text, quoted, tl, tc)) in texts.iter().enumerate() {
                if k > 0 {
                    line.push(b' ');
                }
                if *quoted {
                    line.push(b'"');
                }
                expand_template(text, v, &mut line).map_err(|m| EntryError {
                    line: *tl,
                    col: *tc,
                    msg: m.into(),
                })?;
                if *quoted {
                    line.push(b'"');
                }
            }
            line.push(b'\n');
            // Read the expanded entry as one record, owner relative to the current origin.
            let mut sc = Scanner::from_bytes(line.clone());
            let mut etoks = Vec::new();
            let info = match sc.next_entry(&mut etoks) {
                Ok(Some(i)) => i,
                Ok(None) => break,
                Err(e) => {
                    return Err(EntryError {
                        line: toks[0].line,
                        col: e.col,
                        msg: format!("$GENERATE: {}", e.msg),
                    });
                }
            };
            let mut owner = NameBuf::new();
            owner
                .parse(sc.text(&etoks[0]), Some(origin.as_wire()))
                .map_err(|e| EntryError::at(&toks[2], format!("$GENERATE owner: {e}")))?;
            // Re-point token positions at the directive's line for errors.
            for tk in etoks.iter_mut() {
                tk.line = toks[0].line;
            }
            let frame = Frame {
                scanner: sc,
                file,
                origin: origin.clone(),
                dir: PathBuf::new(),
                saved_owner: None,
                saved_ttls: None,
            };
            self.stack.push(frame);
            let r = self.record(info, &etoks[1..], Some(owner.as_wire()), sink);
            self.stack.pop();
            r?;
            if stop - v < step {
                break;
            }
            v += step;
        }
        Ok(())
    }
}

/// Characters Knot and BIND refuse unescaped in a name (quotes open strings).
fn name_text_ok(text: &[u8], quoted: bool) -> bool {
    !quoted && !text.is_empty()
}

fn is_class(text: &[u8]) -> bool {
    matches!(text.len(), 2)
        && (text.eq_ignore_ascii_case(b"IN")
            || text.eq_ignore_ascii_case(b"CH")
            || text.eq_ignore_ascii_case(b"HS")
            || text.eq_ignore_ascii_case(b"CS"))
        || (text.len() > 5
            && text[..5].eq_ignore_ascii_case(b"CLASS")
            && text[5..].iter().all(u8::is_ascii_digit))
}

/// Type from text, with a fast path for the common mnemonics.
fn type_from_text(s: &[u8]) -> Option<u16> {
    let mut up = [0u8; 10];
    if s.len() <= up.len() {
        for (d, c) in up.iter_mut().zip(s) {
            *d = c.to_ascii_uppercase();
        }
        let fast = match &up[..s.len()] {
            b"A" => Some(t::A),
            b"AAAA" => Some(t::AAAA),
            b"NS" => Some(t::NS),
            b"CNAME" => Some(t::CNAME),
            b"MX" => Some(t::MX),
            b"TXT" => Some(t::TXT),
            b"SOA" => Some(t::SOA),
            b"PTR" => Some(t::PTR),
            b"SRV" => Some(t::SRV),
            b"DS" => Some(t::DS),
            b"RRSIG" => Some(t::RRSIG),
            b"NSEC" => Some(t::NSEC),
            b"NSEC3" => Some(t::NSEC3),
            _ => None,
        };
        if fast.is_some() {
            return fast;
        }
    }
    rrtype::from_text(s)
}

fn parse_range(s: &[u8]) -> Option<(u64, u64, u64)> {
    let (range, step) = match s.iter().position(|&c| c == b'/') {
        Some(p) => (&s[..p], parse_u64(&s[p + 1..])?),
        None => (s, 1),
    };
    let dash = range.iter().position(|&c| c == b'-')?;
    let start = parse_u64(&range[..dash])?;
    let stop = parse_u64(&range[dash + 1..])?;
    if step == 0 || stop < start || stop > u32::MAX as u64 {
        return None;
    }
    Some((start, stop, step))
}

/// Expands BIND `$GENERATE` templates: `$`, `${offset[,width[,base]]}`, `\$` and `$$` for a
/// dollar (as BIND 9 reads them).
fn expand_template(text: &[u8], v: u64, out: &mut Vec<u8>) -> Result<(), &'static str> {
    let mut i = 0;
    while i < text.len() {
        let c = text[i];
        if (c == b'\\' || c == b'$') && text.get(i + 1) == Some(&b'$') {
            out.push(b'$');
            i += 2;
            continue;
        }
        if c == b'\\' {
            // Keep other escapes for the name/RDATA reader.
            out.push(c);
            if let Some(&n) = text.get(i + 1) {
                out.push(n);
            }
            i += 2;
            continue;
        }
        if c != b'$' {
            out.push(c);
            i += 1;
            continue;
        }
        i += 1;
        let (mut offset, mut width, mut base) = (0i64, 0usize, b'd');
        if text.get(i) == Some(&b'{') {
            let close = text[i..]
                .iter()
                .position(|&c| c == b'}')
                .ok_or("unclosed ${ in $GENERATE template")?;
            let inner = std::str::from_utf8(&text[i + 1..i + close])
                .map_err(|_| "bad ${...} in $GENERATE template")?;
            let mut parts = inner.split(',');
            if let Some(p) = parts.next() {
                offset = p.trim().parse().map_err(|_| "bad offset in ${...}")?;
            }
            if let Some(p) = parts.next() {
                width = p.trim().parse().map_err(|_| "bad width in ${...}")?;
                if width > 255 {
                    return Err("width in ${...} above 255");
                }
            }
            if let Some(p) = parts.next() {
                let b = p.trim().as_bytes();
                if b.len() != 1 || !b"doxXnN".contains(&b[0]) {
                    return Err("base in ${...} must be one of d o x X n N");
                }
                base = b[0];
            }
            if parts.next().is_some() {
                return Err("too many fields in ${...}");
            }
            i += close + 1;
        }
        // BIND computes in a signed 32-bit int: out of that range is an error; below zero
        // prints signed in decimal and as 32-bit two's complement in the other bases.
        let val = v as i64 + offset;
        if val > i32::MAX as i64 || val < i32::MIN as i64 {
            return Err("$GENERATE value out of range");
        }
        if val < 0 && base == b'd' {
            out.push(b'-');
        }
        let val = if base == b'd' {
            val.unsigned_abs()
        } else {
            val as i32 as u32 as u64
        };
        match base {
            b'n' | b'N' => {
                // Nibble mode (for ip6.arpa): hex digits lowest first, each followed by a dot
                // while digits or width remain; the width counts characters, dots included,
                // as BIND's `nibbles()` counts them.
                let hex: &[u8; 16] = if base == b'n' {
                    b"0123456789abcdef"
                } else {
                    b"0123456789ABCDEF"
                };
                let (mut val, mut width) = (val, width);
                loop {
                    out.push(hex[(val & 0xf) as usize]);
                    val >>= 4;
                    width = width.saturating_sub(1);
                    if width > 0 || val != 0 {
                        out.push(b'.');
                        width = width.saturating_sub(1);
                    }
                    if val == 0 && width == 0 {
                        break;
                    }
                }
            }
            _ => {
                let s = match base {
                    b'o' => format!("{val:0width$o}"),
                    b'x' => format!("{val:0width$x}"),
                    b'X' => format!("{val:0width$X}"),
                    _ => format!("{val:0width$}"),
                };
                out.extend_from_slice(s.as_bytes());
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::name::Name;

    /// (owner, TTL, type, RDATA) of each record read.
    type Read = Vec<(String, u32, u16, Vec<u8>)>;

    fn read_all(text: &str) -> Result<Read, ZoneError> {
        let origin: Name = "example.com.".parse().unwrap();
        let opts = ReadOptions::new(&origin);
        let mut out = Vec::new();
        read_bytes("t.zone", text, &opts, &mut |r| {
            out.push((
                Name::from_wire(r.owner).unwrap().to_string(),
                r.ttl,
                r.rtype,
                r.rdata.to_vec(),
            ))
        })?;
        Ok(out)
    }

    #[test]
    fn owner_ttl_class_inheritance() {
        let r = read_all(
            "$TTL 1h\n@ IN SOA ns hostmaster 1 2 3 4 5\n  NS ns\nns 300 IN A 192.0.2.1\n   IN 60 AAAA ::1\nwww A 192.0.2.2\n",
        )
        .unwrap();
        assert_eq!(r.len(), 5);
        assert_eq!(r[0].0, "example.com.");
        assert_eq!(r[1].0, "example.com.");
        assert_eq!(r[1].1, 3600);
        assert_eq!(r[2].1, 300);
        assert_eq!(r[3].0, "ns.example.com.");
        assert_eq!(r[3].1, 60);
        assert_eq!(r[4].1, 3600);
    }

    #[test]
    fn errors_carry_line_and_go_on() {
        let e = read_all("a A 1.2.3.4\nb BOGUS x\nc CH A 1.2.3.4\nd A 1.2.3.4.5\n").unwrap_err();
        let lines: Vec<u32> = e.errors.iter().map(|d| d.at.line).collect();
        assert_eq!(lines, vec![2, 3, 4]);
        assert!(
            e.errors[0].msg.contains("unknown record type BOGUS"),
            "{}",
            e
        );
        assert!(e.to_string().starts_with("t.zone:2:"));
    }

    #[test]
    fn origin_and_meta() {
        let r = read_all("$ORIGIN sub.example.com.\nx A 1.2.3.4\n$ORIGIN deeper\ny A 1.2.3.4\n")
            .unwrap();
        assert_eq!(r[0].0, "x.sub.example.com.");
        assert_eq!(r[1].0, "y.deeper.sub.example.com.");
        assert!(read_all("a ANY \\# 0\n").is_err());
        assert!(read_all("a TSIG \\# 0\n").is_err());
        assert!(read_all("$BOGUS x\n").is_err());
    }

    #[test]
    fn directives_start_their_line_and_big_ttls_load_as_zero_either_way() {
        // After leading blanks `$TTL` would be a record's type: refused, as Knot, NSD and
        // BIND refuse it.
        let e = read_all("x A 192.0.2.2\n $TTL 300\ny A 192.0.2.3\n").unwrap_err();
        assert!(e.to_string().contains("must start its line"), "{e}");
        // The top bit set, in seconds or with units: 0.
        let r = read_all("$TTL 4000w\nx A 192.0.2.2\ny 2147483648 A 192.0.2.3\n").unwrap();
        assert_eq!((r[0].1, r[1].1), (0, 0));
        assert!(read_all("x 7102w A 192.0.2.2\n").is_err());
    }

    #[test]
    fn generate() {
        let r = read_all("$GENERATE 1-3 host$ A 10.0.0.$\n$GENERATE 0-4/2 ${10,3,x} CNAME x$\n")
            .unwrap();
        let owners: Vec<&str> = r.iter().map(|x| x.0.as_str()).collect();
        assert_eq!(
            owners,
            vec![
                "host1.example.com.",
                "host2.example.com.",
                "host3.example.com.",
                "00a.example.com.",
                "00c.example.com.",
                "00e.example.com."
            ]
        );
        assert_eq!(r[2].3, vec![10, 0, 0, 3]);
        assert!(read_all("$GENERATE 1-1000000 h$ A 10.0.0.1\n").is_err());
        assert!(read_all("$GENERATE 5-1 h$ A 10.0.0.1\n").is_err());
        // Nibble widths count characters, dots included (BIND's reading).
        let r = read_all("$GENERATE 1-1 ${0,7,n} PTR a\\$b\n").unwrap();
        assert_eq!(r[0].0, "1.0.0.0.example.com.");
        let r = read_all("$GENERATE 17-17 ${0,3,n}r PTR a\n").unwrap();
        assert_eq!(r[0].0, "1.1r.example.com.");
        let r = read_all("$GENERATE 255-255 ${0,0,N} PTR a\n").unwrap();
        assert_eq!(r[0].0, "F.F.example.com.");
        // `$$` is a dollar, as `\$` is.
        let r = read_all("$GENERATE 1-1 a$$$ TXT \"x$$\\$$\"\n").unwrap();
        assert_eq!(r[0].0, "a\\$1.example.com.");
        assert_eq!(r[0].3, b"\x04x$$1");
    }

    /// A file appended to while it is read (by its owner: a member's zone) is read no
    /// further than its size when opened, and refused: it was read on without bound, past
    /// the memory reserved for its size.
    #[test]
    fn a_file_that_grows_while_it_is_read_is_refused() {
        use std::io::Write;
        let dir = tempfile::tempdir().unwrap();
        let origin: Name = "example.com.".parse().unwrap();
        let opts = ReadOptions::new(&origin);
        let grow = |path: &Path| {
            let mut f = std::fs::OpenOptions::new().append(true).open(path).unwrap();
            f.write_all(b"late A 10.9.9.9\n").unwrap();
        };
        // Read whole (small) and through the window (big).
        for lines in [10, 20_000] {
            let path = dir.path().join(format!("z{lines}.zone"));
            let text: String = (0..lines).map(|i| format!("h{i} A 10.0.0.1\n")).collect();
            std::fs::write(&path, &text).unwrap();
            let (f, meta) = open(&path).unwrap();
            grow(&path);
            let e = read_opened(&path, f, &meta, &opts, &mut |_| {}).unwrap_err();
            assert!(e.to_string().contains("grew while it was read"), "{e}");
            // At its size, it reads.
            let (f, meta) = open(&path).unwrap();
            let mut n = 0;
            read_opened(&path, f, &meta, &opts, &mut |_| n += 1).unwrap();
            assert_eq!(n, lines + 1);
        }
        // An included file that grows once it is open.
        let inc = dir.path().join("inc.zone");
        std::fs::write(&inc, "x A 10.0.0.2\n").unwrap();
        let main = dir.path().join("main.zone");
        std::fs::write(&main, "$INCLUDE inc.zone\ny A 10.0.0.3\n").unwrap();
        let mut grown = false;
        let e = read_file(&main, &opts, &mut |_| {
            if !grown {
                grow(&inc);
                grown = true;
            }
        });
        let e = e.unwrap_err();
        assert!(e.to_string().contains("grew while it was read"), "{e}");
    }

    /// A file cut while it is read (truncated in place) is refused: it ended early and was
    /// read as a shorter zone, its last names answered NXDOMAIN.
    #[test]
    fn a_file_that_shrinks_while_it_is_read_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let origin: Name = "example.com.".parse().unwrap();
        let opts = ReadOptions::new(&origin);
        for lines in [10, 20_000] {
            let path = dir.path().join(format!("z{lines}.zone"));
            let text: String = (0..lines).map(|i| format!("h{i} A 10.0.0.1\n")).collect();
            std::fs::write(&path, &text).unwrap();
            let (f, meta) = open(&path).unwrap();
            // Cut at a line's end: what is left parses.
            let cut = text.len() / 2;
            let cut = text[..cut].rfind('\n').unwrap() + 1;
            std::fs::OpenOptions::new()
                .write(true)
                .open(&path)
                .unwrap()
                .set_len(cut as u64)
                .unwrap();
            let e = read_opened(&path, f, &meta, &opts, &mut |_| {}).unwrap_err();
            assert!(
                e.to_string().contains("shrank while it was read"),
                "{lines}: {e}"
            );
            // Rewritten in place to the same size: refused too.
            std::fs::write(&path, &text).unwrap();
            let (f, meta) = open(&path).unwrap();
            std::thread::sleep(std::time::Duration::from_millis(10));
            std::fs::write(&path, text.replace("10.0.0.1", "10.0.0.2")).unwrap();
            let e = read_opened(&path, f, &meta, &opts, &mut |_| {}).unwrap_err();
            assert!(
                e.to_string().contains("written to while it was read"),
                "{lines}: {e}"
            );
        }
    }

    #[test]
    fn include_relative_depth_and_cycles() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join("sub")).unwrap();
        std::fs::write(
            dir.path().join("main.zone"),
            "a A 1.1.1.1\n$INCLUDE sub/inc.zone other.example.com.\nb A 2.2.2.2\n  A 3.3.3.3\n",
        )
        .unwrap();
        std::fs::write(dir.path().join("sub/inc.zone"), "x A 9.9.9.9\n").unwrap();
        let origin: Name = "example.com.".parse().unwrap();
        let opts = ReadOptions::new(&origin);
        let mut owners = Vec::new();
        read_file(&dir.path().join("main.zone"), &opts, &mut |r| {
            owners.push(Name::from_wire(r.owner).unwrap().to_string())
        })
        .unwrap();
        assert_eq!(
            owners,
            vec![
                "a.example.com.",
                "x.other.example.com.",
                "b.example.com.",
                "b.example.com."
            ]
        );
        // A cycle.
        std::fs::write(dir.path().join("loop.zone"), "$INCLUDE loop.zone\n").unwrap();
        let e = read_file(&dir.path().join("loop.zone"), &opts, &mut |_| {}).unwrap_err();
        assert!(e.to_string().contains("cycle"), "{e}");
        // Including a directory.
        std::fs::write(dir.path().join("d.zone"), "$INCLUDE sub\n").unwrap();
        let e = read_file(&dir.path().join("d.zone"), &opts, &mut |_| {}).unwrap_err();
        assert!(e.to_string().contains("directory"), "{e}");
        // Disabled.
        let mut no = opts.clone();
        no.allow_include = false;
        assert!(read_file(&dir.path().join("main.zone"), &no, &mut |_| {}).is_err());
    }
}
