//! The gateway's read models, in sled, derived from the bus by [`crate::projection`] and
//! rebuildable by deleting them and replaying.
//!
//! One tree with key prefixes, so that a projected batch (views, log index and the stream
//! cursors) is written all or nothing ([`batch`]): after a crash the cursors and the views
//! always agree.
//!
//! Events themselves are not copied here: they are read from their log in JetStream (see
//! [`crate::read_model::events`]). Copying each one into sled cost more CPU than everything else the
//! gateway does with an event. What is kept is a sparse index, the stream sequence of every
//! [`LOG_INDEX_STRIDE`]th event, so that a read from `seq` N starts near N instead of at the
//! start of a long log. Where each row is kept: [`super::layout`].
//!

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use halyard_protocol::{ConversationId, SandboxId, TaskId};

use super::layout::{
    AuditScope, LEGACY_EVENT_PREFIX, conv_key, log_index_key, meta_key, owner_prefix, sandbox_key, sandbox_owner_prefix, task_key,
    usage_prefix,
};

/// A conversation as the API shows it.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct ConversationView {
    pub id: String,
    pub owner: String,
    pub title: Option<String>,
    /// `STARTING`, `READY` or `ERROR` (from the start task).
    pub status: String,
    pub start_task_id: String,
    pub start_task_status: String,
    pub error_detail: Option<String>,
    /// The agent's execution status (`idle`, `running`, ...), once the agent has started.
    pub execution_status: Option<String>,
    pub sandbox_id: Option<String>,
    pub sandbox_status: Option<String>,
    pub repository: Option<Value>,
    pub created_at: String,
    pub updated_at: String,
    pub last_event_seq: u64,
    /// Who set `title`: `user` (at start or later) wins over `generated`.
    #[serde(default)]
    pub title_set_by: Option<String>,
    #[serde(default)]
    pub created_ms: i64,
    /// Running totals of the conversation's LLM calls.
    #[serde(default)]
    pub metrics: LlmTotals,
    /// When actions wait for the user's consent: `never`, `always` or `risky`.
    #[serde(default = "never")]
    pub confirmation_policy: String,
    /// The message the conversation was started with.
    #[serde(default)]
    pub first_message: Option<String>,
    /// The last `agent_error` of the current run, `<message> (<code>)`.
    #[serde(default)]
    pub agent_error: Option<String>,
    /// Why the execution status is what it is, when the agent said.
    #[serde(default)]
    pub execution_reason: Option<String>,
    /// What the start asked for, to try a failed start again.
    #[serde(default)]
    pub start_request: Option<halyard_protocol::system::StartRequest>,
    /// Labels the owner finds the conversation by.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub tags: BTreeMap<String, String>,
    /// `tags` were changed after the start (a creation record replayed later keeps them).
    #[serde(default)]
    pub tags_changed: bool,
    /// Who reads it besides its owner (the members of its organization, or nobody).
    #[serde(default)]
    pub visibility: halyard_protocol::org::Visibility,
    /// `visibility` was changed after the start.
    #[serde(default)]
    pub visibility_changed: bool,
    /// Its creation is counted in its owner's usage (a creation record read twice counts once).
    #[serde(default)]
    pub usage_counted: bool,
    /// The pull requests the agent opened with Halyard's own tool, in order.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub pull_requests: Vec<PullRequest>,
    /// The agent's plan, as its last `task_list` event holds it.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tasks: Vec<halyard_protocol::event::TaskItem>,
    /// A helper: the conversation whose `delegate` call started it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parent_conversation_id: Option<String>,
    /// The helpers its agent started, in order.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub sub_conversation_ids: Vec<String>,
    /// Where the agent's browser is, as its last browser tool left it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub browser: Option<BrowserView>,
    /// The agent's typed result, as its last `result` event holds it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub result: Option<Value>,
    /// The checks of its last checked finish.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub verdict: Option<Verdict>,
}

pub use halyard_protocol::event::Verdict;

/// The agent's browser: its page, and the latest screenshot of it.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct BrowserView {
    pub url: String,
    /// Served at `GET /conversations/{id}/screenshots/{screenshot_id}`.
    pub screenshot_id: Option<String>,
}

/// A pull request the agent opened.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct PullRequest {
    pub number: u64,
    pub url: String,
    pub title: Option<String>,
}

fn never() -> String {
    "never".into()
}

/// What a conversation's LLM calls used in all.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct LlmTotals {
    pub llm_calls: u64,
    pub prompt_tokens: u64,
    pub completion_tokens: u64,
    pub cached_tokens: u64,
    /// Sum of the calls whose model has a price.
    pub cost_usd: f64,
    pub latency_ms: u64,
    /// The same, per model that answered (a profile's fallbacks answer with theirs).
    #[serde(default)]
    pub by_model: std::collections::BTreeMap<String, ModelTotals>,
}

/// What one model's calls used in a conversation.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct ModelTotals {
    pub llm_calls: u64,
    pub prompt_tokens: u64,
    pub completion_tokens: u64,
    pub cached_tokens: u64,
    pub cost_usd: f64,
}

/// A start task as the API shows it.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct TaskView {
    pub id: String,
    pub owner: String,
    pub conversation_id: String,
    pub status: String,
    pub detail: Option<String>,
    pub sandbox_id: Option<String>,
    pub from_pool: bool,
    pub created_at: String,
    pub updated_at: String,
    /// The environment snapshot its sandbox started from.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub snapshot: Option<String>,
}

/// A sandbox as the API shows it.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct SandboxView {
    pub id: String,
    pub owner: String,
    pub conversation_id: Option<String>,
    pub kind: String,
    pub spec: Option<String>,
    pub status: String,
    pub detail: Option<String>,
    /// Name to URL (`AGENT_SERVER`, `WORKER_1`, ...).
    pub exposed_urls: Vec<Value>,
    pub workspace: String,
    pub from_pool: bool,
    pub created_at: String,
    pub updated_at: String,
    pub created_ms: i64,
    /// Since when it has been running (for usage reports' sandbox seconds).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub running_since_ms: Option<i64>,
}

impl SandboxView {
    /// Counts toward the running limits (a paused sandbox does not).
    pub fn is_running(&self) -> bool {
        self.status == "RUNNING" || self.status == "STARTING"
    }

    /// The URL the sandbox exposes under `name` (`AGENT_SERVER`, `WORKER_1`, ...).
    pub fn url_of(&self, name: &str) -> Option<&str> {
        self.exposed_urls.iter().find(|u| u["name"] == name).and_then(|u| u["url"].as_str())
    }
}

/// A page of conversations that match a search, and how many match in all.
#[derive(Debug)]
pub struct Matching {
    pub items: Vec<ConversationView>,
    /// The cursor of the next page, if there is one.
    pub next: Option<Vec<u8>>,
    pub count: usize,
}

/// Why the store failed.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("read model storage: {0}")]
    Sled(#[from] sled::Error),
    #[error("read model corrupt: {0}")]
    Corrupt(#[from] serde_json::Error),
}

/// A read model that failed is the server's fault, never the request's.
impl From<StoreError> for crate::http::error::ApiError {
    fn from(e: StoreError) -> Self {
        Self::internal(e)
    }
}

impl StoreError {
    pub fn is_retryable(&self) -> bool {
        false
    }
}

/// What one user used on one day with one model (`""`: what belongs to no model, such as
/// conversations started and sandbox seconds).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct UsageRow {
    pub tokens_in: u64,
    pub tokens_out: u64,
    pub cached_tokens: u64,
    pub cost_usd: f64,
    pub llm_calls: u64,
    pub conversations: u64,
    pub sandbox_seconds: u64,
}

impl UsageRow {
    pub fn add(&mut self, o: &UsageRow) {
        self.tokens_in += o.tokens_in;
        self.tokens_out += o.tokens_out;
        self.cached_tokens += o.cached_tokens;
        self.cost_usd += o.cost_usd;
        self.llm_calls += o.llm_calls;
        self.conversations += o.conversations;
        self.sandbox_seconds += o.sandbox_seconds;
    }
}

/// Removes the audit records from before `cutoff_ms` (the oldest are last), with their
/// organizations' copies; how many.
pub fn prune_audit(tree: &sled::Tree, cutoff_ms: i64) -> Result<usize, sled::Error> {
    let all = AuditScope::all();
    let mut removed = 0;
    // Keys from the last millisecond before the cutoff on are all older.
    for entry in tree.range(all.at(cutoff_ms - 1)..all.end()) {
        let (key, row) = entry?;
        if let Some(org) = serde_json::from_slice::<super::rows::AuditRow>(&row).ok().and_then(|r| r.org) {
            tree.remove(AuditScope::org(&org).same_record(&key))?;
        }
        tree.remove(key)?;
        removed += 1;
    }
    Ok(removed)
}

/// The read models.
#[derive(Clone)]
pub struct Store {
    tree: sled::Tree,
    db: sled::Db,
}

impl Store {
    /// Opens the store at `path`, keeping at most `cache_bytes` of its pages in memory.
    pub fn open(path: &std::path::Path, cache_bytes: u64) -> Result<Self, StoreError> {
        let db = sled::Config::new().path(path).flush_every_ms(Some(200)).cache_capacity(cache_bytes).open()?;
        let tree = db.open_tree("read_models")?;
        super::batch::replay(&tree)?;
        for key in tree.scan_prefix([LEGACY_EVENT_PREFIX]).keys() {
            tree.remove(key?)?;
        }
        super::indexes::build(&tree)?;
        Ok(Self { tree, db })
    }

    pub fn tree(&self) -> &sled::Tree {
        &self.tree
    }

    pub async fn flush(&self) {
        let _ = self.db.flush_async().await;
    }

    fn get_json<T: serde::de::DeserializeOwned>(&self, key: &[u8]) -> Result<Option<T>, StoreError> {
        match self.tree.get(key)? {
            Some(v) => Ok(Some(serde_json::from_slice(&v)?)),
            None => Ok(None),
        }
    }

    pub fn conversation(&self, id: ConversationId) -> Result<Option<ConversationView>, StoreError> {
        self.get_json(&conv_key(id))
    }

    pub fn task(&self, id: TaskId) -> Result<Option<TaskView>, StoreError> {
        self.get_json(&task_key(id))
    }

    /// What conversation `id` reached through its egress proxy (none before its first report).
    pub fn network(&self, id: ConversationId) -> Result<Option<crate::read_model::rows::NetworkRow>, StoreError> {
        self.get_json(&super::layout::network_key(id))
    }

    pub fn sandbox(&self, id: SandboxId) -> Result<Option<SandboxView>, StoreError> {
        self.get_json(&sandbox_key(id))
    }

    /// Running sandboxes: (of `owner`, in total).
    pub fn running_sandboxes(&self, owner: &str) -> Result<(usize, usize), StoreError> {
        let (mut mine, mut total) = (0, 0);
        for entry in self.tree.scan_prefix([b's']) {
            let (_, v) = entry?;
            let view: SandboxView = serde_json::from_slice(&v)?;
            if view.is_running() {
                total += 1;
                if view.owner == owner {
                    mine += 1;
                }
            }
        }
        Ok((mine, total))
    }

    /// A page of one owner's sandboxes, newest first (see [`Self::conversations_of`]).
    pub fn sandboxes_of(
        &self,
        owner: &str,
        cursor: Option<&[u8]>,
        limit: usize,
    ) -> Result<(Vec<SandboxView>, Option<Vec<u8>>), StoreError> {
        self.page(sandbox_owner_prefix(owner), cursor, limit, |id| self.sandbox(SandboxId(id)))
    }

    /// Whether `owner` owns anything here: a conversation, a sandbox or usage (a name with data
    /// is not free to give a new user).
    pub fn owns_anything(&self, owner: &str) -> Result<bool, StoreError> {
        for prefix in [owner_prefix(owner), sandbox_owner_prefix(owner), usage_prefix(owner)] {
            if self.tree.scan_prefix(&prefix).next().transpose()?.is_some() {
                return Ok(true);
            }
        }
        Ok(false)
    }

    /// A page of one owner's conversations, newest first, after `cursor` (an opaque key
    /// suffix from a previous page).
    pub fn conversations_of(
        &self,
        owner: &str,
        cursor: Option<&[u8]>,
        limit: usize,
    ) -> Result<(Vec<ConversationView>, Option<Vec<u8>>), StoreError> {
        self.page(owner_prefix(owner), cursor, limit, |id| self.conversation(ConversationId(id)))
    }

    /// A page of `owner`'s conversations that `keep` accepts, newest first, and how many it
    /// accepts in all.
    pub fn conversations_matching(
        &self,
        owner: &str,
        cursor: Option<&[u8]>,
        limit: usize,
        keep: impl Fn(&ConversationView) -> bool,
    ) -> Result<Matching, StoreError> {
        // One pass: every match counts; those after the cursor fill the page.
        let prefix = owner_prefix(owner);
        let mut m = Matching { items: Vec::new(), next: None, count: 0 };
        let mut last = None;
        for entry in self.tree.scan_prefix(&prefix) {
            let (k, v) = entry?;
            let Ok(bytes) = <[u8; 16]>::try_from(v.as_ref()) else { continue };
            let Some(view) = self.conversation(ConversationId(uuid::Uuid::from_bytes(bytes)))?.filter(|c| keep(c)) else { continue };
            m.count += 1;
            let key = &k[prefix.len()..];
            if m.items.len() < limit && cursor.is_none_or(|c| key > c) {
                m.items.push(view);
                last = Some(key.to_vec());
            }
        }
        if m.items.len() == limit {
            m.next = last;
        }
        Ok(m)
    }

    /// Up to `limit` of the conversations shared with organization `org` that `keep` accepts,
    /// newest first.
    pub fn shared_with(
        &self,
        org: &str,
        limit: usize,
        keep: impl Fn(&ConversationView) -> bool,
    ) -> Result<Vec<ConversationView>, StoreError> {
        let get = |id| Ok(self.conversation(ConversationId(id))?.filter(|c| keep(c)));
        Ok(self.page(super::layout::org_shared_prefix(org), None, limit, get)?.0)
    }

    /// A page of an index whose values are ids, resolved by `get`.
    fn page<T>(
        &self,
        prefix: Vec<u8>,
        cursor: Option<&[u8]>,
        limit: usize,
        get: impl Fn(uuid::Uuid) -> Result<Option<T>, StoreError>,
    ) -> Result<(Vec<T>, Option<Vec<u8>>), StoreError> {
        let start = match cursor {
            Some(c) => {
                let mut k = prefix.clone();
                k.extend_from_slice(c);
                k.push(0); // strictly after the cursor
                k
            }
            None => prefix.clone(),
        };
        let mut items = Vec::new();
        let mut last = None;
        for entry in self.tree.range(start..) {
            let (k, v) = entry?;
            if !k.starts_with(&prefix) {
                break;
            }
            let Ok(bytes) = <[u8; 16]>::try_from(v.as_ref()) else { continue };
            if let Some(view) = get(uuid::Uuid::from_bytes(bytes))? {
                items.push(view);
                last = Some(k[prefix.len()..].to_vec());
            }
            if items.len() == limit {
                break;
            }
        }
        let next = if items.len() == limit { last } else { None };
        Ok((items, next))
    }

    /// Where to start reading a conversation's log for the events after `after`: the last
    /// indexed event at or before `after + 1`, as (its seq, its stream sequence); (1, 1), the
    /// stream's start, if none is indexed yet. At most a stride of events is read and skipped.
    pub fn log_start(&self, id: ConversationId, after: u64) -> Result<(u64, u64), StoreError> {
        let range = log_index_key(id, 0)..=log_index_key(id, after.saturating_add(1));
        let Some((k, v)) = self.tree.range(range).next_back().transpose()? else { return Ok((1, 1)) };
        let number = |b: &[u8]| b.try_into().map(u64::from_be_bytes).ok();
        match (number(&k[k.len().saturating_sub(8)..]), number(&v)) {
            (Some(seq), Some(stream_seq)) => Ok((seq, stream_seq)),
            _ => Ok((1, 1)),
        }
    }

    pub fn cursor(&self, name: &str) -> Result<u64, StoreError> {
        Ok(self.tree.get(meta_key(name))?.and_then(|v| <[u8; 8]>::try_from(v.as_ref()).ok()).map(u64::from_be_bytes).unwrap_or(0))
    }

    pub fn put_json<T: Serialize>(&self, key: &[u8], value: &T) -> Result<(), StoreError> {
        self.tree.insert(key, serde_json::to_vec(value)?)?;
        Ok(())
    }
}

pub use halyard_protocol::rfc3339;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn audit_records_read_newest_first_and_the_old_ones_are_pruned() {
        let db = sled::Config::new().temporary(true).open().unwrap();
        let tree = db.open_tree("t").unwrap();
        let (all, acme) = (AuditScope::all(), AuditScope::org("acme"));
        for (t, seq) in [(1_000, 1), (3_000, 4), (2_000, 2), (2_000, 3)] {
            let org = (seq % 2 == 1).then_some("acme");
            let row =
                serde_json::json!({"time": "", "actor": "a", "action": "x.y", "target": "", "org": org, "detail": null, "client": null});
            tree.insert(all.key(t, seq), serde_json::to_vec(&row).unwrap()).unwrap();
            if org.is_some() {
                tree.insert(acme.key(t, seq), &b"copy"[..]).unwrap();
            }
        }
        tree.insert(b"B-other", &b"x"[..]).unwrap();
        let times = |scope: &AuditScope| -> Vec<i64> { tree.scan_prefix(scope.prefix()).keys().map(|k| scope.time(&k.unwrap())).collect() };
        assert_eq!(times(&all), vec![3_000, 2_000, 2_000, 1_000]);
        assert_eq!(times(&acme), vec![2_000, 1_000]);
        // Within a millisecond, the later in the stream first.
        let seqs: Vec<Vec<u8>> = tree.scan_prefix(all.prefix()).keys().map(|k| k.unwrap()[9..].to_vec()).collect();
        assert_eq!(seqs[1..3], [(u64::MAX - 3).to_be_bytes().to_vec(), (u64::MAX - 2).to_be_bytes().to_vec()]);
        assert_eq!(prune_audit(&tree, 2_000).unwrap(), 1, "only the record before the cutoff");
        assert_eq!(times(&all), vec![3_000, 2_000, 2_000]);
        assert_eq!(times(&acme), vec![2_000], "the organization's copy went with it");
        assert!(tree.contains_key(b"B-other").unwrap());
    }
}
