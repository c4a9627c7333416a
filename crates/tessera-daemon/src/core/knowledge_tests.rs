//! Issue 38 item 2: with a truth configured, each job carries from its submission (and after
//! a restart) the knowledge the truth's catalogue gives a job of its model, which the policy
//! sees in `view.active`, and `describe` says where it came from; without one, nothing.

use super::api::{Request, Response};
use super::testkit::{node, policy, Harness, TOKEN};
use crate::types::JobView;

fn submit_model(h: &mut Harness, name: &str, model: Option<&str>) -> i64 {
    let hints = match model {
        Some(m) => format!("hints: {{model: {m}, batchSize: 128, durationSeconds: 600}}\n"),
        None => "hints: {durationSeconds: 600}\n".into(),
    };
    let body = format!("name: {name}\ncommand: [sleep, \"600\"]\ngpus: 1\n{hints}");
    let mut r = h.core.submit(h.now, vec![(Some(TOKEN.into()), body)]);
    let job = r.pop().expect("one").expect("accepted");
    h.drain();
    job.id
}

fn describe(h: &mut Harness, id: i64) -> JobView {
    match h
        .core
        .handle_request(h.now, Some(TOKEN), Request::Get { id })
    {
        Ok(Response::Detail(d)) => d.job,
        other => panic!("describe: {other:?}"),
    }
}

/// Whether the policy's view of job `id` carries knowledge.
fn known(h: &Harness, id: i64) -> bool {
    let idx = h.core.by_id[&id];
    h.core
        .kept_active()
        .iter()
        .find(|a| a.id.index() == idx)
        .is_some_and(|a| !a.knowledge.is_empty())
}

/// What the engine does for a config naming `truth`.
fn set_truth(core: &mut super::Core, truth: &str, policy: &str) {
    let options = tessera_mechanisms::TruthOptions::default();
    let t = tessera_mechanisms::build_truth(truth, &options).expect("a registered truth");
    let profiler = tessera_mechanisms::run_profiler(policy, &t, &options);
    core.set_profiler(t.name, profiler);
}

#[test]
fn jobs_carry_the_configured_truths_catalogue_knowledge_and_describe_says_so() {
    let mut h = Harness::new(vec![node("n1", 1)], policy("gavel", Some(60)));
    set_truth(&mut h.core, "gavel", "gavel");
    let a = submit_model(&mut h, "a", Some("resnet50"));
    let b = submit_model(&mut h, "b", Some("resnet50"));
    h.schedule();
    assert!(
        known(&h, a) && known(&h, b),
        "the policy sees both jobs' profiles"
    );
    let view = describe(&mut h, b);
    assert_eq!(
        view.knowledge.as_deref(),
        Some("catalogue of truth gavel: its profile of model \"resnet50\"")
    );
    // A restart profiles the stored jobs again (the engine sets the truth up first).
    h.restart_with(policy("gavel", Some(60)), |core| {
        set_truth(core, "gavel", "gavel")
    });
    h.schedule();
    assert!(
        known(&h, a) && known(&h, b),
        "restored jobs are profiled again"
    );
    assert_eq!(describe(&mut h, a).knowledge, view.knowledge);
}

#[test]
fn without_a_truth_policies_see_no_profile_and_describe_says_so() {
    let mut h = Harness::new(vec![node("n1", 1)], policy("gavel", Some(60)));
    let a = submit_model(&mut h, "a", Some("resnet50"));
    h.schedule();
    assert!(!known(&h, a));
    assert_eq!(
        describe(&mut h, a).knowledge.as_deref(),
        Some("none: no truth configured, policies see no profile")
    );
    // A truth that profiles nothing for the policy says so too.
    let mut h = Harness::new(vec![node("n1", 1)], policy("fifo", None));
    h.core.set_profiler("some-truth", None);
    let c = submit_model(&mut h, "c", None);
    assert_eq!(
        describe(&mut h, c).knowledge.as_deref(),
        Some("none: truth some-truth profiles nothing for policy fifo")
    );
}

/// Issue 38 item 2 (observed rates): a job that reports its rate through the SDK has its
/// catalogue estimates calibrated by it: its own configuration takes the observed rate, the
/// others the catalogue's scaled by the same ratio; `describe` says so. A report without a
/// rate changes nothing.
#[test]
fn a_reported_rate_calibrates_the_catalogue_estimates_and_describe_says_so() {
    use tessera_perf::ConfigEstimates;
    let mut h = Harness::new(vec![node("n1", 2)], policy("gavel", Some(60)));
    set_truth(&mut h.core, "gavel", "gavel");
    let a = submit_model(&mut h, "a", Some("resnet50"));
    h.schedule();
    h.poll();
    assert_eq!(h.state(a), crate::types::JobState::Running);
    let estimates = |h: &Harness| {
        let idx = h.core.by_id[&a];
        h.core.jobs[idx]
            .knowledge
            .get::<ConfigEstimates>()
            .expect("the catalogue's estimates")
            .clone()
    };
    let before = estimates(&h);
    let gpu = h.core.cluster_map().cluster.nodes[0].gpu;
    let own = before
        .get(gpu, 1)
        .expect("estimated on its config")
        .throughput;
    let other = before.get(gpu, 2).expect("estimated on 2 GPUs").throughput;
    assert!(own > 0.0 && other > 0.0);
    // Progress without a rate: nothing learned.
    let report = crate::types::ProgressReport {
        iterations: 10,
        ..crate::types::ProgressReport::default()
    };
    h.core.report_progress(h.now, a, report).expect("accepted");
    assert_eq!(estimates(&h), before);
    let before_text = describe(&mut h, a).knowledge;
    // Half the catalogue's speed, observed.
    let report = crate::types::ProgressReport {
        iterations: 20,
        iterations_per_second: Some(own / 2.0),
        ..crate::types::ProgressReport::default()
    };
    h.core.report_progress(h.now, a, report).expect("accepted");
    let after = estimates(&h);
    assert_eq!(after.get(gpu, 1).map(|e| e.throughput), Some(own / 2.0));
    let scaled = after.get(gpu, 2).map_or(0.0, |e| e.throughput);
    assert!(
        (scaled - other / 2.0).abs() < 1e-9 * other,
        "{scaled} vs {other}"
    );
    // Reported again at the same speed: no compounding.
    let report = crate::types::ProgressReport {
        iterations: 30,
        iterations_per_second: Some(own / 2.0),
        ..crate::types::ProgressReport::default()
    };
    h.core.report_progress(h.now, a, report).expect("accepted");
    assert_eq!(estimates(&h), after);
    // The policy sees the calibrated estimates at the next scheduling point.
    h.schedule();
    let idx = h.core.by_id[&a];
    let seen = h
        .core
        .kept_active()
        .into_iter()
        .find(|j| j.id.index() == idx)
        .and_then(|j| j.knowledge.get::<ConfigEstimates>().cloned());
    assert_eq!(seen.as_ref(), Some(&after));
    let text = describe(&mut h, a).knowledge.unwrap_or_default();
    assert_ne!(Some(text.clone()), before_text);
    assert!(
        text.ends_with(&format!(
            "calibrated by the job's reported rate ({} it/s on 1 x A100-80GB)",
            own / 2.0
        )),
        "{text}"
    );
}

fn submit_batch(h: &mut Harness, name: &str, batch: u32) -> i64 {
    let body = format!(
        "name: {name}\ncommand: [sleep, \"600\"]\ngpus: 1\n\
         hints: {{model: resnet50, batchSize: {batch}, durationSeconds: 600}}\n"
    );
    let mut r = h.core.submit(h.now, vec![(Some(TOKEN.into()), body)]);
    let job = r.pop().expect("one").expect("accepted");
    h.drain();
    job.id
}

/// Issue 38 item 2 (profile cache): a rate one job reports is remembered by its model and
/// batch size; a job of the same key submitted later starts with its catalogue estimates
/// calibrated by it (before it reports anything), one of another batch size does not, and
/// `describe` says which.
#[test]
fn a_later_job_of_the_same_model_and_batch_starts_from_the_observed_rates() {
    use tessera_perf::ConfigEstimates;
    let mut h = Harness::new(vec![node("n1", 2)], policy("gavel", Some(60)));
    set_truth(&mut h.core, "gavel", "gavel");
    let a = submit_batch(&mut h, "a", 64);
    h.schedule();
    h.poll();
    assert_eq!(h.state(a), crate::types::JobState::Running);
    let gpu = h.core.cluster_map().cluster.nodes[0].gpu;
    let rate = |h: &Harness, id: i64, count: u32| {
        let idx = h.core.by_id[&id];
        h.core.jobs[idx]
            .knowledge
            .get::<ConfigEstimates>()
            .and_then(|c| c.get(gpu, count))
            .map_or(f64::NAN, |e| e.throughput)
    };
    let (own, two) = (rate(&h, a, 1), rate(&h, a, 2));
    let report = crate::types::ProgressReport {
        iterations: 20,
        iterations_per_second: Some(own / 4.0),
        ..crate::types::ProgressReport::default()
    };
    h.core.report_progress(h.now, a, report).expect("accepted");
    let b = submit_batch(&mut h, "b", 64);
    let c = submit_batch(&mut h, "c", 32);
    assert_eq!(rate(&h, b, 1), own / 4.0, "b inherits a's observed rate");
    assert!((rate(&h, b, 2) - two / 4.0).abs() < 1e-9 * two);
    assert_eq!(
        rate(&h, c, 1),
        own,
        "another batch size: the catalogue's alone"
    );
    let text = describe(&mut h, b).knowledge.unwrap_or_default();
    assert!(
        text.ends_with(
            "calibrated by 1 rate(s) observed of earlier jobs of this model and batch size 64 \
             (profile cache)"
        ),
        "{text}"
    );
    assert_eq!(
        describe(&mut h, c).knowledge.as_deref(),
        Some("catalogue of truth gavel: its profile of model \"resnet50\"")
    );
}

/// Issue 38 item 2 (profiling points, the SDK's protocol): each acknowledgement gives the job
/// the CPU/memory point it runs at; a rate reported with that point is recorded as one point
/// of its CPU/memory profile and `describe` lists it; a rate measured at another point (before
/// a retune) is not one.
#[test]
fn rates_reported_at_the_point_the_daemon_gave_are_profile_points() {
    use crate::types::{ProgressReport, ResourcePoint};
    let mut h = Harness::new(vec![node("n1", 2)], policy("fifo", None));
    let a = submit_model(&mut h, "a", Some("resnet50"));
    h.schedule();
    h.poll();
    let ack = h
        .core
        .report_progress(h.now, a, ProgressReport::default())
        .expect("accepted");
    assert!(
        ack.point.cpu_milli > 0 && ack.point.memory_bytes > 0,
        "{ack:?}"
    );
    let stale = ResourcePoint {
        cpu_milli: ack.point.cpu_milli + 1000,
        ..ack.point
    };
    for (point, rate) in [(Some(stale), 3.0), (None, 4.0), (Some(ack.point), 5.0)] {
        let report = ProgressReport {
            iterations: 10,
            iterations_per_second: Some(rate),
            point,
            ..ProgressReport::default()
        };
        h.core.report_progress(h.now, a, report).expect("accepted");
    }
    let idx = h.core.by_id[&a];
    assert_eq!(h.core.jobs[idx].points, vec![(ack.point, 5.0)]);
    let text = describe(&mut h, a).knowledge.unwrap_or_default();
    let want = format!(
        "; rates reported at its CPU/memory points: {} CPUs, {} GiB: 5 it/s",
        ack.point.cpu_milli as f64 / 1000.0,
        ack.point.memory_bytes as f64 / f64::from(1u32 << 30)
    );
    assert!(text.ends_with(&want), "{text}");
}
