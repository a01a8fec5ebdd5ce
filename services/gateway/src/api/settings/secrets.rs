//! `/api/v1/secrets`: a user's secrets. A value is sealed here (the vault) before it is
//! stored and is never answered again by any endpoint; the agent runner opens it when a run
//! starts, exports it into the conversation's shell under the secret's name, and masks it in
//! everything the conversation appends.

use axum::Json;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::IntoResponse;
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use halyard_platform::redact::MIN_SECRET_LEN;
use halyard_platform::vault;
use halyard_protocol::subjects;
use halyard_protocol::user::{SealedSecret, UserSecrets};

use crate::audit::{self, Client};
use crate::auth::{Recent, User};
use crate::domain::user_store;
use crate::http::api_doc::{BodyRefusals, Conflict, Refusals};
use crate::http::error::{ApiError, ApiJson};
use crate::read_model::store::rfc3339;
use crate::state::AppState;

/// Secrets one user may keep.
pub const MAX_SECRETS: usize = 100;
/// Longest value.
pub const MAX_VALUE_BYTES: usize = 64 * 1024;

/// Names the shell or Halyard itself depends on: a secret may not replace them.
const RESERVED: [&str; 18] = [
    "PATH",
    "HOME",
    "USER",
    "SHELL",
    "PWD",
    "OLDPWD",
    "TERM",
    "PAGER",
    "GIT_PAGER",
    "IFS",
    "HOSTNAME",
    "SHLVL",
    "ENV",
    "BASH_ENV",
    "PROMPT_COMMAND",
    "LANG",
    "TMPDIR",
    "PS1",
];
const RESERVED_PREFIXES: [&str; 5] = ["HALYARD_", "WORKER_", "LD_", "BASH_", "LC_"];

/// A secret's value (write-only) and description.
#[derive(Debug, Deserialize, ToSchema)]
#[schema(as = SecretUpdate)]
#[serde(deny_unknown_fields)]
pub struct PutBody {
    /// Required when the secret is new; absent keeps the stored value. Never answered again.
    #[serde(default)]
    pub value: Option<String>,
    #[serde(default)]
    pub description: Option<String>,
}

/// A secret as the API shows it: never its value.
#[derive(Debug, Serialize, ToSchema)]
#[schema(as = Secret)]
pub struct SecretView {
    /// The environment variable the conversation's shell gets it as.
    pub name: String,
    pub description: Option<String>,
    pub created_at: String,
    pub updated_at: String,
}

/// The user's secrets, by name.
#[derive(Debug, Serialize, ToSchema)]
pub struct SecretList {
    pub items: Vec<SecretView>,
}

pub(crate) fn public(name: &str, s: &SealedSecret) -> SecretView {
    SecretView {
        name: name.to_owned(),
        description: s.description.clone(),
        created_at: rfc3339(s.created_ms),
        updated_at: rfc3339(s.updated_ms),
    }
}

fn check_secret_name(name: &str) -> Result<(), ApiError> {
    let shaped = (1..=64).contains(&name.len())
        && name.chars().next().is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
    if !shaped {
        return Err(ApiError::bad_request(
            "invalid_field",
            format!(
                "secret name {name:?}: use an environment variable name (letters, digits and `_`, not starting with a digit, at most 64)"
            ),
        ));
    }
    let upper = name.to_ascii_uppercase();
    if RESERVED.contains(&upper.as_str()) || RESERVED_PREFIXES.iter().any(|p| upper.starts_with(p)) {
        return Err(ApiError::bad_request(
            "reserved_name",
            format!("secret name {name:?} is used by the shell or by Halyard; choose another (for example MY_{name})"),
        ));
    }
    Ok(())
}

fn check_value(value: &str) -> Result<(), ApiError> {
    if value.len() < MIN_SECRET_LEN {
        return Err(ApiError::bad_request(
            "invalid_field",
            format!("`value` must be at least {MIN_SECRET_LEN} characters: a shorter one could not be told apart from ordinary output"),
        ));
    }
    if value.len() > MAX_VALUE_BYTES || value.contains('\0') {
        return Err(ApiError::bad_request("invalid_field", format!("`value` must be text of at most {MAX_VALUE_BYTES} bytes")));
    }
    Ok(())
}

/// The user's secrets: names and descriptions, never values.
#[utoipa::path(get, path = "/secrets", tag = "settings", responses((status = 200, body = SecretList), Refusals))]
pub async fn list(State(state): State<AppState>, User(user): User) -> Result<Json<SecretList>, ApiError> {
    let items = user_store::list_named(&state, &subjects::user_secrets_key(&user), |s: &UserSecrets| &s.secrets, public).await?;
    Ok(Json(SecretList { items }))
}

/// One secret of the user's (never its value).
#[utoipa::path(get, path = "/secrets/{name}", tag = "settings", params(("name" = String, Path)),
    responses((status = 200, body = SecretView), Refusals))]
pub async fn get_one(State(state): State<AppState>, User(user): User, Path(name): Path<String>) -> Result<Json<SecretView>, ApiError> {
    let key = subjects::user_secrets_key(&user);
    user_store::get_named(&state, &key, |s: &UserSecrets| &s.secrets, &name, "secret", public).await.map(Json)
}

/// Creates (201) or changes (200) a secret; its name is an environment variable's (400
/// `reserved_name` for one the shell or Halyard uses). With a session: recently proved.
#[utoipa::path(put, path = "/secrets/{name}", tag = "settings", params(("name" = String, Path)), request_body = PutBody,
    responses((status = 200, body = SecretView), (status = 201, body = SecretView), Refusals, BodyRefusals, Conflict))]
pub async fn put(
    State(state): State<AppState>,
    User(user): User,
    client: Client,
    _: Recent,
    Path(name): Path<String>,
    ApiJson(body): ApiJson<PutBody>,
) -> Result<impl IntoResponse, ApiError> {
    let (created, view) = store_secret(&state, &subjects::user_secrets_key(&user), &user.0, &name, &body).await?;
    tracing::info!(user = %user, secret = %name, created, "secret stored");
    let detail = serde_json::json!({"created": created, "value_changed": body.value.is_some()});
    audit::Action::new(&user, "secret.put", &name).detail(detail).send(&state, client).await;
    Ok((if created { StatusCode::CREATED } else { StatusCode::OK }, Json(view)))
}

/// Stores secret `name` (sealed for `slot_owner`: a user, or `@org`) in the bucket entry `key`:
/// whether it is new, and how the API shows it. Shared by users' and organizations' secrets.
pub(crate) async fn store_secret(
    state: &AppState,
    key: &str,
    slot_owner: &str,
    name: &str,
    body: &PutBody,
) -> Result<(bool, SecretView), ApiError> {
    check_secret_name(name)?;
    user_store::check_description(body.description.as_deref())?;
    let sealed = match &body.value {
        Some(v) => {
            check_value(v)?;
            Some(state.vault.seal(&vault::secret_slot(slot_owner, name), v).map_err(ApiError::internal)?)
        }
        None => None,
    };
    let now = halyard_platform::now_ms();
    user_store::modify(state, key, |stored: &mut UserSecrets| {
        let created = !stored.secrets.contains_key(name);
        if created && stored.secrets.len() >= MAX_SECRETS {
            return Err(ApiError::conflict("too_many_secrets", format!("there are {MAX_SECRETS} secrets already; delete one first")));
        }
        let secret = match (stored.secrets.remove(name), &sealed) {
            (Some(mut old), _) => {
                if let Some(s) = &sealed {
                    old.value_sealed = s.clone();
                }
                if body.description.is_some() {
                    old.description = body.description.clone();
                }
                old.updated_ms = now;
                old
            }
            (None, Some(s)) => {
                SealedSecret { description: body.description.clone(), value_sealed: s.clone(), created_ms: now, updated_ms: now }
            }
            (None, None) => return Err(ApiError::bad_request("invalid_field", "`value` is required for a new secret")),
        };
        let view = public(name, &secret);
        stored.secrets.insert(name.to_owned(), secret);
        Ok((created, view))
    })
    .await
}

/// Deletes a secret: conversations stop getting it from their next run.
#[utoipa::path(delete, path = "/secrets/{name}", tag = "settings", params(("name" = String, Path)),
    responses((status = 204, description = "deleted"), Refusals, Conflict))]
pub async fn delete(
    State(state): State<AppState>,
    User(user): User,
    client: Client,
    _: Recent,
    Path(name): Path<String>,
) -> Result<StatusCode, ApiError> {
    user_store::remove_named(&state, &subjects::user_secrets_key(&user), |s: &mut UserSecrets| &mut s.secrets, &name, "secret").await?;
    tracing::info!(user = %user, secret = %name, "secret deleted");
    audit::Action::new(&user, "secret.delete", &name).send(&state, client).await;
    Ok(StatusCode::NO_CONTENT)
}

/// Checks a start's choice of secrets: each a secret the user has, or the organization the
/// conversation is started in.
pub async fn check_chosen(state: &AppState, user: &halyard_protocol::UserId, org: Option<&str>, names: &[String]) -> Result<(), ApiError> {
    let (mut stored, _) = user_store::load::<UserSecrets>(state, &subjects::user_secrets_key(user)).await?;
    if let Some(org) = org {
        stored.secrets.extend(user_store::load::<UserSecrets>(state, &subjects::org_secrets_key(org)).await?.0.secrets);
    }
    if let Some(missing) = names.iter().find(|n| !stored.secrets.contains_key(n.as_str())) {
        let known: Vec<&String> = stored.secrets.keys().collect();
        return Err(ApiError::bad_request(
            "invalid_field",
            format!("`secrets`: you have no secret {missing:?} (yours: {known:?}); store it with PUT /api/v1/secrets/{missing} first"),
        ));
    }
    Ok(())
}
