//! `/api/v1/git-providers`: a user's access to their git hosts. The token is sealed here and
//! never answered again; the conversation manager opens it to clone a private repository of
//! that host, and the agent runner masks it in everything a conversation records.

use axum::Json;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::IntoResponse;
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use halyard_platform::forge;
use halyard_platform::vault;
use halyard_protocol::subjects;
use halyard_protocol::user::{GitProvider, UserGitProviders};

use crate::audit::{self, Client};
use crate::auth::{Recent, User};
use crate::domain::user_store::{self, check_name};
use crate::http::api_doc::{BodyRefusals, Conflict, Refusals};
use crate::http::error::{ApiError, ApiJson};
use crate::read_model::store::rfc3339;
use crate::state::AppState;

/// Providers one user may keep.
pub const MAX_PROVIDERS: usize = 20;

/// A git provider, whole (the token may be left out to keep the stored one).
#[derive(Debug, Deserialize, ToSchema)]
#[schema(as = GitProviderUpdate)]
#[serde(deny_unknown_fields)]
pub struct PutBody {
    /// `github` (default), `gitlab`, `forgejo` (Forgejo or Gitea, any host), `bitbucket`
    /// (Bitbucket Cloud on `bitbucket.org`: an app password or API token with `username`, or a
    /// workspace or repository access token without; Bitbucket Data Center on any other host: an
    /// HTTP access token, with your `username`), `azure_devops` or `generic`.
    #[serde(default)]
    pub kind: Option<String>,
    /// `host` or `host:port` of the repositories' URLs (`github.com` for GitHub's kind).
    #[serde(default)]
    pub host: Option<String>,
    /// Sent with the token (default per kind).
    #[serde(default)]
    pub username: Option<String>,
    /// Write-only; required for a new provider, absent keeps the stored one.
    #[serde(default)]
    pub token: Option<String>,
    /// The host's REST API, where it is not the kind's default (a GitHub-compatible forge).
    #[serde(default)]
    pub api_url: Option<String>,
}

/// A git provider as the API shows it: never its token.
#[derive(Debug, Serialize, ToSchema)]
#[schema(as = GitProvider)]
pub struct ProviderView {
    pub name: String,
    /// `github`, `gitlab`, `forgejo`, `bitbucket` or `generic`.
    pub kind: String,
    pub host: String,
    pub username: String,
    pub has_token: bool,
    /// The REST API the repository list and the agent's forge tools call, if the kind has one.
    pub api_url: Option<String>,
    pub created_at: String,
    pub updated_at: String,
}

/// The user's git providers.
#[derive(Debug, Serialize, ToSchema)]
#[schema(as = GitProviderList)]
pub struct ProviderList {
    pub items: Vec<ProviderView>,
}

pub(crate) fn public(name: &str, p: &GitProvider) -> ProviderView {
    ProviderView {
        name: name.to_owned(),
        kind: p.kind.clone(),
        host: p.host.clone(),
        username: p.username.clone(),
        has_token: true,
        api_url: forge::api_base(p),
        created_at: rfc3339(p.created_ms),
        updated_at: rfc3339(p.updated_ms),
    }
}

fn default_host(kind: &str) -> Option<&'static str> {
    match kind {
        "github" => Some("github.com"),
        "gitlab" => Some("gitlab.com"),
        "bitbucket" => Some("bitbucket.org"),
        "azure_devops" => Some("dev.azure.com"),
        _ => None,
    }
}

fn default_username(kind: &str) -> &'static str {
    match kind {
        "gitlab" => "oauth2",
        // An access token's name; an app password goes with the account's own (give `username`).
        "bitbucket" => forge::BITBUCKET_TOKEN_USER,
        // Azure DevOps takes a personal access token with any name.
        "azure_devops" => "pat",
        _ => "x-access-token",
    }
}

fn check_host(host: &str) -> Result<(), ApiError> {
    let (name, port) = host.rsplit_once(':').map_or((host, None), |(h, p)| (h, Some(p)));
    let ok = (1..=253).contains(&name.len())
        && name.chars().all(|c| c.is_ascii_alphanumeric() || ".-".contains(c))
        && port.is_none_or(|p| p.parse::<u16>().is_ok_and(|n| n > 0));
    if ok {
        Ok(())
    } else {
        Err(ApiError::bad_request(
            "invalid_field",
            format!("`host` {host:?}: give the host of the repositories' URLs, as `host` or `host:port`"),
        ))
    }
}

/// The user's git providers (never their tokens).
#[utoipa::path(get, path = "/git-providers", tag = "settings", responses((status = 200, body = ProviderList), Refusals))]
pub async fn list(State(state): State<AppState>, User(user): User) -> Result<Json<ProviderList>, ApiError> {
    let items = user_store::list_named(&state, &subjects::user_git_key(&user), |s: &UserGitProviders| &s.providers, public).await?;
    Ok(Json(ProviderList { items }))
}

/// One git provider of the user's.
#[utoipa::path(get, path = "/git-providers/{name}", tag = "settings", params(("name" = String, Path)),
    responses((status = 200, body = ProviderView), Refusals))]
pub async fn get_one(State(state): State<AppState>, User(user): User, Path(name): Path<String>) -> Result<Json<ProviderView>, ApiError> {
    let key = subjects::user_git_key(&user);
    user_store::get_named(&state, &key, |s: &UserGitProviders| &s.providers, &name, "git provider", public).await.map(Json)
}

/// Creates (201) or changes (200) a git provider (409 `host_taken` if another serves its host).
#[utoipa::path(put, path = "/git-providers/{name}", tag = "settings", params(("name" = String, Path)), request_body = PutBody,
    responses((status = 200, body = ProviderView), (status = 201, body = ProviderView), Refusals, BodyRefusals, Conflict))]
pub async fn put(
    State(state): State<AppState>,
    Recent(principal): Recent,
    client: Client,
    Path(name): Path<String>,
    ApiJson(body): ApiJson<PutBody>,
) -> Result<impl IntoResponse, ApiError> {
    let user = principal.user;
    let (created, view) = store_provider(&state, &subjects::user_git_key(&user), &user.0, &name, &body).await?;
    let kind = view.kind.clone();
    let body_token_given = body.token.is_some();
    tracing::info!(user = %user, provider = %name, created, "git provider stored");
    let detail = serde_json::json!({"created": created, "kind": kind, "token_changed": body_token_given});
    audit::Action::new(&user, "git_provider.put", &name).detail(detail).send(&state, client).await;
    Ok((if created { StatusCode::CREATED } else { StatusCode::OK }, Json(view)))
}

/// Stores git provider `name` (its token sealed for `slot_owner`: a user, or `@org`) in the
/// bucket entry `key`: whether it is new, and how the API shows it. Shared by users' and
/// organizations' providers.
pub(crate) async fn store_provider(
    state: &AppState,
    key: &str,
    slot_owner: &str,
    name: &str,
    body: &PutBody,
) -> Result<(bool, ProviderView), ApiError> {
    check_name("name", name)?;
    let kind = body.kind.clone().unwrap_or_else(|| "github".into());
    if !["github", "gitlab", "forgejo", "bitbucket", "azure_devops", "generic"].contains(&kind.as_str()) {
        return Err(ApiError::bad_request(
            "invalid_field",
            format!(
                "`kind` {kind:?}: use github, gitlab, forgejo (Forgejo or Gitea), bitbucket (Bitbucket Cloud or Data Center), azure_devops or generic"
            ),
        ));
    }
    let host = match (body.host.as_deref(), default_host(&kind)) {
        (Some(h), _) => h.to_ascii_lowercase(),
        (None, Some(h)) => h.to_owned(),
        (None, None) => return Err(ApiError::bad_request("invalid_field", "`host` is required for a generic provider")),
    };
    check_host(&host)?;
    if body.username.as_ref().is_some_and(|u| u.is_empty() || u.len() > 200 || u.contains([':', '\n', '\r', '\0'])) {
        return Err(ApiError::bad_request("invalid_field", "`username` must be one line of at most 200 characters, without `:`"));
    }
    if let Some(url) = &body.api_url {
        crate::http::error::check_destination("api_url", url, &state.config.gateway.git_api_allow, "HALYARD_GIT_API_ALLOW")?;
    }
    let sealed = match body.token.as_deref() {
        Some(t) if t.len() < 4 || t.len() > 4096 || t.contains(['\n', '\r', '\0']) => {
            return Err(ApiError::bad_request("invalid_field", "`token` must be one line of 4 to 4096 characters"));
        }
        Some(t) => Some(state.vault.seal(&vault::git_token_slot(slot_owner, name), t).map_err(ApiError::internal)?),
        None => None,
    };
    let now = halyard_platform::now_ms();
    user_store::modify(state, key, |stored: &mut UserGitProviders| {
        let old = stored.providers.get(name);
        if old.is_none() && stored.providers.len() >= MAX_PROVIDERS {
            return Err(ApiError::conflict(
                "too_many_git_providers",
                format!("there are {MAX_PROVIDERS} git providers already; delete one first"),
            ));
        }
        if stored.providers.iter().any(|(n, p)| n != name && p.host == host) {
            return Err(ApiError::conflict("host_taken", format!("another git provider here serves {host}; change that one instead")));
        }
        // A token goes only where it was given for: moving the provider to another host, API
        // or kind of forge needs the token sent again.
        let moved = old.is_some_and(|o| o.host != host || o.kind != kind || o.api_url != body.api_url);
        let token_sealed = match (&sealed, old) {
            (Some(s), _) => s.clone(),
            (None, Some(_)) if moved => {
                return Err(ApiError::bad_request(
                    "token_required",
                    "`token`: the provider now points elsewhere (host, api_url or kind), and its stored token was given for the old \
                     place; send the token again",
                ));
            }
            (None, Some(o)) => o.token_sealed.clone(),
            (None, None) => return Err(ApiError::bad_request("invalid_field", "`token` is required for a new git provider")),
        };
        let provider = GitProvider {
            kind: kind.clone(),
            host: host.clone(),
            username: body.username.clone().unwrap_or_else(|| default_username(&kind).to_owned()),
            token_sealed,
            api_url: body.api_url.clone(),
            created_ms: old.map_or(now, |o| o.created_ms),
            updated_ms: now,
        };
        let created = old.is_none();
        let view = public(name, &provider);
        stored.providers.insert(name.to_owned(), provider);
        Ok((created, view))
    })
    .await
}

/// Deletes a git provider.
#[utoipa::path(delete, path = "/git-providers/{name}", tag = "settings", params(("name" = String, Path)),
    responses((status = 204, description = "deleted"), Refusals, Conflict))]
pub async fn delete(
    State(state): State<AppState>,
    User(user): User,
    client: Client,
    Path(name): Path<String>,
) -> Result<StatusCode, ApiError> {
    let key = subjects::user_git_key(&user);
    user_store::remove_named(&state, &key, |s: &mut UserGitProviders| &mut s.providers, &name, "git provider").await?;
    audit::Action::new(&user, "git_provider.delete", &name).send(&state, client).await;
    Ok(StatusCode::NO_CONTENT)
}
