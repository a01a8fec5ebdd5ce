//! The route table: every route of `/api/v1` registered from its handler's `#[utoipa::path]`,
//! so the router and the OpenAPI document come from one list; the health checks; the layers
//! every answer passes through. The only module that imports the handlers.

use std::sync::Arc;

use axum::extract::{DefaultBodyLimit, State};
use axum::http::header;
use axum::response::IntoResponse;
use axum::{Json, Router};
use utoipa::OpenApi;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

// The handlers' modules, by the short names the route table uses.
use crate::api::accounts::{self, admin, keys, session, tickets};
use crate::api::automations::{hooks, routes as automation_routes, slack_links};
use crate::api::conversations::{self, control, events, export, images, list, network, plan, queue, share, starts, ws};
use crate::api::plugins;
use crate::api::settings::{
    agent_logins, defaults, git_providers, llm_probe, llm_profiles, mcp_servers, mcp_sign_in, repositories, secrets,
};
use crate::api::workspace::{apps, files, terminal};
use crate::api::{deliveries, mcp, sandboxes, web, webhooks};
use crate::http::api_doc;
use crate::http::error::ApiError;
use crate::state::AppState;

/// The routes of `/api/v1`, each registered from its handler's `#[utoipa::path]`: the router and
/// the OpenAPI document come from the same list, so neither can name a route the other lacks.
fn api_routes(max_body: usize) -> OpenApiRouter<AppState> {
    // A message may carry images: the body limit and room for them.
    let (schemas, paths, send_message) = routes!(control::send_message);
    let message_limit = DefaultBodyLimit::max(max_body.saturating_add(control::IMAGE_ALLOWANCE));
    OpenApiRouter::new()
        .routes(routes!(starts::start_conversation, list::list_conversations))
        .routes(routes!(list::count_conversations))
        .routes(routes!(crate::api::conversations::agents::list_agents))
        .routes(routes!(crate::api::settings::custom_agents::put, crate::api::settings::custom_agents::delete))
        .routes(routes!(crate::api::settings::custom_agents::list_org))
        .routes(routes!(crate::api::settings::custom_agents::put_org, crate::api::settings::custom_agents::delete_org))
        .routes(routes!(crate::api::settings::environments::list))
        .routes(routes!(crate::api::settings::environments::put, crate::api::settings::environments::delete))
        .routes(routes!(crate::api::settings::environments::put_deployment, crate::api::settings::environments::delete_deployment))
        .routes(routes!(crate::api::settings::environments::list_org))
        .routes(routes!(crate::api::settings::environments::put_org, crate::api::settings::environments::delete_org))
        .routes(routes!(crate::api::settings::snapshots::list))
        .routes(routes!(crate::api::settings::snapshots::delete))
        .routes(routes!(crate::api::settings::snapshots::list_org))
        .routes(routes!(starts::retry_start))
        .routes(routes!(starts::fork_conversation))
        .routes(routes!(list::get_conversation, list::delete, list::patch_conversation))
        .routes((schemas, paths, send_message.layer(message_limit)))
        .routes(routes!(control::pause))
        .routes(routes!(control::resume))
        .routes(routes!(control::interrupt))
        .routes(routes!(control::ask))
        .routes(routes!(control::confirm))
        .routes(routes!(control::reject))
        .routes(routes!(control::set_confirmation_policy))
        .routes(routes!(control::set_llm_profile))
        .routes(routes!(control::restore))
        .routes(routes!(crate::api::conversations::hooks::hooks_consent))
        .routes(routes!(crate::api::conversations::hooks::list_hook_consents))
        .routes(routes!(crate::api::conversations::hooks::delete_hook_consent))
        .routes(routes!(plan::get_tasks))
        .routes(routes!(network::get_network))
        .routes(routes!(images::screenshot))
        .routes(routes!(images::latest))
        .routes(routes!(images::image))
        .routes(routes!(defaults::get_settings, defaults::put_settings))
        .routes(routes!(llm_profiles::list_profiles))
        .routes(routes!(llm_profiles::get_profile, llm_profiles::put_profile, llm_profiles::delete_profile))
        .routes(routes!(llm_probe::test_profile, llm_probe::list_models))
        .routes(routes!(git_providers::list))
        .routes(routes!(git_providers::get_one, git_providers::put, git_providers::delete))
        .routes(routes!(repositories::list))
        .routes(routes!(repositories::branches))
        .routes(routes!(mcp_servers::list))
        .routes(routes!(mcp_servers::get_one, mcp_servers::put, mcp_servers::delete))
        .routes(routes!(mcp_servers::test))
        .routes(routes!(mcp_sign_in::start, mcp_sign_in::sign_out))
        .routes(routes!(mcp_sign_in::callback))
        .routes(routes!(mcp_sign_in::org_start, mcp_sign_in::org_sign_out))
        .routes(routes!(secrets::list))
        .routes(routes!(secrets::get_one, secrets::put, secrets::delete))
        .routes(routes!(agent_logins::list))
        .routes(routes!(agent_logins::put, agent_logins::delete))
        .routes(routes!(list::list_skills))
        .routes(routes!(files::changes))
        .routes(routes!(files::files, files::upload))
        .routes(routes!(files::download))
        .routes(routes!(files::archive))
        .routes(routes!(terminal::terminal_ws))
        .routes(routes!(apps::open))
        .routes(routes!(apps::vscode))
        .routes(routes!(events::list_events))
        .routes(routes!(events::count_events))
        .routes(routes!(export::export))
        .routes(routes!(events::get_event))
        .routes(routes!(ws::events_ws))
        .routes(routes!(share::share, share::share_state, share::unshare))
        .routes(routes!(share::shared))
        .routes(routes!(share::shared_events))
        .routes(routes!(share::shared_events_ws))
        .routes(routes!(share::shared_changes))
        .routes(routes!(list::get_task, queue::cancel_task))
        .routes(routes!(queue::admin_queue))
        .routes(routes!(queue::put_share, queue::delete_share))
        .routes(routes!(sandboxes::list))
        .routes(routes!(sandboxes::get_one, sandboxes::delete))
        .routes(routes!(sandboxes::pause))
        .routes(routes!(sandboxes::resume))
        .routes(routes!(sandboxes::specs))
        .routes(routes!(webhooks::create, webhooks::list))
        .routes(routes!(webhooks::get_one, webhooks::patch, webhooks::delete))
        .routes(routes!(webhooks::rotate))
        .routes(routes!(crate::api::batches::create, crate::api::batches::list))
        .routes(routes!(crate::api::batches::get_one))
        .routes(routes!(crate::api::batches::act))
        .routes(routes!(crate::api::batches::compare))
        .routes(routes!(crate::api::settings::templates::list))
        .routes(routes!(crate::api::settings::templates::put, crate::api::settings::templates::delete))
        .routes(routes!(deliveries::deliveries))
        .routes(routes!(deliveries::retry))
        .routes(routes!(automation_routes::create, automation_routes::list))
        .routes(routes!(automation_routes::get_one, automation_routes::patch, automation_routes::delete))
        .routes(routes!(automation_routes::runs))
        .routes(routes!(hooks::receive))
        .routes(routes!(slack_links::get_one, slack_links::link))
        .routes(routes!(crate::api::automations::slack_sign_in::start))
        .routes(routes!(crate::api::automations::slack_sign_in::callback))
        .routes(routes!(admin::me))
        .routes(routes!(keys::my_keys, keys::create_my_key))
        .routes(routes!(keys::revoke_my_key))
        .routes(routes!(session::sign_in, session::sign_out))
        .routes(routes!(session::step_up))
        .routes(routes!(tickets::create))
        .routes(routes!(admin::create_user, admin::list_users))
        .routes(routes!(admin::get_user, admin::patch_user))
        .routes(routes!(keys::create_key, keys::list_keys))
        .routes(routes!(keys::revoke_key))
        .routes(routes!(crate::audit::list))
        .routes(routes!(accounts::usage::mine))
        .routes(routes!(accounts::usage::all))
        .routes(routes!(accounts::usage::org))
        .routes(routes!(accounts::orgs::create, accounts::orgs::list))
        .routes(routes!(accounts::orgs::get_one))
        .routes(routes!(accounts::orgs::list_members, accounts::orgs::add_member))
        .routes(routes!(accounts::orgs::set_role, accounts::orgs::remove_member))
        .routes(routes!(accounts::orgs::audit_trail))
        .routes(routes!(accounts::invitations::mine))
        .routes(routes!(accounts::invitations::accept))
        .routes(routes!(accounts::invitations::decline))
        .routes(routes!(accounts::org_profiles::get_settings, accounts::org_profiles::put_settings))
        .routes(routes!(accounts::org_profiles::list_profiles))
        .routes(routes!(accounts::org_budgets::list_prices))
        .routes(routes!(accounts::org_budgets::put_price, accounts::org_budgets::delete_price))
        .routes(routes!(accounts::org_budgets::status))
        .routes(routes!(accounts::sso::status))
        .routes(routes!(accounts::sso::start))
        .routes(routes!(accounts::sso::callback))
        .routes(routes!(accounts::org_secrets::list))
        .routes(routes!(accounts::org_mcp::list))
        .routes(routes!(accounts::org_git::list))
        .routes(routes!(accounts::org_skills::list))
        .routes(routes!(plugins::show))
        .routes(routes!(plugins::add_marketplace))
        .routes(routes!(plugins::refresh_marketplace))
        .routes(routes!(plugins::remove_marketplace))
        .routes(routes!(plugins::install))
        .routes(routes!(plugins::change, plugins::uninstall))
        .routes(routes!(plugins::upgrade))
        .routes(routes!(accounts::org_skills::put, accounts::org_skills::delete))
        .routes(routes!(accounts::org_templates::list))
        .routes(routes!(accounts::org_templates::put, accounts::org_templates::delete))
        .routes(routes!(accounts::org_git::put, accounts::org_git::delete))
        .routes(routes!(accounts::org_mcp::put, accounts::org_mcp::delete))
        .routes(routes!(conversations::org_shared::list))
        .routes(routes!(accounts::org_secrets::put, accounts::org_secrets::delete))
        .routes(routes!(accounts::org_profiles::put_profile, accounts::org_profiles::delete_profile))
        .routes(routes!(openapi))
}

/// The whole document: `/api/v1`'s routes, the health checks and Halyard's own MCP server.
fn document(api: OpenApiRouter<AppState>) -> (Router<AppState>, utoipa::openapi::OpenApi) {
    let (api, mut doc) = OpenApiRouter::with_openapi(api_doc::ApiDoc::openapi())
        .nest("/api/v1", api)
        .routes(routes!(healthz))
        .routes(routes!(readyz))
        .split_for_parts();
    doc.merge(mcp::McpDoc::openapi());
    (api, doc)
}

/// The OpenAPI document of this API, as served at `/api/v1/openapi.json`.
pub fn openapi_document() -> utoipa::openapi::OpenApi {
    document(api_routes(0)).1
}

/// The router.
pub fn app(state: AppState) -> Router {
    let max_body = state.config.gateway.max_body_bytes;
    let (api, doc) = document(api_routes(max_body));
    let doc: Arc<str> = doc.to_pretty_json().unwrap_or_default().into();
    let api = api
        .layer(axum::Extension(OpenApiJson(doc)))
        // What the API answers is data for one reader: never sniffed into something else, never
        // kept by a cache (keys and webhook secrets are shown once).
        .layer(axum::middleware::map_response(|mut res: axum::response::Response| async move {
            res.headers_mut().insert(header::CACHE_CONTROL, header::HeaderValue::from_static("no-store"));
            res
        }));
    api
        // Halyard's own MCP server, for agent runners (a conversation's key, not a user's).
        .route("/mcp", mcp::service(state.clone()))
        .route_layer(axum::middleware::from_fn(crate::http::metrics::track))
        // The web workspace, and its routes (any other path) that the browser app handles.
        .fallback(web::serve)
        .layer(DefaultBodyLimit::max(max_body))
        .layer(axum::middleware::map_response(|mut res: axum::response::Response| async move {
            res.headers_mut().insert(header::X_CONTENT_TYPE_OPTIONS, header::HeaderValue::from_static("nosniff"));
            res
        }))
        .with_state(state)
}

/// The document, made once when the router is.
#[derive(Clone)]
struct OpenApiJson(Arc<str>);

/// `GET /api/v1/openapi.json`: this document, generated from the handlers.
#[utoipa::path(get, path = "/openapi.json", tag = "meta", security(()), responses((status = 200, description = "the OpenAPI document", content_type = "application/json", body = Object)))]
async fn openapi(axum::Extension(OpenApiJson(doc)): axum::Extension<OpenApiJson>) -> impl IntoResponse {
    ([(header::CONTENT_TYPE, "application/json")], doc.to_string())
}

/// What `/healthz` and `/readyz` answer.
#[derive(serde::Serialize, utoipa::ToSchema)]
struct Health {
    /// `ok` (the process serves) or `ready` (and reaches the bus).
    status: &'static str,
}

/// `GET /healthz`: the process serves.
#[utoipa::path(get, path = "/healthz", tag = "meta", security(()), responses((status = 200, body = Health)))]
async fn healthz() -> Json<Health> {
    Json(Health { status: "ok" })
}

/// `GET /readyz`: the process serves and reaches NATS.
#[utoipa::path(get, path = "/readyz", tag = "meta", security(()), responses((status = 200, body = Health), (status = 503, description = "not connected to the bus", body = api_doc::ErrorBody)))]
async fn readyz(State(state): State<AppState>) -> Result<Json<Health>, ApiError> {
    if state.nats.connection_state() != async_nats::connection::State::Connected {
        return Err(ApiError::unavailable("not connected to NATS"));
    }
    Ok(Json(Health { status: "ready" }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::check_sites;
    use halyard_platform::Config;

    #[test]
    fn every_operation_says_what_it_answers_and_refuses() {
        let doc = serde_json::to_value(openapi_document()).unwrap();
        let paths = doc["paths"].as_object().unwrap();
        assert!(paths.len() > 60, "the document lists the routes ({})", paths.len());
        let schemas = doc["components"]["schemas"].as_object().unwrap();
        let mut operations = 0;
        for (path, item) in paths {
            for (method, op) in item.as_object().unwrap() {
                operations += 1;
                let responses = op["responses"].as_object().unwrap();
                // (A redirect is the answer of the sign-in's steps through the identity provider.)
                assert!(responses.keys().any(|s| s.starts_with(['1', '2', '3'])), "{method} {path}: no success answer");
                let public = ["/healthz", "/readyz", "/api/v1/openapi.json", "/api/v1/session"].contains(&path.as_str())
                    || path.starts_with("/api/v1/auth/sso")
                    || path == "/api/v1/auth/slack/callback";
                assert!(public || responses.contains_key("401"), "{method} {path}: 401 not documented");
                assert!(op["summary"].as_str().is_some_and(|s| !s.is_empty()), "{method} {path}: no summary");
            }
        }
        assert!(operations > 80, "{operations} operations");
        // Every schema referred to is defined (names of types from two crates must not collide).
        let text = doc.to_string();
        for part in text.split("\"$ref\":\"#/components/schemas/").skip(1) {
            let name = part.split('"').next().unwrap();
            assert!(schemas.contains_key(name), "{name} is referred to but not defined");
        }
    }

    /// The web app's types are generated from its copy of this document: a handler's type that
    /// changed without the copy (and so the web app's types) following fails here.
    #[test]
    fn the_web_apps_copy_of_the_document_is_this_one() {
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../../web/openapi.json");
        let copy = std::fs::read_to_string(path).unwrap_or_default();
        let doc = openapi_document().to_pretty_json().unwrap();
        assert!(
            copy.trim_end() == doc,
            "web/openapi.json is not the gateway's OpenAPI document: run `cargo run -q -p halyard -- openapi > web/openapi.json` \
             and `bash infra/build-web.sh` (which regenerates web/src/api-schema.ts), then commit both"
        );
    }

    #[test]
    fn apps_may_not_share_a_site_with_the_web_workspace() {
        let mut c = Config::default();
        assert!(check_sites(&c).is_ok(), "127.0.0.1 and *.localhost are two sites");
        c.http_addr = "localhost:3000".into();
        assert!(check_sites(&c).is_err(), "localhost and *.localhost are one site");
        c.gateway.public_url = "https://halyard.example.com".into();
        c.apps_url = "https://apps.example.com".into();
        let err = check_sites(&c).unwrap_err().to_string();
        assert!(err.contains("example.com") && err.contains("HALYARD_APPS_URL"), "{err}");
        c.apps_url = "https://example-apps.dev".into();
        assert!(check_sites(&c).is_ok());
        c.apps_addr = String::new();
        c.apps_url = "https://apps.example.com".into();
        assert!(check_sites(&c).is_ok(), "no apps served, nothing to share");
    }
}
