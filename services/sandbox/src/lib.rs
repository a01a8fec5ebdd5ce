//! The sandbox supervisor: owns sandboxes, the places where an agent's actions execute.
//!
//! It consumes sandbox commands (create, pause, resume, delete) from the bus and publishes each
//! sandbox's state as a record on `halyard.sys.sandbox.<id>`, with the URLs it exposes. A
//! [`supervisor::Supervisor`] actor holds one [`sandbox::SandboxActor`] per live sandbox; at
//! start-up it reconciles the records with what is really running: live executors are adopted,
//! dead ones re-provisioned on the same workspace, so a crash loses no files.
//!
//! Two kinds: `process` (the executor as a child process in a per-sandbox workspace directory,
//! with a cleared environment and its own process group, under its own uid or in namespaces:
//! see [`isolation`]; the embedded default) and `docker`
//! (a container per sandbox through bollard, from a runtime image built locally, with the
//! workspace on a named volume, a warm pool, and engine events watched).
//!
//! What the actors share is [`ctx`]; a container is started in [`container`], the warm pool is
//! [`pool`] (kept full by [`warm`]); a process sandbox's files are laid out by [`layout`], its
//! network class is an [`egress`] for both kinds. No module imports another that imports it
//! back (the `architecture` test reads the imports). Environment snapshots (kept after setup,
//! started from, swept) are [`snapshots`], their bucket [`snapshot_store`]. OpenHands' Runtime
//! API (its deployments' sandboxes as containers here) is [`runtime_api`].

pub mod container;
pub mod ctx;
pub mod devimage;
pub mod docker;
pub mod egress;
pub mod egress_proxy;
pub mod egress_usage;
pub mod envpool;
pub mod error;
pub mod helper;
pub mod image;
pub mod isolation;
pub mod layout;
pub mod limits;
pub mod netns;
pub mod network;
pub mod paths;
pub mod pool;
pub mod process;
pub mod queue;
pub mod runtime_api;
pub mod sandbox;
pub mod shape;
pub mod snapshot_store;
pub mod snapshots;
pub mod supervisor;
pub mod warm;

use std::sync::Arc;

use halyard_platform::{Config, Shutdown};

pub use error::SandboxError;

/// Whether a Docker engine answers at `host` and has `image` (the default spec's base image):
/// what `auto` needs to choose the docker kind.
pub async fn docker_usable(host: &str, image: &str) -> Result<(), String> {
    let docker = docker::connect(host).await.map_err(|e| e.to_string())?;
    if docker::image_exists(&docker, image).await {
        Ok(())
    } else {
        Err(format!("the Docker engine has no image {image} (infra/build-base-image.sh builds it)"))
    }
}

/// Runs the sandbox supervisor until `shutdown`.
pub async fn run(config: Arc<Config>, nats: async_nats::Client, shutdown: Shutdown) -> Result<(), SandboxError> {
    supervisor::run(config, nats, shutdown).await
}
