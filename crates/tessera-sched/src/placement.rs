//! Placement: a [`Ledger`] of free resources per node, and consolidated first-fit placement
//! with GPU-proportional CPU and memory.
//!
//! A job stays within one node group (one GPU model and node shape). Within the group it goes
//! on a single node when one can hold it (first fit, in node order); otherwise on the fewest
//! nodes, taking the emptiest nodes first. On each node it gets CPU and memory in proportion
//! to the GPUs it holds there (the default of production schedulers), or its explicit request
//! split in proportion to GPUs.

use smallvec::SmallVec;
use tessera_model::{
    Allocation, Bytes, Cluster, GpuModelId, MilliCpu, NodeGroup, NodeId, NodeShare, Resources,
    TrainingJob,
};

/// What a placement reads of a job: two jobs with the same demand get the same placement
/// from the same free resources. A policy that keeps demands of its own places a job
/// without reading its spec (a few cache misses per job on a deep queue).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Demand<'a> {
    /// GPUs, whole.
    pub gpus: u32,
    /// GPU models the job may run on (empty: any).
    pub gpu_types: &'a [GpuModelId],
    /// Explicit CPU request (else GPU-proportional).
    pub cpu: Option<MilliCpu>,
    /// Explicit memory request (else GPU-proportional).
    pub memory: Option<Bytes>,
}

impl<'a> From<&'a TrainingJob> for Demand<'a> {
    fn from(job: &'a TrainingJob) -> Demand<'a> {
        Demand {
            gpus: job.gpus,
            gpu_types: &job.gpu_types,
            cpu: job.cpu,
            memory: job.memory,
        }
    }
}

use crate::free_index::FreeIndex;

use crate::state::ClusterState;

/// Free resources per node, updated as a policy tentatively starts and stops jobs.
#[derive(Clone, Debug)]
pub struct Ledger<'c> {
    cluster: &'c Cluster,
    free: Vec<Resources>,
    /// Free GPUs per node group, to skip full groups without scanning their nodes.
    group_free_gpus: Vec<u64>,
    /// Nodes by free GPU count: bit `n % 64` of word `c * words + n / 64` is set when node
    /// `n` has exactly `c` free GPUs (`c` ≥ 1; level 0 is unused). On a loaded cluster most
    /// nodes have none; a one-node fit of `g` GPUs visits only nodes at levels `g` and up, and
    /// a placement over several nodes walks the levels from the top instead of every node
    /// once per count.
    at_level: Vec<u64>,
    /// 64-node words per level.
    words: usize,
}

impl<'c> Ledger<'c> {
    /// A ledger starting from `free` (indexed by node).
    pub fn new(cluster: &'c Cluster, free: &[Resources]) -> Ledger<'c> {
        let mut group_free_gpus = vec![0u64; cluster.groups.len()];
        for (node, f) in cluster.nodes.iter().zip(free) {
            group_free_gpus[node.group as usize] += f.gpus as u64;
        }
        Ledger::with(cluster, free.to_vec(), group_free_gpus)
    }

    /// A ledger over `free` whose free GPUs per group are `group_free_gpus`.
    fn with(cluster: &'c Cluster, free: Vec<Resources>, group_free_gpus: Vec<u64>) -> Ledger<'c> {
        let words = free.len().div_ceil(64);
        let levels = free.iter().map(|f| f.gpus as usize).max().unwrap_or(0) + 1;
        let mut at_level = vec![0u64; levels * words];
        for (n, f) in free.iter().enumerate() {
            if let Some(word) = at_level.get_mut(f.gpus as usize * words + n / 64) {
                *word |= 1 << (n % 64);
            }
        }
        // Level 0 (no free GPU) is never read: cleared so that a note's clear of it is moot.
        at_level.iter_mut().take(words).for_each(|w| *w = 0);
        Ledger {
            cluster,
            free,
            group_free_gpus,
            at_level,
            words,
        }
    }

    /// Files node `n` at its level, after a change of its free resources from `before` free
    /// GPUs.
    fn note(&mut self, n: usize, before: u32) {
        let Some(after) = self.free.get(n).map(|f| f.gpus) else {
            return;
        };
        let bit = 1u64 << (n % 64);
        if let Some(word) = self.at_level.get_mut(before as usize * self.words + n / 64) {
            *word &= !bit;
        }
        if after == 0 {
            return;
        }
        let at = after as usize * self.words + n / 64;
        if self.at_level.len() <= at {
            self.at_level.resize((after as usize + 1) * self.words, 0);
        }
        self.at_level[at] |= bit;
    }

    /// Levels held (one past the highest free GPU count filed).
    fn levels(&self) -> usize {
        self.at_level.len().checked_div(self.words).unwrap_or(0)
    }

    /// The nodes in `nodes` with a free GPU, in order.
    #[cfg(test)]
    fn with_free_gpus_in(&self, nodes: std::ops::Range<usize>) -> impl Iterator<Item = usize> + '_ {
        self.with_at_least(nodes, 1)
    }

    /// The nodes in `nodes` with at least `gpus` (≥ 1) free GPUs, in order.
    fn with_at_least(
        &self,
        nodes: std::ops::Range<usize>,
        gpus: u32,
    ) -> impl Iterator<Item = usize> + '_ {
        let from = gpus.max(1) as usize;
        self.nodes_where(nodes, move |w| {
            (from..self.levels())
                .map(|c| self.at_level[c * self.words + w])
                .fold(0, |a, b| a | b)
        })
    }

    /// The nodes in `nodes` with exactly `gpus` (≥ 1) free GPUs, in order.
    fn with_exactly(
        &self,
        nodes: std::ops::Range<usize>,
        gpus: u32,
    ) -> impl Iterator<Item = usize> + '_ {
        let at = gpus.max(1) as usize * self.words;
        self.nodes_where(nodes, move |w| {
            self.at_level.get(at + w).copied().unwrap_or(0)
        })
    }

    /// The nodes in `nodes` whose bit is set in `word_of(w)` for their word `w`, in order.
    fn nodes_where(
        &self,
        nodes: std::ops::Range<usize>,
        word_of: impl Fn(usize) -> u64 + 'c,
    ) -> impl Iterator<Item = usize> + 'c {
        let end = nodes.end.min(self.free.len());
        let mut n = nodes.start;
        std::iter::from_fn(move || {
            while n < end {
                let word = word_of(n / 64) >> (n % 64);
                if word == 0 {
                    n = (n / 64 + 1) * 64;
                    continue;
                }
                let found = n + word.trailing_zeros() as usize;
                if found >= end {
                    n = end;
                    break;
                }
                n = found + 1;
                return Some(found);
            }
            None
        })
    }

    /// A ledger starting from what `state` has free: the same as `Ledger::new(cluster,
    /// state.free())`, without summing free GPUs over every node (the state keeps the sums).
    pub fn from_state(cluster: &'c Cluster, state: &ClusterState) -> Ledger<'c> {
        if state.group_free_gpus().len() != cluster.groups.len() {
            return Ledger::new(cluster, state.free());
        }
        Ledger::with(
            cluster,
            state.free().to_vec(),
            state.group_free_gpus().to_vec(),
        )
    }

    /// Free resources per node.
    pub fn free(&self) -> &[Resources] {
        &self.free
    }

    /// Free GPUs in the whole cluster.
    pub fn free_gpus(&self) -> u64 {
        self.group_free_gpus.iter().sum()
    }

    /// Returns an allocation's resources to the ledger.
    pub fn release(&mut self, alloc: &Allocation) {
        for s in &alloc.shares {
            if let Some(f) = self.free.get_mut(s.node.index()) {
                let before = f.gpus;
                f.add(&s.resources());
                self.group_free_gpus[self.cluster.nodes[s.node.index()].group as usize] +=
                    s.gpus as u64;
                self.note(s.node.index(), before);
            }
        }
    }

    /// Takes an allocation's resources if all of them are free; returns false (and changes
    /// nothing) otherwise.
    pub fn reserve(&mut self, alloc: &Allocation) -> bool {
        let fits = alloc.nodes_distinct()
            && alloc.shares.iter().all(|s| {
                self.free
                    .get(s.node.index())
                    .is_some_and(|f| f.fits(&s.resources()))
            });
        if !fits {
            return false;
        }
        self.take(alloc);
        true
    }

    /// Takes what `alloc` holds, known to fit (a placement just found).
    fn take(&mut self, alloc: &Allocation) {
        for s in &alloc.shares {
            let n = s.node.index();
            let (Some(f), Some(node)) = (self.free.get_mut(n), self.cluster.nodes.get(n)) else {
                continue;
            };
            let before = f.gpus;
            f.sub(&s.resources());
            if let Some(sum) = self.group_free_gpus.get_mut(node.group as usize) {
                *sum -= s.gpus as u64;
            }
            self.note(n, before);
        }
    }

    /// Finds a consolidated placement for `job` with GPU-proportional CPU and memory and
    /// reserves it; `None` when it does not fit now.
    pub fn place<'j>(&mut self, job: impl Into<Demand<'j>>) -> Option<Allocation> {
        let alloc = self.fit(job)?;
        self.take(&alloc);
        Some(alloc)
    }

    /// The allocation [`place`](Self::place) would make, without taking it.
    pub fn fit<'j>(&self, job: impl Into<Demand<'j>>) -> Option<Allocation> {
        let job: Demand<'_> = job.into();
        if job.gpus == 0 || (job.gpus as u64) > self.free_gpus() {
            return None;
        }
        let alloc = self
            .cluster
            .groups
            .iter()
            .enumerate()
            .filter(|(gi, g)| {
                (job.gpu_types.is_empty() || job.gpu_types.contains(&g.gpu))
                    && self.group_free_gpus[*gi] >= job.gpus as u64
            })
            .find_map(|(_, g)| self.place_in_group(job, g))?;
        debug_assert!(
            self.clone().reserve(&alloc),
            "placement found must be reservable"
        );
        Some(alloc)
    }

    fn place_in_group(&self, job: Demand<'_>, group: &NodeGroup) -> Option<Allocation> {
        let nodes = group.first_node as usize..(group.first_node + group.count) as usize;
        // One node, first fit. The share is the same on every node of the group but for the
        // node it names, so it is computed once and the scan only compares resources.
        let share = proportional_share(job, group, NodeId(group.first_node), job.gpus);
        let wanted = share.resources();
        // `wanted` holds at least one GPU: nodes without a free one cannot fit it, and no
        // node has more GPUs than its group's nodes have.
        if job.gpus <= group.gpus_per_node {
            if let Some(n) = self
                .with_at_least(nodes.clone(), job.gpus)
                .find(|&n| self.free[n].fits(&wanted))
            {
                return Some(Allocation::single(NodeShare {
                    node: NodeId(n as u32),
                    ..share
                }));
            }
        }
        // Several nodes: emptiest first (most free GPUs, then node order), so the job spans
        // as few as possible, level by level from the highest (the job usually has its GPUs
        // within the first levels visited).
        let mut shares = Vec::new();
        let mut needed = job.gpus;
        'counts: for count in (1..self.levels() as u32).rev() {
            for n in self.with_exactly(nodes.clone(), count) {
                if needed == 0 {
                    break 'counts;
                }
                let node = &self.free[n];
                // As many of the job's GPUs as the node can carry with their CPU and memory:
                // a job with a large explicit request may need to spread down to one GPU per
                // node (which `Cluster::can_ever_fit` counts on).
                if let Some(share) = (1..=needed.min(count))
                    .rev()
                    .map(|k| proportional_share(job, group, NodeId(n as u32), k))
                    .find(|s| node.fits(&s.resources()))
                {
                    needed -= share.gpus;
                    shares.push(share);
                }
            }
        }
        (needed == 0).then_some(Allocation::new(shares))
    }
}

/// A [`Ledger`] over a [`ClusterState`] that copies nothing per node: it keeps only the
/// nodes it changes and finds nodes through the state's index of nodes by free GPUs
/// ([`ClusterState::free_index`]). It places, reserves and releases exactly as
/// `Ledger::from_state` of the same state does (same nodes, same order of preference), in
/// time that grows with GPUs per node and nodes changed rather than with the cluster.
#[derive(Clone, Debug)]
pub struct IndexedLedger<'c> {
    cluster: &'c Cluster,
    state: &'c ClusterState,
    /// Free resources of the nodes changed so far, by node.
    changed: ChangedNodes,
    /// Inline: a ledger is made per scheduling point, and clusters have few node groups.
    group_free_gpus: SmallVec<[u64; 4]>,
    /// The state describes this cluster (else every lookup scans, as a `Ledger` does).
    indexed: bool,
    /// Once many nodes have changed (a daemon's first pass over thousands of jobs, a round
    /// that restarts many), the index mostly points at changed nodes and each lookup walks
    /// past them: from then on a plain copying `Ledger` answers, which places identically
    /// (and, up to a few hundred nodes, scans them faster than an index would find them).
    dense: Option<Ledger<'c>>,
}

/// An [`IndexedLedger`]'s changed nodes with their free resources, sorted by node. A
/// decision changes few nodes before the ledger turns dense ([`dense_after`]), so a sorted
/// vector finds and inserts them for less than a B-tree does, and the first few are kept
/// inline (a ledger is made at every scheduling point; most change a node or two).
#[derive(Clone, Debug, Default)]
struct ChangedNodes(SmallVec<[(u32, Resources); 8]>);

impl ChangedNodes {
    fn len(&self) -> usize {
        self.0.len()
    }

    fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    fn clear(&mut self) {
        self.0.clear();
    }

    fn find(&self, node: u32) -> Result<usize, usize> {
        self.0.binary_search_by_key(&node, |&(n, _)| n)
    }

    fn get(&self, node: u32) -> Option<Resources> {
        self.find(node).ok().map(|i| self.0[i].1)
    }

    fn contains(&self, node: u32) -> bool {
        self.find(node).is_ok()
    }

    fn insert(&mut self, node: u32, free: Resources) {
        match self.find(node) {
            Ok(i) => self.0[i].1 = free,
            Err(i) => self.0.insert(i, (node, free)),
        }
    }

    /// The changed nodes in `nodes`, in node order.
    fn range(&self, nodes: std::ops::Range<u32>) -> &[(u32, Resources)] {
        let from = self.0.partition_point(|&(n, _)| n < nodes.start);
        let to = self.0.partition_point(|&(n, _)| n < nodes.end);
        self.0.get(from..to).unwrap_or(&[])
    }
}

/// Changed nodes beyond which an [`IndexedLedger`] turns into a copying [`Ledger`]: a fraction
/// of the cluster (so the one copy costs no more than the lookups it saves), at least a few.
fn dense_after(nodes: usize) -> usize {
    (nodes / 16).max(8)
}

impl<'c> IndexedLedger<'c> {
    /// A ledger starting from what `state` has free.
    pub fn new(cluster: &'c Cluster, state: &'c ClusterState) -> IndexedLedger<'c> {
        let indexed = state.group_free_gpus().len() == cluster.groups.len()
            && state.free().len() == cluster.nodes.len();
        let group_free_gpus = if indexed {
            SmallVec::from_slice(state.group_free_gpus())
        } else {
            let mut sums: SmallVec<[u64; 4]> = smallvec::smallvec![0u64; cluster.groups.len()];
            for (node, f) in cluster.nodes.iter().zip(state.free()) {
                if let Some(sum) = sums.get_mut(node.group as usize) {
                    *sum += f.gpus as u64;
                }
            }
            sums
        };
        IndexedLedger {
            cluster,
            state,
            changed: ChangedNodes::default(),
            group_free_gpus,
            indexed,
            dense: None,
        }
    }

    /// Switches to the copying ledger once enough nodes have changed.
    fn maybe_densify(&mut self) {
        if self.dense.is_some() || self.changed.len() < dense_after(self.cluster.nodes.len()) {
            return;
        }
        let mut free = self.state.free().to_vec();
        free.resize(self.cluster.nodes.len(), Resources::default());
        for &(n, f) in &self.changed.0 {
            if let Some(slot) = free.get_mut(n as usize) {
                *slot = f;
            }
        }
        self.dense = Some(Ledger::with(
            self.cluster,
            free,
            std::mem::take(&mut self.group_free_gpus).into_vec(),
        ));
        self.changed.clear();
    }

    /// Free resources of one node.
    pub fn free_of(&self, node: usize) -> Resources {
        if let Some(d) = &self.dense {
            return d.free.get(node).copied().unwrap_or_default();
        }
        match self.changed.get(node as u32) {
            Some(f) => f,
            None => self.state.free().get(node).copied().unwrap_or_default(),
        }
    }

    /// Free GPUs in the whole cluster.
    pub fn free_gpus(&self) -> u64 {
        match &self.dense {
            Some(d) => d.free_gpus(),
            None => self.group_free_gpus.iter().sum(),
        }
    }

    fn group_of(&self, node: usize) -> Option<usize> {
        self.cluster.nodes.get(node).map(|n| n.group as usize)
    }

    /// Returns an allocation's resources to the ledger.
    pub fn release(&mut self, alloc: &Allocation) {
        if let Some(d) = &mut self.dense {
            return d.release(alloc);
        }
        for s in &alloc.shares {
            let n = s.node.index();
            let Some(g) = self.group_of(n) else { continue };
            let mut f = self.free_of(n);
            f.add(&s.resources());
            self.changed.insert(n as u32, f);
            if let Some(sum) = self.group_free_gpus.get_mut(g) {
                *sum += s.gpus as u64;
            }
        }
        self.maybe_densify();
    }

    /// Takes an allocation's resources if all of them are free; returns false (and changes
    /// nothing) otherwise.
    pub fn reserve(&mut self, alloc: &Allocation) -> bool {
        if let Some(d) = &mut self.dense {
            return d.reserve(alloc);
        }
        let fits = alloc.nodes_distinct()
            && alloc.shares.iter().all(|s| {
                s.node.index() < self.cluster.nodes.len()
                    && self.free_of(s.node.index()).fits(&s.resources())
            });
        if !fits {
            return false;
        }
        self.take(alloc);
        true
    }

    /// Takes what `alloc` holds, known to fit (a placement just found).
    pub(crate) fn take(&mut self, alloc: &Allocation) {
        if let Some(d) = &mut self.dense {
            return d.take(alloc);
        }
        for s in &alloc.shares {
            let n = s.node.index();
            let mut f = self.free_of(n);
            f.sub(&s.resources());
            self.changed.insert(n as u32, f);
            if let Some(sum) = self
                .group_of(n)
                .and_then(|g| self.group_free_gpus.get_mut(g))
            {
                *sum -= s.gpus as u64;
            }
        }
        self.maybe_densify();
    }

    /// [`Ledger::place`]: the same allocation, found through the index.
    pub fn place<'j>(&mut self, job: impl Into<Demand<'j>>) -> Option<Allocation> {
        let job: Demand<'_> = job.into();
        if let Some(d) = &mut self.dense {
            return d.place(job);
        }
        let alloc = self.fit(job)?;
        self.take(&alloc);
        Some(alloc)
    }

    /// The allocation [`place`](Self::place) would make, without taking it: for a single
    /// decision, where recording it in a ledger about to be dropped is wasted.
    pub fn fit<'j>(&self, job: impl Into<Demand<'j>>) -> Option<Allocation> {
        let job: Demand<'_> = job.into();
        if let Some(d) = &self.dense {
            return d.fit(job);
        }
        if self.indexed && self.changed.is_empty() {
            // Nothing taken or released yet: the state's own index answers.
            return fit_in(self.cluster, self.state, job);
        }
        self.fit_changed(job)
    }

    /// [`fit`](Self::fit) through the changed nodes and the state's index.
    fn fit_changed(&self, job: Demand<'_>) -> Option<Allocation> {
        if job.gpus == 0 || (job.gpus as u64) > self.free_gpus() {
            return None;
        }
        let alloc = self
            .cluster
            .groups
            .iter()
            .enumerate()
            .filter(|(gi, g)| {
                (job.gpu_types.is_empty() || job.gpu_types.contains(&g.gpu))
                    && self.group_free_gpus[*gi] >= job.gpus as u64
            })
            .find_map(|(gi, g)| self.place_in_group(job, gi, g))?;
        debug_assert!(
            self.clone().reserve(&alloc),
            "placement found must be reservable"
        );
        Some(alloc)
    }

    /// The lowest-numbered node of the group whose free resources fit `wanted`.
    fn first_fit(&self, gi: usize, group: &NodeGroup, wanted: &Resources) -> Option<u32> {
        let nodes = group.first_node..group.first_node + group.count;
        if !self.indexed {
            return nodes
                .into_iter()
                .find(|&n| self.free_of(n as usize).fits(wanted));
        }
        // Changed nodes are few: the first of them that fits.
        let best = self
            .changed
            .range(nodes)
            .iter()
            .find(|(_, f)| f.fits(wanted))
            .map(|&(n, _)| n);
        // Unchanged ones with at least the GPUs wanted: the lowest that fits (none past the
        // changed one found).
        let free = self.state.free();
        let unchanged = self
            .state
            .free_index(gi)
            .first_at_least(wanted.gpus.max(1), |n| {
                best.is_none_or(|b| n < b)
                    && !self.changed.contains(n)
                    && free.get(n as usize).is_some_and(|f| f.fits(wanted))
            });
        match (best, unchanged) {
            (Some(b), Some(u)) => Some(b.min(u)),
            (b, u) => b.or(u),
        }
    }

    fn place_in_group(&self, job: Demand<'_>, gi: usize, group: &NodeGroup) -> Option<Allocation> {
        let share = proportional_share(job, group, NodeId(group.first_node), job.gpus);
        if let Some(n) = self.first_fit(gi, group, &share.resources()) {
            return Some(Allocation::single(NodeShare {
                node: NodeId(n),
                ..share
            }));
        }
        // Several nodes: emptiest first (then lowest-numbered), as `Ledger` orders them,
        // level by level of free GPUs so that the walk stops once the job is placed.
        let nodes = group.first_node..group.first_node + group.count;
        let all: Vec<(u32, u32)>;
        let (index, dirty): (&FreeIndex, Vec<(u32, u32)>) = if self.indexed {
            let dirty = self
                .changed
                .range(nodes)
                .iter()
                .filter(|(_, f)| f.gpus > 0)
                .map(|&(n, f)| (f.gpus, n))
                .collect();
            (self.state.free_index(gi), dirty)
        } else {
            all = nodes
                .map(|n| (self.free_of(n as usize).gpus, n))
                .filter(|&(g, _)| g > 0)
                .collect();
            (&EMPTY_INDEX, all)
        };
        let mut shares = Vec::new();
        let mut needed = job.gpus;
        let mut level: Vec<u32> = Vec::new();
        let mut upper = u32::MAX;
        while needed > 0 {
            let clean = index.level_below(upper);
            let changed = dirty.iter().map(|d| d.0).filter(|&g| g < upper).max();
            let Some(v) = clean.max(changed) else { break };
            level.clear();
            level.extend(index.nodes_at(v).filter(|&n| !self.changed.contains(n)));
            level.extend(dirty.iter().filter(|d| d.0 == v).map(|d| d.1));
            level.sort_unstable();
            for &n in &level {
                if needed == 0 {
                    break;
                }
                let f = self.free_of(n as usize);
                // As many of the job's GPUs as the node can carry with their CPU and memory.
                let most = needed.min(f.gpus);
                if let Some(share) = (1..=most)
                    .rev()
                    .map(|k| proportional_share(job, group, NodeId(n), k))
                    .find(|s| f.fits(&s.resources()))
                {
                    needed -= share.gpus;
                    shares.push(share);
                }
            }
            upper = v;
        }
        (needed == 0).then_some(Allocation::new(shares))
    }
}

static EMPTY_INDEX: FreeIndex = FreeIndex::empty();

/// What `IndexedLedger::new(cluster, state).fit(job)` returns, without building the ledger
/// when the job fits on one node of the first group that could take it: a lone arrival's
/// usual case, once per job on a cluster that keeps up (the ledger's set-up and its
/// changed-node checks were a fifth of a start's cost there).
pub fn fit_in<'j>(
    cluster: &Cluster,
    state: &ClusterState,
    job: impl Into<Demand<'j>>,
) -> Option<Allocation> {
    let job: Demand<'_> = job.into();
    let group_free = state.group_free_gpus();
    let free = state.free();
    if job.gpus == 0
        || group_free.len() != cluster.groups.len()
        || free.len() != cluster.nodes.len()
    {
        return IndexedLedger::new(cluster, state).fit_changed(job);
    }
    if job.gpus as u64 > state.free_gpus() {
        return None;
    }
    // The ledger tries the groups in order, each on one node and then on several: the first
    // group it would try is the only one where a one-node fit settles the answer here.
    let (gi, group) = cluster.groups.iter().enumerate().find(|(gi, g)| {
        (job.gpu_types.is_empty() || job.gpu_types.contains(&g.gpu))
            && group_free.get(*gi).is_some_and(|&f| f >= job.gpus as u64)
    })?;
    let share = proportional_share(job, group, NodeId(group.first_node), job.gpus);
    let wanted = share.resources();
    let node = state
        .free_index(gi)
        .first_at_least(wanted.gpus.max(1), |n| {
            free.get(n as usize).is_some_and(|f| f.fits(&wanted))
        });
    match node {
        Some(n) => Some(Allocation::single(NodeShare {
            node: NodeId(n),
            ..share
        })),
        None => IndexedLedger::new(cluster, state).fit_changed(job),
    }
}

/// The CPU and memory that come with `gpus` GPUs of `job` on a node of `group`: the job's
/// explicit request split by GPUs, or the node's capacity split by GPUs.
pub fn proportional_share<'j>(
    job: impl Into<Demand<'j>>,
    group: &NodeGroup,
    node: NodeId,
    gpus: u32,
) -> NodeShare {
    let job: Demand<'_> = job.into();
    let split = |total: u64, of: u32| -> u64 {
        if of == 0 {
            0
        } else {
            // u64 arithmetic when the product fits (the usual case; a u128 division is a
            // library call), u128 otherwise: the same quotient either way.
            match total.checked_mul(gpus as u64) {
                Some(p) => p / of as u64,
                None => (total as u128 * gpus as u128 / of as u128) as u64,
            }
        }
    };
    let cpu = match job.cpu {
        Some(c) => split(c.0, job.gpus),
        None => split(group.cpu.0, group.gpus_per_node),
    };
    let memory = match job.memory {
        Some(m) => split(m.0, job.gpus),
        None => split(group.memory.0, group.gpus_per_node),
    };
    NodeShare::whole(node, gpus, MilliCpu(cpu), Bytes(memory))
}

#[cfg(test)]
mod tests {
    use super::*;
    use tessera_model::{SimDuration, SimTime};

    fn cluster(nodes: u32, gpus: u32) -> Cluster {
        Cluster::homogeneous(
            "V100-32GB",
            nodes,
            gpus,
            MilliCpu::from_cores(24),
            Bytes::from_gib(500),
        )
        .unwrap()
    }

    fn job(gpus: u32) -> TrainingJob {
        TrainingJob::simple(0, SimTime::ZERO, gpus, SimDuration::from_secs(10))
    }

    fn full(c: &Cluster) -> Vec<Resources> {
        c.nodes.iter().map(|n| c.capacity(n.id)).collect()
    }

    #[test]
    fn single_node_first_fit_with_proportional_share() {
        let c = cluster(2, 8);
        let mut l = Ledger::new(&c, &full(&c));
        let a = l.place(&job(2)).unwrap();
        assert_eq!(a.shares.len(), 1);
        assert_eq!(a.shares[0].node, NodeId(0));
        assert_eq!(a.cpu(), MilliCpu::from_cores(6));
        assert_eq!(a.memory(), Bytes(Bytes::from_gib(500).0 / 4));
        assert_eq!(l.free_gpus(), 14);
    }

    /// Regression (issue 10): a job whose explicit CPU request fits no node with all its
    /// GPUs, but fits one GPU per node, is placed spread out instead of waiting forever
    /// (`Cluster::can_ever_fit` accepts it).
    #[test]
    fn spreads_a_cpu_heavy_job_down_to_one_gpu_per_node() {
        let c = cluster(3, 8);
        let mut j = job(2);
        j.cpu = Some(MilliCpu::from_cores(40)); // 20 per GPU; nodes have 24
        assert!(c.can_ever_fit(&j).is_ok());
        let mut l = Ledger::new(&c, &full(&c));
        let a = l.place(&j).expect("placed one GPU per node");
        assert_eq!(a.shares.len(), 2);
        assert!(a
            .shares
            .iter()
            .all(|s| s.gpus == 1 && s.cpu == MilliCpu::from_cores(20)));
        assert_eq!(a.cpu(), MilliCpu::from_cores(40));
    }

    #[test]
    fn spans_fewest_nodes_and_releases_exactly() {
        let c = cluster(3, 4);
        let mut l = Ledger::new(&c, &full(&c));
        let small = l.place(&job(3)).unwrap(); // node 0 keeps 1 free
        let big = l.place(&job(6)).unwrap(); // nodes 1 and 2 (4 + 2), not node 0
        let nodes: Vec<_> = big.shares.iter().map(|s| s.node.0).collect();
        assert_eq!(nodes, [1, 2]);
        assert!(l.place(&job(4)).is_none());
        l.release(&big);
        l.release(&small);
        assert_eq!(l.free(), full(&c).as_slice());
    }

    #[test]
    fn respects_allowed_gpu_types_and_reserve_is_atomic() {
        let c = cluster(1, 4);
        let mut l = Ledger::new(&c, &full(&c));
        let mut j = job(1);
        j.gpu_types = vec![c.catalog.resolve("A100-40GB").unwrap()];
        assert!(l.place(&j).is_none());
        let a = l.place(&job(4)).unwrap();
        assert!(!l.reserve(&a), "double booking must fail");
        assert_eq!(l.free_gpus(), 0);
    }

    proptest::proptest! {
        /// The nodes a first fit visits are exactly those with a free GPU (or with at least,
        /// or exactly, a given count), in order, after any sequence of placements and
        /// releases (ranges crossing 64-node words included).
        #[test]
        fn nodes_with_free_gpus_are_tracked(
            nodes in 1u32..150,
            jobs in proptest::collection::vec((1u32..12, proptest::bool::ANY), 0..80),
            from in 0usize..160,
            len in 0usize..160,
        ) {
            let c = cluster(nodes, 4);
            let mut l = Ledger::new(&c, &full(&c));
            let mut held = Vec::new();
            for (gpus, release) in jobs {
                if release {
                    if let Some(a) = held.pop() {
                        l.release(&a);
                    }
                } else if let Some(a) = l.place(&job(gpus)) {
                    held.push(a);
                }
                let range = from..from + len;
                let tracked: Vec<usize> = l.with_free_gpus_in(range.clone()).collect();
                let scanned: Vec<usize> = range
                    .clone()
                    .filter(|&n| l.free().get(n).is_some_and(|f| f.gpus > 0))
                    .collect();
                proptest::prop_assert_eq!(tracked, scanned);
                for g in 1..=5u32 {
                    let free_of = |n: usize| l.free().get(n).map_or(0, |f| f.gpus);
                    let at_least: Vec<usize> = l.with_at_least(range.clone(), g).collect();
                    let scanned: Vec<usize> =
                        range.clone().filter(|&n| free_of(n) >= g).collect();
                    proptest::prop_assert_eq!(at_least, scanned);
                    let exactly: Vec<usize> = l.with_exactly(range.clone(), g).collect();
                    let scanned: Vec<usize> =
                        range.clone().filter(|&n| free_of(n) == g).collect();
                    proptest::prop_assert_eq!(exactly, scanned);
                }
            }
        }
    }
}
