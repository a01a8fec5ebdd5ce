//! A scripted GitHub REST server (the part of the API Halyard calls), for tests: it serves one
//! user's repositories under `/api/v3` to requests carrying `Authorization: Bearer <token>`,
//! refuses others with 401 as GitHub does, and records what it was asked.

use std::sync::{Arc, Mutex};

use axum::Router;
use axum::extract::{Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Json, Response};
use axum::routing::get;
use serde_json::{Value, json};

struct Inner {
    token: String,
    repos: Vec<Value>,
    /// Each request: path and query, and the `Authorization` header.
    seen: Mutex<Vec<(String, Option<String>)>>,
}

/// A running server.
#[derive(Clone)]
pub struct GithubServer {
    inner: Arc<Inner>,
    /// `host:port`.
    pub host: String,
    /// The API base (`http://host:port/api/v3`), as a GitHub Enterprise server has it.
    pub api_url: String,
}

impl GithubServer {
    /// Serves `names` (`owner/name`, the first ones private) to `token`.
    pub async fn start(token: &str, names: &[&str]) -> Self {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind github server");
        let host = listener.local_addr().expect("addr").to_string();
        let repos = names
            .iter()
            .enumerate()
            .map(|(i, n)| {
                json!({
                    "id": i + 1, "full_name": n, "name": n.split('/').next_back(), "private": i == 0,
                    "clone_url": format!("http://{host}/{n}.git"), "default_branch": "main",
                    "description": format!("the {n} repository"), "updated_at": "2026-11-01T00:00:00Z",
                })
            })
            .collect();
        let inner = Arc::new(Inner { token: token.to_owned(), repos, seen: Mutex::new(Vec::new()) });
        let app = Router::new().route("/api/v3/user/repos", get(user_repos)).with_state(inner.clone());
        tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        Self { inner, api_url: format!("http://{host}/api/v3"), host }
    }

    /// What was asked: path with query, and the `Authorization` header.
    pub fn seen(&self) -> Vec<(String, Option<String>)> {
        self.inner.seen.lock().expect("lock").clone()
    }
}

async fn user_repos(State(inner): State<Arc<Inner>>, Query(query): Query<Vec<(String, String)>>, headers: HeaderMap) -> Response {
    let auth = headers.get("authorization").and_then(|v| v.to_str().ok()).map(str::to_owned);
    let query: Vec<String> = query.iter().map(|(k, v)| format!("{k}={v}")).collect();
    inner.seen.lock().expect("lock").push((format!("/api/v3/user/repos?{}", query.join("&")), auth.clone()));
    if auth.as_deref() != Some(&format!("Bearer {}", inner.token)) {
        let body = json!({"message": "Bad credentials", "documentation_url": "https://docs.github.com/rest", "status": "401"});
        return (StatusCode::UNAUTHORIZED, Json(body)).into_response();
    }
    if headers.get("user-agent").is_none() {
        // GitHub refuses requests without a User-Agent.
        return (StatusCode::FORBIDDEN, Json(json!({"message": "Request forbidden by administrative rules."}))).into_response();
    }
    Json(Value::Array(inner.repos.clone())).into_response()
}
