//! The HTTP API (axum) and the engine thread it talks to.

use std::future::Future;
use std::pin::Pin;
use std::sync::{mpsc, Arc};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::{DefaultBodyLimit, FromRequest, Path, Query, State};
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response as HttpResponse};
use axum::routing::{get, post};
use axum::{Json, Router};
use serde::Deserialize;
use tokio::sync::oneshot;

use crate::config::Limits;
use crate::engine::{Engine, Request, Response};
use crate::error::{ApiError, DaemonError};
use crate::metrics::Histogram;
use crate::server_guard::{AuthLimiter, ClientKey, ConnectionCounts};
use crate::spec::JobSpec;
use crate::types::JobState;

/// Most requests the engine takes in one batch (one store transaction for the submissions).
const MAX_BATCH: usize = 1024;
/// How often node health is re-read from the backend.
const INVENTORY_INTERVAL: Duration = Duration::from_secs(30);
/// Longest error message sent back, in bytes: messages may quote client input, and an error
/// must not echo a large body back.
const MAX_ERROR_MESSAGE: usize = 512;
/// Largest spec parsed on the connection's own task instead of the blocking pool.
const INLINE_SPEC_BYTES: usize = 4096;
/// How long open connections get to finish at shutdown before they are dropped.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(5);

pub(crate) struct Envelope {
    token: Option<String>,
    request: Request,
    reply: oneshot::Sender<Result<Response, ApiError>>,
    /// When the request was handed to the engine (its wait is measured).
    sent: Instant,
}

/// The daemon loop's timers (polls of running jobs, inventory refreshes), and the answers it
/// holds back.
pub(crate) struct LoopTimers {
    poll_interval: Duration,
    last_poll: Instant,
    last_inventory: Instant,
    /// Answers to writes (a cancel, a service retired, a node marked down) held until the
    /// backend has carried out the stops and launch withdrawals they caused, by job id (see
    /// [`Engine::settled`]): an acknowledged cancel is a barrier.
    held: Vec<(Envelope, Result<Response, ApiError>, Vec<i64>)>,
}

impl LoopTimers {
    pub(crate) fn new(poll_interval: Duration) -> LoopTimers {
        LoopTimers {
            poll_interval,
            last_poll: Instant::now(),
            last_inventory: Instant::now(),
            held: Vec::new(),
        }
    }
}

/// Runs the engine loop until every sender is dropped.
pub(crate) fn run_engine(
    mut engine: Engine,
    rx: mpsc::Receiver<Envelope>,
    poll_interval: Duration,
) {
    let mut timers = LoopTimers::new(poll_interval);
    let mut decided = false;
    loop {
        let mut wait = timers
            .poll_interval
            .saturating_sub(timers.last_poll.elapsed());
        if let Some(r) = engine.until_next_wakeup() {
            wait = wait.min(r);
        }
        if decided {
            // The last pass's decisions wait for the next commit: at once.
            wait = Duration::ZERO;
        }
        let first = match rx.recv_timeout(wait) {
            Ok(m) => Some(m),
            Err(mpsc::RecvTimeoutError::Timeout) => None,
            Err(mpsc::RecvTimeoutError::Disconnected) => break,
        };
        decided = iteration(&mut engine, first, &rx, &mut timers);
    }
    // Decisions of a last pass not yet committed are written (and acted on) before exit.
    engine.begin_group();
    engine.end_group();
    // Dropping the engine waits for the backend to carry out the stops handed to it: the
    // answers held for them are true then.
    drop(engine);
    for (e, result, _) in timers.held.drain(..) {
        let _ = e.reply.send(result);
    }
}

/// Sends the held answers whose stops and withdrawals the backend has carried out.
fn release_settled(engine: &Engine, timers: &mut LoopTimers) {
    if timers.held.is_empty() {
        return;
    }
    let (ready, waiting): (Vec<_>, Vec<_>) = std::mem::take(&mut timers.held)
        .into_iter()
        .partition(|(_, _, ids)| engine.settled(ids));
    timers.held = waiting;
    for (e, result, _) in ready {
        let _ = e.reply.send(result);
    }
}

/// Takes waiting requests (up to [`MAX_BATCH`]) from the channel, sorted into submissions,
/// other writes and reads.
fn take_requests(
    rx: &mpsc::Receiver<Envelope>,
    first: Option<Envelope>,
    taken: &mut usize,
    engine: &mut Engine,
    submits: &mut Vec<Envelope>,
    writes: &mut Vec<Envelope>,
    reads: &mut Vec<Envelope>,
) {
    let mut next = first;
    loop {
        let e = match next.take() {
            Some(e) => e,
            None if *taken < MAX_BATCH => match rx.try_recv() {
                Ok(e) => e,
                Err(_) => break,
            },
            None => break,
        };
        *taken += 1;
        engine
            .core_metrics_mut()
            .engine_wait
            .observe(e.sent.elapsed().as_secs_f64());
        if matches!(e.request, Request::Submit { .. }) {
            submits.push(e);
        } else if crate::engine::writes(&e.request) {
            writes.push(e);
        } else {
            reads.push(e);
        }
    }
}

/// One iteration of the engine loop, with one store commit (one fsync) for everything it
/// changed: the last iteration's scheduling pass, the writes among the waiting requests, the
/// backend results and polls, and last the submissions, including those that arrived
/// meanwhile. Nothing is acknowledged before that commit; launches and stops are handed to the
/// backend after it. Reads are answered after the commit, so they never show a change that is
/// not durable. Then, when one is due, the scheduling pass runs (it sees the submissions just
/// committed); its decisions are written by the next iteration's commit, before anything is
/// launched, and true is returned so that the next iteration comes at once.
///
/// The pass runs after the submissions' commit, never before it in the same group: if that
/// commit fails the submissions are forgotten, so no decision may depend on them.
pub(crate) fn iteration(
    engine: &mut Engine,
    first: Option<Envelope>,
    rx: &mpsc::Receiver<Envelope>,
    timers: &mut LoopTimers,
) -> bool {
    let (mut submits, mut writes, mut reads) = (Vec::new(), Vec::new(), Vec::new());
    let mut taken = 0;
    engine.begin_group();
    take_requests(
        rx,
        first,
        &mut taken,
        engine,
        &mut submits,
        &mut writes,
        &mut reads,
    );
    let mut answered: Vec<(Envelope, Result<Response, ApiError>, Vec<i64>)> = Vec::new();
    let handle_writes =
        |engine: &mut Engine,
         writes: &mut Vec<Envelope>,
         answered: &mut Vec<(Envelope, Result<Response, ApiError>, Vec<i64>)>| {
            for mut e in writes.drain(..) {
                let request = std::mem::replace(&mut e.request, Request::Nodes);
                let result = engine.handle(e.token.as_deref(), request);
                let touched = engine.take_touched();
                answered.push((e, result, touched));
            }
        };
    handle_writes(engine, &mut writes, &mut answered);
    engine.collect_backend_results();
    if timers.last_poll.elapsed() >= timers.poll_interval {
        engine.poll();
        timers.last_poll = Instant::now();
    }
    if timers.last_inventory.elapsed() >= INVENTORY_INTERVAL {
        engine.refresh_inventory();
        timers.last_inventory = Instant::now();
    }
    // Whatever arrived while the loop worked joins this commit.
    take_requests(
        rx,
        None,
        &mut taken,
        engine,
        &mut submits,
        &mut writes,
        &mut reads,
    );
    handle_writes(engine, &mut writes, &mut answered);
    let mut items = Vec::with_capacity(submits.len());
    for e in &mut submits {
        if let Request::Submit { body } = &mut e.request {
            items.push((e.token.take(), std::mem::take(body)));
        }
    }
    let submitted = if items.is_empty() {
        Vec::new()
    } else {
        engine.stage_submissions(items)
    };
    let durable = engine.end_group();
    if taken > 0 {
        engine.core_metrics_mut().engine_iterations += 1;
    }
    let submitted = submits
        .into_iter()
        .zip(submitted)
        .map(|(e, r)| (e, r, Vec::new()));
    for (e, result, touched) in answered.into_iter().chain(submitted) {
        let result = match result {
            Ok(_) if !durable => Err(engine.store_unavailable_error()),
            r => r,
        };
        if result.is_ok() && !engine.settled(&touched) {
            timers.held.push((e, result, touched));
            continue;
        }
        let _ = e.reply.send(result);
    }
    release_settled(engine, timers);
    for e in reads {
        let result = engine.handle(e.token.as_deref(), e.request);
        let _ = e.reply.send(result);
    }
    if engine.wants_schedule() && engine.store_accepts_writes() {
        engine.begin_group();
        engine.schedule();
        return true;
    }
    false
}

#[derive(Clone)]
pub(crate) struct AppState {
    tx: mpsc::Sender<Envelope>,
    body_timeout: Duration,
    /// Time from a submission's arrival (headers read) to its answer, as the server sees it:
    /// body, parse, the engine's wait and durable commit. Kept here, not in the engine, so
    /// that it covers the hops around the engine too.
    submit_latency: Arc<std::sync::Mutex<Histogram>>,
    /// Failed authentications per client (read here for `/metrics`).
    auth_limiter: Arc<AuthLimiter>,
    /// The GPU catalogue service documents are parsed against, off the engine thread.
    pub(crate) catalog: Arc<tessera_model::GpuCatalog>,
}

/// `message` cut to [`MAX_ERROR_MESSAGE`] bytes (on a character boundary), saying how much
/// was cut.
fn cap_message(message: &str) -> String {
    if message.len() <= MAX_ERROR_MESSAGE {
        return message.to_string();
    }
    let mut end = MAX_ERROR_MESSAGE;
    while !message.is_char_boundary(end) {
        end -= 1;
    }
    format!(
        "{}... ({} more bytes not shown)",
        &message[..end],
        message.len() - end
    )
}

pub(crate) fn error_response(e: &ApiError) -> HttpResponse {
    let status = StatusCode::from_u16(e.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    let mut body = e.body();
    body.error.message = cap_message(&body.error.message);
    (status, Json(body)).into_response()
}

impl IntoResponse for ApiError {
    fn into_response(self) -> HttpResponse {
        error_response(&self)
    }
}

pub(crate) fn bearer(headers: &HeaderMap) -> Option<String> {
    let v = headers.get(header::AUTHORIZATION)?.to_str().ok()?;
    let (scheme, token) = v.split_once(' ')?;
    scheme
        .eq_ignore_ascii_case("bearer")
        .then(|| token.trim().to_string())
}

pub(crate) async fn call(
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
            sent: Instant::now(),
        })
        .map_err(|_| ApiError::new(503, "unavailable", "the scheduling engine has stopped"))?;
    rx.await
        .map_err(|_| ApiError::new(503, "unavailable", "the scheduling engine has stopped"))?
}

pub(crate) fn respond(r: Result<Response, ApiError>, created: bool) -> HttpResponse {
    match r {
        Ok(Response::Job(j)) if created => (StatusCode::CREATED, Json(*j)).into_response(),
        Ok(Response::Job(j)) => Json(*j).into_response(),
        Ok(Response::Detail(d)) => Json(*d).into_response(),
        Ok(Response::Jobs(l)) => Json(l).into_response(),
        Ok(Response::Nodes(n)) => Json(n).into_response(),
        Ok(Response::Queue(q)) => Json(q).into_response(),
        Ok(Response::Ack(a)) => Json(a).into_response(),
        Ok(Response::Service(v)) if created => (StatusCode::CREATED, Json(*v)).into_response(),
        Ok(Response::Service(v)) => Json(*v).into_response(),
        Ok(Response::Services(l)) => Json(l).into_response(),
        Ok(Response::Events(l)) => Json(l).into_response(),
        Ok(Response::Snapshot(s)) => Json(*s).into_response(),
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

/// Reads a request's body within the body timeout (a client trickling its body must not hold
/// a connection forever) and the body size limit.
pub(crate) async fn read_body(
    state: &AppState,
    req: axum::extract::Request,
) -> Result<String, ApiError> {
    match tokio::time::timeout(state.body_timeout, Bytes::from_request(req, &())).await {
        Ok(body) => body_text(body),
        Err(_) => Err(ApiError::new(
            408,
            "timeout",
            format!(
                "the request body did not arrive within {} ms",
                state.body_timeout.as_millis()
            ),
        )),
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
    req: axum::extract::Request,
) -> HttpResponse {
    // Anonymous callers get no parsing work done for them (the token itself is checked by
    // the engine).
    if bearer(&headers).is_none() {
        return error_response(&ApiError::unauthorized());
    }
    let arrived = Instant::now();
    let answer = submit_parsed(&s, &headers, req).await;
    if let Ok(mut h) = s.submit_latency.lock() {
        h.observe(arrived.elapsed().as_secs_f64());
    }
    answer
}

async fn submit_parsed(
    s: &AppState,
    headers: &HeaderMap,
    req: axum::extract::Request,
) -> HttpResponse {
    let body = match read_body(s, req).await {
        Ok(b) => b,
        Err(e) => return error_response(&e),
    };
    // Parsing never runs on the engine thread, and the engine gets the spec as compact JSON
    // (cheap to read again). A large spec (costly YAML) goes to the blocking pool; a small
    // one, bounded in depth and aliases, is parsed here in microseconds: the hop to another
    // thread would cost more, and under load each hop waits for a core.
    let to_json = |body: &str| {
        let spec = JobSpec::parse(body)?;
        serde_json::to_string(&spec).map_err(|e| ApiError::internal(e.to_string()))
    };
    let parsed = if body.len() <= INLINE_SPEC_BYTES {
        to_json(&body)
    } else {
        let parse = tokio::task::spawn_blocking(move || to_json(&body));
        match tokio::time::timeout(crate::server_services::PARSE_TIMEOUT, parse).await {
            Ok(Ok(r)) => r,
            Ok(Err(_)) => Err(ApiError::internal("the spec parser stopped")),
            Err(_) => Err(crate::server_services::too_costly()),
        }
    };
    let body = match parsed {
        Ok(json) => json,
        Err(e) => return error_response(&e),
    };
    respond(call(s, headers, Request::Submit { body }).await, true)
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
    req: axum::extract::Request,
) -> HttpResponse {
    let id = match job_id(&id) {
        Ok(v) => v,
        Err(e) => return error_response(&e),
    };
    // The body is read here but parsed by the core, after the token is checked.
    let report = match read_body(&s, req).await {
        Ok(text) => crate::core::Report::Json(text),
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

#[derive(Deserialize)]
struct EventsQuery {
    after: Option<u64>,
    limit: Option<usize>,
}

/// `GET /v1/events[?after=SEQ&limit=N]`: the recent events the caller may see, oldest first.
async fn events(
    State(s): State<AppState>,
    headers: HeaderMap,
    q: Result<Query<EventsQuery>, axum::extract::rejection::QueryRejection>,
) -> HttpResponse {
    let q = match q {
        Ok(Query(q)) => q,
        Err(e) => return error_response(&ApiError::bad_request(e.body_text())),
    };
    let cap = crate::events::EVENT_CAPACITY;
    let limit = match q.limit {
        None => cap,
        Some(l) if (1..=cap).contains(&l) => l,
        Some(_) => {
            return error_response(&ApiError::bad_request(format!(
                "limit: must be within 1..={cap}"
            )))
        }
    };
    let request = Request::Events {
        after: q.after,
        limit,
    };
    respond(call(&s, &headers, request).await, false)
}

async fn metrics(State(s): State<AppState>, headers: HeaderMap) -> HttpResponse {
    let answer = call(&s, &headers, Request::Metrics).await.map(|r| match r {
        Response::Text(mut text) => {
            let h = match s.submit_latency.lock() {
                Ok(h) => h.clone(),
                Err(poisoned) => poisoned.into_inner().clone(),
            };
            text.push_str("# HELP tessera_submit_seconds Time from a submission's arrival to its answer (body, parse, engine wait, durable commit).\n# TYPE tessera_submit_seconds histogram\n");
            crate::metrics::histogram(&mut text, "tessera_submit_seconds", &h);
            text.push_str(&format!(
                "# HELP tessera_auth_limited_total Times a client was refused for too many failed authentications (one per log line).\n# TYPE tessera_auth_limited_total counter\ntessera_auth_limited_total {}\n",
                s.auth_limiter.limited_total()
            ));
            Response::Text(text)
        }
        other => other,
    });
    respond(answer, false)
}

async fn healthz() -> HttpResponse {
    Json(serde_json::json!({"status": "ok"})).into_response()
}

async fn fallback() -> HttpResponse {
    error_response(&ApiError::not_found("no such endpoint"))
}

fn router(
    tx: mpsc::Sender<Envelope>,
    limits: &Limits,
    auth_limiter: Arc<AuthLimiter>,
    catalog: Arc<tessera_model::GpuCatalog>,
) -> Router {
    Router::new()
        .route("/v1/jobs", post(submit).get(list))
        .route("/v1/jobs/{id}", get(describe).delete(cancel))
        .route("/v1/jobs/{id}/progress", post(progress))
        .route("/v1/nodes", get(nodes))
        .route("/v1/nodes/{name}/health", post(node_health))
        .route("/v1/queue", get(queue))
        .route("/v1/events", get(events))
        .route(
            "/v1/services",
            post(crate::server_services::submit).get(crate::server_services::list),
        )
        .route(
            "/v1/services/{id}",
            get(crate::server_services::describe).delete(crate::server_services::retire),
        )
        .route(
            "/v1/services/{id}/instances/{instance}/load",
            post(crate::server_services::load),
        )
        .route("/metrics", get(metrics))
        .route("/healthz", get(healthz))
        .merge(crate::web::routes())
        .merge(crate::forecast_snapshot::routes())
        .fallback(fallback)
        .layer(DefaultBodyLimit::max(limits.max_body_bytes))
        .with_state(AppState {
            tx,
            body_timeout: Duration::from_millis(limits.body_timeout_ms),
            submit_latency: Arc::default(),
            auth_limiter,
            catalog,
        })
}

/// Serves the API for an opened engine on `listener` until `shutdown` resolves, then stops
/// the engine thread.
pub(crate) async fn serve_engine(
    mut engine: Engine,
    listener: tokio::net::TcpListener,
    limits: &Limits,
    poll_interval: Duration,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<(), DaemonError> {
    let addr = listener.local_addr()?;
    engine.set_callback_url(format!("http://{addr}"));
    engine.start_backend_thread()?;
    let catalog = engine.catalog_snapshot();
    let (tx, rx) = mpsc::channel::<Envelope>();
    let thread = std::thread::Builder::new()
        .name("tessera-engine".into())
        .spawn(move || run_engine(engine, rx, poll_interval))?;
    let auth_limiter = Arc::new(AuthLimiter::new(
        limits.auth_failure_burst,
        Duration::from_millis(limits.auth_failure_refill_ms),
    ));
    let app = router(tx, limits, Arc::clone(&auth_limiter), catalog);
    tracing::info!(%addr, "serving the tessera API");
    accept_loop(listener, app, auth_limiter, limits, shutdown).await;
    // Every connection (and the router's sender with it) is gone; the engine loop then exits.
    let joined = tokio::task::spawn_blocking(move || thread.join()).await;
    match joined {
        Ok(Ok(())) => Ok(()),
        _ => Err(DaemonError::Engine("the engine thread panicked".into())),
    }
}

/// A client connection whose writes fail once they have made no progress for `limit`: a
/// client that stops reading its answers must not hold a connection (and a descriptor and a
/// slot under the cap) forever.
struct SendTimeout {
    inner: tokio::net::TcpStream,
    limit: Duration,
    stalled: Option<Pin<Box<tokio::time::Sleep>>>,
}

impl SendTimeout {
    fn check<T>(
        &mut self,
        cx: &mut Context<'_>,
        r: Poll<std::io::Result<T>>,
    ) -> Poll<std::io::Result<T>> {
        match r {
            Poll::Ready(v) => {
                self.stalled = None;
                Poll::Ready(v)
            }
            Poll::Pending => {
                let limit = self.limit;
                let timer = self
                    .stalled
                    .get_or_insert_with(|| Box::pin(tokio::time::sleep(limit)));
                if timer.as_mut().poll(cx).is_ready() {
                    Poll::Ready(Err(std::io::Error::new(
                        std::io::ErrorKind::TimedOut,
                        "the client does not read its answers",
                    )))
                } else {
                    Poll::Pending
                }
            }
        }
    }
}

impl tokio::io::AsyncRead for SendTimeout {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut tokio::io::ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_read(cx, buf)
    }
}

impl tokio::io::AsyncWrite for SendTimeout {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        let this = self.get_mut();
        let r = Pin::new(&mut this.inner).poll_write(cx, buf);
        this.check(cx, r)
    }
    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        let this = self.get_mut();
        let r = Pin::new(&mut this.inner).poll_write_vectored(cx, bufs);
        this.check(cx, r)
    }
    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }
    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        let this = self.get_mut();
        let r = Pin::new(&mut this.inner).poll_flush(cx);
        this.check(cx, r)
    }
    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_shutdown(cx)
    }
}

/// Answers a connection beyond the cap with a 503 (best effort, never waiting) and closes it.
fn refuse(stream: tokio::net::TcpStream, cap: usize) {
    let body = serde_json::json!({"error": {
        "code": "unavailable",
        "message": format!("the daemon serves at most {cap} connections; retry later"),
    }})
    .to_string();
    let reply = format!(
        "HTTP/1.1 503 Service Unavailable\r\ncontent-type: application/json\r\n\
         connection: close\r\nretry-after: 1\r\ncontent-length: {}\r\n\r\n{body}",
        body.len()
    );
    let _ = stream.try_write(reply.as_bytes());
}

/// Answers a connection beyond its client's own cap with a 429 (best effort) and closes it.
fn refuse_client(stream: tokio::net::TcpStream, cap: usize) {
    let body = serde_json::json!({"error": {
        "code": "too_many_connections",
        "message": format!("this client already holds {cap} connections, the most one client may open; reuse them or retry later"),
    }})
    .to_string();
    let reply = format!(
        "HTTP/1.1 429 Too Many Requests\r\ncontent-type: application/json\r\n\
         connection: close\r\nretry-after: 1\r\ncontent-length: {}\r\n\r\n{body}",
        body.len()
    );
    let _ = stream.try_write(reply.as_bytes());
}

/// The answer to a request from a client with no failed authentications left.
fn too_many_failures(wait: Duration) -> HttpResponse {
    let secs = wait.as_secs() + u64::from(wait.subsec_nanos() > 0);
    let mut r = error_response(&ApiError::new(
        429,
        "too_many_failed_authentications",
        format!("too many failed authentications from this address; retry in {secs} s"),
    ));
    r.headers_mut()
        .insert(header::RETRY_AFTER, header::HeaderValue::from(secs.max(1)));
    r
}

/// Serves one request of `client`: refused at once while the client has no failed
/// authentications left (except `/healthz`), else by the router; a `401` to a request that
/// carried a token spends one of its failures.
async fn guarded(
    app: Router,
    limiter: Arc<AuthLimiter>,
    client: ClientKey,
    req: hyper::Request<hyper::body::Incoming>,
) -> Result<HttpResponse, std::convert::Infallible> {
    use tower_service::Service;
    if req.uri().path() != "/healthz" {
        if let Some(wait) = limiter.check(client, Instant::now()) {
            return Ok(too_many_failures(wait));
        }
    }
    let presented = req.headers().contains_key(header::AUTHORIZATION);
    let mut app = app;
    let answer = app.call(req).await?;
    if presented && answer.status() == StatusCode::UNAUTHORIZED {
        limiter.failed(client, Instant::now());
    }
    Ok(answer)
}

/// Accepts connections until `shutdown`, each served by hyper with a header read timeout
/// (which also closes idle keep-alive connections: hyper arms it while waiting for the next
/// request's head) and a send timeout, under a cap on open connections. Accept errors (running out of file
/// descriptors) are logged and retried after a pause, never fatal.
async fn accept_loop(
    listener: tokio::net::TcpListener,
    app: Router,
    auth_limiter: Arc<AuthLimiter>,
    limits: &Limits,
    shutdown: impl Future<Output = ()> + Send + 'static,
) {
    use hyper_util::rt::{TokioIo, TokioTimer};

    let cap = limits.max_connections;
    let per_client = ConnectionCounts::new(limits.max_connections_per_client);
    let send_timeout = Duration::from_millis(limits.send_timeout_ms);
    let permits = Arc::new(tokio::sync::Semaphore::new(cap));
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    let mut http = hyper::server::conn::http1::Builder::new();
    http.timer(TokioTimer::new())
        .header_read_timeout(Duration::from_millis(limits.header_timeout_ms));
    let mut tasks = tokio::task::JoinSet::new();
    tokio::pin!(shutdown);
    loop {
        let (stream, client) = tokio::select! {
            () = &mut shutdown => break,
            Some(_) = tasks.join_next(), if !tasks.is_empty() => continue,
            accepted = listener.accept() => match accepted {
                Ok((stream, peer)) => (stream, ClientKey::of(peer.ip())),
                Err(e) => {
                    tracing::warn!("accepting a connection failed, retrying: {e}");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
        };
        let Ok(permit) = permits.clone().try_acquire_owned() else {
            refuse(stream, cap);
            continue;
        };
        let Some(slot) = per_client.acquire(client) else {
            refuse_client(stream, per_client.cap());
            continue;
        };
        let _ = stream.set_nodelay(true);
        let io = SendTimeout {
            inner: stream,
            limit: send_timeout,
            stalled: None,
        };
        let (app, limiter) = (app.clone(), Arc::clone(&auth_limiter));
        let service = hyper::service::service_fn(move |req| {
            guarded(app.clone(), Arc::clone(&limiter), client, req)
        });
        let conn = http.serve_connection(TokioIo::new(io), service);
        let mut stop = stop_rx.clone();
        tasks.spawn(async move {
            let _permit = (permit, slot);
            tokio::pin!(conn);
            let mut stopping = false;
            loop {
                tokio::select! {
                    _ = conn.as_mut() => break,
                    changed = stop.changed(), if !stopping => {
                        let _ = changed;
                        stopping = true;
                        conn.as_mut().graceful_shutdown();
                    }
                }
            }
        });
    }
    drop(listener);
    let _ = stop_tx.send(true);
    let drained = tokio::time::timeout(SHUTDOWN_GRACE, async {
        while tasks.join_next().await.is_some() {}
    })
    .await;
    if drained.is_err() {
        tasks.abort_all();
        while tasks.join_next().await.is_some() {}
    }
}

#[cfg(test)]
mod loop_tests {
    use super::*;
    use crate::clock::SystemClock;
    use crate::config::TenantConfig;
    use crate::config::{hash_token, BackendConfig, DaemonConfig, LocalConfig, LocalNodeConfig};
    use tessera_model::{Bytes, MilliCpu};

    const TOKEN: &str = "loop-secret-token";

    fn engine(dir: &std::path::Path) -> Engine {
        let text = format!(
            "store: {}\nbackend: {{kind: local, workDir: {}}}\n",
            dir.join("t.db").display(),
            dir.display()
        );
        let mut c = DaemonConfig::from_yaml(&text).unwrap();
        c.tenants = vec![TenantConfig {
            name: "alice".into(),
            token_sha256: hash_token(TOKEN),
            admin: false,
        }];
        c.backend = BackendConfig::Local(LocalConfig {
            work_dir: dir.join("runs"),
            nodes: vec![LocalNodeConfig {
                name: "box".into(),
                gpu: "A100-80GB".into(),
                gpus: 4,
                cpus: MilliCpu::from_cores(8),
                memory: Bytes::from_gib(64),
            }],
            run_as: Default::default(),
            tool_path: None,
        });
        let backend = crate::build_backend(&c.backend).unwrap();
        let mut e = Engine::open(&c, backend, Arc::new(SystemClock::new())).unwrap();
        e.start_backend_thread().unwrap();
        e
    }

    type Reply = oneshot::Receiver<Result<Response, ApiError>>;

    fn send(tx: &mpsc::Sender<Envelope>, request: Request) -> Reply {
        let (reply, rx) = oneshot::channel();
        tx.send(Envelope {
            token: Some(TOKEN.into()),
            request,
            reply,
            sent: Instant::now(),
        })
        .unwrap();
        rx
    }

    fn submit(tx: &mpsc::Sender<Envelope>, name: &str, command: &str) -> Reply {
        let body = format!(r#"{{"name":"{name}","command":["sh","-c","{command}"],"gpus":1}}"#);
        send(tx, Request::Submit { body })
    }

    fn job_id(mut r: Reply) -> i64 {
        match r.try_recv() {
            Ok(Ok(Response::Job(j))) => j.id,
            other => panic!("no job in {other:?}"),
        }
    }

    /// Issue 9: an iteration of the daemon loop commits to the store at most once, whatever
    /// it does: submissions (including those arriving while it works), a cancel, backend
    /// results (launches, finished runs), polls and a scheduling pass all share that commit,
    /// and every answer is sent only after it.
    #[test]
    fn one_store_commit_per_loop_iteration() {
        let dir = tempfile::tempdir().unwrap();
        let mut e = engine(dir.path());
        let (tx, rx) = mpsc::channel();
        // Poll at every iteration, so each one also asks the backend about running jobs.
        let mut timers = LoopTimers::new(Duration::ZERO);
        let mut step = |e: &mut Engine| {
            let before = e.store_writes();
            iteration(e, None, &rx, &mut timers);
            let after = e.store_writes();
            assert!(
                after.transactions - before.transactions <= 1,
                "{} commits in one iteration",
                after.transactions - before.transactions
            );
            after.job_rows - before.job_rows
        };
        let mut first: Vec<Reply> = (0..6)
            .map(|i| submit(&tx, &format!("a{i}"), "true"))
            .collect();
        assert_eq!(step(&mut e), 6, "six submissions, one commit");
        let ids: Vec<i64> = first.drain(..).map(job_id).collect();
        // Let the arrival coalescing pass, so that the next iteration schedules; then keep
        // going with new submissions and a cancel in the same iterations as the launches,
        // results and polls, until every job has ended.
        let deadline = Instant::now() + Duration::from_secs(60);
        let mut mixed = 0;
        let mut round = 0;
        let mut cancel: Option<(i64, Reply)> = None;
        loop {
            std::thread::sleep(Duration::from_millis(150));
            let n = if round < 6 { 3 } else { 0 };
            let subs: Vec<Reply> = (0..n)
                .map(|i| submit(&tx, &format!("r{round}-{i}"), "true"))
                .collect();
            if round == 1 {
                let id = *ids.last().unwrap();
                cancel = Some((id, send(&tx, Request::Cancel { id })));
            }
            let rows = step(&mut e);
            if n > 0 && rows > n as u64 {
                mixed += 1; // more than the submissions' rows: bookkeeping shared the commit
            }
            for r in subs {
                job_id(r);
            }
            round += 1;
            let done = e.count_by_state();
            let live: usize = done
                .iter()
                .filter(|(s, _)| !s.is_terminal())
                .map(|(_, n)| n)
                .sum();
            if round > 6 && live == 0 {
                break;
            }
            assert!(Instant::now() < deadline, "{done:?}");
        }
        assert!(mixed >= 2, "only {mixed} iterations shared their commit");
        let (_, mut reply) = cancel.unwrap();
        assert!(reply.try_recv().is_ok(), "the cancel was answered");
        // Seven iterations took requests (the first batch and six rounds of submissions).
        assert_eq!(e.metrics().engine_iterations, 7);
        assert_eq!(
            e.metrics().store_commits,
            e.store_writes().transactions,
            "the metric counts every engine commit"
        );
    }
}
