//! The projection's system records: start tasks, conversations' lifecycle, sandboxes and the
//! rest of `halyard.sys.*`, folded into the batch being built ([`Pending`]), beside the events
//! `mod.rs` folds. Split from there only for its length: the same batch and the same views.

use halyard_protocol::system::{SandboxStatus, SandboxUpdate, StartTaskStatus, SystemRecord};
use halyard_protocol::{ConversationId, Envelope};

use super::{Pending, tomb_key};
use crate::read_model::layout;
use crate::read_model::store::{SandboxView, TaskView, rfc3339};

impl Pending<'_> {
    /// Takes in one system record, the `seq`-th of its stream.
    pub(super) fn record(&mut self, env: Envelope<SystemRecord>, seq: u64) {
        let at = rfc3339(env.time_ms);
        match env.payload {
            SystemRecord::StartTask(u) => {
                let task = TaskView {
                    id: u.task_id.to_string(),
                    owner: u.owner.0.clone(),
                    conversation_id: u.conversation_id.to_string(),
                    status: u.status.as_str().to_owned(),
                    detail: u.detail.clone(),
                    sandbox_id: u.sandbox_id.map(|s| s.to_string()),
                    from_pool: u.from_pool,
                    created_at: rfc3339(u.created_ms),
                    updated_at: at.clone(),
                    snapshot: u.snapshot.clone(),
                };
                if let Ok(bytes) = serde_json::to_vec(&task) {
                    self.batch.insert(layout::task_key(u.task_id), bytes);
                }
                if u.status.is_final() {
                    self.settled.push((u.owner.0.clone(), u.task_id));
                }
                if self.deleted(u.conversation_id) {
                    return;
                }
                let view = self.ensure_view(u.conversation_id, &u.owner.0, u.task_id, u.created_ms);
                // A retried start's task follows the failed one's.
                view.start_task_id = u.task_id.to_string();
                view.start_task_status = u.status.as_str().to_owned();
                view.status = match u.status {
                    StartTaskStatus::Ready => "READY",
                    // A cancelled start is one that did not happen: retried like a failed one.
                    StartTaskStatus::Error | StartTaskStatus::Cancelled => "ERROR",
                    _ => "STARTING",
                }
                .to_owned();
                view.error_detail = u.detail;
                if let Some(s) = u.sandbox_id {
                    view.sandbox_id = Some(s.to_string());
                }
                view.updated_at = at;
            }
            SystemRecord::ConversationCreated { conversation_id, owner, task_id, sandbox_id, title, repository, created_ms, request } => {
                if self.deleted(conversation_id) {
                    return;
                }
                let view = self.ensure_view(conversation_id, &owner.0, task_id, created_ms);
                if title.is_some() && view.title_set_by.as_deref() != Some("user") {
                    view.title = title;
                    view.title_set_by = Some("user".into());
                }
                view.repository = repository.and_then(|r| serde_json::to_value(r).ok());
                view.sandbox_id = Some(sandbox_id.to_string());
                if let Some(request) = request {
                    view.first_message.clone_from(&request.message);
                    if let Some(p) = &request.parent {
                        view.parent_conversation_id = Some(p.conversation_id.to_string());
                    }
                    // Tags changed since (a record of their own) are newer than the start's.
                    if !view.tags_changed {
                        view.tags.clone_from(&request.tags);
                    }
                    if !view.visibility_changed {
                        view.visibility = request.visibility;
                    }
                    view.start_request = Some(*request);
                }
                self.index_shared(conversation_id);
                let Some(view) = self.view(conversation_id) else { return };
                if !view.usage_counted {
                    view.usage_counted = true;
                    let org = view.start_request.as_ref().and_then(|r| r.org.clone());
                    self.use_up(&owner.0, org.as_deref(), created_ms, "", |row| row.conversations += 1);
                }
            }
            SystemRecord::Sandbox(u) => {
                self.sandbox(&u, env.time_ms);
                if let Some(conv) = u.conversation_id {
                    let id = u.sandbox_id.to_string();
                    // A retried start's old sandbox, deleted, is no longer the conversation's.
                    if let Some(view) = self.view(conv).filter(|v| v.sandbox_id.as_ref().is_none_or(|s| *s == id)) {
                        view.sandbox_status = Some(u.status.as_str().to_owned());
                        view.sandbox_id = Some(u.sandbox_id.to_string());
                        view.updated_at = at;
                    }
                }
            }
            SystemRecord::DeliveryAttempt(a) => {
                if let Ok(bytes) = serde_json::to_vec(&crate::read_model::rows::AttemptRow::from(&a)) {
                    self.batch.insert(layout::attempt_key(&a.webhook_id, a.time_ms, a.delivery_id, a.attempt), bytes.clone());
                    self.batch.insert(layout::last_attempt_key(&a.webhook_id, a.delivery_id), bytes);
                }
            }
            SystemRecord::AutomationRun(r) => {
                if let Ok(bytes) = serde_json::to_vec(&crate::read_model::rows::RunRow::from(&r)) {
                    self.batch.insert(layout::run_key(&r.automation_id, r.time_ms, &r.run_id), bytes.clone());
                    self.batch.insert(layout::last_run_key(&r.automation_id), bytes);
                }
            }
            SystemRecord::ConversationVisibility { conversation_id, visibility } => {
                if let Some(view) = self.view(conversation_id) {
                    view.visibility = visibility;
                    view.visibility_changed = true;
                    view.updated_at = at;
                }
                self.index_shared(conversation_id);
            }
            SystemRecord::ConversationTags { conversation_id, tags } => {
                if let Some(view) = self.view(conversation_id) {
                    view.tags = tags;
                    view.tags_changed = true;
                    view.updated_at = at;
                }
            }
            SystemRecord::Audit(a) => {
                if let Ok(bytes) = serde_json::to_vec(&crate::read_model::rows::AuditRow::from(&a)) {
                    if let Some(org) = &a.org {
                        self.batch.insert(layout::AuditScope::org(org).key(a.at_ms, seq), &bytes);
                    }
                    self.batch.insert(layout::AuditScope::all().key(a.at_ms, seq), bytes);
                }
            }
            SystemRecord::SandboxImage(_) | SystemRecord::SandboxPool { .. } => {}
            SystemRecord::WebhookDisabled { webhook_id, reason, .. } => {
                tracing::warn!(%webhook_id, %reason, "webhook disabled by the dispatcher");
            }
            SystemRecord::ConversationDeleted { conversation_id, owner } => {
                if let Some(view) = self.view(conversation_id) {
                    let created = view.created_ms;
                    let org = view.start_request.as_ref().and_then(|r| r.org.clone());
                    self.batch.remove(layout::owner_key(&owner.0, created, conversation_id));
                    if let Some(org) = org {
                        self.batch.remove(layout::org_shared_key(&org, created, conversation_id));
                    }
                }
                self.views.insert(conversation_id, None);
                self.dirty.insert(conversation_id);
                self.tomb_checked.insert(conversation_id, true);
                self.batch.insert(tomb_key(conversation_id), &[1u8][..]);
                self.network.remove(&conversation_id);
                self.batch.remove(layout::network_key(conversation_id));
                for key in self.store.tree().scan_prefix(layout::log_index_prefix(conversation_id)).keys().flatten() {
                    self.batch.remove(key);
                }
            }
        }
    }

    /// Keeps the conversation in its organization's shared list (`GET /orgs/{org}/conversations`)
    /// while it is shared with it, and out of it otherwise.
    fn index_shared(&mut self, id: ConversationId) {
        let Some(view) = self.view(id) else { return };
        let Some(org) = view.start_request.as_ref().and_then(|r| r.org.clone()) else { return };
        let key = layout::org_shared_key(&org, view.created_ms, id);
        if view.visibility == halyard_protocol::org::Visibility::Org {
            self.batch.insert(key, id.as_bytes());
        } else {
            self.batch.remove(key);
        }
    }

    /// Upserts a sandbox's view; a deleted sandbox leaves the read model.
    fn sandbox(&mut self, u: &SandboxUpdate, time_ms: i64) {
        let id = u.sandbox_id;
        if !self.sandboxes.contains_key(&id) {
            let v = self.store.sandbox(id).ok().flatten();
            self.sandboxes.insert(id, v);
        }
        let at = rfc3339(time_ms);
        // Seconds run end when it stops running (paused, stopped, gone): its owner's usage.
        let running = matches!(u.status, SandboxStatus::Running | SandboxStatus::Starting);
        let ran = self.sandboxes.get_mut(&id).and_then(Option::as_mut).and_then(|v| {
            let since = if running { None } else { v.running_since_ms.take() };
            since.map(|t| (v.owner.clone(), ((time_ms - t).max(0) / 1000) as u64))
        });
        if let Some((owner, secs)) = ran {
            // In its conversation's organization too, if it is in one.
            let org = u.conversation_id.and_then(|c| self.view(c)).and_then(|v| v.start_request.as_ref()).and_then(|r| r.org.clone());
            self.use_up(&owner, org.as_deref(), time_ms, "", |row| row.sandbox_seconds += secs);
        }
        let slot = self.sandboxes.entry(id).or_insert(None);
        if u.status == SandboxStatus::Deleted {
            if let Some(old) = slot.take() {
                self.batch.remove(layout::sandbox_owner_key(&old.owner, old.created_ms, id));
            }
            return;
        }
        if slot.is_none() {
            self.batch.insert(layout::sandbox_owner_key(&u.owner.0, time_ms, id), &id.as_bytes()[..]);
        }
        let view = slot.get_or_insert_with(|| SandboxView {
            id: id.to_string(),
            owner: u.owner.0.clone(),
            created_at: at.clone(),
            created_ms: time_ms,
            ..Default::default()
        });
        view.conversation_id = u.conversation_id.map(|c| c.to_string());
        view.kind = u.sandbox_kind.clone();
        view.spec = u.spec.clone();
        view.status = u.status.as_str().to_owned();
        if running && view.running_since_ms.is_none() {
            view.running_since_ms = Some(time_ms);
        }
        view.detail = u.detail.clone();
        view.exposed_urls = u.exposed_urls.iter().map(|e| serde_json::json!({"name": e.name, "url": e.url})).collect();
        view.workspace = u.workspace.clone();
        view.from_pool = u.from_pool;
        view.updated_at = at;
    }
}
