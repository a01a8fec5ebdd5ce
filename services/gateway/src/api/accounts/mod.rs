//! Who is calling: users and API keys ([`registry`]), how a request proves it ([`auth`]), the
//! web workspace's sessions and WebSocket tickets, the administrators' and users' own key
//! management ([`admin`]), organizations and their members ([`orgs`]), the audit trail of what
//! everyone did ([`audit`]) and what they spent ([`usage`]).

pub mod admin;
pub mod invitations;
pub mod oidc;
pub mod org_budgets;
pub mod org_git;
pub mod org_mcp;
pub mod org_profiles;
pub mod org_secrets;
pub mod org_skills;
pub mod orgs;
pub mod session;
pub mod sso;
pub mod sso_users;
pub mod tickets;
pub mod usage;
