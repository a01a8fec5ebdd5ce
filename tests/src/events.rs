//! Reading a conversation's events as a test checks them: how its runs ended. One meaning each:
//! a run *finished* when an `execution_status` event says `finished`; it *ended* when one says
//! `finished` or `error`.

use serde_json::Value;

/// The runs the events show finished.
pub fn finished_runs(events: &[Value]) -> usize {
    events.iter().filter(|e| e["kind"] == "execution_status" && e["status"] == "finished").count()
}

/// Whether a run finished.
pub fn finished(events: &[Value]) -> bool {
    finished_runs(events) > 0
}

/// Whether a run ended, finished or in an error.
pub fn ended(events: &[Value]) -> bool {
    events.iter().any(|e| e["kind"] == "execution_status" && (e["status"] == "finished" || e["status"] == "error"))
}

/// The latest execution status, if any.
pub fn last_status(events: &[Value]) -> Option<String> {
    events.iter().rev().find(|e| e["kind"] == "execution_status").and_then(|e| e["status"].as_str()).map(str::to_owned)
}
