//! A user's LLM profile tried from the settings: one small real call through it
//! (`POST /llm-profiles/{name}/test`) and the models its server lists (`GET
//! /llm-profiles/{name}/models`), each with the profile's sealed key opened as a conversation's
//! runner would. The profiles themselves are [`super::llm_profiles`].

use axum::Json;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use serde::Serialize;
use utoipa::ToSchema;

use halyard_platform::llm::LlmClient;
use halyard_platform::vault;
use halyard_protocol::UserId;
use halyard_protocol::user::LlmProfile;

use crate::auth::User;
use crate::domain::user_config::profiles;
use crate::http::api_doc::{BadGateway, Conflict, Refusals};
use crate::http::error::ApiError;
use crate::state::AppState;

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
