//! Errors of rules loading: every one names the file, and the line and column when known.

use std::path::{Path, PathBuf};

/// Why a rules file (or a file it references) was refused.
#[derive(Debug, thiserror::Error)]
pub enum RulesError {
    /// The file could not be read.
    #[error("{}: {source}", path.display())]
    Io {
        /// The file.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
    /// The file was read but its content is wrong at this place.
    #[error("{}:{line}:{col}: {message}", path.display())]
    At {
        /// The file.
        path: PathBuf,
        /// 1-based line.
        line: usize,
        /// 1-based column (in characters).
        col: usize,
        /// What is wrong.
        message: String,
    },
}

impl RulesError {
    /// An error at byte `offset` of `text`, read from `path`.
    pub(crate) fn at_offset(
        path: &Path,
        text: &str,
        offset: usize,
        message: impl Into<String>,
    ) -> Self {
        let (line, col) = line_col(text, offset);
        RulesError::At {
            path: path.to_path_buf(),
            line,
            col,
            message: message.into(),
        }
    }

    /// An error at a known line (column 1).
    pub(crate) fn at_line(path: &Path, line: usize, message: impl Into<String>) -> Self {
        RulesError::At {
            path: path.to_path_buf(),
            line,
            col: 1,
            message: message.into(),
        }
    }

    /// An error reading `path`.
    pub(crate) fn io(path: &Path, source: std::io::Error) -> Self {
        RulesError::Io {
            path: path.to_path_buf(),
            source,
        }
    }

    /// The line the error points at, when it points at one.
    pub fn line(&self) -> Option<usize> {
        match self {
            RulesError::At { line, .. } => Some(*line),
            RulesError::Io { .. } => None,
        }
    }
}

pub(crate) use crate::toml_pos::line_col;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn line_col_counts_from_one() {
        let t = "ab\ncdé\nf";
        assert_eq!(line_col(t, 0), (1, 1));
        assert_eq!(line_col(t, 3), (2, 1));
        assert_eq!(line_col(t, 7), (2, 4));
        assert_eq!(line_col(t, 8), (3, 1));
        assert_eq!(line_col(t, 9), (3, 2));
        assert_eq!(line_col(t, 999), (3, 2));
    }

    #[test]
    fn display_is_file_line_col() {
        let e = RulesError::at_offset(Path::new("r.toml"), "x\ny = 1", 2, "bad");
        assert_eq!(e.to_string(), "r.toml:2:1: bad");
        assert_eq!(e.line(), Some(2));
    }
}
