//! Live completions: at most one per job, first by (instant, sequence).
//!
//! A preemption, resize or re-rating replaces a running job's completion, about once per
//! action in a loaded LAS run (2 M times for the 82k-job trace). An ordered set paid a B-tree
//! search and node shift for each; an indexed binary heap pays a sift over a few levels of a
//! flat array and finds a job's entry through its position, with the same order (sequence
//! numbers are unique, so (instant, sequence) orders every entry totally).

use tessera_model::SimTime;

/// One pending completion: (when, sequence, job index).
pub(crate) type Completion = (SimTime, u64, u32);

/// No entry for this job.
const ABSENT: u32 = u32::MAX;

/// An indexed binary min-heap of completions keyed by job index.
#[derive(Clone, Debug, Default)]
pub(crate) struct Completions {
    heap: Vec<Completion>,
    /// Position of each job's entry in `heap`, by job index ([`ABSENT`] for none).
    pos: Vec<u32>,
}

impl Completions {
    pub(crate) fn len(&self) -> usize {
        self.heap.len()
    }

    /// The earliest completion.
    pub(crate) fn first(&self) -> Option<Completion> {
        self.heap.first().copied()
    }

    /// The pending (when, sequence) of `job`, if any.
    pub(crate) fn get(&self, job: u32) -> Option<(SimTime, u64)> {
        let &p = self.pos.get(job as usize)?;
        self.heap.get(p as usize).map(|&(t, s, _)| (t, s))
    }

    /// Removes and returns the earliest completion.
    pub(crate) fn pop_first(&mut self) -> Option<Completion> {
        let first = self.first()?;
        self.remove_at(0);
        Some(first)
    }

    /// Adds `entry`, replacing its job's pending one if there is one.
    pub(crate) fn insert(&mut self, entry: Completion) {
        let job = entry.2 as usize;
        self.remove(entry.2);
        if self.pos.len() <= job {
            self.pos.resize(job + 1, ABSENT);
        }
        self.heap.push(entry);
        let at = self.heap.len() - 1;
        self.pos[job] = at as u32;
        self.sift_up(at);
    }

    /// Removes `job`'s pending completion; returns it if there was one.
    pub(crate) fn remove(&mut self, job: u32) -> Option<Completion> {
        let p = *self.pos.get(job as usize)?;
        let entry = *self.heap.get(p as usize)?;
        self.remove_at(p as usize);
        Some(entry)
    }

    fn remove_at(&mut self, at: usize) {
        let Some(removed) = self.heap.get(at).copied() else {
            return;
        };
        if let Some(p) = self.pos.get_mut(removed.2 as usize) {
            *p = ABSENT;
        }
        let Some(last) = self.heap.pop() else {
            return;
        };
        if at == self.heap.len() {
            return; // the removed entry was the last one
        }
        self.heap[at] = last;
        self.pos[last.2 as usize] = at as u32;
        if at > 0 && key(&last) < key(&self.heap[(at - 1) / 2]) {
            self.sift_up(at);
        } else {
            self.sift_down(at);
        }
    }

    fn sift_up(&mut self, mut at: usize) {
        let entry = self.heap[at];
        while at > 0 {
            let parent = (at - 1) / 2;
            let above = self.heap[parent];
            if key(&above) <= key(&entry) {
                break;
            }
            self.heap[at] = above;
            self.pos[above.2 as usize] = at as u32;
            at = parent;
        }
        self.heap[at] = entry;
        self.pos[entry.2 as usize] = at as u32;
    }

    fn sift_down(&mut self, mut at: usize) {
        let entry = self.heap[at];
        let n = self.heap.len();
        loop {
            let left = 2 * at + 1;
            if left >= n {
                break;
            }
            let right = left + 1;
            let child = if right < n && key(&self.heap[right]) < key(&self.heap[left]) {
                right
            } else {
                left
            };
            let below = self.heap[child];
            if key(&entry) <= key(&below) {
                break;
            }
            self.heap[at] = below;
            self.pos[below.2 as usize] = at as u32;
            at = child;
        }
        self.heap[at] = entry;
        self.pos[entry.2 as usize] = at as u32;
    }
}

/// The order of entries: by instant, then by sequence (unique per entry).
fn key(c: &Completion) -> (SimTime, u64) {
    (c.0, c.1)
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

    proptest! {
        /// Against the ordered set it replaced, kept with one entry per job as the engine
        /// keeps it: the same first entry, pops and lookups after every operation.
        #[test]
        fn orders_as_the_ordered_set(ops in prop::collection::vec(op(), 0..300)) {
            let mut heap = Completions::default();
            let mut set: BTreeSet<Completion> = BTreeSet::new();
            let mut due: Vec<Option<(SimTime, u64)>> = vec![None; 40];
            for (seq, op) in (1u64..).zip(ops) {
                match op {
                    Op::Insert { job, at } => {
                        if let Some((t, s)) = due[job as usize].take() {
                            set.remove(&(t, s, job));
                        }
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
                        }
                        prop_assert_eq!(heap.pop_first(), expected);
                    }
                }
                prop_assert_eq!(heap.first(), set.first().copied());
                prop_assert_eq!(heap.len(), set.len());
                for job in 0..40u32 {
                    prop_assert_eq!(heap.get(job), due[job as usize]);
                }
            }
            // Draining gives the set's order.
            let drained: Vec<_> = std::iter::from_fn(|| heap.pop_first()).collect();
            prop_assert_eq!(drained, set.into_iter().collect::<Vec<_>>());
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
