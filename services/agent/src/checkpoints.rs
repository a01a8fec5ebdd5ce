//! The workspace's checkpoints as the agent runner asks for them (the executor keeps them, see
//! its `checkpoint` module), and the one thing the runner keeps of them outside the sandbox: the
//! last checkpoint's commit, `ckpt.<conversation>` in the user bucket. The store in the
//! workspace is writable by the agent's commands; that commit id is not, and it vouches for every
//! checkpoint before it (each commit names its parent by hash). So each checkpoint is asked to
//! follow it, and a restore or a fork's copy starts from it: what the agent changed in the store
//! is put back, or refused, instead of restored.

use std::time::Duration;

use halyard_platform::executor_client::ExecutorClient;
use halyard_protocol::{ConversationId, subjects};

use crate::ctx::Ctx;

/// Longest a run waits for a checkpoint: one that takes longer is skipped (a restore point is
/// lost, the run goes on), never a stalled run.
const PATIENCE: Duration = Duration::from_secs(10);

/// The last checkpoint's commit as kept outside the sandbox (none: none kept, as for a
/// conversation older than this record, or a fork before its first checkpoint).
pub async fn head(ctx: &Ctx, conversation: ConversationId) -> Option<String> {
    let key = subjects::checkpoint_head_key(conversation);
    match ctx.user_kv.get(&key).await {
        Ok(Some(bytes)) => String::from_utf8(bytes.to_vec()).ok(),
        Ok(None) => None,
        Err(e) => {
            tracing::warn!(%conversation, error = %e, "cannot read the last checkpoint's commit");
            None
        }
    }
}

/// Keeps the workspace as it is after event `seq`, following the kept head, and keeps the new
/// head; a failure, or one slower than [`PATIENCE`], is logged and the run goes on: it costs a
/// restore point, not work.
pub async fn take(ctx: &Ctx, conversation: ConversationId, exec: &ExecutorClient, seq: u64) {
    let parent = head(ctx, conversation).await;
    let Ok(taken) = tokio::time::timeout(PATIENCE, exec.checkpoint(seq, parent.as_deref())).await else {
        tracing::warn!(seq, "the workspace's checkpoint took too long; skipped");
        return;
    };
    match taken {
        Ok(c) => {
            metrics::histogram!("halyard_checkpoint_seconds").record(c.ms as f64 / 1000.0);
            tracing::debug!(seq, changed = c.changed, ms = c.ms, "checkpoint");
            if parent.as_deref() != Some(c.commit.as_str()) {
                let key = subjects::checkpoint_head_key(conversation);
                if let Err(e) = ctx.user_kv.put(&key, c.commit.into_bytes().into()).await {
                    tracing::warn!(%conversation, seq, error = %e, "cannot keep the last checkpoint's commit");
                }
            }
        }
        Err(e) => tracing::warn!(seq, error = %e, "cannot checkpoint the workspace"),
    }
}

/// Forgets the kept head of a deleted conversation.
pub async fn forget(ctx: &Ctx, conversation: ConversationId) {
    if let Err(e) = ctx.user_kv.purge(subjects::checkpoint_head_key(conversation)).await {
        tracing::debug!(%conversation, error = %e, "cannot forget the last checkpoint's commit");
    }
}
