//! The web workspace's files, served at `/` from the built app (`web/dist`, or `web_dir` in
//! the configuration): hashed assets under `/assets/` cached for a year, everything else
//! revalidated, and any other path answered with `index.html` (the app routes in the browser).
//! Without a build, `/` says how to make one; the API works either way.
//!
//! Written out rather than taken from tower-http's `ServeDir`: a built single-page app needs
//! only these few rules, and the handful of crates that feature pulls in would cost more build
//! time than the code below.

use std::path::{Component, Path, PathBuf};

use axum::body::Body;
use axum::extract::State;
use axum::http::{HeaderValue, StatusCode, Uri, header};
use axum::response::{Html, IntoResponse, Response};

use crate::http::error::ApiError;
use crate::state::AppState;

/// What `/` says when there is no build.
const NOT_BUILT: &str = "<!doctype html><meta charset=utf-8><title>Halyard</title>\
<h1>Halyard is running</h1><p>The web workspace is not built. Build it with \
<code>bash infra/build-web.sh</code> (Node 20+ and npm; <code>infra/up.sh</code> does it when they are installed), \
then start Halyard again. The API is at <a href=\"/api/v1/openapi.json\">/api/v1</a>.</p>";

fn content_type(path: &Path) -> &'static str {
    match path.extension().and_then(|e| e.to_str()).unwrap_or_default() {
        "html" => "text/html; charset=utf-8",
        "js" | "mjs" => "text/javascript; charset=utf-8",
        "css" => "text/css; charset=utf-8",
        "json" | "map" => "application/json",
        "svg" => "image/svg+xml",
        "png" => "image/png",
        "ico" => "image/x-icon",
        "woff2" => "font/woff2",
        "woff" => "font/woff",
        "wasm" => "application/wasm",
        "txt" => "text/plain; charset=utf-8",
        _ => "application/octet-stream",
    }
}

/// The file under `root` that `uri` names, if it is one (no `..`, no hidden tricks).
fn file_for(root: &Path, uri: &Uri) -> Option<PathBuf> {
    let rel = Path::new(uri.path().trim_start_matches('/'));
    if !rel.components().all(|c| matches!(c, Component::Normal(_))) {
        return None;
    }
    let path = root.join(rel);
    path.is_file().then_some(path)
}

/// Serves the app; `/api/...` paths that no route took are the API's 404.
pub async fn serve(State(state): State<AppState>, uri: Uri) -> Response {
    if uri.path().starts_with("/api/") {
        return ApiError::not_found("route").into_response();
    }
    let Some(root) = state.config.web_dir.as_deref() else {
        return (StatusCode::OK, Html(NOT_BUILT)).into_response();
    };
    let (path, immutable) = match file_for(root, &uri) {
        Some(p) => {
            let immutable = uri.path().starts_with("/assets/");
            (p, immutable)
        }
        None => (root.join("index.html"), false),
    };
    let Ok(bytes) = tokio::fs::read(&path).await else {
        return (StatusCode::OK, Html(NOT_BUILT)).into_response();
    };
    let cache = if immutable { "public, max-age=31536000, immutable" } else { "no-cache" };
    let mut response = Response::new(Body::from(bytes));
    let headers = response.headers_mut();
    headers.insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type(&path)));
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static(cache));
    headers.insert(header::X_CONTENT_TYPE_OPTIONS, HeaderValue::from_static("nosniff"));
    headers.insert("referrer-policy", HeaderValue::from_static("same-origin"));
    if let Ok(csp) = HeaderValue::from_str(&format!("{CSP}; frame-src {}", frames(&state))) {
        headers.insert(header::CONTENT_SECURITY_POLICY, csp);
    }
    headers.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    response
}

/// What the page may load and talk to: its own scripts and the API, nothing else. The agent's
/// words are shown in it, and the agent is assumed hostile: should text ever slip through as
/// markup, it can neither run a script nor send anything to another host (an image URL would
/// be a way out of a sandbox with no egress). Styles may be inline (the terminal sets its own).
/// What it may frame is [`frames`].
const CSP: &str = "default-src 'self'; script-src 'self'; style-src 'self' 'unsafe-inline'; img-src 'self' data:; \
                   connect-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'self'; object-src 'none'";

/// The origins the page may show in a frame: the apps proxy's hosts, where VS Code is served
/// (each sandbox's on a host of its own), and nothing when there is no proxy.
fn frames(state: &AppState) -> String {
    if state.config.apps_url.is_empty() {
        return match state.apps_port {
            Some(port) => format!("http://*.localhost:{port}"),
            None => "'none'".into(),
        };
    }
    let (scheme, host) = state.config.apps_url.split_once("://").unwrap_or(("http", state.config.apps_url.as_str()));
    format!("{scheme}://*.{}", host.trim_end_matches('/'))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_plain_paths_under_the_root_are_files() {
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        std::fs::create_dir(dir.path().join("assets")).unwrap_or_default();
        std::fs::write(dir.path().join("assets/app-1a2b.js"), "x").unwrap_or_default();
        let uri = |s: &str| s.parse::<Uri>().unwrap_or_default();
        assert!(file_for(dir.path(), &uri("/assets/app-1a2b.js")).is_some());
        assert!(file_for(dir.path(), &uri("/assets/../assets/app-1a2b.js")).is_none());
        assert!(file_for(dir.path(), &uri("/conversations/123")).is_none(), "an app route, not a file");
        assert!(file_for(dir.path(), &uri("/")).is_none(), "the root is index.html's");
        assert_eq!(content_type(Path::new("a/b.css")), "text/css; charset=utf-8");
    }
}
