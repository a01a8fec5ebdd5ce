//! Summaries: when a conversation that answers on a forge or chat thread ends a run (finished,
//! failed or stuck), its last message, with the pull requests it opened, goes back to the thread
//! as a comment or a reply. The service reads the end of runs from the event log (`execution_status` events only,
//! which the server filters) through a durable consumer, so a restart misses none; the same ends
//! end the items of batches ([`crate::batches::ended`]).

use std::time::Duration;

use halyard_platform::bus::{self, Delivery};
use halyard_platform::{BusError, BusErrorKind, Shutdown};
use halyard_protocol::automation::{Automation, Thread, Trigger};
use halyard_protocol::event::{ConversationEvent, EventBody, ExecutionStatus, Verdict};
use halyard_protocol::user::UserGitProviders;
use halyard_protocol::{ConversationId, subjects};

use crate::ctx::{Ctx, conversation_link};
use crate::decision::read;
use crate::kinds::{jira, linear, slack};
use crate::tracker_runs;
use halyard_platform::forge::Forge;

/// Serves until `shutdown`.
pub async fn run(ctx: Ctx, shutdown: Shutdown) {
    let result =
        bus::consume(ctx.js.clone(), subjects::EVENTS_STREAM, subjects::AUTOMATION_SUMMARY_CONSUMER, "automations", shutdown, |d| {
            let ctx = ctx.clone();
            async move {
                let Some((env, d)) = d.decode::<ConversationEvent>().await else { return };
                let ev = env.payload;
                let EventBody::ExecutionStatus { status, .. } = ev.body else {
                    d.ack().await;
                    return;
                };
                let conv = ev.conversation_id;
                match status {
                    ExecutionStatus::Finished | ExecutionStatus::Error | ExecutionStatus::Stuck => {
                        tokio::spawn(async move {
                            let summarized = summarize(&ctx, conv, ev.seq).await;
                            let batch = crate::batches::ended(&ctx, conv, status.as_str()).await;
                            settle(d, summarized.and(batch)).await
                        });
                    }
                    // A batch's item whose agent waits for a person has ended as far as the
                    // batch goes.
                    ExecutionStatus::Idle => {
                        tokio::spawn(async move { settle(d, crate::batches::ended(&ctx, conv, status.as_str()).await).await });
                    }
                    _ => d.ack().await,
                }
            }
        })
        .await;
    if let Err(e) = result {
        tracing::error!(error = %e, "the automation summaries stopped");
    }
}

/// Acks what was done; what may go better later comes back in two seconds.
pub(crate) async fn settle(d: Delivery, result: Result<(), BusError>) {
    match result {
        Ok(()) => d.ack().await,
        Err(e) => d.retry(Duration::from_secs(2), &e.to_string()).await,
    }
}

/// Comments the run's summary on the conversation's thread, if it has one.
async fn summarize(ctx: &Ctx, conversation_id: ConversationId, seq: u64) -> Result<(), BusError> {
    let Some(thread) = read::<Thread>(&ctx.bucket, &subjects::automation_conversation_key(conversation_id)).await? else {
        return Ok(());
    };
    let done_key = format!("summary.{conversation_id}.{seq}");
    if ctx.bucket.get(&done_key).await.map_err(|e| BusError::new(BusErrorKind::Read, e))?.is_some() {
        return Ok(());
    }
    let Some(a) = read::<Automation>(&ctx.bucket, &subjects::automation_key(&thread.automation_id)).await? else { return Ok(()) };
    let events = bus::read_events(&ctx.js, conversation_id, 0).await?;
    let upto: Vec<&ConversationEvent> = events.iter().filter(|e| e.seq <= seq).collect();
    let mut text = String::new();
    let mut pulls = Vec::new();
    let mut outcome = "finished";
    // Why a run that failed failed (a spent budget, a profile that cannot be used...), in the
    // agent runner's words.
    let mut failure: Option<String> = None;
    // The agent's typed result and its checks' last verdict.
    let mut result = None;
    let mut verdict: Option<Verdict> = None;
    for e in &upto {
        match &e.body {
            EventBody::AgentMessage { text: t } => text.clone_from(t),
            EventBody::Result { result: r } => result = Some(r),
            EventBody::Verification { attempt, passed, score, .. } => Verdict::add(&mut verdict, *attempt, *passed, *score),
            EventBody::AgentError { message, .. } => failure = Some(message.clone()),
            EventBody::PullRequestOpened { url, .. } => pulls.push(url.clone()),
            EventBody::ExecutionStatus { status, .. } if e.seq == seq => outcome = status.as_str(),
            _ => {}
        }
    }
    let mut summary = match outcome {
        "finished" => "Done.".to_owned(),
        "stuck" => "I stopped: I was going round in circles.".to_owned(),
        _ => match &failure {
            Some(why) => format!("The run failed: {}", why.trim()),
            None => "The run failed.".to_owned(),
        },
    };
    if !text.trim().is_empty() {
        summary.push_str("\n\n");
        summary.push_str(text.trim());
    }
    if let Some(Verdict { passed, score, checks: n, .. }) = verdict {
        let said = if passed { "passed" } else { "failed" };
        summary.push_str(&format!("\n\nChecks: {said} ({n} check{}, score {score:.2}).", if n == 1 { "" } else { "s" }));
    }
    if let Some(r) = result {
        let json = serde_json::to_string_pretty(r).unwrap_or_default();
        summary.push_str(&format!("\n\nResult:\n```json\n{json}\n```"));
    }
    for url in &pulls {
        summary.push_str(&format!("\n\nPull request: {url}"));
    }
    say(ctx, &a, &thread, summary).await?;
    let _ = ctx.bucket.put(done_key, Vec::new().into()).await;
    Ok(())
}

/// Says `text` on `thread`, as `a` answers there: a comment on the forge's issue or pull
/// request, a reply in the Slack thread, a comment on the tracker's issue, each followed by the
/// conversation's link in the place's own markup. `Err` where trying again may help.
pub(crate) async fn say(ctx: &Ctx, a: &Automation, thread: &Thread, mut summary: String) -> Result<(), BusError> {
    let link = conversation_link(&ctx.config, thread.conversation_id);
    let said = match &a.trigger {
        Trigger::Github { provider, .. }
        | Trigger::Gitlab { provider, .. }
        | Trigger::Forgejo { provider, .. }
        | Trigger::Bitbucket { provider, .. }
        | Trigger::AzureDevops { provider, .. } => {
            let git: UserGitProviders = read(&ctx.user_kv, &subjects::user_git_key(&a.owner)).await?.unwrap_or_default();
            let Some(p) = git.providers.get(provider) else { return Ok(()) };
            let Ok(token) = ctx.vault.open(&halyard_platform::vault::git_token_slot(&a.owner.0, provider), &p.token_sealed) else {
                tracing::warn!(automation_id = %a.id, "the git provider's token does not open; no summary");
                return Ok(());
            };
            summary.push_str(&format!("\n\n[The conversation]({link})"));
            match Forge::new(p, &token, &ctx.config.gateway.git_api_allow) {
                Ok(forge) => forge.reply(thread, &summary).await.map_err(|e| e.to_string()),
                Err(e) => Err(e.to_string()),
            }
        }
        Trigger::Slack { api_url, .. } => {
            let (Some(channel), Some(thread_ts)) = (&thread.channel, &thread.thread_ts) else { return Ok(()) };
            summary.push_str(&format!("\n\n<{link}|The conversation>"));
            match slack::client(ctx, a, api_url.as_deref()) {
                Ok(client) => client.post(channel, thread_ts, &summary).await,
                Err(e) => Err(e),
            }
        }
        Trigger::Jira { .. } | Trigger::Linear { .. } => {
            let Some(key) = &thread.issue_key else { return Ok(()) };
            let client = match &a.trigger {
                Trigger::Jira { api_url, email, .. } => jira::client(ctx, a, api_url, email).map(tracker_runs::Client::Jira),
                Trigger::Linear { api_url, .. } => linear::client(ctx, a, api_url.as_deref()).map(tracker_runs::Client::Linear),
                _ => return Ok(()),
            };
            match client {
                Ok(client) => {
                    summary.push_str(&format!("\n\n{}", client.link(&link, "The conversation")));
                    client.comment(key, &summary).await
                }
                Err(e) => Err(e),
            }
        }
        Trigger::Webhook {} | Trigger::Schedule { .. } => return Ok(()),
    };
    if let Err(e) = said {
        tracing::warn!(automation_id = %a.id, error = %e, "the summary was not said; trying again");
        return Err(BusError::new(BusErrorKind::Publish, e));
    }
    Ok(())
}
