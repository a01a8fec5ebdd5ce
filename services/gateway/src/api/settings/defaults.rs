//! `/api/v1/settings`: a user's defaults for new conversations (the LLM profile, the
//! confirmation policy, budgets, the sandbox). The operator's LLM stays every user's default
//! profile; the profiles themselves are [`super::llm_profiles`]'s.

use axum::Json;
use axum::extract::State;
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use halyard_protocol::event::{Budget, ConfirmationPolicy};
use halyard_protocol::subjects;
use halyard_protocol::user::UserSettings;

use crate::audit::{self, Client};
use crate::auth::User;
use crate::domain::user_config::{check_profile, load};
use crate::domain::user_store;
use crate::http::api_doc::{BodyRefusals, Conflict, Refusals};
use crate::http::error::{ApiError, ApiJson};
use crate::read_model::store::rfc3339;
use crate::state::AppState;

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
    /// The agent new conversations have (Halyard's own when absent; `GET /agents`).
    pub agent: Option<String>,
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
        agent: s.agent.clone(),
        updated_at: (s.updated_ms > 0).then(|| rfc3339(s.updated_ms)),
    }
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
    /// One of `GET /agents` (`halyard`, `claude-code`, `codex`, `gemini`, `opencode`).
    #[serde(default)]
    pub agent: Option<String>,
}

/// Replaces the user's defaults (an absent field: the deployment's default).
#[utoipa::path(put, path = "/settings", tag = "settings", request_body = SettingsBody,
    responses((status = 200, body = Settings), Refusals, BodyRefusals, Conflict))]
pub async fn put_settings(
    State(state): State<AppState>,
    User(user): User,
    client: Client,
    ApiJson(body): ApiJson<SettingsBody>,
) -> Result<Json<Settings>, ApiError> {
    if let Some(p) = &body.llm_profile {
        check_profile(&state, &user, "llm_profile", p).await?;
    }
    if let Some(spec) = &body.sandbox_spec {
        crate::domain::sandbox::check_spec(&state, spec)?;
    }
    crate::http::checks::check_budget(body.max_budget_usd, body.max_tokens)?;
    if let Some(agent) = &body.agent {
        crate::domain::agents::check_default(&state, agent).await?;
    }
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
        agent: body.agent.filter(|a| a != halyard_protocol::agents::HALYARD),
        updated_ms: halyard_platform::now_ms(),
    };
    let saved = settings.clone();
    user_store::modify(&state, &subjects::user_settings_key(&user), move |s: &mut UserSettings| {
        *s = saved.clone();
        Ok(())
    })
    .await?;
    // The names of what is set, and the profile's name (settings hold no secret).
    let set: Vec<&str> = [
        ("llm_profile", settings.llm_profile.is_some()),
        ("confirmation_policy", settings.confirmation_policy.is_some()),
        ("budget", settings.budget.is_some()),
        ("max_iterations", settings.max_iterations.is_some()),
        ("sandbox_spec", settings.sandbox_spec.is_some()),
        ("agent", settings.agent.is_some()),
    ]
    .into_iter()
    .filter_map(|(n, on)| on.then_some(n))
    .collect();
    let detail = serde_json::json!({"set": set, "llm_profile": settings.llm_profile});
    audit::Action::new(&user, "settings.update", &user.0).detail(detail).send(&state, client).await;
    Ok(Json(settings_json(&settings)))
}
