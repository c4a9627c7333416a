//! The daemon refuses a submission its policy would not honour, with the simulator's words
//! (one check: `tessera_mechanisms::capabilities`, docs/capabilities.md).

use tessera_mechanisms::capabilities::{check_support, refusal, CheckOptions};
use tessera_model::{SimTime, Workload};

use super::testkit::{core_with, node, policy, TOKEN};
use super::{Request, Response};

fn submit_job(core: &mut super::Core, body: &str) -> Result<(), crate::error::ApiError> {
    let mut r = core.submit(SimTime::ZERO, vec![(Some(TOKEN.into()), body.into())]);
    r.pop().expect("one result").map(|_| ())
}

#[test]
fn a_job_the_policy_would_not_honour_is_refused_with_the_simulators_reason() {
    let body = "name: hungry\ncommand: [sleep, \"1\"]\ngpus: 2\ncpu: \"12\"\n";
    // crius books CPU and memory its own way: an explicit CPU demand is refused, naming who
    // would honour it.
    let mut core = core_with(&[node("n1", 4)], policy("crius", None), SimTime::ZERO);
    let e = submit_job(&mut core, body).expect_err("refused");
    assert_eq!((e.status, e.code), (400, "unsupported"), "{}", e.message);
    assert!(e
        .message
        .contains("policy crius does not honour 1 of what this run asks"));
    assert!(e.message.contains("cpu-memory"), "{}", e.message);
    assert!(e.message.contains("honoured by"), "{}", e.message);
    // The same words as the simulator's check of the same job on the same cluster.
    let tj = core
        .training_job(0, &crate::spec::JobSpec::parse(body).unwrap(), 0)
        .unwrap();
    let workload = Workload::new(vec![tj]);
    let sim = check_support(
        "crius",
        &core.map.cluster,
        &workload,
        &CheckOptions::default(),
    )
    .unwrap();
    assert_eq!(e.message, refusal("crius", &sim, 3));
    // fifo honours it.
    let mut core = core_with(&[node("n1", 4)], policy("fifo", None), SimTime::ZERO);
    submit_job(&mut core, body).expect("accepted");
}

#[test]
fn a_service_the_policy_cannot_serve_is_refused() {
    let body = serde_json::json!({
        "apiVersion": "tessera/v1",
        "kind": "Workload",
        "metadata": {"command": ["true"]},
        "spec": {"services": [{
            "name": "bert",
            "endSeconds": 3600,
            "sloMilliseconds": 50,
            "resources": {"cpu": "1", "memory": "1Gi", "gpuMemory": "2Gi",
                          "smRequest": 0.3, "smLimit": 0.5},
            "arrivals": {"poisson": {"rate": 3}}
        }]}
    })
    .to_string();
    let submit = |name: &str| {
        let mut core = core_with(&[node("n1", 4)], policy(name, None), SimTime::ZERO);
        let req = Request::SubmitService { body: body.clone() };
        core.handle_request(SimTime::ZERO, Some(TOKEN), req)
    };
    // fifo serves no service; serve-exclusive serves it on whole GPUs, not on its quota.
    for (name, needle) in [
        ("fifo", "service bert is an inference service"),
        (
            "serve-exclusive",
            "service bert asks for a GPU quota per instance",
        ),
    ] {
        let e = submit(name).expect_err("refused");
        assert_eq!((e.status, e.code), (400, "unsupported"), "{}", e.message);
        assert!(e.message.contains(needle), "{name}: {}", e.message);
        assert!(e.message.contains("honoured by: "), "{}", e.message);
    }
    assert!(matches!(submit("dilu"), Ok(Response::Service(_))));
}

/// A job the policy itself will never start (MISO's slice table finds cyclegan too large for
/// any 1g slice) is refused at submission with the words the simulator rejects it with at
/// arrival, instead of waiting for ever; a profile the model fits is accepted.
#[test]
fn a_job_the_policy_would_never_start_is_refused_with_its_reason() {
    let too_large =
        "name: gan\ncommand: [sleep, \"1\"]\ngpus: 1\nmig: 1g.10gb\nhints: {model: cyclegan}\n";
    let mut core = core_with(&[node("n1", 2)], policy("miso", None), SimTime::ZERO);
    let e = submit_job(&mut core, too_large).expect_err("refused");
    assert_eq!((e.status, e.code), (400, "refused"), "{}", e.message);
    let tj = core
        .training_job(0, &crate::spec::JobSpec::parse(too_large).unwrap(), 0)
        .unwrap();
    let sim = policy("miso", None).refuses(&tj, &core.map.cluster);
    assert_eq!(Some(e.message.as_str()), sim.as_deref());
    assert!(
        e.message.contains("too large for MIG profile 1g.10gb"),
        "{}",
        e.message
    );
    let fits =
        "name: gan\ncommand: [sleep, \"1\"]\ngpus: 1\nmig: 3g.40gb\nhints: {model: cyclegan}\n";
    submit_job(&mut core, fits).expect("accepted");
}
