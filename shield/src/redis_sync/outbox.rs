//! The bounded buffer of decisions waiting to be written to Redis.
//!
//! Items carry increasing sequence numbers; the writer copies a prefix, writes it, and only then
//! drops what it wrote (`ack`), so that a failed write is retried after reconnecting and an
//! overflow that rewrites the queue meanwhile never drops an unwritten item by mistake.
//!
//! Overflow keeps the queued removals (they are small and nothing else would carry them),
//! drops the queued upserts and appends one [`Item::Full`] marker: when the writer reaches it, it
//! republishes every local entry of the map as it is then. Every change after the marker is
//! queued after it, so replaying the queue converges on the map's state.

use crate::block::{BlockEntry, Origin};
use ipnet::IpNet;
use std::collections::VecDeque;

/// A pending write.
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum Item {
    /// Publish this local decision.
    Add(BlockEntry),
    /// Publish a removal, lifted by an operator's command or by this node.
    Del(IpNet, Origin),
    /// Republish every local entry of the map.
    Full,
}

/// What [`Outbox::push`] had to give up.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Overflow {
    /// Upserts dropped (the full republish carries their current state).
    pub(crate) upserts: u64,
    /// Removals dropped because removals alone filled half the buffer.
    pub(crate) removals: u64,
}

pub(crate) struct Outbox {
    items: VecDeque<(u64, Item)>,
    next_seq: u64,
    /// Items other than `Full`.
    len: usize,
    max: usize,
    /// Since when the queue has waited without progress (its first item queued into an
    /// empty queue, or the last batch acknowledged); `None` while empty.
    stalled_since: Option<std::time::Instant>,
}

impl Outbox {
    pub(crate) fn new(max: usize) -> Self {
        Outbox {
            items: VecDeque::new(),
            next_seq: 1,
            len: 0,
            max: max.max(2),
            stalled_since: None,
        }
    }

    /// How long the queue has waited without a batch written, while it holds anything.
    pub(crate) fn waiting(&self) -> Option<std::time::Duration> {
        self.stalled_since
            .filter(|_| !self.items.is_empty())
            .map(|t| t.elapsed())
    }

    /// Decisions waiting (markers not counted).
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    fn append(&mut self, item: Item) {
        if self.items.is_empty() {
            self.stalled_since = Some(std::time::Instant::now());
        }
        if !matches!(item, Item::Full) {
            self.len += 1;
        }
        self.items.push_back((self.next_seq, item));
        self.next_seq += 1;
    }

    /// Queues one decision; on overflow compacts the queue as the module doc says.
    pub(crate) fn push(&mut self, item: Item) -> Option<Overflow> {
        let mut out = None;
        if self.len >= self.max {
            out = Some(self.compact());
        }
        self.append(item);
        out
    }

    /// Queues a full republish after everything queued so far (one marker at most).
    pub(crate) fn push_full(&mut self) {
        self.items.retain(|(_, i)| !matches!(i, Item::Full));
        self.append(Item::Full);
    }

    fn compact(&mut self) -> Overflow {
        let mut ov = Overflow::default();
        let old = std::mem::take(&mut self.items);
        let keep = self.max / 2;
        let dels = old
            .iter()
            .filter(|(_, i)| matches!(i, Item::Del(..)))
            .count();
        let mut skip_dels = dels.saturating_sub(keep);
        for (seq, item) in old {
            match item {
                Item::Del(..) if skip_dels > 0 => {
                    skip_dels -= 1;
                    ov.removals += 1;
                }
                Item::Del(..) => self.items.push_back((seq, item)),
                Item::Add(_) => ov.upserts += 1,
                Item::Full => {}
            }
        }
        self.len = self.items.len();
        self.append(Item::Full);
        ov
    }

    /// Copies up to `max` leading decisions, stopping before a marker; or the marker alone when
    /// it leads. Each comes with its sequence number.
    pub(crate) fn peek(&self, max: usize) -> Vec<(u64, Item)> {
        let mut out = Vec::new();
        for (seq, item) in &self.items {
            if matches!(item, Item::Full) {
                if out.is_empty() {
                    out.push((*seq, Item::Full));
                }
                break;
            }
            if out.len() >= max {
                break;
            }
            out.push((*seq, item.clone()));
        }
        out
    }

    /// Drops the leading items up to and including sequence `seq` (they were written).
    pub(crate) fn ack(&mut self, seq: u64) -> usize {
        let mut n = 0;
        while let Some((s, item)) = self.items.front() {
            if *s > seq {
                break;
            }
            if !matches!(item, Item::Full) {
                self.len -= 1;
                n += 1;
            }
            self.items.pop_front();
        }
        self.stalled_since = (!self.items.is_empty()).then(std::time::Instant::now);
        n
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::block::Evidence;

    fn add(i: u8) -> Item {
        let net: IpNet = format!("192.0.2.{i}/32").parse().unwrap();
        Item::Add(BlockEntry::new(net, 1, "", Origin::Local, Evidence::Tcp))
    }

    fn del(i: u8) -> Item {
        Item::Del(format!("192.0.2.{i}/32").parse().unwrap(), Origin::Operator)
    }

    #[test]
    fn peek_ack_and_markers() {
        let mut o = Outbox::new(10);
        o.push(add(1));
        o.push(add(2));
        o.push_full();
        o.push(del(3));
        let p = o.peek(10);
        assert_eq!(p.len(), 2);
        assert_eq!(o.ack(p[1].0), 2);
        assert_eq!(o.peek(10), vec![(3, Item::Full)]);
        assert_eq!(o.ack(3), 0);
        assert_eq!(o.peek(10), vec![(4, del(3))]);
        assert_eq!(o.len(), 1);
        o.push_full();
        o.push_full();
        assert_eq!(o.items.len(), 2, "one marker at most");
    }

    #[test]
    fn overflow_keeps_removals_and_ends_with_full() {
        let mut o = Outbox::new(4);
        o.push(add(1));
        o.push(del(2));
        o.push(add(3));
        o.push(del(4));
        let ov = o.push(add(5)).unwrap();
        assert_eq!(
            ov,
            Overflow {
                upserts: 2,
                removals: 0
            }
        );
        let all: Vec<Item> = o.items.iter().map(|(_, i)| i.clone()).collect();
        assert_eq!(all, vec![del(2), del(4), Item::Full, add(5)]);
        assert_eq!(o.len(), 3);
        // Removals beyond half the buffer go too (oldest first).
        o.push(del(6));
        let ov = o.push(del(7)).unwrap();
        assert_eq!(
            ov,
            Overflow {
                upserts: 1,
                removals: 1
            }
        );
        let all: Vec<Item> = o.items.iter().map(|(_, i)| i.clone()).collect();
        assert_eq!(all, vec![del(4), del(6), Item::Full, del(7)]);
        // An ack of a written prefix that compaction rewrote drops only what was written.
        assert_eq!(o.ack(2), 0);
        assert_eq!(o.len(), 3);
    }
}
