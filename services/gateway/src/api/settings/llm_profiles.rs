//! `/api/v1/llm-profiles`: the LLM servers a user's conversations may use, each with its
//! fallbacks (profiles that take a call its server cannot answer), the tools it offers, a test
//! call and the models its server lists. A profile's API key is sealed here and never answered
//! again (`has_api_key` says whether one is stored); the agent runner opens it when it calls.

use axum::Json;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::IntoResponse;
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use halyard_platform::llm::LlmClient;
use halyard_platform::vault;
use halyard_protocol::UserId;
use halyard_protocol::subjects;
use halyard_protocol::user::{LlmProfile, ToolSet, UserLlmProfiles};

use crate::audit::{self, Client};
use crate::auth::{Recent, User};
use crate::domain::user_config::{load, profiles};
use crate::domain::user_store::{self, check_name};
use crate::http::api_doc::{BadGateway, BodyRefusals, Conflict, Refusals};
use crate::http::error::{ApiError, ApiJson};
use crate::read_model::store::rfc3339;
use crate::state::AppState;

/// LLM profiles one user may keep.
pub const MAX_PROFILES: usize = 20;

/// An LLM profile as the API shows it: never its key, only whether one is stored.
#[derive(Debug, Serialize, ToSchema)]
#[schema(as = LlmProfile)]
pub struct ProfileView {
    pub name: String,
    /// `openai`, `anthropic`, `openai-responses` or `gemini`: the wire the server speaks.
    pub provider: String,
    pub base_url: String,
    pub model: String,
    pub has_api_key: bool,
    pub temperature: Option<f32>,
    pub max_output_tokens: Option<u64>,
    pub context_window: Option<u64>,
    /// The tools its conversations offer: `"default"`, `"gpt5"` (`apply_patch` instead of
    /// `file_editor`), or a list of built-in tool names.
    pub tools: ToolSet,
    /// Profiles that take a call this one's server cannot answer, in order.
    pub fallbacks: Vec<String>,
    pub reasoning_effort: Option<String>,
    pub thinking_budget_tokens: Option<u64>,
    pub vision: Option<bool>,
    /// The user's default (`PUT /settings`).
    pub default: bool,
    pub created_at: String,
    pub updated_at: String,
}

/// The user's LLM profiles.
#[derive(Debug, Serialize, ToSchema)]
#[schema(as = LlmProfileList)]
pub struct ProfileList {
    pub items: Vec<ProfileView>,
    /// The operator's model: what a conversation without a profile uses.
    pub operator_model: String,
}

/// What one small real call through a profile (or to an MCP server) gave.
#[derive(Debug, Serialize, ToSchema)]
pub struct ProfileTest {
    pub ok: bool,
    pub model: String,
    /// The model's words, when it answered (at most 200 characters).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub answer: Option<String>,
    /// What went wrong, in words, when it did not.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    pub latency_ms: u64,
}

pub(crate) fn profile_json(name: &str, p: &LlmProfile, default: bool) -> ProfileView {
    ProfileView {
        name: name.to_owned(),
        provider: p.provider.clone(),
        base_url: p.base_url.clone(),
        model: p.model.clone(),
        has_api_key: p.api_key_sealed.is_some(),
        temperature: p.temperature,
        max_output_tokens: p.max_output_tokens,
        context_window: p.context_window,
        tools: p.tools.clone().unwrap_or_default(),
        fallbacks: p.fallbacks.clone(),
        reasoning_effort: p.reasoning_effort.clone(),
        thinking_budget_tokens: p.thinking_budget_tokens,
        vision: p.vision,
        default,
        created_at: rfc3339(p.created_ms),
        updated_at: rfc3339(p.updated_ms),
    }
}

/// The user's LLM profiles.
#[utoipa::path(get, path = "/llm-profiles", tag = "settings", responses((status = 200, body = ProfileList), Refusals))]
pub async fn list_profiles(State(state): State<AppState>, User(user): User) -> Result<Json<ProfileList>, ApiError> {
    let default = load(&state, &user).await?.llm_profile;
    let stored = profiles(&state, &user).await?;
    let items = stored.profiles.iter().map(|(n, p)| profile_json(n, p, default.as_deref() == Some(n))).collect();
    Ok(Json(ProfileList { items, operator_model: state.config.llm.model.clone() }))
}

/// One LLM profile of the user's.
#[utoipa::path(get, path = "/llm-profiles/{name}", tag = "settings", params(("name" = String, Path)),
    responses((status = 200, body = ProfileView), Refusals))]
pub async fn get_profile(State(state): State<AppState>, User(user): User, Path(name): Path<String>) -> Result<Json<ProfileView>, ApiError> {
    let default = load(&state, &user).await?.llm_profile;
    let stored = profiles(&state, &user).await?;
    let p = stored.profiles.get(&name).ok_or_else(|| ApiError::not_found("LLM profile"))?;
    Ok(Json(profile_json(&name, p, default.as_deref() == Some(&name))))
}

/// An LLM profile, whole.
#[derive(Debug, Deserialize, ToSchema)]
#[schema(as = LlmProfileUpdate)]
#[serde(deny_unknown_fields)]
pub struct ProfileBody {
    /// `openai` (default: chat completions, which most servers speak), `anthropic` (the
    /// Messages API), `openai-responses` (OpenAI's Responses API, for models that speak only
    /// it) or `gemini` (Google's Gemini API, base URL `https://generativelanguage.googleapis.com/v1beta`).
    #[serde(default)]
    pub provider: Option<String>,
    /// The server's API root (`https://api.openai.com/v1`, ...).
    pub base_url: String,
    /// 1 to 200 characters.
    pub model: String,
    /// Write-only. Absent keeps the stored key, unless `base_url` or `provider` changes (then
    /// the stored key is dropped: it was given for the old server); `""` removes it.
    #[serde(default)]
    pub api_key: Option<String>,
    #[serde(default)]
    #[schema(minimum = 0, maximum = 2)]
    pub temperature: Option<f32>,
    #[serde(default)]
    #[schema(minimum = 1)]
    pub max_output_tokens: Option<u64>,
    #[serde(default)]
    #[schema(minimum = 1024)]
    pub context_window: Option<u64>,
    /// The tools its conversations offer: `"default"` (absent), `"gpt5"` (`apply_patch` instead
    /// of `file_editor`, the edit format OpenAI's GPT-5 models are trained on), or a list of
    /// built-in tool names (`terminal`, `file_editor`, `apply_patch`, `glob`, `grep`, `think`,
    /// `task_tracker`, `delegate`; `finish` is always offered).
    #[serde(default)]
    pub tools: Option<ToolSet>,
    /// Other profiles of yours, in order, that take a call this one's server cannot answer
    /// after its retries (5xx, 429, a timeout, a refused connection); a prompt too long for
    /// this model goes to the first with a larger `context_window`. At most 5; a name that is
    /// no profile (yet) is skipped when a conversation runs.
    #[serde(default)]
    #[schema(max_items = 5)]
    pub fallbacks: Vec<String>,
    /// `low`, `medium` or `high`: how hard an OpenAI-compatible reasoning model thinks (sent as
    /// `reasoning_effort`).
    #[serde(default)]
    pub reasoning_effort: Option<String>,
    /// Anthropic's extended thinking (Gemini's `thinkingBudget`): tokens it may use per answer (at least 1,024). Its
    /// thinking is recorded as `thinking` events and given back to the model as the API wants.
    #[serde(default)]
    #[schema(minimum = 1024)]
    pub thinking_budget_tokens: Option<u64>,
    /// Whether the model reads images (absent: it does). When it does not, the browser's
    /// screenshots are not sent to it (the user still sees them).
    #[serde(default)]
    pub vision: Option<bool>,
}

/// Fallbacks a profile may name.
const MAX_FALLBACKS: usize = 5;

fn check_profile_body(state: &AppState, name: &str, body: &ProfileBody) -> Result<String, ApiError> {
    let provider = body.provider.clone().unwrap_or_else(|| "openai".into());
    if !halyard_platform::llm::PROVIDERS.contains(&provider.as_str()) {
        let each = halyard_platform::llm::PROVIDERS.join("`, `");
        return Err(ApiError::bad_request("invalid_field", format!("`provider` {provider:?}: use `{each}`")));
    }

    crate::http::error::check_destination("base_url", &body.base_url, &state.config.llm.profile_allow, "HALYARD_LLM_PROFILE_ALLOW")?;
    if body.model.trim().is_empty() || body.model.len() > 200 {
        return Err(ApiError::bad_request("invalid_field", "`model` must be a model name of at most 200 characters"));
    }
    if body.api_key.as_ref().is_some_and(|k| k.len() > 8192 || k.contains(['\n', '\r', '\0'])) {
        return Err(ApiError::bad_request("invalid_field", "`api_key` must be one line of at most 8192 characters"));
    }
    if body.temperature.is_some_and(|t| !(0.0..=2.0).contains(&t)) {
        return Err(ApiError::bad_request("invalid_field", "`temperature` must be between 0 and 2"));
    }
    if body.max_output_tokens == Some(0) || body.context_window.is_some_and(|w| w < 1024) {
        return Err(ApiError::bad_request("invalid_field", "`max_output_tokens` must be at least 1 and `context_window` at least 1024"));
    }
    if let Some(tools) = &body.tools {
        tools.names().map_err(|e| ApiError::bad_request("invalid_field", format!("`tools`: {e}")))?;
    }
    if body.reasoning_effort.as_deref().is_some_and(|e| !["low", "medium", "high"].contains(&e)) {
        return Err(ApiError::bad_request("invalid_field", "`reasoning_effort` must be `low`, `medium` or `high`"));
    }
    if body.thinking_budget_tokens.is_some_and(|t| t < 1024) {
        return Err(ApiError::bad_request("invalid_field", "`thinking_budget_tokens` must be at least 1024"));
    }
    if body.fallbacks.len() > MAX_FALLBACKS {
        return Err(ApiError::bad_request("invalid_field", format!("`fallbacks`: at most {MAX_FALLBACKS} profiles")));
    }
    for (i, f) in body.fallbacks.iter().enumerate() {
        check_name("fallbacks", f)?;
        if f == name || body.fallbacks[..i].contains(f) {
            return Err(ApiError::bad_request(
                "invalid_field",
                format!("`fallbacks`: {f:?} is named twice, or is this profile itself; name each other profile once"),
            ));
        }
    }
    Ok(provider)
}

/// Creates (201) or replaces (200) an LLM profile (409 `too_many_llm_profiles` past 20).
#[utoipa::path(put, path = "/llm-profiles/{name}", tag = "settings", params(("name" = String, Path)), request_body = ProfileBody,
    responses((status = 200, body = ProfileView), (status = 201, body = ProfileView), Refusals, BodyRefusals, Conflict))]
pub async fn put_profile(
    State(state): State<AppState>,
    Recent(principal): Recent,
    client: Client,
    Path(name): Path<String>,
    ApiJson(body): ApiJson<ProfileBody>,
) -> Result<impl IntoResponse, ApiError> {
    let user = principal.user;
    let (created, mut view, provider) = store_profile(&state, &subjects::user_llm_key(&user), &user.0, &name, &body).await?;
    view.default = load(&state, &user).await?.llm_profile.as_deref() == Some(name.as_str());
    tracing::info!(user = %user, profile = %name, created, "LLM profile stored");
    let detail = serde_json::json!({"created": created, "provider": provider, "model": body.model, "key_changed": body.api_key.is_some()});
    audit::Action::new(&user, "llm_profile.put", &name).detail(detail).send(&state, client).await;
    Ok((if created { StatusCode::CREATED } else { StatusCode::OK }, Json(view)))
}

/// Stores profile `name` of `body` under `key` (a user's profiles or an organization's), its
/// API key sealed for `slot_owner` (the user, or `@<org>`): whether it was created, its view and
/// its provider.
pub(crate) async fn store_profile(
    state: &AppState,
    key: &str,
    slot_owner: &str,
    name: &str,
    body: &ProfileBody,
) -> Result<(bool, ProfileView, String), ApiError> {
    check_name("name", name)?;
    let provider = check_profile_body(state, name, body)?;
    let sealed = match body.api_key.as_deref() {
        Some("") | None => None,
        Some(key) => Some(state.vault.seal(&vault::llm_key_slot(slot_owner, name), key).map_err(ApiError::internal)?),
    };
    let now = halyard_platform::now_ms();
    let (created, view) = user_store::modify(state, key, |stored: &mut UserLlmProfiles| {
        let old = stored.profiles.get(name);
        if old.is_none() && stored.profiles.len() >= MAX_PROFILES {
            return Err(ApiError::conflict(
                "too_many_llm_profiles",
                format!("there are {MAX_PROFILES} LLM profiles already; delete one first"),
            ));
        }
        // A key goes only where it was given for: a profile moved to another server (or
        // provider) keeps no key unless a new one comes with the move.
        let moved = old.is_some_and(|o| o.base_url != body.base_url.trim_end_matches('/') || o.provider != provider);
        let api_key_sealed = match body.api_key.as_deref() {
            Some("") => None,
            Some(_) => sealed.clone(),
            None if moved => None,
            None => old.and_then(|o| o.api_key_sealed.clone()),
        };
        let profile = LlmProfile {
            provider: provider.clone(),
            base_url: body.base_url.trim_end_matches('/').to_owned(),
            model: body.model.clone(),
            api_key_sealed,
            temperature: body.temperature,
            max_output_tokens: body.max_output_tokens,
            context_window: body.context_window,
            tools: body.tools.clone(),
            fallbacks: body.fallbacks.clone(),
            reasoning_effort: body.reasoning_effort.clone(),
            thinking_budget_tokens: body.thinking_budget_tokens,
            vision: body.vision,
            created_ms: old.map_or(now, |o| o.created_ms),
            updated_ms: now,
        };
        let created = old.is_none();
        let view = profile_json(name, &profile, false);
        stored.profiles.insert(name.to_owned(), profile);
        Ok((created, view))
    })
    .await?;
    Ok((created, view, provider))
}

/// Deletes an LLM profile; the default of the user's settings cannot go (409 `profile_in_use`).
#[utoipa::path(delete, path = "/llm-profiles/{name}", tag = "settings", params(("name" = String, Path)),
    responses((status = 204, description = "deleted"), Refusals, Conflict))]
pub async fn delete_profile(
    State(state): State<AppState>,
    User(user): User,
    client: Client,
    Path(name): Path<String>,
) -> Result<StatusCode, ApiError> {
    if load(&state, &user).await?.llm_profile.as_deref() == Some(&name) {
        return Err(ApiError::conflict(
            "profile_in_use",
            format!("{name:?} is your default LLM profile; choose another default (PUT /api/v1/settings) first"),
        ));
    }
    let key = subjects::user_llm_key(&user);
    user_store::remove_named(&state, &key, |s: &mut UserLlmProfiles| &mut s.profiles, &name, "LLM profile").await?;
    audit::Action::new(&user, "llm_profile.delete", &name).send(&state, client).await;
    Ok(StatusCode::NO_CONTENT)
}

/// One small real call through the profile, as a conversation would make it: the answer or
/// the error in words. 200 either way: the result is what was asked for.
#[utoipa::path(post, path = "/llm-profiles/{name}/test", tag = "settings", params(("name" = String, Path)),
    responses((status = 200, body = ProfileTest), Refusals, Conflict))]
pub async fn test_profile(
    State(state): State<AppState>,
    User(user): User,
    Path(name): Path<String>,
) -> Result<Json<ProfileTest>, ApiError> {
    use halyard_platform::llm::ChatMessage;
    let stored = profiles(&state, &user).await?;
    let p = stored.profiles.get(&name).ok_or_else(|| ApiError::not_found("LLM profile"))?;
    let client = client_of(&state, &user, &name, p, Some(p.max_output_tokens.unwrap_or(16).min(16)))?;
    let messages = [
        ChatMessage::text("system", "This is a connectivity check of an LLM profile."),
        ChatMessage::text("user", "Answer with the single word OK."),
    ];
    let started = std::time::Instant::now();
    let outcome = tokio::time::timeout(std::time::Duration::from_secs(30), client.complete(&messages, &[])).await;
    let latency_ms = started.elapsed().as_millis() as u64;
    let (answer, error) = match outcome {
        Ok(Ok(c)) => (Some(c.content.unwrap_or_default().trim().chars().take(200).collect()), None),
        Ok(Err(e)) => (None, Some(e.to_string())),
        Err(_) => (None, Some("no answer within 30 s".to_owned())),
    };
    Ok(Json(ProfileTest { ok: answer.is_some(), model: p.model.clone(), answer, error, latency_ms }))
}

/// A client of `user`'s profile `name` (`p`), as a conversation's would be, for a call made
/// from here.
fn client_of(state: &AppState, user: &UserId, name: &str, p: &LlmProfile, max_output_tokens: Option<u64>) -> Result<LlmClient, ApiError> {
    let api_key = match &p.api_key_sealed {
        Some(sealed) => state.vault.open(&vault::llm_key_slot(&user.0, name), sealed).map_err(|e| {
            tracing::error!(user = %user, profile = %name, error = %e, "cannot open a profile's key");
            ApiError::conflict("llm_key_unreadable", "this profile's API key cannot be read; store it again")
        })?,
        None => String::new(),
    };
    let target = halyard_platform::llm::ProfileTarget { max_output_tokens, ..halyard_platform::llm::ProfileTarget::of(p, api_key) };
    LlmClient::new(state.config.llm.clone())
        .and_then(|base| base.for_profile(target, &state.config.llm.profile_allow))
        .map_err(|e| ApiError::bad_request("invalid_llm_profile", e.to_string()))
}

/// The models a profile's server offers.
#[derive(Debug, Serialize, ToSchema)]
#[schema(as = LlmModelList)]
pub struct ModelList {
    /// As the server lists them (OpenAI-compatible servers' `GET /models`, Anthropic's `GET
    /// /v1/models`), sorted by id.
    pub items: Vec<halyard_protocol::user::ModelInfo>,
}

/// What the profile's server offers (its API key is used, as a conversation would): for a model
/// picker. 502 `llm_models_unavailable` with the server's trouble in words when it cannot say.
#[utoipa::path(get, path = "/llm-profiles/{name}/models", tag = "settings", params(("name" = String, Path)),
    responses((status = 200, body = ModelList), Refusals, Conflict, BadGateway))]
pub async fn list_models(State(state): State<AppState>, User(user): User, Path(name): Path<String>) -> Result<Json<ModelList>, ApiError> {
    let stored = profiles(&state, &user).await?;
    let p = stored.profiles.get(&name).ok_or_else(|| ApiError::not_found("LLM profile"))?;
    let client = client_of(&state, &user, &name, p, p.max_output_tokens)?;
    match tokio::time::timeout(std::time::Duration::from_secs(30), client.models()).await {
        Ok(Ok(items)) => Ok(Json(ModelList { items })),
        Ok(Err(e)) => Err(ApiError::new(
            StatusCode::BAD_GATEWAY,
            "llm_models_unavailable",
            format!("the server of profile {name:?} did not list its models: {e}"),
        )),
        Err(_) => Err(ApiError::new(
            StatusCode::BAD_GATEWAY,
            "llm_models_unavailable",
            format!("the server of profile {name:?} did not list its models within 30 s"),
        )),
    }
}
