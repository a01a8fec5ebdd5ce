//! Batches as the gateway keeps them ([`halyard_protocol::batch`]): stored in the automations
//! bucket, changed by compare-and-set (the automation service runs them and changes them too),
//! and read as a results table ([`ItemRow`]: one row per item, made by the API from its
//! conversation's view in the read model, so the table is a projection over the items' events
//! like any conversation list), as CSV, and compared with another batch.

use std::collections::BTreeMap;

use async_nats::jetstream::kv;
use halyard_protocol::UserId;
use halyard_protocol::batch::{Batch, BatchStatus, batch_key};
use serde::Serialize;
use utoipa::ToSchema;

use crate::http::error::ApiError;
use crate::state::AppState;

fn unavailable(e: impl std::fmt::Display) -> ApiError {
    tracing::error!(error = %e, "batches");
    ApiError::unavailable("the batch store did not answer; try again")
}

/// Batch `id` if `user` owns it (404 otherwise: another's batch is not said to exist), with its
/// revision.
pub async fn load(state: &AppState, user: &UserId, id: &str) -> Result<(Batch, u64), ApiError> {
    let ok = !id.is_empty() && id.len() <= 64 && id.chars().all(|c| c.is_ascii_alphanumeric() || c == '-');
    let entry = if ok { state.automation_kv.entry(batch_key(id)).await.map_err(unavailable)? } else { None };
    let Some(entry) = entry.filter(|e| e.operation == kv::Operation::Put) else { return Err(ApiError::not_found("batch")) };
    match serde_json::from_slice::<Batch>(&entry.value) {
        Ok(b) if b.owner == *user => Ok((b, entry.revision)),
        _ => Err(ApiError::not_found("batch")),
    }
}

/// Stores a new batch.
pub async fn create(state: &AppState, batch: &Batch) -> Result<(), ApiError> {
    let bytes = serde_json::to_vec(batch).map_err(unavailable)?;
    state.automation_kv.create(batch_key(&batch.id), bytes.into()).await.map_err(unavailable)?;
    Ok(())
}

/// Changes `user`'s batch `id` with `f`, compare-and-set, again over a newer entry: the batch
/// as it then is.
pub async fn modify(
    state: &AppState,
    user: &UserId,
    id: &str,
    mut f: impl FnMut(&mut Batch) -> Result<(), ApiError>,
) -> Result<Batch, ApiError> {
    for _ in 0..20 {
        let (mut batch, revision) = load(state, user, id).await?;
        f(&mut batch)?;
        let bytes = serde_json::to_vec(&batch).map_err(unavailable)?;
        match state.automation_kv.update(batch_key(id), bytes.into(), revision).await {
            Ok(_) => return Ok(batch),
            Err(e) if e.kind() == kv::UpdateErrorKind::WrongLastRevision => continue,
            Err(e) => return Err(unavailable(e)),
        }
    }
    Err(ApiError::conflict("concurrent_update", "the batch kept changing; try again"))
}

/// `user`'s batches, newest first.
pub async fn list(state: &AppState, user: &UserId) -> Result<Vec<Batch>, ApiError> {
    use futures::StreamExt;
    let mut keys = state.automation_kv.keys().await.map_err(unavailable)?;
    let mut found = Vec::new();
    while let Some(key) = keys.next().await {
        let key = key.map_err(unavailable)?;
        if !key.starts_with(halyard_protocol::batch::BATCH_PREFIX) {
            continue;
        }
        if let Some(v) = state.automation_kv.get(&key).await.map_err(unavailable)? {
            if let Ok(b) = serde_json::from_slice::<Batch>(&v) {
                if b.owner == *user {
                    found.push(b);
                }
            }
        }
    }
    found.sort_by_key(|b| std::cmp::Reverse(b.created_ms));
    Ok(found)
}

/// One item of a batch in its results table.
#[derive(Clone, Debug, Serialize, ToSchema)]
pub struct ItemRow {
    pub index: usize,
    /// The item's message, as it asked.
    pub message: String,
    /// `waiting`, `running` (and its conversation's state while it starts and runs), then
    /// `passed` (its run finished, and its checks passed if it has any) or `failed`.
    pub status: String,
    /// Its conversation's state (`starting`, `running`, `finished`, `error`, ...), once started.
    pub state: Option<String>,
    /// `passed` or `failed`: what its checks said (absent: no checks, or not checked yet).
    pub verdict: Option<String>,
    /// The checks' mean score, 0 to 1.
    pub score: Option<f64>,
    /// Tokens its LLM calls used (prompt and completion).
    pub tokens: u64,
    pub cost_usd: f64,
    /// From its start to the end of its run, in seconds.
    pub duration_secs: Option<f64>,
    pub conversation_id: Option<String>,
    /// How often it was sent to run again.
    pub round: u32,
    /// With `attempts`: each attempt's row (the fields above are the best one's).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    #[schema(no_recursion)]
    pub attempts: Vec<ItemRow>,
    /// With `attempts`: which is the best (passed first, then the highest score, then the fewest
    /// tokens), once every attempt ended.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub best_attempt: Option<usize>,
    /// The agent's typed result (with `result_schema`), as its conversation holds it.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<Object>)]
    pub result: Option<serde_json::Value>,
    /// With `?diff=true`: how much its work changed in the workspace (absent when its sandbox
    /// is not running: a hibernated one is not woken to say).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub diff: Option<DiffSize>,
}

/// How much a conversation's work changed in its workspace.
#[derive(Clone, Debug, Default, PartialEq, Serialize, ToSchema)]
pub struct DiffSize {
    pub files: usize,
    /// Lines added and removed, over every file's diff.
    pub additions: u64,
    pub deletions: u64,
}

impl DiffSize {
    /// Counted off the workspace's changes (each file's unified diff).
    pub fn of(changes: &halyard_protocol::executor::ChangesResponse) -> Self {
        let mut size = Self { files: changes.files.len(), ..Self::default() };
        for line in changes.files.iter().flat_map(|f| f.diff.lines()) {
            if line.starts_with('+') && !line.starts_with("+++") {
                size.additions += 1;
            } else if line.starts_with('-') && !line.starts_with("---") {
                size.deletions += 1;
            }
        }
        size
    }
}

/// The row of an item that ran `attempts` times: the best attempt's, with every attempt's. Not
/// decided (`running`, or `waiting` if none started) while one still runs.
pub fn best_of(index: usize, attempts: Vec<ItemRow>) -> ItemRow {
    let rank =
        |r: &ItemRow| (r.status == "passed", r.score.unwrap_or(if r.status == "passed" { 1.0 } else { 0.0 }), std::cmp::Reverse(r.tokens));
    let open = attempts.iter().any(|r| r.status == "running" || r.status == "waiting");
    let best = (!open)
        .then(|| attempts.iter().enumerate().max_by(|a, b| rank(a.1).partial_cmp(&rank(b.1)).unwrap_or(std::cmp::Ordering::Equal)))
        .flatten()
        .map(|(i, _)| i);
    let mut row = attempts[best.unwrap_or(0)].clone();
    if open {
        row.status = if attempts.iter().all(|r| r.status == "waiting") { "waiting" } else { "running" }.into();
    }
    row.index = index;
    row.best_attempt = best;
    row.attempts = attempts;
    row
}

/// Whether the conversation `conv`, an attempt of item `row`, lost: the item is decided and its
/// best attempt is another. (An undecided item has no loser yet.)
pub fn lost(row: &ItemRow, conv: &str) -> bool {
    let Some(best) = row.best_attempt.and_then(|b| row.attempts.get(b)) else { return false };
    best.conversation_id.as_deref() != Some(conv) && row.attempts.iter().any(|a| a.conversation_id.as_deref() == Some(conv))
}

/// How many rows have each status.
pub fn counts(rows: &[ItemRow]) -> BTreeMap<String, usize> {
    let mut c: BTreeMap<String, usize> = ["waiting", "running", "passed", "failed"].iter().map(|s| ((*s).to_owned(), 0)).collect();
    for r in rows {
        *c.entry(r.status.clone()).or_default() += 1;
    }
    c
}

/// The rows as CSV (RFC 4180: fields with a comma, a quote or a line break are quoted).
pub fn csv(rows: &[ItemRow]) -> String {
    let field = |s: &str| {
        if s.contains([',', '"', '\n', '\r']) { format!("\"{}\"", s.replace('"', "\"\"")) } else { s.to_owned() }
    };
    let mut out = String::from("index,status,state,verdict,score,tokens,cost_usd,duration_secs,conversation_id,round,message\r\n");
    for r in rows {
        let cells = [
            r.index.to_string(),
            r.status.clone(),
            r.state.clone().unwrap_or_default(),
            r.verdict.clone().unwrap_or_default(),
            r.score.map(|s| s.to_string()).unwrap_or_default(),
            r.tokens.to_string(),
            r.cost_usd.to_string(),
            r.duration_secs.map(|d| d.to_string()).unwrap_or_default(),
            r.conversation_id.clone().unwrap_or_default(),
            r.round.to_string(),
            r.message.clone(),
        ];
        out.push_str(&cells.iter().map(|c| field(c)).collect::<Vec<_>>().join(","));
        out.push_str("\r\n");
    }
    out
}

/// Sends the failed items of `batch` to run again (every attempt of each, in a new round) and
/// sets it running: how many items.
pub fn rerun_failed(batch: &mut Batch, failed: &[usize]) -> usize {
    let n = batch.attempts.max(1) as usize;
    for &i in failed {
        for r in batch.runs.iter_mut().skip(i * n).take(n) {
            *r = halyard_protocol::batch::ItemRun { round: r.round + 1, ..Default::default() };
        }
    }
    if !failed.is_empty() {
        batch.status = BatchStatus::Running;
    }
    failed.len()
}

/// Two batches item by item.
#[derive(Debug, Serialize, ToSchema)]
pub struct Comparison {
    /// Items (by index) `other` passes that this batch failed.
    pub fixed: Vec<usize>,
    /// Items this batch passed that `other` fails.
    pub broken: Vec<usize>,
    pub both_passed: usize,
    pub both_failed: usize,
    /// Items one of them has not finished (or that only one has).
    pub undecided: usize,
    /// In words: "B passes 7 that A failed, fails 2 that A passed".
    pub summary: String,
}

/// Compares `a`'s rows with `b`'s, item by item.
pub fn compare(a: (&str, &[ItemRow]), b: (&str, &[ItemRow])) -> Comparison {
    let (mut fixed, mut broken, mut both_passed, mut both_failed, mut undecided) = (Vec::new(), Vec::new(), 0, 0, 0);
    for i in 0..a.1.len().max(b.1.len()) {
        match (a.1.get(i).map(|r| r.status.as_str()), b.1.get(i).map(|r| r.status.as_str())) {
            (Some("passed"), Some("passed")) => both_passed += 1,
            (Some("failed"), Some("failed")) => both_failed += 1,
            (Some("failed"), Some("passed")) => fixed.push(i),
            (Some("passed"), Some("failed")) => broken.push(i),
            _ => undecided += 1,
        }
    }
    let summary = format!("{} passes {} that {} failed, fails {} that {} passed", b.0, fixed.len(), a.0, broken.len(), a.0);
    Comparison { fixed, broken, both_passed, both_failed, undecided, summary }
}
