//! Reading and changing a user's own configuration in the `halyard_user` bucket: one JSON entry
//! per user and kind, changed by read-modify-write under the entry's revision, so two
//! gateways (or two tabs) changing the same user's entry at once both land, one after the
//! other, instead of one silently undoing the other. Shared by the settings, LLM-profile and
//! secret handlers.

use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::http::error::ApiError;
use crate::state::AppState;

/// Tries of a read-modify-write before answering 409.
const TRIES: usize = 5;

fn kv_err(e: impl std::fmt::Display) -> ApiError {
    tracing::error!(error = %e, "user store");
    ApiError::unavailable("the settings store did not answer; try again")
}

/// The entry `key` (its default if absent) and its revision (`None`: absent).
pub async fn load<T: DeserializeOwned + Default>(state: &AppState, key: &str) -> Result<(T, Option<u64>), ApiError> {
    match state.user_kv.entry(key).await.map_err(kv_err)? {
        Some(e) if e.operation == async_nats::jetstream::kv::Operation::Put => {
            let value = serde_json::from_slice(&e.value).map_err(ApiError::internal)?;
            Ok((value, Some(e.revision)))
        }
        _ => Ok((T::default(), None)),
    }
}

/// Applies `change` to the entry `key` and stores it, retrying from a fresh read if someone
/// else changed it meanwhile. `change` may refuse (its error is answered) and may be run more
/// than once.
pub async fn modify<T, R>(state: &AppState, key: &str, mut change: impl FnMut(&mut T) -> Result<R, ApiError>) -> Result<R, ApiError>
where
    T: DeserializeOwned + Serialize + Default,
{
    for _ in 0..TRIES {
        let (mut value, revision) = load::<T>(state, key).await?;
        let out = change(&mut value)?;
        let bytes = serde_json::to_vec(&value).map_err(ApiError::internal)?;
        let stored = match revision {
            Some(r) => state.user_kv.update(key, bytes.into(), r).await.map(|_| ()).map_err(|e| e.to_string()),
            None => state.user_kv.create(key, bytes.into()).await.map(|_| ()).map_err(|e| e.to_string()),
        };
        match stored {
            Ok(()) => return Ok(out),
            Err(e) => tracing::debug!(key, error = %e, "concurrent change; reading again"),
        }
    }
    Err(ApiError::conflict("concurrent_update", "your settings changed several times while this change was made; try again"))
}

/// The entries of one kind a user keeps by name (secrets, LLM profiles, git providers), as
/// stored in their bucket entry.
pub type Named<V> = std::collections::BTreeMap<String, V>;

/// The user's entry `name` of the map `field` of the bucket entry `key`, as `view` shows it;
/// 404 (`what`) if there is none.
pub async fn get_named<T, V, O>(
    state: &AppState,
    key: &str,
    field: fn(&T) -> &Named<V>,
    name: &str,
    what: &str,
    view: fn(&str, &V) -> O,
) -> Result<O, ApiError>
where
    T: DeserializeOwned + Default,
{
    let (stored, _) = load::<T>(state, key).await?;
    field(&stored).get(name).map(|v| view(name, v)).ok_or_else(|| ApiError::not_found(what))
}

/// Every entry of the map `field`, as `view` shows them: `{"items": [...]}`.
pub async fn list_named<T, V, O>(
    state: &AppState,
    key: &str,
    field: fn(&T) -> &Named<V>,
    view: fn(&str, &V) -> O,
) -> Result<Vec<O>, ApiError>
where
    T: DeserializeOwned + Default,
{
    let (stored, _) = load::<T>(state, key).await?;
    Ok(field(&stored).iter().map(|(n, v)| view(n, v)).collect())
}

/// Removes the entry `name` of the map `field`; 404 (`what`) if there is none.
pub async fn remove_named<T, V>(
    state: &AppState,
    key: &str,
    field: fn(&mut T) -> &mut Named<V>,
    name: &str,
    what: &str,
) -> Result<(), ApiError>
where
    T: DeserializeOwned + Serialize + Default,
{
    modify(state, key, |stored: &mut T| field(stored).remove(name).map(|_| ()).ok_or_else(|| ApiError::not_found(what))).await
}

/// Checks a name users give things (`[A-Za-z0-9_.-]`, 1 to 64, a letter or digit first).
pub fn check_name(field: &str, name: &str) -> Result<(), ApiError> {
    let ok = (1..=64).contains(&name.len())
        && name.chars().next().is_some_and(|c| c.is_ascii_alphanumeric())
        && name.chars().all(|c| c.is_ascii_alphanumeric() || "_.-".contains(c));
    if ok {
        Ok(())
    } else {
        Err(ApiError::bad_request(
            "invalid_field",
            format!("`{field}` {name:?}: use 1 to 64 letters, digits, `_`, `.` or `-`, starting with a letter or digit"),
        ))
    }
}

/// Checks an optional free text.
pub fn check_description(text: Option<&str>) -> Result<(), ApiError> {
    match text {
        Some(t) if t.chars().count() > 500 => Err(ApiError::bad_request("invalid_field", "`description` is longer than 500 characters")),
        Some(t) => crate::http::checks::check_label("description", t),
        None => Ok(()),
    }
}
