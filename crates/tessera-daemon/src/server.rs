//! The HTTP API (axum) and the engine thread it talks to.

use std::future::Future;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::{DefaultBodyLimit, Path, Query, State};
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response as HttpResponse};
use axum::routing::{get, post};
use axum::{Json, Router};
use serde::Deserialize;
use tokio::sync::oneshot;

use crate::engine::{Engine, Request, Response};
use crate::error::{ApiError, DaemonError};
use crate::types::{JobState, ProgressReport};

/// Most requests the engine takes in one batch (one store transaction for the submissions).
const MAX_BATCH: usize = 1024;
/// How often node health is re-read from the backend.
const INVENTORY_INTERVAL: Duration = Duration::from_secs(30);

pub(crate) struct Envelope {
    token: Option<String>,
    request: Request,
    reply: oneshot::Sender<Result<Response, ApiError>>,
}

/// Runs the engine loop until every sender is dropped.
pub(crate) fn run_engine(
    mut engine: Engine,
    rx: mpsc::Receiver<Envelope>,
    poll_interval: Duration,
) {
    let mut last_poll = Instant::now();
    let mut last_inventory = Instant::now();
    loop {
        let mut wait = poll_interval.saturating_sub(last_poll.elapsed());
        if let Some(r) = engine.until_next_wakeup() {
            wait = wait.min(r);
        }
        let first = match rx.recv_timeout(wait) {
            Ok(m) => Some(m),
            Err(mpsc::RecvTimeoutError::Timeout) => None,
            Err(mpsc::RecvTimeoutError::Disconnected) => break,
        };
        let mut batch: Vec<Envelope> = first.into_iter().collect();
        while batch.len() < MAX_BATCH {
            match rx.try_recv() {
                Ok(m) => batch.push(m),
                Err(_) => break,
            }
        }
        let (submits, others): (Vec<Envelope>, Vec<Envelope>) = batch
            .into_iter()
            .partition(|e| matches!(e.request, Request::Submit { .. }));
        if !submits.is_empty() {
            let mut replies = Vec::with_capacity(submits.len());
            let mut items = Vec::with_capacity(submits.len());
            for e in submits {
                if let Request::Submit { body } = e.request {
                    items.push((e.token, body));
                    replies.push(e.reply);
                }
            }
            for (reply, result) in replies.into_iter().zip(engine.submit_batch(items)) {
                let _ = reply.send(result);
            }
        }
        for e in others {
            let result = engine.handle(e.token.as_deref(), e.request);
            let _ = e.reply.send(result);
        }
        engine.collect_backend_results();
        if last_poll.elapsed() >= poll_interval {
            engine.poll();
            last_poll = Instant::now();
        }
        if last_inventory.elapsed() >= INVENTORY_INTERVAL {
            engine.refresh_inventory();
            last_inventory = Instant::now();
        }
        if engine.wants_schedule() {
            engine.schedule();
        }
    }
}

#[derive(Clone)]
struct AppState {
    tx: mpsc::Sender<Envelope>,
}

fn error_response(e: &ApiError) -> HttpResponse {
    let status = StatusCode::from_u16(e.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    (status, Json(e.body())).into_response()
}

impl IntoResponse for ApiError {
    fn into_response(self) -> HttpResponse {
        error_response(&self)
    }
}

fn bearer(headers: &HeaderMap) -> Option<String> {
    let v = headers.get(header::AUTHORIZATION)?.to_str().ok()?;
    let (scheme, token) = v.split_once(' ')?;
    scheme
        .eq_ignore_ascii_case("bearer")
        .then(|| token.trim().to_string())
}

async fn call(
    state: &AppState,
    headers: &HeaderMap,
    request: Request,
) -> Result<Response, ApiError> {
    let (reply, rx) = oneshot::channel();
    state
        .tx
        .send(Envelope {
            token: bearer(headers),
            request,
            reply,
        })
        .map_err(|_| ApiError::new(503, "unavailable", "the scheduling engine has stopped"))?;
    rx.await
        .map_err(|_| ApiError::new(503, "unavailable", "the scheduling engine has stopped"))?
}

fn respond(r: Result<Response, ApiError>, created: bool) -> HttpResponse {
    match r {
        Ok(Response::Job(j)) if created => (StatusCode::CREATED, Json(*j)).into_response(),
        Ok(Response::Job(j)) => Json(*j).into_response(),
        Ok(Response::Detail(d)) => Json(*d).into_response(),
        Ok(Response::Jobs(l)) => Json(l).into_response(),
        Ok(Response::Nodes(n)) => Json(n).into_response(),
        Ok(Response::Queue(q)) => Json(q).into_response(),
        Ok(Response::Ack(a)) => Json(a).into_response(),
        Ok(Response::Text(t)) => (
            [(
                header::CONTENT_TYPE,
                "text/plain; version=0.0.4; charset=utf-8",
            )],
            t,
        )
            .into_response(),
        Err(e) => error_response(&e),
    }
}

fn body_text(body: Result<Bytes, BytesRejection>) -> Result<String, ApiError> {
    let bytes = body.map_err(|rej| {
        let status = rej.status().as_u16();
        if status == 413 {
            ApiError::new(413, "body_too_large", "request body exceeds the size limit")
        } else {
            ApiError::new(status.clamp(400, 499), "bad_body", rej.body_text())
        }
    })?;
    String::from_utf8(bytes.to_vec()).map_err(|_| ApiError::bad_request("body is not UTF-8"))
}

fn job_id(s: &str) -> Result<i64, ApiError> {
    s.parse::<i64>().ok().filter(|&v| v > 0).ok_or_else(|| {
        ApiError::not_found(format!(
            "no job {:?}",
            s.chars().take(40).collect::<String>()
        ))
    })
}

async fn submit(
    State(s): State<AppState>,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> HttpResponse {
    let body = match body_text(body) {
        Ok(b) => b,
        Err(e) => return error_response(&e),
    };
    respond(call(&s, &headers, Request::Submit { body }).await, true)
}

#[derive(Deserialize)]
struct ListQuery {
    state: Option<String>,
    queue: Option<String>,
    after: Option<i64>,
    limit: Option<usize>,
}

async fn list(
    State(s): State<AppState>,
    headers: HeaderMap,
    q: Result<Query<ListQuery>, axum::extract::rejection::QueryRejection>,
) -> HttpResponse {
    let q = match q {
        Ok(Query(q)) => q,
        Err(e) => return error_response(&ApiError::bad_request(e.body_text())),
    };
    let state = match q.state {
        None => None,
        Some(st) => match JobState::parse(&st) {
            Some(v) => Some(v),
            None => {
                return error_response(&ApiError::bad_request(format!(
                    "unknown state {:?}",
                    st.chars().take(40).collect::<String>()
                )))
            }
        },
    };
    let limit = match q.limit {
        None => crate::types::DEFAULT_PAGE,
        Some(l) if (1..=crate::types::MAX_PAGE).contains(&l) => l,
        Some(_) => {
            return error_response(&ApiError::bad_request(format!(
                "limit: must be within 1..={}",
                crate::types::MAX_PAGE
            )))
        }
    };
    let request = Request::List {
        state,
        queue: q.queue,
        after: q.after,
        limit,
    };
    respond(call(&s, &headers, request).await, false)
}

async fn describe(
    State(s): State<AppState>,
    headers: HeaderMap,
    Path(id): Path<String>,
) -> HttpResponse {
    match job_id(&id) {
        Ok(id) => respond(call(&s, &headers, Request::Get { id }).await, false),
        Err(e) => error_response(&e),
    }
}

async fn cancel(
    State(s): State<AppState>,
    headers: HeaderMap,
    Path(id): Path<String>,
) -> HttpResponse {
    match job_id(&id) {
        Ok(id) => respond(call(&s, &headers, Request::Cancel { id }).await, false),
        Err(e) => error_response(&e),
    }
}

async fn progress(
    State(s): State<AppState>,
    headers: HeaderMap,
    Path(id): Path<String>,
    body: Result<Bytes, BytesRejection>,
) -> HttpResponse {
    let id = match job_id(&id) {
        Ok(v) => v,
        Err(e) => return error_response(&e),
    };
    let report: ProgressReport = match body_text(body).and_then(|t| {
        serde_json::from_str(&t).map_err(|e| ApiError::bad_request(format!("malformed JSON: {e}")))
    }) {
        Ok(r) => r,
        Err(e) => return error_response(&e),
    };
    respond(
        call(&s, &headers, Request::Progress { id, report }).await,
        false,
    )
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct HealthBody {
    health: crate::backend::NodeHealth,
}

/// `POST /v1/nodes/{name}/health` `{"health": "down"|"draining"|"up"}` (administrators):
/// `up` hands the node's health back to the backend.
async fn node_health(
    State(s): State<AppState>,
    headers: HeaderMap,
    Path(node): Path<String>,
    body: Result<Bytes, BytesRejection>,
) -> HttpResponse {
    let health = match body_text(body).and_then(|t| {
        serde_json::from_str::<HealthBody>(&t)
            .map_err(|e| ApiError::bad_request(format!("malformed JSON: {e}")))
    }) {
        Ok(b) => (b.health != crate::backend::NodeHealth::Up).then_some(b.health),
        Err(e) => return error_response(&e),
    };
    respond(
        call(&s, &headers, Request::SetNodeHealth { node, health }).await,
        false,
    )
}

async fn nodes(State(s): State<AppState>, headers: HeaderMap) -> HttpResponse {
    respond(call(&s, &headers, Request::Nodes).await, false)
}

async fn queue(State(s): State<AppState>, headers: HeaderMap) -> HttpResponse {
    respond(call(&s, &headers, Request::Queue).await, false)
}

async fn metrics(State(s): State<AppState>, headers: HeaderMap) -> HttpResponse {
    respond(call(&s, &headers, Request::Metrics).await, false)
}

async fn healthz() -> HttpResponse {
    Json(serde_json::json!({"status": "ok"})).into_response()
}

async fn fallback() -> HttpResponse {
    error_response(&ApiError::not_found("no such endpoint"))
}

fn router(tx: mpsc::Sender<Envelope>, max_body: usize) -> Router {
    Router::new()
        .route("/v1/jobs", post(submit).get(list))
        .route("/v1/jobs/{id}", get(describe).delete(cancel))
        .route("/v1/jobs/{id}/progress", post(progress))
        .route("/v1/nodes", get(nodes))
        .route("/v1/nodes/{name}/health", post(node_health))
        .route("/v1/queue", get(queue))
        .route("/metrics", get(metrics))
        .route("/healthz", get(healthz))
        .fallback(fallback)
        .layer(DefaultBodyLimit::max(max_body))
        .with_state(AppState { tx })
}

/// Serves the API for an opened engine on `listener` until `shutdown` resolves, then stops
/// the engine thread.
pub(crate) async fn serve_engine(
    mut engine: Engine,
    listener: tokio::net::TcpListener,
    max_body: usize,
    poll_interval: Duration,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<(), DaemonError> {
    let addr = listener.local_addr()?;
    engine.set_callback_url(format!("http://{addr}"));
    engine.start_backend_thread()?;
    let (tx, rx) = mpsc::channel::<Envelope>();
    let thread = std::thread::Builder::new()
        .name("tessera-engine".into())
        .spawn(move || run_engine(engine, rx, poll_interval))?;
    let app = router(tx, max_body);
    tracing::info!(%addr, "serving the tessera API");
    let served = axum::serve(listener, app)
        .with_graceful_shutdown(shutdown)
        .await;
    // The router (and its sender) is dropped once serving ends; the engine loop then exits.
    let joined = tokio::task::spawn_blocking(move || thread.join()).await;
    served?;
    match joined {
        Ok(Ok(())) => Ok(()),
        _ => Err(DaemonError::Engine("the engine thread panicked".into())),
    }
}
