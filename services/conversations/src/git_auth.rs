//! Clone credentials. A start from a repository on the host of one of the owner's git
//! providers clones with that provider's token, handed to that one `git clone` as
//! configuration in its environment (`GIT_CONFIG_*`: an `Authorization` header) in a subshell
//! ([`ExecRequest::scoped`]). Nothing of it stays in the sandbox: not in `.git/config` (the
//! remote URL carries no credentials), not in the shell's environment, not in a file.
//!
//! [`ExecRequest::scoped`]: halyard_protocol::executor::ExecRequest::scoped

use std::collections::BTreeMap;

use base64::Engine;
use halyard_platform::net::url_host;
use halyard_platform::vault;
use halyard_protocol::UserId;
use halyard_protocol::subjects;
use halyard_protocol::user::UserGitProviders;

use crate::Ctx;

/// The environment of a clone of `url` by `owner`: empty unless one of their providers serves
/// its host. `Err` if the provider's token cannot be read.
pub async fn clone_env(ctx: &Ctx, owner: &UserId, url: &str) -> Result<BTreeMap<String, String>, String> {
    let mut env = BTreeMap::from([("GIT_TERMINAL_PROMPT".to_owned(), "0".to_owned())]);
    let Some(host) = url_host(url) else { return Ok(env) };
    let stored: UserGitProviders = match ctx.user_kv.get(subjects::user_git_key(owner)).await {
        Ok(Some(bytes)) => serde_json::from_slice(&bytes).map_err(|e| format!("your git providers: {e}"))?,
        Ok(None) => return Ok(env),
        Err(e) => return Err(format!("your git providers could not be read: {e}")),
    };
    let Some((name, provider)) = stored.providers.iter().find(|(_, p)| p.host.eq_ignore_ascii_case(&host)) else { return Ok(env) };
    let token = ctx
        .vault
        .open(&vault::git_token_slot(&owner.0, name), &provider.token_sealed)
        .map_err(|e| format!("the token of git provider `{name}` cannot be read: {e}; store it again"))?;
    let basic = base64::engine::general_purpose::STANDARD.encode(format!("{}:{token}", provider.username));
    env.insert("GIT_CONFIG_COUNT".into(), "1".into());
    env.insert("GIT_CONFIG_KEY_0".into(), "http.extraHeader".into());
    env.insert("GIT_CONFIG_VALUE_0".into(), format!("Authorization: Basic {basic}"));
    tracing::info!(user = %owner, provider = %name, %host, "cloning with the user's git provider");
    Ok(env)
}
