//! Stored rows of the read model that are kept apart from the API's types: a webhook's delivery
//! attempts, an automation's runs, the audit trail. Each is written by the projection from the
//! bus record it folds and read back by handlers, which turn it into what the API shows; so a
//! response can change shape without the stored format changing under the records already kept.
//!
//! The rows' JSON is the format the read model has always held (a test below decodes records
//! as they were written before these types existed): a field may only be added as optional.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use halyard_protocol::accounts::AuditRecord;
use halyard_protocol::automation::AutomationRun;
use halyard_protocol::rfc3339;
use halyard_protocol::webhook::DeliveryAttempt;

/// One delivery attempt of a webhook.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct AttemptRow {
    pub delivery_id: String,
    pub event_id: String,
    pub conversation_id: String,
    pub seq: u64,
    pub attempt: u32,
    pub status_code: Option<u16>,
    pub error: Option<String>,
    pub duration_ms: u64,
    /// `succeeded`, `retrying` or `failed`.
    pub outcome: String,
    /// RFC 3339.
    pub time: String,
}

impl From<&DeliveryAttempt> for AttemptRow {
    fn from(a: &DeliveryAttempt) -> Self {
        Self {
            delivery_id: a.delivery_id.to_string(),
            event_id: a.event_id.to_string(),
            conversation_id: a.conversation_id.to_string(),
            seq: a.seq,
            attempt: a.attempt,
            status_code: a.status_code,
            error: a.error.clone(),
            duration_ms: a.duration_ms,
            outcome: serde_json::to_value(a.outcome).ok().and_then(|v| v.as_str().map(str::to_owned)).unwrap_or_default(),
            time: rfc3339(a.time_ms),
        }
    }
}

/// One run of an automation.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct RunRow {
    pub id: String,
    /// RFC 3339.
    pub time: String,
    pub source: String,
    pub trigger: String,
    /// `started`, `continued`, `ignored` or `failed`.
    pub outcome: String,
    pub conversation_id: Option<String>,
    pub reason: Option<String>,
}

impl From<&AutomationRun> for RunRow {
    fn from(r: &AutomationRun) -> Self {
        Self {
            id: r.run_id.clone(),
            time: rfc3339(r.time_ms),
            source: r.source.clone(),
            trigger: r.trigger.clone(),
            outcome: r.outcome.as_str().to_owned(),
            conversation_id: r.conversation_id.map(|c| c.to_string()),
            reason: r.reason.clone(),
        }
    }
}

/// One record of the audit trail.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct AuditRow {
    /// RFC 3339.
    pub time: String,
    pub actor: String,
    pub action: String,
    pub target: String,
    pub org: Option<String>,
    /// An object (`{"note": ...}` for records whose detail was a sentence).
    pub detail: Value,
    pub client: Option<String>,
}

impl From<&AuditRecord> for AuditRow {
    fn from(r: &AuditRecord) -> Self {
        let detail = match &r.detail {
            None => Value::Object(Default::default()),
            Some(Value::String(s)) => serde_json::json!({ "note": s }),
            Some(v) => v.clone(),
        };
        Self {
            time: rfc3339(r.at_ms),
            actor: r.actor.0.clone(),
            action: r.action.clone(),
            target: r.target.clone(),
            org: r.org.clone(),
            detail,
            client: r.client.clone(),
        }
    }
}

/// What a conversation's sandbox reached through its egress proxy: the totals of its
/// `network_used` events per destination, and its `network_blocked` events per destination and
/// rule.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct NetworkRow {
    #[serde(default)]
    pub reached: Vec<halyard_protocol::egress::NetworkUse>,
    #[serde(default)]
    pub refused: Vec<RefusedRow>,
}

/// Connections refused to one destination by one rule.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct RefusedRow {
    pub host: String,
    pub port: u16,
    pub rule: String,
    pub count: u64,
}

impl NetworkRow {
    /// Adds a report's traffic.
    pub fn add(&mut self, used: &[halyard_protocol::egress::NetworkUse]) {
        for u in used {
            match self.reached.iter_mut().find(|r| r.host == u.host && r.port == u.port) {
                Some(r) => {
                    r.connections += u.connections;
                    r.bytes_sent += u.bytes_sent;
                    r.bytes_received += u.bytes_received;
                }
                None => self.reached.push(u.clone()),
            }
        }
        self.reached.sort_by(|a, b| (&a.host, a.port).cmp(&(&b.host, b.port)));
    }

    /// Counts a refusal.
    pub fn refuse(&mut self, host: &str, port: u16, rule: &str) {
        match self.refused.iter_mut().find(|r| r.host == host && r.port == port && r.rule == rule) {
            Some(r) => r.count += 1,
            None => self.refused.push(RefusedRow { host: host.to_owned(), port, rule: rule.to_owned(), count: 1 }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Rows as the read model held them before they had types of their own (written then as the
    /// API's response types) still read.
    #[test]
    fn rows_written_before_read_back() {
        let attempt: AttemptRow = serde_json::from_str(
            r#"{"delivery_id":"0193a1b2-0000-8000-8000-000000000001","event_id":"0193a1b2-0000-7000-8000-000000000002",
                "conversation_id":"0193a1b2-0000-7000-8000-000000000003","seq":4,"attempt":2,"status_code":503,
                "error":"HTTP 503","duration_ms":12,"outcome":"retrying","time":"2026-11-20T10:00:00Z"}"#,
        )
        .unwrap();
        assert_eq!((attempt.seq, attempt.attempt, attempt.status_code, attempt.outcome.as_str()), (4, 2, Some(503), "retrying"));
        let run: RunRow = serde_json::from_str(
            r#"{"id":"0193a1b2-0000-8000-8000-000000000009","time":"2026-11-20T10:00:00Z","source":"github",
                "trigger":"delivery 72d3","outcome":"ignored","conversation_id":null,"reason":"no mention"}"#,
        )
        .unwrap();
        assert_eq!((run.outcome.as_str(), run.reason.as_deref(), run.conversation_id), ("ignored", Some("no mention"), None));
        let audit: AuditRow = serde_json::from_str(
            r#"{"time":"2026-11-20T10:00:00Z","actor":"ada","action":"secret.put","target":"user:ada/secret:GH",
                "org":null,"detail":{"note":"set"},"client":"10.0.0.7"}"#,
        )
        .unwrap();
        assert_eq!((audit.actor.as_str(), audit.detail["note"].as_str(), audit.client.as_deref()), ("ada", Some("set"), Some("10.0.0.7")));
    }
}
