//! What every sandbox actor, the pool and the supervisor share ([`Ctx`]).

use crate::docker::Engine;
use crate::isolation::Isolation;
use crate::pool::Pool;
use crate::queue::Queue;
use async_nats::jetstream::{self};
use halyard_platform::Config;
use halyard_protocol::system::SandboxStatus;
use halyard_protocol::{SandboxId, UserId};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};

/// What every sandbox actor shares.
pub struct Ctx {
    pub config: Arc<Config>,
    pub js: jetstream::Context,
    pub http: reqwest::Client,
    /// Current status of every sandbox this process knows (whose sandboxes share the host).
    pub registry: Mutex<HashMap<SandboxId, (UserId, SandboxStatus)>>,
    /// The engine and what goes with it, for the docker kind.
    pub docker: Option<Arc<DockerCtx>>,
    /// The way out of sandboxes held to an outbound policy, of either kind (`None`: it could
    /// not start, and such sandboxes are refused in words).
    pub egress: Option<Arc<crate::egress_proxy::EgressProxy>>,
    /// How process sandboxes are kept apart, for the process kind.
    pub isolation: Option<Isolation>,
    /// How process sandboxes' resources are limited, for the process kind.
    pub cgroups: Option<crate::limits::Cgroups>,
    /// The start queue, and the seats of the running limits (set once, at start-up).
    pub queue: std::sync::OnceLock<Arc<Queue>>,
    /// Environment snapshots (set once, at start-up).
    pub snapshots: std::sync::OnceLock<crate::snapshot_store::Snapshots>,
}

/// Docker-kind state shared by the sandbox actors.
pub struct DockerCtx {
    pub engine: Engine,
    /// Runtime image per spec name.
    pub images: HashMap<String, String>,
    pub pool: Pool,
    /// Which sandbox a container belongs to, for routing engine events.
    pub containers: Mutex<HashMap<String, SandboxId>>,
    /// The executor and its libraries, added to dev containers' images.
    pub executor: crate::image::ExecutorFiles,
}

impl Ctx {
    /// Why `owner` may not have a process sandbox now (no isolation, another user has one).
    pub fn isolation_refusal(&self, owner: &UserId) -> Option<String> {
        let isolation = self.isolation.as_ref()?;
        let reg = self.registry.lock().ok()?;
        isolation.refusal(owner, reg.values().filter(|(_, s)| *s != SandboxStatus::Deleted).map(|(o, _)| o))
    }
}
