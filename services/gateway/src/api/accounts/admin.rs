//! `/api/v1/admin/users`: users, for administrators; `/api/v1/me`, who a key is. Their API keys
//! are [`super::keys`]. Every change is stored in the accounts bucket (see
//! [`crate::state::registry`]) and leaves an audit record on `halyard.sys.audit.<user|key>`.

use std::net::SocketAddr;

use axum::Json;
use axum::extract::{ConnectInfo, Path, State};
use axum::http::StatusCode;
use axum::response::IntoResponse;
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use halyard_platform::now_ms;
use halyard_protocol::UserId;
use halyard_protocol::accounts::UserAccount;

use crate::auth::{Admin, Recent};
use crate::http::api_doc::{BodyRefusals, Conflict, Refusals};
use crate::http::error::{ApiError, ApiJson};
use crate::read_model::store::rfc3339;
use crate::state::AppState;
use crate::state::registry::Principal;

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

/// User names go into bucket keys and subjects: letters, digits, `-` and `_`.
fn check_name(name: &str) -> Result<(), ApiError> {
    let ok = !name.is_empty() && name.len() <= 64 && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_');
    if ok { Ok(()) } else { Err(ApiError::bad_request("invalid_field", "`name`: 1 to 64 letters, digits, `-` or `_`")) }
}

pub(super) fn store_err(e: impl std::fmt::Display) -> ApiError {
    tracing::error!(error = %e, "accounts store");
    ApiError::unavailable("the accounts store did not answer; try again")
}

/// Records an action on users and keys ([`crate::audit`]).
pub(super) async fn audit(state: &AppState, actor: &UserId, client: SocketAddr, action: &str, target: &str, detail: serde_json::Value) {
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
