//! Batches: many starts run as one, a few at a time, each an ordinary conversation tagged with
//! its batch, whose results make one table. A [`Batch`] is an entry of the automations bucket
//! ([`batch_key`]), written by the gateway (created, paused, resumed, cancelled, items sent to
//! run again) and by the automation service, which runs it: it starts the next waiting items
//! while fewer than `concurrency` run, and marks an item ended when its conversation's run ends
//! (or its start fails). A conversation of a batch has a key of its own ([`batch_conversation_key`])
//! naming its batch and item, so the end of its run finds them.
//!
//! Every start's ids are derived from the batch, the item and its round (by the automation
//! service): a start sent again after a restart is the same start (the same command id, task and
//! conversation), so no item runs twice and none is lost.

use serde::{Deserialize, Serialize};

use crate::event::{Budget, Checks};
use crate::system::Repository;
use crate::{ConversationId, UnixMillis, UserId};

/// The most items one batch may hold.
pub const MAX_ITEMS: usize = 500;
/// The most of its items that may run at once.
pub const MAX_CONCURRENCY: u32 = 32;

/// The automations bucket's key of batch `id`.
pub fn batch_key(id: &str) -> String {
    format!("batch.{id}")
}

/// The prefix of every batch's key (for watching them).
pub const BATCH_PREFIX: &str = "batch.";

/// The automations bucket's key of a batch's conversation.
pub fn batch_conversation_key(conversation: ConversationId) -> String {
    format!("batchconv.{conversation}")
}

/// What one item starts: an ordinary start, less what the batch sets for all.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct BatchItem {
    pub message: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub title: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub repository: Option<Repository>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub environment: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sandbox_spec: Option<String>,
    /// The item's LLM profile (else the batch's, else the owner's default).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub llm_profile: Option<String>,
}

/// Where a batch stands.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "snake_case")]
pub enum BatchStatus {
    /// Its items start as others end.
    #[default]
    Running,
    /// No item starts; those running go on.
    Paused,
    /// No item starts again; those running go on.
    Cancelled,
    /// Every item ended.
    Done,
}

impl BatchStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Running => "running",
            Self::Paused => "paused",
            Self::Cancelled => "cancelled",
            Self::Done => "done",
        }
    }
}

/// Where one item's latest run stands.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct ItemRun {
    /// How often it was sent to run again (0: its first run).
    #[serde(default)]
    pub round: u32,
    /// Its conversation, once started.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub conversation_id: Option<ConversationId>,
    /// How its run ended (`finished`, `error`, `stuck`, `idle`, `start_failed`), once it did.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ended: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub started_ms: Option<UnixMillis>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ended_ms: Option<UnixMillis>,
}

impl ItemRun {
    pub fn running(&self) -> bool {
        self.conversation_id.is_some() && self.ended.is_none()
    }
    pub fn waiting(&self) -> bool {
        self.conversation_id.is_none()
    }
}

/// A batch, as stored.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Batch {
    pub id: String,
    pub owner: UserId,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    pub created_ms: UnixMillis,
    pub concurrency: u32,
    pub items: Vec<BatchItem>,
    /// How many times each item runs, side by side (best of N: the best attempt is the item's
    /// result).
    #[serde(default = "one")]
    pub attempts: u32,
    /// `attempts` per item, item by item: run `r` is attempt `r % attempts` of item
    /// `r / attempts`.
    pub runs: Vec<ItemRun>,
    pub status: BatchStatus,
    /// What every item's work is checked against.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub checks: Option<Checks>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub llm_profile: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub budget: Option<Budget>,
}

fn one() -> u32 {
    1
}

/// The most attempts one item may have.
pub const MAX_ATTEMPTS: u32 = 8;

impl Batch {
    /// The item and attempt of run `r`.
    pub fn item_of(&self, r: usize) -> (usize, u32) {
        let n = self.attempts.max(1) as usize;
        (r / n, (r % n) as u32)
    }

    /// The runs of item `i` (its attempts).
    pub fn runs_of(&self, i: usize) -> &[ItemRun] {
        let n = self.attempts.max(1) as usize;
        self.runs.get(i * n..(i + 1) * n).unwrap_or_default()
    }

    /// How many of its items run now.
    pub fn running(&self) -> usize {
        self.runs.iter().filter(|r| r.running()).count()
    }

    /// Whether every item ended.
    pub fn all_ended(&self) -> bool {
        self.runs.iter().all(|r| r.ended.is_some())
    }
}

/// The key of `user`'s templates in the user bucket.
pub fn templates_key(user: &UserId) -> String {
    format!("templates.{user}")
}

/// The key of organization `org`'s templates (its members start from them as
/// `@<org>/<name>`) in the user bucket.
pub fn org_templates_key(org: &str) -> String {
    format!("orgtemplates.{org}")
}

/// A stored start with `{{parameters}}` in its text (the message, title, repository and
/// environment), filled from a row of values: a batch's `rows` make one item each.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Template {
    pub item: BatchItem,
    /// What the work of its starts is checked against (a batch's own `verify` comes first).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub checks: Option<Checks>,
    pub updated_ms: UnixMillis,
}

/// A user's templates, by name.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Templates {
    #[serde(default)]
    pub templates: std::collections::BTreeMap<String, Template>,
}

/// The names of the parameters `text` uses (`{{name}}`: letters, digits, `_`), in order, once
/// each; an error for a `{{` that does not open one.
pub fn parameters(text: &str) -> Result<Vec<String>, String> {
    let mut names: Vec<String> = Vec::new();
    let mut rest = text;
    while let Some(at) = rest.find("{{") {
        let after = &rest[at + 2..];
        let end = after.find("}}").ok_or_else(|| format!("`{{{{` without `}}}}` in {text:?}"))?;
        let name = after[..end].trim();
        if name.is_empty() || !name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
            return Err(format!("`{{{{{name}}}}}` is not a parameter: a name of letters, digits and `_`"));
        }
        if !names.iter().any(|n| n == name) {
            names.push(name.to_owned());
        }
        rest = &after[end + 2..];
    }
    Ok(names)
}

/// `text` with each `{{name}}` replaced by `values[name]`; an error naming the first missing.
pub fn fill(text: &str, values: &std::collections::BTreeMap<String, String>) -> Result<String, String> {
    parameters(text)?;
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(at) = rest.find("{{") {
        out.push_str(&rest[..at]);
        let after = &rest[at + 2..];
        let end = after.find("}}").unwrap_or(after.len());
        let name = after[..end].trim();
        out.push_str(values.get(name).ok_or_else(|| format!("no value for `{name}`"))?);
        rest = after.get(end + 2..).unwrap_or_default();
    }
    out.push_str(rest);
    Ok(out)
}

impl Template {
    /// The item this template makes of `values`.
    pub fn item(&self, values: &std::collections::BTreeMap<String, String>) -> Result<BatchItem, String> {
        let opt = |t: &Option<String>| t.as_deref().map(|t| fill(t, values)).transpose();
        let repository = match &self.item.repository {
            Some(r) => Some(Repository { url: fill(&r.url, values)?, branch: opt(&r.branch)? }),
            None => None,
        };
        Ok(BatchItem {
            message: fill(&self.item.message, values)?,
            title: opt(&self.item.title)?,
            repository,
            environment: opt(&self.item.environment)?,
            sandbox_spec: self.item.sandbox_spec.clone(),
            llm_profile: self.item.llm_profile.clone(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    #[test]
    fn parameters_are_found_and_filled() {
        assert_eq!(parameters("Fix {{issue}} in {{ repo }}, then {{issue}}").unwrap(), ["issue", "repo"]);
        assert!(parameters("a {{b").is_err());
        assert!(parameters("a {{b c}}").is_err());
        let values = BTreeMap::from([("issue".to_owned(), "#12".to_owned()), ("repo".to_owned(), "app".to_owned())]);
        assert_eq!(fill("Fix {{issue}} in {{ repo }}", &values).unwrap(), "Fix #12 in app");
        assert_eq!(fill("{{missing}}", &values).unwrap_err(), "no value for `missing`");
    }
}
