//! What travels through Redis besides the records ([`super::record`]): key names, stream ids and reply parsing.

use ipnet::IpNet;
use redis::Value;
use std::fmt;

/// The key names under one prefix.
#[derive(Clone, Debug)]
pub(crate) struct Keys {
    prefix: String,
    /// Sorted set: member = prefix text, score = expiry in Redis server time (ms).
    pub(crate) zset: String,
    /// Capped stream: one entry per decision, field `d` = the JSON record.
    pub(crate) log: String,
    /// A random value set once per Redis data life; a change means Redis lost its data.
    pub(crate) epoch: String,
    /// Hash: field = node id, value = the node's latest record (its replay mark).
    pub(crate) marks: String,
}

impl Keys {
    pub(crate) fn new(prefix: &str) -> Self {
        Keys {
            prefix: prefix.to_string(),
            zset: format!("{prefix}blocks"),
            log: format!("{prefix}log"),
            epoch: format!("{prefix}epoch"),
            marks: format!("{prefix}marks"),
        }
    }

    /// The key of one node id's presence: a sorted set of process tokens by last heartbeat.
    pub(crate) fn node(&self, node: &str) -> String {
        format!("{}node:{}", self.prefix, node)
    }

    /// The key of one block: its JSON record, with a TTL.
    pub(crate) fn block(&self, net: &IpNet) -> String {
        format!("{}block:{}", self.prefix, net)
    }
}

/// A stream entry id (`ms-seq`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub(crate) struct StreamId {
    pub(crate) ms: u64,
    pub(crate) seq: u64,
}

impl StreamId {
    pub(crate) fn parse(b: &[u8]) -> Option<Self> {
        let s = std::str::from_utf8(b).ok()?;
        let (ms, seq) = s.split_once('-').unwrap_or((s, "0"));
        Some(StreamId {
            ms: ms.parse().ok()?,
            seq: seq.parse().ok()?,
        })
    }
}

impl fmt::Display for StreamId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}-{}", self.ms, self.seq)
    }
}

/// The bytes of a string-like reply.
pub(crate) fn bytes(v: &Value) -> Option<&[u8]> {
    match v {
        Value::BulkString(b) => Some(b),
        Value::SimpleString(s) => Some(s.as_bytes()),
        Value::VerbatimString { text, .. } => Some(text.as_bytes()),
        _ => None,
    }
}

/// The items of an array-like reply (RESP2 arrays, RESP3 sets).
fn items(v: &Value) -> Option<&[Value]> {
    match v {
        Value::Array(a) | Value::Set(a) => Some(a),
        _ => None,
    }
}

/// Key/value pairs of a map-like reply (RESP3 map or RESP2 flat array).
fn pairs(v: &Value) -> Vec<(&[u8], &Value)> {
    match v {
        Value::Map(m) => m.iter().filter_map(|(k, v)| Some((bytes(k)?, v))).collect(),
        Value::Array(a) => a
            .chunks_exact(2)
            .filter_map(|kv| Some((bytes(&kv[0])?, &kv[1])))
            .collect(),
        _ => Vec::new(),
    }
}

/// What `XINFO STREAM` says about the stream's ends.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct StreamInfo {
    /// Entries held.
    pub(crate) length: u64,
    /// Id of the last entry ever added.
    pub(crate) last_generated: StreamId,
    /// Entries ever added (Redis 7+).
    pub(crate) entries_added: Option<u64>,
    /// Id of the oldest entry still held.
    pub(crate) first: Option<StreamId>,
}

fn int(v: &Value) -> Option<u64> {
    match v {
        Value::Int(i) => u64::try_from(*i).ok(),
        v => std::str::from_utf8(bytes(v)?).ok()?.parse().ok(),
    }
}

/// Parses an `XINFO STREAM` reply.
pub(crate) fn parse_xinfo(v: &Value) -> Option<StreamInfo> {
    let mut info = StreamInfo::default();
    let mut seen = false;
    for (k, v) in pairs(v) {
        match k {
            b"length" => info.length = int(v)?,
            b"last-generated-id" => {
                info.last_generated = StreamId::parse(bytes(v)?)?;
                seen = true;
            }
            b"entries-added" => info.entries_added = int(v),
            b"first-entry" => {
                info.first = items(v)
                    .and_then(|e| e.first())
                    .and_then(bytes)
                    .and_then(StreamId::parse)
            }
            _ => {}
        }
    }
    seen.then_some(info)
}

/// True when entries after `pos` may have been trimmed before this node read them, with `info`
/// taken after the read: the oldest entry held is newer than `pos` (the position itself was
/// trimmed away). Trimming only ever cuts the head, so a position still held means nothing after
/// it was lost. From the stream's start (`pos` 0-0), a gap is "entries were ever trimmed" (Redis
/// 7's `entries-added` above `length`). A stream that restarted below `pos` (restored or
/// replaced) or vanished also counts as a gap.
pub(crate) fn is_gap(pos: StreamId, info: Option<&StreamInfo>) -> bool {
    let Some(info) = info else {
        return pos != StreamId::default();
    };
    if info.last_generated < pos {
        return true;
    }
    if pos == StreamId::default() {
        return info.entries_added.is_some_and(|added| added > info.length);
    }
    match info.first {
        Some(first) => first > pos,
        None => info.last_generated > pos,
    }
}

/// True when an `XINFO STREAM` reply's `first-entry` was cut from it (too big: planted).
pub(crate) fn first_entry_cut(v: &Value) -> bool {
    pairs(v)
        .into_iter()
        .any(|(k, v)| k == b"first-entry" && has_cut(v))
}

/// True when `v` holds an element cut from its reply ([`super::capped::CUT`]).
fn has_cut(v: &Value) -> bool {
    match v {
        Value::BulkString(b) => b == super::capped::CUT,
        Value::Array(a) | Value::Set(a) => a.iter().any(has_cut),
        Value::Map(m) => m.iter().any(|(k, v)| has_cut(k) || has_cut(v)),
        _ => false,
    }
}

/// The entries of an `XREAD` reply for one stream: (id, field `d`), in order. An entry with
/// an element cut from the reply ends the list — unless it comes first, when it was too
/// large alone and is returned with [`CUT`](super::capped::CUT) for its field (refused as
/// oversized, and passed): one cut only because the entries before it filled the reply is
/// read again, first, next time.
pub(crate) fn parse_xread(v: &Value) -> Vec<(StreamId, Option<&[u8]>)> {
    let streams: Vec<&Value> = match v {
        Value::Nil => return Vec::new(),
        Value::Map(m) => m.iter().map(|(_, v)| v).collect(),
        Value::Array(a) => a
            .iter()
            .filter_map(|s| items(s).and_then(|s| s.get(1)))
            .collect(),
        _ => return Vec::new(),
    };
    let mut out = Vec::new();
    for entries in streams {
        for e in items(entries).unwrap_or(&[]) {
            let cut = has_cut(e);
            if cut && !out.is_empty() {
                return out;
            }
            let Some([id, fields]) = items(e).and_then(|e| e.get(..2)).map(|s| [&s[0], &s[1]])
            else {
                if cut {
                    return out;
                }
                continue;
            };
            let Some(id) = bytes(id).and_then(StreamId::parse) else {
                if cut {
                    return out;
                }
                continue;
            };
            if cut {
                out.push((id, Some(super::capped::CUT)));
                return out;
            }
            let d = pairs(fields)
                .into_iter()
                .find(|(k, _)| *k == b"d")
                .and_then(|(_, v)| bytes(v));
            out.push((id, d));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bulk(s: &str) -> Value {
        Value::BulkString(s.as_bytes().to_vec())
    }

    #[test]
    fn stream_ids_order_and_gaps() {
        let id = |s: &str| StreamId::parse(s.as_bytes()).unwrap();
        assert!(id("5-1") > id("4-9") && id("5-1") < id("5-2"));
        assert_eq!(id("7").to_string(), "7-0");
        assert!(StreamId::parse(b"x-1").is_none());
        let info = StreamInfo {
            length: 50,
            last_generated: id("100-0"),
            entries_added: Some(100),
            first: Some(id("51-0")),
        };
        assert!(!is_gap(id("51-0"), Some(&info)), "position still held");
        assert!(!is_gap(id("70-0"), Some(&info)));
        assert!(is_gap(id("49-0"), Some(&info)), "position trimmed away");
        assert!(
            is_gap(id("101-0"), Some(&info)),
            "stream restarted below us"
        );
        assert!(
            is_gap(StreamId::default(), Some(&info)),
            "trimmed since the start"
        );
        let fresh = StreamInfo {
            entries_added: Some(50),
            ..info
        };
        assert!(!is_gap(StreamId::default(), Some(&fresh)));
        let emptied = StreamInfo {
            first: None,
            length: 0,
            ..info
        };
        assert!(is_gap(id("60-0"), Some(&emptied)));
        assert!(!is_gap(id("100-0"), Some(&emptied)));
        assert!(!is_gap(StreamId::default(), None));
        assert!(is_gap(id("3-0"), None));
    }

    #[test]
    fn parses_replies() {
        let xinfo = Value::Array(vec![
            bulk("length"),
            Value::Int(2),
            bulk("last-generated-id"),
            bulk("9-1"),
            bulk("entries-added"),
            Value::Int(7),
            bulk("first-entry"),
            Value::Array(vec![bulk("3-0"), Value::Array(vec![bulk("d"), bulk("{}")])]),
        ]);
        let info = parse_xinfo(&xinfo).unwrap();
        assert_eq!(info.last_generated.to_string(), "9-1");
        assert_eq!(info.first.unwrap().to_string(), "3-0");
        assert_eq!((info.length, info.entries_added), (2, Some(7)));
        let xread = Value::Array(vec![Value::Array(vec![
            bulk("p:log"),
            Value::Array(vec![
                Value::Array(vec![bulk("3-0"), Value::Array(vec![bulk("d"), bulk("x")])]),
                Value::Array(vec![bulk("4-0"), Value::Nil]),
            ]),
        ])]);
        let got = parse_xread(&xread);
        assert_eq!(got.len(), 2);
        assert_eq!(got[0].1, Some(&b"x"[..]));
        assert_eq!(got[1].1, None);
        assert!(parse_xread(&Value::Nil).is_empty());
    }

    #[test]
    fn an_entry_cut_from_a_reply_is_passed_alone_and_read_again_behind_others() {
        let cut = || Value::BulkString(super::super::capped::CUT.to_vec());
        let entry =
            |id: &str, d: Value| Value::Array(vec![bulk(id), Value::Array(vec![bulk("d"), d])]);
        let reply = |entries: Vec<Value>| {
            Value::Array(vec![Value::Array(vec![
                bulk("p:log"),
                Value::Array(entries),
            ])])
        };
        // Behind others: the list ends before it (it is read first next time).
        let r = reply(vec![
            entry("3-0", bulk("x")),
            entry("4-0", cut()),
            entry("5-0", bulk("y")),
        ]);
        let got = parse_xread(&r);
        assert_eq!(
            got,
            vec![(StreamId::parse(b"3-0").unwrap(), Some(&b"x"[..]))]
        );
        // First: too large alone, passed without its field.
        let r = reply(vec![entry("4-0", cut()), entry("5-0", bulk("y"))]);
        let got = parse_xread(&r);
        let cut_field = Some(super::super::capped::CUT);
        assert_eq!(got, vec![(StreamId::parse(b"4-0").unwrap(), cut_field)]);
        // A field list cut whole, or an entry cut whole behind others.
        let r = reply(vec![Value::Array(vec![bulk("4-0"), cut()])]);
        let got = parse_xread(&r);
        assert_eq!(got, vec![(StreamId::parse(b"4-0").unwrap(), cut_field)]);
        let r = reply(vec![
            entry("3-0", bulk("x")),
            cut(),
            entry("5-0", bulk("y")),
        ]);
        let got = parse_xread(&r);
        assert_eq!(got.len(), 1);
    }
}
