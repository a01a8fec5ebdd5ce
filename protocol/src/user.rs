//! A user's own configuration: settings, LLM profiles and secrets, as the gateways keep them in
//! the `halyard_user` key-value bucket ([`crate::subjects::USER_BUCKET`]) and the agent runner
//! reads them when a run starts. One JSON entry per user and kind (`settings.<user>`,
//! `llm.<user>`, `secrets.<user>`, `git.<user>`, `mcp.<user>`, `hooks.<user>`), updated with the bucket's
//! revision check.
//!
//! Secret values and LLM API keys travel and rest only sealed (`v1.…`, ChaCha20-Poly1305 under
//! a key derived from the deployment secret, bound to owner and name); this crate carries the
//! sealed text and does no cryptography.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::UnixMillis;
use crate::event::{Budget, ConfirmationPolicy};

/// A user's defaults for new conversations.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct UserSettings {
    /// The LLM profile a conversation uses when its start names none (none: the operator's
    /// default).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub llm_profile: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub confirmation_policy: Option<ConfirmationPolicy>,
    /// Limits of a conversation whose start names none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub budget: Option<Budget>,
    /// LLM calls one run may make (none: the deployment's limit, which also caps this).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_iterations: Option<u32>,
    /// The sandbox spec of a conversation whose start names none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sandbox_spec: Option<String>,
    /// The agent a conversation has when its start names none (none: Halyard's own).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agent: Option<String>,
    #[serde(default)]
    pub updated_ms: UnixMillis,
}

/// One LLM profile: which server, which model, with which key.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct LlmProfile {
    /// `openai` (chat completions) or `anthropic` (Messages API).
    pub provider: String,
    /// Up to and including `/v1`.
    pub base_url: String,
    pub model: String,
    /// The sealed API key (none: the server wants none).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub api_key_sealed: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub temperature: Option<f32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_output_tokens: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub context_window: Option<u64>,
    /// The tools conversations of this profile offer the model (absent: `default`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tools: Option<ToolSet>,
    /// Other profiles of the same user that take a call this one's server cannot answer, in
    /// order (see `halyard_platform::llm::fallback`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub fallbacks: Vec<String>,
    /// `low`, `medium` or `high`: OpenAI-compatible reasoning models' `reasoning_effort`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reasoning_effort: Option<String>,
    /// Tokens of Anthropic's extended thinking per answer (at least 1,024).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub thinking_budget_tokens: Option<u64>,
    /// Whether the model reads images (absent: it does): when it does not, the browser's
    /// screenshots are not sent to it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub vision: Option<bool>,
    pub created_ms: UnixMillis,
    pub updated_ms: UnixMillis,
}

/// The built-in tools a conversation offers its model: one of OpenHands' presets by name
/// (`default`: `file_editor` for edits; `gpt5`: `apply_patch` instead, the format OpenAI's GPT-5
/// models are trained on), or a list of [`BUILT_IN_TOOLS`]. `finish` is always offered;
/// `load_skill` when the conversation has folder skills; `delegate` only while helpers may go
/// deeper; MCP servers' tools besides.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(untagged)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub enum ToolSet {
    Preset(String),
    Names(Vec<String>),
}

/// The built-in tools a [`ToolSet`] may name.
/// (`browser` stands for the ten `browser_*` tools.)
pub const BUILT_IN_TOOLS: &[&str] =
    &["terminal", "file_editor", "apply_patch", "glob", "grep", "execute_ipython_cell", "think", "task_tracker", "browser", "delegate"];

impl ToolSet {
    /// The built-in tools it offers (besides `finish` and `load_skill`), in the order offered;
    /// `Err` names what is wrong.
    pub fn names(&self) -> Result<Vec<&'static str>, String> {
        match self {
            Self::Preset(p) if p == "default" => {
                Ok(vec!["terminal", "file_editor", "think", "task_tracker", "glob", "grep", "execute_ipython_cell", "browser", "delegate"])
            }
            Self::Preset(p) if p == "gpt5" => {
                Ok(vec!["terminal", "apply_patch", "think", "task_tracker", "glob", "grep", "execute_ipython_cell", "browser", "delegate"])
            }
            Self::Preset(p) => Err(format!("unknown tool set {p:?}: use \"default\", \"gpt5\" or a list of tool names")),
            Self::Names(names) => {
                let mut out = Vec::new();
                for n in names {
                    match BUILT_IN_TOOLS.iter().find(|b| **b == n.as_str()) {
                        Some(b) if !out.contains(b) => out.push(*b),
                        Some(_) => {}
                        None => return Err(format!("unknown tool {n:?}: the built-in tools are {}", BUILT_IN_TOOLS.join(", "))),
                    }
                }
                Ok(out)
            }
        }
    }
}

impl Default for ToolSet {
    fn default() -> Self {
        Self::Preset("default".into())
    }
}

/// One model a provider offers.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ModelInfo {
    /// What a profile's `model` names.
    pub id: String,
    /// A name for people, where the provider gives one (Anthropic's `display_name`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub display_name: Option<String>,
}

/// All LLM profiles of one user, by name.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct UserLlmProfiles {
    #[serde(default)]
    pub profiles: BTreeMap<String, LlmProfile>,
}

/// One secret: what it is for and its sealed value.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SealedSecret {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    pub value_sealed: String,
    pub created_ms: UnixMillis,
    pub updated_ms: UnixMillis,
}

/// All secrets of one user, by name (the name of the environment variable the agent's shell
/// sees).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct UserSecrets {
    #[serde(default)]
    pub secrets: BTreeMap<String, SealedSecret>,
}

/// A git provider's access for one user: private repositories of `host` are cloned with its
/// token, which never stays in the sandbox.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct GitProvider {
    /// `github`, `gitlab` or `generic` (any git server speaking smart HTTP with basic auth).
    pub kind: String,
    /// `host` or `host:port` of the repositories' URLs.
    pub host: String,
    /// The user name sent with the token (`x-access-token` for GitHub, `oauth2` for GitLab).
    pub username: String,
    pub token_sealed: String,
    /// The host's REST API (absent: the kind's default for the host, e.g. `https://api.github.com`
    /// for github.com, `https://<host>/api/v3` for GitHub Enterprise, `https://<host>/api/v4`
    /// for GitLab).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub api_url: Option<String>,
    pub created_ms: UnixMillis,
    pub updated_ms: UnixMillis,
}

impl GitProvider {
    /// A `bitbucket` provider on a host of its own is a Bitbucket Data Center (REST 1.0 under
    /// `/rest/api/1.0`, repositories cloned from `/scm/`); on `bitbucket.org` it is Cloud.
    pub fn is_bitbucket_data_center(&self) -> bool {
        self.kind == "bitbucket"
            && match &self.api_url {
                Some(url) => url.trim_end_matches('/').ends_with("/rest/api/1.0"),
                None => self.host != "bitbucket.org",
            }
    }
}

/// How a conversation names organization `org`'s LLM profile `name`: `@org/name` (a user's own
/// profiles have no `@`, which names may not hold).
pub fn org_profile(org: &str, name: &str) -> String {
    format!("@{org}/{name}")
}

/// The organization and profile an [`org_profile`] name names.
pub fn parse_org_profile(s: &str) -> Option<(&str, &str)> {
    s.strip_prefix('@')?.split_once('/').filter(|(o, n)| !o.is_empty() && !n.is_empty())
}

/// Whose vault slot an organization's profile keys are sealed in: `@org` (no user is named so).
pub fn org_slot_owner(org: &str) -> String {
    format!("@{org}")
}

/// All git providers of one user, by name.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct UserGitProviders {
    #[serde(default)]
    pub providers: BTreeMap<String, GitProvider>,
}

/// A part of a configured value (an MCP server's header or variable): text as written, or a
/// `${NAME}` that stands for the owner's secret `NAME`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ValuePart<'a> {
    Text(&'a str),
    Secret(&'a str),
}

/// `value` cut at its `${NAME}` references. `Err` names what is wrong: a `${` without its `}`,
/// or a name that is not an environment variable's.
pub fn value_parts(value: &str) -> Result<Vec<ValuePart<'_>>, String> {
    let mut parts = Vec::new();
    let mut rest = value;
    while let Some(start) = rest.find("${") {
        let Some(len) = rest[start + 2..].find('}') else {
            return Err("`${` without its `}`; write `${NAME}` to use your secret NAME".into());
        };
        let name = &rest[start + 2..start + 2 + len];
        let valid = (1..=128).contains(&name.len())
            && name.chars().next().is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
            && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
        if !valid {
            return Err(format!("`${{{name}}}` is no secret name; secrets are named like environment variables"));
        }
        if start > 0 {
            parts.push(ValuePart::Text(&rest[..start]));
        }
        parts.push(ValuePart::Secret(name));
        rest = &rest[start + 3 + len..];
    }
    if !rest.is_empty() {
        parts.push(ValuePart::Text(rest));
    }
    Ok(parts)
}

/// The name Halyard's own MCP server (the gateway's `/mcp`) is offered under in every
/// conversation (its tools as `halyard__<tool>`); no user or operator server may take it.
pub const HALYARD_MCP_SERVER: &str = "halyard";

/// One MCP server whose tools the agent is offered: a command run in the conversation's
/// sandbox that speaks MCP on its standard input and output, or a streamable-HTTP endpoint the
/// agent runner calls. In `env` and `headers`, `${NAME}` stands for the owner's secret `NAME`
/// (filled in by the agent runner, so the stored configuration holds no credential).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "transport", rename_all = "snake_case")]
pub enum McpServerConfig {
    Stdio {
        /// A shell command line, run in the workspace.
        command: String,
        #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
        env: BTreeMap<String, String>,
    },
    Http {
        url: String,
        #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
        headers: BTreeMap<String, String>,
    },
}

impl McpServerConfig {
    /// `stdio` or `http`.
    pub fn transport(&self) -> &'static str {
        match self {
            Self::Stdio { .. } => "stdio",
            Self::Http { .. } => "http",
        }
    }
}

/// One of a user's MCP servers.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct McpServer {
    #[serde(flatten)]
    pub config: McpServerConfig,
    /// Whether the agent is offered its tools.
    #[serde(default = "enabled")]
    pub enabled: bool,
    #[serde(default)]
    pub updated_ms: UnixMillis,
}

fn enabled() -> bool {
    true
}

/// All MCP servers of one user, by name.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct UserMcpServers {
    #[serde(default)]
    pub servers: BTreeMap<String, McpServer>,
}

/// A user's OAuth sign-in to one of their `http` MCP servers (the MCP authorization spec):
/// who issued it, for which URL, and the client and tokens, sealed. A server whose URL changed
/// since is not signed in (its tokens are never sent elsewhere).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct McpSignIn {
    /// The server's URL when it was signed in to.
    pub url: String,
    /// The authorization server that issued the tokens.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub issuer: Option<String>,
    /// The client registration and the tokens (the MCP SDK's stored credentials, with the
    /// client's secret where it has one, JSON), sealed.
    pub credentials_sealed: String,
    /// The scopes granted.
    #[serde(default)]
    pub scopes: Vec<String>,
    /// When the access token expires (absent: the issuer did not say).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expires_ms: Option<UnixMillis>,
    /// When the user signed in.
    pub signed_in_ms: UnixMillis,
    /// When the tokens were last refreshed (the sign-in's time until then).
    pub refreshed_ms: UnixMillis,
}

/// One consent to a repository's hooks file: its commands may run in this user's conversations
/// on `repository` (empty: a workspace with none) while the file's SHA-256 is `sha256`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct HookConsent {
    pub repository: String,
    pub sha256: String,
    /// When it was given (Unix milliseconds).
    pub at_ms: UnixMillis,
}

/// A user's consents to repository hooks (`hooks.<user>`), newest last; the oldest go past
/// [`HookConsents::MAX`].
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct HookConsents {
    #[serde(default)]
    pub consents: Vec<HookConsent>,
}

impl HookConsents {
    pub const MAX: usize = 500;

    pub fn allows(&self, repository: &str, sha256: &str) -> bool {
        self.consents.iter().any(|c| c.repository == repository && c.sha256 == sha256)
    }

    /// Adds a consent (once), dropping the oldest past [`Self::MAX`].
    pub fn allow(&mut self, repository: &str, sha256: &str, at_ms: UnixMillis) {
        self.consents.retain(|c| !(c.repository == repository && c.sha256 == sha256));
        self.consents.push(HookConsent { repository: repository.to_owned(), sha256: sha256.to_owned(), at_ms });
        let over = self.consents.len().saturating_sub(Self::MAX);
        self.consents.drain(..over);
    }
}

#[cfg(test)]
mod tests {
    use super::ValuePart::{Secret, Text};
    use super::value_parts;

    #[test]
    fn values_are_cut_at_their_secret_references() {
        assert_eq!(value_parts("Bearer ${TOKEN}").unwrap(), [Text("Bearer "), Secret("TOKEN")]);
        assert_eq!(value_parts("${A}-${B}").unwrap(), [Secret("A"), Text("-"), Secret("B")]);
        assert_eq!(value_parts("no $ here").unwrap(), [Text("no $ here")]);
        assert!(value_parts("${TOKEN").unwrap_err().contains("without its"));
        assert!(value_parts("${1X}").unwrap_err().contains("no secret name"));
    }
}
