//! The conversation's MCP servers, offered to a third-party agent as one MCP server of
//! Halyard's: `<relay>/mcp` on the sandbox's loopback (the LLM relay's listener, the run's token
//! as its bearer), named in `session/new` for agents that take HTTP MCP servers. Its tools are
//! the conversation's ([`McpHub`], as Halyard's own agent gets them: `<server>__<tool>`); a call
//! comes out through the relay and is made here, so the servers' addresses and the secrets in
//! their headers or environments never enter the sandbox.
//!
//! The server is the official SDK's (`rmcp`) streamable HTTP server, stateless and answering in
//! JSON; each relayed request is handed to it as an HTTP request.

use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use halyard_platform::relay::Answer;
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, Implementation, ListToolsResult, PaginatedRequestParams,
    ServerCapabilities, ServerConfig,
};
use rmcp::service::{RequestContext, RoleServer};
use rmcp::transport::streamable_http_server::session::never::NeverSessionManager;
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};
use rmcp::{ErrorData, ServerHandler};
use serde_json::{Value, json};

use crate::tools::mcp::McpHub;

/// The path under the relay, and the server's name in `session/new`.
pub const PATH: &str = "mcp";
pub const NAME: &str = "halyard";

/// The tools, for the SDK's server.
#[derive(Clone)]
struct Offered {
    hub: Arc<McpHub>,
    timeout: Duration,
}

impl ServerHandler for Offered {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
            .with_server_info(Implementation::new(NAME, env!("CARGO_PKG_VERSION")))
            .with_instructions("The MCP servers of this conversation, reached through Halyard.")
    }

    async fn list_tools(&self, _: Option<PaginatedRequestParams>, _: RequestContext<RoleServer>) -> Result<ListToolsResult, ErrorData> {
        Ok(ListToolsResult::with_all_items(self.hub.tools()))
    }

    async fn call_tool(&self, request: CallToolRequestParams, _: RequestContext<RoleServer>) -> Result<CallToolResponse, ErrorData> {
        let args = request.arguments.map_or(Value::Null, Value::Object);
        // The server's result as it gave it (structured content and all); a failure to reach
        // it, in words for the model.
        Ok(match self.hub.call_whole(&request.name, &args, self.timeout).await {
            Ok(result) => result,
            Err(message) => CallToolResult::error(vec![ContentBlock::text(message)]),
        }
        .into())
    }
}

/// The MCP server of one run.
#[derive(Clone)]
pub struct Server(Arc<StreamableHttpService<Offered, NeverSessionManager>>);

impl Server {
    /// Serves `hub`'s tools, each call given `timeout`.
    pub fn new(hub: Arc<McpHub>, timeout: Duration) -> Self {
        let offered = Offered { hub, timeout };
        let config = StreamableHttpServerConfig::default()
            .with_legacy_session_mode(false)
            .with_json_response(true)
            // Only the agent reaches it, through the relay, with the run's token: the Host
            // header it sends names the relay's loopback address.
            .disable_allowed_hosts();
        Self(Arc::new(StreamableHttpService::new(move || Ok(offered.clone()), Arc::new(NeverSessionManager::default()), config)))
    }

    /// How `session/new` names it: at `relay` (the relay's base URL), with `token`.
    pub fn descriptor(relay: &str, token: &str) -> Value {
        json!({"type": "http", "name": NAME, "url": format!("{}/{PATH}", relay.trim_end_matches('/')),
               "headers": [{"name": "Authorization", "value": format!("Bearer {token}")}]})
    }

    /// Answers one relayed request (its token already checked): `method`, `headers`, `body`.
    pub async fn answer(&self, method: &str, headers: &[(String, String)], body: bytes::Bytes) -> Answer {
        let mut builder = axum::http::Request::builder().method(method).uri(format!("/{PATH}"));
        for (name, value) in headers {
            builder = builder.header(name, value);
        }
        let Ok(http) = builder.body(axum::body::Body::from(body)) else {
            return Answer { status: 400, headers: Vec::new(), body: futures::stream::empty().boxed() };
        };
        let response = self.0.handle(http).await;
        let status = response.status().as_u16();
        let headers = response
            .headers()
            .iter()
            .filter(|(n, _)| matches!(n.as_str(), "content-type" | "mcp-session-id" | "allow"))
            .filter_map(|(n, v)| Some((n.as_str().to_owned(), v.to_str().ok()?.to_owned())))
            .collect();
        let body = axum::body::Body::new(response.into_body()).into_data_stream().map(|c| c.map_err(|e| e.to_string())).boxed();
        Answer { status, headers, body }
    }
}
