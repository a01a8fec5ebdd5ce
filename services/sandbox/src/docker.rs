//! The Docker engine, through bollard: containers and volumes of docker sandboxes, labelled so
//! a restarted supervisor can tell its own from anyone else's.
//!
//! A sandbox is a container running the executor (from a runtime image, see [`crate::image`])
//! with its workspace on a named volume that outlives the container: pausing, a container
//! killed from outside, or re-provisioning keep the user's files. The container gets no Docker
//! socket, drops every capability, cannot gain privileges, and has the spec's memory, CPU and
//! process limits. Its ports are published on 127.0.0.1 only (or the configured
//! `sandbox.publish_host`, where agent runners run on other hosts), on ports the engine picks,
//! so the host reaches them without `host.docker.internal` tricks and nothing else does.

use std::collections::HashMap;
use std::time::Duration;

use bollard::Docker;
use bollard::models::{
    ContainerCreateBody, ContainerStateStatusEnum, HostConfig, Mount, MountType, PortBinding, ResourcesUlimits, VolumeCreateRequest,
};
use bollard::query_parameters::{
    CreateContainerOptions, EventsOptions, InspectContainerOptions, ListContainersOptions, ListVolumesOptions, RemoveContainerOptions,
    RemoveVolumeOptions, StartContainerOptions, StopContainerOptions, UploadToContainerOptions,
};
use futures::{Stream, StreamExt};

use halyard_platform::config::SandboxSpec;

use crate::egress::Egress;
use halyard_protocol::system::{AGENT_SERVER, ExposedUrl};

/// Port of the executor inside every container.
pub const EXECUTOR_PORT: u16 = 8000;
/// Ports the agent's own apps may listen on, by the name their URL is exposed under.
pub const WORKER_PORTS: [(&str, u16); 2] = [("WORKER_1", 8001), ("WORKER_2", 8002)];
/// Where the supervisor uploads the session key before starting the executor, which deletes
/// it once read. The directory belongs to the spec's user (see [`crate::image`]).
pub const KEY_DIR: &str = "/opt/halyard/run";

pub const LABEL_DEPLOYMENT: &str = "dev.halyard.deployment";
pub const LABEL_SANDBOX: &str = "dev.halyard.sandbox";
pub const LABEL_CONVERSATION: &str = "dev.halyard.conversation";
pub const LABEL_OWNER: &str = "dev.halyard.owner";
pub const LABEL_SPEC: &str = "dev.halyard.spec";
/// On warm-pool containers: they belong to no conversation until one takes them.
pub const LABEL_POOL: &str = "dev.halyard.pool";

/// Why a Docker operation failed.
#[derive(Debug, thiserror::Error)]
pub enum DockerError {
    #[error("no Docker engine at {host}: {detail}")]
    Unavailable { host: String, detail: String },
    #[error("{op}: not found")]
    NotFound { op: &'static str },
    /// The name is taken (a leftover of an attempt that failed half-way).
    #[error("{op}: name already in use")]
    Conflict { op: &'static str },
    #[error("{op}: {detail}")]
    Engine { op: &'static str, detail: String },
    #[error("building the runtime image: {0}")]
    Build(String),
}

impl DockerError {
    pub fn is_retryable(&self) -> bool {
        matches!(self, Self::Unavailable { .. } | Self::Engine { .. })
    }

    pub(crate) fn from_engine(op: &'static str, e: bollard::errors::Error) -> Self {
        match e {
            bollard::errors::Error::DockerResponseServerError { status_code: 404, .. } => Self::NotFound { op },
            bollard::errors::Error::DockerResponseServerError { status_code: 409, .. } => Self::Conflict { op },
            e => Self::Engine { op, detail: e.to_string() },
        }
    }
}

/// Connects to the engine at `host` (`unix:///path`), agreeing on an API version it speaks.
pub async fn connect(host: &str) -> Result<Docker, DockerError> {
    let unavailable = |detail: String| DockerError::Unavailable { host: host.to_owned(), detail };
    let path = host.strip_prefix("unix://").ok_or_else(|| unavailable("only unix:// engine addresses are supported".into()))?;
    let docker = Docker::connect_with_unix(path, 300, bollard::API_DEFAULT_VERSION).map_err(|e| unavailable(e.to_string()))?;
    let docker = tokio::time::timeout(Duration::from_secs(5), docker.negotiate_version())
        .await
        .map_err(|_| unavailable("no answer within 5 s".into()))?
        .map_err(|e| unavailable(e.to_string()))?;
    docker.ping().await.map_err(|e| unavailable(e.to_string()))?;
    Ok(docker)
}

/// Whether an image exists locally.
pub async fn image_exists(docker: &Docker, image: &str) -> bool {
    docker.inspect_image(image).await.is_ok()
}

/// Names and labels of one deployment's Docker objects.
#[derive(Clone, Debug)]
pub struct Naming {
    pub deployment: String,
}

impl Naming {
    fn short(&self) -> &str {
        &self.deployment[..self.deployment.len().min(12)]
    }
    /// Container and volume base name of a sandbox (or pool slot).
    pub fn name(&self, id: &str) -> String {
        format!("halyard-{}-{id}", self.short())
    }
    pub fn volume(&self, id: &str) -> String {
        format!("halyard-{}-{id}-ws", self.short())
    }
    fn filter(&self) -> HashMap<String, Vec<String>> {
        HashMap::from([("label".to_owned(), vec![format!("{LABEL_DEPLOYMENT}={}", self.deployment)])])
    }
}

/// What a new container is for.
#[derive(Clone, Debug)]
pub struct ContainerPlan<'a> {
    pub name: String,
    pub volume: String,
    pub image: &'a str,
    pub spec: &'a SandboxSpec,
    pub labels: HashMap<String, String>,
    pub output_cap: usize,
    /// Seconds the sandbox's browser may stay unused.
    pub browser_idle_secs: u64,
    /// Seconds the sandbox's VS Code may stay unused.
    pub vscode_idle_secs: u64,
    /// A snapshot's workspace the new volume is an overlay on (see [`Engine::ensure_volume`]).
    pub lower: Option<std::path::PathBuf>,
}

/// A container's state as the supervisor needs it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Found {
    Running,
    Paused,
    /// Created or exited: exists, but its executor does not run.
    Stopped {
        exit_code: i64,
        oom_killed: bool,
    },
    Gone,
}

/// The engine, for one deployment.
#[derive(Clone)]
pub struct Engine {
    pub docker: Docker,
    pub naming: Naming,
    /// The address sandboxes' ports are published on, and their URLs' host.
    pub publish_host: std::net::IpAddr,
    /// Where the upper and work directories of overlay volumes are (a workspace started from a
    /// snapshot: see [`Engine::ensure_volume`]), on the engine's host.
    pub overlays: std::path::PathBuf,
    /// The engine's name for gVisor's runtime (specs with `runtime = "gvisor"`).
    pub gvisor_runtime: String,
}

impl Engine {
    /// The engine's runtime for a spec's `runtime` (`None`: the engine's default, runc).
    pub fn runtime_of(&self, runtime: &str) -> Option<String> {
        (runtime == "gvisor").then(|| self.gvisor_runtime.clone())
    }

    /// Whether a spec asking for Docker inside its sandboxes (`docker = true`) can have it here.
    /// Under runc dockerd needs a privileged container, which Halyard never makes; under gVisor
    /// it needs runsc's Docker-in-gVisor mode (2024-02 and later; `--net-raw`), which the
    /// registered runsc's version says.
    pub async fn check_docker_inside(&self, spec: &halyard_platform::config::SandboxSpec) -> Result<(), DockerError> {
        let fail = |detail: String| DockerError::Engine { op: "check docker inside", detail };
        if !spec.docker {
            return Ok(());
        }
        let Some(name) = self.runtime_of(&spec.runtime) else {
            return Err(fail(format!(
                "`docker = true` needs `runtime = \"gvisor\"`: under {} dockerd needs a privileged container, which \
                 Halyard never makes",
                spec.runtime
            )));
        };
        let info = self.docker.info().await.map_err(|e| DockerError::from_engine("info", e))?;
        let path = info.runtimes.unwrap_or_default().get(&name).and_then(|r| r.path.clone()).unwrap_or_else(|| name.clone());
        let out = tokio::process::Command::new(&path)
            .arg("--version")
            .output()
            .await
            .map_err(|e| fail(format!("cannot ask `{path} --version` which gVisor this is: {e}")))?;
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        match runsc_release(&text) {
            Some(date) if date.as_str() < DOCKER_IN_GVISOR_SINCE => Err(fail(format!(
                "Docker inside a sandbox needs gVisor's Docker-in-gVisor mode, which runsc has from 2024-02 on; this engine's \
                 `{name}` is from {}-{}-{}: install a newer runsc (gvisor.dev) and register it with `--net-raw`, or drop \
                 `docker = true`",
                &date[..4],
                &date[4..6],
                &date[6..]
            ))),
            Some(date) => Err(fail(format!(
                "this engine's `{name}` (from {date}) could run Docker inside gVisor, but this release of Halyard does not set \
                 up dockerd in its sandboxes yet: drop `docker = true`"
            ))),
            None => Err(fail(format!("cannot tell which gVisor `{path}` is from its version ({:?})", text.trim()))),
        }
    }

    /// Whether the engine can run containers under `runtime` (a spec's): an unknown name, or
    /// gVisor on an engine that has no such runtime registered, is an error in words.
    pub async fn check_runtime(&self, runtime: &str) -> Result<(), DockerError> {
        let fail = |detail: String| DockerError::Engine { op: "check runtime", detail };
        if !halyard_platform::config::RUNTIMES.contains(&runtime) {
            return Err(fail(format!("unknown runtime `{runtime}`: use runc or gvisor")));
        }
        let Some(name) = self.runtime_of(runtime) else { return Ok(()) };
        let info = self.docker.info().await.map_err(|e| DockerError::from_engine("info", e))?;
        if info.runtimes.unwrap_or_default().contains_key(&name) {
            Ok(())
        } else {
            Err(fail(format!(
                "gVisor asked for, but the Docker engine has no runtime `{name}`: install runsc and register it \
                 (infra/docker-up.sh does), or set HALYARD_GVISOR_RUNTIME to the name it has"
            )))
        }
    }

    /// Creates the workspace volume if it does not exist (an existing one keeps its files). With
    /// `lower` (a snapshot's workspace, a directory of the engine's host), a new volume is an
    /// overlay on it: the sandbox sees the snapshot's files at once and writes its own changes to
    /// a directory of its own, copying nothing up front.
    pub async fn ensure_volume(
        &self,
        name: &str,
        labels: &HashMap<String, String>,
        lower: Option<&std::path::Path>,
    ) -> Result<(), DockerError> {
        let driver_opts = match lower {
            Some(lower) if self.docker.inspect_volume(name).await.is_err() => Some(self.overlay_dirs(name, lower)?),
            _ => None,
        };
        let req = VolumeCreateRequest {
            name: Some(name.to_owned()),
            labels: Some(labels.clone()),
            driver: driver_opts.as_ref().map(|_| "local".to_owned()),
            driver_opts,
            ..Default::default()
        };
        // Creating a volume that exists is a no-op for the engine.
        self.docker.create_volume(req).await.map_err(|e| DockerError::from_engine("create volume", e))?;
        Ok(())
    }

    /// The upper and work directories of overlay volume `name` on `lower` (made now; the upper
    /// one owned as `lower` is, since it is the workspace's root), as the local driver's options.
    fn overlay_dirs(&self, name: &str, lower: &std::path::Path) -> Result<HashMap<String, String>, DockerError> {
        use std::os::unix::fs::{MetadataExt, PermissionsExt};
        let fail = |e: std::io::Error| DockerError::Engine { op: "create overlay volume", detail: format!("{name}: {e}") };
        let meta = std::fs::metadata(lower).map_err(fail)?;
        let dir = self.overlays.join(name);
        let (upper, work) = (dir.join("upper"), dir.join("work"));
        for d in [&upper, &work] {
            std::fs::create_dir_all(d).map_err(fail)?;
        }
        std::os::unix::fs::chown(&upper, Some(meta.uid()), Some(meta.gid())).map_err(fail)?;
        std::fs::set_permissions(&upper, std::fs::Permissions::from_mode(meta.mode() & 0o7777)).map_err(fail)?;
        let o = format!("lowerdir={},upperdir={},workdir={}", lower.display(), upper.display(), work.display());
        Ok(HashMap::from([("type".to_owned(), "overlay".to_owned()), ("device".to_owned(), "overlay".to_owned()), ("o".to_owned(), o)]))
    }

    /// The names of this deployment's volumes labelled `label` (`key=value`).
    pub async fn volumes_labelled(&self, label: &str) -> Result<Vec<String>, DockerError> {
        let mut filters = self.naming.filter();
        filters.entry("label".into()).or_default().push(label.to_owned());
        let options = ListVolumesOptions { filters: Some(filters) };
        let list = self.docker.list_volumes(Some(options)).await.map_err(|e| DockerError::from_engine("list volumes", e))?;
        Ok(list.volumes.unwrap_or_default().into_iter().map(|v| v.name).collect())
    }

    /// Creates (not starts) a container for `plan` on its volume.
    pub async fn create(&self, plan: &ContainerPlan<'_>) -> Result<String, DockerError> {
        let spec = plan.spec;
        let egress = Egress::parse(&spec.egress).map_err(|detail| DockerError::Engine { op: "create container", detail })?;
        let mut ports = vec![EXECUTOR_PORT];
        ports.extend(WORKER_PORTS.iter().map(|(_, p)| *p));
        let bindings = ports
            .iter()
            .map(|p| {
                (
                    format!("{p}/tcp"),
                    Some(vec![PortBinding { host_ip: Some(self.publish_host.to_string()), host_port: Some(String::new()) }]),
                )
            })
            .collect();
        let mut env: Vec<String> = spec.env.iter().map(|(k, v)| format!("{k}={v}")).collect();
        env.push(format!("HOME={}", crate::paths::HOME));
        // Where the agent serves its apps; the same variables as in a process sandbox.
        env.extend(WORKER_PORTS.iter().map(|(name, port)| format!("{name}_PORT={port}")));
        let body = ContainerCreateBody {
            image: Some(plan.image.to_owned()),
            cmd: Some(vec![
                "--workspace".into(),
                spec.working_dir.clone(),
                "--listen".into(),
                format!("0.0.0.0:{EXECUTOR_PORT}"),
                "--output-cap".into(),
                plan.output_cap.to_string(),
                "--disk-limit-mb".into(),
                spec.disk_mb.to_string(),
                "--browser-idle-secs".into(),
                plan.browser_idle_secs.to_string(),
                "--vscode-idle-secs".into(),
                plan.vscode_idle_secs.to_string(),
                "--key-file".into(),
                format!("{KEY_DIR}/key"),
            ]),
            user: Some(spec.user.clone()),
            working_dir: Some(spec.working_dir.clone()),
            env: Some(env),
            labels: Some(plan.labels.clone()),
            exposed_ports: Some(ports.iter().map(|p| format!("{p}/tcp")).collect()),
            host_config: Some(HostConfig {
                mounts: Some(vec![Mount {
                    target: Some(spec.working_dir.clone()),
                    source: Some(plan.volume.clone()),
                    typ: Some(MountType::VOLUME),
                    ..Default::default()
                }]),
                // Never the default bridge: a network of ours where sandboxes cannot reach each
                // other (see [`crate::network`]).
                network_mode: Some(self.network_name(egress)),
                port_bindings: egress.publishes_ports().then_some(bindings),
                memory: Some((spec.memory_mb as i64) << 20),
                nano_cpus: Some((spec.cpus * 1e9) as i64),
                pids_limit: Some(spec.pids_limit),
                // The largest file, as in process sandboxes (the executor watches the disk).
                ulimits: Some(vec![ResourcesUlimits {
                    name: Some("fsize".into()),
                    soft: Some(crate::limits::MAX_FILE_BYTES as i64),
                    hard: Some(crate::limits::MAX_FILE_BYTES as i64),
                }]),
                // The executor runs as the spec's user and needs no capability at all.
                cap_drop: Some(vec!["ALL".into()]),
                security_opt: Some(vec!["no-new-privileges".into()]),
                // An init reaps the orphans of the agent's commands.
                init: Some(true),
                runtime: self.runtime_of(&spec.runtime),
                ..Default::default()
            }),
            ..Default::default()
        };
        let options = CreateContainerOptions { name: Some(plan.name.clone()), ..Default::default() };
        let created =
            self.docker.create_container(Some(options), body).await.map_err(|e| DockerError::from_engine("create container", e))?;
        Ok(created.id)
    }

    /// Uploads the session key into a created or stopped container, readable by its user only.
    pub async fn upload_key(&self, container: &str, key: &str, user: &str) -> Result<(), DockerError> {
        let (uid, gid) = parse_user(user);
        let mut header = tar::Header::new_gnu();
        header.set_size(key.len() as u64);
        header.set_mode(0o400);
        header.set_uid(uid);
        header.set_gid(gid);
        header.set_cksum();
        let mut builder = tar::Builder::new(Vec::new());
        builder
            .append_data(&mut header, "key", key.as_bytes())
            .map_err(|e| DockerError::Engine { op: "upload key", detail: e.to_string() })?;
        let archive = builder.into_inner().map_err(|e| DockerError::Engine { op: "upload key", detail: e.to_string() })?;
        let options = UploadToContainerOptions { path: KEY_DIR.into(), ..Default::default() };
        self.docker
            .upload_to_container(container, Some(options), bollard::body_full(archive.into()))
            .await
            .map_err(|e| DockerError::from_engine("upload key", e))
    }

    pub async fn start(&self, container: &str) -> Result<(), DockerError> {
        self.docker
            .start_container(container, None::<StartContainerOptions>)
            .await
            .map_err(|e| DockerError::from_engine("start container", e))
    }

    /// The container's state, and its exposed URLs while it runs.
    pub async fn inspect(&self, container: &str) -> Result<(Found, Vec<ExposedUrl>), DockerError> {
        let info = match self.docker.inspect_container(container, None::<InspectContainerOptions>).await {
            Ok(info) => info,
            Err(e) => {
                return match DockerError::from_engine("inspect container", e) {
                    DockerError::NotFound { .. } => Ok((Found::Gone, Vec::new())),
                    e => Err(e),
                };
            }
        };
        let state = info.state.unwrap_or_default();
        let found = match state.status {
            Some(ContainerStateStatusEnum::RUNNING) => Found::Running,
            Some(ContainerStateStatusEnum::PAUSED) => Found::Paused,
            Some(ContainerStateStatusEnum::REMOVING) | Some(ContainerStateStatusEnum::DEAD) => Found::Gone,
            _ => Found::Stopped { exit_code: state.exit_code.unwrap_or(0), oom_killed: state.oom_killed.unwrap_or(false) },
        };
        let settings = info.network_settings.unwrap_or_default();
        let ports = settings.ports.unwrap_or_default();
        let host_port = |port: u16| -> Option<String> {
            let bindings = ports.get(&format!("{port}/tcp"))?.as_ref()?;
            bindings.iter().find_map(|b| b.host_port.clone().filter(|p| !p.is_empty()))
        };
        // On an internal network nothing is published: the host reaches the container at its
        // own address there.
        let own_address = settings.networks.unwrap_or_default().into_values().find_map(|n| n.ip_address.filter(|ip| !ip.is_empty()));
        let url = |port: u16| match (host_port(port), &own_address) {
            (Some(p), _) => p.parse().ok().map(|p| format!("http://{}", std::net::SocketAddr::new(self.publish_host, p))),
            (None, Some(ip)) if ports.values().all(Option::is_none) => Some(format!("http://{ip}:{port}")),
            _ => None,
        };
        let mut urls = Vec::new();
        if let Some(u) = url(EXECUTOR_PORT) {
            urls.push(ExposedUrl { name: AGENT_SERVER.into(), url: u });
        }
        for (name, port) in WORKER_PORTS {
            if let Some(u) = url(port) {
                urls.push(ExposedUrl { name: name.into(), url: u });
            }
        }
        Ok((found, urls))
    }

    pub async fn pause(&self, container: &str) -> Result<(), DockerError> {
        self.docker.pause_container(container).await.map_err(|e| DockerError::from_engine("pause container", e))
    }

    pub async fn unpause(&self, container: &str) -> Result<(), DockerError> {
        self.docker.unpause_container(container).await.map_err(|e| DockerError::from_engine("unpause container", e))
    }

    /// Stops a container (its processes get two seconds after SIGTERM), keeping it and its
    /// writable layer for the next start; a paused one is thawed first, as a frozen process
    /// takes no signal. A missing or already stopped one is fine.
    pub async fn stop(&self, container: &str) -> Result<(), DockerError> {
        match self.inspect(container).await? {
            (Found::Paused, _) => self.unpause(container).await?,
            (Found::Stopped { .. } | Found::Gone, _) => return Ok(()),
            _ => {}
        }
        match self.docker.stop_container(container, Some(StopContainerOptions { t: Some(2), ..Default::default() })).await {
            Ok(()) => Ok(()),
            Err(e) => match DockerError::from_engine("stop container", e) {
                DockerError::NotFound { .. } => Ok(()),
                e => Err(e),
            },
        }
    }

    /// Stops and removes a container; a missing one is fine.
    pub async fn remove(&self, container: &str) -> Result<(), DockerError> {
        // A paused container cannot take a signal; force removal kills it anyway.
        let _ = self.docker.stop_container(container, Some(StopContainerOptions { t: Some(2), ..Default::default() })).await;
        match self.docker.remove_container(container, Some(RemoveContainerOptions { force: true, ..Default::default() })).await {
            Ok(()) => Ok(()),
            Err(e) => match DockerError::from_engine("remove container", e) {
                DockerError::NotFound { .. } => Ok(()),
                e => Err(e),
            },
        }
    }

    /// Removes a volume (and an overlay volume's own directories); a missing one is fine.
    pub async fn remove_volume(&self, volume: &str) -> Result<(), DockerError> {
        let removed = match self.docker.remove_volume(volume, Some(RemoveVolumeOptions { force: true })).await {
            Ok(()) => Ok(()),
            Err(e) => match DockerError::from_engine("remove volume", e) {
                DockerError::NotFound { .. } => Ok(()),
                e => Err(e),
            },
        };
        if removed.is_ok() && !volume.is_empty() && !volume.contains('/') {
            let dir = self.overlays.join(volume);
            if dir.exists() {
                let _ = tokio::task::spawn_blocking(move || std::fs::remove_dir_all(dir)).await;
            }
        }
        removed
    }

    /// This deployment's containers: (id, labels).
    pub async fn containers(&self) -> Result<Vec<(String, HashMap<String, String>)>, DockerError> {
        let options = ListContainersOptions { all: true, filters: Some(self.naming.filter()), ..Default::default() };
        let list = self.docker.list_containers(Some(options)).await.map_err(|e| DockerError::from_engine("list containers", e))?;
        Ok(list.into_iter().filter_map(|c| Some((c.id?, c.labels.unwrap_or_default()))).collect())
    }

    /// This deployment's volumes, by name.
    pub async fn volumes(&self) -> Result<Vec<String>, DockerError> {
        let options = ListVolumesOptions { filters: Some(self.naming.filter()) };
        let list = self.docker.list_volumes(Some(options)).await.map_err(|e| DockerError::from_engine("list volumes", e))?;
        Ok(list.volumes.unwrap_or_default().into_iter().map(|v| v.name).collect())
    }

    /// Lifecycle events of this deployment's containers: (container id, action, exit code).
    pub fn events(&self) -> impl Stream<Item = Result<(String, String, Option<i64>), DockerError>> + use<> {
        let mut filters = self.naming.filter();
        filters.insert("type".into(), vec!["container".into()]);
        filters.insert("event".into(), ["die", "destroy", "oom", "pause", "unpause"].map(str::to_owned).to_vec());
        let options = EventsOptions { filters: Some(filters), ..Default::default() };
        self.docker.events(Some(options)).map(|e| {
            let e = e.map_err(|e| DockerError::from_engine("events", e))?;
            let actor = e.actor.unwrap_or_default();
            let exit = actor.attributes.as_ref().and_then(|a| a.get("exitCode")).and_then(|c| c.parse().ok());
            Ok((actor.id.unwrap_or_default(), e.action.unwrap_or_default(), exit))
        })
    }
}

/// `spec` as a container of `runtime` runs it: its user and variables over the spec's.
pub fn run_as(spec: &mut SandboxSpec, runtime: &halyard_protocol::environment::Runtime) {
    if let Some(user) = &runtime.user {
        spec.user.clone_from(user);
    }
    spec.env.extend(runtime.env.clone());
}

/// `uid:gid` (numbers; a name maps to 1000, the runtime image's default user).
pub fn parse_user(user: &str) -> (u64, u64) {
    let mut parts = user.split(':');
    let uid = parts.next().and_then(|u| u.parse().ok()).unwrap_or(if user.starts_with("root") { 0 } else { 1000 });
    let gid = parts.next().and_then(|g| g.parse().ok()).unwrap_or(uid);
    (uid, gid)
}

/// Labels of a sandbox's container and volume.
pub fn labels(
    naming: &Naming,
    spec: &str,
    sandbox: &str,
    owner: Option<&str>,
    conversation: Option<&str>,
    pool: bool,
) -> HashMap<String, String> {
    let mut labels = HashMap::from([
        (LABEL_DEPLOYMENT.to_owned(), naming.deployment.clone()),
        (LABEL_SANDBOX.to_owned(), sandbox.to_owned()),
        (LABEL_SPEC.to_owned(), spec.to_owned()),
    ]);
    if let Some(o) = owner {
        labels.insert(LABEL_OWNER.into(), o.to_owned());
    }
    if let Some(c) = conversation {
        labels.insert(LABEL_CONVERSATION.into(), c.to_owned());
    }
    if pool {
        labels.insert(LABEL_POOL.into(), spec.to_owned());
    }
    labels
}

/// The first runsc release whose sandboxes can run dockerd (gVisor's Docker-in-gVisor).
const DOCKER_IN_GVISOR_SINCE: &str = "20240201";

/// The release date (`YYYYMMDD`) in `runsc --version`'s first line: `runsc version
/// release-20240212.0` upstream, `runsc version 0.0~20221219.0` as Debian packages it.
fn runsc_release(version: &str) -> Option<String> {
    let word = version.lines().next()?.split_whitespace().nth(2)?;
    let digits: String = word.rsplit(['-', '~']).next()?.chars().take_while(char::is_ascii_digit).collect();
    (digits.len() == 8).then_some(digits)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn runsc_versions_say_their_release() {
        assert_eq!(runsc_release("runsc version 0.0~20221219.0\nspec: 1.0.2-dev\n").as_deref(), Some("20221219"));
        assert_eq!(runsc_release("runsc version release-20240212.0\n").as_deref(), Some("20240212"));
        assert_eq!(runsc_release("runsc version unknown\n"), None);
    }

    #[test]
    fn users_and_names() {
        assert_eq!(parse_user("1000:1001"), (1000, 1001));
        assert_eq!(parse_user("0"), (0, 0));
        assert_eq!(parse_user("root"), (0, 0));
        let n = Naming { deployment: "0123456789abcdef".into() };
        assert_eq!(n.name("x"), "halyard-0123456789ab-x");
        assert_eq!(n.volume("x"), "halyard-0123456789ab-x-ws");
    }
}
