//! An issue tracker's run (`jira`, `linear`): a comment that mentions Halyard, or its label added
//! to an issue, in one of the automation's projects (Jira) or teams (Linear) starts a
//! conversation on the repository mapped to it; Halyard comments back on the issue with the link,
//! then each run's summary; a later mention on the same issue is a message to the same
//! conversation. Only someone who may work in the project or team starts or continues anything.

use std::collections::BTreeMap;

use halyard_platform::BusError;
use halyard_protocol::automation::{Automation, RunOutcome, Thread};
use halyard_protocol::system::Repository;
use halyard_protocol::user::UserGitProviders;
use halyard_protocol::{ConversationId, subjects};
use serde_json::Value;

use crate::ctx::{Ctx, conversation_link};
use crate::decision::{Decision, clone_url, read};
use crate::kinds::{jira, linear};
use crate::prompt::{self, Fields};
use crate::threads;
use crate::tracker::Ask;

/// What a conversation started from a tracker is first told when the automation says nothing.
const DEFAULT_TEMPLATE: &str = "{{title}}\n\n{{body}}\n\n{{comment}}\n\nThis is the issue {{url}}. Do what it asks; when the work is done, open a \
                                pull request and say what you did.";

/// A tracker's API, with the automation's credentials.
pub enum Client {
    Jira(jira::Client),
    Linear(linear::Client),
}

impl Client {
    /// A comment on issue `key`.
    pub async fn comment(&self, key: &str, text: &str) -> Result<(), String> {
        match self {
            Self::Jira(c) => c.comment(key, text).await,
            Self::Linear(c) => c.comment(key, text).await,
        }
    }

    /// Whether the author of `ask` may work in its project (Jira: may edit its issues) or team
    /// (Linear: an active member), asked of the tracker, never assumed.
    pub async fn may_work(&self, ask: &Ask) -> Result<bool, String> {
        let Some((param, id)) = &ask.author_id else { return Ok(false) };
        match self {
            Self::Jira(c) => c.may_edit(param, id, &ask.team).await,
            Self::Linear(c) => c.is_member(id, &ask.team).await,
        }
    }

    /// A link as the tracker's text writes it.
    pub fn link(&self, url: &str, text: &str) -> String {
        match self {
            Self::Jira(_) => format!("[{text}|{url}]"),
            Self::Linear(_) => format!("[{text}]({url})"),
        }
    }
}

/// Where a run answers on a tracker's issue.
pub struct TrackerAnswer {
    client: Client,
    key: String,
    thread_key: String,
}

impl TrackerAnswer {
    /// "On it" with the link; the issue remembered.
    pub async fn on_start(self, ctx: &Ctx, a: &Automation, conversation_id: ConversationId) -> Result<(), BusError> {
        if threads::acknowledged(ctx, conversation_id).await? {
            return Ok(());
        }
        let link = self.client.link(&conversation_link(&ctx.config, conversation_id), "the conversation");
        if let Err(e) = self.client.comment(&self.key, &format!("On it: {link}.")).await {
            tracing::warn!(automation_id = %a.id, error = %e, "no comment on the tracker");
        }
        let thread = Thread { issue_key: Some(self.key.clone()), ..Thread::new(&a.id, conversation_id) };
        threads::remember(ctx, &self.thread_key, &thread).await
    }
}

/// What a tracker's webhook starts, continues, or why nothing: `ask` is what the kind read of
/// `payload`, `teams` the automation's projects or teams.
pub async fn decide(
    ctx: &Ctx,
    a: &Automation,
    payload: &Value,
    ask: Result<Ask, String>,
    teams: &BTreeMap<String, Option<String>>,
    provider: Option<&str>,
    client: Result<Client, String>,
) -> Result<Decision<TrackerAnswer>, BusError> {
    let skip = |outcome, why: String| Ok(Decision::Skip(outcome, why));
    let ask = match ask {
        Ok(ask) => ask,
        Err(why) => return skip(RunOutcome::Ignored, why),
    };
    let Some(team_repo) = teams.get(&ask.team) else {
        return skip(RunOutcome::Ignored, format!("project or team {} is not one of the automation's", ask.team));
    };
    let client = match client {
        Ok(c) => c,
        Err(e) => return skip(RunOutcome::Failed, e),
    };
    match client.may_work(&ask).await {
        Ok(true) => {}
        Ok(false) => return skip(RunOutcome::Ignored, format!("{} may not work in {} (asked of the tracker)", ask.author, ask.team)),
        Err(e) => return skip(RunOutcome::Failed, format!("cannot ask the tracker whether {} may work in {}: {e}", ask.author, ask.team)),
    }
    let thread_key = subjects::automation_thread_key(&a.id, &halyard_platform::keys::to_hex(ask.key.as_bytes()));
    if let Some(thread) = read::<Thread>(&ctx.bucket, &thread_key).await? {
        let said = ask.comment.clone().unwrap_or_else(|| "added the label again".into());
        let message = format!("{} wrote on {}:\n\n{said}", ask.author, ask.url);
        let answer = TrackerAnswer { client, key: ask.key, thread_key };
        return Ok(Decision::Continue { conversation_id: thread.conversation_id, message, answer });
    }
    let repository = match team_repo {
        None => None,
        Some(full_name) => {
            let git: UserGitProviders = read(&ctx.user_kv, &subjects::user_git_key(&a.owner)).await?.unwrap_or_default();
            match provider.and_then(|p| git.providers.get(p)) {
                Some(p) => Some(Repository { url: clone_url(p, full_name), branch: None }),
                None => return skip(RunOutcome::Failed, "the automation's git provider no longer exists; edit the automation".into()),
            }
        }
    };
    let fields = Fields {
        title: ask.title.clone(),
        body: ask.body.clone(),
        comment: ask.comment.clone().unwrap_or_default(),
        url: ask.url.clone(),
        payload: serde_json::to_string_pretty(payload).unwrap_or_default(),
    };
    let message = prompt::render(a.prompt.as_deref().unwrap_or(DEFAULT_TEMPLATE), &fields);
    let tags = BTreeMap::from([("issue".to_owned(), ask.url.rsplit('/').next().unwrap_or_default().to_owned())]);
    Ok(Decision::Start { message, repository, tags, runs_as: None, answer: Some(TrackerAnswer { client, key: ask.key, thread_key }) })
}
