//! `/api/v1/automations`: create, list, read, change and delete a user's automations, and read
//! their runs. A hook's secret is made here, shown once, and sealed before it is stored.

use axum::Json;
use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::IntoResponse;

use halyard_platform::keys;
use halyard_protocol::automation::{self as proto, Automation, AutomationRepository};
use halyard_protocol::user::UserGitProviders;
use halyard_protocol::{UserId, subjects};

use crate::audit::{self, Client};
use crate::auth::User;
use crate::domain::automations::{check_agent, check_name, check_prompt, kv_err, load, save};
use crate::domain::user_store;
use crate::http::api_doc::{BodyRefusals, Conflict, Refusals};
use crate::http::error::{ApiError, ApiJson};
use crate::read_model::layout;
use crate::read_model::rows::RunRow;
use crate::state::AppState;

use super::trigger_checks::slack_api_url;
use super::views::{AutomationList, AutomationView, CreateBody, PatchBody, RepositoryBody, RunList, RunView, RunsQuery, view};

/// Automations one user may keep.
pub const MAX_AUTOMATIONS: usize = 50;
async fn check_repository(state: &AppState, user: &UserId, r: &RepositoryBody) -> Result<AutomationRepository, ApiError> {
    let (git, _) = user_store::load::<UserGitProviders>(state, &subjects::user_git_key(user)).await?;
    if !git.providers.contains_key(&r.provider) {
        return Err(ApiError::bad_request(
            "unknown_git_provider",
            format!("`repository.provider`: you have no git provider {:?} (see GET /api/v1/git-providers)", r.provider),
        ));
    }
    let segment_ok = |s: &str| {
        !s.is_empty() && s != "." && s != ".." && s.chars().all(|c| c.is_ascii_alphanumeric() || "_.-".contains(c)) && !s.starts_with('-')
    };
    let parts: Vec<&str> = r.full_name.split('/').collect();
    if parts.len() < 2 || parts.len() > 10 || !parts.iter().all(|p| segment_ok(p)) {
        return Err(ApiError::bad_request("invalid_field", "`repository.full_name`: `owner/name`, as the forge spells it"));
    }
    if let Some(b) = &r.branch {
        if b.is_empty() || b.len() > 255 || b.starts_with('-') || b.chars().any(|c| c.is_control() || c == ' ') {
            return Err(ApiError::bad_request("invalid_field", "`repository.branch`: a branch name"));
        }
    }
    Ok(AutomationRepository { provider: r.provider.clone(), full_name: r.full_name.clone(), branch: r.branch.clone() })
}

/// Creates an automation: 201 with its `id`, its `hook_url` for kinds that receive requests,
/// and the hook's `secret` (shown once) for kinds whose requests Halyard verifies with one.
#[utoipa::path(post, path = "/automations", tag = "automations", request_body = CreateBody,
    responses((status = 201, body = AutomationView), Refusals, BodyRefusals, Conflict))]
pub async fn create(
    State(state): State<AppState>,
    User(user): User,
    client: Client,
    headers: HeaderMap,
    ApiJson(body): ApiJson<CreateBody>,
) -> Result<impl IntoResponse, ApiError> {
    check_name(&body.name)?;
    let mut body = body;
    let (signing_secret, bot_token) = body.trigger.take_credentials();
    let trigger = body.trigger.into_trigger(&state, &user, None).await?;
    if matches!(trigger, proto::Trigger::Slack { .. })
        && (signing_secret.as_deref().is_none_or(str::is_empty) || bot_token.as_deref().is_none_or(str::is_empty))
    {
        return Err(ApiError::bad_request("invalid_field", "`trigger`: a slack trigger needs the app's `signing_secret` and `bot_token`"));
    }
    check_prompt(body.prompt.as_deref(), body.template.is_some(), &trigger)?;
    if let Some(t) = &body.template {
        check_template(&state, &user, t).await?;
    }
    let repository = match &body.repository {
        Some(r) => Some(check_repository(&state, &user, r).await?),
        None => None,
    };
    if let Some(p) = &body.llm_profile {
        crate::domain::user_config::check_profile(&state, &user, "llm_profile", p).await?;
    }
    if let Some(agent) = &body.agent {
        check_agent(&state, &user, agent, body.llm_profile.as_deref()).await?;
    }
    let mine = state.automations.values().iter().filter(|a| a.owner == user).count();
    if mine >= MAX_AUTOMATIONS {
        return Err(ApiError::conflict("too_many_automations", format!("you have {mine} automations (the limit); delete one first")));
    }
    let id = uuid::Uuid::now_v7().to_string();
    // Halyard makes the hook's secret, except where the sender's platform made its own (Slack).
    let secret = (trigger.has_hook() && signing_secret.is_none()).then(keys::new_webhook_secret);
    let secret_sealed = match secret.as_ref().or(signing_secret.as_ref()) {
        Some(s) => Some(state.vault.seal(&proto::secret_slot(&id), s).map_err(ApiError::internal)?),
        None => None,
    };
    let token_sealed = match &bot_token {
        Some(t) => Some(state.vault.seal(&proto::token_slot(&id), t).map_err(ApiError::internal)?),
        None => None,
    };
    let now = halyard_platform::now_ms();
    let a = Automation {
        id,
        owner: user,
        name: body.name.trim().to_owned(),
        trigger,
        repository,
        prompt: body.prompt,
        llm_profile: body.llm_profile,
        agent: body.agent,
        template: body.template,
        enabled: body.enabled.unwrap_or(true),
        secret_sealed,
        token_sealed,
        created_ms: now,
        updated_ms: now,
    };
    save(&state, &a, None).await?;
    tracing::info!(automation_id = %a.id, user = %a.owner, kind = a.trigger.kind(), "automation created");
    let detail = serde_json::json!({"name": a.name, "kind": a.trigger.kind(), "enabled": a.enabled});
    audit::Action::new(&a.owner, "automation.create", &a.id).detail(detail).send(&state, client).await;
    Ok((StatusCode::CREATED, Json(view(&state, &headers, &a, secret))))
}

/// The user's automations, newest first, each with its last run.
#[utoipa::path(get, path = "/automations", tag = "automations", responses((status = 200, body = AutomationList), Refusals))]
pub async fn list(State(state): State<AppState>, User(user): User, headers: HeaderMap) -> Json<AutomationList> {
    let mut mine: Vec<_> = state.automations.values().into_iter().filter(|a| a.owner == user).collect();
    mine.sort_by_key(|a| std::cmp::Reverse(a.created_ms));
    Json(AutomationList { items: mine.iter().map(|a| view(&state, &headers, a, None)).collect() })
}

/// One automation (never its secret).
#[utoipa::path(get, path = "/automations/{id}", tag = "automations", params(("id" = String, Path, format = Uuid)),
    responses((status = 200, body = AutomationView), Refusals))]
pub async fn get_one(
    State(state): State<AppState>,
    User(user): User,
    headers: HeaderMap,
    Path(id): Path<String>,
) -> Result<Json<AutomationView>, ApiError> {
    let (a, _) = load(&state, &user, &id).await?;
    Ok(Json(view(&state, &headers, &a, None)))
}

/// Changes an automation (409 `concurrent_update` if it changed meanwhile).
#[utoipa::path(patch, path = "/automations/{id}", tag = "automations", params(("id" = String, Path, format = Uuid)),
    request_body = PatchBody, responses((status = 200, body = AutomationView), Refusals, BodyRefusals, Conflict))]
pub async fn patch(
    State(state): State<AppState>,
    User(user): User,
    client: Client,
    headers: HeaderMap,
    Path(id): Path<String>,
    ApiJson(body): ApiJson<PatchBody>,
) -> Result<Json<AutomationView>, ApiError> {
    let (mut a, revision) = load(&state, &user, &id).await?;
    // The names of the fields the change sets (values may be credentials: never recorded).
    let changed: Vec<&str> = [
        ("name", body.name.is_some()),
        ("trigger", body.trigger.is_some()),
        ("repository", body.repository.is_some()),
        ("prompt", body.prompt.is_some()),
        ("llm_profile", body.llm_profile.is_some()),
        ("agent", body.agent.is_some()),
        ("template", body.template.is_some()),
        ("enabled", body.enabled.is_some()),
    ]
    .into_iter()
    .filter_map(|(n, on)| on.then_some(n))
    .collect();
    if let Some(name) = body.name {
        check_name(&name)?;
        a.name = name.trim().to_owned();
    }
    let (slack_api_before, prompt_before) = (slack_api_url(&a.trigger), a.prompt.clone());
    let mut new_secret = false;
    if let Some(mut t) = body.trigger {
        let (signing_secret, bot_token) = t.take_credentials();
        new_secret = signing_secret.as_ref().is_some_and(|s| !s.is_empty());
        let t = t.into_trigger(&state, &user, Some(&a.trigger)).await?;
        if t.kind() != a.trigger.kind() {
            return Err(ApiError::bad_request(
                "invalid_field",
                format!("`trigger`: this automation is a {} one; create another automation for a {} trigger", a.trigger.kind(), t.kind()),
            ));
        }
        a.trigger = t;
        // New credentials replace the stored ones; absent, those stay.
        if let Some(s) = signing_secret.filter(|s| !s.is_empty()) {
            a.secret_sealed = Some(state.vault.seal(&proto::secret_slot(&a.id), &s).map_err(ApiError::internal)?);
        }
        if let Some(t) = bot_token.filter(|t| !t.is_empty()) {
            a.token_sealed = Some(state.vault.seal(&proto::token_slot(&a.id), &t).map_err(ApiError::internal)?);
        }
    }
    if let Some(r) = body.repository {
        a.repository = match r {
            Some(r) => Some(check_repository(&state, &user, &r).await?),
            None => None,
        };
    }
    if let Some(p) = body.prompt {
        a.prompt = p;
    }
    if let Some(t) = body.template {
        if let Some(t) = &t {
            check_template(&state, &user, t).await?;
        }
        a.template = t;
    }
    check_prompt(a.prompt.as_deref(), a.template.is_some(), &a.trigger)?;
    if let Some(p) = body.llm_profile {
        if let Some(p) = &p {
            crate::domain::user_config::check_profile(&state, &user, "llm_profile", p).await?;
        }
        a.llm_profile = p;
    }
    if let Some(agent) = body.agent {
        a.agent = agent;
    }
    // (Checked whenever either changed: the two must fit each other.)
    if let Some(agent) = a.agent.as_deref().filter(|_| changed.contains(&"agent") || changed.contains(&"llm_profile")) {
        check_agent(&state, &user, agent, a.llm_profile.as_deref()).await?;
    }
    if let Some(e) = body.enabled {
        a.enabled = e;
    }
    // Who a Slack user is, and whether they let it run as them, was said of this secret, this
    // Slack and this prompt: a change to any of them drops the links to other users.
    if new_secret || slack_api_url(&a.trigger) != slack_api_before || a.prompt != prompt_before {
        if let proto::Trigger::Slack { users, consented, .. } = &mut a.trigger {
            users.retain(|_, u| *u == user.0);
            consented.clear();
        }
    }
    a.updated_ms = halyard_platform::now_ms();
    save(&state, &a, Some(revision)).await?;
    let detail = serde_json::json!({"name": a.name, "kind": a.trigger.kind(), "enabled": a.enabled, "changed": changed});
    audit::Action::new(&user, "automation.update", &a.id).detail(detail).send(&state, client).await;
    Ok(Json(view(&state, &headers, &a, None)))
}

/// Deletes an automation: its hook refuses requests and its schedule stops.
#[utoipa::path(delete, path = "/automations/{id}", tag = "automations", params(("id" = String, Path, format = Uuid)),
    responses((status = 204, description = "deleted"), Refusals))]
pub async fn delete(
    State(state): State<AppState>,
    User(user): User,
    client: Client,
    Path(id): Path<String>,
) -> Result<StatusCode, ApiError> {
    let (a, _) = load(&state, &user, &id).await?;
    let key = subjects::automation_key(&a.id);
    state.automation_kv.delete(&key).await.map_err(kv_err)?;
    // Ids are never used again: the deletion outranks any value of the key still on its way.
    state.automations.apply_value(&key, u64::MAX, true, &[]);
    if let Err(e) = state.automation_kv.delete(subjects::automation_tick_key(&a.id)).await {
        tracing::warn!(automation_id = %a.id, error = %e, "the deleted automation's tick record stays");
    }
    tracing::info!(automation_id = %a.id, user = %a.owner, "automation deleted");
    audit::Action::new(&user, "automation.delete", &a.id).detail(serde_json::json!({"name": a.name})).send(&state, client).await;
    Ok(StatusCode::NO_CONTENT)
}

/// An automation's runs, newest first: what each request or tick started, or why nothing.
#[utoipa::path(get, path = "/automations/{id}/runs", tag = "automations", params(("id" = String, Path, format = Uuid), RunsQuery),
    responses((status = 200, body = RunList), Refusals))]
pub async fn runs(
    State(state): State<AppState>,
    User(user): User,
    Path(id): Path<String>,
    query: Result<Query<RunsQuery>, axum::extract::rejection::QueryRejection>,
) -> Result<Json<RunList>, ApiError> {
    let Query(q) = query?;
    let (a, _) = load(&state, &user, &id).await?;
    let limit = q.limit.unwrap_or(100);
    if !(1..=1000).contains(&limit) {
        return Err(ApiError::bad_request("invalid_query", "`limit` must be between 1 and 1000"));
    }
    let mut items = Vec::new();
    for entry in state.store.tree().scan_prefix(layout::run_prefix(&a.id)).take(limit) {
        let (_, v) = entry.map_err(ApiError::internal)?;
        if let Ok(item) = serde_json::from_slice::<RunRow>(&v).map(RunView::from) {
            items.push(item);
        }
    }
    Ok(Json(RunList { items }))
}

/// An automation names one of its owner's own templates: its runs happen later, when an
/// organization's could no longer be the owner's to use.
async fn check_template(state: &AppState, user: &UserId, name: &str) -> Result<(), ApiError> {
    if name.starts_with('@') {
        return Err(ApiError::bad_request(
            "invalid_field",
            "`template`: an automation names one of your own templates (`GET /templates`); copy the organization's into yours",
        ));
    }
    crate::api::settings::templates::template_of(state, user, name).await.map(drop)
}
