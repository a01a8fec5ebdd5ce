//! Whether a user is still in an organization, read from the members the gateway copies to the
//! user bucket on every change (`orgmembers.<org>`), where the services that hand out an
//! organization's things (the agent runner, the conversation manager) can read them. An
//! organization with no copy yet (made before copies were kept) is taken as it was.

use async_nats::jetstream::kv;
use halyard_protocol::org::OrgMembers;
use halyard_protocol::{UserId, subjects};

/// Whether `user` is a member of `org` now.
pub async fn is_member(user_kv: &kv::Store, org: &str, user: &UserId) -> Result<bool, String> {
    let key = subjects::org_members_key(org);
    match user_kv.get(&key).await {
        Ok(Some(bytes)) => {
            let members: OrgMembers = serde_json::from_slice(&bytes).map_err(|e| format!("{key}: {e}"))?;
            Ok(members.members.contains(user))
        }
        Ok(None) => Ok(true),
        Err(e) => Err(format!("{key}: {e}")),
    }
}
