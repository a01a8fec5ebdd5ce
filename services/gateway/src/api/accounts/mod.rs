//! The accounts' routes: the web workspace's sessions and WebSocket tickets, single sign-on,
//! users ([`admin`]) and API keys, the administrators' and users' own ([`keys`]), organizations, their members,
//! invitations, settings, budgets and shared resources ([`orgs`] and the `org_*` files), and what
//! everyone spent ([`usage`]). Who exists is [`crate::state::registry`]; how a request proves who
//! it is, [`crate::auth`]; the audit trail, [`crate::audit`].

pub mod admin;
pub mod invitations;
pub mod keys;
pub mod oidc;
pub mod org_budgets;
pub mod org_git;
pub mod org_mcp;
pub mod org_profiles;
pub mod org_secrets;
pub mod org_skills;
pub mod org_templates;
pub mod orgs;
pub mod session;
pub mod sso;
pub mod sso_users;
pub mod tickets;
pub mod usage;
