//! A scripted Slack Web API (the methods Halyard's Slack automations call), for tests: it takes
//! the bot token as Slack does (`Authorization: Bearer xoxb-...`; otherwise `ok: false`,
//! `invalid_auth`, with HTTP 200 as Slack answers) and records each call's method and body.
//! Write methods take JSON; the read methods (`users.info`, `team.info`) take their arguments as
//! a query, as Slack's do, and answer for the users [`SlackServer::add_user`] named (else
//! `user_not_found`) and one workspace, Acme.

use std::sync::{Arc, Mutex};

use axum::Router;
use axum::extract::{Path, Query, State};
use axum::http::HeaderMap;
use axum::response::Json;
use axum::routing::post;
use serde_json::{Value, json};

struct Inner {
    token: String,
    calls: Mutex<Vec<(String, Value)>>,
    /// Slack id -> (handle, real name).
    users: Mutex<std::collections::BTreeMap<String, (String, String)>>,
}

/// A running server.
#[derive(Clone)]
pub struct SlackServer {
    inner: Arc<Inner>,
    /// The Web API base (`http://host:port/api`).
    pub api_url: String,
}

impl SlackServer {
    pub async fn start(token: &str) -> Self {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind slack server");
        let host = listener.local_addr().expect("addr").to_string();
        let inner = Arc::new(Inner { token: token.to_owned(), calls: Mutex::new(Vec::new()), users: Mutex::default() });
        let app = Router::new().route("/api/{method}", post(call).get(read)).with_state(inner.clone());
        tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        Self { inner, api_url: format!("http://{host}/api") }
    }

    /// Every call taken: the method (`chat.postMessage`...) and its JSON body.
    pub fn calls(&self) -> Vec<(String, Value)> {
        self.inner.calls.lock().expect("lock").clone()
    }

    /// A user of the workspace, as `users.info` tells of them.
    pub fn add_user(&self, id: &str, handle: &str, real_name: &str) {
        self.inner.users.lock().expect("lock").insert(id.to_owned(), (handle.to_owned(), real_name.to_owned()));
    }

    /// The calls of one method.
    pub fn calls_of(&self, method: &str) -> Vec<Value> {
        self.calls().into_iter().filter(|(m, _)| m == method).map(|(_, b)| b).collect()
    }
}

async fn call(State(inner): State<Arc<Inner>>, Path(method): Path<String>, headers: HeaderMap, body: axum::body::Bytes) -> Json<Value> {
    if headers.get("authorization").and_then(|v| v.to_str().ok()) != Some(format!("Bearer {}", inner.token).as_str()) {
        return Json(json!({"ok": false, "error": "invalid_auth"}));
    }
    let Ok(body) = serde_json::from_slice::<Value>(&body) else { return Json(json!({"ok": false, "error": "invalid_json"})) };
    let needs: &[&str] = match method.as_str() {
        "chat.postMessage" => &["channel", "text"],
        "chat.postEphemeral" => &["channel", "user", "text"],
        "reactions.add" => &["channel", "timestamp", "name"],
        _ => return Json(json!({"ok": false, "error": "unknown_method"})),
    };
    if needs.iter().any(|k| body[*k].as_str().is_none_or(str::is_empty)) {
        return Json(json!({"ok": false, "error": "invalid_arguments"}));
    }
    inner.calls.lock().expect("lock").push((method, body.clone()));
    Json(json!({"ok": true, "channel": body["channel"], "ts": "1700000999.000200"}))
}

/// Slack's read methods: arguments in the query.
async fn read(
    State(inner): State<Arc<Inner>>,
    Path(method): Path<String>,
    headers: HeaderMap,
    Query(q): Query<std::collections::HashMap<String, String>>,
) -> Json<Value> {
    if headers.get("authorization").and_then(|v| v.to_str().ok()) != Some(format!("Bearer {}", inner.token).as_str()) {
        return Json(json!({"ok": false, "error": "invalid_auth"}));
    }
    inner.calls.lock().expect("lock").push((method.clone(), json!(q)));
    match method.as_str() {
        "users.info" => {
            let Some(id) = q.get("user") else { return Json(json!({"ok": false, "error": "invalid_arguments"})) };
            match inner.users.lock().expect("lock").get(id) {
                Some((handle, real)) => Json(json!({"ok": true, "user": {"id": id, "team_id": "T0ACME01", "name": handle,
                    "real_name": real, "profile": {"real_name": real, "display_name": handle}}})),
                None => Json(json!({"ok": false, "error": "user_not_found"})),
            }
        }
        "team.info" => Json(json!({"ok": true, "team": {"id": "T0ACME01", "name": "Acme", "domain": "acme-corp"}})),
        _ => Json(json!({"ok": false, "error": "unknown_method"})),
    }
}
