//! `/api/v1/batches`: many starts run as one, a few at a time (the automation service runs them:
//! [`halyard_protocol::batch`]), with one results table (`GET /batches/{id}`, also as CSV),
//! paused, resumed, cancelled, their failed items run again, and two batches compared item by
//! item. The handlers check and hand over; the store and the table's arithmetic are
//! [`crate::domain::batches`].

use axum::Json;
use axum::extract::{Path, Query, State};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use halyard_protocol::UserId;
use halyard_protocol::batch::{Batch, BatchItem, BatchStatus, ItemRun, MAX_ATTEMPTS, MAX_CONCURRENCY, MAX_ITEMS};
use halyard_protocol::event::{Budget, Check, Checks};

use crate::api::conversations::views::state_of;
use crate::auth::User;
use crate::domain::batches::{self, Comparison, ItemRow};
use crate::http::api_doc::{BodyRefusals, Conflict, Refusals};
use crate::http::error::{ApiError, ApiJson};
use crate::read_model::store::ConversationView;
use crate::state::AppState;

/// Items run at once unless the batch says.
const DEFAULT_CONCURRENCY: u32 = 4;

/// A new batch.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct BatchBody {
    #[serde(default)]
    pub name: Option<String>,
    /// What each item starts (1 to 500): `message`, and `title`, `repository`, `environment`,
    /// `sandbox_spec`, `llm_profile` as a start takes them. Or `template` and `rows`.
    #[serde(default)]
    pub items: Vec<BatchItem>,
    /// One of your templates (`GET /templates`): each of `rows` (its parameters' values) makes
    /// an item; its checks apply unless the batch names its own.
    #[serde(default)]
    pub template: Option<String>,
    #[serde(default)]
    pub rows: Vec<std::collections::BTreeMap<String, String>>,
    /// How many items run at once (1 to 32; absent: 4); each attempt counts.
    #[serde(default)]
    pub concurrency: Option<u32>,
    /// How many times each item runs, side by side (1 to 8; absent: 1): its row is the best
    /// attempt's (passed first, then the highest score, then the fewest tokens), with all of them.
    #[serde(default)]
    pub attempts: Option<u32>,
    /// The LLM profile every item uses unless it names one.
    #[serde(default)]
    pub llm_profile: Option<String>,
    /// As a start's: every item's agent finishes with a result of this schema.
    #[serde(default)]
    #[schema(value_type = Option<Object>)]
    pub result_schema: Option<serde_json::Value>,
    /// As a start's: the checks each item's work must pass.
    #[serde(default)]
    pub verify: Vec<Check>,
    #[serde(default)]
    pub max_verify_attempts: Option<u32>,
    /// What each item's LLM calls may cost, in US dollars, and use, in tokens.
    #[serde(default)]
    pub max_budget_usd: Option<f64>,
    #[serde(default)]
    pub max_tokens: Option<u64>,
}

/// A batch and its results table.
#[derive(Debug, Serialize, ToSchema)]
pub struct BatchView {
    pub id: String,
    pub name: Option<String>,
    /// `running`, `paused`, `cancelled` or `done`.
    pub status: String,
    pub concurrency: u32,
    /// How many times each item runs (best of N).
    pub attempts: u32,
    pub created_at: String,
    /// How many items are `waiting`, `running`, `passed` and `failed`.
    pub counts: std::collections::BTreeMap<String, usize>,
    pub items: Vec<ItemRow>,
}

/// `user`'s batches.
#[derive(Debug, Serialize, ToSchema)]
pub struct BatchList {
    pub items: Vec<BatchView>,
}

fn view(state: &AppState, batch: &Batch) -> Result<BatchView, ApiError> {
    let items = rows(state, batch)?;
    Ok(BatchView {
        id: batch.id.clone(),
        name: batch.name.clone(),
        status: batch.status.as_str().to_owned(),
        concurrency: batch.concurrency,
        attempts: batch.attempts,
        created_at: halyard_protocol::rfc3339(batch.created_ms),
        counts: batches::counts(&items),
        items,
    })
}

/// Run `r` of `batch` (an item's attempt) as a row, its conversation's view read from the read
/// model.
fn row(state: &AppState, batch: &Batch, r: usize) -> Result<ItemRow, ApiError> {
    let run = &batch.runs[r];
    let (index, _) = batch.item_of(r);
    let view: Option<ConversationView> = match run.conversation_id {
        Some(c) => state.store.conversation(c).map_err(|e| ApiError::unavailable(e.to_string()))?,
        None => None,
    };
    let verdict = view.as_ref().and_then(|v| v.verdict.clone());
    let passed = run.ended.as_deref() == Some("finished") && verdict.as_ref().is_none_or(|v| v.passed);
    let status = match (&run.conversation_id, &run.ended) {
        (None, _) => "waiting",
        (Some(_), None) => "running",
        (Some(_), Some(_)) if passed => "passed",
        (Some(_), Some(_)) => "failed",
    };
    let state_of = view.as_ref().map(|v| state_of(v).0.to_owned());
    let (tokens, cost) = view.as_ref().map_or((0, 0.0), |v| (v.metrics.prompt_tokens + v.metrics.completion_tokens, v.metrics.cost_usd));
    Ok(ItemRow {
        index,
        message: batch.items[index].message.chars().take(200).collect(),
        status: status.to_owned(),
        state: state_of.or_else(|| run.ended.clone()),
        verdict: verdict.as_ref().map(|v| if v.passed { "passed" } else { "failed" }.to_owned()),
        score: verdict.map(|v| (v.score * 1000.0).round() / 1000.0),
        tokens,
        cost_usd: (cost * 1e6).round() / 1e6,
        duration_secs: run.started_ms.zip(run.ended_ms).map(|(s, e)| (e - s).max(0) as f64 / 1000.0),
        conversation_id: run.conversation_id.map(|c| c.to_string()),
        round: run.round,
        attempts: Vec::new(),
        best_attempt: None,
        result: view.as_ref().and_then(|v| v.result.clone()),
        diff: None,
    })
}

/// Every item of `batch` as a row (its best attempt's, with `attempts`).
fn rows(state: &AppState, batch: &Batch) -> Result<Vec<ItemRow>, ApiError> {
    (0..batch.items.len()).map(|i| item_row(state, batch, i)).collect()
}

/// Item `i` of `batch` as a row (its best attempt's, with `attempts`).
fn item_row(state: &AppState, batch: &Batch, i: usize) -> Result<ItemRow, ApiError> {
    let n = batch.attempts.max(1) as usize;
    let runs = (i * n..(i + 1) * n).map(|r| row(state, batch, r)).collect::<Result<Vec<_>, _>>()?;
    Ok(if n == 1 { runs.into_iter().next().unwrap_or_else(|| unreachable!("one run per item")) } else { batches::best_of(i, runs) })
}

/// Why `body` cannot run as a batch, in words; else the batch it is.
async fn checked(state: &AppState, user: &UserId, mut body: BatchBody) -> Result<Batch, ApiError> {
    let bad = |m: String| ApiError::bad_request("invalid_field", m);
    let mut from_template = None;
    match (&body.template, body.items.is_empty()) {
        (Some(_), false) => return Err(bad("`items` or `template` with `rows`: one of them".into())),
        (Some(name), true) => {
            if body.rows.is_empty() || body.rows.len() > MAX_ITEMS {
                return Err(bad(format!("`rows`: 1 to {MAX_ITEMS} rows of the template's parameters")));
            }
            let (items, checks) = crate::api::settings::templates::items_of(state, user, name, &body.rows).await?;
            body.items = items;
            from_template = checks;
        }
        (None, _) if !body.rows.is_empty() => return Err(bad("`rows` go with `template`".into())),
        (None, _) => {}
    }
    if body.items.is_empty() || body.items.len() > MAX_ITEMS {
        return Err(bad(format!("`items`: 1 to {MAX_ITEMS} starts")));
    }
    let concurrency = body.concurrency.unwrap_or(DEFAULT_CONCURRENCY);
    if !(1..=MAX_CONCURRENCY).contains(&concurrency) {
        return Err(bad(format!("`concurrency`: 1 to {MAX_CONCURRENCY}")));
    }
    if let Some(n) = &body.name {
        crate::api::conversations::checks::check_text("name", n, 200)?;
    }
    for (i, item) in body.items.iter().enumerate() {
        if item.message.trim().is_empty() {
            return Err(bad(format!("`items[{i}].message`: what the agent should do")));
        }
        crate::api::conversations::checks::check_text(&format!("items[{i}].message"), &item.message, 100_000)?;
        if let Some(spec) = &item.sandbox_spec {
            crate::domain::sandbox::check_spec(state, spec)?;
        }
        if let Some(r) = &item.repository {
            if r.url.trim_start().starts_with('-') || r.url.len() > 4096 {
                return Err(bad(format!("`items[{i}].repository.url` must be a git URL or a path")));
            }
        }
        for p in item.llm_profile.iter().chain(&body.llm_profile) {
            crate::domain::user_config::check_profile(state, user, "llm_profile", p).await?;
        }
        crate::domain::environments::check_start(state, user, None, item.environment.as_deref()).await?;
    }
    crate::http::checks::check_budget(body.max_budget_usd, body.max_tokens)?;
    let checks = Checks { result_schema: body.result_schema, verify: body.verify, max_verify_attempts: body.max_verify_attempts };
    // The batch's own checks, else its template's.
    let checks = match from_template {
        Some(t) if checks.is_empty() => t,
        _ => checks,
    };
    halyard_platform::results::check_checks(&checks).map_err(bad)?;
    let attempts = body.attempts.unwrap_or(1);
    if !(1..=MAX_ATTEMPTS).contains(&attempts) {
        return Err(bad(format!("`attempts`: 1 to {MAX_ATTEMPTS}")));
    }
    let runs = vec![ItemRun::default(); body.items.len() * attempts as usize];
    Ok(Batch {
        id: uuid::Uuid::now_v7().to_string(),
        owner: user.clone(),
        name: body.name,
        created_ms: halyard_platform::now_ms(),
        concurrency,
        items: body.items,
        attempts,
        runs,
        status: BatchStatus::Running,
        checks: (!checks.is_empty()).then_some(checks),
        llm_profile: body.llm_profile,
        budget: (body.max_budget_usd.is_some() || body.max_tokens.is_some())
            .then_some(Budget { max_budget_usd: body.max_budget_usd, max_tokens: body.max_tokens }),
    })
}

/// Starts a batch: its items start, `concurrency` at a time, each an ordinary conversation
/// tagged `batch` (and `batch_item`); 201 with its table.
#[utoipa::path(post, path = "/batches", tag = "batches", request_body = BatchBody,
    responses((status = 201, body = BatchView), Refusals, BodyRefusals))]
pub async fn create(
    State(state): State<AppState>,
    User(user): User,
    ApiJson(body): ApiJson<BatchBody>,
) -> Result<impl IntoResponse, ApiError> {
    Ok((StatusCode::CREATED, Json(start(&state, &user, body).await?)))
}

/// Checks and stores a new batch (the automation service starts its items): its table.
pub(crate) async fn start(state: &AppState, user: &UserId, body: BatchBody) -> Result<BatchView, ApiError> {
    let batch = checked(state, user, body).await?;
    batches::create(state, &batch).await?;
    tracing::info!(batch = %batch.id, user = %user, items = batch.items.len(), attempts = batch.attempts, "batch created");
    view(state, &batch)
}

/// Your batches, newest first.
#[utoipa::path(get, path = "/batches", tag = "batches", responses((status = 200, body = BatchList), Refusals))]
pub async fn list(State(state): State<AppState>, User(user): User) -> Result<Json<BatchList>, ApiError> {
    let items = batches::list(&state, &user).await?.iter().map(|b| view(&state, b)).collect::<Result<_, _>>()?;
    Ok(Json(BatchList { items }))
}

/// How a batch's table is answered.
#[derive(Debug, Deserialize, utoipa::IntoParams)]
pub struct Format {
    /// `csv` for the table as CSV (else JSON).
    pub format: Option<String>,
    /// `true`: each row (and attempt) says how much its work changed (`diff`), read from its
    /// sandbox while it runs.
    #[serde(default)]
    pub diff: bool,
}

/// Fills in each row's and attempt's `diff` from its sandbox, a few at a time; one that does
/// not answer soon (or whose sandbox is not running) has none.
async fn with_diffs(state: &AppState, user: &UserId, rows: &mut [ItemRow]) {
    use futures::StreamExt;
    let convs: Vec<String> = rows
        .iter()
        .flat_map(|r| std::iter::once(r).chain(&r.attempts))
        .filter_map(|r| r.conversation_id.clone())
        .collect::<std::collections::BTreeSet<_>>()
        .into_iter()
        .collect();
    let sizes: std::collections::HashMap<String, batches::DiffSize> = futures::stream::iter(convs)
        .map(|c| async move {
            let asked = crate::api::workspace::files::changes_of(state, user, &c, false);
            match tokio::time::timeout(std::time::Duration::from_secs(5), asked).await {
                Ok(Ok(changes)) => Some((c, batches::DiffSize::of(&changes.0))),
                _ => None,
            }
        })
        .buffer_unordered(8)
        .filter_map(|x| async move { x })
        .collect()
        .await;
    let size = |r: &ItemRow| r.conversation_id.as_ref().and_then(|c| sizes.get(c).cloned());
    for r in rows.iter_mut() {
        for a in r.attempts.iter_mut() {
            a.diff = size(a);
        }
        r.diff = size(r);
    }
}

/// 409 `attempt_not_chosen` for conversation `c` when it is an attempt its group decided
/// against: the others are kept to be read, and carried on from with a fork.
pub(crate) async fn require_chosen(state: &AppState, user: &UserId, c: &ConversationView) -> Result<(), ApiError> {
    let (Some(batch), Some(item), true) = (c.tags.get("batch"), c.tags.get("batch_item"), c.tags.contains_key("batch_attempt")) else {
        return Ok(());
    };
    let Ok((batch, _)) = batches::load(state, user, batch).await else { return Ok(()) };
    // Only its item's runs are read, not the whole batch's: this is on a message's path.
    let Some(item) = item.parse::<usize>().ok().filter(|i| *i < batch.items.len()) else { return Ok(()) };
    if batches::lost(&item_row(state, &batch, item)?, &c.id) {
        return Err(ApiError::conflict(
            "attempt_not_chosen",
            "another attempt of this group was chosen; this one is kept to read. Fork it to carry on from it",
        ));
    }
    Ok(())
}

/// A batch and its results table: one row per item, its status, its checks' verdict and score,
/// tokens, cost, duration, result and conversation (`?format=csv`: the rows as CSV;
/// `?diff=true`: with how much each changed). A group of attempts (`POST /conversations` with
/// `attempts`) is a batch of one item.
#[utoipa::path(get, path = "/batches/{id}", tag = "batches", params(("id" = String, Path), Format),
    responses((status = 200, body = BatchView), Refusals))]
pub async fn get_one(
    State(state): State<AppState>,
    User(user): User,
    Path(id): Path<String>,
    Query(q): Query<Format>,
) -> Result<Response, ApiError> {
    let (batch, _) = batches::load(&state, &user, &id).await?;
    match q.format.as_deref() {
        Some("csv") => {
            let body = batches::csv(&rows(&state, &batch)?);
            Ok(([(header::CONTENT_TYPE, "text/csv; charset=utf-8")], body).into_response())
        }
        None | Some("json") => {
            let mut view = view(&state, &batch)?;
            if q.diff {
                with_diffs(&state, &user, &mut view.items).await;
            }
            Ok(Json(view).into_response())
        }
        Some(other) => Err(ApiError::bad_request("invalid_field", format!("`format`: `json` or `csv`, not {other:?}"))),
    }
}

/// Sets a batch's status: `pause` (no item starts; those running go on), `resume`, `cancel`
/// (no item starts again).
#[utoipa::path(post, path = "/batches/{id}/{action}", tag = "batches",
    params(("id" = String, Path), ("action" = String, Path, description = "`pause`, `resume`, `cancel` or `rerun` (the failed items run again)")),
    responses((status = 200, body = BatchView), Refusals, Conflict))]
pub async fn act(
    State(state): State<AppState>,
    User(user): User,
    Path((id, action)): Path<(String, String)>,
) -> Result<Json<BatchView>, ApiError> {
    let batch = match action.as_str() {
        "pause" | "resume" | "cancel" => {
            batches::modify(&state, &user, &id, |b| {
                b.status = match (action.as_str(), b.status) {
                    (_, BatchStatus::Cancelled) if action != "cancel" => {
                        return Err(ApiError::conflict(
                            "batch_cancelled",
                            "the batch was cancelled; start a new one, or `rerun` its failed items",
                        ));
                    }
                    ("pause", BatchStatus::Running) => BatchStatus::Paused,
                    ("resume", BatchStatus::Paused) => BatchStatus::Running,
                    ("cancel", s) if s != BatchStatus::Done => BatchStatus::Cancelled,
                    (_, s) => s,
                };
                Ok(())
            })
            .await?
        }
        "rerun" => {
            let (current, _) = batches::load(&state, &user, &id).await?;
            let failed: Vec<usize> = rows(&state, &current)?.into_iter().filter(|r| r.status == "failed").map(|r| r.index).collect();
            batches::modify(&state, &user, &id, |b| {
                // Only those whose runs are still the failed ones read above.
                let still: Vec<usize> = failed.iter().copied().filter(|i| b.runs_of(*i) == current.runs_of(*i)).collect();
                batches::rerun_failed(b, &still);
                Ok(())
            })
            .await?
        }
        other => return Err(ApiError::not_found(&format!("batch action {other:?}"))),
    };
    Ok(Json(view(&state, &batch)?))
}

/// Batch `id` and batch `other` item by item: which items `other` passes that `id` failed,
/// and which it fails that `id` passed.
#[utoipa::path(get, path = "/batches/{id}/compare/{other}", tag = "batches", params(("id" = String, Path), ("other" = String, Path)),
    responses((status = 200, body = Comparison), Refusals))]
pub async fn compare(
    State(state): State<AppState>,
    User(user): User,
    Path((id, other)): Path<(String, String)>,
) -> Result<Json<Comparison>, ApiError> {
    let (a, _) = batches::load(&state, &user, &id).await?;
    let (b, _) = batches::load(&state, &user, &other).await?;
    let name = |b: &Batch| b.name.clone().unwrap_or_else(|| format!("batch {}", &b.id[..8.min(b.id.len())]));
    let (ra, rb) = (rows(&state, &a)?, rows(&state, &b)?);
    Ok(Json(batches::compare((&name(&a), &ra), (&name(&b), &rb))))
}
