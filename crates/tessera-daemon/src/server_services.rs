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

/// `POST /v1/services`: a `kind: Workload` document with one service (parsed on the engine
/// thread, which knows the cluster's GPU catalog; services are few and the body is capped).
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
    respond(
        call(&s, &headers, Request::SubmitService { body }).await,
        true,
    )
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
