//! What handlers of several kinds do with Halyard's state, apart from HTTP: automations'
//! definitions ([`automations`]), a user's configuration
//! in the key-value store ([`user_store`]), a conversation's sandbox woken for a request
//! ([`sandbox`]), commands and questions to the agent runners ([`commands`]), and a
//! conversation's start, retry or fork sent ([`starts`]).

pub mod agents;
pub mod automations;
pub mod batches;
pub mod commands;
pub mod environments;
pub mod plugins;
pub mod sandbox;
pub mod starts;
pub mod user_config;
pub mod user_store;
