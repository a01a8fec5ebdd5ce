//! Starts that fail: when the conversation of a run that answers on a thread (a forge's issue or
//! pull request, a Slack thread, a tracker's issue) never gets going (the clone, the setup
//! script, the sandbox quota, a refused profile: any phase of the start task), the thread hears
//! it in words, with the reason and what to do, instead of waiting for a summary no run will
//! send. The thread is then forgotten for mentions, so the next mention there starts afresh.
//!
//! Start-task records come from the system stream through a durable consumer (a restart misses
//! none). A start can fail before the run's "on it" has remembered its thread: the run checks
//! its start task once more after remembering it ([`check`]), and whichever comes second says it.
//! A key per conversation in the automations bucket keeps it to once. A failed start also ends
//! its batch item, if it is one ([`crate::batches::ended`]).

use halyard_platform::bus;
use halyard_platform::{BusError, BusErrorKind, Shutdown};
use halyard_protocol::automation::{Automation, Thread};
use halyard_protocol::system::{StartTaskStatus, StartTaskUpdate, SystemRecord};
use halyard_protocol::{TaskId, subjects};

use crate::ctx::Ctx;
use crate::decision::read;
use crate::summaries::{say, settle};
use crate::threads;

/// Serves until `shutdown`.
pub async fn run(ctx: Ctx, shutdown: Shutdown) {
    let result =
        bus::consume(ctx.js.clone(), subjects::SYSTEM_STREAM, subjects::AUTOMATION_START_FAILURE_CONSUMER, "automations", shutdown, |d| {
            let ctx = ctx.clone();
            async move {
                let Some((env, d)) = d.decode::<SystemRecord>().await else { return };
                match env.payload {
                    SystemRecord::StartTask(u) if u.status == StartTaskStatus::Error => {
                        tokio::spawn(async move {
                            let told = failed(&ctx, &u).await;
                            let batch = crate::batches::ended(&ctx, u.conversation_id, "start_failed").await;
                            settle(d, told.and(batch)).await
                        });
                    }
                    _ => d.ack().await,
                }
            }
        })
        .await;
    if let Err(e) = result {
        tracing::error!(error = %e, "the automation start failures stopped");
    }
}

/// After a run's thread is remembered: if its start task failed already, says so now.
pub async fn check(ctx: &Ctx, task_id: TaskId) -> Result<(), BusError> {
    let last = bus::last_record::<SystemRecord>(&ctx.js, subjects::SYSTEM_STREAM, &subjects::task_record(task_id)).await?;
    match last {
        Some((_, env)) => match env.payload {
            SystemRecord::StartTask(u) if u.status == StartTaskStatus::Error => failed(&ctx.clone(), &u).await,
            _ => Ok(()),
        },
        None => Ok(()),
    }
}

/// Tells the thread of `u`'s conversation, if it has one, that the start failed and why.
async fn failed(ctx: &Ctx, u: &StartTaskUpdate) -> Result<(), BusError> {
    let Some(thread) = read::<Thread>(&ctx.bucket, &subjects::automation_conversation_key(u.conversation_id)).await? else {
        // Not an automation's conversation, or its thread is not remembered yet (the run's
        // `check` says it then).
        return Ok(());
    };
    let done_key = format!("startfailed.{}", u.conversation_id);
    if ctx.bucket.get(&done_key).await.map_err(|e| BusError::new(BusErrorKind::Read, e))?.is_some() {
        return Ok(());
    }
    let Some(a) = read::<Automation>(&ctx.bucket, &subjects::automation_key(&thread.automation_id)).await? else { return Ok(()) };
    let detail = u.detail.as_deref().unwrap_or("the start failed for a reason it did not give");
    tracing::info!(automation_id = %a.id, conversation_id = %u.conversation_id, %detail, "a run's start failed; telling its thread");
    let slack = matches!(a.trigger, halyard_protocol::automation::Trigger::Slack { .. });
    say(ctx, &a, &thread, words(slack, detail)).await?;
    threads::forget_mentions(ctx, &thread).await?;
    let _ = ctx.bucket.put(done_key, Vec::new().into()).await;
    Ok(())
}

/// What the thread reads: what failed, in the start task's words, and what to do about it.
fn words(slack: bool, detail: &str) -> String {
    let what = match detail.split_once(" failed: ") {
        Some(("PREPARING_REPOSITORY", why)) => format!("I could not get the repository: {why}"),
        Some(("RUNNING_SETUP_SCRIPT", why)) => format!("the repository's setup script failed: {why}"),
        Some(("WAITING_FOR_SANDBOX", why)) => format!("I got no sandbox to work in: {why}"),
        Some((_, why)) => format!("I could not start: {why}"),
        None => format!("I could not start: {detail}"),
    };
    let fix = if slack {
        "fix it and mention me again in this thread"
    } else {
        "fix it (the automation's git provider, repository or settings in Halyard) and mention me again"
    };
    format!("I could not work on this: {what}.\n\nNothing ran; {fix}.")
}

#[cfg(test)]
mod tests {
    use super::words;

    #[test]
    fn the_words_name_the_phase_the_reason_and_what_to_do() {
        let said = words(false, "PREPARING_REPOSITORY failed: git clone of http://x/acme/widget.git: exit status 128");
        assert!(said.starts_with("I could not work on this: I could not get the repository: git clone of"), "{said}");
        assert!(said.contains("mention me again"), "{said}");
        let said = words(true, "WAITING_FOR_SANDBOX failed: sandbox quota reached");
        assert!(said.contains("I got no sandbox to work in: sandbox quota reached"), "{said}");
        assert!(said.contains("in this thread"), "{said}");
    }
}
