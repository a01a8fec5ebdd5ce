//! A user's configuration as starts and checks read it: their defaults, their LLM profiles, and
//! the agents registered for the deployment or an organization.

use halyard_protocol::UserId;
use halyard_protocol::agents::CustomAgents;
use halyard_protocol::subjects;
use halyard_protocol::user::UserLlmProfiles;
use halyard_protocol::user::UserSettings;

use crate::domain::user_store;
use crate::http::error::ApiError;
use crate::state::AppState;

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

/// The registered agents under `key` (the deployment's, or an organization's).
pub async fn registered(state: &AppState, key: &str) -> Result<CustomAgents, ApiError> {
    Ok(user_store::load::<CustomAgents>(state, key).await?.0)
}
