//! Which MCP servers every conversation gets, where they may be, and where Halyard's own is.

use serde::{Deserialize, Serialize};

use crate::settings::set;
use crate::settings::{Setting, network_classes};

/// MCP servers.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct McpConfig {
    /// The operator's servers, offered in every conversation next to the user's own (a user's
    /// server of the same name takes its place).
    pub servers: std::collections::BTreeMap<String, halyard_protocol::user::McpServerConfig>,
    /// Destinations otherwise refused for users' streamable-HTTP servers: any of `loopback`,
    /// `private`, `link-local`.
    pub allow: Vec<String>,
    /// Halyard's own MCP server (the gateway's `/mcp`) as agent runners reach it; offered in
    /// every conversation as `halyard`. Empty: the gateway's `http_addr`; `off`: not offered.
    pub halyard_url: String,
}

/// `HALYARD_*` settings of MCP.
pub(crate) const SETTINGS: &[Setting<McpConfig>] = &[
    set!("MCP_ALLOW", "(none)", "destination classes users' http MCP servers may point at: `loopback`, `private`, `link-local`", |c, v| {
        c.allow = network_classes(v)?
    }),
    set!(
        "MCP_URL",
        "from `HALYARD_HTTP_ADDR`: `http://<it>/mcp`",
        "Halyard's own MCP server as agent runners reach it (a gateway's `/mcp`); `off`: not offered",
        |c, v| c.halyard_url = v.to_owned()
    ),
    set!(
        "MCP_SERVERS",
        "(none)",
        "the operator's MCP servers, offered in every conversation: a JSON object by name, e.g. `{\"time\": {\"transport\": \"stdio\", \"command\": \"mcp-server-time\"}}` (`[mcp.servers]` in the TOML file)",
        |c, v| c.servers = serde_json::from_str(v).map_err(|e| format!("expected a JSON object of servers by name ({e})"))?
    ),
];
