//! Why the agent runner failed.

use halyard_platform::BusError;

/// Why the agent runner failed.
#[derive(Debug, thiserror::Error)]
pub enum AgentError {
    #[error(transparent)]
    Bus(#[from] BusError),
    #[error("cannot start the agent runner: {0}")]
    Setup(String),
}

impl AgentError {
    pub fn is_retryable(&self) -> bool {
        match self {
            Self::Bus(e) => e.is_retryable(),
            Self::Setup(_) => false,
        }
    }
}
