//! A scripted Jira Cloud REST API (the comment call Halyard's Jira automations make), for tests:
//! it takes basic auth with the account's e-mail and API token (401 otherwise, as Jira answers)
//! and records each comment with its issue key.

use std::sync::{Arc, Mutex};

use axum::Router;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Json, Response};
use axum::routing::post;
use serde_json::{Value, json};

struct Inner {
    expected: String,
    comments: Mutex<Vec<(String, Value)>>,
}

/// A running server.
#[derive(Clone)]
pub struct JiraServer {
    inner: Arc<Inner>,
    /// The site (`http://host:port`), as `https://<site>.atlassian.net` is.
    pub site: String,
}

impl JiraServer {
    pub async fn start(email: &str, token: &str) -> Self {
        use base64::Engine;
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind jira server");
        let site = format!("http://{}", listener.local_addr().expect("addr"));
        let expected = format!("Basic {}", base64::engine::general_purpose::STANDARD.encode(format!("{email}:{token}")));
        let inner = Arc::new(Inner { expected, comments: Mutex::new(Vec::new()) });
        let app = Router::new().route("/rest/api/2/issue/{key}/comment", post(comment)).with_state(inner.clone());
        tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        Self { inner, site }
    }

    /// The comments made: issue key and body.
    pub fn comments(&self) -> Vec<(String, Value)> {
        self.inner.comments.lock().expect("lock").clone()
    }
}

async fn comment(State(inner): State<Arc<Inner>>, Path(key): Path<String>, headers: HeaderMap, body: axum::body::Bytes) -> Response {
    if headers.get("authorization").and_then(|v| v.to_str().ok()) != Some(inner.expected.as_str()) {
        return (StatusCode::UNAUTHORIZED, Json(json!({"errorMessages": ["You are not authenticated."]}))).into_response();
    }
    let body: Value = serde_json::from_slice(&body).unwrap_or_default();
    if body["body"].as_str().is_none_or(str::is_empty) {
        return (StatusCode::BAD_REQUEST, Json(json!({"errorMessages": ["Comment body can not be empty!"]}))).into_response();
    }
    inner.comments.lock().expect("lock").push((key.clone(), body.clone()));
    (StatusCode::CREATED, Json(json!({"id": "10000", "body": body["body"]}))).into_response()
}
