//! The sandbox supervisor: owns sandboxes, the places where an agent's actions execute.
//!
//! It consumes sandbox commands (create, pause, resume, delete) from the bus and publishes each
//! sandbox's state as a record on `halyard.sys.sandbox.<id>`, with the URLs it exposes. A
//! [`supervisor::Supervisor`] actor holds one [`sandbox::SandboxActor`] per live sandbox; at
//! start-up it reconciles the records with what is really running: live executors are adopted,
//! dead ones re-provisioned on the same workspace, so a crash loses no files.
//!
//! This crate implements the `process` kind: the executor runs as a child process in a
//! per-sandbox workspace directory, with a cleared environment and its own process group.

pub mod process;
pub mod sandbox;
pub mod supervisor;

use std::sync::Arc;

use halyard_platform::{BusError, Config, Shutdown};

/// Why the sandbox service failed.
#[derive(Debug, thiserror::Error)]
pub enum SandboxError {
    #[error(transparent)]
    Bus(#[from] BusError),
    #[error("cannot start the sandbox supervisor: {0}")]
    Spawn(String),
}

impl SandboxError {
    pub fn is_retryable(&self) -> bool {
        match self {
            Self::Bus(e) => e.is_retryable(),
            Self::Spawn(_) => false,
        }
    }
}

/// Runs the sandbox supervisor until `shutdown`.
pub async fn run(config: Arc<Config>, nats: async_nats::Client, shutdown: Shutdown) -> Result<(), SandboxError> {
    supervisor::run(config, nats, shutdown).await
}
