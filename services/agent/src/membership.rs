//! Whether a conversation's owner is still in its organization: the organization's secrets,
//! LLM profiles, git providers, MCP servers and skills are for its members only, so a run whose
//! owner left (or was removed) stops before its next step, with an `agent_error` that says why,
//! instead of going on with what it was given. Read from the members the gateway copies to the
//! user bucket on every change (`orgmembers.<org>`); an organization with no copy yet (made
//! before copies were kept) is taken as it was.

use halyard_protocol::org::OrgMembers;
use halyard_protocol::{UserId, subjects};

use crate::ctx::Ctx;

/// Why `owner`'s conversation in `org` may not go on (`None`: they are a member).
pub async fn refused(ctx: &Ctx, org: &str, owner: &UserId) -> Result<Option<String>, String> {
    let key = subjects::org_members_key(org);
    let members: OrgMembers = match ctx.user_kv.get(&key).await {
        Ok(Some(bytes)) => serde_json::from_slice(&bytes).map_err(|e| format!("{key}: {e}"))?,
        Ok(None) => return Ok(None),
        Err(e) => return Err(format!("{key}: {e}")),
    };
    Ok((!members.members.contains(owner)).then(|| {
        format!(
            "{owner} is no longer a member of organization {org}: this conversation runs on the organization's secrets, \
             profiles and tools, so it stopped; a member of {org} can start it again"
        )
    }))
}
