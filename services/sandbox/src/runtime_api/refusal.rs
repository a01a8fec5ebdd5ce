//! The Runtime API's refusals: a status, a stable code and a message that says what to do, as
//! JSON.

use axum::Json;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde_json::json;

use crate::docker::DockerError;

/// A refusal, as JSON with a stable code and a message saying what to do.
#[derive(Debug)]
pub struct Refusal {
    status: StatusCode,
    pub code: &'static str,
    message: String,
}

impl Refusal {
    pub fn new(status: StatusCode, code: &'static str, message: impl Into<String>) -> Self {
        Self { status, code, message: message.into() }
    }
}

impl From<DockerError> for Refusal {
    fn from(e: DockerError) -> Self {
        Self::new(StatusCode::SERVICE_UNAVAILABLE, "engine_error", format!("The Docker engine failed: {e}. Try again."))
    }
}

impl IntoResponse for Refusal {
    fn into_response(self) -> Response {
        (self.status, Json(json!({"code": self.code, "message": self.message}))).into_response()
    }
}
