//! Who may do what on the bus. Every NATS connection authenticates, and each service role may
//! touch only its own subjects: the permissions are data (`nats/roles.json`), turned here into
//! the embedded nats-server's configuration, with one generated password per role kept in the
//! data dir (readable only by Halyard).
//!
//! Each role also gets an inbox prefix of its own (`_INBOX_<role>`), which only it may
//! subscribe to: with the shared default `_INBOX.>`, any connection could read the replies
//! meant for another (JetStream answers, messages of ordered consumers).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::error::{BusError, BusErrorKind};

/// The role permissions, as committed under `nats/`.
pub const ROLES_JSON: &str = include_str!("../../../nats/roles.json");

/// The role that declares the topology; never given to a service.
pub const ADMIN: &str = "admin";
/// The read-only role for external subscribers.
pub const READER: &str = "reader";

/// What one role may publish and subscribe to.
#[derive(Clone, Debug, Deserialize)]
pub struct RoleDecl {
    pub description: String,
    pub publish: Vec<String>,
    pub subscribe: Vec<String>,
    /// May answer requests it received (publish to their reply subjects, once each).
    #[serde(default)]
    pub allow_responses: bool,
}

/// Parses the committed role declarations.
pub fn role_decls() -> Result<BTreeMap<String, RoleDecl>, BusError> {
    serde_json::from_str(ROLES_JSON).map_err(|e| BusError::new(BusErrorKind::Topology, format!("nats/roles.json: {e}")))
}

/// The inbox prefix of a role: replies to it go to `_INBOX_<role>.…`.
pub fn inbox_prefix(role: &str) -> String {
    format!("_INBOX_{role}")
}

/// How a connection proves who it is.
#[derive(Clone, Default, Serialize, Deserialize, PartialEq, Eq)]
pub enum NatsAuth {
    /// An open server (tests of `halyard serve`, a developer's own nats-server).
    #[default]
    None,
    UserPassword {
        user: String,
        password: String,
    },
    /// A `.creds` file (JWT and NKey seed) of an operator-managed account.
    CredsFile(PathBuf),
}

impl std::fmt::Debug for NatsAuth {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::None => f.write_str("None"),
            Self::UserPassword { user, .. } => write!(f, "UserPassword({user}, ***)"),
            Self::CredsFile(p) => write!(f, "CredsFile({})", p.display()),
        }
    }
}

/// One role's user and password on the embedded server.
#[derive(Clone, Serialize, Deserialize)]
pub struct RoleCredentials {
    pub user: String,
    pub password: String,
}

/// The embedded server's users: one per role, generated once, kept in
/// `<data dir>/nats-credentials.json` (mode 0600).
#[derive(Clone, Serialize, Deserialize)]
pub struct BusCredentials {
    pub roles: BTreeMap<String, RoleCredentials>,
}

impl std::fmt::Debug for BusCredentials {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BusCredentials").field("roles", &self.roles.keys().collect::<Vec<_>>()).finish()
    }
}

/// Where the embedded server's credentials are kept.
pub fn credentials_path(data_dir: &Path) -> PathBuf {
    data_dir.join("nats-credentials.json")
}

impl BusCredentials {
    /// Loads the credentials of `data_dir`, adding a password for every declared role that has
    /// none yet (and saving them if anything was added).
    pub fn load_or_create(data_dir: &Path, roles: &BTreeMap<String, RoleDecl>) -> Result<Self, BusError> {
        let fail = |e: &dyn std::fmt::Display| BusError::new(BusErrorKind::Server, e);
        let path = credentials_path(data_dir);
        let mut me = match std::fs::read_to_string(&path) {
            Ok(text) => serde_json::from_str(&text).map_err(|e| fail(&format!("{}: {e}", path.display())))?,
            Err(_) => Self { roles: BTreeMap::new() },
        };
        let mut changed = false;
        for role in roles.keys() {
            if !me.roles.contains_key(role) {
                me.roles.insert(role.clone(), RoleCredentials { user: role.clone(), password: crate::keys::random_secret() });
                changed = true;
            }
        }
        if changed {
            let text = serde_json::to_string_pretty(&me).map_err(|e| fail(&e))?;
            write_private(&path, &text).map_err(|e| fail(&format!("{}: {e}", path.display())))?;
        }
        Ok(me)
    }

    /// How `role` connects.
    pub fn auth(&self, role: &str) -> NatsAuth {
        match self.roles.get(role) {
            Some(c) => NatsAuth::UserPassword { user: c.user.clone(), password: c.password.clone() },
            None => NatsAuth::None,
        }
    }
}

/// Writes a file only its owner can read (created so, never widened on the way).
pub fn write_private(path: &Path, text: &str) -> std::io::Result<()> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let tmp = path.with_extension("tmp");
    let _ = std::fs::remove_file(&tmp);
    let mut f = std::fs::OpenOptions::new().write(true).create_new(true).mode(0o600).open(&tmp)?;
    f.write_all(text.as_bytes())?;
    f.sync_all()?;
    std::fs::rename(&tmp, path)
}

/// The `authorization` block of the server configuration: every role's user, with its
/// permissions and its private inbox.
pub fn authorization(creds: &BusCredentials, roles: &BTreeMap<String, RoleDecl>) -> serde_json::Value {
    let users: Vec<serde_json::Value> = roles
        .iter()
        .filter_map(|(name, decl)| {
            let c = creds.roles.get(name)?;
            let mut subscribe = decl.subscribe.clone();
            if name != ADMIN && name != READER {
                subscribe.push(format!("{}.>", inbox_prefix(name)));
            }
            let mut permissions = serde_json::json!({
                "publish": {"allow": decl.publish},
                "subscribe": {"allow": subscribe},
            });
            if decl.allow_responses {
                permissions["allow_responses"] = true.into();
            }
            Some(serde_json::json!({ "user": c.user, "password": c.password, "permissions": permissions }))
        })
        .collect();
    serde_json::json!({ "users": users })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_service_role_is_declared_and_none_but_admin_has_everything() {
        let roles = role_decls().unwrap();
        for role in ["admin", "gateway", "conversations", "sandbox", "agent", "callbacks", "titles", "automations", "reader"] {
            assert!(roles.contains_key(role), "{role} missing");
        }
        for (name, decl) in &roles {
            if name != ADMIN {
                assert!(!decl.publish.iter().any(|s| s == ">" || s == "halyard.>"), "{name} may publish anything");
                assert!(!decl.subscribe.iter().any(|s| s == ">"), "{name} may read anything");
            }
        }
        // The split the design asks for.
        let may_publish = |role: &str, prefix: &str| roles[role].publish.iter().any(|s| s.starts_with(prefix));
        assert!(!may_publish("gateway", "halyard.events"));
        assert!(!may_publish("agent", "halyard.sys.sandbox"));
        assert!(!may_publish("reader", "halyard.cmd"));
        for (name, decl) in roles.iter().filter(|(name, _)| *name != ADMIN) {
            let reads_deliveries = decl.publish.iter().any(|s| s.contains("MSG.NEXT.HALYARD_DELIVERIES"));
            assert_eq!(reads_deliveries, name == "callbacks", "{name}");
        }
    }

    #[test]
    fn credentials_are_generated_once_and_kept_private() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let roles = role_decls().unwrap();
        let a = BusCredentials::load_or_create(dir.path(), &roles).unwrap();
        let b = BusCredentials::load_or_create(dir.path(), &roles).unwrap();
        assert_eq!(a.roles["agent"].password, b.roles["agent"].password);
        assert_ne!(a.roles["agent"].password, a.roles["gateway"].password);
        let mode = std::fs::metadata(credentials_path(dir.path())).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
        let conf = authorization(&a, &roles).to_string();
        assert!(conf.contains("_INBOX_gateway.>") && conf.contains(&a.roles["titles"].password));
    }
}
