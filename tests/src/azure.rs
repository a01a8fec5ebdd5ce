//! A scripted Azure DevOps Services REST API (7.1: what Halyard calls), for tests: a personal
//! access token as basic auth (401 otherwise); one repository, `org/project/repo`, whose branches
//! are those of its bare repository; pull requests, thread replies and work item comments,
//! recorded with their paths; identities (found by id or e-mail) and the repository's access
//! control list, which says who may contribute.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use axum::Router;
use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, StatusCode, Uri};
use axum::response::{IntoResponse, Json, Response};
use axum::routing::{get, post};
use serde_json::{Value, json};

struct Inner {
    expected: String,
    bare: PathBuf,
    pulls: Mutex<Vec<Value>>,
    /// Path and body of each comment (thread, reply, work item).
    comments: Mutex<Vec<(String, Value)>>,
    /// Identity id, e-mail, descriptor, and whether it may contribute to the repository.
    identities: Mutex<Vec<(String, String, String, bool)>>,
}

/// The Git repositories security namespace, and the repository's token in it.
const GIT_NAMESPACE: &str = "2e9eb7ed-3c0a-47d4-87c1-0ffdd275fd87";
const REPO_TOKEN: &str = "repoV2/p-1/r-1";

/// A running server.
#[derive(Clone)]
pub struct AzureServer {
    inner: Arc<Inner>,
    /// The organization's URL (`http://host:port/<org>`), as an `api_url`.
    pub org_url: String,
}

impl AzureServer {
    /// Serves `org/project/repo` (its bare repository at `bare`) to the token `pat`.
    pub async fn start(pat: &str, org: &str, bare: PathBuf) -> Self {
        use base64::Engine;
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind azure server");
        let host = listener.local_addr().expect("addr").to_string();
        let expected = format!("Basic {}", base64::engine::general_purpose::STANDARD.encode(format!("pat:{pat}")));
        let inner = Arc::new(Inner {
            expected,
            bare,
            pulls: Mutex::new(Vec::new()),
            comments: Mutex::new(Vec::new()),
            identities: Mutex::new(Vec::new()),
        });
        let repo = "/{org}/{project}/_apis/git/repositories/{repo}";
        let app = Router::new()
            .route("/{org}/_apis/git/repositories", get(list))
            .route("/{org}/_apis/identities", get(identities))
            .route("/{org}/_apis/accesscontrollists/{namespace}", get(acl))
            .route(repo, get(one))
            .route(&format!("{repo}/refs"), get(refs))
            .route(&format!("{repo}/pullrequests"), post(create_pull))
            .route(&format!("{repo}/pullrequests/{{id}}"), get(pull))
            .route(&format!("{repo}/pullRequests/{{id}}/threads"), post(comment))
            .route(&format!("{repo}/pullRequests/{{id}}/threads/{{thread}}/comments"), post(comment))
            .route("/{org}/{project}/_apis/wit/workItems/{id}/comments", post(comment))
            .with_state(inner.clone());
        tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        Self { inner, org_url: format!("http://{host}/{org}") }
    }

    /// Opens pull request `source` → main as a person would; its id.
    pub fn open_pull(&self, source: &str) -> u64 {
        let mut pulls = self.inner.pulls.lock().expect("lock");
        pulls.push(json!({"sourceRefName": format!("refs/heads/{source}"), "targetRefName": "refs/heads/main", "title": "by hand"}));
        pulls.len() as u64
    }

    /// A person in the organization (`id` a GUID as Azure DevOps gives), who may contribute to
    /// the repository or only read it.
    pub fn add_identity(&self, id: &str, email: &str, contributor: bool) {
        let descriptor = format!("Microsoft.IdentityModel.Claims.ClaimsIdentity;acme\\{email}");
        self.inner.identities.lock().expect("lock").push((id.to_owned(), email.to_owned(), descriptor, contributor));
    }

    /// The pull requests (request bodies).
    pub fn pulls(&self) -> Vec<Value> {
        self.inner.pulls.lock().expect("lock").clone()
    }

    /// Each comment's path and body.
    pub fn comments(&self) -> Vec<(String, Value)> {
        self.inner.comments.lock().expect("lock").clone()
    }
}

macro_rules! admitted {
    ($inner:expr, $headers:expr) => {
        if $headers.get("authorization").and_then(|v| v.to_str().ok()) != Some($inner.expected.as_str()) {
            return (StatusCode::UNAUTHORIZED, "Unauthorized").into_response();
        }
    };
}

async fn list(State(inner): State<Arc<Inner>>, Path(org): Path<String>, headers: HeaderMap) -> Response {
    admitted!(inner, headers);
    Json(json!({"count": 1, "value": [{"id": "r-1", "name": "site", "project": {"name": "web"}, "defaultBranch": "refs/heads/main",
        "remoteUrl": format!("https://dev.azure.com/{org}/web/_git/site")}]}))
    .into_response()
}

async fn one(State(inner): State<Arc<Inner>>, headers: HeaderMap) -> Response {
    admitted!(inner, headers);
    Json(json!({"id": "r-1", "name": "site", "defaultBranch": "refs/heads/main", "project": {"id": "p-1", "name": "web"}})).into_response()
}

async fn refs(State(inner): State<Arc<Inner>>, headers: HeaderMap) -> Response {
    admitted!(inner, headers);
    let out = std::process::Command::new("git")
        .args(["for-each-ref", "--format=%(refname)", "refs/heads"])
        .env("GIT_DIR", &inner.bare)
        .output()
        .expect("git for-each-ref");
    let value: Vec<Value> = String::from_utf8_lossy(&out.stdout).lines().map(|r| json!({"name": r, "objectId": "0"})).collect();
    Json(json!({"count": value.len(), "value": value})).into_response()
}

async fn create_pull(State(inner): State<Arc<Inner>>, headers: HeaderMap, body: axum::body::Bytes) -> Response {
    admitted!(inner, headers);
    let pr: Value = serde_json::from_slice(&body).unwrap_or_default();
    if pr["sourceRefName"].as_str().is_none_or(|r| !r.starts_with("refs/heads/")) || pr["title"].as_str().is_none_or(str::is_empty) {
        return (StatusCode::BAD_REQUEST, Json(json!({"message": "sourceRefName and title are required"}))).into_response();
    }
    let mut pulls = inner.pulls.lock().expect("lock");
    pulls.push(pr);
    (StatusCode::CREATED, Json(json!({"pullRequestId": pulls.len(), "status": "active"}))).into_response()
}

async fn pull(State(inner): State<Arc<Inner>>, Path((_, _, _, id)): Path<(String, String, String, usize)>, headers: HeaderMap) -> Response {
    admitted!(inner, headers);
    match inner.pulls.lock().expect("lock").get(id.wrapping_sub(1)) {
        Some(pr) => Json(json!({"pullRequestId": id, "sourceRefName": pr["sourceRefName"]})).into_response(),
        None => (StatusCode::NOT_FOUND, "no such pull request").into_response(),
    }
}

async fn comment(State(inner): State<Arc<Inner>>, uri: Uri, headers: HeaderMap, body: axum::body::Bytes) -> Response {
    admitted!(inner, headers);
    if !uri.query().unwrap_or_default().contains("api-version=") {
        return (StatusCode::BAD_REQUEST, Json(json!({"message": "No api-version was supplied"}))).into_response();
    }
    let body: Value = serde_json::from_slice(&body).unwrap_or_default();
    let mut comments = inner.comments.lock().expect("lock");
    comments.push((uri.path().to_owned(), body));
    (StatusCode::OK, Json(json!({"id": 100 + comments.len()}))).into_response()
}

/// Identities by `identityIds` or by e-mail (`searchFilter=General&filterValue=`).
async fn identities(State(inner): State<Arc<Inner>>, Query(q): Query<HashMap<String, String>>, headers: HeaderMap) -> Response {
    admitted!(inner, headers);
    let found: Vec<Value> = inner
        .identities
        .lock()
        .expect("lock")
        .iter()
        .filter(|(id, email, _, _)| match (q.get("identityIds"), q.get("searchFilter").map(String::as_str), q.get("filterValue")) {
            (Some(ids), _, _) => ids.split(',').any(|i| i == id),
            (None, Some("General"), Some(v)) => v.eq_ignore_ascii_case(email),
            _ => false,
        })
        .map(|(id, email, descriptor, _)| json!({"id": id, "descriptor": descriptor, "providerDisplayName": email, "isActive": true}))
        .collect();
    Json(json!({"count": found.len(), "value": found})).into_response()
}

/// The repository's access control list for the asked descriptors, with each one's effective
/// permissions (Read 2; GenericContribute 4 for contributors).
async fn acl(
    State(inner): State<Arc<Inner>>,
    Path((_, namespace)): Path<(String, String)>,
    Query(q): Query<HashMap<String, String>>,
    headers: HeaderMap,
) -> Response {
    admitted!(inner, headers);
    if namespace != GIT_NAMESPACE || q.get("token").map(String::as_str) != Some(REPO_TOKEN) {
        return Json(json!({"count": 0, "value": []})).into_response();
    }
    let asked: Vec<&str> = q.get("descriptors").map(|d| d.split(',').collect()).unwrap_or_default();
    let mut aces = serde_json::Map::new();
    for (_, _, descriptor, contributor) in inner.identities.lock().expect("lock").iter() {
        if asked.contains(&descriptor.as_str()) {
            let effective = if *contributor { 2 | 4 | 16 } else { 2 };
            aces.insert(
                descriptor.clone(),
                json!({"descriptor": descriptor, "allow": 0, "deny": 0,
                "extendedInfo": {"effectiveAllow": effective, "effectiveDeny": 0, "inheritedAllow": effective}}),
            );
        }
    }
    Json(json!({"count": 1, "value": [{"inheritPermissions": true, "token": REPO_TOKEN, "acesDictionary": aces}]})).into_response()
}
