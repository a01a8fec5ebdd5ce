//! A scripted GitHub REST server (the part of the API Halyard calls), for tests: it serves one
//! user's repositories under `/api/v3` to requests carrying `Authorization: Bearer <token>`,
//! refuses others with 401 as GitHub does, and records what it was asked. Pull requests and
//! comments are checked for the shape GitHub's API documents (422 otherwise, as GitHub
//! answers); given the directory of a git server's bare repositories, a pull request's head
//! must be a branch pushed there, and the branches listed are the ones there.

use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use axum::Router;
use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Json, Response};
use axum::routing::{get, post};
use serde_json::{Value, json};

struct Inner {
    host: String,
    token: String,
    /// How the token is sent: `Bearer` (GitHub) or `token` (Forgejo and Gitea).
    scheme: &'static str,
    repos: Vec<Value>,
    /// Where `owner/name` is the bare repository `owner/name.git`, if anywhere.
    git_root: Option<PathBuf>,
    /// Each request: method, path and query, and the `Authorization` header.
    seen: Mutex<Vec<(String, Option<String>)>>,
    /// Pull requests opened: the repository's full name and the request body.
    pulls: Mutex<Vec<(String, Value)>>,
    /// Comments made: the repository's full name, the number, the request body.
    comments: Mutex<Vec<(String, u64, Value)>>,
    /// Issues that exist besides the pull requests: repository and number.
    issues: Mutex<Vec<(String, u64)>>,
    /// Each collaborator's permission (`admin`, `write`, `read`...); others have `read`.
    permissions: Mutex<std::collections::HashMap<String, String>>,
    /// Reactions made: the path they were made on and the request body.
    reactions: Mutex<Vec<(String, Value)>>,
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
        Self::start_with_git(token, names, None).await
    }

    /// As [`GithubServer::start`], with the repositories' branches in the bare repositories under
    /// `git_root` (`owner/name.git`), as a git server serves them.
    pub async fn start_with_git(token: &str, names: &[&str], git_root: Option<PathBuf>) -> Self {
        Self::serve(token, "Bearer", names, git_root).await
    }

    /// As [`GithubServer::start_with_git`], as Forgejo and Gitea serve GitHub's paths: the token
    /// comes as `Authorization: token <token>`.
    pub async fn start_forgejo(token: &str, names: &[&str], git_root: Option<PathBuf>) -> Self {
        Self::serve(token, "token", names, git_root).await
    }

    async fn serve(token: &str, scheme: &'static str, names: &[&str], git_root: Option<PathBuf>) -> Self {
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
        let inner = Arc::new(Inner {
            host: host.clone(),
            token: token.to_owned(),
            scheme,
            repos,
            git_root,
            seen: Mutex::new(Vec::new()),
            pulls: Mutex::new(Vec::new()),
            comments: Mutex::new(Vec::new()),
            issues: Mutex::new(Vec::new()),
            permissions: Mutex::new(std::collections::HashMap::new()),
            reactions: Mutex::new(Vec::new()),
        });
        let app = Router::new()
            .route("/api/v3/user/repos", get(user_repos))
            .route("/api/v3/repos/{owner}/{name}", get(repo))
            .route("/api/v3/repos/{owner}/{name}/branches", get(branches))
            .route("/api/v3/repos/{owner}/{name}/pulls", post(create_pull))
            .route("/api/v3/repos/{owner}/{name}/issues/{number}/comments", post(create_comment))
            .route("/api/v3/repos/{owner}/{name}/pulls/{number}", get(get_pull))
            .route("/api/v3/repos/{owner}/{name}/collaborators/{login}/permission", get(permission))
            .route("/api/v3/repos/{owner}/{name}/issues/{number}/reactions", post(react))
            .route("/api/v3/repos/{owner}/{name}/issues/comments/{number}/reactions", post(react))
            .route("/api/v3/repos/{owner}/{name}/pulls/comments/{number}/reactions", post(react))
            .with_state(inner.clone());
        tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        Self { inner, api_url: format!("http://{host}/api/v3"), host }
    }

    /// What was asked: path with query, and the `Authorization` header.
    pub fn seen(&self) -> Vec<(String, Option<String>)> {
        self.inner.seen.lock().expect("lock").clone()
    }

    /// The pull requests opened: repository and the body sent.
    pub fn pulls(&self) -> Vec<(String, Value)> {
        self.inner.pulls.lock().expect("lock").clone()
    }

    /// The comments made: repository, number and the body sent.
    pub fn comments(&self) -> Vec<(String, u64, Value)> {
        self.inner.comments.lock().expect("lock").clone()
    }

    /// Makes issue `number` of `full_name` exist (comments on it are then taken).
    pub fn open_issue(&self, full_name: &str, number: u64) {
        self.inner.issues.lock().expect("lock").push((full_name.to_owned(), number));
    }

    /// Gives `login` `permission` on every repository (`read` otherwise).
    pub fn set_permission(&self, login: &str, permission: &str) {
        self.inner.permissions.lock().expect("lock").insert(login.to_owned(), permission.to_owned());
    }

    /// The reactions made: the path and the body sent.
    pub fn reactions(&self) -> Vec<(String, Value)> {
        self.inner.reactions.lock().expect("lock").clone()
    }
}

/// Records the request; `Err` is GitHub's answer to a missing or wrong token or User-Agent.
fn admit(inner: &Inner, what: String, headers: &HeaderMap) -> Result<(), Box<Response>> {
    let auth = headers.get("authorization").and_then(|v| v.to_str().ok()).map(str::to_owned);
    inner.seen.lock().expect("lock").push((what, auth.clone()));
    if auth.as_deref() != Some(&format!("{} {}", inner.scheme, inner.token)) {
        let body = json!({"message": "Bad credentials", "documentation_url": "https://docs.github.com/rest", "status": "401"});
        return Err(Box::new((StatusCode::UNAUTHORIZED, Json(body)).into_response()));
    }
    if headers.get("user-agent").is_none() {
        let body = json!({"message": "Request forbidden by administrative rules."});
        return Err(Box::new((StatusCode::FORBIDDEN, Json(body)).into_response()));
    }
    Ok(())
}

fn not_found() -> Response {
    (StatusCode::NOT_FOUND, Json(json!({"message": "Not Found", "status": "404"}))).into_response()
}

fn invalid(field: &str, message: &str) -> Response {
    let body = json!({"message": "Validation Failed", "errors": [{"resource": "PullRequest", "field": field, "code": "invalid", "message": message}], "status": "422"});
    (StatusCode::UNPROCESSABLE_ENTITY, Json(body)).into_response()
}

impl Inner {
    fn find(&self, full_name: &str) -> Option<&Value> {
        self.repos.iter().find(|r| r["full_name"] == full_name)
    }

    /// The repository's branches: those of its bare repository, or `main`.
    fn branches(&self, full_name: &str) -> Vec<String> {
        let Some(root) = &self.git_root else { return vec!["main".into()] };
        let out = std::process::Command::new("git")
            .args(["for-each-ref", "--format=%(refname:short)", "refs/heads"])
            .env("GIT_DIR", root.join(format!("{full_name}.git")))
            .output()
            .expect("git for-each-ref");
        String::from_utf8_lossy(&out.stdout).lines().map(str::to_owned).collect()
    }
}

async fn repo(State(inner): State<Arc<Inner>>, Path((owner, name)): Path<(String, String)>, headers: HeaderMap) -> Response {
    let full = format!("{owner}/{name}");
    if let Err(refused) = admit(&inner, format!("GET /api/v3/repos/{full}"), &headers) {
        return *refused;
    }
    inner.find(&full).map(|r| Json(r.clone()).into_response()).unwrap_or_else(not_found)
}

async fn branches(State(inner): State<Arc<Inner>>, Path((owner, name)): Path<(String, String)>, headers: HeaderMap) -> Response {
    let full = format!("{owner}/{name}");
    if let Err(refused) = admit(&inner, format!("GET /api/v3/repos/{full}/branches"), &headers) {
        return *refused;
    }
    if inner.find(&full).is_none() {
        return not_found();
    }
    let items: Vec<Value> = inner
        .branches(&full)
        .iter()
        .map(|b| json!({"name": b, "commit": {"sha": "0000000000000000000000000000000000000000"}, "protected": b == "main"}))
        .collect();
    Json(Value::Array(items)).into_response()
}

async fn create_pull(
    State(inner): State<Arc<Inner>>,
    Path((owner, name)): Path<(String, String)>,
    headers: HeaderMap,
    body: axum::body::Bytes,
) -> Response {
    let full = format!("{owner}/{name}");
    if let Err(refused) = admit(&inner, format!("POST /api/v3/repos/{full}/pulls"), &headers) {
        return *refused;
    }
    if inner.find(&full).is_none() {
        return not_found();
    }
    let Ok(pr) = serde_json::from_slice::<Value>(&body) else {
        return (StatusCode::BAD_REQUEST, Json(json!({"message": "Problems parsing JSON"}))).into_response();
    };
    // The fields GitHub documents, with their types.
    for field in ["title", "head", "base"] {
        if pr[field].as_str().is_none_or(str::is_empty) {
            return invalid(field, &format!("{field} is required and must be a non-empty string"));
        }
    }
    if !pr["body"].is_null() && !pr["body"].is_string() || !pr["draft"].is_null() && !pr["draft"].is_boolean() {
        return invalid("body", "body must be a string and draft a boolean");
    }
    let known = inner.branches(&full);
    for field in ["head", "base"] {
        let branch = pr[field].as_str().unwrap_or_default();
        if !known.iter().any(|b| b == branch) {
            return invalid(field, &format!("{field} branch {branch} does not exist"));
        }
    }
    let mut pulls = inner.pulls.lock().expect("lock");
    let number = pulls.len() as u64 + 1;
    pulls.push((full.clone(), pr.clone()));
    let made = json!({
        "number": number, "state": "open", "title": pr["title"], "draft": pr["draft"].as_bool().unwrap_or(false),
        "html_url": format!("http://{}/{full}/pull/{number}", inner.host),
        "head": {"ref": pr["head"]}, "base": {"ref": pr["base"]},
    });
    (StatusCode::CREATED, Json(made)).into_response()
}

async fn create_comment(
    State(inner): State<Arc<Inner>>,
    Path((owner, name, number)): Path<(String, String, u64)>,
    headers: HeaderMap,
    body: axum::body::Bytes,
) -> Response {
    let full = format!("{owner}/{name}");
    if let Err(refused) = admit(&inner, format!("POST /api/v3/repos/{full}/issues/{number}/comments"), &headers) {
        return *refused;
    }
    let exists = inner.pulls.lock().expect("lock").iter().filter(|(r, _)| *r == full).count() as u64 >= number
        || inner.issues.lock().expect("lock").iter().any(|(r, n)| *r == full && *n == number);
    if inner.find(&full).is_none() || !exists || number == 0 {
        return not_found();
    }
    let Ok(comment) = serde_json::from_slice::<Value>(&body) else {
        return (StatusCode::BAD_REQUEST, Json(json!({"message": "Problems parsing JSON"}))).into_response();
    };
    if comment["body"].as_str().is_none_or(str::is_empty) {
        return invalid("body", "body is required");
    }
    let mut comments = inner.comments.lock().expect("lock");
    let id = comments.len() as u64 + 1000;
    comments.push((full.clone(), number, comment.clone()));
    let made =
        json!({"id": id, "body": comment["body"], "html_url": format!("http://{}/{full}/pull/{number}#issuecomment-{id}", inner.host)});
    (StatusCode::CREATED, Json(made)).into_response()
}

async fn get_pull(
    State(inner): State<Arc<Inner>>,
    Path((owner, name, number)): Path<(String, String, u64)>,
    headers: HeaderMap,
) -> Response {
    let full = format!("{owner}/{name}");
    if let Err(refused) = admit(&inner, format!("GET /api/v3/repos/{full}/pulls/{number}"), &headers) {
        return *refused;
    }
    let pulls = inner.pulls.lock().expect("lock");
    let Some((_, pr)) = pulls.iter().filter(|(r, _)| *r == full).nth(number.saturating_sub(1) as usize) else { return not_found() };
    Json(json!({"number": number, "state": "open", "title": pr["title"], "head": {"ref": pr["head"]}, "base": {"ref": pr["base"]}}))
        .into_response()
}

/// GitHub's "get repository permissions for a user".
async fn permission(
    State(inner): State<Arc<Inner>>,
    Path((owner, name, login)): Path<(String, String, String)>,
    headers: HeaderMap,
) -> Response {
    let full = format!("{owner}/{name}");
    if let Err(refused) = admit(&inner, format!("GET /api/v3/repos/{full}/collaborators/{login}/permission"), &headers) {
        return *refused;
    }
    if inner.find(&full).is_none() {
        return not_found();
    }
    let permission = inner.permissions.lock().expect("lock").get(&login).cloned().unwrap_or_else(|| "read".into());
    Json(json!({"permission": permission, "role_name": permission, "user": {"login": login}})).into_response()
}

/// A reaction, of the kinds GitHub takes (422 for others).
async fn react(State(inner): State<Arc<Inner>>, uri: axum::http::Uri, headers: HeaderMap, body: axum::body::Bytes) -> Response {
    let path = uri.path().to_owned();
    if let Err(refused) = admit(&inner, format!("POST {path}"), &headers) {
        return *refused;
    }
    let reaction: Value = serde_json::from_slice(&body).unwrap_or_default();
    let kinds = ["+1", "-1", "laugh", "confused", "heart", "hooray", "rocket", "eyes"];
    if !kinds.contains(&reaction["content"].as_str().unwrap_or_default()) {
        return invalid("content", "content is not a valid reaction");
    }
    inner.reactions.lock().expect("lock").push((path, reaction.clone()));
    (StatusCode::CREATED, Json(json!({"id": 1, "content": reaction["content"]}))).into_response()
}

async fn user_repos(State(inner): State<Arc<Inner>>, Query(query): Query<Vec<(String, String)>>, headers: HeaderMap) -> Response {
    let query: Vec<String> = query.iter().map(|(k, v)| format!("{k}={v}")).collect();
    if let Err(refused) = admit(&inner, format!("GET /api/v3/user/repos?{}", query.join("&")), &headers) {
        return *refused;
    }
    Json(Value::Array(inner.repos.clone())).into_response()
}
