//! A container's environment snapshot: an image holding its writable layer (what setup
//! installed outside the workspace) and its workspace.
//!
//! The workspace is a volume, which `docker commit` leaves out. So the container is committed
//! first, then a helper container of that image (as root, no network) copies the volume's files
//! into the image's own workspace directory, and is committed as the snapshot, with the runtime
//! image's entry point and command. A sandbox started from it gets a new, empty workspace volume,
//! which the engine fills from the image's directory the first time it is mounted: no copy by
//! Halyard, and the snapshot's image is never written.

use std::collections::HashMap;

use bollard::models::ContainerConfig;
use bollard::query_parameters::{CommitContainerOptions, ListImagesOptions, RemoveImageOptions};

use crate::ctx::Ctx;
use crate::docker::{LABEL_DEPLOYMENT, Naming};

/// On a snapshot's image: its id.
pub const LABEL_SNAPSHOT: &str = "dev.halyard.snapshot";
/// Where the helper sees the workspace volume.
const SOURCE: &str = "/halyard-snapshot-source";

fn repository(naming: &Naming) -> String {
    format!("halyard-{}-snapshot", &naming.deployment[..naming.deployment.len().min(12)])
}

/// Commits `container` (on workspace `volume`, of sandbox spec `spec`, made from runtime image
/// `base` if not the spec's) as snapshot `id`: (its image, the bytes it adds to that image).
pub async fn commit(ctx: &Ctx, container: &str, volume: &str, spec: &str, base: Option<&str>, id: &str) -> Result<(String, u64), String> {
    let dctx = ctx.docker.as_ref().ok_or("no Docker engine")?;
    let docker = &dctx.engine.docker;
    let spec = ctx.config.sandbox.spec(spec).ok_or_else(|| format!("no sandbox spec {spec}"))?;
    let runtime = match base {
        Some(b) => b,
        None => dctx.images.get(&spec.name).ok_or_else(|| format!("spec {} has no runtime image", spec.name))?,
    };
    let engine = |op: &str, e: bollard::errors::Error| format!("{op}: {e}");
    // 1. The container's own layer (paused for the moment it takes).
    let options = CommitContainerOptions { container: Some(container.to_owned()), pause: true, ..Default::default() };
    let layer = docker.commit_container(options, ContainerConfig::default()).await.map_err(|e| engine("commit", e))?.id;
    // 2. The workspace copied into the image's directory by a helper.
    let mut labels = HashMap::from([(LABEL_DEPLOYMENT.to_owned(), dctx.engine.naming.deployment.clone())]);
    labels.insert(LABEL_SNAPSHOT.to_owned(), id.to_owned());
    let wd = spec.working_dir.clone();
    let script = format!("cp -a {SOURCE}/. '{wd}/' && rm -rf '{wd}/.halyard'");
    let copied = crate::helper::run(ctx, &layer, "snapshot", script, (volume, SOURCE, true), labels.clone()).await;
    let helper = match copied {
        Ok(h) => h.id,
        Err(e) => {
            let _ = docker.remove_image(&layer, None::<RemoveImageOptions>, None).await;
            return Err(e);
        }
    };
    let result = finish(docker, &helper, &layer, runtime, &repository(&dctx.engine.naming), id, labels).await;
    let _ = dctx.engine.remove(&helper).await;
    // The intermediate layer is the snapshot's parent; untagged, it goes with the snapshot.
    if result.is_err() {
        let _ = docker.remove_image(&layer, None::<RemoveImageOptions>, None).await;
    }
    result
}

/// Commits the helper as the snapshot's image, with the runtime image's way of starting.
async fn finish(
    docker: &bollard::Docker,
    helper: &str,
    layer: &str,
    runtime: &str,
    repo: &str,
    id: &str,
    labels: HashMap<String, String>,
) -> Result<(String, u64), String> {
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
    let options = CommitContainerOptions {
        container: Some(helper.to_owned()),
        repo: Some(repo.to_owned()),
        tag: Some(id.to_owned()),
        pause: false,
        ..Default::default()
    };
    docker.commit_container(options, config).await.map_err(|e| format!("commit the snapshot: {e}"))?;
    let image = format!("{repo}:{id}");
    let size = docker.inspect_image(&image).await.map_err(|e| format!("inspect {image}: {e}"))?.size.unwrap_or(0);
    let base_size = base.size.unwrap_or(0);
    tracing::debug!(%image, layer, size, base_size, "snapshot image committed");
    Ok((image, u64::try_from(size - base_size).unwrap_or(0)))
}

/// Removes a snapshot's image (and the layers only it used).
pub async fn remove(ctx: &Ctx, image: &str) {
    let Some(dctx) = ctx.docker.as_ref() else { return };
    let options = RemoveImageOptions { force: true, ..Default::default() };
    if let Err(e) = dctx.engine.docker.remove_image(image, Some(options), None).await {
        tracing::debug!(image, error = %e, "snapshot image not removed");
    }
}

/// This deployment's snapshot images: (snapshot id, image).
pub async fn held(ctx: &Ctx) -> Result<Vec<(String, String)>, String> {
    let Some(dctx) = ctx.docker.as_ref() else { return Ok(Vec::new()) };
    let filters = HashMap::from([(
        "label".to_owned(),
        vec![format!("{LABEL_DEPLOYMENT}={}", dctx.engine.naming.deployment), LABEL_SNAPSHOT.to_owned()],
    )]);
    let options = ListImagesOptions { filters: Some(filters), ..Default::default() };
    let images = dctx.engine.docker.list_images(Some(options)).await.map_err(|e| format!("list images: {e}"))?;
    Ok(images
        .into_iter()
        .filter_map(|i| {
            let id = i.labels.get(LABEL_SNAPSHOT)?.clone();
            let tag = i.repo_tags.first().cloned().unwrap_or(i.id);
            Some((id, tag))
        })
        .collect())
}
