//! Halyard's own MCP server, `/mcp` (streamable HTTP, through the official SDK): the tools an
//! agent needs its user's forge credentials for, performed here so that the credentials never
//! reach the sandbox or the model. `list_branches`, `create_pull_request` and
//! `comment_on_pull_request` act on a repository of one of the user's git providers
//! ([`halyard_platform::forge`]: GitHub's REST API and the forges that speak it, GitLab's, Bitbucket's and Azure DevOps').
//!
//! Callers are agent runners, one key per conversation ([`keys::mcp_key`], derived from the
//! deployment secret, so no sandbox and no user holds one). The key names the conversation;
//! the conversation names its owner, whose providers are used. The server keeps no session
//! (every request stands alone), so any gateway replica answers any request.

use std::sync::Arc;

use axum::extract::{Request, State};
use axum::http::{StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, Implementation, ListToolsResult, PaginatedRequestParams,
    ServerCapabilities, ServerConfig, Tool,
};
use rmcp::service::{RequestContext, RoleServer};
use rmcp::transport::streamable_http_server::session::never::NeverSessionManager;
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};
use rmcp::{ErrorData, ServerHandler};
use serde::Deserialize;
use serde_json::{Map, Value, json};

use halyard_platform::{keys, net, vault};
use halyard_protocol::user::{GitProvider, HALYARD_MCP_SERVER, UserGitProviders};
use halyard_protocol::{ConversationId, UserId, subjects};

use crate::domain::user_store;
use crate::http::error::ApiError;
use crate::state::AppState;
use halyard_platform::forge::{self, Forge, NewPullRequest};

/// Who a request acts for, found by [`authenticate`].
#[derive(Clone, Debug)]
struct Caller {
    user: UserId,
    conversation: ConversationId,
    /// The URL the conversation's workspace was cloned from, if any.
    repository: Option<String>,
}

/// The document of `/mcp`, whose handler is the SDK's: [`mcp_post`] only describes it.
#[derive(utoipa::OpenApi)]
#[openapi(paths(mcp_post))]
pub struct McpDoc;

/// Halyard's own MCP server (streamable HTTP, stateless), for agent runners: the tools
/// list_branches, create_pull_request and comment_on_pull_request act on the conversation
/// owner's git providers with their tokens.
#[utoipa::path(
    post,
    path = "/mcp",
    tag = "mcp",
    security(("conversation_key" = [])),
    request_body(
        description = "a JSON-RPC 2.0 message of the Model Context Protocol (initialize, tools/list, tools/call, ...)",
        content((Object = "application/json")),
    ),
    responses(
        (status = 200, description = "the JSON-RPC answer", content((Object = "application/json"), (String = "text/event-stream"))),
        (status = 202, description = "a notification, accepted"),
        (status = 400, description = "not a JSON-RPC message the server takes"),
        (status = 401, description = "no conversation key, or a wrong one", body = crate::http::api_doc::ErrorBody),
        (status = 404, description = "the key's conversation is gone", body = crate::http::api_doc::ErrorBody),
        (status = 406, description = "the Accept header must name application/json and text/event-stream"),
        (status = 413, description = "the message is too large"),
        (status = 415, description = "the body must be application/json"),
    )
)]
#[allow(dead_code)]
fn mcp_post() {}

/// The `/mcp` service: [`authenticate`] in front of the SDK's stateless streamable-HTTP server.
pub fn service(state: AppState) -> axum::routing::MethodRouter<AppState> {
    let tools = Tools { state: state.clone() };
    let config = StreamableHttpServerConfig::default()
        .with_legacy_session_mode(false)
        .with_json_response(true)
        // Callers are agent runners with a key; the gateway's address is the operator's to
        // choose, so the SDK's check of the Host header (against DNS rebinding in a browser)
        // has nothing to add.
        .disable_allowed_hosts()
        .with_max_request_body_bytes(state.config.gateway.max_body_bytes);
    let server = StreamableHttpService::new(move || Ok(tools.clone()), Arc::new(NeverSessionManager::default()), config);
    axum::routing::any_service(server).layer(axum::middleware::from_fn_with_state(state, authenticate))
}

/// Admits requests bearing a conversation's key, with the conversation's [`Caller`] attached.
async fn authenticate(State(state): State<AppState>, mut request: Request, next: Next) -> Response {
    let key = request.headers().get(header::AUTHORIZATION).and_then(|v| v.to_str().ok()).and_then(|v| v.strip_prefix("Bearer "));
    let Some(conversation) = key.and_then(|k| keys::mcp_key_conversation(&state.config.secret, k.trim())) else {
        let message = "Halyard's MCP server is for agent runners: send a conversation's key as `Authorization: Bearer <key>`";
        return ApiError::new(StatusCode::UNAUTHORIZED, "unauthorized", message).into_response();
    };
    let view = match state.store.conversation(conversation) {
        Ok(Some(view)) => view,
        Ok(None) => return ApiError::not_found("conversation").into_response(),
        Err(e) => return ApiError::internal(e).into_response(),
    };
    let repository = view.repository.as_ref().and_then(|r| r["url"].as_str()).map(str::to_owned);
    request.extensions_mut().insert(Caller { user: UserId(view.owner), conversation, repository });
    next.run(request).await
}

#[derive(Clone)]
struct Tools {
    state: AppState,
}

/// Arguments every tool takes to say which repository it acts on.
#[derive(Debug, Default, Deserialize)]
struct Where {
    /// `owner/name`; default: the repository the conversation was started from.
    #[serde(default)]
    repository: Option<String>,
    /// One of the user's git providers; default: the one serving the repository's host.
    #[serde(default)]
    provider: Option<String>,
}

#[derive(Debug, Deserialize)]
struct CommentArgs {
    number: u64,
    body: String,
}

fn schema(properties: Value, required: &[&str]) -> Arc<Map<String, Value>> {
    let mut properties = properties;
    if let Value::Object(map) = &mut properties {
        map.insert(
            "repository".into(),
            json!({"type": "string", "description": "`owner/name` of the repository; default: the one this conversation was started from"}),
        );
        map.insert(
            "provider".into(),
            json!({"type": "string", "description": "Name of the user's git provider; default: the one serving the repository's host"}),
        );
    }
    let schema = json!({"type": "object", "properties": properties, "required": required});
    Arc::new(schema.as_object().cloned().unwrap_or_default())
}

fn tools() -> Vec<Tool> {
    vec![
        Tool::new(
            "list_branches",
            "List the branches of a repository on the user's git provider, and which one is the default.",
            schema(json!({}), &[]),
        ),
        Tool::new(
            "create_pull_request",
            "Open a pull request (a merge request on GitLab) with the user's credentials. Push the head branch first. \
             Returns the request's number and URL.",
            schema(
                json!({
                    "title": {"type": "string"},
                    "head": {"type": "string", "description": "The branch with the changes (pushed already)"},
                    "base": {"type": "string", "description": "The branch to merge into; default: the repository's default branch"},
                    "body": {"type": "string", "description": "The description, in Markdown"},
                    "draft": {"type": "boolean"},
                }),
                &["title", "head"],
            ),
        ),
        Tool::new(
            "comment_on_pull_request",
            "Comment on a pull request (a merge request on GitLab) with the user's credentials.",
            schema(json!({"number": {"type": "integer", "minimum": 1}, "body": {"type": "string"}}), &["number", "body"]),
        ),
    ]
}

impl ServerHandler for Tools {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
            .with_server_info(Implementation::new(HALYARD_MCP_SERVER, env!("CARGO_PKG_VERSION")))
            .with_instructions("Acts on the user's git providers with their credentials, which you never see.")
    }

    async fn list_tools(&self, _: Option<PaginatedRequestParams>, _: RequestContext<RoleServer>) -> Result<ListToolsResult, ErrorData> {
        Ok(ListToolsResult::with_all_items(tools()))
    }

    async fn call_tool(&self, request: CallToolRequestParams, context: RequestContext<RoleServer>) -> Result<CallToolResponse, ErrorData> {
        let caller = context.extensions.get::<axum::http::request::Parts>().and_then(|p| p.extensions.get::<Caller>()).cloned();
        let Some(caller) = caller else {
            return Err(ErrorData::internal_error("the request reached the tools without a caller", None));
        };
        let args = Value::Object(request.arguments.unwrap_or_default());
        let done = self.call(&caller, &request.name, args).await;
        tracing::info!(user = %caller.user, conversation = %caller.conversation, tool = %request.name, ok = done.is_ok(), "halyard MCP tool");
        Ok(match done {
            Ok(result) => CallToolResult::success(vec![ContentBlock::text(result.to_string())]).into(),
            // A tool's failure, in words for the model.
            Err(message) => CallToolResult::error(vec![ContentBlock::text(message)]).into(),
        })
    }
}

impl Tools {
    async fn call(&self, caller: &Caller, tool: &str, args: Value) -> Result<Value, String> {
        let parse = |e: serde_json::Error| format!("the arguments of `{tool}` are wrong: {e}");
        let place: Where = serde_json::from_value(args.clone()).map_err(parse)?;
        let (name, provider, token, full_name) = self.resolve(caller, &place).await?;
        let forge = Forge::new(&provider, &token, &self.state.config.gateway.git_api_allow).map_err(|e| e.to_string())?;
        let answered = match tool {
            "list_branches" => forge.branches(&full_name).await.map(|b| serde_json::to_value(b).unwrap_or_default()),
            "create_pull_request" => {
                let pr: NewPullRequest = serde_json::from_value(args).map_err(parse)?;
                if pr.title.trim().is_empty() || pr.head.trim().is_empty() {
                    return Err("`title` and `head` must not be empty".into());
                }
                forge.create_pull_request(&full_name, &pr).await
            }
            "comment_on_pull_request" => {
                let c: CommentArgs = serde_json::from_value(args).map_err(parse)?;
                if c.body.trim().is_empty() {
                    return Err("`body` must not be empty".into());
                }
                forge.comment_on_pull(&full_name, c.number, &c.body).await
            }
            other => {
                return Err(format!(
                    "there is no tool `{other}`; the tools are list_branches, create_pull_request and comment_on_pull_request"
                ));
            }
        };
        answered.map_err(|e| format!("{full_name} on git provider `{name}`: {e}"))
    }

    /// The provider (name, config, opened token) and repository a call acts on.
    async fn resolve(&self, caller: &Caller, place: &Where) -> Result<(String, GitProvider, String, String), String> {
        let (stored, _) = user_store::load::<UserGitProviders>(&self.state, &subjects::user_git_key(&caller.user))
            .await
            .map_err(|e| format!("your git providers could not be read: {}", e.message))?;
        let from_conversation = caller.repository.as_deref().and_then(|url| Some((net::url_host(url)?, repository_path(url)?)));
        let (name, provider) = match &place.provider {
            Some(name) => {
                let p = stored
                    .providers
                    .get(name)
                    .ok_or_else(|| format!("you have no git provider `{name}` (see GET /api/v1/git-providers)"))?;
                (name.clone(), p.clone())
            }
            None => {
                let by_host = from_conversation
                    .as_ref()
                    .and_then(|(host, _)| stored.providers.iter().find(|(_, p)| p.host.eq_ignore_ascii_case(host)));
                let with_api: Vec<_> = stored.providers.iter().filter(|(_, p)| forge::api_base(p).is_some()).collect();
                match (by_host, with_api.as_slice()) {
                    (Some((n, p)), _) => (n.clone(), p.clone()),
                    (None, [(n, p)]) => ((*n).clone(), (*p).clone()),
                    (None, []) => return Err("you have no git provider with an API: add one with PUT /api/v1/git-providers/<name>".into()),
                    (None, many) => {
                        let names: Vec<&str> = many.iter().map(|(n, _)| n.as_str()).collect();
                        return Err(format!("name the `provider`: one of {}", names.join(", ")));
                    }
                }
            }
        };
        let full_name = match (&place.repository, from_conversation) {
            (Some(r), _) => r.trim().trim_matches('/').trim_end_matches(".git").to_owned(),
            (None, Some((_, path))) => forge::repository_name(&provider, path),
            (None, None) => return Err("name the `repository` (`owner/name`): this conversation was not started from one".into()),
        };
        let well_formed = full_name.split('/').count() >= 2
            && full_name.split('/').all(|part| !part.is_empty() && part != "." && part != "..")
            && full_name.chars().all(|c| c.is_ascii_alphanumeric() || "-_./".contains(c));
        if !well_formed {
            return Err(format!("`{full_name}` is no repository name: use `owner/name`"));
        }
        let token = self
            .state
            .vault
            .open(&vault::git_token_slot(&caller.user.0, &name), &provider.token_sealed)
            .map_err(|_| format!("the token of git provider `{name}` cannot be read; store it again"))?;
        Ok((name, provider, token, full_name))
    }
}

/// `owner/name` of a repository's http(s) URL.
fn repository_path(url: &str) -> Option<String> {
    let parsed = reqwest::Url::parse(url).ok()?;
    // Azure DevOps names `organization/project/repository` `organization/project/_git/repository`.
    let path = parsed.path().trim_matches('/').trim_end_matches(".git").replacen("/_git/", "/", 1);
    (path.contains('/')).then_some(path)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn repository_paths_come_from_clone_urls() {
        assert_eq!(repository_path("https://github.com/acme/app.git").as_deref(), Some("acme/app"));
        assert_eq!(repository_path("https://gitlab.com/group/sub/app").as_deref(), Some("group/sub/app"));
        assert_eq!(repository_path("https://github.com/app.git"), None);
        assert_eq!(repository_path("https://dev.azure.com/acme/web/_git/site").as_deref(), Some("acme/web/site"));
    }

    #[test]
    fn every_tool_takes_a_repository_and_provider() {
        for tool in tools() {
            let props = &tool.input_schema["properties"];
            assert!(props["repository"].is_object() && props["provider"].is_object(), "{}", tool.name);
        }
    }
}
