//! Threads: the issue, pull request or chat thread a run's conversation answers on, kept in the
//! automations bucket twice (`thread.<automation>.<digest>` for the next mention there,
//! `conv.<conversation>` for the summary when a run ends). A conversation whose thread is known was
//! acknowledged already: a command delivered again says nothing twice. A thread whose
//! conversation failed to start is forgotten for mentions, so the next one starts afresh.

use halyard_platform::{BusError, BusErrorKind};
use halyard_protocol::automation::Thread;
use halyard_protocol::{ConversationId, subjects};

use crate::ctx::Ctx;
use crate::decision::read;

/// Whether the start of `conversation_id` was acknowledged on its thread already.
pub async fn acknowledged(ctx: &Ctx, conversation_id: ConversationId) -> Result<bool, BusError> {
    Ok(read::<Thread>(&ctx.bucket, &subjects::automation_conversation_key(conversation_id)).await?.is_some())
}

/// Remembers `thread` under `thread_key` and under its conversation.
pub async fn remember(ctx: &Ctx, thread_key: &str, thread: &Thread) -> Result<(), BusError> {
    let thread = Thread { thread_key: Some(thread_key.to_owned()), ..thread.clone() };
    let bytes = serde_json::to_vec(&thread).unwrap_or_default();
    for key in [thread_key.to_owned(), subjects::automation_conversation_key(thread.conversation_id)] {
        ctx.bucket.put(key, bytes.clone().into()).await.map_err(|e| BusError::new(BusErrorKind::Publish, e))?;
    }
    Ok(())
}

/// Forgets `thread` for later mentions (its conversation never started): the next mention there
/// starts a new conversation instead of writing to one that will never answer. Only if the key
/// still names this conversation.
pub async fn forget_mentions(ctx: &Ctx, thread: &Thread) -> Result<(), BusError> {
    let Some(key) = &thread.thread_key else { return Ok(()) };
    if read::<Thread>(&ctx.bucket, key).await?.is_some_and(|t| t.conversation_id == thread.conversation_id) {
        ctx.bucket.delete(key).await.map_err(|e| BusError::new(BusErrorKind::Publish, e))?;
    }
    Ok(())
}
