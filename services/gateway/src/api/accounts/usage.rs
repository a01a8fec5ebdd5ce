//! Usage reports: what users spent, from the read model's daily rows (one per user, day and
//! model, kept by the projection as LLM calls, starts and sandbox runs are read from the bus, so
//! a report never scans a log; and the same per organization for its conversations, and for the
//! deployment, each ordered by day so that a report reads the days it covers and no others). `GET
//! /api/v1/me/usage` for one's own, `GET /api/v1/orgs/{org}/usage` for an organization's owners
//! and admins, `GET /api/v1/admin/usage` for operators; grouped by user, model or day, between
//! two times, as JSON or CSV.

use std::collections::BTreeMap;

use axum::Json;
use axum::extract::{Path, Query, State};
use axum::http::header;
use axum::response::{IntoResponse, Response};
use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};

use crate::auth::{Admin, User};
use crate::http::api_doc::Refusals;
use crate::http::error::ApiError;
use crate::read_model::layout;
use crate::read_model::store::{UsageRow, rfc3339};
use crate::state::AppState;

/// What to report.
#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct UsageQuery {
    /// From this day or time (`2026-11-01` or RFC 3339; default: the first of this month, UTC).
    pub from: Option<String>,
    /// Until this day or time, not included (default: now).
    pub to: Option<String>,
    /// `user`, `model` or `day` (default `day`; `user` only for operators).
    pub group_by: Option<String>,
    /// `json` (default) or `csv`.
    pub format: Option<String>,
}

/// One group's usage.
#[derive(Debug, Serialize, ToSchema)]
pub struct UsageLine {
    /// The group: a user, a model (empty: what belongs to no model, such as starts and sandbox
    /// time), or a day (`YYYY-MM-DD`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub user: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub day: Option<String>,
    pub tokens_in: u64,
    pub tokens_out: u64,
    pub cached_tokens: u64,
    pub cost_usd: f64,
    pub conversations: u64,
    pub llm_calls: u64,
    pub sandbox_seconds: u64,
}

/// A usage report.
#[derive(Debug, Serialize, ToSchema)]
pub struct UsageReport {
    pub from: String,
    pub to: String,
    pub group_by: String,
    pub rows: Vec<UsageLine>,
    /// The sum of every row.
    pub total: UsageLine,
}

#[derive(Clone, Copy, PartialEq)]
enum Group {
    User,
    Model,
    Day,
}

/// A day (`2026-11-01`, midnight UTC) or an RFC 3339 time, in ms.
fn instant(field: &str, v: &str) -> Result<i64, ApiError> {
    let as_day = (v.len() == 10).then(|| halyard_platform::parse_rfc3339(&format!("{v}T00:00:00Z"))).flatten();
    as_day.or_else(|| halyard_platform::parse_rfc3339(v)).ok_or_else(|| {
        ApiError::bad_request("invalid_query", format!("`{field}` is a day (2026-11-01) or a time as RFC 3339 (2026-11-01T00:00:00Z)"))
    })
}

fn line(group: Group, key: &str, r: &UsageRow) -> UsageLine {
    let name = |g: Group| (group == g).then(|| key.to_owned());
    UsageLine {
        user: name(Group::User),
        model: name(Group::Model),
        day: name(Group::Day),
        tokens_in: r.tokens_in,
        tokens_out: r.tokens_out,
        cached_tokens: r.cached_tokens,
        cost_usd: (r.cost_usd * 1e6).round() / 1e6,
        conversations: r.conversations,
        llm_calls: r.llm_calls,
        sandbox_seconds: r.sandbox_seconds,
    }
}

/// The report of the rows in `scope` (a user's, an organization's, or all users').
fn report(state: &AppState, scope: layout::UsageScope<'_>, q: UsageQuery, may_group_by_user: bool) -> Result<Response, ApiError> {
    let group = match q.group_by.as_deref().unwrap_or("day") {
        "day" => Group::Day,
        "model" => Group::Model,
        "user" if may_group_by_user => Group::User,
        other => {
            let allowed = if may_group_by_user { "user, model or day" } else { "model or day" };
            return Err(ApiError::bad_request("invalid_query", format!("`group_by` {other:?}: use {allowed}")));
        }
    };
    let csv = match q.format.as_deref() {
        None | Some("json") => false,
        Some("csv") => true,
        Some(other) => return Err(ApiError::bad_request("invalid_query", format!("`format` {other:?}: use json or csv"))),
    };
    let now = halyard_platform::now_ms();
    let month_start = halyard_platform::parse_rfc3339(&format!("{}-01T00:00:00Z", &rfc3339(now)[..7])).unwrap_or(0);
    let from = q.from.as_deref().map(|v| instant("from", v)).transpose()?.unwrap_or(month_start);
    let to = q.to.as_deref().map(|v| instant("to", v)).transpose()?.unwrap_or(now + 1);
    if to <= from {
        return Err(ApiError::bad_request("invalid_query", "`to` must come after `from`"));
    }
    // Whole days: a day counts if it begins before `to` and ends after `from`. Only those
    // days' rows are read: the scope's keys are ordered by day.
    let (first, end) = (layout::day_of(from), layout::day_of(to - 1) + 1);
    let mut groups: BTreeMap<String, UsageRow> = BTreeMap::new();
    for entry in state.store.tree().range(scope.days(first, end)) {
        let (k, v) = entry.map_err(ApiError::internal)?;
        let Some((who, day, model)) = scope.parts(&k) else { continue };
        let Ok(row) = serde_json::from_slice::<UsageRow>(&v) else { continue };
        let key = match group {
            Group::User => who,
            Group::Model => model,
            Group::Day => rfc3339(day)[..10].to_owned(),
        };
        groups.entry(key).or_default().add(&row);
    }
    let mut total = UsageRow::default();
    for r in groups.values() {
        total.add(r);
    }
    let group_name = match group {
        Group::User => "user",
        Group::Model => "model",
        Group::Day => "day",
    };
    let rows: Vec<UsageLine> = groups.iter().map(|(k, r)| line(group, k, r)).collect();
    if csv {
        let mut out = format!("{group_name},tokens_in,tokens_out,cached_tokens,cost_usd,conversations,llm_calls,sandbox_seconds\n");
        for (k, r) in &groups {
            let l = line(group, k, r);
            let name = csv_cell(k);
            out.push_str(&format!(
                "{name},{},{},{},{},{},{},{}\n",
                l.tokens_in, l.tokens_out, l.cached_tokens, l.cost_usd, l.conversations, l.llm_calls, l.sandbox_seconds
            ));
        }
        return Ok(([(header::CONTENT_TYPE, "text/csv; charset=utf-8")], out).into_response());
    }
    let mut total = line(Group::Day, "", &total);
    total.day = None;
    Ok(Json(UsageReport { from: rfc3339(from), to: rfc3339(to), group_by: group_name.to_owned(), rows, total }).into_response())
}

/// Your own usage: tokens, cost, conversations, LLM calls and sandbox seconds, by day or model.
#[utoipa::path(get, path = "/me/usage", tag = "accounts", params(UsageQuery),
    responses((status = 200, body = UsageReport, description = "the report (or, with `format=csv`, the same as CSV)"), Refusals))]
pub async fn mine(
    State(state): State<AppState>,
    User(user): User,
    query: Result<Query<UsageQuery>, axum::extract::rejection::QueryRejection>,
) -> Result<Response, ApiError> {
    let Query(q) = query?;
    report(&state, layout::UsageScope::User(&user.0), q, false)
}

/// Every user's usage (administrators only), by user, model or day.
#[utoipa::path(get, path = "/admin/usage", tag = "admin", params(UsageQuery),
    responses((status = 200, body = UsageReport, description = "the report (or, with `format=csv`, the same as CSV)"), Refusals))]
pub async fn all(
    State(state): State<AppState>,
    _: Admin,
    query: Result<Query<UsageQuery>, axum::extract::rejection::QueryRejection>,
) -> Result<Response, ApiError> {
    let Query(q) = query?;
    report(&state, layout::UsageScope::All, q, true)
}

/// What the organization's conversations used (its owners and admins), by member, model or day.
#[utoipa::path(get, path = "/orgs/{org}/usage", tag = "orgs", params(("org" = String, Path), UsageQuery),
    responses((status = 200, body = UsageReport, description = "the report (or, with `format=csv`, the same as CSV)"), Refusals))]
pub async fn org(
    State(state): State<AppState>,
    User(user): User,
    Path(name): Path<String>,
    query: Result<Query<UsageQuery>, axum::extract::rejection::QueryRejection>,
) -> Result<Response, ApiError> {
    let (_, org) = crate::auth::access::load_managed(&state, &user, &name, "the organization's owners and admins read its usage")?;
    let Query(q) = query?;
    report(&state, layout::UsageScope::Org(&org.name), q, true)
}

/// `value` as one CSV cell a spreadsheet shows as text: a model id is whatever a provider or an
/// organization's price table says, so one starting with `=`, `+`, `-`, `@` (or a tab or carriage
/// return) would be run as a formula when the file is opened; it is given a leading `'`
/// (OWASP's advice), and quoted when it holds a comma, a quote or a line break.
pub(crate) fn csv_cell(value: &str) -> String {
    let mut cell = value.to_owned();
    if cell.starts_with(['=', '+', '-', '@', '\t', '\r']) {
        cell.insert(0, '\'');
    }
    if cell.contains([',', '"', '\n', '\r']) { format!("\"{}\"", cell.replace('"', "\"\"")) } else { cell }
}

#[cfg(test)]
mod tests {
    use super::csv_cell;

    #[test]
    fn formulas_are_text_and_commas_are_quoted() {
        assert_eq!(csv_cell("gpt-4o"), "gpt-4o");
        assert_eq!(csv_cell("=HYPERLINK(\"http://x\")"), "\"'=HYPERLINK(\"\"http://x\"\")\"");
        assert_eq!(csv_cell("+1"), "'+1");
        assert_eq!(csv_cell("-2+3"), "'-2+3");
        assert_eq!(csv_cell("@SUM(A1)"), "'@SUM(A1)");
        assert_eq!(csv_cell("a,b"), "\"a,b\"");
        assert_eq!(csv_cell("2026-11-27"), "2026-11-27");
    }
}
