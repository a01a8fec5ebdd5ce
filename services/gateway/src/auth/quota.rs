//! The running limits as a resume or a wake meets them: how many sandboxes a user, and
//! everyone, may have running (a start past them waits in the start queue instead).

use axum::http::StatusCode;

use halyard_protocol::{TaskId, UserId};

use crate::http::error::ApiError;
use crate::state::AppState;

/// Refuses with 429 if one more running sandbox for `user` would exceed a limit. Sandboxes
/// still being started for a conversation count too, so a burst of starts cannot slip past.
pub fn check_quota(state: &AppState, user: &UserId) -> Result<(), ApiError> {
    let limits = &state.config.sandbox;
    if limits.max_running_per_user == 0 && limits.max_running_total == 0 {
        return Ok(());
    }
    let (mut mine, mut total) = state.store.running_sandboxes(&user.0)?;
    let starting: Vec<(String, TaskId)> = {
        let starting = state.live.starting.lock().unwrap_or_else(|e| e.into_inner());
        starting.iter().flat_map(|(owner, tasks)| tasks.iter().map(move |t| (owner.clone(), *t))).collect()
    };
    for (owner, task) in starting {
        let task = state.store.task(task)?;
        // A start waiting in the queue holds no sandbox yet.
        if task.as_ref().is_some_and(|t| t.status == "QUEUED") {
            continue;
        }
        // A task whose sandbox already runs is counted above.
        let counted = task
            .and_then(|t| t.sandbox_id)
            .and_then(|s| s.parse().ok())
            .and_then(|s| state.store.sandbox(s).ok().flatten())
            .is_some_and(|s| s.is_running());
        if !counted {
            total += 1;
            if owner == user.0 {
                mine += 1;
            }
        }
    }
    let refuse = |code: &'static str, message: String| {
        let mut e = ApiError::new(StatusCode::TOO_MANY_REQUESTS, code, message);
        e.retry_after = Some(10);
        Err(e)
    };
    if limits.max_running_per_user > 0 && mine >= limits.max_running_per_user {
        return refuse(
            "sandbox_quota_user",
            format!("you have {mine} running sandboxes (limit {}); pause or delete one, then retry", limits.max_running_per_user),
        );
    }
    if limits.max_running_total > 0 && total >= limits.max_running_total {
        return refuse(
            "sandbox_quota_total",
            format!("this deployment runs {total} sandboxes (limit {}); retry later", limits.max_running_total),
        );
    }
    Ok(())
}
