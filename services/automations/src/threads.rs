//! Threads: the issue, pull request or chat thread a run's conversation answers on, kept in the
//! automations bucket twice (`thread.<automation>.<digest>` for the next mention there,
//! `conv.<conversation>` for the summary when a run ends). A conversation whose thread is known was
//! acknowledged already: a command delivered again says nothing twice.

use halyard_platform::{BusError, BusErrorKind};
use halyard_protocol::automation::Thread;
use halyard_protocol::{ConversationId, subjects};

use crate::Ctx;
use crate::runs::read;

/// Whether the start of `conversation_id` was acknowledged on its thread already.
pub async fn acknowledged(ctx: &Ctx, conversation_id: ConversationId) -> Result<bool, BusError> {
    Ok(read::<Thread>(&ctx.bucket, &subjects::automation_conversation_key(conversation_id)).await?.is_some())
}

/// Remembers `thread` under `thread_key` and under its conversation.
pub async fn remember(ctx: &Ctx, thread_key: &str, thread: &Thread) -> Result<(), BusError> {
    let bytes = serde_json::to_vec(thread).unwrap_or_default();
    for key in [thread_key.to_owned(), subjects::automation_conversation_key(thread.conversation_id)] {
        ctx.bucket.put(key, bytes.clone().into()).await.map_err(|e| BusError::new(BusErrorKind::Publish, e))?;
    }
    Ok(())
}
