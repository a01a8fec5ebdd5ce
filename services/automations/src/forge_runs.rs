//! A forge automation's run (`github`, `gitlab`): whether a webhook asks for work (and from
//! someone who may ask), whether its issue or pull request already has a conversation (then the
//! request is a message to it), and what Halyard says on the forge once the conversation is
//! started or told.

use std::collections::BTreeMap;

use halyard_platform::BusError;
use halyard_platform::keys::to_hex;
use halyard_protocol::automation::{Automation, RunOutcome, Thread};
use halyard_protocol::system::Repository;
use halyard_protocol::user::UserGitProviders;
use halyard_protocol::{ConversationId, subjects};
use sha2::{Digest, Sha256};

use halyard_platform::forge::Forge;

use crate::ctx::{Ctx, conversation_link};
use crate::decision::{Decision, clone_url, read};
use crate::forge::Ask;
use crate::kinds::{azure_devops, bitbucket, github, gitlab};
use crate::prompt::{self, Fields};
use crate::threads;

/// What a conversation started from a forge is first told when the automation says nothing.
pub const DEFAULT_TEMPLATE: &str = "{{title}}\n\n{{body}}\n\n{{comment}}\n\nThis comes from {{url}}. Do what it asks in the repository. When the \
                                work is done, open a pull request (or, for a pull request, push to its branch) and say what you did.";

/// Where a run answers on the forge, and with what.
pub struct Answer {
    forge: Forge,
    ask: Ask,
    thread_key: String,
}

impl Answer {
    /// 👀 and "on it" with the conversation's link; the thread remembered for later mentions and
    /// for the summary. A command delivered again finds the thread and says nothing twice.
    pub async fn on_start(self, ctx: &Ctx, a: &Automation, conversation_id: ConversationId) -> Result<(), BusError> {
        if threads::acknowledged(ctx, conversation_id).await? {
            return Ok(());
        }
        if let Err(e) = self.ask.react(&self.forge).await {
            tracing::warn!(automation_id = %a.id, error = %e, "no reaction on the forge");
        }
        let thread = Thread {
            repository: self.ask.repository.clone(),
            number: self.ask.number,
            is_pull: self.ask.is_pull,
            discussion: self.ask.discussion.clone(),
            ..Thread::new(&a.id, conversation_id)
        };
        let link = conversation_link(&ctx.config, conversation_id);
        if let Err(e) = self.forge.reply(&thread, &format!("On it: [the conversation]({link}).")).await {
            tracing::warn!(automation_id = %a.id, error = %e, "no comment on the forge");
        }
        threads::remember(ctx, &self.thread_key, &thread).await
    }

    /// 👀 on the later mention.
    pub async fn on_continue(self) {
        if let Err(e) = self.ask.react(&self.forge).await {
            tracing::warn!(error = %e, "no reaction on the forge");
        }
    }
}

/// Which forge's webhook a run reads.
#[derive(Clone, Copy)]
pub enum Kind {
    Github,
    Gitlab,
    Forgejo,
    Bitbucket,
    AzureDevops,
}

/// What a forge's webhook starts, continues, or why nothing.
#[allow(clippy::too_many_arguments)] // the trigger's three settings and the request's three parts
pub async fn decide(
    ctx: &Ctx,
    a: &Automation,
    kind: Kind,
    provider: &str,
    label: &str,
    mention: &str,
    event: &str,
    body: &str,
) -> Result<Decision<Answer>, BusError> {
    let skip = |outcome, why: String| Ok(Decision::Skip(outcome, why));
    let payload: serde_json::Value = match serde_json::from_str(body) {
        Ok(p) => p,
        Err(e) => return skip(RunOutcome::Ignored, format!("the request's body is not JSON ({e})")),
    };
    let read_ask = match kind {
        Kind::Github => github::read(event, &payload, label, mention),
        Kind::Gitlab => gitlab::read(&payload, label, mention),
        Kind::Forgejo => github::read_forgejo(event, &payload, label, mention),
        Kind::Bitbucket => bitbucket::read(event, &payload, mention),
        Kind::AzureDevops => azure_devops::read(&payload, mention, a.repository.as_ref().map(|r| r.full_name.as_str())),
    };
    let mut ask = match read_ask {
        Ok(ask) => ask,
        Err(why) => return skip(RunOutcome::Ignored, why),
    };
    if let Some(r) = a.repository.as_ref().filter(|r| !r.full_name.eq_ignore_ascii_case(&ask.repository)) {
        return skip(RunOutcome::Ignored, format!("about {}, not the automation's repository {}", ask.repository, r.full_name));
    }
    let git: UserGitProviders = read(&ctx.user_kv, &subjects::user_git_key(&a.owner)).await?.unwrap_or_default();
    let Some(p) = git.providers.get(provider) else {
        return skip(RunOutcome::Failed, format!("the git provider {provider:?} no longer exists; add it again or edit the automation"));
    };
    let token = match ctx.vault.open(&halyard_platform::vault::git_token_slot(&a.owner.0, provider), &p.token_sealed) {
        Ok(t) => t,
        Err(e) => return skip(RunOutcome::Failed, format!("the git provider's token does not open ({e}); store it again")),
    };
    let forge = match Forge::new(p, &token, &ctx.config.gateway.git_api_allow) {
        Ok(f) => f,
        Err(e) => return skip(RunOutcome::Failed, e.to_string()),
    };
    match forge.can_write(&ask.repository, ask.sender()).await {
        Ok(true) => {}
        Ok(false) => return skip(RunOutcome::Ignored, format!("sender {} lacks write access to {}", ask.sender, ask.repository)),
        Err(e) => return skip(RunOutcome::Failed, format!("cannot ask the forge whether {} may write: {e}", ask.sender)),
    }
    let digest = to_hex(&Sha256::digest(format!("{}#{}", ask.repository.to_lowercase(), ask.number).as_bytes()));
    let thread_key = subjects::automation_thread_key(&a.id, &digest[..40]);
    if let Some(thread) = read::<Thread>(&ctx.bucket, &thread_key).await? {
        let said = ask.comment.clone().unwrap_or_else(|| ask.title.clone());
        let message = format!("{} wrote on {}:\n\n{said}", ask.sender, ask.url);
        let answer = Answer { forge, ask, thread_key };
        return Ok(Decision::Continue { conversation_id: thread.conversation_id, message, answer });
    }
    let branch = match (ask.is_pull, ask.head.clone()) {
        (true, Some(head)) => Some(head),
        (true, None) => match forge.head(&ask.repository, ask.number).await {
            Ok(head) => Some(head),
            Err(e) => return skip(RunOutcome::Failed, format!("cannot read the pull request's branch: {e}")),
        },
        (false, _) => a.repository.as_ref().and_then(|r| r.branch.clone()),
    };
    ask.head = branch.clone();
    let fields = Fields {
        title: ask.title.clone(),
        body: ask.body.clone(),
        comment: ask.comment.clone().unwrap_or_default(),
        url: ask.url.clone(),
        payload: serde_json::to_string_pretty(&payload).unwrap_or_default(),
    };
    let message = prompt::render(a.prompt.as_deref().unwrap_or(DEFAULT_TEMPLATE), &fields);
    let repository = Some(Repository { url: clone_url(p, &ask.repository), branch });
    let noun = match (kind, ask.is_pull) {
        (_, false) => "issue",
        (Kind::Github | Kind::Forgejo | Kind::Bitbucket | Kind::AzureDevops, true) => "pull_request",
        (Kind::Gitlab, true) => "merge_request",
    };
    let tags = BTreeMap::from([(noun.to_owned(), ask.number.to_string()), ("repository".to_owned(), ask.repository.clone())]);
    Ok(Decision::Start { message, repository, tags, runs_as: None, answer: Some(Answer { forge, ask, thread_key }) })
}
