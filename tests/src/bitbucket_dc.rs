//! A scripted Bitbucket Data Center REST API (1.0: the calls Halyard makes), for tests: an HTTP
//! access token as a bearer token or with a user name as basic auth (401 otherwise, with Data
//! Center's error shape); one repository `PROJECT/slug`, whose branches are those of its bare
//! repository (`<git_root>/scm/PROJECT/slug.git`, where git's own http-backend serves it); pull
//! requests and comments (with their parent) recorded; the users who may write to it, found
//! through `/users?permission.1=REPO_WRITE...` as Data Center finds them.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use axum::Router;
use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Json, Response};
use axum::routing::{get, post};
use serde_json::{Value, json};

struct Inner {
    /// Where git serves the repository (`host:port`).
    git_host: String,
    api_host: String,
    /// Accepted `Authorization` values.
    accepted: Vec<String>,
    project: String,
    slug: String,
    git_root: PathBuf,
    writers: Mutex<Vec<String>>,
    pulls: Mutex<Vec<Value>>,
    comments: Mutex<Vec<(u64, Value)>>,
}

/// A running server.
#[derive(Clone)]
pub struct BitbucketDcServer {
    inner: Arc<Inner>,
    /// The API base (`http://host:port/rest/api/1.0`).
    pub api_url: String,
}

type Repo = Path<(String, String)>;

impl BitbucketDcServer {
    /// Serves `PROJECT/slug` to `token` (bearer, or basic with `user`); its clone URL names
    /// `git_host`.
    pub async fn start(user: &str, token: &str, full_name: &str, git_root: PathBuf, git_host: &str) -> Self {
        use base64::Engine;
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind bitbucket dc server");
        let api_host = listener.local_addr().expect("addr").to_string();
        let basic = format!("Basic {}", base64::engine::general_purpose::STANDARD.encode(format!("{user}:{token}")));
        let (project, slug) = full_name.split_once('/').expect("PROJECT/slug");
        let inner = Arc::new(Inner {
            git_host: git_host.to_owned(),
            api_host: api_host.clone(),
            accepted: vec![format!("Bearer {token}"), basic],
            project: project.to_owned(),
            slug: slug.to_owned(),
            git_root,
            writers: Mutex::new(Vec::new()),
            pulls: Mutex::new(Vec::new()),
            comments: Mutex::new(Vec::new()),
        });
        let repo = "/rest/api/1.0/projects/{project}/repos/{slug}";
        let app = Router::new()
            .route("/rest/api/1.0/repos", get(list))
            .route("/rest/api/1.0/users", get(users))
            .route(&format!("{repo}/default-branch"), get(default_branch))
            .route(&format!("{repo}/branches"), get(branches))
            .route(&format!("{repo}/pull-requests"), post(create_pull))
            .route(&format!("{repo}/pull-requests/{{id}}"), get(pull))
            .route(&format!("{repo}/pull-requests/{{id}}/comments"), post(comment))
            .with_state(inner.clone());
        tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        Self { inner, api_url: format!("http://{api_host}/rest/api/1.0") }
    }

    /// Lets user `name` write to the repository (as a group or the project would).
    pub fn grant_write(&self, name: &str) {
        self.inner.writers.lock().expect("lock").push(name.to_owned());
    }

    /// Opens pull request `source` → main (its id is returned), as a person would.
    pub fn open_pull(&self, source: &str) -> u64 {
        let mut pulls = self.inner.pulls.lock().expect("lock");
        pulls.push(json!({"title": "by hand", "fromRef": {"id": format!("refs/heads/{source}")}, "toRef": {"id": "refs/heads/main"}}));
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

fn error(status: StatusCode, message: &str) -> Response {
    (status, Json(json!({"errors": [{"context": null, "message": message, "exceptionName": null}]}))).into_response()
}

macro_rules! admitted {
    ($inner:expr, $headers:expr) => {
        let given = $headers.get("authorization").and_then(|v| v.to_str().ok()).unwrap_or_default();
        if !$inner.accepted.iter().any(|a| a == given) {
            return error(StatusCode::UNAUTHORIZED, "Authentication failed. Please check your credentials and try again.");
        }
    };
}

/// Whether the path names the one repository.
fn is_ours(inner: &Inner, (project, slug): &(String, String)) -> bool {
    project.eq_ignore_ascii_case(&inner.project) && *slug == inner.slug
}

async fn list(State(inner): State<Arc<Inner>>, headers: HeaderMap) -> Response {
    admitted!(inner, headers);
    let clone = format!("http://bot@{}/scm/{}/{}.git", inner.git_host, inner.project, inner.slug);
    let repo = json!({"slug": inner.slug, "name": inner.slug, "public": false, "description": "the app",
        "project": {"key": inner.project, "name": "Project"},
        "links": {"clone": [{"href": clone, "name": "http"}, {"href": format!("ssh://git@{}/x.git", inner.git_host), "name": "ssh"}]}});
    Json(json!({"size": 1, "limit": 25, "isLastPage": true, "values": [repo], "start": 0})).into_response()
}

/// Data Center's user search: `filter` (a prefix of the name) and one permission filter.
async fn users(State(inner): State<Arc<Inner>>, Query(q): Query<HashMap<String, String>>, headers: HeaderMap) -> Response {
    admitted!(inner, headers);
    let on_repo = q.get("permission.1").map(String::as_str) == Some("REPO_WRITE")
        && q.get("permission.1.projectKey").is_some_and(|k| k.eq_ignore_ascii_case(&inner.project))
        && q.get("permission.1.repositorySlug") == Some(&inner.slug);
    if !on_repo {
        return error(StatusCode::BAD_REQUEST, "this scripted server answers REPO_WRITE on its repository only");
    }
    let prefix = q.get("filter").cloned().unwrap_or_default().to_lowercase();
    let values: Vec<Value> = inner
        .writers
        .lock()
        .expect("lock")
        .iter()
        .filter(|w| w.to_lowercase().starts_with(&prefix))
        .map(|w| json!({"name": w, "slug": w, "displayName": w, "active": true, "type": "NORMAL"}))
        .collect();
    Json(json!({"size": values.len(), "isLastPage": true, "values": values, "start": 0})).into_response()
}

async fn default_branch(State(inner): State<Arc<Inner>>, Path(repo): Repo, headers: HeaderMap) -> Response {
    admitted!(inner, headers);
    if !is_ours(&inner, &repo) {
        return error(StatusCode::NOT_FOUND, "Repository does not exist.");
    }
    Json(json!({"id": "refs/heads/main", "displayId": "main", "type": "BRANCH", "isDefault": true})).into_response()
}

async fn branches(State(inner): State<Arc<Inner>>, Path(repo): Repo, headers: HeaderMap) -> Response {
    admitted!(inner, headers);
    if !is_ours(&inner, &repo) {
        return error(StatusCode::NOT_FOUND, "Repository does not exist.");
    }
    let bare = inner.git_root.join(format!("scm/{}/{}.git", inner.project, inner.slug));
    let out = std::process::Command::new("git")
        .args(["for-each-ref", "--format=%(refname:short)", "refs/heads"])
        .env("GIT_DIR", bare)
        .output()
        .expect("git for-each-ref");
    let values: Vec<Value> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|b| json!({"id": format!("refs/heads/{b}"), "displayId": b, "type": "BRANCH", "isDefault": b == "main"}))
        .collect();
    Json(json!({"size": values.len(), "isLastPage": true, "values": values, "start": 0})).into_response()
}

async fn create_pull(State(inner): State<Arc<Inner>>, Path(repo): Repo, headers: HeaderMap, body: axum::body::Bytes) -> Response {
    admitted!(inner, headers);
    if !is_ours(&inner, &repo) {
        return error(StatusCode::NOT_FOUND, "Repository does not exist.");
    }
    let pr: Value = serde_json::from_slice(&body).unwrap_or_default();
    let refs_ok = ["fromRef", "toRef"].iter().all(|r| pr[r]["id"].as_str().is_some_and(|id| id.starts_with("refs/heads/")));
    if pr["title"].as_str().is_none_or(str::is_empty) || !refs_ok {
        return error(StatusCode::BAD_REQUEST, "title, fromRef.id and toRef.id are required");
    }
    let mut pulls = inner.pulls.lock().expect("lock");
    pulls.push(pr);
    let id = pulls.len();
    let web = format!("http://{}/projects/{}/repos/{}/pull-requests/{id}", inner.api_host, inner.project, inner.slug);
    (StatusCode::CREATED, Json(json!({"id": id, "version": 0, "state": "OPEN", "links": {"self": [{"href": web}]}}))).into_response()
}

async fn pull(State(inner): State<Arc<Inner>>, Path((project, slug, id)): Path<(String, String, usize)>, headers: HeaderMap) -> Response {
    admitted!(inner, headers);
    if !is_ours(&inner, &(project, slug)) {
        return error(StatusCode::NOT_FOUND, "Repository does not exist.");
    }
    match inner.pulls.lock().expect("lock").get(id.wrapping_sub(1)) {
        Some(pr) => {
            let from = pr["fromRef"]["id"].as_str().unwrap_or_default().trim_start_matches("refs/heads/").to_owned();
            Json(json!({"id": id, "title": pr["title"], "fromRef": {"id": pr["fromRef"]["id"], "displayId": from}})).into_response()
        }
        None => error(StatusCode::NOT_FOUND, "Pull request does not exist."),
    }
}

async fn comment(
    State(inner): State<Arc<Inner>>,
    Path((project, slug, id)): Path<(String, String, u64)>,
    headers: HeaderMap,
    body: axum::body::Bytes,
) -> Response {
    admitted!(inner, headers);
    if !is_ours(&inner, &(project, slug)) {
        return error(StatusCode::NOT_FOUND, "Repository does not exist.");
    }
    let c: Value = serde_json::from_slice(&body).unwrap_or_default();
    if c["text"].as_str().is_none_or(str::is_empty) {
        return error(StatusCode::BAD_REQUEST, "Please enter a non-empty value");
    }
    let mut comments = inner.comments.lock().expect("lock");
    comments.push((id, c));
    (StatusCode::CREATED, Json(json!({"id": 700 + comments.len(), "version": 0}))).into_response()
}
