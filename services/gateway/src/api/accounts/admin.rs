//! `/api/v1/admin`: users and API keys, for administrators; `/api/v1/me`, who a key is; and
//! `/api/v1/me/keys`, a user's own API keys (made, listed, revoked by themselves).
//! Every change is stored in the accounts bucket (see [`crate::state::registry`]) and leaves an audit
//! record on `halyard.sys.audit.<user|key>`. An issued key is shown once, in the answer that
//! issues it; only its salted hash is kept.

use std::net::SocketAddr;

use axum::Json;
use axum::extract::{ConnectInfo, Path, State};
use axum::http::StatusCode;
use axum::response::IntoResponse;
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use halyard_platform::{keys, now_ms};
use halyard_protocol::UserId;
use halyard_protocol::accounts::{ApiKeyRecord, KeyScope, UserAccount};

use crate::auth::{Admin, Recent, User};
use crate::http::api_doc::{BodyRefusals, Conflict, Refusals};
use crate::http::error::{ApiError, ApiJson};
use crate::read_model::store::rfc3339;
use crate::state::AppState;
use crate::state::registry::Principal;

/// Longest key lifetime one may ask for: ten years.
const MAX_EXPIRY_SECS: u64 = 10 * 365 * 24 * 3600;

/// A new user.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CreateUserBody {
    /// 1 to 64 letters, digits, `-` or `_`.
    #[schema(pattern = "^[A-Za-z0-9_-]{1,64}$")]
    pub name: String,
    #[serde(default)]
    pub admin: bool,
    /// Their e-mail address: the first single sign-on whose identity provider verified this
    /// address signs in as this user (a deployment that admits no one else by domain or group
    /// signs in only users made so).
    #[serde(default)]
    pub email: Option<String>,
}

/// What to change of a user; absent fields stay.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct PatchUserBody {
    #[serde(default)]
    pub admin: Option<bool>,
    /// A disabled user's keys and sessions stop working at once.
    #[serde(default)]
    pub disabled: Option<bool>,
}

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

/// A user as administrators see them.
#[derive(Debug, Serialize, ToSchema)]
#[schema(as = User)]
pub struct UserView {
    pub name: String,
    pub admin: bool,
    pub disabled: bool,
    /// Created through this API (not only named by the deployment's keys or `HALYARD_ADMINS`).
    pub managed: bool,
    /// How many keys of theirs are not revoked.
    pub keys: usize,
    pub created_at: Option<String>,
    pub updated_at: Option<String>,
}

/// Every user.
#[derive(Debug, Serialize, ToSchema)]
pub struct UserList {
    pub items: Vec<UserView>,
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

/// Who a key is.
#[derive(Debug, Serialize, ToSchema)]
pub struct Me {
    pub user: String,
    pub admin: bool,
    /// `full` or `read_only`.
    pub scope: String,
}

fn user_json(state: &AppState, name: &str, account: Option<&UserAccount>) -> UserView {
    let bootstrap_admin = state.accounts.is_bootstrap_admin(name);
    UserView {
        name: name.to_owned(),
        admin: account.is_some_and(|a| a.admin) || bootstrap_admin,
        disabled: account.is_some_and(|a| a.disabled),
        managed: account.is_some(),
        keys: state.accounts.keys_of(name).iter().filter(|k| k.revoked_ms.is_none()).count(),
        created_at: account.map(|a| rfc3339(a.created_ms)),
        updated_at: account.map(|a| rfc3339(a.updated_ms)),
    }
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

/// User names go into bucket keys and subjects: letters, digits, `-` and `_`.
fn check_name(name: &str) -> Result<(), ApiError> {
    let ok = !name.is_empty() && name.len() <= 64 && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_');
    if ok { Ok(()) } else { Err(ApiError::bad_request("invalid_field", "`name`: 1 to 64 letters, digits, `-` or `_`")) }
}

fn store_err(e: impl std::fmt::Display) -> ApiError {
    tracing::error!(error = %e, "accounts store");
    ApiError::unavailable("the accounts store did not answer; try again")
}

/// Records an action on users and keys ([`crate::audit`]).
async fn audit(state: &AppState, actor: &UserId, client: SocketAddr, action: &str, target: &str, detail: serde_json::Value) {
    let a = crate::audit::Action::new(actor, action, target).detail(detail);
    crate::audit::record(state, a, Some(client.ip())).await;
}

/// Who this key is.
#[utoipa::path(get, path = "/me", tag = "accounts", responses((status = 200, body = Me), Refusals))]
pub async fn me(principal: Principal) -> Json<Me> {
    Json(Me { user: principal.user.0, admin: principal.admin, scope: principal.scope.as_str().to_owned() })
}

/// Every user (administrators only).
#[utoipa::path(get, path = "/admin/users", tag = "admin", responses((status = 200, body = UserList), Refusals))]
pub async fn list_users(State(state): State<AppState>, _: Admin) -> Json<UserList> {
    let items = state.accounts.users().iter().map(|(name, account)| user_json(&state, name, account.as_ref())).collect();
    Json(UserList { items })
}

/// Creates a user (administrators only, recently proved: see `POST /session/step-up`).
#[utoipa::path(post, path = "/admin/users", tag = "admin", request_body = CreateUserBody,
    responses((status = 201, body = UserView), Refusals, BodyRefusals, Conflict))]
pub async fn create_user(
    State(state): State<AppState>,
    Admin(actor): Admin,
    _: Recent,
    ConnectInfo(client): ConnectInfo<SocketAddr>,
    ApiJson(body): ApiJson<CreateUserBody>,
) -> Result<impl IntoResponse, ApiError> {
    check_name(&body.name)?;
    let email = body.email.as_deref().map(str::trim).map(str::to_lowercase);
    if email.as_deref().is_some_and(|e| {
        e.len() > 254
            || e.chars().filter(|c| *c == '@').count() != 1
            || e.starts_with('@')
            || e.ends_with('@')
            || e.chars().any(|c| c.is_whitespace() || c.is_control())
    }) {
        return Err(ApiError::bad_request("invalid_field", "`email`: an e-mail address, like ada@example.com"));
    }
    if state.accounts.exists(&body.name) {
        return Err(ApiError::conflict("user_exists", format!("user `{}` exists already; PATCH it to change it", body.name)));
    }
    let now = now_ms();
    let account = UserAccount {
        user: UserId(body.name.clone()),
        admin: body.admin,
        disabled: false,
        created_ms: now,
        updated_ms: now,
        sso_subject: None,
        email,
    };
    state.accounts.put_user(account.clone()).await.map_err(store_err)?;
    audit(&state, &actor, client, "user.create", &body.name, serde_json::json!({"admin": body.admin})).await;
    Ok((StatusCode::CREATED, Json(user_json(&state, &body.name, Some(&account)))))
}

/// One user (administrators only).
#[utoipa::path(get, path = "/admin/users/{name}", tag = "admin", params(("name" = String, Path)), responses((status = 200, body = UserView), Refusals))]
pub async fn get_user(State(state): State<AppState>, _: Admin, Path(name): Path<String>) -> Result<Json<UserView>, ApiError> {
    if !state.accounts.exists(&name) {
        return Err(ApiError::not_found("user"));
    }
    Ok(Json(user_json(&state, &name, state.accounts.account(&name).as_ref())))
}

/// Makes a user administrator or not, disables or enables them (409 `self_disable` for oneself).
#[utoipa::path(patch, path = "/admin/users/{name}", tag = "admin", params(("name" = String, Path)), request_body = PatchUserBody,
    responses((status = 200, body = UserView), Refusals, BodyRefusals, Conflict))]
pub async fn patch_user(
    State(state): State<AppState>,
    Admin(actor): Admin,
    _: Recent,
    ConnectInfo(client): ConnectInfo<SocketAddr>,
    Path(name): Path<String>,
    ApiJson(body): ApiJson<PatchUserBody>,
) -> Result<Json<UserView>, ApiError> {
    if !state.accounts.exists(&name) {
        return Err(ApiError::not_found("user"));
    }
    if name == actor.0 && body.disabled == Some(true) {
        return Err(ApiError::conflict("self_disable", "you cannot disable yourself; ask another administrator"));
    }
    let now = now_ms();
    let mut account = state.accounts.account(&name).unwrap_or(UserAccount {
        user: UserId(name.clone()),
        admin: false,
        disabled: false,
        created_ms: now,
        updated_ms: now,
        sso_subject: None,
        email: None,
    });
    let mut changes = serde_json::Map::new();
    if let Some(admin) = body.admin {
        account.admin = admin;
        changes.insert("admin".into(), admin.into());
    }
    if let Some(disabled) = body.disabled {
        account.disabled = disabled;
        changes.insert("disabled".into(), disabled.into());
    }
    account.updated_ms = now;
    state.accounts.put_user(account.clone()).await.map_err(store_err)?;
    audit(&state, &actor, client, "user.update", &name, serde_json::Value::Object(changes)).await;
    Ok(Json(user_json(&state, &name, Some(&account))))
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
