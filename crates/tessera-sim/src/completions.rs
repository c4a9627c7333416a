//! Live completions: at most one per job, first by (instant, sequence).
//!
//! A preemption, resize or re-rating replaces a running job's completion, about once per
//! action in a loaded LAS run (2 M times for the 82k-job trace). An ordered set paid a B-tree
//! search and node shift for each; an indexed binary heap paid a sift with a position update
//! per level for every insert, pop and removal. Here a plain binary heap holds the entries
//! and the owner keeps each job's live (instant, sequence) in its own per-job state (see
//! [`Dues`]): a removal only forgets the job's entry there, which is dropped once it reaches
//! the top (the top is always live) or when dropped entries outnumber live ones (a rebuild,
//! so the heap stays within twice the live set). The order is the same: sequence numbers are
//! unique, so (instant, sequence) orders every entry totally. Keeping the live pair with the
//! rest of the job's state, not in a table of its own, saves a cache miss per completion on
//! a million-job run (the check of the next entry fetches the state its completion reads).

use std::cmp::Reverse;
use std::collections::BinaryHeap;

use tessera_model::SimTime;

/// One pending completion: (when, sequence, job index).
pub(crate) type Completion = (SimTime, u64, u32);

/// Sequence 0 marks a job with no live entry (owners number entries from 1).
pub(crate) const NONE: (SimTime, u64) = (SimTime::ZERO, 0);

/// Dropped entries tolerated beyond the live ones before a rebuild.
const SLACK: usize = 64;

/// Each job's live (when, sequence), [`NONE`] for none: the owner's per-job state.
pub(crate) trait Dues {
    fn due(&self, job: u32) -> (SimTime, u64);
}

impl Dues for [(SimTime, u64)] {
    fn due(&self, job: u32) -> (SimTime, u64) {
        self.get(job as usize).copied().unwrap_or(NONE)
    }
}

/// A binary min-heap of completions with lazy removal. The owner records each job's live
/// entry in its [`Dues`] before [`insert`](Self::insert) and clears it before
/// [`remove`](Self::remove) (or after [`pop_first`](Self::pop_first)).
#[derive(Clone, Debug, Default)]
pub(crate) struct Completions {
    /// Live entries and removed ones not yet dropped; the top is live (or the heap empty).
    heap: BinaryHeap<Reverse<Completion>>,
    /// Live entries.
    len: usize,
}

impl Completions {
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    /// The earliest completion.
    pub(crate) fn first(&self) -> Option<Completion> {
        self.heap.peek().map(|&Reverse(c)| c)
    }

    /// The live entries, in no particular order.
    pub(crate) fn live<'a>(
        &'a self,
        dues: &'a (impl Dues + ?Sized),
    ) -> impl Iterator<Item = Completion> + 'a {
        self.heap
            .iter()
            .map(|&Reverse(c)| c)
            .filter(move |&(at, seq, job)| dues.due(job) == (at, seq))
    }

    /// Drops removed entries: all of them once they outnumber the live ones by the slack,
    /// else those on top, so that the top is live.
    fn settle(&mut self, dues: &(impl Dues + ?Sized)) {
        if self.heap.len() > 2 * self.len + SLACK {
            self.heap
                .retain(|&Reverse((at, seq, job))| dues.due(job) == (at, seq));
            return;
        }
        while let Some(&Reverse((at, seq, job))) = self.heap.peek() {
            if dues.due(job) == (at, seq) {
                return;
            }
            self.heap.pop();
        }
    }

    /// Removes and returns the earliest completion (the owner then clears its due).
    pub(crate) fn pop_first(&mut self, dues: &(impl Dues + ?Sized)) -> Option<Completion> {
        let Reverse(first) = self.heap.pop()?;
        debug_assert!(self.len > 0, "the top is live");
        self.len -= 1;
        // The popped job's due still names the popped entry: any other entry of the job
        // has another sequence and is dropped as removed.
        self.settle(dues);
        Some(first)
    }

    /// Adds `entry` (its sequence non-zero), already recorded as its job's due; the job's
    /// previous entry, if any, was removed first.
    pub(crate) fn insert(&mut self, entry: Completion) {
        self.len += 1;
        self.heap.push(Reverse(entry));
    }

    /// Forgets a live entry whose due the owner has just cleared.
    pub(crate) fn remove(&mut self, dues: &(impl Dues + ?Sized)) {
        debug_assert!(self.len > 0, "removing a live entry");
        self.len -= 1;
        self.settle(dues);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::collections::BTreeSet;

    #[derive(Clone, Debug)]
    enum Op {
        Insert { job: u32, at: u64 },
        Remove { job: u32 },
        Pop,
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            4 => (0u32..40, 0u64..50).prop_map(|(job, at)| Op::Insert { job, at }),
            2 => (0u32..40).prop_map(|job| Op::Remove { job }),
            1 => Just(Op::Pop),
        ]
    }

    /// Runs `ops` on a heap and on the ordered set it replaced, kept with one entry per job
    /// as the engine keeps it, checking the same first entry, pops and lookups after every
    /// operation. With `monotone`, an insert's instant is an offset from the last instant
    /// popped, as the engine's are (never before its clock), spread over 1 to 2^40 µs so that
    /// instants span many orders of magnitude; otherwise it is taken as is (inserts before the
    /// last popped).
    fn check(ops: Vec<Op>, monotone: bool) -> Result<(), TestCaseError> {
        let mut heap = Completions::default();
        let mut set: BTreeSet<Completion> = BTreeSet::new();
        // The owner's dues, as the engine keeps them in its per-job state.
        let mut due: Vec<(SimTime, u64)> = vec![NONE; 40];
        let mut clock = 0u64;
        for (seq, op) in (1u64..).zip(ops) {
            match op {
                Op::Insert { job, at } => {
                    let (t, s) = std::mem::replace(&mut due[job as usize], NONE);
                    if s != 0 {
                        set.remove(&(t, s, job));
                        heap.remove(due.as_slice());
                    }
                    let at = if monotone { clock + at } else { at };
                    let e = (SimTime::from_micros(at), seq, job);
                    set.insert(e);
                    due[job as usize] = (e.0, e.1);
                    heap.insert(e);
                }
                Op::Remove { job } => {
                    let (t, s) = std::mem::replace(&mut due[job as usize], NONE);
                    if s != 0 {
                        prop_assert!(set.remove(&(t, s, job)));
                        heap.remove(due.as_slice());
                    }
                }
                Op::Pop => {
                    let expected = set.pop_first();
                    prop_assert_eq!(heap.pop_first(due.as_slice()), expected);
                    if let Some(e) = expected {
                        due[e.2 as usize] = NONE;
                        clock = e.0.as_micros();
                    }
                }
            }
            prop_assert_eq!(heap.first(), set.first().copied());
            prop_assert_eq!(heap.len(), set.len());
            // Removed entries never pile up past the rebuild threshold.
            prop_assert!(heap.heap.len() <= 2 * heap.len() + SLACK + 1);
            let mut live: Vec<Completion> = heap.live(due.as_slice()).collect();
            live.sort_unstable();
            prop_assert_eq!(&live, &set.iter().copied().collect::<Vec<_>>());
        }
        // Draining gives the set's order.
        let mut drained = Vec::new();
        while let Some(e) = heap.pop_first(due.as_slice()) {
            due[e.2 as usize] = NONE;
            drained.push(e);
        }
        prop_assert_eq!(drained, set.into_iter().collect::<Vec<_>>());
        Ok(())
    }

    /// Offsets of 0 (due now) up to 2^40 µs, each bit width about as likely.
    fn offset() -> impl Strategy<Value = u64> {
        (0u32..41, any::<u64>()).prop_map(|(bits, x)| if bits == 0 { 0 } else { x >> (64 - bits) })
    }

    fn monotone_op() -> impl Strategy<Value = Op> {
        prop_oneof![
            4 => (0u32..40, offset()).prop_map(|(job, at)| Op::Insert { job, at }),
            2 => (0u32..40).prop_map(|job| Op::Remove { job }),
            2 => Just(Op::Pop),
        ]
    }

    proptest! {
        /// Inserts at any instant, before the last popped included.
        #[test]
        fn orders_as_the_ordered_set(ops in prop::collection::vec(op(), 0..1500)) {
            check(ops, false)?;
        }

        /// Inserts never before the last popped, as the engine makes them.
        #[test]
        fn orders_as_the_ordered_set_when_monotone(ops in prop::collection::vec(monotone_op(), 0..1500)) {
            check(ops, true)?;
        }
    }

    #[test]
    fn an_empty_heap_pops_nothing_and_a_removed_entry_never_comes_out() {
        let mut heap = Completions::default();
        let mut due = vec![NONE; 8];
        assert_eq!(heap.pop_first(due.as_slice()), None);
        due[3] = (SimTime::from_micros(5), 1);
        heap.insert((SimTime::from_micros(5), 1, 3));
        due[4] = (SimTime::from_micros(9), 2);
        heap.insert((SimTime::from_micros(9), 2, 4));
        due[3] = NONE;
        heap.remove(due.as_slice());
        assert_eq!(heap.len(), 1);
        assert_eq!(heap.first(), Some((SimTime::from_micros(9), 2, 4)));
        assert_eq!(
            heap.pop_first(due.as_slice()),
            Some((SimTime::from_micros(9), 2, 4))
        );
        due[4] = NONE;
        assert_eq!(heap.len(), 0);
        assert_eq!(heap.pop_first(due.as_slice()), None);
    }
}
