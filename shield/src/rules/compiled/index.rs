//! Candidate rules by keyed lookups, so that a tenant with thousands of rules costs a few
//! lookups per request instead of a walk over all of them.
//!
//! Each rule is indexed by one of its conditions, the cheapest to look up: `exact` and
//! `one_of` values in a hash table per attribute, `qname` suffixes (whole labels) in a hash
//! table probed once per label count in use, `prefix` and `suffix` values in byte tries walked
//! along the value (forwards, backwards), `contains` values in one Aho-Corasick automaton per
//! attribute, run once over the value (10,000 `contains` rules cost 23 times ten rules when
//! each was tried in turn). A rule with no such condition (only regexes, numbers, `present`,
//! negations) is always a candidate. The index only narrows:
//! every candidate is then evaluated whole, in file order, so verdicts are exactly those of a
//! walk over every rule. An attribute with several values (a header sent twice, a query and
//! its decoded form) gathers the candidates of each. A request past the stack's few (more
//! than 128 candidates, 32 `contains` values in one value, 16 values of one attribute) has
//! them gathered again into a bitmap of the tenant's rules, one per thread and reused: its
//! cost stays that of the rules it may match, never a walk over all of them.

use super::{Matcher, Rule};
use crate::rules::Request;
use hashbrown::HashMap;
use std::mem::MaybeUninit;

/// Most candidates collected per request on the stack; more go to the thread's bitmap.
pub(crate) const MAX_CANDIDATES: usize = 128;

/// Most distinct `contains` values one attribute's value may hold on the stack (each is
/// remembered to count it once); more go to the thread's bitmap.
const MAX_CONTAINED: usize = 32;

/// Rule numbers by keyed lookups, per attribute, plus the rules every request walks.
#[derive(Debug, Default)]
pub(crate) struct RuleIndex {
    /// Rules with no indexable condition, in file order: always candidates.
    pub(crate) scan: Vec<u32>,
    /// Per attribute, the lookups that find the other rules.
    pub(crate) attrs: Vec<AttrIndex>,
}

/// The lookups on one attribute.
#[derive(Debug)]
pub(crate) struct AttrIndex {
    pub(crate) attr: Box<str>,
    /// `attr`'s [`super::attr::bit`].
    bit: u32,
    /// `exact` and `one_of` values and `qname` label suffixes ("example.com."), by text: one
    /// lookup finds both kinds for the whole value.
    keys: HashMap<Box<str>, Keyed>,
    /// Bit `n`: a key of `n` bytes (255 and longer: bit 255) is in `keys`; a value of
    /// another length is never hashed.
    key_lens: [u64; 4],
    /// Bit `n`: a label suffix of `n` labels is indexed (the root "." has none).
    label_counts: u64,
    prefix: Trie,
    /// Over the reversed suffixes.
    suffix: Trie,
    /// `contains` values, and the rules of each (pattern `n` of `contained`).
    contains: Vec<(Box<str>, Vec<u32>)>,
    /// Where each value is in `contains` (while building).
    contains_at: HashMap<Box<str>, usize>,
    /// Over `contains` (built once every rule is in).
    contained: Option<aho_corasick::AhoCorasick>,
}

/// Where gathered candidates go: the stack's few ([`Candidates`]) or, past them, the
/// thread's bitmap of every rule ([`Spill`]).
pub(crate) trait Sink {
    /// Most values of one attribute looked at.
    const MAX_VALUES: usize;
    /// Adds rules.
    fn extend(&mut self, rules: &[u32]);
    /// Past the sink's bounds: gathering stops.
    fn overflowed(&self) -> bool;
    /// Marks the sink past its bounds.
    fn overflow(&mut self);
    /// A value starts: its `contains` values are each counted once.
    fn start_value(&mut self);
    /// True the first time `pattern` is found in the value.
    fn first_sight(&mut self, pattern: u32) -> bool;
}

/// The rules found by one key.
#[derive(Debug, Default)]
struct Keyed {
    /// Rules whose value is exactly the key.
    exact: Vec<u32>,
    /// Rules whose `qname` suffix is the key.
    labels: Vec<u32>,
}

/// A byte trie: each node lists the rules whose key ends there.
#[derive(Debug)]
struct Trie {
    nodes: Vec<TrieNode>,
}

#[derive(Debug, Default)]
struct TrieNode {
    /// Sorted by byte.
    edges: Vec<(u8, u32)>,
    rules: Vec<u32>,
}

impl Default for Trie {
    fn default() -> Self {
        Trie {
            nodes: vec![TrieNode::default()],
        }
    }
}

impl Trie {
    fn insert(&mut self, key: impl Iterator<Item = u8>, rule: u32) {
        let mut n = 0usize;
        for b in key {
            n = match self.nodes[n].edges.binary_search_by_key(&b, |e| e.0) {
                Ok(i) => self.nodes[n].edges[i].1 as usize,
                Err(i) => {
                    let id = self.nodes.len() as u32;
                    self.nodes.push(TrieNode::default());
                    self.nodes[n].edges.insert(i, (b, id));
                    id as usize
                }
            };
        }
        self.nodes[n].rules.push(rule);
    }

    fn is_empty(&self) -> bool {
        self.nodes.len() == 1 && self.nodes[0].rules.is_empty()
    }

    /// Adds the rules of every node on `key`'s path (every key that `key` starts with).
    #[inline]
    fn collect<S: Sink>(&self, key: impl Iterator<Item = u8>, out: &mut S) {
        let mut n = &self.nodes[0];
        out.extend(&n.rules);
        for b in key {
            match n.edges.binary_search_by_key(&b, |e| e.0) {
                Ok(i) => n = &self.nodes[n.edges[i].1 as usize],
                Err(_) => return,
            }
            out.extend(&n.rules);
        }
    }
}

/// Candidate rule numbers gathered for one request (on the stack, never zeroed).
pub(crate) struct Candidates {
    buf: [MaybeUninit<u32>; MAX_CANDIDATES],
    len: usize,
    /// Past the stack's bounds: the caller gathers them again into a [`Spill`].
    pub(crate) overflow: bool,
    /// The `contains` values found in the current value.
    seen: [u32; MAX_CONTAINED],
    seen_len: usize,
}

impl Sink for Candidates {
    const MAX_VALUES: usize = 16;

    #[inline]
    fn extend(&mut self, rules: &[u32]) {
        if self.len + rules.len() > MAX_CANDIDATES {
            self.overflow = true;
            return;
        }
        for (d, &r) in self.buf[self.len..].iter_mut().zip(rules) {
            d.write(r);
        }
        self.len += rules.len();
    }

    #[inline]
    fn overflowed(&self) -> bool {
        self.overflow
    }

    #[inline]
    fn overflow(&mut self) {
        self.overflow = true;
    }

    #[inline]
    fn start_value(&mut self) {
        self.seen_len = 0;
    }

    #[inline]
    fn first_sight(&mut self, pattern: u32) -> bool {
        if self.seen[..self.seen_len].contains(&pattern) {
            return false;
        }
        if self.seen_len == MAX_CONTAINED {
            self.overflow = true;
            return false;
        }
        self.seen[self.seen_len] = pattern;
        self.seen_len += 1;
        true
    }
}

impl Candidates {
    #[inline]
    pub(crate) fn new() -> Self {
        Candidates {
            buf: [const { MaybeUninit::uninit() }; MAX_CANDIDATES],
            len: 0,
            overflow: false,
            seen: [0; MAX_CONTAINED],
            seen_len: 0,
        }
    }

    /// The candidates sorted, without repeats.
    #[inline]
    pub(crate) fn sorted(&mut self) -> &[u32] {
        // SAFETY: the first `len` elements were written by `extend`, and MaybeUninit<u32>
        // has the layout of u32.
        let s: &mut [u32] = unsafe {
            std::slice::from_raw_parts_mut(self.buf.as_mut_ptr().cast::<u32>(), self.len)
        };
        s.sort_unstable();
        let mut w = 0;
        for r in 0..s.len() {
            if w == 0 || s[r] != s[w - 1] {
                s[w] = s[r];
                w += 1;
            }
        }
        &s[..w]
    }
}

/// A thread's bitmaps, reused by every request past the stack's bounds (they grow to the
/// largest tenant's rules once, then allocate nothing).
#[derive(Default)]
struct SpillBufs {
    /// Bit `n`: rule `n` is a candidate.
    rules: Vec<u64>,
    /// Bit `n`: `contains` value `n` was found in the current value.
    seen: Vec<u64>,
    /// The bits of `seen` set, to clear.
    touched: Vec<u32>,
}

thread_local! {
    static SPILL: std::cell::RefCell<SpillBufs> = std::cell::RefCell::new(SpillBufs::default());
}

/// Candidates as a bitmap of every rule: never past its bounds.
pub(crate) struct Spill<'a> {
    rules: &'a mut [u64],
    seen: &'a mut [u64],
    touched: &'a mut Vec<u32>,
}

impl Sink for Spill<'_> {
    // As many values as a rule's condition looks at (`Request::attr_nth` costs a walk to
    // the nth value: every value of 900 copies of one header cost more than the walk).
    const MAX_VALUES: usize = crate::rules::MAX_VALUES;

    #[inline]
    fn extend(&mut self, rules: &[u32]) {
        for &r in rules {
            self.rules[r as usize / 64] |= 1 << (r % 64);
        }
    }

    fn overflowed(&self) -> bool {
        false
    }

    fn overflow(&mut self) {}

    fn start_value(&mut self) {
        for p in self.touched.drain(..) {
            self.seen[p as usize / 64] = 0;
        }
    }

    #[inline]
    fn first_sight(&mut self, p: u32) -> bool {
        let (w, b) = (p as usize / 64, 1u64 << (p % 64));
        if self.seen[w] & b != 0 {
            return false;
        }
        self.seen[w] |= b;
        self.touched.push(p);
        true
    }
}

/// How a rule is indexed: the kind of its chosen condition, cheapest first.
fn rank(m: &Matcher) -> Option<u8> {
    match m {
        Matcher::Exact(_) | Matcher::OneOf(_) | Matcher::OneOfSet(_) => Some(0),
        Matcher::LabelSuffix(_) => Some(1),
        Matcher::Prefix(_) => Some(2),
        Matcher::Suffix(_) => Some(3),
        Matcher::Contains(_) => Some(4),
        _ => None,
    }
}

impl RuleIndex {
    /// Indexes `rules` (numbered by position).
    pub(crate) fn build(rules: &[Rule]) -> RuleIndex {
        let mut ix = RuleIndex::default();
        for (i, rule) in rules.iter().enumerate() {
            let i = i as u32;
            let best = rule
                .conds
                .iter()
                .filter(|c| !c.negate)
                .filter_map(|c| rank(&c.matcher).map(|r| (r, c)))
                .min_by_key(|(r, _)| *r);
            let Some((_, c)) = best else {
                ix.scan.push(i);
                continue;
            };
            let a = match ix.attrs.iter().position(|a| a.attr == c.attr) {
                Some(p) => &mut ix.attrs[p],
                None => {
                    ix.attrs.push(AttrIndex {
                        attr: c.attr.clone(),
                        bit: c.bit,
                        keys: HashMap::new(),
                        key_lens: [0; 4],
                        label_counts: 0,
                        prefix: Trie::default(),
                        suffix: Trie::default(),
                        contains: Vec::new(),
                        contains_at: HashMap::new(),
                        contained: None,
                    });
                    ix.attrs.last_mut().expect("just pushed")
                }
            };
            let mut note = |k: &str| {
                let n = k.len().min(255);
                a.key_lens[n / 64] |= 1u64 << (n % 64);
            };
            match &c.matcher {
                Matcher::Exact(v) => note(v),
                Matcher::OneOf(vs) => vs.iter().for_each(|v| note(v)),
                Matcher::OneOfSet(vs) => vs.iter().for_each(|v| note(v)),
                Matcher::LabelSuffix(s) => note(s),
                _ => {}
            }
            match &c.matcher {
                Matcher::Exact(v) => a.keys.entry(v.clone()).or_default().exact.push(i),
                Matcher::OneOf(vs) => {
                    for v in vs.iter() {
                        let e = &mut a.keys.entry(v.clone()).or_default().exact;
                        if e.last() != Some(&i) {
                            e.push(i);
                        }
                    }
                }
                Matcher::OneOfSet(vs) => {
                    for v in vs {
                        a.keys.entry(v.clone()).or_default().exact.push(i);
                    }
                }
                Matcher::LabelSuffix(s) => {
                    a.label_counts |= 1u64 << label_count(s).min(63);
                    a.keys.entry(s.clone()).or_default().labels.push(i);
                }
                Matcher::Prefix(p) => a.prefix.insert(p.bytes(), i),
                Matcher::Suffix(s) => a.suffix.insert(s.bytes().rev(), i),
                Matcher::Contains(s) => match a.contains_at.get(s) {
                    Some(&at) => a.contains[at].1.push(i),
                    None => {
                        a.contains_at.insert(s.clone(), a.contains.len());
                        a.contains.push((s.clone(), vec![i]));
                    }
                },
                _ => unreachable!("ranked matchers only"),
            }
        }
        for a in &mut ix.attrs {
            a.contains_at = HashMap::new();
            if a.contains.is_empty() {
                continue;
            }
            match aho_corasick::AhoCorasick::new(a.contains.iter().map(|(v, _)| v.as_bytes())) {
                Ok(ac) => a.contained = Some(ac),
                // Past the automaton's own bounds: those rules are walked, as before.
                Err(_) => {
                    for (_, rules) in a.contains.drain(..) {
                        ix.scan.extend(rules);
                    }
                }
            }
        }
        ix.scan.sort_unstable();
        ix
    }

    /// True when lookups cannot narrow anything (every rule is walked anyway).
    pub(crate) fn is_trivial(&self) -> bool {
        self.attrs.is_empty()
    }

    /// Gathers the candidates of `req` besides [`RuleIndex::scan`]: of each value of an
    /// attribute that has several (a header sent twice, a query and its decoded form), as a
    /// condition matches when any of them does.
    #[inline]
    pub(crate) fn candidates<R: Request + ?Sized, S: Sink>(&self, req: &R, out: &mut S) {
        let multi = req.multi_valued();
        for a in &self.attrs {
            let Some(v) = req.attr_by_bit(a.bit, &a.attr) else {
                continue;
            };
            a.candidates_of(v, out);
            if !multi {
                continue;
            }
            for n in 1.. {
                if out.overflowed() {
                    return;
                }
                let Some(v) = req.attr_nth(&a.attr, n) else {
                    break;
                };
                if n >= S::MAX_VALUES {
                    out.overflow();
                    return;
                }
                a.candidates_of(v, out);
            }
        }
    }

    /// Calls `f` with each candidate of `req` and each rule of [`RuleIndex::scan`] in file
    /// order (`rules` of them in all), gathered into the thread's bitmap, until `f` returns
    /// something: for a request past [`Candidates`]' bounds.
    pub(crate) fn spilled<R: Request + ?Sized, T>(
        &self,
        rules: usize,
        req: &R,
        mut f: impl FnMut(u32) -> Option<T>,
    ) -> Option<T> {
        SPILL.with(|cell| {
            let mut b = cell.borrow_mut();
            let SpillBufs {
                rules: bits,
                seen,
                touched,
            } = &mut *b;
            let words = rules.div_ceil(64);
            if bits.len() < words {
                bits.resize(words, 0);
            }
            let patterns = self
                .attrs
                .iter()
                .map(|a| a.contains.len())
                .max()
                .unwrap_or(0);
            if seen.len() < patterns.div_ceil(64) {
                seen.resize(patterns.div_ceil(64), 0);
            }
            // Cleared first: a rule's evaluation that panicked left its bits (and the next
            // tenant, of fewer rules, would have looked one up past its end).
            bits[..words].fill(0);
            let mut sink = Spill {
                rules: &mut bits[..words],
                seen,
                touched,
            };
            sink.extend(&self.scan);
            self.candidates(req, &mut sink);
            sink.start_value();
            let mut found = None;
            'words: for (w, &word) in bits[..words].iter().enumerate() {
                let mut word = word;
                while word != 0 {
                    let r = (w * 64) as u32 + word.trailing_zeros();
                    word &= word - 1;
                    found = f(r);
                    if found.is_some() {
                        break 'words;
                    }
                }
            }
            found
        })
    }
}

impl AttrIndex {
    /// Gathers the candidates of one value `v` of the attribute.
    #[inline]
    fn candidates_of<S: Sink>(&self, v: &str, out: &mut S) {
        let a = self;
        if a.has_len(v.len())
            && let Some(k) = a.keys.get(v)
        {
            out.extend(&k.exact);
            out.extend(&k.labels);
        }
        if a.label_counts != 0 {
            // The whole name was looked up above; its shorter suffixes here.
            label_suffixes(v, a.label_counts, |s| {
                if s.len() != v.len()
                    && a.has_len(s.len())
                    && let Some(k) = a.keys.get(s)
                {
                    out.extend(&k.labels);
                }
            });
        }
        if !a.prefix.is_empty() {
            a.prefix.collect(v.bytes(), out);
        }
        if !a.suffix.is_empty() {
            a.suffix.collect(v.bytes().rev(), out);
        }
        if let Some(ac) = &a.contained {
            // Each value found once, however often it occurs.
            out.start_value();
            for m in ac.find_overlapping_iter(v) {
                let p = m.pattern().as_u32();
                if out.first_sight(p) {
                    out.extend(&a.contains[p as usize].1);
                } else if out.overflowed() {
                    return;
                }
            }
        }
    }

    /// True when a key of `len` bytes may be in `keys`.
    #[inline]
    fn has_len(&self, len: usize) -> bool {
        let n = len.min(255);
        self.key_lens[n / 64] & (1u64 << (n % 64)) != 0
    }
}

/// Labels of a presentation name with its trailing dot ("." has none).
fn label_count(s: &str) -> usize {
    if s == "." { 0 } else { s.matches('.').count() }
}

/// Calls `f` with each suffix of `name` (lower-case presentation, trailing dot) that is whole
/// labels and has a label count set in `counts`: "www.example.com." gives "." (0),
/// "com." (1), "example.com." (2), "www.example.com." (3).
#[inline]
pub(crate) fn label_suffixes(name: &str, counts: u64, mut f: impl FnMut(&str)) {
    if counts & 1 != 0 {
        f(".");
    }
    let b = name.as_bytes();
    if b.len() < 2 || b[b.len() - 1] != b'.' {
        return;
    }
    let mut n = 0u32;
    // Walk back from the dot before the root, cutting at each label boundary.
    let mut i = b.len() - 1;
    while i > 0 {
        i -= 1;
        if b[i] == b'.' || i == 0 {
            n += 1;
            if n >= 64 {
                return;
            }
            let start = if b[i] == b'.' { i + 1 } else { 0 };
            if counts & (1u64 << n) != 0 {
                f(&name[start..]);
            }
            if counts >> (n + 1) == 0 {
                return;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn label_suffixes_cut_at_label_boundaries() {
        let mut got = Vec::new();
        label_suffixes("www.example.com.", u64::MAX, |s| got.push(s.to_string()));
        assert_eq!(got, [".", "com.", "example.com.", "www.example.com."]);
        let mut got = Vec::new();
        label_suffixes("a.b.c.", 1 << 2, |s| got.push(s.to_string()));
        assert_eq!(got, ["b.c."]);
        let mut got = Vec::new();
        label_suffixes(".", u64::MAX, |s| got.push(s.to_string()));
        assert_eq!(got, ["."]);
    }

    #[test]
    fn tries_collect_every_key_on_the_path() {
        let mut t = Trie::default();
        t.insert("/a".bytes(), 1);
        t.insert("/ab".bytes(), 2);
        t.insert("/b".bytes(), 3);
        t.insert("".bytes(), 4);
        let mut c = Candidates::new();
        t.collect("/abc".bytes(), &mut c);
        assert_eq!(c.sorted(), &[1, 2, 4]);
        let mut c = Candidates::new();
        t.collect("/x".bytes(), &mut c);
        assert_eq!(c.sorted(), &[4]);
    }
}
