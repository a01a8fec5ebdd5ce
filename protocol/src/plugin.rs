//! Plugins in Claude Code's format and the marketplaces that list them, as the gateways keep
//! them in the user bucket ([`crate::subjects::USER_BUCKET`]) and the conversation manager and
//! agent runners read them.
//!
//! A *marketplace* is a git repository with `.claude-plugin/marketplace.json`; a *plugin* is a
//! folder of it (or of another repository it names) with `.claude-plugin/plugin.json`,
//! `skills/`, `commands/`, `agents/`, `hooks/hooks.json` and `.mcp.json`. Both are fetched by
//! the gateway at a pinned commit; a plugin's files are kept as a [`PluginBundle`] under the
//! SHA-256 of their content, so what a conversation recorded ([`PluginUse`]) can always be
//! read again, whatever was upgraded since.
//!
//! Three scopes keep marketplaces and installed plugins: the deployment, each organization and
//! each user ([`Scope`]). A conversation gets the deployment's enabled plugins, then its
//! organization's, then its owner's; an organization's `required` ones always, its `forbidden`
//! ones never.

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};

use crate::UnixMillis;

/// Who keeps a set of marketplaces and plugins.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Scope {
    Deployment,
    Org(String),
    User(crate::UserId),
}

impl Scope {
    /// How the API's paths and records name it: `deployment`, `@<org>` or `me`/the user's id.
    pub fn label(&self) -> String {
        match self {
            Self::Deployment => "deployment".into(),
            Self::Org(org) => format!("@{org}"),
            Self::User(user) => user.to_string(),
        }
    }

    /// `deployment`, `org` or `user`: what a [`PluginUse`] records.
    pub fn kind(&self) -> &'static str {
        match self {
            Self::Deployment => "deployment",
            Self::Org(_) => "org",
            Self::User(_) => "user",
        }
    }
}

/// Where a plugin's files are: a folder of a git repository.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct PluginSource {
    /// The repository's clone URL (`https://…`, `http://…`).
    pub url: String,
    /// The folder in it (empty: its root).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub path: String,
    /// The branch or tag it follows (absent: the repository's default branch).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub git_ref: Option<String>,
}

/// What a plugin adds to a conversation, by name: shown before it is installed.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct PluginAdds {
    pub skills: Vec<String>,
    /// Slash commands, without their `/`.
    pub commands: Vec<String>,
    /// Named helpers `delegate` can hand a task to.
    pub agents: Vec<String>,
    /// The hook events it runs commands at.
    pub hooks: Vec<String>,
    pub mcp_servers: Vec<String>,
}

/// One version of a plugin: where its files were read, and what they add.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct PluginVersion {
    /// What its manifest (or its marketplace) calls this version.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub version: Option<String>,
    pub source: PluginSource,
    /// The commit its files were read at.
    pub commit: String,
    /// The SHA-256 of its files ([`PluginBundle`]): the same content is the same version.
    pub bundle: String,
    pub adds: PluginAdds,
}

/// One plugin a marketplace offers, as its last fetch found it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct PluginOffer {
    pub name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    #[serde(flatten)]
    pub at: PluginVersion,
    /// Why it cannot be installed (its files could not be read or parsed); absent: it can.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// A marketplace a scope added.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Marketplace {
    /// The repository (`path` is empty: `marketplace.json` is at its root).
    pub source: PluginSource,
    /// The commit of the last fetch.
    pub commit: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    pub plugins: Vec<PluginOffer>,
    pub added_by: String,
    pub added_ms: UnixMillis,
    pub fetched_ms: UnixMillis,
}

/// What an organization or the deployment says of a plugin it installed.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub enum PluginPolicy {
    /// Enabled unless a member turns it off.
    #[default]
    Optional,
    /// Always enabled in its conversations: members cannot turn it off.
    Required,
}

impl PluginPolicy {
    pub fn is_optional(&self) -> bool {
        *self == Self::Optional
    }
}

/// A plugin a scope installed, at one version.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct InstalledPlugin {
    /// The marketplace it came from (by its name) and its name there.
    pub marketplace: String,
    pub name: String,
    /// The version installed.
    #[serde(flatten)]
    pub at: PluginVersion,
    pub enabled: bool,
    #[serde(default, skip_serializing_if = "PluginPolicy::is_optional")]
    pub policy: PluginPolicy,
    pub installed_by: String,
    pub installed_ms: UnixMillis,
    pub updated_ms: UnixMillis,
}

/// How a plugin is named across marketplaces: `name@marketplace` (Claude Code's form).
pub fn plugin_id(name: &str, marketplace: &str) -> String {
    format!("{name}@{marketplace}")
}

/// One scope's marketplaces and plugins (`plugins.<scope>` in the user bucket).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct PluginSet {
    /// By name (`marketplace.json`'s `name`).
    #[serde(default)]
    pub marketplaces: BTreeMap<String, Marketplace>,
    /// By [`plugin_id`].
    #[serde(default)]
    pub installed: BTreeMap<String, InstalledPlugin>,
    /// Plugins a wider scope installed that this one turned off, by id.
    #[serde(default, skip_serializing_if = "BTreeSet::is_empty")]
    pub disabled: BTreeSet<String>,
    /// Plugins this scope's conversations never get, by id (organizations and the deployment).
    #[serde(default, skip_serializing_if = "BTreeSet::is_empty")]
    pub forbidden: BTreeSet<String>,
}

/// A plugin's files at one commit: text only, by path relative to the plugin's root
/// (`plugins.bundle.<sha256>` in the user bucket, never changed once written).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PluginBundle {
    pub name: String,
    pub commit: String,
    pub files: BTreeMap<String, String>,
    /// Files that are executable (hook and server scripts).
    #[serde(default, skip_serializing_if = "BTreeSet::is_empty")]
    pub executable: BTreeSet<String>,
}

/// A plugin one conversation has, as `conversation_started` records it: a run, a fork and a
/// takeover read the same files.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct PluginUse {
    pub name: String,
    pub marketplace: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub version: Option<String>,
    pub commit: String,
    pub bundle: String,
    /// Whose it is: `deployment`, `org` or `user`.
    pub scope: String,
    /// Required by its organization or the deployment.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub required: bool,
}

impl PluginUse {
    pub fn id(&self) -> String {
        plugin_id(&self.name, &self.marketplace)
    }
}

/// The plugins a conversation gets from the deployment's, its organization's and its owner's
/// sets, in that order (one of each id, the widest scope's version): enabled ones, required
/// ones whatever a narrower scope turned off, none that the organization or deployment forbids.
pub fn resolve(deployment: &PluginSet, org: Option<&PluginSet>, user: &PluginSet) -> Vec<PluginUse> {
    let forbidden: BTreeSet<&String> = deployment.forbidden.iter().chain(org.into_iter().flat_map(|o| o.forbidden.iter())).collect();
    let layers: [(Option<&PluginSet>, &str); 3] = [(Some(deployment), "deployment"), (org, "org"), (Some(user), "user")];
    let mut out: Vec<PluginUse> = Vec::new();
    for (i, (set, scope)) in layers.iter().enumerate() {
        let Some(set) = set else { continue };
        // Turned off by this scope or a narrower one (not by a wider one).
        let narrower: Vec<&PluginSet> = layers[i + 1..].iter().filter_map(|(s, _)| *s).collect();
        for (id, p) in &set.installed {
            let required = p.policy == PluginPolicy::Required && *scope != "user";
            let off = !p.enabled || narrower.iter().any(|n| n.disabled.contains(id));
            if forbidden.contains(id) || (off && !required) || out.iter().any(|u| &u.id() == id) {
                continue;
            }
            out.push(PluginUse {
                name: p.name.clone(),
                marketplace: p.marketplace.clone(),
                version: p.at.version.clone(),
                commit: p.at.commit.clone(),
                bundle: p.at.bundle.clone(),
                scope: (*scope).into(),
                required,
            });
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn installed(name: &str, enabled: bool, policy: PluginPolicy) -> InstalledPlugin {
        InstalledPlugin {
            marketplace: "m".into(),
            name: name.into(),
            at: PluginVersion {
                version: None,
                source: PluginSource { url: "http://git/m".into(), path: String::new(), git_ref: None },
                commit: "c".into(),
                bundle: format!("b-{name}"),
                adds: PluginAdds::default(),
            },
            enabled,
            policy,
            installed_by: "u".into(),
            installed_ms: 0,
            updated_ms: 0,
        }
    }

    fn set(plugins: &[InstalledPlugin]) -> PluginSet {
        PluginSet { installed: plugins.iter().map(|p| (plugin_id(&p.name, &p.marketplace), p.clone())).collect(), ..Default::default() }
    }

    #[test]
    fn required_plugins_survive_a_members_off_and_forbidden_ones_never_run() {
        let deployment = set(&[installed("lint", true, PluginPolicy::Optional)]);
        let mut org = set(&[installed("guard", true, PluginPolicy::Required), installed("docs", true, PluginPolicy::Optional)]);
        org.forbidden.insert("risky@m".into());
        let mut user = set(&[installed("risky", true, PluginPolicy::Optional), installed("mine", true, PluginPolicy::Optional)]);
        user.disabled.extend(["guard@m".to_owned(), "docs@m".to_owned(), "lint@m".to_owned()]);
        let names: Vec<String> = resolve(&deployment, Some(&org), &user).iter().map(|u| u.name.clone()).collect();
        assert_eq!(names, ["guard", "mine"]);
        let got = resolve(&deployment, Some(&org), &user);
        assert!(got[0].required && got[0].scope == "org" && got[1].scope == "user");
        // Outside the organization, the user's own choices hold.
        let names: Vec<String> = resolve(&deployment, None, &user).iter().map(|u| u.name.clone()).collect();
        assert_eq!(names, ["mine", "risky"]);
        // A plugin installed twice is the widest scope's.
        let twice = set(&[installed("lint", true, PluginPolicy::Optional)]);
        let got = resolve(&deployment, None, &twice);
        assert_eq!((got.len(), got[0].scope.as_str()), (1, "deployment"));
    }
}
