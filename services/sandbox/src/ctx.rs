//! What every sandbox actor, the pool and the supervisor share ([`Ctx`]), and the running
//! limits read from it.

use crate::docker::Engine;
use crate::isolation::Isolation;
use crate::pool::Pool;
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
    /// Current status of every sandbox this process knows, for quotas.
    pub registry: Mutex<HashMap<SandboxId, (UserId, SandboxStatus)>>,
    /// The engine and what goes with it, for the docker kind.
    pub docker: Option<Arc<DockerCtx>>,
    /// How process sandboxes are kept apart, for the process kind.
    pub isolation: Option<Isolation>,
    /// How process sandboxes' resources are limited, for the process kind.
    pub cgroups: Option<crate::limits::Cgroups>,
}

/// Docker-kind state shared by the sandbox actors.
pub struct DockerCtx {
    pub engine: Engine,
    /// Runtime image per spec name.
    pub images: HashMap<String, String>,
    pub pool: Pool,
    /// Which sandbox a container belongs to, for routing engine events.
    pub containers: Mutex<HashMap<String, SandboxId>>,
}

impl Ctx {
    /// Why `owner` may not have a process sandbox now (no isolation, another user has one).
    pub fn isolation_refusal(&self, owner: &UserId) -> Option<String> {
        let isolation = self.isolation.as_ref()?;
        let reg = self.registry.lock().ok()?;
        isolation.refusal(owner, reg.values().filter(|(_, s)| *s != SandboxStatus::Deleted).map(|(o, _)| o))
    }

    /// Sandboxes running now: (of this user, in total). Paused ones do not count.
    fn running(&self, owner: &UserId) -> (usize, usize) {
        let Ok(reg) = self.registry.lock() else { return (0, 0) };
        let running = reg.values().filter(|(_, s)| matches!(s, SandboxStatus::Running | SandboxStatus::Starting));
        let mut mine = 0;
        let mut total = 0;
        for (o, _) in running {
            total += 1;
            if o == owner {
                mine += 1;
            }
        }
        (mine, total)
    }
}

/// Why starting one more sandbox for `owner` would exceed a limit, if it would.
pub fn quota_refusal(ctx: &Ctx, owner: &UserId) -> Option<String> {
    let (mine, total) = ctx.running(owner);
    let limits = &ctx.config.sandbox;
    if limits.max_running_per_user > 0 && mine >= limits.max_running_per_user {
        return Some(format!("quota_exceeded_user: {owner} already has {mine} running sandboxes (limit {})", limits.max_running_per_user));
    }
    if limits.max_running_total > 0 && total >= limits.max_running_total {
        return Some(format!("quota_exceeded_total: {total} sandboxes are running (limit {})", limits.max_running_total));
    }
    None
}
