//! The read-only web dashboard: a static page (HTML, CSS and vanilla JavaScript compiled into
//! the binary) that reads the JSON API with the visitor's own bearer token.
//!
//! Pages: `/ui/nodes` (each GPU's state: whole, MIG layout, quotas and who holds them),
//! `/ui/queue` (pending jobs in policy order with their reasons), `/ui/services` (instances
//! and SLO attainment) and `/ui/events` (recent events); `/ui/` is the nodes page.
//!
//! Authentication: the page itself holds no data and needs no token; the script asks for a
//! tenant token (a login form, or `#token=…` in the address, which is never sent to the
//! server and is removed from the address bar at once), keeps it in the tab's
//! `sessionStorage`, and sends it as `Authorization: Bearer` to the API, which checks it as for
//! any client (a tenant sees its own jobs and services; an admin every one). No cookie is
//! set, so no other site can make the browser call the API with it.
//!
//! Escaping: the script builds the page with DOM nodes and `textContent` only (no
//! `innerHTML`), so job names, reasons and messages are shown as text whatever they hold; the
//! Content-Security-Policy allows scripts from this server only (no inline script), a second
//! line of defence.

use axum::extract::Path;
use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response as HttpResponse};
use axum::routing::get;
use axum::Router;

use crate::server::AppState;

const PAGE: &str = include_str!("web/index.html");
const SCRIPT: &str = include_str!("web/app.js");
const STYLE: &str = include_str!("web/style.css");

/// The dashboard's pages (each the same document; the script renders the one named).
pub(crate) const PAGES: [&str; 4] = ["nodes", "queue", "services", "events"];

const CSP: &str = "default-src 'none'; script-src 'self'; style-src 'self'; \
                   connect-src 'self'; img-src 'self' data:; form-action 'self'; \
                   base-uri 'none'; frame-ancestors 'none'";

fn asset(content_type: &'static str, body: &'static str) -> HttpResponse {
    let mut r = (StatusCode::OK, body).into_response();
    let h = r.headers_mut();
    h.insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    h.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(CSP),
    );
    h.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    h.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("no-referrer"),
    );
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    r
}

async fn page() -> HttpResponse {
    asset("text/html; charset=utf-8", PAGE)
}

async fn named_page(Path(name): Path<String>) -> HttpResponse {
    if PAGES.contains(&name.as_str()) {
        page().await
    } else {
        crate::server::error_response(&crate::error::ApiError::not_found("no such page"))
    }
}

async fn script() -> HttpResponse {
    asset("text/javascript; charset=utf-8", SCRIPT)
}

async fn style() -> HttpResponse {
    asset("text/css; charset=utf-8", STYLE)
}

/// The dashboard's routes, merged into the API's router.
pub(crate) fn routes() -> Router<AppState> {
    Router::new()
        .route("/ui", get(page))
        .route("/ui/", get(page))
        .route("/ui/assets/app.js", get(script))
        .route("/ui/assets/style.css", get(style))
        .route("/ui/{page}", get(named_page))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The script never turns data into markup: every text goes through `textContent`.
    #[test]
    fn the_script_builds_no_markup_from_strings() {
        for banned in [
            "innerHTML",
            "outerHTML",
            "insertAdjacentHTML",
            "document.write",
            "eval(",
        ] {
            assert!(!SCRIPT.contains(banned), "app.js uses {banned}");
        }
        assert!(
            !PAGE.contains("<script>"),
            "no inline script (the CSP forbids it)"
        );
        assert!(PAGE.contains("/ui/assets/app.js"));
    }
}
