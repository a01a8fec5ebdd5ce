//! What the service's tasks share ([`Ctx`]), and what every kind uses: the checked client for
//! calls on an owner's behalf, an automation's own credential, links to the web workspace.

use std::sync::Arc;

use async_nats::jetstream;
use halyard_platform::Config;
use halyard_platform::kv_mirror::Mirror;
use halyard_platform::vault::Vault;
use halyard_protocol::automation::Automation;

/// What the service's tasks share.
#[derive(Clone)]
pub struct Ctx {
    pub config: Arc<Config>,
    pub js: jetstream::Context,
    /// `def.<id>` and `tick.<id>`.
    pub bucket: jetstream::kv::Store,
    /// Owners' settings and git providers (read, never opened).
    pub user_kv: jetstream::kv::Store,
    /// The automations, followed.
    pub automations: Mirror<Automation>,
    /// Opens owners' git provider tokens, to answer on their forges.
    pub vault: Arc<Vault>,
}

/// The client every call on a user's behalf goes through (the checked resolver, no redirects).
pub fn http(allow: &[String]) -> Result<reqwest::Client, String> {
    halyard_platform::outbound::builder(allow).connect_timeout(std::time::Duration::from_secs(5)).build().map_err(|e| e.to_string())
}

/// The automation's own outbound credential (`what`: a bot token, an API key), opened.
pub fn open_token(ctx: &Ctx, a: &Automation, what: &str) -> Result<String, String> {
    let sealed = a.token_sealed.as_deref().ok_or_else(|| format!("the automation has no {what}; set it again"))?;
    ctx.vault
        .open(&halyard_protocol::automation::token_slot(&a.id), sealed)
        .map_err(|e| format!("the {what} does not open ({e}); set it again"))
}

/// Where a person sees conversation `id` in the web workspace.
pub fn conversation_link(config: &Config, id: halyard_protocol::ConversationId) -> String {
    config.web_link(&format!("/c/{id}"))
}
