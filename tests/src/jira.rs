//! A scripted Jira Cloud REST API (the comment call Halyard's Jira automations make), for tests:
//! it takes basic auth with the account's e-mail and API token (401 otherwise, as Jira answers)
//! and records each comment with its issue key; its permission search answers who may edit
//! issues in a project.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use axum::Router;
use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Json, Response};
use axum::routing::{get, post};
use serde_json::{Value, json};

struct Inner {
    expected: String,
    comments: Mutex<Vec<(String, Value)>>,
    /// Account id and project key of each person who may edit the project's issues.
    editors: Mutex<Vec<(String, String)>>,
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
        let inner = Arc::new(Inner { expected, comments: Mutex::new(Vec::new()), editors: Mutex::new(Vec::new()) });
        let app = Router::new()
            .route("/rest/api/2/issue/{key}/comment", post(comment))
            .route("/rest/api/2/user/permission/search", get(permission_search))
            .with_state(inner.clone());
        tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        Self { inner, site }
    }

    /// Lets the person with `account_id` edit the issues of project `project`.
    pub fn grant_edit(&self, account_id: &str, project: &str) {
        self.inner.editors.lock().expect("lock").push((account_id.to_owned(), project.to_owned()));
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

/// Jira's "find users with permissions": of the people the query names, those who have every
/// permission asked in the project (only `EDIT_ISSUES` is known here).
async fn permission_search(State(inner): State<Arc<Inner>>, Query(q): Query<HashMap<String, String>>, headers: HeaderMap) -> Response {
    if headers.get("authorization").and_then(|v| v.to_str().ok()) != Some(inner.expected.as_str()) {
        return (StatusCode::UNAUTHORIZED, Json(json!({"errorMessages": ["You are not authenticated."]}))).into_response();
    }
    let (Some(permissions), Some(project)) = (q.get("permissions"), q.get("projectKey")) else {
        return (StatusCode::BAD_REQUEST, Json(json!({"errorMessages": ["permissions and a project are required"]}))).into_response();
    };
    let Some(account) = q.get("accountId") else {
        return (StatusCode::BAD_REQUEST, Json(json!({"errorMessages": ["The query parameter 'accountId' is required."]}))).into_response();
    };
    let editor = inner.editors.lock().expect("lock").iter().any(|(a, p)| a == account && p == project);
    let users: Vec<Value> = if permissions == "EDIT_ISSUES" && editor {
        vec![json!({"accountId": account, "accountType": "atlassian", "active": true})]
    } else {
        Vec::new()
    };
    Json(users).into_response()
}
