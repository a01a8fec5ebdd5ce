//! A conversation's sandbox as a request needs it: running (woken from hibernation within the
//! running limits), and the spec names a start may ask for.

use std::time::Duration;

use axum::http::StatusCode;

use halyard_platform::{bus, telemetry};
use halyard_protocol::{Envelope, SandboxId};

use crate::auth::access::owned;
use crate::auth::quota::check_quota;
use crate::http::checks::parse_id;
use crate::http::error::ApiError;
use crate::read_model::store;
use crate::state::AppState;

/// The sandbox of the user's conversation `id`, running, for what the caller means `to` do (in
/// words, for the error). A hibernated sandbox is woken first (within the running limits: 429
/// past one), so the request is answered as if it had never stopped; a paused one (a user's
/// choice) is not: 409 `sandbox_not_running`.
pub async fn running_sandbox(
    state: &AppState,
    user: &halyard_protocol::UserId,
    id: &str,
    to: &str,
) -> Result<(SandboxId, store::SandboxView), ApiError> {
    running_sandbox_waking(state, user, id, to, true).await
}

/// Like [`running_sandbox`]; with `wake` false, a hibernated sandbox stays asleep (409
/// `sandbox_hibernated`): what someone other than the owner reads (an organization's reader, a
/// share link) never starts the owner's sandbox on the owner's quota.
pub async fn running_sandbox_waking(
    state: &AppState,
    user: &halyard_protocol::UserId,
    id: &str,
    to: &str,
    wake_it: bool,
) -> Result<(SandboxId, store::SandboxView), ApiError> {
    let (_, c) = owned(state, user, id)?;
    let sandbox_id: SandboxId = match &c.sandbox_id {
        Some(s) => parse_id(s, "sandbox_id")?,
        None => return Err(ApiError::conflict("conversation_not_ready", "the conversation has no sandbox yet; wait until it is READY")),
    };
    let sandbox = state.store.sandbox(sandbox_id)?.ok_or_else(|| ApiError::not_found("sandbox"))?;
    match sandbox.status.as_str() {
        "RUNNING" => Ok((sandbox_id, sandbox)),
        "HIBERNATED" if !wake_it => Err(ApiError::conflict(
            "sandbox_hibernated",
            "the conversation's sandbox is hibernating to save resources; it wakes when its owner opens it",
        )),
        "HIBERNATED" => {
            check_quota(state, user)?;
            Ok((sandbox_id, wake(state, sandbox_id, sandbox).await?))
        }
        other => Err(ApiError::conflict(
            "sandbox_not_running",
            format!("the conversation's sandbox is {other}; resume the conversation to {to}"),
        )),
    }
}

/// Starts a hibernated sandbox again and waits until it runs; the view as it is then (its
/// executor's new address), ahead of the projection.
pub async fn wake(state: &AppState, id: SandboxId, mut view: store::SandboxView) -> Result<store::SandboxView, ApiError> {
    let mut resume = Envelope::new(halyard_protocol::command::SandboxCommand::Resume { sandbox_id: id }, halyard_platform::now_ms());
    resume.trace = Some(telemetry::new_trace());
    let patience = Duration::from_secs(state.config.sandbox.start_timeout_secs + 10);
    let woke = bus::await_sandbox(&state.nats, &state.js, id, Some(resume), patience).await.map_err(|why| {
        // No host has room for it now: the wake waits its turn in the start queue and
        // happens by itself; the request is not held that long.
        if why.starts_with(halyard_protocol::queue::WAKE_QUEUED_DETAIL) {
            let (position, _) = state.start_queue.place(id);
            let place = position.map(|p| format!(" ({} in line)", halyard_protocol::queue::ordinal(p))).unwrap_or_default();
            let mut e = ApiError::new(
                StatusCode::TOO_MANY_REQUESTS,
                "sandbox_wake_queued",
                format!("the sandbox waits for room to start again{place}; it starts by itself, retry in a moment"),
            );
            e.retry_after = Some(10);
            return e;
        }
        ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "sandbox_wake_failed",
            format!("the hibernated sandbox did not start again: {why}; retry"),
        )
    })?;
    view.status = woke.status.as_str().to_owned();
    view.detail = woke.detail;
    view.exposed_urls = woke.exposed_urls.iter().map(|u| serde_json::json!({"name": u.name, "url": u.url})).collect();
    Ok(view)
}

/// Checks a sandbox spec's name.
/// The spec a start in organization `org` runs on: `spec` (the default if absent), unless the
/// organization requires another runtime. Then a spec the start `chosen` itself (or its
/// environment's) is refused as 400 `runtime_required`, naming those that would do, and one it
/// got by default is replaced by the first that would.
pub fn spec_in_org(state: &AppState, org: &str, spec: Option<String>, chosen: bool) -> Result<Option<String>, ApiError> {
    let Some(runtime) = state.accounts.org(org).and_then(|(_, o)| o.settings.sandbox_runtime) else { return Ok(spec) };
    let cfg = &state.config.sandbox;
    let refuse = |why: String| ApiError::bad_request("runtime_required", why);
    if cfg.kind == "process" && runtime == "gvisor" {
        return Err(refuse(format!(
            "organization {org} runs its conversations under gVisor, which runs container sandboxes; this deployment runs process sandboxes"
        )));
    }
    let name = spec.clone().unwrap_or_else(|| cfg.default_spec.clone());
    if cfg.spec(&name).is_some_and(|s| s.runtime == runtime) {
        return Ok(spec);
    }
    let fitting: Vec<String> = cfg.specs().into_iter().filter(|s| s.runtime == runtime).map(|s| s.name).collect();
    match fitting.first() {
        Some(first) if !chosen => Ok(Some(first.clone())),
        _ if fitting.is_empty() => {
            Err(refuse(format!("organization {org} runs its conversations under {runtime}, and no sandbox spec of this deployment does")))
        }
        _ => Err(refuse(format!(
            "organization {org} runs its conversations under {runtime}; spec `{name}` does not: name one that does ({})",
            fitting.join(", ")
        ))),
    }
}

pub fn check_spec(state: &AppState, spec: &str) -> Result<(), ApiError> {
    if state.config.sandbox.spec(spec).is_none() {
        let known: Vec<String> = state.config.sandbox.specs().into_iter().map(|s| s.name).collect();
        return Err(ApiError::bad_request(
            "invalid_field",
            format!("`sandbox_spec` {spec:?} is not one of {known:?} (see GET /api/v1/sandbox-specs)"),
        ));
    }
    Ok(())
}
