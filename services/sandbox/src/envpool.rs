//! Warm pools of environment snapshots: for every ready snapshot this host holds whose
//! environment asks for a pool (`pool_size`), that many containers started from it, so a start
//! of its family takes one running, set up, with nothing left to do but fetch and `post_start`.
//!
//! The snapshot bucket says what is wanted: a resized environment (the gateway updates its
//! snapshots' `pool_size`), a new snapshot of a family (the old one's pool drains and the new
//! one's fills), a deleted or expired one (its pool drains). Pools are in the shared
//! [`crate::pool::Pool`] under [`pool_key`]; a pool container belongs to no one until a start
//! takes it (its executor then gets the sandbox's key), and the containers of a previous run
//! are removed at start-up as orphans, like the specs' pools.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use halyard_platform::{Shutdown, bus};
use halyard_protocol::environment::{Snapshot, SnapshotStatus, pool_key};
use halyard_protocol::subjects;
use halyard_protocol::system::SystemRecord;

use crate::ctx::Ctx;
use crate::docker;
use crate::pool::PoolEntry;

/// Keeps the snapshots' pools as the bucket wants them until `shutdown`.
pub async fn keep(ctx: Arc<Ctx>, mut shutdown: Shutdown) {
    let (Some(dctx), Some(snaps)) = (ctx.docker.as_ref(), ctx.snapshots.get()) else { return };
    let mut changes = match snaps.kv.watch_all().await {
        Ok(w) => Some(w),
        Err(e) => {
            tracing::warn!(error = %e, "cannot follow the snapshot bucket; snapshot pools are looked at every 30 s");
            None
        }
    };
    let mut announced: HashMap<String, (u32, u32)> = HashMap::new();
    loop {
        let wanted = match wanted(&ctx).await {
            Ok(w) => w,
            Err(e) => {
                tracing::warn!(error = %e, "cannot read the snapshot bucket");
                HashMap::new()
            }
        };
        // Pools nobody wants any more (or smaller now) give their containers back.
        for key in dctx.pool.keys().into_iter().filter(|k| k.starts_with(halyard_protocol::environment::SNAPSHOT_POOL_PREFIX)) {
            let keep = wanted.get(&key).map_or(0, |(_, size)| *size as usize);
            for entry in dctx.pool.trim(&key, keep) {
                crate::warm::discard(dctx, &entry).await;
            }
        }
        for (key, (snapshot, size)) in &wanted {
            while dctx.pool.len(key) < *size as usize && !shutdown.is_triggered() {
                match start_entry(&ctx, snapshot, key).await {
                    Ok(entry) => dctx.pool.push(key, entry),
                    Err(e) => {
                        tracing::warn!(snapshot = %snapshot.snapshot_id, error = %e, "cannot start a snapshot's pool sandbox");
                        break;
                    }
                }
            }
        }
        announce(&ctx, &wanted, &mut announced).await;
        let changed = async {
            match changes.as_mut() {
                Some(w) => {
                    let _ = w.next().await;
                }
                None => std::future::pending::<()>().await,
            }
        };
        tokio::select! {
            _ = shutdown.wait() => break,
            _ = dctx.pool.env_wake.notified() => {}
            _ = changed => {}
            _ = tokio::time::sleep(Duration::from_secs(30)) => {}
        }
    }
    for key in dctx.pool.keys().into_iter().filter(|k| k.starts_with(halyard_protocol::environment::SNAPSHOT_POOL_PREFIX)) {
        for entry in dctx.pool.trim(&key, 0) {
            crate::warm::discard(dctx, &entry).await;
        }
    }
}

/// The pools wanted now: this host's ready container snapshots with a pool size, by pool key.
async fn wanted(ctx: &Ctx) -> Result<HashMap<String, (Snapshot, u32)>, String> {
    let Some(snaps) = ctx.snapshots.get() else { return Ok(HashMap::new()) };
    let now = halyard_platform::now_ms();
    Ok(snaps
        .entries(">")
        .await?
        .into_iter()
        .map(|(_, s)| s)
        .filter(|s| s.node == ctx.config.node_id && s.kind == "docker" && s.status == SnapshotStatus::Ready && s.expires_ms > now)
        .filter(|s| s.pool_size > 0)
        .map(|s| (pool_key(&s.snapshot_id), (s.clone(), s.pool_size)))
        .collect())
}

/// Starts a container from `snapshot` for its pool `key`, its workspace an overlay on the
/// snapshot's.
async fn start_entry(ctx: &Ctx, snapshot: &Snapshot, key: &str) -> Result<PoolEntry, String> {
    let spec_name = snapshot.spec.clone().unwrap_or_else(|| ctx.config.sandbox.default_spec.clone());
    let mut spec = ctx.config.sandbox.spec(&spec_name).ok_or_else(|| format!("no sandbox spec {spec_name}"))?;
    if let Some(r) = &snapshot.runtime {
        docker::run_as(&mut spec, r);
    }
    let labels = HashMap::from([
        (docker::LABEL_POOL.to_owned(), key.to_owned()),
        (crate::snapshots::image::LABEL_SNAPSHOT.to_owned(), snapshot.snapshot_id.clone()),
    ]);
    let lower = crate::snapshots::workspace_dir(&ctx.config.data_dir, &snapshot.snapshot_id);
    crate::warm::start_pool_container(ctx, &spec, &snapshot.location, labels, Some(lower)).await
}

/// Publishes each snapshot pool's state (`halyard.sys.pool.<key>`) when it changed.
async fn announce(ctx: &Ctx, wanted: &HashMap<String, (Snapshot, u32)>, announced: &mut HashMap<String, (u32, u32)>) {
    let Some(dctx) = ctx.docker.as_ref() else { return };
    let mut keys: Vec<String> = wanted.keys().cloned().collect();
    keys.extend(announced.keys().filter(|k| !wanted.contains_key(*k)).cloned());
    for key in keys {
        let now = (dctx.pool.len(&key) as u32, wanted.get(&key).map_or(0, |(_, size)| *size));
        if announced.get(&key) == Some(&now) {
            continue;
        }
        let record = SystemRecord::SandboxPool { spec: key.clone(), ready: now.0, target: now.1 };
        if bus::send(&ctx.js, subjects::pool_record(&key), record, None).await.is_ok() {
            if now == (0, 0) {
                announced.remove(&key);
            } else {
                announced.insert(key, now);
            }
        }
    }
}
