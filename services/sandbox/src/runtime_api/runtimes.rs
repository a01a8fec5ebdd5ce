//! The Runtime API's runtimes as Docker containers: made from the image and command an
//! OpenHands deployment asked for, with Halyard's hardening and the default spec's limits (times
//! `resource_factor`) on the default spec's sandbox network.
//!
//! The engine says what runs; whose each runtime is, with its session and session API key, is
//! its assignment, a file of its own in the Runtime API's directory (root's, 0600), since a
//! container's labels cannot change and a warm one is made before anyone asks for it
//! ([`super::pool`]). A container carries its runtime id and its *shape* (a hash of what it was
//! made from: what a start must ask for to be given it).

use std::collections::{BTreeMap, HashMap};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use bollard::models::{ContainerCreateBody, ContainerStateStatusEnum, ContainerSummary, HostConfig, PortBinding, ResourcesUlimits};
use bollard::query_parameters::{CreateContainerOptions, ListContainersOptions, RemoveContainerOptions, StartContainerOptions};
use halyard_platform::config::SandboxSpec;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::docker::{DockerError, Engine, LABEL_DEPLOYMENT};
use crate::egress::Egress;

/// The runtime's id (and that it is one: the supervisor's orphan sweep leaves these alone).
pub const LABEL_RUNTIME: &str = "dev.halyard.runtime";
/// What it was made from, hashed ([`Shape::hash`]).
const LABEL_SHAPE: &str = "dev.halyard.runtime.shape";

/// The ports OpenHands' client derives its URLs for (`AGENT_SERVER_PORT`, `VSCODE_PORT`,
/// `WORKER_1_PORT`, `WORKER_2_PORT` of its remote sandbox service), by the path a runtime's URL
/// gives each in path mode.
pub const SERVICES: [(&str, u16); 4] = [("", 60000), ("vscode", 60001), ("work-1", 12000), ("work-2", 12001)];

/// What a runtime is made from: what `/start` asked for, but its session.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Shape {
    pub image: String,
    pub command: Option<Vec<String>>,
    pub working_dir: Option<String>,
    pub environment: BTreeMap<String, String>,
    pub resource_factor: f64,
    pub user: Option<String>,
    pub groups: Vec<String>,
    /// The engine's runtime (gVisor's), or its default.
    pub engine_runtime: Option<String>,
}

impl Shape {
    /// A short hash of all of it: two starts with the same hash may be given the same container.
    pub fn hash(&self) -> String {
        let text = serde_json::to_string(self).unwrap_or_default();
        Sha256::digest(text.as_bytes()).iter().take(12).map(|b| format!("{b:02x}")).collect()
    }
}

/// Whose a runtime is (none yet: a warm one), and the key its agent server takes.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct Assignment {
    pub client: Option<String>,
    pub session_id: Option<String>,
    pub image: String,
    pub session_key: String,
}

/// The assignments, a file each (`<runtime id>.json`).
#[derive(Clone, Debug)]
pub struct Assignments {
    dir: PathBuf,
}

impl Assignments {
    /// In `dir` (made root's own).
    pub fn open(dir: &Path) -> std::io::Result<Self> {
        std::fs::create_dir_all(dir)?;
        std::fs::set_permissions(dir, std::os::unix::fs::PermissionsExt::from_mode(0o700))?;
        Ok(Self { dir: dir.to_owned() })
    }

    fn path(&self, runtime_id: &str) -> PathBuf {
        self.dir.join(format!("{runtime_id}.json"))
    }

    pub fn get(&self, runtime_id: &str) -> Option<Assignment> {
        serde_json::from_slice(&std::fs::read(self.path(runtime_id)).ok()?).ok()
    }

    /// Written whole or not at all (a rename over the old one).
    pub fn put(&self, runtime_id: &str, a: &Assignment) -> std::io::Result<()> {
        use std::io::Write;
        let tmp = self.dir.join(format!(".{runtime_id}.tmp"));
        let mut f = std::fs::OpenOptions::new().write(true).create(true).truncate(true).mode(0o600).open(&tmp)?;
        f.write_all(&serde_json::to_vec(a).unwrap_or_default())?;
        f.sync_all()?;
        std::fs::rename(tmp, self.path(runtime_id))
    }

    pub fn remove(&self, runtime_id: &str) {
        let _ = std::fs::remove_file(self.path(runtime_id));
    }
}

/// A runtime as the engine shows it, with its assignment.
#[derive(Clone, Debug)]
pub struct Runtime {
    pub container: String,
    pub runtime_id: String,
    pub shape: String,
    pub assignment: Assignment,
    pub state: State,
    /// Host ports by container port.
    pub ports: HashMap<u16, u16>,
}

impl Runtime {
    /// It belongs to `client`.
    pub fn is_of(&self, client: &str) -> bool {
        self.assignment.client.as_deref() == Some(client)
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum State {
    Running,
    Paused,
    Stopped,
}

/// Makes and starts a container of `shape` for `assignment` (`client` none: a warm one), its
/// assignment written first so that no list ever shows a runtime without one. Its id.
pub async fn create(
    engine: &Engine,
    store: &Assignments,
    spec: &SandboxSpec,
    shape: &Shape,
    assignment: &Assignment,
) -> Result<String, DockerError> {
    let runtime_id = uuid::Uuid::new_v4().simple().to_string();
    store.put(&runtime_id, assignment).map_err(|e| DockerError::Engine { op: "create runtime", detail: e.to_string() })?;
    let made = make(engine, spec, shape, &runtime_id, &assignment.session_key).await;
    if made.is_err() {
        store.remove(&runtime_id);
    }
    made.map(|_| runtime_id)
}

async fn make(engine: &Engine, spec: &SandboxSpec, plan: &Shape, runtime_id: &str, session_key: &str) -> Result<(), DockerError> {
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
    env.push(format!("OH_SESSION_API_KEYS_0={session_key}"));
    let labels = HashMap::from([
        (LABEL_DEPLOYMENT.to_owned(), engine.naming.deployment.clone()),
        (LABEL_RUNTIME.to_owned(), runtime_id.to_owned()),
        (LABEL_SHAPE.to_owned(), plan.hash()),
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
    let name = engine.naming.name(&format!("rt-{runtime_id}"));
    let options = CreateContainerOptions { name: Some(name), ..Default::default() };
    let made = engine.docker.create_container(Some(options), body).await.map_err(|e| DockerError::from_engine("create runtime", e))?;
    if let Err(e) = engine.docker.start_container(&made.id, None::<StartContainerOptions>).await {
        let _ = remove(engine, &made.id).await;
        return Err(DockerError::from_engine("start runtime", e));
    }
    Ok(())
}

/// This deployment's runtimes, warm ones included (with no client).
pub async fn all(engine: &Engine, store: &Assignments) -> Result<Vec<Runtime>, DockerError> {
    let labels = vec![format!("{LABEL_DEPLOYMENT}={}", engine.naming.deployment), LABEL_RUNTIME.to_owned()];
    let options = ListContainersOptions { all: true, filters: Some(HashMap::from([("label".to_owned(), labels)])), ..Default::default() };
    let found = engine.docker.list_containers(Some(options)).await.map_err(|e| DockerError::from_engine("list runtimes", e))?;
    Ok(found.into_iter().filter_map(|c| runtime(c, store)).collect())
}

/// The runtimes of one OpenHands deployment.
pub async fn of(engine: &Engine, store: &Assignments, client: &str) -> Result<Vec<Runtime>, DockerError> {
    Ok(all(engine, store).await?.into_iter().filter(|r| r.is_of(client)).collect())
}

/// The runtime `runtime_id`, if it exists.
pub async fn find(engine: &Engine, store: &Assignments, runtime_id: &str) -> Result<Option<Runtime>, DockerError> {
    let labels = vec![format!("{LABEL_DEPLOYMENT}={}", engine.naming.deployment), format!("{LABEL_RUNTIME}={runtime_id}")];
    let options = ListContainersOptions { all: true, filters: Some(HashMap::from([("label".to_owned(), labels)])), ..Default::default() };
    let found = engine.docker.list_containers(Some(options)).await.map_err(|e| DockerError::from_engine("find runtime", e))?;
    Ok(found.into_iter().find_map(|c| runtime(c, store)))
}

/// A container as a runtime: none without its assignment (being made, or being removed).
fn runtime(c: ContainerSummary, store: &Assignments) -> Option<Runtime> {
    let labels = c.labels.unwrap_or_default();
    let runtime_id = labels.get(LABEL_RUNTIME)?.clone();
    let assignment = store.get(&runtime_id)?;
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
    Some(Runtime { container: c.id?, runtime_id, shape: labels.get(LABEL_SHAPE).cloned().unwrap_or_default(), assignment, state, ports })
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

/// A new session API key for a runtime's agent server.
pub fn session_key() -> String {
    format!("{}{}", uuid::Uuid::new_v4().simple(), uuid::Uuid::new_v4().simple())
}

/// Its agent server answers HTTP (`GET /alive`, with any status). A connection alone says
/// nothing: Docker's proxy accepts on a published port before anything listens behind it.
pub async fn answers(engine: &Engine, r: &Runtime) -> bool {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let Some(port) = r.ports.get(&SERVICES[0].1) else { return false };
    let to = std::net::SocketAddr::new(engine.publish_host, *port);
    let answered = async {
        let mut stream = tokio::net::TcpStream::connect(to).await.ok()?;
        stream.write_all(b"GET /alive HTTP/1.1\r\nHost: runtime\r\nConnection: close\r\n\r\n").await.ok()?;
        let mut head = [0u8; 7];
        stream.read_exact(&mut head).await.ok()?;
        Some(head == *b"HTTP/1.")
    };
    matches!(tokio::time::timeout(std::time::Duration::from_secs(2), answered).await, Ok(Some(true)))
}
