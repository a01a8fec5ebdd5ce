//! A container's environment snapshot: an image holding its writable layer (what setup
//! installed outside the workspace), and its workspace as a directory of the engine's host.
//!
//! The workspace is a volume, which `docker commit` leaves out: a helper container (as root, no
//! network) copies the volume's files to the snapshot's directory, then the container itself
//! is committed (paused for the moment it takes) with the runtime image's entry point and
//! command. A sandbox started from it runs that image on a new volume that is an overlay on the
//! snapshot's directory ([`crate::docker::Engine::ensure_volume`]): it sees setup's files at
//! once, copies nothing up front, and writes its changes to a directory of its own. The
//! snapshot's directory and image stay while a volume is an overlay on them (its volumes carry
//! [`LABEL_SNAPSHOT`]).

use std::collections::HashMap;

use bollard::models::ContainerConfig;
use bollard::query_parameters::{CommitContainerOptions, ListImagesOptions, RemoveImageOptions};

use crate::ctx::Ctx;
use crate::docker::{LABEL_DEPLOYMENT, Naming};

/// On a snapshot's image, and on the volumes that are overlays on its workspace: its id.
pub const LABEL_SNAPSHOT: &str = "dev.halyard.snapshot";
/// Where the helper sees the workspace volume, and the snapshot's directory.
const SOURCE: &str = "/halyard-snapshot-source";
const TARGET: &str = "/halyard-snapshot-target";

fn repository(naming: &Naming) -> String {
    format!("halyard-{}-snapshot", &naming.deployment[..naming.deployment.len().min(12)])
}

/// Keeps `container` (on workspace `volume`, of sandbox spec `spec`, made from runtime image
/// `base` if not the spec's) as snapshot `id`: (its image, the bytes it adds to that image and
/// its workspace's).
pub async fn commit(ctx: &Ctx, container: &str, volume: &str, spec: &str, base: Option<&str>, id: &str) -> Result<(String, u64), String> {
    let dctx = ctx.docker.as_ref().ok_or("no Docker engine")?;
    let docker = &dctx.engine.docker;
    let spec = ctx.config.sandbox.spec(spec).ok_or_else(|| format!("no sandbox spec {spec}"))?;
    let runtime = match base {
        Some(b) => b,
        None => dctx.images.get(&spec.name).ok_or_else(|| format!("spec {} has no runtime image", spec.name))?,
    };
    // 1. The workspace, to the snapshot's directory (without the checkpoint store).
    let dir = super::files::workspace_dir(&ctx.config.data_dir, id);
    std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    // Readable by no sandbox and no user of the host: the engine mounts it as root.
    super::files::set_private(&super::files::process_root(&ctx.config.data_dir))?;
    let labels =
        HashMap::from([(LABEL_DEPLOYMENT.to_owned(), dctx.engine.naming.deployment.clone()), (LABEL_SNAPSHOT.to_owned(), id.to_owned())]);
    let script = format!("cp -a {SOURCE}/. {TARGET}/ && rm -rf {TARGET}/.halyard");
    let mounts =
        vec![crate::helper::mount(volume, SOURCE, true, false), crate::helper::mount(&dir.display().to_string(), TARGET, false, true)];
    let helper = crate::helper::run(ctx, runtime, "snapshot", script, mounts, Default::default()).await?;
    let _ = dctx.engine.remove(&helper.id).await;
    // 2. The container's own layer, with the runtime image's way of starting.
    let base = docker.inspect_image(runtime).await.map_err(|e| format!("inspect {runtime}: {e}"))?;
    let config = base.config.unwrap_or_default();
    let config = ContainerConfig {
        entrypoint: config.entrypoint,
        cmd: config.cmd,
        user: config.user,
        env: config.env,
        working_dir: config.working_dir,
        labels: Some(labels),
        ..Default::default()
    };
    let repo = repository(&dctx.engine.naming);
    let options = CommitContainerOptions {
        container: Some(container.to_owned()),
        repo: Some(repo.clone()),
        tag: Some(id.to_owned()),
        pause: true,
        ..Default::default()
    };
    docker.commit_container(options, config).await.map_err(|e| format!("commit the snapshot: {e}"))?;
    let image = format!("{repo}:{id}");
    let size = docker.inspect_image(&image).await.map_err(|e| format!("inspect {image}: {e}"))?.size.unwrap_or(0);
    let layer = u64::try_from(size - base.size.unwrap_or(0)).unwrap_or(0);
    let files = tokio::task::spawn_blocking(move || super::files::disk_bytes(&dir)).await.unwrap_or(0);
    tracing::debug!(%image, layer, files, "snapshot committed");
    Ok((image, layer + files))
}

/// Removes a snapshot's image (and the layers only it used) and its workspace's directory,
/// unless a volume is still an overlay on it (the sweep tries again later).
pub async fn remove(ctx: &Ctx, image: &str) {
    let Some(dctx) = ctx.docker.as_ref() else { return };
    let id = image.rsplit_once(':').map_or(image, |(_, tag)| tag);
    match dctx.engine.volumes_labelled(&format!("{LABEL_SNAPSHOT}={id}")).await {
        Ok(v) if v.is_empty() => {}
        Ok(v) => {
            tracing::debug!(snapshot = id, volumes = v.len(), "snapshot still under a sandbox's workspace; kept for now");
            return;
        }
        Err(e) => {
            tracing::debug!(snapshot = id, error = %e, "cannot tell whether the snapshot is in use; kept for now");
            return;
        }
    }
    let dir = super::files::process_root(&ctx.config.data_dir).join(id);
    if !id.is_empty() && !id.contains('/') && dir.exists() {
        let _ = tokio::task::spawn_blocking(move || std::fs::remove_dir_all(dir)).await;
    }
    let options = RemoveImageOptions { force: true, ..Default::default() };
    if let Err(e) = dctx.engine.docker.remove_image(image, Some(options), None).await {
        tracing::debug!(image, error = %e, "snapshot image not removed");
    }
}

/// This deployment's snapshots on this host: (snapshot id, image), from their images and from
/// their workspaces' directories (one left without its image by a failure half-way included).
pub async fn held(ctx: &Ctx) -> Result<Vec<(String, String)>, String> {
    let Some(dctx) = ctx.docker.as_ref() else { return Ok(Vec::new()) };
    let filters = HashMap::from([(
        "label".to_owned(),
        vec![format!("{LABEL_DEPLOYMENT}={}", dctx.engine.naming.deployment), LABEL_SNAPSHOT.to_owned()],
    )]);
    let options = ListImagesOptions { filters: Some(filters), ..Default::default() };
    let images = dctx.engine.docker.list_images(Some(options)).await.map_err(|e| format!("list images: {e}"))?;
    let mut held: Vec<(String, String)> = images
        .into_iter()
        .filter_map(|i| {
            let id = i.labels.get(LABEL_SNAPSHOT)?.clone();
            let tag = i.repo_tags.first().cloned().unwrap_or(i.id);
            Some((id, tag))
        })
        .collect();
    let repo = repository(&dctx.engine.naming);
    for (id, _) in super::files::held_dirs(ctx) {
        if !held.iter().any(|(h, _)| *h == id) {
            held.push((id.clone(), format!("{repo}:{id}")));
        }
    }
    Ok(held)
}
