//! How the daemons log: `[log] format` ("text" or "json": one JSON object per line, tracing's
//! JSON layer) and `filter` (RUST_LOG syntax); `RUST_LOG` overrides the file's filter and a
//! `--log-format` flag the file's format. And [`Limit`]: log lines an attacker can cause are
//! rate-limited per call site, with the count of those suppressed, so that a flood never
//! becomes a log flood.

use std::sync::atomic::{AtomicU64, Ordering};

use serde::Deserialize;

/// `[log]`.
#[derive(Debug, Clone, Default, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct LogConfig {
    /// "text" (default) or "json".
    #[serde(default)]
    pub format: LogFormat,
    /// Which lines, in RUST_LOG syntax (default "info"); the RUST_LOG variable overrides it.
    #[serde(default)]
    pub filter: Option<String>,
}

/// The shape of a log line.
#[derive(Debug, Clone, Copy, Default, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum LogFormat {
    /// Human-readable lines.
    #[default]
    Text,
    /// One JSON object per line (timestamp, level, target, fields).
    Json,
}

impl std::str::FromStr for LogFormat {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "text" => Ok(LogFormat::Text),
            "json" => Ok(LogFormat::Json),
            _ => Err(format!("{s:?}: expected \"text\" or \"json\"")),
        }
    }
}

impl LogConfig {
    /// Checks `filter` as [`init`] reads it (a reload applies no logger, but must refuse
    /// what the next start would).
    pub fn validate(&self) -> Result<(), String> {
        if let Some(f) = &self.filter {
            tracing_subscriber::EnvFilter::try_new(f).map_err(|e| format!("{f:?}: {e}"))?;
        }
        Ok(())
    }
}

/// Installs the process's logger: `format` (the flag's) over the config's, `RUST_LOG` over
/// the config's filter (which, unless it names `h2`, keeps the HTTP/2 library's per-connection
/// warnings out). An invalid filter is an error naming where it came from.
pub fn init(cfg: &LogConfig, format: Option<LogFormat>) -> Result<(), String> {
    use tracing_subscriber::EnvFilter;
    let filter = match std::env::var("RUST_LOG") {
        Ok(v) if !v.trim().is_empty() => {
            EnvFilter::try_new(&v).map_err(|e| format!("RUST_LOG={v:?}: {e}"))?
        }
        _ => {
            let f = cfg.filter.as_deref().unwrap_or("info");
            let filter = EnvFilter::try_new(f).map_err(|e| format!("[log] filter = {f:?}: {e}"))?;
            // The HTTP/2 library warns once per connection it ends for abuse (reset floods,
            // CONTINUATION floods), unthrottled: a flood of them would be a flood of lines.
            // Those ends are counted in metrics; its errors still show.
            if f.contains("h2") {
                filter
            } else {
                filter.add_directive("h2=error".parse().expect("a valid directive"))
            }
        }
    };
    let ansi = std::io::IsTerminal::is_terminal(&std::io::stderr());
    let b = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    let r = match format.unwrap_or(cfg.format) {
        LogFormat::Text => b.with_ansi(ansi).try_init(),
        LogFormat::Json => b.json().with_current_span(false).try_init(),
    };
    r.map_err(|e| format!("logger: {e}"))?;
    install_panic_hook();
    Ok(())
}

/// Panics are reported whole (the standard report, with its backtrace when asked, and a log
/// line) once a second at most; past that, one line each on stderr, never hidden: a
/// library's panic on what a peer sends (redis-rs on an error reply to MULTI) wrote a 60-line
/// backtrace for each, past every rate limit, 446 lines in 10 s.
fn install_panic_hook() {
    static LIMIT: Limit = Limit::new(1);
    let whole = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| match LIMIT.allow() {
        Some(suppressed) => {
            whole(info);
            let thread = std::thread::current();
            tracing::error!(
                suppressed,
                thread = thread.name().unwrap_or("?"),
                "panic: {info}"
            );
        }
        None => {
            use std::io::Write as _;
            let _ = writeln!(
                std::io::stderr(),
                "panic (more than one a second: backtrace left out): {}",
                info.to_string().replace('\n', " ")
            );
        }
    }));
}

/// Log lines suppressed by every [`Limit`] of the process (for metrics).
static SUPPRESSED: AtomicU64 = AtomicU64::new(0);

/// Log lines suppressed so far by every [`Limit`].
pub fn suppressed_total() -> u64 {
    SUPPRESSED.load(Ordering::Relaxed)
}

/// A per-call-site bound on log lines: at most `per_second` a second; the rest are counted and
/// the next line that passes carries how many were suppressed. Lock-free (one atomic word).
#[derive(Debug)]
pub struct Limit {
    per_second: u32,
    /// Unix second (upper 32 bits) and lines let through in it (lower 32).
    window: AtomicU64,
    suppressed: AtomicU64,
}

impl Limit {
    /// A limit of `per_second` lines a second (as a `static` at the call site).
    pub const fn new(per_second: u32) -> Limit {
        Limit {
            per_second,
            window: AtomicU64::new(0),
            suppressed: AtomicU64::new(0),
        }
    }

    /// `Some(suppressed since the last line)` when a line may be logged now, else `None`
    /// (the line is counted as suppressed).
    pub fn allow(&self) -> Option<u64> {
        self.allow_at(crate::clock::unix_ms() / 1000)
    }

    /// [`Limit::allow`] at unix second `now`.
    pub fn allow_at(&self, now: u64) -> Option<u64> {
        let now = now as u32;
        let mut cur = self.window.load(Ordering::Relaxed);
        loop {
            let (sec, n) = ((cur >> 32) as u32, cur as u32);
            let next = if sec != now {
                (u64::from(now) << 32) | 1
            } else if n < self.per_second {
                cur + 1
            } else {
                self.suppressed.fetch_add(1, Ordering::Relaxed);
                SUPPRESSED.fetch_add(1, Ordering::Relaxed);
                return None;
            };
            match self
                .window
                .compare_exchange_weak(cur, next, Ordering::Relaxed, Ordering::Relaxed)
            {
                Ok(_) => return Some(self.suppressed.swap(0, Ordering::Relaxed)),
                Err(v) => cur = v,
            }
        }
    }
}

#[doc(hidden)]
pub use tracing as __tracing;

/// Logs with tracing's `$level!` at most `$per_second` lines a second from this call site,
/// with a `suppressed` field counting the lines held back since the last one (for log lines an
/// attacker can cause: a source blocked, a flood seen, an accept failing).
#[macro_export]
macro_rules! limited {
    ($per_second:expr, $level:ident!($($arg:tt)*)) => {{
        static LIMIT: $crate::logging::Limit = $crate::logging::Limit::new($per_second);
        if let Some(suppressed) = LIMIT.allow() {
            $crate::logging::__tracing::$level!(suppressed, $($arg)*);
        }
    }};
}

/// The suppressed-lines counter for `/metrics` and `ctl stats`.
pub struct LogMetrics;

impl crate::metrics::Source for LogMetrics {
    fn collect(&self, out: &mut crate::metrics::Samples) {
        out.counter(
            "log.suppressed",
            "palisade_log_lines_suppressed_total",
            "",
            "Log lines an attacker could cause that the per-site rate limit held back.",
            suppressed_total(),
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_limit_lets_its_rate_through_and_counts_the_rest() {
        let l = Limit::new(3);
        let before = suppressed_total();
        let got: Vec<Option<u64>> = (0..10).map(|_| l.allow_at(100)).collect();
        assert_eq!(&got[..3], &[Some(0), Some(0), Some(0)]);
        assert!(got[3..].iter().all(Option::is_none));
        // The next second: the first line says how many were suppressed.
        assert_eq!(l.allow_at(101), Some(7));
        assert_eq!(l.allow_at(101), Some(0));
        assert!(suppressed_total() >= before + 7);
    }

    #[test]
    fn formats_and_filters_are_checked() {
        assert_eq!("json".parse::<LogFormat>(), Ok(LogFormat::Json));
        assert!("xml".parse::<LogFormat>().is_err());
        let c: LogConfig = toml::from_str("format = \"json\"\nfilter = \"dnsd=debug\"").unwrap();
        assert_eq!(c.format, LogFormat::Json);
        assert!(toml::from_str::<LogConfig>("format = \"xml\"").is_err());
        assert!(toml::from_str::<LogConfig>("level = \"info\"").is_err());
    }
}
