//! `GET /api/v1/repositories?q=`: the repositories the user's git providers' tokens reach, for
//! the UI's repository picker. Every provider with a repository API is asked at once; one that
//! fails is named in `errors` with what to do, and the others still answer. And
//! `GET /api/v1/repositories/branches?provider=&repository=`: one repository's branches and
//! which is the default, for the branch picker.

use axum::Json;
use axum::extract::rejection::QueryRejection;
use axum::extract::{Query, State};
use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};

use halyard_platform::forge::{self, Forge};
use halyard_platform::vault;
use halyard_protocol::subjects;
use halyard_protocol::user::UserGitProviders;

use crate::auth::User;
use crate::domain::user_store;
use crate::http::api_doc::{BadGateway, Conflict, Refusals};
use crate::http::error::ApiError;
use crate::state::AppState;

#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub struct RepositoryQuery {
    /// Part of the repository's full name (`owner/name`), any case (up to 200 characters).
    #[serde(default)]
    #[param(max_length = 200)]
    pub q: String,
    /// Only this provider.
    #[serde(default)]
    pub provider: Option<String>,
}

/// The repositories the user's git providers reach, and the providers that could not answer.
#[derive(Debug, Serialize, ToSchema)]
#[schema(as = RepositoryList)]
pub struct RepositoryList {
    pub items: Vec<Repository>,
    pub errors: Vec<ProviderError>,
}

/// A git provider that could not list its repositories, and what to do.
#[derive(Debug, Serialize, ToSchema)]
pub struct ProviderError {
    pub provider: String,
    pub message: String,
}

/// The repositories the user's git providers' tokens reach (each provider with a repository
/// API, asked at once); one that fails is named in `errors`.
#[utoipa::path(get, path = "/repositories", tag = "settings", params(RepositoryQuery),
    responses((status = 200, body = RepositoryList), Refusals))]
pub async fn list(
    State(state): State<AppState>,
    User(user): User,
    query: Result<Query<RepositoryQuery>, QueryRejection>,
) -> Result<Json<RepositoryList>, ApiError> {
    let Query(query) = query?;
    if query.q.chars().count() > 200 {
        return Err(ApiError::bad_request("invalid_field", "`q` is longer than 200 characters"));
    }
    let (stored, _) = user_store::load::<UserGitProviders>(&state, &subjects::user_git_key(&user)).await?;
    if let Some(name) = query.provider.as_deref().filter(|n| !stored.providers.contains_key(*n)) {
        return Err(ApiError::bad_request(
            "unknown_git_provider",
            format!("you have no git provider {name:?} (see GET /api/v1/git-providers)"),
        ));
    }
    let selected: Vec<_> = stored
        .providers
        .iter()
        .filter(|(name, p)| query.provider.as_deref().is_none_or(|n| n == name.as_str()) && forge::api_base(p).is_some())
        .collect();
    let asks = selected.iter().map(|(name, p)| {
        let (state, q) = (&state, query.q.as_str());
        let token = state.vault.open(&vault::git_token_slot(&user.0, name), &p.token_sealed);
        async move {
            let token = token.map_err(|_| format!("the token of git provider `{name}` cannot be read; store it again"))?;
            let forge = Forge::new(p, &token, &state.config.gateway.git_api_allow).map_err(|e| e.to_string())?;
            forge.repositories(name, q).await.map_err(|e| e.to_string())
        }
    });
    let answers = futures::future::join_all(asks).await;
    let mut items = Vec::new();
    let mut errors = Vec::new();
    for ((name, _), answer) in selected.iter().zip(answers) {
        match answer {
            Ok(found) => items.extend(found.into_iter().map(Repository::from)),
            Err(message) => {
                tracing::info!(user = %user, provider = %name, error = %message, "repository listing failed");
                errors.push(ProviderError { provider: (*name).clone(), message });
            }
        }
    }
    Ok(Json(RepositoryList { items, errors }))
}

#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub struct BranchesQuery {
    /// One of the user's git providers.
    pub provider: String,
    /// `owner/name` (GitLab: `group/subgroup/name`).
    pub repository: String,
}

/// One repository's branches and which is the default, from its forge (502 `forge_error` when
/// the forge fails).
#[utoipa::path(get, path = "/repositories/branches", tag = "settings", params(BranchesQuery),
    responses((status = 200, body = Branches), Refusals, Conflict, BadGateway))]
pub async fn branches(
    State(state): State<AppState>,
    User(user): User,
    query: Result<Query<BranchesQuery>, QueryRejection>,
) -> Result<Json<Branches>, ApiError> {
    let Query(query) = query?;
    let full_name = query.repository.trim().trim_matches('/').trim_end_matches(".git").to_owned();
    if full_name.is_empty() || full_name.len() > 300 || !full_name.contains('/') || full_name.split('/').any(|p| p.is_empty() || p == "..")
    {
        return Err(ApiError::bad_request("invalid_field", "`repository` is the repository's `owner/name`"));
    }
    let (stored, _) = user_store::load::<UserGitProviders>(&state, &subjects::user_git_key(&user)).await?;
    let provider = stored.providers.get(&query.provider).ok_or_else(|| {
        ApiError::bad_request(
            "unknown_git_provider",
            format!("you have no git provider {:?} (see GET /api/v1/git-providers)", query.provider),
        )
    })?;
    let token = state.vault.open(&vault::git_token_slot(&user.0, &query.provider), &provider.token_sealed).map_err(|_| {
        ApiError::conflict("git_token_unreadable", format!("the token of git provider `{}` cannot be read; store it again", query.provider))
    })?;
    let forge_error = |e: forge::ForgeError| ApiError::new(axum::http::StatusCode::BAD_GATEWAY, "forge_error", e.to_string());
    let forge = Forge::new(provider, &token, &state.config.gateway.git_api_allow).map_err(forge_error)?;
    forge.branches(&full_name).await.map(|b| Json(Branches::from(b))).map_err(forge_error)
}

/// A repository a git provider's token reaches.
#[derive(Debug, Serialize, ToSchema)]
pub struct Repository {
    /// The user's git provider that reaches it.
    pub provider: String,
    /// `owner/name` (GitLab: `group/subgroup/name`).
    pub full_name: String,
    /// What a conversation's `repository.url` takes.
    pub clone_url: String,
    pub default_branch: String,
    pub private: bool,
    pub description: Option<String>,
}

impl From<forge::Repository> for Repository {
    fn from(r: forge::Repository) -> Self {
        let forge::Repository { provider, full_name, clone_url, default_branch, private, description } = r;
        Self { provider, full_name, clone_url, default_branch, private, description }
    }
}

/// A repository's branches and which is the default.
#[derive(Debug, Serialize, ToSchema)]
pub struct Branches {
    pub repository: String,
    pub default_branch: String,
    /// The first hundred.
    pub branches: Vec<BranchView>,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct BranchView {
    pub name: String,
    pub protected: bool,
}

impl From<forge::Branches> for Branches {
    fn from(b: forge::Branches) -> Self {
        let branches = b.branches.into_iter().map(|b| BranchView { name: b.name, protected: b.protected }).collect();
        Self { repository: b.repository, default_branch: b.default_branch, branches }
    }
}
