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
