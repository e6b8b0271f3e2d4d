//! Counters read by name (`dnsd ctl stats`, Prometheus text): a name that is absent fails the
//! test, listing the names there are, instead of reading as 0.
//!
//! - [`Counters`]: one snapshot of `name<TAB>value` lines; [`Counters::get`] (or indexing)
//!   panics for a name that is not there. [`crate::servers::Dnsd::stats`] returns one and
//!   [`crate::servers::Dnsd::stat`] reads one counter now.
//! - [`prometheus_series`] and [`prometheus_sum`]: the series of a Prometheus text body.

use std::collections::BTreeMap;

/// Prefixes of the counters dnsd lists only once they are nonzero (by query type and by
/// rcode): the only names [`Counters::get_or_zero`] accepts.
pub const LISTED_ONCE_NONZERO: &[&str] = &["queries.qtype.", "responses.rcode."];

/// One snapshot of counters by name; reading a name that is absent fails the test.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct Counters {
    values: BTreeMap<String, u64>,
}

impl std::fmt::Debug for Counters {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.values.fmt(f)
    }
}

impl Counters {
    /// The counters in `name<TAB>value` lines (the text of `dnsd ctl stats`); other lines
    /// (more fields, a value that is not a number) are skipped.
    pub fn parse(text: &str) -> Counters {
        let values = text
            .lines()
            .filter_map(|l| {
                let mut f = l.split('\t');
                let (k, v) = (f.next()?, f.next()?);
                if f.next().is_some() {
                    return None;
                }
                Some((k.to_string(), v.trim().parse().ok()?))
            })
            .collect();
        Counters { values }
    }

    /// The value of `name`; panics, listing the names there are, when it is absent.
    #[track_caller]
    pub fn get(&self, name: &str) -> u64 {
        match self.values.get(name) {
            Some(v) => *v,
            None => absent("counter", name, self.values.keys()),
        }
    }

    /// The value of `name`, 0 when absent: only for the counters dnsd lists once nonzero
    /// ([`LISTED_ONCE_NONZERO`]); panics for any other name, which must be there.
    #[track_caller]
    pub fn get_or_zero(&self, name: &str) -> u64 {
        assert!(
            LISTED_ONCE_NONZERO.iter().any(|p| name.starts_with(p)),
            "{name} is always listed: read it with Counters::get, not get_or_zero"
        );
        self.values.get(name).copied().unwrap_or(0)
    }

    /// Every counter by name.
    pub fn as_map(&self) -> &BTreeMap<String, u64> {
        &self.values
    }
}

impl std::ops::Index<&str> for Counters {
    type Output = u64;

    /// As [`Counters::get`].
    #[track_caller]
    fn index(&self, name: &str) -> &u64 {
        match self.values.get(name) {
            Some(v) => v,
            None => absent("counter", name, self.values.keys()),
        }
    }
}

/// Panics: `name` is not among `names`.
#[track_caller]
fn absent<'a>(kind: &str, name: &str, names: impl Iterator<Item = &'a String>) -> ! {
    let names: Vec<&str> = names.map(String::as_str).collect();
    panic!(
        "no {kind} {name} (a misspelt name, or one that is not there yet, must not read as 0); \
         the {} there are: {}",
        names.len(),
        names.join(" ")
    )
}

/// Every sample of a Prometheus text body: series (`name{labels}`) to value.
pub fn prometheus_series(text: &str) -> BTreeMap<String, f64> {
    text.lines()
        .filter(|l| !l.starts_with('#'))
        .filter_map(|l| l.rsplit_once(' '))
        .filter_map(|(k, v)| v.parse().ok().map(|v| (k.to_string(), v)))
        .collect()
}

/// The value of `series` (`name{labels}` exactly as exposed) among `all`; panics, listing the
/// series there are, when it is absent.
#[track_caller]
pub fn prometheus_value(all: &BTreeMap<String, f64>, series: &str) -> f64 {
    match all.get(series) {
        Some(v) => *v,
        None => absent("series", series, all.keys()),
    }
}

/// The sum of the series of the family `name` in a Prometheus text body whose labels contain
/// `label` (`k="v"`; empty: every series); panics, listing the series there are, when none
/// matches.
#[track_caller]
pub fn prometheus_sum(text: &str, name: &str, label: &str) -> u64 {
    let all = prometheus_series(text);
    let matching: Vec<f64> = all
        .iter()
        .filter(|(series, _)| series.split('{').next() == Some(name) && series.contains(label))
        .map(|(_, v)| *v)
        .collect();
    if matching.is_empty() {
        let what = if label.is_empty() {
            name.to_string()
        } else {
            format!("{name} with {label}")
        };
        absent("series", &what, all.keys());
    }
    matching.iter().map(|v| *v as u64).sum()
}

#[cfg(test)]
mod tests {
    use super::*;

    const STATS: &str = "queries.udp\t7\nudp.kernel_drops.top\t127.0.0.1\t3\nresponses.rcode.NOERROR\t7\n\
                         drops.malformed\t0\n";

    #[test]
    fn stats_lines_are_read_by_name() {
        let c = Counters::parse(STATS);
        assert_eq!(c.get("queries.udp"), 7);
        assert_eq!(c["drops.malformed"], 0);
        assert_eq!(
            c.as_map().len(),
            3,
            "the three-field line is skipped: {c:?}"
        );
        assert_eq!(c.get_or_zero("responses.rcode.NOERROR"), 7);
        assert_eq!(c.get_or_zero("responses.rcode.FORMERR"), 0);
    }

    #[test]
    #[should_panic(expected = "no counter drops.malformd")]
    fn an_absent_counter_fails() {
        Counters::parse(STATS).get("drops.malformd");
    }

    #[test]
    #[should_panic(expected = "the 3 there are: drops.malformed queries.udp")]
    fn an_absent_counter_fails_listing_the_names_there_are() {
        let _ = Counters::parse(STATS)["queries.tcp"];
    }

    #[test]
    #[should_panic(expected = "read it with Counters::get")]
    fn get_or_zero_takes_only_counters_listed_once_nonzero() {
        Counters::parse(STATS).get_or_zero("drops.malformd");
    }

    const PROM: &str = "# HELP x_total X.\n# TYPE x_total counter\nx_total{k=\"a\"} 2\n\
                        x_total{k=\"b\"} 3\nx_totals 100\ny 1.5\n";

    #[test]
    fn prometheus_series_are_summed_by_family_and_label() {
        assert_eq!(prometheus_sum(PROM, "x_total", ""), 5);
        assert_eq!(prometheus_sum(PROM, "x_total", "k=\"b\""), 3);
        let all = prometheus_series(PROM);
        assert_eq!(prometheus_value(&all, "y"), 1.5);
        assert_eq!(prometheus_value(&all, "x_total{k=\"a\"}"), 2.0);
    }

    #[test]
    #[should_panic(expected = "no series x_total with k=\"c\"")]
    fn a_prometheus_sum_of_nothing_fails() {
        prometheus_sum(PROM, "x_total", "k=\"c\"");
    }

    #[test]
    #[should_panic(expected = "no series z")]
    fn an_absent_prometheus_series_fails() {
        prometheus_value(&prometheus_series(PROM), "z");
    }
}
