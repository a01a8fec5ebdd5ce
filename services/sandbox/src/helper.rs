//! Helper containers: a shell script run once as root, without a network, on a sandbox's
//! workspace volume (copying it out as a snapshot's workspace, giving it to a dev container's user),
//! with its output in the error if it fails. The caller removes the container ([`Helper::id`])
//! when done with it (a snapshot commits it first).

use std::collections::HashMap;

use bollard::models::{ContainerCreateBody, HostConfig, Mount, MountType};
use bollard::query_parameters::{CreateContainerOptions, LogsOptions, StartContainerOptions, WaitContainerOptions};
use futures::StreamExt;

use crate::ctx::Ctx;
use crate::docker::LABEL_DEPLOYMENT;

/// A helper that ran to its end with exit code 0.
pub struct Helper {
    pub id: String,
}

/// A volume (`source`: its name) or a directory of the engine's host (`bind`) at `target`.
pub fn mount(source: &str, target: &str, read_only: bool, bind: bool) -> Mount {
    Mount {
        target: Some(target.into()),
        source: Some(source.to_owned()),
        typ: Some(if bind { MountType::BIND } else { MountType::VOLUME }),
        read_only: Some(read_only),
        ..Default::default()
    }
}

/// Runs `script` in a new container of `image` named for `purpose`, with `mounts` and `labels`
/// (besides the deployment's).
pub async fn run(
    ctx: &Ctx,
    image: &str,
    purpose: &str,
    script: String,
    mounts: Vec<Mount>,
    labels: HashMap<String, String>,
) -> Result<Helper, String> {
    let dctx = ctx.docker.as_ref().ok_or("no Docker engine")?;
    let docker = &dctx.engine.docker;
    let mut labels = labels;
    labels.insert(LABEL_DEPLOYMENT.to_owned(), dctx.engine.naming.deployment.clone());
    let body = ContainerCreateBody {
        image: Some(image.to_owned()),
        entrypoint: Some(vec!["/bin/sh".into(), "-c".into()]),
        cmd: Some(vec![script]),
        user: Some("0:0".into()),
        labels: Some(labels),
        network_disabled: Some(true),
        host_config: Some(HostConfig { mounts: Some(mounts), network_mode: Some("none".into()), ..Default::default() }),
        ..Default::default()
    };
    let name = format!("{}-{purpose}-{}", dctx.engine.naming.name("helper"), halyard_protocol::SandboxId::new());
    let id = docker
        .create_container(Some(CreateContainerOptions { name: Some(name), ..Default::default() }), body)
        .await
        .map_err(|e| format!("create the {purpose} helper: {e}"))?
        .id;
    match wait(docker, &id).await {
        Ok(()) => Ok(Helper { id }),
        Err(e) => {
            let _ = dctx.engine.remove(&id).await;
            Err(format!("{purpose}: {e}"))
        }
    }
}

/// Starts the helper and waits for its end: an error with its output unless it exits 0.
async fn wait(docker: &bollard::Docker, helper: &str) -> Result<(), String> {
    docker.start_container(helper, None::<StartContainerOptions>).await.map_err(|e| format!("start: {e}"))?;
    let mut wait = docker.wait_container(helper, None::<WaitContainerOptions>);
    let code = match wait.next().await {
        Some(Ok(r)) => r.status_code,
        // A non-zero exit comes as an error carrying the code.
        Some(Err(bollard::errors::Error::DockerContainerWaitError { code, .. })) => code,
        Some(Err(e)) => return Err(format!("wait: {e}")),
        None => return Err("the helper vanished".into()),
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
    Err(format!("exited with {code}: {}", text.trim()))
}
