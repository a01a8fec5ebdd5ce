//! What every forge kind shares: what a forge's webhook asks for ([`Ask`]), and the calls
//! Halyard makes back on the forge ([`Forge`]), whichever forge it is.

use halyard_protocol::automation::Thread;
use halyard_protocol::user::GitProvider;

use crate::kinds::{azure_devops, bitbucket, github, gitlab};

/// Hidden in every comment Halyard writes, so that a quote of the mention in it never triggers.
pub const MARKER: &str = "<!-- halyard -->";

/// What a webhook asks for.
#[derive(Clone, Debug, PartialEq)]
pub struct Ask {
    /// `owner/name`.
    pub repository: String,
    /// The issue or pull request.
    pub number: u64,
    pub is_pull: bool,
    /// The pull request's head branch, where the payload says it.
    pub head: Option<String>,
    pub title: String,
    pub body: String,
    /// The comment or review that mentioned Halyard (none for a label).
    pub comment: Option<String>,
    pub url: String,
    pub sender: String,
    /// The sender's numeric id, where the forge asks by it (GitLab).
    pub sender_id: Option<u64>,
    /// The sender's account id, where the forge asks by it (Bitbucket, Azure DevOps).
    pub sender_account: Option<String>,
    /// Where the 👀 goes.
    pub react_to: ReactTo,
    /// The discussion the mention is in, where the forge threads replies (GitLab).
    pub discussion: Option<String>,
    /// The project's numeric id, where the forge's API names projects so (GitLab).
    pub project: Option<u64>,
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

/// A forge's API, with the owner's token.
pub enum Forge {
    Github(github::Client),
    Gitlab(gitlab::Client),
    Bitbucket(bitbucket::Client),
    AzureDevops(azure_devops::Client),
}

impl Forge {
    /// The client of `provider`'s kind.
    pub fn new(provider: &GitProvider, token: String, allow: &[String]) -> Result<Self, String> {
        match provider.kind.as_str() {
            "gitlab" => gitlab::Client::new(provider, token, allow).map(Self::Gitlab),
            "bitbucket" => bitbucket::Client::new(provider, token, allow).map(Self::Bitbucket),
            "azure_devops" => azure_devops::Client::new(provider, token, allow).map(Self::AzureDevops),
            _ => github::Client::new(provider, token, allow).map(Self::Github),
        }
    }

    /// Whether the sender of `ask` may write to its repository.
    pub async fn can_write(&self, ask: &Ask) -> Result<bool, String> {
        match self {
            Self::Github(c) => c.can_write(&ask.repository, &ask.sender).await,
            Self::Gitlab(c) => c.can_write(&ask.repository, ask.sender_id.unwrap_or_default()).await,
            Self::Bitbucket(c) => c.can_write(&ask.repository, ask.sender_account.as_deref().unwrap_or_default()).await,
            Self::AzureDevops(c) => c.can_write(&ask.repository, ask.sender_account.as_deref().unwrap_or_default()).await,
        }
    }

    /// A pull (merge) request's head branch.
    pub async fn head(&self, repository: &str, number: u64) -> Result<String, String> {
        match self {
            Self::Github(c) => c.head(repository, number).await,
            Self::Gitlab(c) => c.head(repository, number).await,
            Self::Bitbucket(c) => c.head(repository, number).await,
            Self::AzureDevops(c) => c.head(repository, number).await,
        }
    }

    /// 👀 on what asked.
    pub async fn react(&self, ask: &Ask) -> Result<(), String> {
        match self {
            Self::Github(c) => c.react(&ask.repository, ask.react_to).await,
            Self::Gitlab(c) => c.react(ask).await,
            // Bitbucket takes no reactions: the reply is the acknowledgement.
            Self::Bitbucket(_) | Self::AzureDevops(_) => Ok(()),
        }
    }

    /// A comment on the thread (in its discussion, where the forge has them).
    pub async fn comment(&self, thread: &Thread, text: &str) -> Result<(), String> {
        match self {
            Self::Github(c) => c.comment(&thread.repository, thread.number, text).await,
            Self::Gitlab(c) => c.comment(thread, text).await,
            Self::Bitbucket(c) => c.comment(thread, text).await,
            Self::AzureDevops(c) => c.comment(thread, text).await,
        }
    }
}
