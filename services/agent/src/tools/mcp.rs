//! MCP servers' tools for the agent. A conversation's servers are the operator's
//! (`[mcp.servers]`) and its owner's own (`mcp.<user>` in the user bucket, in place of an
//! operator's server of the same name). Each is reached with the official SDK (`rmcp`): a
//! `stdio` server runs in the conversation's sandbox, spoken to through the executor's
//! `/mcp/stdio` WebSocket; an `http` server is called from here over streamable HTTP.
//!
//! The connections live with the conversation ([`McpHub`], kept by its actor between runs)
//! and are made again when a run finds the configuration or the owner's secrets changed, or a
//! connection gone (a paused sandbox takes its stdio servers with it). Halyard's own server
//! (the gateway's `/mcp`, see [`halyard_server`]) is offered in every conversation too. Their tools are offered
//! as `<server>__<tool>`; a server that cannot be reached offers nothing, and says why in the
//! `mcp_servers` event: it never fails the run.
//!
//! An organization's servers (defined by its admins) are filled from the organization's secrets
//! only ([`OrgServers`]): a member's own secrets never reach a server the member did not define,
//! in a header or in a stdio server's environment.
//!
//! An `http` server its owner (or, for an organization's, one of its admins) signed in to with
//! OAuth ([`SignIns`], made by the gateway's `…/mcp-servers/{name}/sign-in`) is called with the
//! MCP SDK's authorized client: each request
//! carries the access token, refreshed (and stored again, sealed) when it is about to expire or
//! the server refuses it. A server that wants a sign-in there is none for offers nothing, and the
//! run records `mcp_auth_required` ([`McpHub::wants_sign_in`]) and goes on.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::hash::{Hash, Hasher};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::{SinkExt, StreamExt};
use halyard_platform::executor_client::ExecutorClient;
use halyard_platform::mcp_oauth::{self, AuthClient, AuthError, SignInStore};
use halyard_platform::net;
use halyard_protocol::event::McpServerStatus;
use halyard_protocol::executor::McpStdioSpawn;
use halyard_protocol::user::{HALYARD_MCP_SERVER, McpServerConfig, UserMcpServers, ValuePart};
use halyard_protocol::{ConversationId, UserId, subjects};
use rmcp::model::{CallToolRequestParams, CallToolResult, ContentBlock, ResourceContents, Tool};
use rmcp::service::{RoleClient, RunningService, RxJsonRpcMessage, TxJsonRpcMessage};
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use rmcp::{ServiceExt, transport::IntoTransport};
use serde_json::{Value, json};
use tokio_tungstenite::tungstenite::{self, Message};

use crate::ctx::Ctx;
use crate::tools::ToolOutcome;
pub use crate::tools::mcp_sign_in::SignIns;
use crate::tools::mcp_sign_in::{Unreachable, wants_sign_in};

/// How long a server has to start and list its tools.
pub(crate) const CONNECT_TIMEOUT: Duration = Duration::from_secs(30);
/// Longest tool name providers accept.
const MAX_TOOL_NAME: usize = 64;
/// Tool results longer than this are cut (the rest is noise to the model).
const MAX_RESULT_CHARS: usize = 30_000;
/// A hub with an unreachable server tries it again after this long (at a run's start).
const RETRY_AFTER: Duration = Duration::from_secs(300);

/// The organization's servers of a run (by name: those of the organization's the owner did not
/// replace with one of their own), and the organization's secrets they are filled from.
#[derive(Clone, Debug, Default)]
pub struct OrgServers {
    pub names: BTreeSet<String>,
    pub secrets: BTreeMap<String, String>,
}

impl OrgServers {
    /// The secrets server `name` is filled from: the organization's for its servers, the
    /// owner's for the rest.
    fn secrets_for<'a>(&'a self, name: &str, owners: &'a BTreeMap<String, String>) -> &'a BTreeMap<String, String> {
        if self.names.contains(name) { &self.secrets } else { owners }
    }
}

/// The MCP servers of one conversation, connected.
#[derive(Default)]
pub struct McpHub {
    /// What the connections were made from (configuration and filled-in secrets), hashed.
    fingerprint: u64,
    /// When the connections were made (none: never).
    connected_at: Option<std::time::Instant>,
    servers: Vec<Server>,
    /// Offered name → (server index, the server's own name of the tool).
    by_name: HashMap<String, (usize, String)>,
    /// Each server as found when connecting.
    pub status: Vec<McpServerStatus>,
    /// The servers that want their owner to sign in (they offer nothing until then).
    pub wants_sign_in: Vec<String>,
}

struct Server {
    client: RunningService<RoleClient, ()>,
    tools: Vec<(String, Tool)>,
}

impl McpHub {
    /// Whether this hub still serves `configs` (with `secrets`): all its connections live, and
    /// a server that could not be reached was tried lately.
    pub fn serves(
        &self,
        configs: &BTreeMap<String, McpServerConfig>,
        secrets: &BTreeMap<String, String>,
        org: &OrgServers,
        sign_ins: &SignIns,
    ) -> bool {
        let failed = self.status.iter().any(|s| s.error.is_some());
        let lately = self.connected_at.is_some_and(|t| t.elapsed() < RETRY_AFTER);
        self.fingerprint == fingerprint(configs, secrets, org, sign_ins)
            && self.servers.iter().all(|s| !s.client.is_closed())
            && (!failed || lately)
    }

    /// Connects to every server of `configs` at once; a failing one is recorded in `status`.
    /// An `http` server other than the operator's (`trusted`) must resolve to addresses
    /// `allow` permits, as users' webhooks must.
    pub async fn connect(
        configs: BTreeMap<String, McpServerConfig>,
        (secrets, org, sign_ins): (&BTreeMap<String, String>, &OrgServers, &SignIns),
        exec: &ExecutorClient,
        (trusted, allow): (&BTreeMap<String, McpServerConfig>, &[String]),
    ) -> Self {
        let fingerprint = fingerprint(&configs, secrets, org, sign_ins);
        let attempts = configs.iter().map(|(name, config)| async move {
            let checked = match config {
                McpServerConfig::Http { url, .. } if trusted.get(name) != Some(config) => {
                    net::check_destination(url, allow).await.map(|_| ()).map_err(|e| format!("{url}: {e}"))
                }
                _ => Ok(()),
            };
            let users = trusted.get(name) != Some(config);
            let secrets = org.secrets_for(name, secrets);
            let signed_in = match config {
                McpServerConfig::Http { url, .. } if users => sign_ins.store(name, url),
                _ => None,
            };
            let connect = async {
                checked?;
                connect_one(config, secrets, exec, users.then_some(allow), signed_in).await
            };
            let connected = tokio::time::timeout(CONNECT_TIMEOUT, connect)
                .await
                .unwrap_or_else(|_| Err(format!("it did not answer within {} s", CONNECT_TIMEOUT.as_secs()).into()));
            (name, config, connected)
        });
        let mut hub = Self { fingerprint, connected_at: Some(std::time::Instant::now()), ..Default::default() };
        for (name, config, connected) in futures::future::join_all(attempts).await {
            let mut status = McpServerStatus { name: name.clone(), transport: config.transport().into(), tools: Vec::new(), error: None };
            match connected {
                Ok((client, tools)) => {
                    let index = hub.servers.len();
                    let mut offered = Vec::new();
                    for tool in tools {
                        let exposed = exposed_name(name, &tool.name);
                        if hub.by_name.contains_key(&exposed) {
                            continue;
                        }
                        hub.by_name.insert(exposed.clone(), (index, tool.name.to_string()));
                        status.tools.push(exposed.clone());
                        offered.push((exposed, tool));
                    }
                    hub.servers.push(Server { client, tools: offered });
                }
                Err(e) => {
                    tracing::warn!(server = %name, error = %e.why, "MCP server unavailable");
                    if e.wants_sign_in {
                        hub.wants_sign_in.push(name.clone());
                    }
                    status.error = Some(e.why);
                }
            }
            hub.status.push(status);
        }
        hub
    }

    /// The servers' tools in the chat-completions `tools` format.
    pub fn specs(&self) -> Vec<Value> {
        self.servers
            .iter()
            .flat_map(|s| &s.tools)
            .map(|(name, tool)| {
                json!({"type": "function", "function": {
                    "name": name,
                    "description": tool.description.as_deref().unwrap_or_default(),
                    "parameters": Value::Object((*tool.input_schema).clone()),
                }})
            })
            .collect()
    }

    /// The servers' tools as MCP tools under their offered names (`<server>__<tool>`), for an
    /// agent that is offered them over MCP ([`crate::acp::mcp`]).
    pub fn tools(&self) -> Vec<Tool> {
        let renamed = |(name, tool): &(String, Tool)| {
            let mut tool = tool.clone();
            tool.name = name.clone().into();
            tool
        };
        self.servers.iter().flat_map(|s| &s.tools).map(renamed).collect()
    }

    /// Whether the servers offer any tool.
    pub fn offers_any(&self) -> bool {
        !self.by_name.is_empty()
    }

    /// Whether `tool` is one of the servers' tools.
    pub fn offers(&self, tool: &str) -> bool {
        self.by_name.contains_key(tool)
    }

    /// Whether the server of `tool` says it only reads (its `readOnlyHint` annotation): the
    /// run may call it beside other such calls.
    pub fn reads_only(&self, tool: &str) -> bool {
        let Some((index, _)) = self.by_name.get(tool) else { return false };
        self.servers[*index]
            .tools
            .iter()
            .find(|(exposed, _)| exposed == tool)
            .and_then(|(_, t)| t.annotations.as_ref())
            .and_then(|a| a.read_only_hint)
            .unwrap_or(false)
    }

    /// Calls `tool` with `args`; the result (or the failure) as an observation.
    pub async fn call(&self, tool: &str, args: &Value, timeout: Duration) -> ToolOutcome {
        match self.call_whole(tool, args, timeout).await {
            Err(message) => observation(message, true),
            Ok(result) => {
                let mut text = result.content.iter().map(content_text).collect::<Vec<_>>().join("\n");
                if text.is_empty() {
                    text = result.structured_content.map(|v| v.to_string()).unwrap_or_default();
                }
                if text.chars().count() > MAX_RESULT_CHARS {
                    text = text.chars().take(MAX_RESULT_CHARS).collect::<String>() + "\n[The result was cut here.]";
                }
                observation(text, result.is_error.unwrap_or(false))
            }
        }
    }

    /// Calls `tool` with `args`: the server's result as it gave it, or why there is none.
    pub async fn call_whole(&self, tool: &str, args: &Value, timeout: Duration) -> Result<CallToolResult, String> {
        let Some((index, own_name)) = self.by_name.get(tool) else {
            return Err(format!("There is no MCP tool named `{tool}`."));
        };
        let arguments = match args {
            Value::Object(map) => {
                let mut map = map.clone();
                // The risk argument is ours, not the server's.
                map.remove("security_risk");
                Some(map)
            }
            Value::Null => None,
            _ => return Err("The arguments of an MCP tool must be a JSON object.".into()),
        };
        let mut params = CallToolRequestParams::new(own_name.clone());
        params.arguments = arguments;
        match tokio::time::timeout(timeout, self.servers[*index].client.call_tool(params)).await {
            Err(_) => Err(format!("The MCP tool `{tool}` did not answer within {} s.", timeout.as_secs())),
            Ok(Err(e)) => Err(format!("The MCP tool `{tool}` failed: {e}")),
            Ok(Ok(result)) => Ok(result),
        }
    }
}

fn observation(content: String, is_error: bool) -> ToolOutcome {
    ToolOutcome::Observation { content, exit_code: None, is_error }
}

fn content_text(block: &ContentBlock) -> String {
    match block {
        ContentBlock::Text(t) => t.text.clone(),
        ContentBlock::Image(i) => format!("[image: {}]", i.mime_type),
        ContentBlock::Audio(a) => format!("[audio: {}]", a.mime_type),
        ContentBlock::Resource(r) => match &r.resource {
            ResourceContents::TextResourceContents { uri, text, .. } => format!("[{uri}]\n{text}"),
            ResourceContents::BlobResourceContents { uri, .. } => format!("[binary resource {uri}]"),
            #[allow(unreachable_patterns)]
            _ => "[resource]".into(),
        },
        ContentBlock::ResourceLink(link) => format!("[resource {}]", link.uri),
        #[allow(unreachable_patterns)]
        _ => "[content]".into(),
    }
}

/// `<server>__<tool>`, in the characters and length providers accept.
fn exposed_name(server: &str, tool: &str) -> String {
    let clean = |s: &str| s.chars().map(|c| if c.is_ascii_alphanumeric() || c == '_' || c == '-' { c } else { '_' }).collect::<String>();
    let mut name = format!("{}__{}", clean(server), clean(tool));
    name.truncate(MAX_TOOL_NAME);
    name
}

fn fingerprint(
    configs: &BTreeMap<String, McpServerConfig>,
    secrets: &BTreeMap<String, String>,
    org: &OrgServers,
    sign_ins: &SignIns,
) -> u64 {
    let mut h = std::collections::hash_map::DefaultHasher::new();
    serde_json::to_string(configs).unwrap_or_default().hash(&mut h);
    secrets.hash(&mut h);
    org.names.hash(&mut h);
    org.secrets.hash(&mut h);
    // A sign-in made or removed since (not a refresh: the connection refreshes its own).
    for (name, (_, record)) in &sign_ins.records {
        (name, record.signed_in_ms).hash(&mut h);
    }
    h.finish()
}

/// `text` with each `${NAME}` replaced by the secret `NAME`.
fn fill(text: &str, secrets: &BTreeMap<String, String>, what: &str) -> Result<String, String> {
    let parts = halyard_protocol::user::value_parts(text).map_err(|e| format!("{what}: {e}"))?;
    let mut out = String::new();
    for part in parts {
        match part {
            ValuePart::Text(t) => out.push_str(t),
            ValuePart::Secret(name) => {
                out.push_str(secrets.get(name).ok_or_else(|| format!("{what} names the secret `{name}`, which you do not have"))?)
            }
        }
    }
    Ok(out)
}

/// The client http servers are called with: for a user's server (`allow`), the outbound client
/// that checks every address it connects to ([`halyard_platform::outbound`]); for the operator's,
/// a plain one. Neither follows a redirect.
fn http_client(allow: Option<&[String]>) -> Result<reqwest::Client, String> {
    static USERS: std::sync::OnceLock<reqwest::Client> = std::sync::OnceLock::new();
    static OPERATORS: std::sync::OnceLock<reqwest::Client> = std::sync::OnceLock::new();
    let (cell, builder) = match allow {
        Some(allow) => (&USERS, halyard_platform::outbound::builder(allow)),
        None => (&OPERATORS, reqwest::Client::builder().redirect(reqwest::redirect::Policy::none())),
    };
    if let Some(c) = cell.get() {
        return Ok(c.clone());
    }
    let built = builder.build().map_err(|e| e.to_string())?;
    Ok(cell.get_or_init(|| built).clone())
}

type Connected = (RunningService<RoleClient, ()>, Vec<Tool>);

/// Connects to one server. `signed_in`: the owner's OAuth sign-in to it (an `http` server of
/// theirs), whose tokens its requests carry.
pub(crate) async fn connect_one(
    config: &McpServerConfig,
    secrets: &BTreeMap<String, String>,
    exec: &ExecutorClient,
    allow: Option<&[String]>,
    signed_in: Option<SignInStore>,
) -> Result<Connected, Unreachable> {
    match config {
        McpServerConfig::Http { url, headers } => {
            let mut custom = HashMap::new();
            for (name, value) in headers {
                let value = fill(value, secrets, &format!("header `{name}`"))?;
                let name = reqwest::header::HeaderName::from_bytes(name.as_bytes()).map_err(|_| format!("`{name}` is no header name"))?;
                let value = reqwest::header::HeaderValue::from_str(&value)
                    .map_err(|_| format!("header `{name}` has a character a header cannot hold"))?;
                custom.insert(name, value);
            }
            let config = StreamableHttpClientTransportConfig::with_uri(url.as_str()).custom_headers(custom);
            let refused = |e: &dyn std::fmt::Display, wants_sign_in: bool| {
                let why = if wants_sign_in {
                    format!("{url} wants you to sign in: Settings, MCP servers, Sign in")
                } else {
                    format!("{url}: {e}")
                };
                Unreachable { why, wants_sign_in }
            };
            // (The SDK knows a 401 under its own error's layers.)
            let not_served = |e: rmcp::service::ClientInitializeError| {
                let wants = e.is_authorization_required();
                refused(&e, wants)
            };
            let client = match signed_in {
                Some(store) => {
                    let by_sdk = |e: AuthError| refused(&e, wants_sign_in(&e));
                    let Some(manager) = mcp_oauth::signed_in(store, allow.unwrap_or_default()).await.map_err(by_sdk)? else {
                        return Err(by_sdk(AuthError::AuthorizationRequired));
                    };
                    let transport = StreamableHttpClientTransport::with_client(AuthClient::new(http_client(allow)?, manager), config);
                    ().serve(transport).await.map_err(not_served)?
                }
                None => {
                    let transport = StreamableHttpClientTransport::with_client(http_client(allow)?, config);
                    ().serve(transport).await.map_err(not_served)?
                }
            };
            Ok(list(client).await?)
        }
        McpServerConfig::Stdio { command, env } => {
            let mut all = secrets.clone();
            for (name, value) in env {
                all.insert(name.clone(), fill(value, secrets, &format!("variable `{name}`"))?);
            }
            let closed = Arc::new(Mutex::new(None::<String>));
            let transport = stdio_socket(exec, McpStdioSpawn { command: command.clone(), env: all }, closed.clone()).await?;
            let said = |e: String| closed.lock().ok().and_then(|c| c.clone()).unwrap_or(e);
            let client = ().serve(transport).await.map_err(|e| said(e.to_string()))?;
            Ok(list(client).await.map_err(said)?)
        }
    }
}

async fn list(client: RunningService<RoleClient, ()>) -> Result<Connected, String> {
    let tools = client.list_all_tools().await.map_err(|e| format!("listing its tools failed: {e}"))?;
    Ok((client, tools))
}

/// The executor's `/mcp/stdio` socket, with `spawn` sent, as an MCP transport. The reason the
/// socket closes with (the server's last words) is left in `closed`.
async fn stdio_socket(
    exec: &ExecutorClient,
    spawn: McpStdioSpawn,
    closed: Arc<Mutex<Option<String>>>,
) -> Result<impl rmcp::transport::Transport<RoleClient> + use<>, String> {
    let mut socket = exec.socket("/mcp/stdio").await.map_err(|e| format!("the sandbox refused: {e}"))?;
    let first = serde_json::to_string(&spawn).map_err(|e| e.to_string())?;
    socket.send(Message::Text(first.into())).await.map_err(|e| format!("the sandbox refused: {e}"))?;
    let (sink, stream) = socket.split();
    let sink = sink.with(|message: TxJsonRpcMessage<RoleClient>| async move {
        serde_json::to_string(&message).map(|text| Message::Text(text.into())).map_err(|e| tungstenite::Error::Io(std::io::Error::other(e)))
    });
    let stream = stream.filter_map(move |frame| {
        let closed = closed.clone();
        async move {
            match frame {
                Ok(Message::Text(text)) => match serde_json::from_str::<RxJsonRpcMessage<RoleClient>>(&text) {
                    Ok(message) => Some(message),
                    Err(_) => {
                        // Servers that log to standard output: not a message, not fatal.
                        tracing::debug!(line = %text.chars().take(200).collect::<String>(), "MCP server wrote a non-message line");
                        None
                    }
                },
                Ok(Message::Close(Some(frame))) => {
                    if let Ok(mut c) = closed.lock() {
                        *c = Some(frame.reason.to_string());
                    }
                    None
                }
                _ => None,
            }
        }
    });
    Ok((Box::pin(sink), Box::pin(stream)).into_transport())
}

/// Halyard's own MCP server as `conversation` reaches it (`None` where the operator turned it
/// off): the gateway's `/mcp`, with the conversation's key, which only agent runners can make.
pub fn halyard_server(config: &halyard_platform::Config, conversation: ConversationId) -> Option<(String, McpServerConfig)> {
    let url = config.mcp.halyard_url.trim();
    if url.is_empty() || url == "off" {
        return None;
    }
    let key = halyard_platform::keys::mcp_key(&config.secret, conversation);
    let headers = BTreeMap::from([("Authorization".to_owned(), format!("Bearer {key}"))]);
    Some((HALYARD_MCP_SERVER.to_owned(), McpServerConfig::Http { url: url.to_owned(), headers }))
}

/// The servers of `owner`'s conversations: the operator's, and theirs in place of one of the
/// same name (disabled ones left out).
pub async fn configs(ctx: &Ctx, owner: &UserId) -> Result<BTreeMap<String, McpServerConfig>, String> {
    let stored: UserMcpServers = match ctx.user_kv.get(subjects::user_mcp_key(owner)).await {
        Ok(Some(bytes)) => serde_json::from_slice(&bytes).map_err(|e| format!("your MCP servers: {e}"))?,
        Ok(None) => UserMcpServers::default(),
        Err(e) => return Err(format!("your MCP servers could not be read: {e}")),
    };
    Ok(configs_of(ctx, UserMcpServers::default(), stored))
}

/// The names of the organization's servers (`org`) a run connects: those the owner's own
/// (`stored`) do not replace, and enabled.
pub fn org_names(org: &UserMcpServers, stored: &UserMcpServers) -> BTreeSet<String> {
    org.servers.iter().filter(|(name, s)| s.enabled && !stored.servers.contains_key(*name)).map(|(name, _)| name.clone()).collect()
}

/// The MCP servers a run may connect: the operator's, then the organization's (`org`), then
/// the owner's own (`stored`), each over the one before by name (a disabled one removes it).
pub fn configs_of(ctx: &Ctx, org: UserMcpServers, stored: UserMcpServers) -> BTreeMap<String, McpServerConfig> {
    let mut configs = ctx.config.mcp.servers.clone();
    for (name, server) in org.servers.into_iter().chain(stored.servers) {
        if server.enabled {
            configs.insert(name, server.config);
        } else {
            configs.remove(&name);
        }
    }
    configs
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_namespaced_and_kept_to_what_providers_accept() {
        assert_eq!(exposed_name("time", "get_current_time"), "time__get_current_time");
        assert_eq!(exposed_name("my.server", "do it"), "my_server__do_it");
        assert_eq!(exposed_name(&"s".repeat(40), &"t".repeat(40)).len(), MAX_TOOL_NAME);
    }

    #[test]
    fn secrets_are_filled_in_and_a_missing_one_is_named() {
        let secrets = BTreeMap::from([("TOKEN".to_owned(), "abc".to_owned())]);
        assert_eq!(fill("Bearer ${TOKEN}", &secrets, "h").unwrap(), "Bearer abc");
        assert_eq!(fill("${TOKEN}-${TOKEN}", &secrets, "h").unwrap(), "abc-abc");
        assert_eq!(fill("no $ here", &secrets, "h").unwrap(), "no $ here");
        assert!(fill("${NOPE}", &secrets, "header `X`").unwrap_err().contains("`NOPE`"));
    }
}
