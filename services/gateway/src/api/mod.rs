//! The handlers, thin: each parses its request, asks the layers below, and shapes the answer.
//! Grouped by what they serve: [`conversations`], [`workspace`] (a conversation's sandbox as its
//! owner reaches it), [`settings`] (what a user sets up), [`accounts`] (users, keys, sessions,
//! organizations), [`webhooks`] and their [`deliveries`], [`automations`] (and their public hooks), [`batches`], [`sandboxes`], Halyard's
//! own MCP server ([`mcp`]), [`plugins`] and their marketplaces, and the browser app's files ([`web`]).

pub mod accounts;
pub mod automations;
pub mod batches;
pub mod conversations;
pub mod deliveries;
pub mod mcp;
pub mod plugins;
pub mod sandboxes;
pub mod settings;
pub mod web;
pub mod webhooks;
pub mod workspace;
