//! The one place where errors become HTTP responses: `{"error": {"code", "message"}}` with a
//! stable code and a message that says what to do.

use axum::Json;
use axum::extract::rejection::{JsonRejection, QueryRejection};
use axum::extract::{FromRequest, Request};
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};

use crate::http::api_doc::{ErrorBody, ErrorDetail};

/// An API error.
#[derive(Debug, thiserror::Error)]
#[error("{code}: {message}")]
pub struct ApiError {
    pub status: StatusCode,
    pub code: &'static str,
    pub message: String,
    pub retry_after: Option<u64>,
}

impl ApiError {
    pub fn new(status: StatusCode, code: &'static str, message: impl Into<String>) -> Self {
        Self { status, code, message: message.into(), retry_after: None }
    }

    pub fn bad_request(code: &'static str, message: impl Into<String>) -> Self {
        Self::new(StatusCode::BAD_REQUEST, code, message)
    }

    /// Missing and not-yours look the same, so ids of other users' resources leak nothing.
    pub fn not_found(what: &str) -> Self {
        Self::new(StatusCode::NOT_FOUND, "not_found", format!("{what} not found"))
    }

    pub fn conflict(code: &'static str, message: impl Into<String>) -> Self {
        Self::new(StatusCode::CONFLICT, code, message)
    }

    pub fn unavailable(message: impl Into<String>) -> Self {
        Self::new(StatusCode::SERVICE_UNAVAILABLE, "unavailable", message)
    }

    pub fn internal(e: impl std::fmt::Display) -> Self {
        tracing::error!(error = %e, "internal error");
        Self::new(StatusCode::INTERNAL_SERVER_ERROR, "internal", "internal error; it has been logged")
    }

    /// Transient failures (bus, limits) are worth retrying; bad input is not.
    pub fn is_retryable(&self) -> bool {
        matches!(self.status, StatusCode::TOO_MANY_REQUESTS | StatusCode::SERVICE_UNAVAILABLE)
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let body = ErrorBody { error: ErrorDetail { code: self.code, message: self.message } };
        let mut resp = (self.status, Json(body)).into_response();
        if let Some(secs) = self.retry_after {
            if let Ok(v) = HeaderValue::from_str(&secs.to_string()) {
                resp.headers_mut().insert(header::RETRY_AFTER, v);
            }
        }
        resp
    }
}

impl From<halyard_platform::BusError> for ApiError {
    fn from(e: halyard_platform::BusError) -> Self {
        tracing::error!(error = %e, "bus error");
        Self::unavailable("the message bus did not accept the request; try again")
    }
}

impl From<JsonRejection> for ApiError {
    fn from(r: JsonRejection) -> Self {
        match r.status() {
            StatusCode::PAYLOAD_TOO_LARGE => Self::new(
                StatusCode::PAYLOAD_TOO_LARGE,
                "payload_too_large",
                "the request body is larger than the server accepts; send less",
            ),
            StatusCode::UNSUPPORTED_MEDIA_TYPE => Self::new(
                StatusCode::UNSUPPORTED_MEDIA_TYPE,
                "unsupported_media_type",
                "send the body as JSON with `Content-Type: application/json`",
            ),
            _ => Self::bad_request("invalid_body", format!("the JSON body is invalid: {}", r.body_text())),
        }
    }
}

impl From<QueryRejection> for ApiError {
    fn from(r: QueryRejection) -> Self {
        Self::bad_request("invalid_query", format!("the query string is invalid: {}", r.body_text()))
    }
}

/// `Json` whose rejections are [`ApiError`]s.
#[derive(Debug)]
pub struct ApiJson<T>(pub T);

impl<S: Send + Sync, T: serde::de::DeserializeOwned> FromRequest<S> for ApiJson<T> {
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &S) -> Result<Self, Self::Rejection> {
        let Json(v) = Json::<T>::from_request(req, state).await?;
        Ok(Self(v))
    }
}

/// Checks a URL the gateway, or a service for a user, will call: refused with
/// `destination_not_allowed` if it points at an address class the operator did not allow in
/// `setting`, `invalid_field` if it is no http(s) URL.
pub fn check_destination(field: &str, url: &str, allow: &[String], setting: &str) -> Result<(), ApiError> {
    use halyard_platform::net;
    net::check_url(url, allow).map(|_| ()).map_err(|e| match e {
        net::DestinationError::Forbidden(..) => ApiError::bad_request(
            "destination_not_allowed",
            format!("`{field}`: {e}; use a public address (or have the operator allow it with {setting})"),
        ),
        other => ApiError::bad_request("invalid_field", format!("`{field}`: {other}")),
    })
}
