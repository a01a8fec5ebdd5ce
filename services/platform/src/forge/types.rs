//! What the forge client is made of and speaks in: the kinds of forge, the client itself
//! ([`Forge`]: its API and the provider it was made for), the repositories, branches and pull
//! requests it answers with, and its errors. Each kind's module and the dispatch in
//! [`super`] import these; nothing here imports them back.

use serde::{Deserialize, Serialize};

use halyard_protocol::user::GitProvider;

use super::api::Api;

/// Hidden in every comment Halyard writes, so that a quote of the mention in it never triggers.
pub const MARKER: &str = "<!-- halyard -->";

/// The name git sends with a Bitbucket access token (and the API's sign that none was given).
pub const BITBUCKET_TOKEN_USER: &str = "x-token-auth";

/// The kinds of forge Halyard speaks to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ForgeKind {
    Github,
    /// Forgejo and Gitea: GitHub's paths under their own base, `token` authorization.
    Forgejo,
    Gitlab,
    BitbucketCloud,
    BitbucketDataCenter,
    AzureDevops,
}

impl ForgeKind {
    /// The kind of `p`'s forge; none for a provider kind without a repository API (`generic`).
    pub fn of(p: &GitProvider) -> Option<Self> {
        match p.kind.as_str() {
            "github" => Some(Self::Github),
            "forgejo" => Some(Self::Forgejo),
            "gitlab" => Some(Self::Gitlab),
            "bitbucket" if p.is_bitbucket_data_center() => Some(Self::BitbucketDataCenter),
            "bitbucket" => Some(Self::BitbucketCloud),
            "azure_devops" => Some(Self::AzureDevops),
            _ => None,
        }
    }
}

/// A repository a git provider's token reaches.
#[derive(Clone, Debug, Serialize)]
pub struct Repository {
    /// The user's git provider that reaches it.
    pub provider: String,
    /// `owner/name` (GitLab: `group/subgroup/name`).
    pub full_name: String,
    /// What a conversation's `repository.url` takes.
    pub clone_url: String,
    pub default_branch: String,
    pub private: bool,
    pub description: Option<String>,
}

/// A repository's branches and which is the default.
#[derive(Clone, Debug, Serialize)]
pub struct Branches {
    pub repository: String,
    pub default_branch: String,
    /// The first hundred.
    pub branches: Vec<Branch>,
}

/// A branch, as GitHub, Forgejo and GitLab list them (the other forges' answers are mapped).
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Branch {
    pub name: String,
    #[serde(default)]
    pub protected: bool,
}

/// A pull (merge) request to open.
#[derive(Debug, Deserialize)]
pub struct NewPullRequest {
    pub title: String,
    /// The branch with the changes.
    pub head: String,
    /// The branch to merge into (default: the repository's default branch).
    #[serde(default)]
    pub base: Option<String>,
    #[serde(default)]
    pub body: Option<String>,
    #[serde(default)]
    pub draft: bool,
}

/// Who asked, as each forge asks about people: a login (GitHub), a numeric id (GitLab), an
/// account id or user name (Bitbucket, Azure DevOps).
#[derive(Clone, Copy, Debug, Default)]
pub struct Sender<'a> {
    pub login: &'a str,
    pub id: Option<u64>,
    pub account: Option<&'a str>,
}

/// What Halyard reacts to on receipt.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReactTo {
    Issue(u64),
    IssueComment(u64),
    ReviewComment(u64),
    /// A GitLab note (its award emoji).
    Note {
        note: u64,
    },
    /// Reviews take no reactions.
    Nothing,
}

/// Where a comment goes: an issue or pull request, and the discussion in it where the forge
/// threads replies.
#[derive(Clone, Copy)]
pub(super) struct Place<'a> {
    pub repository: &'a str,
    pub number: u64,
    pub is_pull: bool,
    pub discussion: Option<&'a str>,
}

/// One forge's API, with a user's token.
pub struct Forge {
    pub(super) kind: ForgeKind,
    pub(super) api: Api,
    /// Azure DevOps answers who people are from another host.
    pub(super) identities: Option<Api>,
    pub(super) provider: GitProvider,
}

/// A component of a URL path, escaped.
pub(super) fn escape(v: &str) -> String {
    percent_encoding::utf8_percent_encode(v, percent_encoding::NON_ALPHANUMERIC).to_string()
}
