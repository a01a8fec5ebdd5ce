//! API keys: an administrator's issue and revocation of anyone's (`/api/v1/admin/users/{name}/keys`,
//! `/api/v1/admin/keys/{id}`) and a user's own (`/api/v1/me/keys`). An issued key is shown once,
//! in the answer that issues it; only its salted hash is kept. Every change is stored in the
//! accounts bucket and audited, as the users' are ([`super::admin`]).

use std::net::SocketAddr;

use axum::Json;
use axum::extract::{ConnectInfo, Path, State};
use axum::http::StatusCode;
use axum::response::IntoResponse;
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use halyard_platform::{keys, now_ms};
use halyard_protocol::UserId;
use halyard_protocol::accounts::{ApiKeyRecord, KeyScope};

use super::admin::{audit, store_err};
use crate::auth::{Admin, Recent, User};
use crate::http::api_doc::{BodyRefusals, Refusals};
use crate::http::error::{ApiError, ApiJson};
use crate::read_model::store::rfc3339;
use crate::state::AppState;

/// Longest key lifetime one may ask for: ten years.
const MAX_EXPIRY_SECS: u64 = 10 * 365 * 24 * 3600;

/// A new API key.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CreateKeyBody {
    /// A label to tell keys apart (up to 100 characters).
    #[serde(default)]
    pub name: Option<String>,
    /// `full` (the default) or `read_only`.
    #[serde(default)]
    pub scope: Option<String>,
    /// The key stops working after this many seconds (at most ten years); never by default.
    #[serde(default)]
    #[schema(minimum = 1, maximum = 315_360_000)]
    pub expires_in_secs: Option<u64>,
}

/// An API key (never its secret, but in the answer that issues it).
#[derive(Debug, Serialize, ToSchema)]
pub struct ApiKey {
    pub id: String,
    pub user: String,
    pub name: String,
    /// `full` or `read_only`.
    pub scope: String,
    pub created_at: String,
    pub expires_at: Option<String>,
    pub revoked_at: Option<String>,
    /// A web workspace session rather than a key.
    pub session: bool,
    /// The key itself: shown once, in the answer that issues it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub key: Option<String>,
}

/// Keys.
#[derive(Debug, Serialize, ToSchema)]
pub struct ApiKeyList {
    pub items: Vec<ApiKey>,
}

fn key_json(k: &ApiKeyRecord) -> ApiKey {
    ApiKey {
        id: k.id.clone(),
        user: k.user.0.clone(),
        name: k.name.clone(),
        scope: k.scope.as_str().to_owned(),
        created_at: rfc3339(k.created_ms),
        expires_at: k.expires_ms.map(rfc3339),
        revoked_at: k.revoked_ms.map(rfc3339),
        session: k.session,
        key: None,
    }
}

/// A user's keys and sessions (administrators only).
#[utoipa::path(get, path = "/admin/users/{name}/keys", tag = "admin", params(("name" = String, Path)),
    responses((status = 200, body = ApiKeyList), Refusals))]
pub async fn list_keys(State(state): State<AppState>, _: Admin, Path(name): Path<String>) -> Result<Json<ApiKeyList>, ApiError> {
    if !state.accounts.exists(&name) {
        return Err(ApiError::not_found("user"));
    }
    Ok(Json(ApiKeyList { items: state.accounts.keys_of(&name).iter().map(key_json).collect() }))
}

/// Issues a key of a user's, shown this once (administrators only, recently proved).
#[utoipa::path(post, path = "/admin/users/{name}/keys", tag = "admin", params(("name" = String, Path)), request_body = CreateKeyBody,
    responses((status = 201, body = ApiKey), Refusals, BodyRefusals))]
pub async fn create_key(
    State(state): State<AppState>,
    Admin(actor): Admin,
    _: Recent,
    ConnectInfo(client): ConnectInfo<SocketAddr>,
    Path(name): Path<String>,
    ApiJson(body): ApiJson<CreateKeyBody>,
) -> Result<impl IntoResponse, ApiError> {
    if !state.accounts.exists(&name) {
        return Err(ApiError::not_found("user"));
    }
    issue_key(&state, &actor, client, &name, body).await
}

/// Issues a key of `name`'s, shown in this one answer; audited as `actor`'s doing.
async fn issue_key(
    state: &AppState,
    actor: &UserId,
    client: SocketAddr,
    name: &str,
    body: CreateKeyBody,
) -> Result<(StatusCode, Json<ApiKey>), ApiError> {
    let scope = match body.scope.as_deref() {
        None | Some("full") => KeyScope::Full,
        Some("read_only") => KeyScope::ReadOnly,
        Some(other) => return Err(ApiError::bad_request("invalid_field", format!("`scope`: {other:?} is not `full` or `read_only`"))),
    };
    let label = body.name.unwrap_or_default();
    if label.chars().count() > 100 {
        return Err(ApiError::bad_request("invalid_field", "`name` is longer than 100 characters"));
    }
    crate::http::checks::check_label("name", &label)?;
    let expires_ms = match body.expires_in_secs {
        Some(0) => return Err(ApiError::bad_request("invalid_field", "`expires_in_secs` must be at least 1")),
        Some(s) if s > MAX_EXPIRY_SECS => {
            return Err(ApiError::bad_request("invalid_field", format!("`expires_in_secs` must be at most {MAX_EXPIRY_SECS}")));
        }
        Some(s) => Some(now_ms() + (s as i64) * 1000),
        None => None,
    };
    let (id, secret, key) = keys::new_api_key();
    let salt = keys::random_secret();
    let record = ApiKeyRecord {
        id: id.clone(),
        user: UserId(name.to_owned()),
        name: label,
        hash: keys::api_key_hash(&salt, &secret),
        salt,
        scope,
        created_ms: now_ms(),
        expires_ms,
        revoked_ms: None,
        session: false,
        parent: None,
        verified_ms: None,
    };
    state.accounts.put_key(record.clone()).await.map_err(store_err)?;
    audit(state, actor, client, "key.create", &id, serde_json::json!({"user": name, "scope": scope.as_str()})).await;
    Ok((StatusCode::CREATED, Json(ApiKey { key: Some(key), ..key_json(&record) })))
}

/// The user's own API keys (not the sessions of the web workspace).
#[utoipa::path(get, path = "/me/keys", tag = "accounts", responses((status = 200, body = ApiKeyList), Refusals))]
pub async fn my_keys(State(state): State<AppState>, User(user): User) -> Json<ApiKeyList> {
    Json(ApiKeyList { items: state.accounts.keys_of(&user.0).iter().filter(|k| !k.session).map(key_json).collect() })
}

/// A new key of the user's own, shown this once. As with an administrator's, the caller must
/// have proved who they are recently (a stolen session cannot mint a key that outlives it).
#[utoipa::path(post, path = "/me/keys", tag = "accounts", request_body = CreateKeyBody,
    responses((status = 201, body = ApiKey), Refusals, BodyRefusals))]
pub async fn create_my_key(
    State(state): State<AppState>,
    User(user): User,
    _: Recent,
    ConnectInfo(client): ConnectInfo<SocketAddr>,
    ApiJson(body): ApiJson<CreateKeyBody>,
) -> Result<impl IntoResponse, ApiError> {
    // An organization may keep key issuance to its owners and admins.
    let restricted =
        state.accounts.orgs_of(&user).into_iter().find(|o| {
            o.settings.key_issuers == halyard_protocol::org::KeyIssuers::Admins && o.role_of(&user).is_some_and(|r| !r.manages())
        });
    if let Some(org) = restricted {
        return Err(ApiError::new(
            StatusCode::FORBIDDEN,
            "key_issuance_restricted",
            format!("organization {} lets only its owners and admins issue API keys; ask one of them, or an operator, for one", org.name),
        ));
    }
    let name = user.0.clone();
    issue_key(&state, &user, client, &name, body).await
}

/// Revokes one of the user's own keys, at once on every gateway.
#[utoipa::path(delete, path = "/me/keys/{id}", tag = "accounts", params(("id" = String, Path)), responses((status = 200, body = ApiKey), Refusals))]
pub async fn revoke_my_key(
    State(state): State<AppState>,
    User(user): User,
    ConnectInfo(client): ConnectInfo<SocketAddr>,
    Path(id): Path<String>,
) -> Result<Json<ApiKey>, ApiError> {
    // Another user's key is as absent as one that does not exist.
    let record = state.accounts.key(&id).filter(|k| k.user == user && !k.session).ok_or_else(|| ApiError::not_found("key"))?;
    revoke(&state, &user, client, record).await
}

/// Revokes any key, at once on every gateway (administrators only).
#[utoipa::path(delete, path = "/admin/keys/{id}", tag = "admin", params(("id" = String, Path)), responses((status = 200, body = ApiKey), Refusals))]
pub async fn revoke_key(
    State(state): State<AppState>,
    Admin(actor): Admin,
    ConnectInfo(client): ConnectInfo<SocketAddr>,
    Path(id): Path<String>,
) -> Result<Json<ApiKey>, ApiError> {
    let record = state.accounts.key(&id).ok_or_else(|| ApiError::not_found("key"))?;
    revoke(&state, &actor, client, record).await
}

/// Revokes `record` (once: a revoked key stays as it was), audited as `actor`'s doing.
async fn revoke(state: &AppState, actor: &UserId, client: SocketAddr, mut record: ApiKeyRecord) -> Result<Json<ApiKey>, ApiError> {
    if record.revoked_ms.is_none() {
        record.revoked_ms = Some(now_ms());
        state.accounts.put_key(record.clone()).await.map_err(store_err)?;
        audit(state, actor, client, "key.revoke", &record.id, serde_json::json!({"user": record.user.0})).await;
    }
    Ok(Json(key_json(&record)))
}
