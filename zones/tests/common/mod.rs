//! Helpers shared by the integration tests.

#![allow(dead_code)]

use std::path::PathBuf;

/// The external test corpora (`/work/shared/corpora` in this workplace): `$PALISADE_CORPORA`
/// if set, else `shared/corpora` beside the workspace root.
///
/// Returns `None`, after saying so loudly on stderr, when the directory is absent: tests
/// then return early, so that a clone without the corpora still passes.
pub fn corpora_dir() -> Option<PathBuf> {
    let dir = match std::env::var_os("PALISADE_CORPORA") {
        Some(d) => PathBuf::from(d),
        None => PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../shared/corpora"),
    };
    if dir.is_dir() {
        Some(dir)
    } else {
        eprintln!(
            "SKIPPED: corpora not found at {}; set PALISADE_CORPORA",
            dir.display()
        );
        None
    }
}

/// Undoes the TSV escaping used by the corpora (`\\` backslash, `\t` tab, `\n` newline).
pub fn tsv_unescape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut it = s.chars();
    while let Some(c) = it.next() {
        if c != '\\' {
            out.push(c);
            continue;
        }
        match it.next() {
            Some('\\') => out.push('\\'),
            Some('t') => out.push('\t'),
            Some('n') => out.push('\n'),
            Some(o) => {
                out.push('\\');
                out.push(o);
            }
            None => out.push('\\'),
        }
    }
    out
}

/// Lower-case hex of some octets.
pub fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}
