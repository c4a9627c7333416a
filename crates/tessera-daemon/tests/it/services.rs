//! Inference services over HTTP (a backend that runs nothing; real processes are in the
//! crate's `core::service_tests`): routes, status codes, tenant isolation.

use std::time::Duration;

use tessera_daemon::services::ServiceState;
use tessera_daemon::ClientError;

use crate::common::*;

const SPEC: &str = "apiVersion: tessera/v1
kind: Workload
metadata:
  command: [sleep, '300']
spec:
  services:
    - name: bert
      endSeconds: 3600
      sloMilliseconds: 50
      resources: {cpu: '1', memory: 4Gi, gpuMemory: 2Gi}
      arrivals: {poisson: {rate: 3}}
";

fn api_error(e: ClientError) -> (u16, String, String) {
    match e {
        ClientError::Api {
            status,
            code,
            message,
        } => (status, code, message),
        other => panic!("expected an API error, got {other}"),
    }
}

#[test]
fn services_are_submitted_scaled_and_retired_over_http() {
    let dir = tempfile::tempdir().unwrap();
    let d = null_daemon(dir.path(), |c| c.policy = "serve-exclusive".into());
    let alice = client(&d, ALICE);
    let bob = client(&d, BOB);
    let admin = client(&d, ADMIN);
    let v = alice.submit_service(SPEC).unwrap();
    assert_eq!((v.id, v.state), (1, ServiceState::Active));
    // serve-exclusive gives it one whole GPU.
    wait_until("an instance", Duration::from_secs(20), || {
        alice
            .service(1)
            .unwrap()
            .instances
            .first()
            .is_some_and(|i| i.backend_id.is_some())
    });
    let v = alice.service(1).unwrap();
    assert_eq!(v.instances.len(), 1);
    assert_eq!(v.instances[0].allocation[0].gpus, 1);
    // Isolation: bob sees nothing and cannot retire it; the admin sees it.
    assert!(bob.services().unwrap().is_empty());
    assert_eq!(api_error(bob.service(1).unwrap_err()).0, 404);
    assert_eq!(api_error(bob.retire_service(1).unwrap_err()).0, 404);
    assert_eq!(admin.services().unwrap().len(), 1);
    // Bad input names the field; a service no GPU can hold is unsatisfiable.
    let (status, code, message) = api_error(
        alice
            .submit_service(&SPEC.replace("sloMilliseconds: 50", "sloMilliseconds: x"))
            .unwrap_err(),
    );
    assert_eq!((status, code.as_str()), (400, "invalid_spec"), "{message}");
    assert!(message.contains("sloMilliseconds"), "{message}");
    let (status, code, message) = api_error(
        alice
            .submit_service(&SPEC.replace("gpuMemory: 2Gi", "gpuMemory: 200Gi"))
            .unwrap_err(),
    );
    assert_eq!((status, code.as_str()), (400, "unsatisfiable"), "{message}");
    assert!(message.contains("200Gi of GPU memory"), "{message}");
    let (status, code, _) = api_error(
        bob.submit_service(&SPEC.replace("name: bert", "name: bert\n      tenant: alice"))
            .unwrap_err(),
    );
    assert_eq!((status, code.as_str()), (403, "forbidden"));
    assert_eq!(
        alice.services().unwrap().len(),
        1,
        "nothing refused was recorded"
    );
    // Retire: its instance goes, a second retire conflicts.
    let v = alice.retire_service(1).unwrap();
    assert_eq!((v.state, v.instances.len()), (ServiceState::Retired, 0));
    assert_eq!(api_error(alice.retire_service(1).unwrap_err()).0, 409);
    // Unauthenticated and unknown.
    let anon = tessera_daemon::Client::new(&d.url(), None);
    assert_eq!(api_error(anon.services().unwrap_err()).0, 401);
    assert_eq!(api_error(alice.service(99).unwrap_err()).0, 404);
    // Load reports take an instance's own token only (the backend here runs nothing, so no
    // instance token exists: crate tests cover accepted reports).
    let report = tessera_daemon::services::LoadReport::default();
    assert_eq!(
        api_error(alice.report_load(1, 1, &report).unwrap_err()).0,
        403
    );
    assert_eq!(
        api_error(anon.report_load(1, 1, &report).unwrap_err()).0,
        401
    );
    assert_eq!(
        api_error(alice.report_load(0, 1, &report).unwrap_err()).0,
        404
    );
}
