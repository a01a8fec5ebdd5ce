//! The audit trail: every security-relevant action leaves an [`AuditRecord`] on the bus
//! (`halyard.sys.audit.<what>`), written by the handler that did it ([`record`]); the
//! projection keeps them in the read model for as long as `HALYARD_AUDIT_RETENTION_DAYS` says;
//! operators read them at `GET /api/v1/admin/audit` (newest first, filtered, paginated by
//! cursor, or exported as JSON Lines). Nothing in the API changes or removes a record.
//!
//! What a record may hold: names (of users, keys, secrets, settings, automations), ids and
//! outcomes, never a value that is secret. Each caller builds its `detail` from such names.

use std::net::{IpAddr, SocketAddr};

use axum::Json;
use axum::extract::{ConnectInfo, FromRequestParts, Query, State};
use axum::http::request::Parts;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use utoipa::{IntoParams, ToSchema};

use halyard_platform::{bus, keys};
use halyard_protocol::UserId;
use halyard_protocol::accounts::AuditRecord;
use halyard_protocol::subjects;
use halyard_protocol::system::SystemRecord;

use crate::auth::Admin;
use crate::http::api_doc::Refusals;
use crate::http::error::ApiError;
use crate::read_model::rows::AuditRow;
use crate::read_model::{layout, store};
use crate::state::AppState;

/// The client address of a request (behind a trusted proxy, the one it forwards), for the
/// records of what the request did.
#[derive(Clone, Copy, Debug)]
pub struct Client(pub Option<IpAddr>);

impl FromRequestParts<AppState> for Client {
    type Rejection = std::convert::Infallible;

    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Self, Self::Rejection> {
        let peer = parts.extensions.get::<ConnectInfo<SocketAddr>>().map(|c| c.0.ip());
        Ok(Client(peer.map(|p| crate::auth::client::client_ip(state, p, &parts.headers))))
    }
}

/// Who did what: the actor, the action (`<what>.<verb>`), its target and the names that say
/// more. Built by the handler, sent by [`Action::send`].
pub struct Action<'a> {
    pub actor: &'a UserId,
    pub action: &'a str,
    pub target: &'a str,
    pub detail: Value,
    /// The organization it happened in.
    pub org: Option<&'a str>,
}

impl<'a> Action<'a> {
    pub fn new(actor: &'a UserId, action: &'a str, target: &'a str) -> Self {
        Self { actor, action, target, detail: Value::Null, org: None }
    }

    /// In organization `org`.
    pub fn org(mut self, org: &'a str) -> Self {
        self.org = Some(org);
        self
    }

    /// With `detail` (an object of names and outcomes, never a secret's value).
    pub fn detail(mut self, detail: Value) -> Self {
        self.detail = detail;
        self
    }

    /// Records it. The action is done already: a record that cannot be sent is logged loudly
    /// rather than undoing what was done.
    pub async fn send(self, state: &AppState, client: Client) {
        record(state, self, client.0).await;
    }
}

/// Sends `a` as an audit record from `client`.
pub async fn record(state: &AppState, a: Action<'_>, client: Option<IpAddr>) {
    let what = a.action.split('.').next().unwrap_or("other");
    let record = SystemRecord::Audit(AuditRecord {
        actor: a.actor.clone(),
        action: a.action.to_owned(),
        target: a.target.to_owned(),
        detail: (!a.detail.is_null()).then_some(a.detail),
        org: a.org.map(str::to_owned),
        client: client.map(|c| c.to_string()),
        at_ms: halyard_platform::now_ms(),
    });
    if let Err(e) = bus::send(&state.js, subjects::audit_record(what), record, None).await {
        tracing::error!(error = %e, action = a.action, target = a.target, "audit record lost");
    }
}

/// An audit record as the API shows it.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct AuditView {
    /// When (RFC 3339).
    pub time: String,
    pub actor: String,
    pub action: String,
    pub target: String,
    /// The organization it happened in, if any.
    pub org: Option<String>,
    /// Names and outcomes that say more (an object; `{"note": ...}` for older records).
    #[schema(value_type = Object)]
    pub detail: Value,
    /// The client address the request came from.
    pub client: Option<String>,
}

impl From<AuditRow> for AuditView {
    fn from(r: AuditRow) -> Self {
        let AuditRow { time, actor, action, target, org, detail, client } = r;
        Self { time, actor, action, target, org, detail, client }
    }
}

/// One page of the audit trail.
#[derive(Debug, Serialize, ToSchema)]
pub struct AuditPage {
    /// Newest first.
    pub items: Vec<AuditView>,
    /// Where the next (older) page starts; absent on the last page.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub next_cursor: Option<String>,
}

/// What to read of the audit trail.
#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct AuditQuery {
    /// Only this actor's records.
    pub actor: Option<String>,
    /// Only this action (`secret.put`), or every action of a kind (`secret.`).
    pub action: Option<String>,
    /// Only records at or after (RFC 3339).
    pub from: Option<String>,
    /// Only records before (RFC 3339).
    pub to: Option<String>,
    /// The `next_cursor` of the previous page.
    pub cursor: Option<String>,
    /// Records per page: 1 to 1000 (default 100).
    pub limit: Option<usize>,
    /// `json` (default) or `jsonl`: one record per line, every record that matches, streamed
    /// (an export; no pages), up to 100,000: past that a last line `{"truncated": true,
    /// "next_to": <time>}` says where the next export starts.
    pub format: Option<String>,
}

fn instant(field: &str, v: Option<&str>) -> Result<Option<i64>, ApiError> {
    match v {
        None => Ok(None),
        Some(s) => halyard_platform::parse_rfc3339(s)
            .map(Some)
            .ok_or_else(|| ApiError::bad_request("invalid_query", format!("`{field}` is a time as RFC 3339 (2026-11-27T03:00:00Z)"))),
    }
}

/// The audit trail (administrators only): newest first, filtered by actor, action and time,
/// paginated by cursor; `format=jsonl` exports every matching record as JSON Lines.
#[utoipa::path(get, path = "/admin/audit", tag = "admin", params(AuditQuery),
    responses((status = 200, body = AuditPage, description = "a page (or, with `format=jsonl`, every record as JSON Lines)"), Refusals))]
pub async fn list(
    State(state): State<AppState>,
    _: Admin,
    query: Result<Query<AuditQuery>, axum::extract::rejection::QueryRejection>,
) -> Result<Response, ApiError> {
    let Query(q) = query?;
    read(&state, q, None)
}

/// What `q` asks of the audit trail (only organization `org`'s records, if given).
pub fn read(state: &AppState, q: AuditQuery, org: Option<&str>) -> Result<Response, ApiError> {
    let jsonl = match q.format.as_deref() {
        None | Some("json") => false,
        Some("jsonl") => true,
        Some(other) => return Err(ApiError::bad_request("invalid_query", format!("`format` {other:?}: use json or jsonl"))),
    };
    let limit = q.limit.unwrap_or(100);
    if !(1..=1000).contains(&limit) {
        return Err(ApiError::bad_request("invalid_query", "`limit` must be between 1 and 1000"));
    }
    let (from, to) = (instant("from", q.from.as_deref())?, instant("to", q.to.as_deref())?);
    // An organization's reads walk its own copies only, never the deployment's trail.
    let scope = org.map_or_else(layout::AuditScope::all, layout::AuditScope::org);
    let start = match &q.cursor {
        Some(c) => Some(
            keys::from_hex(c)
                .filter(|k| k.starts_with(scope.prefix()))
                .ok_or_else(|| ApiError::bad_request("invalid_query", "`cursor` is not one this API gave; start again without it"))?,
        ),
        None => None,
    };
    let filter = Filter { actor: q.actor.clone(), action: q.action.clone(), from };
    // Newest first: keys carry the inverted time, so `to` is where the scan begins.
    let begin = match (&start, to) {
        (Some(c), _) => {
            let mut after = c.clone();
            after.push(0);
            after
        }
        (None, Some(t)) => scope.at(t - 1),
        (None, None) => scope.prefix().to_vec(),
    };
    if jsonl {
        return Ok(export(state.store.tree().clone(), scope, begin, filter));
    }
    let mut items = Vec::new();
    let mut last_key = None;
    for entry in state.store.tree().range(begin..scope.end()) {
        let (k, v) = entry.map_err(ApiError::internal)?;
        let at_ms = scope.time(&k);
        if from.is_some_and(|f| at_ms < f) {
            break;
        }
        let Ok(row) = serde_json::from_slice::<AuditRow>(&v) else { continue };
        if !filter.matches(&row, at_ms) {
            continue;
        }
        if items.len() == limit {
            break;
        }
        items.push(AuditView::from(row));
        last_key = Some(k.to_vec());
    }
    let next_cursor = (items.len() == limit).then(|| last_key.map(|k| keys::to_hex(&k))).flatten();
    Ok((StatusCode::OK, Json(AuditPage { items, next_cursor })).into_response())
}

/// Records past this in one export end it with a line saying where to go on from.
const MAX_EXPORT_RECORDS: usize = 100_000;

/// What a read keeps (of the records in its scope).
struct Filter {
    actor: Option<String>,
    action: Option<String>,
    from: Option<i64>,
}

impl Filter {
    fn matches(&self, v: &AuditRow, at_ms: i64) -> bool {
        self.actor.as_deref().is_none_or(|a| v.actor == a)
            && self.action.as_deref().is_none_or(|a| if a.ends_with('.') { v.action.starts_with(a) } else { v.action == a })
            && self.from.is_none_or(|f| at_ms >= f)
    }
}

/// Every record from `begin` that `filter` keeps, as JSON Lines, streamed as it is read (never
/// whole in memory) and at most [`MAX_EXPORT_RECORDS`] of them: past that, a last line
/// `{"truncated": true, "next_to": <time>}` says where the next export starts (`to=`).
fn export(tree: sled::Tree, scope: layout::AuditScope, begin: Vec<u8>, filter: Filter) -> Response {
    let (tx, rx) = tokio::sync::mpsc::channel::<Result<axum::body::Bytes, std::io::Error>>(4);
    tokio::task::spawn_blocking(move || {
        let mut chunk = String::new();
        let mut sent = 0usize;
        let send = |chunk: &mut String| tx.blocking_send(Ok(axum::body::Bytes::from(std::mem::take(chunk)))).is_ok();
        for entry in tree.range(begin..scope.end()) {
            let Ok((k, v)) = entry else { break };
            let at_ms = scope.time(&k);
            if filter.from.is_some_and(|f| at_ms < f) {
                break;
            }
            let Ok(row) = serde_json::from_slice::<AuditRow>(&v) else { continue };
            if !filter.matches(&row, at_ms) {
                continue;
            }
            if sent == MAX_EXPORT_RECORDS {
                chunk.push_str(&serde_json::json!({"truncated": true, "next_to": row.time}).to_string());
                chunk.push('\n');
                break;
            }
            chunk.push_str(&serde_json::to_string(&AuditView::from(row)).unwrap_or_default());
            chunk.push('\n');
            sent += 1;
            // The reader went away: stop reading.
            if chunk.len() >= 64 * 1024 && !send(&mut chunk) {
                return;
            }
        }
        if !chunk.is_empty() {
            send(&mut chunk);
        }
    });
    let chunks = futures::stream::unfold(rx, |mut rx| async move { rx.recv().await.map(|c| (c, rx)) });
    let body = axum::body::Body::from_stream(chunks);
    ([(header::CONTENT_TYPE, "application/jsonl")], body).into_response()
}

/// Drops the audit records older than `retention_days` from the read model, now and hourly,
/// until `shutdown`.
pub async fn keep(store: store::Store, retention_days: u64, mut shutdown: halyard_platform::Shutdown) {
    let keep_ms = i64::try_from(retention_days.saturating_mul(86_400_000)).unwrap_or(i64::MAX);
    loop {
        let cutoff = halyard_platform::now_ms().saturating_sub(keep_ms);
        match store::prune_audit(store.tree(), cutoff) {
            Ok(0) => {}
            Ok(n) => tracing::info!(removed = n, retention_days, "audit records past their retention dropped"),
            Err(e) => tracing::warn!(error = %e, "audit retention"),
        }
        tokio::select! {
            _ = shutdown.wait() => return,
            _ = tokio::time::sleep(std::time::Duration::from_secs(3600)) => {}
        }
    }
}
