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

use bollard::models::{ContainerConfig, ContainerCreateBody, HostConfig, Mount, MountType};
use bollard::query_parameters::{
    CommitContainerOptions, CreateContainerOptions, ListImagesOptions, LogsOptions, RemoveImageOptions, WaitContainerOptions,
};
use futures::StreamExt;

use crate::ctx::Ctx;
use crate::docker::{LABEL_DEPLOYMENT, Naming};

/// On a snapshot's image: its id.
pub const LABEL_SNAPSHOT: &str = "dev.halyard.snapshot";
/// Where the helper sees the workspace volume.
const SOURCE: &str = "/halyard-snapshot-source";

fn repository(naming: &Naming) -> String {
    format!("halyard-{}-snapshot", &naming.deployment[..naming.deployment.len().min(12)])
}

/// Commits `container` (on workspace `volume`, of sandbox spec `spec`) as snapshot `id`: (its
/// image, the bytes it adds to the runtime image).
pub async fn commit(ctx: &Ctx, container: &str, volume: &str, spec: &str, id: &str) -> Result<(String, u64), String> {
    let dctx = ctx.docker.as_ref().ok_or("no Docker engine")?;
    let docker = &dctx.engine.docker;
    let spec = ctx.config.sandbox.spec(spec).ok_or_else(|| format!("no sandbox spec {spec}"))?;
    let runtime = dctx.images.get(&spec.name).ok_or_else(|| format!("spec {} has no runtime image", spec.name))?;
    let engine = |op: &str, e: bollard::errors::Error| format!("{op}: {e}");
    // 1. The container's own layer (paused for the moment it takes).
    let options = CommitContainerOptions { container: Some(container.to_owned()), pause: true, ..Default::default() };
    let layer = docker.commit_container(options, ContainerConfig::default()).await.map_err(|e| engine("commit", e))?.id;
    // 2. The workspace copied into the image's directory by a helper.
    let mut labels = HashMap::from([(LABEL_DEPLOYMENT.to_owned(), dctx.engine.naming.deployment.clone())]);
    labels.insert(LABEL_SNAPSHOT.to_owned(), id.to_owned());
    let wd = spec.working_dir.clone();
    let script = format!("cp -a {SOURCE}/. '{wd}/' && rm -rf '{wd}/.halyard'");
    let body = ContainerCreateBody {
        image: Some(layer.clone()),
        entrypoint: Some(vec!["/bin/sh".into(), "-c".into()]),
        cmd: Some(vec![script]),
        user: Some("0:0".into()),
        labels: Some(labels.clone()),
        network_disabled: Some(true),
        host_config: Some(HostConfig {
            mounts: Some(vec![Mount {
                target: Some(SOURCE.into()),
                source: Some(volume.to_owned()),
                typ: Some(MountType::VOLUME),
                read_only: Some(true),
                ..Default::default()
            }]),
            network_mode: Some("none".into()),
            ..Default::default()
        }),
        ..Default::default()
    };
    let name = format!("{}-snapshot-{id}", dctx.engine.naming.name("helper"));
    let helper = docker
        .create_container(Some(CreateContainerOptions { name: Some(name), ..Default::default() }), body)
        .await
        .map_err(|e| engine("create the snapshot helper", e))?
        .id;
    let copied = copy(docker, &helper).await;
    let result = match copied {
        Ok(()) => finish(docker, &helper, &layer, runtime, &repository(&dctx.engine.naming), id, labels).await,
        Err(e) => Err(e),
    };
    let _ = dctx.engine.remove(&helper).await;
    // The intermediate layer is the snapshot's parent; untagged, it goes with the snapshot.
    if result.is_err() {
        let _ = docker.remove_image(&layer, None::<RemoveImageOptions>, None).await;
    }
    result
}

/// Runs the helper to its end: an error with its output unless it exits 0.
async fn copy(docker: &bollard::Docker, helper: &str) -> Result<(), String> {
    docker.start_container(helper, None::<bollard::query_parameters::StartContainerOptions>).await.map_err(|e| format!("start: {e}"))?;
    let mut wait = docker.wait_container(helper, None::<WaitContainerOptions>);
    let code = match wait.next().await {
        Some(Ok(r)) => r.status_code,
        // A non-zero exit comes as an error carrying the code.
        Some(Err(bollard::errors::Error::DockerContainerWaitError { code, .. })) => code,
        Some(Err(e)) => return Err(format!("wait: {e}")),
        None => return Err("the copy's helper vanished".into()),
    };
    if code == 0 {
        return Ok(());
    }
    let options = LogsOptions { stdout: true, stderr: true, tail: "20".into(), ..Default::default() };
    let mut logs = docker.logs(helper, Some(options));
    let mut text = String::new();
    while let Some(Ok(chunk)) = logs.next().await {
        text.push_str(&chunk.to_string());
    }
    Err(format!("copying the workspace exited with {code}: {}", text.trim()))
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
