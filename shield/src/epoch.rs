//! Two copies of a structure, one read and one written, swapped on publish: readers never wait (the left-right scheme, lean).
//!
//! Readers announce themselves on a per-reader epoch counter on its own cache line (odd while
//! inside), then load the index of the copy to read. A read costs one locked exchange (the
//! store-load fence a reader needs), two loads and one plain store; no reader writes anything
//! another reader touches. The single writer applies each operation to the copy readers are
//! not using, and on publish flips the index, waits until every reader that might still be in
//! the old copy has left (readers are short: one lookup), then replays the operations on the
//! old copy so both match again. This is the [left-right](https://docs.rs/left-right) design
//! with a cheaper read side (the crate pays two locked increments and a full fence per read).
//!
//! Safety argument, in short: the writer mutates only copy `1 - read`. After flipping `read`
//! (SeqCst) it reads every registered epoch (SeqCst); a reader whose SeqCst exchange comes
//! after that load in the total order also loads `read` after the flip, so it is in the new
//! copy; a reader seen inside (odd) is waited for until its epoch changes, which it only does
//! with a Release store after its last access to the copy. A reader registering during the
//! wait does so under the registry lock the writer holds, so it sees the flip.

use crate::util::CachePadded;
use std::cell::{Cell, UnsafeCell};
use std::marker::PhantomData;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// A structure that operations of type `O` change.
pub(crate) trait Apply<O> {
    /// Applies `op`; must do the same to both copies (deterministic).
    fn apply(&mut self, op: &O);
}

type Epoch = Arc<CachePadded<AtomicU64>>;

pub(crate) struct Shared<T> {
    copies: [UnsafeCell<T>; 2],
    /// Index of the copy readers use.
    read: AtomicUsize,
    epochs: Mutex<Vec<Epoch>>,
}

// SAFETY: copies are shared between readers (`&T`, so `T: Sync`) and mutated only by the one
// writer while no reader can reach that copy (see the module doc); they move with the Arc.
unsafe impl<T: Send + Sync> Sync for Shared<T> {}
// SAFETY: as above; `T: Send` because the last owner drops the copies on any thread.
unsafe impl<T: Send + Sync> Send for Shared<T> {}

/// The single writer (wrap it in a mutex to write from several threads).
pub(crate) struct Writer<T, O> {
    shared: Arc<Shared<T>>,
    oplog: Vec<O>,
}

impl<T: Apply<O> + Clone, O> Writer<T, O> {
    /// Two copies of `init`.
    pub(crate) fn new(init: T) -> Self {
        let shared = Arc::new(Shared {
            copies: [UnsafeCell::new(init.clone()), UnsafeCell::new(init)],
            read: AtomicUsize::new(0),
            epochs: Mutex::new(Vec::new()),
        });
        Writer {
            shared,
            oplog: Vec::new(),
        }
    }

    /// The shared part readers are made from.
    pub(crate) fn shared(&self) -> &Arc<Shared<T>> {
        &self.shared
    }

    /// Applies `op` to the write copy; readers see it after the next `publish`.
    pub(crate) fn append(&mut self, op: O) {
        let w = 1 - self.shared.read.load(Ordering::Relaxed);
        // SAFETY: copy `w` is not the read copy, and the last publish waited until every
        // reader had left it; only this writer (behind `&mut self`) touches it.
        unsafe { (*self.shared.copies[w].get()).apply(&op) };
        self.oplog.push(op);
    }

    /// True when appended operations are not yet visible to readers.
    #[cfg(test)]
    pub(crate) fn has_pending(&self) -> bool {
        !self.oplog.is_empty()
    }

    /// Makes every appended operation visible to readers; waits only for readers inside the old copy.
    pub(crate) fn publish(&mut self) {
        if self.oplog.is_empty() {
            return;
        }
        let w = 1 - self.shared.read.load(Ordering::Relaxed);
        self.shared.read.store(w, Ordering::SeqCst);
        {
            let epochs = lock(&self.shared.epochs);
            for e in epochs.iter() {
                let seen = e.load(Ordering::SeqCst);
                if seen & 1 == 0 {
                    continue;
                }
                let mut spins = 0u32;
                while e.load(Ordering::SeqCst) == seen {
                    if spins < 64 {
                        std::hint::spin_loop();
                        spins += 1;
                    } else {
                        std::thread::yield_now();
                    }
                }
            }
        }
        let old = 1 - w;
        // SAFETY: `old` was the read copy; every reader that could be in it has left (above)
        // and new readers go to `w`. Only this writer touches it now.
        let t = unsafe { &mut *self.shared.copies[old].get() };
        for op in self.oplog.drain(..) {
            t.apply(&op);
        }
    }
}

/// A reader handle for one thread (`Send`, not `Sync`).
///
/// It must not be `Sync`: two threads reading through one handle would interleave their
/// updates of the one epoch and could look "outside" while one of them still reads.
pub(crate) struct Reader<T> {
    shared: Arc<Shared<T>>,
    epoch: Epoch,
    _not_sync: PhantomData<Cell<()>>,
}

/// Leaves the read section even if the reading closure panics.
struct Leave<'a>(&'a AtomicU64, u64);

impl Drop for Leave<'_> {
    fn drop(&mut self) {
        self.0.store(self.1, Ordering::Release);
    }
}

impl<T> Reader<T> {
    /// Registers a new reader.
    pub(crate) fn new(shared: &Arc<Shared<T>>) -> Self {
        let epoch: Epoch = Arc::new(CachePadded(AtomicU64::new(0)));
        lock(&shared.epochs).push(Arc::clone(&epoch));
        Reader {
            shared: Arc::clone(shared),
            epoch,
            _not_sync: PhantomData,
        }
    }

    /// Runs `f` on the current read copy. Never waits; allocates nothing.
    #[inline]
    pub(crate) fn read<R>(&self, f: impl FnOnce(&T) -> R) -> R {
        // Only this thread writes its epoch, so a relaxed load is exact.
        let e = self.epoch.load(Ordering::Relaxed);
        // The exchange is the store-load fence: the index load below cannot pass it.
        self.epoch.swap(e + 1, Ordering::SeqCst);
        let _leave = Leave(&self.epoch, e + 2);
        let i = self.shared.read.load(Ordering::SeqCst);
        // SAFETY: the writer does not mutate copy `i` while our epoch is odd (module doc).
        f(unsafe { &*self.shared.copies[i].get() })
    }
}

impl<T> Clone for Reader<T> {
    fn clone(&self) -> Self {
        Reader::new(&self.shared)
    }
}

impl<T> Drop for Reader<T> {
    fn drop(&mut self) {
        lock(&self.shared.epochs).retain(|e| !Arc::ptr_eq(e, &self.epoch));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicBool;

    #[derive(Clone, Default)]
    struct Pair {
        a: u64,
        b: u64,
    }

    impl Apply<u64> for Pair {
        fn apply(&mut self, op: &u64) {
            self.a += op;
            self.b += op;
        }
    }

    #[test]
    fn publish_makes_ops_visible_and_copies_converge() {
        let mut w = Writer::<Pair, u64>::new(Pair::default());
        let r = Reader::new(w.shared());
        w.append(5);
        assert!(w.has_pending());
        assert_eq!(r.read(|p| p.a), 0);
        w.publish();
        assert_eq!(r.read(|p| p.a), 5);
        w.append(1);
        w.publish();
        assert_eq!(r.read(|p| (p.a, p.b)), (6, 6));
        w.append(1);
        w.publish();
        assert_eq!(r.read(|p| p.a), 7);
        drop(r);
        assert!(lock(&w.shared().epochs).is_empty());
    }

    #[test]
    fn readers_never_see_torn_state() {
        let mut w = Writer::<Pair, u64>::new(Pair::default());
        let stop = Arc::new(AtomicBool::new(false));
        let readers: Vec<_> = (0..2)
            .map(|_| {
                let r = Reader::new(w.shared());
                let stop = stop.clone();
                std::thread::spawn(move || {
                    let mut last = 0;
                    while !stop.load(Ordering::Relaxed) {
                        let (a, b) = r.read(|p| {
                            let a = p.a;
                            std::hint::spin_loop();
                            (a, p.b)
                        });
                        assert_eq!(a, b, "torn read");
                        assert!(a >= last, "went back in time");
                        last = a;
                    }
                    last
                })
            })
            .collect();
        for _ in 0..20_000 {
            w.append(1);
            w.publish();
        }
        stop.store(true, Ordering::Relaxed);
        for r in readers {
            assert!(r.join().unwrap() <= 20_000);
        }
    }

    #[test]
    fn a_panicking_reader_leaves_its_section() {
        let mut w = Writer::<Pair, u64>::new(Pair::default());
        let r = Reader::new(w.shared());
        let res =
            std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| r.read(|_| panic!("boom"))));
        assert!(res.is_err());
        w.append(1);
        w.publish(); // would spin forever if the epoch stayed odd
        assert_eq!(r.read(|p| p.a), 1);
    }
}
