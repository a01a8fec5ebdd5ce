//! `/api/v1/automations` and `/api/v1/hooks/{id}`: users' automations, and the one public
//! inbound route, where what a forge, a chat or a program sends is verified and handed on; and
//! `/api/v1/slack-links/{code}`, where a Slack user links themselves to their Halyard account.
//!
//! The definitions live in the `halyard_automations` bucket, which every gateway keeps in memory
//! ([`halyard_platform::kv_mirror`]) so that a hook is verified without asking the server; the
//! automation service follows the same bucket and does the rest. Runs come from the read models.

pub mod hooks;
pub mod routes;
pub mod slack_links;
pub mod slack_sign_in;
pub mod trigger_checks;
pub mod triggers;
pub mod verify;
pub mod views;
