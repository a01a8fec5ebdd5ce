//! The error every executor route answers with, and how it becomes an HTTP answer (one place).

use axum::Json;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use halyard_protocol::executor::{ErrorBody, ErrorDetail};

/// An error an executor route answers with.
#[derive(Debug, thiserror::Error)]
pub enum ExecutorError {
    #[error("missing or wrong session key")]
    Unauthorized,
    /// The tool was used wrongly; the message says how to use it right.
    #[error("{0}")]
    Tool(String),
    /// A previous command is still running.
    #[error("{0}")]
    Busy(String),
    /// A path that leads out of the workspace (absolute elsewhere, `..`, a link out).
    #[error("{0}")]
    Outside(String),
    /// A path inside the workspace where nothing is.
    #[error("{0}")]
    NotFound(String),
    /// An upload over the size limit.
    #[error("{0}")]
    TooLarge(String),
    /// What was asked for is not in this sandbox (its image lacks the program).
    #[error("{0}")]
    Unavailable(String),
    /// The checkpoint store does not match what the agent runner kept of it: something in the
    /// sandbox changed it.
    #[error("{0}")]
    Tampered(String),
    #[error("executor failure: {0}")]
    Internal(String),
}

impl ExecutorError {
    pub fn is_retryable(&self) -> bool {
        matches!(self, Self::Busy(_) | Self::Internal(_))
    }
}

impl IntoResponse for ExecutorError {
    fn into_response(self) -> Response {
        let (status, code) = match &self {
            Self::Unauthorized => (StatusCode::UNAUTHORIZED, "unauthorized"),
            Self::Tool(_) => (StatusCode::BAD_REQUEST, "tool_error"),
            Self::Busy(_) => (StatusCode::CONFLICT, "command_running"),
            Self::Outside(_) => (StatusCode::BAD_REQUEST, "path_outside_workspace"),
            Self::NotFound(_) => (StatusCode::NOT_FOUND, "not_found"),
            Self::TooLarge(_) => (StatusCode::PAYLOAD_TOO_LARGE, "file_too_large"),
            Self::Unavailable(_) => (StatusCode::SERVICE_UNAVAILABLE, "not_installed"),
            Self::Tampered(_) => (StatusCode::CONFLICT, "checkpoints_tampered"),
            Self::Internal(_) => (StatusCode::INTERNAL_SERVER_ERROR, "internal"),
        };
        let body = ErrorBody { error: ErrorDetail { code: code.into(), message: self.to_string() } };
        (status, Json(body)).into_response()
    }
}
