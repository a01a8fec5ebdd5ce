//! Why the sandbox service failed.

use halyard_platform::BusError;

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
