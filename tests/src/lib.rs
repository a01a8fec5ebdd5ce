#![allow(clippy::expect_used, clippy::unwrap_used)] // test support: a failed expectation is a failed test
//! Test support for Halyard's end-to-end tests and benchmarks:
//!
//! * [`llm`]: a scripted LLM server that speaks the OpenAI chat-completions wire protocol
//!   (tool calls, streaming and plain) over real HTTP;
//! * [`harness`]: runs the real `halyard` binary (`halyard up`, with its embedded
//!   nats-server) in a temporary data dir, and talks to its HTTP and WebSocket API;
//! * [`git_http`]: a private git server (git's own `http-backend` behind basic auth);
//! * [`marketplace`]: a plugin marketplace's repository, with a plugin of every part;
//! * [`github`]: a scripted GitHub REST server that checks the token it is sent;
//! * [`chaos`]: conversations and webhooks through a cluster while its processes are killed.

pub mod azure;
pub mod bitbucket;
pub mod bitbucket_dc;
pub mod chaos;
pub mod docker;
pub mod events;
pub mod git_http;
pub mod github;
pub mod gitlab;
pub mod harness;
pub mod jira;
pub mod linear;
pub mod llm;
pub mod marketplace;
pub mod mcp_oauth;
pub mod oidc;
pub mod procs;
pub mod python;
pub mod receiver;
pub mod registry;
pub mod slack;

pub use azure::AzureServer;
pub use bitbucket::BitbucketServer;
pub use bitbucket_dc::BitbucketDcServer;
pub use git_http::{GitServer, bare_repository, git};
pub use github::GithubServer;
pub use gitlab::GitlabServer;
pub use harness::{Api, Halyard, HalyardOptions, NatsCluster, NatsServer};
pub use jira::JiraServer;
pub use linear::LinearServer;
pub use llm::{Reply, ScriptedLlm};
pub use oidc::OidcProvider;
pub use receiver::Receiver;
pub use slack::SlackServer;

pub use events::finished;

/// Installs the TLS crypto provider reqwest needs (once per process).
pub fn init() {
    let _ = rustls::crypto::ring::default_provider().install_default();
}

/// The gauges by which each service says what it holds in memory for conversations (all zero
/// once every conversation is idle).
pub const IN_MEMORY_GAUGES: [&str; 5] = [
    "halyard_agent_conversations_in_memory",
    "halyard_sandbox_actors_in_memory",
    "halyard_gateway_views_in_memory",
    "halyard_gateway_live_channels",
    "halyard_webhook_conversations_in_memory",
];
