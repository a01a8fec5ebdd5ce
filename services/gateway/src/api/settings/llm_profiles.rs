//! `/api/v1/llm-profiles`: the LLM servers a user's conversations may use, each with its
//! fallbacks (profiles that take a call its server cannot answer) and the tools it offers (a
//! test call and the models its server lists: [`super::llm_probe`]). A profile's API key is sealed here and never answered
//! again (`has_api_key` says whether one is stored); the agent runner opens it when it calls.

use axum::Json;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::IntoResponse;
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use halyard_platform::vault;
use halyard_protocol::subjects;
use halyard_protocol::user::{LlmProfile, ToolSet, UserLlmProfiles};

use crate::audit::{self, Client};
use crate::auth::{Recent, User};
use crate::domain::user_config::{load, profiles};
use crate::domain::user_store::{self, check_name};
use crate::http::api_doc::{BodyRefusals, Conflict, Refusals};
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
