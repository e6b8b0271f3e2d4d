//! Transfer slots shared fairly: `[transfer] max_in` (and the SOA checks' slots) granted in
//! turn to who waits for them — a consumed catalog, or else a primary — never first come,
//! first served. A catalog that lists thousands of members (or a primary that serves many
//! zones slowly) queued every refresh of every other zone behind its own: an unrelated
//! zone's refresh waited 46 s behind a catalog of 3,000 members (Knot the same). With turns,
//! another zone waits for one of that catalog's transfers at most, whatever it lists; with
//! no one else waiting, every slot is the catalog's (nothing idles).

use std::collections::{BTreeMap, VecDeque};
use std::net::IpAddr;
use std::sync::{Arc, Mutex};

use tokio::sync::oneshot;

/// Whose turn a wait is counted in.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Share {
    /// A member of this consumed catalog (its lower-case apex, as text).
    Catalog(Box<str>),
    /// A zone of the config, transferred from this primary.
    Primary(IpAddr),
}

/// Slots granted in turn among the shares that wait.
#[derive(Debug)]
pub struct FairSlots {
    state: Mutex<State>,
}

#[derive(Debug)]
struct State {
    free: usize,
    /// Waiters by share.
    queues: BTreeMap<Share, VecDeque<oneshot::Sender<()>>>,
    /// Shares with waiters, in turn.
    turns: VecDeque<Share>,
}

/// A slot held; given to the next in turn when dropped.
#[derive(Debug)]
pub struct Slot(Arc<FairSlots>);

impl Drop for Slot {
    fn drop(&mut self) {
        self.0.release();
    }
}

/// A wait for a slot: a slot granted to a wait abandoned before it saw it is given on.
struct Waiting {
    rx: oneshot::Receiver<()>,
    slots: Arc<FairSlots>,
    granted: bool,
}

impl Drop for Waiting {
    fn drop(&mut self) {
        if self.granted {
            return;
        }
        // Closed first: a send after it fails (the slot goes to the next waiter), one before
        // it is read here and given on — none lands in a receiver about to go.
        self.rx.close();
        if self.rx.try_recv().is_ok() {
            self.slots.release();
        }
    }
}

impl FairSlots {
    /// `n` slots.
    pub fn new(n: usize) -> Arc<FairSlots> {
        Arc::new(FairSlots {
            state: Mutex::new(State {
                free: n,
                queues: BTreeMap::new(),
                turns: VecDeque::new(),
            }),
        })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A slot now, if one is free and no one waits.
    pub fn try_acquire(self: &Arc<Self>) -> Option<Slot> {
        let mut s = self.lock();
        (s.free > 0 && s.turns.is_empty()).then(|| {
            s.free -= 1;
            Slot(Arc::clone(self))
        })
    }

    /// A slot, at once or in `share`'s turn.
    pub async fn acquire(self: &Arc<Self>, share: Share) -> Slot {
        loop {
            let rx = {
                let mut s = self.lock();
                if s.free > 0 && s.turns.is_empty() {
                    s.free -= 1;
                    return Slot(Arc::clone(self));
                }
                let (tx, rx) = oneshot::channel();
                let q = s.queues.entry(share.clone()).or_default();
                if q.is_empty() {
                    s.turns.push_back(share.clone());
                }
                s.queues.get_mut(&share).expect("just made").push_back(tx);
                rx
            };
            let mut w = Waiting {
                rx,
                slots: Arc::clone(self),
                granted: false,
            };
            if (&mut w.rx).await.is_ok() {
                w.granted = true;
                return Slot(Arc::clone(self));
            }
        }
    }

    /// Gives a slot to the next waiter in turn (one whose wait was abandoned is skipped), or
    /// back to the free ones.
    fn release(&self) {
        let mut s = self.lock();
        while let Some(share) = s.turns.pop_front() {
            let Some(q) = s.queues.get_mut(&share) else {
                continue;
            };
            let next = q.pop_front();
            if q.is_empty() {
                s.queues.remove(&share);
            } else {
                s.turns.push_back(share);
            }
            if let Some(tx) = next
                && tx.send(()).is_ok()
            {
                return;
            }
        }
        s.free += 1;
    }

    /// Waits now.
    pub fn waiting(&self) -> usize {
        self.lock().queues.values().map(VecDeque::len).sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_share_with_many_waiters_takes_its_turn_with_the_others() {
        let slots = FairSlots::new(1);
        let held = slots.try_acquire().expect("a free slot");
        let order = Arc::new(Mutex::new(Vec::new()));
        let mut tasks = Vec::new();
        let cat = || Share::Catalog("cat.test.".into());
        // A catalog's 50 members wait, then one zone of a primary.
        for i in 0..50 {
            let (s, o) = (Arc::clone(&slots), Arc::clone(&order));
            tasks.push(tokio::spawn(async move {
                let _slot = s.acquire(cat()).await;
                o.lock().unwrap().push(format!("m{i}"));
            }));
            tokio::task::yield_now().await;
        }
        let (s, o) = (Arc::clone(&slots), Arc::clone(&order));
        tasks.push(tokio::spawn(async move {
            let _slot = s.acquire(Share::Primary([192, 0, 2, 1].into())).await;
            o.lock().unwrap().push("other".into());
        }));
        tokio::task::yield_now().await;
        // A waiter that gives up is skipped.
        let gone = {
            let s = Arc::clone(&slots);
            tokio::spawn(async move { s.acquire(cat()).await })
        };
        tokio::task::yield_now().await;
        gone.abort();
        assert_eq!(slots.waiting(), 52);
        drop(held);
        for t in tasks {
            t.await.unwrap();
        }
        let order = order.lock().unwrap().clone();
        let at = order.iter().position(|o| o == "other").unwrap();
        assert!(
            at <= 1,
            "the other zone waited for {at} transfers: {order:?}"
        );
        assert_eq!(order.len(), 51);
        // Everything given back: a slot is free again.
        assert!(slots.try_acquire().is_some());
    }
}
