//! `/api/v1/settings` and `/api/v1/llm-profiles`: a user's defaults for new conversations, and
//! the LLM servers their conversations may use. A profile's API key is sealed here and never
//! answered again (`has_api_key` says whether one is stored); the agent runner opens it when
//! it calls. The operator's LLM stays every user's default profile.

use axum::Json;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::IntoResponse;
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use halyard_platform::vault;
use halyard_protocol::UserId;
use halyard_protocol::event::{Budget, ConfirmationPolicy};
use halyard_protocol::subjects;
use halyard_protocol::user::{LlmProfile, ToolSet, UserLlmProfiles, UserSettings};

use crate::AppState;
use crate::accounts::auth::User;
use crate::api_doc::{BodyRefusals, Conflict, Refusals};
use crate::error::{ApiError, ApiJson};
use crate::settings::user_store::{self, check_name};
use crate::store::rfc3339;

/// LLM profiles one user may keep.
pub const MAX_PROFILES: usize = 20;

/// A user's defaults for new conversations; absent: the deployment's.
#[derive(Debug, Serialize, ToSchema)]
pub struct Settings {
    /// The LLM profile new conversations use (the operator's model when absent).
    pub llm_profile: Option<String>,
    pub confirmation_policy: Option<ConfirmationPolicy>,
    pub max_budget_usd: Option<f64>,
    pub max_tokens: Option<u64>,
    pub max_iterations: Option<u32>,
    pub sandbox_spec: Option<String>,
    /// Absent until first saved.
    pub updated_at: Option<String>,
}

fn settings_json(s: &UserSettings) -> Settings {
    let budget = s.budget.clone().unwrap_or_default();
    Settings {
        llm_profile: s.llm_profile.clone(),
        confirmation_policy: s.confirmation_policy,
        max_budget_usd: budget.max_budget_usd,
        max_tokens: budget.max_tokens,
        max_iterations: s.max_iterations,
        sandbox_spec: s.sandbox_spec.clone(),
        updated_at: (s.updated_ms > 0).then(|| rfc3339(s.updated_ms)),
    }
}

/// A user's settings (defaults if they never saved any).
pub async fn load(state: &AppState, user: &UserId) -> Result<UserSettings, ApiError> {
    Ok(user_store::load::<UserSettings>(state, &subjects::user_settings_key(user)).await?.0)
}

/// A user's LLM profiles.
pub async fn profiles(state: &AppState, user: &UserId) -> Result<UserLlmProfiles, ApiError> {
    Ok(user_store::load::<UserLlmProfiles>(state, &subjects::user_llm_key(user)).await?.0)
}

/// Checks that `name` is one of the user's profiles (for a start or a switch).
pub async fn check_profile(state: &AppState, user: &UserId, field: &str, name: &str) -> Result<(), ApiError> {
    if profiles(state, user).await?.profiles.contains_key(name) {
        return Ok(());
    }
    Err(ApiError::bad_request("unknown_llm_profile", format!("`{field}`: you have no LLM profile {name:?} (see GET /api/v1/llm-profiles)")))
}

/// The user's defaults for new conversations.
#[utoipa::path(get, path = "/settings", tag = "settings", responses((status = 200, body = Settings), Refusals))]
pub async fn get_settings(State(state): State<AppState>, User(user): User) -> Result<Json<Settings>, ApiError> {
    Ok(Json(settings_json(&load(&state, &user).await?)))
}

/// The user's defaults, whole: an absent field is the deployment's default.
#[derive(Debug, Deserialize, ToSchema)]
#[schema(as = SettingsUpdate)]
#[serde(deny_unknown_fields)]
pub struct SettingsBody {
    #[serde(default)]
    pub llm_profile: Option<String>,
    #[serde(default)]
    pub confirmation_policy: Option<ConfirmationPolicy>,
    /// US dollars a conversation may spend on its model (more than 0).
    #[serde(default)]
    #[schema(exclusive_minimum = 0)]
    pub max_budget_usd: Option<f64>,
    #[serde(default)]
    #[schema(minimum = 1)]
    pub max_tokens: Option<u64>,
    /// Agent steps per run.
    #[serde(default)]
    #[schema(minimum = 1)]
    pub max_iterations: Option<u32>,
    /// One of `GET /sandbox-specs`.
    #[serde(default)]
    pub sandbox_spec: Option<String>,
}

/// Replaces the user's defaults (an absent field: the deployment's default).
#[utoipa::path(put, path = "/settings", tag = "settings", request_body = SettingsBody,
    responses((status = 200, body = Settings), Refusals, BodyRefusals, Conflict))]
pub async fn put_settings(
    State(state): State<AppState>,
    User(user): User,
    ApiJson(body): ApiJson<SettingsBody>,
) -> Result<Json<Settings>, ApiError> {
    if let Some(p) = &body.llm_profile {
        check_profile(&state, &user, "llm_profile", p).await?;
    }
    if let Some(spec) = &body.sandbox_spec {
        crate::common::check_spec(&state, spec)?;
    }
    crate::common::check_budget(body.max_budget_usd, body.max_tokens)?;
    if body.max_iterations == Some(0) {
        return Err(ApiError::bad_request("invalid_field", "`max_iterations` must be at least 1"));
    }
    let budget = (body.max_budget_usd.is_some() || body.max_tokens.is_some())
        .then_some(Budget { max_budget_usd: body.max_budget_usd, max_tokens: body.max_tokens });
    let settings = UserSettings {
        llm_profile: body.llm_profile,
        confirmation_policy: body.confirmation_policy,
        budget,
        max_iterations: body.max_iterations,
        sandbox_spec: body.sandbox_spec,
        updated_ms: halyard_platform::now_ms(),
    };
    let saved = settings.clone();
    user_store::modify(&state, &subjects::user_settings_key(&user), move |s: &mut UserSettings| {
        *s = saved.clone();
        Ok(())
    })
    .await?;
    Ok(Json(settings_json(&settings)))
}

/// An LLM profile as the API shows it: never its key, only whether one is stored.
#[derive(Debug, Serialize, ToSchema)]
#[schema(as = LlmProfile)]
pub struct ProfileView {
    pub name: String,
    /// `openai` or `anthropic`: the wire the server speaks.
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

fn profile_json(name: &str, p: &LlmProfile, default: bool) -> ProfileView {
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
    /// `openai` (default) or `anthropic`.
    #[serde(default)]
    pub provider: Option<String>,
    /// The server's API root (`https://api.openai.com/v1`, ...).
    pub base_url: String,
    /// 1 to 200 characters.
    pub model: String,
    /// Write-only. Absent keeps the stored key; `""` removes it.
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
}

fn check_profile_body(state: &AppState, body: &ProfileBody) -> Result<String, ApiError> {
    let provider = body.provider.clone().unwrap_or_else(|| "openai".into());
    if !["openai", "anthropic"].contains(&provider.as_str()) {
        return Err(ApiError::bad_request("invalid_field", format!("`provider` {provider:?}: use `openai` or `anthropic`")));
    }
    crate::error::check_destination("base_url", &body.base_url, &state.config.llm.profile_allow, "HALYARD_LLM_PROFILE_ALLOW")?;
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
    Ok(provider)
}

/// Creates (201) or replaces (200) an LLM profile (409 `too_many_llm_profiles` past 20).
#[utoipa::path(put, path = "/llm-profiles/{name}", tag = "settings", params(("name" = String, Path)), request_body = ProfileBody,
    responses((status = 200, body = ProfileView), (status = 201, body = ProfileView), Refusals, BodyRefusals, Conflict))]
pub async fn put_profile(
    State(state): State<AppState>,
    User(user): User,
    Path(name): Path<String>,
    ApiJson(body): ApiJson<ProfileBody>,
) -> Result<impl IntoResponse, ApiError> {
    check_name("name", &name)?;
    let provider = check_profile_body(&state, &body)?;
    let sealed = match body.api_key.as_deref() {
        Some("") | None => None,
        Some(key) => Some(state.vault.seal(&vault::llm_key_slot(&user.0, &name), key).map_err(ApiError::internal)?),
    };
    let now = halyard_platform::now_ms();
    let (created, view) = user_store::modify(&state, &subjects::user_llm_key(&user), |stored: &mut UserLlmProfiles| {
        let old = stored.profiles.get(&name);
        if old.is_none() && stored.profiles.len() >= MAX_PROFILES {
            return Err(ApiError::conflict(
                "too_many_llm_profiles",
                format!("you have {MAX_PROFILES} LLM profiles already; delete one first"),
            ));
        }
        let api_key_sealed = match body.api_key.as_deref() {
            Some("") => None,
            Some(_) => sealed.clone(),
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
            created_ms: old.map_or(now, |o| o.created_ms),
            updated_ms: now,
        };
        let created = old.is_none();
        let view = profile_json(&name, &profile, false);
        stored.profiles.insert(name.clone(), profile);
        Ok((created, view))
    })
    .await?;
    let mut view = view;
    view.default = load(&state, &user).await?.llm_profile.as_deref() == Some(name.as_str());
    tracing::info!(user = %user, profile = %name, created, "LLM profile stored");
    Ok((if created { StatusCode::CREATED } else { StatusCode::OK }, Json(view)))
}

/// Deletes an LLM profile; the default of the user's settings cannot go (409 `profile_in_use`).
#[utoipa::path(delete, path = "/llm-profiles/{name}", tag = "settings", params(("name" = String, Path)),
    responses((status = 204, description = "deleted"), Refusals, Conflict))]
pub async fn delete_profile(State(state): State<AppState>, User(user): User, Path(name): Path<String>) -> Result<StatusCode, ApiError> {
    if load(&state, &user).await?.llm_profile.as_deref() == Some(&name) {
        return Err(ApiError::conflict(
            "profile_in_use",
            format!("{name:?} is your default LLM profile; choose another default (PUT /api/v1/settings) first"),
        ));
    }
    let key = subjects::user_llm_key(&user);
    user_store::remove_named(&state, &key, |s: &mut UserLlmProfiles| &mut s.profiles, &name, "LLM profile").await?;
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
    use halyard_platform::llm::{ChatMessage, LlmClient, ProfileTarget};
    let stored = profiles(&state, &user).await?;
    let p = stored.profiles.get(&name).ok_or_else(|| ApiError::not_found("LLM profile"))?;
    let api_key = match &p.api_key_sealed {
        Some(sealed) => state.vault.open(&vault::llm_key_slot(&user.0, &name), sealed).map_err(|e| {
            tracing::error!(user = %user, profile = %name, error = %e, "cannot open a profile's key");
            ApiError::conflict("llm_key_unreadable", "this profile's API key cannot be read; store it again")
        })?,
        None => String::new(),
    };
    let target = ProfileTarget {
        provider: p.provider.clone(),
        base_url: p.base_url.clone(),
        model: p.model.clone(),
        api_key,
        temperature: p.temperature,
        max_output_tokens: Some(p.max_output_tokens.unwrap_or(16).min(16)),
        context_window: p.context_window,
    };
    let client = LlmClient::new(state.config.llm.clone())
        .and_then(|base| base.for_profile(target, &state.config.llm.profile_allow))
        .map_err(|e| ApiError::bad_request("invalid_llm_profile", e.to_string()))?;
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
