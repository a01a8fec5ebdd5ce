//! What every forge kind's webhook is read into ([`Ask`]): the repository, the issue or pull
//! request, who asked and where to react and reply. The calls Halyard makes back on the forge
//! are the platform's forge client's ([`halyard_platform::forge::Forge`]), shared with the
//! gateway.

use halyard_platform::forge::{Forge, ForgeError, ReactTo, Sender};

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

impl Ask {
    /// Who asked, as the forge asks about people.
    pub fn sender(&self) -> Sender<'_> {
        Sender { login: &self.sender, id: self.sender_id, account: self.sender_account.as_deref() }
    }

    /// 👀 on what asked.
    pub async fn react(&self, forge: &Forge) -> Result<(), ForgeError> {
        forge.react(&self.repository, self.number, self.is_pull, self.react_to).await
    }
}
