//! Live completions: at most one per job, first by (instant, sequence).
//!
//! A preemption, resize or re-rating replaces a running job's completion, about once per
//! action in a loaded LAS run (2 M times for the 82k-job trace). An ordered set paid a B-tree
//! search and node shift for each; an indexed binary heap paid a sift with a position update
//! per level for every insert, pop and removal. Here a plain binary heap holds the entries
//! and each job's live (instant, sequence) is kept beside it: a removal only forgets the
//! job's entry, which is dropped once it reaches the top (the top is always live) or when
//! dropped entries outnumber live ones (a rebuild, so the heap stays within twice the live
//! set). The order is the same: sequence numbers are unique, so (instant, sequence) orders
//! every entry totally.

use std::cmp::Reverse;
use std::collections::BinaryHeap;

use tessera_model::SimTime;

/// One pending completion: (when, sequence, job index).
pub(crate) type Completion = (SimTime, u64, u32);

/// Sequence 0 marks a job with no live entry (the engine numbers entries from 1).
const NONE: (SimTime, u64) = (SimTime::ZERO, 0);

/// Dropped entries tolerated beyond the live ones before a rebuild.
const SLACK: usize = 64;

/// A binary min-heap of completions with lazy removal, keyed by job index.
#[derive(Clone, Debug, Default)]
pub(crate) struct Completions {
    /// Live entries and removed ones not yet dropped; the top is live (or the heap empty).
    heap: BinaryHeap<Reverse<Completion>>,
    /// Each job's live (when, sequence), by job index ([`NONE`] for none).
    live: Vec<(SimTime, u64)>,
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

    /// The pending (when, sequence) of `job`, if any.
    pub(crate) fn get(&self, job: u32) -> Option<(SimTime, u64)> {
        self.live.get(job as usize).copied().filter(|d| d.1 != 0)
    }

    fn is_live(&self, (at, seq, job): Completion) -> bool {
        self.live.get(job as usize) == Some(&(at, seq))
    }

    /// Drops removed entries: all of them once they outnumber the live ones by the slack,
    /// else those on top, so that the top is live.
    fn settle(&mut self) {
        if self.heap.len() > 2 * self.len + SLACK {
            let live = &self.live;
            self.heap
                .retain(|&Reverse((t, s, j))| live.get(j as usize) == Some(&(t, s)));
            return;
        }
        while let Some(&Reverse(top)) = self.heap.peek() {
            if self.is_live(top) {
                return;
            }
            self.heap.pop();
        }
    }

    /// Removes and returns the earliest completion.
    pub(crate) fn pop_first(&mut self) -> Option<Completion> {
        let Reverse(first) = self.heap.pop()?;
        if let Some(d) = self.live.get_mut(first.2 as usize) {
            *d = NONE;
        }
        self.len -= 1;
        self.settle();
        Some(first)
    }

    /// Adds `entry` (its sequence non-zero), replacing its job's pending one if there is one.
    pub(crate) fn insert(&mut self, entry: Completion) {
        let job = entry.2 as usize;
        self.remove(entry.2);
        if self.live.len() <= job {
            self.live.resize(job + 1, NONE);
        }
        self.live[job] = (entry.0, entry.1);
        self.len += 1;
        self.heap.push(Reverse(entry));
    }

    /// Removes `job`'s pending completion; returns it if there was one.
    pub(crate) fn remove(&mut self, job: u32) -> Option<Completion> {
        let (at, seq) = self.get(job)?;
        self.live[job as usize] = NONE;
        self.len -= 1;
        self.settle();
        Some((at, seq, job))
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
        let mut due: Vec<Option<(SimTime, u64)>> = vec![None; 40];
        let mut clock = 0u64;
        for (seq, op) in (1u64..).zip(ops) {
            match op {
                Op::Insert { job, at } => {
                    if let Some((t, s)) = due[job as usize].take() {
                        set.remove(&(t, s, job));
                    }
                    let at = if monotone { clock + at } else { at };
                    let e = (SimTime::from_micros(at), seq, job);
                    set.insert(e);
                    due[job as usize] = Some((e.0, e.1));
                    heap.insert(e);
                }
                Op::Remove { job } => {
                    let expected = due[job as usize].take().map(|(t, s)| (t, s, job));
                    if let Some(e) = expected {
                        set.remove(&e);
                    }
                    prop_assert_eq!(heap.remove(job), expected);
                }
                Op::Pop => {
                    let expected = set.pop_first();
                    if let Some(e) = expected {
                        due[e.2 as usize] = None;
                        clock = e.0.as_micros();
                    }
                    prop_assert_eq!(heap.pop_first(), expected);
                }
            }
            prop_assert_eq!(heap.first(), set.first().copied());
            prop_assert_eq!(heap.len(), set.len());
            // Removed entries never pile up past the rebuild threshold.
            prop_assert!(heap.heap.len() <= 2 * heap.len() + SLACK + 1);
            for job in 0..40u32 {
                prop_assert_eq!(heap.get(job), due[job as usize]);
            }
        }
        // Draining gives the set's order.
        let drained: Vec<_> = std::iter::from_fn(|| heap.pop_first()).collect();
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
    fn unknown_jobs_are_absent() {
        let mut heap = Completions::default();
        assert_eq!(heap.remove(7), None);
        assert_eq!(heap.get(7), None);
        assert_eq!(heap.pop_first(), None);
        heap.insert((SimTime::from_micros(5), 1, 3));
        assert_eq!(heap.get(7), None);
        assert_eq!(heap.remove(3), Some((SimTime::from_micros(5), 1, 3)));
        assert_eq!(heap.len(), 0);
    }
}
