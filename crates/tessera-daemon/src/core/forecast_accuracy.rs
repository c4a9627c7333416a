//! How accurate expected starts are: a trace replayed through the core with the scripted
//! backend on virtual time, predictions taken at each submission and every half hour, and
//! compared with the starts that happened. A prediction counts as right when it is within
//! 20% of the wait still ahead when it was made, or within 10 minutes.
//!
//! The trace's jobs run for less than they declare, as users' time limits do: the actual
//! run time is the declared duration divided by a factor drawn log-uniformly in [1, 4].
//! Running jobs report their progress (iterations and rate, as the SDK does), so the forecast
//! knows how fast they really go; a job not yet started is known only by what it declares.
//! The baseline is a Slurm-like estimate (`squeue --start`: [`crate::forecast::slurm_like`],
//! running jobs end at start + time limit, pending ones planned in order with backfill).
//!
//! The full figures (RESULTS.md):
//! `cargo test -p tessera-daemon --release --lib forecast_accuracy -- --ignored --nocapture`.

use std::collections::BTreeMap;

use tessera_model::{SimDuration, SimRng, SimTime};

use super::testkit::{node, policy, Event, Harness, TOKEN};
use crate::core::runs::RunStatus;
use crate::forecast::{run, slurm_like, ForecastSettings};
use crate::types::{JobState, ProgressReport};

/// One job of the trace.
#[derive(Clone, Copy, Debug)]
struct Item {
    at: u64,
    gpus: u32,
    /// What it declares (`durationSeconds`), s.
    declared: u64,
    /// How long it really runs on its GPUs, s (also its iterations: one per second).
    actual: u64,
}

/// `n` jobs on a cluster of `gpus` GPUs at about 90% load: Poisson arrivals, 1–8 GPUs,
/// actual run times log-uniform in 5 min–4 h, declared 1–4× longer.
fn trace(n: usize, gpus: u32, seed: u64) -> Vec<Item> {
    let mut rng = SimRng::seed_from_u64(seed);
    let sizes = [1, 1, 1, 2, 2, 4, 8];
    let mean_gpus = 19.0 / 7.0;
    let (lo, hi) = (300f64.ln(), 14_400f64.ln());
    let mean_secs = (14_400.0 - 300.0) / (hi - lo);
    let gap = mean_gpus * mean_secs / (0.9 * f64::from(gpus));
    let mut t = 0.0;
    (0..n)
        .map(|_| {
            t += -gap * (1.0 - rng.uniform()).ln();
            let actual = rng.uniform_range(lo, hi).exp().round() as u64;
            let factor = rng.uniform_range(0.0, 4f64.ln()).exp();
            Item {
                at: t as u64,
                gpus: sizes[rng.below(sizes.len() as u64) as usize],
                declared: (actual as f64 * factor).round() as u64,
                actual,
            }
        })
        .collect()
}

/// Right (within 20% of the wait ahead, or 10 minutes) and counted, per estimator.
#[derive(Clone, Copy, Debug, Default)]
struct Score {
    right: usize,
    total: usize,
}

impl Score {
    fn add(&mut self, made_at: SimTime, predicted: Option<SimTime>, actual: SimTime) {
        self.total += 1;
        let Some(p) = predicted else { return };
        let err = (p.as_micros() as f64 - actual.as_micros() as f64).abs() / 1e6;
        let ahead = actual.saturating_since(made_at).as_secs_f64();
        if err <= 600f64.max(0.2 * ahead) {
            self.right += 1;
        }
    }

    fn share(&self) -> f64 {
        if self.total == 0 {
            return 1.0;
        }
        self.right as f64 / self.total as f64
    }
}

#[derive(Debug, Default)]
struct Accuracy {
    /// At submission, jobs that did not start at once: forecast, Slurm-like.
    at_submit: (Score, Score),
    /// Every half hour, every pending job.
    periodic: (Score, Score),
    /// Jobs, and those that waited.
    jobs: usize,
    waited: usize,
    /// Forecasts run and their slowest wall time, s.
    forecasts: usize,
    slowest: f64,
}

/// (predicted by the forecast, by the baseline) per pending job id.
type Predictions = BTreeMap<i64, (Option<SimTime>, Option<SimTime>)>;

fn predict(h: &Harness, settings: &ForecastSettings, acc: &mut Accuracy) -> Predictions {
    let input = h.core.forecast_input(h.now);
    let ours = run(&input, settings).expect("forecast runs");
    let slurm =
        run(&slurm_like(&input), &ForecastSettings::new("fifo", None)).expect("baseline runs");
    acc.forecasts += 1;
    acc.slowest = acc.slowest.max(ours.wall_secs);
    ours.jobs
        .iter()
        .zip(&slurm.jobs)
        .filter(|(o, _)| o.pending)
        .map(|(o, s)| (o.id, (o.start, s.start)))
        .collect()
}

/// A prediction: when, of which job, half-hourly (else at submission), by the forecast and
/// by the baseline.
type Made = (SimTime, i64, bool, Option<SimTime>, Option<SimTime>);

/// Replays `items` on `nodes`×8 GPUs under `name` and scores the predictions.
fn replay(name: &str, round: Option<u64>, nodes: usize, items: &[Item]) -> Accuracy {
    let inventory: Vec<_> = (0..nodes).map(|i| node(&format!("n{i}"), 8)).collect();
    let mut h = Harness::new_at(inventory, policy(name, round), SimTime::ZERO);
    let settings = ForecastSettings::new(name, round.map(SimDuration::from_secs));
    let mut acc = Accuracy::default();
    // Per job id: its item, actual µs done, running since, predictions made.
    let mut item_of: BTreeMap<i64, Item> = BTreeMap::new();
    let mut done_us: BTreeMap<i64, u64> = BTreeMap::new();
    let mut since: BTreeMap<i64, SimTime> = BTreeMap::new();
    let mut first_start: BTreeMap<i64, SimTime> = BTreeMap::new();
    let mut made: Vec<Made> = Vec::new();
    let mut next_item = 0;
    let mut next_periodic = SimTime::from_secs(1800);
    for _ in 0..1_000_000 {
        for (&id, &s) in &since {
            let left = item_of[&id].actual * 1_000_000 - done_us[&id];
            if s + SimDuration::from_micros(left) <= h.now && h.run_of(id).is_some() {
                h.end_run(id, RunStatus::Completed);
            }
        }
        h.poll();
        since.retain(|&id, _| !h.state(id).is_terminal());
        let mut submitted = Vec::new();
        while let Some(it) = items
            .get(next_item)
            .filter(|it| SimTime::from_secs(it.at) == h.now)
        {
            let body = format!(
                "name: j{next_item}\ncommand: [sleep, \"1\"]\ngpus: {}\nhints: {{durationSeconds: {}, iterations: {}}}\n",
                it.gpus, it.declared, it.actual
            );
            let mut r = h.core.submit(h.now, vec![(Some(TOKEN.into()), body)]);
            let id = r.pop().expect("one answer").expect("accepted").id;
            h.drain();
            item_of.insert(id, *it);
            done_us.insert(id, 0);
            submitted.push(id);
            next_item += 1;
        }
        if h.core.wants_schedule(h.now) {
            for (&id, &s) in &since {
                let done = done_us[&id] + h.now.saturating_since(s).as_micros();
                let report = ProgressReport {
                    iterations: done / 1_000_000,
                    iterations_per_second: Some(1.0),
                    ..ProgressReport::default()
                };
                h.core
                    .report_progress(h.now, id, report)
                    .expect("progress accepted");
            }
            h.schedule();
        }
        for e in h.take_events() {
            match e {
                Event::Launch(id, ..) => {
                    since.insert(id, h.now);
                    first_start.entry(id).or_insert(h.now);
                }
                Event::Stop(id, ..) => {
                    if let Some(s) = since.remove(&id) {
                        *done_us.entry(id).or_default() += h.now.saturating_since(s).as_micros();
                    }
                }
                _ => {}
            }
        }
        since.retain(|&id, _| !h.state(id).is_terminal());
        let waiting: Vec<i64> = submitted
            .into_iter()
            .filter(|&id| h.state(id) == JobState::Pending)
            .collect();
        let periodic = h.now >= next_periodic;
        if !waiting.is_empty() || periodic {
            let p = predict(&h, &settings, &mut acc);
            for id in &waiting {
                if let Some(&(o, s)) = p.get(id) {
                    made.push((h.now, *id, false, o, s));
                }
            }
            if periodic {
                next_periodic = h.now + SimDuration::from_secs(1800);
                for (&id, &(o, s)) in &p {
                    made.push((h.now, id, true, o, s));
                }
            }
        }
        let all_done =
            next_item == items.len() && item_of.keys().all(|&id| h.state(id).is_terminal());
        if all_done {
            break;
        }
        let arrival = items.get(next_item).map(|it| SimTime::from_secs(it.at));
        let completion = since
            .iter()
            .map(|(&id, &s)| {
                s + SimDuration::from_micros(item_of[&id].actual * 1_000_000 - done_us[&id])
            })
            .min();
        let periodic = (!since.is_empty() || h.core.wants_schedule(h.now)).then_some(next_periodic);
        let next = [arrival, completion, h.core.poll_timeout(), periodic]
            .into_iter()
            .flatten()
            .filter(|&t| t > h.now)
            .min()
            .expect("something is due");
        h.now = next;
    }
    acc.jobs = item_of.len();
    acc.waited = made.iter().filter(|m| !m.2).count();
    // The start a prediction is about: the job's next start after it was made.
    for (t, id, periodic, ours, slurm) in made {
        let Some(&actual) = first_start.get(&id) else {
            continue;
        };
        let actual = actual.max(t);
        let score = if periodic {
            &mut acc.periodic
        } else {
            &mut acc.at_submit
        };
        score.0.add(t, ours, actual);
        score.1.add(t, slurm, actual);
    }
    acc
}

fn report(name: &str, acc: &Accuracy) -> String {
    format!(
        "{name}: {} jobs, {} waited; at submission: forecast {:.1}% within 20%/10 min, \
         Slurm-like {:.1}% ({} predictions); half-hourly: forecast {:.1}%, Slurm-like {:.1}% \
         ({} predictions); {} forecasts, slowest {:.3} s",
        acc.jobs,
        acc.waited,
        100.0 * acc.at_submit.0.share(),
        100.0 * acc.at_submit.1.share(),
        acc.at_submit.0.total,
        100.0 * acc.periodic.0.share(),
        100.0 * acc.periodic.1.share(),
        acc.periodic.0.total,
        acc.forecasts,
        acc.slowest,
    )
}

/// Under FIFO the forecast knows what the baseline knows for jobs not started, and more for
/// running ones (their real speed): it must be right more often.
#[test]
fn fifo_forecasts_beat_the_slurm_like_estimate() {
    let acc = replay("fifo", None, 2, &trace(120, 16, 7));
    eprintln!("{}", report("fifo", &acc));
    assert!(acc.waited > 20, "the trace makes jobs wait: {acc:?}");
    assert!(
        acc.at_submit.0.share() > acc.at_submit.1.share(),
        "{}",
        report("fifo", &acc)
    );
    assert!(acc.periodic.0.share() > acc.periodic.1.share());
}

/// Under LAS (preemptive), a FIFO plan by time limits ignores preemption altogether.
#[test]
fn las_forecasts_beat_the_slurm_like_estimate() {
    let acc = replay("las", Some(300), 2, &trace(120, 16, 7));
    eprintln!("{}", report("las", &acc));
    assert!(acc.at_submit.0.share() > acc.at_submit.1.share());
}

/// The figures of RESULTS.md: 600 jobs on 4 nodes × 8 GPUs, three seeds, FIFO and LAS.
#[test]
#[ignore = "about a minute in release: run with --ignored for RESULTS.md"]
fn accuracy_figures() {
    for (name, round) in [("fifo", None), ("las", Some(300))] {
        for seed in [1, 2, 3] {
            let acc = replay(name, round, 4, &trace(600, 32, seed));
            println!("seed {seed} {}", report(name, &acc));
        }
    }
}

/// The refresh benchmark of BENCHMARKS.md: 2,000 running and 10,000 pending jobs on 1,000
/// nodes of 8 GPUs; the state copied on the scheduling thread, then the forked run.
/// `cargo test -p tessera-daemon --release --lib forecast_refresh_speed -- --ignored --nocapture`
#[test]
#[ignore = "a benchmark: run in release with --ignored"]
fn forecast_refresh_speed() {
    for (name, round) in [("fifo", None), ("las", Some(300))] {
        let inventory: Vec<_> = (0..1000).map(|i| node(&format!("n{i}"), 8)).collect();
        let mut h = Harness::new_at(inventory, policy(name, round), SimTime::ZERO);
        h.core.settings.limits.max_active_jobs_per_tenant = 20_000;
        h.core.settings.limits.max_active_jobs = 20_000;
        let mut rng = SimRng::seed_from_u64(11);
        let mut submit = |h: &mut Harness, n: usize, gpus: u32| {
            let bodies = (0..n)
                .map(|i| {
                    let secs = 600 + rng.below(20_000);
                    let body = format!(
                        "name: b{i}\ncommand: [sleep, \"1\"]\ngpus: {gpus}\nhints: {{durationSeconds: {secs}}}\n"
                    );
                    (Some(TOKEN.to_string()), body)
                })
                .collect();
            for r in h.core.submit(h.now, bodies) {
                r.expect("accepted");
            }
            h.drain();
        };
        submit(&mut h, 2000, 4);
        h.schedule();
        h.advance(60);
        h.poll();
        submit(&mut h, 10_000, 2);
        h.advance(1);
        h.schedule();
        let running = h
            .store_jobs
            .values()
            .filter(|r| r.state == JobState::Running)
            .count();
        assert_eq!(running, 2000, "the cluster is full");
        let settings = ForecastSettings::new(name, round.map(SimDuration::from_secs));
        let mut best = (f64::MAX, f64::MAX);
        for _ in 0..3 {
            let t0 = std::time::Instant::now();
            let input = h.core.forecast_input(h.now);
            let copy = t0.elapsed().as_secs_f64();
            let r = run(&input, &settings).expect("forecast runs");
            let total = t0.elapsed().as_secs_f64();
            assert!(r.stopped.is_none(), "{:?}", r.stopped);
            assert_eq!(r.jobs.iter().filter(|j| j.pending).count(), 10_000);
            assert!(r.jobs.iter().all(|j| j.start.is_some()));
            best = (best.0.min(copy), best.1.min(total));
        }
        println!(
            "forecast refresh, {name}: 2,000 running + 10,000 pending on 1,000 nodes: state \
             copy {:.1} ms, copy + forked run {:.3} s (best of 3)",
            best.0 * 1e3,
            best.1
        );
    }
}

/// The state copied from the core forks the simulator where the daemon is, and the views
/// (queue, describe) carry each pending job's expected start.
#[test]
fn views_show_the_expected_start_of_each_pending_job() {
    use crate::core::{Request, Response};
    use crate::forecast::Forecast;
    let mut h = Harness::new_at(
        vec![node("n0", 8), node("n1", 8)],
        policy("fifo", None),
        SimTime::ZERO,
    );
    let a = h.submit("a", 8, 1000);
    let b = h.submit("b", 8, 400);
    h.schedule();
    h.advance(100);
    // `a` reports it is twice as fast as declared: 200 of 1000 iterations done, 2/s.
    h.core
        .report_progress(
            h.now,
            a,
            ProgressReport {
                iterations: 200,
                iterations_per_second: Some(2.0),
                ..ProgressReport::default()
            },
        )
        .expect("progress accepted");
    let c = h.submit("c", 8, 300);
    let d = h.submit("d", 16, 300);
    h.schedule();
    h.core
        .set_node_health(h.now, "n1", Some(crate::core::runs::NodeHealth::Draining))
        .expect("known node");
    h.drain();
    assert_eq!(h.state(c), JobState::Pending);
    let input = h.core.forecast_input(h.now);
    let r = run(&input, &ForecastSettings::new("fifo", None)).expect("forecast runs");
    let start = |id: i64| r.jobs.iter().find(|j| j.id == id).and_then(|j| j.start);
    // `a` ends at 100 + 800 / 2 = 500 s on n0; `b` holds n1 until 400 s, but n1 is drained.
    assert_eq!(start(c), Some(SimTime::from_secs(500)));
    // `d` needs both nodes: never, with n1 drained.
    assert_eq!(start(d), None);
    assert!(r.jobs.iter().any(|j| j.id == b && !j.pending));
    let forecast = Forecast::of(&r);
    let mut q = h
        .core
        .handle_request(h.now, Some(TOKEN), Request::Queue)
        .expect("queue");
    forecast.annotate(&mut q);
    let Response::Queue(q) = q else {
        panic!("a queue")
    };
    let shown: Vec<_> = q
        .pending
        .iter()
        .map(|j| (j.id, j.expected_start.as_ref().and_then(|e| e.at)))
        .collect();
    assert_eq!(shown, [(c, Some(500.0)), (d, None)]);
    let e = q.pending[1].expected_start.as_ref().expect("d has one");
    assert_eq!(e.not_before, Some(100.0 + 30.0 * 24.0 * 3600.0));
}
