//! MISO's per-GPU optimizer: over every layout with exactly one slice per job and every
//! assignment of jobs to slices (skipping slices a job runs out of memory on), the one with
//! the least mean normalised slowdown Σ t_j(slice) / t_j(7g) / k (or the most throughput).
//!
//! Layouts are grouped by their multiset of slice sizes (speed depends only on the size), and
//! an assignment gives each job a *size*, so equal slices are never permuted. A branch and
//! bound prunes a partial assignment whose cost plus the best remaining cost of every
//! unassigned job cannot beat the best plan found so far.

use tessera_model::{MigGeometry, MigInstance};

use super::layouts::{self, LayoutSet};

use super::truth::SliceSpeeds;

/// What the optimizer minimises.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Objective {
    /// Mean normalised slowdown (MISO's default).
    #[default]
    MeanSlowdown,
    /// Negative total normalised throughput (MISO's variant).
    Throughput,
}

/// One candidate layout: its instances and their sizes.
#[derive(Clone, Debug, PartialEq)]
pub struct Candidate {
    /// The instances, as the geometry places them.
    pub layout: Vec<MigInstance>,
    /// Compute slices of each instance (same order).
    pub sizes: Vec<u8>,
    /// (size, count) pairs, largest size first.
    groups: Vec<(u8, u8)>,
    /// Layouts of the same sizes with other profiles (a 1g.10gb for a 1g.5gb), for jobs
    /// that ask for a fixed profile; `layout` is tried first.
    variants: Vec<(Vec<MigInstance>, Vec<u8>)>,
}

/// Candidate layouts by number of instances (`by_k[k]`), one per distinct multiset of sizes,
/// larger totals first (so a tie keeps the layout with more compute).
#[derive(Clone, Debug, PartialEq)]
pub struct Candidates {
    by_k: Vec<Vec<Candidate>>,
}

impl Candidates {
    /// The candidates of a geometry's layout set.
    pub fn new(geo: &MigGeometry, set: LayoutSet) -> Candidates {
        let mut by_k: Vec<Vec<Candidate>> = vec![Vec::new(); 8];
        for layout in layouts::layouts(geo, set) {
            let sizes: Vec<u8> = layout
                .iter()
                .filter_map(|i| geo.profile(*i).map(|p| p.compute_slices))
                .collect();
            let k = sizes.len();
            if k == 0 || k > 7 {
                continue;
            }
            let mut sorted = sizes.clone();
            sorted.sort_unstable_by(|a, b| b.cmp(a));
            let mut groups: Vec<(u8, u8)> = Vec::new();
            for s in sorted {
                match groups.last_mut() {
                    Some((size, n)) if *size == s => *n += 1,
                    _ => groups.push((s, 1)),
                }
            }
            let profiles = |l: &[MigInstance]| {
                let mut p: Vec<u8> = l.iter().map(|i| i.profile).collect();
                p.sort_unstable();
                p
            };
            if let Some(c) = by_k[k].iter_mut().find(|c| c.groups == groups) {
                let mine = profiles(&layout);
                if profiles(&c.layout) != mine
                    && c.variants.iter().all(|(v, _)| profiles(v) != mine)
                {
                    c.variants.push((layout, sizes));
                }
                continue;
            }
            by_k[k].push(Candidate {
                layout,
                sizes,
                groups,
                variants: Vec::new(),
            });
        }
        for list in &mut by_k {
            list.sort_by(|a, b| {
                let total = |c: &Candidate| c.sizes.iter().map(|&s| s as u32).sum::<u32>();
                total(b)
                    .cmp(&total(a))
                    .then_with(|| b.groups.cmp(&a.groups))
            });
        }
        Candidates { by_k }
    }

    /// Candidates with exactly `k` instances.
    pub fn with(&self, k: usize) -> &[Candidate] {
        self.by_k.get(k).map_or(&[], Vec::as_slice)
    }

    /// Every candidate, of any size.
    pub fn all(&self) -> impl Iterator<Item = &Candidate> {
        self.by_k.iter().flatten()
    }
}

/// The optimizer's answer.
#[derive(Clone, Debug, PartialEq)]
pub struct Plan {
    /// The layout to apply.
    pub layout: Vec<MigInstance>,
    /// The instance of each job (same order as the jobs given).
    pub assignment: Vec<MigInstance>,
    /// Compute slices of each job's instance.
    pub sizes: Vec<u8>,
    /// Objective value: mean slowdown, or minus the mean normalised throughput.
    pub cost: f64,
}

/// Cost of one job on one size, `None` when it does not fit.
fn cost_of(speeds: &SliceSpeeds, size: u8, objective: Objective) -> Option<f64> {
    let s = speeds.get(size as usize).copied().flatten()?;
    if s <= 0.0 {
        return None;
    }
    Some(match objective {
        Objective::MeanSlowdown => 1.0 / s,
        Objective::Throughput => -s,
    })
}

/// The best plan for these jobs (one slice each), or `None` when no layout fits them all.
pub fn optimize(jobs: &[SliceSpeeds], cands: &Candidates, objective: Objective) -> Option<Plan> {
    optimize_fixed(jobs, &[], cands, objective)
}

/// A job's fixed MIG profile: its index in the geometry and its compute slices.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FixedProfile {
    /// Index in the geometry's profiles.
    pub profile: u8,
    /// Its compute slices.
    pub size: u8,
}

/// Like [`optimize`], but job `j` with `fixed[j] = Some(p)` only gets an instance of exactly
/// profile `p` (`fixed` may be shorter than `jobs`: missing entries are free). A candidate
/// is used through its first variant that holds every fixed profile often enough; jobs of
/// a fixed profile take those instances first, free jobs any instance of their size.
pub fn optimize_fixed(
    jobs: &[SliceSpeeds],
    fixed: &[Option<FixedProfile>],
    cands: &Candidates,
    objective: Objective,
) -> Option<Plan> {
    let k = jobs.len();
    if k == 0 || k > 7 {
        return None;
    }
    let fixed_of = |j: usize| fixed.get(j).copied().flatten();
    let sizes = [7u8, 4, 3, 2, 1];
    // cost[j][i] for sizes[i]; a fixed job only at its profile's size.
    let cost: Vec<[Option<f64>; 5]> = jobs
        .iter()
        .enumerate()
        .map(|(j, s)| {
            sizes.map(|z| match fixed_of(j) {
                Some(f) if f.size != z => None,
                _ => cost_of(s, z, objective),
            })
        })
        .collect();
    // Fixed profiles wanted, with how many jobs want each.
    let mut wanted: Vec<(u8, usize)> = Vec::new();
    for f in fixed.iter().flatten() {
        match wanted.iter_mut().find(|w| w.0 == f.profile) {
            Some(w) => w.1 += 1,
            None => wanted.push((f.profile, 1)),
        }
    }
    // Lower bound of jobs j.. : each at its own best size.
    let mut suffix = vec![0.0; k + 1];
    for j in (0..k).rev() {
        let best = cost[j]
            .iter()
            .flatten()
            .copied()
            .fold(f64::INFINITY, f64::min);
        if !best.is_finite() {
            return None; // fits nowhere
        }
        suffix[j] = suffix[j + 1] + best;
    }
    let mut best: Option<(f64, usize, Vec<u8>)> = None;
    let mut chosen = vec![0u8; k];
    for (ci, cand) in cands.with(k).iter().enumerate() {
        if variant_holding(cand, &wanted).is_none() {
            continue;
        }
        let mut left: Vec<(u8, u8)> = cand.groups.clone();
        let bound = best.as_ref().map_or(f64::INFINITY, |b| b.0);
        search(
            0,
            0.0,
            &cost,
            &suffix,
            &mut left,
            &mut chosen,
            &mut |total, assignment| {
                if best.as_ref().is_none_or(|(b, _, _)| total < *b - 1e-12) {
                    best = Some((total, ci, assignment.to_vec()));
                }
            },
            bound,
        );
    }
    let (total, ci, job_sizes) = best?;
    let cand = &cands.with(k)[ci];
    let (layout, sizes_of) = variant_holding(cand, &wanted)?;
    let mut used = vec![false; layout.len()];
    let mut assignment: Vec<Option<MigInstance>> = vec![None; k];
    // Fixed jobs first, on their exact profile; then the others by size.
    for pass_fixed in [true, false] {
        for (j, &z) in job_sizes.iter().enumerate() {
            let f = fixed_of(j);
            if f.is_some() != pass_fixed {
                continue;
            }
            let slot = (0..layout.len()).find(|&i| {
                !used[i] && sizes_of[i] == z && f.is_none_or(|f| layout[i].profile == f.profile)
            })?;
            used[slot] = true;
            assignment[j] = Some(layout[slot]);
        }
    }
    let assignment: Vec<MigInstance> = assignment.into_iter().collect::<Option<_>>()?;
    Some(Plan {
        layout: layout.clone(),
        assignment,
        sizes: job_sizes,
        cost: total / k as f64,
    })
}

/// The first of a candidate's layouts (its own, then its variants) with at least `n`
/// instances of profile `p` for every `(p, n)` wanted, and its sizes.
fn variant_holding<'c>(
    c: &'c Candidate,
    wanted: &[(u8, usize)],
) -> Option<(&'c Vec<MigInstance>, &'c Vec<u8>)> {
    let holds = |l: &[MigInstance]| {
        wanted
            .iter()
            .all(|&(p, n)| l.iter().filter(|i| i.profile == p).count() >= n)
    };
    std::iter::once((&c.layout, &c.sizes))
        .chain(c.variants.iter().map(|(l, z)| (l, z)))
        .find(|(l, _)| holds(l))
}

fn size_index(z: u8) -> usize {
    match z {
        7 => 0,
        4 => 1,
        3 => 2,
        2 => 3,
        _ => 4,
    }
}

/// Depth-first over jobs, each taking a size with slices left; `bound` is the best total
/// known when this candidate started (improved as better totals are reported).
#[allow(clippy::too_many_arguments)]
fn search(
    j: usize,
    partial: f64,
    cost: &[[Option<f64>; 5]],
    suffix: &[f64],
    left: &mut [(u8, u8)],
    chosen: &mut [u8],
    report: &mut dyn FnMut(f64, &[u8]),
    mut bound: f64,
) -> f64 {
    if j == cost.len() {
        if partial < bound - 1e-12 {
            report(partial, chosen);
            bound = partial;
        }
        return bound;
    }
    if partial + suffix[j] >= bound - 1e-12 {
        return bound;
    }
    for g in 0..left.len() {
        let (z, n) = left[g];
        if n == 0 {
            continue;
        }
        let Some(c) = cost[j][size_index(z)] else {
            continue;
        };
        left[g].1 -= 1;
        chosen[j] = z;
        bound = search(
            j + 1,
            partial + c,
            cost,
            suffix,
            left,
            chosen,
            report,
            bound,
        );
        left[g].1 += 1;
    }
    bound
}

/// Feasibility only: can these jobs share one GPU, a slice each?
pub fn feasible(jobs: &[SliceSpeeds], cands: &Candidates) -> bool {
    optimize(jobs, cands, Objective::MeanSlowdown).is_some()
}

#[cfg(test)]
mod tests {
    use super::*;
    use tessera_model::GpuCatalog;

    fn speeds(pairs: &[(usize, f64)]) -> SliceSpeeds {
        let mut s: SliceSpeeds = [None; 8];
        for &(c, v) in pairs {
            s[c] = Some(v);
        }
        s
    }

    fn geo() -> MigGeometry {
        let c = GpuCatalog::builtin();
        c.mig_geometry(c.resolve("A100-40GB").unwrap())
            .unwrap()
            .clone()
    }

    // A: small and insensitive; B: out of memory below 3g; C: like A but less sensitive.
    fn a() -> SliceSpeeds {
        speeds(&[(1, 0.5), (2, 0.8), (3, 0.9), (4, 0.95), (7, 1.0)])
    }
    fn b() -> SliceSpeeds {
        speeds(&[(3, 0.5), (4, 0.6), (7, 1.0)])
    }
    fn c() -> SliceSpeeds {
        speeds(&[(1, 0.6), (2, 0.9), (3, 1.0), (4, 1.0), (7, 1.0)])
    }

    #[test]
    fn hand_checked_two_jobs() {
        let geo = geo();
        // Generated layouts: A on 3g and B on 4g (1/0.9 + 1/0.6 = 2.778) beats A on 2g
        // with B on 4g (2.917) and everything else.
        let cands = Candidates::new(&geo, LayoutSet::Generated);
        let p = optimize(&[a(), b()], &cands, Objective::MeanSlowdown).unwrap();
        assert_eq!(p.sizes, vec![3, 4]);
        assert!((p.cost - (1.0 / 0.9 + 1.0 / 0.6) / 2.0).abs() < 1e-12);
        assert_eq!(geo.compute_slices_of(&p.layout), vec![3, 4]);
        assert!(geo.check_layout(&p.layout).is_ok());
        assert_ne!(p.assignment[0], p.assignment[1]);
        // MISO's 18 layouts have one two-slice layout, [3, 3].
        let miso = Candidates::new(&geo, LayoutSet::Miso18);
        let p = optimize(&[a(), b()], &miso, Objective::MeanSlowdown).unwrap();
        assert_eq!(p.sizes, vec![3, 3]);
        assert!((p.cost - (1.0 / 0.9 + 1.0 / 0.5) / 2.0).abs() < 1e-12);
    }

    #[test]
    fn hand_checked_fixed_profiles() {
        let geo = geo();
        let cands = Candidates::new(&geo, LayoutSet::Generated);
        let fix = |name: &str| {
            let p = geo.find_profile(name).unwrap();
            Some(FixedProfile {
                profile: p,
                size: geo.profiles[p as usize].compute_slices,
            })
        };
        // A fixed to 2g.10gb, B free: B takes 4g (1/0.8 + 1/0.6 = 2.917; B on 3g beside A
        // on 2g would be 1/0.8 + 1/0.5).
        let p = optimize_fixed(
            &[a(), b()],
            &[fix("2g.10gb"), None],
            &cands,
            Objective::MeanSlowdown,
        )
        .unwrap();
        assert_eq!(p.sizes, vec![2, 4]);
        assert_eq!(geo.profile(p.assignment[0]).unwrap().name, "2g.10gb");
        assert!((p.cost - (1.0 / 0.8 + 1.0 / 0.6) / 2.0).abs() < 1e-12);
        // A fixed to 1g.10gb: the default 1g slice is 1g.5gb, so the plan must use a variant
        // layout holding a 1g.10gb; with C free, C gets 4g (1/1.0) beside it.
        let p = optimize_fixed(
            &[a(), c()],
            &[fix("1g.10gb"), None],
            &cands,
            Objective::MeanSlowdown,
        )
        .unwrap();
        assert_eq!(geo.profile(p.assignment[0]).unwrap().name, "1g.10gb");
        assert!(geo.check_layout(&p.layout).is_ok());
        assert!(p.layout.contains(&p.assignment[0]) && p.layout.contains(&p.assignment[1]));
        // Unconstrained, the same two jobs would not both be on 1g slices of one kind.
        let free = optimize(&[a(), c()], &cands, Objective::MeanSlowdown).unwrap();
        assert_ne!(free.sizes[0], 1);
        // Alone, a fixed job gets a one-instance layout of exactly its profile.
        let p = optimize_fixed(&[c()], &[fix("3g.20gb")], &cands, Objective::MeanSlowdown).unwrap();
        assert_eq!(p.layout.len(), 1);
        assert_eq!(geo.profile(p.layout[0]).unwrap().name, "3g.20gb");
        // B cannot run in a 2g.10gb (out of memory), and two 4g.20gb do not fit one GPU.
        assert!(
            optimize_fixed(&[b()], &[fix("2g.10gb")], &cands, Objective::MeanSlowdown).is_none()
        );
        assert!(optimize_fixed(
            &[a(), c()],
            &[fix("4g.20gb"), fix("4g.20gb")],
            &cands,
            Objective::MeanSlowdown
        )
        .is_none());
        // No fixed profile: exactly `optimize`.
        assert_eq!(
            optimize_fixed(
                &[a(), b(), c()],
                &[None, None],
                &cands,
                Objective::MeanSlowdown
            ),
            optimize(&[a(), b(), c()], &cands, Objective::MeanSlowdown)
        );
    }

    #[test]
    fn hand_checked_three_jobs() {
        // B needs 3g or 4g. With B on 4g the rest is [2, 1]: best A 2g, C 1g = 1.25 + 1.667;
        // total 4.583. With B on 3g, [3, 2, 2]: 2 + 1.25 + 1.111 = 4.361, the optimum.
        let cands = Candidates::new(&geo(), LayoutSet::Generated);
        let p = optimize(&[a(), b(), c()], &cands, Objective::MeanSlowdown).unwrap();
        assert_eq!(p.sizes, vec![2, 3, 2]);
        assert!((p.cost - (1.25 + 2.0 + 1.0 / 0.9) / 3.0).abs() < 1e-12);
        // Throughput: B on 4g (0.6) with A 2g (0.8), C 1g (0.6) = 2.0 vs [3,2,2]: 0.5 + 0.8
        // + 0.9 = 2.2; [3,3,1] does not fit in memory slices. So [3, 2, 2] again.
        let t = optimize(&[a(), b(), c()], &cands, Objective::Throughput).unwrap();
        assert!((t.cost + 2.2 / 3.0).abs() < 1e-12, "{t:?}");
    }

    #[test]
    fn infeasible_and_full() {
        let cands = Candidates::new(&geo(), LayoutSet::Generated);
        // Three jobs that all need 3g do not fit (only two 3g).
        assert!(optimize(&[b(), b(), b()], &cands, Objective::MeanSlowdown).is_none());
        assert!(feasible(&[b(), b()], &cands));
        // Seven small jobs: only 7 × 1g.
        let p = optimize(&vec![a(); 7], &cands, Objective::MeanSlowdown).unwrap();
        assert_eq!(p.sizes, vec![1; 7]);
        assert!(optimize(&vec![a(); 8], &cands, Objective::MeanSlowdown).is_none());
        assert!(optimize(&[], &cands, Objective::MeanSlowdown).is_none());
        // A job alone takes the whole GPU.
        assert_eq!(
            optimize(&[a()], &cands, Objective::MeanSlowdown)
                .unwrap()
                .sizes,
            vec![7]
        );
    }

    #[test]
    fn pruned_search_equals_brute_force() {
        use tessera_model::SimRng;
        let cands = Candidates::new(&geo(), LayoutSet::Generated);
        let mut rng = SimRng::seed_from_u64(9);
        for _ in 0..200 {
            let k = 1 + rng.below(5) as usize;
            let jobs: Vec<SliceSpeeds> = (0..k)
                .map(|_| {
                    let mut s: SliceSpeeds = [None; 8];
                    let min = [1usize, 1, 2, 3][rng.below(4) as usize];
                    for c in [1usize, 2, 3, 4, 7] {
                        if c >= min {
                            s[c] = Some(if c == 7 {
                                1.0
                            } else {
                                rng.uniform_range(0.1, 1.0)
                            });
                        }
                    }
                    s
                })
                .collect();
            let fast = optimize(&jobs, &cands, Objective::MeanSlowdown).map(|p| p.cost);
            // Brute force: every candidate, every permutation of its slots.
            let mut brute: Option<f64> = None;
            for cand in cands.with(k) {
                let mut idx: Vec<usize> = (0..k).collect();
                permute(&mut idx, 0, &mut |perm| {
                    let mut total = 0.0;
                    for (j, &slot) in perm.iter().enumerate() {
                        match jobs[j][cand.sizes[slot] as usize] {
                            Some(s) => total += 1.0 / s,
                            None => return,
                        }
                    }
                    let mean = total / k as f64;
                    if brute.is_none_or(|b| mean < b) {
                        brute = Some(mean);
                    }
                });
            }
            match (fast, brute) {
                (Some(f), Some(b)) => assert!((f - b).abs() < 1e-9, "{f} vs {b}"),
                (None, None) => {}
                other => panic!("{other:?}"),
            }
        }
    }

    fn permute(v: &mut Vec<usize>, i: usize, f: &mut dyn FnMut(&[usize])) {
        if i == v.len() {
            f(v);
            return;
        }
        for j in i..v.len() {
            v.swap(i, j);
            permute(v, i + 1, f);
            v.swap(i, j);
        }
    }
}
