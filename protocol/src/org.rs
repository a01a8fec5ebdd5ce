//! Organizations: a team of users with roles. Stored as `org.<name>` in the accounts bucket
//! (`halyard_auth`), which every gateway follows, so a membership change is known everywhere as
//! soon as it reaches each gateway.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::UnixMillis;
use crate::envelope::Payload;
use crate::ids::UserId;

/// What a member may do in an organization.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Role {
    /// Uses what the organization offers.
    Member,
    /// Also adds and removes members and sets the organization's settings.
    Admin,
    /// Also changes roles; an organization always keeps at least one.
    Owner,
}

impl Role {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Member => "member",
            Self::Admin => "admin",
            Self::Owner => "owner",
        }
    }

    /// Whether the role manages members and settings (owners and admins).
    pub fn manages(self) -> bool {
        self >= Self::Admin
    }
}

/// One organization and its members.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Org {
    /// Letters, digits, `-` and `_`; how the API names it.
    pub name: String,
    pub members: BTreeMap<UserId, Role>,
    pub created_by: UserId,
    pub created_ms: UnixMillis,
    pub updated_ms: UnixMillis,
    #[serde(default)]
    pub settings: OrgSettings,
}

/// What an organization's owners and admins set for its conversations.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct OrgSettings {
    /// The organization's LLM profile its conversations use when they name none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub default_llm_profile: Option<String>,
    /// Its conversations may use no other profile.
    #[serde(default)]
    pub enforce_llm_profile: bool,
}

impl Org {
    /// `user`'s role, if a member.
    pub fn role_of(&self, user: &UserId) -> Option<Role> {
        self.members.get(user).copied()
    }

    /// How many owners it has.
    pub fn owners(&self) -> usize {
        self.members.values().filter(|r| **r == Role::Owner).count()
    }
}

impl Payload for Org {
    fn kind(&self) -> String {
        "auth.org".into()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn roles_order_and_manage() {
        assert!(Role::Owner > Role::Admin && Role::Admin > Role::Member);
        assert!(Role::Owner.manages() && Role::Admin.manages() && !Role::Member.manages());
        assert_eq!(serde_json::to_string(&Role::Admin).unwrap_or_default(), "\"admin\"");
    }
}
