//! The API with a backend that runs nothing: security, bad input, scheduling decisions.

use std::time::Duration;

use tessera_daemon::types::JobState;
use tessera_daemon::ClientError;

use crate::common::*;

fn status(e: ClientError) -> (u16, String) {
    match e {
        ClientError::Api { status, code, .. } => (status, code),
        other => panic!("expected an API error, got {other}"),
    }
}

fn raw(url: &str, method: &str, token: Option<&str>, body: Option<&[u8]>) -> (u16, String) {
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .http_status_as_error(false)
        .build()
        .into();
    let auth = token.map(|t| format!("Bearer {t}"));
    let mut resp = match method {
        "GET" => {
            let mut r = agent.get(url);
            if let Some(a) = &auth {
                r = r.header("Authorization", a);
            }
            r.call()
        }
        _ => {
            let mut r = agent.post(url);
            if let Some(a) = &auth {
                r = r.header("Authorization", a);
            }
            r.send(body.unwrap_or_default())
        }
    }
    .unwrap();
    let s = resp.status().as_u16();
    (s, resp.body_mut().read_to_string().unwrap_or_default())
}

#[test]
fn tokens_are_required_and_checked() {
    let dir = tempfile::tempdir().unwrap();
    let d = null_daemon(dir.path(), |_| {});
    let url = format!("{}/v1/jobs", d.url());
    for token in [None, Some("wrong"), Some("")] {
        let (code, body) = raw(&url, "GET", token, None);
        assert_eq!(code, 401, "{token:?}");
        let v: serde_json::Value = serde_json::from_str(&body).unwrap();
        assert_eq!(v["error"]["code"], "unauthorized");
    }
    let (code, _) = raw(
        &url,
        "POST",
        Some("wrong"),
        Some(job("x", 1, "true").as_bytes()),
    );
    assert_eq!(code, 401);
    assert_eq!(
        raw(&format!("{}/metrics", d.url()), "GET", None, None).0,
        401
    );
    assert!(client(&d, ALICE)
        .metrics()
        .unwrap()
        .contains("tessera_jobs{state=\"pending\"}"));
    assert_eq!(
        raw(&format!("{}/v2/nothing", d.url()), "GET", None, None).0,
        404
    );
    assert!(client(&d, ALICE).list().unwrap().is_empty());
}

#[test]
fn tenants_only_see_and_cancel_their_own_jobs() {
    let dir = tempfile::tempdir().unwrap();
    let d = null_daemon(dir.path(), |_| {});
    let (alice, bob, admin) = (client(&d, ALICE), client(&d, BOB), client(&d, ADMIN));
    let a = alice.submit(&job("a-job", 1, "sleep 100")).unwrap();
    let b = bob.submit(&job("b-job", 1, "sleep 100")).unwrap();
    assert_eq!(a.tenant, "alice");
    assert_eq!(a.queue, "alice");
    let ids =
        |v: Vec<tessera_daemon::types::JobView>| v.into_iter().map(|j| j.id).collect::<Vec<_>>();
    assert_eq!(ids(alice.list().unwrap()), vec![a.id]);
    assert_eq!(ids(bob.list().unwrap()), vec![b.id]);
    assert_eq!(ids(admin.list().unwrap()), vec![a.id, b.id]);
    // Another tenant's job looks exactly like a missing one.
    assert_eq!(
        status(bob.describe(a.id).unwrap_err()),
        (404, "not_found".into())
    );
    assert_eq!(
        status(bob.describe(9999).unwrap_err()),
        (404, "not_found".into())
    );
    assert_eq!(
        status(bob.cancel(a.id).unwrap_err()),
        (404, "not_found".into())
    );
    assert_eq!(
        bob.queue()
            .unwrap()
            .queues
            .iter()
            .map(|q| q.name.clone())
            .collect::<Vec<_>>(),
        vec!["bob"]
    );
    // Submitting as someone else is refused; an admin may.
    let spoof = format!("{}tenant: alice\n", job("spoof", 1, "true"));
    assert_eq!(
        status(bob.submit(&spoof).unwrap_err()),
        (403, "forbidden".into())
    );
    assert_eq!(admin.submit(&spoof).unwrap().tenant, "alice");
    assert_eq!(alice.describe(a.id).unwrap().job.state, JobState::Running);
    assert_eq!(admin.cancel(a.id).unwrap().state, JobState::Cancelled);
    assert_eq!(
        status(alice.cancel(a.id).unwrap_err()),
        (409, "conflict".into())
    );
}

#[test]
fn bad_input_gets_a_json_4xx_and_nothing_changes() {
    let dir = tempfile::tempdir().unwrap();
    let d = null_daemon(dir.path(), |c| c.limits.max_body_bytes = 4096);
    let alice = client(&d, ALICE);
    let ok = alice.submit(&job("fine", 1, "true")).unwrap();
    let cases: Vec<(String, u16, &str)> = vec![
        ("name: [unclosed\n".into(), 400, "invalid_spec"),
        ("{\"name\": \"x\", \"gpus\": ".into(), 400, "invalid_spec"),
        ("- just\n- a list\n".into(), 400, "invalid_spec"),
        (
            format!("{}gpuType: h900\n", job("x", 1, "true")),
            400,
            "unknown_gpu_type",
        ),
        (
            format!("{}gpuType: h100\n", job("x", 1, "true")),
            400,
            "unsatisfiable",
        ),
        (
            format!("{}gpuType: a100\n", job("x", 9, "true")),
            400,
            "unsatisfiable",
        ),
        (job("x", 64, "true"), 400, "unsatisfiable"),
        (
            format!("{}memory: 100Ti\n", job("x", 1, "true")),
            400,
            "unsatisfiable",
        ),
        (job("../../etc/passwd", 1, "true"), 400, "invalid_spec"),
        (job("a b", 1, "true"), 400, "invalid_spec"),
        (job("x", 0, "true"), 400, "invalid_spec"),
        (
            format!("name: x\ngpus: 1\nscript: \"{}\"\n", "y".repeat(5000)),
            413,
            "body_too_large",
        ),
    ];
    for (body, want_status, want_code) in cases {
        let (code, text) = raw(
            &format!("{}/v1/jobs", d.url()),
            "POST",
            Some(ALICE),
            Some(body.as_bytes()),
        );
        assert_eq!(code, want_status, "{body:.60}: {text}");
        let v: serde_json::Value =
            serde_json::from_str(&text).unwrap_or_else(|_| panic!("not JSON: {text}"));
        assert_eq!(v["error"]["code"], want_code, "{body:.60}: {text}");
        assert!(v["error"]["message"]
            .as_str()
            .is_some_and(|m| !m.is_empty()));
    }
    let (code, _) = raw(
        &format!("{}/v1/jobs", d.url()),
        "POST",
        Some(ALICE),
        Some(&[0xff, 0xfe, b'{']),
    );
    assert_eq!(code, 400);
    let (code, _) = raw(
        &format!("{}/v1/jobs/abc", d.url()),
        "GET",
        Some(ALICE),
        None,
    );
    assert_eq!(code, 404);
    let (code, _) = raw(
        &format!("{}/v1/jobs?state=bogus", d.url()),
        "GET",
        Some(ALICE),
        None,
    );
    assert_eq!(code, 400);
    // Still serving, and only the good job exists, in the daemon and in the store.
    let jobs = alice.list().unwrap();
    assert_eq!(jobs.iter().map(|j| j.id).collect::<Vec<_>>(), vec![ok.id]);
    d.shutdown().unwrap();
    let store =
        tessera_daemon::store::Store::open(&dir.path().join("t.db"), Default::default()).unwrap();
    assert_eq!(store.load_jobs().unwrap().len(), 1);
}

#[test]
fn count_limits_apply_per_tenant() {
    let dir = tempfile::tempdir().unwrap();
    let d = null_daemon(dir.path(), |c| c.limits.max_active_jobs_per_tenant = 3);
    let (alice, bob) = (client(&d, ALICE), client(&d, BOB));
    let mut ids = Vec::new();
    for i in 0..3 {
        ids.push(alice.submit(&job(&format!("j{i}"), 1, "true")).unwrap().id);
    }
    assert_eq!(
        status(alice.submit(&job("j3", 1, "true")).unwrap_err()),
        (429, "limit_exceeded".into())
    );
    bob.submit(&job("other", 1, "true")).unwrap();
    alice.cancel(ids[0]).unwrap();
    alice.submit(&job("j4", 1, "true")).unwrap();
}

#[test]
fn fifo_places_waits_and_starts_when_resources_free() {
    let dir = tempfile::tempdir().unwrap();
    let d = null_daemon(dir.path(), |_| {});
    let alice = client(&d, ALICE);
    let first = alice
        .submit(&format!("{}gpuType: a100\n", job("big1", 8, "sleep 100")))
        .unwrap();
    let second = alice
        .submit(&format!(
            "{}gpuType: a100\npriority: 5\n",
            job("big2", 8, "sleep 100")
        ))
        .unwrap();
    let small = alice
        .submit(&format!(
            "{}gpuType: v100\ncpu: 3\nmemory: 10Gi\n",
            job("small", 2, "sleep 100")
        ))
        .unwrap();
    wait_until("first and small running", Duration::from_secs(10), || {
        let j = alice.list().unwrap();
        j.iter().filter(|j| j.state == JobState::Running).count() == 2
    });
    let f = alice.describe(first.id).unwrap().job;
    assert_eq!(f.allocation.len(), 1);
    assert_eq!(
        (
            f.allocation[0].node.as_str(),
            f.allocation[0].gres_type.as_deref(),
            f.allocation[0].gpus
        ),
        ("n1", Some("a100"), 8)
    );
    let s = alice.describe(small.id).unwrap().job;
    assert_eq!(
        (s.allocation[0].node.as_str(), s.allocation[0].gpus),
        ("n2", 2)
    );
    assert_eq!(s.allocation[0].cpu.to_string(), "3");
    assert_eq!(s.allocation[0].memory.to_string(), "10Gi");
    let w = alice.describe(second.id).unwrap();
    assert_eq!(w.job.state, JobState::Pending);
    assert_eq!(w.job.pending_reason.as_deref(), Some("Resources"));
    assert_eq!(w.job.queue_position, Some(1));
    let q = alice.queue().unwrap();
    assert_eq!(
        (q.policy.as_str(), q.pending.len(), q.queues[0].running),
        ("fifo", 1, 2)
    );
    let nodes = alice.nodes().unwrap().nodes;
    assert_eq!(
        nodes
            .iter()
            .map(|n| (n.name.as_str(), n.gpus, n.gpus_allocated))
            .collect::<Vec<_>>(),
        vec![("n1", 8, 8), ("n2", 4, 2)]
    );
    alice.cancel(first.id).unwrap();
    wait_until("second starts", Duration::from_secs(10), || {
        alice.describe(second.id).unwrap().job.state == JobState::Running
    });
    let history: Vec<_> = alice
        .describe(second.id)
        .unwrap()
        .transitions
        .into_iter()
        .map(|t| t.to)
        .collect();
    assert_eq!(
        history,
        vec![JobState::Pending, JobState::Starting, JobState::Running]
    );
    let m = alice.metrics().unwrap();
    assert!(m.contains("tessera_jobs{state=\"running\"} 2"), "{m}");
    assert!(m.contains("tessera_jobs{state=\"cancelled\"} 1"), "{m}");
    assert!(
        m.contains("tessera_resource_allocated{resource=\"gpus\"} 10"),
        "{m}"
    );
    assert!(
        m.contains("tessera_resource_capacity{resource=\"gpus\"} 12"),
        "{m}"
    );
    assert!(
        m.contains("tessera_scheduling_latency_seconds_count"),
        "{m}"
    );
    // The three submissions, timed by the server from arrival to answer.
    assert!(m.contains("tessera_submit_seconds_count 3\n"), "{m}");
    assert!(
        m.contains("tessera_submit_seconds_bucket{le=\"+Inf\"} 3\n"),
        "{m}"
    );
    assert!(
        m.contains("tessera_preemptions_total{reason=\"policy\"} 0"),
        "{m}"
    );
}

#[test]
fn preemptive_policy_preempts_and_requeues() {
    let dir = tempfile::tempdir().unwrap();
    let d = null_daemon(dir.path(), |c| c.policy = "srtf".into());
    let alice = client(&d, ALICE);
    let long = alice
        .submit(&format!(
            "{}gpuType: a100\nhints: {{durationSeconds: 100000}}\n",
            job("long", 8, "sleep 100")
        ))
        .unwrap();
    wait_until("long runs", Duration::from_secs(10), || {
        alice.describe(long.id).unwrap().job.state == JobState::Running
    });
    let short = alice
        .submit(&format!(
            "{}gpuType: a100\nhints: {{durationSeconds: 10}}\n",
            job("short", 8, "sleep 1")
        ))
        .unwrap();
    wait_until("short preempts long", Duration::from_secs(10), || {
        alice.describe(short.id).unwrap().job.state == JobState::Running
    });
    let l = alice.describe(long.id).unwrap().job;
    assert_eq!((l.state, l.preemptions), (JobState::Pending, 1));
    assert!(alice
        .metrics()
        .unwrap()
        .contains("tessera_preemptions_total{reason=\"policy\"} 1"));
    alice.cancel(short.id).unwrap();
    wait_until("long restarts", Duration::from_secs(10), || {
        let l = alice.describe(long.id).unwrap().job;
        l.state == JobState::Running && l.attempt == 2
    });
}

/// A backend whose inventory the test changes.
struct Flaky {
    inner: tessera_daemon::backend::NullBackend,
    fail_submits: u32,
    nodes: std::sync::Arc<std::sync::Mutex<Vec<tessera_daemon::backend::InventoryNode>>>,
}

impl tessera_daemon::Backend for Flaky {
    fn kind(&self) -> &'static str {
        "flaky"
    }
    fn inventory(
        &mut self,
    ) -> Result<Vec<tessera_daemon::backend::InventoryNode>, tessera_daemon::BackendError> {
        Ok(self.nodes.lock().unwrap().clone())
    }
    fn submit(
        &mut self,
        l: &tessera_daemon::backend::Launch,
    ) -> Result<tessera_daemon::backend::Handle, tessera_daemon::BackendError> {
        if self.fail_submits > 0 {
            self.fail_submits -= 1;
            return Err(tessera_daemon::BackendError::Unsupported(
                "injected failure".into(),
            ));
        }
        self.inner.submit(l)
    }
    fn cancel(
        &mut self,
        h: &tessera_daemon::backend::Handle,
    ) -> Result<(), tessera_daemon::BackendError> {
        self.inner.cancel(h)
    }
    fn preempt(
        &mut self,
        h: &tessera_daemon::backend::Handle,
    ) -> Result<(), tessera_daemon::BackendError> {
        self.inner.preempt(h)
    }
    fn poll(
        &mut self,
        h: &[tessera_daemon::backend::Handle],
    ) -> Result<
        Vec<(
            tessera_daemon::backend::Handle,
            tessera_daemon::backend::RunStatus,
        )>,
        tessera_daemon::BackendError,
    > {
        self.inner.poll(h)
    }
    fn find(
        &mut self,
        n: &str,
    ) -> Result<Option<tessera_daemon::backend::Handle>, tessera_daemon::BackendError> {
        self.inner.find(n)
    }
}

#[test]
fn nodes_going_down_get_no_new_jobs_and_come_back() {
    use std::sync::{Arc, Mutex};
    use tessera_daemon::backend::NodeHealth;
    let dir = tempfile::tempdir().unwrap();
    let nodes = Arc::new(Mutex::new(null_nodes()));
    let backend = Flaky {
        inner: tessera_daemon::backend::NullBackend::new(vec![]),
        fail_submits: 0,
        nodes: nodes.clone(),
    };
    let c = config(dir.path(), local_backend(dir.path(), 1));
    let mut e = tessera_daemon::Engine::open(
        &c,
        Box::new(backend),
        Arc::new(tessera_daemon::SystemClock::new()),
    )
    .unwrap();
    let first = e
        .submit_many(
            ALICE,
            &[format!("{}gpuType: a100\n", job("first", 4, "true"))],
        )
        .remove(0)
        .unwrap();
    e.schedule();
    nodes.lock().unwrap()[0].health = NodeHealth::Down;
    e.refresh_inventory();
    let second = e
        .submit_many(
            ALICE,
            &[format!("{}gpuType: a100\n", job("second", 2, "true"))],
        )
        .remove(0)
        .unwrap();
    e.schedule();
    let state = |e: &tessera_daemon::Engine, want: JobState| {
        e.count_by_state().get(&want).copied().unwrap_or(0)
    };
    assert_eq!(
        (state(&e, JobState::Running), state(&e, JobState::Pending)),
        (0, 2),
        "n1 is down: first is requeued (issue 9), second waits"
    );
    let _ = (first, second);
    nodes.lock().unwrap()[0].health = NodeHealth::Up;
    e.refresh_inventory();
    e.schedule();
    assert_eq!(state(&e, JobState::Running), 2, "n1 is back");
}

#[test]
fn failed_backend_submissions_are_retried_then_fail_the_job() {
    use std::sync::{Arc, Mutex};
    use tessera_model::{SimDuration, SimTime};
    let dir = tempfile::tempdir().unwrap();
    let nodes = Arc::new(Mutex::new(null_nodes()));
    let backend = Flaky {
        inner: tessera_daemon::backend::NullBackend::new(vec![]),
        fail_submits: 4,
        nodes,
    };
    let c = config(dir.path(), local_backend(dir.path(), 1));
    let clock = Arc::new(tessera_daemon::ManualClock::new(SimTime::from_secs(1_000)));
    let mut e = tessera_daemon::Engine::open(&c, Box::new(backend), clock.clone()).unwrap();
    let r = e.submit_many(ALICE, &[job("a", 1, "true"), job("b", 1, "true")]);
    let (a, b) = (r[0].as_ref().unwrap().id, r[1].as_ref().unwrap().id);
    e.schedule(); // both submissions fail (2 of 4 injected failures)
    let state = |e: &tessera_daemon::Engine, want: JobState| {
        e.count_by_state().get(&want).copied().unwrap_or(0)
    };
    assert_eq!(state(&e, JobState::Pending), 2, "{:?}", e.count_by_state());
    assert!(!e.wants_schedule(), "no busy retry loop");
    clock.advance(SimDuration::from_secs(6));
    assert!(e.wants_schedule(), "retried after a delay");
    e.schedule(); // both fail again (failures 3 and 4)
    clock.advance(SimDuration::from_secs(6));
    e.schedule(); // third attempt succeeds for both
    assert_eq!(state(&e, JobState::Running), 2);
    let _ = (a, b);

    // A job the backend refuses three times fails, with the backend's reason.
    let dir = tempfile::tempdir().unwrap();
    let backend = Flaky {
        inner: tessera_daemon::backend::NullBackend::new(vec![]),
        fail_submits: 100,
        nodes: Arc::new(Mutex::new(null_nodes())),
    };
    let c = config(dir.path(), local_backend(dir.path(), 1));
    let mut e = tessera_daemon::Engine::open(&c, Box::new(backend), clock.clone()).unwrap();
    e.submit_many(ALICE, &[job("doomed", 1, "true")])
        .remove(0)
        .unwrap();
    for _ in 0..3 {
        e.schedule();
        clock.advance(SimDuration::from_secs(6));
    }
    assert_eq!(state(&e, JobState::Failed), 1, "{:?}", e.count_by_state());
}

/// Issue 9: `GET /v1/jobs` pages (`limit`, `after` → `nextAfter`) and filters (`state`,
/// `queue`); the client's `list` follows the pages.
#[test]
fn job_listing_pages_and_filters() {
    let dir = tempfile::tempdir().unwrap();
    let d = null_daemon(dir.path(), |_| {});
    let alice = client(&d, ALICE);
    let mut ids = Vec::new();
    for i in 0..25 {
        let queue = if i % 5 == 0 { "\nqueue: special" } else { "" };
        ids.push(
            alice
                .submit(
                    &format!("{}{queue}\n", job(&format!("j{i}"), 8, "true")).replace("\n\n", "\n"),
                )
                .unwrap()
                .id,
        );
    }
    let first = alice.list_page("limit=10").unwrap();
    assert_eq!(
        first.jobs.iter().map(|j| j.id).collect::<Vec<_>>(),
        ids[..10].to_vec()
    );
    assert_eq!(first.next_after, Some(ids[9]));
    let second = alice
        .list_page(&format!("limit=10&after={}", ids[9]))
        .unwrap();
    assert_eq!(second.jobs[0].id, ids[10]);
    let last = alice
        .list_page(&format!("limit=10&after={}", ids[19]))
        .unwrap();
    assert_eq!((last.jobs.len(), last.next_after), (5, None));
    assert_eq!(
        alice.list().unwrap().len(),
        25,
        "the client follows the pages"
    );
    let special = alice.list_page("queue=special").unwrap();
    assert_eq!(special.jobs.len(), 5);
    assert!(special.jobs.iter().all(|j| j.queue == "special"));
    let pending = alice.list_page("state=pending&limit=3").unwrap();
    assert!(pending.jobs.iter().all(|j| j.state == JobState::Pending));
    for bad in ["limit=0", "limit=10001", "after=x"] {
        let err = alice.list_page(bad).unwrap_err();
        assert_eq!(err.status(), Some(400), "{bad}: {err}");
    }
    // Another tenant sees none of them, page or not.
    assert!(client(&d, BOB)
        .list_page("limit=5")
        .unwrap()
        .jobs
        .is_empty());
}
