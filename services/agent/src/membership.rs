//! Whether a conversation's owner is still in its organization: the organization's secrets,
//! LLM profiles, git providers, MCP servers and skills are for its members only, so a run whose
//! owner left (or was removed) stops before its next step, with an `agent_error` that says why,
//! instead of going on with what it was given ([`halyard_platform::membership`] says who is in).

use halyard_protocol::UserId;

use crate::ctx::Ctx;

/// Why `owner`'s conversation in `org` may not go on (`None`: they are a member).
pub async fn refused(ctx: &Ctx, org: &str, owner: &UserId) -> Result<Option<String>, String> {
    let member = halyard_platform::membership::is_member(&ctx.user_kv, org, owner).await?;
    Ok((!member).then(|| {
        format!(
            "{owner} is no longer a member of organization {org}: this conversation runs on the organization's secrets, \
             profiles and tools, so it stopped; a member of {org} can start it again"
        )
    }))
}
