//! The OpenAPI document, generated: every route of `/api/v1` is registered through
//! [`utoipa_axum`] from its handler's `#[utoipa::path]`, so the document lists exactly the routes
//! the router serves, with the parameters, bodies and answers of the handlers' own types. This
//! module holds what all of them share: the document's head and security schemes, the error
//! body and the sets of refusals, and the small answers several handlers give.

use std::collections::BTreeMap;

use serde::Serialize;
use utoipa::openapi::security::{ApiKey, ApiKeyValue, HttpAuthScheme, HttpBuilder, SecurityRequirement, SecurityScheme};
use utoipa::openapi::{ContentBuilder, RefOr, ResponseBuilder, Server};
use utoipa::{IntoResponses, Modify, OpenApi, ToSchema};

#[derive(OpenApi)]
#[openapi(
    info(
        title = "Halyard API",
        version = "1.0.0",
        description = "Multi-user backend for AI coding agents. Every /api/v1 route needs `Authorization: Bearer <key>` \
                       and sees only the key's user's resources; another user's resource answers 404 like a missing one. \
                       Errors are `{\"error\": {\"code\", \"message\"}}`."
    ),
    components(schemas(ErrorBody)),
    modifiers(&Head)
)]
pub struct ApiDoc;

/// The error body every refusal has: a stable `code` and a `message` that says what to do.
#[derive(Debug, Serialize, ToSchema)]
#[schema(as = Error)]
pub struct ErrorBody {
    pub error: ErrorDetail,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct ErrorDetail {
    /// Stable, for programs (`not_found`, `invalid_field`, ...).
    pub code: &'static str,
    /// For people: what went wrong and what to do.
    pub message: String,
}

/// Servers, the security schemes and the `Error` response the operations refer to.
struct Head;

impl Modify for Head {
    fn modify(&self, api: &mut utoipa::openapi::OpenApi) {
        api.servers = Some(vec![Server::new("/")]);
        api.security = Some(vec![SecurityRequirement::new("bearer", Vec::<String>::new())]);
        let components = api.components.get_or_insert_with(Default::default);
        components.add_security_scheme("bearer", SecurityScheme::Http(HttpBuilder::new().scheme(HttpAuthScheme::Bearer).build()));
        components.add_security_scheme(
            "session",
            SecurityScheme::ApiKey(ApiKey::Cookie(ApiKeyValue::with_description(
                "halyard_session",
                "the web workspace's session (POST /api/v1/session); changes made with it need the x-halyard-csrf header",
            ))),
        );
        components.add_security_scheme(
            "conversation_key",
            SecurityScheme::Http(
                HttpBuilder::new()
                    .scheme(HttpAuthScheme::Bearer)
                    .description(Some(
                        "a conversation's key to Halyard's own MCP server: derived from the deployment secret by agent runners, held by \
                         nobody else",
                    ))
                    .build(),
            ),
        );
        components.responses.insert("Error".into(), RefOr::T(error_response()));
    }
}

fn error_response() -> utoipa::openapi::Response {
    ResponseBuilder::new()
        .description("refused: `{\"error\": {\"code\", \"message\"}}`")
        .content(
            "application/json",
            ContentBuilder::new().schema(Some(RefOr::Ref(utoipa::openapi::Ref::from_schema_name("Error")))).build(),
        )
        .build()
}

fn refusals(statuses: &[u16]) -> BTreeMap<String, RefOr<utoipa::openapi::Response>> {
    statuses.iter().map(|s| (s.to_string(), RefOr::Ref(utoipa::openapi::Ref::from_response_name("Error")))).collect()
}

/// What any route of `/api/v1` may refuse with: a malformed id or query (400), no or a bad
/// credential (401), a cookie session without its CSRF header or a non-administrator (403),
/// not found or not yours (404), past a rate limit (429), the bus unreachable (503).
pub struct Refusals;

impl IntoResponses for Refusals {
    fn responses() -> BTreeMap<String, RefOr<utoipa::openapi::Response>> {
        refusals(&[400, 401, 403, 404, 429, 503])
    }
}

/// What a route taking a JSON body adds: too large (413), not JSON (415).
pub struct BodyRefusals;

impl IntoResponses for BodyRefusals {
    fn responses() -> BTreeMap<String, RefOr<utoipa::openapi::Response>> {
        refusals(&[413, 415])
    }
}

/// The sandbox answered that it could not do it (502 `sandbox_error`, its reason in words).
pub struct SandboxFailure;

impl IntoResponses for SandboxFailure {
    fn responses() -> BTreeMap<String, RefOr<utoipa::openapi::Response>> {
        refusals(&[502])
    }
}

/// Not now, in this state (409): the code says why.
pub struct Conflict;

impl IntoResponses for Conflict {
    fn responses() -> BTreeMap<String, RefOr<utoipa::openapi::Response>> {
        refusals(&[409])
    }
}

/// A service Halyard called for the user (a git forge, a model, an MCP server) failed (502).
pub struct BadGateway;

impl IntoResponses for BadGateway {
    fn responses() -> BTreeMap<String, RefOr<utoipa::openapi::Response>> {
        refusals(&[502])
    }
}

/// A change accepted: durable on the bus, carried out shortly.
#[derive(Debug, Serialize, ToSchema)]
pub struct Accepted {
    pub accepted: bool,
    /// The id of the event or command the change became, where it has one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub event_id: Option<String>,
}

impl Accepted {
    pub fn yes() -> Self {
        Self { accepted: true, event_id: None }
    }
}

/// How many match.
#[derive(Debug, Serialize, ToSchema)]
pub struct Count {
    pub count: usize,
}
