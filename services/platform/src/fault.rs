//! Fault injection for tests: kills this process at a chosen point of a chosen command's
//! handling, as a crash would, so that tests can show every command is applied exactly once
//! whichever moment a service dies at.
//!
//! `HALYARD_FAULT=<service>:<kind>:<point>[:<once-file>][,...]`, e.g.
//! `agent:cmd.agent.start:before_ack`:
//! - `received`: the message was pulled, nothing done yet;
//! - `before_ack`: the handler applied it and is about to acknowledge it;
//! - `after_ack`: acknowledged, nothing after.
//!
//! With a once-file (a path without `:`), the fault fires only in the process that creates
//! that file first: replicas given the same setting take turns, the first to get there dies and
//! the others carry on, so a test sees a peer take over the command.
//!
//! Honoured only in debug builds (what the tests run); a release build ignores the setting, so a
//! production deployment cannot be made to crash by it.

use std::sync::OnceLock;

/// A moment of a command's handling.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Point {
    Received,
    BeforeAck,
    AfterAck,
}

impl Point {
    fn parse(s: &str) -> Option<Self> {
        match s {
            "received" => Some(Self::Received),
            "before_ack" => Some(Self::BeforeAck),
            "after_ack" => Some(Self::AfterAck),
            _ => None,
        }
    }
}

#[derive(Debug, PartialEq, Eq)]
struct Fault {
    service: String,
    kind: String,
    point: Point,
    once: Option<std::path::PathBuf>,
}

static FAULTS: OnceLock<Vec<Fault>> = OnceLock::new();

/// Parses the setting; an error names what is wrong.
fn parse(spec: &str) -> Result<Vec<Fault>, String> {
    spec.split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(|one| {
            let mut parts = one.split(':');
            match (parts.next(), parts.next(), parts.next().and_then(Point::parse), parts.next(), parts.next()) {
                (Some(service), Some(kind), Some(point), once, None)
                    if !service.is_empty() && !kind.is_empty() && once.is_none_or(|p| !p.is_empty()) =>
                {
                    Ok(Fault { service: service.to_owned(), kind: kind.to_owned(), point, once: once.map(Into::into) })
                }
                _ => Err(format!("`{one}` is not <service>:<kind>:<received|before_ack|after_ack>[:<once-file>]")),
            }
        })
        .collect()
}

/// Checks the setting (`Config::load` calls it, so a wrong one stops the start).
pub fn check(spec: &str) -> Result<(), String> {
    parse(spec).map(drop)
}

/// Installs the faults of `spec` for this process (once; later calls change nothing). Ignored
/// in release builds.
pub fn install(spec: &str) {
    if !cfg!(debug_assertions) || spec.trim().is_empty() {
        return;
    }
    if let Ok(faults) = parse(spec) {
        tracing::warn!(faults = spec, "fault injection is on: this process will abort where it says");
        let _ = FAULTS.set(faults);
    }
}

/// Whether any fault is installed (callers skip the work of naming what they handle if not).
pub fn active() -> bool {
    FAULTS.get().is_some()
}

/// Aborts the process if a fault is installed for `service` handling `kind` at `point`.
pub fn hit(service: &str, kind: &str, point: Point) {
    let Some(faults) = FAULTS.get() else { return };
    let first = |f: &Fault| match &f.once {
        Some(path) => std::fs::OpenOptions::new().write(true).create_new(true).open(path).is_ok(),
        None => true,
    };
    if faults.iter().any(|f| f.service == service && f.kind == kind && f.point == point && first(f)) {
        tracing::error!(service, kind, ?point, "injected fault: aborting");
        eprintln!("HALYARD_FAULT_HIT {service}:{kind}:{point:?}");
        std::process::abort();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn settings_are_read_or_refused_in_words() {
        assert_eq!(
            parse("agent:cmd.agent.start:before_ack, conversations:cmd.conversation.start:received:/tmp/once").unwrap(),
            vec![
                Fault { service: "agent".into(), kind: "cmd.agent.start".into(), point: Point::BeforeAck, once: None },
                Fault {
                    service: "conversations".into(),
                    kind: "cmd.conversation.start".into(),
                    point: Point::Received,
                    once: Some("/tmp/once".into())
                },
            ]
        );
        assert!(check("agent:cmd.agent.start:later").unwrap_err().contains("received|before_ack|after_ack"));
        assert!(check("agent:cmd.agent.start:received:").is_err());
        assert!(check("agent:cmd.agent.start:received:/a:b").is_err());
        assert!(check("agent:cmd.agent.start").is_err());
        assert!(check("").is_ok());
    }
}
