//! [`RankSet`]: the ordered set a policy's queue keeps its ranks in.
//!
//! The queues of the baselines see one access pattern most of the time: ranks join at the
//! back (FIFO's arrivals; LAS's preempted jobs, which have attained the most service of
//! anything queued) and leave from the front (the best-ranked jobs start). A B-tree pays a
//! root-to-leaf search for each, scanning every key of every node on the way to the back.
//! This set keeps short sorted runs ("chunks") in a deque, so that both ends take O(1) and a
//! rank anywhere else costs two binary searches and a shift within one chunk.

use std::collections::VecDeque;

/// Ranks per chunk at most. A split leaves two halves; a removal merges a chunk into its
/// neighbour once both fit in half a chunk, so chunks stay over a quarter full on average.
const CHUNK: usize = 64;

/// A sorted set of distinct `T`, as `BTreeSet<T>` for the operations a queue needs (insert,
/// remove, first, in-order iteration), fast at both ends.
#[derive(Clone, Debug)]
pub(crate) struct RankSet<T> {
    /// Non-empty sorted runs, in order: every rank of a chunk is below every rank of the next.
    chunks: VecDeque<VecDeque<T>>,
    /// Each chunk's largest rank, searched to find a rank's chunk without visiting chunks.
    maxes: VecDeque<T>,
    /// The last chunk emptied, kept for the next one made: a queue that drains and fills
    /// again (every arrival starting at once) would otherwise allocate a chunk per job.
    spare: Option<VecDeque<T>>,
}

impl<T> Default for RankSet<T> {
    fn default() -> Self {
        RankSet {
            chunks: VecDeque::new(),
            maxes: VecDeque::new(),
            spare: None,
        }
    }
}

/// In-order iterator over a [`RankSet`]: a position, small enough to keep one per bucket in
/// a scheduling pass.
#[derive(Clone, Debug)]
pub(crate) struct Iter<'a, T> {
    set: &'a RankSet<T>,
    chunk: usize,
    pos: usize,
}

impl<'a, T> Iterator for Iter<'a, T> {
    type Item = &'a T;

    fn next(&mut self) -> Option<&'a T> {
        loop {
            let chunk = self.set.chunks.get(self.chunk)?;
            if let Some(v) = chunk.get(self.pos) {
                self.pos += 1;
                return Some(v);
            }
            self.chunk += 1;
            self.pos = 0;
        }
    }
}

impl<T: Ord + Copy> RankSet<T> {
    pub(crate) fn is_empty(&self) -> bool {
        self.chunks.is_empty()
    }

    /// The ranks in order.
    pub(crate) fn iter(&self) -> Iter<'_, T> {
        Iter {
            set: self,
            chunk: 0,
            pos: 0,
        }
    }

    /// The chunk that holds `value` or would: the first whose largest rank is at least
    /// `value` (the last chunk for a value above all). `None` when empty.
    fn chunk_of(&self, value: &T) -> Option<usize> {
        let last = self.maxes.len().checked_sub(1)?;
        Some(self.maxes.partition_point(|max| max < value).min(last))
    }

    /// Records chunk `c`'s largest rank after a change to it.
    fn sync_max(&mut self, c: usize) {
        if let (Some(max), Some(slot)) = (
            self.chunks.get(c).and_then(|chunk| chunk.back()),
            self.maxes.get_mut(c),
        ) {
            *slot = *max;
        }
    }

    /// Adds `value`; false if it was there already.
    pub(crate) fn insert(&mut self, value: T) -> bool {
        match self.maxes.back() {
            None => {
                let chunk = self.chunk_of_one(value);
                self.chunks.push_back(chunk);
                self.maxes.push_back(value);
                return true;
            }
            // The queue's common case: a rank after all others.
            Some(max) if *max < value => {
                match self.chunks.back_mut() {
                    Some(back) if back.len() < CHUNK => back.push_back(value),
                    _ => {
                        let chunk = self.chunk_of_one(value);
                        self.chunks.push_back(chunk);
                        self.maxes.push_back(value);
                    }
                }
                if let Some(max) = self.maxes.back_mut() {
                    *max = value;
                }
                return true;
            }
            Some(_) => {}
        }
        let Some(c) = self.chunk_of(&value) else {
            return false;
        };
        let Some(chunk) = self.chunks.get_mut(c) else {
            return false;
        };
        let pos = match chunk.binary_search(&value) {
            Ok(_) => return false,
            Err(pos) => pos,
        };
        if chunk.len() < CHUNK {
            chunk.insert(pos, value);
        } else {
            let mut upper = chunk.split_off(CHUNK / 2);
            upper.reserve_exact(CHUNK - upper.len());
            if pos <= CHUNK / 2 {
                chunk.insert(pos, value);
            } else {
                upper.insert(pos - CHUNK / 2, value);
            }
            let upper_max = upper.back().copied().unwrap_or(value);
            self.chunks.insert(c + 1, upper);
            self.maxes.insert(c + 1, upper_max);
        }
        self.sync_max(c);
        true
    }

    /// Removes `value`; false if it was not there.
    pub(crate) fn remove(&mut self, value: &T) -> bool {
        // The queue's common case: the best-ranked job leaves.
        let c = match self.chunks.front().and_then(VecDeque::front) {
            Some(first) if first == value => 0,
            _ => match self.chunk_of(value) {
                Some(c) => c,
                None => return false,
            },
        };
        let Some(chunk) = self.chunks.get_mut(c) else {
            return false;
        };
        if chunk.front() == Some(value) {
            chunk.pop_front();
        } else {
            match chunk.binary_search(value) {
                Ok(pos) => {
                    chunk.remove(pos);
                }
                Err(_) => return false,
            }
        }
        let len = chunk.len();
        if len == 0 {
            // Mostly the front chunk (the best-ranked job left): popped without a general
            // removal's shifting.
            let empty = if c == 0 {
                self.maxes.pop_front();
                self.chunks.pop_front()
            } else {
                self.maxes.remove(c);
                self.chunks.remove(c)
            };
            if let Some(empty) = empty {
                self.spare = Some(empty);
            }
        } else {
            self.sync_max(c);
            if len < CHUNK / 4 {
                self.merge_small(c);
            }
        }
        true
    }

    /// Merges chunk `c` with a neighbour when both fit in half a chunk.
    fn merge_small(&mut self, c: usize) {
        let len = |s: &Self, i: usize| s.chunks.get(i).map_or(usize::MAX, VecDeque::len);
        let with = if len(self, c + 1) <= CHUNK / 2 - len(self, c) {
            c + 1
        } else if c > 0 && len(self, c - 1) <= CHUNK / 2 - len(self, c) {
            c - 1
        } else {
            return;
        };
        let (lower, upper) = (c.min(with), c.max(with));
        if let Some(mut moved) = self.chunks.remove(upper) {
            self.maxes.remove(upper);
            if let Some(keep) = self.chunks.get_mut(lower) {
                keep.append(&mut moved);
            }
            self.spare = Some(moved);
            self.sync_max(lower);
        }
    }
}

impl<T> RankSet<T> {
    /// A chunk holding `value`: the spare one if there is one.
    fn chunk_of_one(&mut self, value: T) -> VecDeque<T> {
        let mut chunk = self
            .spare
            .take()
            .unwrap_or_else(|| VecDeque::with_capacity(CHUNK));
        chunk.clear();
        chunk.push_back(value);
        chunk
    }
}

impl<T: Ord + Copy> FromIterator<T> for RankSet<T> {
    fn from_iter<I: IntoIterator<Item = T>>(iter: I) -> Self {
        let mut set = RankSet::default();
        for v in iter {
            set.insert(v);
        }
        set
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::collections::BTreeSet;

    fn check(set: &RankSet<u32>, model: &BTreeSet<u32>) -> Result<(), TestCaseError> {
        prop_assert_eq!(set.is_empty(), model.is_empty());
        prop_assert_eq!(set.iter().next(), model.first());
        prop_assert_eq!(
            set.iter().copied().collect::<Vec<_>>(),
            model.iter().copied().collect::<Vec<_>>()
        );
        for (a, b) in set.chunks.iter().zip(set.chunks.iter().skip(1)) {
            prop_assert!(!a.is_empty() && a.len() <= CHUNK && a.back() < b.front());
        }
        let backs: Vec<u32> = set
            .chunks
            .iter()
            .filter_map(|c| c.back().copied())
            .collect();
        prop_assert_eq!(set.maxes.iter().copied().collect::<Vec<_>>(), backs);
        Ok(())
    }

    proptest! {
        /// Against `BTreeSet` under random inserts and removals, from a narrow range (many
        /// duplicates and misses) and with runs at both ends (the queue's pattern).
        #[test]
        fn behaves_as_the_ordered_set(
            ops in prop::collection::vec((0u8..6, 0u32..400), 0..600),
        ) {
            let mut set = RankSet::default();
            let mut model = BTreeSet::new();
            let mut back = 1_000u32;
            for (op, v) in ops {
                match op {
                    0 | 1 => prop_assert_eq!(set.insert(v), model.insert(v)),
                    2 => prop_assert_eq!(set.remove(&v), model.remove(&v)),
                    3 => {
                        back += 1;
                        prop_assert_eq!(set.insert(back), model.insert(back));
                    }
                    4 => {
                        let first = model.first().copied();
                        if let Some(f) = first {
                            prop_assert!(set.remove(&f));
                            model.remove(&f);
                        }
                    }
                    _ => {
                        // Remove a rank from the middle.
                        let mid = model.iter().nth(model.len() / 2).copied();
                        if let Some(m) = mid {
                            prop_assert!(set.remove(&m));
                            model.remove(&m);
                        }
                    }
                }
                check(&set, &model)?;
            }
        }
    }

    #[test]
    fn splits_and_merges_keep_the_order() {
        let mut set = RankSet::default();
        // Fill several chunks from the back, then insert into the middle of full ones.
        for v in (0..1_000u32).map(|v| v * 2) {
            assert!(set.insert(v));
        }
        for v in (0..1_000u32).map(|v| v * 2 + 1) {
            assert!(set.insert(v));
        }
        assert_eq!(set.iter().count(), 2_000);
        assert!(set.iter().copied().eq(0..2_000));
        for v in 0..1_990u32 {
            assert!(set.remove(&v));
        }
        assert!(set.iter().copied().eq(1_990..2_000));
        assert!(set.chunks.len() <= 2);
        assert!(!set.remove(&5));
    }
}
