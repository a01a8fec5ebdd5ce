//! The agents a conversation can have: Halyard's own (`halyard`, the default) and third-party
//! agents that speak the Agent Client Protocol (ACP) on stdio, run in the sandbox and driven by
//! the agent runner. Each third-party kind names its launcher (installed under the deployment's
//! agents directory by `infra/install-agents.sh`), the LLM wires it can speak, and how its
//! environment points it at the LLM relay (`${HALYARD_LLM_BASE}`, filled in by the executor)
//! with a per-run token that is worth nothing outside that relay.
//!
//! Beside them, agents a deployment's administrators register (`agents` in the user bucket) or
//! an organization does for its conversations (`orgagents.<org>`, named `@<org>/<name>`): any
//! program that speaks ACP on stdio, a command line and an environment ([`CustomAgent`]). Either
//! way a run starts what [`Launch`] says.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// Halyard's own agent.
pub const HALYARD: &str = "halyard";

/// A third-party agent kind.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AgentKind {
    pub name: &'static str,
    pub title: &'static str,
    /// The npm packages it is installed from (pinned by the install script).
    pub packages: &'static [&'static str],
    /// Its launcher, relative to the agents directory.
    pub launcher: &'static str,
    /// The LLM profile providers it can be pointed at.
    pub wires: &'static [&'static str],
    /// The ACP authentication method that has it read its key from its environment, where it
    /// wants one chosen (`authenticate` after `initialize`).
    pub auth: Option<&'static str>,
    /// The subscription login a user may hand to it (what the credential is), where Halyard
    /// can use one: see [`AgentLogin`].
    pub login: Option<&'static str>,
}

/// The third-party agents Halyard knows how to run.
pub const KINDS: &[AgentKind] = &[
    AgentKind {
        name: "claude-code",
        title: "Claude Code",
        packages: &["@zed-industries/claude-agent-acp", "@anthropic-ai/claude-code"],
        launcher: "bin/claude-agent-acp",
        wires: &["anthropic"],
        auth: None,
        login: Some("the OAuth token of a Claude subscription (`claude setup-token` prints one)"),
    },
    AgentKind {
        name: "codex",
        title: "Codex",
        packages: &["@zed-industries/codex-acp"],
        launcher: "bin/codex-acp",
        wires: &["openai-responses"],
        auth: None,
        login: None,
    },
    // Its key from GEMINI_API_KEY once told so.
    AgentKind {
        name: "gemini",
        title: "Gemini CLI",
        packages: &["@google/gemini-cli"],
        launcher: "bin/gemini-acp",
        wires: &["gemini"],
        auth: Some("gemini-api-key"),
        login: None,
    },
    // Its `openai` provider speaks the Responses API.
    AgentKind {
        name: "opencode",
        title: "OpenCode",
        packages: &["opencode-ai"],
        launcher: "bin/opencode-acp",
        wires: &["openai-responses"],
        auth: None,
        login: None,
    },
];

/// The kind named `name` (`None`: Halyard's own, or no such kind).
pub fn kind(name: &str) -> Option<&'static AgentKind> {
    KINDS.iter().find(|k| k.name == name)
}

/// The names a conversation's `agent` may take.
pub fn names() -> Vec<&'static str> {
    std::iter::once(HALYARD).chain(KINDS.iter().map(|k| k.name)).collect()
}

/// How to start one agent in a sandbox, whichever kind it is.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Launch {
    /// What the conversation's `agent` names it by.
    pub name: String,
    pub title: String,
    /// A shell command line, run in the workspace as the sandbox's user.
    pub command: String,
    /// Its environment (`${HALYARD_LLM_BASE}` is the executor's to fill in).
    pub env: BTreeMap<String, String>,
    /// The LLM profile providers it can be pointed at.
    pub wires: Vec<String>,
    /// The ACP authentication method to choose after `initialize`, if any.
    pub auth: Option<String>,
}

/// An agent an administrator or an organization registered.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct CustomAgent {
    pub title: String,
    /// A shell command line, run in the workspace as the sandbox's user; it speaks ACP on its
    /// standard input and output.
    pub command: String,
    /// Its environment. In values, `${HALYARD_LLM_BASE}` (the relay's base URL),
    /// `${HALYARD_LLM_TOKEN}` (the run's token for it) and `${HALYARD_LLM_MODEL}` (the profile's
    /// model) are filled in.
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    /// The LLM wire it speaks (an LLM profile provider: `openai`, `anthropic`, `openai-responses`,
    /// `gemini`).
    pub wire: String,
    /// Who registered or last changed it, and when (Unix milliseconds).
    pub updated_by: String,
    pub updated_ms: i64,
}

/// A subscription login a user handed to one agent kind: the agent's own credential (a Claude
/// subscription's OAuth token), sealed in the vault. The relay sends it upstream in place of the
/// LLM profile's key for that kind's calls in the user's conversations; it never enters the
/// sandbox.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct AgentLogin {
    pub credential_sealed: String,
    /// Its last four characters, to tell logins apart.
    pub hint: String,
    pub created_ms: i64,
    pub updated_ms: i64,
}

/// A user's subscription logins, by agent kind (`agentlogins.<user>` in the user bucket).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct AgentLogins {
    #[serde(default)]
    pub logins: BTreeMap<String, AgentLogin>,
}

/// The custom agents of a deployment or an organization, by name.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct CustomAgents {
    #[serde(default)]
    pub agents: BTreeMap<String, CustomAgent>,
}

/// Where registered agent `name` is kept, for a conversation in organization `org` (none:
/// outside one): the user bucket's key and its name there. An organization's agent
/// (`@acme/reviewer`) is for its own conversations only: `Err` names the organization it is.
pub fn registration<'a>(name: &'a str, org: Option<&str>) -> Result<(String, &'a str), &'a str> {
    match name.strip_prefix('@').and_then(|n| n.split_once('/')) {
        Some((o, short)) if Some(o) == org => Ok((crate::subjects::org_agents_key(o), short)),
        Some((o, _)) => Err(o),
        None => Ok((crate::subjects::CUSTOM_AGENTS_KEY.to_owned(), name)),
    }
}

impl CustomAgent {
    /// How to start it as `name`, its LLM calls carrying `token` and the profile naming `model`.
    pub fn launch(&self, name: &str, token: &str, model: &str) -> Launch {
        let env = self
            .env
            .iter()
            .map(|(k, v)| (k.clone(), v.replace("${HALYARD_LLM_TOKEN}", token).replace("${HALYARD_LLM_MODEL}", model)))
            .collect();
        Launch {
            name: name.to_owned(),
            title: self.title.clone(),
            command: self.command.clone(),
            env,
            wires: vec![self.wire.clone()],
            auth: None,
        }
    }
}

impl AgentKind {
    /// How to start it from `dir` (the agents directory), its LLM calls carrying `token` and the
    /// profile naming `model`.
    pub fn launch(&self, dir: &str, token: &str, model: &str) -> Launch {
        Launch {
            name: self.name.to_owned(),
            title: self.title.to_owned(),
            command: self.command(dir),
            env: self.env(token, model),
            wires: self.wires.iter().map(|w| (*w).to_owned()).collect(),
            auth: self.auth.map(str::to_owned),
        }
    }

    /// The command line that starts it, under `dir` (the agents directory).
    pub fn command(&self, dir: &str) -> String {
        format!("exec '{}/{}'", dir.trim_end_matches('/').replace('\'', ""), self.launcher)
    }

    /// Its environment: where its LLM calls go (the relay, `${HALYARD_LLM_BASE}`), the token
    /// they carry, and the model the profile names (the relay sends that one whatever the
    /// agent asks for).
    pub fn env(&self, token: &str, model: &str) -> BTreeMap<String, String> {
        let base = "${HALYARD_LLM_BASE}";
        let pairs: Vec<(&str, String)> = match self.name {
            "claude-code" => vec![
                ("ANTHROPIC_BASE_URL", base.into()),
                ("ANTHROPIC_API_KEY", token.into()),
                ("ANTHROPIC_MODEL", model.into()),
                ("ANTHROPIC_SMALL_FAST_MODEL", model.into()),
                // Nothing but the LLM calls: no telemetry, updates or error reports.
                ("CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC", "1".into()),
                ("DISABLE_AUTOUPDATER", "1".into()),
                // It is one (claude-agent-acp refuses to start as root otherwise).
                ("IS_SANDBOX", "1".into()),
                // MCP tools offered whole, not deferred behind its tool search: the profile's
                // server may be any Anthropic-compatible one, which need not know the
                // `tool_reference` blocks that search answers with.
                ("ENABLE_TOOL_SEARCH", "false".into()),
            ],
            // Its launcher names a provider of its own, at the relay, whose key is this.
            "codex" => vec![("CODEX_API_KEY", token.into())],
            "gemini" => vec![
                ("GOOGLE_GEMINI_BASE_URL", base.into()),
                ("GEMINI_API_KEY", token.into()),
                ("GEMINI_MODEL", model.into()),
                // Nothing but the LLM calls: no usage statistics, no update checks.
                ("GEMINI_TELEMETRY_ENABLED", "false".into()),
                ("GEMINI_CLI_DISABLE_AUTOUPDATER", "1".into()),
            ],
            "opencode" => {
                // Its configuration, whole, in one variable: the `openai` provider (bundled,
                // nothing fetched at run time) pointed at the relay.
                let config = serde_json::json!({
                    "provider": {"openai": {"options": {"baseURL": format!("{base}/v1"), "apiKey": token}}},
                    "model": format!("openai/{model}"),
                    "small_model": format!("openai/{model}"),
                    "autoupdate": false,
                    "share": "disabled",
                });
                vec![
                    ("OPENCODE_CONFIG_CONTENT", config.to_string()),
                    ("OPENCODE_DISABLE_AUTOUPDATE", "1".into()),
                    ("OPENCODE_DISABLE_MODELS_FETCH", "1".into()),
                    ("OPENCODE_DISABLE_LSP_DOWNLOAD", "1".into()),
                ]
            }
            _ => vec![("OPENAI_BASE_URL", format!("{base}/v1")), ("OPENAI_API_KEY", token.into())],
        };
        pairs.into_iter().map(|(k, v)| (k.to_owned(), v)).collect()
    }
}
