//! Printing a compiled zone back as master-file text.

use std::fmt::Write;

use crate::name;
use crate::rdata;
use crate::rrtype;
use crate::zone::Zone;

/// Writes one record in master-file form: `owner TTL IN TYPE RDATA`.
pub fn write_record(out: &mut String, owner: &[u8], rtype: u16, ttl: u32, rdata: &[u8]) {
    let _ = name::write_presentation(owner, out);
    let _ = write!(out, "\t{ttl}\tIN\t{}\t", rrtype::to_text(rtype));
    rdata::present(rtype, rdata, out);
    out.push('\n');
}

/// Where [`write_file`] writes before renaming: `path` with `.tmp` added, or — where that
/// would pass the longest file name — a name made of `path`'s own shortened one.
fn temp_path(path: &std::path::Path) -> std::path::PathBuf {
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy())
        .unwrap_or_default();
    if name.len() + 4 <= crate::name::FILE_NAME_MAX {
        let mut tmp = path.as_os_str().to_owned();
        tmp.push(".tmp");
        return tmp.into();
    }
    let short = crate::name::fit_stem(&name, 4);
    path.with_file_name(format!("{short}.tmp"))
}

/// Writes the zone to `path` as master-file text (`header` as a comment line first): to a
/// temporary file, synced, then renamed, so a reader never sees half a zone.
pub fn write_file(zone: &Zone, path: &std::path::Path, header: &str) -> std::io::Result<()> {
    use std::io::Write as _;
    if let Some(dir) = path.parent()
        && !dir.as_os_str().is_empty()
    {
        std::fs::create_dir_all(dir)?;
    }
    let tmp = temp_path(path);
    let written = (|| {
        let f = std::fs::File::create(&tmp)?;
        let mut w = std::io::BufWriter::with_capacity(1 << 16, f);
        let mut line = String::with_capacity(512);
        writeln!(w, "; {header}")?;
        for (owner, rtype, ttl, rdata) in zone.records() {
            line.clear();
            write_record(&mut line, owner, rtype, ttl, rdata);
            w.write_all(line.as_bytes())?;
        }
        w.flush()?;
        w.get_ref().sync_all()?;
        std::fs::rename(&tmp, path)
    })();
    // A write cut short (a full disk) leaves no temporary file holding the space.
    if written.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    written
}

/// The whole zone as master-file text (absolute names, canonical order, SOA first).
pub fn zone_to_text(zone: &Zone) -> String {
    let mut out = String::with_capacity(zone.record_count() * 48);
    for (owner, rtype, ttl, rdata) in zone.records() {
        write_record(&mut out, owner, rtype, ttl, rdata);
    }
    out
}
