//! Why a ClickHouse statement did not run.

use std::io;

/// Why a statement did not run.
#[derive(Debug, thiserror::Error)]
pub enum ClickHouseError {
    /// The configuration cannot be used.
    #[error("clickhouse config: {0}")]
    Config(String),
    /// The server could not be reached or did not answer in time.
    #[error("cannot reach ClickHouse: {0}")]
    Io(#[from] io::Error),
    /// The server answered with an error.
    #[error("ClickHouse answered HTTP {status} (code {code}): {message}")]
    Server {
        /// HTTP status.
        status: u16,
        /// ClickHouse error code (0 when none was given).
        code: u32,
        /// The error text.
        message: String,
    },
}

/// The ClickHouse error code in an error body (`Code: 131, e.displayText() = …` on 18.16, `Code: 131. DB::Exception: …` later).
pub(super) fn exception_code(body: &[u8]) -> Option<u32> {
    let at = body.windows(6).position(|w| w == b"Code: ")? + 6;
    let digits: Vec<u8> = body[at..]
        .iter()
        .take_while(|b| b.is_ascii_digit())
        .copied()
        .collect();
    std::str::from_utf8(&digits).ok()?.parse().ok()
}
