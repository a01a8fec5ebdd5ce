//! What each user sets up for their conversations: defaults and LLM profiles, secrets, git
//! providers (and what their forges answer: repositories, branches), MCP servers (and OAuth sign-ins
//! to them), environments
//! (and the snapshots made from them, in their own bucket); all kept in
//! the user's key-value store ([`crate::domain::user_store`]).

pub mod agent_logins;
pub mod custom_agents;
pub mod defaults;
pub mod environments;
pub mod git_providers;
pub mod llm_probe;
pub mod llm_profiles;
pub mod mcp_servers;
pub mod mcp_sign_in;
pub mod repositories;
pub mod secrets;
pub mod snapshots;
pub mod templates;
