//! The gateway's settings: who administers, who may sign in and how, limits on requests and
//! connections, the public URL, the audit trail, where users' forges may be.

use serde::{Deserialize, Serialize};

use crate::settings::set;
use crate::settings::{Setting, list, network_classes, number, positive, url};

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
    /// The read models' page cache in memory, in MiB (sled's own is 1 GiB by default: it kept
    /// every conversation's rows in memory long after they went idle).
    pub read_model_cache_mb: u64,
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
            read_model_cache_mb: 64,
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

/// `HALYARD_*` settings of the gateway.
pub(crate) const SETTINGS: &[Setting<GatewayConfig>] = &[
    set!("ADMINS", "(none)", "bootstrap users who may use the admin API", |c, v| c.admins = list(v)),
    set!(
        "AUTH_FAILURES_PER_MINUTE",
        "`30`",
        "failed authentications per client address (and per key id) before failures are answered 429, slowly; a valid key is never refused (0: no limit)",
        |c, v| c.auth_failures_per_minute = number(v, "a count")?
    ),
    set!("TRUSTED_PROXIES", "", "addresses or CIDR ranges of reverse proxies whose `X-Forwarded-For` names the client", |c, v| {
        let proxies = list(v);
        if let Some(bad) = proxies.iter().find(|c| crate::netaddr::Cidr::parse(c).is_none()) {
            return Err(format!("`{bad}` is not an IP address or CIDR range (like 10.0.0.0/8)"));
        }
        c.trusted_proxies = proxies
    }),
    set!("HTTP_HEADER_TIMEOUT_SECS", "`10`", "time to send a request's headers; also how long a kept-alive connection may idle", |c, v| {
        c.http_header_timeout_secs = positive(v, "seconds")?
    }),
    set!("HTTP_BODY_TIMEOUT_SECS", "`30`", "how long a request body may send nothing", |c, v| c.http_body_timeout_secs =
        positive(v, "seconds")?),
    set!(
        "STEP_UP_SECS",
        "`300`",
        "a session older than this must show its key again (`POST /session/step-up`) to issue keys, change roles or secrets",
        |c, v| c.step_up_secs = positive(v, "seconds")?
    ),
    set!("HTTP_MAX_CONNECTIONS", "`10000`", "open connections per listener (API, apps)", |c, v| c.http_max_connections =
        positive(v, "a count")?),
    set!("HTTP_MAX_CONNECTIONS_PER_CLIENT", "`256`", "open connections per client address (IPv6 by /64)", |c, v| c
        .http_max_connections_per_client =
        positive(v, "a count")?),
    set!("PUBLIC_URL", "", "the URL people open the web workspace at; apps may not share its site", |c, v| c.public_url =
        url(v, true, "the http:// or https:// URL people open the web workspace at")?),
    set!(
        "OIDC_ISSUER",
        "",
        "single sign-on: the OpenID Connect provider's issuer URL (discovery at its `/.well-known/openid-configuration`)",
        |c, v| c.oidc_issuer = url(v, true, "the identity provider's issuer URL (https://...)")?
    ),
    set!(
        "OIDC_CLIENT_ID",
        "",
        "Halyard's client at that provider; its redirect URL is `<HALYARD_PUBLIC_URL>/api/v1/auth/sso/callback`",
        |c, v| c.oidc_client_id = v.to_owned()
    ),
    set!(
        "OIDC_CLIENT_SECRET",
        "",
        "Halyard's client at that provider; its redirect URL is `<HALYARD_PUBLIC_URL>/api/v1/auth/sso/callback`",
        |c, v| c.oidc_client_secret = v.to_owned()
    ),
    set!(
        "OIDC_ALLOWED_DOMAINS",
        "",
        "comma-separated domains whose verified addresses become new users at their first single sign-on",
        |c, v| {
            c.oidc_allowed_domains = list(v).iter().map(|d| d.trim_start_matches('@').to_lowercase()).filter(|d| !d.is_empty()).collect()
        }
    ),
    set!(
        "OIDC_REQUIRED_GROUP",
        "",
        "a `groups` claim value that makes an identity a new user at its first single sign-on (with neither, only users an administrator made sign in that way)",
        |c, v| c.oidc_required_group = v.trim().to_owned()
    ),
    set!("SLACK_OIDC_ISSUER", "`https://slack.com`", "Slack's OpenID issuer", |c, v| c.slack_oidc_issuer =
        url(v, false, "Slack's issuer URL (https://slack.com)")?),
    set!(
        "SLACK_OIDC_CLIENT_ID",
        "",
        "\"Sign in with Slack\" (your Slack app's OpenID Connect client): proves who a Slack user is before an automation may run as them; its redirect URL is `<HALYARD_PUBLIC_URL>/api/v1/auth/slack/callback`",
        |c, v| c.slack_oidc_client_id = v.to_owned()
    ),
    set!(
        "SLACK_OIDC_CLIENT_SECRET",
        "",
        "\"Sign in with Slack\" (your Slack app's OpenID Connect client): proves who a Slack user is before an automation may run as them; its redirect URL is `<HALYARD_PUBLIC_URL>/api/v1/auth/slack/callback`",
        |c, v| c.slack_oidc_client_secret = v.to_owned()
    ),
    set!("READ_MODEL_CACHE_MB", "`64`", "memory the gateway's read models keep of their rows (MiB); the rest is read from disk", |c, v| {
        c.read_model_cache_mb = positive(v, "MiB")?
    }),
    set!("AUDIT_RETENTION_DAYS", "`400`", "how long the audit trail keeps a record readable", |c, v| c.audit_retention_days =
        positive(v, "days")?),
    set!("RATE_LIMIT_PER_MINUTE", "`600`", "write requests per user", |c, v| c.rate_limit_per_minute = number(v, "a count")?),
    set!("MAX_BODY_BYTES", "`1048576`", "largest request body", |c, v| c.max_body_bytes = number(v, "bytes")?),
    set!("MAX_STARTING_PER_USER", "`20`", "conversations a user may have starting at once", |c, v| c.max_starting_per_user =
        number(v, "a count")?),
    set!(
        "GIT_API_ALLOW",
        "(none)",
        "destination classes users' git providers may be reached at, by their `api_url` (the gateway calls it) and by the git proxy (clone, fetch and push): `loopback`, `private`, `link-local`",
        |c, v| c.git_api_allow = network_classes(v)?
    ),
];
