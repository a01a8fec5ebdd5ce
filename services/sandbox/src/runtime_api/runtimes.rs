//! The Runtime API's runtimes as Docker containers: made from the image and command an
//! OpenHands deployment asked for, with Halyard's hardening and the default spec's limits (times
//! `resource_factor`) on the default spec's sandbox network, and found again by their labels.
//! Docker is their only store: a runtime is its container, so a restarted supervisor knows
//! every runtime there is, and nothing can disagree with the engine.

use std::collections::HashMap;

use bollard::models::{ContainerCreateBody, ContainerStateStatusEnum, ContainerSummary, HostConfig, PortBinding, ResourcesUlimits};
use bollard::query_parameters::{CreateContainerOptions, ListContainersOptions, RemoveContainerOptions, StartContainerOptions};
use halyard_platform::config::SandboxSpec;
use serde::Serialize;

use crate::docker::{DockerError, Engine, LABEL_DEPLOYMENT};
use crate::egress::Egress;

/// The runtime's id (and that it is one: the supervisor's orphan sweep leaves these alone).
pub const LABEL_RUNTIME: &str = "dev.halyard.runtime";
/// The OpenHands deployment (API key) it belongs to.
const LABEL_CLIENT: &str = "dev.halyard.runtime.client";
const LABEL_SESSION: &str = "dev.halyard.runtime.session";
const LABEL_IMAGE: &str = "dev.halyard.runtime.image";
/// Its session API key. Docker's labels are read only through the engine's API (root on this
/// host); the container has the key anyway, in its environment, as its agent server checks it.
const LABEL_KEY: &str = "dev.halyard.runtime.key";

/// The ports OpenHands' client derives its URLs for (`AGENT_SERVER_PORT`, `VSCODE_PORT`,
/// `WORKER_1_PORT`, `WORKER_2_PORT` of its remote sandbox service), by the path a runtime's URL
/// gives each in path mode.
pub const SERVICES: [(&str, u16); 4] = [("", 60000), ("vscode", 60001), ("work-1", 12000), ("work-2", 12001)];

/// What `/start` asked for, checked.
pub struct Plan {
    pub client: String,
    pub runtime_id: String,
    pub session_id: String,
    pub session_key: String,
    pub image: String,
    pub command: Option<Vec<String>>,
    pub working_dir: Option<String>,
    pub environment: HashMap<String, String>,
    pub resource_factor: f64,
    pub user: Option<String>,
    pub groups: Vec<String>,
    /// The engine's runtime (gVisor's), or its default.
    pub engine_runtime: Option<String>,
}

/// A runtime as the engine shows it.
#[derive(Clone, Debug)]
pub struct Runtime {
    pub container: String,
    pub runtime_id: String,
    pub client: String,
    pub session_id: String,
    pub session_key: String,
    pub image: String,
    pub state: State,
    /// Host ports by container port.
    pub ports: HashMap<u16, u16>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum State {
    Running,
    Paused,
    Stopped,
}

/// Makes and starts a runtime's container.
pub async fn create(engine: &Engine, spec: &SandboxSpec, plan: &Plan) -> Result<String, DockerError> {
    let egress = Egress::parse(&spec.egress).map_err(|detail| DockerError::Engine { op: "create runtime", detail })?;
    let ports: Vec<u16> = SERVICES.iter().map(|(_, p)| *p).collect();
    let bindings = ports
        .iter()
        .map(|p| {
            let binding = PortBinding { host_ip: Some(engine.publish_host.to_string()), host_port: Some(String::new()) };
            (format!("{p}/tcp"), Some(vec![binding]))
        })
        .collect();
    let mut env: Vec<String> = plan.environment.iter().map(|(k, v)| format!("{k}={v}")).collect();
    // OpenHands' agent server takes the keys it accepts from here.
    env.push(format!("OH_SESSION_API_KEYS_0={}", plan.session_key));
    let labels = HashMap::from([
        (LABEL_DEPLOYMENT.to_owned(), engine.naming.deployment.clone()),
        (LABEL_RUNTIME.to_owned(), plan.runtime_id.clone()),
        (LABEL_CLIENT.to_owned(), plan.client.clone()),
        (LABEL_SESSION.to_owned(), plan.session_id.clone()),
        (LABEL_IMAGE.to_owned(), plan.image.clone()),
        (LABEL_KEY.to_owned(), plan.session_key.clone()),
    ]);
    let factor = plan.resource_factor;
    let body = ContainerCreateBody {
        image: Some(plan.image.clone()),
        cmd: plan.command.clone(),
        user: plan.user.clone(),
        working_dir: plan.working_dir.clone(),
        env: Some(env),
        labels: Some(labels),
        exposed_ports: Some(ports.iter().map(|p| format!("{p}/tcp")).collect()),
        host_config: Some(HostConfig {
            // The default spec's network: sandboxes there cannot reach each other or the host's
            // services (see `crate::network`).
            network_mode: Some(engine.network_name(egress)),
            port_bindings: egress.publishes_ports().then_some(bindings),
            memory: Some(((spec.memory_mb as f64 * factor) as i64) << 20),
            nano_cpus: Some((spec.cpus * factor * 1e9) as i64),
            pids_limit: Some((spec.pids_limit as f64 * factor) as i64),
            ulimits: Some(vec![ResourcesUlimits {
                name: Some("fsize".into()),
                soft: Some(crate::limits::MAX_FILE_BYTES as i64),
                hard: Some(crate::limits::MAX_FILE_BYTES as i64),
            }]),
            group_add: (!plan.groups.is_empty()).then(|| plan.groups.clone()),
            // The same hardening as Halyard's own sandboxes: no capability, no privilege gained
            // by a setuid binary, an init for orphans.
            cap_drop: Some(vec!["ALL".into()]),
            security_opt: Some(vec!["no-new-privileges".into()]),
            init: Some(true),
            runtime: plan.engine_runtime.clone(),
            ..Default::default()
        }),
        ..Default::default()
    };
    let name = engine.naming.name(&format!("rt-{}", plan.runtime_id));
    let options = CreateContainerOptions { name: Some(name), ..Default::default() };
    let made = engine.docker.create_container(Some(options), body).await.map_err(|e| DockerError::from_engine("create runtime", e))?;
    if let Err(e) = engine.docker.start_container(&made.id, None::<StartContainerOptions>).await {
        let _ = remove(engine, &made.id).await;
        return Err(DockerError::from_engine("start runtime", e));
    }
    Ok(made.id)
}

/// This deployment's runtimes, of one OpenHands deployment (`client`) or all.
pub async fn list(engine: &Engine, client: Option<&str>) -> Result<Vec<Runtime>, DockerError> {
    let mut labels = vec![format!("{LABEL_DEPLOYMENT}={}", engine.naming.deployment), LABEL_RUNTIME.to_owned()];
    if let Some(c) = client {
        labels.push(format!("{LABEL_CLIENT}={c}"));
    }
    let options = ListContainersOptions { all: true, filters: Some(HashMap::from([("label".to_owned(), labels)])), ..Default::default() };
    let found = engine.docker.list_containers(Some(options)).await.map_err(|e| DockerError::from_engine("list runtimes", e))?;
    Ok(found.into_iter().filter_map(runtime).collect())
}

/// The runtime `runtime_id`, if it exists.
pub async fn find(engine: &Engine, runtime_id: &str) -> Result<Option<Runtime>, DockerError> {
    let labels = vec![format!("{LABEL_DEPLOYMENT}={}", engine.naming.deployment), format!("{LABEL_RUNTIME}={runtime_id}")];
    let options = ListContainersOptions { all: true, filters: Some(HashMap::from([("label".to_owned(), labels)])), ..Default::default() };
    let found = engine.docker.list_containers(Some(options)).await.map_err(|e| DockerError::from_engine("find runtime", e))?;
    Ok(found.into_iter().find_map(runtime))
}

fn runtime(c: ContainerSummary) -> Option<Runtime> {
    let labels = c.labels.unwrap_or_default();
    let label = |k: &str| labels.get(k).cloned().unwrap_or_default();
    let state = match c.state {
        Some(s) if s.to_string() == ContainerStateStatusEnum::RUNNING.to_string() => State::Running,
        Some(s) if s.to_string() == ContainerStateStatusEnum::PAUSED.to_string() => State::Paused,
        _ => State::Stopped,
    };
    let ports = c
        .ports
        .unwrap_or_default()
        .into_iter()
        .filter_map(|p| Some((p.private_port, p.public_port?)))
        .filter(|(_, public)| *public != 0)
        .collect();
    Some(Runtime {
        container: c.id?,
        runtime_id: labels.get(LABEL_RUNTIME)?.clone(),
        client: label(LABEL_CLIENT),
        session_id: label(LABEL_SESSION),
        session_key: label(LABEL_KEY),
        image: label(LABEL_IMAGE),
        state,
        ports,
    })
}

/// Removes a runtime's container, running or not (a missing one is fine).
pub async fn remove(engine: &Engine, container: &str) -> Result<(), DockerError> {
    let options = RemoveContainerOptions { force: true, ..Default::default() };
    match engine.docker.remove_container(container, Some(options)).await {
        Ok(()) => Ok(()),
        Err(e) => match DockerError::from_engine("remove runtime", e) {
            DockerError::NotFound { .. } => Ok(()),
            e => Err(e),
        },
    }
}
