//! Starting a container for a sandbox: made (or replaced when a half-made one holds the name),
//! handed its session key, started, and waited on until its executor answers.

use crate::ctx::Ctx;
use crate::docker::{self, ContainerPlan, Found};
use crate::process;
use halyard_platform::executor_client::ExecutorClient;
use halyard_protocol::system::{AGENT_SERVER, ExposedUrl};
use std::time::Duration;

/// Creates (if `existing` is none) and starts a container for `plan`, hands it `key`, and waits
/// for its executor. On failure, returns the container (if one was made) with the reason.
pub async fn start_container(
    ctx: &Ctx,
    plan: &ContainerPlan<'_>,
    existing: Option<String>,
    key: &str,
    timeout: Duration,
) -> Result<(String, Vec<ExposedUrl>), (Option<String>, String)> {
    let Some(dctx) = ctx.docker.as_ref() else { return Err((None, "no Docker engine".into())) };
    let engine = &dctx.engine;
    let deadline = tokio::time::Instant::now() + timeout;
    engine.ensure_volume(&plan.volume, &plan.labels, plan.lower.as_deref()).await.map_err(|e| (existing.clone(), e.to_string()))?;
    let container = match existing {
        Some(c) => c,
        None => match engine.create(plan).await {
            Ok(c) => c,
            // A leftover of an attempt that failed half-way holds the name: replace it.
            Err(docker::DockerError::Conflict { .. }) => {
                let _ = engine.remove(&plan.name).await;
                engine.create(plan).await.map_err(|e| (None, e.to_string()))?
            }
            Err(e) => return Err((None, e.to_string())),
        },
    };
    let fail = |e: String| (Some(container.clone()), e);
    engine.upload_key(&container, key, &plan.spec.user).await.map_err(|e| fail(e.to_string()))?;
    engine.start(&container).await.map_err(|e| fail(e.to_string()))?;
    let (_, urls) = engine.inspect(&container).await.map_err(|e| fail(e.to_string()))?;
    let url = urls.iter().find(|u| u.name == AGENT_SERVER).ok_or_else(|| fail("the container publishes no executor port".into()))?;
    let client = ExecutorClient::new(ctx.http.clone(), url.url.clone(), key.to_owned());
    if let Err(e) = process::wait_healthy(&client, deadline).await {
        // Say why, if the container already ended.
        let reason = match engine.inspect(&container).await {
            Ok((Found::Stopped { exit_code, .. }, _)) => {
                format!("the executor exited with code {exit_code} (see `docker logs {container}`)")
            }
            _ => e,
        };
        return Err(fail(reason));
    }
    Ok((container, urls))
}
