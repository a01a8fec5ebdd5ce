//! A scripted Linear GraphQL API (the `commentCreate` mutation Halyard's Linear automations
//! make), for tests: it takes the API key as Linear does (`Authorization: <key>`; otherwise a
//! GraphQL error, as Linear answers) and records each comment's input; `user(id:)` answers whether
//! a user is active and which teams they are in.

use std::sync::{Arc, Mutex};

use axum::Router;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Json, Response};
use axum::routing::post;
use serde_json::{Value, json};

struct Inner {
    key: String,
    comments: Mutex<Vec<Value>>,
    /// User id and team key of each membership.
    members: Mutex<Vec<(String, String)>>,
}

/// A running server.
#[derive(Clone)]
pub struct LinearServer {
    inner: Arc<Inner>,
    /// The GraphQL endpoint (`http://host:port/graphql`).
    pub api_url: String,
}

impl LinearServer {
    pub async fn start(key: &str) -> Self {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind linear server");
        let api_url = format!("http://{}/graphql", listener.local_addr().expect("addr"));
        let inner = Arc::new(Inner { key: key.to_owned(), comments: Mutex::new(Vec::new()), members: Mutex::new(Vec::new()) });
        let app = Router::new().route("/graphql", post(graphql)).with_state(inner.clone());
        tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        Self { inner, api_url }
    }

    /// Makes user `id` an active member of the team keyed `team`.
    pub fn add_member(&self, id: &str, team: &str) {
        self.inner.members.lock().expect("lock").push((id.to_owned(), team.to_owned()));
    }

    /// Each `commentCreate` input taken (`{issueId, body}`).
    pub fn comments(&self) -> Vec<Value> {
        self.inner.comments.lock().expect("lock").clone()
    }
}

async fn graphql(State(inner): State<Arc<Inner>>, headers: HeaderMap, body: axum::body::Bytes) -> Response {
    if headers.get("authorization").and_then(|v| v.to_str().ok()) != Some(inner.key.as_str()) {
        let e =
            json!({"errors": [{"message": "Authentication required, not authenticated", "extensions": {"code": "AUTHENTICATION_ERROR"}}]});
        return (StatusCode::BAD_REQUEST, Json(e)).into_response();
    }
    let request: Value = serde_json::from_slice(&body).unwrap_or_default();
    let query = request["query"].as_str().unwrap_or_default();
    if query.contains("user(id:") {
        let Some(id) = request["variables"]["id"].as_str() else {
            return (
                StatusCode::BAD_REQUEST,
                Json(json!({"errors": [{"message": "Variable \"$id\" of required type \"String!\" was not provided."}]})),
            )
                .into_response();
        };
        let teams: Vec<Value> =
            inner.members.lock().expect("lock").iter().filter(|(u, _)| u == id).map(|(_, t)| json!({"key": t})).collect();
        if teams.is_empty() {
            return Json(json!({"data": null, "errors": [{"message": "Entity not found: User", "extensions": {"code": "INVALID_INPUT"}}]}))
                .into_response();
        }
        return Json(json!({"data": {"user": {"active": true, "teams": {"nodes": teams}}}})).into_response();
    }
    let input = &request["variables"]["input"];
    if !query.contains("commentCreate") || input["issueId"].as_str().is_none() || input["body"].as_str().is_none_or(str::is_empty) {
        return (StatusCode::BAD_REQUEST, Json(json!({"errors": [{"message": "Argument Validation Error"}]}))).into_response();
    }
    inner.comments.lock().expect("lock").push(input.clone());
    Json(json!({"data": {"commentCreate": {"success": true}}})).into_response()
}
