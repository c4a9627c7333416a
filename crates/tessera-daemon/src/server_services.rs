//! The service routes (`/v1/services`), beside the job routes of [`crate::server`].

use axum::extract::{Path, State};
use axum::http::HeaderMap;
use axum::response::Response as HttpResponse;

use crate::engine::Request;
use crate::error::ApiError;
use crate::server::{bearer, call, error_response, read_body, respond, AppState};

fn service_id(s: &str) -> Result<i64, ApiError> {
    s.parse::<i64>().ok().filter(|&v| v > 0).ok_or_else(|| {
        ApiError::not_found(format!(
            "no service {:?}",
            s.chars().take(40).collect::<String>()
        ))
    })
}

/// Longest a service document's parse may take before the request is refused (the parse is
/// bounded in size and nesting first, so only a pathological document comes near it).
pub(crate) const PARSE_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);

/// The answer to a document whose parse outlasted [`PARSE_TIMEOUT`].
pub(crate) fn too_costly() -> ApiError {
    ApiError::new(
        413,
        "spec_too_costly",
        format!(
            "the document took more than {} s to parse",
            PARSE_TIMEOUT.as_secs()
        ),
    )
}

/// A hook run inside every off-thread parse (tests hold a parse on a barrier with it).
#[cfg(test)]
#[allow(clippy::type_complexity)]
pub(crate) static PARSE_HOOK: std::sync::Mutex<Option<std::sync::Arc<dyn Fn() + Send + Sync>>> =
    std::sync::Mutex::new(None);

/// `POST /v1/services`: a `kind: Workload` document with one service. Parsed on the blocking
/// pool, never on the engine thread (a large document took seconds there, and every API call
/// and all scheduling waited), against the catalogue snapshot the engine published; the
/// engine only checks that its catalogue is still that one.
pub(crate) async fn submit(
    State(s): State<AppState>,
    headers: HeaderMap,
    req: axum::extract::Request,
) -> HttpResponse {
    if bearer(&headers).is_none() {
        return error_response(&ApiError::unauthorized());
    }
    let body = match read_body(&s, req).await {
        Ok(b) => b,
        Err(e) => return error_response(&e),
    };
    // Authentication before any parsing work is done for the caller (one cheap read).
    if let Err(e) = call(&s, &headers, Request::Nodes).await {
        if e.status == 401 {
            return error_response(&e);
        }
    }
    let catalog = std::sync::Arc::clone(&s.catalog);
    let parse = tokio::task::spawn_blocking(move || {
        #[cfg(test)]
        {
            let hook = PARSE_HOOK.lock().ok().and_then(|h| h.clone());
            if let Some(h) = hook {
                h();
            }
        }
        let parsed = crate::services::parse_service(&body, &catalog);
        (parsed, body, catalog)
    });
    let (parsed, body, catalog) = match tokio::time::timeout(PARSE_TIMEOUT, parse).await {
        Ok(Ok(r)) => r,
        Ok(Err(_)) => return error_response(&ApiError::internal("the spec parser stopped")),
        Err(_) => return error_response(&too_costly()),
    };
    let parsed = match parsed {
        Ok(p) => Box::new(p),
        Err(e) => return error_response(&e),
    };
    let request = Request::SubmitParsedService {
        parsed,
        body,
        catalog,
    };
    respond(call(&s, &headers, request).await, true)
}

/// `GET /v1/services`.
pub(crate) async fn list(State(s): State<AppState>, headers: HeaderMap) -> HttpResponse {
    respond(call(&s, &headers, Request::ListServices).await, false)
}

/// `GET /v1/services/{id}`.
pub(crate) async fn describe(
    State(s): State<AppState>,
    headers: HeaderMap,
    Path(id): Path<String>,
) -> HttpResponse {
    match service_id(&id) {
        Ok(id) => respond(call(&s, &headers, Request::GetService { id }).await, false),
        Err(e) => error_response(&e),
    }
}

/// `DELETE /v1/services/{id}`: retire it (every instance stopped).
pub(crate) async fn retire(
    State(s): State<AppState>,
    headers: HeaderMap,
    Path(id): Path<String>,
) -> HttpResponse {
    match service_id(&id) {
        Ok(id) => respond(
            call(&s, &headers, Request::RetireService { id }).await,
            false,
        ),
        Err(e) => error_response(&e),
    }
}

/// `POST /v1/services/{id}/instances/{instance}/load`: an instance's load report (JSON), with
/// its own `TESSERA_TOKEN`.
pub(crate) async fn load(
    State(s): State<AppState>,
    headers: HeaderMap,
    Path((id, instance)): Path<(String, String)>,
    req: axum::extract::Request,
) -> HttpResponse {
    if bearer(&headers).is_none() {
        return error_response(&ApiError::unauthorized());
    }
    let (service, instance) = match (service_id(&id), service_id(&instance)) {
        (Ok(s), Ok(i)) => (s, i),
        (Err(e), _) | (_, Err(e)) => return error_response(&e),
    };
    let body = match read_body(&s, req).await {
        Ok(b) => b,
        Err(e) => return error_response(&e),
    };
    // Parsed by the core, after the token is checked.
    let report = crate::core::Report::Json(body);
    let request = Request::InstanceLoad {
        service,
        instance,
        report,
    };
    respond(call(&s, &headers, request).await, false)
}

#[cfg(test)]
mod tests {
    use std::sync::{mpsc, Arc, Mutex};

    use crate::backend::{GresCount, InventoryNode, NodeHealth, NullBackend};
    use crate::config::{hash_token, DaemonConfig, TenantConfig};
    use crate::{Client, SystemClock};
    use tessera_model::{Bytes, MilliCpu};

    const TOKEN: &str = "parse-secret-token";

    /// A valid service document of about 60 KB (a long script and many variables).
    fn large_service() -> String {
        let script: String = (0..2700).map(|i| format!("    echo {i:07}\n")).collect();
        let env: String = (0..60)
            .map(|i| format!("    V{i}: '{}'\n", "x".repeat(170)))
            .collect();
        format!(
            "apiVersion: tessera/v1\nkind: Workload\nmetadata:\n  script: |\n{script}  env:\n{env}\
             spec:\n  services:\n    - name: big\n      endSeconds: 3600\n      \
             sloMilliseconds: 50\n      resources: {{cpu: '1', memory: 4Gi, gpuMemory: 2Gi}}\n      \
             arrivals: {{poisson: {{rate: 3}}}}\n"
        )
    }

    /// Issue 42 item 3: a service document is parsed off the engine thread. While its parse
    /// is held on a barrier, other API calls (a listing, a job submission) are answered; no
    /// service document is ever parsed on the engine thread; and the service is accepted once
    /// the parse goes on. No timing in the assertions: the other calls complete while the
    /// parse is provably still blocked.
    #[test]
    fn a_service_parse_never_holds_the_engine_thread() {
        let dir = tempfile::tempdir().unwrap();
        let text = format!(
            "store: {}\npolicy: serve-exclusive\nbackend: {{kind: local, workDir: {}}}\n",
            dir.path().join("t.db").display(),
            dir.path().display()
        );
        let mut c = DaemonConfig::from_yaml(&text).unwrap();
        c.listen = "127.0.0.1:0".parse().unwrap();
        c.tenants = vec![TenantConfig {
            name: "alice".into(),
            token_sha256: hash_token(TOKEN),
            admin: false,
        }];
        let nodes = vec![InventoryNode {
            name: "n1".into(),
            cpu: MilliCpu::from_cores(64),
            memory: Bytes::from_gib(512),
            gres: vec![GresCount {
                kind: Some("a100".into()),
                count: 8,
            }],
            health: NodeHealth::Up,
        }];
        let d = crate::spawn(
            c,
            Box::new(NullBackend::new(nodes)),
            Arc::new(SystemClock::new()),
        )
        .unwrap();
        let doc = large_service();
        assert!(doc.len() > 55_000 && doc.len() < 64 * 1024, "{}", doc.len());
        let (entered_tx, entered_rx) = mpsc::channel::<()>();
        let (release_tx, release_rx) = mpsc::channel::<()>();
        let (entered_tx, release_rx) = (Mutex::new(entered_tx), Mutex::new(release_rx));
        *super::PARSE_HOOK.lock().unwrap() = Some(Arc::new(move || {
            let _ = entered_tx.lock().unwrap().send(());
            let _ = release_rx.lock().unwrap().recv();
        }));
        let url = d.url();
        let submitter =
            std::thread::spawn(move || Client::new(&url, Some(TOKEN.into())).submit_service(&doc));
        entered_rx.recv().unwrap();
        // The parse is held: the engine still answers everything else.
        let alice = Client::new(&d.url(), Some(TOKEN.into()));
        assert!(alice.list().unwrap().is_empty());
        let job = alice
            .submit("name: j\ncommand: [\"true\"]\ngpus: 1\n")
            .unwrap();
        assert!(job.id > 0);
        release_tx.send(()).unwrap();
        let service = submitter.join().unwrap().unwrap();
        assert_eq!(service.name, "big");
        *super::PARSE_HOOK.lock().unwrap() = None;
        let threads = crate::services::PARSE_THREADS.lock().unwrap().clone();
        assert!(
            !threads
                .iter()
                .any(|t| t.as_deref() == Some("tessera-engine")),
            "a service document was parsed on the engine thread: {threads:?}"
        );
    }
}
