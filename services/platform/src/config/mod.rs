//! Configuration: defaults, then a TOML file, then `HALYARD_*` environment variables, then
//! command-line flags (applied by the binary). Loaded once in `main` and passed down; nothing
//! below reads the environment.
//!
//! Each part is a module of its own with its struct, its defaults and the table of its
//! environment settings ([`crate::settings`]): [`agent`], [`sandbox`], [`gateway`], [`webhooks`],
//! [`automations`], [`mcp`], [`titles`], and the LLM's in [`crate::llm::config`]; this file holds
//! the process's own settings and walks the tables.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::llm::LlmConfig;
use crate::settings::set;
use crate::settings::{self, Setting, number};

mod agent;
mod automations;
mod gateway;
mod mcp;
mod sandbox;
mod titles;
mod webhooks;

pub mod doc;

pub use agent::AgentConfig;
pub use automations::AutomationConfig;
pub use gateway::GatewayConfig;
pub use mcp::McpConfig;
pub use sandbox::{RUNTIMES, SandboxConfig, SandboxSpec};
pub use titles::TitleConfig;
pub use webhooks::WebhookConfig;

/// Everything a Halyard process can be told.
#[derive(Clone, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Config {
    /// Gateway listen address.
    pub http_addr: String,
    /// Where this process serves `/metrics` (Prometheus), `/healthz` and `/readyz`, whatever
    /// services it runs; empty: nowhere.
    pub metrics_addr: String,
    /// Where JetStream data (embedded server), sled read models and process-sandbox
    /// workspaces live.
    pub data_dir: PathBuf,
    /// External NATS (`halyard serve`). Empty with `halyard up`: the embedded server is used.
    pub nats_url: String,
    /// The nats-server binary for `halyard up`.
    pub nats_server: String,
    /// Client port of the embedded nats-server; 0 picks a free one.
    pub nats_port: u16,
    /// How long a command a handler took and did not settle (it crashed) waits before it is
    /// handed out again; at most the declared ack wait of each command consumer (30 s; the
    /// sandbox supervisor's 60 s). Handlers still working report progress well within it.
    pub command_ack_wait_ms: u64,
    /// Credentials for an external NATS (`halyard serve`): a `.creds` file used by every
    /// service of this process, or a directory holding `<role>.creds` per service role.
    pub nats_creds: Option<PathBuf>,
    /// User and password for an external NATS, when it authenticates that way.
    pub nats_user: String,
    pub nats_password: String,
    /// `user:key` pairs.
    pub api_keys: Vec<ApiKey>,
    /// Deployment secret from which sandbox session keys are derived. Empty with `halyard up`:
    /// generated once and kept in the data dir.
    pub secret: String,
    /// Identifies this process among replicas (leases, projections).
    pub node_id: String,
    /// Log filter (`info`, `halyard_agent=debug,info`, ...).
    pub log: String,
    /// `text` (default) or `json`: one JSON object per line.
    pub log_format: String,
    /// Tests only (debug builds): where this process aborts, `<service>:<kind>:<point>,...`
    /// (see [`crate::fault`]).
    pub fault: String,
    /// An OTLP/HTTP collector (`http://host:4318`) that gets the process's traces; none when
    /// empty.
    pub otlp_endpoint: String,
    /// Directory of global skills loaded into every conversation.
    pub skills_dir: Option<PathBuf>,
    /// The built web workspace (`web/dist`), served at `/`.
    pub web_dir: Option<PathBuf>,
    /// Where the served-app proxy listens (the agent's `WORKER_*` apps, each on an origin of
    /// its own); empty: no proxy.
    pub apps_addr: String,
    /// The proxy's public base URL (`https://apps.example.com`, a wildcard DNS name: each app
    /// is `https://<label>.apps.example.com`); empty: `http://localhost:<apps port>`.
    pub apps_url: String,
    pub llm: LlmConfig,
    pub agent: AgentConfig,
    pub sandbox: SandboxConfig,
    pub gateway: GatewayConfig,
    pub webhooks: WebhookConfig,
    pub titles: TitleConfig,
    pub mcp: McpConfig,
    pub automations: AutomationConfig,
}

/// One API key and the user it authenticates.
#[derive(Clone, Serialize, Deserialize)]
pub struct ApiKey {
    pub user: String,
    pub key: String,
}

impl Default for Config {
    fn default() -> Self {
        Self {
            http_addr: "127.0.0.1:3000".into(),
            metrics_addr: String::new(),
            data_dir: PathBuf::from(".halyard"),
            nats_url: String::new(),
            nats_server: "nats-server".into(),
            nats_port: 0,
            command_ack_wait_ms: 30_000,
            nats_creds: None,
            nats_user: String::new(),
            nats_password: String::new(),
            api_keys: Vec::new(),
            secret: String::new(),
            node_id: String::new(),
            log: "info,async_nats=warn,rmcp=warn".into(),
            log_format: "text".into(),
            fault: String::new(),
            otlp_endpoint: String::new(),
            skills_dir: None,
            web_dir: None,
            apps_addr: "127.0.0.1:3001".into(),
            apps_url: String::new(),
            llm: LlmConfig::default(),
            agent: AgentConfig::default(),
            sandbox: SandboxConfig::default(),
            gateway: GatewayConfig::default(),
            webhooks: WebhookConfig::default(),
            titles: TitleConfig::default(),
            mcp: McpConfig::default(),
            automations: AutomationConfig::default(),
        }
    }
}

/// `HALYARD_*` variables read by other parts of the binary (the file name, the CLI's gateway and
/// key), or by the test suite's own tools (regenerating golden fixtures).
const USED_ELSEWHERE: &[&str] = &["CONFIG", "URL", "API_KEY", "BLESS"];

/// What a walk over every part's settings table ([`each_table`]) does with each one.
pub(crate) trait Tables {
    fn table<T: Default + Serialize>(&mut self, heading: &'static str, settings: &'static [Setting<T>]);
}

/// Hands every part's settings table to `walk`, in the documentation's order, with its heading
/// there. (The loader, [`Config::apply_env`], walks them by hand: it needs each part's field.)
pub(crate) fn each_table(walk: &mut impl Tables) {
    walk.table("The process, its bus and its files", SETTINGS);
    walk.table("The operator's LLM", crate::llm::config::SETTINGS);
    walk.table("Agent runners", agent::SETTINGS);
    walk.table("Sandboxes", sandbox::SETTINGS);
    walk.table("The gateway", gateway::SETTINGS);
    walk.table("Webhooks", webhooks::SETTINGS);
    walk.table("Automations", automations::SETTINGS);
    walk.table("MCP servers", mcp::SETTINGS);
    walk.table("Titles", titles::SETTINGS);
}

/// Every `HALYARD_*` variable [`Config::apply_env`] reads (without the prefix), from the parts'
/// tables. A test checks that each is accepted; any other is refused with the nearest of these.
pub fn env_names() -> Vec<&'static str> {
    struct Names(Vec<&'static str>);
    impl Tables for Names {
        fn table<T: Default + Serialize>(&mut self, _: &'static str, settings: &'static [Setting<T>]) {
            self.0.extend(settings.iter().map(|s| s.name));
        }
    }
    let mut names = Names(Vec::new());
    each_table(&mut names);
    names.0
}

/// The known name closest to `name` (by edit distance), if any is close enough to be a typo.
fn nearest(name: &str) -> Option<&'static str> {
    let distance = |a: &str, b: &str| {
        let b: Vec<char> = b.chars().collect();
        let mut row: Vec<usize> = (0..=b.len()).collect();
        for (i, ca) in a.chars().enumerate() {
            let mut prev = row[0];
            row[0] = i + 1;
            for (j, cb) in b.iter().enumerate() {
                let next = (row[j + 1] + 1).min(row[j] + 1).min(prev + usize::from(ca != *cb));
                prev = row[j + 1];
                row[j + 1] = next;
            }
        }
        row[b.len()]
    };
    env_names().into_iter().map(|n| (distance(name, n), n)).filter(|(d, n)| *d <= n.len() / 3 + 1).min().map(|(_, n)| n)
}

/// Why configuration could not be loaded.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("cannot read config file {path}: {source}")]
    Read { path: PathBuf, source: std::io::Error },
    #[error("config file {path} is invalid: {source}")]
    Parse { path: PathBuf, source: toml::de::Error },
    #[error("environment variable {name}={value:?} is invalid: {reason}")]
    Env { name: String, value: String, reason: String },
}

impl ConfigError {
    /// Configuration mistakes need a human.
    pub fn is_retryable(&self) -> bool {
        false
    }
}

impl Config {
    /// `path` on the web app as a person opens it: under `HALYARD_PUBLIC_URL`, or the gateway's
    /// own address where none is set.
    pub fn web_link(&self, path: &str) -> String {
        let base = if self.gateway.public_url.is_empty() { format!("http://{}", self.http_addr) } else { self.gateway.public_url.clone() };
        format!("{}{path}", base.trim_end_matches('/'))
    }

    /// How the services of this process authenticate to an external NATS as `role`.
    pub fn nats_auth(&self, role: &str) -> crate::bus_auth::NatsAuth {
        use crate::bus_auth::NatsAuth;
        match &self.nats_creds {
            Some(path) if path.is_dir() => NatsAuth::CredsFile(path.join(format!("{role}.creds"))),
            Some(path) => NatsAuth::CredsFile(path.clone()),
            None if !self.nats_user.is_empty() => {
                NatsAuth::UserPassword { user: self.nats_user.clone(), password: self.nats_password.clone() }
            }
            None => NatsAuth::None,
        }
    }

    /// Defaults, then `file` (if any), then `HALYARD_*` entries of `env`.
    pub fn load(file: Option<&Path>, env: &BTreeMap<String, String>) -> Result<Self, ConfigError> {
        let mut config = match file {
            Some(path) => {
                let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read { path: path.to_owned(), source })?;
                toml::from_str(&text).map_err(|source| ConfigError::Parse { path: path.to_owned(), source })?
            }
            None => Config::default(),
        };
        config.apply_env(env)?;
        Ok(config)
    }

    /// Applies `HALYARD_*` variables, each through the table of the part it sets. An unknown
    /// `HALYARD_*` name is refused with the nearest known one: a typo must not pass unnoticed.
    pub fn apply_env(&mut self, env: &BTreeMap<String, String>) -> Result<(), ConfigError> {
        for (name, value) in env {
            let Some(key) = name.strip_prefix("HALYARD_") else { continue };
            if USED_ELSEWHERE.contains(&key) {
                continue;
            }
            let applied = settings::apply(SETTINGS, self, key, value)
                .or_else(|| settings::apply(crate::llm::config::SETTINGS, &mut self.llm, key, value))
                .or_else(|| settings::apply(agent::SETTINGS, &mut self.agent, key, value))
                .or_else(|| settings::apply(sandbox::SETTINGS, &mut self.sandbox, key, value))
                .or_else(|| settings::apply(gateway::SETTINGS, &mut self.gateway, key, value))
                .or_else(|| settings::apply(webhooks::SETTINGS, &mut self.webhooks, key, value))
                .or_else(|| settings::apply(automations::SETTINGS, &mut self.automations, key, value))
                .or_else(|| settings::apply(mcp::SETTINGS, &mut self.mcp, key, value))
                .or_else(|| settings::apply(titles::SETTINGS, &mut self.titles, key, value))
                .unwrap_or_else(|| {
                    let hint = nearest(key).map(|n| format!("; did you mean HALYARD_{n}?")).unwrap_or_default();
                    Err(format!("no such setting{hint} (services/platform/README.md lists them)"))
                });
            applied.map_err(|reason| ConfigError::Env { name: name.clone(), value: value.clone(), reason })?;
        }
        Ok(())
    }

    /// The node id, or a fresh one when unset.
    pub fn node_id_or_random(&self) -> String {
        if self.node_id.is_empty() { uuid::Uuid::new_v4().simple().to_string() } else { self.node_id.clone() }
    }
}

/// Parses `user:key,user2:key2`.
pub fn parse_api_keys(v: &str) -> Result<Vec<ApiKey>, String> {
    v.split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(|pair| {
            let (user, key) = pair.split_once(':').ok_or("expected user:key pairs separated by commas")?;
            if user.is_empty() || key.len() < 8 {
                return Err("each pair needs a user name and a key of at least 8 characters".to_owned());
            }
            Ok(ApiKey { user: user.to_owned(), key: key.to_owned() })
        })
        .collect()
}

// Keys and secrets never reach a log line, even through `{:?}`.
impl std::fmt::Debug for Config {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Config")
            .field("http_addr", &self.http_addr)
            .field("data_dir", &self.data_dir)
            .field("nats_url", &self.nats_url)
            .field("api_keys", &format_args!("[{} keys]", self.api_keys.len()))
            .field("llm.base_url", &self.llm.base_url)
            .field("llm.model", &self.llm.model)
            .field("sandbox.kind", &self.sandbox.kind)
            .finish_non_exhaustive()
    }
}

/// `HALYARD_*` settings of the process itself: addresses, data, NATS, keys, logs, telemetry.
pub(crate) const SETTINGS: &[Setting<Config>] = &[
    set!("HTTP_ADDR", "`127.0.0.1:3000`", "gateway address", |c, v| c.http_addr = v.to_owned()),
    set!("METRICS_ADDR", "(none)", "where the process serves `/metrics` (Prometheus), `/healthz` and `/readyz`", |c, v| c.metrics_addr =
        v.to_owned()),
    set!("DATA_DIR", "`.halyard`", "JetStream store, read models, sandbox workspaces", |c, v| c.data_dir = PathBuf::from(v)),
    set!("NATS_URL", "(embedded)", "external NATS for `halyard serve`", |c, v| c.nats_url = v.to_owned()),
    set!("NATS_SERVER", "`nats-server`", "the binary `halyard up` starts (2.11 or newer)", |c, v| c.nats_server = v.to_owned()),
    set!("NATS_CREDS", "(none)", "external NATS: a `.creds` file, or a directory of `<role>.creds`", |c, v| c.nats_creds =
        Some(PathBuf::from(v))),
    set!("NATS_USER", "(none)", "external NATS: user and password", |c, v| c.nats_user = v.to_owned()),
    set!("NATS_PASSWORD", "(none)", "external NATS: user and password", |c, v| c.nats_password = v.to_owned()),
    set!("NATS_PORT", "`0`", "client port of the embedded nats-server (`halyard up`; 0: a free one)", |c, v| c.nats_port =
        number(v, "a port number")?),
    set!("API_KEYS", "(none)", "`user:key,...`: bootstrap keys (more through the admin API)", |c, v| c.api_keys = parse_api_keys(v)?),
    set!(
        "SECRET",
        "(generated in the data dir)",
        "derives sandbox session keys and the key that seals users' secrets and LLM API keys (changing it makes stored ones unreadable)",
        |c, v| c.secret = v.to_owned()
    ),
    // It names the node's NATS subject (commands passed between agent runners) and its Docker
    // resources.
    set!(
        "NODE_ID",
        "(random)",
        "names this process among replicas (leases, projections, its NATS subject and Docker labels): letters, digits, `-` and `_`",
        |c, v| {
            if v.is_empty() || !v.chars().all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_') {
                return Err("expected letters, digits, '-' and '_' only".into());
            }
            c.node_id = v.to_owned()
        }
    ),
    set!(
        "LOG",
        "`info,async_nats=warn,rmcp=warn`",
        "log filter (`EnvFilter` directives: `debug`, `halyard_agent=debug,info`, ...); the default keeps the NATS client's reconnect chatter and MCP message dumps out",
        |c, v| c.log = v.to_owned()
    ),
    set!("LOG_FORMAT", "`text`", "`json`: one JSON object per log line (time, level, target, message, fields, span)", |c, v| c
        .log_format =
        crate::settings::one_of(v, &["text", "json"])?),
    set!(
        "COMMAND_ACK_WAIT_MS",
        "`30000`",
        "how long a command whose handler died (before acknowledging it) waits before it is handed out again; handlers still working report progress well within it",
        |c, v| { c.command_ack_wait_ms = v.parse().ok().filter(|ms| *ms >= 1000).ok_or("expected milliseconds, 1000 or more")? }
    ),
    set!(
        "FAULT",
        "(none)",
        "tests only, debug builds only: `<service>:<kind>:<received\\|before_ack\\|after_ack>` aborts the process there (`tests/tests/faults.rs`)",
        |c, v| {
            crate::fault::check(v)?;
            c.fault = v.to_owned()
        }
    ),
    set!(
        "OTLP_ENDPOINT",
        "(none)",
        "an OTLP/HTTP collector (`http://collector:4318`, plain HTTP): spans are exported there as traces (protobuf, batched), `service.name` `halyard-<service>` (or `halyard` for `up`)",
        |c, v| {
            if !v.is_empty() && !v.starts_with("http://") {
                return Err("expected an http:// URL of an OTLP/HTTP collector, such as http://127.0.0.1:4318".into());
            }
            c.otlp_endpoint = v.trim_end_matches('/').to_owned()
        }
    ),
    set!("SKILLS_DIR", "`skills` (when run from the repository)", "global skills", |c, v| c.skills_dir = Some(PathBuf::from(v))),
    set!("WEB_DIR", "`web/dist` (when built)", "the web workspace served at `/`; without it `/` says how to build it", |c, v| c.web_dir =
        Some(PathBuf::from(v))),
    set!("APPS_ADDR", "`127.0.0.1:3001`", "the served-app proxy's listener (empty: none)", |c, v| c.apps_addr = v.to_owned()),
    set!(
        "APPS_URL",
        "from the apps port: `http://localhost:<it>`",
        "the proxy's public base; each app is `<label>.<host>` under it",
        |c, v| c.apps_url = v.trim_end_matches('/').to_owned()
    ),
];

#[cfg(test)]
mod tests {
    use super::*;

    fn env(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect()
    }

    #[test]
    fn env_overrides_file_overrides_defaults() {
        let dir = std::env::temp_dir().join(format!("halyard-cfg-{}", uuid::Uuid::new_v4()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("halyard.toml");
        std::fs::write(&file, "http_addr = \"0.0.0.0:9\"\n[llm]\nmodel = \"from-file\"\nstream = false\n").unwrap();
        let c = Config::load(Some(&file), &env(&[("HALYARD_LLM_MODEL", "from-env"), ("OTHER", "x")])).unwrap();
        assert_eq!(c.http_addr, "0.0.0.0:9");
        assert_eq!(c.llm.model, "from-env");
        assert!(!c.llm.stream);
        assert_eq!(c.agent.max_iterations, 50);
    }

    #[test]
    fn api_keys_parse_and_reject_garbage() {
        let keys = parse_api_keys("alice:key-alice-1,bob:key-bob-12").unwrap();
        assert_eq!(keys.len(), 2);
        assert_eq!(keys[1].user, "bob");
        assert!(parse_api_keys("alice").is_err());
        assert!(parse_api_keys("alice:short").is_err());
        let err = Config::load(None, &env(&[("HALYARD_SANDBOX", "vm")])).err().unwrap();
        assert!(err.to_string().contains("HALYARD_SANDBOX"));
    }

    #[test]
    fn every_variable_is_read_and_a_typo_is_refused_with_the_nearest_name() {
        for name in env_names() {
            let value = match name {
                "SANDBOX" => "process",
                "PROCESS_ISOLATION" => "uid",
                "PROCESS_NETWORK" => "host",
                "SANDBOX_RUNTIME" => "gvisor",
                "API_KEYS" => "alice:key-alice-1",
                "WEBHOOK_ALLOW" | "LLM_PROFILE_ALLOW" | "MCP_ALLOW" | "GIT_API_ALLOW" => "loopback",
                "MCP_SERVERS" => r#"{"time": {"transport": "stdio", "command": "mcp-server-time"}}"#,
                "LLM_STREAM" | "TITLE_USE_LLM" => "true",
                "LLM_PROVIDER" => "anthropic",
                "LOG_FORMAT" => "json",
                "OTLP_ENDPOINT" => "http://127.0.0.1:4318",
                "LLM_PRICE" => "0.15,0.6,0.075",
                "MCP_URL" => "http://127.0.0.1:8000/mcp",
                "SANDBOX_PUBLISH_HOST" => "10.1.2.3",
                "TRUSTED_PROXIES" => "10.0.0.0/8,::1",
                "PUBLIC_URL" => "https://halyard.example.com",
                "OIDC_ISSUER" => "https://login.example.com",
                "SLACK_OIDC_ISSUER" => "https://slack.com",
                "COMMAND_ACK_WAIT_MS" => "5000",
                "EGRESS_ALLOW" => "registry.npmjs.org,*.pypi.org",
                "EGRESS_DENY" => "*.bad.example",
                "EGRESS_RESOLVE" => "registry.test=10.9.8.7",
                "EGRESS_ADDRESS_ALLOW" => "private",
                "RUNTIME_API_ADDR" => "127.0.0.1:3005",
                "RUNTIME_API_URL" => "http://runtimes.example.com",
                "RUNTIME_API_POOL" => "ghcr.io/openhands/agent-server:1.0=2",
                "RUNTIME_API_URL_MODE" => "subdomain",
                "RUNTIME_API_KEYS" => "openhands=9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08",
                "FAULT" => "agent:cmd.agent.start:received",
                "HTTP_ADDR"
                | "METRICS_ADDR"
                | "DATA_DIR"
                | "NATS_URL"
                | "NATS_SERVER"
                | "NATS_CREDS"
                | "NATS_USER"
                | "NATS_PASSWORD"
                | "SECRET"
                | "NODE_ID"
                | "LOG"
                | "SKILLS_DIR"
                | "WEB_DIR"
                | "APPS_ADDR"
                | "APPS_URL"
                | "LLM_BASE_URL"
                | "LLM_MODEL"
                | "LLM_API_KEY"
                | "DOCKER_HOST"
                | "SANDBOX_BASE_IMAGE"
                | "EXECUTOR_COMMAND"
                | "ADMINS"
                | "TITLE_MODEL"
                | "TITLE_BASE_URL"
                | "SANDBOX_DEFAULT_SPEC"
                | "GVISOR_RUNTIME"
                | "OIDC_CLIENT_ID"
                | "OIDC_CLIENT_SECRET"
                | "OIDC_ALLOWED_DOMAINS"
                | "OIDC_REQUIRED_GROUP" => "x",
                _ => "7",
            };
            let var = format!("HALYARD_{name}");
            Config::load(None, &env(&[(var.as_str(), value)])).unwrap_or_else(|e| panic!("{var}={value}: {e}"));
        }
        let err = Config::load(None, &env(&[("HALYARD_MAX_ITERATION", "9")])).err().unwrap().to_string();
        assert!(err.contains("did you mean HALYARD_MAX_ITERATIONS?"), "{err}");
        let c = Config::load(None, &env(&[("HALYARD_SANDBOX_PUBLISH_HOST", "fd00::7")])).unwrap();
        assert_eq!(c.sandbox.publish_host.to_string(), "fd00::7");
        let err = Config::load(None, &env(&[("HALYARD_SANDBOX_PUBLISH_HOST", "pod.local")])).err().unwrap().to_string();
        assert!(err.contains("expected an IP address"), "{err}");
        let err = Config::load(None, &env(&[("HALYARD_WHATEVER_THIS_IS", "9")])).err().unwrap().to_string();
        assert!(err.contains("no such setting") && !err.contains("did you mean"), "{err}");
        let c = Config::load(None, &env(&[("HALYARD_MAX_STARTING_PER_USER", "3"), ("HALYARD_CONFIG", "x.toml")])).unwrap();
        assert_eq!(c.gateway.max_starting_per_user, 3);
    }

    #[test]
    fn debug_hides_secrets() {
        let mut c = Config::default();
        c.llm.api_key = "sk-very-secret".into();
        c.api_keys = parse_api_keys("alice:key-alice-1").unwrap();
        let s = format!("{c:?}");
        assert!(!s.contains("sk-very-secret") && !s.contains("key-alice-1"));
    }
}
