//! The job book's accounting both drivers keep, the simulator (`tessera-sim`) and the daemon
//! core (`tessera-daemon`), so that a job's attained service and a restart's cost mean the
//! same in both (issue 38): service is GPU time held while the job makes progress, and a
//! restart (after a preemption or a resize) holds its GPUs for the model's checkpoint +
//! restore time (plus re-tuning) before progress resumes, during which no service is
//! attained. Otherwise a preemptive policy with rounds shorter than the restore time
//! livelocks (each job preempted before it ever resumes), and LAS ranks jobs differently in
//! the two drivers.

use tessera_model::{SimDuration, SimTime};
use tessera_perf::RestartCosts;

/// GPU·µs of service a job holding `gpus` whole GPUs attains from `from` to `to`, counting
/// only the time after it resumes at `resumes_at` (past a restart's restore).
#[inline]
pub fn service_between(gpus: u32, from: SimTime, resumes_at: SimTime, to: SimTime) -> u64 {
    u64::from(gpus).saturating_mul(to.saturating_since(from.max(resumes_at)).as_micros())
}

/// How long a start holds `gpus` GPUs of a job of `model` before it makes progress: nothing
/// for a first start, the model's checkpoint + restore and the re-tuning of `gpus` GPUs for a
/// restart.
pub fn restore_time(costs: &RestartCosts, model: &str, gpus: u32, restart: bool) -> SimDuration {
    if restart {
        costs.checkpoint_restore(model) + costs.tuning(gpus)
    } else {
        SimDuration::ZERO
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn service_counts_only_after_the_restore() {
        let s = SimTime::from_secs;
        assert_eq!(service_between(2, s(10), s(10), s(40)), 60_000_000);
        assert_eq!(service_between(2, s(10), s(25), s(40)), 30_000_000);
        assert_eq!(
            service_between(2, s(10), s(50), s(40)),
            0,
            "still restoring"
        );
        assert_eq!(service_between(3, s(30), s(25), s(40)), 30_000_000);
    }

    #[test]
    fn only_a_restart_costs() {
        let costs = RestartCosts::default();
        assert_eq!(
            restore_time(&costs, "resnet50", 4, false),
            SimDuration::ZERO
        );
        assert_eq!(
            restore_time(&costs, "resnet50", 4, true),
            costs.checkpoint_restore("resnet50") + costs.tuning(4)
        );
        assert!(restore_time(&costs, "resnet50", 4, true) > SimDuration::ZERO);
    }
}
