//! Synthetic generators and built-in traces.

use tessera_model::SimDuration;
use tessera_trace::synthetic::{DurationDist, PoissonWorkload, MIN_DURATION, PHILLY_GPU_MIX};
use tessera_trace::{builtin_trace, TraceStats, BUILTIN_TRACES, DEFAULT_JOBS_PER_HOUR};

fn philly(jobs: usize, seed: u64) -> PoissonWorkload {
    PoissonWorkload {
        jobs,
        jobs_per_hour: 30.0,
        gpu_mix: PHILLY_GPU_MIX.to_vec(),
        durations: DurationDist::PhillyRuntimes,
        seed,
    }
}

#[test]
fn same_seed_same_workload() {
    assert_eq!(philly(500, 42).generate(), philly(500, 42).generate());
    assert_ne!(philly(500, 42).generate(), philly(500, 43).generate());
}

#[test]
fn mean_inter_arrival_matches_the_rate() {
    for rate in [2.0, 30.0, 400.0] {
        let w = PoissonWorkload {
            jobs_per_hour: rate,
            ..philly(20_000, 7)
        }
        .generate();
        let jobs = w.jobs();
        let span = (jobs[jobs.len() - 1].submit - jobs[0].submit).as_secs_f64();
        let mean = span / (jobs.len() - 1) as f64;
        let want = 3600.0 / rate;
        assert!(
            (mean - want).abs() / want < 0.05,
            "rate {rate}: mean gap {mean}, want {want}"
        );
    }
}

#[test]
fn gpu_mix_frequencies_match() {
    let w = philly(50_000, 11).generate();
    let stats = TraceStats::of(&w);
    assert_eq!(stats.gpu_histogram.len(), 4);
    for ((gpus, n), (want_gpus, p)) in stats.gpu_histogram.iter().zip(PHILLY_GPU_MIX) {
        assert_eq!(*gpus, want_gpus);
        let share = *n as f64 / 50_000.0;
        assert!((share - p).abs() < 0.01, "{gpus} GPUs: {share} vs {p}");
    }
}

#[test]
fn no_zero_length_jobs() {
    let w = philly(50_000, 3).generate();
    assert!(w
        .jobs()
        .iter()
        .all(|j| j.duration >= MIN_DURATION && j.iterations >= 1));
    let fixed = PoissonWorkload {
        durations: DurationDist::Fixed(SimDuration::ZERO),
        ..philly(10, 1)
    };
    assert!(fixed
        .generate()
        .jobs()
        .iter()
        .all(|j| j.duration == MIN_DURATION));
    let tiny = PoissonWorkload {
        durations: DurationDist::Exponential { mean_s: 1e-3 },
        ..philly(100, 1)
    };
    assert!(tiny
        .generate()
        .jobs()
        .iter()
        .all(|j| j.duration == MIN_DURATION));
}

#[test]
fn exponential_durations_have_their_mean() {
    let w = PoissonWorkload {
        durations: DurationDist::Exponential { mean_s: 3600.0 },
        ..philly(20_000, 5)
    }
    .generate();
    let mean = w
        .jobs()
        .iter()
        .map(|j| j.duration.as_secs_f64())
        .sum::<f64>()
        / 20_000.0;
    assert!((mean - 3600.0).abs() / 3600.0 < 0.03, "{mean}");
}

#[test]
fn philly_runtimes_are_sampled_faithfully() {
    // The sample's median is about 1,000 s and its mean about 14,600 s: a generated workload
    // of 50k jobs should be close to both.
    let sample = tessera_trace::synthetic::philly_runtimes();
    let median = sample[sample.len() / 2];
    let w = philly(50_000, 9).generate();
    let s = TraceStats::of(&w);
    let p50 = s.duration_p50.as_secs_f64();
    assert!((p50 - median).abs() / median < 0.05, "{p50} vs {median}");
    // The mean is dominated by the long tail (standard deviation about 91,000 s, so the mean
    // of 50k draws has a standard error of about 2.8%): within 12% (over 4 standard errors).
    let mean = sample.iter().map(|&x| x.max(1.0)).sum::<f64>() / sample.len() as f64;
    assert!(
        (mean - 14_613.3).abs() < 1.0,
        "the sample's own mean: {mean}"
    );
    let drawn = s.duration_mean.as_secs_f64();
    assert!((drawn - mean).abs() / mean < 0.12, "{drawn} vs {mean}");
}

#[test]
fn degenerate_parameters_do_not_panic() {
    let w = PoissonWorkload {
        jobs_per_hour: f64::NAN,
        gpu_mix: vec![],
        ..philly(5, 1)
    }
    .generate();
    assert!(w
        .jobs()
        .iter()
        .all(|j| j.submit.as_micros() == 0 && j.gpus == 1));
    assert!(PoissonWorkload {
        jobs: 0,
        ..philly(0, 1)
    }
    .generate()
    .is_empty());
}

#[test]
fn builtin_philly_synthetic() {
    assert!(BUILTIN_TRACES
        .iter()
        .any(|(n, _)| *n == "philly-synthetic-2k"));
    let a = builtin_trace("philly-synthetic-2k", 1).unwrap();
    assert_eq!(a.len(), 2_000);
    assert_eq!(Some(&a), builtin_trace("philly-synthetic-2k", 1).as_ref());
    assert_ne!(Some(&a), builtin_trace("philly-synthetic-2k", 2).as_ref());
    let expected = PoissonWorkload {
        jobs_per_hour: DEFAULT_JOBS_PER_HOUR,
        ..philly(2_000, 1)
    };
    assert_eq!(a, expected.generate());
}

/// Issue 10: `--jobs 2^64-1` panicked on an unbounded allocation, `--load 1e-300` wrote times
/// its own reader saturated, and `--gpus 1000001` wrote rows its reader refuses.
#[test]
fn parameters_are_bounded_and_the_stream_matches_generate() {
    use tessera_trace::GenerateError;
    assert_eq!(philly(10, 1).check(), Ok(()));
    assert_eq!(
        philly(usize::MAX, 1).check(),
        Err(GenerateError::TooManyJobs(usize::MAX))
    );
    let bad_gpus = PoissonWorkload {
        gpu_mix: vec![(1_000_001, 1.0)],
        ..philly(3, 1)
    };
    assert_eq!(bad_gpus.check(), Err(GenerateError::BadGpus(1_000_001)));
    for rate in [0.0, -1.0, f64::NAN, f64::INFINITY] {
        let w = PoissonWorkload {
            jobs_per_hour: rate,
            ..philly(3, 1)
        };
        assert!(
            matches!(w.check(), Err(GenerateError::BadRate(_))),
            "{rate}"
        );
    }
    let slow = PoissonWorkload {
        jobs_per_hour: 1e-300,
        ..philly(3, 1)
    };
    assert!(matches!(
        slow.check(),
        Err(GenerateError::SpanTooLong { .. })
    ));
    // Drawn past the limit: the stream ends with an error instead of clamped times.
    let items: Vec<_> = slow.stream().collect();
    assert!(matches!(
        items.last(),
        Some(Err(GenerateError::SpanTooLong { .. }))
    ));
    assert!(items.len() <= 2, "nothing is drawn after the error");
    // The stream is the workload, job for job.
    let spec = philly(300, 9);
    let streamed: Vec<_> = spec.stream().map(Result::unwrap).collect();
    assert_eq!(streamed.as_slice(), spec.generate().jobs());
}
