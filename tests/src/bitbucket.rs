//! A scripted Bitbucket Cloud API (2.0: the calls Halyard makes), for tests: basic auth with an
//! account's name and app password (401 otherwise, as Bitbucket answers); one repository whose
//! branches are those of its bare repository; pull requests, comments (with their parent) and each
//! account's permission, recorded.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use axum::Router;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Json, Response};
use axum::routing::get;
use serde_json::{Value, json};

struct Inner {
    host: String,
    expected: String,
    full_name: String,
    git_root: PathBuf,
    permissions: Mutex<HashMap<String, String>>,
    pulls: Mutex<Vec<Value>>,
    comments: Mutex<Vec<(u64, Value)>>,
}

/// A running server.
#[derive(Clone)]
pub struct BitbucketServer {
    inner: Arc<Inner>,
    /// The API base (`http://host:port/2.0`).
    pub api_url: String,
}

impl BitbucketServer {
    /// Serves `full_name` (`workspace/repo`, the bare repository `git_root/<full_name>.git`) to
    /// `user`:`password`.
    pub async fn start(user: &str, password: &str, full_name: &str, git_root: PathBuf) -> Self {
        use base64::Engine;
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind bitbucket server");
        let host = listener.local_addr().expect("addr").to_string();
        let expected = format!("Basic {}", base64::engine::general_purpose::STANDARD.encode(format!("{user}:{password}")));
        let inner = Arc::new(Inner {
            host: host.clone(),
            expected,
            full_name: full_name.to_owned(),
            git_root,
            permissions: Mutex::new(HashMap::new()),
            pulls: Mutex::new(Vec::new()),
            comments: Mutex::new(Vec::new()),
        });
        let app = Router::new()
            .route("/2.0/repositories", get(list))
            .route("/2.0/repositories/{ws}/{repo}", get(repo))
            .route("/2.0/repositories/{ws}/{repo}/refs/branches", get(branches))
            .route("/2.0/repositories/{ws}/{repo}/pullrequests", axum::routing::post(create_pull))
            .route("/2.0/repositories/{ws}/{repo}/pullrequests/{id}", get(pull))
            .route("/2.0/repositories/{ws}/{repo}/pullrequests/{id}/comments", axum::routing::post(comment))
            .route("/2.0/repositories/{ws}/{repo}/permissions-config/users/{account}", get(permission))
            .with_state(inner.clone());
        tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        Self { inner, api_url: format!("http://{host}/2.0") }
    }

    /// Gives `account` `permission` (`read`, `write`, `admin`) on the repository.
    pub fn set_permission(&self, account: &str, permission: &str) {
        self.inner.permissions.lock().expect("lock").insert(account.to_owned(), permission.to_owned());
    }

    /// Opens pull request `source` → main (its id is returned), as a person would.
    pub fn open_pull(&self, source: &str) -> u64 {
        let mut pulls = self.inner.pulls.lock().expect("lock");
        pulls.push(json!({"title": "by hand", "source": {"branch": {"name": source}}, "destination": {"branch": {"name": "main"}}}));
        pulls.len() as u64
    }

    /// The pull requests opened (the request bodies).
    pub fn pulls(&self) -> Vec<Value> {
        self.inner.pulls.lock().expect("lock").clone()
    }

    /// The comments made: pull request id and body.
    pub fn comments(&self) -> Vec<(u64, Value)> {
        self.inner.comments.lock().expect("lock").clone()
    }
}

fn admit(inner: &Inner, headers: &HeaderMap) -> Result<(), Box<Response>> {
    if headers.get("authorization").and_then(|v| v.to_str().ok()) != Some(inner.expected.as_str()) {
        let e = json!({"type": "error", "error": {"message": "Unauthorized"}});
        return Err(Box::new((StatusCode::UNAUTHORIZED, Json(e)).into_response()));
    }
    Ok(())
}

fn repo_json(inner: &Inner) -> Value {
    json!({"full_name": inner.full_name, "is_private": true, "description": "the app", "mainbranch": {"name": "main"},
           "links": {"clone": [{"name": "https", "href": format!("http://{}/{}.git", inner.host, inner.full_name)}]}})
}

macro_rules! admitted {
    ($inner:expr, $headers:expr) => {
        if let Err(r) = admit(&$inner, &$headers) {
            return *r;
        }
    };
}

async fn list(State(inner): State<Arc<Inner>>, headers: HeaderMap) -> Response {
    admitted!(inner, headers);
    Json(json!({"values": [repo_json(&inner)], "pagelen": 50})).into_response()
}

async fn repo(State(inner): State<Arc<Inner>>, headers: HeaderMap) -> Response {
    admitted!(inner, headers);
    Json(repo_json(&inner)).into_response()
}

async fn branches(State(inner): State<Arc<Inner>>, headers: HeaderMap) -> Response {
    admitted!(inner, headers);
    let out = std::process::Command::new("git")
        .args(["for-each-ref", "--format=%(refname:short)", "refs/heads"])
        .env("GIT_DIR", inner.git_root.join(format!("{}.git", inner.full_name)))
        .output()
        .expect("git for-each-ref");
    let values: Vec<Value> = String::from_utf8_lossy(&out.stdout).lines().map(|b| json!({"name": b, "type": "branch"})).collect();
    Json(json!({"values": values})).into_response()
}

async fn create_pull(State(inner): State<Arc<Inner>>, headers: HeaderMap, body: axum::body::Bytes) -> Response {
    admitted!(inner, headers);
    let pr: Value = serde_json::from_slice(&body).unwrap_or_default();
    if pr["title"].as_str().is_none_or(str::is_empty) || pr["source"]["branch"]["name"].as_str().is_none() {
        return (
            StatusCode::BAD_REQUEST,
            Json(json!({"type": "error", "error": {"message": "title and source.branch.name are required"}})),
        )
            .into_response();
    }
    let mut pulls = inner.pulls.lock().expect("lock");
    pulls.push(pr);
    let id = pulls.len();
    let html = format!("http://{}/{}/pull-requests/{id}", inner.host, inner.full_name);
    (StatusCode::CREATED, Json(json!({"id": id, "links": {"html": {"href": html}}}))).into_response()
}

async fn pull(State(inner): State<Arc<Inner>>, Path((_, _, id)): Path<(String, String, usize)>, headers: HeaderMap) -> Response {
    admitted!(inner, headers);
    match inner.pulls.lock().expect("lock").get(id.wrapping_sub(1)) {
        Some(pr) => Json(json!({"id": id, "title": pr["title"], "source": pr["source"], "destination": pr["destination"]})).into_response(),
        None => (StatusCode::NOT_FOUND, Json(json!({"type": "error"}))).into_response(),
    }
}

async fn comment(
    State(inner): State<Arc<Inner>>,
    Path((_, _, id)): Path<(String, String, u64)>,
    headers: HeaderMap,
    body: axum::body::Bytes,
) -> Response {
    admitted!(inner, headers);
    let c: Value = serde_json::from_slice(&body).unwrap_or_default();
    if c["content"]["raw"].as_str().is_none_or(str::is_empty) {
        return (StatusCode::BAD_REQUEST, Json(json!({"type": "error", "error": {"message": "content.raw is required"}}))).into_response();
    }
    let mut comments = inner.comments.lock().expect("lock");
    comments.push((id, c));
    (StatusCode::CREATED, Json(json!({"id": 500 + comments.len()}))).into_response()
}

async fn permission(
    State(inner): State<Arc<Inner>>,
    Path((_, _, account)): Path<(String, String, String)>,
    headers: HeaderMap,
) -> Response {
    admitted!(inner, headers);
    match inner.permissions.lock().expect("lock").get(&account) {
        Some(p) => Json(json!({"type": "repository_user_permission", "permission": p, "user": {"account_id": account}})).into_response(),
        None => (StatusCode::NOT_FOUND, Json(json!({"type": "error", "error": {"message": "No permission"}}))).into_response(),
    }
}
