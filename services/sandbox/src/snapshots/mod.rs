//! Environment snapshots ([`halyard_protocol::environment`]): a sandbox kept as it was after
//! setup, so the next start of the same family starts from it instead of setting up again.
//!
//! This supervisor makes a snapshot of one of its sandboxes when the conversation manager asks
//! (`SandboxCommand::Snapshot`), checks it against the owner's and the organization's disk quota,
//! and records it in the snapshot bucket, where the family's previous snapshot is replaced. It
//! starts sandboxes from its own snapshots ([`restore_process`], or a container from the
//! snapshot's image). The bucket is the truth: [`sweep`] removes the snapshots of this host whose
//! entry expired, and any file or image of this host that no entry names (deleted through the
//! API, replaced, or left by a crash half-way).
//!
//! A process sandbox's snapshot is a copy of its workspace and home under
//! `$HALYARD_DATA_DIR/snapshots/<id>` (reflinked where the file system can, owned by Halyard and
//! readable by no sandbox); a container's is an image ([`image`]).

pub mod files;
pub mod image;

use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::time::Duration;

use async_nats::jetstream::kv;
use futures::StreamExt;
use halyard_platform::Shutdown;
use halyard_protocol::environment::{self, Runtime, Snapshot, SnapshotPlan, SnapshotRef, SnapshotStatus};

use crate::ctx::Ctx;
use crate::layout::Layout;
pub use crate::snapshot_store::Snapshots;
use files::{disk_bytes, held_dirs, set_private};
pub use files::{process_root, workspace_dir};

/// What a snapshot is made from.
pub enum Source<'a> {
    Process(&'a Layout),
    /// `runtime`: the container's image, user and variables when not its spec's.
    Container {
        container: &'a str,
        volume: &'a str,
        spec: &'a str,
        runtime: Option<&'a Runtime>,
    },
}

/// Makes snapshot `plan` of `source` and records the outcome (a refusal too) in the bucket.
pub async fn make(ctx: &Ctx, source: Source<'_>, plan: &SnapshotPlan) -> Snapshot {
    let Some(snaps) = ctx.snapshots.get() else { return refused(ctx, plan, "snapshots are not available on this host".into()) };
    snaps.begin(&plan.snapshot_id);
    let (mut kept_runtime, mut kept_spec) = (None, None);
    let made = match source {
        Source::Process(layout) => copy_process(ctx, layout, &plan.snapshot_id).await,
        Source::Container { container, volume, spec, runtime } => {
            kept_runtime = runtime.map(|r| Runtime { image: String::new(), ..r.clone() });
            kept_spec = Some(spec.to_owned());
            let base = runtime.map(|r| r.image.as_str());
            image::commit(ctx, container, volume, spec, base, &plan.snapshot_id).await
        }
    };
    let snapshot = match made {
        Err(e) => refused(ctx, plan, format!("the snapshot could not be made: {e}")),
        Ok((location, size_bytes)) => {
            let kind = if ctx.docker.is_some() { "docker" } else { "process" };
            let made = Snapshot { runtime: kept_runtime, spec: kept_spec, ..ready(ctx, plan, kind, location, size_bytes) };
            match over_quota(ctx, snaps, &made).await {
                Ok(None) => made,
                Ok(Some(why)) | Err(why) => {
                    remove_artefact(ctx, &made.location).await;
                    refused(ctx, plan, why)
                }
            }
        }
    };
    let key = environment::snapshot_key(&plan.owner, plan.org.as_deref(), &plan.family);
    let previous = match snaps.kv.get(&key).await {
        Ok(Some(bytes)) => serde_json::from_slice::<Snapshot>(&bytes).ok(),
        _ => None,
    };
    let stored = match serde_json::to_vec(&snapshot) {
        Ok(bytes) => snaps.kv.put(&key, bytes.into()).await.map_err(|e| e.to_string()),
        Err(e) => Err(e.to_string()),
    };
    snaps.end(&plan.snapshot_id);
    if let Err(e) = stored {
        tracing::warn!(snapshot = %plan.snapshot_id, error = %e, "cannot record the snapshot; removing it");
        remove_artefact(ctx, &snapshot.location).await;
        return refused(ctx, plan, format!("the snapshot could not be recorded: {e}"));
    }
    // The family's previous snapshot is replaced: its files go now if they are here (else the
    // sweep of their host removes them).
    if let Some(old) = previous.filter(|p| p.snapshot_id != snapshot.snapshot_id && p.node == ctx.config.node_id) {
        remove_artefact(ctx, &old.location).await;
    }
    tracing::info!(snapshot = %snapshot.snapshot_id, status = ?snapshot.status, size = snapshot.size_bytes, "environment snapshot");
    snapshot
}

fn ready(ctx: &Ctx, plan: &SnapshotPlan, kind: &str, location: String, size_bytes: u64) -> Snapshot {
    let now = halyard_platform::now_ms();
    Snapshot {
        snapshot_id: plan.snapshot_id.clone(),
        status: SnapshotStatus::Ready,
        detail: None,
        owner: plan.owner.clone(),
        org: plan.org.clone(),
        environment: plan.environment.clone(),
        repository: plan.repository.clone(),
        branch: plan.branch.clone(),
        family: plan.family.clone(),
        key: plan.key.clone(),
        kind: kind.to_owned(),
        node: ctx.config.node_id.clone(),
        location,
        size_bytes,
        setup_secs: plan.setup_secs,
        created_ms: now,
        expires_ms: now.saturating_add(i64::try_from(plan.ttl_secs).unwrap_or(i64::MAX / 2).saturating_mul(1000)),
        runtime: None,
        pool_size: plan.pool_size,
        spec: None,
        setup_log: plan.setup_log.clone(),
    }
}

fn refused(ctx: &Ctx, plan: &SnapshotPlan, why: String) -> Snapshot {
    let kind = if ctx.docker.is_some() { "docker" } else { "process" };
    Snapshot { status: SnapshotStatus::Refused, detail: Some(why), expires_ms: 0, pool_size: 0, ..ready(ctx, plan, kind, String::new(), 0) }
}

/// Why `made` may not be kept: past its owner's or its organization's quota (the family's
/// snapshot it replaces does not count).
async fn over_quota(ctx: &Ctx, snaps: &Snapshots, made: &Snapshot) -> Result<Option<String>, String> {
    let cfg = &ctx.config.sandbox;
    let mib = |b: u64| b.div_ceil(1 << 20);
    let used = |list: Vec<(String, Snapshot)>| -> u64 {
        list.iter().filter(|(_, s)| s.status == SnapshotStatus::Ready && s.family != made.family).map(|(_, s)| s.size_bytes).sum()
    };
    if cfg.snapshot_quota_user_mb > 0 {
        let mine = used(snaps.entries(&environment::owner_filter(&made.owner)).await?);
        if mib(mine + made.size_bytes) > cfg.snapshot_quota_user_mb {
            return Ok(Some(format!(
                "not kept: this snapshot takes {} MiB and your snapshots {} MiB already, past your quota of {} MiB \
                 (HALYARD_SNAPSHOT_QUOTA_USER_MB); delete snapshots you no longer need (DELETE /api/v1/environments/snapshots/{{id}})",
                mib(made.size_bytes),
                mib(mine),
                cfg.snapshot_quota_user_mb
            )));
        }
    }
    if let (Some(org), true) = (&made.org, cfg.snapshot_quota_org_mb > 0) {
        let theirs = used(snaps.entries(&environment::org_filter(org)).await?);
        if mib(theirs + made.size_bytes) > cfg.snapshot_quota_org_mb {
            return Ok(Some(format!(
                "not kept: this snapshot takes {} MiB and organization {org}'s snapshots {} MiB already, past its quota of {} MiB \
                 (HALYARD_SNAPSHOT_QUOTA_ORG_MB)",
                mib(made.size_bytes),
                mib(theirs),
                cfg.snapshot_quota_org_mb
            )));
        }
    }
    Ok(None)
}

/// Copies a process sandbox's workspace and home (without the checkpoint store) to a snapshot
/// directory, owned by Halyard: (its path, bytes).
async fn copy_process(ctx: &Ctx, layout: &Layout, id: &str) -> Result<(String, u64), String> {
    let root = process_root(&ctx.config.data_dir);
    let dir = root.join(id);
    std::fs::create_dir_all(&root).map_err(|e| format!("{}: {e}", root.display()))?;
    set_private(&root)?;
    std::fs::create_dir(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let copied = async {
        copy_tree(&layout.workspace(), &dir.join("workspace")).await?;
        copy_tree(&layout.home(), &dir.join("home")).await?;
        let store = dir.join("workspace/.halyard");
        if store.exists() {
            std::fs::remove_dir_all(&store).map_err(|e| format!("{}: {e}", store.display()))?;
        }
        Ok::<_, String>(())
    };
    if let Err(e) = copied.await {
        let _ = std::fs::remove_dir_all(&dir);
        return Err(e);
    }
    let size = tokio::task::spawn_blocking({
        let dir = dir.clone();
        move || disk_bytes(&dir)
    })
    .await
    .unwrap_or(0);
    Ok((dir.display().to_string(), size))
}

/// Starts a process sandbox's directories from snapshot `snap` (of this host): its workspace
/// and home become copies of the snapshot's, owned by Halyard until the sandbox's preparation
/// gives them to the sandbox's user.
pub async fn restore_process(ctx: &Ctx, snap: &SnapshotRef, layout: &Layout) -> Result<(), String> {
    let dir = PathBuf::from(&snap.location);
    if snap.kind != "process" || snap.node != ctx.config.node_id || !dir.starts_with(process_root(&ctx.config.data_dir)) {
        return Err(format!("snapshot {} is not this host's", snap.snapshot_id));
    }
    if !dir.join("workspace").is_dir() {
        return Err(format!("snapshot {} is gone from this host", snap.snapshot_id));
    }
    std::fs::create_dir_all(&layout.root).map_err(|e| format!("{}: {e}", layout.root.display()))?;
    copy_tree(&dir.join("workspace"), &layout.workspace()).await?;
    copy_tree(&dir.join("home"), &layout.home()).await
}

/// `cp -a` without the owners (reflinked where the file system can): the copy is Halyard's.
async fn copy_tree(from: &Path, to: &Path) -> Result<(), String> {
    if !from.exists() {
        return std::fs::create_dir_all(to).map_err(|e| format!("{}: {e}", to.display()));
    }
    let out = tokio::process::Command::new("cp")
        .args(["-a", "--reflink=auto", "--no-preserve=ownership", "-T"])
        .arg(from)
        .arg(to)
        .output()
        .await
        .map_err(|e| format!("cp: {e}"))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!("copying {} failed: {}", from.display(), String::from_utf8_lossy(&out.stderr).trim()))
    }
}

/// Removes a snapshot's files or image on this host.
async fn remove_artefact(ctx: &Ctx, location: &str) {
    if location.is_empty() {
        return;
    }
    if ctx.docker.is_some() {
        image::remove(ctx, location).await;
    } else if Path::new(location).starts_with(process_root(&ctx.config.data_dir)) {
        let path = PathBuf::from(location);
        let _ = tokio::task::spawn_blocking(move || std::fs::remove_dir_all(path)).await;
    }
}

/// Every minute, at once, whenever an entry is deleted (through the API) and whenever a sandbox
/// started from a snapshot is deleted (it may have held a deleted one back): removes this
/// host's snapshots whose entry expired, and the files or images of this host no entry names.
pub async fn sweep(ctx: std::sync::Arc<Ctx>, mut shutdown: Shutdown) {
    let Some(snaps) = ctx.snapshots.get() else { return };
    let mut deletes = match snaps.kv.watch_all().await {
        Ok(w) => Some(w),
        Err(e) => {
            tracing::warn!(error = %e, "cannot follow the snapshot bucket; sweeping every minute only");
            None
        }
    };
    loop {
        if let Err(e) = sweep_once(&ctx).await {
            tracing::warn!(error = %e, "cannot sweep environment snapshots");
        }
        let deleted = async {
            match deletes.as_mut() {
                Some(w) => loop {
                    match w.next().await {
                        Some(Ok(entry)) if entry.operation != kv::Operation::Put => return,
                        Some(_) => {}
                        None => std::future::pending::<()>().await,
                    }
                },
                None => std::future::pending::<()>().await,
            }
        };
        tokio::select! {
            _ = shutdown.wait() => return,
            _ = deleted => {}
            _ = snaps.freed.notified() => {}
            _ = tokio::time::sleep(Duration::from_secs(60)) => {}
        }
    }
}

async fn sweep_once(ctx: &Ctx) -> Result<(), String> {
    let Some(snaps) = ctx.snapshots.get() else { return Ok(()) };
    let now = halyard_platform::now_ms();
    let mut named = HashSet::new();
    for (key, s) in snaps.entries(">").await? {
        if s.node != ctx.config.node_id {
            continue;
        }
        if s.status == SnapshotStatus::Ready && s.expires_ms <= now {
            tracing::info!(snapshot = %s.snapshot_id, "environment snapshot expired");
            // Only if the entry is still this one (a new snapshot of the family may have come).
            if let Ok(Some(entry)) = snaps.kv.entry(&key).await {
                let _ = snaps.kv.delete_expect_revision(&key, Some(entry.revision)).await;
            }
            continue;
        }
        named.insert(s.snapshot_id);
    }
    let held = if ctx.docker.is_some() { image::held(ctx).await? } else { held_dirs(ctx) };
    for (id, location) in held {
        if !named.contains(&id) && !snaps.is_making(&id) {
            tracing::info!(snapshot = %id, "removing an environment snapshot no entry names");
            remove_artefact(ctx, &location).await;
        }
    }
    Ok(())
}
