//! Environments: what a conversation's sandbox is set up with (setup commands, their variables
//! and secrets, what runs on every start), set up once and started from a snapshot after that.
//!
//! An environment is a user's (`envs.<user>` in the user bucket), an organization's
//! (`orgenvs.<org>`, named `@<org>/<name>`) or the deployment's (`envs`, named `/<name>`), stored as
//! an [`Environments`] set. A start names one in `environment`, or gets its organization's
//! default, else the deployment's.
//!
//! After setup succeeds, the sandbox supervisor keeps the result as a [`Snapshot`]: a committed
//! image (Docker) or a copy of the workspace and home (process sandboxes). Snapshots are entries
//! of [`SNAPSHOT_BUCKET`], one per *family* ([`family`]: the owner, the organization, the
//! environment's definition and the repository with its branch), whose `key` says what setup
//! depended on ([`key`]: the branch head, or the hashes of the files the environment names in
//! `cache_key`). The next start of the family starts from it, brings the repository up to date,
//! and runs setup again only if the key changed.
//!
//! Snapshots are the owner's alone: setup ran with the owner's secrets and repository access,
//! so another member's start never gets them, even of the same organization's environment.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::{UnixMillis, UserId};

/// Key-value bucket of snapshots: `<org token>.<owner token>.<family>` ([`snapshot_key`]) ->
/// [`Snapshot`] (JSON). Written by the sandbox supervisors, read by the conversation manager and
/// the gateway; the gateway deletes an entry to delete a snapshot, and the supervisor holding
/// its files or image removes them once no entry names them.
pub const SNAPSHOT_BUCKET: &str = "halyard_env_snapshots";

/// The key of the deployment's environments in the user bucket.
pub const DEPLOYMENT_KEY: &str = "envs";

/// The key of `user`'s environments in the user bucket.
pub fn user_key(user: &UserId) -> String {
    format!("envs.{user}")
}

/// The key of organization `org`'s environments in the user bucket.
pub fn org_key(org: &str) -> String {
    format!("orgenvs.{org}")
}

/// One environment's definition.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Environment {
    /// Commands run once, in the workspace after the clone, before the repository's own
    /// `.openhands/setup.sh` (what `postCreateCommand` is to a dev container).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub setup: Vec<String>,
    /// Commands run on every start, after setup or after a snapshot is restored.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub post_start: Vec<String>,
    /// Variables setup and `post_start` run with (not the agent's commands).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub env: BTreeMap<String, String>,
    /// Names of the starter's secrets setup runs with, as variables of the same name; gone before
    /// the agent's first step, and never in a snapshot.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub setup_secrets: Vec<String>,
    /// Files of the repository (for example lock files) whose contents key the snapshot: setup
    /// runs again only when one changes. Empty: the branch's head commit keys it.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub cache_key: Vec<String>,
    /// How long a snapshot is used after it was made (absent: the deployment's setting).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub snapshot_ttl_secs: Option<u64>,
    /// Whether conversations of its scope (the organization, or the deployment) get it when they
    /// name none.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub default: bool,
    /// Container sandboxes kept started from each of its snapshots, ready for the next starts.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub pool_size: u32,
    /// Containers run on this image (present on the engine) instead of their spec's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image: Option<String>,
    /// Or on one built from this Dockerfile of the repository.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dockerfile: Option<String>,
    /// The build's context, a directory of the repository (the Dockerfile's if absent).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub build_context: Option<String>,
    /// The user its containers run as (a name in the image, or `uid[:gid]`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub user: Option<String>,
    /// The sandbox spec its starts are made from when the start names none (its limits and
    /// network class are the operator's).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub spec: Option<String>,
    /// The container runtime its sandboxes run under (`runc` or `gvisor`): the operator's
    /// first spec with it, unless it names its spec (which must then have it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub runtime: Option<String>,
    /// Limits below the spec's.
    #[serde(default, skip_serializing_if = "Resources::is_empty")]
    pub resources: Resources,
    /// The network class setup runs on (`open`, `internet`, `none`), when it is not the
    /// sandbox's: the sandbox is moved back onto its own before `post_start` and the agent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub setup_egress: Option<String>,
    /// Ports of the sandbox served as apps (`PORT_<n>`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub forward_ports: Vec<u16>,
    /// What its conversations' sandboxes may reach by name (within the organization's and the
    /// deployment's policies): then only through Halyard's proxy.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub egress: Option<crate::egress::EgressPolicy>,
    /// What setup may reach instead, while it runs (wider, say: installing dependencies).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub setup_egress_policy: Option<crate::egress::EgressPolicy>,
    /// Checks its conversations' work must pass when the agent finishes, unless the start names
    /// its own (`verify`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub verify: Vec<crate::event::Check>,
    pub updated_by: String,
    pub updated_ms: UnixMillis,
}

fn is_zero(n: &u32) -> bool {
    *n == 0
}

/// Limits of a container sandbox, each at most its spec's (absent: the spec's).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct Resources {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory_mb: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpus: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pids_limit: Option<i64>,
}

impl Resources {
    pub fn is_empty(&self) -> bool {
        *self == Self::default()
    }
}

/// What a start's environment sets of a running sandbox besides its image, kept on its record
/// so that a container made again (after a loss, a hibernation's removal) is made the same.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Shape {
    /// The network class it is on when not its spec's (setup's, while setup runs).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub egress: Option<String>,
    #[serde(default, skip_serializing_if = "Resources::is_empty")]
    pub resources: Resources,
    /// Ports of the sandbox served as apps `PORT_<n>` (through its executor).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub ports: Vec<u16>,
    /// Outbound access by domain (the organization's and the environment's layers; the
    /// supervisor adds the deployment's): the sandbox then reaches out only through its proxy.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub egress_rules: Option<crate::egress::EgressRules>,
}

/// The app name of a forwarded port.
pub fn port_app(port: u16) -> String {
    format!("{PORT_APP_PREFIX}{port}")
}

/// Forwarded ports are apps named this prefix and the port.
pub const PORT_APP_PREFIX: &str = "PORT_";

/// The pool key ([`SNAPSHOT_POOL_PREFIX`] and the id) of the sandboxes started from snapshot `id`.
pub fn pool_key(id: &str) -> String {
    format!("{SNAPSHOT_POOL_PREFIX}{id}")
}

/// How much of setup's output a snapshot keeps (its end).
pub const SETUP_LOG_BYTES: usize = 8 * 1024;

/// Warm pools of snapshots are named by this prefix and the snapshot's id (specs' by the spec).
pub const SNAPSHOT_POOL_PREFIX: &str = "snapshot-";

/// A scope's environments, by name.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Environments {
    #[serde(default)]
    pub environments: BTreeMap<String, Environment>,
}

impl Environments {
    /// The one marked `default`, with its name.
    pub fn default_one(&self) -> Option<(&String, &Environment)> {
        self.environments.iter().find(|(_, e)| e.default)
    }
}

/// Where a snapshot stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SnapshotStatus {
    /// Made and usable until `expires_ms`.
    Ready,
    /// Not kept (the reason is in `detail`): starts set up again.
    Refused,
}

/// A snapshot of a sandbox after setup, as its supervisor recorded it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Snapshot {
    pub snapshot_id: String,
    pub status: SnapshotStatus,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub detail: Option<String>,
    pub owner: UserId,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub org: Option<String>,
    /// The environment as the start named it (`name`, `@org/name` or `/name`).
    pub environment: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub repository: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub branch: Option<String>,
    pub family: String,
    /// What setup depended on ([`key`]).
    pub key: String,
    /// `process` or `docker`.
    pub kind: String,
    /// The supervisor (node) whose disk or engine holds it.
    pub node: String,
    /// Its image (Docker) or directory (process).
    pub location: String,
    /// Bytes it takes beyond the sandbox's base image (Docker) or on disk (process).
    pub size_bytes: u64,
    /// How long setup took, in seconds.
    pub setup_secs: f64,
    pub created_ms: UnixMillis,
    pub expires_ms: UnixMillis,
    /// A container's user and variables (its image is `location`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub runtime: Option<Runtime>,
    /// Container sandboxes its host keeps started from it (its environment's `pool_size`,
    /// kept up to date when the environment changes).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub pool_size: u32,
    /// The sandbox spec of the container it was made from.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub spec: Option<String>,
    /// The end of what setup printed (secrets masked).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub setup_log: String,
}

/// What a start asks the supervisor to keep after setup.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SnapshotPlan {
    pub snapshot_id: String,
    pub owner: UserId,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub org: Option<String>,
    pub environment: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub repository: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub branch: Option<String>,
    pub family: String,
    pub key: String,
    pub setup_secs: f64,
    pub ttl_secs: u64,
    #[serde(default, skip_serializing_if = "is_zero")]
    pub pool_size: u32,
    /// The end of what setup printed (secrets masked).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub setup_log: String,
}

/// A snapshot a sandbox is to start from.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SnapshotRef {
    pub snapshot_id: String,
    pub kind: String,
    pub node: String,
    pub location: String,
    /// A container's user and variables when it was kept (a dev container's).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub runtime: Option<Runtime>,
}

impl From<&Snapshot> for SnapshotRef {
    fn from(s: &Snapshot) -> Self {
        Self {
            snapshot_id: s.snapshot_id.clone(),
            kind: s.kind.clone(),
            node: s.node.clone(),
            location: s.location.clone(),
            runtime: s.runtime.clone(),
        }
    }
}

/// What a container is made from when it is not its spec's runtime image: a dev container's
/// image with the executor added, or a snapshot's; with the user and variables it runs with.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Runtime {
    pub image: String,
    /// `uid:gid` (absent: the spec's).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub user: Option<String>,
    /// Over the spec's.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub env: BTreeMap<String, String>,
}

/// The image a container sandbox is to be moved onto (a dev container's), on the same workspace.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ImagePlan {
    /// An image present on the engine.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image: Option<String>,
    /// Or one built from the workspace: the context's directory and the Dockerfile in it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub context: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dockerfile: Option<String>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub args: BTreeMap<String, String>,
    /// The user it runs as: a name in the image, or `uid[:gid]`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub user: Option<String>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub env: BTreeMap<String, String>,
}

/// Hex SHA-256 of `parts`, each ended by a newline (so no two lists of parts hash alike).
fn digest<'a>(parts: impl IntoIterator<Item = &'a str>) -> String {
    let mut h = Sha256::new();
    for p in parts {
        h.update(p.len().to_string().as_bytes());
        h.update(b":");
        h.update(p.as_bytes());
        h.update(b"\n");
    }
    h.finalize().iter().map(|b| format!("{b:02x}")).collect()
}

/// A short token for a name in a bucket key (names may hold characters a subject may not).
pub fn token(name: &str) -> String {
    digest([name])[..16].to_owned()
}

/// The family of snapshots a start belongs to: whose, in which organization, which environment
/// as defined now (what setup does), and which repository and branch. The definition's
/// `post_start`, TTL and `default` are left out: they do not change what setup leaves.
pub fn family(owner: &UserId, org: Option<&str>, name: &str, env: &Environment, repository: Option<&str>, branch: Option<&str>) -> String {
    let vars: Vec<String> = env.env.iter().map(|(k, v)| format!("{k}={v}")).collect();
    let mut parts = vec!["family/1", &owner.0, org.unwrap_or("-"), name, repository.unwrap_or("-"), branch.unwrap_or("-")];
    let setup = env.setup.join("\u{0}");
    let secrets = env.setup_secrets.join("\u{0}");
    let cache = env.cache_key.join("\u{0}");
    let vars = vars.join("\u{0}");
    parts.extend([setup.as_str(), secrets.as_str(), cache.as_str(), vars.as_str()]);
    // What its containers are made from.
    for part in [&env.image, &env.dockerfile, &env.build_context, &env.user] {
        parts.push(part.as_deref().unwrap_or("-"));
    }
    // (Only when named, so that the families of definitions without one stay as they were.)
    if let Some(spec) = &env.spec {
        parts.extend(["spec", spec.as_str()]);
    }
    digest(parts)
}

/// The key of a family's snapshot given what setup depends on (`depends`: the head commit, or
/// the cache-key files' hashes as the sandbox printed them).
pub fn key(family: &str, depends: &str) -> String {
    digest(["key/1", family, depends.trim()])
}

/// The bucket key of a family's snapshot.
pub fn snapshot_key(owner: &UserId, org: Option<&str>, family: &str) -> String {
    format!("{}.{}.{family}", org.map_or_else(|| "_".to_owned(), token), token(&owner.0))
}

/// The bucket keys (a filter) of every snapshot of `owner`.
pub fn owner_filter(owner: &UserId) -> String {
    format!("*.{}.*", token(&owner.0))
}

/// The bucket keys (a filter) of every snapshot made in organization `org`.
pub fn org_filter(org: &str) -> String {
    format!("{}.*.*", token(org))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn families_follow_what_setup_does() {
        let owner = UserId("ann".into());
        let env = Environment { setup: vec!["npm ci".into()], ..Default::default() };
        let f = family(&owner, None, "web", &env, Some("https://x/r.git"), None);
        assert_eq!(f, family(&owner, None, "web", &env, Some("https://x/r.git"), None));
        let later = Environment { post_start: vec!["echo hi".into()], updated_ms: 5, ..env.clone() };
        assert_eq!(f, family(&owner, None, "web", &later, Some("https://x/r.git"), None), "post_start does not change setup");
        let other = Environment { setup: vec!["npm install".into()], ..env.clone() };
        assert_ne!(f, family(&owner, None, "web", &other, Some("https://x/r.git"), None));
        assert_ne!(f, family(&UserId("bob".into()), None, "web", &env, Some("https://x/r.git"), None), "never shared between users");
        assert_ne!(f, family(&owner, None, "web", &env, Some("https://x/r.git"), Some("dev")));
        assert_ne!(key(&f, "abc"), key(&f, "abd"));
        let k = snapshot_key(&owner, Some("acme"), &f);
        assert!(k.starts_with(&token("acme")) && k.ends_with(&f) && !k.contains("acme"));
    }
}
