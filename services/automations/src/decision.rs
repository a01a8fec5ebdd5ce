//! The ground every kind's run stands on: what a run decides ([`Decision`], generic over where
//! each kind answers, so that a kind needs nothing of the dispatcher above it), the ids derived
//! from what triggered it (a redelivered command makes the same ones), where a repository is
//! cloned from, and reading a key-value record.

use std::collections::BTreeMap;

use halyard_platform::derived::{Namespace, derived_uuid};
use halyard_platform::{BusError, BusErrorKind};
use halyard_protocol::automation::RunOutcome;
use halyard_protocol::system::Repository;
use halyard_protocol::{ConversationId, UserId};
use serde::de::DeserializeOwned;
use uuid::Uuid;

/// What a run does; `A` is where it answers (each kind its own).
pub enum Decision<A> {
    /// A new conversation, answering on the thread that asked, if one did.
    Start {
        message: String,
        repository: Option<Repository>,
        tags: BTreeMap<String, String>,
        /// The user it runs as, where not the automation's owner (a Slack user linked to
        /// another Halyard user).
        runs_as: Option<UserId>,
        answer: Option<A>,
    },
    /// A message to the conversation already answering on the thread.
    Continue {
        conversation_id: ConversationId,
        message: String,
        answer: A,
    },
    Skip(RunOutcome, String),
}

impl<A> Decision<A> {
    /// The same decision, answering through `f(answer)`.
    pub fn map_answer<B>(self, f: impl FnOnce(A) -> B) -> Decision<B> {
        match self {
            Self::Start { message, repository, tags, runs_as, answer } => {
                Decision::Start { message, repository, tags, runs_as, answer: answer.map(f) }
            }
            Self::Continue { conversation_id, message, answer } => Decision::Continue { conversation_id, message, answer: f(answer) },
            Self::Skip(outcome, why) => Decision::Skip(outcome, why),
        }
    }
}

/// An automation's id from `parts` ([`Namespace::Automation`]): the same parts, the same id.
pub fn derived(parts: &[&str]) -> Uuid {
    derived_uuid(Namespace::Automation(parts))
}

/// The conversation a run starts (derived from the run, so a redelivered command names the same).
pub fn conversation_of(run_id: &Uuid) -> ConversationId {
    ConversationId(derived(&["conversation", &run_id.to_string()]))
}

/// Where `full_name` is cloned from on `provider`'s host.
pub fn clone_url(provider: &halyard_protocol::user::GitProvider, full_name: &str) -> String {
    // A forge whose API is plain HTTP (a test's, a LAN's) serves its repositories so too.
    let scheme = if provider.api_url.as_deref().is_some_and(|u| u.starts_with("http://")) { "http" } else { "https" };
    if provider.kind == "azure_devops" {
        // `organization/project/repository` is `organization/project/_git/repository` in git.
        if let [org, project, repo] = full_name.splitn(3, '/').collect::<Vec<_>>()[..] {
            return format!("{scheme}://{}/{org}/{project}/_git/{repo}", provider.host);
        }
    }
    if provider.is_bitbucket_data_center() {
        // `PROJECT/repository` is served under `/scm/`.
        return format!("{scheme}://{}/scm/{full_name}.git", provider.host);
    }
    format!("{scheme}://{}/{full_name}.git", provider.host)
}

/// A JSON value of a bucket, if there is one.
pub async fn read<T: DeserializeOwned>(kv: &async_nats::jetstream::kv::Store, key: &str) -> Result<Option<T>, BusError> {
    match kv.get(key).await {
        Ok(Some(bytes)) => Ok(serde_json::from_slice(&bytes).ok()),
        Ok(None) => Ok(None),
        Err(e) => Err(BusError::new(BusErrorKind::Read, e)),
    }
}
