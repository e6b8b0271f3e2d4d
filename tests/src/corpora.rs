//! The shared test corpora (`../shared/corpora` beside the workspace): the one helper that
//! finds them.

use std::path::PathBuf;

/// The corpora directory: `$PALISADE_CORPORA` if set, else `shared/corpora` beside the
/// workspace root. `None`, after a loud `SKIPPED` line, when it is absent: tests then return
/// early, so that a clone without the corpora still passes.
pub fn corpora_dir() -> Option<PathBuf> {
    let dir = match std::env::var_os("PALISADE_CORPORA") {
        Some(d) => PathBuf::from(d),
        None => PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../shared/corpora"),
    };
    if dir.is_dir() {
        Some(dir)
    } else {
        crate::announce_skip(&format!(
            "corpora not found at {}; set PALISADE_CORPORA",
            dir.display()
        ));
        None
    }
}
