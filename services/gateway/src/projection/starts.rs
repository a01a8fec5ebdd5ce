//! The rows a start shows at once: its start task (`WORKING`) and its conversation (`STARTING`),
//! written when the gateway sends the start, so that the next GET finds them before the
//! conversations service's records arrive. Written under the lock a projection batch holds and
//! into the projection's cached copies, so the projection never writes an older copy over them;
//! where the projection already holds this start's rows, they say more and are left alone.

use halyard_protocol::{ConversationId, TaskId, UserId};

use super::{Live, new_view};
use crate::read_model::layout;
use crate::read_model::store::{self, Store, TaskView, rfc3339};

/// What a start that was just sent shows.
pub struct Sent<'a> {
    pub task_id: TaskId,
    pub conversation_id: ConversationId,
    pub owner: &'a UserId,
    pub title: Option<String>,
    pub first_message: Option<String>,
    pub tags: std::collections::BTreeMap<String, String>,
    /// When the conversation was made (a retry keeps the first start's).
    pub created_ms: i64,
    pub now_ms: i64,
}

impl Live {
    /// Writes the rows of a start sent now; answers its start task as it then reads.
    pub async fn start_sent(&self, store: &Store, sent: Sent<'_>) -> Result<TaskView, store::StoreError> {
        let Sent { task_id, conversation_id: id, owner, title, first_message, tags, created_ms, now_ms } = sent;
        let mut views = self.views.lock().await;
        let task = TaskView {
            id: task_id.to_string(),
            owner: owner.0.clone(),
            conversation_id: id.to_string(),
            status: "WORKING".into(),
            created_at: rfc3339(now_ms),
            updated_at: rfc3339(now_ms),
            ..Default::default()
        };
        let task = match store.task(task_id)? {
            Some(ahead) => ahead,
            None => {
                store.put_json(&layout::task_key(task_id), &task)?;
                task
            }
        };
        let cached = match views.get(&id) {
            Some(view) => view.clone(),
            None => store.conversation(id)?,
        };
        let view = match cached {
            // The projection has this start's records already.
            Some(view) if view.start_task_id == task_id.to_string() => return Ok(task),
            // A retry: starting again, no longer failed.
            Some(mut view) => {
                view.status = "STARTING".into();
                view.start_task_id = task_id.to_string();
                view.start_task_status = "WORKING".into();
                view.error_detail = None;
                view
            }
            None => {
                let mut view = new_view(id, &owner.0, task_id, created_ms);
                view.title_set_by = title.as_ref().map(|_| "user".to_owned());
                view.title = title;
                view.first_message = first_message;
                view.tags = tags;
                store.tree().insert(layout::owner_key(&owner.0, created_ms, id), &id.as_bytes()[..]).map_err(store::StoreError::from)?;
                view
            }
        };
        store.put_json(&layout::conv_key(id), &view)?;
        views.insert(id, Some(view));
        Ok(task)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sent(task: TaskId, id: ConversationId, owner: &UserId) -> Sent<'_> {
        Sent {
            task_id: task,
            conversation_id: id,
            owner,
            title: Some("t".into()),
            first_message: Some("hi".into()),
            tags: Default::default(),
            created_ms: 1_000,
            now_ms: 2_000,
        }
    }

    /// A retry's rows replace the failed start's in the projection's copy too: the next batch
    /// that touches the conversation writes `STARTING`, not the `ERROR` it held.
    #[tokio::test]
    async fn a_retry_replaces_the_projections_copy_of_the_failed_start() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path(), 1 << 20).unwrap();
        let live = Live::default();
        let (owner, id) = (UserId("ann".into()), ConversationId::new());
        let mut failed = new_view(id, &owner.0, TaskId::new(), 1_000);
        failed.status = "ERROR".into();
        failed.error_detail = Some("clone failed".into());
        store.put_json(&layout::conv_key(id), &failed).unwrap();
        live.views.lock().await.insert(id, Some(failed));

        let retry = TaskId::new();
        let task = live.start_sent(&store, sent(retry, id, &owner)).await.unwrap();
        assert_eq!(task.status, "WORKING");
        let cached = live.views.lock().await.get(&id).cloned().flatten().unwrap();
        let stored = store.conversation(id).unwrap().unwrap();
        for view in [&cached, &stored] {
            assert_eq!((view.status.as_str(), view.start_task_id.as_str()), ("STARTING", retry.to_string().as_str()));
            assert_eq!(view.error_detail, None);
        }
    }

    /// When the projection got this start's records first, what it wrote stays: the start does
    /// not put a `READY` conversation back to `STARTING`.
    #[tokio::test]
    async fn rows_the_projection_wrote_first_are_left_alone() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path(), 1 << 20).unwrap();
        let live = Live::default();
        let (owner, id, task) = (UserId("ann".into()), ConversationId::new(), TaskId::new());
        let mut ready = new_view(id, &owner.0, task, 1_000);
        ready.status = "READY".into();
        ready.start_task_status = "READY".into();
        live.views.lock().await.insert(id, Some(ready));
        let done = TaskView { id: task.to_string(), status: "READY".into(), ..Default::default() };
        store.put_json(&layout::task_key(task), &done).unwrap();

        let answered = live.start_sent(&store, sent(task, id, &owner)).await.unwrap();
        assert_eq!(answered.status, "READY");
        assert_eq!(live.views.lock().await.get(&id).cloned().flatten().unwrap().status, "READY");
        assert_eq!(store.task(task).unwrap().unwrap().status, "READY");
        // (Nothing was written over the projection's view either.)
        assert!(store.conversation(id).unwrap().is_none());
    }

    /// A new conversation's row is there at once, and listed under its owner.
    #[tokio::test]
    async fn a_new_start_is_found_at_once() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path(), 1 << 20).unwrap();
        let live = Live::default();
        let (owner, id, task) = (UserId("ann".into()), ConversationId::new(), TaskId::new());
        live.start_sent(&store, sent(task, id, &owner)).await.unwrap();
        let view = store.conversation(id).unwrap().unwrap();
        assert_eq!((view.status.as_str(), view.title.as_deref(), view.first_message.as_deref()), ("STARTING", Some("t"), Some("hi")));
        assert!(store.tree().contains_key(layout::owner_key("ann", 1_000, id)).unwrap());
        assert_eq!(store.task(task).unwrap().unwrap().status, "WORKING");
    }
}
