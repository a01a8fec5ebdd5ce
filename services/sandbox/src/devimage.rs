//! A dev container's image as a sandbox runs it ([`prepare`]): the image the repository names
//! (present on the engine: no registry is reachable) or one built from the repository's
//! Dockerfile, with Halyard's executor added ([`crate::image::ensure`]), and the user it runs as.
//!
//! The build context is read from the sandbox's own container (the engine's archive of the
//! context's directory, which lies on the workspace volume), never from the host's disk, and
//! the build runs on the spec's sandbox network (its egress class), like the sandbox itself: a
//! hostile Dockerfile reaches nothing the agent could not. Built images are tagged by a hash of
//! their context, Dockerfile and arguments, so an unchanged one is not built again.

use std::collections::HashMap;

use bollard::query_parameters::{BuildImageOptions, DownloadFromContainerOptions};
use futures::StreamExt;
use halyard_platform::config::SandboxSpec;
use halyard_protocol::environment::{ImagePlan, Runtime};
use sha2::{Digest, Sha256};

use crate::ctx::Ctx;
use crate::docker::LABEL_DEPLOYMENT;

/// The largest build context read from a workspace.
const MAX_CONTEXT_BYTES: usize = 512 << 20;
/// Where the sandbox sees its workspace, which the context's path is relative to.
fn context_path(spec: &SandboxSpec, context: &str) -> String {
    if context == "." { spec.working_dir.clone() } else { format!("{}/{context}", spec.working_dir.trim_end_matches('/')) }
}

/// The runtime (executor added) for `plan`, for a sandbox of `spec` whose container is
/// `container`.
pub async fn prepare(ctx: &Ctx, spec: &SandboxSpec, container: &str, plan: &ImagePlan) -> Result<Runtime, String> {
    let dctx = ctx.docker.as_ref().ok_or("no Docker engine")?;
    let docker = &dctx.engine.docker;
    let base = match (&plan.image, &plan.context) {
        (Some(image), _) => {
            if !crate::docker::image_exists(docker, image).await {
                return Err(format!(
                    "the dev container's image {image} is not on this Docker engine, and no registry is reachable to pull it: \
                     load it into the engine (`docker load`), or describe it with `build.dockerfile`"
                ));
            }
            image.clone()
        }
        (None, Some(context)) => build(ctx, spec, container, context, plan).await?,
        (None, None) => return Err("the dev container names neither `image` nor `build`".into()),
    };
    let user = match &plan.user {
        Some(u) => Some(numeric_user(docker, &base, u).await?),
        None => None,
    };
    let derived = SandboxSpec { base_image: base, user: user.clone().unwrap_or_else(|| spec.user.clone()), ..spec.clone() };
    let runtime = crate::image::ensure(docker, &ctx.config.sandbox.image_repository, &derived, dctx.executor.clone())
        .await
        .map_err(|e| e.to_string())?;
    tracing::info!(image = %runtime.image, outcome = ?runtime.outcome, build_ms = runtime.build_ms, "dev container runtime ready");
    Ok(Runtime { image: runtime.image, user, env: plan.env.clone() })
}

/// Builds the context at `context` (in the workspace of `container`) as the plan says: its tag.
async fn build(ctx: &Ctx, spec: &SandboxSpec, container: &str, context: &str, plan: &ImagePlan) -> Result<String, String> {
    let dctx = ctx.docker.as_ref().ok_or("no Docker engine")?;
    let docker = &dctx.engine.docker;
    let dockerfile = plan.dockerfile.clone().unwrap_or_else(|| "Dockerfile".into());
    let path = context_path(spec, context);
    let mut archive = docker.download_from_container(container, Some(DownloadFromContainerOptions { path: path.clone() }));
    let mut bytes = Vec::new();
    while let Some(chunk) = archive.next().await {
        let chunk = chunk.map_err(|e| format!("reading the build context {path}: {e}"))?;
        bytes.extend_from_slice(&chunk);
        if bytes.len() > MAX_CONTEXT_BYTES {
            return Err(format!("the build context {context} is larger than {} MiB", MAX_CONTEXT_BYTES >> 20));
        }
    }
    let tar = tokio::task::spawn_blocking(move || rebase_archive(&bytes)).await.map_err(|e| e.to_string())??;
    let mut h = Sha256::new();
    h.update(&tar);
    h.update(dockerfile.as_bytes());
    for (k, v) in &plan.args {
        h.update(format!("\n{k}={v}").as_bytes());
    }
    let digest: String = h.finalize().iter().take(12).map(|b| format!("{b:02x}")).collect();
    let tag = format!("{}-devcontainer:{digest}", dctx.engine.naming.name("image"));
    if crate::docker::image_exists(docker, &tag).await {
        return Ok(tag);
    }
    let egress = crate::egress::Egress::parse(&spec.egress).map_err(|e| format!("spec {}: {e}", spec.name))?;
    let options = BuildImageOptions {
        t: Some(tag.clone()),
        dockerfile,
        rm: true,
        forcerm: true,
        buildargs: Some(plan.args.iter().map(|(k, v)| (k.clone(), v.clone())).collect::<HashMap<_, _>>()),
        labels: Some(HashMap::from([(LABEL_DEPLOYMENT.to_owned(), dctx.engine.naming.deployment.clone())])),
        networkmode: Some(dctx.engine.network_name(egress)),
        ..Default::default()
    };
    let mut stream = docker.build_image(options, None, Some(bollard::body_full(tar.into())));
    let mut log = String::new();
    while let Some(item) = stream.next().await {
        let info = item.map_err(|e| format!("building the dev container's image: {e}\n{}", tail(&log)))?;
        if let Some(s) = info.stream {
            log.push_str(&s);
        }
        if let Some(err) = info.error_detail.and_then(|d| d.message) {
            return Err(format!("building the dev container's image failed: {err}\n{}", tail(&log)));
        }
    }
    if !crate::docker::image_exists(docker, &tag).await {
        return Err(format!("building the dev container's image left no image\n{}", tail(&log)));
    }
    tracing::info!(%tag, "dev container image built");
    Ok(tag)
}

fn tail(log: &str) -> String {
    let lines: Vec<&str> = log.lines().collect();
    lines[lines.len().saturating_sub(20)..].join("\n")
}

/// The engine's archive of a directory holds it under its own name: the same entries at the
/// archive's root, as a build context wants them.
fn rebase_archive(bytes: &[u8]) -> Result<Vec<u8>, String> {
    let mut input = tar::Archive::new(bytes);
    let mut output = tar::Builder::new(Vec::new());
    output.follow_symlinks(false);
    for entry in input.entries().map_err(|e| format!("the build context: {e}"))? {
        let mut entry = entry.map_err(|e| format!("the build context: {e}"))?;
        let path = entry.path().map_err(|e| format!("the build context: {e}"))?.into_owned();
        let rest: std::path::PathBuf = path.components().skip(1).collect();
        if rest.as_os_str().is_empty() {
            continue;
        }
        let mut header = entry.header().clone();
        output.append_data(&mut header, &rest, &mut entry).map_err(|e| format!("the build context: {e}"))?;
    }
    output.into_inner().map_err(|e| format!("the build context: {e}"))
}

/// `user` as `uid:gid`: numbers as they are, a name looked up in the image's `/etc/passwd`.
async fn numeric_user(docker: &bollard::Docker, image: &str, user: &str) -> Result<String, String> {
    if user.split(':').all(|p| p.parse::<u32>().is_ok()) {
        return Ok(if user.contains(':') { user.to_owned() } else { format!("{user}:{user}") });
    }
    if user == "root" {
        return Ok("0:0".into());
    }
    let passwd = read_file(docker, image, "/etc/passwd").await?;
    passwd
        .lines()
        .find_map(|l| {
            let f: Vec<&str> = l.split(':').collect();
            (f.len() > 3 && f[0] == user).then(|| format!("{}:{}", f[2], f[3]))
        })
        .ok_or_else(|| format!("the dev container's `remoteUser` {user} is not a user of image {image}"))
}

/// A file of an image, read through a container that is created, never started.
async fn read_file(docker: &bollard::Docker, image: &str, path: &str) -> Result<String, String> {
    let body = bollard::models::ContainerCreateBody { image: Some(image.to_owned()), ..Default::default() };
    let id = docker
        .create_container(None::<bollard::query_parameters::CreateContainerOptions>, body)
        .await
        .map_err(|e| format!("reading {path} of {image}: {e}"))?
        .id;
    let mut archive = docker.download_from_container(&id, Some(DownloadFromContainerOptions { path: path.to_owned() }));
    let mut bytes = Vec::new();
    while let Some(chunk) = archive.next().await {
        match chunk {
            Ok(c) => bytes.extend_from_slice(&c),
            Err(e) => {
                let _ = docker.remove_container(&id, None::<bollard::query_parameters::RemoveContainerOptions>).await;
                return Err(format!("reading {path} of {image}: {e}"));
            }
        }
    }
    let _ = docker.remove_container(&id, None::<bollard::query_parameters::RemoveContainerOptions>).await;
    let mut archive = tar::Archive::new(bytes.as_slice());
    let mut text = String::new();
    if let Some(Ok(mut entry)) = archive.entries().map_err(|e| e.to_string())?.next() {
        std::io::Read::read_to_string(&mut entry, &mut text).map_err(|e| e.to_string())?;
    }
    Ok(text)
}
