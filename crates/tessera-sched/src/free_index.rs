//! The nodes of one node group that have whole-free GPUs, by how many.
//!
//! Placement asks two things of it: the lowest free-GPU count at least k that some node has
//! (first fit) or the highest below a bound (emptiest first), and the nodes with exactly that
//! count in node order. Every start and stop moves a node between two counts. One bitset over
//! the group's nodes per count does each move in O(1) and each question in O(GPUs per node)
//! plus a scan of words; an ordered set of (count, node) paid two B-tree updates per move.

/// Nodes by free-GPU count for one node group (nodes are numbered cluster-wide; the group's
/// are `base..base + span`).
#[derive(Clone, Debug, Default)]
pub struct FreeIndex {
    base: u32,
    span: u32,
    /// Words per count: `span` bits.
    words: usize,
    /// Count `v`'s bitset is `bits[v * words..(v + 1) * words]`; count 0 is never set.
    bits: Vec<u64>,
    /// Nodes per count.
    nodes: Vec<u32>,
    /// Bit `v` set when some node has count `v`, for counts below 64: questions visit only
    /// the counts nodes have (a handful) instead of every count up to the node size.
    held: u64,
}

impl FreeIndex {
    /// An index over nodes `base..base + span`, empty.
    pub fn new(base: u32, span: u32) -> FreeIndex {
        FreeIndex {
            base,
            span,
            words: (span as usize).div_ceil(64),
            bits: Vec::new(),
            nodes: Vec::new(),
            held: 0,
        }
    }

    /// An index that holds nothing, for a group that does not exist.
    pub const fn empty() -> FreeIndex {
        FreeIndex {
            base: 0,
            span: 0,
            words: 0,
            bits: Vec::new(),
            nodes: Vec::new(),
            held: 0,
        }
    }

    fn slot(&self, node: u32) -> Option<(usize, u64)> {
        let i = node.checked_sub(self.base).filter(|&i| i < self.span)? as usize;
        Some((i / 64, 1u64 << (i % 64)))
    }

    /// Records that `node` has `free` whole-free GPUs (nothing for 0 or a node outside the
    /// group). The node must not be recorded at another count.
    pub fn insert(&mut self, free: u32, node: u32) {
        if let Some((word, bit)) = self.slot(node) {
            self.set(free, word, bit);
        }
    }

    fn set(&mut self, free: u32, word: usize, bit: u64) {
        if free == 0 {
            return;
        }
        let level = free as usize;
        if self.nodes.len() <= level {
            self.nodes.resize(level + 1, 0);
            self.bits.resize((level + 1) * self.words, 0);
        }
        let w = &mut self.bits[level * self.words + word];
        if *w & bit == 0 {
            *w |= bit;
            self.nodes[level] += 1;
            if level < 64 {
                self.held |= 1 << level;
            }
        }
    }

    /// Forgets that `node` has `free` whole-free GPUs.
    pub fn remove(&mut self, free: u32, node: u32) {
        if let Some((word, bit)) = self.slot(node) {
            self.clear(free, word, bit);
        }
    }

    /// Moves `node` from `from` whole-free GPUs to `to`: [`remove`](Self::remove) then
    /// [`insert`](Self::insert), locating the node once (every start and stop moves one).
    pub fn relocate(&mut self, from: u32, to: u32, node: u32) {
        let Some((word, bit)) = self.slot(node) else {
            return;
        };
        self.clear(from, word, bit);
        self.set(to, word, bit);
    }

    fn clear(&mut self, free: u32, word: usize, bit: u64) {
        let level = free as usize;
        if let Some(w) = self.bits.get_mut(level * self.words + word) {
            if *w & bit != 0 {
                *w &= !bit;
                self.nodes[level] -= 1;
                if self.nodes[level] == 0 && level < 64 {
                    self.held &= !(1 << level);
                }
            }
        }
    }

    /// The counts of at least `from` (at least 1) that some node has, as a bitmask, when
    /// every count is below 64 (`None` for larger nodes: then the counts are walked).
    fn held_from(&self, from: usize) -> Option<u64> {
        (self.nodes.len() <= 64).then(|| {
            if from >= 64 {
                0
            } else {
                self.held & (u64::MAX << from)
            }
        })
    }

    /// The lowest count of at least `at_least` that some node has.
    pub fn level_at_least(&self, at_least: u32) -> Option<u32> {
        let from = (at_least as usize).max(1);
        if let Some(held) = self.held_from(from) {
            return (held != 0).then(|| held.trailing_zeros());
        }
        (from..self.nodes.len())
            .find(|&v| self.nodes[v] > 0)
            .map(|v| v as u32)
    }

    /// The highest count below `below` that some node has.
    pub fn level_below(&self, below: u32) -> Option<u32> {
        let to = (below as usize).min(self.nodes.len());
        if let Some(held) = self.held_from(1) {
            let held = if to >= 64 {
                held
            } else {
                held & ((1u64 << to) - 1)
            };
            return (held != 0).then(|| 63 - held.leading_zeros());
        }
        (1..to).rev().find(|&v| self.nodes[v] > 0).map(|v| v as u32)
    }

    /// The nodes with exactly `free` whole-free GPUs, in node order.
    pub fn nodes_at(&self, free: u32) -> impl Iterator<Item = u32> + '_ {
        let level = free as usize;
        let words = if level < self.nodes.len() {
            &self.bits[level * self.words..(level + 1) * self.words]
        } else {
            &[]
        };
        let base = self.base;
        words.iter().enumerate().flat_map(move |(w, &word)| {
            let mut rest = word;
            std::iter::from_fn(move || {
                if rest == 0 {
                    return None;
                }
                let b = rest.trailing_zeros();
                rest &= rest - 1;
                Some(base + (w as u32) * 64 + b)
            })
        })
    }

    /// The lowest-numbered node with at least `at_least` whole-free GPUs that `accept`
    /// takes: the counts' bitsets are OR-ed a word at a time, so a first fit reads each
    /// word of the group once instead of walking every count.
    pub fn first_at_least(
        &self,
        at_least: u32,
        mut accept: impl FnMut(u32) -> bool,
    ) -> Option<u32> {
        let from = (at_least as usize).max(1);
        if from >= self.nodes.len() {
            return None;
        }
        let held = self.held_from(from);
        for w in 0..self.words {
            let mut word = 0u64;
            if let Some(mut levels) = held {
                while levels != 0 {
                    let level = levels.trailing_zeros() as usize;
                    levels &= levels - 1;
                    word |= self.bits.get(level * self.words + w).copied().unwrap_or(0);
                }
            } else {
                for level in from..self.nodes.len() {
                    if self.nodes[level] > 0 {
                        word |= self.bits.get(level * self.words + w).copied().unwrap_or(0);
                    }
                }
            }
            while word != 0 {
                let b = word.trailing_zeros();
                word &= word - 1;
                let n = self.base + (w as u32) * 64 + b;
                if accept(n) {
                    return Some(n);
                }
            }
        }
        None
    }

    /// Every (count, node), by count then node.
    pub fn entries(&self) -> impl Iterator<Item = (u32, u32)> + '_ {
        (1..self.nodes.len() as u32).flat_map(move |v| self.nodes_at(v).map(move |n| (v, n)))
    }
}

/// Equal when they hold the same (count, node) pairs, however their storage grew.
impl PartialEq for FreeIndex {
    fn eq(&self, other: &FreeIndex) -> bool {
        self.entries().eq(other.entries())
    }
}

impl Eq for FreeIndex {}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::collections::BTreeSet;

    proptest! {
        /// Against the ordered set of (count, node) it replaced, under random moves of nodes
        /// between counts: the same answers to every question placement asks.
        #[test]
        fn answers_as_the_ordered_set(
            span in 1u32..150,
            moves in prop::collection::vec((0u32..150, 0u32..10), 0..200),
            probes in prop::collection::vec(0u32..12, 1..8),
            big_nodes in any::<bool>(),
        ) {
            // Counts past 63 (nodes of 64 GPUs or more) take the walk over counts instead of
            // the bitmask of held counts.
            let scale = if big_nodes { 9 } else { 1 };
            let base = 7;
            let mut index = FreeIndex::new(base, span);
            let mut set: BTreeSet<(u32, u32)> = BTreeSet::new();
            let mut free = vec![0u32; span as usize];
            let probes: Vec<u32> = probes.iter().map(|p| p * scale).collect();
            for (n, f) in moves {
                let f = f * scale;
                let n = n % span;
                let node = base + n;
                // Half the moves as one relocation, half as a removal and an insertion.
                if n % 2 == 0 {
                    index.relocate(free[n as usize], f, node);
                } else {
                    index.remove(free[n as usize], node);
                    index.insert(f, node);
                }
                set.remove(&(free[n as usize], node));
                free[n as usize] = f;
                if f > 0 {
                    set.insert((f, node));
                }
                prop_assert_eq!(index.entries().collect::<Vec<_>>(), set.iter().copied().collect::<Vec<_>>());
                for &p in &probes {
                    let at_least = set.range((p.max(1), 0)..).next().map(|e| e.0);
                    prop_assert_eq!(index.level_at_least(p), at_least);
                    let below = set.range(..(p, 0)).next_back().map(|e| e.0);
                    prop_assert_eq!(index.level_below(p), below);
                    let at: Vec<u32> = set.range((p, 0)..=(p, u32::MAX)).map(|e| e.1).collect();
                    prop_assert_eq!(index.nodes_at(p).collect::<Vec<_>>(), at);
                    // The lowest node with at least p free that an arbitrary test accepts.
                    let odd = |n: u32| !n.is_multiple_of(3);
                    let first = set
                        .iter()
                        .filter(|&&(f, n)| f >= p.max(1) && odd(n))
                        .map(|&(_, n)| n)
                        .min();
                    prop_assert_eq!(index.first_at_least(p, odd), first);
                }
            }
        }
    }

    #[test]
    fn nodes_outside_the_group_and_empty_counts_are_ignored() {
        let mut index = FreeIndex::new(10, 4);
        index.insert(3, 9);
        index.insert(3, 14);
        index.insert(0, 11);
        assert_eq!(index.entries().count(), 0);
        index.insert(2, 13);
        assert_eq!(index.entries().collect::<Vec<_>>(), vec![(2, 13)]);
        index.remove(5, 13);
        assert_eq!(index.level_at_least(0), Some(2));
        assert_eq!(FreeIndex::empty().level_below(u32::MAX), None);
    }
}
