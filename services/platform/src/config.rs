//! Configuration: defaults, then a TOML file, then `HALYARD_*` environment variables, then
//! command-line flags (applied by the binary). Loaded once in `main` and passed down; nothing
//! below reads the environment.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::llm::{LlmConfig, Price};

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

/// The automation service.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct AutomationConfig {
    /// A schedule's tick missed while no automation service ran is run once at start-up if it
    /// is at most this old (`HALYARD_AUTOMATION_TICK_GRACE_SECS`); older ones are skipped, and
    /// never more than the latest of them runs.
    pub tick_grace_secs: u64,
}

impl Default for AutomationConfig {
    fn default() -> Self {
        Self { tick_grace_secs: 900 }
    }
}

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

/// Webhook delivery.
#[derive(Clone, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct WebhookConfig {
    /// Destinations otherwise refused that are allowed: any of `loopback`, `private`,
    /// `link-local`.
    pub allow: Vec<String>,
    /// Attempts per delivery before it is parked.
    pub max_attempts: u32,
    /// First retry delay; doubles each attempt, with jitter.
    pub retry_base_ms: u64,
    /// Longest retry delay.
    pub retry_max_ms: u64,
    /// Timeout of one delivery request.
    pub timeout_secs: u64,
    /// A subscription failing without a single success for this long is disabled.
    pub disable_after_secs: u64,
}

impl Default for WebhookConfig {
    fn default() -> Self {
        Self {
            allow: Vec::new(),
            max_attempts: 8,
            retry_base_ms: 1000,
            retry_max_ms: 300_000,
            timeout_secs: 10,
            disable_after_secs: 3 * 24 * 3600,
        }
    }
}

/// The title setter's LLM (defaults to the agent's endpoint and model).
#[derive(Clone, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct TitleConfig {
    /// Ask an LLM for titles; with false, titles are the trimmed first line of the message.
    pub use_llm: bool,
    pub base_url: Option<String>,
    pub model: Option<String>,
    pub api_key: Option<String>,
}

impl Default for TitleConfig {
    fn default() -> Self {
        Self { use_llm: true, base_url: None, model: None, api_key: None }
    }
}

impl TitleConfig {
    /// The LLM settings for titles: these overrides on top of the agent's.
    pub fn llm(&self, agent: &LlmConfig) -> LlmConfig {
        LlmConfig {
            base_url: self.base_url.clone().unwrap_or_else(|| agent.base_url.clone()),
            model: self.model.clone().unwrap_or_else(|| agent.model.clone()),
            api_key: self.api_key.clone().unwrap_or_else(|| agent.api_key.clone()),
            stream: false,
            timeout_secs: 20,
            max_retries: 1,
            retry_base_ms: agent.retry_base_ms,
            max_concurrent: 8,
            temperature: None,
            // A title needs no deliberation.
            reasoning_effort: None,
            thinking_budget_tokens: 0,
            prices: agent.prices.clone(),
            provider: agent.provider.clone(),
            context_window: agent.context_window,
            context_reserve: agent.context_reserve,
            max_output_tokens: 200,
            profile_allow: Vec::new(),
        }
    }
}

/// One API key and the user it authenticates.
#[derive(Clone, Serialize, Deserialize)]
pub struct ApiKey {
    pub user: String,
    pub key: String,
}

/// The agent loop.
#[derive(Clone, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct AgentConfig {
    /// LLM steps in one run before it ends with an error.
    pub max_iterations: u32,
    /// A run lease not renewed for this long is taken over by another runner (takeover time).
    pub lease_ttl_ms: u64,
    /// Idle conversation actors are evicted after this long (rehydrated on demand).
    pub idle_evict_secs: u64,
    /// Default per-command timeout for the `terminal` tool.
    pub command_timeout_secs: f64,
    /// How long a Python cell may run before it is interrupted.
    pub cell_timeout_secs: f64,
    /// Stuck detection (0 turns a pattern off): the same action with the same observation this
    /// many times in a row...
    pub stuck_repeats: usize,
    /// ...the same action failing with the same error...
    pub stuck_errors: usize,
    /// ...only `think` calls...
    pub stuck_monologue: usize,
    /// ...two actions alternating, this many times each.
    pub stuck_alternations: usize,
    /// Default limits of a conversation's LLM use, for conversations that name none (0: none).
    pub max_budget_usd: f64,
    pub max_tokens: u64,
    /// How deep helpers may go: a conversation of its own is at depth 0, its helpers at 1; the
    /// `delegate` tool is offered only below this depth (0: no delegation at all).
    pub max_delegation_depth: u32,
    /// Most helpers one `delegate` call may start.
    pub max_delegates: usize,
    /// Where third-party agents are installed, as sandboxes see it (`infra/install-agents.sh`
    /// fills it; process sandboxes read the host's, the base image holds a copy).
    pub agents_dir: String,
}

/// Sandboxes.
#[derive(Clone, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct SandboxConfig {
    /// `auto` (default: `docker` when a Docker engine answers and the default spec's base
    /// image is there, else `process`), `process` or `docker`. `halyard` resolves `auto` once at
    /// start-up; services only ever see `process` or `docker`.
    pub kind: String,
    /// Command that starts an executor; empty means "this binary, `executor` subcommand".
    pub executor_command: Vec<String>,
    /// How long to wait for a new sandbox's health endpoint.
    pub start_timeout_secs: u64,
    /// Cap on one command's output returned to the agent, in bytes.
    pub output_cap_bytes: usize,
    /// How long a sandbox's browser may stay unused before it is stopped (it starts again with
    /// the next browser call).
    pub browser_idle_secs: u64,
    /// How long a sandbox's VS Code (code-server) may stay without a request or an open
    /// connection before it is stopped (it starts again with the next request for it).
    pub vscode_idle_secs: u64,
    /// Running sandboxes per user (0: unlimited).
    pub max_running_per_user: usize,
    /// Running sandboxes in total (0: unlimited).
    pub max_running_total: usize,
    /// Environment given to process sandboxes (nothing else of Halyard's environment is).
    pub env: std::collections::BTreeMap<String, String>,
    /// Docker engine address (`unix:///path` or `tcp://host:port`).
    pub docker_host: String,
    /// Where sandboxes' ports are published (Docker) or forwarded from (process), and the host
    /// of their URLs: `127.0.0.2` by default, a loopback address that only this host reaches
    /// and that is not the web workspace's (`127.0.0.1`: a browser sends the workspace's
    /// cookies to every port of the host it was opened at, so an agent's app must never
    /// listen there); the host's own address where agent runners run elsewhere (a Kubernetes
    /// pod's IP). Refused when it is the address the gateway serves the web workspace on.
    pub publish_host: std::net::IpAddr,
    /// Repository of the runtime images Halyard builds (tags say what they hold).
    pub image_repository: String,
    /// The spec new conversations get.
    pub default_spec: String,
    /// Docker sandbox specs; empty means one spec, `default`, on `halyard-base:bookworm`.
    pub specs: Vec<SandboxSpec>,
    /// Pre-started docker sandboxes kept ready per spec.
    pub pool_size: usize,
    /// Pause (freeze) a running sandbox after this long without activity (0: never, the
    /// default: hibernation frees what a pause would hold).
    pub idle_pause_secs: u64,
    /// Hibernate a sandbox after this long without activity (0: never): its processes end (a
    /// container is stopped), its workspace stays, and the next request starts it again.
    pub idle_stop_secs: u64,
    /// How process sandboxes are isolated: `auto` (`uid` as root, else `bwrap` where bubblewrap
    /// works, else `none`), `uid`, `bwrap` or `none` (one user's sandboxes only).
    pub process_isolation: String,
    /// Process sandboxes' network: `own` (a network namespace each, in modes `uid` and
    /// `bwrap`; the default) or `host` (the host's own network and loopback: for a single
    /// developer whose agent must reach services on the host; an agent's app then listens where
    /// the web workspace is served, so never on a shared deployment).
    pub process_network: String,
    /// First uid (and gid) given to process sandboxes with `uid` isolation.
    pub process_uid_base: u32,
    /// How many uids from `process_uid_base` sandboxes may use (one each at a time).
    pub process_uid_count: u32,
}

/// What a docker sandbox is made from.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct SandboxSpec {
    pub name: String,
    /// Any image with a shell; Halyard adds its executor in a runtime image built from it.
    pub base_image: String,
    pub working_dir: String,
    /// `uid:gid` the executor and the agent's commands run as.
    pub user: String,
    pub env: std::collections::BTreeMap<String, String>,
    pub memory_mb: u64,
    pub cpus: f64,
    pub pids_limit: i64,
    /// What the workspace (with the sandbox's home and temporary directory) may hold, in MiB
    /// (0: no limit).
    pub disk_mb: u64,
    /// Where the sandbox may connect: `open` (default: anywhere but other sandboxes),
    /// `internet` (not private, loopback or link-local ranges, nor the Docker host) or `none`.
    pub egress: String,
}

impl Default for SandboxSpec {
    fn default() -> Self {
        Self {
            name: "default".into(),
            base_image: "halyard-base:bookworm".into(),
            working_dir: "/workspace".into(),
            user: "1000:1000".into(),
            env: std::collections::BTreeMap::from([
                ("PATH".into(), "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin".into()),
                ("LANG".into(), "C.UTF-8".into()),
            ]),
            memory_mb: 2048,
            cpus: 1.0,
            pids_limit: 512,
            disk_mb: 10 * 1024,
            egress: "open".into(),
        }
    }
}

impl SandboxConfig {
    /// The configured specs (the built-in default if none).
    pub fn specs(&self) -> Vec<SandboxSpec> {
        if self.specs.is_empty() { vec![SandboxSpec::default()] } else { self.specs.clone() }
    }

    /// The spec called `name`.
    pub fn spec(&self, name: &str) -> Option<SandboxSpec> {
        self.specs().into_iter().find(|s| s.name == name)
    }
}

/// The HTTP API.
#[derive(Clone, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct GatewayConfig {
    /// Destinations otherwise refused for users' git providers: their REST APIs (which the
    /// gateway calls) and their git servers (which the git proxy of agent runners and the
    /// conversations service calls): any of `loopback`, `private`, `link-local`.
    pub git_api_allow: Vec<String>,
    /// Largest accepted request body.
    pub max_body_bytes: usize,
    /// Write requests per user per minute (0: unlimited).
    pub rate_limit_per_minute: u32,
    /// Conversations a user may have starting at once.
    pub max_starting_per_user: usize,
    /// Users of the bootstrap keys (`api_keys`) who may use the admin API.
    pub admins: Vec<String>,
    /// Failed authentications allowed per client address (and per key id) per minute; past
    /// it, failures are answered 429, slowly; a valid credential is never refused (0: no limit).
    pub auth_failures_per_minute: u32,
    /// Addresses (or CIDR ranges) of reverse proxies in front of the gateway: only a request
    /// from one of them has its client address taken from `X-Forwarded-For`.
    pub trusted_proxies: Vec<String>,
    /// Seconds a client has to send a request's headers; also how long a kept-alive
    /// connection may wait idle for its next request.
    pub http_header_timeout_secs: u64,
    /// Seconds a request body may go without sending anything.
    pub http_body_timeout_secs: u64,
    /// Open connections per listener, and per client address (IPv6 by /64).
    pub http_max_connections: usize,
    pub http_max_connections_per_client: usize,
    /// A session older than this (since sign-in or its last step-up) must step up before it
    /// issues keys, changes roles or changes secrets.
    pub step_up_secs: u64,
    /// The URL people open the web workspace at (for the check that apps are served from
    /// another site); empty: the `http_addr`.
    pub public_url: String,
    /// Days the audit trail keeps a record readable (`HALYARD_AUDIT_RETENTION_DAYS`).
    pub audit_retention_days: u64,
    /// Single sign-on to the web workspace through this OpenID Connect provider (its issuer
    /// URL; empty: none). Its redirect URL is `<public_url>/api/v1/auth/sso/callback`.
    pub oidc_issuer: String,
    pub oidc_client_id: String,
    /// Never logged.
    pub oidc_client_secret: String,
    /// Who single sign-on admits as a new user (`HALYARD_OIDC_ALLOWED_DOMAINS`, comma-separated):
    /// identities whose verified e-mail address is in one of these domains. With this and
    /// `oidc_required_group` both empty, only users an administrator made first (with their
    /// e-mail address) sign in that way.
    pub oidc_allowed_domains: Vec<String>,
    /// A group the identity's `groups` claim must hold to be admitted as a new user
    /// (`HALYARD_OIDC_REQUIRED_GROUP`); with allowed domains too, either admits.
    pub oidc_required_group: String,
    /// "Sign in with Slack" (OpenID Connect against Slack with the operator's own Slack app):
    /// what proves a Slack user is who a Slack sign-in link says before an automation may run as
    /// them. The issuer is `https://slack.com` unless set (`HALYARD_SLACK_OIDC_ISSUER`); without
    /// a client id, nothing runs as a linked Slack user but the automation's owner. Its redirect
    /// URL is `<public_url>/api/v1/auth/slack/callback`.
    pub slack_oidc_issuer: String,
    pub slack_oidc_client_id: String,
    /// Never logged.
    pub slack_oidc_client_secret: String,
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

impl Default for AgentConfig {
    fn default() -> Self {
        Self {
            max_iterations: 50,
            lease_ttl_ms: 2_000,
            idle_evict_secs: 300,
            command_timeout_secs: 30.0,
            cell_timeout_secs: 120.0,
            stuck_repeats: 4,
            stuck_errors: 3,
            stuck_monologue: 8,
            stuck_alternations: 3,
            max_budget_usd: 0.0,
            max_tokens: 0,
            max_delegation_depth: 2,
            max_delegates: 4,
            agents_dir: "/opt/halyard-agents".into(),
        }
    }
}

impl Default for SandboxConfig {
    fn default() -> Self {
        Self {
            kind: "auto".into(),
            executor_command: Vec::new(),
            start_timeout_secs: 30,
            output_cap_bytes: 30_000,
            browser_idle_secs: 600,
            vscode_idle_secs: 600,
            max_running_per_user: 0,
            max_running_total: 0,
            env: std::collections::BTreeMap::new(),
            docker_host: "unix:///var/run/docker.sock".into(),
            publish_host: std::net::Ipv4Addr::new(127, 0, 0, 2).into(),
            image_repository: "halyard-runtime".into(),
            default_spec: "default".into(),
            specs: Vec::new(),
            pool_size: 1,
            idle_pause_secs: 0,
            idle_stop_secs: 600,
            process_isolation: "auto".into(),
            process_network: "own".into(),
            process_uid_base: 200_000,
            process_uid_count: 50_000,
        }
    }
}

impl Default for GatewayConfig {
    fn default() -> Self {
        Self {
            git_api_allow: Vec::new(),
            max_body_bytes: 1 << 20,
            rate_limit_per_minute: 600,
            max_starting_per_user: 20,
            admins: Vec::new(),
            auth_failures_per_minute: 30,
            trusted_proxies: Vec::new(),
            http_header_timeout_secs: 10,
            http_body_timeout_secs: 30,
            http_max_connections: 10_000,
            http_max_connections_per_client: 256,
            step_up_secs: 300,
            public_url: String::new(),
            audit_retention_days: 400,
            oidc_issuer: String::new(),
            oidc_client_id: String::new(),
            oidc_client_secret: String::new(),
            oidc_allowed_domains: Vec::new(),
            oidc_required_group: String::new(),
            slack_oidc_issuer: "https://slack.com".into(),
            slack_oidc_client_id: String::new(),
            slack_oidc_client_secret: String::new(),
        }
    }
}

/// Every `HALYARD_*` variable [`Config::apply_env`] reads (without the prefix). A test checks
/// that each is accepted; any other is refused with the nearest of these.
pub const ENV_NAMES: &[&str] = &[
    "HTTP_ADDR",
    "AUTOMATION_TICK_GRACE_SECS",
    "METRICS_ADDR",
    "DATA_DIR",
    "NATS_URL",
    "NATS_SERVER",
    "NATS_CREDS",
    "NATS_USER",
    "NATS_PASSWORD",
    "NATS_PORT",
    "API_KEYS",
    "SECRET",
    "NODE_ID",
    "LOG",
    "COMMAND_ACK_WAIT_MS",
    "FAULT",
    "LOG_FORMAT",
    "OTLP_ENDPOINT",
    "SKILLS_DIR",
    "WEB_DIR",
    "APPS_ADDR",
    "APPS_URL",
    "LLM_BASE_URL",
    "LLM_MODEL",
    "LLM_API_KEY",
    "LLM_STREAM",
    "LLM_TIMEOUT_SECS",
    "LLM_MAX_RETRIES",
    "LLM_RETRY_BASE_MS",
    "MAX_ITERATIONS",
    "LEASE_TTL_MS",
    "SANDBOX",
    "PROCESS_ISOLATION",
    "PROCESS_NETWORK",
    "PROCESS_UID_BASE",
    "DOCKER_HOST",
    "SANDBOX_PUBLISH_HOST",
    "SANDBOX_POOL_SIZE",
    "SANDBOX_IDLE_PAUSE_SECS",
    "SANDBOX_IDLE_STOP_SECS",
    "SANDBOX_START_TIMEOUT_SECS",
    "SANDBOX_BASE_IMAGE",
    "EXECUTOR_COMMAND",
    "MAX_RUNNING_PER_USER",
    "MAX_RUNNING_TOTAL",
    "ADMINS",
    "AUTH_FAILURES_PER_MINUTE",
    "RATE_LIMIT_PER_MINUTE",
    "MAX_BODY_BYTES",
    "WEBHOOK_ALLOW",
    "WEBHOOK_MAX_ATTEMPTS",
    "WEBHOOK_RETRY_BASE_MS",
    "WEBHOOK_RETRY_MAX_MS",
    "WEBHOOK_TIMEOUT_SECS",
    "WEBHOOK_DISABLE_AFTER_SECS",
    "TITLE_USE_LLM",
    "TITLE_MODEL",
    "TITLE_BASE_URL",
    "MAX_STARTING_PER_USER",
    "LLM_MAX_CONCURRENT",
    "IDLE_EVICT_SECS",
    "COMMAND_TIMEOUT_SECS",
    "OUTPUT_CAP_BYTES",
    "PROCESS_UID_COUNT",
    "SANDBOX_DEFAULT_SPEC",
    "MAX_BUDGET_USD",
    "MAX_TOKENS",
    "LLM_PRICE",
    "STUCK_REPEATS",
    "STUCK_ERRORS",
    "STUCK_MONOLOGUE",
    "STUCK_ALTERNATIONS",
    "MAX_DELEGATION_DEPTH",
    "MAX_DELEGATES",
    "AGENTS_DIR",
    "LLM_PROVIDER",
    "LLM_CONTEXT_WINDOW",
    "LLM_CONTEXT_RESERVE",
    "LLM_MAX_OUTPUT_TOKENS",
    "LLM_PROFILE_ALLOW",
    "MCP_SERVERS",
    "MCP_ALLOW",
    "MCP_URL",
    "GIT_API_ALLOW",
    "TRUSTED_PROXIES",
    "HTTP_HEADER_TIMEOUT_SECS",
    "HTTP_BODY_TIMEOUT_SECS",
    "HTTP_MAX_CONNECTIONS",
    "HTTP_MAX_CONNECTIONS_PER_CLIENT",
    "STEP_UP_SECS",
    "PUBLIC_URL",
    "AUDIT_RETENTION_DAYS",
    "OIDC_ISSUER",
    "OIDC_CLIENT_ID",
    "OIDC_CLIENT_SECRET",
    "OIDC_ALLOWED_DOMAINS",
    "OIDC_REQUIRED_GROUP",
    "SLACK_OIDC_ISSUER",
    "SLACK_OIDC_CLIENT_ID",
    "SLACK_OIDC_CLIENT_SECRET",
];

/// `HALYARD_*` variables read by other parts of the binary (the file name, the CLI's gateway and
/// key), or by the test suite's own tools (regenerating golden fixtures).
const USED_ELSEWHERE: &[&str] = &["CONFIG", "URL", "API_KEY", "BLESS"];

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
    ENV_NAMES.iter().map(|n| (distance(name, n), *n)).filter(|(d, n)| *d <= n.len() / 3 + 1).min().map(|(_, n)| n)
}

/// A comma-separated list of network classes (`loopback`, `private`, `link-local`).
fn network_classes(v: &str) -> Result<Vec<String>, String> {
    let allow: Vec<String> = v.split(',').map(|s| s.trim().to_owned()).filter(|s| !s.is_empty()).collect();
    match allow.iter().find(|a| !["loopback", "private", "link-local"].contains(&a.as_str())) {
        Some(bad_one) => Err(format!("unknown network class {bad_one:?}; use loopback, private, link-local")),
        None => Ok(allow),
    }
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

    /// Applies `HALYARD_*` variables. An unknown `HALYARD_*` name is refused with the nearest
    /// known one: a typo must not pass unnoticed.
    pub fn apply_env(&mut self, env: &BTreeMap<String, String>) -> Result<(), ConfigError> {
        for (name, value) in env {
            let Some(key) = name.strip_prefix("HALYARD_") else { continue };
            let v = value.clone();
            let bad = |reason: &str| ConfigError::Env { name: name.clone(), value: value.clone(), reason: reason.to_owned() };
            match key {
                "HTTP_ADDR" => self.http_addr = v,
                "METRICS_ADDR" => self.metrics_addr = v,
                "DATA_DIR" => self.data_dir = PathBuf::from(v),
                "NATS_URL" => self.nats_url = v,
                "NATS_SERVER" => self.nats_server = v,
                "NATS_CREDS" => self.nats_creds = Some(PathBuf::from(v)),
                "NATS_USER" => self.nats_user = v,
                "NATS_PASSWORD" => self.nats_password = v,
                "NATS_PORT" => self.nats_port = v.parse().map_err(|_| bad("expected a port number"))?,
                "API_KEYS" => self.api_keys = parse_api_keys(&v).map_err(|r| bad(&r))?,
                "SECRET" => self.secret = v,
                // It names the node's NATS subject (commands passed between agent runners) and
                // its Docker resources.
                "NODE_ID" if v.is_empty() || !v.chars().all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_') => {
                    return Err(bad("expected letters, digits, '-' and '_' only"));
                }
                "NODE_ID" => self.node_id = v,
                "LOG" => self.log = v,
                "COMMAND_ACK_WAIT_MS" => {
                    self.command_ack_wait_ms =
                        v.parse().ok().filter(|ms| *ms >= 1000).ok_or_else(|| bad("expected milliseconds, 1000 or more"))?
                }
                "FAULT" => {
                    crate::fault::check(&v).map_err(|e| bad(&e))?;
                    self.fault = v;
                }
                "LOG_FORMAT" if v != "text" && v != "json" => return Err(bad("expected `text` or `json`")),
                "LOG_FORMAT" => self.log_format = v,
                "OTLP_ENDPOINT" if !v.is_empty() && !v.starts_with("http://") => {
                    return Err(bad("expected an http:// URL of an OTLP/HTTP collector, such as http://127.0.0.1:4318"));
                }
                "OTLP_ENDPOINT" => self.otlp_endpoint = v.trim_end_matches('/').to_owned(),
                "SKILLS_DIR" => self.skills_dir = Some(PathBuf::from(v)),
                "WEB_DIR" => self.web_dir = Some(PathBuf::from(v)),
                "APPS_ADDR" => self.apps_addr = v,
                "APPS_URL" => self.apps_url = v.trim_end_matches('/').to_owned(),
                "LLM_BASE_URL" => self.llm.base_url = v,
                "LLM_MODEL" => self.llm.model = v,
                "LLM_API_KEY" => self.llm.api_key = v,
                "LLM_STREAM" => self.llm.stream = parse_bool(&v).ok_or_else(|| bad("expected true or false"))?,
                "LLM_TIMEOUT_SECS" => self.llm.timeout_secs = v.parse().map_err(|_| bad("expected seconds"))?,
                "LLM_MAX_RETRIES" => self.llm.max_retries = v.parse().map_err(|_| bad("expected a count"))?,
                "LLM_RETRY_BASE_MS" => self.llm.retry_base_ms = v.parse().map_err(|_| bad("expected milliseconds"))?,
                "MAX_ITERATIONS" => self.agent.max_iterations = v.parse().map_err(|_| bad("expected a count"))?,
                "LEASE_TTL_MS" => self.agent.lease_ttl_ms = v.parse().map_err(|_| bad("expected milliseconds"))?,
                "SANDBOX" => {
                    if !["auto", "process", "docker"].contains(&v.as_str()) {
                        return Err(bad("expected `auto`, `process` or `docker`"));
                    }
                    self.sandbox.kind = v
                }
                "PROCESS_ISOLATION" => {
                    if !["auto", "uid", "bwrap", "none"].contains(&v.as_str()) {
                        return Err(bad("expected `auto`, `uid`, `bwrap` or `none`"));
                    }
                    self.sandbox.process_isolation = v
                }
                "PROCESS_NETWORK" => {
                    if !["own", "host"].contains(&v.as_str()) {
                        return Err(bad("expected `own` or `host`"));
                    }
                    self.sandbox.process_network = v
                }
                "PROCESS_UID_BASE" => self.sandbox.process_uid_base = v.parse().map_err(|_| bad("expected a uid"))?,
                "DOCKER_HOST" => self.sandbox.docker_host = v,
                "SANDBOX_PUBLISH_HOST" => self.sandbox.publish_host = v.parse().map_err(|_| bad("expected an IP address"))?,
                "SANDBOX_POOL_SIZE" => self.sandbox.pool_size = v.parse().map_err(|_| bad("expected a count"))?,
                "SANDBOX_IDLE_PAUSE_SECS" => self.sandbox.idle_pause_secs = v.parse().map_err(|_| bad("expected seconds"))?,
                "SANDBOX_IDLE_STOP_SECS" => self.sandbox.idle_stop_secs = v.parse().map_err(|_| bad("expected seconds"))?,
                "SANDBOX_START_TIMEOUT_SECS" => self.sandbox.start_timeout_secs = v.parse().map_err(|_| bad("expected seconds"))?,
                "SANDBOX_BASE_IMAGE" => {
                    // Shorthand for the default spec's base image.
                    let mut specs = self.sandbox.specs();
                    if let Some(s) = specs.iter_mut().find(|s| s.name == self.sandbox.default_spec) {
                        s.base_image = v;
                    }
                    self.sandbox.specs = specs;
                }
                "EXECUTOR_COMMAND" => self.sandbox.executor_command = v.split_whitespace().map(str::to_owned).collect(),
                "MAX_RUNNING_PER_USER" => self.sandbox.max_running_per_user = v.parse().map_err(|_| bad("expected a count"))?,
                "MAX_RUNNING_TOTAL" => self.sandbox.max_running_total = v.parse().map_err(|_| bad("expected a count"))?,
                "ADMINS" => self.gateway.admins = v.split(',').map(|s| s.trim().to_owned()).filter(|s| !s.is_empty()).collect(),
                "AUTH_FAILURES_PER_MINUTE" => self.gateway.auth_failures_per_minute = v.parse().map_err(|_| bad("expected a count"))?,
                "TRUSTED_PROXIES" => {
                    let list: Vec<String> = v.split(',').map(|s| s.trim().to_owned()).filter(|s| !s.is_empty()).collect();
                    if let Some(bad_one) = list.iter().find(|c| crate::netaddr::Cidr::parse(c).is_none()) {
                        return Err(bad(&format!("`{bad_one}` is not an IP address or CIDR range (like 10.0.0.0/8)")));
                    }
                    self.gateway.trusted_proxies = list
                }
                "HTTP_HEADER_TIMEOUT_SECS" | "HTTP_BODY_TIMEOUT_SECS" | "STEP_UP_SECS" => {
                    let secs: u64 = v.parse().ok().filter(|s| *s > 0).ok_or_else(|| bad("expected seconds, at least 1"))?;
                    match key {
                        "HTTP_HEADER_TIMEOUT_SECS" => self.gateway.http_header_timeout_secs = secs,
                        "HTTP_BODY_TIMEOUT_SECS" => self.gateway.http_body_timeout_secs = secs,
                        _ => self.gateway.step_up_secs = secs,
                    }
                }
                "HTTP_MAX_CONNECTIONS" | "HTTP_MAX_CONNECTIONS_PER_CLIENT" => {
                    let n: usize = v.parse().ok().filter(|n| *n > 0).ok_or_else(|| bad("expected a count, at least 1"))?;
                    if key == "HTTP_MAX_CONNECTIONS" {
                        self.gateway.http_max_connections = n
                    } else {
                        self.gateway.http_max_connections_per_client = n
                    }
                }
                "PUBLIC_URL" if !(v.is_empty() || v.starts_with("http://") || v.starts_with("https://")) => {
                    return Err(bad("expected the http:// or https:// URL people open the web workspace at"));
                }
                "PUBLIC_URL" => self.gateway.public_url = v.trim_end_matches('/').to_owned(),
                "OIDC_ISSUER" if !(v.is_empty() || v.starts_with("http://") || v.starts_with("https://")) => {
                    return Err(bad("expected the identity provider's issuer URL (https://...)"));
                }
                "OIDC_ISSUER" => self.gateway.oidc_issuer = v.trim_end_matches('/').to_owned(),
                "OIDC_CLIENT_ID" => self.gateway.oidc_client_id = v,
                "OIDC_CLIENT_SECRET" => self.gateway.oidc_client_secret = v,
                "OIDC_ALLOWED_DOMAINS" => {
                    self.gateway.oidc_allowed_domains =
                        v.split(',').map(|d| d.trim().trim_start_matches('@').to_lowercase()).filter(|d| !d.is_empty()).collect();
                }
                "OIDC_REQUIRED_GROUP" => self.gateway.oidc_required_group = v.trim().to_owned(),
                "SLACK_OIDC_ISSUER" if !(v.starts_with("http://") || v.starts_with("https://")) => {
                    return Err(bad("expected Slack's issuer URL (https://slack.com)"));
                }
                "SLACK_OIDC_ISSUER" => self.gateway.slack_oidc_issuer = v.trim_end_matches('/').to_owned(),
                "SLACK_OIDC_CLIENT_ID" => self.gateway.slack_oidc_client_id = v,
                "SLACK_OIDC_CLIENT_SECRET" => self.gateway.slack_oidc_client_secret = v,
                "AUDIT_RETENTION_DAYS" => {
                    self.gateway.audit_retention_days = v.parse().ok().filter(|d| *d > 0).ok_or_else(|| bad("expected days, at least 1"))?
                }
                "RATE_LIMIT_PER_MINUTE" => self.gateway.rate_limit_per_minute = v.parse().map_err(|_| bad("expected a count"))?,
                "MAX_BODY_BYTES" => self.gateway.max_body_bytes = v.parse().map_err(|_| bad("expected bytes"))?,
                "WEBHOOK_ALLOW" => self.webhooks.allow = network_classes(&v).map_err(|e| bad(&e))?,
                "LLM_PROFILE_ALLOW" => self.llm.profile_allow = network_classes(&v).map_err(|e| bad(&e))?,
                "MCP_ALLOW" => self.mcp.allow = network_classes(&v).map_err(|e| bad(&e))?,
                "MCP_URL" => self.mcp.halyard_url = v,
                "GIT_API_ALLOW" => self.gateway.git_api_allow = network_classes(&v).map_err(|e| bad(&e))?,
                "MCP_SERVERS" => {
                    self.mcp.servers =
                        serde_json::from_str(&v).map_err(|e| bad(&format!("expected a JSON object of servers by name ({e})")))?
                }
                "WEBHOOK_MAX_ATTEMPTS" => self.webhooks.max_attempts = v.parse().map_err(|_| bad("expected a count"))?,
                "WEBHOOK_RETRY_BASE_MS" => self.webhooks.retry_base_ms = v.parse().map_err(|_| bad("expected milliseconds"))?,
                "WEBHOOK_RETRY_MAX_MS" => self.webhooks.retry_max_ms = v.parse().map_err(|_| bad("expected milliseconds"))?,
                "WEBHOOK_TIMEOUT_SECS" => self.webhooks.timeout_secs = v.parse().map_err(|_| bad("expected seconds"))?,
                "WEBHOOK_DISABLE_AFTER_SECS" => self.webhooks.disable_after_secs = v.parse().map_err(|_| bad("expected seconds"))?,
                "AUTOMATION_TICK_GRACE_SECS" => self.automations.tick_grace_secs = v.parse().map_err(|_| bad("expected seconds"))?,
                "TITLE_USE_LLM" => self.titles.use_llm = parse_bool(&v).ok_or_else(|| bad("expected true or false"))?,
                "TITLE_MODEL" => self.titles.model = Some(v),
                "TITLE_BASE_URL" => self.titles.base_url = Some(v),
                "MAX_STARTING_PER_USER" => self.gateway.max_starting_per_user = v.parse().map_err(|_| bad("expected a count"))?,
                "LLM_MAX_CONCURRENT" => self.llm.max_concurrent = v.parse().map_err(|_| bad("expected a count"))?,
                "IDLE_EVICT_SECS" => self.agent.idle_evict_secs = v.parse().map_err(|_| bad("expected seconds"))?,
                "COMMAND_TIMEOUT_SECS" => self.agent.command_timeout_secs = v.parse().map_err(|_| bad("expected seconds"))?,
                "CELL_TIMEOUT_SECS" => self.agent.cell_timeout_secs = v.parse().map_err(|_| bad("expected seconds"))?,
                "OUTPUT_CAP_BYTES" => self.sandbox.output_cap_bytes = v.parse().map_err(|_| bad("expected bytes"))?,
                "SANDBOX_BROWSER_IDLE_SECS" => self.sandbox.browser_idle_secs = v.parse().map_err(|_| bad("expected seconds"))?,
                "SANDBOX_VSCODE_IDLE_SECS" => self.sandbox.vscode_idle_secs = v.parse().map_err(|_| bad("expected seconds"))?,
                "PROCESS_UID_COUNT" => self.sandbox.process_uid_count = v.parse().map_err(|_| bad("expected a count"))?,
                "SANDBOX_DEFAULT_SPEC" => self.sandbox.default_spec = v,
                "MAX_BUDGET_USD" => self.agent.max_budget_usd = v.parse().map_err(|_| bad("expected US dollars, like 2.5"))?,
                "MAX_TOKENS" => self.agent.max_tokens = v.parse().map_err(|_| bad("expected a count"))?,
                "LLM_PRICE" => {
                    // `prompt,completion[,cached]` for the configured model.
                    let parts: Vec<f64> = v
                        .split(',')
                        .map(|p| p.trim().parse::<f64>())
                        .collect::<Result<_, _>>()
                        .map_err(|_| bad("expected `prompt,completion[,cached]` in USD per million tokens, like 0.15,0.6,0.075"))?;
                    let price = match parts[..] {
                        [prompt, completion] => Price { prompt, completion, cached: None },
                        [prompt, completion, cached] => Price { prompt, completion, cached: Some(cached) },
                        _ => return Err(bad("expected `prompt,completion[,cached]` in USD per million tokens")),
                    };
                    self.llm.prices.insert(self.llm.model.clone(), price);
                }
                "STUCK_REPEATS" => self.agent.stuck_repeats = v.parse().map_err(|_| bad("expected a count"))?,
                "STUCK_ERRORS" => self.agent.stuck_errors = v.parse().map_err(|_| bad("expected a count"))?,
                "STUCK_MONOLOGUE" => self.agent.stuck_monologue = v.parse().map_err(|_| bad("expected a count"))?,
                "STUCK_ALTERNATIONS" => self.agent.stuck_alternations = v.parse().map_err(|_| bad("expected a count"))?,
                "MAX_DELEGATION_DEPTH" => self.agent.max_delegation_depth = v.parse().map_err(|_| bad("expected a depth, like 2"))?,
                "MAX_DELEGATES" => self.agent.max_delegates = v.parse().map_err(|_| bad("expected a count"))?,
                "AGENTS_DIR" => self.agent.agents_dir = v.clone(),
                "LLM_PROVIDER" => {
                    if !crate::llm::PROVIDERS.contains(&v.as_str()) {
                        return Err(bad("expected `openai`, `anthropic`, `openai-responses` or `gemini`"));
                    }
                    self.llm.provider = v
                }
                "LLM_CONTEXT_WINDOW" => self.llm.context_window = v.parse().map_err(|_| bad("expected tokens"))?,
                "LLM_CONTEXT_RESERVE" => self.llm.context_reserve = v.parse().map_err(|_| bad("expected tokens"))?,
                "LLM_MAX_OUTPUT_TOKENS" => self.llm.max_output_tokens = v.parse().map_err(|_| bad("expected tokens"))?,
                other if USED_ELSEWHERE.contains(&other) => {}
                other => {
                    let hint = nearest(other).map(|n| format!("; did you mean HALYARD_{n}?")).unwrap_or_default();
                    return Err(bad(&format!("no such setting{hint} (services/platform/README.md lists them)")));
                }
            }
        }
        Ok(())
    }

    /// The node id, or a fresh one when unset.
    pub fn node_id_or_random(&self) -> String {
        if self.node_id.is_empty() { uuid::Uuid::new_v4().simple().to_string() } else { self.node_id.clone() }
    }
}

fn parse_bool(v: &str) -> Option<bool> {
    match v.to_ascii_lowercase().as_str() {
        "1" | "true" | "yes" | "on" => Some(true),
        "0" | "false" | "no" | "off" => Some(false),
        _ => None,
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
        for name in ENV_NAMES {
            let value = match *name {
                "SANDBOX" => "process",
                "PROCESS_ISOLATION" => "uid",
                "PROCESS_NETWORK" => "host",
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
