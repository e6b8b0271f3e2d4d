//! `[events]`, the same section in both daemons: where aggregates go (JSON lines to stdout, a
//! file or a Unix socket; ClickHouse), and the aggregator's bounds.
//!
//! ```toml
//! [events]                       # defaults shown
//! output = "none"                # or a list: ["file:events.jsonl", "unix:/run/vector.sock"]
//!                                # none | stdout | file:PATH | unix:PATH | unixgram:PATH
//! interval_secs = 10             # seconds between flushes
//! node = "edge-1"                # written into every event (default: none)
//! top_k = 1024                   # heavy-hitter counters per recording thread
//! top_n = 20                     # source prefixes listed per event
//! v4_prefix = 24                 # sources are aggregated to these prefix lengths
//! v6_prefix = 56
//! max_recorders = 64             # shards; further recording threads share them
//! max_totals = 1024              # (tenant, action) totals per shard
//! queue_batches = 16             # flushes queued per output before they are dropped (counted)
//! connection_tenant = 0          # tenant of blocks seen before the site or zone is known
//! # [events.clickhouse] ...      # the aggregates into ClickHouse too
//! ```
//!
//! Older spellings still load, each with a warning naming the new key: dnsd's `file`,
//! `socket`, `stdout` and `interval`, and http-front's `aggregator = { … }` table.

use std::io;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Deserialize;
use serde::de::{Deserializer, Error as _};

use super::{
    AggregatorConfig, ClickHouseConfig, JsonLines, Sink, SinkWriter, UnixDatagramSink,
    UnixStreamSink,
};

/// Where a stream of JSON lines goes.
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub enum Output {
    /// Nowhere.
    #[default]
    None,
    /// Standard output.
    Stdout,
    /// Appended to a file.
    File(PathBuf),
    /// A Unix stream socket (Vector's `socket` source, `mode = "unix"`).
    Unix(PathBuf),
    /// A Unix datagram socket, one record per datagram.
    UnixGram(PathBuf),
}

impl Output {
    /// Parses `none`, `stdout`, `file:PATH`, `unix:PATH` or `unixgram:PATH`.
    pub fn parse(s: &str) -> Result<Output, String> {
        Ok(match s {
            "none" | "" => Output::None,
            "stdout" => Output::Stdout,
            _ => match s.split_once(':') {
                Some(("file", p)) if !p.is_empty() => Output::File(p.into()),
                Some(("unix", p)) if !p.is_empty() => Output::Unix(p.into()),
                Some(("unixgram", p)) if !p.is_empty() => Output::UnixGram(p.into()),
                _ => {
                    return Err(format!(
                        "{s:?}: expected \"none\", \"stdout\", \"file:PATH\", \"unix:PATH\" or \"unixgram:PATH\""
                    ));
                }
            },
        })
    }

    /// The same output with a relative path taken from `dir`.
    pub fn resolve(self, dir: &Path) -> Output {
        let abs = |p: PathBuf| if p.is_relative() { dir.join(p) } else { p };
        match self {
            Output::File(p) => Output::File(abs(p)),
            Output::Unix(p) => Output::Unix(abs(p)),
            Output::UnixGram(p) => Output::UnixGram(abs(p)),
            o => o,
        }
    }

    /// A JSON-lines sink for records of type `R` (`None` for `none`).
    pub fn sink<R: serde::Serialize + 'static>(&self) -> io::Result<Option<Box<dyn Sink<R>>>> {
        Ok(Some(match self {
            Output::None => return Ok(None),
            Output::Stdout => Box::new(JsonLines::stdout()),
            Output::File(p) => Box::new(JsonLines::file(p)?),
            Output::Unix(p) => Box::new(UnixStreamSink::new(p, Duration::from_secs(2))),
            Output::UnixGram(p) => Box::new(UnixDatagramSink::new(p, Duration::from_secs(2))?),
        }))
    }
}

impl<'de> Deserialize<'de> for Output {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        Output::parse(&s).map_err(D::Error::custom)
    }
}

/// One output, or a list of them.
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct Outputs(pub Vec<Output>);

impl<'de> Deserialize<'de> for Outputs {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum OneOrMany {
            One(Output),
            Many(Vec<Output>),
        }
        Ok(match OneOrMany::deserialize(d)? {
            OneOrMany::One(o) => Outputs(vec![o]),
            OneOrMany::Many(v) => Outputs(v),
        })
    }
}

impl Outputs {
    /// The outputs that write somewhere.
    pub fn active(&self) -> impl Iterator<Item = &Output> {
        self.0.iter().filter(|o| **o != Output::None)
    }
}

/// `[events]`; see the module documentation.
#[derive(Clone, Debug, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct EventsConfig {
    /// Where flushed aggregates go.
    pub output: Outputs,
    /// Seconds between flushes.
    pub interval_secs: u64,
    /// Node id written into events.
    pub node: Option<String>,
    /// Heavy-hitter counters per shard.
    pub top_k: usize,
    /// Source prefixes listed per event.
    pub top_n: usize,
    /// IPv4 sources are aggregated to this prefix length.
    pub v4_prefix: u8,
    /// IPv6 sources are aggregated to this prefix length.
    pub v6_prefix: u8,
    /// Most shards.
    pub max_recorders: usize,
    /// Most (tenant, action) totals per shard.
    pub max_totals: usize,
    /// Flushes queued per output.
    pub queue_batches: usize,
    /// Tenant of blocks seen before a site or zone is known (a connection or datagram from a
    /// blocked source).
    pub connection_tenant: u32,
    /// `[events.clickhouse]`.
    pub clickhouse: Option<ClickHouseConfig>,
    /// Old spelling (dnsd): `output = "file:PATH"`.
    file: Option<PathBuf>,
    /// Old spelling (dnsd): `output = "unix:PATH"`.
    socket: Option<PathBuf>,
    /// Old spelling (dnsd): `output = "stdout"`.
    stdout: Option<bool>,
    /// Old spelling (dnsd): `interval_secs`.
    interval: Option<u64>,
    /// Old spelling (http-front): the aggregator's keys directly in `[events]`.
    aggregator: Option<AggregatorConfig>,
}

impl Default for EventsConfig {
    fn default() -> Self {
        let a = AggregatorConfig::default();
        EventsConfig {
            output: Outputs::default(),
            interval_secs: a.interval_secs,
            node: a.node,
            top_k: a.top_k,
            top_n: a.top_n,
            v4_prefix: a.v4_prefix,
            v6_prefix: a.v6_prefix,
            max_recorders: a.max_recorders,
            max_totals: a.max_totals,
            queue_batches: a.queue_batches,
            connection_tenant: 0,
            clickhouse: None,
            file: None,
            socket: None,
            stdout: None,
            interval: None,
            aggregator: None,
        }
    }
}

impl EventsConfig {
    /// Folds old spellings into the new keys and resolves relative paths against `dir`;
    /// returns one warning per old key found.
    pub fn upgrade(&mut self, dir: &Path) -> Vec<String> {
        let mut warn = Vec::new();
        if let Some(p) = self.file.take() {
            warn.push(format!(
                "events.file is deprecated: write events.output = [\"file:{}\"]",
                p.display()
            ));
            self.output.0.push(Output::File(p));
        }
        if let Some(p) = self.socket.take() {
            warn.push(format!(
                "events.socket is deprecated: write events.output = [\"unix:{}\"]",
                p.display()
            ));
            self.output.0.push(Output::Unix(p));
        }
        if let Some(on) = self.stdout.take() {
            warn.push("events.stdout is deprecated: write events.output = [\"stdout\"]".into());
            if on {
                self.output.0.push(Output::Stdout);
            }
        }
        if let Some(i) = self.interval.take() {
            warn.push("events.interval is deprecated: write events.interval_secs".into());
            self.interval_secs = i;
        }
        if let Some(a) = self.aggregator.take() {
            warn.push("events.aggregator is deprecated: write its keys in [events] itself".into());
            self.interval_secs = a.interval_secs;
            self.node = a.node.or(self.node.take());
            self.top_k = a.top_k;
            self.top_n = a.top_n;
            self.v4_prefix = a.v4_prefix;
            self.v6_prefix = a.v6_prefix;
            self.max_recorders = a.max_recorders;
            self.max_totals = a.max_totals;
            self.queue_batches = a.queue_batches;
        }
        let outs = std::mem::take(&mut self.output.0);
        self.output.0 = outs.into_iter().map(|o| o.resolve(dir)).collect();
        warn
    }

    /// Checks the values; `Err((key, message))`.
    pub fn check(&self) -> Result<(), (String, String)> {
        let e = |k: &str, m: &str| Err((format!("events.{k}"), m.to_string()));
        if self.interval_secs == 0 || self.interval_secs > 86_400 {
            return e("interval_secs", "must be 1 to 86400 seconds");
        }
        if self.top_k == 0 || self.top_k > 1 << 20 {
            return e("top_k", "must be 1 to 1048576");
        }
        if self.top_n == 0 || self.top_n > self.top_k {
            return e("top_n", "must be 1 to top_k");
        }
        if self.v4_prefix > 32 {
            return e("v4_prefix", "must be at most 32");
        }
        if self.v6_prefix > 128 {
            return e("v6_prefix", "must be at most 128");
        }
        if self.max_recorders == 0 || self.max_recorders > 4096 {
            return e("max_recorders", "must be 1 to 4096");
        }
        if self.max_totals == 0 || self.max_totals > 1 << 20 {
            return e("max_totals", "must be 1 to 1048576");
        }
        if self.queue_batches == 0 || self.queue_batches > 1 << 16 {
            return e("queue_batches", "must be 1 to 65536");
        }
        if self.connection_tenant > crate::rules::MAX_TENANT_ID {
            return e("connection_tenant", "is above the largest tenant id");
        }
        if let Some(c) = &self.clickhouse {
            c.validate()
                .map_err(|m| ("events.clickhouse".to_string(), m))?;
        }
        Ok(())
    }

    /// The aggregator's settings.
    pub fn aggregator(&self) -> AggregatorConfig {
        AggregatorConfig {
            interval_secs: self.interval_secs,
            top_k: self.top_k,
            top_n: self.top_n,
            max_recorders: self.max_recorders,
            max_totals: self.max_totals,
            v4_prefix: self.v4_prefix,
            v6_prefix: self.v6_prefix,
            node: self.node.clone(),
            queue_batches: self.queue_batches,
        }
    }

    /// A writer thread for each JSON-lines output. An output that cannot be opened is an
    /// error naming it.
    pub fn writers(&self) -> io::Result<Vec<SinkWriter>> {
        let mut out = Vec::new();
        for o in self.output.active() {
            if let Some(s) = o.sink()? {
                out.push(SinkWriter::spawn(s, self.queue_batches)?);
            }
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(t: &str) -> EventsConfig {
        #[derive(Deserialize)]
        #[serde(deny_unknown_fields)]
        struct F {
            #[serde(default)]
            events: EventsConfig,
        }
        toml::from_str::<F>(t).unwrap().events
    }

    #[test]
    fn one_output_or_a_list() {
        let e = parse("[events]\noutput = \"file:a.jsonl\"\n");
        assert_eq!(e.output.0, vec![Output::File("a.jsonl".into())]);
        let e = parse("[events]\noutput = [\"stdout\", \"unix:/run/v.sock\"]\n");
        assert_eq!(
            e.output.0,
            vec![Output::Stdout, Output::Unix("/run/v.sock".into())]
        );
        assert!(e.check().is_ok());
    }

    #[test]
    fn old_spellings_load_with_a_warning() {
        let mut e = parse("[events]\nfile = \"ev.jsonl\"\nstdout = true\ninterval = 3\n");
        let w = e.upgrade(Path::new("/etc/palisade"));
        assert_eq!(w.len(), 3, "{w:?}");
        assert_eq!(
            e.output.0,
            vec![
                Output::File("/etc/palisade/ev.jsonl".into()),
                Output::Stdout
            ]
        );
        assert_eq!(e.interval_secs, 3);
        let mut e = parse(
            "[events]\noutput = \"stdout\"\naggregator = { interval_secs = 2, top_k = 64, top_n = 5 }\n",
        );
        let w = e.upgrade(Path::new("."));
        assert_eq!(w.len(), 1);
        assert_eq!((e.interval_secs, e.top_k, e.top_n), (2, 64, 5));
    }

    #[test]
    fn bad_values_name_their_key() {
        let e = parse("[events]\ntop_n = 5000\n");
        assert_eq!(e.check().unwrap_err().0, "events.top_n");
    }
}
