//! Keeping the warm pool ([`crate::pool`]) full: the refill task starts a replacement in the
//! background for every container taken, announces what each spec has, and hands a taken
//! container over to the sandbox it becomes. How a pool container is started and discarded
//! (here and for environment snapshots' pools, [`crate::envpool`]) is here too.

use crate::ctx::Ctx;
use crate::docker::{self, ContainerPlan};
use crate::pool::PoolEntry;
use halyard_platform::executor_client::ExecutorClient;
use halyard_platform::{Shutdown, bus, keys};
use halyard_protocol::system::SystemRecord;
use halyard_protocol::{SandboxId, subjects};
use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

/// Keeps every spec's pool full until `shutdown`, then removes the pool's containers.
pub async fn refill(ctx: Arc<Ctx>, mut shutdown: Shutdown) {
    let Some(dctx) = ctx.docker.as_ref() else { return };
    let size = ctx.config.sandbox.pool_size;
    let mut backoff = Duration::from_secs(1);
    let mut published: HashMap<String, usize> = HashMap::new();
    loop {
        let mut failed = false;
        for spec in ctx.config.sandbox.specs() {
            announce(&ctx, &spec.name, &mut published).await;
            while size > 0 && dctx.pool.len(&spec.name) < size && !shutdown.is_triggered() {
                match start_entry(&ctx, &spec).await {
                    Ok(entry) => {
                        tracing::debug!(container = %entry.container, spec = %spec.name, "warm-pool sandbox ready");
                        dctx.pool.push(&spec.name, entry);
                        announce(&ctx, &spec.name, &mut published).await;
                        backoff = Duration::from_secs(1);
                    }
                    Err(e) => {
                        tracing::warn!(spec = %spec.name, error = %e, "cannot start a warm-pool sandbox; retrying later");
                        failed = true;
                        break;
                    }
                }
            }
        }
        let pause = if failed { backoff } else { Duration::from_secs(30) };
        if failed {
            backoff = (backoff * 2).min(Duration::from_secs(60));
        }
        tokio::select! {
            _ = shutdown.wait() => break,
            _ = dctx.pool.wake.notified() => {}
            _ = tokio::time::sleep(pause) => {}
        }
    }
    // Pool sandboxes are no one's work: do not leave them running.
    for entry in dctx.pool.drain() {
        discard(dctx, &entry).await;
    }
}

/// Publishes the pool's size for `spec` if it changed since last published.
async fn announce(ctx: &Ctx, spec: &str, published: &mut HashMap<String, usize>) {
    let Some(dctx) = ctx.docker.as_ref() else { return };
    let ready = dctx.pool.len(spec);
    if published.get(spec) == Some(&ready) {
        return;
    }
    let record = SystemRecord::SandboxPool { spec: spec.to_owned(), ready: ready as u32, target: ctx.config.sandbox.pool_size as u32 };
    match bus::send(&ctx.js, subjects::pool_record(spec), record, None).await {
        Ok(_) => {
            published.insert(spec.to_owned(), ready);
        }
        Err(e) => tracing::warn!(spec, error = %e, "cannot publish the pool's state"),
    }
}

async fn start_entry(ctx: &Ctx, spec: &halyard_platform::config::SandboxSpec) -> Result<PoolEntry, String> {
    let dctx = ctx.docker.as_ref().ok_or("no docker")?;
    let image = dctx.images.get(&spec.name).ok_or_else(|| format!("no runtime image for spec {}", spec.name))?;
    start_pool_container(ctx, spec, image, HashMap::new(), None).await
}

/// Starts a pool container of `spec` from `image`, with `extra` labels besides a pool slot's and,
/// with `lower`, a workspace that is an overlay on it (an environment snapshot's pool).
pub(crate) async fn start_pool_container(
    ctx: &Ctx,
    spec: &halyard_platform::config::SandboxSpec,
    image: &str,
    extra: HashMap<String, String>,
    lower: Option<std::path::PathBuf>,
) -> Result<PoolEntry, String> {
    let dctx = ctx.docker.as_ref().ok_or("no docker")?;
    let slot = SandboxId::new();
    let id = format!("pool-{slot}");
    let naming = &dctx.engine.naming;
    let mut labels = docker::labels(naming, &spec.name, &slot.to_string(), None, None, true);
    labels.extend(extra);
    let plan = ContainerPlan {
        name: naming.name(&id),
        volume: naming.volume(&id),
        image,
        spec,
        labels,
        output_cap: ctx.config.sandbox.output_cap_bytes,
        browser_idle_secs: ctx.config.sandbox.browser_idle_secs,
        vscode_idle_secs: ctx.config.sandbox.vscode_idle_secs,
        lower,
    };
    let key = keys::session_key(&ctx.config.secret, slot);
    let timeout = Duration::from_secs(ctx.config.sandbox.start_timeout_secs);
    match crate::container::start_container(ctx, &plan, None, &key, timeout).await {
        Ok((container, urls)) => Ok(PoolEntry { slot, container, volume: plan.volume, urls }),
        Err((container, e)) => {
            if let Some(c) = container {
                let _ = dctx.engine.remove(&c).await;
            }
            let _ = dctx.engine.remove_volume(&plan.volume).await;
            Err(e)
        }
    }
}

/// Removes a pool container nobody will take, and its volume.
pub(crate) async fn discard(dctx: &crate::ctx::DockerCtx, entry: &PoolEntry) {
    let _ = dctx.engine.remove(&entry.container).await;
    let _ = dctx.engine.remove_volume(&entry.volume).await;
}

/// Hands a pool sandbox to sandbox `id`: its executor now answers to `id`'s key only.
pub async fn hand_over(ctx: &Ctx, entry: &PoolEntry, id: SandboxId) -> Result<(), String> {
    let url = entry.urls.iter().find(|u| u.name == halyard_protocol::system::AGENT_SERVER).ok_or("pool sandbox has no executor URL")?;
    let client = ExecutorClient::new(ctx.http.clone(), url.url.clone(), keys::session_key(&ctx.config.secret, entry.slot));
    client.rotate_key(&keys::session_key(&ctx.config.secret, id)).await.map_err(|e| e.to_string())
}
