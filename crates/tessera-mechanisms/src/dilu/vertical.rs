//! Dilu's vertical scaling on one GPU (DESIGN §5.4), at batch granularity: the effective SM
//! share each co-located instance gets, and the overflow controller that sets how much of
//! the GPU training may use.
//!
//! - [`effective_shares`]: busy inference instances get their limit while no training shares
//!   the GPU and their request otherwise (scaled down together if they would exceed the
//!   GPU); training jobs split what inference leaves, capped by the controller's budget, in
//!   proportion to their requests.
//! - [`OverflowController`]: each inference batch reports its busy period; overflow = period
//!   / shortest recent period. At 1.6 ≤ overflow < 4 (1.3 for LLMs) training's budget is cut
//!   (÷ overflow, floor 1%); below 1.2, every 5th such batch grows it ×1.3 up to the whole
//!   GPU; after 0.6 s with all inference idle training gets everything. Overflows of 4 or
//!   more are taken as outliers (a cold start, a one-off stall) and ignored.
//!
//! - [`GpuOverflow`]: the same controller for a GPU shared by several inference instances
//!   (one introspection history each, one training budget), which `serving.rs` plugs into the
//!   simulator's `ShareController` hook.
//!
//! - [`QuotaScaler`], [`quota_sample`], [`raised_request`]: the same idea at the granularity a
//!   real driver sees (a load sample a second): an instance under sustained overload gets a
//!   larger SM request (`RetuneInstance`, in place), and gives it back when idle.
//!
//! Pure state machines; they read no clock.

use std::collections::{BTreeMap, VecDeque};

/// Busy inference demand on a GPU.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct InferenceDemand {
    /// Guaranteed share (0–1).
    pub request: f64,
    /// Burst ceiling (0–1).
    pub limit: f64,
    /// Has work now (an idle instance gets no SMs).
    pub busy: bool,
}

/// Effective shares of `inference` and `training_requests` on one GPU when training may use
/// at most `training_budget` of it. Returns (inference shares, training shares); their sum
/// never exceeds 1. Non-finite or negative inputs count as 0.
pub fn effective_shares(
    inference: &[InferenceDemand],
    training_requests: &[f64],
    training_budget: f64,
) -> (Vec<f64>, Vec<f64>) {
    let clean = |x: f64| {
        if x.is_finite() && x > 0.0 {
            x.min(1.0)
        } else {
            0.0
        }
    };
    let training_present = training_requests.iter().any(|&r| clean(r) > 0.0);
    let mut inf: Vec<f64> = inference
        .iter()
        .map(|d| match (d.busy, training_present) {
            (false, _) => 0.0,
            (true, false) => clean(d.limit).max(clean(d.request)),
            (true, true) => clean(d.request),
        })
        .collect();
    let used: f64 = inf.iter().sum();
    if used > 1.0 {
        for s in &mut inf {
            *s /= used;
        }
    }
    let left = (1.0 - inf.iter().sum::<f64>()).max(0.0);
    let pool = left.min(clean(training_budget));
    let total_req: f64 = training_requests.iter().map(|&r| clean(r)).sum();
    let train = training_requests
        .iter()
        .map(|&r| {
            if total_req > 0.0 {
                pool * clean(r) / total_req
            } else {
                0.0
            }
        })
        .collect();
    (inf, train)
}

/// Overflow ratio at or above which an ordinary inference instance cuts training's budget.
pub const CUT_AT: f64 = 1.6;
/// The same for LLM inference.
pub const CUT_AT_LLM: f64 = 1.3;
/// Overflow below which training's budget may grow.
pub const GROW_BELOW: f64 = 1.2;
/// Overflows at or above this are ignored as outliers.
pub const OUTLIER: f64 = 4.0;
/// Growth factor, applied every [`GROW_EVERY`]-th calm batch.
pub const GROW: f64 = 1.3;
/// Calm batches between growths.
pub const GROW_EVERY: u32 = 5;
/// Smallest training budget.
pub const FLOOR: f64 = 0.01;
/// Seconds of all-idle inference after which training gets the whole GPU.
pub const IDLE_RELEASE_S: f64 = 0.6;
/// Busy periods remembered for "shortest recent period".
pub const WINDOW: usize = 64;

/// Training's budget on one GPU, driven by the inference batches that run beside it.
#[derive(Clone, Debug, PartialEq)]
pub struct OverflowController {
    budget: f64,
    cut_at: f64,
    recent: VecDeque<f64>,
    calm: u32,
}

impl OverflowController {
    /// A controller for a GPU whose latency-critical tenant is an LLM (`llm`) or not; the
    /// budget starts at the whole GPU.
    pub fn new(llm: bool) -> OverflowController {
        OverflowController {
            budget: 1.0,
            cut_at: if llm { CUT_AT_LLM } else { CUT_AT },
            recent: VecDeque::with_capacity(WINDOW),
            calm: 0,
        }
    }

    /// Training's current budget (fraction of the GPU).
    pub fn budget(&self) -> f64 {
        self.budget
    }

    /// An inference batch finished after `period_s` busy seconds; returns the overflow it
    /// measured (1 for the first batch), or `None` for an unusable period.
    pub fn observe_batch(&mut self, period_s: f64) -> Option<f64> {
        introspect(
            &mut self.recent,
            &mut self.calm,
            &mut self.budget,
            self.cut_at,
            period_s,
        )
    }

    /// All inference on the GPU has been idle for `idle_s` seconds.
    pub fn inference_idle(&mut self, idle_s: f64) {
        if idle_s > IDLE_RELEASE_S {
            self.budget = 1.0;
            self.calm = 0;
        }
    }
}

/// One batch's introspection: remember its period, measure the overflow against the
/// shortest recent period, and cut or grow `budget` by the rules above.
fn introspect(
    recent: &mut VecDeque<f64>,
    calm: &mut u32,
    budget: &mut f64,
    cut_at: f64,
    period_s: f64,
) -> Option<f64> {
    if !(period_s.is_finite() && period_s > 0.0) {
        return None;
    }
    if recent.len() == WINDOW {
        recent.pop_front();
    }
    recent.push_back(period_s);
    let shortest = recent.iter().copied().fold(f64::INFINITY, f64::min);
    let overflow = period_s / shortest;
    if overflow >= OUTLIER {
        return Some(overflow);
    }
    if overflow >= cut_at {
        *budget = (*budget / overflow).max(FLOOR);
        *calm = 0;
    } else if overflow < GROW_BELOW {
        *calm += 1;
        if calm.is_multiple_of(GROW_EVERY) {
            *budget = (*budget * GROW).min(1.0);
        }
    }
    Some(overflow)
}

/// Training's budget on one GPU shared by several inference instances: each instance keeps
/// its own recent periods (its "shortest recent period" is its own), any of them may cut the
/// one budget, and calm batches of any grow it.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct GpuOverflow {
    budget: Option<f64>,
    instances: BTreeMap<u32, (VecDeque<f64>, u32)>,
}

impl GpuOverflow {
    /// A GPU whose training may use all of it.
    pub fn new() -> GpuOverflow {
        GpuOverflow::default()
    }

    /// Training's current budget (fraction of the GPU).
    pub fn budget(&self) -> f64 {
        self.budget.unwrap_or(1.0)
    }

    /// A batch of `instance` (an LLM when `llm`) finished after `period_s` busy seconds;
    /// returns the overflow it measured.
    pub fn observe_batch(&mut self, instance: u32, llm: bool, period_s: f64) -> Option<f64> {
        let mut budget = self.budget();
        let (recent, calm) = self.instances.entry(instance).or_default();
        let cut_at = if llm { CUT_AT_LLM } else { CUT_AT };
        let out = introspect(recent, calm, &mut budget, cut_at, period_s);
        self.budget = Some(budget);
        out
    }

    /// All inference on the GPU has been idle for `idle_s` seconds (see
    /// [`OverflowController::inference_idle`]).
    pub fn inference_idle(&mut self, idle_s: f64) {
        if idle_s > IDLE_RELEASE_S {
            self.budget = Some(1.0);
            for (_, calm) in self.instances.values_mut() {
                *calm = 0;
            }
        }
    }
}

/// Samples (one a second) a [`QuotaScaler`] keeps.
pub const QUOTA_SAMPLES: usize = 5;
/// Overloaded samples among the last [`QUOTA_SAMPLES`] that raise an instance's request.
pub const RAISE_AT: usize = 3;
/// Idle samples among the last [`QUOTA_SAMPLES`] that give a raise back (all of them).
pub const LOWER_AT: usize = 5;
/// A rate below this fraction of what the instance's base request serves, with nothing
/// queued, is idle.
pub const IDLE_BELOW: f64 = 0.5;

/// What one second of an instance's load says about its quota.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum QuotaSample {
    /// More demand than its current request serves (or a backlog beyond one full batch).
    Overloaded,
    /// Little demand and nothing queued: a raise is not needed.
    Idle,
    /// Neither.
    Steady,
}

/// What a [`QuotaScaler`] decides.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum QuotaMove {
    /// Raise the request (toward the limit).
    Raise,
    /// Give the raise back (to the base request).
    Lower,
    /// Keep it.
    Stay,
}

/// Vertical scaling at the granularity a real driver sees (seconds, not batches): the
/// daemon has no per-batch events, so sustained overload or idleness of one instance, read
/// from its load reports once a second, moves its *quota* (an in-place `RetuneInstance`)
/// instead of a per-batch share. Raise after [`RAISE_AT`] overloaded samples of the last
/// [`QUOTA_SAMPLES`], give back after [`LOWER_AT`] idle ones; the history is cleared after
/// each move, as the horizontal scaler's is.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct QuotaScaler {
    samples: VecDeque<QuotaSample>,
}

impl QuotaScaler {
    /// Records a sample of an instance whose request is above its base (`raised`) or not,
    /// and decides.
    pub fn sample(&mut self, s: QuotaSample, raised: bool) -> QuotaMove {
        if self.samples.len() == QUOTA_SAMPLES {
            self.samples.pop_front();
        }
        self.samples.push_back(s);
        let count = |k: QuotaSample| self.samples.iter().filter(|&&x| x == k).count();
        let decision = if count(QuotaSample::Overloaded) >= RAISE_AT {
            QuotaMove::Raise
        } else if raised && count(QuotaSample::Idle) >= LOWER_AT {
            QuotaMove::Lower
        } else {
            QuotaMove::Stay
        };
        if decision != QuotaMove::Stay {
            self.samples.clear();
        }
        decision
    }
}

/// Classifies one second of an instance's load: `rate` requests/s it receives, `served_now`
/// requests/s its current request serves, `served_base` what its base request serves,
/// `queued` requests waiting and `max_batch`.
pub fn quota_sample(
    rate: f64,
    served_now: f64,
    served_base: f64,
    queued: u32,
    max_batch: u32,
) -> QuotaSample {
    let rate = if rate.is_finite() && rate > 0.0 {
        rate
    } else {
        0.0
    };
    if queued > max_batch.max(1) || rate > served_now {
        QuotaSample::Overloaded
    } else if queued == 0 && rate < IDLE_BELOW * served_base {
        QuotaSample::Idle
    } else {
        QuotaSample::Steady
    }
}

/// The request (permille) an overloaded instance is raised to: its current request times
/// the overflow (demand / what the current request serves), at least ×[`GROW`], at most its
/// `limit` and what the GPU's other requests leave (`room` = 1000 − Σ other requests), so
/// co-located requests stay guaranteed. `None` when that is no raise.
pub fn raised_request(current: u32, limit: u32, overflow: f64, room: u32) -> Option<u32> {
    let factor = if overflow.is_finite() {
        overflow.max(GROW)
    } else {
        GROW
    };
    let want = (f64::from(current.max(1)) * factor).ceil().min(1000.0) as u32;
    let to = want.min(limit).min(room);
    (to > current).then_some(to)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn busy(request: f64, limit: f64) -> InferenceDemand {
        InferenceDemand {
            request,
            limit,
            busy: true,
        }
    }

    #[test]
    fn inference_bursts_to_its_limit_only_without_training() {
        let (inf, train) = effective_shares(&[busy(0.3, 0.5)], &[], 1.0);
        assert_eq!((inf, train), (vec![0.5], vec![]));
        let (inf, train) = effective_shares(&[busy(0.3, 0.5)], &[0.4, 0.2], 1.0);
        assert_eq!(inf, vec![0.3]);
        // Training splits the remaining 0.7 in proportion 2:1.
        assert!((train[0] - 0.7 * 2.0 / 3.0).abs() < 1e-12 && (train[1] - 0.7 / 3.0).abs() < 1e-12);
        // The budget caps training; idle inference leaves everything.
        let (_, train) = effective_shares(&[busy(0.3, 0.5)], &[0.4], 0.25);
        assert_eq!(train, vec![0.25]);
        let idle = InferenceDemand {
            busy: false,
            ..busy(0.3, 0.5)
        };
        let (inf, train) = effective_shares(&[idle], &[0.4], 1.0);
        assert_eq!((inf, train), (vec![0.0], vec![1.0]));
    }

    #[test]
    fn shares_never_exceed_the_gpu() {
        let demands = [busy(0.4, 0.9), busy(0.5, 0.8), busy(f64::NAN, 2.0)];
        for budget in [0.0, 0.5, 1.0, f64::INFINITY, -1.0] {
            for train in [&[][..], &[0.5][..], &[0.3, f64::NAN, -2.0][..]] {
                let (inf, tr) = effective_shares(&demands, train, budget);
                let total: f64 = inf.iter().chain(&tr).sum();
                assert!(total <= 1.0 + 1e-12, "{budget} {train:?}: {total}");
                assert!(inf.iter().chain(&tr).all(|s| s.is_finite() && *s >= 0.0));
            }
        }
    }

    #[test]
    fn overflow_cuts_grows_and_releases() {
        let mut c = OverflowController::new(false);
        assert_eq!(c.observe_batch(0.010), Some(1.0));
        // A batch twice as slow as the shortest halves training's budget.
        assert_eq!(c.observe_batch(0.020), Some(2.0));
        assert!((c.budget() - 0.5).abs() < 1e-12);
        // 1.5x is tolerated for ordinary inference ...
        c.observe_batch(0.015);
        assert!((c.budget() - 0.5).abs() < 1e-12);
        // ... an outlier (≥ 4x) is ignored ...
        c.observe_batch(0.050);
        assert!((c.budget() - 0.5).abs() < 1e-12);
        // ... and every 5th calm batch grows the budget by 1.3.
        for i in 1..=10 {
            c.observe_batch(0.010);
            let want = 0.5 * GROW.powi(i / 5);
            assert!((c.budget() - want).abs() < 1e-12, "{i}: {}", c.budget());
        }
        // Repeated cuts stop at the floor.
        for _ in 0..40 {
            c.observe_batch(0.035);
        }
        assert!((c.budget() - FLOOR).abs() < 1e-12);
        c.inference_idle(0.5);
        assert!((c.budget() - FLOOR).abs() < 1e-12);
        c.inference_idle(0.7);
        assert_eq!(c.budget(), 1.0);
        // LLMs cut from 1.3x.
        let mut l = OverflowController::new(true);
        l.observe_batch(0.010);
        l.observe_batch(0.014);
        assert!((l.budget() - 1.0 / 1.4).abs() < 1e-12);
        assert_eq!(l.observe_batch(f64::NAN), None);
        assert_eq!(l.observe_batch(-1.0), None);
    }

    #[test]
    fn the_quota_scaler_raises_after_3_of_5_and_gives_back_after_5_idle() {
        use QuotaSample::*;
        let mut q = QuotaScaler::default();
        assert_eq!(q.sample(Overloaded, false), QuotaMove::Stay);
        assert_eq!(q.sample(Steady, false), QuotaMove::Stay);
        assert_eq!(q.sample(Overloaded, false), QuotaMove::Stay);
        assert_eq!(q.sample(Overloaded, false), QuotaMove::Raise, "3 of 4");
        // Cleared: two more overloaded samples are not enough.
        assert_eq!(q.sample(Overloaded, true), QuotaMove::Stay);
        assert_eq!(q.sample(Overloaded, true), QuotaMove::Stay);
        // Overloaded samples fall out of the 5-sample window.
        for _ in 0..3 {
            assert_eq!(q.sample(Steady, true), QuotaMove::Stay);
        }
        for _ in 0..4 {
            assert_eq!(q.sample(Idle, true), QuotaMove::Stay);
        }
        assert_eq!(q.sample(Idle, true), QuotaMove::Lower, "5 idle of 5");
        // Nothing to give back at the base request.
        for _ in 0..20 {
            assert_eq!(q.sample(Idle, false), QuotaMove::Stay);
        }
    }

    #[test]
    fn load_samples_and_raised_requests_by_hand() {
        // 30 req/s against 25 served at the current request: overloaded; a backlog beyond a
        // full batch of 8 too; 10 req/s under half of the 25 the base serves, nothing queued:
        // idle; 20 req/s: steady; a queue keeps it from idle.
        assert_eq!(
            quota_sample(30.0, 25.0, 25.0, 0, 8),
            QuotaSample::Overloaded
        );
        assert_eq!(quota_sample(1.0, 25.0, 25.0, 9, 8), QuotaSample::Overloaded);
        assert_eq!(quota_sample(10.0, 25.0, 25.0, 0, 8), QuotaSample::Idle);
        assert_eq!(quota_sample(20.0, 25.0, 25.0, 0, 8), QuotaSample::Steady);
        assert_eq!(quota_sample(10.0, 25.0, 25.0, 3, 8), QuotaSample::Steady);
        assert_eq!(quota_sample(f64::NAN, 25.0, 25.0, 0, 8), QuotaSample::Idle);
        // 300‰ at 1.2× overflow: at least ×1.3 → 390.
        assert_eq!(raised_request(300, 500, 1.2, 1000), Some(390));
        // At 2× it wants 600, capped by its limit 500 ...
        assert_eq!(raised_request(300, 500, 2.0, 1000), Some(500));
        // ... and by what the GPU's other requests leave (1000 − 550 = 450).
        assert_eq!(raised_request(300, 500, 2.0, 450), Some(450));
        // No room, or already at the limit: no raise.
        assert_eq!(raised_request(300, 500, 2.0, 300), None);
        assert_eq!(raised_request(500, 500, 2.0, 1000), None);
        assert_eq!(raised_request(300, 500, f64::INFINITY, 1000), Some(390));
    }
}
