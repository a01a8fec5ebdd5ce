//! The warm pool: docker sandboxes started ahead of demand, per spec, so a new conversation
//! gets a running executor without waiting for a container to start.
//!
//! A pool container belongs to no one: it has its own slot id (labels, name, volume) and a
//! session key derived from that slot. Taking one hands its executor the key of the sandbox it
//! becomes (authenticated with the slot key), and the refill task starts a replacement in the
//! background. The pool lives in memory only: at start-up the supervisor removes the pool
//! containers of a previous run as orphans and refills.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use halyard_platform::executor_client::ExecutorClient;
use halyard_platform::{Shutdown, bus, keys};
use halyard_protocol::system::{ExposedUrl, SystemRecord};
use halyard_protocol::{SandboxId, subjects};

use crate::docker::{self, ContainerPlan};
use crate::supervisor::Ctx;

/// A pre-started sandbox.
#[derive(Clone, Debug)]
pub struct PoolEntry {
    pub slot: SandboxId,
    pub container: String,
    pub volume: String,
    pub urls: Vec<ExposedUrl>,
}

/// Ready entries per spec.
#[derive(Default)]
pub struct Pool {
    ready: Mutex<HashMap<String, VecDeque<PoolEntry>>>,
    wake: tokio::sync::Notify,
}

impl Pool {
    /// Takes a ready sandbox of `spec`, if there is one, and wakes the refill (which also
    /// publishes the pool's new state).
    pub fn take(&self, spec: &str) -> Option<PoolEntry> {
        let entry = self.ready.lock().ok()?.get_mut(spec)?.pop_front();
        self.wake.notify_one();
        entry
    }

    /// Forgets a pool container that died or was removed; true if it was one.
    pub fn forget(&self, container: &str) -> bool {
        let Ok(mut ready) = self.ready.lock() else { return false };
        let mut found = false;
        for entries in ready.values_mut() {
            let before = entries.len();
            entries.retain(|e| e.container != container);
            found |= entries.len() != before;
        }
        if found {
            self.wake.notify_one();
        }
        found
    }

    pub fn len(&self, spec: &str) -> usize {
        self.ready.lock().map(|r| r.get(spec).map_or(0, VecDeque::len)).unwrap_or(0)
    }

    pub fn is_empty(&self) -> bool {
        self.ready.lock().map(|r| r.values().all(VecDeque::is_empty)).unwrap_or(true)
    }

    fn push(&self, spec: &str, entry: PoolEntry) {
        if let Ok(mut ready) = self.ready.lock() {
            ready.entry(spec.to_owned()).or_default().push_back(entry);
        }
    }

    fn drain(&self) -> Vec<PoolEntry> {
        self.ready.lock().map(|mut r| r.values_mut().flat_map(|q| q.drain(..)).collect()).unwrap_or_default()
    }
}

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
        let _ = dctx.engine.remove(&entry.container).await;
        let _ = dctx.engine.remove_volume(&entry.volume).await;
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
    let slot = SandboxId::new();
    let id = format!("pool-{slot}");
    let naming = &dctx.engine.naming;
    let labels = docker::labels(naming, &spec.name, &slot.to_string(), None, None, true);
    let plan = ContainerPlan {
        name: naming.name(&id),
        volume: naming.volume(&id),
        image,
        spec,
        labels,
        output_cap: ctx.config.sandbox.output_cap_bytes,
        browser_idle_secs: ctx.config.sandbox.browser_idle_secs,
        vscode_idle_secs: ctx.config.sandbox.vscode_idle_secs,
    };
    let key = keys::session_key(&ctx.config.secret, slot);
    let timeout = Duration::from_secs(ctx.config.sandbox.start_timeout_secs);
    match crate::sandbox::start_container(ctx, &plan, None, &key, timeout).await {
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

/// Hands a pool sandbox to sandbox `id`: its executor now answers to `id`'s key only.
pub async fn hand_over(ctx: &Ctx, entry: &PoolEntry, id: SandboxId) -> Result<(), String> {
    let url = entry.urls.iter().find(|u| u.name == halyard_protocol::system::AGENT_SERVER).ok_or("pool sandbox has no executor URL")?;
    let client = ExecutorClient::new(ctx.http.clone(), url.url.clone(), keys::session_key(&ctx.config.secret, entry.slot));
    client.rotate_key(&keys::session_key(&ctx.config.secret, id)).await.map_err(|e| e.to_string())
}
