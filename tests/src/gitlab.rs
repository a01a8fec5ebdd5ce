//! A scripted GitLab REST server (v4, the part Halyard's GitLab automations call), for tests:
//! requests need `PRIVATE-TOKEN: <token>` (401 otherwise, as GitLab answers); project members
//! and merge requests are what the test sets; award emoji and notes are recorded with the path
//! they were made on, so a test sees which discussion a reply went to.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use axum::Router;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode, Uri};
use axum::response::{IntoResponse, Json, Response};
use axum::routing::{get, post};
use serde_json::{Value, json};

#[derive(Default)]
struct Inner {
    token: String,
    /// Member id to access level.
    members: Mutex<HashMap<u64, u64>>,
    /// Merge request iid to source branch.
    merge_requests: Mutex<HashMap<u64, String>>,
    /// Award emoji made: path and body.
    emoji: Mutex<Vec<(String, Value)>>,
    /// Notes made: path and body.
    notes: Mutex<Vec<(String, Value)>>,
}

/// A running server.
#[derive(Clone)]
pub struct GitlabServer {
    inner: Arc<Inner>,
    /// The API base (`http://host:port/api/v4`).
    pub api_url: String,
}

impl GitlabServer {
    pub async fn start(token: &str) -> Self {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind gitlab server");
        let host = listener.local_addr().expect("addr").to_string();
        let inner = Arc::new(Inner { token: token.to_owned(), ..Default::default() });
        let app = Router::new()
            .route("/api/v4/projects/{project}/members/all/{user}", get(member))
            .route("/api/v4/projects/{project}/merge_requests/{iid}", get(merge_request))
            .route("/api/v4/projects/{project}/{noun}/{iid}/award_emoji", post(award))
            .route("/api/v4/projects/{project}/{noun}/{iid}/notes/{note}/award_emoji", post(award))
            .route("/api/v4/projects/{project}/{noun}/{iid}/notes", post(note))
            .route("/api/v4/projects/{project}/{noun}/{iid}/discussions/{discussion}/notes", post(note))
            .with_state(inner.clone());
        tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        Self { inner, api_url: format!("http://{host}/api/v4") }
    }

    /// Makes user `id` a member with `access_level` (30 Developer, 20 Reporter...).
    pub fn add_member(&self, id: u64, access_level: u64) {
        self.inner.members.lock().expect("lock").insert(id, access_level);
    }

    /// Makes merge request `iid` exist, from `source_branch`.
    pub fn open_merge_request(&self, iid: u64, source_branch: &str) {
        self.inner.merge_requests.lock().expect("lock").insert(iid, source_branch.to_owned());
    }

    /// The award emoji made: path and body.
    pub fn emoji(&self) -> Vec<(String, Value)> {
        self.inner.emoji.lock().expect("lock").clone()
    }

    /// The notes made: path and body.
    pub fn notes(&self) -> Vec<(String, Value)> {
        self.inner.notes.lock().expect("lock").clone()
    }
}

fn admit(inner: &Inner, headers: &HeaderMap) -> Result<(), Box<Response>> {
    if headers.get("private-token").and_then(|v| v.to_str().ok()) != Some(inner.token.as_str()) {
        return Err(Box::new((StatusCode::UNAUTHORIZED, Json(json!({"message": "401 Unauthorized"}))).into_response()));
    }
    Ok(())
}

fn not_found(what: &str) -> Response {
    (StatusCode::NOT_FOUND, Json(json!({"message": format!("404 {what} Not Found")}))).into_response()
}

async fn member(State(inner): State<Arc<Inner>>, Path((_, user)): Path<(String, u64)>, headers: HeaderMap) -> Response {
    if let Err(r) = admit(&inner, &headers) {
        return *r;
    }
    match inner.members.lock().expect("lock").get(&user) {
        Some(level) => Json(json!({"id": user, "username": format!("user{user}"), "access_level": level})).into_response(),
        None => not_found("Member"),
    }
}

async fn merge_request(State(inner): State<Arc<Inner>>, Path((_, iid)): Path<(String, u64)>, headers: HeaderMap) -> Response {
    if let Err(r) = admit(&inner, &headers) {
        return *r;
    }
    match inner.merge_requests.lock().expect("lock").get(&iid) {
        Some(branch) => Json(json!({"iid": iid, "source_branch": branch, "target_branch": "main"})).into_response(),
        None => not_found("Merge Request"),
    }
}

async fn award(State(inner): State<Arc<Inner>>, uri: Uri, headers: HeaderMap, body: axum::body::Bytes) -> Response {
    if let Err(r) = admit(&inner, &headers) {
        return *r;
    }
    let body: Value = serde_json::from_slice(&body).unwrap_or_default();
    if body["name"].as_str().is_none_or(str::is_empty) {
        return (StatusCode::BAD_REQUEST, Json(json!({"message": "name is missing"}))).into_response();
    }
    inner.emoji.lock().expect("lock").push((uri.path().to_owned(), body.clone()));
    (StatusCode::CREATED, Json(json!({"id": 1, "name": body["name"]}))).into_response()
}

async fn note(State(inner): State<Arc<Inner>>, uri: Uri, headers: HeaderMap, body: axum::body::Bytes) -> Response {
    if let Err(r) = admit(&inner, &headers) {
        return *r;
    }
    let body: Value = serde_json::from_slice(&body).unwrap_or_default();
    if body["body"].as_str().is_none_or(str::is_empty) {
        return (StatusCode::BAD_REQUEST, Json(json!({"message": "body is missing"}))).into_response();
    }
    let mut notes = inner.notes.lock().expect("lock");
    notes.push((uri.path().to_owned(), body.clone()));
    (StatusCode::CREATED, Json(json!({"id": 500 + notes.len(), "body": body["body"]}))).into_response()
}
