//! [`Tournament`]: FTF's queued jobs in rank order at any instant, without re-ranking them all.
//!
//! A queued job's FTF key is −ρ, ρ = (time in system + remaining) / isolated time: ρ grows
//! linearly with time, each job's at a rate of its own (1 / isolated), so the queue's order
//! changes as time passes. A kinetic tournament (Basch, Guibas and Hershberger's kinetic data
//! structures) keeps, in each node of a binary tree over the jobs, the best-ranked job of its
//! subtree together with a time until which that cannot change: the earlier of its children's
//! times and the time the two children's best could swap. Bringing the tree to a later instant
//! recomputes only the nodes whose time has come; a filing or a removal recomputes one path.
//!
//! Exactness: ranks are always compared with the float formula the view ranks by, at the
//! instant asked. A node's time is conservative: it is when the two jobs' real ρ come within
//! a band (`BAND` of ρ, millions of times the formula's rounding) of each other, before which
//! the float comparison cannot differ from the real one, which does not change before the
//! lines meet. Near a tie the node is recomputed at every instant asked.

use std::cell::Cell;
use std::cmp::Reverse;
use std::collections::BinaryHeap;

use tessera_model::SimTime;

/// A job's rank: (key, submit µs, id), smallest first.
pub(crate) type Rank = (u64, u64, u32);

/// FTF's key at `now`: −ρ, ρ = (time in system + remaining) / isolated time, in seconds.
/// The one formula for a job ranked from the view, from its queue entry and from its
/// progress line, so that the three order jobs alike.
pub(crate) fn fairness_key(
    now: SimTime,
    submit: SimTime,
    remaining_secs: f64,
    isolated_secs: f64,
) -> f64 {
    let in_system = now.saturating_since(submit).as_secs_f64();
    -((in_system + remaining_secs) / isolated_secs)
}

/// An `f64` as a `u64` whose order is `f64::total_cmp`'s.
pub(crate) fn ordered_bits(x: f64) -> u64 {
    let bits = x.to_bits();
    if bits >> 63 == 1 {
        !bits
    } else {
        bits | (1 << 63)
    }
}

/// What a queued job's FTF key follows from.
#[derive(Clone, Copy, Debug)]
pub(crate) struct FairLine {
    /// Submission, µs.
    pub(crate) submit: u64,
    pub(crate) id: u32,
    /// Estimated seconds of work left (constant while it waits).
    pub(crate) remaining: f64,
    /// Isolated time, seconds (positive).
    pub(crate) isolated: f64,
}

impl FairLine {
    fn key(&self, t: SimTime) -> f64 {
        fairness_key(
            t,
            SimTime::from_micros(self.submit),
            self.remaining,
            self.isolated,
        )
    }

    fn rank(&self, t: SimTime) -> Rank {
        self.rank_of(self.key(t))
    }

    fn rank_of(&self, key: f64) -> Rank {
        (ordered_bits(key), self.submit, self.id)
    }
}

/// No job (an empty leaf, or a subtree with none).
const NONE: u32 = u32::MAX;

/// A node whose best cannot change.
const NEVER: u64 = u64::MAX;

/// How close (relative to ρ) two jobs' real ρ may come before their float keys are compared
/// again at every instant: the formula rounds three times (about 1e-16 each).
const BAND: f64 = 1e-9;

/// The time (µs) until which `first`, ranked before `second` at `t` with keys `keys`, stays
/// before it: see the module's note on exactness.
fn stays_first_until(first: &FairLine, second: &FairLine, keys: (f64, f64), t: SimTime) -> u64 {
    if first.isolated == second.isolated && first.remaining == second.remaining {
        // Parallel lines from the same work: the earlier submission stays ahead, the keys
        // rounding alike (each step of the formula is monotone), and equal submissions tie
        // for ever, broken by id.
        return NEVER;
    }
    let (rho_first, rho_second) = (-keys.0, -keys.1);
    if !(rho_first.is_finite() && rho_second.is_finite()) {
        // An infinite ρ (no estimate of the job's speed) stays infinite: the order holds.
        return NEVER;
    }
    let (rate_first, rate_second) = (1.0 / first.isolated, 1.0 / second.isolated);
    let fastest = rate_first.max(rate_second);
    // Real gap minus the band at t + x: room − closing · x (ρ at most ρ + fastest · x).
    let room = (rho_first - rho_second) - BAND * rho_first.max(rho_second);
    let closing = (rate_second - rate_first) + BAND * fastest;
    let now = t.as_micros();
    if room.is_nan() || room <= 0.0 {
        return now.saturating_add(1);
    }
    if closing.is_nan() || closing <= 0.0 {
        return NEVER;
    }
    // Rounded down, and a little earlier still: an early check costs a comparison.
    let us = (room / closing * 1e6 * (1.0 - 1e-6)).floor();
    let us = if us >= 1.0 { us as u64 } else { 1 };
    now.saturating_add(us)
}

/// FTF's queued jobs of one GPU count, best first at any instant brought to with
/// [`advance`](Self::advance).
#[derive(Debug)]
pub(crate) struct Tournament {
    /// Leaves, a power of two; node `n`'s children are `2n` and `2n + 1`, leaf `l` is node
    /// `leaves + l`, the root node 1.
    leaves: usize,
    /// By node: its best job's line and leaf, and until when it holds. A node carries its
    /// best's line, so that recomputing it reads its two children, side by side, and no
    /// leaf elsewhere.
    nodes: Vec<Node>,
    /// Empty leaves.
    free: Vec<u32>,
    /// The instant the tree was last brought to.
    at: SimTime,
    /// The heap an [`InOrder`] walks with, kept between walks (a fill walks a few jobs of
    /// each bucket at every scheduling point: an allocation apiece otherwise).
    spare_heap: SpareHeap,
}

#[derive(Clone, Copy, Debug)]
struct Node {
    /// The best job's line; meaningless when `leaf` is [`NONE`].
    line: FairLine,
    /// The best job's leaf, or [`NONE`] when the subtree holds no job.
    leaf: u32,
    /// Until when (µs) the best holds; 0 after a change below it.
    until: u64,
}

impl Node {
    const EMPTY: Node = Node {
        line: FairLine {
            submit: 0,
            id: NONE,
            remaining: 0.0,
            isolated: 1.0,
        },
        leaf: NONE,
        until: NEVER,
    };

    fn job(&self) -> Option<&FairLine> {
        (self.leaf != NONE).then_some(&self.line)
    }
}

/// [`Tournament::spare_heap`].
#[derive(Default)]
struct SpareHeap(Cell<Vec<Reverse<(Rank, usize)>>>);

impl std::fmt::Debug for SpareHeap {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("SpareHeap")
    }
}

impl Default for Tournament {
    fn default() -> Self {
        Tournament::with_leaves(8)
    }
}

impl Tournament {
    fn with_leaves(leaves: usize) -> Tournament {
        let mut nodes = vec![Node::EMPTY; 2 * leaves];
        for node in &mut nodes[..leaves] {
            node.until = 0;
        }
        Tournament {
            leaves,
            nodes,
            free: (0..leaves as u32).rev().collect(),
            at: SimTime::ZERO,
            spare_heap: SpareHeap::default(),
        }
    }

    /// Whether it holds no job.
    pub(crate) fn is_empty(&self) -> bool {
        self.free.len() == self.leaves
    }

    /// Files a job; its leaf, for [`remove`](Self::remove).
    pub(crate) fn insert(&mut self, line: FairLine) -> u32 {
        if self.free.is_empty() {
            self.grow();
        }
        let Some(leaf) = self.free.pop() else {
            return NONE;
        };
        let n = self.leaves + leaf as usize;
        if let Some(node) = self.nodes.get_mut(n) {
            node.line = line;
            node.leaf = leaf;
        }
        self.changed_below(n);
        leaf
    }

    /// Takes a job out by its leaf; what it was filed with.
    pub(crate) fn remove(&mut self, leaf: u32) -> Option<FairLine> {
        let n = self.leaves + leaf as usize;
        let node = self.nodes.get_mut(n)?;
        if node.leaf == NONE {
            return None;
        }
        let line = node.line;
        node.leaf = NONE;
        self.free.push(leaf);
        self.changed_below(n);
        Some(line)
    }

    /// Marks the ancestors of `node` for recomputing (an ancestor of a marked node is marked:
    /// a node's time is at most its children's).
    fn changed_below(&mut self, node: usize) {
        let mut n = node / 2;
        while n >= 1 && self.nodes[n].until != 0 {
            self.nodes[n].until = 0;
            n /= 2;
        }
    }

    /// Doubles the leaves; the structure is recomputed at the next instant brought to.
    fn grow(&mut self) {
        let mut grown = Tournament::with_leaves(self.leaves * 2);
        for l in 0..self.leaves {
            grown.nodes[grown.leaves + l] = self.nodes[self.leaves + l];
        }
        grown.free = (self.leaves as u32..grown.leaves as u32).rev().collect();
        grown.free.extend(self.free.iter().copied());
        grown.at = self.at;
        *self = grown;
    }

    /// Brings every node's best up to instant `t` (not before the last instant).
    pub(crate) fn advance(&mut self, t: SimTime) {
        self.at = t;
        self.refresh(1, t);
    }

    fn refresh(&mut self, n: usize, t: SimTime) {
        if n >= self.leaves || self.nodes[n].until > t.as_micros() {
            return;
        }
        let (left, right) = (2 * n, 2 * n + 1);
        self.refresh(left, t);
        self.refresh(right, t);
        let (a, b) = (self.nodes[left], self.nodes[right]);
        let (best, holds) = match (a.job(), b.job()) {
            (Some(la), Some(lb)) => {
                let (ka, kb) = (la.key(t), lb.key(t));
                if la.rank_of(ka) < lb.rank_of(kb) {
                    (a, stays_first_until(la, lb, (ka, kb), t))
                } else {
                    (b, stays_first_until(lb, la, (kb, ka), t))
                }
            }
            (Some(_), None) => (a, NEVER),
            (None, _) => (b, NEVER),
        };
        self.nodes[n] = Node {
            until: holds.min(a.until).min(b.until),
            ..best
        };
    }

    /// The jobs in rank order at the instant last brought to (see [`advance`](Self::advance)).
    pub(crate) fn in_order(&self) -> InOrder<'_> {
        let mut heap = self.spare_heap.0.take();
        heap.clear();
        let mut heap = BinaryHeap::from(heap);
        if let Some(line) = self.nodes.get(1).and_then(Node::job) {
            heap.push(Reverse((line.rank(self.at), 1)));
        }
        InOrder { tree: self, heap }
    }
}

/// The jobs of a [`Tournament`] in rank order: a node's best comes out, and the best of each
/// subtree hanging off the path from it to its leaf goes in (each the best of what is left
/// there), so each job costs O(log n).
#[derive(Debug)]
pub(crate) struct InOrder<'a> {
    tree: &'a Tournament,
    heap: BinaryHeap<Reverse<(Rank, usize)>>,
}

impl Drop for InOrder<'_> {
    fn drop(&mut self) {
        self.tree
            .spare_heap
            .0
            .set(std::mem::take(&mut self.heap).into_vec());
    }
}

impl Iterator for InOrder<'_> {
    type Item = Rank;

    fn next(&mut self) -> Option<Rank> {
        let Reverse((rank, node)) = self.heap.pop()?;
        let tree = self.tree;
        let leaf = tree.nodes.get(node).map_or(NONE, |n| n.leaf);
        if leaf == NONE {
            return Some(rank);
        }
        let mut n = tree.leaves + leaf as usize;
        while n > node {
            let sibling = n ^ 1;
            if let Some(line) = tree.nodes.get(sibling).and_then(Node::job) {
                self.heap.push(Reverse((line.rank(tree.at), sibling)));
            }
            n /= 2;
        }
        Some(rank)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::collections::BTreeMap;

    fn line(id: u32, submit_s: u64, remaining: f64, isolated: f64) -> FairLine {
        FairLine {
            submit: submit_s * 1_000_000,
            id,
            remaining,
            isolated,
        }
    }

    proptest! {
        /// Against ranking every job at each instant: jobs filed and removed between instants
        /// that only move forward, with isolated times from a few (parallel lines, ties) to
        /// many, and remaining work equal to the isolated time or less (preempted jobs).
        #[test]
        fn orders_as_ranking_everything_at_each_instant(
            ops in prop::collection::vec(
                (0u8..4, 0u64..5_000, prop::sample::select(vec![60.0, 600.0, 3_600.0, 7.5, 86_400.0]), 0.0f64..1.0),
                1..300,
            ),
        ) {
            let mut tree = Tournament::default();
            let mut model: BTreeMap<u32, (u32, FairLine)> = BTreeMap::new();
            let mut now = 0u64;
            let mut next_id = 0u32;
            for (op, x, isolated, fraction) in ops {
                match op {
                    0 | 1 => {
                        // A job submitted by now, filed.
                        let l = line(next_id, now.saturating_sub(x % 3_000), isolated * fraction.max(0.01), isolated);
                        let leaf = tree.insert(l);
                        model.insert(next_id, (leaf, l));
                        next_id += 1;
                    }
                    2 => {
                        let victim = model.keys().nth(x as usize % model.len().max(1)).copied();
                        if let Some(id) = victim {
                            let (leaf, l) = model.remove(&id).unwrap();
                            prop_assert_eq!(tree.remove(leaf).map(|r| r.id), Some(l.id));
                        }
                    }
                    _ => {
                        now += x;
                        let t = SimTime::from_secs(now);
                        tree.advance(t);
                        let mut expected: Vec<Rank> = model.values().map(|(_, l)| l.rank(t)).collect();
                        expected.sort_unstable();
                        let got: Vec<Rank> = tree.in_order().collect();
                        prop_assert_eq!(got, expected);
                    }
                }
            }
        }
    }

    #[test]
    fn a_steeper_line_overtakes_at_the_crossing() {
        // Job 0 waits an hour of a 10 h job (ρ rises slowly); job 1, a 1 h job, arrives then.
        let mut tree = Tournament::default();
        tree.insert(line(0, 0, 36_000.0, 36_000.0));
        tree.insert(line(1, 3_600, 3_600.0, 3_600.0));
        // At 3,600 s: ρ0 = 1.1, ρ1 = 1; they meet when (t + 36,000) / 36,000 = t' / 3,600 + 1
        // with t' = t − 3,600: at t = 4,000 s.
        for (secs, first) in [(3_600, 0), (3_999, 0), (4_001, 1), (100_000, 1)] {
            tree.advance(SimTime::from_secs(secs));
            assert_eq!(
                tree.in_order().next().map(|r| r.2),
                Some(first),
                "at {secs} s"
            );
        }
    }
}
